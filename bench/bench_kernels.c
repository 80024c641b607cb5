/*
 * bench_kernels.c - the fast kernels against the engines underneath, side
 * by side in one run:
 *   (a) GEMM: kcpu_gemm against dnnl_sgemm called directly, and oneDNN's
 *       GEMM against OpenBLAS's cblas_sgemm (the engine choice);
 *   (b) 3x3 convolutions (forward, backward data, backward weights):
 *       kcpu_conv2d_* against oneDNN called directly, with the same
 *       NHWC activations and OHWI user weights, primitives created once
 *       outside the timed loop and the same weight reorders a direct user
 *       of those formats needs;
 *   (c) pooling: our max pooling loop (value and argmax) against oneDNN's
 *       max pooling alone, and our cached average pooling against oneDNN;
 *   (d) the weight layout choice: oneDNN with weights forced to OHWI
 *       against weights in the layout it prefers plus reorders;
 *   (e) batch norm (per-channel sums forward and backward, normalisation,
 *       backward data): the fast kernels against the plain reference ones.
 *
 * Measurements are interleaved: each round times ours and the direct call
 * back to back (alternating which goes first), and the report gives the
 * median time of each and the median of the per-round ratios as the
 * overhead, (ours/direct - 1) * 100, positive when ours is slower.
 */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "kernels/cpu/conv_pool_dnnl.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/ref/elementwise.h"
#include "replicator/core.h"

#define MAX_ROUNDS 101

static int g_rounds = 11;
static double g_min_sample_s = 0.02;

