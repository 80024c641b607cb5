/* export_onnx.h - a run's network as an ONNX graph, for `replicator export` (export_onnx.c). */
#ifndef RP_CLI_EXPORT_ONNX_H
#define RP_CLI_EXPORT_ONNX_H

#include "replicator/replicator.h"

/*
 * The ONNX graph of the network in checkpoint ck, whose stored configuration is `config`: a
 * classifier (image in, logits out), an SN-GAN's generator (noise and one-hot class in, image
 * out) or D4PG's policy (observation in, action
 * out; the target policy, or the learner's with `online`). The configuration goes into the
 * metadata as "replicator.config". *what gets a line naming what was exported. Errors: the
 * configuration's, the dataset's (a classifier needs its data for the input size and the
 * normalisation), the exporter's; *g is then NULL.
 */
rp_status export_onnx_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size);

#endif
