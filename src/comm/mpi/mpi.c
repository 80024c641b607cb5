/*
 * mpi.c - the MPI communicator: one member per process (OpenMPI).
 *
 * Every collective is checked against the peers' calls. A call that moves
 * data between every pair of ranks carries a hash of its descriptor in the
 * MPI tag of those messages (see "The call check" below); the others start
 * with an exchange of calls: each rank sends its call (kind, count, dtype,
 * op, root, sequence number) to every other rank and receives theirs, with
 * non-blocking point-to-point messages polled against the deadline. So
 * every rank reports a mismatch the same way the threads backend does, and
 * a rank that never arrives (dead, stopped, or in another call) is named -
 * by rank and host - when the deadline passes, instead of hanging in a
 * blocking collective.
 *
 * The data then moves in non-blocking point-to-point messages with each
 * peer, polled the same way, so a peer that stops in the middle of a call
 * is named too: the messages still pending say whose part is missing. An
 * all-reduce is an exchange of slices (rank r receives slice r of every
 * rank's input), a local reduction of the N slices in rank order, and an
 * exchange of the reduced slices: the bytes of a ring all-reduce, and the
 * same bits as the threads backend on every rank.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"

#define TAG_CALL 7001
#define TAG_DATA 7002
#define TAG_NOTICE 7003 /* a point-to-point mismatch, told to the sender */
#define TAG_LEFT 7004   /* a peer's step ended (rp_comm_leave) or it gave up (timed out), with its reason */
#define HOST_MAX 64
#define NOTICE_MAX 1024

/* A peer's leave (or give-up) notice, as received. */
typedef struct left_note {
    bool left;
    bool blames_me;  /* it gave up waiting for this rank */
    rp_status status;
    char reason[NOTICE_MAX];
} left_note;

/*
 * MPI is initialised for one calling thread at a time (MPI_THREAD_SERIALIZED);
 * the groups of a hierarchical communicator have one caller each, so every
 * MPI call goes through this lock. It is held for a call (or a few posted
 * together), never across a wait: a group waiting for its peers never holds
 * up another group.
 */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static void lock(void) { pthread_mutex_lock(&mpi_mu); }
static void unlock(void) { pthread_mutex_unlock(&mpi_mu); }

/* The same lock for the process's other MPI users (the parameter servers, src/ps/mpi/). */
void rp_mpi_lock(void) { lock(); }
void rp_mpi_unlock(void) { unlock(); }

typedef struct mpi_impl {
    MPI_Comm comm;
    char (*hosts)[HOST_MAX]; /* [size] host of each rank, for messages */
    rp_coll_desc *calls;     /* [size] the calls of the current collective */
    MPI_Request *reqs;       /* [2 * size] */
    const void **blocks;     /* [size] the received blocks of a reduction */
    char *scratch;           /* all-reduce / reduce-scatter blocks, grown as needed */
    char *xfer;              /* per-peer buffers and sizes of a data exchange */
    size_t scratch_bytes;
    bool broken;
    rp_status broken_status;
    char reason[1024];
    /* Point-to-point (see its section): lanes, their communicators and state. */
    int lanes;
    MPI_Comm *pc;                /* [lanes] */
    struct lane_state *lane;     /* [lanes] */
    uint64_t *sent, *rcvd;       /* [size * lanes * lanes] messages per channel */
    int *lane_rank;              /* [size * lanes] or NULL */
    int *lane_ids;               /* [members] their replica ids, with lane_rank */
    int64_t tag_limit;
    struct left_note *left;      /* [size] the peers' leave notices */
    MPI_Request notice_req;
    char notice[1100];
    double notices_due;          /* when p2p next looks for notices (poll_notices_due) */
    /* The call check (see mpi_collective). */
    bool hashed;                 /* the current call checks by its data messages' tag */
    int tag;                     /* that tag */
    const rp_coll_desc *desc;    /* the current call */
    bool disagree;               /* a peer was seen in another call: diagnose */
    int left_q;                  /* >= 0: that peer's leave notice came instead */
    double stalled;              /* the longest gap between this rank's polls in the current wait */
    rp_coll_desc *early;         /* [size] a call a peer sent ahead of this rank's */
    bool *early_ok;              /* [size] */
    int *from;                   /* [2 * size] scratch: the peer of each request */
    bool *missing;               /* [size] the peers a timeout gave up on (told to the peers: give_up) */
} mpi_impl;

static const rp_comm_ops mpi_ops;

static mpi_impl *M(const rp_comm *c) { return c->impl; }

static void mark_broken(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    if (m->broken) return;
    m->broken = true;
    m->broken_status = status;
    snprintf(m->reason, sizeof m->reason, "%.*s", (int)sizeof m->reason - 1, reason);
}

static void pause_briefly(unsigned polls)
{
    if (polls < 2000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/*
 * A gap between two polls of one wait much longer than a poll (a quarter of
 * the timeout) says this process itself was not running - stopped
 * (SIGSTOP), or descheduled - so a timeout is its own doing, not a peer's.
 * *stalled keeps the longest such gap (monotonic clock).
 */
static void note_gap(double *last, double timeout, double *stalled)
{
    double now = rp_now_s(), gap = now - *last;
    if (gap > timeout / 4 && gap > *stalled) *stalled = gap;
    *last = now;
}

static void poll_notices(rp_comm *c);

/*
 * Why this rank timed out if the fault is its own, for the start of its
 * timeout message ("" if not): it was not running during the wait (a gap,
 * see note_gap), or a peer had already given up on it (that peer timed out
 * first, waiting for this rank, and said so: give_up) - this rank was stopped
 * or descheduled before the call. Then the peers it still misses are not
 * to blame. Looks for such notices for a few milliseconds (MPI delivers a
 * notice only as it makes progress).
 */
static const char *own_fault(rp_comm *c, char *buf, size_t size)
{
    mpi_impl *m = M(c);
    buf[0] = '\0';
    if (m->stalled > 0) {
        snprintf(buf, size, "this rank was not running for %.1f s (stopped or descheduled?), so its peers may have "
                 "given up on it; still missing: ", m->stalled);
        return buf;
    }
    for (int i = 0; i < 100; i++) {
        lock();
        poll_notices(c);
        unlock();
        for (int q = 0; q < c->size; q++) {
            const left_note *ln = &m->left[q];
            if (!ln->left || !ln->blames_me) continue;
            snprintf(buf, size, "rank %d (%s) had already given up on this rank (\"%.300s\"): this rank was late "
                     "(stopped or descheduled before the call?); still missing: ", q, m->hosts[q], ln->reason);
            return buf;
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return buf;
}

/*
 * Tells every peer that this rank gave up on the communicator (a timeout),
 * with its message, without waiting for them: a peer that comes late reads
 * it (own_fault) instead of blaming this rank for not coming.
 */
static void give_up(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    int n = c->size, k = 0;
    size_t cap = (size_t)(n + 2) * sizeof(int) + NOTICE_MAX;
    char *why = malloc(cap);
    if (!why) return;
    size_t off = 2 * sizeof(int);
    for (int q = 0; q < n; q++)
        if (m->missing[q]) {
            memcpy(why + off, &q, sizeof q);
            off += sizeof q;
            k++;
        }
    int head[2] = {(int)status, k};
    memcpy(why, head, sizeof head);
    snprintf(why + off, NOTICE_MAX, "%s", reason);
    int len = (int)(off + strlen(why + off) + 1);
    bool all_done = true;
    lock();
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        MPI_Request r;
        MPI_Isend(why, len, MPI_BYTE, q, TAG_LEFT, m->comm, &r);
        int done = 0;
        for (int i = 0; i < 100 && !done; i++) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) {
            MPI_Request_free(&r);
            all_done = false;
        }
    }
    unlock();
    /* A notice still in flight (to a dead peer) keeps its buffer: 1 KiB, once per broken communicator. */
    if (all_done) free(why);
}

static bool probe_peers(rp_comm *c, const rp_coll_desc *d, int n, MPI_Request *reqs);

/*
 * Polls reqs[0..n) until all complete or the deadline passes. On timeout
 * *pending (if given) gets, for each request, whether it is still pending.
 * In a hashed call (m->hashed; reqs in (recv, send) pairs per peer) it also
 * looks, now and then, at what the peers still pending have sent instead:
 * a sign that they are in another call sets m->disagree and returns
 * RP_ERR_MISMATCH (the caller diagnoses).
 */
static rp_status poll_all(rp_comm *c, int n, MPI_Request *reqs, double deadline, bool *pending,
                          const char *what)
{
    mpi_impl *m = M(c);
    double last = rp_now_s();
    m->stalled = 0;
    for (unsigned polls = 0;; polls++) {
        note_gap(&last, c->timeout, &m->stalled);
        int done = 0;
        lock();
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        bool other = !done && rc == MPI_SUCCESS && m->hashed && (polls & 31) == 31 && probe_peers(c, m->desc, n, reqs);
        unlock();
        if (rc != MPI_SUCCESS) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: MPI reported an error on rank %d (%s)", what, c->rank, M(c)->hosts[c->rank]);
            mark_broken(c, RP_ERR_BACKEND, msg);
            return RP_ERROR(RP_ERR_BACKEND, "%s", msg);
        }
        if (done) return RP_OK;
        if (other) return RP_ERR_MISMATCH;
        if (rp_now_s() > deadline) break;
        pause_briefly(polls);
    }
    lock();
    for (int i = 0; pending && i < n; i++) {
        int flag = 0;
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
        pending[i] = !flag && reqs[i] != MPI_REQUEST_NULL;
    }
    unlock();
    return RP_ERR_TIMEOUT;
}

/* Cancels (receives) and forgets requests that cannot complete any more. */
static void drop_requests(int n, MPI_Request *reqs, bool recv_first_of_pair)
{
    lock();
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL) {
            if (recv_first_of_pair && i % 2 == 0) MPI_Cancel(&reqs[i]);
            MPI_Request_free(&reqs[i]);
        }
    unlock();
}

