/*
 * strategy.c - helpers shared by the strategy tables and the runtime:
 * hashing parameters for checksums, broadcasting replica 0's state, the
 * in-process work queue and lockstep batch numbers. It calls only the
 * layers below, so every runtime file may call it without a loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#include "replicator/strategy.h"

uint64_t rp_strategy_hash_floats(const float *x, int64_t n)
{
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                     0x2545f4914f6cdd1dull};
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

rp_status rp_strategy_broadcast_params(rp_replica *rep, rp_params *params)
{
    return rp_comm_broadcast(rep->comm, rp_params_data(params), rp_params_numel(params), RP_F32, 0);
}

rp_status rp_strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt)
{
    int64_t steps = rp_optimizer_steps(opt), nstate = 0;
    float *state = rp_optimizer_state(opt, &nstate);
    RP_CHECK(rp_strategy_broadcast_params(rep, rp_optimizer_params(opt)));
    if (nstate > 0) RP_CHECK(rp_comm_broadcast(rep->comm, state, nstate, RP_F32, 0));
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
 * One hash per trainable parameter, gathered from every replica and compared with replica 0's;
 * a difference names the first parameter and replica that differ.
 */
rp_status rp_strategy_checksum(rp_replica *rep, rp_params *params, int64_t steps, int64_t *hashes)
{
    int every = rep->r->cfg.checksum_every;
    if (every <= 0 || steps % every != 0) return RP_OK;
    int n = rep->count, T = rp_params_trainable_count(params);
    int64_t *mine = hashes + (size_t)rep->id * T;
    for (int i = 0; i < T; i++) {
        const rp_tensor *p = rp_params_at(params, i);
        mine[i] = (int64_t)rp_strategy_hash_floats(p->data, p->numel);
    }
    rt_housekeeping_begin(rep->comm, "the runtime's parameter checksum");
    rp_status status = rp_comm_all_gather(rep->comm, mine, hashes, T, RP_I64);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    for (int i = 0; i < T; i++)
        for (int q = 1; q < n; q++)
            if (hashes[(size_t)q * T + i] != hashes[i])
                return RP_ERROR(
                    RP_ERR_MISMATCH,
                    "the replicas diverged: after step %lld parameter '%s' on replica %d "
                    "differs from replica 0 (checksum %016llx vs %016llx); synchronous "
                    "training keeps every replica bitwise identical, so something changed "
                    "parameters outside the optimizer or ran differently on one replica",
                    (long long)steps, rp_params_at(params, i)->name, q,
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
