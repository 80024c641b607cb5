/*
 * elementwise.c - reference kernels: the plainest correct loops, in double
 * where a sum is involved. The fast table is tested against these.
 */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/ref/elementwise.h"

void kref_bn_stats(double *sums, const float *x, int64_t m, int c)
{
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; i++) {
            double v = x[i * c + j];
            s += v;
            s2 += v * v;
        }
        sums[j] = s;
        sums[c + j] = s2;
    }
}

void kref_bn_norm_fwd(float *y, const float *x, const float *mean, const float *invstd,
                      const float *gamma, const float *beta, const float *residual, bool relu,
                      int64_t m, int c)
{
    for (int64_t i = 0; i < m; i++) {
        for (int j = 0; j < c; j++) {
            float v = gamma[j] * ((x[i * c + j] - mean[j]) * invstd[j]) + beta[j];
            if (residual) v += residual[i * c + j];
            y[i * c + j] = relu && !(v > 0) ? 0.0f : v;
        }
    }
}

/* The gradient reaching the normalisation: dy, masked by a fused ReLU's output. */
static double bn_grad(const float *dy, const float *y, int64_t k)
{
    return y && !(y[k] > 0) ? 0.0 : (double)dy[k];
}

void kref_bn_stats_bwd(double *sums, const float *dy, const float *y, const float *x,
                       const float *mean, const float *invstd, int64_t m, int c, float *g_out)
{
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; i++) {
            double g = bn_grad(dy, y, i * c + j);
            if (g_out) g_out[i * c + j] = (float)g;
            s += g;
            s2 += g * (((double)x[i * c + j] - mean[j]) * invstd[j]);
        }
        sums[j] = s;
        sums[c + j] = s2;
    }
}

void kref_bn_bwd_data(float *dx, const float *dy, const float *y, const float *x, const float *mean,
                      const float *invstd, const double *sums, const float *gamma, double count,
                      int64_t m, int c)
{
    for (int64_t i = 0; i < m; i++) {
        for (int j = 0; j < c; j++) {
            double h = ((double)x[i * c + j] - mean[j]) * invstd[j];
            double v = bn_grad(dy, y, i * c + j) - sums[j] / count - h * sums[c + j] / count;
            dx[i * c + j] = (float)((double)gamma[j] * invstd[j] * v);
        }
    }
}

static float act(float x, kernels_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
        return x > 0 ? x : 0;
    case RP_ACT_LEAKY_RELU:
        return x > 0 ? x : slope * x;
    case RP_ACT_TANH:
        return tanhf(x);
    case RP_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case RP_ACT_ELU:
        return x > 0 ? x : slope * expm1f(x);
    case RP_ACT_SQRT:
        return sqrtf(x);
    case RP_ACT_RECIPROCAL:
        return 1.0f / x;
    }
    return x;
}

void kref_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = core_bf16_round(x[i] > 0 ? x[i] : 0.0f);
}

void kref_act_fwd(float *y, const float *x, int64_t n, kernels_act a, float slope)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = act(x[i], a, slope);
}

void kref_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                  kernels_act a, float slope)
{
    for (int64_t i = 0; i < n; i++) {
        float d = 0;
        switch (a) {
        case RP_ACT_RELU:
            d = x[i] > 0 ? 1.0f : 0.0f;
            break;
        case RP_ACT_LEAKY_RELU:
            d = x[i] > 0 ? 1.0f : slope;
            break;
        case RP_ACT_TANH:
            d = 1.0f - y[i] * y[i];
            break;
        case RP_ACT_SIGMOID:
            d = y[i] * (1.0f - y[i]);
            break;
        case RP_ACT_ELU:
            d = x[i] > 0 ? 1.0f : y[i] + slope;
            break;
        case RP_ACT_SQRT:
            d = 0.5f / y[i];
            break;
        case RP_ACT_RECIPROCAL:
            d = -y[i] * y[i];
            break;
        }
        dx[i] = dy[i] * d;
    }
}

void kref_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb, kernels_binop op)
{
    for (int64_t i = 0; i < n; i++) {
        float bv = b[i % nb];
        y[i] = op == RP_BIN_ADD   ? a[i] + bv
               : op == RP_BIN_SUB ? a[i] - bv
               : op == RP_BIN_MUL ? a[i] * bv
                                  : a[i] / bv;
    }
}

void kref_scale(float *y, const float *x, float s, int64_t n, bool accumulate)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (accumulate ? y[i] : 0.0f) + s * x[i];
}

