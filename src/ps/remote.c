/*
 * remote.c - parameter servers on members of a communicator: the last S
 * ranks serve (server.c), ranks 0 .. W-1 are the workers; here, the group
 * and the workers' side. Under MPI the communicator is the MPI backend's
 * (rp_ps_mpi_group_create): the project's one MPI transport carries the
 * parameter servers too. Any other backend with point-to-point works the
 * same way (the tests run the servers on threads).
 *
 * Why dedicated server ranks rather than shards co-located on the workers
 * with a progress thread: a server's loop then never competes with a
 * worker's compute threads for the communicator or its cores, a stopped or
 * slow server is a separate process that the timeout names, and the
 * workers' step code stays single-threaded towards the communicator.
 *
 * The protocol (remote.h). A request to a server is a header (ps_req) and
 * then its data blocks, each block the server's range of one of the
 * caller's arrays, sent straight from that array (no packing copy: a push
 * of a large set moves each server's slice of the gradient once). A reply
 * is a header (ps_rep) and its blocks, received straight into the caller's
 * arrays. The worker posts the reply header's receive before sending, and
 * the receives of the reply's blocks once the header says what comes (an
 * error's reply carries its text instead of the values).
 *
 * Each call of a worker sends to every server (or to one: stats, claim),
 * then polls its requests against the set's timeout, backing off to short
 * sleeps. A server that does not answer is named with its rank and host;
 * its requests then fail, which breaks the communicator (comm.h), so the
 * group is broken: every later call fails at once with that reason. A
 * server's error reply (a staleness wait past 0.8 x the timeout, a
 * mismatch) is returned as it is and leaves the handle usable.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ps/remote.h"

static const char *const kind_names[] = {
    "?",    "create", "init",  "push", "pull", "snapshot", "stats",
    "join", "leave",  "claim", "drop", "bye",  "fail",
};

const char *ps_remote_kind_name(int kind)
{
    return kind >= MSG_CREATE && kind <= MSG_FAIL ? kind_names[kind] : kind_names[0];
}

void ps_remote_back_off(unsigned polls)
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

static void note_error(rp_status st, rp_status *first, char *error, size_t size)
{
    if (st == RP_OK || *first != RP_OK) return;
    *first = st;
    snprintf(error, size, "%s", rp_last_error());
}

rp_status ps_remote_wait(rp_comm *c, rp_comm_request **reqs, int *n, bool *ok, double deadline,
                         rp_status (*on_done)(void *ctx, int i), void *ctx)
{
    rp_status first = RP_OK;
    char error[1024] = "";
    /*
     * Tested in order, up to the first still pending: one test a poll while
     * waiting. Each test is a few MPI calls, and an oversubscribed OpenMPI
     * yields the core in each that finds nothing, so testing every request
     * at every poll made the waits many times longer; any of the calls
     * progresses all of this rank's messages, so the later ones are found
     * done when their turn comes.
     */
    for (unsigned polls = 0;;) {
        bool pending = false, progress = false;
        for (int i = 0; i < *n && !pending; i++) {
            if (!reqs[i]) continue;
            bool done = false;
            rp_status st = rp_comm_test(reqs[i], &done);
            if (!done) {
                pending = true;
                continue;
            }
            reqs[i] = NULL;
            progress = true;
            if (st == RP_OK && on_done) st = on_done(ctx, i);
            if (st != RP_OK && ok) ok[i] = false;
            note_error(st, &first, error, sizeof error);
        }
        if (!pending || rp_now_s() > deadline) break;
        if (progress)
            polls = 0;
        else
            ps_remote_back_off(polls++);
    }
    /*
     * Past the deadline: each request still pending is waited for with what
     * is left (the communicator's timeout, for this wait only), so it fails,
     * naming its peer, and is freed; the first failure breaks the
     * communicator and the others fail at once.
     */
    double keep = rp_comm_timeout(c);
    for (int i = 0; i < *n; i++) {
        if (!reqs[i]) continue;
        double left = deadline - rp_now_s();
        rp_comm_set_timeout(c, left > 1e-3 ? left : 1e-3);
        rp_status st = rp_comm_wait(reqs[i]);
        reqs[i] = NULL;
        if (st == RP_OK && on_done) st = on_done(ctx, i);
        if (st != RP_OK && ok) ok[i] = false;
        note_error(st, &first, error, sizeof error);
    }
    rp_comm_set_timeout(c, keep);
    if (first != RP_OK) rp_error_set(first, NULL, 0, "%s", error);
    return first;
}

