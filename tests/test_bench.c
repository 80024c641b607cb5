/*
 * test_bench.c - what a model's benchmark shares (replicator/bench.h): the driver runs a model's
 * build, train_step and destroy on every worker with each worker's own state and the step's
 * position, and refuses a driver it cannot run instead of crashing; the median; --precision
 * read and reported as the benchmarks print it. cli_bench_precision.sh drives the same calls
 * through `replicator bench`.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"
#include "testutil.h"

/* A model whose state counts its steps and remembers the last step's position. */
typedef struct toy_state {
    int worker;
    int steps;
    int64_t last_step;
    float last_lr;
} toy_state;

typedef struct toy_ctx {
    int built, destroyed; /* every worker's, under the lock */
    pthread_mutex_t lock;
} toy_ctx;

static rp_status toy_build(rp_replica *rep, void *ctx, const rp_checkpoint *ck,
                           const rp_trainer_at *at, void **state)
{
    toy_ctx *c = ctx;
    if (ck || at) return RP_ERROR(RP_ERR_INVALID, "toy: a benchmark's build has no checkpoint");
    toy_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "toy");
    s->worker = rp_replica_local_index(rep);
    s->last_step = -1;
    *state = s;
    pthread_mutex_lock(&c->lock);
    c->built++;
    pthread_mutex_unlock(&c->lock);
    return RP_OK;
}

static rp_status toy_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                          double *scalars)
{
    (void)ctx;
    toy_state *s = state;
    if (s->worker != rp_replica_local_index(rep))
        return RP_ERROR(RP_ERR_INVALID, "toy: worker %d got worker %d's state",
                        rp_replica_local_index(rep), s->worker);
    s->steps++;
    s->last_step = at->global_step;
    s->last_lr = at->lr;
    scalars[0] = s->steps;
    return RP_OK;
}

static rp_status toy_destroy(rp_replica *rep, void *ctx, void *state)
{
    (void)rep;
    toy_ctx *c = ctx;
    free(state);
    pthread_mutex_lock(&c->lock);
    c->destroyed++;
    pthread_mutex_unlock(&c->lock);
    return RP_OK;
}

static const rp_trainer_model toy_model = {
    .build = toy_build,
    .train_step = toy_step,
    .destroy = toy_destroy,
};

static rp_replicator *two_workers(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 2;
    cfg.threads_per_replica = 1;
    return tu_replicator_make(&cfg);
}

static void test_driver_runs_each_workers_state(void **state)
{
    (void)state;
    rp_replicator *r = two_workers();
    toy_ctx ctx = {.lock = PTHREAD_MUTEX_INITIALIZER};
    void *states[2] = {NULL, NULL};
    rp_bench_driver d = {.model = &toy_model, .ctx = &ctx, .states = states, .nstates = 2};
    tu_run_ok(r, rp_bench_driver_build, &d);
    assert_int_equal(ctx.built, 2);
    assert_non_null(states[0]);
    assert_non_null(states[1]);
    assert_ptr_not_equal(states[0], states[1]);
    for (int it = 0; it < 3; it++) {
        d.at = (rp_trainer_at){0, it, 10 + it, 0.5f * (float)it};
        tu_run_ok(r, rp_bench_driver_step, &d);
    }
    for (int i = 0; i < 2; i++) {
        const toy_state *s = states[i];
        assert_int_equal(s->worker, i);
        assert_int_equal(s->steps, 3);
        assert_int_equal(s->last_step, 12);
        assert_true(s->last_lr == 1.0f);
    }
    tu_run_ok(r, rp_bench_driver_destroy, &d);
    assert_int_equal(ctx.destroyed, 2);
    assert_null(states[0]);
    assert_null(states[1]);
    /* Again: nothing left to destroy, nothing destroyed twice. */
    tu_run_ok(r, rp_bench_driver_destroy, &d);
    assert_int_equal(ctx.destroyed, 2);
    rp_replicator_destroy(r);
}

