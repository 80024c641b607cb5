/*
 * elementwise.h - the reference element-wise, normalisation, reduction and
 * loss kernels (plain C, the numerical specification). See kernels.h for
 * each slot's contract.
 */
#ifndef RP_KERNELS_REF_ELEMENTWISE_H
#define RP_KERNELS_REF_ELEMENTWISE_H

#include "kernels/kernels.h"

void kref_bn_stats(double *sums, const float *x, int64_t m, int c);
void kref_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                      const float *gamma, const float *beta, const float *residual, bool relu,
                      int64_t m, int c);
void kref_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, int64_t m, int c, float *g_out);
void kref_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x, const float *mean,
                      const float *invstd, const double *sums, const float *gamma, double count,
                      int64_t m, int c);
void kref_act_fwd(float *y, const float *x, int64_t n, kernels_act act, float slope);
void kref_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                  kernels_act act, float slope);
void kref_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb, kernels_binop op);
void kref_scale(float *y, const float *x, float s, int64_t n, bool accumulate);
void kref_add_inplace(float *y, const float *x, int64_t n);
void kref_mul(float *y, const float *a, const float *b, int64_t n, bool accumulate);
void kref_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
void kref_add_scalar(float *y, float s, int64_t n);
double kref_sum(const float *x, int64_t n);
void kref_copy_cols(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w);
void kref_gather_cols(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows, int64_t w,
                      bool accumulate);
void kref_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c);
void kref_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n);
void kref_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c);
void kref_gap_fwd(float *y, const float *x, int n, int hw, int c);
void kref_gap_bwd(float *dx, const float *dy, int n, int hw, int c);
void kref_embedding_fwd(float *y, const float *table, const int32_t *idx, int n, int d);
void kref_embedding_bwd(float *dtable, const float *dy, const int32_t *idx, int n, int d);
double kref_softmax_xent_fwd(float *probs, const float *logits, const int32_t *labels,
                             const float *target, int n, int c);
void kref_softmax_xent_bwd(float *dlogits, const float *probs, const int32_t *labels,
                           const float *target, float scale, int n, int c);

void kref_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                       const int64_t *bstride, kernels_binop op);
void kref_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate);
void kref_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate);
void kref_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi);
void kref_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi);
void kref_select_eq_acc(float *dx, const float *g, const float *x, const float *y, int64_t n);
void kref_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int64_t rows, int d, float eps);
void kref_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int64_t rows,
                        int d);
void kref_log_softmax_fwd(float *y, const float *x, int64_t rows, int c);
void kref_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c);
double kref_sum_squares(const float *x, int64_t n);
void kref_scale_inplace(float *y, float s, int64_t n);

#endif
