/*
 * strategy_zero.c - ZeRO-1 (optimizer-state sharding) and ZeRO-2 (gradients
 * too) as strategy tables: synchronous data parallelism in which each replica
 * keeps the optimizer state, and with ZeRO-2 the reduced gradients, of one
 * shard of the parameters only.
 *
 * The P trainable values of a parameter list form one flat block. With N
 * replicas it is cut into N shards of S = ceil(P / N) values; replica r owns
 * [rS, (r+1)S) clipped to P (so the last shards may be short, or empty:
 * sizes that do not divide are padded, never refused). A step:
 *  1. backward's gradient-ready callbacks reduce-scatter (mean) the local
 *     gradients in buckets; each replica receives its shard of the mean;
 *  2. the replicas agree that every gradient was finite (one small
 *     all-gather), and the reduced shard is put in place in the gradient
 *     block, where hooks added later (clipping) see it;
 *  3. the optimizer, restricted to the shard (rp_optimizer_set_range),
 *     updates the shard's values with the shard's state;
 *  4. the shards' values are all-gathered, in buckets, so every replica
 *     holds the whole model again, bitwise the same.
 * The reductions add the replicas in rank order, as the sync strategy's
 * all-reduce does, and the rule is elementwise: the values are bitwise those
 * of the sync strategy.
 *
 * Buckets are ranges [a, b) of shard-local positions: bucket k covers the
 * segment [qS + a, qS + b) of every shard q, packed back to back for one
 * reduce-scatter (and unpacked after one all-gather). They are cut from the
 * end of the shard, as the sync strategy cuts them from the end of the
 * block, and start in order as soon as every parameter touching one of
 * their segments is final. Shard 0's segment lies in the first 1/N of the
 * block, whose gradients backward finishes last, so the reduce-scatters
 * overlap only the last 1/N of backward (the price of one contiguous shard
 * per replica).
 *
 * Gradient accumulation (a second backward before the step) works as in the
 * sync strategy: the reduced shard is kept in a buffer of its own (sgrad),
 * the gradient block keeps the local sums, and the step reduces every bucket
 * again (ZeRO-2 and 3 keep it in the block, grad_reducer.c).
 *
 * Checkpoints hold logical tensors: fetch gathers the state of every shard
 * into replica 0's optimizer (which grows back to the whole range until its
 * next step), and a checkpoint read into a sharded optimizer takes its
 * range's part (io.h), so a run saved on N replicas resumes on M.
 *
 * ZeRO-2 differs in step 1 only: the gradient buckets are the sync strategy's (contiguous, in
 * backward's order), each all-reduced as soon as backward finishes it; the replica keeps the
 * bucket's part inside its shard and releases the bucket's gradients (their pages go back to the
 * system, and the gradient block is released again when the optimizer zeroes it), so a replica
 * holds its shard of the gradients plus the buckets backward has not finished, not the whole
 * gradient. The sums are the sync strategy's, so the values are bitwise its values too.
 *
 * The reduce-scatter, its buckets and buffers, the finiteness agreement and the bucketed
 * all-gather of shards are the gradient reducer's (grad_reducer.c, RP_GRAD_REDUCE_SCATTER and
 * RP_GRAD_ALL_REDUCE_SHARD), whose all-reduce form the sync strategy uses: one non-finite check
 * for all.
 */
#include <stdlib.h>
#include <string.h>

#include "nn/params_internal.h"
#include "replicator/strategy.h"

typedef struct zero_ctx {
    strategy_link link; /* first: the replica's list (strategy.h) */
    rp_params *params;
    float *value;  /* the parameter list's values (storage) */
    int64_t numel; /* P: trainable values */
    int stage;     /* 1: optimizer state sharded; 2: reduced gradients too; 3: values too */
    reducer red;   /* the reduction, its shards [lo, hi), buckets and buffers */
    residency res; /* stage 3: which units of the values are present */
    bool read;     /* stage 3: the shard's values read anew since the last publish */
} zero_ctx;

/*
 * ZeRO-3's values were read anew (params_values_replaced: a checkpoint read wrote this replica's
 * shard only): every unit is absent, its pages outside the shard given back, so the next use
 * gathers the new values from their owners.
 */
static rp_status zero3_replaced(void *ctx)
{
    zero_ctx *z = ctx;
    z->read = true;
    return residency_release_all(&z->res);
}

/*
 * ZeRO-3's use hook on the replica's thread (tape_residency.h): the unit holding param present, in
 * the stage-3 optimizer whose list holds it (a parameter of none, a buffer say, is always
 * present).
 */
