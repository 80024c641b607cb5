/*
 * strategy_async.c - asynchronous data parallelism as a strategy table: the
 * wrapped optimizer whose update is a push of the gradients to the
 * parameter servers and a pull of the current values (replicator/ps.h), and
 * the calls that move its state in and out of the servers for checkpoints.
 *
 * The optimizer keeps its local state block, unused while training: the
 * servers hold the live slots. fetch copies them back, so a checkpoint of an
 * async run is written by the same code, in the same format, as a sync one,
 * and either regime can resume the other's.
 *
 * Sets. Each async optimizer is one set of variables on the servers,
 * numbered in creation order (the same on every replica). On the threads
 * backend local replica 0 creates the set's handles and each replica takes
 * its own after a barrier; under MPI each rank's replica creates its handle
 * and the servers make their shards when the set's first message arrives.
 *
 * Layout. Under MPI this strategy takes the last cfg.ps ranks of the job as
 * servers (create); the others split off a communicator of replicas.
 *
 * Memory. The servers take and give host arrays (ps.c); the values, gradients
 * and state are the kernel table's storage, so every exchange goes through
 * host views (kernels_staging: the storage itself with a host table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/ps.h"
#include "ps/ps_internal.h"
#include "replicator/strategy.h"

#define RP_ASYNC_SETS_MAX 8

/* Its link's slot is its set: the same on every replica, as they create in the same order. */
typedef struct async_ctx {
    strategy_link link; /* first: the replica's list (strategy.h) */
    rp_params *params;
    rp_ps *ps;
    kernels_staging grad, values, state; /* host views of the blocks for the servers */
} async_ctx;

typedef struct async_state {
    rp_ps_group *group;              /* MPI: the server and worker ranks (NULL on threads) */
    rp_ps **sets[RP_ASYNC_SETS_MAX]; /* threads: each set's handles, [n], until taken */
} async_state;

static rp_status async_update(rp_optimizer *opt, float lr, void *ctx)
{
    async_ctx *a = ctx;
    RP_CHECK(strategy_alive(&a->link));
    /* rp_optimizer_step has checked lr and found every gradient finite. */
    size_t bytes = (size_t)rp_params_trainable_numel(a->params) * sizeof(float);
    float *values = rp_params_data(a->params);
    const float *hg = strategy_view(&a->grad, rp_params_grad(a->params), bytes, true);
    float *hv = hg ? strategy_view(&a->values, values, bytes, false) : NULL;
    if (!hv) return rp_last_status();
    RP_CHECK(ps_exchange(a->ps, hg, lr, hv));
    strategy_commit(values, hv, bytes);
    return RP_OK;
}

static void async_release(void *ctx)
{
    async_ctx *a = ctx;
    strategy_detach(&a->link);
    rp_ps_destroy(a->ps);
    kernels_staging_free(&a->grad);
    kernels_staging_free(&a->values);
    kernels_staging_free(&a->state);
    free(a);
}

static async_ctx *find(const rp_replica *rep, const rp_optimizer *opt)
{
    return (async_ctx *)strategy_find(rep, opt);
}

static void async_phase_begin(rp_replica *rep, uint64_t phase)
{
    strategy_replica *sr = rep->strategy;
    /* A failure here (a server gone) comes back, named, from the next push or pull. */
    for (strategy_link *l = sr->opts; l; l = l->next)
        (void)rp_ps_join(((async_ctx *)l)->ps, phase);
}

static void async_phase_end(rp_replica *rep)
{
    strategy_replica *sr = rep->strategy;
    if (!sr->opts) return;
    /* The step's own error, if any, is the one to report, not a leave that failed because of it. */
    rp_status status = rp_last_status();
    char message[1024];
    snprintf(message, sizeof message, "%s", rp_last_error());
    for (strategy_link *l = sr->opts; l; l = l->next)
        (void)rp_ps_leave(((async_ctx *)l)->ps);
    /* Under MPI the servers hear of a failed step, and stop: the other ranks' next request
       fails instead of their training on until the batches run out. */
    async_state *st = rep->r->strategy_state;
    if (status != RP_OK && st->group) rp_ps_group_fail(st->group, status, message);
    if (status != RP_OK)
        rp_error_set(status, NULL, 0, "%s", message);
    else
        rp_error_clear();
}

