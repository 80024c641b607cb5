/* elementwise.h - fast CPU element-wise kernels (see kernels.h for contracts). */
#ifndef RP_KERNELS_CPU_ELEMENTWISE_H
#define RP_KERNELS_CPU_ELEMENTWISE_H

#include "kernels/ref/elementwise.h"

void kcpu_act_fwd(float *y, const float *x, int64_t n, kernels_act a, float slope);
void kcpu_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n);
void kcpu_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c);
void kcpu_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c);
void kcpu_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                  kernels_act a, float slope);
void kcpu_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb, kernels_binop op);
void kcpu_scale(float *y, const float *x, float s, int64_t n, bool accumulate);
void kcpu_add_inplace(float *y, const float *x, int64_t n);
void kcpu_bn_stats(double *sums, const float *x, int64_t m, int c);
void kcpu_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                      const float *gamma, const float *beta, const float *residual, bool relu,
                      int64_t m, int c);
void kcpu_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, int64_t m, int c, float *g_out);
void kcpu_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x, const float *mean,
                      const float *invstd, const double *sums, const float *gamma, double count,
                      int64_t m, int c);
/* The same over activations stored in bf16, read widened in the loops (kernels.h's slots). */
void kcpu_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m, int c);
void kcpu_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x, const float *mean,
                           const float *invstd, const float *gamma, const float *beta,
                           const rp_bf16 *residual, bool relu, int64_t m, int c);
void kcpu_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy, const rp_bf16 *y,
                            const rp_bf16 *x, const float *mean, const float *invstd, int64_t m,
                            int c, float *g_out);
void kcpu_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                           const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                           const float *invstd, const double *sums, const float *gamma,
                           double count, int64_t m, int c);
void kcpu_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
void kcpu_gap_fwd(float *y, const float *x, int n, int hw, int c);
void kcpu_gap_bwd(float *dx, const float *dy, int n, int hw, int c);

void kcpu_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                       const int64_t *bstride, kernels_binop op);
void kcpu_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate);
void kcpu_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate);
void kcpu_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi);
void kcpu_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi);
void kcpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int64_t rows, int d, float eps);
void kcpu_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int64_t rows,
                        int d);
void kcpu_log_softmax_fwd(float *y, const float *x, int64_t rows, int c);
void kcpu_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c);
double kcpu_sum_squares(const float *x, int64_t n);
void kcpu_scale_inplace(float *y, float s, int64_t n);

#endif
