/*
 * test_comm_mpi.c - the MPI communicator, run by CTest under mpirun with 2
 * and 4 ranks (oversubscribed), and the hierarchical one: `test_comm_mpi T`
 * runs T member threads in each rank (CTest: 2 ranks x 2 threads). Each
 * member checks its own results and prints what failed; the exit status is
 * non-zero if anything failed anywhere.
 *
 * The reference reduces in the backend's order: members in rank order, or
 * for the hierarchical backend each process's members, then the processes.
 * The hierarchical results are also compared with the flat order (what 4
 * ranks of the MPI backend compute, bitwise, in test_comm_mpi_4): equal up
 * to rounding. bf16 sums are the exception: on every backend the f32 sum of
 * the bf16 values in flat rank order, rounded once, so bitwise equal to it.
 *
 *  1. every collective against a reference computed here, for counts 0, 1,
 *     odd, not divisible by the rank count and 1M elements (reduce_scatter_v:
 *     blocks of their own sizes, some empty); every reduction
 *     op and dtype; in place and out of place; broadcast from every root;
 *     the results bitwise equal to a rank-order reduction;
 *  2. a split by parity, reduced within each group;
 *  3. a count mismatch: RP_ERR_MISMATCH on every rank, naming both counts;
 *     a dtype mismatch (f32 against bf16), naming both dtypes;
 *  4. a rank whose step failed (rp_comm_leave): the others fail at once,
 *     naming it and its status;
 *  5. a rank that arrives after the timeout: the others get RP_ERR_TIMEOUT
 *     naming it by rank, within a bounded time.
 */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/replicator.h"

static atomic_int failures;
static _Thread_local int rank_; /* this member's rank */
static int size_, per_ = 1;     /* members in all; members in each process */

#include "mpi_check.h"

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
        case RP_F32:
            ((float *)buf)[i] = (float)v;
            break;
        case RP_F64:
            ((double *)buf)[i] = v;
            break;
        case RP_I32:
            ((int32_t *)buf)[i] = (int32_t)v;
            break;
        case RP_I64:
            ((int64_t *)buf)[i] = (int64_t)v * 1000003;
            break;
        case RP_U8:
            ((uint8_t *)buf)[i] = (uint8_t)(int)v;
            break;
        case RP_BF16:
            /* Scaled over 2^24, so that the f32 sum of a few rounds and only rank order gives
               the reference bits. */
            ((uint16_t *)buf)[i] =
                rp_bf16_from_f32(ldexpf((float)v, (int)(((off + i) * 7 + r * 13) % 24) - 12));
            break;
        }
    }
}

/* out op= in, elementwise. */
static void combine(void *out, const void *in, rp_dtype dt, rp_reduce_op op, int64_t n)
{
    const char *tmp = in;
    for (int64_t i = 0; i < n && op != RP_FIRST; i++) {
#define RED(T, U)                                                                                  \
    {                                                                                              \
        T *o = (T *)out + i, v = ((T *)tmp)[i];                                                    \
        if (op == RP_SUM || op == RP_MEAN)                                                         \
            *o = (T)((U)*o + (U)v);                                                                \
        else if (op == RP_MAX)                                                                     \
            *o = v > *o ? v : *o;                                                                  \
        else                                                                                       \
            *o = v < *o ? v : *o;                                                                  \
    }
        switch (dt) {
        case RP_F32:
            RED(float, float) break;
        case RP_F64:
            RED(double, double) break;
        case RP_I32:
            RED(int32_t, uint32_t) break;
        case RP_I64:
            RED(int64_t, uint64_t) break;
        case RP_U8:
        case RP_BF16:
            break; /* not reduced */
        }
    }
}

/*
 * bf16, on every backend: the members' values widened to f32 and reduced in rank order in f32
 * (a mean divided by the member count in f32), rounded to bf16 once.
 */
