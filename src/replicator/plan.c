/*
 * plan.c - the runtime's share of a plan (replicator/plan.h): the optimizer
 * state and buffers each worker keeps, and the collectives its strategy
 * makes in one step.
 *
 * The numbers follow the strategies' own rules: strategy_sync.c cuts the
 * gradient block into buckets of at least cfg.bucket_bytes from the last
 * parameter back, one mean all-reduce each; strategy_zero.c cuts each shard
 * of S = ceil(P/N) values into buckets of bucket_bytes / (4N) positions, one
 * reduce-scatter and one all-gather each, plus one all-gather of 3 int64
 * (the finiteness exchange); strategy_groups.c reduces a group's gradients
 * in the sync strategy's buckets over the group's communicator, broadcasts
 * the values its rank 0 pulled from the servers, and broadcasts each batch's
 * ticket in the group. Gradients travel as cfg.grad_dtype (bf16: 2 bytes a
 * value, and a bf16 copy of the largest bucket as scratch; the buckets keep
 * their f32 cut). A change to any of these rules must be made here too:
 * tests/cli_plan.sh compares these predictions with the counters of a real
 * step, exactly, and fails on any difference.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/plan.h"

const char *rp_plan_axis_name(rp_axis axis)
{
    static const char *names[] = {"data", "model", "pipe", "group"};
    return (unsigned)axis <= (unsigned)RP_PLAN_GROUP ? names[axis] : "?";
}

rp_status rp_plan_add_traffic(rp_plan_worker *w, rp_axis axis, rp_comm_class cls,
                              rp_flight_kind kind, const char *what, int64_t calls, int64_t bytes)
{
    if (!w || !what) return RP_ERROR(RP_ERR_INVALID, "rp_plan_add_traffic: NULL argument");
    for (int i = 0; i < w->ntraffic; i++) {
        rp_plan_traffic *l = &w->traffic[i];
        if (l->axis == axis && l->cls == cls && l->kind == kind &&
            strncmp(l->what, what, sizeof l->what - 1) == 0) {
            l->calls += calls;
            l->bytes += bytes;
            return RP_OK;
        }
    }
    if (w->ntraffic >= RP_PLAN_MAX_TRAFFIC)
        return RP_ERROR(RP_ERR_NOMEM, "a plan holds at most %d traffic lines; '%s' is one more",
                        RP_PLAN_MAX_TRAFFIC, what);
    rp_plan_traffic *l = &w->traffic[w->ntraffic++];
    memset(l, 0, sizeof *l);
    l->axis = axis;
    l->cls = cls;
    l->kind = kind;
    snprintf(l->what, sizeof l->what, "%s", what);
    l->calls = calls;
    l->bytes = bytes;
    return RP_OK;
}

void rp_plan_traffic_stats(const rp_plan_worker *w, rp_axis axis, rp_comm_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < w->ntraffic; i++) {
        const rp_plan_traffic *l = &w->traffic[i];
        if (l->axis != axis || (unsigned)l->cls >= RP_COMM_CLASSES ||
            (unsigned)l->kind >= RP_COMM_KINDS)
            continue;
        out->by[l->cls][l->kind].calls += (uint64_t)l->calls;
        out->by[l->cls][l->kind].bytes += (uint64_t)l->bytes;
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The sync strategy's buckets (strategy.c, rp_bucket_order_cut): how many, and the largest's
   values (into *most, if not NULL). */
static int sync_buckets(const rp_params *params, size_t bytes, int64_t *most)
{
    int n = 0;
    size_t filled = bytes;
    int64_t values = 0, largest = 0;
    for (int i = rp_params_trainable_count(params) - 1; i >= 0; i--) {
        if (filled >= bytes) {
            n++;
            filled = 0;
            values = 0;
        }
        filled += (size_t)rp_params_at(params, i)->numel * sizeof(float);
        values += rp_params_at(params, i)->numel;
        if (values > largest) largest = values;
    }
    if (most) *most = largest;
    return n;
}

/* The bf16 copy of the largest bucket the gradient reducer keeps for grad_dtype bf16. */
static int64_t wire_bytes(const rp_config *cfg, int64_t most)
{
    return cfg->grad_dtype == RP_BF16 ? (most > 1 ? most : 1) * (int64_t)sizeof(rp_bf16) : 0;
}

