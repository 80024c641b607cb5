/*
 * ps_stop_victim.c - the program tests/ps_mpi_stop.sh stops a server of:
 * `mpirun -np 3 ps_stop_victim DIR` runs 2 workers and 1 parameter server
 * (the last rank). Every rank writes its pid to DIR/rankR.pid; the workers
 * push and pull in a loop (3 s timeout), writing DIR/rankR.steps with their
 * step count now and then, until a call fails: each then prints
 * "worker W: error after T s: MESSAGE" (T since its last successful call)
 * and the job is aborted (the stopped server would hold MPI_Finalize).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "replicator/ps.h"

static void write_file(const char *dir, int rank, const char *what, long value)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/rank%d.%s", dir, rank, what);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%ld\n", value);
    fclose(f);
    rename(tmp, path);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ps_stop_victim DIR\n");
        return 2;
    }
    rp_log_set_level(RP_LOG_WARN);
    rp_ps_group *g = NULL;
    if (rp_ps_mpi_group_create(&g, 1, 3.0) != RP_OK) {
        fprintf(stderr, "group: %s\n", rp_last_error());
        return 1;
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    write_file(argv[1], rank, "pid", (long)getpid());
    if (rp_ps_group_is_server(g)) {
        rp_status st = rp_ps_mpi_serve(g);
        if (st != RP_OK) fprintf(stderr, "server: %s\n", rp_last_error());
        rp_ps_group_destroy(g);
        return st == RP_OK ? 0 : 1;
    }
    enum { N = 4096 };
    static float grad[N], values[N];
    rp_ps_config cfg = rp_ps_config_default();
    cfg.timeout_s = 3.0;
    rp_ps *ps = NULL;
    if (rp_ps_mpi_create(&ps, g, N, &cfg) != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        return 1;
    }
    double last = MPI_Wtime();
    for (long step = 0;; step++) {
        if (step % 10 == 0) write_file(argv[1], rank, "steps", step);
        if (rp_ps_push_pull(ps, grad, 0.01f, values) != RP_OK) {
            printf("worker %d: error after %.2f s: %s\n", rank, MPI_Wtime() - last,
                   rp_last_error());
            fflush(stdout);
            break;
        }
        last = MPI_Wtime();
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    /* A second call fails at once with the same reason (the handle is broken). */
    double t0 = MPI_Wtime();
    rp_status st = rp_ps_pull(ps, values);
    printf("worker %d: next call after %.2f s: %s: %s\n", rank, MPI_Wtime() - t0,
           rp_status_name(st), rp_last_error());
    fflush(stdout);
    write_file(argv[1], rank, "done", 1);
    sleep(1);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
}
