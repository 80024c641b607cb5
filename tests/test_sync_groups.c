/*
 * test_sync_groups.c - sync groups through the runtime (replicator/
 * runtime.h, cfg.sync_groups = G): the replicas of a group hold bitwise
 * identical parameters after every step and take the same batches; the
 * groups, asynchronous with each other through the parameter servers, all
 * approach the optimum of a least-squares problem; the servers apply one
 * push per group step (no update lost, none counted twice); the group's
 * size is num_replicas_in_sync and splits the batch; G = 1 is sync and
 * G = N async; a G that does not divide the replicas is refused by name; a
 * replica that fails, or whose gradient is NaN, fails the run naming it,
 * at once rather than at the timeout.
 *
 * Assertions are made on the test's thread: the replicas record what they
 * saw in their state, read between runs.
 */
#include "testutil.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM  8
#define ROWS 64
#define MAXR 6
#define SEEN 1024

/* The problem: minimise 0.5/B * sum over a batch of rows (a_i . x - b_i)^2, b = A x*. */
typedef struct problem {
    float a[ROWS][DIM];
    float b[ROWS];
    float xstar[DIM];
} problem;

typedef struct job {
    problem *p;
    int64_t batches; /* batches per run (claimed from the queue, a group at a time) */
    int batch;       /* rows per batch, split in the group */
    float lr;
    rp_optim_config oc;
    rp_params *params[MAXR];
    rp_optimizer *opt[MAXR];
    int64_t taken[MAXR];      /* batches this replica trained in the last run */
    int64_t seen[MAXR][SEEN]; /* their tickets, in order */
    int nan_replica;          /* this replica's gradient is NaN at its first step (-1: none) */
    int fail_replica;         /* this replica's step function fails at its third batch (-1) */
    int gate;                 /* > 0: no replica takes a batch before this many have started */
    atomic_int started;       /* replicas in train() so far */
} job;

static void make_problem(problem *p)
{
    tu_fill(&p->a[0][0], ROWS * DIM, 21, -1.0f, 1.0f);
    tu_fill(p->xstar, DIM, 22, -2.0f, 2.0f);
    for (int i = 0; i < ROWS; i++) {
        double s = 0;
        for (int j = 0; j < DIM; j++)
            s += (double)p->a[i][j] * p->xstar[j];
        p->b[i] = (float)s;
    }
}

static void job_setup(job *j, problem *p, int batch, int64_t batches, float lr)
{
    memset(j, 0, sizeof *j);
    make_problem(p);
    j->p = p;
    j->batch = batch;
    j->batches = batches;
    j->lr = lr;
    j->oc = rp_optim_config_default();
    j->nan_replica = j->fail_replica = -1;
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
    RP_CHECK(rp_params_finalize(j->params[r], 300 + (uint64_t)rp_replica_id(rep)));
    return rp_replica_optimizer_create(rep, &j->opt[r], j->params[r], &j->oc);
}

/*
 * The parameter list's values are the kernel table's storage: read through a host copy (x is the
 * only parameter, so the value block is its DIM values). Asserts: the main thread only.
 */
static void values_of(const rp_params *p, float x[DIM])
{
    assert_int_equal(rp_params_numel(p), DIM);
    assert_int_equal(rp_params_read_values(p, x), RP_OK);
}

static void assert_same_values(const rp_params *a, const rp_params *b)
{
    float va[DIM], vb[DIM];
    values_of(a, va);
    values_of(b, vb);
    assert_memory_equal(va, vb, DIM * sizeof(float));
}

static double distance(const float *x, const float *y);

static double distance_of(const rp_params *p, const float *y)
{
    float x[DIM];
    values_of(p, x);
    return distance(x, y);
}

/*
 * Takes batches as the runtime hands them out (a group's rank 0 claims, the group trains it):
 * the gradient of this replica's share of the batch's rows (rp_replica_input_context), one step.
 */
