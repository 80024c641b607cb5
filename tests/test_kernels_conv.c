/*
 * test_kernels_conv.c - the fast GEMM, convolution and pooling kernels
 * (OpenBLAS, oneDNN, vectorised loops) against the plain C reference, on
 * odd and ResNet-like shapes; descriptor errors; and the per-thread
 * primitive cache (steady-state calls create nothing, threads do not share).
 */
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include <oneapi/dnnl/dnnl.h>

#include "kernels/cpu/conv_pool_dnnl.h"
#include "kernels/ref/conv_pool_ref.h"

#define TOL 1e-4

typedef struct conv_shape {
    int n, h, w, c, o, kh, kw, stride, pad;
} conv_shape;

static const conv_shape conv_shapes[] = {
    {3, 7, 5, 3, 5, 3, 3, 2, 1},   /* odd everything */
    {2, 6, 6, 8, 16, 1, 1, 1, 0},  /* 1x1 */
    {2, 7, 7, 16, 32, 1, 1, 2, 0}, /* 1x1 stride 2 projection shortcut */
    {2, 9, 9, 16, 32, 3, 3, 2, 1}, /* 3x3 stride 2 downsampling */
    {2, 15, 13, 3, 8, 7, 7, 2, 3}, /* ResNet stem: 7x7 stride 2 pad 3 */
    {2, 8, 8, 17, 19, 3, 3, 1, 1}, /* channels not a multiple of the SIMD block */
    {1, 5, 9, 5, 7, 1, 3, 1, 1},   /* non-square kernel */
    {4, 8, 8, 16, 16, 3, 3, 1, 1}, /* CIFAR ResNet block */
    {1, 4, 4, 2, 3, 3, 3, 3, 0},   /* stride larger than the overlap */
    {2, 3, 3, 2, 4, 1, 1, 1, 1},   /* padding as large as the kernel: a zero border */
    {1, 6, 6, 3, 4, 2, 2, 2, 2},   /* padding larger than the kernel, stride 2 */
    /* 3x3 stride 1 with >= 16 channels: Winograd where the CPU has it, channels padded to 16 */
    {3, 8, 8, 16, 24, 3, 3, 1, 1},   /* output channels padded */
    {2, 16, 16, 24, 16, 3, 3, 1, 1}, /* input channels padded */
    {2, 16, 16, 32, 32, 3, 3, 1, 1},
    {2, 4, 4, 16, 16, 3, 3, 1, 1},  /* smaller than one 6x6 input tile */
    {3, 32, 32, 1, 16, 3, 3, 1, 1}, /* one input channel: direct */
};

typedef struct pool_shape {
    int n, h, w, c, k, stride, pad;
} pool_shape;

static const pool_shape pool_shapes[] = {
    {3, 7, 5, 3, 3, 2, 1},    /* odd */
    {2, 8, 8, 16, 2, 2, 0},   /* 2x2 s2 */
    {2, 9, 9, 17, 3, 2, 1},   /* ResNet stem pool 3x3 s2 p1 */
    {4, 16, 16, 32, 3, 2, 1}, /* big enough to use the thread team */
    {1, 6, 7, 5, 3, 1, 1},    /* overlapping windows */
    {2, 5, 5, 4, 5, 1, 2},    /* window as large as the input */
    {2, 7, 6, 3, 2, 3, 1},    /* stride larger than the window */
};

