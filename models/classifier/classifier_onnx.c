/* classifier_onnx.c - the classifier's ONNX graph: normalisation, then the MLP or the ResNet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_onnx.h"
#include "models/resnet/resnet_onnx.h"

/*
 * rp_mlp_forward as nodes: Flatten, then Gemm layers with Relu between them. Our MLP flattens an
 * NHWC image (H, W, C order); the ONNX input is NCHW, so fc0's columns are permuted to C, H, W.
 */
static const char *mlp_onnx(rp_onnx *g, const rp_classifier_config *cfg, const rp_checkpoint *ck,
                            const char *x, int h, int w, int c, int classes)
{
    int in = h * w * c;
    x = rp_onnx_node(g, "Flatten", "flatten", 1, &x, 1, (rp_onnx_attr[]){RP_ONNX_INT("axis", 1)});
    for (int i = 0; i <= cfg->n_hidden; i++) {
        int out = i < cfg->n_hidden ? cfg->hidden[i] : classes;
        char layer[16];
        snprintf(layer, sizeof layer, "fc%d", i);
        if (i == 0 && c > 1) {
            float *hwc = rp_onnx_read(g, ck, "param/fc0.weight", 2, (int64_t[]){out, in});
            float *chw = hwc ? malloc((size_t)out * in * sizeof *chw) : NULL;
            if (hwc && !chw) {
                free(hwc);
                RP_ERROR(RP_ERR_NOMEM, "no memory to permute fc0.weight");
                return NULL;
            }
            for (int o = 0; chw && o < out; o++)
                for (int y = 0; y < h; y++)
                    for (int xx = 0; xx < w; xx++)
                        for (int k = 0; k < c; k++)
                            chw[(int64_t)o * in + ((int64_t)k * h + y) * w + xx] =
                                hwc[(int64_t)o * in + ((int64_t)y * w + xx) * c + k];
            const char *wt =
                chw ? rp_onnx_weight(g, "fc0.weight", 2, (int64_t[]){out, in}, chw) : NULL;
            free(chw);
            free(hwc);
            float *b = rp_onnx_read(g, ck, "param/fc0.bias", 1, (int64_t[]){out});
            const char *bt = b ? rp_onnx_weight(g, "fc0.bias", 1, (int64_t[]){out}, b) : NULL;
            free(b);
            x = rp_onnx_node(g, "Gemm", layer, 3, (const char *[]){x, wt, bt}, 1,
                             (rp_onnx_attr[]){RP_ONNX_INT("transB", 1)});
        } else {
            x = rp_onnx_linear(g, ck, "param/", layer, x, in, out, true);
        }
        if (i < cfg->n_hidden) x = rp_onnx_unary(g, "Relu", NULL, x);
        in = out;
    }
    return x;
}

rp_status rp_classifier_onnx(rp_onnx **out, const rp_classifier_config *cfg,
                             const rp_checkpoint *ck, int h, int w, int c, int classes,
                             const float *mean, const float *std)
{
    if (!out || !cfg || !ck || !mean || !std || h < 1 || w < 1 || c < 1 ||
        c > RP_LOADER_MAX_CHANNELS || classes < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_classifier_onnx: bad arguments (%d x %d x %d, %d "
                        "classes)",
                        h, w, c, classes);
    *out = NULL;
    bool mlp = !strcmp(cfg->model, "mlp");
    rp_resnet_kind kind = RP_RESNET20;
    if (!mlp && !rp_resnet_kind_parse(cfg->model, &kind))
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_onnx: model \"%s\" is not a classifier",
                        cfg->model);
    rp_onnx *g = NULL;
    RP_CHECK(rp_onnx_create(&g, cfg->model));
    const char *x =
        rp_onnx_input(g, "image", 4, (int64_t[]){-1, c, h, w}, "pixels / 255, in [0, 1], NCHW");
    const int64_t stat_dims[4] = {1, c, 1, 1};
    x = rp_onnx_binary(g, "Sub", "normalize.sub", x,
                       rp_onnx_const_f32(g, "normalize.mean", 4, stat_dims, mean));
    x = rp_onnx_binary(g, "Div", "normalize.div", x,
                       rp_onnx_const_f32(g, "normalize.std", 4, stat_dims, std));
    const char *logits = NULL;
    if (mlp) {
        logits = mlp_onnx(g, cfg, ck, x, h, w, c, classes);
    } else {
        rp_resnet_config rc = rp_resnet_config_default(kind);
        rc.in_channels = c;
        rc.classes = classes;
        rp_status s = rp_resnet_onnx(g, &rc, ck, "param/", x, h, w, &logits);
        if (s != RP_OK && rp_onnx_status(g) == RP_OK) {
            rp_onnx_destroy(g);
            return s;
        }
    }
    if (logits) logits = rp_onnx_unary(g, "Identity", "logits", logits);
    rp_onnx_output(g, logits ? logits : "logits", 2, (int64_t[]){-1, classes},
                   "class scores (before softmax)");
    char meta[64 + 2 * RP_LOADER_MAX_CHANNELS * 32];
    size_t n = (size_t)snprintf(meta, sizeof meta, "{\"mean\":[");
    for (int i = 0; i < c; i++)
        n += (size_t)snprintf(meta + n, sizeof meta - n, "%s%.9g", i ? "," : "", (double)mean[i]);
    n += (size_t)snprintf(meta + n, sizeof meta - n, "],\"std\":[");
    for (int i = 0; i < c; i++)
        n += (size_t)snprintf(meta + n, sizeof meta - n, "%s%.9g", i ? "," : "", (double)std[i]);
    snprintf(meta + n, sizeof meta - n, "]}");
    rp_onnx_set_meta(g, "replicator.normalize", meta);
    rp_status status = rp_onnx_status(g);
    if (status != RP_OK) {
        rp_onnx_destroy(g);
        return status;
    }
    *out = g;
    return RP_OK;
}
