/*
 * test_optim.c - the update rules against values worked out step by step in
 * double precision, the optimizer over a parameter list (update, zeroed
 * gradients, NaN rejection, config validation) and the learning-rate
 * schedules.
 *
 * The expected values are written out one step at a time from the formulas
 * of torch.optim, so a test reads like the hand calculation it stands for.
 * Where a number is simple enough, the literal result is checked as well.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

#define N 3 /* elements in the hand-computed tests */

/* Initial parameters and the gradients of steps 1, 2 and 3 (all exact in float). */
static const double P0[N] = {1.0, -0.5, 2.0};
static const double G[3][N] = {
    {0.5, -1.0, 0.25},
    {-0.25, 0.5, 1.5},
    {1.0, 0.75, -0.5},
};

/* |got - want| <= tol * max(1, |want|) for every element, printing the first miss. */
static void assert_close(const float *got, const double *want, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= tol * fmax(1.0, fabs(want[i])))) {
            print_error("element %d: got %.9g, want %.9g (error %.3g)\n", i, (double)got[i],
                        want[i], err);
            fail();
        }
    }
}

/* A learning rate: relative error at most 1e-6 (absolute 1e-9 near zero). */
static void assert_lr(float got, double want)
{
    double err = fabs((double)got - want);
    if (!(err <= 1e-6 * fabs(want) + 1e-9)) {
        print_error("lr: got %.9g, want %.9g\n", (double)got, want);
        fail();
    }
}

/* Starts p at P0 and applies the three steps of G with rp_optim_apply. */
static void run_three_steps(const rp_optim_config *cfg, float lr, float *p, float *state)
{
    for (int e = 0; e < N; e++)
        p[e] = (float)P0[e];
    for (int t = 1; t <= 3; t++) {
        float g[N];
        for (int e = 0; e < N; e++)
            g[e] = (float)G[t - 1][e];
        rp_optim_apply(cfg, p, g, state, N, lr, t);
    }
}

static rp_optim_config sgd_config(float momentum, bool nesterov, float wd)
{
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = RP_OPTIM_SGD;
    cfg.momentum = momentum;
    cfg.nesterov = nesterov;
    cfg.weight_decay = wd;
    return cfg;
}

/* Betas and eps that are exact in float and far enough from the defaults to matter. */
static rp_optim_config adam_config(rp_optim_kind kind, float wd)
{
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = kind;
    cfg.weight_decay = wd;
    cfg.beta1 = 0.75f;
    cfg.beta2 = 0.875f;
    cfg.eps = 0.015625f;
    return cfg;
}

/* ---- configuration ---------------------------------------------------------- */

static void test_config_default_and_slots(void **unused)
{
    (void)unused;
    rp_optim_config cfg = rp_optim_config_default();
    assert_int_equal(cfg.kind, RP_OPTIM_SGD);
    assert_true(cfg.momentum == 0.9f);
    assert_false(cfg.nesterov);
    assert_true(cfg.weight_decay == 0.0f);
    assert_true(cfg.beta1 == 0.9f);
    assert_true(cfg.beta2 == 0.999f);
    assert_true(cfg.eps == 1e-8f);

    assert_int_equal(rp_optim_slots(&cfg), 1);
    cfg.momentum = 0.0f;
    assert_int_equal(rp_optim_slots(&cfg), 0);
    cfg.kind = RP_OPTIM_ADAM;
    assert_int_equal(rp_optim_slots(&cfg), 2);
    cfg.kind = RP_OPTIM_ADAMW;
    assert_int_equal(rp_optim_slots(&cfg), 2);
}

/* ---- rp_optim_apply against hand computation ---------------------------------- */

static void test_apply_sgd_plain(void **unused)
{
    (void)unused;
    rp_optim_config cfg = sgd_config(0.0f, false, 0.0f);
    const double lr = 0.1;
    float p[N];
    run_three_steps(&cfg, (float)lr, p, NULL);

    double want[N];
    for (int e = 0; e < N; e++) {
        double x = P0[e];
        x = x - lr * G[0][e]; /* step 1 */
        x = x - lr * G[1][e]; /* step 2 */
        x = x - lr * G[2][e]; /* step 3 */
        want[e] = x;
    }
    assert_close(p, want, N, 1e-6);
    /* Element 0 by hand: 1 - 0.05 = 0.95; + 0.025 = 0.975; - 0.1 = 0.875. */
    assert_close(p, (const double[]){0.875}, 1, 1e-6);
}