static void reference_bf16(rp_bf16 *out, rp_reduce_op op, int64_t off, int64_t n)
{
    rp_bf16 *in = malloc((size_t)n * sizeof *in + 8);
    float *acc = malloc((size_t)n * sizeof *acc + 8);
    for (int q = 0; q < size_; q++) {
        fill(in, RP_BF16, q, off, n);
        for (int64_t i = 0; i < n; i++) {
            float x = rp_bf16_to_f32(in[i]);
            if (q == 0 || op == RP_SUM || op == RP_MEAN)
                acc[i] = q == 0 ? x : acc[i] + x;
            else if (op == RP_MAX)
                acc[i] = x > acc[i] ? x : acc[i];
            else if (op == RP_MIN)
                acc[i] = x < acc[i] ? x : acc[i];
        }
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = rp_bf16_from_f32(op == RP_MEAN ? acc[i] / (float)size_ : acc[i]);
    free(in);
    free(acc);
}

/*
 * The reduction of element range [off, off+n) of every member's input,
 * adding each process's `per` members in order, then the processes in order
 * (per = 1: the flat rank order). bf16: the flat order whatever `per`.
 */
static void reference_grouped(void *out, rp_dtype dt, rp_reduce_op op, int64_t off, int64_t n,
                              int per)
{
    if (dt == RP_BF16) {
        reference_bf16(out, op, off, n);
        return;
    }
    size_t es = rp_dtype_size(dt);
    char *tmp = malloc((size_t)n * es + 8), *part = malloc((size_t)n * es + 8);
    for (int p = 0; p < size_ / per; p++) {
        fill(part, dt, p * per, off, n);
        for (int t = 1; t < per; t++) {
            fill(tmp, dt, p * per + t, off, n);
            combine(part, tmp, dt, op, n);
        }
        if (p == 0)
            memcpy(out, part, (size_t)n * es);
        else
            combine(out, part, dt, op, n);
    }
    for (int64_t i = 0; i < n && op == RP_MEAN && size_ > 1; i++) {
        switch (dt) {
        case RP_F32:
            ((float *)out)[i] /= (float)size_;
            break;
        case RP_F64:
            ((double *)out)[i] /= size_;
            break;
        case RP_I32:
            ((int32_t *)out)[i] /= size_;
            break;
        case RP_I64:
            ((int64_t *)out)[i] /= size_;
            break;
        case RP_U8:
        case RP_BF16:
            break;
        }
    }
    free(tmp);
    free(part);
}

static void reference(void *out, rp_dtype dt, rp_reduce_op op, int64_t off, int64_t n)
{
    reference_grouped(out, dt, op, off, n, per_);
}

/*
 * Hierarchical only: `got` equals the flat rank-order reduction up to
 * rounding - |got - flat| <= eps * sum of |inputs| - and exactly for
 * integers, max, min and first.
 */
static void check_near_flat(const void *got, rp_dtype dt, rp_reduce_op op, int64_t n)
{
    if (per_ == 1 || n == 0) return;
    size_t es = rp_dtype_size(dt);
    char *flat = malloc((size_t)n * es + 8), *one = malloc((size_t)n * es + 8);
    reference_grouped(flat, dt, op, 0, n, 1);
    bool exact = dt == RP_I32 || dt == RP_I64 || dt == RP_BF16 || (op != RP_SUM && op != RP_MEAN);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++) {
        if (exact) {
            if (memcmp((const char *)got + i * (int64_t)es, flat + i * (int64_t)es, es)) bad = i;
            continue;
        }
        double mag = 0, g, f;
        for (int q = 0; q < size_; q++) {
            fill(one, dt, q, i, 1);
            mag += fabs(dt == RP_F32 ? (double)*(float *)one : *(double *)one);
        }
        g = dt == RP_F32 ? ((const float *)got)[i] : ((const double *)got)[i];
        f = dt == RP_F32 ? ((float *)flat)[i] : ((double *)flat)[i];
        if (fabs(g - f) > (dt == RP_F32 ? 1e-6 : 1e-14) * mag) bad = i;
    }
    CHECK(bad < 0, "all_reduce(%lld, %s, %s): element %lld is not the flat reduction", (long long)n,
          rp_dtype_name(dt), rp_reduce_op_name(op), (long long)bad);
    free(flat);
    free(one);
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
    CHECK(memcmp(in_place ? send : recv, want, (size_t)count * es) == 0,
          "all_reduce(%lld, %s, %s%s) differs", (long long)count, rp_dtype_name(dt),
          rp_reduce_op_name(op), in_place ? ", in place" : "");
    if (count < 10000) check_near_flat(in_place ? send : recv, dt, op, count);
    free(send);
    free(recv);
    free(want);
}

