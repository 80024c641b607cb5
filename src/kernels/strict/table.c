/*
 * table.c - the strict kernel table (RP_KERNELS=strict): the cpu table's kernels over storage
 * that host code cannot touch between kernel calls (strict.h says why and what it misses).
 *
 * Every slot is a wrapper of the cpu table's: it checks that its buffer arguments are storage
 * (CHECK: NULL or in the pool), opens the pool, runs the cpu kernel, and closes the pool. What
 * CHECK leaves out is host memory by contract: the descriptors (kernels_conv_desc,
 * kernels_pool_desc), the small shape arrays of binary_bcast, reduce_axes and expand_axes,
 * first_nonfinite's `value` (the scalar it returns, as the return values of sum and sum_squares
 * are), and the host side of mem_upload and mem_download, which CHECK_HOST holds to host memory.
 *
 * The bf16 batch-norm slots run the cpu table's, handing it the cpu table: its f32 kernels then
 * run unwrapped, on the chunks of rows it widens in host scratch memory.
 */
#include "kernels/kernels.h"
#include "kernels/strict/strict.h"

#define CPU kernels_cpu()

/* Each of the arguments named is NULL or storage, else the call is reported by name. */
#define CHECK(slot, ...)                                                                           \
    do {                                                                                           \
        if (kstrict_args_get() != RP_STRICT_ARGS_OFF) {                                            \
            const void *const ptrs_[] = {__VA_ARGS__};                                             \
            kstrict_args_check(#slot, #__VA_ARGS__, ptrs_, (int)(sizeof ptrs_ / sizeof ptrs_[0])); \
        }                                                                                          \
    } while (0)

/* The host side of a transfer must not be storage (a copy between storage is mem_copy). */
#define CHECK_HOST(slot, arg)                                                                      \
    do {                                                                                           \
        if (kstrict_pool_contains(arg)) kstrict_report_storage_arg(#slot, #arg, arg);              \
    } while (0)

#define OPEN  kstrict_pool_open()
#define CLOSE kstrict_pool_close()

/* ---- GEMM and convolution ---- */

static void s_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc)
{
    CHECK(gemm, a, b, c);
    OPEN;
    CPU->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    CLOSE;
}

static rp_status s_gemm_bf16(bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                             int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    CHECK(gemm_bf16, a, b, c);
    OPEN;
    rp_status s = CPU->gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    CLOSE;
    return s;
}

static rp_status s_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                              const kernels_conv_desc *d)
{
    CHECK(conv2d_fwd, y, x, w, bias);
    OPEN;
    rp_status s = CPU->conv2d_fwd(y, x, w, bias, d);
    CLOSE;
    return s;
}

static rp_status s_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                                   const kernels_conv_desc *d)
{
    CHECK(conv2d_bwd_data, dx, dy, w);
    OPEN;
    rp_status s = CPU->conv2d_bwd_data(dx, dy, w, d);
    CLOSE;
    return s;
}

static rp_status s_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                      const kernels_conv_desc *d)
{
    CHECK(conv2d_bwd_weights, dw, db, dy, x);
    OPEN;
    rp_status s = CPU->conv2d_bwd_weights(dw, db, dy, x, d);
    CLOSE;
    return s;
}

static rp_status s_conv2d_bwd(const kernels_table *k, float *dx, float *dw, float *db,
                              const void *dy, const float *w, const void *x,
                              const kernels_conv_desc *d)
{
    CHECK(conv2d_bwd, dx, dw, db, dy, w, x);
    OPEN;
    rp_status s = CPU->conv2d_bwd(CPU, dx, dw, db, dy, w, x, d);
    CLOSE;
    return s;
}

/* ---- pooling ---- */

static rp_status s_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d)
{
    CHECK(maxpool_fwd, y, argmax, x);
    OPEN;
    rp_status s = CPU->maxpool_fwd(y, argmax, x, d);
    CLOSE;
    return s;
}

static rp_status s_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                               const kernels_pool_desc *d)
{
    CHECK(maxpool_bwd, dx, argmax, dy);
    OPEN;
    rp_status s = CPU->maxpool_bwd(dx, argmax, dy, d);
    CLOSE;
    return s;
}

