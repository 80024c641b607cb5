/*
 * test_fault.c - fault injection (src/comm/fault.c, rp_comm_faults_set in
 * replicator/comm.h, docs/faults.md).
 *
 * The spec parser: a valid spec's every field, and invalid specs each
 * refused with RP_ERR_INVALID naming the token at fault (the schedule in
 * force stays); a value of any length is read whole, never cut; a fault
 * aimed at a worker the job does not have is refused when the replicator is
 * created. The random form: one seed gives one schedule, another seed
 * another, at the rate asked. Then on the threads backend, through the
 * runtime (each replica records its own outcome; the test's thread checks):
 *  - a delay past the timeout fails every worker, each naming the late one;
 *  - a kill fails the peers within the timeout naming the dead worker, whose
 *    own call fails saying it was killed; every worker's flight recorder
 *    dump names the call each one failed in and the one before;
 *  - a corrupt header is a mismatch on every worker, at once (a collective
 *    and a message);
 *  - a corrupt payload passes every call check (one bit of one worker's
 *    result differs), and the parameter checksum catches what it does to
 *    synchronous training - nothing does without it;
 *  - the same seed injects the same faults into two runs;
 *  - without a schedule nothing is injected.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "text_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/fault_internal.h"
#include "replicator/comm.h"

#define MAXR 4

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

static rp_replicator *make(const rp_config *cfg)
{
    rp_replicator *r = NULL;
    rp_status st = rp_replicator_create(&r, cfg);
    if (st != RP_OK) print_error("rp_replicator_create: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_int_equal(rp_replicator_set_flight_dir(r, tu_tmpdir()), RP_OK);
    return r;
}

static void set_faults(const char *spec)
{
    rp_status st = rp_comm_faults_set(spec, "test");
    if (st != RP_OK)
        print_error("rp_comm_faults_set(\"%s\"): %s\n", spec ? spec : "(null)", rp_last_error());
    assert_int_equal(st, RP_OK);
}

static void assert_contains(const char *text, const char *needle, const char *what)
{
    if (strstr(text, needle)) return;
    print_error("%s does not contain '%s': %s\n", what, needle, text);
    fail();
}

/* ---- the spec ------------------------------------------------------------------------- */

static void test_parse_valid(void **state)
{
    (void)state;
    fault_schedule s;
    const char *spec = " seed=7; delay:worker=1,call=40,ms=300 ;kill: worker=2 , run=10;;"
                       "corrupt:worker=0,call=25,what=data;corrupt:worker=3,run=2,call=1;"
                       "delay:worker=any,p=0.01,ms=50;";
    assert_int_equal(fault_parse(spec, "RP_FAULTS", &s), RP_OK);
    assert_true(s.seed == 7);
    assert_int_equal(s.n, 5);
    assert_string_equal(s.origin, "RP_FAULTS");
    const fault_clause *f = s.f;
    assert_int_equal(f[0].kind, RP_FAULT_DELAY);
    assert_true(f[0].worker == 1 && f[0].call == 40 && f[0].run == -1 && f[0].ms == 300);
    assert_true(f[0].p == 0);
    assert_string_equal(f[0].text, "delay:worker=1,call=40,ms=300");
    assert_int_equal(f[1].kind, RP_FAULT_KILL);
    assert_true(f[1].worker == 2 && f[1].run == 10 && f[1].call == -1);
    assert_int_equal(f[2].kind, RP_FAULT_CORRUPT);
    assert_true(f[2].worker == 0 && f[2].call == 25 && f[2].data);
    assert_true(f[3].worker == 3 && f[3].run == 2 && f[3].call == 1 && !f[3].data);
    assert_int_equal(f[4].kind, RP_FAULT_DELAY);
    assert_true(f[4].worker == -1 && f[4].p == 0.01 && f[4].ms == 50 && f[4].call == -1);
    /* No seed: 0. NULL and blank specs are empty schedules. */
    assert_int_equal(fault_parse("kill:worker=0,call=0", NULL, &s), RP_OK);
    assert_true(s.seed == 0 && s.n == 1);
    assert_int_equal(fault_parse(NULL, "x", &s), RP_OK);
    assert_int_equal(s.n, 0);
    assert_int_equal(fault_parse(" ; ;", "x", &s), RP_OK);
    assert_int_equal(s.n, 0);
}

