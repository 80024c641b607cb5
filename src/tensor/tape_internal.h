/*
 * tape_internal.h - the tape's nodes, shared by the forward ops (ops_*.c) and
 * the backward rules (backward.c). Not installed.
 */
#ifndef RP_TAPE_INTERNAL_H
#define RP_TAPE_INTERNAL_H

#include "kernels/kernels.h"
#include "replicator/comm.h"
#include "replicator/tensor.h"
#include "tensor/tape_residency.h"

typedef enum {
    RP_OP_MATMUL,
    RP_OP_LINEAR,
    RP_OP_CONV2D,
    RP_OP_BATCH_NORM,
    RP_OP_ACT,
    RP_OP_BINARY,
    RP_OP_SCALE,
    RP_OP_CONCAT,
    RP_OP_RESHAPE,
    RP_OP_MAX_POOL,
    RP_OP_AVG_POOL,
    RP_OP_GLOBAL_AVG_POOL,
    RP_OP_UPSAMPLE2X,
    RP_OP_EMBEDDING,
    RP_OP_SOFTMAX_XENT,
    RP_OP_MSE,
    RP_OP_SUM,
    RP_OP_MEAN,
    RP_OP_BINARY_BCAST, /* binary with general (per-axis) broadcasting of b */
    RP_OP_CLAMP,
    RP_OP_LAYER_NORM,
    RP_OP_LOG_SOFTMAX,
    RP_OP_REDUCE_AXES, /* sum or mean over chosen axes */
    RP_OP_CUSTOM,
    RP_OP_SPECTRAL_NORM,
    RP_OP_CAST, /* a copy in another dtype; the gradient passes unchanged */
    /* Collectives: their backward is itself a collective, so it runs even without a gradient. */
    RP_OP_ALL_REDUCE,
    RP_OP_ALL_GATHER,
    RP_OP_REDUCE_SCATTER,
    RP_OP_BROADCAST,
    RP_OP_COPY_TO_GROUP,
    RP_OP_REDUCE_FROM_GROUP,
    RP_OP_SEND,
    RP_OP_RECV,
} tape_op;

/* Whether a node's backward is a collective every member must make, gradient or not. */
static inline bool tape_op_is_collective(tape_op op)
{
    return op >= RP_OP_ALL_REDUCE;
}

/* A tensor flag of the tape's own (the public RP_TENSOR_* flags hold the low bits): a recorded
 * view of a tensor that rp_tape_drop released, its values NULL until a rule reads them. */
#define TAPE_VIEW_DROPPED (1u << 16)
/* An op output whose gradient (x->grad, until its producer's rule has run) holds bf16 values:
 * batch_norm_bwd writes it so for a bf16 convolution's output that nothing else reads (bf16
 * gradients, backward.c). Never a parameter's, a leaf's or one a caller can read. */
#define TAPE_GRAD_BF16 (1u << 17)

#define RP_NODE_MAX_INPUTS 4

typedef struct tape_node {
    tape_op op;
    rp_tensor *out;
    int n_in; /* for CONCAT: number of inputs, in `many` */
    rp_tensor *in[RP_NODE_MAX_INPUTS];
    rp_tensor **many; /* CONCAT inputs (arena) */
    void *saved;      /* op-specific arena memory (argmax, probs, xhat...) */
    void *saved2;
    size_t saved_bytes; /* nonzero when `saved` is arena memory of this node's own: released after
                           its backward (saved2 is never released: it may be borrowed) */
    rp_dtype compute; /* MATMUL, LINEAR: the products' type, as the forward ran (CONV2D: a.conv) */
    union {
        kernels_conv_desc conv;
        kernels_pool_desc pool;
        struct {
            kernels_act act;
            float slope;
        } act;
        struct {
            kernels_binop op;
            int64_t nb;
        } bin;
        struct {
            float s;
        } scale;
        struct {
            float momentum, eps;
            bool training, relu;
            double count;
            rp_bn_reduce_fn reduce;
            void *ctx;
            rp_comm *comm;
        } bn;
        struct {
            kernels_binop op;
            int64_t shape[RP_MAX_DIMS], bstride[RP_MAX_DIMS];
        } bcast;
        struct {
            float lo, hi;
        } clamp;
        struct {
            float eps;
        } ln;
        struct {
            int64_t shape[RP_MAX_DIMS];
            unsigned mask;
            float scale;
        } red;
        struct {
            const rp_custom_op *op;
            void *ctx;
        } custom;
        struct {
            rp_comm *comm;
            rp_reduce_op op;
            int root, peer, tag;
            rp_dtype wire; /* the tape's grad_wire when recorded */
        } coll;
        struct {
            int n;
        } emb;
        struct {
            bool hard;
        } xent; /* SOFTMAX_XENT: saved2 holds int32 labels, else float targets */
        struct {
            int64_t rows, cols;
            double sigma;
        } sn; /* saved: u' [rows] then v [cols], double */
    } a;
} tape_node;

