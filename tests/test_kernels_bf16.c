/*
 * test_kernels_bf16.c - the bf16-compute GEMM and convolutions of the cpu table (oneDNN's bf16
 * primitives: AMX, AVX512-BF16, or emulation) against the reference applied to the same
 * bf16-rounded inputs.
 *
 * The bound. Both sides multiply the same bf16 values, whose products are exact in f32; they
 * differ only in how they sum K products: the reference in double, the kernel in f32 (any
 * order), so each output differs by at most gamma_K * sum|x_i w_i| with gamma_K ~ K u_f32
 * (Higham, Accuracy and Stability, 3.1). We allow 4 K 2^-24 sum|x_i w_i|, the magnitude sum
 * being the reference itself run on |x| and |w|. The same check would fail a kernel that
 * multiplied the unrounded f32 inputs: their results differ from the rounded ones' by about
 * 2^-9 sum|x_i w_i|, far above the bound, and the tests assert that they do.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/conv_pool_dnnl.h"
#include "kernels/ref/conv_pool_ref.h"
#include "kernels/kernels.h"

static float *absv(const float *x, int64_t n)
{
    float *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

/*
 * Fails unless |got - want| <= 4 K 2^-24 mag + 1e-30 everywhere; returns the largest
 * |other - want| / (mag + tiny), for the check that the f32 product lies outside the bound.
 */
static void check_bound(const float *got, const float *want, const float *mag, int64_t n, int64_t k,
                        const char *what)
{
    double tol = 4.0 * (double)k * 0x1p-24;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        if (err > tol * (double)mag[i] + 1e-30)
            fail_msg("%s: element %lld is %.9g, the reference %.9g (|x||w| sum %.3g, K %lld)", what,
                     (long long)i, (double)got[i], (double)want[i], (double)mag[i], (long long)k);
    }
}

/* The largest relative gap between two results, over the magnitude sums. */
static double max_gap(const float *a, const float *b, const float *mag, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = fabs((double)a[i] - (double)b[i]) / ((double)mag[i] + 1e-30);
        if (g > worst) worst = g;
    }
    return worst;
}

typedef struct gemm_case {
    bool ta, tb;
    int m, n, k;
    float beta;
} gemm_case;

static void test_gemm_bf16(void **state)
{
    (void)state;
    static const gemm_case cases[] = {
        {false, false, 7, 5, 3, 0.0f},     {false, true, 33, 17, 65, 0.0f},
        {true, false, 16, 31, 128, 1.0f},  {true, true, 9, 64, 40, 1.0f},
        {false, true, 128, 10, 512, 0.0f}, {true, false, 64, 576, 256, 1.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gemm_case *g = &cases[ci];
        int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
        int64_t na = (int64_t)g->m * g->k, nb = (int64_t)g->k * g->n, nc = (int64_t)g->m * g->n;
        float *a = malloc(na * 4), *b = malloc(nb * 4), *c0 = malloc(nc * 4);
        float *got = malloc(nc * 4), *want = malloc(nc * 4), *f32 = malloc(nc * 4),
              *mag = malloc(nc * 4);
        tu_fill(a, na, 11 + ci, -2, 2);
        tu_fill(b, nb, 23 + ci, -1, 1);
        tu_fill(c0, nc, 31 + ci, -1, 1);
        memcpy(got, c0, nc * 4);
        memcpy(want, c0, nc * 4);
        memcpy(f32, c0, nc * 4);
        assert_int_equal(kcpu_gemm_bf16(g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb,
                                        g->beta, got, g->n),
                         RP_OK);
        assert_int_equal(kref_gemm_bf16(g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb,
                                        g->beta, want, g->n),
                         RP_OK);
        kref_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, g->beta, f32, g->n);
        float *aa = absv(a, na), *ab = absv(b, nb), *ac = absv(c0, nc);
        memcpy(mag, ac, nc * 4);
        assert_int_equal(kref_gemm_bf16(g->ta, g->tb, g->m, g->n, g->k, 1.0f, aa, lda, ab, ldb,
                                        g->beta, mag, g->n),
                         RP_OK);
        char what[96];
        snprintf(what, sizeof what, "gemm %s%s %dx%dx%d beta %g", g->ta ? "T" : "N",
                 g->tb ? "T" : "N", g->m, g->n, g->k, (double)g->beta);
        check_bound(got, want, mag, nc, g->k + 1, what);
        /* The rounding happened: the f32 product is measurably elsewhere. */
        assert_true(max_gap(f32, want, mag, nc) > 8.0 * (g->k + 1) * 0x1p-24);
        free(aa), free(ab), free(ac);
        free(a), free(b), free(c0), free(got), free(want), free(f32), free(mag);
    }
}

