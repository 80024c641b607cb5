/*
 * strategy_groups.c - sync groups as a strategy table (TF-Replicator's RFC:
 * "within each sync group, each replica is in sync, but the sync groups are
 * asynchronous among themselves"): the N replicas form cfg.sync_groups
 * groups of S = N / G consecutive replicas; inside a group they train like
 * the sync strategy, and the groups meet only at the parameter servers.
 *
 * A step of one group:
 *  1. backward's gradient-ready callbacks all-reduce (mean) the gradients
 *     over the group's communicator, in the sync strategy's buckets and
 *     order, with its non-finite check (strategy.c: reducer);
 *  2. the group's rank 0 pushes the group's mean gradient to the servers
 *     and pulls the current values (one push per group step, so the servers'
 *     step count is the groups' steps; the staleness bound counts groups);
 *  3. it broadcasts the values inside the group, so the group's replicas
 *     stay bitwise identical (checked every checksum_every steps, within the
 *     group).
 * Work: a group takes batches from the shared queue as a unit - its rank 0
 * claims a ticket and broadcasts it in the group - and each replica trains
 * its share of that batch (rp_replica_input_context gives the rank in the
 * group and the group's size).
 *
 * Layout. Each group's communicator is made at create, kept by the replica
 * and left and rejoined around each run with its other communicators, so a
 * replica that fails makes its group's peers fail at once.
 *  - Threads: one rp_comm_threads_create per group (no collective); the
 *    servers are one in-process set per optimizer with one worker handle
 *    per group, taken by the group's rank 0.
 *  - MPI (one replica per rank): the last cfg.ps ranks serve, as in async
 *    training; the others are the replicas, and their communicator is split
 *    into the groups. The servers' group is made over the groups' ranks 0
 *    and the servers only (a communicator split off for them), so the
 *    servers count G workers - one clock, one goodbye and one share of the
 *    claims per group, as on threads - and worker g is group g's rank 0.
 *
 * Memory. Values, gradients and state are the kernel table's storage; the
 * servers and the group's broadcasts take host memory, so they run on host
 * views (kernels_staging: the storage itself with a host table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps_internal.h"
#include "replicator/ps.h"
#include "replicator/strategy.h"

#define RP_GROUP_SETS_MAX 8

/* Its link's slot is its set: the same on every replica. */
typedef struct grouped_ctx {
    strategy_link link; /* first: the replica's list (strategy.h) */
    rp_params *params;
    reducer red;     /* the all-reduce over the group */
    rp_ps *ps;       /* the group's handle on the servers: its rank 0's (NULL on the others) */
    int64_t *hashes; /* [S * trainable parameters] checksum scratch */
    kernels_staging grad, values,
        state; /* host views of the blocks for the servers and broadcasts */
} grouped_ctx;

typedef struct groups_state {
    int groups, size;                /* G groups of S replicas */
    rp_comm **comms;                 /* [n] each replica's group handle, until taken */
    rp_ps **sets[RP_GROUP_SETS_MAX]; /* threads: each set's handles, [G], until taken */
    bool mpi;                        /* the servers are ranks of an MPI job */
    rp_comm *ps_comm; /* MPI: the groups' ranks 0 and the servers (NULL on other ranks) */
    rp_ps_group *ps;  /* MPI: the servers' group over ps_comm (NULL on other ranks) */
} groups_state;

static int group_of(const rp_replica *rep)
{
    return rep->id / rep->group_size;
}

/* Broadcasts count values of `dtype` from the group's rank 0, as one of the runtime's calls. */
static rp_status group_broadcast(rp_replica *rep, void *buf, int64_t count, rp_dtype dtype,
                                 const char *what)
{
    rt_internal_begin(rep->group_comm, what);
    rp_status status = rp_comm_broadcast(rep->group_comm, buf, count, dtype, 0);
    rt_internal_end(rep->group_comm);
    return status;
}

static rp_status barrier_all(rp_replica *rep, const char *what)
{
    rt_internal_begin(rep->comm, what);
    rp_status status = rp_comm_barrier(rep->comm);
    rt_internal_end(rep->comm);
    return status;
}