static rp_status barrier_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    return rp_barrier(rep);
}

static void test_parse_invalid_names_the_token(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *needle;
    } cases[] = {
        {"dely:worker=1,call=1", "unknown fault 'dely'"},
        {"delay:worker=1,call=x,ms=3", "call 'x' is not a whole number"},
        {"delay:worker=1,call=-1,ms=3", "call '-1'"},
        {"delay:worker=1,call=1", "a delay needs ms="},
        {"delay:worker=1,call=1,ms=99999999", "ms '99999999'"},
        {"kill:worker=1", "no call=, run= or p="},
        {"kill:call=3", "no worker="},
        {"kill:worker=one,call=3", "worker 'one'"},
        {"kill:worker=-2,call=3", "worker '-2'"},
        {"kill:worker=1,call=3,ms=5", "ms is for delay only, not kill"},
        {"delay:worker=1,call=3,ms=5,what=data", "what is for corrupt only, not delay"},
        {"corrupt:worker=1,call=3,what=bits", "what 'bits' is neither header nor data"},
        {"kill:worker=1,call=3,call=4", "call is given twice"},
        {"kill:worker=1,p=1.5", "p '1.5' is not a probability"},
        {"kill:worker=1,p=0", "p '0'"},
        {"kill:worker=1,p=0.1,call=3", "call= and p= together"},
        {"kill:worker=1,colour=3", "unknown key 'colour'"},
        {"kill:worker=1,call", "'call' is not KEY=VALUE"},
        {"kill:worker=1,call=", "call has no value"},
        {"seed=x;kill:worker=1,call=3", "seed 'x'"},
        {"seed=1;seed=2", "seed is given twice"},
        {"hello", "'hello' is neither seed=N nor"},
        {"kill:worker=1,call=3;bogus:worker=1", "unknown fault 'bogus'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fault_schedule s;
        rp_status st = fault_parse(cases[i].spec, "test-origin", &s);
        if (st != RP_ERR_INVALID) print_error("'%s' was accepted\n", cases[i].spec);
        assert_int_equal(st, RP_ERR_INVALID);
        assert_contains(rp_last_error(), cases[i].needle, cases[i].spec);
        assert_contains(rp_last_error(), "test-origin", cases[i].spec);
    }
    /* Too many faults. */
    char spec[4096] = "";
    for (int k = 0; k <= RP_FAULT_MAX_CLAUSES; k++)
        strcat(spec, "kill:worker=1,call=1;");
    fault_schedule s;
    assert_int_equal(fault_parse(spec, "o", &s), RP_ERR_INVALID);
    tu_assert_error_contains("more than 64 faults");
    /* Through the public call: refused, naming the token, and the schedule in force stays. */
    set_faults("delay:worker=0,run=1,ms=0");
    assert_int_equal(rp_comm_faults_set("delay:worker=0,run=1", "--faults"), RP_ERR_INVALID);
    tu_assert_error_contains("--faults: fault 'delay:worker=0,run=1': a delay needs ms=");
    rp_config cfg = test_config(2, 30);
    rp_replicator *r = make(&cfg);
    assert_int_equal(rp_replicator_run(r, barrier_fn, NULL), RP_OK);
    assert_true(rp_comm_faults_injected() == 1);
    rp_replicator_destroy(r);
    set_faults(NULL);
}

/*
 * A value longer than 63 characters is read whole: "ms=" with 70 zeros before the 7 is 7 ms (the
 * parser cut it to 63 zeros: 0 ms), a 70-digit seed of leading zeros is 42, and a long clause is
 * quoted in messages with a visible "...". A clause over RP_FAULT_CLAUSE_MAX is refused by its
 * length.
 */