/* ---- the group ------------------------------------------------------------------------------ */

rp_status rp_ps_group_create(rp_ps_group **out, rp_comm *comm, int servers, double timeout_s)
{
    if (!out || !comm) return RP_ERROR(RP_ERR_INVALID, "parameter-server group: NULL argument");
    *out = NULL;
    if (!(timeout_s >= 0))
        return RP_ERROR(RP_ERR_INVALID,
                        "parameter-server timeout %g s: must be >= 0 (0: the communicator's)",
                        timeout_s);
    int rank = rp_comm_rank(comm), size = rp_comm_size(comm);
    if (servers < 1 || servers >= size)
        return RP_ERROR(
            RP_ERR_INVALID,
            "%d parameter servers in a job of %d ranks: there must be at least 1, and at "
            "least one rank left to be a worker",
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
    g->comm = comm;
    g->rank = rank;
    g->size = size;
    g->servers = servers;
    g->workers = size - servers;
    g->timeout_s = timeout_s > 0 ? timeout_s : rp_comm_timeout(comm);
    /* Each rank's host, for the messages that name a server or a worker. */
    char host[HOST_MAX] = "";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[HOST_MAX - 1] = '\0';
    rp_comm_begin_internal(comm, "the parameter servers' host exchange");
    rp_status status = rp_comm_all_gather(comm, host, g->hosts, HOST_MAX, RP_U8);
    rp_comm_end_internal(comm);
    if (status != RP_OK) {
        free(g->hosts);
        free(g);
        return status;
    }
    *out = g;
    return RP_OK;
}

rp_status rp_ps_mpi_group_create(rp_ps_group **out, int servers, double timeout_s)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "parameter-server group: NULL argument");
    *out = NULL;
    if (!(timeout_s >= 0))
        return RP_ERROR(RP_ERR_INVALID,
                        "parameter-server timeout %g s: must be >= 0 (0: the default)", timeout_s);
    double timeout = timeout_s > 0 ? timeout_s : rp_env_get()->comm_timeout;
    rp_comm *comm = NULL;
    rp_status status = rp_comm_mpi_create(&comm, timeout);
    if (status == RP_ERR_UNSUPPORTED)
        return RP_ERROR(status, "no MPI parameter servers: %s", rp_last_error());
    RP_CHECK(status);
    status = rp_ps_group_create(out, comm, servers, timeout);
    if (status != RP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", rp_last_error());
        rp_comm_destroy(comm);
        return rp_error_set(status, NULL, 0, "%s", why);
    }
    (*out)->owns_comm = true;
    rp_log_set_rank((*out)->rank);
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
 * Sends a header (and `text` as its one block, if given) to every server
 * and waits briefly for the sends: they are small, so they go at once
 * unless a server is gone, and a stopped or dead server must not hold a
 * finishing worker up for long.
 */
static void tell_servers(rp_ps_group *g, ps_req *req, const char *text)
{
    if (g->broken || rp_comm_broken(g->comm)) return;
    rp_comm_request *reqs[2 * 256] = {NULL};
    int n = 0;
    int64_t len = text ? (int64_t)strlen(text) + 1 : 0;
    req->blocks = text ? 1 : 0;
    req->count = len;
    for (int s = 0; s < g->servers; s++) {
        if (rp_comm_isend(g->comm, req, (int64_t)sizeof *req, RP_U8, SERVER_RANK(g, s), TAG_REQ,
                          &reqs[n]) != RP_OK)
            break;
        n++;
        if (text) {
            if (rp_comm_isend(g->comm, text, len, RP_U8, SERVER_RANK(g, s), TAG_DATA, &reqs[n]) !=
                RP_OK)
                break;
            n++;
        }
    }
    (void)ps_remote_wait(g->comm, reqs, &n, NULL, rp_now_s() + 2.0, NULL, NULL);
}

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
    if (!rp_ps_group_is_server(g)) {
        ps_req bye = {.kind = MSG_BYE, .worker = g->rank, .set = -1};
        tell_servers(g, &bye, NULL);
    }
    if (g->owns_comm) rp_comm_destroy(g->comm);
    free(g->hosts);
    free(g);
}

/* ---- the worker's side: a handle on one set ------------------------------------------ */

/* Requests of one call per server: the reply's header and blocks, the request's header and blocks.
 */
