/*
 * strategy.c - helpers shared by the strategy tables and the runtime:
 * hashing parameters for checksums, broadcasting replica 0's state, the
 * in-process work queue and lockstep batch numbers. It calls only the
 * layers below, so every runtime file may call it without a loop.
 *
 * Values, gradients and optimizer state are the kernel table's storage. The
 * collectives read and write host memory, so they run on host views
 * (rp_staging): the storage itself with a host table, a copy with any other.
 * The loops over values (the non-finite scans, the bf16 rounding of a wire
 * payload, the checksums) are kernel slots over storage.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#include "replicator/strategy.h"

void *rp_strategy_view(rp_staging *s, const void *storage, size_t bytes, bool download)
{
    /* Nothing to copy: the collective is still made (every member must), on a pointer it never
       dereferences. */
    if (!bytes) return (void *)storage;
    return rp_staging_view(s, rp_kernels_active(), storage, bytes, download);
}

void rp_strategy_commit(void *storage, const void *view, size_t bytes)
{
    rp_staging_commit(rp_kernels_active(), storage, view, bytes);
}

rp_status rp_strategy_broadcast_storage(rp_comm *comm, void *storage, int64_t count, rp_dtype dtype,
                                        rp_staging *s)
{
    size_t bytes = (size_t)(count > 0 ? count : 0) * rp_dtype_size(dtype);
    bool root = !comm || rp_comm_rank(comm) == 0;
    void *view = rp_strategy_view(s, storage, bytes, root);
    if (!view) return rp_last_status();
    RP_CHECK(rp_comm_broadcast(comm, view, count, dtype, 0));
    if (!root) rp_strategy_commit(storage, view, bytes);
    return RP_OK;
}

rp_status rp_strategy_broadcast_params(rp_replica *rep, rp_params *params)
{
    /* Not in the steady state (optimizer creation, checkpoints): the staging buffer is freed. */
    rp_staging s = {0};
    rp_status status = rp_strategy_broadcast_storage(rep->comm, rp_params_data(params),
                                                     rp_params_numel(params), RP_F32, &s);
    rp_staging_free(&s);
    return status;
}

rp_status rp_strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt)
{
    int64_t steps = rp_optimizer_steps(opt), nstate = 0;
    float *state = rp_optimizer_state(opt, &nstate);
    RP_CHECK(rp_strategy_broadcast_params(rep, rp_optimizer_params(opt)));
    if (nstate > 0) {
        rp_staging s = {0};
        rp_status status = rp_strategy_broadcast_storage(rep->comm, state, nstate, RP_F32, &s);
        rp_staging_free(&s);
        RP_CHECK(status);
    }
    RP_CHECK(rp_comm_broadcast(rep->comm, &steps, 1, RP_I64, 0));
    rp_optimizer_set_steps(opt, steps);
    return RP_OK;
}

rp_status rp_strategy_local_claim(rp_replica *rep, int64_t *ticket)
{
    if (rep->r->layout != RP_LAYOUT_THREADS)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_replica_claim across processes needs the async regime "
                        "and an optimizer made by rp_replica_optimizer_create() first");
    *ticket = __atomic_fetch_add(&rep->r->claims, 1, __ATOMIC_RELAXED);
    return RP_OK;
}

rp_status rp_strategy_lockstep_batch(rp_replica *rep, int64_t *index)
{
    /* No collective: replicas in lockstep call it equally often, so their counters agree. */
    *index = rep->batches++;
    return RP_OK;
}

/*
 * One hash per trainable parameter, gathered from every member of comm and compared with its rank
 * 0's; a difference names the first parameter and replica that differ.
 */
