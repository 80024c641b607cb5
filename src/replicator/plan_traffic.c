/*
 * plan_traffic.c - the lines of a plan (replicator/plan.h): adding traffic,
 * summing it as counters, naming the axes, and the pipeline's messages. A
 * leaf that the strategies' plan slots and the models' planners call.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/plan.h"

const char *rp_plan_axis_name(rp_axis axis)
{
    static const char *names[] = {"data", "model", "pipe", "group", "shard", "replicate"};
    return (unsigned)axis <= (unsigned)RP_PLAN_REPLICATE ? names[axis] : "?";
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
