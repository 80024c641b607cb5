/*
 * classifier_plan.h - the planner for the classifier (an MLP or a ResNet
 * trained by `replicator train`): what each worker of a layout will hold and
 * send in a training step, predicted before anything trains.
 *
 * The runtime predicts what it decides (rp_plan_runtime: parameters,
 * gradients, optimizer state and the strategy's buffers and collectives);
 * this file adds what only the model knows:
 *  - activations: the worker's network is built once and ONE training step
 *    (forward, loss, backward) is recorded on a scratch tape at batch 1 and
 *    at batch 2 (at 2 and 4 for a stage whose batch norm sees a 1x1 image,
 *    as ResNet-50's last units on 28x28 images: training batch norm needs 2
 *    values per channel); the arena's live peak is affine in the batch
 *    (every activation and gradient is a per-sample size times the batch,
 *    plus per-step constants such as batch norm's statistics), so the two
 *    points give peak(B) = a + b x B for the worker's batch B. A layout
 *    whose micro-batch leaves a batch norm fewer than 2 values per channel
 *    (over the replicas in sync) cannot train, and is refused, naming the
 *    unit and the options to change;
 *  - the layers' own collectives: the same recording runs cross-replica
 *    batch norm over a one-member communicator and reads its counters
 *    (rp_comm_stats): the calls and bytes of a step do not depend on the
 *    batch or on the number of members;
 *  - the loader's buffers: the batches in flight (two with prefetch) and the
 *    epoch's order;
 *  - a model cut into pipeline stages (--model-parallel): each stage's part
 *    is recorded on its own, the messages between stages follow from the
 *    units' output sizes (rp_plan_pipeline), plus the labels sent from stage
 *    0 to the last and the loss broadcast back;
 *  - tensor parallelism (--tensor-parallel T): each stage's part is built
 *    and recorded on T threads over a T-member threads communicator, as the
 *    trainer builds it on the model axis, so each worker's parameters,
 *    gradients and optimizer state are its shard's; the blocks'
 *    all-reduces on the model axis are read off that communicator's
 *    counters at the two recorded batches: the calls do not depend on the batch, the
 *    bytes are affine in it (every message is an activation or its
 *    gradient), so the two points give them at the worker's batch;
 *  - sync groups (--sync-groups G): each replica trains its share of a
 *    group's batch; batch norm's sums, the runtime's lines and the
 *    trainer's stop agreement before each batch (loop.c) go over the
 *    group's communicator (RP_PLAN_GROUP); the servers' shards are
 *    process-wide (rp_plan_servers).
 */
#ifndef RP_MODELS_CLASSIFIER_PLAN_H
#define RP_MODELS_CLASSIFIER_PLAN_H

#include "models/classifier/classifier.h"

/* One pipeline stage's recorded step (the whole network's when not cut). */
typedef struct rp_classifier_plan_stage {
    int probe_batch[2];    /* the recorded batches: 1 and 2, or k and 2k where batch norm needs
                              k examples to see 2 values per channel (1x1 pixels: k = 2) */
    int64_t probe_peak[2]; /* the arena's live peak of one step at each recorded batch */
    double act_a, act_b;   /* the fit: live peak = act_a + act_b x batch */
    int tapes;             /* micro-batches alive at once (GPipe M; 1F1B min(P - i - 1, M) + 1) */
    int64_t in_floats, out_floats; /* per example: the input it receives, the output it sends */
    rp_comm_stats model[2];        /* tensor parallelism: the model axis's counters in the step at
                                      each recorded batch (every member's: the recording requires
                                      them equal) */
} rp_classifier_plan_stage;

typedef struct rp_classifier_plan {
    int replicas;          /* data-parallel replicas */
    int groups;            /* sync groups of the replicas (1: none) */
    int in_sync;           /* replicas that share each batch: all of them, or a group's */
    int stages;            /* pipeline stages per replica (1: the whole model) */
    int tp;                /* tensor-parallel workers per stage (1: none) */
    int micro_batches;     /* M: micro-batches of each replica's batch through rp_pipeline_run
                              (on one worker too: gradient accumulation); 1: all at once */
    int batch;             /* per replica: the global batch over in_sync */
    int micro;             /* examples per micro-batch: batch / micro_batches */
    int64_t datasets;      /* both splits in memory (process-wide, shared by the workers) */
    int64_t kernel_caches; /* rp_kernels_cache_bytes() after the probe: batch 2's shapes
                              (process-wide; shown, not predicted for the worker's batch) */
    int64_t servers;       /* sync groups: the parameter servers' shards (rp_plan_servers; 0
                              otherwise): in-process, or on server ranks when server_ranks */
    bool server_ranks;     /* under MPI the servers are the job's last ranks (the caller sets it) */
    rp_classifier_plan_stage *stage; /* [stages] */
    int workers;                     /* replicas x stages x tp */
    rp_plan_worker *worker; /* [workers]: worker w is shard w % tp of stage w / tp % stages of
                               replica w / (stages x tp), as the runtime numbers them
                               (rp_replica_worker) */
} rp_classifier_plan;

/*
 * Plans clf's training on the layout rcfg (its regime, zero, sync_groups,
 * bucket_bytes) with `replicas` data-parallel replicas in all
 * (rcfg->replicas is per process under MPI), each cut into `stages`
 * pipeline stages (1: not cut) that run clf->cfg's schedule over its
 * micro_batches, each stage split over `tp` tensor-parallel workers (1:
 * not split): one rp_plan_worker per worker. Builds each stage's network
 * and records two steps of it (a second or so for ResNet-50 at 224x224;
 * with tp > 1 on tp threads at once); trains nothing. A stage's activations
 * are its tapes alive at once (rp_pipeline_run keeps one per micro-batch in
 * flight) times one micro-batch's recorded peak: a bound, since a tape that
 * finished its backward holds less. Errors: RP_ERR_INVALID (a batch that
 * does not split across the replicas in sync or into the micro-batches,
 * a micro-batch too small for batch norm's 2 values per channel, naming
 * the unit, recorded steps whose collectives differ between the two
 * batches), the
 * runtime's (rp_plan_runtime: RP_ERR_UNSUPPORTED for async), the
 * network's (RP_ERR_UNSUPPORTED: an MLP cut into stages or split;
 * RP_ERR_SHAPE: a width that tp does not divide).
 */
rp_status rp_classifier_plan_create(rp_classifier_plan **plan, const rp_classifier *clf,
                                    const rp_config *rcfg, int replicas, int stages, int tp);
void rp_classifier_plan_destroy(rp_classifier_plan *plan);

/* The optimizer configuration the classifier trains with (as its build makes it). */
rp_optim_config rp_classifier_optim_config(const rp_classifier_config *cfg);

#endif
