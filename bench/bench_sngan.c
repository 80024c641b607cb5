/*
 * bench_sngan.c - seconds per SN-GAN iteration (one generator step and
 * n_dis discriminator steps: models/sngan's train_step), on Fashion-MNIST
 * padded to 32x32, after warm-up iterations, with the generator and
 * discriminator phases timed apart.
 *
 *     bench_sngan [--ch 32] [--d-batch 64] [--g-batch 128] [--n-dis 5] [--iters 5]
 *                 [--warmup 2] [--replicas 1] [--threads T] [--data-dir DIR]
 *
 * Prints one line per measured iteration and a summary (median). Run it on a
 * quiet machine (OPENBLAS_NUM_THREADS=1; threads per replica default to
 * cores / replicas).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan.h"

typedef struct job {
    rp_sngan *gan;
    void *state[64];
    int phase; /* 0 build, 1 step, 2 destroy */
    rp_trainer_at at;
    double g_s[64], d_s[64]; /* replica 0 reads its own */
} job;

static rp_status fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    const rp_trainer_model *m = rp_sngan_trainer_model();
    int id = rp_replica_id(rep);
    if (j->phase == 0) return m->build(rep, j->gan, NULL, NULL, &j->state[id]);
    if (j->phase == 2) return m->destroy(rep, j->gan, j->state[id]);
    double t0 = rp_now_s();
    RP_CHECK(rp_sngan_step_g(rep, j->gan, j->state[id], &j->at, NULL));
    double t1 = rp_now_s();
    for (int i = 0; i < rp_sngan_get_config(j->gan)->n_dis; i++)
        RP_CHECK(rp_sngan_step_d(rep, j->gan, j->state[id], &j->at, i, NULL));
    j->g_s[id] = t1 - t0;
    j->d_s[id] = rp_now_s() - t1;
    return RP_OK;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    rp_sngan_config c = rp_sngan_config_default();
    int iters = 5, warmup = 2, replicas = 1, threads = 0;
    c.limit = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--ch"))
            c.ch_g = c.ch_d = atoi(v);
        else if (!strcmp(k, "--d-batch"))
            c.d_batch = atoi(v);
        else if (!strcmp(k, "--g-batch"))
            c.g_batch = atoi(v);
        else if (!strcmp(k, "--n-dis"))
            c.n_dis = atoi(v);
        else if (!strcmp(k, "--iters"))
            iters = atoi(v);
        else if (!strcmp(k, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(k, "--replicas"))
            replicas = atoi(v);
        else if (!strcmp(k, "--threads"))
            threads = atoi(v);
        else if (!strcmp(k, "--data-dir"))
            snprintf(c.data_dir, sizeof c.data_dir, "%s", v);
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    if (iters < 1 || iters > 1000 || replicas < 1 || replicas > 64) {
        fprintf(stderr, "--iters 1..1000, --replicas 1..64\n");
        return 2;
    }
    job j;
    memset(&j, 0, sizeof j);
    rp_replicator *r = NULL;
    if (rp_sngan_create(&j.gan, &c) != RP_OK) goto fail;
    rp_config rc = rp_config_default();
    rc.backend = RP_BACKEND_THREADS;
    rc.replicas = replicas;
    rc.threads_per_replica = threads;
    if (rp_replicator_create(&r, &rc) != RP_OK || rp_replicator_run(r, fn, &j) != RP_OK) goto fail;
    printf("sngan ch %d, d_batch %d, g_batch %d, n_dis %d, %d replica(s) x %d thread(s)\n", c.ch_g,
           c.d_batch, c.g_batch, c.n_dis, replicas, rp_replicator_threads_per_replica(r));
    double *tot = calloc((size_t)iters, sizeof *tot);
    if (!tot) goto fail;
    j.phase = 1;
    for (int it = 0; it < warmup + iters; it++) {
        j.at = (rp_trainer_at){0, it, it, c.lr_g};
        double t0 = rp_now_s();
        if (rp_replicator_run(r, fn, &j) != RP_OK) goto fail;
        double s = rp_now_s() - t0;
        if (it < warmup) continue;
        tot[it - warmup] = s;
        printf("iteration %d: %.3f s (G step %.3f s, %d D steps %.3f s)\n", it, s, j.g_s[0],
               c.n_dis, j.d_s[0]);
    }
    qsort(tot, (size_t)iters, sizeof *tot, cmp);
    printf("median %.3f s per iteration (%.2f it/s)\n", tot[iters / 2], 1.0 / tot[iters / 2]);
    free(tot);
    j.phase = 2;
    if (rp_replicator_run(r, fn, &j) != RP_OK) goto fail;
    rp_replicator_destroy(r);
    rp_sngan_destroy(j.gan);
    return 0;
fail:
    fprintf(stderr, "bench_sngan: %s\n", rp_last_error());
    return 1;
}
