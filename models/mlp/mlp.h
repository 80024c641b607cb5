/*
 * mlp.h - a multi-layer perceptron classifier: the main job until ResNet
 * lands, and the smallest complete example of a model written against the
 * public API only.
 */
#ifndef RP_MODELS_MLP_H
#define RP_MODELS_MLP_H

#include "replicator/replicator.h"

#define RP_MLP_MAX_LAYERS 8

typedef struct rp_mlp {
    rp_params *params;
    rp_linear_layer layers[RP_MLP_MAX_LAYERS];
    int n_layers;
} rp_mlp;

/*
 * Builds in -> hidden[0] -> ... -> classes with ReLU between layers (He
 * initialisation), parameters named "fc<i>.weight"/"fc<i>.bias", initialised
 * from `seed`. Errors: RP_ERR_INVALID for a size < 1 or too many layers.
 */
rp_status rp_mlp_create(rp_mlp **mlp, int in, const int *hidden, int n_hidden, int classes,
                        uint64_t seed);
void rp_mlp_destroy(rp_mlp *mlp);

/* x [N,in] (or [N,H,W,C], flattened) -> logits [N,classes]. */
rp_tensor *rp_mlp_forward(rp_tape *t, const rp_mlp *mlp, rp_tensor *x);

#endif
