/*
 * test_ps.c - the parameter servers' threads backend through the public API
 * (replicator/ps.h).
 *
 * The shard ranges (cover, contiguity, 16-float boundaries, balance); no lost
 * or duplicated updates under 4 concurrent workers, checked exactly; every
 * rule applied on the servers against rp_optim_apply() applied locally,
 * bitwise; convergence of asynchronous SGD and momentum on least squares
 * with 1, 2 and 4 workers; the staleness bound with one slow worker (and a
 * control without it); the staleness timeout and its message; phases; the
 * shared work queue; checkpoint round trips; and bad input.
 *
 * Each worker runs on its own pthread with its own handle. cmocka's asserts
 * are not thread-safe, so a worker only records what went wrong (the first
 * failed check, as text) and the main thread fails the test after joining.
 * Every join is bounded: a call that hangs ends the process with a message
 * instead of hanging the test.
 *
 * Clocks of other workers are never read through their handles (a handle
 * belongs to its thread): a worker publishes its own counts in atomics that
 * the others read.
 *
 * The same checks (those that are not about the in-process shards' locks)
 * run again on the remote servers - the code the MPI backend runs - with
 * server threads on the threads communicator; then what only they do: a
 * silent server named by rank and host, a worker's failure report, bad
 * input.
 *
 * RP_TEST_VERBOSE=1 prints the convergence errors and the timeout messages.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "replicator/ps.h"

#define MAX_W          8
#define ALIGN_FLOATS   16   /* the shard boundary granularity promised by ps.h */
#define JOIN_LIMIT_S   60.0 /* longest a crew of workers may run */
#define CALL_TIMEOUT_S 30.0 /* the servers' timeout where nothing should time out */

/* ---- small helpers --------------------------------------------------------------- */

static void *xmalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    assert_non_null(p);
    return p;
}

static rp_optim_config sgd_plain_config(void)
{
    rp_optim_config o = rp_optim_config_default();
    o.momentum = 0.0f;
    return o;
}

static rp_ps_config ps_config(int servers, int staleness, double timeout_s, rp_optim_config optim)
{
    rp_ps_config cfg = rp_ps_config_default();
    cfg.servers = servers;
    cfg.staleness = staleness;
    cfg.timeout_s = timeout_s;
    cfg.optim = optim;
    return cfg;
}

/* Fails with the status and message when s is not RP_OK (main thread only). */
static void expect_ok(rp_status s, const char *what)
{
    if (s != RP_OK) {
        print_error("%s returned %d (%s): %s\n", what, s, rp_status_name(s), rp_last_error());
        fail();
    }
}

/* The first index where a and b differ bitwise, or -1. */
static int64_t first_bit_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return -1;
}

static void expect_bitwise(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t i = first_bit_diff(got, want, n);
    if (i >= 0) {
        print_error("%s: element %lld of %lld: got %.9g, want %.9g\n", what, (long long)i,
                    (long long)n, (double)got[i], (double)want[i]);
        fail();
    }
}

/* ---- remote servers on threads ------------------------------------------------------ */

/*
 * The remote servers (the MPI backend's code) on the threads communicator:
 * W worker members and S server members, each server on a thread of its
 * own running rp_ps_mpi_serve(). The tests marked "remote" run with
 * `remote` set, so ps_make() builds such a world instead of in-process
 * shards, and the same checks hold for the remote code path (under TSan
 * too). A world lives from ps_make() to ps_free() of its handles.
 */
#define MAX_S 8

static bool remote; /* ps_make() builds remote servers on threads */

typedef struct world {
    int W, S;
    rp_comm *comms[MAX_W + MAX_S];
    rp_ps_group *groups[MAX_W + MAX_S];
    pthread_t th[MAX_W + MAX_S];
    rp_status created[MAX_W + MAX_S];
    rp_status served[MAX_S];
    char serve_error[MAX_S][1024];
    double timeout_s;
    atomic_int hold;     /* server members with index >= hold wait before serving (0: none) */
    atomic_int released; /* set: they serve now */
} world;

static world *the_world;
static char last_serve_error[1024]; /* server 0's error in the last world_end */

typedef struct {
    world *w;
    int r;
} member_arg;

static member_arg member_args[MAX_W + MAX_S];

static void *member_thread(void *arg)
{
    member_arg *a = arg;
    world *w = a->w;
    int r = a->r;
    w->created[r] = rp_ps_group_create(&w->groups[r], w->comms[r], w->S, w->timeout_s);
    if (w->created[r] != RP_OK || r < w->W) return NULL;
    int s = r - w->W, hold = atomic_load(&w->hold);
    if (hold > 0 && s >= hold) {
        double end = rp_now_s() + JOIN_LIMIT_S;
        while (!atomic_load(&w->released) && rp_now_s() < end)
            tu_sleep_s(0.001);
    }
    w->served[s] = rp_ps_mpi_serve(w->groups[r]);
    snprintf(w->serve_error[s], sizeof w->serve_error[s], "%s",
             w->served[s] == RP_OK ? "" : rp_last_error());
    rp_ps_group_destroy(w->groups[r]);
    w->groups[r] = NULL;
    return NULL;
}

/* W workers' groups (the main thread makes their calls) and S serving threads; hold: see world. */
static world *world_start(int W, int S, double timeout_s, int hold)
{
    assert_true(W <= MAX_W && S <= MAX_S);
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->W = W;
    w->S = S;
    w->timeout_s = timeout_s;
    atomic_init(&w->hold, hold);
    atomic_init(&w->released, 0);
    expect_ok(rp_comm_threads_create(w->comms, W + S, NULL, timeout_s), "rp_comm_threads_create");
    for (int r = 0; r < W + S; r++) {
        member_args[r] = (member_arg){w, r};
        assert_int_equal(pthread_create(&w->th[r], NULL, member_thread, &member_args[r]), 0);
    }
    for (int r = 0; r < W; r++)
        pthread_join(w->th[r], NULL);
    for (int r = 0; r < W; r++)
        expect_ok(w->created[r], "rp_ps_group_create (worker)");
    return w;
}

/* Says goodbye from every worker, waits (bounded) for the servers; their status must be `want`. */
static void world_end(world *w, rp_status want)
{
    for (int r = 0; r < w->W; r++) {
        rp_ps_group_destroy(w->groups[r]);
        w->groups[r] = NULL;
    }
    atomic_store(&w->released, 1);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)JOIN_LIMIT_S;
    for (int r = w->W; r < w->W + w->S; r++) {
        if (pthread_timedjoin_np(w->th[r], NULL, &deadline) != 0) {
            fprintf(stderr, "test_ps: server %d still serving after every worker left\n", r - w->W);
            fflush(stderr);
            _exit(1);
        }
    }
    snprintf(last_serve_error, sizeof last_serve_error, "%s", w->serve_error[0]);
    for (int s = 0; s < w->S; s++) {
        if (w->created[w->W + s] != RP_OK || w->served[s] != want) {
            print_error("server %d: group %s, serve returned %s (want %s): %s\n", s,
                        rp_status_name(w->created[w->W + s]), rp_status_name(w->served[s]),
                        rp_status_name(want), w->serve_error[s]);
            fail();
        }
    }
    for (int r = 0; r < w->W + w->S; r++)
        rp_comm_destroy(w->comms[r]);
    free(w);
}

/* n handles on one set: in-process shards, or (remote) a world of remote servers. */
static void ps_make(rp_ps **h, int n, int64_t numel, const rp_ps_config *cfg)
{
    if (!remote) {
        expect_ok(rp_ps_threads_create(h, n, numel, cfg), "rp_ps_threads_create");
        return;
    }
    assert_null(the_world);
    the_world = world_start(n, cfg->servers, CALL_TIMEOUT_S, 0);
    for (int w = 0; w < n; w++) {
        expect_ok(rp_ps_mpi_create(&h[w], the_world->groups[w], numel, cfg), "rp_ps_mpi_create");
        assert_string_equal(rp_ps_backend(h[w]), "remote");
        assert_int_equal(rp_ps_worker(h[w]), w);
        assert_int_equal(rp_ps_workers(h[w]), n);
    }
}

static void ps_free(rp_ps **h, int n)
{
    for (int w = 0; w < n; w++) {
        rp_ps_destroy(h[w]);
        h[w] = NULL;
    }
    if (remote && the_world) {
        world_end(the_world, RP_OK);
        the_world = NULL;
    }
}

/* ---- a crew of workers, one thread each ---------------------------------------- */

typedef struct crew crew;

typedef struct {
    crew *crew;
    int w;
    rp_ps *ps;
    int bad; /* checks that failed on the worker's thread */
    char bad_what[512];
} worker;

typedef void (*worker_fn)(worker *me, void *ctx);

struct crew {
    int n;
    rp_ps *h[MAX_W];
    worker wk[MAX_W];
    worker_fn fn;
    void *ctx;
    pthread_barrier_t start; /* all workers begin together, so their calls overlap */
};

