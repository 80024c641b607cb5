/*
 * test_pipeline.c - the pipeline schedules (nn.h, src/nn/pipeline.c) on P
 * threads with a threads-backend communicator, one stage per member.
 *
 * Equivalence. A 4-layer MLP (8 -> 16 -> 16 -> 12 -> 4, ReLU / tanh /
 * ReLU, mean-squared-error loss) is split by layers into P = 2 stages
 * ({0,1} {2,3}) and P = 3 ({0,1} {2} {3}); each stage declares its layers
 * under the unsplit model's names, so it holds the same initial values.
 * GPipe and 1F1B with M = 1, 2, 4 micro-batches (M < P included) must give
 * the loss and every parameter gradient of plain gradient accumulation on
 * the unsplit model: M forwards and backwards on one tape, each seeded with
 * 1/M. The arithmetic is the same op for op (the received gradient is added
 * to zeros), so the test asks for bitwise equality; and the two schedules
 * must equal each other bitwise.
 *
 * Failures. With a 2 s comm timeout, a stage function that returns an error
 * on micro-batch 1 makes every stage's run fail well within the timeout,
 * and every message names the failing stage; a stage that dies (its thread
 * never runs the pipeline) fails the others by the timeout, naming its
 * replica. Bad arguments are errors, not hangs.
 *
 * The bubble. Stages whose work is a sleep (3 ms forward, 6 ms backward)
 * model a device that does not share the CPU; the idle fraction of the
 * slowest stage is printed for M = 1, 2, 4, 8 on P = 2 next to
 * (P - 1) / (M + P - 1), the best of 5 runs. Printed, not asserted.
 *
 * cmocka's asserts are not thread-safe, so member threads record what they
 * see and the main thread asserts.
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define MAX_P   3
#define LAYERS  4
#define BATCH   8
#define SEED    7
#define TIMEOUT 2.0

static const int DIMS[LAYERS + 1] = {8, 16, 16, 12, 4};
static const int IDS[MAX_P] = {9000, 9037, 9074};

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct stage_ctx {
    int first, last; /* layers [first, last) */
    bool is_last;
    rp_params *params;
    rp_linear_layer lin[LAYERS];
    const float *target; /* [BATCH, DIMS[LAYERS]] */
    int fail_micro;      /* the stage function fails on this micro-batch; -1: never */
    /* the bubble's sleeping stages */
    double busy_s;
} stage_ctx;

static float g_x[BATCH * 8], g_target[BATCH * 4];

static rp_status declare_layers(rp_params *p, rp_linear_layer *lin, int first, int last)
{
    for (int l = first; l < last; l++) {
        char name[32];
        snprintf(name, sizeof name, "mlp.l%d", l);
        RP_CHECK(rp_linear_layer_init(&lin[l], p, name, DIMS[l], DIMS[l + 1], true, false));
    }
    return rp_params_finalize(p, SEED);
}

/* Layers [first, last) on x; the loss against the micro-batch's targets after the last layer. */
static rp_tensor *layers_forward(rp_tape *t, const rp_linear_layer *lin, int first, int last,
                                 rp_tensor *x, bool loss, const float *target, int micro)
{
    rp_tensor *h = x;
    for (int l = first; l < last; l++) {
        h = rp_linear_layer_forward(t, &lin[l], h);
        if (l == 0 || l == 2) h = rp_relu(t, h);
        if (l == 1) h = rp_tanh(t, h);
    }
    if (!loss || !h) return h;
    int rows = h->shape[0], shape[2] = {rows, DIMS[LAYERS]};
    rp_tensor *y = rp_tensor_from(t, 2, shape, target + (int64_t)micro * rows * DIMS[LAYERS]);
    return rp_mse(t, h, y);
}

static rp_tensor *mlp_stage(rp_tape *t, rp_tensor *x, int micro, void *ctx)
{
    stage_ctx *s = ctx;
    if (micro == s->fail_micro) {
        RP_ERROR(RP_ERR_NUMERIC, "the stage function refused micro-batch %d", micro);
        return NULL;
    }
    return layers_forward(t, s->lin, s->first, s->last, x, s->is_last, s->target, micro);
}

