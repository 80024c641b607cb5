/*
 * optim.cu - the CUDA table's optimizer updates, the non-finite scan, the parameter checksum and
 * spectral norm's power iteration.
 *
 * The updates are the reference's float operations per element (no fused multiply-add), so a
 * step on the GPU gives the bits a step on the CPU gives. The checksum is a serial hash by
 * contract (each lane's next value depends on the last), which a GPU can only run on one thread:
 * it downloads the values and hashes them on the host with the reference, which is faster than
 * one GPU thread and the same function by construction. The power iteration is serial in double
 * in the reference and here: each of v's and u's elements is one thread's sum in the
 * reference's order, each normalisation one thread's.
 */
#include <math.h>
#include <stdlib.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/ref/norms.h"
}

void kcuda_sgd_update(float *w, float *mom, const float *g, int64_t n, float lr, float momentum,
                      float wd, bool nesterov, bool first)
{
    if (momentum == 0.0f) {
        if (wd != 0.0f)
            kcuda_each(n, "sgd_update",
                       [=] __device__(int64_t i) { w[i] -= lr * (g[i] + wd * w[i]); });
        else
            kcuda_each(n, "sgd_update", [=] __device__(int64_t i) { w[i] -= lr * g[i]; });
        return;
    }
    kcuda_each(n, "sgd_update", [=] __device__(int64_t i) {
        float d = g[i] + wd * w[i];
        float b = first ? d : momentum * mom[i] + d;
        mom[i] = b;
        if (nesterov)
            w[i] -= lr * (d + momentum * b);
        else
            w[i] -= lr * b;
    });
}

void kcuda_adam_update(float *w, float *m, float *v, const float *g, int64_t n, float b1, float b2,
                       float eps, float l2, float shrink, float step_size, float sqrt_bc2)
{
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    kcuda_each(n, "adam_update", [=] __device__(int64_t i) {
        float wi = w[i] * shrink;
        float gi = g[i] + l2 * wi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step_size * (mi / (sqrtf(vi) / sqrt_bc2 + eps));
    });
}

__global__ static void first_nonfinite_k(unsigned long long *first, const float *x, int64_t n)
{
    unsigned long long best = ~0ull;
    GRID_STRIDE(i, n)
    {
        if ((__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u) {
            best = (unsigned long long)i;
            break; /* this thread's later indices are larger */
        }
    }
    if (best != ~0ull) atomicMin(first, best); /* a minimum: the order of arrival is moot */
}

int64_t kcuda_first_nonfinite(float *value, const float *x, int64_t n)
{
    if (n <= 0) return -1;
    unsigned long long *first = (unsigned long long *)kcuda_scratch(sizeof *first);
    if (!first) return -1;
    cudaStream_t s = kcuda_stream();
    CU(cudaDeviceSynchronize()); /* x may be another thread's (a scan of the parameters) */
    CU(cudaMemsetAsync(first, 0xff, sizeof *first, s));
    first_nonfinite_k<<<kcuda_blocks(n), RP_CUDA_THREADS, 0, s>>>(first, x, n);
    LAUNCHED("first_nonfinite");
    unsigned long long at = ~0ull;
    kcuda_read(&at, first, sizeof at);
    kcuda_scratch_free(first);
    if (at == ~0ull || at >= (unsigned long long)n) return -1;
    if (value) kcuda_read(value, x + at, sizeof *value);
    return (int64_t)at;
}

uint64_t kcuda_checksum(const float *x, int64_t n)
{
    if (n <= 0) return kref_checksum(x, 0);
    float *host = (float *)malloc((size_t)n * sizeof(float));
    if (!host) {
        rp_log(RP_LOG_ERROR, "CUDA checksum: no host memory for %lld values", (long long)n);
        return 0;
    }
    /* (a download: it waits for every stream, as the parameters may be another thread's) */
    kcuda_mem_download(host, x, (size_t)n * sizeof(float));
    uint64_t h = kref_checksum(host, n);
    free(host);
    return h;
}

#define SN_EPS 1e-12

/* x /= (|x| + eps) over n, on one thread; *norm_sq (when not NULL) receives |x|^2. */
__global__ static void sn_normalise_k(double *x, int64_t n, double *sigma)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double norm = sqrt(ss);
    double s = 1.0 / (norm + SN_EPS);
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
    if (sigma) *sigma = ss / (norm + SN_EPS);
}

double kcuda_sn_power(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                      int64_t cols)
{
    cudaStream_t s = kcuda_stream();
    double *sigma = (double *)kcuda_scratch(sizeof(double));
    if (!sigma) return 0.0 / 0.0;
    /* v = W^T u: column j's sum over the rows in order. */
    kcuda_each(cols, "sn_power v", [=] __device__(int64_t j) {
        double acc = 0;
        for (int64_t i = 0; i < rows; i++)
            acc += (double)u[i] * w[i * cols + j];
        v[j] = acc;
    });
    sn_normalise_k<<<1, 1, 0, s>>>(v, cols, NULL);
    LAUNCHED("sn_power normalise v");
    kcuda_each(rows, "sn_power u", [=] __device__(int64_t i) {
        double acc = 0;
        for (int64_t j = 0; j < cols; j++)
            acc += w[i * cols + j] * v[j];
        u_new[i] = acc;
    });
    sn_normalise_k<<<1, 1, 0, s>>>(u_new, rows, sigma);
    LAUNCHED("sn_power normalise u");
    double r = 0.0 / 0.0;
    kcuda_read(&r, sigma, sizeof r);
    kcuda_scratch_free(sigma);
    return r;
}

void kcuda_sn_fwd(float *y, float *u, const double *u_new, const float *w, double sigma,
                  int64_t rows, int64_t cols)
{
    kcuda_each(rows * cols, "sn_fwd",
               [=] __device__(int64_t k) { y[k] = (float)((double)w[k] / sigma); });
    if (u) kcuda_each(rows, "sn_fwd u", [=] __device__(int64_t i) { u[i] = (float)u_new[i]; });
}

void kcuda_sn_bwd(float *dw, const double *u_new, const double *v, const float *dy, const float *w,
                  double sigma, int64_t rows, int64_t cols)
{
    double *gw = (double *)kcuda_scratch(sizeof(double));
    if (!gw) return;
    kcuda_sum_to(gw, rows * cols, [=] __device__(int64_t k) { return (double)dy[k] * w[k]; });
    kcuda_each(rows * cols, "sn_bwd", [=] __device__(int64_t k) {
        int64_t i = k / cols, j = k % cols;
        double inv = 1.0 / sigma, c = *gw / (sigma * sigma);
        dw[k] += (float)(dy[k] * inv - c * u_new[i] * v[j]);
    });
    kcuda_scratch_free(gw);
}