static void test_apply_sgd_weight_decay(void **unused)
{
    (void)unused;
    rp_optim_config cfg = sgd_config(0.0f, false, 0.5f);
    const double lr = 0.1, wd = 0.5;
    float p[N];
    run_three_steps(&cfg, (float)lr, p, NULL);

    double want[N];
    for (int e = 0; e < N; e++) {
        double x = P0[e];
        x = x - lr * (G[0][e] + wd * x); /* step 1 */
        x = x - lr * (G[1][e] + wd * x); /* step 2 */
        x = x - lr * (G[2][e] + wd * x); /* step 3 */
        want[e] = x;
    }
    assert_close(p, want, N, 1e-6);
    /* Element 0 by hand: 1 - 0.1*(0.5+0.5) = 0.9; 0.9 - 0.1*(-0.25+0.45) = 0.88;
     * 0.88 - 0.1*(1+0.44) = 0.736. */
    assert_close(p, (const double[]){0.736}, 1, 1e-6);
}

static void test_apply_sgd_momentum(void **unused)
{
    (void)unused;
    rp_optim_config cfg = sgd_config(0.9f, false, 0.0f);
    const double lr = 0.1, mu = 0.9;
    float p[N];
    /* The buffer holds rubbish before step 1: the first step must overwrite it with g. */
    float state[N] = {7.0f, -3.0f, 100.0f};
    run_three_steps(&cfg, (float)lr, p, state);

    double want_p[N], want_v[N];
    for (int e = 0; e < N; e++) {
        double x = P0[e], v;
        v = G[0][e]; /* step 1: v = g */
        x = x - lr * v;
        v = mu * v + G[1][e]; /* step 2 */
        x = x - lr * v;
        v = mu * v + G[2][e]; /* step 3 */
        x = x - lr * v;
        want_p[e] = x;
        want_v[e] = v;
    }
    assert_close(p, want_p, N, 1e-6);
    assert_close(state, want_v, N, 1e-6);
    /* Element 0 by hand: v = 0.5, p = 0.95; v = 0.2, p = 0.93; v = 1.18, p = 0.812. */
    assert_close(p, (const double[]){0.812}, 1, 1e-6);
    assert_close(state, (const double[]){1.18}, 1, 1e-6);
}

static void test_apply_sgd_nesterov(void **unused)
{
    (void)unused;
    rp_optim_config cfg = sgd_config(0.9f, true, 0.125f);
    const double lr = 0.1, mu = 0.9, wd = 0.125;
    float p[N];
    float state[N] = {0};
    run_three_steps(&cfg, (float)lr, p, state);

    double want_p[N], want_v[N];
    for (int e = 0; e < N; e++) {
        double x = P0[e], v, d;
        d = G[0][e] + wd * x; /* step 1: v = d */
        v = d;
        x = x - lr * (d + mu * v);
        d = G[1][e] + wd * x; /* step 2 */
        v = mu * v + d;
        x = x - lr * (d + mu * v);
        d = G[2][e] + wd * x; /* step 3 */
        v = mu * v + d;
        x = x - lr * (d + mu * v);
        want_p[e] = x;
        want_v[e] = v;
    }
    assert_close(p, want_p, N, 1e-6);
    assert_close(state, want_v, N, 1e-6);
}

/*
 * The three Adam variants share this calculation: `l2` is added to the
 * gradient (Adam), `decoupled` shrinks the parameter first (AdamW).
 */
static void adam_expected(double lr, double l2, double decoupled, double *want_p, double *want_m,
                          double *want_v)
{
    const double b1 = 0.75, b2 = 0.875, eps = 0.015625;
    for (int e = 0; e < N; e++) {
        double x = P0[e], m = 0.0, v = 0.0, g, mhat, vhat;

        x = x * (1.0 - lr * decoupled); /* step 1 */
        g = G[0][e] + l2 * x;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        mhat = m / (1.0 - b1);
        vhat = v / (1.0 - b2);
        x = x - lr * mhat / (sqrt(vhat) + eps);

        x = x * (1.0 - lr * decoupled); /* step 2 */
        g = G[1][e] + l2 * x;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        mhat = m / (1.0 - b1 * b1);
        vhat = v / (1.0 - b2 * b2);
        x = x - lr * mhat / (sqrt(vhat) + eps);

        x = x * (1.0 - lr * decoupled); /* step 3 */
        g = G[2][e] + l2 * x;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        mhat = m / (1.0 - b1 * b1 * b1);
        vhat = v / (1.0 - b2 * b2 * b2);
        x = x - lr * mhat / (sqrt(vhat) + eps);

        want_p[e] = x;
        want_m[e] = m;
        want_v[e] = v;
    }
}

static void check_adam(rp_optim_kind kind, double wd, double l2, double decoupled)
{
    rp_optim_config cfg = adam_config(kind, (float)wd);
    const double lr = 0.125;
    float p[N];
    float state[2 * N] = {0};
    run_three_steps(&cfg, (float)lr, p, state);

    double want_p[N], want_m[N], want_v[N];
    adam_expected(lr, l2, decoupled, want_p, want_m, want_v);
    assert_close(p, want_p, N, 1e-6);
    assert_close(state, want_m, N, 1e-6);     /* slot 0: first moment */
    assert_close(state + N, want_v, N, 1e-6); /* slot 1: second moment */
}