static rp_status zero3_use(rp_tape *t, rp_tensor *param, int node, void *ctx)
{
    rp_replica *rep = ctx;
    strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr->opts; l; l = l->next) {
        zero_ctx *z = (zero_ctx *)l;
        int u = z->stage == 3 ? residency_unit_of(&z->res, param) : -1;
        if (u >= 0) return residency_use(&z->res, u, rp_tape_recording(t), node);
    }
    return RP_OK;
}

/* ZeRO-2 and 3's gradient hook (tape_residency.h): param's bucket into a gradient buffer. */
static void zero_grad_target(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr->opts; l; l = l->next) {
        zero_ctx *z = (zero_ctx *)l;
        if (z->stage >= 2 && reducer_grad_target(&z->red, param)) return;
    }
}

/* The calling replica thread's hooks for the optimizers it has: ZeRO-3's use hook while one is
   of stage 3, the gradient hook while one is of stage 2 or 3. */
static void zero_hooks(rp_replica *rep)
{
    int most = 0;
    for (strategy_link *l = rep ? ((strategy_replica *)rep->strategy)->opts : NULL; l; l = l->next)
        if (((zero_ctx *)l)->stage > most) most = ((zero_ctx *)l)->stage;
    tape_set_thread_use(most == 3 ? zero3_use : NULL, rep);
    tape_set_thread_grad(most >= 2 ? zero_grad_target : NULL, rep);
}

static void zero_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr->opts; l; l = l->next)
        if (reducer_ready(&((zero_ctx *)l)->red, param)) return;
}

/* Before the update: every bucket reduce-scattered exactly once since the last step. */
static rp_status zero_before(rp_optimizer *opt, void *ctx)
{
    zero_ctx *z = ctx;
    RP_CHECK(strategy_alive(&z->link));
    /* A fetch grew replica 0's optimizer to the whole range for a checkpoint: shard it again. */
    rp_status status = rp_optimizer_set_range(opt, z->red.lo, z->red.hi);
    if (status != RP_OK) reducer_fail(&z->red, status);
    return reducer_finish(&z->red);
}

/* The update: the rule on this replica's shard, then every shard's values to every replica. */
static rp_status zero_update(rp_optimizer *opt, float lr, void *ctx)
{
    zero_ctx *z = ctx;
    RP_CHECK(strategy_alive(&z->link));
    RP_CHECK(rp_optimizer_apply_rule(opt, lr));
    /* ZeRO-3: the other shards' values are gathered again only when the next step uses them. */
    if (z->stage == 3) return residency_release_all(&z->res);
    return reducer_gather(&z->red, z->value + z->red.lo, z->value,
                          "the runtime's parameter all-gather");
}

static rp_status zero_after(rp_optimizer *opt, void *ctx)
{
    zero_ctx *z = ctx;
    RP_CHECK(strategy_alive(&z->link));
    rp_replica *rep = z->link.rep;
    /* ZeRO-3's replicas hold different shards of the values: nothing to compare. */
    if (z->stage == 3) return RP_OK;
    return strategy_checksum(rep, rep->comm, z->params, rp_optimizer_steps(opt), z->red.scratch);
}

static void zero_release(void *ctx)
{
    zero_ctx *z = ctx;
    rp_replica *rep = z->link.rep;
    strategy_detach(&z->link);
    /* The values stay as they are (a gather is a collective, and a release is not): fetch first
       (rp_replica_optimizer_fetch) to keep them whole. */
    if (z->stage == 3) residency_free(&z->res);
    if (z->stage == 3) params_set_value_shard(z->params, 0, 0, NULL, NULL);
    if (rep && z->stage >= 2) zero_hooks(rep);
    if (z->stage >= 2)
        rp_debug("ZeRO-%d optimizer: %lld gradient buckets were written in the block (no gradient "
                 "buffer free)",
                 z->stage, (long long)z->red.spilled);
    reducer_free(&z->red);
    if (z->stage >= 2) params_set_grad_release(z->params, false, 0, 0);
    free(z);
}

/*
 * HSDP (cfg.hsdp = G, 1 < G < N): the data axis cut, once per replica (its first ZeRO optimizer;
 * a collective, as optimizer creation is), into the groups of G consecutive ranks that shard the
 * state and the N/G members across groups that hold the same shard. Left and rejoined around
 * each run with the replica's other communicators.
 */
