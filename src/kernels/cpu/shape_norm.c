/*
 * shape_norm.c - fast CPU versions of the per-axis broadcast, the axis
 * reductions, clamp, layer norm, log-softmax and the sum of squares. The
 * loops keep the contiguous axis innermost so GCC vectorises them, and
 * split rows over the calling thread's OpenMP team. Reductions that cross
 * rows combine per-thread partials in thread order: deterministic for a
 * given thread count. Shapes the fast paths do not cover go to the
 * reference kernel.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/elementwise.h"

#define PAR_MIN  32768
#define MAX_TEAM 16

void kcpu_binary_bcast(float *y, const float *a, const float *restrict b, const int64_t *shape,
                       const int64_t *bstride, kernels_binop op)
{
    /* The innermost axis runs contiguous in a and y, with b's stride 0 or 1 along it. */
    int64_t n3 = shape[3], s3 = bstride[3];
    int64_t outer = shape[0] * shape[1] * shape[2];
#pragma omp parallel for if (outer * n3 >= PAR_MIN) schedule(static)
    for (int64_t o = 0; o < outer; o++) {
        int64_t i2 = o % shape[2], i1 = (o / shape[2]) % shape[1], i0 = o / (shape[2] * shape[1]);
        const float *br = b + i0 * bstride[0] + i1 * bstride[1] + i2 * bstride[2];
        const float *ar = a + o * n3;
        float *yr = y + o * n3;
        if (s3 == 0) {
            float bv = br[0];
            switch (op) {
            case RP_BIN_ADD:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] + bv;
                break;
            case RP_BIN_SUB:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] - bv;
                break;
            case RP_BIN_MUL:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] * bv;
                break;
            case RP_BIN_DIV:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] / bv;
                break;
            }
        } else {
            switch (op) {
            case RP_BIN_ADD:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] + br[j];
                break;
            case RP_BIN_SUB:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] - br[j];
                break;
            case RP_BIN_MUL:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] * br[j];
                break;
            case RP_BIN_DIV:
#pragma omp simd
                for (int64_t j = 0; j < n3; j++)
                    yr[j] = ar[j] / br[j];
                break;
            }
        }
    }
}

/*
 * Collapses the 4-D shape into runs of axes that are all kept or all
 * reduced. Returns the number of runs; len[k] their sizes, first_reduced
 * whether run 0 is reduced.
 */
static int collapse(const int64_t *shape, unsigned mask, int64_t *len, bool *first_reduced)
{
    int runs = 0;
    bool prev = false;
    for (int d = 0; d < 4; d++) {
        if (shape[d] == 1) continue; /* a size-1 axis joins any run */
        bool red = (mask >> d) & 1u;
        if (runs == 0 || red != prev) {
            if (runs == 0) *first_reduced = red;
            len[runs++] = shape[d];
            prev = red;
        } else {
            len[runs - 1] *= shape[d];
        }
    }
    return runs;
}

void kcpu_reduce_axes(float *restrict y, const float *restrict x, const int64_t *shape,
                      unsigned mask, float scale, bool accumulate)
{
    int64_t len[4];
    bool first_red = false;
    int runs = collapse(shape, mask, len, &first_red);
    if (runs == 2 && !first_red) {
        /* [kept rows, reduced run]: one double sum per row. */
        int64_t rows = len[0], w = len[1];
#pragma omp parallel for if (rows * w >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < rows; i++) {
            const float *xr = x + i * w;
            double s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < w; j++)
                s += xr[j];
            y[i] = (float)((accumulate ? (double)y[i] : 0.0) + (double)scale * s);
        }
        return;
    }
    if (runs == 2 && first_red && len[1] <= 4096) {
        /* [reduced rows, kept run]: column sums, vectorised across the run. */
        int64_t rows = len[0], w = len[1];
        double s[4096];
        for (int64_t j = 0; j < w; j++)
            s[j] = 0;
        for (int64_t i = 0; i < rows; i++) {
            const float *xr = x + i * w;
#pragma omp simd
            for (int64_t j = 0; j < w; j++)
                s[j] += xr[j];
        }
        for (int64_t j = 0; j < w; j++)
            y[j] = (float)((accumulate ? (double)y[j] : 0.0) + (double)scale * s[j]);
        return;
    }
    if (runs == 3 && !first_red && len[2] <= 4096) {
        /* [kept, reduced, kept]: e.g. a per-sample [N,1,1,C] gradient from [N,H,W,C]. */
        int64_t outer = len[0], mid = len[1], w = len[2];
#pragma omp parallel for if (outer * mid * w >= PAR_MIN) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            double s[4096];
            for (int64_t j = 0; j < w; j++)
                s[j] = 0;
            for (int64_t r = 0; r < mid; r++) {
                const float *xr = x + (o * mid + r) * w;
#pragma omp simd
                for (int64_t j = 0; j < w; j++)
                    s[j] += xr[j];
            }
            float *yr = y + o * w;
            for (int64_t j = 0; j < w; j++)
                yr[j] = (float)((accumulate ? (double)yr[j] : 0.0) + (double)scale * s[j]);
        }
        return;
    }
    kref_reduce_axes(y, x, shape, mask, scale, accumulate);
}

