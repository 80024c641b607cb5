/*
 * test_env.c - the MuJoCo control tasks: the registry, episode length and
 * truncation, observation and action sizes, clipping, determinism under a
 * seed, rewards at states whose reward is known in closed form, rewards in
 * range over random episodes, a model loaded from a file against the
 * built-in one, errors on bad input, and the tolerance function against
 * dm_control's formulas.
 *
 * Closed forms used for the expected rewards (dm_control.utils.rewards):
 * with value_at_margin v, the Gaussian sigmoid at distance d (in margins) is
 * v^(d^2), the linear one is 1 - d(1 - v) and the quadratic one
 * 1 - d^2 (1 - v), both 0 once that would go below 0.
 */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/env.h"
#include "rl/env_internal.h"

#define NT 7
static const char *const names[NT] = {"cartpole-swingup", "cartpole-balance", "pendulum-swingup",
                                      "point_mass-easy",  "reacher-easy",     "cheetah-run",
                                      "walker-walk"};
static const int obs_dims[NT] = {5, 5, 3, 4, 6, 17, 24};
static const int act_dims[NT] = {1, 1, 1, 2, 2, 6, 6};

static int group_setup(void **state)
{
    (void)state;
    return tu_tmpdir_create("env");
}

static int group_teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove();
    return 0;
}

