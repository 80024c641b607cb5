/*
 * networks.c - D4PG's configuration, its policy and critic networks (Acme's
 * LayerNormMLP torsos with their initialisers), the policy object actors
 * use, and the critic's mean as a differentiable op.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_internal.h"

rp_d4pg_config rp_d4pg_config_default(void)
{
    rp_d4pg_config c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < RP_D4PG_MAX_ACT; i++) {
        c.act_min[i] = -1.0f;
        c.act_max[i] = 1.0f;
    }
    c.policy_layers[0] = c.policy_layers[1] = c.policy_layers[2] = 256;
    c.critic_layers[0] = c.critic_layers[1] = 512;
    c.critic_layers[2] = 256;
    c.atoms = 51;
    c.v_min = -150.0f;
    c.v_max = 150.0f;
    c.n_step = 5;
    c.discount = 0.99f;
    c.target_update_period = 100;
    c.clip_grad_norm = 40.0f;
    c.dqda_clip = 1.0f;
    c.policy_lr = 1e-4f;
    c.critic_lr = 1e-4f;
    c.batch = 256;
    c.sigma = 0.3f;
    return c;
}

static int count_layers(const int *layers, const char *what, rp_status *status)
{
    int n = 0;
    while (n < RP_D4PG_MAX_LAYERS && layers[n] > 0)
        n++;
    for (int i = n; i < RP_D4PG_MAX_LAYERS; i++)
        if (layers[i] != 0) {
            *status = RP_ERROR(RP_ERR_INVALID, "%s[%d] = %d after the list ended at %d (or < 0)",
                               what, i, layers[i], n);
            return -1;
        }
    if (n == 0) {
        *status = RP_ERROR(RP_ERR_INVALID, "%s is empty; at least one layer", what);
        return -1;
    }
    return n;
}

rp_status rp_d4pg_config_check(const rp_d4pg_config *c)
{
    if (!c) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_config_check: NULL config");
    if (c->obs_dim < 1) return RP_ERROR(RP_ERR_INVALID, "obs_dim %d; at least 1", c->obs_dim);
    if (c->act_dim < 1 || c->act_dim > RP_D4PG_MAX_ACT)
        return RP_ERROR(RP_ERR_INVALID, "act_dim %d; 1..%d", c->act_dim, RP_D4PG_MAX_ACT);
    for (int i = 0; i < c->act_dim; i++)
        if (!isfinite(c->act_min[i]) || !isfinite(c->act_max[i]) ||
            !(c->act_min[i] < c->act_max[i]))
            return RP_ERROR(RP_ERR_INVALID,
                            "action bounds [%g, %g] of dimension %d; finite, min < max",
                            (double)c->act_min[i], (double)c->act_max[i], i);
    rp_status status = RP_OK;
    if (count_layers(c->policy_layers, "policy_layers", &status) < 0) return status;
    if (count_layers(c->critic_layers, "critic_layers", &status) < 0) return status;
    if (c->atoms < 2 || c->atoms > 100000)
        return RP_ERROR(RP_ERR_INVALID, "atoms %d; 2..100000", c->atoms);
    if (!isfinite(c->v_min) || !isfinite(c->v_max) || !(c->v_min < c->v_max))
        return RP_ERROR(RP_ERR_INVALID, "support [v_min %g, v_max %g]; finite, v_min < v_max",
                        (double)c->v_min, (double)c->v_max);
    if (c->n_step < 1) return RP_ERROR(RP_ERR_INVALID, "n_step %d; at least 1", c->n_step);
    if (!(c->discount >= 0 && c->discount <= 1))
        return RP_ERROR(RP_ERR_INVALID, "discount %g; in [0, 1]", (double)c->discount);
    if (c->target_update_period < 1)
        return RP_ERROR(RP_ERR_INVALID, "target_update_period %d; at least 1",
                        c->target_update_period);
    if (!(c->clip_grad_norm >= 0) || !isfinite(c->clip_grad_norm))
        return RP_ERROR(RP_ERR_INVALID, "clip_grad_norm %g; 0 (off) or a finite positive norm",
                        (double)c->clip_grad_norm);
    if (!(c->dqda_clip >= 0) || !isfinite(c->dqda_clip))
        return RP_ERROR(RP_ERR_INVALID, "dqda_clip %g; 0 (off) or a finite positive norm",
                        (double)c->dqda_clip);
    if (!(c->policy_lr >= 0) || !isfinite(c->policy_lr) || !(c->critic_lr >= 0) ||
        !isfinite(c->critic_lr))
        return RP_ERROR(RP_ERR_INVALID, "learning rates policy_lr %g, critic_lr %g; finite, >= 0",
                        (double)c->policy_lr, (double)c->critic_lr);
    if (c->batch < 1) return RP_ERROR(RP_ERR_INVALID, "batch %d; at least 1", c->batch);
    if (!(c->sigma >= 0) || !isfinite(c->sigma))
        return RP_ERROR(RP_ERR_INVALID, "sigma %g; finite, >= 0", (double)c->sigma);
    return RP_OK;
}

/* ---- the torso ---------------------------------------------------------------- */

