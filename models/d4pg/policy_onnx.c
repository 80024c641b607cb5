/* policy_onnx.c - the D4PG policy (networks.c) as ONNX nodes. */
#include <stdio.h>
#include <stdlib.h>

#include "models/d4pg/d4pg_internal.h"
#include "models/d4pg/policy_onnx.h"

/* rp_layer_norm over the last axis of x [N, d], with gamma and beta from the checkpoint. */
static const char *layer_norm(rp_onnx *g, const rp_checkpoint *ck, const char *prefix,
                              const char *x, int d)
{
    float *avg = malloc((size_t)d * d * sizeof *avg);
    if (!avg) {
        RP_ERROR(RP_ERR_NOMEM, "no memory for the policy's layer norm");
        return NULL;
    }
    for (int64_t i = 0; i < (int64_t)d * d; i++)
        avg[i] = 1.0f / (float)d;
    const char *j = rp_onnx_const_f32(g, "policy.ln.average", 2, (int64_t[]){d, d}, avg);
    free(avg);
    const char *mean = rp_onnx_binary(g, "MatMul", "policy.ln.mean", x, j);
    const char *dev = rp_onnx_binary(g, "Sub", "policy.ln.centred", x, mean);
    const char *sq = rp_onnx_binary(g, "Mul", "policy.ln.squares", dev, dev);
    const char *var = rp_onnx_binary(g, "MatMul", "policy.ln.var", sq, j);
    const float eps = D4PG_LN_EPS;
    var = rp_onnx_binary(g, "Add", "policy.ln.var_eps", var,
                         rp_onnx_const_f32(g, "policy.ln.eps", 1, (int64_t[]){1}, &eps));
    const char *y = rp_onnx_binary(g, "Div", "policy.ln.normalized", dev,
                                   rp_onnx_unary(g, "Sqrt", "policy.ln.std", var));
    char src[128];
    const char *leaves[2] = {"weight", "bias"}, *ops[2] = {"Mul", "Add"};
    const char *outs[2] = {"policy.ln.scaled", "policy.ln"};
    for (int i = 0; i < 2; i++) {
        char dst[64];
        snprintf(src, sizeof src, "%spolicy.ln.%s", prefix, leaves[i]);
        snprintf(dst, sizeof dst, "policy.ln.%s", leaves[i]);
        float *v = rp_onnx_read(g, ck, src, 1, (int64_t[]){d});
        const char *t = v ? rp_onnx_weight(g, dst, 1, (int64_t[]){d}, v) : NULL;
        free(v);
        y = rp_onnx_binary(g, ops[i], outs[i], y, t);
    }
    return y;
}

rp_status rp_d4pg_policy_onnx(rp_onnx **out, const rp_d4pg_config *cfg, const rp_checkpoint *ck,
                              const char *prefix)
{
    if (!out || !cfg || !ck || !prefix)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_onnx: NULL argument");
    *out = NULL;
    RP_CHECK(rp_d4pg_config_check(cfg));
    rp_onnx *g = NULL;
    RP_CHECK(rp_onnx_create(&g, "d4pg_policy"));
    const char *x = rp_onnx_input(g, "observation", 2, (int64_t[]){-1, cfg->obs_dim}, NULL);
    int in = cfg->obs_dim;
    for (int i = 0; i < RP_D4PG_MAX_LAYERS && cfg->policy_layers[i] > 0; i++) {
        char layer[32];
        snprintf(layer, sizeof layer, "policy.l%d", i);
        x = rp_onnx_linear(g, ck, prefix, layer, x, in, cfg->policy_layers[i], true);
        if (i == 0)
            x = rp_onnx_unary(g, "Tanh", NULL, layer_norm(g, ck, prefix, x, cfg->policy_layers[0]));
        else
            x = rp_onnx_node(g, "Elu", NULL, 1, &x, 1, (rp_onnx_attr[]){RP_ONNX_FLOAT("alpha", 1)});
        in = cfg->policy_layers[i];
    }
    x = rp_onnx_linear(g, ck, prefix, "policy.head", x, in, cfg->act_dim, true);
    x = rp_onnx_unary(g, "Tanh", "policy.tanh", x);
    /* networks.c's rescaling, with its float arithmetic: offset + scale * tanh. */
    float scale[RP_D4PG_MAX_ACT], offset[RP_D4PG_MAX_ACT];
    bool rescale = false;
    for (int i = 0; i < cfg->act_dim; i++) {
        scale[i] = 0.5f * (cfg->act_max[i] - cfg->act_min[i]);
        offset[i] = 0.5f * (cfg->act_max[i] + cfg->act_min[i]);
        if (scale[i] != 1.0f || offset[i] != 0.0f) rescale = true;
    }
    if (rescale) {
        const int64_t dims[1] = {cfg->act_dim};
        x = rp_onnx_binary(g, "Mul", "policy.scaled", x,
                           rp_onnx_const_f32(g, "policy.action_scale", 1, dims, scale));
        x = rp_onnx_binary(g, "Add", "policy.shifted", x,
                           rp_onnx_const_f32(g, "policy.action_offset", 1, dims, offset));
    }
    x = rp_onnx_unary(g, "Identity", "action", x);
    rp_onnx_output(g, x ? x : "action", 2, (int64_t[]){-1, cfg->act_dim},
                   "the action, without exploration noise");
    rp_status status = rp_onnx_status(g);
    if (status == RP_OK && !x) status = RP_ERROR(RP_ERR_NOMEM, "no memory to export the policy");
    if (status != RP_OK) {
        rp_onnx_destroy(g);
        return status;
    }
    *out = g;
    return RP_OK;
}
