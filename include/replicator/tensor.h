/*
 * replicator/tensor.h - tensors, the tape (reverse-mode autodiff) and the ops.
 *
 * A tensor is f32, 0-D to 4-D, row-major. Image tensors are NHWC
 * (channels-last); convolution weights are OHWI ([out][kh][kw][in]).
 *
 * Ops take a tape and return a new tensor whose storage comes from the tape's
 * storage arena; it lives until rp_tape_reset().
 *
 * Storage belongs to the kernel table (replicator/kernels.h): host memory
 * with the cpu and ref tables, memory host code cannot read with the strict
 * one (RP_KERNELS=strict, which proves the rule), a device's with a device
 * table. So `data`, `data_bf16` and `grad` (and rp_params_data/grad) name
 * storage: pass them to the library, but move values in and out with
 * rp_tensor_from, rp_tensor_write, rp_tensor_read, rp_tensor_get and
 * rp_item rather than by dereferencing them. Code that does read them
 * directly works with the host tables only. While the tape records (training),
 * each op appends a node so that rp_backward() can propagate gradients. In
 * evaluation mode (rp_tape_set_recording(t, 0)) nothing is recorded and no
 * gradient memory is used.
 *
 * Errors: an op returns NULL and sets rp_last_error() on bad input (the message
 * names the shapes). An op given a NULL input returns NULL without touching the
 * error, so expressions can be chained and checked once at the end:
 *
 *     rp_tensor *y = rp_relu(t, rp_linear(t, x, w, b));
 *     if (!y) return rp_last_status();
 *
 * Thread-safety: a tape belongs to one thread (one replica). Different tapes
 * may be used concurrently.
 */
#ifndef REPLICATOR_TENSOR_H
#define REPLICATOR_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RP_MAX_DIMS 4
#define RP_NAME_MAX 64

enum {
    RP_TENSOR_REQUIRES_GRAD = 1u << 0, /* gradients flow to this tensor */
    RP_TENSOR_PARAM = 1u << 1,         /* a parameter: persistent data and grad */
    RP_TENSOR_GRAD_FRESH = 1u << 2,    /* param grad holds zeros: the next write may overwrite */
    RP_TENSOR_DROPPED = 1u << 3,       /* values released by rp_tape_drop, recomputed in backward */
};

typedef struct rp_tensor {
    int ndim;               /* 0..RP_MAX_DIMS */
    int shape[RP_MAX_DIMS]; /* shape[0..ndim-1]; unused dims are 1 */
    int64_t numel;          /* product of shape */
    rp_dtype dtype;         /* of the values: RP_F32, or RP_BF16 for activations a bf16 policy
                               stores (see "mixed precision"); gradients are always f32 */
    union {
        float *data;        /* RP_F32: the values [numel] */
        rp_bf16 *data_bf16; /* RP_BF16: the values [numel] */
        void *storage;      /* either, as bytes: numel * rp_dtype_size(dtype) */
    };
    float *grad;    /* [numel], or NULL while no gradient exists */
    uint32_t flags; /* RP_TENSOR_* */
    int node;       /* index of the tape node that produced it, -1 for leaves */
    /* Parameters only: */
    char name[RP_NAME_MAX]; /* stable name, e.g. "stage1.block0.conv1.weight" */
    int index;              /* position in its parameter list */
    int pending;            /* uses on the current tape whose backward has not run (an op's
                               output: the tape's own count of the recorded ops that read it) */
} rp_tensor;

/* ---- tensors ------------------------------------------------------------ */

/* Largest number of elements a tensor may have (2^40: 4 TiB of floats). */
#define RP_MAX_NUMEL ((int64_t)1 << 40)

/*
 * Number of elements of a shape (1 for ndim 0), or -1 if a dimension is
 * below 1 or the product exceeds RP_MAX_NUMEL.
 */
RP_API int64_t rp_shape_numel(int ndim, const int *shape);

/* True if the two tensors have the same ndim and shape. */
RP_API bool rp_tensor_same_shape(const rp_tensor *a, const rp_tensor *b);

/*
 * Writes "[2, 3, 4]" into buf (always NUL-terminated) and returns buf. For
 * error messages.
 */
RP_API const char *rp_shape_str(const rp_tensor *t, char *buf, size_t size);

/*
 * Copies all n (= x->numel) values into out, widened to f32 whatever x's dtype. RP_ERR_SHAPE
 * when n is not x's size; RP_ERR_INVALID when x is NULL or its values were released.
 */
