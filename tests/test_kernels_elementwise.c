/*
 * test_kernels_elementwise.c - every fast element-wise, normalisation and
 * reduction kernel against its plain reference, on odd sizes, with the
 * calling thread's team at 1 and at 4 threads (so the parallel split and
 * the fixed-order combine are exercised), plus the thread-count contract.
 */
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"
#include "testutil.h"

#define TOL 1e-5

static const kernels_table *ref, *cpu;

static int setup(void **state)
{
    (void)state;
    ref = kernels_ref();
    cpu = kernels_cpu();
    return 0;
}

/* Sizes that are not multiples of any vector width, plus ones big enough to go parallel. */
static const int64_t rows_list[] = {1, 3, 17, 1000, 9001};
static const int cols_list[] = {1, 3, 16, 37};

static float *buf(int64_t n, uint64_t seed)
{
    float *p = rp_alloc((size_t)n * sizeof(float));
    tu_fill(p, n, seed, -2.0f, 2.0f);
    return p;
}

static void body_activations(void)
{
    for (size_t r = 0; r < 5; r++) {
        int64_t n = rows_list[r] * 37;
        float *x = buf(n, 1), *dy = buf(n, 2), *y1 = buf(n, 3), *y2 = buf(n, 3);
        float *d1 = buf(n, 4), *d2 = buf(n, 4);
        for (int a = RP_ACT_RELU; a <= RP_ACT_SIGMOID; a++) {
            ref->act_fwd(y1, x, n, (kernels_act)a, 0.1f);
            cpu->act_fwd(y2, x, n, (kernels_act)a, 0.1f);
            tu_check_close(y2, y1, n, TOL, "act_fwd");
            ref->act_bwd(d1, dy, y1, x, n, (kernels_act)a, 0.1f);
            cpu->act_bwd(d2, dy, y1, x, n, (kernels_act)a, 0.1f);
            tu_check_close(d2, d1, n, TOL, "act_bwd");
        }
        rp_free(x), rp_free(dy), rp_free(y1), rp_free(y2), rp_free(d1), rp_free(d2);
    }
}

/*
 * The activations computed through exp (tanh, sigmoid, ELU) over their whole range: large
 * magnitudes (saturation, no inf or NaN), tiny ones (tanh x ~ x, ELU x ~ x) and every scale
 * between, against libm's tanhf, expf and expm1f within 3e-7 (2.5 float steps at 1; relative, or
 * absolute below 1).
 */
static void test_activations_wide_range(void **state)
{
    (void)state;
    enum { N = 4096 };
    float *x = rp_alloc(N * sizeof(float)), *y1 = rp_alloc(N * sizeof(float)),
          *y2 = rp_alloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        /* +-10^k for k from -8 to 2.5, and a few exact extremes. */
        float mag = powf(10.0f, -8.0f + 10.5f * (float)(i / 2) / (N / 2));
        x[i] = i % 2 ? -mag : mag;
    }
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e6f, x[3] = -1e6f, x[4] = 88.5f, x[5] = -88.5f;
    kernels_act acts[3] = {RP_ACT_TANH, RP_ACT_SIGMOID, RP_ACT_ELU};
    for (int k = 0; k < 3; k++) {
        ref->act_fwd(y1, x, N, acts[k], 1.0f);
        cpu->act_fwd(y2, x, N, acts[k], 1.0f);
        for (int i = 0; i < N; i++)
            assert_true(isfinite(y2[i]) || !isfinite(y1[i]));
        tu_check_close(y2, y1, N, 3e-7,
                       acts[k] == RP_ACT_TANH      ? "tanh"
                       : acts[k] == RP_ACT_SIGMOID ? "sigmoid"
                                                   : "elu");
    }
    rp_free(x), rp_free(y1), rp_free(y2);
}

static void test_activations(void **state)
{
    (void)state;
    tu_for_each_team(body_activations);
}