static void test_long_values_are_not_cut(void **state)
{
    (void)state;
    char zeros[71];
    memset(zeros, '0', 70);
    zeros[70] = '\0';
    char spec[600];
    snprintf(spec, sizeof spec, "seed=%s42;delay:worker=1,call=%s3,ms=%s7", zeros, zeros, zeros);
    fault_schedule s;
    assert_int_equal(fault_parse(spec, "t", &s), RP_OK);
    assert_true(s.seed == 42);
    assert_int_equal(s.n, 1);
    assert_true(s.f[0].ms == 7 && s.f[0].call == 3 && s.f[0].worker == 1);
    size_t len = strlen(s.f[0].text);
    assert_true(len == sizeof s.f[0].text - 1);
    assert_string_equal(s.f[0].text + len - 3, "...");
    /* A 71-digit number is still too large where it is not all leading zeros. */
    snprintf(spec, sizeof spec, "delay:worker=1,call=1%s,ms=1", zeros);
    assert_int_equal(fault_parse(spec, "t", &s), RP_ERR_INVALID);
    tu_assert_error_contains("is not a whole number");
    char huge[RP_FAULT_CLAUSE_MAX + 32] = "delay:worker=1,call=1,ms=";
    while (strlen(huge) < RP_FAULT_CLAUSE_MAX + 8)
        strcat(huge, "0");
    assert_int_equal(fault_parse(huge, "t", &s), RP_ERR_INVALID);
    tu_assert_error_contains("characters (at most 511)");
}

/*
 * A fault aimed at a worker the job does not have never fired; the replicator now refuses it at
 * create, naming the fault, the worker and the job's size. worker=any and the last worker pass.
 */
static void test_faults_at_missing_workers_are_refused(void **state)
{
    (void)state;
    rp_config cfg = test_config(2, 30);
    rp_replicator *r = NULL;
    set_faults("delay:worker=any,run=1,ms=0;kill:worker=5,run=2");
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    assert_null(r);
    tu_assert_error_contains("test: fault 'kill:worker=5,run=2' is aimed at replica 5, but the job "
                             "has 2 replicas (0 to 1)");
    set_faults("kill:worker=2,run=2");
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("replica 2");
    set_faults("delay:worker=any,run=1,ms=0;delay:worker=1,run=1,ms=0");
    r = make(&cfg);
    assert_int_equal(rp_replicator_run(r, barrier_fn, NULL), RP_OK);
    assert_true(rp_comm_faults_injected() == 3); /* any: on both; 1: on the last */
    rp_replicator_destroy(r);
    set_faults(NULL);
}

/* ---- the random form --------------------------------------------------------------------- */

static void test_random_form_is_seeded(void **state)
{
    (void)state;
    fault_schedule a, b, c;
    assert_int_equal(fault_parse("seed=7;delay:worker=any,p=0.1,ms=1", "t", &a), RP_OK);
    assert_int_equal(fault_parse("seed=7;delay:worker=any,p=0.1,ms=1", "t", &b), RP_OK);
    assert_int_equal(fault_parse("seed=8;delay:worker=any,p=0.1,ms=1", "t", &c), RP_OK);
    int fired = 0, differ = 0;
    for (int w = 0; w < 4; w++)
        for (uint64_t call = 0; call < 5000; call++) {
            bool fa = fault_fires(&a, 0, w, call, 0, call);
            assert_true(fa == fault_fires(&b, 0, w, call, 0, call));
            /* Only the call counts, not the run it falls in (no run= given). */
            assert_true(fa == fault_fires(&a, 0, w, call, 3, 1));
            fired += fa;
            differ += fa != fault_fires(&c, 0, w, call, 0, call);
        }
    /* 20000 draws at p = 0.1: 2000 expected, sd 42. */
    if (fired < 1800 || fired > 2200) print_error("fired %d of 20000 at p = 0.1\n", fired);
    assert_true(fired >= 1800 && fired <= 2200);
    assert_true(differ > 1000);
    /* A worker and a run restrict it. */
    assert_int_equal(fault_parse("seed=7;kill:worker=2,run=3,p=1", "t", &a), RP_OK);
    assert_true(fault_fires(&a, 0, 2, 17, 3, 5));
    assert_false(fault_fires(&a, 0, 1, 17, 3, 5));
    assert_false(fault_fires(&a, 0, 2, 17, 4, 5));
    /* run= alone: the run's first call; with call=, the run's call-th. */
    assert_int_equal(fault_parse("kill:worker=2,run=3;kill:worker=2,run=3,call=4", "t", &a), RP_OK);
    assert_true(fault_fires(&a, 0, 2, 40, 3, 0));
    assert_false(fault_fires(&a, 0, 2, 41, 3, 1));
    assert_true(fault_fires(&a, 1, 2, 44, 3, 4));
    assert_false(fault_fires(&a, 1, 2, 4, 0, 4));
}

/* ---- the threads backend, through the runtime ------------------------------------------ */