static void test_apply_adam(void **unused)
{
    (void)unused;
    check_adam(RP_OPTIM_ADAM, 0.0, 0.0, 0.0);

    /* Element 0, step 1, by hand: m-hat = 0.5, v-hat = 0.25, so the step is
     * 0.125 * 0.5 / (0.5 + 0.015625) = 0.121212..., p = 0.878787... */
    rp_optim_config cfg = adam_config(RP_OPTIM_ADAM, 0.0f);
    float p = 1.0f, g = 0.5f, state[2] = {0};
    rp_optim_apply(&cfg, &p, &g, state, 1, 0.125f, 1);
    assert_close(&p, (const double[]){1.0 - 0.0625 / 0.515625}, 1, 1e-6);
}

static void test_apply_adam_l2(void **unused)
{
    (void)unused;
    check_adam(RP_OPTIM_ADAM, 0.25, 0.25, 0.0);
}

static void test_apply_adamw(void **unused)
{
    (void)unused;
    check_adam(RP_OPTIM_ADAMW, 0.25, 0.0, 0.25);
}

/*
 * A range updated in one call and in pieces (as parameter-server shards do)
 * ends the same; an odd length also exercises the vector loop's tail.
 */
static void test_apply_in_pieces(void **unused)
{
    (void)unused;
    enum { M = 37, CUT = 13 };
    rp_optim_config cfgs[3] = {sgd_config(0.9f, true, 0.01f), adam_config(RP_OPTIM_ADAM, 0.01f),
                               adam_config(RP_OPTIM_ADAMW, 0.01f)};
    for (int c = 0; c < 3; c++) {
        float p_whole[M], p_cut[M], g[M];
        float s_whole[2 * M] = {0}, s_cut[2 * M] = {0};
        tu_fill(p_whole, M, 1, -1.0f, 1.0f);
        memcpy(p_cut, p_whole, sizeof(p_whole));
        int slots = rp_optim_slots(&cfgs[c]);
        for (int t = 1; t <= 3; t++) {
            tu_fill(g, M, 10 + (uint64_t)t, -1.0f, 1.0f);
            rp_optim_apply(&cfgs[c], p_whole, g, s_whole, M, 0.05f, t);
            /* Each piece has its own slots back to back, n floats each. */
            float piece_a[2 * CUT], piece_b[2 * (M - CUT)];
            for (int k = 0; k < slots; k++) {
                memcpy(piece_a + k * CUT, s_cut + k * M, CUT * sizeof(float));
                memcpy(piece_b + k * (M - CUT), s_cut + k * M + CUT, (M - CUT) * sizeof(float));
            }
            rp_optim_apply(&cfgs[c], p_cut, g, piece_a, CUT, 0.05f, t);
            rp_optim_apply(&cfgs[c], p_cut + CUT, g + CUT, piece_b, M - CUT, 0.05f, t);
            for (int k = 0; k < slots; k++) {
                memcpy(s_cut + k * M, piece_a + k * CUT, CUT * sizeof(float));
                memcpy(s_cut + k * M + CUT, piece_b + k * (M - CUT), (M - CUT) * sizeof(float));
            }
        }
        assert_true(tu_max_rel_diff(p_cut, p_whole, M) <= 1e-6);
        assert_true(tu_max_rel_diff(s_cut, s_whole, slots * M) <= 1e-6);
        /* And the update did move the parameters. */
        float p0[M];
        tu_fill(p0, M, 1, -1.0f, 1.0f);
        assert_true(tu_max_rel_diff(p_whole, p0, M) > 1e-3);
    }
}

/* ---- the optimizer over a parameter list ------------------------------------------ */

/* Two trainable parameters (6 and 4 elements) and a 2-element buffer. */
typedef struct fixture {
    rp_params *params;
    rp_tensor *w, *b, *buf;
} fixture;

static void fixture_make(fixture *f)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(rp_params_create(&f->params), RP_OK);
    int shape_w[2] = {2, 3}, shape_b[1] = {4}, shape_buf[1] = {2};
    rp_init one = {.kind = RP_INIT_CONSTANT, .value = 1.0f};
    rp_init minus_half = {.kind = RP_INIT_CONSTANT, .value = -0.5f};
    rp_init three = {.kind = RP_INIT_CONSTANT, .value = 3.0f};
    f->w = rp_params_add(f->params, "layer.weight", 2, shape_w, one, true);
    f->b = rp_params_add(f->params, "layer.bias", 1, shape_b, minus_half, true);
    f->buf = rp_params_add(f->params, "norm.running_var", 1, shape_buf, three, false);
    assert_non_null(f->w);
    assert_non_null(f->b);
    assert_non_null(f->buf);
    assert_int_equal(rp_params_finalize(f->params, 7), RP_OK);
    assert_int_equal(rp_params_trainable_numel(f->params), 10);
    assert_int_equal(rp_params_trainable_count(f->params), 2);
}