RP_API rp_status rp_tensor_read(const rp_tensor *x, float *out, int64_t n);
/* Overwrites the n (= x->numel) values of an f32 tensor from the host. Errors as rp_tensor_read. */
RP_API rp_status rp_tensor_write(rp_tensor *x, const float *values, int64_t n);
/*
 * Copies the n (= x->numel) values of x's gradient (always f32) into out: a leaf's or a
 * parameter's after rp_backward, or a parameter's in a gradient-ready callback. RP_ERR_SHAPE
 * when n is not x's size; RP_ERR_INVALID when x or out is NULL or x holds no gradient.
 */
RP_API rp_status rp_tensor_read_grad(const rp_tensor *x, float *out, int64_t n);

/* The single value of a tensor with one element (NAN if x is NULL or larger). */
RP_API float rp_item(const rp_tensor *x);

/*
 * Element i of x as a float, whatever x's dtype (widened from bf16). For
 * reading a few values; a loop over a tensor belongs in an op. NAN if x is
 * NULL or i is out of range.
 */
RP_API float rp_tensor_get(const rp_tensor *x, int64_t i);

/* ---- the tape ----------------------------------------------------------- */

typedef struct rp_tape rp_tape;

/*
 * Called during rp_backward() the moment a parameter's gradient is final for
 * this tape: every use of it in the forward pass has been back-propagated.
 * The runtime starts gradient all-reduces from here.
 */
typedef void (*rp_grad_ready_fn)(rp_tensor *param, void *ctx);

/* Creates a tape with its own arena (grows as needed; 0 picks a default). */
RP_API rp_status rp_tape_create(rp_tape **tape, size_t arena_bytes);
/*
 * Frees the tape and everything made on it. A tape that recorded uses of
 * parameters and did not run rp_backward() since still refers to them:
 * destroy (or reset) it before the parameters.
 */
RP_API void rp_tape_destroy(rp_tape *tape);

/*
 * Forgets every node and frees every tensor made on this tape (arena reset).
 * Call it at the start of each step. Parameter gradients are untouched.
 */
RP_API void rp_tape_reset(rp_tape *tape);

/* Recording on (training, default) or off (evaluation: no nodes, no saved values). */
RP_API void rp_tape_set_recording(rp_tape *tape, bool on);
RP_API bool rp_tape_recording(const rp_tape *tape);

/*
 * The tape's host arena: the tensor structs and node lists, and host memory a
 * caller needs for this step (a custom op's context, labels before they are
 * copied in). Host code may read and write it; it is not storage.
 */
RP_API rp_arena *rp_tape_arena(rp_tape *tape);
/*
 * The tape's storage arena (the kernel table's memory): every value,
 * gradient and saved buffer of this step. Its statistics are the step's
 * activation memory (rp_arena_get_stats: live_peak, high_water).
 */
RP_API rp_arena *rp_tape_storage(rp_tape *tape);

/* Number of nodes recorded since the last reset. */
RP_API int rp_tape_size(const rp_tape *tape);

/*
 * Gradient-ready listeners form a list: each fires, in the order added,
 * once per parameter per backward (see rp_grad_ready_fn). A parameter that
 * does not require a gradient when backward reaches it (a frozen set, see
 * rp_params_set_frozen) fires none.
 *
 * rp_tape_add_grad_ready appends (fn, ctx). Errors: RP_ERR_INVALID for a
 * NULL tape or fn, or a pair already in the list; RP_ERR_NOMEM. The list is
 * persistent (no allocation once it stops growing).
 * rp_tape_remove_grad_ready removes the pair (fn, ctx); absent pairs are
 * ignored. Do not add or remove from inside a callback.
 */
RP_API rp_status rp_tape_add_grad_ready(rp_tape *tape, rp_grad_ready_fn fn, void *ctx);
RP_API void rp_tape_remove_grad_ready(rp_tape *tape, rp_grad_ready_fn fn, void *ctx);

/*
 * Replaces the WHOLE listener list with the one callback `fn` (NULL: empties
 * the list). Kept for old callers; code that shares a tape with other
 * listeners (the runtime's all-reduce, a tracer) should use
 * rp_tape_add_grad_ready instead.
 */
RP_API void rp_tape_on_grad_ready(rp_tape *tape, rp_grad_ready_fn fn, void *ctx);

/*
 * Back-propagates from `loss` (one element; its gradient is seeded with 1)
 * through every recorded node, accumulating into the `grad` of every tensor
 * that requires it. Parameter gradients accumulate (+=) until the optimizer
 * clears them; activation gradients live in the arena.
 *
 * Backward runs once per tape per reset: a second rp_backward (or
 * rp_backward_from) on the same tape is refused with RP_ERR_INVALID ("already
 * ran") and changes nothing. To back-propagate again, reset the tape and
 * record the forward again. (Two losses: add them first, or seed both with
 * rp_backward_from through one combined output.)
 * Errors: RP_ERR_INVALID if loss is NULL, not on this tape, or backward
 * already ran; RP_ERR_SHAPE if it has more than one element.
 */
