/*
 * cuda.h - the CUDA kernel table's functions (src/kernels/cuda/), declared for C: table.c fills
 * the table with them, the .cu files define them (nvcc, C++ with C linkage). No CUDA header is
 * included here, so the table and the rest of the library compile without the toolkit's headers.
 *
 * Execution model (docs/gpu.md):
 *  - Every thread that calls a kernel has its own CUDA stream (created on its first call,
 *    non-blocking) and its own cuBLAS handle on it: replica threads queue work independently,
 *    as the replicas of TF-Replicator do on their devices. Kernels return once their work is
 *    queued, except those that return a value to the host (sum, sum_squares, softmax_xent_fwd,
 *    first_nonfinite, checksum, sn_power), which wait for their stream.
 *  - Storage is device memory from the CUDA runtime's stream-ordered pool (cudaMallocAsync; the
 *    pool keeps what is freed, so a steady-state step does not reach cudaMalloc). mem_alloc
 *    returns a complete allocation; mem_free, mem_upload, mem_download and mem_sync wait for
 *    every stream's queued work (a buffer may have been written on another thread's stream),
 *    and the transfers return once their copy is complete (the slots' contract). A kernel on
 *    one thread that reads what another thread's kernel wrote, with no transfer or mem_sync in
 *    between, is not ordered: the library's replicas exchange values through host views.
 *  - A CUDA failure inside a slot that returns no status is logged with its file, line and the
 *    runtime's words, and kept: the next slot that returns an rp_status (GEMM in bf16, the
 *    convolutions and pooling) returns RP_ERR_BACKEND with it.
 *  - Results: element-wise kernels round as the reference does (no fused multiply-add: the
 *    objects are compiled with -fmad=false), so the optimizer updates, casts and statistics
 *    slots the contract fixes bit for bit are bit for bit; reductions use a fixed order
 *    (deterministic from run to run) that differs from the reference's, within its tolerance.
 */
#ifndef RP_KERNELS_CUDA_H
#define RP_KERNELS_CUDA_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime.cu: the device, streams, errors, memory ---- */

/* RP_OK once a device is usable (first call initialises, thread-safe); else the error with the
   runtime's reason (RP_ERR_BACKEND), as kernels_cuda() reports it. */
rp_status kcuda_init(void);
/* The device's name and compute capability, "NVIDIA H100 80GB HBM3 (sm_90)"; "" before init. */
const char *kcuda_device_name(void);
/* The kept error (RP_OK if none), raised as RP_ERR_BACKEND on the calling thread, and cleared. */
rp_status kcuda_take_error(void);

void *kcuda_mem_alloc(size_t bytes);
void kcuda_mem_free(void *p, size_t bytes);
void kcuda_mem_upload(void *dst, const void *host, size_t bytes);
void kcuda_mem_download(void *host, const void *src, size_t bytes);
void kcuda_mem_copy(void *dst, const void *src, size_t bytes);
void kcuda_mem_fill(void *dst, uint32_t pattern, size_t bytes);
void kcuda_mem_sync(void);
/* Bytes of device memory the calling thread's cuBLAS workspace and scratch hold. */
size_t kcuda_cache_bytes(void);
const char *kcuda_bf16_path(void);

/* ---- gemm.cu ---- */
void kcuda_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc);
rp_status kcuda_gemm_bf16(bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                          int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* ---- conv_pool.cu: im2col + cuBLAS convolutions, pooling (descriptors validated by table.c) */
rp_status kcuda_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                           const kernels_conv_desc *d);
rp_status kcuda_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                                const kernels_conv_desc *d);
rp_status kcuda_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                   const kernels_conv_desc *d);
rp_status kcuda_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d);
rp_status kcuda_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                            const kernels_pool_desc *d);
rp_status kcuda_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d);
rp_status kcuda_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d);

/* ---- norms.cu: batch norm (f32 and bf16 activations), layer norm, softmax ---- */
void kcuda_bn_stats(double *sums, const float *x, int64_t m, int c);
void kcuda_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, const float *residual, bool relu,
                       int64_t m, int c);