rp_status rp_strategy_checksum(rp_replica *rep, rp_comm *comm, rp_params *params, int64_t steps,
                               int64_t *hashes)
{
    int every = rep->r->cfg.checksum_every;
    if (every <= 0 || steps % every != 0) return RP_OK;
    int n = rp_comm_size(comm), rank = rp_comm_rank(comm), base = rep->id - rank;
    int T = rp_params_trainable_count(params);
    int64_t *mine = hashes + (size_t)rank * T;
    const rp_kernels *k = rp_kernels_active();
    for (int i = 0; i < T; i++) {
        const rp_tensor *p = rp_params_at(params, i);
        mine[i] = (int64_t)k->checksum(p->data, p->numel);
    }
    rt_housekeeping_begin(comm, "the runtime's parameter checksum");
    rp_status status = rp_comm_all_gather(comm, mine, hashes, T, RP_I64);
    rt_internal_end(comm);
    RP_CHECK(status);
    for (int i = 0; i < T; i++)
        for (int q = 1; q < n; q++)
            if (hashes[(size_t)q * T + i] != hashes[i])
                return RP_ERROR(
                    RP_ERR_MISMATCH,
                    "the replicas diverged: after step %lld parameter '%s' on replica %d "
                    "differs from replica %d (checksum %016llx vs %016llx); synchronous "
                    "training keeps every replica bitwise identical, so something changed "
                    "parameters outside the optimizer or ran differently on one replica",
                    (long long)steps, rp_params_at(params, i)->name, base + q, base,
                    (unsigned long long)hashes[(size_t)q * T + i], (unsigned long long)hashes[i]);
    return RP_OK;
}

rp_status rp_strategy_clip_full(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    return rp_clip_grad_norm(rp_optimizer_params(opt), max_norm, norm);
}

rp_status rp_strategy_clip_range(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    if (!(max_norm > 0) || !isfinite(max_norm))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replica_clip_grad_norm: max_norm %g must be finite and > 0",
                        (double)max_norm);
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    float *grad = rp_params_grad(rp_optimizer_params(opt)) + lo;
    const rp_kernels *k = rp_kernels_active();
    /* The squares of the shards add up to the whole gradient's: one f64 all-reduce. */
    double sq = hi > lo ? k->sum_squares(grad, hi - lo) : 0.0;
    rt_internal_begin(rep->comm, "the runtime's gradient-norm all-reduce");
    rp_status status = rp_comm_all_reduce(rep->comm, &sq, &sq, 1, RP_F64, RP_SUM);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    double total = sqrt(sq);
    if (norm) *norm = (float)total;
    if (!isfinite(total))
        return RP_ERROR(RP_ERR_NUMERIC,
                        "rp_replica_clip_grad_norm: the gradient norm is %g (a NaN or "
                        "infinite gradient); nothing was scaled",
                        total);
    if (total > max_norm && hi > lo) k->scale_inplace(grad, (float)(max_norm / total), hi - lo);
    return RP_OK;
}

const char *rp_strategy_param_at(const rp_params *params, int64_t at, int64_t *index,
                                 int64_t *numel)
{
    for (int i = 0; i < rp_params_trainable_count(params); i++) {
        const rp_tensor *p = rp_params_at(params, i);
        int64_t off = rp_params_offset(params, i);
        if (at >= off && at < off + p->numel) {
            *index = at - off;
            *numel = p->numel;
            return p->name;
        }
    }
    *index = at;
    *numel = rp_params_trainable_numel(params);
    return "(none)";
}

rp_status rp_strategy_replica_alloc(rp_replica *rep, size_t size)
{
    rep->strategy = calloc(1, size);
    return rep->strategy
               ? RP_OK
               : RP_ERROR(RP_ERR_NOMEM, "cannot allocate replica %d's strategy", rep->local);
}

void rp_strategy_orphans(const rp_replica *rep, int alive)
{
    if (alive)
        rp_error_set(RP_ERR_INVALID, __FILE__, __LINE__,
                     "rp_replicator_destroy: replica %d still had %d optimizer(s) made by "
                     "rp_replica_optimizer_create(); destroy them first (they now fail every "
                     "step; rp_optimizer_destroy() still frees them)",
                     rep->id, alive);
}

