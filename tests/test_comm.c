/*
 * test_comm.c - the threads-backend communicator (replicator/comm.h).
 *
 * Every collective against a plain reference computed here (N = 1..8 members,
 * every dtype and reduction (bf16 sums against an f32 sum in rank order,
 * rounded once, and hand-computed cases where any other rule differs), in place and out of place,
 * counts from 0 to 64 MiB, broadcast from every root), the barrier, split, the call checks
 * (mismatch, timeout, a member leaving), the sequence counter and
 * determinism.
 *
 * Each member runs on its own pthread with its own handle. cmocka's asserts
 * are not thread-safe, so a member only records what happened (status,
 * time, rp_last_error() read on its own thread) and the main thread checks
 * it after joining. Every join is bounded: a collective that hangs ends the
 * process with a message instead of hanging the test.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np, strcasestr */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "replicator/comm.h"
#include "replicator/core.h"

#define MAX_MEMBERS     8
#define GUARD_BYTES     64    /* checked after every output buffer */
#define SENTINEL        0xA5  /* fill byte of output buffers and guards */
#define JOIN_LIMIT_S    120.0 /* longest a team of members may run */
#define SWEEP_TIMEOUT_S 60.0  /* communicator timeout where nothing should time out */
#define BIG_BYTES       ((int64_t)64 << 20)

/* Replica ids for messages: numbers that cannot be mistaken for a line number or a count. */
static const int IDS[MAX_MEMBERS] = {9000, 9037, 9074, 9111, 9148, 9185, 9222, 9259};

/* ---- a team of members, one thread each ---------------------------------- */

/* What one call returned, how long it took and the message, read on the member's thread. */
typedef struct {
    rp_status status;
    double elapsed_s;
    char error[1024];
} outcome;

typedef struct team team;

typedef struct {
    team *team;
    int rank;
    rp_comm *comm;
    outcome out[6]; /* the calls a test records, in the order it defines */
    int bad;        /* checks that failed on the member's thread */
    char bad_what[256];
} member;

typedef void (*member_fn)(member *m, void *ctx);

struct team {
    int n;
    rp_comm *comms[MAX_MEMBERS];
    member m[MAX_MEMBERS];
    member_fn fn;
    void *ctx;
};

static void outcome_set(outcome *o, rp_status status, double t0)
{
    o->status = status;
    o->elapsed_s = rp_now_s() - t0;
    snprintf(o->error, sizeof o->error, "%s", status == RP_OK ? "" : rp_last_error());
}

static void member_fail(member *m, const char *what)
{
    if (m->bad++ == 0) snprintf(m->bad_what, sizeof m->bad_what, "%s", what);
}

/* Polls until *v >= want; false after limit_s (so no wait in a member is unbounded). */
static bool wait_until(atomic_int *v, int want, double limit_s)
{
    double end = rp_now_s() + limit_s;
    while (atomic_load(v) < want) {
        if (rp_now_s() > end) return false;
        tu_sleep_s(0.001);
    }
    return true;
}

static void team_create(team *t, int n, const int *ids, double timeout_s)
{
    memset(t, 0, sizeof *t);
    t->n = n;
    rp_status s = rp_comm_threads_create(t->comms, n, ids, timeout_s);
    if (s != RP_OK) {
        print_error("rp_comm_threads_create(n=%d) returned %d: %s\n", n, s, rp_last_error());
        fail();
    }
    for (int r = 0; r < n; r++) {
        t->m[r].team = t;
        t->m[r].rank = r;
        t->m[r].comm = t->comms[r];
    }
}

static void *member_thread(void *arg)
{
    member *m = arg;
    m->team->fn(m, m->team->ctx);
    return NULL;
}

/* Runs fn on n threads, thread r with comms[r]; returns when all are done (bounded). */
static void team_run(team *t, member_fn fn, void *ctx)
{
    t->fn = fn;
    t->ctx = ctx;
    pthread_t th[MAX_MEMBERS];
    for (int r = 0; r < t->n; r++) {
        memset(t->m[r].out, 0, sizeof t->m[r].out);
        for (int k = 0; k < 6; k++)
            t->m[r].out[k].status = 1; /* "not called" */
        t->m[r].bad = 0;
        t->m[r].bad_what[0] = '\0';
    }
    for (int r = 0; r < t->n; r++)
        assert_int_equal(pthread_create(&th[r], NULL, member_thread, &t->m[r]), 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)JOIN_LIMIT_S;
    for (int r = 0; r < t->n; r++) {
        if (pthread_timedjoin_np(th[r], NULL, &deadline) != 0) {
            fprintf(stderr,
                    "test_comm: member %d of %d still running after %.0f s: a collective hangs\n",
                    r, t->n, JOIN_LIMIT_S);
            fflush(stderr);
            _exit(1);
        }
    }
    for (int r = 0; r < t->n; r++) {
        if (t->m[r].bad) {
            print_error("member %d: %d failed checks, first: %s\n", r, t->m[r].bad,
                        t->m[r].bad_what);
            fail();
        }
    }
}

static void team_destroy(team *t)
{
    for (int r = 0; r < t->n; r++)
        rp_comm_destroy(t->comms[r]);
    memset(t->comms, 0, sizeof t->comms);
}

/* Asserts one recorded call's status, printing the member's message if it differs. */
static void expect_status(const team *t, int r, int k, rp_status want)
{
    const outcome *o = &t->m[r].out[k];
    if (o->status != want) {
        print_error("member %d call %d: status %d, expected %d; message: \"%s\"\n", r, k, o->status,
                    want, o->error);
        fail();
    }
}

static void expect_message_contains(const team *t, int r, int k, const char *needle)
{
    const char *msg = t->m[r].out[k].error;
    if (!strcasestr(msg, needle)) {
        print_error("member %d call %d: expected message containing \"%s\", got \"%s\"\n", r, k,
                    needle, msg);
        fail();
    }
}

/* ---- collectives, values and the reference ------------------------------- */

typedef enum { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST } coll_kind;

static const char *kind_name(coll_kind k)
{
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
    return names[k];
}

/* Own tables, so that a wrong rp_dtype_size() cannot hide behind the test's sizing. */
static size_t dt_size(rp_dtype dt)
{
    return dt == RP_BF16 ? 2 : dt == RP_F32 || dt == RP_I32 ? 4 : 8;
}

static const char *dt_name(rp_dtype dt)
{
    static const char *names[] = {"f32", "f64", "i32", "i64", "u8", "bf16"};
    return names[dt];
}

static const char *op_name(rp_reduce_op op)
{
    static const char *names[] = {"sum", "mean", "max", "min", "first"};
    return names[op];
}

static rp_status coll_call(rp_comm *c, coll_kind kind, const void *send, void *recv, int64_t count,
                           rp_dtype dt, rp_reduce_op op, int root)
{
    switch (kind) {
    case ALL_REDUCE:
        return rp_comm_all_reduce(c, send, recv, count, dt, op);
    case REDUCE_SCATTER:
        return rp_comm_reduce_scatter(c, send, recv, count, dt, op);
    case ALL_GATHER:
        return rp_comm_all_gather(c, send, recv, count, dt);
    case BROADCAST:
        return rp_comm_broadcast(c, recv, count, dt, root);
    }
    return RP_ERR_INVALID;
}

/* splitmix64's finaliser: a cheap, well-mixed hash. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/*
 * Element `first + i` of rank `rank`'s input, for i < n. Floats have random
 * signs, mantissas and exponents over a range of 2^16, so a sum in any order
 * but rank order rounds differently; integers span the whole range (sums
 * wrap) unless `small`, which keeps them in +-1000 (+-10^6 for i64) for MEAN.
 */
static void gen(void *dst, rp_dtype dt, int rank, int64_t first, int64_t n, bool small)
{
    const uint64_t salt = (uint64_t)(rank + 1) << 40;
    switch (dt) {
    case RP_F32: {
        float *d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix64(salt ^ ((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull));
            uint32_t bits = (uint32_t)(h >> 63) << 31 | (uint32_t)(120 + (h >> 32) % 16) << 23 |
                            ((uint32_t)h & 0x7fffffu);
            memcpy(&d[i], &bits, 4);
        }
        break;
    }
    case RP_F64: {
        double *d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix64(salt ^ ((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull));
            uint64_t h2 = mix64(h);
            uint64_t bits = (h2 >> 63) << 63 | (uint64_t)(1016 + (h2 >> 32) % 16) << 52 |
                            (h & 0xfffffffffffffull);
            memcpy(&d[i], &bits, 8);
        }
        break;
    }
    case RP_I32: {
        int32_t *d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix64(salt ^ ((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull));
            d[i] = small ? (int32_t)(h % 2001) - 1000 : (int32_t)(uint32_t)h;
        }
        break;
    }
    case RP_I64: {
        int64_t *d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix64(salt ^ ((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull));
            d[i] = small ? (int64_t)(h % 2000001) - 1000000 : (int64_t)h;
        }
        break;
    }
    case RP_BF16: {
        /* As f32's, cut to bf16's 7 mantissa bits: over 2^16 the f32 sum of a few rounds too. */
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) {
            uint64_t h = mix64(salt ^ ((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull));
            d[i] = (uint16_t)((h >> 63) << 15 | (120 + (h >> 32) % 16) << 7 | (h & 0x7f));
        }
        break;
    }
    case RP_U8:
        break; /* the collectives' sweep covers the numeric types */
    }
}

