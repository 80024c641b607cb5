/*
 * test_flight.c - the communicators' flight recorder (replicator/comm.h)
 * and the runtime's dumps of it (rp_replicator_set_flight_dir).
 *
 * A run where one replica calls a different collective and one where a
 * replica never arrives (the fault schedule kills it) each leave
 * flight-<worker>.txt and .jsonl for every worker, naming the last calls
 * (kind, sequence, peer/root, outcome); the ring keeps the last N calls oldest first after
 * more than N; a healthy run's entries (collectives and messages) are ok,
 * complete, with end >= start, and write no file; an invalid call is
 * recorded with its error; bad arguments are errors, not crashes.
 *
 * Assertions are made on the test's thread only: the replicas record what
 * they need in the job, read after the run.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "text_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "replicator/comm.h"

#define TIMEOUT_S 30.0 /* bounds every wait of the healthy runs */

static rp_config test_config(int n, double timeout_s)
{
    rp_config cfg = rp_config_default();
    cfg.replicas = n;
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = timeout_s;
    cfg.checksum_every = 0;
    return cfg;
}

static rp_replicator *make(const rp_config *cfg, const char *dir)
{
    rp_replicator *r = tu_replicator_make(cfg);
    assert_int_equal(rp_replicator_set_flight_dir(r, dir), RP_OK);
    return r;
}

static void assert_line(const char *text, const char *path, const char *const *needles)
{
    if (tc_line_with(text, needles)) return;
    print_error("%s has no line with", path);
    for (int i = 0; needles[i]; i++)
        print_error(" '%s'", needles[i]);
    print_error(":\n%s\n", text);
    fail();
}

/* The newest entry of worker i's data-axis ring. */
static rp_flight_entry last_entry(rp_replicator *r, int i)
{
    rp_comm *c = rp_replica_axis_comm(rp_replicator_replica(r, i), RP_AXIS_DATA);
    int held = rp_comm_flight_count(c);
    assert_true(held > 0);
    rp_flight_entry e;
    assert_int_equal(rp_comm_flight_get(c, held - 1, &e), RP_OK);
    return e;
}

/* ---- a mismatched call -------------------------------------------------------------- */

/* Two all-reduces; replica 2 makes its second call a broadcast from root 0. */
static rp_status mismatch_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    float buf[4] = {1, 2, 3, 4};
    RP_CHECK(rp_all_reduce(rep, buf, buf, 4, RP_F32, RP_SUM));
    if (rp_replica_id(rep) == 2) return rp_broadcast(rep, buf, 4, RP_F32, 0);
    return rp_all_reduce(rep, buf, buf, 4, RP_F32, RP_SUM);
}

