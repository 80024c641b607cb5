/*
 * norms.c - reference kernels for batch norm's statistics and running
 * averages and for spectral norm's power iteration. Their arithmetic is the
 * arithmetic the tape ops have always done, in the same order and the same
 * types (a float momentum, double sums), because checkpoints are compared
 * byte for byte across versions and replicas.
 */
#include <math.h>
#include <string.h>

#include "kernels/ref/norms.h"

void kref_bn_train_stats(float *mean, float *invstd, float *mean_rest, float *running_mean,
                         float *running_var, const double *sums, double count, float eps,
                         float momentum, int c)
{
    for (int i = 0; i < c; i++) {
        double mu = sums[i] / count;
        double var = sums[c + i] / count - mu * mu;
        if (var < 0) var = 0; /* E[x^2]-E[x]^2 can round below zero */
        mean[i] = (float)mu;
        mean_rest[i] = (float)(mu - mean[i]);
        invstd[i] = (float)(1.0 / sqrt(var + eps));
        /* (1 - momentum) * running is a float product, widened before the double sum. */
        if (running_mean)
            running_mean[i] = (float)((1 - momentum) * running_mean[i] + momentum * mu);
        if (running_var)
            running_var[i] =
                (float)((1 - momentum) * running_var[i] + momentum * var * count / (count - 1));
    }
}

void kref_bn_eval_stats(float *mean, float *invstd, float *mean_rest, const float *running_mean,
                        const float *running_var, float eps, int c)
{
    for (int i = 0; i < c; i++) {
        mean[i] = running_mean[i];
        mean_rest[i] = 0;
        invstd[i] = (float)(1.0 / sqrt((double)running_var[i] + eps));
    }
}

void kref_bn_bwd_sums(float *local, double *sums, const float *mean_rest, const float *invstd,
                      int c)
{
    for (int j = 0; j < c; j++)
        sums[c + j] -= (double)mean_rest[j] * invstd[j] * sums[j];
    for (int j = 0; j < 2 * c; j++)
        local[j] = (float)sums[j];
}

/* As the authors' l2normalize: x / (|x| + eps), eps keeping a zero vector finite. */
#define SN_EPS 1e-12

static void sn_normalise(double *x, int64_t n)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / (sqrt(ss) + SN_EPS);
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

double kref_sn_power(double *u_new, double *v, const float *w, const float *u, int64_t rows,
                     int64_t cols)
{
    /* v = normalise(W^T u): accumulate row by row, so W is read in its storage order. */
    memset(v, 0, (size_t)cols * sizeof(double));
    for (int64_t i = 0; i < rows; i++) {
        double ui = u[i];
        const float *wr = w + i * cols;
        for (int64_t j = 0; j < cols; j++)
            v[j] += ui * wr[j];
    }
    sn_normalise(v, cols);
    /* u' = normalise(W v); sigma = u'^T W v = |Wv|^2 / (|Wv| + eps). */
    double ss = 0;
    for (int64_t i = 0; i < rows; i++) {
        const float *wr = w + i * cols;
        double acc = 0;
        for (int64_t j = 0; j < cols; j++)
            acc += wr[j] * v[j];
        u_new[i] = acc;
        ss += acc * acc;
    }
    double norm = sqrt(ss);
    double s = 1.0 / (norm + SN_EPS);
    for (int64_t i = 0; i < rows; i++)
        u_new[i] *= s;
    return ss / (norm + SN_EPS);
}

void kref_sn_fwd(float *y, float *u, const double *u_new, const float *w, double sigma,
                 int64_t rows, int64_t cols)
{
    for (int64_t k = 0; k < rows * cols; k++)
        y[k] = (float)((double)w[k] / sigma);
    if (u)
        for (int64_t i = 0; i < rows; i++)
            u[i] = (float)u_new[i];
}

void kref_sn_bwd(float *dw, const double *u_new, const double *v, const float *dy, const float *w,
                 double sigma, int64_t rows, int64_t cols)
{
    double gw = 0;
    for (int64_t k = 0; k < rows * cols; k++)
        gw += (double)dy[k] * w[k];
    double inv = 1.0 / sigma, c = gw / (sigma * sigma);
    for (int64_t i = 0; i < rows; i++) {
        double cu = c * u_new[i];
        float *dr = dw + i * cols;
        const float *gr = dy + i * cols;
        for (int64_t j = 0; j < cols; j++)
            dr[j] += (float)(gr[j] * inv - cu * v[j]);
    }
}
