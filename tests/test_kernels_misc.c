/*
 * test_kernels_misc.c - the "norms, checksums, servers" slots of both kernel
 * tables (batch norm's statistics and running averages, spectral norm's power
 * iteration, forward and backward, and the parameter checksum), each against
 * a plain loop written here.
 *
 * These loops used to live in the tape ops and the runtime, and checkpoints
 * are compared byte for byte across replicas and resumes, so each slot must
 * reproduce the old arithmetic exactly: the plain loops below are that
 * arithmetic (same types, same order: a float momentum whose (1-momentum)*
 * running product is a float, double sums), and the comparison is bitwise
 * (memcmp), not within a tolerance. Each slot also gets a check of what it
 * means, independent of how it rounds: statistics of known data, momentum 0
 * and 1, sigma of a matrix whose singular values are known, and a checksum
 * that changes with any one bit.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "testutil.h"

/*
 * The plain loops are kept out of line: inlined into a test, GCC may fuse a multiply into the
 * test's own set-up arithmetic (FP contraction across statements), which the kernel, a separate
 * function, cannot see; out of line they see their inputs as the kernels do.
 */
#define NOINLINE __attribute__((noinline))

static const kernels_table *tables[2];

static int setup(void **state)
{
    (void)state;
    tables[0] = kernels_ref();
    tables[1] = kernels_cpu();
    for (int k = 0; k < 2; k++) {
        const kernels_table *t = tables[k];
        if (!t->bn_train_stats || !t->bn_eval_stats || !t->bn_bwd_sums || !t->sn_power ||
            !t->sn_fwd || !t->sn_bwd || !t->checksum)
            return -1;
    }
    return 0;
}

static void assert_bits(const void *a, const void *b, size_t bytes, const char *what,
                        const char *table)
{
    if (memcmp(a, b, bytes)) fail_msg("%s (%s table) differs from the plain loop", what, table);
}

/* Sums and sums of squares of an [m, c] block, as bn_stats gives them. */
static void plain_sums(double *sums, const float *x, int64_t m, int c)
{
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < m; i++) {
            s += x[i * c + j];
            s2 += (double)x[i * c + j] * x[i * c + j];
        }
        sums[j] = s;
        sums[c + j] = s2;
    }
}

/* ---- batch norm ------------------------------------------------------------------ */

NOINLINE static void plain_bn_train_stats(float *mean, float *invstd, float *rest, float *rm,
                                          float *rv, const double *sums, double count, float eps,
                                          float momentum, int c)
{
    for (int i = 0; i < c; i++) {
        double mu = sums[i] / count;
        double var = sums[c + i] / count - mu * mu;
        if (var < 0) var = 0;
        mean[i] = (float)mu;
        rest[i] = (float)(mu - mean[i]);
        invstd[i] = (float)(1.0 / sqrt(var + eps));
        float keep = 1 - momentum; /* a float, and so are the products with it */
        float old_m = keep * rm[i], old_v = keep * rv[i];
        rm[i] = (float)(old_m + momentum * mu);
        rv[i] = (float)(old_v + momentum * var * count / (count - 1));
    }
}