static void groups_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr->opts; l; l = l->next)
        if (reducer_ready(&((grouped_ctx *)l)->red, param)) return;
}

static rp_status groups_before(rp_optimizer *opt, void *ctx)
{
    grouped_ctx *g = ctx;
    RP_CHECK(strategy_alive(&g->link));
    return reducer_finish(&g->red);
}

/* The update: rank 0 pushes the group's mean gradient and pulls the values; the group takes them.
 */
static rp_status groups_update(rp_optimizer *opt, float lr, void *ctx)
{
    grouped_ctx *g = ctx;
    RP_CHECK(strategy_alive(&g->link));
    float *values = rp_params_data(g->params);
    int64_t numel = rp_params_trainable_numel(g->params);
    size_t bytes = (size_t)numel * sizeof(float);
    /* The values view is filled by the pull (rank 0) or the broadcast (the others). */
    float *hv = strategy_view(&g->values, values, bytes, false);
    if (!hv) return rp_last_status();
    /* A failed push returns here without the broadcast: the rank's step fails, it leaves the
       group's communicator, and its peers waiting in the broadcast fail at once, naming it. */
    if (g->ps) {
        const float *hg = strategy_view(&g->grad, rp_params_grad(g->params), bytes, true);
        if (!hg) return rp_last_status();
        RP_CHECK(ps_exchange(g->ps, hg, lr, hv));
    }
    RP_CHECK(
        group_broadcast(g->link.rep, hv, numel, RP_F32, "the runtime's group parameter broadcast"));
    strategy_commit(values, hv, bytes);
    return RP_OK;
}

static rp_status groups_after(rp_optimizer *opt, void *ctx)
{
    grouped_ctx *g = ctx;
    RP_CHECK(strategy_alive(&g->link));
    rp_replica *rep = g->link.rep;
    return strategy_checksum(rep, rep->group_comm, g->params, rp_optimizer_steps(opt), g->hashes);
}

static void groups_release(void *ctx)
{
    grouped_ctx *g = ctx;
    strategy_detach(&g->link);
    reducer_free(&g->red);
    rp_ps_destroy(g->ps);
    kernels_staging_free(&g->grad);
    kernels_staging_free(&g->values);
    kernels_staging_free(&g->state);
    free(g->hashes);
    free(g);
}

static grouped_ctx *find(const rp_replica *rep, const rp_optimizer *opt)
{
    return (grouped_ctx *)strategy_find(rep, opt);
}

/* Set k's handles, made by local replica 0 with one worker per group; each group's rank 0 takes
 * its own. */
static rp_status take_handle(rp_replica *rep, int k, int64_t numel, const rp_ps_config *pc,
                             rp_ps **ps)
{
    groups_state *st = rep->r->strategy_state;
    /* MPI: each group's rank 0 makes its own; the servers make the set at its first message. */
    if (st->mpi) return rep->group_rank == 0 ? rp_ps_mpi_create(ps, st->ps, numel, pc) : RP_OK;
    return strategy_ps_take(rep, &st->sets[k], st->groups,
                            rep->group_rank == 0 ? group_of(rep) : -1, numel, pc, ps);
}