static rp_status s_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d)
{
    CHECK(avgpool_fwd, y, x);
    OPEN;
    rp_status s = CPU->avgpool_fwd(y, x, d);
    CLOSE;
    return s;
}

static rp_status s_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d)
{
    CHECK(avgpool_bwd, dx, dy);
    OPEN;
    rp_status s = CPU->avgpool_bwd(dx, dy, d);
    CLOSE;
    return s;
}

/* ---- batch norm ---- */

static void s_bn_stats(double *sums, const float *x, int64_t m, int c)
{
    CHECK(bn_stats, sums, x);
    OPEN;
    CPU->bn_stats(sums, x, m, c);
    CLOSE;
}

static void s_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                          const float *gamma, const float *beta, const float *residual, bool relu,
                          int64_t m, int c)
{
    CHECK(bn_norm_fwd, y, x, mean, invstd, gamma, beta, residual);
    OPEN;
    CPU->bn_norm_fwd(y, x, mean, invstd, gamma, beta, residual, relu, m, c);
    CLOSE;
}

static void s_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                           const float *mean, const float *invstd, int64_t m, int c, float *g_out)
{
    CHECK(bn_stats_bwd, sums, dy, y, x, mean, invstd, g_out);
    OPEN;
    CPU->bn_stats_bwd(sums, dy, y, x, mean, invstd, m, c, g_out);
    CLOSE;
}

static void s_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x,
                          const float *mean, const float *invstd, const double *sums,
                          const float *gamma, double count, int64_t m, int c)
{
    CHECK(bn_bwd_data, dx, dy, y, x, mean, invstd, sums, gamma);
    OPEN;
    CPU->bn_bwd_data(dx, dy, y, x, mean, invstd, sums, gamma, count, m, c);
    CLOSE;
}

static void s_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m,
                            int c)
{
    CHECK(bn_stats_bf16, sums, x);
    OPEN;
    CPU->bn_stats_bf16(CPU, sums, x, m, c);
    CLOSE;
}

static void s_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x,
                               const float *mean, const float *invstd, const float *gamma,
                               const float *beta, const rp_bf16 *residual, bool relu, int64_t m,
                               int c)
{
    CHECK(bn_norm_fwd_bf16, y, x, mean, invstd, gamma, beta, residual);
    OPEN;
    CPU->bn_norm_fwd_bf16(CPU, y, x, mean, invstd, gamma, beta, residual, relu, m, c);
    CLOSE;
}

static void s_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy,
                                const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                                const float *invstd, int64_t m, int c, float *g_out)
{
    CHECK(bn_stats_bwd_bf16, sums, dy, y, x, mean, invstd, g_out);
    OPEN;
    CPU->bn_stats_bwd_bf16(CPU, sums, dy, y, x, mean, invstd, m, c, g_out);
    CLOSE;
}

static void s_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                               const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                               const float *invstd, const double *sums, const float *gamma,
                               double count, int64_t m, int c)
{
    CHECK(bn_bwd_data_bf16, dx, dy, y, x, mean, invstd, sums, gamma);
    OPEN;
    CPU->bn_bwd_data_bf16(CPU, dx, dx_type, dy, y, x, mean, invstd, sums, gamma, count, m, c);
    CLOSE;
}

/* ---- element-wise ---- */

static void s_act_fwd(float *y, const float *x, int64_t n, kernels_act act, float slope)
{
    CHECK(act_fwd, y, x);
    OPEN;
    CPU->act_fwd(y, x, n, act, slope);
    CLOSE;
}

static void s_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                      kernels_act act, float slope)
{
    CHECK(act_bwd, dx, dy, y, x);
    OPEN;
    CPU->act_bwd(dx, dy, y, x, n, act, slope);
    CLOSE;
}

static void s_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    CHECK(relu_fwd_bf16, y, x);
    OPEN;
    CPU->relu_fwd_bf16(y, x, n);
    CLOSE;
}