static float *fmalloc(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static float *frandom(int64_t n, uint64_t seed)
{
    float *p = fmalloc(n);
    tu_fill(p, n, seed, -1.0f, 1.0f);
    return p;
}

/* Fills with NaN so that a kernel that fails to overwrite its output is caught. */
static float *fnan(int64_t n)
{
    float *p = fmalloc(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

static void expect_close(const char *what, int shape, const float *got, const float *want,
                         int64_t n)
{
    double diff = tu_max_rel_diff(got, want, n);
    if (!(diff <= TOL)) {
        print_error("%s, shape %d: max relative difference %g > %g\n", what, shape, diff, TOL);
        fail();
    }
}

/* ---- convolution -------------------------------------------------------- */

static void test_conv_fwd(void **state)
{
    (void)state;
    for (int s = 0; s < (int)(sizeof conv_shapes / sizeof conv_shapes[0]); s++) {
        const conv_shape *cs = &conv_shapes[s];
        kernels_conv_desc d;
        assert_int_equal(kernels_conv_desc_init(&d, cs->n, cs->h, cs->w, cs->c, cs->o, cs->kh,
                                                cs->kw, cs->stride, cs->pad),
                         RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.o;
        int64_t nw = (int64_t)d.o * d.kh * d.kw * d.c;
        float *x = frandom(nx, 10 + s), *x2 = frandom(nx, 20 + s), *w = frandom(nw, 30 + s);
        float *w2 = frandom(nw, 35 + s), *b = frandom(d.o, 40 + s);
        float *want = fnan(ny), *got = fnan(ny);

        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bias = with_bias ? b : NULL;
            assert_int_equal(kref_conv2d_fwd(want, x, w, bias, &d), RP_OK);
            assert_int_equal(kcpu_conv2d_fwd(got, x, w, bias, &d), RP_OK);
            expect_close(with_bias ? "conv2d_fwd bias" : "conv2d_fwd", s, got, want, ny);
            /* Same shape, new buffers: the cached primitive must follow the pointers. */
            for (int64_t i = 0; i < ny; i++)
                got[i] = NAN;
            assert_int_equal(kref_conv2d_fwd(want, x2, w2, bias, &d), RP_OK);
            assert_int_equal(kcpu_conv2d_fwd(got, x2, w2, bias, &d), RP_OK);
            expect_close("conv2d_fwd second call", s, got, want, ny);
        }
        free(x), free(x2), free(w), free(w2), free(b), free(want), free(got);
    }
}

static void test_conv_bwd_data(void **state)
{
    (void)state;
    for (int s = 0; s < (int)(sizeof conv_shapes / sizeof conv_shapes[0]); s++) {
        const conv_shape *cs = &conv_shapes[s];
        kernels_conv_desc d;
        assert_int_equal(kernels_conv_desc_init(&d, cs->n, cs->h, cs->w, cs->c, cs->o, cs->kh,
                                                cs->kw, cs->stride, cs->pad),
                         RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.o;
        int64_t nw = (int64_t)d.o * d.kh * d.kw * d.c;
        float *dy = frandom(ny, 50 + s), *w = frandom(nw, 60 + s);
        float *want = fnan(nx), *got = fnan(nx);
        for (int rep = 0; rep < 2; rep++) {
            if (rep) tu_fill(w, nw, 65 + s, -1, 1), tu_fill(dy, ny, 55 + s, -1, 1);
            assert_int_equal(kref_conv2d_bwd_data(want, dy, w, &d), RP_OK);
            assert_int_equal(kcpu_conv2d_bwd_data(got, dy, w, &d), RP_OK);
            expect_close("conv2d_bwd_data", s, got, want, nx);
        }
        free(dy), free(w), free(want), free(got);
    }
}

static void test_conv_bwd_weights(void **state)
{
    (void)state;
    for (int s = 0; s < (int)(sizeof conv_shapes / sizeof conv_shapes[0]); s++) {
        const conv_shape *cs = &conv_shapes[s];
        kernels_conv_desc d;
        assert_int_equal(kernels_conv_desc_init(&d, cs->n, cs->h, cs->w, cs->c, cs->o, cs->kh,
                                                cs->kw, cs->stride, cs->pad),
                         RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.o;
        int64_t nw = (int64_t)d.o * d.kh * d.kw * d.c;
        float *x = frandom(nx, 70 + s), *dy = frandom(ny, 80 + s);
        float *want_w = fnan(nw), *got_w = fnan(nw), *want_b = fnan(d.o), *got_b = fnan(d.o);
        for (int with_db = 0; with_db < 2; with_db++) {
            for (int rep = 0; rep < 2; rep++) {
                if (rep) tu_fill(x, nx, 75 + s, -1, 1), tu_fill(dy, ny, 85 + s, -1, 1);
                for (int64_t i = 0; i < nw; i++)
                    got_w[i] = NAN;
                for (int i = 0; i < d.o; i++)
                    got_b[i] = NAN;
                assert_int_equal(
                    kref_conv2d_bwd_weights(want_w, with_db ? want_b : NULL, dy, x, &d), RP_OK);
                assert_int_equal(kcpu_conv2d_bwd_weights(got_w, with_db ? got_b : NULL, dy, x, &d),
                                 RP_OK);
                expect_close("conv2d_bwd_weights dw", s, got_w, want_w, nw);
                if (with_db) {
                    expect_close("conv2d_bwd_weights db", s, got_b, want_b, d.o);
                } else {
                    for (int i = 0; i < d.o; i++)
                        assert_true(isnan(got_b[i])); /* untouched */
                }
            }
        }
        free(x), free(dy), free(want_w), free(got_w), free(want_b), free(got_b);
    }
}

/*
 * The reference itself against a hand-computed case, so that the fast
 * kernels are not merely checked against a shared misunderstanding:
 * a 1x3x3x1 input, one 2x2 filter of ones, stride 1, pad 0.
 */
static void test_conv_ref_by_hand(void **state)
{
    (void)state;
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 1, 3, 3, 1, 1, 2, 2, 1, 0), RP_OK);
    assert_int_equal(d.oh, 2);
    assert_int_equal(d.ow, 2);
    const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 1, 1, 1}, b[1] = {0.5f};
    float y[4], dx[9], dw[4], db[1];
    assert_int_equal(kref_conv2d_fwd(y, x, w, b, &d), RP_OK);
    const float y_want[4] = {12.5f, 16.5f, 24.5f, 28.5f};
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], y_want[i], 1e-6);
    const float dy[4] = {1, 0, 0, 0};
    assert_int_equal(kref_conv2d_bwd_data(dx, dy, w, &d), RP_OK);
    const float dx_want[9] = {1, 1, 0, 1, 1, 0, 0, 0, 0};
    for (int i = 0; i < 9; i++)
        assert_float_equal(dx[i], dx_want[i], 1e-6);
    assert_int_equal(kref_conv2d_bwd_weights(dw, db, dy, x, &d), RP_OK);
    const float dw_want[4] = {1, 2, 4, 5};
    for (int i = 0; i < 4; i++)
        assert_float_equal(dw[i], dw_want[i], 1e-6);
    assert_float_equal(db[0], 1.0f, 1e-6);
}

