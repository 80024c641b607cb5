/*
 * ps_mpi.c - parameter servers on MPI ranks: the last S ranks of the job
 * serve (server.c), world ranks 0 .. W-1 are the workers; here, the group
 * and the workers' side.
 *
 * Why dedicated server ranks rather than shards co-located on the workers
 * with a progress thread: a server's loop then never competes with a
 * worker's compute threads for the MPI lock (MPI_THREAD_SERIALIZED) or its
 * cores, a stopped or slow server is a separate process that the timeout
 * names, and the workers' step code stays single-threaded towards MPI.
 *
 * The protocol (protocol.h). Every request is one message on TAG_REQ of the
 * group's own communicator (a duplicate of MPI_COMM_WORLD, so nothing here
 * can match a collective of src/comm/mpi/mpi.c): a fixed header (ps_req:
 * kind, worker, set, flags, one integer argument, lr, and CREATE's
 * configuration) followed by that server's range of the data, if any. Every
 * reply goes back on the set's reply tag (TAG_REPLY + set id): a fixed
 * header (ps_rep: status, one integer, and an error text) followed by the
 * data, if any. The worker sends and receives with MPI derived datatypes
 * over absolute addresses (MPI_BOTTOM), so a server's range of the caller's
 * gradient goes out of, and its values come into, the caller's arrays
 * without a copy.
 *
 * Each call of a worker sends to every server (or to one: stats, claim),
 * then polls its requests against the set's timeout, backing off to short
 * sleeps; a server that does not answer is named with its rank and host and
 * breaks the handle (later calls fail at once with that reason). A
 * server's error reply (a staleness wait past 0.8 x the timeout, a
 * mismatch) is returned as it is and leaves the handle usable.
 *
 * A server rank blocks in MPI_Mrecv once a request's envelope has arrived;
 * on one host the data is then copied at once (shared memory), but across
 * hosts a worker stopped in the middle of sending a large push holds its
 * servers until it resumes (the other workers then time out, naming them).
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/mpi/protocol.h"

static const char *const kind_names[] = {
    "?",    "create", "init",  "push", "pull", "snapshot", "stats",
    "join", "leave",  "claim", "drop", "bye",  "fail",
};

const char *rp_ps_mpi_kind_name(int kind)
{
    return kind >= MSG_CREATE && kind <= MSG_FAIL ? kind_names[kind] : kind_names[0];
}

static void lock(void)
{
    rp_mpi_lock();
}
static void unlock(void)
{
    rp_mpi_unlock();
}

void rp_ps_mpi_back_off(unsigned polls)
{
    if (polls < 300) {
        sched_yield();
        return;
    }
    /* 20, 40, 80, 160 us, then (idle for ~25 ms) 1 ms: a waiting rank costs ~1% of a core. */
    unsigned k = (polls - 300) / 100;
    long us = k < 4 ? 20L << k : 1000L;
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

/* ---- the group ------------------------------------------------------------------------------ */

