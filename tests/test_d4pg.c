/*
 * test_d4pg.c - the D4PG agent (models/d4pg):
 *  - the categorical projection against hand-computed values (mass clipped
 *    to the edges, a target on an atom, d = 0) and against Acme's
 *    triangular-kernel form of l2_project on random rows;
 *  - the networks' shapes and Acme's initialiser bounds, actions within the
 *    bounds, the exploration noise's statistics and clipping;
 *  - finite differences of the critic loss and of the policy objective;
 *  - dQ/da clipping against a direct computation;
 *  - the passes' isolation (the policy pass leaves the critic's values,
 *    gradients and Adam state bitwise alone, and the reverse) and the hard
 *    target update every target_update_period steps;
 *  - 2 replicas x B/2 against 1 replica x B with gradient clipping active
 *    (clipping after the all-reduce);
 *  - learning on a contextual bandit;
 *  - a bit-exact resume from a checkpoint, in f32 and with the learners in bf16.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_internal.h"

/* ---- helpers ----------------------------------------------------------------------- */

typedef struct body {
    void (*fn)(rp_replica *rep, void *arg);
    void *arg;
} body;

static rp_status body_run(rp_replica *rep, void *arg)
{
    body *b = arg;
    b->fn(rep, b->arg);
    return RP_OK;
}

/* Runs fn on one replica (on this thread, so cmocka's asserts work inside). */
static void run_one(void (*fn)(rp_replica *, void *), void *arg)
{
    rp_config c = rp_config_default();
    c.backend = RP_BACKEND_THREADS;
    c.replicas = 1;
    c.threads_per_replica = 1;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &c), RP_OK);
    body b = {fn, arg};
    rp_status s = rp_replicator_run(r, body_run, &b);
    if (s != RP_OK) fprintf(stderr, "%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    rp_replicator_destroy(r);
}

static rp_d4pg_config small_cfg(int obs, int act)
{
    rp_d4pg_config c = rp_d4pg_config_default();
    c.obs_dim = obs;
    c.act_dim = act;
    c.policy_layers[0] = 16;
    c.policy_layers[1] = 16;
    c.policy_layers[2] = 0;
    c.critic_layers[0] = 24;
    c.critic_layers[1] = 16;
    c.critic_layers[2] = 0;
    c.atoms = 11;
    c.v_min = -3;
    c.v_max = 3;
    c.target_update_period = 3;
    c.policy_lr = 1e-3f;
    c.critic_lr = 1e-3f;
    return c;
}

/* A batch of n rows with its own storage. */
typedef struct batch_buf {
    rp_d4pg_batch b;
    float *obs, *act, *reward, *discount, *next_obs;
} batch_buf;

static void batch_make(batch_buf *bb, const rp_d4pg_config *c, int n, uint64_t seed)
{
    bb->obs = malloc(sizeof(float) * (size_t)n * c->obs_dim);
    bb->next_obs = malloc(sizeof(float) * (size_t)n * c->obs_dim);
    bb->act = malloc(sizeof(float) * (size_t)n * c->act_dim);
    bb->reward = malloc(sizeof(float) * (size_t)n);
    bb->discount = malloc(sizeof(float) * (size_t)n);
    tu_fill(bb->obs, (int64_t)n * c->obs_dim, seed, -1, 1);
    tu_fill(bb->next_obs, (int64_t)n * c->obs_dim, seed + 1, -1, 1);
    tu_fill(bb->act, (int64_t)n * c->act_dim, seed + 2, -1, 1);
    tu_fill(bb->reward, n, seed + 3, -1.5f, 1.5f);
    tu_fill(bb->discount, n, seed + 4, 0, 1);
    for (int i = 0; i < n; i++)
        bb->discount[i] = bb->discount[i] < 0.2f ? 0.0f : 0.9f; /* some terminals */
    bb->b = (rp_d4pg_batch){n, bb->obs, bb->act, bb->reward, bb->discount, bb->next_obs, NULL};
}

/* Rows [lo, lo + n) of a batch, as a view. */
static rp_d4pg_batch batch_rows(const batch_buf *bb, const rp_d4pg_config *c, int lo, int n)
{
    return (rp_d4pg_batch){n,
                           bb->obs + (int64_t)lo * c->obs_dim,
                           bb->act + (int64_t)lo * c->act_dim,
                           bb->reward + lo,
                           bb->discount + lo,
                           bb->next_obs + (int64_t)lo * c->obs_dim,
                           NULL};
}

static void batch_free(batch_buf *bb)
{
    free(bb->obs);
    free(bb->next_obs);
    free(bb->act);
    free(bb->reward);
    free(bb->discount);
}

static float max_abs(const float *x, int64_t n)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* max_abs over a tensor's values (read out of storage). */
static float max_abs_of(const rp_tensor *t)
{
    float *v = tu_read(t);
    float m = max_abs(v, t->numel);
    free(v);
    return m;
}

/* Multiplies a parameter's values by s. */
static void scale_values(rp_tensor *t, float s)
{
    float *v = tu_read(t);
    for (int64_t i = 0; i < t->numel; i++)
        v[i] *= s;
    assert_int_equal(rp_tensor_write(t, v, t->numel), RP_OK);
    free(v);
}

/* Whether two lists' value blocks are bitwise equal. */
static bool same_values(const rp_params *a, const rp_params *b)
{
    assert_int_equal(rp_params_numel(a), rp_params_numel(b));
    float *va = tu_read_values(a), *vb = tu_read_values(b);
    bool same = memcmp(va, vb, (size_t)rp_params_numel(a) * sizeof(float)) == 0;
    free(vb);
    free(va);
    return same;
}

