/*
 * replicator/env.h - reinforcement-learning environments: continuous-control
 * tasks simulated with MuJoCo, defined as in DeepMind's Control Suite
 * (dm_control/suite): the same physics parameters, initial-state
 * distributions, observations, time limits and [0, 1] rewards. The models
 * are the project's own MJCF, compiled into the library; docs/environments.md
 * gives every task's definition and each departure from dm_control.
 *
 * Tasks: cartpole-swingup, cartpole-balance, pendulum-swingup,
 * point_mass-easy, reacher-easy, cheetah-run, walker-walk
 * (rp_env_task_name() lists them).
 *
 * An episode: rp_env_reset(seed) draws the initial state from the task's
 * distribution with the project's Philox generator, from `seed` alone; then
 * rp_env_step() applies one action for `action_repeat` control steps (each
 * control step is the task's physics steps: 1, or 10 for walker) and returns
 * the summed reward. After episode_steps agent steps the result has
 * last = true: a time-limit truncation, so discount stays 1 (none of these
 * tasks has a true terminal state). Rewards are each in [0, 1] per control
 * step, so a step's reward is in [0, action_repeat].
 *
 * Determinism: the same task, options, seed and actions give bitwise the same
 * observations and rewards, on any thread (MuJoCo runs single-threaded here).
 *
 * Observations are float (the physics is double); actions are float and are
 * clipped to [act_min, act_max] before they reach the simulator.
 *
 * Thread-safety: an env is used by one thread at a time; different envs may
 * run concurrently. Envs of the same built-in task share one compiled,
 * read-only MuJoCo model (created on first use, kept until the process
 * exits); each env has its own simulation state.
 *
 * These functions live in libreplicator-envs (pkg-config replicator-envs, CMake replicator::envs),
 * not in the core library: a program that does not use them links no MuJoCo or EGL.
 */
#ifndef REPLICATOR_ENV_H
#define REPLICATOR_ENV_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RP_ENV_MAX_OBS 64
#define RP_ENV_MAX_ACT 16

/* An environment instance. (Named rp_rl_env because core.h's rp_env is the process's
   environment variables.) */
typedef struct rp_rl_env rp_rl_env;

/* What an env looks like to an agent. Valid for the env's lifetime. */
typedef struct rp_env_spec {
    const char *task; /* "cartpole-swingup" */
    int obs_dim, act_dim;
    float act_min[RP_ENV_MAX_ACT], act_max[RP_ENV_MAX_ACT]; /* -1..1 for these tasks */
    /* Agent steps per episode: the task's time limit / (physics dt * physics steps per control
       step * action_repeat), rounded up (1000 for every task with action_repeat 1). */
    int episode_steps;
    double control_dt; /* seconds of simulated time per agent step */
} rp_env_spec;

typedef struct rp_env_options {
    int action_repeat; /* control steps per agent step, rewards summed; default 1 */
    /* NULL: the built-in model. Else an MJCF file loaded instead; it must have the names and
       sizes the task uses (joints, actuators, geoms, sensors: docs/environments.md lists them),
       e.g. dm_control's own XML for the task. */
    const char *mjcf_path;
} rp_env_options;

/* action_repeat 1, mjcf_path NULL. */
RP_API rp_env_options rp_env_options_default(void);

/*
 * Creates an env of `task` (opt NULL: the defaults). The env must be reset
 * before its first step. Errors: RP_ERR_INVALID for a NULL argument, an
 * unknown task (the message lists the tasks) or action_repeat < 1;
 * RP_ERR_IO for an mjcf_path that cannot be opened; RP_ERR_FORMAT naming the
 * file and MuJoCo's message for an MJCF that does not compile, or naming the
 * element the task needs that the file lacks; RP_ERR_NOMEM.
 */
RP_API rp_status rp_env_create(rp_rl_env **env, const char *task, const rp_env_options *opt);

/* Frees the env (NULL is fine). */
RP_API void rp_env_destroy(rp_rl_env *env);

/* The env's spec, owned by the env. */
RP_API const rp_env_spec *rp_env_get_spec(const rp_rl_env *env);

/*
 * Starts an episode from the task's initial-state distribution, drawn from
 * `seed` alone (same seed, same episode), and writes the first observation
 * to obs[obs_dim]. Errors: RP_ERR_INVALID for NULL arguments.
 */
RP_API rp_status rp_env_reset(rp_rl_env *env, uint64_t seed, float *obs);

typedef struct rp_env_step_result {
    float reward;   /* summed over the action repeat; in [0, action_repeat] */
    float discount; /* 1; 0 only on a true terminal (none of these tasks has one) */
    bool last;      /* the episode ended (the time limit: a truncation, discount stays 1) */
} rp_env_step_result;

/*
 * Applies action[act_dim] (clipped to the spec's bounds), advances the
 * simulation by one agent step, and writes the observation to obs[obs_dim]
 * and the reward to *res. Errors: RP_ERR_INVALID for NULL arguments, an env
 * not yet reset, or a step after `last` without a reset; RP_ERR_SHAPE if
 * act_dim differs from the spec's; RP_ERR_NUMERIC for a NaN or infinite
 * action (naming its index) or when the simulation diverges (MuJoCo's
 * bad-acceleration warning; the episode must then be reset). Nothing is
 * changed on an input error.
 */
RP_API rp_status rp_env_step(rp_rl_env *env, const float *action, int act_dim, float *obs,
                             rp_env_step_result *res);

/* The number of built-in tasks. */
RP_API int rp_env_task_count(void);
/* Task i's name, NULL out of range. */
RP_API const char *rp_env_task_name(int i);
/* One line on task i: observation and action sizes, reward, time (e.g. for `replicator info`);
   NULL out of range. */
RP_API const char *rp_env_task_about(int i);

/*
 * Sets the physics state (qpos[nq], qvel[nv], in MuJoCo's order for the
 * task's model) and writes the observation (obs may be NULL): for tests and
 * tools. The episode's step count is unchanged (an env never reset starts an
 * episode at step 0), and the task's episode data (reacher's target) stays
 * as the last reset drew it. Errors: RP_ERR_INVALID for NULL state arrays,
 * RP_ERR_SHAPE if nq or nv differs from the model's, RP_ERR_NUMERIC for a
 * non-finite value.
 */
RP_API rp_status rp_env_set_state(rp_rl_env *env, const double *qpos, int nq, const double *qvel,
                                  int nv, float *obs);

/*
 * The reward of the current state with `action` (clipped like a step's): what
 * the reward formula gives for this state and control, before any physics
 * step. For tests and tools. Errors as rp_env_step's for the action.
 */
RP_API rp_status rp_env_reward(const rp_rl_env *env, const float *action, int act_dim,
                               float *reward);

#ifdef __cplusplus
}
#endif

#endif