typedef struct job {
    rp_status status[MAXR];
    double took[MAXR];
    char msg[MAXR][1200];
    float out[MAXR][64];
    int calls; /* barriers each replica makes in many_calls_fn */
} job;

static void note(job *j, rp_replica *rep, rp_status st, double t0)
{
    int id = rp_replica_id(rep);
    j->status[id] = st;
    j->took[id] = rp_now_s() - t0;
    snprintf(j->msg[id], sizeof j->msg[id], "%s", st == RP_OK ? "" : rp_last_error());
}

/* The run's call 0 is a barrier, its call 1 an all-reduce of 8 floats (max). */
static rp_status two_calls_fn(rp_replica *rep, void *arg)
{
    float buf[8] = {0};
    double t0 = rp_now_s();
    rp_status st = rp_barrier(rep);
    if (st == RP_OK) {
        t0 = rp_now_s();
        st = rp_all_reduce(rep, buf, buf, 8, RP_F32, RP_MAX);
    }
    note(arg, rep, st, t0);
    return st;
}

static rp_status run_job(const rp_config *cfg, rp_replica_fn fn, job *j, rp_replicator **out)
{
    memset(j, 0, sizeof *j);
    rp_replicator *r = make(cfg);
    rp_status st = rp_replicator_run(r, fn, j);
    if (out)
        *out = r;
    else
        rp_replicator_destroy(r);
    return st;
}

static void test_delay_past_timeout_names_late_worker(void **state)
{
    (void)state;
    set_faults("delay:worker=1,run=1,call=1,ms=1500");
    rp_config cfg = test_config(3, 0.3);
    job j;
    rp_status st = run_job(&cfg, two_calls_fn, &j, NULL);
    assert_int_equal(st, RP_ERR_TIMEOUT);
    for (int i = 0; i < 3; i++) {
        assert_int_not_equal(j.status[i], RP_OK);
        assert_contains(j.msg[i], "replica 1 did not arrive", "a worker's error");
        if (i != 1) {
            /* The others waited their timeout, not the delay. */
            assert_int_equal(j.status[i], RP_ERR_TIMEOUT);
            assert_true(j.took[i] >= 0.25 && j.took[i] < 1.4);
        }
    }
    /* The late worker's call started after the delay and met a broken communicator. */
    assert_int_equal(j.status[1], RP_ERR_COMM);
    assert_true(j.took[1] >= 1.45);
    assert_true(rp_comm_faults_injected() == 1);
    fault_event e;
    assert_int_equal(fault_events(&e, 1), 1);
    assert_true(e.kind == RP_FAULT_DELAY && e.worker == 1 && e.run == 1 && e.in_run == 1);
    set_faults(NULL);
}

/* Worker i's flight file has a line with each row's needles. */
static void assert_flight(int worker, const char *const rows[][6], int nrows)
{
    char name[64], path[512];
    snprintf(name, sizeof name, "flight-%d.txt", worker);
    tu_tmp_path(path, sizeof path, name);
    char *text = tc_slurp(path);
    if (!text) print_error("%s was not written\n", path);
    assert_non_null(text);
    for (int k = 0; k < nrows; k++)
        if (!tc_line_with(text, rows[k])) {
            print_error("%s has no line with '%s' '%s' '%s':\n%s\n", path, rows[k][0],
                        rows[k][1] ? rows[k][1] : "", rows[k][1] && rows[k][2] ? rows[k][2] : "",
                        text);
            fail();
        }
    free(text);
}

