/*
 * task_reacher.c - a two-link planar arm must put its fingertip on a target
 * drawn anew each episode; the sparse reward is 1 while the fingertip sphere
 * touches the target sphere (dm_control/suite/reacher.py, the easy task:
 * target radius 0.05).
 *
 * Physics as dm_control's reacher.xml: Euler at 0.02 s, no contacts; two
 * capsule links of radius 0.01 (0.12 m and 0.1 m long, the fingertip sphere of
 * radius 0.01 at 0.12 m on the second; default density, 1000 kg/m^3), hinges
 * with damping 0.01, the wrist limited to +-160 degrees, motors of gear 0.05
 * with control in [-1, 1].
 *
 * dm_control moves the target by writing the model's geom position. The
 * built-in model is shared by every env, so its target is a mocap body
 * instead, positioned through each env's own mjData: the same physics (the
 * target takes no part in the dynamics) with a model that stays read-only. A
 * model loaded from a file belongs to its env, so a target that is a plain
 * world geom there (as in dm_control's XML) is moved in the model.
 */
#include <math.h>

#include "rl/env_internal.h"

static const char reacher_mjcf[] =
    "<mujoco model='rp-reacher'>\n"
    " <option timestep='0.02'>\n"
    "  <flag contact='disable'/>\n"
    " </option>\n"
    " <worldbody>\n"
    "  <light name='top' pos='0 0 1' dir='0 0 -1'/>\n"
    "  <camera name='fixed' pos='0 0 0.75'/>\n"
    "  <geom name='ground' type='plane' size='0.625 0.625 10' rgba='0.25 0.3 0.35 1'/>\n"
    "  <geom name='root' type='cylinder' fromto='0 0 0 0 0 0.02' size='0.011'\n"
    "        rgba='0.5 0.5 0.5 1'/>\n"
    "  <body name='arm' pos='0 0 0.01'>\n"
    "   <joint name='shoulder' type='hinge' axis='0 0 1' damping='0.01'/>\n"
    "   <geom name='arm' type='capsule' fromto='0 0 0 0.12 0 0' size='0.01' rgba='0.7 0.5 0.3 "
    "1'/>\n"
    "   <body name='hand' pos='0.12 0 0'>\n"
    "    <joint name='wrist' type='hinge' axis='0 0 1' damping='0.01' limited='true'\n"
    "           range='-160 160'/>\n"
    "    <geom name='hand' type='capsule' fromto='0 0 0 0.1 0 0' size='0.01'\n"
    "          rgba='0.7 0.5 0.3 1'/>\n"
    "    <body name='finger' pos='0.12 0 0'>\n"
    "     <geom name='finger' type='sphere' size='0.01' rgba='0.8 0.3 0.2 1'/>\n"
    "    </body>\n"
    "   </body>\n"
    "  </body>\n"
    "  <body name='target' mocap='true' pos='0 0 0.01'>\n"
    "   <geom name='target' type='sphere' size='0.05' contype='0' conaffinity='0'\n"
    "         rgba='0.6 0.3 0.3 0.6'/>\n"
    "  </body>\n"
    " </worldbody>\n"
    " <actuator>\n"
    "  <motor name='shoulder' joint='shoulder' gear='0.05' ctrllimited='true' ctrlrange='-1 1'/>\n"
    "  <motor name='wrist' joint='wrist' gear='0.05' ctrllimited='true' ctrlrange='-1 1'/>\n"
    " </actuator>\n"
    "</mujoco>\n";

#define TARGET_SIZE 0.05 /* easy; dm_control's hard task uses 0.015 */

enum { ID_TARGET_GEOM, ID_FINGER_GEOM, ID_TARGET_MOCAP };

static rp_status reacher_bind(rp_rl_env *env, const char *model_name)
{
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_GEOM, "target", &env->id[ID_TARGET_GEOM]));
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_GEOM, "finger", &env->id[ID_FINGER_GEOM]));
    int body = env->m->geom_bodyid[env->id[ID_TARGET_GEOM]];
    env->id[ID_TARGET_MOCAP] = env->m->body_mocapid[body];
    if (env->id[ID_TARGET_MOCAP] < 0 && (!env->own_model || body != 0))
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: the geom 'target' must be on a mocap body or on the world body",
                        model_name);
    return RP_OK;
}

/* dm_control: the joints uniform (shoulder in [-pi, pi), wrist in its limits), at rest; the
   target at angle U(0, 2 pi) and radius U(0.05, 0.2) from the shoulder. */
static void reacher_init(rp_rl_env *env, rp_rng *rng)
{
    rl_env_randomize_joints(env, rng);
    double angle = rl_uniform(rng, 0.0, 2.0 * M_PI);
    double radius = rl_uniform(rng, 0.05, 0.20);
    env->target[0] = radius * sin(angle);
    env->target[1] = radius * cos(angle);
    int g = env->id[ID_TARGET_GEOM], mocap = env->id[ID_TARGET_MOCAP];
    if (mocap >= 0) {
        env->d->mocap_pos[3 * mocap] = env->target[0];
        env->d->mocap_pos[3 * mocap + 1] = env->target[1];
    } else { /* a world geom of the env's own model (bind checked) */
        env->own_model->geom_size[3 * g] = TARGET_SIZE;
        env->own_model->geom_pos[3 * g] = env->target[0];
        env->own_model->geom_pos[3 * g + 1] = env->target[1];
    }
}

/* joint angles (2), target minus fingertip in the plane (2), joint velocities (2) */
static void reacher_observe(const rp_rl_env *env, float *obs)
{
    const double *t = env->d->geom_xpos + 3 * env->id[ID_TARGET_GEOM];
    const double *f = env->d->geom_xpos + 3 * env->id[ID_FINGER_GEOM];
    obs[0] = (float)env->d->qpos[0];
    obs[1] = (float)env->d->qpos[1];
    obs[2] = (float)(t[0] - f[0]);
    obs[3] = (float)(t[1] - f[1]);
    obs[4] = (float)env->d->qvel[0];
    obs[5] = (float)env->d->qvel[1];
}

/* 1 when the fingertip is within (target radius + fingertip radius) of the target's centre. */
static double reacher_reward(const rp_rl_env *env, const double *ctrl)
{
    (void)ctrl;
    int tg = env->id[ID_TARGET_GEOM], fg = env->id[ID_FINGER_GEOM];
    const double *t = env->d->geom_xpos + 3 * tg;
    const double *f = env->d->geom_xpos + 3 * fg;
    double dist = sqrt((t[0] - f[0]) * (t[0] - f[0]) + (t[1] - f[1]) * (t[1] - f[1]));
    double radii = env->m->geom_size[3 * tg] + env->m->geom_size[3 * fg];
    return rl_tolerance(dist, 0.0, radii, 0.0, RP_TOL_GAUSSIAN, 0.1);
}

const rl_env_task rl_task_reacher_easy = {
    .name = "reacher-easy",
    .about = "reacher-easy: obs 6 (2 joint angles, fingertip-to-target x/y, 2 velocities), "
             "act 2 (joint torques); reward 1 while touching the target, else 0; 1000 x 0.02 s",
    .mjcf = reacher_mjcf,
    .time_limit = 20.0,
    .n_sub_steps = 1,
    .obs_dim = 6,
    .act_dim = 2,
    .nq = 2,
    .nv = 2,
    .bind = reacher_bind,
    .init = reacher_init,
    .observe = reacher_observe,
    .reward = reacher_reward,
};
