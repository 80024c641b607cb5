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
 * mean of the accumulated gradients.
 *
 * Non-finite gradients: the mean of a NaN is a NaN on every replica, so
 * after the all-reduce nobody can tell whose data made it. Each bucket is
 * therefore scanned before its all-reduce (the first non-finite local
 * element is remembered) and after it (cache-hot, an OR over exponent
 * bits). Only when a reduced bucket is non-finite - identically on every
 * replica - do the replicas exchange what they saw, and the step fails
 * naming the replica whose own gradient first held it and the parameter.
 *
 * The threads backend's all-reduce runs on the calling replica's thread:
 * on shared memory the reduction is work for the same cores that run the
 * backward pass, so starting it from the callback (instead of handing it to
 * another thread) loses nothing, and the bucket's gradients are still in
 * cache.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/strategy.h"

typedef struct bucket {
    int64_t lo, hi; /* range of the gradient block */
    int params;     /* trainable parameters in it */
    int ready;      /* of those, final in this backward pass */
} bucket;

typedef struct rp_sync {
    rp_replica *rep; /* NULL once the replicator was destroyed (the optimizer outlived it) */
    rp_optimizer *opt;
    rp_params *params;
    float *grad;
    int64_t numel;
    int nparams;    /* trainable */
    int *bucket_of; /* [nparams] */
    int nbuckets;
    bucket *buckets;
    int started;     /* buckets [0, started) have started since the last step */
    bool again;      /* a bucket completed a second time: reduce everything again */
    int64_t *hashes; /* [count * nparams] checksum scratch; also [count * 2] for the NaN exchange */
    int64_t
        local_bad; /* first element of the gradient block non-finite before its all-reduce, or -1 */
    float local_value; /* its value */
    bool reduced_bad;  /* a reduced bucket was non-finite (the same on every replica) */
    rp_status error;   /* first failure inside a callback, re-raised by the step */
    char message[1024];
    struct rp_sync *next;
} rp_sync;

typedef struct sync_replica {
    rp_sync *syncs; /* this replica's wrapped optimizers */
} sync_replica;

/* Index of the first non-finite value of x[0, n), or -1: a vectorised OR first, the search only if
 * dirty. */
static int64_t first_nonfinite(const float *restrict x, int64_t n)
{
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static void bucket_start(rp_sync *s, int b)
{
    bucket *k = &s->buckets[b];
    k->ready = 0;
    if (s->error != RP_OK) return;
    float *g = s->grad + k->lo;
    int64_t n = k->hi - k->lo;
    if (s->local_bad < 0) {
        int64_t at = first_nonfinite(g, n);
        if (at >= 0) {
            s->local_bad = k->lo + at;
            s->local_value = g[at];
        }
    }
    rt_internal_begin(s->rep->comm, "the runtime's gradient all-reduce");
    rp_status status = rp_comm_all_reduce(s->rep->comm, g, g, n, RP_F32, RP_MEAN);
    rt_internal_end(s->rep->comm);
    if (status != RP_OK) {
        s->error = status;
        snprintf(s->message, sizeof s->message, "%s", rp_last_error());
        return;
    }
    if (first_nonfinite(g, n) >= 0) s->reduced_bad = true;
}

static void sync_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    sync_replica *sr = rep->strategy;
    for (rp_sync *s = sr->syncs; s; s = s->next) {
        if (param->grad < s->grad || param->grad >= s->grad + s->numel) continue;
        if (param->index < 0 || param->index >= s->nparams) return;
        int b = s->bucket_of[param->index];
        if (++s->buckets[b].ready < s->buckets[b].params) return;
        if (b < s->started) {
            s->again = true;
            s->buckets[b].ready = 0;
            return;
        }
        while (s->started < s->nbuckets &&
               s->buckets[s->started].ready == s->buckets[s->started].params)
            bucket_start(s, s->started++);
        return;
    }
}

