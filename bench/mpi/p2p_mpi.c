/*
 * p2p_mpi.c - point-to-point ping-pong, 8 B to 64 MiB: OpenMPI's own
 * MPI_Send/MPI_Recv ("raw") against replicator's rp_comm_send/rp_comm_recv
 * on the MPI backend (checked: tag, count and dtype; deadline-polled), timed
 * in alternating rounds in one run, each size's figure the median of the
 * rounds. One way = half a round trip; bandwidth = bytes / one way.
 *
 *   mpirun -np 2 build/p2p_mpi                 raw and ours, between 2 ranks
 *   build/p2p_mpi --threads                    the threads backend (2 threads of
 *                                              this process) against memcpy of
 *                                              the same bytes (no mpirun)
 *   options: --min 8 --max 64M --rounds 5 --json
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

static long long parse_bytes(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long long iters_for(long long bytes)
{
    long long it = (1ll << 29) / (bytes + 4096);
    return it < 5 ? 5 : it > 5000 ? 5000 : it;
}

static void die(const char *what)
{
    fprintf(stderr, "p2p_mpi: %s: %s\n", what, rp_last_error());
    exit(1);
}

/* ---- between 2 MPI ranks ----------------------------------------------------------------------
 */

static double pingpong_raw(MPI_Comm comm, int rank, char *buf, long long bytes, long long iters)
{
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (long long it = 0; it < iters; it++) {
        if (rank == 0) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 0, comm);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, 0, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 0, comm);
        }
    }
    return (MPI_Wtime() - t0) / (double)iters / 2;
}

static double pingpong_ours(rp_comm *c, int rank, char *buf, long long bytes, long long iters)
{
    if (rp_comm_barrier(c) != RP_OK) die("barrier");
    double t0 = rp_now_s();
    for (long long it = 0; it < iters; it++) {
        rp_status st;
        if (rank == 0) {
            st = rp_comm_send(c, buf, bytes, RP_U8, 1, 0);
            if (st == RP_OK) st = rp_comm_recv(c, buf, bytes, RP_U8, 1, 0);
        } else {
            st = rp_comm_recv(c, buf, bytes, RP_U8, 0, 0);
            if (st == RP_OK) st = rp_comm_send(c, buf, bytes, RP_U8, 0, 0);
        }
        if (st != RP_OK) die("ping-pong");
    }
    return (rp_now_s() - t0) / (double)iters / 2;
}

