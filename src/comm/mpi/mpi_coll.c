/*
 * mpi_coll.c - the MPI communicator's collectives (see mpi.c for the
 * communicator itself, mpi_p2p.c for point-to-point).
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
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_internal.h"

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
        snprintf(
            buf, size,
            "this rank was not running for %.1f s (stopped or descheduled?), so its peers may have "
            "given up on it; still missing: ",
            m->stalled);
        return buf;
    }
    for (int i = 0; i < 100; i++) {
        lock();
        comm_mpi_poll_notices(c);
        unlock();
        for (int q = 0; q < c->size; q++) {
            const left_note *ln = &m->left[q];
            if (!ln->left || !ln->blames_me) continue;
            snprintf(
                buf, size,
                "rank %d (%s) had already given up on this rank (\"%.300s\"): this rank was late "
                "(stopped or descheduled before the call?); still missing: ",
                q, m->hosts[q], ln->reason);
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
        for (int i = 0; i < 100 && !done; i++)
            MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) {
            MPI_Request_free(&r);
            all_done = false;
        }
    }
    unlock();
    /* A notice still in flight (to a dead peer) keeps its buffer: 1 KiB, once per broken
     * communicator. */
    if (all_done) free(why);
}

static bool probe_peers(rp_comm *c, const comm_coll_desc *d, int n, MPI_Request *reqs);

/*
 * Polls reqs[0..n) until all complete or the deadline passes. On timeout
 * *pending (if given) gets, for each request, whether it is still pending.
 * In a hashed call (m->hashed; reqs in (recv, send) pairs per peer) it also
 * looks, now and then, at what the peers still pending have sent instead:
 * a sign that they are in another call sets m->disagree and returns
 * RP_ERR_MISMATCH (the caller diagnoses).
 */
rp_status comm_mpi_poll_all(rp_comm *c, int n, MPI_Request *reqs, double deadline, bool *pending,
                            const char *what)
{
    mpi_impl *m = M(c);
    double last = rp_now_s();
    m->stalled = 0;
    for (unsigned polls = 0;; polls++) {
        comm_mpi_note_gap(&last, c->timeout, &m->stalled);
        int done = 0;
        lock();
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        bool look = !done && rc == MPI_SUCCESS && (polls & 31) == 31, other = false;
        if (look && m->hashed)
            other = probe_peers(c, m->desc, n, reqs);
        else if (look)
            comm_mpi_poll_notices(c);
        unlock();
        if (rc != MPI_SUCCESS) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: MPI reported an error on rank %d (%s)", what, c->rank,
                     M(c)->hosts[c->rank]);
            comm_mpi_mark_broken(c, RP_ERR_BACKEND, msg);
            return RP_ERROR(RP_ERR_BACKEND, "%s", msg);
        }
        if (done) return RP_OK;
        /* A peer's notice broke the communicator: it found this rank had skipped its send, or
           another point-to-point error that leaves a peer out of this call (see mpi_p2p.c). */
        if (m->broken && !other)
            return rp_error_set(m->broken_status, __FILE__, __LINE__, "%s", m->reason);
        if (other) return RP_ERR_MISMATCH;
        if (rp_now_s() > deadline) break;
        if (polls >= 64)
            comm_mpi_pause_briefly(polls); /* a message a few microseconds away: spin first */
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
static rp_status exchange_calls(rp_comm *c, const comm_coll_desc *d, double deadline)
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
        MPI_Irecv(&m->calls[q], (int)sizeof(comm_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm,
                  &m->reqs[k++]);
    }
    int recvs = k;
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        from[k] = q;
        MPI_Isend((void *)d, (int)sizeof(comm_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm,
                  &m->reqs[k++]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = k <= 2 * 4096 ? pending : NULL;
    char what[128];
    comm_coll_desc_str(d, what, sizeof what);
    bool hashed = m->hashed;
    m->hashed = false;
    rp_status status = comm_mpi_poll_all(c, k, m->reqs, deadline, p, what);
    m->hashed = hashed;
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1400], own[512];
    own_fault(c, own, sizeof own);
    snprintf(msg, sizeof msg, "timed out after %gs in %s on rank %d (%s): %s", c->timeout, what,
             c->rank, m->hosts[c->rank], own);
    size_t len = strlen(msg);
    int missing = 0;
    /* A peer is missing if its call did not come, or (a send still pending) mine did not reach it.
     */
    bool *miss = calloc((size_t)n, sizeof *miss);
    for (int i = 0; p && miss && i < k; i++)
        if (p[i]) miss[from[i]] = true;
    for (int q = 0; q < n; q++)
        m->missing[q] = q != c->rank && !(p && miss && !miss[q]);
    for (int q = 0; q < n && len < sizeof msg; q++) {
        if (q == c->rank || (p && miss && !miss[q])) continue;
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d (%s)",
                                missing++ ? ", " : "", q, m->hosts[q]);
    }
    free(miss);
    if (len < sizeof msg && !own[0])
        snprintf(msg + len, sizeof msg - len,
                 "%s did not arrive (dead, stopped, or in another call)", missing ? "" : "a peer");
    lock();
    for (int i = 0; i < k; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL) {
            if (i < recvs) MPI_Cancel(&m->reqs[i]);
            MPI_Request_free(&m->reqs[i]);
        }
    unlock();
    comm_mpi_mark_broken(c, RP_ERR_TIMEOUT, msg);
    return RP_ERROR(RP_ERR_TIMEOUT, "%s", msg);
}