rp_status rp_ps_mpi_group_create(rp_ps_group **out, int servers, double timeout_s)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "parameter-server group: NULL argument");
    *out = NULL;
    if (!(timeout_s >= 0))
        return RP_ERROR(RP_ERR_INVALID,
                        "parameter-server timeout %g s: must be >= 0 (0: the default)", timeout_s);
    RP_CHECK(rp_mpi_ensure_init());
    int rank = 0, size = 0;
    lock();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unlock();
    if (servers < 1 || servers >= size)
        return RP_ERROR(RP_ERR_INVALID,
                        "%d parameter servers in a job of %d MPI ranks: there must be at "
                        "least 1, and at least one rank left to be a worker",
                        servers, size);
    if (size - servers > RP_PS_MAX_WORKERS)
        return RP_ERROR(RP_ERR_INVALID, "%d workers (%d ranks, %d servers): at most %d",
                        size - servers, size, servers, RP_PS_MAX_WORKERS);
    rp_ps_group *g = calloc(1, sizeof *g);
    if (g) g->hosts = calloc((size_t)size, HOST_MAX);
    if (!g || !g->hosts) {
        free(g);
        return RP_ERROR(RP_ERR_NOMEM, "parameter-server group of %d ranks", size);
    }
    g->rank = rank;
    g->size = size;
    g->servers = servers;
    g->workers = size - servers;
    g->timeout_s = timeout_s > 0 ? timeout_s : rp_env_get()->comm_timeout;
    char host[HOST_MAX] = "", name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    g->comm = MPI_COMM_NULL;
    lock();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &g->comm);
    if (rc == MPI_SUCCESS) {
        /* Errors come back as codes (reported with the peer), not as an abort inside MPI. */
        MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
        MPI_Get_processor_name(name, &len);
        memcpy(host, name, (size_t)(len < HOST_MAX - 1 ? len : HOST_MAX - 1));
        rc = MPI_Allgather(host, HOST_MAX, MPI_CHAR, g->hosts, HOST_MAX, MPI_CHAR, g->comm);
    }
    unlock();
    if (rc != MPI_SUCCESS) {
        lock();
        if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
        unlock();
        free(g->hosts);
        free(g);
        return RP_ERROR(RP_ERR_BACKEND,
                        "parameter-server group: MPI_Comm_dup or MPI_Allgather failed on rank %d",
                        rank);
    }
    rp_log_set_rank(rank);
    *out = g;
    return RP_OK;
}

bool rp_ps_group_is_server(const rp_ps_group *g)
{
    return g && g->rank >= g->workers;
}
int rp_ps_group_workers(const rp_ps_group *g)
{
    return g ? g->workers : 0;
}
int rp_ps_group_index(const rp_ps_group *g)
{
    if (!g) return -1;
    return g->rank >= g->workers ? g->rank - g->workers : g->rank;
}

/*
 * Sends one small message (a header, and `text` if given) to every server
 * and waits briefly for the sends, which go eagerly.
 */
static void tell_servers(rp_ps_group *g, const ps_req *req, const char *text)
{
    MPI_Request reqs[2 * 256];
    MPI_Datatype t = MPI_DATATYPE_NULL;
    int n = g->servers < 256 ? g->servers : 256, k = 0;
    int bytes = (int)sizeof *req;
    lock();
    if (text) {
        MPI_Aint addr[2];
        int lens[2] = {(int)sizeof *req, (int)strlen(text) + 1};
        MPI_Get_address(req, &addr[0]);
        MPI_Get_address(text, &addr[1]);
        MPI_Type_create_hindexed(2, lens, addr, MPI_BYTE, &t);
        MPI_Type_commit(&t);
    }
    for (int s = 0; s < n; s++) {
        if (text)
            MPI_Isend(MPI_BOTTOM, 1, t, SERVER_RANK(g, s), TAG_REQ, g->comm, &reqs[k++]);
        else
            MPI_Isend(req, bytes, MPI_BYTE, SERVER_RANK(g, s), TAG_REQ, g->comm, &reqs[k++]);
    }
    if (text) MPI_Type_free(&t);
    unlock();
    /* A stopped or dead server must not hold a finishing worker up for long. */
    double deadline = rp_now_s() + 2.0;
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        lock();
        MPI_Testall(k, reqs, &done, MPI_STATUSES_IGNORE);
        if (!done && rp_now_s() > deadline) {
            for (int i = 0; i < k; i++)
                if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
            done = 1;
        }
        unlock();
        if (done) return;
        rp_ps_mpi_back_off(polls);
    }
}

/*
 * Not in ps.h yet: a worker whose job failed tells every server, so that
 * rp_ps_mpi_serve() returns RP_ERR_COMM naming it instead of waiting for
 * its BYE. The group can still be destroyed afterwards.
 */
