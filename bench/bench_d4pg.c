/*
 * bench_d4pg.c - D4PG learner steps per second on random batches (Acme's
 * default networks: policy 256x3, critic 512-512-256, 51 atoms), the number
 * bench/d4pg_torch.py measures for PyTorch.
 *
 * Usage: bench_d4pg [--obs N --act N] [--replicas R] [--threads T] [--batch B]
 *                   [--steps S] [--warmup W] [--precision f32|bf16] [--json]
 * Without --obs/--act it runs the cartpole (obs 5, act 1) and cheetah (obs
 * 17, act 6) sizes; without --replicas/--threads, 1 replica x 2 threads and
 * 2 replicas x 1 thread. One line per case (a JSON object with --json).
 * A step is the whole learner step: target forward, critic forward and
 * backward, policy forward and backward through the critic, two Adam updates,
 * gradient all-reduce (2 replicas) and clipping. --precision bf16 runs the
 * networks' linear layers in bf16 (rp_config.precision, as train d4pg
 * --precision bf16); each line reports the precision the replicas' tapes ran
 * with and, for bf16, the CPU's bf16 path.
 *
 * bench_d4pg --actor [--obs N --act N] [--envs E] [--steps S]: an actor's policy forward instead
 * (rp_d4pg_policy_act on E observations, noise on, 1 kernel thread as an actor runs), in f32 and
 * in bf16 alternating over 5 rounds of S calls: the medians in actions per second, and which
 * wins (train d4pg's actors keep f32 where it does; docs/precision.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg.h"
#include "replicator/bench.h"

typedef struct job {
    rp_d4pg_config cfg;
    int steps;
    rp_d4pg_learner *L[8];
    float *data[8]; /* each replica's shard: obs, act, reward, discount, next_obs */
    rp_d4pg_batch b[8];
    rp_status status;
} job;

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    int me = rp_replica_local_index(rep);
    const rp_d4pg_config *c = &j->cfg;
    int n = c->batch / rp_replica_count(rep);
    size_t per = (size_t)n * (2 * (size_t)c->obs_dim + (size_t)c->act_dim + 2);
    float *d = malloc(per * sizeof(float));
    if (!d) return RP_ERROR(RP_ERR_NOMEM, "bench_d4pg: batch");
    j->data[me] = d;
    uint64_t key = rp_hash_str(7, "bench_d4pg") + (uint64_t)rp_replica_id(rep);
    rp_rng_fill_uniform(key, 0, d, per, -1, 1);
    float *obs = d, *act = obs + (size_t)n * c->obs_dim, *rew = act + (size_t)n * c->act_dim;
    float *disc = rew + n, *next = disc + n;
    for (int i = 0; i < n; i++)
        disc[i] = 0.95f; /* gamma^N */
    j->b[me] = (rp_d4pg_batch){n, obs, act, rew, disc, next, NULL};
    return rp_d4pg_learner_create(rep, &j->L[me], c, 1);
}

static rp_status train(rp_replica *rep, void *arg)
{
    job *j = arg;
    int me = rp_replica_local_index(rep);
    for (int s = 0; s < j->steps; s++)
        RP_CHECK(rp_d4pg_learner_step(rep, j->L[me], &j->b[me], NULL));
    return RP_OK;
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    job *j = arg;
    int me = rp_replica_local_index(rep);
    rp_d4pg_learner_destroy(j->L[me]);
    free(j->data[me]);
    return RP_OK;
}

static int run_case(int obs, int act, int replicas, int threads, int batch, int steps, int warmup,
                    rp_dtype precision, bool json)
{
    job j;
    memset(&j, 0, sizeof j);
    j.cfg = rp_d4pg_config_default();
    j.cfg.obs_dim = obs;
    j.cfg.act_dim = act;
    j.cfg.batch = batch;
    rp_config rc = rp_config_default();
    rc.backend = RP_BACKEND_THREADS;
    rc.replicas = replicas;
    rc.threads_per_replica = threads;
    rc.precision = precision;
    rp_replicator *r = NULL;
    if (batch % replicas) {
        fprintf(stderr, "batch %d does not split over %d replicas\n", batch, replicas);
        return 1;
    }
    if (rp_replicator_create(&r, &rc) != RP_OK || rp_replicator_run(r, build, &j) != RP_OK) {
        fprintf(stderr, "bench_d4pg: %s\n", rp_last_error());
        rp_replicator_destroy(r);
        return 1;
    }
    j.steps = warmup;
    rp_status s = rp_replicator_run(r, train, &j);
    double t0 = rp_now_s();
    j.steps = steps;
    if (s == RP_OK) s = rp_replicator_run(r, train, &j);
    double dt = rp_now_s() - t0;
    if (s != RP_OK) fprintf(stderr, "bench_d4pg: %s\n", rp_last_error());
    /* What the replicas' tapes ran with, not what was asked. */
    rp_dtype ran = rp_tape_precision(rp_replica_tape(rp_replicator_replica(r, 0))).compute;
    const char *path = ran == RP_BF16 ? rp_kernels_bf16_path() : "";
    rp_replicator_run(r, teardown, &j);
    rp_replicator_destroy(r);
    if (s != RP_OK) return 1;
    double sps = steps / dt;
    if (json)
        printf("{\"obs\": %d, \"act\": %d, \"replicas\": %d, \"threads\": %d, \"batch\": %d, "
               "\"steps\": %d, \"precision\": \"%s\"%s%s%s, \"steps_per_s\": %.3f}\n",
               obs, act, replicas, threads, batch, steps, rp_dtype_name(ran),
               *path ? ", \"bf16_path\": \"" : "", path, *path ? "\"" : "", sps);
    else
        printf("obs %2d act %d, %d replica(s) x %d thread(s), batch %d, %s%s%s: %.1f learner "
               "steps/s (%.2f ms/step, %d steps)\n",
               obs, act, replicas, threads, batch, rp_dtype_name(ran), *path ? " on " : "", path,
               sps, 1e3 / sps, steps);
    fflush(stdout);
    return 0;
}

