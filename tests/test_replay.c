/*
 * test_replay.c - experience replay: N-step assembly against hand-computed
 * transitions, uniform and prioritised sampling against their distributions
 * (chi-square), FIFO eviction, importance weights, priority updates and
 * stale keys, Reverb's rate-limiter rules and the blocking gate between an
 * actor and a learner thread, checkpoint round trips, and the speed of a
 * 1e6-item table.
 *
 * Chi-square tolerance: with k cells the statistic has mean k-1 and
 * standard deviation sqrt(2(k-1)); every test accepts mean + 6 sd, which a
 * correct sampler exceeds with probability below 1e-6 (the seeds are fixed,
 * so the outcome is the same every run), while a sampler that is off by a
 * few per cent in one cell at 200k draws lands far above it.
 */
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replicator/io.h"
#include "replicator/replay.h"
#include "rl/sumtree.h"

/* ---- N-step ------------------------------------------------------------------------ */

typedef struct expect_tr {
    float obs, act, reward, discount, next_obs;
} expect_tr;

static void check_tr(const rp_transition *t, const expect_tr *e, const char *what, int i)
{
    if (fabsf(t->obs[0] - e->obs) > 0 || fabsf(t->act[0] - e->act) > 0 ||
        fabsf(t->next_obs[0] - e->next_obs) > 0 ||
        fabsf(t->reward - e->reward) > 1e-6f * fmaxf(1.0f, fabsf(e->reward)) ||
        fabsf(t->discount - e->discount) > 1e-6f) {
        print_error("%s #%d: got (s %g, a %g, R %.7g, D %.7g, s' %g), expected (s %g, a %g, R "
                    "%.7g, D %.7g, s' %g)\n",
                    what, i, t->obs[0], t->act[0], t->reward, t->discount, t->next_obs[0], e->obs,
                    e->act, e->reward, e->discount, e->next_obs);
        fail();
    }
}

/*
 * Runs one episode s_0 = 10, s_t = 10 + t, a_t = 100 + t, rewards r[t], env
 * discounts d[t], through an adder and checks every transition against
 * `want` in order, and the count written at each step against `per_step`.
 */
static void run_episode(rp_nstep *a, int steps, const float *r, const float *d, bool last_at_end,
                        const int *per_step, const expect_tr *want, int nwant, const char *what)
{
    float s0 = 10.0f;
    assert_int_equal(rp_nstep_start(a, &s0), RP_OK);
    rp_transition out[8];
    int got = 0;
    for (int t = 0; t < steps; t++) {
        float act = 100.0f + (float)t, next = 10.0f + (float)(t + 1);
        int n_out = -1;
        assert_int_equal(
            rp_nstep_add(a, &act, r[t], d[t], &next, last_at_end && t == steps - 1, out, 8, &n_out),
            RP_OK);
        if (n_out != per_step[t]) {
            print_error("%s: step %d wrote %d transitions, expected %d\n", what, t, n_out,
                        per_step[t]);
            fail();
        }
        for (int k = 0; k < n_out; k++, got++) {
            assert_true(got < nwant);
            check_tr(&out[k], &want[got], what, got);
        }
    }
    assert_int_equal(got, nwant);
}

static void test_nstep_truncation_and_terminal(void **state)
{
    (void)state;
    rp_nstep *a = NULL;
    assert_int_equal(rp_nstep_create(&a, 3, 0.9f, 1, 1), RP_OK);
    /* Powers of ten: every term of every return is visible in its digits. */
    const float r[5] = {1, 10, 100, 1000, 10000};
    const float ones[5] = {1, 1, 1, 1, 1};
    const int per[5] = {0, 0, 1, 1, 3};
    /* Truncation at T = 5 (d = 1): the last two bootstrap from s_5 with 0.9^2 and 0.9. */
    const expect_tr trunc[5] = {
        {10, 100, 1 + 9 + 81, 0.729f, 13},       /* 1 + .9*10 + .81*100 */
        {11, 101, 10 + 90 + 810, 0.729f, 14},    /* 10 + .9*100 + .81*1000 */
        {12, 102, 100 + 900 + 8100, 0.729f, 15}, /* 100 + .9*1000 + .81*10000 */
        {13, 103, 1000 + 9000, 0.81f, 15},       /* n' = 2 */
        {14, 104, 10000, 0.9f, 15},              /* n' = 1 */
    };
    run_episode(a, 5, r, ones, true, per, trunc, 5, "truncation");

    /* The same episode ending in a terminal (d = 0 at the last step): no bootstrap. */
    const float dterm[5] = {1, 1, 1, 1, 0};
    const expect_tr term[5] = {
        {10, 100, 91, 0.729f, 13},  {11, 101, 910, 0.729f, 14}, {12, 102, 9100, 0.0f, 15},
        {13, 103, 10000, 0.0f, 15}, {14, 104, 10000, 0.0f, 15},
    };
    run_episode(a, 5, r, dterm, true, per, term, 5, "terminal");

    /* An env discount of 0.5 at step 1 scales the terms after it and the bootstrap. */
    const float dhalf[5] = {1, 0.5f, 1, 1, 1};
    const expect_tr half[5] = {
        {10, 100, 1 + 9 + 0.5f * 81, 0.729f * 0.5f, 13},
        {11, 101, 10 + 0.5f * 90 + 0.5f * 810, 0.729f * 0.5f, 14},
        {12, 102, 9100, 0.729f, 15},
        {13, 103, 10000, 0.81f, 15},
        {14, 104, 10000, 0.9f, 15},
    };
    run_episode(a, 5, r, dhalf, true, per, half, 5, "discount 0.5");

    /* Adding after the end without a new start is refused. */
    float x = 0, out_obs = 0;
    rp_transition out[8];
    int n_out = 0;
    assert_int_equal(rp_nstep_add(a, &x, 0, 1, &out_obs, false, out, 8, &n_out), RP_ERR_INVALID);
    /* max_out below n, a discount outside [0, 1], a NaN reward. */
    assert_int_equal(rp_nstep_start(a, &x), RP_OK);
    assert_int_equal(rp_nstep_add(a, &x, 0, 1, &out_obs, false, out, 2, &n_out), RP_ERR_INVALID);
    assert_int_equal(rp_nstep_add(a, &x, 0, 1.5f, &out_obs, false, out, 8, &n_out), RP_ERR_INVALID);
    assert_int_equal(rp_nstep_add(a, &x, NAN, 1, &out_obs, false, out, 8, &n_out), RP_ERR_NUMERIC);
    rp_nstep_destroy(a);
}

