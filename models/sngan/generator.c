/*
 * generator.c - the ResNet generator of gen_models/resnet_32.py: a linear
 * layer to a (h/8) x (w/8) bottom, three conditional up-blocks, BN, ReLU,
 * a 3x3 convolution and tanh; and its use alone for sampling, as in the
 * sample grid.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models/sngan/sngan_internal.h"

/* Chainer's batch normalisation defaults, which the authors' models use. */
#define SNGAN_BN_EPS      2e-5f
#define SNGAN_BN_MOMENTUM 0.1f

#define SNGAN_SAMPLE_COLS 10

static rp_status gblock_init(sngan_gblock *b, rp_params *p, int index, int ch, int classes,
                             rp_comm *bn_comm)
{
    char name[RP_NAME_MAX];
    const float gain = sqrtf(2.0f);
    snprintf(name, sizeof name, "block%d.b1", index);
    RP_CHECK(rp_cond_batchnorm_layer_init(&b->b1, p, name, ch, classes));
    snprintf(name, sizeof name, "block%d.c1", index);
    RP_CHECK(rp_conv2d_layer_init_with(&b->c1, p, name, ch, ch, 3, 1, 1, true,
                                       RP_INIT_GLOROT_UNIFORM, gain));
    snprintf(name, sizeof name, "block%d.b2", index);
    RP_CHECK(rp_cond_batchnorm_layer_init(&b->b2, p, name, ch, classes));
    snprintf(name, sizeof name, "block%d.c2", index);
    RP_CHECK(rp_conv2d_layer_init_with(&b->c2, p, name, ch, ch, 3, 1, 1, true,
                                       RP_INIT_GLOROT_UNIFORM, gain));
    snprintf(name, sizeof name, "block%d.c_sc", index);
    RP_CHECK(rp_conv2d_layer_init_with(&b->sc, p, name, ch, ch, 1, 1, 0, true,
                                       RP_INIT_GLOROT_UNIFORM, 1.0f));
    rp_cond_batchnorm_layer *bns[2] = {&b->b1, &b->b2};
    for (int k = 0; k < 2; k++) {
        bns[k]->p.eps = SNGAN_BN_EPS;
        bns[k]->p.momentum = SNGAN_BN_MOMENTUM;
        bns[k]->p.comm = bn_comm;
    }
    return RP_OK;
}

rp_status rp_sngan_generator_create(rp_sngan_generator **out, const rp_sngan_config *cfg,
                                    rp_comm *bn_comm)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_generator_create: NULL argument");
    *out = NULL;
    RP_CHECK(rp_sngan_config_check(cfg));
    rp_status status = RP_OK;
    rp_sngan_generator *g = calloc(1, sizeof *g);
    if (!g) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a generator");
    g->cfg = *cfg;
    g->bh = cfg->h / 8;
    g->bw = cfg->w / 8;
    int ch = cfg->ch_g;
    RP_TRY(rp_params_create(&g->params));
    RP_TRY(rp_linear_layer_init_with(&g->l1, g->params, "l1", cfg->z_dim, g->bh * g->bw * ch, true,
                                     RP_INIT_GLOROT_UNIFORM, 1.0f));
    for (int b = 0; b < 3; b++)
        RP_TRY(gblock_init(&g->blocks[b], g->params, b + 2, ch, cfg->classes, bn_comm));
    RP_TRY(rp_batchnorm_layer_init(&g->b5, g->params, "b5", ch));
    g->b5.p.eps = SNGAN_BN_EPS;
    g->b5.p.momentum = SNGAN_BN_MOMENTUM;
    g->b5.p.comm = bn_comm;
    g->b5.p.relu = true; /* BN -> ReLU, fused */
    RP_TRY(rp_conv2d_layer_init_with(&g->c5, g->params, "c5", ch, cfg->c, 3, 1, 1, true,
                                     RP_INIT_GLOROT_UNIFORM, 1.0f));
    RP_TRY(rp_params_finalize(g->params, sngan_seed(cfg, "gen")));
    *out = g;
    return RP_OK;
cleanup:
    rp_sngan_generator_destroy(g);
    return status;
}

void rp_sngan_generator_destroy(rp_sngan_generator *g)
{
    if (!g) return;
    rp_params_destroy(g->params);
    free(g);
}

rp_params *rp_sngan_generator_params(rp_sngan_generator *g)
{
    return g ? g->params : NULL;
}