/*
 * out[i] = op over ranks r of in[r][i], for i < count, reducing in rank order
 * (((x0 + x1) + x2) + ...). Integer sums wrap (added as unsigned); MEAN is
 * the sum divided by n (C division: toward zero for integers).
 */
#define DEFINE_REDUCE_REF(NAME, T, U)                                                              \
    static void NAME(void *out_, const char *const *in, int n, int64_t count, rp_reduce_op op)     \
    {                                                                                              \
        T *out = out_;                                                                             \
        for (int64_t i = 0; i < count; i++) {                                                      \
            T acc = ((const T *)in[0])[i];                                                         \
            for (int r = 1; r < n; r++) {                                                          \
                T x = ((const T *)in[r])[i];                                                       \
                if (op == RP_SUM || op == RP_MEAN)                                                 \
                    acc = (T)((U)acc + (U)x);                                                      \
                else if (op == RP_MAX)                                                             \
                    acc = x > acc ? x : acc;                                                       \
                else if (op == RP_MIN)                                                             \
                    acc = x < acc ? x : acc;                                                       \
            }                                                                                      \
            if (op == RP_MEAN) acc = (T)(acc / (T)n);                                              \
            out[i] = acc;                                                                          \
        }                                                                                          \
    }

DEFINE_REDUCE_REF(reduce_ref_f32, float, float)
DEFINE_REDUCE_REF(reduce_ref_f64, double, double)
DEFINE_REDUCE_REF(reduce_ref_i32, int32_t, uint32_t)
DEFINE_REDUCE_REF(reduce_ref_i64, int64_t, uint64_t)

/*
 * bf16: the values widened to f32 and reduced as f32 in rank order (a mean: the f32 sum divided
 * by n), the result rounded to bf16 once. Max, min and first are exact in either type.
 */
static void reduce_ref_bf16(void *out_, const char *const *in, int n, int64_t count,
                            rp_reduce_op op)
{
    rp_bf16 *out = out_;
    for (int64_t i = 0; i < count; i++) {
        float acc = rp_bf16_to_f32(((const rp_bf16 *)in[0])[i]);
        for (int r = 1; r < n; r++) {
            float x = rp_bf16_to_f32(((const rp_bf16 *)in[r])[i]);
            if (op == RP_SUM || op == RP_MEAN)
                acc = acc + x;
            else if (op == RP_MAX)
                acc = x > acc ? x : acc;
            else if (op == RP_MIN)
                acc = x < acc ? x : acc;
        }
        if (op == RP_MEAN) acc = acc / (float)n;
        out[i] = rp_bf16_from_f32(acc);
    }
}

static void reduce_ref(void *out, const char *const *in, int n, int64_t count, rp_dtype dt,
                       rp_reduce_op op)
{
    switch (dt) {
    case RP_F32:
        reduce_ref_f32(out, in, n, count, op);
        break;
    case RP_F64:
        reduce_ref_f64(out, in, n, count, op);
        break;
    case RP_I32:
        reduce_ref_i32(out, in, n, count, op);
        break;
    case RP_I64:
        reduce_ref_i64(out, in, n, count, op);
        break;
    case RP_BF16:
        reduce_ref_bf16(out, in, n, count, op);
        break;
    case RP_U8:
        break; /* not reduced */
    }
}

static void format_value(char *buf, size_t size, const char *p, rp_dtype dt)
{
    switch (dt) {
    case RP_F32: {
        float f;
        uint32_t b;
        memcpy(&f, p, 4);
        memcpy(&b, p, 4);
        snprintf(buf, size, "%.9g (0x%08x)", (double)f, b);
        break;
    }
    case RP_F64: {
        double f;
        uint64_t b;
        memcpy(&f, p, 8);
        memcpy(&b, p, 8);
        snprintf(buf, size, "%.17g (0x%016llx)", f, (unsigned long long)b);
        break;
    }
    case RP_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        snprintf(buf, size, "%d", v);
        break;
    }
    case RP_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        snprintf(buf, size, "%lld", (long long)v);
        break;
    }
    case RP_U8:
        snprintf(buf, size, "%u", (unsigned)*(const uint8_t *)p);
        break;
    case RP_BF16:
        snprintf(buf, size, "0x%04x", (unsigned)*(const uint16_t *)p);
        break;
    }
}

/*
 * Index of the first element of got[count] that differs from want: bitwise,
 * or for a float MEAN (the header does not say whether the sum is divided by
 * N or multiplied by 1/N) within a few ulp. -1 if none.
 */
static int64_t first_difference(const char *got, const char *want, int64_t count, rp_dtype dt,
                                bool tolerant)
{
    size_t es = dt_size(dt);
    if (!tolerant || dt == RP_I32 || dt == RP_I64) {
        if (memcmp(got, want, (size_t)count * es) == 0) return -1;
        for (int64_t i = 0; i < count; i++)
            if (memcmp(got + i * (int64_t)es, want + i * (int64_t)es, es) != 0) return i;
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (dt == RP_F32) {
            float g = ((const float *)got)[i], w = ((const float *)want)[i];
            if (!(fabsf(g - w) <= 1e-6f * fabsf(w))) return i;
        } else {
            double g = ((const double *)got)[i], w = ((const double *)want)[i];
            if (!(fabs(g - w) <= 1e-15 * fabs(w))) return i;
        }
    }
    return -1;
}

static void check_values(const char *desc, int rank, const char *what, const char *got,
                         const char *want, int64_t count, rp_dtype dt, bool tolerant)
{
    int64_t i = first_difference(got, want, count, dt, tolerant);
    if (i < 0) return;
    char g[64], w[64];
    size_t es = dt_size(dt);
    format_value(g, sizeof g, got + i * (int64_t)es, dt);
    format_value(w, sizeof w, want + i * (int64_t)es, dt);
    print_error("%s, rank %d: %s[%lld] = %s, expected %s\n", desc, rank, what, (long long)i, g, w);
    fail();
}

static void check_guard(const char *desc, int rank, const char *guard)
{
    for (int i = 0; i < GUARD_BYTES; i++) {
        if ((unsigned char)guard[i] != SENTINEL) {
            print_error("%s, rank %d: wrote past the end of its output (guard byte %d)\n", desc,
                        rank, i);
            fail();
        }
    }
}

