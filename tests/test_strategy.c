/*
 * test_strategy.c - the runtime's strategies and the errors that used to
 * mislead (replicator/runtime.h, optim.h):
 *  - optimizer hooks compose: befores in order added, afters in reverse, one
 *    update replacement, each release once; the older single slot still works;
 *  - a user hook stacks on the sync strategy: its `before` sees the
 *    all-reduced gradients, its `after` (an EMA) runs after the update;
 *  - gradients in bf16 on the wire (cfg.grad_dtype): the `before` sees
 *    exactly bf16(f32 sum of the replicas' bf16-rounded gradients / 2),
 *    widened, on both replicas; 40 steps keep the replicas bitwise identical
 *    and track the f32 run's loss within 1e-3 at every step;
 *  - --grad-dtype is parsed, and refused with async or another type;
 *  - one strategy choice: cfg.strategy, --strategy, and the older fields
 *    (regime, zero, sync_groups) as its spellings, which run the same table;
 *    a spelling that names another strategy than cfg.strategy is refused;
 *  - a NaN from one replica's data is reported as that replica's, naming the
 *    parameter, and nothing is updated;
 *  - a replica stuck in user code is named by the watchdog and run() returns;
 *    with stuck_exit the process ends with RP_STUCK_EXIT_CODE;
 *  - a plain optimizer that lets replicas diverge is caught after the run;
 *  - destroying the replicator before its optimizers is an error, not a crash.
 *
 * The model is one linear layer 4 -> 3 with a bias ("fc.w", "fc.b") and a
 * softmax cross-entropy; replica r's sample k of step s is a function of
 * (s, r, k), so replicas see different data.
 */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IN   4
#define OUT  3
#define B    4
#define MAXR 4

typedef struct net {
    rp_params *params;
    rp_linear_layer fc;
} net;

static rp_status net_build(net *m, uint64_t seed)
{
    RP_CHECK(rp_params_create(&m->params));
    RP_CHECK(rp_linear_layer_init(&m->fc, m->params, "fc", IN, OUT, true, false));
    RP_CHECK(rp_params_finalize(m->params, seed));
    /* No buffers: the value block is the trainable values, which the helpers below rely on. */
    if (rp_params_numel(m->params) != rp_params_trainable_numel(m->params))
        return RP_ERROR(RP_ERR_INVALID, "the test's net has buffers");
    return RP_OK;
}

/* The blocks are the kernel table's storage: the tests read and write them through host copies
   (these assert: the main thread only; the replicas' code checks the status instead). */
static void read_values(const rp_params *p, float *out)
{
    assert_int_equal(rp_params_read_values(p, out), RP_OK);
}

/* Whether two lists hold bitwise the same values. */
static bool same_values(const rp_params *a, const rp_params *b)
{
    int64_t n = rp_params_numel(a);
    assert_int_equal(n, rp_params_numel(b));
    float *va = malloc((size_t)n * sizeof(float)), *vb = malloc((size_t)n * sizeof(float));
    assert_non_null(va);
    assert_non_null(vb);
    read_values(a, va);
    read_values(b, vb);
    bool same = memcmp(va, vb, (size_t)n * sizeof(float)) == 0;
    free(va);
    free(vb);
    return same;
}

/* Whether the list holds bitwise the values `want` (its numel floats). */
static bool has_values(const rp_params *p, const float *want)
{
    int64_t n = rp_params_numel(p);
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    read_values(p, v);
    bool same = memcmp(v, want, (size_t)n * sizeof(float)) == 0;
    free(v);
    return same;
}

/* The loss of replica `who`'s batch at `step` (NULL on error); nan_at >= 0 poisons that input. */
static rp_tensor *net_loss(rp_tape *t, const net *m, int who, int step, int nan_at)
{
    rp_tensor *x = rp_tensor_new(t, 2, (int[]){B, IN});
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), B * sizeof(int32_t));
    if (!x || !y) return NULL;
    float xs[B * IN];
    tu_fill(xs, B * IN, (uint64_t)(1000 * step + who + 1), -1.0f, 1.0f);
    if (nan_at >= 0) xs[nan_at] = NAN;
    if (rp_tensor_write(x, xs, B * IN) != RP_OK) return NULL;
    for (int k = 0; k < B; k++)
        y[k] = (k + who) % OUT;
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &m->fc, x), y);
}

/* ---- 1. hooks compose (no runtime) ------------------------------------------------- */

typedef struct trace {
    char log[256];
    int released[8];
} trace;

