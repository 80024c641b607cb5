/*
 * models/d4pg/d4pg.h - the D4PG agent (Barth-Maron et al. 2018) as Acme's
 * TF agent builds it: a deterministic tanh policy, a categorical
 * (distributional) critic over a fixed support of atoms, N-step targets
 * from target networks copied every target_update_period learner steps,
 * and a learner that runs data-parallel over the replicas of a role
 * (each replica trains on its shard of the batch; the gradients are
 * all-reduced, then clipped to a global norm, then applied).
 *
 * Three objects:
 *  - rp_d4pg_policy: the policy network alone, for actors (own parameter
 *    list, the same names and layout as the learner's, so the flat value
 *    block moves from learner to actor whole: rp_params_read_values on one
 *    side, rp_params_write_values or rp_params_copy_values on the other);
 *  - rp_d4pg_project(): the categorical projection of a shifted and
 *    scaled distribution onto the fixed support (plain C);
 *  - rp_d4pg_learner: online and target policy and critic, two replica
 *    optimizers (Adam), the learner step and its checkpoint.
 *
 * docs/d4pg.md gives the recipe and every departure from Acme.
 * Written against the public headers only.
 */
#ifndef RP_MODELS_D4PG_H
#define RP_MODELS_D4PG_H

#include <replicator/replicator.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_D4PG_MAX_LAYERS 4  /* hidden layers of each torso */
#define RP_D4PG_MAX_ACT    32 /* action dimensions */

typedef struct rp_d4pg_config {
    int obs_dim;                           /* set by the caller, >= 1 */
    int act_dim;                           /* set by the caller, 1..RP_D4PG_MAX_ACT */
    float act_min[RP_D4PG_MAX_ACT];        /* action bounds, default -1 */
    float act_max[RP_D4PG_MAX_ACT];        /* default 1; act_min < act_max */
    int policy_layers[RP_D4PG_MAX_LAYERS]; /* default {256, 256, 256}; 0 ends the list */
    int critic_layers[RP_D4PG_MAX_LAYERS]; /* default {512, 512, 256} */
    int atoms;                             /* 51 */
    float v_min, v_max;                    /* support [-150, 150] */
    int n_step;                            /* 5: for the caller's N-step adder (not used here) */
    float discount;                        /* 0.99: gamma, for the caller's adder (not used here) */
    int target_update_period;              /* 100 learner steps */
    float clip_grad_norm;                  /* 40: global norm of each network's gradients; 0: off */
    float dqda_clip;                       /* 1: per-sample norm of dQ/da; 0: off */
    float policy_lr, critic_lr;            /* 1e-4, 1e-4 (Adam 0.9, 0.999, 1e-8) */
    int batch;                             /* 256: the global batch (the caller's sampler) */
    float sigma;                           /* 0.3: exploration noise (the caller's actors) */
} rp_d4pg_config;

/* Acme's TF D4PG defaults; obs_dim and act_dim are 0 and must be set. */
rp_d4pg_config rp_d4pg_config_default(void);

/* RP_ERR_INVALID naming the first bad field (NULL config too). */
rp_status rp_d4pg_config_check(const rp_d4pg_config *cfg);

/* ---- the policy, for actors ---------------------------------------------------- */

typedef struct rp_d4pg_policy rp_d4pg_policy;

/*
 * Builds the policy network: LayerNormMLP(policy_layers) -> Linear(act_dim,
 * near-zero init) -> tanh -> rescaled to [act_min, act_max]. Parameters
 * "policy.*" initialised from seed 0: an actor copies the learner's values in
 * (rp_params_write_values on rp_d4pg_policy_params) before acting. *p is NULL on
 * error. Errors: rp_d4pg_config_check's, RP_ERR_NOMEM.
 */
rp_status rp_d4pg_policy_create(rp_d4pg_policy **p, const rp_d4pg_config *cfg);
void rp_d4pg_policy_destroy(rp_d4pg_policy *p); /* NULL: no-op */

/* Its parameter list (owned by the policy). */
rp_params *rp_d4pg_policy_params(const rp_d4pg_policy *p);
const rp_d4pg_config *rp_d4pg_policy_config(const rp_d4pg_policy *p);