/* Records a failed check on a worker's thread (the first one's text is kept). */
__attribute__((format(printf, 2, 3))) static void worker_fail(worker *me, const char *fmt, ...)
{
    if (me->bad++ > 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(me->bad_what, sizeof me->bad_what, fmt, ap);
    va_end(ap);
}

/* A call on a worker's thread that must succeed; false (and recorded) if it did not. */
static bool worker_ok(worker *me, rp_status s, const char *what)
{
    if (s == RP_OK) return true;
    worker_fail(me, "%s returned %d (%s): %s", what, s, rp_status_name(s), rp_last_error());
    return false;
}

static void crew_create(crew *c, int n, int64_t numel, const rp_ps_config *cfg)
{
    memset(c, 0, sizeof *c);
    assert_true(n <= MAX_W);
    c->n = n;
    ps_make(c->h, n, numel, cfg);
    for (int w = 0; w < n; w++) {
        c->wk[w].crew = c;
        c->wk[w].w = w;
        c->wk[w].ps = c->h[w];
    }
}

static void *worker_thread(void *arg)
{
    worker *me = arg;
    pthread_barrier_wait(&me->crew->start);
    me->crew->fn(me, me->crew->ctx);
    return NULL;
}

/* Runs fn on n threads, thread w with handle w; returns when all are done (bounded). */
static void crew_run(crew *c, worker_fn fn, void *ctx)
{
    c->fn = fn;
    c->ctx = ctx;
    pthread_t th[MAX_W];
    for (int w = 0; w < c->n; w++) {
        c->wk[w].bad = 0;
        c->wk[w].bad_what[0] = '\0';
    }
    assert_int_equal(pthread_barrier_init(&c->start, NULL, (unsigned)c->n), 0);
    for (int w = 0; w < c->n; w++)
        assert_int_equal(pthread_create(&th[w], NULL, worker_thread, &c->wk[w]), 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)JOIN_LIMIT_S;
    for (int w = 0; w < c->n; w++) {
        if (pthread_timedjoin_np(th[w], NULL, &deadline) != 0) {
            fprintf(stderr, "test_ps: worker %d of %d still running after %.0f s: a call hangs\n",
                    w, c->n, JOIN_LIMIT_S);
            fflush(stderr);
            _exit(1);
        }
    }
    pthread_barrier_destroy(&c->start);
    for (int w = 0; w < c->n; w++) {
        if (c->wk[w].bad) {
            print_error("worker %d: %d failed checks, first: %s\n", w, c->wk[w].bad,
                        c->wk[w].bad_what);
            fail();
        }
    }
}

static void crew_destroy(crew *c)
{
    ps_free(c->h, c->n);
}

/* ---- shard ranges ------------------------------------------------------------------ */

/*
 * The contract of rp_ps_shard_range() for one (numel, S): the ranges are
 * [0, numel) cut in S contiguous pieces in server order, every cut on a
 * multiple of 16 floats unless it is the end of the block, and no two pieces
 * differ in size by more than 16 floats.
 */
static void check_ranges(int64_t numel, int servers)
{
    int64_t expect_lo = 0, min_n = INT64_MAX, max_n = -1;
    for (int s = 0; s < servers; s++) {
        int64_t lo = -7, hi = -7;
        rp_ps_shard_range(numel, servers, s, &lo, &hi);
        if (lo != expect_lo || hi < lo || hi > numel) {
            print_error(
                "numel %lld, %d servers: server %d has [%lld, %lld), expected to start at %lld "
                "and end by %lld\n",
                (long long)numel, servers, s, (long long)lo, (long long)hi, (long long)expect_lo,
                (long long)numel);
            fail();
        }
        if (hi % ALIGN_FLOATS != 0 && hi != numel) {
            print_error("numel %lld, %d servers: server %d ends at %lld, neither a multiple of %d "
                        "nor the end\n",
                        (long long)numel, servers, s, (long long)hi, ALIGN_FLOATS);
            fail();
        }
        int64_t n = hi - lo;
        if (n < min_n) min_n = n;
        if (n > max_n) max_n = n;
        expect_lo = hi;
    }
    if (expect_lo != numel) {
        print_error("numel %lld, %d servers: the last range ends at %lld\n", (long long)numel,
                    servers, (long long)expect_lo);
        fail();
    }
    if (max_n - min_n > ALIGN_FLOATS) {
        print_error("numel %lld, %d servers: shard sizes from %lld to %lld (more than %d apart)\n",
                    (long long)numel, servers, (long long)min_n, (long long)max_n, ALIGN_FLOATS);
        fail();
    }
}

static void test_shard_ranges(void **unused)
{
    (void)unused;
    static const int64_t numels[] = {0,     1,     15,    16,     17,      31,           32,   33,
                                     47,    100,   255,   256,    257,     1000,         1024, 4097,
                                     10000, 12345, 65536, 272474, 1000003, (1 << 24) + 5};
    static const int servers[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 31, 63, 64, 100};
    for (size_t a = 0; a < sizeof numels / sizeof numels[0]; a++)
        for (size_t b = 0; b < sizeof servers / sizeof servers[0]; b++)
            check_ranges(numels[a], servers[b]);

    /* A worked case: 1000 floats on 3 servers can only be cut at 336 and 672. */
    int64_t lo, hi;
    rp_ps_shard_range(1000, 3, 1, &lo, &hi);
    assert_int_equal(lo, 336);
    assert_int_equal(hi, 672);
    /* Fewer lines than servers: 20 floats on 4 servers leave some shards empty. */
    int empty = 0;
    for (int s = 0; s < 4; s++) {
        rp_ps_shard_range(20, 4, s, &lo, &hi);
        empty += lo == hi;
    }
    assert_true(empty >= 2);
}

/* ---- configuration, accessors and handle lifetime ------------------------------------ */

static void test_config_default_and_accessors(void **unused)
{
    (void)unused;
    rp_ps_config d = rp_ps_config_default();
    assert_int_equal(d.servers, 1);
    assert_int_equal(d.staleness, -1);
    assert_true(d.timeout_s == 0.0);
    rp_optim_config od = rp_optim_config_default();
    assert_int_equal(d.optim.kind, od.kind);
    assert_true(d.optim.momentum == od.momentum);

    rp_ps_config cfg = ps_config(3, -1, CALL_TIMEOUT_S, sgd_plain_config());
    rp_ps *h[3] = {NULL, NULL, NULL};
    expect_ok(rp_ps_threads_create(h, 3, 100, &cfg), "rp_ps_threads_create");
    for (int w = 0; w < 3; w++) {
        assert_non_null(h[w]);
        assert_string_equal(rp_ps_backend(h[w]), "threads");
        assert_int_equal(rp_ps_worker(h[w]), w);
        assert_int_equal(rp_ps_workers(h[w]), 3);
        assert_int_equal(rp_ps_servers(h[w]), 3);
        assert_int_equal(rp_ps_numel(h[w]), 100);
        assert_int_equal(rp_ps_clock(h[w]), 0);
    }
    /* Values start at zero. */
    float v[100], g[100];
    for (int i = 0; i < 100; i++)
        v[i] = 1.0f;
    expect_ok(rp_ps_pull(h[2], v), "rp_ps_pull");
    for (int i = 0; i < 100; i++)
        assert_true(v[i] == 0.0f);

    /* The shards live until the last handle goes, whichever it is (ASan checks the rest). */
    rp_ps_destroy(h[1]);
    rp_ps_destroy(h[0]);
    for (int i = 0; i < 100; i++)
        g[i] = 1.0f;
    expect_ok(rp_ps_push(h[2], g, 0.25f), "rp_ps_push after other handles were destroyed");
    expect_ok(rp_ps_pull(h[2], v), "rp_ps_pull after other handles were destroyed");
    for (int i = 0; i < 100; i++)
        assert_true(v[i] == -0.25f);
    rp_ps_destroy(h[2]);
    rp_ps_destroy(NULL);

    /* An empty set is allowed (numel 0) and still counts pushes. */
    rp_ps *e = NULL;
    cfg.servers = 2;
    expect_ok(rp_ps_threads_create(&e, 1, 0, &cfg), "rp_ps_threads_create(numel 0)");
    expect_ok(rp_ps_push(e, g, 0.5f), "rp_ps_push(numel 0)");
    assert_int_equal(rp_ps_clock(e), 1);
    int64_t step = -1;
    expect_ok(rp_ps_snapshot(e, v, NULL, &step), "rp_ps_snapshot(numel 0)");
    assert_int_equal(step, 1);
    /* With nothing to hold, the value arrays may be NULL. */
    expect_ok(rp_ps_init(e, NULL, NULL, 3), "rp_ps_init(numel 0, NULL values)");
    expect_ok(rp_ps_snapshot(e, NULL, NULL, &step), "rp_ps_snapshot(numel 0, NULL values)");
    assert_int_equal(step, 3);
    rp_ps_destroy(e);
}

/* ---- no lost or duplicated updates --------------------------------------------------- */

/*
 * Push k of worker w carries c(w,k) * f(i) * 2^-10 at element i, with c in
 * 1..13 and f in 1..4 (f from a hash of i, so a gradient slice taken at the
 * wrong offset changes the result). With lr = 1/2 every value the servers
 * ever hold is x0[i] - C * f(i) * 2^-11 for an integer C (the sum of c over
 * the pushes applied): |x0| <= 2 and C * f <= 800 * 13 * 4, so every value
 * is a multiple of 2^-11 below 2^5 in magnitude, which float holds exactly
 * (24 significant bits cover 2^-11 .. 2^13). Each update p -= lr * g is then
 * exact whatever the order of the pushes (with or without a fused
 * multiply-add), and the final values must equal the expected ones exactly.
 *
 * A pull sees each shard whole, so within one shard every element must show
 * the same C; C never decreases between a worker's pulls and includes at
 * least the worker's own pushes. The set is 64k floats so that a push or a
 * pull takes long enough for an unlocked one to be caught overlapping.
 */
#define LU_W  4
#define LU_S  3
#define LU_N  65536
#define LU_K  200
#define LU_LR 0.5f

static int lu_c(int w, int k)
{
    return 1 + (w * LU_K + k) % 13;
}
static int lu_f(int64_t i)
{
    return 1 + (int)(((uint32_t)i * 2654435761u) >> 30);
}
static float lu_x0(int64_t i)
{
    return (float)((int)(i % 5) - 2);
}

/* The C each shard shows in v, checked against the shard-wholeness and monotonicity rules. */
static void lu_check_pull(worker *me, const float *v, int64_t *seen, int64_t own, const char *after)
{
    for (int s = 0; s < LU_S; s++) {
        int64_t lo, hi;
        rp_ps_shard_range(LU_N, LU_S, s, &lo, &hi);
        if (lo == hi) continue;
        double c0 = ((double)lu_x0(lo) - (double)v[lo]) * 2048.0 / lu_f(lo);
        if (c0 != floor(c0)) {
            worker_fail(me, "after %s: element %lld = %.9g is not x0 - C*f*2^-11 for an integer C",
                        after, (long long)lo, (double)v[lo]);
            return;
        }
        for (int64_t i = lo; i < hi; i++) {
            double d = ((double)lu_x0(i) - (double)v[i]) * 2048.0;
            if (d != c0 * lu_f(i)) {
                worker_fail(me,
                            "after %s: server %d's shard is torn: element %lld shows C = %.9g, "
                            "element %lld shows C = %.9g",
                            after, s, (long long)lo, c0, (long long)i, d / lu_f(i));
                return;
            }
        }
        int64_t c = (int64_t)c0;
        if (c < seen[s] || c < own) {
            worker_fail(me,
                        "after %s: server %d shows C = %lld, but this worker saw %lld before and "
                        "its own pushes alone give %lld",
                        after, s, (long long)c, (long long)seen[s], (long long)own);
            return;
        }
        seen[s] = c;
    }
}

static void lu_worker(worker *me, void *ctx)
{
    (void)ctx;
    float *g = malloc(LU_N * sizeof(float)), *v = malloc(LU_N * sizeof(float));
    int64_t seen[LU_S] = {0}, own = 0;
    for (int k = 0; k < LU_K && !me->bad; k++) {
        int c = lu_c(me->w, k);
        for (int64_t i = 0; i < LU_N; i++)
            g[i] = (float)(c * lu_f(i)) * 0x1p-10f;
        own += c;
        /* Odd steps push and pull in one call; even ones push, and every fourth pulls after. */
        if (k % 2 == 1) {
            if (!worker_ok(me, rp_ps_push_pull(me->ps, g, LU_LR, v), "rp_ps_push_pull")) break;
            lu_check_pull(me, v, seen, own, "push_pull");
        } else {
            if (!worker_ok(me, rp_ps_push(me->ps, g, LU_LR), "rp_ps_push")) break;
            if (k % 4 == 0) {
                if (!worker_ok(me, rp_ps_pull(me->ps, v), "rp_ps_pull")) break;
                lu_check_pull(me, v, seen, own, "pull");
            }
        }
        if (rp_ps_clock(me->ps) != k + 1)
            worker_fail(me, "clock %lld after %d pushes", (long long)rp_ps_clock(me->ps), k + 1);
    }
    free(g);
    free(v);
}

static void test_no_lost_or_duplicated_updates(void **unused)
{
    (void)unused;
    rp_ps_config cfg = ps_config(LU_S, -1, CALL_TIMEOUT_S, sgd_plain_config());
    crew c;
    crew_create(&c, LU_W, LU_N, &cfg);
    float *x0 = xmalloc(LU_N * sizeof(float)), *got = xmalloc(LU_N * sizeof(float));
    for (int64_t i = 0; i < LU_N; i++)
        x0[i] = lu_x0(i);
    expect_ok(rp_ps_init(c.h[0], x0, NULL, 0), "rp_ps_init");

    crew_run(&c, lu_worker, NULL);

    int64_t total_c = 0;
    for (int w = 0; w < LU_W; w++)
        for (int k = 0; k < LU_K; k++)
            total_c += lu_c(w, k);
    int64_t step = -1;
    expect_ok(rp_ps_snapshot(c.h[0], got, NULL, &step), "rp_ps_snapshot");
    for (int64_t i = 0; i < LU_N; i++) {
        /* Exact in double, and representable in float (see above). */
        float want = (float)((double)x0[i] - (double)LU_LR * (double)(total_c * lu_f(i)) * 0x1p-10);
        if (got[i] != want) {
            print_error(
                "element %lld: got %.9g, want %.9g (= x0 %.9g - lr * %lld * 2^-10): updates were "
                "lost or applied twice\n",
                (long long)i, (double)got[i], (double)want, (double)x0[i],
                (long long)(total_c * lu_f(i)));
            fail();
        }
    }
    assert_int_equal(step, LU_W * LU_K);
    for (int s = 0; s < LU_S; s++) {
        rp_ps_server_stats st;
        memset(&st, 0xff, sizeof st);
        expect_ok(rp_ps_stats(c.h[s % LU_W], s, &st), "rp_ps_stats");
        if (st.applied != LU_W * LU_K || st.received != LU_W * LU_K) {
            print_error("server %d: applied %lld, received %lld, want %d each\n", s,
                        (long long)st.applied, (long long)st.received, LU_W * LU_K);
            fail();
        }
        for (int w = 0; w < 64; w++) {
            int64_t want = w < LU_W ? LU_K : 0;
            if (st.from_worker[w] != want) {
                print_error("server %d: %lld pushes from worker %d, want %lld\n", s,
                            (long long)st.from_worker[w], w, (long long)want);
                fail();
            }
        }
    }
    crew_destroy(&c);
    free(x0);
    free(got);
}

/* ---- each rule on the servers against rp_optim_apply() locally ----------------------- */

/*
 * One worker pushes T random gradients with varying learning rates into a
 * set of n floats on S servers; the same gradients go through
 * rp_optim_apply() on one local copy, step t for push t. Every rule is
 * element-wise, so the sharded update must be bitwise the local one:
 * values from pulls and from the snapshot, the slots, and the step count.
 */
static void check_rule(const char *name, rp_optim_config ocfg, int servers, int64_t n, int steps)
{
    rp_ps_config cfg = ps_config(servers, -1, CALL_TIMEOUT_S, ocfg);
    int slots = rp_optim_slots(&ocfg);
    rp_ps *ps = NULL;
    ps_make(&ps, 1, n, &cfg);

    float *p = xmalloc((size_t)n * sizeof(float)),
          *state = xmalloc((size_t)(slots + 1) * (size_t)n * sizeof(float));
    float *g = xmalloc((size_t)n * sizeof(float)), *got = xmalloc((size_t)n * sizeof(float));
    float *got_slots = xmalloc((size_t)(slots + 1) * (size_t)n * sizeof(float));
    tu_fill(p, n, 11, -1.0f, 1.0f);
    memset(state, 0, (size_t)(slots + 1) * (size_t)n * sizeof(float));
    expect_ok(rp_ps_init(ps, p, NULL, 0), "rp_ps_init");

    char what[160];
    for (int t = 1; t <= steps; t++) {
        tu_fill(g, n, 100 + (uint64_t)t, -1.0f, 1.0f);
        float lr = 0.0625f / (float)t + 0.01f;
        expect_ok(rp_ps_push(ps, g, lr), "rp_ps_push");
        rp_optim_apply(&ocfg, p, g, state, n, lr, t);
        expect_ok(rp_ps_pull(ps, got), "rp_ps_pull");
        snprintf(what, sizeof what, "%s, %d servers, %lld floats: pulled values after push %d",
                 name, servers, (long long)n, t);
        expect_bitwise(what, got, p, n);
    }
    assert_int_equal(rp_ps_clock(ps), steps);

    int64_t step = -1;
    memset(got, 0xff, (size_t)n * sizeof(float));
    memset(got_slots, 0xff, (size_t)(slots + 1) * (size_t)n * sizeof(float));
    expect_ok(rp_ps_snapshot(ps, got, got_slots, &step), "rp_ps_snapshot");
    snprintf(what, sizeof what, "%s, %d servers, %lld floats: snapshot values", name, servers,
             (long long)n);
    expect_bitwise(what, got, p, n);
    snprintf(what, sizeof what, "%s, %d servers, %lld floats: snapshot slots", name, servers,
             (long long)n);
    expect_bitwise(what, got_slots, state, (int64_t)slots * n);
    assert_int_equal(step, steps);
    /* Every server applies every push, an empty shard too (they all keep the same step). */
    for (int s = 0; s < servers; s++) {
        rp_ps_server_stats st;
        expect_ok(rp_ps_stats(ps, s, &st), "rp_ps_stats");
        if (st.applied != steps || st.received != steps || st.from_worker[0] != steps) {
            print_error("%s, %d servers, %lld floats: server %d applied %lld, received %lld (%lld "
                        "from worker "
                        "0), want %d\n",
                        name, servers, (long long)n, s, (long long)st.applied,
                        (long long)st.received, (long long)st.from_worker[0], steps);
            fail();
        }
    }
    ps_free(&ps, 1);
    free(p);
    free(state);
    free(g);
    free(got);
    free(got_slots);
}

static void test_rules_match_local_apply(void **unused)
{
    (void)unused;
    rp_optim_config momentum = rp_optim_config_default(); /* SGD, momentum 0.9 */
    rp_optim_config nesterov = momentum;
    nesterov.nesterov = true;
    nesterov.weight_decay = 1e-3f;
    rp_optim_config adam = rp_optim_config_default();
    adam.kind = RP_OPTIM_ADAM;
    rp_optim_config adamw = adam;
    adamw.kind = RP_OPTIM_ADAMW;
    adamw.weight_decay = 0.01f;
    rp_optim_config plain = sgd_plain_config();
    plain.weight_decay = 1e-3f;

    const struct {
        const char *name;
        rp_optim_config cfg;
    } rules[] = {{"sgd+wd", plain},
                 {"momentum", momentum},
                 {"nesterov+wd", nesterov},
                 {"adam", adam},
                 {"adamw", adamw}};
    const struct {
        int servers;
        int64_t n;
    } shapes[] = {{1, 1000}, {3, 1000}, {4, 20}, {5, 4099}};
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_rule(rules[r].name, rules[r].cfg, shapes[s].servers, shapes[s].n, 6);
}

/* ---- checkpoint round trip ------------------------------------------------------------- */

/*
 * Values, Adam's two slots and step 7 go in through rp_ps_init() and come
 * back bitwise from rp_ps_snapshot(); the next push is Adam's step 8 (its
 * bias correction differs from step 1's, so a reset step shows). Init also
 * resets the push counts.
 */
static void test_init_snapshot_round_trip(void **unused)
{
    (void)unused;
    const int64_t n = 1000;
    rp_optim_config adam = rp_optim_config_default();
    adam.kind = RP_OPTIM_ADAM;
    rp_ps_config cfg = ps_config(3, -1, CALL_TIMEOUT_S, adam);
    rp_ps *ps = NULL;
    ps_make(&ps, 1, n, &cfg);

    float *vals = xmalloc(n * sizeof(float)), *slots = xmalloc(2 * n * sizeof(float));
    float *got = xmalloc(n * sizeof(float)), *got_slots = xmalloc(2 * n * sizeof(float));
    float *g = xmalloc(n * sizeof(float));
    tu_fill(vals, n, 21, -2.0f, 2.0f);
    tu_fill(slots, n, 22, -0.1f, 0.1f);      /* m */
    tu_fill(slots + n, n, 23, 1e-4f, 1e-2f); /* v >= 0 */
    tu_fill(g, n, 24, -1.0f, 1.0f);

    /* A push before init is forgotten by the counts once init runs. */
    expect_ok(rp_ps_push(ps, g, 0.1f), "rp_ps_push");
    expect_ok(rp_ps_init(ps, vals, slots, 7), "rp_ps_init");
    rp_ps_server_stats st;
    for (int s = 0; s < 3; s++) {
        expect_ok(rp_ps_stats(ps, s, &st), "rp_ps_stats");
        assert_int_equal(st.applied, 0);
        assert_int_equal(st.received, 0);
        assert_int_equal(st.from_worker[0], 0);
    }

    int64_t step = -1;
    expect_ok(rp_ps_snapshot(ps, got, got_slots, &step), "rp_ps_snapshot");
    expect_bitwise("snapshot values after init", got, vals, n);
    expect_bitwise("snapshot slots after init", got_slots, slots, 2 * n);
    assert_int_equal(step, 7);
    /* Slots may be NULL in a snapshot. */
    step = -1;
    expect_ok(rp_ps_snapshot(ps, got, NULL, &step), "rp_ps_snapshot(slots NULL)");
    assert_int_equal(step, 7);

    const float lr = 0.01f;
    expect_ok(rp_ps_push(ps, g, lr), "rp_ps_push");
    rp_optim_apply(&adam, vals, g, slots, n, lr, 8);
    expect_ok(rp_ps_snapshot(ps, got, got_slots, &step), "rp_ps_snapshot");
    assert_int_equal(step, 8);
    expect_bitwise("values after the push following init at step 7 (Adam step 8)", got, vals, n);
    expect_bitwise("slots after the push following init at step 7 (Adam step 8)", got_slots, slots,
                   2 * n);
    for (int s = 0; s < 3; s++) {
        expect_ok(rp_ps_stats(ps, s, &st), "rp_ps_stats");
        assert_int_equal(st.applied, 1);
        assert_int_equal(st.received, 1);
    }

    /* Init with slots NULL zeroes them. */
    expect_ok(rp_ps_init(ps, vals, NULL, 0), "rp_ps_init(slots NULL)");
    expect_ok(rp_ps_snapshot(ps, got, got_slots, &step), "rp_ps_snapshot");
    assert_int_equal(step, 0);
    for (int64_t i = 0; i < 2 * n; i++)
        assert_true(got_slots[i] == 0.0f);
    ps_free(&ps, 1);
    free(vals);
    free(slots);
    free(got);
    free(got_slots);
    free(g);
}

/* ---- convergence on least squares ------------------------------------------------------ */

/*
 * min_x 0.5 * ||A x - b||^2 / m with A (256 x 16, uniform in [-1, 1)) of full
 * column rank and b = A x*: the minimiser is x*, and every minibatch
 * gradient vanishes there (an interpolating problem), so SGD converges
 * linearly to x* with no noise floor beyond float rounding (~1e-6 here).
 * E[A_i A_i^T] = I/3, so the curvature is about 1/3 and a minibatch's at most
 * a few units: lr = 0.1 (SGD) and 0.02 with momentum 0.9 (effective 0.2) are
 * stable, also with the few steps of staleness 4 asynchronous workers bring,
 * and 2400 pushes shrink the error from ||x*|| ~ 2.3 by many orders of
 * magnitude. The bound 1e-3 is three orders above the float floor and
 * several below the start.
 */
#define LS_M      256
#define LS_D      16
#define LS_BATCH  32
#define LS_PUSHES 2400

typedef struct {
    const float *a, *b;
    int pushes; /* per worker */
    float lr;
} ls_ctx;

static void ls_worker(worker *me, void *arg)
{
    ls_ctx *ctx = arg;
    rp_rng rng = rp_rng_make(77, (uint64_t)me->w);
    float x[LS_D], g[LS_D];
    if (!worker_ok(me, rp_ps_join(me->ps, 1), "rp_ps_join")) return;
    for (int it = 0; it < ctx->pushes; it++) {
        if (!worker_ok(me, rp_ps_pull(me->ps, x), "rp_ps_pull")) break;
        double acc[LS_D] = {0};
        for (int j = 0; j < LS_BATCH; j++) {
            int r = (int)rp_rng_below(&rng, LS_M);
            const float *row = ctx->a + (size_t)r * LS_D;
            double res = -(double)ctx->b[r];
            for (int c = 0; c < LS_D; c++)
                res += (double)row[c] * x[c];
            for (int c = 0; c < LS_D; c++)
                acc[c] += res * row[c];
        }
        for (int c = 0; c < LS_D; c++)
            g[c] = (float)(acc[c] / LS_BATCH);
        if (!worker_ok(me, rp_ps_push(me->ps, g, ctx->lr), "rp_ps_push")) break;
    }
    worker_ok(me, rp_ps_leave(me->ps), "rp_ps_leave");
}

static double ls_run(int workers, int staleness, rp_optim_config ocfg, float lr, const float *a,
                     const float *b, const float *xstar)
{
    rp_ps_config cfg = ps_config(2, staleness, CALL_TIMEOUT_S, ocfg);
    crew c;
    crew_create(&c, workers, LS_D, &cfg);
    ls_ctx ctx = {.a = a, .b = b, .pushes = LS_PUSHES / workers, .lr = lr};
    crew_run(&c, ls_worker, &ctx);
    float x[LS_D];
    int64_t step = -1;
    expect_ok(rp_ps_snapshot(c.h[0], x, NULL, &step), "rp_ps_snapshot");
    assert_int_equal(step, LS_PUSHES);
    crew_destroy(&c);
    double err = 0;
    for (int i = 0; i < LS_D; i++)
        err += ((double)x[i] - xstar[i]) * ((double)x[i] - xstar[i]);
    return sqrt(err);
}

static void test_least_squares_converges(void **unused)
{
    (void)unused;
    float *a = xmalloc(LS_M * LS_D * sizeof(float)), *b = xmalloc(LS_M * sizeof(float));
    float xstar[LS_D];
    tu_fill(a, LS_M * LS_D, 31, -1.0f, 1.0f);
    tu_fill(xstar, LS_D, 32, -1.0f, 1.0f);
    double norm = 0;
    for (int i = 0; i < LS_D; i++)
        norm += (double)xstar[i] * xstar[i];
    assert_true(sqrt(norm) > 1.0); /* the start (x = 0) is far from the optimum */
    for (int r = 0; r < LS_M; r++) {
        double s = 0;
        for (int c = 0; c < LS_D; c++)
            s += (double)a[r * LS_D + c] * xstar[c];
        b[r] = (float)s;
    }
    rp_optim_config sgd = sgd_plain_config();
    rp_optim_config momentum = rp_optim_config_default(); /* 0.9 */
    const struct {
        const char *name;
        rp_optim_config cfg;
        float lr;
        int staleness;
    } runs[] = {{"sgd", sgd, 0.1f, -1},
                {"momentum", momentum, 0.02f, -1},
                {"sgd, staleness 1", sgd, 0.1f, 1}};
    static const int workers[] = {1, 2, 4};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        for (size_t w = 0; w < sizeof workers / sizeof workers[0]; w++) {
            double t0 = rp_now_s();
            double err =
                ls_run(workers[w], runs[r].staleness, runs[r].cfg, runs[r].lr, a, b, xstar);
            double dt = rp_now_s() - t0;
            if (getenv("RP_TEST_VERBOSE"))
                print_message("least squares, %s, %d workers: ||x - x*|| = %.3g in %.3f s\n",
                              runs[r].name, workers[w], err, dt);
            if (!(err < 1e-3)) {
                print_error("least squares, %s, %d workers: ||x - x*|| = %.3g after %d pushes "
                            "(want < 1e-3)\n",
                            runs[r].name, workers[w], err, LS_PUSHES);
                fail();
            }
        }
    }
    free(a);
    free(b);
}