/* Whether a list's value block is bitwise `want`. */
static bool values_are(const rp_params *p, const float *want)
{
    float *v = tu_read_values(p);
    bool same = memcmp(v, want, (size_t)rp_params_numel(p) * sizeof(float)) == 0;
    free(v);
    return same;
}

/* ---- the projection -------------------------------------------------------------------- */

static void check_row(const float *got, const float *want, int k, const char *what)
{
    for (int i = 0; i < k; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f) {
            fprintf(stderr, "%s: atom %d got %g want %g\n", what, i, (double)got[i],
                    (double)want[i]);
            fail();
        }
}

static void test_project_by_hand(void **state)
{
    (void)state;
    /* 5 atoms on [-2, 2]: z = -2, -1, 0, 1, 2 (dz = 1). */
    const float p[5] = {0.1f, 0.2f, 0.3f, 0.2f, 0.2f};
    float out[5];
    struct {
        float r, d;
        float want[5];
        const char *what;
    } cases[] = {
        /* z' = -1.5, -0.5, 0.5, 1.5, 2.5 -> 2: halves to the neighbours, the last clipped. */
        {0.5f, 1.0f, {0.05f, 0.15f, 0.25f, 0.25f, 0.3f}, "shift 0.5, top clipped"},
        /* z' = -1, 0, 1, 2, 3 -> 2: exactly on atoms. */
        {1.0f, 1.0f, {0, 0.1f, 0.2f, 0.3f, 0.4f}, "shift onto atoms"},
        /* z' = -1, -0.5, 0, 0.5, 1. */
        {0.0f, 0.5f, {0, 0.2f, 0.5f, 0.3f, 0}, "scale 0.5"},
        /* d = 0: everything at r; on an atom, all of it there. */
        {-1.0f, 0.0f, {0, 1, 0, 0, 0}, "d 0 on an atom"},
        /* d = 0 between atoms 0 and 1: 0.7 and 0.3. */
        {0.3f, 0.0f, {0, 0, 0.7f, 0.3f, 0}, "d 0 between atoms"},
        /* Below the support: everything on the lowest atom. */
        {-3.0f, 0.5f, {1, 0, 0, 0, 0}, "below the support"},
        /* Above: everything on the highest. */
        {5.0f, 0.9f, {0, 0, 0, 0, 1}, "above the support"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(rp_d4pg_project(p, &cases[c].r, &cases[c].d, 1, 5, -2, 2, out), RP_OK);
        check_row(out, cases[c].want, 5, cases[c].what);
    }
    float r = 0, d = 1, nan_r = NAN;
    assert_int_equal(rp_d4pg_project(p, &r, &d, 1, 1, -2, 2, out), RP_ERR_INVALID);
    assert_int_equal(rp_d4pg_project(p, &r, &d, 1, 5, 2, -2, out), RP_ERR_INVALID);
    assert_int_equal(rp_d4pg_project(p, &nan_r, &d, 1, 5, -2, 2, out), RP_ERR_NUMERIC);
    tu_assert_error_contains("row 0");
}

/* Acme's l2_project as written there: atom i gets sum_j p_j clip(1 - |clip(z'_j) - z_i| / dz, 0,
 * 1). */
static void project_kernel(const float *p, float r, float d, int k, float lo, float hi, double *out)
{
    double dz = ((double)hi - lo) / (k - 1);
    for (int i = 0; i < k; i++) {
        double zi = lo + i * dz, s = 0;
        for (int j = 0; j < k; j++) {
            double zj = (double)r + (double)d * (lo + j * dz);
            zj = zj < lo ? lo : zj > hi ? hi : zj;
            double w = 1.0 - fabs(zj - zi) / dz;
            s += p[j] * (w < 0 ? 0 : w > 1 ? 1 : w);
        }
        out[i] = s;
    }
}

static void test_project_matches_l2_kernel(void **state)
{
    (void)state;
    enum { B = 64, K = 51 };
    float *p = malloc(sizeof(float) * B * K), *out = malloc(sizeof(float) * B * K);
    float r[B], d[B];
    tu_fill(p, B * K, 7, 0, 1);
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int i = 0; i < K; i++)
            s += p[b * K + i];
        for (int i = 0; i < K; i++)
            p[b * K + i] = (float)(p[b * K + i] / s);
    }
    tu_fill(r, B, 8, -200, 200);
    tu_fill(d, B, 9, 0, 1);
    d[0] = 0;
    d[1] = 1;
    r[1] = 6.0f; /* exactly 1 atom up (dz = 6) */
    assert_int_equal(rp_d4pg_project(p, r, d, B, K, -150, 150, out), RP_OK);
    double ref[K], worst = 0;
    for (int b = 0; b < B; b++) {
        project_kernel(p + b * K, r[b], d[b], K, -150, 150, ref);
        double s = 0;
        for (int i = 0; i < K; i++) {
            worst = fmax(worst, fabs(out[b * K + i] - ref[i]));
            s += out[b * K + i];
        }
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    assert_true(worst < 1e-6);
    free(p);
    free(out);
}

/* ---- networks ---------------------------------------------------------------------------- */

static void check_uniform_bound(rp_params *ps, const char *name, float bound)
{
    rp_tensor *w = rp_params_find(ps, name);
    assert_non_null(w);
    float m = max_abs_of(w);
    if (!(m <= bound && m > 0.9f * bound)) {
        fprintf(stderr, "%s: max |w| %g, want in (0.9, 1] x %g\n", name, (double)m, (double)bound);
        fail();
    }
}