static rp_status groups_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                         const rp_optim_config *cfg)
{
    rp_replicator *r = rep->r;
    int k = strategy_slot_free(rep, RP_GROUP_SETS_MAX);
    if (k < 0)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "at most %d sync-group optimizers alive per replica",
                        RP_GROUP_SETS_MAX);
    /* Replica 0's values (and buffers) become everyone's, as in sync training. */
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = strategy_broadcast_params(rep, params);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    rp_ps_config pc = strategy_ps_config(r, cfg);
    int64_t numel = rp_params_trainable_numel(params);
    rp_ps *ps = NULL;
    RP_CHECK(take_handle(rep, k, numel, &pc, &ps));
    grouped_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        rp_ps_destroy(ps);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the sync-group optimizer");
    }
    g->params = params;
    g->ps = ps;
    int T = rp_params_trainable_count(params);
    g->hashes = malloc((size_t)rep->group_size * (size_t)(T > 0 ? T : 1) * sizeof(int64_t));
    status = g->hashes ? reducer_init(&g->red, rep, rep->group_comm, params, RP_GRAD_ALL_REDUCE)
                       : RP_ERROR(RP_ERR_NOMEM, "cannot allocate the sync-group optimizer");
    rp_optimizer_hooks h = {.before = groups_before,
                            .update = groups_update,
                            .after = groups_after,
                            .release = groups_release};
    if (status == RP_OK) status = rp_optimizer_add_hooks(opt, &h, g);
    if (status != RP_OK) {
        groups_release(g);
        return status;
    }
    strategy_attach(rep, &g->link, opt, k);
    if (ps) RP_CHECK(rp_ps_join(ps, r->generation));
    /* The servers start from replica 0's values, which every replica holds already. */
    if (rep->id == 0) {
        const float *hv =
            strategy_view(&g->values, rp_params_data(params), (size_t)numel * sizeof(float), true);
        if (!hv) return rp_last_status();
        RP_CHECK(rp_ps_init(ps, hv, NULL, 0));
    }
    RP_CHECK(barrier_all(rep, "the runtime's parameter-server barrier"));
    rp_debug("sync-group optimizer: group %d of %d (rank %d of %d), set %d, %lld values on %d "
             "parameter servers, staleness %d",
             group_of(rep), r->cfg.sync_groups, rep->group_rank, rep->group_size, k,
             (long long)numel, pc.servers, pc.staleness);
    return RP_OK;
}

static void groups_phase_begin(rp_replica *rep, uint64_t phase)
{
    strategy_replica *sr = rep->strategy;
    /* A failure here (a server gone) comes back, named, from the next push or pull. */
    for (strategy_link *l = sr->opts; l; l = l->next)
        if (((grouped_ctx *)l)->ps) (void)rp_ps_join(((grouped_ctx *)l)->ps, phase);
}

static void groups_phase_end(rp_replica *rep)
{
    strategy_replica *sr = rep->strategy;
    /* The step's own error, if any, is the one to report, not a leave that failed because of it. */
    rp_status status = rp_last_status();
    char message[1024];
    snprintf(message, sizeof message, "%s", rp_last_error());
    for (strategy_link *l = sr->opts; l; l = l->next)
        if (((grouped_ctx *)l)->ps) (void)rp_ps_leave(((grouped_ctx *)l)->ps);
    /* Under MPI a group's rank 0 tells the servers its group failed (a peer's failure reaches it
       at once through the group's collectives), and they stop: the other groups' next claim or
       push fails instead of their training on until the batches run out. */
    groups_state *st = rep->r->strategy_state;
    if (status != RP_OK && st->ps) rp_ps_group_fail(st->ps, status, message);
    if (status != RP_OK)
        rp_error_set(status, NULL, 0, "%s", message);
    else
        rp_error_clear();
}

/*
 * The servers' state into every replica of the group (collective in the group): rank 0 takes a
 * snapshot - values, slots, step - and broadcasts it.
 */
static rp_status groups_fetch(rp_replica *rep, rp_optimizer *opt)
{
    grouped_ctx *g = find(rep, opt);
    if (!g) return RP_OK;
    int64_t step = 0, nstate = 0, numel = rp_params_trainable_numel(g->params);
    float *values = rp_params_data(g->params), *state = rp_optimizer_state(opt, &nstate);
    size_t bytes = (size_t)numel * sizeof(float), sbytes = (size_t)nstate * sizeof(float);
    float *hv = strategy_view(&g->values, values, bytes, false);
    float *hs = state && hv ? strategy_view(&g->state, state, sbytes, false) : NULL;
    if (!hv || (state && !hs)) return rp_last_status();
    if (g->ps) RP_CHECK(rp_ps_snapshot(g->ps, hv, hs, &step));
    const char *what = "the runtime's optimizer-state broadcast";
    RP_CHECK(group_broadcast(rep, hv, numel, RP_F32, what));
    if (nstate > 0) RP_CHECK(group_broadcast(rep, hs, nstate, RP_F32, what));
    RP_CHECK(group_broadcast(rep, &step, 1, RP_I64, what));
    strategy_commit(values, hv, bytes);
    if (state) strategy_commit(state, hs, sbytes);
    rp_optimizer_set_steps(opt, step);
    return RP_OK;
}

