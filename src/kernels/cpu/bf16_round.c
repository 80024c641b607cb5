/*
 * bf16_round.c - f32 to bf16 over arrays, and batch norm's bf16 normalisation: one
 * VCVTNEPS2BF16 per 16 values where the CPU has AVX512-BF16, else core_bf16_round's integer
 * sequence, which gcc 12 vectorises at about 35 instructions per 32 values.
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

/* The lanes of v holding a subnormal (exponent bits all zero, mantissa not). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static inline __mmask16
subnormal_lanes(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    return _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
           _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
round_avx512_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (subnormal_lanes(v)) {
            round_scalar(y + i, x + i, 16);
            continue;
        }
        __m256bh h = _mm512_cvtneps_pbh(v);
        _mm256_storeu_si256((__m256i *)(void *)(y + i), (__m256i)h);
    }
    round_scalar(y + i, x + i, n - i);
}

/*
 * Batch norm's bf16 normalisation, 16 values a step. Its arithmetic must be the f32 kernel's
 * exactly: where this file is built with FMA (as the whole build then is, and gcc fuses the
 * f32 loop's x*scale + shift), one fused multiply-add; else a multiply and an add in the
 * rounding-mode forms, which gcc does not fuse (it would fuse the plain intrinsics, FMA being
 * part of this function's target). max(v, 0) gives 0 for a NaN and for -0, as the f32 loop's
 * v > 0 ? v : 0. Full steps load and store whole vectors; only the last, partial one uses
 * masks (with a masked load and store in every step, `bench_kernels --only e --threads 1` timed
 * the 16-channel kernel at 924 us on AMD Zen 5, against 259 us as it is).
 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static inline __m512
norm_step(const rp_bf16 *x, const float *scale, const float *shift, const rp_bf16 *residual,
          bool relu, __mmask16 lanes)
{
    __m512i xi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, x));
    __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(xi, 16));
    __m512 sc = _mm512_maskz_loadu_ps(lanes, scale), sh = _mm512_maskz_loadu_ps(lanes, shift);
#if defined(__FMA__)
    v = _mm512_fmadd_ps(v, sc, sh);
#else
    v = _mm512_add_round_ps(_mm512_mul_round_ps(v, sc, _MM_FROUND_CUR_DIRECTION), sh,
                            _MM_FROUND_CUR_DIRECTION);
#endif
    if (residual) {
        __m512i ri = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, residual));
        v = _mm512_add_round_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(ri, 16)),
                                _MM_FROUND_CUR_DIRECTION);
    }
    return relu ? _mm512_max_ps(v, _mm512_setzero_ps()) : v;
}

/* The count lanes of v rounded by the integer rule (the instruction would flush a subnormal). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
round_lanes(rp_bf16 *y, __m512 v, int count)
{
    float vs[16];
    _mm512_storeu_ps(vs, v);
    for (int l = 0; l < count; l++)
        y[l] = core_bf16_round(vs[l]);
}

/*
 * One span of len values (scale and shift indexed from its start). The subnormal lanes are
 * gathered over the span rather than branched on step by step, and the rare span that held one
 * is done again lane by lane.
 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static inline void
norm_span(rp_bf16 *y, const rp_bf16 *x, const float *scale, const float *shift,
          const rp_bf16 *residual, bool relu, int len)
{
    __mmask16 sub = 0;
    int j = 0;
    for (; j + 16 <= len; j += 16) {
        __m512 v = norm_step(x + j, scale + j, shift + j, residual ? residual + j : NULL, relu,
                             (__mmask16)0xffff);
        sub |= subnormal_lanes(v);
        _mm256_storeu_si256((__m256i *)(void *)(y + j), (__m256i)_mm512_cvtneps_pbh(v));
    }
    if (j < len) {
        __mmask16 lanes = (__mmask16)((1u << (len - j)) - 1);
        __m512 v =
            norm_step(x + j, scale + j, shift + j, residual ? residual + j : NULL, relu, lanes);
        sub |= subnormal_lanes(v) & lanes;
        _mm256_mask_storeu_epi16(y + j, lanes, (__m256i)_mm512_cvtneps_pbh(v));
    }
    if (!sub) return;
    for (j = 0; j < len; j += 16) {
        int count = len - j < 16 ? len - j : 16;
        __mmask16 lanes = (__mmask16)((1u << count) - 1);
        round_lanes(
            y + j,
            norm_step(x + j, scale + j, shift + j, residual ? residual + j : NULL, relu, lanes),
            count);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
norm_avx512_bf16(rp_bf16 *y, const rp_bf16 *x, const float *scale, const float *shift,
                 const rp_bf16 *residual, bool relu, int64_t len, int w)
{
    for (int64_t at = 0; at < len; at += w)
        norm_span(y + at, x + at, scale, shift, residual ? residual + at : NULL, relu,
                  len - at < w ? (int)(len - at) : w);
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

bool kcpu_bf16_has_instruction(void)
{
    return g_has_bf16;
}

void kcpu_bf16_norm_spans(rp_bf16 *y, const rp_bf16 *x, const float *scale, const float *shift,
                          const rp_bf16 *residual, bool relu, int64_t len, int w)
{
    norm_avx512_bf16(y, x, scale, shift, residual, relu, len, w);
}
#else
void kcpu_bf16_round(rp_bf16 *y, const float *x, int64_t n)
{
    round_scalar(y, x, n);
}

bool kcpu_bf16_has_instruction(void)
{
    return false;
}

/* Not called here: kcpu_bf16_has_instruction() is false. */
void kcpu_bf16_norm_spans(rp_bf16 *y, const rp_bf16 *x, const float *scale, const float *shift,
                          const rp_bf16 *residual, bool relu, int64_t len, int w)
{
    (void)y, (void)x, (void)scale, (void)shift, (void)residual, (void)relu, (void)len, (void)w;
}
#endif