RP_API rp_status rp_backward(rp_tape *tape, rp_tensor *loss);

/*
 * Like rp_backward, but from an output of any shape whose gradient is seeded
 * with dy (y->numel floats, copied): the result equals rp_backward of
 * sum(y * dy) with dy held constant. For pipelines that receive an output's
 * gradient from elsewhere. Errors: as rp_backward; RP_ERR_INVALID if dy is NULL.
 */
RP_API rp_status rp_backward_from(rp_tape *tape, rp_tensor *y, const float *dy);

/*
 * Recompute instead of store: hands the values of x, a batch norm's output
 * (rp_batch_norm, with or without its fused ReLU; not rp_batch_norm_add's),
 * back to the arena now,
 * and has backward recompute them from the batch norm's input and
 * statistics (one pass) when a rule first needs them, and release them again
 * once the batch norm's own rule has run. The recorded views of x made so
 * far (rp_reshape, rp_copy_to_group) are dropped with it and get the
 * recomputed values when a rule reads them (an rp_detach is not followed).
 * The caller promises that nothing reads x's values again in the forward
 * pass, nor any view of x; call it right after the last op that uses x,
 * typically the convolution that follows a batch norm + ReLU. The gradients are bitwise
 * those of storing x. After the call x->data is NULL until backward
 * recomputes it. Errors: RP_ERR_INVALID for a NULL tape or tensor, a tensor
 * not made by rp_batch_norm on this recording tape, or one already dropped.
 */
RP_API rp_status rp_tape_drop(rp_tape *tape, rp_tensor *x);

/*
 * Stop-gradient: a tensor with x's shape and values (shared storage, not a
 * copy) that is a leaf: nothing flows back through it into x. NULL if x is
 * NULL (error untouched) or on OOM.
 */
RP_API rp_tensor *rp_detach(rp_tape *tape, rp_tensor *x);

/*
 * Makes a leaf (a tensor made by rp_tensor_new/from/fill, rp_detach, or a
 * trainable parameter) want a gradient (on) or not (off). After backward a
 * leaf's gradient is in x->grad (arena memory, until the reset). Has no
 * effect on an op's output (its node decides) or on a buffer (no gradient
 * storage). Not thread-safe against a backward using x.
 */
RP_API void rp_tensor_set_requires_grad(rp_tensor *x, bool on);

/* ---- mixed precision ---------------------------------------------------- */

/*
 * A tape's precision policy, after PyTorch's autocast but explicit: with
 * compute RP_BF16, the op classes in `ops` multiply in bf16 - their two
 * multiplied inputs rounded to bf16 (round to nearest even), the products
 * exact and summed in f32 - forward, backward-data and backward-weights
 * alike, on oneDNN's AMX or AVX512-BF16 kernels where the CPU has them.
 * Everything else stays f32 whatever the policy: batch and layer norm and
 * their statistics, softmax and log-softmax, losses, reductions, spectral
 * norm's power iteration, and every tensor's storage (activations,
 * parameters - the f32 master weights -, gradients, optimizer state).
 * Each op records the compute type it ran with, so its backward follows it
 * even when the policy changes in between.
 *
 * Override per op or layer by changing the policy around it:
 *
 *     rp_precision_policy keep = rp_tape_precision(t);
 *     rp_tape_set_precision(t, rp_precision_policy_make(RP_F32));  // this layer in f32
 *     logits = rp_linear(t, h, w, b);
 *     rp_tape_set_precision(t, keep);
 *
 * or narrow the classes (p.ops = RP_AUTOCAST_CONV: convolutions only).
 * The runtime sets every replica's tape from rp_config.precision.
 */
enum {
    RP_AUTOCAST_CONV = 1u << 0,   /* rp_conv2d */
    RP_AUTOCAST_LINEAR = 1u << 1, /* rp_linear */
    RP_AUTOCAST_MATMUL = 1u << 2, /* rp_matmul */
    RP_AUTOCAST_ALL = RP_AUTOCAST_CONV | RP_AUTOCAST_LINEAR | RP_AUTOCAST_MATMUL,
    RP_AUTOCAST_DEFAULT = RP_AUTOCAST_ALL,
};

