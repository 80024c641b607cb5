/*
 * test_topology.c - roles and meshes on the threads backend
 * (replicator/runtime.h: rp_role, rp_replicator_start/wait, the worker's
 * coordinates and communicators). The checks themselves run inside the
 * workers (mpi/topology_check.h, shared with the MPI test): a 2 data x 2
 * model mesh, sync training over its data axis only, and a job of learners,
 * actors and a server that exchange messages and shut down. Also: the
 * default layout is one role of replicas, bad role layouts are refused with
 * their reason, and run() skips a started role.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "mpi/topology_check.h"

static rp_config base(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1;
    return cfg;
}

static void test_mesh_2x2(void **state)
{
    rp_config cfg = base();
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 2, 2);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_int_equal(rp_replicator_local_replicas(r), 4);
    assert_int_equal(rp_replicator_replicas(r), 2);
    tc_mesh m = {.data = 2, .model = 2};
    tu_run_ok(r, mesh_fn, &m);
    for (int w = 0; w < 4; w++)
        assert_int_equal(m.checked[w], 1);
    /* Sync training all-reduces over the data axis only: each model coordinate its own shard. */
    tc_train *t = calloc(1, sizeof *t);
    tu_run_ok(r, mesh_build_fn, t);
    for (int s = 0; s < 3; s++)
        tu_run_ok(r, mesh_step_fn, t);
    tu_run_ok(r, mesh_teardown_fn, t);
    free(t);
    rp_replicator_destroy(r);
}

static void test_default_is_one_role(void **state)
{
    rp_config cfg = base();
    cfg.replicas = 3;
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_int_equal(rp_replicator_roles(r), 1);
    const rp_role *ro = rp_replicator_role(r, 0);
    assert_string_equal(ro->name, "replica");
    assert_int_equal(ro->members, 3);
    assert_int_equal(ro->model, 1);
    assert_int_equal(ro->first, 0);
    assert_null(rp_replicator_role(r, 1));
    tc_mesh m = {.data = 3, .model = 1};
    tu_run_ok(r, mesh_fn, &m);
    /* One handle for the world, the role and the data axis: the step path is today's. */
    rp_replica *rep = rp_replicator_replica(r, 1);
    assert_ptr_equal(rp_replica_world_comm(rep), rp_replica_comm(rep));
    assert_ptr_equal(rp_replica_role_comm(rep), rp_replica_comm(rep));
    assert_int_equal(rp_comm_size(rp_replica_axis_comm(rep, RP_AXIS_MODEL)), 1);
    assert_null(rp_replica_axis_comm(rep, (rp_axis)7));
    assert_int_equal(rp_replica_coord(rep, (rp_axis)7), -1);
    rp_replicator_destroy(r);
}

static void test_roles_threads(void **state)
{
    rp_config cfg = base();
    tc_roles_config(&cfg, 2, 2);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_int_equal(rp_replicator_local_replicas(r), 5);
    assert_int_equal(rp_replicator_roles(r), 3);
    assert_int_equal(rp_replicator_role(r, 2)->first, 4);
    tc_roles j;
    memset(&j, 0, sizeof j);
    j.learners = 2;
    j.actors = 2;
    j.p2p = 1;
    rp_status st = tc_run_roles(r, &j);
    if (st != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_int_equal(j.p2p_seen, 3);
    /* Unknown roles are named with the job's; a started role cannot be started again. */
    assert_int_equal(rp_replicator_start(r, "critic", roles_fn, &j), RP_ERR_INVALID);
    tu_assert_error_contains(
        "no role named 'critic' in this job (its roles: 'learner', 'actor', 'server')");
    assert_int_equal(rp_replicator_wait(r, "nobody"), RP_ERR_INVALID);
    rp_replicator_destroy(r);
}

/* A started role runs on while run() steps the others. */
typedef struct busy_job {
    int release; /* atomic */
    int ran[8];
} busy_job;

static rp_status spin_fn(rp_replica *rep, void *arg)
{
    busy_job *j = arg;
    while (!__atomic_load_n(&j->release, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return RP_ERROR(RP_ERR_NUMERIC, "the server's own failure");
}

static rp_status mark_fn(rp_replica *rep, void *arg)
{
    busy_job *j = arg;
    j->ran[rp_replica_worker(rep)]++;
    /* The learners all-reduce on their role: the busy server is not in it. */
    double v = 1;
    return rp_comm_all_reduce(rp_replica_role_comm(rep), &v, &v, 1, RP_F64, RP_SUM);
}

static void test_run_skips_started_role(void **state)
{
    rp_config cfg = base();
    cfg.nroles = 2;
    cfg.roles[0] = rp_role_make("server", 1, 1); /* worker 0: the caller's thread in run() */
    cfg.roles[1] = rp_role_make("learner", 2, 1);
    rp_replicator *r = tu_replicator_make(&cfg);
    busy_job j;
    memset(&j, 0, sizeof j);
    assert_int_equal(rp_replicator_start(r, "server", spin_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_start(r, "server", spin_fn, &j), RP_ERR_INVALID);
    tu_assert_error_contains("role 'server' is already started");
    for (int s = 0; s < 3; s++)
        tu_run_ok(r, mark_fn, &j);
    assert_int_equal(j.ran[0], 0);
    assert_int_equal(j.ran[1], 3);
    assert_int_equal(j.ran[2], 3);
    __atomic_store_n(&j.release, 1, __ATOMIC_RELEASE);
    assert_int_equal(rp_replicator_wait(r, "server"), RP_ERR_NUMERIC);
    tu_assert_error_contains("role 'server', worker 0: ");
    tu_assert_error_contains("the server's own failure");
    /* Waited for: run() includes it again. */
    tu_run_ok(r, mark_fn, &j);
    assert_int_equal(j.ran[0], 1);
    rp_replicator_destroy(r);
}

static void test_bad_layouts(void **state)
{
    rp_replicator *r = NULL;
    rp_config cfg = base();
    cfg.nroles = 2;
    cfg.roles[0] = rp_role_make("a", 2, 1);
    cfg.roles[1] = rp_role_make("a", 1, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("roles 0 and 1 are both named 'a'");
    cfg.roles[1] = rp_role_make("b", 0, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("role 'b': members 0 x model 1 x pipe 1");
    cfg.roles[1] = rp_role_make("b", 1, 1);
    cfg.roles[1].first = 1;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("worker 1 is placed in both role 'a' and role 'b'");
    cfg.roles[1].first = 3;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("worker 2 of 3 is in no role");
    cfg.roles[1].first = -1;
    /* A name longer than a role holds is refused, not shortened (rp_role_make cannot fail). */
    cfg.roles[1] = rp_role_make("a-role-name-of-40-characters-is-too-long", 1, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains(
        "role 1: its name 'a-role-name-of-40-characters-is...' is longer than 31");
    assert_null(r);
    cfg.roles[1] = rp_role_make("", 1, 1);
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("role 1: its name is empty");
    cfg.roles[1] = rp_role_make("b", 1, 1);
    cfg.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_UNSUPPORTED);
    assert_null(r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_2x2),      cmocka_unit_test(test_default_is_one_role),
        cmocka_unit_test(test_roles_threads), cmocka_unit_test(test_run_skips_started_role),
        cmocka_unit_test(test_bad_layouts),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
