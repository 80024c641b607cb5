/*
 * resnet_onnx.c - ResNet-20/18/50 as ONNX nodes: the layout comes from the network's own
 * description (rp_resnet_unit_info_get: each unit's name and output channels), the strides
 * and kernel sizes from the rules resnet.c builds with.
 */
#include <stdio.h>
#include <string.h>

#include "models/resnet/resnet_onnx.h"

#define RESNET_BN_EPS 1e-5f /* rp_bn_params_default's, which every ResNet batch norm keeps */

/* conv + bn (+ relu) named "<prefix>.conv<i>" / "<prefix>.bn<i>", as resnet.c's conv_bn. */
static const char *conv_bn(rp_onnx *g, const rp_checkpoint *ck, const char *ckp, const char *prefix,
                           int i, const char *x, int in, int out, int k, int stride, bool relu)
{
    char name[96];
    snprintf(name, sizeof name, "%s.conv%d", prefix, i);
    x = rp_onnx_conv2d(g, ck, ckp, name, x, in, out, k, stride, k / 2, false);
    snprintf(name, sizeof name, "%s.bn%d", prefix, i);
    x = rp_onnx_batchnorm(g, ck, ckp, name, x, out, RESNET_BN_EPS);
    return relu ? rp_onnx_unary(g, "Relu", NULL, x) : x;
}

rp_status rp_resnet_onnx(rp_onnx *g, const rp_resnet_config *cfg, const rp_checkpoint *ck,
                         const char *prefix, const char *x, int h, int w, const char **logits)
{
    if (!g || !cfg || !ck || !prefix || !x || !logits)
        return RP_ERROR(RP_ERR_INVALID, "rp_resnet_onnx: NULL argument");
    *logits = NULL;
    rp_resnet_unit_info u;
    RP_CHECK(rp_resnet_unit_info_get(cfg, h, w, 0, &u));
    bool imagenet = cfg->kind != RP_RESNET20, bottleneck = cfg->kind == RP_RESNET50;
    int k = imagenet ? 7 : 3, channels = u.out_c;
    x = conv_bn(g, ck, prefix, "stem", 0, x, cfg->in_channels, channels, k, imagenet ? 2 : 1, true);
    if (imagenet) {
        const int64_t ks[2] = {3, 3}, strides[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
        const rp_onnx_attr attrs[] = {RP_ONNX_INTS("kernel_shape", 2, ks),
                                      RP_ONNX_INTS("strides", 2, strides),
                                      RP_ONNX_INTS("pads", 4, pads)};
        x = rp_onnx_node(g, "MaxPool", "stem.pool", 1, &x, 3, attrs);
    }
    int units = rp_resnet_units(cfg->kind);
    for (int unit = 1; unit + 1 < units; unit++) {
        RP_CHECK(rp_resnet_unit_info_get(cfg, h, w, unit, &u));
        int stage = 0, block = 0;
        if (sscanf(u.name, "stage%d.block%d", &stage, &block) != 2)
            return RP_ERROR(RP_ERR_INVALID, "rp_resnet_onnx: unit %d is \"%s\", not a block", unit,
                            u.name);
        /* The first block of every stage but the first halves the size (resnet.c). */
        int in = channels, out = u.out_c, stride = block == 0 && stage > 1 ? 2 : 1;
        int width = bottleneck ? out / 4 : out;
        const char *y;
        if (bottleneck) {
            y = conv_bn(g, ck, prefix, u.name, 1, x, in, width, 1, 1, true);
            y = conv_bn(g, ck, prefix, u.name, 2, y, width, width, 3, stride, true);
            y = conv_bn(g, ck, prefix, u.name, 3, y, width, out, 1, 1, false);
        } else {
            y = conv_bn(g, ck, prefix, u.name, 1, x, in, width, 3, stride, true);
            y = conv_bn(g, ck, prefix, u.name, 2, y, width, out, 3, 1, false);
        }
        const char *shortcut = x;
        if (stride != 1 || in != out) {
            char name[64];
            snprintf(name, sizeof name, "%s.shortcut", u.name);
            shortcut = conv_bn(g, ck, prefix, name, 0, x, in, out, 1, stride, false);
        }
        char name[64];
        snprintf(name, sizeof name, "%s.add", u.name);
        x = rp_onnx_unary(g, "Relu", NULL, rp_onnx_binary(g, "Add", name, y, shortcut));
        channels = out;
    }
    x = rp_onnx_unary(g, "GlobalAveragePool", "pool", x);
    x = rp_onnx_node(g, "Flatten", "features", 1, &x, 1, (rp_onnx_attr[]){RP_ONNX_INT("axis", 1)});
    *logits = rp_onnx_linear(g, ck, prefix, "fc", x, channels, cfg->classes, true);
    return rp_onnx_status(g);
}
