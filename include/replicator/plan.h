/*
 * replicator/plan.h - the planner's runtime share: what a worker of a
 * layout will hold and send, predicted before anything runs (`replicator
 * plan`, `replicator train --plan-check`).
 *
 * A plan is one rp_plan_worker per worker: its memory (parameters,
 * gradients, optimizer state, the strategy's buffers, activations, loader
 * buffers) and its traffic per training step, one line per (axis, class,
 * kind, what). The runtime fills what it decides - the optimizer state each
 * worker keeps, the strategy's buffers and collectives (rp_plan_runtime);
 * the model fills what only it knows (activations, the layers' own
 * collectives such as cross-replica batch norm's sums) and adds its lines
 * with rp_plan_add_traffic.
 *
 * Traffic is in the units of the communicators' counters (rp_comm_stats,
 * replicator/comm.h): calls and payload bytes (count x dtype size as
 * passed) per member, so a prediction is compared with a measured step
 * exactly. The runtime's housekeeping (report gathers, the parameter
 * checksum every cfg.checksum_every steps) is not in a plan: it is counted
 * apart (RP_COMM_HOUSEKEEPING) and depends on what a step reports.
 *
 * Layouts: one replica, N synchronous data-parallel replicas (the sync
 * strategy's bucketed all-reduce), ZeRO-1 (RP_STRATEGY_ZERO1) and sync groups
 * (RP_STRATEGY_SYNC_GROUPS, G < N: the sync strategy's buckets over each group's
 * communicator, the group's parameter broadcast and batch ticket; the
 * pushes and pulls of the in-process parameter servers are memory copies,
 * not communicator calls, and are not lines of a plan). Tensor parallelism
 * is the model's share (its blocks' collectives on the model axis); the
 * runtime plans the data axis of a worker's shard as of any parameter
 * list. An async layout is RP_ERR_UNSUPPORTED (its traffic goes to
 * parameter servers and depends on timing, not on the layout alone).
 */
#ifndef REPLICATOR_PLAN_H
#define REPLICATOR_PLAN_H

#include "comm.h"
#include "nn.h"
#include "optim.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Where a line's calls go besides the mesh's axes: the sync group's
 * communicator (rp_replica_sync_comm under cfg.sync_groups), which is no
 * axis of the mesh. A line's axis is an rp_axis or this.
 */
#define RP_PLAN_GROUP ((rp_axis)RP_AXES)

/*
 * HSDP's two communicators (cfg.hsdp, rp_replica_hsdp_comm), neither an axis of the mesh either:
 * the group of replicas that shard the state between them, and the replicas of the other
 * groups that hold the same shard.
 */
#define RP_PLAN_SHARD     ((rp_axis)(RP_AXES + 1))
#define RP_PLAN_REPLICATE ((rp_axis)(RP_AXES + 2))

/* One line of a worker's traffic in one step. */
typedef struct rp_plan_traffic {
    rp_axis axis;      /* an axis of the mesh, RP_PLAN_GROUP, RP_PLAN_SHARD or RP_PLAN_REPLICATE */
    rp_comm_class cls; /* RP_COMM_USER (the model's layers) or RP_COMM_RUNTIME */
    rp_flight_kind kind;
    char what[48]; /* e.g. "gradient buckets", "batch norm sums" */
    int64_t calls; /* per step */
    int64_t bytes; /* payload bytes per step (rp_comm_stats' definition) */
} rp_plan_traffic;

#define RP_PLAN_MAX_TRAFFIC 16

/* What one worker holds and sends; bytes unless named otherwise. */
typedef struct rp_plan_worker {
    int worker;          /* its id on the data axis (the replica id); the plan's caller may
                            renumber it as the job's worker (rp_replica_worker) */
    int replicas;        /* data-parallel replicas in the layout */
    int stage, stages;   /* a model cut into pipeline stages: this worker's (0 and 1: whole) */
    int shard, shards;   /* tensor parallelism: this worker's shard of each split block, its model
                            coordinate (0 and 1: whole) */
    int groups;          /* sync groups of the replicas (1: none) */
    int batch;           /* samples per step on this worker */
    int64_t params;      /* parameters and buffers (e.g. batch norm's running statistics) */
    int64_t grads;       /* the gradient block: trainable values */
    int64_t optim;       /* optimizer state: slots x the values this worker updates */
    int64_t strategy;    /* the strategy's own buffers (ZeRO-1: shard, packing, scratch) */
    int64_t held;        /* ZeRO-3: the values, gradients, optimizer state and reduced-gradient
                            shard resident at the step's peak (the blocks are allocated whole:
                            params and grads count them so); 0 for the other strategies, where
                            it is params + grads + optim + strategy */
    int64_t activations; /* the tape arena's live peak in one step (rp_arena_stats.live_peak); a
                            pipeline stage: its tapes alive at once x one micro-batch's peak */
    int64_t loader;      /* the input's buffers (batches in flight, epoch order) */
    int ntraffic;
    rp_plan_traffic traffic[RP_PLAN_MAX_TRAFFIC];
} rp_plan_worker;