/* pipeline.c's shape header before each activation: ndim, then RP_MAX_DIMS dimensions (int32). */
#define PIPE_HEADER_BYTES ((int64_t)(1 + RP_MAX_DIMS) * 4)

rp_status rp_plan_pipeline(rp_plan_worker *w, rp_axis axis, int stage, int stages,
                           int micro_batches, int64_t in_floats, int64_t out_floats)
{
    if (!w || stages < 1 || stage < 0 || stage >= stages || micro_batches < 1 || in_floats < 0 ||
        out_floats < 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_plan_pipeline: stage %d of %d, %d micro-batches, %lld and %lld floats",
                        stage, stages, micro_batches, (long long)in_floats, (long long)out_floats);
    int64_t M = micro_batches, f = (int64_t)sizeof(float);
    if (stage > 0) {
        RP_CHECK(rp_plan_add_traffic(w, axis, RP_COMM_USER, RP_FLIGHT_RECV,
                                     "activations in (and shape headers)", 2 * M,
                                     M * (PIPE_HEADER_BYTES + in_floats * f)));
        RP_CHECK(rp_plan_add_traffic(w, axis, RP_COMM_USER, RP_FLIGHT_SEND, "their gradients back",
                                     M, M * in_floats * f));
    }
    if (stage < stages - 1) {
        RP_CHECK(rp_plan_add_traffic(w, axis, RP_COMM_USER, RP_FLIGHT_SEND,
                                     "activations out (and shape headers)", 2 * M,
                                     M * (PIPE_HEADER_BYTES + out_floats * f)));
        RP_CHECK(rp_plan_add_traffic(w, axis, RP_COMM_USER, RP_FLIGHT_RECV, "their gradients in", M,
                                     M * out_floats * f));
    }
    return RP_OK;
}

/*
 * The gradient all-reduce of a group of S members over T parameters in nb buckets
 * (strategy.c, rp_grad_reducer_init and rp_bucket_order_cut): the scratch of the non-finite
 * exchange, the buckets' ranges, each parameter's bucket list and the buckets' counters; plus
 * the strategy's checksum scratch (S x T hashes).
 */
static int64_t reducer_bytes(int S, int T, int nb)
{
    int64_t Tb = T > 0 ? T : 1, B = nb > 0 ? nb : 1;
    return (int64_t)S * 2 * 8 + Tb * 2 * 8 + ((int64_t)T + 1) * 4 + Tb * 4 + 2 * B * 4 +
           (int64_t)S * Tb * 8;
}

int64_t rp_plan_servers(const rp_config *cfg, const rp_params *params, const rp_optim_config *oc)
{
    if (!cfg || !params || !oc || cfg->sync_groups < 2 || cfg->regime != RP_REGIME_SYNC) return 0;
    int64_t slots = rp_optim_slots(oc);
    /* Each shard holds its values and at least one slot (ps.c, rp_ps_shard_create). */
    return rp_params_trainable_numel(params) * (int64_t)sizeof(float) *
           (1 + (slots > 0 ? slots : 1));
}

/* Sync groups: the group's gradient buckets, its parameter broadcast and its batch tickets. */
static rp_status plan_groups(const rp_config *cfg, int N, const rp_params *params,
                             rp_plan_worker *w)
{
    int G = cfg->sync_groups;
    if (N % G != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "sync_groups = %d does not divide the %d replicas: every group needs the "
                        "same number of replicas",
                        G, N);
    if (G == N)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "sync_groups = %d of %d replicas makes groups of one replica, which the "
                        "runtime trains asynchronously; the planner covers groups of 2 or more",
                        G, N);
    int S = N / G, T = rp_params_trainable_count(params);
    int64_t most = 0;
    int nb = sync_buckets(params, cfg->bucket_bytes, &most);
    int64_t P = rp_params_trainable_numel(params), bytes = P * (int64_t)sizeof(float);
    bool bf16 = cfg->grad_dtype == RP_BF16;
    w->groups = G;
    w->strategy = reducer_bytes(S, T, nb) + wire_bytes(cfg, most);
    RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
                                 bf16 ? "gradient buckets (mean, in the group, bf16)"
                                      : "gradient buckets (mean, in the group)",
                                 nb, P * (int64_t)rp_dtype_size(cfg->grad_dtype)));
    RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_BROADCAST,
                                 "parameters from the group's rank 0", 1, bytes));
    return rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_BROADCAST,
                               "the batch's ticket", 1, (int64_t)sizeof(int64_t));
}

