/*
 * kernels.h - the compute layer. Everything that loops over tensor elements
 * lives behind this table. The tables: `ref` (src/kernels/ref/, plain C, the numerical
 * specification), `cpu` (src/kernels/cpu/, OpenBLAS, oneDNN and vectorisable loops), `cuda`
 * (src/kernels/cuda/, built with a CUDA toolkit: storage in device memory, work queued on the
 * calling thread's stream; docs/gpu.md), and `strict` (src/kernels/strict/), cpu's kernels
 * over storage the host cannot read between calls.
 *
 * Argument order, as in llm.c: outputs, saved values, inputs, weights, dims.
 * Gradient arguments are prefixed with d. Unless a kernel says "accumulates",
 * it overwrites its outputs. Every slot is mandatory in both tables.
 *
 * Kernels run on the calling thread's team: rp_kernels_set_threads() sets it.
 */
#ifndef RP_KERNELS_H
#define RP_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "replicator/core.h"
#include "replicator/kernels.h"

/*
 * A 2-D convolution, NHWC activations, OHWI weights. `compute` is the type
 * of its products: RP_F32 (what kernels_conv_desc_init sets), or RP_BF16: the
 * kernel rounds its two multiplied inputs (x and w forward, dy and w for
 * backward data, dy and x for backward weights, and dy for the bias
 * gradient's sum) to bf16, multiplies them exactly and accumulates in f32;
 * the buffers stay f32 on both sides.
 */
typedef struct kernels_conv_desc {
    int n, h, w, c; /* input  [n,h,w,c] */
    int o, kh, kw;  /* weight [o,kh,kw,c] */
    int oh, ow;     /* output [n,oh,ow,o] */
    int stride, pad;
    rp_dtype compute; /* RP_F32 or RP_BF16 */
    rp_dtype x_type;  /* the storage of x (forward, backward weights): RP_F32 or, with bf16
                         compute, RP_BF16 */
    rp_dtype y_type;  /* the storage of the forward's y: likewise */
    rp_dtype dy_type; /* the storage of the backward passes' dy: RP_F32 or, with bf16 compute,
                         RP_BF16 (a gradient its producer rounded as the passes would: the
                         tape's bf16 gradients, kernels_table.bf16_grads); dx, dw, db stay f32 */
} kernels_conv_desc;

/* Fills oh/ow from the rest; RP_ERR_SHAPE (with a message) if the output would be empty. */
rp_status kernels_conv_desc_init(kernels_conv_desc *d, int n, int h, int w, int c, int o, int kh,
                                 int kw, int stride, int pad);

/* A 2-D pooling window over NHWC. */
typedef struct kernels_pool_desc {
    int n, h, w, c;
    int oh, ow;
    int k, stride, pad;
    rp_dtype type; /* max pooling's x and y: RP_F32 (what kernels_pool_desc_init sets) or RP_BF16,
                      a maximum being exact in either; average pooling: RP_F32 */
} kernels_pool_desc;

rp_status kernels_pool_desc_init(kernels_pool_desc *d, int n, int h, int w, int c, int k,
                                 int stride, int pad);

/* ELU's alpha travels in `slope`. SQRT and RECIPROCAL: derivatives from y (1/(2y), -y^2). */
typedef enum {
    RP_ACT_RELU,
    RP_ACT_LEAKY_RELU,
    RP_ACT_TANH,
    RP_ACT_SIGMOID,
    RP_ACT_ELU,
    RP_ACT_SQRT,
    RP_ACT_RECIPROCAL,
} kernels_act;
typedef enum { RP_BIN_ADD, RP_BIN_SUB, RP_BIN_MUL, RP_BIN_DIV } kernels_binop;

