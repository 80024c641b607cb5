/*
 * sngan.c - the SN-GAN's configuration and its dataset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan_internal.h"

rp_sngan_config rp_sngan_config_default(void)
{
    rp_sngan_config c;
    memset(&c, 0, sizeof c);
    c.ch_g = 32;
    c.ch_d = 32;
    c.z_dim = 128;
    c.classes = 10;
    c.h = 32;
    c.w = 32;
    c.c = 1;
    c.d_batch = 64;
    c.g_batch = 128;
    c.accum = 1;
    c.n_dis = 5;
    c.lr_g = 2e-4f;
    c.lr_d = 2e-4f;
    c.beta1 = 0.0f;
    c.beta2 = 0.9f;
    snprintf(c.dataset, sizeof c.dataset, "fashion-mnist");
    snprintf(c.keep_f32, sizeof c.keep_f32, "none");
    /* bf16 storage cost the default run 0.2 of FD (docs/sngan.md): f32 unless asked. */
    snprintf(c.activations, sizeof c.activations, "f32");
    return c;
}

rp_precision_policy rp_sngan_net_policy(rp_precision_policy run, const rp_sngan_config *cfg,
                                        char net)
{
    if (run.compute != RP_BF16) return run;
    if (cfg->keep_f32[0] == net && cfg->keep_f32[1] == '\0')
        return rp_precision_policy_make(RP_F32);
    if (!strcmp(cfg->activations, "f32")) run.activations = RP_F32;
    return run;
}

rp_tensor *sngan_relu_into_conv(rp_tape *t, rp_tensor *x)
{
    rp_precision_policy p = rp_tape_precision(t);
    bool bf16 = p.compute == RP_BF16 && (p.ops & RP_AUTOCAST_CONV);
    return rp_relu_to(t, x, bf16 ? RP_BF16 : RP_F32);
}

rp_status rp_sngan_config_check(const rp_sngan_config *c)
{
    if (!c) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_config_check: NULL config");
    if (c->ch_g < 1 || c->ch_d < 1)
        return RP_ERROR(RP_ERR_INVALID, "widths ch_g %d and ch_d %d; at least 1", c->ch_g, c->ch_d);
    if (c->z_dim < 1) return RP_ERROR(RP_ERR_INVALID, "z_dim %d; at least 1", c->z_dim);
    if (c->classes < 1 || c->classes > 65536)
        return RP_ERROR(RP_ERR_INVALID, "classes %d; 1..65536", c->classes);
    if (c->h < 8 || c->w < 8 || c->h % 8 || c->w % 8)
        return RP_ERROR(RP_ERR_INVALID,
                        "image size %dx%d; h and w must be multiples of 8 (the generator "
                        "upsamples 3 times)",
                        c->h, c->w);
    if (c->c != 1 && c->c != 3) return RP_ERROR(RP_ERR_INVALID, "channels %d; 1 or 3", c->c);
    if (c->d_batch < 1 || c->g_batch < 1)
        return RP_ERROR(RP_ERR_INVALID, "d_batch %d and g_batch %d; at least 1", c->d_batch,
                        c->g_batch);
    if (c->accum < 1) return RP_ERROR(RP_ERR_INVALID, "accum %d; at least 1", c->accum);
    if (c->d_batch % c->accum || c->g_batch % c->accum)
        return RP_ERROR(RP_ERR_INVALID, "accum %d does not divide d_batch %d and g_batch %d",
                        c->accum, c->d_batch, c->g_batch);
    if (c->n_dis < 1 || c->n_dis > 1000)
        return RP_ERROR(RP_ERR_INVALID, "n_dis %d; 1..1000", c->n_dis);
    if (!(c->lr_g > 0) || !(c->lr_d >= 0) || c->lr_g > 1e3f || c->lr_d > 1e3f)
        return RP_ERROR(RP_ERR_INVALID, "learning rates lr_g %g (> 0) and lr_d %g (>= 0)",
                        (double)c->lr_g, (double)c->lr_d);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return RP_ERROR(RP_ERR_INVALID, "Adam betas %g, %g; each in [0, 1)", (double)c->beta1,
                        (double)c->beta2);
    if (c->limit < 0)
        return RP_ERROR(RP_ERR_INVALID, "limit %lld; 0 (all) or more", (long long)c->limit);
    if (c->keep_f32[0] && strcmp(c->keep_f32, "none") && strcmp(c->keep_f32, "g") &&
        strcmp(c->keep_f32, "d"))
        return RP_ERROR(RP_ERR_INVALID, "keep_f32 \"%.8s\"; none, g or d", c->keep_f32);
    if (c->activations[0] && strcmp(c->activations, "bf16") && strcmp(c->activations, "f32"))
        return RP_ERROR(RP_ERR_INVALID, "activations \"%.8s\"; bf16 or f32", c->activations);
    if (c->sample_every < 0)
        return RP_ERROR(RP_ERR_INVALID, "sample_every %lld; 0 (never) or more",
                        (long long)c->sample_every);
    return RP_OK;
}

