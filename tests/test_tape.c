/*
 * test_tape.c - the tape's behaviour: the gradient-ready callback, recording
 * on and off, backward once per reset, parameter gradients accumulating until
 * zeroed, no allocation in the steady state, tapes on concurrent threads, and
 * the error paths of the ops (messages that name the shapes and values, NULL
 * inputs passed on without touching the error); stop-gradient, leaves that
 * ask for a gradient, seeded backward, listener lists and frozen sets.
 */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* ---- a small model with one parameter used twice ------------------------------ */

enum { P_W1, P_B1, P_W2, P_UNUSED, P_LATE, P_BUF, P_COUNT };

typedef struct model {
    rp_params *ps;
    rp_tensor *w1, *b1, *w2, *w2b, *unused, *late, *buf;
} model;

/*
 * Declares w1 [4,3], b1 [4], w2 [4,4], unused [2], late [4] and the buffer
 * buf [4]. With split, a second parameter w2b (a copy of w2) takes w2's
 * second use. Values depend only on names and the seed, so two models agree.
 */
static void model_init(model *m, bool split)
{
    memset(m, 0, sizeof *m);
    assert_int_equal(rp_params_create(&m->ps), RP_OK);
    rp_init u = {RP_INIT_UNIFORM, 0.8f, 0, 0};
    m->w1 = rp_params_add(m->ps, "w1", 2, (int[]){4, 3}, u, true);
    m->b1 = rp_params_add(m->ps, "b1", 1, (int[]){4}, u, true);
    m->w2 = rp_params_add(m->ps, "w2", 2, (int[]){4, 4}, u, true);
    m->unused = rp_params_add(m->ps, "unused", 1, (int[]){2}, u, true);
    m->late = rp_params_add(m->ps, "late", 1, (int[]){4}, u, true);
    if (split) m->w2b = rp_params_add(m->ps, "w2b", 2, (int[]){4, 4}, u, true);
    m->buf = rp_params_add(m->ps, "buf", 1, (int[]){4}, u, false);
    assert_non_null(m->buf);
    assert_int_equal(rp_params_finalize(m->ps, 42), RP_OK);
    if (split) {
        float w2[16];
        assert_int_equal(rp_tensor_read(m->w2, w2, 16), RP_OK);
        assert_int_equal(rp_tensor_write(m->w2b, w2, 16), RP_OK);
    }
}

/* x's gradient (numel floats) into out, through the public API: storage is the table's. */
static void read_grad(const rp_tensor *x, float *out)
{
    if (rp_tensor_read_grad(x, out, x->numel) != RP_OK) fail_msg("%s", rp_last_error());
}

/* The gradient block of ps into out (at most 64 floats here); returns its length. */
static int64_t read_grads(const rp_params *ps, float *out)
{
    int64_t n = rp_params_trainable_numel(ps);
    assert_true(n <= 64);
    assert_int_equal(rp_params_read_grads(ps, out), RP_OK);
    return n;
}

/*
 * loss = sum(R * linear(tanh(linear(tanh(linear(x, w1, b1)) + buf, w2)), w2)),
 * then one more node after the loss that uses `late`. Returns the loss.
 */
static rp_tensor *model_forward(rp_tape *t, const model *m)
{
    float xd[6], rd[8];
    tu_fill(xd, 6, 1, -1, 1);
    tu_fill(rd, 8, 2, -1, 1);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){2, 3}, xd);
    rp_tensor *r = rp_tensor_from(t, 2, (int[]){2, 4}, rd);
    rp_tensor *h = rp_add(t, rp_tanh(t, rp_linear(t, x, m->w1, m->b1)), m->buf);
    rp_tensor *y1 = rp_linear(t, h, m->w2, NULL);
    rp_tensor *y2 = rp_linear(t, rp_tanh(t, y1), m->w2b ? m->w2b : m->w2, NULL);
    rp_tensor *loss = rp_sum(t, rp_mul(t, y2, r));
    rp_tensor *after = rp_add(t, y2, m->late);
    assert_non_null(after);
    return loss;
}

/* ---- the gradient-ready callback ------------------------------------------------ */

typedef struct ready_log {
    int calls[P_COUNT + 1];
    int order[16];
    int n;
    float snap[P_COUNT + 1][16]; /* each parameter's gradient when its callback ran */
} ready_log;

static void on_ready(rp_tensor *p, void *ctx)
{
    ready_log *log = ctx;
    assert_true(p->index >= 0 && p->index <= P_COUNT && p->numel <= 16);
    log->calls[p->index]++;
    if (log->n < 16) log->order[log->n++] = p->index;
    read_grad(p, log->snap[p->index]);
}

static int position(const ready_log *log, int index)
{
    for (int i = 0; i < log->n; i++)
        if (log->order[i] == index) return i;
    return -1;
}

/*
 * The callback fires once per used parameter per backward, only after every
 * use: w2, used twice, already holds both contributions when it fires (its
 * snapshot equals its final gradient, and equals the sum of the gradients of
 * two separate copies). A parameter used only past the loss fires once too;
 * unused parameters and buffers never fire. w2 fires before w1, whose only
 * use is back-propagated last.
 */
