/*
 * task_cheetah.c - a planar two-legged "half cheetah" must run forward; the
 * reward grows linearly with speed up to 10 m/s (dm_control/suite/cheetah.py).
 *
 * Physics as dm_control's cheetah.xml: Euler at 0.01 s with contacts
 * (friction 0.4 0.1 0.1, condim 3); total mass 14 kg over capsules of radius
 * 0.046; the root slides along x and z and turns about y, unlimited and
 * undamped; six leg hinges with their own ranges, stiffness and damping
 * (armature 0.1) driven by motors of gears 120, 90, 60, 90, 60, 30 with
 * control in [-1, 1]. The speed is the x component of the torso subtree's
 * linear velocity (a subtreelinvel sensor).
 */
#include <math.h>

#include "rl/env_internal.h"

static const char cheetah_mjcf[] =
    "<mujoco model='rp-cheetah'>\n"
    " <compiler settotalmass='14' angle='degree'/>\n"
    " <option timestep='0.01'/>\n"
    " <statistic center='0 0 0.7' extent='2'/>\n"
    " <default>\n"
    "  <default class='leg'>\n"
    "   <joint type='hinge' axis='0 1 0' limited='true' armature='0.1' damping='0.01'\n"
    "          stiffness='8'/>\n"
    "   <geom type='capsule' size='0.046' contype='1' conaffinity='1' condim='3'\n"
    "         friction='0.4 0.1 0.1' rgba='0.7 0.5 0.3 1'/>\n"
    "  </default>\n"
    "  <motor ctrllimited='true' ctrlrange='-1 1'/>\n"
    " </default>\n"
    " <worldbody>\n"
    "  <geom name='ground' type='plane' pos='98 0 0' size='100 1.25 0.5' conaffinity='1'\n"
    "        rgba='0.25 0.3 0.35 1'/>\n"
    "  <body name='torso' pos='0 0 0.7' childclass='leg'>\n"
    "   <light name='follow' pos='0 0 2' mode='trackcom'/>\n"
    "   <camera name='side' pos='0 -3 0' xyaxes='1 0 0 0 0 1' mode='trackcom'/>\n"
    "   <joint name='rootx' type='slide' axis='1 0 0' limited='false' armature='0' damping='0'\n"
    "          stiffness='0'/>\n"
    "   <joint name='rootz' type='slide' axis='0 0 1' limited='false' armature='0' damping='0'\n"
    "          stiffness='0'/>\n"
    "   <joint name='rooty' type='hinge' axis='0 1 0' limited='false' armature='0' damping='0'\n"
    "          stiffness='0'/>\n"
    "   <geom name='torso' fromto='-0.5 0 0 0.5 0 0'/>\n"
    "   <geom name='head' pos='0.6 0 0.1' euler='0 50 0' size='0.046 0.15'/>\n"
    "   <body name='bthigh' pos='-0.5 0 0'>\n"
    "    <joint name='bthigh' range='-30 60' stiffness='240' damping='6'/>\n"
    "    <geom name='bthigh' pos='0.1 0 -0.13' euler='0 -218 0' size='0.046 0.145'/>\n"
    "    <body name='bshin' pos='0.16 0 -0.25'>\n"
    "     <joint name='bshin' range='-50 50' stiffness='180' damping='4.5'/>\n"
    "     <geom name='bshin' pos='-0.14 0 -0.07' euler='0 -116 0' size='0.046 0.15'/>\n"
    "     <body name='bfoot' pos='-0.28 0 -0.14'>\n"
    "      <joint name='bfoot' range='-230 50' stiffness='120' damping='3'/>\n"
    "      <geom name='bfoot' pos='0.03 0 -0.097' euler='0 -15 0' size='0.046 0.094'/>\n"
    "     </body>\n"
    "    </body>\n"
    "   </body>\n"
    "   <body name='fthigh' pos='0.5 0 0'>\n"
    "    <joint name='fthigh' range='-57 0.4' stiffness='180' damping='4.5'/>\n"
    "    <geom name='fthigh' pos='-0.07 0 -0.12' euler='0 30 0' size='0.046 0.133'/>\n"
    "    <body name='fshin' pos='-0.14 0 -0.24'>\n"
    "     <joint name='fshin' range='-70 50' stiffness='120' damping='3'/>\n"
    "     <geom name='fshin' pos='0.065 0 -0.09' euler='0 -34 0' size='0.046 0.106'/>\n"
    "     <body name='ffoot' pos='0.13 0 -0.18'>\n"
    "      <joint name='ffoot' range='-28 28' stiffness='60' damping='1.5'/>\n"
    "      <geom name='ffoot' pos='0.045 0 -0.07' euler='0 -34 0' size='0.046 0.07'/>\n"
    "     </body>\n"
    "    </body>\n"
    "   </body>\n"
    "  </body>\n"
    " </worldbody>\n"
    " <sensor>\n"
    "  <subtreelinvel name='torso_subtreelinvel' body='torso'/>\n"
    " </sensor>\n"
    " <actuator>\n"
    "  <motor name='bthigh' joint='bthigh' gear='120'/>\n"
    "  <motor name='bshin' joint='bshin' gear='90'/>\n"
    "  <motor name='bfoot' joint='bfoot' gear='60'/>\n"
    "  <motor name='fthigh' joint='fthigh' gear='90'/>\n"
    "  <motor name='fshin' joint='fshin' gear='60'/>\n"
    "  <motor name='ffoot' joint='ffoot' gear='30'/>\n"
    " </actuator>\n"
    "</mujoco>\n";