static void test_mismatch_dumps_every_worker(void **state)
{
    (void)state;
    const int n = 3;
    rp_config cfg = test_config(n, TIMEOUT_S);
    rp_replicator *r = make(&cfg, tu_tmpdir());
    rp_status st = rp_replicator_run(r, mismatch_fn, NULL);
    assert_int_equal(st, RP_ERR_MISMATCH);
    tu_assert_error_contains("broadcast");
    /* The rings: every worker's newest call is its second, failed with the mismatch, at one
     * sequence number. */
    uint64_t seq = last_entry(r, 0).seq;
    for (int i = 0; i < n; i++) {
        rp_flight_entry e = last_entry(r, i);
        assert_int_equal(e.kind, i == 2 ? RP_FLIGHT_BROADCAST : RP_FLIGHT_ALL_REDUCE);
        assert_true(e.done);
        assert_int_equal(e.status, RP_ERR_MISMATCH);
        assert_true(e.seq == seq);
        assert_true(e.user_seq == 1);
        assert_true(e.end >= e.start);
        if (i == 2) assert_int_equal(e.peer, 0);
    }
    /* The files: one table and one JSON-lines file per worker, naming those calls and the one
     * before. */
    for (int i = 0; i < n; i++) {
        char name[64], path[512], seqs[32], prev[32];
        snprintf(name, sizeof name, "flight-%d.txt", i);
        tu_tmp_path(path, sizeof path, name);
        char *text = tc_slurp(path);
        if (!text) print_error("%s was not written\n", path);
        assert_non_null(text);
        snprintf(seqs, sizeof seqs, "  %llu  ", (unsigned long long)seq);
        snprintf(prev, sizeof prev, "  %llu  ", (unsigned long long)seq - 1);
        const char *last[] = {"MISMATCH", i == 2 ? "broadcast" : "all_reduce", seqs,
                              "user #1",  i == 2 ? "root 0" : "sum",           NULL};
        const char *before[] = {
            " ok ", "all_reduce", prev, "user #0", "count 4, f32, sum, 16 bytes", NULL};
        assert_line(text, path, last);
        assert_line(text, path, before);
        const char *header[] = {"flight recorder of replica", "broken", NULL};
        assert_line(text, path, header);
        /* Each worker's own error heads its file: the mismatch, naming both calls. */
        const char *error[] = {"ended its run with MISMATCH: ", "collective mismatch", "broadcast",
                               "all_reduce", NULL};
        assert_line(text, path, error);
        free(text);
        snprintf(name, sizeof name, "flight-%d.jsonl", i);
        tu_tmp_path(path, sizeof path, name);
        text = tc_slurp(path);
        assert_non_null(text);
        char kind[64];
        snprintf(kind, sizeof kind, "\"kind\": \"%s\", \"seq\": %llu,",
                 i == 2 ? "broadcast" : "all_reduce", (unsigned long long)seq);
        const char *json[] = {kind, "\"outcome\": \"MISMATCH\"", NULL};
        assert_line(text, path, json);
        free(text);
    }
    rp_replicator_destroy(r);
}

/* ---- a timeout ----------------------------------------------------------------------- */

/*
 * A barrier, then an all-reduce, which replica 1 never reaches: the fault
 * schedule kills it there (docs/faults.md). Its peer's timeout is then
 * certain, however slow the machine - a sleep past the timeout was not (a
 * descheduled peer could still meet the sleeper).
 */
static rp_status late_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    float buf[8] = {0};
    RP_CHECK(rp_barrier(rep));
    return rp_all_reduce(rep, buf, buf, 8, RP_F32, RP_MAX);
}

static void test_timeout_dumps_every_worker(void **state)
{
    (void)state;
    const int n = 2;
    rp_config cfg = test_config(n, 0.3);
    rp_replicator *r = make(&cfg, tu_tmpdir());
    assert_int_equal(rp_comm_faults_set("kill:worker=1,run=1,call=1", "test_flight"), RP_OK);
    rp_status st = rp_replicator_run(r, late_fn, NULL);
    assert_int_equal(rp_comm_faults_set(NULL, NULL), RP_OK);
    assert_int_equal(st, RP_ERR_TIMEOUT);
    /* Replica 0 waited its timeout in the all-reduce; replica 1's call failed once it broke. */
    rp_flight_entry e0 = last_entry(r, 0), e1 = last_entry(r, 1);
    assert_int_equal(e0.kind, RP_FLIGHT_ALL_REDUCE);
    assert_int_equal(e0.status, RP_ERR_TIMEOUT);
    assert_true(e0.end - e0.start >= 0.25);
    assert_int_equal(e1.kind, RP_FLIGHT_ALL_REDUCE);
    assert_true(e1.done && e1.status != RP_OK);
    assert_true(e0.seq == e1.seq);
    for (int i = 0; i < n; i++) {
        char name[64], path[512], seqs[32];
        snprintf(name, sizeof name, "flight-%d.txt", i);
        tu_tmp_path(path, sizeof path, name);
        char *text = tc_slurp(path);
        if (!text) print_error("%s was not written\n", path);
        assert_non_null(text);
        snprintf(seqs, sizeof seqs, "  %llu  ", (unsigned long long)e0.seq);
        const char *last[] = {i == 0 ? "TIMEOUT" : rp_status_name(e1.status),
                              "all_reduce",
                              seqs,
                              "user #1",
                              "count 8, f32, max",
                              NULL};
        const char *barrier[] = {" ok ", "barrier", "user #0", NULL};
        assert_line(text, path, last);
        assert_line(text, path, barrier);
        /* The late replica's file carries the cause too: its peer's timeout, naming it. */
        const char *error[] = {"ended its run with", "replica 1", NULL};
        assert_line(text, path, error);
        free(text);
    }
    rp_replicator_destroy(r);
}