static void test_grad_ready_once_after_every_use(void **state)
{
    model m;
    model_init(&m, false);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    ready_log log;
    memset(&log, 0, sizeof log);
    rp_tape_on_grad_ready(t, on_ready, &log);

    rp_tensor *loss = model_forward(t, &m);
    assert_non_null(loss);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    assert_int_equal(log.calls[P_W1], 1);
    assert_int_equal(log.calls[P_B1], 1);
    assert_int_equal(log.calls[P_W2], 1);
    assert_int_equal(log.calls[P_LATE], 1);
    assert_int_equal(log.calls[P_UNUSED], 0);
    assert_int_equal(log.calls[P_BUF], 0);
    assert_int_equal(log.n, 4);
    assert_true(position(&log, P_W2) < position(&log, P_W1));
    assert_true(position(&log, P_W2) < position(&log, P_B1));
    float gw1[12], gb1[4], gw2[16];
    read_grad(m.w1, gw1);
    read_grad(m.b1, gb1);
    read_grad(m.w2, gw2);
    assert_memory_equal(log.snap[P_W1], gw1, sizeof gw1);
    assert_memory_equal(log.snap[P_B1], gb1, sizeof gb1);
    assert_memory_equal(log.snap[P_W2], gw2, sizeof gw2);

    /* The same network with w2's two uses split over two parameters. */
    model s;
    model_init(&s, true);
    rp_tape *ts;
    assert_int_equal(rp_tape_create(&ts, 0), RP_OK);
    assert_int_equal(rp_backward(ts, model_forward(ts, &s)), RP_OK);
    float both[16], sw2[16], sw2b[16];
    read_grad(s.w2, sw2);
    read_grad(s.w2b, sw2b);
    double first = 0, second = 0;
    for (int i = 0; i < 16; i++) {
        both[i] = sw2[i] + sw2b[i];
        first = fmax(first, fabs(sw2[i]));
        second = fmax(second, fabs(sw2b[i]));
    }
    assert_true(first > 1e-2 && second > 1e-2); /* both uses contribute */
    assert_true(tu_max_rel_diff(log.snap[P_W2], both, 16) < 1e-5);

    /* A second step fires each used parameter once more. */
    rp_tape_reset(t);
    rp_params_zero_grad(m.ps);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    assert_int_equal(log.calls[P_W1], 2);
    assert_int_equal(log.calls[P_W2], 2);
    assert_int_equal(log.calls[P_LATE], 2);
    assert_int_equal(log.calls[P_UNUSED], 0);

    rp_tape_destroy(ts);
    rp_params_destroy(s.ps);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/* ---- recording, backward once, accumulation --------------------------------------- */

/*
 * With recording off a forward records no node, counts no parameter use and
 * leaves gradients alone; backward from its output is an error and fires no
 * callback.
 */
static void test_eval_mode_records_nothing(void **state)
{
    model m;
    model_init(&m, false);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    ready_log log;
    memset(&log, 0, sizeof log);
    rp_tape_on_grad_ready(t, on_ready, &log);
    rp_tape_set_recording(t, false);
    assert_false(rp_tape_recording(t));
    rp_tensor *loss = model_forward(t, &m);
    assert_non_null(loss);
    assert_true(isfinite(rp_item(loss)));
    assert_int_equal(rp_tape_size(t), 0);
    assert_int_equal(loss->node, -1);
    assert_null(loss->grad);
    assert_int_equal(m.w2->pending, 0);
    assert_int_equal(rp_backward(t, loss), RP_ERR_INVALID);
    tu_assert_error_contains("not recorded");
    assert_int_equal(log.n, 0);
    float g[64];
    assert_true(tu_all_zero(g, read_grads(m.ps, g)));

    /* Recording again on the same tape records the same forward. */
    rp_tape_reset(t);
    rp_tape_set_recording(t, true);
    loss = model_forward(t, &m);
    assert_true(rp_tape_size(t) > 0);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/* A second backward without a reset is an error and changes no gradient. */
static void test_backward_twice_is_error(void **state)
{
    model m;
    model_init(&m, false);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    ready_log log;
    memset(&log, 0, sizeof log);
    rp_tape_on_grad_ready(t, on_ready, &log);
    rp_tensor *loss = model_forward(t, &m);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float before[64], after[64];
    int64_t n = read_grads(m.ps, before);
    int calls = log.n;
    assert_int_equal(rp_backward(t, loss), RP_ERR_INVALID);
    tu_assert_error_contains("already");
    read_grads(m.ps, after);
    assert_memory_equal(before, after, (size_t)n * sizeof(float));
    assert_int_equal(log.n, calls);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/*
 * Without zeroing, a second step (after a reset) adds the same gradient
 * again: twice the first. rp_params_zero_grad clears them, and the next step
 * gives the first gradient again.
 */
static void test_grads_accumulate_until_zeroed(void **state)
{
    model m;
    model_init(&m, false);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float g1[64], twice[64], g[64], gw1[12];
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    int64_t n = read_grads(m.ps, g1);
    read_grad(m.w1, gw1);
    assert_false(tu_all_zero(gw1, 12));

    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    for (int64_t i = 0; i < n; i++)
        twice[i] = 2 * g1[i];
    assert_true(tu_max_rel_diff(g, twice, read_grads(m.ps, g)) < 1e-6);

    rp_params_zero_grad(m.ps);
    assert_true(tu_all_zero(g, read_grads(m.ps, g)));
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    assert_true(tu_max_rel_diff(g, g1, read_grads(m.ps, g)) < 1e-6);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/* ---- steady state ------------------------------------------------------------------- */

typedef struct convnet {
    rp_params *ps;
    rp_conv2d_layer conv;
    rp_batchnorm_layer bn;
    rp_linear_layer fc;
} convnet;

static void convnet_init(convnet *n)
{
    assert_int_equal(rp_params_create(&n->ps), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&n->conv, n->ps, "conv", 3, 8, 3, 1, 1, true), RP_OK);
    assert_int_equal(rp_batchnorm_layer_init(&n->bn, n->ps, "bn", 8), RP_OK);
    assert_int_equal(rp_linear_layer_init(&n->fc, n->ps, "fc", 8 * 4 * 4, 10, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(n->ps, 3), RP_OK);
}

/* The network's cross-entropy loss on x [4,8,8,3]. */
static rp_tensor *convnet_loss(rp_tape *t, convnet *n, const float *x, const int32_t *labels)
{
    rp_tensor *h = rp_tensor_from(t, 4, (int[]){4, 8, 8, 3}, x);
    h = rp_conv2d_layer_forward(t, &n->conv, h);
    h = rp_relu(t, rp_batchnorm_layer_forward(t, &n->bn, h, true));
    h = rp_flatten(t, rp_max_pool2d(t, h, (rp_pool_params){2, 2, 0}));
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &n->fc, h), labels);
}

/* One training step: forward, backward, a plain SGD update (on host copies of the blocks),
 * zeroed gradients, reset. */
static void convnet_step(rp_tape *t, convnet *n, const float *x, const int32_t *labels)
{
    rp_tensor *loss = convnet_loss(t, n, x, labels);
    assert_non_null(loss);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    static float w[2048], g[2048];
    assert_true(rp_params_numel(n->ps) <= 2048);
    assert_int_equal(rp_params_read_values(n->ps, w), RP_OK);
    assert_int_equal(rp_params_read_grads(n->ps, g), RP_OK);
    for (int64_t i = 0; i < rp_params_trainable_numel(n->ps); i++)
        w[i] -= 0.01f * g[i];
    assert_int_equal(rp_params_write_values(n->ps, w), RP_OK);
    rp_params_zero_grad(n->ps);
    rp_tape_reset(t);
}

/*
 * The same for a convolution, whose backward overwrites a fresh gradient and
 * adds through scratch otherwise: two backward passes without zeroing give
 * twice the gradient of one, for every parameter of conv, batch norm and fc.
 */
static void test_conv_grads_accumulate(void **state)
{
    convnet n;
    convnet_init(&n);
    float x[4 * 8 * 8 * 3];
    tu_fill(x, 4 * 8 * 8 * 3, 5, -1, 1);
    static const int32_t labels[4] = {3, 1, 4, 1};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    int64_t count = rp_params_trainable_numel(n.ps);
    float *g1 = test_malloc((size_t)count * sizeof(float));
    float *g2 = test_malloc((size_t)count * sizeof(float));
    assert_int_equal(rp_backward(t, convnet_loss(t, &n, x, labels)), RP_OK);
    assert_int_equal(rp_params_read_grads(n.ps, g1), RP_OK);
    for (int64_t i = 0; i < count; i++)
        g1[i] *= 2;
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, convnet_loss(t, &n, x, labels)), RP_OK);
    assert_int_equal(rp_params_read_grads(n.ps, g2), RP_OK);
    assert_true(tu_max_rel_diff(g2, g1, count) < 1e-5);
    test_free(g2);
    test_free(g1);
    rp_tape_destroy(t);
    rp_params_destroy(n.ps);
}