void rp_ps_group_fail(rp_ps_group *g, rp_status status, const char *reason)
{
    if (!g || rp_ps_group_is_server(g)) return;
    ps_req req = {.kind = MSG_FAIL, .worker = g->rank, .set = -1, .arg = status};
    char text[TEXT_MAX];
    snprintf(text, sizeof text, "%s", reason ? reason : "");
    tell_servers(g, &req, text);
}

void rp_ps_group_destroy(rp_ps_group *g)
{
    if (!g) return;
    int finalized = 0;
    lock();
    MPI_Finalized(&finalized);
    unlock();
    if (!finalized && g->comm != MPI_COMM_NULL && g->hosts && g->rank < g->workers &&
        g->workers > 0) {
        ps_req bye = {.kind = MSG_BYE, .worker = g->rank, .set = -1};
        tell_servers(g, &bye, NULL);
    }
    if (!finalized && g->comm != MPI_COMM_NULL) {
        lock();
        MPI_Comm_free(&g->comm);
        unlock();
    }
    free(g->hosts);
    free(g);
}

/* ---- the worker's side: a handle on one set ------------------------------------------ */

typedef struct mpi_ps {
    rp_ps_group *g;
    int set;
    int64_t *lo, *n;   /* [S] each server's range */
    ps_req req;        /* the current call's header (the same to every server) */
    ps_rep *rep;       /* [S] the replies' headers */
    MPI_Request *reqs; /* [2S] receive, send for each server */
    bool broken;
    rp_status broken_status;
    char reason[1024];
} mpi_ps;

static const rp_ps_ops mpi_ops;

static mpi_ps *P(const rp_ps *ps)
{
    return ps->impl;
}

/* What one call moves to and from each server: arrays of the whole set, each server its range. */
typedef struct xfer {
    const float *send;       /* gradient or values */
    const float *send_slots; /* send_k slots of numel floats, back to back */
    int send_k;
    float *recv;
    float *recv_slots;
    int recv_k;
    void *recv_raw; /* STATS: the struct, whole */
    int recv_raw_bytes;
} xfer;

/*
 * An hindexed MPI_BYTE type over absolute addresses (used with MPI_BOTTOM);
 * zero-length blocks are dropped. Under the lock.
 */
