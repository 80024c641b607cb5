/*
 * grad_reducer.c - the mean reduction of a parameter list's gradients, in
 * buckets started from backward, by all-reduce (the sync strategy, a sync
 * group), by reduce-scatter into each member's shard (ZeRO-1, segments of
 * every shard packed) or by reduce-scatter of each backward bucket to the
 * owners of its parts, keeping this member's shard part and releasing the rest
 * (ZeRO-2 and 3), with one non-finite check for all (strategy.h: reducer).
 *
 * The collectives differ in their buckets, their packing and what a
 * member sees after the reduction; the bucket order, the scans before and
 * after, the bf16 wire, the error of a callback and the blame of a
 * non-finite gradient are one code path.
 *
 * ZeRO-2's gradient buffers: a bucket's gradients are written into one of
 * REDUCER_GRAD_BUFFERS buffers, each as long as the largest bucket, while
 * backward fills it (the tape's gradient hook points its parameters there
 * before the first rule writes one), reduced there (rp_comm_reduce_scatter_v:
 * each member receives the mean of its shard's part of the bucket, in place),
 * and that part kept; then its parameters point back at the block, whose pages outside the
 * shard are never written. The buffers' pages stay resident from step to
 * step: releasing each bucket's pages of the block instead cost a page fault
 * a page when backward wrote them again (ResNet-50 on 4 replicas, 280 MB of
 * faults a step; docs/distributed.md). A bucket that starts while every
 * buffer is taken (backward writes a later bucket before an earlier one is
 * reduced: buckets reduce in order) is written in the block as before and
 * its pages given back after its reduction. With release_kept (ZeRO-3, which
 * spends time for memory) what is resident of the buffers is what is in
 * flight, plus one free buffer's last bucket: a buffer given a shorter
 * bucket gives the pages past it back, and one freed while another is in use
 * gives back all of its pages (two are in use where a block's shortcut
 * branch writes its bucket while the main branch's waits for it).
 *
 * Memory: the blocks and the buffers below (sgrad, pack, one, wire, gbuf) are the
 * kernel table's storage. Packing and unpacking are mem_copy and mem_fill,
 * the scans and the bf16 rounding kernel slots; the collectives run on host
 * views of the buffers (kernels_staging: the buffers themselves with a host
 * table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#include "replicator/strategy.h"

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Values of [g0, g0 + n) inside the block [0, P). */
static int64_t valid(int64_t g0, int64_t n, int64_t P)
{
    return g0 >= P ? 0 : min64(n, P - g0);
}

void reducer_fail(reducer *g, rp_status status)
{
    if (g->error != RP_OK) return;
    g->error = status;
    snprintf(g->message, sizeof g->message, "%s", rp_last_error());
}

/* Where bucket b's gradients are: its gradient buffer, or its place in the block. */
static float *bucket_grads(const reducer *g, int b)
{
    int s = g->gwhere ? g->gwhere[b] : REDUCER_IN_BLOCK;
    return s >= 0 ? g->gbuf[s] : g->grad + g->ranges[2 * b];
}

/* Buffer s's pages past its first n values given back (release_kept): it holds only those. */
static void trim(reducer *g, int s, int64_t n)
{
    if (g->release_kept && g->gbuf_used[s] > n)
        g->k->mem_discard(g->gbuf[s] + n, (size_t)(g->gbuf_used[s] - n) * sizeof(float));
    if (g->release_kept || g->gbuf_used[s] < n) g->gbuf_used[s] = n;
}

/* Bucket b's parameters back on the block, its buffer free (the pages stay, for the next, but
   with release_kept only in the last buffer in use). */
static void unbuffer(reducer *g, int b)
{
    int64_t lo = g->ranges[2 * b];
    int s = g->gwhere[b], busy = 0;
    strategy_point(g->params, g->bfirst[b + 1], g->bfirst[b], lo, g->grad + lo, true);
    g->gbuf_bucket[s] = -1;
    for (int q = 0; q < g->ngbuf; q++)
        busy += g->gbuf_bucket[q] >= 0;
    if (busy) trim(g, s, 0);
}

/*
 * A kept part of bucket b set aside in sgrad (allocated at the first need) and zeros in its place,
 * for backward to write the bucket in the block (gradient accumulation with every buffer taken).
 */
