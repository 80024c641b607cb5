/*
 * learner.c - the D4PG learner: online and target networks, two replica
 * optimizers, and the step of Acme's TF learner (learning.py) on each
 * replica's shard of the batch.
 *
 * Acme computes both losses under one gradient tape from the same
 * parameters and applies both updates after. Our tape runs backward once per
 * reset, so the step runs two passes on the replica's tape - the critic's,
 * then the policy's with the critic frozen - and steps both optimizers only
 * after both: the policy's loss sees the critic before its update, as in
 * Acme. Freezing keeps the policy pass out of the critic's gradients, its
 * all-reduce buckets and its Adam state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_internal.h"

/* ---- gradient clipping after the all-reduce: a `before` hook on each replica optimizer ---- */

static rp_status clip_before(rp_optimizer *opt, void *ctx)
{
    (void)opt;
    d4pg_clip *c = ctx;
    c->norm = 0;
    if (c->max_norm <= 0) return RP_OK;
    return rp_clip_grad_norm(c->params, c->max_norm, &c->norm);
}

rp_status d4pg_target_update(rp_d4pg_learner *L)
{
    if (L->steps % L->cfg.target_update_period) return RP_OK;
    RP_CHECK(rp_params_copy_values(L->target_policy->params, L->policy->params));
    return rp_params_copy_values(L->target_critic.params, L->critic.params);
}

static rp_status policy_new(rp_d4pg_policy **p, const rp_d4pg_config *cfg, uint64_t seed)
{
    *p = calloc(1, sizeof **p);
    if (!*p) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a D4PG policy");
    return d4pg_policy_build(*p, cfg, seed);
}

rp_status rp_d4pg_learner_create(rp_replica *rep, rp_d4pg_learner **out, const rp_d4pg_config *cfg,
                                 uint64_t seed)
{
    if (!rep || !out) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_create: NULL argument");
    *out = NULL;
    RP_CHECK(rp_d4pg_config_check(cfg));
    rp_status status = RP_OK;
    rp_d4pg_learner *L = calloc(1, sizeof *L);
    if (!L) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a D4PG learner");
    L->cfg = *cfg;
    RP_TRY(policy_new(&L->policy, cfg, seed));
    RP_TRY(policy_new(&L->target_policy, cfg, seed));
    RP_TRY(d4pg_critic_build(&L->critic, cfg, seed));
    RP_TRY(d4pg_critic_build(&L->target_critic, cfg, seed));
    /* The targets are constants in every pass: no gradient, no all-reduce. */
    rp_params_set_frozen(L->target_policy->params, true);
    rp_params_set_frozen(L->target_critic.params, true);
    L->support = malloc((size_t)cfg->atoms * sizeof(float));
    if (!L->support) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d atoms", cfg->atoms);
        goto cleanup;
    }
    double dz = ((double)cfg->v_max - cfg->v_min) / (cfg->atoms - 1);
    for (int i = 0; i < cfg->atoms; i++)
        L->support[i] = (float)(cfg->v_min + i * dz);

    /* Sonnet's Adam: beta1 0.9, beta2 0.999, epsilon 1e-8, bias-corrected as torch's. */
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    oc.momentum = 0;
    oc.beta1 = 0.9f;
    oc.beta2 = 0.999f;
    oc.eps = 1e-8f;
    RP_TRY(rp_replica_optimizer_create(rep, &L->opt_policy, L->policy->params, &oc));
    RP_TRY(rp_replica_optimizer_create(rep, &L->opt_critic, L->critic.params, &oc));
    L->clip_policy = (d4pg_clip){L->policy->params, cfg->clip_grad_norm, 0};
    L->clip_critic = (d4pg_clip){L->critic.params, cfg->clip_grad_norm, 0};
    /* Added after the runtime's hooks, so they see the all-reduced gradients. */
    rp_optimizer_hooks h = {.before = clip_before};
    RP_TRY(rp_optimizer_add_hooks(L->opt_policy, &h, &L->clip_policy));
    RP_TRY(rp_optimizer_add_hooks(L->opt_critic, &h, &L->clip_critic));
    /* The optimizers broadcast replica 0's values; the targets copy them (step 0 does it again). */
    RP_TRY(rp_params_copy_values(L->target_policy->params, L->policy->params));
    RP_TRY(rp_params_copy_values(L->target_critic.params, L->critic.params));
    *out = L;
    return RP_OK;