typedef struct kernels_table {
    const char *name;
    /* Storage is host memory (cpu, ref): other layers may hand a storage pointer straight to host
       code, a collective say, instead of staging it through mem_download and mem_upload. */
    bool host_storage;
    /* The table takes bf16 gradients: conv backward's dy as kernels_conv_desc.dy_type says, and
       bn_bwd_data_bf16's dx in bf16. The tape hands them only to a table that sets this. */
    bool bf16_grads;

    /* C[M,N] = alpha op(A) op(B) + beta C, row-major; op(A) is [M,K], op(B) [K,N]. */
    void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /*
     * The same product with A's and B's elements rounded to bf16 (rp_bf16_from_f32), their
     * products exact and summed in f32 (bf16 compute, f32 buffers). alpha and beta as gemm.
     * RP_ERR_BACKEND or RP_ERR_NOMEM when the engine fails; C is then unspecified.
     */
    rp_status (*gemm_bf16)(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float *a, int lda, const float *b, int ldb, float beta, float *c,
                           int ldc);

    /* Convolution. bias may be NULL. bwd_weights overwrites dw and db (db may be NULL). */
    rp_status (*conv2d_fwd)(void *y, const void *x, const float *w, const float *bias,
                            const kernels_conv_desc *d);
    rp_status (*conv2d_bwd_data)(float *dx, const void *dy, const float *w,
                                 const kernels_conv_desc *d);
    rp_status (*conv2d_bwd_weights)(float *dw, float *db, const void *dy, const void *x,
                                    const kernels_conv_desc *d);
    /*
     * Both backward passes from one dy (dx, dw and db when not NULL; dx and dw not NULL), as
     * bwd_data then bwd_weights compute them. Takes the table, as the bf16 batch norms do:
     * tables with nothing to share point at kernels_conv2d_bwd_pair, which calls the two.
     */
    rp_status (*conv2d_bwd)(const struct kernels_table *k, float *dx, float *dw, float *db,
                            const void *dy, const float *w, const void *x,
                            const kernels_conv_desc *d);

    /* Max pooling saves the flat input offset of each output's maximum in argmax. */
    rp_status (*maxpool_fwd)(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d);
    rp_status (*maxpool_bwd)(float *dx, const int32_t *argmax, const float *dy,
                             const kernels_pool_desc *d);
    /* Average pooling, padding excluded from the divisor. */
    rp_status (*avgpool_fwd)(float *y, const float *x, const kernels_pool_desc *d);
    rp_status (*avgpool_bwd)(float *dx, const float *dy, const kernels_pool_desc *d);

    /*
     * Batch norm over rows of x viewed as [m, c], optionally fused with a
     * ReLU on its output. xhat = (x-mean)*invstd is never stored: backward
     * recomputes it from x, which costs less than writing and reading it.
     *  - stats: per-channel sum and sum of squares of x into sums[0..c) and
     *    sums[c..2c).
     *  - norm_fwd: y = gamma*xhat + beta, then max(y, 0) when relu.
     *  - stats_bwd: sum(g) and sum(g*xhat) per channel into sums, where g is
     *    dy, or dy where y > 0 and 0 elsewhere when y (the fused ReLU's
     *    output) is not NULL.
     *  - bwd_data: dx = gamma*invstd*(g - sums[j]/count - xhat*sums[c+j]/count),
     *    count the rows the (possibly cross-replica) sums cover. All-zero
     *    sums give the inference-mode gradient gamma*invstd*g.
     * Sums are double: the variance E[x^2]-E[x]^2 cancels badly in float
     * (the fast stats kernel's float partial sums are centred for the same
     * reason, and it returns plain sums).
     */
    void (*bn_stats)(double *sums, const float *x, int64_t m, int c);
    /* y = gamma*xhat + beta (+ residual, [m*c], when not NULL), then the ReLU if relu. */
    void (*bn_norm_fwd)(float *y, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, const float *residual, bool relu,
                        int64_t m, int c);
    /* g_out (when not NULL) also receives the gradient reaching the normalisation: dy, masked by
       y > 0 when y is given (a fused ReLU), in the same pass. */
    void (*bn_stats_bwd)(double *sums, const float *dy, const float *y, const float *x,
                         const float *mean, const float *invstd, int64_t m, int c, float *g_out);
    void (*bn_bwd_data)(float *dx, const float *dy, const float *y, const float *x,
                        const float *mean, const float *invstd, const double *sums,
                        const float *gamma, double count, int64_t m, int c);

    /*
     * The same four over activations stored in bf16 (x, the fused ReLU's y, the residual; the
     * output y is rounded to bf16); statistics, dy and g_out stay f32 and double, and dx is f32
     * unless dx_type is RP_BF16 (tables with bf16_grads): then each value is the f32 one
     * rounded by rp_bf16_from_f32, as a bf16 convolution's backward would round it. `k` is
     * the table itself (call as k->bn_stats_bf16(k, ...)): the ref table points at
     * kernels/bn_bf16.c, which runs k's own f32 kernels on widened chunks of rows; the cpu
     * table's read bf16 inside their vector loops (cpu/elementwise.c; ResNet-20's bf16 step
     * 1.33-1.37x faster than through the chunks).
     */
    void (*bn_stats_bf16)(const struct kernels_table *k, double *sums, const rp_bf16 *x, int64_t m,
                          int c);
    void (*bn_norm_fwd_bf16)(const struct kernels_table *k, rp_bf16 *y, const rp_bf16 *x,
                             const float *mean, const float *invstd, const float *gamma,
                             const float *beta, const rp_bf16 *residual, bool relu, int64_t m,
                             int c);
    void (*bn_stats_bwd_bf16)(const struct kernels_table *k, double *sums, const float *dy,
                              const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                              const float *invstd, int64_t m, int c, float *g_out);
    void (*bn_bwd_data_bf16)(const struct kernels_table *k, void *dx, rp_dtype dx_type,
                             const float *dy, const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                             const float *invstd, const double *sums, const float *gamma,
                             double count, int64_t m, int c);

    /* y = act(x); dx = dy * act'(x) computed from y (and x for leaky relu). */
    void (*act_fwd)(float *y, const float *x, int64_t n, kernels_act act, float slope);
    void (*act_bwd)(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                    kernels_act act, float slope);
    /* y = max(x, 0) rounded to bf16 (rp_bf16_from_f32): a ReLU whose output only a bf16
       convolution reads, which would round it the same way. */
    void (*relu_fwd_bf16)(rp_bf16 *y, const float *x, int64_t n);

    /* y[i] = a[i] op b[i % nb], n a multiple of nb. y may alias a. */
    void (*binary)(float *y, const float *a, const float *b, int64_t n, int64_t nb,
                   kernels_binop op);
    /*
     * Per-axis broadcasting over a 4-D index space `shape` (a's, row-major;
     * pad with leading 1s): y[i] = a[i] op b[sum_d idx_d * bstride[d]], where
     * bstride[d] is 0 along b's broadcast axes. y may alias a.
     */
    void (*binary_bcast)(float *y, const float *a, const float *b, const int64_t *shape,
                         const int64_t *bstride, kernels_binop op);
    /*
     * Reduction over the axes set in `mask` (bit d: axis d of the 4-D `shape`):
     * y over the kept axes, row-major, (+)= scale * sum (in double).
     */
    void (*reduce_axes)(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                        bool accumulate);
    /* The adjoint: x[i] (+)= scale * y[i's index over the kept axes]. */
    void (*expand_axes)(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                        bool accumulate);
    /* y = min(max(x, lo), hi); dx = dy where lo <= x <= hi, else 0. */
    void (*clamp_fwd)(float *y, const float *x, int64_t n, float lo, float hi);
    void (*clamp_bwd)(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi);
    /* dx[i] += g[i] where x[i] == y[i] (the members that held a max or min). */
    void (*select_eq_acc)(float *dx, const float *g, const float *x, const float *y, int64_t n);
    /*
     * Layer norm over rows of [rows, d]: y = (x-mean)*rstd*gamma + beta
     * (gamma, beta NULL: 1, 0), saving mean and rstd [rows]. bwd overwrites
     * dx and accumulates dgamma, dbeta (each may be NULL).
     */
    void (*layernorm_fwd)(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int64_t rows, int d, float eps);
    void (*layernorm_bwd)(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                          const float *mean, const float *rstd, const float *gamma, int64_t rows,
                          int d);
    /* y = x - logsumexp(x) per row of [rows, c]; dx = dy - exp(y) * sum(dy) per row. */
    void (*log_softmax_fwd)(float *y, const float *x, int64_t rows, int c);
    void (*log_softmax_bwd)(float *dx, const float *dy, const float *y, int64_t rows, int c);
    /* Sum of squares, in double. */
    double (*sum_squares)(const float *x, int64_t n);
    /* y[i] *= s, in place. */
    void (*scale_inplace)(float *y, float s, int64_t n);
    /* y[i] = s * x[i] (+ y[i] when accumulate). */
    void (*scale)(float *y, const float *x, float s, int64_t n, bool accumulate);
    /* y[i] += x[i]. */
    void (*add_inplace)(float *y, const float *x, int64_t n);
    /* y[i] = a[i] * b[i] (+ y[i] when accumulate). */
    void (*mul)(float *y, const float *a, const float *b, int64_t n, bool accumulate);
    /* y[j] (+)= sum over i of x[i*nb + j], j < nb: folds a broadcast back. */
    void (*reduce_rows)(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
    /* y[i] += s. */
    void (*add_scalar)(float *y, float s, int64_t n);
    /* Sum of all elements, in double. */
    double (*sum)(const float *x, int64_t n);

    /* Copies a [rows, w] block into columns [off, off+w) of a [rows, ldy] array, and back. */
    void (*copy_cols)(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w);
    void (*gather_cols)(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows, int64_t w,
                        bool accumulate);

    /* Nearest 2x upsampling of [n,h,w,c] (a copy: values of `type`, RP_F32 or RP_BF16) and its
       adjoint (sums 2x2 blocks, f32). */
    void (*upsample2x_fwd)(void *y, const void *x, rp_dtype type, int n, int h, int w, int c);
    void (*upsample2x_bwd)(float *dx, const float *dy, int n, int h, int w, int c);
    /* Global average pool [n,hw,c] -> [n,c] and its adjoint. */
    void (*gap_fwd)(float *y, const float *x, int n, int hw, int c);
    void (*gap_bwd)(float *dx, const float *dy, int n, int hw, int c);

    /* Embedding rows: y[i,:] = table[idx[i],:]; bwd accumulates into dtable. */
    void (*embedding_fwd)(float *y, const float *table, const int32_t *idx, int n, int d);
    void (*embedding_bwd)(float *dtable, const float *dy, const int32_t *idx, int n, int d);

    /*
     * Softmax cross-entropy over rows of logits [n,c]. Writes probs [n,c]
     * (saved for backward) and returns the mean loss. Hard labels use
     * `labels`, soft ones `target` (the other is NULL).
     */
    double (*softmax_xent_fwd)(float *probs, const float *logits, const int32_t *labels,
                               const float *target, int n, int c);
    /* dlogits = scale * (probs - onehot/target). */
    void (*softmax_xent_bwd)(float *dlogits, const float *probs, const int32_t *labels,
                             const float *target, float scale, int n, int c);

    /* Bytes the calling thread's kernel caches hold (NULL: the table keeps none). */
    size_t (*cache_bytes)(void);
    /* Conversions (rp_bf16_from_f32's rounding; widening is exact). */
    void (*cast_f32_bf16)(rp_bf16 *y, const float *x, int64_t n);
    void (*cast_bf16_f32)(float *y, const rp_bf16 *x, int64_t n);
    /*
     * Which bf16 path this table's gemm_bf16 and bf16 convolutions take on this CPU:
     * "amx", "avx512_bf16", "avx512_core (emulated)", or "reference" (rounded inputs, f32
     * arithmetic: correct, and slow). Never NULL.
     */
    const char *(*bf16_path)(void);

    /* ---- optimizer ---- */
    /*
     * The optimizers' update rules over n elements (rp_optim_apply() computes the scalars once
     * per call). Each updates w and its state in place and only reads g; no two arrays overlap.
     * Results are bitwise the same in every table: checkpoints and the replicas' agreement are
     * compared byte for byte, so the float operations are fixed as written here.
     *  - sgd_update, momentum 0 (mom unused, may be NULL): w -= lr * (g + wd*w), or w -= lr*g
     *    when wd is 0. Otherwise torch.optim.SGD with dampening 0: d = g + wd*w; the buffer
     *    b = d when `first` (whatever mom held: it is set, not blended), else momentum*mom + d;
     *    mom = b; w -= lr * (d + momentum*b) with nesterov, w -= lr*b without.
     *  - adam_update (Adam, and AdamW through shrink): wi = w*shrink; gi = g + l2*wi;
     *    m = b1*m + (1-b1)*gi; v = b2*v + (1-b2)*gi*gi; w = wi - step_size *
     *    (m / (sqrtf(v)/sqrt_bc2 + eps)), every operation in float.
     */
    void (*sgd_update)(float *w, float *mom, const float *g, int64_t n, float lr, float momentum,
                       float wd, bool nesterov, bool first);
    void (*adam_update)(float *w, float *m, float *v, const float *g, int64_t n, float b1, float b2,
                        float eps, float l2, float shrink, float step_size, float sqrt_bc2);
    /*
     * Index of the first non-finite element (NaN or an infinity) of x[0, n), or -1; when one is
     * found and value is not NULL, *value receives it (so callers name it without reading x).
     */
    int64_t (*first_nonfinite)(float *value, const float *x, int64_t n);
    /* ---- norms, checksums, servers ---- */
    /*
     * Batch norm's per-channel statistics from bn_stats' (possibly all-reduced) sums over
     * `count` rows: mean = sums[j]/count, var = max(sums[c+j]/count - mean^2, 0) in double;
     * writes mean and invstd = 1/sqrt(var + eps) as floats, and mean_rest = what rounding the
     * mean to float left out (backward's correction). Then the running averages, each skipped
     * when NULL: running = (1-momentum)*running + momentum*x with x the mean and the unbiased
     * variance var*count/(count-1); (1-momentum)*running is a float product, the rest double.
     */
    void (*bn_train_stats)(float *mean, float *invstd, float *mean_rest, float *running_mean,
                           float *running_var, const double *sums, double count, float eps,
                           float momentum, int c);
    /* Inference mode: mean = running_mean, invstd = 1/sqrt(running_var + eps) in double,
       mean_rest = 0. */
    void (*bn_eval_stats)(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                          const float *running_var, float eps, int c);
    /*
     * Backward's sums from bn_stats_bwd, corrected in place for the float mean:
     * sums[c+j] -= mean_rest[j]*invstd[j]*sums[j] (double); then local[0..2c) = (float)sums.
     */
    void (*bn_bwd_sums)(float *local, double *sums, const float *mean_rest, const float *invstd,
                        int c);
    /*
     * One power-iteration step of spectral norm on w viewed as [rows, cols], in double and
     * serial (bitwise the same on every replica): v = normalise(w^T u), u_new = normalise(w v),
     * normalise(x) = x/(|x| + 1e-12). Returns sigma = |w v|^2/(|w v| + 1e-12); the caller
     * rejects a sigma that is not finite and positive.
     */
    double (*sn_power)(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                       int64_t cols);
    /* y = (float)(w / sigma) over rows*cols; u (when not NULL) = (float)u_new [rows]. */
    void (*sn_fwd)(float *y, float *u, const double *u_new, const float *w, double sigma,
                   int64_t rows, int64_t cols);
    /* Accumulates dw += dy/sigma - (sum(dy .* w)/sigma^2) u_new v^T, in double per element. */
    void (*sn_bwd)(float *dw, const double *u_new, const double *v, const float *dy, const float *w,
                   double sigma, int64_t rows, int64_t cols);
    /*
     * A 64-bit hash of the bits of x[0, n) (the sync invariant's parameter checksum): four
     * FNV-style lanes over blocks of 8 floats, the tail into lane 0. The same function of the
     * bits in every table, so replicas on different backends can compare it.
     */
    uint64_t (*checksum)(const float *x, int64_t n);

    /* ---- memory: the table owns tensor storage ---- */
    /*
     * Every buffer a kernel reads or writes comes from its own table's mem_alloc: the tape's
     * values, gradients and saved buffers, the parameters, the optimizers' state, the gradient
     * buckets. Host code never dereferences such a buffer; it moves values with upload and
     * download (which return once the copy is complete) and names them by pointer only. The
     * host tables (cpu, ref) use host memory and memcpy; the strict table (RP_KERNELS=strict)
     * keeps its storage unreadable between kernel calls, so a host read fails loudly; a device
     * table would use device memory.
     *  - mem_alloc: `bytes` (> 0) aligned to RP_ALIGN, contents unspecified; NULL when out of
     *    memory (the caller names what it was for). mem_free takes the same size back.
     *  - mem_fill: sets bytes/4 32-bit words to `pattern` (0 for zeros, 0x7fc00000 for f32 NaN,
     *    an f32's bits for a constant); bytes is a multiple of 4.
     *  - mem_discard: sets bytes (a multiple of 4) to zeros, like mem_fill with 0, and lets
     *    the memory go: the host tables give the whole pages inside the range back to the
     *    system (madvise MADV_DONTNEED; they read as zeros and come back when next written),
     *    so a released gradient costs no resident memory until backward writes it again
     *    (ZeRO-2). The others only fill zeros.
     *  - mem_sync: returns once all queued work is done (the host tables queue none).
     */
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p, size_t bytes);
    void (*mem_upload)(void *dst, const void *host, size_t bytes);
    void (*mem_download)(void *host, const void *src, size_t bytes);
    void (*mem_copy)(void *dst, const void *src, size_t bytes);
    void (*mem_fill)(void *dst, uint32_t pattern, size_t bytes);
    void (*mem_discard)(void *dst, size_t bytes);
    void (*mem_sync)(void);
} kernels_table;

