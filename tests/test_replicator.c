/*
 * test_replicator.c - the replicator (replicator/runtime.h) end to end on a
 * small conv net: replicas stay bitwise identical after every step, the
 * build broadcasts replica 0's values, N replicas with cross-replica batch
 * norm train like one replica on the whole batch, runs are deterministic,
 * reports are reduced with their op, errors come back as the root cause
 * (failed replica, mismatched collective, late replica) quickly, the
 * parameter checksum catches a diverged replica, the input context splits
 * the batch, and the gradient all-reduce runs during backward, in buckets.
 *
 * The model: x [b,8,8,2] NHWC -> conv 3x3 (2->4, pad 1, no bias) -> batch
 * norm -> relu -> global average pool -> linear 4->4 -> softmax
 * cross-entropy. Sample i of the data is a function of i only (a Philox
 * stream at position i*SAMPLE), label i % 4, so sample i is the same
 * whichever replica holds it. At step s the global batch is samples
 * [s*B, (s+1)*B); replica r of N takes [s*B + r*B/N, s*B + (r+1)*B/N).
 *
 * Assertions are made on the test's thread only: functions run on the
 * replicas report through return codes and their per-replica state, which
 * the test reads between runs (rp_replicator_replica + rp_replica_user).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- data and model ------------------------------------------------------------ */

#define IMG          8
#define CH           2
#define FEAT         4
#define CLASSES      4
#define SAMPLE       (IMG * IMG * CH)
#define BATCH        12 /* global batch: divisible by 1, 2, 3 and 4 replicas */
#define STEPS        5
#define MAX_REPLICAS 4
#define TIMEOUT_S    30.0 /* bounds every wait of the healthy runs */

static const uint64_t DATA_KEY = 0x5eed0fda7aULL;

static int label_of(int64_t i)
{
    return (int)(i % CLASSES);
}

/* Sample i: uniform noise plus a class signal on one channel. */
static void fill_sample(float *x, int64_t i)
{
    rp_rng_fill_uniform(DATA_KEY, (uint64_t)i * SAMPLE, x, SAMPLE, -1.0f, 1.0f);
    int y = label_of(i);
    for (int p = 0; p < IMG * IMG; p++)
        x[p * CH + (y & 1)] += y < 2 ? 0.6f : -0.6f;
}

typedef struct model {
    rp_params *params;
    rp_conv2d_layer conv;
    rp_batchnorm_layer bn;
    rp_linear_layer fc;
} model;

/* Declares and initialises the model; bn_rep non-NULL makes the batch norm cross-replica. */
static rp_status model_build(model *m, uint64_t seed, rp_replica *bn_rep)
{
    RP_CHECK(rp_params_create(&m->params));
    RP_CHECK(rp_conv2d_layer_init(&m->conv, m->params, "conv", CH, FEAT, 3, 1, 1, false));
    RP_CHECK(rp_batchnorm_layer_init(&m->bn, m->params, "bn", FEAT));
    if (bn_rep) {
        m->bn.p.reduce = rp_cross_replica_bn;
        m->bn.p.reduce_ctx = bn_rep;
    }
    RP_CHECK(rp_linear_layer_init(&m->fc, m->params, "fc", FEAT, CLASSES, true, false));
    return rp_params_finalize(m->params, seed);
}

/* The mean cross-entropy of samples [first, first+b) on tape t (NULL on error). */
static rp_tensor *model_loss(rp_tape *t, const model *m, int64_t first, int b)
{
    rp_tensor *x = rp_tensor_new(t, 4, (int[]){b, IMG, IMG, CH});
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), (size_t)b * sizeof(int32_t));
    /* The samples are made on the host (the tape's host arena) and written into x's storage. */
    float *hx = rp_arena_alloc(rp_tape_arena(t), (size_t)b * SAMPLE * sizeof(float));
    if (!x || !y || !hx) return NULL;
    for (int i = 0; i < b; i++) {
        fill_sample(hx + (int64_t)i * SAMPLE, first + i);
        y[i] = label_of(first + i);
    }
    if (rp_tensor_write(x, hx, (int64_t)b * SAMPLE) != RP_OK) return NULL;
    rp_tensor *h = rp_conv2d_layer_forward(t, &m->conv, x);
    h = rp_relu(t, rp_batchnorm_layer_forward(t, &m->bn, h, true));
    h = rp_linear_layer_forward(t, &m->fc, rp_global_avg_pool(t, h));
    return rp_softmax_cross_entropy(t, h, y);
}

/* ---- the job: build, step and teardown functions run on every replica ------------ */

typedef struct job {
    int global_batch;
    bool cross_bn;  /* cross-replica batch norm */
    bool vary_seed; /* each replica initialises from its own seed */
    uint64_t seed;
    float lr;
    int step;           /* set by the test before each step run */
    bool extra_reports; /* also report replica ids with SUM/MAX/MIN/FIRST */
    bool probe;         /* record sequences and gradients around backward */
} job;

static job job_default(void)
{
    job j;
    memset(&j, 0, sizeof j);
    j.global_batch = BATCH;
    j.cross_bn = true;
    j.seed = 7;
    j.lr = 0.1f;
    return j;
}

typedef struct replica_state {
    model m;
    rp_optimizer *opt;
    float *init_local;  /* values from this replica's own initialisation */
    float *init_synced; /* values right after rp_replica_optimizer_create */
    double loss;        /* the loss this replica computed in the last step */
    /* probe: a private copy of the model on a private tape gives the local gradient */
    model shadow;
    rp_tape *shadow_tape;
    float *local_grad; /* this replica's own gradient of the step (before any all-reduce) */
    float *grad_after_backward;
    uint64_t seq_before_backward, seq_after_backward, seq_after_step;
} replica_state;