/* Keras' VarianceScaling uniform: limit sqrt(3 scale / n), n = fan_out, scale 0.333. */
float d4pg_torso_bound(int fan_out)
{
    return sqrtf(3.0f * 0.333f / (float)fan_out);
}

/* VarianceScaling(1e-4) draws a truncated normal of variance 1e-4 / fan_in; a uniform of that
 * variance. */
float d4pg_policy_head_bound(int fan_in)
{
    return sqrtf(3.0f * 1e-4f / (float)fan_in);
}

static rp_status mlp_build(d4pg_mlp *m, rp_params *p, const char *prefix, int in, const int *layers)
{
    char name[RP_NAME_MAX];
    m->n = 0;
    for (int i = 0; i < RP_D4PG_MAX_LAYERS && layers[i] > 0; i++) {
        snprintf(name, sizeof name, "%s.l%d", prefix, i);
        RP_CHECK(rp_linear_layer_init_with(&m->lin[i], p, name, in, layers[i], true,
                                           RP_INIT_UNIFORM, d4pg_torso_bound(layers[i])));
        if (i == 0) {
            int shape[1] = {layers[0]};
            snprintf(name, sizeof name, "%s.ln.weight", prefix);
            m->ln_gamma =
                rp_params_add(p, name, 1, shape, (rp_init){RP_INIT_CONSTANT, 1.0f, 0, 0}, true);
            snprintf(name, sizeof name, "%s.ln.bias", prefix);
            m->ln_beta = rp_params_add(p, name, 1, shape, (rp_init){RP_INIT_ZEROS, 0, 0, 0}, true);
            if (!m->ln_gamma || !m->ln_beta) return rp_last_status();
        }
        in = layers[i];
        m->n++;
    }
    m->out = in;
    return RP_OK;
}

static rp_tensor *mlp_forward(rp_tape *t, const d4pg_mlp *m, rp_tensor *x)
{
    x = rp_linear_layer_forward(t, &m->lin[0], x);
    x = rp_tanh(t, rp_layer_norm(t, x, m->ln_gamma, m->ln_beta, D4PG_LN_EPS));
    for (int i = 1; i < m->n; i++)
        x = rp_elu(t, rp_linear_layer_forward(t, &m->lin[i], x), 1.0f);
    return x;
}

/* ---- the policy --------------------------------------------------------------- */

rp_status d4pg_policy_build(rp_d4pg_policy *p, const rp_d4pg_config *cfg, uint64_t seed)
{
    RP_CHECK(rp_d4pg_config_check(cfg));
    p->cfg = *cfg;
    RP_CHECK(rp_params_create(&p->params));
    RP_CHECK(mlp_build(&p->torso, p->params, "policy", cfg->obs_dim, cfg->policy_layers));
    RP_CHECK(rp_linear_layer_init_with(&p->head, p->params, "policy.head", p->torso.out,
                                       cfg->act_dim, true, RP_INIT_UNIFORM,
                                       d4pg_policy_head_bound(p->torso.out)));
    p->rescale = false;
    for (int i = 0; i < cfg->act_dim; i++) {
        p->scale[i] = 0.5f * (cfg->act_max[i] - cfg->act_min[i]);
        p->offset[i] = 0.5f * (cfg->act_max[i] + cfg->act_min[i]);
        if (p->scale[i] != 1.0f || p->offset[i] != 0.0f) p->rescale = true;
    }
    return rp_params_finalize(p->params, seed);
}

