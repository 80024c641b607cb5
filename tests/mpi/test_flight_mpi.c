/*
 * test_flight_mpi.c - the flight recorder's dumps on MPI ranks, run by
 * CTest under mpirun: one replica per process, or with an argument T, T
 * replica threads per process (hierarchical). Two failed runs, each with
 * its own replicator:
 *  1. the job's last worker makes its second call a broadcast where the
 *     others all-reduce: every rank's run fails with the mismatch (its
 *     message names both calls), and every rank writes flight-<worker>.txt
 *     for each of its workers naming that call (kind, sequence number,
 *     outcome) and the one before it;
 *  2. the last worker sleeps past its peers' timeout: the others time out
 *     in the all-reduce, and every rank writes its workers' files with the
 *     all-reduce's failed entry and the barrier before it.
 * Each rank writes to a directory of its own (mkdtemp) and checks its own
 * files; the ranks agree on the result at the end over MPI_COMM_WORLD.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "replicator/replicator.h"
#include "text_check.h"

static int rank;

typedef struct job {
    int last; /* the job's last worker */
} job;

static rp_status mismatch_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    float buf[4] = {1, 2, 3, 4};
    RP_CHECK(rp_all_reduce(rep, buf, buf, 4, RP_F32, RP_SUM));
    if (rp_replica_worker(rep) == j->last) return rp_broadcast(rep, buf, 4, RP_F32, 0);
    return rp_all_reduce(rep, buf, buf, 4, RP_F32, RP_SUM);
}

static rp_status late_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    float buf[8] = {0};
    RP_CHECK(rp_barrier(rep));
    if (rp_replica_worker(rep) == j->last) {
        struct timespec ts = {2, 500 * 1000 * 1000};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    return rp_all_reduce(rep, buf, buf, 8, RP_F32, RP_MAX);
}

/*
 * One failed run: its status must be an error (for a mismatch, one whose message names `cause`),
 * and each local worker's file must hold a line with each `lines` row's needles. Returns failures.
 */
static int scenario(const char *name, int per, double timeout_s, rp_replica_fn fn,
                    const char *cause, const char *const lines[][6], int nlines)
{
    int failures = 0;
    char dir[] = "/tmp/rp_test_flight_mpi_XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "rank %d: mkdtemp failed\n", rank);
        return 1;
    }
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.replicas = per;
    cfg.threads_per_replica = 1;
    cfg.checksum_every = 0;
    cfg.timeout_s = timeout_s;
    rp_replicator *r = NULL;
    if (rp_replicator_create(&r, &cfg) != RP_OK || rp_replicator_set_flight_dir(r, dir) != RP_OK) {
        fprintf(stderr, "rank %d: %s: create: %s\n", rank, name, rp_last_error());
        return 1;
    }
    job j = {.last = rp_replica_workers(rp_replicator_replica(r, 0)) - 1};
    rp_status st = rp_replicator_run(r, fn, &j);
    if (st == RP_OK) {
        fprintf(stderr, "rank %d: %s: the run succeeded\n", rank, name);
        failures++;
    } else if (cause && !strstr(rp_last_error(), cause)) {
        fprintf(stderr, "rank %d: %s: the error does not name '%s': %s\n", rank, name, cause,
                rp_last_error());
        failures++;
    }
    for (int t = 0; t < per; t++) {
        int worker = rp_replica_worker(rp_replicator_replica(r, t));
        char path[256];
        snprintf(path, sizeof path, "%s/flight-%d.txt", dir, worker);
        char *text = tc_slurp(path);
        if (!text) {
            fprintf(stderr, "rank %d: %s: %s was not written\n", rank, name, path);
            failures++;
            continue;
        }
        for (int k = 0; k < nlines; k++) {
            const char *const *needles = lines[k];
            /* Row 0 is the failed call: the last worker's is a broadcast in the mismatch. */
            const char *mine[6];
            memcpy(mine, needles, sizeof mine);
            if (k == 0 && strcmp(name, "mismatch") == 0 && worker == j.last) mine[0] = "broadcast";
            if (!tc_line_with(text, mine)) {
                fprintf(stderr, "rank %d: %s: %s has no line with '%s' '%s' '%s':\n%s\n", rank,
                        name, path, mine[0], mine[1] ? mine[1] : "",
                        mine[1] && mine[2] ? mine[2] : "", text);
                failures++;
            }
        }
        if (!strstr(text, "ended its run with")) {
            fprintf(stderr, "rank %d: %s: %s does not give the worker's error:\n%s\n", rank, name,
                    path, text);
            failures++;
        }
        free(text);
        unlink(path);
        snprintf(path, sizeof path, "%s/flight-%d.jsonl", dir, worker);
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "rank %d: %s: %s was not written\n", rank, name, path);
            failures++;
        }
        unlink(path);
    }
    rmdir(dir);
    rp_replicator_destroy(r);
    return failures;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_OFF);
    int per = argc > 1 ? atoi(argv[1]) : 1;
    if (per < 1 || per > 8) {
        fprintf(stderr, "usage: test_flight_mpi [replicas per rank, 1..8]\n");
        return 2;
    }
    const char *env_rank = getenv("OMPI_COMM_WORLD_RANK");
    rank = env_rank ? atoi(env_rank) : 0;
    int failures = 0;
    /* Sequence numbers: the runtime's creation calls come first, so the lines are matched by kind,
       user number and outcome; row 0 is the failed call (MISMATCH where the member saw both calls,
       COMM where a peer in another process reported it), row 1 the one before it. */
    const char *const mismatch[][6] = {
        {"all_reduce", "user #1", "!ok", "!pending", NULL},
        {"all_reduce", "user #0", " ok ", "count 4, f32, sum", NULL},
    };
    failures += scenario("mismatch", per, 30, mismatch_fn, "broadcast", mismatch, 2);
    const char *const late[][6] = {
        {"all_reduce", "user #1", "count 8, f32, max", "!ok", "!pending", NULL},
        {"barrier", "user #0", " ok ", NULL},
    };
    failures += scenario("timeout", per, 1.0, late_fn, NULL, late, 2);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", total ? "FAIL" : "ok");
    return total ? 1 : 0;
}
