/*
 * replicator/nn.h - the named parameter list of a model, initialisers and
 * layers (linear, conv2d, batch norm; tensor-parallel linear, convolution and
 * softmax cross-entropy; spectral-normalised and conditional layers and hinge
 * losses for GANs), and the pipeline schedules that run a model cut into
 * stages (GPipe, 1F1B).
 *
 * A model is built in two phases. First its layers declare parameters with
 * rp_params_add() (shapes, names, initialisers); then rp_params_finalize()
 * allocates one contiguous block for all parameter values and one for all
 * gradients, and initialises the values from a seed. Parameter names are
 * stable: checkpoints and cross-replica synchronisation use them. The random
 * numbers of a parameter depend only on the seed and its name, so adding a
 * layer does not change the initial values of the others.
 *
 * Trainable parameters come first in both blocks, in declaration order;
 * non-trainable buffers (batch-norm running statistics) follow in the value
 * block and have no gradient.
 *
 * Thread-safety: a parameter list is used by one replica at a time.
 */
#ifndef REPLICATOR_NN_H
#define REPLICATOR_NN_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RP_INIT_ZEROS,
    RP_INIT_CONSTANT,       /* value */
    RP_INIT_NORMAL,         /* N(0, value^2) */
    RP_INIT_UNIFORM,        /* U(-value, value) */
    RP_INIT_HE_NORMAL,      /* N(0, 2/fan_in): Kaiming, for ReLU */
    RP_INIT_HE_UNIFORM,     /* U(-b, b), b = sqrt(6/fan_in) */
    RP_INIT_GLOROT_NORMAL,  /* N(0, g^2 * 2/(fan_in+fan_out)), g = value (0: 1) */
    RP_INIT_GLOROT_UNIFORM, /* U(-b, b), b = g * sqrt(6/(fan_in+fan_out)), g = value (0: 1) */
} rp_init_kind;

typedef struct rp_init {
    rp_init_kind kind;
    float value; /* constant, the scale of NORMAL/UNIFORM, or Glorot's gain (0 means 1) */
    int fan_in;  /* inputs feeding one output unit (e.g. kh*kw*c) */
    int fan_out; /* outputs fed by one input unit (e.g. kh*kw*o) */
} rp_init;

typedef struct rp_params rp_params;

RP_API rp_status rp_params_create(rp_params **params);
/* Frees the list, its blocks and every rp_tensor it handed out. */
RP_API void rp_params_destroy(rp_params *params);

/*
 * Declares a parameter (trainable) or buffer (not trainable). Returns a stable
 * pointer whose data is NULL until rp_params_finalize(). NULL on error: a
 * duplicate or too long name, a bad shape, or a list already finalized.
 */
RP_API rp_tensor *rp_params_add(rp_params *params, const char *name, int ndim, const int *shape,
                                rp_init init, bool trainable);

/*
 * Declares this member's shard of a tensor split over `size` members along
 * `axis` (tensor parallelism): the parameter's shape is dense_shape with
 * dense_shape[axis] / size in place of dense_shape[axis], and its initial
 * values are the slice [rank * k, (rank + 1) * k) along `axis` (k =
 * dense_shape[axis] / size) of the values rp_params_add(name, dense_shape,
 * init) would get from the same seed. So M members that declare their shards
 * under the dense name hold, together, exactly the dense parameter (fan_in and
 * fan_out in `init` are the dense tensor's). Errors: rp_params_add's;
 * RP_ERR_INVALID for an axis outside [0, ndim) or a rank outside [0, size);
 * RP_ERR_SHAPE when size does not divide dense_shape[axis].
 */
RP_API rp_tensor *rp_params_add_shard(rp_params *params, const char *name, int ndim,
                                      const int *dense_shape, rp_init init, bool trainable,
                                      int axis, int rank, int size);

/*
 * Marks tensor t, declared with this member's shape (rp_params_add), as
 * member `rank`'s slice along `axis` of a tensor `size` times as large there:
 * what rp_params_add_shard declares in one call, for a layer that declares
 * its tensors itself (batch norm after a column-split convolution). Before
 * rp_params_finalize; the initial values become the slice's (the same for a
 * constant initialiser). size 1 leaves t whole. Errors: RP_ERR_INVALID (t
 * not in the list, the list finalized, axis or rank out of range).
 */
RP_API rp_status rp_params_mark_shard(rp_params *params, const rp_tensor *t, int axis, int rank,
                                      int size);

/*
 * Whether tensor i (rp_params_at's order) is a member's slice of a dense
 * tensor (rp_params_add_shard, rp_params_mark_shard), and which: the split
 * axis, this member's rank and the member count (any pointer may be NULL).
 * The dense tensor's size along the axis is the slice's times *size; its
 * slice starts at *rank times the slice's. False for a whole tensor (or an
 * index out of range). A sharded checkpoint written by every worker stores
 * such a tensor as that slice of the dense one, and reading a checkpoint
 * into the list takes the slice (replicator/io.h).
 */
RP_API bool rp_params_shard_of(const rp_params *params, int i, int *axis, int *rank, int *size);

/*
 * Allocates the blocks and initialises every value from `seed`; gradients
 * start at zero. After this, no parameter can be added.
 */
RP_API rp_status rp_params_finalize(rp_params *params, uint64_t seed);