/* ---- pooling ------------------------------------------------------------ */

static void test_maxpool(void **state)
{
    (void)state;
    for (int s = 0; s < (int)(sizeof pool_shapes / sizeof pool_shapes[0]); s++) {
        const pool_shape *ps = &pool_shapes[s];
        kernels_pool_desc d;
        assert_int_equal(
            kernels_pool_desc_init(&d, ps->n, ps->h, ps->w, ps->c, ps->k, ps->stride, ps->pad),
            RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.c;
        float *x = frandom(nx, 90 + s), *dy = frandom(ny, 95 + s);
        float *want_y = fnan(ny), *got_y = fnan(ny), *want_dx = fnan(nx), *got_dx = fnan(nx);
        int32_t *want_a = malloc((size_t)ny * sizeof *want_a);
        int32_t *got_a = malloc((size_t)ny * sizeof *got_a);
        assert_non_null(want_a);
        assert_non_null(got_a);

        /* Pass 0: distinct values. Pass 1: only -1, 0, 1, so windows tie and the first max must
         * win. */
        for (int pass = 0; pass < 2; pass++) {
            if (pass)
                for (int64_t i = 0; i < nx; i++)
                    x[i] = floorf(x[i] * 1.5f + 0.5f);
            assert_int_equal(kref_maxpool_fwd(want_y, want_a, x, &d), RP_OK);
            assert_int_equal(kcpu_maxpool_fwd(got_y, got_a, x, &d), RP_OK);
            expect_close("maxpool_fwd", s, got_y, want_y, ny);
            for (int64_t i = 0; i < ny; i++) {
                if (got_a[i] != want_a[i]) {
                    print_error("maxpool argmax, shape %d pass %d: [%lld] = %d, want %d\n", s, pass,
                                (long long)i, got_a[i], want_a[i]);
                    fail();
                }
                assert_true(x[got_a[i]] == got_y[i]);
            }
            assert_int_equal(kref_maxpool_bwd(want_dx, want_a, dy, &d), RP_OK);
            assert_int_equal(kcpu_maxpool_bwd(got_dx, got_a, dy, &d), RP_OK);
            expect_close("maxpool_bwd", s, got_dx, want_dx, nx);
        }
        free(x), free(dy), free(want_y), free(got_y), free(want_dx), free(got_dx);
        free(want_a), free(got_a);
    }
}

static void test_maxpool_bwd_bad_argmax(void **state)
{
    (void)state;
    kernels_pool_desc d;
    assert_int_equal(kernels_pool_desc_init(&d, 2, 4, 4, 1, 2, 2, 0), RP_OK);
    int32_t a[8];
    float dy[8], dx[32];
    for (int i = 0; i < 8; i++)
        a[i] = 0, dy[i] = 1;
    /* a[5] belongs to image 1, but points into image 0. */
    assert_int_equal(kcpu_maxpool_bwd(dx, a, dy, &d), RP_ERR_INVALID);
    tu_assert_error_contains("argmax[");
    a[0] = 1000;
    assert_int_equal(kref_maxpool_bwd(dx, a, dy, &d), RP_ERR_INVALID);
    tu_assert_error_contains("1000");
}

static void test_avgpool(void **state)
{
    (void)state;
    for (int s = 0; s < (int)(sizeof pool_shapes / sizeof pool_shapes[0]); s++) {
        const pool_shape *ps = &pool_shapes[s];
        kernels_pool_desc d;
        assert_int_equal(
            kernels_pool_desc_init(&d, ps->n, ps->h, ps->w, ps->c, ps->k, ps->stride, ps->pad),
            RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.c;
        float *x = frandom(nx, 100 + s), *dy = frandom(ny, 105 + s);
        float *want_y = fnan(ny), *got_y = fnan(ny), *want_dx = fnan(nx), *got_dx = fnan(nx);
        for (int rep = 0; rep < 2; rep++) {
            if (rep) tu_fill(x, nx, 110 + s, -1, 1), tu_fill(dy, ny, 115 + s, -1, 1);
            assert_int_equal(kref_avgpool_fwd(want_y, x, &d), RP_OK);
            assert_int_equal(kcpu_avgpool_fwd(got_y, x, &d), RP_OK);
            expect_close("avgpool_fwd", s, got_y, want_y, ny);
            assert_int_equal(kref_avgpool_bwd(want_dx, dy, &d), RP_OK);
            assert_int_equal(kcpu_avgpool_bwd(got_dx, dy, &d), RP_OK);
            expect_close("avgpool_bwd", s, got_dx, want_dx, nx);
        }
        free(x), free(dy), free(want_y), free(got_y), free(want_dx), free(got_dx);
    }
}

/* Padding is excluded from the divisor: a corner window of a 2x2 pad-1 pool sees one element. */
static void test_avgpool_ref_by_hand(void **state)
{
    (void)state;
    kernels_pool_desc d;
    assert_int_equal(kernels_pool_desc_init(&d, 1, 2, 2, 1, 2, 2, 1), RP_OK);
    assert_int_equal(d.oh, 2);
    const float x[4] = {1, 2, 3, 4};
    float y[4];
    assert_int_equal(kref_avgpool_fwd(y, x, &d), RP_OK);
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], x[i], 1e-6);
    assert_int_equal(kernels_pool_desc_init(&d, 1, 3, 3, 1, 3, 1, 1), RP_OK);
    const float x9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float y9[9];
    assert_int_equal(kref_avgpool_fwd(y9, x9, &d), RP_OK);
    assert_float_equal(y9[0], (1 + 2 + 4 + 5) / 4.0f, 1e-6);
    assert_float_equal(y9[4], 5.0f, 1e-6);
}