static void test_nstep_one_step_and_restart(void **state)
{
    (void)state;
    rp_nstep *a = NULL;
    assert_int_equal(rp_nstep_create(&a, 1, 0.9f, 1, 1), RP_OK);
    const float r[4] = {1, 10, 100, 1000};
    const float d[4] = {1, 1, 1, 0};
    const int per[4] = {1, 1, 1, 1};
    const expect_tr one[4] = {{10, 100, 1, 0.9f, 11},
                              {11, 101, 10, 0.9f, 12},
                              {12, 102, 100, 0.9f, 13},
                              {13, 103, 1000, 0.0f, 14}};
    run_episode(a, 4, r, d, true, per, one, 4, "n=1");
    rp_nstep_destroy(a);

    /* Restart mid-episode: two steps pending are dropped, the new episode starts clean. */
    assert_int_equal(rp_nstep_create(&a, 3, 0.9f, 1, 1), RP_OK);
    float s = 50, act = 7, next = 51;
    rp_transition out[8];
    int n_out = -1;
    assert_int_equal(rp_nstep_start(a, &s), RP_OK);
    for (int t = 0; t < 2; t++) {
        assert_int_equal(rp_nstep_add(a, &act, 12345.0f, 1, &next, false, out, 8, &n_out), RP_OK);
        assert_int_equal(n_out, 0);
    }
    const float r2[4] = {1, 10, 100, 1000};
    const float d2[4] = {1, 1, 1, 1};
    const int per2[4] = {0, 0, 1, 1};
    const expect_tr fresh[2] = {{10, 100, 91, 0.729f, 13}, {11, 101, 910, 0.729f, 14}};
    run_episode(a, 4, r2, d2, false, per2, fresh, 2, "restart");
    rp_nstep_destroy(a);
}

/* A short episode (2 steps < n = 3) writes both at `last`, with n' = 2 and 1. */
static void test_nstep_short_episode(void **state)
{
    (void)state;
    rp_nstep *a = NULL;
    assert_int_equal(rp_nstep_create(&a, 3, 0.5f, 1, 1), RP_OK);
    const float r[2] = {1, 10};
    const float d[2] = {1, 1};
    const int per[2] = {0, 2};
    const expect_tr want[2] = {{10, 100, 1 + 5, 0.25f, 12}, {11, 101, 10, 0.5f, 12}};
    run_episode(a, 2, r, d, true, per, want, 2, "short");
    rp_nstep_destroy(a);
}

/* ---- the replay: helpers --------------------------------------------------------------- */

#define OD 3
#define AD 2

/* Item `key` has obs = key + {0, .1, .2}, act = -key - {0, .5}, next_obs = obs + 1000. */
static void make_item(int64_t key, float *obs, float *act, float *next, rp_transition *t)
{
    for (int i = 0; i < OD; i++)
        obs[i] = (float)key + 0.1f * (float)i;
    for (int i = 0; i < AD; i++)
        act[i] = -(float)key - 0.5f * (float)i;
    for (int i = 0; i < OD; i++)
        next[i] = obs[i] + 1000.0f;
    t->obs = obs;
    t->act = act;
    t->next_obs = next;
    t->reward = (float)key * 2.0f;
    t->discount = 0.99f;
}

static void insert_items(rp_replay *r, int64_t first, int64_t count, float priority)
{
    for (int64_t k = first; k < first + count; k++) {
        float obs[OD], act[AD], next[OD];
        rp_transition t;
        make_item(k, obs, act, next, &t);
        assert_int_equal(rp_replay_insert(r, &t, 1, priority), RP_OK);
    }
}

/* Row i of b is exactly the item of its key. */
static void check_row(const rp_replay_batch *b, int i)
{
    float obs[OD], act[AD], next[OD];
    rp_transition t;
    make_item(b->keys[i], obs, act, next, &t);
    assert_memory_equal(b->obs + i * OD, obs, sizeof obs);
    assert_memory_equal(b->act + i * AD, act, sizeof act);
    assert_memory_equal(b->next_obs + i * OD, next, sizeof next);
    assert_true(b->reward[i] == t.reward && b->discount[i] == t.discount);
}

static rp_replay *make_replay(int64_t capacity, bool prioritized)
{
    rp_replay_config c = rp_replay_config_default();
    c.capacity = capacity;
    c.obs_dim = OD;
    c.act_dim = AD;
    c.prioritized = prioritized;
    rp_replay *r = NULL;
    assert_int_equal(rp_replay_create(&r, &c), RP_OK);
    return r;
}