static rp_status hsdp_comms(rp_replica *rep)
{
    int G = rep->r->cfg.hsdp, N = rp_comm_size(rep->comm), rank = rp_comm_rank(rep->comm);
    if (G <= 1 || G >= N || rep->shard_comm) return RP_OK;
    if (N % G != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "hsdp = %d does not divide the %d replicas: HSDP's groups must be equal", G,
                        N);
    if (rep->nlive + 2 > RP_COMMS_MAX)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "HSDP: replica %d has no room for two communicators",
                        rep->id);
    rt_internal_begin(rep->comm, "the runtime's HSDP communicators");
    rp_status status = rp_comm_split(rep->comm, rank / G, rank, &rep->shard_comm);
    if (status == RP_OK) status = rp_comm_split(rep->comm, rank % G, rank, &rep->repl_comm);
    rt_internal_end(rep->comm);
    if (status == RP_OK) {
        rep->live[rep->nlive++] = rep->shard_comm;
        rep->live[rep->nlive++] = rep->repl_comm;
    }
    return status;
}

static void zero_replica_destroy(rp_replica *rep)
{
    strategy_replica_destroy(rep);
    if (rep->shard_comm) rp_comm_destroy(rep->shard_comm);
    if (rep->repl_comm) rp_comm_destroy(rep->repl_comm);
    rep->shard_comm = rep->repl_comm = NULL;
}

static rp_status zero_create(rp_replica *rep, rp_optimizer *opt, rp_params *params, int stage)
{
    if (rep->count == 1) return RP_OK;
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = strategy_broadcast_params(rep, params);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    zero_ctx *z = calloc(1, sizeof *z);
    if (!z) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the ZeRO-%d optimizer", stage);
    z->params = params;
    z->value = rp_params_data(params);
    z->numel = rp_params_trainable_numel(params);
    z->stage = stage;
    /* HSDP: the shards are a group's, and the groups' shards are averaged across them. */
    status = hsdp_comms(rep);
    if (status == RP_OK)
        status = reducer_init(&z->red, rep, rep->shard_comm ? rep->shard_comm : rep->comm, params,
                              stage >= 2 ? RP_GRAD_ALL_REDUCE_SHARD : RP_GRAD_REDUCE_SCATTER);
    if (status == RP_OK && rep->shard_comm)
        status = reducer_set_replicas(&z->red, rep->repl_comm, rep->comm);
    if (status == RP_OK && stage == 3) {
        status = residency_init(&z->res, &z->red, params, rep->r->cfg.bucket_bytes,
                                rep->r->cfg.keep_gathered, rep->r->cfg.prefetch);
        /* Sharded from the start, as after every step (the first step gathers as the others). */
        if (status == RP_OK) status = residency_release_all(&z->res);
        /* A checkpoint read writes the shard only, and the units are gathered anew. */
        if (status == RP_OK)
            params_set_value_shard(params, z->red.lo, z->red.hi, zero3_replaced, z);
    }
    z->red.release_kept = stage == 3;
    /* The optimizer keeps the state of this replica's shard only. */
    if (status == RP_OK) status = rp_optimizer_set_range(opt, z->red.lo, z->red.hi);
    rp_optimizer_hooks h = {
        .before = zero_before, .after = zero_after, .update = zero_update, .release = zero_release};
    if (status == RP_OK) status = rp_optimizer_add_hooks(opt, &h, z);
    if (status != RP_OK) {
        zero_release(z);
        return status;
    }
    strategy_attach(rep, &z->link, opt, -1);
    /* ZeRO-2 and 3: the optimizer's zeroing gives the gradient block's pages back too, but for
       the shard's (filled: the next backward keeps its reduced parts there). */
    if (stage >= 2) params_set_grad_release(params, true, z->red.lo, z->red.hi);
    if (stage >= 2) zero_hooks(rep); /* this run's; later: zero_phase_begin */
    rp_debug("ZeRO-%d optimizer: shard [%lld, %lld) of %lld values over %d replicas, %d gradient "
             "buckets",
             stage, (long long)z->red.lo, (long long)z->red.hi, (long long)z->numel, z->red.size,
             z->red.order.nbuckets);
    return RP_OK;
}

static rp_status zero_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                       const rp_optim_config *cfg)
{
    (void)cfg;
    return zero_create(rep, opt, params, 1);
}

static rp_status zero2_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                        const rp_optim_config *cfg)
{
    (void)cfg;
    return zero_create(rep, opt, params, 2);
}

