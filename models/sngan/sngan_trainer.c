/*
 * sngan_trainer.c - the SN-GAN as the trainer sees it. Every replica holds
 * both networks, an Adam optimizer for each (made by the runtime, so each
 * all-reduces its own set's gradients) and a loader over its share of the
 * real batches. A step is updater.py's update_core: one generator step, then
 * n_dis discriminator steps. Each phase freezes the other network
 * (rp_params_set_frozen), so its backward records no use of the frozen
 * parameters, fires no gradient-ready callback for them (no all-reduce of
 * their buckets) and leaves their gradients and optimizer state alone.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan_eval.h"
#include "models/sngan/sngan_internal.h"

/* Phases of a step, keying the random numbers: the generator's step, then discriminator step i. */
static uint64_t phase_stream(const rp_sngan_config *c, int64_t step, int phase)
{
    return (uint64_t)step * (uint64_t)(c->n_dis + 1) + (uint64_t)phase;
}

/*
 * The latent vectors and labels of samples [first, first + n) of a phase's global batch: a function
 * of (seed, step, phase, sample) only, so the replicas' shares make up the one-replica batch.
 */
static void draw_fakes(const rp_sngan_config *c, int64_t step, int phase, int64_t first, int n,
                       float *z, int32_t *y)
{
    uint64_t stream = phase_stream(c, step, phase);
    uint64_t zkey = rp_rng_make(sngan_seed(c, "sngan/z"), stream).key;
    uint64_t ykey = rp_rng_make(sngan_seed(c, "sngan/y"), stream).key;
    rp_rng_fill_normal(zkey, (uint64_t)first * (uint64_t)c->z_dim, z, (size_t)n * (size_t)c->z_dim,
                       0, 1);
    for (int i = 0; i < n; i++) {
        rp_rng r = rp_rng_make(ykey, (uint64_t)(first + i));
        y[i] = (int32_t)rp_rng_below(&r, (uint32_t)c->classes);
    }
}

/* ---- rows [lo, hi) of a tensor along its first axis: a custom op (the ops have no slice) ---- */

typedef struct rows_ctx {
    int lo, hi;
} rows_ctx;

static rp_status rows_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    const rows_ctx *r = ctx;
    int64_t per = in[0]->numel / in[0]->shape[0];
    memcpy(out->data, in[0]->data + r->lo * per, (size_t)((r->hi - r->lo) * per) * sizeof(float));
    return RP_OK;
}

static rp_status rows_backward(void *ctx, const rp_tensor *out, const float *dout,
                               rp_tensor *const *in, float *const *din, int n)
{
    const rows_ctx *r = ctx;
    if (!din[0]) return RP_OK;
    int64_t per = in[0]->numel / in[0]->shape[0];
    float *d = din[0] + r->lo * per;
    for (int64_t i = 0; i < out->numel; i++)
        d[i] += dout[i];
    return RP_OK;
}

static const rp_custom_op rows_op = {"sngan_rows", rows_forward, rows_backward};