typedef struct hook_ctx {
    trace *t;
    int id;
} hook_ctx;

static void say(trace *t, const char *what, int id)
{
    size_t n = strlen(t->log);
    snprintf(t->log + n, sizeof t->log - n, "%s%d ", what, id);
}

static rp_status h_before(rp_optimizer *opt, void *ctx)
{
    hook_ctx *c = ctx;
    say(c->t, "b", c->id);
    return RP_OK;
}

static rp_status h_after(rp_optimizer *opt, void *ctx)
{
    hook_ctx *c = ctx;
    say(c->t, "a", c->id);
    return RP_OK;
}

static rp_status h_update(rp_optimizer *opt, float lr, void *ctx)
{
    hook_ctx *c = ctx;
    say(c->t, "u", c->id);
    return RP_OK;
}

static void h_release(void *ctx)
{
    hook_ctx *c = ctx;
    c->t->released[c->id]++;
    say(c->t, "r", c->id);
}

static rp_status h_fail(rp_optimizer *opt, void *ctx)
{
    hook_ctx *c = ctx;
    say(c->t, "f", c->id);
    return RP_ERROR(RP_ERR_INVALID, "hook %d fails on purpose", c->id);
}

static void test_hooks_compose(void **state)
{
    net m;
    assert_int_equal(net_build(&m, 3), RP_OK);
    rp_optim_config oc = rp_optim_config_default();
    rp_optimizer *opt;
    assert_int_equal(rp_optimizer_create(&opt, m.params, &oc), RP_OK);
    trace t;
    memset(&t, 0, sizeof t);
    hook_ctx c[5] = {{&t, 0}, {&t, 1}, {&t, 2}, {&t, 3}, {&t, 4}};
    rp_optimizer_hooks h1 = {.before = h_before, .after = h_after, .release = h_release};
    rp_optimizer_hooks hu = {
        .before = h_before, .after = h_after, .update = h_update, .release = h_release};
    assert_int_equal(rp_optimizer_add_hooks(opt, &h1, &c[0]), RP_OK);
    assert_int_equal(rp_optimizer_add_hooks(opt, &hu, &c[1]), RP_OK);
    /* A second update replacement is refused, naming the set that has one; nothing is added. */
    assert_int_equal(rp_optimizer_add_hooks(opt, &hu, &c[2]), RP_ERR_INVALID);
    tu_assert_error_contains("hook set 1 already replaces the update");
    assert_int_equal(rp_optimizer_add_hooks(opt, NULL, &c[2]), RP_ERR_INVALID);
    /* The single slot: appended after the two sets, kept at its place when replaced. */
    rp_optimizer_set_hooks(opt, h_before, h_after, h_release, &c[3]);
    rp_optimizer_set_hooks(opt, h_before, h_after, h_release, &c[4]);
    assert_int_equal(t.released[3], 1);
    memset(t.log, 0, sizeof t.log);
    int64_t numel = rp_params_trainable_numel(m.params);
    float *before = malloc((size_t)numel * sizeof(float));
    read_values(m.params, before);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_OK);
    assert_string_equal(t.log, "b0 b1 b4 u1 a4 a1 a0 ");
    /* The replaced update ran instead of the rule: the values did not move. */
    assert_true(has_values(m.params, before));
    assert_int_equal(rp_optimizer_steps(opt), 1);
    /* The slot's update wins over an added set's; set_hooks clears it again. */
    rp_optimizer_set_update(opt, h_update);
    memset(t.log, 0, sizeof t.log);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_OK);
    assert_string_equal(t.log, "b0 b1 b4 u4 a4 a1 a0 ");
    rp_optimizer_set_hooks(opt, h_fail, NULL, h_release, &c[2]);
    assert_int_equal(t.released[4], 1);
    /* A failing before stops the step: later befores, the update and the afters do not run. */
    memset(t.log, 0, sizeof t.log);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_ERR_INVALID);
    tu_assert_error_contains("hook 2 fails on purpose");
    assert_string_equal(t.log, "b0 b1 f2 ");
    assert_int_equal(rp_optimizer_steps(opt), 2);
    /* Destroy releases every set once, in reverse order of adding. */
    memset(t.log, 0, sizeof t.log);
    rp_optimizer_destroy(opt);
    assert_string_equal(t.log, "r2 r1 r0 ");
    for (int i = 0; i < 5; i++)
        assert_int_equal(t.released[i], 1);
    free(before);
    rp_params_destroy(m.params);
}

/* ---- 2. a user hook stacks on the sync strategy ----------------------------------- */