/*
 * Every rank's call for this collective into m->calls; a timeout names the
 * ranks that did not send one. A call a peer sent early (seen while this
 * rank was still in its previous call) is taken from m->early.
 */
static rp_status exchange_calls(rp_comm *c, const rp_coll_desc *d, double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size, k = 0;
    m->calls[c->rank] = *d;
    lock();
    int *from = m->from;
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        if (m->early_ok[q]) {
            m->calls[q] = m->early[q];
            m->early_ok[q] = false;
            continue;
        }
        from[k] = q;
        MPI_Irecv(&m->calls[q], (int)sizeof(rp_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    }
    int recvs = k;
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        from[k] = q;
        MPI_Isend((void *)d, (int)sizeof(rp_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = k <= 2 * 4096 ? pending : NULL;
    char what[128];
    rp_coll_desc_str(d, what, sizeof what);
    bool hashed = m->hashed;
    m->hashed = false;
    rp_status status = poll_all(c, k, m->reqs, deadline, p, what);
    m->hashed = hashed;
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1400], own[512];
    own_fault(c, own, sizeof own);
    snprintf(msg, sizeof msg, "timed out after %gs in %s on rank %d (%s): %s", c->timeout, what, c->rank,
             m->hosts[c->rank], own);
    size_t len = strlen(msg);
    int missing = 0;
    /* A peer is missing if its call did not come, or (a send still pending) mine did not reach it. */
    bool *miss = calloc((size_t)n, sizeof *miss);
    for (int i = 0; p && miss && i < k; i++)
        if (p[i]) miss[from[i]] = true;
    for (int q = 0; q < n; q++) m->missing[q] = q != c->rank && !(p && miss && !miss[q]);
    for (int q = 0; q < n && len < sizeof msg; q++) {
        if (q == c->rank || (p && miss && !miss[q])) continue;
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d (%s)", missing++ ? ", " : "", q, m->hosts[q]);
    }
    free(miss);
    if (len < sizeof msg && !own[0])
        snprintf(msg + len, sizeof msg - len, "%s did not arrive (dead, stopped, or in another call)",
                 missing ? "" : "a peer");
    lock();
    for (int i = 0; i < k; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL) {
            if (i < recvs) MPI_Cancel(&m->reqs[i]);
            MPI_Request_free(&m->reqs[i]);
        }
    unlock();
    mark_broken(c, RP_ERR_TIMEOUT, msg);
    return RP_ERROR(RP_ERR_TIMEOUT, "%s", msg);
}

/*
 * Sends sbuf[q] (sbytes[q] bytes) to and receives rbuf[q] (rbytes[q]) from
 * every other rank q, polled against the deadline; a timeout names the
 * ranks whose messages are still pending. In a hashed call the messages
 * carry the call's tag (m->tag); `first` says whether this is the call's
 * first exchange (where a missing peer may be in another call).
 */
static rp_status exchange_data(rp_comm *c, const rp_coll_desc *d, double deadline, const void *const *sbuf,
                               const int *sbytes, void *const *rbuf, const int *rbytes, bool first)
{
    mpi_impl *m = M(c);
    int n = c->size, tag = m->hashed ? m->tag : TAG_DATA;
    /*
     * A hashed call sends even empty messages: every peer's tag must be seen
     * in the first exchange, and in the second a rank that gave up on the
     * call (timed out) must be missed, as before, by a late peer.
     */
    bool every = m->hashed;
    lock();
    for (int q = 0; q < n; q++) {
        m->reqs[2 * q] = m->reqs[2 * q + 1] = MPI_REQUEST_NULL;
        if (q == c->rank) continue;
        if (rbytes[q] > 0 || every) MPI_Irecv(rbuf[q], rbytes[q], MPI_BYTE, q, tag, m->comm, &m->reqs[2 * q]);
        if (sbytes[q] > 0 || every) MPI_Isend(sbuf[q], sbytes[q], MPI_BYTE, q, tag, m->comm, &m->reqs[2 * q + 1]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = n <= 4096 ? pending : NULL;
    char what[128];
    rp_coll_desc_str(d, what, sizeof what);
    rp_status status = poll_all(c, 2 * n, m->reqs, deadline, p, what);
    if (status == RP_ERR_MISMATCH) {
        drop_requests(2 * n, m->reqs, true);
        return status;
    }
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1400], own[512];
    bool agreed = !(every && first); /* in a hashed call's first exchange, a missing peer may be in another call */
    own_fault(c, own, sizeof own);
    size_t len = (size_t)snprintf(msg, sizeof msg, "timed out after %gs %s%s on rank %d (%s): %s", c->timeout,
                                  agreed ? "moving the data of " : "in ", what, c->rank, m->hosts[c->rank], own);
    int missing = 0;
    for (int q = 0; q < n; q++) m->missing[q] = p && (p[2 * q] || p[2 * q + 1]);
    for (int q = 0; p && q < n && len < sizeof msg; q++)
        if (p[2 * q] || p[2 * q + 1])
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d (%s)", missing++ ? ", " : "", q,
                                    m->hosts[q]);
    if (len < sizeof msg && !own[0])
        snprintf(msg + len, sizeof msg - len, "%s %s", missing ? "" : "a peer",
                 agreed ? "stopped or died after the call was agreed" : "did not arrive (dead, stopped, or in another call)");
    drop_requests(2 * n, m->reqs, true);
    mark_broken(c, RP_ERR_TIMEOUT, msg);
    return RP_ERROR(RP_ERR_TIMEOUT, "%s", msg);
}

static rp_status ensure_buffers(mpi_impl *m, int n, size_t scratch)
{
    if (scratch > m->scratch_bytes) {
        char *grown = realloc(m->scratch, scratch);
        if (!grown) return RP_ERROR(RP_ERR_NOMEM, "MPI communicator: %zu bytes of scratch", scratch);
        m->scratch = grown;
        m->scratch_bytes = scratch;
    }
    if (!m->xfer) {
        m->xfer = malloc((size_t)n * (2 * sizeof(void *) + 2 * sizeof(int)));
        if (!m->xfer) return RP_ERROR(RP_ERR_NOMEM, "MPI communicator: transfer tables");
    }
    return RP_OK;
}

/* The transfer tables: sbuf, rbuf [n] pointers, then sbytes, rbytes [n]. */
#define XFER(m, n)                                                                                 \
    const void **sbuf = (const void **)(m)->xfer;                                                  \
    void **rbuf = (void **)((m)->xfer + (size_t)(n) * sizeof(void *));                             \
    int *sbytes = (int *)((m)->xfer + 2 * (size_t)(n) * sizeof(void *)), *rbytes = sbytes + (n)

static rp_status mpi_all_reduce(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv,
                                double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    size_t es = rp_dtype_size(d->dtype);
    int64_t mylo, myhi;
    rp_comm_slice(d->count, es, c->rank, n, &mylo, &myhi);
    size_t myblock = (size_t)(myhi - mylo) * es;
    RP_CHECK(ensure_buffers(m, n, myblock * (size_t)n + 1));
    XFER(m, n);
    /* Slice q of my input to rank q; slice mine of every rank's input from it. */
    for (int q = 0; q < n; q++) {
        int64_t lo, hi;
        rp_comm_slice(d->count, es, q, n, &lo, &hi);
        sbuf[q] = (const char *)send + lo * (int64_t)es;
        sbytes[q] = (int)((hi - lo) * (int64_t)es);
        rbuf[q] = m->scratch + myblock * (size_t)q;
        rbytes[q] = (int)myblock;
        m->blocks[q] = q == c->rank ? (const char *)send + mylo * (int64_t)es : rbuf[q];
    }
    RP_CHECK(exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, true));
    /* In place, my own slice of the input is overwritten by the result: reduce out of a copy. */
    if (send == recv && myblock) {
        memcpy(rbuf[c->rank], m->blocks[c->rank], myblock);
        m->blocks[c->rank] = rbuf[c->rank];
    }
    if (myhi > mylo)
        rp_reduce_block((char *)recv + mylo * (int64_t)es, m->blocks, n, 0, myhi - mylo, d->dtype, d->op);
    /* My reduced slice to every rank; theirs from them. */
    for (int q = 0; q < n; q++) {
        int64_t lo, hi;
        rp_comm_slice(d->count, es, q, n, &lo, &hi);
        sbuf[q] = (const char *)recv + mylo * (int64_t)es;
        sbytes[q] = (int)myblock;
        rbuf[q] = (char *)recv + lo * (int64_t)es;
        rbytes[q] = (int)((hi - lo) * (int64_t)es);
    }
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, false);
}