static void test_kill_fails_peers_naming_dead_worker(void **state)
{
    (void)state;
    set_faults("kill:worker=2,run=1,call=1");
    rp_config cfg = test_config(3, 0.5);
    job j;
    rp_replicator *r = NULL;
    rp_status st = run_job(&cfg, two_calls_fn, &j, &r);
    assert_int_equal(st, RP_ERR_TIMEOUT);
    for (int i = 0; i < 2; i++) {
        /* Within the timeout (and a margin for a loaded machine), naming the dead worker. */
        assert_int_equal(j.status[i], RP_ERR_TIMEOUT);
        if (!(j.took[i] >= 0.45 && j.took[i] < 2.5)) {
            print_error("replica %d failed after %.3f s (timeout 0.5 s)\n", i, j.took[i]);
            fail();
        }
        assert_contains(j.msg[i], "replica 2 did not arrive", "a survivor's error");
    }
    /* The dead worker's call never arrived; it returned once its peers had given up. */
    assert_int_equal(j.status[2], RP_ERR_COMM);
    assert_contains(j.msg[2], "killed by an injected fault (test)", "the dead worker's error");
    assert_true(j.took[2] >= 0.45 && j.took[2] < 2.5);
    /* Every worker's flight recorder names the all-reduce it failed in and the barrier before. */
    for (int i = 0; i < 3; i++) {
        const char *const rows[][6] = {
            {"all_reduce", "user #1", "count 8, f32, max", i == 2 ? "COMM" : "TIMEOUT", NULL},
            {"barrier", "user #0", " ok ", NULL},
            {"ended its run with", i == 2 ? "killed by an injected fault" : "replica 2", NULL},
        };
        assert_flight(i, rows, 3);
    }
    /* A dead worker stays dead: its next run fails at once, as do its peers'. */
    double t0 = rp_now_s();
    assert_int_not_equal(rp_replicator_run(r, two_calls_fn, &j), RP_OK);
    assert_true(rp_now_s() - t0 < 2.0);
    assert_int_equal(j.status[2], RP_ERR_COMM);
    assert_contains(j.msg[2], "killed by an injected fault", "the dead worker's next error");
    assert_true(rp_comm_faults_injected() == 1);
    rp_replicator_destroy(r);
    set_faults(NULL);
}

static void test_corrupt_header_is_a_mismatch(void **state)
{
    (void)state;
    set_faults("corrupt:worker=1,run=1,call=1");
    rp_config cfg = test_config(3, 30);
    job j;
    rp_status st = run_job(&cfg, two_calls_fn, &j, NULL);
    assert_int_equal(st, RP_ERR_MISMATCH);
    for (int i = 0; i < 3; i++) {
        /* Every worker, at once (the timeout is 30 s), naming both calls and the odd worker. */
        assert_int_equal(j.status[i], RP_ERR_MISMATCH);
        assert_true(j.took[i] < 5.0);
        assert_contains(j.msg[i], "replica 1 called all_reduce #1 (count 7, f32, max)",
                        "a worker's error");
        assert_contains(j.msg[i], "all_reduce #1 (count 8, f32, max)", "a worker's error");
    }
    /* A barrier has no count: its dtype changes instead, and that is caught too. */
    set_faults("corrupt:worker=2,run=1,call=0");
    st = run_job(&cfg, two_calls_fn, &j, NULL);
    assert_int_equal(st, RP_ERR_MISMATCH);
    for (int i = 0; i < 3; i++)
        assert_int_equal(j.status[i], RP_ERR_MISMATCH);
    set_faults(NULL);
}

/* Replica 0 sends 5 floats to replica 1. */
static rp_status message_fn(rp_replica *rep, void *arg)
{
    rp_comm *c = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    float buf[5] = {1, 2, 3, 4, 5};
    double t0 = rp_now_s();
    rp_status st = rp_comm_rank(c) == 0 ? rp_comm_send(c, buf, 5, RP_F32, 1, 7)
                                        : rp_comm_recv(c, buf, 5, RP_F32, 0, 7);
    note(arg, rep, st, t0);
    return st;
}

static void test_corrupt_message_header_is_a_mismatch(void **state)
{
    (void)state;
    set_faults("corrupt:worker=0,run=1");
    rp_config cfg = test_config(2, 30);
    job j;
    rp_status st = run_job(&cfg, message_fn, &j, NULL);
    assert_int_equal(st, RP_ERR_MISMATCH);
    assert_int_equal(j.status[1], RP_ERR_MISMATCH);
    assert_true(j.took[1] < 5.0);
    assert_contains(j.msg[1], "replica 0 sent 'send #0 (tag 7, count 4, f32)' to replica 1",
                    "the receiver's error");
    assert_contains(j.msg[1], "count 5", "the receiver's error");
    set_faults(NULL);
}

/* Each replica all-reduces (sum) 64 floats of its own: element k of replica i is i + k/64. */
static rp_status payload_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    int id = rp_replica_id(rep);
    for (int k = 0; k < 64; k++)
        j->out[id][k] = (float)id + (float)k / 64;
    double t0 = rp_now_s();
    rp_status st = rp_barrier(rep);
    if (st == RP_OK) st = rp_all_reduce(rep, j->out[id], j->out[id], 64, RP_F32, RP_SUM);
    note(j, rep, st, t0);
    return st;
}