/*
 * Five identical training steps on a tape whose arena starts too small:
 * the first grows it; from the third step on nothing is allocated, neither
 * through rp_alloc (counted process-wide) nor by the arena from the system.
 */
static void test_arena_steady_state(void **state)
{
    convnet n;
    convnet_init(&n);
    float x[4 * 8 * 8 * 3];
    tu_fill(x, 4 * 8 * 8 * 3, 5, -1, 1);
    static const int32_t labels[4] = {3, 1, 4, 1};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 4096), RP_OK);
    uint64_t allocs[5], sys[5];
    for (int step = 0; step < 5; step++) {
        convnet_step(t, &n, x, labels);
        allocs[step] = rp_alloc_count();
        sys[step] = rp_arena_get_stats(rp_tape_storage(t)).system_allocs;
    }
    print_message("rp_alloc_count after each step: %llu %llu %llu %llu %llu; arena chunks %llu "
                  "%llu %llu %llu %llu\n",
                  (unsigned long long)allocs[0], (unsigned long long)allocs[1],
                  (unsigned long long)allocs[2], (unsigned long long)allocs[3],
                  (unsigned long long)allocs[4], (unsigned long long)sys[0],
                  (unsigned long long)sys[1], (unsigned long long)sys[2],
                  (unsigned long long)sys[3], (unsigned long long)sys[4]);
    assert_true(sys[0] > 1); /* the first step did outgrow the initial chunk */
    for (int step = 2; step < 5; step++) {
        assert_int_equal(allocs[step], allocs[1]);
        assert_int_equal(sys[step], sys[1]);
    }
    rp_tape_destroy(t);
    rp_params_destroy(n.ps);
}

/* ---- tapes on concurrent threads -------------------------------------------------- */

/* Fills a stretch of this thread's stack with large values, as earlier calls would. */
__attribute__((noinline)) static double dirty_stack(void)
{
    volatile double junk[48 * 1024];
    for (int i = 0; i < 48 * 1024; i++)
        junk[i] = 1e6 + i;
    return junk[0];
}

/*
 * Different tapes may be used concurrently (tensor.h), also from the threads
 * of an OpenMP team, as when replicas run as OpenMP threads and each sets its
 * kernel team size (rp_kernels_set_threads does omp_set_num_threads). Each
 * thread's batch norm must give the result one tape gives alone. The stack is
 * filled with junk first so that a kernel reading memory it never wrote shows
 * it here rather than by luck.
 */
static void test_tapes_in_openmp_team(void **state)
{
    /* 32768 elements: enough for the cpu kernels to split the work over their team. */
    enum { N = 8, H = 32, W = 32, C = 4, NUMEL = N * H * W * C };
    static float x[NUMEL], want[NUMEL], got[2][NUMEL];
    tu_fill(x, NUMEL, 9, -1, 2);
    float ones[C] = {1, 1, 1, 1}, zeros[C] = {0, 0, 0, 0};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *y = rp_batch_norm(
        t, rp_tensor_from(t, 4, (int[]){N, H, W, C}, x), rp_tensor_from(t, 1, (int[]){C}, ones),
        rp_tensor_from(t, 1, (int[]){C}, zeros), NULL, NULL, rp_bn_params_default());
    assert_non_null(y);
    assert_int_equal(rp_tensor_read(y, want, NUMEL), RP_OK);
    rp_tape_destroy(t);

    int ok[2] = {0, 0};
#pragma omp parallel num_threads(2)
    {
        int me = omp_get_thread_num();
        omp_set_num_threads(4); /* this replica's kernel team */
        rp_tape *tt = NULL;
        if (me < 2 && rp_tape_create(&tt, 0) == RP_OK) {
            (void)dirty_stack();
            rp_tensor *yy = rp_batch_norm(tt, rp_tensor_from(tt, 4, (int[]){N, H, W, C}, x),
                                          rp_tensor_from(tt, 1, (int[]){C}, ones),
                                          rp_tensor_from(tt, 1, (int[]){C}, zeros), NULL, NULL,
                                          rp_bn_params_default());
            if (yy && rp_tensor_read(yy, got[me], NUMEL) == RP_OK) ok[me] = 1;
            rp_tape_destroy(tt);
        }
    }
    for (int i = 0; i < 2; i++) {
        assert_true(ok[i]);
        double diff = tu_max_rel_diff(got[i], want, NUMEL);
        if (!(diff < 1e-5))
            fail_msg("thread %d: batch norm differs from one tape alone by %g", i, diff);
    }
}

/* ---- error paths -------------------------------------------------------------------- */

/* Shape errors return NULL with RP_ERR_SHAPE and a message naming both shapes. */
static void test_errors_name_shapes(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_error_clear();
    rp_tensor *x = rp_tensor_fill(t, 2, (int[]){4, 3}, 1);
    rp_tensor *w = rp_tensor_fill(t, 2, (int[]){5, 2}, 1);
    assert_null(rp_linear(t, x, w, NULL));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[4, 3]");
    tu_assert_error_contains("[5, 2]");

    rp_tensor *img = rp_tensor_fill(t, 4, (int[]){1, 4, 4, 3}, 1);
    rp_tensor *k = rp_tensor_fill(t, 4, (int[]){2, 3, 3, 5}, 1);
    assert_null(rp_conv2d(t, img, k, NULL, (rp_conv_params){1, 1}));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[1, 4, 4, 3]");
    tu_assert_error_contains("[2, 3, 3, 5]");

    rp_tensor *b = rp_tensor_fill(t, 1, (int[]){4}, 1);
    assert_null(rp_add(t, x, b));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[4, 3]");
    tu_assert_error_contains("[4]");
    assert_null(rp_mul(t, img, rp_tensor_fill(t, 2, (int[]){4, 4}, 1)));
    tu_assert_error_contains("[1, 4, 4, 3]");

    assert_null(rp_reshape(t, x, 2, (int[]){4, 2}));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[4, 3]");
    tu_assert_error_contains("8");

    assert_null(rp_mse(t, x, w));
    tu_assert_error_contains("[4, 3]");
    tu_assert_error_contains("[5, 2]");
    rp_tape_destroy(t);
}

