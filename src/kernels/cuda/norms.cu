/*
 * norms.cu - the CUDA table's batch norm (activations in f32 or bf16), its per-channel
 * statistics, layer norm, log-softmax and softmax cross-entropy.
 *
 * Batch norm's sums are column sums of an [m, c] view (common.cuh: fixed order, double); the
 * bf16 slots are the same templates with bf16 loads and stores (the cpu and ref tables widen
 * chunks of rows on the host instead; the arithmetic is the same). Per-row kernels (layer norm,
 * softmax) give each row one block.
 */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define ROW_THREADS 128

/* ---- batch norm ---- */

template <typename T> static void bn_stats_t(double *sums, const T *x, int64_t m, int c)
{
    kcuda_col_sums<2>(
        m, c,
        [=] __device__(int64_t i, int j, double *acc) {
            double v = kcuda_dev_load(x, i * c + j);
            acc[0] += v;
            acc[1] += v * v;
        },
        [=] __device__(int j, const double *s) {
            sums[j] = s[0];
            sums[c + j] = s[1];
        });
}

template <typename TX, typename TY>
static void bn_norm_fwd_t(TY *y, const TX *x, const float *mean, const float *invstd,
                          const float *gamma, const float *beta, const TX *residual, bool relu,
                          int64_t m, int c)
{
    kcuda_each(m * c, "bn_norm_fwd", [=] __device__(int64_t k) {
        int j = (int)(k % c);
        float v = gamma[j] * ((kcuda_dev_load(x, k) - mean[j]) * invstd[j]) + beta[j];
        if (residual) v += kcuda_dev_load(residual, k);
        kcuda_dev_store(y, k, relu && !(v > 0) ? 0.0f : v);
    });
}

template <typename T>
static void bn_stats_bwd_t(double *sums, const float *dy, const T *y, const T *x, const float *mean,
                           const float *invstd, int64_t m, int c, float *g_out)
{
    kcuda_col_sums<2>(
        m, c,
        [=] __device__(int64_t i, int j, double *acc) {
            int64_t k = i * c + j;
            double g = y && !(kcuda_dev_load(y, k) > 0) ? 0.0 : (double)dy[k];
            if (g_out) g_out[k] = (float)g;
            acc[0] += g;
            acc[1] += g * (((double)kcuda_dev_load(x, k) - mean[j]) * invstd[j]);
        },
        [=] __device__(int j, const double *s) {
            sums[j] = s[0];
            sums[c + j] = s[1];
        });
}

template <typename T, typename D>
static void bn_bwd_data_t(D *dx, const float *dy, const T *y, const T *x, const float *mean,
                          const float *invstd, const double *sums, const float *gamma, double count,
                          int64_t m, int c)
{
    kcuda_each(m * c, "bn_bwd_data", [=] __device__(int64_t k) {
        int j = (int)(k % c);
        double h = ((double)kcuda_dev_load(x, k) - mean[j]) * invstd[j];
        double g = y && !(kcuda_dev_load(y, k) > 0) ? 0.0 : (double)dy[k];
        double v = g - sums[j] / count - h * sums[c + j] / count;
        kcuda_dev_store(dx, k, (float)((double)gamma[j] * invstd[j] * v));
    });
}

void kcuda_bn_stats(double *sums, const float *x, int64_t m, int c)
{
    bn_stats_t(sums, x, m, c);
}
void kcuda_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                       const float *gamma, const float *beta, const float *residual, bool relu,
                       int64_t m, int c)
{
    bn_norm_fwd_t(y, x, mean, invstd, gamma, beta, residual, relu, m, c);
}
void kcuda_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                        const float *mean, const float *invstd, int64_t m, int c, float *g_out)
{
    bn_stats_bwd_t(sums, dy, y, x, mean, invstd, m, c, g_out);
}
void kcuda_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, const double *sums,
                       const float *gamma, double count, int64_t m, int c)
{
    bn_bwd_data_t(dx, dy, y, x, mean, invstd, sums, gamma, count, m, c);
}
void kcuda_bn_stats_bf16(const kernels_table *k, double *sums, const rp_bf16 *x, int64_t m, int c)
{
    bn_stats_t(sums, x, m, c);
}
void kcuda_bn_norm_fwd_bf16(const kernels_table *k, rp_bf16 *y, const rp_bf16 *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta,
                            const rp_bf16 *residual, bool relu, int64_t m, int c)
{
    bn_norm_fwd_t(y, x, mean, invstd, gamma, beta, residual, relu, m, c);
}
void kcuda_bn_stats_bwd_bf16(const kernels_table *k, double *sums, const float *dy,
                             const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                             const float *invstd, int64_t m, int c, float *g_out)
{
    bn_stats_bwd_t(sums, dy, y, x, mean, invstd, m, c, g_out);
}
void kcuda_bn_bwd_data_bf16(const kernels_table *k, void *dx, rp_dtype dx_type, const float *dy,
                            const rp_bf16 *y, const rp_bf16 *x, const float *mean,
                            const float *invstd, const double *sums, const float *gamma,
                            double count, int64_t m, int c)
{
    if (dx_type == RP_BF16)
        bn_bwd_data_t((uint16_t *)dx, dy, y, x, mean, invstd, sums, gamma, count, m, c);
    else
        bn_bwd_data_t((float *)dx, dy, y, x, mean, invstd, sums, gamma, count, m, c);
}