static char *xmalloc(size_t bytes)
{
    char *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/*
 * A case's buffers: big ones are kept from case to case (faulting in fresh
 * pages for every 64 MiB case would take most of the test's time), small
 * ones are exact allocations so that ASan sees an overrun. Slots: 0..7 the
 * output buffers, 8..15 the separate send buffers, 16 the reference, 17 scratch.
 */
#define POOL_SLOTS     (2 * MAX_MEMBERS + 2)
#define POOL_MIN_BYTES ((size_t)1 << 20)
static char *pool[POOL_SLOTS];
static size_t pool_bytes[POOL_SLOTS];

static char *case_alloc(int slot, size_t bytes)
{
    if (bytes < POOL_MIN_BYTES) return xmalloc(bytes);
    if (pool_bytes[slot] < bytes) {
        free(pool[slot]);
        pool[slot] = NULL;
        pool_bytes[slot] = 0;
        pool[slot] = xmalloc(bytes);
        pool_bytes[slot] = bytes;
    }
    return pool[slot];
}

static void case_free(int slot, char *p)
{
    if (p != pool[slot]) free(p);
}

static void pool_release(void)
{
    for (int i = 0; i < POOL_SLOTS; i++) {
        free(pool[i]);
        pool[i] = NULL;
        pool_bytes[i] = 0;
    }
}

/* One collective call of the sweep: what each rank passes. */
typedef struct {
    coll_kind kind;
    int64_t count;
    rp_dtype dtype;
    rp_reduce_op op;
    int root;
    char *send[MAX_MEMBERS];
    char *recv[MAX_MEMBERS];
    /*
     * Where set: the member's output as it saw it the moment the call
     * returned, and its send buffer then, after which it overwrites its send
     * buffer as a training loop would. A member must not return while a peer
     * still writes its output or reads its input.
     */
    size_t out_bytes, send_bytes;
    char *seen[MAX_MEMBERS];
    char *seen_send[MAX_MEMBERS];
} coll_case;

static void member_collective(member *m, void *ctx)
{
    const coll_case *k = ctx;
    int r = m->rank;
    double t0 = rp_now_s();
    rp_status s =
        coll_call(m->comm, k->kind, k->send[r], k->recv[r], k->count, k->dtype, k->op, k->root);
    if (s == RP_OK && k->seen[r]) memcpy(k->seen[r], k->recv[r], k->out_bytes);
    if (s == RP_OK && k->seen_send[r]) {
        memcpy(k->seen_send[r], k->send[r], k->send_bytes);
        memset(k->send[r], SENTINEL, k->send_bytes);
    }
    outcome_set(&m->out[0], s, t0);
}

/*
 * Runs one collective on n members and checks every member's output against
 * the reference, the guard after it, that inputs (and the other blocks of an
 * in-place reduce_scatter) were not written, and that all members agree.
 */
static void run_case(coll_kind kind, int n, int64_t count, rp_dtype dt, rp_reduce_op op, int root,
                     bool in_place)
{
    const size_t es = dt_size(dt);
    const bool reduces = kind == ALL_REDUCE || kind == REDUCE_SCATTER;
    const bool small = reduces && op == RP_MEAN;
    const bool tolerant = small && (dt == RP_F32 || dt == RP_F64);
    const size_t cb = (size_t)count * es;
    char desc[200];
    snprintf(desc, sizeof desc, "%s n=%d count=%lld %s %s root=%d %s", kind_name(kind), n,
             (long long)count, dt_name(dt), reduces ? op_name(op) : "-", root,
             in_place ? "in place" : "out of place");

    size_t send_bytes = 0, recv_bytes = 0; /* per member */
    switch (kind) {
    case ALL_REDUCE:
        send_bytes = recv_bytes = cb;
        break;
    case REDUCE_SCATTER:
        send_bytes = (size_t)n * cb;
        recv_bytes = cb;
        break;
    case ALL_GATHER:
        send_bytes = cb;
        recv_bytes = (size_t)n * cb;
        break;
    case BROADCAST:
        recv_bytes = cb;
        break;
    }
    const bool one_buffer = in_place || kind == BROADCAST;
    /* Bytes of buf[r] before its guard; the guard follows. */
    const size_t whole = one_buffer && kind == REDUCE_SCATTER ? send_bytes : recv_bytes;
    /* Regenerating inputs to check they were not written costs as much as making them: small cases
     * only. */
    const bool thorough = (size_t)n * (send_bytes + recv_bytes) <= ((size_t)16 << 20);

    coll_case k = {.kind = kind, .count = count, .dtype = dt, .op = op, .root = root};
    char *buf[MAX_MEMBERS] = {0}, *sendbuf[MAX_MEMBERS] = {0};
    for (int r = 0; r < n; r++) {
        buf[r] = case_alloc(r, whole + GUARD_BYTES);
        memset(buf[r], SENTINEL, whole + GUARD_BYTES);
        if (one_buffer) {
            switch (kind) {
            case ALL_REDUCE:
                gen(buf[r], dt, r, 0, count, small);
                k.send[r] = k.recv[r] = buf[r];
                break;
            case REDUCE_SCATTER:
                gen(buf[r], dt, r, 0, (int64_t)n * count, small);
                k.send[r] = buf[r];
                k.recv[r] = buf[r] + (size_t)r * cb;
                break;
            case ALL_GATHER:
                gen(buf[r] + (size_t)r * cb, dt, r, 0, count, false);
                k.send[r] = buf[r] + (size_t)r * cb;
                k.recv[r] = buf[r];
                break;
            case BROADCAST:
                if (r == root) gen(buf[r], dt, r, 0, count, false);
                k.send[r] = k.recv[r] = buf[r];
                break;
            }
        } else {
            sendbuf[r] = case_alloc(MAX_MEMBERS + r, send_bytes);
            gen(sendbuf[r], dt, r, 0, (int64_t)(send_bytes / es), small);
            k.send[r] = sendbuf[r];
            k.recv[r] = buf[r];
        }
    }

    /* The reference, from the inputs as passed (before an in-place call overwrites them). */
    size_t ref_bytes = kind == BROADCAST || kind == ALL_REDUCE ? cb : (size_t)n * cb;
    char *ref = case_alloc(2 * MAX_MEMBERS, ref_bytes);
    switch (kind) {
    case ALL_REDUCE:
        reduce_ref(ref, (const char *const *)k.send, n, count, dt, op);
        break;
    case REDUCE_SCATTER:
        reduce_ref(ref, (const char *const *)k.send, n, (int64_t)n * count, dt, op);
        break;
    case ALL_GATHER:
        for (int q = 0; q < n; q++)
            gen(ref + (size_t)q * cb, dt, q, 0, count, false);
        break;
    case BROADCAST:
        gen(ref, dt, root, 0, count, false);
        break;
    }

    k.out_bytes = kind == ALL_GATHER ? (size_t)n * cb : cb;
    k.send_bytes = send_bytes;
    for (int r = 0; r < n && thorough; r++) {
        k.seen[r] = xmalloc(k.out_bytes);
        if (!one_buffer) k.seen_send[r] = xmalloc(send_bytes);
    }

    team t;
    team_create(&t, n, IDS, SWEEP_TIMEOUT_S);
    team_run(&t, member_collective, &k);
    team_destroy(&t);

    for (int r = 0; r < n; r++) {
        if (t.m[r].out[0].status != RP_OK) {
            print_error("%s, rank %d: returned %d: %s\n", desc, r, t.m[r].out[0].status,
                        t.m[r].out[0].error);
            fail();
        }
    }
    char *tmp =
        thorough ? case_alloc(2 * MAX_MEMBERS + 1, send_bytes > cb ? send_bytes : cb) : NULL;
    for (int r = 0; r < n; r++) {
        const char *want = kind == REDUCE_SCATTER ? ref + (size_t)r * cb : ref;
        int64_t elems = kind == ALL_GATHER ? (int64_t)n * count : count;
        check_values(desc, r, "output", k.recv[r], want, elems, dt, tolerant);
        check_guard(desc, r, buf[r] + whole);
        if (!thorough) continue;
        check_values(desc, r, "output when the call returned", k.seen[r], want, elems, dt,
                     tolerant);
        if (kind == REDUCE_SCATTER && in_place) {
            gen(tmp, dt, r, 0, (int64_t)n * count, small);
            for (int q = 0; q < n; q++)
                if (q != r)
                    check_values(desc, r, "input block outside recv", buf[r] + (size_t)q * cb,
                                 tmp + (size_t)q * cb, count, dt, false);
        }
        if (!one_buffer) {
            gen(tmp, dt, r, 0, (int64_t)(send_bytes / es), small);
            check_values(desc, r, "send (const) when the call returned", k.seen_send[r], tmp,
                         (int64_t)(send_bytes / es), dt, false);
        }
    }
    /* Bitwise the same result on every member, even where the reference allows a tolerance. */
    if (kind == ALL_REDUCE)
        for (int r = 1; r < n; r++)
            check_values(desc, r, "output vs rank 0's", k.recv[r], k.recv[0], count, dt, false);

    case_free(2 * MAX_MEMBERS + 1, tmp);
    case_free(2 * MAX_MEMBERS, ref);
    for (int r = 0; r < n; r++) {
        case_free(r, buf[r]);
        case_free(MAX_MEMBERS + r, sendbuf[r]);
        free(k.seen[r]);
        free(k.seen_send[r]);
    }
}

static const rp_dtype DTYPES[] = {RP_F32, RP_F64, RP_I32, RP_I64, RP_BF16};
#define NDTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])
static const rp_reduce_op OPS[] = {RP_SUM, RP_MEAN, RP_MAX, RP_MIN, RP_FIRST};

/* 0, 1, odd, not a multiple of n (7n+3), a prime. */
static int small_counts(int n, int64_t counts[5])
{
    counts[0] = 0;
    counts[1] = 1;
    counts[2] = 1001;
    counts[3] = 7 * (int64_t)n + 3;
    counts[4] = 4099;
    return 5;
}

static void sweep_reductions(coll_kind kind)
{
    for (int n = 1; n <= MAX_MEMBERS; n++) {
        int64_t counts[5];
        int nc = small_counts(n, counts);
        for (int c = 0; c < nc; c++)
            for (int d = 0; d < NDTYPES; d++)
                for (int o = 0; o < 5; o++)
                    for (int ip = 0; ip < 2; ip++)
                        run_case(kind, n, counts[c], DTYPES[d], OPS[o], 0, ip);
    }
}

/* all_reduce: every N, count, dtype and op, in place and not, bitwise against rank-order reduction.
 */
static void test_all_reduce_every_dtype_op_count(void **state)
{
    (void)state;
    sweep_reductions(ALL_REDUCE);
}

/* all_reduce of 64 MiB (16M f32) per member, N = 1..8, in place and not. */
static void test_all_reduce_64mib(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++)
        for (int ip = 0; ip < 2; ip++)
            run_case(ALL_REDUCE, n, BIG_BYTES / 4, RP_F32, RP_SUM, 0, ip);
    pool_release();
}