static void test_reduce_scatter(rp_comm *c, int64_t count, rp_dtype dt, rp_reduce_op op,
                                bool in_place)
{
    size_t es = rp_dtype_size(dt), all = (size_t)count * es * (size_t)size_ + 8;
    char *send = malloc(all), *recv = malloc((size_t)count * es + 8),
         *want = malloc((size_t)count * es + 8);
    fill(send, dt, rank_, 0, count * size_);
    reference(want, dt, op, count * rank_, count);
    char *out = in_place ? send + (size_t)count * es * (size_t)rank_ : recv;
    rp_status st = rp_comm_reduce_scatter(c, send, out, count, dt, op);
    CHECK(st == RP_OK, "reduce_scatter: %s", rp_last_error());
    CHECK(memcmp(out, want, (size_t)count * es) == 0, "reduce_scatter(%lld, %s, %s) differs",
          (long long)count, rp_dtype_name(dt), rp_reduce_op_name(op));
    free(send);
    free(recv);
    free(want);
}

/* reduce_scatter_v: rank q's block q % 3 == 1 ? 0 : count + q elements (some empty). */
static void test_reduce_scatter_v(rp_comm *c, int64_t count, rp_dtype dt, rp_reduce_op op,
                                  bool in_place)
{
    int64_t counts[64], total = 0, at = 0;
    for (int q = 0; q < size_; q++) {
        counts[q] = q % 3 == 1 ? 0 : count + q;
        if (q < rank_) at += counts[q];
        total += counts[q];
    }
    size_t es = rp_dtype_size(dt), mine = (size_t)counts[rank_] * es;
    char *send = malloc((size_t)total * es + 8), *recv = malloc(mine + 8), *want = malloc(mine + 8);
    fill(send, dt, rank_, 0, total);
    reference(want, dt, op, at, counts[rank_]);
    char *out = in_place ? send + (size_t)at * es : recv;
    rp_status st = rp_comm_reduce_scatter_v(c, send, out, counts, dt, op);
    CHECK(st == RP_OK, "reduce_scatter_v: %s", rp_last_error());
    CHECK(memcmp(out, want, mine) == 0, "reduce_scatter_v(%lld, %s, %s%s) differs",
          (long long)count, rp_dtype_name(dt), rp_reduce_op_name(op), in_place ? ", in place" : "");
    free(send);
    free(recv);
    free(want);
}