typedef struct rstate {
    net m, shadow; /* shadow: the same values on a tape nobody reduces */
    rp_tape *shadow_tape;
    rp_optimizer *opt;
    float *local_grad; /* this replica's own gradient */
    float *seen_grad;  /* what the user's before-hook saw */
    float *pre_values, *post_values, *ema;
    float *copy; /* the values on their way to the shadow */
    int64_t steps_in_after;
    int hooks_released;
    float loss; /* of the last step */
} rstate;

typedef struct job {
    int step;
    int nan_replica; /* this replica poisons its data (-1: none) */
    bool user_hooks;
    bool plain;     /* a plain rp_optimizer_create instead of the replica optimizer */
    bool same_data; /* every replica takes replica 0's batch */
    rstate st[MAXR];
} job;

static rp_status user_before(rp_optimizer *opt, void *ctx)
{
    rstate *s = ctx;
    RP_CHECK(rp_params_read_grads(s->m.params, s->seen_grad));
    return rp_params_read_values(s->m.params, s->pre_values);
}

/* An exponential moving average of the values: it must see the updated ones. */
static rp_status user_after(rp_optimizer *opt, void *ctx)
{
    rstate *s = ctx;
    int64_t n = rp_params_trainable_numel(s->m.params);
    const float *p = s->post_values;
    RP_CHECK(rp_params_read_values(s->m.params, s->post_values));
    for (int64_t i = 0; i < n; i++)
        s->ema[i] = 0.5f * s->ema[i] + 0.5f * p[i];
    s->steps_in_after = rp_optimizer_steps(opt);
    return RP_OK;
}

static void user_release(void *ctx)
{
    rstate *s = ctx;
    s->hooks_released++;
}

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    rstate *s = &j->st[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    RP_CHECK(net_build(&s->m, 11));
    RP_CHECK(net_build(&s->shadow, 11));
    RP_CHECK(rp_tape_create(&s->shadow_tape, 0));
    int64_t n = rp_params_trainable_numel(s->m.params);
    s->local_grad = calloc((size_t)n, sizeof(float));
    s->seen_grad = calloc((size_t)n, sizeof(float));
    s->pre_values = calloc((size_t)n, sizeof(float));
    s->post_values = calloc((size_t)n, sizeof(float));
    s->ema = calloc((size_t)n, sizeof(float));
    s->copy = calloc((size_t)n, sizeof(float));
    if (!s->local_grad || !s->seen_grad || !s->pre_values || !s->post_values || !s->ema || !s->copy)
        return RP_ERROR(RP_ERR_NOMEM, "test state");
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0;
    if (j->plain)
        RP_CHECK(rp_optimizer_create(&s->opt, s->m.params, &oc));
    else
        RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->m.params, &oc));
    if (j->user_hooks) {
        rp_optimizer_hooks h = {
            .before = user_before, .after = user_after, .release = user_release};
        RP_CHECK(rp_optimizer_add_hooks(s->opt, &h, s));
    }
    return RP_OK;
}

static rp_status step(rp_replica *rep, void *arg)
{
    job *j = arg;
    rstate *s = rp_replica_user(rep);
    int who = j->same_data ? 0 : rp_replica_id(rep);
    int nan_at = rp_replica_id(rep) == j->nan_replica ? 5 : -1;
    /* The local gradient, on a private copy of the values. */
    rp_tape_reset(s->shadow_tape);
    RP_CHECK(rp_params_read_values(s->m.params, s->copy));
    RP_CHECK(rp_params_write_values(s->shadow.params, s->copy));
    rp_params_zero_grad(s->shadow.params);
    rp_tensor *sl = net_loss(s->shadow_tape, &s->shadow, who, j->step, nan_at);
    if (!sl) return rp_last_status();
    RP_CHECK(rp_backward(s->shadow_tape, sl));
    RP_CHECK(rp_params_read_grads(s->shadow.params, s->local_grad));

    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *loss = net_loss(t, &s->m, who, j->step, nan_at);
    if (!loss) return rp_last_status();
    s->loss = rp_item(loss);
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(s->opt, 0.1f);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    rstate *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->m.params);
    rp_params_destroy(s->shadow.params);
    rp_tape_destroy(s->shadow_tape);
    free(s->local_grad);
    free(s->seen_grad);
    free(s->pre_values);
    free(s->post_values);
    free(s->ema);
    free(s->copy);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

static rp_config config(int n)
{
    rp_config cfg = rp_config_default();
    cfg.replicas = n;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1;
    return cfg;
}