static replica_state *state_of(rp_replicator *r, int i)
{
    rp_replica *rep = rp_replicator_replica(r, i);
    return rep ? rp_replica_user(rep) : NULL;
}

/*
 * Host copies of a parameter list's value block and of an optimizer's state (both are the kernel
 * table's storage), malloc'd; NULL on failure (they run on replica threads too: no asserts).
 */
static float *copy_values(const rp_params *p)
{
    float *c = malloc((size_t)rp_params_numel(p) * sizeof(float));
    if (c && rp_params_read_values(p, c) != RP_OK) {
        free(c);
        c = NULL;
    }
    return c;
}

static float *copy_state(const rp_optimizer *opt, int64_t *numel)
{
    rp_optimizer_state(opt, numel);
    float *c = malloc((size_t)(*numel > 0 ? *numel : 1) * sizeof(float));
    if (c && rp_optimizer_read_state(opt, c) != RP_OK) {
        free(c);
        c = NULL;
    }
    return c;
}

/* One tensor's values, read into a host copy (a parameter's storage is the kernel table's). */
static float *copy_tensor(const rp_tensor *x)
{
    float *c = malloc((size_t)x->numel * sizeof(float));
    if (c && rp_tensor_read(x, c, x->numel) != RP_OK) {
        free(c);
        c = NULL;
    }
    return c;
}

static rp_status build_fn(rp_replica *rep, void *arg)
{
    const job *j = arg;
    replica_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "test state");
    rp_replica_set_user(rep, s);
    uint64_t seed = j->vary_seed ? j->seed + 1000 * (uint64_t)(rp_replica_id(rep) + 1) : j->seed;
    RP_CHECK(model_build(&s->m, seed, j->cross_bn ? rep : NULL));
    s->init_local = copy_values(s->m.params);
    if (!s->init_local) return RP_ERROR(RP_ERR_NOMEM, "test state");
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_SGD;
    oc.momentum = 0.9f;
    oc.weight_decay = 1e-4f;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->m.params, &oc));
    s->init_synced = copy_values(s->m.params);
    if (!s->init_synced) return RP_ERROR(RP_ERR_NOMEM, "test state");
    if (j->probe) {
        RP_CHECK(model_build(&s->shadow, j->seed, j->cross_bn ? rep : NULL));
        RP_CHECK(rp_tape_create(&s->shadow_tape, 0));
        int64_t tn = rp_params_trainable_numel(s->m.params);
        s->local_grad = calloc((size_t)tn, sizeof(float));
        s->grad_after_backward = calloc((size_t)tn, sizeof(float));
        if (!s->local_grad || !s->grad_after_backward) return RP_ERROR(RP_ERR_NOMEM, "test state");
    }
    return RP_OK;
}

static rp_status step_fn(rp_replica *rep, void *arg)
{
    const job *j = arg;
    replica_state *s = rp_replica_user(rep);
    if (!s) return RP_ERROR(RP_ERR_INVALID, "replica %d was not built", rp_replica_id(rep));
    rp_input_context ctx;
    RP_CHECK(rp_replica_input_context(rep, j->global_batch, &ctx));
    int64_t first =
        (int64_t)j->step * ctx.global_batch + (int64_t)ctx.replica * ctx.per_replica_batch;
    int b = ctx.per_replica_batch;

    if (j->probe) {
        /* The same values, data and local batch norm on a tape no optimizer listens to. */
        rp_tape_reset(s->shadow_tape);
        float *values = copy_values(s->m.params);
        if (!values) return RP_ERROR(RP_ERR_NOMEM, "test state");
        rp_status status = rp_params_write_values(s->shadow.params, values);
        free(values);
        RP_CHECK(status);
        rp_params_zero_grad(s->shadow.params);
        rp_tensor *sl = model_loss(s->shadow_tape, &s->shadow, first, b);
        if (!sl) return rp_last_status();
        RP_CHECK(rp_backward(s->shadow_tape, sl));
        RP_CHECK(rp_params_read_grads(s->shadow.params, s->local_grad));
    }

    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *loss = model_loss(t, &s->m, first, b);
    if (!loss) return rp_last_status();
    s->loss = rp_item(loss);
    s->seq_before_backward = rp_comm_sequence(rp_replica_comm(rep));
    RP_CHECK(rp_backward(t, loss));
    s->seq_after_backward = rp_comm_sequence(rp_replica_comm(rep));
    if (j->probe) RP_CHECK(rp_params_read_grads(s->m.params, s->grad_after_backward));
    RP_CHECK(rp_optimizer_step(s->opt, j->lr));
    s->seq_after_step = rp_comm_sequence(rp_replica_comm(rep));
    RP_CHECK(rp_replica_report(rep, "loss", s->loss, RP_MEAN));
    if (j->extra_reports) {
        /* v = (id+2) % 4 over 4 replicas: 2, 3, 0, 1 - max at replica 1, min at replica 2. */
        double v = (rp_replica_id(rep) + 2) % 4;
        RP_CHECK(rp_replica_report(rep, "v_sum", v, RP_SUM));
        RP_CHECK(rp_replica_report(rep, "v_max", v, RP_MAX));
        RP_CHECK(rp_replica_report(rep, "v_min", v, RP_MIN));
        RP_CHECK(rp_replica_report(rep, "v_first", v, RP_FIRST));
        RP_CHECK(rp_replica_report(rep, "v_mean", v, RP_MEAN));
    }
    return RP_OK;
}