/* Bad indices and labels name the position and the value. */
static void test_errors_name_values(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *table = rp_tensor_fill(t, 2, (int[]){5, 3}, 1);
    assert_null(rp_embedding(t, table, (int32_t[]){0, 1, 7}, 3));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("index 2");
    tu_assert_error_contains("7");
    assert_null(rp_embedding(t, table, (int32_t[]){-1, 0}, 2));
    tu_assert_error_contains("index 0");
    tu_assert_error_contains("-1");

    rp_tensor *logits = rp_tensor_fill(t, 2, (int[]){2, 3}, 0);
    assert_null(rp_softmax_cross_entropy(t, logits, (int32_t[]){0, 3}));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("label 1");
    tu_assert_error_contains("3");
    assert_null(rp_softmax_cross_entropy(t, logits, (int32_t[]){-2, 0}));
    tu_assert_error_contains("label 0");
    tu_assert_error_contains("-2");

    /* Backward needs a one-element loss recorded on this tape. */
    assert_int_equal(rp_backward(t, NULL), RP_ERR_INVALID);
    table->flags |= RP_TENSOR_REQUIRES_GRAD;
    rp_tensor *rows = rp_embedding(t, table, (int32_t[]){1, 1}, 2);
    assert_non_null(rows);
    assert_int_equal(rp_backward(t, rows), RP_ERR_SHAPE);
    tu_assert_error_contains("[2, 3]");
    rp_tape_destroy(t);
}

/*
 * An op given a NULL input returns NULL and leaves the earlier error as it
 * was, so a chain of ops reports its first failure.
 */
static void test_null_propagates_without_overwriting(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *a = rp_tensor_fill(t, 2, (int[]){2, 3}, 1);
    rp_tensor *img = rp_tensor_fill(t, 4, (int[]){1, 4, 4, 3}, 1);
    rp_tensor *vec = rp_tensor_fill(t, 1, (int[]){3}, 1);
    rp_tensor *bad_w = rp_tensor_fill(t, 2, (int[]){5, 2}, 1);

    /* The first failure in a chain is the one reported. */
    assert_null(rp_relu(t, rp_sum(t, rp_linear(t, a, bad_w, NULL))));
    tu_assert_error_contains("[2, 3]");
    tu_assert_error_contains("[5, 2]");
    char saved[512];
    snprintf(saved, sizeof saved, "%s", rp_last_error());
    rp_status status = rp_last_status();

    rp_tensor *none = NULL;
    rp_tensor *pair[2] = {a, NULL};
    rp_conv_params cp = {1, 1};
    rp_pool_params pp = {2, 2, 0};
    int32_t idx[2] = {0, 1};
    rp_tensor *results[] = {
        rp_matmul(t, none, a),
        rp_matmul(t, a, none),
        rp_linear(t, none, a, NULL),
        rp_linear(t, a, none, NULL),
        rp_conv2d(t, none, img, NULL, cp),
        rp_conv2d(t, img, none, NULL, cp),
        rp_batch_norm(t, none, vec, vec, NULL, NULL, rp_bn_params_default()),
        rp_batch_norm(t, a, none, vec, NULL, NULL, rp_bn_params_default()),
        rp_batch_norm(t, a, vec, none, NULL, NULL, rp_bn_params_default()),
        rp_relu(t, none),
        rp_leaky_relu(t, none, 0.1f),
        rp_tanh(t, none),
        rp_sigmoid(t, none),
        rp_add(t, none, vec),
        rp_sub(t, a, none),
        rp_mul(t, none, none),
        rp_scale(t, none, 2),
        rp_concat(t, pair, 2),
        rp_reshape(t, none, 1, (int[]){6}),
        rp_flatten(t, none),
        rp_max_pool2d(t, none, pp),
        rp_avg_pool2d(t, none, pp),
        rp_global_avg_pool(t, none),
        rp_upsample2x(t, none),
        rp_embedding(t, none, idx, 2),
        rp_softmax_cross_entropy(t, none, idx),
        rp_softmax_cross_entropy_soft(t, none, a),
        rp_softmax_cross_entropy_soft(t, a, none),
        rp_mse(t, none, a),
        rp_mse(t, a, none),
        rp_sum(t, none),
        rp_mean(t, none),
    };
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++) {
        if (results[i]) fail_msg("op %zu returned a tensor for a NULL input", i);
    }
    assert_string_equal(rp_last_error(), saved);
    assert_int_equal(rp_last_status(), status);
    rp_tape_destroy(t);
}

/* A shape too large for memory is a SHAPE error, not an overflowed allocation. */
static void test_huge_shape_refused(void **state)
{
    (void)state;
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    assert_null(rp_tensor_fill(t, 3, (int[]){1 << 21, 1 << 21, 1 << 20}, 1.0f));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("more than");
    assert_int_equal(rp_shape_numel(4, (int[]){65536, 65536, 65536, 65536}), -1);
    rp_params *p;
    assert_int_equal(rp_params_create(&p), RP_OK);
    assert_null(rp_params_add(p, "big", 2, (int[]){1 << 30, 1 << 30},
                              (rp_init){RP_INIT_ZEROS, 0, 0, 0}, true));
    tu_assert_error_contains("big");
    rp_params_destroy(p);
    rp_tape_destroy(t);
}

/* A duplicate parameter name is refused, naming it; the first declaration stays. */
static void test_params_duplicate_name(void **state)
{
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_init z = {RP_INIT_ZEROS, 0, 0, 0};
    rp_tensor *first = rp_params_add(ps, "block.conv.weight", 1, (int[]){3}, z, true);
    assert_non_null(first);
    assert_null(rp_params_add(ps, "block.conv.weight", 1, (int[]){4}, z, true));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("\"block.conv.weight\"");
    tu_assert_error_contains("already exists");
    assert_int_equal(rp_params_count(ps), 1);
    assert_ptr_equal(rp_params_find(ps, "block.conv.weight"), first);
    rp_params_destroy(ps);
}

/* A guard that refuses any declared tensor over `arg` values, naming it; counts its calls. */
static int guard_calls[2];
static rp_status refuse_over(const rp_params *p, void *arg)
{
    int64_t limit = *(const int64_t *)arg;
    guard_calls[limit > 100]++;
    for (int i = 0; i < rp_params_count(p); i++) {
        const rp_tensor *t = rp_params_at(p, i);
        assert_null(t->data); /* before anything is allocated */
        if (t->numel > limit)
            return RP_ERROR(RP_ERR_SHAPE, "%s has %lld values, over %lld", t->name,
                            (long long)t->numel, (long long)limit);
    }
    return RP_OK;
}

/*
 * Guards run in rp_params_finalize before it allocates, innermost first, on this thread until
 * popped: a refused list stays unallocated, and finalize returns the guard's error.
 */
