/*
 * models/d4pg/d4pg_job.h - D4PG as TF-Replicator ran it: a learner of R
 * data-parallel replicas (the trainer steps it), K actors that step their
 * own environments with a copy of the policy, and a replay server between
 * them, each a role of one job. The same code runs on threads, on MPI ranks
 * and on threads inside ranks.
 *
 * The roles, in this order (the trainer steps the first):
 *   "learner"  R workers: each step asks the replay for its shard of the
 *              batch, runs rp_d4pg_learner_step (gradients all-reduced),
 *              and replica 0 publishes the policy to the replay every
 *              publish_every steps;
 *   "actor"    K workers: envs_per_actor environments each, stepped in a
 *              batch with one policy forward; N-step transitions go to the
 *              replay, fresh policy values come back every
 *              actor_update_every env steps;
 *   "replay"   1 worker: holds the replay table, the rate limiter
 *              (samples per insert, Reverb's semantics: an actor whose
 *              insert would run too far ahead waits for its answer, a
 *              learner whose sample would run too far behind waits for its
 *              batch) and the latest policy; it counts env steps and
 *              episode returns.
 * All messages travel on the job's link communicator
 * (rp_replica_link_comm), so every wait is bounded by the timeout and a
 * worker that fails is named.
 */
#ifndef RP_MODELS_D4PG_JOB_H
#define RP_MODELS_D4PG_JOB_H

#include <replicator/env.h>
#include <replicator/replay.h>
#include <replicator/replicator.h>

#include "models/d4pg/d4pg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_d4pg_job_config {
    rp_d4pg_config agent; /* networks, losses, rates, batch, sigma, n_step, discount */
    char task[48];        /* an rp_env task, default "cartpole-swingup" */
    int action_repeat;    /* default 1 */
    int actors;           /* K, default 1 */
    int envs_per_actor;   /* default 1 */
    int learners;         /* R learner replicas, default 1 */
    int64_t env_steps;    /* the run's budget of environment steps (all actors), default 100,000 */
    int64_t min_replay;   /* transitions before the first sample, default 1,000 */
    double samples_per_insert; /* default 32 */
    double error_buffer; /* the limiter's tolerance in samples; 0: min_replay * 0.1 * spi (Acme) */
    int64_t replay_capacity; /* default 1,000,000 */
    bool prioritized;        /* prioritised replay (priority = the critic's per-sample loss) */
    int64_t
        actor_update_every; /* env steps of an actor between policy fetches, default 1,000 (Acme) */
    int64_t publish_every;  /* learner steps between policy publications, default 10 */
    int eval_episodes;      /* noise-free evaluation episodes, default 5 */
    uint64_t seed;          /* default 1 */
} rp_d4pg_job_config;

rp_d4pg_job_config rp_d4pg_job_config_default(void);

/* The learner steps that env_steps buys at samples_per_insert: (env_steps - min_replay) * spi /
 * batch, >= 1. */
int64_t rp_d4pg_job_learner_steps(const rp_d4pg_job_config *cfg);

typedef struct rp_d4pg_job rp_d4pg_job;

/*
 * Checks the configuration (RP_ERR_INVALID naming the field: an unknown
 * task lists the tasks; a limiter window too narrow for one batch or one
 * actor's insert), reads the task's observation and action sizes into
 * cfg->agent, and makes the job's context. `run_dir` is where the learning
 * curve is drawn (may be NULL: none). `resume`, if not NULL, is the
 * checkpoint the run continues (its counters and curve; borrowed during
 * the call).
 */
rp_status rp_d4pg_job_create(rp_d4pg_job **job, const rp_d4pg_job_config *cfg,
                             const rp_checkpoint *resume);
void rp_d4pg_job_destroy(rp_d4pg_job *job);
const rp_d4pg_job_config *rp_d4pg_job_get_config(const rp_d4pg_job *job);
rp_status rp_d4pg_job_set_run_dir(rp_d4pg_job *job, const char *dir);

/* The trainer's model (callbacks; ctx = the job). */
const rp_trainer_model *rp_d4pg_trainer_model(void);

/*
 * The job's roles and trainer settings into tc: runtime roles (learner x R,
 * actor x K, replay x 1), steps (rp_d4pg_job_learner_steps), batch, rate
 * unit, scalars shown. The caller sets the run directory, backend, timeout,
 * cadences.
 */
void rp_d4pg_trainer_config_apply(const rp_d4pg_job_config *cfg, rp_trainer_config *tc);

/* Evaluation returns so far (env steps, mean return), for the curve and tests. */
int rp_d4pg_job_curve(const rp_d4pg_job *job, const double **env_steps, const double **returns);

/*
 * Runs `episodes` noise-free episodes of `policy` on `task` (seeds from
 * `seed`), all at once in a batch, and returns the mean return and its
 * standard deviation (population). Errors: the environment's and the
 * policy's.
 */
rp_status rp_d4pg_evaluate_policy(rp_d4pg_policy *policy, rp_tape *t, const char *task,
                                  int action_repeat, int episodes, uint64_t seed, double *mean,
                                  double *std);

#ifdef __cplusplus
}
#endif
#endif