/* Frees a replica's state (inside a run, so the tape was reset before the parameters go). */
static rp_status teardown_fn(rp_replica *rep, void *arg)
{
    replica_state *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->m.params);
    rp_tape_destroy(s->shadow_tape);
    rp_params_destroy(s->shadow.params);
    free(s->init_local);
    free(s->init_synced);
    free(s->local_grad);
    free(s->grad_after_backward);
    free(s);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

/* ---- harness -------------------------------------------------------------------- */

static rp_config test_config(int replicas)
{
    rp_config cfg = rp_config_default();
    cfg.replicas = replicas;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = TIMEOUT_S;
    cfg.checksum_every = 0;
    return cfg;
}

static rp_replicator *make(const rp_config *cfg)
{
    rp_replicator *r = tu_replicator_make(cfg);
    assert_int_equal(rp_replicator_replicas(r), cfg->replicas);
    return r;
}

/* Frees every replica's state and the replicator; `healthy`: the teardown run must succeed. */
static void finish(rp_replicator *r, bool healthy)
{
    rp_status st = rp_replicator_run(r, teardown_fn, NULL);
    if (healthy) assert_int_equal(st, RP_OK);
    for (int i = 0; i < rp_replicator_replicas(r); i++)
        assert_null(state_of(r, i));
    rp_replicator_destroy(r);
}

static void run_step(rp_replicator *r, job *j, int step)
{
    j->step = step;
    tu_run_ok(r, step_fn, j);
}

static double seconds_since(double t0)
{
    return rp_now_s() - t0;
}