#define REQS_PER_SERVER (2 + 2 * MAX_BLOCKS)

/* What one call moves to and from each server: arrays of the whole set, each server its range. */
typedef struct xfer {
    const float *send;       /* gradient or values */
    const float *send_slots; /* send_k slots of numel floats, back to back */
    int send_k;
    float *recv;
    float *recv_slots;
    int recv_k;
    void *recv_raw; /* STATS: the struct, whole */
    int64_t recv_raw_bytes;
} xfer;

typedef struct remote_ps {
    rp_ps *ps;
    rp_ps_group *g;
    int set;
    int64_t *lo, *n;        /* [S] each server's range */
    ps_req req;             /* the current call's header */
    ps_req *head;           /* [S] the header as sent to each server (its block size) */
    ps_rep *rep;            /* [S] the replies' headers */
    char (*text)[TEXT_MAX]; /* [S] the replies' error texts */
    rp_comm_request **reqs; /* [S * REQS_PER_SERVER] */
    int *owner;             /* [S * REQS_PER_SERVER] server * 2 + 1 for a reply header, * 2 else */
    bool *ok;               /* [S * REQS_PER_SERVER] */
    bool *answered; /* [S] the reply's header came (a later failure to post is not the server's) */
    int nreq;
    const xfer *x; /* the current call's arrays */
} remote_ps;

static const ps_ops mpi_ops, remote_ops;

static remote_ps *P(const rp_ps *ps)
{
    return ps->impl;
}

static void group_break(rp_ps_group *g, rp_status status, const char *reason)
{
    if (g->broken) return;
    g->broken = true;
    g->broken_status = status;
    snprintf(g->reason, sizeof g->reason, "%s", reason);
}

static rp_status post(remote_ps *m, int s, bool reply_header, rp_status st)
{
    m->owner[m->nreq] = s * 2 + (reply_header ? 1 : 0);
    m->ok[m->nreq] = st == RP_OK;
    if (st == RP_OK) m->nreq++;
    return st;
}

/* A reply header has arrived: post the receives of what follows it, straight into the caller's
 * arrays. */
static rp_status reply_arrived(void *ctx, int i)
{
    remote_ps *m = ctx;
    if (!(m->owner[i] & 1)) return RP_OK;
    int s = m->owner[i] / 2, peer = SERVER_RANK(m->g, s);
    rp_comm *c = m->g->comm;
    m->answered[s] = true;
    const ps_rep *r = &m->rep[s];
    const xfer *x = m->x;
    if (r->status != RP_OK) {
        if (r->blocks != 1 || r->count != TEXT_MAX)
            return RP_ERROR(RP_ERR_COMM,
                            "parameter server %d: an error reply (%s) without its text", s,
                            rp_status_name((rp_status)r->status));
        return post(
            m, s, false,
            rp_comm_irecv(c, m->text[s], TEXT_MAX, RP_U8, peer, TAG_REPLY_DATA, &m->reqs[m->nreq]));
    }
    int64_t lo = m->lo[s], n = m->n[s];
    int blocks = 0;
    int64_t count = 0;
    if (x && x->recv_raw) {
        blocks = 1;
        count = x->recv_raw_bytes;
    } else if (x && x->recv && n > 0) {
        blocks = 1 + (x->recv_slots ? x->recv_k : 0);
        count = n;
    }
    if (r->blocks != blocks || (blocks > 0 && r->count != count))
        return RP_ERROR(RP_ERR_COMM,
                        "parameter server %d answered a %s with %d blocks of %lld elements, "
                        "expected %d of %lld",
                        s, ps_remote_kind_name(m->req.kind), r->blocks, (long long)r->count, blocks,
                        (long long)count);
    if (x && x->recv_raw)
        return post(
            m, s, false,
            rp_comm_irecv(c, x->recv_raw, count, RP_U8, peer, TAG_REPLY_DATA, &m->reqs[m->nreq]));
    for (int b = 0; b < blocks; b++) {
        float *dst = b == 0 ? x->recv + lo : x->recv_slots + (int64_t)(b - 1) * m->ps->numel + lo;
        RP_CHECK(post(m, s, false,
                      rp_comm_irecv(c, dst, n, RP_F32, peer, TAG_REPLY_DATA, &m->reqs[m->nreq])));
    }
    return RP_OK;
}