rp_status rp_plan_runtime(const rp_config *cfg, int replicas, int id, const rp_params *params,
                          const rp_optim_config *oc, rp_plan_worker *w)
{
    if (!cfg || !params || !oc || !w)
        return RP_ERROR(RP_ERR_INVALID, "rp_plan_runtime: NULL argument");
    if (replicas < 1 || id < 0 || id >= replicas)
        return RP_ERROR(RP_ERR_INVALID, "rp_plan_runtime: worker %d of %d replicas", id, replicas);
    if (cfg->regime == RP_REGIME_ASYNC)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "the planner covers synchronous layouts (one replica, N replicas, "
                        "ZeRO-1, sync groups); async replicas talk to parameter servers at their "
                        "own pace");
    RP_CHECK(rp_optim_check(oc));
    int64_t P = rp_params_trainable_numel(params), slots = rp_optim_slots(oc);
    int T = rp_params_trainable_count(params), N = replicas;
    w->worker = id;
    w->replicas = replicas;
    w->params = rp_params_numel(params) * (int64_t)sizeof(float);
    w->grads = P * (int64_t)sizeof(float);
    w->optim = slots * P * (int64_t)sizeof(float);
    w->strategy = 0;
    w->groups = 1;
    if (cfg->sync_groups > 1) return plan_groups(cfg, N, params, w);
    /* One replica: the optimizer is not wrapped (no collective, no buffer). */
    if (N == 1) return RP_OK;
    size_t bytes = cfg->bucket_bytes;
    /* Gradients on the wire: f32, or bf16 (cfg.grad_dtype). */
    int64_t g = (int64_t)rp_dtype_size(cfg->grad_dtype);
    bool bf16 = cfg->grad_dtype == RP_BF16;
    if (!cfg->zero) {
        int64_t most = 0;
        int nb = sync_buckets(params, bytes, &most);
        int Tc = T > 2 ? T : 2, Tb = T ? T : 1;
        /* The checksum scratch, each parameter's bucket and the buckets (strategy_sync.c). */
        w->strategy = (int64_t)N * Tc * 8 + (int64_t)Tb * (int64_t)sizeof(int) + (int64_t)Tb * 24 +
                      wire_bytes(cfg, most);
        return rp_plan_add_traffic(
            w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
            bf16 ? "gradient buckets (mean, bf16)" : "gradient buckets (mean)", nb, P * g);
    }
    int64_t S = (P + N - 1) / N, c = (int64_t)(bytes / (sizeof(float) * (size_t)N));
    c = c < 1 ? 1 : c > S ? S : c;
    int64_t nb = S > 0 ? (S + c - 1) / c : 0;
    int64_t lo = min64((int64_t)id * S, P), hi = min64(lo + S, P);
    w->optim = slots * (hi - lo) * (int64_t)sizeof(float);
    int Tz = T > 3 ? T : 3;
    /* The reduced shard, one bucket's segments packed, this replica's segment, the scratch. */
    w->strategy = (int64_t)N * Tz * 8;
    if (S > 0) w->strategy += (S + (int64_t)N * c + c) * (int64_t)sizeof(float);
    /* bf16: the bucket's segments rounded, and the reduced segment (strategy_zero.c). */
    if (S > 0 && bf16) w->strategy += ((int64_t)N + 1) * c * (int64_t)sizeof(rp_bf16);
    RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_REDUCE_SCATTER,
                                 bf16 ? "gradient shards (mean, bf16)" : "gradient shards (mean)",
                                 nb, S * g));
    RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_ALL_GATHER,
                                 "parameter shards", nb, S * (int64_t)sizeof(float)));
    return rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_RUNTIME, RP_FLIGHT_ALL_GATHER,
                               "gradient finiteness exchange", 1, 3 * 8);
}