typedef struct rp_precision_policy {
    rp_dtype compute;     /* RP_F32 (default: everything f32) or RP_BF16 */
    unsigned ops;         /* RP_AUTOCAST_* classes that run in `compute` */
    rp_dtype activations; /* RP_F32, or RP_BF16 (with bf16 compute): a convolution in bf16
                             stores its output in bf16, and so does a batch norm whose input
                             is bf16; every other op reads a bf16 input widened (rp_cast) and
                             writes f32. Gradients, parameters and statistics stay f32. */
} rp_precision_policy;

/*
 * y = x in another dtype (RP_F32 or RP_BF16; x itself when it has it
 * already), rounded to nearest even into bf16, widened exactly into f32.
 * The gradient passes through unchanged (gradients are f32). Every op that
 * computes in f32 widens a bf16 input this way by itself.
 */
RP_API rp_tensor *rp_cast(rp_tape *tape, rp_tensor *x, rp_dtype dtype);

/* {compute, RP_AUTOCAST_DEFAULT, compute}: bf16 compute stores activations in bf16 too. */
RP_API rp_precision_policy rp_precision_policy_make(rp_dtype compute);
/*
 * Sets the policy of the ops recorded (or run) on t from now on. Errors:
 * RP_ERR_INVALID for a NULL tape, a compute type other than f32 and bf16,
 * or unknown bits in ops. Not thread-safe against ops on the same tape.
 */
RP_API rp_status rp_tape_set_precision(rp_tape *tape, rp_precision_policy p);
/* The tape's policy (f32 for a NULL tape). */
RP_API rp_precision_policy rp_tape_precision(const rp_tape *tape);

/*
 * The type in which rp_backward reduces gradients across a differentiable
 * collective's members (ops below): RP_F32 (the default) or RP_BF16. It
 * applies to the adjoints that add the members' gradients - rp_copy_to_group's
 * all-reduce (tensor parallelism's backward), rp_tensor_all_reduce's (every
 * reduction), rp_tensor_broadcast's and rp_tensor_all_gather's reduce-scatter. In
 * bf16 each member's gradient is rounded to bf16 (nearest even), the members'
 * are added in f32 in rank order and the sum rounded to bf16 once, then
 * widened into the f32 gradient (comm.h, RP_BF16 reductions): half the bytes on
 * the wire. Each op records the type when it runs, as it records its compute
 * type; forward collectives (activations, partial sums) stay f32. The runtime
 * sets every replica's tape from rp_config.grad_dtype (--grad-dtype), which
 * also puts the data axis's gradient buckets in bf16. Errors: RP_ERR_INVALID
 * for a NULL tape or a type other than f32 and bf16.
 */
RP_API rp_status rp_tape_set_grad_wire(rp_tape *tape, rp_dtype dtype);
/* The tape's gradient wire type (f32 for a NULL tape). */
RP_API rp_dtype rp_tape_grad_wire(const rp_tape *tape);

/* ---- custom ops ------------------------------------------------------------ */

/*
 * A user-defined op. `forward` fills out->data from the inputs (out is fresh,
 * uninitialised, of the shape given to rp_custom); `backward` receives the
 * output's gradient `dout` (out->numel floats) and, for each input i that
 * requires a gradient, a buffer din[i] of in[i]->numel floats to ADD its
 * contribution to (+=; it may already hold other contributions); din[i] is
 * NULL for inputs needing none. Both return RP_OK or an error status (set a
 * message with RP_ERROR). `ctx` is passed through untouched: keep saved
 * values in memory from rp_tape_arena(), which lives until the reset. The op
 * struct must outlive the tape's next reset (a static const is typical).
 */
typedef struct rp_custom_op {
    const char *name; /* for messages */
    rp_status (*forward)(void *ctx, rp_tensor *out, rp_tensor *const *in, int n);
    rp_status (*backward)(void *ctx, const rp_tensor *out, const float *dout, rp_tensor *const *in,
                          float *const *din, int n);
} rp_custom_op;

/*
 * Runs op->forward on n inputs (n >= 0) into a new tensor of shape
 * [ndim, shape] and, when an input requires a gradient, records the op so
 * that backward calls op->backward. NULL on error (a bad shape, a failing
 * forward: RP_ERR_* from it, with the op's name) or if an input is NULL.
 */
RP_API rp_tensor *rp_custom(rp_tape *tape, const rp_custom_op *op, void *ctx, rp_tensor *const *in,
                            int n, int ndim, const int *shape);

/* ---- creating tensors on a tape ------------------------------------------ */

/* An uninitialised tensor from the tape's storage (a leaf: no node). */
RP_API rp_tensor *rp_tensor_new(rp_tape *tape, int ndim, const int *shape);
/* A leaf tensor holding a copy of `data` (numel floats). */
RP_API rp_tensor *rp_tensor_from(rp_tape *tape, int ndim, const int *shape, const float *data);
/* A leaf tensor filled with `value`. */
RP_API rp_tensor *rp_tensor_fill(rp_tape *tape, int ndim, const int *shape, float value);

