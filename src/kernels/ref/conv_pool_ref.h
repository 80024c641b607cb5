/*
 * conv_pool_ref.h - the plain C reference kernels for GEMM, convolution and
 * pooling: the numerical specification that the fast kernels in
 * src/kernels/cpu/ are tested against. Slow on purpose: direct loops,
 * accumulation in double, no blocking, single-threaded.
 *
 * Layouts: activations NHWC, weights OHWI = [o][kh][kw][c], bias [o].
 * Every function here is thread-safe (no shared state) and allocates nothing.
 */
#ifndef RP_KERNELS_REF_CONV_POOL_REF_H
#define RP_KERNELS_REF_CONV_POOL_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"

/*
 * Checks that a descriptor is one kernels_conv_desc_init / kernels_pool_desc_init would
 * have produced: all sizes positive, pad >= 0, and oh/ow equal to
 * (in + 2*pad - k)/stride + 1. Returns RP_ERR_INVALID for a NULL descriptor
 * and RP_ERR_SHAPE (message naming the sizes) otherwise. Both the reference
 * and the fast kernels call these at their boundary.
 */
rp_status kernels_conv_desc_validate(const kernels_conv_desc *d);
rp_status kernels_pool_desc_validate(const kernels_pool_desc *d);

/*
 * C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C, row-major, with op(X) = X
 * or X^T. lda/ldb/ldc are the row strides of A, B and C as stored. When beta
 * is 0, C is not read (so it may hold NaNs), as in BLAS.
 */
void kref_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* The same with every element of A and B rounded to bf16 as it is read (the bf16 spec). */
rp_status kref_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
/* f32 <-> bf16 (rp_bf16_from_f32's rounding). */
void kref_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n);
void kref_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n);
/* "reference": the ref table computes bf16 by rounding its inputs. */
const char *kref_bf16_path(void);

/*
 * y[n,oy,ox,o] = bias[o] + sum over ky,kx,c of
 *                x[n, oy*stride-pad+ky, ox*stride-pad+kx, c] * w[o,ky,kx,c],
 * where positions outside the input contribute zero. bias may be NULL.
 * Overwrites y. RP_ERR_INVALID for a NULL pointer, RP_ERR_SHAPE for a bad d.
 */
rp_status kref_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                          const kernels_conv_desc *d);

/* conv2d_bwd for any table: k's bwd_data, then its bwd_weights, on the same dy. */
rp_status kernels_conv2d_bwd_pair(const kernels_table *k, float *dx, float *dw, float *db,
                                  const void *dy, const float *w, const void *x,
                                  const kernels_conv_desc *d);

/* dx = the adjoint of conv2d_fwd with respect to x, applied to dy. Overwrites dx. */
rp_status kref_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                               const kernels_conv_desc *d);

/*
 * dw[o,ky,kx,c] = sum over n,oy,ox of dy[n,oy,ox,o] * x[n,iy,ix,c] (zero outside
 * the input); db[o] = sum over n,oy,ox of dy[n,oy,ox,o]. Overwrites dw and,
 * when db is not NULL, db.
 */
rp_status kref_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                  const kernels_conv_desc *d);

/*
 * Max pooling. Padding acts as -infinity. y is the window's maximum and
 * argmax[n,oy,ox,c] the flat offset ((n*h + iy)*w + ix)*c + c into x of the
 * element chosen: windows are scanned ky-major then kx, starting from the
 * first element inside the input, and an element replaces the current one
 * only if it is strictly greater, so the first maximum wins (and a NaN in
 * that first position propagates). Overwrites y and argmax.
 */
rp_status kref_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d);

/* dx = 0, then dx[argmax[i]] += dy[i] for every output i. Overwrites dx. */
rp_status kref_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                           const kernels_pool_desc *d);

/*
 * Average pooling: y = the mean over the window's elements that lie inside
 * the input (padding is excluded from the divisor). Overwrites y.
 */
rp_status kref_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d);

/* dx = the adjoint of avgpool_fwd applied to dy. Overwrites dx. */
rp_status kref_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d);

#endif