#define RUN_SPEED    10.0
#define SETTLE_STEPS 200

enum { ID_SPEED_ADR };

static rp_status cheetah_bind(rp_rl_env *env, const char *model_name)
{
    int sensor;
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_SENSOR, "torso_subtreelinvel", &sensor));
    env->id[ID_SPEED_ADR] = env->m->sensor_adr[sensor];
    return RP_OK;
}

/* dm_control: every limited joint uniform in its range (the root stays at the model's pose), then
   200 physics steps without control to let the body fall and settle, then the clock at 0. */
static void cheetah_init(rp_rl_env *env, rp_rng *rng)
{
    const mjModel *m = env->m;
    for (int j = 0; j < m->njnt; j++)
        if (m->jnt_limited[j])
            env->d->qpos[m->jnt_qposadr[j]] =
                rl_uniform(rng, m->jnt_range[2 * j], m->jnt_range[2 * j + 1]);
    mj_forward(m, env->d); /* rl_env_physics_step continues from a forwarded state */
    for (int i = 0; i < SETTLE_STEPS; i++)
        rl_env_physics_step(env);
    env->d->time = 0;
}

/* qpos without the x position (8: translation invariance), qvel (9) */
static void cheetah_observe(const rp_rl_env *env, float *obs)
{
    for (int i = 1; i < 9; i++)
        obs[i - 1] = (float)env->d->qpos[i];
    for (int i = 0; i < 9; i++)
        obs[8 + i] = (float)env->d->qvel[i];
}

/* min(max(v / 10, 0), 1) as dm_control writes it: tolerance(v, [10, inf), margin 10, linear, 0). */
static double cheetah_reward(const rp_rl_env *env, const double *ctrl)
{
    (void)ctrl;
    double v = env->d->sensordata[env->id[ID_SPEED_ADR]];
    return rl_tolerance(v, RUN_SPEED, INFINITY, RUN_SPEED, RP_TOL_LINEAR, 0.0);
}

const rl_env_task rl_task_cheetah_run = {
    .name = "cheetah-run",
    .about = "cheetah-run: obs 17 (qpos without x: 8, qvel: 9), act 6 (leg torques); "
             "reward min(forward speed / 10 m/s, 1); 1000 x 0.01 s",
    .mjcf = cheetah_mjcf,
    .time_limit = 10.0,
    .n_sub_steps = 1,
    .obs_dim = 17,
    .act_dim = 6,
    .nq = 9,
    .nv = 9,
    .bind = cheetah_bind,
    .init = cheetah_init,
    .observe = cheetah_observe,
    .reward = cheetah_reward,
};