static void test_reduce_scatter_every_dtype_op_count(void **state)
{
    (void)state;
    sweep_reductions(REDUCE_SCATTER);
}

/*
 * reduce_scatter_v: blocks of their own sizes, some empty (rank q's block: q % 3 == 1 ? 0 :
 * base + 5q elements), f32 and bf16 sums and means, in place and not: each member's block is the
 * rank-order reduction of its range, bitwise; the counters see its block. Sums of the counts
 * that differ between members are a mismatch on every member, and a negative count is refused.
 */
typedef struct v_case {
    int64_t base;
    rp_dtype dt;
    rp_reduce_op op;
    bool in_place, skew; /* skew: member 0 passes one element more in its last block */
} v_case;

static void v_counts(int n, int64_t base, int64_t *counts, int64_t *total)
{
    *total = 0;
    for (int q = 0; q < n; q++) {
        counts[q] = q % 3 == 1 ? 0 : base + 5 * q;
        *total += counts[q];
    }
}

static float v_value(int member, int64_t i)
{
    return (float)((member * 7919 + i * 104729) % 1000) / 64.0f - 7.0f;
}

static void reduce_scatter_v_member(member *m, void *ctx)
{
    const v_case *vc = ctx;
    int n = m->team->n, r = m->rank;
    int64_t counts[MAX_MEMBERS], total, at = 0;
    v_counts(n, vc->base, counts, &total);
    for (int q = 0; q < r; q++)
        at += counts[q];
    if (vc->skew && r == 0) counts[n - 1]++;
    size_t es = vc->dt == RP_BF16 ? 2 : 4;
    char *send = calloc((size_t)total + 2, es), *recv = calloc((size_t)counts[r] + 1, es);
    for (int64_t i = 0; i < total; i++) {
        float v = v_value(r, i);
        if (vc->dt == RP_BF16)
            ((rp_bf16 *)send)[i] = rp_bf16_from_f32(v);
        else
            ((float *)send)[i] = v;
    }
    char *out = vc->in_place ? send + (size_t)at * es : recv;
    rp_comm_stats before, after;
    rp_comm_stats_get(m->comm, &before);
    rp_status st = rp_comm_reduce_scatter_v(m->comm, send, out, counts, vc->dt, vc->op);
    rp_comm_stats_get(m->comm, &after);
    outcome_set(&m->out[0], st, rp_now_s());
    if (st == RP_OK) {
        for (int64_t i = 0; i < counts[r]; i++) {
            /* Rank order, f32 accumulation (bf16 inputs widened), rounded once; the mean divided.
             */
            float sum = 0;
            for (int q = 0; q < n; q++) {
                float v = v_value(q, at + i);
                sum += vc->dt == RP_BF16 ? rp_bf16_to_f32(rp_bf16_from_f32(v)) : v;
            }
            if (vc->op == RP_MEAN) sum /= (float)n;
            float got = vc->dt == RP_BF16 ? rp_bf16_to_f32(((rp_bf16 *)out)[i]) : ((float *)out)[i];
            float want = vc->dt == RP_BF16 ? rp_bf16_to_f32(rp_bf16_from_f32(sum)) : sum;
            if (memcmp(&got, &want, sizeof got) != 0) {
                char what[160];
                snprintf(what, sizeof what, "element %lld of its block: %g, want %g", (long long)i,
                         (double)got, (double)want);
                member_fail(m, what);
                break;
            }
        }
        rp_comm_tally t = after.by[RP_COMM_USER][RP_FLIGHT_REDUCE_SCATTER];
        rp_comm_tally t0 = before.by[RP_COMM_USER][RP_FLIGHT_REDUCE_SCATTER];
        if (t.calls - t0.calls != 1 || t.bytes - t0.bytes != (uint64_t)counts[r] * es)
            member_fail(m, "its counters do not see one reduce-scatter of its block");
    }
    free(send);
    free(recv);
}

static void test_reduce_scatter_v(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++)
        for (int d = 0; d < 2; d++)
            for (int o = 0; o < 2; o++)
                for (int ip = 0; ip < 2; ip++) {
                    v_case vc = {.base = 3 + 997 * (n % 2),
                                 .dt = d ? RP_BF16 : RP_F32,
                                 .op = o ? RP_MEAN : RP_SUM,
                                 .in_place = ip};
                    team t;
                    team_create(&t, n, NULL, 5.0);
                    team_run(&t, reduce_scatter_v_member, &vc);
                    for (int r = 0; r < n; r++)
                        expect_status(&t, r, 0, RP_OK);
                    team_destroy(&t);
                }
    /* Member 0's counts sum to one more: a mismatch on every member, naming both counts. */
    v_case vc = {.base = 4, .dt = RP_F32, .op = RP_SUM, .skew = true};
    team t;
    team_create(&t, 3, NULL, 5.0);
    team_run(&t, reduce_scatter_v_member, &vc);
    int64_t counts[3], total;
    v_counts(3, 4, counts, &total);
    char want[64];
    snprintf(want, sizeof want, "count %lld", (long long)total + 1);
    for (int r = 0; r < 3; r++) {
        expect_status(&t, r, 0, RP_ERR_MISMATCH);
        expect_message_contains(&t, r, 0, want);
    }
    team_destroy(&t);
    rp_comm *one[1];
    assert_int_equal(rp_comm_threads_create(one, 1, NULL, 1.0), RP_OK);
    float x[2] = {1, 2};
    assert_int_equal(rp_comm_reduce_scatter_v(one[0], x, x, (int64_t[]){-1}, RP_F32, RP_SUM),
                     RP_ERR_INVALID);
    tu_assert_error_contains("negative");
    assert_int_equal(rp_comm_reduce_scatter_v(one[0], x, x, NULL, RP_F32, RP_SUM), RP_ERR_INVALID);
    rp_comm_destroy(one[0]);
}

/* reduce_scatter whose stacked input is 64 MiB per member: count = 64 MiB / (4 N). */
static void test_reduce_scatter_64mib(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++)
        for (int ip = 0; ip < 2; ip++)
            run_case(REDUCE_SCATTER, n, BIG_BYTES / (4 * n), RP_F32, RP_SUM, 0, ip);
    pool_release();
}

static void test_all_gather_every_dtype_count(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++) {
        int64_t counts[5];
        int nc = small_counts(n, counts);
        for (int c = 0; c < nc; c++)
            for (int d = 0; d < NDTYPES; d++)
                for (int ip = 0; ip < 2; ip++)
                    run_case(ALL_GATHER, n, counts[c], DTYPES[d], RP_SUM, 0, ip);
    }
}

/* all_gather whose stacked output is 64 MiB: count = 64 MiB / (4 N) per member. */
static void test_all_gather_64mib(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++)
        for (int ip = 0; ip < 2; ip++)
            run_case(ALL_GATHER, n, BIG_BYTES / (4 * n), RP_F32, RP_SUM, 0, ip);
    pool_release();
}

static void test_broadcast_every_root_dtype_count(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++) {
        int64_t counts[5];
        int nc = small_counts(n, counts);
        for (int c = 0; c < nc; c++)
            for (int d = 0; d < NDTYPES; d++)
                for (int root = 0; root < n; root++)
                    run_case(BROADCAST, n, counts[c], DTYPES[d], RP_SUM, root, true);
    }
}

/* broadcast of 64 MiB from the first and the last rank. */
static void test_broadcast_64mib(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++) {
        run_case(BROADCAST, n, BIG_BYTES / 4, RP_F32, RP_SUM, 0, true);
        if (n > 1) run_case(BROADCAST, n, BIG_BYTES / 4, RP_F32, RP_SUM, n - 1, true);
    }
    pool_release();
}

/* ---- the API's small parts ------------------------------------------------ */

static void test_dtype_and_op_names(void **state)
{
    (void)state;
    assert_int_equal(rp_dtype_size(RP_F32), 4);
    assert_int_equal(rp_dtype_size(RP_F64), 8);
    assert_int_equal(rp_dtype_size(RP_I32), 4);
    assert_int_equal(rp_dtype_size(RP_I64), 8);
    assert_int_equal(rp_dtype_size((rp_dtype)99), 0);
    assert_string_equal(rp_dtype_name(RP_F32), "f32");
    assert_string_equal(rp_dtype_name(RP_F64), "f64");
    assert_string_equal(rp_dtype_name(RP_I32), "i32");
    assert_string_equal(rp_dtype_name(RP_I64), "i64");
    assert_string_equal(rp_reduce_op_name(RP_SUM), "sum");
    assert_string_equal(rp_reduce_op_name(RP_MEAN), "mean");
    assert_string_equal(rp_reduce_op_name(RP_MAX), "max");
    assert_string_equal(rp_reduce_op_name(RP_MIN), "min");
    assert_string_equal(rp_reduce_op_name(RP_FIRST), "first");
}