/* ---- the staleness bound --------------------------------------------------------------- */

/*
 * Three workers, the last one slow (20 ms before each push). Every worker
 * publishes `started[w]`, the number of pushes it has begun, before each
 * push, so its clock as the servers see it is never above started[w]. The
 * contract: a pull by a worker with clock c returns only once every other
 * worker's clock is at least c - k. So after each pull a fast worker checks
 * c - started[q] <= c - clock[q] <= k for every other q: a bound let through
 * one step late (k + 1) shows, since while the slow worker sleeps its clock
 * equals started[q]. The fast workers must also reach gap k (a bound that
 * is tighter than promised, or lock-step, shows). The control without a
 * bound must see the fast workers run far ahead, so the check can fail.
 */
#define ST_W       3
#define ST_SLOW    2
#define ST_STEPS   12
#define ST_SLEEP_S 0.020

typedef struct {
    int k;
    atomic_llong started[ST_W];
    int64_t max_gap[ST_W]; /* fast worker w's largest c - started[ST_SLOW] after a pull */
} st_ctx;

static void st_worker(worker *me, void *arg)
{
    st_ctx *ctx = arg;
    float x[64], g[64];
    for (int i = 0; i < 64; i++)
        g[i] = 0.001f;
    ctx->max_gap[me->w] = INT64_MIN;
    if (!worker_ok(me, rp_ps_join(me->ps, 1), "rp_ps_join")) return;
    for (int64_t i = 0; i < ST_STEPS; i++) {
        if (me->w == ST_SLOW) tu_sleep_s(ST_SLEEP_S);
        atomic_store(&ctx->started[me->w], i + 1);
        if (!worker_ok(me, rp_ps_push(me->ps, g, 0.01f), "rp_ps_push")) break;
        int64_t c = rp_ps_clock(me->ps);
        if (c != i + 1)
            worker_fail(me, "own clock %lld after %lld pushes", (long long)c, (long long)(i + 1));
        if (!worker_ok(me, rp_ps_pull(me->ps, x), "rp_ps_pull")) break;
        if (me->w == ST_SLOW) continue;
        for (int q = 0; q < ST_W; q++) {
            if (q == me->w) continue;
            int64_t gap = c - atomic_load(&ctx->started[q]);
            if (ctx->k >= 0 && gap > ctx->k)
                worker_fail(
                    me,
                    "pull at clock %lld returned while worker %d had begun only %lld pushes "
                    "(gap %lld > k = %d)",
                    (long long)c, q, (long long)(c - gap), (long long)gap, ctx->k);
            if (q == ST_SLOW && gap > ctx->max_gap[me->w]) ctx->max_gap[me->w] = gap;
        }
    }
    worker_ok(me, rp_ps_leave(me->ps), "rp_ps_leave");
}