static MPI_Datatype block_type(int count, const void *const *addr, const int *lens)
{
    MPI_Aint a[MAX_BLOCKS + 1];
    int l[MAX_BLOCKS + 1], k = 0;
    for (int i = 0; i < count; i++) {
        if (lens[i] <= 0) continue;
        MPI_Get_address(addr[i], &a[k]);
        l[k++] = lens[i];
    }
    MPI_Datatype t;
    MPI_Type_create_hindexed(k, l, a, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return t;
}

static void mark_broken(mpi_ps *m, rp_status status, const char *reason)
{
    if (m->broken) return;
    m->broken = true;
    m->broken_status = status;
    snprintf(m->reason, sizeof m->reason, "%s", reason);
}

/*
 * One round trip with servers [s0, s1): m->req plus each server's range of
 * x's send arrays out; the reply header and the server's range of x's
 * receive arrays back. A server that does not answer by the deadline is
 * named and breaks the handle; a server's error reply is returned as it is.
 */
static rp_status call(rp_ps *ps, int s0, int s1, const xfer *x)
{
    mpi_ps *m = P(ps);
    rp_ps_group *g = m->g;
    const char *what =
        m->req.kind == MSG_PUSH && (m->req.flags & F_PULL) ? "push_pull" : kind_names[m->req.kind];
    if (m->broken)
        return RP_ERROR(m->broken_status,
                        "%s of set %d by worker %d: the handle is broken by an earlier error: %s",
                        what, m->set, ps->worker, m->reason);
    int k = 0, tag = REPLY_TAG(m->set);
    double deadline = rp_now_s() + ps->cfg.timeout_s;
    lock();
    for (int s = s0; s < s1; s++, k++) {
        int64_t lo = m->lo[s];
        int bytes = (int)(m->n[s] * (int64_t)sizeof(float));
        const void *addr[MAX_BLOCKS + 1];
        int lens[MAX_BLOCKS + 1], b = 0;
        addr[b] = &m->rep[s];
        lens[b++] = (int)sizeof(ps_rep);
        if (x && x->recv) {
            addr[b] = x->recv + lo;
            lens[b++] = bytes;
        }
        for (int j = 0; x && x->recv_slots && j < x->recv_k; j++) {
            addr[b] = x->recv_slots + (int64_t)j * ps->numel + lo;
            lens[b++] = bytes;
        }
        if (x && x->recv_raw) {
            addr[b] = x->recv_raw;
            lens[b++] = x->recv_raw_bytes;
        }
        m->rep[s] = (ps_rep){.status = RP_ERR_COMM};
        MPI_Datatype rt = block_type(b, addr, lens);
        MPI_Irecv(MPI_BOTTOM, 1, rt, SERVER_RANK(g, s), tag, g->comm, &m->reqs[2 * k]);
        MPI_Type_free(&rt);
        b = 0;
        addr[b] = &m->req;
        lens[b++] = (int)sizeof(ps_req);
        if (x && x->send) {
            addr[b] = x->send + lo;
            lens[b++] = bytes;
        }
        for (int j = 0; x && x->send_slots && j < x->send_k; j++) {
            addr[b] = x->send_slots + (int64_t)j * ps->numel + lo;
            lens[b++] = bytes;
        }
        MPI_Datatype st = block_type(b, addr, lens);
        MPI_Isend(MPI_BOTTOM, 1, st, SERVER_RANK(g, s), TAG_REQ, g->comm, &m->reqs[2 * k + 1]);
        MPI_Type_free(&st);
    }
    unlock();
    int rc = MPI_SUCCESS, done = 0;
    for (unsigned polls = 0;; polls++) {
        lock();
        rc = MPI_Testall(2 * k, m->reqs, &done, MPI_STATUSES_IGNORE);
        unlock();
        if (rc != MPI_SUCCESS || done || rp_now_s() > deadline) break;
        rp_ps_mpi_back_off(polls);
    }
    if (done && rc == MPI_SUCCESS) {
        for (int s = s0; s < s1; s++)
            if (m->rep[s].status != RP_OK) {
                m->rep[s].text[TEXT_MAX - 1] = 0;
                return RP_ERROR(m->rep[s].status, "%s", m->rep[s].text);
            }
        return RP_OK;
    }
    /* Name the servers whose reply is missing, then forget the requests: they cannot complete. */
    char msg[1024];
    size_t len = 0;
    int missing = 0;
    lock();
    for (int i = 0; i < k; i++) {
        int s = s0 + i, flag = 1;
        if (m->reqs[2 * i] != MPI_REQUEST_NULL) MPI_Test(&m->reqs[2 * i], &flag, MPI_STATUS_IGNORE);
        if (flag && rc == MPI_SUCCESS) continue;
        int r = SERVER_RANK(g, s);
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len,
                                    "%sparameter server %d (rank %d on host %s)",
                                    missing++ ? ", " : "", s, r, g->hosts[r]);
    }
    for (int i = 0; i < 2 * k; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL) {
            if (i % 2 == 0) MPI_Cancel(&m->reqs[i]);
            MPI_Request_free(&m->reqs[i]);
        }
    unlock();
    rp_status status = rc != MPI_SUCCESS ? RP_ERR_BACKEND : RP_ERR_TIMEOUT;
    if (len < sizeof msg) {
        if (rc != MPI_SUCCESS)
            snprintf(msg + len, sizeof msg - len,
                     ": MPI reported an error in a %s of set %d by worker %d (rank %d on host %s)",
                     what, m->set, ps->worker, g->rank, g->hosts[g->rank]);
        else
            snprintf(msg + len, sizeof msg - len,
                     " did not answer a %s of set %d by worker %d within %g s: %s "
                     "stopped, dead or overloaded",
                     what, m->set, ps->worker, ps->cfg.timeout_s,
                     missing > 1 ? "they are" : "it is");
    }
    mark_broken(m, status, msg);
    return RP_ERROR(status, "%s", msg);
}