rp_status rp_bucket_order_create(rp_bucket_order *o, int nparams, int nbuckets,
                                 int (*touch)(void *ctx, int i, int *mark, int *out), void *ctx)
{
    memset(o, 0, sizeof *o);
    o->nparams = nparams;
    o->nbuckets = nbuckets;
    size_t nb = (size_t)(nbuckets > 0 ? nbuckets : 1);
    o->first = calloc((size_t)nparams + 1, sizeof(int));
    o->params = calloc(nb, sizeof(int));
    o->ready = calloc(nb, sizeof(int));
    int *mark = malloc(nb * sizeof(int));
    if (!o->first || !o->params || !o->ready || !mark) goto nomem;
    /* Two passes: count each parameter's buckets, then list them. */
    for (int k = 0; k < nbuckets; k++)
        mark[k] = -1;
    for (int i = 0; i < nparams; i++)
        o->first[i + 1] = o->first[i] + (nbuckets > 0 ? touch(ctx, i, mark, NULL) : 0);
    o->list = malloc((size_t)(o->first[nparams] > 0 ? o->first[nparams] : 1) * sizeof(int));
    if (!o->list) goto nomem;
    for (int k = 0; k < nbuckets; k++)
        mark[k] = -1;
    for (int i = 0; i < nparams && nbuckets > 0; i++) {
        touch(ctx, i, mark, o->list + o->first[i]);
        for (int j = o->first[i]; j < o->first[i + 1]; j++)
            o->params[o->list[j]]++;
    }
    free(mark);
    return RP_OK;
nomem:
    free(mark);
    rp_bucket_order_destroy(o);
    return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d gradient buckets for %d parameters", nbuckets,
                    nparams);
}

/* rp_bucket_order_cut's touch: each parameter lies in exactly one bucket. */
static int one_bucket(void *ctx, int i, int *mark, int *out)
{
    const int *bucket_of = ctx;
    if (out) out[0] = bucket_of[i];
    return 1;
}

rp_status rp_bucket_order_cut(rp_bucket_order *o, const rp_params *params, size_t bytes,
                              int64_t **ranges)
{
    int T = rp_params_trainable_count(params);
    int *bucket_of = malloc((size_t)(T ? T : 1) * sizeof(int));
    int64_t *r = malloc((size_t)(T ? T : 1) * 2 * sizeof(int64_t));
    *ranges = NULL;
    if (!bucket_of || !r) {
        free(bucket_of);
        free(r);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d buckets", T);
    }
    int b = -1;
    size_t filled = bytes;
    for (int i = T - 1; i >= 0; i--) {
        const rp_tensor *p = rp_params_at(params, i);
        int64_t off = rp_params_offset(params, i);
        if (filled >= bytes) {
            b++;
            r[2 * b + 1] = off + p->numel;
            filled = 0;
        }
        r[2 * b] = off;
        bucket_of[i] = b;
        filled += (size_t)p->numel * sizeof(float);
    }
    rp_status status = rp_bucket_order_create(o, T, b + 1, one_bucket, bucket_of);
    free(bucket_of);
    if (status != RP_OK) {
        free(r);
        return status;
    }
    *ranges = r;
    return RP_OK;
}

void rp_bucket_order_destroy(rp_bucket_order *o)
{
    free(o->first);
    free(o->list);
    free(o->params);
    free(o->ready);
    memset(o, 0, sizeof *o);
}

void rp_bucket_order_ready(rp_bucket_order *o, int i, rp_bucket_start_fn start, void *ctx)
{
    if (i < 0 || i >= o->nparams) return;
    for (int j = o->first[i]; j < o->first[i + 1]; j++) {
        int b = o->list[j];
        if (++o->ready[b] < o->params[b]) continue;
        if (b < o->started) {
            o->again = true;
            o->ready[b] = 0;
        }
    }
    while (o->started < o->nbuckets && o->ready[o->started] == o->params[o->started]) {
        o->ready[o->started] = 0;
        start(ctx, o->started++);
    }
}