/* Around each run of a replica: its thread's tapes ask ZeRO-3 for the values and ZeRO-2 and 3
   where the gradients go (zero_hooks). */
static void zero_phase_begin(rp_replica *rep, uint64_t phase)
{
    (void)phase;
    zero_hooks(rep);
}

static void zero_phase_end(rp_replica *rep)
{
    (void)rep;
    tape_set_thread_use(NULL, NULL);
    tape_set_thread_grad(NULL, NULL);
}

static rp_status zero3_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                        const rp_optim_config *cfg)
{
    (void)cfg;
    return zero_create(rep, opt, params, 3);
}

static zero_ctx *find(const rp_replica *rep, const rp_optimizer *opt)
{
    return (zero_ctx *)strategy_find(rep, opt);
}

/*
 * Gathers the logical state into replica 0's optimizer (it grows to the whole range; its next
 * step shards it again); the others keep their shards. The values are equal on every replica
 * already.
 */
static rp_status zero_fetch(rp_replica *rep, rp_optimizer *opt)
{
    zero_ctx *z = find(rep, opt);
    if (!z) return RP_OK;
    /* ZeRO-3: every replica's values whole until the next step uses them. */
    if (z->stage == 3) RP_CHECK(residency_whole(&z->res));
    int slots = rp_optim_slots(rp_optimizer_config(opt));
    /* Even without state (plain SGD): a checkpoint takes only an optimizer over every value. */
    if (rep->id == 0) RP_CHECK(rp_optimizer_set_range(opt, 0, z->numel));
    if (slots == 0) return RP_OK;
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    float *state = rp_optimizer_state(opt, NULL);
    for (int k = 0; k < slots; k++) {
        float *slot = state + (int64_t)k * (hi - lo);
        RP_CHECK(reducer_gather(&z->red, slot + (z->red.lo - lo), rep->id == 0 ? slot : NULL,
                                "the runtime's optimizer-state gather"));
    }
    return RP_OK;
}

/*
 * ZeRO-3's publish, for the values: a checkpoint read into every replica wrote each its own shard
 * (zero3_replaced), so only the buffers (batch norm's statistics ...) go from replica 0; read into
 * none, replica 0's values go to all, as ZeRO-1's do. Read into some only is refused: the others'
 * shards were not read, and replica 0 does not hold the whole values to send.
 */
static rp_status zero3_publish_values(rp_replica *rep, zero_ctx *z)
{
    if (z->stage != 3) return RP_OK;
    int64_t mine = z->read, readers = 0;
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = rp_comm_all_reduce(rep->comm, &mine, &readers, 1, RP_I64, RP_SUM);
    bool some = readers > 0, all = readers == rp_comm_size(rep->comm);
    int64_t rest = rp_params_numel(z->params) - z->numel;
    if (status == RP_OK && all && rest > 0) {
        kernels_staging stage = {0};
        status = strategy_broadcast_storage(rep->comm, z->value + z->numel, rest, RP_F32, &stage);
        kernels_staging_free(&stage);
    }
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    if (some && !all) {
        z->read = false;
        return RP_ERROR(RP_ERR_INVALID,
                        "ZeRO-3: replica %d %s the checkpoint's values before "
                        "rp_replica_optimizer_publish, but not every replica did: under ZeRO-3 a "
                        "replica reads only its own shard of them (rp_checkpoint_read_params), so "
                        "every replica must read",
                        rep->id, mine ? "read" : "did not read");
    }
    return RP_OK;
}

/*
 * Replica 0's values (ZeRO-3: zero3_publish_values) and step count to every replica; its state
 * too when it holds the whole range (each replica takes its shard). Otherwise each replica keeps
 * the shard it holds (e.g. read from a checkpoint by every replica).
 */
static rp_status zero_publish(rp_replica *rep, rp_optimizer *opt)
{
    zero_ctx *z = find(rep, opt);
    if (!z) return strategy_broadcast_state(rep, opt);
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    int64_t head[2] = {rp_optimizer_steps(opt), lo == 0 && hi == z->numel};
    RP_CHECK(zero3_publish_values(rep, z));
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = RP_OK;
    if (!z->read) status = strategy_broadcast_params(rep, z->params);
    if (status == RP_OK) status = rp_comm_broadcast(rep->comm, head, 2, RP_I64, 0);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    if (z->stage == 3 && !z->read) {
        residency_mark_whole(&z->res);
        RP_CHECK(residency_release_all(&z->res)); /* sharded again, as after a step */
    }
    z->read = false;
    rp_optimizer_set_steps(opt, head[0]);
    int slots = rp_optim_slots(rp_optimizer_config(opt));
    if (!head[1] || slots == 0) return rp_optimizer_set_range(opt, z->red.lo, z->red.hi);
    float *state = rp_optimizer_state(opt, NULL);
    for (int k = 0; k < slots; k++) {
        float *slot = state + (int64_t)k * (hi - lo);
        RP_CHECK(reducer_scatter(&z->red, slot, slot + (z->red.lo - lo)));
    }
    return rp_optimizer_set_range(opt, z->red.lo, z->red.hi);
}