static rp_status mpi_reduce_scatter(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv,
                                    double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    RP_CHECK(ensure_buffers(m, n, bytes * (size_t)n + 1));
    XFER(m, n);
    for (int q = 0; q < n; q++) {
        sbuf[q] = (const char *)send + bytes * (size_t)q;
        sbytes[q] = (int)bytes;
        rbuf[q] = m->scratch + bytes * (size_t)q;
        rbytes[q] = (int)bytes;
    }
    RP_CHECK(exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, true));
    /* My own block: copied, as recv may be it (in place). */
    memcpy(rbuf[c->rank], sbuf[c->rank], bytes);
    for (int q = 0; q < n; q++) m->blocks[q] = rbuf[q];
    rp_reduce_block(recv, m->blocks, n, 0, d->count, d->dtype, d->op);
    return RP_OK;
}

static rp_status mpi_all_gather(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv,
                                double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    RP_CHECK(ensure_buffers(m, n, 1));
    XFER(m, n);
    char *mine = (char *)recv + bytes * (size_t)c->rank;
    for (int q = 0; q < n; q++) {
        sbuf[q] = send;
        sbytes[q] = (int)bytes;
        rbuf[q] = (char *)recv + bytes * (size_t)q;
        rbytes[q] = (int)bytes;
    }
    if ((const char *)send != mine) memmove(mine, send, bytes);
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, true);
}

/* The root sends to every rank (the sizes here are a handful of ranks; a tree for many is future work). */
static rp_status mpi_broadcast(rp_comm *c, const rp_coll_desc *d, void *buf, double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    int bytes = (int)((size_t)d->count * rp_dtype_size(d->dtype));
    RP_CHECK(ensure_buffers(m, n, 1));
    XFER(m, n);
    bool root = c->rank == d->root;
    for (int q = 0; q < n; q++) {
        sbuf[q] = buf;
        sbytes[q] = root ? bytes : 0;
        rbuf[q] = buf;
        rbytes[q] = !root && q == d->root ? bytes : 0;
    }
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, true);
}

/* ---- point-to-point ------------------------------------------------------------------------- */

/*
 * Each message is one MPI message, straight from the sender's buffer into
 * the receiver's (zero-copy both ways): the call's tag and dtype ride in the
 * MPI tag ((tag * lanes + source lane) * 8 + dtype), its count in the
 * message's size, and its number along the channel is counted on both
 * sides (MPI keeps the messages of one sender in order). A receive finds
 * its message with a matched probe (MPI_Improbe), so it knows the sender's
 * call before taking the data: a mismatch is found without moving a byte
 * into the receiver's buffer, and the receiver tells the sender (a notice
 * on the collectives' communicator, TAG_NOTICE).
 *
 * Lanes are the members of one process in the hierarchical backend: lane l
 * receives on its own duplicate pc[l], so one member's receives never take
 * another's messages. The flat backend has one lane.
 *
 * A receive matched while none is posted for it (another lane's member, or
 * draining - see below) is received into a buffer of its own and waits in
 * the lane's queue of unexpected messages, ahead of anything still in MPI.
 * A send that waits more than BUFFER_AFTER_S for its receiver drains its
 * lane's incoming messages into that queue: a peer sending to us at the
 * same time then completes, and so do we. All of this state is under the
 * MPI lock.
 */
#define BUFFER_AFTER_S 0.002

enum { MREQ_POSTED, MREQ_ACTIVE, MREQ_DONE };

typedef struct umsg {
    struct umsg *next;
    int proc, slane;   /* the channel */
    rp_p2p_desc d;     /* the send, numbered */
    char *data;
} umsg;

typedef struct mreq {
    rp_comm_request base;
    rp_p2p_desc d;     /* d.peer: a rank of the communicator (or RP_ANY_SOURCE) */
    int proc, lane;    /* the peer's MPI rank (or MPI_ANY_SOURCE) and lane (-1: any); */
    int mylane;
    void *buf;
    MPI_Request mr;
    int state;
    bool mismatch;     /* receiving a mismatched message into tmp, to fail */
    char *tmp;
    rp_p2p_desc got;   /* a receive's matched send */
    int got_proc, got_lane;
    rp_status status;
    char error[1400];
    struct mreq *next; /* the lane's posted receives */
    double posted_s;
    bool drained;
} mreq;

typedef struct lane_state {
    mreq *posted, *ptail;
    umsg *uhead, *utail;
    bool owed;         /* the lane's member gets the breaking error itself (its message mismatched) */
} lane_state;


static rp_status p2p_status_broken(rp_comm *c, int lane, const char *what);

/* The member of (MPI rank, lane) in this communicator, and its replica id, for messages. */
static int member_of(const rp_comm *c, int proc, int lane)
{
    mpi_impl *m = M(c);
    return m->lane_rank ? m->lane_rank[proc * m->lanes + lane] : proc;
}

static void member_name(const rp_comm *c, int proc, int lane, char *buf, size_t size)
{
    const mpi_impl *m = M(c);
    int r = member_of(c, proc, lane);
    int id = r < 0 ? -1 : m->lane_ids ? m->lane_ids[r] : c->ids[r];
    snprintf(buf, size, "replica %d (rank %d, %s)", id, proc, m->hosts[proc]);
}

/* Notices of mismatches and of peers that left: read under the lock, at every p2p poll. */
static void poll_notices(rp_comm *c)
{
    mpi_impl *m = M(c);
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTICE, m->comm, &flag, &st);
        if (!flag) break;
        char text[NOTICE_MAX + 8];
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        if (n > (int)sizeof text - 1) n = (int)sizeof text - 1;
        MPI_Recv(text, n, MPI_BYTE, st.MPI_SOURCE, TAG_NOTICE, m->comm, MPI_STATUS_IGNORE);
        int lane = 0;
        memcpy(&lane, text, sizeof lane);
        text[n > (int)sizeof lane ? n : (int)sizeof lane] = '\0';
        if (!m->broken && lane >= 0 && lane < m->lanes) m->lane[lane].owed = true;
        mark_broken(c, RP_ERR_MISMATCH, text + sizeof lane);
    }
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_LEFT, m->comm, &flag, &st);
        if (!flag) break;
        /* [status][k][k ranks it gave up on][reason] (see give_up; k = 0 for a leave). */
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        char *text = calloc((size_t)n + 1, 1);
        MPI_Recv(text, text ? n : 0, MPI_BYTE, st.MPI_SOURCE, TAG_LEFT, m->comm, MPI_STATUS_IGNORE);
        if (!text || n < (int)(2 * sizeof(int))) {
            free(text);
            continue;
        }
        left_note *ln = &m->left[st.MPI_SOURCE];
        int head[2];
        memcpy(head, text, sizeof head);
        ln->left = true;
        ln->status = (rp_status)head[0];
        ln->blames_me = false;
        size_t off = sizeof head;
        for (int i = 0; i < head[1] && off + sizeof(int) <= (size_t)n; i++, off += sizeof(int)) {
            int r;
            memcpy(&r, text + off, sizeof r);
            if (r == c->rank) ln->blames_me = true;
        }
        if (off > (size_t)n) off = (size_t)n;
        snprintf(ln->reason, sizeof ln->reason, "%.*s", (int)sizeof ln->reason - 1, text + off);
        free(text);
    }
}