static void st_run(int k, st_ctx *ctx)
{
    rp_ps_config cfg = ps_config(2, k, CALL_TIMEOUT_S, sgd_plain_config());
    crew c;
    crew_create(&c, ST_W, 64, &cfg);
    memset(ctx, 0, sizeof *ctx);
    ctx->k = k;
    for (int w = 0; w < ST_W; w++)
        atomic_init(&ctx->started[w], 0);
    crew_run(&c, st_worker, ctx);
    int64_t step = -1;
    float x[64];
    expect_ok(rp_ps_snapshot(c.h[0], x, NULL, &step), "rp_ps_snapshot");
    assert_int_equal(step, ST_W * ST_STEPS);
    crew_destroy(&c);
}

static void test_staleness_bound_holds(void **unused)
{
    (void)unused;
    st_ctx ctx;
    for (int k = 0; k <= 2; k += 2) {
        st_run(k, &ctx);
        for (int w = 0; w < ST_W; w++) {
            if (w == ST_SLOW) continue;
            if (ctx.max_gap[w] != k) {
                print_error(
                    "k = %d: fast worker %d got at most %lld steps ahead of the slow one, want "
                    "exactly k\n",
                    k, w, (long long)ctx.max_gap[w]);
                fail();
            }
        }
    }
}