static rp_status train(rp_replica *rep, void *arg)
{
    job *j = arg;
    int r = rp_replica_local_index(rep);
    float x[DIM], g[DIM];
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, j->batch, &in));
    j->taken[r] = 0;
    /* The failure cases need every group at work before any takes a batch (a group whose
       threads start late could otherwise find the batches gone); bounded, in case one never
       starts. */
    atomic_fetch_add(&j->started, 1);
    for (double until = rp_now_s() + 20;
         j->gate && atomic_load(&j->started) < j->gate && rp_now_s() < until;)
        sched_yield();
    for (;;) {
        int64_t t;
        RP_CHECK(rp_replica_next_batch(rep, &t));
        if (t >= j->batches) return RP_OK;
        if (j->taken[r] < SEEN) j->seen[r][j->taken[r]] = t;
        if (rp_replica_id(rep) == j->fail_replica && j->taken[r] == 2)
            return RP_ERROR(RP_ERR_INVALID, "replica %d gave up at batch %lld", rp_replica_id(rep),
                            (long long)t);
        j->taken[r]++;
        RP_CHECK(rp_params_read_values(j->params[r], x));
        for (int k = 0; k < DIM; k++)
            g[k] = 0;
        for (int q = 0; q < in.per_replica_batch; q++) {
            int i = (int)((t * j->batch + in.replica * in.per_replica_batch + q) % ROWS);
            double e = -(double)j->p->b[i];
            for (int k = 0; k < DIM; k++)
                e += (double)j->p->a[i][k] * x[k];
            for (int k = 0; k < DIM; k++)
                g[k] += (float)(e * j->p->a[i][k] / in.per_replica_batch);
        }
        if (rp_replica_id(rep) == j->nan_replica) g[5] = NAN;
        RP_CHECK(rp_params_write_grads(j->params[r], g));
        RP_CHECK(rp_optimizer_step(j->opt[r], j->lr));
    }
}

static rp_status fetch(rp_replica *rep, void *arg)
{
    job *j = arg;
    return rp_replica_optimizer_fetch(rep, j->opt[rp_replica_local_index(rep)]);
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

/* `replicas` threads of one kernel thread in `groups` sync groups, 2 servers, a 30 s timeout. */
static rp_config groups_config(int replicas, int groups)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = replicas;
    cfg.sync_groups = groups;
    cfg.ps = 2;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1; /* the group's replicas compared after every step, too */
    return cfg;
}

static rp_replicator *start(const rp_config *cfg, job *j)
{
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, cfg), RP_OK);
    rp_status status = rp_replicator_run(r, build, j);
    if (status != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(status, RP_OK);
    return r;
}

/*
 * After a failed run the replicas' communicator is broken, so no run can destroy their
 * optimizers: the replicator goes first (it detaches them), then they are freed here.
 */
static void destroy_after_failure(rp_replicator *r, job *j)
{
    rp_replicator_destroy(r);
    for (int q = 0; q < MAXR; q++) {
        rp_optimizer_destroy(j->opt[q]);
        rp_params_destroy(j->params[q]);
        j->opt[q] = NULL;
        j->params[q] = NULL;
    }
}

static double distance(const float *x, const float *y)
{
    double d = 0;
    for (int k = 0; k < DIM; k++)
        d += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
    return sqrt(d);
}

/* What each replica sees of its group: num_replicas_in_sync, its communicator, its batch share. */
typedef struct seen_ctx {
    int in_sync[MAXR], sync_rank[MAXR], sync_size[MAXR], count[MAXR];
    bool lockstep[MAXR];
    rp_input_context in[MAXR];
    rp_status in_status[MAXR];
} seen_ctx;

static rp_status look(rp_replica *rep, void *arg)
{
    seen_ctx *s = arg;
    int q = rp_replica_id(rep);
    rp_comm *c = rp_replica_sync_comm(rep);
    s->in_sync[q] = rp_replica_in_sync(rep);
    s->sync_rank[q] = c ? rp_comm_rank(c) : -1;
    s->sync_size[q] = c ? rp_comm_size(c) : 0;
    s->count[q] = rp_replica_count(rep);
    s->lockstep[q] = rp_replica_lockstep(rep);
    s->in_status[q] = rp_replica_input_context(rep, 12, &s->in[q]);
    return RP_OK;
}