static bool floats_equal(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/*
 * Trains a fresh replicator of `replicas` for STEPS steps; returns replica
 * 0's value block (malloc'd, numel in *numel) and the reported mean loss of
 * each step in losses[STEPS].
 */
static float *train_fresh(int replicas, job j, int64_t *numel, double *losses)
{
    rp_config cfg = test_config(replicas);
    rp_replicator *r = make(&cfg);
    tu_run_ok(r, build_fn, &j);
    for (int step = 0; step < STEPS; step++) {
        run_step(r, &j, step);
        assert_int_equal(rp_replicator_result(r, "loss", &losses[step]), RP_OK);
        assert_true(isfinite(losses[step]));
    }
    replica_state *s0 = state_of(r, 0);
    *numel = rp_params_numel(s0->m.params);
    float *values = copy_values(s0->m.params);
    assert_non_null(values);
    finish(r, true);
    return values;
}

/* ---- 1. the replicas stay bitwise identical --------------------------------------- */

static void check_sync_invariant(int replicas)
{
    rp_config cfg = test_config(replicas);
    rp_replicator *r = make(&cfg);
    job j = job_default();
    tu_run_ok(r, build_fn, &j);
    replica_state *s0 = state_of(r, 0);
    int64_t numel = rp_params_numel(s0->m.params), tn = rp_params_trainable_numel(s0->m.params);
    assert_true(numel > tn); /* the running statistics are part of the compared block */
    float *prev = copy_values(s0->m.params);
    assert_non_null(prev);
    for (int step = 0; step < STEPS; step++) {
        run_step(r, &j, step);
        float *v0 = copy_values(s0->m.params);
        int64_t sn0 = 0;
        float *st0 = copy_state(s0->opt, &sn0);
        assert_non_null(v0);
        assert_non_null(st0);
        /* The step changed the model (trainable values and running statistics alike)... */
        assert_false(floats_equal(v0, prev, tn));
        assert_false(floats_equal(v0 + tn, prev + tn, numel - tn));
        memcpy(prev, v0, (size_t)numel * sizeof(float));
        /* ...and every replica holds exactly replica 0's values and momentum. */
        for (int i = 0; i < replicas; i++) {
            replica_state *s = state_of(r, i);
            assert_int_equal(rp_params_numel(s->m.params), numel);
            float *v = copy_values(s->m.params);
            assert_non_null(v);
            if (!floats_equal(v, v0, numel)) {
                print_error("%d replicas, step %d: replica %d's values differ from replica 0's\n",
                            replicas, step, i);
                fail();
            }
            free(v);
            int64_t sn = 0;
            float *st = copy_state(s->opt, &sn);
            assert_non_null(st);
            assert_int_equal(sn, sn0);
            assert_true(floats_equal(st, st0, sn0));
            free(st);
            assert_int_equal(rp_optimizer_steps(s->opt), step + 1);
        }
        free(v0);
        free(st0);
    }
    free(prev);
    finish(r, true);
}

static void test_sync_invariant_2(void **state)
{
    check_sync_invariant(2);
}
static void test_sync_invariant_3(void **state)
{
    check_sync_invariant(3);
}
static void test_sync_invariant_4(void **state)
{
    check_sync_invariant(4);
}

/* ---- 2. the build broadcasts replica 0's values ------------------------------------ */

static void test_broadcast_at_build(void **state)
{
    const int n = 3;
    rp_config cfg = test_config(n);
    rp_replicator *r = make(&cfg);
    job j = job_default();
    j.vary_seed = true;
    tu_run_ok(r, build_fn, &j);
    replica_state *s0 = state_of(r, 0);
    int64_t numel = rp_params_numel(s0->m.params), tn = rp_params_trainable_numel(s0->m.params);
    for (int i = 1; i < n; i++) {
        replica_state *s = state_of(r, i);
        /* The seeds really gave different initial values... */
        assert_false(floats_equal(s->init_local, s0->init_local, tn));
    }
    for (int i = 0; i < n; i++) {
        replica_state *s = state_of(r, i);
        /* ...and the optimizer's creation replaced them with replica 0's. */
        assert_true(floats_equal(s->init_synced, s0->init_local, numel));
        float *v = copy_values(s->m.params);
        assert_non_null(v);
        assert_true(floats_equal(v, s0->init_local, numel));
        free(v);
    }
    /* Training from there keeps them together. */
    run_step(r, &j, 0);
    float *v0 = copy_values(s0->m.params);
    assert_non_null(v0);
    for (int i = 1; i < n; i++) {
        float *v = copy_values(state_of(r, i)->m.params);
        assert_non_null(v);
        assert_true(floats_equal(v, v0, numel));
        free(v);
    }
    free(v0);
    finish(r, true);
}

/* ---- 3. N replicas with cross-replica batch norm = 1 replica on the whole batch ---- */

/*
 * Tolerance, per element of the value block (trainable values and running
 * statistics): |a - b| <= 1e-5 * max(1, |b|), b the one-replica value
 * (tu_max_rel_diff). The per-step mean losses are held to the same bound.
 */
#define EQUIV_TOL 1e-5

static double loss_diff(const double *a, const double *b)
{
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        double d = fabs(a[s] - b[s]) / fmax(1.0, fabs(b[s]));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

static void test_equivalence_with_one_replica(void **state)
{
    job j = job_default();
    int64_t n1 = 0;
    double ref_losses[STEPS];
    float *ref = train_fresh(1, j, &n1, ref_losses);

    const int counts[2] = {2, 4};
    for (int k = 0; k < 2; k++) {
        int64_t n = 0;
        double losses[STEPS];
        float *got = train_fresh(counts[k], j, &n, losses);
        assert_int_equal(n, n1);
        double d = tu_max_rel_diff(got, ref, n), dl = loss_diff(losses, ref_losses);
        if (!(d <= EQUIV_TOL) || !(dl <= EQUIV_TOL)) {
            print_error("%d replicas vs 1: values differ by %.3g, losses by %.3g (tolerance %g)\n",
                        counts[k], d, dl, EQUIV_TOL);
            fail();
        }
        free(got);
    }

    /* The comparison has teeth: batch norm over each replica's quarter of the batch differs. */
    j.cross_bn = false;
    int64_t n = 0;
    double losses[STEPS];
    float *local = train_fresh(4, j, &n, losses);
    double d = tu_max_rel_diff(local, ref, n);
    if (!(d > EQUIV_TOL)) {
        print_error("4 replicas with local batch norm match 1 replica within %.3g\n", d);
        fail();
    }
    free(local);
    free(ref);
}

/* ---- 4. determinism ------------------------------------------------------------------ */

static void test_determinism(void **state)
{
    job j = job_default();
    int64_t na = 0, nb = 0;
    double la[STEPS], lb[STEPS];
    float *a = train_fresh(3, j, &na, la);
    float *b = train_fresh(3, j, &nb, lb);
    assert_int_equal(na, nb);
    assert_true(floats_equal(a, b, na));
    assert_memory_equal(la, lb, sizeof la);
    /* Not trivially equal: training moved the values away from the initialisation. */
    model m;
    memset(&m, 0, sizeof m);
    assert_int_equal(model_build(&m, j.seed, NULL), RP_OK);
    float *init = copy_values(m.params);
    assert_non_null(init);
    assert_false(floats_equal(a, init, rp_params_trainable_numel(m.params)));
    free(init);
    rp_params_destroy(m.params);
    free(a);
    free(b);
}

/* ---- 5. reports -------------------------------------------------------------------- */

static void test_reports_reduced(void **state)
{
    const int n = 4;
    rp_config cfg = test_config(n);
    rp_replicator *r = make(&cfg);
    job j = job_default();
    j.extra_reports = true;
    tu_run_ok(r, build_fn, &j);
    run_step(r, &j, 0);

    /* The mean of the losses the replicas computed, added in replica order. */
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += state_of(r, i)->loss;
    double mean_loss = 0;
    assert_int_equal(rp_replicator_result(r, "loss", &mean_loss), RP_OK);
    assert_true(mean_loss == sum / n);
    /* Each replica had its own loss, so the mean is not any one of them. */
    assert_true(state_of(r, 0)->loss != state_of(r, 1)->loss);
    for (int i = 0; i < n; i++)
        assert_true(mean_loss != state_of(r, i)->loss);

    /* v = 2, 3, 0, 1 on replicas 0..3. */
    double v = -1;
    assert_int_equal(rp_replicator_result(r, "v_sum", &v), RP_OK);
    assert_true(v == 6.0);
    assert_int_equal(rp_replicator_result(r, "v_max", &v), RP_OK);
    assert_true(v == 3.0);
    assert_int_equal(rp_replicator_result(r, "v_min", &v), RP_OK);
    assert_true(v == 0.0);
    assert_int_equal(rp_replicator_result(r, "v_first", &v), RP_OK);
    assert_true(v == 2.0);
    assert_int_equal(rp_replicator_result(r, "v_mean", &v), RP_OK);
    assert_true(v == 1.5);

    /* A name nobody reported. */
    assert_int_equal(rp_replicator_result(r, "v_nope", &v), RP_ERR_INVALID);
    tu_assert_error_contains("v_nope");

    /* A later run replaces the results. */
    j.extra_reports = false;
    run_step(r, &j, 1);
    assert_int_equal(rp_replicator_result(r, "v_sum", &v), RP_ERR_INVALID);
    assert_int_equal(rp_replicator_result(r, "loss", &v), RP_OK);
    assert_true(v != mean_loss);
    finish(r, true);
}

/* mode 0: all alike; 1: replica 2 reports one value more; 2: replica 1 names its second value
 * differently. */
static rp_status report_fn(rp_replica *rep, void *arg)
{
    int mode = *(const int *)arg, id = rp_replica_id(rep);
    RP_CHECK(rp_replica_report(rep, "a", id, RP_SUM));
    RP_CHECK(rp_replica_report(rep, mode == 2 && id == 1 ? "x" : "b", id, RP_MAX));
    if (mode == 1 && id == 2) RP_CHECK(rp_replica_report(rep, "c", id, RP_SUM));
    return RP_OK;
}

static void test_report_mismatch(void **state)
{
    for (int mode = 0; mode < 3; mode++) {
        rp_config cfg = test_config(3);
        rp_replicator *r = make(&cfg);
        double t0 = rp_now_s();
        rp_status st = rp_replicator_run(r, report_fn, &mode);
        assert_true(seconds_since(t0) < 5.0);
        if (mode == 0) {
            /* The control: the same reports everywhere are fine. */
            assert_int_equal(st, RP_OK);
            double v = 0;
            assert_int_equal(rp_replicator_result(r, "a", &v), RP_OK);
            assert_true(v == 3.0);
            assert_int_equal(rp_replicator_result(r, "b", &v), RP_OK);
            assert_true(v == 2.0);
        } else {
            if (st != RP_ERR_MISMATCH)
                print_error("mode %d: %s: %s\n", mode, rp_status_name(st), rp_last_error());
            assert_int_equal(st, RP_ERR_MISMATCH);
        }
        rp_replicator_destroy(r);
    }
}

/* ---- 6. errors: the root cause, quickly -------------------------------------------- */

typedef struct err_job {
    rp_status status[MAX_REPLICAS];
    char message[MAX_REPLICAS][1024];
    double returned_at[MAX_REPLICAS]; /* seconds after t0 when the collective returned */
    double t0;
    double sleep_s;
} err_job;

static void note(err_job *j, int id, rp_status st)
{
    j->status[id] = st;
    snprintf(j->message[id], sizeof j->message[id], "%s", st == RP_OK ? "" : rp_last_error());
    j->returned_at[id] = seconds_since(j->t0);
}

/* Replica 1 fails (after a moment, so its peers are already waiting); the others all-reduce. */
static rp_status fail_fn(rp_replica *rep, void *arg)
{
    err_job *j = arg;
    int id = rp_replica_id(rep);
    if (id == 1) {
        tu_sleep_s(0.05);
        return RP_ERROR(RP_ERR_NUMERIC, "nan on purpose");
    }
    float buf[16] = {0};
    rp_status st = rp_all_reduce(rep, buf, buf, 16, RP_F32, RP_SUM);
    note(j, id, st);
    return st;
}

static rp_status barrier_fn(rp_replica *rep, void *arg)
{
    err_job *j = arg;
    int id = rp_replica_id(rep);
    if (j->sleep_s > 0 && id == 1) tu_sleep_s(j->sleep_s);
    rp_status st = rp_barrier(rep);
    note(j, id, st);
    return st;
}

static void test_error_failed_replica(void **state)
{
    const int n = 3;
    rp_config cfg = test_config(n);
    rp_replicator *r = make(&cfg);
    err_job j;
    memset(&j, 0, sizeof j);
    j.t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, fail_fn, &j);
    double took = seconds_since(j.t0);
    if (st != RP_ERR_NUMERIC) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_ERR_NUMERIC);
    tu_assert_error_contains("replica 1");
    tu_assert_error_contains("nan on purpose");
    assert_true(took < 5.0); /* reported at once, not at the 30 s timeout */
    /* The peers' all-reduce failed too, naming the replica that left. */
    for (int i = 0; i < n; i++) {
        if (i == 1) continue;
        assert_int_not_equal(j.status[i], RP_OK);
        if (!strstr(j.message[i], "replica 1")) {
            print_error("replica %d's error does not name replica 1: %s\n", i, j.message[i]);
            fail();
        }
    }

    /* The communicator is broken now: a later collective fails at once. */
    memset(&j, 0, sizeof j);
    j.t0 = rp_now_s();
    st = rp_replicator_run(r, barrier_fn, &j);
    assert_int_equal(st, RP_ERR_COMM);
    assert_true(seconds_since(j.t0) < 5.0);
    for (int i = 0; i < n; i++)
        assert_int_equal(j.status[i], RP_ERR_COMM);
    rp_replicator_destroy(r);
}

