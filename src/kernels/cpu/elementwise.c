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

#include "kernels/cpu/elementwise.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 32768

void rp_cpu_act_fwd(float *restrict y, const float *restrict x, int64_t n, rp_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
        break;
    case RP_ACT_LEAKY_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : slope * x[i];
        break;
    case RP_ACT_TANH:
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
        break;
    case RP_ACT_SIGMOID:
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    }
}

void rp_cpu_act_bwd(float *restrict dx, const float *restrict dy, const float *restrict y,
                    const float *restrict x, int64_t n, rp_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
        break;
    case RP_ACT_LEAKY_RELU:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : slope * dy[i];
        break;
    case RP_ACT_TANH:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case RP_ACT_SIGMOID:
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    }
}

/* a and y may alias (in-place bias add), so no restrict on them. */
void rp_cpu_binary(float *y, const float *a, const float *restrict b, int64_t n, int64_t nb,
                   rp_binop op)
{
    int64_t rows = n / nb;
#pragma omp parallel for if (n >= PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * nb;
        const float *ar = a + r * nb;
        if (op == RP_BIN_ADD) {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++) yr[j] = ar[j] + b[j];
        } else if (op == RP_BIN_SUB) {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++) yr[j] = ar[j] - b[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < nb; j++) yr[j] = ar[j] * b[j];
        }
    }
}

void rp_cpu_scale(float *restrict y, const float *restrict x, float s, int64_t n, bool accumulate)
{
    if (accumulate) {
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] += s * x[i];
    } else {
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
    }
}

void rp_cpu_add_inplace(float *restrict y, const float *restrict x, int64_t n)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/*
 * Per-channel sums over rows of [m, c]: each thread sums a contiguous block
 * of rows into its own double accumulators (channels innermost, so the loop
 * vectorises); partials are added in thread order.
 */
#define MAX_TEAM 16
static void channel_sums2(double *sums, const float *restrict a, const float *restrict b, int64_t m,
                          int c, bool square)
{
    int team = omp_get_max_threads();
    if (team > MAX_TEAM) team = MAX_TEAM;
    if (m * c < PAR_MIN) team = 1;
    double partial[MAX_TEAM][2 * 512];
    if (c > 512) {
        /* Wide layers are rare here; the reference loop is fine for them. */
        if (square) rp_ref_bn_stats(sums, a, m, c);
        else rp_ref_bn_stats_bwd(sums, a, b, m, c);
        return;
    }
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
        double *s = partial[t], *s2 = partial[t] + c;
        for (int j = 0; j < c; j++) s[j] = s2[j] = 0;
        for (int64_t i = lo; i < hi; i++) {
            const float *ar = a + i * c;
            const float *br = square ? ar : b + i * c;
#pragma omp simd
            for (int j = 0; j < c; j++) {
                s[j] += ar[j];
                s2[j] += (double)ar[j] * br[j];
            }
        }
    }
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < used; t++) {
            s += partial[t][j];
            s2 += partial[t][c + j];
        }
        sums[j] = s;
        sums[c + j] = s2;
    }
}

void rp_cpu_bn_stats(double *sums, const float *x, int64_t m, int c)
{
    channel_sums2(sums, x, NULL, m, c, true);
}

/* sum(dy) and sum(dy * xhat): the same shape of loop with b = xhat. */
void rp_cpu_bn_stats_bwd(double *sums, const float *dy, const float *xhat, int64_t m, int c)
{
    channel_sums2(sums, dy, xhat, m, c, false);
}

void rp_cpu_bn_norm_fwd(float *restrict y, float *restrict xhat, const float *restrict x,
                        const float *restrict mean, const float *restrict invstd,
                        const float *restrict gamma, const float *restrict beta, int64_t m, int c)
{
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * c;
        float *yr = y + i * c;
        if (xhat) {
            float *hr = xhat + i * c;
#pragma omp simd
            for (int j = 0; j < c; j++) {
                float h = (xr[j] - mean[j]) * invstd[j];
                hr[j] = h;
                yr[j] = gamma[j] * h + beta[j];
            }
        } else {
#pragma omp simd
            for (int j = 0; j < c; j++) yr[j] = gamma[j] * ((xr[j] - mean[j]) * invstd[j]) + beta[j];
        }
    }
}

void rp_cpu_bn_bwd_data(float *restrict dx, const float *restrict dy, const float *restrict xhat,
                        const double *restrict sums, const float *restrict invstd,
                        const float *restrict gamma, double count, int64_t m, int c)
{
    float g[512], mdy[512], mdyx[512];
    if (c > 512) {
        rp_ref_bn_bwd_data(dx, dy, xhat, sums, invstd, gamma, count, m, c);
        return;
    }
    for (int j = 0; j < c; j++) {
        g[j] = gamma[j] * invstd[j];
        mdy[j] = (float)(sums[j] / count);
        mdyx[j] = (float)(sums[c + j] / count);
    }
#pragma omp parallel for if (m * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < m; i++) {
        const float *dyr = dy + i * c, *hr = xhat + i * c;
        float *dxr = dx + i * c;
#pragma omp simd
        for (int j = 0; j < c; j++) dxr[j] = g[j] * (dyr[j] - mdy[j] - hr[j] * mdyx[j]);
    }
}

void rp_cpu_reduce_rows(float *restrict y, const float *restrict x, int64_t rows, int64_t nb,
                        bool accumulate)
{
    if (nb > 512) {
        rp_ref_reduce_rows(y, x, rows, nb, accumulate);
        return;
    }
    double s[512];
    for (int64_t j = 0; j < nb; j++) s[j] = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * nb;
#pragma omp simd
        for (int64_t j = 0; j < nb; j++) s[j] += xr[j];
    }
    for (int64_t j = 0; j < nb; j++) y[j] = (float)((accumulate ? y[j] : 0.0) + s[j]);
}

void rp_cpu_gap_fwd(float *restrict y, const float *restrict x, int n, int hw, int c)
{
    for (int b = 0; b < n; b++) {
        rp_cpu_reduce_rows(y + (int64_t)b * c, x + (int64_t)b * hw * c, hw, c, false);
        for (int k = 0; k < c; k++) y[(int64_t)b * c + k] /= (float)hw;
    }
}

void rp_cpu_gap_bwd(float *restrict dx, const float *restrict dy, int n, int hw, int c)
{
    float inv = 1.0f / (float)hw;
    for (int b = 0; b < n; b++)
        for (int p = 0; p < hw; p++) {
            float *dr = dx + ((int64_t)b * hw + p) * c;
#pragma omp simd
            for (int k = 0; k < c; k++) dr[k] = dy[(int64_t)b * c + k] * inv;
        }
}