/* This replica's handle on set k: made by local replica 0 (threads) or by this rank (MPI). */
static rp_status take_handle(rp_replica *rep, int k, int64_t numel, const rp_ps_config *pc,
                             rp_ps **ps)
{
    rp_replicator *r = rep->r;
    async_state *st = r->strategy_state;
    if (st->group) {
        if (r->n > 1)
            return RP_ERROR(RP_ERR_UNSUPPORTED,
                            "asynchronous training under MPI runs one replica per rank "
                            "(this rank has %d): start more ranks instead of --replicas",
                            r->n);
        return rp_ps_mpi_create(ps, st->group, numel, pc);
    }
    return strategy_ps_take(rep, &st->sets[k], r->n, rep->local, numel, pc, ps);
}

/*
 * Loads replica 0's values (and slots, `nslots` floats of storage, step) into the servers; every
 * replica then pulls them.
 */
static rp_status load_and_pull(async_ctx *a, const float *slots, int64_t nslots, int64_t steps)
{
    rp_replica *rep = a->link.rep;
    float *values = rp_params_data(a->params);
    size_t bytes = (size_t)rp_params_trainable_numel(a->params) * sizeof(float);
    if (rep->id == 0) {
        size_t sbytes = slots ? (size_t)nslots * sizeof(float) : 0;
        const float *hv = strategy_view(&a->values, values, bytes, true);
        const float *hs = slots && hv ? strategy_view(&a->state, slots, sbytes, true) : NULL;
        if (!hv || (slots && !hs)) return rp_last_status();
        RP_CHECK(rp_ps_init(a->ps, hv, hs, steps));
    }
    rt_internal_begin(rep->comm, "the runtime's parameter-server barrier");
    rp_status status = rp_comm_barrier(rep->comm);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    float *hv = strategy_view(&a->values, values, bytes, false);
    if (!hv) return rp_last_status();
    RP_CHECK(rp_ps_pull(a->ps, hv));
    strategy_commit(values, hv, bytes);
    return RP_OK;
}

static rp_status async_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                        const rp_optim_config *cfg)
{
    rp_replicator *r = rep->r;
    int k = strategy_slot_free(rep, RP_ASYNC_SETS_MAX);
    if (k < 0)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "at most %d async optimizers alive per replica",
                        RP_ASYNC_SETS_MAX);
    rp_ps_config pc = strategy_ps_config(r, cfg);
    int64_t numel = rp_params_trainable_numel(params);
    rp_ps *ps = NULL;
    RP_CHECK(take_handle(rep, k, numel, &pc, &ps));
    async_ctx *a = calloc(1, sizeof *a);
    if (!a) {
        rp_ps_destroy(ps);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the asynchronous optimizer");
    }
    a->params = params;
    a->ps = ps;
    rp_optimizer_hooks h = {.update = async_update, .release = async_release};
    rp_status status = rp_optimizer_add_hooks(opt, &h, a);
    if (status != RP_OK) {
        async_release(a);
        return status;
    }
    strategy_attach(rep, &a->link, opt, k);
    RP_CHECK(rp_ps_join(ps, r->generation));
    /* Replica 0's initial values become everyone's, as in sync training. */
    RP_CHECK(load_and_pull(a, NULL, 0, 0));
    rp_debug("async optimizer: set %d, %lld values on %d %s parameter servers, staleness %d", k,
             (long long)numel, pc.servers, rp_ps_backend(ps), pc.staleness);
    return RP_OK;
}

static rp_status async_fetch(rp_replica *rep, rp_optimizer *opt)
{
    async_ctx *a = find(rep, opt);
    if (!a) return RP_OK;
    int64_t step = 0, nstate = 0;
    float *values = rp_params_data(a->params), *state = rp_optimizer_state(opt, &nstate);
    size_t bytes = (size_t)rp_params_trainable_numel(a->params) * sizeof(float),
           sbytes = (size_t)nstate * sizeof(float);
    float *hv = strategy_view(&a->values, values, bytes, false);
    float *hs = state && hv ? strategy_view(&a->state, state, sbytes, false) : NULL;
    if (!hv || (state && !hs)) return rp_last_status();
    RP_CHECK(rp_ps_snapshot(a->ps, hv, hs, &step));
    strategy_commit(values, hv, bytes);
    if (state) strategy_commit(state, hs, sbytes);
    rp_optimizer_set_steps(opt, step);
    return RP_OK;
}

