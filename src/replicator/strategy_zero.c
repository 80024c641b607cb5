/*
 * strategy_zero.c - ZeRO-1 (optimizer-state sharding) as a strategy table:
 * synchronous data parallelism in which each replica keeps the optimizer
 * state of one shard of the parameters only.
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
 * again.
 *
 * Checkpoints hold logical tensors: fetch gathers the state of every shard
 * into replica 0's optimizer (which grows back to the whole range until its
 * next step), and a checkpoint read into a sharded optimizer takes its
 * range's part (io.h), so a run saved on N replicas resumes on M.
 *
 * Memory: the blocks, the state and the buffers below (sgrad, pack, one, wire) are the kernel
 * table's storage. Packing and unpacking are mem_copy and mem_fill, the scans and the bf16
 * rounding kernel slots; the collectives run on host views of the buffers (rp_staging: the
 * buffers themselves with a host table).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/strategy.h"

typedef struct zbucket {
    int64_t a, b; /* shard-local positions [a, b) */
} zbucket;

typedef struct rp_zero {
    rp_replica *rep; /* NULL once the replicator was destroyed (the optimizer outlived it) */
    rp_optimizer *opt;
    rp_params *params;
    float *grad, *value; /* the parameter list's blocks (storage) */
    int64_t numel;       /* P: trainable values */
    int64_t shard;       /* S = ceil(P / N) */
    int64_t lo, hi;      /* this replica's shard [lo, hi) of the block */
    int64_t chunk;       /* the largest bucket's length */
    int nparams;         /* trainable */
    int nbuckets;
    zbucket *buckets;
    /* The kernel table its scans run on. */
    const rp_kernels *kernels;
    rp_bucket_order order; /* which parameters touch each bucket, and the order they start in */
    float *sgrad;          /* [S] this replica's shard of the mean gradient */
    float *pack;           /* [N * chunk] one bucket's segments, back to back */
    float *one;            /* [chunk] this replica's segment, zero-padded past P */
    rp_bf16 *wire;         /* cfg.grad_dtype bf16: [N * chunk] pack rounded, then [chunk] the
                              reduced segment; NULL for f32 */
    size_t sgrad_bytes, pack_bytes, one_bytes, wire_bytes; /* what mem_free takes back */
    rp_staging send, recv; /* the host views a collective sends from and receives into */
    int64_t *scratch;      /* [count * max(nparams, 3)]: checksums, the finiteness exchange */
    int64_t local_bad; /* first element of the gradient block non-finite before reduction, or -1 */
    float local_value;
    int64_t reduced_bad; /* first element of the reduced shard non-finite, or -1 */
    rp_status error;     /* first failure inside a callback, re-raised by the step */
    char message[1024];
    struct rp_zero *next;
} rp_zero;

typedef struct zero_replica {
    rp_zero *zeros; /* this replica's wrapped optimizers */
} zero_replica;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Values of [g0, g0 + n) inside the block [0, P). */
static int64_t valid(int64_t g0, int64_t n, int64_t P)
{
    return g0 >= P ? 0 : min64(n, P - g0);
}

static void fail(rp_zero *z, rp_status status)
{
    if (z->error != RP_OK) return;
    z->error = status;
    snprintf(z->message, sizeof z->message, "%s", rp_last_error());
}

