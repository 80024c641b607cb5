/*
 * task_point_mass.c - a mass on a plane, pushed along x and y, must reach the
 * target at the centre and stay there with little control
 * (dm_control/suite/point_mass.py, the easy task: no gain randomisation).
 *
 * Physics as dm_control's point_mass.xml: Euler at 0.02 s, no contacts; a
 * 0.3 kg sphere (radius 0.01) on two slide joints limited to +-0.29 m with
 * damping 1; each joint is driven through a fixed tendon by a motor of gear
 * 0.1, control in [-1, 1]; the target is a sphere of radius 0.015 at the
 * origin.
 */
#include <math.h>

#include "rl/env_internal.h"

static const char point_mass_mjcf[] =
    "<mujoco model='rp-point-mass'>\n"
    " <option timestep='0.02'>\n"
    "  <flag contact='disable'/>\n"
    " </option>\n"
    " <worldbody>\n"
    "  <light name='top' pos='0 0 1' dir='0 0 -1'/>\n"
    "  <camera name='fixed' pos='0 0 0.75'/>\n"
    "  <geom name='ground' type='plane' size='0.3 0.3 0.1' rgba='0.25 0.3 0.35 1'/>\n"
    "  <geom name='target' type='sphere' pos='0 0 0.01' size='0.015' contype='0' conaffinity='0'\n"
    "        rgba='0.6 0.3 0.3 1'/>\n"
    "  <body name='pointmass' pos='0 0 0.01'>\n"
    "   <joint name='root_x' type='slide' axis='1 0 0' limited='true' range='-0.29 0.29'\n"
    "          damping='1'/>\n"
    "   <joint name='root_y' type='slide' axis='0 1 0' limited='true' range='-0.29 0.29'\n"
    "          damping='1'/>\n"
    "   <geom name='pointmass' type='sphere' size='0.01' mass='0.3' rgba='0.7 0.5 0.3 1'/>\n"
    "  </body>\n"
    " </worldbody>\n"
    " <tendon>\n"
    "  <fixed name='t1'><joint joint='root_x' coef='1'/><joint joint='root_y' coef='0'/></fixed>\n"
    "  <fixed name='t2'><joint joint='root_x' coef='0'/><joint joint='root_y' coef='1'/></fixed>\n"
    " </tendon>\n"
    " <actuator>\n"
    "  <motor name='t1' tendon='t1' gear='0.1' ctrllimited='true' ctrlrange='-1 1'/>\n"
    "  <motor name='t2' tendon='t2' gear='0.1' ctrllimited='true' ctrlrange='-1 1'/>\n"
    " </actuator>\n"
    "</mujoco>\n";

enum { ID_TARGET_GEOM, ID_MASS_GEOM };

static rp_status point_mass_bind(rp_rl_env *env, const char *model_name)
{
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_GEOM, "target", &env->id[ID_TARGET_GEOM]));
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_GEOM, "pointmass", &env->id[ID_MASS_GEOM]));
    return RP_OK;
}

/* dm_control: both joints uniform in their limits, at rest. */
static void point_mass_init(rp_rl_env *env, rp_rng *rng)
{
    rl_env_randomize_joints(env, rng);
}

/* qpos (2) and qvel (2) */
static void point_mass_observe(const rp_rl_env *env, float *obs)
{
    obs[0] = (float)env->d->qpos[0];
    obs[1] = (float)env->d->qpos[1];
    obs[2] = (float)env->d->qvel[0];
    obs[3] = (float)env->d->qvel[1];
}

/* near_target * small_control: near = tolerance(distance, [0, r], margin r), r the target's radius;
   small_control = (4 + mean quadratic tolerance of the controls) / 5. */
static double point_mass_reward(const rp_rl_env *env, const double *ctrl)
{
    const double *t = env->d->geom_xpos + 3 * env->id[ID_TARGET_GEOM];
    const double *p = env->d->geom_xpos + 3 * env->id[ID_MASS_GEOM];
    double dist = sqrt((t[0] - p[0]) * (t[0] - p[0]) + (t[1] - p[1]) * (t[1] - p[1]) +
                       (t[2] - p[2]) * (t[2] - p[2]));
    double r = env->m->geom_size[3 * env->id[ID_TARGET_GEOM]];
    double near = rl_tolerance(dist, 0.0, r, r, RP_TOL_GAUSSIAN, 0.1);
    double control = (rl_tolerance(ctrl[0], 0, 0, 1.0, RP_TOL_QUADRATIC, 0.0) +
                      rl_tolerance(ctrl[1], 0, 0, 1.0, RP_TOL_QUADRATIC, 0.0)) /
                     2.0;
    return near * (4.0 + control) / 5.0;
}

const rl_env_task rl_task_point_mass_easy = {
    .name = "point_mass-easy",
    .about = "point_mass-easy: obs 4 (x, y, 2 velocities), act 2 (forces along x, y); "
             "reward near target*small control; 1000 x 0.02 s",
    .mjcf = point_mass_mjcf,
    .time_limit = 20.0,
    .n_sub_steps = 1,
    .obs_dim = 4,
    .act_dim = 2,
    .nq = 2,
    .nv = 2,
    .bind = point_mass_bind,
    .init = point_mass_init,
    .observe = point_mass_observe,
    .reward = point_mass_reward,
};