static void stash(reducer *g, int b)
{
    int64_t lo = g->ranges[2 * b], hi = g->ranges[2 * b + 1];
    int64_t from = lo > g->lo ? lo : g->lo, to = min64(hi, g->hi);
    if (from >= to) return;
    if (!g->sgrad) g->sgrad = g->k->mem_alloc(g->sgrad_bytes);
    if (!g->sgrad) {
        reducer_fail(g, RP_ERROR(RP_ERR_NOMEM,
                                 "cannot allocate ZeRO-2's kept gradient shard (%zu bytes) for a "
                                 "second backward before the step",
                                 g->sgrad_bytes));
        return;
    }
    size_t bytes = (size_t)(to - from) * sizeof(float);
    g->k->mem_copy(g->sgrad + (from - g->lo), g->grad + from, bytes);
    g->k->mem_fill(g->grad + from, 0, bytes);
    g->kept[b] = REDUCER_KEPT_ASIDE;
}

/* Bucket b, about to be written: into a free gradient buffer (zeros), or the block's pages. */
static void take(reducer *g, int b)
{
    int s = 0;
    while (s < g->ngbuf && g->gbuf_bucket[s] >= 0)
        s++;
    if (s == g->ngbuf) {
        if (g->kept[b]) stash(g, b);
        g->gwhere[b] = REDUCER_IN_BLOCK; /* every buffer taken: the block's pages, as before */
        g->spilled++;
        return;
    }
    int64_t lo = g->ranges[2 * b], n = g->ranges[2 * b + 1] - lo;
    trim(g, s, n);
    g->k->mem_fill(g->gbuf[s], 0, (size_t)n * sizeof(float));
    strategy_point(g->params, g->bfirst[b + 1], g->bfirst[b], lo, g->gbuf[s], true);
    g->gbuf_bucket[s] = b;
    g->gwhere[b] = s;
}

/* Bucket b's range [lo, lo + n) of the block outside this member's shard [from, to) given back. */
static void release_outside(reducer *g, int64_t lo, int64_t n, int64_t from, int64_t to)
{
    if (from >= to) from = to = lo + n;
    if (from > lo) g->k->mem_discard(g->grad + lo, (size_t)(from - lo) * sizeof(float));
    if (lo + n > to) g->k->mem_discard(g->grad + to, (size_t)(lo + n - to) * sizeof(float));
}

/*
 * ZeRO-2: the part of the reduced bucket [lo, lo + n) (at x) inside this member's shard into its
 * place in the gradient block (the first reduction since the step) or onto what is kept there
 * (after a second backward), then the rest of the bucket's gradients released: nothing of it
 * stays but the shard. A bucket written in the block was reduced there: its shard part is in
 * place already, onto which a kept part set aside (stash) is added.
 */
static void keep_shard(reducer *g, int b, int64_t lo, int64_t n, const float *x)
{
    int64_t from = lo > g->lo ? lo : g->lo, to = min64(lo + n, g->hi);
    float *dst = g->grad + from;
    const float *src = x + (from - lo);
    size_t bytes = from < to ? (size_t)(to - from) * sizeof(float) : 0;
    if (bytes && g->kept[b] == REDUCER_KEPT_ASIDE) {
        g->k->add_inplace(dst, g->sgrad + (from - g->lo), to - from);
        if (g->release_kept) g->k->mem_discard(g->sgrad + (from - g->lo), bytes);
    } else if (bytes && !g->kept[b] && src != dst) {
        g->k->mem_copy(dst, src, bytes);
    } else if (bytes && g->kept[b]) {
        g->k->add_inplace(dst, src, to - from);
    }
    g->kept[b] = REDUCER_KEPT;
    if (g->gwhere[b] >= 0)
        unbuffer(g, b);
    else
        release_outside(g, lo, n, from, to);
    g->gwhere[b] = REDUCER_UNTOUCHED;
}

/*
 * ZeRO-2's reduction of the bucket [lo, lo + n): each member's shard cuts it into one block per
 * member (most of them empty: a bucket lies in one or two shards), the blocks' sizes into
 * counts[size] (the finiteness exchange's scratch, free during backward). Returns the offset of
 * this member's block in the bucket.
 */
static int64_t owner_blocks(const reducer *g, int64_t lo, int64_t n, int64_t *counts)
{
    int64_t before = 0;
    for (int q = 0; q < g->size; q++) {
        int64_t s0 = min64((int64_t)q * g->shard, g->numel), s1 = min64(s0 + g->shard, g->numel);
        int64_t a = lo > s0 ? lo : s0, z = min64(lo + n, s1);
        counts[q] = z > a ? z - a : 0;
        if (q < g->rank) before += counts[q];
    }
    return before;
}

/*
 * Bucket b's reduction, in place where its gradients are: an all-reduce (sync), or ZeRO-2's
 * reduce-scatter into the shards' owners, whose part is then kept and the rest released.
 */