static rp_tensor *rows(rp_tape *t, rp_tensor *x, int lo, int hi)
{
    if (!x) return NULL;
    rows_ctx *r = rp_arena_alloc(rp_tape_arena(t), sizeof *r);
    if (!r) return NULL;
    r->lo = lo;
    r->hi = hi;
    int shape[RP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[0] = hi - lo;
    return rp_custom(t, &rows_op, r, &x, 1, x->ndim, shape);
}

/* ---- building ------------------------------------------------------------------------------ */

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    const rp_sngan *g = ctx;
    const rp_sngan_config *cfg = &g->cfg;
    sngan_replica_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a replica's state");
    *out = s; /* freed by destroy() whatever happens below */
    if (!rp_replica_lockstep(rep))
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "the SN-GAN trains in the sync regime only: its two networks "
                        "take turns and its generator's batch norms are cross-replica");
    s->replica = rp_replica_id(rep);
    s->replicas = rp_replica_count(rep);
    int split = s->replicas * cfg->accum;
    if (cfg->d_batch % split || cfg->g_batch % split)
        return RP_ERROR(RP_ERR_INVALID,
                        "d_batch %d and g_batch %d must divide by replicas x accum = %d x %d",
                        cfg->d_batch, cfg->g_batch, s->replicas, cfg->accum);
    s->d_local = cfg->d_batch / s->replicas;
    s->g_local = cfg->g_batch / s->replicas;
    s->pixels = (int64_t)cfg->h * cfg->w * cfg->c;

    rp_comm *bn_comm = s->replicas > 1 ? rp_replica_axis_comm(rep, RP_AXIS_DATA) : NULL;
    RP_CHECK(rp_sngan_generator_create(&s->gen, cfg, bn_comm));
    RP_CHECK(sngan_discriminator_create(&s->dis, cfg));
    rp_params *pg = s->gen->params, *pd = s->dis.params;
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    oc.beta1 = cfg->beta1;
    oc.beta2 = cfg->beta2;
    oc.eps = 1e-8f; /* Chainer's Adam */
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt_g, pg, &oc));
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt_d, pd, &oc));

    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, cfg->d_batch, &in));
    rp_loader_config lc = rp_loader_config_default();
    lc.global_batch = in.global_batch;
    lc.replica = in.replica;
    lc.replicas = in.replicas;
    lc.seed = cfg->seed;
    lc.shuffle = true;
    lc.drop_last = true;
    lc.augment = false;
    lc.prefetch = true;
    lc.limit = cfg->limit;
    for (int k = 0; k < cfg->c; k++) {
        lc.mean[k] = 0.5f; /* pixel / 255 in [0, 1] to [-1, 1], the range of tanh */
        lc.std[k] = 0.5f;
    }
    RP_CHECK(rp_loader_create(&s->loader, g->train, &lc));
    s->loader_spe = rp_loader_steps_per_epoch(s->loader);

    int micro = (s->d_local > s->g_local ? s->d_local : s->g_local) / cfg->accum;
    s->u_numel = rp_params_numel(pd) - rp_params_trainable_numel(pd);
    s->real = malloc((size_t)(s->d_local * s->pixels) * sizeof *s->real);
    s->real_y = malloc((size_t)s->d_local * sizeof *s->real_y);
    s->z = malloc((size_t)micro * (size_t)cfg->z_dim * sizeof *s->z);
    s->y = malloc((size_t)(2 * micro) * sizeof *s->y);
    s->u_saved = malloc((size_t)(s->u_numel > 0 ? s->u_numel : 1) * sizeof *s->u_saved);
    if (!s->real || !s->real_y || !s->z || !s->y || !s->u_saved)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the SN-GAN's batch buffers");

    if (ck) {
        /* Every replica restores the same state; a checkpoint of N replicas resumes on M. */
        RP_CHECK(rp_checkpoint_read_params(ck, pg, "gen/"));
        RP_CHECK(rp_checkpoint_read_params(ck, pd, "dis/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt_g, pg, "optim_g/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt_d, pd, "optim_d/"));
        int64_t k = at->global_step * cfg->n_dis;
        RP_CHECK(rp_loader_seek(s->loader, k / s->loader_spe, k % s->loader_spe));
    }
    return RP_OK;
}

/* ---- the two phases ----------------------------------------------------------------------- */

/* The discriminator's buffers (the u vectors, after the trainable values) to u_saved, or back. */
static rp_status move_u(sngan_replica_state *s, bool save)
{
    rp_params *p = s->dis.params;
    int64_t base = rp_params_trainable_numel(p);
    for (int i = rp_params_trainable_count(p); i < rp_params_count(p); i++) {
        rp_tensor *u = rp_params_at(p, i);
        float *saved = s->u_saved + (rp_params_offset(p, i) - base);
        RP_CHECK(save ? rp_tensor_read(u, saved, u->numel) : rp_tensor_write(u, saved, u->numel));
    }
    return RP_OK;
}

static rp_status not_finite(const char *what, double v, const rp_trainer_at *at)
{
    return RP_ERROR(RP_ERR_NUMERIC,
                    "the %s is %g at iteration %lld (lr %g): training diverged; start again "
                    "with a lower lr",
                    what, v, (long long)at->global_step, (double)at->lr);
}

