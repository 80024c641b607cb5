/*
 * env_physics.c - what the tasks (task_*.c) and env.c share: dm_control's
 * tolerance, random draws for initial states, finding named model elements,
 * one physics step, randomising limited joints, and the renderer's accessors.
 * Its own file so that env.c (the registry, which names the tasks) and the
 * tasks (which use these) do not call each other.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl/env_internal.h"

double rl_tolerance(double x, double lower, double upper, double margin, rl_tol_sigmoid sigmoid,
                    double value_at_margin)
{
    if (lower <= x && x <= upper) return 1.0;
    if (margin <= 0) return 0.0;
    double d = (x < lower ? lower - x : x - upper) / margin;
    switch (sigmoid) {
    case RP_TOL_GAUSSIAN: {
        double scale = sqrt(-2.0 * log(value_at_margin));
        return exp(-0.5 * (d * scale) * (d * scale));
    }
    case RP_TOL_LINEAR: {
        double s = d * (1.0 - value_at_margin);
        return fabs(s) < 1.0 ? 1.0 - s : 0.0;
    }
    case RP_TOL_QUADRATIC: {
        double s = d * sqrt(1.0 - value_at_margin);
        return fabs(s) < 1.0 ? 1.0 - s * s : 0.0;
    }
    }
    return 0.0;
}

double rl_uniform(rp_rng *rng, double lo, double hi)
{
    uint64_t hi27 = rp_rng_u32(rng) >> 5, lo26 = rp_rng_u32(rng) >> 6;
    double u = (double)((hi27 << 26) | lo26) * 0x1.0p-53; /* [0, 1) */
    return lo + (hi - lo) * u;
}

double rl_normal(rp_rng *rng)
{
    /* Box-Muller with u1 in (0, 1], so the log is finite; the second value is dropped, which keeps
       every draw a function of the stream position alone. */
    double u1 = 1.0 - rl_uniform(rng, 0.0, 1.0);
    double u2 = rl_uniform(rng, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

rp_status rl_env_find(const rp_rl_env *env, const char *model_name, int type, const char *name,
                      int *id)
{
    int i = mj_name2id(env->m, type, name);
    if (i < 0) {
        const char *kind = mju_type2Str(type);
        return RP_ERROR(RP_ERR_FORMAT, "%s: no %s named '%s' (task %s needs it)", model_name,
                        kind ? kind : "element", name, env->task->name);
    }
    *id = i;
    return RP_OK;
}

void rl_env_physics_step(rp_rl_env *env)
{
    const mjModel *m = env->m;
    mjData *d = env->d;
    /* dm_control's stepping: the state is always left with mj_step1 done on it, so observations
       read fresh kinematics. With Euler, mj_step2 finishes the step that mj_step1 began (together
       they are exactly mj_step); RK4 needs a whole mj_step, then mj_step1 to catch up. */
    for (int i = 0; i < env->task->n_sub_steps; i++) {
        if (m->opt.integrator == mjINT_RK4)
            mj_step(m, d);
        else
            mj_step2(m, d);
        mj_step1(m, d);
    }
}

void rl_env_randomize_joints(rp_rl_env *env, rp_rng *rng)
{
    const mjModel *m = env->m;
    for (int j = 0; j < m->njnt; j++) {
        int type = m->jnt_type[j], adr = m->jnt_qposadr[j];
        if (type != mjJNT_HINGE && type != mjJNT_SLIDE) continue;
        if (m->jnt_limited[j])
            env->d->qpos[adr] = rl_uniform(rng, m->jnt_range[2 * j], m->jnt_range[2 * j + 1]);
        else if (type == mjJNT_HINGE)
            env->d->qpos[adr] = rl_uniform(rng, -M_PI, M_PI);
    }
}

const mjModel *rl_env_mj_model(const rp_rl_env *env)
{
    return env->m;
}

mjData *rl_env_mj_data(rp_rl_env *env)
{
    return env->d;
}