/* Bucket b's reduce-scatter: every shard's segment of the local gradients, mean into sgrad. */
static void bucket_start(void *ctx, int b)
{
    rp_zero *z = ctx;
    zbucket *k = &z->buckets[b];
    if (z->error != RP_OK) return;
    const rp_kernels *kt = z->kernels;
    int n = z->rep->count;
    int64_t len = k->b - k->a;
    for (int q = 0; q < n; q++) {
        int64_t g0 = (int64_t)q * z->shard + k->a, have = valid(g0, len, z->numel);
        float *dst = z->pack + (int64_t)q * len;
        if (have > 0) kt->mem_copy(dst, z->grad + g0, (size_t)have * sizeof(float));
        if (have < len) kt->mem_fill(dst + have, 0, (size_t)(len - have) * sizeof(float));
        if (z->local_bad < 0 && have > 0) {
            int64_t at = kt->first_nonfinite(&z->local_value, dst, have);
            if (at >= 0) z->local_bad = g0 + at;
        }
    }
    /* bf16 on the wire: the segments rounded, reduced with f32 accumulation, widened back. */
    const void *send = z->pack;
    void *recv = z->sgrad + k->a;
    size_t width = sizeof(float);
    if (z->wire) {
        kt->cast_f32_bf16(z->wire, z->pack, (int64_t)n * len);
        send = z->wire;
        recv = z->wire + (int64_t)n * z->chunk;
        width = sizeof(rp_bf16);
    }
    size_t recv_bytes = (size_t)len * width;
    const void *sv = rp_strategy_view(&z->send, send, (size_t)n * recv_bytes, true);
    void *rv = sv ? rp_strategy_view(&z->recv, recv, recv_bytes, false) : NULL;
    rp_status status = rv ? RP_OK : rp_last_status();
    rt_internal_begin(z->rep->comm, "the runtime's gradient reduce-scatter");
    if (rv)
        status =
            rp_comm_reduce_scatter(z->rep->comm, sv, rv, len, z->wire ? RP_BF16 : RP_F32, RP_MEAN);
    rt_internal_end(z->rep->comm);
    if (status != RP_OK) {
        fail(z, status);
        return;
    }
    rp_strategy_commit(recv, rv, recv_bytes);
    if (z->wire) kt->cast_bf16_f32(z->sgrad + k->a, recv, len);
    int64_t mine = valid(z->lo + k->a, len, z->hi);
    if (z->reduced_bad < 0 && mine > 0) {
        int64_t at = z->kernels->first_nonfinite(NULL, z->sgrad + k->a, mine);
        if (at >= 0) z->reduced_bad = z->lo + k->a + at;
    }
}

/*
 * All-gathers a sharded array: `mine` holds this replica's shard (hi - lo values, position i of
 * the shard at mine[i]); on return full[0, P) holds every shard (full may be NULL: take part
 * only). Bucket by bucket through pack.
 */
static rp_status gather(rp_zero *z, const float *mine, float *full, const char *what)
{
    const rp_kernels *kt = z->kernels;
    int n = z->rep->count;
    rp_status status = RP_OK;
    rt_internal_begin(z->rep->comm, what);
    for (int b = 0; b < z->nbuckets && status == RP_OK; b++) {
        const zbucket *k = &z->buckets[b];
        int64_t len = k->b - k->a, have = valid(z->lo + k->a, len, z->hi);
        const float *send = mine + k->a;
        if (have < len) {
            if (have > 0) kt->mem_copy(z->one, mine + k->a, (size_t)have * sizeof(float));
            kt->mem_fill(z->one + (have > 0 ? have : 0), 0,
                         (size_t)(len - (have > 0 ? have : 0)) * sizeof(float));
            send = z->one;
        }
        size_t bytes = (size_t)len * sizeof(float);
        const void *sv = rp_strategy_view(&z->send, send, bytes, true);
        void *pv = sv ? rp_strategy_view(&z->recv, z->pack, (size_t)n * bytes, false) : NULL;
        status = pv ? rp_comm_all_gather(z->rep->comm, sv, pv, len, RP_F32) : rp_last_status();
        if (status != RP_OK || !full) continue;
        rp_strategy_commit(z->pack, pv, (size_t)n * bytes);
        for (int q = 0; q < n; q++) {
            int64_t g0 = (int64_t)q * z->shard + k->a, m = valid(g0, len, z->numel);
            if (m > 0)
                kt->mem_copy(full + g0, z->pack + (int64_t)q * len, (size_t)m * sizeof(float));
        }
    }
    rt_internal_end(z->rep->comm);
    return status;
}