typedef struct conv_case {
    int n, h, w, c, o, kh, kw, stride, pad;
} conv_case;

static void test_conv_bf16(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {3, 7, 5, 3, 5, 3, 3, 2, 1},   {2, 8, 8, 16, 32, 3, 3, 1, 1}, {2, 7, 7, 16, 32, 1, 1, 2, 0},
        {2, 15, 13, 3, 8, 7, 7, 2, 3}, {2, 8, 8, 17, 19, 3, 3, 1, 1}, {4, 8, 8, 64, 64, 3, 3, 1, 1},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const conv_case *s = &cases[ci];
        kernels_conv_desc d;
        assert_int_equal(kernels_conv_desc_init(&d, s->n, s->h, s->w, s->c, s->o, s->kh, s->kw,
                                                s->stride, s->pad),
                         RP_OK);
        d.compute = RP_BF16;
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, nw = (int64_t)d.o * d.kh * d.kw * d.c,
                ny = (int64_t)d.n * d.oh * d.ow * d.o;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *bias = malloc(d.o * 4),
              *dy = malloc(ny * 4);
        tu_fill(x, nx, 3 + ci, -1, 1);
        tu_fill(w, nw, 5 + ci, -0.5, 0.5);
        tu_fill(bias, d.o, 7 + ci, -0.1, 0.1);
        tu_fill(dy, ny, 9 + ci, -1, 1);
        float *ax = absv(x, nx), *aw = absv(w, nw), *ady = absv(dy, ny), *ab = absv(bias, d.o);
        kernels_conv_desc df = d;
        df.compute = RP_F32;
        char what[128];

        /* forward: K = kh kw c (+ the bias) */
        float *got = malloc(ny * 4), *want = malloc(ny * 4), *mag = malloc(ny * 4),
              *f32 = malloc(ny * 4);
        assert_int_equal(kcpu_conv2d_fwd(got, x, w, bias, &d), RP_OK);
        assert_int_equal(kref_conv2d_fwd(want, x, w, bias, &d), RP_OK);
        assert_int_equal(kref_conv2d_fwd(mag, ax, aw, ab, &d), RP_OK);
        assert_int_equal(kref_conv2d_fwd(f32, x, w, bias, &df), RP_OK);
        snprintf(what, sizeof what, "conv fwd case %zu", ci);
        int64_t k = (int64_t)d.kh * d.kw * d.c + 1;
        check_bound(got, want, mag, ny, k, what);
        assert_true(max_gap(f32, want, mag, ny) > 8.0 * k * 0x1p-24);

        /* backward data: K = kh kw o */
        float *gx = malloc(nx * 4), *wx = malloc(nx * 4), *mx = malloc(nx * 4);
        assert_int_equal(kcpu_conv2d_bwd_data(gx, dy, w, &d), RP_OK);
        assert_int_equal(kref_conv2d_bwd_data(wx, dy, w, &d), RP_OK);
        assert_int_equal(kref_conv2d_bwd_data(mx, ady, aw, &d), RP_OK);
        snprintf(what, sizeof what, "conv bwd data case %zu", ci);
        check_bound(gx, wx, mx, nx, (int64_t)d.kh * d.kw * d.o, what);

        /* backward weights and bias: K = n oh ow (the bias sums dy in f32 on both sides) */
        float *gw = malloc(nw * 4), *ww = malloc(nw * 4), *mw = malloc(nw * 4);
        float *gb = malloc(d.o * 4), *wb = malloc(d.o * 4), *mb = malloc(d.o * 4);
        assert_int_equal(kcpu_conv2d_bwd_weights(gw, gb, dy, x, &d), RP_OK);
        assert_int_equal(kref_conv2d_bwd_weights(ww, wb, dy, x, &d), RP_OK);
        assert_int_equal(kref_conv2d_bwd_weights(mw, mb, ady, ax, &d), RP_OK);
        snprintf(what, sizeof what, "conv bwd weights case %zu", ci);
        int64_t kw = (int64_t)d.n * d.oh * d.ow;
        check_bound(gw, ww, mw, nw, kw, what);
        /* The bias gradient sums the bf16-rounded dy, as oneDNN's bf16 backward does. */
        snprintf(what, sizeof what, "conv bwd bias case %zu", ci);
        check_bound(gb, wb, mb, d.o, kw, what);

        /* Activations stored in bf16: x read as bf16 (forward, backward weights), y written as
           bf16 (one more rounding, at most one bf16 ulp: 2^-7 of |y|, on top of the bound). */
        kernels_conv_desc db16 = d;
        db16.x_type = db16.y_type = RP_BF16;
        rp_bf16 *xb = malloc(nx * 2), *yb = malloc(ny * 2), *yr = malloc(ny * 2);
        rp_bf16_from_f32_array(xb, x, (size_t)nx);
        assert_int_equal(kcpu_conv2d_fwd(yb, xb, w, bias, &db16), RP_OK);
        assert_int_equal(kref_conv2d_fwd(yr, xb, w, bias, &db16), RP_OK);
        for (int64_t i = 0; i < ny; i++) {
            double g = rp_bf16_to_f32(yb[i]), r = rp_bf16_to_f32(yr[i]);
            if (fabs(g - r) > 4.0 * k * 0x1p-24 * mag[i] + 0x1p-7 * fabs(r) + 1e-30)
                fail_msg("conv fwd bf16 storage case %zu: y[%lld] %.9g, reference %.9g", ci,
                         (long long)i, g, r);
        }
        /* The reference's bf16 y is its f32 y rounded once. */
        for (int64_t i = 0; i < ny; i++)
            assert_int_equal(yr[i], rp_bf16_from_f32(want[i]));
        assert_int_equal(kcpu_conv2d_bwd_weights(gw, gb, dy, xb, &db16), RP_OK);
        snprintf(what, sizeof what, "conv bwd weights, bf16 x, case %zu", ci);
        check_bound(gw, ww, mw, nw, kw, what);

        /* Both backward passes in one call (the tape's): dy is narrowed to bf16 once, for both
           primitives, so each result is bitwise what the two calls give, with x in f32 and in
           bf16, with the bias gradient and without. */
        float *sx = malloc(nx * 4), *sw = malloc(nw * 4), *sb = malloc(d.o * 4);
        float *hx = malloc(nx * 4), *hw = malloc(nw * 4), *hb = malloc(d.o * 4);
        float *rx = malloc(nx * 4), *rw = malloc(nw * 4), *rb = malloc(d.o * 4);
        rp_bf16 *dyh = malloc(ny * 2);
        rp_bf16_from_f32_array(dyh, dy, (size_t)ny);
        for (int form = 0; form < 4; form++) {
            const kernels_conv_desc *dd = form & 1 ? &db16 : &d;
            const void *xx = form & 1 ? (const void *)xb : x;
            float *bias_grad = form & 2 ? gb : NULL, *both_bias = form & 2 ? sb : NULL;
            assert_int_equal(kcpu_conv2d_bwd_data(gx, dy, w, dd), RP_OK);
            assert_int_equal(kcpu_conv2d_bwd_weights(gw, bias_grad, dy, xx, dd), RP_OK);
            assert_int_equal(kcpu_conv2d_bwd(kernels_cpu(), sx, sw, both_bias, dy, w, xx, dd),
                             RP_OK);
            assert_memory_equal(sx, gx, (size_t)nx * 4);
            assert_memory_equal(sw, gw, (size_t)nw * 4);
            if (form & 2) assert_memory_equal(sb, gb, (size_t)d.o * 4);

            /* dy already in bf16 (dy_type: the tape's bf16 gradients), rounded as the passes
               would round it: nothing is left to round, so every result is bitwise the f32
               dy's, on the cpu table (both calls) and the reference. */
            kernels_conv_desc dh = *dd;
            dh.dy_type = RP_BF16;
            float *hbias = form & 2 ? hb : NULL, *rbias = form & 2 ? rb : NULL;
            assert_int_equal(kcpu_conv2d_bwd(kernels_cpu(), hx, hw, hbias, dyh, w, xx, &dh), RP_OK);
            assert_memory_equal(hx, gx, (size_t)nx * 4);
            assert_memory_equal(hw, gw, (size_t)nw * 4);
            if (form & 2) assert_memory_equal(hb, gb, (size_t)d.o * 4);
            assert_int_equal(kcpu_conv2d_bwd_data(hx, dyh, w, &dh), RP_OK);
            assert_memory_equal(hx, gx, (size_t)nx * 4);
            assert_int_equal(kcpu_conv2d_bwd_weights(hw, hbias, dyh, xx, &dh), RP_OK);
            assert_memory_equal(hw, gw, (size_t)nw * 4);
            assert_int_equal(kref_conv2d_bwd_data(hx, dyh, w, &dh), RP_OK);
            assert_int_equal(kref_conv2d_bwd_data(rx, dy, w, dd), RP_OK);
            assert_memory_equal(hx, rx, (size_t)nx * 4);
            assert_int_equal(kref_conv2d_bwd_weights(hw, hbias, dyh, xx, &dh), RP_OK);
            assert_int_equal(kref_conv2d_bwd_weights(rw, rbias, dy, xx, dd), RP_OK);
            assert_memory_equal(hw, rw, (size_t)nw * 4);
            if (form & 2) assert_memory_equal(hb, rb, (size_t)d.o * 4);
        }
        free(hx), free(hw), free(hb), free(rx), free(rw), free(rb), free(dyh);
        free(sx), free(sw), free(sb);
        free(xb), free(yb), free(yr);

        free(gw), free(ww), free(mw), free(gb), free(wb), free(mb);
        free(gx), free(wx), free(mx);
        free(got), free(want), free(mag), free(f32);
        free(ax), free(aw), free(ady), free(ab);
        free(x), free(w), free(bias), free(dy);
    }
}