rp_status rp_sngan_step_g(rp_replica *rep, rp_sngan *g, void *state, const rp_trainer_at *at,
                          double *scalars)
{
    if (!rep || !g || !state || !at)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_step_g: NULL argument");
    const rp_sngan_config *c = &g->cfg;
    sngan_replica_state *s = state;
    rp_tape *t = rp_replica_tape(rep);
    int m = s->g_local / c->accum;
    rp_status status = RP_OK;
    double loss_sum = 0;
    rp_params_set_frozen(s->gen->params, false);
    rp_params_set_frozen(s->dis.params, true);
    RP_TRY(move_u(s, true));
    for (int a = 0; a < c->accum; a++) {
        /* Each micro-batch sees the u the step started from (they advance once per step). */
        if (a > 0) RP_TRY(move_u(s, false));
        rp_tape_reset(t);
        draw_fakes(c, at->global_step, 0, (int64_t)s->replica * s->g_local + (int64_t)a * m, m,
                   s->z, s->y);
        rp_tensor *z = rp_tensor_from(t, 2, (int[]){m, c->z_dim}, s->z);
        rp_tensor *fake = sngan_generator_forward(t, s->gen, z, s->y, true);
        rp_tensor *loss =
            rp_hinge_loss_g(t, sngan_discriminator_forward(t, &s->dis, fake, s->y, true));
        if (!loss) {
            status = rp_last_status();
            goto cleanup;
        }
        double l = rp_item(loss);
        if (!isfinite(l)) {
            status = not_finite("generator's loss", l, at);
            goto cleanup;
        }
        loss_sum += l;
        if (c->accum > 1) loss = rp_scale(t, loss, 1.0f / (float)c->accum);
        RP_TRY(rp_backward(t, loss));
    }
    rp_tape_reset(t);
    RP_TRY(rp_optimizer_step(s->opt_g, at->lr));
    if (scalars) scalars[0] = loss_sum / c->accum;
cleanup:
    rp_params_set_frozen(s->dis.params, false);
    return status;
}

/* Real batch i of step `at` into s->real, padded with background (-1) to h x w. */
static rp_status next_real(sngan_replica_state *s, const rp_sngan *g, const rp_trainer_at *at,
                           int i)
{
    const rp_sngan_config *c = &g->cfg;
    int64_t k = at->global_step * c->n_dis + i, epoch, step;
    rp_loader_position(s->loader, &epoch, &step);
    if (epoch != k / s->loader_spe || step != k % s->loader_spe)
        RP_CHECK(rp_loader_seek(s->loader, k / s->loader_spe, k % s->loader_spe));
    rp_batch b;
    RP_CHECK(rp_loader_next(s->loader, &b));
    if (b.n != s->d_local)
        return RP_ERROR(RP_ERR_INVALID, "the loader gave %d real images for a share of %d", b.n,
                        s->d_local);
    int top = (c->h - b.h) / 2, left = (c->w - b.w) / 2;
    int64_t row = (int64_t)b.w * b.c;
    for (int n = 0; n < b.n; n++) {
        float *dst = s->real + n * s->pixels;
        const float *src = b.x + (int64_t)n * b.h * row;
        if (top || left)
            for (int64_t j = 0; j < s->pixels; j++)
                dst[j] = -1.0f;
        for (int y = 0; y < b.h; y++)
            memcpy(dst + ((int64_t)(y + top) * c->w + left) * c->c, src + y * row,
                   (size_t)row * sizeof(float));
    }
    memcpy(s->real_y, b.y, (size_t)b.n * sizeof *s->real_y);
    return RP_OK;
}