static void test_user_hooks_stack_on_sync(void **state)
{
    const int n = 2;
    rp_config cfg = config(n);
    rp_replicator *r = tu_replicator_make(&cfg);
    job *j = calloc(1, sizeof *j);
    j->nan_replica = -1;
    j->user_hooks = true;
    tu_run_ok(r, build, j);
    int64_t tn = rp_params_trainable_numel(j->st[0].m.params);
    for (int s = 0; s < 3; s++) {
        j->step = s;
        tu_run_ok(r, step, j);
        /* The local gradients differ; the user's before saw their mean, the same bits everywhere.
         */
        assert_true(memcmp(j->st[0].local_grad, j->st[1].local_grad, (size_t)tn * sizeof(float)) !=
                    0);
        assert_memory_equal(j->st[0].seen_grad, j->st[1].seen_grad, (size_t)tn * sizeof(float));
        for (int64_t i = 0; i < tn; i++) {
            float mean = (j->st[0].local_grad[i] + j->st[1].local_grad[i]) / 2;
            assert_true(fabsf(j->st[0].seen_grad[i] - mean) <= 1e-6f * (1 + fabsf(mean)));
        }
        for (int q = 0; q < n; q++) {
            rstate *st = &j->st[q];
            /* The after ran after the update (and the step count) and saw the new values. */
            assert_int_equal(st->steps_in_after, s + 1);
            assert_true(memcmp(st->pre_values, st->post_values, (size_t)tn * sizeof(float)) != 0);
            assert_true(has_values(st->m.params, st->post_values));
            for (int64_t i = 0; i < tn; i++) {
                float want = st->pre_values[i] - 0.1f * st->seen_grad[i];
                assert_true(fabsf(st->post_values[i] - want) <= 1e-6f * (1 + fabsf(want)));
            }
        }
        assert_memory_equal(j->st[0].ema, j->st[1].ema, (size_t)tn * sizeof(float));
    }
    tu_run_ok(r, teardown, j);
    for (int q = 0; q < n; q++)
        assert_int_equal(j->st[q].hooks_released, 1);
    rp_replicator_destroy(r);
    free(j);
}

/* ---- 2b. gradients in bf16 on the wire --------------------------------------------- */

static float via_bf16(float x)
{
    return rp_bf16_to_f32(rp_bf16_from_f32(x));
}

static void test_bf16_gradients_on_the_wire(void **state)
{
    const int n = 2;
    rp_config cfg = config(n);
    cfg.grad_dtype = RP_BF16;
    rp_replicator *r = tu_replicator_make(&cfg);
    job *j = calloc(1, sizeof *j);
    j->nan_replica = -1;
    j->user_hooks = true;
    tu_run_ok(r, build, j);
    int64_t tn = rp_params_trainable_numel(j->st[0].m.params);
    int rounded = 0;
    for (int s = 0; s < 3; s++) {
        j->step = s;
        tu_run_ok(r, step, j);
        assert_memory_equal(j->st[0].seen_grad, j->st[1].seen_grad, (size_t)tn * sizeof(float));
        for (int64_t i = 0; i < tn; i++) {
            /* Each local gradient rounded to bf16, added in f32, halved, rounded once. */
            float g0 = j->st[0].local_grad[i], g1 = j->st[1].local_grad[i];
            float want = via_bf16((via_bf16(g0) + via_bf16(g1)) / 2);
            if (memcmp(&j->st[0].seen_grad[i], &want, sizeof want) != 0)
                fail_msg("step %d, gradient %lld: %.9g, want %.9g (local %.9g, %.9g)", s,
                         (long long)i, (double)j->st[0].seen_grad[i], (double)want, (double)g0,
                         (double)g1);
            rounded += want != (g0 + g1) / 2;
        }
        assert_true(same_values(j->st[0].m.params, j->st[1].m.params));
    }
    assert_true(rounded > 0); /* the f32 mean was not what the optimizer saw */
    tu_run_ok(r, teardown, j);
    rp_replicator_destroy(r);
    free(j);
}

/* 40 steps on 2 replicas, f32 or bf16 gradients on the wire: replica 0's loss at each step. */
static void train_losses(rp_dtype grad_dtype, float *losses, int steps)
{
    rp_config cfg = config(2); /* checksum_every 1: the runtime compares the replicas every step */
    cfg.grad_dtype = grad_dtype;
    rp_replicator *r = tu_replicator_make(&cfg);
    job *j = calloc(1, sizeof *j);
    j->nan_replica = -1;
    tu_run_ok(r, build, j);
    for (int s = 0; s < steps; s++) {
        j->step = s % 4; /* four batches per replica, over and over: the loss falls */
        tu_run_ok(r, step, j);
        losses[s] = j->st[0].loss;
    }
    assert_true(same_values(j->st[0].m.params, j->st[1].m.params));
    tu_run_ok(r, teardown, j);
    rp_replicator_destroy(r);
    free(j);
}