static size_t zero_bytes(const rp_replica *rep, const rp_optimizer *opt, bool resident)
{
    zero_ctx *z = find(rep, opt);
    if (!z) return 0;
    return reducer_bytes(&z->red, resident) +
           (z->stage == 3 ? residency_bytes(&z->res, resident) : 0);
}

static rp_status zero_clip(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    zero_ctx *z = find(rep, opt);
    if (!z) return strategy_clip_full(rep, opt, max_norm, norm);
    /* Over the group that holds the shards (HSDP: every group has the same ones). */
    return strategy_clip_range(rep, z->red.comm, opt, max_norm, norm);
}

/*
 * Who shards with whom in a plan: every replica (the data axis), or with HSDP (cfg.hsdp = G) the
 * G of a group (hsdp_comms), whose shards are then all-reduced across the groups.
 */
typedef struct zero_layout {
    int n, rank;       /* the replicas sharding the state, and this worker's place among them */
    rp_axis axis;      /* where they reduce and gather: RP_AXIS_DATA or RP_PLAN_SHARD */
    bool across;       /* HSDP: the shard's all-reduce across the groups (RP_PLAN_REPLICATE) */
    int64_t S, lo, hi; /* the shard length, and this worker's shard */
} zero_layout;

/*
 * What every stage's plan starts with: a plain optimizer's (strategy_plan_base), which is the
 * whole plan for one replica (*sharded false), and the layout of the shards.
 */
static rp_status zero_plan_start(const rp_config *cfg, int N, int id, const rp_params *params,
                                 const rp_optim_config *oc, rp_plan_worker *w, bool *sharded,
                                 zero_layout *L)
{
    *sharded = false;
    RP_CHECK(strategy_plan_base(N, id, params, oc, w));
    if (N == 1) return RP_OK;
    int G = cfg->hsdp;
    bool hsdp = G > 1 && G < N;
    if (hsdp && N % G != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "hsdp = %d does not divide the %d replicas: HSDP's groups must be equal", G,
                        N);
    int64_t P = rp_params_trainable_numel(params);
    L->n = hsdp ? G : N;
    L->rank = id % L->n;
    L->axis = hsdp ? RP_PLAN_SHARD : RP_AXIS_DATA;
    L->across = hsdp;
    L->S = (P + L->n - 1) / L->n;
    L->lo = (int64_t)L->rank * L->S < P ? (int64_t)L->rank * L->S : P;
    L->hi = L->lo + L->S < P ? L->lo + L->S : P;
    *sharded = true;
    return RP_OK;
}

/*
 * The traffic every stage adds at the end: with HSDP the shard of the reduced gradients
 * all-reduced (mean, f32) across the groups; and, as every member saw only its shard of the
 * reduction, the finiteness exchange, 3 int64 from each member, on the data axis: every replica
 * (grad_reducer.c).
 */
static rp_status zero_plan_finish(const zero_layout *L, rp_plan_worker *w)
{
    if (L->across && L->hi > L->lo)
        RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_REPLICATE, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
                                     "gradient shard across the groups (mean)", 1,
                                     (L->hi - L->lo) * (int64_t)sizeof(float)));
    return rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_ALL_GATHER,
                               "gradient finiteness exchange", 1, 3 * 8);
}

/*
 * The plan: the reducer's shards and buckets (reducer_shard_layout), one reduce-scatter of the
 * gradients (as cfg.grad_dtype) and one all-gather of the values per bucket, and the finiteness
 * exchange (3 int64); the optimizer state of this worker's shard only, and the buffers: the
 * reduced shard, one bucket's segments packed, one segment, the scratch, and with bf16 the
 * rounded segments and the reduced segment. One replica: a plain optimizer.
 */