/* ---- gemm --------------------------------------------------------------- */

static void test_gemm(void **state)
{
    (void)state;
    const int shapes[][3] = {{37, 29, 53}, {1, 17, 5}, {64, 64, 64}, {5, 1, 300}, {8, 9, 0}};
    const float alphas[] = {1.0f, 0.7f}, betas[] = {0.0f, 0.3f};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int ab = 0; ab < 2; ab++) {
                    /* Odd leading dimensions, larger than the stored rows. */
                    const int a_rows = ta ? k : m, a_cols = ta ? m : k;
                    const int b_rows = tb ? n : k, b_cols = tb ? k : n;
                    const int lda = a_cols + 3, ldb = b_cols + 5, ldc = n + 7;
                    float *a = frandom((int64_t)a_rows * lda, 200 + s);
                    float *b = frandom((int64_t)b_rows * ldb, 210 + s);
                    float *c0 = frandom((int64_t)m * ldc, 220 + s);
                    float *want = fmalloc((int64_t)m * ldc), *got = fmalloc((int64_t)m * ldc);
                    float alpha = alphas[ab], beta = betas[ab];
                    memcpy(want, c0, (size_t)m * ldc * sizeof *c0);
                    memcpy(got, c0, (size_t)m * ldc * sizeof *c0);
                    if (beta == 0.0f)
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++)
                                want[i * ldc + j] = got[i * ldc + j] = NAN;
                    kref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc);
                    kcpu_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, got, ldc);
                    for (int i = 0; i < m; i++) {
                        char what[96];
                        snprintf(what, sizeof what, "gemm ta=%d tb=%d alpha=%g beta=%g row %d", ta,
                                 tb, alpha, beta, i);
                        expect_close(what, s, got + i * ldc, want + i * ldc, n);
                        /* The padding columns between rows are not written. */
                        for (int j = n; j < ldc && i < m - 1; j++)
                            assert_true(got[i * ldc + j] == c0[i * ldc + j]);
                    }
                    free(a), free(b), free(c0), free(want), free(got);
                }
    }
}

