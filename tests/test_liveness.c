/*
 * test_liveness.c - the backward pass hands dead memory back to the arena
 * (issue 17), and the fused residual tail.
 *
 *  - Backward with every released block filled with NaN (poison mode) gives
 *    bitwise the gradients of backward without poison, over a net that uses
 *    most ops (so no rule reads what it or a later rule released), and the
 *    released memory is reused: the arena's footprint stays well under
 *    forward + all gradients.
 *  - An op's output has no gradient after backward; leaves keep theirs; the
 *    forward values stay readable.
 *  - rp_batch_norm_add equals relu(add(batch_norm)) bitwise, values and
 *    gradients, with and without the ReLU, in training and in evaluation.
 *  - Batch norm outputs dropped after their last forward use (rp_tape_drop) and recomputed in
 *    backward give bitwise the gradients of storing them, in less memory; also when the last
 *    use reads them through views (rp_copy_to_group, rp_reshape).
 *  - A ResNet's steady-state step allocates nothing and faults no page in.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sys/resource.h>

#include "models/resnet/resnet.h"

/* ---- a net that exercises most rules -------------------------------------------- */

enum { N = 4, H = 8, C = 8, CLASSES = 5 };

typedef struct net {
    rp_params *ps;
    rp_conv2d_layer conv[4];
    rp_batchnorm_layer bn[4];
    rp_linear_layer fc;
    rp_tensor *ln_gamma, *ln_beta;
} net;

static void net_init(net *n)
{
    assert_int_equal(rp_params_create(&n->ps), RP_OK);
    char name[32];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "conv%d", i);
        assert_int_equal(rp_conv2d_layer_init(&n->conv[i], n->ps, name, C, C, 3, 1, 1, i == 3),
                         RP_OK);
        snprintf(name, sizeof name, "bn%d", i);
        assert_int_equal(rp_batchnorm_layer_init(&n->bn[i], n->ps, name, C), RP_OK);
    }
    n->bn[0].p.relu = true;
    n->ln_gamma = rp_params_add(n->ps, "ln.gamma", 1, (int[]){2 * C},
                                (rp_init){.kind = RP_INIT_CONSTANT, .value = 1}, true);
    n->ln_beta =
        rp_params_add(n->ps, "ln.beta", 1, (int[]){2 * C}, (rp_init){.kind = RP_INIT_ZEROS}, true);
    assert_int_equal(rp_linear_layer_init(&n->fc, n->ps, "fc", 2 * C, CLASSES, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(n->ps, 11), RP_OK);
}

/*
 * conv-bn-relu, a fused residual tail, an unfused one, a gate (mul by sigmoid), max and average
 * pools, a concat, layer norm, a reshape, the classifier and two losses.
 */
static rp_tensor *net_loss(rp_tape *t, net *n, rp_tensor *x, const int32_t *labels)
{
    rp_tensor *h0 =
        rp_batchnorm_layer_forward(t, &n->bn[0], rp_conv2d_layer_forward(t, &n->conv[0], x), true);
    rp_tensor *h1 = rp_batchnorm_layer_forward_add(
        t, &n->bn[1], rp_conv2d_layer_forward(t, &n->conv[1], h0), x, true, true);
    rp_tensor *h2 =
        rp_relu(t, rp_add(t,
                          rp_batchnorm_layer_forward(
                              t, &n->bn[2], rp_conv2d_layer_forward(t, &n->conv[2], h1), true),
                          h1));
    rp_tensor *gate = rp_sigmoid(t, rp_conv2d_layer_forward(t, &n->conv[3], h2));
    rp_tensor *g =
        rp_batchnorm_layer_forward_add(t, &n->bn[3], rp_mul(t, h2, gate), h0, false, true);
    rp_tensor *a = rp_max_pool2d(t, g, (rp_pool_params){2, 2, 0});
    rp_tensor *b = rp_avg_pool2d(t, h2, (rp_pool_params){2, 2, 0});
    rp_tensor *cat = rp_concat(t, (rp_tensor *[]){a, b}, 2);
    rp_tensor *pooled = rp_global_avg_pool(t, cat);
    rp_tensor *feat = rp_layer_norm(t, rp_reshape(t, pooled, 2, (int[]){N, 2 * C}), n->ln_gamma,
                                    n->ln_beta, 1e-5f);
    rp_tensor *logits = rp_linear_layer_forward(t, &n->fc, feat);
    rp_tensor *zero = rp_tensor_fill(t, 2, (int[]){N, 2 * C}, 0.0f);
    return rp_add(t, rp_softmax_cross_entropy(t, logits, labels),
                  rp_scale(t, rp_mse(t, feat, zero), 0.1f));
}

