/*
 * bf16_round.h - f32 to bf16 with the CPU's conversion instruction where it has one: over
 * arrays, for the cpu table's conversions of whole tensors (kcpu_cast_f32_bf16: rp_cast, conv
 * inputs and dy narrowed once), and inside batch norm's bf16 normalisation.
 */
#ifndef RP_KERNELS_CPU_BF16_ROUND_H
#define RP_KERNELS_CPU_BF16_ROUND_H

#include <stdbool.h>
#include <stdint.h>

#include "replicator/core.h"

/*
 * y[i] = rp_bf16_from_f32(x[i]) for i < n: round to nearest even, infinities kept, a NaN made
 * quiet with its sign and the top of its payload, subnormals rounded (not flushed).
 */
void kcpu_bf16_round(rp_bf16 *y, const float *x, int64_t n);

/* Whether this CPU converts with VCVTNEPS2BF16 (AVX512-BF16); read once, as the program loads. */
bool kcpu_bf16_has_instruction(void);

/*
 * Batch norm's normalisation over len bf16 values in spans of w (scale and shift hold w values,
 * repeated for each span): v = x[j]*scale[j % w] + shift[j % w], plus residual[j] when it is
 * not NULL, then max(v, 0) with relu; y[j] = v rounded as kcpu_bf16_round. Each v is the f32
 * kernel's value on the widened inputs (multiply and add fused exactly where this build's f32
 * loops fuse them). Only where kcpu_bf16_has_instruction(), and w a multiple of 16: the caller's
 * own loop does it otherwise.
 */
void kcpu_bf16_norm_spans(rp_bf16 *y, const rp_bf16 *x, const float *scale, const float *shift,
                          const rp_bf16 *residual, bool relu, int64_t len, int w);

#endif
