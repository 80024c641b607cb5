/*
 * mpi_close.c - the end of an MPI communicator: its MPI communicators are
 * freed only once every peer has closed its end.
 *
 * Why. A message that reaches a process after it freed the MPI communicator
 * it was sent on is not dropped: OpenMPI keeps it for a communicator not yet
 * created and gives it to the next one that is given the same context id,
 * where it is taken for that communicator's own (a peer's leave notice read
 * as "rank 2 ended its step" in a new replicator's first collective, or a
 * crash when its sequence number is out of place: test_topology_mpi, when
 * destroy first told the other ranks). Peers that destroy a communicator at
 * different times, a started role still sending to a member whose
 * replicator was destroyed, a notice sent as a peer leaves: each can send
 * after the receiver has freed.
 *
 * How. Destroy sends every peer a close (TAG_CLOSE, its last message on the
 * communicator) holding the number of point-to-point messages it sent that
 * peer on each channel, and moves the MPI communicators to a list. A closing
 * communicator is freed once every peer's close has come and every message
 * the closes count has been taken (received and dropped if nobody had); as
 * MPI keeps one sender's messages in order, nothing can come after. Until
 * then its context id stays taken, so a new communicator gets another. The
 * list is looked at (reaped) when a communicator is closed or created, and
 * at MPI's finalize, where what is still waiting for a peer is left
 * allocated (a peer that never destroys its end, or died). Destroy itself
 * never waits for its peers: ranks that destroy their communicators in
 * different orders cannot wait for each other.
 *
 * While a communicator lives, a peer's close is read with the other notices
 * (comm_mpi_poll_notices): a send to a member that has closed fails at once,
 * and so does a receive of a message it did not send before closing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/mpi_internal.h"

typedef struct closing {
    struct closing *next;
    MPI_Comm comm;
    MPI_Comm *pc; /* [lanes] */
    int size, rank, lanes;
    bool *closed;       /* [size] the peer's close has come */
    uint64_t *owed;     /* [size * lanes * lanes] as rcvd: the messages each peer sent here */
    uint64_t *rcvd;     /* [size * lanes * lanes] the messages taken here */
    MPI_Request *sends; /* [size] this rank's closes */
    uint64_t *payload;  /* [size][lanes * lanes] their contents */
} closing;

/* Under the MPI lock. */
static closing *list;

static void closing_free(closing *e)
{
    free(e->pc);
    free(e->closed);
    free(e->owed);
    free(e->rcvd);
    free(e->sends);
    free(e->payload);
    free(e);
}

/* Receives (and drops) the message `msg` of `bytes` bytes, or into `into` if given. */
static void take(MPI_Message *msg, int bytes, void *into)
{
    void *buf = into ? into : malloc(bytes > 0 ? (size_t)bytes : 1);
    MPI_Mrecv(buf, buf ? bytes : 0, MPI_BYTE, msg, MPI_STATUS_IGNORE);
    if (!into) free(buf);
}

/*
 * Takes what has come for e: each open peer's messages on the collectives' communicator up to
 * its close (probing with any tag, so in the order they were sent), and every point-to-point
 * message, counted by channel. True once nothing more can come. Under the lock.
 */
static bool drain(closing *e)
{
    int L = e->lanes, LL = L * L;
    for (int q = 0; q < e->size; q++) {
        while (q != e->rank && !e->closed[q]) {
            int flag = 0, bytes = 0;
            MPI_Message msg;
            MPI_Status st;
            MPI_Improbe(q, MPI_ANY_TAG, e->comm, &flag, &msg, &st);
            if (!flag) break;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            bool close = st.MPI_TAG == TAG_CLOSE && bytes == (int)(LL * sizeof(uint64_t));
            take(&msg, bytes, close ? &e->owed[(size_t)q * (size_t)LL] : NULL);
            e->closed[q] = close;
        }
    }
    for (int l = 0; l < L; l++)
        for (;;) {
            int flag = 0, bytes = 0;
            MPI_Message msg;
            MPI_Status st;
            MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, e->pc[l], &flag, &msg, &st);
            if (!flag) break;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            take(&msg, bytes, NULL);
            int slane = (st.MPI_TAG >> 3) % L;
            e->rcvd[((size_t)st.MPI_SOURCE * (size_t)L + (size_t)slane) * (size_t)L + (size_t)l]++;
        }
    for (int q = 0; q < e->size; q++)
        if (q != e->rank && !e->closed[q]) return false;
    for (size_t i = 0; i < (size_t)e->size * (size_t)LL; i++)
        if (e->rcvd[i] < e->owed[i]) return false;
    int done = 0;
    MPI_Testall(e->size, e->sends, &done, MPI_STATUSES_IGNORE);
    return done;
}