static void test_params_guard(void **state)
{
    rp_init z = {RP_INIT_ZEROS, 0, 0, 0};
    int64_t small = 10, large = 1000;
    rp_params *ps;
    assert_int_equal(rp_params_guard_push(refuse_over, &large), RP_OK);
    assert_int_equal(rp_params_guard_push(refuse_over, &small), RP_OK);
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_non_null(rp_params_add(ps, "fc.weight", 2, (int[]){4, 5}, z, true));
    assert_int_equal(rp_params_finalize(ps, 1), RP_ERR_SHAPE);
    tu_assert_error_contains("fc.weight has 20 values, over 10");
    assert_null(rp_params_data(ps));
    assert_int_equal(guard_calls[0], 1); /* the inner guard refused first */
    assert_int_equal(guard_calls[1], 0);
    rp_params_destroy(ps);
    rp_params_guard_pop();
    /* The outer guard alone: 20 values pass it, and the list is allocated. */
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_non_null(rp_params_add(ps, "fc.weight", 2, (int[]){4, 5}, z, true));
    assert_int_equal(rp_params_finalize(ps, 1), RP_OK);
    assert_non_null(rp_params_data(ps));
    assert_int_equal(guard_calls[1], 1);
    rp_params_destroy(ps);
    rp_params_guard_pop();
    /* None installed: nothing is checked. */
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_non_null(rp_params_add(ps, "big", 1, (int[]){5000}, z, true));
    assert_int_equal(rp_params_finalize(ps, 1), RP_OK);
    assert_int_equal(guard_calls[0] + guard_calls[1], 2);
    rp_params_destroy(ps);
    assert_int_equal(rp_params_guard_push(NULL, NULL), RP_ERR_INVALID);
    for (int i = 0; i < RP_PARAMS_GUARDS; i++)
        assert_int_equal(rp_params_guard_push(refuse_over, &large), RP_OK);
    assert_int_equal(rp_params_guard_push(refuse_over, &large), RP_ERR_INVALID);
    for (int i = 0; i < RP_PARAMS_GUARDS; i++)
        rp_params_guard_pop();
}

/* ---- stop-gradient, leaves, seeded backward ------------------------------------------ */

/*
 * loss = sum(detach(x*x) * x): the detached factor is a constant, so dx = x^2
 * (not 3x^2), and its values are x*x's (shared, not recomputed). A detached
 * parameter gets no gradient and fires no callback.
 */
static void test_detach_blocks_gradient_keeps_values(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xd[6];
    tu_fill(xd, 6, 3, -1, 1);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){2, 3}, xd);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *sq = rp_mul(t, x, x);
    rp_tensor *d = rp_detach(t, sq);
    assert_non_null(d);
    assert_int_equal(d->node, -1);
    assert_false(d->flags & RP_TENSOR_REQUIRES_GRAD);
    assert_int_equal(d->ndim, 2);
    assert_ptr_equal(d->data, sq->data);
    float dv[6], sqv[6], gx[6];
    assert_int_equal(rp_tensor_read(d, dv, 6), RP_OK);
    assert_int_equal(rp_tensor_read(sq, sqv, 6), RP_OK);
    assert_memory_equal(dv, sqv, sizeof dv);
    assert_int_equal(rp_backward(t, rp_sum(t, rp_mul(t, d, x))), RP_OK);
    read_grad(x, gx);
    for (int i = 0; i < 6; i++)
        assert_float_equal(gx[i], xd[i] * xd[i], 1e-6);
    assert_null(sq->grad); /* nothing flowed into the detached branch */
    assert_null(rp_detach(t, NULL));

    /* A detached parameter: no use recorded, no gradient, no callback. */
    model m;
    model_init(&m, false);
    ready_log log;
    memset(&log, 0, sizeof log);
    rp_tape_reset(t);
    rp_tape_on_grad_ready(t, on_ready, &log);
    rp_tensor *in = rp_tensor_from(t, 2, (int[]){2, 3}, xd);
    rp_tensor *y = rp_linear(t, in, rp_detach(t, m.w1), m.b1);
    assert_int_equal(m.w1->pending, 0);
    assert_int_equal(rp_backward(t, rp_sum(t, y)), RP_OK);
    assert_int_equal(log.calls[P_W1], 0);
    assert_int_equal(log.calls[P_B1], 1);
    float gw1[12], gb1[4];
    read_grad(m.w1, gw1);
    read_grad(m.b1, gb1);
    assert_true(tu_all_zero(gw1, 12));
    for (int i = 0; i < 4; i++)
        assert_float_equal(gb1[i], 2.0f, 0);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/*
 * Hard-label and soft-target cross-entropy on one tape, with an embedding recorded between them:
 * each node keeps its own kind of target, so dx = (softmax(x) - onehot(label)) / N for the hard
 * loss and (softmax(x) - target) / N for the soft one (its rows sum to 1).
 */
static void test_softmax_xent_kinds_on_one_tape(void **state)
{
    (void)state;
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    const float xd[6] = {0.5f, -1.0f, 2.0f, 0.0f, 0.3f, -0.7f};
    const float td[6] = {0.2f, 0.5f, 0.3f, 0.6f, 0.1f, 0.3f};
    const int32_t labels[2] = {2, 0};
    rp_tensor *xh = rp_tensor_from(t, 2, (int[]){2, 3}, xd);
    rp_tensor *xs = rp_tensor_from(t, 2, (int[]){2, 3}, xd);
    rp_tensor *table = rp_tensor_from(t, 2, (int[]){3, 2}, xd);
    rp_tensor *target = rp_tensor_from(t, 2, (int[]){2, 3}, td);
    rp_tensor_set_requires_grad(xh, true);
    rp_tensor_set_requires_grad(xs, true);
    rp_tensor_set_requires_grad(table, true);
    rp_tensor *hard = rp_softmax_cross_entropy(t, xh, labels);
    rp_tensor *emb = rp_sum(t, rp_embedding(t, table, (const int32_t[]){1}, 1));
    rp_tensor *soft = rp_softmax_cross_entropy_soft(t, xs, target);
    rp_tensor *loss = rp_add(t, rp_add(t, hard, soft), emb);
    assert_non_null(loss);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float gh[6], gs[6];
    read_grad(xh, gh);
    read_grad(xs, gs);
    for (int i = 0; i < 2; i++) {
        double z = 0;
        for (int j = 0; j < 3; j++)
            z += exp(xd[3 * i + j]);
        for (int j = 0; j < 3; j++) {
            double p = exp(xd[3 * i + j]) / z;
            assert_float_equal(gh[3 * i + j], (p - (j == labels[i])) / 2, 1e-6);
            assert_float_equal(gs[3 * i + j], (p - td[3 * i + j]) / 2, 1e-6);
        }
    }
    rp_tape_destroy(t);
}

/* rp_tensor_set_requires_grad turns a leaf's gradient on and off; an op's output ignores it.
 * rp_tensor_read_grad reads the leaf's gradient and refuses a wrong size or none. */
