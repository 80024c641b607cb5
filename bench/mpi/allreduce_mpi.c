/*
 * allreduce_mpi.c - all-reduce across MPI ranks on this machine (f32 sum,
 * out of place, 4 KiB to 256 MiB): OpenMPI's own MPI_Allreduce ("raw") and
 * replicator's MPI backend (rp_comm_all_reduce: checked, deadline-polled,
 * rank-order deterministic) timed in alternating rounds in one run, each
 * size's figure the median of the rounds. algbw = bytes / time, busbw =
 * algbw * 2(n-1)/n (nccl-tests).
 *
 *   mpirun -np 4 build/allreduce_mpi                  raw and ours, flat
 *   mpirun -np 2 build/allreduce_mpi --threads 2      ours, hierarchical: 2 ranks x 2 threads
 *   mpirun -np 8 build/allreduce_mpi --check          the call check's cost: ours with the
 *                                                     hashed check against ours with the full
 *                                                     exchange of calls before every call
 *   options: --min 4K --max 256M --rounds 5 --json
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"
#include "comm/comm_internal.h" /* comm_mpi_set_full_check: the knob behind --check */

static long long parse_bytes(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
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

/* What each member thread of this process runs: `iters` all-reduces on its communicator. */
typedef struct member {
    rp_comm *comm;
    float *send, *recv;
    long long count, iters;
    double seconds; /* member 0: the time of the loop, between barriers */
    rp_status status;
    pthread_t thread;
} member;

static void *member_loop(void *p)
{
    member *m = p;
    m->status = rp_comm_barrier(m->comm);
    double t0 = MPI_Wtime();
    for (long long it = 0; it < m->iters && m->status == RP_OK; it++)
        m->status = rp_comm_all_reduce(m->comm, m->send, m->recv, m->count, RP_F32, RP_SUM);
    if (m->status == RP_OK) m->status = rp_comm_barrier(m->comm);
    m->seconds = MPI_Wtime() - t0;
    return NULL;
}

/* Seconds per all-reduce through replicator's communicators, all T members of this process at once.
 */
static double time_ours(member *ms, int T, long long iters)
{
    for (int t = 0; t < T; t++) {
        ms[t].iters = iters;
        if (t > 0) pthread_create(&ms[t].thread, NULL, member_loop, &ms[t]);
    }
    member_loop(&ms[0]);
    for (int t = 1; t < T; t++)
        pthread_join(ms[t].thread, NULL);
    for (int t = 0; t < T; t++)
        if (ms[t].status != RP_OK) {
            fprintf(stderr, "allreduce_mpi: %s\n", rp_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    return ms[0].seconds / (double)iters;
}

static double time_raw(const float *send, float *recv, long long count, long long iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long long it = 0; it < iters; it++)
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    return (MPI_Wtime() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
    long long min = 4 << 10, max = 256 << 20;
    int json = 0, rounds = 5, T = 1, check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min = parse_bytes(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = parse_bytes(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check"))
            check = 1;
        else {
            fprintf(
                stderr,
                "usage: mpirun -np N allreduce_mpi [--threads T] [--check] [--min 4K] [--max 256M] "
                "[--rounds 5] [--json]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 99 || T < 1 || T > 64) return 2;
    rp_log_set_level(RP_LOG_WARN);
    /* Replicator initialises MPI (thread support for its hierarchical members). */
    rp_comm *comms[64];
    rp_status st = T == 1 ? rp_comm_mpi_create(&comms[0], 600) : rp_comm_hier_create(comms, T, 600);
    if (st != RP_OK) {
        fprintf(stderr, "allreduce_mpi: %s\n", rp_last_error());
        return 1;
    }
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int members = n * T;
    bool raw = T == 1; /* MPI_Allreduce has one member per rank: compared with the flat backend */
    if (rank == 0 && !json && !check)
        printf("%6s %7s %10s %12s %12s %9s %10s\n", "ranks", "threads", "bytes", "raw_us",
               "ours_us", "ours/raw", "busbw_GB/s");
    if (rank == 0 && !json && check)
        printf("%6s %7s %10s %12s %12s %11s\n", "ranks", "threads", "bytes", "hashed_us", "full_us",
               "full/hashed");
    member ms[64];
    for (long long bytes = min; bytes <= max; bytes *= 4) {
        long long count = bytes / 4;
        for (int t = 0; t < T; t++) {
            ms[t] = (member){.comm = comms[t], .count = count};
            ms[t].send = malloc((size_t)bytes);
            ms[t].recv = malloc((size_t)bytes);
            if (!ms[t].send || !ms[t].recv) MPI_Abort(MPI_COMM_WORLD, 1);
            for (long long i = 0; i < count; i++)
                ms[t].send[i] = (float)((i + rank * T + t) & 7);
            memset(ms[t].recv, 0, (size_t)bytes);
        }
        long long iters = (1ll << 30) / (bytes * members);
        if (iters < 5) iters = 5;
        if (iters > 2000) iters = 2000;
        double t_raw[99], t_ours[99];
        time_ours(ms, T, 2); /* warm-up: scratch, MPI's buffers */
        if (raw) time_raw(ms[0].send, ms[0].recv, count, 2);
        if (check) {
            /* The same calls with the full exchange of calls (the old check), in alternating
             * rounds. */
            double t_full[99];
            for (int r = 0; r < rounds; r++) {
                comm_mpi_set_full_check(1);
                t_full[r] = time_ours(ms, T, iters);
                comm_mpi_set_full_check(0);
                t_ours[r] = time_ours(ms, T, iters);
            }
            double hashed = median(t_ours, rounds), full = median(t_full, rounds);
            if (rank == 0) {
                if (json)
                    printf("{\"ranks\":%d,\"threads\":%d,\"bytes\":%lld,\"hashed_us\":%.2f,\"full_"
                           "us\":%.2f}\n",
                           n, T, bytes, hashed * 1e6, full * 1e6);
                else
                    printf("%6d %7d %10lld %12.1f %12.1f %11.3f\n", n, T, bytes, hashed * 1e6,
                           full * 1e6, full / hashed);
                fflush(stdout);
            }
            for (int t = 0; t < T; t++) {
                free(ms[t].send);
                free(ms[t].recv);
            }
            continue;
        }
        for (int r = 0; r < rounds; r++) {
            if (raw) t_raw[r] = time_raw(ms[0].send, ms[0].recv, count, iters);
            t_ours[r] = time_ours(ms, T, iters);
        }
        double ours = median(t_ours, rounds), base = raw ? median(t_raw, rounds) : 0;
        double busbw = (double)bytes / ours / 1e9 * 2.0 * (members - 1) / members;
        if (rank == 0) {
            if (json)
                printf(
                    "{\"ranks\":%d,\"threads\":%d,\"bytes\":%lld,\"raw_us\":%.2f,\"ours_us\":%.2f,"
                    "\"ours_over_raw\":%.3f,\"busbw_gbs\":%.3f}\n",
                    n, T, bytes, base * 1e6, ours * 1e6, raw ? ours / base : 0.0, busbw);
            else if (raw)
                printf("%6d %7d %10lld %12.1f %12.1f %9.3f %10.2f\n", n, T, bytes, base * 1e6,
                       ours * 1e6, ours / base, busbw);
            else
                printf("%6d %7d %10lld %12s %12.1f %9s %10.2f\n", n, T, bytes, "-", ours * 1e6, "-",
                       busbw);
            fflush(stdout);
        }
        for (int t = 0; t < T; t++) {
            free(ms[t].send);
            free(ms[t].recv);
        }
    }
    for (int t = 0; t < T; t++)
        rp_comm_destroy(comms[t]);
    return 0;
}
