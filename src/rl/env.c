/*
 * env.c - the environment interface: the task registry, model loading (the
 * built-in MJCF through MuJoCo's virtual file system, or a user's file),
 * episodes and stepping. The helpers the tasks share (tolerance, random
 * draws, names, physics steps) are in env_physics.c, so the tasks and this
 * file never call each other.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/env_internal.h"

static const rl_env_task *const tasks[] = {
    &rl_task_cartpole_swingup, &rl_task_cartpole_balance, &rl_task_pendulum_swingup,
    &rl_task_point_mass_easy,  &rl_task_reacher_easy,     &rl_task_cheetah_run,
    &rl_task_walker_walk,
};
#define NTASKS ((int)(sizeof tasks / sizeof tasks[0]))

/*
 * One compiled model per built-in task, made on first use and kept for the
 * process's life: envs only read it, so actors on many threads share it. The
 * mutex also serialises every MJCF compile, since MuJoCo's compiler is not
 * documented as thread-safe.
 */
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static mjModel *shared_model[NTASKS];

int rp_env_task_count(void)
{
    return NTASKS;
}

const char *rp_env_task_name(int i)
{
    return i >= 0 && i < NTASKS ? tasks[i]->name : NULL;
}

const char *rp_env_task_about(int i)
{
    return i >= 0 && i < NTASKS ? tasks[i]->about : NULL;
}

rp_env_options rp_env_options_default(void)
{
    rp_env_options o = {.action_repeat = 1, .mjcf_path = NULL};
    return o;
}

/* ---- models ------------------------------------------------------------------ */

/* Compiles an MJCF text held in memory: MuJoCo 2.2 loads from a file name only, so the text goes
   into a virtual file system (2 MB of names and pointers: on the heap) under `name`. */
static rp_status load_builtin(const rl_env_task *t, mjModel **out)
{
    char err[1024] = "";
    char name[64];
    snprintf(name, sizeof name, "%s.xml", t->name);
    mjVFS *vfs = malloc(sizeof *vfs);
    if (!vfs) return RP_ERROR(RP_ERR_NOMEM, "no memory for MuJoCo's VFS (%zu bytes)", sizeof *vfs);
    mj_defaultVFS(vfs);
    size_t len = strlen(t->mjcf);
    int rc = mj_makeEmptyFileVFS(vfs, name, (int)len);
    int idx = rc == 0 ? mj_findFileVFS(vfs, name) : -1;
    if (idx < 0) {
        mj_deleteVFS(vfs);
        free(vfs);
        return RP_ERROR(RP_ERR_BACKEND, "MuJoCo's VFS refused %s (code %d)", name, rc);
    }
    memcpy(vfs->filedata[idx], t->mjcf, len);
    mjModel *m = mj_loadXML(name, vfs, err, sizeof err);
    mj_deleteVFS(vfs);
    free(vfs);
    if (!m) return RP_ERROR(RP_ERR_BACKEND, "built-in model %s: MuJoCo: %s", name, err);
    *out = m;
    return RP_OK;
}

static rp_status load_file(const char *path, mjModel **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return RP_ERROR(RP_ERR_IO, "cannot open MJCF file %s: %s", path, strerror(errno));
    fclose(f);
    char err[1024] = "";
    mjModel *m = mj_loadXML(path, NULL, err, sizeof err);
    if (!m) return RP_ERROR(RP_ERR_FORMAT, "MJCF file %s: MuJoCo: %s", path, err[0] ? err : "?");
    *out = m;
    return RP_OK;
}

static rp_status get_model(rp_rl_env *env, const char *path)
{
    rp_status status = RP_OK;
    pthread_mutex_lock(&model_lock);
    if (path) {
        status = load_file(path, &env->own_model);
        env->m = env->own_model;
    } else {
        if (!shared_model[env->task_index])
            status = load_builtin(env->task, &shared_model[env->task_index]);
        env->m = shared_model[env->task_index];
    }
    pthread_mutex_unlock(&model_lock);
    return status;
}

/* The sizes the task's observation and initial state are written for. */
static rp_status check_model(const rp_rl_env *env, const char *model_name)
{
    const rl_env_task *t = env->task;
    const mjModel *m = env->m;
    if (m->nq != t->nq || m->nv != t->nv || m->nu != t->act_dim)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: task %s needs nq=%d nv=%d nu=%d, the model has nq=%d nv=%d nu=%d",
                        model_name, t->name, t->nq, t->nv, t->act_dim, m->nq, m->nv, m->nu);
    return RP_OK;
}