static void test_set_requires_grad(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xd[4] = {1, -2, 3, 0.5f};
    rp_tensor *x = rp_tensor_from(t, 1, (int[]){4}, xd);
    assert_false(x->flags & RP_TENSOR_REQUIRES_GRAD);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_scale(t, x, 3.0f);
    rp_tensor_set_requires_grad(y, false); /* no effect: y is an op's output */
    assert_true(y->flags & RP_TENSOR_REQUIRES_GRAD);
    assert_int_equal(rp_backward(t, rp_sum(t, y)), RP_OK);
    float gx[4];
    read_grad(x, gx);
    for (int i = 0; i < 4; i++)
        assert_float_equal(gx[i], 3.0f, 0);
    assert_int_equal(rp_tensor_read_grad(x, gx, 3), RP_ERR_SHAPE);
    tu_assert_error_contains("[4]");
    assert_int_equal(rp_tensor_read_grad(y, gx, 4), RP_ERR_INVALID); /* an op's: released */
    tu_assert_error_contains("no gradient");
    assert_int_equal(rp_tensor_read_grad(NULL, gx, 4), RP_ERR_INVALID);

    /* Off again: nothing is recorded, so there is no loss to back-propagate. */
    rp_tape_reset(t);
    x = rp_tensor_from(t, 1, (int[]){4}, xd);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor_set_requires_grad(x, false);
    rp_tensor *loss = rp_sum(t, rp_scale(t, x, 3.0f));
    assert_int_equal(rp_tape_size(t), 0);
    assert_int_equal(rp_backward(t, loss), RP_ERR_INVALID);
    assert_null(x->grad);

    /* A buffer has no gradient storage: switching it on is ignored. */
    model m;
    model_init(&m, false);
    rp_tensor_set_requires_grad(m.buf, true);
    assert_false(m.buf->flags & RP_TENSOR_REQUIRES_GRAD);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/*
 * rp_backward_from(y, dy) equals rp_backward(sum(y * dy)) bitwise for every
 * parameter (the product's backward hands dy on unchanged); it refuses a
 * NULL seed and a second backward.
 */
static void test_backward_from_equals_weighted_sum(void **state)
{
    model a, b;
    model_init(&a, false);
    model_init(&b, false);
    float xd[6], dy[8];
    tu_fill(xd, 6, 9, -1, 1);
    tu_fill(dy, 8, 10, -1, 1);
    rp_tape *ta, *tb;
    assert_int_equal(rp_tape_create(&ta, 0), RP_OK);
    assert_int_equal(rp_tape_create(&tb, 0), RP_OK);
    rp_tensor *xa = rp_tensor_from(ta, 2, (int[]){2, 3}, xd);
    rp_tensor *ya = rp_linear(ta, rp_tanh(ta, rp_linear(ta, xa, a.w1, a.b1)), a.w2, NULL);
    assert_int_equal(rp_backward_from(ta, ya, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_backward_from(ta, ya, dy), RP_OK);
    assert_int_equal(rp_backward_from(ta, ya, dy), RP_ERR_INVALID);
    tu_assert_error_contains("already ran");

    rp_tensor *xb = rp_tensor_from(tb, 2, (int[]){2, 3}, xd);
    rp_tensor *yb = rp_linear(tb, rp_tanh(tb, rp_linear(tb, xb, b.w1, b.b1)), b.w2, NULL);
    rp_tensor *r = rp_tensor_from(tb, 2, (int[]){2, 4}, dy);
    assert_int_equal(rp_backward(tb, rp_sum(tb, rp_mul(tb, yb, r))), RP_OK);
    float aw1[12], bw1[12], ab1[4], bb1[4], aw2[16], bw2[16];
    read_grad(a.w1, aw1);
    read_grad(b.w1, bw1);
    read_grad(a.b1, ab1);
    read_grad(b.b1, bb1);
    read_grad(a.w2, aw2);
    read_grad(b.w2, bw2);
    assert_false(tu_all_zero(aw1, 12));
    assert_memory_equal(aw1, bw1, sizeof aw1);
    assert_memory_equal(ab1, bb1, sizeof ab1);
    assert_memory_equal(aw2, bw2, sizeof aw2);
    rp_tape_destroy(ta);
    rp_tape_destroy(tb);
    rp_params_destroy(a.ps);
    rp_params_destroy(b.ps);
}

/* ---- listeners and frozen sets ----------------------------------------------------- */

/*
 * Two listeners both fire once per used parameter; removing one leaves the
 * other; a duplicate pair is refused; rp_tape_on_grad_ready replaces the list.
 */
static void test_two_listeners(void **state)
{
    model m;
    model_init(&m, false);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    ready_log l1, l2, l3;
    memset(&l1, 0, sizeof l1);
    memset(&l2, 0, sizeof l2);
    memset(&l3, 0, sizeof l3);
    assert_int_equal(rp_tape_add_grad_ready(t, on_ready, &l1), RP_OK);
    assert_int_equal(rp_tape_add_grad_ready(t, on_ready, &l2), RP_OK);
    assert_int_equal(rp_tape_add_grad_ready(t, on_ready, &l1), RP_ERR_INVALID);
    tu_assert_error_contains("already listening");
    assert_int_equal(rp_tape_add_grad_ready(t, NULL, &l3), RP_ERR_INVALID);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    for (int p = 0; p < P_COUNT; p++) {
        int want = p == P_UNUSED || p == P_BUF ? 0 : 1;
        assert_int_equal(l1.calls[p], want);
        assert_int_equal(l2.calls[p], want);
    }
    assert_int_equal(l1.n, 4);
    assert_memory_equal(l1.order, l2.order, 4 * sizeof(int));

    rp_tape_remove_grad_ready(t, on_ready, &l1);
    rp_tape_remove_grad_ready(t, on_ready, &l3); /* absent: ignored */
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    assert_int_equal(l1.n, 4);
    assert_int_equal(l2.n, 8);

    /* The old single-slot call replaces the whole list. */
    assert_int_equal(rp_tape_add_grad_ready(t, on_ready, &l1), RP_OK);
    rp_tape_on_grad_ready(t, on_ready, &l3);
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    assert_int_equal(l1.n, 4);
    assert_int_equal(l2.n, 8);
    assert_int_equal(l3.n, 4);
    rp_tape_on_grad_ready(t, NULL, NULL); /* empties it */
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, model_forward(t, &m)), RP_OK);
    assert_int_equal(l3.n, 4);
    rp_tape_destroy(t);
    rp_params_destroy(m.ps);
}

/* Records which tensors fired (the two sets below both have an index 0). */
typedef struct ptr_log {
    rp_tensor *fired[8];
    int n;
} ptr_log;

static void on_ready_ptr(rp_tensor *p, void *ctx)
{
    ptr_log *log = ctx;
    if (log->n < 8) log->fired[log->n] = p;
    log->n++;
}

static int fired_count(const ptr_log *log, const rp_tensor *p)
{
    int k = 0;
    for (int i = 0; i < log->n && i < 8; i++)
        k += log->fired[i] == p;
    return k;
}