static void test_policy_shapes_init_bounds(void **state)
{
    (void)state;
    rp_d4pg_config c = rp_d4pg_config_default();
    c.obs_dim = 17;
    c.act_dim = 6;
    rp_d4pg_policy *p;
    assert_int_equal(rp_d4pg_policy_create(&p, &c), RP_OK);
    rp_params *ps = rp_d4pg_policy_params(p);
    /* 3 linear layers + the layer norm + the head, each with a bias. */
    assert_int_equal(rp_params_count(ps), 10);
    rp_tensor *w0 = rp_params_find(ps, "policy.l0.weight");
    assert_int_equal(w0->shape[0], 256);
    assert_int_equal(w0->shape[1], 17);
    rp_tensor *head = rp_params_find(ps, "policy.head.weight");
    assert_int_equal(head->shape[0], 6);
    assert_int_equal(head->shape[1], 256);
    /* VarianceScaling(0.333, fan_out, uniform): bound sqrt(0.999 / 256). */
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "policy.l%d.weight", i);
        check_uniform_bound(ps, name, sqrtf(0.999f / 256));
        snprintf(name, sizeof name, "policy.l%d.bias", i);
        assert_int_equal(rp_params_find(ps, name)->numel, 256);
        assert_true(max_abs_of(rp_params_find(ps, name)) == 0);
    }
    check_uniform_bound(ps, "policy.head.weight", sqrtf(3e-4f / 256)); /* near zero: ~1e-3 */
    rp_tensor *g = rp_params_find(ps, "policy.ln.weight");
    assert_int_equal(g->numel, 256);
    float *gv = tu_read(g);
    for (int i = 0; i < 256; i++)
        assert_true(gv[i] == 1.0f);
    free(gv);
    assert_int_equal(rp_params_find(ps, "policy.ln.bias")->numel, 256);
    assert_true(max_abs_of(rp_params_find(ps, "policy.ln.bias")) == 0);

    /* Near-zero head: actions are the bounds' midpoint, within a hair. */
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    enum { N = 64 };
    float obs[N * 17], act[N * 6];
    tu_fill(obs, N * 17, 3, -3, 3);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 0, NULL, act), RP_OK);
    assert_true(max_abs(act, N * 6) < 0.05f);
    assert_int_equal(rp_tape_size(t), 0); /* nothing recorded */
    rp_tape_reset(t);
    rp_d4pg_policy_destroy(p);

    /* Bounds other than [-1, 1]: a saturated head reaches both ends and never leaves them. */
    c.act_min[0] = -2;
    c.act_max[0] = 0.5f;
    assert_int_equal(rp_d4pg_policy_create(&p, &c), RP_OK);
    head = rp_params_find(rp_d4pg_policy_params(p), "policy.head.weight");
    scale_values(head, 1e4f);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 0, NULL, act), RP_OK);
    float lo = 1e9f, hi = -1e9f;
    for (int i = 0; i < N; i++) {
        lo = fminf(lo, act[i * 6]);
        hi = fmaxf(hi, act[i * 6]);
        for (int j = 1; j < 6; j++)
            assert_true(act[i * 6 + j] >= -1 && act[i * 6 + j] <= 1);
    }
    assert_true(lo >= -2 && lo < -1.9f);
    assert_true(hi <= 0.5f && hi > 0.4f);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, 0, 0, NULL, act), RP_ERR_INVALID);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 0.3f, NULL, act), RP_ERR_INVALID);
    rp_d4pg_policy_destroy(p);
    rp_tape_destroy(t);
}

static void test_policy_noise(void **state)
{
    (void)state;
    rp_d4pg_config c = small_cfg(4, 3);
    rp_d4pg_policy *p;
    assert_int_equal(rp_d4pg_policy_create(&p, &c), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    enum { N = 4000, A = 3 };
    float *obs = malloc(sizeof(float) * N * 4), *a0 = malloc(sizeof(float) * N * A),
          *a1 = malloc(sizeof(float) * N * A);
    tu_fill(obs, N * 4, 5, -1, 1);
    rp_rng rng = rp_rng_make(42, 0);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 0, NULL, a0), RP_OK);
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 0.3f, &rng, a1), RP_OK);
    double s = 0, s2 = 0;
    for (int i = 0; i < N * A; i++) {
        double e = a1[i] - a0[i];
        s += e;
        s2 += e * e;
        assert_true(a1[i] >= -1 && a1[i] <= 1);
    }
    double mean = s / (N * A), sd = sqrt(s2 / (N * A) - mean * mean);
    /* The mean's standard error is 0.3 / sqrt(12000) = 0.003; clipping at +-1 trims sd by < 0.5%.
     */
    assert_true(fabs(mean) < 0.015);
    assert_true(fabs(sd - 0.3) < 0.01);
    /* sigma 3: most draws leave [-1, 1] and are clipped onto the bounds (P(|N(0,9)| > 1) = 0.74).
     */
    int at_bound = 0;
    assert_int_equal(rp_d4pg_policy_act(p, t, obs, N, 3.0f, &rng, a1), RP_OK);
    for (int i = 0; i < N * A; i++) {
        assert_true(a1[i] >= -1 && a1[i] <= 1);
        at_bound += fabsf(a1[i]) == 1.0f;
    }
    assert_true(at_bound > 0.7 * N * A && at_bound < 0.78 * N * A);
    free(obs);
    free(a0);
    free(a1);
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
}