static void test_group_context(void **state)
{
    (void)state;
    rp_config cfg = groups_config(6, 3);
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    static seen_ctx s;
    memset(&s, 0, sizeof s);
    assert_int_equal(rp_replicator_run(r, look, &s), RP_OK);
    assert_int_equal(rp_replicator_in_sync(r), 2);
    assert_false(rp_replicator_lockstep(r));
    for (int q = 0; q < 6; q++) {
        assert_int_equal(s.count[q], 6); /* num_replicas: all of them */
        assert_int_equal(s.in_sync[q], 2);
        assert_int_equal(s.sync_rank[q], q % 2); /* groups are consecutive replicas */
        assert_int_equal(s.sync_size[q], 2);
        assert_false(s.lockstep[q]);
        assert_int_equal(s.in_status[q], RP_OK);
        assert_int_equal(s.in[q].replica, q % 2);
        assert_int_equal(s.in[q].replicas, 2);
        assert_int_equal(s.in[q].per_replica_batch, 6);
    }
    rp_replicator_destroy(r);

    /* G = 1 is sync training, G = N async: their tables, their contexts. */
    cfg = groups_config(4, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, look, &s), RP_OK);
    assert_true(rp_replicator_lockstep(r));
    assert_int_equal(s.in_sync[3], 4);
    assert_int_equal(s.sync_size[3], 4);
    assert_int_equal(s.in[3].per_replica_batch, 3);
    rp_replicator_destroy(r);
    cfg = groups_config(4, 4);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, look, &s), RP_OK);
    assert_false(rp_replicator_lockstep(r));
    assert_int_equal(rp_replicator_in_sync(r), 1);
    assert_int_equal(s.in_sync[3], 1);
    assert_int_equal(s.sync_size[3], 0); /* no communicator: each replica steps alone */
    rp_replicator_destroy(r);
}

/*
 * 4 replicas in 2 groups and 6 in 3: the replicas of a group take the same batches, in the same
 * order, and hold bitwise identical parameters after them (and after every step: checksum_every
 * is 1); every batch goes to exactly one group; the servers' step count is the groups' steps,
 * not the replicas'.
 */
static void test_bitwise_within_group_no_lost_updates(void **state)
{
    (void)state;
    static problem p;
    static const int layouts[2][2] = {{4, 2}, {6, 3}};
    for (int l = 0; l < 2; l++) {
        int n = layouts[l][0], groups = layouts[l][1], size = n / groups;
        static job j;
        job_setup(&j, &p, 12, 120, 0.05f);
        rp_config cfg = groups_config(n, groups);
        rp_replicator *r = start(&cfg, &j);
        int64_t steps = 0;
        for (int run = 0; run < 2; run++) {
            rp_status status = rp_replicator_run(r, train, &j);
            if (status != RP_OK) print_error("%s\n", rp_last_error());
            assert_int_equal(status, RP_OK);
            int count[120] = {0};
            for (int g = 0; g < groups; g++) {
                int lead = g * size;
                for (int q = lead + 1; q < lead + size; q++) {
                    assert_int_equal(j.taken[q], j.taken[lead]);
                    assert_memory_equal(j.seen[q], j.seen[lead],
                                        (size_t)j.taken[lead] * sizeof(int64_t));
                    assert_same_values(j.params[q], j.params[lead]);
                }
                for (int64_t k = 0; k < j.taken[lead]; k++)
                    count[j.seen[lead][k]]++;
                steps += j.taken[lead];
            }
            for (int t = 0; t < 120; t++)
                assert_int_equal(count[t], 1);
        }
        assert_int_equal(steps, 240);
        assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
        for (int q = 0; q < n; q++) {
            assert_int_equal(rp_optimizer_steps(j.opt[q]), steps); /* one push per group step */
            assert_same_values(j.params[q], j.params[0]);
        }
        assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
        rp_replicator_destroy(r);
    }
}

/*
 * Least squares with a known optimum, 4 replicas in 2 groups, SGD and momentum: every group's
 * parameters, as each last pulled them, and the servers' end within 1e-3 of x*. The staleness
 * bound (2 group steps) makes it a guarantee on 2 shared cores rather than a likelihood (see
 * test_async.c).
 */
static void test_groups_converge(void **state)
{
    (void)state;
    static problem p;
    for (int momentum = 0; momentum < 2; momentum++) {
        static job j;
        job_setup(&j, &p, 8, 600, momentum ? 0.05f : 0.1f);
        j.oc.momentum = momentum ? 0.5f : 0.0f;
        rp_config cfg = groups_config(4, 2);
        cfg.staleness = 2;
        rp_replicator *r = start(&cfg, &j);
        double d0 = distance_of(j.params[0], p.xstar);
        assert_true(d0 > 0.5);
        assert_int_equal(rp_replicator_run(r, train, &j), RP_OK);
        assert_true(j.taken[0] > 0 && j.taken[2] > 0); /* both groups trained */
        for (int q = 0; q < 4; q++) {
            double d = distance_of(j.params[q], p.xstar);
            if (!(d < 1e-3)) {
                print_error("momentum %d: replica %d's |x - x*| = %g (started at %g)\n", momentum,
                            q, d, d0);
                fail();
            }
        }
        assert_int_equal(rp_replicator_run(r, fetch, &j), RP_OK);
        assert_true(distance_of(j.params[0], p.xstar) < 1e-3);
        assert_int_equal(rp_optimizer_steps(j.opt[0]), j.batches);
        assert_int_equal(rp_replicator_run(r, destroy, &j), RP_OK);
        rp_replicator_destroy(r);
    }
}

