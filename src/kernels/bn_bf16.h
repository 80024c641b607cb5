/*
 * bn_bf16.h - batch norm over activations stored in bf16, for both tables: each reads x (and
 * y, the residual) in chunks of rows widened to f32, runs the table's own f32 kernel on the
 * chunk, and rounds what it writes back to bf16 (rp_bf16_from_f32's rounding). Statistics and
 * gradients stay f32/double, as in the f32 kernels. `k` is the table whose f32 kernels run:
 * the ref table's bf16 batch-norm slots point here (and the cpu table's for rows wider than its
 * stack coefficients), and callers pass the table itself.
 */
#ifndef RP_KERNELS_BN_BF16_H
#define RP_KERNELS_BN_BF16_H

#include "kernels/kernels.h"

void kernels_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m,
                           int c);
void kernels_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x,
                              const float *mean, const float *invstd, const float *gamma,
                              const float *beta, const rp_bf16 *residual, bool relu, int64_t m,
                              int c);
void kernels_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy,
                               const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                               const float *invstd, int64_t m, int c, float *g_out);
void kernels_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                              const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                              const float *invstd, const double *sums, const float *gamma,
                              double count, int64_t m, int c);

#endif