typedef struct result {
    float *grads; /* parameters, then the input's */
    int64_t count;
    double loss;
    size_t forward_live, footprint;
} result;

/* The parameters' gradients, then the input's, copied into r (r->count floats). */
static void keep_grads(result *r, const rp_params *ps, const rp_tensor *x)
{
    int64_t np = rp_params_trainable_numel(ps);
    r->count = np + x->numel;
    r->grads = test_malloc((size_t)r->count * sizeof(float));
    assert_int_equal(rp_params_read_grads(ps, r->grads), RP_OK);
    assert_int_equal(rp_tensor_read_grad(x, r->grads + np, x->numel), RP_OK);
}

static result run(net *n, bool poison)
{
    rp_params_zero_grad(n->ps);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_arena_set_poison(rp_tape_storage(t), poison);
    float xs[N * H * H * C];
    tu_fill(xs, N * H * H * C, 21, -1, 1);
    static const int32_t labels[N] = {0, 3, 1, 4};
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){N, H, H, C}, xs);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *loss = net_loss(t, n, x, labels);
    assert_non_null(loss);
    result r = {0};
    r.forward_live = rp_arena_get_stats(rp_tape_storage(t)).live;
    assert_int_equal(rp_backward(t, loss), RP_OK);
    r.footprint = rp_arena_get_stats(rp_tape_storage(t)).high_water;
    r.loss = rp_item(loss); /* forward values stay readable after backward */
    assert_null(loss->grad);
    assert_non_null(x->grad);
    keep_grads(&r, n->ps, x);
    rp_tape_destroy(t);
    return r;
}

static void test_poisoned_release_gives_exact_gradients(void **state)
{
    (void)state;
    net n;
    net_init(&n);
    result plain = run(&n, false), poisoned = run(&n, true);
    for (int64_t i = 0; i < plain.count; i++)
        if (!isfinite(plain.grads[i])) fail_msg("gradient %lld is not finite", (long long)i);
    assert_memory_equal(poisoned.grads, plain.grads, (size_t)plain.count * sizeof(float));
    assert_true(plain.loss == poisoned.loss);
    /*
     * Reuse: without release, backward would add a gradient for nearly every forward tensor
     * (about the forward's size again); with it the footprint grows by a fraction of that.
     */
    print_message("forward %zu bytes, footprint %zu\n", plain.forward_live, plain.footprint);
    assert_true(plain.footprint < plain.forward_live + plain.forward_live / 2);
    test_free(plain.grads);
    test_free(poisoned.grads);
    rp_params_destroy(n.ps);
}

/* The poison is NaN where a released block was: what a use after release would read. */
static void test_poison_fills_released_blocks(void **state)
{
    (void)state;
    rp_arena *a;
    assert_int_equal(rp_arena_create(&a, 1 << 16), RP_OK);
    rp_arena_set_poison(a, true);
    float *p = rp_arena_alloc(a, 100 * sizeof(float));
    float *q = rp_arena_alloc(a, 100 * sizeof(float));
    for (int i = 0; i < 100; i++)
        p[i] = q[i] = 1.0f;
    rp_arena_release(a, p, 100 * sizeof(float));
#if !defined(__SANITIZE_ADDRESS__) /* under ASan the read itself is the error it reports */
    for (int i = 0; i < 100; i++)
        assert_true(isnan(p[i]));
#endif
    /* The hole is reused first (best fit), then the top comes down as blocks go back. */
    float *r = rp_arena_alloc(a, 50 * sizeof(float));
    assert_ptr_equal(r, p);
    rp_arena_stats s = rp_arena_get_stats(a);
    assert_int_equal(s.live, (size_t)(448 + 256)); /* 400 and 200 bytes, rounded up to 64 */
    rp_arena_release(a, q, 100 * sizeof(float));
    rp_arena_release(a, r, 50 * sizeof(float));
    s = rp_arena_get_stats(a);
    assert_int_equal(s.used, 0);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.high_water, 2 * 448);
    rp_arena_destroy(a);
}

/* ---- rp_batch_norm_add against its three ops -------------------------------------- */

typedef struct tail_out {
    float y[N * H * H * C], dx[N * H * H * C], dr[N * H * H * C], dparams[4 * C];
} tail_out;