cleanup:
    rp_d4pg_learner_destroy(L);
    return status;
}

void rp_d4pg_learner_destroy(rp_d4pg_learner *L)
{
    if (!L) return;
    rp_optimizer_destroy(L->opt_policy);
    rp_optimizer_destroy(L->opt_critic);
    rp_d4pg_policy_destroy(L->policy);
    rp_d4pg_policy_destroy(L->target_policy);
    d4pg_critic_free(&L->critic);
    d4pg_critic_free(&L->target_critic);
    free(L->support);
    free(L);
}

/* ---- the critic pass ------------------------------------------------------------ */

/* Softmax of each row of p [rows, k], in place. */
static void softmax_rows(float *p, int rows, int k)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = p + (int64_t)r * k;
        float *pr = p + (int64_t)r * k;
        float m = xr[0];
        for (int i = 1; i < k; i++)
            m = xr[i] > m ? xr[i] : m;
        double s = 0;
        for (int i = 0; i < k; i++) {
            pr[i] = expf(xr[i] - m);
            s += pr[i];
        }
        float inv = (float)(1.0 / s);
        for (int i = 0; i < k; i++)
            pr[i] *= inv;
    }
}

rp_status d4pg_critic_pass(rp_tape *t, rp_d4pg_learner *L, const rp_d4pg_batch *b, bool backward,
                           double *loss, float *priorities)
{
    const rp_d4pg_config *c = &L->cfg;
    const int n = b->n;
    rp_tape_reset(t);

    /* The target distribution: target policy and critic at next_obs, no gradient. */
    rp_tape_set_recording(t, false);
    rp_tensor *next_obs = rp_tensor_from(t, 2, (int[]){n, c->obs_dim}, b->next_obs);
    rp_tensor *next_act = d4pg_policy_forward(t, L->target_policy, next_obs);
    rp_tensor *next_logits = d4pg_critic_forward(t, &L->target_critic, next_obs, next_act);
    rp_tape_set_recording(t, true);
    /* The softmax and the projection run on the host, over the logits read back; the target is
       a leaf made from the result. */
    size_t values = (size_t)n * (size_t)c->atoms;
    float *probs = rp_arena_alloc(rp_tape_arena(t), values * sizeof(float));
    float *proj = rp_arena_alloc(rp_tape_arena(t), values * sizeof(float));
    if (!next_logits || !probs || !proj) return rp_last_status();
    RP_CHECK(rp_tensor_read(next_logits, probs, (int64_t)values));
    softmax_rows(probs, n, c->atoms);
    RP_CHECK(rp_d4pg_project(probs, b->reward, b->discount, n, c->atoms, c->v_min, c->v_max, proj));
    rp_tensor *target = rp_tensor_from(t, 2, (int[]){n, c->atoms}, proj);
    if (!target) return rp_last_status();

    /* Cross-entropy of the online critic at (obs, act): -sum_i m_i log softmax(logits)_i. */
    rp_tape_set_recording(t, backward);
    rp_tensor *obs = rp_tensor_from(t, 2, (int[]){n, c->obs_dim}, b->obs);
    rp_tensor *act = rp_tensor_from(t, 2, (int[]){n, c->act_dim}, b->act);
    rp_tensor *logits = d4pg_critic_forward(t, &L->critic, obs, act);
    rp_tensor *neg_ce = rp_sum_rows(t, rp_mul(t, rp_log_softmax(t, logits), target));
    rp_tensor *x = neg_ce;
    if (b->weights) x = rp_mul(t, neg_ce, rp_tensor_from(t, 1, (int[]){n}, b->weights));
    rp_tensor *l = rp_scale(t, rp_mean(t, x), -1.0f);
    rp_tape_set_recording(t, true);
    if (!l) return rp_last_status();
    *loss = rp_item(l);
    if (priorities) {
        RP_CHECK(rp_tensor_read(neg_ce, priorities, n));
        for (int i = 0; i < n; i++)
            priorities[i] = -priorities[i];
    }
    return backward ? rp_backward(t, l) : RP_OK;
}