static rp_status zero_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                           const rp_optim_config *oc, rp_plan_worker *w)
{
    bool sharded;
    zero_layout L;
    RP_CHECK(zero_plan_start(cfg, N, id, params, oc, w, &sharded, &L));
    if (!sharded) return RP_OK;
    int64_t P = rp_params_trainable_numel(params), slots = rp_optim_slots(oc), S, c, n = L.n;
    int nb, T = rp_params_trainable_count(params), Tz = T > 3 ? T : 3;
    reducer_shard_layout(P, L.n, cfg->bucket_bytes, &S, &c, &nb);
    int64_t g = (int64_t)rp_dtype_size(cfg->grad_dtype);
    bool bf16 = cfg->grad_dtype == RP_BF16;
    w->optim = slots * (L.hi - L.lo) * (int64_t)sizeof(float);
    w->strategy = (int64_t)N * Tz * 8;
    if (S > 0) w->strategy += (S + n * c + c) * (int64_t)sizeof(float);
    if (S > 0 && bf16) w->strategy += (n + 1) * c * (int64_t)sizeof(rp_bf16);
    RP_CHECK(rp_plan_add_traffic(w, L.axis, RP_COMM_RUNTIME, RP_FLIGHT_REDUCE_SCATTER,
                                 bf16 ? "gradient shards (mean, bf16)" : "gradient shards (mean)",
                                 nb, S * g));
    RP_CHECK(rp_plan_add_traffic(w, L.axis, RP_COMM_RUNTIME, RP_FLIGHT_ALL_GATHER,
                                 "parameter shards", nb, S * (int64_t)sizeof(float)));
    return zero_plan_finish(&L, w);
}

/*
 * ZeRO-2's plan: the sync strategy's buckets (as cfg.grad_dtype), each reduce-scattered to the
 * owners of its parts, and ZeRO-1's all-gather of the values; the optimizer state of this worker's
 * shard; the buffers: the gather buckets' packing, the scratch, the bucket tables, the gradient
 * buffers and the bf16 copy of the largest bucket (not the stash a second backward with every
 * buffer taken allocates). The gradient block is counted whole (it is allocated whole): what is
 * resident of it is the kept shard and any bucket backward wrote there. ZeRO-3's (stage 3) is the
 * same but for the values: no all-gather after the update, and the gather buffers (zero3_gathers)
 * among the strategy's buffers.
 */
static rp_status zero3_gathers(const rp_config *cfg, const zero_layout *L, const rp_params *params,
                               const rp_optim_config *oc, rp_plan_worker *w);

/* Whether ZeRO-3's gathers are prefetched by messages (param_residency.c: host storage only). */
static bool zero3_prefetches(const rp_config *cfg)
{
    return cfg->prefetch && kernels_active()->host_storage;
}

static rp_status zero23_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                             const rp_optim_config *oc, rp_plan_worker *w, int stage)
{
    bool sharded;
    zero_layout L;
    RP_CHECK(zero_plan_start(cfg, N, id, params, oc, w, &sharded, &L));
    if (!sharded) return RP_OK;
    int64_t P = rp_params_trainable_numel(params), slots = rp_optim_slots(oc), S, c, most = 0;
    int ng, nb = 0, T = rp_params_trainable_count(params), Tz = T > 3 ? T : 3, Tb = T ? T : 1;
    reducer_shard_layout(P, L.n, cfg->bucket_bytes, &S, &c, &ng);
    RP_CHECK(strategy_plan_buckets(params, cfg->bucket_bytes, &nb, &most));
    w->optim = slots * (L.hi - L.lo) * (int64_t)sizeof(float);
    w->strategy = (int64_t)N * Tz * 8 + (int64_t)Tb * (int64_t)sizeof(int) + (int64_t)Tb * 24 +
                  strategy_plan_wire(cfg, most) + (nb ? nb : 1) +
                  (most ? REDUCER_GRAD_BUFFERS : 0) * most * (int64_t)sizeof(float);
    if (S > 0) w->strategy += ((int64_t)L.n * c + c) * (int64_t)sizeof(float);
    /* Each backward bucket reduced to the owners of its parts: a call per bucket, whose result
       here is the bucket's part in this worker's shard (the parts tile the shard). */
    RP_CHECK(rp_plan_add_traffic(w, L.axis, RP_COMM_RUNTIME, RP_FLIGHT_REDUCE_SCATTER,
                                 cfg->grad_dtype == RP_BF16
                                     ? "gradient buckets to the shards (mean, bf16)"
                                     : "gradient buckets to the shards (mean)",
                                 nb, (L.hi - L.lo) * (int64_t)rp_dtype_size(cfg->grad_dtype)));
    if (stage == 3) {
        /* The gather buffers: TAPE_USE_HELD of the largest unit (the largest bucket: one cut),
           one more with prefetch; none when the units stay in place (keep_gathered). */
        int slots = zero3_prefetches(cfg) ? RESIDENCY_SLOTS : TAPE_USE_HELD;
        if (!cfg->keep_gathered) w->strategy += (int64_t)slots * most * (int64_t)sizeof(float);
        RP_CHECK(zero3_gathers(cfg, &L, params, oc, w));
    } else {
        RP_CHECK(rp_plan_add_traffic(w, L.axis, RP_COMM_RUNTIME, RP_FLIGHT_ALL_GATHER,
                                     "parameter shards", ng, S * (int64_t)sizeof(float)));
    }
    return zero_plan_finish(&L, w);
}