static void test_staleness_unbounded_control(void **unused)
{
    (void)unused;
    st_ctx ctx;
    st_run(-1, &ctx);
    for (int w = 0; w < ST_W; w++) {
        if (w == ST_SLOW) continue;
        if (!(ctx.max_gap[w] > 5)) {
            print_error("unbounded: fast worker %d got only %lld steps ahead of the slow one\n", w,
                        (long long)ctx.max_gap[w]);
            fail();
        }
    }
}

/* ---- the staleness timeout ------------------------------------------------------------ */

typedef struct {
    atomic_int done;
    rp_status status;
    double elapsed_s;
    char error[1024];
} to_ctx;

/* Worker 0 pushes once and pulls; worker 1 joins, never pushes, and leaves after worker 0 is done.
 */
static void to_worker(worker *me, void *arg)
{
    to_ctx *ctx = arg;
    float x[32], g[32];
    for (int i = 0; i < 32; i++)
        g[i] = 1.0f;
    if (!worker_ok(me, rp_ps_join(me->ps, 1), "rp_ps_join")) {
        atomic_store(&ctx->done, 1);
        return;
    }
    if (me->w == 1) {
        double end = rp_now_s() + 10.0;
        while (!atomic_load(&ctx->done) && rp_now_s() < end)
            tu_sleep_s(0.001);
    } else {
        if (worker_ok(me, rp_ps_push(me->ps, g, 0.5f), "rp_ps_push")) {
            double t0 = rp_now_s();
            ctx->status = rp_ps_pull(me->ps, x);
            ctx->elapsed_s = rp_now_s() - t0;
            snprintf(ctx->error, sizeof ctx->error, "%s",
                     ctx->status == RP_OK ? "" : rp_last_error());
        }
        atomic_store(&ctx->done, 1);
    }
    worker_ok(me, rp_ps_leave(me->ps), "rp_ps_leave");
}

static void test_staleness_timeout_names_worker(void **unused)
{
    (void)unused;
    rp_ps_config cfg = ps_config(2, 0, 0.5, sgd_plain_config());
    crew c;
    crew_create(&c, 2, 32, &cfg);
    to_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    atomic_init(&ctx.done, 0);
    ctx.status = 1; /* not called */
    crew_run(&c, to_worker, &ctx);
    if (ctx.status != RP_ERR_TIMEOUT) {
        print_error(
            "pull held back by worker 1 returned %d, want RP_ERR_TIMEOUT (%d); message: %s\n",
            ctx.status, RP_ERR_TIMEOUT, ctx.error);
        fail();
    }
    /* Remote servers answer at 0.8 x the timeout, before the worker's own deadline. */
    double least = remote ? 0.40 : 0.45;
    if (!(ctx.elapsed_s >= least && ctx.elapsed_s <= 2.0)) {
        print_error("the pull timed out after %.3f s, want about 0.5 s (at least %.2f)\n",
                    ctx.elapsed_s, least);
        fail();
    }
    if (!strstr(ctx.error, remote ? "for worker 1 (rank 1 on host" : "worker 1")) {
        print_error("the timeout does not name worker 1: \"%s\"\n", ctx.error);
        fail();
    }
    crew_destroy(&c);
}