/* Exits the benchmark program (not library code) on a oneDNN failure. */
#define DN(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t dn_status_ = (call);                                                         \
        if (dn_status_ != dnnl_success) {                                                          \
            fprintf(stderr, "%s:%d: %s failed with status %d\n", __FILE__, __LINE__, #call,        \
                    (int)dn_status_);                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define RP(call)                                                                                   \
    do {                                                                                           \
        if ((call) != RP_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, rp_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float *buffer(int64_t n, uint64_t seed)
{
    float *p = rp_alloc((size_t)n * sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    rp_rng_fill_uniform(seed, 0, p, (size_t)n, -1.0f, 1.0f);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the paired timing harness ------------------------------------------ */

typedef void (*bench_fn)(void *ctx);

/* Seconds per call of fn averaged over iters calls. */
static double time_calls(bench_fn fn, void *ctx, int iters)
{
    double t0 = rp_now_s();
    for (int i = 0; i < iters; i++)
        fn(ctx);
    return (rp_now_s() - t0) / iters;
}

typedef struct pair_result {
    double ours_s, direct_s, overhead_pct;
} pair_result;

/*
 * Times ours and direct in interleaved rounds. Each sample repeats a call
 * enough times to last g_min_sample_s, so short kernels are not timer noise.
 */
static pair_result time_pair(bench_fn ours, void *ours_ctx, bench_fn direct, void *direct_ctx)
{
    double to[MAX_ROUNDS], td[MAX_ROUNDS], ratio[MAX_ROUNDS];
    ours(ours_ctx), direct(direct_ctx); /* warm-up: builds caches, faults pages in */
    double one = time_calls(direct, direct_ctx, 1);
    int iters = one > 0 ? (int)ceil(g_min_sample_s / one) : 1;
    if (iters < 1) iters = 1;
    if (iters > 10000) iters = 10000;
    for (int r = 0; r < g_rounds; r++) {
        if (r % 2 == 0) {
            to[r] = time_calls(ours, ours_ctx, iters);
            td[r] = time_calls(direct, direct_ctx, iters);
        } else {
            td[r] = time_calls(direct, direct_ctx, iters);
            to[r] = time_calls(ours, ours_ctx, iters);
        }
        ratio[r] = to[r] / td[r];
    }
    pair_result res;
    res.ours_s = median(to, g_rounds);
    res.direct_s = median(td, g_rounds);
    res.overhead_pct = (median(ratio, g_rounds) - 1.0) * 100.0;
    return res;
}

static void report_flops(const char *name, double flops, pair_result r, const char *note)
{
    printf("  %-44s %9.1f %9.1f %+8.1f%%  %s\n", name, flops / r.ours_s * 1e-9,
           flops / r.direct_s * 1e-9, r.overhead_pct, note ? note : "");
}

/* Times in units of `scale` seconds (1e-3: ms, 1e-6: us). */
static void report_time(const char *name, pair_result r, double scale, const char *note)
{
    printf("  %-44s %9.3f %9.3f %+8.1f%%  %s\n", name, r.ours_s / scale, r.direct_s / scale,
           r.overhead_pct, note ? note : "");
}

/* ---- (a) GEMM ----------------------------------------------------------- */

typedef struct gemm_ctx {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
} gemm_ctx;

static void gemm_ours(void *p)
{
    gemm_ctx *g = p;
    kcpu_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, 0.0f, g->c, g->ldc);
}

static void gemm_direct(void *p)
{
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, 0.0f, g->c, g->ldc);
}

static void gemm_dnnl(void *p)
{
    gemm_ctx *g = p;
    dnnl_sgemm(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b,
               g->ldb, 0.0f, g->c, g->ldc);
}

static void bench_gemm(void)
{
    static const struct {
        const char *name;
        bool ta, tb;
        int m, n, k;
    } shapes[] = {
        {"square 1024x1024x1024", false, false, 1024, 1024, 1024},
        {"MLP fwd 128x256, k=784", false, true, 128, 256, 784},
        {"MLP bwd-w 784x256, k=128 (A^T)", true, false, 784, 256, 128},
        {"R20 im2col fwd 131072x16, k=144", false, false, 131072, 16, 144},
        {"R20 im2col bwd-w 144x16, k=131072 (A^T)", true, false, 144, 16, 131072},
        {"R18 im2col fwd 100352x64, k=576", false, false, 100352, 64, 576},
        {"R18 im2col bwd-d 100352x576, k=64 (B^T)", false, true, 100352, 576, 64},
    };
    printf("\n(a) GEMM, row-major, GFLOP/s: kcpu_gemm vs dnnl_sgemm directly; then dnnl_sgemm vs "
           "OpenBLAS cblas_sgemm (\"overhead\" there = oneDNN's time over OpenBLAS's)\n");
    printf("  %-44s %9s %9s %9s\n", "shape (m x n, k)", "ours", "direct", "overhead");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gemm_ctx g = {.ta = shapes[s].ta,
                      .tb = shapes[s].tb,
                      .m = shapes[s].m,
                      .n = shapes[s].n,
                      .k = shapes[s].k};
        g.lda = g.ta ? g.m : g.k;
        g.ldb = g.tb ? g.k : g.n;
        g.ldc = g.n;
        float *a = buffer((int64_t)g.m * g.k, 1), *b = buffer((int64_t)g.k * g.n, 2);
        float *c = buffer((int64_t)g.m * g.n, 3);
        g.a = a, g.b = b, g.c = c;
        pair_result r = time_pair(gemm_ours, &g, gemm_dnnl, &g);
        report_flops(shapes[s].name, 2.0 * g.m * g.n * g.k, r, "ours vs dnnl_sgemm");
        r = time_pair(gemm_dnnl, &g, gemm_direct, &g);
        report_flops("", 2.0 * g.m * g.n * g.k, r, "dnnl_sgemm vs OpenBLAS");
        rp_free(a), rp_free(b), rp_free(c);
    }
}

/* ---- (b) convolution ---------------------------------------------------- */

typedef enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS } conv_kind;
static const char *const conv_kind_names[] = {"fwd", "bwd-data", "bwd-weights"};

/* What a direct oneDNN user holds: the primitive, the weight reorder, the memories. */
typedef struct direct_conv {
    dnnl_stream_t stream;
    dnnl_primitive_t prim, reorder;
    dnnl_memory_t mems[6];
    int nmems;
    dnnl_exec_arg_t args[4], rargs[2];
    int nargs;
    bool reorder_after;
    char impl[128];
} direct_conv;

typedef struct conv_ctx {
    conv_kind kind;
    kernels_conv_desc d;
    float *x, *w, *y; /* for backward: x = dx or x, y = dy */
    direct_conv dc;
} conv_ctx;

static dnnl_engine_t g_engine;

static dnnl_memory_t direct_mem(direct_conv *dc, const dnnl_memory_desc_t *md, void *handle)
{
    dnnl_memory_t m;
    DN(dnnl_memory_create(&m, md, g_engine, handle));
    dc->mems[dc->nmems++] = m;
    return m;
}

/*
 * Sets up a direct oneDNN convolution over the given buffers exactly as a
 * user with NHWC activations and OHWI weights would: weights in the layout
 * the primitive picks (any_weights) plus a reorder, or forced OHWI.
 */
static void direct_conv_init(direct_conv *dc, conv_kind kind, const kernels_conv_desc *d, float *x,
                             float *w, float *y, bool any_weights)
{
    memset(dc, 0, sizeof *dc);
    DN(dnnl_stream_create(&dc->stream, g_engine, dnnl_stream_default_flags));
    dnnl_memory_desc_t src_md, dst_md, wuser_md, wany_md;
    dnnl_dims_t sd = {d->n, d->c, d->h, d->w}, dd = {d->n, d->o, d->oh, d->ow};
    dnnl_dims_t wd = {d->o, d->c, d->kh, d->kw};
    dnnl_dims_t strides = {d->stride, d->stride}, pad = {d->pad, d->pad};
    DN(dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&wuser_md, 4, wd, dnnl_f32, dnnl_ohwi));
    DN(dnnl_memory_desc_init_by_tag(&wany_md, 4, wd, dnnl_f32,
                                    any_weights ? dnnl_format_tag_any : dnnl_ohwi));
    dnnl_convolution_desc_t fdesc, bdesc;
    dnnl_primitive_desc_t fpd, pd;
    DN(dnnl_convolution_forward_desc_init(&fdesc, dnnl_forward_training, dnnl_convolution_direct,
                                          &src_md, &wany_md, NULL, &dst_md, strides, pad, pad));
    DN(dnnl_primitive_desc_create(&fpd, &fdesc, NULL, g_engine, NULL));
    pd = fpd;
    if (kind == CONV_BWD_DATA) {
        DN(dnnl_convolution_backward_data_desc_init(&bdesc, dnnl_convolution_direct, &src_md,
                                                    &wany_md, &dst_md, strides, pad, pad));
        DN(dnnl_primitive_desc_create(&pd, &bdesc, NULL, g_engine, fpd));
    } else if (kind == CONV_BWD_WEIGHTS) {
        DN(dnnl_convolution_backward_weights_desc_init(&bdesc, dnnl_convolution_direct, &src_md,
                                                       &wany_md, NULL, &dst_md, strides, pad, pad));
        DN(dnnl_primitive_desc_create(&pd, &bdesc, NULL, g_engine, fpd));
    }
    const char *impl = "?";
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(dc->impl, sizeof dc->impl, "%s", impl);
    DN(dnnl_primitive_create(&dc->prim, pd));

    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(
        pd, kind == CONV_BWD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    dnnl_memory_t wuser = direct_mem(dc, &wuser_md, w), wprim = wuser;
    if (!dnnl_memory_desc_equal(wmd, &wuser_md)) {
        dnnl_primitive_desc_t rpd;
        wprim = direct_mem(dc, wmd, DNNL_MEMORY_ALLOCATE);
        dc->reorder_after = kind == CONV_BWD_WEIGHTS;
        if (dc->reorder_after)
            DN(dnnl_reorder_primitive_desc_create(&rpd, wmd, g_engine, &wuser_md, g_engine, NULL));
        else
            DN(dnnl_reorder_primitive_desc_create(&rpd, &wuser_md, g_engine, wmd, g_engine, NULL));
        DN(dnnl_primitive_create(&dc->reorder, rpd));
        DN(dnnl_primitive_desc_destroy(rpd));
        dc->rargs[0] = (dnnl_exec_arg_t){DNNL_ARG_FROM, dc->reorder_after ? wprim : wuser};
        dc->rargs[1] = (dnnl_exec_arg_t){DNNL_ARG_TO, dc->reorder_after ? wuser : wprim};
    }
    dnnl_memory_t src = direct_mem(dc, &src_md, x), dst = direct_mem(dc, &dst_md, y);
    if (kind == CONV_FWD) {
        dc->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, src};
        dc->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wprim};
        dc->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, dst};
    } else if (kind == CONV_BWD_DATA) {
        dc->args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, src};
        dc->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wprim};
        dc->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, dst};
    } else {
        dc->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, src};
        dc->args[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, wprim};
        dc->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, dst};
    }
    dc->nargs = 3;
    if (pd != fpd) DN(dnnl_primitive_desc_destroy(pd));
    DN(dnnl_primitive_desc_destroy(fpd));
}

