/*
 * norms.h - the reference kernels for the statistics that live beside the
 * tensors: batch norm's per-channel statistics and running averages,
 * spectral norm's power iteration, and the parameter checksum. Plain C, the
 * numerical specification; see kernels.h for each slot's contract.
 */
#ifndef RP_KERNELS_REF_NORMS_H
#define RP_KERNELS_REF_NORMS_H

#include "kernels/kernels.h"

void kref_bn_train_stats(float *mean, float *invstd, float *mean_rest, float *running_mean,
                         float *running_var, const double *sums, double count, float eps,
                         float momentum, int c);
void kref_bn_eval_stats(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                        const float *running_var, float eps, int c);
void kref_bn_bwd_sums(float *local, double *sums, const float *mean_rest, const float *invstd,
                      int c);
double kref_sn_power(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                     int64_t cols);
void kref_sn_fwd(float *y, float *u, const double *u_new, const float *w, double sigma,
                 int64_t rows, int64_t cols);
void kref_sn_bwd(float *dw, const double *u_new, const double *v, const float *dy, const float *w,
                 double sigma, int64_t rows, int64_t cols);
uint64_t kref_checksum(const float *x, int64_t n);

#endif