/*
 * Guards: checks of a list's declared parameters that rp_params_finalize runs before it allocates
 * anything, for a caller that builds a model from a configuration it does not trust (one read
 * from a checkpoint, say) and must refuse tensors that will not match before allocating them: a
 * crafted configuration can declare gigabytes. Before finalize, rp_params_at(params, i) for i in
 * [0, rp_params_count) gives each declared tensor (name, ndim, shape, numel; data NULL).
 *
 * push installs `fn` on the calling thread for every list finalized there until the matching
 * pop; guards nest (all installed run, innermost first, and the first error is finalize's, with
 * nothing allocated). Thread-local: other threads' builds are unaffected. Errors of push:
 * RP_ERR_INVALID for a NULL fn or more than RP_PARAMS_GUARDS at once.
 */
#define RP_PARAMS_GUARDS 8
typedef rp_status (*rp_params_guard_fn)(const rp_params *params, void *arg);
RP_API rp_status rp_params_guard_push(rp_params_guard_fn fn, void *arg);
RP_API void rp_params_guard_pop(void);

/* Re-runs the initialisers with a new seed (values only). */
RP_API rp_status rp_params_reinit(rp_params *params, uint64_t seed);

RP_API int rp_params_count(const rp_params *params);            /* parameters and buffers */
RP_API int rp_params_trainable_count(const rp_params *params);  /* trainable ones: indices [0, n) */
RP_API rp_tensor *rp_params_at(const rp_params *params, int i); /* NULL if out of range */
RP_API rp_tensor *rp_params_find(const rp_params *params, const char *name); /* NULL if absent */

/* The value block: trainable values then buffers, numel in total. */
RP_API float *rp_params_data(const rp_params *params);
RP_API int64_t rp_params_numel(const rp_params *params);
/* The gradient block: one entry per trainable value. */
RP_API float *rp_params_grad(const rp_params *params);
RP_API int64_t rp_params_trainable_numel(const rp_params *params);
/* Offset of parameter i's values in the value block (and, if trainable, grads in the grad block).
 */
RP_API int64_t rp_params_offset(const rp_params *params, int i);

/*
 * Host copies of the blocks, which are the kernel table's storage (so not for reading through
 * rp_params_data or rp_params_grad: a device table's storage is not host memory).
 * read_values copies the value block (rp_params_numel floats) into out, write_values replaces
 * it from in; read_grads and write_grads do the same with the gradient block
 * (rp_params_trainable_numel floats; a backward pass after write_grads accumulates onto what
 * it wrote). RP_ERR_INVALID for NULL or a list not finalized. Not thread-safe with a step or a
 * backward pass of the set.
 */
RP_API rp_status rp_params_read_values(const rp_params *params, float *out);
RP_API rp_status rp_params_write_values(rp_params *params, const float *in);
RP_API rp_status rp_params_read_grads(const rp_params *params, float *out);
RP_API rp_status rp_params_write_grads(rp_params *params, const float *in);
/*
 * Sets dst's values to src's, storage to storage (nothing passes through the host): a target
 * network from its online one, say. The lists must have the same layout: as many tensors, each
 * of the same size in the same place (two lists built by the same code). RP_ERR_INVALID for NULL
 * or a list not finalized; RP_ERR_SHAPE naming the first tensor that differs.
 */
RP_API rp_status rp_params_copy_values(rp_params *dst, const rp_params *src);

/* Sets every gradient to zero and marks them fresh. */
RP_API void rp_params_zero_grad(rp_params *params);

/*
 * Freezes (true) or thaws (false) the whole set, e.g. a GAN's discriminator
 * while its generator trains. While frozen, no parameter of the set
 * requires a gradient: ops record no use of them, backward accumulates
 * nothing into their gradients and fires no gradient-ready callback for
 * them (so a data-parallel runtime starts no all-reduce for their buckets),
 * and their values still take part in the forward as constants. Thawing
 * restores exactly the flags each parameter had when it was frozen (one
 * switched off with rp_tensor_set_requires_grad stays off). Freezing a
 * frozen set, or thawing a thawed one, does nothing. Call it between steps
 * (before the forward that should see it): a parameter frozen after its use
 * was recorded gets no gradient from that backward either, but the op's
 * other inputs still do. Gradients already accumulated are left as they are.
 * Not thread-safe against a forward or backward using the set.
 */
RP_API void rp_params_set_frozen(rp_params *params, bool frozen);
/* Whether the set is frozen (false for NULL). */
RP_API bool rp_params_frozen(const rp_params *params);

/* ---- layers -------------------------------------------------------------- */

/* y = x w^T + b, w [out,in] (Glorot uniform by default, He with he=true), b [out] zeros. */
typedef struct rp_linear_layer {
    rp_tensor *w; /* [out,in] */
    rp_tensor *b; /* [out] or NULL */
    int in, out;
} rp_linear_layer;

RP_API rp_status rp_linear_layer_init(rp_linear_layer *l, rp_params *params, const char *name,
                                      int in, int out, bool bias, bool he);
RP_API rp_tensor *rp_linear_layer_forward(rp_tape *t, const rp_linear_layer *l, rp_tensor *x);

/*
 * As rp_linear_layer_init, with the weight's initialiser given: `kind` and
 * `gain` become the weight's rp_init {kind, gain} (gain is the value of
 * CONSTANT/NORMAL/UNIFORM, the gain of GLOROT_*, unused by HE_* and ZEROS),
 * fan_in = in and fan_out = out filled in by the layer. Errors:
 * RP_ERR_INVALID (NULL, in or out < 1, a kind outside rp_init_kind, a gain
 * not finite), and rp_params_add's.
 */