/*
 * A replica that fails (its step function returns an error) fails the run with its own error,
 * named, while its group's peer waits for it in a collective: at once, not at the timeout.
 */
static void test_failing_replica_named(void **state)
{
    (void)state;
    static problem p;
    static job j;
    /* Every replica starts before any takes a batch (gate), so group 1 surely reaches its
       third batch (with 2,000 batches and no gate, group 0 took them all first in about one run
       in 15). Endless: the failing group stops the other at its next batch (it used to train on
       until the batches ran out). */
    const int64_t endless = (int64_t)1 << 40;
    job_setup(&j, &p, 8, endless, 0.05f);
    j.gate = 4;
    j.fail_replica = 3;
    rp_config cfg = groups_config(4, 2);
    rp_replicator *r = start(&cfg, &j);
    double t0 = rp_now_s();
    rp_status status = rp_replicator_run(r, train, &j);
    double took = rp_now_s() - t0;
    assert_int_equal(status, RP_ERR_INVALID);
    tu_assert_error_contains("replica 3 gave up");
    if (!(took < 10)) {
        print_error("the run took %.1f s to fail (timeout 30 s)\n", took);
        fail();
    }
    destroy_after_failure(r, &j);

    /* A NaN gradient in group 0 is blamed on its replica, before anything reaches a server. */
    job_setup(&j, &p, 8, endless, 0.05f);
    j.gate = 4;
    j.nan_replica = 1;
    r = start(&cfg, &j);
    status = rp_replicator_run(r, train, &j);
    assert_int_equal(status, RP_ERR_NUMERIC);
    tu_assert_error_contains("replica 1's own gradient of parameter 'x'");
    assert_int_equal(j.taken[0], 1); /* group 0 stopped at its first batch */
    destroy_after_failure(r, &j);
}

/* Bad configurations are named. */
static void test_bad_config(void **state)
{
    (void)state;
    rp_replicator *r = NULL;
    rp_config cfg = groups_config(4, 3);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("sync_groups = 3 does not divide the 4 replicas");
    cfg = groups_config(4, -1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("sync_groups = -1");
    cfg = groups_config(4, 2);
    cfg.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("async regime");
    cfg = groups_config(4, 2);
    cfg.zero = true;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("ZeRO-1");
    cfg = groups_config(4, 2);
    cfg.ps = 0;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("ps = 0");
    cfg = groups_config(4, 2);
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 4, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("sync_groups = 2");
    assert_null(r);

    /* A batch that the group cannot split. */
    cfg = groups_config(4, 2);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    rp_input_context in;
    assert_int_equal(rp_replica_input_context(rp_replicator_replica(r, 0), 7, &in), RP_ERR_INVALID);
    tu_assert_error_contains("does not split across 2 replicas (a sync group)");
    assert_int_equal(rp_replica_input_context(rp_replicator_replica(r, 0), 6, &in), RP_OK);
    rp_replicator_destroy(r);

    int argc = 3;
    char *argv[] = {"x", "--sync-groups", "4", NULL};
    cfg = rp_config_default();
    assert_int_equal(rp_config_from_args(&cfg, &argc, argv), RP_OK);
    assert_int_equal(cfg.sync_groups, 4);
    assert_int_equal(argc, 1);
    argc = 3;
    char *bad[] = {"x", "--sync-groups", "0", NULL};
    assert_int_equal(rp_config_from_args(&cfg, &argc, bad), RP_ERR_INVALID);
    tu_assert_error_contains("--sync-groups 0");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_context),
        cmocka_unit_test(test_bitwise_within_group_no_lost_updates),
        cmocka_unit_test(test_groups_converge),
        cmocka_unit_test(test_failing_replica_named),
        cmocka_unit_test(test_bad_config),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