static void test_gemm_ref_by_hand(void **state)
{
    (void)state;
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    float c[4] = {1, 1, 1, 1};
    kref_gemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 2.0f, c, 2);
    const float want[4] = {21, 24, 45, 52};
    for (int i = 0; i < 4; i++)
        assert_float_equal(c[i], want[i], 1e-6);
    kref_gemm(true, true, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2); /* A^T B^T = (BA)^T */
    const float want_tt[4] = {23, 31, 34, 46};
    for (int i = 0; i < 4; i++)
        assert_float_equal(c[i], want_tt[i], 1e-6);
}

/* ---- descriptors and errors ---------------------------------------------- */

static void test_desc_errors(void **state)
{
    (void)state;
    kernels_conv_desc d;
    /* A 5x5 filter does not fit a 2x2 input without padding. */
    assert_int_equal(kernels_conv_desc_init(&d, 1, 2, 3, 4, 8, 5, 5, 1, 0), RP_ERR_SHAPE);
    tu_assert_error_contains("h=2");
    tu_assert_error_contains("w=3");
    tu_assert_error_contains("5x5");
    assert_int_equal(kernels_conv_desc_init(&d, 1, 8, 8, 4, 8, 3, 3, 0, 1), RP_ERR_SHAPE);
    tu_assert_error_contains("stride 0");
    assert_int_equal(kernels_conv_desc_init(&d, 0, 8, 8, 4, 8, 3, 3, 1, 1), RP_ERR_SHAPE);
    tu_assert_error_contains("n=0");
    assert_int_equal(kernels_conv_desc_init(&d, 1, 8, 8, 4, 8, 3, 3, 1, -1), RP_ERR_SHAPE);
    assert_int_equal(kernels_conv_desc_init(NULL, 1, 8, 8, 4, 8, 3, 3, 1, 1), RP_ERR_INVALID);

    /* Output size = (in + 2*pad - k)/stride + 1. */
    assert_int_equal(kernels_conv_desc_init(&d, 2, 224, 224, 3, 64, 7, 7, 2, 3), RP_OK);
    assert_int_equal(d.oh, 112);
    assert_int_equal(d.ow, 112);
    assert_int_equal(kernels_conv_desc_init(&d, 1, 7, 5, 3, 5, 3, 3, 2, 1), RP_OK);
    assert_int_equal(d.oh, 4);
    assert_int_equal(d.ow, 3);

    kernels_pool_desc p;
    assert_int_equal(kernels_pool_desc_init(&p, 1, 2, 2, 3, 3, 1, 0), RP_ERR_SHAPE);
    tu_assert_error_contains("h=2");
    tu_assert_error_contains("3x3");
    assert_int_equal(kernels_pool_desc_init(&p, 1, 8, 8, 3, 2, 2, 2),
                     RP_ERR_SHAPE); /* pad >= window */
    tu_assert_error_contains("pad 2");
    assert_int_equal(kernels_pool_desc_init(&p, 2, 112, 112, 64, 3, 2, 1), RP_OK);
    assert_int_equal(p.oh, 56);

    /* A hand-made descriptor that disagrees with the formula is refused by both tables. */
    assert_int_equal(kernels_conv_desc_init(&d, 1, 8, 8, 4, 8, 3, 3, 1, 1), RP_OK);
    d.oh = 9;
    float buf[1024] = {0};
    assert_int_equal(kcpu_conv2d_fwd(buf, buf, buf, NULL, &d), RP_ERR_SHAPE);
    tu_assert_error_contains("9x8");
    assert_int_equal(kref_conv2d_fwd(buf, buf, buf, NULL, &d), RP_ERR_SHAPE);
    d.oh = 8;
    assert_int_equal(kcpu_conv2d_fwd(NULL, buf, buf, NULL, &d), RP_ERR_INVALID);
    assert_int_equal(kcpu_conv2d_bwd_weights(buf, buf, NULL, buf, &d), RP_ERR_INVALID);
    assert_int_equal(kcpu_avgpool_fwd(buf, buf, NULL), RP_ERR_INVALID);
}