static void direct_conv_free(direct_conv *dc)
{
    if (dc->reorder) dnnl_primitive_destroy(dc->reorder);
    dnnl_primitive_destroy(dc->prim);
    for (int i = 0; i < dc->nmems; i++)
        dnnl_memory_destroy(dc->mems[i]);
    dnnl_stream_destroy(dc->stream);
}

static void direct_conv_run(direct_conv *dc)
{
    if (dc->reorder && !dc->reorder_after)
        DN(dnnl_primitive_execute(dc->reorder, dc->stream, 2, dc->rargs));
    DN(dnnl_primitive_execute(dc->prim, dc->stream, dc->nargs, dc->args));
    if (dc->reorder && dc->reorder_after)
        DN(dnnl_primitive_execute(dc->reorder, dc->stream, 2, dc->rargs));
    DN(dnnl_stream_wait(dc->stream));
}

static void direct_conv_fn(void *p)
{
    direct_conv_run(p);
}

static void conv_direct(void *p)
{
    direct_conv_run(&((conv_ctx *)p)->dc);
}

static void conv_ours(void *p)
{
    conv_ctx *c = p;
    switch (c->kind) {
    case CONV_FWD:
        RP(kcpu_conv2d_fwd(c->y, c->x, c->w, NULL, &c->d));
        break;
    case CONV_BWD_DATA:
        RP(kcpu_conv2d_bwd_data(c->x, c->y, c->w, &c->d));
        break;
    case CONV_BWD_WEIGHTS:
        RP(kcpu_conv2d_bwd_weights(c->w, NULL, c->y, c->x, &c->d));
        break;
    }
}

/* The same call with the convolution algorithm set first (section f). */
static void conv_ours_auto(void *p)
{
    rp_kernels_set_conv_algorithm(RP_CONV_AUTO);
    conv_ours(p);
}

static void conv_ours_direct(void *p)
{
    rp_kernels_set_conv_algorithm(RP_CONV_DIRECT);
    conv_ours(p);
}