static void reap_locked(bool final)
{
    for (closing **p = &list; *p;) {
        closing *e = *p;
        if (drain(e)) {
            for (int l = 0; l < e->lanes; l++)
                MPI_Comm_free(&e->pc[l]);
            MPI_Comm_free(&e->comm);
        } else if (final) {
            /* A peer that never closed: the communicators stay allocated (no id is reused
               after finalize); the closes still in flight keep their buffer. */
            for (int q = 0; q < e->size; q++)
                if (e->sends[q] != MPI_REQUEST_NULL) MPI_Request_free(&e->sends[q]);
            e->payload = NULL;
        } else {
            p = &e->next;
            continue;
        }
        *p = e->next;
        closing_free(e);
    }
}

void comm_mpi_reap(bool final)
{
    lock();
    reap_locked(final);
    unlock();
}

void comm_mpi_close(rp_comm *c)
{
    mpi_impl *m = M(c);
    if (m->comm == MPI_COMM_NULL) return;
    int n = c->size, L = m->lanes > 0 ? m->lanes : 1, LL = L * L;
    size_t channels = (size_t)n * (size_t)LL;
    closing *e = calloc(1, sizeof *e);
    if (e) {
        e->closed = calloc((size_t)n, sizeof *e->closed);
        e->owed = calloc(channels, sizeof *e->owed);
        e->rcvd = calloc(channels, sizeof *e->rcvd);
        e->sends = malloc((size_t)n * sizeof *e->sends);
        e->payload = calloc(channels, sizeof *e->payload);
        e->pc = calloc((size_t)L, sizeof *e->pc);
    }
    lock();
    if (!e || !e->closed || !e->owed || !e->rcvd || !e->sends || !e->payload || !e->pc ||
        m->lanes < 1) {
        /* Out of memory: never freed is safe (the ids are not reused). */
        if (e) closing_free(e);
        m->comm = MPI_COMM_NULL;
        for (int l = 0; m->pc && l < m->lanes; l++)
            m->pc[l] = MPI_COMM_NULL;
        unlock();
        return;
    }
    /* The closes that came already (their messages before them were read or are here). */
    comm_mpi_poll_notices(c);
    e->size = n;
    e->rank = c->rank;
    e->lanes = L;
    e->comm = m->comm;
    memcpy(e->pc, m->pc, (size_t)L * sizeof *e->pc);
    memcpy(e->rcvd, m->rcvd, channels * sizeof *e->rcvd);
    for (int q = 0; q < n; q++) {
        e->sends[q] = MPI_REQUEST_NULL;
        e->closed[q] = q == c->rank || m->left[q].closed;
        if (q != c->rank && m->left[q].closed)
            memcpy(&e->owed[(size_t)q * (size_t)LL], &m->peer_sent[(size_t)q * (size_t)LL],
                   (size_t)LL * sizeof *e->owed);
    }
    /* To peer q: what each lane here sent each lane there, in q's order (its rcvd). */
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        uint64_t *out = &e->payload[(size_t)q * (size_t)LL];
        for (int s = 0; s < L; s++)
            for (int d = 0; d < L; d++)
                out[s * L + d] =
                    m->sent[((size_t)q * (size_t)L + (size_t)d) * (size_t)L + (size_t)s];
        MPI_Isend(out, (int)(LL * sizeof *out), MPI_BYTE, q, TAG_CLOSE, m->comm, &e->sends[q]);
    }
    m->comm = MPI_COMM_NULL;
    for (int l = 0; l < m->lanes; l++)
        m->pc[l] = MPI_COMM_NULL;
    e->next = list;
    list = e;
    reap_locked(false);
    unlock();
}