static void critic_shapes_body(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_d4pg_config c = rp_d4pg_config_default();
    c.obs_dim = 17;
    c.act_dim = 6;
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 1), RP_OK);
    rp_params *ps = rp_d4pg_learner_critic_params(L);
    rp_tensor *w0 = rp_params_find(ps, "critic.l0.weight");
    assert_int_equal(w0->shape[0], 512);
    assert_int_equal(w0->shape[1], 23); /* concat(obs, act) */
    check_uniform_bound(ps, "critic.l0.weight", sqrtf(0.999f / 512));
    check_uniform_bound(ps, "critic.l2.weight", sqrtf(0.999f / 256));
    rp_tensor *head = rp_params_find(ps, "critic.head.weight");
    assert_int_equal(head->shape[0], 51);
    assert_int_equal(head->shape[1], 256);
    check_uniform_bound(ps, "critic.head.weight", sqrtf(3.0f / 256));
    /* The targets start equal to the online networks; the actors' policy is the target's. */
    assert_true(same_values(ps, rp_d4pg_learner_target_critic_params(L)));
    rp_params *pp = rp_d4pg_policy_params(rp_d4pg_learner_policy(L));
    rp_params *tp = rp_d4pg_policy_params(rp_d4pg_learner_target_policy(L));
    assert_int_equal(rp_params_numel(pp), rp_params_numel(tp));
    assert_true(same_values(pp, tp));
    rp_d4pg_learner_destroy(L);
}

static void test_critic_shapes(void **state)
{
    (void)state;
    run_one(critic_shapes_body, NULL);
}

/* ---- finite differences ---------------------------------------------------------------------- */

typedef struct fd_job {
    bool policy; /* differentiate the policy objective (else the critic loss) */
} fd_job;

static double pass_value(rp_tape *t, rp_d4pg_learner *L, const rp_d4pg_batch *b, bool policy)
{
    double v = 0;
    if (policy)
        assert_int_equal(d4pg_policy_pass(t, L, b, false, &v, NULL), RP_OK);
    else
        assert_int_equal(d4pg_critic_pass(t, L, b, false, &v, NULL), RP_OK);
    return v;
}

static void fd_body(rp_replica *rep, void *arg)
{
    fd_job *job = arg;
    rp_d4pg_config c = small_cfg(3, 2);
    /* A support away from 0, so that Q's gradient term -p_i Q matters. */
    c.v_min = 1;
    c.v_max = 5;
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 3), RP_OK);
    batch_buf bb;
    batch_make(&bb, &c, 6, 100);
    /* Importance weights in the critic's loss. */
    float w[6] = {1, 0.5f, 2, 1, 0.25f, 1.5f};
    bb.b.weights = job->policy ? NULL : w;
    rp_tape *t = rp_replica_tape(rep);
    rp_params *ps = job->policy ? L->policy->params : L->critic.params;
    rp_params_zero_grad(ps);
    double v = 0;
    rp_d4pg_step_stats st = {0};
    if (job->policy) {
        assert_int_equal(d4pg_policy_pass(t, L, &bb.b, true, &v, &st), RP_OK);
        assert_true(st.dqda_clipped == 0); /* the clip (norm 1) is not active here */
    } else {
        assert_int_equal(d4pg_critic_pass(t, L, &bb.b, true, &v, NULL), RP_OK);
    }
    float *grad = tu_param_grads(ps);
    float *val = tu_read_values(ps);
    int checked = 0;
    double worst = 0;
    /* A few entries of every trainable tensor: the largest-gradient one and two more. */
    for (int p = 0; p < rp_params_trainable_count(ps); p++) {
        rp_tensor *x = rp_params_at(ps, p);
        int64_t off = rp_params_offset(ps, p), big = 0;
        for (int64_t i = 1; i < x->numel; i++)
            if (fabsf(grad[off + i]) > fabsf(grad[off + big])) big = i;
        int64_t picks[3] = {big, x->numel / 3, (2 * x->numel) / 3};
        for (int k = 0; k < 3; k++) {
            int64_t i = off + picks[k];
            float keep = val[i];
            const float eps = 1e-2f;
            val[i] = keep + eps;
            assert_int_equal(rp_params_write_values(ps, val), RP_OK);
            double up = pass_value(t, L, &bb.b, job->policy);
            val[i] = keep - eps;
            assert_int_equal(rp_params_write_values(ps, val), RP_OK);
            double down = pass_value(t, L, &bb.b, job->policy);
            val[i] = keep;
            assert_int_equal(rp_params_write_values(ps, val), RP_OK);
            double fd = (up - down) / (2.0 * eps), g = grad[i];
            double err = fabs(fd - g) / (fabs(g) + fabs(fd) + 2e-3);
            worst = fmax(worst, err);
            if (err > 0.03)
                fprintf(stderr, "%s %s[%lld]: finite difference %g, backward %g\n",
                        job->policy ? "policy" : "critic", x->name, (long long)picks[k], fd, g);
            checked += fabs(g) > 1e-3;
        }
    }
    assert_true(worst <= 0.03);
    assert_true(checked >= 8); /* the check saw real gradients */
    free(val);
    free(grad);
    batch_free(&bb);
    rp_d4pg_learner_destroy(L);
}

static void test_gradcheck_critic(void **state)
{
    (void)state;
    fd_job job = {false};
    run_one(fd_body, &job);
}

static void test_gradcheck_policy(void **state)
{
    (void)state;
    fd_job job = {true};
    run_one(fd_body, &job);
}

/* ---- dQ/da clipping -----------------------------------------------------------------------------
 */