/*
 * A reduced gradient is non-finite on every replica: they exchange what each saw
 * before the all-reduce and agree on the first replica (in id order) whose own
 * gradient held it. Runs only on this error path.
 */
static rp_status nonfinite_blame(rp_sync *s)
{
    rp_replica *rep = s->rep;
    int64_t mine[2] = {s->local_bad, 0};
    memcpy(&mine[1], &s->local_value, sizeof s->local_value);
    int64_t *all = s->hashes; /* at least count * 2: nparams >= 1 when a gradient exists */
    rt_housekeeping_begin(rep->comm, "the runtime's non-finite gradient exchange");
    rp_status status = rp_comm_all_gather(rep->comm, mine, all, 2, RP_I64);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    for (int q = 0; q < rep->count; q++) {
        if (all[2 * q] < 0) continue;
        float v;
        memcpy(&v, &all[2 * q + 1], sizeof v);
        int64_t index, numel;
        const char *name = rp_strategy_param_at(s->params, all[2 * q], &index, &numel);
        rep->blame = q;
        return RP_ERROR(RP_ERR_NUMERIC,
                        "replica %d's own gradient of parameter '%s' held %g at element "
                        "%lld (of %lld) before the all-reduce, so the mean is non-finite on every "
                        "replica; no parameter was updated",
                        q, name, (double)v, (long long)index, (long long)numel);
    }
    int64_t bad = first_nonfinite(s->grad, s->numel), index = 0, numel = 0;
    const char *name = rp_strategy_param_at(s->params, bad < 0 ? 0 : bad, &index, &numel);
    return RP_ERROR(
        RP_ERR_NUMERIC,
        "the all-reduced gradient of parameter '%s' is %g at element %lld "
        "(of %lld) although every replica's own gradient was finite: the sum overflowed "
        "float; no parameter was updated",
        name, bad < 0 ? 0.0 : (double)s->grad[bad], (long long)index, (long long)numel);
}

static rp_status orphaned(void)
{
    return RP_ERROR(
        RP_ERR_INVALID,
        "this replica optimizer outlived its replicator: destroy every "
        "optimizer made by rp_replica_optimizer_create() before rp_replicator_destroy()");
}

/* Before the update: every bucket reduced exactly once since the last step. */
static rp_status sync_before(rp_optimizer *opt, void *ctx)
{
    rp_sync *s = ctx;
    if (!s->rep) return orphaned();
    while (s->started < s->nbuckets)
        bucket_start(s, s->started++);
    if (s->again)
        for (int b = 0; b < s->nbuckets; b++)
            bucket_start(s, b);
    for (int b = 0; b < s->nbuckets; b++)
        s->buckets[b].ready = 0;
    s->started = 0;
    s->again = false;
    bool reduced_bad = s->reduced_bad;
    s->reduced_bad = false;
    if (s->error != RP_OK) {
        rp_status status = s->error;
        s->error = RP_OK;
        s->local_bad = -1;
        return rp_error_set(status, __FILE__, __LINE__, "gradient all-reduce: %s", s->message);
    }
    rp_status status = reduced_bad ? nonfinite_blame(s) : RP_OK;
    s->local_bad = -1;
    return status;
}

/* After the update, every checksum_every steps: the replicas' parameters compared. */
static rp_status sync_after(rp_optimizer *opt, void *ctx)
{
    rp_sync *s = ctx;
    if (!s->rep) return orphaned();
    return rp_strategy_checksum(s->rep, s->params, rp_optimizer_steps(opt), s->hashes);
}