/* ---- ops ----------------------------------------------------------------- */
/* Each returns a new tensor on the tape, or NULL (see the top of this file). */

/* [M,K] x [K,N] -> [M,N]. */
RP_API rp_tensor *rp_matmul(rp_tape *t, rp_tensor *a, rp_tensor *b);
/* x [N,in], w [out,in], b [out] or NULL -> x w^T + b, [N,out]. */
RP_API rp_tensor *rp_linear(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b);

typedef struct rp_conv_params {
    int stride; /* same in both directions, >= 1 */
    int pad;    /* zero padding on every side, >= 0 */
} rp_conv_params;

/* x [N,H,W,C] NHWC, w [O,KH,KW,C] OHWI, b [O] or NULL -> [N,OH,OW,O]. */
RP_API rp_tensor *rp_conv2d(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b, rp_conv_params p);

/*
 * Hook that lets batch norm's per-channel sums be combined across replicas.
 * `sums` holds `count` doubles (two per-channel vectors back to back: sum and
 * sum of squares forward, sum(dy) and sum(dy*xhat) backward) and *n the
 * number of elements each sum covers. A cross-replica hook all-reduces both
 * in place. Returning non-RP_OK fails the op.
 */
typedef rp_status (*rp_bn_reduce_fn)(double *sums, int count, double *n, void *ctx);

typedef struct rp_bn_params {
    float momentum;         /* running = (1-m) running + m batch; default 0.1 */
    float eps;              /* default 1e-5 */
    bool training;          /* batch statistics (true) or running statistics (false) */
    bool relu;              /* apply a ReLU to the output, fused (one pass fewer each way) */
    rp_bn_reduce_fn reduce; /* NULL: statistics over this replica's batch only */
    void *reduce_ctx;
    /*
     * Cross-replica batch norm without a hook: when not NULL, the per-channel
     * f64 sums (and the element count) are all-reduced (RP_SUM, one call of
     * 2C+1 doubles) over this communicator, forward and backward in training
     * mode: every member must call the layer (and its backward) in step.
     * The arithmetic is the reduce hook's that the runtime used
     * (rp_cross_replica_bn), so the results are bitwise the same. Takes
     * precedence over `reduce`, which must then be NULL. Not owned.
     */
    rp_comm *comm;
} rp_bn_params;

RP_API rp_bn_params rp_bn_params_default(void);

/*
 * Batch norm over every axis but the last (channels): x [...,C], gamma and
 * beta [C]. running_mean and running_var [C] (may be NULL in training) are
 * updated in training mode with the unbiased batch variance. With p.comm or
 * p.reduce the statistics cover every member's batch; errors from the
 * collective (RP_ERR_MISMATCH, RP_ERR_TIMEOUT...) fail the op (or backward).
 * Errors: RP_ERR_SHAPE, RP_ERR_INVALID (bad eps/momentum, both comm and reduce).
 */
RP_API rp_tensor *rp_batch_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                                rp_tensor *running_mean, rp_tensor *running_var, rp_bn_params p);

/*
 * A residual block's tail in one op: batch norm of x, plus `residual` (x's
 * shape), then the ReLU if p.relu: relu(bn(x) + residual). The values and
 * gradients are bitwise those of rp_relu(rp_add(rp_batch_norm(x), residual))
 * (with p.relu false inside the batch norm), in one pass each way instead of
 * three, and one tensor kept instead of three. Errors: rp_batch_norm's, and
 * RP_ERR_SHAPE when residual's shape is not x's.
 */
RP_API rp_tensor *rp_batch_norm_add(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                                    rp_tensor *running_mean, rp_tensor *running_var,
                                    rp_tensor *residual, rp_bn_params p);

RP_API rp_tensor *rp_relu(rp_tape *t, rp_tensor *x);
/*
 * rp_relu with its output stored as `dtype`: RP_F32 (rp_relu itself) or RP_BF16, each value
 * rounded once (rp_bf16_from_f32). For a ReLU whose output only bf16 convolutions read, perhaps
 * through rp_upsample2x (which keeps bf16): they would round it the same way, so the values they
 * compute are unchanged, while the f32 output is never written nor rounded in a pass of its own
 * (the SN-GAN's blocks, docs/precision.md). The gradient is rp_relu's (dy where x > 0), in f32.
 * RP_ERR_INVALID for another dtype.
 */