/* Expected initial value of trainable element i (the w block then the b block). */
static double initial_value(int i)
{
    return i < 6 ? 1.0 : -0.5;
}

/* The storage is the kernel table's: the tests read and write it through host copies. */
static void read_grads(const fixture *f, float *grad)
{
    assert_int_equal(rp_params_read_grads(f->params, grad), RP_OK);
}

static void write_grads(fixture *f, const float *grad)
{
    assert_int_equal(rp_params_write_grads(f->params, grad), RP_OK);
}

static void read_state(const rp_optimizer *opt, float *state)
{
    assert_int_equal(rp_optimizer_read_state(opt, state), RP_OK);
}

static void assert_grads_zero(const fixture *f)
{
    float grad[10];
    read_grads(f, grad);
    for (int i = 0; i < 10; i++)
        assert_true(grad[i] == 0.0f);
}

/* The buffer keeps its initial values (an optimizer never touches buffers). */
static void assert_buffer_untouched(const fixture *f)
{
    for (int i = 0; i < 2; i++)
        assert_true(rp_tensor_get(f->buf, i) == 3.0f);
}

static void assert_values_initial(const fixture *f)
{
    for (int i = 0; i < 6; i++)
        assert_true(rp_tensor_get(f->w, i) == 1.0f);
    for (int i = 0; i < 4; i++)
        assert_true(rp_tensor_get(f->b, i) == -0.5f);
    assert_buffer_untouched(f);
}

/* The trainable values in block order, w then b. */
static void gather_values(const fixture *f, float *out)
{
    assert_int_equal(rp_tensor_read(f->w, out, 6), RP_OK);
    assert_int_equal(rp_tensor_read(f->b, out + 6, 4), RP_OK);
}

static void test_optimizer_sgd_momentum_steps(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config cfg = sgd_config(0.9f, false, 0.0f);
    rp_optimizer *opt = NULL;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &cfg), RP_OK);
    assert_int_equal(rp_optimizer_steps(opt), 0);

    int64_t state_numel = -1;
    assert_non_null(rp_optimizer_state(opt, &state_numel));
    assert_int_equal(state_numel, 10);

    const double lr = 0.5, mu = 0.9;
    double x[10], v[10];
    uint64_t allocs_before = 0;
    for (int t = 1; t <= 2; t++) {
        float grad[10], state[10];
        for (int i = 0; i < 10; i++) {
            double g = t == 1 ? 0.125 * (i + 1) : -0.0625 * i;
            grad[i] = (float)g;
            if (t == 1) {
                x[i] = initial_value(i);
                v[i] = g;
            } else {
                v[i] = mu * v[i] + g;
            }
            x[i] = x[i] - lr * v[i];
        }
        write_grads(&f, grad);
        if (t == 2) allocs_before = rp_alloc_count();
        assert_int_equal(rp_optimizer_step(opt, (float)lr), RP_OK);
        if (t == 2) assert_true(rp_alloc_count() == allocs_before); /* steady state: no malloc */
        assert_int_equal(rp_optimizer_steps(opt), t);
        assert_grads_zero(&f);

        float got[10];
        gather_values(&f, got);
        assert_close(got, x, 10, 1e-6);
        read_state(opt, state);
        assert_close(state, v, 10, 1e-6);
        assert_buffer_untouched(&f);
    }
    /* Element 0 by hand: v = 0.125, p = 0.9375; v = 0.1125, p = 0.88125. */
    assert_close((const float[]){rp_tensor_get(f.w, 0)}, (const double[]){0.88125}, 1, 1e-6);

    rp_optimizer_destroy(opt);
    rp_params_destroy(f.params);
}

/* Adam's bias corrections follow the step count, including one set from outside. */
static void test_optimizer_adam_set_steps(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = RP_OPTIM_ADAM;
    cfg.eps = 0.01f;
    rp_optimizer *opt = NULL;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &cfg), RP_OK);
    int64_t state_numel = 0;
    assert_non_null(rp_optimizer_state(opt, &state_numel));
    assert_int_equal(state_numel, 20);

    rp_optimizer_set_steps(opt, 9);
    assert_int_equal(rp_optimizer_steps(opt), 9);
    float grad[10];
    for (int i = 0; i < 10; i++)
        grad[i] = (float)(0.25 * (i - 4.5));
    write_grads(&f, grad);
    const double lr = 0.01;
    assert_int_equal(rp_optimizer_step(opt, (float)lr), RP_OK);
    assert_int_equal(rp_optimizer_steps(opt), 10);
    assert_grads_zero(&f);

    /* Step 10 from zero moments: m = 0.1 g, v = 0.001 g^2, corrected by 1 - beta^10. */
    double want[10];
    for (int i = 0; i < 10; i++) {
        double g = 0.25 * (i - 4.5);
        double m = (1.0 - 0.9) * g;
        double v = (1.0 - 0.999) * g * g;
        double mhat = m / (1.0 - pow(0.9, 10));
        double vhat = v / (1.0 - pow(0.999, 10));
        want[i] = initial_value(i) - lr * mhat / (sqrt(vhat) + 0.01);
    }
    float got[10];
    gather_values(&f, got);
    assert_close(got, want, 10, 1e-6);

    rp_optimizer_destroy(opt);
    rp_params_destroy(f.params);
}

