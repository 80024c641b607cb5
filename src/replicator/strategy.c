/*
 * strategy.c - helpers shared by the strategy tables and the runtime:
 * hashing parameters for checksums, broadcasting replica 0's state, the
 * in-process work queue and lockstep batch numbers. It calls only the
 * layers below, so every runtime file may call it without a loop.
 *
 * Values, gradients and optimizer state are the kernel table's storage. The
 * collectives read and write host memory, so they run on host views
 * (kernels_staging): the storage itself with a host table, a copy with any other.
 * The loops over values (the non-finite scans, the bf16 rounding of a wire
 * payload, the checksums) are kernel slots over storage.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#include "replicator/strategy.h"

void *strategy_view(kernels_staging *s, const void *storage, size_t bytes, bool download)
{
    /* Nothing to copy: the collective is still made (every member must), on a pointer it never
       dereferences. */
    if (!bytes) return (void *)storage;
    return kernels_staging_view(s, kernels_active(), storage, bytes, download);
}

void strategy_commit(void *storage, const void *view, size_t bytes)
{
    kernels_staging_commit(kernels_active(), storage, view, bytes);
}

rp_status strategy_broadcast_storage(rp_comm *comm, void *storage, int64_t count, rp_dtype dtype,
                                     kernels_staging *s)
{
    size_t bytes = (size_t)(count > 0 ? count : 0) * rp_dtype_size(dtype);
    bool root = !comm || rp_comm_rank(comm) == 0;
    void *view = strategy_view(s, storage, bytes, root);
    if (!view) return rp_last_status();
    RP_CHECK(rp_comm_broadcast(comm, view, count, dtype, 0));
    if (!root) strategy_commit(storage, view, bytes);
    return RP_OK;
}

rp_status strategy_broadcast_params(rp_replica *rep, rp_params *params)
{
    /* Not in the steady state (optimizer creation, checkpoints): the staging buffer is freed. */
    kernels_staging s = {0};
    rp_status status = strategy_broadcast_storage(rep->comm, rp_params_data(params),
                                                  rp_params_numel(params), RP_F32, &s);
    kernels_staging_free(&s);
    return status;
}

rp_status strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt)
{
    int64_t steps = rp_optimizer_steps(opt), nstate = 0;
    float *state = rp_optimizer_state(opt, &nstate);
    RP_CHECK(strategy_broadcast_params(rep, rp_optimizer_params(opt)));
    if (nstate > 0) {
        kernels_staging s = {0};
        rp_status status = strategy_broadcast_storage(rep->comm, state, nstate, RP_F32, &s);
        kernels_staging_free(&s);
        RP_CHECK(status);
    }
    RP_CHECK(rp_comm_broadcast(rep->comm, &steps, 1, RP_I64, 0));
    rp_optimizer_set_steps(opt, steps);
    return RP_OK;
}

rp_status strategy_local_claim(rp_replica *rep, int64_t *ticket)
{
    if (rep->r->layout != RP_LAYOUT_THREADS)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_replica_claim across processes needs the async regime "
                        "and an optimizer made by rp_replica_optimizer_create() first");
    *ticket = __atomic_fetch_add(&rep->r->claims, 1, __ATOMIC_RELAXED);
    return RP_OK;
}

rp_status strategy_lockstep_batch(rp_replica *rep, int64_t *index)
{
    /* No collective: replicas in lockstep call it equally often, so their counters agree. */
    *index = rep->batches++;
    return RP_OK;
}

/*
 * One hash per trainable parameter, gathered from every member of comm and compared with its rank
 * 0's; a difference names the first parameter and replica that differ.
 */
