/*
 * test_blame.c - what a user meets first when a job of roles or a mesh goes
 * wrong (issue 26), on the threads backend: a forgotten send is reported at
 * once naming the worker that skipped it, a collective on the wrong axis
 * names the axis and the worker that made it, destroy ends within a bound
 * with a started role still sending, and a mesh's results and printing come
 * from the right worker.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static rp_config base(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 10;
    return cfg;
}

/* ---- a forgotten send ---------------------------------------------------------------- */

/* Replica 0 returns without the send replica 1 waits for. */
static rp_status skip_send_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    float x = 0;
    if (rp_replica_id(rep) == 1) return rp_comm_recv(rp_replica_comm(rep), &x, 1, RP_F32, 0, 7);
    return RP_OK;
}

static void test_skipped_send(void **state)
{
    (void)state;
    rp_config cfg = base();
    cfg.replicas = 2;
    rp_replicator *r = tu_replicator_make(&cfg);
    double t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, skip_send_fn, NULL);
    double took = rp_now_s() - t0;
    assert_int_equal(st, RP_ERR_MISMATCH);
    /* At once, not after the 10 s timeout, and the replica that skipped the send is named. */
    assert_true(took < 2.0);
    tu_assert_error_contains("replica 0 went on to the runtime's report all-gather");
    tu_assert_error_contains("without sending the message of recv (tag 7, count 1, f32), which "
                             "replica 1 is waiting in");
    assert_null(strstr(rp_last_error(), "did not arrive"));
    rp_replicator_destroy(r);
}

/* ---- a collective on the wrong axis ----------------------------------------------------- */

/* In a 2 x 2 mesh, worker 3 all-reduces on its data axis while the others use the model axis. */
static rp_status wrong_axis_fn(rp_replica *rep, void *arg)
{
    float x = 1;
    rp_axis a = rp_replica_worker(rep) == *(const int *)arg ? RP_AXIS_DATA : RP_AXIS_MODEL;
    return rp_comm_all_reduce(rp_replica_axis_comm(rep, a), &x, &x, 1, RP_F32, RP_SUM);
}

static void test_wrong_axis_named(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("blame"), 0);
    rp_config cfg = base();
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 2, 2);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_int_equal(rp_replicator_set_flight_dir(r, tu_tmpdir()), RP_OK);
    int culprit = 3;
    assert_int_equal(rp_replicator_run(r, wrong_axis_fn, &culprit), RP_ERR_MISMATCH);
    const char *e = rp_last_error();
    /* The worker that made the call, and the axis it made it on; one noun in the line. */
    if (strncmp(e,
                "worker 3: worker 3 made other collective calls than every other worker of "
                "role 'replica'",
                81) != 0)
        print_error("%s\n", e);
    assert_int_equal(strncmp(e, "worker 3: worker 3 made other collective calls", 46), 0);
    tu_assert_error_contains("worker 3: data 1, model 0; each other worker: data 0, model 1");
    tu_assert_error_contains("(the data axis reported: ");
    assert_null(strstr(e, "replica 0:"));
    assert_null(strstr(e, "replica 1:"));
    rp_replicator_destroy(r);
    /* Worker 3's model axis saw no call: its flight file says so, not "the recorder is off". */
    char path[512];
    size_t n = 0;
    char *text = (char *)tu_read_file(tu_tmp_path(path, sizeof path, "flight-3.txt"), &n);
    assert_non_null(text);
    char *model = strstr(text, "== worker 3, model axis ==");
    assert_non_null(model);
    assert_non_null(strstr(model, "no call has been made on this handle"));
    assert_null(strstr(text, "the recorder is off"));
    free(text);
    tu_tmpdir_remove();
    /* The first worker erring is found the same way. */
    r = tu_replicator_make(&cfg);
    culprit = 0;
    assert_int_equal(rp_replicator_run(r, wrong_axis_fn, &culprit), RP_ERR_MISMATCH);
    tu_assert_error_contains("worker 0: worker 0 made other collective calls than every other "
                             "worker of role 'replica' (user collectives on each axis in this "
                             "step - worker 0: data 1, model 0; each other worker: data 0, "
                             "model 1)");
    rp_replicator_destroy(r);
}

/* A failure on one axis of a mesh names that communicator. */
static rp_status model_skip_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    float x = 1;
    if (rp_replica_coord(rep, RP_AXIS_MODEL) == 1) return RP_OK;
    return rp_comm_all_reduce(rp_replica_axis_comm(rep, RP_AXIS_MODEL), &x, &x, 1, RP_F32, RP_SUM);
}

