/*
 * elementwise.c - fast CPU versions of the memory-bound kernels. The loops
 * are written so that GCC vectorises them (restrict, channels innermost);
 * large arrays are split over the calling thread's OpenMP team, whose size
 * rp_kernels_set_threads() fixes. Reductions combine per-thread partials in
 * a fixed order, so a result depends on the thread count but never varies
 * run to run.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/bn_bf16.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/elementwise.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 32768

/*
 * exp(x) in plain arithmetic that GCC vectorises (libm's expf, expm1f and tanhf are calls, one
 * element at a time, and were a third of a D4PG learner step): x = n ln2 + r with n rounded by
 * the 1.5 * 2^23 trick, e^r by its Taylor polynomial to r^6 on |r| <= ln2/2 (error about 1e-7
 * relative), 2^n built in the exponent bits. x is clamped to where the result is a normal
 * float, so it never returns inf, 0 or a denormal (the activations below do not need them).
 */
static inline float fast_expf(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f;
    float n = (x * 1.44269504f + shift) - shift;
    float r = x - n * 0.693145752f; /* ln 2 in two parts, so r keeps its digits */
    r = r - n * 1.42860677e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666667f +
                                                  r * (0.0416666667f + r * (0.00833333333f +
                                                                            r * 0.00138888889f)))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* The ReLU into a stack block, then rounded as kcpu_cast_f32_bf16 rounds (the same values bit for
 * bit as rounding the f32 ReLU's output; the f32 output is never written). */
void kcpu_relu_fwd_bf16(rp_bf16 *restrict y, const float *restrict x, int64_t n)
{
    enum { BLOCK = 4096 };
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
    for (int64_t b = 0; b < n; b += BLOCK) {
        float buf[BLOCK];
        int64_t len = n - b < BLOCK ? n - b : BLOCK;
#pragma omp simd
        for (int64_t i = 0; i < len; i++)
            buf[i] = x[b + i] > 0 ? x[b + i] : 0.0f;
        kcpu_bf16_round(y + b, buf, len);
    }
}

/* Each input row's pixels written twice into output row 2i, which is then copied to row 2i+1. */
void kcpu_upsample2x_fwd(void *restrict y, const void *restrict x, rp_dtype type, int n, int h,
                         int w, int c)
{
    size_t px = (size_t)c * rp_dtype_size(type), out_row = 2 * (size_t)w * px;
#pragma omp parallel for if ((int64_t)n * h * w * c >= PAR_MIN) schedule(static)
    for (int64_t r = 0; r < (int64_t)n * h; r++) {
        const char *in = (const char *)x + r * w * px;
        char *o = (char *)y + 2 * r * out_row;
        for (int j = 0; j < w; j++) {
            memcpy(o + 2 * j * px, in + j * px, px);
            memcpy(o + (2 * j + 1) * px, in + j * px, px);
        }
        memcpy(o + out_row, o, out_row);
    }
}

/* dx[i, j] = the sum of dy's 2x2 block, rows of c channels in vector loops. */
void kcpu_upsample2x_bwd(float *restrict dx, const float *restrict dy, int n, int h, int w, int c)
{
    int64_t ow = 2 * (int64_t)w * c;
#pragma omp parallel for if ((int64_t)n * h * w * c >= PAR_MIN) schedule(static)
    for (int64_t r = 0; r < (int64_t)n * h; r++) {
        const float *top = dy + 2 * r * ow, *bottom = top + ow;
        float *out = dx + r * w * c;
        for (int j = 0; j < w; j++) {
            const float *t0 = top + 2 * j * c, *b0 = bottom + 2 * j * c;
#pragma omp simd
            for (int k = 0; k < c; k++)
                out[j * c + k] = (((0.0f + t0[k]) + t0[c + k]) + b0[k]) + b0[c + k]; /* ref's */
        }
    }
}

void kcpu_act_fwd(float *restrict y, const float *restrict x, int64_t n, kernels_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] > 0 ? x[i] : 0.0f;
        break;
    case RP_ACT_LEAKY_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] > 0 ? x[i] : slope * x[i];
        break;
    case RP_ACT_TANH:
        /* tanh x = 1 - 2 / (e^2x + 1); beyond |x| = 9 it is +-1 in float. */
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < -9.0f ? -9.0f : x[i] > 9.0f ? 9.0f : x[i];
            y[i] = 1.0f - 2.0f / (fast_expf(2.0f * v) + 1.0f);
        }
        break;
    case RP_ACT_SIGMOID:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + fast_expf(-x[i]));
        break;
    case RP_ACT_ELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], e = slope * (fast_expf(v) - 1.0f); /* both sides computed: a select */
            y[i] = v > 0 ? v : e;
        }
        break;
    case RP_ACT_SQRT:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = sqrtf(x[i]);
        break;
    case RP_ACT_RECIPROCAL:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = 1.0f / x[i];
        break;
    }
}

