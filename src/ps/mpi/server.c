/*
 * server.c - a parameter server rank's loop (rp_ps_mpi_serve): receives the
 * workers' requests (protocol.h), keeps each set's shard and staleness
 * clocks, and answers. It polls for requests and backs off to short sleeps
 * when there are none, so an idle server leaves the cores to the workers.
 *
 * Each reply is packed into an outbox buffer of its own: the values must not
 * be read out of a shard that the next push changes while the send is in
 * flight. The outboxes and the request buffer grow to the largest message
 * and are reused: no allocation in the steady state.
 *
 * A pull that the staleness bound holds back is deferred - the server goes
 * on serving the others - and answered once the clocks allow it, or with an
 * error naming the slowest worker after 0.8 x the timeout, before the
 * waiting worker's own deadline.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/mpi/protocol.h"

static void lock(void)
{
    rp_mpi_lock();
}
static void unlock(void)
{
    rp_mpi_unlock();
}

/*
 * One set on this server: its shard, the workers' clocks, and the pulls the
 * staleness bound holds back.
 */
typedef struct srv_set {
    bool used;
    int id;
    int64_t numel;
    rp_ps_config cfg;
    rp_ps_shard sh;
    rp_ps_clocks clocks;
    int drops;
    bool dropped[RP_PS_MAX_WORKERS];
    bool deferred[RP_PS_MAX_WORKERS]; /* a pull of this worker's waits for the bound */
    double since[RP_PS_MAX_WORKERS];
} srv_set;

/* A reply in flight: its own packed buffer (the shard may change before the send completes). */
typedef struct outbox {
    char *buf;
    size_t cap;
    MPI_Request req;
} outbox;

typedef struct server {
    rp_ps_group *g;
    int index;
    srv_set sets[MAX_SETS];
    char *in; /* the request being handled, grown as needed */
    size_t in_cap;
    outbox *out;
    int n_out, cap_out;
    int byes;
    bool bye[RP_PS_MAX_WORKERS];
    bool failed;
    rp_status fail_status;
} server;

/* Completes finished sends. Under the lock. */
static void outbox_progress(server *sv)
{
    for (int i = 0; i < sv->n_out; i++) {
        if (sv->out[i].req == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&sv->out[i].req, &flag, MPI_STATUS_IGNORE);
    }
}

/* A free outbox of at least `bytes` (reused: no allocation once each has grown). Under the lock. */
static outbox *outbox_get(server *sv, size_t bytes)
{
    outbox_progress(sv);
    /* The smallest free one that fits, else the largest free one (grown), else a new one. */
    outbox *best = NULL;
    for (int i = 0; i < sv->n_out; i++) {
        outbox *o = &sv->out[i];
        if (o->req != MPI_REQUEST_NULL) continue;
        bool fits = o->cap >= bytes, best_fits = best && best->cap >= bytes;
        if (!best || (fits && (!best_fits || o->cap < best->cap)) ||
            (!fits && !best_fits && o->cap > best->cap))
            best = o;
    }
    if (!best) {
        if (sv->n_out == sv->cap_out) {
            int cap = sv->cap_out ? 2 * sv->cap_out : 8;
            outbox *grown = realloc(sv->out, (size_t)cap * sizeof *grown);
            if (!grown) return NULL;
            sv->out = grown;
            sv->cap_out = cap;
        }
        best = &sv->out[sv->n_out++];
        *best = (outbox){.req = MPI_REQUEST_NULL};
    }
    if (best->cap < bytes) {
        char *grown = realloc(best->buf, bytes);
        if (!grown) return NULL;
        best->buf = grown;
        best->cap = bytes;
    }
    return best;
}

/*
 * Sends a reply to `worker` for set id `set`: a header (status, arg, text)
 * and, if `sh` is given, its values (and slots with `slots`), or `raw`.
 */