/* Plain gradient accumulation on the unsplit model: M micro-batches, each seeded with 1/M. */
static float reference(rp_params **out, int m_count)
{
    rp_params *p;
    rp_linear_layer lin[LAYERS];
    rp_tape *t;
    assert_int_equal(rp_params_create(&p), RP_OK);
    assert_int_equal(declare_layers(p, lin, 0, LAYERS), RP_OK);
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    int rows = BATCH / m_count, shape[2] = {rows, DIMS[0]};
    double sum = 0;
    for (int m = 0; m < m_count; m++) {
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 2, shape, g_x + (int64_t)m * rows * DIMS[0]);
        rp_tensor *loss = layers_forward(t, lin, 0, LAYERS, x, true, g_target, m);
        assert_non_null(loss);
        float seed = 1.0f / (float)m_count;
        assert_int_equal(rp_backward_from(t, loss, &seed), RP_OK);
        sum += (double)rp_item(loss);
    }
    rp_tape_destroy(t);
    *out = p;
    return (float)(sum / m_count);
}

/* ---- running a pipeline on P threads -------------------------------------------------------- */

typedef struct job {
    int P, M;
    rp_pipe_schedule schedule;
    rp_comm *comms[MAX_P];
    stage_ctx st[MAX_P];
    rp_pipe_stage_fn fn;
    const float *input; /* NULL: the full batch g_x */
    int input_rows;
    int dead; /* this stage's thread never runs the pipeline; -1: none */
    rp_status status[MAX_P];
    char error[MAX_P][1400];
    float loss[MAX_P];
    double elapsed[MAX_P];
} job;

typedef struct member_arg {
    job *j;
    int rank;
} member_arg;

static void *member_main(void *arg)
{
    member_arg *a = arg;
    job *j = a->j;
    int r = a->rank;
    double t0 = rp_now_s();
    j->error[r][0] = '\0';
    j->loss[r] = NAN;
    if (r == j->dead) { /* dies: returns without a word to its peers */
        j->status[r] = RP_ERR_INTERRUPTED;
        return NULL;
    }
    rp_pipeline *pl = NULL;
    /* Stage 0's batch, a leaf on a tape of its own (the pipeline copies micro-batches from it). */
    rp_tape *tin = NULL;
    rp_tensor *in = NULL;
    rp_status st = r == 0 ? rp_tape_create(&tin, 0) : RP_OK;
    if (st == RP_OK && r == 0) {
        in = rp_tensor_from(tin, 2, (int[]){j->input_rows, DIMS[0]}, j->input ? j->input : g_x);
        if (!in) st = rp_last_status();
    }
    if (st == RP_OK) st = rp_pipeline_create(&pl, j->comms[r], j->schedule, j->M);
    t0 = rp_now_s(); /* the run alone */
    if (st == RP_OK) st = rp_pipeline_run(pl, j->fn, &j->st[r], in, &j->loss[r]);
    j->status[r] = st;
    if (st != RP_OK) snprintf(j->error[r], sizeof j->error[r], "%s", rp_last_error());
    j->elapsed[r] = rp_now_s() - t0;
    rp_pipeline_destroy(pl);
    rp_tape_destroy(tin);
    return NULL;
}

static void run_job(job *j)
{
    pthread_t th[MAX_P];
    member_arg args[MAX_P];
    for (int r = 0; r < j->P; r++) {
        args[r] = (member_arg){j, r};
        assert_int_equal(pthread_create(&th[r], NULL, member_main, &args[r]), 0);
    }
    for (int r = 0; r < j->P; r++)
        pthread_join(th[r], NULL);
}