static void body_binary(void)
{
    for (size_t r = 0; r < 5; r++)
        for (size_t c = 0; c < 4; c++) {
            int64_t nb = cols_list[c], n = rows_list[r] * nb;
            float *a = buf(n, 5), *b = buf(nb, 6), *y1 = buf(n, 7), *y2 = buf(n, 7);
            for (int op = RP_BIN_ADD; op <= RP_BIN_MUL; op++) {
                ref->binary(y1, a, b, n, nb, (kernels_binop)op);
                cpu->binary(y2, a, b, n, nb, (kernels_binop)op);
                tu_check_close(y2, y1, n, TOL, "binary");
            }
            /* In place (the bias add writes over its input). */
            memcpy(y2, a, (size_t)n * sizeof(float));
            cpu->binary(y2, y2, b, n, nb, RP_BIN_ADD);
            ref->binary(y1, a, b, n, nb, RP_BIN_ADD);
            tu_check_close(y2, y1, n, TOL, "binary in place");
            for (int acc = 0; acc < 2; acc++) {
                memcpy(y2, y1, (size_t)n * sizeof(float));
                ref->scale(y1, a, 0.7f, n, acc);
                cpu->scale(y2, a, 0.7f, n, acc);
                tu_check_close(y2, y1, n, TOL, "scale");
            }
            memcpy(y2, y1, (size_t)n * sizeof(float));
            ref->add_inplace(y1, a, n);
            cpu->add_inplace(y2, a, n);
            tu_check_close(y2, y1, n, TOL, "add_inplace");
            float *s1 = buf(nb, 8), *s2 = buf(nb, 8);
            for (int acc = 0; acc < 2; acc++) {
                ref->reduce_rows(s1, a, n / nb, nb, acc);
                cpu->reduce_rows(s2, a, n / nb, nb, acc);
                tu_check_close(s2, s1, nb, TOL, "reduce_rows");
            }
            rp_free(a), rp_free(b), rp_free(y1), rp_free(y2), rp_free(s1), rp_free(s2);
        }
}

static void test_binary_scale_reduce(void **state)
{
    (void)state;
    tu_for_each_team(body_binary);
}

/* Batch norm's widths: the narrow ones, and rows wider than one block of partial sums (512). */
static const int bn_cols[] = {1, 3, 16, 37, 700, 2048};

static void body_batch_norm(void)
{
    for (size_t r = 0; r < 5; r++)
        for (size_t cc = 0; cc < sizeof bn_cols / sizeof *bn_cols; cc++) {
            int c = bn_cols[cc];
            int64_t m = rows_list[r], n = m * c;
            if (c > 64 && m > 1000) continue; /* wide rows: up to 1000 of them is plenty */
            float *x = buf(n, 9), *dy = buf(n, 10), *g = buf(c, 11), *b = buf(c, 12);
            float *mean = buf(c, 13), *invstd = buf(c, 14);
            for (int j = 0; j < c; j++)
                invstd[j] = 0.5f + (float)j / c;
            double *s1 = test_malloc(2 * (size_t)c * sizeof(double)),
                   *s2 = test_malloc(2 * (size_t)c * sizeof(double));
            ref->bn_stats(s1, x, m, c);
            cpu->bn_stats(s2, x, m, c);
            for (int k = 0; k < 2 * c; k++) /* terms are x or x^2, all summed with their sign */
                if (!(fabs(s2[k] - s1[k]) <= 1e-6 * (1 + (double)m * (k < c ? 2 : 4))))
                    fail_msg("bn_stats[%d]: cpu %.9g ref %.9g", k, s2[k], s1[k]);
            float *y1 = buf(n, 0), *y2 = buf(n, 0), *h1 = buf(n, 0), *h2 = buf(n, 0);
            for (int relu = 0; relu < 2; relu++) {
                /* With a residual added before the ReLU (the fused block tail) too. */
                ref->bn_norm_fwd(y1, x, mean, invstd, g, b, dy, relu, m, c);
                cpu->bn_norm_fwd(y2, x, mean, invstd, g, b, dy, relu, m, c);
                tu_check_close(y2, y1, n, TOL, relu ? "bn_norm_fwd+res relu" : "bn_norm_fwd+res");
                ref->bn_norm_fwd(y1, x, mean, invstd, g, b, NULL, relu, m, c);
                cpu->bn_norm_fwd(y2, x, mean, invstd, g, b, NULL, relu, m, c);
                tu_check_close(y2, y1, n, TOL, relu ? "bn_norm_fwd relu" : "bn_norm_fwd");
                const float *mask = relu ? y1 : NULL;
                /* With the masked gradient written out too (the fused tail's residual). */
                ref->bn_stats_bwd(s1, dy, mask, x, mean, invstd, m, c, h1);
                cpu->bn_stats_bwd(s2, dy, mask, x, mean, invstd, m, c, h2);
                assert_memory_equal(h2, h1, (size_t)n * sizeof(float));
                for (int64_t i = 0; i < n; i++)
                    if (h1[i] != (mask && !(mask[i] > 0) ? 0.0f : dy[i]))
                        fail_msg("bn_stats_bwd g_out[%lld] = %g", (long long)i, (double)h1[i]);
                /*
                 * Float runs of 32 rows inside double totals: the error is
                 * bounded by the sum of the terms' magnitudes, not by the
                 * (cancelling) result, so the tolerance scales with that.
                 */
                for (int k = 0; k < 2 * c; k++) {
                    int j = k % c;
                    double mag = 0;
                    for (int64_t i = 0; i < m; i++) {
                        double gv = mask && !(mask[i * c + j] > 0) ? 0 : fabs(dy[i * c + j]);
                        mag += k < c ? gv : gv * fabs((x[i * c + j] - mean[j]) * invstd[j]);
                    }
                    if (!(fabs(s2[k] - s1[k]) <= 1e-6 * (1 + mag)))
                        fail_msg("bn_stats_bwd[%d]: cpu %.9g ref %.9g (magnitude %g)", k, s2[k],
                                 s1[k], mag);
                }
                ref->bn_bwd_data(h1, dy, mask, x, mean, invstd, s1, g, (double)m, m, c);
                cpu->bn_bwd_data(h2, dy, mask, x, mean, invstd, s1, g, (double)m, m, c);
                tu_check_close(h2, h1, n, TOL, relu ? "bn_bwd_data relu" : "bn_bwd_data");
            }
            rp_free(y1), rp_free(y2), rp_free(h1), rp_free(h2);
            rp_free(x), rp_free(dy), rp_free(g), rp_free(b), rp_free(mean), rp_free(invstd);
            test_free(s1), test_free(s2);
        }
}