static void bench_conv(void)
{
    static const struct {
        const char *name;
        int n, hw, c, o, k, stride, pad;
    } shapes[] = {
        {"R20 N=128 32x32 16->16 3x3", 128, 32, 16, 16, 3, 1, 1},
        {"R18 N=32 56x56 64->64 3x3", 32, 56, 64, 64, 3, 1, 1},
        {"R18 N=32 56x56 64->128 3x3 s2", 32, 56, 64, 128, 3, 2, 1},
    };
    /* Our wrapper's cost against the same algorithm: Winograd is section (f). */
    rp_kernels_set_conv_algorithm(RP_CONV_DIRECT);
    printf("\n(b) convolution, NHWC/OHWI, GFLOP/s: kcpu_conv2d_* vs oneDNN direct "
           "(weights: primitive's layout + reorder; ours with RP_CONV_DIRECT)\n");
    printf("  %-44s %9s %9s %9s  %s\n", "shape", "ours", "direct", "overhead", "oneDNN impl");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        kernels_conv_desc d;
        RP(kernels_conv_desc_init(&d, shapes[s].n, shapes[s].hw, shapes[s].hw, shapes[s].c,
                                  shapes[s].o, shapes[s].k, shapes[s].k, shapes[s].stride,
                                  shapes[s].pad));
        float *x = buffer((int64_t)d.n * d.h * d.w * d.c, 4);
        float *w = buffer((int64_t)d.o * d.kh * d.kw * d.c, 5);
        float *y = buffer((int64_t)d.n * d.oh * d.ow * d.o, 6);
        double flops = 2.0 * d.n * d.oh * d.ow * d.o * d.c * d.kh * d.kw;
        for (int k = 0; k < 3; k++) {
            conv_ctx c = {.kind = (conv_kind)k, .d = d, .x = x, .w = w, .y = y};
            direct_conv_init(&c.dc, c.kind, &d, x, w, y, true);
            char name[96];
            snprintf(name, sizeof name, "%s %s", shapes[s].name, conv_kind_names[k]);
            pair_result r = time_pair(conv_ours, &c, conv_direct, &c);
            report_flops(name, flops, r, c.dc.impl);
            direct_conv_free(&c.dc);
        }
        rp_free(x), rp_free(w), rp_free(y);
    }

    /*
     * On a convolution too small to take any time, what is left is the cost
     * of a call: ours adds the cache lookup and pointing the memory objects
     * at the caller's buffers; this isolates it from the noise of big runs.
     */
    printf("\n(b2) per-call cost on a tiny convolution, microseconds per call\n");
    printf("  %-44s %9s %9s %9s  %s\n", "shape", "ours", "direct", "overhead", "oneDNN impl");
    kernels_conv_desc d;
    RP(kernels_conv_desc_init(&d, 1, 8, 8, 8, 8, 3, 3, 1, 1));
    float *x = buffer(8 * 8 * 8, 4), *w = buffer(8 * 9 * 8, 5), *y = buffer(8 * 8 * 8, 6);
    for (int k = 0; k < 3; k++) {
        conv_ctx c = {.kind = (conv_kind)k, .d = d, .x = x, .w = w, .y = y};
        direct_conv_init(&c.dc, c.kind, &d, x, w, y, true);
        char name[96];
        snprintf(name, sizeof name, "N=1 8x8 8->8 3x3 %s", conv_kind_names[k]);
        pair_result r = time_pair(conv_ours, &c, conv_direct, &c);
        char note[160];
        snprintf(note, sizeof note, "%s, ours - direct = %+.2f us", c.dc.impl,
                 (r.ours_s - r.direct_s) * 1e6);
        report_time(name, r, 1e-6, note);
        direct_conv_free(&c.dc);
    }
    rp_free(x), rp_free(w), rp_free(y);
    rp_kernels_set_conv_algorithm(RP_CONV_AUTO);
}

/*
 * (f) The convolution algorithm: kcpu_conv2d_* with RP_CONV_AUTO (Winograd for 3x3 stride 1
 * with >= 16 channels, its activations staged through reorders) against RP_CONV_DIRECT, on the
 * SN-GAN's and ResNet-20's shapes. GFLOP/s count the direct algorithm's arithmetic for both.
 */