/*
 * Actions for n observations obs [n, obs_dim] into act [n, act_dim]: the
 * network's output, then, when sigma > 0, plus N(0, sigma^2) noise per
 * element drawn from *rng (advanced) and clipped to [act_min, act_max]
 * (Acme's ClippedGaussian then ClipToSpec). No gradient: recording is off
 * during the call and restored after. The activations stay on tape `t`
 * until the caller resets it (rp_tape_reset): reset it between calls in a
 * long-running actor. Thread-safety: one thread per policy and tape; the
 * values are only read, so several tapes may share a policy if nothing
 * writes its parameters meanwhile. Errors: RP_ERR_INVALID (NULL, n < 1,
 * sigma < 0 or not finite, rng NULL with sigma > 0), the ops' errors.
 */
rp_status rp_d4pg_policy_act(rp_d4pg_policy *p, rp_tape *t, const float *obs, int n, float sigma,
                             rp_rng *rng, float *act);

/* ---- the categorical projection ------------------------------------------------ */

/*
 * For each of the B rows: the distribution p[b, :] on the support z_i =
 * v_min + i dz (dz = (v_max - v_min) / (atoms - 1)) is moved to atoms z'_i
 * = r[b] + d[b] z_i, each clipped to [v_min, v_max], and projected back on
 * the support: the mass of z'_i goes to its two neighbouring atoms in
 * proportion to closeness (all of it to one atom when z'_i lands on it).
 * out [B, atoms] (must not overlap p). The same as Acme's l2_project. Sums
 * are preserved (to float rounding). Positions are computed in double. Errors: RP_ERR_INVALID
 * (NULL, B < 1, atoms < 2, v_min >= v_max or not finite); RP_ERR_NUMERIC naming the row for a
 * reward or discount that is not finite. Thread-safe.
 */
rp_status rp_d4pg_project(const float *p, const float *r, const float *d, int B, int atoms,
                          float v_min, float v_max, float *out);

/* ---- the learner --------------------------------------------------------------- */

/*
 * A batch of N-step transitions, this replica's shard: n rows of obs
 * [n, obs_dim], act [n, act_dim], reward [n] (the discounted N-step sum),
 * discount [n] (the bootstrap factor: gamma^N, 0 after a terminal),
 * next_obs [n, obs_dim], weights [n] or NULL (all 1; prioritised replay's
 * importance weights otherwise). Only read.
 */
typedef struct rp_d4pg_batch {
    int n;
    const float *obs, *act, *reward, *discount, *next_obs;
    const float *weights;
} rp_d4pg_batch;

/*
 * What one learner step measured on this replica's shard (reduce across
 * replicas with rp_replica_report if wanted).
 *  - critic_loss: mean of weights * cross-entropy(projected target, critic);
 *  - policy_loss: Acme's value, mean of 0.5 ||clip(dQ/da)||^2 (its gradient
 *    is the deterministic policy gradient);
 *  - q_mean: mean of Q(obs, pi(obs)) under the online networks;
 *  - critic_grad_norm, policy_grad_norm: global norms of the all-reduced
 *    gradients before clipping (0 when clipping is off);
 *  - dqda_clipped: the fraction of samples whose dQ/da was clipped;
 *  - priorities: optional out [n], each sample's critic cross-entropy
 *    (unweighted), for prioritised replay; NULL to skip.
 */
typedef struct rp_d4pg_step_stats {
    double critic_loss, policy_loss, q_mean;
    double critic_grad_norm, policy_grad_norm;
    double dqda_clipped;
    float *priorities;
} rp_d4pg_step_stats;

typedef struct rp_d4pg_learner rp_d4pg_learner;

/*
 * Collective: call inside rp_replicator_run on every replica of the
 * learner's role, with the same config. Builds the online policy and critic
 * (initialised from `seed`; replica 0's values are broadcast), a replica
 * optimizer for each (Adam, policy_lr / critic_lr, betas 0.9 / 0.999, eps
 * 1e-8) with a hook that clips the all-reduced gradients to clip_grad_norm,
 * and target networks equal to the online ones. *L is NULL on error.
 * Errors: rp_d4pg_config_check's, the runtime's (collectives), RP_ERR_NOMEM.
 */