void kcuda_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                        const float *mean, const float *invstd, int64_t m, int c, float *g_out);
void kcuda_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, const double *sums,
                       const float *gamma, double count, int64_t m, int c);
void kcuda_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m, int c);
void kcuda_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta,
                            const rp_bf16 *residual, bool relu, int64_t m, int c);
void kcuda_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy,
                             const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                             const float *invstd, int64_t m, int c, float *g_out);
void kcuda_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                            const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                            const float *invstd, const double *sums, const float *gamma,
                            double count, int64_t m, int c);
void kcuda_bn_train_stats(float *mean, float *invstd, float *mean_rest, float *running_mean,
                          float *running_var, const double *sums, double count, float eps,
                          float momentum, int c);
void kcuda_bn_eval_stats(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                         const float *running_var, float eps, int c);
void kcuda_bn_bwd_sums(float *local, double *sums, const float *mean_rest, const float *invstd,
                       int c);
void kcuda_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                         const float *beta, int64_t rows, int d, float eps);
void kcuda_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                         const float *mean, const float *rstd, const float *gamma, int64_t rows,
                         int d);
void kcuda_log_softmax_fwd(float *y, const float *x, int64_t rows, int c);
void kcuda_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c);
double kcuda_softmax_xent_fwd(float *probs, const float *logits, const int32_t *labels,
                              const float *target, int n, int c);
void kcuda_softmax_xent_bwd(float *dlogits, const float *probs, const int32_t *labels,
                            const float *target, float scale, int n, int c);

/* ---- elementwise.cu ---- */
void kcuda_act_fwd(float *y, const float *x, int64_t n, kernels_act act, float slope);
void kcuda_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                   kernels_act act, float slope);
void kcuda_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb,
                  kernels_binop op);
void kcuda_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                        const int64_t *bstride, kernels_binop op);
void kcuda_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                       bool accumulate);
void kcuda_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                       bool accumulate);
void kcuda_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi);
void kcuda_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi);
void kcuda_select_eq_acc(float *dx, const float *g, const float *x, const float *y, int64_t n);
double kcuda_sum_squares(const float *x, int64_t n);
void kcuda_scale_inplace(float *y, float s, int64_t n);
void kcuda_scale(float *y, const float *x, float s, int64_t n, bool accumulate);
void kcuda_add_inplace(float *y, const float *x, int64_t n);
void kcuda_mul(float *y, const float *a, const float *b, int64_t n, bool accumulate);
void kcuda_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
void kcuda_add_scalar(float *y, float s, int64_t n);
double kcuda_sum(const float *x, int64_t n);
void kcuda_copy_cols(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w);
void kcuda_gather_cols(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows, int64_t w,
                       bool accumulate);
void kcuda_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c);
void kcuda_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n);
void kcuda_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c);
void kcuda_gap_fwd(float *y, const float *x, int n, int hw, int c);
void kcuda_gap_bwd(float *dx, const float *dy, int n, int hw, int c);
void kcuda_embedding_fwd(float *y, const float *table, const int32_t *idx, int n, int d);
void kcuda_embedding_bwd(float *dtable, const float *dy, const int32_t *idx, int n, int d);
void kcuda_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n);
void kcuda_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n);

/* ---- optim.cu: optimizers, scans, checksum, spectral norm ---- */
void kcuda_sgd_update(float *w, float *mom, const float *g, int64_t n, float lr, float momentum,
                      float wd, bool nesterov, bool first);
void kcuda_adam_update(float *w, float *m, float *v, const float *g, int64_t n, float b1, float b2,
                       float eps, float l2, float shrink, float step_size, float sqrt_bc2);
int64_t kcuda_first_nonfinite(float *value, const float *x, int64_t n);
uint64_t kcuda_checksum(const float *x, int64_t n);
double kcuda_sn_power(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                      int64_t cols);
void kcuda_sn_fwd(float *y, float *u, const double *u_new, const float *w, double sigma,
                  int64_t rows, int64_t cols);
void kcuda_sn_bwd(float *dw, const double *u_new, const double *v, const float *dy, const float *w,
                  double sigma, int64_t rows, int64_t cols);

#ifdef __cplusplus
}
#endif

#endif