rp_tensor *d4pg_policy_forward(rp_tape *t, const rp_d4pg_policy *p, rp_tensor *obs)
{
    rp_tensor *a = rp_tanh(t, rp_linear_layer_forward(t, &p->head, mlp_forward(t, &p->torso, obs)));
    if (!a || !p->rescale) return a;
    /* Acme's TanhToSpec: min + (tanh + 1) / 2 (max - min), i.e. offset + scale tanh. */
    int shape[1] = {p->cfg.act_dim};
    rp_tensor *scale = rp_tensor_from(t, 1, shape, p->scale);
    rp_tensor *offset = rp_tensor_from(t, 1, shape, p->offset);
    return rp_add(t, rp_mul(t, a, scale), offset);
}

rp_status rp_d4pg_policy_create(rp_d4pg_policy **out, const rp_d4pg_config *cfg)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_create: NULL output");
    *out = NULL;
    rp_d4pg_policy *p = calloc(1, sizeof *p);
    if (!p) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a D4PG policy");
    rp_status status = d4pg_policy_build(p, cfg, 0);
    if (status != RP_OK) {
        rp_d4pg_policy_destroy(p);
        return status;
    }
    *out = p;
    return RP_OK;
}

void rp_d4pg_policy_destroy(rp_d4pg_policy *p)
{
    if (!p) return;
    rp_params_destroy(p->params);
    free(p);
}

rp_params *rp_d4pg_policy_params(const rp_d4pg_policy *p)
{
    return p ? p->params : NULL;
}

const rp_d4pg_config *rp_d4pg_policy_config(const rp_d4pg_policy *p)
{
    return p ? &p->cfg : NULL;
}

/* One standard normal from two uniforms (Box-Muller; 1 - u keeps the log finite). */
static float normal_draw(rp_rng *rng)
{
    double u1 = 1.0 - (double)rp_rng_uniform(rng);
    double u2 = (double)rp_rng_uniform(rng);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

rp_status rp_d4pg_policy_act(rp_d4pg_policy *p, rp_tape *t, const float *obs, int n, float sigma,
                             rp_rng *rng, float *act)
{
    if (!p || !t || !obs || !act)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_act: NULL argument");
    if (n < 1) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_act: n %d; at least 1", n);
    if (!(sigma >= 0) || !isfinite(sigma))
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_act: sigma %g; finite, >= 0",
                        (double)sigma);
    if (sigma > 0 && !rng)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_policy_act: sigma %g needs an rng", (double)sigma);
    const rp_d4pg_config *c = &p->cfg;
    bool was = rp_tape_recording(t);
    rp_tape_set_recording(t, false);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){n, c->obs_dim}, obs);
    rp_tensor *a = d4pg_policy_forward(t, p, x);
    rp_tape_set_recording(t, was);
    if (!a) return rp_last_status();
    RP_CHECK(rp_tensor_read(a, act, (int64_t)n * c->act_dim));
    if (sigma > 0)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < c->act_dim; j++) {
                float *v = &act[(int64_t)i * c->act_dim + j];
                *v += sigma * normal_draw(rng);
                *v = fminf(fmaxf(*v, c->act_min[j]), c->act_max[j]);
            }
    return RP_OK;
}

/* ---- the critic --------------------------------------------------------------- */

