/*
 * shape_norm.c - reference kernels for per-axis broadcasting and reductions,
 * clamping, layer norm, log-softmax and sums of squares: the plainest
 * correct loops (sums in double), the specification the fast table is
 * tested against. Index spaces are 4-D (shorter shapes padded with 1s).
 */
#include <math.h>
#include <string.h>

#include "kernels/ref/elementwise.h"

static float binop(float a, float b, kernels_binop op)
{
    switch (op) {
    case RP_BIN_ADD:
        return a + b;
    case RP_BIN_SUB:
        return a - b;
    case RP_BIN_MUL:
        return a * b;
    case RP_BIN_DIV:
        return a / b;
    }
    return a;
}

void kref_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                       const int64_t *bstride, kernels_binop op)
{
    int64_t i = 0;
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++)
                for (int64_t i3 = 0; i3 < shape[3]; i3++, i++) {
                    int64_t j =
                        i0 * bstride[0] + i1 * bstride[1] + i2 * bstride[2] + i3 * bstride[3];
                    y[i] = binop(a[i], b[j], op);
                }
}

/* Row-major strides of the kept axes' output (0 along reduced axes), and its size. */
static int64_t kept_strides(const int64_t *shape, unsigned mask, int64_t *ostride)
{
    int64_t n = 1;
    for (int d = 3; d >= 0; d--) {
        if (mask & (1u << d)) {
            ostride[d] = 0;
        } else {
            ostride[d] = n;
            n *= shape[d];
        }
    }
    return n;
}

/* The input offset of output element o and reduced element r. */
static int64_t offset_of(const int64_t *shape, unsigned mask, int64_t o, int64_t r)
{
    int64_t off = 0, stride = 1;
    for (int d = 3; d >= 0; d--) {
        int64_t idx;
        if (mask & (1u << d)) {
            idx = r % shape[d];
            r /= shape[d];
        } else {
            idx = o % shape[d];
            o /= shape[d];
        }
        off += idx * stride;
        stride *= shape[d];
    }
    return off;
}

void kref_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate)
{
    int64_t ostride[4], nout = kept_strides(shape, mask, ostride);
    int64_t total = shape[0] * shape[1] * shape[2] * shape[3], nred = total / nout;
    for (int64_t o = 0; o < nout; o++) {
        double s = 0;
        for (int64_t r = 0; r < nred; r++)
            s += x[offset_of(shape, mask, o, r)];
        y[o] = (float)((accumulate ? (double)y[o] : 0.0) + (double)scale * s);
    }
}

void kref_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                      bool accumulate)
{
    int64_t ostride[4], nout = kept_strides(shape, mask, ostride);
    int64_t total = shape[0] * shape[1] * shape[2] * shape[3], nred = total / nout;
    for (int64_t o = 0; o < nout; o++)
        for (int64_t r = 0; r < nred; r++) {
            int64_t k = offset_of(shape, mask, o, r);
            x[k] = (accumulate ? x[k] : 0.0f) + scale * y[o];
        }
}

void kref_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

void kref_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f;
}

void kref_select_eq_acc(float *dx, const float *g, const float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] == y[i]) dx[i] += g[i];
}

void kref_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                        const float *beta, int64_t rows, int d, float eps)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * d;
        double s = 0, s2 = 0;
        for (int j = 0; j < d; j++)
            s += xr[j];
        double mu = s / d;
        for (int j = 0; j < d; j++)
            s2 += (xr[j] - mu) * (xr[j] - mu);
        double r = 1.0 / sqrt(s2 / d + eps);
        mean[i] = (float)mu;
        rstd[i] = (float)r;
        for (int j = 0; j < d; j++) {
            double h = ((double)xr[j] - mean[i]) * rstd[i];
            y[i * d + j] = (float)(h * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f));
        }
    }
}

void kref_layernorm_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                        const float *mean, const float *rstd, const float *gamma, int64_t rows,
                        int d)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * d, *dr = dy + i * d;
        /* g = dy*gamma; dx = rstd * (g - mean(g) - xhat * mean(g*xhat)) */
        double sg = 0, sgh = 0;
        for (int j = 0; j < d; j++) {
            double h = ((double)xr[j] - mean[i]) * rstd[i];
            double g = (double)dr[j] * (gamma ? gamma[j] : 1.0f);
            sg += g;
            sgh += g * h;
        }
        for (int j = 0; j < d; j++) {
            double h = ((double)xr[j] - mean[i]) * rstd[i];
            double g = (double)dr[j] * (gamma ? gamma[j] : 1.0f);
            dx[i * d + j] = (float)(rstd[i] * (g - sg / d - h * sgh / d));
        }
    }
    /* Parameter gradients: one double sum over rows per column. */
    for (int j = 0; j < d; j++) {
        double sgam = 0, sbet = 0;
        for (int64_t i = 0; i < rows; i++) {
            double h = ((double)x[i * d + j] - mean[i]) * rstd[i];
            sgam += dy[i * d + j] * h;
            sbet += dy[i * d + j];
        }
        if (dgamma) dgamma[j] = (float)((double)dgamma[j] + sgam);
        if (dbeta) dbeta[j] = (float)((double)dbeta[j] + sbet);
    }
}

void kref_log_softmax_fwd(float *y, const float *x, int64_t rows, int c)
{
    for (int64_t i = 0; i < rows; i++) {
        const float *z = x + i * c;
        float mx = z[0];
        for (int j = 1; j < c; j++)
            mx = z[j] > mx ? z[j] : mx;
        double s = 0;
        for (int j = 0; j < c; j++)
            s += exp((double)z[j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < c; j++)
            y[i * c + j] = (float)((double)z[j] - lse);
    }
}

void kref_log_softmax_bwd(float *dx, const float *dy, const float *y, int64_t rows, int c)
{
    for (int64_t i = 0; i < rows; i++) {
        double s = 0;
        for (int j = 0; j < c; j++)
            s += dy[i * c + j];
        for (int j = 0; j < c; j++)
            dx[i * c + j] = (float)((double)dy[i * c + j] - exp((double)y[i * c + j]) * s);
    }
}

double kref_sum_squares(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

void kref_scale_inplace(float *y, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= s;
}
