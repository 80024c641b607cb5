/*
 * resnet.h - residual networks (He et al. 2016), written against the public
 * API only:
 *  - ResNet-20: CIFAR-style, 3 stages of 3 basic blocks (16/32/64 channels),
 *    for 28x28 and 32x32 inputs;
 *  - ResNet-18 and ResNet-50: ImageNet-style (7x7 stem and max pool; basic
 *    or bottleneck blocks [2,2,2,2] / [3,4,6,3]), ResNet-50 v1.5 with the
 *    stride on the 3x3 convolution, for 224x224 inputs.
 * Shortcuts are identity where shapes allow, else a 1x1 convolution and batch
 * norm (projection). Convolutions have no bias. Images are NHWC.
 */
#ifndef RP_MODELS_RESNET_H
#define RP_MODELS_RESNET_H

#include "replicator/replicator.h"

typedef enum { RP_RESNET20, RP_RESNET18, RP_RESNET50 } rp_resnet_kind;

typedef struct rp_resnet_config {
    rp_resnet_kind kind;
    int in_channels; /* 1 for Fashion-MNIST, 3 for CIFAR and ImageNet */
    int classes;
    bool zero_init_residual; /* last BN gamma of each block starts at 0 (Goyal et al. 2017) */
    /*
     * Cross-replica batch norm: NULL, or the communicator whose members'
     * batches every BN's statistics cover (rp_bn_params.comm), e.g. the
     * replica's data axis, rp_replica_axis_comm(rep, RP_AXIS_DATA). Not owned;
     * it must outlive the network's forward and backward passes.
     */
    rp_comm *bn_comm;
    /* Deprecated (use bn_comm): a reduction hook for every BN, such as
       rp_cross_replica_bn with the replica as ctx. Setting both is RP_ERR_INVALID. */
    rp_bn_reduce_fn bn_reduce;
    void *bn_reduce_ctx;
    /*
     * Recompute rather than store the batch norm + ReLU outputs inside each block (the input of
     * its second and third convolutions): each is dropped once that convolution has read it and
     * recomputed in backward (rp_tape_drop), bitwise the same gradients. Less memory (ResNet-50
     * b32: 3.56 GB peak instead of 3.94) for one more pass over each of them, a cost within the
     * noise of the step time (docs/benchmarks.md, "Memory and speed"). Default true.
     */
    bool recompute_bn;
    /*
     * Logical devices: build and run units [first_unit, last_unit) only (see "Units" below), the
     * worker's stage of a network split across workers. 0 and 0 (the default): every unit, the
     * whole network. Each parameter built has its whole network's initial value under the same
     * seed (values depend on the seed and the parameter's name only), so the stages of a split
     * network together start as the unsplit one.
     */
    int first_unit, last_unit;
    /*
     * Tensor parallelism (Megatron-LM, nn.h's tensor-parallel layers): NULL, or the communicator
     * whose T members split every residual block's convolutions between them - the replica's
     * model axis, rp_replica_axis_comm(rep, RP_AXIS_MODEL). NULL or a 1-member communicator is
     * the dense network, bitwise as without the field. With T > 1, each block costs one
     * all-reduce forward and one backward over this communicator:
     *  - basic block (ResNet-20, -18): conv1 column-parallel (output channels split), bn1 local
     *    on the member's width/T channels, conv2 row-parallel (input channels split; its
     *    all-reduce makes the block's output replicated), bn2 replicated;
     *  - bottleneck (ResNet-50): conv1 (1x1) and bn1 replicated, conv2 (3x3) column-parallel,
     *    bn2 local on width/T channels, conv3 (1x1) row-parallel, bn3 replicated.
     * The stem, the shortcut projections and fc are replicated: every member holds them whole
     * and computes them on the same values, and their gradients come out bitwise equal on every
     * member (the backward's all-reduce sits at the column convolution's input, so every
     * replicated tensor's gradient is the same sum on every member; docs/model-parallel.md).
     * Parameters keep the dense names; a split one holds this member's slice (rp_params_add_shard
     * and, for batch norm, the same constant initial values), so at step 0 the members together
     * hold exactly the dense network of the same seed. Every member must build the network with
     * the same configuration and seed, and run every forward and backward in step with the
     * others. Each split dimension (every block's width; T must divide it) is checked at create:
     * RP_ERR_SHAPE naming the layer. Not owned; it must outlive the network.
     */
    rp_comm *tp_comm;
} rp_resnet_config;

rp_resnet_config rp_resnet_config_default(rp_resnet_kind kind);

/* Parses "resnet20", "resnet18", "resnet50"; false if unknown. */
bool rp_resnet_kind_parse(const char *name, rp_resnet_kind *kind);
const char *rp_resnet_kind_name(rp_resnet_kind kind);

typedef struct rp_resnet rp_resnet;

/* Builds the network and its parameters, initialised from `seed`. RP_ERR_INVALID for both
   bn_comm and bn_reduce set. */
rp_status rp_resnet_create(rp_resnet **net, const rp_resnet_config *cfg, uint64_t seed);
void rp_resnet_destroy(rp_resnet *net);

/* The network's parameters (owned by the network). */
rp_params *rp_resnet_params(const rp_resnet *net);

/*
 * x [N,H,W,C] -> logits [N,classes]. `training` selects batch statistics
 * (and updates the running ones) or running statistics.
 */
rp_tensor *rp_resnet_forward(rp_tape *t, const rp_resnet *net, rp_tensor *x, bool training);
/*
 * The same, and *features (if not NULL) gets the pooled features the head
 * sees, [N, channels] (64 for ResNet-20): what a Frechet distance on a
 * domain classifier compares. *features is NULL when the forward fails.
 */