static void sync_release(void *ctx)
{
    rp_sync *s = ctx;
    if (s->rep) {
        sync_replica *sr = s->rep->strategy;
        for (rp_sync **p = &sr->syncs; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
    }
    free(s->bucket_of);
    free(s->buckets);
    free(s->hashes);
    free(s);
}

/* Cuts the gradient block into buckets of at least `bytes`, from the last parameter back. */
static rp_status make_buckets(rp_sync *s, size_t bytes)
{
    int T = s->nparams;
    s->bucket_of = malloc((size_t)(T ? T : 1) * sizeof(int));
    s->buckets = calloc((size_t)(T ? T : 1), sizeof(bucket));
    if (!s->bucket_of || !s->buckets)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d buckets", T);
    int b = -1;
    size_t filled = bytes;
    for (int i = T - 1; i >= 0; i--) {
        const rp_tensor *p = rp_params_at(s->params, i);
        int64_t off = rp_params_offset(s->params, i);
        if (filled >= bytes) {
            b++;
            s->buckets[b].hi = off + p->numel;
            filled = 0;
        }
        s->buckets[b].lo = off;
        s->buckets[b].params++;
        s->bucket_of[i] = b;
        filled += (size_t)p->numel * sizeof(float);
    }
    s->nbuckets = b + 1;
    return RP_OK;
}

static rp_status sync_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                       const rp_optim_config *cfg)
{
    if (rep->count == 1) return RP_OK;
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = rp_strategy_broadcast_params(rep, params);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    rp_sync *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the synchronous optimizer");
    s->rep = rep;
    s->opt = opt;
    s->params = params;
    s->grad = rp_params_grad(params);
    s->numel = rp_params_trainable_numel(params);
    s->nparams = rp_params_trainable_count(params);
    s->local_bad = -1;
    int T = s->nparams > 2 ? s->nparams : 2;
    s->hashes = malloc((size_t)rep->count * (size_t)T * sizeof(int64_t));
    if (!s->hashes || make_buckets(s, rep->r->cfg.bucket_bytes) != RP_OK) {
        s->rep = NULL;
        sync_release(s);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the synchronous optimizer's buckets");
    }
    rp_optimizer_hooks h = {.before = sync_before, .after = sync_after, .release = sync_release};
    status = rp_optimizer_add_hooks(opt, &h, s);
    if (status != RP_OK) {
        s->rep = NULL;
        sync_release(s);
        return status;
    }
    sync_replica *sr = rep->strategy;
    s->next = sr->syncs;
    sr->syncs = s;
    rp_debug("sync optimizer: %lld gradients in %d buckets", (long long)s->numel, s->nbuckets);
    return RP_OK;
}

static bool sync_owns(const rp_replica *rep, const rp_optimizer *opt)
{
    const sync_replica *sr = rep->strategy;
    for (const rp_sync *s = sr->syncs; s; s = s->next)
        if (s->opt == opt) return true;
    return false;
}

static rp_status sync_replica_init(rp_replica *rep)
{
    return rp_strategy_replica_alloc(rep, sizeof(sync_replica));
}

static void sync_replica_destroy(rp_replica *rep)
{
    sync_replica *sr = rep->strategy;
    if (!sr) return;
    int alive = 0;
    for (rp_sync *s = sr->syncs; s; s = s->next, alive++)
        s->rep = NULL;
    rp_strategy_orphans(rep, alive);
    free(sr);
    rep->strategy = NULL;
}

static rp_status sync_publish(rp_replica *rep, rp_optimizer *opt)
{
    return rp_strategy_broadcast_state(rep, opt);
}

static rp_status sync_fetch(rp_replica *rep, rp_optimizer *opt)
{
    return RP_OK; /* the optimizer holds its state already */
}

const rp_strategy rp_strategy_sync = {
    .name = "sync",
    .identical = true,
    .lockstep = true,
    .replica_init = sync_replica_init,
    .replica_destroy = sync_replica_destroy,
    .grad_ready = sync_on_grad_ready,
    .optimizer_create = sync_optimizer_create,
    .owns = sync_owns,
    .fetch = sync_fetch,
    .publish = sync_publish,
    .claim = rp_strategy_local_claim,
    .next_batch = rp_strategy_lockstep_batch,
};