RP_API rp_tensor *rp_relu_to(rp_tape *t, rp_tensor *x, rp_dtype dtype);
RP_API rp_tensor *rp_leaky_relu(rp_tape *t, rp_tensor *x, float slope);
RP_API rp_tensor *rp_tanh(rp_tape *t, rp_tensor *x);
RP_API rp_tensor *rp_sigmoid(rp_tape *t, rp_tensor *x);
/* ELU: x for x > 0, alpha*(exp(x)-1) otherwise (alpha > 0). */
RP_API rp_tensor *rp_elu(rp_tape *t, rp_tensor *x, float alpha);
/*
 * Square root and reciprocal (1/x), element-wise. No domain check: sqrt of a
 * negative value or 1/0 gives NaN or infinity, as in C; a gradient at 0 is
 * infinite. Add an epsilon (rp_clamp, rp_add) where that matters.
 */
RP_API rp_tensor *rp_sqrt(rp_tape *t, rp_tensor *x);
RP_API rp_tensor *rp_reciprocal(rp_tape *t, rp_tensor *x);
/*
 * min(max(x, lo), hi), lo <= hi. The gradient passes where lo <= x <= hi
 * (both ends included, as PyTorch) and is 0 outside. RP_ERR_INVALID if lo >
 * hi or either is NaN.
 */
RP_API rp_tensor *rp_clamp(rp_tape *t, rp_tensor *x, float lo, float hi);

/*
 * Element-wise a (op) b; the output has a's shape. `b` has a's shape, or
 * broadcasts against it in one of two ways:
 *  - suffix: b's shape is a suffix of a's (leading 1s ignored), so b
 *    repeats every numel(b) elements of a: per-channel ([C] against
 *    [N,H,W,C]) and per-position ([1,H,W,C]);
 *  - per axis: b has a's number of dimensions (or fewer, padded with leading
 *    1s) and each of its dimensions equals a's or is 1, so b repeats along
 *    its size-1 axes: per-sample ([N,1,1,C] against [N,H,W,C], e.g. a
 *    class-conditional batch norm's gamma; reshape an [N,C] tensor to
 *    [N,1,1,C] with rp_reshape, a free view) and any mix ([N,H,1,1], [1,1,W,C]).
 * b's gradient sums over the axes it was repeated along.
 */
RP_API rp_tensor *rp_add(rp_tape *t, rp_tensor *a, rp_tensor *b);
RP_API rp_tensor *rp_sub(rp_tape *t, rp_tensor *a, rp_tensor *b);
RP_API rp_tensor *rp_mul(rp_tape *t, rp_tensor *a, rp_tensor *b);
/* a / b with the broadcasting above. Division by zero gives infinities (no check). */
RP_API rp_tensor *rp_div(rp_tape *t, rp_tensor *a, rp_tensor *b);
/* s * x. */
RP_API rp_tensor *rp_scale(rp_tape *t, rp_tensor *x, float s);

/* Concatenates along the last axis (channels); all other dims equal. n >= 1. */
RP_API rp_tensor *rp_concat(rp_tape *t, rp_tensor *const *xs, int n);

/* Same values, new shape (numel must match). Shares x's data storage; has its own gradient. */
RP_API rp_tensor *rp_reshape(rp_tape *t, rp_tensor *x, int ndim, const int *shape);
/* [N, ...] -> [N, rest]. */
RP_API rp_tensor *rp_flatten(rp_tape *t, rp_tensor *x);

typedef struct rp_pool_params {
    int kernel; /* square window */
    int stride;
    int pad; /* max pool pads with -inf, average pool excludes padding */
} rp_pool_params;

RP_API rp_tensor *rp_max_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p);
RP_API rp_tensor *rp_avg_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p);
/* [N,H,W,C] -> [N,C]. */
RP_API rp_tensor *rp_global_avg_pool(rp_tape *t, rp_tensor *x);
/* Nearest-neighbour 2x: [N,H,W,C] -> [N,2H,2W,C], in x's dtype (a copy: bf16 stays bf16). */
RP_API rp_tensor *rp_upsample2x(rp_tape *t, rp_tensor *x);

/* table [V,D], idx[n] in [0,V) -> [n,D]. Out-of-range indices are an error. */
RP_API rp_tensor *rp_embedding(rp_tape *t, rp_tensor *table, const int32_t *idx, int n);

/* Mean softmax cross-entropy: logits [N,C], labels[N] in [0,C). Scalar. */
RP_API rp_tensor *rp_softmax_cross_entropy(rp_tape *t, rp_tensor *logits, const int32_t *labels);
/* Mean over rows of -sum_c target[n,c] log softmax(logits)[n,c]; target [N,C], no gradient to it.
 */
