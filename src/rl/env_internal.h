/*
 * env_internal.h - the environment's structure and the task table, shared by
 * env.c (interface, registry, stepping, tolerance) and the task_*.c files
 * (one MJCF model and its task definitions each). Not part of the public API.
 */
#ifndef RP_RL_ENV_INTERNAL_H
#define RP_RL_ENV_INTERNAL_H

#include <stdbool.h>

#include <mujoco/mujoco.h>

#include "replicator/env.h"

/* Task-specific MuJoCo ids an env looks up once, at create. */
#define RP_ENV_MAX_IDS 8

typedef struct rl_env_task rl_env_task;

struct rp_rl_env {
    const rl_env_task *task;
    int task_index;
    const mjModel *m;   /* the shared built-in model, or own_model */
    mjModel *own_model; /* loaded from options.mjcf_path (owned), else NULL */
    mjData *d;
    rp_env_spec spec;
    int action_repeat;
    int step;               /* agent steps taken in this episode */
    bool started;           /* reset (or set_state) has run */
    bool done;              /* the episode's last step has been returned */
    int id[RP_ENV_MAX_IDS]; /* filled by the task's bind() */
    double target[3];       /* reacher: the target's position this episode */
};

/*
 * A task: a model, how to start an episode, what the agent sees, and the
 * reward. Every function reads only its env, so envs are independent.
 */
struct rl_env_task {
    const char *name;
    const char *about;
    const char *mjcf;  /* the built-in model */
    double time_limit; /* seconds */
    int n_sub_steps;   /* physics steps per control step */
    int obs_dim, act_dim;
    int nq, nv; /* the sizes the observation and the initial state assume */
    /* Looks up the named elements the task uses into env->id; RP_ERR_FORMAT naming one that is
       missing (the message has the model's name in it). */
    rp_status (*bind)(rp_rl_env *env, const char *model_name);
    /* Draws the initial state after mj_resetData (qpos, qvel, episode data); may step the physics
       (cheetah settles). env.c runs mj_forward afterwards. */
    void (*init)(rp_rl_env *env, rp_rng *rng);
    /* Writes obs[obs_dim] from the current (forwarded) state. */
    void (*observe)(const rp_rl_env *env, float *obs);
    /* The reward of the current state under controls ctrl[act_dim], in [0, 1]. */
    double (*reward)(const rp_rl_env *env, const double *ctrl);
};

extern const rl_env_task rl_task_cartpole_swingup, rl_task_cartpole_balance,
    rl_task_pendulum_swingup, rl_task_point_mass_easy, rl_task_reacher_easy, rl_task_cheetah_run,
    rl_task_walker_walk;

/* ---- helpers for the tasks (env.c) ---------------------------------------- */

/* dm_control.utils.rewards' sigmoids (those the tasks use). */
typedef enum { RP_TOL_GAUSSIAN, RP_TOL_LINEAR, RP_TOL_QUADRATIC } rl_tol_sigmoid;

/*
 * dm_control's rewards.tolerance: 1 when lower <= x <= upper; else, with
 * margin > 0, sigmoid(distance to the nearest bound / margin) scaled so that it
 * equals value_at_margin at distance `margin` (0 with margin 0). Bounds may be
 * infinite. value_at_margin must lie in (0, 1) for the Gaussian, [0, 1) for
 * the others (dm_control's rule; the tasks pass constants).
 */
double rl_tolerance(double x, double lower, double upper, double margin, rl_tol_sigmoid sigmoid,
                    double value_at_margin);

/* A double uniform in [lo, hi) from 53 random bits, and a standard normal (Box-Muller). */
double rl_uniform(rp_rng *rng, double lo, double hi);
double rl_normal(rp_rng *rng);

/* The id of a named element of type `type`, or an RP_ERR_FORMAT naming it and the model. */
rp_status rl_env_find(const rp_rl_env *env, const char *model_name, int type, const char *name,
                      int *id);

/* One control step: n_sub_steps physics steps, leaving position- and velocity-dependent
   quantities (xpos, xmat, sensors) up to date for the new state, as dm_control does. */
void rl_env_physics_step(rp_rl_env *env);

/* Sets every limited hinge or slide joint uniformly in its range and every unlimited hinge
   uniformly in [-pi, pi), in joint order (dm_control's randomize_limited_and_rotational_joints
   for the planar models here, which have no ball or free joints). */
void rl_env_randomize_joints(rp_rl_env *env, rp_rng *rng);

/* ---- for the renderer ------------------------------------------------------ */

/* The env's model (shared, read-only) and its simulation state. Valid while the env lives. */
const mjModel *rl_env_mj_model(const rp_rl_env *env);
mjData *rl_env_mj_data(rp_rl_env *env);

#endif