/*
 * Notices are rare, and under oversubscription each MPI_Iprobe that finds
 * nothing gives the core away (mpi_yield_when_idle): looking twice per p2p
 * call cut a parameter server's rate several-fold. So p2p looks at most once
 * per NOTICE_EVERY_S - a clock read on the fast path - which still sees a
 * mismatch or a peer's leave within about a millisecond of its arrival.
 * Under the lock.
 */
#define NOTICE_EVERY_S 0.001

static void poll_notices_due(rp_comm *c)
{
    mpi_impl *m = M(c);
    double now = rp_now_s();
    if (now < m->notices_due) return;
    m->notices_due = now + NOTICE_EVERY_S;
    poll_notices(c);
}

static int mpi_tag(const mpi_impl *m, const rp_p2p_desc *d, int slane)
{
    return (int)((((int64_t)d->tag * m->lanes + slane) << 3) | d->dtype);
}

static void req_done(mreq *r, rp_status status, const char *error)
{
    r->status = status;
    if (status != RP_OK) snprintf(r->error, sizeof r->error, "%s", error);
    r->state = MREQ_DONE;
}

/* A matched receive's send differs: fail the receive, tell the sender, break. Under the lock. */
static void p2p_mismatch(rp_comm *c, mreq *r)
{
    char who_s[160], who_r[160], msg[NOTICE_MAX];
    rp_p2p_desc s = r->got, rd = r->d;
    member_name(c, r->got_proc, r->got_lane, who_s, sizeof who_s);
    member_name(c, c->rank, r->mylane, who_r, sizeof who_r);
    rp_p2p_mismatch_str(&s, who_s, &rd, who_r, msg, sizeof msg);
    /* One notice per communicator (the mismatch breaks it); its buffer lives until destroy. */
    mpi_impl *m = M(c);
    if (m->notice_req == MPI_REQUEST_NULL && !m->broken) {
        memcpy(m->notice, &r->got_lane, sizeof(int));
        size_t len = strlen(msg) + 1;
        memcpy(m->notice + sizeof(int), msg, len);
        MPI_Isend(m->notice, (int)(sizeof(int) + len), MPI_BYTE, r->got_proc, TAG_NOTICE, m->comm, &m->notice_req);
    }
    mark_broken(c, RP_ERR_MISMATCH, msg);
    req_done(r, RP_ERR_MISMATCH, msg);
}

/* Takes r's message from the unexpected queue, if one is there. Under the lock. */
static bool take_unexpected(rp_comm *c, lane_state *ls, mreq *r)
{
    umsg **p = &ls->uhead, *prev = NULL;
    while (*p && !((r->proc == MPI_ANY_SOURCE || (*p)->proc == r->proc) && (r->lane < 0 || (*p)->slane == r->lane))) {
        prev = *p;
        p = &(*p)->next;
    }
    umsg *u = *p;
    if (!u) return false;
    *p = u->next;
    if (ls->utail == u) ls->utail = prev;
    r->got = u->d;
    r->got_proc = u->proc;
    r->got_lane = u->slane;
    r->d.num = u->d.num;
    if (r->d.peer == RP_ANY_SOURCE) r->d.peer = member_of(c, u->proc, u->slane);
    if (rp_p2p_accepts(&r->d, &u->d)) {
        size_t bytes = (size_t)u->d.count * rp_dtype_size(u->d.dtype);
        if (bytes) memcpy(r->buf, u->data, bytes);
        req_done(r, RP_OK, NULL);
    } else {
        p2p_mismatch(c, r);
    }
    free(u->data);
    free(u);
    return true;
}

/* The send behind a probed message. */
static void decode(const mpi_impl *m, const MPI_Status *st, rp_p2p_desc *d, int *slane)
{
    int bytes = 0;
    MPI_Get_count(st, MPI_BYTE, &bytes);
    int t = st->MPI_TAG;
    d->send = 1;
    d->dtype = t & 7;
    *slane = (t >> 3) % m->lanes;
    d->tag = (t >> 3) / m->lanes;
    size_t es = rp_dtype_size(d->dtype);
    d->count = es ? bytes / (int64_t)es : 0;
}

/*
 * Matches the lane's posted receives with messages, in posting order
 * (see the top of this section). Under the lock.
 */
static void progress(rp_comm *c, int lane, bool drain)
{
    mpi_impl *m = M(c);
    lane_state *ls = &m->lane[lane];
    MPI_Comm pc = m->pc[lane];
    mreq *prev = NULL;
    /*
     * A receive that found nothing blocks its channel for the rest of the
     * pass: a message arriving meanwhile is the earlier receive's, not a
     * later one's. A receive from any source stops at any blocked channel.
     */
    int blocked[64][2], nblocked = 0;
    for (mreq *r = ls->posted; r;) {
        bool skip = false;
        for (int b = 0; b < nblocked && !skip; b++)
            skip = r->proc == MPI_ANY_SOURCE || (blocked[b][0] == r->proc && (blocked[b][1] == r->lane || r->lane < 0 ||
                                                                              blocked[b][1] < 0));
        if (skip && r->proc == MPI_ANY_SOURCE) break;
        bool matched = !skip && take_unexpected(c, ls, r);
        while (!matched && !skip) {
            int flag = 0;
            MPI_Message msg;
            MPI_Status st;
            MPI_Improbe(r->proc, MPI_ANY_TAG, pc, &flag, &msg, &st);
            if (!flag) break;
            rp_p2p_desc d = {0};
            int slane;
            decode(m, &st, &d, &slane);
            int bytes = 0;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            uint64_t *num = &m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + slane) * (size_t)m->lanes + (size_t)lane];
            d.num = (*num)++;
            d.peer = member_of(c, c->rank, lane);
            if (r->lane >= 0 && slane != r->lane) {
                /* Another lane's message from that process: it waits in the queue. */
                umsg *u = calloc(1, sizeof *u);
                char *data = malloc(bytes ? (size_t)bytes : 1);
                if (!u || !data) {
                    free(u);
                    free(data);
                    MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
                    mark_broken(c, RP_ERR_NOMEM, "out of memory queueing a message");
                    return;
                }
                MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
                *u = (umsg){.proc = st.MPI_SOURCE, .slane = slane, .d = d, .data = data};
                if (ls->utail) ls->utail->next = u;
                else ls->uhead = u;
                ls->utail = u;
                continue;
            }
            r->got = d;
            r->got_proc = st.MPI_SOURCE;
            r->got_lane = slane;
            r->d.num = d.num;
            if (r->d.peer == RP_ANY_SOURCE) r->d.peer = member_of(c, st.MPI_SOURCE, slane);
            r->mismatch = !rp_p2p_accepts(&r->d, &d);
            void *into = r->buf;
            if (r->mismatch) into = r->tmp = malloc(bytes ? (size_t)bytes : 1);
            MPI_Imrecv(into, bytes, MPI_BYTE, &msg, &r->mr);
            r->state = MREQ_ACTIVE;
            matched = true;
        }
        mreq *next = r->next;
        if (matched) {
            /* Off the posted list. */
            if (prev) prev->next = next;
            else ls->posted = next;
            if (ls->ptail == r) ls->ptail = prev;
            r->next = NULL;
        } else {
            if (r->proc == MPI_ANY_SOURCE) break; /* nothing has come from anyone */
            if (!skip) {
                if (nblocked == 64) break;
                blocked[nblocked][0] = r->proc;
                blocked[nblocked][1] = r->lane;
                nblocked++;
            }
            prev = r;
        }
        r = next;
    }
    while (drain) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, pc, &flag, &msg, &st);
        if (!flag) break;
        rp_p2p_desc d = {0};
        int slane, bytes = 0;
        decode(m, &st, &d, &slane);
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        d.num = m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + slane) * (size_t)m->lanes + (size_t)lane]++;
        d.peer = member_of(c, c->rank, lane);
        umsg *u = calloc(1, sizeof *u);
        char *data = malloc(bytes ? (size_t)bytes : 1);
        if (!u || !data) {
            free(u);
            free(data);
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            mark_broken(c, RP_ERR_NOMEM, "out of memory queueing a message");
            return;
        }
        MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        *u = (umsg){.proc = st.MPI_SOURCE, .slane = slane, .d = d, .data = data};
        if (ls->utail) ls->utail->next = u;
        else ls->uhead = u;
        ls->utail = u;
    }
}