/* Replica 0's values, slots and step into the servers; every group's rank 0 pulls, and the group
 * takes the values. */
static rp_status groups_publish(rp_replica *rep, rp_optimizer *opt)
{
    grouped_ctx *g = find(rep, opt);
    if (!g) return strategy_broadcast_state(rep, opt);
    int64_t steps = rp_optimizer_steps(opt), nstate = 0,
            numel = rp_params_trainable_numel(g->params);
    float *values = rp_params_data(g->params), *state = rp_optimizer_state(opt, &nstate);
    size_t bytes = (size_t)numel * sizeof(float);
    if (rep->id == 0) {
        const float *hv = strategy_view(&g->values, values, bytes, true);
        const float *hs =
            state && hv ? strategy_view(&g->state, state, (size_t)nstate * sizeof(float), true)
                        : NULL;
        if (!hv || (state && !hs)) return rp_last_status();
        RP_CHECK(rp_ps_init(g->ps, hv, hs, steps));
    }
    RP_CHECK(barrier_all(rep, "the runtime's parameter-server barrier"));
    float *hv = strategy_view(&g->values, values, bytes, false);
    if (!hv) return rp_last_status();
    if (g->ps) RP_CHECK(rp_ps_pull(g->ps, hv));
    RP_CHECK(group_broadcast(rep, hv, numel, RP_F32, "the runtime's group parameter broadcast"));
    strategy_commit(values, hv, bytes);
    rt_internal_begin(rep->comm, "the runtime's step-count broadcast");
    rp_status status = rp_comm_broadcast(rep->comm, &steps, 1, RP_I64, 0);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    rp_optimizer_set_steps(opt, steps);
    return RP_OK;
}

/* A ticket for the group (its rank 0's call): from this process's counter, or under MPI from the
 * servers (server 0 counts), as async replicas claim. */
static rp_status leader_claim(rp_replica *rep, int64_t *ticket)
{
    groups_state *st = rep->r->strategy_state;
    if (!st->mpi) return strategy_local_claim(rep, ticket);
    grouped_ctx *oldest = (grouped_ctx *)strategy_oldest(rep);
    if (!oldest)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_replica_claim across processes needs an optimizer made by "
                        "rp_replica_optimizer_create() first: its parameter servers hand out "
                        "the tickets");
    return rp_ps_claim(oldest->ps, ticket);
}

/* The shared work queue, a group at a time: rank 0 claims, the group learns the ticket. */
static rp_status groups_claim(rp_replica *rep, int64_t *ticket)
{
    int64_t t = 0;
    if (rep->group_rank == 0) RP_CHECK(leader_claim(rep, &t));
    RP_CHECK(group_broadcast(rep, &t, 1, RP_I64, "the runtime's batch-ticket broadcast"));
    *ticket = t;
    return RP_OK;
}

/*
 * MPI: the last cfg.ps ranks serve; the W others are the replicas, G groups of S = W / G
 * consecutive ranks. Three splits of the job's communicator and one of the replicas': the
 * replicas' world (the servers get one of their own), the servers' communicator (the groups'
 * ranks 0, in group order, then the servers) and each group's.
 */