static void tail(bool fused, bool relu, bool training, tail_out *out)
{
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_batchnorm_layer bn;
    assert_int_equal(rp_batchnorm_layer_init(&bn, ps, "bn", C), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 5), RP_OK);
    float v[4 * C]; /* gamma, beta: not the defaults, so both matter; then the statistics */
    assert_int_equal(rp_params_numel(ps), 4 * C);
    assert_int_equal(rp_params_read_values(ps, v), RP_OK);
    tu_fill(v, 2 * C, 6, 0.5f, 1.5f);
    assert_int_equal(rp_params_write_values(ps, v), RP_OK);
    tu_fill(v, C, 7, -0.5f, 0.5f);
    assert_int_equal(rp_tensor_write(bn.running_mean, v, C), RP_OK);
    tu_fill(v, C, 8, 0.5f, 2.0f);
    assert_int_equal(rp_tensor_write(bn.running_var, v, C), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xs[N * H * H * C], rs[N * H * H * C], dys[N * H * H * C];
    tu_fill(xs, N * H * H * C, 31, -2, 3);
    tu_fill(rs, N * H * H * C, 32, -1, 1);
    tu_fill(dys, N * H * H * C, 33, -1, 1);
    const int shape[] = {N, H, H, C};
    rp_tensor *x = rp_tensor_from(t, 4, shape, xs), *r = rp_tensor_from(t, 4, shape, rs);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor_set_requires_grad(r, true);
    rp_tensor *y;
    if (fused) {
        y = rp_batchnorm_layer_forward_add(t, &bn, x, r, relu, training);
    } else {
        y = rp_add(t, rp_batchnorm_layer_forward(t, &bn, x, training), r);
        if (relu) y = rp_relu(t, y);
    }
    assert_non_null(y);
    const int64_t n = N * H * H * C;
    assert_int_equal(rp_tensor_read(y, out->y, n), RP_OK);
    assert_int_equal(rp_backward_from(t, y, dys), RP_OK);
    assert_int_equal(rp_tensor_read_grad(x, out->dx, n), RP_OK);
    assert_int_equal(rp_tensor_read_grad(r, out->dr, n), RP_OK);
    assert_int_equal(rp_params_trainable_numel(ps), 2 * C);
    assert_int_equal(rp_params_read_grads(ps, out->dparams), RP_OK);
    assert_int_equal(rp_tensor_read(bn.running_mean, out->dparams + 2 * C, C), RP_OK);
    assert_int_equal(rp_tensor_read(bn.running_var, out->dparams + 3 * C, C), RP_OK);
    rp_tape_destroy(t);
    rp_params_destroy(ps);
}

static void test_fused_tail_is_bitwise_the_three_ops(void **state)
{
    (void)state;
    static tail_out fused, plain;
    for (int relu = 0; relu < 2; relu++)
        for (int training = 0; training < 2; training++) {
            tail(true, relu, training, &fused);
            tail(false, relu, training, &plain);
            assert_memory_equal(fused.y, plain.y, sizeof fused.y);
            assert_memory_equal(fused.dx, plain.dx, sizeof fused.dx);
            assert_memory_equal(fused.dr, plain.dr, sizeof fused.dr);
            assert_memory_equal(fused.dparams, plain.dparams, sizeof fused.dparams);
            /* The ReLU did cut something, or the masks were not tested. */
            int zeros = 0;
            for (int i = 0; i < N * H * H * C; i++)
                zeros += fused.dr[i] == 0.0f;
            assert_true(relu ? zeros > 100 : zeros == 0);
        }
}

static void test_fused_tail_shape_error(void **state)
{
    (void)state;
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_batchnorm_layer bn;
    assert_int_equal(rp_batchnorm_layer_init(&bn, ps, "bn", C), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 5), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_fill(t, 4, (int[]){N, H, H, C}, 1.0f);
    rp_tensor *r = rp_tensor_fill(t, 4, (int[]){N, H, H / 2, C}, 1.0f);
    assert_null(rp_batchnorm_layer_forward_add(t, &bn, x, r, true, true));
    tu_assert_error_contains("[4, 8, 4, 8] must have the input's shape [4, 8, 8, 8]");
    rp_tape_destroy(t);
    rp_params_destroy(ps);
}

/* ---- recompute instead of store (rp_tape_drop) ------------------------------------- */

typedef struct r20_run {
    float *grads;
    int64_t count;
    float loss;
    size_t forward_live;
} r20_run;

