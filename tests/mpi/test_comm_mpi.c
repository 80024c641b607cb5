/*
 * test_comm_mpi.c - the MPI communicator, run by CTest under mpirun with 2
 * and 4 ranks (oversubscribed). Each rank checks its own results and prints
 * what failed; the exit status is non-zero if anything failed on any rank.
 *
 *  1. every collective against a reference computed here, for counts 0, 1,
 *     odd, not divisible by the rank count and 1M elements; every reduction
 *     op and dtype; in place and out of place; broadcast from every root;
 *     the results bitwise equal to a rank-order reduction;
 *  2. a split by parity, reduced within each group;
 *  3. a count mismatch: RP_ERR_MISMATCH on every rank, naming both counts;
 *  4. a rank whose step failed (rp_comm_leave): the others fail at once,
 *     naming it and its status;
 *  5. a rank that arrives after the timeout: the others get RP_ERR_TIMEOUT
 *     naming it by rank, within a bounded time.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/replicator.h"

static int failures, rank_, size_;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank_, __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* Rank r's element i: varied exponents for floats, so only rank order gives the reference bits. */
static double value(int r, int64_t i)
{
    uint64_t h = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    return ((double)(h % 2001) - 1000.0) / ((h >> 20) % 7 + 1);
}

static void fill(void *buf, rp_dtype dt, int r, int64_t off, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = value(r, off + i);
        switch (dt) {
        case RP_F32: ((float *)buf)[i] = (float)v; break;
        case RP_F64: ((double *)buf)[i] = v; break;
        case RP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
        case RP_I64: ((int64_t *)buf)[i] = (int64_t)v * 1000003; break;
        }
    }
}

/* The rank-order reduction of element range [off, off+n) of every rank's input. */
static void reference(void *out, rp_dtype dt, rp_reduce_op op, int64_t off, int64_t n)
{
    size_t es = rp_dtype_size(dt);
    char *tmp = malloc((size_t)n * es + 8);
    fill(out, dt, 0, off, n);
    for (int q = 1; q < size_; q++) {
        fill(tmp, dt, q, off, n);
        for (int64_t i = 0; i < n && op != RP_FIRST; i++) {
#define RED(T, U)                                                                                  \
    {                                                                                              \
        T *o = (T *)out + i, v = ((T *)tmp)[i];                                                    \
        if (op == RP_SUM || op == RP_MEAN) *o = (T)((U)*o + (U)v);                                 \
        else if (op == RP_MAX) *o = v > *o ? v : *o;                                               \
        else *o = v < *o ? v : *o;                                                                 \
    }
            switch (dt) {
            case RP_F32: RED(float, float) break;
            case RP_F64: RED(double, double) break;
            case RP_I32: RED(int32_t, uint32_t) break;
            case RP_I64: RED(int64_t, uint64_t) break;
            }
        }
    }
    for (int64_t i = 0; i < n && op == RP_MEAN && size_ > 1; i++) {
        switch (dt) {
        case RP_F32: ((float *)out)[i] /= (float)size_; break;
        case RP_F64: ((double *)out)[i] /= size_; break;
        case RP_I32: ((int32_t *)out)[i] /= size_; break;
        case RP_I64: ((int64_t *)out)[i] /= size_; break;
        }
    }
    free(tmp);
}

static void test_all_reduce(rp_comm *c, int64_t count, rp_dtype dt, rp_reduce_op op, bool in_place)
{
    size_t es = rp_dtype_size(dt), bytes = (size_t)count * es + 8;
    char *send = malloc(bytes), *recv = malloc(bytes), *want = malloc(bytes);
    fill(send, dt, rank_, 0, count);
    reference(want, dt, op, 0, count);
    rp_status st = rp_comm_all_reduce(c, send, in_place ? send : recv, count, dt, op);
    CHECK(st == RP_OK, "all_reduce(%lld, %s, %s): %s", (long long)count, rp_dtype_name(dt),
          rp_reduce_op_name(op), rp_last_error());
    CHECK(memcmp(in_place ? send : recv, want, (size_t)count * es) == 0, "all_reduce(%lld, %s, %s%s) differs",
          (long long)count, rp_dtype_name(dt), rp_reduce_op_name(op), in_place ? ", in place" : "");
    free(send);
    free(recv);
    free(want);
}

