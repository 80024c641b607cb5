/*
 * task_pendulum.c - a pendulum driven by a weak torque: it must be pumped to
 * swing up, then held within 8 degrees of upright, where the sparse reward is
 * 1 (dm_control/suite/pendulum.py).
 *
 * Physics as dm_control's pendulum.xml: Euler at 0.02 s, no contacts; a 1 kg
 * sphere (radius 0.05) 0.5 m from a hinge with damping 0.1, on a massless rod,
 * driven by a motor of gear 1 with control in [-1, 1].
 */
#include <math.h>

#include "rl/env_internal.h"

static const char pendulum_mjcf[] =
    "<mujoco model='rp-pendulum'>\n"
    " <option timestep='0.02'>\n"
    "  <flag contact='disable' energy='enable'/>\n"
    " </option>\n"
    " <worldbody>\n"
    "  <light name='top' pos='0 0 2' dir='0 0 -1'/>\n"
    "  <camera name='fixed' pos='0 -1.5 2' xyaxes='1 0 0 0 1 1'/>\n"
    "  <geom name='ground' type='plane' size='2.5 2.5 0.2' rgba='0.25 0.3 0.35 1'/>\n"
    "  <body name='pole' pos='0 0 0.6'>\n"
    "   <joint name='hinge' type='hinge' axis='0 1 0' damping='0.1'/>\n"
    "   <geom name='axle' type='cylinder' fromto='0 -0.03 0 0 0.03 0' size='0.021' mass='0'\n"
    "         rgba='0.5 0.5 0.5 1'/>\n"
    "   <geom name='rod' type='capsule' fromto='0 0 0 0 0 0.5' size='0.02' mass='0'\n"
    "         rgba='0.7 0.5 0.3 1'/>\n"
    "   <geom name='mass' type='sphere' pos='0 0 0.5' size='0.05' mass='1' rgba='0.8 0.3 0.2 1'/>\n"
    "  </body>\n"
    " </worldbody>\n"
    " <actuator>\n"
    "  <motor name='torque' joint='hinge' gear='1' ctrllimited='true' ctrlrange='-1 1'/>\n"
    " </actuator>\n"
    "</mujoco>\n";

enum { ID_POLE_BODY, ID_HINGE_DOF };

static rp_status pendulum_bind(rp_rl_env *env, const char *model_name)
{
    int hinge;
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_BODY, "pole", &env->id[ID_POLE_BODY]));
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_JOINT, "hinge", &hinge));
    env->id[ID_HINGE_DOF] = env->m->jnt_dofadr[hinge];
    return RP_OK;
}

/* dm_control: the angle uniform in [-pi, pi), at rest. */
static void pendulum_init(rp_rl_env *env, rp_rng *rng)
{
    env->d->qpos[0] = rl_uniform(rng, -M_PI, M_PI);
}

/* the pole's orientation (its frame's zz and xz) and angular velocity: 3 */
static void pendulum_observe(const rp_rl_env *env, float *obs)
{
    const double *xmat = env->d->xmat + 9 * env->id[ID_POLE_BODY];
    obs[0] = (float)xmat[8];
    obs[1] = (float)xmat[2];
    obs[2] = (float)env->d->qvel[env->id[ID_HINGE_DOF]];
}

static double pendulum_reward(const rp_rl_env *env, const double *ctrl)
{
    (void)ctrl;
    const double cos_bound = cos(8.0 * M_PI / 180.0);
    return rl_tolerance(env->d->xmat[9 * env->id[ID_POLE_BODY] + 8], cos_bound, 1.0, 0.0,
                        RP_TOL_GAUSSIAN, 0.1);
}

const rl_env_task rl_task_pendulum_swingup = {
    .name = "pendulum-swingup",
    .about = "pendulum-swingup: obs 3 (pole cos/sin, angular velocity), act 1 (torque); "
             "reward 1 within 8 degrees of upright, else 0; 1000 x 0.02 s",
    .mjcf = pendulum_mjcf,
    .time_limit = 20.0,
    .n_sub_steps = 1,
    .obs_dim = 3,
    .act_dim = 1,
    .nq = 1,
    .nv = 1,
    .bind = pendulum_bind,
    .init = pendulum_init,
    .observe = pendulum_observe,
    .reward = pendulum_reward,
};
