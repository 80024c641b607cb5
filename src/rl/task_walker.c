/*
 * task_walker.c - a planar biped must stand up and walk forward at 1 m/s or
 * more (dm_control/suite/walker.py, the walk task).
 *
 * Physics as dm_control's walker.xml: Euler at 0.0025 s, 10 physics steps per
 * control step (0.025 s), contacts with the floor only (friction 0.7 0.1 0.1);
 * capsules of default density (1000 kg/m^3): a torso (radius 0.07, half
 * length 0.3) and two legs of thigh, leg and foot; the root slides along z and
 * x and turns about y, unlimited and undamped; the six leg joints have damping
 * 0.1, armature 0.01 and soft limits (solimplimit 0 0.99 0.01), driven by
 * motors of gears 100, 50, 20 (hip, knee, ankle) with control in [-1, 1].
 */
#include <math.h>

#include "rl/env_internal.h"

#define LEG(side, y)                                                                               \
    "   <body name='" side "_thigh' pos='0 " y " -0.3'>\n"                                         \
    "    <joint name='" side "_hip' range='-20 100'/>\n"                                           \
    "    <geom name='" side "_thigh' pos='0 0 -0.225' size='0.05 0.225'/>\n"                       \
    "    <body name='" side "_leg' pos='0 0 -0.7'>\n"                                              \
    "     <joint name='" side "_knee' pos='0 0 0.25' range='-150 0'/>\n"                           \
    "     <geom name='" side "_leg' size='0.04 0.25'/>\n"                                          \
    "     <body name='" side "_foot' pos='0.06 0 -0.25'>\n"                                        \
    "      <joint name='" side "_ankle' pos='-0.06 0 0' range='-45 45'/>\n"                        \
    "      <geom name='" side "_foot' zaxis='1 0 0' size='0.05 0.1'/>\n"                           \
    "     </body>\n"                                                                               \
    "    </body>\n"                                                                                \
    "   </body>\n"

static const char walker_mjcf[] =
    "<mujoco model='rp-walker'>\n"
    " <compiler angle='degree'/>\n"
    " <option timestep='0.0025'/>\n"
    " <statistic center='0 0 1' extent='2'/>\n"
    " <default>\n"
    "  <joint limited='true' damping='0.1' armature='0.01' solimplimit='0 0.99 0.01'/>\n"
    "  <geom contype='1' conaffinity='0' friction='0.7 0.1 0.1'/>\n"
    "  <motor ctrllimited='true' ctrlrange='-1 1'/>\n"
    "  <default class='body'>\n"
    "   <joint axis='0 -1 0'/>\n"
    "   <geom type='capsule' rgba='0.7 0.5 0.3 1'/>\n"
    "  </default>\n"
    " </default>\n"
    " <worldbody>\n"
    "  <geom name='floor' type='plane' pos='248 0 0' size='250 0.8 0.2' conaffinity='1'\n"
    "        rgba='0.25 0.3 0.35 1'/>\n"
    "  <body name='torso' pos='0 0 1.3' childclass='body'>\n"
    "   <light name='follow' pos='0 0 2' mode='trackcom'/>\n"
    "   <camera name='side' pos='0 -2 0.7' xyaxes='1 0 0 0 0.5 0.866' mode='trackcom'/>\n"
    "   <joint name='rootz' type='slide' axis='0 0 1' limited='false' armature='0' damping='0'/>\n"
    "   <joint name='rootx' type='slide' axis='1 0 0' limited='false' armature='0' damping='0'/>\n"
    "   <joint name='rooty' type='hinge' axis='0 1 0' limited='false' armature='0' damping='0'/>\n"
    "   <geom name='torso' size='0.07 0.3'/>\n" LEG("right", "-0.05")
        LEG("left", "0.05") "  </body>\n"
                            " </worldbody>\n"
                            " <sensor>\n"
                            "  <subtreelinvel name='torso_subtreelinvel' body='torso'/>\n"
                            " </sensor>\n"
                            " <actuator>\n"
                            "  <motor name='right_hip' joint='right_hip' gear='100'/>\n"
                            "  <motor name='right_knee' joint='right_knee' gear='50'/>\n"
                            "  <motor name='right_ankle' joint='right_ankle' gear='20'/>\n"
                            "  <motor name='left_hip' joint='left_hip' gear='100'/>\n"
                            "  <motor name='left_knee' joint='left_knee' gear='50'/>\n"
                            "  <motor name='left_ankle' joint='left_ankle' gear='20'/>\n"
                            " </actuator>\n"
                            "</mujoco>\n";