static void test_all_gather_broadcast(rp_comm *c, int64_t count)
{
    size_t bytes = (size_t)count * sizeof(float);
    float *recv = malloc(bytes * (size_t)size_ + 8), *want = malloc(bytes * (size_t)size_ + 8);
    for (int q = 0; q < size_; q++)
        fill(want + (size_t)count * (size_t)q, RP_F32, q, 0, count);
    for (int ip = 0; ip < 2; ip++) {
        memset(recv, 0, bytes * (size_t)size_);
        float *mine = recv + (size_t)count * (size_t)rank_;
        float *send = ip ? mine : malloc(bytes + 8);
        fill(send, RP_F32, rank_, 0, count);
        CHECK(rp_comm_all_gather(c, send, recv, count, RP_F32) == RP_OK, "all_gather: %s",
              rp_last_error());
        CHECK(memcmp(recv, want, bytes * (size_t)size_) == 0, "all_gather(%lld%s) differs",
              (long long)count, ip ? ", in place" : "");
        if (!ip) free(send);
    }
    for (int root = 0; root < size_; root++) {
        float *buf = malloc(bytes + 8);
        fill(buf, RP_F32, rank_, 0, count);
        CHECK(rp_comm_broadcast(c, buf, count, RP_F32, root) == RP_OK, "broadcast: %s",
              rp_last_error());
        CHECK(memcmp(buf, want + (size_t)count * (size_t)root, bytes) == 0,
              "broadcast(%lld, root %d) differs", (long long)count, root);
        free(buf);
    }
    free(recv);
    free(want);
}

static void test_collectives(rp_comm *c)
{
    const int64_t counts[] = {0, 1, 1001, 7 * size_ + 3, 1 << 20};
    const rp_dtype dts[] = {RP_F32, RP_F64, RP_I32, RP_I64, RP_BF16};
    for (int k = 0; k < 5; k++) {
        bool big = counts[k] > 10000;
        for (int t = 0; t < 5; t++)
            for (int op = RP_SUM; op <= RP_FIRST; op++) {
                /* 1M elements: f32 and bf16 sums (the gradients' types). */
                if (big && ((t > 0 && dts[t] != RP_BF16) || op != RP_SUM)) continue;
                for (int ip = 0; ip < 2; ip++) {
                    test_all_reduce(c, counts[k], dts[t], (rp_reduce_op)op, ip);
                    test_reduce_scatter(c, big ? counts[k] / size_ : counts[k], dts[t],
                                        (rp_reduce_op)op, ip);
                    test_reduce_scatter_v(c, big ? counts[k] / size_ : counts[k], dts[t],
                                          (rp_reduce_op)op, ip);
                }
            }
        test_all_gather_broadcast(c, big ? counts[k] / size_ : counts[k]);
    }
    CHECK(rp_comm_barrier(c) == RP_OK, "barrier: %s", rp_last_error());
}

/* A group of `color`: members with the same color, in rank order. */
static void check_group(rp_comm *g, int color, int (*color_of)(int))
{
    int n = 0, pos = -1, members[64];
    for (int q = 0; q < size_; q++)
        if (color_of(q) == color) {
            if (q == rank_) pos = n;
            members[n++] = q;
        }
    CHECK(rp_comm_size(g) == n && rp_comm_rank(g) == pos,
          "group of color %d: rank %d of %d, want %d of %d", color, rp_comm_rank(g),
          rp_comm_size(g), pos, n);
    CHECK(rp_comm_replica_id(g, rp_comm_rank(g)) == rank_, "group keeps replica ids");
    int32_t x = rank_ + 1, sum = 0, want = 0, all[64], first = -1;
    for (int j = 0; j < n; j++)
        want += members[j] + 1;
    CHECK(rp_comm_all_reduce(g, &x, &sum, 1, RP_I32, RP_SUM) == RP_OK, "group all_reduce: %s",
          rp_last_error());
    CHECK(sum == want, "group of color %d: sum %d, want %d", color, sum, want);
    CHECK(rp_comm_all_reduce(g, &x, &first, 1, RP_I32, RP_FIRST) == RP_OK &&
              first == members[0] + 1,
          "group first: %d, want %d", first, members[0] + 1);
    CHECK(rp_comm_all_gather(g, &x, all, 1, RP_I32) == RP_OK, "group all_gather: %s",
          rp_last_error());
    for (int j = 0; j < n; j++)
        CHECK(all[j] == members[j] + 1, "group all_gather[%d] = %d", j, all[j]);
    int32_t b = rank_ + 100;
    CHECK(rp_comm_broadcast(g, &b, 1, RP_I32, n - 1) == RP_OK && b == members[n - 1] + 100,
          "group broadcast from its last member: %d", b);
    CHECK(rp_comm_barrier(g) == RP_OK, "group barrier: %s", rp_last_error());
}