static void dqda_body(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_d4pg_config c = small_cfg(3, 2);
    c.v_min = -150;
    c.v_max = 150;
    enum { N = 8, A = 2 };
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 5), RP_OK);
    /* A steep critic: its logits scaled up, so |dQ/da| exceeds 1 for many rows. */
    rp_tensor *head = rp_params_find(L->critic.params, "critic.head.weight");
    scale_values(head, 20);
    batch_buf bb;
    batch_make(&bb, &c, N, 200);
    rp_tape *t = rp_replica_tape(rep);
    rp_params *pp = L->policy->params;
    int64_t np = rp_params_trainable_numel(pp);

    /* The learner's policy pass. */
    rp_params_zero_grad(pp);
    double v;
    rp_d4pg_step_stats st = {0};
    assert_int_equal(d4pg_policy_pass(t, L, &bb.b, true, &v, &st), RP_OK);
    float *g_pass = tu_param_grads(pp);
    assert_true(st.dqda_clipped >= 0.25); /* a mix of clipped and unclipped rows */

    /* Directly: dQ_i/da_i with the action as a leaf, rows clipped to norm 1, seeded into pi. */
    rp_tape_reset(t);
    rp_tape_set_recording(t, false);
    rp_tensor *obs = rp_tensor_from(t, 2, (int[]){N, 3}, bb.obs);
    rp_tensor *a_val = d4pg_policy_forward(t, L->policy, obs);
    rp_tape_set_recording(t, true);
    rp_params_set_frozen(L->critic.params, true);
    float *a_host = tu_read(a_val);
    rp_tensor *a = rp_tensor_from(t, 2, (int[]){N, A}, a_host);
    free(a_host);
    rp_tensor_set_requires_grad(a, true);
    rp_tensor *q = d4pg_expected_value(t, d4pg_critic_forward(t, &L->critic, obs, a), L->support);
    assert_int_equal(rp_backward(t, rp_sum(t, q)), RP_OK);
    rp_params_set_frozen(L->critic.params, false);
    float *a_grad = tu_read_grad(a);
    float seed[N * A], unclipped[N * A];
    int clipped = 0;
    double loss = 0;
    for (int i = 0; i < N; i++) {
        double n2 = 0;
        for (int j = 0; j < A; j++)
            n2 += (double)a_grad[i * A + j] * a_grad[i * A + j];
        double s = sqrt(n2) > 1 ? 1 / sqrt(n2) : 1;
        clipped += s < 1;
        loss += 0.5 * s * s * n2 / N;
        for (int j = 0; j < A; j++) {
            seed[i * A + j] = (float)(-s * a_grad[i * A + j] / N);
            unclipped[i * A + j] = -a_grad[i * A + j] / N;
        }
    }
    free(a_grad);
    assert_int_equal(clipped, (int)lround(st.dqda_clipped * N));
    assert_true(fabs(st.policy_loss - loss) < 1e-4 * loss);
    rp_tape_reset(t);
    rp_params_zero_grad(pp);
    obs = rp_tensor_from(t, 2, (int[]){N, 3}, bb.obs);
    assert_int_equal(rp_backward_from(t, d4pg_policy_forward(t, L->policy, obs), seed), RP_OK);
    float *g_direct = tu_param_grads(pp);
    tu_check_close(g_pass, g_direct, np, 1e-4, "policy gradient, dQ/da clipped");
    free(g_direct);
    /* Without the clip the gradient would be far from it: the test can tell. */
    rp_tape_reset(t);
    rp_params_zero_grad(pp);
    obs = rp_tensor_from(t, 2, (int[]){N, 3}, bb.obs);
    assert_int_equal(rp_backward_from(t, d4pg_policy_forward(t, L->policy, obs), unclipped), RP_OK);
    g_direct = tu_param_grads(pp);
    assert_true(tu_max_rel_diff(g_pass, g_direct, np) > 0.1);
    free(g_direct);
    rp_params_zero_grad(pp);
    free(g_pass);
    batch_free(&bb);
    rp_d4pg_learner_destroy(L);
}

static void test_dqda_clipping(void **state)
{
    (void)state;
    run_one(dqda_body, NULL);
}

/* ---- isolation of the passes and the target update
 * ------------------------------------------------ */

typedef struct snapshot {
    float *values, *grads, *adam;
    int64_t nv, ng, na, steps;
} snapshot;

static snapshot snap(rp_params *ps, rp_optimizer *opt)
{
    snapshot s;
    s.nv = rp_params_numel(ps);
    s.ng = rp_params_trainable_numel(ps);
    s.values = tu_read_values(ps);
    s.grads = tu_param_grads(ps);
    s.adam = tu_optimizer_state(opt, &s.na);
    s.steps = rp_optimizer_steps(opt);
    return s;
}

static void snap_equal(const snapshot *s, rp_params *ps, rp_optimizer *opt, const char *what)
{
    snapshot now = snap(ps, opt);
    if (memcmp(s->values, now.values, (size_t)s->nv * 4) ||
        memcmp(s->grads, now.grads, (size_t)s->ng * 4) ||
        memcmp(s->adam, now.adam, (size_t)s->na * 4) || s->steps != now.steps) {
        fprintf(stderr, "%s changed\n", what);
        fail();
    }
    free(now.values);
    free(now.grads);
    free(now.adam);
}

static void snap_free(snapshot *s)
{
    free(s->values);
    free(s->grads);
    free(s->adam);
}