static void bench_conv_algorithm(void)
{
    static const struct {
        const char *name;
        int n, hw, c, o;
    } shapes[] = {
        {"SN-GAN N=64 32x32 32->32", 64, 32, 32, 32}, {"SN-GAN N=64 16x16 32->32", 64, 16, 32, 32},
        {"SN-GAN N=64 8x8 32->32", 64, 8, 32, 32},    {"R20 N=64 28x28 16->16", 64, 28, 16, 16},
        {"R20 N=64 14x14 32->32", 64, 14, 32, 32},    {"R20 N=64 7x7 64->64", 64, 7, 64, 64},
    };
    printf("\n(f) 3x3 stride-1 convolution, GFLOP/s (direct's arithmetic): kcpu_conv2d_* with "
           "RP_CONV_AUTO vs RP_CONV_DIRECT\n");
    printf("  %-44s %9s %9s %9s\n", "shape", "auto", "direct", "auto/direct-1");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        kernels_conv_desc d;
        RP(kernels_conv_desc_init(&d, shapes[s].n, shapes[s].hw, shapes[s].hw, shapes[s].c,
                                  shapes[s].o, 3, 3, 1, 1));
        float *x = buffer((int64_t)d.n * d.h * d.w * d.c, 4);
        float *w = buffer((int64_t)d.o * d.kh * d.kw * d.c, 5);
        float *y = buffer((int64_t)d.n * d.oh * d.ow * d.o, 6);
        double flops = 2.0 * d.n * d.oh * d.ow * d.o * d.c * d.kh * d.kw;
        for (int k = 0; k < 3; k++) {
            conv_ctx c = {.kind = (conv_kind)k, .d = d, .x = x, .w = w, .y = y};
            char name[96];
            snprintf(name, sizeof name, "%s %s", shapes[s].name, conv_kind_names[k]);
            pair_result r = time_pair(conv_ours_auto, &c, conv_ours_direct, &c);
            bool wino = false;
            rp_kernels_set_conv_algorithm(RP_CONV_AUTO); /* what AUTO chose, not the last run's */
            RP(kcpu_conv2d_uses_winograd(&d, k, &wino));
            report_flops(name, flops, r, wino ? "Winograd" : "direct (no Winograd here)");
        }
        rp_free(x), rp_free(w), rp_free(y);
    }
    rp_kernels_set_conv_algorithm(RP_CONV_AUTO);
}

/* ---- (c) pooling -------------------------------------------------------- */

typedef struct pool_ctx {
    kernels_pool_desc d;
    float *x, *y;
    int32_t *argmax;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t mems[3];
    dnnl_exec_arg_t args[3];
    int nargs;
    char impl[128];
} pool_ctx;

static void pool_direct_init(pool_ctx *p, dnnl_alg_kind_t alg)
{
    const kernels_pool_desc *d = &p->d;
    DN(dnnl_stream_create(&p->stream, g_engine, dnnl_stream_default_flags));
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_dims_t sd = {d->n, d->c, d->h, d->w}, dd = {d->n, d->c, d->oh, d->ow};
    dnnl_dims_t kernel = {d->k, d->k}, strides = {d->stride, d->stride}, pad = {d->pad, d->pad};
    DN(dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, dnnl_nhwc));
    DN(dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nhwc));
    dnnl_pooling_desc_t desc;
    dnnl_primitive_desc_t pd;
    DN(dnnl_pooling_forward_desc_init(&desc, dnnl_forward_training, alg, &src_md, &dst_md, strides,
                                      kernel, pad, pad));
    DN(dnnl_primitive_desc_create(&pd, &desc, NULL, g_engine, NULL));
    const char *impl = "?";
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(p->impl, sizeof p->impl, "%s", impl);
    DN(dnnl_primitive_create(&p->prim, pd));
    DN(dnnl_memory_create(&p->mems[0], &src_md, g_engine, p->x));
    DN(dnnl_memory_create(&p->mems[1], &dst_md, g_engine, p->y));
    p->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, p->mems[0]};
    p->args[1] = (dnnl_exec_arg_t){DNNL_ARG_DST, p->mems[1]};
    p->nargs = 2;
    const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
    if (ws && dnnl_memory_desc_get_size(ws) > 0) {
        DN(dnnl_memory_create(&p->mems[2], ws, g_engine, DNNL_MEMORY_ALLOCATE));
        p->args[p->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, p->mems[2]};
    }
    DN(dnnl_primitive_desc_destroy(pd));
}

static void pool_direct_free(pool_ctx *p)
{
    dnnl_primitive_destroy(p->prim);
    for (int i = 0; i < 3; i++)
        if (p->mems[i]) dnnl_memory_destroy(p->mems[i]);
    dnnl_stream_destroy(p->stream);
}

static void pool_direct(void *ctx)
{
    pool_ctx *p = ctx;
    DN(dnnl_primitive_execute(p->prim, p->stream, p->nargs, p->args));
    DN(dnnl_stream_wait(p->stream));
}

static void maxpool_ours(void *ctx)
{
    pool_ctx *p = ctx;
    RP(kcpu_maxpool_fwd(p->y, p->argmax, p->x, &p->d));
}

static void avgpool_ours(void *ctx)
{
    pool_ctx *p = ctx;
    RP(kcpu_avgpool_fwd(p->y, p->x, &p->d));
}