RP_API rp_tensor *rp_softmax_cross_entropy_soft(rp_tape *t, rp_tensor *logits, rp_tensor *target);
/* Mean of (a-b)^2 over all elements; same shapes. Scalar. */
RP_API rp_tensor *rp_mse(rp_tape *t, rp_tensor *a, rp_tensor *b);

/* Sum / mean of all elements. Scalar. */
RP_API rp_tensor *rp_sum(rp_tape *t, rp_tensor *x);
RP_API rp_tensor *rp_mean(rp_tape *t, rp_tensor *x);

/*
 * Sum / mean over the n_axes axes listed in `axes` (each in [0, ndim), no
 * repeats; n_axes >= 1). With keepdims the result keeps x's ndim with those
 * axes of size 1 (so it broadcasts back against x, see rp_add); without,
 * they are removed (all removed: a scalar). Sums are formed in double.
 * Errors: RP_ERR_INVALID naming the bad axis.
 */
RP_API rp_tensor *rp_sum_axes(rp_tape *t, rp_tensor *x, int n_axes, const int *axes, bool keepdims);
RP_API rp_tensor *rp_mean_axes(rp_tape *t, rp_tensor *x, int n_axes, const int *axes,
                               bool keepdims);
/* Per row: [N, ...] -> [N], the sum / mean of each sample's elements. */
RP_API rp_tensor *rp_sum_rows(rp_tape *t, rp_tensor *x);
RP_API rp_tensor *rp_mean_rows(rp_tape *t, rp_tensor *x);

/* log softmax over the last axis: x - logsumexp(x) per row (max-shifted). x has >= 1 dim. */
RP_API rp_tensor *rp_log_softmax(rp_tape *t, rp_tensor *x);

/*
 * Layer norm over the last axis (D): y = (x - mean) / sqrt(var + eps) *
 * gamma + beta with the biased variance of each row; gamma and beta [D],
 * either may be NULL (1 and 0). eps > 0. Errors: RP_ERR_SHAPE, RP_ERR_INVALID.
 */
RP_API rp_tensor *rp_layer_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                                float eps);

/*
 * Spectral normalisation (Miyato et al. 2018). w is viewed as the matrix W
 * [rows, cols] with rows = w->shape[0], cols = numel/rows (a conv weight
 * [out,k,k,in] as [out, k*k*in]); u [rows] is a persistent buffer (not
 * trainable; typically a parameter list's buffer). One power iteration, in
 * double, with eps 1e-12 added to each norm:
 *   v = normalise(W^T u), u' = normalise(W v), sigma = u'^T W v.
 * Returns W / sigma, shaped like w, differentiable in w with u', v held
 * constant (dW = G/sigma - (sum(G .* W)/sigma^2) u' v^T). update_u: write u'
 * back into u (training); false (evaluation): u is left as it is, bitwise.
 * sigma_out (may be NULL) receives sigma. The output is a new tensor on the
 * tape (w and u are only read, except u's update). Writing u is a side effect
 * on the caller's buffer: not thread-safe against another use of u.
 * Errors (NULL, rp_last_error()): RP_ERR_SHAPE for a u whose numel is not
 * rows; RP_ERR_NUMERIC for sigma not finite or <= 0 (a zero or non-finite
 * weight; u is then left unchanged).
 */
RP_API rp_tensor *rp_spectral_normalize(rp_tape *t, rp_tensor *w, rp_tensor *u, bool update_u,
                                        float *sigma_out);