/* The per-channel statistics: one thread per channel, the reference's operations and types. */
void kcuda_bn_train_stats(float *mean, float *invstd, float *mean_rest, float *running_mean,
                          float *running_var, const double *sums, double count, float eps,
                          float momentum, int c)
{
    kcuda_each(c, "bn_train_stats", [=] __device__(int64_t i) {
        double mu = sums[i] / count;
        double var = sums[c + i] / count - mu * mu;
        if (var < 0) var = 0;
        mean[i] = (float)mu;
        mean_rest[i] = (float)(mu - mean[i]);
        invstd[i] = (float)(1.0 / sqrt(var + eps));
        if (running_mean)
            running_mean[i] = (float)((1 - momentum) * running_mean[i] + momentum * mu);
        if (running_var)
            running_var[i] =
                (float)((1 - momentum) * running_var[i] + momentum * var * count / (count - 1));
    });
}

void kcuda_bn_eval_stats(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                         const float *running_var, float eps, int c)
{
    kcuda_each(c, "bn_eval_stats", [=] __device__(int64_t i) {
        mean[i] = running_mean[i];
        mean_rest[i] = 0;
        invstd[i] = (float)(1.0 / sqrt((double)running_var[i] + eps));
    });
}

void kcuda_bn_bwd_sums(float *local, double *sums, const float *mean_rest, const float *invstd,
                       int c)
{
    kcuda_each(c, "bn_bwd_sums", [=] __device__(int64_t j) {
        sums[c + j] -= (double)mean_rest[j] * invstd[j] * sums[j];
        local[j] = (float)sums[j];
        local[c + j] = (float)sums[c + j];
    });
}

/* ---- per-row kernels ---- */

__device__ static float block_max(float v)
{
    __shared__ float part[ROW_THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && part[threadIdx.x + s] > part[threadIdx.x])
            part[threadIdx.x] = part[threadIdx.x + s];
        __syncthreads();
    }
    float r = part[0];
    __syncthreads();
    return r;
}

/* The row's maximum as the reference finds it (the first element, then strictly greater ones:
   a NaN first element stays), and log(sum(exp(z - max))) + max in double. */
__device__ static double row_lse(const float *z, int c, float *mx_out)
{
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        mx = z[j] > mx ? z[j] : mx;
    mx = block_max(mx);
    if (z[0] != z[0]) mx = z[0];
    double s = 0;
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        s += exp((double)z[j] - mx);
    s = kcuda_dev_block_sum(s);
    *mx_out = mx;
    return mx + log(s);
}

__global__ static void log_softmax_fwd_k(float *y, const float *x, int c)
{
    const float *z = x + (int64_t)blockIdx.x * c;
    float mx;
    double lse = row_lse(z, c, &mx);
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        y[(int64_t)blockIdx.x * c + j] = (float)((double)z[j] - lse);
}

void kcuda_log_softmax_fwd(float *y, const float *x, int64_t rows, int c)
{
    if (rows <= 0) return;
    log_softmax_fwd_k<<<(unsigned)rows, ROW_THREADS, 0, kcuda_stream()>>>(y, x, c);
    LAUNCHED("log_softmax_fwd");
}

__global__ static void log_softmax_bwd_k(float *dx, const float *dy, const float *y, int c)
{
    int64_t base = (int64_t)blockIdx.x * c;
    double s = 0;
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        s += dy[base + j];
    s = kcuda_dev_block_sum(s);
    for (int j = threadIdx.x; j < c; j += blockDim.x)
        dx[base + j] = (float)((double)dy[base + j] - exp((double)y[base + j]) * s);
}

void kcuda_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c)
{
    if (rows <= 0) return;
    log_softmax_bwd_k<<<(unsigned)rows, ROW_THREADS, 0, kcuda_stream()>>>(dx, dy, y, c);
    LAUNCHED("log_softmax_bwd");
}

__global__ static void xent_fwd_k(double *loss, float *probs, const float *logits,
                                  const int32_t *labels, const float *target, int c)
{
    int64_t base = (int64_t)blockIdx.x * c;
    const float *z = logits + base;
    float mx;
    double lse = row_lse(z, c, &mx);
    double t = 0;
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
        probs[base + j] = (float)exp((double)z[j] - lse);
        if (!labels) t += target[base + j] * (lse - z[j]);
    }
    t = kcuda_dev_block_sum(t);
    if (threadIdx.x == 0) loss[blockIdx.x] = labels ? lse - z[labels[blockIdx.x]] : t;
}

