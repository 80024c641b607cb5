/*
 * test_async.c - asynchronous training through the runtime (replicator/
 * runtime.h, cfg.regime = RP_REGIME_ASYNC): the optimizer made by
 * rp_replica_optimizer_create() pushes and pulls through in-process
 * parameter servers; a least-squares problem with a known optimum converges
 * with 1, 2 and 4 replicas; replica 0's values start every replica; the
 * batch queue (rp_replica_claim) hands every number out once per run;
 * fetch and publish move the servers' state in and out; a NaN gradient is
 * refused before it reaches a server. The servers themselves are tested in
 * test_ps.c, over MPI in tests/mpi/test_ps_mpi.c.
 *
 * Assertions are made on the test's thread: the replicas record what they
 * saw in their state, read between runs.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM  8
#define ROWS 64
#define MAXR 4

/* The problem: minimise 0.5/B * sum over a batch of rows (a_i . x - b_i)^2, b = A x*. */
typedef struct problem {
    float a[ROWS][DIM];
    float b[ROWS];
    float xstar[DIM];
} problem;

typedef struct job {
    problem *p;
    int64_t batches; /* batches per run (claimed from the queue) */
    int batch;       /* rows per batch */
    float lr;
    rp_optim_config oc;
    rp_params *params[MAXR];
    rp_optimizer *opt[MAXR];
    int64_t taken[MAXR];     /* batches this replica took in the last run */
    int64_t seen[MAXR][256]; /* tickets it claimed (below `batches`) */
    bool nan_on_replica1;
    int64_t own_steps; /* > 0: each replica takes this many batches itself, no queue */
    rp_status step_status[MAXR];
} job;

static void make_problem(problem *p)
{
    tu_fill(&p->a[0][0], ROWS * DIM, 11, -1.0f, 1.0f);
    tu_fill(p->xstar, DIM, 12, -2.0f, 2.0f);
    for (int i = 0; i < ROWS; i++) {
        double s = 0;
        for (int j = 0; j < DIM; j++)
            s += (double)p->a[i][j] * p->xstar[j];
        p->b[i] = (float)s;
    }
}

/* A job on the problem: batches of `batch` rows, lr, momentum 0.9 (the default rule). */
static void job_setup(job *j, problem *p, int batch, int64_t batches, float lr)
{
    memset(j, 0, sizeof *j);
    make_problem(p);
    j->p = p;
    j->batch = batch;
    j->batches = batches;
    j->lr = lr;
    j->oc = rp_optim_config_default();
}

/* Each replica: its own parameter list, initialised from a seed of its own (replica 0's must win).
 */
static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    RP_CHECK(rp_params_create(&j->params[r]));
    rp_init init = {.kind = RP_INIT_UNIFORM, .value = 1.0f};
    if (!rp_params_add(j->params[r], "x", 1, (int[]){DIM}, init, true)) return rp_last_status();
    RP_CHECK(rp_params_finalize(j->params[r], 100 + (uint64_t)rp_replica_id(rep)));
    return rp_replica_optimizer_create(rep, &j->opt[r], j->params[r], &j->oc);
}

/*
 * The parameter list's blocks are the kernel table's storage: the tests read and write them
 * through host copies (x is the only parameter, so the value block is its DIM values). These
 * assert, so the main thread only.
 */
static void values_of(const rp_params *p, float x[DIM])
{
    assert_int_equal(rp_params_numel(p), DIM);
    assert_int_equal(rp_params_read_values(p, x), RP_OK);
}

static void state_of(const rp_optimizer *opt, float s[DIM])
{
    int64_t n = 0;
    rp_optimizer_state(opt, &n);
    assert_int_equal(n, DIM);
    assert_int_equal(rp_optimizer_read_state(opt, s), RP_OK);
}