static void all_reduce_start(void *ctx, int b)
{
    reducer *g = ctx;
    if (g->error != RP_OK) return;
    int64_t lo = g->ranges[2 * b], n = g->ranges[2 * b + 1] - lo;
    /* Reduced again with nothing written since (gradient accumulation): the block's shard part
       holds what is kept, so the bucket's zeros go where backward's would have. */
    if (g->gwhere && g->gwhere[b] == REDUCER_UNTOUCHED && g->kept[b]) take(g, b);
    float *x = bucket_grads(g, b);
    if (g->local_bad < 0) {
        int64_t at = g->k->first_nonfinite(&g->local_value, x, n);
        if (at >= 0) g->local_bad = lo + at;
    }
    /* bf16 on the wire: rounded, reduced with f32 accumulation, widened back for the optimizer.
       The payload (storage: the casts are kernels) goes to the collective through a host view. */
    void *payload = x;
    size_t bytes = (size_t)n * sizeof(float);
    if (g->wire) {
        g->k->cast_f32_bf16(g->wire, x, n);
        payload = g->wire;
        bytes = (size_t)n * sizeof(rp_bf16);
    }
    void *view = strategy_view(&g->stage, payload, bytes, true);
    rp_status status = view ? RP_OK : rp_last_status();
    rp_dtype dtype = g->wire ? RP_BF16 : RP_F32;
    /* What of the bucket is reduced here: all of it, or this member's block (ZeRO-2). */
    int64_t at = 0, len = n;
    if (g->collective == RP_GRAD_ALL_REDUCE_SHARD) {
        int64_t *counts = g->scratch;
        at = owner_blocks(g, lo, n, counts);
        len = counts[g->rank];
        rt_internal_begin(g->comm, "the runtime's gradient reduce-scatter to the shards");
        if (view)
            status = rp_comm_reduce_scatter_v(g->comm, view,
                                              (char *)view + (size_t)at * rp_dtype_size(dtype),
                                              counts, dtype, RP_MEAN);
    } else {
        rt_internal_begin(g->comm, "the runtime's gradient all-reduce");
        if (view) status = rp_comm_all_reduce(g->comm, view, view, n, dtype, RP_MEAN);
    }
    rt_internal_end(g->comm);
    if (status != RP_OK) {
        reducer_fail(g, status);
        return;
    }
    strategy_commit(payload, view, bytes);
    if (g->wire) g->k->cast_bf16_f32(x + at, g->wire + at, len);
    if (g->reduced_bad < 0) {
        int64_t bad = g->k->first_nonfinite(&g->reduced_value, x + at, len);
        if (bad >= 0) g->reduced_bad = lo + at + bad;
    }
    if (g->collective == RP_GRAD_ALL_REDUCE_SHARD) keep_shard(g, b, lo, n, x);
}

/* Bucket b's reduce-scatter: every shard's segment of the local gradients, mean into sgrad. */
static void reduce_scatter_start(void *ctx, int b)
{
    reducer *g = ctx;
    if (g->error != RP_OK) return;
    const kernels_table *kt = g->k;
    int n = g->size;
    int64_t a = g->ranges[2 * b], len = g->ranges[2 * b + 1] - a;
    for (int q = 0; q < n; q++) {
        int64_t g0 = (int64_t)q * g->shard + a, have = valid(g0, len, g->numel);
        float *dst = g->pack + (int64_t)q * len;
        if (have > 0) kt->mem_copy(dst, g->grad + g0, (size_t)have * sizeof(float));
        if (have < len) kt->mem_fill(dst + have, 0, (size_t)(len - have) * sizeof(float));
        if (g->local_bad < 0 && have > 0) {
            int64_t at = kt->first_nonfinite(&g->local_value, dst, have);
            if (at >= 0) g->local_bad = g0 + at;
        }
    }
    /* bf16 on the wire: the segments rounded, reduced with f32 accumulation, widened back. */
    const void *send = g->pack;
    void *recv = g->sgrad + a;
    size_t width = sizeof(float);
    if (g->wire) {
        kt->cast_f32_bf16(g->wire, g->pack, (int64_t)n * len);
        send = g->wire;
        recv = g->wire + (int64_t)n * g->chunk;
        width = sizeof(rp_bf16);
    }
    size_t recv_bytes = (size_t)len * width;
    const void *sv = strategy_view(&g->stage, send, (size_t)n * recv_bytes, true);
    void *rv = sv ? strategy_view(&g->recv, recv, recv_bytes, false) : NULL;
    rp_status status = rv ? RP_OK : rp_last_status();
    rt_internal_begin(g->comm, "the runtime's gradient reduce-scatter");
    if (rv)
        status = rp_comm_reduce_scatter(g->comm, sv, rv, len, g->wire ? RP_BF16 : RP_F32, RP_MEAN);
    rt_internal_end(g->comm);
    if (status != RP_OK) {
        reducer_fail(g, status);
        return;
    }
    strategy_commit(recv, rv, recv_bytes);
    if (g->wire) kt->cast_bf16_f32(g->sgrad + a, recv, len);
    int64_t mine = valid(g->lo + a, len, g->hi);
    if (g->reduced_bad < 0 && mine > 0) {
        int64_t at = kt->first_nonfinite(NULL, g->sgrad + a, mine);
        if (at >= 0) g->reduced_bad = g->lo + a + at;
    }
}