void kcpu_act_bwd(float *restrict dx, const float *restrict dy, const float *restrict y,
                  const float *restrict x, int64_t n, kernels_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float d =
                dy[i]; /* loaded unconditionally: the select then vectorises without masked loads */
            dx[i] = x[i] > 0 ? d : 0.0f;
        }
        break;
    case RP_ACT_LEAKY_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float d = dy[i];
            dx[i] = x[i] > 0 ? d : slope * d;
        }
        break;
    case RP_ACT_TANH:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case RP_ACT_SIGMOID:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case RP_ACT_ELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float d = dy[i], e = y[i] + slope;
            dx[i] = x[i] > 0 ? d : d * e;
        }
        break;
    case RP_ACT_SQRT:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * (0.5f / y[i]);
        break;
    case RP_ACT_RECIPROCAL:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            dx[i] = dy[i] * (-y[i] * y[i]);
        break;
    }
}

/* a and y may alias (in-place bias add), so no restrict on them. */
void kcpu_binary(float *y, const float *a, const float *restrict b, int64_t n, int64_t nb,
                 kernels_binop op)
{
    int64_t rows = n / nb;
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * nb;
        const float *ar = a + r * nb;
        if (op == RP_BIN_ADD) {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                yr[j] = ar[j] + b[j];
        } else if (op == RP_BIN_SUB) {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                yr[j] = ar[j] - b[j];
        } else if (op == RP_BIN_MUL) {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                yr[j] = ar[j] * b[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                yr[j] = ar[j] / b[j];
        }
    }
}

void kcpu_scale(float *restrict y, const float *restrict x, float s, int64_t n, bool accumulate)
{
    if (accumulate) {
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] += s * x[i];
    } else {
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = s * x[i];
    }
}