/*
 * Fills the runtime's share of worker `id` (0 <= id < replicas) of the
 * layout cfg (its strategy, rp_config_strategy(); sync_groups, bucket_bytes,
 * grad_dtype) when it trains `params` with the optimizer `oc`, as the
 * strategy's own table predicts it: w->worker, replicas, groups, params,
 * grads, optim, strategy, and the strategy's traffic lines (appended): on
 * the data axis, or with sync groups on RP_PLAN_GROUP - the gradient
 * buckets over the group, the parameters broadcast from the group's rank 0
 * after its exchange with the servers, and the batch ticket broadcast in
 * the group once per batch (rp_replica_next_batch). With sync groups
 * w->optim is the optimizer's own block (every replica keeps one for
 * checkpoints); the state the updates use lives on the servers
 * (rp_plan_servers). With HSDP (cfg.hsdp = G, a ZeRO stage) the shards are
 * the group's (P / G values), the reductions and gathers run on
 * RP_PLAN_SHARD, the shard's all-reduce across the groups on
 * RP_PLAN_REPLICATE and the finiteness agreement on the data axis. The rest
 * of *w is left as it is. Errors:
 * RP_ERR_INVALID (NULL argument, id out of range, groups that do not
 * divide the replicas, a bad optimizer configuration, a strategy that is
 * not an rp_strategy_kind), RP_ERR_UNSUPPORTED
 * (async, and sync groups of one replica each, which the runtime runs as
 * async), RP_ERR_NOMEM (more than RP_PLAN_MAX_TRAFFIC lines).
 */
RP_API rp_status rp_plan_runtime(const rp_config *cfg, int replicas, int id,
                                 const rp_params *params, const rp_optim_config *oc,
                                 rp_plan_worker *w);

/*
 * The in-process parameter servers of a sync-group layout
 * (RP_STRATEGY_SYNC_GROUPS), process-wide: cfg.ps shards of `params`' trainable values, each
 * holding its values and its optimizer slots (at least one). 0 for another
 * layout.
 */
RP_API int64_t rp_plan_servers(const rp_config *cfg, const rp_params *params,
                               const rp_optim_config *oc);

/*
 * Adds calls and bytes to w's line (axis, cls, kind, what), creating it.
 * Errors: RP_ERR_INVALID (NULL argument), RP_ERR_NOMEM (no room for a line).
 */
RP_API rp_status rp_plan_add_traffic(rp_plan_worker *w, rp_axis axis, rp_comm_class cls,
                                     rp_flight_kind kind, const char *what, int64_t calls,
                                     int64_t bytes);

/*
 * Adds the messages of pipeline stage `stage` of `stages` (nn.h,
 * rp_pipeline_run) in one run of `micro_batches` micro-batches, on `axis`:
 * for each micro-batch, from the previous stage a shape header and the
 * input activation (in_floats floats), and back to it the activation's
 * gradient; to the next stage a header and the output activation
 * (out_floats), and back from it its gradient. Class RP_COMM_USER (the
 * pipeline is a layer's work, not the runtime's). Errors: RP_ERR_INVALID
 * (NULL w, stage outside [0, stages), micro_batches < 1, negative sizes),
 * rp_plan_add_traffic's.
 */
RP_API rp_status rp_plan_pipeline(rp_plan_worker *w, rp_axis axis, int stage, int stages,
                                  int micro_batches, int64_t in_floats, int64_t out_floats);

/*
 * The predicted traffic of w as counters: out->by[cls][kind] summed over w's
 * lines of `axis` (for a direct comparison with a measured rp_comm_stats
 * difference over one step).
 */
RP_API void rp_plan_traffic_stats(const rp_plan_worker *w, rp_axis axis, rp_comm_stats *out);

/* "data", "model", "pipe", "group" (RP_PLAN_GROUP), "shard", "replicate" (HSDP's). */
RP_API const char *rp_plan_axis_name(rp_axis axis);

#ifdef __cplusplus
}
#endif

#endif