rp_tensor *rp_resnet_forward_features(rp_tape *t, const rp_resnet *net, rp_tensor *x, bool training,
                                      rp_tensor **features);

/*
 * Units. A ResNet is a chain of units, the pieces a network split across
 * workers is cut between: unit 0 is the stem (convolution, batch norm and
 * ReLU, and the ImageNet stem's max pool), units 1 .. B the residual blocks
 * in order, unit B + 1 the head (global average pool and the classifier).
 * ResNet-20 has 11 units, ResNet-18 10, ResNet-50 18. A network built with
 * units [a, b) (rp_resnet_config.first_unit/last_unit) takes, in
 * rp_resnet_forward, the images when a = 0 and otherwise the activation unit
 * a - 1 returns, [N, H, W, C] as rp_resnet_unit_info says; it returns unit
 * b - 1's output: the logits when it holds the head, else an activation.
 */
int rp_resnet_units(rp_resnet_kind kind);
#define RP_RESNET_MAX_UNITS 18 /* ResNet-50's */

/* What one unit is: its name ("stem", "stage2.block0", "head"), its trainable parameters and
 * batch-norm buffers, its forward FLOPs per example (multiply-adds x 2 of its convolutions and
 * its classifier), and its output per example, h x w x c (head: 1 x 1 x classes). */
typedef struct rp_resnet_unit_info {
    char name[32];
    int64_t params;  /* trainable values */
    int64_t buffers; /* running statistics */
    double flops;    /* forward, per example */
    int out_h, out_w, out_c;
} rp_resnet_unit_info;

/*
 * Unit `unit` of cfg's network for h x w images (cfg->in_channels,
 * cfg->classes; first_unit/last_unit ignored). Errors: RP_ERR_INVALID (NULL,
 * a bad kind, h or w below 1, unit outside [0, rp_resnet_units)).
 */
rp_status rp_resnet_unit_info_get(const rp_resnet_config *cfg, int h, int w, int unit,
                                  rp_resnet_unit_info *info);

/*
 * Cuts cfg's network into `stages` contiguous runs of units of balanced cost
 * (the largest stage's forward FLOPs as small as it can be): stage s holds
 * units [bounds[s], bounds[s + 1]), bounds[0] = 0, bounds[stages] = the unit
 * count, every stage at least one unit. bounds holds stages + 1 ints.
 * Errors: RP_ERR_INVALID (NULL, stages below 1 or above the unit count,
 * naming both, and rp_resnet_unit_info_get's).
 */
rp_status rp_resnet_partition(const rp_resnet_config *cfg, int h, int w, int stages, int *bounds);

/*
 * Checkpoints of a tensor-parallel network stay logical: they hold the dense network's tensors.
 * `dense` is the parameter list of a dense network of the same configuration but tp_comm NULL
 * (rp_resnet_params of rp_resnet_create; the same units, for a stage of a split network), or
 * any list whose trainable parameters and buffers are that network's names and shapes, in any
 * order.
 *
 * rp_resnet_gather_dense fills every value of `dense` (trainable parameters and buffers, such as
 * batch norm's running statistics) from the members' shards: a replicated tensor is copied from
 * this member, a split one is all-gathered over cfg.tp_comm and each member's slice put in its
 * place (rp_tp_shard_place). Collective over tp_comm: every member calls it, with the same
 * `dense` names in the same order, and every member ends with the same dense values.
 * rp_resnet_scatter_dense is its inverse and needs no collective: each member copies its own
 * slice of every split tensor and the whole of every replicated one (rp_tp_shard_copy) into its
 * network. Scatter after gather restores each member's values bitwise, and a dense network's
 * values scattered into a tensor-parallel one (and gathered back) are bitwise the same, so a
 * tensor-parallel run resumes from a dense checkpoint and vice versa. Without tensor
 * parallelism (tp_comm NULL or of 1 member) both copy tensor by tensor.
 *
 * The _state forms move an optimizer's state the same way: `shard_opt` is an optimizer over this
 * network's list, `dense_opt` one over `dense`, with the same rule (SGD momentum's 1 slot,
 * Adam's 2); gather sets dense_opt's state and step count from shard_opt's, scatter shard_opt's
 * from dense_opt's. The state moves through in-memory checkpoints (rp_checkpoint_add_optimizer
 * and rp_checkpoint_read_optimizer), so a sharded shard_opt (ZeRO-1, rp_optimizer_set_range)
 * takes its range's part when scattering, and must hold its whole state when gathering
 * (rp_replica_optimizer_fetch).
 *
 * Errors: RP_ERR_INVALID (NULL), RP_ERR_SHAPE naming the tensor when a dense name is
 * missing from the network or its shape is neither the network's nor T times it along one axis,
 * the checkpoint calls' errors (optimizers of different rules, a sharded one gathered),
 * RP_ERR_NOMEM, and the collectives' errors (a member that fails before a collective makes its
 * peers fail in it, RP_ERR_TIMEOUT or RP_ERR_COMM, never a hang). Thread-safety: one thread per
 * member; not concurrently with a step.
 */
rp_status rp_resnet_gather_dense(const rp_resnet *net, rp_params *dense);
rp_status rp_resnet_scatter_dense(rp_resnet *net, const rp_params *dense);
rp_status rp_resnet_gather_state(const rp_resnet *net, const rp_optimizer *shard_opt,
                                 const rp_params *dense, rp_optimizer *dense_opt);
rp_status rp_resnet_scatter_state(const rp_resnet *net, rp_optimizer *shard_opt,
                                  const rp_params *dense, const rp_optimizer *dense_opt);

/* T, the network's tensor-parallel degree: tp_comm's size, 1 without it. */
int rp_resnet_tp_size(const rp_resnet *net);

#endif
