/*
 * bench_comm.c - `replicator bench allreduce`: the threads backend's
 * all-reduce bandwidth, as nccl-tests report it, next to memcpy's, with f32
 * payloads or (--precision bf16) bf16 ones, as --grad-dtype bf16 sends.
 *
 * For a buffer of S bytes taking t seconds: algorithm bandwidth S/t, bus
 * bandwidth S/t * 2(n-1)/n (nccl-tests' correction, comparable across
 * member counts). The memory-traffic bound: every member's S bytes must be
 * read and written once, so with n threads each copying S bytes in time t_c
 * (memcpy, the same thread count) no all-reduce beats algbw = S / t_c.
 * The MPI peer: bench/mpi/allreduce_mpi.c, the same table from MPI_Allreduce.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct comm_job {
    int64_t bytes;
    int iters;
    bool in_place;
    rp_dtype dtype; /* the payload's: RP_F32 or RP_BF16 */
} comm_job;

#define ROUNDS 5

/* Seconds per call of `what` (0 all-reduce, 1 memcpy) over job->iters calls, between barriers. */
static rp_status time_calls(rp_replica *rep, const comm_job *job, void *send, void *recv, int what,
                            double *seconds)
{
    int64_t count = job->bytes / (int64_t)rp_dtype_size(job->dtype);
    void *out = job->in_place ? send : recv;
    RP_CHECK(rp_barrier(rep));
    double t0 = rp_now_s();
    for (int it = 0; it < job->iters; it++) {
        if (what == 0)
            RP_CHECK(rp_all_reduce(rep, send, out, count, job->dtype, RP_SUM));
        else
            memcpy(recv, send, (size_t)job->bytes);
    }
    RP_CHECK(rp_barrier(rep));
    *seconds = (rp_now_s() - t0) / job->iters;
    return RP_OK;
}

/*
 * The all-reduce and memcpy timings alternate in rounds and each reports its
 * median round, so a burst of load from the shared machine hits both alike.
 */
static rp_status bench_size(rp_replica *rep, void *arg)
{
    const comm_job *job = arg;
    rp_status status = RP_OK;
    void *send = rp_alloc((size_t)job->bytes), *recv = rp_alloc((size_t)job->bytes);
    int64_t count = job->bytes / (int64_t)rp_dtype_size(job->dtype);
    double t_ar[ROUNDS], t_copy[ROUNDS];
    if (!send || !recv) {
        status = rp_last_status();
        goto cleanup;
    }
    /* Small integers: sums stay exact, and the pages are touched before timing. */
    for (int64_t i = 0; i < count; i++) {
        float x = (float)((i + rp_replica_id(rep)) & 7);
        if (job->dtype == RP_BF16)
            ((rp_bf16 *)send)[i] = rp_bf16_from_f32(x);
        else
            ((float *)send)[i] = x;
    }
    memset(recv, 0, (size_t)job->bytes);
    RP_TRY(rp_all_reduce(rep, send, job->in_place ? send : recv, count, job->dtype, RP_SUM));
    for (int k = 0; k < ROUNDS; k++) {
        RP_TRY(time_calls(rep, job, send, recv, 0, &t_ar[k]));
        RP_TRY(time_calls(rep, job, send, recv, 1, &t_copy[k]));
    }
    RP_TRY(rp_replica_report(rep, "allreduce_s", rp_bench_median(t_ar, ROUNDS), RP_MAX));
    RP_TRY(rp_replica_report(rep, "memcpy_s", rp_bench_median(t_copy, ROUNDS), RP_MAX));
cleanup:
    rp_free(recv);
    rp_free(send);
    return status;
}

static bool parse_list(const char *s, int *out, int *n, int max)
{
    *n = 0;
    while (*s && *n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 256) return false;
        out[(*n)++] = (int)v;
        if (*end && *end != ',') return false;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

/* "4096", "4K", "256M", "1G": 4 bytes to 64 GiB. */
static bool parse_bytes(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 1 || v > (1LL << 36)) return false;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    *out = v;
    return !*end && v >= 4 && v <= (1LL << 36);
}