static rp_status p2p_status_broken(rp_comm *c, int lane, const char *what)
{
    mpi_impl *m = M(c);
    if (lane >= 0 && lane < m->lanes && m->lane[lane].owed) {
        m->lane[lane].owed = false;
        return rp_error_set(m->broken_status, __FILE__, __LINE__, "%s", m->reason);
    }
    return RP_ERROR(RP_ERR_COMM, "%s on rank %d (%s): the communicator is broken by an earlier error: %s", what,
                    c->rank, m->hosts[c->rank], m->reason);
}

rp_status rp_mpi_isend(rp_comm *c, const rp_p2p_desc *d, const void *buf, int proc, int slane, int dlane,
                       rp_comm_request **out, rp_comm *owner)
{
    mpi_impl *m = M(c);
    char what[96];
    rp_p2p_desc_str(d, false, what, sizeof what);
    if ((int64_t)d->tag >= m->tag_limit)
        return RP_ERROR(RP_ERR_INVALID, "%s: tags must be below %lld on the MPI backend", what, (long long)m->tag_limit);
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    if (bytes > INT_MAX) return RP_ERROR(RP_ERR_UNSUPPORTED, "%s: the MPI backend sends at most %d bytes", what, INT_MAX);
    mreq *r = calloc(1, sizeof *r);
    if (!r) return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory", what);
    lock();
    if (m->broken) {
        rp_status st = p2p_status_broken(c, slane, what);
        unlock();
        free(r);
        return st;
    }
    r->base.comm = owner;
    r->base.backend = c;
    r->d = *d;
    r->proc = proc;
    r->lane = dlane;
    r->mylane = slane;
    r->d.num = m->sent[(size_t)(proc * m->lanes + dlane) * (size_t)m->lanes + (size_t)slane]++;
    r->posted_s = rp_now_s();
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, proc, mpi_tag(m, d, slane), m->pc[dlane], &r->mr);
    r->state = MREQ_ACTIVE;
    unlock();
    if (rc != MPI_SUCCESS) {
        free(r);
        return RP_ERROR(RP_ERR_BACKEND, "%s: MPI_Isend failed on rank %d", what, c->rank);
    }
    *out = &r->base;
    return RP_OK;
}

rp_status rp_mpi_irecv(rp_comm *c, const rp_p2p_desc *d, void *buf, int proc, int slane, int dlane,
                       rp_comm_request **out, rp_comm *owner)
{
    mpi_impl *m = M(c);
    char what[96];
    rp_p2p_desc_str(d, false, what, sizeof what);
    if ((int64_t)d->tag >= m->tag_limit)
        return RP_ERROR(RP_ERR_INVALID, "%s: tags must be below %lld on the MPI backend", what, (long long)m->tag_limit);
    mreq *r = calloc(1, sizeof *r);
    if (!r) return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory", what);
    lock();
    if (m->broken) {
        rp_status st = p2p_status_broken(c, dlane, what);
        unlock();
        free(r);
        return st;
    }
    r->base.comm = owner;
    r->base.backend = c;
    r->d = *d;
    r->proc = proc;
    r->lane = slane;
    r->mylane = dlane;
    r->buf = buf;
    r->posted_s = rp_now_s();
    r->state = MREQ_POSTED;
    lane_state *ls = &m->lane[dlane];
    if (ls->ptail) ls->ptail->next = r;
    else ls->posted = r;
    ls->ptail = r;
    progress(c, dlane, false);
    unlock();
    *out = &r->base;
    return RP_OK;
}

/* Takes a failed request out of the lane's state. Under the lock. */
static void req_drop(rp_comm *c, mreq *r)
{
    lane_state *ls = &M(c)->lane[r->mylane];
    if (r->state == MREQ_POSTED) {
        mreq **p = &ls->posted, *prev = NULL;
        while (*p && *p != r) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p) {
            *p = r->next;
            if (ls->ptail == r) ls->ptail = prev;
        }
    } else if (r->state == MREQ_ACTIVE && r->mr != MPI_REQUEST_NULL) {
        if (!r->d.send) MPI_Cancel(&r->mr);
        MPI_Request_free(&r->mr);
    }
}

/*
 * One poll of request r: progress, then whether it is done or cannot be
 * (broken communicator, its peer left, deadline passed). Under the lock.
 */
static void req_poll(rp_comm *c, mreq *r, double deadline, bool drain, double stalled_s)
{
    mpi_impl *m = M(c);
    char what[96], msg[1400], peer[160], me[160];
    /* Notices (a mismatch, a peer that left): rate-limited; always before a timeout is reported. */
    if (rp_now_s() > deadline) poll_notices(c);
    else poll_notices_due(c);
    if (r->state != MREQ_DONE) progress(c, r->mylane, drain);
    if (r->state == MREQ_ACTIVE) {
        int flag = 0;
        MPI_Test(&r->mr, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            if (r->mismatch) {
                free(r->tmp);
                r->tmp = NULL;
                p2p_mismatch(c, r);
            } else {
                req_done(r, RP_OK, NULL);
            }
        }
    }
    if (r->state == MREQ_DONE) return;
    rp_p2p_desc_str(&r->d, r->d.send, what, sizeof what);
    member_name(c, c->rank, r->mylane, me, sizeof me);
    if (m->broken) {
        rp_status st = r->mylane < m->lanes && m->lane[r->mylane].owed ? m->broken_status : RP_ERR_COMM;
        if (st != RP_ERR_COMM) m->lane[r->mylane].owed = false;
        snprintf(msg, sizeof msg, "%s on %s: the communicator is broken: %.1000s", what, me, m->reason);
        req_drop(c, r);
        req_done(r, st, st == RP_ERR_COMM ? msg : m->reason);
        return;
    }
    int proc = r->proc;
    if (proc != MPI_ANY_SOURCE) member_name(c, proc, r->lane < 0 ? 0 : r->lane, peer, sizeof peer);
    if (proc != MPI_ANY_SOURCE && m->left[proc].left) {
        snprintf(msg, sizeof msg, "%s ended its step (%s: %.600s) without %s the message of %s, which %s is "
                 "waiting in", peer, rp_status_name(m->left[proc].status), m->left[proc].reason,
                 r->d.send ? "receiving" : "sending", what, me);
        mark_broken(c, RP_ERR_COMM, msg);
        req_drop(c, r);
        req_done(r, RP_ERR_COMM, msg);
        return;
    }
    double now = rp_now_s();
    if (now <= deadline) return;
    if (stalled_s > 0) {
        snprintf(msg, sizeof msg, "this rank (%d, %s) was not running for %.1f s (stopped or descheduled?) while "
                 "it waited in %s; its peers may have given up on it", c->rank, m->hosts[c->rank], stalled_s, what);
    } else if (proc == MPI_ANY_SOURCE) {
        snprintf(msg, sizeof msg, "timed out after %gs in %s from any replica on %s: no message came", c->timeout,
                 what, me);
    } else {
        char last[128] = "it has sent this member nothing";
        uint64_t k = r->lane >= 0 ? m->rcvd[(size_t)(proc * m->lanes + r->lane) * (size_t)m->lanes + (size_t)r->mylane] : 0;
        if (r->d.send) {
            snprintf(last, sizeof last, "it is dead, stopped, or in another call");
        } else if (k > 0) {
            snprintf(last, sizeof last, "its last message to this member was send #%llu", (unsigned long long)(k - 1));
        }
        snprintf(msg, sizeof msg, "timed out after %gs in %s %s %s on %s: it did not %s (%s)", c->timeout, what,
                 r->d.send ? "to" : "from", peer, me, r->d.send ? "receive it" : "send", last);
    }
    mark_broken(c, RP_ERR_TIMEOUT, msg);
    req_drop(c, r);
    req_done(r, RP_ERR_TIMEOUT, msg);
}