/* ---- a healthy run ---------------------------------------------------------------------- */

/* Collectives and messages: replica 0 sends 5 floats (tag 7) blocking and 3 (tag 8) non-blocking
 * to 1. */
static rp_status healthy_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_comm *c = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    float buf[5] = {1, 2, 3, 4, 5};
    RP_CHECK(rp_all_reduce(rep, buf, buf, 5, RP_F32, RP_SUM));
    RP_CHECK(rp_broadcast(rep, buf, 5, RP_F32, 1));
    rp_comm_request *req = NULL;
    if (rp_comm_rank(c) == 0) {
        RP_CHECK(rp_comm_send(c, buf, 5, RP_F32, 1, 7));
        RP_CHECK(rp_comm_isend(c, buf, 3, RP_F32, 1, 8, &req));
    } else {
        RP_CHECK(rp_comm_recv(c, buf, 5, RP_F32, 0, 7));
        RP_CHECK(rp_comm_irecv(c, buf, 3, RP_F32, RP_ANY_SOURCE, 8, &req));
    }
    return rp_comm_wait(req);
}

static void test_healthy_run_entries(void **state)
{
    (void)state;
    rp_config cfg = test_config(2, TIMEOUT_S);
    rp_replicator *r = make(&cfg, tu_tmpdir());
    assert_int_equal(rp_replicator_run(r, healthy_fn, NULL), RP_OK);
    for (int i = 0; i < 2; i++) {
        rp_comm *c = rp_replica_axis_comm(rp_replicator_replica(r, i), RP_AXIS_DATA);
        int held = rp_comm_flight_count(c);
        assert_true(held >= 4);
        for (int k = 0; k < held; k++) {
            rp_flight_entry e;
            assert_int_equal(rp_comm_flight_get(c, k, &e), RP_OK);
            assert_true(e.done);
            assert_int_equal(e.status, RP_OK);
            assert_true(e.end >= e.start && e.start > 0);
        }
        /* The step's own calls, in order, and after them the runtime's report all-gather. */
        int first = -1;
        for (int k = 0; k < held && first < 0; k++) {
            rp_flight_entry e;
            rp_comm_flight_get(c, k, &e);
            if (e.kind == RP_FLIGHT_ALL_REDUCE && !e.internal && e.count == 5) first = k;
        }
        assert_true(first >= 0 && first + 4 <= held);
        rp_flight_entry e[5];
        for (int k = 0; k < 4; k++)
            rp_comm_flight_get(c, first + k, &e[k]);
        assert_false(e[0].internal);
        assert_string_equal(e[0].what, "");
        assert_int_equal(e[1].kind, RP_FLIGHT_BROADCAST);
        assert_int_equal(e[1].peer, 1);
        assert_true(e[1].seq == e[0].seq + 1);
        assert_int_equal(e[2].kind, i == 0 ? RP_FLIGHT_SEND : RP_FLIGHT_RECV);
        assert_int_equal(e[2].peer, i == 0 ? 1 : 0);
        assert_int_equal(e[2].tag, 7);
        assert_true(e[2].blocking && e[2].count == 5);
        assert_int_equal(e[3].kind, i == 0 ? RP_FLIGHT_SEND : RP_FLIGHT_RECV);
        assert_int_equal(e[3].peer, i == 0 ? 1 : RP_ANY_SOURCE);
        assert_int_equal(e[3].tag, 8);
        assert_true(!e[3].blocking && e[3].count == 3);
        assert_true(e[3].seq == e[2].seq + 1);
        if (first + 4 < held) {
            rp_comm_flight_get(c, first + 4, &e[4]);
            assert_true(e[4].internal);
            assert_non_null(strstr(e[4].what, "report"));
        }
    }
    /* No failure, no dump. */
    char path[512];
    struct stat sb;
    assert_int_not_equal(stat(tu_tmp_path(path, sizeof path, "flight-0.txt"), &sb), 0);
    rp_replicator_destroy(r);
}