static void s_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb,
                     kernels_binop op)
{
    CHECK(binary, y, a, b);
    OPEN;
    CPU->binary(y, a, b, n, nb, op);
    CLOSE;
}

/* shape and bstride: the host's description of the index space, not buffers. */
static void s_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                           const int64_t *bstride, kernels_binop op)
{
    CHECK(binary_bcast, y, a, b);
    OPEN;
    CPU->binary_bcast(y, a, b, shape, bstride, op);
    CLOSE;
}

static void s_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask,
                          float scale, bool accumulate)
{
    CHECK(reduce_axes, y, x);
    OPEN;
    CPU->reduce_axes(y, x, shape, mask, scale, accumulate);
    CLOSE;
}

static void s_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask,
                          float scale, bool accumulate)
{
    CHECK(expand_axes, x, y);
    OPEN;
    CPU->expand_axes(x, y, shape, mask, scale, accumulate);
    CLOSE;
}

static void s_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi)
{
    CHECK(clamp_fwd, y, x);
    OPEN;
    CPU->clamp_fwd(y, x, n, lo, hi);
    CLOSE;
}

static void s_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi)
{
    CHECK(clamp_bwd, dx, dy, x);
    OPEN;
    CPU->clamp_bwd(dx, dy, x, n, lo, hi);
    CLOSE;
}

static void s_select_eq_acc(float *dx, const float *g, const float *x, const float *y, int64_t n)
{
    CHECK(select_eq_acc, dx, g, x, y);
    OPEN;
    CPU->select_eq_acc(dx, g, x, y, n);
    CLOSE;
}

static void s_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                            const float *beta, int64_t rows, int d, float eps)
{
    CHECK(layernorm_fwd, y, mean, rstd, x, gamma, beta);
    OPEN;
    CPU->layernorm_fwd(y, mean, rstd, x, gamma, beta, rows, d, eps);
    CLOSE;
}

static void s_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *gamma, int64_t rows,
                            int d)
{
    CHECK(layernorm_bwd, dx, dgamma, dbeta, dy, x, mean, rstd, gamma);
    OPEN;
    CPU->layernorm_bwd(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d);
    CLOSE;
}

static void s_log_softmax_fwd(float *y, const float *x, int64_t rows, int c)
{
    CHECK(log_softmax_fwd, y, x);
    OPEN;
    CPU->log_softmax_fwd(y, x, rows, c);
    CLOSE;
}

static void s_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c)
{
    CHECK(log_softmax_bwd, dx, dy, y);
    OPEN;
    CPU->log_softmax_bwd(dx, dy, y, rows, c);
    CLOSE;
}

static double s_sum_squares(const float *x, int64_t n)
{
    CHECK(sum_squares, x);
    OPEN;
    double r = CPU->sum_squares(x, n);
    CLOSE;
    return r;
}

static void s_scale_inplace(float *y, float s, int64_t n)
{
    CHECK(scale_inplace, y);
    OPEN;
    CPU->scale_inplace(y, s, n);
    CLOSE;
}

static void s_scale(float *y, const float *x, float s, int64_t n, bool accumulate)
{
    CHECK(scale, y, x);
    OPEN;
    CPU->scale(y, x, s, n, accumulate);
    CLOSE;
}

static void s_add_inplace(float *y, const float *x, int64_t n)
{
    CHECK(add_inplace, y, x);
    OPEN;
    CPU->add_inplace(y, x, n);
    CLOSE;
}

static void s_mul(float *y, const float *a, const float *b, int64_t n, bool accumulate)
{
    CHECK(mul, y, a, b);
    OPEN;
    CPU->mul(y, a, b, n, accumulate);
    CLOSE;
}

static void s_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate)
{
    CHECK(reduce_rows, y, x);
    OPEN;
    CPU->reduce_rows(y, x, rows, nb, accumulate);
    CLOSE;
}

static void s_add_scalar(float *y, float s, int64_t n)
{
    CHECK(add_scalar, y);
    OPEN;
    CPU->add_scalar(y, s, n);
    CLOSE;
}