static void isolation_body(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_d4pg_config c = small_cfg(3, 2);
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 9), RP_OK);
    batch_buf bb;
    batch_make(&bb, &c, 8, 300);
    rp_d4pg_step_stats st = {0};
    for (int i = 0; i < 2; i++) /* Adam's moments non-zero */
        assert_int_equal(rp_d4pg_learner_step(rep, L, &bb.b, &st), RP_OK);
    rp_tape *t = rp_replica_tape(rep);
    rp_params *pp = L->policy->params, *cp = L->critic.params;

    /* The critic pass leaves the policy alone. */
    snapshot pol = snap(pp, L->opt_policy);
    double v;
    assert_int_equal(d4pg_critic_pass(t, L, &bb.b, true, &v, NULL), RP_OK);
    snap_equal(&pol, pp, L->opt_policy, "the policy, by the critic pass");
    snapshot cri = snap(cp, L->opt_critic);
    assert_true(max_abs(cri.grads, cri.ng) > 0);

    /* The policy pass leaves the critic alone: values, gradients, Adam state, step count. */
    assert_int_equal(d4pg_policy_pass(t, L, &bb.b, true, &v, NULL), RP_OK);
    snap_equal(&cri, cp, L->opt_critic, "the critic, by the policy pass");
    float *pg = tu_param_grads(pp);
    assert_true(max_abs(pg, pol.ng) > 0);
    free(pg);
    snap_free(&pol);

    /* The critic's optimizer step leaves the policy's values, gradients and state alone. */
    pol = snap(pp, L->opt_policy);
    assert_int_equal(rp_optimizer_step(L->opt_critic, c.critic_lr), RP_OK);
    snap_equal(&pol, pp, L->opt_policy, "the policy, by the critic's step");
    assert_int_equal(rp_optimizer_step(L->opt_policy, c.policy_lr), RP_OK);
    snap_free(&pol);
    snap_free(&cri);
    batch_free(&bb);
    rp_d4pg_learner_destroy(L);
}

static void test_passes_isolated(void **state)
{
    (void)state;
    run_one(isolation_body, NULL);
}

static void target_body(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_d4pg_config c = small_cfg(3, 2);
    c.target_update_period = 3;
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 11), RP_OK);
    rp_params *on[2] = {L->policy->params, L->critic.params};
    rp_params *tg[2] = {L->target_policy->params, L->target_critic.params};
    float *want[2] = {NULL, NULL};
    for (int step = 0; step < 8; step++) {
        batch_buf bb;
        batch_make(&bb, &c, 8, 400 + 10 * (uint64_t)step);
        if (step % 3 == 0)
            for (int k = 0; k < 2; k++) {
                free(want[k]);
                want[k] = tu_read_values(on[k]);
            }
        assert_int_equal(rp_d4pg_learner_step(rep, L, &bb.b, NULL), RP_OK);
        assert_int_equal(rp_d4pg_learner_steps(L), step + 1);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(rp_params_numel(tg[k]), rp_params_numel(on[k]));
            /* The target holds the online values of the start of the last multiple of 3 ... */
            assert_true(values_are(tg[k], want[k]));
            /* ... which the online networks have since left. */
            assert_false(values_are(on[k], want[k]));
        }
        batch_free(&bb);
    }
    free(want[0]);
    free(want[1]);
    rp_d4pg_learner_destroy(L);
}

static void test_target_update_period(void **state)
{
    (void)state;
    run_one(target_body, NULL);
}

/* ---- 2 replicas x B/2 == 1 replica x B, with clipping active
 * ------------------------------------- */

enum { DP_B = 16, DP_STEPS = 4 };

typedef struct dp_job {
    rp_d4pg_config cfg;
    batch_buf batches[DP_STEPS];
    rp_d4pg_learner *L[2];
    double critic_norm, policy_norm; /* replica 0's, last step */
    float *out[2][4];                /* per local replica: policy, critic, targets */
} dp_job;

static rp_status dp_step(rp_replica *rep, void *arg)
{
    dp_job *j = arg;
    int me = rp_replica_local_index(rep), nrep = rp_replica_count(rep);
    RP_CHECK(rp_d4pg_learner_create(rep, &j->L[me], &j->cfg, 21));
    rp_d4pg_learner *L = j->L[me];
    int per = DP_B / nrep;
    for (int s = 0; s < DP_STEPS; s++) {
        rp_d4pg_batch b = batch_rows(&j->batches[s], &j->cfg, rp_replica_id(rep) * per, per);
        rp_d4pg_step_stats st = {0};
        RP_CHECK(rp_d4pg_learner_step(rep, L, &b, &st));
        if (me == 0) {
            j->critic_norm = st.critic_grad_norm;
            j->policy_norm = st.policy_grad_norm;
        }
    }
    rp_params *ps[4] = {L->policy->params, L->critic.params, L->target_policy->params,
                        L->target_critic.params};
    for (int k = 0; k < 4; k++)
        j->out[me][k] = tu_read_values(ps[k]);
    rp_d4pg_learner_destroy(L);
    return RP_OK;
}

static void dp_run(dp_job *j, int replicas)
{
    rp_config c = rp_config_default();
    c.backend = RP_BACKEND_THREADS;
    c.replicas = replicas;
    c.threads_per_replica = 1;
    c.checksum_every = 1;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &c), RP_OK);
    rp_status s = rp_replicator_run(r, dp_step, j);
    if (s != RP_OK) fprintf(stderr, "%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    rp_replicator_destroy(r);
}