static rp_status async_publish(rp_replica *rep, rp_optimizer *opt)
{
    async_ctx *a = find(rep, opt);
    if (!a) return strategy_broadcast_state(rep, opt);
    int64_t steps = rp_optimizer_steps(opt);
    int64_t nstate = 0;
    float *state = rp_optimizer_state(opt, &nstate);
    RP_CHECK(load_and_pull(a, state, nstate, steps));
    RP_CHECK(rp_comm_broadcast(rep->comm, &steps, 1, RP_I64, 0));
    rp_optimizer_set_steps(opt, steps);
    return RP_OK;
}

static rp_status async_claim(rp_replica *rep, int64_t *ticket)
{
    async_state *st = rep->r->strategy_state;
    async_ctx *oldest = (async_ctx *)strategy_oldest(rep);
    if (oldest) return rp_ps_claim(oldest->ps, ticket);
    if (st->group)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_replica_claim across processes needs the async regime "
                        "and an optimizer made by rp_replica_optimizer_create() first");
    return strategy_local_claim(rep, ticket);
}

static rp_status async_create(rp_replicator *r, bool mpi, rp_comm **world)
{
    async_state *st = calloc(1, sizeof *st);
    if (!st) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the asynchronous strategy");
    r->strategy_state = st;
    if (!mpi) return RP_OK;
    if (r->n > 1)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "asynchronous training under MPI runs one replica per rank "
                        "(asked for %d in each): start more ranks instead",
                        r->n);
    /* The last cfg.ps ranks serve; the others are the replicas, with a communicator of their own.
     */
    RP_CHECK(rp_ps_mpi_group_create(&st->group, r->cfg.ps, r->cfg.timeout_s));
    r->server = rp_ps_group_is_server(st->group);
    rp_comm *all = NULL;
    RP_CHECK(rp_comm_mpi_create(&all, r->cfg.timeout_s));
    rp_status status = rp_comm_split(all, r->server ? 1 : 0, rp_comm_rank(all), world);
    /* A replica waiting for a peer (a metrics reduction, a checkpoint's agreement) may wait on
       one that is itself blocked on a stopped server. The peers wait longer than a call to a
       server (1.5 x + 2 s), so that call's timeout, which names the server, ends the job rather
       than the peer's, which would blame the blocked replica. */
    if (status == RP_OK && *world && !r->server)
        status = rp_comm_set_timeout(*world, 1.5 * rp_comm_timeout(all) + 2.0);
    rp_comm_destroy(all);
    return status;
}

static void async_destroy(rp_replicator *r)
{
    async_state *st = r->strategy_state;
    if (!st) return;
    for (int k = 0; k < RP_ASYNC_SETS_MAX; k++) {
        for (int i = 0; st->sets[k] && i < r->n; i++)
            rp_ps_destroy(st->sets[k][i]);
        free(st->sets[k]);
    }
    /* The servers stop once every replica's process has said goodbye. */
    rp_ps_group_destroy(st->group);
    free(st);
    r->strategy_state = NULL;
}

static rp_status async_serve(rp_replicator *r)
{
    async_state *st = r->strategy_state;
    return rp_ps_mpi_serve(st->group);
}

/* An optimizer alive at replica_destroy: its server handle goes now, before the servers' group;
   release frees the rest later. */
static void async_detach(strategy_link *link)
{
    async_ctx *a = (async_ctx *)link;
    rp_ps_destroy(a->ps);
    a->ps = NULL;
}

static void async_replica_destroy(rp_replica *rep)
{
    strategy_replica_fini(rep, async_detach);
}

/* Async replicas meet the servers at their own pace: no layout predicts their traffic. */
static rp_status async_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                            const rp_optim_config *oc, rp_plan_worker *w)
{
    return RP_ERROR(RP_ERR_UNSUPPORTED,
                    "the planner covers synchronous layouts (one replica, N replicas, "
                    "ZeRO-1, sync groups); async replicas talk to parameter servers at their "
                    "own pace");
}

const strategy_table strategy_async = {
    .name = "async",
    .identical = false,
    .lockstep = false,
    .servers = true,
    .create = async_create,
    .destroy = async_destroy,
    .replica_init = strategy_replica_init,
    .replica_destroy = async_replica_destroy,
    .optimizer_create = async_optimizer_create,
    .phase_begin = async_phase_begin,
    .phase_end = async_phase_end,
    .fetch = async_fetch,
    .publish = async_publish,
    .claim = async_claim,
    .next_batch = async_claim, /* each batch to whichever replica asks first */
    .serve = async_serve,
    .plan = async_plan,
};