rp_status rp_env_create(rp_rl_env **out, const char *task, const rp_env_options *opt)
{
    if (!out || !task) return RP_ERROR(RP_ERR_INVALID, "rp_env_create: NULL env or task");
    *out = NULL;
    rp_env_options o = opt ? *opt : rp_env_options_default();
    int ti = -1;
    for (int i = 0; i < NTASKS; i++)
        if (strcmp(tasks[i]->name, task) == 0) ti = i;
    if (ti < 0) {
        char list[512] = "";
        for (int i = 0; i < NTASKS; i++) {
            strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, tasks[i]->name, sizeof list - strlen(list) - 1);
        }
        return RP_ERROR(RP_ERR_INVALID, "unknown task '%s'; the tasks are: %s", task, list);
    }
    if (o.action_repeat < 1)
        return RP_ERROR(RP_ERR_INVALID, "action_repeat is %d, must be >= 1", o.action_repeat);

    rp_status status = RP_OK;
    rp_rl_env *env = calloc(1, sizeof *env);
    if (!env) return RP_ERROR(RP_ERR_NOMEM, "no memory for an env");
    env->task = tasks[ti];
    env->task_index = ti;
    env->action_repeat = o.action_repeat;
    const char *model_name = o.mjcf_path ? o.mjcf_path : "built-in model";
    RP_TRY(get_model(env, o.mjcf_path));
    RP_TRY(check_model(env, model_name));
    RP_TRY(env->task->bind(env, model_name));
    env->d = mj_makeData(env->m);
    if (!env->d) {
        status = RP_ERROR(RP_ERR_NOMEM, "MuJoCo could not make the simulation data of %s", task);
        goto cleanup;
    }
    mj_resetData(env->m, env->d);
    mj_forward(env->m, env->d);

    rp_env_spec *s = &env->spec;
    s->task = env->task->name;
    s->obs_dim = env->task->obs_dim;
    s->act_dim = env->task->act_dim;
    for (int i = 0; i < s->act_dim; i++) {
        bool limited = env->m->actuator_ctrllimited[i];
        s->act_min[i] = limited ? (float)env->m->actuator_ctrlrange[2 * i] : -1.0f;
        s->act_max[i] = limited ? (float)env->m->actuator_ctrlrange[2 * i + 1] : 1.0f;
    }
    s->control_dt = env->m->opt.timestep * env->task->n_sub_steps * env->action_repeat;
    /* ceil, less a hair, so that 10 s / 0.01 s is 1000 and not 1001 when the quotient rounds up */
    s->episode_steps = (int)ceil(env->task->time_limit / s->control_dt - 1e-9);
    *out = env;
    return RP_OK;
cleanup:
    rp_env_destroy(env);
    return status;
}

void rp_env_destroy(rp_rl_env *env)
{
    if (!env) return;
    if (env->d) mj_deleteData(env->d);
    if (env->own_model) mj_deleteModel(env->own_model);
    free(env);
}

const rp_env_spec *rp_env_get_spec(const rp_rl_env *env)
{
    return env ? &env->spec : NULL;
}

/* ---- episodes --------------------------------------------------------------- */

rp_status rp_env_reset(rp_rl_env *env, uint64_t seed, float *obs)
{
    if (!env || !obs) return RP_ERROR(RP_ERR_INVALID, "rp_env_reset: NULL env or obs");
    /* The stream id separates tasks, so one seed does not give correlated starts across tasks. */
    rp_rng rng = rp_rng_make(seed, rp_hash_str(0, env->task->name));
    mj_resetData(env->m, env->d);
    env->task->init(env, &rng);
    mj_forward(env->m, env->d);
    env->step = 0;
    env->started = true;
    env->done = false;
    env->task->observe(env, obs);
    return RP_OK;
}