RP_API rp_status rp_linear_layer_init_with(rp_linear_layer *l, rp_params *p, const char *name,
                                           int in, int out, bool bias, rp_init_kind kind,
                                           float gain);

/* NHWC convolution, w [out,k,k,in] He-normal, b [out] zeros. */
typedef struct rp_conv2d_layer {
    rp_tensor *w; /* [out,k,k,in] */
    rp_tensor *b; /* [out] or NULL */
    int in, out, k;
    rp_conv_params p;
} rp_conv2d_layer;

RP_API rp_status rp_conv2d_layer_init(rp_conv2d_layer *l, rp_params *params, const char *name,
                                      int in, int out, int k, int stride, int pad, bool bias);
RP_API rp_tensor *rp_conv2d_layer_forward(rp_tape *t, const rp_conv2d_layer *l, rp_tensor *x);

/*
 * As rp_conv2d_layer_init, with the weight's initialiser given (see
 * rp_linear_layer_init_with): fan_in = k*k*in, fan_out = k*k*out.
 */
RP_API rp_status rp_conv2d_layer_init_with(rp_conv2d_layer *l, rp_params *p, const char *name,
                                           int in, int out, int k, int stride, int pad, bool bias,
                                           rp_init_kind kind, float gain);

/*
 * Batch norm over channels (the last axis): gamma ones, beta zeros, running
 * mean zeros and running variance ones (buffers). `p.comm` (or the older
 * `p.reduce` hook) makes it cross-replica: see rp_bn_params.
 */
typedef struct rp_batchnorm_layer {
    rp_tensor *gamma, *beta;               /* [c] */
    rp_tensor *running_mean, *running_var; /* [c], buffers */
    int c;
    rp_bn_params p;
} rp_batchnorm_layer;

RP_API rp_status rp_batchnorm_layer_init(rp_batchnorm_layer *l, rp_params *params, const char *name,
                                         int c);
RP_API rp_tensor *rp_batchnorm_layer_forward(rp_tape *t, const rp_batchnorm_layer *l, rp_tensor *x,
                                             bool training);
/*
 * A residual block's tail: relu(bn(x) + residual) with relu true, bn(x) + residual without,
 * fused (rp_batch_norm_add); the layer's own p.relu is not used here.
 */
RP_API rp_tensor *rp_batchnorm_layer_forward_add(rp_tape *t, const rp_batchnorm_layer *l,
                                                 rp_tensor *x, rp_tensor *residual, bool relu,
                                                 bool training);

/* ---- tensor-parallel layers (Megatron-LM; src/nn/layers_tp.c) ------------------ */
/*
 * Layers whose parameters are split over the M members of a communicator
 * `comm` (the model axis: rp_replica's RP_AXIS_MODEL communicator, or any
 * group from rp_comm_split), after Megatron-LM (Shoeybi et al. 2019). Every
 * member of the group builds the same layers with the same arguments and
 * calls them in the same order; each holds only its own shard, and the
 * layers' collectives (tensor.h's differentiable ones) make the members'
 * forward and backward together equal the dense layer's.
 *
 * Convention (tensor.h, "Megatron's pair"): a tensor is either REPLICATED
 * (one logical value, equal on every member: a layer's input, a gathered or
 * reduced output, the loss) or SPLIT along its last axis (member r holds the
 * r-th of M equal slices). A loss computed from replicated values counts
 * once: every member computes it and runs rp_backward from it, and each
 * member's gradients are then those of the dense model's one loss - the full
 * gradient of every replicated tensor and parameter, and its own slice of
 * every split one.
 *
 * Sizes must divide: a split dimension not divisible by M is refused with
 * RP_ERR_SHAPE at init (there are no uneven shards). Shapes are checked
 * before any collective, so members that all pass a wrong shape all fail at
 * once; a member whose shape alone is wrong fails at once and its peers fail
 * in the collective it skipped: with RP_ERR_COMM quoting its error as soon
 * as it leaves the step (rp_comm_leave, which the runtime calls), else
 * RP_ERR_TIMEOUT naming the call; never a hang. Shards whose sizes differ
 * between members fail every member in the first collective that sees them
 * (RP_ERR_MISMATCH naming both counts, or the loss's own RP_ERR_SHAPE).
 *
 * Parameters keep the dense layer's names ("<name>.weight", "<name>.bias"),
 * each member's list holding its shard under that name
 * (rp_params_add_shard): shard r of the weight is the slice r of the dense
 * weight along the split axis, and its initial values are that slice of the
 * dense layer's initial values under the same seed: M shards together equal
 * the dense parameter bitwise (M = 1: the dense parameter itself).
 * Data-parallel peers at the same model coordinate hold the same shard under
 * the same name, so the sync strategy's gradient all-reduce over the data
 * axis works unchanged. A checkpoint of one member holds its shards only.
 *
 * Lifetime: a layer keeps `comm` (not owned): it must outlive every forward
 * and backward through the layer. Thread-safety: one thread per member.
 */

/* Which dimension of the dense layer is split over the group. */
typedef enum {
    RP_TP_COLUMN, /* output features (channels): each member computes out/M of them */
    RP_TP_ROW,    /* input features (channels): each member multiplies its in/M of them */
} rp_tp_split;