static void test_axis_named_in_message(void **state)
{
    (void)state;
    rp_config cfg = base();
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 1, 2);
    rp_replicator *r = tu_replicator_make(&cfg);
    assert_int_equal(rp_replicator_run(r, model_skip_fn, NULL), RP_ERR_COMM);
    tu_assert_error_contains("model axis: worker 1 ended its step");
    assert_null(strstr(rp_last_error(), "replica 0:"));
    rp_replicator_destroy(r);
}

/* ---- results and printing in a mesh ------------------------------------------------- */

typedef struct mesh_job {
    int leaders;     /* atomic: workers on which rp_replica_is_leader() was true */
    int leader;      /* the last one's worker index */
    int stage0_only; /* report from model worker 0 instead of the last one */
} mesh_job;

/* The loss is known at the end of the model: only the last model worker reports it. */
static rp_status mesh_report_fn(rp_replica *rep, void *arg)
{
    mesh_job *j = arg;
    if (rp_replica_is_leader(rep)) {
        __atomic_add_fetch(&j->leaders, 1, __ATOMIC_RELAXED);
        j->leader = rp_replica_worker(rep);
    }
    int last = rp_replica_axis_size(rep, RP_AXIS_MODEL) - 1;
    int reporter = j->stage0_only ? 0 : last;
    if (rp_replica_coord(rep, RP_AXIS_MODEL) != reporter) return RP_OK;
    return rp_replica_report(rep, "loss", 10.0 + rp_replica_id(rep), RP_MEAN);
}

