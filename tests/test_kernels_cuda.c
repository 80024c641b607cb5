/*
 * test_kernels_cuda.c - the CUDA kernel table (RP_KERNELS=cuda) against the reference table:
 * every slot runs on both with the same inputs (uploaded to the device for cuda) and the results
 * are compared, within the tolerances the cpu table's tests use (element-wise 1e-5, GEMM and
 * convolution 1e-4 relative to max(1, |reference|), bf16-stored outputs one bf16 step), bit for
 * bit where the contract fixes the bits (casts, argmax, the checksum, the memory slots).
 *
 * Three programs in one (CTest runs the first two; `probe` is tests/cuda_run.sh's question):
 *  - `test_kernels_cuda`: the comparisons. Without a usable GPU (or in a build without the CUDA
 *    table) it prints "SKIP: <why>" and exits 77, which CTest reports as skipped.
 *  - `test_kernels_cuda absent`: what a machine without a GPU sees: RP_KERNELS=cuda is refused
 *    by rp_replicator_create() with a message naming the variable and the reason, nothing
 *    crashes, and (in a build with the table) every slot of the table is filled. Exits 77 where
 *    a GPU is present.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "kernels/kernels.h"

#define TOL      1e-5        /* element-wise (test_kernels_elementwise.c) */
#define TOL_GEMM 1e-4        /* GEMM and convolution (test_kernels_conv.c) */
#define TOL_BF16 (1.0 / 128) /* one bf16 step (2^-8) of an output rounded to bf16, twice */

static const kernels_table *R; /* the reference */
static const kernels_table *G; /* the GPU */

/* ---- device buffers: every one is freed at the end of its test ---- */

#define LIVE_MAX 256
static struct {
    void *p;
    size_t bytes;
} live[LIVE_MAX];
static int nlive;

static void *dev_alloc(size_t bytes)
{
    void *p = G->mem_alloc(bytes);
    assert_non_null(p);
    assert_true(nlive < LIVE_MAX);
    live[nlive].p = p;
    live[nlive].bytes = bytes;
    nlive++;
    return p;
}

static void *up(const void *host, size_t bytes)
{
    void *p = dev_alloc(bytes);
    G->mem_upload(p, host, bytes);
    return p;
}

static void *down(const void *dev, size_t bytes)
{
    void *h = malloc(bytes);
    assert_non_null(h);
    G->mem_download(h, dev, bytes);
    return h;
}

static void free_all(void)
{
    G->mem_sync();
    for (int i = 0; i < nlive; i++)
        G->mem_free(live[i].p, live[i].bytes);
    nlive = 0;
    G->mem_sync();
}

#define UPF(h, n) ((float *)up((h), (size_t)(n) * sizeof(float)))

static float *rnd(int64_t n, uint64_t seed, float lo, float hi)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    assert_non_null(x);
    tu_fill(x, n, seed, lo, hi);
    return x;
}

static float *dup(const float *x, int64_t n)
{
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

/*
 * The device's n floats at dev against the reference's want: the largest |got - want| /
 * max(1, |want|) must stay within tol (a NaN anywhere fails); tol 0 asks for the same bits.
 * Bitwise checks are kept to what involves no multiply-add: the host compiler may fuse the
 * reference's (GCC contracts a*b+c at -O3 where the CPU has FMA), the CUDA objects never do.
 */
static void check(const float *want, const float *dev, int64_t n, double tol, const char *what)
{
    float *got = down(dev, (size_t)n * sizeof *got);
    if (tol == 0) {
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
                fail_msg("%s: element %lld: cuda %.9g, reference %.9g (bits expected equal)", what,
                         (long long)i, got[i], want[i]);
    } else {
        double worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = got[i] == want[i]
                           ? 0 /* infinities too */
                           : fabs((double)got[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
            if (!(d <= worst)) worst = d, at = i;
        }
        if (!(worst <= tol))
            fail_msg("%s: element %lld: cuda %.9g, reference %.9g: difference %g > %g", what,
                     (long long)at, got[at], want[at], worst, tol);
    }
    free(got);
}

/* bf16 storage against the reference's, widened: within tol as check() measures it. */
static void check_bf16(const rp_bf16 *want, const rp_bf16 *dev, int64_t n, double tol,
                       const char *what)
{
    rp_bf16 *got = down(dev, (size_t)n * sizeof *got);
    float *w = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
    rp_bf16_to_f32_array(w, want, (size_t)n);
    rp_bf16_to_f32_array(g, got, (size_t)n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] == w[i] ? 0 : fabs((double)g[i] - w[i]) / fmax(1.0, fabs((double)w[i]));
        if (!(d <= worst)) worst = d;
    }
    if (!(worst <= tol)) fail_msg("%s: difference %g > %g", what, worst, tol);
    free(w), free(g), free(got);
}

static void check_doubles(const double *want, const double *dev, int64_t n, double tol,
                          const char *what)
{
    double *got = down(dev, (size_t)n * sizeof *got);
    for (int64_t i = 0; i < n; i++) {
        double d = got[i] == want[i] ? 0 : fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(d <= tol))
            fail_msg("%s: element %lld: cuda %.17g, reference %.17g", what, (long long)i, got[i],
                     want[i]);
    }
    free(got);
}

static void check_bits(const void *want, const void *dev, size_t bytes, const char *what)
{
    void *got = down(dev, bytes);
    if (memcmp(got, want, bytes) != 0) fail_msg("%s: not bit for bit the reference's", what);
    free(got);
}

/* ---- memory ---- */

static void test_memory(void **state)
{
    (void)state;
    assert_false(G->host_storage);
    const int64_t n = 1000003;
    float *x = rnd(n, 1, -1, 1);
    float *d = UPF(x, n);
    check_bits(x, d, (size_t)n * 4, "upload then download");
    float *e = dev_alloc((size_t)n * 4);
    G->mem_copy(e, d, (size_t)n * 4);
    check_bits(x, e, (size_t)n * 4, "mem_copy");
    float *want = malloc((size_t)n * 4);
    for (uint32_t pattern = 0; pattern < 3; pattern++) {
        uint32_t bits = pattern == 0 ? 0 : pattern == 1 ? 0x7fc00000u : 0x3fc00000u;
        for (int64_t i = 0; i < n; i++)
            memcpy(&want[i], &bits, 4);
        G->mem_fill(e, bits, (size_t)n * 4);
        check_bits(want, e, (size_t)n * 4, "mem_fill");
    }
    /* A small fill inside a larger buffer leaves the rest alone. */
    G->mem_upload(e, x, (size_t)n * 4);
    G->mem_fill(e + 5, 0, 12);
    memcpy(want, x, (size_t)n * 4);
    memset(want + 5, 0, 12);
    check_bits(want, e, (size_t)n * 4, "partial mem_fill");
    G->mem_sync();
    free(want);
    free(x);
    free_all();
}