static double s_sum(const float *x, int64_t n)
{
    CHECK(sum, x);
    OPEN;
    double r = CPU->sum(x, n);
    CLOSE;
    return r;
}

/* ---- layout ---- */

static void s_copy_cols(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w)
{
    CHECK(copy_cols, y, x);
    OPEN;
    CPU->copy_cols(y, ldy, off, x, rows, w);
    CLOSE;
}

static void s_gather_cols(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows,
                          int64_t w, bool accumulate)
{
    CHECK(gather_cols, y, x);
    OPEN;
    CPU->gather_cols(y, x, ldx, off, rows, w, accumulate);
    CLOSE;
}

static void s_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c)
{
    CHECK(upsample2x_fwd, y, x);
    OPEN;
    CPU->upsample2x_fwd(y, x, type, n, h, w, c);
    CLOSE;
}

static void s_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c)
{
    CHECK(upsample2x_bwd, dx, dy);
    OPEN;
    CPU->upsample2x_bwd(dx, dy, n, h, w, c);
    CLOSE;
}

static void s_gap_fwd(float *y, const float *x, int n, int hw, int c)
{
    CHECK(gap_fwd, y, x);
    OPEN;
    CPU->gap_fwd(y, x, n, hw, c);
    CLOSE;
}

static void s_gap_bwd(float *dx, const float *dy, int n, int hw, int c)
{
    CHECK(gap_bwd, dx, dy);
    OPEN;
    CPU->gap_bwd(dx, dy, n, hw, c);
    CLOSE;
}

static void s_embedding_fwd(float *y, const float *table, const int32_t *idx, int n, int d)
{
    CHECK(embedding_fwd, y, table, idx);
    OPEN;
    CPU->embedding_fwd(y, table, idx, n, d);
    CLOSE;
}

static void s_embedding_bwd(float *dtable, const float *dy, const int32_t *idx, int n, int d)
{
    CHECK(embedding_bwd, dtable, dy, idx);
    OPEN;
    CPU->embedding_bwd(dtable, dy, idx, n, d);
    CLOSE;
}

/* ---- losses ---- */

static double s_softmax_xent_fwd(float *probs, const float *logits, const int32_t *labels,
                                 const float *target, int n, int c)
{
    CHECK(softmax_xent_fwd, probs, logits, labels, target);
    OPEN;
    double r = CPU->softmax_xent_fwd(probs, logits, labels, target, n, c);
    CLOSE;
    return r;
}

static void s_softmax_xent_bwd(float *dlogits, const float *probs, const int32_t *labels,
                               const float *target, float scale, int n, int c)
{
    CHECK(softmax_xent_bwd, dlogits, probs, labels, target);
    OPEN;
    CPU->softmax_xent_bwd(dlogits, probs, labels, target, scale, n, c);
    CLOSE;
}

/* ---- caches, conversions, the bf16 path: no storage in the first and last ---- */

static size_t s_cache_bytes(void)
{
    return CPU->cache_bytes ? CPU->cache_bytes() : 0;
}

static void s_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    CHECK(cast_f32_bf16, y, x);
    OPEN;
    CPU->cast_f32_bf16(y, x, n);
    CLOSE;
}

static void s_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n)
{
    CHECK(cast_bf16_f32, y, x);
    OPEN;
    CPU->cast_bf16_f32(y, x, n);
    CLOSE;
}

static const char *s_bf16_path(void)
{
    return CPU->bf16_path();
}

/* ---- optimizer ---- */

static void s_sgd_update(float *w, float *mom, const float *g, int64_t n, float lr, float momentum,
                         float wd, bool nesterov, bool first)
{
    CHECK(sgd_update, w, mom, g);
    OPEN;
    CPU->sgd_update(w, mom, g, n, lr, momentum, wd, nesterov, first);
    CLOSE;
}

static void s_adam_update(float *w, float *m, float *v, const float *g, int64_t n, float b1,
                          float b2, float eps, float l2, float shrink, float step_size,
                          float sqrt_bc2)
{
    CHECK(adam_update, w, m, v, g);
    OPEN;
    CPU->adam_update(w, m, v, g, n, b1, b2, eps, l2, shrink, step_size, sqrt_bc2);
    CLOSE;
}

