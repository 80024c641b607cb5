/*
 * replicator/tensor.h - tensors, the tape (reverse-mode autodiff) and the ops.
 *
 * A tensor is f32, 0-D to 4-D, row-major. Image tensors are NHWC
 * (channels-last); convolution weights are OHWI ([out][kh][kw][in]).
 *
 * Ops take a tape and return a new tensor whose storage comes from the tape's
 * arena; it lives until rp_tape_reset(). While the tape records (training),
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
};

typedef struct rp_tensor {
    int ndim;               /* 0..RP_MAX_DIMS */
    int shape[RP_MAX_DIMS]; /* shape[0..ndim-1]; unused dims are 1 */
    int64_t numel;          /* product of shape */
    float *data;            /* [numel] */
    float *grad;            /* [numel], or NULL while no gradient exists */
    uint32_t flags;         /* RP_TENSOR_* */
    int node;               /* index of the tape node that produced it, -1 for leaves */
    /* Parameters only: */
    char name[RP_NAME_MAX]; /* stable name, e.g. "stage1.block0.conv1.weight" */
    int index;              /* position in its parameter list */
    int pending;            /* uses on the current tape whose backward has not run */
} rp_tensor;

/* ---- tensors ------------------------------------------------------------ */

/* Largest number of elements a tensor may have (2^40: 4 TiB of floats). */
#define RP_MAX_NUMEL ((int64_t)1 << 40)

/*
 * Number of elements of a shape (1 for ndim 0), or -1 if a dimension is
 * below 1 or the product exceeds RP_MAX_NUMEL.
 */
int64_t rp_shape_numel(int ndim, const int *shape);

/* True if the two tensors have the same ndim and shape. */
bool rp_tensor_same_shape(const rp_tensor *a, const rp_tensor *b);

/*
 * Writes "[2, 3, 4]" into buf (always NUL-terminated) and returns buf. For
 * error messages.
 */
const char *rp_shape_str(const rp_tensor *t, char *buf, size_t size);

/* The single value of a tensor with one element (NAN if x is NULL or larger). */
float rp_item(const rp_tensor *x);

/* ---- the tape ----------------------------------------------------------- */

typedef struct rp_tape rp_tape;

/*
 * Called during rp_backward() the moment a parameter's gradient is final for
 * this tape: every use of it in the forward pass has been back-propagated.
 * The runtime starts gradient all-reduces from here.
 */
typedef void (*rp_grad_ready_fn)(rp_tensor *param, void *ctx);

/* Creates a tape with its own arena (grows as needed; 0 picks a default). */
rp_status rp_tape_create(rp_tape **tape, size_t arena_bytes);
/*
 * Frees the tape and everything made on it. A tape that recorded uses of
 * parameters and did not run rp_backward() since still refers to them:
 * destroy (or reset) it before the parameters.
 */
void rp_tape_destroy(rp_tape *tape);

/*
 * Forgets every node and frees every tensor made on this tape (arena reset).
 * Call it at the start of each step. Parameter gradients are untouched.
 */
void rp_tape_reset(rp_tape *tape);

/* Recording on (training, default) or off (evaluation: no nodes, no saved values). */
void rp_tape_set_recording(rp_tape *tape, bool on);
bool rp_tape_recording(const rp_tape *tape);

/* The arena the tape allocates from (e.g. for inputs of this step). */
rp_arena *rp_tape_arena(rp_tape *tape);

/* Number of nodes recorded since the last reset. */
int rp_tape_size(const rp_tape *tape);

/* Installs the gradient-ready callback (NULL to remove). */
void rp_tape_on_grad_ready(rp_tape *tape, rp_grad_ready_fn fn, void *ctx);

/*
 * Back-propagates from `loss` (one element; its gradient is seeded with 1)
 * through every recorded node, accumulating into the `grad` of every tensor
 * that requires it. Parameter gradients accumulate (+=) until the optimizer
 * clears them; activation gradients live in the arena.
 * Errors: RP_ERR_INVALID if loss is NULL, not scalar or not on this tape.
 */
rp_status rp_backward(rp_tape *tape, rp_tensor *loss);

/* ---- creating tensors on a tape ------------------------------------------ */

/* An uninitialised tensor from the tape's arena (a leaf: no node). */
rp_tensor *rp_tensor_new(rp_tape *tape, int ndim, const int *shape);
/* A leaf tensor holding a copy of `data` (numel floats). */
rp_tensor *rp_tensor_from(rp_tape *tape, int ndim, const int *shape, const float *data);
/* A leaf tensor filled with `value`. */
rp_tensor *rp_tensor_fill(rp_tape *tape, int ndim, const int *shape, float value);

/* ---- ops ----------------------------------------------------------------- */
/* Each returns a new tensor on the tape, or NULL (see the top of this file). */

/* [M,K] x [K,N] -> [M,N]. */
rp_tensor *rp_matmul(rp_tape *t, rp_tensor *a, rp_tensor *b);
/* x [N,in], w [out,in], b [out] or NULL -> x w^T + b, [N,out]. */
rp_tensor *rp_linear(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b);