static rp_status all_servers(rp_ps *ps, const xfer *x)
{
    return call(ps, 0, ps->cfg.servers, x);
}

static void set_req(mpi_ps *m, int kind, int flags, int64_t arg, float lr)
{
    m->req.kind = kind;
    m->req.flags = flags;
    m->req.arg = arg;
    m->req.lr = lr;
}

static rp_status mpi_push_pull(rp_ps *ps, const float *grad, float lr, float *values)
{
    mpi_ps *m = P(ps);
    set_req(m, grad ? MSG_PUSH : MSG_PULL, grad && values ? F_PULL : 0, 0, lr);
    xfer x = {.send = grad, .recv = values};
    return all_servers(ps, &x);
}

static rp_status mpi_init(rp_ps *ps, const float *values, const float *slots, int64_t step)
{
    mpi_ps *m = P(ps);
    int k = rp_optim_slots(&ps->cfg.optim);
    set_req(m, MSG_INIT, slots && k > 0 ? F_SLOTS : 0, step, 0);
    xfer x = {.send = values, .send_slots = slots, .send_k = k};
    return all_servers(ps, &x);
}

static rp_status mpi_snapshot(rp_ps *ps, float *values, float *slots, int64_t *step)
{
    mpi_ps *m = P(ps);
    int k = rp_optim_slots(&ps->cfg.optim);
    set_req(m, MSG_SNAPSHOT, slots && k > 0 ? F_SLOTS : 0, 0, 0);
    xfer x = {.recv = values, .recv_slots = slots, .recv_k = k};
    RP_CHECK(all_servers(ps, &x));
    *step = m->rep[0].arg;
    return RP_OK;
}

static rp_status mpi_stats(rp_ps *ps, int server, rp_ps_server_stats *st)
{
    mpi_ps *m = P(ps);
    set_req(m, MSG_STATS, 0, 0, 0);
    xfer x = {.recv_raw = st, .recv_raw_bytes = (int)sizeof *st};
    return call(ps, server, server + 1, &x);
}

static rp_status mpi_join(rp_ps *ps, uint64_t phase)
{
    set_req(P(ps), MSG_JOIN, 0, (int64_t)phase, 0);
    return all_servers(ps, NULL);
}

static rp_status mpi_leave(rp_ps *ps)
{
    set_req(P(ps), MSG_LEAVE, 0, 0, 0);
    return all_servers(ps, NULL);
}

static rp_status mpi_claim(rp_ps *ps, int64_t *ticket)
{
    mpi_ps *m = P(ps);
    set_req(m, MSG_CLAIM, 0, 0, 0);
    RP_CHECK(call(ps, 0, 1, NULL));
    *ticket = m->rep[0].arg;
    return RP_OK;
}

static void mpi_destroy(rp_ps *ps)
{
    mpi_ps *m = P(ps);
    if (m) {
        rp_ps_group *g = m->g;
        /* Created on the servers (or tried to be): they forget it once every worker drops it. */
        if (m->reqs) {
            int finalized = 0;
            lock();
            MPI_Finalized(&finalized);
            unlock();
            ps_req drop = {.kind = MSG_DROP, .worker = ps->worker, .set = m->set};
            if (!finalized) tell_servers(g, &drop, NULL);
        }
        g->sets_alive--;
        free(m->lo);
        free(m->n);
        free(m->rep);
        free(m->reqs);
        free(m);
    }
    free(ps);
}

