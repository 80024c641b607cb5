/*
 * server.c - a parameter server's loop (rp_ps_mpi_serve): receives the
 * workers' requests (remote.h) from any worker, keeps each set's shard and
 * staleness clocks, and answers. It probes for requests and backs off to
 * short sleeps when there are none, so an idle server leaves the cores to
 * the workers.
 *
 * A request's header is probed and received, then its data blocks, which
 * the worker sent right after it: the server takes them at once (a worker
 * stopped between the two holds its server up to the communicator's timeout,
 * which then names that worker and ends the serving).
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

#include "ps/remote.h"

/*
 * One set on this server: its shard, the workers' clocks, and the pulls the
 * staleness bound holds back.
 */
typedef struct srv_set {
    bool used;
    int id;
    int64_t numel;
    rp_ps_config cfg;
    ps_shard sh;
    ps_clocks clocks;
    int drops;
    bool dropped[RP_PS_MAX_WORKERS];
    bool deferred[RP_PS_MAX_WORKERS]; /* a pull of this worker's waits for the bound */
    double since[RP_PS_MAX_WORKERS];
} srv_set;

/* A reply in flight: its own packed buffer (the shard may change before the sends complete). */
typedef struct outbox {
    char *buf;
    size_t cap;
    rp_comm_request *req[1 + MAX_BLOCKS]; /* the header's send and the blocks' */
} outbox;

typedef struct server {
    rp_ps_group *g;
    rp_comm *c;
    int index;
    srv_set sets[MAX_SETS];
    char *in; /* the request's data blocks, grown as needed */
    size_t in_cap;
    outbox *out;
    int n_out, cap_out;
    int byes;
    bool bye[RP_PS_MAX_WORKERS];
    bool failed;
    rp_status fail_status;
    char fail_text[TEXT_MAX];     /* the failure's message, every later request's answer */
    double failed_at;             /* rp_now_s() of the first failure report */
    bool gone[RP_PS_MAX_WORKERS]; /* reported a failure (and will say no goodbye) */
    int gones;
} server;

static bool outbox_busy(const outbox *o)
{
    for (int i = 0; i < 1 + MAX_BLOCKS; i++)
        if (o->req[i]) return true;
    return false;
}

/* Completes finished sends; a send that failed (a broken communicator) ends the serving. */
static rp_status outbox_progress(server *sv)
{
    for (int i = 0; i < sv->n_out; i++)
        for (int j = 0; j < 1 + MAX_BLOCKS; j++) {
            if (!sv->out[i].req[j]) continue;
            bool done = false;
            rp_status st = rp_comm_test(sv->out[i].req[j], &done);
            if (!done) continue;
            sv->out[i].req[j] = NULL;
            if (st != RP_OK) {
                rp_ps_group *g = sv->g;
                return RP_ERROR(
                    st, "parameter server %d (rank %d on host %s): a reply could not be sent: %s",
                    sv->index, g->rank, g->hosts[g->rank], rp_last_error());
            }
        }
    return RP_OK;
}

/* The smallest free outbox that fits, else the largest free one, else NULL. */
static outbox *outbox_free(server *sv, size_t bytes)
{
    outbox *best = NULL;
    for (int i = 0; i < sv->n_out; i++) {
        outbox *o = &sv->out[i];
        if (outbox_busy(o)) continue;
        bool fits = o->cap >= bytes, best_fits = best && best->cap >= bytes;
        if (!best || (fits && (!best_fits || o->cap < best->cap)) ||
            (!fits && !best_fits && o->cap > best->cap))
            best = o;
    }
    return best;
}