/* ---- the policy pass ------------------------------------------------------------ */

/*
 * Identity on the action forward. Backward, the incoming gradient is g =
 * -(1/n) dQ_i/da_i (from the loss -mean Q over the op's n rows); it becomes
 * -(1/n) clip(dQ_i/da_i), the norm of each row's dQ/da clipped to `clip` -
 * the gradient of Acme's 0.5 ||stopgrad(a + clip(dQ/da)) - a||^2, averaged.
 * Scaling g by clip / ||dQ/da|| does just that.
 */
typedef struct dqda_ctx {
    float clip;  /* 0: off */
    double loss; /* Acme's loss value, mean of 0.5 ||clip(dQ/da)||^2 */
    int clipped; /* rows clipped */
} dqda_ctx;

static rp_status dqda_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    (void)ctx;
    (void)n;
    memcpy(out->data, in[0]->data, (size_t)out->numel * sizeof(float));
    return RP_OK;
}

static rp_status dqda_backward(void *ctx, const rp_tensor *out, const float *dout,
                               rp_tensor *const *in, float *const *din, int n)
{
    (void)in;
    (void)n;
    dqda_ctx *q = ctx;
    int rows = out->shape[0], dim = out->shape[1];
    q->loss = 0;
    q->clipped = 0;
    for (int r = 0; r < rows; r++) {
        const float *g = dout + (int64_t)r * dim;
        double sq = 0;
        for (int j = 0; j < dim; j++) {
            double dqda = -(double)g[j] * rows;
            sq += dqda * dqda;
        }
        double norm = sqrt(sq), s = 1.0;
        if (q->clip > 0 && norm > q->clip) {
            s = q->clip / norm;
            q->clipped++;
        }
        q->loss += 0.5 * s * s * sq / rows;
        if (!din[0]) continue;
        float *d = din[0] + (int64_t)r * dim;
        for (int j = 0; j < dim; j++)
            d[j] += (float)(s * g[j]);
    }
    return RP_OK;
}

static const rp_custom_op dqda_op = {"d4pg_dqda_clip", dqda_forward, dqda_backward};

rp_status d4pg_policy_pass(rp_tape *t, rp_d4pg_learner *L, const rp_d4pg_batch *b, bool backward,
                           double *objective, rp_d4pg_step_stats *st)
{
    const rp_d4pg_config *c = &L->cfg;
    const int n = b->n;
    rp_status status = RP_OK;
    rp_tape_reset(t);
    rp_tape_set_recording(t, backward);
    rp_params_set_frozen(L->critic.params, true);
    dqda_ctx *q = rp_arena_calloc(rp_tape_arena(t), sizeof *q);
    rp_tensor *obs = rp_tensor_from(t, 2, (int[]){n, c->obs_dim}, b->obs);
    rp_tensor *a = d4pg_policy_forward(t, L->policy, obs);
    if (!q || !a) {
        status = rp_last_status();
        goto cleanup;
    }
    q->clip = c->dqda_clip;
    rp_tensor *a_clip = rp_custom(t, &dqda_op, q, &a, 1, 2, a->shape);
    rp_tensor *values =
        d4pg_expected_value(t, d4pg_critic_forward(t, &L->critic, obs, a_clip), L->support);
    rp_tensor *obj = rp_scale(t, rp_mean(t, values), -1.0f);
    if (!obj) {
        status = rp_last_status();
        goto cleanup;
    }
    *objective = rp_item(obj);
    if (backward) RP_TRY(rp_backward(t, obj));
    if (st) {
        st->q_mean = -*objective;
        st->policy_loss = q->loss;
        st->dqda_clipped = backward ? (double)q->clipped / n : 0;
    }
cleanup:
    rp_params_set_frozen(L->critic.params, false);
    rp_tape_set_recording(t, true);
    return status;
}