static void test_bf16_tracks_f32(void **state)
{
    enum { STEPS = 40 };
    float f32[STEPS], bf16[STEPS];
    train_losses(RP_F32, f32, STEPS);
    train_losses(RP_BF16, bf16, STEPS);
    float most = 0;
    bool differs = false;
    for (int s = 0; s < STEPS; s++) {
        float d = fabsf(bf16[s] - f32[s]);
        most = d > most ? d : most;
        differs |= d > 0;
    }
    /* The band: bf16 perturbs each gradient by at most ~2^-8 of itself (two roundings); the runs
       measured 1e-4 apart at worst. */
    if (most > 1e-3f) fail_msg("bf16's loss is %g from f32's at worst (band 1e-3)", (double)most);
    assert_true(differs); /* bf16 changed something */
    /* And the runs trained: step 36 sees step 0's batches again (0.869 then 0.846 measured). */
    assert_true(f32[STEPS - 4] < f32[0] - 0.01f && bf16[STEPS - 4] < bf16[0] - 0.01f);
}

static void test_grad_dtype_option(void **state)
{
    rp_config cfg = rp_config_default();
    assert_int_equal(cfg.grad_dtype, RP_F32);
    char *argv[] = {"prog", "--grad-dtype", "bf16", "rest", NULL};
    int argc = 4;
    assert_int_equal(rp_config_from_args(&cfg, &argc, argv), RP_OK);
    assert_int_equal(cfg.grad_dtype, RP_BF16);
    assert_int_equal(argc, 2);
    char *bad[] = {"prog", "--grad-dtype", "f16", NULL};
    argc = 3;
    assert_int_equal(rp_config_from_args(&cfg, &argc, bad), RP_ERR_INVALID);
    tu_assert_error_contains("--grad-dtype f16: expected f32 or bf16");
    rp_replicator *r = NULL;
    cfg = config(2);
    cfg.grad_dtype = RP_BF16;
    cfg.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("grad_dtype = bf16 with the async regime");
    cfg = config(2);
    cfg.grad_dtype = RP_F64;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("grad_dtype = 1 (f64)");
    assert_null(r);
}

/* ---- one strategy choice: cfg.strategy and its older spellings --------------------- */

/* What the table a config runs shows through the API: lockstep, sharded, replicas in sync. */
static void shape(const rp_config *cfg, bool *lockstep, bool *sharded, int *in_sync)
{
    rp_replicator *r = tu_replicator_make(cfg);
    *lockstep = rp_replicator_lockstep(r);
    *sharded = rp_replicator_sharded(r);
    *in_sync = rp_replica_in_sync(rp_replicator_replica(r, 0));
    rp_replicator_destroy(r);
}