/*
 * Copies member `rank`'s slice of `dense` (row-major, `ndim` dims of
 * dense_shape) along `axis`, split into `size` equal slices, into `shard`
 * (the slice's numel floats, row-major): the layout of a parameter made by
 * rp_params_add_shard. E.g. dense [6, 4], axis 1, size 2, rank 1: shard
 * [6, 2] holds columns 2 and 3. For loading dense values (a checkpoint of
 * the dense model) into shards, and for comparing a shard's gradient with a
 * dense one. Errors: RP_ERR_INVALID (NULL, ndim outside [1, RP_MAX_DIMS],
 * axis outside [0, ndim), rank outside [0, size), a dimension below 1),
 * RP_ERR_SHAPE (size does not divide dense_shape[axis]).
 */
RP_API rp_status rp_tp_shard_copy(float *shard, const float *dense, int ndim,
                                  const int *dense_shape, int axis, int rank, int size);

/*
 * The inverse of rp_tp_shard_copy: writes `shard` (member `rank`'s slice,
 * its numel floats, row-major) into its place in `dense` along `axis`,
 * leaving the rest of `dense` as it is. Placing every rank's slice rebuilds
 * the dense tensor bitwise: for turning a member's shards (gathered from the
 * group) back into the dense model's tensors, e.g. for a checkpoint. Errors:
 * as rp_tp_shard_copy's.
 */
RP_API rp_status rp_tp_shard_place(float *dense, const float *shard, int ndim,
                                   const int *dense_shape, int axis, int rank, int size);

/*
 * The regions between replicated and split tensors along the last axis,
 * tape ops (Megatron's gather_from / scatter_to_tensor_model_parallel_region):
 *  - rp_tp_gather: x [..., k] split -> y [..., M*k] replicated: the
 *    members' slices concatenated in rank order (an all-gather). Backward:
 *    dx = this member's slice of dy (no collective: dy is replicated).
 *  - rp_tp_scatter: x [..., M*k] replicated -> y [..., k], this member's
 *    slice (no collective). Backward: dx = the members' dy slices
 *    concatenated (an all-gather).
 * Every member must call them (and run backward through them) in step.
 * Errors: RP_ERR_INVALID (NULL comm), RP_ERR_SHAPE (rp_tp_scatter: the last
 * dimension does not divide by M), the comm's errors (RP_ERR_MISMATCH when
 * members' slices differ in size).
 */
RP_API rp_tensor *rp_tp_gather(rp_tape *t, rp_comm *comm, rp_tensor *x);
RP_API rp_tensor *rp_tp_scatter(rp_tape *t, rp_comm *comm, rp_tensor *x);

/*
 * Tensor-parallel linear layer, y = x W^T + b with W [out, in] split over
 * the M members of comm:
 *
 * RP_TP_COLUMN (Megatron's ColumnParallelLinear): w [out/M, in] holds rows
 * [r*out/M, (r+1)*out/M) of W, b [out/M] the same slice of the bias.
 *   forward:  x [N, in] replicated -> rp_copy_to_group (identity) -> x w^T + b,
 *             y [N, out/M] split; with gather_output, rp_tp_gather to
 *             [N, out] replicated.
 *   backward: dx is all-reduced (SUM) over the group by rp_copy_to_group
 *             (every member's slice of the output contributes to it).
 *
 * RP_TP_ROW (Megatron's RowParallelLinear): w [out, in/M] holds columns
 * [r*in/M, (r+1)*in/M) of W; b [out] is replicated (not split).
 *   forward:  x [N, in/M] split (input_is_parallel, the default: e.g. a
 *             column layer's output) or x [N, in] replicated (then
 *             rp_tp_scatter keeps this member's slice) -> x w^T (a partial
 *             sum) -> rp_reduce_from_group (all-reduce SUM) -> + b once,
 *             y [N, out] replicated.
 *   backward: identity through the reduction; with a replicated input, dx
 *             is all-gathered by rp_tp_scatter.
 *
 * An MLP is column(gather_output = false) -> activation -> row(input_is_parallel
 * = true): one all-reduce forward, one backward.
 *
 * Initialisation as rp_linear_layer_init's (Glorot uniform, He normal with
 * he = true, fan_in = in and fan_out = out of the dense layer; bias zeros),
 * as shards of the dense values (see the top of this section).
 * gather_output starts false and input_is_parallel true: set them after init.
 * Errors (init): RP_ERR_INVALID (NULL, in or out < 1, a bad split, a name too
 * long), RP_ERR_SHAPE (out, for a column layer, or in, for a row layer, not
 * divisible by M, naming both). Forward: RP_ERR_SHAPE for an x that is not
 * [N, in] or [N, in/M] as the layer expects (naming the shape and the layer),
 * and the collectives' errors; NULL as the ops (rp_last_error()).
 */
typedef struct rp_tp_linear_layer {
    rp_tensor *w;           /* column: [out/M, in]; row: [out, in/M] */
    rp_tensor *b;           /* column: [out/M]; row: [out], replicated; or NULL */
    int in, out;            /* the dense layer's sizes */
    rp_tp_split split;      /* RP_TP_COLUMN or RP_TP_ROW */
    rp_comm *comm;          /* the group (not owned) */
    int rank, size;         /* this member's rank in comm, and M */
    bool gather_output;     /* column: all-gather y to [N, out] (default false) */
    bool input_is_parallel; /* row: x is already [N, in/M] (default true) */
} rp_tp_linear_layer;