void kcpu_add_inplace(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/*
 * Batch-norm statistics. Per-channel sums over rows of [m, c]: each thread
 * takes a contiguous block of rows; within it, runs of SUM_RUN rows are
 * summed in float vectors (channels innermost, so the loop vectorises) and
 * each run's total is added to double accumulators. Thread partials are
 * combined in thread order. The result depends on the thread count, never
 * on timing.
 *
 * Forward, the float runs sum x-k and (x-k)^2 for a shift k near the mean
 * (a thread's first run: its first row; each later run: the mean of the run
 * before), and the shift is added back in double: sum x = sum(x-k) + n*k,
 * sum x^2 = sum(x-k)^2 + k*(2*sum(x-k) + n*k).
 * Uncentred float sums of x^2 lose (mean/std)^2 times float's precision to
 * the cancellation in E[x^2]-E[x]^2; centred ones keep it, and double has
 * the digits to spare for the cancellation left in the caller. The shift
 * never leaves the kernel, so sums from different replicas (each with its
 * own shifts) still add up exactly as plain sums do.
 */
#define MAX_TEAM 16
#define MAX_C    512 /* channels per block of partial sums (thread-local) */
#define NORM_MAX_C                                                                                 \
    2048 /* per-channel coefficients on the stack (ResNet-50's widest); wider: ref                 \
          */
#define SUM_RUN   32
#define SUM_BLOCK 16

typedef struct bn_sum_args {
    const float *x, *dy, *y, *mean, *invstd;
    const rp_bf16 *xh, *yh; /* x and y stored in bf16 (x, y NULL): read widened in the loops */
    int64_t m;
    int c;      /* channels summed, at most MAX_C */
    int64_t ld; /* floats from one row to the next (c, or more for a block of wider rows) */
    bool backward;
    float *g_out; /* backward: the masked dy is written here too (NULL: not) */
} bn_sum_args;

/* Element j of a row stored in bf16 (h) or f32 (f); `half` is a constant where it is used. */
#define BN_LD(h, f, j) (half ? core_bf16_widen((h)[j]) : (f)[j])

/*
 * Backward sums of channels [j0, j0 + SUM_BLOCK) over rows [lo, hi) into f and f2, the
 * accumulators in registers: g (dy, masked by y > 0 when `masked`; also stored into g_out
 * when `store`) and g*xhat.
 */
static inline __attribute__((always_inline)) void
bn_bwd_block(float *restrict f, float *restrict f2, const bn_sum_args *a, int64_t lo, int64_t hi,
             int j0, bool half, bool masked, bool store)
{
    float s[SUM_BLOCK] = {0}, s2[SUM_BLOCK] = {0}, mu[SUM_BLOCK], is[SUM_BLOCK];
    for (int j = 0; j < SUM_BLOCK; j++)
        mu[j] = a->mean[j0 + j], is[j] = a->invstd[j0 + j];
    for (int64_t i = lo; i < hi; i++) {
        int64_t at = i * a->ld + j0;
        const float *xr = half ? NULL : a->x + at, *dr = a->dy + at;
        const float *yr = !half && masked ? a->y + at : NULL;
        const rp_bf16 *xhr = half ? a->xh + at : NULL, *yhr = half && masked ? a->yh + at : NULL;
        float *restrict gr = store ? a->g_out + at : NULL;
#pragma omp simd
        for (int j = 0; j < SUM_BLOCK; j++) {
            float d = dr[j], g = masked ? (BN_LD(yhr, yr, j) > 0 ? d : 0.0f) : d;
            if (store) gr[j] = g;
            s[j] += g;
            s2[j] += g * ((BN_LD(xhr, xr, j) - mu[j]) * is[j]);
        }
    }
    for (int j = 0; j < SUM_BLOCK; j++)
        f[j0 + j] = s[j], f2[j0 + j] = s2[j];
}

/*
 * Float sums of one run of rows [lo, hi) into f (sum) and f2 (second sum):
 * forward of x-k and (x-k)^2, backward of g and g*xhat.
 */
static inline __attribute__((always_inline)) void
bn_sum_run_t(float *restrict f, float *restrict f2, const float *restrict k, const bn_sum_args *a,
             int64_t lo, int64_t hi, bool half)
{
    int c = a->c;
    if (!a->backward) {
        /*
         * Blocks of SUM_BLOCK channels, each summed down the run in
         * fixed-size accumulators the compiler keeps in registers (a
         * loop over all c channels goes through memory every row).
         */
        int j0 = 0;
        for (; j0 + SUM_BLOCK <= c; j0 += SUM_BLOCK) {
            float s[SUM_BLOCK] = {0}, s2[SUM_BLOCK] = {0};
            for (int64_t i = lo; i < hi; i++) {
                const float *xr = half ? NULL : a->x + i * a->ld + j0;
                const rp_bf16 *xhr = half ? a->xh + i * a->ld + j0 : NULL;
#pragma omp simd
                for (int j = 0; j < SUM_BLOCK; j++) {
                    float d = BN_LD(xhr, xr, j) - k[j0 + j];
                    s[j] += d;
                    s2[j] += d * d;
                }
            }
            for (int j = 0; j < SUM_BLOCK; j++)
                f[j0 + j] = s[j], f2[j0 + j] = s2[j];
        }
        for (int j = j0; j < c; j++)
            f[j] = f2[j] = 0.0f;
        for (int64_t i = lo; i < hi && j0 < c; i++) {
            const float *xr = half ? NULL : a->x + i * a->ld;
            const rp_bf16 *xhr = half ? a->xh + i * a->ld : NULL;
#pragma omp simd
            for (int j = j0; j < c; j++) {
                float d = BN_LD(xhr, xr, j) - k[j];
                f[j] += d;
                f2[j] += d * d;
            }
        }
        return;
    }
    /* Backward: the same blocks of SUM_BLOCK channels in registers (the sums, in the same row
       order, are the per-row loop's below bit for bit), then the channels left over. */
    const bool masked = half ? a->yh != NULL : a->y != NULL;
    int j0 = 0;
    for (; j0 + SUM_BLOCK <= c; j0 += SUM_BLOCK) {
        if (masked && a->g_out)
            bn_bwd_block(f, f2, a, lo, hi, j0, half, true, true);
        else if (masked)
            bn_bwd_block(f, f2, a, lo, hi, j0, half, true, false);
        else if (a->g_out)
            bn_bwd_block(f, f2, a, lo, hi, j0, half, false, true);
        else
            bn_bwd_block(f, f2, a, lo, hi, j0, half, false, false);
    }
    for (int j = j0; j < c; j++)
        f[j] = f2[j] = 0.0f;
    for (int64_t i = lo; i < hi && j0 < c; i++) {
        const float *xr = half ? NULL : a->x + i * a->ld, *dr = a->dy + i * a->ld,
                    *yr = !half && a->y ? a->y + i * a->ld : NULL;
        const rp_bf16 *xhr = half ? a->xh + i * a->ld : NULL,
                      *yhr = half && a->yh ? a->yh + i * a->ld : NULL;
        float *gr = a->g_out ? a->g_out + i * a->ld : NULL;
        if ((yr || yhr) && gr) {
#pragma omp simd
            for (int j = j0; j < c; j++) {
                float d = dr[j], g = BN_LD(yhr, yr, j) > 0 ? d : 0.0f;
                gr[j] = g;
                f[j] += g;
                f2[j] += g * ((BN_LD(xhr, xr, j) - a->mean[j]) * a->invstd[j]);
            }
        } else if (yr || yhr) {
#pragma omp simd
            for (int j = j0; j < c; j++) {
                float d = dr[j], g = BN_LD(yhr, yr, j) > 0 ? d : 0.0f;
                f[j] += g;
                f2[j] += g * ((BN_LD(xhr, xr, j) - a->mean[j]) * a->invstd[j]);
            }
        } else {
            if (gr) memcpy(gr + j0, dr + j0, (size_t)(c - j0) * sizeof *gr);
#pragma omp simd
            for (int j = j0; j < c; j++) {
                f[j] += dr[j];
                f2[j] += dr[j] * ((BN_LD(xhr, xr, j) - a->mean[j]) * a->invstd[j]);
            }
        }
    }
}

/* The run for f32 rows and for bf16 rows, each compiled on its own. */
static inline void bn_sum_run(float *restrict f, float *restrict f2, const float *restrict k,
                              const bn_sum_args *a, int64_t lo, int64_t hi)
{
    if (a->xh)
        bn_sum_run_t(f, f2, k, a, lo, hi, true);
    else
        bn_sum_run_t(f, f2, k, a, lo, hi, false);
}

static void bn_sums(double *sums, const bn_sum_args *a)
{
    int c = a->c;
    int64_t m = a->m;
    int team = omp_get_max_threads();
    if (team > MAX_TEAM) team = MAX_TEAM;
    if (m * c < PAR_MIN) team = 1;
    /*
     * The calling thread's scratch, shared with its team through `part`
     * (evaluated here, before the region: inside it each thread would see
     * its own thread-local copy).
     */
    static _Thread_local double partial[MAX_TEAM][2 * MAX_C];
    double(*part)[2 * MAX_C] = partial;
    /*
     * The team we get can be smaller than asked for (nested regions run on
     * one thread), so the region reports its real size for the combine.
     */
    int used = 1;
#pragma omp parallel num_threads(team)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (t == 0) used = nt;
        int64_t lo = m * t / nt, hi = m * (t + 1) / nt;
        double *s = part[t], *s2 = part[t] + c;
        float f[MAX_C], f2[MAX_C], k[MAX_C];
        for (int j = 0; j < c; j++)
            s[j] = s2[j] = 0;
        if (!a->backward && lo < hi)
            for (int j = 0; j < c; j++)
                k[j] = a->xh ? core_bf16_widen(a->xh[lo * a->ld + j]) : a->x[lo * a->ld + j];
        for (int64_t r = lo; r < hi; r += SUM_RUN) {
            int64_t end = r + SUM_RUN < hi ? r + SUM_RUN : hi;
            bn_sum_run(f, f2, k, a, r, end);
            if (a->backward) {
                for (int j = 0; j < c; j++) {
                    s[j] += f[j];
                    s2[j] += f2[j];
                }
            } else {
                double n = (double)(end - r);
                for (int j = 0; j < c; j++) {
                    s[j] += f[j] + n * k[j];
                    s2[j] += f2[j] + k[j] * (2.0 * f[j] + n * k[j]);
                    k[j] += f[j] / (float)n;
                }
            }
        }
    }
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < used; t++) {
            s += part[t][j];
            s2 += part[t][c + j];
        }
        sums[j] = s;
        sums[c + j] = s2;
    }
}