static void test_replicas_match_one(void **state)
{
    (void)state;
    dp_job one, two;
    memset(&one, 0, sizeof one);
    one.cfg = small_cfg(3, 2);
    one.cfg.clip_grad_norm = 0.05f; /* well below the gradients' norms: clipping is active */
    for (int s = 0; s < DP_STEPS; s++)
        batch_make(&one.batches[s], &one.cfg, DP_B, 500 + 10 * (uint64_t)s);
    two = one;
    dp_run(&one, 1);
    double norms1[2] = {one.critic_norm, one.policy_norm};
    dp_run(&two, 2);
    assert_true(norms1[0] > 2 * one.cfg.clip_grad_norm && norms1[1] > 2 * one.cfg.clip_grad_norm);
    /* The same pre-clip norm on both layouts: clipped after the all-reduce. */
    assert_true(fabs(two.critic_norm - norms1[0]) < 1e-4 * norms1[0]);
    assert_true(fabs(two.policy_norm - norms1[1]) < 1e-4 * norms1[1]);
    const char *what[4] = {"policy", "critic", "target policy", "target critic"};
    int64_t n[4];
    {
        rp_d4pg_policy *p;
        assert_int_equal(rp_d4pg_policy_create(&p, &one.cfg), RP_OK);
        n[0] = n[2] = rp_params_numel(rp_d4pg_policy_params(p));
        rp_d4pg_policy_destroy(p);
        d4pg_critic cr = {0};
        assert_int_equal(d4pg_critic_build(&cr, &one.cfg, 0), RP_OK);
        n[1] = n[3] = rp_params_numel(cr.params);
        d4pg_critic_free(&cr);
    }
    for (int k = 0; k < 4; k++) {
        tu_check_close(two.out[0][k], one.out[0][k], n[k], 1e-5, what[k]);
        assert_memory_equal(two.out[0][k], two.out[1][k], (size_t)n[k] * sizeof(float));
        free(one.out[0][k]);
        free(two.out[0][k]);
        free(two.out[1][k]);
    }
    for (int s = 0; s < DP_STEPS; s++)
        batch_free(&one.batches[s]);
}

/* ---- learning a contextual bandit
 * ------------------------------------------------------------------ */

/* One step, reward -(a - a*(s))^2 with a*(s) = 0.8 s_0, d = 0: Q should learn r, pi should reach
 * a*. */
static void bandit_fill(batch_buf *bb, int n, uint64_t seed)
{
    tu_fill(bb->obs, (int64_t)n * 2, seed, -1, 1);
    memcpy(bb->next_obs, bb->obs, sizeof(float) * (size_t)n * 2);
    tu_fill(bb->act, n, seed + 1, -1, 1);
    for (int i = 0; i < n; i++) {
        float e = bb->act[i] - 0.8f * bb->obs[2 * i];
        bb->reward[i] = -e * e;
        bb->discount[i] = 0;
    }
}

static void bandit_eval(rp_d4pg_learner *L, rp_tape *t, double *q_err, double *pi_err)
{
    enum { N = 256 };
    static float obs[N * 2], act[N], q[N], pi[N];
    tu_fill(obs, N * 2, 999, -1, 1);
    tu_fill(act, N, 998, -1, 1);
    rp_tape_reset(t);
    assert_int_equal(rp_d4pg_learner_q(L, t, obs, act, N, q), RP_OK);
    assert_int_equal(rp_d4pg_policy_act(L->policy, t, obs, N, 0, NULL, pi), RP_OK);
    rp_tape_reset(t);
    *q_err = *pi_err = 0;
    for (int i = 0; i < N; i++) {
        float e = act[i] - 0.8f * obs[2 * i];
        *q_err += fabs(q[i] + e * e) / N;
        *pi_err += fabs(pi[i] - 0.8f * obs[2 * i]) / N;
    }
}

static void bandit_body(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_d4pg_config c = rp_d4pg_config_default();
    c.obs_dim = 2;
    c.act_dim = 1;
    c.policy_layers[0] = c.policy_layers[1] = 64;
    c.policy_layers[2] = 0;
    c.critic_layers[0] = c.critic_layers[1] = 64;
    c.critic_layers[2] = 0;
    c.v_min = -4;
    c.v_max = 1;
    c.policy_lr = 1e-3f;
    c.critic_lr = 1e-3f;
    c.target_update_period = 20;
    rp_d4pg_learner *L;
    assert_int_equal(rp_d4pg_learner_create(rep, &L, &c, 17), RP_OK);
    rp_tape *t = rp_replica_tape(rep);
    double q0, p0, q1, p1;
    bandit_eval(L, t, &q0, &p0);
    enum { B = 64 };
    batch_buf bb;
    batch_make(&bb, &c, B, 1);
    rp_d4pg_step_stats st = {0};
    for (int s = 0; s < 500; s++) {
        bandit_fill(&bb, B, 1000 + 2 * (uint64_t)s);
        assert_int_equal(rp_d4pg_learner_step(rep, L, &bb.b, &st), RP_OK);
    }
    bandit_eval(L, t, &q1, &p1);
    fprintf(stderr, "bandit: |Q - r| %.3f -> %.3f, |pi - a*| %.3f -> %.3f\n", q0, q1, p0, p1);
    assert_true(q0 > 0.5 && p0 > 0.3);
    assert_true(q1 < 0.15);
    assert_true(p1 < 0.1);
    batch_free(&bb);
    rp_d4pg_learner_destroy(L);
}

static void test_learns_bandit(void **state)
{
    (void)state;
    run_one(bandit_body, NULL);
}

/* ---- checkpoint: a bit-exact resume
 * ------------------------------------------------------------------ */