static void test_reduce_scatter(rp_comm *c, int64_t count, rp_dtype dt, rp_reduce_op op, bool in_place)
{
    size_t es = rp_dtype_size(dt), all = (size_t)count * es * (size_t)size_ + 8;
    char *send = malloc(all), *recv = malloc((size_t)count * es + 8), *want = malloc((size_t)count * es + 8);
    fill(send, dt, rank_, 0, count * size_);
    reference(want, dt, op, count * rank_, count);
    char *out = in_place ? send + (size_t)count * es * (size_t)rank_ : recv;
    rp_status st = rp_comm_reduce_scatter(c, send, out, count, dt, op);
    CHECK(st == RP_OK, "reduce_scatter: %s", rp_last_error());
    CHECK(memcmp(out, want, (size_t)count * es) == 0, "reduce_scatter(%lld, %s, %s) differs", (long long)count,
          rp_dtype_name(dt), rp_reduce_op_name(op));
    free(send);
    free(recv);
    free(want);
}

static void test_all_gather_broadcast(rp_comm *c, int64_t count)
{
    size_t bytes = (size_t)count * sizeof(float);
    float *recv = malloc(bytes * (size_t)size_ + 8), *want = malloc(bytes * (size_t)size_ + 8);
    for (int q = 0; q < size_; q++) fill(want + (size_t)count * (size_t)q, RP_F32, q, 0, count);
    for (int ip = 0; ip < 2; ip++) {
        memset(recv, 0, bytes * (size_t)size_);
        float *mine = recv + (size_t)count * (size_t)rank_;
        float *send = ip ? mine : malloc(bytes + 8);
        fill(send, RP_F32, rank_, 0, count);
        CHECK(rp_comm_all_gather(c, send, recv, count, RP_F32) == RP_OK, "all_gather: %s", rp_last_error());
        CHECK(memcmp(recv, want, bytes * (size_t)size_) == 0, "all_gather(%lld%s) differs", (long long)count,
              ip ? ", in place" : "");
        if (!ip) free(send);
    }
    for (int root = 0; root < size_; root++) {
        float *buf = malloc(bytes + 8);
        fill(buf, RP_F32, rank_, 0, count);
        CHECK(rp_comm_broadcast(c, buf, count, RP_F32, root) == RP_OK, "broadcast: %s", rp_last_error());
        CHECK(memcmp(buf, want + (size_t)count * (size_t)root, bytes) == 0, "broadcast(%lld, root %d) differs",
              (long long)count, root);
        free(buf);
    }
    free(recv);
    free(want);
}

static void test_collectives(rp_comm *c)
{
    const int64_t counts[] = {0, 1, 1001, 7 * size_ + 3, 1 << 20};
    const rp_dtype dts[] = {RP_F32, RP_F64, RP_I32, RP_I64};
    for (int k = 0; k < 5; k++) {
        bool big = counts[k] > 10000;
        for (int t = 0; t < 4; t++)
            for (int op = RP_SUM; op <= RP_FIRST; op++) {
                if (big && (t > 0 || op != RP_SUM)) continue;
                for (int ip = 0; ip < 2; ip++) {
                    test_all_reduce(c, counts[k], dts[t], (rp_reduce_op)op, ip);
                    test_reduce_scatter(c, big ? counts[k] / size_ : counts[k], dts[t], (rp_reduce_op)op, ip);
                }
            }
        test_all_gather_broadcast(c, big ? counts[k] / size_ : counts[k]);
    }
    CHECK(rp_comm_barrier(c) == RP_OK, "barrier: %s", rp_last_error());
}

static void test_split(rp_comm *c)
{
    rp_comm *g = NULL;
    CHECK(rp_comm_split(c, rank_ % 2, rank_, &g) == RP_OK, "split: %s", rp_last_error());
    if (!g) return;
    CHECK(rp_comm_size(g) == (size_ + 1 - rank_ % 2) / 2, "group size %d", rp_comm_size(g));
    int32_t x = rank_, sum = 0;
    CHECK(rp_comm_all_reduce(g, &x, &sum, 1, RP_I32, RP_SUM) == RP_OK, "group all_reduce: %s", rp_last_error());
    int want = 0;
    for (int q = rank_ % 2; q < size_; q += 2) want += q;
    CHECK(sum == want, "group sum %d, want %d", sum, want);
    CHECK(rp_comm_replica_id(g, rp_comm_rank(g)) == rank_, "group keeps replica ids");
    rp_comm_destroy(g);
}