/* The actor's forward: rp_d4pg_policy_act on `envs` observations, f32 and bf16 in turn. */
static int run_actor(int obs, int act, int envs, int calls, bool json)
{
    enum { ROUNDS = 5 };
    rp_d4pg_config cfg = rp_d4pg_config_default();
    cfg.obs_dim = obs;
    cfg.act_dim = act;
    rp_d4pg_policy *p = NULL;
    rp_tape *t = NULL;
    float *o = calloc((size_t)envs * (size_t)obs, sizeof(float));
    float *a = calloc((size_t)envs * (size_t)act, sizeof(float));
    double rate[2][ROUNDS];
    rp_rng rng = rp_rng_make(3, 0);
    rp_kernels_set_threads(1);
    if (!o || !a || rp_d4pg_policy_create(&p, &cfg) != RP_OK || rp_tape_create(&t, 0) != RP_OK)
        goto fail;
    rp_rng_fill_uniform(11, 0, o, (size_t)envs * (size_t)obs, -1, 1);
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < 2; k++) {
            int bf16 = (k + r) % 2; /* the order alternates */
            if (rp_tape_set_precision(t, rp_precision_policy_make(bf16 ? RP_BF16 : RP_F32)) !=
                RP_OK)
                goto fail;
            for (int w = 0; w < 20; w++) {
                rp_tape_reset(t);
                if (rp_d4pg_policy_act(p, t, o, envs, 0.3f, &rng, a) != RP_OK) goto fail;
            }
            double t0 = rp_now_s();
            for (int c = 0; c < calls; c++) {
                rp_tape_reset(t);
                if (rp_d4pg_policy_act(p, t, o, envs, 0.3f, &rng, a) != RP_OK) goto fail;
            }
            rate[bf16][r] = (double)calls * envs / (rp_now_s() - t0);
        }
    double f = rp_bench_median(rate[0], ROUNDS), b = rp_bench_median(rate[1], ROUNDS);
    if (json)
        printf("{\"actor\": true, \"obs\": %d, \"act\": %d, \"envs\": %d, \"calls\": %d, "
               "\"f32_actions_per_s\": %.1f, \"bf16_actions_per_s\": %.1f, \"bf16_path\": "
               "\"%s\"}\n",
               obs, act, envs, calls, f, b, rp_kernels_bf16_path());
    else
        printf("actor obs %2d act %d, %d env(s), 1 thread: f32 %.0f, bf16 (%s) %.0f actions/s "
               "(median of %d rounds of %d calls): bf16 / f32 %.2f\n",
               obs, act, envs, f, rp_kernels_bf16_path(), b, ROUNDS, calls, b / f);
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
    free(o);
    free(a);
    return 0;
fail:
    fprintf(stderr, "bench_d4pg --actor: %s\n", rp_last_error());
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
    free(o);
    free(a);
    return 1;
}

int main(int argc, char **argv)
{
    int obs = 0, act = 0, replicas = 0, threads = 0, batch = 256, steps = 50, warmup = 5, envs = 1;
    bool json = false, actor = false;
    rp_dtype precision = RP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--obs")        ? &obs
                   : !strcmp(a, "--act")      ? &act
                   : !strcmp(a, "--replicas") ? &replicas
                   : !strcmp(a, "--threads")  ? &threads
                   : !strcmp(a, "--batch")    ? &batch
                   : !strcmp(a, "--steps")    ? &steps
                   : !strcmp(a, "--warmup")   ? &warmup
                   : !strcmp(a, "--envs")     ? &envs
                                              : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--actor")) {
            actor = true;
        } else if (!strcmp(a, "--precision") && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "f32") || !strcmp(argv[i + 1], "bf16"))) {
            precision = !strcmp(argv[++i], "bf16") ? RP_BF16 : RP_F32;
        } else if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: %s [--obs N --act N] [--replicas R --threads T] [--batch B] "
                    "[--steps S] [--warmup W] [--precision f32|bf16] [--json]\n"
                    "       %s --actor [--obs N --act N] [--envs E] [--steps S] [--json]\n",
                    argv[0], argv[0]);
            return 2;
        }
    }
    if (actor) {
        if (envs < 1 || steps < 1) {
            fprintf(stderr, "bench_d4pg --actor: --envs and --steps must be at least 1\n");
            return 2;
        }
        int rc = 0;
        if (obs > 0) return run_actor(obs, act > 0 ? act : 1, envs, steps * 40, json);
        rc |= run_actor(5, 1, envs, steps * 40, json);
        rc |= run_actor(17, 6, envs, steps * 40, json);
        return rc;
    }
    int dims[2][2] = {{5, 1}, {17, 6}}, layouts[2][2] = {{1, 2}, {2, 1}};
    int nd = obs > 0 ? 1 : 2, nl = replicas > 0 ? 1 : 2;
    if (obs > 0) dims[0][0] = obs, dims[0][1] = act > 0 ? act : 1;
    if (replicas > 0) layouts[0][0] = replicas, layouts[0][1] = threads > 0 ? threads : 1;
    int rc = 0;
    for (int d = 0; d < nd; d++)
        for (int l = 0; l < nl; l++)
            rc |= run_case(dims[d][0], dims[d][1], layouts[l][0], layouts[l][1], batch, steps,
                           warmup, precision, json);
    return rc;
}