/* Ranks, size, replica ids (default: the rank), backend name, timeout get/set; bad arguments
 * refused. */
static void test_create_and_accessors(void **state)
{
    (void)state;
    rp_comm *c[MAX_MEMBERS] = {0};
    assert_int_equal(rp_comm_threads_create(c, 3, NULL, 2.5), RP_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(rp_comm_rank(c[r]), r);
        assert_int_equal(rp_comm_size(c[r]), 3);
        for (int q = 0; q < 3; q++)
            assert_int_equal(rp_comm_replica_id(c[r], q), q);
        assert_string_equal(rp_comm_backend(c[r]), "threads");
        assert_true(rp_comm_timeout(c[r]) == 2.5);
        assert_int_equal(rp_comm_sequence(c[r]), 0);
        assert_false(rp_comm_broken(c[r]));
    }
    assert_int_equal(rp_comm_set_timeout(c[1], 4.0), RP_OK);
    assert_true(rp_comm_timeout(c[1]) == 4.0);
    assert_int_not_equal(rp_comm_set_timeout(c[1], 0.0), RP_OK);
    assert_int_not_equal(rp_comm_set_timeout(c[1], -1.0), RP_OK);
    assert_true(rp_comm_timeout(c[1]) == 4.0);
    for (int r = 0; r < 3; r++)
        rp_comm_destroy(c[r]);
    rp_comm_destroy(NULL);

    assert_int_equal(rp_comm_threads_create(c, 5, IDS, 1.0), RP_OK);
    for (int r = 0; r < 5; r++)
        for (int q = 0; q < 5; q++)
            assert_int_equal(rp_comm_replica_id(c[r], q), IDS[q]);
    for (int r = 0; r < 5; r++)
        rp_comm_destroy(c[r]);

    assert_int_equal(rp_comm_threads_create(c, 0, NULL, 1.0), RP_ERR_INVALID);
    assert_int_equal(rp_comm_threads_create(c, 2, NULL, 0.0), RP_ERR_INVALID);
    assert_int_equal(rp_comm_threads_create(c, 2, NULL, -1.0), RP_ERR_INVALID);
}

/* ---- barrier ---------------------------------------------------------------- */

#define BARRIER_ROUNDS 30

typedef struct {
    atomic_int arrived[BARRIER_ROUNDS];
    int seen[MAX_MEMBERS][BARRIER_ROUNDS];
} barrier_ctx;

static void member_barrier(member *m, void *ctx)
{
    barrier_ctx *c = ctx;
    int n = m->team->n;
    for (int k = 0; k < BARRIER_ROUNDS; k++) {
        if (k % n == m->rank) tu_sleep_s(0.002); /* a different member is late each round */
        atomic_fetch_add(&c->arrived[k], 1);
        double t0 = rp_now_s();
        rp_status s = rp_comm_barrier(m->comm);
        if (s != RP_OK) {
            outcome_set(&m->out[0], s, t0);
            return;
        }
        c->seen[m->rank][k] = atomic_load(&c->arrived[k]);
    }
    m->out[0].status = RP_OK;
}

/* Nobody leaves a barrier before everybody has reached it. */
static void test_barrier_waits_for_everyone(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_MEMBERS; n++) {
        static barrier_ctx c;
        memset(&c, 0, sizeof c);
        team t;
        team_create(&t, n, IDS, SWEEP_TIMEOUT_S);
        team_run(&t, member_barrier, &c);
        for (int r = 0; r < n; r++) {
            expect_status(&t, r, 0, RP_OK);
            assert_int_equal(rp_comm_sequence(t.comms[r]), BARRIER_ROUNDS);
            for (int k = 0; k < BARRIER_ROUNDS; k++) {
                if (c.seen[r][k] != n) {
                    print_error(
                        "n=%d round %d: rank %d left the barrier when %d of %d had arrived\n", n, k,
                        r, c.seen[r][k], n);
                    fail();
                }
            }
        }
        team_destroy(&t);
    }
}

/* ---- split ------------------------------------------------------------------ */

typedef struct {
    int rank[MAX_MEMBERS], size[MAX_MEMBERS], ids[MAX_MEMBERS][MAX_MEMBERS];
    double timeout[MAX_MEMBERS];
    const char *backend[MAX_MEMBERS];
    int64_t sum[MAX_MEMBERS], first[MAX_MEMBERS], gathered[MAX_MEMBERS][MAX_MEMBERS];
    bool null2[MAX_MEMBERS];
    int rank2[MAX_MEMBERS], size2[MAX_MEMBERS];
    int64_t sum2[MAX_MEMBERS];
} split_ctx;

static int dummy_comm_target;

static void member_split(member *m, void *ctx)
{
    split_ctx *c = ctx;
    int r = m->rank;
    double t0 = rp_now_s();
    rp_comm *sub = NULL, *sub2 = (rp_comm *)&dummy_comm_target; /* must become NULL for rank 3 */
    outcome_set(&m->out[0], rp_comm_split(m->comm, r % 2, -r, &sub), t0);
    if (m->out[0].status != RP_OK) return;
    t0 = rp_now_s();
    outcome_set(&m->out[1], rp_comm_split(m->comm, r == 3 ? -1 : 5, 0, &sub2), t0);
    if (m->out[1].status != RP_OK) {
        rp_comm_destroy(sub);
        return;
    }
    /* The new communicators do not need the parent. */
    rp_comm_destroy(m->comm);
    m->comm = NULL;
    m->team->comms[r] = NULL;

    if (!sub) {
        member_fail(m, "split by r % 2 gave NULL");
        return;
    }
    c->rank[r] = rp_comm_rank(sub);
    c->size[r] = rp_comm_size(sub);
    for (int q = 0; q < c->size[r] && q < MAX_MEMBERS; q++)
        c->ids[r][q] = rp_comm_replica_id(sub, q);
    c->timeout[r] = rp_comm_timeout(sub);
    c->backend[r] = rp_comm_backend(sub);
    int64_t v = r + 1, old = r;
    t0 = rp_now_s();
    outcome_set(&m->out[2], rp_comm_all_reduce(sub, &v, &c->sum[r], 1, RP_I64, RP_SUM), t0);
    t0 = rp_now_s();
    outcome_set(&m->out[3], rp_comm_all_reduce(sub, &old, &c->first[r], 1, RP_I64, RP_FIRST), t0);
    t0 = rp_now_s();
    if (c->size[r] <= MAX_MEMBERS)
        outcome_set(&m->out[4], rp_comm_all_gather(sub, &old, c->gathered[r], 1, RP_I64), t0);
    rp_comm_destroy(sub);

    c->null2[r] = sub2 == NULL;
    if (sub2 && sub2 != (rp_comm *)&dummy_comm_target) {
        c->rank2[r] = rp_comm_rank(sub2);
        c->size2[r] = rp_comm_size(sub2);
        t0 = rp_now_s();
        outcome_set(&m->out[5], rp_comm_all_reduce(sub2, &old, &c->sum2[r], 1, RP_I64, RP_SUM), t0);
        rp_comm_destroy(sub2);
    }
}

/*
 * 8 members split by rank % 2 with key -rank: two groups of 4 ranked by
 * descending old rank, keeping replica ids and timeout, each reducing on
 * its own. A second split with one negative color: that member gets NULL,
 * the others one group ranked by old rank (equal keys).
 */
static void test_split_groups_by_color_and_key(void **state)
{
    (void)state;
    static split_ctx c;
    memset(&c, 0, sizeof c);
    team t;
    team_create(&t, 8, IDS, 7.5);
    team_run(&t, member_split, &c);
    for (int r = 0; r < 8; r++) {
        expect_status(&t, r, 0, RP_OK);
        expect_status(&t, r, 1, RP_OK);
        expect_status(&t, r, 2, RP_OK);
        expect_status(&t, r, 3, RP_OK);
        expect_status(&t, r, 4, RP_OK);
        int top = r % 2 == 0 ? 6 : 7; /* the group's new rank 0 (key -6 or -7) */
        assert_int_equal(c.size[r], 4);
        assert_int_equal(c.rank[r], (top - r) / 2);
        for (int q = 0; q < 4; q++)
            assert_int_equal(c.ids[r][q], IDS[top - 2 * q]);
        assert_true(c.timeout[r] == 7.5);
        assert_string_equal(c.backend[r], "threads");
        assert_int_equal(c.sum[r], r % 2 == 0 ? 1 + 3 + 5 + 7 : 2 + 4 + 6 + 8);
        assert_int_equal(c.first[r], top);
        for (int q = 0; q < 4; q++)
            assert_int_equal(c.gathered[r][q], top - 2 * q);
        if (r == 3) {
            assert_true(c.null2[r]);
            continue;
        }
        assert_false(c.null2[r]);
        expect_status(&t, r, 5, RP_OK);
        assert_int_equal(c.size2[r], 7);
        assert_int_equal(c.rank2[r], r < 3 ? r : r - 1);
        assert_int_equal(c.sum2[r], 0 + 1 + 2 + 4 + 5 + 6 + 7);
    }
    team_destroy(&t);
}