/*
 * Batch norm over bf16 activations: each slot is the table's f32 kernel on the widened values,
 * a chunk of rows at a time. Element-wise outputs (y, dx, the masked dy) are therefore exactly
 * the f32 kernel's on the widened input (y then rounded once); the sums differ only in how the
 * chunks' sums are added, within 1e-5 of the magnitudes summed. Shapes cross the chunk size
 * (8192 values), leave a partial chunk, and take the one-row path above 4096 channels.
 */
static void test_bn_bf16(void **state)
{
    (void)state;
    static const struct {
        int64_t m;
        int c;
    } shapes[] = {{37, 5}, {1000, 64}, {9001, 3}, {1001, 16}, {40, 2048}, {3, 5000}};
    const kernels_table *tables[] = {kernels_ref(), kernels_cpu()};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 2; ti++) {
            const kernels_table *k = tables[ti];
            int64_t m = shapes[si].m, n = m * shapes[si].c;
            int c = shapes[si].c;
            float *xf = malloc(n * 4), *rf = malloc(n * 4), *dy = malloc(n * 4);
            float *yf = malloc(n * 4), *dxf = malloc(n * 4), *dxb = malloc(n * 4);
            float *gf = malloc(n * 4), *gb = malloc(n * 4);
            rp_bf16 *xb = malloc(n * 2), *rb = malloc(n * 2), *yb = malloc(n * 2);
            float *mean = malloc(c * 4), *invstd = malloc(c * 4), *gamma = malloc(c * 4),
                  *beta = malloc(c * 4);
            double *s1 = malloc(2 * c * 8), *s2 = malloc(2 * c * 8), *mag = malloc(2 * c * 8);
            tu_fill(xf, n, 40 + si, -2, 3);
            tu_fill(rf, n, 50 + si, -1, 1);
            tu_fill(dy, n, 60 + si, -1, 1);
            tu_fill(mean, c, 70, -0.5, 0.5);
            tu_fill(invstd, c, 71, 0.5, 2);
            tu_fill(gamma, c, 72, 0.5, 1.5);
            tu_fill(beta, c, 73, -0.2, 0.2);
            rp_bf16_from_f32_array(xb, xf, (size_t)n);
            rp_bf16_from_f32_array(rb, rf, (size_t)n);
            rp_bf16_to_f32_array(xf, xb, (size_t)n); /* the widened values the f32 kernels see */
            rp_bf16_to_f32_array(rf, rb, (size_t)n);
            char what[96];
            snprintf(what, sizeof what, "%s table, m %lld, c %d", k->name, (long long)m, c);

            k->bn_stats(s1, xf, m, c);
            k->bn_stats_bf16(k, s2, xb, m, c);
            for (int j = 0; j < c; j++)
                mag[j] = mag[c + j] = 0;
            for (int64_t i = 0; i < n; i++) {
                mag[i % c] += fabs(xf[i]);
                mag[c + i % c] += (double)xf[i] * xf[i];
            }
            for (int j = 0; j < 2 * c; j++)
                if (fabs(s1[j] - s2[j]) > 1e-5 * mag[j])
                    fail_msg("bn_stats_bf16 %s: sum %d is %.9g, f32 %.9g", what, j, s2[j], s1[j]);

            /* Each form of the normalisation: plain, with the ReLU, with the residual and the
               ReLU (the last one's y feeds the backward below). The cpu table runs short rows
               in spans of several (elementwise.c): m is not always a whole number of spans. */
            for (int form = 0; form < 3; form++) {
                bool relu = form > 0;
                k->bn_norm_fwd(yf, xf, mean, invstd, gamma, beta, form == 2 ? rf : NULL, relu, m,
                               c);
                k->bn_norm_fwd_bf16(k, yb, xb, mean, invstd, gamma, beta, form == 2 ? rb : NULL,
                                    relu, m, c);
                for (int64_t i = 0; i < n; i++)
                    if (yb[i] != rp_bf16_from_f32(yf[i]))
                        fail_msg("bn_norm_fwd_bf16 %s, form %d: y[%lld] 0x%04x, want 0x%04x", what,
                                 form, (long long)i, yb[i], rp_bf16_from_f32(yf[i]));
            }

            /* Backward with the fused ReLU's y (the bf16 one, widened for the f32 kernel). */
            float *yw = malloc(n * 4);
            rp_bf16_to_f32_array(yw, yb, (size_t)n);
            k->bn_stats_bwd(s1, dy, yw, xf, mean, invstd, m, c, gf);
            k->bn_stats_bwd_bf16(k, s2, dy, yb, xb, mean, invstd, m, c, gb);
            assert_memory_equal(gf, gb, (size_t)n * 4);
            for (int j = 0; j < 2 * c; j++)
                if (fabs(s1[j] - s2[j]) > 1e-5 * (mag[j % c] + (double)m) + 1e-9)
                    fail_msg("bn_stats_bwd_bf16 %s: sum %d is %.9g, f32 %.9g", what, j, s2[j],
                             s1[j]);
            k->bn_bwd_data(dxf, dy, yw, xf, mean, invstd, s1, gamma, (double)m, m, c);
            k->bn_bwd_data_bf16(k, dxb, RP_F32, dy, yb, xb, mean, invstd, s1, gamma, (double)m, m,
                                c);
            assert_memory_equal(dxf, dxb, (size_t)n * 4);
            /* dx written in bf16 (the tape's bf16 gradients): the f32 dx rounded, bit for bit,
               with the fused ReLU's y and without (f32 dx of the same kernel on both). */
            rp_bf16 *dxh = malloc(n * 2);
            for (int relu = 1; relu >= 0; relu--) {
                k->bn_bwd_data_bf16(k, dxb, RP_F32, dy, relu ? yb : NULL, xb, mean, invstd, s1,
                                    gamma, (double)m, m, c);
                k->bn_bwd_data_bf16(k, dxh, RP_BF16, dy, relu ? yb : NULL, xb, mean, invstd, s1,
                                    gamma, (double)m, m, c);
                for (int64_t i = 0; i < n; i++)
                    if (dxh[i] != rp_bf16_from_f32(dxb[i]))
                        fail_msg("bn_bwd_data_bf16 %s, bf16 dx, relu %d: dx[%lld] 0x%04x, want "
                                 "0x%04x",
                                 what, relu, (long long)i, dxh[i], rp_bf16_from_f32(dxb[i]));
            }
            free(dxh);
            free(yw);
            free(xf), free(rf), free(dy), free(yf), free(dxf), free(dxb), free(gf), free(gb);
            free(xb), free(rb), free(yb), free(mean), free(invstd), free(gamma), free(beta);
            free(s1), free(s2), free(mag);
        }
}