static void bench_pool(void)
{
    static const struct {
        const char *name;
        int n, hw, c, k, stride, pad;
    } shapes[] = {
        {"R18 stem N=32 112x112x64 3x3 s2 p1", 32, 112, 64, 3, 2, 1},
        {"N=128 32x32x16 2x2 s2", 128, 32, 16, 2, 2, 0},
    };
    printf("\n(c) pooling forward, ms per call: ours vs oneDNN direct\n");
    printf("  %-44s %9s %9s %9s  %s\n", "shape", "ours", "direct", "overhead", "oneDNN impl");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int avg = 0; avg < 2; avg++) {
            pool_ctx p;
            memset(&p, 0, sizeof p);
            RP(kernels_pool_desc_init(&p.d, shapes[s].n, shapes[s].hw, shapes[s].hw, shapes[s].c,
                                      shapes[s].k, shapes[s].stride, shapes[s].pad));
            int64_t ny = (int64_t)p.d.n * p.d.oh * p.d.ow * p.d.c;
            p.x = buffer((int64_t)p.d.n * p.d.h * p.d.w * p.d.c, 7);
            p.y = buffer(ny, 8);
            p.argmax = rp_alloc((size_t)ny * sizeof *p.argmax);
            pool_direct_init(&p, avg ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_max);
            char name[96], note[256];
            snprintf(name, sizeof name, "%s %s", avg ? "avg" : "max", shapes[s].name);
            snprintf(note, sizeof note, "%s%s", p.impl,
                     avg ? "" : " (ours also writes argmax; direct: value + workspace)");
            pair_result r = time_pair(avg ? avgpool_ours : maxpool_ours, &p, pool_direct, &p);
            report_time(name, r, 1e-3, note);
            pool_direct_free(&p);
            rp_free(p.x), rp_free(p.y), rp_free(p.argmax);
        }
    }
}

/* ---- (d) the weight layout choice --------------------------------------- */

static void bench_weight_layout(void)
{
    printf("\n(d) weight layout, direct oneDNN, GFLOP/s (best of several): weights forced OHWI "
           "vs primitive's layout + reorder\n");
    printf("  %-44s %9s %9s %9s  %s\n", "shape", "OHWI", "any+reord", "slowdown", "impl (OHWI)");
    kernels_conv_desc d;
    RP(kernels_conv_desc_init(&d, 1, 32, 32, 16, 16, 3, 3, 1, 1));
    float *x = buffer((int64_t)d.n * d.h * d.w * d.c, 9);
    float *w = buffer((int64_t)d.o * d.kh * d.kw * d.c, 10);
    float *y = buffer((int64_t)d.n * d.oh * d.ow * d.o, 11);
    double flops = 2.0 * d.n * d.oh * d.ow * d.o * d.c * d.kh * d.kw;
    for (int k = 0; k < 3; k++) {
        direct_conv forced, any;
        direct_conv_init(&forced, (conv_kind)k, &d, x, w, y, false);
        direct_conv_init(&any, (conv_kind)k, &d, x, w, y, true);
        direct_conv_run(&forced), direct_conv_run(&any);
        /*
         * The forced layout is orders of magnitude slower: single calls of it
         * suffice, while the fast one is averaged over ~20 ms per sample. The
         * best of several samples is kept for both: this compares what each
         * layout can do, so noise from other processes should not decide it.
         */
        double one = time_calls(direct_conv_fn, &any, 1);
        int iters = one > 0 ? (int)ceil(g_min_sample_s / one) : 1;
        if (iters < 1) iters = 1;
        double f = INFINITY, a = INFINITY;
        for (int r = 0; r < 3; r++) {
            f = fmin(f, time_calls(direct_conv_fn, &forced, 1));
            a = fmin(a, time_calls(direct_conv_fn, &any, iters));
        }
        for (int r = 0; r < 4; r++)
            a = fmin(a, time_calls(direct_conv_fn, &any, iters));
        char name[96];
        snprintf(name, sizeof name, "N=1 32x32 16->16 3x3 %s", conv_kind_names[k]);
        printf("  %-44s %9.2f %9.1f %8.0fx  %s (any: %s)\n", name, flops / f * 1e-9,
               flops / a * 1e-9, f / a, forced.impl, any.impl);
        direct_conv_free(&forced), direct_conv_free(&any);
    }
    rp_free(x), rp_free(w), rp_free(y);
}

/* ---- (e) batch-norm sums -------------------------------------------------- */

typedef struct bn_ctx {
    const float *x, *dy, *mean, *invstd, *gamma, *beta;
    float *y;
    double *sums;
    int64_t m;
    int c;
} bn_ctx;

static void bn_stats_ours(void *p)
{
    bn_ctx *b = p;
    kcpu_bn_stats(b->sums, b->x, b->m, b->c);
}

static void bn_stats_ref(void *p)
{
    bn_ctx *b = p;
    kref_bn_stats(b->sums, b->x, b->m, b->c);
}

static void bn_stats_bwd_ours(void *p)
{
    bn_ctx *b = p;
    kcpu_bn_stats_bwd(b->sums, b->dy, NULL, b->x, b->mean, b->invstd, b->m, b->c, NULL);
}

static void bn_stats_bwd_ref(void *p)
{
    bn_ctx *b = p;
    kref_bn_stats_bwd(b->sums, b->dy, NULL, b->x, b->mean, b->invstd, b->m, b->c, NULL);
}

static void bn_norm_fwd_ours(void *p)
{
    bn_ctx *b = p;
    kcpu_bn_norm_fwd(b->y, b->x, b->mean, b->invstd, b->gamma, b->beta, NULL, false, b->m, b->c);
}

static void bn_norm_fwd_ref(void *p)
{
    bn_ctx *b = p;
    kref_bn_norm_fwd(b->y, b->x, b->mean, b->invstd, b->gamma, b->beta, NULL, false, b->m, b->c);
}

