/*
 * classifier_onnx.h - a trained classifier (an MLP or a ResNet) as an ONNX model: image in,
 * logits out (docs/export.md).
 */
#ifndef RP_MODELS_CLASSIFIER_ONNX_H
#define RP_MODELS_CLASSIFIER_ONNX_H

#include "models/classifier/classifier.h"

/*
 * Builds *g, the ONNX graph of cfg->model for h x w x c images and `classes`, its weights read
 * from checkpoint ck ("param/..."), in evaluation mode:
 *   input  "image"  [N, c, h, w] float, NCHW, each pixel / 255 (in [0, 1]), as the loader
 *                   scales it before normalising;
 *   nodes  Sub mean and Div std per channel (mean and std: the training split's, as
 *          rp_dataset_channel_stats gives them and the run normalised with), then the network
 *          (rp_resnet_onnx; the MLP as Flatten and Gemm + Relu layers, fc0's columns put in the
 *          C,H,W order of the NCHW input);
 *   output "logits" [N, classes].
 * The metadata records the normalisation ("replicator.normalize": {"mean": [...], "std":
 * [...]}). The caller saves and destroys *g. Errors: RP_ERR_INVALID (NULL, a model this file
 * does not build), the graph's (RP_ERR_SHAPE naming a checkpoint tensor of another shape);
 * *g is then NULL.
 */
rp_status rp_classifier_onnx(rp_onnx **g, const rp_classifier_config *cfg, const rp_checkpoint *ck,
                             int h, int w, int c, int classes, const float *mean, const float *std);

#endif