static int by_parity(int q)
{
    return q % 2;
}
static int by_process(int q)
{
    return q / per_;
}
/* Uneven: all but the last member, and the last alone (or out, with 2 members). */
static int uneven(int q)
{
    return q < size_ - 1 ? 0 : size_ > 2 ? 1 : -1;
}

static void test_split(rp_comm *c)
{
    int (*colors[])(int) = {by_parity, by_process, uneven};
    for (int k = 0; k < 3; k++) {
        rp_comm *g = NULL;
        int color = colors[k](rank_);
        CHECK(rp_comm_split(c, color, rank_, &g) == RP_OK, "split %d: %s", k, rp_last_error());
        CHECK((g != NULL) == (color >= 0), "split %d: a group for color %d?", k, color);
        if (g) check_group(g, color, colors[k]);
        rp_comm_destroy(g);
    }
}

/* The communicators of this process's members (one, or per_ for the hierarchical backend). */
static rp_comm *comms_[64];

static void create_comms(double timeout)
{
    rp_status st = per_ == 1 ? rp_comm_mpi_create(&comms_[0], timeout)
                             : rp_comm_hier_create(comms_, per_, timeout);
    if (st != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        exit(1);
    }
}

/* The last process's members all call with count 9, the others 7: the processes disagree. */
static void test_mismatch(rp_comm *c)
{
    float buf[16] = {0};
    double t0 = rp_now_s();
    bool last = rank_ / per_ == size_ / per_ - 1;
    rp_status st = rp_comm_all_reduce(c, buf, buf, last ? 9 : 7, RP_F32, RP_SUM);
    CHECK(st == RP_ERR_MISMATCH, "mismatch: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "count 9") && strstr(rp_last_error(), "count 7"), "message: %s",
          rp_last_error());
    CHECK(rp_now_s() - t0 < 10, "mismatch took %.1f s", rp_now_s() - t0);
    st = rp_comm_barrier(c);
    CHECK(st == RP_ERR_COMM, "after a mismatch: status %d", st);
}

/* The last process's members all-reduce f32 where the others send bf16: both are named. */
static void test_mismatch_dtype(rp_comm *c)
{
    float buf[16] = {0};
    double t0 = rp_now_s();
    bool last = rank_ / per_ == size_ / per_ - 1;
    rp_status st = rp_comm_all_reduce(c, buf, buf, 8, last ? RP_F32 : RP_BF16, RP_MEAN);
    CHECK(st == RP_ERR_MISMATCH, "dtype mismatch: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "bf16, mean") && strstr(rp_last_error(), "f32, mean"),
          "message: %s", rp_last_error());
    CHECK(rp_now_s() - t0 < 10, "mismatch took %.1f s", rp_now_s() - t0);
}

/* The last process arrives after the timeout: the others get RP_ERR_TIMEOUT naming it. */
static void test_timeout(rp_comm *c)
{
    float buf[4] = {0};
    int late = size_ / per_ - 1;
    if (rank_ / per_ == late) sleep(3);
    double t0 = rp_now_s();
    rp_status st = rp_comm_all_reduce(c, buf, buf, 4, RP_F32, RP_SUM);
    double took = rp_now_s() - t0;
    if (rank_ / per_ != late) {
        char want[32];
        snprintf(want, sizeof want, "rank %d (", late);
        CHECK(st == RP_ERR_TIMEOUT, "timeout: status %d: %s", st, rp_last_error());
        CHECK(strstr(rp_last_error(), want) != NULL, "timeout message does not name %s: %s", want,
              rp_last_error());
        CHECK(took > 0.9 && took < 2.5, "timed out after %.2f s (timeout 1 s)", took);
    } else {
        /* Its peers gave up before it came: it times out too (no hang). */
        CHECK(st != RP_OK, "the late rank's call succeeded");
    }
}