/* The plain C reference table. */
const kernels_table *kernels_ref(void);
/* The fast CPU table. */
const kernels_table *kernels_cpu(void);
/* The strict table: cpu's kernels over storage that host code cannot read (RP_KERNELS=strict). */
const kernels_table *kernels_strict(void);
/*
 * The CUDA table (RP_KERNELS=cuda, src/kernels/cuda/): NULL, with the reason in rp_last_error()
 * (RP_ERR_UNSUPPORTED: this build has no CUDA table; RP_ERR_BACKEND: no CUDA device can be used,
 * with the runtime's words), when it cannot run here. Thread-safe; the first call initialises
 * the CUDA runtime.
 */
const kernels_table *kernels_cuda(void);
/* The CUDA table itself, whether or not a device can be used (NULL in a build without it): for
   the test that checks its slots on a machine without a GPU. Its kernels need kernels_cuda(). */
const kernels_table *kernels_cuda_table(void);
/*
 * The table ops use: cpu, ref when RP_KERNELS=ref, strict when RP_KERNELS=strict, cuda when
 * RP_KERNELS=cuda. When the cuda table cannot run here it logs why, once, and gives the cpu
 * table, so that nothing crashes; kernels_check() is what refuses such a run.
 */
const kernels_table *kernels_active(void);
/*
 * RP_OK when the table RP_KERNELS selects can run here; otherwise the error (and message) of
 * kernels_cuda(), prefixed with "RP_KERNELS=cuda: ". rp_replicator_create() calls it.
 */