static void test_optimizer_rejects_nonfinite_grad(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config cfg = sgd_config(0.9f, false, 0.0f);
    rp_optimizer *opt = NULL;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &cfg), RP_OK);
    float grad[10], state[10];

    /* A NaN in element 2 of the second parameter. */
    for (int i = 0; i < 10; i++)
        grad[i] = 0.25f;
    grad[6 + 2] = NAN;
    write_grads(&f, grad);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_ERR_NUMERIC);
    tu_assert_error_contains("layer.bias");
    tu_assert_error_contains("element 2");
    assert_values_initial(&f);
    assert_int_equal(rp_optimizer_steps(opt), 0);
    read_state(opt, state);
    for (int i = 0; i < 10; i++)
        assert_true(state[i] == 0.0f);
    read_grads(&f, grad);
    for (int i = 0; i < 10; i++) {
        if (i == 8)
            assert_true(isnan(grad[i]));
        else
            assert_true(grad[i] == 0.25f); /* gradients kept for inspection */
    }

    /* An infinity in element 0 of the first parameter. */
    grad[6 + 2] = 0.25f;
    grad[0] = -INFINITY;
    write_grads(&f, grad);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_ERR_NUMERIC);
    tu_assert_error_contains("layer.weight");
    assert_values_initial(&f);
    assert_int_equal(rp_optimizer_steps(opt), 0);

    /* Once clean, the step goes through and is still the first one (v = g). */
    grad[0] = 0.25f;
    write_grads(&f, grad);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_OK);
    assert_int_equal(rp_optimizer_steps(opt), 1);
    read_state(opt, state);
    for (int i = 0; i < 10; i++)
        assert_true(state[i] == 0.25f);
    assert_close((const float[]){rp_tensor_get(f.w, 0)}, (const double[]){1.0 - 0.025}, 1, 1e-6);
    assert_grads_zero(&f);

    rp_optimizer_destroy(opt);
    rp_params_destroy(f.params);
}

typedef struct bad_config {
    rp_optim_config cfg;
    const char *needle; /* what the message must name */
} bad_config;

static void test_optimizer_invalid_config(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config sgd = sgd_config(0.9f, false, 0.0f);
    rp_optim_config adam = adam_config(RP_OPTIM_ADAM, 0.0f);
    rp_optim_config adamw = adam_config(RP_OPTIM_ADAMW, 0.0f);
    bad_config bad[12];
    int n = 0;
    bad[n] = (bad_config){sgd, "weight_decay"};
    bad[n++].cfg.weight_decay = -0.1f;
    bad[n] = (bad_config){adamw, "weight_decay"};
    bad[n++].cfg.weight_decay = -1e-4f;
    bad[n] = (bad_config){sgd, "weight_decay"};
    bad[n++].cfg.weight_decay = NAN;
    bad[n] = (bad_config){sgd, "momentum"};
    bad[n++].cfg.momentum = -0.5f;
    bad[n] = (bad_config){sgd, "nesterov"};
    bad[n].cfg.momentum = 0.0f;
    bad[n++].cfg.nesterov = true;
    bad[n] = (bad_config){adam, "beta1"};
    bad[n++].cfg.beta1 = 1.0f;
    bad[n] = (bad_config){adam, "beta1"};
    bad[n++].cfg.beta1 = -0.1f;
    bad[n] = (bad_config){adamw, "beta2"};
    bad[n++].cfg.beta2 = 1.0f;
    bad[n] = (bad_config){adam, "beta2"};
    bad[n++].cfg.beta2 = 1.5f;
    bad[n] = (bad_config){adam, "eps"};
    bad[n++].cfg.eps = 0.0f;
    bad[n] = (bad_config){adamw, "eps"};
    bad[n++].cfg.eps = -1e-8f;
    for (int i = 0; i < n; i++) {
        rp_optimizer *opt = (rp_optimizer *)&f; /* must be reset to NULL */
        rp_error_clear();
        assert_int_equal(rp_optimizer_create(&opt, f.params, &bad[i].cfg), RP_ERR_INVALID);
        assert_null(opt);
        tu_assert_error_contains(bad[i].needle);
    }
    /* The value at fault is named, not only the field. */
    rp_optimizer *opt = NULL;
    rp_optim_config neg = sgd;
    neg.momentum = -0.5f;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &neg), RP_ERR_INVALID);
    tu_assert_error_contains("-0.5");

    /* Edge values that are valid. */
    rp_optim_config ok = adam;
    ok.beta1 = 0.0f;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &ok), RP_OK);
    rp_optimizer_destroy(opt);
    ok = sgd_config(0.0f, false, 0.0f); /* plain SGD: no state */
    assert_int_equal(rp_optimizer_create(&opt, f.params, &ok), RP_OK);
    int64_t state_numel = -1;
    assert_null(rp_optimizer_state(opt, &state_numel));
    assert_int_equal(state_numel, 0);
    rp_optimizer_destroy(opt);

    /* NULL arguments. */
    assert_int_equal(rp_optimizer_create(&opt, NULL, &sgd), RP_ERR_INVALID);
    assert_int_equal(rp_optimizer_create(&opt, f.params, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_optimizer_create(NULL, f.params, &sgd), RP_ERR_INVALID);
    rp_optimizer_destroy(NULL);

    rp_params_destroy(f.params);
}