/* The reverse: replica 0's full[0, P) is cut into shards, each replica's into mine. */
static rp_status scatter(rp_zero *z, const float *full, float *mine)
{
    const rp_kernels *kt = z->kernels;
    int n = z->rep->count;
    rp_status status = RP_OK;
    rt_internal_begin(z->rep->comm, "the runtime's optimizer-state scatter");
    for (int b = 0; b < z->nbuckets && status == RP_OK; b++) {
        const zbucket *k = &z->buckets[b];
        int64_t len = k->b - k->a;
        if (z->rep->id == 0)
            for (int q = 0; q < n; q++) {
                int64_t g0 = (int64_t)q * z->shard + k->a, m = valid(g0, len, z->numel);
                float *dst = z->pack + (int64_t)q * len;
                if (m > 0) kt->mem_copy(dst, full + g0, (size_t)m * sizeof(float));
                if (m < len)
                    kt->mem_fill(dst + (m > 0 ? m : 0), 0,
                                 (size_t)(len - (m > 0 ? m : 0)) * sizeof(float));
            }
        status = rp_strategy_broadcast_storage(z->rep->comm, z->pack, (int64_t)n * len, RP_F32,
                                               &z->recv);
        int64_t have = valid(z->lo + k->a, len, z->hi);
        if (status == RP_OK && have > 0)
            kt->mem_copy(mine + k->a, z->pack + (int64_t)z->rep->id * len,
                         (size_t)have * sizeof(float));
    }
    rt_internal_end(z->rep->comm);
    return status;
}

static void zero_on_grad_ready(rp_tensor *param, void *ctx)
{
    rp_replica *rep = ctx;
    zero_replica *zr = rep->strategy;
    for (rp_zero *z = zr->zeros; z; z = z->next) {
        if (param->grad < z->grad || param->grad >= z->grad + z->numel) continue;
        rp_bucket_order_ready(&z->order, param->index, bucket_start, z);
        return;
    }
}

/*
 * The replicas agree whether every gradient was finite: each replica saw only its local
 * gradients and its reduced shard, so they exchange what they saw; a failure names the first
 * replica (in id order) whose own gradient held a non-finite value, or the reduced element that
 * overflowed. Nothing has been updated yet.
 */
static rp_status agree_finite(rp_zero *z)
{
    rp_replica *rep = z->rep;
    int64_t mine[3] = {z->local_bad, 0, z->reduced_bad};
    memcpy(&mine[1], &z->local_value, sizeof z->local_value);
    int64_t *all = z->scratch;
    rt_internal_begin(rep->comm, "the runtime's gradient finiteness exchange");
    rp_status status = rp_comm_all_gather(rep->comm, mine, all, 3, RP_I64);
    rt_internal_end(rep->comm);
    z->local_bad = -1;
    z->reduced_bad = -1;
    RP_CHECK(status);
    int64_t index, numel;
    for (int q = 0; q < rep->count; q++) {
        if (all[3 * q] < 0) continue;
        float v;
        memcpy(&v, &all[3 * q + 1], sizeof v);
        const char *name = rp_strategy_param_at(z->params, all[3 * q], &index, &numel);
        rep->blame = q;
        return RP_ERROR(RP_ERR_NUMERIC,
                        "replica %d's own gradient of parameter '%s' held %g at element "
                        "%lld (of %lld) before the reduce-scatter, so the mean is non-finite; "
                        "no parameter was updated",
                        q, name, (double)v, (long long)index, (long long)numel);
    }
    for (int q = 0; q < rep->count; q++) {
        if (all[3 * q + 2] < 0) continue;
        const char *name = rp_strategy_param_at(z->params, all[3 * q + 2], &index, &numel);
        return RP_ERROR(RP_ERR_NUMERIC,
                        "the reduced gradient of parameter '%s' (replica %d's shard) is "
                        "non-finite at element %lld (of %lld) although every replica's own "
                        "gradient was finite: the sum overflowed float; no parameter was updated",
                        name, q, (long long)index, (long long)numel);
    }
    return RP_OK;
}