static void test_mesh_result_and_leader(void **state)
{
    (void)state;
    rp_config cfg = base();
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 2, 2);
    rp_replicator *r = tu_replicator_make(&cfg);
    mesh_job j;
    memset(&j, 0, sizeof j);
    assert_int_equal(rp_replicator_run(r, mesh_report_fn, &j), RP_OK);
    /* The last stage's report, reduced over its data axis: (10 + 11) / 2. */
    double loss = 0;
    rp_status st = rp_replicator_result(r, "loss", &loss);
    if (st != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_true(loss == 10.5);
    double each[2] = {0, 0};
    assert_int_equal(rp_replicator_result_each(r, "loss", each, 2), RP_OK);
    assert_true(each[0] == 10 && each[1] == 11);
    /* One leader in the job: replica 0's last model worker (worker 1), not every model worker of
     * replica 0 as rp_replica_id() == 0 would be. */
    assert_int_equal(j.leaders, 1);
    assert_int_equal(j.leader, 1);
    assert_true(rp_replicator_is_leader(r));
    /* A loss reported by the first stage only is found too. */
    memset(&j, 0, sizeof j);
    j.stage0_only = 1;
    assert_int_equal(rp_replicator_run(r, mesh_report_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_result(r, "loss", &loss), RP_OK);
    assert_true(loss == 10.5);
    rp_replicator_destroy(r);
    /* Single-worker replicas: the leader is replica 0. */
    cfg = base();
    cfg.replicas = 3;
    r = tu_replicator_make(&cfg);
    memset(&j, 0, sizeof j);
    assert_int_equal(rp_replicator_run(r, mesh_report_fn, &j), RP_OK);
    assert_int_equal(j.leaders, 1);
    assert_int_equal(j.leader, 0);
    assert_int_equal(rp_replicator_result(r, "loss", &loss), RP_OK);
    assert_true(loss == 11.0);
    rp_replicator_destroy(r);
    assert_false(rp_replicator_is_leader(NULL));
    assert_false(rp_replica_is_leader(NULL));
}

/* A process whose workers are all in a started role (under MPI, a rank of actors) has no result,
 * and says why. */
static rp_status wait_release_fn(rp_replica *rep, void *arg)
{
    (void)rep;
    while (!__atomic_load_n((int *)arg, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return RP_OK;
}

static void test_result_without_workers(void **state)
{
    (void)state;
    rp_config cfg = base();
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("actor", 2, 1);
    rp_replicator *r = tu_replicator_make(&cfg);
    int release = 0;
    assert_int_equal(rp_replicator_start(r, "actor", wait_release_fn, &release), RP_OK);
    mesh_job j;
    memset(&j, 0, sizeof j);
    assert_int_equal(rp_replicator_run(r, mesh_report_fn, &j), RP_OK);
    double loss;
    assert_int_equal(rp_replicator_result(r, "loss", &loss), RP_ERR_INVALID);
    tu_assert_error_contains("no value named 'loss': no worker of this process ran the last run");
    __atomic_store_n(&release, 1, __ATOMIC_RELEASE);
    assert_int_equal(rp_replicator_wait(r, "actor"), RP_OK);
    rp_replicator_destroy(r);
}

/* ---- destroy with a started role still running -------------------------------------- */

typedef struct actor_job {
    long sent;
    rp_status status;
    char error[1024];
    int release; /* atomic: the silent actor may return */
} actor_job;

/* The most ordinary mistake in a job of roles: an actor that sends to the learner forever, and a
 * program that destroys the replicator without stopping it. */
static rp_status sending_actor_fn(rp_replica *rep, void *arg)
{
    actor_job *j = arg;
    float x = 1;
    rp_status st;
    while ((st = rp_comm_send(rp_replica_link_comm(rep), &x, 1, RP_F32, 0, 3)) == RP_OK)
        j->sent++;
    j->status = st;
    snprintf(j->error, sizeof j->error, "%s", rp_last_error());
    return st;
}

static rp_config learner_actor(void)
{
    rp_config cfg = base();
    cfg.nroles = 2;
    cfg.roles[0] = rp_role_make("learner", 1, 1); /* worker 0 */
    cfg.roles[1] = rp_role_make("actor", 1, 1);   /* worker 1 */
    return cfg;
}

static void test_destroy_stops_sending_actor(void **state)
{
    (void)state;
    rp_config cfg = learner_actor();
    rp_replicator *r = tu_replicator_make(&cfg);
    actor_job j;
    memset(&j, 0, sizeof j);
    assert_int_equal(rp_replicator_start(r, "actor", sending_actor_fn, &j), RP_OK);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double t0 = rp_now_s();
    rp_replicator_destroy(r);
    double took = rp_now_s() - t0;
    /* The actor's next send failed at once, naming the learner that left and why. */
    if (took >= 2.0) print_error("destroy took %.2f s (timeout 10 s)\n", took);
    assert_true(took < 2.0);
    assert_true(j.sent > 0);
    assert_int_equal(j.status, RP_ERR_COMM);
    if (!strstr(j.error, "worker 0 has left (COMM: worker 0's replicator was destroyed): send "
                         "(tag 3, count 1, f32) from worker 1 to it would never be received"))
        print_error("actor's error: %s\n", j.error);
    assert_non_null(strstr(j.error, "worker 0 has left (COMM: worker 0's replicator was "
                                    "destroyed): send (tag 3, count 1, f32) from worker 1"));
}

/* An actor that never calls comm cannot be told: destroy gives up on it after the bound. */
static rp_status silent_actor_fn(rp_replica *rep, void *arg)
{
    (void)rep;
    actor_job *j = arg;
    while (!__atomic_load_n(&j->release, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return RP_OK;
}

static void test_destroy_names_stuck_role(void **state)
{
    (void)state;
    /* In a child: the replicator's memory is left allocated under the detached thread, on
     * purpose, and _exit skips the leak check. */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rp_config cfg = learner_actor();
        cfg.timeout_s = 1; /* the bound: max(2 s, timeout) */
        rp_replicator *r = NULL;
        if (rp_replicator_create(&r, &cfg) != RP_OK) _exit(2);
        static actor_job j;
        if (rp_replicator_start(r, "actor", silent_actor_fn, &j) != RP_OK) _exit(3);
        double t0 = rp_now_s();
        rp_replicator_destroy(r);
        double took = rp_now_s() - t0;
        const char *e = rp_last_error();
        int bad = 0;
        if (!(took >= 1.9 && took < 5.0)) bad |= 4, fprintf(stderr, "destroy took %.2f s\n", took);
        if (rp_last_status() != RP_ERR_TIMEOUT ||
            !strstr(e, "rp_replicator_destroy: role 'actor', worker 1 did not return from its "
                       "started function within 2 s"))
            bad |= 8, fprintf(stderr, "error: %s\n", e);
        __atomic_store_n(&j.release, 1, __ATOMIC_RELEASE);
        _exit(bad);
    }
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skipped_send),
        cmocka_unit_test(test_wrong_axis_named),
        cmocka_unit_test(test_axis_named_in_message),
        cmocka_unit_test(test_mesh_result_and_leader),
        cmocka_unit_test(test_result_without_workers),
        cmocka_unit_test(test_destroy_stops_sending_actor),
        cmocka_unit_test(test_destroy_names_stuck_role),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
