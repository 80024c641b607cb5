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
                        const float *gamma, const float *beta, bool relu, int64_t m, int c);
void rp_cpu_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                         const float *mean, const float *invstd, int64_t m, int c);
void rp_cpu_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x,
                        const float *mean, const float *invstd, const double *sums,
                        const float *gamma, double count, int64_t m, int c);
void rp_cpu_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate);
void rp_cpu_gap_fwd(float *y, const float *x, int n, int hw, int c);
void rp_cpu_gap_bwd(float *dx, const float *dy, int n, int hw, int c);

#endif