static rp_status zero2_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                            const rp_optim_config *oc, rp_plan_worker *w)
{
    return zero23_plan(cfg, N, id, params, oc, w, 2);
}

/*
 * ZeRO-3's gathers (zero23_plan): the gathers
 * of the units when the step uses them (one broadcast per owner of a piece of a unit): every unit
 * in the forward pass, and in backward again all but the TAPE_USE_HELD units the forward used
 * last - for a network that uses its parameters once each, in the order they were declared (the
 * classifiers; a unit used again is gathered again, which this does not count). w->held, the
 * step's peak: the buffers, the shard of the values and the optimizer state's, always; and the
 * most of what comes and goes at once besides the shard of the gradients, which is resident from
 * step to step (each bucket's reduced part is kept in place, and the zeroing fills it) - in
 * forward, two neighbouring units in flight and the gradient buffer's last bucket (the first
 * unit); in backward, at unit k (the gradient buckets are the units: backward reduces them in
 * order 0, 1, ...), units k and k - 1 and bucket k's gradients in their buffer (a unit in flight
 * is whole in its gather buffer, param_residency.c; grad_reducer.c trims the gradient buffers to
 * what is in flight). The rest of the gradient block is never written. With
 * cfg.keep_gathered each unit is gathered once, in forward, and the values are whole from the end
 * of forward to the update: the peak is the buffers, every value, the largest bucket's gradients,
 * the optimizer state's shard and the gradient shard. With cfg.prefetch every gather but forward's
 * first (the last unit's) is made by messages started one unit ahead: each owner of a piece sends
 * it to the n - 1 others, each other member receives it; and the unit in flight is held besides the
 * two (forward: the next unit; backward: the one before).
 */
/* Values of [a, b) inside [lo, hi). */
static int64_t overlap(int64_t a, int64_t b, int64_t lo, int64_t hi)
{
    int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    return y > x ? y - x : 0;
}