RP_API rp_status rp_tp_linear_layer_init(rp_tp_linear_layer *l, rp_params *params, const char *name,
                                         rp_comm *comm, rp_tp_split split, int in, int out,
                                         bool bias, bool he);
RP_API rp_tensor *rp_tp_linear_layer_forward(rp_tape *t, const rp_tp_linear_layer *l, rp_tensor *x);

/*
 * Channel-split convolution, NHWC input, OHWI weight W [out, k, k, in], as
 * the linear layer above with channels for features:
 *
 * RP_TP_COLUMN (output channels split): w [out/M, k, k, in], b [out/M].
 *   x [N, H, W, in] replicated -> rp_copy_to_group -> conv -> [N, OH, OW,
 *   out/M] split (gather_output: [N, OH, OW, out] replicated). Backward: dx
 *   all-reduced (SUM).
 * RP_TP_ROW (input channels split): w [out, k, k, in/M], b [out] replicated.
 *   x [N, H, W, in/M] split (input_is_parallel, default) or [N, H, W, in]
 *   replicated (rp_tp_scatter keeps this member's channels) -> conv (a
 *   partial sum) -> rp_reduce_from_group (all-reduce SUM) -> + b, [N, OH, OW,
 *   out] replicated.
 *
 * A ResNet basic block splits its first convolution by columns and its
 * second by rows; the batch norm between them normalises per channel, so on
 * split channels it is a plain rp_batchnorm_layer of out/M channels, local
 * to each member (each member owns its channels' statistics), and the one
 * after the row convolution sees replicated channels. Initialisation as
 * rp_conv2d_layer_init's (He normal, fan_in k*k*in; bias zeros), as shards.
 * Errors: as the linear layer's (k, stride < 1 or pad < 0: RP_ERR_INVALID),
 * and rp_conv2d's.
 */
typedef struct rp_tp_conv2d_layer {
    rp_tensor *w;      /* column: [out/M, k, k, in]; row: [out, k, k, in/M] */
    rp_tensor *b;      /* column: [out/M]; row: [out], replicated; or NULL */
    int in, out, k;    /* the dense layer's channels and kernel size */
    rp_conv_params p;  /* stride and padding */
    rp_tp_split split; /* RP_TP_COLUMN or RP_TP_ROW */
    rp_comm *comm;     /* the group (not owned) */
    int rank, size;
    bool gather_output;     /* column: all-gather to [N, OH, OW, out] (default false) */
    bool input_is_parallel; /* row: x is already [N, H, W, in/M] (default true) */
} rp_tp_conv2d_layer;

RP_API rp_status rp_tp_conv2d_layer_init(rp_tp_conv2d_layer *l, rp_params *params, const char *name,
                                         rp_comm *comm, rp_tp_split split, int in, int out, int k,
                                         int stride, int pad, bool bias);
RP_API rp_tensor *rp_tp_conv2d_layer_forward(rp_tape *t, const rp_tp_conv2d_layer *l, rp_tensor *x);

/*
 * Class-parallel (Megatron's vocab-parallel) softmax cross-entropy: the mean
 * over N rows of logsumexp(z) - z[label], where the logits z [N, classes] are
 * split over the classes: member r passes logits [N, classes/M], the classes
 * [r*classes/M, (r+1)*classes/M), e.g. a column layer's output without
 * gather. labels [N] are the global class ids, the same on every member.
 *
 * Forward, two collectives: an all-reduce MAX of each row's largest logit
 * (with the members' shard widths and a checksum of the labels riding
 * along, so that members that disagree all fail together), then an
 * all-reduce SUM, in double, of each row's sum of exp(z - max) and of the
 * target logit, which only the member owning the label contributes. The
 * loss is a scalar, replicated (it counts once); its value and each member's
 * logits gradient, (softmax(z) - onehot(label)) / N on its own classes,
 * equal rp_softmax_cross_entropy on the full logits within float rounding
 * (the same max-shifted arithmetic). The backward needs no collective.
 *
 * Errors (NULL, rp_last_error()): RP_ERR_INVALID (NULL comm or labels,
 * classes < 1; a label outside [0, classes), naming it, on every member; the
 * members' labels differ); RP_ERR_SHAPE (logits not 2-D; members' shard
 * widths differ, or width * M != classes, naming them, on every member); the
 * comm's errors (RP_ERR_MISMATCH for different N).
 */
RP_API rp_tensor *rp_tp_softmax_cross_entropy(rp_tape *t, rp_comm *comm, rp_tensor *logits,
                                              const int32_t *labels, int classes);