/* ---- the primitive cache ------------------------------------------------- */

static void run_all_conv_kinds(const kernels_conv_desc *d, float *x, float *w, float *b, float *y,
                               float *dx, float *dw, float *db)
{
    assert_int_equal(kcpu_conv2d_fwd(y, x, w, b, d), RP_OK);
    assert_int_equal(kcpu_conv2d_bwd_data(dx, y, w, d), RP_OK);
    assert_int_equal(kcpu_conv2d_bwd_weights(dw, db, y, x, d), RP_OK);
}

static void test_cache_steady_state(void **state)
{
    (void)state;
    kcpu_dnnl_cache_clear();
    assert_int_equal(kcpu_dnnl_cache_entries(), 0);
    kernels_conv_desc d;
    kernels_pool_desc p;
    assert_int_equal(kernels_conv_desc_init(&d, 4, 16, 16, 16, 32, 3, 3, 1, 1), RP_OK);
    assert_int_equal(kernels_pool_desc_init(&p, 4, 16, 16, 32, 2, 2, 0), RP_OK);
    int64_t nx = 4 * 16 * 16 * 16, ny = 4 * 16 * 16 * 32, nw = 32 * 3 * 3 * 16;
    float *x = frandom(nx, 1), *w = frandom(nw, 2), *b = frandom(32, 3), *y = fmalloc(ny);
    float *dx = fmalloc(nx), *dw = fmalloc(nw), *db = fmalloc(32), *py = fmalloc(ny / 4);

    run_all_conv_kinds(&d, x, w, b, y, dx, dw, db);
    assert_int_equal(kcpu_avgpool_fwd(py, y, &p), RP_OK);
    assert_int_equal(kcpu_avgpool_bwd(y, py, &p), RP_OK);
    const int entries = kcpu_dnnl_cache_entries();
    assert_int_equal(entries, 5); /* fwd+bias, bwd data, bwd weights+bias, avg fwd, avg bwd */

    const uint64_t allocs = rp_alloc_count();
    const size_t heap = mallinfo2().uordblks;
    for (int i = 0; i < 50; i++) {
        run_all_conv_kinds(&d, x, w, b, y, dx, dw, db);
        assert_int_equal(kcpu_avgpool_fwd(py, y, &p), RP_OK);
        assert_int_equal(kcpu_avgpool_bwd(y, py, &p), RP_OK);
    }
    assert_int_equal(kcpu_dnnl_cache_entries(), entries);
    assert_int_equal(rp_alloc_count(), allocs);
    const size_t heap_after = mallinfo2().uordblks;
    if (heap_after > heap + 4096) {
        print_error("heap grew by %zu bytes over 50 cached steps\n", heap_after - heap);
        fail();
    }

    /* A new shape or kind adds exactly one entry; the old ones are still hits. */
    assert_int_equal(kcpu_conv2d_fwd(y, x, w, NULL, &d), RP_OK);
    assert_int_equal(kcpu_dnnl_cache_entries(), entries + 1);
    run_all_conv_kinds(&d, x, w, b, y, dx, dw, db);
    assert_int_equal(kcpu_dnnl_cache_entries(), entries + 1);

    kcpu_dnnl_cache_clear();
    assert_int_equal(kcpu_dnnl_cache_entries(), 0);
    run_all_conv_kinds(&d, x, w, b, y, dx, dw, db); /* rebuilds after a clear */
    assert_int_equal(kcpu_dnnl_cache_entries(), 3);
    free(x), free(w), free(b), free(y), free(dx), free(dw), free(db), free(py);
}

