/*
 * layers_gan.c - the layers SN-GAN needs beyond the plain ones: convolution,
 * linear and embedding layers with spectrally normalised weights, the
 * categorical conditional batch norm, and the hinge losses.
 *
 * They are compositions of tape ops (rp_spectral_normalize, rp_batch_norm,
 * rp_embedding, broadcasting arithmetic), so their gradients come from the
 * ops' rules and their cross-replica behaviour from rp_batch_norm's.
 */
#include <math.h>
#include <stdio.h>

#include "replicator/nn.h"

/* "<prefix>.<leaf>" into buf; an error if it does not fit. */
static rp_status gan_name(char *buf, const char *prefix, const char *leaf)
{
    int n = snprintf(buf, RP_NAME_MAX, "%s.%s", prefix, leaf);
    if (n < 0 || n >= RP_NAME_MAX)
        return RP_ERROR(RP_ERR_INVALID, "layer name \"%s.%s\" is longer than %d characters", prefix,
                        leaf, RP_NAME_MAX - 1);
    return RP_OK;
}

/* The power-iteration vector "<name>.u" [rows]: a buffer, N(0,1) (only its direction matters). */
static rp_status add_u(rp_tensor **u, rp_params *p, const char *name, int rows)
{
    char full[RP_NAME_MAX];
    RP_CHECK(gan_name(full, name, "u"));
    *u = rp_params_add(p, full, 1, (int[]){rows}, (rp_init){RP_INIT_NORMAL, 1.0f, 0, 0}, false);
    return *u ? RP_OK : rp_last_status();
}

rp_status rp_sn_conv2d_layer_init(rp_sn_conv2d_layer *l, rp_params *p, const char *name, int in,
                                  int out, int k, int stride, int pad, bool bias, float gain)
{
    if (!l) return RP_ERROR(RP_ERR_INVALID, "rp_sn_conv2d_layer_init: layer is NULL");
    RP_CHECK(rp_conv2d_layer_init_with(&l->conv, p, name, in, out, k, stride, pad, bias,
                                       RP_INIT_GLOROT_UNIFORM, gain));
    return add_u(&l->u, p, name, out);
}

rp_tensor *rp_sn_conv2d_layer_forward(rp_tape *t, const rp_sn_conv2d_layer *l, rp_tensor *x,
                                      bool training)
{
    rp_tensor *w = rp_spectral_normalize(t, l->conv.w, l->u, training, NULL);
    return rp_conv2d(t, x, w, l->conv.b, l->conv.p);
}

rp_status rp_sn_linear_layer_init(rp_sn_linear_layer *l, rp_params *p, const char *name, int in,
                                  int out, bool bias, float gain)
{
    if (!l) return RP_ERROR(RP_ERR_INVALID, "rp_sn_linear_layer_init: layer is NULL");
    RP_CHECK(
        rp_linear_layer_init_with(&l->lin, p, name, in, out, bias, RP_INIT_GLOROT_UNIFORM, gain));
    return add_u(&l->u, p, name, out);
}

rp_tensor *rp_sn_linear_layer_forward(rp_tape *t, const rp_sn_linear_layer *l, rp_tensor *x,
                                      bool training)
{
    rp_tensor *w = rp_spectral_normalize(t, l->lin.w, l->u, training, NULL);
    return rp_linear(t, x, w, l->lin.b);
}

rp_status rp_sn_embedding_layer_init(rp_sn_embedding_layer *l, rp_params *p, const char *name,
                                     int classes, int dim, float gain)
{
    if (!l || !p || !name || classes < 1 || dim < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_sn_embedding_layer_init: bad arguments (classes %d, dim %d)", classes,
                        dim);
    if (!isfinite(gain))
        return RP_ERROR(RP_ERR_INVALID, "rp_sn_embedding_layer_init: gain %g is not finite",
                        (double)gain);
    char full[RP_NAME_MAX];
    RP_CHECK(gan_name(full, name, "weight"));
    l->classes = classes;
    l->dim = dim;
    rp_init wi = {RP_INIT_GLOROT_UNIFORM, gain, dim, classes};
    l->table = rp_params_add(p, full, 2, (int[]){classes, dim}, wi, true);
    if (!l->table) return rp_last_status();
    return add_u(&l->u, p, name, classes);
}

rp_tensor *rp_sn_embedding_layer_forward(rp_tape *t, const rp_sn_embedding_layer *l,
                                         const int32_t *labels, int n, bool training)
{
    rp_tensor *table = rp_spectral_normalize(t, l->table, l->u, training, NULL);
    return rp_embedding(t, table, labels, n);
}