/*
 * Two sets share one loss (a generator g and a discriminator d). With d
 * frozen, d's gradients stay zero and fire nothing while g's fire and equal
 * those of an unfrozen run; thawing restores exactly the previous flags (a
 * parameter switched off before the freeze stays off) and d trains again.
 */
static void test_frozen_set(void **state)
{
    rp_init u = {RP_INIT_UNIFORM, 0.8f, 0, 0};
    rp_params *g, *d;
    assert_int_equal(rp_params_create(&g), RP_OK);
    assert_int_equal(rp_params_create(&d), RP_OK);
    rp_tensor *gw = rp_params_add(g, "g.w", 2, (int[]){4, 3}, u, true);
    rp_tensor *dw = rp_params_add(d, "d.w", 2, (int[]){2, 4}, u, true);
    rp_tensor *db = rp_params_add(d, "d.b", 1, (int[]){2}, u, true);
    rp_tensor *dbuf = rp_params_add(d, "d.buf", 1, (int[]){2}, u, false);
    assert_non_null(dbuf);
    assert_int_equal(rp_params_finalize(g, 1), RP_OK);
    assert_int_equal(rp_params_finalize(d, 2), RP_OK);
    float xd[6];
    tu_fill(xd, 6, 4, -1, 1);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    ptr_log log;

#define GAN_LOSS()                                                                                 \
    rp_sum(t,                                                                                      \
           rp_tanh(t, rp_linear(t,                                                                 \
                                rp_tanh(t, rp_linear(t, rp_tensor_from(t, 2, (int[]){2, 3}, xd),   \
                                                     gw, NULL)),                                   \
                                dw, db)))

    /* Reference: nothing frozen. */
    memset(&log, 0, sizeof log);
    rp_tape_on_grad_ready(t, on_ready_ptr, &log);
    assert_int_equal(rp_backward(t, GAN_LOSS()), RP_OK);
    float gref[12], gg[12], dg[64];
    read_grad(gw, gref);
    assert_int_equal(log.n, 3);

    /* d frozen: only g gets a gradient and a callback. */
    rp_params_zero_grad(g);
    rp_params_zero_grad(d);
    assert_false(rp_params_frozen(d));
    rp_params_set_frozen(d, true);
    assert_true(rp_params_frozen(d));
    rp_params_set_frozen(d, true); /* twice: no change */
    memset(&log, 0, sizeof log);
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, GAN_LOSS()), RP_OK);
    assert_int_equal(log.n, 1);
    assert_ptr_equal(log.fired[0], gw);
    read_grad(gw, gg);
    assert_memory_equal(gg, gref, sizeof gref);
    assert_true(tu_all_zero(dg, read_grads(d, dg)));
    assert_int_equal(dw->pending, 0);

    /* Thaw: db had been switched off by hand before the freeze and stays off. */
    rp_params_set_frozen(d, false);
    rp_tensor_set_requires_grad(db, false);
    rp_params_set_frozen(d, true);
    rp_params_set_frozen(d, false);
    assert_false(rp_params_frozen(d));
    assert_true(dw->flags & RP_TENSOR_REQUIRES_GRAD);
    assert_false(db->flags & RP_TENSOR_REQUIRES_GRAD);
    assert_false(dbuf->flags & RP_TENSOR_REQUIRES_GRAD);
    memset(&log, 0, sizeof log);
    rp_tape_reset(t);
    assert_int_equal(rp_backward(t, GAN_LOSS()), RP_OK);
    assert_int_equal(log.n, 2);
    assert_int_equal(fired_count(&log, dw), 1);
    assert_int_equal(fired_count(&log, gw), 1);
    float gdw[8], gdb[2];
    read_grad(dw, gdw);
    read_grad(db, gdb);
    assert_false(tu_all_zero(gdw, 8));
    assert_true(tu_all_zero(gdb, 2));
#undef GAN_LOSS
    rp_tape_destroy(t);
    rp_params_destroy(g);
    rp_params_destroy(d);
}

/* A custom op's forward failure names the op; its error status comes back. */
static rp_status failing_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    return RP_ERROR(RP_ERR_NUMERIC, "no luck");
}

static rp_status noop_backward(void *ctx, const rp_tensor *out, const float *dout,
                               rp_tensor *const *in, float *const *din, int n)
{
    return RP_OK;
}

static void test_custom_op_errors(void **state)
{
    static const rp_custom_op bad = {"my_op", failing_forward, noop_backward};
    static const rp_custom_op nobwd = {"half", failing_forward, NULL};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_fill(t, 1, (int[]){3}, 1.0f);
    assert_null(rp_custom(t, &bad, NULL, &x, 1, 1, (int[]){3}));
    assert_int_equal(rp_last_status(), RP_ERR_NUMERIC);
    tu_assert_error_contains("\"my_op\"");
    tu_assert_error_contains("no luck");
    assert_null(rp_custom(t, &nobwd, NULL, &x, 1, 1, (int[]){3}));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    assert_null(rp_custom(t, &bad, NULL, &x, 1, 1, (int[]){0}));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    rp_tape_destroy(t);
}

static rp_status copy_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    memcpy(out->data, in[0]->data, (size_t)out->numel * sizeof(float));
    return RP_OK;
}

static rp_status failing_backward(void *ctx, const rp_tensor *out, const float *dout,
                                  rp_tensor *const *in, float *const *din, int n)
{
    return RP_ERROR(RP_ERR_UNSUPPORTED, "no gradient today");
}

/* A custom op's backward failure fails rp_backward with its status, naming the op and its message.
 */
static void test_custom_op_backward_error(void **state)
{
    static const rp_custom_op op = {"stubborn", copy_forward, failing_backward};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_fill(t, 1, (int[]){3}, 2.0f);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_custom(t, &op, NULL, &x, 1, 1, (int[]){3});
    assert_non_null(y);
    assert_true(rp_tensor_get(y, 2) == 2.0f);
    assert_int_equal(rp_backward(t, rp_sum(t, y)), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("custom op \"stubborn\" backward failed");
    tu_assert_error_contains("no gradient today");
    rp_tape_destroy(t);
}

/*
 * The ops added for the next models keep the steady state allocation-free
 * too: per-axis broadcasting, axis reductions, layer norm, log-softmax,
 * clamp, division, a detach, a custom op, two listeners and a differentiable
 * all-reduce (on a one-member communicator), from the third step on.
 */
static rp_status twice_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    for (int64_t i = 0; i < out->numel; i++)
        out->data[i] = 2.0f * in[0]->data[i];
    return RP_OK;
}

static rp_status twice_backward(void *ctx, const rp_tensor *out, const float *dout,
                                rp_tensor *const *in, float *const *din, int n)
{
    if (din[0])
        for (int64_t i = 0; i < out->numel; i++)
            din[0][i] += 2.0f * dout[i];
    return RP_OK;
}

static void count_ready(rp_tensor *p, void *ctx)
{
    (*(int *)ctx)++;
}