/* ---- GEMM ---- */

static void gemm_case(bool ta, bool tb, int m, int n, int k, float alpha, float beta, bool bf16)
{
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    int64_t na = (int64_t)(ta ? k : m) * lda, nb = (int64_t)(tb ? n : k) * ldb,
            nc = (int64_t)m * ldc;
    float *a = rnd(na, 10 + m, -1, 1), *b = rnd(nb, 20 + n, -1, 1), *c = rnd(nc, 30 + k, -1, 1);
    float *da = UPF(a, na), *db = UPF(b, nb), *dc = UPF(c, nc);
    char what[128];
    snprintf(what, sizeof what, "gemm%s ta=%d tb=%d %dx%dx%d alpha %g beta %g", bf16 ? "_bf16" : "",
             ta, tb, m, n, k, alpha, beta);
    if (bf16) {
        assert_int_equal(R->gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), RP_OK);
        assert_int_equal(G->gemm_bf16(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc),
                         RP_OK);
    } else {
        R->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        G->gemm(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    }
    check(c, dc, nc, TOL_GEMM, what);
    free(a);
    free(b);
    free(c);
    free_all();
}

static void test_gemm(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 33}, {130, 257, 96}, {512, 10, 640}};
    for (int bf = 0; bf < 2; bf++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 4; t++)
                gemm_case(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2],
                          s == 2 ? 0.5f : 1.0f, s == 3 ? 1.0f : 0.0f, bf);
}

/* ---- convolution ---- */

static void conv_case(int n, int h, int w, int c, int o, int k, int stride, int pad, bool bf16,
                      bool store_bf16, bool bias)
{
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, n, h, w, c, o, k, k, stride, pad), RP_OK);
    d.compute = bf16 ? RP_BF16 : RP_F32;
    d.x_type = d.y_type = store_bf16 ? RP_BF16 : RP_F32;
    int64_t nx = (int64_t)n * h * w * c, nw = (int64_t)o * k * k * c,
            ny = (int64_t)n * d.oh * d.ow * o;
    float *x = rnd(nx, 40 + c, -1, 1), *wt = rnd(nw, 50 + o, -0.5f, 0.5f), *b = rnd(o, 60, -1, 1),
          *dy = rnd(ny, 70, -1, 1);
    char what[160];
    snprintf(what, sizeof what, "conv %dx%dx%dx%d o=%d k=%d s=%d p=%d %s%s%s", n, h, w, c, o, k,
             stride, pad, bf16 ? "bf16" : "f32", store_bf16 ? " bf16 storage" : "",
             bias ? " bias" : "");
    /* Activations stored as bf16: the same (rounded) values on both sides. */
    void *hx = x;
    rp_bf16 *x16 = NULL;
    if (store_bf16) {
        x16 = malloc((size_t)nx * 2);
        rp_bf16_from_f32_array(x16, x, (size_t)nx);
        hx = x16;
    }
    size_t xbytes = (size_t)nx * (store_bf16 ? 2 : 4), ybytes = (size_t)ny * (store_bf16 ? 2 : 4);
    void *dx_in = up(hx, xbytes);
    float *dw = UPF(wt, nw), *dbias = UPF(b, o), *ddy = UPF(dy, ny);
    /* forward */
    void *y = malloc(ybytes), *dyv = dev_alloc(ybytes);
    assert_int_equal(R->conv2d_fwd(y, hx, wt, bias ? b : NULL, &d), RP_OK);
    assert_int_equal(G->conv2d_fwd(dyv, dx_in, dw, bias ? dbias : NULL, &d), RP_OK);
    {
        void *got = down(dyv, ybytes);
        float *gf = malloc((size_t)ny * 4), *wf = malloc((size_t)ny * 4);
        if (store_bf16) {
            rp_bf16_to_f32_array(gf, got, (size_t)ny);
            rp_bf16_to_f32_array(wf, y, (size_t)ny);
        } else {
            memcpy(gf, got, (size_t)ny * 4);
            memcpy(wf, y, (size_t)ny * 4);
        }
        char fw[200];
        snprintf(fw, sizeof fw, "%s forward", what);
        double worst = tu_max_rel_diff(gf, wf, ny);
        if (!(worst <= (store_bf16 ? TOL_BF16 : TOL_GEMM)))
            fail_msg("%s: difference %g", fw, worst);
        free(gf);
        free(wf);
        free(got);
    }
    /* backward data */
    float *dxr = malloc((size_t)nx * 4), *ddx = dev_alloc((size_t)nx * 4);
    assert_int_equal(R->conv2d_bwd_data(dxr, dy, wt, &d), RP_OK);
    assert_int_equal(G->conv2d_bwd_data(ddx, ddy, dw, &d), RP_OK);
    char bw[200];
    snprintf(bw, sizeof bw, "%s backward data", what);
    check(dxr, ddx, nx, TOL_GEMM, bw);
    /* backward weights and bias */
    float *dwr = malloc((size_t)nw * 4), *dbr = malloc((size_t)o * 4);
    float *ddw = dev_alloc((size_t)nw * 4), *ddb = dev_alloc((size_t)o * 4);
    assert_int_equal(R->conv2d_bwd_weights(dwr, dbr, dy, hx, &d), RP_OK);
    assert_int_equal(G->conv2d_bwd_weights(ddw, ddb, ddy, dx_in, &d), RP_OK);
    snprintf(bw, sizeof bw, "%s backward weights", what);
    check(dwr, ddw, nw, TOL_GEMM, bw);
    snprintf(bw, sizeof bw, "%s bias gradient", what);
    check(dbr, ddb, o, TOL_GEMM, bw);
    free(x);
    free(x16);
    free(wt);
    free(b);
    free(dy);
    free(y);
    free(dxr);
    free(dwr);
    free(dbr);
    free_all();
}

