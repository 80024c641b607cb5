/*
 * mpi.c - the MPI communicator: one member per process (OpenMPI).
 *
 * Every collective starts with an exchange of calls: each rank sends its
 * call (kind, count, dtype, op, root, sequence number) to every other rank
 * and receives theirs, with non-blocking point-to-point messages polled
 * against the deadline. So every rank sees every call and reports a
 * mismatch the same way the threads backend does, and a rank that never
 * arrives (dead, stopped, or in another call) is named - by rank and host -
 * when the deadline passes, instead of hanging in a blocking collective.
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
#define HOST_MAX 64

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
} mpi_impl;

static const rp_comm_ops mpi_ops;

static mpi_impl *M(const rp_comm *c) { return c->impl; }

static void mark_broken(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    if (m->broken) return;
    m->broken = true;
    m->broken_status = status;
    snprintf(m->reason, sizeof m->reason, "%s", reason);
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
 * Polls reqs[0..n) until all complete or the deadline passes. On timeout
 * *pending (if given) gets, for each request, whether it is still pending.
 */
static rp_status poll_all(rp_comm *c, int n, MPI_Request *reqs, double deadline, bool *pending,
                          const char *what)
{
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        lock();
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        unlock();
        if (rc != MPI_SUCCESS) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: MPI reported an error on rank %d (%s)", what, c->rank, M(c)->hosts[c->rank]);
            mark_broken(c, RP_ERR_BACKEND, msg);
            return RP_ERROR(RP_ERR_BACKEND, "%s", msg);
        }
        if (done) return RP_OK;
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

