/*
 * test_fault_mpi.c - a rank killed by the fault schedule (docs/faults.md),
 * run by CTest under `mpirun --enable-recovery` (so that mpirun lets the
 * other ranks run on when one dies, as a job on a cluster would see it):
 * one replica per process, or with an argument T, T replica threads per
 * process (hierarchical).
 *
 * Every rank sets the same schedule: the worker of rank 1 (its first, under
 * the hierarchical backend) dies at its first run's all-reduce, after a
 * barrier. Its process ends there (SIGKILL, from the schedule: no signal
 * is sent by the test, no pid is looked for). Every surviving worker's run
 * fails within the timeout (and a margin) naming rank 1 and its host; each
 * surviving rank sends its count of failed checks to rank 0, which prints
 * "test_fault_mpi: ok" only if every survivor passed (CTest looks for that
 * line: with --enable-recovery mpirun's exit status does not carry the
 * ranks'). The survivors leave with _exit: MPI_Finalize would wait for the
 * dead rank.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/replicator.h"

#define TIMEOUT_S 2.0
#define VICTIM    1 /* the rank that dies */

static int rank_, failures;

#include "mpi_check.h"

typedef struct job {
    rp_status status[8];
    double took[8];
    char msg[8][1200];
} job;

/* A barrier (the run's call 0), then an all-reduce (call 1), where the victim dies. */
static rp_status two_calls_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    int t = rp_replica_local_index(rep);
    float buf[8] = {0};
    rp_status st = rp_barrier(rep);
    double t0 = rp_now_s();
    if (st == RP_OK) st = rp_all_reduce(rep, buf, buf, 8, RP_F32, RP_MAX);
    j->status[t] = st;
    j->took[t] = rp_now_s() - t0;
    snprintf(j->msg[t], sizeof j->msg[t], "%s", st == RP_OK ? "" : rp_last_error());
    return st;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN); /* the "fault injected" line shows in the test's output */
    int per = argc > 1 ? atoi(argv[1]) : 1;
    if (per < 1 || per > 8) {
        fprintf(stderr, "usage: test_fault_mpi [replicas per rank, 1..8]\n");
        return 2;
    }
    const char *env_rank = getenv("OMPI_COMM_WORLD_RANK"),
               *env_size = getenv("OMPI_COMM_WORLD_SIZE");
    rank_ = env_rank ? atoi(env_rank) : 0;
    int size = env_size ? atoi(env_size) : 1;
    if (size < 2) {
        fprintf(stderr, "test_fault_mpi: run it under mpirun with 2 ranks or more\n");
        return 2;
    }
    char spec[96];
    snprintf(spec, sizeof spec, "kill:worker=%d,run=1,call=1", VICTIM * per);
    if (rp_comm_faults_set(spec, "test_fault_mpi") != RP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank_, rp_last_error());
        return 1;
    }
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.replicas = per;
    cfg.threads_per_replica = 1;
    cfg.checksum_every = 0;
    cfg.timeout_s = TIMEOUT_S;
    rp_replicator *r = NULL;
    if (rp_replicator_create(&r, &cfg) != RP_OK) {
        fprintf(stderr, "rank %d: create: %s\n", rank_, rp_last_error());
        return 1;
    }
    char host[256] = "?", victim[320];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf(victim, sizeof victim, "rank %d (%s)", VICTIM, host);
    job j;
    memset(&j, 0, sizeof j);
    rp_status st = rp_replicator_run(r, two_calls_fn, &j);
    /* Only the survivors get here: the victim's process ended in the run. */
    CHECK(rank_ != VICTIM, "the victim rank survived its kill");
    CHECK(st != RP_OK, "the run succeeded without rank %d", VICTIM);
    for (int t = 0; t < per; t++) {
        CHECK(j.status[t] == RP_ERR_TIMEOUT || j.status[t] == RP_ERR_COMM,
              "worker %d: status %s, expected TIMEOUT (or COMM from a peer's report): %s", t,
              rp_status_name(j.status[t]), j.msg[t]);
        CHECK(strstr(j.msg[t], victim) != NULL, "worker %d's error does not name %s: %s", t, victim,
              j.msg[t]);
        /* Within the timeout and a margin (hierarchical members wait 1.25 x + 1 s in-process). */
        CHECK(j.took[t] >= TIMEOUT_S * 0.9 && j.took[t] < TIMEOUT_S * 2 + 3,
              "worker %d failed after %.2f s (timeout %.1f s)", t, j.took[t], TIMEOUT_S);
    }
    if (failures == 0 && rank_ != 0)
        fprintf(stderr, "rank %d: failed naming %s after %.2f s: %s\n", rank_, victim, j.took[0],
                j.msg[0]);
    /* The survivors' verdicts to rank 0, point to point (a collective would wait for the dead). */
    if (rank_ != 0) {
        MPI_Send(&failures, 1, MPI_INT, 0, 77, MPI_COMM_WORLD);
    } else {
        int total = failures;
        for (int q = 1; q < size; q++) {
            if (q == VICTIM) continue;
            int theirs = 1;
            MPI_Recv(&theirs, 1, MPI_INT, q, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            total += theirs;
        }
        fprintf(stderr, "rank 0: failed naming %s after %.2f s: %s\n", victim, j.took[0], j.msg[0]);
        printf("test_fault_mpi: %s (%d survivors of %d ranks)\n", total ? "FAIL" : "ok", size - 1,
               size);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(failures ? 1 : 0);
}