rp_status strategy_checksum(rp_replica *rep, rp_comm *comm, rp_params *params, int64_t steps,
                            int64_t *hashes)
{
    int every = rep->r->cfg.checksum_every;
    if (every <= 0 || steps % every != 0) return RP_OK;
    int n = rp_comm_size(comm), rank = rp_comm_rank(comm), base = rep->id - rank;
    int T = rp_params_trainable_count(params);
    int64_t *mine = hashes + (size_t)rank * T;
    const kernels_table *k = kernels_active();
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

rp_status strategy_clip_full(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    return rp_clip_grad_norm(rp_optimizer_params(opt), max_norm, norm);
}

rp_status strategy_clip_range(rp_replica *rep, rp_comm *comm, rp_optimizer *opt, float max_norm,
                              float *norm)
{
    (void)rep;
    if (!(max_norm > 0) || !isfinite(max_norm))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replica_clip_grad_norm: max_norm %g must be finite and > 0",
                        (double)max_norm);
    int64_t lo, hi;
    rp_optimizer_range(opt, &lo, &hi);
    float *grad = rp_params_grad(rp_optimizer_params(opt)) + lo;
    const kernels_table *k = kernels_active();
    /* The squares of the shards add up to the whole gradient's: one f64 all-reduce. */
    double sq = hi > lo ? k->sum_squares(grad, hi - lo) : 0.0;
    rt_internal_begin(comm, "the runtime's gradient-norm all-reduce");
    rp_status status = rp_comm_all_reduce(comm, &sq, &sq, 1, RP_F64, RP_SUM);
    rt_internal_end(comm);
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

const char *strategy_param_at(const rp_params *params, int64_t at, int64_t *index, int64_t *numel)
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

rp_status strategy_replica_init(rp_replica *rep)
{
    rep->strategy = calloc(1, sizeof(strategy_replica));
    return rep->strategy
               ? RP_OK
               : RP_ERROR(RP_ERR_NOMEM, "cannot allocate replica %d's strategy", rep->local);
}

void strategy_replica_fini(rp_replica *rep, void (*detach)(strategy_link *link))
{
    strategy_replica *sr = rep->strategy;
    if (!sr) return;
    int alive = 0;
    for (strategy_link *l = sr->opts; l; l = l->next, alive++) {
        l->rep = NULL;
        if (detach) detach(l);
    }
    if (alive)
        rp_error_set(RP_ERR_INVALID, __FILE__, __LINE__,
                     "rp_replicator_destroy: replica %d still had %d optimizer(s) made by "
                     "rp_replica_optimizer_create(); destroy them first (they now fail every "
                     "step; rp_optimizer_destroy() still frees them)",
                     rep->id, alive);
    free(sr);
    rep->strategy = NULL;
}

int strategy_slot_free(const rp_replica *rep, int max)
{
    const strategy_replica *sr = rep->strategy;
    for (int k = 0; k < max && k < 32; k++)
        if (!(sr->slots >> k & 1u)) return k;
    return -1;
}

void strategy_attach(rp_replica *rep, strategy_link *link, rp_optimizer *opt, int slot)
{
    strategy_replica *sr = rep->strategy;
    link->rep = rep;
    link->opt = opt;
    link->slot = slot;
    if (slot >= 0) sr->slots |= 1u << slot;
    link->next = sr->opts;
    sr->opts = link;
}

void strategy_detach(strategy_link *link)
{
    if (!link->rep) return;
    strategy_replica *sr = link->rep->strategy;
    for (strategy_link **p = &sr->opts; *p; p = &(*p)->next)
        if (*p == link) {
            *p = link->next;
            break;
        }
    if (link->slot >= 0) sr->slots &= ~(1u << link->slot);
    link->rep = NULL;
}

strategy_link *strategy_find(const rp_replica *rep, const rp_optimizer *opt)
{
    const strategy_replica *sr = rep->strategy;
    for (strategy_link *l = sr ? sr->opts : NULL; l; l = l->next)
        if (l->opt == opt) return l;
    return NULL;
}

strategy_link *strategy_oldest(const rp_replica *rep)
{
    const strategy_replica *sr = rep->strategy;
    strategy_link *l = sr ? sr->opts : NULL;
    while (l && l->next)
        l = l->next;
    return l;
}

bool strategy_owns(const rp_replica *rep, const rp_optimizer *opt)
{
    return strategy_find(rep, opt) != NULL;
}

void strategy_replica_destroy(rp_replica *rep)
{
    strategy_replica_fini(rep, NULL);
}

rp_status strategy_alive(const strategy_link *link)
{
    if (link->rep) return RP_OK;
    return RP_ERROR(
        RP_ERR_INVALID,
        "this replica optimizer outlived its replicator: destroy every "
        "optimizer made by rp_replica_optimizer_create() before rp_replicator_destroy()");
}

rp_status strategy_bucket_order_create(strategy_bucket_order *o, int nparams, int nbuckets,
                                       int (*touch)(void *ctx, int i, int *mark, int *out),
                                       void *ctx)
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
    strategy_bucket_order_destroy(o);
    return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d gradient buckets for %d parameters", nbuckets,
                    nparams);
}

/* strategy_bucket_order_cut's touch: each parameter lies in exactly one bucket. */
static int one_bucket(void *ctx, int i, int *mark, int *out)
{
    const int *bucket_of = ctx;
    if (out) out[0] = bucket_of[i];
    return 1;
}