static rp_status reply(server *sv, int worker, int set, int kind, rp_status status, int64_t arg,
                       const char *text, const rp_ps_shard *sh, bool slots, const void *raw,
                       size_t raw_bytes)
{
    size_t data = 0;
    if (sh)
        data = (size_t)sh->n * sizeof(float) * (size_t)(1 + (slots ? sh->slots : 0));
    else if (raw)
        data = raw_bytes;
    size_t bytes = sizeof(ps_rep) + data;
    lock();
    outbox *o = outbox_get(sv, bytes);
    if (!o) {
        unlock();
        return RP_ERROR(RP_ERR_NOMEM, "parameter server %d: a reply of %zu bytes", sv->index,
                        bytes);
    }
    ps_rep *h = (ps_rep *)o->buf;
    memset(h, 0, sizeof *h);
    h->status = status;
    h->kind = kind;
    h->arg = arg;
    if (text) snprintf(h->text, sizeof h->text, "%s", text);
    float *p = (float *)(o->buf + sizeof(ps_rep));
    if (sh)
        rp_ps_shard_save(sh, p, slots ? p + sh->n : NULL, sh->n);
    else if (raw)
        memcpy(p, raw, raw_bytes);
    int rc = MPI_Isend(o->buf, (int)bytes, MPI_BYTE, worker, REPLY_TAG(set), sv->g->comm, &o->req);
    unlock();
    if (rc != MPI_SUCCESS)
        return RP_ERROR(RP_ERR_BACKEND,
                        "parameter server %d: MPI_Isend of a reply to worker %d failed", sv->index,
                        worker);
    return RP_OK;
}