static rp_status req_finish_mpi(rp_comm *c, mreq *r)
{
    rp_status status = r->status;
    if (status != RP_OK) rp_error_set(status, __FILE__, __LINE__, "%s", r->error);
    free(r->tmp);
    free(r);
    (void)c;
    return status;
}

static rp_status rp_mpi_wait(rp_comm *c, rp_comm_request *req, double deadline)
{
    mreq *r = (mreq *)req;
    double last = rp_now_s(), stalled = 0;
    for (unsigned polls = 0;; polls++) {
        note_gap(&last, req->comm->timeout, &stalled);
        lock();
        bool drain = r->d.send && rp_now_s() - r->posted_s > BUFFER_AFTER_S;
        req_poll(c, r, deadline, drain, stalled);
        int state = r->state;
        unlock();
        if (state == MREQ_DONE) break;
        /* A small message's answer comes in a microsecond or two: poll without yielding first. */
        if (polls >= 64) pause_briefly(polls);
    }
    return req_finish_mpi(c, r);
}

static rp_status rp_mpi_test(rp_comm *c, rp_comm_request *req, bool *done)
{
    mreq *r = (mreq *)req;
    lock();
    req_poll(c, r, INFINITY, false, 0);
    *done = r->state == MREQ_DONE;
    unlock();
    return *done ? req_finish_mpi(c, r) : RP_OK;
}

/* Whether a message for `lane` from (proc, slane) (MPI_ANY_SOURCE / -1: any) is ready. */
rp_status rp_mpi_probe(rp_comm *c, int proc, int slane, int lane, int tag, bool *ready, rp_p2p_desc *found)
{
    mpi_impl *m = M(c);
    lock();
    poll_notices_due(c);
    if (m->broken) {
        rp_status st = p2p_status_broken(c, lane, "probe");
        unlock();
        return st;
    }
    lane_state *ls = &m->lane[lane];
    *ready = false;
    /* Posted receives take first; what is left is in the queue, then in MPI. */
    progress(c, lane, false);
    for (umsg *u = ls->uhead; u && !*ready; u = u->next)
        if ((proc == MPI_ANY_SOURCE || u->proc == proc) && (slane < 0 || u->slane == slane) &&
            (tag == RP_ANY_TAG || u->d.tag == tag)) {
            *ready = true;
            *found = u->d;
            found->peer = member_of(c, u->proc, u->slane);
        }
    /* A message in MPI: received into the queue, so the next receive finds it in order. */
    while (!*ready) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(proc, MPI_ANY_TAG, m->pc[lane], &flag, &msg, &st);
        if (!flag) break;
        rp_p2p_desc d = {0};
        int sl, bytes = 0;
        decode(m, &st, &d, &sl);
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        d.num = m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + sl) * (size_t)m->lanes + (size_t)lane]++;
        umsg *u = calloc(1, sizeof *u);
        char *data = malloc(bytes ? (size_t)bytes : 1);
        if (!u || !data) {
            free(u);
            free(data);
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            unlock();
            return RP_ERROR(RP_ERR_NOMEM, "probe: out of memory");
        }
        MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        *u = (umsg){.proc = st.MPI_SOURCE, .slane = sl, .d = d, .data = data};
        if (ls->utail) ls->utail->next = u;
        else ls->uhead = u;
        ls->utail = u;
        if ((slane < 0 || sl == slane) && (tag == RP_ANY_TAG || d.tag == tag)) {
            *ready = true;
            *found = d;
            found->peer = member_of(c, u->proc, sl);
        } else if (proc != MPI_ANY_SOURCE && (slane < 0 || sl == slane)) {
            break; /* the next message on that channel has another tag */
        }
    }
    unlock();
    return RP_OK;
}

/* Frees the point-to-point state (queued messages included). MPI finalized: the communicators are gone. */
static void p2p_release(mpi_impl *m)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (int l = 0; m->lane && l < m->lanes; l++)
        for (umsg *u = m->lane[l].uhead, *next; u; u = next) {
            next = u->next;
            free(u->data);
            free(u);
        }
    for (int l = 0; m->pc && l < m->lanes; l++)
        if (!finalized && m->pc[l] != MPI_COMM_NULL) {
            lock();
            MPI_Comm_free(&m->pc[l]);
            unlock();
        }
    free(m->pc);
    free(m->lane);
    free(m->sent);
    free(m->rcvd);
    free(m->lane_rank);
    free(m->lane_ids);
    m->lane_ids = NULL;
    m->pc = NULL;
    m->lane = NULL;
    m->sent = m->rcvd = NULL;
    m->lane_rank = NULL;
    m->lanes = 0;
}

/* Gives this communicator `lanes` lanes (collective; the hierarchical backend's members per process). */
rp_status rp_mpi_p2p_setup(rp_comm *c, int lanes, const int *lane_rank, const int *ids)
{
    mpi_impl *m = M(c);
    int n = c->size, members = 0;
    for (int i = 0; lane_rank && i < n * lanes; i++)
        if (lane_rank[i] + 1 > members) members = lane_rank[i] + 1;
    lock();
    MPI_Comm *pc = calloc((size_t)lanes, sizeof *pc);
    lane_state *ls = calloc((size_t)lanes, sizeof *ls);
    uint64_t *sent = calloc((size_t)n * (size_t)lanes * (size_t)lanes, sizeof *sent);
    uint64_t *rcvd = calloc((size_t)n * (size_t)lanes * (size_t)lanes, sizeof *rcvd);
    int *map = lane_rank ? malloc((size_t)n * (size_t)lanes * sizeof *map) : NULL;
    int *idcopy = lane_rank && ids ? malloc((size_t)members * sizeof *idcopy + 1) : NULL;
    int rc = MPI_SUCCESS;
    for (int l = 0; pc && l < lanes && rc == MPI_SUCCESS; l++) rc = MPI_Comm_dup(m->comm, &pc[l]);
    unlock();
    if (!pc || !ls || !sent || !rcvd || (lane_rank && !map) || (lane_rank && ids && !idcopy) || rc != MPI_SUCCESS) {
        free(idcopy);
        free(pc);
        free(ls);
        free(sent);
        free(rcvd);
        free(map);
        return RP_ERROR(RP_ERR_NOMEM, "MPI communicator: point-to-point state for %d lanes", lanes);
    }
    if (map) memcpy(map, lane_rank, (size_t)n * (size_t)lanes * sizeof *map);
    if (idcopy) memcpy(idcopy, ids, (size_t)members * sizeof *idcopy);
    p2p_release(m);
    m->lane_ids = idcopy;
    m->lanes = lanes;
    m->pc = pc;
    m->lane = ls;
    m->sent = sent;
    m->rcvd = rcvd;
    m->lane_rank = map;
    int *ub = NULL, flag = 0;
    lock();
    MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &ub, &flag);
    unlock();
    m->tag_limit = ((int64_t)(flag ? *ub : 32767) >> 3) / lanes;
    return RP_OK;
}

static rp_status mpi_isend(rp_comm *c, const rp_p2p_desc *d, const void *buf, rp_comm_request **req)
{
    return rp_mpi_isend(c, d, buf, d->peer, 0, 0, req, c);
}

static rp_status mpi_irecv(rp_comm *c, const rp_p2p_desc *d, void *buf, rp_comm_request **req)
{
    return rp_mpi_irecv(c, d, buf, d->peer == RP_ANY_SOURCE ? MPI_ANY_SOURCE : d->peer, d->peer == RP_ANY_SOURCE ? -1 : 0,
                        0, req, c);
}

static rp_status mpi_wait(rp_comm_request *req, double deadline) { return rp_mpi_wait(req->backend, req, deadline); }
static rp_status mpi_test(rp_comm_request *req, bool *done) { return rp_mpi_test(req->backend, req, done); }

static rp_status mpi_probe(rp_comm *c, int peer, int tag, bool *ready, rp_p2p_desc *found)
{
    return rp_mpi_probe(c, peer == RP_ANY_SOURCE ? MPI_ANY_SOURCE : peer, peer == RP_ANY_SOURCE ? -1 : 0, 0, tag,
                        ready, found);
}

