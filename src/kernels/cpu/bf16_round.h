/*
 * bf16_round.h - f32 to bf16 over arrays, for the cpu table's conversions of whole tensors
 * (kcpu_cast_f32_bf16: rp_cast, and dy narrowed once for a convolution's two backward passes).
 */
#ifndef RP_KERNELS_CPU_BF16_ROUND_H
#define RP_KERNELS_CPU_BF16_ROUND_H

#include <stdint.h>

#include "replicator/core.h"

/*
 * y[i] = rp_bf16_from_f32(x[i]) for i < n: round to nearest even, infinities kept, a NaN made
 * quiet with its sign and the top of its payload, subnormals rounded (not flushed).
 */
void kcpu_bf16_round(rp_bf16 *y, const float *x, int64_t n);

#endif