/*
 * Sends sbuf[q] (sbytes[q] bytes) to and receives rbuf[q] (rbytes[q]) from
 * every other rank q, polled against the deadline; a timeout names the
 * ranks whose messages are still pending. In a hashed call the messages
 * carry the call's tag (m->tag); `first` says whether this is the call's
 * first exchange (where a missing peer may be in another call).
 */
static rp_status exchange_data(rp_comm *c, const comm_coll_desc *d, double deadline,
                               const void *const *sbuf, const int *sbytes, void *const *rbuf,
                               const int *rbytes, bool first)
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
        if (rbytes[q] > 0 || every)
            MPI_Irecv(rbuf[q], rbytes[q], MPI_BYTE, q, tag, m->comm, &m->reqs[2 * q]);
        if (sbytes[q] > 0 || every)
            MPI_Isend(sbuf[q], sbytes[q], MPI_BYTE, q, tag, m->comm, &m->reqs[2 * q + 1]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = n <= 4096 ? pending : NULL;
    char what[128];
    comm_coll_desc_str(d, what, sizeof what);
    rp_status status = comm_mpi_poll_all(c, 2 * n, m->reqs, deadline, p, what);
    if (status == RP_ERR_MISMATCH) {
        drop_requests(2 * n, m->reqs, true);
        return status;
    }
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1400], own[512];
    bool agreed =
        !(every &&
          first); /* in a hashed call's first exchange, a missing peer may be in another call */
    own_fault(c, own, sizeof own);
    size_t len = (size_t)snprintf(msg, sizeof msg, "timed out after %gs %s%s on rank %d (%s): %s",
                                  c->timeout, agreed ? "moving the data of " : "in ", what, c->rank,
                                  m->hosts[c->rank], own);
    int missing = 0;
    for (int q = 0; q < n; q++)
        m->missing[q] = p && (p[2 * q] || p[2 * q + 1]);
    for (int q = 0; p && q < n && len < sizeof msg; q++)
        if (p[2 * q] || p[2 * q + 1])
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d (%s)",
                                    missing++ ? ", " : "", q, m->hosts[q]);
    if (len < sizeof msg && !own[0])
        snprintf(msg + len, sizeof msg - len, "%s %s", missing ? "" : "a peer",
                 agreed ? "stopped or died after the call was agreed"
                        : "did not arrive (dead, stopped, or in another call)");
    drop_requests(2 * n, m->reqs, true);
    comm_mpi_mark_broken(c, RP_ERR_TIMEOUT, msg);
    return RP_ERROR(RP_ERR_TIMEOUT, "%s", msg);
}