/* ---- pipeline schedules (GPipe, 1F1B; src/nn/pipeline.c) -------------------------- */
/*
 * A model cut by layers into P stages, one per member of `comm` (stage i is
 * rank i; on the runtime's mesh, the pipe axis's communicator). Each member
 * gives its own stage function:
 *
 *   rp_tensor *stage(rp_tape *t, rp_tensor *x, int micro, void *ctx)
 *
 * which records its layers on `t` from the input `x` (stage 0: micro-batch
 * `micro` of the batch; stage i > 0: the activation stage i - 1 returned for
 * it) and returns the activation for stage i + 1 or, on the last stage, a
 * scalar loss for the micro-batch (a mean over its examples; `micro` picks
 * the labels). It returns NULL with rp_last_error() set on failure. It runs
 * once per micro-batch, in micro-batch order, on the member's own thread.
 *
 * rp_pipeline_run cuts stage 0's batch into M equal micro-batches along dim
 * 0 and runs them through the stages: activations go forward with
 * rp_tensor_send / rp_tensor_recv (tensor.h) after a small header message
 * with their shape, so only stage 0 needs to know the input's; gradients
 * come back through those ops' backward rules. Each in-flight micro-batch
 * has its own tape (GPipe: M per stage; 1F1B: min(P - i - 1, M) + 1 on
 * stage i), made at create and reset before use, so a steady-state run
 * allocates nothing beyond the tapes' arenas. The last stage seeds each
 * micro-batch's backward with 1/M, so the stages' parameter gradients
 * ACCUMULATE (+=, like rp_backward; zero them between steps) the gradient
 * of the mean of the M losses: for equal micro-batches and mean losses,
 * the full batch's gradient. Backwards run in micro-batch order 0..M-1 on
 * both schedules, so GPipe and 1F1B accumulate in the same order and give
 * bitwise the same gradients.
 *
 * Schedules (P stages, M micro-batches, F(m) / B(m) the forward / backward
 * of micro-batch m on this stage):
 *  - RP_PIPE_GPIPE: F(0) .. F(M-1), then B(0) .. B(M-1).
 *  - RP_PIPE_1F1B (PipeDream-flush): w = min(P - i - 1, M) warm-up forwards
 *    F(0) .. F(w-1); then F(w+k), B(k) for k = 0 .. M-w-1; then the
 *    remaining B(M-w) .. B(M-1). At most w + 1 micro-batches are alive.
 * Ordering, and why nothing deadlocks: sends never wait for their receiver
 * (comm.h: they buffer), so a stage blocks only in a receive, F(m) for F(m)
 * of stage i - 1 and B(m) for B(m) of stage i + 1. Stage i reaches B(m)
 * having sent the activations of F(0) .. F(min(m + w_i, M - 1)); stage
 * i + 1 runs B(m) right after F(min(m + w_{i+1}, M - 1)), w_{i+1} <= w_i
 * (GPipe: after all M forwards, which stage i sent before its first
 * backward). So every receive waits for work whose own inputs were already
 * sent, and by induction over the micro-batches every receive completes.
 * Every channel carries its messages in micro-batch order with the
 * micro-batch as the tag, so a stage out of step is RP_ERR_MISMATCH, never
 * a wrong gradient. M < P works: the warm-up is capped at M and some
 * stages simply idle longer.
 *
 * Batch norm inside a stage computes its statistics per micro-batch (each
 * micro-batch is its own forward), as GPipe does: with M > 1 the result
 * differs from one forward over the whole batch, and the running
 * statistics are updated M times per run. Cross-micro-batch statistics are
 * not offered.
 *
 * Errors: a stage function that fails, bad input or a comm error fails this
 * member's run with a message "pipeline stage i of P: ..." naming the
 * schedule, the micro-batch and the phase; the member then leaves the comm
 * (rp_comm_leave) with that message, so its neighbours' pending receives
 * fail at once, which breaks the communicator and fails every other stage
 * with the first failure's message (see comm.h); a stage that dies without
 * returning is reported by the comm's timeout, naming its replica. The
 * runtime rejoins the comm before its next step; a raw comm is broken for
 * good after a failure. After any run, successful or not, the tapes are
 * reset (activations do not survive the run) and no parameter is referred
 * to by them.
 *
 * Thread-safety: a pipeline belongs to its member's thread.
 */
typedef enum { RP_PIPE_GPIPE = 0, RP_PIPE_1F1B = 1 } rp_pipe_schedule;

typedef rp_tensor *(*rp_pipe_stage_fn)(rp_tape *t, rp_tensor *x, int micro, void *ctx);

typedef struct rp_pipeline rp_pipeline;

/* "gpipe" or "1f1b" (or "unknown"). */
RP_API const char *rp_pipe_schedule_name(rp_pipe_schedule schedule);

/*
 * This member's runner for `micro_batches` (M >= 1) micro-batches on the
 * stages of `comm` (not owned; it must outlive the pipeline). Errors:
 * RP_ERR_INVALID (NULL pipeline or comm, an unknown schedule, M < 1),
 * RP_ERR_NOMEM.
 */
RP_API rp_status rp_pipeline_create(rp_pipeline **pipeline, rp_comm *comm,
                                    rp_pipe_schedule schedule, int micro_batches);
RP_API void rp_pipeline_destroy(rp_pipeline *pipeline);

/*
 * Runs one batch through the pipeline (forwards and backwards, see above),
 * every member at once. `input` is read on stage 0 only ([B, ...] with
 * B % M == 0; not modified; others pass NULL). On the last stage *loss
 * (may be NULL) receives the mean of the M micro-batch losses (summed in
 * double); other stages get NAN. Errors above, and: RP_ERR_INVALID (NULL
 * pipeline or stage; stage 0 without input), RP_ERR_SHAPE (B not divisible
 * by M; the last stage's output not a scalar), RP_ERR_FORMAT (a bad shape
 * header from the previous stage).
 */
RP_API rp_status rp_pipeline_run(rp_pipeline *pipeline, rp_pipe_stage_fn stage, void *ctx,
                                 const rp_tensor *input, float *loss);

/*
 * Memory reports: the runner's tapes (one per micro-batch in flight: GPipe
 * M, 1F1B min(P - i - 1, M) + 1 on stage i, at most M), and the sum of their
 * arenas' live peaks (rp_arena_stats.live_peak) since the pipeline was made:
 * the most this stage's activations held, were every tape at its peak at
 * once - the bound a planner predicts. 0 for NULL.
 */