/* Checks an action against the spec and writes it, clipped, to ctrl[act_dim]. */
static rp_status clip_action(const rp_rl_env *env, const float *action, int act_dim, double *ctrl)
{
    const rp_env_spec *s = &env->spec;
    if (!action) return RP_ERROR(RP_ERR_INVALID, "%s: NULL action", s->task);
    if (act_dim != s->act_dim)
        return RP_ERROR(RP_ERR_SHAPE, "%s: action has %d values, the task takes %d", s->task,
                        act_dim, s->act_dim);
    for (int i = 0; i < act_dim; i++) {
        float a = action[i];
        if (!isfinite(a))
            return RP_ERROR(RP_ERR_NUMERIC, "%s: action[%d] is %g", s->task, i, (double)a);
        ctrl[i] = a < s->act_min[i] ? s->act_min[i] : a > s->act_max[i] ? s->act_max[i] : a;
    }
    return RP_OK;
}

rp_status rp_env_step(rp_rl_env *env, const float *action, int act_dim, float *obs,
                      rp_env_step_result *res)
{
    if (!env || !obs || !res) return RP_ERROR(RP_ERR_INVALID, "rp_env_step: NULL env, obs or res");
    if (!env->started)
        return RP_ERROR(RP_ERR_INVALID, "%s: step before the first rp_env_reset", env->spec.task);
    if (env->done)
        return RP_ERROR(RP_ERR_INVALID,
                        "%s: step after the episode's last step (%d) without rp_env_reset",
                        env->spec.task, env->step);
    double ctrl[RP_ENV_MAX_ACT];
    RP_CHECK(clip_action(env, action, act_dim, ctrl));

    mjData *d = env->d;
    int bad_before = d->warning[mjWARN_BADQACC].number + d->warning[mjWARN_BADQPOS].number +
                     d->warning[mjWARN_BADQVEL].number;
    memcpy(d->ctrl, ctrl, sizeof(double) * (size_t)act_dim);
    double reward = 0.0;
    for (int r = 0; r < env->action_repeat; r++) {
        rl_env_physics_step(env);
        reward += env->task->reward(env, d->ctrl);
    }
    int bad_after = d->warning[mjWARN_BADQACC].number + d->warning[mjWARN_BADQPOS].number +
                    d->warning[mjWARN_BADQVEL].number;
    if (bad_after != bad_before) {
        /* MuJoCo has reset the state; the episode cannot continue honestly. */
        env->done = true;
        return RP_ERROR(RP_ERR_NUMERIC, "%s: the simulation diverged at step %d (MuJoCo reset it)",
                        env->spec.task, env->step);
    }
    env->step++;
    env->done = env->step >= env->spec.episode_steps;
    env->task->observe(env, obs);
    res->reward = (float)reward;
    res->discount = 1.0f;
    res->last = env->done;
    return RP_OK;
}

rp_status rp_env_set_state(rp_rl_env *env, const double *qpos, int nq, const double *qvel, int nv,
                           float *obs)
{
    if (!env || !qpos || !qvel)
        return RP_ERROR(RP_ERR_INVALID, "rp_env_set_state: NULL env, qpos or qvel");
    const mjModel *m = env->m;
    if (nq != m->nq || nv != m->nv)
        return RP_ERROR(RP_ERR_SHAPE, "%s: state has nq=%d nv=%d, the model has nq=%d nv=%d",
                        env->spec.task, nq, nv, m->nq, m->nv);
    for (int i = 0; i < nq + nv; i++) {
        double v = i < nq ? qpos[i] : qvel[i - nq];
        if (!isfinite(v))
            return RP_ERROR(RP_ERR_NUMERIC, "%s: %s[%d] is %g", env->spec.task,
                            i < nq ? "qpos" : "qvel", i < nq ? i : i - nq, v);
    }
    memcpy(env->d->qpos, qpos, sizeof(double) * (size_t)nq);
    memcpy(env->d->qvel, qvel, sizeof(double) * (size_t)nv);
    mj_forward(m, env->d);
    if (!env->started) {
        env->started = true;
        env->step = 0;
        env->done = false;
    }
    if (obs) env->task->observe(env, obs);
    return RP_OK;
}

rp_status rp_env_reward(const rp_rl_env *env, const float *action, int act_dim, float *reward)
{
    if (!env || !reward) return RP_ERROR(RP_ERR_INVALID, "rp_env_reward: NULL env or reward");
    double ctrl[RP_ENV_MAX_ACT];
    RP_CHECK(clip_action(env, action, act_dim, ctrl));
    *reward = (float)env->task->reward(env, ctrl);
    return RP_OK;
}
