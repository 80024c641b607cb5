/*
 * test_next_batch.c - rp_replica_next_batch() and rp_replica_lockstep()
 * (replicator/runtime.h), the runtime's one way to iterate batches:
 *  - sync: every replica gets 0, 1, 2, ... in order and in lockstep (an
 *    all-gather after each index finds the same index on every replica),
 *    restarting at 0 in each run; lockstep is true;
 *  - async: each index of a range goes to exactly one replica, in every run,
 *    with and without an optimizer (the servers' queue, then the in-process
 *    one); lockstep is false; a failing replica stops its peers at their
 *    next batch.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAXR  4
#define STEPS 7
#define RANGE 300

typedef struct job {
    /* sync */
    int64_t got[MAXR][STEPS + 1];
    int64_t gathered[MAXR][STEPS][MAXR];
    bool lockstep[MAXR];
    /* async */
    int64_t range;
    int64_t taken[MAXR];
    int64_t seen[MAXR][RANGE];
    rp_params *params[MAXR];
    rp_optimizer *opt[MAXR];
} job;

static rp_config config(int n, rp_regime regime)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.regime = regime;
    cfg.replicas = n;
    cfg.ps = regime == RP_REGIME_ASYNC ? 1 : 0;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    return cfg;
}

/* STEPS batches; after each, the replicas gather the index they were given. */
static rp_status sync_steps(rp_replica *rep, void *arg)
{
    job *j = arg;
    int q = rp_replica_id(rep);
    j->lockstep[q] = rp_replica_lockstep(rep);
    for (int s = 0; s <= STEPS; s++) {
        RP_CHECK(rp_replica_next_batch(rep, &j->got[q][s]));
        if (s < STEPS) RP_CHECK(rp_all_gather(rep, &j->got[q][s], j->gathered[q][s], 1, RP_I64));
    }
    return RP_OK;
}

static void test_sync_lockstep(void **state)
{
    const int n = 3;
    rp_config cfg = config(n, RP_REGIME_SYNC);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_true(rp_replicator_lockstep(r));
    job *j = calloc(1, sizeof *j);
    for (int run = 0; run < 2; run++) {
        memset(j, 0xff, sizeof *j);
        tu_run_ok(r, sync_steps, j);
        for (int q = 0; q < n; q++) {
            assert_true(j->lockstep[q]);
            /* Each run counts from 0 again, one index per call, on every replica. */
            for (int s = 0; s <= STEPS; s++)
                assert_int_equal(j->got[q][s], s);
            for (int s = 0; s < STEPS; s++)
                for (int p = 0; p < n; p++)
                    assert_int_equal(j->gathered[q][s][p], s);
        }
    }
    rp_replicator_destroy(r);
    free(j);
}

/* Claims indices until one falls past the range, recording those inside it. */
static rp_status async_drain(rp_replica *rep, void *arg)
{
    job *j = arg;
    int q = rp_replica_id(rep);
    j->lockstep[q] = rp_replica_lockstep(rep);
    j->taken[q] = 0;
    for (;;) {
        int64_t i;
        RP_CHECK(rp_replica_next_batch(rep, &i));
        if (i >= j->range) break;
        if (i < 0) return RP_ERROR(RP_ERR_INVALID, "negative index %lld", (long long)i);
        j->seen[q][j->taken[q]++] = i;
    }
    return RP_OK;
}

static rp_status async_build(rp_replica *rep, void *arg)
{
    job *j = arg;
    int q = rp_replica_id(rep);
    RP_CHECK(rp_params_create(&j->params[q]));
    rp_init init = {.kind = RP_INIT_CONSTANT, .value = 0};
    if (!rp_params_add(j->params[q], "x", 1, (int[]){4}, init, true)) return RP_ERR_INVALID;
    RP_CHECK(rp_params_finalize(j->params[q], 1));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &j->opt[q], j->params[q], &oc);
}

static rp_status async_teardown(rp_replica *rep, void *arg)
{
    job *j = arg;
    int q = rp_replica_id(rep);
    rp_optimizer_destroy(j->opt[q]);
    rp_params_destroy(j->params[q]);
    return RP_OK;
}

static void check_once_each(const job *j, int n)
{
    int count[RANGE] = {0};
    for (int q = 0; q < n; q++) {
        assert_false(j->lockstep[q]);
        for (int64_t k = 0; k < j->taken[q]; k++)
            count[j->seen[q][k]]++;
    }
    for (int i = 0; i < RANGE; i++)
        assert_int_equal(count[i], 1);
}

static void test_async_each_index_once(void **state)
{
    const int n = 4;
    rp_config cfg = config(n, RP_REGIME_ASYNC);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_false(rp_replicator_lockstep(r));
    job *j = calloc(1, sizeof *j);
    j->range = RANGE;
    /* Before any optimizer: the in-process queue. */
    for (int run = 0; run < 2; run++) {
        tu_run_ok(r, async_drain, j);
        check_once_each(j, n);
    }
    /* With the servers' queue. */
    tu_run_ok(r, async_build, j);
    for (int run = 0; run < 2; run++) {
        tu_run_ok(r, async_drain, j);
        check_once_each(j, n);
    }
    tu_run_ok(r, async_teardown, j);
    rp_replicator_destroy(r);
    free(j);
}

/* Claims batches without end (a queue that never runs dry); replica 2 fails at its third. */
static rp_status async_fail(rp_replica *rep, void *arg)
{
    job *j = arg;
    int q = rp_replica_id(rep);
    j->taken[q] = 0;
    for (;;) {
        int64_t i;
        RP_CHECK(rp_replica_next_batch(rep, &i));
        if (q == 2 && j->taken[q] == 2)
            return RP_ERROR(RP_ERR_INVALID, "replica 2 gave up at batch %lld", (long long)i);
        j->taken[q]++;
        if (i > (int64_t)1 << 40) return RP_OK; /* not before the heat death of the test */
    }
}

/*
 * A failing async replica stops the run: its peers, who take batches at their own pace, stop at
 * their next one instead of training on until the batches run out (here: never), and the run's
 * error is the failing replica's own, not a peer's "stopped" echo; with and without servers.
 */
static void test_async_failure_stops_peers(void **state)
{
    (void)state;
    const int n = 4;
    rp_config cfg = config(n, RP_REGIME_ASYNC);
    rp_replicator *r = tu_replicator_make(&cfg);
    job *j = calloc(1, sizeof *j);
    for (int servers = 0; servers < 2; servers++) {
        if (servers) tu_run_ok(r, async_build, j);
        double t0 = rp_now_s();
        assert_int_equal(rp_replicator_run(r, async_fail, j), RP_ERR_INVALID);
        double took = rp_now_s() - t0;
        tu_assert_error_contains("replica 2 gave up");
        if (!(took < 10)) {
            print_error("the run took %.1f s to stop (its peers' queue never runs dry)\n", took);
            fail();
        }
        assert_int_equal(j->taken[2], 2);
    }
    tu_run_ok(r, async_teardown, j);
    rp_replicator_destroy(r);
    free(j);
}

static void test_null_arguments(void **state)
{
    int64_t i;
    assert_int_equal(rp_replica_next_batch(NULL, &i), RP_ERR_INVALID);
    tu_assert_error_contains("rp_replica_next_batch");
    assert_false(rp_replica_lockstep(NULL));
    assert_false(rp_replicator_lockstep(NULL));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_lockstep),
        cmocka_unit_test(test_async_each_index_once),
        cmocka_unit_test(test_async_failure_stops_peers),
        cmocka_unit_test(test_null_arguments),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
