/*
 * bf16.h - the bfloat16 conversions as inline functions, for the loops of
 * the layers that convert element by element (kernels, the comm layer's
 * reductions). The exported rp_bf16_* functions of replicator/core.h are
 * these; the rule is stated there.
 */
#ifndef RP_CORE_BF16_H
#define RP_CORE_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t core_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    /* NaN: keep the sign and the top of the payload, and set the quiet bit, so that a
       signalling NaN whose payload sits only in the low 16 bits does not become infinity. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    /* Round to nearest even: add half an ulp of bf16, less one when the kept part is even, so
       that an exact tie rounds down to the even value. A carry into the exponent is right
       (the next binade, or infinity at the top). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float core_bf16_widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