/* One ResNet-20 training step's loss and gradients, its batch norms recomputed or stored. */
static r20_run resnet_grads(bool recompute, bool poison)
{
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.in_channels = 1;
    cfg.recompute_bn = recompute;
    rp_resnet *net;
    assert_int_equal(rp_resnet_create(&net, &cfg, 3), RP_OK);
    rp_params *ps = rp_resnet_params(net);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_arena_set_poison(rp_tape_storage(t), poison);
    enum { B = 4, S = 16 };
    float xs[B * S * S];
    tu_fill(xs, B * S * S, 51, -1, 1);
    static const int32_t labels[B] = {1, 7, 3, 9};
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){B, S, S, 1}, xs);
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, net, x, true), labels);
    assert_non_null(loss);
    r20_run r = {.loss = rp_item(loss), .count = rp_params_trainable_numel(ps)};
    r.forward_live = rp_arena_get_stats(rp_tape_storage(t)).live;
    assert_int_equal(rp_backward(t, loss), RP_OK);
    r.grads = test_malloc((size_t)r.count * sizeof(float));
    assert_int_equal(rp_params_read_grads(ps, r.grads), RP_OK);
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
    return r;
}

static void test_recomputed_batch_norms_give_bitwise_gradients(void **state)
{
    (void)state;
    r20_run stored = resnet_grads(false, false), recomputed = resnet_grads(true, true);
    assert_true(stored.loss == recomputed.loss);
    assert_memory_equal(recomputed.grads, stored.grads, (size_t)stored.count * sizeof(float));
    /* Each of the 9 blocks keeps one tensor fewer (of its 4) when the forward pass ends. */
    print_message("forward pass ends with %zu bytes stored, %zu recomputed\n", stored.forward_live,
                  recomputed.forward_live);
    assert_true(recomputed.forward_live < stored.forward_live * 5 / 6);
    test_free(stored.grads);
    test_free(recomputed.grads);
}

static void test_drop_refuses_what_it_cannot_recompute(void **state)
{
    (void)state;
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_batchnorm_layer bn;
    assert_int_equal(rp_batchnorm_layer_init(&bn, ps, "bn", C), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 5), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    const int shape[] = {N, H, H, C};
    rp_tensor *x = rp_tensor_fill(t, 4, shape, 1.0f), *r = rp_tensor_fill(t, 4, shape, 2.0f);
    rp_tensor *relu = rp_relu(t, rp_batchnorm_layer_forward(t, &bn, x, true));
    assert_int_equal(rp_tape_drop(t, relu), RP_ERR_INVALID);
    tu_assert_error_contains("only a batch norm's output");
    assert_int_equal(rp_tape_drop(t, x), RP_ERR_INVALID); /* a leaf */
    rp_tensor *tail = rp_batchnorm_layer_forward_add(t, &bn, x, r, true, true);
    assert_int_equal(rp_tape_drop(t, tail), RP_ERR_INVALID);
    tu_assert_error_contains("rp_batch_norm_add's output cannot be recomputed");
    rp_tensor *y = rp_batchnorm_layer_forward(t, &bn, x, true);
    assert_int_equal(rp_tape_drop(t, y), RP_OK);
    assert_null(y->data);
    assert_int_equal(rp_tape_drop(t, y), RP_ERR_INVALID);
    tu_assert_error_contains("already dropped");
    assert_int_equal(rp_tape_drop(NULL, y), RP_ERR_INVALID);
    rp_tape_destroy(t);
    rp_params_destroy(ps);
}

/*
 * A batch norm's output read only through views - rp_copy_to_group's (a one-member group) and a
 * reshape of it, as a tensor-parallel column convolution reads its input - then dropped: one
 * step's loss and gradients (parameters and input), and the arena's live bytes when the forward
 * pass ends.
 */
