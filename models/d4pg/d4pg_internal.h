/*
 * models/d4pg/d4pg_internal.h - the D4PG model's own structures and the
 * learner's phases (networks.c, learner.c, d4pg_state.c; tests/test_d4pg.c
 * drives the phases one at a time). Not part of the model's API.
 */
#ifndef RP_MODELS_D4PG_INTERNAL_H
#define RP_MODELS_D4PG_INTERNAL_H

#include "models/d4pg/d4pg.h"

/* Acme's LayerNormMLP: Linear -> LayerNorm -> tanh, then (Linear -> ELU) per remaining layer. */
typedef struct d4pg_mlp {
    rp_linear_layer lin[RP_D4PG_MAX_LAYERS];
    rp_tensor *ln_gamma, *ln_beta; /* [lin[0].out] */
    int n;                         /* layers */
    int out;                       /* width of the last */
} d4pg_mlp;

struct rp_d4pg_policy {
    rp_d4pg_config cfg;
    rp_params *params;
    d4pg_mlp torso;
    rp_linear_layer head; /* [act_dim, last width], near-zero init */
    bool rescale;         /* bounds other than [-1, 1] */
    float scale[RP_D4PG_MAX_ACT], offset[RP_D4PG_MAX_ACT];
};

typedef struct d4pg_critic {
    rp_params *params;
    d4pg_mlp torso;       /* over concat(obs, act) */
    rp_linear_layer head; /* [atoms, last width]: logits */
} d4pg_critic;

/* The `before` hook that clips a set's all-reduced gradients to a global norm. */
typedef struct d4pg_clip {
    rp_params *params;
    float max_norm;
    float norm; /* the last step's norm before clipping */
} d4pg_clip;

struct rp_d4pg_learner {
    rp_d4pg_config cfg;
    rp_d4pg_policy *policy, *target_policy;
    d4pg_critic critic, target_critic;
    rp_optimizer *opt_policy, *opt_critic;
    d4pg_clip clip_policy, clip_critic;
    float *support; /* [atoms]: z_i */
    int64_t steps;
};

/* Sonnet's LayerNorm epsilon. */
#define D4PG_LN_EPS 1e-5f

/* ---- networks.c ---- */

/* Builds a policy's parameters (finalized with `seed`) into a zeroed *p. */
rp_status d4pg_policy_build(rp_d4pg_policy *p, const rp_d4pg_config *cfg, uint64_t seed);
/* obs [n, obs_dim] -> actions [n, act_dim] in the bounds. */
rp_tensor *d4pg_policy_forward(rp_tape *t, const rp_d4pg_policy *p, rp_tensor *obs);
rp_status d4pg_critic_build(d4pg_critic *c, const rp_d4pg_config *cfg, uint64_t seed);
void d4pg_critic_free(d4pg_critic *c);
/* (obs [n, obs_dim], act [n, act_dim]) -> logits [n, atoms]. */
rp_tensor *d4pg_critic_forward(rp_tape *t, const d4pg_critic *c, rp_tensor *obs, rp_tensor *act);
/* Q = sum_i z_i softmax(logits)_i per row: [n, atoms] -> [n]; differentiable. */
rp_tensor *d4pg_expected_value(rp_tape *t, rp_tensor *logits, const float *support);
/* The uniform bound of Acme's torso initialiser, VarianceScaling(0.333, fan_out, uniform). */
float d4pg_torso_bound(int fan_out);
/* The uniform bound used for the policy's near-zero head (fan_in, scale 1e-4). */
float d4pg_policy_head_bound(int fan_in);

/* ---- learner.c: the phases of rp_d4pg_learner_step ---- */

/* Copies the online networks into the targets if steps % period == 0. */
rp_status d4pg_target_update(rp_d4pg_learner *L);
/*
 * The critic pass (tape reset first): *loss = weighted mean cross-entropy;
 * backward into the critic's gradients when `backward`.
 */
rp_status d4pg_critic_pass(rp_tape *t, rp_d4pg_learner *L, const rp_d4pg_batch *b, bool backward,
                           double *loss, float *priorities);
/*
 * The policy pass (tape reset first), critic frozen: *objective = -mean Q(obs,
 * pi(obs)); backward with dQ/da clipped into the policy's gradients when
 * `backward`. st (may be NULL) receives policy_loss, q_mean, dqda_clipped.
 */
rp_status d4pg_policy_pass(rp_tape *t, rp_d4pg_learner *L, const rp_d4pg_batch *b, bool backward,
                           double *objective, rp_d4pg_step_stats *st);
/* Steps the critic's optimizer, then the policy's; counts the step. */
rp_status d4pg_apply(rp_d4pg_learner *L, rp_d4pg_step_stats *st);

#endif