void kref_add_inplace(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void kref_mul(float *y, const float *a, const float *b, int64_t n, bool accumulate)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (accumulate ? y[i] : 0.0f) + a[i] * b[i];
}

void kref_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate)
{
    for (int64_t j = 0; j < nb; j++) {
        double s = 0;
        for (int64_t i = 0; i < rows; i++)
            s += x[i * nb + j];
        y[j] = (float)((accumulate ? y[j] : 0.0) + s);
    }
}

void kref_add_scalar(float *y, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += s;
}

double kref_sum(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

void kref_copy_cols(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w)
{
    for (int64_t i = 0; i < rows; i++)
        memcpy(y + i * ldy + off, x + i * w, (size_t)w * sizeof(float));
}

void kref_gather_cols(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows, int64_t w,
                      bool accumulate)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < w; j++)
            y[i * w + j] = (accumulate ? y[i * w + j] : 0.0f) + x[i * ldx + off + j];
}

void kref_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c)
{
    size_t e = rp_dtype_size(type), row = (size_t)c * e;
    for (int b = 0; b < n; b++)
        for (int i = 0; i < 2 * h; i++)
            for (int j = 0; j < 2 * w; j++)
                memcpy((char *)y + (((int64_t)b * 2 * h + i) * 2 * w + j) * row,
                       (const char *)x + (((int64_t)b * h + i / 2) * w + j / 2) * row, row);
}

void kref_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c)
{
    for (int b = 0; b < n; b++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++)
                for (int k = 0; k < c; k++) {
                    float s = 0;
                    for (int di = 0; di < 2; di++)
                        for (int dj = 0; dj < 2; dj++)
                            s += dy[(((int64_t)b * 2 * h + 2 * i + di) * 2 * w + 2 * j + dj) * c +
                                    k];
                    dx[(((int64_t)b * h + i) * w + j) * c + k] = s;
                }
}

void kref_gap_fwd(float *y, const float *x, int n, int hw, int c)
{
    for (int b = 0; b < n; b++)
        for (int k = 0; k < c; k++) {
            double s = 0;
            for (int p = 0; p < hw; p++)
                s += x[((int64_t)b * hw + p) * c + k];
            y[(int64_t)b * c + k] = (float)(s / hw);
        }
}

void kref_gap_bwd(float *dx, const float *dy, int n, int hw, int c)
{
    for (int b = 0; b < n; b++)
        for (int p = 0; p < hw; p++)
            for (int k = 0; k < c; k++)
                dx[((int64_t)b * hw + p) * c + k] = dy[(int64_t)b * c + k] / (float)hw;
}

void kref_embedding_fwd(float *y, const float *table, const int32_t *idx, int n, int d)
{
    for (int i = 0; i < n; i++)
        memcpy(y + (int64_t)i * d, table + (int64_t)idx[i] * d, (size_t)d * sizeof(float));
}

void kref_embedding_bwd(float *dtable, const float *dy, const int32_t *idx, int n, int d)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++)
            dtable[(int64_t)idx[i] * d + j] += dy[(int64_t)i * d + j];
}

double kref_softmax_xent_fwd(float *probs, const float *logits, const int32_t *labels,
                             const float *target, int n, int c)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (int64_t)i * c;
        float *p = probs + (int64_t)i * c;
        float mx = z[0];
        for (int j = 1; j < c; j++)
            mx = z[j] > mx ? z[j] : mx;
        double s = 0;
        for (int j = 0; j < c; j++)
            s += exp((double)z[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < c; j++)
            p[j] = (float)exp((double)z[j] - lse);
        if (labels) {
            total += lse - z[labels[i]];
        } else {
            for (int j = 0; j < c; j++)
                total += target[(int64_t)i * c + j] * (lse - z[j]);
        }
    }
    return total / n;
}

void kref_softmax_xent_bwd(float *dlogits, const float *probs, const int32_t *labels,
                           const float *target, float scale, int n, int c)
{
    for (int i = 0; i < n; i++) {
        double tsum = 0;
        if (!labels)
            for (int j = 0; j < c; j++)
                tsum += target[(int64_t)i * c + j];
        for (int j = 0; j < c; j++) {
            int64_t k = (int64_t)i * c + j;
            /* d/dz of -sum t log softmax(z) = softmax(z) * sum(t) - t */
            double t = labels ? (labels[i] == j ? 1.0 : 0.0) : target[k];
            double ts = labels ? 1.0 : tsum;
            dlogits[k] = (float)(scale * (probs[k] * ts - t));
        }
    }
}
