/*
 * bench_env.c - agent steps per second of each control task through
 * rp_env_step (uniform random actions in [-1, 1], a reset at each episode's
 * end), next to the floor: raw mj_step on the same compiled model with the
 * same number of physics steps and random controls, no observation, reward
 * or bookkeeping. One thread. Also the random policy's mean episode return,
 * a floor for learning curves.
 *
 * Usage: bench_env [agent steps per task, default 20000]
 */
#include <stdio.h>
#include <stdlib.h>

#include "replicator/env.h"
#include "rl/env_internal.h"

#define RP(call)                                                                                   \
    do {                                                                                           \
        if ((call) != RP_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, rp_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 20000;
    if (steps < 1000) steps = 1000;
    printf("%ld agent steps per task, one thread, MuJoCo %s\n\n", steps, mj_versionString());
    printf("%-18s %5s %9s %12s %14s %9s %14s\n", "task", "sub", "dt (s)", "env steps/s",
           "mj_step/s (x)", "env/raw", "random return");
    for (int t = 0; t < rp_env_task_count(); t++) {
        rp_rl_env *env;
        RP(rp_env_create(&env, rp_env_task_name(t), NULL));
        const rp_env_spec *s = rp_env_get_spec(env);
        const mjModel *m = rl_env_mj_model(env);
        int sub = (int)(s->control_dt / m->opt.timestep + 0.5);
        float obs[RP_ENV_MAX_OBS], a[RP_ENV_MAX_ACT];
        rp_rng rng = rp_rng_make(1, (uint64_t)t);
        rp_env_step_result r;
        double ret = 0;
        int episodes = 0;
        RP(rp_env_reset(env, 0, obs));
        double t0 = rp_now_s();
        for (long k = 0; k < steps; k++) {
            for (int i = 0; i < s->act_dim; i++)
                a[i] = 2 * rp_rng_uniform(&rng) - 1;
            RP(rp_env_step(env, a, s->act_dim, obs, &r));
            ret += r.reward;
            if (r.last) {
                episodes++;
                RP(rp_env_reset(env, (uint64_t)k, obs));
            }
        }
        double env_s = rp_now_s() - t0;

        /* the floor: mj_step alone on the same model, from the same kind of start */
        mjData *d = mj_makeData(m);
        float o2[RP_ENV_MAX_OBS];
        RP(rp_env_reset(env, 0, o2));
        mju_copy(d->qpos, rl_env_mj_data(env)->qpos, m->nq);
        mj_forward(m, d);
        long physics = steps * sub;
        t0 = rp_now_s();
        for (long k = 0; k < physics; k++) {
            if (k % sub == 0)
                for (int i = 0; i < m->nu; i++)
                    d->ctrl[i] = 2 * rp_rng_uniform(&rng) - 1;
            mj_step(m, d);
            if ((k + 1) % (1000L * sub) == 0) mj_resetData(m, d);
        }
        double raw_s = rp_now_s() - t0;
        mj_deleteData(d);
        printf("%-18s %5d %9.4f %12.0f %9.0f (%2d) %8.2f %14.1f\n", s->task, sub, s->control_dt,
               steps / env_s, physics / raw_s, sub, (steps / env_s) / (physics / raw_s / sub),
               episodes ? ret / (double)steps * s->episode_steps : 0.0);
        rp_env_destroy(env);
    }
    printf(
        "\nenv steps/s: agent steps through rp_env_step; mj_step/s: physics steps of raw mj_step\n"
        "(x: physics steps per agent step); env/raw: env steps/s over (mj_step/s / x), 1 = no "
        "overhead;\nrandom return: mean reward per step x episode length, uniform random "
        "actions.\n");
    return 0;
}