static void test_bn_train_stats(void **state)
{
    (void)state;
    const int C = 37;
    const int64_t M = 101;
    float x[101 * 37], rm0[37], rv0[37];
    double sums[2 * 37];
    /* Off-centre channels (mean ~ 3) so that mean_rest is not all zero. */
    tu_fill(x, M * C, 1, 2.0f, 4.0f);
    tu_fill(rm0, C, 2, -1.0f, 1.0f);
    tu_fill(rv0, C, 3, 0.5f, 2.0f);
    plain_sums(sums, x, M, C);
    const float moms[] = {0.0f, 0.1f, 0.37f, 1.0f};
    const double counts[] = {(double)M, 4.0 * (double)M};
    for (int k = 0; k < 2; k++)
        for (size_t mi = 0; mi < 4; mi++)
            for (size_t ci = 0; ci < 2; ci++) {
                float momentum = moms[mi], eps = 1e-5f;
                double count = counts[ci];
                float mean[37], invstd[37], rest[37], rm[37], rv[37];
                float pm[37], pi[37], pr[37], prm[37], prv[37];
                memcpy(rm, rm0, sizeof rm);
                memcpy(rv, rv0, sizeof rv);
                memcpy(prm, rm0, sizeof prm);
                memcpy(prv, rv0, sizeof prv);
                tables[k]->bn_train_stats(mean, invstd, rest, rm, rv, sums, count, eps, momentum,
                                          C);
                plain_bn_train_stats(pm, pi, pr, prm, prv, sums, count, eps, momentum, C);
                const char *name = tables[k]->name;
                assert_bits(mean, pm, sizeof mean, "bn_train_stats mean", name);
                assert_bits(invstd, pi, sizeof invstd, "bn_train_stats invstd", name);
                assert_bits(rest, pr, sizeof rest, "bn_train_stats mean_rest", name);
                assert_bits(rm, prm, sizeof rm, "bn_train_stats running_mean", name);
                assert_bits(rv, prv, sizeof rv, "bn_train_stats running_var", name);
                /* What the numbers mean: momentum 0 keeps the running averages, 1 replaces them
                   with the batch's mean and unbiased variance. */
                if (momentum == 0.0f) {
                    assert_bits(rm, rm0, sizeof rm, "momentum 0 running_mean", name);
                    assert_bits(rv, rv0, sizeof rv, "momentum 0 running_var", name);
                }
                if (momentum == 1.0f && count == (double)M)
                    for (int j = 0; j < C; j++) {
                        double s = 0, s2 = 0;
                        for (int64_t i = 0; i < M; i++)
                            s += x[i * C + j];
                        double mu = s / (double)M;
                        for (int64_t i = 0; i < M; i++)
                            s2 += (x[i * C + j] - mu) * (x[i * C + j] - mu);
                        assert_true(fabs(rm[j] - mu) <= 1e-6 * fabs(mu));
                        assert_true(fabs(rv[j] - s2 / (double)(M - 1)) <= 1e-5 * s2 / (M - 1));
                        assert_true(fabs(mean[j] + (double)rest[j] - mu) <= 1e-12 * fabs(mu));
                    }
            }
}

/* NULL running averages are skipped; a variance that rounds below zero is taken as zero. */
static void test_bn_train_stats_edges(void **state)
{
    (void)state;
    const int C = 3;
    /* Channel 0: mean 3 and E[x^2] - E[x]^2 = -1e-4, below zero (as rounding can leave it):
       taken as 0, not a NaN from sqrt(-1e-4 + eps). */
    double sums[6] = {3.0 * 7, 5.0, -2.0, (9.0 - 1e-4) * 7, 30.0, 10.0};
    for (int k = 0; k < 2; k++) {
        float mean[3], invstd[3], rest[3];
        tables[k]->bn_train_stats(mean, invstd, rest, NULL, NULL, sums, 7.0, 1e-5f, 0.1f, C);
        assert_true(mean[0] == 3.0f);
        assert_true(invstd[0] == (float)(1.0 / sqrt(0.0 + 1e-5f)));
        assert_true(isfinite(invstd[1]) && isfinite(invstd[2]));
    }
}

NOINLINE static void plain_invstd(float *invstd, const float *var, float eps, int c)
{
    for (int i = 0; i < c; i++)
        invstd[i] = (float)(1.0 / sqrt((double)var[i] + eps));
}

static void test_bn_eval_stats(void **state)
{
    (void)state;
    const int C = 29;
    float rm[29], rv[29];
    tu_fill(rm, C, 4, -3.0f, 3.0f);
    tu_fill(rv, C, 5, 0.0f, 4.0f);
    for (int k = 0; k < 2; k++) {
        float mean[29], invstd[29], rest[29], pi[29];
        memset(rest, 0xff, sizeof rest);
        tables[k]->bn_eval_stats(mean, invstd, rest, rm, rv, 2e-5f, C);
        plain_invstd(pi, rv, 2e-5f, C);
        assert_bits(mean, rm, sizeof mean, "bn_eval_stats mean", tables[k]->name);
        assert_bits(invstd, pi, sizeof invstd, "bn_eval_stats invstd", tables[k]->name);
        for (int i = 0; i < C; i++)
            assert_true(rest[i] == 0.0f && !signbit(rest[i]));
    }
}