static rp_status orphaned(void)
{
    return RP_ERROR(
        RP_ERR_INVALID,
        "this replica optimizer outlived its replicator: destroy every "
        "optimizer made by rp_replica_optimizer_create() before rp_replicator_destroy()");
}

/* Before the update: every bucket reduce-scattered exactly once since the last step. */
static rp_status zero_before(rp_optimizer *opt, void *ctx)
{
    rp_zero *z = ctx;
    if (!z->rep) return orphaned();
    /* A fetch grew replica 0's optimizer to the whole range for a checkpoint: shard it again. */
    rp_status status = rp_optimizer_set_range(opt, z->lo, z->hi);
    if (status != RP_OK) fail(z, status);
    rp_bucket_order_flush(&z->order, bucket_start, z);
    if (z->error != RP_OK) {
        status = z->error;
        z->error = RP_OK;
        z->local_bad = z->reduced_bad = -1;
        return rp_error_set(status, __FILE__, __LINE__, "ZeRO-1 step: %s", z->message);
    }
    RP_CHECK(agree_finite(z));
    if (z->hi > z->lo)
        z->kernels->mem_copy(z->grad + z->lo, z->sgrad, (size_t)(z->hi - z->lo) * sizeof(float));
    return RP_OK;
}

/* The update: the rule on this replica's shard, then every shard's values to every replica. */
static rp_status zero_update(rp_optimizer *opt, float lr, void *ctx)
{
    rp_zero *z = ctx;
    if (!z->rep) return orphaned();
    RP_CHECK(rp_optimizer_apply_rule(opt, lr));
    return gather(z, z->value + z->lo, z->value, "the runtime's parameter all-gather");
}

static rp_status zero_after(rp_optimizer *opt, void *ctx)
{
    rp_zero *z = ctx;
    if (!z->rep) return orphaned();
    return rp_strategy_checksum(z->rep, z->rep->comm, z->params, rp_optimizer_steps(opt),
                                z->scratch);
}

static void zero_release(void *ctx)
{
    rp_zero *z = ctx;
    if (z->rep) {
        zero_replica *zr = z->rep->strategy;
        for (rp_zero **p = &zr->zeros; *p; p = &(*p)->next)
            if (*p == z) {
                *p = z->next;
                break;
            }
    }
    rp_bucket_order_destroy(&z->order);
    free(z->buckets);
    const rp_kernels *kt = z->kernels;
    if (z->sgrad) kt->mem_free(z->sgrad, z->sgrad_bytes);
    if (z->pack) kt->mem_free(z->pack, z->pack_bytes);
    if (z->one) kt->mem_free(z->one, z->one_bytes);
    if (z->wire) kt->mem_free(z->wire, z->wire_bytes);
    rp_staging_free(&z->send);
    rp_staging_free(&z->recv);
    free(z->scratch);
    free(z);
}

/* Bucket of shard-local position x: cut from the end of the shard, `chunk` positions each. */
static int bucket_of(const rp_zero *z, int64_t x)
{
    return (int)((z->shard - 1 - x) / z->chunk);
}

/*
 * The buckets that parameter i has an element in (through any shard), written to out if not
 * NULL; mark[] (one per bucket, set to -1 before the first parameter) removes repeats.
 */
static int param_buckets(void *ctx, int i, int *mark, int *out)
{
    rp_zero *z = ctx;
    const rp_tensor *p = rp_params_at(z->params, i);
    int64_t off = rp_params_offset(z->params, i), end = off + p->numel, S = z->shard;
    int count = 0;
    if (p->numel <= 0) return 0;
    for (int64_t q = off / S; q * S < end; q++) {
        int64_t a = (off > q * S ? off : q * S) - q * S, b = min64(end, (q + 1) * S) - q * S;
        for (int k = bucket_of(z, b - 1); k <= bucket_of(z, a); k++) {
            if (mark[k] == i) continue;
            mark[k] = i;
            if (out) out[count] = k;
            count++;
        }
    }
    return count;
}