static strategy_bucket_start_fn start_of(const reducer *g)
{
    static const strategy_bucket_start_fn starts[] = {
        [RP_GRAD_ALL_REDUCE] = all_reduce_start,
        [RP_GRAD_REDUCE_SCATTER] = reduce_scatter_start,
        [RP_GRAD_ALL_REDUCE_SHARD] = all_reduce_start,
    };
    return starts[g->collective];
}

/* Bucket of shard-local position x: cut from the end of the shard, `chunk` positions each. */
static int bucket_of(const reducer *g, int64_t x)
{
    return (int)((g->shard - 1 - x) / g->chunk);
}

/*
 * The shard buckets that parameter i has an element in (through any shard), written to out if
 * not NULL; mark[] (one per bucket, set to -1 before the first parameter) removes repeats.
 */
static int shard_buckets(void *ctx, int i, int *mark, int *out)
{
    reducer *g = ctx;
    const rp_tensor *p = rp_params_at(g->params, i);
    int64_t off = rp_params_offset(g->params, i), end = off + p->numel, S = g->shard;
    int count = 0;
    if (p->numel <= 0) return 0;
    for (int64_t q = off / S; q * S < end; q++) {
        int64_t a = (off > q * S ? off : q * S) - q * S, b = min64(end, (q + 1) * S) - q * S;
        for (int k = bucket_of(g, b - 1); k <= bucket_of(g, a); k++) {
            if (mark[k] == i) continue;
            mark[k] = i;
            if (out) out[count] = k;
            count++;
        }
    }
    return count;
}

void reducer_shard_layout(int64_t P, int N, size_t bytes, int64_t *shard, int64_t *chunk,
                          int *nbuckets)
{
    int64_t S = (P + N - 1) / N, c = (int64_t)(bytes / (sizeof(float) * (size_t)N));
    c = c < 1 ? 1 : c > S ? S : c;
    *shard = S;
    *chunk = c;
    *nbuckets = S > 0 ? (int)((S + c - 1) / c) : 0;
}

/*
 * The shards and their gather buckets (chunk = bucket_bytes / (4N) positions of each shard), and
 * the buffers: sgrad, one bucket's segments, one segment, and with `wire` the bf16 payload of a
 * reduce-scatter.
 */
static rp_status shard_init(reducer *g, size_t bytes, bool wire)
{
    int n = g->size, nb = 0;
    reducer_shard_layout(g->numel, n, bytes, &g->shard, &g->chunk, &nb);
    g->lo = min64((int64_t)g->rank * g->shard, g->numel);
    g->hi = min64(g->lo + g->shard, g->numel);
    int64_t S = g->shard, c = g->chunk;
    g->ngather = nb;
    g->gather_ranges = malloc((size_t)(nb ? nb : 1) * 2 * sizeof(int64_t));
    if (!g->gather_ranges)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO's %d shard buckets", nb);
    for (int k = 0; k < nb; k++) {
        g->gather_ranges[2 * k + 1] = S - (int64_t)k * c;
        g->gather_ranges[2 * k] = S - (int64_t)(k + 1) * c > 0 ? S - (int64_t)(k + 1) * c : 0;
    }
    if (S == 0) return RP_OK;
    const kernels_table *kt = g->k;
    g->sgrad_bytes = (size_t)S * sizeof(float);
    g->pack_bytes = (size_t)n * (size_t)c * sizeof(float);
    g->one_bytes = (size_t)c * sizeof(float);
    g->wire_bytes = wire ? ((size_t)n + 1) * (size_t)c * sizeof(rp_bf16) : 0;
    /* ZeRO-2 keeps its shard in the block (sgrad only for a stash, allocated then). */
    if (g->collective == RP_GRAD_REDUCE_SCATTER) g->sgrad = kt->mem_alloc(g->sgrad_bytes);
    g->pack = kt->mem_alloc(g->pack_bytes);
    g->one = kt->mem_alloc(g->one_bytes);
    if (wire) g->wire = kt->mem_alloc(g->wire_bytes);
    if ((!g->sgrad && g->collective == RP_GRAD_REDUCE_SCATTER) || !g->pack || !g->one ||
        (wire && !g->wire))
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO's buffers (%zu bytes)",
                        g->sgrad_bytes + g->pack_bytes + g->one_bytes + g->wire_bytes);
    return RP_OK;
}