static result drop_through_views(bool drop, bool poison)
{
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_batchnorm_layer bn;
    rp_linear_layer fc;
    assert_int_equal(rp_batchnorm_layer_init(&bn, ps, "bn", C), RP_OK);
    bn.p.relu = true;
    assert_int_equal(rp_linear_layer_init(&fc, ps, "fc", H * H * C, CLASSES, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 13), RP_OK);
    rp_comm *one;
    assert_int_equal(rp_comm_threads_create(&one, 1, NULL, 10.0), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_arena_set_poison(rp_tape_storage(t), poison);
    float xs[N * H * H * C];
    tu_fill(xs, N * H * H * C, 33, -2, 2);
    static const int32_t labels[N] = {2, 0, 4, 1};
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){N, H, H, C}, xs);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *a = rp_batchnorm_layer_forward(t, &bn, rp_scale(t, x, 1.5f), true);
    rp_tensor *v = rp_reshape(t, rp_copy_to_group(t, one, a), 2, (int[]){N, H * H * C});
    rp_tensor *logits = rp_linear_layer_forward(t, &fc, v);
    assert_non_null(logits);
    if (drop) {
        assert_int_equal(rp_tape_drop(t, a), RP_OK);
        assert_null(v->data); /* the views went with it */
    }
    rp_tensor *loss = rp_softmax_cross_entropy(t, logits, labels);
    result r = {.loss = rp_item(loss)};
    r.forward_live = rp_arena_get_stats(rp_tape_storage(t)).live;
    assert_int_equal(rp_backward(t, loss), RP_OK);
    keep_grads(&r, ps, x);
    rp_tape_destroy(t);
    rp_comm_destroy(one);
    rp_params_destroy(ps);
    return r;
}

static void test_drop_follows_views(void **state)
{
    (void)state;
    result stored = drop_through_views(false, false), dropped = drop_through_views(true, true);
    assert_true(stored.loss == dropped.loss);
    assert_int_equal(stored.count, dropped.count);
    /* The linear layer's weight gradient reads the view: recomputed values, not poison. */
    assert_memory_equal(dropped.grads, stored.grads, (size_t)stored.count * sizeof(float));
    for (int64_t i = 0; i < dropped.count; i++)
        assert_true(isfinite(dropped.grads[i]));
    size_t act = (size_t)N * H * H * C * sizeof(float);
    assert_true(dropped.forward_live + act <= stored.forward_live);
    test_free(stored.grads);
    test_free(dropped.grads);
}

/* ---- the steady state --------------------------------------------------------------- */

static long faults(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt + u.ru_majflt;
}

/*
 * ResNet-20 training steps (forward, backward, SGD): after three to settle, five more allocate
 * nothing through rp_alloc, take no chunk from the system, and fault no page in (getrusage).
 */
static void test_resnet_steady_state_faults_nothing(void **state)
{
    (void)state;
    rp_kernels_set_threads(1);
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.in_channels = 1;
    rp_resnet *net;
    assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_OK);
    rp_params *ps = rp_resnet_params(net);
    rp_optim_config oc = rp_optim_config_default();
    rp_optimizer *opt;
    assert_int_equal(rp_optimizer_create(&opt, ps, &oc), RP_OK);
    enum { B = 16, S = 28 };
    static float xs[B * S * S];
    tu_fill(xs, B * S * S, 41, -1, 1);
    int32_t labels[B];
    for (int i = 0; i < B; i++)
        labels[i] = i % 10;
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    long f0 = 0;
    uint64_t a0 = 0, s0 = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) {
            f0 = faults();
            a0 = rp_alloc_count();
            s0 = rp_arena_get_stats(rp_tape_storage(t)).system_allocs;
        }
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 4, (int[]){B, S, S, 1}, xs);
        rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, net, x, true), labels);
        assert_non_null(loss);
        assert_int_equal(rp_backward(t, loss), RP_OK);
        assert_int_equal(rp_optimizer_step(opt, 0.01f), RP_OK);
    }
    long df = faults() - f0;
    print_message("5 steady steps: %ld page faults, %llu allocations\n", df,
                  (unsigned long long)(rp_alloc_count() - a0));
    assert_int_equal(rp_alloc_count(), a0);
    assert_int_equal(rp_arena_get_stats(rp_tape_storage(t)).system_allocs, s0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* (A sanitizer's own bookkeeping maps pages as it goes.) */
    assert_int_equal(df, 0);
#endif
    rp_tape_destroy(t);
    rp_optimizer_destroy(opt);
    rp_resnet_destroy(net);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poisoned_release_gives_exact_gradients),
        cmocka_unit_test(test_poison_fills_released_blocks),
        cmocka_unit_test(test_fused_tail_is_bitwise_the_three_ops),
        cmocka_unit_test(test_fused_tail_shape_error),
        cmocka_unit_test(test_recomputed_batch_norms_give_bitwise_gradients),
        cmocka_unit_test(test_drop_refuses_what_it_cannot_recompute),
        cmocka_unit_test(test_drop_follows_views),
        cmocka_unit_test(test_resnet_steady_state_faults_nothing),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