NOINLINE static void plain_bn_bwd_sums(float *local, double *sums, const float *rest,
                                       const float *invstd, int c)
{
    for (int j = 0; j < c; j++)
        sums[c + j] -= (double)rest[j] * invstd[j] * sums[j];
    for (int j = 0; j < 2 * c; j++)
        local[j] = (float)sums[j];
}

static void test_bn_bwd_sums(void **state)
{
    (void)state;
    const int C = 19;
    float rest[19], invstd[19], raw[2 * 19];
    tu_fill(rest, C, 6, -1e-6f, 1e-6f);
    tu_fill(invstd, C, 7, 0.1f, 10.0f);
    tu_fill(raw, 2 * C, 8, -50.0f, 50.0f);
    for (int k = 0; k < 2; k++) {
        double sums[2 * 19], plain[2 * 19];
        float local[2 * 19], plocal[2 * 19];
        for (int j = 0; j < 2 * C; j++)
            sums[j] = plain[j] = raw[j] * 1.000001;
        tables[k]->bn_bwd_sums(local, sums, rest, invstd, C);
        plain_bn_bwd_sums(plocal, plain, rest, invstd, C);
        assert_bits(sums, plain, sizeof sums, "bn_bwd_sums sums", tables[k]->name);
        assert_bits(local, plocal, sizeof local, "bn_bwd_sums local", tables[k]->name);
        /* The first half (sum(g)) is left alone. */
        for (int j = 0; j < C; j++)
            assert_true(sums[j] == raw[j] * 1.000001);
    }
}

/* ---- spectral norm ---------------------------------------------------------------- */

#define SN_EPS 1e-12

NOINLINE static double plain_sn_power(double *un, double *v, const float *w, const float *u,
                                      int64_t rows, int64_t cols)
{
    for (int64_t j = 0; j < cols; j++)
        v[j] = 0;
    for (int64_t i = 0; i < rows; i++) {
        double ui = u[i];
        for (int64_t j = 0; j < cols; j++)
            v[j] += ui * w[i * cols + j];
    }
    double ss = 0;
    for (int64_t j = 0; j < cols; j++)
        ss += v[j] * v[j];
    double s = 1.0 / (sqrt(ss) + SN_EPS);
    for (int64_t j = 0; j < cols; j++)
        v[j] *= s;
    ss = 0;
    for (int64_t i = 0; i < rows; i++) {
        double acc = 0;
        for (int64_t j = 0; j < cols; j++)
            acc += w[i * cols + j] * v[j];
        un[i] = acc;
        ss += acc * acc;
    }
    double norm = sqrt(ss);
    double sigma = ss / (norm + SN_EPS);
    s = 1.0 / (norm + SN_EPS);
    for (int64_t i = 0; i < rows; i++)
        un[i] *= s;
    return sigma;
}

NOINLINE static void plain_sn_scale(float *y, const float *w, double sigma, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        y[k] = (float)((double)w[k] / sigma);
}

NOINLINE static void plain_sn_bwd(float *dw, const double *un, const double *v, const float *dy,
                                  const float *w, double sigma, int64_t rows, int64_t cols)
{
    double gw = 0;
    for (int64_t k = 0; k < rows * cols; k++)
        gw += (double)dy[k] * w[k];
    double inv = 1.0 / sigma, c = gw / (sigma * sigma);
    for (int64_t i = 0; i < rows; i++) {
        double cu = c * un[i];
        for (int64_t j = 0; j < cols; j++)
            dw[i * cols + j] += (float)(dy[i * cols + j] * inv - cu * v[j]);
    }
}

static const int64_t sn_shapes[][2] = {{1, 1}, {1, 9}, {7, 1}, {5, 27}, {64, 288}, {33, 17}};