/*
 * One round trip with servers [s0, s1): m->req plus each server's range of
 * x's send arrays out; the reply header and the server's range of x's
 * receive arrays back. A server that does not answer by the deadline is
 * named and breaks the group; a server's error reply is returned as it is.
 */
static rp_status call(rp_ps *ps, int s0, int s1, const xfer *x)
{
    remote_ps *m = P(ps);
    rp_ps_group *g = m->g;
    rp_comm *c = g->comm;
    const char *what = m->req.kind == MSG_PUSH && (m->req.flags & F_PULL)
                           ? "push_pull"
                           : ps_remote_kind_name(m->req.kind);
    if (g->broken)
        return RP_ERROR(g->broken_status,
                        "%s of set %d by worker %d: the handle is broken by an earlier error: %s",
                        what, m->set, ps->worker, g->reason);
    double deadline = rp_now_s() + ps->cfg.timeout_s;
    m->x = x;
    m->nreq = 0;
    int sends = x ? (x->send ? 1 : 0) + (x->send_slots ? x->send_k : 0) : 0;
    rp_status status = RP_OK;
    char error[1024] = "";
    for (int s = s0; s < s1 && status == RP_OK; s++) {
        int peer = SERVER_RANK(g, s);
        int64_t lo = m->lo[s], n = m->n[s];
        m->head[s] = m->req;
        m->head[s].blocks = n > 0 ? sends : 0;
        m->head[s].count = n;
        m->rep[s] = (ps_rep){.status = RP_ERR_COMM};
        m->answered[s] = false;
        status = post(m, s, true,
                      rp_comm_irecv(c, &m->rep[s], (int64_t)sizeof(ps_rep), RP_U8, peer, TAG_REPLY,
                                    &m->reqs[m->nreq]));
        if (status == RP_OK)
            status = post(m, s, false,
                          rp_comm_isend(c, &m->head[s], (int64_t)sizeof(ps_req), RP_U8, peer,
                                        TAG_REQ, &m->reqs[m->nreq]));
        for (int b = 0; b < m->head[s].blocks && status == RP_OK; b++) {
            const float *src =
                b == 0 && x->send
                    ? x->send + lo
                    : x->send_slots + (int64_t)(b - (x->send ? 1 : 0)) * ps->numel + lo;
            status = post(m, s, false,
                          rp_comm_isend(c, src, n, RP_F32, peer, TAG_DATA, &m->reqs[m->nreq]));
        }
        if (status != RP_OK) {
            snprintf(error, sizeof error, "%s", rp_last_error());
            /* Not posted: counted against server s below. */
            m->owner[m->nreq] = s * 2;
            m->ok[m->nreq] = false;
            m->reqs[m->nreq++] = NULL;
        }
    }
    bool timed_out = false;
    if (m->nreq > 0) {
        rp_status st = ps_remote_wait(c, m->reqs, &m->nreq, m->ok, deadline, reply_arrived, m);
        if (status == RP_OK && st != RP_OK) {
            status = st;
            snprintf(error, sizeof error, "%s", rp_last_error());
        }
        timed_out = rp_now_s() > deadline;
    }
    m->x = NULL;
    if (status == RP_OK) {
        for (int s = s0; s < s1; s++)
            if (m->rep[s].status != RP_OK) {
                m->text[s][TEXT_MAX - 1] = 0;
                return RP_ERROR(m->rep[s].status, "%s", m->text[s]);
            }
        return RP_OK;
    }
    /* Name the servers whose part is missing. */
    char msg[1024];
    size_t len = 0;
    int missing = 0;
    for (int s = s0; s < s1; s++) {
        bool bad = false;
        /* A header that came, whose blocks could not be asked for (another server broke the
         * communicator): not s's fault. */
        for (int i = 0; i < m->nreq; i++)
            bad |= m->owner[i] / 2 == s && !m->ok[i] && !(m->owner[i] % 2 == 1 && m->answered[s]);
        if (!bad) continue;
        int r = SERVER_RANK(g, s);
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len,
                                    "%sparameter server %d (rank %d on host %s)",
                                    missing++ ? ", " : "", s, r, g->hosts[r]);
    }
    if (missing == 0 && len < sizeof msg)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "the parameter servers");
    if (len < sizeof msg) {
        if (status == RP_ERR_TIMEOUT && timed_out)
            snprintf(msg + len, sizeof msg - len,
                     " did not answer a %s of set %d by worker %d within %g s: %s stopped, dead or "
                     "overloaded",
                     what, m->set, ps->worker, ps->cfg.timeout_s,
                     missing > 1 ? "they are" : "it is");
        else
            snprintf(msg + len, sizeof msg - len,
                     " did not answer a %s of set %d by worker %d (rank %d on host %s): %s", what,
                     m->set, ps->worker, g->rank, g->hosts[g->rank], error);
    }
    rp_status broke =
        status == RP_ERR_MISMATCH || status == RP_ERR_BACKEND || status == RP_ERR_NOMEM ? status
        : status == RP_ERR_TIMEOUT ? RP_ERR_TIMEOUT
                                   : RP_ERR_COMM;
    group_break(g, broke, msg);
    return RP_ERROR(broke, "%s", msg);
}