/* Takes batches from the queue until the run's are gone: gradient of the batch's rows, one step. */
static rp_status train(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    float x[DIM], g[DIM];
    j->taken[r] = 0;
    for (;;) {
        int64_t t = j->taken[r];
        if (j->own_steps > 0 && t >= j->own_steps) return RP_OK;
        if (j->own_steps == 0) RP_CHECK(rp_replica_claim(rep, &t));
        if (t >= j->batches) return RP_OK;
        if (j->taken[r] < 256) j->seen[r][j->taken[r]] = t;
        j->taken[r]++;
        RP_CHECK(rp_params_read_values(j->params[r], x));
        for (int k = 0; k < DIM; k++)
            g[k] = 0;
        for (int q = 0; q < j->batch; q++) {
            int i = (int)((t * j->batch + q) % ROWS);
            double e = -(double)j->p->b[i];
            for (int k = 0; k < DIM; k++)
                e += (double)j->p->a[i][k] * x[k];
            for (int k = 0; k < DIM; k++)
                g[k] += (float)(e * j->p->a[i][k] / j->batch);
        }
        if (j->nan_on_replica1 && rp_replica_id(rep) == 1) g[3] = NAN;
        RP_CHECK(rp_params_write_grads(j->params[r], g));
        j->step_status[r] = rp_optimizer_step(j->opt[r], j->lr);
        RP_CHECK(j->step_status[r]);
    }
}

static rp_status fetch(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    return rp_replica_optimizer_fetch(rep, j->opt[r]);
}

static rp_status publish(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    return rp_replica_optimizer_publish(rep, j->opt[r]);
}

static rp_status destroy(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    rp_optimizer_destroy(j->opt[r]);
    rp_params_destroy(j->params[r]);
    j->opt[r] = NULL;
    j->params[r] = NULL;
    return RP_OK;
}

/* Async on threads: `replicas` replicas of one kernel thread, `servers` shards, a 30 s timeout. */
static rp_config async_config(int replicas, int servers)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.regime = RP_REGIME_ASYNC;
    cfg.replicas = replicas;
    cfg.ps = servers;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    return cfg;
}

static rp_replicator *start_bounded(int replicas, int servers, int staleness, job *j)
{
    rp_config cfg = async_config(replicas, servers);
    cfg.staleness = staleness;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, build, j), RP_OK);
    return r;
}

static rp_replicator *start(int replicas, int servers, job *j)
{
    return start_bounded(replicas, servers, -1, j);
}

static double distance(const float *x, const float *y)
{
    double d = 0;
    for (int k = 0; k < DIM; k++)
        d += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
    return sqrt(d);
}

/* Every replica starts from replica 0's values, whatever its own initialisation. */
static void test_replica0_values_start_everyone(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 1, 0, 0);
    rp_params *ref;
    assert_int_equal(rp_params_create(&ref), RP_OK);
    rp_init init = {.kind = RP_INIT_UNIFORM, .value = 1.0f};
    assert_non_null(rp_params_add(ref, "x", 1, (int[]){DIM}, init, true));
    assert_int_equal(rp_params_finalize(ref, 100), RP_OK); /* replica 0's seed */
    rp_replicator *r = start(3, 2, &j);
    float want[DIM], got[DIM];
    values_of(ref, want);
    for (int q = 0; q < 3; q++) {
        values_of(j.params[q], got);
        assert_memory_equal(got, want, DIM * sizeof(float));
    }
    assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
    rp_replicator_destroy(r);
    rp_params_destroy(ref);
}

/*
 * Least squares with a known optimum: 1, 2 and 4 replicas, SGD and momentum, the same
 * number of batches; the servers' values end within 1e-3 of x*. (The error falls
 * geometrically: 600 steps at this lr take it far below; a replica that lost its
 * updates or pushed to the wrong shard would not get there.) The staleness bound is 2:
 * unbounded, a replica the scheduler held off its core for long (4 threads on 2 cores)
 * can push a gradient of a far older x near the end and leave x 1e-2 away, once in a
 * dozen runs; the bound is what makes convergence a guarantee rather than a likelihood.
 */