/*
 * The bf16 normalisation's edge values: outputs that are subnormal (which the conversion
 * instruction would flush: they take the integer rule), NaN (made quiet; the ReLU makes it 0),
 * -0 (kept; the ReLU makes it +0), infinities, and values at bf16 rounding ties, over rows of 5
 * channels (spans of 65: the portable loop), 8 (spans of 64, the last one partial: a masked
 * step; and one row alone, its subnormal in that step only) and 64. The cpu table against
 * rounding its f32 kernel's output on the widened inputs, bit for bit.
 */
static void test_bn_bf16_norm_edges(void **state)
{
    (void)state;
    const kernels_table *k = kernels_cpu();
    static const uint16_t special[] = {0x0001, 0x8001, 0x007f, 0x0080, 0x8000, 0x0000,
                                       0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x3f81,
                                       0xbf81, 0x0040, 0x00ff, 0x4049};
    enum { NS = sizeof special / sizeof special[0] };
    static const struct {
        int m, c;
    } shapes[] = {{37, 5}, {37, 8}, {37, 64}, {1, 8}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int c = shapes[si].c;
        int64_t m = shapes[si].m, n = m * c;
        rp_bf16 *xb = malloc(n * 2), *rb = malloc(n * 2), *yb = malloc(n * 2);
        float *xf = malloc(n * 4), *rf = malloc(n * 4), *yf = malloc(n * 4);
        float *mean = malloc(c * 4), *invstd = malloc(c * 4), *gamma = malloc(c * 4),
              *beta = malloc(c * 4);
        /* Channel j: every third an identity map (y = x: a subnormal x gives a subnormal y),
           the others scales that land near ties and underflow. */
        for (int j = 0; j < c; j++) {
            mean[j] = j % 3 == 0 ? 0.0f : 0.25f * (float)(j % 5);
            invstd[j] = j % 3 == 0 ? 1.0f : (j % 3 == 1 ? 0x1p-100f : 1.5f);
            gamma[j] = 1.0f;
            beta[j] = j % 3 == 0 ? 0.0f : (j % 3 == 1 ? 0x1p-127f : -0.375f);
        }
        for (int64_t i = 0; i < n; i++) {
            xb[i] = special[(i * 7 + i / c) % NS];
            rb[i] = special[(i * 5 + 3) % NS];
        }
        if (m == 1) xb[0] = 0x0001; /* channel 0 maps x to itself: a subnormal y */
        rp_bf16_to_f32_array(xf, xb, (size_t)n);
        rp_bf16_to_f32_array(rf, rb, (size_t)n);
        int subnormal_outputs = 0;
        for (int form = 0; form < 3; form++) {
            bool relu = form > 0;
            const rp_bf16 *r = form == 2 ? rb : NULL;
            k->bn_norm_fwd(yf, xf, mean, invstd, gamma, beta, form == 2 ? rf : NULL, relu, m, c);
            k->bn_norm_fwd_bf16(k, yb, xb, mean, invstd, gamma, beta, r, relu, m, c);
            for (int64_t i = 0; i < n; i++) {
                if (yf[i] != 0 && fabsf(yf[i]) < 0x1p-126f) subnormal_outputs++;
                if (yb[i] != rp_bf16_from_f32(yf[i]))
                    fail_msg("bn_norm_fwd_bf16 c %d form %d: y[%lld] 0x%04x, want 0x%04x (f32 %a)",
                             c, form, (long long)i, yb[i], rp_bf16_from_f32(yf[i]), (double)yf[i]);
            }
        }
        assert_true(subnormal_outputs > 0); /* the flushing case was reached */
        free(xb), free(rb), free(yb), free(xf), free(rf), free(yf);
        free(mean), free(invstd), free(gamma), free(beta);
    }
}