uint64_t sngan_seed(const rp_sngan_config *cfg, const char *what)
{
    return rp_hash_str(cfg->seed, what);
}

rp_status rp_sngan_create(rp_sngan **out, const rp_sngan_config *cfg)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_create: NULL argument");
    *out = NULL;
    const char *name = cfg->dataset;
    if (strcmp(name, "fashion-mnist") && strcmp(name, "mnist") && strcmp(name, "cifar10"))
        return RP_ERROR(RP_ERR_INVALID, "unknown dataset \"%s\" (fashion-mnist, mnist, cifar10)",
                        name);
    rp_status status = RP_OK;
    rp_sngan *g = calloc(1, sizeof *g);
    if (!g) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate an SN-GAN");
    g->cfg = *cfg;
    const char *dir = cfg->data_dir[0] ? cfg->data_dir : NULL;
    if (!strcmp(name, "mnist") && !dir) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "mnist needs data_dir (the default directory holds Fashion-MNIST)");
        goto cleanup;
    }
    if (!strcmp(name, "cifar10") && !dir) {
        status =
            RP_ERROR(RP_ERR_INVALID, "cifar10 needs data_dir: the directory of data_batch_1.bin .. "
                                     "data_batch_5.bin (CIFAR-10's binary version)");
        goto cleanup;
    }
    if (!strcmp(name, "cifar10"))
        RP_TRY(rp_dataset_load_cifar10(&g->train, dir, "train"));
    else
        RP_TRY(rp_dataset_load_mnist(&g->train, dir, "train"));
    g->cfg.classes = g->train->num_classes;
    g->cfg.c = g->train->c;
    RP_TRY(rp_sngan_config_check(&g->cfg));
    if (g->train->h > g->cfg.h || g->train->w > g->cfg.w || (g->cfg.h - g->train->h) % 2 ||
        (g->cfg.w - g->train->w) % 2) {
        status = RP_ERROR(RP_ERR_INVALID, "the dataset's %dx%d images do not pad evenly to %dx%d",
                          g->train->h, g->train->w, g->cfg.h, g->cfg.w);
        goto cleanup;
    }
    int64_t n = cfg->limit > 0 && cfg->limit < g->train->n ? cfg->limit : g->train->n;
    if (n < g->cfg.d_batch) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "%lld training images (limit %lld) is less than one d_batch of %d",
                          (long long)n, (long long)cfg->limit, g->cfg.d_batch);
        goto cleanup;
    }
    *out = g;
    return RP_OK;
cleanup:
    rp_sngan_destroy(g);
    return status;
}

void rp_sngan_destroy(rp_sngan *g)
{
    if (!g) return;
    rp_dataset_destroy(g->train);
    free(g);
}

const rp_sngan_config *rp_sngan_get_config(const rp_sngan *g)
{
    return g ? &g->cfg : NULL;
}

const rp_dataset *rp_sngan_dataset(const rp_sngan *g)
{
    return g ? g->train : NULL;
}

rp_status rp_sngan_set_run_dir(rp_sngan *g, const char *dir)
{
    if (!g) return RP_ERROR(RP_ERR_INVALID, "rp_sngan_set_run_dir: NULL model");
    if (dir && strlen(dir) >= sizeof g->run_dir)
        return RP_ERROR(RP_ERR_INVALID, "run directory \"%.64s...\" is longer than %zu bytes", dir,
                        sizeof g->run_dir - 1);
    snprintf(g->run_dir, sizeof g->run_dir, "%s", dir ? dir : "");
    return RP_OK;
}

void rp_sngan_set_eval(rp_sngan *g, void *eval)
{
    if (g) g->eval = eval;
}

void *rp_sngan_get_eval(const rp_sngan *g)
{
    return g ? g->eval : NULL;
}

void rp_sngan_trainer_config_apply(const rp_sngan_config *cfg, rp_trainer_config *tc)
{
    if (!cfg || !tc) return;
    tc->lr = cfg->lr_g;
    tc->schedule = RP_SCHED_LINEAR;
    tc->batch = 1; /* the rate shown is batch x steps/s: iterations per second */
    tc->rate_unit = "it/s";
    tc->rate_key = "iterations_per_s";
    tc->shown_scalars = "d_loss,g_loss";
}