rp_status rp_sngan_generator_load(rp_sngan_generator *g, const rp_checkpoint *ck)
{
    if (!g || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_generator_load: NULL argument");
    return rp_checkpoint_read_params(ck, g->params, "gen/");
}

static rp_tensor *gblock_forward(rp_tape *t, const sngan_gblock *b, rp_tensor *x,
                                 const int32_t *labels, bool training)
{
    rp_tensor *h =
        sngan_relu_into_conv(t, rp_cond_batchnorm_layer_forward(t, &b->b1, x, labels, training));
    h = rp_conv2d_layer_forward(t, &b->c1, rp_upsample2x(t, h));
    h = sngan_relu_into_conv(t, rp_cond_batchnorm_layer_forward(t, &b->b2, h, labels, training));
    h = rp_conv2d_layer_forward(t, &b->c2, h);
    /* upsample -> conv1x1 as conv1x1 -> upsample: the same values, on a quarter of the pixels. */
    rp_tensor *s = rp_upsample2x(t, rp_conv2d_layer_forward(t, &b->sc, x));
    return rp_add(t, h, s);
}

rp_tensor *sngan_generator_forward(rp_tape *t, const rp_sngan_generator *g, rp_tensor *z,
                                   const int32_t *labels, bool training)
{
    if (!z) return NULL;
    int n = z->shape[0];
    rp_precision_policy run = rp_tape_precision(t);
    if (rp_tape_set_precision(t, rp_sngan_net_policy(run, &g->cfg, 'g')) != RP_OK) return NULL;
    rp_tensor *h = rp_linear_layer_forward(t, &g->l1, z);
    h = rp_reshape(t, h, 4, (int[]){n, g->bh, g->bw, g->cfg.ch_g});
    for (int b = 0; b < 3; b++)
        h = gblock_forward(t, &g->blocks[b], h, labels, training);
    h = rp_batchnorm_layer_forward(t, &g->b5, h, training);
    h = rp_tanh(t, rp_conv2d_layer_forward(t, &g->c5, h));
    rp_tape_set_precision(t, run);
    return h;
}

rp_status rp_sngan_generate(rp_sngan_generator *g, rp_tape *t, const float *z,
                            const int32_t *labels, int n, float *images)
{
    if (!g || !t || !z || !labels || !images || n < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_generate: NULL argument or n %d < 1", n);
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= g->cfg.classes)
            return RP_ERROR(RP_ERR_INVALID,
                            "rp_sngan_generate: label %d of sample %d is not a class (0..%d)",
                            (int)labels[i], i, g->cfg.classes - 1);
    bool recording = rp_tape_recording(t);
    rp_tape_set_recording(t, false);
    rp_status status = RP_OK;
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){n, g->cfg.z_dim}, z);
    rp_tensor *y = sngan_generator_forward(t, g, x, labels, false);
    if (!y)
        status = rp_last_status();
    else
        status = rp_tensor_read(y, images, y->numel);
    rp_tape_set_recording(t, recording);
    rp_tape_reset(t);
    return status;
}

void rp_sngan_sample_z(const rp_sngan_config *cfg, float *z)
{
    rp_rng_fill_normal(sngan_seed(cfg, "sngan/sample_z"), 0, z,
                       (size_t)SNGAN_SAMPLE_COLS * cfg->z_dim, 0, 1);
}

rp_status rp_sngan_write_samples(rp_sngan_generator *g, rp_tape *t, const char *path)
{
    if (!g || !t || !path) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_write_samples: NULL argument");
    const rp_sngan_config *c = &g->cfg;
    const int cols = SNGAN_SAMPLE_COLS, n = c->classes * cols;
    int64_t per = (int64_t)c->h * c->w * c->c;
    rp_status status = RP_OK;
    float *zs = malloc((size_t)cols * c->z_dim * sizeof *zs);
    float *images = malloc((size_t)n * per * sizeof *images);
    int32_t labels[SNGAN_SAMPLE_COLS];
    if (!zs || !images) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the sample grid (%d images)", n);
        goto cleanup;
    }
    rp_sngan_sample_z(c, zs);
    /* One row (class) at a time, so the tape holds one row's activations. */
    for (int k = 0; k < c->classes; k++) {
        for (int j = 0; j < cols; j++)
            labels[j] = k;
        RP_TRY(rp_sngan_generate(g, t, zs, labels, cols, images + (int64_t)k * cols * per));
    }
    RP_TRY(rp_image_grid_write_png(path, images, n, c->h, c->w, c->c, cols, 2, 255, -1.0f, 1.0f));
cleanup:
    free(images);
    free(zs);
    return status;
}