static void test_optimizer_rejects_bad_lr(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config cfg = sgd_config(0.9f, false, 0.0f);
    rp_optimizer *opt = NULL;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &cfg), RP_OK);
    float grad[10];
    for (int i = 0; i < 10; i++)
        grad[i] = 0.5f;
    write_grads(&f, grad);

    assert_int_equal(rp_optimizer_step(opt, -0.1f), RP_ERR_INVALID);
    tu_assert_error_contains("-0.1");
    assert_int_equal(rp_optimizer_step(opt, NAN), RP_ERR_INVALID);
    assert_int_equal(rp_optimizer_step(opt, INFINITY), RP_ERR_INVALID);
    assert_values_initial(&f);
    assert_int_equal(rp_optimizer_steps(opt), 0);
    read_grads(&f, grad);
    for (int i = 0; i < 10; i++)
        assert_true(grad[i] == 0.5f);
    assert_int_equal(rp_optimizer_step(NULL, 0.1f), RP_ERR_INVALID);

    /* A zero rate is allowed: nothing moves, but the step counts and grads are cleared. */
    assert_int_equal(rp_optimizer_step(opt, 0.0f), RP_OK);
    assert_values_initial(&f);
    assert_int_equal(rp_optimizer_steps(opt), 1);
    assert_grads_zero(&f);

    rp_optimizer_destroy(opt);
    rp_params_destroy(f.params);
}

/*
 * The host copies of the blocks and of the state (they are the kernel table's storage): what is
 * written reads back, buffers included, and a step uses the state that was written.
 */
