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
    int64_t env_steps;    /* the run's budget of environment steps (all actors), default 300,000 */
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

/* ---- frames of an episode ------------------------------------------------------------ */

typedef struct rp_d4pg_frames_options {
    int every;         /* render every K-th agent step (and the first and last state), default 4 */
    int width, height; /* pixels of a frame, default 320 x 240 (each 1..RP_RENDER_MAX_SIDE) */
    int action_repeat; /* the run's, default 1 */
    uint64_t seed;     /* the episode is rp_d4pg_evaluate_policy's first of this seed; 12345 */
    bool animation;    /* also DIR/episode.gif (every frame, in simulated time), default true */
} rp_d4pg_frames_options;

rp_d4pg_frames_options rp_d4pg_frames_options_default(void);

/* Frames one episode of `steps` agent steps gives at `every`: the first state, every K-th step
 * and the last step, steps / every + 1, plus 1 when every does not divide steps. */
int rp_d4pg_frames_count(int steps, int every);

/*
 * Plays ONE noise-free episode of `policy` on `task` (the same episode as
 * rp_d4pg_evaluate_policy's first with opt->seed and one episode, so the
 * return is the same) and draws it offscreen (replicator/render.h): the
 * state after the reset and after every opt->every-th agent step, and after
 * the last step. Into directory `dir` (made if missing; its parent must
 * exist):
 *   frame-NNNN.png  frame i (from 0000, RGB, width x height) shows the state
 *                   after agent step min(i * every, steps); frames of the
 *                   same name left by a longer recording are removed;
 *   contact.png     up to 16 evenly spaced frames (the first and the last
 *                   among them) in a grid of 4 columns, 2 white pixels
 *                   between and around the tiles, for a quick look;
 *   episode.gif     with opt->animation: every frame, looping, each shown
 *                   for its simulated time (every * control_dt, at least
 *                   0.02 s; the last for 1 s), each with its own 256-colour
 *                   palette (giflib's median-cut GifQuantizeBuffer).
 * Every file is written atomically (a temporary file in `dir`, renamed
 * over the name), so a reader never sees half a file. opt NULL: the
 * defaults. *episode_return gets the episode's summed reward and *frames
 * (may be NULL) the frame count.
 *
 * Errors: RP_ERR_INVALID (a NULL argument, every < 1, a bad size, a path
 * too long), RP_ERR_UNSUPPORTED (no headless GL context can be made here:
 * the message says which EGL step failed), RP_ERR_IO naming the path (the
 * directory cannot be made, a file cannot be written), RP_ERR_SHAPE (the
 * task's sizes are not the policy's), RP_ERR_BACKEND (GL or giflib
 * failed), the environment's and the policy's errors. Files written before
 * an error stay. Thread-safety: one thread per policy, tape and directory.
 */
rp_status rp_d4pg_record_frames(rp_d4pg_policy *policy, rp_tape *t, const char *task,
                                const char *dir, const rp_d4pg_frames_options *opt,
                                double *episode_return, int *frames);

#ifdef __cplusplus
}
#endif
#endif