static int run_mpi(long long min, long long max, int rounds, int json)
{
    rp_comm *c;
    if (rp_comm_mpi_create(&c, 600) != RP_OK) die("rp_comm_mpi_create");
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (rank == 0) fprintf(stderr, "p2p_mpi: run with mpirun -np 2 (got %d ranks)\n", n);
        return 2;
    }
    MPI_Comm raw;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    if (rank == 0 && !json)
        printf("%10s %12s %12s %9s %12s %12s\n", "bytes", "raw_us", "ours_us", "ours/raw",
               "raw_GB/s", "ours_GB/s");
    char *buf = malloc((size_t)max + 1);
    if (!buf) die("malloc");
    memset(buf, 1, (size_t)max + 1);
    for (long long bytes = min; bytes <= max; bytes *= 4) {
        long long iters = iters_for(bytes);
        double t_raw[99], t_ours[99];
        pingpong_raw(raw, rank, buf, bytes, 3);
        pingpong_ours(c, rank, buf, bytes, 3);
        for (int r = 0; r < rounds; r++) {
            t_raw[r] = pingpong_raw(raw, rank, buf, bytes, iters);
            t_ours[r] = pingpong_ours(c, rank, buf, bytes, iters);
        }
        double a = median(t_raw, rounds), b = median(t_ours, rounds);
        if (rank == 0) {
            if (json)
                printf("{\"backend\":\"mpi\",\"bytes\":%lld,\"raw_us\":%.3f,\"ours_us\":%.3f,"
                       "\"ours_over_raw\":%.3f}\n",
                       bytes, a * 1e6, b * 1e6, b / a);
            else
                printf("%10lld %12.2f %12.2f %9.3f %12.3f %12.3f\n", bytes, a * 1e6, b * 1e6, b / a,
                       bytes / a / 1e9, bytes / b / 1e9);
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Comm_free(&raw);
    rp_comm_destroy(c);
    return 0;
}

/* ---- the threads backend: 2 threads of this process, against memcpy
 * ------------------------------- */

typedef struct {
    rp_comm *comm;
    char *buf;
    long long bytes, iters;
    double seconds;
} peer;

static void *peer_loop(void *p)
{
    peer *q = p;
    int rank = rp_comm_rank(q->comm);
    q->seconds = pingpong_ours(q->comm, rank, q->buf, q->bytes, q->iters);
    return NULL;
}

static double pingpong_threads(rp_comm **comms, char **bufs, long long bytes, long long iters)
{
    peer p[2];
    pthread_t th;
    for (int r = 0; r < 2; r++)
        p[r] = (peer){comms[r], bufs[r], bytes, iters, 0};
    pthread_create(&th, NULL, peer_loop, &p[1]);
    peer_loop(&p[0]);
    pthread_join(th, NULL);
    return p[0].seconds;
}

static double copy_time(char *dst, const char *src, long long bytes, long long iters)
{
    double t0 = rp_now_s();
    for (long long it = 0; it < iters; it++) {
        memcpy(dst, src, (size_t)bytes);
        __asm__ __volatile__("" ::"r"(dst) : "memory"); /* keep every copy */
    }
    return (rp_now_s() - t0) / (double)iters;
}

static int run_threads(long long min, long long max, int rounds, int json)
{
    rp_comm *comms[2];
    if (rp_comm_threads_create(comms, 2, NULL, 600) != RP_OK) die("rp_comm_threads_create");
    char *bufs[2] = {malloc((size_t)max + 1), malloc((size_t)max + 1)};
    if (!bufs[0] || !bufs[1]) die("malloc");
    memset(bufs[0], 1, (size_t)max + 1);
    memset(bufs[1], 2, (size_t)max + 1);
    if (!json)
        printf("%10s %12s %12s %12s %12s %14s\n", "bytes", "memcpy_us", "threads_us", "threads/cp",
               "memcpy_GB/s", "threads_GB/s");
    for (long long bytes = min; bytes <= max; bytes *= 4) {
        long long iters = iters_for(bytes);
        double t_cp[99], t_th[99];
        pingpong_threads(comms, bufs, bytes, 3);
        for (int r = 0; r < rounds; r++) {
            t_cp[r] = copy_time(bufs[1], bufs[0], bytes, iters);
            t_th[r] = pingpong_threads(comms, bufs, bytes, iters);
        }
        double a = median(t_cp, rounds), b = median(t_th, rounds);
        if (json)
            printf(
                "{\"backend\":\"threads\",\"bytes\":%lld,\"memcpy_us\":%.3f,\"threads_us\":%.3f}\n",
                bytes, a * 1e6, b * 1e6);
        else
            printf("%10lld %12.2f %12.2f %12.3f %12.3f %14.3f\n", bytes, a * 1e6, b * 1e6, b / a,
                   bytes / a / 1e9, bytes / b / 1e9);
        fflush(stdout);
    }
    rp_comm_destroy(comms[0]);
    rp_comm_destroy(comms[1]);
    free(bufs[0]);
    free(bufs[1]);
    return 0;
}

int main(int argc, char **argv)
{
    long long min = 8, max = 64 << 20;
    int json = 0, rounds = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--threads"))
            threads = 1;
        else if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min = parse_bytes(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = parse_bytes(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mpirun -np 2 p2p_mpi | p2p_mpi --threads; [--min 8] [--max "
                            "64M] [--rounds 5] [--json]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 99 || min < 1 || max < min) return 2;
    rp_log_set_level(RP_LOG_WARN);
    return threads ? run_threads(min, max, rounds, json) : run_mpi(min, max, rounds, json);
}