static void bn_bwd_data_ours(void *p)
{
    bn_ctx *b = p;
    kcpu_bn_bwd_data(b->y, b->dy, NULL, b->x, b->mean, b->invstd, b->sums, b->gamma, (double)b->m,
                     b->m, b->c);
}

static void bn_bwd_data_ref(void *p)
{
    bn_ctx *b = p;
    kref_bn_bwd_data(b->y, b->dy, NULL, b->x, b->mean, b->invstd, b->sums, b->gamma, (double)b->m,
                     b->m, b->c);
}

/* The same kernels over bf16 storage (x, y) with the ReLU mask, as ResNet's blocks call them,
 * against the f32 kernels on the same shapes and arguments. */
typedef struct bn_bf16_ctx {
    bn_ctx f;
    const rp_bf16 *xh;
    rp_bf16 *yh;
    float *dx;
} bn_bf16_ctx;

static void bn_stats_bf16(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_stats_bf16(kernels_cpu(), b->f.sums, b->xh, b->f.m, b->f.c);
}

static void bn_stats_bwd_relu_bf16(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_stats_bwd_bf16(kernels_cpu(), b->f.sums, b->f.dy, b->yh, b->xh, b->f.mean, b->f.invstd,
                           b->f.m, b->f.c, NULL);
}

static void bn_stats_bwd_relu_f32(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_stats_bwd(b->f.sums, b->f.dy, b->f.y, b->f.x, b->f.mean, b->f.invstd, b->f.m, b->f.c,
                      NULL);
}

static void bn_norm_fwd_relu_bf16(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_norm_fwd_bf16(kernels_cpu(), b->yh, b->xh, b->f.mean, b->f.invstd, b->f.gamma,
                          b->f.beta, NULL, true, b->f.m, b->f.c);
}

static void bn_norm_fwd_relu_f32(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_norm_fwd(b->dx, b->f.x, b->f.mean, b->f.invstd, b->f.gamma, b->f.beta, NULL, true,
                     b->f.m, b->f.c);
}

static void bn_bwd_data_relu_bf16(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_bwd_data_bf16(kernels_cpu(), b->dx, RP_F32, b->f.dy, b->yh, b->xh, b->f.mean,
                          b->f.invstd, b->f.sums, b->f.gamma, (double)b->f.m, b->f.m, b->f.c);
}

static void bn_bwd_data_relu_f32(void *p)
{
    bn_bf16_ctx *b = p;
    kcpu_bn_bwd_data(b->dx, b->f.dy, b->f.y, b->f.x, b->f.mean, b->f.invstd, b->f.sums, b->f.gamma,
                     (double)b->f.m, b->f.m, b->f.c);
}

static rp_bf16 *bf16_copy(const float *x, int64_t n)
{
    rp_bf16 *h = rp_alloc((size_t)n * sizeof *h);
    if (!h) {
        fprintf(stderr, "out of memory (%lld bf16 values)\n", (long long)n);
        exit(1);
    }
    rp_bf16_from_f32_array(h, x, (size_t)n);
    return h;
}

static void bench_bn_bf16(const char *shape, const bn_ctx *f)
{
    int64_t n = f->m * f->c;
    bn_bf16_ctx b = {
        .f = *f, .xh = bf16_copy(f->x, n), .yh = bf16_copy(f->y, n), .dx = buffer(n, 19)};
    char name[96];
    snprintf(name, sizeof name, "%s stats bf16", shape);
    report_time(name, time_pair(bn_stats_bf16, &b, bn_stats_ours, &b.f), 1e-6, NULL);
    snprintf(name, sizeof name, "%s stats_bwd+relu bf16", shape);
    report_time(name, time_pair(bn_stats_bwd_relu_bf16, &b, bn_stats_bwd_relu_f32, &b), 1e-6, NULL);
    snprintf(name, sizeof name, "%s norm_fwd+relu bf16", shape);
    report_time(name, time_pair(bn_norm_fwd_relu_bf16, &b, bn_norm_fwd_relu_f32, &b), 1e-6, NULL);
    snprintf(name, sizeof name, "%s bwd_data+relu bf16", shape);
    report_time(name, time_pair(bn_bwd_data_relu_bf16, &b, bn_bwd_data_relu_f32, &b), 1e-6, NULL);
    rp_free((void *)b.xh), rp_free(b.yh), rp_free(b.dx);
}