static void test_conv(void **state)
{
    (void)state;
    for (int bf = 0; bf < 2; bf++) {
        conv_case(2, 8, 8, 16, 16, 3, 1, 1, bf, false, true);
        conv_case(3, 9, 7, 8, 24, 3, 2, 1, bf, false, false);
        conv_case(2, 8, 8, 16, 32, 1, 2, 0, bf, false, false);
        conv_case(2, 15, 15, 3, 16, 7, 2, 3, bf, false, true);
        conv_case(4, 6, 6, 5, 7, 3, 1, 0, bf, bf, bf);
        /* 1x1, stride 1, no padding: the GEMM reads x in place (f32 x; bf16 x with bf16) */
        conv_case(3, 6, 5, 16, 24, 1, 1, 0, bf, bf, false);
        conv_case(3, 6, 5, 16, 24, 1, 1, 0, bf, false, true);
    }
    /* A descriptor that does not add up is refused before anything is queued. */
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 1, 4, 4, 1, 1, 3, 3, 1, 1), RP_OK);
    d.oh = 7;
    float one = 1;
    float *p = UPF(&one, 1);
    assert_int_equal(G->conv2d_fwd(p, p, p, NULL, &d), RP_ERR_SHAPE);
    free_all();
}

/* ---- pooling ---- */