static void test_strategy_choice(void **state)
{
    rp_config c = rp_config_default();
    assert_int_equal(c.strategy, RP_STRATEGY_SYNC);
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_SYNC);
    assert_int_equal(rp_config_strategy(NULL), RP_STRATEGY_SYNC);
    c.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_ASYNC);
    c = rp_config_default();
    c.zero = true;
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_ZERO1);
    c = rp_config_default();
    c.sync_groups = 1; /* off */
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_SYNC);
    c.sync_groups = 2;
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_SYNC_GROUPS);
    c = rp_config_default();
    c.strategy = RP_STRATEGY_ZERO1;
    assert_int_equal(rp_config_strategy(&c), RP_STRATEGY_ZERO1);
    assert_string_equal(rp_strategy_name(RP_STRATEGY_SYNC), "sync");
    assert_string_equal(rp_strategy_name(RP_STRATEGY_ASYNC), "async");
    assert_string_equal(rp_strategy_name(RP_STRATEGY_ZERO1), "zero1");
    assert_string_equal(rp_strategy_name(RP_STRATEGY_SYNC_GROUPS), "sync-groups");
    assert_string_equal(rp_strategy_name(RP_STRATEGY_ZERO2), "zero2");
    assert_string_equal(rp_strategy_name(RP_STRATEGY_ZERO3), "zero3");
    assert_string_equal(rp_strategy_name((rp_strategy_kind)RP_STRATEGIES), "?");

    /* --strategy takes every name, and nothing else. */
    for (int k = 0; k < RP_STRATEGIES; k++) {
        c = rp_config_default();
        char *argv[] = {"prog", "--strategy", (char *)rp_strategy_name((rp_strategy_kind)k), "x",
                        NULL};
        int argc = 4;
        assert_int_equal(rp_config_from_args(&c, &argc, argv), RP_OK);
        assert_int_equal(c.strategy, k);
        assert_int_equal(argc, 2);
    }
    char *bad[] = {"prog", "--strategy", "zero", NULL};
    int argc = 3;
    assert_int_equal(rp_config_from_args(&c, &argc, bad), RP_ERR_INVALID);
    tu_assert_error_contains(
        "--strategy zero: expected sync, async, zero1, zero2, zero3 or sync-groups");

    /* Each spelling runs the same table as the choice it spells. */
    struct {
        rp_strategy_kind kind;
        int replicas;
        bool lockstep, sharded;
        int in_sync;
    } want[] = {
        {RP_STRATEGY_SYNC, 2, true, false, 2}, {RP_STRATEGY_ASYNC, 2, false, false, 1},
        {RP_STRATEGY_ZERO1, 2, true, true, 2}, {RP_STRATEGY_SYNC_GROUPS, 4, false, false, 2},
        {RP_STRATEGY_ZERO2, 2, true, true, 2}, /* no older spelling: spelled is by_enum */
        {RP_STRATEGY_ZERO3, 2, true, true, 2},
    };
    assert_int_equal(sizeof want / sizeof want[0], RP_STRATEGIES);
    for (int k = 0; k < RP_STRATEGIES; k++) {
        rp_config by_enum = config(want[k].replicas), spelled = by_enum;
        by_enum.strategy = want[k].kind;
        if (want[k].kind == RP_STRATEGY_ASYNC) spelled.regime = RP_REGIME_ASYNC;
        if (want[k].kind == RP_STRATEGY_ZERO1) spelled.zero = true;
        if (want[k].kind >= RP_STRATEGY_ZERO2) spelled.strategy = want[k].kind;
        if (want[k].kind == RP_STRATEGY_SYNC_GROUPS) by_enum.sync_groups = spelled.sync_groups = 2;
        bool lockstep[2], sharded[2];
        int in_sync[2];
        shape(&by_enum, &lockstep[0], &sharded[0], &in_sync[0]);
        shape(&spelled, &lockstep[1], &sharded[1], &in_sync[1]);
        for (int v = 0; v < 2; v++) {
            assert_int_equal(lockstep[v], want[k].lockstep);
            assert_int_equal(sharded[v], want[k].sharded);
            assert_int_equal(in_sync[v], want[k].in_sync);
        }
    }
    /* Sync groups of one replica each are async training, however spelled. */
    c = config(2);
    c.strategy = RP_STRATEGY_SYNC_GROUPS;
    c.sync_groups = 2;
    bool lockstep, sharded;
    int in_sync;
    shape(&c, &lockstep, &sharded, &in_sync);
    assert_false(lockstep);
    assert_int_equal(in_sync, 1);

    /* A spelling that names another strategy than cfg.strategy is refused, by name. */
    rp_replicator *r = NULL;
    c = config(2);
    c.strategy = RP_STRATEGY_ASYNC;
    c.zero = true;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("strategy = async with zero = true");
    c = config(2);
    c.strategy = RP_STRATEGY_ZERO1;
    c.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("strategy = zero1 with regime = async");
    c = config(4);
    c.strategy = RP_STRATEGY_ZERO1;
    c.sync_groups = 2;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("strategy = zero1 with sync_groups = 2");
    c = config(4);
    c.strategy = RP_STRATEGY_SYNC_GROUPS;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("strategy = sync-groups with sync_groups = 0");
    c = config(2);
    c.strategy = (rp_strategy_kind)7;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("strategy = 7: not an rp_strategy_kind");
    c = config(2);
    c.strategy = RP_STRATEGY_ASYNC;
    c.grad_dtype = RP_BF16;
    assert_int_equal(rp_replicator_create(&r, &c), RP_ERR_INVALID);
    tu_assert_error_contains("grad_dtype = bf16 with the async regime");
    /* The same choice twice is no conflict. */
    c = config(2);
    c.strategy = RP_STRATEGY_ZERO1;
    c.zero = true;
    shape(&c, &lockstep, &sharded, &in_sync);
    assert_true(sharded);
    assert_null(r);
}

/* ---- 3. a NaN names the replica whose data made it ------------------------------- */