/* ---- differentiable collectives -------------------------------------------- */
/*
 * Tape ops over any communicator (threads, MPI, hierarchical; a sub-group
 * from rp_comm_split). Every member of `c` must call the same op in the same
 * order with the same shapes, as for the comm calls underneath; and since
 * each backward rule is itself a collective, every member must run backward
 * through it too: make the op on every member either with an input that
 * requires a gradient or on none (in evaluation, recording off, nothing is
 * recorded). The backward collective runs even where this member's loss does
 * not depend on the output (its gradient is then zeros). A collective error
 * fails the op (NULL) or the backward (its status), naming the call.
 *
 * The backward rules treat the job's loss as the SUM of every member's loss
 * L = sum_r L_r, each member holding its own copy of the output:
 *  - all_reduce SUM:   y = sum_r x_r          dx_r = sum_s dy_s (an all-reduce)
 *              MEAN:   y = mean_r x_r         dx_r = mean_s dy_s
 *              MAX/MIN: y = max/min_r x_r     dx_r = sum_s dy_s where x_r == y, else 0
 *                                             (ties: every tying member gets it)
 *              FIRST:  y = x_0                dx_0 = sum_s dy_s, others 0
 *  - all_gather:       y = [x_0; ...; x_N-1]  dx_r = sum_s dy_s[r] (a reduce-scatter)
 *    (y has a new leading axis of size N)
 *  - reduce_scatter SUM/MEAN (x [N*k, ...] -> y [k, ...], block r to rank r):
 *                      y_r = op_s x_s[r]      dx_s[r] = dy_r (an all-gather; /N for MEAN)
 *  - broadcast(root):  y = x_root             dx_root = sum_s dy_s, others 0
 *
 * Megatron's pair follows a different convention: the tensor OUTSIDE the
 * group region is one logical value, replicated (equal) on every member, and
 * the region between the two ops is split over the members:
 *  - copy_to_group:    y = x                  dx = sum_s dy_s (all-reduce)
 *    exact for a replicated x whose single logical gradient is the sum of
 *    what each member's part of the region sends back;
 *  - reduce_from_group: y = sum_r x_r         dx_r = dy (identity)
 *    exact when what follows is replicated: every member computes the same
 *    loss from y, and that loss counts once (not N times).
 * So y = reduce_from_group(f_r(copy_to_group(x))) gives every member the
 * gradient of the one loss L(sum_r f_r(x)) with respect to x and to its own
 * shard's weights.
 *
 * Ops return NULL on error (RP_ERR_INVALID for a NULL comm or a bad op or
 * root, RP_ERR_SHAPE naming the shape, and every comm error). Memory: outputs
 * and the backward's scratch come from the arena; rp_copy_to_group's output
 * shares x's values (a view, as rp_reshape's).
 */
RP_API rp_tensor *rp_tensor_all_reduce(rp_tape *t, rp_comm *c, rp_tensor *x, rp_reduce_op op);
RP_API rp_tensor *rp_tensor_all_gather(rp_tape *t, rp_comm *c, rp_tensor *x);
/* x's leading dimension must be divisible by the member count; op SUM or MEAN. */
RP_API rp_tensor *rp_tensor_reduce_scatter(rp_tape *t, rp_comm *c, rp_tensor *x, rp_reduce_op op);
RP_API rp_tensor *rp_tensor_broadcast(rp_tape *t, rp_comm *c, rp_tensor *x, int root);
RP_API rp_tensor *rp_copy_to_group(rp_tape *t, rp_comm *c, rp_tensor *x);
RP_API rp_tensor *rp_reduce_from_group(rp_tape *t, rp_comm *c, rp_tensor *x);
/*
 * rp_reduce_from_group reduced in x's own storage: y is a view of x, and x holds the sum once it
 * returns, so the step keeps one full-size tensor where it kept two. For a partial result the
 * caller made and reads no more, from an op whose backward does not read its output (a
 * convolution's or a matrix product's: the row-parallel layers' partial sums).
 */
RP_API rp_tensor *rp_reduce_from_group_inplace(rp_tape *t, rp_comm *c, rp_tensor *x);

/*
 * Point-to-point, for pipelines of model stages (comm's rp_comm_send/recv:
 * matched by order on each ordered pair, tag, count and dtype checked).
 *
 * rp_tensor_send sends x's values to `peer` and returns a token: a scalar
 * 0 on this tape that stands for the send. Its backward RECEIVES the
 * gradient of what the peer received (from the peer's rp_tensor_recv
 * backward, same tag) and adds it to x's gradient. So the sending stage
 * back-propagates from the token (rp_backward(t, token)), or from its own
 * loss plus the token (rp_add(t, loss, token), value unchanged).
 * rp_tensor_recv receives a tensor of `shape` (the count must match the
 * sender's numel) from `peer`; its backward SENDS this member's gradient
 * of it back (zeros if the loss did not use it).
 *
 * Both ops record a node whenever the tape records (the pair must agree on
 * whether a gradient message comes back), so a stage that records must run
 * backward through its sends and receives, as its peer will. The backward
 * messages travel in the opposite direction on the same tag, in reverse
 * order of the forward ones; sends buffer, so stages never deadlock on them.
 * Errors: the comm's (RP_ERR_MISMATCH naming both calls, RP_ERR_TIMEOUT
 * naming the peer) and RP_ERR_INVALID/RP_ERR_SHAPE for bad arguments.
 */
RP_API rp_tensor *rp_tensor_send(rp_tape *t, rp_comm *c, rp_tensor *x, int peer, int tag);
RP_API rp_tensor *rp_tensor_recv(rp_tape *t, rp_comm *c, int ndim, const int *shape, int peer,
                                 int tag);

#ifdef __cplusplus
}
#endif
#endif