typedef struct rp_conv_params {
    int stride; /* same in both directions, >= 1 */
    int pad;    /* zero padding on every side, >= 0 */
} rp_conv_params;

/* x [N,H,W,C] NHWC, w [O,KH,KW,C] OHWI, b [O] or NULL -> [N,OH,OW,O]. */
rp_tensor *rp_conv2d(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b, rp_conv_params p);

/*
 * Hook that lets batch norm's per-channel sums be combined across replicas.
 * `sums` holds `count` doubles (two per-channel vectors back to back: sum and
 * sum of squares forward, sum(dy) and sum(dy*xhat) backward) and *n the
 * number of elements each sum covers. A cross-replica hook all-reduces both
 * in place. Returning non-RP_OK fails the op.
 */
typedef rp_status (*rp_bn_reduce_fn)(double *sums, int count, double *n, void *ctx);

typedef struct rp_bn_params {
    float momentum;           /* running = (1-m) running + m batch; default 0.1 */
    float eps;                /* default 1e-5 */
    bool training;            /* batch statistics (true) or running statistics (false) */
    bool relu;                /* apply a ReLU to the output, fused (one pass fewer each way) */
    rp_bn_reduce_fn reduce;   /* NULL: statistics over this replica's batch only */
    void *reduce_ctx;
} rp_bn_params;

rp_bn_params rp_bn_params_default(void);

/*
 * Batch norm over every axis but the last (channels): x [...,C], gamma and
 * beta [C]. running_mean and running_var [C] (may be NULL in training) are
 * updated in training mode with the unbiased batch variance.
 */
rp_tensor *rp_batch_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                         rp_tensor *running_mean, rp_tensor *running_var, rp_bn_params p);

rp_tensor *rp_relu(rp_tape *t, rp_tensor *x);
rp_tensor *rp_leaky_relu(rp_tape *t, rp_tensor *x, float slope);
rp_tensor *rp_tanh(rp_tape *t, rp_tensor *x);
rp_tensor *rp_sigmoid(rp_tape *t, rp_tensor *x);

/*
 * Element-wise a (op) b. `b` has a's shape, or broadcasts: its shape is a
 * suffix of a's shape (leading 1s ignored), so b repeats every numel(b)
 * elements of a. That covers per-channel ([C] against [N,H,W,C]) and
 * per-sample-position ([1,H,W,C]) broadcasting.
 */
rp_tensor *rp_add(rp_tape *t, rp_tensor *a, rp_tensor *b);
rp_tensor *rp_sub(rp_tape *t, rp_tensor *a, rp_tensor *b);
rp_tensor *rp_mul(rp_tape *t, rp_tensor *a, rp_tensor *b);
/* s * x. */
rp_tensor *rp_scale(rp_tape *t, rp_tensor *x, float s);

/* Concatenates along the last axis (channels); all other dims equal. n >= 1. */
rp_tensor *rp_concat(rp_tape *t, rp_tensor *const *xs, int n);

/* Same values, new shape (numel must match). Shares x's data storage; has its own gradient. */
rp_tensor *rp_reshape(rp_tape *t, rp_tensor *x, int ndim, const int *shape);
/* [N, ...] -> [N, rest]. */
rp_tensor *rp_flatten(rp_tape *t, rp_tensor *x);

typedef struct rp_pool_params {
    int kernel; /* square window */
    int stride;
    int pad;    /* max pool pads with -inf, average pool excludes padding */
} rp_pool_params;

rp_tensor *rp_max_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p);
rp_tensor *rp_avg_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p);
/* [N,H,W,C] -> [N,C]. */
rp_tensor *rp_global_avg_pool(rp_tape *t, rp_tensor *x);
/* Nearest-neighbour 2x: [N,H,W,C] -> [N,2H,2W,C]. */
rp_tensor *rp_upsample2x(rp_tape *t, rp_tensor *x);

/* table [V,D], idx[n] in [0,V) -> [n,D]. Out-of-range indices are an error. */
rp_tensor *rp_embedding(rp_tape *t, rp_tensor *table, const int32_t *idx, int n);

/* Mean softmax cross-entropy: logits [N,C], labels[N] in [0,C). Scalar. */
rp_tensor *rp_softmax_cross_entropy(rp_tape *t, rp_tensor *logits, const int32_t *labels);
/* Mean over rows of -sum_c target[n,c] log softmax(logits)[n,c]; target [N,C], no gradient to it. */
rp_tensor *rp_softmax_cross_entropy_soft(rp_tape *t, rp_tensor *logits, rp_tensor *target);
/* Mean of (a-b)^2 over all elements; same shapes. Scalar. */
rp_tensor *rp_mse(rp_tape *t, rp_tensor *a, rp_tensor *b);

/* Sum / mean of all elements. Scalar. */
rp_tensor *rp_sum(rp_tape *t, rp_tensor *x);
rp_tensor *rp_mean(rp_tape *t, rp_tensor *x);

#ifdef __cplusplus
}
#endif
#endif
