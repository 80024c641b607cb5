/* elementwise.h - fast CPU element-wise kernels (see kernels.h for contracts). */
#ifndef RP_KERNELS_CPU_ELEMENTWISE_H
#define RP_KERNELS_CPU_ELEMENTWISE_H

#include "kernels/ref/elementwise.h"

void rp_cpu_act_fwd(float *y, const float *x, int64_t n, rp_act a, float slope);
void rp_cpu_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n, rp_act a,
                    float slope);
void rp_cpu_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb, rp_binop op);
void rp_cpu_scale(float *y, const float *x, float s, int64_t n, bool accumulate);
void rp_cpu_add_inplace(float *y, const float *x, int64_t n);
void rp_cpu_bn_stats(double *sums, const float *x, int64_t m, int c);
void rp_cpu_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                        const float *gamma, const float *beta, const float *residual, bool relu,
                        int64_t m, int c);
void rp_cpu_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                         const float *mean, const float *invstd, int64_t m, int c, float *g_out);
void rp_cpu_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x,
                        const float *mean, const float *invstd, const double *sums,
                        const float *gamma, double count, int64_t m, int c);
void rp_cpu_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
void rp_cpu_gap_fwd(float *y, const float *x, int n, int hw, int c);
void rp_cpu_gap_bwd(float *dx, const float *dy, int n, int hw, int c);

void rp_cpu_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                         const int64_t *bstride, rp_binop op);
void rp_cpu_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                        bool accumulate);
void rp_cpu_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                        bool accumulate);
void rp_cpu_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi);
void rp_cpu_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi);
void rp_cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                          const float *beta, int64_t rows, int d, float eps);
void rp_cpu_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                          const float *mean, const float *rstd, const float *gamma, int64_t rows,
                          int d);
void rp_cpu_log_softmax_fwd(float *y, const float *x, int64_t rows, int c);
void rp_cpu_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c);
double rp_cpu_sum_squares(const float *x, int64_t n);
void rp_cpu_scale_inplace(float *y, float s, int64_t n);

#endif