static void test_sn_power_fwd(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof sn_shapes / sizeof sn_shapes[0]; s++) {
        int64_t rows = sn_shapes[s][0], cols = sn_shapes[s][1], n = rows * cols;
        float *w = rp_alloc((size_t)n * sizeof(float)), *u = rp_alloc((size_t)rows * sizeof(float));
        float *y = rp_alloc((size_t)n * sizeof(float)), *py = rp_alloc((size_t)n * sizeof(float));
        float *u2 = rp_alloc((size_t)rows * sizeof(float));
        double *uv = rp_alloc((size_t)(rows + cols) * sizeof(double));
        double *puv = rp_alloc((size_t)(rows + cols) * sizeof(double));
        assert_true(w && u && y && py && u2 && uv && puv);
        tu_fill(w, n, 10 + s, -1.0f, 1.0f);
        tu_fill(u, rows, 20 + s, -1.0f, 1.0f);
        double psigma = plain_sn_power(puv, puv + rows, w, u, rows, cols);
        plain_sn_scale(py, w, psigma, n);
        for (int k = 0; k < 2; k++) {
            const char *name = tables[k]->name;
            double sigma = tables[k]->sn_power(uv, uv + rows, w, u, rows, cols);
            assert_bits(&sigma, &psigma, sizeof sigma, "sn_power sigma", name);
            assert_bits(uv, puv, (size_t)(rows + cols) * sizeof(double), "sn_power u', v", name);
            /* Without u the weight is scaled and u is left alone; with it, u = (float)u'. */
            memcpy(u2, u, (size_t)rows * sizeof(float));
            tables[k]->sn_fwd(y, NULL, uv, w, sigma, rows, cols);
            assert_bits(y, py, (size_t)n * sizeof(float), "sn_fwd y", name);
            assert_bits(u2, u, (size_t)rows * sizeof(float), "sn_fwd without u", name);
            memset(y, 0, (size_t)n * sizeof(float));
            tables[k]->sn_fwd(y, u2, uv, w, sigma, rows, cols);
            assert_bits(y, py, (size_t)n * sizeof(float), "sn_fwd y (updating u)", name);
            for (int64_t i = 0; i < rows; i++)
                assert_true(u2[i] == (float)puv[i]);
        }
        rp_free(w), rp_free(u), rp_free(y), rp_free(py), rp_free(u2), rp_free(uv), rp_free(puv);
    }
}

/* Iterated, the step's sigma reaches the largest singular value: 5 for rows scaled 5, 2, 1. */
static void test_sn_power_converges(void **state)
{
    (void)state;
    /* w = diag(5, 2, 1) Q with Q's rows orthonormal in R^4: singular values 5, 2, 1. */
    const double q[3][4] = {{0.5, 0.5, 0.5, 0.5}, {0.5, -0.5, 0.5, -0.5}, {0.5, 0.5, -0.5, -0.5}};
    const double d[3] = {5, 2, 1};
    float w[12], u[3] = {0.3f, -0.8f, 0.5f};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            w[i * 4 + j] = (float)(d[i] * q[i][j]);
    for (int k = 0; k < 2; k++) {
        float uk[3], y[12];
        double uv[7], sigma = 0;
        memcpy(uk, u, sizeof uk);
        for (int it = 0; it < 60; it++) {
            sigma = tables[k]->sn_power(uv, uv + 3, w, uk, 3, 4);
            tables[k]->sn_fwd(y, uk, uv, w, sigma, 3, 4);
        }
        assert_true(fabs(sigma - 5.0) < 1e-6);
        assert_true(fabs(fabs(uk[0]) - 1.0) < 1e-6);
        /* A zero weight gives sigma 0 (the op rejects it), not a NaN from 0/0. */
        float z[12] = {0};
        assert_true(tables[k]->sn_power(uv, uv + 3, z, u, 3, 4) == 0.0);
    }
}