/*
 * Rows wider than MAX_C channels are summed in blocks of MAX_C channels (each block reads its
 * stretch of every row), so the thread-local partial sums stay small.
 */
static void bn_sums_blocked(double *sums, bn_sum_args a)
{
    int c = a.c;
    a.ld = c;
    if (c <= MAX_C) {
        bn_sums(sums, &a);
        return;
    }
    double block[2 * MAX_C];
    bn_sum_args b = a;
    for (int c0 = 0; c0 < c; c0 += MAX_C) {
        b.c = c - c0 < MAX_C ? c - c0 : MAX_C;
        b.x = a.x ? a.x + c0 : NULL;
        b.xh = a.xh ? a.xh + c0 : NULL;
        b.dy = a.dy ? a.dy + c0 : NULL;
        b.y = a.y ? a.y + c0 : NULL;
        b.yh = a.yh ? a.yh + c0 : NULL;
        b.mean = a.mean ? a.mean + c0 : NULL;
        b.invstd = a.invstd ? a.invstd + c0 : NULL;
        b.g_out = a.g_out ? a.g_out + c0 : NULL;
        bn_sums(block, &b);
        memcpy(sums + c0, block, (size_t)b.c * sizeof *block);
        memcpy(sums + c + c0, block + b.c, (size_t)b.c * sizeof *block);
    }
}