int rp_cli_bench_allreduce(int argc, char **argv)
{
    int counts[8] = {2, 4}, ncounts = 2;
    int64_t min = 4 << 10, max = 256 << 20;
    bool json = false, in_place = false;
    rp_dtype dtype = RP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: replicator bench allreduce [--replicas 2,4] [--min 4K] [--max 256M] "
                   "[--in-place] [--precision f32|bf16] [--json]\n\n"
                   "All-reduce (sum) bandwidth of the threads backend for buffer sizes from\n"
                   "--min to --max (x4 steps), next to memcpy at the same size and thread count;\n"
                   "the two alternate in 5 rounds and each reports its median round.\n"
                   "algbw = bytes/time; busbw = algbw * 2(n-1)/n (as nccl-tests); bound = the\n"
                   "memory-traffic bound on algbw (bytes / memcpy time, each member copying).\n"
                   "--precision: the payload's type, f32 (default) or bf16 (summed in f32, as\n"
                   "--grad-dtype bf16 sends gradients); bytes are the payload's.\n");
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (!strcmp(a, "--in-place")) {
            in_place = true;
            continue;
        } else if (!v) {
            ok = false;
        } else if (!strcmp(a, "--replicas")) {
            ok = parse_list(v, counts, &ncounts, 8);
        } else if (!strcmp(a, "--min")) {
            ok = parse_bytes(v, &min);
        } else if (!strcmp(a, "--max")) {
            ok = parse_bytes(v, &max);
        } else if (!strcmp(a, "--precision")) {
            ok = rp_bench_precision_parse(v, &dtype);
        } else {
            ok = false;
        }
        if (!ok) {
            fprintf(stderr, "replicator bench allreduce: bad option %s %s (see --help)\n", a,
                    v ? v : "");
            return 2;
        }
        i++;
    }
    if (!json) {
        printf("all-reduce (sum) of %s payloads, threads backend\n", rp_dtype_name(dtype));
        printf("%8s %10s %12s %10s %10s %10s %8s\n", "replicas", "bytes", "time_us", "algbw_GB/s",
               "busbw_GB/s", "bound_GB/s", "of_bound");
    }
    for (int c = 0; c < ncounts; c++) {
        int n = counts[c];
        rp_config cfg = rp_config_default();
        cfg.backend = RP_BACKEND_THREADS;
        cfg.replicas = n;
        cfg.threads_per_replica = 1;
        rp_replicator *r = NULL;
        if (rp_replicator_create(&r, &cfg) != RP_OK) {
            fprintf(stderr, "replicator bench allreduce: error: %s\n", rp_last_error());
            return 1;
        }
        for (int64_t bytes = min; bytes <= max; bytes *= 4) {
            /* About 0.2 s per round, at least 2 calls. */
            int64_t iters = ((int64_t)1 << 28) / (bytes * n);
            comm_job job = {bytes,
                            (int)(iters < 2      ? 2
                                  : iters > 2000 ? 2000
                                                 : iters),
                            in_place, dtype};
            double t_ar, t_copy;
            if (rp_replicator_run(r, bench_size, &job) != RP_OK ||
                rp_replicator_result(r, "allreduce_s", &t_ar) != RP_OK ||
                rp_replicator_result(r, "memcpy_s", &t_copy) != RP_OK) {
                fprintf(stderr, "replicator bench allreduce: error: %s\n", rp_last_error());
                rp_replicator_destroy(r);
                return 1;
            }
            double algbw = (double)bytes / t_ar / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
            double bound = (double)bytes / t_copy / 1e9;
            if (json)
                printf(
                    "{\"backend\":\"threads\",\"replicas\":%d,\"bytes\":%lld,\"in_place\":%s,"
                    "\"precision\":\"%s\",\"time_us\":%.2f,\"algbw_gbs\":%.3f,\"busbw_gbs\":%.3f,"
                    "\"bound_gbs\":%.3f}\n",
                    n, (long long)bytes, in_place ? "true" : "false", rp_dtype_name(dtype),
                    t_ar * 1e6, algbw, busbw, bound);
            else
                printf("%8d %10lld %12.1f %10.2f %10.2f %10.2f %7.0f%%\n", n, (long long)bytes,
                       t_ar * 1e6, algbw, busbw, bound, 100 * algbw / bound);
            fflush(stdout);
        }
        rp_replicator_destroy(r);
    }
    return 0;
}