/*
 * The call check. The first version exchanged every rank's call with every
 * other before each collective: N - 1 extra messages per rank and call, and
 * a round trip that doubled the time of a small all-reduce. Now a call that
 * moves data between every pair of ranks anyway (all-reduce, reduce-scatter,
 * all-gather with count > 0) carries a hash of its descriptor in the MPI
 * tag of those messages, with its sequence number's low bits: peers that
 * agree match each other's messages and nothing more is sent. Peers that do
 * not agree cannot match: while a rank waits for a peer's message it looks
 * at what that peer sent instead (MPI_Iprobe on the peer, now and then), and
 * a message of another call - another hash at this sequence number, a
 * descriptor of a call without data, a leave notice - starts the old full
 * exchange of descriptors (every rank involved comes to it the same way),
 * so the messages are exactly as precise as before. The other calls
 * (broadcast, barrier, count 0) exchange descriptors as before.
 * rp_comm_mpi_set_full_check(1) puts every call on the full exchange (to
 * measure the difference).
 */
#define HASH_BIT (1 << 30)
static int full_check;

void rp_comm_mpi_set_full_check(int full) { full_check = full; }

static uint64_t fnv(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (uint64_t)v >> (8 * i) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The hash of exactly what rp_coll_desc_equal compares. */
static int hashed_tag(const rp_coll_desc *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t f[] = {d->kind, d->dtype, d->op, d->root, d->count, (int64_t)d->seq, d->layered, d->internal};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) h = fnv(h, f[i]);
    if (d->layered) {
        int64_t o[] = {d->outer_kind, d->outer_op, d->outer_root, d->outer_count, (int64_t)d->outer_seq};
        for (size_t i = 0; i < sizeof o / sizeof *o; i++) h = fnv(h, o[i]);
    }
    for (size_t i = 0; d->internal && i < sizeof d->what && d->what[i]; i++) h = fnv(h, d->what[i]);
    h ^= h >> 29;
    return HASH_BIT | (int)((d->seq & 0xff) << 22) | (int)(h & 0x3fffff);
}

/*
 * What a pending peer sent instead of this call's message (see above).
 * True if it is in another call (m->disagree) or left (m->left_q). Under
 * the lock; reqs are (recv, send) pairs per peer.
 */
static bool probe_peers(rp_comm *c, const rp_coll_desc *d, int nreq, MPI_Request *reqs)
{
    mpi_impl *m = M(c);
    poll_notices(c);
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank || 2 * q >= nreq || reqs[2 * q] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&reqs[2 * q], &flag, MPI_STATUS_IGNORE);
        if (flag) continue;
        for (;;) {
            MPI_Status st;
            flag = 0;
            MPI_Iprobe(q, MPI_ANY_TAG, m->comm, &flag, &st);
            if (!flag) break;
            int t = st.MPI_TAG;
            if (t == m->tag) break; /* this call's next message: it agrees */
            if (t == TAG_NOTICE || t == TAG_LEFT) {
                poll_notices(c);
                continue;
            }
            if (t & HASH_BIT) {
                if (((t >> 22) & 0xff) == (int)((d->seq + 1) & 0xff)) break; /* its next call: it is ahead */
                m->disagree = true;
                return true;
            }
            if (t == TAG_CALL) {
                rp_coll_desc e;
                MPI_Recv(&e, (int)sizeof e, MPI_BYTE, q, TAG_CALL, m->comm, MPI_STATUS_IGNORE);
                m->early[q] = e;
                m->early_ok[q] = true;
                if (e.kind == RP_COLL_LEFT) {
                    m->left_q = q;
                    return true;
                }
                if (e.seq > d->seq) continue; /* its next call, kept for it */
                m->disagree = true;
                return true;
            }
            m->disagree = true; /* the data of a call without a hash: another call */
            return true;
        }
    }
    return false;
}

/* The error for peer q, whose step ended (its leave notice) while this rank is in call d. */
static rp_status left_error(rp_comm *c, const rp_coll_desc *d, int q, const rp_coll_desc *notice)
{
    mpi_impl *m = M(c);
    char msg[1024], what[128];
    /* Its reason came just before its notice (poll_notices keeps it). */
    lock();
    poll_notices(c);
    unlock();
    const left_note *ln = &m->left[q];
    snprintf(msg, sizeof msg, "rank %d (%s) ended its step (%s: %.600s) without calling %s, which rank %d is in",
             q, m->hosts[q], rp_status_name(notice->op), ln->left && ln->reason[0] ? ln->reason : "its own message says why",
             rp_coll_desc_str(d, what, sizeof what), c->rank);
    mark_broken(c, RP_ERR_COMM, msg);
    return RP_ERROR(RP_ERR_COMM, "%s", msg);
}

/* After a full exchange: a peer that left, or calls that differ, is the error on every rank alike. */
static rp_status check_calls(rp_comm *c, const rp_coll_desc *d)
{
    mpi_impl *m = M(c);
    for (int q = 0; q < c->size; q++)
        if (m->calls[q].kind == RP_COLL_LEFT) return left_error(c, d, q, &m->calls[q]);
    for (int q = 1; q < c->size; q++) {
        if (rp_coll_desc_equal(&m->calls[q], &m->calls[0])) continue;
        char a[HOST_MAX + 32], b[HOST_MAX + 32], msg[768];
        snprintf(a, sizeof a, "rank 0 (%s)", m->hosts[0]);
        snprintf(b, sizeof b, "rank %d (%s)", q, m->hosts[q]);
        rp_coll_mismatch_str(&m->calls[0], a, &m->calls[q], b, msg, sizeof msg);
        mark_broken(c, RP_ERR_MISMATCH, msg);
        return RP_ERROR(RP_ERR_MISMATCH, "%s", msg);
    }
    return RP_OK;
}

static rp_status mpi_collective(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv)
{
    mpi_impl *m = M(c);
    char what[128];
    if (m->broken)
        return RP_ERROR(RP_ERR_COMM, "%s on rank %d: the communicator is broken by an earlier error: %s",
                        rp_coll_desc_str(d, what, sizeof what), c->rank, m->reason);
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype) * (size_t)c->size;
    if (bytes > INT_MAX)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "%s: the MPI backend moves at most %d bytes per call",
                        rp_coll_desc_str(d, what, sizeof what), INT_MAX);
    double deadline = rp_now_s() + c->timeout;
    bool hashed = !full_check && c->size > 1 && d->count > 0 &&
                  (d->kind == RP_COLL_ALL_REDUCE || d->kind == RP_COLL_REDUCE_SCATTER || d->kind == RP_COLL_ALL_GATHER);
    m->desc = d;
    m->disagree = false;
    m->left_q = -1;
    /* A peer's call kept from before: it is in a call without data (or left) while this one has data. */
    for (int q = 0; hashed && q < c->size; q++)
        if (m->early_ok[q]) {
            if (m->early[q].kind == RP_COLL_LEFT) return left_error(c, d, q, &m->early[q]);
            m->disagree = true;
        }
    rp_status status = RP_OK;
    if (!hashed || m->disagree) {
        RP_CHECK(exchange_calls(c, d, deadline));
        RP_CHECK(check_calls(c, d));
        if (m->disagree) goto agreed_anyway;
    }
    m->hashed = hashed;
    m->tag = hashed ? hashed_tag(d) : TAG_DATA;
    if (d->count > 0) {
        switch (d->kind) {
        case RP_COLL_ALL_REDUCE: status = mpi_all_reduce(c, d, send, recv, deadline); break;
        case RP_COLL_REDUCE_SCATTER: status = mpi_reduce_scatter(c, d, send, recv, deadline); break;
        case RP_COLL_ALL_GATHER: status = mpi_all_gather(c, d, send, recv, deadline); break;
        case RP_COLL_BROADCAST: status = mpi_broadcast(c, d, recv, deadline); break;
        default: break;
        }
    }
    m->hashed = false;
    if (status == RP_ERR_TIMEOUT) give_up(c, status, rp_last_error());
    if (status == RP_ERR_MISMATCH && m->left_q >= 0) return left_error(c, d, m->left_q, &m->early[m->left_q]);
    if (status == RP_ERR_MISMATCH && m->disagree) {
        /* A peer is in another call: the full exchange says which, on every rank alike. */
        RP_CHECK(exchange_calls(c, d, deadline));
        RP_CHECK(check_calls(c, d));
    agreed_anyway:
        {
            char msg[512];
            snprintf(msg, sizeof msg, "%s on rank %d (%s): a peer's messages belonged to another call, yet every "
                     "rank's call is the same (a bug in the call check)", rp_coll_desc_str(d, what, sizeof what),
                     c->rank, m->hosts[c->rank]);
            mark_broken(c, RP_ERR_BACKEND, msg);
            return RP_ERROR(RP_ERR_BACKEND, "%s", msg);
        }
    }
    if (status == RP_OK) c->seq++;
    return status;
}