/* The LRU bound: more distinct shapes than the cache holds keep it at its maximum. */
static void test_cache_bounded(void **state)
{
    (void)state;
    kcpu_dnnl_cache_clear();
    float *buf = frandom(4096, 7), *out = fmalloc(4096);
    for (int i = 0; i < RP_DNNL_CACHE_MAX + 10; i++) {
        kernels_pool_desc p;
        assert_int_equal(kernels_pool_desc_init(&p, 1, 2 + i % 30, 2 + i / 30, 1, 2, 1, 0), RP_OK);
        assert_int_equal(kcpu_avgpool_fwd(out, buf, &p), RP_OK);
    }
    assert_int_equal(kcpu_dnnl_cache_entries(), RP_DNNL_CACHE_MAX);
    kcpu_dnnl_cache_clear();
    free(buf), free(out);
}

typedef struct thread_job {
    const kernels_conv_desc *d;
    const float *x, *w;
    float *y;
    int entries_before, entries_after;
    rp_status status;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->entries_before = kcpu_dnnl_cache_entries();
    j->status = kcpu_conv2d_fwd(j->y, j->x, j->w, NULL, j->d);
    j->entries_after = kcpu_dnnl_cache_entries();
    return NULL; /* the thread's cache is freed by the thread-exit destructor */
}