/*
 * bf16 sums by hand, three members: each case's expected bits follow only from "widen to f32,
 * add in rank order in f32, divide a mean by n in f32, round to bf16 once" (round to nearest,
 * ties to even); each other rule gives other bits.
 *  - 1 + 3*2^-10 + 3*2^-10 = 1 + 0.75 ulp of bf16 at 1: rounds up to 1 + 2^-7 (0x3f81). Summed in
 *    bf16 (rounding after each member) each addend is lost: 1 (0x3f80).
 *  - 1 + 2^-8 + 2^-33: in f32 the 2^-33 is lost (under half an f32 ulp), leaving 1 + 2^-8, a tie,
 *    which rounds to even: 1 (0x3f80). The exact sum, rounded once, is 0x3f81.
 *  - 1 + -1 + 2^-30 in rank order is 2^-30 (0x3080); any order adding 2^-30 to +-1 first gives 0.
 *  - the mean of 1, 1.5 and 2^-7: (2.5078125 / 3) rounds to 0x3f56; rounding the sum to bf16
 *    first (2.5) gives 0x3f55.
 */
static const rp_bf16 BF16_IN[3][4] = {{0x3f80, 0x3f80, 0x3f80, 0x3f80},
                                      {0x3b40, 0x3b80, 0xbf80, 0x3fc0},
                                      {0x3b40, 0x2f00, 0x3080, 0x3c00}};
static const rp_bf16 BF16_SUM[3] = {0x3f81, 0x3f80, 0x3080}, BF16_MEAN = 0x3f56;

typedef struct {
    rp_bf16 sum[3][3], mean[3], scattered[3]; /* by member */
} bf16_cases;

static void member_bf16_cases(member *m, void *ctx)
{
    bf16_cases *c = ctx;
    int r = m->rank;
    rp_bf16 in[4];
    memcpy(in, BF16_IN[r], sizeof in);
    double t0 = rp_now_s();
    outcome_set(&m->out[0], rp_comm_all_reduce(m->comm, in, c->sum[r], 3, RP_BF16, RP_SUM), t0);
    outcome_set(&m->out[1], rp_comm_all_reduce(m->comm, in + 3, &c->mean[r], 1, RP_BF16, RP_MEAN),
                t0);
    /* In place: block r of the three sums lands at in[r]. */
    outcome_set(&m->out[2], rp_comm_reduce_scatter(m->comm, in, in + r, 1, RP_BF16, RP_SUM), t0);
    c->scattered[r] = in[r];
}

static void test_bf16_sums_in_f32_rounded_once(void **state)
{
    (void)state;
    /* The inputs are the values the comment says. */
    assert_true(rp_bf16_to_f32(BF16_IN[1][0]) == 0x3p-10f &&
                rp_bf16_to_f32(BF16_IN[2][1]) == 0x1p-33f);
    assert_true(rp_bf16_to_f32(BF16_IN[2][2]) == 0x1p-30f && rp_bf16_to_f32(BF16_IN[1][3]) == 1.5f);
    static bf16_cases c;
    memset(&c, 0, sizeof c);
    team t;
    team_create(&t, 3, IDS, SWEEP_TIMEOUT_S);
    team_run(&t, member_bf16_cases, &c);
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 3; k++)
            expect_status(&t, r, k, RP_OK);
        for (int i = 0; i < 3; i++)
            assert_int_equal(c.sum[r][i], BF16_SUM[i]);
        assert_int_equal(c.mean[r], BF16_MEAN);
        assert_int_equal(c.scattered[r], BF16_SUM[r]);
    }
    team_destroy(&t);
}

/* ---- call checks: mismatch, timeout, leave ------------------------------ */

typedef struct {
    coll_kind kind;
    int64_t count;
    rp_dtype dtype;
    rp_reduce_op op;
    int root;
} call_spec;

/*
 * What each member does: optionally a first all_reduce that succeeds (out[2]),
 * then after delay_s either rp_comm_leave() or its call (out[0]), then
 * optionally a barrier (out[1]).
 */
typedef struct {
    call_spec spec[MAX_MEMBERS];
    double delay_s[MAX_MEMBERS];
    bool leave[MAX_MEMBERS];
    const char *leave_reason;
    bool warmup;
    bool then_barrier;
} script;

static void member_script(member *m, void *ctx)
{
    const script *sc = ctx;
    int r = m->rank, n = m->team->n;
    double t0;
    if (sc->warmup) {
        float x[8] = {0};
        t0 = rp_now_s();
        outcome_set(&m->out[2], rp_comm_all_reduce(m->comm, x, x, 8, RP_F32, RP_SUM), t0);
    }
    tu_sleep_s(sc->delay_s[r]);
    if (sc->leave[r]) {
        rp_comm_leave(m->comm, RP_ERR_NUMERIC, sc->leave_reason);
        return;
    }
    const call_spec *c = &sc->spec[r];
    size_t bytes = (size_t)(c->count > 0 ? c->count : 1) * (size_t)n * 8;
    char *send = calloc(1, bytes), *recv = calloc(1, bytes);
    if (!send || !recv) {
        member_fail(m, "out of memory");
    } else {
        t0 = rp_now_s();
        outcome_set(&m->out[0],
                    coll_call(m->comm, c->kind, send, recv, c->count, c->dtype, c->op, c->root),
                    t0);
        if (sc->then_barrier) {
            t0 = rp_now_s();
            outcome_set(&m->out[1], rp_comm_barrier(m->comm), t0);
        }
    }
    free(send);
    free(recv);
}

static call_spec f32_sum(int64_t count)
{
    return (call_spec){
        .kind = ALL_REDUCE, .count = count, .dtype = RP_F32, .op = RP_SUM, .root = 0};
}

/*
 * Runs a script where member `odd` makes a different call from the rest and
 * checks: RP_ERR_MISMATCH on every member, found without waiting for the
 * timeout, messages containing each needle, then the communicator broken
 * (the next call fails at once with RP_ERR_COMM).
 */
static void expect_mismatch(int n, const script *sc, const char *const *needles)
{
    team t;
    team_create(&t, n, IDS, 20.0);
    team_run(&t, member_script, (void *)sc);
    for (int r = 0; r < n; r++) {
        expect_status(&t, r, 0, RP_ERR_MISMATCH);
        assert_true(t.m[r].out[0].elapsed_s < 10.0);
        for (int i = 0; needles[i]; i++)
            expect_message_contains(&t, r, 0, needles[i]);
        expect_status(&t, r, 1, RP_ERR_COMM);
        assert_true(t.m[r].out[1].elapsed_s < 1.0);
        /* The later call's error carries the original reason. */
        for (int i = 0; needles[i]; i++)
            expect_message_contains(&t, r, 1, needles[i]);
        assert_true(rp_comm_broken(t.comms[r]));
    }
    team_destroy(&t);
}

/* One member's count differs: every member gets MISMATCH naming both counts and the odd replica. */
static void test_mismatch_count(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 4; r++)
        sc.spec[r] = f32_sum(54321);
    sc.spec[2].count = 65432;
    const char *needles[] = {"54321", "65432", "9074", NULL};
    expect_mismatch(4, &sc, needles);
}

/*
 * Small all-reduces take a one-rendezvous path and large ones two: a count
 * mismatch across that boundary (16 elements against 1M, both ways round) is
 * still reported on every member, without a hang.
 */
static void test_mismatch_count_small_against_large(void **state)
{
    (void)state;
    for (int odd = 0; odd < 2; odd++) {
        script sc = {.then_barrier = true};
        for (int r = 0; r < 3; r++)
            sc.spec[r] = f32_sum(odd ? 16 : 1 << 20);
        sc.spec[1].count = odd ? 1 << 20 : 16;
        const char *needles[] = {"count 16", "count 1048576", "9037", NULL};
        expect_mismatch(3, &sc, needles);
    }
}

/* One member broadcasts while the others all-reduce. */
static void test_mismatch_kind(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 3; r++)
        sc.spec[r] = f32_sum(100);
    sc.spec[1].kind = BROADCAST;
    const char *needles[] = {"broadcast", "reduce", "9037", NULL};
    expect_mismatch(3, &sc, needles);
}