/* value: the host's copy of the element found, returned like the index (not checked). */
static int64_t s_first_nonfinite(float *value, const float *x, int64_t n)
{
    CHECK(first_nonfinite, x);
    OPEN;
    int64_t r = CPU->first_nonfinite(value, x, n);
    CLOSE;
    return r;
}

/* ---- norms, checksums ---- */

static void s_bn_train_stats(float *mean, float *invstd, float *mean_rest, float *running_mean,
                             float *running_var, const double *sums, double count, float eps,
                             float momentum, int c)
{
    CHECK(bn_train_stats, mean, invstd, mean_rest, running_mean, running_var, sums);
    OPEN;
    CPU->bn_train_stats(mean, invstd, mean_rest, running_mean, running_var, sums, count, eps,
                        momentum, c);
    CLOSE;
}

static void s_bn_eval_stats(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                            const float *running_var, float eps, int c)
{
    CHECK(bn_eval_stats, mean, invstd, mean_rest, running_mean, running_var);
    OPEN;
    CPU->bn_eval_stats(mean, invstd, mean_rest, running_mean, running_var, eps, c);
    CLOSE;
}

static void s_bn_bwd_sums(float *local, double *sums, const float *mean_rest, const float *invstd,
                          int c)
{
    CHECK(bn_bwd_sums, local, sums, mean_rest, invstd);
    OPEN;
    CPU->bn_bwd_sums(local, sums, mean_rest, invstd, c);
    CLOSE;
}

static double s_sn_power(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                         int64_t cols)
{
    CHECK(sn_power, u_new, v, w, u);
    OPEN;
    double r = CPU->sn_power(u_new, v, w, u, rows, cols);
    CLOSE;
    return r;
}

static void s_sn_fwd(float *y, float *u, const double *u_new, const float *w, double sigma,
                     int64_t rows, int64_t cols)
{
    CHECK(sn_fwd, y, u, u_new, w);
    OPEN;
    CPU->sn_fwd(y, u, u_new, w, sigma, rows, cols);
    CLOSE;
}

static void s_sn_bwd(float *dw, const double *u_new, const double *v, const float *dy,
                     const float *w, double sigma, int64_t rows, int64_t cols)
{
    CHECK(sn_bwd, dw, u_new, v, dy, w);
    OPEN;
    CPU->sn_bwd(dw, u_new, v, dy, w, sigma, rows, cols);
    CLOSE;
}

static uint64_t s_checksum(const float *x, int64_t n)
{
    CHECK(checksum, x);
    OPEN;
    uint64_t r = CPU->checksum(x, n);
    CLOSE;
    return r;
}

/* ---- memory: the pool ---- */

static void *s_mem_alloc(size_t bytes)
{
    return kstrict_pool_alloc(bytes);
}

static void s_mem_free(void *p, size_t bytes)
{
    CHECK(mem_free, p);
    kstrict_pool_free(p, bytes);
}

static void s_mem_upload(void *dst, const void *host, size_t bytes)
{
    CHECK(mem_upload, dst);
    CHECK_HOST(mem_upload, host);
    OPEN;
    CPU->mem_upload(dst, host, bytes);
    CLOSE;
}

static void s_mem_download(void *host, const void *src, size_t bytes)
{
    CHECK(mem_download, src);
    CHECK_HOST(mem_download, host);
    OPEN;
    CPU->mem_download(host, src, bytes);
    CLOSE;
}

static void s_mem_copy(void *dst, const void *src, size_t bytes)
{
    CHECK(mem_copy, dst, src);
    OPEN;
    CPU->mem_copy(dst, src, bytes);
    CLOSE;
}

static void s_mem_fill(void *dst, uint32_t pattern, size_t bytes)
{
    CHECK(mem_fill, dst);
    OPEN;
    CPU->mem_fill(dst, pattern, bytes);
    CLOSE;
}