static void test_new_ops_steady_state(void **state)
{
    static const rp_custom_op twice = {"twice", twice_forward, twice_backward};
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_init u = {RP_INIT_UNIFORM, 0.5f, 0, 0};
    rp_tensor *g = rp_params_add(ps, "g", 4, (int[]){2, 1, 1, 4}, u, true);
    rp_tensor *ln = rp_params_add(ps, "ln", 1, (int[]){4}, u, true);
    assert_int_equal(rp_params_finalize(ps, 3), RP_OK);
    rp_comm *comms[1];
    assert_int_equal(rp_comm_threads_create(comms, 1, NULL, 5.0), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 4096), RP_OK);
    int fired1 = 0, fired2 = 0;
    assert_int_equal(rp_tape_add_grad_ready(t, count_ready, &fired1), RP_OK);
    assert_int_equal(rp_tape_add_grad_ready(t, count_ready, &fired2), RP_OK);
    float xd[2 * 3 * 3 * 4];
    tu_fill(xd, 72, 8, -1, 1);
    uint64_t allocs[5];
    for (int step = 0; step < 5; step++) {
        rp_tape_reset(t);
        rp_params_zero_grad(ps);
        rp_tensor *x = rp_tensor_from(t, 4, (int[]){2, 3, 3, 4}, xd);
        rp_tensor *h = rp_layer_norm(t, rp_mul(t, x, g), ln, NULL, 1e-5f);
        h = rp_div(t, h, rp_add(t, rp_detach(t, rp_clamp(t, h, 1.0f, 2.0f)), rp_reciprocal(t, ln)));
        h = rp_custom(t, &twice, NULL, &h, 1, h->ndim, h->shape);
        h = rp_tensor_all_reduce(t, comms[0], h, RP_SUM);
        rp_tensor *s = rp_sum_axes(t, h, 2, (int[]){1, 2}, false);
        rp_tensor *loss = rp_mean(t, rp_log_softmax(t, s));
        assert_non_null(loss);
        assert_int_equal(rp_backward(t, loss), RP_OK);
        allocs[step] = rp_alloc_count();
    }
    assert_int_equal(fired1, 10);
    assert_int_equal(fired2, 10);
    for (int step = 3; step < 5; step++)
        assert_int_equal(allocs[step], allocs[2]);
    rp_tape_destroy(t);
    rp_comm_destroy(comms[0]);
    rp_params_destroy(ps);
}

/*
 * Pass-through gradients (a reshape's, a cast's, an add's first input) hand their output's
 * buffer to an input with no gradient yet. Each tensor still gets its own sum: p's first
 * gradient comes from an add that q also feeds, and p gains more after (from ops recorded
 * before it), which must not reach q; q + q doubles; a broadcast add passes dy to its first
 * input and sums it into the second. Small integers, so every sum is exact.
 */
static void test_pass_through_gradients_stay_apart(void **state)
{
    (void)state;
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float pv[6] = {1, 2, 3, 4, 5, 6}, qv[6] = {6, 5, 4, 3, 2, 1}, bv[3] = {1, 1, 1};
    float c[6] = {1, -2, 3, -4, 5, -6}, e[6] = {2, 2, -1, -1, 3, 3}, c2[6] = {7, 0, 1, 0, 2, 0};
    float c3[6] = {1, 1, 2, 2, 3, 3};
    rp_tensor *p = rp_tensor_from(t, 2, (int[]){2, 3}, pv),
              *q = rp_tensor_from(t, 2, (int[]){2, 3}, qv);
    rp_tensor *b = rp_tensor_from(t, 1, (int[]){3}, bv);
    rp_tensor_set_requires_grad(p, true);
    rp_tensor_set_requires_grad(q, true);
    rp_tensor_set_requires_grad(b, true);
    rp_tensor *ct = rp_tensor_from(t, 2, (int[]){2, 3}, c);
    /* Recorded first, so their gradients reach p after the add's. */
    rp_tensor *l1 = rp_sum(t, rp_mul(t, p, rp_tensor_from(t, 2, (int[]){2, 3}, e)));
    rp_tensor *l2 =
        rp_sum(t, rp_mul(t, rp_reshape(t, p, 1, (int[]){6}), rp_tensor_from(t, 1, (int[]){6}, c2)));
    rp_tensor *l3 = rp_sum(t, rp_mul(t, rp_add(t, p, q), ct));
    rp_tensor *l4 = rp_sum(t, rp_mul(t, rp_add(t, q, q), ct));
    rp_tensor *l5 =
        rp_sum(t, rp_mul(t, rp_add(t, p, b), rp_tensor_from(t, 2, (int[]){2, 3}, c3))); /* bcast */
    rp_tensor *loss = rp_add(t, rp_add(t, rp_add(t, l1, l2), rp_add(t, l3, l4)), l5);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float dp[6], dq[6], db[3];
    assert_int_equal(rp_tensor_read_grad(p, dp, 6), RP_OK);
    assert_int_equal(rp_tensor_read_grad(q, dq, 6), RP_OK);
    assert_int_equal(rp_tensor_read_grad(b, db, 3), RP_OK);
    for (int i = 0; i < 6; i++) {
        assert_float_equal(dp[i], e[i] + c2[i] + c[i] + c3[i], 0);
        assert_float_equal(dq[i], 3 * c[i], 0);
    }
    for (int j = 0; j < 3; j++)
        assert_float_equal(db[j], c3[j] + c3[3 + j], 0);
    rp_tape_destroy(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_ready_once_after_every_use),
        cmocka_unit_test(test_eval_mode_records_nothing),
        cmocka_unit_test(test_backward_twice_is_error),
        cmocka_unit_test(test_grads_accumulate_until_zeroed),
        cmocka_unit_test(test_conv_grads_accumulate),
        cmocka_unit_test(test_arena_steady_state),
        cmocka_unit_test(test_tapes_in_openmp_team),
        cmocka_unit_test(test_errors_name_shapes),
        cmocka_unit_test(test_errors_name_values),
        cmocka_unit_test(test_null_propagates_without_overwriting),
        cmocka_unit_test(test_params_duplicate_name),
        cmocka_unit_test(test_params_guard),
        cmocka_unit_test(test_huge_shape_refused),
        cmocka_unit_test(test_detach_blocks_gradient_keeps_values),
        cmocka_unit_test(test_set_requires_grad),
        cmocka_unit_test(test_softmax_xent_kinds_on_one_tape),
        cmocka_unit_test(test_backward_from_equals_weighted_sum),
        cmocka_unit_test(test_two_listeners),
        cmocka_unit_test(test_frozen_set),
        cmocka_unit_test(test_custom_op_errors),
        cmocka_unit_test(test_custom_op_backward_error),
        cmocka_unit_test(test_new_ops_steady_state),
        cmocka_unit_test(test_pass_through_gradients_stay_apart),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