/* The path is named, and it is one of the four the header lists. */
/*
 * kcpu_bf16_round (the hardware instruction where the CPU has AVX512-BF16, which flushes
 * subnormals) gives rp_bf16_from_f32's value for every input: each bf16 pattern's f32 value
 * and the f32 values around its rounding boundaries (ties, one ulp either side), subnormals
 * among them, with subnormals alone and mixed into blocks of normal values, NaNs with payloads
 * in either half, and lengths that leave a partial block.
 */
static void test_bf16_round_array(void **state)
{
    (void)state;
    enum { PER = 5 };
    int64_t n = 65536 * PER;
    float *x = malloc((size_t)n * 4);
    rp_bf16 *got = malloc((size_t)n * 2);
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t base = h << 16,
                 bits[PER] = {base, base + 0x7fff, base + 0x8000, base + 0x8001, base + 0xffff};
        for (int k = 0; k < PER; k++)
            memcpy(&x[(int64_t)h * PER + k], &bits[k], 4);
    }
    for (int pass = 0; pass < 2; pass++) {
        /* Pass 1 shuffles the values (a fixed stride through them), so subnormal and normal
           values share blocks of 16 in every proportion. */
        if (pass == 1)
            for (int64_t i = 0; i < n; i++) {
                int64_t j = (i * 40503) % n;
                float t = x[i];
                x[i] = x[j], x[j] = t;
            }
        for (int64_t len = n; len >= n - 17; len -= 17) {
            kcpu_bf16_round(got, x, len);
            for (int64_t i = 0; i < len; i++) {
                rp_bf16 want = rp_bf16_from_f32(x[i]);
                if (got[i] != want) {
                    uint32_t u;
                    memcpy(&u, &x[i], 4);
                    fail_msg("kcpu_bf16_round(0x%08x) = 0x%04x, want 0x%04x (pass %d, i %lld)", u,
                             got[i], want, pass, (long long)i);
                }
            }
        }
    }
    free(x), free(got);
}