rp_status rp_ps_mpi_create(rp_ps **out, rp_ps_group *g, int64_t numel, const rp_ps_config *cfg)
{
    if (!out || !g || !cfg)
        return RP_ERROR(RP_ERR_INVALID, "parameter servers (mpi): NULL argument");
    *out = NULL;
    if (rp_ps_group_is_server(g))
        return RP_ERROR(RP_ERR_INVALID,
                        "rank %d is parameter server %d: it serves (rp_ps_mpi_serve), it does "
                        "not create sets",
                        g->rank, rp_ps_group_index(g));
    if (numel < 0) return RP_ERROR(RP_ERR_INVALID, "numel %lld < 0", (long long)numel);
    if (cfg->servers != g->servers)
        return RP_ERROR(RP_ERR_INVALID,
                        "the configuration asks for %d parameter servers but the MPI group has %d",
                        cfg->servers, g->servers);
    if (!(cfg->timeout_s >= 0))
        return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be >= 0 (0: the group's)",
                        cfg->timeout_s);
    RP_CHECK(rp_optim_check(&cfg->optim));
    int k = rp_optim_slots(&cfg->optim);
    int64_t lo0, hi0;
    rp_ps_shard_range(numel, g->servers, 0, &lo0, &hi0);
    if ((hi0 - lo0) * (int64_t)sizeof(float) * (1 + k) > INT_MAX - 4096)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "a set of %lld floats on %d MPI parameter servers: at most %d bytes "
                        "per server and message (use more servers)",
                        (long long)numel, g->servers, INT_MAX - 4096);
    if (g->sets_alive >= MAX_SETS)
        return RP_ERROR(RP_ERR_INVALID, "worker %d has %d parameter-server sets alive: at most %d",
                        g->rank, g->sets_alive, MAX_SETS);
    rp_ps *ps = calloc(1, sizeof *ps);
    mpi_ps *m = calloc(1, sizeof *m);
    if (!ps || !m) {
        free(ps);
        free(m);
        return RP_ERROR(RP_ERR_NOMEM, "parameter-server handle");
    }
    int S = g->servers;
    ps->ops = &mpi_ops;
    ps->worker = g->rank;
    ps->workers = g->workers;
    ps->numel = numel;
    ps->cfg = *cfg;
    if (ps->cfg.timeout_s == 0) ps->cfg.timeout_s = g->timeout_s;
    ps->impl = m;
    m->g = g;
    m->set = g->sets_made++;
    g->sets_alive++;
    m->lo = calloc((size_t)S, sizeof *m->lo);
    m->n = calloc((size_t)S, sizeof *m->n);
    m->rep = calloc((size_t)S, sizeof *m->rep);
    m->reqs = calloc(2 * (size_t)S, sizeof *m->reqs);
    if (!m->lo || !m->n || !m->rep || !m->reqs) {
        mpi_destroy(ps);
        return RP_ERROR(RP_ERR_NOMEM, "parameter-server handle for %d servers", S);
    }
    for (int s = 0; s < S; s++) {
        int64_t lo, hi;
        rp_ps_shard_range(numel, S, s, &lo, &hi);
        m->lo[s] = lo;
        m->n[s] = hi - lo;
    }
    m->req = (ps_req){.kind = MSG_CREATE,
                      .worker = g->rank,
                      .set = m->set,
                      .arg = numel,
                      .staleness = cfg->staleness,
                      .timeout_s = ps->cfg.timeout_s,
                      .optim = cfg->optim};
    rp_status status = all_servers(ps, NULL);
    if (status != RP_OK) {
        mpi_destroy(ps);
        return status;
    }
    *out = ps;
    return RP_OK;
}

static const rp_ps_ops mpi_ops = {
    .name = "mpi",
    .push_pull = mpi_push_pull,
    .init = mpi_init,
    .snapshot = mpi_snapshot,
    .stats = mpi_stats,
    .join = mpi_join,
    .leave = mpi_leave,
    .claim = mpi_claim,
    .destroy = mpi_destroy,
};
