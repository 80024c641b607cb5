/*
 * strategy_table.c - the one choice of strategy (rp_strategy_kind) and its
 * tables: the config's older spellings read in one place, and a lookup, so
 * that nothing else branches on the strategy.
 */
#include <string.h>

#include "replicator/strategy.h"

static const strategy_table *const tables[RP_STRATEGIES] = {
    [RP_STRATEGY_SYNC] = &strategy_sync,   [RP_STRATEGY_ASYNC] = &strategy_async,
    [RP_STRATEGY_ZERO1] = &strategy_zero,  [RP_STRATEGY_SYNC_GROUPS] = &strategy_groups,
    [RP_STRATEGY_ZERO2] = &strategy_zero2, [RP_STRATEGY_ZERO3] = &strategy_zero3,
};

static const char *const names[RP_STRATEGIES] = {
    [RP_STRATEGY_SYNC] = "sync",   [RP_STRATEGY_ASYNC] = "async",
    [RP_STRATEGY_ZERO1] = "zero1", [RP_STRATEGY_SYNC_GROUPS] = "sync-groups",
    [RP_STRATEGY_ZERO2] = "zero2", [RP_STRATEGY_ZERO3] = "zero3",
};

const strategy_table *strategy_of(rp_strategy_kind kind)
{
    return (unsigned)kind < RP_STRATEGIES ? tables[kind] : NULL;
}

const char *rp_strategy_name(rp_strategy_kind strategy)
{
    return (unsigned)strategy < RP_STRATEGIES ? names[strategy] : "?";
}

rp_strategy_kind rp_config_strategy(const rp_config *cfg)
{
    if (!cfg) return RP_STRATEGY_SYNC;
    if (cfg->strategy != RP_STRATEGY_SYNC) return cfg->strategy;
    /* The older spellings; rp_replicator_create refuses two that name different strategies. */
    if (cfg->zero) return RP_STRATEGY_ZERO1;
    if (cfg->sync_groups > 1) return RP_STRATEGY_SYNC_GROUPS;
    if (cfg->regime == RP_REGIME_ASYNC) return RP_STRATEGY_ASYNC;
    return RP_STRATEGY_SYNC;
}

rp_status strategy_parse(const char *name, rp_strategy_kind *out)
{
    for (int k = 0; name && k < RP_STRATEGIES; k++)
        if (!strcmp(name, names[k])) {
            *out = (rp_strategy_kind)k;
            return RP_OK;
        }
    return RP_ERROR(RP_ERR_INVALID,
                    "--strategy %s: expected sync, async, zero1, zero2, zero3 or sync-groups",
                    name ? name : "(missing)");
}