void kcpu_bn_stats(double *sums, const float *x, int64_t m, int c)
{
    bn_sums_blocked(sums, (bn_sum_args){.x = x, .m = m, .c = c});
}

void kcpu_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, int64_t m, int c, float *g_out)
{
    bn_sums_blocked(sums, (bn_sum_args){.x = x,
                                        .dy = dy,
                                        .y = y,
                                        .mean = mean,
                                        .invstd = invstd,
                                        .m = m,
                                        .c = c,
                                        .backward = true,
                                        .g_out = g_out});
}

/* Batch norm's affine map per channel: y = scale*x + shift. */
/*
 * The bf16 normalisation walks [m, c] in spans of whole rows, at least SPAN_MIN values long,
 * with its per-channel coefficients repeated along the span (bn_span, bn_repeat). Its loop
 * mixes bf16 and f32 values, so a vector step is 32 values, and a row of 16 channels ran
 * mostly in the loop's set-up and tail: 2.5x slower than over f32 rows (`bench_kernels --only
 * e`); in spans, 2x faster than it was. Each value gets the same arithmetic as row by row. The
 * f32 kernel keeps rows (spans measured 1.1-1.2x slower there), and so does bwd_data, whose
 * spans were slower in both types.
 */
#define SPAN_MIN 64

/* The span for rows of c channels: c itself from SPAN_MIN up, else the fewest rows past it. */
static int bn_span(int c)
{
    return c >= SPAN_MIN ? c : c * ((SPAN_MIN + c - 1) / c);
}

/* Repeats a's first c values along a[0, w) (w a multiple of c). */
static void bn_repeat(float *a, int c, int w)
{
    for (int j = c; j < w; j++)
        a[j] = a[j - c];
}

/* scale = gamma*invstd, shift = beta - mean*scale; with `span`, repeated along the span, whose
 * length it returns (else c). */