/* The MLP cut into P stages: P = 2: {0,1} {2,3}; P = 3: {0,1} {2} {3}. */
static void job_init(job *j, int P, int M, rp_pipe_schedule schedule, double timeout_s)
{
    static const int CUTS[MAX_P + 1][MAX_P + 1] = {{0}, {0, 4}, {0, 2, 4}, {0, 2, 3, 4}};
    memset(j, 0, sizeof *j);
    j->P = P;
    j->M = M;
    j->schedule = schedule;
    j->fn = mlp_stage;
    j->input_rows = BATCH;
    j->dead = -1;
    assert_int_equal(rp_comm_threads_create(j->comms, P, IDS, timeout_s), RP_OK);
    for (int r = 0; r < P; r++) {
        stage_ctx *s = &j->st[r];
        s->first = CUTS[P][r];
        s->last = CUTS[P][r + 1];
        s->is_last = r == P - 1;
        s->target = g_target;
        s->fail_micro = -1;
        assert_int_equal(rp_params_create(&s->params), RP_OK);
        assert_int_equal(declare_layers(s->params, s->lin, s->first, s->last), RP_OK);
    }
}

static void job_destroy(job *j)
{
    for (int r = 0; r < j->P; r++) {
        rp_params_destroy(j->st[r].params);
        rp_comm_destroy(j->comms[r]);
    }
}

static void expect_ok(const job *j, const char *what)
{
    for (int r = 0; r < j->P; r++)
        if (j->status[r] != RP_OK) fail_msg("%s: stage %d failed: %s", what, r, j->error[r]);
}

/*
 * Every trainable parameter of every stage of j against the parameter of the same name in ref
 * (bitwise, and the relative difference printed if not); returns the number compared.
 */
static int compare_grads(const job *j, const rp_params *ref, const char *what)
{
    int compared = 0;
    float *ref_v = tu_read_values(ref), *ref_g = tu_param_grads(ref);
    for (int r = 0; r < j->P; r++) {
        const rp_params *p = j->st[r].params;
        float *pv = tu_read_values(p), *pg = tu_param_grads(p);
        for (int i = 0; i < rp_params_trainable_count(p); i++) {
            const rp_tensor *a = rp_params_at(p, i);
            const rp_tensor *b = rp_params_find(ref, a->name);
            if (!b) fail_msg("%s: %s is not in the reference", what, a->name);
            assert_int_equal(a->numel, b->numel);
            const float *av = pv + rp_params_offset(p, i), *ag = pg + rp_params_offset(p, i);
            const float *bv = ref_v + rp_params_offset(ref, b->index);
            const float *bg = ref_g + rp_params_offset(ref, b->index);
            /* Values first: the stage holds the unsplit model's initial values. */
            if (memcmp(av, bv, (size_t)a->numel * sizeof(float)) != 0)
                fail_msg("%s: stage %d's %s differs from the unsplit model's values", what, r,
                         a->name);
            double biggest = 0;
            for (int64_t k = 0; k < a->numel; k++)
                biggest = fmax(biggest, fabs(bg[k]));
            if (!(biggest > 0)) fail_msg("%s: %s has an all-zero gradient", what, a->name);
            if (memcmp(ag, bg, (size_t)a->numel * sizeof(float)) != 0)
                fail_msg("%s: stage %d's gradient of %s is not bitwise the reference's "
                         "(max rel diff %.3g)",
                         what, r, a->name, tu_max_rel_diff(ag, bg, a->numel));
            compared++;
        }
        free(pg);
        free(pv);
    }
    free(ref_g);
    free(ref_v);
    return compared;
}

static void fill_data(void)
{
    tu_fill(g_x, BATCH * DIMS[0], 11, -1.0f, 1.0f);
    tu_fill(g_target, BATCH * DIMS[LAYERS], 12, -1.0f, 1.0f);
}

/* GPipe and 1F1B, P = 2 and 3, M = 1, 2, 4: equal to accumulation on the unsplit model and to
 * each other. */
