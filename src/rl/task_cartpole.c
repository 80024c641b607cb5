/*
 * task_cartpole.c - a pole hinged on a cart that slides on a rail; the agent
 * pushes the cart. Swing-up starts hanging down, balance starts near upright;
 * both use the Control Suite's smooth reward (dm_control/suite/cartpole.py).
 *
 * Physics as dm_control's cartpole.xml: RK4 at 0.01 s, no contacts; a 1 kg
 * cart on a slider limited to +-1.8 m (damping 5e-4, limit solref 0.08 1), a
 * 1 m capsule pole (radius 0.045, 0.1 kg) on a hinge with damping 2e-6, and a
 * motor of gear 10 on the slider with control in [-1, 1].
 */
#include <math.h>

#include "rl/env_internal.h"

static const char cartpole_mjcf[] =
    "<mujoco model='rp-cartpole'>\n"
    " <option timestep='0.01' integrator='RK4'>\n"
    "  <flag contact='disable' energy='enable'/>\n"
    " </option>\n"
    " <worldbody>\n"
    "  <light name='top' pos='0 0 6' dir='0 0 -1'/>\n"
    "  <camera name='fixed' pos='0 -4 1' xyaxes='1 0 0 0 0 1'/>\n"
    "  <geom name='ground' type='plane' size='4 4 0.2' pos='0 0 -0.05' rgba='0.25 0.3 0.35 1'/>\n"
    "  <geom name='track_front' type='capsule' fromto='-2 -0.07 1 2 -0.07 1' size='0.02'\n"
    "        rgba='0.5 0.5 0.5 1'/>\n"
    "  <geom name='track_back' type='capsule' fromto='-2 0.07 1 2 0.07 1' size='0.02'\n"
    "        rgba='0.5 0.5 0.5 1'/>\n"
    "  <body name='cart' pos='0 0 1'>\n"
    "   <joint name='slider' type='slide' axis='1 0 0' limited='true' range='-1.8 1.8'\n"
    "          damping='5e-4' solreflimit='0.08 1'/>\n"
    "   <geom name='cart' type='box' size='0.2 0.15 0.1' mass='1' rgba='0.7 0.5 0.3 1'/>\n"
    "   <body name='pole_1'>\n"
    "    <joint name='hinge_1' type='hinge' axis='0 1 0' damping='2e-6'/>\n"
    "    <geom name='pole_1' type='capsule' fromto='0 0 0 0 0 1' size='0.045' mass='0.1'\n"
    "          rgba='0.7 0.5 0.3 1'/>\n"
    "   </body>\n"
    "  </body>\n"
    " </worldbody>\n"
    " <actuator>\n"
    "  <motor name='slide' joint='slider' gear='10' ctrllimited='true' ctrlrange='-1 1'/>\n"
    " </actuator>\n"
    "</mujoco>\n";

enum { ID_SLIDER_QPOS, ID_POLE_BODY };

static rp_status cartpole_bind(rp_rl_env *env, const char *model_name)
{
    int slider;
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_JOINT, "slider", &slider));
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_BODY, "pole_1", &env->id[ID_POLE_BODY]));
    env->id[ID_SLIDER_QPOS] = env->m->jnt_qposadr[slider];
    return RP_OK;
}

/* dm_control: cart 0.01*N(0,1), pole pi + 0.01*N(0,1) (hanging down), velocities 0.01*N(0,1). */
static void swingup_init(rp_rl_env *env, rp_rng *rng)
{
    mjData *d = env->d;
    d->qpos[0] = 0.01 * rl_normal(rng);
    d->qpos[1] = M_PI + 0.01 * rl_normal(rng);
    for (int i = 0; i < env->m->nv; i++)
        d->qvel[i] = 0.01 * rl_normal(rng);
}

/* dm_control: cart U(-0.1, 0.1), pole U(-0.034, 0.034) rad, velocities 0.01*N(0,1). */
static void balance_init(rp_rl_env *env, rp_rng *rng)
{
    mjData *d = env->d;
    d->qpos[0] = rl_uniform(rng, -0.1, 0.1);
    d->qpos[1] = rl_uniform(rng, -0.034, 0.034);
    for (int i = 0; i < env->m->nv; i++)
        d->qvel[i] = 0.01 * rl_normal(rng);
}

/* cart x, the pole's cos and sin (its frame's zz and xz), cart and pole velocity: 5 */
static void cartpole_observe(const rp_rl_env *env, float *obs)
{
    const mjData *d = env->d;
    const double *xmat = d->xmat + 9 * env->id[ID_POLE_BODY];
    obs[0] = (float)d->qpos[env->id[ID_SLIDER_QPOS]];
    obs[1] = (float)xmat[8];
    obs[2] = (float)xmat[2];
    obs[3] = (float)d->qvel[0];
    obs[4] = (float)d->qvel[1];
}

/* upright * centred * small_control * small_velocity, each factor in [0, 1]. */
static double cartpole_reward(const rp_rl_env *env, const double *ctrl)
{
    const mjData *d = env->d;
    double cos_pole = d->xmat[9 * env->id[ID_POLE_BODY] + 8];
    double upright = (cos_pole + 1.0) / 2.0;
    double centred =
        (1.0 + rl_tolerance(d->qpos[env->id[ID_SLIDER_QPOS]], 0, 0, 2.0, RP_TOL_GAUSSIAN, 0.1)) /
        2.0;
    double small_control = (4.0 + rl_tolerance(ctrl[0], 0, 0, 1.0, RP_TOL_QUADRATIC, 0.0)) / 5.0;
    double small_velocity = (1.0 + rl_tolerance(d->qvel[1], 0, 0, 5.0, RP_TOL_GAUSSIAN, 0.1)) / 2.0;
    return upright * centred * small_control * small_velocity;
}

const rl_env_task rl_task_cartpole_swingup = {
    .name = "cartpole-swingup",
    .about = "cartpole-swingup: obs 5 (cart x, pole cos/sin, 2 velocities), act 1 (cart force); "
             "reward upright*centred*small control*small velocity; starts hanging; 1000 x 0.01 s",
    .mjcf = cartpole_mjcf,
    .time_limit = 10.0,
    .n_sub_steps = 1,
    .obs_dim = 5,
    .act_dim = 1,
    .nq = 2,
    .nv = 2,
    .bind = cartpole_bind,
    .init = swingup_init,
    .observe = cartpole_observe,
    .reward = cartpole_reward,
};

const rl_env_task rl_task_cartpole_balance = {
    .name = "cartpole-balance",
    .about = "cartpole-balance: obs 5 (cart x, pole cos/sin, 2 velocities), act 1 (cart force); "
             "reward upright*centred*small control*small velocity; starts near upright; "
             "1000 x 0.01 s",
    .mjcf = cartpole_mjcf,
    .time_limit = 10.0,
    .n_sub_steps = 1,
    .obs_dim = 5,
    .act_dim = 1,
    .nq = 2,
    .nv = 2,
    .bind = cartpole_bind,
    .init = balance_init,
    .observe = cartpole_observe,
    .reward = cartpole_reward,
};