/* ---- a shard's lock held past the timeout ---------------------------------------------- */

/*
 * ps.h: every call waits at most the configured timeout, and a server whose
 * shard's lock is held too long is named in the RP_ERR_TIMEOUT. Worker 0
 * keeps one server busy with Adam updates of 4M floats (milliseconds each,
 * far past the 1 ms timeout) while worker 1 pulls: some pull must find the
 * lock held, time out soon after the timeout (not after the update), and
 * name server 0. Worker 0's own pushes may time out too when they meet a
 * pull; it tries again, and worker 1 pauses between pulls so that the two
 * cannot starve each other.
 */
#define LK_N         ((int64_t)1 << 22)
#define LK_TIMEOUT_S 0.001

typedef struct {
    atomic_int done;
    int timeouts;     /* worker 1's pulls that timed out */
    double worst_s;   /* the longest of those */
    char error[1024]; /* the first one's message */
} lk_ctx;

static void lk_worker(worker *me, void *arg)
{
    lk_ctx *ctx = arg;
    float *buf = malloc((size_t)LK_N * sizeof(float));
    if (!buf) {
        worker_fail(me, "out of memory");
        atomic_store(&ctx->done, 1);
        return;
    }
    if (me->w == 0) {
        for (int64_t i = 0; i < LK_N; i++)
            buf[i] = 1e-3f * (float)(i % 7);
        /* Until worker 1 has seen its timeouts (a push that meets a pull may time out: again). */
        double end = rp_now_s() + 20.0;
        while (!atomic_load(&ctx->done) && rp_now_s() < end) {
            rp_status s = rp_ps_push(me->ps, buf, 1e-3f);
            if (s != RP_OK && s != RP_ERR_TIMEOUT) {
                worker_ok(me, s, "rp_ps_push");
                break;
            }
        }
        atomic_store(&ctx->done, 1);
    } else {
        for (int i = 0; i < 2000 && ctx->timeouts < 3 && !atomic_load(&ctx->done); i++) {
            double t0 = rp_now_s();
            rp_status s = rp_ps_pull(me->ps, buf);
            double dt = rp_now_s() - t0;
            if (s == RP_ERR_TIMEOUT) {
                if (ctx->timeouts++ == 0)
                    snprintf(ctx->error, sizeof ctx->error, "%s", rp_last_error());
                if (dt > ctx->worst_s) ctx->worst_s = dt;
            } else if (!worker_ok(me, s, "rp_ps_pull")) {
                break;
            }
            tu_sleep_s(0.0005); /* lets worker 0 take the lock again */
        }
        atomic_store(&ctx->done, 1);
    }
    free(buf);
}

static void test_lock_held_past_timeout_names_server(void **unused)
{
    (void)unused;
    rp_optim_config adam = rp_optim_config_default();
    adam.kind = RP_OPTIM_ADAM;
    rp_ps_config cfg = ps_config(1, -1, LK_TIMEOUT_S, adam);
    crew c;
    crew_create(&c, 2, LK_N, &cfg);
    lk_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    atomic_init(&ctx.done, 0);
    crew_run(&c, lk_worker, &ctx);
    if (getenv("RP_TEST_VERBOSE"))
        print_message("%d pulls timed out, the longest in %.4f s: %s\n", ctx.timeouts, ctx.worst_s,
                      ctx.error);
    if (ctx.timeouts == 0) {
        print_error(
            "no pull timed out while another worker held the shard for whole Adam updates of %lld "
            "floats (timeout %g s)\n",
            (long long)LK_N, LK_TIMEOUT_S);
        fail();
    }
    if (!strstr(ctx.error, "server 0")) {
        print_error("the timeout does not name server 0: \"%s\"\n", ctx.error);
        fail();
    }
    /* Bounded by the timeout, not by the update that holds the lock (plus scheduling slack). */
    if (!(ctx.worst_s < 0.25)) {
        print_error("a timed-out pull took %.3f s with a timeout of %g s\n", ctx.worst_s,
                    LK_TIMEOUT_S);
        fail();
    }
    crew_destroy(&c);
}

/* ---- phases --------------------------------------------------------------------------- */

/*
 * Two handles used in turn by the main thread (never concurrently), k = 0 and
 * a short timeout. Phase 1: worker 0 runs 3 steps ahead, so its pull is held
 * back until worker 1 leaves. Phase 2: the clocks restart at 0, so the same
 * pull goes straight through, and the bound holds again from there. Phase
 * 3: a worker not yet in it counts as clock 0.
 */
static void test_phases_restart_clocks(void **unused)
{
    (void)unused;
    rp_ps_config cfg = ps_config(2, 0, 0.3, sgd_plain_config());
    rp_ps *h[2] = {NULL, NULL};
    ps_make(h, 2, 40, &cfg);
    float x[40], g[40];
    for (int i = 0; i < 40; i++)
        g[i] = 1.0f;

    expect_ok(rp_ps_join(h[0], 1), "rp_ps_join(w0, 1)");
    expect_ok(rp_ps_join(h[1], 1), "rp_ps_join(w1, 1)");
    for (int i = 0; i < 3; i++)
        expect_ok(rp_ps_push(h[0], g, 0.5f), "rp_ps_push(w0)");
    assert_int_equal(rp_ps_clock(h[0]), 3);
    assert_int_equal(rp_ps_clock(h[1]), 0);
    double t0 = rp_now_s();
    assert_int_equal(rp_ps_pull(h[0], x), RP_ERR_TIMEOUT); /* 3 ahead of worker 1 with k = 0 */
    /* Remote servers answer at 0.8 x the timeout (0.24 s), before the worker's own deadline. */
    assert_true(rp_now_s() - t0 >= (remote ? 0.24 : 0.25));
    tu_assert_error_contains("worker 1");
    /* A worker that left holds no one back. */
    expect_ok(rp_ps_leave(h[1]), "rp_ps_leave(w1)");
    t0 = rp_now_s();
    expect_ok(rp_ps_pull(h[0], x), "rp_ps_pull(w0) after worker 1 left");
    assert_true(rp_now_s() - t0 < 0.2);
    expect_ok(rp_ps_leave(h[0]), "rp_ps_leave(w0)");

    expect_ok(rp_ps_join(h[0], 2), "rp_ps_join(w0, 2)");
    expect_ok(rp_ps_join(h[1], 2), "rp_ps_join(w1, 2)");
    assert_int_equal(rp_ps_clock(h[0]), 0);
    assert_int_equal(rp_ps_clock(h[1]), 0);
    /* With phase 1's clocks (3 against 0) this would be held back. */
    t0 = rp_now_s();
    expect_ok(rp_ps_pull(h[0], x), "rp_ps_pull(w0) at the start of phase 2");
    assert_true(rp_now_s() - t0 < 0.2);
    /* The bound applies in phase 2: one step ahead is held back, then released by worker 1's step.
     */
    expect_ok(rp_ps_push(h[0], g, 0.5f), "rp_ps_push(w0)");
    assert_int_equal(rp_ps_clock(h[0]), 1);
    assert_int_equal(rp_ps_pull(h[0], x), RP_ERR_TIMEOUT);
    tu_assert_error_contains("worker 1");
    expect_ok(rp_ps_push(h[1], g, 0.5f), "rp_ps_push(w1)");
    expect_ok(rp_ps_pull(h[0], x), "rp_ps_pull(w0) level with worker 1");
    expect_ok(rp_ps_pull(h[1], x), "rp_ps_pull(w1) level with worker 0");
    /* All 5 pushes were applied: 40 floats of 0 - 5 * 0.5. */
    for (int i = 0; i < 40; i++)
        assert_true(x[i] == -2.5f);
    expect_ok(rp_ps_leave(h[0]), "rp_ps_leave(w0)");
    expect_ok(rp_ps_leave(h[1]), "rp_ps_leave(w1)");

    /*
     * Phase 3: a worker that has not joined the new phase yet is about to
     * start it at clock 0, so it holds the others back (having left phase 2
     * does not count), until it joins and steps.
     */
    expect_ok(rp_ps_join(h[0], 3), "rp_ps_join(w0, 3)");
    expect_ok(rp_ps_push(h[0], g, 0.5f), "rp_ps_push(w0)");
    assert_int_equal(rp_ps_pull(h[0], x), RP_ERR_TIMEOUT);
    tu_assert_error_contains("worker 1");
    if (getenv("RP_TEST_VERBOSE"))
        print_message("phase 3, worker 1 not joined: %s\n", rp_last_error());
    expect_ok(rp_ps_join(h[1], 3), "rp_ps_join(w1, 3)");
    assert_int_equal(rp_ps_clock(h[1]), 0);
    expect_ok(rp_ps_push(h[1], g, 0.5f), "rp_ps_push(w1)");
    expect_ok(rp_ps_pull(h[0], x), "rp_ps_pull(w0) level with worker 1 in phase 3");
    expect_ok(rp_ps_leave(h[0]), "rp_ps_leave(w0)");
    expect_ok(rp_ps_leave(h[1]), "rp_ps_leave(w1)");
    ps_free(h, 2);
}