static int bits_differing(const float *a, const float *b, int n)
{
    int bits = 0;
    const unsigned char *x = (const void *)a, *y = (const void *)b;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++)
        bits += __builtin_popcount((unsigned)(x[i] ^ y[i]));
    return bits;
}

static void test_corrupt_payload_passes_the_checks(void **state)
{
    (void)state;
    set_faults("seed=3;corrupt:worker=1,run=1,call=1,what=data");
    rp_config cfg = test_config(3, 30);
    job j;
    rp_status st = run_job(&cfg, payload_fn, &j, NULL);
    /* Nothing notices: the calls matched, and the data is not what the header check compares. */
    assert_int_equal(st, RP_OK);
    float want[64];
    for (int k = 0; k < 64; k++)
        want[k] = ((0.0f + (float)k / 64) + (1.0f + (float)k / 64)) + (2.0f + (float)k / 64);
    assert_memory_equal(j.out[0], want, sizeof want);
    assert_memory_equal(j.out[2], want, sizeof want);
    assert_int_equal(bits_differing(j.out[1], want, 64), 1);
    assert_true(rp_comm_faults_injected() == 1);
    set_faults(NULL);
}

/* ---- the parameter checksum catches a corrupt gradient --------------------------------- */

typedef struct sync_state {
    rp_params *params;
    rp_linear_layer fc;
    rp_optimizer *opt;
} sync_state;

typedef struct sync_job {
    sync_state st[MAXR];
    int step;
} sync_job;

static rp_status sync_build(rp_replica *rep, void *arg)
{
    sync_job *j = arg;
    sync_state *s = &j->st[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->params));
    RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc", 4, 3, true, false));
    RP_CHECK(rp_params_finalize(s->params, 11));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0;
    return rp_replica_optimizer_create(rep, &s->opt, s->params, &oc);
}

/* One step of a linear classifier on replica-specific data; its first call is the gradient's. */
static rp_status sync_step(rp_replica *rep, void *arg)
{
    sync_job *j = arg;
    sync_state *s = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *x = rp_tensor_new(t, 2, (int[]){4, 4});
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), 4 * sizeof(int32_t));
    if (!x || !y) return rp_last_status();
    float xs[16];
    tu_fill(xs, 16, (uint64_t)(100 * j->step + rp_replica_id(rep) + 1), -1.0f, 1.0f);
    RP_CHECK(rp_tensor_write(x, xs, 16));
    for (int k = 0; k < 4; k++)
        y[k] = (k + rp_replica_id(rep)) % 3;
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &s->fc, x), y);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(s->opt, 0.1f);
}

static rp_status sync_teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    sync_state *s = rp_replica_user(rep);
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->params);
    return RP_OK;
}

/*
 * Two steps with a bit of worker 1's all-reduced gradient flipped in the
 * second (run 3, after the build's run 1); returns the second step's status
 * and whether the replicas' parameters differ after it.
 */
static rp_status corrupt_gradient(int checksum_every, bool *diverged)
{
    /* Seed 1 flips a high bit: the update differs beyond rounding (docs/faults.md). */
    set_faults("seed=1;corrupt:worker=1,run=3,what=data");
    rp_config cfg = test_config(2, 30);
    cfg.checksum_every = checksum_every;
    rp_replicator *r = make(&cfg);
    sync_job *j = calloc(1, sizeof *j);
    assert_int_equal(rp_replicator_run(r, sync_build, j), RP_OK);
    assert_int_equal(rp_replicator_run(r, sync_step, j), RP_OK);
    j->step = 1;
    rp_status st = rp_replicator_run(r, sync_step, j);
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    /* The value blocks are the kernel table's storage: compared through host copies. */
    int64_t n = rp_params_numel(j->st[0].params);
    float *v0 = malloc((size_t)n * sizeof(float)), *v1 = malloc((size_t)n * sizeof(float));
    assert_non_null(v0);
    assert_non_null(v1);
    assert_int_equal(rp_params_read_values(j->st[0].params, v0), RP_OK);
    assert_int_equal(rp_params_read_values(j->st[1].params, v1), RP_OK);
    *diverged = memcmp(v0, v1, (size_t)n * sizeof(float)) != 0;
    free(v0);
    free(v1);
    assert_true(rp_comm_faults_injected() == 1);
    rp_replicator_run(r, sync_teardown, j);
    rp_replicator_destroy(r);
    free(j);
    set_faults(NULL);
    if (st != RP_OK) rp_error_set(st, NULL, 0, "%s", msg);
    return st;
}

