/*
 * bn_bf16.c - batch norm over bf16 activations through the f32 kernels, a chunk of rows at a
 * time (bn_bf16.h). Chunks are about CHUNK values; the chunk loop is split over the calling
 * thread's team, each thread with its own buffers on its stack (no thread-local storage), and
 * the f32 kernel runs on that thread alone (a nested region). Sums are kept per thread in double
 * and added in thread order, so a result depends on the team size, as the f32 kernels' do, and
 * on nothing else.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/bn_bf16.h"

enum { CHUNK = 8192, MAX_TEAM = 64, MAX_SUMS = 2 * 4096 };

static void widen(float *y, const rp_bf16 *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = core_bf16_widen(x[i]);
}

static void narrow(rp_bf16 *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = core_bf16_round(x[i]);
}

/* Rows per chunk: whole rows, at least one. */
static int64_t chunk_rows(int c)
{
    return c >= CHUNK ? 1 : CHUNK / c;
}

/* A chunk's buffer: the stack's when a chunk fits, else the heap's (channels above CHUNK). */
static float *buffers(float *stack, int c, int count)
{
    if (c <= CHUNK) return stack;
    return malloc((size_t)count * (size_t)c * sizeof(float));
}

/* Sums over rows (forward: x; backward: the masked dy and dy*xhat), chunk by chunk. */
static void sums_by_chunks(const kernels_table *k, double *sums, const float *dy, const rp_bf16 *y,
                           const rp_bf16 *x, const float *mean, const float *invstd, int64_t m,
                           int c, float *g_out, bool backward)
{
    int64_t rows = chunk_rows(c), nchunks = (m + rows - 1) / rows;
    if (2 * c > MAX_SUMS) {
        /* Very wide rows: one thread, one row at a time. */
        memset(sums, 0, 2 * (size_t)c * sizeof *sums);
        float *xb = malloc(2 * (size_t)c * sizeof *xb), *yb = xb + c;
        double *part = malloc(2 * (size_t)c * sizeof *part);
        for (int64_t r = 0; r < m; r++) {
            widen(xb, x + r * c, c);
            if (backward) {
                if (y) widen(yb, y + r * c, c);
                k->bn_stats_bwd(part, dy + r * c, y ? yb : NULL, xb, mean, invstd, 1, c,
                                g_out ? g_out + r * c : NULL);
            } else {
                k->bn_stats(part, xb, 1, c);
            }
            for (int j = 0; j < 2 * c; j++)
                sums[j] += part[j];
        }
        free(part);
        free(xb);
        return;
    }
    int team = omp_get_max_threads();
    if (team > MAX_TEAM) team = MAX_TEAM;
    if (m * c < 4 * CHUNK) team = 1;
    memset(sums, 0, 2 * (size_t)c * sizeof *sums);
#pragma omp parallel num_threads(team)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        /* Each thread's sums on its own stack, added into `sums` in thread order below. */
        double acc[MAX_SUMS], local[MAX_SUMS];
        float xb[CHUNK], yb[CHUNK];
        memset(acc, 0, 2 * (size_t)c * sizeof *acc);
        int64_t lo = nchunks * t / nt, hi = nchunks * (t + 1) / nt;
        for (int64_t q = lo; q < hi; q++) {
            int64_t r0 = q * rows, n = r0 + rows < m ? rows : m - r0;
            widen(xb, x + r0 * c, n * c);
            if (backward) {
                if (y) widen(yb, y + r0 * c, n * c);
                k->bn_stats_bwd(local, dy + r0 * c, y ? yb : NULL, xb, mean, invstd, n, c,
                                g_out ? g_out + r0 * c : NULL);
            } else {
                k->bn_stats(local, xb, n, c);
            }
            for (int j = 0; j < 2 * c; j++)
                acc[j] += local[j];
        }
#pragma omp for ordered schedule(static, 1)
        for (int i = 0; i < nt; i++) {
#pragma omp ordered
            for (int j = 0; j < 2 * c; j++)
                sums[j] += acc[j];
        }
    }
}

void kernels_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m, int c)
{
    sums_by_chunks(k, sums, NULL, NULL, x, NULL, NULL, m, c, NULL, false);
}

void kernels_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy,
                               const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                               const float *invstd, int64_t m, int c, float *g_out)
{
    sums_by_chunks(k, sums, dy, y, x, mean, invstd, m, c, g_out, true);
}

void kernels_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x,
                              const float *mean, const float *invstd, const float *gamma,
                              const float *beta, const rp_bf16 *residual, bool relu, int64_t m,
                              int c)
{
    int64_t rows = chunk_rows(c), nchunks = (m + rows - 1) / rows;
    int team = m * c < 4 * CHUNK ? 1 : omp_get_max_threads();
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t q = 0; q < nchunks; q++) {
        float sx[CHUNK], sy[CHUNK], sr[CHUNK];
        float *xb = buffers(sx, c, 1), *yb = buffers(sy, c, 1), *rb = buffers(sr, c, 1);
        int64_t r0 = q * rows, n = r0 + rows < m ? rows : m - r0;
        widen(xb, x + r0 * c, n * c);
        if (residual) widen(rb, residual + r0 * c, n * c);
        k->bn_norm_fwd(yb, xb, mean, invstd, gamma, beta, residual ? rb : NULL, relu, n, c);
        narrow(y + r0 * c, yb, n * c);
        if (xb != sx) free(xb), free(yb), free(rb);
    }
}

void kernels_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                              const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                              const float *invstd, const double *sums, const float *gamma,
                              double count, int64_t m, int c)
{
    int64_t rows = chunk_rows(c), nchunks = (m + rows - 1) / rows;
    int team = m * c < 4 * CHUNK ? 1 : omp_get_max_threads();
    bool half = dx_type == RP_BF16;
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t q = 0; q < nchunks; q++) {
        float sx[CHUNK], sy[CHUNK], sd[CHUNK];
        float *xb = buffers(sx, c, 1), *yb = buffers(sy, c, 1),
              *db = half ? buffers(sd, c, 1) : NULL;
        int64_t r0 = q * rows, n = r0 + rows < m ? rows : m - r0;
        widen(xb, x + r0 * c, n * c);
        if (y) widen(yb, y + r0 * c, n * c);
        /* A bf16 dx: the f32 rows into the chunk's buffer, then rounded into place. */
        float *out = half ? db : (float *)dx + r0 * c;
        k->bn_bwd_data(out, dy + r0 * c, y ? yb : NULL, xb, mean, invstd, sums, gamma, count, n, c);
        if (half) narrow((rp_bf16 *)dx + r0 * c, db, n * c);
        if (xb != sx) free(xb), free(yb), free(db);
    }
}
