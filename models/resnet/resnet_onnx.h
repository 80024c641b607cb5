/*
 * resnet_onnx.h - a trained ResNet (resnet.h) as ONNX nodes (replicator/onnx.h), in
 * evaluation mode, for `replicator export --format onnx` (docs/export.md).
 */
#ifndef RP_MODELS_RESNET_ONNX_H
#define RP_MODELS_RESNET_ONNX_H

#include "models/resnet/resnet.h"

/*
 * Appends cfg's whole network to graph g: x is an NCHW value [N, in_channels, h, w], *logits
 * gets the [N, classes] output's name. The weights are read from ck under `prefix` ("param/",
 * the classifier's), each checked against the shape cfg gives it, and added under the
 * checkpoint's names without the prefix ("stem.conv0.weight") in ONNX's layouts: convolutions
 * [out, in, k, k]. The nodes mirror rp_resnet_forward with training false: Conv (no bias),
 * BatchNormalization on the running statistics (epsilon 1e-5), Relu, MaxPool 3/2 pad 1 after
 * the ImageNet stem, each block's Add of its shortcut (identity or 1x1 Conv + BN) before its
 * last Relu, GlobalAveragePool, Flatten and Gemm. Only the whole dense network is exported
 * (cfg's first_unit, last_unit and tp_comm are ignored: a checkpoint holds the dense tensors).
 * Errors: the graph's (sticky; RP_ERR_SHAPE naming a checkpoint tensor of another shape),
 * RP_ERR_INVALID for a bad configuration.
 */
rp_status rp_resnet_onnx(rp_onnx *g, const rp_resnet_config *cfg, const rp_checkpoint *ck,
                         const char *prefix, const char *x, int h, int w, const char **logits);

#endif
