/*
 * allreduce_mpi.c - OpenMPI's MPI_Allreduce (f32 sum, out of place) on this
 * machine, timed like `replicator bench allreduce` so the two tables sit side
 * by side: algbw = bytes/time, busbw = algbw * 2(n-1)/n (nccl-tests).
 *
 *   mpirun -np 2 build/allreduce_mpi [--min 4K] [--max 256M] [--json]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long parse_bytes(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    else if (*end == 'G' || *end == 'g') v <<= 30;
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    long long min = 4 << 10, max = 256 << 20;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--min") && i + 1 < argc) min = parse_bytes(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = parse_bytes(argv[++i]);
    }
    if (rank == 0 && !json)
        printf("%8s %10s %12s %10s %10s\n", "ranks", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    for (long long bytes = min; bytes <= max; bytes *= 4) {
        long long count = bytes / 4;
        float *send = malloc((size_t)bytes), *recv = malloc((size_t)bytes);
        if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
        for (long long i = 0; i < count; i++) send[i] = (float)((i + rank) & 7);
        memset(recv, 0, (size_t)bytes);
        long long iters = (1ll << 30) / (bytes * n);
        if (iters < 5) iters = 5;
        if (iters > 2000) iters = 2000;
        for (int w = 0; w < 2; w++) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long long it = 0; it < iters; it++)
            MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / (double)iters;
        double algbw = (double)bytes / t / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        if (rank == 0) {
            if (json)
                printf("{\"backend\":\"mpi\",\"replicas\":%d,\"bytes\":%lld,\"time_us\":%.2f,"
                       "\"algbw_gbs\":%.3f,\"busbw_gbs\":%.3f}\n", n, bytes, t * 1e6, algbw, busbw);
            else
                printf("%8d %10lld %12.1f %10.2f %10.2f\n", n, bytes, t * 1e6, algbw, busbw);
            fflush(stdout);
        }
        free(send);
        free(recv);
    }
    MPI_Finalize();
    return 0;
}
