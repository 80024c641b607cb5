/*
 * sync.c - synchronous data parallelism: the wrapped optimizer (bucketed
 * gradient all-reduce started from backward, identical updates, periodic
 * parameter checksums) and cross-replica batch norm.
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
 * The threads backend's all-reduce runs on the calling replica's thread:
 * on shared memory the reduction is work for the same cores that run the
 * backward pass, so starting it from the callback (instead of handing it to
 * another thread) loses nothing, and the bucket's gradients are still in
 * cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator_internal.h"

typedef struct bucket {
    int64_t lo, hi; /* range of the gradient block */
    int params;     /* trainable parameters in it */
    int ready;      /* of those, final in this backward pass */
} bucket;

typedef struct rp_sync {
    rp_replica *rep;
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
    int64_t *hashes; /* [count * nparams] checksum scratch */
    rp_status error; /* first failure inside a callback, re-raised by the step */
    char message[1024];
    struct rp_sync *next;
} rp_sync;

static void bucket_start(rp_sync *s, int b)
{
    bucket *k = &s->buckets[b];
    k->ready = 0;
    if (s->error != RP_OK) return;
    rp_status status = rp_comm_all_reduce(s->rep->comm, s->grad + k->lo, s->grad + k->lo, k->hi - k->lo,
                                          RP_F32, RP_MEAN);
    if (status != RP_OK) {
        s->error = status;
        snprintf(s->message, sizeof s->message, "%s", rp_last_error());
    }
}

void rp_sync_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    for (rp_sync *s = rep->syncs; s; s = s->next) {
        if (param->grad < s->grad || param->grad >= s->grad + s->numel) continue;
        if (param->index < 0 || param->index >= s->nparams) return;
        int b = s->bucket_of[param->index];
        if (++s->buckets[b].ready < s->buckets[b].params) return;
        if (b < s->started) {
            s->again = true;
            s->buckets[b].ready = 0;
            return;
        }
        while (s->started < s->nbuckets && s->buckets[s->started].ready == s->buckets[s->started].params)
            bucket_start(s, s->started++);
        return;
    }
}

/* Before the update: every bucket reduced exactly once since the last step. */
static rp_status sync_before(rp_optimizer *opt, void *ctx)
{
    rp_sync *s = ctx;
    while (s->started < s->nbuckets) bucket_start(s, s->started++);
    if (s->again)
        for (int b = 0; b < s->nbuckets; b++) bucket_start(s, b);
    for (int b = 0; b < s->nbuckets; b++) s->buckets[b].ready = 0;
    s->started = 0;
    s->again = false;
    if (s->error != RP_OK) {
        rp_status status = s->error;
        s->error = RP_OK;
        return rp_error_set(status, __FILE__, __LINE__, "gradient all-reduce: %s", s->message);
    }
    return RP_OK;
}

/* A 64-bit hash of n floats' bits (four independent lanes, so it runs at memory speed). */
static uint64_t hash_floats(const float *x, int64_t n)
{
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0x2545f4914f6cdd1dull};
    const uint64_t p = 0x100000001b3ull;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, x + i + 2 * l, sizeof w);
            h[l] = (h[l] ^ w) * p;
        }
    for (; i < n; i++) {
        uint32_t w;
        memcpy(&w, x + i, sizeof w);
        h[0] = (h[0] ^ w) * p;
    }
    return h[0] ^ (h[1] << 1 | h[1] >> 63) ^ (h[2] << 2 | h[2] >> 62) ^ (h[3] << 3 | h[3] >> 61);
}

/*
 * After the update, every checksum_every steps: one hash per trainable
 * parameter, gathered from every replica and compared with replica 0's.
 */