rp_status strategy_bucket_order_cut(strategy_bucket_order *o, const rp_params *params, size_t bytes,
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
    rp_status status = strategy_bucket_order_create(o, T, b + 1, one_bucket, bucket_of);
    free(bucket_of);
    if (status != RP_OK) {
        free(r);
        return status;
    }
    *ranges = r;
    return RP_OK;
}

rp_status strategy_bucket_params(const strategy_bucket_order *o, int **first)
{
    int n = o->nbuckets;
    *first = malloc((size_t)(n + 1) * sizeof **first);
    if (!*first) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the table of %d buckets", n);
    /* Cut from the end of the block: a parameter's bucket never grows with its index. */
    (*first)[0] = o->nparams;
    for (int b = 1; b <= n; b++)
        (*first)[b] = 0;
    for (int i = o->nparams - 1; i >= 0; i--)
        (*first)[o->list[o->first[i]] + 1] = i;
    return RP_OK;
}

void strategy_point(const rp_params *params, int i0, int i1, int64_t a, float *base, bool grad)
{
    for (int i = i0; i < i1; i++) {
        rp_tensor *p = rp_params_at(params, i);
        float *at = base + (rp_params_offset(params, i) - a);
        if (grad)
            p->grad = at;
        else
            p->data = at;
    }
}

void strategy_bucket_order_destroy(strategy_bucket_order *o)
{
    free(o->first);
    free(o->list);
    free(o->params);
    free(o->ready);
    memset(o, 0, sizeof *o);
}

void strategy_bucket_order_ready(strategy_bucket_order *o, int i, strategy_bucket_start_fn start,
                                 void *ctx)
{
    if (i < 0 || i >= o->nparams) return;
    for (int j = o->first[i]; j < o->first[i + 1]; j++) {
        int b = o->list[j];
        /* A gradient of a started bucket changed (a second backward before the step): every
           bucket is reduced again at the step, whether or not all of b's parameters are. */
        if (b < o->started)
            o->again = true;
        else
            o->ready[b]++;
    }
    while (o->started < o->nbuckets && o->ready[o->started] >= o->params[o->started]) {
        o->ready[o->started] = 0;
        start(ctx, o->started++);
    }
}

void strategy_bucket_order_flush(strategy_bucket_order *o, strategy_bucket_start_fn start,
                                 void *ctx)
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

/* ---- parameter servers (async, sync groups) ---------------------------------------------- */

rp_ps_config strategy_ps_config(const rp_replicator *r, const rp_optim_config *cfg)
{
    rp_ps_config pc = rp_ps_config_default();
    pc.servers = r->cfg.ps;
    pc.staleness = r->cfg.staleness;
    pc.timeout_s = r->cfg.timeout_s;
    pc.optim = *cfg;
    return pc;
}

rp_status strategy_ps_take(rp_replica *rep, rp_ps ***set, int count, int index, int64_t numel,
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

/* ---- what every plan slot shares ----------------------------------------------------------- */

rp_status strategy_plan_base(int replicas, int id, const rp_params *params,
                             const rp_optim_config *oc, rp_plan_worker *w)
{
    RP_CHECK(rp_optim_check(oc));
    int64_t P = rp_params_trainable_numel(params), slots = rp_optim_slots(oc);
    w->worker = id;
    w->replicas = replicas;
    w->params = rp_params_numel(params) * (int64_t)sizeof(float);
    w->grads = P * (int64_t)sizeof(float);
    w->optim = slots * P * (int64_t)sizeof(float);
    w->strategy = 0;
    w->groups = 1;
    return RP_OK;
}

rp_status strategy_plan_buckets(const rp_params *params, size_t bytes, int *nbuckets, int64_t *most)
{
    strategy_bucket_order o;
    int64_t *ranges = NULL;
    RP_CHECK(strategy_bucket_order_cut(&o, params, bytes, &ranges));
    *nbuckets = o.nbuckets;
    *most = 0;
    for (int b = 0; b < o.nbuckets; b++)
        if (ranges[2 * b + 1] - ranges[2 * b] > *most) *most = ranges[2 * b + 1] - ranges[2 * b];
    strategy_bucket_order_destroy(&o);
    free(ranges);
    return RP_OK;
}

int64_t strategy_plan_wire(const rp_config *cfg, int64_t most)
{
    return cfg->grad_dtype == RP_BF16 ? (most > 1 ? most : 1) * (int64_t)sizeof(rp_bf16) : 0;
}