/*
 * The last member's step fails (rp_comm_leave): the others, waiting in an
 * all-reduce, fail at once, naming it (in its process) or its process (in
 * the others), and leave in turn as the runtime does.
 */
static void test_leave(rp_comm *c)
{
    float buf[4] = {0};
    if (rank_ == size_ - 1) {
        rp_comm_leave(c, RP_ERR_NUMERIC, "nan on purpose");
        return;
    }
    double t0 = rp_now_s();
    rp_status st = rp_comm_all_reduce(c, buf, buf, 4, RP_F32, RP_SUM);
    char want[32];
    bool same_process = rank_ / per_ == (size_ - 1) / per_;
    if (same_process)
        snprintf(want, sizeof want, "replica %d ", size_ - 1);
    else
        snprintf(want, sizeof want, "rank %d (", (size_ - 1) / per_);
    CHECK(st == RP_ERR_COMM, "after a peer left: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), want), "message does not name '%s': %s", want, rp_last_error());
    if (per_ == 1) CHECK(strstr(rp_last_error(), "NUMERIC"), "message: %s", rp_last_error());
    CHECK(rp_now_s() - t0 < 5, "took %.1f s (timeout 30 s)", rp_now_s() - t0);
    rp_comm_leave(c, st, rp_last_error());
}

typedef struct member_arg {
    void (*fn)(rp_comm *);
    int t;
} member_arg;

static void *member_main(void *p)
{
    member_arg *a = p;
    rank_ = rp_comm_rank(comms_[a->t]);
    a->fn(comms_[a->t]);
    return NULL;
}

/* Runs fn on every member of this process, each on its own thread, over the communicators made by
 * create_comms(). */
static void on_members(void (*fn)(rp_comm *))
{
    pthread_t th[64];
    member_arg args[64];
    for (int t = 0; t < per_; t++) {
        args[t] = (member_arg){fn, t};
        if (pthread_create(&th[t], NULL, member_main, &args[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int t = 0; t < per_; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < per_; t++) {
        rp_comm_destroy(comms_[t]);
        comms_[t] = NULL;
    }
}

static void test_all(rp_comm *c)
{
    CHECK(!strcmp(rp_comm_backend(c), per_ == 1 ? "mpi" : "mpi+threads"), "backend %s",
          rp_comm_backend(c));
    test_collectives(c);
    test_split(c);
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    per_ = argc > 1 ? atoi(argv[1]) : 1;
    if (per_ < 1 || per_ > 64) {
        fprintf(stderr, "usage: test_comm_mpi [members per process, 1..64]\n");
        return 2;
    }
    create_comms(60.0);
    size_ = rp_comm_size(comms_[0]);
    int process = rp_comm_rank(comms_[0]) / per_;
    rank_ = rp_comm_rank(comms_[0]);
    CHECK(rp_comm_mpi_launched(), "started by mpirun, but rp_comm_mpi_launched() says no");
    on_members(test_all);
    create_comms(20.0);
    on_members(test_mismatch);
    MPI_Barrier(MPI_COMM_WORLD);
    create_comms(20.0);
    on_members(test_mismatch_dtype);
    MPI_Barrier(MPI_COMM_WORLD);
    create_comms(30.0);
    on_members(test_leave);
    MPI_Barrier(MPI_COMM_WORLD);
    create_comms(1.0);
    on_members(test_timeout);
    int mine = atomic_load(&failures), total = 0;
    /* The test communicators are broken; MPI_COMM_WORLD still works for the verdict. */
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (process == 0)
        printf("%s: %d ranks x %d members, %d failures\n", total ? "FAIL" : "ok", size_ / per_,
               per_, total);
    return total ? 1 : 0;
}
