/*
 * layers.c - linear, conv2d and batch-norm layers: each declares its named
 * parameters with sensible initialisers and forwards through the ops.
 */
#include <math.h>
#include <stdio.h>

#include "replicator/nn.h"

/* "<prefix>.<leaf>" into buf; an error if it does not fit. */
static rp_status join_name(char *buf, const char *prefix, const char *leaf)
{
    int n = snprintf(buf, RP_NAME_MAX, "%s.%s", prefix, leaf);
    if (n < 0 || n >= RP_NAME_MAX)
        return RP_ERROR(RP_ERR_INVALID, "layer name \"%s.%s\" is longer than %d characters", prefix,
                        leaf, RP_NAME_MAX - 1);
    return RP_OK;
}

/* The weight initialiser a caller chose: a known kind and a finite gain. */
static rp_status check_init(const char *who, rp_init_kind kind, float gain)
{
    if ((int)kind < RP_INIT_ZEROS || (int)kind > RP_INIT_GLOROT_UNIFORM)
        return RP_ERROR(RP_ERR_INVALID, "%s: init kind %d is not an rp_init_kind", who, (int)kind);
    if (!isfinite(gain))
        return RP_ERROR(RP_ERR_INVALID, "%s: gain %g is not finite", who, (double)gain);
    return RP_OK;
}

rp_status rp_linear_layer_init(rp_linear_layer *l, rp_params *params, const char *name, int in,
                               int out, bool bias, bool he)
{
    return rp_linear_layer_init_with(l, params, name, in, out, bias,
                                     he ? RP_INIT_HE_NORMAL : RP_INIT_GLOROT_UNIFORM, 0.0f);
}

rp_status rp_linear_layer_init_with(rp_linear_layer *l, rp_params *params, const char *name, int in,
                                    int out, bool bias, rp_init_kind kind, float gain)
{
    if (!l || !params || !name || in < 1 || out < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_linear_layer_init: bad arguments (in %d, out %d)", in,
                        out);
    RP_CHECK(check_init("rp_linear_layer_init", kind, gain));
    char full[RP_NAME_MAX];
    l->in = in;
    l->out = out;
    RP_CHECK(join_name(full, name, "weight"));
    rp_init wi = {kind, gain, in, out};
    l->w = rp_params_add(params, full, 2, (int[]){out, in}, wi, true);
    if (!l->w) return rp_last_status();
    l->b = NULL;
    if (bias) {
        RP_CHECK(join_name(full, name, "bias"));
        l->b =
            rp_params_add(params, full, 1, (int[]){out}, (rp_init){RP_INIT_ZEROS, 0, 0, 0}, true);
        if (!l->b) return rp_last_status();
    }
    return RP_OK;
}

rp_tensor *rp_linear_layer_forward(rp_tape *t, const rp_linear_layer *l, rp_tensor *x)
{
    return rp_linear(t, x, l->w, l->b);
}

rp_status rp_conv2d_layer_init(rp_conv2d_layer *l, rp_params *params, const char *name, int in,
                               int out, int k, int stride, int pad, bool bias)
{
    return rp_conv2d_layer_init_with(l, params, name, in, out, k, stride, pad, bias,
                                     RP_INIT_HE_NORMAL, 0.0f);
}

rp_status rp_conv2d_layer_init_with(rp_conv2d_layer *l, rp_params *params, const char *name, int in,
                                    int out, int k, int stride, int pad, bool bias,
                                    rp_init_kind kind, float gain)
{
    if (!l || !params || !name || in < 1 || out < 1 || k < 1 || stride < 1 || pad < 0)
        return RP_ERROR(
            RP_ERR_INVALID,
            "rp_conv2d_layer_init: bad arguments (in %d, out %d, k %d, stride %d, pad %d)", in, out,
            k, stride, pad);
    RP_CHECK(check_init("rp_conv2d_layer_init", kind, gain));
    char full[RP_NAME_MAX];
    l->in = in;
    l->out = out;
    l->k = k;
    l->p = (rp_conv_params){stride, pad};
    RP_CHECK(join_name(full, name, "weight"));
    rp_init wi = {kind, gain, k * k * in, k * k * out};
    l->w = rp_params_add(params, full, 4, (int[]){out, k, k, in}, wi, true);
    if (!l->w) return rp_last_status();
    l->b = NULL;
    if (bias) {
        RP_CHECK(join_name(full, name, "bias"));
        l->b =
            rp_params_add(params, full, 1, (int[]){out}, (rp_init){RP_INIT_ZEROS, 0, 0, 0}, true);
        if (!l->b) return rp_last_status();
    }
    return RP_OK;
}

rp_tensor *rp_conv2d_layer_forward(rp_tape *t, const rp_conv2d_layer *l, rp_tensor *x)
{
    return rp_conv2d(t, x, l->w, l->b, l->p);
}

rp_status rp_batchnorm_layer_init(rp_batchnorm_layer *l, rp_params *params, const char *name, int c)
{
    if (!l || !params || !name || c < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_batchnorm_layer_init: bad arguments (c %d)", c);
    char full[RP_NAME_MAX];
    l->c = c;
    l->p = rp_bn_params_default();
    const char *leaves[4] = {"weight", "bias", "running_mean", "running_var"};
    rp_init inits[4] = {{RP_INIT_CONSTANT, 1, 0, 0},
                        {RP_INIT_ZEROS, 0, 0, 0},
                        {RP_INIT_ZEROS, 0, 0, 0},
                        {RP_INIT_CONSTANT, 1, 0, 0}};
    rp_tensor **slots[4] = {&l->gamma, &l->beta, &l->running_mean, &l->running_var};
    for (int i = 0; i < 4; i++) {
        RP_CHECK(join_name(full, name, leaves[i]));
        *slots[i] = rp_params_add(params, full, 1, (int[]){c}, inits[i], i < 2);
        if (!*slots[i]) return rp_last_status();
    }
    return RP_OK;
}

rp_tensor *rp_batchnorm_layer_forward(rp_tape *t, const rp_batchnorm_layer *l, rp_tensor *x,
                                      bool training)
{
    rp_bn_params p = l->p;
    p.training = training;
    return rp_batch_norm(t, x, l->gamma, l->beta, l->running_mean, l->running_var, p);
}

rp_tensor *rp_batchnorm_layer_forward_add(rp_tape *t, const rp_batchnorm_layer *l, rp_tensor *x,
                                          rp_tensor *residual, bool relu, bool training)
{
    rp_bn_params p = l->p;
    p.training = training;
    p.relu = relu;
    return rp_batch_norm_add(t, x, l->gamma, l->beta, l->running_mean, l->running_var, residual, p);
}