static rp_status all_servers(rp_ps *ps, const xfer *x)
{
    return call(ps, 0, ps->cfg.servers, x);
}

static void set_req(remote_ps *m, int kind, int flags, int64_t arg, float lr)
{
    m->req.kind = kind;
    m->req.flags = flags;
    m->req.arg = arg;
    m->req.lr = lr;
}

static rp_status remote_push_pull(rp_ps *ps, const float *grad, float lr, float *values)
{
    remote_ps *m = P(ps);
    set_req(m, grad ? MSG_PUSH : MSG_PULL, grad && values ? F_PULL : 0, 0, lr);
    xfer x = {.send = grad, .recv = values};
    return all_servers(ps, &x);
}

static rp_status remote_init(rp_ps *ps, const float *values, const float *slots, int64_t step)
{
    remote_ps *m = P(ps);
    int k = rp_optim_slots(&ps->cfg.optim);
    bool with_slots = slots && k > 0;
    set_req(m, MSG_INIT, with_slots ? F_SLOTS : 0, step, 0);
    xfer x = {
        .send = values, .send_slots = with_slots ? slots : NULL, .send_k = with_slots ? k : 0};
    return all_servers(ps, &x);
}

static rp_status remote_snapshot(rp_ps *ps, float *values, float *slots, int64_t *step)
{
    remote_ps *m = P(ps);
    int k = rp_optim_slots(&ps->cfg.optim);
    bool with_slots = slots && k > 0;
    set_req(m, MSG_SNAPSHOT, with_slots ? F_SLOTS : 0, 0, 0);
    xfer x = {
        .recv = values, .recv_slots = with_slots ? slots : NULL, .recv_k = with_slots ? k : 0};
    RP_CHECK(all_servers(ps, &x));
    *step = m->rep[0].arg;
    return RP_OK;
}

static rp_status remote_stats(rp_ps *ps, int server, rp_ps_server_stats *st)
{
    remote_ps *m = P(ps);
    set_req(m, MSG_STATS, 0, 0, 0);
    xfer x = {.recv_raw = st, .recv_raw_bytes = (int64_t)sizeof *st};
    return call(ps, server, server + 1, &x);
}

static rp_status remote_join(rp_ps *ps, uint64_t phase)
{
    set_req(P(ps), MSG_JOIN, 0, (int64_t)phase, 0);
    return all_servers(ps, NULL);
}

static rp_status remote_leave(rp_ps *ps)
{
    set_req(P(ps), MSG_LEAVE, 0, 0, 0);
    return all_servers(ps, NULL);
}

static rp_status remote_claim(rp_ps *ps, int64_t *ticket)
{
    remote_ps *m = P(ps);
    set_req(m, MSG_CLAIM, 0, 0, 0);
    RP_CHECK(call(ps, 0, 1, NULL));
    *ticket = m->rep[0].arg;
    return RP_OK;
}

static void remote_destroy(rp_ps *ps)
{
    remote_ps *m = P(ps);
    if (m) {
        rp_ps_group *g = m->g;
        /* Created on the servers (or tried to be): they forget it once every worker drops it. */
        if (m->reqs) {
            ps_req drop = {.kind = MSG_DROP, .worker = ps->worker, .set = m->set};
            tell_servers(g, &drop, NULL);
        }
        g->sets_alive--;
        free(m->lo);
        free(m->n);
        free(m->head);
        free(m->rep);
        free(m->text);
        free(m->reqs);
        free(m->owner);
        free(m->ok);
        free(m->answered);
        free(m);
    }
    free(ps);
}