static void test_mismatch_dtype(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 3; r++)
        sc.spec[r] = f32_sum(100);
    sc.spec[0].dtype = RP_F64;
    const char *needles[] = {"f32", "f64", "9000", NULL};
    expect_mismatch(3, &sc, needles);
}

/* One member all-reduces f32 gradients where the others send bf16: both dtypes are named. */
static void test_mismatch_dtype_bf16(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 4; r++) {
        sc.spec[r] = f32_sum(100);
        sc.spec[r].dtype = RP_BF16;
        sc.spec[r].op = RP_MEAN;
    }
    sc.spec[3].dtype = RP_F32;
    const char *needles[] = {"bf16", "f32", "9111", NULL};
    expect_mismatch(4, &sc, needles);
}

static void test_mismatch_op(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 5; r++)
        sc.spec[r] = f32_sum(100);
    sc.spec[4].op = RP_MAX;
    const char *needles[] = {"sum", "max", "9148", NULL};
    expect_mismatch(5, &sc, needles);
}

static void test_mismatch_root(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 3; r++)
        sc.spec[r] = (call_spec){.kind = BROADCAST, .count = 10, .dtype = RP_I32, .root = 0};
    sc.spec[2].root = 1;
    const char *needles[] = {"9074", NULL};
    expect_mismatch(3, &sc, needles);
}

/*
 * Timeout 0.3 s; member 3 arrives only after 1.5 s. The others get
 * RP_ERR_TIMEOUT after about the timeout, naming replica 9111; the late member
 * then fails at once with RP_ERR_COMM instead of waiting, as does any later
 * call, and the communicator is broken on every handle.
 */
static void test_timeout_names_missing_replica(void **state)
{
    (void)state;
    script sc = {.warmup = true, .then_barrier = true};
    for (int r = 0; r < 4; r++)
        sc.spec[r] = f32_sum(64);
    sc.delay_s[3] = 1.5;
    team t;
    team_create(&t, 4, IDS, 0.3);
    team_run(&t, member_script, &sc);
    for (int r = 0; r < 4; r++)
        expect_status(&t, r, 2, RP_OK);
    for (int r = 0; r < 3; r++) {
        expect_status(&t, r, 0, RP_ERR_TIMEOUT);
        if (!(t.m[r].out[0].elapsed_s >= 0.25 && t.m[r].out[0].elapsed_s <= 3.0)) {
            print_error("member %d timed out after %.3f s with a 0.3 s timeout\n", r,
                        t.m[r].out[0].elapsed_s);
            fail();
        }
        expect_message_contains(&t, r, 0, "9111");
        expect_status(&t, r, 1, RP_ERR_COMM);
        assert_true(t.m[r].out[1].elapsed_s < 1.0);
        expect_message_contains(&t, r, 1,
                                "9111"); /* the original reason, on a member that is not 9111 */
    }
    expect_status(&t, 3, 0, RP_ERR_COMM);
    assert_true(t.m[3].out[0].elapsed_s < 1.0);
    expect_status(&t, 3, 1, RP_ERR_COMM);
    assert_true(t.m[3].out[1].elapsed_s < 1.0);
    for (int r = 0; r < 4; r++)
        assert_true(rp_comm_broken(t.comms[r]));
    team_destroy(&t);
}

/*
 * The noun a handle's messages give its members ("replica" unless set; the runtime sets "worker"
 * in a mesh): a receive that times out names the silent peer with it, and a split inherits it.
 */
static void test_noun_names_members(void **state)
{
    (void)state;
    rp_comm *c[2];
    assert_int_equal(rp_comm_threads_create(c, 2, (int[]){4, 7}, 0.2), RP_OK);
    assert_string_equal(rp_comm_noun(c[0]), "replica");
    rp_comm_set_noun(c[0], "worker");
    assert_string_equal(rp_comm_noun(c[0]), "worker");
    float x = 0;
    assert_int_equal(rp_comm_recv(c[0], &x, 1, RP_F32, 1, 3), RP_ERR_TIMEOUT);
    tu_assert_error_contains("from worker 7 on worker 4: worker 7 did not send");
    rp_comm_destroy(c[0]);
    rp_comm_destroy(c[1]);

    rp_comm *one, *half;
    assert_int_equal(rp_comm_threads_create(&one, 1, (int[]){5}, 1.0), RP_OK);
    rp_comm_set_noun(one, "learner-and-more-than-15");
    assert_string_equal(rp_comm_noun(one), "learner-and-mor"); /* cut at 15 characters */
    rp_comm_set_noun(one, "worker");
    assert_int_equal(rp_comm_split(one, 0, 0, &half), RP_OK);
    assert_string_equal(rp_comm_noun(half), "worker");
    rp_comm_set_noun(one, NULL);
    assert_string_equal(rp_comm_noun(one), "replica");
    rp_comm_destroy(half);
    rp_comm_destroy(one);
}

/* A member late by less than the timeout is waited for. */
static void test_late_member_within_timeout(void **state)
{
    (void)state;
    script sc = {.then_barrier = true};
    for (int r = 0; r < 4; r++)
        sc.spec[r] = f32_sum(1000);
    sc.delay_s[2] = 0.3;
    team t;
    team_create(&t, 4, IDS, 5.0);
    team_run(&t, member_script, &sc);
    for (int r = 0; r < 4; r++) {
        expect_status(&t, r, 0, RP_OK);
        expect_status(&t, r, 1, RP_OK);
        assert_false(rp_comm_broken(t.comms[r]));
        assert_int_equal(rp_comm_sequence(t.comms[r]), 2);
    }
    team_destroy(&t);
}

/*
 * A member calls rp_comm_leave() instead of the collective (after the others
 * started waiting when leave_delay > 0, before they arrive otherwise): with a
 * 30 s timeout the others fail within 2 s, the message carrying the reason and
 * naming the replica that left.
 */
static void check_leave_fails_peers_fast(double leave_delay, double others_delay)
{
    script sc = {.then_barrier = true, .leave_reason = "boom"};
    for (int r = 0; r < 4; r++) {
        sc.spec[r] = f32_sum(1000);
        sc.delay_s[r] = others_delay;
    }
    sc.leave[3] = true;
    sc.delay_s[3] = leave_delay;
    team t;
    team_create(&t, 4, IDS, 30.0);
    team_run(&t, member_script, &sc);
    for (int r = 0; r < 3; r++) {
        const outcome *o = &t.m[r].out[0];
        if (o->status == RP_OK || o->elapsed_s > 2.0) {
            print_error(
                "member %d: status %d after %.3f s (expected an error within 2 s): \"%s\"\n", r,
                o->status, o->elapsed_s, o->error);
            fail();
        }
        expect_message_contains(&t, r, 0, "boom");
        expect_message_contains(&t, r, 0, "9111");
        expect_status(&t, r, 1, RP_ERR_COMM);
        assert_true(t.m[r].out[1].elapsed_s < 1.0);
        expect_message_contains(&t, r, 1, "boom");
        assert_true(rp_comm_broken(t.comms[r]));
    }
    team_destroy(&t);
}

/*
 * Member 3 makes an invalid call (a negative count) while its peers wait in
 * a valid all-reduce: it gets RP_ERR_INVALID, and so do they, at once (a 30 s
 * timeout), naming the member and the invalid call.
 */
static void member_invalid_call(member *m, void *ctx)
{
    (void)ctx;
    float x[16] = {0};
    double t0 = rp_now_s();
    if (m->rank == 3) {
        tu_sleep_s(0.2);
        t0 = rp_now_s();
        outcome_set(&m->out[0], rp_comm_all_reduce(m->comm, x, x, -5, RP_F32, RP_SUM), t0);
    } else {
        outcome_set(&m->out[0], rp_comm_all_reduce(m->comm, x, x, 16, RP_F32, RP_SUM), t0);
    }
}

static void test_invalid_call_fails_peers_fast(void **state)
{
    (void)state;
    team t;
    team_create(&t, 4, IDS, 30.0);
    team_run(&t, member_invalid_call, NULL);
    for (int r = 0; r < 4; r++) {
        expect_status(&t, r, 0, RP_ERR_INVALID);
        expect_message_contains(&t, r, 0, "-5");
        assert_true(t.m[r].out[0].elapsed_s < 2.0);
        assert_true(rp_comm_broken(t.comms[r]));
    }
    for (int r = 0; r < 3; r++)
        expect_message_contains(&t, r, 0, "9111");
    team_destroy(&t);
}

static void test_leave_while_peers_wait_fails_them_fast(void **state)
{
    (void)state;
    check_leave_fails_peers_fast(0.2, 0.0);
}