static void test_schedules_equal_accumulation(void **state)
{
    (void)state;
    fill_data();
    static const int MS[] = {1, 2, 4};
    for (int P = 2; P <= 3; P++) {
        for (int mi = 0; mi < 3; mi++) {
            int M = MS[mi];
            rp_params *ref;
            float ref_loss = reference(&ref, M);
            job jobs[2];
            for (int sch = 0; sch < 2; sch++) {
                job *j = &jobs[sch];
                char what[64];
                snprintf(what, sizeof what, "%s, P = %d, M = %d",
                         rp_pipe_schedule_name((rp_pipe_schedule)sch), P, M);
                job_init(j, P, M, (rp_pipe_schedule)sch, 60.0);
                run_job(j);
                expect_ok(j, what);
                if (j->loss[P - 1] != ref_loss)
                    fail_msg("%s: loss %.9g, the unsplit model's %.9g", what, j->loss[P - 1],
                             ref_loss);
                for (int r = 0; r < P - 1; r++)
                    if (!isnan(j->loss[r]))
                        fail_msg("%s: stage %d reported loss %g (expected NAN)", what, r,
                                 j->loss[r]);
                assert_int_equal(compare_grads(j, ref, what), 2 * LAYERS);
            }
            /* The schedules against each other (implied above; stated for the record). */
            for (int r = 0; r < P; r++) {
                const rp_params *pa = jobs[0].st[r].params, *pb = jobs[1].st[r].params;
                float *ga = tu_param_grads(pa), *gb = tu_param_grads(pb);
                for (int i = 0; i < rp_params_trainable_count(pa); i++) {
                    const rp_tensor *a = rp_params_at(pa, i);
                    int64_t off = rp_params_offset(pa, i);
                    assert_int_equal(off, rp_params_offset(pb, i));
                    if (memcmp(ga + off, gb + off, (size_t)a->numel * sizeof(float)) != 0)
                        fail_msg("P = %d, M = %d: gpipe and 1f1b differ on %s", P, M, a->name);
                }
                free(gb);
                free(ga);
            }
            for (int sch = 0; sch < 2; sch++)
                job_destroy(&jobs[sch]);
            rp_params_destroy(ref);
        }
    }
}

/* Two runs accumulate: twice the gradient of one within 1e-6 (the contract says +=). */
static void test_runs_accumulate(void **state)
{
    (void)state;
    fill_data();
    rp_params *ref;
    reference(&ref, 2);
    job j;
    job_init(&j, 2, 2, RP_PIPE_1F1B, 60.0);
    run_job(&j);
    expect_ok(&j, "first run");
    run_job(&j);
    expect_ok(&j, "second run");
    float *ref_g = tu_param_grads(ref);
    for (int r = 0; r < 2; r++) {
        const rp_params *p = j.st[r].params;
        float *pg = tu_param_grads(p);
        for (int i = 0; i < rp_params_trainable_count(p); i++) {
            const rp_tensor *a = rp_params_at(p, i), *b = rp_params_find(ref, a->name);
            assert_non_null(b);
            const float *ag = pg + rp_params_offset(p, i);
            const float *bg = ref_g + rp_params_offset(ref, b->index);
            /* ((g0 + g1) + g0) + g1 against 2 (g0 + g1): rounding apart, not bitwise. */
            for (int64_t k = 0; k < a->numel; k++)
                if (!(fabs(ag[k] - 2.0f * bg[k]) <= 1e-6 * fmax(1.0, fabs(2.0 * bg[k]))))
                    fail_msg("%s[%lld]: %g after two runs, expected 2 x %g", a->name, (long long)k,
                             ag[k], bg[k]);
        }
        free(pg);
    }
    free(ref_g);
    job_destroy(&j);
    rp_params_destroy(ref);
}

/* A stage function that fails on micro-batch 1: every stage fails fast, naming it. */
static void test_failing_stage_fails_every_stage(void **state)
{
    (void)state;
    fill_data();
    for (int sch = 0; sch < 2; sch++)
        for (int bad = 0; bad < 3; bad++) {
            job j;
            job_init(&j, 3, 4, (rp_pipe_schedule)sch, TIMEOUT);
            j.st[bad].fail_micro = 1;
            run_job(&j);
            char needle[64];
            snprintf(needle, sizeof needle, "pipeline stage %d of 3 (%s, forward of micro-batch 1",
                     bad, rp_pipe_schedule_name((rp_pipe_schedule)sch));
            for (int r = 0; r < 3; r++) {
                if (j.status[r] == RP_OK)
                    fail_msg("%s, stage %d fails: stage %d returned RP_OK",
                             rp_pipe_schedule_name((rp_pipe_schedule)sch), bad, r);
                if (!strstr(j.error[r], needle))
                    fail_msg("stage %d's error does not name the failing stage (\"%s\"): %s", r,
                             needle, j.error[r]);
                if (!(j.elapsed[r] < TIMEOUT))
                    fail_msg("stage %d took %.2f s to fail (the comm timeout is %.1f s)", r,
                             j.elapsed[r], TIMEOUT);
            }
            if (getenv("RP_PIPE_VERBOSE"))
                for (int r = 0; r < 3; r++)
                    printf("# stage %d: %s\n", r, j.error[r]);
            assert_int_equal(j.status[bad], RP_ERR_NUMERIC);
            if (!strstr(j.error[bad], "refused micro-batch 1"))
                fail_msg("the failing stage's own error lost its cause: %s", j.error[bad]);
            job_destroy(&j);
        }
}