/* The buckets, and which parameters touch each (two passes: count, then fill). */
static rp_status make_buckets(rp_zero *z, size_t bytes)
{
    int n = z->rep->count, T = z->nparams;
    int64_t S = z->shard, c = (int64_t)(bytes / (sizeof(float) * (size_t)n));
    c = c < 1 ? 1 : c > S ? S : c;
    z->chunk = c;
    z->nbuckets = S > 0 ? (int)((S + c - 1) / c) : 0;
    int nb = z->nbuckets;
    z->buckets = calloc((size_t)(nb ? nb : 1), sizeof(zbucket));
    if (!z->buckets) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO-1's %d buckets", nb);
    for (int k = 0; k < nb; k++) {
        z->buckets[k].b = S - (int64_t)k * c;
        z->buckets[k].a = S - (int64_t)(k + 1) * c > 0 ? S - (int64_t)(k + 1) * c : 0;
    }
    return rp_bucket_order_create(&z->order, T, nb, param_buckets, z);
}

static rp_status zero_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                       const rp_optim_config *cfg)
{
    if (rep->count == 1) return RP_OK;
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = rp_strategy_broadcast_params(rep, params);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    rp_zero *z = calloc(1, sizeof *z);
    if (!z) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the ZeRO-1 optimizer");
    int n = rep->count;
    z->rep = rep;
    z->opt = opt;
    z->params = params;
    z->grad = rp_params_grad(params);
    z->value = rp_params_data(params);
    z->kernels = rp_kernels_active();
    z->numel = rp_params_trainable_numel(params);
    z->nparams = rp_params_trainable_count(params);
    z->shard = (z->numel + n - 1) / n;
    z->lo = min64((int64_t)rep->id * z->shard, z->numel);
    z->hi = min64(z->lo + z->shard, z->numel);
    z->local_bad = z->reduced_bad = -1;
    int T = z->nparams > 3 ? z->nparams : 3;
    z->scratch = malloc((size_t)n * (size_t)T * sizeof(int64_t));
    status = z->scratch ? make_buckets(z, rep->r->cfg.bucket_bytes)
                        : RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO-1's checksums");
    if (status == RP_OK && z->shard > 0) {
        const rp_kernels *kt = z->kernels;
        bool bf16 = rep->r->cfg.grad_dtype == RP_BF16;
        z->sgrad_bytes = (size_t)z->shard * sizeof(float);
        z->pack_bytes = (size_t)n * (size_t)z->chunk * sizeof(float);
        z->one_bytes = (size_t)z->chunk * sizeof(float);
        z->wire_bytes = bf16 ? ((size_t)n + 1) * (size_t)z->chunk * sizeof(rp_bf16) : 0;
        z->sgrad = kt->mem_alloc(z->sgrad_bytes);
        z->pack = kt->mem_alloc(z->pack_bytes);
        z->one = kt->mem_alloc(z->one_bytes);
        if (bf16) z->wire = kt->mem_alloc(z->wire_bytes);
        if (!z->sgrad || !z->pack || !z->one || (bf16 && !z->wire))
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO-1's buffers (%zu bytes)",
                              z->sgrad_bytes + z->pack_bytes + z->one_bytes + z->wire_bytes);
    }
    /* The optimizer keeps the state of this replica's shard only. */
    if (status == RP_OK) status = rp_optimizer_set_range(opt, z->lo, z->hi);
    rp_optimizer_hooks h = {
        .before = zero_before, .after = zero_after, .update = zero_update, .release = zero_release};
    if (status == RP_OK) status = rp_optimizer_add_hooks(opt, &h, z);
    if (status != RP_OK) {
        z->rep = NULL;
        zero_release(z);
        return status;
    }
    zero_replica *zr = rep->strategy;
    z->next = zr->zeros;
    zr->zeros = z;
    rp_debug("ZeRO-1 optimizer: shard [%lld, %lld) of %lld values, %d buckets of %lld",
             (long long)z->lo, (long long)z->hi, (long long)z->numel, z->nbuckets,
             (long long)z->chunk);
    return RP_OK;
}