rp_status rp_ps_mpi_create(rp_ps **out, rp_ps_group *g, int64_t numel, const rp_ps_config *cfg)
{
    if (!out || !g || !cfg)
        return RP_ERROR(RP_ERR_INVALID, "parameter servers (remote): NULL argument");
    *out = NULL;
    if (rp_ps_group_is_server(g))
        return RP_ERROR(
            RP_ERR_INVALID,
            "rank %d is parameter server %d: it serves (rp_ps_mpi_serve), it does not create sets",
            g->rank, rp_ps_group_index(g));
    if (numel < 0) return RP_ERROR(RP_ERR_INVALID, "numel %lld < 0", (long long)numel);
    if (cfg->servers != g->servers)
        return RP_ERROR(RP_ERR_INVALID,
                        "the configuration asks for %d parameter servers but the group has %d",
                        cfg->servers, g->servers);
    if (!(cfg->timeout_s >= 0))
        return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be >= 0 (0: the group's)",
                        cfg->timeout_s);
    RP_CHECK(rp_optim_check(&cfg->optim));
    int S = g->servers;
    int64_t widest = 0;
    for (int s = 0; s < S; s++) {
        int64_t lo, hi;
        rp_ps_shard_range(numel, S, s, &lo, &hi);
        if (hi - lo > widest) widest = hi - lo;
    }
    /* One message per block: the MPI backend sends at most INT_MAX bytes in one. */
    if (widest * (int64_t)sizeof(float) > INT_MAX)
        return RP_ERROR(
            RP_ERR_UNSUPPORTED,
            "a set of %lld floats on %d parameter servers: at most %d bytes per server and "
            "message (use more servers)",
            (long long)numel, S, INT_MAX);
    if (g->sets_alive >= MAX_SETS)
        return RP_ERROR(RP_ERR_INVALID, "worker %d has %d parameter-server sets alive: at most %d",
                        g->rank, g->sets_alive, MAX_SETS);
    rp_ps *ps = calloc(1, sizeof *ps);
    remote_ps *m = calloc(1, sizeof *m);
    if (!ps || !m) {
        free(ps);
        free(m);
        return RP_ERROR(RP_ERR_NOMEM, "parameter-server handle");
    }
    /* Dispatch once: a handle over MPI says so (rp_ps_backend), any other communicator is "remote".
     */
    ps->ops = strcmp(rp_comm_backend(g->comm), "mpi") == 0 ? &mpi_ops : &remote_ops;
    ps->worker = g->rank;
    ps->workers = g->workers;
    ps->numel = numel;
    ps->cfg = *cfg;
    if (ps->cfg.timeout_s == 0) ps->cfg.timeout_s = g->timeout_s;
    ps->impl = m;
    m->ps = ps;
    m->g = g;
    m->set = g->sets_made++;
    g->sets_alive++;
    size_t nr = (size_t)S * REQS_PER_SERVER;
    m->lo = calloc((size_t)S, sizeof *m->lo);
    m->n = calloc((size_t)S, sizeof *m->n);
    m->head = calloc((size_t)S, sizeof *m->head);
    m->rep = calloc((size_t)S, sizeof *m->rep);
    m->text = calloc((size_t)S, sizeof *m->text);
    m->reqs = calloc(nr, sizeof *m->reqs);
    m->owner = calloc(nr, sizeof *m->owner);
    m->ok = calloc(nr, sizeof *m->ok);
    m->answered = calloc((size_t)S, sizeof *m->answered);
    if (!m->lo || !m->n || !m->head || !m->rep || !m->text || !m->reqs || !m->owner || !m->ok ||
        !m->answered) {
        free(m->reqs);
        m->reqs = NULL; /* nothing was sent: nothing to drop */
        remote_destroy(ps);
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
        char why[1024];
        snprintf(why, sizeof why, "%s", rp_last_error());
        remote_destroy(ps);
        return rp_error_set(status, NULL, 0, "%s", why);
    }
    *out = ps;
    return RP_OK;
}

#define REMOTE_OPS(backend)                                                                        \
    {                                                                                              \
        .name = backend, .push_pull = remote_push_pull, .init = remote_init,                       \
        .snapshot = remote_snapshot, .stats = remote_stats, .join = remote_join,                   \
        .leave = remote_leave, .claim = remote_claim, .destroy = remote_destroy,                   \
    }
static const ps_ops mpi_ops = REMOTE_OPS("mpi");
static const ps_ops remote_ops = REMOTE_OPS("remote");
