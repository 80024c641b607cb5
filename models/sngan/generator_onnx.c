/* generator_onnx.c - the SN-GAN generator (generator.c) as ONNX nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/generator_onnx.h"

#define SNGAN_BN_EPS 2e-5f /* generator.c's: Chainer's batch normalisation default */

typedef struct gen_export {
    rp_onnx *g;
    const rp_checkpoint *ck;
    const char *prefix;
    const char *cls; /* the one-hot class input */
    int classes;
} gen_export;

/* [-1, c, 1, 1]: the shape a per-sample, per-channel row is reshaped to. */
static const char *row_shape(gen_export *e, int c)
{
    const int64_t v[4] = {-1, c, 1, 1};
    return rp_onnx_const_i64(e->g, "shape.rows", 1, (int64_t[]){4}, v);
}

/* Nearest-neighbour Resize by integer factors fy, fx (asymmetric coordinates, floor: each input
 * pixel repeated, exactly rp_upsample2x for 2). */
static const char *resize(gen_export *e, const char *name, const char *x, int fy, int fx)
{
    char sname[96];
    snprintf(sname, sizeof sname, "%s.scales", name);
    const float scales[4] = {1, 1, (float)fy, (float)fx};
    const char *s = rp_onnx_const_f32(e->g, sname, 1, (int64_t[]){4}, scales);
    const rp_onnx_attr attrs[] = {RP_ONNX_STRING("mode", "nearest"),
                                  RP_ONNX_STRING("coordinate_transformation_mode", "asymmetric"),
                                  RP_ONNX_STRING("nearest_mode", "floor")};
    return rp_onnx_node(e->g, "Resize", name, 3, (const char *[]){x, "", s}, 3, attrs);
}

/*
 * rp_cond_batchnorm_layer in evaluation mode on x [N, c, hh, ww]: xhat from the running
 * statistics, then xhat * gamma[class] + beta[class], each class row chosen by
 * MatMul(one-hot, table) and spread over the image by Resize.
 */
static const char *cond_bn(gen_export *e, const char *layer, const char *x, int c, int hh, int ww,
                           const char *shape)
{
    rp_onnx *g = e->g;
    char src[128], dst[128];
    float *ones = malloc((size_t)c * sizeof *ones), *zeros = calloc((size_t)c, sizeof *zeros);
    for (int i = 0; ones && i < c; i++)
        ones[i] = 1.0f;
    const char *in[5] = {x};
    snprintf(dst, sizeof dst, "%s.ones", layer);
    in[1] = ones ? rp_onnx_const_f32(g, dst, 1, (int64_t[]){c}, ones) : NULL;
    snprintf(dst, sizeof dst, "%s.zeros", layer);
    in[2] = zeros ? rp_onnx_const_f32(g, dst, 1, (int64_t[]){c}, zeros) : NULL;
    free(ones);
    free(zeros);
    const char *leaves[2] = {"running_mean", "running_var"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s%s.%s", e->prefix, layer, leaves[i]);
        snprintf(dst, sizeof dst, "%s.%s", layer, leaves[i]);
        float *v = rp_onnx_read(g, e->ck, src, 1, (int64_t[]){c});
        in[3 + i] = v ? rp_onnx_weight(g, dst, 1, (int64_t[]){c}, v) : NULL;
        free(v);
    }
    snprintf(dst, sizeof dst, "%s.normalize", layer);
    const char *xhat = rp_onnx_node(g, "BatchNormalization", dst, 5, in, 1,
                                    (rp_onnx_attr[]){RP_ONNX_FLOAT("epsilon", SNGAN_BN_EPS)});
    const char *maps[2];
    const char *tables[2] = {"weight", "bias"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s%s.%s", e->prefix, layer, tables[i]);
        snprintf(dst, sizeof dst, "%s.%s", layer, tables[i]);
        float *v = rp_onnx_read(g, e->ck, src, 2, (int64_t[]){e->classes, c});
        const char *t = v ? rp_onnx_weight(g, dst, 2, (int64_t[]){e->classes, c}, v) : NULL;
        free(v);
        snprintf(dst, sizeof dst, "%s.%s_of_class", layer, i ? "beta" : "gamma");
        const char *row = rp_onnx_binary(g, "MatMul", dst, e->cls, t);
        snprintf(dst, sizeof dst, "%s.%s_rows", layer, i ? "beta" : "gamma");
        row = rp_onnx_binary(g, "Reshape", dst, row, shape);
        snprintf(dst, sizeof dst, "%s.%s_map", layer, i ? "beta" : "gamma");
        maps[i] = resize(e, dst, row, hh, ww);
    }
    snprintf(dst, sizeof dst, "%s.scale", layer);
    const char *y = rp_onnx_binary(g, "Mul", dst, xhat, maps[0]);
    snprintf(dst, sizeof dst, "%s", layer);
    return rp_onnx_binary(g, "Add", dst, y, maps[1]);
}