rp_status kernels_check(void);
/*
 * The table for arrays that are host memory by contract, not storage: a parameter server's
 * shard, the buffers a caller hands to rp_optim_apply() or rp_ps_push(). The active table when
 * its storage is host memory (cpu, ref), else cpu, whose kernels are bitwise the same (so a
 * server's update on the host equals a replica's on its device).
 */
const kernels_table *kernels_host(void);

/*
 * Host views of storage, for host code outside the kernels that must read or write values (a
 * collective over a gradient bucket, a checkpoint writer, a loss read back). With a host table
 * (k->host_storage) a view is the storage itself and nothing is copied; otherwise it is s's
 * buffer (grown as needed, kept for the next call), downloaded first when `download`.
 * kernels_staging_commit uploads what the host wrote (nothing when the view is the storage).
 * kernels_staging_view returns NULL (with an error) when out of memory. One view per
 * kernels_staging at a time: a second call reuses the buffer.
 */
typedef struct kernels_staging {
    void *host;
    size_t cap;
} kernels_staging;
void *kernels_staging_view(kernels_staging *s, const kernels_table *k, const void *storage,
                           size_t bytes, bool download);
void kernels_staging_commit(const kernels_table *k, void *storage, const void *view, size_t bytes);
void kernels_staging_free(kernels_staging *s);