/* Replica 1 all-reduces 9 floats, the others 7. */
static rp_status count_mismatch_fn(rp_replica *rep, void *arg)
{
    err_job *j = arg;
    int id = rp_replica_id(rep);
    float buf[9] = {0};
    rp_status st = rp_all_reduce(rep, buf, buf, id == 1 ? 9 : 7, RP_F32, RP_SUM);
    note(j, id, st);
    return st;
}

static void test_error_count_mismatch(void **state)
{
    const int n = 3;
    rp_config cfg = test_config(n);
    rp_replicator *r = make(&cfg);
    err_job j;
    memset(&j, 0, sizeof j);
    j.t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, count_mismatch_fn, &j);
    if (st != RP_ERR_MISMATCH) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_ERR_MISMATCH);
    tu_assert_error_contains("count 7");
    tu_assert_error_contains("count 9");
    assert_true(seconds_since(j.t0) < 5.0);
    /* Every member got the mismatch, not only one. */
    for (int i = 0; i < n; i++)
        assert_int_equal(j.status[i], RP_ERR_MISMATCH);
    rp_replicator_destroy(r);
}

static void test_error_timeout(void **state)
{
    const int n = 3;
    rp_config cfg = test_config(n);
    cfg.timeout_s = 0.3;
    rp_replicator *r = make(&cfg);
    err_job j;
    memset(&j, 0, sizeof j);
    j.sleep_s = 1.5;
    j.t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, barrier_fn, &j);
    double took = seconds_since(j.t0);
    if (st != RP_ERR_TIMEOUT) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_ERR_TIMEOUT);
    /* The cause is a waiting replica's timeout; its message names the late one. */
    tu_assert_error_contains("replica 1");
    assert_true(took < 4.0);
    /* The waiting replicas gave up at their timeout, long before replica 1 woke up. */
    for (int i = 0; i < n; i++) {
        if (i == 1) continue;
        assert_int_equal(j.status[i], RP_ERR_TIMEOUT);
        if (!(j.returned_at[i] >= 0.25 && j.returned_at[i] < 1.4)) {
            print_error(
                "replica %d's barrier returned after %.3f s (timeout 0.3 s, sleeper 1.5 s)\n", i,
                j.returned_at[i]);
            fail();
        }
        if (!strstr(j.message[i], "replica 1")) {
            print_error("replica %d's error does not name replica 1: %s\n", i, j.message[i]);
            fail();
        }
    }
    /* The late replica arrives at a broken communicator. */
    assert_int_not_equal(j.status[1], RP_OK);
    rp_replicator_destroy(r);
}