static void test_batch_norm_kernels(void **state)
{
    (void)state;
    tu_for_each_team(body_batch_norm);
}

/*
 * Batch norm through a kernel table, in training mode without a fused ReLU,
 * with rp_batch_norm's arithmetic around the kernels: mean and 1/std from
 * bn_stats's sums in double, then rounded to float; bn_stats_bwd's sum of
 * dy*xhat corrected for the float mean's rounding (backward.c), and used
 * for dgamma and by bn_bwd_data.
 */
static void bn_by_table(const kernels_table *k, float *y, float *dgamma, float *dbeta, float *dx,
                        const float *x, const float *dy, const float *gamma, const float *beta,
                        float eps, int64_t m, int c)
{
    double sums[2 * 64];
    float mean[64], invstd[64], mean_rest[64];
    k->bn_stats(sums, x, m, c);
    for (int j = 0; j < c; j++) {
        double mu = sums[j] / (double)m, var = sums[c + j] / (double)m - mu * mu;
        if (var < 0) var = 0;
        mean[j] = (float)mu;
        mean_rest[j] = (float)(mu - mean[j]);
        invstd[j] = (float)(1.0 / sqrt(var + eps));
    }
    k->bn_norm_fwd(y, x, mean, invstd, gamma, beta, NULL, false, m, c);
    k->bn_stats_bwd(sums, dy, NULL, x, mean, invstd, m, c, NULL);
    for (int j = 0; j < c; j++) {
        sums[c + j] -= (double)mean_rest[j] * invstd[j] * sums[j];
        dbeta[j] = (float)sums[j], dgamma[j] = (float)sums[c + j];
    }
    k->bn_bwd_data(dx, dy, NULL, x, mean, invstd, sums, gamma, (double)m, m, c);
}

/*
 * Inputs whose per-channel mean is 20 and 100 times their standard deviation
 * (the deviations themselves spread from 1/4 to 4), and an upstream gradient
 * with mean 1: forward output, dgamma, dbeta and dx from both tables within
 * 1e-4 of the double-precision batch norm (relative, or absolute below 1).
 * Float sums of x and x^2 lose about (mean/std)^2 times float's precision to
 * the cancellation in E[x^2]-E[x]^2, so this fails for a fast kernel that
 * accumulates them uncentred in float; and dgamma fails without the
 * correction for the float mean.
 * The shapes: a partial run of rows, one full run of 32 rows of 64 features
 * (a linear layer's batch), many runs, and a split over the team.
 */
static double off_centre; /* mean/std of the inputs of body_batch_norm_off_centre */

static void body_batch_norm_off_centre(void)
{
    static const struct {
        int64_t m;
        int c;
    } shapes[] = {{20, 3}, {32, 64}, {4096, 16}, {9001, 37}};
    const kernels_table *tables[] = {ref, cpu};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t m = shapes[s].m, n = m * shapes[s].c;
        int c = shapes[s].c;
        float *x = buf(n, 17), *dy = buf(n, 18), *g = buf(c, 19), *b = buf(c, 20);
        for (int j = 0; j < c; j++) {
            double sd = 0.25 * pow(2.0, j % 5);
            /* buf() is uniform on [-2, 2): standard deviation 2/sqrt(3) */
            for (int64_t i = 0; i < m; i++)
                x[i * c + j] = (float)(sd * (off_centre + x[i * c + j] * sqrt(3.0) / 2));
        }
        for (int64_t i = 0; i < n; i++)
            dy[i] += 1.0f;
        float *want[4], *got[4];
        int64_t len[4] = {n, c, c, n};
        const char *what[4] = {"y", "dgamma", "dbeta", "dx"};
        for (int q = 0; q < 4; q++)
            want[q] = buf(len[q], 0), got[q] = buf(len[q], 0);
        tu_batch_norm_double(want[0], want[1], want[2], want[3], x, dy, g, b, 1e-5, m, c);
        for (int k = 0; k < 2; k++) {
            bn_by_table(tables[k], got[0], got[1], got[2], got[3], x, dy, g, b, 1e-5f, m, c);
            for (int q = 0; q < 4; q++) {
                double d = tu_max_rel_diff(got[q], want[q], len[q]);
                if (!(d < 1e-4))
                    fail_msg("batch norm %s, %s table, mean/std %g, [%lld, %d]: %g from double",
                             what[q], tables[k]->name, off_centre, (long long)m, c, d);
            }
        }
        for (int q = 0; q < 4; q++)
            rp_free(want[q]), rp_free(got[q]);
        rp_free(x), rp_free(dy), rp_free(g), rp_free(b);
    }
}