/* Each thread has its own cache: another thread's calls neither see nor add to ours. */
static void test_cache_per_thread(void **state)
{
    (void)state;
    kcpu_dnnl_cache_clear();
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 2, 8, 8, 8, 8, 3, 3, 1, 1), RP_OK);
    int64_t n = 2 * 8 * 8 * 8;
    float *x = frandom(n, 5), *w = frandom(8 * 9 * 8, 6), *y = fmalloc(n), *y2 = fmalloc(n);
    assert_int_equal(kcpu_conv2d_fwd(y, x, w, NULL, &d), RP_OK);
    assert_int_equal(kcpu_dnnl_cache_entries(), 1);

    thread_job jobs[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (thread_job){.d = &d, .x = x, .w = w, .y = i ? y2 : fmalloc(n)};
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].status, RP_OK);
        assert_int_equal(jobs[i].entries_before, 0);
        assert_int_equal(jobs[i].entries_after, 1);
    }
    assert_int_equal(kcpu_dnnl_cache_entries(), 1);
    assert_true(tu_max_rel_diff(y2, y, n) == 0.0);
    assert_true(tu_max_rel_diff(jobs[0].y, y, n) == 0.0);
    free(jobs[0].y), free(x), free(w), free(y), free(y2);
}

/*
 * The algorithm switch: 3x3 stride-1 convolutions of >= 16 channels run Winograd by default where
 * this CPU has oneDNN's (AVX-512), never with RP_CONV_DIRECT, never for other kernels or
 * fewer channels; every
 * convolution test above passes under both settings (run again here with direct).
 */
static void test_conv_algorithm_switch(void **state)
{
    kernels_conv_desc d3, d1, ds2, dc1;
    assert_int_equal(kernels_conv_desc_init(&d3, 2, 16, 16, 32, 32, 3, 3, 1, 1), RP_OK);
    assert_int_equal(kernels_conv_desc_init(&d1, 2, 16, 16, 32, 32, 1, 1, 1, 0), RP_OK);
    assert_int_equal(kernels_conv_desc_init(&ds2, 2, 16, 16, 32, 32, 3, 3, 2, 1), RP_OK);
    assert_int_equal(kernels_conv_desc_init(&dc1, 2, 16, 16, 1, 32, 3, 3, 1, 1), RP_OK);
    bool avx512 = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core;
    rp_kernels_set_conv_algorithm(RP_CONV_AUTO);
    for (int pass = 0; pass < 3; pass++) {
        bool w3, w1, ws2, wc1;
        assert_int_equal(kcpu_conv2d_uses_winograd(&d3, pass, &w3), RP_OK);
        assert_int_equal(kcpu_conv2d_uses_winograd(&d1, pass, &w1), RP_OK);
        assert_int_equal(kcpu_conv2d_uses_winograd(&ds2, pass, &ws2), RP_OK);
        assert_int_equal(kcpu_conv2d_uses_winograd(&dc1, pass, &wc1), RP_OK);
        if (avx512) assert_true(w3);
        assert_false(w1);
        assert_false(ws2);
        assert_false(wc1);
    }
    rp_kernels_set_conv_algorithm(RP_CONV_DIRECT);
    assert_int_equal(rp_kernels_get_conv_algorithm(), RP_CONV_DIRECT);
    for (int pass = 0; pass < 3; pass++) {
        bool w3;
        assert_int_equal(kcpu_conv2d_uses_winograd(&d3, pass, &w3), RP_OK);
        assert_false(w3);
    }
    test_conv_fwd(state);
    test_conv_bwd_data(state);
    test_conv_bwd_weights(state);
    rp_kernels_set_conv_algorithm(RP_CONV_AUTO);
    bool w;
    assert_int_equal(kcpu_conv2d_uses_winograd(&d3, 3, &w), RP_ERR_INVALID);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_ref_by_hand),
        cmocka_unit_test(test_avgpool_ref_by_hand),
        cmocka_unit_test(test_gemm_ref_by_hand),
        cmocka_unit_test(test_conv_fwd),
        cmocka_unit_test(test_conv_bwd_data),
        cmocka_unit_test(test_conv_bwd_weights),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_maxpool_bwd_bad_argmax),
        cmocka_unit_test(test_avgpool),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_desc_errors),
        cmocka_unit_test(test_cache_steady_state),
        cmocka_unit_test(test_cache_bounded),
        cmocka_unit_test(test_cache_per_thread),
        cmocka_unit_test(test_conv_algorithm_switch),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
