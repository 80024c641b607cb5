/*
 * bf16.c - the exported bfloat16 conversions (rule in replicator/core.h).
 * The loops are plain so that the compiler vectorises them; a conversion
 * in a hot path goes through the kernels' cast slots instead.
 */
#include "core/bf16.h"

#include "replicator/core.h"

rp_bf16 rp_bf16_from_f32(float x)
{
    return core_bf16_round(x);
}

float rp_bf16_to_f32(rp_bf16 x)
{
    return core_bf16_widen(x);
}

void rp_bf16_from_f32_array(rp_bf16 *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = core_bf16_round(x[i]);
}

void rp_bf16_to_f32_array(float *restrict y, const rp_bf16 *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = core_bf16_widen(x[i]);
}