/* Zeros only: the strict table's storage is its own mapping, opened and closed per call. */
static void s_mem_discard(void *dst, size_t bytes)
{
    s_mem_fill(dst, 0, bytes);
}

/* The cpu kernels return once done: nothing is ever queued. */
static void s_mem_sync(void) {}

static const kernels_table strict_table = {
    .name = "strict",
    .host_storage = false, /* the point: every layer above must stage through the memory slots */
    .bf16_grads = true,
    .gemm = s_gemm,
    .gemm_bf16 = s_gemm_bf16,
    .conv2d_fwd = s_conv2d_fwd,
    .conv2d_bwd_data = s_conv2d_bwd_data,
    .conv2d_bwd_weights = s_conv2d_bwd_weights,
    .conv2d_bwd = s_conv2d_bwd,
    .maxpool_fwd = s_maxpool_fwd,
    .maxpool_bwd = s_maxpool_bwd,
    .avgpool_fwd = s_avgpool_fwd,
    .avgpool_bwd = s_avgpool_bwd,
    .bn_stats = s_bn_stats,
    .bn_norm_fwd = s_bn_norm_fwd,
    .bn_stats_bwd = s_bn_stats_bwd,
    .bn_bwd_data = s_bn_bwd_data,
    .bn_stats_bf16 = s_bn_stats_bf16,
    .bn_norm_fwd_bf16 = s_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = s_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = s_bn_bwd_data_bf16,
    .act_fwd = s_act_fwd,
    .act_bwd = s_act_bwd,
    .relu_fwd_bf16 = s_relu_fwd_bf16,
    .binary = s_binary,
    .binary_bcast = s_binary_bcast,
    .reduce_axes = s_reduce_axes,
    .expand_axes = s_expand_axes,
    .clamp_fwd = s_clamp_fwd,
    .clamp_bwd = s_clamp_bwd,
    .select_eq_acc = s_select_eq_acc,
    .layernorm_fwd = s_layernorm_fwd,
    .layernorm_bwd = s_layernorm_bwd,
    .log_softmax_fwd = s_log_softmax_fwd,
    .log_softmax_bwd = s_log_softmax_bwd,
    .sum_squares = s_sum_squares,
    .scale_inplace = s_scale_inplace,
    .scale = s_scale,
    .add_inplace = s_add_inplace,
    .mul = s_mul,
    .reduce_rows = s_reduce_rows,
    .add_scalar = s_add_scalar,
    .sum = s_sum,
    .copy_cols = s_copy_cols,
    .gather_cols = s_gather_cols,
    .upsample2x_fwd = s_upsample2x_fwd,
    .upsample2x_bwd = s_upsample2x_bwd,
    .gap_fwd = s_gap_fwd,
    .gap_bwd = s_gap_bwd,
    .embedding_fwd = s_embedding_fwd,
    .embedding_bwd = s_embedding_bwd,
    .softmax_xent_fwd = s_softmax_xent_fwd,
    .softmax_xent_bwd = s_softmax_xent_bwd,
    .cache_bytes = s_cache_bytes,
    .cast_f32_bf16 = s_cast_f32_bf16,
    .cast_bf16_f32 = s_cast_bf16_f32,
    .bf16_path = s_bf16_path,
    .sgd_update = s_sgd_update,
    .adam_update = s_adam_update,
    .first_nonfinite = s_first_nonfinite,
    .bn_train_stats = s_bn_train_stats,
    .bn_eval_stats = s_bn_eval_stats,
    .bn_bwd_sums = s_bn_bwd_sums,
    .sn_power = s_sn_power,
    .sn_fwd = s_sn_fwd,
    .sn_bwd = s_sn_bwd,
    .checksum = s_checksum,
    .mem_alloc = s_mem_alloc,
    .mem_free = s_mem_free,
    .mem_upload = s_mem_upload,
    .mem_download = s_mem_download,
    .mem_copy = s_mem_copy,
    .mem_fill = s_mem_fill,
    .mem_discard = s_mem_discard,
    .mem_sync = s_mem_sync,
};

const kernels_table *kernels_strict(void)
{
    kstrict_init();
    return &strict_table;
}