static void test_nan_names_its_replica(void **state)
{
    const int n = 3;
    rp_config cfg = config(n);
    rp_replicator *r = tu_replicator_make(&cfg);
    job *j = calloc(1, sizeof *j);
    j->nan_replica = 2;
    tu_run_ok(r, build, j);
    int64_t tn = rp_params_trainable_numel(j->st[0].m.params);
    float *before = malloc((size_t)tn * sizeof(float));
    read_values(j->st[0].m.params, before);
    rp_status st = rp_replicator_run(r, step, j);
    assert_int_equal(st, RP_ERR_NUMERIC);
    const char *msg = rp_last_error();
    if (strncmp(msg, "replica 2: ", 11) != 0) {
        print_error("the message does not start with the poisoned replica: %s\n", msg);
        fail();
    }
    tu_assert_error_contains("replica 2's own gradient of parameter 'fc.weight' held nan");
    tu_assert_error_contains("before the all-reduce");
    tu_assert_error_contains("no parameter was updated");
    for (int q = 0; q < n; q++)
        assert_true(has_values(j->st[q].m.params, before));
    free(before);
    rp_replicator_run(r, teardown, j);
    rp_replicator_destroy(r);
    free(j);
}

/* ---- 4. a replica stuck in user code ------------------------------------------------- */

typedef struct stuck_job {
    int stuck;   /* this replica spins in user code */
    int release; /* atomic: set to let it go */
    rp_status status[MAXR];
} stuck_job;

static rp_status stuck_fn(rp_replica *rep, void *arg)
{
    stuck_job *j = arg;
    int id = rp_replica_id(rep);
    if (id == j->stuck) {
        while (!__atomic_load_n(&j->release, __ATOMIC_ACQUIRE))
            tu_sleep_s(0.01);
        return RP_OK;
    }
    rp_status st = rp_barrier(rep);
    j->status[id] = st;
    return st;
}

static void test_stuck_replica_named(void **state)
{
    rp_config cfg = config(3);
    cfg.timeout_s = 0.3;
    rp_replicator *r = tu_replicator_make(&cfg);
    stuck_job j;
    memset(&j, 0, sizeof j);
    j.stuck = 1;
    double t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, stuck_fn, &j);
    double took = rp_now_s() - t0;
    assert_int_equal(st, RP_ERR_TIMEOUT);
    tu_assert_error_contains("replica 1 has been in its step function for");
    tu_assert_error_contains("did not reach a collective; its peers timed out waiting");
    /* The peers gave up at their timeout; the watchdog named it one grace (2 s) later. */
    assert_int_equal(j.status[0], RP_ERR_TIMEOUT);
    assert_int_equal(j.status[2], RP_ERR_TIMEOUT);
    if (!(took >= 2.0 && took < 8.0)) {
        print_error("run returned after %.2f s (timeout 0.3 s, grace 2 s)\n", took);
        fail();
    }
    /* The replicator refuses to run again, and says why. */
    assert_int_equal(rp_replicator_run(r, stuck_fn, &j), RP_ERR_INVALID);
    tu_assert_error_contains(
        "a replica was left stuck in its step function in an earlier run (replica 1)");
    /* It comes back: destroy waits for its thread and frees everything (the sanitizer builds
     * check). */
    __atomic_store_n(&j.release, 1, __ATOMIC_RELEASE);
    rp_replicator_destroy(r);
}

/* Replica 0 (the caller's thread) never returns: with stuck_exit the process ends. */
static void test_stuck_exit_ends_the_process(void **state)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        rp_config cfg = config(2);
        cfg.timeout_s = 0.3;
        cfg.stuck_exit = true;
        rp_replicator *r = NULL;
        if (rp_replicator_create(&r, &cfg) != RP_OK) _exit(2);
        stuck_job j;
        memset(&j, 0, sizeof j);
        j.stuck = 0;
        rp_replicator_run(r, stuck_fn, &j);
        _exit(3); /* not reached: replica 0 never returns */
    }
    int wst = 0;
    double t0 = rp_now_s();
    pid_t got = 0;
    while ((got = waitpid(pid, &wst, WNOHANG)) == 0 && rp_now_s() - t0 < 20)
        tu_sleep_s(0.05);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &wst, 0);
        print_error("the child still ran after 20 s\n");
        fail();
    }
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), RP_STUCK_EXIT_CODE);
}

/* ---- 4b. a replica that skips a collective ------------------------------------------- */