rp_status rp_d4pg_learner_create(rp_replica *rep, rp_d4pg_learner **L, const rp_d4pg_config *cfg,
                                 uint64_t seed);
/*
 * Frees the learner (its optimizers first): call inside a run or after the
 * last one, before rp_replicator_destroy (see runtime.h's teardown order).
 */
void rp_d4pg_learner_destroy(rp_d4pg_learner *L);

/*
 * Collective: one learner step on every replica, each with its shard b (the
 * same n on every replica; the batch is the union of the shards). In order:
 *  1. when steps % target_update_period == 0, the target networks are
 *     copied from the online ones (Acme: at the start of a step, so also at
 *     step 0);
 *  2. critic pass: target distribution from the target policy and target
 *     critic at next_obs, projected (rp_d4pg_project) with reward and
 *     discount; cross-entropy against the online critic at (obs, act),
 *     weighted mean; backward (the critic's gradients are all-reduced);
 *  3. policy pass, with the critic frozen: a = pi(obs), loss -mean Q(obs,
 *     a), whose gradient at a is replaced by the per-sample norm-clipped
 *     dQ/da (dqda_clip); backward into the policy only;
 *  4. both optimizers step (each clips its global norm after the
 *     all-reduce), so both losses saw the same parameters, as in Acme.
 * The replica's tape is reset (everything on it is freed). st may be NULL.
 * Errors: RP_ERR_INVALID (NULL, n < 1, a NULL array), RP_ERR_NUMERIC (a
 * non-finite gradient or reward, nothing updated), the runtime's errors.
 */
rp_status rp_d4pg_learner_step(rp_replica *rep, rp_d4pg_learner *L, const rp_d4pg_batch *b,
                               rp_d4pg_step_stats *st);

/* Learner steps taken (restored by load). */
int64_t rp_d4pg_learner_steps(const rp_d4pg_learner *L);
const rp_d4pg_config *rp_d4pg_learner_config(const rp_d4pg_learner *L);

/*
 * The networks. rp_d4pg_learner_policy: the online policy (trained);
 * rp_d4pg_learner_target_policy: the target policy, which is what Acme's
 * learner exposes to its actors ('policy' variables = the target networks),
 * and the one to broadcast to actors to follow Acme. Owned by the learner;
 * do not write their parameters. The critic lists: online and target.
 */
rp_d4pg_policy *rp_d4pg_learner_policy(const rp_d4pg_learner *L);
rp_d4pg_policy *rp_d4pg_learner_target_policy(const rp_d4pg_learner *L);
rp_params *rp_d4pg_learner_critic_params(const rp_d4pg_learner *L);
rp_params *rp_d4pg_learner_target_critic_params(const rp_d4pg_learner *L);
void rp_d4pg_learner_optimizers(const rp_d4pg_learner *L, rp_optimizer **policy,
                                rp_optimizer **critic);

/*
 * Q(obs, act) = sum_i z_i softmax(logits)_i of the online critic for n rows,
 * into q [n]; no gradient, uses tape t (the caller resets it). For
 * evaluation and tests. Errors: as rp_d4pg_policy_act.
 */
rp_status rp_d4pg_learner_q(rp_d4pg_learner *L, rp_tape *t, const float *obs, const float *act,
                            int n, float *q);

/*
 * Checkpoint: online and target networks ("d4pg/policy/", "d4pg/critic/",
 * "d4pg/target_policy/", "d4pg/target_critic/"), both optimizers' states
 * ("d4pg/opt_policy/", "d4pg/opt_critic/") and the step count
 * ("d4pg/steps"). Load is all or nothing for each part, checked before
 * anything is written (RP_ERR_SHAPE naming what does not fit); call it on
 * every replica with the same checkpoint (or on replica 0, then
 * rp_replica_broadcast_params / rp_replica_optimizer_publish). A learner
 * loaded from a checkpoint of another one after k steps continues bitwise
 * as that one would.
 */
rp_status rp_d4pg_learner_save(const rp_d4pg_learner *L, rp_checkpoint *ck);
rp_status rp_d4pg_learner_load(rp_d4pg_learner *L, const rp_checkpoint *ck);

#ifdef __cplusplus
}
#endif
#endif