#define STAND_HEIGHT 1.2
#define WALK_SPEED   1.0

enum { ID_TORSO_BODY, ID_SPEED_ADR };

static rp_status walker_bind(rp_rl_env *env, const char *model_name)
{
    int sensor;
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_BODY, "torso", &env->id[ID_TORSO_BODY]));
    RP_CHECK(rl_env_find(env, model_name, mjOBJ_SENSOR, "torso_subtreelinvel", &sensor));
    env->id[ID_SPEED_ADR] = env->m->sensor_adr[sensor];
    if (env->m->nbody != 8)
        return RP_ERROR(RP_ERR_FORMAT, "%s: task walker-walk needs 8 bodies (world and 7), not %d",
                        model_name, env->m->nbody);
    return RP_OK;
}

/* dm_control: the leg joints uniform in their limits and the torso's angle uniform in [-pi, pi),
   from the model's height (1.3 m), at rest: the walker falls and must get up. */
static void walker_init(rp_rl_env *env, rp_rng *rng)
{
    rl_env_randomize_joints(env, rng);
}

/* each body's orientation in the plane (xx, xz of its frame: 7 x 2), torso height, qvel (9): 24 */
static void walker_observe(const rp_rl_env *env, float *obs)
{
    const mjData *d = env->d;
    for (int b = 1; b < 8; b++) {
        obs[2 * (b - 1)] = (float)d->xmat[9 * b];
        obs[2 * (b - 1) + 1] = (float)d->xmat[9 * b + 2];
    }
    obs[14] = (float)d->xpos[3 * env->id[ID_TORSO_BODY] + 2];
    for (int i = 0; i < 9; i++)
        obs[15 + i] = (float)d->qvel[i];
}

/* stand * (5 * move + 1) / 6 with stand = (3 * standing + upright) / 4: standing is the torso's
   height against 1.2 m (Gaussian, margin 0.6), upright = (1 + torso zz) / 2, and move the forward
   speed against 1 m/s (linear, margin 0.5, 0.5 at the margin). */
static double walker_reward(const rp_rl_env *env, const double *ctrl)
{
    (void)ctrl;
    const mjData *d = env->d;
    int torso = env->id[ID_TORSO_BODY];
    double standing = rl_tolerance(d->xpos[3 * torso + 2], STAND_HEIGHT, INFINITY, STAND_HEIGHT / 2,
                                   RP_TOL_GAUSSIAN, 0.1);
    double upright = (1.0 + d->xmat[9 * torso + 8]) / 2.0;
    double stand = (3.0 * standing + upright) / 4.0;
    double move = rl_tolerance(d->sensordata[env->id[ID_SPEED_ADR]], WALK_SPEED, INFINITY,
                               WALK_SPEED / 2, RP_TOL_LINEAR, 0.5);
    return stand * (5.0 * move + 1.0) / 6.0;
}

const rl_env_task rl_task_walker_walk = {
    .name = "walker-walk",
    .about = "walker-walk: obs 24 (7 body orientations x 2, torso height, qvel 9), act 6 (hip, "
             "knee, ankle torques x 2); reward stand*(5*move+1)/6; 1000 x 0.025 s (10 x 2.5 ms)",
    .mjcf = walker_mjcf,
    .time_limit = 25.0,
    .n_sub_steps = 10,
    .obs_dim = 24,
    .act_dim = 6,
    .nq = 9,
    .nv = 9,
    .bind = walker_bind,
    .init = walker_init,
    .observe = walker_observe,
    .reward = walker_reward,
};