void kcpu_expand_axes(float *restrict x, const float *restrict y, const int64_t *shape,
                      unsigned mask, float scale, bool accumulate)
{
    int64_t len[4];
    bool first_red = false;
    int runs = collapse(shape, mask, len, &first_red);
    if (runs == 2) {
        int64_t rows = len[0], w = len[1];
#pragma omp parallel for if (rows * w >= PAR_MIN) schedule(static)
        for (int64_t i = 0; i < rows; i++) {
            float *xr = x + i * w;
            if (!first_red) {
                float v = scale * y[i];
                if (accumulate) {
#pragma omp simd
                    for (int64_t j = 0; j < w; j++)
                        xr[j] += v;
                } else {
#pragma omp simd
                    for (int64_t j = 0; j < w; j++)
                        xr[j] = v;
                }
            } else if (accumulate) {
#pragma omp simd
                for (int64_t j = 0; j < w; j++)
                    xr[j] += scale * y[j];
            } else {
#pragma omp simd
                for (int64_t j = 0; j < w; j++)
                    xr[j] = scale * y[j];
            }
        }
        return;
    }
    if (runs == 3 && !first_red) {
        int64_t outer = len[0], mid = len[1], w = len[2];
#pragma omp parallel for if (outer * mid * w >= PAR_MIN) schedule(static)
        for (int64_t o = 0; o < outer; o++)
            for (int64_t r = 0; r < mid; r++) {
                float *xr = x + (o * mid + r) * w;
                const float *yr = y + o * w;
                if (accumulate) {
#pragma omp simd
                    for (int64_t j = 0; j < w; j++)
                        xr[j] += scale * yr[j];
                } else {
#pragma omp simd
                    for (int64_t j = 0; j < w; j++)
                        xr[j] = scale * yr[j];
                }
            }
        return;
    }
    kref_expand_axes(x, y, shape, mask, scale, accumulate);
}

void kcpu_clamp_fwd(float *restrict y, const float *restrict x, int64_t n, float lo, float hi)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

void kcpu_clamp_bwd(float *restrict dx, const float *restrict dy, const float *restrict x,
                    int64_t n, float lo, float hi)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float d = dy[i], v = x[i];
        dx[i] = v >= lo && v <= hi ? d : 0.0f;
    }
}

void kcpu_layernorm_fwd(float *restrict y, float *restrict mean, float *restrict rstd,
                        const float *restrict x, const float *restrict gamma,
                        const float *restrict beta, int64_t rows, int d, float eps)
{
#pragma omp parallel for if (rows * d >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double s = 0, s2 = 0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < d; j++)
            s += xr[j];
        double mu = s / d;
        /* Two passes: the centred sum of squares does not cancel like E[x^2]-E[x]^2. */
#pragma omp simd reduction(+ : s2)
        for (int j = 0; j < d; j++)
            s2 += (xr[j] - mu) * (xr[j] - mu);
        float m = (float)mu, r = (float)(1.0 / sqrt(s2 / d + eps));
        mean[i] = m;
        rstd[i] = r;
        if (gamma && beta) {
#pragma omp simd
            for (int j = 0; j < d; j++)
                yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
        } else {
#pragma omp simd
            for (int j = 0; j < d; j++)
                yr[j] = (xr[j] - m) * r * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
        }
    }
}