static void test_sn_bwd(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof sn_shapes / sizeof sn_shapes[0]; s++) {
        int64_t rows = sn_shapes[s][0], cols = sn_shapes[s][1], n = rows * cols;
        float *w = rp_alloc((size_t)n * sizeof(float)), *u = rp_alloc((size_t)rows * sizeof(float));
        float *dy = rp_alloc((size_t)n * sizeof(float)), *dw0 = rp_alloc((size_t)n * sizeof(float));
        float *dw = rp_alloc((size_t)n * sizeof(float)), *pdw = rp_alloc((size_t)n * sizeof(float));
        double *uv = rp_alloc((size_t)(rows + cols) * sizeof(double));
        assert_true(w && u && dy && dw0 && dw && pdw && uv);
        tu_fill(w, n, 30 + s, -1.0f, 1.0f);
        tu_fill(u, rows, 40 + s, -1.0f, 1.0f);
        tu_fill(dy, n, 50 + s, -1.0f, 1.0f);
        tu_fill(dw0, n, 60 + s, -1.0f, 1.0f);
        double sigma = plain_sn_power(uv, uv + rows, w, u, rows, cols);
        const double *un = uv, *v = uv + rows;
        /* Accumulates onto what dw held. */
        memcpy(pdw, dw0, (size_t)n * sizeof(float));
        plain_sn_bwd(pdw, un, v, dy, w, sigma, rows, cols);
        for (int k = 0; k < 2; k++) {
            memcpy(dw, dw0, (size_t)n * sizeof(float));
            tables[k]->sn_bwd(dw, un, v, dy, w, sigma, rows, cols);
            assert_bits(dw, pdw, (size_t)n * sizeof(float), "sn_bwd dw", tables[k]->name);
        }
        rp_free(w), rp_free(u), rp_free(dy), rp_free(dw0), rp_free(dw), rp_free(pdw), rp_free(uv);
    }
}

/* ---- checksum --------------------------------------------------------------------- */

NOINLINE static uint64_t plain_checksum(const float *x, int64_t n)
{
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                     0x2545f4914f6cdd1dull};
    const uint64_t p = 0x100000001b3ull;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 4; l++) {
            uint32_t lo, hi;
            memcpy(&lo, x + i + 2 * l, 4);
            memcpy(&hi, x + i + 2 * l + 1, 4);
            h[l] = (h[l] ^ ((uint64_t)hi << 32 | lo)) * p;
        }
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        h[0] = (h[0] ^ b) * p;
    }
    return h[0] ^ (h[1] << 1 | h[1] >> 63) ^ (h[2] << 2 | h[2] >> 62) ^ (h[3] << 3 | h[3] >> 61);
}

static void test_checksum(void **state)
{
    (void)state;
    const int64_t sizes[] = {0, 1, 7, 8, 9, 16, 17, 1000, 4099};
    float *x = rp_alloc(4099 * sizeof(float));
    assert_non_null(x);
    tu_fill(x, 4099, 70, -3.0f, 3.0f);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        uint64_t want = plain_checksum(x, n);
        for (int k = 0; k < 2; k++)
            assert_true(tables[k]->checksum(x, n) == want);
    }
    /* Any one bit of any element, in the 8-float blocks and in the tail, changes the hash;
       so does -0 against +0 (the replicas must agree bitwise, not numerically). */
    const int64_t n = 1003;
    uint64_t base = tables[0]->checksum(x, n);
    const int64_t at[] = {0, 1, 7, 8, 500, 999, 1000, 1002};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
        for (int bit = 0; bit < 32; bit++) {
            uint32_t b;
            memcpy(&b, x + at[a], 4);
            b ^= 1u << bit;
            memcpy(x + at[a], &b, 4);
            for (int k = 0; k < 2; k++)
                assert_true(tables[k]->checksum(x, n) != base);
            b ^= 1u << bit;
            memcpy(x + at[a], &b, 4);
        }
    assert_true(tables[1]->checksum(x, n) == base);
    float zp[9] = {0}, zn[9] = {0};
    zn[8] = -0.0f;
    zn[0] = -0.0f;
    assert_true(tables[1]->checksum(zp, 9) != tables[1]->checksum(zn, 9));
    rp_free(x);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_train_stats), cmocka_unit_test(test_bn_train_stats_edges),
        cmocka_unit_test(test_bn_eval_stats),  cmocka_unit_test(test_bn_bwd_sums),
        cmocka_unit_test(test_sn_power_fwd),   cmocka_unit_test(test_sn_power_converges),
        cmocka_unit_test(test_sn_bwd),         cmocka_unit_test(test_checksum),
    };
    return tu_run_group_tests(argc, argv, tests, setup, NULL);
}