static rp_rl_env *make(const char *task)
{
    rp_rl_env *env = NULL;
    rp_status st = rp_env_create(&env, task, NULL);
    if (st != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    return env;
}

/* Action k of a fixed random sequence, uniform in [-1.2, 1.2] so that some values are clipped. */
static void random_action(uint64_t seed, int k, int n, float *a)
{
    tu_fill(a, n, seed * 100003u + (uint64_t)k, -1.2f, 1.2f);
}

/* ---- registry, sizes, episode length ---------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    assert_int_equal(rp_env_task_count(), NT);
    for (int i = 0; i < NT; i++) {
        assert_string_equal(rp_env_task_name(i), names[i]);
        assert_non_null(strstr(rp_env_task_about(i), names[i]));
    }
    assert_null(rp_env_task_name(NT));
    assert_null(rp_env_task_name(-1));
    assert_null(rp_env_task_about(NT));
}

/* 1000 steps with last only on the 1000th, discount 1 throughout (a truncation), then a step
   without reset is refused; the spec's sizes are the documented ones. */
static void test_episode_length_and_sizes(void **state)
{
    (void)state;
    for (int t = 0; t < NT; t++) {
        rp_rl_env *env = make(names[t]);
        const rp_env_spec *s = rp_env_get_spec(env);
        assert_string_equal(s->task, names[t]);
        assert_int_equal(s->obs_dim, obs_dims[t]);
        assert_int_equal(s->act_dim, act_dims[t]);
        assert_int_equal(s->episode_steps, 1000);
        for (int i = 0; i < s->act_dim; i++) {
            assert_true(s->act_min[i] == -1.0f);
            assert_true(s->act_max[i] == 1.0f);
        }
        float obs[RP_ENV_MAX_OBS + 1], a[RP_ENV_MAX_ACT];
        obs[s->obs_dim] = 12345.0f; /* a sentinel past the documented size */
        rp_env_step_result r;
        assert_int_equal(rp_env_step(env, a, s->act_dim, obs, &r), RP_ERR_INVALID); /* no reset */
        assert_int_equal(rp_env_reset(env, 7, obs), RP_OK);
        for (int k = 1; k <= 1000; k++) {
            random_action(3, k, s->act_dim, a);
            assert_int_equal(rp_env_step(env, a, s->act_dim, obs, &r), RP_OK);
            assert_true(r.discount == 1.0f);
            if (r.last != (k == 1000)) fail_msg("%s: last=%d at step %d", names[t], r.last, k);
        }
        assert_true(obs[s->obs_dim] == 12345.0f);
        assert_int_equal(rp_env_step(env, a, s->act_dim, obs, &r), RP_ERR_INVALID);
        tu_assert_error_contains("without rp_env_reset");
        assert_int_equal(rp_env_reset(env, 8, obs), RP_OK); /* and a reset starts over */
        assert_int_equal(rp_env_step(env, a, s->act_dim, obs, &r), RP_OK);
        assert_false(r.last);
        rp_env_destroy(env);
    }
}

/* action_repeat 2 halves the episode, doubles control_dt, and sums two rewards. */
static void test_action_repeat(void **state)
{
    (void)state;
    rp_env_options o = rp_env_options_default();
    o.action_repeat = 2;
    rp_rl_env *env2, *env1 = make("cartpole-balance");
    assert_int_equal(rp_env_create(&env2, "cartpole-balance", &o), RP_OK);
    const rp_env_spec *s1 = rp_env_get_spec(env1), *s2 = rp_env_get_spec(env2);
    assert_int_equal(s2->episode_steps, 500);
    assert_true(fabs(s2->control_dt - 2 * s1->control_dt) < 1e-15);
    float o1[8], o2[8], a[1] = {0.3f};
    rp_env_step_result r1, r2, r;
    rp_env_reset(env1, 5, o1);
    rp_env_reset(env2, 5, o2);
    for (int k = 0; k < 500; k++) {
        assert_int_equal(rp_env_step(env1, a, 1, o1, &r1), RP_OK);
        assert_int_equal(rp_env_step(env1, a, 1, o1, &r), RP_OK);
        assert_int_equal(rp_env_step(env2, a, 1, o2, &r2), RP_OK);
        assert_true(r2.reward == (float)((double)r1.reward + (double)r.reward) ||
                    fabsf(r2.reward - (r1.reward + r.reward)) < 1e-6f);
        assert_memory_equal(o1, o2, sizeof(float) * 5);
        assert_int_equal(r2.last, k == 499);
    }
    assert_true(r.last);
    rp_env_destroy(env1);
    rp_env_destroy(env2);
}

/* ---- clipping and determinism ------------------------------------------------ */

static void test_actions_are_clipped(void **state)
{
    (void)state;
    for (int t = 0; t < NT; t++) {
        rp_rl_env *a = make(names[t]), *b = make(names[t]);
        int n = act_dims[t];
        float oa[RP_ENV_MAX_OBS], ob[RP_ENV_MAX_OBS], big[RP_ENV_MAX_ACT], bound[RP_ENV_MAX_ACT];
        rp_env_step_result ra, rb;
        rp_env_reset(a, 11, oa);
        rp_env_reset(b, 11, ob);
        for (int k = 0; k < 50; k++) {
            for (int i = 0; i < n; i++) {
                float sign = ((k + i) % 3 == 0) ? -1.0f : 1.0f;
                big[i] = sign * (1.5f + (float)k);
                bound[i] = sign;
            }
            assert_int_equal(rp_env_step(a, big, n, oa, &ra), RP_OK);
            assert_int_equal(rp_env_step(b, bound, n, ob, &rb), RP_OK);
            assert_memory_equal(oa, ob, sizeof(float) * (size_t)obs_dims[t]);
            assert_memory_equal(&ra.reward, &rb.reward, sizeof(float));
            /* MuJoCo clamps a limited control itself; what reaches it must already be clipped */
            for (int i = 0; i < n; i++)
                assert_true(rl_env_mj_data(a)->ctrl[i] == bound[i]);
        }
        /* and the bound itself does something: a zero action gives another trajectory */
        float zero[RP_ENV_MAX_ACT] = {0};
        rp_env_reset(b, 11, ob);
        for (int k = 0; k < 50; k++)
            rp_env_step(b, zero, n, ob, &rb);
        assert_memory_not_equal(oa, ob, sizeof(float) * (size_t)obs_dims[t]);
        rp_env_destroy(a);
        rp_env_destroy(b);
    }
}

/* Runs `steps` steps of random actions from reset(seed), writing observations and rewards. */
static void trajectory(rp_rl_env *env, uint64_t seed, int steps, float *obs, float *rew)
{
    const rp_env_spec *s = rp_env_get_spec(env);
    float a[RP_ENV_MAX_ACT];
    rp_env_step_result r;
    assert_int_equal(rp_env_reset(env, seed, obs), RP_OK);
    for (int k = 0; k < steps; k++) {
        random_action(seed, k, s->act_dim, a);
        assert_int_equal(rp_env_step(env, a, s->act_dim, obs + (size_t)(k + 1) * s->obs_dim, &r),
                         RP_OK);
        rew[k] = r.reward;
    }
}

#define TSTEPS 200
static void test_determinism(void **state)
{
    (void)state;
    static float o1[(TSTEPS + 1) * RP_ENV_MAX_OBS], o2[(TSTEPS + 1) * RP_ENV_MAX_OBS];
    float r1[TSTEPS], r2[TSTEPS];
    for (int t = 0; t < NT; t++) {
        rp_rl_env *a = make(names[t]), *b = make(names[t]);
        size_t n = (size_t)(TSTEPS + 1) * (size_t)obs_dims[t];
        trajectory(a, 42, TSTEPS, o1, r1);
        trajectory(b, 42, TSTEPS, o2, r2);
        assert_memory_equal(o1, o2, n * sizeof(float));
        assert_memory_equal(r1, r2, sizeof r1);
        /* the same env again, after other episodes: the seed alone decides */
        trajectory(b, 43, 10, o2, r2);
        trajectory(b, 42, TSTEPS, o2, r2);
        assert_memory_equal(o1, o2, n * sizeof(float));
        /* another seed starts elsewhere */
        trajectory(b, 43, TSTEPS, o2, r2);
        assert_memory_not_equal(o1, o2, (size_t)obs_dims[t] * sizeof(float));
        rp_env_destroy(a);
        rp_env_destroy(b);
    }
}

/* Two threads, one env each, sharing the model: the same trajectories as one thread alone. */
typedef struct {
    const char *task;
    float obs[(TSTEPS + 1) * RP_ENV_MAX_OBS], rew[TSTEPS];
} thread_job;

static void *thread_run(void *arg)
{
    thread_job *j = arg;
    rp_rl_env *env;
    if (rp_env_create(&env, j->task, NULL) != RP_OK) return NULL;
    trajectory(env, 9, TSTEPS, j->obs, j->rew);
    rp_env_destroy(env);
    return NULL;
}

static void test_threads_share_model(void **state)
{
    (void)state;
    static thread_job jobs[3];
    pthread_t th[2];
    for (int i = 0; i < 3; i++)
        jobs[i].task = "walker-walk";
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, thread_run, &jobs[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    thread_run(&jobs[2]);
    for (int i = 0; i < 2; i++) {
        assert_memory_equal(jobs[i].obs, jobs[2].obs, sizeof jobs[2].obs);
        assert_memory_equal(jobs[i].rew, jobs[2].rew, sizeof jobs[2].rew);
    }
}

/* The initial-state distributions: where each task starts, over many seeds. */
static void test_initial_states(void **state)
{
    (void)state;
    float obs[RP_ENV_MAX_OBS];
    double lo[4] = {1e9, 1e9, 1e9, 1e9}, hi[4] = {-1e9, -1e9, -1e9, -1e9};
    rp_rl_env *sw = make("cartpole-swingup"), *bal = make("cartpole-balance");
    rp_rl_env *pen = make("pendulum-swingup"), *pm = make("point_mass-easy");
    rp_rl_env *ch = make("cheetah-run"), *wk = make("walker-walk");
    for (uint64_t seed = 0; seed < 200; seed++) {
        rp_env_reset(sw, seed, obs); /* hanging down, near the centre, nearly at rest */
        assert_true(obs[1] < -0.998f && fabsf(obs[0]) < 0.06f && fabsf(obs[3]) < 0.06f);
        rp_env_reset(bal, seed, obs); /* near upright, cart within 0.1 m */
        assert_true(obs[1] > 0.999f && fabsf(obs[0]) <= 0.1f);
        lo[0] = fmin(lo[0], obs[0]), hi[0] = fmax(hi[0], obs[0]);
        rp_env_reset(pen, seed, obs); /* any angle: atan2(sin, cos) */
        double angle = atan2(obs[1], obs[0]);
        lo[1] = fmin(lo[1], angle), hi[1] = fmax(hi[1], angle);
        assert_true(obs[2] == 0.0f);
        rp_env_reset(pm, seed, obs); /* anywhere within the joint limits */
        assert_true(fabsf(obs[0]) <= 0.29f && fabsf(obs[1]) <= 0.29f);
        lo[2] = fmin(lo[2], obs[0]), hi[2] = fmax(hi[2], obs[0]);
        rp_env_reset(wk, seed, obs); /* torso at any angle, at 1.3 m */
        lo[3] = fmin(lo[3], obs[0]), hi[3] = fmax(hi[3], obs[0]);
        assert_true(fabsf(obs[14] - 1.3f) < 1e-6f);
    }
    assert_true(lo[0] < -0.08 && hi[0] > 0.08);
    assert_true(lo[1] < -2.9 && hi[1] > 2.9);
    assert_true(lo[2] < -0.25 && hi[2] > 0.25);
    assert_true(lo[3] < -0.9 && hi[3] > 0.9); /* cos of the torso angle spans [-1, 1] */
    /* cheetah has settled for 200 steps with the clock reset, its legs within their ranges */
    rp_env_reset(ch, 1, obs);
    const mjModel *m = rl_env_mj_model(ch);
    const mjData *d = rl_env_mj_data(ch);
    assert_true(d->time == 0.0);
    for (int j = 3; j < m->njnt; j++) {
        double q = d->qpos[m->jnt_qposadr[j]];
        assert_true(q > m->jnt_range[2 * j] - 0.05 && q < m->jnt_range[2 * j + 1] + 0.05);
    }
    assert_true(fabs(d->qvel[1]) < 0.5); /* resting on the ground, not falling */
    rp_rl_env *envs[] = {sw, bal, pen, pm, ch, wk};
    for (int i = 0; i < 6; i++)
        rp_env_destroy(envs[i]);
}

/* ---- rewards at known states ----------------------------------------------- */

static float reward_at(rp_rl_env *env, const double *qpos, const double *qvel, const float *act)
{
    const mjModel *m = rl_env_mj_model(env);
    float r;
    assert_int_equal(rp_env_set_state(env, qpos, m->nq, qvel, m->nv, NULL), RP_OK);
    assert_int_equal(rp_env_reward(env, act, rp_env_get_spec(env)->act_dim, &r), RP_OK);
    return r;
}

static void test_reward_cartpole(void **state)
{
    (void)state;
    rp_rl_env *env = make("cartpole-swingup");
    double q[2] = {0, 0}, v[2] = {0, 0};
    float zero[1] = {0}, half[1] = {0.5f};
    assert_true(fabsf(reward_at(env, q, v, zero) - 1.0f) < 1e-6f); /* upright, centred, at rest */
    q[1] = M_PI;
    assert_true(reward_at(env, q, v, zero) < 1e-6f); /* hanging down */
    /* cart at x = 1 (half a margin: centred = (1 + 0.1^0.25) / 2), pole upright, action 0.5
       (small_control = (4 + 0.75) / 5), pole turning at 2.5 rad/s (half a margin again) */
    q[0] = 1.0;
    q[1] = 0.0;
    v[1] = 2.5;
    double half_margin = pow(0.1, 0.25);
    double want = (1 + half_margin) / 2 * (4 + 0.75) / 5 * (1 + half_margin) / 2;
    assert_true(fabs(reward_at(env, q, v, half) - want) < 1e-6);
    /* the observation: x, cos, sin, velocities */
    float obs[5];
    q[1] = 0.3;
    assert_int_equal(rp_env_set_state(env, q, 2, v, 2, obs), RP_OK);
    assert_true(fabsf(obs[0] - 1.0f) < 1e-7f);
    assert_true(fabsf(obs[1] - (float)cos(0.3)) < 1e-6f);
    assert_true(fabsf(fabsf(obs[2]) - (float)sin(0.3)) < 1e-6f);
    assert_true(obs[4] == 2.5f);
    rp_env_destroy(env);
}

static void test_reward_pendulum(void **state)
{
    (void)state;
    rp_rl_env *env = make("pendulum-swingup");
    double v[1] = {0};
    float zero[1] = {0};
    const double deg = M_PI / 180;
    double angles[] = {0, 7 * deg, -7 * deg, 9 * deg, -9 * deg, M_PI};
    float want[] = {1, 1, 1, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        float r = reward_at(env, &angles[i], v, zero);
        if (r != want[i]) fail_msg("pendulum at %.1f deg: reward %g", angles[i] / deg, r);
    }
    rp_env_destroy(env);
}

static void test_reward_point_mass(void **state)
{
    (void)state;
    rp_rl_env *env = make("point_mass-easy");
    double q[2] = {0, 0}, v[2] = {0, 0};
    float zero[2] = {0, 0}, push[2] = {1, 0};
    assert_true(fabsf(reward_at(env, q, v, zero) - 1.0f) < 1e-6f);
    /* control (1, 0): mean of 0 and 1, so small_control = (4 + 0.5) / 5 */
    assert_true(fabsf(reward_at(env, q, v, push) - 0.9f) < 1e-6f);
    /* 0.0225 from the centre: half a margin (0.015) outside the target's radius */
    q[0] = 0.0225;
    assert_true(fabs(reward_at(env, q, v, zero) - pow(0.1, 0.25)) < 1e-6);
    q[0] = 0.25;
    q[1] = -0.25;
    assert_true(reward_at(env, q, v, zero) < 1e-10f); /* far away */
    rp_env_destroy(env);
}

/* Joint angles that put the fingertip of the 0.12 + 0.12 m arm at (x, y), elbow one way. */
static void reacher_ik(double x, double y, double *q)
{
    const double l = 0.12;
    double c2 = (x * x + y * y - 2 * l * l) / (2 * l * l);
    q[1] = acos(c2);
    q[0] = atan2(y, x) - atan2(l * sin(q[1]), l + l * cos(q[1]));
}

static void test_reward_reacher(void **state)
{
    (void)state;
    rp_rl_env *env = make("reacher-easy");
    float obs[6], zero[2] = {0, 0};
    for (uint64_t seed = 1; seed <= 5; seed++) {
        assert_int_equal(rp_env_reset(env, seed, obs), RP_OK);
        const mjModel *m = rl_env_mj_model(env);
        mjData *d = rl_env_mj_data(env);
        const double *t = d->geom_xpos + 3 * mj_name2id(m, mjOBJ_GEOM, "target");
        double tx = t[0], ty = t[1], r = sqrt(tx * tx + ty * ty);
        assert_true(r >= 0.05 - 1e-12 && r <= 0.2 + 1e-12);
        double q[2], v[2] = {0, 0};
        reacher_ik(tx, ty, q);
        assert_true(reward_at(env, q, v, zero) == 1.0f);
        assert_int_equal(rp_env_set_state(env, q, 2, v, 2, obs), RP_OK);
        assert_true(fabsf(obs[2]) < 1e-6f && fabsf(obs[3]) < 1e-6f);
        /* turning the shoulder by delta moves the fingertip a chord 2 r sin(delta / 2) away; the
           reward is 1 up to 0.05 + 0.01 (the two radii) and 0 beyond */
        double chords[] = {0.059, 0.061, 0.03, 0.1};
        float want[] = {1, 0, 1, 0};
        for (int i = 0; i < 4; i++) {
            double qq[2] = {q[0] + 2 * asin(chords[i] / (2 * r)), q[1]};
            float got = reward_at(env, qq, v, zero);
            if (got != want[i]) fail_msg("reacher: chord %g gives %g", chords[i], got);
        }
    }
    rp_env_destroy(env);
}

static void test_reward_cheetah(void **state)
{
    (void)state;
    rp_rl_env *env = make("cheetah-run");
    float obs[17], zero[6] = {0};
    rp_env_reset(env, 3, obs);
    const mjData *d = rl_env_mj_data(env);
    double q[9], v[9] = {0};
    memcpy(q, d->qpos, sizeof q);
    double speeds[] = {3, 7.5, 12, -2, 0};
    float want[] = {0.3f, 0.75f, 1, 0, 0};
    for (int i = 0; i < 5; i++) {
        v[0] = speeds[i]; /* the whole body slides forward: its subtree velocity is v */
        float got = reward_at(env, q, v, zero);
        if (fabsf(got - want[i]) > 1e-6f) fail_msg("cheetah at %g m/s: %g", speeds[i], got);
    }
    /* the observation leaves out x */
    q[0] = 5.0;
    assert_int_equal(rp_env_set_state(env, q, 9, v, 9, obs), RP_OK);
    for (int i = 0; i < 8; i++)
        assert_true(obs[i] == (float)q[i + 1]);
    rp_env_destroy(env);
}

static void test_reward_walker(void **state)
{
    (void)state;
    rp_rl_env *env = make("walker-walk");
    double q[9] = {0}, v[9] = {0};
    float zero[6] = {0}, obs[24];
    /* standing straight at the model's pose (torso at 1.3 m), at rest: stand = 1, move = 0 */
    assert_true(fabsf(reward_at(env, q, v, zero) - 1.0f / 6) < 1e-6f);
    assert_int_equal(rp_env_set_state(env, q, 9, v, 9, obs), RP_OK);
    assert_true(fabsf(obs[14] - 1.3f) < 1e-6f);
    assert_true(obs[0] == 1.0f && obs[1] == 0.0f); /* torso frame: xx = 1, xz = 0 */
    v[1] = 1.5;                                    /* rootx: walking faster than 1 m/s */
    assert_true(fabsf(reward_at(env, q, v, zero) - 1.0f) < 1e-6f);
    v[1] = 0.75; /* half a margin short: move = 1 - 0.5 * 0.5 */
    assert_true(fabsf(reward_at(env, q, v, zero) - (5 * 0.75f + 1) / 6) < 1e-6f);
    v[1] = 0;
    q[0] = -1.0; /* rootz: torso at 0.3 m, 1.5 margins below 1.2 */
    double standing = pow(0.1, 2.25);
    assert_true(fabs(reward_at(env, q, v, zero) - (3 * standing + 1) / 4 / 6) < 1e-6);
    rp_env_destroy(env);
}

/* Random episodes: every reward within [0, repeat]. */
static void test_rewards_in_range(void **state)
{
    (void)state;
    for (int repeat = 1; repeat <= 2; repeat++)
        for (int t = 0; t < NT; t++) {
            rp_env_options o = rp_env_options_default();
            o.action_repeat = repeat;
            rp_rl_env *env;
            assert_int_equal(rp_env_create(&env, names[t], &o), RP_OK);
            const rp_env_spec *s = rp_env_get_spec(env);
            float obs[RP_ENV_MAX_OBS], a[RP_ENV_MAX_ACT];
            rp_env_step_result r = {0};
            double total = 0;
            rp_env_reset(env, 100 + (uint64_t)t, obs);
            for (int k = 0; !r.last; k++) {
                random_action(77, k, s->act_dim, a);
                assert_int_equal(rp_env_step(env, a, s->act_dim, obs, &r), RP_OK);
                if (!(r.reward >= 0 && r.reward <= repeat))
                    fail_msg("%s: reward %g at step %d", names[t], r.reward, k);
                for (int i = 0; i < s->obs_dim; i++)
                    assert_true(isfinite(obs[i]));
                total += r.reward;
            }
            assert_true(total <= 1000.0 + 1e-3);
            rp_env_destroy(env);
        }
}

/* ---- models from files, errors ----------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* `text` with its first `from` replaced by `to` (malloc'd; the test fails if `from` is absent). */
static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    assert_non_null(at);
    size_t head = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    assert_non_null(out);
    memcpy(out, text, head);
    strcpy(out + head, to);
    strcat(out, at + strlen(from));
    return out;
}

/* The built-in text written to a file loads and runs bitwise like the built-in model; for
   reacher also with the target as a plain world geom, as in dm_control's XML. */
static void test_model_from_file(void **state)
{
    (void)state;
    static float o1[(TSTEPS + 1) * RP_ENV_MAX_OBS], o2[(TSTEPS + 1) * RP_ENV_MAX_OBS];
    float r1[TSTEPS], r2[TSTEPS];
    const rl_env_task *tasks[] = {&rl_task_cheetah_run, &rl_task_reacher_easy};
    char path[512];
    for (int i = 0; i < 2; i++) {
        tu_tmp_path(path, sizeof path, "model.xml");
        write_text(path, tasks[i]->mjcf);
        rp_env_options o = rp_env_options_default();
        o.mjcf_path = path;
        rp_rl_env *a = make(tasks[i]->name), *b;
        assert_int_equal(rp_env_create(&b, tasks[i]->name, &o), RP_OK);
        trajectory(a, 5, TSTEPS, o1, r1);
        trajectory(b, 5, TSTEPS, o2, r2);
        size_t n = (size_t)(TSTEPS + 1) * (size_t)tasks[i]->obs_dim;
        assert_memory_equal(o1, o2, n * sizeof(float));
        assert_memory_equal(r1, r2, sizeof r1);
        rp_env_destroy(b);
        if (tasks[i] == &rl_task_reacher_easy) {
            /* the target moved out of its mocap body onto the world body */
            char *t1 = replace(tasks[i]->mjcf,
                               "<body name='target' mocap='true' pos='0 0 0.01'>\n"
                               "   <geom name='target' type='sphere'",
                               "<geom name='target' pos='0 0 0.01' type='sphere'");
            char *text = replace(t1, "0.6'/>\n  </body>\n", "0.6'/>\n");
            free(t1);
            write_text(path, text);
            free(text);
            assert_int_equal(rp_env_create(&b, tasks[i]->name, &o), RP_OK);
            trajectory(b, 5, TSTEPS, o2, r2);
            assert_memory_equal(o1, o2, n * sizeof(float));
            assert_memory_equal(r1, r2, sizeof r1);
            rp_env_destroy(b);
        }
        rp_env_destroy(a);
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    rp_rl_env *env = NULL;
    assert_int_equal(rp_env_create(&env, "cartpole-swingdown", NULL), RP_ERR_INVALID);
    assert_null(env);
    tu_assert_error_contains("cartpole-swingdown");
    for (int t = 0; t < NT; t++)
        tu_assert_error_contains(names[t]);

    rp_env_options o = rp_env_options_default();
    o.action_repeat = 0;
    assert_int_equal(rp_env_create(&env, "cartpole-swingup", &o), RP_ERR_INVALID);
    tu_assert_error_contains("action_repeat");

    char path[512];
    o = rp_env_options_default();
    o.mjcf_path = tu_tmp_path(path, sizeof path, "missing.xml");
    assert_int_equal(rp_env_create(&env, "cartpole-swingup", &o), RP_ERR_IO);
    tu_assert_error_contains("missing.xml");

    tu_tmp_path(path, sizeof path, "broken.xml");
    write_text(path, "<mujoco><worldbody><body name='cart'></worldbody>");
    assert_int_equal(rp_env_create(&env, "cartpole-swingup", &o), RP_ERR_FORMAT);
    tu_assert_error_contains("broken.xml");
    tu_assert_error_contains("MuJoCo");

    /* well-formed, but the pendulum's model for the cartpole task: the sizes differ */
    write_text(path, rl_task_pendulum_swingup.mjcf);
    assert_int_equal(rp_env_create(&env, "cartpole-swingup", &o), RP_ERR_FORMAT);
    tu_assert_error_contains("nq=2");
    /* the right sizes but not the names: point_mass's model for reacher */
    write_text(path, rl_task_point_mass_easy.mjcf);
    assert_int_equal(rp_env_create(&env, "reacher-easy", &o), RP_ERR_FORMAT);
    tu_assert_error_contains("'finger'");
    assert_null(env);

    env = make("reacher-easy");
    float obs[6], a[3] = {0.1f, 0.2f, 0.3f};
    rp_env_step_result r;
    rp_env_reset(env, 1, obs);
    assert_int_equal(rp_env_step(env, a, 3, obs, &r), RP_ERR_SHAPE);
    tu_assert_error_contains("3 values");
    assert_int_equal(rp_env_step(env, a, 1, obs, &r), RP_ERR_SHAPE);
    a[1] = NAN;
    assert_int_equal(rp_env_step(env, a, 2, obs, &r), RP_ERR_NUMERIC);
    tu_assert_error_contains("action[1]");
    a[1] = -INFINITY;
    assert_int_equal(rp_env_step(env, a, 2, obs, &r), RP_ERR_NUMERIC);
    assert_int_equal(rp_env_reward(env, a, 2, &r.reward), RP_ERR_NUMERIC);
    a[1] = 0;
    /* the refused steps changed nothing: the episode is still at step 0 */
    for (int k = 0; k < 1000; k++)
        assert_int_equal(rp_env_step(env, a, 2, obs, &r), RP_OK);
    assert_true(r.last);
    double q[3] = {0}, v[2] = {0};
    assert_int_equal(rp_env_set_state(env, q, 3, v, 2, obs), RP_ERR_SHAPE);
    q[0] = NAN;
    assert_int_equal(rp_env_set_state(env, q, 2, v, 2, obs), RP_ERR_NUMERIC);
    assert_int_equal(rp_env_reset(env, 1, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_env_create(NULL, "reacher-easy", NULL), RP_ERR_INVALID);
    rp_env_destroy(env);
    rp_env_destroy(NULL);
}

/* ---- tolerance ------------------------------------------------------------------ */

static void test_tolerance(void **state)
{
    (void)state;
    /* in bounds, at the edges too */
    assert_true(rl_tolerance(0.5, 0, 1, 2, RP_TOL_GAUSSIAN, 0.1) == 1.0);
    assert_true(rl_tolerance(1.0, 0, 1, 2, RP_TOL_LINEAR, 0.1) == 1.0);
    assert_true(rl_tolerance(0.0, 0, 1, 0, RP_TOL_GAUSSIAN, 0.1) == 1.0);
    /* margin 0: 0 outside */
    assert_true(rl_tolerance(1.001, 0, 1, 0, RP_TOL_GAUSSIAN, 0.1) == 0.0);
    /* Gaussian: v^(d^2), symmetric about the bounds */
    const double ds[] = {0.25, 0.5, 1.0, 2.0};
    for (int i = 0; i < 4; i++) {
        double d = ds[i], g = pow(0.1, d * d);
        assert_true(fabs(rl_tolerance(1 + 2 * d, 0, 1, 2, RP_TOL_GAUSSIAN, 0.1) - g) < 1e-12);
        assert_true(fabs(rl_tolerance(-2 * d, 0, 1, 2, RP_TOL_GAUSSIAN, 0.1) - g) < 1e-12);
        assert_true(fabs(rl_tolerance(3 + d, 3, 3, 1, RP_TOL_GAUSSIAN, 0.3) - pow(0.3, d * d)) <
                    1e-12);
        /* linear: 1 - d (1 - v), floored at 0 */
        double lin = d * 0.9 < 1 ? 1 - d * 0.9 : 0;
        assert_true(fabs(rl_tolerance(-d, 0, 0, 1, RP_TOL_LINEAR, 0.1) - lin) < 1e-12);
        /* quadratic: 1 - d^2 (1 - v) */
        double quad = d * d * 0.9 < 1 ? 1 - d * d * 0.9 : 0;
        assert_true(fabs(rl_tolerance(d, 0, 0, 1, RP_TOL_QUADRATIC, 0.1) - quad) < 1e-12);
    }
    assert_true(fabs(rl_tolerance(1, 0, 0, 1, RP_TOL_GAUSSIAN, 0.1) - 0.1) < 1e-12);
    assert_true(fabs(rl_tolerance(1, 0, 0, 1, RP_TOL_LINEAR, 0.1) - 0.1) < 1e-12);
    assert_true(fabs(rl_tolerance(1, 0, 0, 1, RP_TOL_QUADRATIC, 0.1) - 0.1) < 1e-12);
    /* value_at_margin 0 reaches 0 at the margin (|scaled| < 1 fails there) */
    assert_true(rl_tolerance(1, 0, 0, 1, RP_TOL_QUADRATIC, 0) == 0.0);
    assert_true(rl_tolerance(-2, 0, 0, 2, RP_TOL_LINEAR, 0) == 0.0);
    /* an infinite upper bound (cheetah's speed) */
    assert_true(rl_tolerance(1e9, 10, INFINITY, 10, RP_TOL_LINEAR, 0) == 1.0);
    assert_true(fabs(rl_tolerance(4, 10, INFINITY, 10, RP_TOL_LINEAR, 0) - 0.4) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),        cmocka_unit_test(test_episode_length_and_sizes),
        cmocka_unit_test(test_action_repeat),   cmocka_unit_test(test_actions_are_clipped),
        cmocka_unit_test(test_determinism),     cmocka_unit_test(test_threads_share_model),
        cmocka_unit_test(test_initial_states),  cmocka_unit_test(test_reward_cartpole),
        cmocka_unit_test(test_reward_pendulum), cmocka_unit_test(test_reward_point_mass),
        cmocka_unit_test(test_reward_reacher),  cmocka_unit_test(test_reward_cheetah),
        cmocka_unit_test(test_reward_walker),   cmocka_unit_test(test_rewards_in_range),
        cmocka_unit_test(test_model_from_file), cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_tolerance),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