static void test_host_copies(void **unused)
{
    (void)unused;
    fixture f;
    fixture_make(&f);
    rp_optim_config cfg = sgd_config(0.5f, false, 0.0f);
    rp_optimizer *opt = NULL;
    assert_int_equal(rp_optimizer_create(&opt, f.params, &cfg), RP_OK);
    /* The value block: w (6), b (4), then the buffer (2). */
    float v[12], back[12];
    assert_int_equal(rp_params_read_values(f.params, back), RP_OK);
    assert_true(back[0] == 1.0f && back[6] == -0.5f && back[10] == 3.0f && back[11] == 3.0f);
    for (int i = 0; i < 12; i++)
        v[i] = 0.25f * (float)i - 1.0f;
    assert_int_equal(rp_params_write_values(f.params, v), RP_OK);
    assert_int_equal(rp_params_read_values(f.params, back), RP_OK);
    assert_memory_equal(back, v, sizeof v);
    assert_true(rp_tensor_get(f.buf, 1) == v[11]);
    /* A momentum buffer written after the first step is the one the next step blends. */
    float g[10], st[10];
    for (int i = 0; i < 10; i++) {
        g[i] = 0.5f;
        st[i] = 1.0f;
    }
    assert_int_equal(rp_optimizer_write_state(opt, st), RP_OK);
    rp_optimizer_set_steps(opt, 1);
    write_grads(&f, g);
    read_grads(&f, back);
    assert_memory_equal(back, g, sizeof g);
    assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_OK);
    read_state(opt, st);
    double want_v[10], want_s[10];
    for (int i = 0; i < 10; i++) {
        want_s[i] = 0.5 * 1.0 + 0.5; /* momentum * buffer + gradient */
        want_v[i] = (double)v[i] - 0.1 * want_s[i];
    }
    assert_close(st, want_s, 10, 0);
    gather_values(&f, back);
    assert_close(back, want_v, 10, 1e-6);
    assert_true(rp_tensor_get(f.buf, 0) == v[10]); /* buffers stay */
    /* NULL and a list not finalized are refused. */
    assert_int_equal(rp_params_read_values(NULL, back), RP_ERR_INVALID);
    assert_int_equal(rp_params_write_values(f.params, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_params_read_grads(f.params, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_params_write_grads(NULL, g), RP_ERR_INVALID);
    assert_int_equal(rp_optimizer_read_state(NULL, st), RP_ERR_INVALID);
    assert_int_equal(rp_optimizer_write_state(opt, NULL), RP_ERR_INVALID);
    rp_params *fresh = NULL;
    assert_int_equal(rp_params_create(&fresh), RP_OK);
    assert_int_equal(rp_params_read_values(fresh, back), RP_ERR_INVALID);
    tu_assert_error_contains("not finalized");
    rp_params_destroy(fresh);
    rp_optimizer_destroy(opt);
    rp_params_destroy(f.params);
}

/* ---- schedules --------------------------------------------------------------------- */

static void test_schedule_constant_warmup(void **unused)
{
    (void)unused;
    rp_schedule s = rp_schedule_constant(0.4f);
    assert_lr(rp_schedule_lr(&s, 0), 0.4);
    assert_lr(rp_schedule_lr(&s, 123456), 0.4);

    s.warmup_steps = 10;
    s.warmup_start = 0.1f;
    assert_lr(rp_schedule_lr(&s, 0), 0.4 * 0.1);               /* 0.04 */
    assert_lr(rp_schedule_lr(&s, 5), 0.4 * (0.1 + 0.9 * 0.5)); /* 0.22 */
    assert_lr(rp_schedule_lr(&s, 9), 0.4 * (0.1 + 0.9 * 0.9)); /* 0.364 */
    assert_lr(rp_schedule_lr(&s, 10), 0.4);
    assert_lr(rp_schedule_lr(&s, 11), 0.4);
    assert_lr(rp_schedule_lr(&s, -3), 0.04); /* a negative step counts as 0 */
}

static void test_schedule_step_decay(void **unused)
{
    (void)unused;
    int64_t milestones[2] = {30, 80};
    rp_schedule s = rp_schedule_step(1.0f, 0.1f, milestones, 2);
    assert_int_equal(s.kind, RP_SCHED_STEP);
    assert_int_equal(rp_schedule_check(&s), RP_OK);
    s.warmup_steps = 5;
    s.warmup_start = 0.2f;

    assert_lr(rp_schedule_lr(&s, 0), 0.2);
    assert_lr(rp_schedule_lr(&s, 2), 0.2 + 0.8 * 0.4); /* 0.52 */
    assert_lr(rp_schedule_lr(&s, 5), 1.0);
    assert_lr(rp_schedule_lr(&s, 29), 1.0);
    assert_lr(rp_schedule_lr(&s, 30), 0.1);
    assert_lr(rp_schedule_lr(&s, 31), 0.1);
    assert_lr(rp_schedule_lr(&s, 79), 0.1);
    assert_lr(rp_schedule_lr(&s, 80), 0.01);
    assert_lr(rp_schedule_lr(&s, 81), 0.01);
    assert_lr(rp_schedule_lr(&s, 100000), 0.01);

    /* Milestones are counted, not assumed sorted. */
    milestones[0] = 80;
    milestones[1] = 30;
    assert_lr(rp_schedule_lr(&s, 50), 0.1);
    assert_lr(rp_schedule_lr(&s, 80), 0.01);
}

/*
 * The milestones are the caller's array, of any length: all 12 here count (a fixed array of 8
 * used to drop the last ones silently). A schedule built by hand that cannot be right is refused
 * by rp_schedule_check(), naming the field, and rp_schedule_lr() never reads through NULL.
 */
static void test_schedule_step_many_milestones(void **unused)
{
    (void)unused;
    int64_t milestones[12];
    for (int i = 0; i < 12; i++)
        milestones[i] = 10 * (12 - i); /* 120, 110, ..., 10 */
    rp_schedule s = rp_schedule_step(1.0f, 0.5f, milestones, 12);
    assert_int_equal(rp_schedule_check(&s), RP_OK);
    assert_lr(rp_schedule_lr(&s, 9), 1.0);
    assert_lr(rp_schedule_lr(&s, 90), pow(0.5, 9));
    assert_lr(rp_schedule_lr(&s, 120), pow(0.5, 12));

    rp_schedule bad = s;
    bad.milestones = NULL;
    assert_int_equal(rp_schedule_check(&bad), RP_ERR_INVALID);
    tu_assert_error_contains("n_milestones 12 but milestones is NULL");
    assert_lr(rp_schedule_lr(&bad, 1000), 1.0);
    bad = s;
    bad.n_milestones = -1;
    assert_int_equal(rp_schedule_check(&bad), RP_ERR_INVALID);
    tu_assert_error_contains("n_milestones -1");
    bad = s;
    bad.gamma = NAN;
    assert_int_equal(rp_schedule_check(&bad), RP_ERR_INVALID);
    tu_assert_error_contains("gamma");
    bad = s;
    bad.warmup_steps = -5;
    assert_int_equal(rp_schedule_check(&bad), RP_ERR_INVALID);
    tu_assert_error_contains("warmup_steps -5");
    bad = s;
    bad.kind = (rp_sched_kind)7;
    assert_int_equal(rp_schedule_check(&bad), RP_ERR_INVALID);
    tu_assert_error_contains("kind 7");
    assert_int_equal(rp_schedule_check(NULL), RP_ERR_INVALID);

    /* The other constructors pass; they have no milestones. */
    rp_schedule ok[3] = {rp_schedule_constant(0.1f), rp_schedule_cosine(0.1f, 5, 100),
                         rp_schedule_linear(0.1f, 0, 100)};
    for (int i = 0; i < 3; i++)
        assert_int_equal(rp_schedule_check(&ok[i]), RP_OK);
}

static void test_schedule_cosine(void **unused)
{
    (void)unused;
    rp_schedule s = rp_schedule_cosine(1.0f, 10, 110);
    assert_int_equal(s.kind, RP_SCHED_COSINE);
    assert_true(s.min_lr == 0.0f);
    assert_true(s.warmup_start == 0.0f);

    /* Warm-up from 0. */
    assert_lr(rp_schedule_lr(&s, 0), 0.0);
    assert_lr(rp_schedule_lr(&s, 5), 0.5);
    assert_lr(rp_schedule_lr(&s, 9), 0.9);
    /* Cosine over 100 steps: p = 0, 1/4, 1/2, 3/4, 1, then clamped. */
    assert_lr(rp_schedule_lr(&s, 10), 1.0);
    assert_lr(rp_schedule_lr(&s, 35), (1.0 + sqrt(0.5)) / 2.0); /* 0.853553... */
    assert_lr(rp_schedule_lr(&s, 60), 0.5);
    assert_lr(rp_schedule_lr(&s, 85), (1.0 - sqrt(0.5)) / 2.0); /* 0.146446... */
    assert_lr(rp_schedule_lr(&s, 110), 0.0);
    assert_lr(rp_schedule_lr(&s, 111), 0.0);
    assert_lr(rp_schedule_lr(&s, 1000), 0.0); /* does not rise again */

    /* A floor: min_lr + (base - min_lr) * (1 + cos(pi p)) / 2. */
    s.min_lr = 0.1f;
    assert_lr(rp_schedule_lr(&s, 10), 1.0);
    assert_lr(rp_schedule_lr(&s, 35), 0.1 + 0.9 * (1.0 + sqrt(0.5)) / 2.0);
    assert_lr(rp_schedule_lr(&s, 60), 0.55);
    assert_lr(rp_schedule_lr(&s, 110), 0.1);
    assert_lr(rp_schedule_lr(&s, 500), 0.1);

    /* No warm-up. */
    rp_schedule c = rp_schedule_cosine(2.0f, 0, 4);
    assert_lr(rp_schedule_lr(&c, 0), 2.0);
    assert_lr(rp_schedule_lr(&c, 2), 1.0);
    assert_lr(rp_schedule_lr(&c, 4), 0.0);
}

static void test_lr_scale(void **unused)
{
    (void)unused;
    assert_lr(rp_lr_scale(0.1f, 1024, 256), 0.4);
    assert_lr(rp_lr_scale(0.1f, 128, 256), 0.05);
    assert_lr(rp_lr_scale(0.1f, 256, 0), 0.1); /* no ratio: unchanged */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_default_and_slots),
        cmocka_unit_test(test_apply_sgd_plain),
        cmocka_unit_test(test_apply_sgd_weight_decay),
        cmocka_unit_test(test_apply_sgd_momentum),
        cmocka_unit_test(test_apply_sgd_nesterov),
        cmocka_unit_test(test_apply_adam),
        cmocka_unit_test(test_apply_adam_l2),
        cmocka_unit_test(test_apply_adamw),
        cmocka_unit_test(test_apply_in_pieces),
        cmocka_unit_test(test_optimizer_sgd_momentum_steps),
        cmocka_unit_test(test_optimizer_adam_set_steps),
        cmocka_unit_test(test_optimizer_rejects_nonfinite_grad),
        cmocka_unit_test(test_optimizer_invalid_config),
        cmocka_unit_test(test_optimizer_rejects_bad_lr),
        cmocka_unit_test(test_host_copies),
        cmocka_unit_test(test_schedule_constant_warmup),
        cmocka_unit_test(test_schedule_step_decay),
        cmocka_unit_test(test_schedule_step_many_milestones),
        cmocka_unit_test(test_schedule_cosine),
        cmocka_unit_test(test_lr_scale),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
