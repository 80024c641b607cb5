/*
 * strategy.c - helpers shared by the strategy tables and the runtime:
 * hashing parameters for checksums, broadcasting replica 0's state, the
 * in-process work queue and lockstep batch numbers. It calls only the
 * layers below, so every runtime file may call it without a loop.
 */
#include <string.h>

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