static int bn_norm_coeffs(float *scale, float *shift, const float *mean, const float *invstd,
                          const float *gamma, const float *beta, int c, bool span)
{
    for (int j = 0; j < c; j++) {
        scale[j] = gamma[j] * invstd[j];
        shift[j] = beta[j] - mean[j] * scale[j];
    }
    int w = span ? bn_span(c) : c;
    bn_repeat(scale, c, w), bn_repeat(shift, c, w);
    return w;
}

/*
 * The span [at, at + len) of y = scale*x + shift (+ residual, then the ReLU), stored in f32 (x,
 * residual, y) or, with `half`, in bf16 (xh, rh, yh: widened as read, y rounded once as
 * written, inside the loop, by the integer rule: the bf16 kernel's path where the CPU lacks
 * AVX512-BF16 or the span is not a multiple of 16 values; else kcpu_bf16_norm_spans does it
 * with the instruction, 1.3-1.9x faster: `bench_kernels --only e`). Inlined into the f32 and the
 * bf16 kernel's parallel loop with `half` a constant, so each compiles on its own (a parallel
 * region inside this function would be outlined with `half` a variable).
 */
static inline __attribute__((always_inline)) void
bn_norm_span(float *restrict y, rp_bf16 *restrict yh, const float *restrict x,
             const rp_bf16 *restrict xh, const float *restrict scale, const float *restrict shift,
             const float *restrict residual, const rp_bf16 *restrict rh, bool relu, int64_t at,
             int len, bool half)
{
    const float *xr = half ? NULL : x + at;
    const rp_bf16 *xhr = half ? xh + at : NULL;
    float *yr = half ? NULL : y + at;
    rp_bf16 *yhr = half ? yh + at : NULL;
    if (half ? rh != NULL : residual != NULL) {
        /* The residual block's tail: the same roundings as bn, then add, then relu. */
        const float *rr = half ? NULL : residual + at;
        const rp_bf16 *rhr = half ? rh + at : NULL;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float v = BN_LD(xhr, xr, j) * scale[j] + shift[j];
            v += BN_LD(rhr, rr, j);
            v = !relu || v > 0 ? v : 0.0f;
            if (half)
                yhr[j] = core_bf16_round(v);
            else
                yr[j] = v;
        }
    } else if (relu) {
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float v = BN_LD(xhr, xr, j) * scale[j] + shift[j];
            v = v > 0 ? v : 0.0f;
            if (half)
                yhr[j] = core_bf16_round(v);
            else
                yr[j] = v;
        }
    } else {
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float v = BN_LD(xhr, xr, j) * scale[j] + shift[j];
            if (half)
                yhr[j] = core_bf16_round(v);
            else
                yr[j] = v;
        }
    }
}

/*
 * dx = g*(dy' - a - xhat*b) = k1*dy' + k2*(x-mean) + k3 per channel,
 * with g = gamma*invstd, a = sum_dy/count, b = sum_dy_xhat/count:
 * k1 = g, k2 = -g*b*invstd, k3 = -g*a. (x-mean) stays explicit so a
 * large mean does not cancel away the precision.
 */
static void bn_bwd_coeffs(float *k1, float *k2, float *k3, const float *invstd, const double *sums,
                          const float *gamma, double count, int c)
{
    for (int j = 0; j < c; j++) {
        double g = (double)gamma[j] * invstd[j], a = sums[j] / count, b = sums[c + j] / count;
        k1[j] = (float)g;
        k2[j] = (float)(-g * b * invstd[j]);
        k3[j] = (float)(-g * a);
    }
}

/* Row i of dx into out, from row i of dy, x and the fused ReLU's y, x and y in f32 or, with
 * `half`, bf16 (as bn_norm_row). */
