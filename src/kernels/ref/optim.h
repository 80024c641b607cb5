/*
 * optim.h - the reference kernels of the optimizer's loops: the SGD and Adam
 * updates and the non-finite scan (see kernels.h for each slot's contract).
 * They are already branch-free loops that GCC vectorises, so the fast table
 * points at them too. Thread-safe; nothing is allocated.
 */
#ifndef RP_KERNELS_REF_OPTIM_H
#define RP_KERNELS_REF_OPTIM_H

#include "kernels/kernels.h"

void kref_sgd_update(float *w, float *mom, const float *g, int64_t n, float lr, float momentum,
                     float wd, bool nesterov, bool first);
void kref_adam_update(float *w, float *m, float *v, const float *g, int64_t n, float b1, float b2,
                      float eps, float l2, float shrink, float step_size, float sqrt_bc2);
int64_t kref_first_nonfinite(float *value, const float *x, int64_t n);

#endif
