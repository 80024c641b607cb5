/*
 * discriminator.c - the SN-ResNet projection discriminator of
 * dis_models/snresnet_32.py: an optimised first block, a down block, two
 * plain blocks, ReLU, a sum over H and W, and SNLinear(h) + <SNEmbed(y), h>.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/sngan/sngan_internal.h"

static rp_status dblock_init(sngan_dblock *b, rp_params *p, int index, int in, int out,
                             bool downsample, bool optimized)
{
    char name[RP_NAME_MAX];
    const float gain = sqrtf(2.0f);
    b->downsample = downsample;
    b->optimized = optimized;
    b->learnable_sc = optimized || in != out || downsample;
    snprintf(name, sizeof name, "block%d.c1", index);
    RP_CHECK(rp_sn_conv2d_layer_init(&b->c1, p, name, in, out, 3, 1, 1, true, gain));
    snprintf(name, sizeof name, "block%d.c2", index);
    RP_CHECK(rp_sn_conv2d_layer_init(&b->c2, p, name, out, out, 3, 1, 1, true, gain));
    if (b->learnable_sc) {
        snprintf(name, sizeof name, "block%d.c_sc", index);
        RP_CHECK(rp_sn_conv2d_layer_init(&b->sc, p, name, in, out, 1, 1, 0, true, 1.0f));
    }
    return RP_OK;
}

rp_status sngan_discriminator_create(sngan_discriminator *d, const rp_sngan_config *cfg)
{
    memset(d, 0, sizeof *d);
    d->ch = cfg->ch_d;
    d->classes = cfg->classes;
    d->cfg = *cfg;
    RP_CHECK(rp_params_create(&d->params));
    int ch = cfg->ch_d;
    RP_CHECK(dblock_init(&d->blocks[0], d->params, 1, cfg->c, ch, true, true));
    RP_CHECK(dblock_init(&d->blocks[1], d->params, 2, ch, ch, true, false));
    RP_CHECK(dblock_init(&d->blocks[2], d->params, 3, ch, ch, false, false));
    RP_CHECK(dblock_init(&d->blocks[3], d->params, 4, ch, ch, false, false));
    RP_CHECK(rp_sn_linear_layer_init(&d->l5, d->params, "l5", ch, 1, false, 1.0f));
    RP_CHECK(rp_sn_embedding_layer_init(&d->l_y, d->params, "l_y", cfg->classes, ch, 1.0f));
    return rp_params_finalize(d->params, sngan_seed(cfg, "dis"));
}

void sngan_discriminator_destroy(sngan_discriminator *d)
{
    rp_params_destroy(d->params);
    memset(d, 0, sizeof *d);
}

static rp_tensor *avgpool2(rp_tape *t, rp_tensor *x)
{
    return rp_avg_pool2d(t, x, (rp_pool_params){2, 2, 0});
}

static rp_tensor *dblock_forward(rp_tape *t, const sngan_dblock *b, rp_tensor *x, bool training)
{
    /* The optimised block starts with the convolution (its input is the image, no ReLU before). */
    rp_tensor *h = b->optimized ? x : sngan_relu_into_conv(t, x);
    h = sngan_relu_into_conv(t, rp_sn_conv2d_layer_forward(t, &b->c1, h, training));
    h = rp_sn_conv2d_layer_forward(t, &b->c2, h, training);
    if (b->downsample) h = avgpool2(t, h);
    rp_tensor *s = x;
    if (b->learnable_sc) {
        /* conv1x1 and avgpool2 commute (both linear, the bias a constant): pool first, a quarter of
         * the work. */
        s = b->downsample ? avgpool2(t, x) : x;
        s = rp_sn_conv2d_layer_forward(t, &b->sc, s, training);
    }
    return rp_add(t, h, s);
}

rp_tensor *sngan_discriminator_forward(rp_tape *t, const sngan_discriminator *d, rp_tensor *x,
                                       const int32_t *labels, bool training)
{
    if (!x) return NULL;
    int n = x->shape[0];
    rp_precision_policy run = rp_tape_precision(t);
    if (rp_tape_set_precision(t, rp_sngan_net_policy(run, &d->cfg, 'd')) != RP_OK) return NULL;
    rp_tensor *h = x;
    for (int b = 0; b < 4; b++)
        h = dblock_forward(t, &d->blocks[b], h, training);
    h = rp_relu(t, h);
    /* A sum over H and W, as the authors' code (its comment says average pooling). */
    h = rp_sum_axes(t, h, 2, (int[]){1, 2}, false);                                  /* [n, ch] */
    rp_tensor *out = rp_sn_linear_layer_forward(t, &d->l5, h, training);             /* [n, 1] */
    rp_tensor *w_y = rp_sn_embedding_layer_forward(t, &d->l_y, labels, n, training); /* [n, ch] */
    rp_tensor *proj = rp_sum_axes(t, rp_mul(t, w_y, h), 1, (int[]){1}, true);        /* [n, 1] */
    out = rp_add(t, out, proj);
    rp_tape_set_precision(t, run);
    return out;
}