static inline __attribute__((always_inline)) void
bn_bwd_data_row(float *restrict out, const float *restrict dy, const float *restrict y,
                const rp_bf16 *restrict yh, const float *restrict x, const rp_bf16 *restrict xh,
                const float *restrict mean, const float *restrict k1, const float *restrict k2,
                const float *restrict k3, int64_t i, int c, bool half)
{
    const float *dr = dy + i * c, *xr = half ? NULL : x + i * c;
    const rp_bf16 *xhr = half ? xh + i * c : NULL;
    if (half ? yh != NULL : y != NULL) {
        const float *yr = half ? NULL : y + i * c;
        const rp_bf16 *yhr = half ? yh + i * c : NULL;
#pragma omp simd
        for (int j = 0; j < c; j++) {
            float d = dr[j], g = BN_LD(yhr, yr, j) > 0 ? d : 0.0f;
            out[j] = k1[j] * g + k2[j] * (BN_LD(xhr, xr, j) - mean[j]) + k3[j];
        }
    } else {
#pragma omp simd
        for (int j = 0; j < c; j++)
            out[j] = k1[j] * dr[j] + k2[j] * (BN_LD(xhr, xr, j) - mean[j]) + k3[j];
    }
}

void kcpu_bn_norm_fwd(float *restrict y, const float *restrict x, const float *restrict mean,
                      const float *restrict invstd, const float *restrict gamma,
                      const float *restrict beta, const float *restrict residual, bool relu,
                      int64_t m, int c)
{
    if (c > NORM_MAX_C) {
        kref_bn_norm_fwd(y, x, mean, invstd, gamma, beta, residual, relu, m, c);
        return;
    }
    float scale[NORM_MAX_C], shift[NORM_MAX_C];
    bn_norm_coeffs(scale, shift, mean, invstd, gamma, beta, c, false);
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < m; i++)
        bn_norm_span(y, NULL, x, NULL, scale, shift, residual, NULL, relu, i * c, c, false);
}

void kcpu_bn_bwd_data(float *restrict dx, const float *restrict dy, const float *restrict y,
                      const float *restrict x, const float *restrict mean,
                      const float *restrict invstd, const double *restrict sums,
                      const float *restrict gamma, double count, int64_t m, int c)
{
    if (c > NORM_MAX_C) {
        kref_bn_bwd_data(dx, dy, y, x, mean, invstd, sums, gamma, count, m, c);
        return;
    }
    float k1[NORM_MAX_C], k2[NORM_MAX_C], k3[NORM_MAX_C];
    bn_bwd_coeffs(k1, k2, k3, invstd, sums, gamma, count, c);
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < m; i++)
        bn_bwd_data_row(dx + i * c, dy, y, NULL, x, NULL, mean, k1, k2, k3, i, c, false);
}

/* ---- the same over activations stored in bf16 -------------------------------------------- */

/*
 * The four batch-norm kernels with x (and the fused ReLU's y, the residual) stored in bf16,
 * read widened inside the loops above (no staging buffer): the same arithmetic on the same
 * widened values, so the outputs equal the f32 kernels' on widened inputs (y then rounded to
 * bf16), and the sums differ only in their order.
 */
void kcpu_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m, int c)
{
    (void)k;
    bn_sums_blocked(sums, (bn_sum_args){.xh = x, .m = m, .c = c});
}

void kcpu_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy, const rp_bf16 *y,
                            const rp_bf16 *x, const float *mean, const float *invstd, int64_t m,
                            int c, float *g_out)
{
    (void)k;
    bn_sums_blocked(sums, (bn_sum_args){.xh = x,
                                        .dy = dy,
                                        .yh = y,
                                        .mean = mean,
                                        .invstd = invstd,
                                        .m = m,
                                        .c = c,
                                        .backward = true,
                                        .g_out = g_out});
}

void kcpu_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *restrict y, const rp_bf16 *restrict x,
                           const float *restrict mean, const float *restrict invstd,
                           const float *restrict gamma, const float *restrict beta,
                           const rp_bf16 *restrict residual, bool relu, int64_t m, int c)
{
    if (c > NORM_MAX_C) {
        kernels_bn_norm_fwd_bf16(k, y, x, mean, invstd, gamma, beta, residual, relu, m, c);
        return;
    }
    float scale[NORM_MAX_C], shift[NORM_MAX_C];
    int w = bn_norm_coeffs(scale, shift, mean, invstd, gamma, beta, c, true);
    int64_t n = m * c;
    if (w % 16 == 0 && kcpu_bf16_has_instruction()) {
        /* The rounding is one instruction (bf16_round.c): each thread's spans in one call. */
        int64_t spans = (n + w - 1) / w;
#pragma omp parallel if (n >= PAR_MIN)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            int64_t lo = spans * t / nt * w, hi = spans * (t + 1) / nt * w;
            if (hi > n) hi = n;
            if (lo < hi)
                kcpu_bf16_norm_spans(y + lo, x + lo, scale, shift, residual ? residual + lo : NULL,
                                     relu, hi - lo, w);
        }
        return;
    }
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
    for (int64_t at = 0; at < n; at += w)
        bn_norm_span(NULL, y, NULL, x, scale, shift, NULL, residual, relu, at,
                     n - at < w ? (int)(n - at) : w, true);
}

