/*
 * bf16_round.c - f32 to bf16 over arrays: one VCVTNEPS2BF16 per 16 values where the CPU has
 * AVX512-BF16, else core_bf16_round's integer sequence, which gcc 12 vectorises at about 35
 * instructions per 32 values.
 *
 * The instruction rounds to nearest even and quiets a NaN exactly as core_bf16_round does
 * (Intel SDM, VCVTNEPS2BF16's convert_fp32_to_bfloat16), but takes a subnormal input as zero;
 * ours rounds it. So a block of 16 holding a subnormal takes the integer path, and every value
 * comes out as rp_bf16_from_f32 gives it (tests/test_kernels_bf16.c checks the two on every
 * class of input, subnormals among them).
 *
 * The instruction is chosen at run time (__builtin_cpu_supports), so the portable build uses it
 * too: its function is compiled for AVX512-BF16 alone (a target attribute), the rest of the
 * file for whatever the build targets.
 */
#include "kernels/cpu/bf16_round.h"

#include <stdbool.h>

#include "core/bf16.h"

static void round_scalar(rp_bf16 *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = core_bf16_round(x[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
round_avx512_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    const __m512i exponent = _mm512_set1_epi32(0x7f800000),
                  mantissa = _mm512_set1_epi32(0x007fffff);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512i u = _mm512_castps_si512(v);
        /* Subnormal: exponent bits all zero, mantissa not. */
        __mmask16 sub = _mm512_testn_epi32_mask(u, exponent) & _mm512_test_epi32_mask(u, mantissa);
        if (sub) {
            round_scalar(y + i, x + i, 16);
            continue;
        }
        __m256bh h = _mm512_cvtneps_pbh(v);
        _mm256_storeu_si256((__m256i *)(void *)(y + i), (__m256i)h);
    }
    round_scalar(y + i, x + i, n - i);
}

/* Read once, as the program loads, not on every call. */
static bool g_has_bf16;

__attribute__((constructor)) static void detect(void)
{
    __builtin_cpu_init();
    g_has_bf16 = __builtin_cpu_supports("avx512bf16");
}

void kcpu_bf16_round(rp_bf16 *y, const float *x, int64_t n)
{
    if (g_has_bf16)
        round_avx512_bf16(y, x, n);
    else
        round_scalar(y, x, n);
}
#else
void kcpu_bf16_round(rp_bf16 *y, const float *x, int64_t n)
{
    round_scalar(y, x, n);
}
#endif