/*
 * A failed step: tell every peer, so that one waiting for this rank in a
 * collective fails at once (it receives this notice where it expects the
 * rank's next call) instead of at the timeout. A rank that simply returned
 * sends nothing: its peers' next call is its next call.
 */
static void mpi_leave(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    if (status == RP_OK || m->broken) return;
    rp_coll_desc notice = {.kind = RP_COLL_LEFT, .op = (int)status, .seq = c->seq};
    /* The reason goes first (same source, same communicator: it arrives before the call notice). */
    char why[NOTICE_MAX + 2 * sizeof(int)];
    int head[2] = {(int)status, 0};
    memcpy(why, head, sizeof head);
    snprintf(why + sizeof head, NOTICE_MAX, "%s", reason);
    int whylen = (int)(sizeof head + strlen(why + sizeof head) + 1);
    int k = 0;
    lock();
    for (int q = 0; q < c->size; q++)
        if (q != c->rank) MPI_Isend(why, whylen, MPI_BYTE, q, TAG_LEFT, m->comm, &m->reqs[k++]);
    for (int q = 0; q < c->size; q++)
        if (q != c->rank)
            MPI_Isend(&notice, (int)sizeof notice, MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    unlock();
    /* The notices are small (sent eagerly); a dead peer must not hold this rank up for long. */
    if (poll_all(c, k, m->reqs, rp_now_s() + 2.0, NULL, "leave notice") != RP_OK) {
        lock();
        for (int i = 0; i < k; i++)
            if (m->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&m->reqs[i]);
        unlock();
    }
    mark_broken(c, status, "this rank's step failed");
}
static void mpi_rejoin(rp_comm *c) { (void)c; }
static bool mpi_broken(const rp_comm *c) { return M(c)->broken; }

static void mpi_fail(rp_comm *c, rp_status status, const char *reason)
{
    mark_broken(c, status, reason);
}

static void mpi_destroy(rp_comm *c)
{
    mpi_impl *m = M(c);
    p2p_release(m);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m->notice_req != MPI_REQUEST_NULL) {
        lock();
        MPI_Request_free(&m->notice_req);
        unlock();
    }
    free(m->left);
    free(m->early);
    free(m->early_ok);
    free(m->from);
    free(m->missing);
    if (!finalized && m->comm != MPI_COMM_NULL) {
        lock();
        MPI_Comm_free(&m->comm);
        unlock();
    }
    free(m->hosts);
    free(m->calls);
    free(m->reqs);
    free(m->blocks);
    free(m->scratch);
    free(m->xfer);
    free(m);
    free(c->ids);
    free(c);
}

/* A handle on an existing MPI communicator (taken over); ids of the ranks for messages. */
static rp_status wrap(rp_comm **out, MPI_Comm comm, const int *ids, double timeout)
{
    int rank, size;
    lock();
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    unlock();
    rp_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (c) c->ids = malloc((size_t)size * sizeof(int));
    if (m) {
        m->hosts = calloc((size_t)size, HOST_MAX);
        m->calls = calloc((size_t)size, sizeof(rp_coll_desc));
        m->reqs = calloc(2 * (size_t)size, sizeof(MPI_Request));
        m->blocks = calloc((size_t)size, sizeof(void *));
        m->left = calloc((size_t)size, sizeof *m->left);
        m->early = calloc((size_t)size, sizeof *m->early);
        m->early_ok = calloc((size_t)size, sizeof *m->early_ok);
        m->from = calloc(2 * (size_t)size, sizeof *m->from);
        m->missing = calloc((size_t)size, sizeof *m->missing);
        m->notice_req = MPI_REQUEST_NULL;
    }
    if (!c || !m || !c->ids || !m->hosts || !m->calls || !m->reqs || !m->blocks || !m->left || !m->early ||
        !m->early_ok || !m->from || !m->missing) {
        if (m) {
            free(m->missing);
            free(m->early);
            free(m->early_ok);
            free(m->from);
            free(m->left);
            free(m->blocks);
            free(m->hosts);
            free(m->calls);
            free(m->reqs);
        }
        if (c) free(c->ids);
        free(m);
        free(c);
        lock();
        MPI_Comm_free(&comm);
        unlock();
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate an MPI communicator of %d ranks", size);
    }
    m->comm = comm;
    char host[HOST_MAX] = "";
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    lock();
    MPI_Get_processor_name(name, &len);
    memcpy(host, name, (size_t)(len < HOST_MAX - 1 ? len : HOST_MAX - 1));
    MPI_Allgather(host, HOST_MAX, MPI_CHAR, m->hosts, HOST_MAX, MPI_CHAR, comm);
    unlock();
    for (int q = 0; q < size; q++) c->ids[q] = ids ? ids[q] : q;
    c->ops = &mpi_ops;
    c->rank = rank;
    c->size = size;
    c->timeout = timeout;
    c->impl = m;
    rp_status status = rp_mpi_p2p_setup(c, 1, NULL, NULL);
    if (status != RP_OK) {
        mpi_destroy(c);
        return status;
    }
    *out = c;
    return RP_OK;
}

static void finalize_at_exit(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

void rp_comm_mpi_abort(int code)
{
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
}

bool rp_comm_mpi_launched(void)
{
    return rp_env_get()->mpi_launched;
}

/*
 * MPI for one calling thread at a time (MPI_THREAD_SERIALIZED: every call goes
 * through the lock above), finalized at exit. Whoever needs MPI first (a
 * communicator, the parameter servers' group) initialises it here.
 */
rp_status rp_mpi_ensure_init(void)
{
    rp_status status = RP_OK;
    lock();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            status = RP_ERROR(RP_ERR_BACKEND, "MPI_Init_thread failed");
        else
            atexit(finalize_at_exit);
    }
    unlock();
    return status;
}

rp_status rp_comm_mpi_create(rp_comm **out, double timeout_s)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "comm is NULL");
    if (!(timeout_s > 0)) return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be > 0", timeout_s);
    RP_CHECK(rp_mpi_ensure_init());
    MPI_Comm comm;
    int world_rank = 0;
    lock();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    unlock();
    if (rc != MPI_SUCCESS) return RP_ERROR(RP_ERR_BACKEND, "MPI_Comm_dup(MPI_COMM_WORLD) failed");
    rp_log_set_rank(world_rank);
    return wrap(out, comm, NULL, timeout_s);
}

/* Split: agree on the call first (a checked barrier), then MPI_Comm_split. */
static rp_status mpi_split(rp_comm *c, int color, int key, rp_comm **out)
{
    RP_CHECK(rp_comm_barrier(c));
    MPI_Comm sub;
    lock();
    int rc = MPI_Comm_split(M(c)->comm, color >= 0 ? color : MPI_UNDEFINED, key, &sub);
    unlock();
    if (rc != MPI_SUCCESS) return RP_ERROR(RP_ERR_BACKEND, "MPI_Comm_split failed");
    if (sub == MPI_COMM_NULL) return RP_OK;
    int size;
    lock();
    MPI_Comm_size(sub, &size);
    unlock();
    int *ids = malloc((size_t)size * sizeof(int));
    if (!ids) {
        lock();
        MPI_Comm_free(&sub);
        unlock();
        return RP_ERROR(RP_ERR_NOMEM, "split: ids");
    }
    int mine = c->ids[c->rank];
    lock();
    MPI_Allgather(&mine, 1, MPI_INT, ids, 1, MPI_INT, sub);
    unlock();
    rp_status status = wrap(out, sub, ids, c->timeout);
    free(ids);
    return status;
}

static const rp_comm_ops mpi_ops = {
    .name = "mpi",
    .collective = mpi_collective,
    .split = mpi_split,
    .leave = mpi_leave,
    .rejoin = mpi_rejoin,
    .fail = mpi_fail,
    .broken = mpi_broken,
    .destroy = mpi_destroy,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
    .probe = mpi_probe,
};
