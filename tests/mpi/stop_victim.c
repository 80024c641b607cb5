/*
 * stop_victim.c - the program tests/mpi_stop.sh runs: `mpirun -np N stop_victim groups|async DIR`
 * trains a tiny model on the MPI runtime with one parameter server (the last rank) - in two sync
 * groups (groups; N = 5: ranks 0-1 and 2-3) or asynchronously (async; N = 3) - on batches that
 * never run out, and the last replica rank fails its step at its third batch. Every replica rank
 * puts "rank R: failed after T s: MESSAGE" (or "rank R: ended without an error") in a line and the
 * job is aborted: a failed MPI runtime cannot be finalised cleanly, and the script only reads the
 * lines.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/replicator.h"

#define DIM 8

typedef struct job {
    rp_params *params;
    rp_optimizer *opt;
    int fail_rank;
} job;

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    RP_CHECK(rp_params_create(&j->params));
    rp_init init = {.kind = RP_INIT_CONSTANT, .value = 0};
    if (!rp_params_add(j->params, "x", 1, (int[]){DIM}, init, true)) return rp_last_status();
    RP_CHECK(rp_params_finalize(j->params, 1));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &j->opt, j->params, &oc);
}

/* Batches without end; one replica gives up at its third. */
static rp_status train(rp_replica *rep, void *arg)
{
    job *j = arg;
    float g[DIM];
    for (int taken = 0;; taken++) {
        int64_t t;
        RP_CHECK(rp_replica_next_batch(rep, &t));
        if (rp_replica_id(rep) == j->fail_rank && taken == 2)
            return RP_ERROR(RP_ERR_INVALID, "replica %d gave up at batch %lld", rp_replica_id(rep),
                            (long long)t);
        for (int k = 0; k < DIM; k++)
            g[k] = 0.01f * (float)(k + 1);
        RP_CHECK(rp_params_write_grads(j->params, g));
        RP_CHECK(rp_optimizer_step(j->opt, 0.01f));
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "groups") != 0 && strcmp(argv[1], "async") != 0)) {
        fprintf(stderr, "usage: stop_victim groups|async DIR\n");
        return 2;
    }
    rp_log_set_level(RP_LOG_ERROR);
    bool groups = !strcmp(argv[1], "groups");
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.ps = 1;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 5;
    if (groups)
        cfg.sync_groups = 2;
    else
        cfg.regime = RP_REGIME_ASYNC;
    rp_replicator *r = NULL;
    job j = {0};
    if (rp_replicator_create(&r, &cfg) != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rp_replicator_is_server(r)) {
        rp_status served = rp_replicator_serve(r);
        fprintf(stderr, "server: %s\n", served == RP_OK ? "done" : rp_last_error());
        for (;;)
            sleep(1); /* until the script kills the job */
    }
    if (rp_replicator_run(r, build, &j) != RP_OK) {
        fprintf(stderr, "build: %s\n", rp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    j.fail_rank = size - 2; /* the last replica rank */
    double t0 = MPI_Wtime();
    rp_status status = rp_replicator_run(r, train, &j);
    {
        char path[4096], tmp[4200];
        snprintf(path, sizeof path, "%s/rank%d.txt", argv[2], rank);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f) {
            if (status != RP_OK)
                fprintf(f, "rank %d: failed after %.1f s: %s\n", rank, MPI_Wtime() - t0,
                        rp_last_error());
            else
                fprintf(f, "rank %d: ended without an error\n", rank);
            fclose(f);
            rename(tmp, path);
        }
    }
    for (;;)
        sleep(1); /* until the script kills the job */
}