static void test_mismatch(void)
{
    rp_comm *c;
    CHECK(rp_comm_mpi_create(&c, 20.0) == RP_OK, "create: %s", rp_last_error());
    float buf[16] = {0};
    double t0 = rp_now_s();
    rp_status st = rp_comm_all_reduce(c, buf, buf, rank_ == 1 ? 9 : 7, RP_F32, RP_SUM);
    CHECK(st == RP_ERR_MISMATCH, "mismatch: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "count 9") && strstr(rp_last_error(), "count 7"), "message: %s", rp_last_error());
    CHECK(rp_now_s() - t0 < 10, "mismatch took %.1f s", rp_now_s() - t0);
    st = rp_comm_barrier(c);
    CHECK(st == RP_ERR_COMM, "after a mismatch: status %d", st);
    rp_comm_destroy(c);
}

static void test_timeout(void)
{
    rp_comm *c;
    CHECK(rp_comm_mpi_create(&c, 1.0) == RP_OK, "create: %s", rp_last_error());
    float buf[4] = {0};
    if (rank_ == size_ - 1) sleep(3);
    double t0 = rp_now_s();
    rp_status st = rp_comm_all_reduce(c, buf, buf, 4, RP_F32, RP_SUM);
    double took = rp_now_s() - t0;
    if (rank_ != size_ - 1) {
        char want[32];
        snprintf(want, sizeof want, "rank %d (", size_ - 1);
        CHECK(st == RP_ERR_TIMEOUT, "timeout: status %d: %s", st, rp_last_error());
        CHECK(strstr(rp_last_error(), want) != NULL, "timeout message does not name %s: %s", want, rp_last_error());
        CHECK(took > 0.9 && took < 2.5, "timed out after %.2f s (timeout 1 s)", took);
    } else {
        /* Its peers gave up before it came: it times out too (no hang). */
        CHECK(st != RP_OK, "the late rank's call succeeded");
    }
    rp_comm_destroy(c);
}

/* The last rank's step fails (rp_comm_leave): the others, waiting in an all-reduce, fail at once. */
static void test_leave(void)
{
    rp_comm *c;
    CHECK(rp_comm_mpi_create(&c, 30.0) == RP_OK, "create: %s", rp_last_error());
    float buf[4] = {0};
    if (rank_ == size_ - 1) {
        rp_comm_leave(c, RP_ERR_NUMERIC, "nan on purpose");
    } else {
        double t0 = rp_now_s();
        rp_status st = rp_comm_all_reduce(c, buf, buf, 4, RP_F32, RP_SUM);
        char want[32];
        snprintf(want, sizeof want, "rank %d (", size_ - 1);
        CHECK(st == RP_ERR_COMM, "after a peer left: status %d: %s", st, rp_last_error());
        CHECK(strstr(rp_last_error(), want) && strstr(rp_last_error(), "NUMERIC"), "message: %s", rp_last_error());
        CHECK(rp_now_s() - t0 < 5, "took %.1f s (timeout 30 s)", rp_now_s() - t0);
    }
    rp_comm_destroy(c);
}

int main(void)
{
    rp_log_set_level(RP_LOG_WARN);
    rp_comm *c;
    if (rp_comm_mpi_create(&c, 60.0) != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        return 1;
    }
    rank_ = rp_comm_rank(c);
    size_ = rp_comm_size(c);
    CHECK(!strcmp(rp_comm_backend(c), "mpi"), "backend %s", rp_comm_backend(c));
    CHECK(rp_comm_mpi_launched(), "started by mpirun, but rp_comm_mpi_launched() says no");
    test_collectives(c);
    test_split(c);
    rp_comm_destroy(c);
    test_mismatch();
    MPI_Barrier(MPI_COMM_WORLD);
    test_leave();
    MPI_Barrier(MPI_COMM_WORLD);
    test_timeout();
    int total = 0;
    /* The test communicators are broken; MPI_COMM_WORLD still works for the verdict. */
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("%s: %d ranks, %d failures\n", total ? "FAIL" : "ok", size_, total);
    return total ? 1 : 0;
}