rp_status d4pg_apply(rp_d4pg_learner *L, rp_d4pg_step_stats *st)
{
    RP_CHECK(rp_optimizer_step(L->opt_critic, L->cfg.critic_lr));
    RP_CHECK(rp_optimizer_step(L->opt_policy, L->cfg.policy_lr));
    L->steps++;
    if (st) {
        st->critic_grad_norm = L->clip_critic.norm;
        st->policy_grad_norm = L->clip_policy.norm;
    }
    return RP_OK;
}

/* ---- the step ----------------------------------------------------------------- */

static rp_status batch_check(const rp_d4pg_batch *b)
{
    if (!b) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_step: NULL batch");
    if (b->n < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_step: batch n %d; at least 1", b->n);
    if (!b->obs || !b->act || !b->reward || !b->discount || !b->next_obs)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_d4pg_learner_step: NULL array in the batch (obs %p, act %p, reward %p, "
                        "discount %p, next_obs %p)",
                        (const void *)b->obs, (const void *)b->act, (const void *)b->reward,
                        (const void *)b->discount, (const void *)b->next_obs);
    return RP_OK;
}

rp_status rp_d4pg_learner_step(rp_replica *rep, rp_d4pg_learner *L, const rp_d4pg_batch *b,
                               rp_d4pg_step_stats *st)
{
    if (!rep || !L) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_step: NULL argument");
    RP_CHECK(batch_check(b));
    rp_tape *t = rp_replica_tape(rep);
    double critic_loss = 0, objective = 0;
    RP_CHECK(d4pg_target_update(L));
    RP_CHECK(d4pg_critic_pass(t, L, b, true, &critic_loss, st ? st->priorities : NULL));
    RP_CHECK(d4pg_policy_pass(t, L, b, true, &objective, st));
    RP_CHECK(d4pg_apply(L, st));
    if (st) st->critic_loss = critic_loss;
    return RP_OK;
}

int64_t rp_d4pg_learner_steps(const rp_d4pg_learner *L)
{
    return L ? L->steps : 0;
}

const rp_d4pg_config *rp_d4pg_learner_config(const rp_d4pg_learner *L)
{
    return L ? &L->cfg : NULL;
}

rp_d4pg_policy *rp_d4pg_learner_policy(const rp_d4pg_learner *L)
{
    return L ? L->policy : NULL;
}

rp_d4pg_policy *rp_d4pg_learner_target_policy(const rp_d4pg_learner *L)
{
    return L ? L->target_policy : NULL;
}

rp_params *rp_d4pg_learner_critic_params(const rp_d4pg_learner *L)
{
    return L ? L->critic.params : NULL;
}

rp_params *rp_d4pg_learner_target_critic_params(const rp_d4pg_learner *L)
{
    return L ? L->target_critic.params : NULL;
}

void rp_d4pg_learner_optimizers(const rp_d4pg_learner *L, rp_optimizer **policy,
                                rp_optimizer **critic)
{
    if (policy) *policy = L ? L->opt_policy : NULL;
    if (critic) *critic = L ? L->opt_critic : NULL;
}

rp_status rp_d4pg_learner_q(rp_d4pg_learner *L, rp_tape *t, const float *obs, const float *act,
                            int n, float *q)
{
    if (!L || !t || !obs || !act || !q)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_q: NULL argument");
    if (n < 1) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_q: n %d; at least 1", n);
    const rp_d4pg_config *c = &L->cfg;
    bool was = rp_tape_recording(t);
    rp_tape_set_recording(t, false);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){n, c->obs_dim}, obs);
    rp_tensor *a = rp_tensor_from(t, 2, (int[]){n, c->act_dim}, act);
    rp_tensor *v = d4pg_expected_value(t, d4pg_critic_forward(t, &L->critic, x, a), L->support);
    rp_tape_set_recording(t, was);
    if (!v) return rp_last_status();
    return rp_tensor_read(v, q, n);
}