static void test_leave_before_peers_arrive_fails_them_fast(void **state)
{
    (void)state;
    check_leave_fails_peers_fast(0.0, 0.2);
}

typedef struct {
    int64_t count;
    float *send[MAX_MEMBERS], *recv[MAX_MEMBERS];
    atomic_int done_first;
    atomic_int rejoined;
} leave_after_ctx;

static void member_leave_after(member *m, void *ctx)
{
    leave_after_ctx *c = ctx;
    int r = m->rank, n = m->team->n;
    double t0 = rp_now_s();
    outcome_set(&m->out[0],
                rp_comm_all_reduce(m->comm, c->send[r], c->recv[r], c->count, RP_F32, RP_SUM), t0);
    if (r == n - 1) {
        /* Leaves at once, possibly while the others are still finishing the same collective. */
        rp_comm_leave(m->comm, RP_ERR_NUMERIC, "finished early");
        if (!wait_until(&c->done_first, n - 1, 30.0))
            member_fail(m, "the others never finished call 1");
        rp_comm_rejoin(m->comm);
        atomic_store(&c->rejoined, 1);
    } else {
        if (rp_comm_broken(m->comm)) member_fail(m, "broken after a leave that hurt nobody");
        atomic_fetch_add(&c->done_first, 1);
        if (!wait_until(&c->rejoined, 1, 30.0)) member_fail(m, "the last member never rejoined");
    }
    t0 = rp_now_s();
    outcome_set(&m->out[1], rp_comm_all_reduce(m->comm, c->send[r], c->recv[r], 1, RP_F32, RP_SUM),
                t0);
}

/*
 * A member that completed the collective and then leaves hurts nobody: the
 * others' same collective succeeds; after rp_comm_rejoin() the next one too.
 */
static void test_leave_after_completing_is_harmless(void **state)
{
    (void)state;
    static leave_after_ctx c;
    memset(&c, 0, sizeof c);
    c.count = (int64_t)4 << 20;
    const int n = 3;
    for (int r = 0; r < n; r++) {
        c.send[r] = (float *)xmalloc((size_t)c.count * 4);
        c.recv[r] = (float *)xmalloc((size_t)c.count * 4);
        for (int64_t i = 0; i < c.count; i++)
            c.send[r][i] = (float)(r + 1);
    }
    team t;
    team_create(&t, n, IDS, 30.0);
    team_run(&t, member_leave_after, &c);
    for (int r = 0; r < n; r++) {
        expect_status(&t, r, 0, RP_OK);
        expect_status(&t, r, 1, RP_OK);
        assert_false(rp_comm_broken(t.comms[r]));
        assert_int_equal(rp_comm_sequence(t.comms[r]), 2);
        assert_true(c.recv[r][0] == 6.0f);
        assert_true(c.recv[r][c.count - 1] == 6.0f);
    }
    team_destroy(&t);
    for (int r = 0; r < n; r++) {
        free(c.send[r]);
        free(c.recv[r]);
    }
}

/* ---- sequence and determinism --------------------------------------------- */

typedef struct {
    uint64_t seq[MAX_MEMBERS][6];
} sequence_ctx;

static void member_sequence(member *m, void *ctx)
{
    sequence_ctx *c = ctx;
    int r = m->rank, n = m->team->n;
    float send[MAX_MEMBERS * 4] = {0}, recv[MAX_MEMBERS * 4];
    c->seq[r][0] = rp_comm_sequence(m->comm);
    double t0 = rp_now_s();
    outcome_set(&m->out[0], rp_comm_all_reduce(m->comm, send, recv, 4, RP_F32, RP_SUM), t0);
    c->seq[r][1] = rp_comm_sequence(m->comm);
    outcome_set(&m->out[1], rp_comm_reduce_scatter(m->comm, send, recv, 4, RP_F32, RP_MAX), t0);
    c->seq[r][2] = rp_comm_sequence(m->comm);
    outcome_set(&m->out[2], rp_comm_all_gather(m->comm, send, recv, 4, RP_F32), t0);
    c->seq[r][3] = rp_comm_sequence(m->comm);
    outcome_set(&m->out[3], rp_comm_broadcast(m->comm, send, 4 * n, RP_F32, n - 1), t0);
    c->seq[r][4] = rp_comm_sequence(m->comm);
    outcome_set(&m->out[4], rp_comm_barrier(m->comm), t0);
    c->seq[r][5] = rp_comm_sequence(m->comm);
}

/* rp_comm_sequence() counts the collectives a member has completed, one per call of each kind. */
static void test_sequence_counts_collectives(void **state)
{
    (void)state;
    static sequence_ctx c;
    memset(&c, 0, sizeof c);
    team t;
    team_create(&t, 3, IDS, SWEEP_TIMEOUT_S);
    team_run(&t, member_sequence, &c);
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < 5; k++)
            expect_status(&t, r, k, RP_OK);
        for (int k = 0; k < 6; k++)
            assert_int_equal(c.seq[r][k], k);
    }
    team_destroy(&t);
}

typedef struct {
    int64_t count;
    float *send[MAX_MEMBERS];
    float *out[3][MAX_MEMBERS];
} determinism_ctx;

static void member_determinism(member *m, void *ctx)
{
    determinism_ctx *c = ctx;
    int r = m->rank, n = m->team->n;
    for (int run = 0; run < 3; run++) {
        if (run == 2) tu_sleep_s(0.002 * (n - r)); /* the third run arrives in reverse rank order */
        double t0 = rp_now_s();
        outcome_set(
            &m->out[run],
            rp_comm_all_reduce(m->comm, c->send[r], c->out[run][r], c->count, RP_F32, RP_SUM), t0);
    }
}

/* The same f32 inputs give bitwise the same sums, on every member, run after run, whatever the
 * arrival order. */
static void test_all_reduce_deterministic(void **state)
{
    (void)state;
    static determinism_ctx c;
    const int n = 8;
    c.count = ((int64_t)1 << 20) + 17;
    size_t bytes = (size_t)c.count * 4;
    for (int r = 0; r < n; r++) {
        c.send[r] = (float *)xmalloc(bytes);
        gen(c.send[r], RP_F32, r, 0, c.count, false);
        for (int run = 0; run < 3; run++)
            c.out[run][r] = (float *)xmalloc(bytes);
    }
    team t;
    team_create(&t, n, IDS, SWEEP_TIMEOUT_S);
    team_run(&t, member_determinism, &c);
    for (int r = 0; r < n; r++) {
        for (int run = 0; run < 3; run++) {
            expect_status(&t, r, run, RP_OK);
            check_values("deterministic all_reduce", r, "output vs run 0 rank 0",
                         (const char *)c.out[run][r], (const char *)c.out[0][0], c.count, RP_F32,
                         false);
        }
    }
    team_destroy(&t);
    for (int r = 0; r < n; r++) {
        free(c.send[r]);
        for (int run = 0; run < 3; run++)
            free(c.out[run][r]);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_and_op_names),
        cmocka_unit_test(test_create_and_accessors),
        cmocka_unit_test(test_all_reduce_every_dtype_op_count),
        cmocka_unit_test(test_reduce_scatter_every_dtype_op_count),
        cmocka_unit_test(test_all_gather_every_dtype_count),
        cmocka_unit_test(test_broadcast_every_root_dtype_count),
        cmocka_unit_test(test_all_reduce_64mib),
        cmocka_unit_test(test_reduce_scatter_64mib),
        cmocka_unit_test(test_reduce_scatter_v),
        cmocka_unit_test(test_all_gather_64mib),
        cmocka_unit_test(test_broadcast_64mib),
        cmocka_unit_test(test_all_reduce_deterministic),
        cmocka_unit_test(test_bf16_sums_in_f32_rounded_once),
        cmocka_unit_test(test_barrier_waits_for_everyone),
        cmocka_unit_test(test_sequence_counts_collectives),
        cmocka_unit_test(test_split_groups_by_color_and_key),
        cmocka_unit_test(test_mismatch_count),
        cmocka_unit_test(test_mismatch_count_small_against_large),
        cmocka_unit_test(test_mismatch_kind),
        cmocka_unit_test(test_mismatch_dtype),
        cmocka_unit_test(test_mismatch_dtype_bf16),
        cmocka_unit_test(test_mismatch_op),
        cmocka_unit_test(test_mismatch_root),
        cmocka_unit_test(test_timeout_names_missing_replica),
        cmocka_unit_test(test_noun_names_members),
        cmocka_unit_test(test_late_member_within_timeout),
        cmocka_unit_test(test_invalid_call_fails_peers_fast),
        cmocka_unit_test(test_leave_while_peers_wait_fails_them_fast),
        cmocka_unit_test(test_leave_before_peers_arrive_fails_them_fast),
        cmocka_unit_test(test_leave_after_completing_is_harmless),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