static void test_checksum_catches_corrupt_gradient(void **state)
{
    (void)state;
    bool diverged = false;
    rp_status st = corrupt_gradient(1, &diverged);
    if (st != RP_ERR_MISMATCH) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_ERR_MISMATCH);
    tu_assert_error_contains("differs from replica 0");
    assert_true(diverged);
    /* Without the checksum the same fault goes unnoticed: the replicas silently differ. */
    diverged = false;
    st = corrupt_gradient(0, &diverged);
    if (st != RP_OK) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_true(diverged);
}

/* ---- one seed, one schedule ------------------------------------------------------------- */

static rp_status many_calls_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    for (int k = 0; k < j->calls; k++)
        RP_CHECK(rp_barrier(rep));
    return RP_OK;
}

static int by_worker_call(const void *a, const void *b)
{
    const fault_event *x = a, *y = b;
    if (x->worker != y->worker) return x->worker - y->worker;
    return x->call < y->call ? -1 : x->call > y->call;
}

/* The faults a 3-worker job of 40 barriers gets from `spec`, sorted by worker and call. */
static int injected_by(const char *spec, fault_event *ev, int max)
{
    set_faults(spec);
    rp_config cfg = test_config(3, 30);
    rp_replicator *r = make(&cfg);
    job *j = calloc(1, sizeof *j);
    j->calls = 40;
    assert_int_equal(rp_replicator_run(r, many_calls_fn, j), RP_OK);
    rp_replicator_destroy(r);
    free(j);
    int n = fault_events(ev, max);
    qsort(ev, (size_t)n, sizeof *ev, by_worker_call);
    return n;
}

static void test_same_seed_same_faults(void **state)
{
    (void)state;
    static fault_event a[RP_FAULT_EVENTS], b[RP_FAULT_EVENTS], c[RP_FAULT_EVENTS];
    const char *spec = "seed=11;delay:worker=any,run=1,p=0.25,ms=0";
    int na = injected_by(spec, a, RP_FAULT_EVENTS);
    int nb = injected_by(spec, b, RP_FAULT_EVENTS);
    int nc = injected_by("seed=12;delay:worker=any,run=1,p=0.25,ms=0", c, RP_FAULT_EVENTS);
    /* About a quarter of 3 x 40 calls (and the run's report gather), the same in both runs. */
    assert_true(na >= 15 && na <= 50);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
        assert_true(a[i].worker == b[i].worker && a[i].call == b[i].call);
        assert_true(a[i].run == 1);
    }
    bool same = na == nc;
    for (int i = 0; same && i < na; i++)
        same = a[i].worker == c[i].worker && a[i].call == c[i].call;
    assert_false(same);
    set_faults(NULL);
}

/* ---- without a schedule ------------------------------------------------------------------ */

static void test_no_schedule_injects_nothing(void **state)
{
    (void)state;
    set_faults("");
    rp_config cfg = test_config(2, 30);
    job j;
    assert_int_equal(run_job(&cfg, two_calls_fn, &j, NULL), RP_OK);
    assert_true(rp_comm_faults_injected() == 0);
    set_faults(NULL);
}

static int setup(void **state)
{
    (void)state;
    return tu_tmpdir_create("fault");
}

static int teardown(void **state)
{
    (void)state;
    rp_comm_faults_set(NULL, NULL);
    tu_tmpdir_remove();
    return 0;
}

int main(void)
{
    rp_log_set_level(RP_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test_setup_teardown(test_parse_invalid_names_the_token, setup, teardown),
        cmocka_unit_test(test_long_values_are_not_cut),
        cmocka_unit_test_setup_teardown(test_faults_at_missing_workers_are_refused, setup,
                                        teardown),
        cmocka_unit_test(test_random_form_is_seeded),
        cmocka_unit_test_setup_teardown(test_delay_past_timeout_names_late_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_fails_peers_naming_dead_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_header_is_a_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_message_header_is_a_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_payload_passes_the_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checksum_catches_corrupt_gradient, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_seed_same_faults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_schedule_injects_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