static rp_status zero3_gathers(const rp_config *cfg, const zero_layout *L, const rp_params *params,
                               const rp_optim_config *oc, rp_plan_worker *w)
{
    strategy_bucket_order o;
    int64_t *ranges, P = rp_params_trainable_numel(params), S = L->S, lo = L->lo, hi = L->hi;
    RP_CHECK(strategy_bucket_order_cut(&o, params, cfg->bucket_bytes, &ranges));
    int nu = o.nbuckets, held = nu < TAPE_USE_HELD ? nu : TAPE_USE_HELD;
    bool pre = zero3_prefetches(cfg);
    int64_t calls = 0, values = 0, flight = 0, most = 0, f = (int64_t)sizeof(float);
    int64_t sends = 0, sent = 0, recvs = 0, received = 0;
    int64_t first = nu ? ranges[2 * (nu - 1) + 1] - ranges[2 * (nu - 1)] : 0;
    for (int u = 0; u < nu; u++) {
        int64_t a = ranges[2 * u], b = ranges[2 * u + 1];
        int owners = (int)((b - 1) / S - a / S + 1);
        /* Units 0 .. held - 1 hold the last parameters: used last in forward, first in backward.
           Kept units are gathered once. Prefetched: all but forward's first. */
        int times = u < held || cfg->keep_gathered ? 1 : 2;
        int messages = pre ? times - (u == nu - 1) : 0;
        calls += (int64_t)(times - messages) * owners;
        values += (times - messages) * (b - a);
        for (int q = (int)(a / S); messages && q <= (int)((b - 1) / S); q++) {
            int64_t piece = overlap(a, b, (int64_t)q * S, (int64_t)(q + 1) * S);
            if (q == L->rank) {
                sends += (int64_t)messages * (L->n - 1);
                sent += (int64_t)messages * (L->n - 1) * piece;
            } else {
                recvs += messages;
                received += messages * piece;
            }
        }
        /* Forward: unit u and the one before it in the block (u + 1), outside the shard; with
           prefetch the next one (u - 1) in flight; the gradients' shard. */
        int64_t a2 = u + 1 < nu ? ranges[2 * (u + 1)] : a;
        int64_t b3 = pre && u > 0 ? ranges[2 * (u - 1) + 1] : b;
        int64_t fwd = b3 - a2 + first + (hi - lo);
        /* Backward at unit u: u and u - 1 held (and u + 1 in flight), u's gradients, the
           gradients' shard. */
        int64_t b2 = u > 0 ? ranges[2 * (u - 1) + 1] : b;
        int64_t a3 = pre && u + 1 < nu ? ranges[2 * (u + 1)] : a;
        int64_t bwd = (b2 - a3) + (b - a) + (hi - lo);
        if (b - a > most) most = b - a;
        if (fwd > flight) flight = fwd;
        if (bwd > flight) flight = bwd;
    }
    strategy_bucket_order_destroy(&o);
    free(ranges);
    int64_t slots = rp_optim_slots(oc);
    int64_t comes = flight > hi - lo ? flight : hi - lo;
    /* Kept: the values outside the shard, the gradients' shard and the largest bucket's. */
    if (cfg->keep_gathered) comes = P + most;
    w->held = f * ((rp_params_numel(params) - P) + (hi - lo) + slots * (hi - lo) + comes);
    if (sends)
        RP_CHECK(rp_plan_add_traffic(w, L->axis, RP_COMM_RUNTIME, RP_FLIGHT_SEND,
                                     "parameter units prefetched (ZeRO-3)", sends, sent * f));
    if (recvs)
        RP_CHECK(rp_plan_add_traffic(w, L->axis, RP_COMM_RUNTIME, RP_FLIGHT_RECV,
                                     "parameter units prefetched (ZeRO-3)", recvs, received * f));
    return rp_plan_add_traffic(w, L->axis, RP_COMM_RUNTIME, RP_FLIGHT_BROADCAST,
                               "parameter units (ZeRO-3)", calls, values * f);
}

static rp_status zero3_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                            const rp_optim_config *oc, rp_plan_worker *w)
{
    return zero23_plan(cfg, N, id, params, oc, w, 3);
}

const strategy_table strategy_zero = {
    .name = "zero",
    .identical = true,
    .lockstep = true,
    .sharded = true,
    .replica_init = strategy_replica_init,
    .replica_destroy = zero_replica_destroy,
    .grad_ready = zero_on_grad_ready,
    .optimizer_create = zero_optimizer_create,
    .fetch = zero_fetch,
    .publish = zero_publish,
    .claim = strategy_local_claim,
    .next_batch = strategy_lockstep_batch,
    .clip = zero_clip,
    .bytes = zero_bytes,
    .plan = zero_plan,
};

const strategy_table strategy_zero2 = {
    .name = "zero2",
    .identical = true,
    .lockstep = true,
    .sharded = true,
    .replica_init = strategy_replica_init,
    .replica_destroy = zero_replica_destroy,
    .grad_ready = zero_on_grad_ready,
    .optimizer_create = zero2_optimizer_create,
    .phase_begin = zero_phase_begin,
    .phase_end = zero_phase_end,
    .fetch = zero_fetch,
    .publish = zero_publish,
    .claim = strategy_local_claim,
    .next_batch = strategy_lockstep_batch,
    .clip = zero_clip,
    .bytes = zero_bytes,
    .plan = zero2_plan,
};

const strategy_table strategy_zero3 = {
    .name = "zero3",
    .identical = true,
    .lockstep = true,
    .sharded = true,
    .replica_init = strategy_replica_init,
    .replica_destroy = zero_replica_destroy,
    .grad_ready = zero_on_grad_ready,
    .optimizer_create = zero3_optimizer_create,
    .phase_begin = zero_phase_begin,
    .phase_end = zero_phase_end,
    .fetch = zero_fetch,
    .publish = zero_publish,
    .claim = strategy_local_claim,
    .next_batch = strategy_lockstep_batch,
    .clip = zero_clip,
    .bytes = zero_bytes,
    .plan = zero3_plan,
};