static void test_batch_norm_mean_20_std(void **state)
{
    (void)state;
    off_centre = 20;
    tu_for_each_team(body_batch_norm_off_centre);
}

static void test_batch_norm_mean_100_std(void **state)
{
    (void)state;
    off_centre = 100;
    tu_for_each_team(body_batch_norm_off_centre);
}

static void body_pooling_images(void)
{
    int shapes[][4] = {{1, 1, 1, 1}, {2, 3, 5, 3}, {3, 7, 7, 16}, {8, 8, 8, 64}};
    for (int s = 0; s < 4; s++) {
        int n = shapes[s][0], h = shapes[s][1], w = shapes[s][2], c = shapes[s][3];
        int64_t big = (int64_t)n * h * w * c;
        float *x = buf(big, 15), *y1 = buf(big, 0), *y2 = buf(big, 0);
        float *g = buf((int64_t)n * c, 16), *s1 = buf((int64_t)n * c, 0),
              *s2 = buf((int64_t)n * c, 0);
        ref->gap_fwd(s1, x, n, h * w, c);
        cpu->gap_fwd(s2, x, n, h * w, c);
        tu_check_close(s2, s1, (int64_t)n * c, TOL, "gap_fwd");
        ref->gap_bwd(y1, g, n, h * w, c);
        cpu->gap_bwd(y2, g, n, h * w, c);
        tu_check_close(y2, y1, big, TOL, "gap_bwd");
        rp_free(x), rp_free(y1), rp_free(y2), rp_free(g), rp_free(s1), rp_free(s2);
    }
}

static void test_pooling_images(void **state)
{
    (void)state;
    tu_for_each_team(body_pooling_images);
}

/* Counts this process's threads. */
static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/*
 * The team size is honoured by oneDNN and by our loops: with 1 thread, a
 * large convolution and GEMM run without starting any thread; with 2 the
 * OpenMP pool has grown to exactly 2. Runs first in a fresh process, before
 * any other test has started a pool.
 */
static void test_thread_count_honoured(void **state)
{
    (void)state;
    if (thread_count() != 1) skip();
    rp_kernels_set_threads(1);
    assert_int_equal(rp_kernels_get_threads(), 1);
    assert_int_equal(omp_get_max_threads(), 1);
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 8, 32, 32, 16, 16, 3, 3, 1, 1), RP_OK);
    int64_t nx = 8 * 32 * 32 * 16, nw = 16 * 9 * 16;
    float *x = buf(nx, 1), *w = buf(nw, 2), *y = buf(nx, 3), *dw = buf(nw, 4);
    float *a = buf(256 * 256, 5), *c = buf(256 * 256, 6);
    assert_int_equal(cpu->conv2d_fwd(y, x, w, NULL, &d), RP_OK);
    assert_int_equal(cpu->conv2d_bwd_weights(dw, NULL, y, x, &d), RP_OK);
    cpu->gemm(false, false, 256, 256, 256, 1.0f, a, 256, a, 256, 0.0f, c, 256);
    cpu->act_fwd(y, x, nx, RP_ACT_RELU, 0);
    assert_int_equal(thread_count(), 1);

    rp_kernels_set_threads(2);
    assert_int_equal(rp_kernels_get_threads(), 2);
    assert_int_equal(cpu->conv2d_fwd(y, x, w, NULL, &d), RP_OK);
    cpu->gemm(false, false, 256, 256, 256, 1.0f, a, 256, a, 256, 0.0f, c, 256);
    assert_int_equal(thread_count(), 2);
    rp_kernels_set_threads(1);
    rp_free(x), rp_free(w), rp_free(y), rp_free(dw), rp_free(a), rp_free(c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_count_honoured),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_activations_wide_range),
        cmocka_unit_test(test_binary_scale_reduce),
        cmocka_unit_test(test_batch_norm_kernels),
        cmocka_unit_test(test_batch_norm_mean_20_std),
        cmocka_unit_test(test_batch_norm_mean_100_std),
        cmocka_unit_test(test_pooling_images),
    };
    return tu_run_group_tests(argc, argv, tests, setup, NULL);
}