void kcpu_layernorm_bwd(float *restrict dx, float *restrict dgamma, float *restrict dbeta,
                        const float *restrict dy, const float *restrict x,
                        const float *restrict mean, const float *restrict rstd,
                        const float *restrict gamma, int64_t rows, int d)
{
    /* dgamma and dbeta sum over rows: in double, rows in order, vectorised across d. */
    if ((dgamma || dbeta) && d > 4096) {
        kref_layernorm_bwd(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, rows, d);
        return;
    }
    if (dgamma || dbeta) {
        double sgam[4096], sbet[4096];
        for (int j = 0; j < d; j++)
            sgam[j] = sbet[j] = 0;
        for (int64_t i = 0; i < rows; i++) {
            const float *xr = x + i * d, *dr = dy + i * d;
            float m = mean[i], r = rstd[i];
#pragma omp simd
            for (int j = 0; j < d; j++) {
                sgam[j] += (double)(dr[j] * ((xr[j] - m) * r));
                sbet[j] += dr[j];
            }
        }
        for (int j = 0; j < d; j++) {
            if (dgamma) dgamma[j] = (float)((double)dgamma[j] + sgam[j]);
            if (dbeta) dbeta[j] = (float)((double)dbeta[j] + sbet[j]);
        }
    }
#pragma omp parallel for if (rows * d >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * d, *dr = dy + i * d;
        float *out = dx + i * d;
        float m = mean[i], r = rstd[i];
        double sg = 0, sgh = 0;
#pragma omp simd reduction(+ : sg, sgh)
        for (int j = 0; j < d; j++) {
            float g = dr[j] * (gamma ? gamma[j] : 1.0f);
            sg += g;
            sgh += g * ((xr[j] - m) * r);
        }
        float a = (float)(sg / d), b = (float)(sgh / d);
#pragma omp simd
        for (int j = 0; j < d; j++) {
            float g = dr[j] * (gamma ? gamma[j] : 1.0f);
            out[j] = r * (g - a - (xr[j] - m) * r * b);
        }
    }
}

void kcpu_log_softmax_fwd(float *restrict y, const float *restrict x, int64_t rows, int c)
{
#pragma omp parallel for if (rows * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const float *z = x + i * c;
        float mx = z[0];
        for (int j = 1; j < c; j++)
            mx = z[j] > mx ? z[j] : mx;
        double s = 0;
        for (int j = 0; j < c; j++)
            s += exp((double)z[j] - mx);
        float lse = (float)(mx + log(s));
#pragma omp simd
        for (int j = 0; j < c; j++)
            y[i * c + j] = z[j] - lse;
    }
}

void kcpu_log_softmax_bwd(float *restrict dx, const float *restrict dy, const float *restrict y,
                          int64_t rows, int c)
{
#pragma omp parallel for if (rows * c >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const float *dr = dy + i * c, *yr = y + i * c;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < c; j++)
            s += dr[j];
        float sf = (float)s;
        for (int j = 0; j < c; j++)
            dx[i * c + j] = dr[j] - expf(yr[j]) * sf;
    }
}

double kcpu_sum_squares(const float *restrict x, int64_t n)
{
    int team = omp_get_max_threads();
    if (team > MAX_TEAM) team = MAX_TEAM;
    if (n < PAR_MIN) team = 1;
    double part[MAX_TEAM] = {0};
    int used = 1;
    /* Static blocks per thread, combined in thread order: the same bits run to run. */
#pragma omp parallel num_threads(team)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        if (t == 0) used = nt;
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[t] = s;
    }
    double s = 0;
    for (int t = 0; t < used; t++)
        s += part[t];
    return s;
}

void kcpu_scale_inplace(float *restrict y, float s, int64_t n)
{
#pragma omp parallel for simd if (n >= PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] *= s;
}