static rp_status create_mpi(rp_replicator *r, groups_state *st, rp_comm **world)
{
    int G = r->cfg.sync_groups, servers = r->cfg.ps;
    if (r->n > 1)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "sync groups under MPI run one replica per rank (this rank has %d): "
                        "start more ranks instead of --replicas",
                        r->n);
    rp_comm *all = NULL;
    RP_CHECK(rp_comm_mpi_create(&all, r->cfg.timeout_s));
    int rank = rp_comm_rank(all), size = rp_comm_size(all), W = size - servers;
    rp_status status = RP_OK;
    if (W < 1)
        status = RP_ERROR(RP_ERR_INVALID,
                          "%d parameter servers in a job of %d ranks: at least one rank must be "
                          "left to be a replica",
                          servers, size);
    else if (W % G != 0)
        status = RP_ERROR(RP_ERR_INVALID,
                          "sync_groups = %d does not divide the job's %d replicas (%d ranks less "
                          "%d parameter servers): every group needs the same number of replicas",
                          G, W, size, servers);
    if (status != RP_OK) {
        rp_comm_destroy(all);
        return status;
    }
    int S = W / G;
    bool server = rank >= W, leader = !server && rank % S == 0;
    st->size = S;
    st->mpi = true;
    r->server = server;
    status = rp_comm_split(all, server ? 1 : 0, rank, world);
    if (status == RP_OK) status = rp_comm_split(all, server || leader ? 0 : -1, rank, &st->ps_comm);
    rp_comm_destroy(all);
    if (status == RP_OK && !server) status = rp_comm_split(*world, rank / S, rank, &st->comms[0]);
    if (status == RP_OK && st->ps_comm)
        status = rp_ps_group_create(&st->ps, st->ps_comm, servers, r->cfg.timeout_s);
    return status;
}

static rp_status groups_create(rp_replicator *r, bool mpi, rp_comm **world)
{
    groups_state *st = calloc(1, sizeof *st);
    if (!st) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the sync-group strategy");
    r->strategy_state = st;
    st->groups = r->cfg.sync_groups;
    st->size = r->n / st->groups;
    st->comms = calloc((size_t)r->n, sizeof(rp_comm *));
    if (mpi)
        return st->comms ? create_mpi(r, st, world)
                         : RP_ERROR(RP_ERR_NOMEM, "cannot allocate the sync-group strategy");
    int *ids = malloc((size_t)st->size * sizeof(int));
    rp_status status = st->comms && ids
                           ? RP_OK
                           : RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d sync groups", st->groups);
    /* Group g is replicas [gS, (g+1)S): on threads a replica's id is its local index. */
    for (int grp = 0; grp < st->groups && status == RP_OK; grp++) {
        for (int q = 0; q < st->size; q++)
            ids[q] = grp * st->size + q;
        status =
            rp_comm_threads_create(st->comms + grp * st->size, st->size, ids, r->cfg.timeout_s);
    }
    free(ids);
    return status;
}

static void groups_destroy(rp_replicator *r)
{
    groups_state *st = r->strategy_state;
    if (!st) return;
    for (int k = 0; k < RP_GROUP_SETS_MAX; k++) {
        for (int i = 0; st->sets[k] && i < st->groups; i++)
            rp_ps_destroy(st->sets[k][i]);
        free(st->sets[k]);
    }
    for (int i = 0; st->comms && i < r->n; i++)
        if (st->comms[i]) rp_comm_destroy(st->comms[i]);
    free(st->comms);
    /* A group's rank 0 says goodbye here; the servers stop once every group's has. */
    rp_ps_group_destroy(st->ps);
    rp_comm_destroy(st->ps_comm);
    free(st);
    r->strategy_state = NULL;
}

static rp_status groups_replica_init(rp_replica *rep)
{
    groups_state *st = rep->r->strategy_state;
    RP_CHECK(strategy_replica_init(rep));
    if (rep->r->server) return RP_OK; /* a server rank's: it only serves */
    rep->group_comm = st->comms[rep->local];
    st->comms[rep->local] = NULL;
    rep->group_rank = rp_comm_rank(rep->group_comm);
    rep->group_size = rp_comm_size(rep->group_comm);
    /* Left and rejoined around each run with the replica's other communicators. */
    if (rep->group_size > 1) rep->live[rep->nlive++] = rep->group_comm;
    return RP_OK;
}

/* An optimizer alive at replica_destroy: its server handle goes now, with the strategy's state;
   release frees the rest later. */
static void groups_detach(strategy_link *link)
{
    grouped_ctx *g = (grouped_ctx *)link;
    rp_ps_destroy(g->ps);
    g->ps = NULL;
}