rp_status rp_sngan_step_d(rp_replica *rep, rp_sngan *g, void *state, const rp_trainer_at *at, int i,
                          double *scalars)
{
    if (!rep || !g || !state || !at)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_step_d: NULL argument");
    const rp_sngan_config *c = &g->cfg;
    if (i < 0 || i >= c->n_dis)
        return RP_ERROR(RP_ERR_INVALID, "rp_sngan_step_d: discriminator step %d of %d", i,
                        c->n_dis);
    sngan_replica_state *s = state;
    rp_tape *t = rp_replica_tape(rep);
    int m = s->d_local / c->accum;
    rp_status status = RP_OK;
    double loss_sum = 0, real_sum = 0, fake_sum = 0;
    rp_params_set_frozen(s->dis.params, false);
    rp_params_set_frozen(s->gen->params, true);
    RP_TRY(next_real(s, g, at, i));
    RP_TRY(move_u(s, true));
    for (int a = 0; a < c->accum; a++) {
        if (a > 0) RP_TRY(move_u(s, false));
        rp_tape_reset(t);
        /* The fakes: the generator is frozen, so they carry no graph back into it (detached). */
        draw_fakes(c, at->global_step, 1 + i, (int64_t)s->replica * s->d_local + (int64_t)a * m, m,
                   s->z, s->y + m);
        rp_tensor *z = rp_tensor_from(t, 2, (int[]){m, c->z_dim}, s->z);
        rp_tensor *fake = sngan_generator_forward(t, s->gen, z, s->y + m, true);
        if (!fake) {
            status = rp_last_status();
            goto cleanup;
        }
        /* Real and fake in one batch, so the power iterations run once for both: the two as
           flat rows, joined end to end (a concatenation along the last axis) and reshaped. */
        int flat[2] = {1, m * (int)s->pixels};
        rp_tensor *halves[2] = {rp_tensor_from(t, 2, flat, s->real + (int64_t)a * m * s->pixels),
                                rp_reshape(t, fake, 2, flat)};
        rp_tensor *x = rp_reshape(t, rp_concat(t, halves, 2), 4, (int[]){2 * m, c->h, c->w, c->c});
        if (!x) {
            status = rp_last_status();
            goto cleanup;
        }
        memcpy(s->y, s->real_y + (int64_t)a * m, (size_t)m * sizeof *s->y);
        rp_tensor *out = sngan_discriminator_forward(t, &s->dis, x, s->y, true);
        rp_tensor *d_real = rows(t, out, 0, m), *d_fake = rows(t, out, m, 2 * m);
        rp_tensor *loss = rp_hinge_loss_d(t, d_real, d_fake);
        if (!loss) {
            status = rp_last_status();
            goto cleanup;
        }
        double l = rp_item(loss);
        if (!isfinite(l)) {
            status = not_finite("discriminator's loss", l, at);
            goto cleanup;
        }
        loss_sum += l;
        /* The mean outputs, read off the values (no graph for them). */
        float *dr = rp_arena_alloc(rp_tape_arena(t), 2 * (size_t)d_real->numel * sizeof(float));
        if (!dr) {
            status = rp_last_status();
            goto cleanup;
        }
        float *df = dr + d_real->numel;
        RP_TRY(rp_tensor_read(d_real, dr, d_real->numel));
        RP_TRY(rp_tensor_read(d_fake, df, d_fake->numel));
        for (int j = 0; j < m; j++) {
            real_sum += dr[j] / m;
            fake_sum += df[j] / m;
        }
        if (c->accum > 1) loss = rp_scale(t, loss, 1.0f / (float)c->accum);
        RP_TRY(rp_backward(t, loss));
    }
    rp_tape_reset(t);
    RP_TRY(rp_optimizer_step(s->opt_d, at->lr * (c->lr_d / c->lr_g)));
    if (scalars) {
        scalars[0] = loss_sum / c->accum;
        scalars[1] = real_sum / c->accum;
        scalars[2] = fake_sum / c->accum;
    }
cleanup:
    rp_params_set_frozen(s->gen->params, false);
    return status;
}

/* ---- the trainer's callbacks ---------------------------------------------------------------- */

/* Local replica 0 of the root process writes the sample grid, and a copy named by the iteration. */
static void write_samples(rp_replica *rep, const rp_sngan *g, sngan_replica_state *s,
                          int64_t iterations)
{
    char path[4096 + 64]; /* run_dir and a file name */
    rp_tape *t = rp_replica_tape(rep);
    snprintf(path, sizeof path, "%s/samples-%06lld.png", g->run_dir, (long long)iterations);
    rp_status status = rp_sngan_write_samples(s->gen, t, path);
    if (status == RP_OK) {
        snprintf(path, sizeof path, "%s/samples.png", g->run_dir);
        status = rp_sngan_write_samples(s->gen, t, path);
    }
    /* A sample grid is for watching: a failed write is reported, and training goes on. */
    if (status != RP_OK) rp_warn("sample grid not written: %s", rp_last_error());
}