void rp_bucket_order_flush(rp_bucket_order *o, rp_bucket_start_fn start, void *ctx)
{
    while (o->started < o->nbuckets)
        start(ctx, o->started++);
    if (o->again)
        for (int b = 0; b < o->nbuckets; b++)
            start(ctx, b);
    for (int b = 0; b < o->nbuckets; b++)
        o->ready[b] = 0;
    o->started = 0;
    o->again = false;
}

/* ---- the gradient all-reduce ------------------------------------------------------------- */

rp_ps_config rp_strategy_ps_config(const rp_replicator *r, const rp_optim_config *cfg)
{
    rp_ps_config pc = rp_ps_config_default();
    pc.servers = r->cfg.ps;
    pc.staleness = r->cfg.staleness;
    pc.timeout_s = r->cfg.timeout_s;
    pc.optim = *cfg;
    return pc;
}

rp_status rp_strategy_ps_take(rp_replica *rep, rp_ps ***set, int count, int index, int64_t numel,
                              const rp_ps_config *pc, rp_ps **ps)
{
    if (rep->local == 0) {
        free(*set); /* an earlier, destroyed set's: every handle was taken then */
        *set = calloc((size_t)count, sizeof(rp_ps *));
        if (!*set) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d handles", count);
        RP_CHECK(rp_ps_threads_create(*set, count, numel, pc));
    }
    rt_internal_begin(rep->comm, "the runtime's optimizer creation barrier");
    rp_status status = rp_comm_barrier(rep->comm);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    if (index < 0) return RP_OK;
    *ps = (*set)[index];
    (*set)[index] = NULL;
    if (rp_ps_numel(*ps) != numel)
        return RP_ERROR(RP_ERR_SHAPE,
                        "replica %d has %lld trainable values, replica 0 %lld: every replica "
                        "must build the same model",
                        rep->id, (long long)numel, (long long)rp_ps_numel(*ps));
    return RP_OK;
}

static void reducer_start(void *ctx, int b)
{
    rp_grad_reducer *g = ctx;
    if (g->error != RP_OK) return;
    int64_t lo = g->ranges[2 * b], n = g->ranges[2 * b + 1] - lo;
    float *x = g->grad + lo;
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
    void *view = rp_strategy_view(&g->stage, payload, bytes, true);
    rp_status status = view ? RP_OK : rp_last_status();
    rt_internal_begin(g->comm, "the runtime's gradient all-reduce");
    if (view)
        status = rp_comm_all_reduce(g->comm, view, view, n, g->wire ? RP_BF16 : RP_F32, RP_MEAN);
    rt_internal_end(g->comm);
    if (status != RP_OK) {
        g->error = status;
        snprintf(g->message, sizeof g->message, "%s", rp_last_error());
        return;
    }
    rp_strategy_commit(payload, view, bytes);
    if (g->wire) g->k->cast_bf16_f32(x, g->wire, n);
    if (g->k->first_nonfinite(NULL, x, n) >= 0) g->reduced_bad = true;
}

rp_status rp_grad_reducer_init(rp_grad_reducer *g, rp_replica *rep, rp_comm *comm,
                               const rp_params *params)
{
    memset(g, 0, sizeof *g);
    g->rep = rep;
    g->comm = comm;
    g->base = rep->id - rp_comm_rank(comm);
    g->params = params;
    g->grad = rp_params_grad(params);
    g->numel = rp_params_trainable_numel(params);
    g->k = rp_kernels_active();
    g->local_bad = -1;
    g->scratch = malloc((size_t)rp_comm_size(comm) * 2 * sizeof(int64_t));
    if (!g->scratch) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the gradient all-reduce");
    rp_status status = rp_bucket_order_cut(&g->order, params, rep->r->cfg.bucket_bytes, &g->ranges);
    if (status == RP_OK && rep->r->cfg.grad_dtype == RP_BF16) {
        int64_t most = 1;
        for (int b = 0; b < g->order.nbuckets; b++)
            if (g->ranges[2 * b + 1] - g->ranges[2 * b] > most)
                most = g->ranges[2 * b + 1] - g->ranges[2 * b];
        g->wire_bytes = (size_t)most * sizeof(rp_bf16);
        g->wire = g->k->mem_alloc(g->wire_bytes);
        if (!g->wire)
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the bf16 gradient payload (%zu bytes)",
                              g->wire_bytes);
    }
    if (status != RP_OK) rp_grad_reducer_free(g);
    return status;
}