struct rp_tape {
    rp_arena *arena;     /* host memory: tensor structs, node arrays, ops' host contexts */
    rp_arena *store;     /* the kernel table's storage: values, gradients, saved buffers, scratch */
    rp_arena_memory mem; /* store's memory: k's mem_alloc, mem_free and mem_fill */
    const kernels_table *k;
    bool recording;
    bool backward_done;
    tape_node *nodes; /* persistent, grows to the high-water mark */
    int n_nodes, cap_nodes;
    rp_tensor **params; /* parameters used since the last reset (pending > 0 at first use) */
    int n_params, cap_params;
    struct tape_ready_entry {
        rp_grad_ready_fn fn;
        void *ctx;
    } * ready; /* persistent listener list */
    int n_ready, cap_ready;
    struct tape_scratch_entry {
        void *p;
        size_t bytes;
    } * scratch; /* the running rule's scratch, released when it returns (persistent list) */
    int n_scratch, cap_scratch;
    rp_precision_policy precision; /* which ops the forward runs in bf16 */
    rp_dtype grad_wire;            /* the collectives' gradient reductions: f32 or bf16 */
    bool bf16_grads;     /* bf16 gradients where they change no value (backward.c); on by default */
    int bf16_grads_made; /* how many gradients backward wrote in bf16 (tape_bf16_grads_made) */
};

/* Bytes of x's gradient: numel floats, or numel bf16 values under TAPE_GRAD_BF16. */
static inline size_t tape_grad_bytes(const rp_tensor *x)
{
    return (size_t)x->numel * (x->flags & TAPE_GRAD_BF16 ? sizeof(rp_bf16) : sizeof(float));
}

/*
 * Turns the bf16 gradients (backward.c) on or off for the tape's later backward passes: on by
 * default; off only to compare against, as tests do (the values are the same either way).
 */
void tape_set_bf16_grads(rp_tape *t, bool on);
/* How many gradients the tape's backward passes have written in bf16, since its creation. */
int tape_bf16_grads_made(const rp_tape *t);

/* The calling thread's use hook (tape_residency.h): NULL unless a strategy shards values. */
extern _Thread_local tape_use_fn tape_thread_use;

/* The compute type the tape's policy gives an op of class `cls` (RP_AUTOCAST_*). */
rp_dtype tape_compute(const rp_tape *t, unsigned cls);

/* C = alpha op(A) op(B) + beta C in the compute type (the kernels' gemm or gemm_bf16). */
rp_status tape_gemm(rp_tape *t, rp_dtype compute, bool ta, bool tb, int m, int n, int k,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c,
                    int ldc);

/* `bytes` of the tape's storage (values, saved buffers), until the reset; NULL on OOM. */
void *tape_store(rp_tape *t, size_t bytes);
/* A copy of `bytes` of host memory in the tape's storage (labels, indices); NULL on OOM. */
void *tape_upload(rp_tape *t, const void *host, size_t bytes);
/*
 * Host views of storage, for code that must run on the host over it (a collective, batch norm's
 * reduce hook). With a host table (k->host_storage) each is the storage itself and nothing is
 * copied; otherwise a staging buffer from the tape's host arena (until the reset):
 *  - tape_host_in: the values, downloaded (for reading);
 *  - tape_host_out: a buffer for results (not downloaded), then
 *  - tape_host_commit: uploads what the host wrote back into the storage.
 * NULL on OOM.
 */
void *tape_host_in(rp_tape *t, const void *storage, size_t bytes);
void *tape_host_out(rp_tape *t, void *storage, size_t bytes);
void tape_host_commit(rp_tape *t, void *storage, const void *host, size_t bytes);

/*
 * A host shadow of x for a custom op's callbacks (host code by contract): x itself with a host
 * table; otherwise a copy of x's struct on the host arena whose values are a host view
 * (downloaded when `download`). tape_host_tensor_commit uploads the shadow's values back into x.
 * NULL on OOM.
 */
rp_tensor *tape_host_tensor(rp_tape *t, rp_tensor *x, bool download);
void tape_host_tensor_commit(rp_tape *t, rp_tensor *x, const rp_tensor *shadow);

/* Sets a one-element f32 tensor's value from the host (a loss the kernels returned). */
void tape_set_scalar(rp_tape *t, rp_tensor *y, float value);

/* A fresh tensor on the tape (struct from the arena, values from the storage); NULL on OOM. */
rp_tensor *tape_tensor(rp_tape *t, int ndim, const int *shape);
/* The same with values of type dtype (RP_F32 or RP_BF16). */
rp_tensor *tape_tensor_typed(rp_tape *t, int ndim, const int *shape, rp_dtype dtype);