/* A stage that dies (never runs): its neighbours fail by the timeout, naming its replica. */
static void test_dead_stage_times_out(void **state)
{
    (void)state;
    fill_data();
    job j;
    job_init(&j, 3, 2, RP_PIPE_1F1B, TIMEOUT);
    j.dead = 1;
    run_job(&j);
    for (int r = 0; r < 3; r += 2) {
        if (j.status[r] == RP_OK) fail_msg("stage %d returned RP_OK with stage 1 dead", r);
        if (!strstr(j.error[r], "9037"))
            fail_msg("stage %d's error does not name the dead stage's replica 9037: %s", r,
                     j.error[r]);
        if (!strstr(j.error[r], "pipeline stage"))
            fail_msg("stage %d's error does not say it is the pipeline's: %s", r, j.error[r]);
        if (!(j.elapsed[r] < 3.0 * TIMEOUT))
            fail_msg("stage %d took %.2f s to fail (timeout %.1f s)", r, j.elapsed[r], TIMEOUT);
    }
    job_destroy(&j);
}

static rp_tensor *vector_loss_stage(rp_tape *t, rp_tensor *x, int micro, void *ctx)
{
    stage_ctx *s = ctx;
    return layers_forward(t, s->lin, s->first, s->last, x, false, NULL, micro);
}

/* Bad arguments: errors on the member that made them, and its peers fail at once, not hang. */
static void test_bad_arguments(void **state)
{
    (void)state;
    fill_data();
    rp_pipeline *pl = (rp_pipeline *)1;
    rp_comm *comms[1];
    assert_int_equal(rp_comm_threads_create(comms, 1, IDS, 5.0), RP_OK);
    assert_int_equal(rp_pipeline_create(&pl, comms[0], RP_PIPE_GPIPE, 0), RP_ERR_INVALID);
    assert_null(pl);
    tu_assert_error_contains("micro_batches is 0");
    assert_int_equal(rp_pipeline_create(&pl, comms[0], (rp_pipe_schedule)7, 2), RP_ERR_INVALID);
    tu_assert_error_contains("unknown schedule 7");
    assert_int_equal(rp_pipeline_create(&pl, NULL, RP_PIPE_1F1B, 2), RP_ERR_INVALID);
    assert_int_equal(rp_pipeline_create(&pl, comms[0], RP_PIPE_1F1B, 2), RP_OK);
    float loss = 0;
    assert_int_equal(rp_pipeline_run(pl, mlp_stage, NULL, NULL, &loss), RP_ERR_INVALID);
    assert_true(isnan(loss));
    tu_assert_error_contains("input batch is NULL");
    rp_pipeline_destroy(pl);
    rp_comm_destroy(comms[0]);

    /* A batch of 6 rows does not split into 4 micro-batches: stage 0 says so, stage 1 follows. */
    job j;
    job_init(&j, 2, 4, RP_PIPE_GPIPE, 20.0);
    j.input_rows = 6;
    run_job(&j);
    assert_int_equal(j.status[0], RP_ERR_SHAPE);
    assert_non_null(strstr(j.error[0], "does not split into 4"));
    assert_int_not_equal(j.status[1], RP_OK);
    assert_non_null(strstr(j.error[1], "does not split into 4"));
    assert_true(j.elapsed[1] < 10.0);
    job_destroy(&j);

    /* The last stage returns a vector, not a loss. */
    job_init(&j, 2, 2, RP_PIPE_1F1B, 20.0);
    j.fn = vector_loss_stage;
    run_job(&j);
    assert_int_equal(j.status[1], RP_ERR_SHAPE);
    assert_non_null(strstr(j.error[1], "must return a scalar loss, got shape [4, 4]"));
    assert_int_not_equal(j.status[0], RP_OK);
    assert_non_null(strstr(j.error[0], "pipeline stage 1 of 2"));
    assert_true(j.elapsed[0] < 10.0);
    job_destroy(&j);
}