/* ---- the shared work queue ------------------------------------------------------------- */

#define CL_W 4
#define CL_N 200000

typedef struct {
    int64_t got[CL_W][CL_N + 8]; /* worker w's tickets, in the order it got them */
    int count[CL_W];
} cl_ctx;

static void cl_worker(worker *me, void *arg)
{
    cl_ctx *ctx = arg;
    if (!worker_ok(me, rp_ps_join(me->ps, 1), "rp_ps_join")) return;
    for (;;) {
        int64_t t = -1;
        if (!worker_ok(me, rp_ps_claim(me->ps, &t), "rp_ps_claim")) break;
        if (ctx->count[me->w] >= CL_N + 8) {
            worker_fail(me, "more than %d tickets", CL_N + 8);
            break;
        }
        ctx->got[me->w][ctx->count[me->w]++] = t;
        if (t >= CL_N) break;
    }
    worker_ok(me, rp_ps_leave(me->ps), "rp_ps_leave");
}

static void test_claims_hand_out_each_ticket_once(void **unused)
{
    (void)unused;
    rp_ps_config cfg = ps_config(2, -1, CALL_TIMEOUT_S, sgd_plain_config());
    crew c;
    crew_create(&c, CL_W, 16, &cfg);
    cl_ctx *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    crew_run(&c, cl_worker, ctx);

    /*
     * The tickets are 0, 1, 2, ... each to one caller, and each worker stops
     * at its first ticket >= N: so exactly N + W were handed out, each worker
     * got one of N .. N+W-1, and the rest are 0 .. N-1 once each.
     */
    int *seen = calloc(CL_N + CL_W, sizeof *seen);
    assert_non_null(seen);
    for (int w = 0; w < CL_W; w++) {
        for (int j = 0; j < ctx->count[w]; j++) {
            int64_t t = ctx->got[w][j];
            if (t < 0 || t >= CL_N + CL_W) {
                print_error("worker %d got ticket %lld, outside 0 .. %d\n", w, (long long)t,
                            CL_N + CL_W - 1);
                fail();
            }
            if (j > 0 && t <= ctx->got[w][j - 1]) {
                print_error("worker %d got ticket %lld after %lld\n", w, (long long)t,
                            (long long)ctx->got[w][j - 1]);
                fail();
            }
            seen[t]++;
        }
    }
    for (int t = 0; t < CL_N + CL_W; t++) {
        if (seen[t] != 1) {
            print_error("ticket %d was handed out %d times\n", t, seen[t]);
            fail();
        }
    }

    free(seen);

    /* Phase 2: the queue starts again at 0, in the order the calls arrive. */
    for (int w = 0; w < CL_W; w++)
        expect_ok(rp_ps_join(c.h[w], 2), "rp_ps_join(2)");
    static const int order[CL_W] = {2, 0, 3, 1};
    for (int j = 0; j < CL_W; j++) {
        int64_t t = -1;
        expect_ok(rp_ps_claim(c.h[order[j]], &t), "rp_ps_claim in phase 2");
        assert_int_equal(t, j);
    }
    for (int w = 0; w < CL_W; w++)
        expect_ok(rp_ps_leave(c.h[w]), "rp_ps_leave");
    crew_destroy(&c);
    free(ctx);
}

/* ---- bad input ------------------------------------------------------------------------- */

/*
 * The stats have a count for every worker a set can have: RP_PS_MAX_WORKERS handles all count
 * (the last one too), and one more worker is refused at creation, naming the count and the bound.
 */
static void test_worker_bound(void **unused)
{
    (void)unused;
    enum { W = RP_PS_MAX_WORKERS };
    rp_ps_config cfg = ps_config(2, -1, CALL_TIMEOUT_S, sgd_plain_config());
    rp_ps *h[W + 1];
    char want[64];
    assert_int_equal(rp_ps_threads_create(h, W + 1, 10, &cfg), RP_ERR_INVALID);
    snprintf(want, sizeof want, "%d workers: must be in [1, %d]", W + 1, W);
    tu_assert_error_contains(want);

    expect_ok(rp_ps_threads_create(h, W, 10, &cfg), "rp_ps_threads_create");
    float g[10];
    tu_fill(g, 10, 43, -1.0f, 1.0f);
    for (int w = 0; w < W; w++)
        expect_ok(rp_ps_push(h[w], g, 0.1f), "rp_ps_push");
    expect_ok(rp_ps_push(h[W - 1], g, 0.1f), "rp_ps_push");
    for (int s = 0; s < 2; s++) {
        rp_ps_server_stats st;
        memset(&st, 0xff, sizeof st);
        expect_ok(rp_ps_stats(h[0], s, &st), "rp_ps_stats");
        assert_int_equal(st.workers, W);
        assert_int_equal(st.applied, W + 1);
        assert_int_equal(st.received, W + 1);
        for (int w = 0; w < W - 1; w++)
            assert_int_equal(st.from_worker[w], 1);
        assert_int_equal(st.from_worker[W - 1], 2);
    }
    for (int w = 0; w < W; w++)
        rp_ps_destroy(h[w]);
}

static void test_bad_input(void **unused)
{
    (void)unused;
    rp_ps_config cfg = ps_config(2, -1, CALL_TIMEOUT_S, sgd_plain_config());
    rp_ps *h[2] = {NULL, NULL};

    /* Creation. */
    assert_int_equal(rp_ps_threads_create(h, 0, 100, &cfg), RP_ERR_INVALID);
    assert_int_equal(rp_ps_threads_create(h, 1, -1, &cfg), RP_ERR_INVALID);
    cfg.servers = 0;
    assert_int_equal(rp_ps_threads_create(h, 1, 100, &cfg), RP_ERR_INVALID);
    cfg.servers = 2;
    cfg.optim.momentum = -1.0f;
    assert_int_equal(rp_ps_threads_create(h, 1, 100, &cfg), RP_ERR_INVALID);
    cfg.optim = rp_optim_config_default();
    cfg.optim.kind = RP_OPTIM_ADAM;
    cfg.optim.beta1 = 1.0f;
    assert_int_equal(rp_ps_threads_create(h, 1, 100, &cfg), RP_ERR_INVALID);
    cfg.optim = sgd_plain_config();

    const int64_t n = 100;
    expect_ok(rp_ps_threads_create(h, 2, n, &cfg), "rp_ps_threads_create");
    float x0[100], g[100], got[100];
    tu_fill(x0, n, 41, -1.0f, 1.0f);
    tu_fill(g, n, 42, -1.0f, 1.0f);
    expect_ok(rp_ps_init(h[0], x0, NULL, 0), "rp_ps_init");
    expect_ok(rp_ps_push(h[0], g, 0.5f), "rp_ps_push");
    float before[100];
    int64_t step_before = -1;
    expect_ok(rp_ps_snapshot(h[0], before, NULL, &step_before), "rp_ps_snapshot");
    assert_int_equal(step_before, 1);

    /* Learning rates. */
    assert_int_equal(rp_ps_push(h[0], g, -1.0f), RP_ERR_INVALID);
    assert_int_equal(rp_ps_push(h[0], g, NAN), RP_ERR_INVALID);
    assert_int_equal(rp_ps_push(h[0], g, INFINITY), RP_ERR_INVALID);
    assert_int_equal(rp_ps_push_pull(h[0], g, -1.0f, got), RP_ERR_INVALID);

    /* A non-finite gradient: the first is named, nothing is applied. */
    float bad[100];
    memcpy(bad, g, sizeof bad);
    bad[73] = NAN;
    bad[91] = INFINITY;
    assert_int_equal(rp_ps_push(h[0], bad, 0.5f), RP_ERR_NUMERIC);
    tu_assert_error_contains("73");
    assert_int_equal(rp_ps_push_pull(h[1], bad, 0.5f, got), RP_ERR_NUMERIC);
    bad[73] = g[73];
    assert_int_equal(rp_ps_push(h[1], bad, 0.5f), RP_ERR_NUMERIC);
    tu_assert_error_contains("91");

    assert_int_equal(rp_ps_clock(h[0]), 1);
    assert_int_equal(rp_ps_clock(h[1]), 0);
    int64_t step = -1;
    expect_ok(rp_ps_snapshot(h[0], got, NULL, &step), "rp_ps_snapshot");
    assert_int_equal(step, 1);
    expect_bitwise("values after rejected pushes", got, before, n);
    for (int s = 0; s < 2; s++) {
        rp_ps_server_stats st;
        expect_ok(rp_ps_stats(h[0], s, &st), "rp_ps_stats");
        assert_int_equal(st.applied, 1);
        assert_int_equal(st.received, 1);
        assert_int_equal(st.from_worker[1], 0);
    }

    /* Stats of a server that does not exist. */
    rp_ps_server_stats st;
    assert_int_equal(rp_ps_stats(h[0], -1, &st), RP_ERR_INVALID);
    assert_int_equal(rp_ps_stats(h[0], 2, &st), RP_ERR_INVALID);
    /* NULL arguments are errors, not crashes. */
    assert_int_equal(rp_ps_push(h[0], NULL, 0.5f), RP_ERR_INVALID);
    assert_int_equal(rp_ps_pull(h[0], NULL), RP_ERR_INVALID);
    assert_int_equal(rp_ps_claim(h[0], NULL), RP_ERR_INVALID);
    assert_int_equal(rp_ps_stats(h[0], 0, NULL), RP_ERR_INVALID);

    rp_ps_destroy(h[0]);
    rp_ps_destroy(h[1]);
}