/* Chi-square of counts[k] against probabilities p[k] over `total` draws. */
static double chi_square(const int64_t *counts, const double *p, int k, int64_t total)
{
    double chi = 0;
    for (int i = 0; i < k; i++) {
        double e = p[i] * (double)total;
        if (e > 0) chi += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
    }
    return chi;
}

static double chi_bound(int cells)
{
    return (cells - 1) + 6.0 * sqrt(2.0 * (cells - 1));
}

/* ---- uniform --------------------------------------------------------------------------- */

static void test_config_errors(void **state)
{
    (void)state;
    rp_replay_config c = rp_replay_config_default();
    assert_int_equal(c.capacity, 1000000);
    assert_false(c.prioritized);
    assert_true(c.priority_exponent == 0.6f && c.importance_exponent == 0.4f);
    rp_replay *r = NULL;
    assert_int_equal(rp_replay_create(&r, &c), RP_ERR_INVALID); /* dims 0 */
    tu_assert_error_contains("obs_dim");
    c.obs_dim = 3;
    c.act_dim = 1;
    c.capacity = 0;
    assert_int_equal(rp_replay_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("capacity");
    c.capacity = 10;
    c.priority_exponent = NAN;
    assert_int_equal(rp_replay_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("alpha");
    c.priority_exponent = 0.6f;
    c.capacity = ((int64_t)1 << 30) + 5; /* ~1e9 items of 8 floats: refused naming the bytes */
    c.obs_dim = 1000;
    c.act_dim = 1000;
    rp_status s = rp_replay_create(&r, &c);
    if (s == RP_ERR_NOMEM)
        tu_assert_error_contains("bytes");
    else
        rp_replay_destroy(r); /* an overcommitting kernel may grant it untouched */
    r = NULL;

    r = make_replay(4, false);
    rp_replay_batch b;
    assert_int_equal(rp_replay_batch_alloc(&b, 8, OD, AD), RP_OK);
    rp_rng rng = rp_rng_make(1, 0);
    assert_int_equal(rp_replay_sample(r, &rng, 8, &b), RP_ERR_INVALID); /* empty */
    tu_assert_error_contains("empty");
    insert_items(r, 0, 2, 0);
    rp_replay_batch wrong;
    assert_int_equal(rp_replay_batch_alloc(&wrong, 8, OD + 1, AD), RP_OK);
    assert_int_equal(rp_replay_sample(r, &rng, 8, &wrong), RP_ERR_INVALID);
    tu_assert_error_contains("dims");
    assert_int_equal(rp_replay_sample(r, &rng, 9, &b), RP_ERR_INVALID);
    rp_replay_batch_free(&wrong);
    rp_replay_batch_free(&b);
    rp_replay_destroy(r);
}

static void test_uniform_sampling_and_fifo(void **state)
{
    (void)state;
    enum { CAP = 50, BATCH = 1000, ROUNDS = 200 };
    rp_replay *r = make_replay(CAP, false);
    insert_items(r, 0, CAP + 30, 0); /* keys 0..79; 30..79 held */
    assert_int_equal(rp_replay_size(r), CAP);
    assert_int_equal(rp_replay_inserted(r), CAP + 30);
    rp_transition t;
    float prio = 0;
    assert_int_equal(rp_replay_get(r, 29, &t, &prio), RP_ERR_INVALID); /* the oldest are gone */
    assert_int_equal(rp_replay_get(r, 30, &t, &prio), RP_OK);
    assert_true(t.obs[0] == 30.0f && t.next_obs[0] == 1030.0f && prio == 1.0f);

    rp_replay_batch b;
    assert_int_equal(rp_replay_batch_alloc(&b, BATCH, OD, AD), RP_OK);
    rp_rng rng = rp_rng_make(7, 0);
    int64_t counts[CAP] = {0};
    uint64_t allocs = rp_alloc_count();
    for (int round = 0; round < ROUNDS; round++) {
        assert_int_equal(rp_replay_sample(r, &rng, BATCH, &b), RP_OK);
        for (int i = 0; i < BATCH; i++) {
            assert_true(b.keys[i] >= 30 && b.keys[i] < 80);
            assert_true(b.weights[i] == 1.0f);
            counts[b.keys[i] - 30]++;
            if (round == 0) check_row(&b, i);
        }
    }
    assert_int_equal(rp_alloc_count(), allocs); /* sampling allocates nothing */
    double p[CAP];
    for (int i = 0; i < CAP; i++)
        p[i] = 1.0 / CAP;
    double chi = chi_square(counts, p, CAP, (int64_t)BATCH * ROUNDS);
    print_message("uniform: chi-square %.1f over %d cells (bound %.1f)\n", chi, CAP,
                  chi_bound(CAP));
    assert_true(chi < chi_bound(CAP));
    rp_replay_batch_free(&b);
    rp_replay_destroy(r);
}

/* ---- prioritised ---------------------------------------------------------------------- */

/* Draws `total` rows and counts them per key - first. */
static void draw_counts(rp_replay *r, rp_rng *rng, rp_replay_batch *b, int64_t first, int cells,
                        int64_t *counts, int rounds)
{
    memset(counts, 0, (size_t)cells * sizeof *counts);
    for (int round = 0; round < rounds; round++) {
        assert_int_equal(rp_replay_sample(r, rng, b->n, b), RP_OK);
        for (int i = 0; i < b->n; i++) {
            int64_t c = b->keys[i] - first;
            assert_true(c >= 0 && c < cells);
            counts[c]++;
        }
    }
}

static void test_prioritized_frequencies_and_updates(void **state)
{
    (void)state;
    /* 10 of a capacity of 13 (a tree of 16 leaves, so padding leaves exist), alpha 0.6. */
    enum { CAP = 13, N = 10, BATCH = 1000, ROUNDS = 200 };
    rp_replay *r = make_replay(CAP, true);
    const float prio[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for (int k = 0; k < N; k++)
        insert_items(r, k, 1, prio[k]);
    rp_replay_batch b;
    assert_int_equal(rp_replay_batch_alloc(&b, BATCH, OD, AD), RP_OK);
    rp_rng rng = rp_rng_make(11, 3);

    double p[N], sum = 0;
    for (int k = 0; k < N; k++)
        sum += pow(prio[k], 0.6);
    for (int k = 0; k < N; k++)
        p[k] = pow(prio[k], 0.6) / sum;
    int64_t counts[N + 1];
    draw_counts(r, &rng, &b, 0, N, counts, ROUNDS);
    double chi = chi_square(counts, p, N, (int64_t)BATCH * ROUNDS);
    print_message("prioritised: chi-square %.1f over %d cells (bound %.1f)\n", chi, N,
                  chi_bound(N));
    assert_true(chi < chi_bound(N));

    /* Importance weights of the last batch: (N P(i))^-0.4 / max over the batch. */
    double wmax = 0;
    for (int i = 0; i < BATCH; i++)
        wmax = fmax(wmax, pow(N * p[b.keys[i]], -0.4));
    for (int i = 0; i < BATCH; i++) {
        double want = pow(N * p[b.keys[i]], -0.4) / wmax;
        assert_true(fabs(b.weights[i] - want) < 1e-5);
        check_row(&b, i);
    }

    /* Reverse the priorities: the frequencies follow, and fail the old expectation. */
    int64_t keys[N];
    float newp[N];
    for (int k = 0; k < N; k++)
        keys[k] = k, newp[k] = prio[N - 1 - k];
    assert_int_equal(rp_replay_update_priorities(r, keys, newp, N), RP_OK);
    double q[N];
    for (int k = 0; k < N; k++)
        q[k] = p[N - 1 - k];
    draw_counts(r, &rng, &b, 0, N, counts, ROUNDS);
    double chi_new = chi_square(counts, q, N, (int64_t)BATCH * ROUNDS);
    double chi_old = chi_square(counts, p, N, (int64_t)BATCH * ROUNDS);
    print_message("after update: chi-square %.1f against the new priorities, %.1f against the "
                  "old\n",
                  chi_new, chi_old);
    assert_true(chi_new < chi_bound(N));
    assert_true(chi_old > 100 * chi_bound(N));

    /* Priority 0: never drawn. Insert with priority <= 0: the largest seen (10). */
    float zero = 0;
    int64_t k0 = 0;
    assert_int_equal(rp_replay_update_priorities(r, &k0, &zero, 1), RP_OK);
    insert_items(r, N, 1, -1.0f);
    float got = 0;
    rp_transition t;
    assert_int_equal(rp_replay_get(r, N, &t, &got), RP_OK);
    assert_true(got == 10.0f);
    draw_counts(r, &rng, &b, 0, N + 1, counts, 20);
    assert_int_equal(counts[0], 0);
    assert_true(counts[N] > 0);

    rp_replay_batch_free(&b);
    rp_replay_destroy(r);
}

static void test_priority_errors_and_stale_keys(void **state)
{
    (void)state;
    rp_replay *r = make_replay(4, true);
    insert_items(r, 0, 6, 1.0f); /* keys 2..5 held */
    float p2 = 0;
    rp_transition t;
    /* Evicted key 1: ignored without error (its slot now holds key 5, which keeps its priority). */
    int64_t stale = 1;
    float big = 100.0f;
    assert_int_equal(rp_replay_update_priorities(r, &stale, &big, 1), RP_OK);
    assert_int_equal(rp_replay_get(r, 5, &t, &p2), RP_OK);
    assert_true(p2 == 1.0f);
    /* A key never issued. */
    int64_t future = 6;
    assert_int_equal(rp_replay_update_priorities(r, &future, &big, 1), RP_ERR_INVALID);
    tu_assert_error_contains("key 6");
    /* NaN and negative priorities are refused naming the key, and nothing changes. */
    int64_t keys[2] = {3, 4};
    float bad[2] = {5.0f, NAN};
    assert_int_equal(rp_replay_update_priorities(r, keys, bad, 2), RP_ERR_NUMERIC);
    tu_assert_error_contains("key 4");
    assert_int_equal(rp_replay_get(r, 3, &t, &p2), RP_OK);
    assert_true(p2 == 1.0f); /* the valid first row was not applied either */
    bad[1] = -1.0f;
    assert_int_equal(rp_replay_update_priorities(r, keys, bad, 2), RP_ERR_NUMERIC);
    float inf = INFINITY;
    assert_int_equal(rp_replay_update_priorities(r, keys, &inf, 1), RP_ERR_NUMERIC);
    /* All priorities 0: sampling says so. */
    int64_t all[4] = {2, 3, 4, 5};
    float zeros[4] = {0, 0, 0, 0};
    assert_int_equal(rp_replay_update_priorities(r, all, zeros, 4), RP_OK);
    rp_replay_batch b;
    assert_int_equal(rp_replay_batch_alloc(&b, 4, OD, AD), RP_OK);
    rp_rng rng = rp_rng_make(2, 0);
    assert_int_equal(rp_replay_sample(r, &rng, 4, &b), RP_ERR_INVALID);
    tu_assert_error_contains("priority 0");
    rp_replay_batch_free(&b);
    rp_replay_destroy(r);
}

/*
 * The sum-tree itself (internal): after 100k random updates on 1000 leaves
 * (a tree of 1024) the root equals a direct sum, and find() agrees with a
 * linear scan of the prefix sums for random masses, including the edges.
 */
static void test_sumtree_against_linear_scan(void **state)
{
    (void)state;
    enum { LEAVES = 1000 };
    double *node = malloc(2 * (size_t)rl_sumtree_p2(LEAVES) * sizeof(double));
    assert_non_null(node);
    rl_sumtree t;
    rl_sumtree_init(&t, node, LEAVES);
    assert_int_equal(t.leaves_p2, 1024);
    static double cur[LEAVES];
    rp_rng rng = rp_rng_make(5, 0);
    for (int it = 0; it < 100000; it++) {
        int64_t j = rp_rng_below(&rng, LEAVES);
        cur[j] = (rp_rng_below(&rng, 10) == 0) ? 0.0 : (double)rp_rng_uniform(&rng) * 1000.0;
        rl_sumtree_set(&t, j, cur[j]);
    }
    /* Empty leaves at both ends and one in the middle, and the padding leaves after 999. */
    const int64_t empty[4] = {0, 1, 500, LEAVES - 1};
    for (int e = 0; e < 4; e++) {
        cur[empty[e]] = 0;
        rl_sumtree_set(&t, empty[e], 0);
    }
    double sum = 0;
    for (int j = 0; j < LEAVES; j++)
        sum += cur[j];
    assert_true(fabs(rl_sumtree_total(&t) - sum) <= 1e-12 * sum);
    int64_t last_pos = LEAVES - 1;
    while (cur[last_pos] == 0)
        last_pos--;
    assert_true(cur[rl_sumtree_find(&t, 0.0)] > 0);           /* not leaf 0 or 1 */
    assert_int_equal(rl_sumtree_find(&t, sum), last_pos);     /* at the end: the last positive */
    assert_int_equal(rl_sumtree_find(&t, sum * 2), last_pos); /* past it, likewise */
    for (int it = 0; it < 20000; it++) {
        double mass = (double)rp_rng_uniform(&rng) * sum;
        if (it == 0) mass = 0;
        if (it == 1) mass = sum * (1 - 1e-16);
        double prefix = 0;
        int64_t want = -1;
        for (int j = 0; j < LEAVES; j++) {
            if (cur[j] > 0 && mass < prefix + cur[j]) {
                want = j;
                break;
            }
            prefix += cur[j];
        }
        if (want < 0) /* past the end by rounding: the last positive leaf */
            for (int j = LEAVES - 1; j >= 0 && want < 0; j--)
                if (cur[j] > 0) want = j;
        int64_t got = rl_sumtree_find(&t, mass);
        /* Leaf boundaries may round either way: accept a neighbour only at a boundary. */
        if (got != want) {
            double lo = 0;
            for (int j = 0; j < got; j++)
                lo += cur[j];
            bool at_edge =
                fabs(mass - lo) < 1e-9 * sum || fabs(mass - (lo + cur[got])) < 1e-9 * sum;
            assert_true(at_edge);
        }
        assert_true(cur[got] > 0);
    }
    free(node);
}

/* ---- rate limiter ---------------------------------------------------------------------- */

static void test_rate_limiter_reverb_cases(void **state)
{
    (void)state;
    rp_rate_limiter l;
    /* min size 3, 2 samples per insert, error buffer 4: window [6-4, 6+4] = [2, 10]. */
    assert_int_equal(rp_rate_limiter_init(&l, 3, 2.0, 4.0), RP_OK);
    assert_true(l.min_diff == 2.0 && l.max_diff == 10.0);
    /* Min size blocks samples; inserts are free until then. */
    for (int i = 0; i < 3; i++) {
        assert_false(rp_rate_limiter_can_sample(&l, 1));
        assert_true(rp_rate_limiter_can_insert(&l, 1));
        rp_rate_limiter_inserted(&l, 1);
    }
    assert_true(rp_rate_limiter_can_sample(&l, 1)); /* diff 6 - 1 >= 2 */
    /* Too far ahead blocks inserts: (4)*2 = 8 and (5)*2 = 10 fit, 12 does not. */
    assert_true(rp_rate_limiter_can_insert(&l, 2));
    assert_false(rp_rate_limiter_can_insert(&l, 3));
    rp_rate_limiter_inserted(&l, 2);
    assert_false(rp_rate_limiter_can_insert(&l, 1));
    /* Samples may bring diff 10 down to exactly min_diff 2: 8 at once, not 9. */
    assert_true(rp_rate_limiter_can_sample(&l, 8));
    assert_false(rp_rate_limiter_can_sample(&l, 9));
    rp_rate_limiter_sampled(&l, 8);
    /* Too far behind blocks samples, and the inserts are open again. */
    assert_false(rp_rate_limiter_can_sample(&l, 1));
    assert_true(rp_rate_limiter_can_insert(&l, 1));
    /* Deletes below min size block samples again (Reverb's size rule). */
    rp_rate_limiter_inserted(&l, 1); /* diff 4 */
    assert_true(rp_rate_limiter_can_sample(&l, 1));
    rp_rate_limiter_deleted(&l, 4); /* size 6 - 4 = 2 < 3 */
    assert_false(rp_rate_limiter_can_sample(&l, 1));
    assert_false(rp_rate_limiter_can_insert(&l, 0));

    /* The error window: >= 2 * max(1, spi) wide; 2 * max(1, 0.5) = 2 for spi 0.5. */
    assert_int_equal(rp_rate_limiter_init(&l, 10, 2.0, 2.0), RP_OK);
    assert_int_equal(rp_rate_limiter_init(&l, 10, 2.0, 1.9), RP_ERR_INVALID);
    tu_assert_error_contains("2 * max(1");
    assert_int_equal(rp_rate_limiter_init(&l, 10, 0.5, 1.0), RP_OK);
    assert_int_equal(rp_rate_limiter_init(&l, 10, 0.5, 0.9), RP_ERR_INVALID);
    assert_int_equal(rp_rate_limiter_init(&l, 0, 1.0, 5.0), RP_ERR_INVALID);
    tu_assert_error_contains("min_size_to_sample");
    assert_int_equal(rp_rate_limiter_init(&l, 1, 0.0, 5.0), RP_ERR_INVALID);
    assert_int_equal(rp_rate_limiter_init(&l, 1, NAN, 5.0), RP_ERR_INVALID);
    assert_int_equal(rp_rate_limiter_init(&l, 1, 1.0, -5.0), RP_ERR_INVALID);
    /* Explicit range above spi * min_size deadlocks: refused. */
    assert_int_equal(rp_rate_limiter_init_range(&l, 10, 1.0, 11.0, 20.0), RP_ERR_INVALID);
    tu_assert_error_contains("deadlock");
    assert_int_equal(rp_rate_limiter_init_range(&l, 10, 1.0, 0.0, 20.0), RP_OK);
    /* spi 32 (Acme's D4PG): the buffer must be at least 32 (window 64 wide). */
    assert_int_equal(rp_rate_limiter_init(&l, 1000, 32.0, 32.0), RP_OK);
    assert_int_equal(rp_rate_limiter_init(&l, 1000, 32.0, 31.9), RP_ERR_INVALID);
}

/* The gate's counters satisfy the limiter's window: checked after every operation. */
typedef struct gate_run {
    rp_rate_gate *g;
    int inserts, batches, batch; /* actor inserts; learner batches of `batch` samples */
    int actor_sleep_us, learner_sleep_us;
    double actor_s, learner_s;
    rp_status actor_status, learner_status;
    int violations;
    pthread_mutex_t mu;
} gate_run;

static void check_window(gate_run *run)
{
    rp_rate_limiter l = rp_rate_gate_counters(run->g);
    double diff = (double)l.inserts * l.samples_per_insert - (double)l.samples;
    bool ok = (l.samples == 0 || diff >= l.min_diff) &&
              (l.inserts - l.deletes <= l.min_size_to_sample || diff <= l.max_diff);
    if (!ok) {
        pthread_mutex_lock(&run->mu);
        run->violations++;
        pthread_mutex_unlock(&run->mu);
    }
}

static void sleep_us(int us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void *actor_main(void *arg)
{
    gate_run *run = arg;
    double t0 = rp_now_s();
    for (int i = 0; i < run->inserts; i++) {
        if (run->actor_sleep_us) sleep_us(run->actor_sleep_us);
        run->actor_status = rp_rate_gate_insert(run->g, 1, 10.0);
        if (run->actor_status != RP_OK) break;
        check_window(run);
    }
    run->actor_s = rp_now_s() - t0;
    return NULL;
}

static void *learner_main(void *arg)
{
    gate_run *run = arg;
    double t0 = rp_now_s();
    for (int i = 0; i < run->batches; i++) {
        run->learner_status = rp_rate_gate_sample(run->g, run->batch, 10.0);
        if (run->learner_status != RP_OK) break;
        check_window(run);
        if (run->learner_sleep_us) sleep_us(run->learner_sleep_us);
    }
    run->learner_s = rp_now_s() - t0;
    return NULL;
}

static void run_gate(gate_run *run)
{
    rp_rate_limiter l;
    /* min 10, spi 2, buffer 4: window [16, 24]. 300 inserts allow 600 - 16 = 584 samples at
     * most, and the last insert needs at least 600 - 24 = 576: the learner takes 580. */
    assert_int_equal(rp_rate_limiter_init(&l, 10, 2.0, 4.0), RP_OK);
    assert_int_equal(rp_rate_gate_create(&run->g, &l), RP_OK);
    pthread_mutex_init(&run->mu, NULL);
    run->inserts = 300;
    run->batch = 2;
    run->batches = 290;
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, actor_main, run), 0);
    assert_int_equal(pthread_create(&b, NULL, learner_main, run), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    rp_rate_limiter end = rp_rate_gate_counters(run->g);
    assert_int_equal(run->actor_status, RP_OK);
    assert_int_equal(run->learner_status, RP_OK);
    assert_int_equal(end.inserts, 300);
    assert_int_equal(end.samples, 580);
    assert_int_equal(run->violations, 0);
    pthread_mutex_destroy(&run->mu);
    rp_rate_gate_destroy(run->g);
}

static void test_gate_slow_learner_stalls_actor(void **state)
{
    (void)state;
    gate_run run = {0};
    run.learner_sleep_us = 1000;
    run_gate(&run);
    print_message("slow learner: actor %.3f s, learner %.3f s\n", run.actor_s, run.learner_s);
    /* Unlimited, the actor would finish in microseconds; it has to wait for the learner. */
    assert_true(run.learner_s > 0.29);
    assert_true(run.actor_s > 0.8 * run.learner_s);
}

static void test_gate_slow_actor_stalls_learner(void **state)
{
    (void)state;
    gate_run run = {0};
    run.actor_sleep_us = 1000;
    run_gate(&run);
    print_message("slow actor: actor %.3f s, learner %.3f s\n", run.actor_s, run.learner_s);
    assert_true(run.actor_s > 0.3);
    assert_true(run.learner_s > 0.8 * run.actor_s);
}

static void *close_waiter(void *arg)
{
    gate_run *run = arg;
    double t0 = rp_now_s();
    run->learner_status = rp_rate_gate_sample(run->g, 1, 10.0);
    run->learner_s = rp_now_s() - t0;
    return NULL;
}

static void test_gate_timeout_and_close(void **state)
{
    (void)state;
    rp_rate_limiter l;
    assert_int_equal(rp_rate_limiter_init(&l, 10, 1.0, 5.0), RP_OK);
    rp_rate_gate *g = NULL;
    assert_int_equal(rp_rate_gate_create(&g, &l), RP_OK);
    /* Nothing inserted: a sample can never be allowed. */
    double t0 = rp_now_s();
    assert_int_equal(rp_rate_gate_sample(g, 1, 0.2), RP_ERR_TIMEOUT);
    double waited = rp_now_s() - t0;
    print_message("timeout 0.2 s returned after %.3f s: %s\n", waited, rp_last_error());
    assert_true(waited >= 0.2 && waited < 1.0);
    tu_assert_error_contains("rp_rate_gate_sample(n=1)");
    tu_assert_error_contains("inserts 0, samples 0");
    tu_assert_error_contains("[5, 15]");
    /* Timeout 0 just tries. */
    assert_int_equal(rp_rate_gate_insert(g, 1, 0.0), RP_OK);
    assert_int_equal(rp_rate_gate_insert(g, 0, 1.0), RP_ERR_INVALID);

    gate_run run = {0};
    run.g = g;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, close_waiter, &run), 0);
    sleep_us(100000);
    rp_rate_gate_close(g);
    pthread_join(th, NULL);
    assert_int_equal(run.learner_status, RP_ERR_INTERRUPTED);
    assert_true(run.learner_s < 2.0);
    assert_int_equal(rp_rate_gate_insert(g, 1, 1.0), RP_ERR_INTERRUPTED);
    assert_int_equal(rp_rate_gate_counters(g).samples, 0);
    rp_rate_gate_destroy(g);
}

/* ---- checkpoints ----------------------------------------------------------------------- */

static void expect_same_items(const rp_replay *a, const rp_replay *b)
{
    assert_int_equal(rp_replay_size(a), rp_replay_size(b));
    assert_int_equal(rp_replay_inserted(a), rp_replay_inserted(b));
    for (int64_t k = rp_replay_inserted(a) - rp_replay_size(a); k < rp_replay_inserted(a); k++) {
        rp_transition ta, tb;
        float pa, pb;
        assert_int_equal(rp_replay_get(a, k, &ta, &pa), RP_OK);
        assert_int_equal(rp_replay_get(b, k, &tb, &pb), RP_OK);
        assert_memory_equal(ta.obs, tb.obs, OD * sizeof(float));
        assert_memory_equal(ta.act, tb.act, AD * sizeof(float));
        assert_memory_equal(ta.next_obs, tb.next_obs, OD * sizeof(float));
        assert_memory_equal(&ta.reward, &tb.reward, sizeof(float));
        assert_memory_equal(&ta.discount, &tb.discount, sizeof(float));
        assert_memory_equal(&pa, &pb, sizeof(float));
    }
}

static void test_save_load_round_trip(void **state)
{
    (void)state;
    rp_replay *r = make_replay(6, true);
    insert_items(r, 0, 9, 0); /* wrapped: keys 3..8 held */
    int64_t keys[3] = {3, 5, 8};
    float p[3] = {0.25f, 50.0f, 1e-3f};
    assert_int_equal(rp_replay_update_priorities(r, keys, p, 3), RP_OK);
    p[1] = 3.5f; /* key 5 ends at 3.5, but the largest seen stays 50 */
    assert_int_equal(rp_replay_update_priorities(r, keys, p, 3), RP_OK);

    char path[512];
    assert_int_equal(tu_tmpdir_create("replay"), 0);
    tu_tmp_path(path, sizeof path, "replay.safetensors");
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_replay_save(r, ck, "replay/"), RP_OK);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    ck = NULL;
    assert_int_equal(rp_checkpoint_load(&ck, path), RP_OK);

    /* Same capacity: the same items, keys, priorities, counters, and the same next samples. */
    rp_replay *same = make_replay(6, true);
    insert_items(same, 100, 2, 7.0f); /* contents to be replaced */
    assert_int_equal(rp_replay_load(same, ck, "replay/"), RP_OK);
    expect_same_items(r, same);
    rp_replay_batch ba, bb;
    assert_int_equal(rp_replay_batch_alloc(&ba, 64, OD, AD), RP_OK);
    assert_int_equal(rp_replay_batch_alloc(&bb, 64, OD, AD), RP_OK);
    rp_rng ra = rp_rng_make(9, 0), rb = rp_rng_make(9, 0);
    rp_transition t9;
    assert_int_equal(rp_replay_sample(r, &ra, 64, &ba), RP_OK);
    assert_int_equal(rp_replay_sample(same, &rb, 64, &bb), RP_OK);
    assert_memory_equal(ba.keys, bb.keys, 64 * sizeof(int64_t));
    assert_memory_equal(ba.weights, bb.weights, 64 * sizeof(float));
    assert_memory_equal(ba.obs, bb.obs, 64 * OD * sizeof(float));
    /* The largest priority seen came along: an insert at "max" gets 50 in both. */
    insert_items(r, 9, 1, 0);
    insert_items(same, 9, 1, 0);
    expect_same_items(r, same);
    float p9 = 0;
    assert_int_equal(rp_replay_get(same, 9, &t9, &p9), RP_OK);
    assert_true(p9 == 50.0f);

    /* A larger capacity holds them too, with the same keys. */
    rp_replay *big = make_replay(20, true);
    assert_int_equal(rp_replay_load(big, ck, "replay/"), RP_OK);
    assert_int_equal(rp_replay_size(big), 6);
    assert_int_equal(rp_replay_inserted(big), 9);
    rp_transition t;
    float pr = 0;
    assert_int_equal(rp_replay_get(big, 5, &t, &pr), RP_OK);
    assert_true(pr == 3.5f && t.obs[0] == 5.0f);

    /* Refusals: other dims, too small a capacity, a missing prefix; the target is unchanged. */
    rp_replay_config c = rp_replay_config_default();
    c.capacity = 10;
    c.obs_dim = OD + 1;
    c.act_dim = AD;
    rp_replay *wrong = NULL;
    assert_int_equal(rp_replay_create(&wrong, &c), RP_OK);
    assert_int_equal(rp_replay_load(wrong, ck, "replay/"), RP_ERR_SHAPE);
    tu_assert_error_contains("obs_dim");
    rp_replay_destroy(wrong);
    rp_replay *small = make_replay(5, true);
    insert_items(small, 40, 2, 1.0f);
    assert_int_equal(rp_replay_load(small, ck, "replay/"), RP_ERR_SHAPE);
    tu_assert_error_contains("capacity");
    assert_int_equal(rp_replay_size(small), 2);
    assert_int_equal(rp_replay_inserted(small), 2);
    assert_int_equal(rp_replay_load(small, ck, "other/"), RP_ERR_INVALID);

    rp_replay_batch_free(&ba);
    rp_replay_batch_free(&bb);
    rp_replay_destroy(small);
    rp_replay_destroy(big);
    rp_replay_destroy(same);
    rp_replay_destroy(r);
    rp_checkpoint_destroy(ck);
    tu_tmpdir_remove();
}