/* ZeRO-1: the gather buckets are the reduce-scatter's, started from backward. */
static rp_status scatter_init(reducer *g, size_t bytes, bool bf16)
{
    RP_CHECK(shard_init(g, bytes, bf16));
    g->ranges = g->gather_ranges;
    return strategy_bucket_order_create(&g->order, rp_params_trainable_count(g->params), g->ngather,
                                        shard_buckets, g);
}

/* The contiguous buckets of the block, and the bf16 copy of the largest. */
static rp_status block_init(reducer *g, size_t bytes, bool bf16)
{
    RP_CHECK(strategy_bucket_order_cut(&g->order, g->params, bytes, &g->ranges));
    if (!bf16) return RP_OK;
    int64_t most = 1;
    for (int b = 0; b < g->order.nbuckets; b++)
        if (g->ranges[2 * b + 1] - g->ranges[2 * b] > most)
            most = g->ranges[2 * b + 1] - g->ranges[2 * b];
    g->wire_bytes = (size_t)most * sizeof(rp_bf16);
    g->wire = g->k->mem_alloc(g->wire_bytes);
    if (!g->wire)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the bf16 gradient payload (%zu bytes)",
                        g->wire_bytes);
    return RP_OK;
}

/* ZeRO-2's bucket tables and gradient buffers (as long as the largest bucket). */
static rp_status buffers_init(reducer *g)
{
    int nb = g->order.nbuckets ? g->order.nbuckets : 1;
    g->kept = calloc((size_t)nb, 1);
    g->gwhere = malloc((size_t)nb * sizeof *g->gwhere);
    if (!g->kept || !g->gwhere)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO-2's bucket table");
    RP_CHECK(strategy_bucket_params(&g->order, &g->bfirst));
    for (int b = 0; b < g->order.nbuckets; b++) {
        g->gwhere[b] = REDUCER_UNTOUCHED;
        if (g->ranges[2 * b + 1] - g->ranges[2 * b] > g->gbuf_len)
            g->gbuf_len = g->ranges[2 * b + 1] - g->ranges[2 * b];
    }
    g->ngbuf = g->gbuf_len ? REDUCER_GRAD_BUFFERS : 0;
    for (int s = 0; s < g->ngbuf; s++) {
        g->gbuf_bucket[s] = -1;
        g->gbuf[s] = g->k->mem_alloc((size_t)g->gbuf_len * sizeof(float));
        if (!g->gbuf[s])
            return RP_ERROR(RP_ERR_NOMEM,
                            "cannot allocate ZeRO-2's gradient buffers (%d x %lld values)",
                            REDUCER_GRAD_BUFFERS, (long long)g->gbuf_len);
    }
    return RP_OK;
}

rp_status reducer_init(reducer *g, rp_replica *rep, rp_comm *comm, const rp_params *params,
                       reducer_collective collective)
{
    memset(g, 0, sizeof *g);
    g->collective = collective;
    g->rep = rep;
    g->comm = comm;
    g->rank = rp_comm_rank(comm);
    g->size = rp_comm_size(comm);
    g->base = rep->id - g->rank;
    g->params = params;
    g->grad = rp_params_grad(params);
    g->numel = rp_params_trainable_numel(params);
    g->k = kernels_active();
    g->local_bad = g->reduced_bad = -1;
    g->all = comm;
    g->all_base = g->base;
    g->all_size = g->size;
    /* Sharded: the finiteness exchange (3 per member), and room for the strategy's checksums
       (one per trainable parameter and member), which never overlap it. */
    int T = rp_params_trainable_count(params);
    size_t per = collective != RP_GRAD_ALL_REDUCE ? (size_t)(T > 3 ? T : 3) : 2;
    g->scratch = malloc((size_t)g->size * per * sizeof(int64_t));
    if (!g->scratch) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the gradient reduction");
    size_t bytes = rep->r->cfg.bucket_bytes;
    bool bf16 = rep->r->cfg.grad_dtype == RP_BF16;
    rp_status status = collective == RP_GRAD_REDUCE_SCATTER ? scatter_init(g, bytes, bf16)
                                                            : block_init(g, bytes, bf16);
    /* ZeRO-2: the sync strategy's buckets, and the shards with their gather buckets. */
    if (status == RP_OK && collective == RP_GRAD_ALL_REDUCE_SHARD)
        status = shard_init(g, bytes, false);
    if (status == RP_OK && collective == RP_GRAD_ALL_REDUCE_SHARD) status = buffers_init(g);
    if (status != RP_OK) reducer_free(g);
    return status;
}