/* ---- the ring on its own ---------------------------------------------------------------- */

static void test_ring_wraps(void **state)
{
    (void)state;
    rp_comm *c = NULL;
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, TIMEOUT_S), RP_OK);
    assert_int_equal(rp_comm_flight_set_size(c, 8), RP_OK);
    double x = 1;
    const int calls = 21;
    for (int k = 0; k < calls; k++) {
        if (k % 3 == 2)
            assert_int_equal(rp_comm_barrier(c), RP_OK);
        else
            assert_int_equal(rp_comm_all_reduce(c, &x, &x, 1, RP_F64, RP_SUM), RP_OK);
    }
    assert_int_equal(rp_comm_flight_count(c), 8);
    assert_true(rp_comm_flight_calls(c) == (uint64_t)calls);
    /* The last 8 calls, oldest first: calls 13..20, each its collective sequence number, in order.
     */
    for (int i = 0; i < 8; i++) {
        rp_flight_entry e;
        assert_int_equal(rp_comm_flight_get(c, i, &e), RP_OK);
        uint64_t k = (uint64_t)(calls - 8 + i);
        assert_true(e.call == k);
        assert_true(e.seq == k);
        assert_int_equal(e.kind, k % 3 == 2 ? RP_FLIGHT_BARRIER : RP_FLIGHT_ALL_REDUCE);
        assert_true(e.done && e.status == RP_OK && e.end >= e.start);
        if (i > 0) {
            rp_flight_entry prev;
            rp_comm_flight_get(c, i - 1, &prev);
            assert_true(e.start >= prev.end);
        }
    }
    /* Out of range and bad sizes are errors, not crashes. */
    rp_flight_entry e;
    assert_int_equal(rp_comm_flight_get(c, 8, &e), RP_ERR_INVALID);
    tu_assert_error_contains("entry 8");
    assert_int_equal(rp_comm_flight_get(c, -1, &e), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_get(NULL, 0, &e), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_set_size(c, -1), RP_ERR_INVALID);
    tu_assert_error_contains("-1");
    assert_int_equal(rp_comm_flight_set_size(c, (1 << 20) + 1), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_set_size(NULL, 4), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_dump(NULL, stderr, false), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_dump(c, NULL, false), RP_ERR_INVALID);
    /* An invalid call is recorded with its error. */
    assert_int_equal(rp_comm_flight_set_size(c, 4), RP_OK);
    assert_int_equal(rp_comm_flight_count(c), 0);
    assert_int_equal(rp_comm_all_reduce(c, &x, &x, -3, RP_F64, RP_SUM), RP_ERR_INVALID);
    assert_int_equal(rp_comm_flight_count(c), 1);
    assert_int_equal(rp_comm_flight_get(c, 0, &e), RP_OK);
    assert_true(e.done && e.status == RP_ERR_INVALID && e.count == -3);
    rp_comm_destroy(c);
}

/* Size 0 turns the recorder off; the calls still work and the dump says so. */
static void test_ring_off(void **state)
{
    (void)state;
    rp_comm *c = NULL;
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, TIMEOUT_S), RP_OK);
    assert_int_equal(rp_comm_flight_set_size(c, 0), RP_OK);
    assert_int_equal(rp_comm_barrier(c), RP_OK);
    assert_int_equal(rp_comm_flight_count(c), 0);
    char path[512];
    FILE *f = fopen(tu_tmp_path(path, sizeof path, "off.txt"), "w");
    assert_non_null(f);
    assert_int_equal(rp_comm_flight_dump(c, f, false), RP_OK);
    fclose(f);
    char *text = tc_slurp(path);
    assert_non_null(strstr(text, "the recorder is off"));
    free(text);
    rp_comm_destroy(c);
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mismatch_dumps_every_worker, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_dumps_every_worker, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_healthy_run_entries, tu_tmpdir_setup,
                                        tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_ring_wraps, tu_tmpdir_setup, tu_tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_ring_off, tu_tmpdir_setup, tu_tmpdir_teardown),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