rp_status d4pg_critic_build(d4pg_critic *c, const rp_d4pg_config *cfg, uint64_t seed)
{
    RP_CHECK(rp_params_create(&c->params));
    RP_CHECK(
        mlp_build(&c->torso, c->params, "critic", cfg->obs_dim + cfg->act_dim, cfg->critic_layers));
    /* Sonnet's Linear default, a truncated normal of std 1/sqrt(fan_in): a uniform of variance
     * 1/fan_in. */
    RP_CHECK(rp_linear_layer_init_with(&c->head, c->params, "critic.head", c->torso.out, cfg->atoms,
                                       true, RP_INIT_UNIFORM, sqrtf(3.0f / (float)c->torso.out)));
    return rp_params_finalize(c->params, seed);
}

void d4pg_critic_free(d4pg_critic *c)
{
    if (!c) return;
    rp_params_destroy(c->params);
    c->params = NULL;
}

rp_tensor *d4pg_critic_forward(rp_tape *t, const d4pg_critic *c, rp_tensor *obs, rp_tensor *act)
{
    if (!obs || !act) return NULL;
    rp_tensor *xs[2] = {obs, act};
    rp_tensor *x = mlp_forward(t, &c->torso, rp_concat(t, xs, 2));
    return rp_linear_layer_forward(t, &c->head, x);
}

/* ---- Q = sum_i z_i softmax(logits)_i as an op (the library has no softmax or exp op) ---- */

typedef struct ev_ctx {
    const float *support;
    double *p; /* [atoms] scratch, from the arena */
} ev_ctx;

/* Softmax of one row into p (max-shifted, in double); returns sum_i z_i p_i. */
static double row_softmax_mean(const float *logits, const float *z, int k, double *p)
{
    double m = logits[0];
    for (int i = 1; i < k; i++)
        m = logits[i] > m ? logits[i] : m;
    double s = 0;
    for (int i = 0; i < k; i++) {
        p[i] = exp((double)logits[i] - m);
        s += p[i];
    }
    double q = 0;
    for (int i = 0; i < k; i++) {
        p[i] /= s;
        q += p[i] * z[i];
    }
    return q;
}

static rp_status ev_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    (void)n;
    const ev_ctx *e = ctx;
    int rows = in[0]->shape[0], k = in[0]->shape[1];
    for (int r = 0; r < rows; r++)
        out->data[r] = (float)row_softmax_mean(in[0]->data + (int64_t)r * k, e->support, k, e->p);
    return RP_OK;
}

/* dQ/dlogit_i = p_i (z_i - Q). */
static rp_status ev_backward(void *ctx, const rp_tensor *out, const float *dout,
                             rp_tensor *const *in, float *const *din, int n)
{
    (void)out;
    (void)n;
    if (!din[0]) return RP_OK;
    const ev_ctx *e = ctx;
    int rows = in[0]->shape[0], k = in[0]->shape[1];
    double *buf = e->p;
    for (int r = 0; r < rows; r++) {
        double q = row_softmax_mean(in[0]->data + (int64_t)r * k, e->support, k, buf);
        float *d = din[0] + (int64_t)r * k;
        for (int i = 0; i < k; i++)
            d[i] += (float)((double)dout[r] * buf[i] * ((double)e->support[i] - q));
    }
    return RP_OK;
}

static const rp_custom_op ev_op = {"d4pg_expected_value", ev_forward, ev_backward};

rp_tensor *d4pg_expected_value(rp_tape *t, rp_tensor *logits, const float *support)
{
    if (!logits) return NULL;
    if (logits->ndim != 2) {
        char s[64];
        RP_ERROR(RP_ERR_SHAPE, "d4pg expected value: logits %s; want [n, atoms]",
                 rp_shape_str(logits, s, sizeof s));
        return NULL;
    }
    ev_ctx *e = rp_arena_alloc(rp_tape_arena(t), sizeof *e);
    if (!e) return NULL;
    e->support = support;
    e->p = rp_arena_alloc(rp_tape_arena(t), (size_t)logits->shape[1] * sizeof(double));
    if (!e->p) return NULL;
    int shape[1] = {logits->shape[0]};
    return rp_custom(t, &ev_op, e, &logits, 1, 1, shape);
}