static rp_status sync_after(rp_optimizer *opt, void *ctx)
{
    rp_sync *s = ctx;
    int every = s->rep->r->cfg.checksum_every;
    int64_t steps = rp_optimizer_steps(opt);
    if (every <= 0 || steps % every != 0) return RP_OK;
    int n = s->rep->count, T = s->nparams;
    int64_t *mine = s->hashes + (size_t)s->rep->id * T;
    for (int i = 0; i < T; i++) {
        const rp_tensor *p = rp_params_at(s->params, i);
        mine[i] = (int64_t)hash_floats(p->data, p->numel);
    }
    RP_CHECK(rp_comm_all_gather(s->rep->comm, mine, s->hashes, T, RP_I64));
    for (int i = 0; i < T; i++)
        for (int q = 1; q < n; q++)
            if (s->hashes[(size_t)q * T + i] != s->hashes[i])
                return RP_ERROR(RP_ERR_MISMATCH,
                                "the replicas diverged: after step %lld parameter '%s' on replica %d "
                                "differs from replica 0 (checksum %016llx vs %016llx); synchronous "
                                "training keeps every replica bitwise identical, so something changed "
                                "parameters outside the optimizer or ran differently on one replica",
                                (long long)steps, rp_params_at(s->params, i)->name, q,
                                (unsigned long long)s->hashes[(size_t)q * T + i],
                                (unsigned long long)s->hashes[i]);
    return RP_OK;
}

static void sync_release(void *ctx)
{
    rp_sync *s = ctx;
    for (rp_sync **p = &s->rep->syncs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
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
    if (!s->bucket_of || !s->buckets) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d buckets", T);
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

rp_status rp_replica_broadcast_params(rp_replica *rep, rp_params *params)
{
    if (!rep || !params) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    return rp_comm_broadcast(rep->comm, rp_params_data(params), rp_params_numel(params), RP_F32, 0);
}

rp_status rp_replica_optimizer_create(rp_replica *rep, rp_optimizer **opt, rp_params *params,
                                      const rp_optim_config *cfg)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    *opt = NULL;
    rp_status status = rp_optimizer_create(opt, params, cfg);
    if (status != RP_OK) return status;
    if (rep->r->cfg.regime == RP_REGIME_ASYNC) {
        RP_TRY(rp_async_optimizer_create(rep, *opt, params, cfg));
        return RP_OK;
    }
    if (rep->count == 1) return RP_OK;
    RP_TRY(rp_replica_broadcast_params(rep, params));
    rp_sync *s = calloc(1, sizeof *s);
    if (!s) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the synchronous optimizer");
        goto cleanup;
    }
    s->rep = rep;
    s->opt = *opt;
    s->params = params;
    s->grad = rp_params_grad(params);
    s->numel = rp_params_trainable_numel(params);
    s->nparams = rp_params_trainable_count(params);
    s->hashes = malloc((size_t)rep->count * (size_t)(s->nparams ? s->nparams : 1) * sizeof(int64_t));
    s->next = rep->syncs;
    rep->syncs = s;
    rp_optimizer_set_hooks(*opt, sync_before, sync_after, sync_release, s);
    if (!s->hashes) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the checksum buffer");
        goto cleanup;
    }
    RP_TRY(make_buckets(s, rep->r->cfg.bucket_bytes));
    rp_debug("sync optimizer: %lld gradients in %d buckets", (long long)s->numel, s->nbuckets);
    return RP_OK;
cleanup:
    rp_optimizer_destroy(*opt);
    *opt = NULL;
    return status;
}

rp_status rp_cross_replica_bn(double *sums, int count, double *n, void *ctx)
{
    rp_replica *rep = ctx;
    if (!rep) return RP_ERROR(RP_ERR_INVALID, "cross-replica batch norm needs the rp_replica as its ctx");
    if (rep->count == 1) return RP_OK;
    if (count + 1 > rep->bn_cap) {
        /* Grows to the widest layer on the first step, then never again. */
        double *grown = realloc(rep->bn_scratch, (size_t)(count + 1) * sizeof(double));
        if (!grown) return RP_ERROR(RP_ERR_NOMEM, "cross-replica batch norm: %d sums", count);
        rep->bn_scratch = grown;
        rep->bn_cap = count + 1;
    }
    memcpy(rep->bn_scratch, sums, (size_t)count * sizeof(double));
    rep->bn_scratch[count] = *n;
    RP_CHECK(rp_comm_all_reduce(rep->comm, rep->bn_scratch, rep->bn_scratch, count + 1, RP_F64, RP_SUM));
    memcpy(sums, rep->bn_scratch, (size_t)count * sizeof(double));
    *n = rep->bn_scratch[count];
    return RP_OK;
}