/* Bytes of x's values. */
static inline size_t tape_bytes(const rp_tensor *x)
{
    return (size_t)x->numel * rp_dtype_size(x->dtype);
}

/*
 * An op's input that may be a parameter: NULL passed on (an earlier op failed), and a parameter's
 * values made present first where a strategy shards them (tape_residency.h: ZeRO-3's gathers).
 * Every op takes each of its inputs through this (or TAPE_F32_IN, which includes it; TAPE_USE for
 * an optional input) before it reads any of them. NULL with the hook's error recorded when the
 * gather fails.
 */
rp_status tape_use(rp_tape *t, rp_tensor *param, int node);
#define TAPE_USE(t, x)                                                                             \
    do {                                                                                           \
        if ((x) && ((x)->flags & RP_TENSOR_PARAM) && tape_thread_use &&                            \
            tape_use((t), (x), -1) != RP_OK)                                                       \
            return NULL;                                                                           \
    } while (0)
#define TAPE_PARAM_IN(t, x)                                                                        \
    do {                                                                                           \
        RP_PROPAGATE_NULL(x);                                                                      \
        TAPE_USE(t, x);                                                                            \
    } while (0)

/*
 * Under a use hook (tape_residency.h): an op of n inputs reading more parameters than the hook
 * holds, and a view of a parameter (whose reads the hook would not see), are refused
 * (RP_ERR_UNSUPPORTED naming the op and the parameter); RP_OK otherwise, and always without one.
 */
rp_status tape_use_many(rp_tape *t, rp_tensor *const *in, int n, const char *who);
rp_status tape_use_view(const rp_tape *t, const rp_tensor *x, const char *who);

/*
 * x itself when it is f32, else an f32 copy recorded as an RP_OP_CAST (gradients flow through
 * unchanged). Every op whose kernels read only f32 takes its inputs through TAPE_F32_IN, so a
 * bf16 activation reaches it widened; NULL on OOM.
 */
rp_tensor *tape_f32(rp_tape *t, rp_tensor *x);
#define TAPE_F32_IN(t, x)                                                                          \
    do {                                                                                           \
        TAPE_PARAM_IN(t, x);                                                                       \
        if ((x)->dtype != RP_F32) {                                                                \
            (x) = tape_f32((t), (x));                                                              \
            RP_PROPAGATE_NULL(x);                                                                  \
        }                                                                                          \
    } while (0)

/*
 * Whether an op with these inputs must be recorded: the tape records and at
 * least one input requires a gradient.
 */
bool tape_needs_grad(const rp_tape *t, rp_tensor *const *in, int n);

/*
 * Appends a node producing `out` from `in` and marks out as requiring a
 * gradient. Returns the node (its `a`, `saved` fields for the caller to
 * fill) or NULL on OOM.
 */
tape_node *tape_record(rp_tape *t, tape_op op, rp_tensor *out, rp_tensor *const *in, int n);

/* Runs the backward rule of one node (backward.c). */
rp_status tape_node_backward(rp_tape *t, tape_node *node);

/*
 * Gradient targets, shared by the rules in backward.c
 * (see backward.c): tape_grad_out for kernels that overwrite (then
 * tape_grad_commit), tape_grad_acc for ones that accumulate. NULL when x
 * needs no gradient; *fail set on OOM (then return tape_oom()).
 */
bool tape_wants_grad(const rp_tensor *x);
float *tape_grad_out(rp_tape *t, rp_tensor *x, bool *fail);
void tape_grad_commit(rp_tape *t, rp_tensor *x, float *buf);
float *tape_grad_acc(rp_tape *t, rp_tensor *x, bool *fail);
rp_status tape_oom(void); /* tape_error.c */

/*
 * Scratch for one backward rule (backward.c): arena memory the tape releases
 * as soon as the rule returns. NULL on OOM. tape_grad_out's scratch comes
 * from here too.
 */
void *tape_scratch(rp_tape *t, size_t bytes);

/* Recomputes the values of y, dropped by rp_tape_drop, from its batch norm node (backward.c). */
rp_status tape_recompute(rp_tape *t, rp_tensor *y);

/* An op's input that is NULL because an earlier op failed is passed on by RP_PROPAGATE_NULL
 * (core.h). */

/*
 * A leaf on t's arena that shares x's values under the shape [ndim, shape]: tensors are never
 * written after they are made, so an op that only relabels its input (reshape, detach,
 * copy_to_group) makes a view, not a copy. The caller records a node if it wants one. NULL on OOM.
 */
rp_tensor *tape_view(rp_tape *t, rp_tensor *x, int ndim, const int *shape);

/*
 * The error for a custom op's callback that returned `st` in `phase` ("forward", "backward"): it
 * names the op and carries the callback's own message (when it set one).
 */
rp_status tape_custom_error(rp_status st, const rp_custom_op *op, const char *phase);

#endif