/* The host tables' memory slots (cpu and ref share them): malloc, memcpy and a word fill. In a
   table's initializer: RP_HOST_MEMORY_SLOTS, */
#define RP_HOST_MEMORY_SLOTS                                                                       \
    .host_storage = true, .mem_alloc = kernels_host_mem_alloc, .mem_free = kernels_host_mem_free,  \
    .mem_upload = kernels_host_mem_copy, .mem_download = kernels_host_mem_copy,                    \
    .mem_copy = kernels_host_mem_copy, .mem_fill = kernels_host_mem_fill,                          \
    .mem_discard = kernels_host_mem_discard, .mem_sync = kernels_host_mem_sync
void *kernels_host_mem_alloc(size_t bytes);
void kernels_host_mem_free(void *p, size_t bytes);
void kernels_host_mem_copy(void *dst, const void *src, size_t bytes);
void kernels_host_mem_fill(void *dst, uint32_t pattern, size_t bytes);
void kernels_host_mem_discard(void *dst, size_t bytes);
/* Of the bytes at p, those whose pages are in memory now (mincore), whole pages counted; with a
   table whose storage is not host memory, all of them. For memory reports. */
size_t kernels_resident_bytes(const kernels_table *k, const void *p, size_t bytes);
void kernels_host_mem_sync(void);

/* rp_kernels_set_threads(), rp_kernels_get_threads(), rp_kernels_name(): replicator/kernels.h. */

#endif