/* ---- 7. the checksum catches a replica that diverged ------------------------------- */

/*
 * Moves bn.bias[1] of replica 1 by 0.01 between runs (enough to survive the
 * rounding of the next update), then runs a step.
 * Returns the step's status; *still_differs tells whether bn.bias differs
 * between the replicas afterwards, *others_equal whether every other
 * trainable value agrees.
 */
static rp_status diverge_one(int checksum_every, bool *still_differs, bool *others_equal)
{
    rp_config cfg = test_config(2);
    cfg.checksum_every = checksum_every;
    rp_replicator *r = make(&cfg);
    job j = job_default();
    tu_run_ok(r, build_fn, &j);
    run_step(r, &j, 0); /* the checksum (if any) passes while the replicas agree */
    run_step(r, &j, 1);
    replica_state *s0 = state_of(r, 0), *s1 = state_of(r, 1);
    rp_tensor *b1 = rp_params_find(s1->m.params, "bn.bias");
    assert_non_null(b1);
    float *moved = copy_tensor(b1);
    assert_non_null(moved);
    moved[1] += 0.01f;
    assert_int_equal(rp_tensor_write(b1, moved, b1->numel), RP_OK);
    free(moved);
    j.step = 2;
    rp_status st = rp_replicator_run(r, step_fn, &j);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    rp_tensor *b0 = rp_params_find(s0->m.params, "bn.bias");
    *others_equal = true;
    *still_differs = false;
    for (int i = 0; i < rp_params_trainable_count(s0->m.params); i++) {
        rp_tensor *p0 = rp_params_at(s0->m.params, i), *p1 = rp_params_at(s1->m.params, i);
        float *v0 = copy_tensor(p0), *v1 = copy_tensor(p1);
        assert_non_null(v0);
        assert_non_null(v1);
        bool equal = floats_equal(v0, v1, p0->numel);
        if (p0 == b0)
            *still_differs = !equal;
        else if (!equal)
            *others_equal = false;
        free(v0);
        free(v1);
    }
    finish(r, false);
    if (st != RP_OK)
        rp_error_set(st, NULL, 0, "%s", msg); /* the step's error, for the caller's checks */
    return st;
}

static void test_divergence_detected(void **state)
{
    bool differs = false, others_equal = false;
    rp_status st = diverge_one(1, &differs, &others_equal);
    if (st != RP_ERR_MISMATCH) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_ERR_MISMATCH);
    tu_assert_error_contains("bn.bias");
    /* It names the parameter that differs, not merely the first one. */
    assert_null(strstr(rp_last_error(), "conv.weight"));
    assert_true(differs);
    assert_true(others_equal);

    /* Without the checksum the same divergence goes unnoticed: the check is what caught it. */
    differs = false;
    others_equal = false;
    st = diverge_one(0, &differs, &others_equal);
    if (st != RP_OK) print_error("%s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_true(differs);
    assert_true(others_equal);
}

/* ---- 8. the input context: sync splits each batch among the replicas, async does not ---- */

static rp_status context_fn(rp_replica *rep, void *arg)
{
    rp_input_context *out = arg;
    return rp_replica_input_context(rep, 12, &out[rp_replica_id(rep)]);
}

static void test_input_context(void **state)
{
    const int n = 4;
    rp_config cfg = test_config(n);
    rp_replicator *r = make(&cfg);
    assert_null(rp_replicator_replica(r, -1));
    assert_null(rp_replicator_replica(r, n));
    rp_input_context got[MAX_REPLICAS];
    memset(got, 0xff, sizeof got);
    tu_run_ok(r, context_fn, got);
    for (int i = 0; i < n; i++) {
        rp_replica *rep = rp_replicator_replica(r, i);
        assert_non_null(rep);
        assert_int_equal(rp_replica_id(rep), i);
        assert_int_equal(rp_replica_count(rep), n);
        assert_int_equal(got[i].replica, i);
        assert_int_equal(got[i].replicas, n);
        assert_int_equal(got[i].pipeline, i);
        assert_int_equal(got[i].pipelines, n);
        assert_int_equal(got[i].global_batch, 12);
        assert_int_equal(got[i].per_replica_batch, 3);
        /* Between runs too. */
        rp_input_context c;
        assert_int_equal(rp_replica_input_context(rep, 12, &c), RP_OK);
        assert_int_equal(c.per_replica_batch, 3);
        assert_int_equal(c.replica, i);
        assert_int_equal(rp_replica_input_context(rep, 10, &c), RP_ERR_INVALID);
        tu_assert_error_contains("10");
    }
    rp_replicator_destroy(r);

    /* Async: each batch goes to one replica (rp_replica_next_batch), which trains all of it. */
    cfg.regime = RP_REGIME_ASYNC;
    r = make(&cfg);
    memset(got, 0xff, sizeof got);
    tu_run_ok(r, context_fn, got);
    for (int i = 0; i < n; i++) {
        assert_int_equal(got[i].replica, 0);
        assert_int_equal(got[i].replicas, 1);
        assert_int_equal(got[i].pipeline, i);
        assert_int_equal(got[i].pipelines, n);
        assert_int_equal(got[i].global_batch, 12);
        assert_int_equal(got[i].per_replica_batch, 12);
        rp_input_context c;
        assert_int_equal(rp_replica_input_context(rp_replicator_replica(r, i), 10, &c), RP_OK);
        assert_int_equal(c.per_replica_batch, 10);
    }
    rp_replicator_destroy(r);
}

