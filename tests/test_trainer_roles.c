/*
 * test_trainer_roles.c - the trainer driving one role of a job while others run
 * long-lived functions (rp_trainer_model.start_roles / stop_roles), as D4PG's
 * learner trains beside its actors and replay:
 *
 *  - a learner role of 2 replicas steps; a started "counter" role (one worker)
 *    answers every step's message from each replica with the running count,
 *    and returns when stop_roles tells it to: the trainer's run waits for it,
 *    and the counter saw exactly steps x replicas messages;
 *  - the stepped role's checkpoint and metrics are written as usual, and a
 *    resumed run goes on from the saved step with the counter started again;
 *  - a learner that fails mid-run still stops the started role (its error is
 *    the one returned, and the counter returns long before any timeout);
 *  - a gauge scalar (the counter's count) is recorded as its latest value;
 *  - a model with start_roles on a job of one role, or stop_roles without
 *    start_roles, is refused.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_STEP 1
#define TAG_STOP 2
#define LEARNERS 2

typedef struct job {
    int counter_worker;     /* the counter's world rank */
    int64_t fail_at;        /* a learner step that fails (-1: none) */
    int64_t counted;        /* messages the counter received, its last run */
    int counter_returns;    /* times the counter's function returned */
    int64_t replies_ok;     /* steps whose reply matched the expected count */
    double counter_seconds; /* how long the counter's last run took */
} job;

/* The started role: counts the learners' messages, answers each with the count, ends on a stop. */
static rp_status counter_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    rp_comm *world = rp_replica_link_comm(rep);
    double t0 = rp_now_s();
    int64_t count = 0;
    rp_status status = RP_OK;
    for (;;) {
        /* {kind, sender's world rank, step}: the sender is in the message, so one blocking
           receive from any source serves every learner without polling. */
        int64_t msg[3];
        RP_TRY(rp_comm_recv(world, msg, 3, RP_I64, RP_ANY_SOURCE, RP_ANY_TAG));
        if (msg[0] == TAG_STOP) break;
        count++;
        RP_TRY(rp_comm_send(world, &count, 1, RP_I64, (int)msg[1], TAG_STEP));
    }
cleanup:
    j->counted = count;
    j->counter_returns++;
    j->counter_seconds = rp_now_s() - t0;
    return status;
}

static rp_status start_roles(rp_replicator *r, void *ctx)
{
    return rp_replicator_start(r, "counter", counter_fn, ctx);
}

static rp_status stop_roles(rp_replica *rep, void *ctx, void *state)
{
    job *j = ctx;
    if (rp_replica_id(rep) != 0) return RP_OK;
    int64_t bye[3] = {TAG_STOP, rp_replica_worker(rep), 0};
    return rp_comm_send(rp_replica_link_comm(rep), bye, 3, RP_I64, j->counter_worker, TAG_STOP);
}

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **state)
{
    job *j = ctx;
    if (strcmp(rp_replica_role(rep), "learner") != 0)
        return RP_ERROR(RP_ERR_INVALID, "build ran on a '%s' worker", rp_replica_role(rep));
    *state = j;
    return RP_OK;
}

static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    job *j = ctx;
    if (at->global_step == j->fail_at && rp_replica_id(rep) == 1)
        return RP_ERROR(RP_ERR_NUMERIC, "learner 1 fails at step %lld", (long long)at->global_step);
    rp_comm *world = rp_replica_link_comm(rep);
    int64_t step = at->global_step, count = 0, msg[3] = {TAG_STEP, rp_replica_worker(rep), step};
    RP_CHECK(rp_comm_send(world, msg, 3, RP_I64, j->counter_worker, TAG_STEP));
    RP_CHECK(rp_comm_recv(world, &count, 1, RP_I64, j->counter_worker, TAG_STEP));
    /* The learners are in step: the counter has heard at most this step's messages. */
    if (count >= 1 && count <= (int64_t)LEARNERS * (step + 1) && rp_replica_id(rep) == 0)
        __atomic_add_fetch(&j->replies_ok, 1, __ATOMIC_RELAXED);
    scalars[0] = (double)count;
    return RP_OK;
}

