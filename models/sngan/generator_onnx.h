/*
 * generator_onnx.h - a trained SN-GAN generator (sngan.h) as an ONNX model: noise and class in,
 * image out (docs/export.md).
 */
#ifndef RP_MODELS_SNGAN_GENERATOR_ONNX_H
#define RP_MODELS_SNGAN_GENERATOR_ONNX_H

#include "models/sngan/sngan.h"

/*
 * Builds *g, the ONNX graph of the generator of cfg (ch_g, z_dim, classes, h, w, c) with its
 * weights read from checkpoint ck under `prefix` ("gen/"), in evaluation mode (batch norms on
 * their running statistics, as rp_sngan_generate runs it):
 *   inputs "z"     [N, z_dim] float, the latent vector (N(0, I) in training);
 *          "class" [N, classes] float, the class as a one-hot row;
 *   output "image" [N, c, h, w] float in [-1, 1], NCHW.
 * Nodes: Gemm (l1, its rows permuted so that Reshape gives NCHW), three up-blocks of
 * conditional batch norm (BatchNormalization with scale 1 and bias 0, times and plus the
 * class's gamma and beta), Relu, Resize (nearest, x2), Conv, and the shortcut's 1x1 Conv and
 * Resize added; BatchNormalization, Relu, Conv, Tanh. The class's gamma and beta are
 * MatMul(class, table) rather than Gather(table, label): OpenCV 4.6 takes Gather only with a
 * constant index. They are broadcast over the image with Resize (nearest) to its size, for the
 * same reason (its Mul broadcasts one axis only). The batch size N is symbolic. The caller saves
 * and destroys *g. Errors: RP_ERR_INVALID (NULL, a bad configuration), the graph's (RP_ERR_SHAPE
 * naming a checkpoint tensor of another shape); *g is then NULL.
 */
rp_status rp_sngan_generator_onnx(rp_onnx **g, const rp_sngan_config *cfg, const rp_checkpoint *ck,
                                  const char *prefix);

#endif