/* Every replica makes three user all-reduces and reports; replica 3 skips the third. */
static rp_status skip_fn(rp_replica *rep, void *arg)
{
    const int *skipper = arg;
    float x[4] = {1, 2, 3, 4};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && rp_replica_id(rep) == *skipper) break;
        RP_CHECK(rp_all_reduce(rep, x, x, 4, RP_F32, RP_SUM));
    }
    return rp_replica_report(rep, "x", x[0], RP_MEAN);
}

static void test_skipped_collective_named(void **state)
{
    rp_config cfg = config(4);
    cfg.timeout_s = 10;
    rp_replicator *r = tu_replicator_make(&cfg);
    /* The runtime's own calls (the optimizer-free build has none; the report gathers) are
       not in the user's numbers: replica 3's missing call is the user's third. */
    int skipper = 3;
    double t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, skip_fn, &skipper);
    assert_int_not_equal(st, RP_OK);
    tu_assert_error_contains("replica 3 ended its step without calling all_reduce #2");
    const char *msg = rp_last_error();
    tu_assert_error_contains("it went on to the runtime's report all-gather");
    if (strstr(msg, "all_gather #")) {
        print_error("the message names the runtime's gather as the user's call: %s\n", msg);
        fail();
    }
    assert_true(rp_now_s() - t0 < 5.0);
    rp_replicator_destroy(r);
}

/* ---- 5. a plain optimizer inside replicas ------------------------------------------ */

static void test_plain_optimizer_divergence(void **state)
{
    rp_config cfg = config(2);
    for (int same = 0; same < 2; same++) {
        rp_replicator *r = tu_replicator_make(&cfg);
        job *j = calloc(1, sizeof *j);
        j->nan_replica = -1;
        j->plain = true;
        j->same_data = same;
        tu_run_ok(r, build, j);
        rp_status st = rp_replicator_run(r, step, j);
        if (same) {
            /* Identical gradients keep identical values: nothing to refuse. */
            if (st != RP_OK) print_error("%s\n", rp_last_error());
            assert_int_equal(st, RP_OK);
        } else {
            assert_int_equal(st, RP_ERR_MISMATCH);
            tu_assert_error_contains("the replicas diverged");
            tu_assert_error_contains("plain optimizer(s) stepped on replica 1 (1 steps)");
            tu_assert_error_contains("rp_replica_optimizer_create()");
        }
        tu_run_ok(r, teardown, j);
        rp_replicator_destroy(r);
        free(j);
    }
}

/* ---- 6. teardown order ---------------------------------------------------------------- */

static void test_destroy_before_optimizers(void **state)
{
    for (int regime = 0; regime < 2; regime++) {
        rp_config cfg = config(2);
        cfg.regime = regime ? RP_REGIME_ASYNC : RP_REGIME_SYNC;
        rp_replicator *r = tu_replicator_make(&cfg);
        job *j = calloc(1, sizeof *j);
        j->nan_replica = -1;
        tu_run_ok(r, build, j);
        rp_replicator_destroy(r); /* the optimizers are still alive */
        tu_assert_error_contains(
            "still had 1 optimizer(s) made by rp_replica_optimizer_create(); destroy them first");
        for (int q = 0; q < 2; q++) {
            rstate *s = &j->st[q];
            /* A step on an orphan is an error, not a use of the freed replica. */
            rp_status st = rp_optimizer_step(s->opt, 0.1f);
            assert_int_equal(st, RP_ERR_INVALID);
            tu_assert_error_contains("outlived its replicator");
            rp_optimizer_destroy(s->opt);
            rp_params_destroy(s->m.params);
            rp_params_destroy(s->shadow.params);
            rp_tape_destroy(s->shadow_tape);
            free(s->local_grad);
            free(s->seen_grad);
            free(s->pre_values);
            free(s->post_values);
            free(s->ema);
            free(s->copy);
        }
        free(j);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hooks_compose),
        cmocka_unit_test(test_user_hooks_stack_on_sync),
        cmocka_unit_test(test_bf16_gradients_on_the_wire),
        cmocka_unit_test(test_bf16_tracks_f32),
        cmocka_unit_test(test_grad_dtype_option),
        cmocka_unit_test(test_strategy_choice),
        cmocka_unit_test(test_nan_names_its_replica),
        cmocka_unit_test(test_stuck_replica_named),
        cmocka_unit_test(test_stuck_exit_ends_the_process),
        cmocka_unit_test(test_skipped_collective_named),
        cmocka_unit_test(test_plain_optimizer_divergence),
        cmocka_unit_test(test_destroy_before_optimizers),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