static rp_status ensure_buffers(mpi_impl *m, int n, size_t scratch)
{
    if (scratch > m->scratch_bytes) {
        char *grown = realloc(m->scratch, scratch);
        if (!grown)
            return RP_ERROR(RP_ERR_NOMEM, "MPI communicator: %zu bytes of scratch", scratch);
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

static rp_status mpi_all_reduce(rp_comm *c, const comm_coll_desc *d, const void *send, void *recv,
                                double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    size_t es = rp_dtype_size(d->dtype);
    int64_t mylo, myhi;
    comm_slice(d->count, es, c->rank, n, &mylo, &myhi);
    size_t myblock = (size_t)(myhi - mylo) * es;
    RP_CHECK(ensure_buffers(m, n, myblock * (size_t)n + 1));
    XFER(m, n);
    /* Slice q of my input to rank q; slice mine of every rank's input from it. */
    for (int q = 0; q < n; q++) {
        int64_t lo, hi;
        comm_slice(d->count, es, q, n, &lo, &hi);
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
        comm_reduce_block((char *)recv + mylo * (int64_t)es, m->blocks, n, 0, myhi - mylo, d->dtype,
                          d->op);
    /* My reduced slice to every rank; theirs from them. */
    for (int q = 0; q < n; q++) {
        int64_t lo, hi;
        comm_slice(d->count, es, q, n, &lo, &hi);
        sbuf[q] = (const char *)recv + mylo * (int64_t)es;
        sbytes[q] = (int)myblock;
        rbuf[q] = (char *)recv + lo * (int64_t)es;
        rbytes[q] = (int)((hi - lo) * (int64_t)es);
    }
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, false);
}

static rp_status mpi_reduce_scatter(rp_comm *c, const comm_coll_desc *d, const void *send,
                                    void *recv, double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size;
    size_t es = rp_dtype_size(d->dtype);
    int64_t mylo, mine;
    comm_scatter_block(d, c->rank, &mylo, &mine);
    size_t bytes = (size_t)mine * es;
    RP_CHECK(ensure_buffers(m, n, bytes * (size_t)n + 1));
    XFER(m, n);
    /* Block q of my input to rank q (the blocks back to back); mine of every rank's from it. */
    size_t at = 0;
    for (int q = 0; q < n; q++) {
        size_t block = (size_t)(d->counts ? d->counts[q] : d->count) * es;
        sbuf[q] = (const char *)send + at;
        sbytes[q] = (int)block;
        at += block;
        rbuf[q] = m->scratch + bytes * (size_t)q;
        rbytes[q] = (int)bytes;
    }
    RP_CHECK(exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes, true));
    /* My own block: copied, as recv may be it (in place). */
    if (bytes) memcpy(rbuf[c->rank], sbuf[c->rank], bytes);
    for (int q = 0; q < n; q++)
        m->blocks[q] = rbuf[q];
    if (mine > 0) comm_reduce_block(recv, m->blocks, n, 0, mine, d->dtype, d->op);
    return RP_OK;
}

static rp_status mpi_all_gather(rp_comm *c, const comm_coll_desc *d, const void *send, void *recv,
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

/* The root sends to every rank (the sizes here are a handful of ranks; a tree for many is future
 * work). */
static rp_status mpi_broadcast(rp_comm *c, const comm_coll_desc *d, void *buf, double deadline)
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
 * comm_mpi_set_full_check(1) puts every call on the full exchange (to
 * measure the difference).
 */
static int full_check;

void comm_mpi_set_full_check(int full)
{
    full_check = full;
}

static uint64_t fnv(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (uint64_t)v >> (8 * i) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The hash of exactly what comm_coll_desc_equal compares. */
static int hashed_tag(const comm_coll_desc *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t f[] = {d->kind,  d->dtype,        d->op,      d->root,
                   d->count, (int64_t)d->seq, d->layered, d->internal};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        h = fnv(h, f[i]);
    if (d->layered) {
        int64_t o[] = {d->outer_kind, d->outer_op, d->outer_root, d->outer_count,
                       (int64_t)d->outer_seq};
        for (size_t i = 0; i < sizeof o / sizeof *o; i++)
            h = fnv(h, o[i]);
    }
    for (size_t i = 0; d->internal && i < sizeof d->what && d->what[i]; i++)
        h = fnv(h, d->what[i]);
    h ^= h >> 29;
    return HASH_BIT | (int)((d->seq & 0xff) << 22) | (int)(h & 0x3fffff);
}

/*
 * What a pending peer sent instead of this call's message (see above).
 * True if it is in another call (m->disagree) or left (m->left_q). Under
 * the lock; reqs are (recv, send) pairs per peer.
 */
static bool probe_peers(rp_comm *c, const comm_coll_desc *d, int nreq, MPI_Request *reqs)
{
    mpi_impl *m = M(c);
    comm_mpi_poll_notices(c);
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
                comm_mpi_poll_notices(c);
                continue;
            }
            if (t & HASH_BIT) {
                if (((t >> 22) & 0xff) == (int)((d->seq + 1) & 0xff))
                    break; /* its next call: it is ahead */
                m->disagree = true;
                return true;
            }
            if (t == TAG_CALL) {
                comm_coll_desc e;
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
static rp_status left_error(rp_comm *c, const comm_coll_desc *d, int q,
                            const comm_coll_desc *notice)
{
    mpi_impl *m = M(c);
    char msg[1024], what[128];
    /* Its reason came just before its notice (poll_notices keeps it). */
    lock();
    comm_mpi_poll_notices(c);
    unlock();
    const left_note *ln = &m->left[q];
    snprintf(msg, sizeof msg,
             "rank %d (%s) ended its step (%s: %.600s) without calling %s, which rank %d is in", q,
             m->hosts[q], rp_status_name(notice->op),
             ln->left && ln->reason[0] ? ln->reason : "its own message says why",
             comm_coll_desc_str(d, what, sizeof what), c->rank);
    comm_mpi_mark_broken(c, RP_ERR_COMM, msg);
    return RP_ERROR(RP_ERR_COMM, "%s", msg);
}

/* After a full exchange: a peer that left, or calls that differ, is the error on every rank alike.
 */
static rp_status check_calls(rp_comm *c, const comm_coll_desc *d)
{
    mpi_impl *m = M(c);
    for (int q = 0; q < c->size; q++)
        if (m->calls[q].kind == RP_COLL_LEFT) return left_error(c, d, q, &m->calls[q]);
    for (int q = 1; q < c->size; q++) {
        if (comm_coll_desc_equal(&m->calls[q], &m->calls[0])) continue;
        char a[HOST_MAX + 32], b[HOST_MAX + 32], msg[768];
        snprintf(a, sizeof a, "rank 0 (%s)", m->hosts[0]);
        snprintf(b, sizeof b, "rank %d (%s)", q, m->hosts[q]);
        comm_coll_mismatch_str(&m->calls[0], a, &m->calls[q], b, msg, sizeof msg);
        comm_mpi_mark_broken(c, RP_ERR_MISMATCH, msg);
        return RP_ERROR(RP_ERR_MISMATCH, "%s", msg);
    }
    return RP_OK;
}

rp_status comm_mpi_collective(rp_comm *c, const comm_coll_desc *d, const void *send, void *recv)
{
    mpi_impl *m = M(c);
    char what[128];
    if (m->broken)
        return RP_ERROR(RP_ERR_COMM,
                        "%s on rank %d: the communicator is broken by an earlier error: %s",
                        comm_coll_desc_str(d, what, sizeof what), c->rank, m->reason);
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype) * (size_t)c->size;
    if (bytes > INT_MAX)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "%s: the MPI backend moves at most %d bytes per call",
                        comm_coll_desc_str(d, what, sizeof what), INT_MAX);
    double deadline = rp_now_s() + c->timeout;
    bool hashed = !full_check && c->size > 1 && d->count > 0 &&
                  (d->kind == RP_COLL_ALL_REDUCE || d->kind == RP_COLL_REDUCE_SCATTER ||
                   d->kind == RP_COLL_ALL_GATHER);
    m->desc = d;
    m->disagree = false;
    m->left_q = -1;
    /* A peer's call kept from before: it is in a call without data (or left) while this one has
     * data. */
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
        case RP_COLL_ALL_REDUCE:
            status = mpi_all_reduce(c, d, send, recv, deadline);
            break;
        case RP_COLL_REDUCE_SCATTER:
            status = mpi_reduce_scatter(c, d, send, recv, deadline);
            break;
        case RP_COLL_ALL_GATHER:
            status = mpi_all_gather(c, d, send, recv, deadline);
            break;
        case RP_COLL_BROADCAST:
            status = mpi_broadcast(c, d, recv, deadline);
            break;
        default:
            break;
        }
    }
    m->hashed = false;
    if (status == RP_ERR_TIMEOUT) give_up(c, status, rp_last_error());
    if (status == RP_ERR_MISMATCH && m->left_q >= 0)
        return left_error(c, d, m->left_q, &m->early[m->left_q]);
    if (status == RP_ERR_MISMATCH && m->disagree) {
        /* A peer is in another call: the full exchange says which, on every rank alike. */
        RP_CHECK(exchange_calls(c, d, deadline));
        RP_CHECK(check_calls(c, d));
    agreed_anyway : {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "%s on rank %d (%s): a peer's messages belonged to another call, yet every "
                 "rank's call is the same (a bug in the call check)",
                 comm_coll_desc_str(d, what, sizeof what), c->rank, m->hosts[c->rank]);
        comm_mpi_mark_broken(c, RP_ERR_BACKEND, msg);
        return RP_ERROR(RP_ERR_BACKEND, "%s", msg);
    }
    }
    if (status == RP_OK) c->seq++;
    return status;
}