/* generator.c's gblock_forward on x [N, ch, hh, ww] -> [N, ch, 2hh, 2ww]. */
static const char *gblock(gen_export *e, int index, const char *x, int ch, int hh, int ww,
                          const char *shape)
{
    rp_onnx *g = e->g;
    char layer[64], name[80];
    snprintf(layer, sizeof layer, "block%d.b1", index);
    const char *h = rp_onnx_unary(g, "Relu", NULL, cond_bn(e, layer, x, ch, hh, ww, shape));
    snprintf(name, sizeof name, "block%d.up", index);
    h = resize(e, name, h, 2, 2);
    snprintf(layer, sizeof layer, "block%d.c1", index);
    h = rp_onnx_conv2d(g, e->ck, e->prefix, layer, h, ch, ch, 3, 1, 1, true);
    snprintf(layer, sizeof layer, "block%d.b2", index);
    h = rp_onnx_unary(g, "Relu", NULL, cond_bn(e, layer, h, ch, 2 * hh, 2 * ww, shape));
    snprintf(layer, sizeof layer, "block%d.c2", index);
    h = rp_onnx_conv2d(g, e->ck, e->prefix, layer, h, ch, ch, 3, 1, 1, true);
    /* The shortcut as generator.c computes it: the 1x1 convolution, then the upsampling. */
    snprintf(layer, sizeof layer, "block%d.c_sc", index);
    const char *s = rp_onnx_conv2d(g, e->ck, e->prefix, layer, x, ch, ch, 1, 1, 0, true);
    snprintf(name, sizeof name, "block%d.sc_up", index);
    s = resize(e, name, s, 2, 2);
    snprintf(name, sizeof name, "block%d.add", index);
    return rp_onnx_binary(g, "Add", name, h, s);
}

rp_status rp_sngan_generator_onnx(rp_onnx **out, const rp_sngan_config *cfg,
                                  const rp_checkpoint *ck, const char *prefix)
{
    if (!out || !cfg || !ck || !prefix)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_generator_onnx: NULL argument");
    *out = NULL;
    RP_CHECK(rp_sngan_config_check(cfg));
    int ch = cfg->ch_g, bh = cfg->h / 8, bw = cfg->w / 8, zd = cfg->z_dim;
    const int64_t n = -1; /* the symbolic batch */
    rp_onnx *g = NULL;
    RP_CHECK(rp_onnx_create(&g, "sngan_generator"));
    gen_export e = {g, ck, prefix, NULL, cfg->classes};
    const char *z = rp_onnx_input(g, "z", 2, (int64_t[]){n, zd}, "latent vector, N(0, I)");
    e.cls = rp_onnx_input(g, "class", 2, (int64_t[]){n, cfg->classes},
                          "the class, one-hot (1 at the class's index, 0 elsewhere)");
    const char *shape = row_shape(&e, ch);

    /* l1: rows are (y, x, c) for our NHWC reshape; ONNX's Reshape to NCHW wants (c, y, x). */
    int64_t rows = (int64_t)bh * bw * ch;
    char src[128];
    snprintf(src, sizeof src, "%sl1.weight", prefix);
    float *w = rp_onnx_read(g, ck, src, 2, (int64_t[]){rows, zd});
    snprintf(src, sizeof src, "%sl1.bias", prefix);
    float *b = rp_onnx_read(g, ck, src, 1, (int64_t[]){rows});
    float *wp = malloc((size_t)rows * zd * sizeof *wp), *bp = malloc((size_t)rows * sizeof *bp);
    const char *x = NULL;
    if (w && b && wp && bp) {
        for (int y = 0; y < bh; y++)
            for (int xx = 0; xx < bw; xx++)
                for (int c = 0; c < ch; c++) {
                    int64_t from = ((int64_t)y * bw + xx) * ch + c,
                            to = ((int64_t)c * bh + y) * bw + xx;
                    memcpy(wp + to * zd, w + from * zd, (size_t)zd * sizeof *wp);
                    bp[to] = b[from];
                }
        const char *wt = rp_onnx_weight(g, "l1.weight", 2, (int64_t[]){rows, zd}, wp);
        const char *bt = rp_onnx_weight(g, "l1.bias", 1, (int64_t[]){rows}, bp);
        x = rp_onnx_node(g, "Gemm", "l1", 3, (const char *[]){z, wt, bt}, 1,
                         (rp_onnx_attr[]){RP_ONNX_INT("transB", 1)});
        const int64_t bottom[4] = {n, ch, bh, bw};
        x = rp_onnx_binary(g, "Reshape", "l1.reshape", x,
                           rp_onnx_const_i64(g, "shape.bottom", 1, (int64_t[]){4}, bottom));
    } else if (w && b) {
        RP_ERROR(RP_ERR_NOMEM, "no memory to permute the generator's l1");
    }
    free(w);
    free(b);
    free(wp);
    free(bp);
    int hh = bh, ww = bw;
    for (int i = 0; i < 3; i++, hh *= 2, ww *= 2)
        x = gblock(&e, i + 2, x, ch, hh, ww, shape);
    x = rp_onnx_batchnorm(g, ck, prefix, "b5", x, ch, SNGAN_BN_EPS);
    x = rp_onnx_unary(g, "Relu", NULL, x);
    x = rp_onnx_conv2d(g, ck, prefix, "c5", x, ch, cfg->c, 3, 1, 1, true);
    x = rp_onnx_unary(g, "Tanh", "image", x);
    rp_onnx_output(g, x ? x : "image", 4, (int64_t[]){n, cfg->c, cfg->h, cfg->w},
                   "the image, NCHW, in [-1, 1]");
    rp_status status = rp_onnx_status(g);
    if (status == RP_OK && !x) status = RP_ERROR(RP_ERR_NOMEM, "no memory to export the generator");
    if (status != RP_OK) {
        rp_onnx_destroy(g);
        return status;
    }
    *out = g;
    return RP_OK;
}