static void test_least_squares_converges(void **state)
{
    (void)state;
    static problem p;
    for (int momentum = 0; momentum < 2; momentum++)
        for (int replicas = 1; replicas <= 4; replicas *= 2) {
            static job j;
            job_setup(&j, &p, 8, 600, momentum ? 0.05f : 0.1f);
            j.oc.momentum = momentum ? 0.5f : 0.0f;
            rp_replicator *r = start_bounded(replicas, 2, 2, &j);
            float start_x[DIM], x[DIM];
            values_of(j.params[0], start_x);
            assert_int_equal(rp_replicator_run(r, train, &j), RP_OK);
            int64_t total = 0;
            for (int q = 0; q < replicas; q++)
                total += j.taken[q];
            assert_int_equal(total, j.batches);
            assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
            values_of(j.params[0], x);
            double d0 = distance(start_x, p.xstar), d = distance(x, p.xstar);
            if (!(d < 1e-3)) {
                print_error("momentum %d, %d replicas: |x - x*| = %g (started at %g)\n", momentum,
                            replicas, d, d0);
                fail();
            }
            assert_int_equal(rp_optimizer_steps(j.opt[0]),
                             j.batches); /* the servers applied every push */
            assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
            rp_replicator_destroy(r);
        }
}

/* The queue: each number below the run's count goes to exactly one replica; each run restarts at 0.
 */
static void test_claims_once_each_per_run(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 1, 200, 0.01f);
    rp_replicator *r = start(4, 1, &j);
    for (int run = 0; run < 2; run++) {
        assert_int_equal(rp_replicator_run(r, train, &j), RP_OK);
        int count[200] = {0};
        for (int q = 0; q < 4; q++)
            for (int64_t k = 0; k < j.taken[q]; k++)
                count[j.seen[q][k]]++;
        for (int t = 0; t < 200; t++)
            assert_int_equal(count[t], 1);
    }
    assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
    rp_replicator_destroy(r);
}

/*
 * Fetch and publish: replica 1 fetches the servers' values, slots and step count; replica 0's
 * changed state, published, is what every replica then holds and fetches.
 */
static rp_status change_replica0(rp_replica *rep, void *arg)
{
    job *j = arg;
    if (rp_replica_id(rep) != 0) return RP_OK;
    float x[DIM], slots[DIM];
    int64_t n;
    rp_optimizer_state(j->opt[0], &n);
    if (n != DIM) return RP_ERROR(RP_ERR_INVALID, "%lld slots, not %d", (long long)n, DIM);
    for (int k = 0; k < DIM; k++)
        x[k] = (float)k;
    for (int64_t k = 0; k < n; k++)
        slots[k] = -(float)k;
    RP_CHECK(rp_params_write_values(j->params[0], x));
    RP_CHECK(rp_optimizer_write_state(j->opt[0], slots));
    rp_optimizer_set_steps(j->opt[0], 77);
    return RP_OK;
}

static void test_fetch_and_publish(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 4, 30, 0.05f); /* momentum 0.9: one slot */
    rp_replicator *r = start(2, 2, &j);
    assert_int_equal(rp_replicator_run(r, train, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
    assert_int_equal(rp_optimizer_steps(j.opt[1]), 30);
    float a[DIM], b[DIM];
    values_of(j.params[0], a);
    values_of(j.params[1], b);
    assert_memory_equal(a, b, DIM * sizeof(float));
    state_of(j.opt[0], a);
    state_of(j.opt[1], b);
    assert_memory_equal(a, b, DIM * sizeof(float));
    float zero[DIM] = {0};
    assert_memory_not_equal(b, zero, sizeof zero); /* momentum is there */

    assert_int_equal(rp_replicator_run(r, change_replica0, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, publish, &j), RP_OK);
    values_of(j.params[1], b);
    for (int k = 0; k < DIM; k++)
        assert_true(b[k] == (float)k);
    assert_int_equal(rp_optimizer_steps(j.opt[1]), 77);
    assert_int_equal(rp_optimizer_write_state(j.opt[1], zero), RP_OK);
    assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
    state_of(j.opt[1], b);
    for (int k = 0; k < DIM; k++)
        assert_true(b[k] == -(float)k);
    assert_int_equal(rp_optimizer_steps(j.opt[1]), 77);
    assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
    rp_replicator_destroy(r);
}

/* A NaN gradient fails that replica's step, naming the parameter; no server saw it. */
static void test_nan_gradient_refused(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 4, 40, 0.05f);
    j.nan_on_replica1 = true;
    j.own_steps = 5; /* replica 1 surely steps (the queue could all go to replica 0) */
    rp_replicator *r = start(2, 1, &j);
    rp_status status = rp_replicator_run(r, train, &j);
    assert_int_equal(status, RP_ERR_NUMERIC);
    tu_assert_error_contains("replica 1");
    tu_assert_error_contains("'x'");
    assert_int_equal(j.step_status[1], RP_ERR_NUMERIC);
    assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
    float x[DIM];
    values_of(j.params[0], x);
    for (int k = 0; k < DIM; k++)
        assert_true(isfinite(x[k]));
    assert_int_equal(rp_optimizer_steps(j.opt[0]), j.taken[0]); /* replica 0's pushes only */
    assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
    rp_replicator_destroy(r);
}