static void test_pool(void **state)
{
    (void)state;
    const int cases[][7] = {{2, 8, 8, 3, 3, 2, 1}, {1, 7, 9, 4, 2, 2, 0}, {2, 5, 5, 2, 3, 1, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        kernels_pool_desc d;
        assert_int_equal(kernels_pool_desc_init(&d, cases[t][0], cases[t][1], cases[t][2],
                                                cases[t][3], cases[t][4], cases[t][5], cases[t][6]),
                         RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.c;
        float *x = rnd(nx, 80 + t, -1, 1), *dy = rnd(ny, 90 + t, -1, 1);
        float *gx = UPF(x, nx), *gdy = UPF(dy, ny);
        float *y = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4);
        int32_t *am = malloc((size_t)ny * 4);
        float *gy = dev_alloc((size_t)ny * 4), *gdx = dev_alloc((size_t)nx * 4);
        int32_t *gam = dev_alloc((size_t)ny * 4);
        assert_int_equal(R->maxpool_fwd(y, am, x, &d), RP_OK);
        assert_int_equal(G->maxpool_fwd(gy, gam, gx, &d), RP_OK);
        check_bits(y, gy, (size_t)ny * 4, "maxpool_fwd");
        check_bits(am, gam, (size_t)ny * 4, "maxpool_fwd argmax");
        /* bf16 values: the same winners, their own bits */
        kernels_pool_desc dh = d;
        dh.type = RP_BF16;
        rp_bf16 *xh = malloc((size_t)nx * 2), *yh = malloc((size_t)ny * 2);
        R->cast_f32_bf16(xh, x, nx);
        rp_bf16 *gxh = up(xh, (size_t)nx * 2), *gyh = dev_alloc((size_t)ny * 2);
        assert_int_equal(R->maxpool_fwd(yh, am, xh, &dh), RP_OK);
        assert_int_equal(G->maxpool_fwd(gyh, gam, gxh, &dh), RP_OK);
        check_bits(yh, gyh, (size_t)ny * 2, "maxpool_fwd bf16");
        check_bits(am, gam, (size_t)ny * 4, "maxpool_fwd bf16 argmax");
        free(xh), free(yh);
        assert_int_equal(R->maxpool_fwd(y, am, x, &d), RP_OK); /* the f32 argmax again, below */
        assert_int_equal(R->maxpool_bwd(dx, am, dy, &d), RP_OK);
        assert_int_equal(G->maxpool_bwd(gdx, gam, gdy, &d), RP_OK);
        check_bits(dx, gdx, (size_t)nx * 4, "maxpool_bwd");
        assert_int_equal(R->avgpool_fwd(y, x, &d), RP_OK);
        assert_int_equal(G->avgpool_fwd(gy, gx, &d), RP_OK);
        check(y, gy, ny, TOL, "avgpool_fwd");
        assert_int_equal(R->avgpool_bwd(dx, dy, &d), RP_OK);
        assert_int_equal(G->avgpool_bwd(gdx, gdy, &d), RP_OK);
        check(dx, gdx, nx, TOL, "avgpool_bwd");
        free(x);
        free(dy);
        free(y);
        free(dx);
        free(am);
        free_all();
    }
}

/* ---- batch norm ---- */

static void bn_case(int64_t m, int c, bool bf16)
{
    const int64_t n = m * c;
    float *x = rnd(n, 100, -2, 3), *dy = rnd(n, 101, -1, 1), *res = rnd(n, 102, -1, 1);
    float *gamma = rnd(c, 103, 0.5f, 1.5f), *beta = rnd(c, 104, -0.5f, 0.5f);
    rp_bf16 *x16 = malloc((size_t)n * 2), *res16 = malloc((size_t)n * 2);
    rp_bf16_from_f32_array(x16, x, (size_t)n);
    rp_bf16_from_f32_array(res16, res, (size_t)n);
    float *gx = UPF(x, n), *gdy = UPF(dy, n), *gres = UPF(res, n), *ggamma = UPF(gamma, c),
          *gbeta = UPF(beta, c);
    rp_bf16 *gx16 = up(x16, (size_t)n * 2), *gres16 = up(res16, (size_t)n * 2);
    /* statistics */
    double *sums = malloc((size_t)4 * c * sizeof(double)), *gsums = dev_alloc((size_t)4 * c * 8);
    if (bf16) {
        R->bn_stats_bf16(R, sums, x16, m, c);
        G->bn_stats_bf16(G, gsums, gx16, m, c);
    } else {
        R->bn_stats(sums, x, m, c);
        G->bn_stats(gsums, gx, m, c);
    }
    check_doubles(sums, gsums, 2 * c, 1e-9, "bn_stats");
    float *mean = malloc((size_t)c * 4), *invstd = malloc((size_t)c * 4),
          *rest = malloc((size_t)c * 4), *rm = rnd(c, 105, -1, 1), *rv = rnd(c, 106, 0.5f, 2);
    float *gmean = dev_alloc((size_t)c * 4), *ginvstd = dev_alloc((size_t)c * 4),
          *grest = dev_alloc((size_t)c * 4), *grm = UPF(rm, c), *grv = UPF(rv, c);
    R->bn_train_stats(mean, invstd, rest, rm, rv, sums, (double)m, 1e-5f, 0.1f, c);
    G->mem_upload(gsums, sums, (size_t)2 * c * 8); /* the same sums on both sides */
    G->bn_train_stats(gmean, ginvstd, grest, grm, grv, gsums, (double)m, 1e-5f, 0.1f, c);
    check(mean, gmean, c, 0, "bn_train_stats mean");
    check(invstd, ginvstd, c, 1e-6, "bn_train_stats invstd");
    check(rest, grest, c, 1e-7, "bn_train_stats mean_rest");
    check(rm, grm, c, 1e-7, "bn_train_stats running_mean");
    check(rv, grv, c, 1e-7, "bn_train_stats running_var");
    /* forward, with and without the fused ReLU and the residual */
    for (int v = 0; v < 3; v++) {
        bool relu = v > 0, withres = v == 2;
        if (bf16) {
            rp_bf16 *y16 = malloc((size_t)n * 2), *gy16 = dev_alloc((size_t)n * 2);
            R->bn_norm_fwd_bf16(R, y16, x16, mean, invstd, gamma, beta, withres ? res16 : NULL,
                                relu, m, c);
            G->bn_norm_fwd_bf16(G, gy16, gx16, gmean, ginvstd, ggamma, gbeta,
                                withres ? gres16 : NULL, relu, m, c);
            check_bf16(y16, gy16, n, TOL_BF16, "bn_norm_fwd_bf16");
            free(y16);
        } else {
            float *y = malloc((size_t)n * 4), *gy = dev_alloc((size_t)n * 4);
            R->bn_norm_fwd(y, x, mean, invstd, gamma, beta, withres ? res : NULL, relu, m, c);
            G->bn_norm_fwd(gy, gx, gmean, ginvstd, ggamma, gbeta, withres ? gres : NULL, relu, m,
                           c);
            check(y, gy, n, TOL, "bn_norm_fwd");
            free(y);
        }
    }
    /* backward through the fused ReLU: its output y masks dy */
    float *y = malloc((size_t)n * 4), *gy = dev_alloc((size_t)n * 4);
    rp_bf16 *y16 = malloc((size_t)n * 2), *gy16 = dev_alloc((size_t)n * 2);
    R->bn_norm_fwd(y, x, mean, invstd, gamma, beta, NULL, true, m, c);
    G->mem_upload(gy, y, (size_t)n * 4);
    rp_bf16_from_f32_array(y16, y, (size_t)n);
    G->mem_upload(gy16, y16, (size_t)n * 2);
    float *gout = malloc((size_t)n * 4), *ggout = dev_alloc((size_t)n * 4);
    if (bf16) {
        R->bn_stats_bwd_bf16(R, sums, dy, y16, x16, mean, invstd, m, c, gout);
        G->bn_stats_bwd_bf16(G, gsums, gdy, gy16, gx16, gmean, ginvstd, m, c, ggout);
    } else {
        R->bn_stats_bwd(sums, dy, y, x, mean, invstd, m, c, gout);
        G->bn_stats_bwd(gsums, gdy, gy, gx, gmean, ginvstd, m, c, ggout);
    }
    check_doubles(sums, gsums, 2 * c, 1e-9, "bn_stats_bwd");
    check(gout, ggout, n, 0, "bn_stats_bwd g_out");
    G->mem_upload(gsums, sums, (size_t)2 * c * 8);
    float *dx = malloc((size_t)n * 4), *gdx = dev_alloc((size_t)n * 4);
    if (bf16) {
        R->bn_bwd_data_bf16(R, dx, RP_F32, dy, y16, x16, mean, invstd, sums, gamma, (double)m, m,
                            c);
        G->bn_bwd_data_bf16(G, gdx, RP_F32, gdy, gy16, gx16, gmean, ginvstd, gsums, ggamma,
                            (double)m, m, c);
    } else {
        R->bn_bwd_data(dx, dy, y, x, mean, invstd, sums, gamma, (double)m, m, c);
        G->bn_bwd_data(gdx, gdy, gy, gx, gmean, ginvstd, gsums, ggamma, (double)m, m, c);
    }
    check(dx, gdx, n, TOL, "bn_bwd_data");
    /* the backward sums' correction, and inference-mode statistics */
    float *local = malloc((size_t)2 * c * 4), *glocal = dev_alloc((size_t)2 * c * 4);
    R->bn_bwd_sums(local, sums, rest, invstd, c);
    G->bn_bwd_sums(glocal, gsums, grest, ginvstd, c);
    check_doubles(sums, gsums, 2 * c, 1e-12, "bn_bwd_sums sums");
    check(local, glocal, 2 * c, 1e-6, "bn_bwd_sums local");
    R->bn_eval_stats(mean, invstd, rest, rm, rv, 1e-5f, c);
    G->bn_eval_stats(gmean, ginvstd, grest, grm, grv, 1e-5f, c);
    check(mean, gmean, c, 0, "bn_eval_stats mean");
    check(invstd, ginvstd, c, 0, "bn_eval_stats invstd");
    free(x), free(dy), free(res), free(gamma), free(beta), free(x16), free(res16), free(sums);
    free(mean), free(invstd), free(rest), free(rm), free(rv), free(y), free(y16), free(gout);
    free(dx), free(local);
    free_all();
}

static void test_batch_norm(void **state)
{
    (void)state;
    for (int bf = 0; bf < 2; bf++) {
        bn_case(2, 3, bf); /* (2 rows: the running variance's count/(count-1) is finite) */
        bn_case(517, 16, bf);
        bn_case(128 * 64, 64, bf);
    }
}

/* ---- element-wise, broadcasting, reductions, data movement ---- */

static void test_elementwise(void **state)
{
    (void)state;
    const int64_t n = 100003;
    float *x = rnd(n, 200, -3, 3), *x2 = rnd(n, 201, 0.1f, 4), *dy = rnd(n, 202, -1, 1);
    float *gx = UPF(x, n), *gx2 = UPF(x2, n), *gdy = UPF(dy, n);
    float *y = malloc((size_t)n * 4), *gy = dev_alloc((size_t)n * 4);
    float *dx = malloc((size_t)n * 4), *gdx = dev_alloc((size_t)n * 4);
    for (int a = RP_ACT_RELU; a <= RP_ACT_RECIPROCAL; a++) {
        /* sqrt and reciprocal on positive inputs */
        const float *in = a >= RP_ACT_SQRT ? x2 : x;
        const float *gin = a >= RP_ACT_SQRT ? gx2 : gx;
        R->act_fwd(y, in, n, (kernels_act)a, 0.2f);
        G->act_fwd(gy, gin, n, (kernels_act)a, 0.2f);
        char what[64];
        snprintf(what, sizeof what, "act_fwd %d", a);
        check(y, gy, n, TOL, what);
        G->mem_upload(gy, y, (size_t)n * 4); /* backward from the same y */
        R->act_bwd(dx, dy, y, in, n, (kernels_act)a, 0.2f);
        G->act_bwd(gdx, gdy, gy, gin, n, (kernels_act)a, 0.2f);
        snprintf(what, sizeof what, "act_bwd %d", a);
        check(dx, gdx, n, TOL, what);
    }
    for (int op = RP_BIN_ADD; op <= RP_BIN_DIV; op++) {
        R->binary(y, x, x2, n, 1000, (kernels_binop)op);
        G->binary(gy, gx, gx2, n, 1000, (kernels_binop)op);
        check(y, gy, n, 0, "binary");
        /* in place */
        memcpy(dx, x, (size_t)n * 4);
        G->mem_copy(gdx, gx, (size_t)n * 4);
        R->binary(dx, dx, x2, n, n, (kernels_binop)op);
        G->binary(gdx, gdx, gx2, n, n, (kernels_binop)op);
        check(dx, gdx, n, 0, "binary in place");
    }
    /* broadcasting and the axis reductions over a 4-D shape */
    const int64_t shape[4] = {3, 5, 7, 11}, total = 3 * 5 * 7 * 11;
    for (unsigned mask = 0; mask < 16; mask++) {
        int64_t bstride[4], s = 1, nout = 1;
        for (int d = 3; d >= 0; d--) {
            bstride[d] = mask & (1u << d) ? 0 : s;
            if (!(mask & (1u << d))) {
                s *= shape[d];
                nout *= shape[d];
            }
        }
        R->binary_bcast(y, x, x2, shape, bstride, RP_BIN_MUL);
        G->binary_bcast(gy, gx, gx2, shape, bstride, RP_BIN_MUL);
        check(y, gy, total, 0, "binary_bcast");
        float *r = dup(x2, nout);
        R->reduce_axes(r, x, shape, mask, 0.5f, mask & 1);
        G->mem_upload(gdx, x2, (size_t)nout * 4);
        G->reduce_axes(gdx, gx, shape, mask, 0.5f, mask & 1);
        check(r, gdx, nout, TOL, "reduce_axes");
        memcpy(y, x2, (size_t)total * 4);
        G->mem_upload(gy, x2, (size_t)total * 4);
        R->expand_axes(y, x, shape, mask, 2.0f, mask & 2);
        G->expand_axes(gy, gx, shape, mask, 2.0f, mask & 2);
        check(y, gy, total, TOL, "expand_axes");
        free(r);
    }
    R->clamp_fwd(y, x, n, -1, 2);
    G->clamp_fwd(gy, gx, n, -1, 2);
    check(y, gy, n, 0, "clamp_fwd");
    R->clamp_bwd(dx, dy, x, n, -1, 2);
    G->clamp_bwd(gdx, gdy, gx, n, -1, 2);
    check(dx, gdx, n, 0, "clamp_bwd");
    /* select_eq_acc: y equals x at the clamp's untouched points */
    memcpy(dx, x2, (size_t)n * 4);
    G->mem_upload(gdx, x2, (size_t)n * 4);
    R->clamp_fwd(y, x, n, -1, 2);
    G->mem_upload(gy, y, (size_t)n * 4);
    R->select_eq_acc(dx, dy, x, y, n);
    G->select_eq_acc(gdx, gdy, gx, gy, n);
    check(dx, gdx, n, 0, "select_eq_acc");
    /* scalars back to the host */
    double s1 = R->sum(x, n), s2 = G->sum(gx, n);
    assert_true(fabs(s1 - s2) <= 1e-9 * (1 + fabs(s1)) + 1e-9 * n);
    s1 = R->sum_squares(x, n), s2 = G->sum_squares(gx, n);
    assert_true(fabs(s1 - s2) <= 1e-12 * s1 + 1e-9);
    assert_true(G->sum(gx, 0) == 0.0);
    /* scaling and accumulation */
    memcpy(y, x2, (size_t)n * 4);
    G->mem_upload(gy, x2, (size_t)n * 4);
    R->scale_inplace(y, 0.3f, n);
    G->scale_inplace(gy, 0.3f, n);
    R->scale(y, x, 1.5f, n, true);
    G->scale(gy, gx, 1.5f, n, true);
    R->add_inplace(y, dy, n);
    G->add_inplace(gy, gdy, n);
    R->mul(y, x, dy, n, true);
    G->mul(gy, gx, gdy, n, true);
    R->add_scalar(y, 0.25f, n);
    G->add_scalar(gy, 0.25f, n);
    check(y, gy, n, TOL, "scale_inplace, scale, add_inplace, mul, add_scalar");
    R->scale(y, x, 1.5f, n, false);
    G->scale(gy, gx, 1.5f, n, false);
    R->mul(dx, x, dy, n, false);
    G->mul(gdx, gx, gdy, n, false);
    check(y, gy, n, TOL, "scale");
    check(dx, gdx, n, TOL, "mul");
    /* rows */
    for (int acc = 0; acc < 2; acc++) {
        float *r = dup(x2, 1000);
        G->mem_upload(gy, x2, 1000 * 4);
        R->reduce_rows(r, x, 100, 1000, acc);
        G->reduce_rows(gy, gx, 100, 1000, acc);
        check(r, gy, 1000, TOL, "reduce_rows");
        free(r);
    }
    /* columns: a [50, 40] block into columns [7, 47) of [50, 60], and back */
    memcpy(y, x2, 3000 * 4);
    G->mem_upload(gy, x2, 3000 * 4);
    R->copy_cols(y, 60, 7, x, 50, 40);
    G->copy_cols(gy, 60, 7, gx, 50, 40);
    check(y, gy, 3000, 0, "copy_cols");
    for (int acc = 0; acc < 2; acc++) {
        memcpy(dx, x2, 2000 * 4);
        G->mem_upload(gdx, x2, 2000 * 4);
        R->gather_cols(dx, x, 60, 7, 50, 40, acc);
        G->gather_cols(gdx, gx, 60, 7, 50, 40, acc);
        check(dx, gdx, 2000, 0, "gather_cols");
    }
    /* upsampling and global average pooling over [3, 5, 6, 7] */
    R->upsample2x_fwd(y, x, RP_F32, 3, 5, 6, 7);
    G->upsample2x_fwd(gy, gx, RP_F32, 3, 5, 6, 7);
    check(y, gy, 3 * 10 * 12 * 7, 0, "upsample2x_fwd");
    R->upsample2x_bwd(dx, x, 3, 5, 6, 7);
    G->upsample2x_bwd(gdx, gx, 3, 5, 6, 7);
    check(dx, gdx, 3 * 5 * 6 * 7, 0, "upsample2x_bwd");
    R->gap_fwd(y, x, 3, 30, 7);
    G->gap_fwd(gy, gx, 3, 30, 7);
    check(y, gy, 21, 0, "gap_fwd");
    R->gap_bwd(dx, x, 3, 30, 7);
    G->gap_bwd(gdx, gx, 3, 30, 7);
    check(dx, gdx, 3 * 30 * 7, 0, "gap_bwd");
    /* embeddings, with repeated indices */
    int32_t idx[9] = {3, 0, 3, 7, 1, 3, 0, 9, 2};
    int32_t *gidx = up(idx, sizeof idx);
    R->embedding_fwd(y, x, idx, 9, 16);
    G->embedding_fwd(gy, gx, gidx, 9, 16);
    check(y, gy, 9 * 16, 0, "embedding_fwd");
    memcpy(dx, x2, 160 * 4);
    G->mem_upload(gdx, x2, 160 * 4);
    R->embedding_bwd(dx, dy, idx, 9, 16);
    G->embedding_bwd(gdx, gdy, gidx, 9, 16);
    check(dx, gdx, 160, 0, "embedding_bwd");
    /* casts: every bf16 bit pattern widens, and rounding keeps the specials */
    rp_bf16 *all = malloc(65536 * 2);
    for (int i = 0; i < 65536; i++)
        all[i] = (rp_bf16)i;
    rp_bf16 *gall = up(all, 65536 * 2);
    float *wide = malloc(65536 * 4), *gwide = dev_alloc(65536 * 4);
    R->cast_bf16_f32(wide, all, 65536);
    G->cast_bf16_f32(gwide, gall, 65536);
    check_bits(wide, gwide, 65536 * 4, "cast_bf16_f32");
    const float specials[] = {0.0f,        -0.0f,       INFINITY, -INFINITY, NAN,
                              1.00390625f, 1.01171875f, 3.4e38f,  1e-40f,    -1e-45f};
    memcpy(wide, specials, sizeof specials);
    for (int i = 10; i < 65536; i++)
        wide[i] = x[i % n] * (float)(1 << (i % 20));
    G->mem_upload(gwide, wide, 65536 * 4);
    R->cast_f32_bf16(all, wide, 65536);
    G->cast_f32_bf16(gall, gwide, 65536);
    check_bits(all, gall, 65536 * 2, "cast_f32_bf16");
    /* the ReLU rounded into bf16, and bf16 upsampling (a copy of those): bit for bit */
    R->relu_fwd_bf16(all, wide, 65536);
    G->relu_fwd_bf16(gall, gwide, 65536);
    check_bits(all, gall, 65536 * 2, "relu_fwd_bf16");
    rp_bf16 *big = malloc(4 * 65536 * 2), *gbig = dev_alloc(4 * 65536 * 2);
    R->upsample2x_fwd(big, all, RP_BF16, 4, 32, 32, 16);
    G->upsample2x_fwd(gbig, gall, RP_BF16, 4, 32, 32, 16);
    check_bits(big, gbig, 4 * 65536 * 2, "upsample2x_fwd bf16");
    free(big);
    free(all), free(wide), free(x), free(x2), free(dy), free(y), free(dx);
    free_all();
}

/* ---- rows: layer norm, log-softmax, softmax cross-entropy ---- */

static void test_rows(void **state)
{
    (void)state;
    const int64_t rows = 67;
    const int d = 300;
    const int64_t n = rows * d;
    float *x = rnd(n, 300, -4, 4), *dy = rnd(n, 301, -1, 1), *gamma = rnd(d, 302, 0.5f, 1.5f),
          *beta = rnd(d, 303, -1, 1);
    float *gx = UPF(x, n), *gdy = UPF(dy, n), *ggamma = UPF(gamma, d), *gbeta = UPF(beta, d);
    float *y = malloc((size_t)n * 4), *gy = dev_alloc((size_t)n * 4);
    float *dx = malloc((size_t)n * 4), *gdx = dev_alloc((size_t)n * 4);
    float *mean = malloc(rows * 4), *rstd = malloc(rows * 4);
    float *gmean = dev_alloc(rows * 4), *grstd = dev_alloc(rows * 4);
    for (int affine = 0; affine < 2; affine++) {
        R->layernorm_fwd(y, mean, rstd, x, affine ? gamma : NULL, affine ? beta : NULL, rows, d,
                         1e-5f);
        G->layernorm_fwd(gy, gmean, grstd, gx, affine ? ggamma : NULL, affine ? gbeta : NULL, rows,
                         d, 1e-5f);
        check(y, gy, n, TOL, "layernorm_fwd");
        check(mean, gmean, rows, TOL, "layernorm_fwd mean");
        check(rstd, grstd, rows, TOL, "layernorm_fwd rstd");
        G->mem_upload(gmean, mean, rows * 4);
        G->mem_upload(grstd, rstd, rows * 4);
        float *dg = rnd(d, 304, -1, 1), *db = rnd(d, 305, -1, 1);
        float *gdg = UPF(dg, d), *gdb = UPF(db, d);
        R->layernorm_bwd(dx, affine ? dg : NULL, affine ? db : NULL, dy, x, mean, rstd,
                         affine ? gamma : NULL, rows, d);
        G->layernorm_bwd(gdx, affine ? gdg : NULL, affine ? gdb : NULL, gdy, gx, gmean, grstd,
                         affine ? ggamma : NULL, rows, d);
        check(dx, gdx, n, TOL, "layernorm_bwd dx");
        check(dg, gdg, d, TOL, "layernorm_bwd dgamma");
        check(db, gdb, d, TOL, "layernorm_bwd dbeta");
        free(dg), free(db);
    }
    R->log_softmax_fwd(y, x, rows, d);
    G->log_softmax_fwd(gy, gx, rows, d);
    check(y, gy, n, TOL, "log_softmax_fwd");
    G->mem_upload(gy, y, (size_t)n * 4);
    R->log_softmax_bwd(dx, dy, y, rows, d);
    G->log_softmax_bwd(gdx, gdy, gy, rows, d);
    check(dx, gdx, n, TOL, "log_softmax_bwd");
    /* cross-entropy: hard labels and soft targets (rows of dy made positive as weights) */
    int32_t labels[67];
    for (int i = 0; i < 67; i++)
        labels[i] = (i * 37) % d;
    int32_t *glabels = up(labels, sizeof labels);
    float *target = rnd(n, 306, 0, 1), *gtarget = UPF(target, n);
    for (int soft = 0; soft < 2; soft++) {
        double l1 = R->softmax_xent_fwd(y, x, soft ? NULL : labels, soft ? target : NULL, rows, d);
        double l2 =
            G->softmax_xent_fwd(gy, gx, soft ? NULL : glabels, soft ? gtarget : NULL, rows, d);
        assert_true(fabs(l1 - l2) <= 1e-9 * (1 + fabs(l1)));
        check(y, gy, n, TOL, "softmax_xent_fwd probs");
        G->mem_upload(gy, y, (size_t)n * 4);
        R->softmax_xent_bwd(dx, y, soft ? NULL : labels, soft ? target : NULL, 0.5f, rows, d);
        G->softmax_xent_bwd(gdx, gy, soft ? NULL : glabels, soft ? gtarget : NULL, 0.5f, rows, d);
        check(dx, gdx, n, TOL, "softmax_xent_bwd");
    }
    free(x), free(dy), free(gamma), free(beta), free(y), free(dx), free(mean), free(rstd);
    free(target);
    free_all();
}

/* ---- optimizers, scans, checksum, spectral norm ---- */

static void test_optim(void **state)
{
    (void)state;
    const int64_t n = 54321;
    float *w = rnd(n, 400, -1, 1), *g = rnd(n, 401, -1, 1), *m = rnd(n, 402, -1, 1),
          *v = rnd(n, 403, 0, 1);
    float *gw = UPF(w, n), *gg = UPF(g, n), *gm = UPF(m, n), *gv = UPF(v, n);
    /* The update rules' float operations are fixed by the contract: 1e-6 here, and bit for bit
       wherever the host compiler does not fuse multiply-adds (docs/gpu.md). */
    for (int variant = 0; variant < 5; variant++) {
        float mom = variant < 2 ? 0.0f : 0.9f, wd = variant == 1 || variant == 3 ? 1e-4f : 0;
        bool nest = variant == 4, first = variant == 2;
        R->sgd_update(w, m, g, n, 0.1f, mom, wd, nest, first);
        G->sgd_update(gw, gm, gg, n, 0.1f, mom, wd, nest, first);
        check(w, gw, n, 1e-6, "sgd_update w");
        check(m, gm, n, 1e-6, "sgd_update momentum");
    }
    for (int step = 1; step <= 3; step++) {
        R->adam_update(w, m, v, g, n, 0.9f, 0.999f, 1e-8f, 1e-4f, 0.999f, 1e-3f, 0.5f);
        G->adam_update(gw, gm, gv, gg, n, 0.9f, 0.999f, 1e-8f, 1e-4f, 0.999f, 1e-3f, 0.5f);
    }
    check(w, gw, n, 1e-6, "adam_update w");
    check(m, gm, n, 1e-6, "adam_update m");
    check(v, gv, n, 1e-6, "adam_update v");
    /* the checksum is the reference's function of the bits */
    G->mem_upload(gw, w, (size_t)n * 4);
    assert_true(R->checksum(w, n) == G->checksum(gw, n));
    assert_true(R->checksum(w, n - 3) == G->checksum(gw, n - 3));
    /* the first non-finite element, and its value */
    float val = 0;
    assert_int_equal(G->first_nonfinite(&val, gw, n), -1);
    const float bad[2] = {INFINITY, NAN};
    float *gbad = UPF(bad, 2);
    G->mem_copy(gw + 40000, gbad + 1, 4);
    G->mem_copy(gw + 777, gbad, 4);
    assert_int_equal(G->first_nonfinite(&val, gw, n), 777);
    assert_true(isinf(val));
    assert_int_equal(G->first_nonfinite(NULL, gw + 1000, n - 1000), 40000 - 1000);
    assert_int_equal(G->first_nonfinite(&val, gw, 777), -1);
    /* spectral norm: one power-iteration step, the forward and the backward */
    const int64_t rows = 48, cols = 75;
    float *sw = rnd(rows * cols, 404, -1, 1), *u = rnd(rows, 405, -1, 1),
          *sdy = rnd(rows * cols, 406, -1, 1), *sdw = rnd(rows * cols, 407, -1, 1);
    float *gsw = UPF(sw, rows * cols), *gu = UPF(u, rows), *gsdy = UPF(sdy, rows * cols),
          *gsdw = UPF(sdw, rows * cols);
    double *unew = malloc(rows * 8), *vv = malloc(cols * 8);
    double *gunew = dev_alloc(rows * 8), *gvv = dev_alloc(cols * 8);
    double s1 = R->sn_power(unew, vv, sw, u, rows, cols);
    double s2 = G->sn_power(gunew, gvv, gsw, gu, rows, cols);
    assert_true(fabs(s1 - s2) <= 1e-12 * s1);
    check_doubles(unew, gunew, rows, 1e-12, "sn_power u_new");
    check_doubles(vv, gvv, cols, 1e-12, "sn_power v");
    float *y = malloc(rows * cols * 4), *gy = dev_alloc(rows * cols * 4);
    float *uo = malloc(rows * 4), *guo = dev_alloc(rows * 4);
    R->sn_fwd(y, uo, unew, sw, s1, rows, cols);
    G->mem_upload(gunew, unew, rows * 8);
    G->mem_upload(gvv, vv, cols * 8);
    G->sn_fwd(gy, guo, gunew, gsw, s1, rows, cols);
    check(y, gy, rows * cols, TOL, "sn_fwd");
    check(uo, guo, rows, 0, "sn_fwd u");
    R->sn_bwd(sdw, unew, vv, sdy, sw, s1, rows, cols);
    G->sn_bwd(gsdw, gunew, gvv, gsdy, gsw, s1, rows, cols);
    check(sdw, gsdw, rows * cols, TOL, "sn_bwd");
    free(w), free(g), free(m), free(v), free(sw), free(u), free(sdy), free(sdw), free(unew);
    free(vv), free(y), free(uo);
    free_all();
}

/* ---- two threads, two streams ---- */

typedef struct {
    const float *a, *b;
    float *c;
    int n;
} gemm_job;

static void *gemm_thread(void *arg)
{
    gemm_job *j = arg;
    for (int rep = 0; rep < 20; rep++)
        G->gemm(false, false, j->n, j->n, j->n, 1.0f, j->a, j->n, j->b, j->n, 0.0f, j->c, j->n);
    G->mem_sync();
    return NULL;
}

static void test_streams(void **state)
{
    (void)state;
    const int n = 256;
    float *a = rnd((int64_t)n * n, 500, -1, 1), *b = rnd((int64_t)n * n, 501, -1, 1);
    float *c = malloc((size_t)n * n * 4);
    R->gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    gemm_job jobs[2];
    float *ga = UPF(a, (int64_t)n * n), *gb = UPF(b, (int64_t)n * n);
    G->mem_sync(); /* another thread's stream reads them */
    for (int t = 0; t < 2; t++)
        jobs[t] = (gemm_job){ga, gb, dev_alloc((size_t)n * n * 4), n};
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        assert_int_equal(pthread_create(&th[t], NULL, gemm_thread, &jobs[t]), 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        check(c, jobs[t].c, (int64_t)n * n, TOL_GEMM, "gemm on a second thread's stream");
    free(a), free(b), free(c);
    free_all();
}

/* ---- without a GPU ---- */

static void test_absent(void **state)
{
    (void)state;
    /* The table is refused with a reason... */
    assert_null(kernels_cuda());
    const char *why = rp_last_error();
    assert_true(strstr(why, "CUDA") != NULL);
    /* ...the run is refused naming the variable and the reason... */
    assert_string_equal(rp_env_get()->kernels, "cuda");
    rp_status st = kernels_check();
    assert_true(st == RP_ERR_BACKEND || st == RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("RP_KERNELS=cuda: ");
    tu_assert_error_contains("CUDA");
    rp_config cfg = rp_config_default();
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), st);
    assert_null(r);
    tu_assert_error_contains("RP_KERNELS=cuda: ");
    /* ...and whatever asks for the active table still gets one that works (the cpu table),
       leaving the caller's last error as it was, set or not. */
    RP_ERROR(RP_ERR_IO, "an earlier error of the caller's");
    const kernels_table *k = kernels_active();
    assert_non_null(k);
    assert_string_equal(k->name, "cpu");
    assert_int_equal(rp_last_status(), RP_ERR_IO);
    tu_assert_error_contains("an earlier error of the caller's");
    rp_error_clear();
    assert_ptr_equal(kernels_active(), k);
    assert_int_equal(rp_last_status(), RP_OK);
    /* In a build with the table, every slot is filled. */
    const kernels_table *t = kernels_cuda_table();
    if (!t) {
        assert_int_equal(st, RP_ERR_UNSUPPORTED);
        return;
    }
    assert_int_equal(st, RP_ERR_BACKEND);
    assert_string_equal(t->name, "cuda");
    assert_false(t->host_storage);
    typedef void (*slot_fn)(void);
    size_t span = sizeof(kernels_table) - offsetof(kernels_table, gemm);
    size_t nslots = span / sizeof(slot_fn);
    assert_true(nslots > 60);
    const char *s = (const char *)t + offsetof(kernels_table, gemm);
    for (size_t i = 0; i < nslots; i++) {
        slot_fn f;
        memcpy(&f, s + i * sizeof f, sizeof f);
        if (!f) fail_msg("cuda table: slot %zu (after name) is NULL", i);
    }
}

int main(int argc, char **argv)
{
    /* `probe`: exit 0 where the cuda table can run, 77 elsewhere (tests/cuda_run.sh asks). */
    if (argc > 1 && strcmp(argv[1], "probe") == 0) return kernels_cuda() ? 0 : 77;
    if (argc > 1 && strcmp(argv[1], "absent") == 0) {
        setenv("RP_KERNELS", "cuda", 1); /* before anything reads the environment */
        if (kernels_cuda()) {
            printf("SKIP: a CUDA device is present (%s)\n", "the table initialised");
            return 77;
        }
        const struct CMUnitTest absent[] = {cmocka_unit_test(test_absent)};
        return cmocka_run_group_tests(absent, NULL, NULL);
    }
    /* The build lists the cases (--list) on every machine, with or without a GPU. */
    bool listing = argc > 1 && strcmp(argv[1], "--list") == 0;
    R = kernels_ref();
    G = listing ? NULL : kernels_cuda();
    if (!G && !listing) {
        printf("SKIP: %s\n", rp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),     cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_conv),       cmocka_unit_test(test_pool),
        cmocka_unit_test(test_batch_norm), cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rows),       cmocka_unit_test(test_optim),
        cmocka_unit_test(test_streams),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