rp_status reducer_set_replicas(reducer *g, rp_comm *repl, rp_comm *all)
{
    int T = rp_params_trainable_count(g->params), n = rp_comm_size(all);
    int64_t *scratch = malloc((size_t)n * (size_t)(T > 3 ? T : 3) * sizeof(int64_t));
    if (!scratch) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate HSDP's finiteness exchange");
    free(g->scratch);
    g->scratch = scratch;
    g->repl = repl;
    g->all = all;
    g->all_size = n;
    g->all_base = g->rep->id - rp_comm_rank(all);
    return RP_OK;
}

void reducer_free(reducer *g)
{
    const kernels_table *kt = g->k;
    /* The parameters outlive the reducer: none may point into a buffer that goes. */
    for (int b = 0; g->gwhere && b < g->order.nbuckets; b++)
        if (g->gwhere[b] >= 0) {
            int64_t lo = g->ranges[2 * b], n = g->ranges[2 * b + 1] - lo;
            kt->mem_copy(g->grad + lo, g->gbuf[g->gwhere[b]], (size_t)n * sizeof(float));
            unbuffer(g, b);
        }
    strategy_bucket_order_destroy(&g->order);
    if (g->gather_ranges != g->ranges) free(g->gather_ranges);
    free(g->ranges);
    free(g->kept);
    free(g->gwhere);
    free(g->bfirst);
    for (int s = 0; s < g->ngbuf; s++)
        if (g->gbuf[s]) kt->mem_free(g->gbuf[s], (size_t)g->gbuf_len * sizeof(float));
    free(g->scratch);
    if (g->sgrad) kt->mem_free(g->sgrad, g->sgrad_bytes);
    if (g->pack) kt->mem_free(g->pack, g->pack_bytes);
    if (g->one) kt->mem_free(g->one, g->one_bytes);
    if (g->wire) kt->mem_free(g->wire, g->wire_bytes);
    kernels_staging_free(&g->stage);
    kernels_staging_free(&g->recv);
    g->ranges = g->gather_ranges = NULL;
    g->kept = NULL;
    g->gwhere = g->bfirst = NULL;
    g->ngbuf = 0;
    g->scratch = NULL;
    g->sgrad = g->pack = g->one = NULL;
    g->wire = NULL;
}

size_t reducer_bytes(const reducer *g, bool resident)
{
    const void *p[4] = {g->sgrad, g->pack, g->one, g->wire};
    size_t n[4] = {g->sgrad_bytes, g->pack_bytes, g->one_bytes, g->wire_bytes}, sum = 0;
    for (int i = 0; i < 4; i++)
        sum += !p[i] ? 0 : resident ? kernels_resident_bytes(g->k, p[i], n[i]) : n[i];
    size_t gb = (size_t)g->gbuf_len * sizeof(float);
    for (int s = 0; s < g->ngbuf; s++)
        sum += resident ? kernels_resident_bytes(g->k, g->gbuf[s], gb) : gb;
    return sum;
}

/* Whether param is one of this reducer's list's trainable parameters. */
static bool owns(const reducer *g, const rp_tensor *param)
{
    int i = param->index;
    return i >= 0 && i < g->order.nparams && rp_params_at(g->params, i) == param;
}

bool reducer_ready(reducer *g, const rp_tensor *param)
{
    if (!owns(g, param)) return false;
    strategy_bucket_order_ready(&g->order, param->index, start_of(g), g);
    return true;
}

bool reducer_grad_target(reducer *g, const rp_tensor *param)
{
    if (!owns(g, param)) return false;
    if (!g->gwhere) return true;
    int b = g->order.list[g->order.first[param->index]];
    if (g->gwhere[b] == REDUCER_UNTOUCHED) take(g, b);
    return true;
}

/*
 * A reduced gradient is non-finite on every member: they exchange what each saw before the
 * all-reduce and agree on the first replica (in rank order) whose own gradient held it. Runs
 * only on this error path.
 */
