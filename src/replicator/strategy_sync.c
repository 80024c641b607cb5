/*
 * strategy_sync.c - synchronous data parallelism as a strategy table: the
 * wrapped optimizer (bucketed gradient all-reduce started from backward,
 * identical updates, periodic parameter checksums).
 *
 * Buckets are contiguous ranges of the parameter list's gradient block.
 * Backward produces gradients roughly in reverse declaration order, so the
 * buckets are cut from the end of the block: bucket 0 holds the last
 * parameters, and becomes ready first. The tape calls back once per
 * parameter whose gradient is final; when a bucket's last parameter is
 * ready, its mean all-reduce runs right there, in place. Buckets start in
 * bucket order only: a ready bucket waits for the ones before it. So every
 * replica reduces the same ranges in the same order even when replicas use
 * different parameters in a step (an unused parameter's gradient is zero
 * and counts as such in the mean); rp_optimizer_step() starts the buckets
 * that backward did not complete, in order. A second backward pass before
 * the step (gradient accumulation) completes buckets already reduced; the
 * step then reduces every bucket once more, which by linearity gives the
 * mean of the accumulated gradients. The buckets, their order and the
 * all-reduce with its non-finite check are strategy.c's (reducer),
 * shared with the sync groups.
 *
 * The threads backend's all-reduce runs on the calling replica's thread:
 * on shared memory the reduction is work for the same cores that run the
 * backward pass, so starting it from the callback (instead of handing it to
 * another thread) loses nothing, and the bucket's gradients are still in
 * cache.
 */
#include <stdlib.h>

#include "replicator/strategy.h"

typedef struct sync_ctx {
    strategy_link link; /* first: the replica's list (strategy.h) */
    rp_params *params;
    reducer red;
    int64_t *hashes; /* [count * nparams] checksum scratch */
} sync_ctx;

static void sync_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr->opts; l; l = l->next)
        if (reducer_ready(&((sync_ctx *)l)->red, param)) return;
}

/* Before the update: every bucket reduced exactly once since the last step. */
static rp_status sync_before(rp_optimizer *opt, void *ctx)
{
    sync_ctx *s = ctx;
    RP_CHECK(strategy_alive(&s->link));
    return reducer_finish(&s->red);
}

/* After the update, every checksum_every steps: the replicas' parameters compared. */
static rp_status sync_after(rp_optimizer *opt, void *ctx)
{
    sync_ctx *s = ctx;
    RP_CHECK(strategy_alive(&s->link));
    rp_replica *rep = s->link.rep;
    return strategy_checksum(rep, rep->comm, s->params, rp_optimizer_steps(opt), s->hashes);
}

static void sync_release(void *ctx)
{
    sync_ctx *s = ctx;
    strategy_detach(&s->link);
    reducer_free(&s->red);
    free(s->hashes);
    free(s);
}

static rp_status sync_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                       const rp_optim_config *cfg)
{
    if (rep->count == 1) return RP_OK;
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = strategy_broadcast_params(rep, params);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    sync_ctx *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the synchronous optimizer");
    s->params = params;
    int T = rp_params_trainable_count(params);
    s->hashes = malloc((size_t)rep->count * (size_t)(T > 0 ? T : 1) * sizeof(int64_t));
    status = s->hashes ? reducer_init(&s->red, rep, rep->comm, params, RP_GRAD_ALL_REDUCE)
                       : RP_ERROR(RP_ERR_NOMEM, "cannot allocate the synchronous optimizer");
    rp_optimizer_hooks h = {.before = sync_before, .after = sync_after, .release = sync_release};
    if (status == RP_OK) status = rp_optimizer_add_hooks(opt, &h, s);
    if (status != RP_OK) {
        sync_release(s);
        return status;
    }
    strategy_attach(rep, &s->link, opt, -1);
    rp_debug("sync optimizer: %lld gradients in %d buckets", (long long)s->red.numel,
             s->red.order.nbuckets);
    return RP_OK;
}

static rp_status sync_publish(rp_replica *rep, rp_optimizer *opt)
{
    return strategy_broadcast_state(rep, opt);
}

static rp_status sync_fetch(rp_replica *rep, rp_optimizer *opt)
{
    return RP_OK; /* the optimizer holds its state already */
}

/*
 * The plan: one mean all-reduce per bucket of strategy_bucket_order_cut (gradients as
 * cfg.grad_dtype on the wire); the buffers are the checksum scratch, each parameter's bucket, the
 * buckets and the bf16 copy of the largest. One replica: the optimizer is not wrapped (no
 * collective, no buffer).
 */
static rp_status sync_plan(const rp_config *cfg, int N, int id, const rp_params *params,
                           const rp_optim_config *oc, rp_plan_worker *w)
{
    RP_CHECK(strategy_plan_base(N, id, params, oc, w));
    if (N == 1) return RP_OK;
    int nb = 0;
    int64_t most = 0, P = rp_params_trainable_numel(params);
    RP_CHECK(strategy_plan_buckets(params, cfg->bucket_bytes, &nb, &most));
    int T = rp_params_trainable_count(params), Tc = T > 2 ? T : 2, Tb = T ? T : 1;
    bool bf16 = cfg->grad_dtype == RP_BF16;
    w->strategy = (int64_t)N * Tc * 8 + (int64_t)Tb * (int64_t)sizeof(int) + (int64_t)Tb * 24 +
                  strategy_plan_wire(cfg, most);
    return rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
                               bf16 ? "gradient buckets (mean, bf16)" : "gradient buckets (mean)",
                               nb, P * (int64_t)rp_dtype_size(cfg->grad_dtype));
}

const strategy_table strategy_sync = {
    .name = "sync",
    .identical = true,
    .lockstep = true,
    .replica_init = strategy_replica_init,
    .replica_destroy = strategy_replica_destroy,
    .grad_ready = sync_on_grad_ready,
    .optimizer_create = sync_optimizer_create,
    .fetch = sync_fetch,
    .publish = sync_publish,
    .claim = strategy_local_claim,
    .next_batch = strategy_lockstep_batch,
    .plan = sync_plan,
};