static rp_status reply_error(server *sv, int worker, int set, int kind, rp_status status,
                             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static rp_status reply_error(server *sv, int worker, int set, int kind, rp_status status,
                             const char *fmt, ...)
{
    char text[TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return reply(sv, worker, set, kind, status, 0, text, NULL, false, NULL, 0);
}

static srv_set *find_set(server *sv, int id)
{
    for (int i = 0; i < MAX_SETS; i++)
        if (sv->sets[i].used && sv->sets[i].id == id) return &sv->sets[i];
    return NULL;
}

static void free_set(srv_set *st)
{
    rp_ps_shard_destroy(&st->sh);
    memset(st, 0, sizeof *st);
}

/* Answers the deferred pulls the clocks now allow; fails those that waited 0.8 x the timeout. */
static rp_status release_pulls(server *sv, srv_set *st, double now)
{
    rp_ps_group *g = sv->g;
    for (int w = 0; w < g->workers; w++) {
        if (!st->deferred[w]) continue;
        int slowest = -1;
        if (rp_ps_clocks_may_go(&st->clocks, w, &slowest)) {
            st->deferred[w] = false;
            RP_CHECK(reply(sv, w, st->id, MSG_PULL, RP_OK, 0, NULL, &st->sh, false, NULL, 0));
        } else if (now - st->since[w] > 0.8 * st->cfg.timeout_s) {
            st->deferred[w] = false;
            RP_CHECK(reply_error(
                sv, w, st->id, MSG_PULL, RP_ERR_TIMEOUT,
                "staleness bound %d: worker %d (rank %d on host %s), at clock %lld, waited %.1f s "
                "on parameter server %d for worker %d (rank %d on host %s), still at clock %lld: "
                "that worker is stopped, stuck or far slower",
                st->cfg.staleness, w, w, g->hosts[w], (long long)st->clocks.clock[w],
                now - st->since[w], sv->index, slowest, slowest, g->hosts[slowest],
                (long long)rp_ps_clocks_of(&st->clocks, slowest)));
        }
    }
    return RP_OK;
}

/* A pull (or the pull half of a push): answered now, or deferred until the bound allows it. */
static rp_status pull(server *sv, srv_set *st, int w, int kind)
{
    if (rp_ps_clocks_may_go(&st->clocks, w, NULL))
        return reply(sv, w, st->id, kind, RP_OK, 0, NULL, &st->sh, false, NULL, 0);
    st->deferred[w] = true;
    st->since[w] = rp_now_s();
    return RP_OK;
}

static rp_status create_set(server *sv, const ps_req *rq)
{
    rp_ps_group *g = sv->g;
    int w = rq->worker;
    srv_set *st = find_set(sv, rq->set);
    if (st) {
        const rp_optim_config *a = &rq->optim, *b = &st->cfg.optim;
        bool same_rule = a->kind == b->kind && a->momentum == b->momentum && a->nesterov == b->nesterov &&
                         a->weight_decay == b->weight_decay && a->beta1 == b->beta1 &&
                         a->beta2 == b->beta2 && a->eps == b->eps;
        if (st->numel != rq->arg || st->cfg.staleness != rq->staleness || !same_rule)
            return reply_error(sv, w, rq->set, rq->kind, RP_ERR_MISMATCH,
                               "set %d: worker %d creates it with %lld floats (staleness %d, optimizer "
                               "%d, momentum %g, weight decay %g), another worker did with %lld "
                               "(staleness %d, optimizer %d, momentum %g, weight decay %g): every "
                               "worker must create the same sets, with the same rule, in the same order",
                               rq->set, w, (long long)rq->arg, rq->staleness, (int)a->kind,
                               (double)a->momentum, (double)a->weight_decay, (long long)st->numel,
                               st->cfg.staleness, (int)b->kind, (double)b->momentum,
                               (double)b->weight_decay);
        return reply(sv, w, rq->set, rq->kind, RP_OK, 0, NULL, NULL, false, NULL, 0);
    }
    for (int i = 0; i < MAX_SETS && !st; i++)
        if (!sv->sets[i].used) st = &sv->sets[i];
    if (!st)
        return reply_error(
            sv, w, rq->set, rq->kind, RP_ERR_INVALID,
            "parameter server %d keeps at most %d sets alive: set %d by worker %d is one too many",
            sv->index, MAX_SETS, rq->set, w);
    int64_t lo, hi;
    rp_ps_shard_range(rq->arg, g->servers, sv->index, &lo, &hi);
    rp_status status = rp_ps_shard_create(&st->sh, lo, hi, &rq->optim);
    if (status != RP_OK)
        return reply_error(sv, w, rq->set, rq->kind, status, "parameter server %d: %s", sv->index,
                           rp_last_error());
    st->used = true;
    st->id = rq->set;
    st->numel = rq->arg;
    st->cfg = (rp_ps_config){.servers = g->servers,
                             .staleness = rq->staleness,
                             .timeout_s = rq->timeout_s,
                             .optim = rq->optim};
    rp_ps_clocks_init(&st->clocks, g->workers, rq->staleness);
    return reply(sv, w, rq->set, rq->kind, RP_OK, 0, NULL, NULL, false, NULL, 0);
}

/* Handles one request of `bytes` bytes in sv->in. */
static rp_status handle(server *sv, size_t bytes)
{
    rp_ps_group *g = sv->g;
    if (bytes < sizeof(ps_req)) {
        rp_warn("parameter server %d: a message of %zu bytes, too short for a request: ignored",
                sv->index, bytes);
        return RP_OK;
    }
    ps_req rq;
    memcpy(&rq, sv->in, sizeof rq);
    int w = rq.worker;
    if (w < 0 || w >= g->workers || rq.kind < MSG_CREATE || rq.kind > MSG_FAIL) {
        rp_warn("parameter server %d: a request of kind %d from worker %d: ignored", sv->index,
                rq.kind, w);
        return RP_OK;
    }
    const char *payload = sv->in + sizeof(ps_req);
    size_t data = bytes - sizeof(ps_req);
    switch (rq.kind) {
    case MSG_BYE:
        if (!sv->bye[w]) {
            sv->bye[w] = true;
            sv->byes++;
        }
        return RP_OK;
    case MSG_FAIL: {
        char reason[TEXT_MAX];
        size_t n = data < sizeof reason - 1 ? data : sizeof reason - 1;
        memcpy(reason, payload, n);
        reason[n] = 0;
        sv->failed = true;
        sv->fail_status =
            RP_ERROR(RP_ERR_COMM,
                     "parameter server %d (rank %d on host %s): worker %d (rank %d on host "
                     "%s) reported that the job failed (%s): %s",
                     sv->index, g->rank, g->hosts[g->rank], w, w, g->hosts[w],
                     rp_status_name((rp_status)rq.arg), reason);
        return RP_OK;
    }
    case MSG_CREATE:
        return create_set(sv, &rq);
    default:
        break;
    }
    srv_set *st = find_set(sv, rq.set);
    if (!st) {
        if (rq.kind == MSG_DROP) return RP_OK;
        return reply_error(sv, w, rq.set, rq.kind, RP_ERR_INVALID,
                           "parameter server %d (rank %d on host %s) has no set %d (a %s by "
                           "worker %d): it was never created or every worker destroyed it",
                           sv->index, g->rank, g->hosts[g->rank], rq.set,
                           rp_ps_mpi_kind_name(rq.kind), w);
    }
    rp_ps_shard *sh = &st->sh;
    size_t shard_bytes = (size_t)sh->n * sizeof(float);
    switch (rq.kind) {
    case MSG_INIT: {
        bool slots = (rq.flags & F_SLOTS) && sh->slots > 0;
        size_t want = shard_bytes * (size_t)(1 + (slots ? sh->slots : 0));
        if (data != want)
            return reply_error(sv, w, st->id, rq.kind, RP_ERR_COMM,
                               "parameter server %d: init of set %d by worker %d "
                               "carried %zu bytes, expected %zu",
                               sv->index, st->id, w, data, want);
        const float *v = (const float *)payload;
        rp_ps_shard_load(sh, v, slots ? v + sh->n : NULL, sh->n, rq.arg);
        return reply(sv, w, st->id, rq.kind, RP_OK, 0, NULL, NULL, false, NULL, 0);
    }
    case MSG_PUSH: {
        if (data != shard_bytes)
            return reply_error(sv, w, st->id, rq.kind, RP_ERR_COMM,
                               "parameter server %d: push to set %d by worker %d "
                               "carried %zu bytes, expected %zu",
                               sv->index, st->id, w, data, shard_bytes);
        rp_ps_shard_apply(sh, &st->cfg.optim, (const float *)payload, rq.lr, w);
        rp_ps_clocks_tick(&st->clocks, w);
        if (rq.flags & F_PULL)
            RP_CHECK(pull(sv, st, w, rq.kind));
        else
            RP_CHECK(reply(sv, w, st->id, rq.kind, RP_OK, 0, NULL, NULL, false, NULL, 0));
        return release_pulls(sv, st, rp_now_s());
    }
    case MSG_PULL:
        return pull(sv, st, w, rq.kind);
    case MSG_SNAPSHOT:
        return reply(sv, w, st->id, rq.kind, RP_OK, sh->step, NULL, sh, rq.flags & F_SLOTS, NULL,
                     0);
    case MSG_STATS: {
        rp_ps_server_stats s = {.applied = sh->applied};
        for (int q = 0; q < g->workers && q < 64; q++) {
            s.from_worker[q] = sh->from_worker[q];
            s.received += sh->from_worker[q];
        }
        return reply(sv, w, st->id, rq.kind, RP_OK, 0, NULL, NULL, false, &s, sizeof s);
    }
    case MSG_JOIN:
        rp_ps_clocks_join(&st->clocks, w, (uint64_t)rq.arg);
        RP_CHECK(reply(sv, w, st->id, rq.kind, RP_OK, 0, NULL, NULL, false, NULL, 0));
        return release_pulls(sv, st, rp_now_s());
    case MSG_LEAVE:
        rp_ps_clocks_leave(&st->clocks, w);
        RP_CHECK(reply(sv, w, st->id, rq.kind, RP_OK, 0, NULL, NULL, false, NULL, 0));
        return release_pulls(sv, st, rp_now_s());
    case MSG_CLAIM:
        return reply(sv, w, st->id, rq.kind, RP_OK, rp_ps_clocks_claim(&st->clocks), NULL, NULL,
                     false, NULL, 0);
    case MSG_DROP:
        /* A worker without a handle holds no one back; the set goes with the last one. */
        if (st->dropped[w]) return RP_OK;
        st->dropped[w] = true;
        st->deferred[w] = false;
        if (++st->drops == g->workers) {
            free_set(st);
            return RP_OK;
        }
        rp_ps_clocks_leave(&st->clocks, w);
        return release_pulls(sv, st, rp_now_s());
    default:
        return RP_OK;
    }
}

static void server_free(server *sv)
{
    int finalized = 0;
    lock();
    MPI_Finalized(&finalized);
    /* Replies still in flight get a moment to go; then they are forgotten. */
    double deadline = rp_now_s() + 2.0;
    for (unsigned polls = 0; !finalized; polls++) {
        bool pending = false;
        outbox_progress(sv);
        for (int i = 0; i < sv->n_out; i++)
            pending |= sv->out[i].req != MPI_REQUEST_NULL;
        if (!pending) break;
        if (rp_now_s() > deadline) {
            for (int i = 0; i < sv->n_out; i++)
                if (sv->out[i].req != MPI_REQUEST_NULL) MPI_Request_free(&sv->out[i].req);
            break;
        }
        unlock();
        rp_ps_mpi_back_off(polls);
        lock();
    }
    unlock();
    for (int i = 0; i < sv->n_out; i++)
        free(sv->out[i].buf);
    free(sv->out);
    for (int i = 0; i < MAX_SETS; i++)
        if (sv->sets[i].used) free_set(&sv->sets[i]);
    free(sv->in);
}

/* CPU time this process has used, in seconds. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

rp_status rp_ps_mpi_serve(rp_ps_group *g)
{
    if (!g) return RP_ERROR(RP_ERR_INVALID, "parameter-server group is NULL");
    if (!rp_ps_group_is_server(g))
        return RP_ERROR(RP_ERR_INVALID, "rank %d is worker %d, not a parameter server", g->rank,
                        g->rank);
    server *sv = calloc(1, sizeof *sv);
    if (!sv) return RP_ERROR(RP_ERR_NOMEM, "parameter server state");
    sv->g = g;
    sv->index = rp_ps_group_index(g);
    rp_status status = RP_OK;
    int64_t requests = 0;
    double wall0 = rp_now_s(), cpu0 = cpu_seconds();
    for (unsigned polls = 0; sv->byes < g->workers && !sv->failed;) {
        int flag = 0, count = 0;
        MPI_Message msg;
        MPI_Status mst;
        lock();
        int rc = MPI_Improbe(MPI_ANY_SOURCE, TAG_REQ, g->comm, &flag, &msg, &mst);
        if (rc == MPI_SUCCESS && flag) {
            MPI_Get_count(&mst, MPI_BYTE, &count);
            /* Grown to the largest request (a push of this server's range), then never again. */
            char *grown = (size_t)count > sv->in_cap ? realloc(sv->in, (size_t)count) : sv->in;
            if (!grown && count > 0) {
                unlock();
                status = RP_ERROR(RP_ERR_NOMEM, "parameter server %d: a request of %d bytes",
                                  sv->index, count);
                break;
            }
            if ((size_t)count > sv->in_cap) sv->in_cap = (size_t)count;
            sv->in = grown;
            rc = MPI_Mrecv(sv->in, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        }
        if (!flag) outbox_progress(sv);
        unlock();
        if (rc != MPI_SUCCESS) {
            status =
                RP_ERROR(RP_ERR_BACKEND,
                         "parameter server %d (rank %d on host %s): MPI failed receiving a request",
                         sv->index, g->rank, g->hosts[g->rank]);
            break;
        }
        if (flag) {
            status = handle(sv, (size_t)count);
            requests++;
        }
        /* Busy or idle, a deferred pull may have waited too long by now. */
        double now = rp_now_s();
        for (int i = 0; i < MAX_SETS && status == RP_OK; i++)
            if (sv->sets[i].used) status = release_pulls(sv, &sv->sets[i], now);
        if (status != RP_OK) break;
        if (flag)
            polls = 0;
        else
            rp_ps_mpi_back_off(polls++);
    }
    if (status == RP_OK && sv->failed) status = sv->fail_status;
    /* What serving cost: the measure of a dedicated server rank against one on a worker's cores. */
    double wall = rp_now_s() - wall0, cpu = cpu_seconds() - cpu0;
    rp_info("parameter server %d: %lld requests in %.1f s, %.2f s of CPU (%.0f%% of a core)", sv->index,
            (long long)requests, wall, cpu, wall > 0 ? 100 * cpu / wall : 0);
    server_free(sv);
    free(sv);
    return status;
}