static rp_status all_reduce_blame(reducer *g)
{
    rp_replica *rep = g->rep;
    int64_t mine[2] = {g->local_bad, 0};
    memcpy(&mine[1], &g->local_value, sizeof g->local_value);
    int64_t *all = g->scratch;
    rt_housekeeping_begin(g->comm, "the runtime's non-finite gradient exchange");
    rp_status status = rp_comm_all_gather(g->comm, mine, all, 2, RP_I64);
    rt_internal_end(g->comm);
    RP_CHECK(status);
    for (int q = 0; q < g->size; q++) {
        if (all[2 * q] < 0) continue;
        float v;
        memcpy(&v, &all[2 * q + 1], sizeof v);
        int64_t index, numel;
        const char *name = strategy_param_at(g->params, all[2 * q], &index, &numel);
        rep->blame = g->base + q;
        return RP_ERROR(RP_ERR_NUMERIC,
                        "replica %d's own gradient of parameter '%s' held %g at element "
                        "%lld (of %lld) before the all-reduce, so the mean is non-finite on every "
                        "replica; no parameter was updated",
                        g->base + q, name, (double)v, (long long)index, (long long)numel);
    }
    /* Where this member's scan found it (ZeRO-2 has released the bucket since). */
    float value = g->reduced_value;
    int64_t bad = g->reduced_bad, index = 0, numel = 0;
    const char *name = strategy_param_at(g->params, bad < 0 ? 0 : bad, &index, &numel);
    return RP_ERROR(
        RP_ERR_NUMERIC,
        "the all-reduced gradient of parameter '%s' is %g at element %lld "
        "(of %lld) although every replica's own gradient was finite: the sum overflowed "
        "float%s; no parameter was updated",
        name, (double)value, (long long)index, (long long)numel,
        g->wire ? " (or a value overflowed bf16 on the wire)" : "");
}

/*
 * Reduce-scatter: each member saw only its local gradients and its reduced shard, so they always
 * exchange what they saw; a failure names the first replica (in rank order) whose own gradient
 * held a non-finite value, or the reduced element that overflowed. Nothing has been updated yet.
 */
static rp_status reduce_scatter_agree(reducer *g)
{
    rp_replica *rep = g->rep;
    int64_t mine[3] = {g->local_bad, 0, g->reduced_bad};
    memcpy(&mine[1], &g->local_value, sizeof g->local_value);
    int64_t *all = g->scratch;
    /* Every member of the data axis: with HSDP a group's NaN reaches the others' shards. */
    rt_internal_begin(g->all, "the runtime's gradient finiteness exchange");
    rp_status status = rp_comm_all_gather(g->all, mine, all, 3, RP_I64);
    rt_internal_end(g->all);
    g->local_bad = -1;
    g->reduced_bad = -1;
    RP_CHECK(status);
    int64_t index, numel;
    for (int q = 0; q < g->all_size; q++) {
        if (all[3 * q] < 0) continue;
        float v;
        memcpy(&v, &all[3 * q + 1], sizeof v);
        const char *name = strategy_param_at(g->params, all[3 * q], &index, &numel);
        rep->blame = g->all_base + q;
        return RP_ERROR(RP_ERR_NUMERIC,
                        "replica %d's own gradient of parameter '%s' held %g at element "
                        "%lld (of %lld) before the reduce-scatter, so the mean is non-finite; "
                        "no parameter was updated",
                        g->all_base + q, name, (double)v, (long long)index, (long long)numel);
    }
    for (int q = 0; q < g->all_size; q++) {
        if (all[3 * q + 2] < 0) continue;
        const char *name = strategy_param_at(g->params, all[3 * q + 2], &index, &numel);
        return RP_ERROR(RP_ERR_NUMERIC,
                        "the reduced gradient of parameter '%s' (replica %d's shard) is "
                        "non-finite at element %lld (of %lld) although every replica's own "
                        "gradient was finite: the sum overflowed float; no parameter was updated",
                        name, g->all_base + q, (long long)index, (long long)numel);
    }
    /* ZeRO-1: the reduced shard in place, where hooks added later (clipping) see it. */
    if (g->collective == RP_GRAD_REDUCE_SCATTER && g->hi > g->lo)
        g->k->mem_copy(g->grad + g->lo, g->sgrad, (size_t)(g->hi - g->lo) * sizeof(float));
    return RP_OK;
}