rp_status rp_cond_batchnorm_layer_init(rp_cond_batchnorm_layer *l, rp_params *p, const char *name,
                                       int c, int classes)
{
    if (!l || !p || !name || c < 1 || classes < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_cond_batchnorm_layer_init: bad arguments (c %d, classes %d)", c,
                        classes);
    char full[RP_NAME_MAX];
    l->c = c;
    l->classes = classes;
    l->p = rp_bn_params_default();
    const char *leaves[4] = {"weight", "bias", "running_mean", "running_var"};
    rp_init inits[4] = {{RP_INIT_CONSTANT, 1, 0, 0},
                        {RP_INIT_ZEROS, 0, 0, 0},
                        {RP_INIT_ZEROS, 0, 0, 0},
                        {RP_INIT_CONSTANT, 1, 0, 0}};
    rp_tensor **slots[4] = {&l->gamma, &l->beta, &l->running_mean, &l->running_var};
    for (int i = 0; i < 4; i++) {
        RP_CHECK(gan_name(full, name, leaves[i]));
        int shape[2] = {classes, c};
        *slots[i] = i < 2 ? rp_params_add(p, full, 2, shape, inits[i], true)
                          : rp_params_add(p, full, 1, &shape[1], inits[i], false);
        if (!*slots[i]) return rp_last_status();
    }
    return RP_OK;
}

/*
 * xhat from rp_batch_norm with a constant unit scale and zero shift (so the
 * statistics, running updates and cross-replica sums are exactly the plain
 * layer's), then the per-sample scale and shift gathered from the class
 * tables and broadcast over H and W.
 */
rp_tensor *rp_cond_batchnorm_layer_forward(rp_tape *t, const rp_cond_batchnorm_layer *l,
                                           rp_tensor *x, const int32_t *labels, bool training)
{
    if (!x) return NULL;
    if ((x->ndim != 4 && x->ndim != 2) || x->shape[x->ndim - 1] != l->c) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_cond_batchnorm_layer_forward: input has %d dims and %d channels; "
                 "need [N,H,W,%d] or [N,%d]",
                 x->ndim, x->shape[x->ndim ? x->ndim - 1 : 0], l->c, l->c);
        return NULL;
    }
    if (!labels) {
        RP_ERROR(RP_ERR_INVALID, "rp_cond_batchnorm_layer_forward: labels is NULL");
        return NULL;
    }
    int n = x->shape[0], c = l->c;
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= l->classes) {
            RP_ERROR(RP_ERR_INVALID,
                     "rp_cond_batchnorm_layer_forward: label %d is %d, outside [0, %d)", i,
                     (int)labels[i], l->classes);
            return NULL;
        }
    }
    rp_bn_params p = l->p;
    p.training = training;
    p.relu = false; /* a ReLU would have to follow the affine part, not xhat */
    rp_tensor *one = rp_tensor_fill(t, 1, &c, 1.0f), *zero = rp_tensor_fill(t, 1, &c, 0.0f);
    rp_tensor *xhat = rp_batch_norm(t, x, one, zero, l->running_mean, l->running_var, p);
    int ndim = x->ndim, shape[4] = {n, 1, 1, c};
    if (ndim == 2) shape[1] = c;
    rp_tensor *g = rp_reshape(t, rp_embedding(t, l->gamma, labels, n), ndim, shape);
    rp_tensor *b = rp_reshape(t, rp_embedding(t, l->beta, labels, n), ndim, shape);
    return rp_add(t, rp_mul(t, xhat, g), b);
}

rp_tensor *rp_hinge_loss_d(rp_tape *t, rp_tensor *d_real, rp_tensor *d_fake)
{
    if (!d_real || !d_fake) return NULL;
    rp_tensor *one_r = rp_tensor_fill(t, d_real->ndim, d_real->shape, 1.0f);
    rp_tensor *one_f = rp_tensor_fill(t, d_fake->ndim, d_fake->shape, 1.0f);
    rp_tensor *real = rp_mean(t, rp_relu(t, rp_sub(t, one_r, d_real)));
    rp_tensor *fake = rp_mean(t, rp_relu(t, rp_add(t, d_fake, one_f)));
    return rp_add(t, real, fake);
}

rp_tensor *rp_hinge_loss_g(rp_tape *t, rp_tensor *d_fake)
{
    return rp_scale(t, rp_mean(t, d_fake), -1.0f);
}