/* ---- 9. the gradient all-reduce runs during backward, in buckets -------------------- */

static void check_buckets(size_t bucket_bytes, uint64_t min_in_backward)
{
    const int n = 3;
    rp_config cfg = test_config(n);
    cfg.bucket_bytes = bucket_bytes;
    rp_replicator *r = make(&cfg);
    job j = job_default();
    j.cross_bn = false; /* the only collectives in backward are then the gradients' */
    j.probe = true;
    tu_run_ok(r, build_fn, &j);
    replica_state *s0 = state_of(r, 0);
    int64_t tn = rp_params_trainable_numel(s0->m.params);
    for (int step = 0; step < 2; step++) {
        run_step(r, &j, step);
        for (int i = 0; i < n; i++) {
            replica_state *s = state_of(r, i);
            uint64_t in_backward = s->seq_after_backward - s->seq_before_backward;
            if (in_backward < min_in_backward) {
                print_error("bucket_bytes %zu: replica %d made %llu collectives in backward, want "
                            ">= %llu\n",
                            bucket_bytes, i, (unsigned long long)in_backward,
                            (unsigned long long)min_in_backward);
                fail();
            }
            /* Every parameter was used, so nothing was left for the step (no checksum either). */
            assert_true(s->seq_after_step == s->seq_after_backward);
            /* Right after backward, before the step, the gradients already agree bitwise... */
            assert_true(floats_equal(s->grad_after_backward, s0->grad_after_backward, tn));
        }
        /* ...and are the mean of the replicas' own gradients, which differ from each other. */
        double spread = 0, scale = 0;
        for (int64_t e = 0; e < tn; e++) {
            double sum = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                double g = state_of(r, i)->local_grad[e];
                sum += g;
                mag += fabs(g);
            }
            double mean = sum / n, got = s0->grad_after_backward[e];
            if (!(fabs(got - mean) <= 1e-6 * mag / n + 1e-12)) {
                print_error(
                    "step %d, gradient %lld: %.9g after backward, mean of the replicas' %.9g\n",
                    step, (long long)e, got, mean);
                fail();
            }
            spread = fmax(spread, fabs((double)state_of(r, 0)->local_grad[e] -
                                       state_of(r, 1)->local_grad[e]));
            scale = fmax(scale, fabs(mean));
        }
        assert_true(scale > 0);
        assert_true(spread > 1e-3 * scale);
    }
    finish(r, true);
}

/* 400 bytes of gradients in buckets of 64: at least two buckets, all reduced in backward. */
static void test_buckets_small(void **state)
{
    check_buckets(64, 2);
}
/* One bucket holding everything: still reduced in backward, once its last gradient is final. */
static void test_buckets_one(void **state)
{
    check_buckets((size_t)1 << 30, 1);
}

/* ---- replicas that use different parameters; gradient accumulation ------------------ */

/* Two parameters P[4], Q[4], both ones; plain SGD with lr 1, so p -= mean gradient. */
typedef struct pq_state {
    rp_params *ps;
    rp_tensor *p, *q;
    rp_optimizer *opt;
} pq_state;

typedef struct pq_job {
    pq_state st[2];
    int mode; /* 0: replica 0 uses only P, replica 1 only Q; 1: two backward passes on both */
} pq_job;

static rp_status pq_build(rp_replica *rep, void *arg)
{
    pq_job *j = arg;
    pq_state *s = &j->st[rp_replica_id(rep)];
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->ps));
    rp_init ones = {RP_INIT_CONSTANT, 1.0f, 1, 1};
    s->p = rp_params_add(s->ps, "P", 1, (int[]){4}, ones, true);
    s->q = rp_params_add(s->ps, "Q", 1, (int[]){4}, ones, true);
    if (!s->p || !s->q) return rp_last_status();
    RP_CHECK(rp_params_finalize(s->ps, 1));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0;
    return rp_replica_optimizer_create(rep, &s->opt, s->ps, &oc);
}

/* loss = sum(w * x) (+ sum(w2 * x)) with x = scale * [1, 2, 3, 4]: the gradient of each is x. */
static rp_status pq_backward(rp_tape *t, rp_tensor *w, rp_tensor *w2, float scale)
{
    float x[4] = {scale, 2 * scale, 3 * scale, 4 * scale};
    rp_tensor *xt = rp_tensor_from(t, 1, (int[]){4}, x);
    rp_tensor *loss = rp_sum(t, rp_mul(t, w, xt));
    if (w2) loss = rp_add(t, loss, rp_sum(t, rp_mul(t, w2, xt)));
    if (!loss) return rp_last_status();
    return rp_backward(t, loss);
}