static void test_bf16_path_named(void **state)
{
    (void)state;
    const char *p = kcpu_bf16_path();
    assert_true(strcmp(p, "amx") == 0 || strcmp(p, "avx512_bf16") == 0 ||
                strcmp(p, "avx512_core (emulated)") == 0 || strcmp(p, "reference") == 0);
    assert_string_equal(kref_bf16_path(), "reference");
}

/* A compute type other than f32 or bf16 is refused by name. */
/*
 * The ReLU rounded into bf16 (rp_relu_to) is the f32 ReLU's output rounded, bit for bit, on the
 * cpu and ref tables: over edge values (NaN, -0, infinities, subnormals the conversion
 * instruction would flush, ties) and enough values for several blocks on each thread. Upsampling
 * copies bf16 values as they are, and the cpu table's upsampling (both ways) is the reference's,
 * bit for bit, at odd and vector widths.
 */
static void test_relu_upsample_bf16(void **state)
{
    (void)state;
    enum { N = 70001 };
    static const float special[] = {NAN,         -NAN,        -0.0f,     0.0f,      INFINITY,
                                    -INFINITY,   1e-40f,      0x1p-133f, 0x1p-134f, 0x1.01p-126f,
                                    1.00390625f, 1.01171875f, -1.5f,     3.4e38f,   0x1.ff8p127f};
    enum { NS = sizeof special / sizeof special[0] };
    float *x = malloc(N * 4);
    tu_fill(x, N, 41, -3, 3);
    for (int i = 0; i < NS; i++)
        x[i * 4099] = special[i]; /* spread over blocks */
    rp_bf16 *got = malloc(N * 2);
    const kernels_table *tables[] = {kernels_ref(), kernels_cpu()};
    for (int ti = 0; ti < 2; ti++) {
        memset(got, 0xff, N * 2);
        tables[ti]->relu_fwd_bf16(got, x, N);
        for (int64_t i = 0; i < N; i++) {
            rp_bf16 want = rp_bf16_from_f32(x[i] > 0 ? x[i] : 0.0f);
            if (got[i] != want)
                fail_msg("%s relu_fwd_bf16: x[%lld] = %a gives 0x%04x, want 0x%04x",
                         tables[ti]->name, (long long)i, (double)x[i], got[i], want);
        }
    }
    static const int shapes[][4] = {{3, 5, 7, 5}, {2, 8, 8, 32}, {1, 1, 1, 1}, {4, 16, 16, 64}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int n = shapes[si][0], h = shapes[si][1], w = shapes[si][2], c = shapes[si][3];
        int64_t in = (int64_t)n * h * w * c, out = 4 * in;
        rp_bf16 *xb = malloc(in * 2), *yb = malloc(out * 2), *yr = malloc(out * 2);
        float *xf = malloc(in * 4), *yf = malloc(out * 4), *dy = malloc(out * 4);
        float *d1 = malloc(in * 4), *d2 = malloc(in * 4);
        tu_fill(xf, in, 42 + si, -2, 2);
        rp_bf16_from_f32_array(xb, xf, (size_t)in);
        kernels_ref()->upsample2x_fwd(yr, xb, RP_BF16, n, h, w, c);
        kernels_cpu()->upsample2x_fwd(yb, xb, RP_BF16, n, h, w, c);
        assert_memory_equal(yb, yr, (size_t)out * 2);
        kernels_ref()->upsample2x_fwd(yf, xf, RP_F32, n, h, w, c);
        for (int64_t i = 0; i < out; i++)
            assert_int_equal(yr[i], rp_bf16_from_f32(yf[i])); /* the f32 copy's values */
        kernels_cpu()->upsample2x_fwd(dy, xf, RP_F32, n, h, w, c);
        assert_memory_equal(dy, yf, (size_t)out * 4);
        tu_fill(dy, out, 62 + si, -1, 1);
        /* The first 2x2 block all -0: the reference's sum, from +0, is +0. */
        dy[0] = dy[c] = dy[2 * (int64_t)w * c] = dy[2 * (int64_t)w * c + c] = -0.0f;
        kernels_ref()->upsample2x_bwd(d1, dy, n, h, w, c);
        kernels_cpu()->upsample2x_bwd(d2, dy, n, h, w, c);
        assert_memory_equal(d2, d1, (size_t)in * 4);
        free(xb), free(yb), free(yr), free(xf), free(yf), free(dy), free(d1), free(d2);
    }
    free(x), free(got);
}