static rp_status save(void *ctx, void *state, rp_checkpoint *ck)
{
    int64_t one = 1;
    return rp_checkpoint_add_i64(ck, "toy/one", 1, &one);
}

static const char *const count_scalar[] = {"count", NULL};

static const rp_trainer_model model = {
    .build = build,
    .train_step = train_step,
    .scalars = count_scalar,
    .gauges = count_scalar,
    .save = save,
    .start_roles = start_roles,
    .stop_roles = stop_roles,
};

static rp_trainer_config config(const char *dir, int64_t steps)
{
    rp_trainer_config c = rp_trainer_config_default();
    c.runtime.backend = RP_BACKEND_THREADS;
    c.runtime.threads_per_replica = 1;
    c.runtime.timeout_s = 20;
    c.runtime.nroles = 2;
    c.runtime.roles[0] = rp_role_make("learner", LEARNERS, 1);
    c.runtime.roles[1] = rp_role_make("counter", 1, 1);
    c.run_dir = dir;
    c.run_dir_exact = true;
    c.force = true;
    c.steps = steps;
    c.checkpoint_every_steps = 5;
    c.quiet = true;
    return c;
}

static void test_started_role_beside_the_steps(void **unused)
{
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "roles");
    job j = {.counter_worker = LEARNERS, .fail_at = -1};
    rp_trainer_config c = config(dir, 12);
    c.max_steps = 7;
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    assert_true(rp_trainer_is_root(t));
    assert_false(rp_trainer_is_bystander(t));
    rp_status st = rp_trainer_run(t);
    if (st != RP_OK) print_message("run: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    rp_trainer_progress p = rp_trainer_get_progress(t);
    assert_true(p.stopped);
    assert_int_equal(p.global_step, 7);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    assert_int_equal(j.counter_returns, 1);
    assert_int_equal(j.counted, 7 * LEARNERS);
    assert_int_equal(j.replies_ok, 7);

    /* Resumed: the counter role starts again and the run goes on from step 7 to 12. */
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
    c = config(dir, 12);
    c.resume = ck;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    rp_checkpoint_destroy(ck);
    assert_int_equal(rp_trainer_run(t), RP_OK);
    p = rp_trainer_get_progress(t);
    assert_true(p.finished);
    assert_int_equal(p.global_step, 12);
    assert_int_equal(p.steps_this_run, 5);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    assert_int_equal(j.counter_returns, 2);
    assert_int_equal(j.counted, 5 * LEARNERS);

    /* "count" is a gauge: the run's last line gives the last step's value (replies 9 and 10,
       averaged over the two learners), not the mean over the run's steps (5.5). */
    char path[600], line[1024], last[1024] = "";
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        if (strstr(line, "train_count")) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    const char *v = strstr(last, "\"train_count\":");
    assert_non_null(v);
    assert_true(fabs(atof(v + strlen("\"train_count\":")) - 9.5) < 1e-9);
}

static void test_failure_stops_the_started_role(void **unused)
{
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "roles_fail");
    job j = {.counter_worker = LEARNERS, .fail_at = 3};
    rp_trainer_config c = config(dir, 10);
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    double t0 = rp_now_s();
    assert_int_equal(rp_trainer_run(t), RP_ERR_NUMERIC);
    tu_assert_error_contains("learner 1 fails at step 3");
    rp_trainer_destroy(t);
    assert_int_equal(j.counter_returns, 1);
    /* Told to stop, not timed out (the timeout is 20 s). */
    assert_true(rp_now_s() - t0 < 10);
}

static void test_bad_role_configs(void **unused)
{
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "roles_bad");
    job j = {.counter_worker = LEARNERS, .fail_at = -1};
    rp_trainer_config c = config(dir, 4);
    c.runtime.nroles = 0;
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    tu_assert_error_contains("the first is stepped");
    assert_null(t);
    rp_trainer_model m = model;
    m.start_roles = NULL;
    c = config(dir, 4);
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("stop_roles but no start_roles");
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_started_role_beside_the_steps),
        cmocka_unit_test(test_failure_stops_the_started_role),
        cmocka_unit_test(test_bad_role_configs),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
