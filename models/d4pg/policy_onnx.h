/*
 * policy_onnx.h - a trained D4PG policy (d4pg.h) as an ONNX model: observation in, action out
 * (docs/export.md).
 */
#ifndef RP_MODELS_D4PG_POLICY_ONNX_H
#define RP_MODELS_D4PG_POLICY_ONNX_H

#include "models/d4pg/d4pg.h"

/*
 * Builds *g, the ONNX graph of the policy of cfg (obs_dim, act_dim, policy_layers, action
 * bounds) with its weights read from checkpoint ck under `prefix` ("d4pg/target_policy/", the
 * policy the actors ran, or "d4pg/policy/", the learner's latest), without exploration noise:
 *   input  "observation" [N, obs_dim] float;
 *   output "action"      [N, act_dim] float, within the action bounds.
 * Nodes: Gemm, layer norm, Tanh (the LayerNormMLP's first layer), Gemm + Elu for the others,
 * the head's Gemm and Tanh, and Mul and Add rescaling to bounds other than [-1, 1]. The layer
 * norm is written out (LayerNormalization is opset 17, unknown to OpenCV 4.6): the row means
 * as MatMul by a [D, D] matrix of 1/D (OpenCV 4.6's ReduceMean takes 4-D input only), then
 * Sub, Mul, MatMul, Add epsilon, Sqrt, Div, Mul gamma, Add beta. The caller saves and destroys
 * *g. Errors: RP_ERR_INVALID (NULL, a bad configuration), the graph's (RP_ERR_SHAPE naming a
 * checkpoint tensor of another shape); *g is then NULL.
 */
rp_status rp_d4pg_policy_onnx(rp_onnx **g, const rp_d4pg_config *cfg, const rp_checkpoint *ck,
                              const char *prefix);

#endif