double kcuda_softmax_xent_fwd(float *probs, const float *logits, const int32_t *labels,
                              const float *target, int n, int c)
{
    if (n <= 0) return 0.0 / 0.0;
    double *loss = (double *)kcuda_scratch((size_t)n * sizeof(double));
    if (!loss) return 0.0 / 0.0;
    xent_fwd_k<<<(unsigned)n, ROW_THREADS, 0, kcuda_stream()>>>(loss, probs, logits, labels, target,
                                                                c);
    LAUNCHED("softmax_xent_fwd");
    double total = kcuda_sum_of(n, [=] __device__(int64_t i) { return loss[i]; });
    kcuda_scratch_free(loss);
    return total / n;
}

__global__ static void xent_bwd_k(float *dlogits, const float *probs, const int32_t *labels,
                                  const float *target, float scale, int c)
{
    int64_t base = (int64_t)blockIdx.x * c;
    double tsum = 0;
    if (!labels)
        for (int j = threadIdx.x; j < c; j += blockDim.x)
            tsum += target[base + j];
    tsum = kcuda_dev_block_sum(tsum);
    for (int j = threadIdx.x; j < c; j += blockDim.x) {
        int64_t k = base + j;
        double t = labels ? (labels[blockIdx.x] == j ? 1.0 : 0.0) : target[k];
        double ts = labels ? 1.0 : tsum;
        dlogits[k] = (float)(scale * (probs[k] * ts - t));
    }
}

void kcuda_softmax_xent_bwd(float *dlogits, const float *probs, const int32_t *labels,
                            const float *target, float scale, int n, int c)
{
    if (n <= 0) return;
    xent_bwd_k<<<(unsigned)n, ROW_THREADS, 0, kcuda_stream()>>>(dlogits, probs, labels, target,
                                                                scale, c);
    LAUNCHED("softmax_xent_bwd");
}

/* ---- layer norm ---- */

__global__ static void layernorm_fwd_k(float *y, float *mean, float *rstd, const float *x,
                                       const float *gamma, const float *beta, int d, float eps)
{
    int64_t i = blockIdx.x;
    const float *xr = x + i * d;
    double s = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
        s += xr[j];
    s = kcuda_dev_block_sum(s);
    double mu = s / d, s2 = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x)
        s2 += (xr[j] - mu) * (xr[j] - mu);
    s2 = kcuda_dev_block_sum(s2);
    double r = 1.0 / sqrt(s2 / d + eps);
    float mf = (float)mu, rf = (float)r;
    if (threadIdx.x == 0) {
        mean[i] = mf;
        rstd[i] = rf;
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        double h = ((double)xr[j] - mf) * rf;
        y[i * d + j] = (float)(h * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f));
    }
}

void kcuda_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                         const float *beta, int64_t rows, int d, float eps)
{
    if (rows <= 0) return;
    layernorm_fwd_k<<<(unsigned)rows, ROW_THREADS, 0, kcuda_stream()>>>(y, mean, rstd, x, gamma,
                                                                        beta, d, eps);
    LAUNCHED("layernorm_fwd");
}

__global__ static void layernorm_bwd_k(float *dx, const float *dy, const float *x,
                                       const float *mean, const float *rstd, const float *gamma,
                                       int d)
{
    int64_t i = blockIdx.x;
    const float *xr = x + i * d, *dr = dy + i * d;
    double sg = 0, sgh = 0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        double h = ((double)xr[j] - mean[i]) * rstd[i];
        double g = (double)dr[j] * (gamma ? gamma[j] : 1.0f);
        sg += g;
        sgh += g * h;
    }
    sg = kcuda_dev_block_sum(sg);
    sgh = kcuda_dev_block_sum(sgh);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        double h = ((double)xr[j] - mean[i]) * rstd[i];
        double g = (double)dr[j] * (gamma ? gamma[j] : 1.0f);
        dx[i * d + j] = (float)(rstd[i] * (g - sg / d - h * sgh / d));
    }
}

void kcuda_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                         const float *mean, const float *rstd, const float *gamma, int64_t rows,
                         int d)
{
    if (rows <= 0) return;
    layernorm_bwd_k<<<(unsigned)rows, ROW_THREADS, 0, kcuda_stream()>>>(dx, dy, x, mean, rstd,
                                                                        gamma, d);
    LAUNCHED("layernorm_bwd");
    if (!dgamma && !dbeta) return;
    kcuda_col_sums<2>(
        rows, d,
        [=] __device__(int64_t i, int j, double *acc) {
            double h = ((double)x[i * d + j] - mean[i]) * rstd[i];
            acc[0] += dy[i * d + j] * h;
            acc[1] += dy[i * d + j];
        },
        [=] __device__(int j, const double *s) {
            if (dgamma) dgamma[j] = (float)((double)dgamma[j] + s[0]);
            if (dbeta) dbeta[j] = (float)((double)dbeta[j] + s[1]);
        });
}