static void groups_replica_destroy(rp_replica *rep)
{
    strategy_replica_fini(rep, groups_detach);
    if (rep->group_comm) rp_comm_destroy(rep->group_comm);
    rep->group_comm = NULL;
}

/* Groups of one replica each, in one process, are async training: the async table runs them. */
static const strategy_table *groups_resolve(const rp_replicator *r, bool mpi)
{
    return !mpi && r->cfg.sync_groups >= r->n ? &strategy_async : &strategy_groups;
}

static rp_status groups_serve(rp_replicator *r)
{
    groups_state *st = r->strategy_state;
    return rp_ps_mpi_serve(st->ps);
}

/*
 * The plan: the sync strategy's buckets all-reduced over the group (RP_PLAN_GROUP), the values
 * broadcast from the group's rank 0 after its exchange with the servers, and each batch's ticket
 * broadcast in the group. Buffers: the gradient reducer's (its non-finite exchange, the buckets'
 * ranges, each parameter's bucket list and the buckets' counters, the bf16 copy of the largest)
 * and the checksum scratch (S x T hashes). w->optim stays the whole state (every replica keeps
 * one for checkpoints); the state the updates use lives on the servers (groups_plan_servers).
 */
static rp_status groups_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                             const rp_optim_config *oc, rp_plan_worker *w)
{
    RP_CHECK(strategy_plan_base(N, id, params, oc, w));
    int G = cfg->sync_groups;
    if (N % G != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "sync_groups = %d does not divide the %d replicas: every group needs the "
                        "same number of replicas",
                        G, N);
    if (G == N)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "sync_groups = %d of %d replicas makes groups of one replica, which the "
                        "runtime trains asynchronously; the planner covers groups of 2 or more",
                        G, N);
    int S = N / G, T = rp_params_trainable_count(params), nb = 0;
    int64_t most = 0;
    RP_CHECK(strategy_plan_buckets(params, cfg->bucket_bytes, &nb, &most));
    int64_t P = rp_params_trainable_numel(params), bytes = P * (int64_t)sizeof(float);
    int64_t Tb = T > 0 ? T : 1, B = nb > 0 ? nb : 1;
    bool bf16 = cfg->grad_dtype == RP_BF16;
    w->groups = G;
    w->strategy = (int64_t)S * 2 * 8 + Tb * 2 * 8 + ((int64_t)T + 1) * 4 + Tb * 4 + 2 * B * 4 +
                  (int64_t)S * Tb * 8 + strategy_plan_wire(cfg, most);
    RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
                                 bf16 ? "gradient buckets (mean, in the group, bf16)"
                                      : "gradient buckets (mean, in the group)",
                                 nb, P * (int64_t)rp_dtype_size(cfg->grad_dtype)));
    RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_BROADCAST,
                                 "parameters from the group's rank 0", 1, bytes));
    return rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_BROADCAST,
                               "the batch's ticket", 1, (int64_t)sizeof(int64_t));
}

/* The in-process servers: cfg.ps shards, each holding its values and at least one slot (ps.c,
   ps_shard_create). */
static int64_t groups_plan_servers(const rp_config *cfg, const rp_params *params,
                                   const rp_optim_config *oc)
{
    int64_t slots = rp_optim_slots(oc);
    return rp_params_trainable_numel(params) * (int64_t)sizeof(float) *
           (1 + (slots > 0 ? slots : 1));
}

const strategy_table strategy_groups = {
    .name = "sync groups",
    .identical = false,
    .lockstep = false,
    .servers = true,
    .resolve = groups_resolve,
    .create = groups_create,
    .destroy = groups_destroy,
    .replica_init = groups_replica_init,
    .replica_destroy = groups_replica_destroy,
    .grad_ready = groups_on_grad_ready,
    .optimizer_create = groups_optimizer_create,
    .phase_begin = groups_phase_begin,
    .phase_end = groups_phase_end,
    .fetch = groups_fetch,
    .publish = groups_publish,
    .claim = groups_claim,
    .next_batch = groups_claim, /* each batch to whichever group asks first */
    .serve = groups_serve,
    .plan = groups_plan,
    .plan_servers = groups_plan_servers,
};