/* Optimizers made and destroyed run after run: a slot freed is a slot reused (more than 8 in all).
 */
static rp_status build_and_destroy(rp_replica *rep, void *arg)
{
    RP_CHECK(build(rep, arg));
    return destroy(rep, arg);
}

static void test_optimizers_made_again_and_again(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 1, 0, 0);
    rp_config cfg = async_config(2, 1);
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    for (int run = 0; run < 12; run++)
        assert_int_equal(rp_replicator_run(r, build_and_destroy, &j), RP_OK);
    rp_replicator_destroy(r);
}

/*
 * Under a staleness bound of 0, a replica that destroys its optimizer (it is done) holds no
 * one back: replica 1 goes on alone, far ahead of replica 0's last clock, well within the timeout.
 */
static rp_status stop_early(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    if (rp_replica_id(rep) == 0) {
        j->own_steps = 1;
        return destroy(rep, arg);
    }
    j->own_steps = 0;
    float g[DIM];
    for (int d = 0; d < DIM; d++)
        g[d] = 0.01f;
    for (int k = 0; k < 20; k++) {
        RP_CHECK(rp_params_write_grads(j->params[r], g));
        RP_CHECK(rp_optimizer_step(j->opt[r], j->lr));
    }
    return RP_OK;
}

static void test_destroyed_optimizer_holds_no_one_back(void **state)
{
    (void)state;
    static problem p;
    static job j;
    job_setup(&j, &p, 1, 0, 0.01f);
    rp_config cfg = async_config(2, 1);
    cfg.staleness = 0;
    cfg.timeout_s = 5;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, build, &j), RP_OK);
    double t0 = rp_now_s();
    rp_status status = rp_replicator_run(r, stop_early, &j);
    if (status != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(status, RP_OK);
    assert_true(rp_now_s() - t0 < 2.5);
    assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
    rp_replicator_destroy(r);
}

/* Bad configurations are named. */
static void test_bad_config(void **state)
{
    (void)state;
    rp_config cfg = rp_config_default();
    cfg.regime = RP_REGIME_ASYNC;
    cfg.ps = 0;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("ps = 0");
    cfg.ps = 1;
    cfg.staleness = -2;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("staleness = -2");
    int argc = 7;
    char *argv[] = {"x", "--regime", "async", "--ps", "3", "--staleness", "2", NULL};
    cfg = rp_config_default();
    assert_int_equal(rp_config_from_args(&cfg, &argc, argv), RP_OK);
    assert_int_equal(cfg.regime, RP_REGIME_ASYNC);
    assert_int_equal(cfg.ps, 3);
    assert_int_equal(cfg.staleness, 2);
    assert_int_equal(argc, 1);
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica0_values_start_everyone),
        cmocka_unit_test(test_least_squares_converges),
        cmocka_unit_test(test_claims_once_each_per_run),
        cmocka_unit_test(test_fetch_and_publish),
        cmocka_unit_test(test_nan_gradient_refused),
        cmocka_unit_test(test_optimizers_made_again_and_again),
        cmocka_unit_test(test_destroyed_optimizer_holds_no_one_back),
        cmocka_unit_test(test_bad_config),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
