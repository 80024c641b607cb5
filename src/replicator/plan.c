/*
 * plan.c - the runtime's share of a plan (replicator/plan.h): the optimizer
 * state and buffers each worker keeps, and the collectives its strategy
 * makes in one step.
 *
 * Each strategy predicts its own (the `plan` and `plan_servers` slots of its
 * table, in its own file, from the same layout functions its step uses:
 * strategy_bucket_order_cut's buckets, the gradient reducer's shards); this file
 * only checks the arguments and dispatches to the table cfg chooses.
 * tests/cli_plan.sh compares the predictions with the counters of a real
 * step, exactly, and fails on any difference.
 */
#include "replicator/plan.h"
#include "replicator/strategy.h"

int64_t rp_plan_servers(const rp_config *cfg, const rp_params *params, const rp_optim_config *oc)
{
    if (!cfg || !params || !oc) return 0;
    const strategy_table *s = strategy_of(rp_config_strategy(cfg));
    return s && s->plan_servers ? s->plan_servers(cfg, params, oc) : 0;
}

rp_status rp_plan_runtime(const rp_config *cfg, int replicas, int id, const rp_params *params,
                          const rp_optim_config *oc, rp_plan_worker *w)
{
    if (!cfg || !params || !oc || !w)
        return RP_ERROR(RP_ERR_INVALID, "rp_plan_runtime: NULL argument");
    if (replicas < 1 || id < 0 || id >= replicas)
        return RP_ERROR(RP_ERR_INVALID, "rp_plan_runtime: worker %d of %d replicas", id, replicas);
    const strategy_table *s = strategy_of(rp_config_strategy(cfg));
    if (!s)
        return RP_ERROR(RP_ERR_INVALID, "rp_plan_runtime: strategy = %d: not an rp_strategy_kind",
                        (int)cfg->strategy);
    return s->plan(cfg, replicas, id, params, oc, w);
}