/*
 * Max pooling keeps bf16 (a maximum is exact): the cpu table's and the reference's outputs and
 * argmax equal, bit for bit, those of pooling the widened values in f32 (each output the
 * winner's own bits), ties and NaN included, over ResNet's 3x3 stride-2 pad-1 window and a 2x2
 * one at odd and vector widths.
 */
static void test_maxpool_bf16(void **state)
{
    (void)state;
    static const int shapes[][7] = {
        /* n, h, w, c, k, stride, pad */
        {2, 9, 7, 5, 3, 2, 1},
        {3, 8, 8, 64, 3, 2, 1},
        {1, 6, 6, 17, 2, 2, 0},
    };
    const kernels_table *tables[] = {kernels_ref(), kernels_cpu()};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int *s = shapes[si];
        kernels_pool_desc d;
        assert_int_equal(kernels_pool_desc_init(&d, s[0], s[1], s[2], s[3], s[4], s[5], s[6]),
                         RP_OK);
        int64_t nx = (int64_t)d.n * d.h * d.w * d.c, ny = (int64_t)d.n * d.oh * d.ow * d.c;
        float *xf = malloc(nx * 4), *yf = malloc(ny * 4);
        rp_bf16 *xb = malloc(nx * 2), *yb = malloc(ny * 2);
        int32_t *af = malloc(ny * 4), *ab = malloc(ny * 4);
        tu_fill(xf, nx, 71 + si, -2, 2);
        for (int64_t i = 0; i < nx; i += 7)
            xf[i] = xf[i + 1 < nx ? i + 1 : i]; /* ties between neighbours */
        xf[3] = NAN, xf[nx - 1] = -0.0f;
        rp_bf16_from_f32_array(xb, xf, (size_t)nx);
        rp_bf16_to_f32_array(xf, xb, (size_t)nx);
        for (int ti = 0; ti < 2; ti++) {
            kernels_pool_desc df = d, dh = d;
            dh.type = RP_BF16;
            assert_int_equal(tables[ti]->maxpool_fwd(yf, af, xf, &df), RP_OK);
            assert_int_equal(tables[ti]->maxpool_fwd(yb, ab, xb, &dh), RP_OK);
            assert_memory_equal(ab, af, (size_t)ny * 4);
            for (int64_t i = 0; i < ny; i++)
                if (yb[i] != xb[af[i]] || memcmp(&yf[i], &xf[af[i]], 4) != 0)
                    fail_msg("%s maxpool bf16, shape %zu: y[%lld] 0x%04x, f32 winner 0x%04x",
                             tables[ti]->name, si, (long long)i, yb[i], xb[af[i]]);
        }
        free(xf), free(yf), free(xb), free(yb), free(af), free(ab);
    }
    kernels_pool_desc d;
    assert_int_equal(kernels_pool_desc_init(&d, 1, 4, 4, 1, 2, 2, 0), RP_OK);
    d.type = RP_I32;
    float buf[16] = {0};
    int32_t am[4];
    assert_int_equal(kcpu_maxpool_fwd(buf, am, buf, &d), RP_ERR_INVALID);
    tu_assert_error_contains("pool2d: values stored as i32");
}