static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    rp_sngan *g = ctx;
    const rp_sngan_config *c = &g->cfg;
    double gs[1] = {0}, ds[3] = {0}, d_loss = 0, d_real = 0, d_fake = 0;
    /* updater.py: the generator's update comes first, on the first discriminator iteration. */
    RP_CHECK(rp_sngan_step_g(rep, g, state, at, gs));
    for (int i = 0; i < c->n_dis; i++) {
        RP_CHECK(rp_sngan_step_d(rep, g, state, at, i, ds));
        d_loss += ds[0];
        d_real += ds[1];
        d_fake += ds[2];
    }
    scalars[0] = d_loss / c->n_dis;
    scalars[1] = gs[0];
    scalars[2] = d_real / c->n_dis;
    scalars[3] = d_fake / c->n_dis;
    int64_t done = at->global_step + 1;
    if (c->sample_every > 0 && done % c->sample_every == 0 && rp_replica_id(rep) == 0 &&
        g->run_dir[0])
        write_samples(rep, g, state, done);
    return RP_OK;
}

static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    return rp_sngan_eval_replica(rep, ctx, state);
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    return rp_sngan_eval_done(ctx, r, m);
}

/* ZeRO: both optimizers' shards gathered into replica 0's, which the checkpoint stores. */
static rp_status settle(rp_replica *rep, void *ctx, void *state)
{
    (void)ctx;
    sngan_replica_state *s = state;
    RP_CHECK(rp_replica_optimizer_fetch(rep, s->opt_g));
    return rp_replica_optimizer_fetch(rep, s->opt_d);
}

static rp_status save(void *ctx, void *state, rp_checkpoint *ck)
{
    const sngan_replica_state *s = state;
    RP_CHECK(rp_checkpoint_add_params(ck, s->gen->params, "gen/"));
    RP_CHECK(rp_checkpoint_add_params(ck, s->dis.params, "dis/"));
    RP_CHECK(rp_checkpoint_add_optimizer(ck, s->opt_g, s->gen->params, "optim_g/"));
    return rp_checkpoint_add_optimizer(ck, s->opt_d, s->dis.params, "optim_d/");
}

/* Each replica's own part (its ZeRO shard, or an even part of the values): nothing gathered. */
static rp_status save_part(rp_replica *rep, void *ctx, void *state, rp_checkpoint *ck)
{
    (void)ctx;
    const sngan_replica_state *s = state;
    RP_CHECK(rp_replica_checkpoint_part(rep, ck, s->opt_g, "gen/", "optim_g/"));
    return rp_replica_checkpoint_part(rep, ck, s->opt_d, "dis/", "optim_d/");
}

static rp_status destroy(rp_replica *rep, void *ctx, void *state)
{
    sngan_replica_state *s = state;
    if (!s) return RP_OK;
    rp_loader_destroy(s->loader);
    rp_optimizer_destroy(s->opt_d);
    rp_optimizer_destroy(s->opt_g);
    sngan_discriminator_destroy(&s->dis);
    rp_sngan_generator_destroy(s->gen);
    free(s->u_saved);
    free(s->y);
    free(s->z);
    free(s->real_y);
    free(s->real);
    free(s);
    return RP_OK;
}

const rp_trainer_model *rp_sngan_trainer_model(void)
{
    static const char *const scalars[] = {"d_loss", "g_loss", "d_real", "d_fake", NULL};
    static const rp_trainer_model model = {
        .build = build,
        .train_step = train_step,
        .scalars = scalars,
        .evaluate = evaluate,
        .evaluated = evaluated,
        .settle = settle,
        .save = save,
        .save_part = save_part,
        .destroy = destroy,
    };
    return &model;
}
