/*
 * test_resolve.c - rp_config_resolve, the one home of the layout rules: the automatic replica
 * count (one per kernel thread, dividing the batch, a multiple of the sync groups), a replica of
 * stages x tensor-parallel workers as one role, the threads each replica gets, and the refusals
 * (groups that do not divide, a batch that does not split) with their messages.
 */
#include <string.h>

#include "testutil.h"

static rp_config threads_config(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 0; /* automatic */
    return cfg;
}

static void test_auto_replicas(void **state)
{
    (void)state;
    rp_kernels_set_threads(4);
    rp_config cfg = threads_config();
    rp_job_shape shape = rp_job_shape_default();
    shape.batch = 128;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.backend, RP_BACKEND_THREADS);
    assert_int_equal(cfg.replicas, 4);
    assert_int_equal(shape.replicas, 4);
    assert_int_equal(cfg.threads_per_replica, 1);
    /* A batch of 6 does not split 4 ways: 3 replicas. */
    cfg = threads_config();
    shape = rp_job_shape_default();
    shape.batch = 6;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.replicas, 3);
    /* Asynchronous replicas need not split the batch. */
    cfg = threads_config();
    cfg.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.replicas, 4);
    /* Two threads per replica: half as many replicas. */
    cfg = threads_config();
    cfg.threads_per_replica = 2;
    shape = rp_job_shape_default();
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.replicas, 2);
    assert_int_equal(cfg.threads_per_replica, 2);
    /* Sync groups: a multiple of the groups. */
    rp_kernels_set_threads(5);
    cfg = threads_config();
    cfg.sync_groups = 2;
    shape = rp_job_shape_default();
    shape.batch = 8;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.replicas, 4);
    rp_kernels_set_threads(1);
}

static void test_given_and_threads(void **state)
{
    (void)state;
    rp_config cfg = threads_config();
    cfg.replicas = 3;
    rp_job_shape shape = rp_job_shape_default();
    shape.threads = 7;
    shape.replicas_from_run = true; /* a saved count: kept on threads */
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.replicas, 3);
    assert_int_equal(cfg.threads_per_replica, 2); /* 7 / 3 */
    /* Stages x tensor-parallel workers: one role, and the threads over every worker. */
    cfg = threads_config();
    cfg.replicas = 2;
    shape = rp_job_shape_default();
    shape.threads = 12;
    shape.stages = 3;
    shape.tensor_parallel = 2;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_OK);
    assert_int_equal(cfg.nroles, 1);
    assert_string_equal(cfg.roles[0].name, "replica");
    assert_int_equal(cfg.roles[0].members, 2);
    assert_int_equal(cfg.roles[0].model, 2);
    assert_int_equal(cfg.roles[0].pipe, 3);
    assert_int_equal(cfg.threads_per_replica, 1); /* 12 / (2 x 6) */
}

static void test_refusals(void **state)
{
    (void)state;
    rp_config cfg = threads_config();
    cfg.replicas = 3;
    cfg.sync_groups = 2;
    rp_job_shape shape = rp_job_shape_default();
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_ERR_INVALID);
    tu_assert_error_contains("--sync-groups 2 does not divide the 3 replicas");
    cfg = threads_config();
    cfg.replicas = 3;
    shape.batch = 32;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_ERR_INVALID);
    tu_assert_error_contains("batch 32 does not split across 3 replicas");
    cfg = threads_config();
    cfg.replicas = 4;
    cfg.sync_groups = 2;
    shape.batch = 5;
    assert_int_equal(rp_config_resolve(&cfg, &shape), RP_ERR_INVALID);
    tu_assert_error_contains("batch 5 does not split across 2 replicas (a sync group)");
    assert_int_equal(rp_config_resolve(NULL, &shape), RP_ERR_INVALID);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_replicas),
        cmocka_unit_test(test_given_and_threads),
        cmocka_unit_test(test_refusals),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