static void test_bad_compute_refused(void **state)
{
    (void)state;
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 1, 4, 4, 2, 2, 3, 3, 1, 1), RP_OK);
    assert_int_equal(d.compute, RP_F32);
    d.compute = RP_I32;
    float buf[64] = {0};
    assert_int_equal(kcpu_conv2d_fwd(buf, buf, buf, NULL, &d), RP_ERR_INVALID);
    tu_assert_error_contains("compute type i32");
    /* bf16 storage needs bf16 compute. */
    d.compute = RP_F32;
    d.x_type = RP_BF16;
    assert_int_equal(kcpu_conv2d_fwd(buf, buf, buf, NULL, &d), RP_ERR_INVALID);
    tu_assert_error_contains("x stored as bf16 with f32 compute");
    /* So does a bf16 dy: an f32 backward would read its halves as floats. */
    d.x_type = RP_F32;
    d.dy_type = RP_BF16;
    assert_int_equal(kcpu_conv2d_bwd_data(buf, buf, buf, &d), RP_ERR_INVALID);
    tu_assert_error_contains("dy stored as bf16 with f32 compute");
    assert_int_equal(kref_conv2d_bwd_weights(buf, NULL, buf, buf, &d), RP_ERR_INVALID);
    tu_assert_error_contains("dy stored as bf16 with f32 compute");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_conv_bf16),
        cmocka_unit_test(test_bn_bf16),
        cmocka_unit_test(test_bn_bf16_norm_edges),
        cmocka_unit_test(test_bf16_round_array),
        cmocka_unit_test(test_bf16_path_named),
        cmocka_unit_test(test_relu_upsample_bf16),
        cmocka_unit_test(test_maxpool_bf16),
        cmocka_unit_test(test_bad_compute_refused),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