static void test_driver_refuses_what_it_cannot_run(void **state)
{
    (void)state;
    rp_replicator *r = two_workers();
    toy_ctx ctx = {.lock = PTHREAD_MUTEX_INITIALIZER};
    void *states[2] = {NULL, NULL};
    /* One slot for two workers: the second is refused by its index, nothing is overrun. */
    rp_bench_driver d = {.model = &toy_model, .ctx = &ctx, .states = states, .nstates = 1};
    assert_int_equal(rp_replicator_run(r, rp_bench_driver_build, &d), RP_ERR_INVALID);
    tu_assert_error_contains("local worker 1 has no state slot (nstates 1)");
    assert_null(states[1]);
    d.nstates = 2;
    tu_run_ok(r, rp_bench_driver_destroy, &d); /* the one built, if any */
    /* No states, no model, a model without train_step. */
    rp_bench_driver none = {.model = &toy_model, .ctx = &ctx, .nstates = 2};
    assert_int_equal(rp_replicator_run(r, rp_bench_driver_step, &none), RP_ERR_INVALID);
    tu_assert_error_contains("rp_bench_driver_step: a driver needs a model");
    rp_bench_driver no_model = {.states = states, .nstates = 2};
    assert_int_equal(rp_replicator_run(r, rp_bench_driver_build, &no_model), RP_ERR_INVALID);
    rp_trainer_model half = {.build = toy_build};
    rp_bench_driver no_step = {.model = &half, .ctx = &ctx, .states = states, .nstates = 2};
    assert_int_equal(rp_replicator_run(r, rp_bench_driver_build, &no_step), RP_ERR_INVALID);
    assert_int_equal(rp_replicator_run(r, rp_bench_driver_build, NULL), RP_ERR_INVALID);
    rp_replicator_destroy(r);
}

static void test_median(void **state)
{
    (void)state;
    double odd[] = {5, 1, 4, 2, 3};
    assert_true(rp_bench_median(odd, 5) == 3);
    for (int i = 0; i < 5; i++)
        assert_true(odd[i] == i + 1); /* sorted in place */
    double even[] = {8, 2, 6, 4};
    assert_true(rp_bench_median(even, 4) == 5);
    double one[] = {7};
    assert_true(rp_bench_median(one, 1) == 7);
    assert_true(rp_bench_median(one, 0) == 0);
    assert_true(rp_bench_median(NULL, 3) == 0);
}

static void test_precision_parse_and_texts(void **state)
{
    (void)state;
    rp_dtype p = RP_I32;
    assert_true(rp_bench_precision_parse("bf16", &p));
    assert_int_equal(p, RP_BF16);
    assert_true(rp_bench_precision_parse("f32", &p));
    assert_int_equal(p, RP_F32);
    p = RP_I32;
    assert_false(rp_bench_precision_parse("f16", &p));
    assert_false(rp_bench_precision_parse("", &p));
    assert_false(rp_bench_precision_parse("bf16 ", &p));
    assert_false(rp_bench_precision_parse(NULL, &p));
    assert_int_equal(p, RP_I32); /* untouched */

    char buf[128], want[128];
    assert_ptr_equal(rp_bench_precision_json(RP_F32, buf, sizeof buf), buf);
    assert_string_equal(buf, "\"precision\":\"f32\"");
    assert_string_equal(rp_bench_precision_text(RP_F32, buf, sizeof buf), "f32");
    snprintf(want, sizeof want, "\"precision\":\"bf16\",\"bf16_path\":\"%s\"",
             rp_kernels_bf16_path());
    assert_string_equal(rp_bench_precision_json(RP_BF16, buf, sizeof buf), want);
    snprintf(want, sizeof want, "bf16 on %s", rp_kernels_bf16_path());
    assert_string_equal(rp_bench_precision_text(RP_BF16, buf, sizeof buf), want);
    /* Cut to the buffer, never past it. */
    char small[8];
    assert_string_equal(rp_bench_precision_json(RP_F32, small, sizeof small), "\"precis");
}

/* What the replicas' tapes run with is what the replicator was made with. */
static void test_precision_ran_is_the_tapes(void **state)
{
    (void)state;
    rp_dtype want[] = {RP_F32, RP_BF16};
    for (int i = 0; i < 2; i++) {
        rp_config cfg = rp_config_default();
        cfg.backend = RP_BACKEND_THREADS;
        cfg.replicas = 1;
        cfg.threads_per_replica = 1;
        cfg.precision = want[i];
        rp_replicator *r = tu_replicator_make(&cfg);
        assert_int_equal(rp_bench_precision_ran(r), want[i]);
        rp_replicator_destroy(r);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_driver_runs_each_workers_state),
        cmocka_unit_test(test_driver_refuses_what_it_cannot_run),
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_precision_parse_and_texts),
        cmocka_unit_test(test_precision_ran_is_the_tapes),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