static rp_status pq_step(rp_replica *rep, void *arg)
{
    pq_job *j = arg;
    pq_state *s = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    int id = rp_replica_id(rep);
    if (j->mode == 0) {
        RP_CHECK(pq_backward(t, id == 0 ? s->p : s->q, NULL, id == 0 ? 1.0f : 10.0f));
    } else {
        /* The first pass completes (and reduces) both buckets; the second completes them again. */
        RP_CHECK(pq_backward(t, s->p, s->q, id == 0 ? 1.0f : 10.0f));
        rp_tape_reset(t); /* parameter gradients survive a reset: they accumulate */
        RP_CHECK(pq_backward(t, s->p, s->q, id == 0 ? 100.0f : 1000.0f));
    }
    return rp_optimizer_step(s->opt, 1.0f);
}

static rp_status pq_teardown(rp_replica *rep, void *arg)
{
    pq_state *s = rp_replica_user(rep);
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->ps);
    return RP_OK;
}

static void check_pq(int mode, const float *want_p, const float *want_q)
{
    rp_config cfg = test_config(2);
    cfg.bucket_bytes = 16;  /* one bucket per parameter */
    cfg.checksum_every = 0; /* the values themselves are compared below */
    rp_replicator *r = make(&cfg);
    pq_job j;
    memset(&j, 0, sizeof j);
    j.mode = mode;
    tu_run_ok(r, pq_build, &j);
    tu_run_ok(r, pq_step, &j);
    for (int id = 0; id < 2; id++)
        for (int i = 0; i < 4; i++) {
            assert_float_equal(rp_tensor_get(j.st[id].p, i), want_p[i], 1e-5);
            assert_float_equal(rp_tensor_get(j.st[id].q, i), want_q[i], 1e-5);
        }
    tu_run_ok(r, pq_teardown, &j);
    rp_replicator_destroy(r);
}

/*
 * Replica 0 uses only P and replica 1 only Q: each bucket still gets the
 * mean over replicas (an unused parameter contributes a zero gradient), on
 * both replicas. Reducing buckets in completion order would swap P's and
 * Q's gradients between the replicas here.
 */
static void test_different_parameters_per_replica(void **state)
{
    const float p[4] = {1 - 0.5f, 1 - 1.0f, 1 - 1.5f, 1 - 2.0f};
    const float q[4] = {1 - 5.0f, 1 - 10.0f, 1 - 15.0f, 1 - 20.0f};
    check_pq(0, p, q);
}

/* Two backward passes before one step: the update is the mean of the accumulated gradients. */
static void test_gradient_accumulation(void **state)
{
    /* Replica 0 accumulates 101 x, replica 1 1010 x: the mean is 555.5 x. */
    const float p[4] = {1 - 555.5f, 1 - 1111.0f, 1 - 1666.5f, 1 - 2222.0f};
    check_pq(1, p, p);
}

/* ---- rp_config_from_args --------------------------------------------------------------- */

static void test_config_from_args(void **state)
{
    char *argv[] = {
        "prog", "--replicas",     "4",   "--epochs",    "3",         "--threads-per-replica",
        "2",    "--comm-timeout", "2.5", "--bucket-kb", "64",        "--checksum-every",
        "0",    "--seed",         "7",   "rest",        "--backend", "threads",
        NULL};
    int argc = 18;
    rp_config cfg = rp_config_default();
    assert_int_equal(rp_config_from_args(&cfg, &argc, argv), RP_OK);
    assert_int_equal(cfg.replicas, 4);
    assert_int_equal(cfg.threads_per_replica, 2);
    assert_true(cfg.timeout_s == 2.5);
    assert_int_equal(cfg.bucket_bytes, 64 << 10);
    assert_int_equal(cfg.checksum_every, 0);
    assert_int_equal(cfg.seed, 7);
    assert_int_equal(cfg.backend, RP_BACKEND_THREADS);
    /* What the runtime does not know stays, in order. */
    assert_int_equal(argc, 4);
    assert_string_equal(argv[1], "--epochs");
    assert_string_equal(argv[2], "3");
    assert_string_equal(argv[3], "rest");
    assert_null(argv[4]);

    char *bad[] = {"prog", "--replicas", "0", NULL};
    argc = 3;
    assert_int_equal(rp_config_from_args(&cfg, &argc, bad), RP_ERR_INVALID);
    assert_non_null(strstr(rp_last_error(), "--replicas 0"));
    char *missing[] = {"prog", "--comm-timeout", NULL};
    argc = 2;
    assert_int_equal(rp_config_from_args(&cfg, &argc, missing), RP_ERR_INVALID);
    assert_non_null(strstr(rp_last_error(), "--comm-timeout"));
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_invariant_2),
        cmocka_unit_test(test_sync_invariant_3),
        cmocka_unit_test(test_sync_invariant_4),
        cmocka_unit_test(test_broadcast_at_build),
        cmocka_unit_test(test_equivalence_with_one_replica),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_reports_reduced),
        cmocka_unit_test(test_report_mismatch),
        cmocka_unit_test(test_error_failed_replica),
        cmocka_unit_test(test_error_count_mismatch),
        cmocka_unit_test(test_error_timeout),
        cmocka_unit_test(test_divergence_detected),
        cmocka_unit_test(test_input_context),
        cmocka_unit_test(test_buckets_small),
        cmocka_unit_test(test_buckets_one),
        cmocka_unit_test(test_different_parameters_per_replica),
        cmocka_unit_test(test_gradient_accumulation),
        cmocka_unit_test(test_config_from_args),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