/* arg non-NULL: the learners run in bf16 (the replica's tape policy), and resume as bitwise. */
static void resume_body(rp_replica *rep, void *arg)
{
    if (arg)
        assert_int_equal(
            rp_tape_set_precision(rp_replica_tape(rep), rp_precision_policy_make(RP_BF16)), RP_OK);
    rp_d4pg_config c = small_cfg(3, 2);
    rp_d4pg_learner *A, *B;
    assert_int_equal(rp_d4pg_learner_create(rep, &A, &c, 31), RP_OK);
    batch_buf bb[7];
    for (int s = 0; s < 7; s++)
        batch_make(&bb[s], &c, 8, 700 + 10 * (uint64_t)s);
    for (int s = 0; s < 4; s++)
        assert_int_equal(rp_d4pg_learner_step(rep, A, &bb[s].b, NULL), RP_OK);
    rp_checkpoint *ck, *back;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_d4pg_learner_save(A, ck), RP_OK);
    char path[512];
    assert_int_equal(rp_checkpoint_save(ck, tu_tmp_path(path, sizeof path, "d4pg.safetensors")),
                     RP_OK);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);

    /* Another learner (other seed) takes the state: both go on bitwise together. */
    assert_int_equal(rp_d4pg_learner_create(rep, &B, &c, 32), RP_OK);
    assert_false(same_values(A->critic.params, B->critic.params));
    assert_int_equal(rp_d4pg_learner_load(B, back), RP_OK);
    assert_int_equal(rp_d4pg_learner_steps(B), 4);
    for (int s = 4; s < 7; s++) { /* step 6 updates the targets */
        assert_int_equal(rp_d4pg_learner_step(rep, A, &bb[s].b, NULL), RP_OK);
        assert_int_equal(rp_d4pg_learner_step(rep, B, &bb[s].b, NULL), RP_OK);
    }
    rp_params *pa[4] = {A->policy->params, A->critic.params, A->target_policy->params,
                        A->target_critic.params};
    rp_params *pb[4] = {B->policy->params, B->critic.params, B->target_policy->params,
                        B->target_critic.params};
    for (int k = 0; k < 4; k++)
        assert_true(same_values(pa[k], pb[k]));
    rp_optimizer *oa[2] = {A->opt_policy, A->opt_critic}, *ob[2] = {B->opt_policy, B->opt_critic};
    for (int k = 0; k < 2; k++) {
        int64_t na, nb;
        float *sa = tu_optimizer_state(oa[k], &na);
        float *sb = tu_optimizer_state(ob[k], &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(sa, sb, (size_t)na * sizeof(float));
        free(sb);
        free(sa);
        assert_int_equal(rp_optimizer_steps(oa[k]), rp_optimizer_steps(ob[k]));
    }

    /* A checkpoint of another shape is refused, and nothing of B changes. */
    rp_d4pg_config c2 = c;
    c2.critic_layers[1] = 8;
    rp_d4pg_learner *C;
    assert_int_equal(rp_d4pg_learner_create(rep, &C, &c2, 33), RP_OK);
    rp_checkpoint *ck2;
    assert_int_equal(rp_checkpoint_create(&ck2), RP_OK);
    assert_int_equal(rp_d4pg_learner_save(C, ck2), RP_OK);
    float *keep = tu_read_values(B->policy->params);
    assert_int_equal(rp_d4pg_learner_load(B, ck2), RP_ERR_SHAPE);
    tu_assert_error_contains("critic");
    assert_true(values_are(B->policy->params, keep));
    assert_int_equal(rp_d4pg_learner_steps(B), 7);
    free(keep);
    rp_checkpoint_destroy(ck2);
    rp_d4pg_learner_destroy(C);
    for (int s = 0; s < 7; s++)
        batch_free(&bb[s]);
    rp_checkpoint_destroy(ck);
    rp_checkpoint_destroy(back);
    rp_d4pg_learner_destroy(A);
    rp_d4pg_learner_destroy(B);
    /* Still the policy it ran with (nothing in the learner reset it). */
    assert_int_equal(rp_tape_precision(rp_replica_tape(rep)).compute, arg ? RP_BF16 : RP_F32);
}

static void test_resume_bit_exact(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("d4pg"), 0);
    run_one(resume_body, NULL);
    tu_tmpdir_remove();
}

static void test_resume_bit_exact_bf16(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("d4pg"), 0);
    run_one(resume_body, "bf16");
    tu_tmpdir_remove();
}

static void test_config_check(void **state)
{
    (void)state;
    rp_d4pg_config c = rp_d4pg_config_default();
    assert_int_equal(rp_d4pg_config_check(&c), RP_ERR_INVALID); /* obs_dim unset */
    tu_assert_error_contains("obs_dim");
    c.obs_dim = 5;
    c.act_dim = 1;
    assert_int_equal(rp_d4pg_config_check(&c), RP_OK);
    c.act_min[0] = 1;
    assert_int_equal(rp_d4pg_config_check(&c), RP_ERR_INVALID);
    tu_assert_error_contains("dimension 0");
    c = rp_d4pg_config_default();
    c.obs_dim = 5;
    c.act_dim = 1;
    c.policy_layers[1] = 0; /* a gap in the list */
    assert_int_equal(rp_d4pg_config_check(&c), RP_ERR_INVALID);
    tu_assert_error_contains("policy_layers[2]");
    c = rp_d4pg_config_default();
    c.obs_dim = 5;
    c.act_dim = 1;
    c.atoms = 1;
    assert_int_equal(rp_d4pg_config_check(&c), RP_ERR_INVALID);
    tu_assert_error_contains("atoms 1");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_project_by_hand),
        cmocka_unit_test(test_project_matches_l2_kernel),
        cmocka_unit_test(test_policy_shapes_init_bounds),
        cmocka_unit_test(test_policy_noise),
        cmocka_unit_test(test_critic_shapes),
        cmocka_unit_test(test_gradcheck_critic),
        cmocka_unit_test(test_gradcheck_policy),
        cmocka_unit_test(test_dqda_clipping),
        cmocka_unit_test(test_passes_isolated),
        cmocka_unit_test(test_target_update_period),
        cmocka_unit_test(test_replicas_match_one),
        cmocka_unit_test(test_learns_bandit),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_resume_bit_exact_bf16),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