/* ---- the bubble ----------------------------------------------------------------------------- */

#define SLEEP_F 0.003
#define SLEEP_B 0.006
#define REPS    5

static rp_status sleep_fwd(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    (void)n;
    stage_ctx *s = ctx;
    double t0 = rp_now_s();
    memcpy(out->data, in[0]->data, (size_t)out->numel * sizeof(float));
    tu_sleep_s(SLEEP_F);
    s->busy_s += rp_now_s() - t0;
    return RP_OK;
}

static rp_status sleep_bwd(void *ctx, const rp_tensor *out, const float *dout, rp_tensor *const *in,
                           float *const *din, int n)
{
    (void)in;
    (void)n;
    stage_ctx *s = ctx;
    double t0 = rp_now_s();
    if (din[0])
        for (int64_t k = 0; k < out->numel; k++)
            din[0][k] += dout[k];
    tu_sleep_s(SLEEP_B);
    s->busy_s += rp_now_s() - t0;
    return RP_OK;
}

static const rp_custom_op SLEEP_OP = {"sleep", sleep_fwd, sleep_bwd};

/* Stage 0: layer 0 then a sleep; stage 1: a sleep then the mean. The stages' work is the sleeps. */
static rp_tensor *sleep_stage(rp_tape *t, rp_tensor *x, int micro, void *ctx)
{
    (void)micro;
    stage_ctx *s = ctx;
    rp_tensor *h = s->first == 0 ? rp_linear_layer_forward(t, &s->lin[0], x) : x;
    RP_PROPAGATE_NULL(h);
    h = rp_custom(t, &SLEEP_OP, s, &h, 1, h->ndim, h->shape);
    return s->is_last ? rp_mean(t, h) : h;
}

static void test_bubble(void **state)
{
    (void)state;
    fill_data();
    printf("# pipeline bubble, P = 2, sleeping stages (%.0f ms forward, %.0f ms backward)\n",
           SLEEP_F * 1e3, SLEEP_B * 1e3);
    printf("#  M  gpipe  1f1b  (P-1)/(M+P-1)\n");
    static const int MS[] = {1, 2, 4, 8};
    for (int mi = 0; mi < 4; mi++) {
        int M = MS[mi];
        double bubble[2];
        for (int sch = 0; sch < 2; sch++) {
            /* The best of REPS runs: the CPUs are shared, and a late wake-up only adds idle. */
            bubble[sch] = 1.0;
            for (int rep = 0; rep < REPS; rep++) {
                job j;
                job_init(&j, 2, M, (rp_pipe_schedule)sch, 60.0);
                j.fn = sleep_stage;
                run_job(&j);
                expect_ok(&j, "bubble");
                /* The idle fraction of the stage that idled most: 1 - busy / wall. */
                double worst = 0;
                for (int r = 0; r < 2; r++)
                    worst = fmax(worst, 1.0 - j.st[r].busy_s / j.elapsed[r]);
                bubble[sch] = fmin(bubble[sch], worst);
                job_destroy(&j);
            }
        }
        printf("  %2d  %.3f  %.3f  %.3f\n", M, bubble[0], bubble[1], 1.0 / (M + 1.0));
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules_equal_accumulation),
        cmocka_unit_test(test_runs_accumulate),
        cmocka_unit_test(test_failing_stage_fails_every_stage),
        cmocka_unit_test(test_dead_stage_times_out),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bubble),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