RP_API int rp_pipeline_tapes(const rp_pipeline *pipeline);
RP_API size_t rp_pipeline_live_peak(const rp_pipeline *pipeline);

/* ---- layers for GANs (SN-GAN) ---------------------------------------------- */
/*
 * Spectral-normalised layers (Miyato et al. 2018): the forward uses the
 * weight divided by its largest singular value, estimated by one power
 * iteration per call (rp_spectral_normalize, tensor.h) from the persistent
 * vector u. Weights are Glorot-uniform times `gain`, biases zeros, and u is
 * a buffer "<name>.u" [rows], rows = out (classes for the embedding),
 * initialised N(0,1) (it is normalised before its first use). Since u is a
 * buffer it is checkpointed and, in data-parallel training, every replica
 * computes the same u' from the same weights, so replicas stay in step.
 *
 * forward(training = true) writes the new u back (one power-iteration step
 * per call, as in training); training = false computes the same iteration
 * from u without writing it (evaluation: u bitwise unchanged). The forward
 * writes u, so a layer is used by one thread at a time. Errors: init as the
 * plain layers' (RP_ERR_INVALID naming the bad value; a gain not finite);
 * forward returns NULL as the ops do (rp_last_error()).
 */
typedef struct rp_sn_conv2d_layer {
    rp_conv2d_layer conv; /* conv.w [out,k,k,in], conv.b [out] or NULL */
    rp_tensor *u;         /* [out], buffer */
} rp_sn_conv2d_layer;

RP_API rp_status rp_sn_conv2d_layer_init(rp_sn_conv2d_layer *l, rp_params *p, const char *name,
                                         int in, int out, int k, int stride, int pad, bool bias,
                                         float gain);
RP_API rp_tensor *rp_sn_conv2d_layer_forward(rp_tape *t, const rp_sn_conv2d_layer *l, rp_tensor *x,
                                             bool training);

typedef struct rp_sn_linear_layer {
    rp_linear_layer lin; /* lin.w [out,in], lin.b [out] or NULL */
    rp_tensor *u;        /* [out], buffer */
} rp_sn_linear_layer;

RP_API rp_status rp_sn_linear_layer_init(rp_sn_linear_layer *l, rp_params *p, const char *name,
                                         int in, int out, bool bias, float gain);
RP_API rp_tensor *rp_sn_linear_layer_forward(rp_tape *t, const rp_sn_linear_layer *l, rp_tensor *x,
                                             bool training);

/*
 * A spectral-normalised class embedding (the projection discriminator's):
 * the table "<name>.weight" [classes, dim] is normalised as a matrix with
 * rows = classes. forward returns [n, dim], row i the normalised table's row
 * labels[i] (each in [0, classes), else RP_ERR_INVALID).
 */
typedef struct rp_sn_embedding_layer {
    rp_tensor *table; /* [classes, dim] */
    rp_tensor *u;     /* [classes], buffer */
    int classes, dim;
} rp_sn_embedding_layer;

RP_API rp_status rp_sn_embedding_layer_init(rp_sn_embedding_layer *l, rp_params *p,
                                            const char *name, int classes, int dim, float gain);
RP_API rp_tensor *rp_sn_embedding_layer_forward(rp_tape *t, const rp_sn_embedding_layer *l,
                                                const int32_t *labels, int n, bool training);

/*
 * Categorical conditional batch norm (de Vries et al. 2017; the SN-GAN
 * generator's): the statistics of rp_batch_norm (over N, H and W per
 * channel; running statistics updated in training; p.comm or p.reduce make
 * them cross-replica, see rp_bn_params), then a per-class scale and shift:
 *   y = xhat * gamma[label] + beta[label].
 * Parameters "<name>.weight" (gamma) and "<name>.bias" (beta), buffers
 * "<name>.running_mean" and "<name>.running_var". p starts as
 * rp_bn_params_default(); set p.comm (not owned) after init for
 * cross-replica statistics (p.relu is ignored: a ReLU belongs after the
 * class scale and shift, apply rp_relu). forward: x [N,H,W,C] (or [N,C]), labels [N],
 * each in [0, classes) (RP_ERR_INVALID otherwise); training picks batch or
 * running statistics. Errors: as rp_batch_norm's, RP_ERR_INVALID at init
 * (c or classes < 1).
 */
typedef struct rp_cond_batchnorm_layer {
    rp_tensor *gamma, *beta;               /* [classes, c]: ones, zeros (trainable) */
    rp_tensor *running_mean, *running_var; /* [c], buffers */
    int c, classes;
    rp_bn_params p; /* p.comm: cross-replica statistics */
} rp_cond_batchnorm_layer;

RP_API rp_status rp_cond_batchnorm_layer_init(rp_cond_batchnorm_layer *l, rp_params *p,
                                              const char *name, int c, int classes);
RP_API rp_tensor *rp_cond_batchnorm_layer_forward(rp_tape *t, const rp_cond_batchnorm_layer *l,
                                                  rp_tensor *x, const int32_t *labels,
                                                  bool training);

/*
 * Hinge losses of SN-GAN (Lim & Ye 2017; Miyato et al. 2018), scalars on the
 * tape. d_real and d_fake are discriminator outputs [N] or [N,1] (any shape:
 * the means are over every element); the two may have different N.
 *   rp_hinge_loss_d: mean(relu(1 - d_real)) + mean(relu(1 + d_fake))
 *   rp_hinge_loss_g: -mean(d_fake)
 * NULL if an input is NULL (error untouched) or on OOM.
 */