void rp_grad_reducer_free(rp_grad_reducer *g)
{
    rp_bucket_order_destroy(&g->order);
    free(g->ranges);
    free(g->scratch);
    if (g->wire) g->k->mem_free(g->wire, g->wire_bytes);
    rp_staging_free(&g->stage);
    g->ranges = NULL;
    g->scratch = NULL;
    g->wire = NULL;
}

bool rp_grad_reducer_ready(rp_grad_reducer *g, const rp_tensor *param)
{
    if (param->grad < g->grad || param->grad >= g->grad + g->numel) return false;
    rp_bucket_order_ready(&g->order, param->index, reducer_start, g);
    return true;
}

/*
 * A reduced gradient is non-finite on every member: they exchange what each saw before the
 * all-reduce and agree on the first replica (in rank order) whose own gradient held it. Runs
 * only on this error path.
 */
static rp_status nonfinite_blame(rp_grad_reducer *g)
{
    rp_replica *rep = g->rep;
    int64_t mine[2] = {g->local_bad, 0};
    memcpy(&mine[1], &g->local_value, sizeof g->local_value);
    int64_t *all = g->scratch;
    rt_housekeeping_begin(g->comm, "the runtime's non-finite gradient exchange");
    rp_status status = rp_comm_all_gather(g->comm, mine, all, 2, RP_I64);
    rt_internal_end(g->comm);
    RP_CHECK(status);
    for (int q = 0; q < rp_comm_size(g->comm); q++) {
        if (all[2 * q] < 0) continue;
        float v;
        memcpy(&v, &all[2 * q + 1], sizeof v);
        int64_t index, numel;
        const char *name = rp_strategy_param_at(g->params, all[2 * q], &index, &numel);
        rep->blame = g->base + q;
        return RP_ERROR(RP_ERR_NUMERIC,
                        "replica %d's own gradient of parameter '%s' held %g at element "
                        "%lld (of %lld) before the all-reduce, so the mean is non-finite on every "
                        "replica; no parameter was updated",
                        g->base + q, name, (double)v, (long long)index, (long long)numel);
    }
    float value = 0.0f;
    int64_t bad = g->k->first_nonfinite(&value, g->grad, g->numel), index = 0, numel = 0;
    const char *name = rp_strategy_param_at(g->params, bad < 0 ? 0 : bad, &index, &numel);
    return RP_ERROR(
        RP_ERR_NUMERIC,
        "the all-reduced gradient of parameter '%s' is %g at element %lld "
        "(of %lld) although every replica's own gradient was finite: the sum overflowed "
        "float%s; no parameter was updated",
        name, (double)value, (long long)index, (long long)numel,
        g->wire ? " (or a value overflowed bf16 on the wire)" : "");
}

rp_status rp_grad_reducer_finish(rp_grad_reducer *g)
{
    rp_bucket_order_flush(&g->order, reducer_start, g);
    bool reduced_bad = g->reduced_bad;
    g->reduced_bad = false;
    if (g->error != RP_OK) {
        rp_status status = g->error;
        g->error = RP_OK;
        g->local_bad = -1;
        return rp_error_set(status, __FILE__, __LINE__, "gradient all-reduce: %s", g->message);
    }
    rp_status status = reduced_bad ? nonfinite_blame(g) : RP_OK;
    g->local_bad = -1;
    return status;
}