/* Values of dx a bf16 block holds in f32 before rounding them into place: whole rows, so at
 * least NORM_MAX_C; 16 KB, in L1 beside the rows it reads. */
enum { BWD_BLOCK = NORM_MAX_C > 4096 ? NORM_MAX_C : 4096 };

void kcpu_bn_bwd_data_bf16(const kernels_table *k, void *restrict dx, rp_dtype dx_type,
                           const float *restrict dy, const rp_bf16 *restrict y,
                           const rp_bf16 *restrict x, const float *restrict mean,
                           const float *restrict invstd, const double *restrict sums,
                           const float *restrict gamma, double count, int64_t m, int c)
{
    if (c > NORM_MAX_C) {
        kernels_bn_bwd_data_bf16(k, dx, dx_type, dy, y, x, mean, invstd, sums, gamma, count, m, c);
        return;
    }
    float k1[NORM_MAX_C], k2[NORM_MAX_C], k3[NORM_MAX_C];
    bn_bwd_coeffs(k1, k2, k3, invstd, sums, gamma, count, c);
    if (dx_type != RP_BF16) {
        float *d = dx;
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < m; i++)
            bn_bwd_data_row(d + i * c, dy, NULL, y, NULL, x, mean, k1, k2, k3, i, c, true);
        return;
    }
    /* A bf16 dx: a block of rows in f32, then rounded into place by the rounding the
     * convolution's backward would apply to an f32 dx (kcpu_cast_f32_bf16's), so the values
     * are the same bit for bit and the f32 rows are never written to memory. */
    rp_bf16 *d = dx;
    int64_t rows = BWD_BLOCK / c, blocks = (m + rows - 1) / rows;
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
    for (int64_t q = 0; q < blocks; q++) {
        float buf[BWD_BLOCK];
        int64_t r0 = q * rows, r1 = r0 + rows < m ? r0 + rows : m;
        for (int64_t i = r0; i < r1; i++)
            bn_bwd_data_row(buf + (i - r0) * c, dy, NULL, y, NULL, x, mean, k1, k2, k3, i, c, true);
        kcpu_bf16_round(d + r0 * c, buf, (r1 - r0) * c);
    }
}

void kcpu_reduce_rows(float *restrict y, const float *restrict x, int64_t rows, int64_t nb,
                      bool accumulate)
{
    if (nb > MAX_C) {
        kref_reduce_rows(y, x, rows, nb, accumulate);
        return;
    }
    double s[MAX_C];
    for (int64_t j = 0; j < nb; j++)
        s[j] = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * nb;
#pragma omp simd
        for (int64_t j = 0; j < nb; j++)
            s[j] += xr[j];
    }
    for (int64_t j = 0; j < nb; j++)
        y[j] = (float)((accumulate ? y[j] : 0.0) + s[j]);
}

void kcpu_gap_fwd(float *restrict y, const float *restrict x, int n, int hw, int c)
{
    for (int b = 0; b < n; b++) {
        kcpu_reduce_rows(y + (int64_t)b * c, x + (int64_t)b * hw * c, hw, c, false);
        for (int k = 0; k < c; k++)
            y[(int64_t)b * c + k] /= (float)hw;
    }
}

void kcpu_gap_bwd(float *restrict dx, const float *restrict dy, int n, int hw, int c)
{
    float inv = 1.0f / (float)hw;
    for (int b = 0; b < n; b++)
        for (int p = 0; p < hw; p++) {
            float *dr = dx + ((int64_t)b * hw + p) * c;
#pragma omp simd
            for (int k = 0; k < c; k++)
                dr[k] = dy[(int64_t)b * c + k] * inv;
        }
}