/* ---- remote servers only ------------------------------------------------------------------- */

static int remote_on(void **state)
{
    (void)state;
    remote = true;
    return 0;
}

static int remote_off(void **state)
{
    (void)state;
    remote = false;
    the_world = NULL; /* a failed test's world is left behind, not reused */
    return 0;
}

/*
 * A server that does not answer (its thread has not started serving): the
 * worker's call fails after the timeout, naming that server with its rank
 * and host and no other, and breaks the group, so the next call fails at
 * once with the same reason. The break reaches the whole communicator, so
 * the servers' loops end with RP_ERR_COMM.
 */
static void test_remote_silent_server_named(void **unused)
{
    (void)unused;
    world *w = world_start(1, 2, CALL_TIMEOUT_S, 1); /* server 1 waits */
    rp_ps_config cfg = ps_config(2, -1, 0.3, sgd_plain_config());
    rp_ps *ps = NULL;
    double t0 = rp_now_s();
    rp_status st = rp_ps_mpi_create(&ps, w->groups[0], 64, &cfg);
    double took = rp_now_s() - t0;
    if (getenv("RP_TEST_VERBOSE"))
        print_message("silent server: %.3f s: %s\n", took, rp_last_error());
    assert_int_equal(st, RP_ERR_TIMEOUT);
    assert_null(ps);
    tu_assert_error_contains("parameter server 1 (rank 2 on host");
    tu_assert_error_contains("did not answer a create of set 0 by worker 0 within 0.3 s");
    assert_null(strstr(rp_last_error(), "parameter server 0"));
    assert_true(took >= 0.3 && took < 2.0);
    t0 = rp_now_s();
    assert_int_equal(rp_ps_mpi_create(&ps, w->groups[0], 64, &cfg), RP_ERR_TIMEOUT);
    assert_true(rp_now_s() - t0 < 0.1);
    tu_assert_error_contains("broken by an earlier error: parameter server 1 (rank 2 on host");
    world_end(w, RP_ERR_COMM);
}

/* A worker's failure report ends every server's loop with RP_ERR_COMM naming it and its reason. */
static void test_remote_failure_report(void **unused)
{
    (void)unused;
    world *w = world_start(2, 2, CALL_TIMEOUT_S, 0);
    rp_ps_group_fail(w->groups[0], RP_ERR_NOMEM, "out of memory here");
    world_end(w, RP_ERR_COMM);
    if (!strstr(last_serve_error, "worker 0 (rank 0 on host") ||
        !strstr(last_serve_error, "out of memory here") || !strstr(last_serve_error, "NOMEM")) {
        print_error("serve's error does not name worker 0, its status and its reason: %s\n",
                    last_serve_error);
        fail();
    }
}

/*
 * Bad input on remote servers: a configuration for another number of
 * servers; a set that the workers create differently (a mismatch, from the
 * server); a non-finite gradient or learning rate (nothing sent: the
 * servers count no push); stats of a server that does not exist; an empty
 * set, which still counts pushes on every server.
 */
static void test_remote_bad_input(void **unused)
{
    (void)unused;
    world *w = world_start(2, 2, CALL_TIMEOUT_S, 0);
    rp_ps_config cfg = ps_config(3, -1, CALL_TIMEOUT_S, sgd_plain_config());
    rp_ps *h[2] = {NULL, NULL}, *e = NULL, *bad = NULL;
    assert_int_equal(rp_ps_mpi_create(&h[0], w->groups[0], 100, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("3 parameter servers");
    cfg.servers = 2;
    assert_int_equal(rp_ps_mpi_create(&h[0], w->groups[0], -1, &cfg), RP_ERR_INVALID);
    for (int q = 0; q < 2; q++)
        expect_ok(rp_ps_mpi_create(&h[q], w->groups[q], 100, &cfg), "rp_ps_mpi_create");
    expect_ok(rp_ps_mpi_create(&e, w->groups[0], 0, &cfg), "rp_ps_mpi_create(numel 0)");
    /* Worker 1's second set is worker 0's empty one (set 1), with another size. */
    assert_int_equal(rp_ps_mpi_create(&bad, w->groups[1], 50, &cfg), RP_ERR_MISMATCH);
    tu_assert_error_contains("set 1: worker 1 creates it with 50 floats");
    assert_null(bad);

    float g[100], got[100];
    tu_fill(g, 100, 42, -1.0f, 1.0f);
    g[37] = NAN;
    assert_int_equal(rp_ps_push(h[0], g, 0.5f), RP_ERR_NUMERIC);
    tu_assert_error_contains("37");
    g[37] = 1.0f;
    assert_int_equal(rp_ps_push_pull(h[0], g, -1.0f, got), RP_ERR_INVALID);
    rp_ps_server_stats st;
    for (int s = 0; s < 2; s++) {
        expect_ok(rp_ps_stats(h[1], s, &st), "rp_ps_stats");
        assert_int_equal(st.applied, 0);
    }
    assert_int_equal(rp_ps_stats(h[0], 2, &st), RP_ERR_INVALID);
    assert_int_equal(rp_ps_claim(h[0], NULL), RP_ERR_INVALID);
    /* The handles still work after all that. */
    expect_ok(rp_ps_push_pull(h[0], g, 0.5f, got), "rp_ps_push_pull");
    for (int i = 0; i < 100; i++)
        assert_true(got[i] == -0.5f * g[i]);
    expect_ok(rp_ps_pull(h[1], got), "rp_ps_pull");
    for (int i = 0; i < 100; i++)
        assert_true(got[i] == -0.5f * g[i]);

    expect_ok(rp_ps_push(e, g, 0.5f), "rp_ps_push(numel 0)");
    int64_t step = -1;
    expect_ok(rp_ps_snapshot(e, NULL, NULL, &step), "rp_ps_snapshot(numel 0)");
    assert_int_equal(step, 1);
    for (int s = 0; s < 2; s++) {
        expect_ok(rp_ps_stats(e, s, &st), "rp_ps_stats(numel 0)");
        assert_int_equal(st.applied, 1);
        assert_int_equal(st.from_worker[0], 1);
    }
    rp_ps_destroy(e);
    rp_ps_destroy(h[0]);
    rp_ps_destroy(h[1]);
    world_end(w, RP_OK);
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN); /* the remote servers' exit lines */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_ranges),
        cmocka_unit_test(test_config_default_and_accessors),
        cmocka_unit_test(test_worker_bound),
        cmocka_unit_test(test_no_lost_or_duplicated_updates),
        cmocka_unit_test(test_rules_match_local_apply),
        cmocka_unit_test(test_init_snapshot_round_trip),
        cmocka_unit_test(test_least_squares_converges),
        cmocka_unit_test(test_staleness_bound_holds),
        cmocka_unit_test(test_staleness_unbounded_control),
        cmocka_unit_test(test_staleness_timeout_names_worker),
        cmocka_unit_test(test_lock_held_past_timeout_names_server),
        cmocka_unit_test(test_phases_restart_clocks),
        cmocka_unit_test(test_claims_hand_out_each_ticket_once),
        cmocka_unit_test(test_bad_input),
    /* The remote servers (the MPI backend's code) on the threads communicator; each case is
     * named for its function with "_remote" added, so that every case has its own name. */
#define REMOTE(test) {#test "_remote", test, remote_on, remote_off, NULL}
        REMOTE(test_no_lost_or_duplicated_updates),
        REMOTE(test_rules_match_local_apply),
        REMOTE(test_init_snapshot_round_trip),
        REMOTE(test_least_squares_converges),
        REMOTE(test_staleness_bound_holds),
        REMOTE(test_staleness_unbounded_control),
        REMOTE(test_staleness_timeout_names_worker),
        REMOTE(test_phases_restart_clocks),
        REMOTE(test_claims_hand_out_each_ticket_once),
        REMOTE(test_remote_silent_server_named),
        REMOTE(test_remote_failure_report),
        REMOTE(test_remote_bad_input),
#undef REMOTE
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