RP_API rp_tensor *rp_hinge_loss_d(rp_tape *t, rp_tensor *d_real, rp_tensor *d_fake);
RP_API rp_tensor *rp_hinge_loss_g(rp_tape *t, rp_tensor *d_fake);

/* ---- statistics: Gaussian fits and the Fréchet distance (src/nn/frechet.c) ---- */

/*
 * Sums for fitting a Gaussian to feature vectors (FID's statistics), in
 * double: n, the number of rows added; sum [d] = sum of x; outer [d, d] =
 * sum of x x^T, row-major and always kept symmetric (both triangles). Sums
 * from several replicas or batches merge by adding them: all-reduce n, sum
 * and outer with RP_SUM (as RP_F64), or rp_gauss_sums_merge(). The struct's
 * fields are public for that; change them only by adding another set's.
 *
 * Lifetime: rp_gauss_sums_init() allocates sum and outer, which belong to the
 * struct until rp_gauss_sums_free(). Thread-safety: one thread at a time per
 * struct; different structs are independent.
 */
typedef struct rp_gauss_sums {
    int d;
    double n;      /* rows added */
    double *sum;   /* [d] */
    double *outer; /* [d, d], symmetric */
} rp_gauss_sums;

/*
 * Sets *s to empty sums (all zeros) of dimension d. Errors: RP_ERR_INVALID
 * (s NULL, d < 1; *s is then zeroed), RP_ERR_NOMEM (d * d doubles do not fit).
 */
RP_API rp_status rp_gauss_sums_init(rp_gauss_sums *s, int d);

/* Frees sum and outer and zeroes *s. NULL, a zeroed struct, or a second call: no-op. */
RP_API void rp_gauss_sums_free(rp_gauss_sums *s);

/*
 * Adds `rows` rows of x [rows, d] (row-major float; only read). rows 0 adds
 * nothing. The sum of each entry runs over the rows in order, so adding a set
 * in pieces gives bitwise the same sums as adding it at once. Cost: about
 * rows * d * d / 2 multiply-adds.
 *
 * Errors: RP_ERR_INVALID (s not initialised, x NULL with rows > 0, rows < 0),
 * RP_ERR_NUMERIC (a NaN or infinity in x, naming the row and column; nothing
 * is added then), RP_ERR_NOMEM.
 */
RP_API rp_status rp_gauss_sums_add(rp_gauss_sums *s, const float *x, int64_t rows);

/*
 * Adds the sums `from` into `into` (same d): what an all-reduce with RP_SUM
 * does across replicas. Errors: RP_ERR_INVALID (NULL or uninitialised sums,
 * different d).
 */
RP_API rp_status rp_gauss_sums_merge(rp_gauss_sums *into, const rp_gauss_sums *from);

/*
 * The fitted mean [d] = sum / n and covariance [d, d] = (outer - n mean
 * mean^T) / (n - 1) (unbiased, as numpy.cov), row-major and symmetric, into
 * caller-provided arrays; either may be NULL if not wanted. The one-pass
 * formula loses relative precision in a variance when the mean is large
 * against the spread (|mean| / std of 1e4 leaves about 8 digits); features
 * such as a network's activations are far from that.
 *
 * Errors: RP_ERR_INVALID (s NULL or uninitialised, n < 2).
 */
RP_API rp_status rp_gauss_sums_moments(const rp_gauss_sums *s, double *mean, double *cov);

/*
 * The Fréchet distance between N(mu1, s1) and N(mu2, s2), the square of the
 * 2-Wasserstein distance (FID when the inputs are Inception statistics):
 *
 *     |mu1 - mu2|^2 + Tr(s1) + Tr(s2) - 2 Tr((s1^{1/2} s2 s1^{1/2})^{1/2})
 *
 * mu [d], s [d, d] row-major, each read as symmetric (s + s^T) / 2; only
 * read. The square roots come from LAPACK's symmetric eigensolver (dsyevd,
 * through LAPACKE): s1 = V L V^T, A = L^{1/2} V^T, and the eigenvalues of
 * A s2 A^T (similar to s1^{1/2} s2 s1^{1/2}). Eigenvalues at or below
 * rounding's reach, d * DBL_EPSILON * max |eigenvalue| (negative ones
 * included), are taken as 0, so singular covariances are fine: a zero
 * computed as 1e-16 would otherwise add its root, 1e-8. The result is
 * not clamped: for equal inputs it is 0 within rounding and may be a tiny
 * negative number. Cost: two d x d eigendecompositions and 1.5 d^3
 * multiply-adds (a few seconds at d = 2048); allocates 4 d x d doubles.
 * LAPACK may use its own threads (OpenBLAS: OPENBLAS_NUM_THREADS).
 *
 * Errors: RP_ERR_INVALID (a NULL argument, d < 1), RP_ERR_NUMERIC (a NaN or
 * infinity in an input, naming it and the index; LAPACK failing to converge),
 * RP_ERR_NOMEM. On error *fd is left unchanged. Thread-safe: calls share no
 * state (as far as the LAPACK underneath is).
 */
RP_API rp_status rp_frechet_distance(const double *mu1, const double *s1, const double *mu2,
                                     const double *s2, int d, double *fd);

#ifdef __cplusplus
}
#endif
#endif