static rp_zero *find(const rp_replica *rep, const rp_optimizer *opt)
{
    const zero_replica *zr = rep->strategy;
    for (rp_zero *z = zr->zeros; z; z = z->next)
        if (z->opt == opt) return z;
    return NULL;
}

static bool zero_owns(const rp_replica *rep, const rp_optimizer *opt)
{
    return find(rep, opt) != NULL;
}

static rp_status zero_replica_init(rp_replica *rep)
{
    return rp_strategy_replica_alloc(rep, sizeof(zero_replica));
}

static void zero_replica_destroy(rp_replica *rep)
{
    zero_replica *zr = rep->strategy;
    if (!zr) return;
    int alive = 0;
    for (rp_zero *z = zr->zeros; z; z = z->next, alive++)
        z->rep = NULL;
    rp_strategy_orphans(rep, alive);
    free(zr);
    rep->strategy = NULL;
}

/*
 * Gathers the logical state into replica 0's optimizer (it grows to the whole range; its next
 * step shards it again); the others keep their shards. The values are equal on every replica
 * already.
 */
static rp_status zero_fetch(rp_replica *rep, rp_optimizer *opt)
{
    rp_zero *z = find(rep, opt);
    if (!z) return RP_OK;
    int slots = rp_optim_slots(rp_optimizer_config(opt));
    /* Even without state (plain SGD): a checkpoint takes only an optimizer over every value. */
    if (rep->id == 0) RP_CHECK(rp_optimizer_set_range(opt, 0, z->numel));
    if (slots == 0) return RP_OK;
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    float *state = rp_optimizer_state(opt, NULL);
    for (int k = 0; k < slots; k++) {
        float *slot = state + (int64_t)k * (hi - lo);
        RP_CHECK(gather(z, slot + (z->lo - lo), rep->id == 0 ? slot : NULL,
                        "the runtime's optimizer-state gather"));
    }
    return RP_OK;
}

/*
 * Replica 0's values and step count to every replica; its state too when it holds the whole
 * range (each replica takes its shard). Otherwise each replica keeps the shard it holds (e.g.
 * read from a checkpoint by every replica).
 */
static rp_status zero_publish(rp_replica *rep, rp_optimizer *opt)
{
    rp_zero *z = find(rep, opt);
    if (!z) return rp_strategy_broadcast_state(rep, opt);
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    int64_t head[2] = {rp_optimizer_steps(opt), lo == 0 && hi == z->numel};
    rt_internal_begin(rep->comm, "the runtime's parameter broadcast");
    rp_status status = rp_strategy_broadcast_params(rep, z->params);
    if (status == RP_OK) status = rp_comm_broadcast(rep->comm, head, 2, RP_I64, 0);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    rp_optimizer_set_steps(opt, head[0]);
    int slots = rp_optim_slots(rp_optimizer_config(opt));
    if (!head[1] || slots == 0) return rp_optimizer_set_range(opt, z->lo, z->hi);
    float *state = rp_optimizer_state(opt, NULL);
    for (int k = 0; k < slots; k++) {
        float *slot = state + (int64_t)k * (hi - lo);
        RP_CHECK(scatter(z, slot, slot + (z->lo - lo)));
    }
    return rp_optimizer_set_range(opt, z->lo, z->hi);
}

static rp_status zero_clip(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    if (!find(rep, opt)) return rp_strategy_clip_full(rep, opt, max_norm, norm);
    return rp_strategy_clip_range(rep, opt, max_norm, norm);
}

const rp_strategy rp_strategy_zero = {
    .name = "zero",
    .identical = true,
    .lockstep = true,
    .sharded = true,
    .replica_init = zero_replica_init,
    .replica_destroy = zero_replica_destroy,
    .grad_ready = zero_on_grad_ready,
    .optimizer_create = zero_optimizer_create,
    .owns = zero_owns,
    .fetch = zero_fetch,
    .publish = zero_publish,
    .claim = rp_strategy_local_claim,
    .next_batch = rp_strategy_lockstep_batch,
    .clip = zero_clip,
};