/* ---- scale ----------------------------------------------------------------------------- */

/* CPU seconds used by the calling thread (user + system, page faults included). */
static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void time_million(bool prioritized)
{
    enum { OBS = 17, ACT = 6 };
    const int64_t n = 1000000;
    rp_replay_config c = rp_replay_config_default();
    c.obs_dim = OBS;
    c.act_dim = ACT;
    c.prioritized = prioritized;
    rp_replay *r = NULL;
    double t0 = rp_now_s();
    assert_int_equal(rp_replay_create(&r, &c), RP_OK);
    double t_create = rp_now_s() - t0;
    float obs[OBS], act[ACT], next[OBS];
    tu_fill(obs, OBS, 1, -1, 1);
    tu_fill(act, ACT, 2, -1, 1);
    tu_fill(next, OBS, 3, -1, 1);
    rp_transition t = {obs, act, 0.5f, 0.99f, next};
    uint64_t allocs = rp_alloc_count();
    t0 = rp_now_s();
    double c0 = thread_cpu_s();
    for (int64_t k = 0; k < n; k++) {
        obs[0] = (float)k;
        assert_true(rp_replay_insert(r, &t, 1, 0) == RP_OK);
    }
    double t_insert = rp_now_s() - t0, c_insert = thread_cpu_s() - c0;
    assert_int_equal(rp_alloc_count(), allocs); /* no allocation per insert */
    assert_int_equal(rp_replay_size(r), n);
    rp_transition got;
    assert_int_equal(rp_replay_get(r, n - 1, &got, NULL), RP_OK);
    assert_true(got.obs[0] == (float)(n - 1));
    print_message("capacity 1e6 (obs 17, act 6, %s): create %.3f s, 1e6 inserts %.3f s wall, "
                  "%.3f s thread CPU\n",
                  prioritized ? "prioritised" : "uniform", t_create, t_insert, c_insert);
    /* CPU time, not wall: the test machine is shared, and other processes must not fail it. */
    assert_true(t_create < 0.5);
    assert_true(c_insert < 2.0);
    rp_replay_destroy(r);
}

static void test_million_items(void **state)
{
    (void)state;
    time_million(false);
    time_million(true);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nstep_truncation_and_terminal),
        cmocka_unit_test(test_nstep_one_step_and_restart),
        cmocka_unit_test(test_nstep_short_episode),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_uniform_sampling_and_fifo),
        cmocka_unit_test(test_prioritized_frequencies_and_updates),
        cmocka_unit_test(test_priority_errors_and_stale_keys),
        cmocka_unit_test(test_sumtree_against_linear_scan),
        cmocka_unit_test(test_rate_limiter_reverb_cases),
        cmocka_unit_test(test_gate_slow_learner_stalls_actor),
        cmocka_unit_test(test_gate_slow_actor_stalls_learner),
        cmocka_unit_test(test_gate_timeout_and_close),
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_million_items),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