rp_status reducer_finish(reducer *g)
{
    bool scatter = g->collective == RP_GRAD_REDUCE_SCATTER;
    bool keep = g->collective == RP_GRAD_ALL_REDUCE_SHARD;
    strategy_bucket_order_flush(&g->order, start_of(g), g);
    if (keep) memset(g->kept, 0, (size_t)g->order.nbuckets);
    /* A failed reduction left buckets in their buffers: their gradients into the block, where
       the step's caller finds them as without buffers. */
    for (int b = 0; keep && b < g->order.nbuckets; b++) {
        if (g->gwhere[b] < 0) continue;
        int64_t lo = g->ranges[2 * b], n = g->ranges[2 * b + 1] - lo;
        g->k->mem_copy(g->grad + lo, g->gbuf[g->gwhere[b]], (size_t)n * sizeof(float));
        unbuffer(g, b);
        g->gwhere[b] = REDUCER_IN_BLOCK;
    }
    if (g->error != RP_OK) {
        rp_status status = g->error;
        g->error = RP_OK;
        g->local_bad = g->reduced_bad = -1;
        return rp_error_set(status, __FILE__, __LINE__, "%s: %s",
                            scatter ? "ZeRO-1 step"
                            : keep  ? "ZeRO-2 step"
                                    : "gradient all-reduce",
                            g->message);
    }
    /* HSDP: the group's mean of each shard averaged over the groups that hold it. */
    if (g->repl && g->hi > g->lo) {
        float *shard = keep ? g->grad + g->lo : g->sgrad;
        size_t bytes = (size_t)(g->hi - g->lo) * sizeof(float);
        void *view = strategy_view(&g->recv, shard, bytes, true);
        rp_status status = view ? RP_OK : rp_last_status();
        rt_internal_begin(g->repl, "the runtime's gradient all-reduce across the HSDP groups");
        if (view) status = rp_comm_all_reduce(g->repl, view, view, g->hi - g->lo, RP_F32, RP_MEAN);
        rt_internal_end(g->repl);
        RP_CHECK(status);
        strategy_commit(shard, view, bytes);
        int64_t at = g->k->first_nonfinite(NULL, shard, g->hi - g->lo);
        if (at >= 0 && g->reduced_bad < 0) g->reduced_bad = g->lo + at;
    }
    /* A sharded reduction is agreed by every member (each saw its own shard, of its group). */
    if (scatter || keep || g->repl) return reduce_scatter_agree(g);
    rp_status status = g->reduced_bad >= 0 ? all_reduce_blame(g) : RP_OK;
    g->local_bad = g->reduced_bad = -1;
    return status;
}

rp_status reducer_gather(reducer *g, const float *mine, float *full, const char *what)
{
    const kernels_table *kt = g->k;
    int n = g->size;
    rp_status status = RP_OK;
    rt_internal_begin(g->comm, what);
    for (int b = 0; b < g->ngather && status == RP_OK; b++) {
        int64_t a = g->gather_ranges[2 * b], len = g->gather_ranges[2 * b + 1] - a;
        int64_t have = valid(g->lo + a, len, g->hi);
        const float *send = mine + a;
        if (have < len) {
            if (have > 0) kt->mem_copy(g->one, mine + a, (size_t)have * sizeof(float));
            kt->mem_fill(g->one + (have > 0 ? have : 0), 0,
                         (size_t)(len - (have > 0 ? have : 0)) * sizeof(float));
            send = g->one;
        }
        size_t bytes = (size_t)len * sizeof(float);
        const void *sv = strategy_view(&g->stage, send, bytes, true);
        void *pv = sv ? strategy_view(&g->recv, g->pack, (size_t)n * bytes, false) : NULL;
        status = pv ? rp_comm_all_gather(g->comm, sv, pv, len, RP_F32) : rp_last_status();
        if (status != RP_OK || !full) continue;
        strategy_commit(g->pack, pv, (size_t)n * bytes);
        for (int q = 0; q < n; q++) {
            int64_t g0 = (int64_t)q * g->shard + a, m = valid(g0, len, g->numel);
            if (m > 0)
                kt->mem_copy(full + g0, g->pack + (int64_t)q * len, (size_t)m * sizeof(float));
        }
    }
    rt_internal_end(g->comm);
    return status;
}

rp_status reducer_scatter(reducer *g, const float *full, float *mine)
{
    const kernels_table *kt = g->k;
    int n = g->size;
    rp_status status = RP_OK;
    /* From rank 0 of the data axis (HSDP: every group takes the same shards from it). */
    bool root = rp_comm_rank(g->all) == 0;
    rt_internal_begin(g->all, "the runtime's optimizer-state scatter");
    for (int b = 0; b < g->ngather && status == RP_OK; b++) {
        int64_t a = g->gather_ranges[2 * b], len = g->gather_ranges[2 * b + 1] - a;
        if (root)
            for (int q = 0; q < n; q++) {
                int64_t g0 = (int64_t)q * g->shard + a, m = valid(g0, len, g->numel);
                float *dst = g->pack + (int64_t)q * len;
                if (m > 0) kt->mem_copy(dst, full + g0, (size_t)m * sizeof(float));
                if (m < len)
                    kt->mem_fill(dst + (m > 0 ? m : 0), 0,
                                 (size_t)(len - (m > 0 ? m : 0)) * sizeof(float));
            }
        status = strategy_broadcast_storage(g->all, g->pack, (int64_t)n * len, RP_F32, &g->recv);
        int64_t have = valid(g->lo + a, len, g->hi);
        if (status == RP_OK && have > 0)
            kt->mem_copy(mine + a, g->pack + (int64_t)g->rank * len, (size_t)have * sizeof(float));
    }
    rt_internal_end(g->all);
    return status;
}
