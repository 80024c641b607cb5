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
 *    at batch 2; the arena's live peak is affine in the batch (every
 *    activation and gradient is a per-sample size times the batch, plus
 *    per-step constants such as batch norm's statistics), so the two points
 *    give peak(B) = a + b x B for the worker's batch B;
 *  - the layers' own collectives: the same recording runs cross-replica
 *    batch norm over a one-member communicator and reads its counters
 *    (rp_comm_stats): the calls and bytes of a step do not depend on the
 *    batch or on the number of members;
 *  - the loader's buffers: the batches in flight (two with prefetch) and the
 *    epoch's order.
 */
#ifndef RP_MODELS_CLASSIFIER_PLAN_H
#define RP_MODELS_CLASSIFIER_PLAN_H

#include "models/classifier/classifier.h"

typedef struct rp_classifier_plan {
    int replicas;            /* data-parallel replicas */
    int batch;               /* per worker */
    int64_t probe_peak[2];   /* the arena's live peak of one step at batch 1 and 2 */
    double act_a, act_b;     /* the fit: live peak = act_a + act_b x batch */
    int64_t datasets;        /* both splits in memory (process-wide, shared by the workers) */
    int64_t kernel_caches;   /* rp_kernels_cache_bytes() after the probe: batch 2's shapes
                                (process-wide; shown, not predicted for the worker's batch) */
    rp_plan_worker *workers; /* [replicas] */
} rp_classifier_plan;

/*
 * Plans clf's training on the layout rcfg with `replicas` data-parallel
 * replicas in all (rcfg->replicas is per process under MPI): one
 * rp_plan_worker each. Builds the network and records two steps (a second
 * or so for ResNet-50 at 224x224); trains nothing. Errors: RP_ERR_INVALID
 * (a batch that does not split across the replicas), the runtime's
 * (rp_plan_runtime: RP_ERR_UNSUPPORTED for async), the network's.
 */
rp_status rp_classifier_plan_create(rp_classifier_plan **plan, const rp_classifier *clf,
                                    const rp_config *rcfg, int replicas);
void rp_classifier_plan_destroy(rp_classifier_plan *plan);

/* The optimizer configuration the classifier trains with (as its build makes it). */
rp_optim_config rp_classifier_optim_config(const rp_classifier_config *cfg);

#endif