/* Every rank's call for this collective into m->calls; a timeout names the ranks that did not send one. */
static rp_status exchange_calls(rp_comm *c, const rp_coll_desc *d, double deadline)
{
    mpi_impl *m = M(c);
    int n = c->size, k = 0;
    m->calls[c->rank] = *d;
    lock();
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        MPI_Irecv(&m->calls[q], (int)sizeof(rp_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    }
    int recvs = k;
    for (int q = 0; q < n; q++) {
        if (q == c->rank) continue;
        MPI_Isend((void *)d, (int)sizeof(rp_coll_desc), MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = k <= 2 * 4096 ? pending : NULL;
    char what[128];
    rp_coll_desc_str(d, what, sizeof what);
    rp_status status = poll_all(c, k, m->reqs, deadline, p, what);
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1024];
    snprintf(msg, sizeof msg, "timed out after %gs in %s on rank %d (%s): ", c->timeout, what, c->rank,
             m->hosts[c->rank]);
    size_t len = strlen(msg);
    int missing = 0;
    for (int i = 0, q = 0; i < recvs; i++, q++) {
        if (q == c->rank) q++;
        if (p && !p[i] && !p[i + recvs]) continue; /* its call came and mine reached it */
        len += (size_t)snprintf(msg + len, len < sizeof msg ? sizeof msg - len : 0, "%srank %d (%s)",
                                missing++ ? ", " : "", q, m->hosts[q]);
        if (len >= sizeof msg) break;
    }
    if (len < sizeof msg)
        snprintf(msg + len, sizeof msg - len, "%s did not arrive (dead, stopped, or in another call)",
                 missing ? "" : "a peer");
    /* The requests cannot complete any more: cancel what can be cancelled and forget them. */
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
 * ranks whose messages are still pending.
 */
static rp_status exchange_data(rp_comm *c, const rp_coll_desc *d, double deadline, const void *const *sbuf,
                               const int *sbytes, void *const *rbuf, const int *rbytes)
{
    mpi_impl *m = M(c);
    int n = c->size;
    lock();
    for (int q = 0; q < n; q++) {
        m->reqs[2 * q] = m->reqs[2 * q + 1] = MPI_REQUEST_NULL;
        if (q == c->rank) continue;
        if (rbytes[q] > 0) MPI_Irecv(rbuf[q], rbytes[q], MPI_BYTE, q, TAG_DATA, m->comm, &m->reqs[2 * q]);
        if (sbytes[q] > 0) MPI_Isend(sbuf[q], sbytes[q], MPI_BYTE, q, TAG_DATA, m->comm, &m->reqs[2 * q + 1]);
    }
    unlock();
    bool pending[2 * 4096];
    bool *p = n <= 4096 ? pending : NULL;
    char what[128];
    rp_coll_desc_str(d, what, sizeof what);
    rp_status status = poll_all(c, 2 * n, m->reqs, deadline, p, what);
    if (status != RP_ERR_TIMEOUT) return status;
    char msg[1024];
    size_t len = (size_t)snprintf(msg, sizeof msg, "timed out after %gs moving the data of %s on rank %d (%s): ",
                                  c->timeout, what, c->rank, m->hosts[c->rank]);
    int missing = 0;
    for (int q = 0; p && q < n && len < sizeof msg; q++)
        if (p[2 * q] || p[2 * q + 1])
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d (%s)", missing++ ? ", " : "", q,
                                    m->hosts[q]);
    if (len < sizeof msg)
        snprintf(msg + len, sizeof msg - len, "%s stopped or died after the call was agreed",
                 missing ? "" : "a peer");
    lock();
    for (int i = 0; i < 2 * n; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL) {
            if (i % 2 == 0) MPI_Cancel(&m->reqs[i]);
            MPI_Request_free(&m->reqs[i]);
        }
    unlock();
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
    RP_CHECK(exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes));
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
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes);
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
    RP_CHECK(exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes));
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
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes);
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
    return exchange_data(c, d, deadline, sbuf, sbytes, rbuf, rbytes);
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
    RP_CHECK(exchange_calls(c, d, deadline));
    for (int q = 0; q < c->size; q++) {
        if (m->calls[q].kind != RP_COLL_LEFT) continue;
        char msg[512];
        snprintf(msg, sizeof msg, "rank %d (%s) ended its step (%s; its own message says why) without "
                 "calling %s, which rank %d is in", q, m->hosts[q], rp_status_name(m->calls[q].op),
                 rp_coll_desc_str(d, what, sizeof what), c->rank);
        mark_broken(c, RP_ERR_COMM, msg);
        return RP_ERROR(RP_ERR_COMM, "%s", msg);
    }
    for (int q = 1; q < c->size; q++) {
        if (rp_coll_desc_equal(&m->calls[q], &m->calls[0])) continue;
        char a[128], b[128], msg[512];
        snprintf(msg, sizeof msg, "collective mismatch: rank 0 (%s) called %s but rank %d (%s) called %s; "
                 "every replica must make the same collective calls in the same order", m->hosts[0],
                 rp_coll_desc_str(&m->calls[0], a, sizeof a), q, m->hosts[q],
                 rp_coll_desc_str(&m->calls[q], b, sizeof b));
        mark_broken(c, RP_ERR_MISMATCH, msg);
        return RP_ERROR(RP_ERR_MISMATCH, "%s", msg);
    }
    rp_status status = RP_OK;
    if (d->count > 0) {
        switch (d->kind) {
        case RP_COLL_ALL_REDUCE: status = mpi_all_reduce(c, d, send, recv, deadline); break;
        case RP_COLL_REDUCE_SCATTER: status = mpi_reduce_scatter(c, d, send, recv, deadline); break;
        case RP_COLL_ALL_GATHER: status = mpi_all_gather(c, d, send, recv, deadline); break;
        case RP_COLL_BROADCAST: status = mpi_broadcast(c, d, recv, deadline); break;
        default: break;
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
    (void)reason;
    mpi_impl *m = M(c);
    if (status == RP_OK || m->broken) return;
    rp_coll_desc notice = {.kind = RP_COLL_LEFT, .op = (int)status, .seq = c->seq};
    int k = 0;
    lock();
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
    int finalized = 0;
    MPI_Finalized(&finalized);
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
    }
    if (!c || !m || !c->ids || !m->hosts || !m->calls || !m->reqs || !m->blocks) {
        if (m) {
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
};