static void bench_bn(void)
{
    static const struct {
        const char *name;
        int64_t m;
        int c;
    } shapes[] = {
        {"R20 N=128 32x32x16", 128 * 32 * 32, 16},
        {"R20 N=128 16x16x32", 128 * 16 * 16, 32},
        {"R20 N=128 8x8x64", 128 * 8 * 8, 64},
        {"MLP N=128 x 256", 128, 256},
    };
    printf("\n(e) batch norm, us per call: ours (kcpu_bn_*) vs the reference (kref_bn_*); the "
           "bf16 rows:\n    ours over bf16 storage (kcpu_bn_*_bf16) vs ours over f32, with the "
           "ReLU mask where named\n");
    printf("  %-44s %9s %9s %9s\n", "shape [m rows, c channels]", "ours", "ref", "overhead");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s].m * shapes[s].c;
        int c = shapes[s].c;
        float *x = buffer(n, 12), *dy = buffer(n, 13), *y = buffer(n, 16), *mean = buffer(c, 14),
              *invstd = buffer(c, 15), *gamma = buffer(c, 17), *beta = buffer(c, 18);
        double *sums = rp_alloc(2 * (size_t)c * sizeof *sums);
        if (!sums) {
            fprintf(stderr, "out of memory (%d sums)\n", 2 * c);
            exit(1);
        }
        bn_ctx b = {.x = x,
                    .dy = dy,
                    .mean = mean,
                    .invstd = invstd,
                    .gamma = gamma,
                    .beta = beta,
                    .y = y,
                    .sums = sums,
                    .m = shapes[s].m,
                    .c = c};
        char name[96];
        snprintf(name, sizeof name, "%s stats", shapes[s].name);
        report_time(name, time_pair(bn_stats_ours, &b, bn_stats_ref, &b), 1e-6, NULL);
        snprintf(name, sizeof name, "%s stats_bwd", shapes[s].name);
        report_time(name, time_pair(bn_stats_bwd_ours, &b, bn_stats_bwd_ref, &b), 1e-6, NULL);
        snprintf(name, sizeof name, "%s norm_fwd", shapes[s].name);
        report_time(name, time_pair(bn_norm_fwd_ours, &b, bn_norm_fwd_ref, &b), 1e-6, NULL);
        snprintf(name, sizeof name, "%s bwd_data", shapes[s].name);
        report_time(name, time_pair(bn_bwd_data_ours, &b, bn_bwd_data_ref, &b), 1e-6, NULL);
        bench_bn_bf16(shapes[s].name, &b);
        rp_free(x), rp_free(dy), rp_free(y), rp_free(mean), rp_free(invstd), rp_free(gamma),
            rp_free(beta), rp_free(sums);
    }
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: bench_kernels [--threads N] [--rounds R] [--quick] [--only a|b|c|d|e|f] [--help]\n"
        "\n"
        "Measures replicator's fast kernels against the engines underneath, in one run:\n"
        "  (a) GEMM via kcpu_gemm vs dnnl_sgemm directly, and dnnl_sgemm vs cblas_sgemm\n"
        "  (b) 3x3 convolution fwd / bwd-data / bwd-weights via kcpu_conv2d_* vs oneDNN\n"
        "      directly (same NHWC/OHWI formats and weight reorders)\n"
        "  (c) max / average pooling forward, ours vs oneDNN\n"
        "  (d) oneDNN with weights forced to OHWI vs its preferred layout + reorders\n"
        "  (e) batch norm's per-channel sums, forward and backward, vs the reference\n"
        "  (f) 3x3 convolution: Winograd (RP_CONV_AUTO) vs direct, through kcpu_conv2d_*\n"
        "Ours and direct are timed in interleaved rounds; medians are reported, and\n"
        "overhead = (median of per-round time ratios ours/direct - 1) * 100.\n"
        "\n"
        "  --threads N   omp_set_num_threads(N) and openblas_set_num_threads(N)\n"
        "                (default: the libraries' defaults, all cores)\n"
        "  --rounds R    interleaved rounds per measurement (default 11, max %d)\n"
        "  --quick       3 rounds and short samples, for a smoke test\n"
        "  --only X      run one section\n",
        MAX_ROUNDS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, NULL, 't'}, {"rounds", required_argument, NULL, 'r'},
        {"quick", no_argument, NULL, 'q'},         {"only", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int threads = 0, opt;
    const char *only = NULL;
    while ((opt = getopt_long(argc, argv, "t:r:qo:h", opts, NULL)) != -1) {
        switch (opt) {
        case 't':
            threads = atoi(optarg);
            break;
        case 'r':
            g_rounds = atoi(optarg);
            break;
        case 'q':
            g_rounds = 3, g_min_sample_s = 0.002;
            break;
        case 'o':
            only = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (g_rounds < 1 || g_rounds > MAX_ROUNDS || threads < 0 ||
        (only && (strlen(only) != 1 || !strchr("abcdef", only[0])))) {
        usage(stderr);
        return 2;
    }
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    DN(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
    const dnnl_version_t *v = dnnl_version();
    printf("bench_kernels: %d OpenMP threads, %d OpenBLAS threads, oneDNN %d.%d.%d (%s), "
           "%d rounds\n",
           omp_get_max_threads(), openblas_get_num_threads(), v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime", g_rounds);

    double t0 = rp_now_s();
    if (!only || only[0] == 'a') bench_gemm();
    if (!only || only[0] == 'b') bench_conv();
    if (!only || only[0] == 'c') bench_pool();
    if (!only || only[0] == 'd') bench_weight_layout();
    if (!only || only[0] == 'e') bench_bn();
    if (!only || only[0] == 'f') bench_conv_algorithm();
    printf("\ntotal %.1f s\n", rp_now_s() - t0);
    dnnl_engine_destroy(g_engine);
    return 0;
}
