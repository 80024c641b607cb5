/*
 * conv_pool_dnnl.h - the fast CPU GEMM, convolution and pooling kernels:
 * GEMM through OpenBLAS, convolution and average pooling through oneDNN 2.6,
 * max pooling as a vectorised OpenMP loop over NHWC. Same signatures and
 * semantics as the reference kernels in kernels/ref/conv_pool_ref.h, which
 * they are tested against.
 *
 * Layouts: activations NHWC, weights OHWI = [o][kh][kw][c], bias [o].
 *
 * oneDNN primitives are cached by shape in a cache owned by the calling
 * thread: the first call with a new (kind, descriptor) creates the primitive,
 * its weight reorders and memory objects; later calls only point the memory
 * objects at the caller's buffers and execute, creating nothing. Replica
 * threads therefore never contend on or share a cache. A thread's cache is
 * freed when the thread exits (or by kcpu_dnnl_cache_clear). The oneDNN
 * engine is created once per process; each thread has its own stream.
 *
 * Threads: work runs on the calling thread's OpenMP team (oneDNN here uses
 * OpenMP), so omp_set_num_threads / rp_kernels_set_threads on the calling
 * thread controls it; GEMM uses OpenBLAS's own thread count. Nothing here
 * changes thread counts. All functions are thread-safe.
 *
 * Errors: RP_ERR_INVALID for NULL buffers, RP_ERR_SHAPE for a descriptor that
 * kernels_conv_desc_init / kernels_pool_desc_init would not have produced,
 * RP_ERR_BACKEND naming the oneDNN call and shape when oneDNN fails, and
 * RP_ERR_NOMEM. Nothing aborts.
 */
#ifndef RP_KERNELS_CPU_CONV_POOL_DNNL_H
#define RP_KERNELS_CPU_CONV_POOL_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"

/*
 * C[m,n] = alpha * op(A) op(B) + beta * C, row-major, through cblas_sgemm.
 * With beta == 0 C is not read. Degenerate sizes (m, n or k == 0) are handled
 * here rather than passed to BLAS.
 */
void kcpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc);

/*
 * The product with A and B rounded to bf16 and summed in f32, through oneDNN's matmul (the
 * reorders into bf16 are its staging steps). Below AVX-512, where oneDNN has no bf16, the
 * reference kernel computes it.
 */
rp_status kcpu_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
void kcpu_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n);
void kcpu_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n);
/* The bf16 path oneDNN takes on this CPU (see kernels_table.bf16_path). */
const char *kcpu_bf16_path(void);

/* y = conv(x, w) + bias (bias may be NULL). Overwrites y. */
rp_status kcpu_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                          const kernels_conv_desc *d);
/* dx = conv2d_fwd's adjoint in x applied to dy. Overwrites dx. */
rp_status kcpu_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                               const kernels_conv_desc *d);
/* dw (and db when not NULL) = gradients of conv2d_fwd given dy and x. Overwrites both. */
rp_status kcpu_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                  const kernels_conv_desc *d);
/* Both of the above from one dy (kernels.h's conv2d_bwd): dx, dw and db (when not NULL). */
rp_status kcpu_conv2d_bwd(const kernels_table *k, float *dx, float *dw, float *db, const void *dy,
                          const float *w, const void *x, const kernels_conv_desc *d);

/*
 * Max pooling with argmax = flat input offsets, first maximum in ky-major,
 * kx order winning (see kref_maxpool_fwd), over values of d->type (f32 or
 * bf16, y the winner's own bits). Overwrites y and argmax.
 */
rp_status kcpu_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d);
/*
 * dx = 0, then dx[argmax[i]] += dy[i]. Each argmax must point into the same
 * image as its output (as maxpool_fwd's do); RP_ERR_INVALID otherwise.
 */
rp_status kcpu_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                           const kernels_pool_desc *d);
/* Average pooling, padding excluded from the divisor. Overwrites y / dx. */
rp_status kcpu_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d);
rp_status kcpu_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d);

/*
 * Whether the convolution d runs Winograd for pass 0 (forward), 1 (backward data) or 2 (backward
 * weights) on this CPU with the current rp_kernels_get_conv_algorithm() (builds the primitive if
 * needed; for tests and `replicator info`).
 */
/*
 * Bytes the calling thread's cache holds: its scratchpad and staging buffers and the weights its
 * primitives keep in their own layouts. For the memory report.
 */
size_t kcpu_dnnl_cache_bytes(void);

rp_status kcpu_conv2d_uses_winograd(const kernels_conv_desc *d, int pass, bool *winograd);

/* Number of primitives in the calling thread's oneDNN cache (for tests and debugging). */
int kcpu_dnnl_cache_entries(void);

/* Largest number of entries a thread's cache holds; beyond it the least recently used goes. */
#define RP_DNNL_CACHE_MAX 256

/*
 * Frees the calling thread's cache, stream and scratchpad. The next call
 * rebuilds what it needs. Never needed for correctness: a thread's cache is
 * freed when the thread exits.
 */
void kcpu_dnnl_cache_clear(void);

#endif