/* A free outbox of at least `bytes` (reused: no allocation once each has grown). */
static outbox *outbox_get(server *sv, size_t bytes)
{
    outbox *best = outbox_free(sv, bytes);
    if (!best) {
        /* Every one is busy: complete the sends that have gone (a failed one shows at the next
         * probe). */
        (void)outbox_progress(sv);
        best = outbox_free(sv, bytes);
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
        *best = (outbox){0};
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
 * Sends a reply to `worker`: a header and, if `sh` is given, its values (and
 * slots with `slots`), or `raw`; an error's reply carries `text` instead.
 */
static rp_status reply(server *sv, int worker, int kind, rp_status status, int64_t arg,
                       const char *text, const ps_shard *sh, bool slots, const void *raw,
                       size_t raw_bytes)
{
    int blocks = 0;
    int64_t count = 0;
    rp_dtype dt = RP_F32;
    if (status != RP_OK) {
        blocks = 1;
        count = TEXT_MAX;
        dt = RP_U8;
    } else if (sh && sh->n > 0) {
        blocks = 1 + (slots ? sh->slots : 0);
        count = sh->n;
    } else if (raw) {
        blocks = 1;
        count = (int64_t)raw_bytes;
        dt = RP_U8;
    }
    size_t block_bytes = (size_t)count * rp_dtype_size(dt);
    size_t bytes = sizeof(ps_rep) + (size_t)blocks * block_bytes;
    outbox *o = outbox_get(sv, bytes);
    if (!o)
        return RP_ERROR(RP_ERR_NOMEM, "parameter server %d: a reply of %zu bytes", sv->index,
                        bytes);
    ps_rep *h = (ps_rep *)o->buf;
    *h = (ps_rep){.status = status, .kind = kind, .blocks = blocks, .count = count, .arg = arg};
    char *data = o->buf + sizeof(ps_rep);
    if (status != RP_OK) {
        memset(data, 0, TEXT_MAX);
        snprintf(data, TEXT_MAX, "%s", text ? text : "");
    } else if (blocks && sh) {
        float *p = (float *)data;
        ps_shard_save(sh, p, slots ? p + sh->n : NULL, sh->n);
    } else if (blocks) {
        memcpy(data, raw, raw_bytes);
    }
    rp_status st =
        rp_comm_isend(sv->c, h, (int64_t)sizeof(ps_rep), RP_U8, worker, TAG_REPLY, &o->req[0]);
    for (int b = 0; b < blocks && st == RP_OK; b++)
        st = rp_comm_isend(sv->c, data + (size_t)b * block_bytes, count, dt, worker, TAG_REPLY_DATA,
                           &o->req[1 + b]);
    if (st != RP_OK) {
        rp_ps_group *g = sv->g;
        return RP_ERROR(
            st,
            "parameter server %d (rank %d on host %s): a reply to worker %d could not be sent: %s",
            sv->index, g->rank, g->hosts[g->rank], worker, rp_last_error());
    }
    return RP_OK;
}

static rp_status ack(server *sv, int worker, int kind)
{
    return reply(sv, worker, kind, RP_OK, 0, NULL, NULL, false, NULL, 0);
}

static rp_status reply_error(server *sv, int worker, int kind, rp_status status, const char *fmt,
                             ...) __attribute__((format(printf, 5, 6)));
static rp_status reply_error(server *sv, int worker, int kind, rp_status status, const char *fmt,
                             ...)
{
    char text[TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return reply(sv, worker, kind, status, 0, text, NULL, false, NULL, 0);
}

static srv_set *find_set(server *sv, int id)
{
    for (int i = 0; i < MAX_SETS; i++)
        if (sv->sets[i].used && sv->sets[i].id == id) return &sv->sets[i];
    return NULL;
}

static void free_set(srv_set *st)
{
    ps_shard_destroy(&st->sh);
    memset(st, 0, sizeof *st);
}

/* Answers the deferred pulls the clocks now allow; fails those that waited 0.8 x the timeout. */
static rp_status release_pulls(server *sv, srv_set *st, double now)
{
    rp_ps_group *g = sv->g;
    for (int w = 0; w < g->workers; w++) {
        if (!st->deferred[w]) continue;
        int slowest = -1;
        if (ps_clocks_may_go(&st->clocks, w, &slowest)) {
            st->deferred[w] = false;
            RP_CHECK(reply(sv, w, MSG_PULL, RP_OK, 0, NULL, &st->sh, false, NULL, 0));
        } else if (now - st->since[w] > 0.8 * st->cfg.timeout_s) {
            st->deferred[w] = false;
            RP_CHECK(reply_error(
                sv, w, MSG_PULL, RP_ERR_TIMEOUT,
                "staleness bound %d: worker %d (rank %d on host %s), at clock %lld, waited %.1f s "
                "on parameter server %d for worker %d (rank %d on host %s), still at clock %lld: "
                "that worker is stopped, stuck or far slower",
                st->cfg.staleness, w, w, g->hosts[w], (long long)st->clocks.clock[w],
                now - st->since[w], sv->index, slowest, slowest, g->hosts[slowest],
                (long long)ps_clocks_of(&st->clocks, slowest)));
        }
    }
    return RP_OK;
}

/* A pull (or the pull half of a push): answered now, or deferred until the bound allows it. */
static rp_status pull(server *sv, srv_set *st, int w, int kind)
{
    if (ps_clocks_may_go(&st->clocks, w, NULL))
        return reply(sv, w, kind, RP_OK, 0, NULL, &st->sh, false, NULL, 0);
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
        bool same_rule = a->kind == b->kind && a->momentum == b->momentum &&
                         a->nesterov == b->nesterov && a->weight_decay == b->weight_decay &&
                         a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps;
        if (st->numel != rq->arg || st->cfg.staleness != rq->staleness || !same_rule)
            return reply_error(
                sv, w, rq->kind, RP_ERR_MISMATCH,
                "set %d: worker %d creates it with %lld floats (staleness %d, optimizer %d, "
                "momentum %g, weight decay %g), another worker did with %lld (staleness %d, "
                "optimizer %d, momentum %g, weight decay %g): every worker must create the same "
                "sets, with the same rule, in the same order",
                rq->set, w, (long long)rq->arg, rq->staleness, (int)a->kind, (double)a->momentum,
                (double)a->weight_decay, (long long)st->numel, st->cfg.staleness, (int)b->kind,
                (double)b->momentum, (double)b->weight_decay);
        return ack(sv, w, rq->kind);
    }
    for (int i = 0; i < MAX_SETS && !st; i++)
        if (!sv->sets[i].used) st = &sv->sets[i];
    if (!st)
        return reply_error(
            sv, w, rq->kind, RP_ERR_INVALID,
            "parameter server %d keeps at most %d sets alive: set %d by worker %d is one too many",
            sv->index, MAX_SETS, rq->set, w);
    int64_t lo, hi;
    rp_ps_shard_range(rq->arg, g->servers, sv->index, &lo, &hi);
    rp_status status = ps_shard_create(&st->sh, lo, hi, &rq->optim);
    if (status != RP_OK)
        return reply_error(sv, w, rq->kind, status, "parameter server %d: %s", sv->index,
                           rp_last_error());
    st->used = true;
    st->id = rq->set;
    st->numel = rq->arg;
    st->cfg = (rp_ps_config){.servers = g->servers,
                             .staleness = rq->staleness,
                             .timeout_s = rq->timeout_s,
                             .optim = rq->optim};
    ps_clocks_init(&st->clocks, g->workers, rq->staleness);
    return ack(sv, w, rq->kind);
}

/* Whether a request carries `want` blocks of the shard's n floats (none for an empty shard). */
static bool blocks_fit(const ps_req *rq, const srv_set *st, int want)
{
    return rq->count == st->sh.n && rq->blocks == (st->sh.n > 0 ? want : 0);
}

static rp_status reply_bad_blocks(server *sv, const ps_req *rq, const srv_set *st, int want)
{
    int64_t n = st->sh.n;
    return reply_error(
        sv, rq->worker, rq->kind, RP_ERR_COMM,
        "parameter server %d: a %s of set %d by worker %d carried %d blocks of %lld floats, "
        "expected %d of %lld",
        sv->index, ps_remote_kind_name(rq->kind), st->id, rq->worker, rq->blocks,
        (long long)rq->count, n > 0 ? want : 0, (long long)n);
}

/* Handles one request; its data blocks are in sv->in. */
static rp_status handle(server *sv, const ps_req *rq)
{
    rp_ps_group *g = sv->g;
    int w = rq->worker;
    const char *payload = sv->in;
    switch (rq->kind) {
    case MSG_BYE:
        if (!sv->bye[w] && !sv->gone[w]) {
            sv->bye[w] = true;
            sv->byes++;
        }
        return RP_OK;
    case MSG_FAIL: {
        if (!sv->bye[w] && !sv->gone[w]) {
            sv->gone[w] = true;
            sv->gones++;
        }
        if (sv->failed) return RP_OK; /* the first report is the job's cause */
        char reason[TEXT_MAX];
        size_t n = rq->blocks == 1 && rq->count > 0 ? (size_t)rq->count : 0;
        if (n > sizeof reason - 1) n = sizeof reason - 1;
        memcpy(reason, payload, n);
        reason[n] = 0;
        sv->failed = true;
        sv->failed_at = rp_now_s();
        sv->fail_status =
            RP_ERROR(RP_ERR_COMM,
                     "parameter server %d (rank %d on host %s): worker %d (rank %d on host %s) "
                     "reported that the job failed (%s): %s",
                     sv->index, g->rank, g->hosts[g->rank], w, w, g->hosts[w],
                     rp_status_name((rp_status)rq->arg), reason);
        snprintf(sv->fail_text, sizeof sv->fail_text, "%s", rp_last_error());
        /* Pulls waiting on a clock would wait for a worker that is gone: answered now. */
        for (int i = 0; i < MAX_SETS; i++)
            for (int q = 0; sv->sets[i].used && q < g->workers; q++)
                if (sv->sets[i].deferred[q]) {
                    sv->sets[i].deferred[q] = false;
                    RP_CHECK(reply_error(sv, q, MSG_PULL, RP_ERR_COMM, "%s", sv->fail_text));
                }
        return RP_OK;
    }
    case MSG_DROP:
        if (sv->failed) return RP_OK; /* no answer is awaited, and the sets go with the server */
        break;
    case MSG_CREATE:
        if (sv->failed) break;
        return create_set(sv, rq);
    default:
        break;
    }
    /* After a worker's failure every request is answered with it: the other workers stop at
       their next claim, push or pull, naming the failed one, instead of training on. */
    if (sv->failed) return reply_error(sv, w, rq->kind, RP_ERR_COMM, "%s", sv->fail_text);
    srv_set *st = find_set(sv, rq->set);
    if (!st) {
        if (rq->kind == MSG_DROP) return RP_OK;
        return reply_error(
            sv, w, rq->kind, RP_ERR_INVALID,
            "parameter server %d (rank %d on host %s) has no set %d (a %s by worker %d): it was "
            "never created or every worker destroyed it",
            sv->index, g->rank, g->hosts[g->rank], rq->set, ps_remote_kind_name(rq->kind), w);
    }
    ps_shard *sh = &st->sh;
    switch (rq->kind) {
    case MSG_INIT: {
        bool slots = (rq->flags & F_SLOTS) && sh->slots > 0;
        int want = 1 + (slots ? sh->slots : 0);
        if (!blocks_fit(rq, st, want)) return reply_bad_blocks(sv, rq, st, want);
        const float *v = (const float *)payload;
        ps_shard_load(sh, v, slots ? v + sh->n : NULL, sh->n, rq->arg);
        return ack(sv, w, rq->kind);
    }
    case MSG_PUSH: {
        if (!blocks_fit(rq, st, 1)) return reply_bad_blocks(sv, rq, st, 1);
        ps_shard_apply(sh, &st->cfg.optim, (const float *)payload, rq->lr, w);
        ps_clocks_tick(&st->clocks, w);
        if (rq->flags & F_PULL)
            RP_CHECK(pull(sv, st, w, rq->kind));
        else
            RP_CHECK(ack(sv, w, rq->kind));
        return release_pulls(sv, st, rp_now_s());
    }
    case MSG_PULL:
        return pull(sv, st, w, rq->kind);
    case MSG_SNAPSHOT:
        return reply(sv, w, rq->kind, RP_OK, sh->step, NULL, sh, rq->flags & F_SLOTS, NULL, 0);
    case MSG_STATS: {
        rp_ps_server_stats s = {.applied = sh->applied, .workers = g->workers};
        for (int q = 0; q < g->workers; q++) {
            s.from_worker[q] = sh->from_worker[q];
            s.received += sh->from_worker[q];
        }
        return reply(sv, w, rq->kind, RP_OK, 0, NULL, NULL, false, &s, sizeof s);
    }
    case MSG_JOIN:
        ps_clocks_join(&st->clocks, w, (uint64_t)rq->arg);
        RP_CHECK(ack(sv, w, rq->kind));
        return release_pulls(sv, st, rp_now_s());
    case MSG_LEAVE:
        ps_clocks_leave(&st->clocks, w);
        RP_CHECK(ack(sv, w, rq->kind));
        return release_pulls(sv, st, rp_now_s());
    case MSG_CLAIM:
        return reply(sv, w, rq->kind, RP_OK, ps_clocks_claim(&st->clocks), NULL, NULL, false, NULL,
                     0);
    case MSG_DROP:
        /* A worker without a handle holds no one back; the set goes with the last one. */
        if (st->dropped[w]) return RP_OK;
        st->dropped[w] = true;
        st->deferred[w] = false;
        if (++st->drops == g->workers) {
            free_set(st);
            return RP_OK;
        }
        ps_clocks_leave(&st->clocks, w);
        return release_pulls(sv, st, rp_now_s());
    default:
        return RP_OK;
    }
}

/* Grows the data buffer to `bytes`. */
static rp_status grow_in(server *sv, size_t bytes)
{
    if (bytes <= sv->in_cap) return RP_OK;
    char *grown = realloc(sv->in, bytes);
    if (!grown)
        return RP_ERROR(RP_ERR_NOMEM, "parameter server %d: a request of %zu bytes", sv->index,
                        bytes);
    sv->in = grown;
    sv->in_cap = bytes;
    return RP_OK;
}

/*
 * Receives the message a probe found from `src` (a request's header, then
 * its data blocks) and handles it. Anything that is not a request header is
 * taken off the channel and reported, so the next message is read right.
 */
static rp_status serve_one(server *sv, int src, int tag, int64_t count, rp_dtype dt)
{
    rp_ps_group *g = sv->g;
    rp_status st;
    if (tag != TAG_REQ || dt != RP_U8 || count != (int64_t)sizeof(ps_req) || src >= g->workers) {
        RP_CHECK(grow_in(sv, (size_t)count * rp_dtype_size(dt) + 1));
        st = rp_comm_recv(sv->c, sv->in, count, dt, src, tag);
        rp_warn("parameter server %d: a message from rank %d (tag %d, %lld %s) is not a worker's "
                "request: ignored",
                sv->index, src, tag, (long long)count, rp_dtype_name(dt));
        return st;
    }
    ps_req rq;
    RP_CHECK(rp_comm_recv(sv->c, &rq, (int64_t)sizeof rq, RP_U8, src, TAG_REQ));
    rq.worker = src; /* the channel says who sent it */
    if (rq.kind < MSG_CREATE || rq.kind > MSG_FAIL || rq.blocks < 0 || rq.blocks > MAX_BLOCKS ||
        rq.count < 0) {
        rp_warn("parameter server %d: a request of kind %d with %d blocks of %lld from worker %d: "
                "ignored",
                sv->index, rq.kind, rq.blocks, (long long)rq.count, src);
        return RP_OK;
    }
    rp_dtype bdt = rq.kind == MSG_FAIL ? RP_U8 : RP_F32;
    size_t block_bytes = (size_t)rq.count * rp_dtype_size(bdt);
    RP_CHECK(grow_in(sv, (size_t)rq.blocks * block_bytes + 1));
    for (int b = 0; b < rq.blocks && rq.count > 0; b++) {
        st = rp_comm_recv(sv->c, sv->in + (size_t)b * block_bytes, rq.count, bdt, src, TAG_DATA);
        if (st != RP_OK)
            return RP_ERROR(st,
                            "parameter server %d (rank %d on host %s): the data of a %s from "
                            "worker %d (rank %d "
                            "on host %s) did not arrive: %s",
                            sv->index, g->rank, g->hosts[g->rank], ps_remote_kind_name(rq.kind),
                            src, src, g->hosts[src], rp_last_error());
    }
    return handle(sv, &rq);
}

static void server_free(server *sv)
{
    /* Replies still in flight get a moment to go; then they fail (and are freed). */
    int n = 0;
    rp_comm_request **pending = calloc((size_t)sv->n_out * (1 + MAX_BLOCKS) + 1, sizeof *pending);
    for (int i = 0; pending && i < sv->n_out; i++)
        for (int j = 0; j < 1 + MAX_BLOCKS; j++)
            if (sv->out[i].req[j]) pending[n++] = sv->out[i].req[j];
    if (n > 0) (void)ps_remote_wait(sv->c, pending, &n, NULL, rp_now_s() + 2.0, NULL, NULL);
    free(pending);
    for (int i = 0; i < sv->n_out; i++)
        free(sv->out[i].buf);
    free(sv->out);
    for (int i = 0; i < MAX_SETS; i++)
        if (sv->sets[i].used) free_set(&sv->sets[i]);
    free(sv->in);
}

/* CPU time this thread (the server's loop) has used, in seconds: right for a server rank and a
 * server thread. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * Whether to go on serving: until every worker has said goodbye; after a failure report, until
 * every worker has said goodbye or reported one too, answering each request with the failure
 * meanwhile, for at most the group's timeout.
 */
static bool serving(const server *sv)
{
    const rp_ps_group *g = sv->g;
    if (!sv->failed) return sv->byes < g->workers;
    return sv->byes + sv->gones < g->workers && rp_now_s() - sv->failed_at < g->timeout_s;
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
    sv->c = g->comm;
    sv->index = rp_ps_group_index(g);
    /* The blocking receives (a request's data) wait at most the group's timeout. */
    double keep = rp_comm_timeout(sv->c);
    rp_comm_set_timeout(sv->c, g->timeout_s);
    rp_status status = RP_OK;
    int64_t requests = 0;
    double wall0 = rp_now_s(), cpu0 = cpu_seconds();
    for (unsigned polls = 0; serving(sv);) {
        bool ready = false;
        int src = -1, tag = -1;
        int64_t count = 0;
        rp_dtype dt = RP_U8;
        status = rp_comm_probe(sv->c, RP_ANY_SOURCE, RP_ANY_TAG, &ready, &src, &tag, &count, &dt);
        if (status != RP_OK) {
            status = RP_ERROR(status, "parameter server %d (rank %d on host %s): %s", sv->index,
                              g->rank, g->hosts[g->rank], rp_last_error());
            break;
        }
        if (ready) {
            status = serve_one(sv, src, tag, count, dt);
            requests++;
        } else {
            /* Idle: the replies' sends are completed now (see outbox_get for a busy server). */
            status = outbox_progress(sv);
        }
        /* Busy or idle, a deferred pull may have waited too long by now. */
        double now = rp_now_s();
        for (int i = 0; i < MAX_SETS && status == RP_OK; i++)
            if (sv->sets[i].used) status = release_pulls(sv, &sv->sets[i], now);
        if (status != RP_OK) break;
        if (ready)
            polls = 0;
        else
            ps_remote_back_off(polls++);
    }
    if (status == RP_OK && sv->failed) status = sv->fail_status;
    char why[1024] = "";
    if (status != RP_OK) snprintf(why, sizeof why, "%s", rp_last_error());
    /* What serving cost: the measure of a dedicated server rank against one on a worker's cores. */
    double wall = rp_now_s() - wall0, cpu = cpu_seconds() - cpu0;
    rp_info("parameter server %d: %lld requests in %.1f s, %.2f s of CPU (%.0f%% of a core)",
            sv->index, (long long)requests, wall, cpu, wall > 0 ? 100 * cpu / wall : 0);
    server_free(sv);
    free(sv);
    rp_comm_set_timeout(g->comm, keep);
    if (status != RP_OK) rp_error_set(status, NULL, 0, "%s", why);
    return status;
}
