/*
 * test_gan_layers.c - the pieces SN-GAN is built from: spectral
 * normalisation (the op and the SN conv, linear and embedding layers), the
 * Glorot gain and the *_init_with initialisers, the categorical conditional
 * batch norm (alone and across replicas), the hinge losses, the linear
 * learning-rate schedule and the trainer's acceptance of it.
 *
 * Spectral norm. sigma after many power-iteration steps must equal the
 * largest singular value that LAPACK's SVD (dgesvd) gives for the weight
 * viewed as [rows, cols], within 1e-4 relative; the normalised weight's own
 * largest singular value is then 1.
 *
 * Gradients: central finite differences, as test_gradcheck.c does them: a
 * fixed random projection R (entries 0.5..1.5 in magnitude, random signs)
 * reduces the output to loss = sum(y .* R), formed in double on the host for
 * the perturbed forwards; an element passes when |analytic - numeric| <=
 * rtol * max(|numeric|, 0.1 G, floor), G the largest |numeric| of the
 * tensor, rtol 5e-3, floor 1e-3 (test_gradcheck.c explains why that catches
 * a 10% error). The spectral-norm rule differentiates W / sigma with the
 * power iteration's vectors held constant (the paper's and the authors'
 * choice); finite differences of the layer see the iteration move with W
 * unless u is the top singular vector, where sigma is stationary in u and v.
 * So each SN case first runs 300 training forwards (u converges to the top
 * singular vector), and then both passes run in evaluation (update_u =
 * false), so that every forward starts from the same u.
 *
 * cmocka's asserts are not thread-safe: replica threads record, the main
 * thread asserts.
 */
#include "testutil.h"

#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define RTOL  5e-3
#define FLOOR 1e-3

/* ---- helpers ------------------------------------------------------------------ */

/*
 * Values and gradients are the kernel table's storage: the test reads and
 * writes them through host copies, values through the public API, and a
 * gradient (which has no public reader) downloaded through the table.
 * grad_into does not assert (replica threads call it); the rest do.
 */
static void grad_into(const rp_tensor *t, float *out)
{
    kernels_active()->mem_download(out, t->grad, (size_t)t->numel * sizeof(float));
}

/* A malloc'd host copy of t's values. */
static float *values_of(const rp_tensor *t)
{
    float *h = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(h);
    assert_int_equal(rp_tensor_read(t, h, t->numel), RP_OK);
    return h;
}

/* A malloc'd host copy of t's gradient (t must have one). */
static float *grad_of(const rp_tensor *t)
{
    assert_non_null(t->grad);
    float *h = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(h);
    grad_into(t, h);
    return h;
}

/* A malloc'd host copy of every value of a parameter list. */
static float *params_values(const rp_params *p)
{
    float *h = malloc((size_t)rp_params_numel(p) * sizeof(float));
    assert_non_null(h);
    assert_int_equal(rp_params_read_values(p, h), RP_OK);
    return h;
}

static void set_values(rp_tensor *t, const float *v)
{
    assert_int_equal(rp_tensor_write(t, v, t->numel), RP_OK);
}

/* Overwrites t's values with tu_fill(seed, lo, hi). */
static void fill_values(rp_tensor *t, uint64_t seed, float lo, float hi)
{
    float *h = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(h);
    tu_fill(h, t->numel, seed, lo, hi);
    set_values(t, h);
    free(h);
}

/* Largest singular value of the row-major [rows, cols] matrix w (LAPACK). */
static double top_singular(const float *w, int rows, int cols)
{
    int k = rows < cols ? rows : cols;
    double *a = malloc((size_t)rows * cols * sizeof(double));
    double *s = malloc((size_t)k * sizeof(double));
    double *superb = malloc((size_t)(k > 1 ? k : 2) * sizeof(double));
    assert_non_null(a);
    assert_non_null(s);
    assert_non_null(superb);
    for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        a[i] = w[i];
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', rows, cols, a, cols, s, NULL, 1,
                                     NULL, 1, superb);
    assert_int_equal(info, 0);
    double top = s[0];
    free(a);
    free(s);
    free(superb);
    return top;
}

/* The projection of an output of n elements: |r| in [0.5, 1.5], random signs. */
static void projection(float *r, int64_t n)
{
    tu_fill(r, n, 4242, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++)
        r[i] = r[i] < 0 ? r[i] - 0.5f : r[i] + 0.5f;
}

/* A forward under test: builds the output from the case's inputs on t. */
typedef rp_tensor *(*fwd_fn)(rp_tape *t, void *ctx);

/* sum(y .* R) in double from a forward with recording off. */
static double projected_loss(rp_tape *t, fwd_fn f, void *ctx)
{
    rp_tape_reset(t);
    rp_tape_set_recording(t, false);
    rp_tensor *y = f(t, ctx);
    if (!y) fail_msg("forward failed: %s", rp_last_error());
    float *r = malloc((size_t)y->numel * sizeof(float));
    assert_non_null(r);
    projection(r, y->numel);
    float *yv = values_of(y);
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++)
        s += (double)yv[i] * r[i];
    free(yv);
    free(r);
    rp_tape_set_recording(t, true);
    return s;
}

/* Records f and back-propagates sum(y .* R); gradients land in the inputs' grad. */
static void analytic_pass(rp_tape *t, fwd_fn f, void *ctx)
{
    rp_tape_reset(t);
    rp_tape_set_recording(t, true);
    rp_tensor *y = f(t, ctx);
    if (!y) fail_msg("forward failed: %s", rp_last_error());
    float *r = malloc((size_t)y->numel * sizeof(float));
    assert_non_null(r);
    projection(r, y->numel);
    rp_tensor *R = rp_tensor_from(t, y->ndim, y->shape, r);
    free(r);
    rp_status st = rp_backward(t, rp_sum(t, rp_mul(t, y, R)));
    if (st != RP_OK) fail_msg("backward failed: %s", rp_last_error());
}

/*
 * Compares analytic[n] (copied by the caller after analytic_pass) with
 * central differences of the projected loss in the values x[n]: a host copy
 * of a parameter's values, written back to `dst` after each change, or (dst
 * NULL) a leaf's source buffer, read by f.
 */
static void fd_check(rp_tape *t, fwd_fn f, void *ctx, float *x, rp_tensor *dst,
                     const float *analytic, int64_t n, double eps, const char *what)
{
    double *num = malloc((size_t)n * sizeof(double));
    assert_non_null(num);
    double g = 0;
    for (int64_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + (float)eps;
        if (dst) set_values(dst, x);
        double lp = projected_loss(t, f, ctx);
        x[i] = keep - (float)eps;
        if (dst) set_values(dst, x);
        double lm = projected_loss(t, f, ctx);
        x[i] = keep;
        if (dst) set_values(dst, x);
        /* the step actually taken, in float */
        num[i] = (lp - lm) / ((double)(keep + (float)eps) - (double)(keep - (float)eps));
        if (fabs(num[i]) > g) g = fabs(num[i]);
    }
    assert_true(g > 0); /* a case whose gradient is zero everywhere proves nothing */
    for (int64_t i = 0; i < n; i++) {
        double tol = RTOL * fmax(fabs(num[i]), fmax(0.1 * g, FLOOR));
        if (!(fabs(analytic[i] - num[i]) <= tol))
            fail_msg("%s: element %lld: analytic %.7g, numeric %.7g (tolerance %.3g)", what,
                     (long long)i, (double)analytic[i], num[i], tol);
    }
    free(num);
}

/* Power iteration to convergence: `steps` training forwards of the op on (w, u). */
static float converge(rp_tape *t, rp_tensor *w, rp_tensor *u, int steps)
{
    float sigma = 0;
    rp_tape_set_recording(t, false);
    for (int i = 0; i < steps; i++) {
        rp_tape_reset(t);
        assert_non_null(rp_spectral_normalize(t, w, u, true, &sigma));
    }
    rp_tape_set_recording(t, true);
    rp_tape_reset(t);
    return sigma;
}

static rp_tape *new_tape(void)
{
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    return t;
}

static rp_params *new_params(void)
{
    rp_params *p = NULL;
    assert_int_equal(rp_params_create(&p), RP_OK);
    return p;
}

/* ---- sigma against the SVD ------------------------------------------------------- */

/* 200 power-iteration updates, then sigma and the normalised weight's spectrum. */
static void check_sigma(rp_tape *t, rp_tensor *w, rp_tensor *u, const char *what)
{
    int rows = w->shape[0], cols = (int)(w->numel / rows);
    float *wv = values_of(w);
    double ref = top_singular(wv, rows, cols);
    float sigma = converge(t, w, u, 200);
    double rel = fabs((double)sigma - ref) / ref;
    if (!(rel < 1e-4))
        fail_msg("%s: sigma %.8g, SVD %.8g (relative %.3g)", what, (double)sigma, ref, rel);
    /* one more evaluation forward: the same sigma, and W/sigma has spectral norm 1 */
    float again = 0;
    rp_tensor *wn = rp_spectral_normalize(t, w, u, false, &again);
    assert_non_null(wn);
    assert_true(fabs((double)again - ref) / ref < 1e-4);
    float *wnv = values_of(wn);
    double top = top_singular(wnv, rows, cols);
    if (!(fabs(top - 1.0) < 1e-4))
        fail_msg("%s: normalised weight has spectral norm %.8g", what, top);
    /* and it is W / sigma, element by element */
    for (int64_t i = 0; i < w->numel; i++)
        assert_true(fabs((double)wnv[i] - (double)wv[i] / again) <=
                    1e-6 * fabs((double)wv[i] / again) + 1e-12);
    free(wnv);
    free(wv);
}

static void test_sigma_matches_svd(void **unused)
{
    (void)unused;
    rp_params *p = new_params();
    rp_sn_conv2d_layer conv;
    rp_sn_linear_layer wide, tall;
    rp_sn_embedding_layer emb;
    assert_int_equal(rp_sn_conv2d_layer_init(&conv, p, "conv", 4, 6, 3, 1, 1, true, 1.0f), RP_OK);
    assert_int_equal(rp_sn_linear_layer_init(&wide, p, "wide", 7, 5, true, 1.0f), RP_OK);
    assert_int_equal(rp_sn_linear_layer_init(&tall, p, "tall", 4, 9, false, 1.0f), RP_OK);
    assert_int_equal(rp_sn_embedding_layer_init(&emb, p, "emb", 10, 8, 1.0f), RP_OK);
    assert_int_equal(rp_params_finalize(p, 7), RP_OK);
    /* shapes and names as the contract says */
    assert_int_equal(conv.conv.w->ndim, 4);
    assert_int_equal(conv.conv.w->shape[0], 6);
    assert_int_equal(conv.conv.w->shape[3], 4);
    assert_int_equal(conv.u->numel, 6);
    assert_ptr_equal(rp_params_find(p, "conv.u"), conv.u);
    assert_false(conv.u->flags & RP_TENSOR_REQUIRES_GRAD); /* a buffer */
    assert_int_equal(tall.u->numel, 9);
    assert_int_equal(emb.u->numel, 10);
    assert_int_equal(emb.table->shape[0], 10);
    assert_int_equal(emb.table->shape[1], 8);
    assert_ptr_equal(rp_params_find(p, "emb.weight"), emb.table);
    rp_tape *t = new_tape();
    check_sigma(t, conv.conv.w, conv.u, "conv [6,3,3,4]");
    check_sigma(t, wide.lin.w, wide.u, "linear [5,7]");
    check_sigma(t, tall.lin.w, tall.u, "linear [9,4]");
    check_sigma(t, emb.table, emb.u, "embedding [10,8]");
    rp_tape_destroy(t);
    rp_params_destroy(p);
}

/* ---- u in training and evaluation ------------------------------------------------- */

static void test_u_update_and_eval(void **unused)
{
    (void)unused;
    rp_params *p = new_params();
    rp_sn_linear_layer l;
    rp_sn_conv2d_layer c;
    rp_sn_embedding_layer e;
    assert_int_equal(rp_sn_linear_layer_init(&l, p, "l", 6, 4, true, 1.0f), RP_OK);
    assert_int_equal(rp_sn_conv2d_layer_init(&c, p, "c", 2, 3, 3, 1, 1, false, 1.0f), RP_OK);
    assert_int_equal(rp_sn_embedding_layer_init(&e, p, "e", 5, 4, 1.0f), RP_OK);
    assert_int_equal(rp_params_finalize(p, 3), RP_OK);
    rp_tape *t = new_tape();
    float xd[2 * 6], xc[1 * 4 * 4 * 2];
    tu_fill(xd, 12, 1, -1, 1);
    tu_fill(xc, 32, 2, -1, 1);
    int32_t labels[3] = {4, 0, 2};

    rp_tensor *us[3] = {l.u, c.u, e.u};
    for (int k = 0; k < 3; k++) {
        rp_tensor *u = us[k];
        float *u0 = values_of(u);
        /* evaluation: the output, u bitwise unchanged */
        rp_tape_reset(t);
        rp_tensor *y_eval = NULL, *x = NULL;
        if (k == 0)
            y_eval = rp_sn_linear_layer_forward(t, &l, x = rp_tensor_from(t, 2, (int[]){2, 6}, xd),
                                                false);
        if (k == 1)
            y_eval = rp_sn_conv2d_layer_forward(
                t, &c, x = rp_tensor_from(t, 4, (int[]){1, 4, 4, 2}, xc), false);
        if (k == 2) y_eval = rp_sn_embedding_layer_forward(t, &e, labels, 3, false);
        assert_non_null(y_eval);
        float *uv = values_of(u);
        assert_memory_equal(uv, u0, (size_t)u->numel * sizeof(float));
        free(uv);
        float *ye = values_of(y_eval);
        int64_t ny = y_eval->numel;
        /* training: the same output (the same iteration from the same u), and u moves */
        rp_tape_reset(t);
        rp_tensor *y_train = NULL;
        if (k == 0)
            y_train =
                rp_sn_linear_layer_forward(t, &l, rp_tensor_from(t, 2, (int[]){2, 6}, xd), true);
        if (k == 1)
            y_train = rp_sn_conv2d_layer_forward(
                t, &c, rp_tensor_from(t, 4, (int[]){1, 4, 4, 2}, xc), true);
        if (k == 2) y_train = rp_sn_embedding_layer_forward(t, &e, labels, 3, true);
        assert_non_null(y_train);
        float *yt = values_of(y_train);
        assert_memory_equal(yt, ye, (size_t)ny * sizeof(float));
        free(yt);
        /* the layer's update is the op's: from u0, rp_spectral_normalize writes the same u' */
        float *u1 = values_of(u);
        assert_memory_not_equal(u1, u0, (size_t)u->numel * sizeof(float));
        set_values(u, u0);
        rp_tensor *w = k == 0 ? l.lin.w : k == 1 ? c.conv.w : e.table;
        rp_tape_reset(t);
        assert_non_null(rp_spectral_normalize(t, w, u, true, NULL));
        uv = values_of(u);
        assert_memory_equal(uv, u1, (size_t)u->numel * sizeof(float));
        /* u' is a unit vector */
        double norm = 0;
        for (int64_t i = 0; i < u->numel; i++)
            norm += (double)uv[i] * uv[i];
        free(uv);
        assert_true(fabs(sqrt(norm) - 1.0) < 1e-6);
        free(u0);
        free(u1);
        free(ye);
        (void)x;
    }
    rp_tape_destroy(t);
    rp_params_destroy(p);
}

static void test_sn_errors(void **unused)
{
    (void)unused;
    rp_tape *t = new_tape();
    float wd[12], ud[4] = {1, 0, 0, 0};
    tu_fill(wd, 12, 5, -1, 1);
    rp_tensor *w = rp_tensor_from(t, 2, (int[]){3, 4}, wd);
    rp_tensor *u_bad = rp_tensor_from(t, 1, (int[]){4}, ud);
    assert_null(rp_spectral_normalize(t, w, u_bad, true, NULL));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[4]");
    /* a zero weight has no direction: refused, u untouched */
    rp_tensor *zero = rp_tensor_fill(t, 2, (int[]){3, 4}, 0.0f);
    rp_tensor *u = rp_tensor_from(t, 1, (int[]){3}, (float[]){0.5f, -1.0f, 2.0f});
    float sigma = 123;
    assert_null(rp_spectral_normalize(t, zero, u, true, &sigma));
    assert_int_equal(rp_last_status(), RP_ERR_NUMERIC);
    float *uv = values_of(u);
    assert_true(uv[0] == 0.5f && uv[1] == -1.0f && uv[2] == 2.0f);
    free(uv);
    assert_true(sigma == 123);
    /* a NaN in the weight */
    wd[5] = NAN;
    rp_tensor *wn = rp_tensor_from(t, 2, (int[]){3, 4}, wd);
    assert_null(rp_spectral_normalize(t, wn, u, true, NULL));
    assert_int_equal(rp_last_status(), RP_ERR_NUMERIC);
    /* NULL in passes through */
    assert_null(rp_spectral_normalize(t, NULL, u, true, NULL));
    /* the embedding's labels are checked */
    rp_params *p = new_params();
    rp_sn_embedding_layer e;
    assert_int_equal(rp_sn_embedding_layer_init(&e, p, "e", 3, 2, 1.0f), RP_OK);
    assert_int_equal(rp_params_finalize(p, 1), RP_OK);
    assert_null(rp_sn_embedding_layer_forward(t, &e, (int32_t[]){0, 3}, 2, true));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    assert_int_equal(rp_sn_embedding_layer_init(&e, p, "e2", 0, 2, 1.0f), RP_ERR_INVALID);
    rp_tape_reset(t); /* the tape recorded a use of e's table: reset before the parameters go */
    rp_params_destroy(p);
    rp_tape_destroy(t);
}

/* ---- gradients of the SN op and layers ---------------------------------------------- */

typedef struct sn_case {
    rp_sn_linear_layer lin;
    rp_sn_conv2d_layer conv;
    rp_sn_embedding_layer emb;
    int kind;     /* 0 linear, 1 conv, 2 embedding */
    bool op_only; /* y = W / sigma(W) itself, not the layer's output */
    float *x;     /* the input's values (linear, conv) */
    int xdim, xshape[4];
    rp_tensor *xt; /* the input tensor of the last forward */
    int32_t labels[4];
} sn_case;

static rp_tensor *sn_weight(const sn_case *c)
{
    return c->kind == 0 ? c->lin.lin.w : c->kind == 1 ? c->conv.conv.w : c->emb.table;
}
static rp_tensor *sn_u(const sn_case *c)
{
    return c->kind == 0 ? c->lin.u : c->kind == 1 ? c->conv.u : c->emb.u;
}

static rp_tensor *sn_forward(rp_tape *t, void *ctx)
{
    sn_case *c = ctx;
    if (c->op_only) return rp_spectral_normalize(t, sn_weight(c), sn_u(c), false, NULL);
    if (c->kind == 2) return rp_sn_embedding_layer_forward(t, &c->emb, c->labels, 4, false);
    c->xt = rp_tensor_from(t, c->xdim, c->xshape, c->x);
    if (rp_tape_recording(t)) rp_tensor_set_requires_grad(c->xt, true);
    if (c->kind == 0) return rp_sn_linear_layer_forward(t, &c->lin, c->xt, false);
    return rp_sn_conv2d_layer_forward(t, &c->conv, c->xt, false);
}

static void check_param_grad(rp_tape *t, rp_params *p, sn_case *c, rp_tensor *param,
                             const char *what)
{
    rp_params_zero_grad(p);
    analytic_pass(t, sn_forward, c);
    float *a = grad_of(param), *x = values_of(param);
    fd_check(t, sn_forward, c, x, param, a, param->numel, 5e-3, what);
    free(x);
    free(a);
}

static void run_sn_grad_case(int kind)
{
    rp_params *p = new_params();
    sn_case c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    const char *names[3] = {"linear", "conv", "embedding"};
    if (kind == 0) {
        assert_int_equal(rp_sn_linear_layer_init(&c.lin, p, "lin", 7, 5, true, 1.0f), RP_OK);
        c.xdim = 2;
        memcpy(c.xshape, (int[]){3, 7, 1, 1}, sizeof c.xshape);
    } else if (kind == 1) {
        assert_int_equal(rp_sn_conv2d_layer_init(&c.conv, p, "conv", 3, 4, 3, 1, 1, true, 1.0f),
                         RP_OK);
        c.xdim = 4;
        memcpy(c.xshape, (int[]){2, 4, 4, 3}, sizeof c.xshape);
    } else {
        assert_int_equal(rp_sn_embedding_layer_init(&c.emb, p, "emb", 6, 5, 1.0f), RP_OK);
        memcpy(c.labels, (int32_t[]){0, 3, 3, 5}, sizeof c.labels);
    }
    assert_int_equal(rp_params_finalize(p, 11 + (uint64_t)kind), RP_OK);
    rp_tape *t = new_tape();
    int64_t nx = 0;
    if (kind != 2) {
        nx = rp_shape_numel(c.xdim, c.xshape);
        c.x = malloc((size_t)nx * sizeof(float));
        assert_non_null(c.x);
        tu_fill(c.x, nx, 21, -1, 1);
    }
    rp_tensor *bias = kind == 0 ? c.lin.lin.b : kind == 1 ? c.conv.conv.b : NULL;
    if (bias) fill_values(bias, 22, -0.5f, 0.5f);
    converge(t, sn_weight(&c), sn_u(&c), 300);
    char what[96];

    /* the op alone: d(sum(R .* W/sigma))/dW */
    c.op_only = true;
    snprintf(what, sizeof what, "%s: W/sigma(W) w.r.t. W", names[kind]);
    check_param_grad(t, p, &c, sn_weight(&c), what);
    /* through the layer: the weight, the bias and the input */
    c.op_only = false;
    snprintf(what, sizeof what, "%s layer: weight", names[kind]);
    check_param_grad(t, p, &c, sn_weight(&c), what);
    if (bias) {
        snprintf(what, sizeof what, "%s layer: bias", names[kind]);
        check_param_grad(t, p, &c, bias, what);
    }
    if (kind != 2) {
        rp_params_zero_grad(p);
        analytic_pass(t, sn_forward, &c);
        assert_int_equal(c.xt->numel, nx);
        float *a = grad_of(c.xt);
        snprintf(what, sizeof what, "%s layer: input", names[kind]);
        fd_check(t, sn_forward, &c, c.x, NULL, a, nx, 1e-2, what);
        free(a);
    }
    /* the rule must not be W's plain 1/sigma scaling: the sigma term matters */
    rp_params_zero_grad(p);
    c.op_only = true;
    analytic_pass(t, sn_forward, &c);
    rp_tensor *w = sn_weight(&c);
    float *r = malloc((size_t)w->numel * sizeof(float));
    assert_non_null(r);
    projection(r, w->numel);
    float sigma = 0;
    rp_tape_reset(t);
    assert_non_null(rp_spectral_normalize(t, w, sn_u(&c), false, &sigma));
    float *wg = grad_of(w);
    double worst = 0;
    for (int64_t i = 0; i < w->numel; i++)
        worst = fmax(worst, fabs(wg[i] - r[i] / sigma));
    assert_true(worst > 1e-2);
    free(wg);
    free(r);
    free(c.x);
    rp_tape_destroy(t);
    rp_params_destroy(p);
}

static void test_sn_linear_grad(void **unused)
{
    (void)unused;
    run_sn_grad_case(0);
}

static void test_sn_conv_grad(void **unused)
{
    (void)unused;
    run_sn_grad_case(1);
}

static void test_sn_embedding_grad(void **unused)
{
    (void)unused;
    run_sn_grad_case(2);
}

/* ---- Glorot gain and the *_init_with initialisers ------------------------------------ */

static void test_glorot_gain_and_init_with(void **unused)
{
    (void)unused;
    rp_params *p = new_params();
    rp_tensor *w[4];
    rp_init_kind kinds[2] = {RP_INIT_GLOROT_UNIFORM, RP_INIT_GLOROT_NORMAL};
    int fan_in = 300, fan_out = 200;
    /* the same name in two lists gives the same stream: gain 1, 2 and 0 */
    rp_params *p2 = new_params(), *p0 = new_params();
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", k);
        w[k] = rp_params_add(p, name, 2, (int[]){fan_out, fan_in},
                             (rp_init){kinds[k], 1.0f, fan_in, fan_out}, true);
        w[2 + k] = rp_params_add(p2, name, 2, (int[]){fan_out, fan_in},
                                 (rp_init){kinds[k], 2.0f, fan_in, fan_out}, true);
        assert_non_null(rp_params_add(p0, name, 2, (int[]){fan_out, fan_in},
                                      (rp_init){kinds[k], 0.0f, fan_in, fan_out}, true));
    }
    assert_int_equal(rp_params_finalize(p, 5), RP_OK);
    assert_int_equal(rp_params_finalize(p2, 5), RP_OK);
    assert_int_equal(rp_params_finalize(p0, 5), RP_OK);
    int64_t n = (int64_t)fan_in * fan_out;
    /* gain 0 is gain 1: every existing caller keeps its values bitwise */
    float *v0 = params_values(p0), *v1 = params_values(p);
    assert_memory_equal(v0, v1, (size_t)rp_params_numel(p) * sizeof(float));
    free(v1);
    free(v0);
    float *wv[4];
    for (int k = 0; k < 4; k++)
        wv[k] = values_of(w[k]);
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < n; i++)
            assert_true(fabsf(wv[2 + k][i] - 2.0f * wv[k][i]) <= 1e-6f * fabsf(wv[k][i]));
    }
    /* uniform: within the bound, reaching near it; normal: the std */
    double b = sqrt(6.0 / (fan_in + fan_out)), maxabs = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        maxabs = fmax(maxabs, fabs((double)wv[2][i]));
        ss += (double)wv[3][i] * wv[3][i];
    }
    for (int k = 0; k < 4; k++)
        free(wv[k]);
    assert_true(maxabs <= 2 * b * (1 + 1e-6) && maxabs > 2 * b * 0.99);
    double sd = sqrt(ss / (double)n), want = 2 * sqrt(2.0 / (fan_in + fan_out));
    assert_true(fabs(sd - want) < 0.02 * want);
    rp_params_destroy(p);
    rp_params_destroy(p2);
    rp_params_destroy(p0);

    /* init_with(the old kinds) is the old init, bitwise */
    rp_params *a = new_params(), *bp = new_params();
    rp_linear_layer la, lb, la2, lb2;
    rp_conv2d_layer ca, cb;
    assert_int_equal(rp_linear_layer_init(&la, a, "fc", 9, 5, true, true), RP_OK);
    assert_int_equal(rp_linear_layer_init(&la2, a, "fc2", 9, 5, false, false), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&ca, a, "cv", 3, 4, 3, 2, 1, true), RP_OK);
    assert_int_equal(rp_linear_layer_init_with(&lb, bp, "fc", 9, 5, true, RP_INIT_HE_NORMAL, 0.0f),
                     RP_OK);
    assert_int_equal(
        rp_linear_layer_init_with(&lb2, bp, "fc2", 9, 5, false, RP_INIT_GLOROT_UNIFORM, 0.0f),
        RP_OK);
    assert_int_equal(
        rp_conv2d_layer_init_with(&cb, bp, "cv", 3, 4, 3, 2, 1, true, RP_INIT_HE_NORMAL, 0.0f),
        RP_OK);
    assert_int_equal(rp_params_finalize(a, 9), RP_OK);
    assert_int_equal(rp_params_finalize(bp, 9), RP_OK);
    assert_int_equal(rp_params_numel(a), rp_params_numel(bp));
    float *va = params_values(a), *vb = params_values(bp);
    assert_memory_equal(va, vb, (size_t)rp_params_numel(a) * sizeof(float));
    free(vb);
    free(va);
    assert_int_equal(cb.p.stride, 2);
    assert_int_equal(cb.p.pad, 1);
    assert_null(lb2.b);
    rp_params_destroy(a);
    rp_params_destroy(bp);

    /* the fans the layer fills in: a conv's Glorot bound is gain*sqrt(6/(k*k*(in+out))) */
    rp_params *c = new_params();
    rp_conv2d_layer cg;
    rp_linear_layer lg;
    assert_int_equal(rp_conv2d_layer_init_with(&cg, c, "cg", 16, 32, 3, 1, 1, false,
                                               RP_INIT_GLOROT_UNIFORM, 1.5f),
                     RP_OK);
    assert_int_equal(rp_linear_layer_init_with(&lg, c, "lg", 50, 70, false, RP_INIT_UNIFORM, 0.25f),
                     RP_OK);
    assert_int_equal(rp_params_finalize(c, 2), RP_OK);
    double bound = 1.5 * sqrt(6.0 / (9.0 * (16 + 32)));
    maxabs = 0;
    float *cgv = values_of(cg.w), *lgv = values_of(lg.w);
    for (int64_t i = 0; i < cg.w->numel; i++)
        maxabs = fmax(maxabs, fabs((double)cgv[i]));
    assert_true(maxabs <= bound * (1 + 1e-6) && maxabs > bound * 0.99);
    maxabs = 0;
    for (int64_t i = 0; i < lg.w->numel; i++)
        maxabs = fmax(maxabs, fabs((double)lgv[i]));
    free(lgv);
    free(cgv);
    assert_true(maxabs <= 0.25 * (1 + 1e-6) && maxabs > 0.25 * 0.99);
    /* errors */
    rp_linear_layer bad;
    assert_int_equal(rp_linear_layer_init_with(&bad, c, "bad", 3, 3, false, (rp_init_kind)42, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("42");
    assert_int_equal(
        rp_linear_layer_init_with(&bad, c, "bad", 3, 3, false, RP_INIT_GLOROT_UNIFORM, NAN),
        RP_ERR_INVALID);
    tu_assert_error_contains("gain");
    rp_sn_linear_layer sbad;
    assert_int_equal(rp_sn_linear_layer_init(&sbad, c, "sbad", 3, 3, false, INFINITY),
                     RP_ERR_INVALID);
    rp_params_destroy(c);
}

/* ---- replicas keep the same u ------------------------------------------------------------ */

#define SN_REPLICAS 2

typedef struct sn_job {
    rp_params *params[SN_REPLICAS];
    rp_sn_linear_layer l1[SN_REPLICAS], l2[SN_REPLICAS];
    rp_optimizer *opt[SN_REPLICAS];
    int step;
} sn_job;

static rp_status sn_build(rp_replica *rep, void *arg)
{
    sn_job *j = arg;
    int id = rp_replica_id(rep);
    RP_CHECK(rp_params_create(&j->params[id]));
    rp_params *p = j->params[id];
    RP_CHECK(rp_sn_linear_layer_init(&j->l1[id], p, "l1", 6, 8, true, 1.0f));
    RP_CHECK(rp_sn_linear_layer_init(&j->l2[id], p, "l2", 8, 3, true, 1.0f));
    /* Different seeds: the runtime's broadcast of values and buffers must make them one. */
    RP_CHECK(rp_params_finalize(p, 100 + (uint64_t)id));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &j->opt[id], p, &oc);
}

static rp_status sn_train_step(rp_replica *rep, void *arg)
{
    sn_job *j = arg;
    int id = rp_replica_id(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    float x[4 * 6], target[4 * 3];
    /* each replica its own shard */
    tu_fill(x, 24, 1000 + 10 * (uint64_t)j->step + (uint64_t)id, -1, 1);
    tu_fill(target, 12, 2000 + 10 * (uint64_t)j->step + (uint64_t)id, -1, 1);
    rp_tensor *h = rp_relu(
        t, rp_sn_linear_layer_forward(t, &j->l1[id], rp_tensor_from(t, 2, (int[]){4, 6}, x), true));
    rp_tensor *y = rp_sn_linear_layer_forward(t, &j->l2[id], h, true);
    rp_tensor *loss = rp_mse(t, y, rp_tensor_from(t, 2, (int[]){4, 3}, target));
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(j->opt[id], 0.1f);
}

static rp_status sn_teardown(rp_replica *rep, void *arg)
{
    sn_job *j = arg;
    int id = rp_replica_id(rep);
    rp_optimizer_destroy(j->opt[id]);
    j->opt[id] = NULL;
    rp_params_destroy(j->params[id]);
    j->params[id] = NULL;
    return RP_OK;
}

static rp_replicator *make_replicator(int replicas)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = replicas;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 60;
    cfg.checksum_every = 1; /* the runtime's own check that the replicas agree, every step */
    rp_replicator *r = NULL;
    rp_status st = rp_replicator_create(&r, &cfg);
    if (st != RP_OK) fail_msg("rp_replicator_create: %s", rp_last_error());
    return r;
}

static void test_sn_replicas_agree(void **unused)
{
    (void)unused;
    sn_job j;
    memset(&j, 0, sizeof j);
    rp_replicator *r = make_replicator(SN_REPLICAS);
    tu_run_ok(r, sn_build, &j);
    int64_t n = rp_params_numel(j.params[0]);
    float *start = params_values(j.params[0]);
    float *u1_start = values_of(j.l1[0].u);
    for (j.step = 0; j.step < 3; j.step++)
        tu_run_ok(r, sn_train_step, &j);
    /* bitwise: every value and buffer, u included */
    assert_int_equal(rp_params_numel(j.params[1]), n);
    float *v0 = params_values(j.params[0]), *v1 = params_values(j.params[1]);
    assert_memory_equal(v0, v1, (size_t)n * sizeof(float));
    float *u10 = values_of(j.l1[0].u), *u11 = values_of(j.l1[1].u);
    float *u20 = values_of(j.l2[0].u), *u21 = values_of(j.l2[1].u);
    assert_memory_equal(u10, u11, (size_t)j.l1[0].u->numel * sizeof(float));
    assert_memory_equal(u20, u21, (size_t)j.l2[0].u->numel * sizeof(float));
    /* and the test saw something happen: weights trained, u moved */
    int64_t w_off = rp_params_offset(j.params[0], j.l1[0].lin.w->index);
    assert_memory_not_equal(v0 + w_off, start + w_off,
                            (size_t)j.l1[0].lin.w->numel * sizeof(float));
    assert_memory_not_equal(u10, u1_start, (size_t)j.l1[0].u->numel * sizeof(float));
    free(u21);
    free(u20);
    free(u11);
    free(u10);
    free(v1);
    free(v0);
    free(start);
    free(u1_start);
    tu_run_ok(r, sn_teardown, &j);
    rp_replicator_destroy(r);
}

/* ---- conditional batch norm --------------------------------------------------------- */

typedef struct cbn_case {
    rp_cond_batchnorm_layer l;
    float *x;
    int shape[4];
    int32_t *labels;
    rp_tensor *xt;
    bool training;
} cbn_case;

static rp_tensor *cbn_forward(rp_tape *t, void *ctx)
{
    cbn_case *c = ctx;
    c->xt = rp_tensor_from(t, 4, c->shape, c->x);
    if (rp_tape_recording(t)) rp_tensor_set_requires_grad(c->xt, true);
    return rp_cond_batchnorm_layer_forward(t, &c->l, c->xt, c->labels, c->training);
}

static void test_cbn_values_and_grad(void **unused)
{
    (void)unused;
    rp_params *p = new_params();
    cbn_case c;
    memset(&c, 0, sizeof c);
    int n = 5, h = 2, w = 3, ch = 4, classes = 3;
    assert_int_equal(rp_cond_batchnorm_layer_init(&c.l, p, "cbn", ch, classes), RP_OK);
    assert_int_equal(rp_params_finalize(p, 1), RP_OK);
    /* contract: gamma ones, beta zeros [classes, c]; running stats [c] buffers */
    assert_int_equal(c.l.gamma->ndim, 2);
    assert_int_equal(c.l.gamma->shape[0], classes);
    assert_int_equal(c.l.gamma->shape[1], ch);
    float *g0 = values_of(c.l.gamma), *b0 = values_of(c.l.beta);
    assert_true(g0[0] == 1.0f && b0[0] == 0.0f);
    free(b0);
    free(g0);
    assert_int_equal(c.l.running_mean->numel, ch);
    assert_false(c.l.running_var->flags & RP_TENSOR_REQUIRES_GRAD);
    assert_ptr_equal(rp_params_find(p, "cbn.weight"), c.l.gamma);
    fill_values(c.l.gamma, 31, 0.5f, 1.5f);
    fill_values(c.l.beta, 32, -0.5f, 0.5f);
    float *gamma = values_of(c.l.gamma), *beta = values_of(c.l.beta);
    memcpy(c.shape, (int[]){n, h, w, ch}, sizeof c.shape);
    int64_t nx = (int64_t)n * h * w * ch, m = (int64_t)n * h * w;
    c.x = malloc((size_t)nx * sizeof(float));
    assert_non_null(c.x);
    tu_fill(c.x, nx, 33, -2, 2);
    int32_t labels[5] = {2, 0, 1, 2, 0};
    c.labels = labels;
    c.training = true;
    rp_tape *t = new_tape();

    /* values against the formula, batch statistics (biased variance) */
    rp_tape_reset(t);
    rp_tensor *y = cbn_forward(t, &c);
    assert_non_null(y);
    float *yv = values_of(y), *rmean = values_of(c.l.running_mean),
          *rvar = values_of(c.l.running_var);
    for (int j = 0; j < ch; j++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < m; i++)
            s += c.x[i * ch + j];
        double mu = s / (double)m;
        for (int64_t i = 0; i < m; i++)
            ss += (c.x[i * ch + j] - mu) * (c.x[i * ch + j] - mu);
        double var = ss / (double)m;
        for (int64_t i = 0; i < m; i++) {
            int lab = labels[i / (h * w)];
            double want = (c.x[i * ch + j] - mu) / sqrt(var + 1e-5) * gamma[lab * ch + j] +
                          beta[lab * ch + j];
            assert_true(fabs(yv[i * ch + j] - want) < 1e-5);
        }
        /* running statistics moved from (0, 1) by momentum 0.1, unbiased variance */
        assert_true(fabs(rmean[j] - 0.1 * mu) < 1e-6);
        assert_true(fabs(rvar[j] - (0.9 + 0.1 * ss / (double)(m - 1))) < 1e-5);
    }
    free(yv);
    /* evaluation: running statistics */
    c.training = false;
    rp_tape_reset(t);
    y = cbn_forward(t, &c);
    assert_non_null(y);
    yv = values_of(y);
    for (int64_t i = 0; i < m; i++) {
        int lab = labels[i / (h * w)];
        for (int j = 0; j < ch; j++) {
            double want =
                (c.x[i * ch + j] - rmean[j]) / sqrt((double)rvar[j] + 1e-5) * gamma[lab * ch + j] +
                beta[lab * ch + j];
            assert_true(fabs(yv[i * ch + j] - want) < 1e-5);
        }
    }
    free(yv);
    free(rvar);
    free(rmean);

    /* gradients: x, gamma, beta, in training and in evaluation */
    for (int mode = 0; mode < 2; mode++) {
        c.training = mode == 0;
        const char *tag = c.training ? "training" : "evaluation";
        char what[64];
        rp_params_zero_grad(p);
        analytic_pass(t, cbn_forward, &c);
        assert_int_equal(c.xt->numel, nx);
        float *dx = grad_of(c.xt), *dg = grad_of(c.l.gamma), *db = grad_of(c.l.beta);
        snprintf(what, sizeof what, "cbn %s: x", tag);
        fd_check(t, cbn_forward, &c, c.x, NULL, dx, nx, 1e-2, what);
        snprintf(what, sizeof what, "cbn %s: gamma", tag);
        fd_check(t, cbn_forward, &c, gamma, c.l.gamma, dg, c.l.gamma->numel, 1e-2, what);
        snprintf(what, sizeof what, "cbn %s: beta", tag);
        fd_check(t, cbn_forward, &c, beta, c.l.beta, db, c.l.beta->numel, 1e-2, what);
        free(dx);
        free(dg);
        free(db);
    }

    /* errors */
    int32_t bad[5] = {0, 1, 3, 0, 0};
    c.labels = bad;
    rp_tape_reset(t);
    assert_null(cbn_forward(t, &c));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("label 2 is 3");
    rp_cond_batchnorm_layer l2;
    assert_int_equal(rp_cond_batchnorm_layer_init(&l2, p, "x", 4, 0), RP_ERR_INVALID);
    rp_params_destroy(p);
    p = new_params();
    assert_int_equal(rp_cond_batchnorm_layer_init(&l2, p, "x", 3, 2), RP_OK);
    assert_int_equal(rp_params_finalize(p, 1), RP_OK);
    rp_tape_reset(t);
    rp_tensor *x4 = rp_tensor_from(t, 4, c.shape, c.x);
    assert_null(rp_cond_batchnorm_layer_forward(t, &l2, x4, labels, true)); /* 4 channels, not 3 */
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    rp_params_destroy(p);
    free(beta);
    free(gamma);
    free(c.x);
    rp_tape_destroy(t);
}

/* N = 2 replicas x B/2 against 1 x B: outputs, gradients and running statistics. */
#define CBN_B   6
#define CBN_H   2
#define CBN_W   2
#define CBN_C   3
#define CBN_K   4
#define CBN_ROW (CBN_H * CBN_W * CBN_C)

typedef struct cbn_job {
    float x[CBN_B * CBN_ROW], r[CBN_B * CBN_ROW];
    int32_t labels[CBN_B];
    float gamma[CBN_K * CBN_C], beta[CBN_K * CBN_C];
    int replicas;
    /* results: y and dx by global row; dgamma, dbeta and running stats per replica */
    float y[CBN_B * CBN_ROW], dx[CBN_B * CBN_ROW];
    float dgamma[2][CBN_K * CBN_C], dbeta[2][CBN_K * CBN_C];
    float rmean[2][CBN_C], rvar[2][CBN_C];
    rp_status status[2];
    char error[2][256];
} cbn_job;

/* One replica (or the only one) on its rows of the global batch. */
static rp_status cbn_member(cbn_job *j, int id, rp_tape *t, rp_comm *comm)
{
    rp_params *p = NULL;
    RP_CHECK(rp_params_create(&p));
    rp_cond_batchnorm_layer l;
    rp_status st = rp_cond_batchnorm_layer_init(&l, p, "cbn", CBN_C, CBN_K);
    if (st == RP_OK) st = rp_params_finalize(p, 1);
    if (st != RP_OK) goto done;
    st = rp_tensor_write(l.gamma, j->gamma, CBN_K * CBN_C);
    if (st == RP_OK) st = rp_tensor_write(l.beta, j->beta, CBN_K * CBN_C);
    if (st != RP_OK) goto done;
    l.p.comm = comm;
    int rows = CBN_B / j->replicas, first = id * rows;
    rp_tape_reset(t);
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){rows, CBN_H, CBN_W, CBN_C}, j->x + first * CBN_ROW);
    if (x) rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_cond_batchnorm_layer_forward(t, &l, x, j->labels + first, true);
    rp_tensor *R = rp_tensor_from(t, 4, (int[]){rows, CBN_H, CBN_W, CBN_C}, j->r + first * CBN_ROW);
    rp_tensor *loss = rp_sum(t, rp_mul(t, y, R));
    if (!loss) {
        st = rp_last_status();
        goto done;
    }
    st = rp_backward(t, loss);
    if (st != RP_OK) goto done;
    st = rp_tensor_read(y, j->y + first * CBN_ROW, (int64_t)rows * CBN_ROW);
    if (st == RP_OK) st = rp_tensor_read(l.running_mean, j->rmean[id], CBN_C);
    if (st == RP_OK) st = rp_tensor_read(l.running_var, j->rvar[id], CBN_C);
    if (st != RP_OK) goto done;
    grad_into(x, j->dx + first * CBN_ROW);
    grad_into(l.gamma, j->dgamma[id]);
    grad_into(l.beta, j->dbeta[id]);
done:
    rp_tape_reset(t); /* before the parameters go */
    rp_params_destroy(p);
    return st;
}

static rp_status cbn_replica(rp_replica *rep, void *arg)
{
    cbn_job *j = arg;
    int id = rp_replica_id(rep);
    /* p.comm: the replica's data-axis communicator */
    rp_status st = cbn_member(j, id, rp_replica_tape(rep), rp_replica_axis_comm(rep, RP_AXIS_DATA));
    j->status[id] = st;
    if (st != RP_OK) snprintf(j->error[id], sizeof j->error[id], "%s", rp_last_error());
    return st;
}

static void test_cbn_cross_replica(void **unused)
{
    (void)unused;
    static cbn_job one, two;
    memset(&one, 0, sizeof one);
    tu_fill(one.x, CBN_B * CBN_ROW, 41, -2, 3);
    projection(one.r, CBN_B * CBN_ROW);
    tu_fill(one.gamma, CBN_K * CBN_C, 42, 0.5f, 1.5f);
    tu_fill(one.beta, CBN_K * CBN_C, 43, -1, 1);
    memcpy(one.labels, (int32_t[]){3, 0, 1, 1, 2, 3}, sizeof one.labels);
    two = one;
    one.replicas = 1;
    two.replicas = 2;
    rp_tape *t = new_tape();
    if (cbn_member(&one, 0, t, NULL) != RP_OK) fail_msg("one replica: %s", rp_last_error());
    rp_tape_destroy(t);
    rp_replicator *r = make_replicator(2);
    rp_status st = rp_replicator_run(r, cbn_replica, &two);
    for (int i = 0; i < 2; i++)
        if (two.status[i] != RP_OK) fail_msg("replica %d: %s", i, two.error[i]);
    assert_int_equal(st, RP_OK);
    rp_replicator_destroy(r);

    tu_check_close(two.y, one.y, CBN_B * CBN_ROW, 1e-5, "outputs");
    tu_check_close(two.dx, one.dx, CBN_B * CBN_ROW, 1e-5, "input gradients");
    float dg[CBN_K * CBN_C], db[CBN_K * CBN_C];
    for (int i = 0; i < CBN_K * CBN_C; i++) {
        dg[i] = two.dgamma[0][i] + two.dgamma[1][i];
        db[i] = two.dbeta[0][i] + two.dbeta[1][i];
    }
    /* the job's loss is the sum of the replicas': their parameter gradients add up to the one */
    tu_check_close(dg, one.dgamma[0], CBN_K * CBN_C, 1e-5, "gamma gradients");
    tu_check_close(db, one.dbeta[0], CBN_K * CBN_C, 1e-5, "beta gradients");
    for (int i = 0; i < 2; i++) {
        tu_check_close(two.rmean[i], one.rmean[0], CBN_C, 1e-5, "running mean");
        tu_check_close(two.rvar[i], one.rvar[0], CBN_C, 1e-5, "running variance");
    }
    /* not trivially so: replica 0's own half has another mean */
    float half_mean = 0;
    for (int i = 0; i < CBN_B / 2 * CBN_H * CBN_W; i++)
        half_mean += two.x[i * CBN_C];
    half_mean /= (float)(CBN_B / 2 * CBN_H * CBN_W);
    assert_true(fabsf(0.1f * half_mean - two.rmean[0][0]) > 1e-3f);
}

/* ---- hinge losses ------------------------------------------------------------------ */

static void test_hinge_losses(void **unused)
{
    (void)unused;
    rp_tape *t = new_tape();
    for (int shaped = 0; shaped < 2; shaped++) {
        rp_tape_reset(t);
        int rshape[2] = {3, 1}, fshape[2] = {2, 1};
        rp_tensor *dr = rp_tensor_from(t, shaped ? 2 : 1, rshape, (float[]){0.5f, 2.0f, -1.0f});
        rp_tensor *df = rp_tensor_from(t, shaped ? 2 : 1, fshape, (float[]){-2.0f, 0.3f});
        rp_tensor_set_requires_grad(dr, true);
        rp_tensor_set_requires_grad(df, true);
        rp_tensor *ld = rp_hinge_loss_d(t, dr, df);
        assert_non_null(ld);
        assert_int_equal(ld->numel, 1);
        /* relu(1 - [0.5, 2, -1]) = [0.5, 0, 2]: mean 5/6; relu(1 + [-2, 0.3]) = [0, 1.3]: mean 0.65
         */
        assert_true(fabs(rp_item(ld) - (5.0 / 6.0 + 0.65)) < 1e-6);
        assert_int_equal(rp_backward(t, ld), RP_OK);
        float want_r[3] = {-1.0f / 3, 0, -1.0f / 3}, want_f[2] = {0, 0.5f};
        float *gr = grad_of(dr), *gf = grad_of(df);
        for (int i = 0; i < 3; i++)
            assert_true(fabsf(gr[i] - want_r[i]) < 1e-7f);
        for (int i = 0; i < 2; i++)
            assert_true(fabsf(gf[i] - want_f[i]) < 1e-7f);
        free(gf);
        free(gr);

        rp_tape_reset(t);
        df = rp_tensor_from(t, shaped ? 2 : 1, fshape, (float[]){-2.0f, 0.3f});
        rp_tensor_set_requires_grad(df, true);
        rp_tensor *lg = rp_hinge_loss_g(t, df);
        assert_non_null(lg);
        assert_true(fabs(rp_item(lg) - 0.85) < 1e-6);
        assert_int_equal(rp_backward(t, lg), RP_OK);
        float *gf2 = grad_of(df);
        for (int i = 0; i < 2; i++)
            assert_true(fabsf(gf2[i] + 0.5f) < 1e-7f);
        free(gf2);
    }
    assert_null(rp_hinge_loss_d(t, NULL, NULL));
    assert_null(rp_hinge_loss_g(t, NULL));
    rp_tape_destroy(t);
}

/* ---- the linear schedule and the trainer ------------------------------------------------ */

static void assert_lr(const rp_schedule *s, int64_t step, double want)
{
    double got = rp_schedule_lr(s, step);
    if (!(fabs(got - want) <= 1e-7 * fmax(1e-3, fabs(want))))
        fail_msg("step %lld: lr %.9g, want %.9g", (long long)step, got, want);
}

static void test_schedule_linear(void **unused)
{
    (void)unused;
    rp_schedule s = rp_schedule_linear(0.2f, 0, 100);
    assert_int_equal(s.kind, RP_SCHED_LINEAR);
    assert_lr(&s, 0, 0.2);
    assert_lr(&s, 1, 0.2 * 0.99);
    assert_lr(&s, 50, 0.1);
    assert_lr(&s, 99, 0.2 * 0.01);
    assert_lr(&s, 100, 0);
    assert_lr(&s, 150, 0);
    assert_lr(&s, -5, 0.2); /* a negative step counts as 0 */
    /* with a warm-up: from 0 up to lr, then the line lr * (1 - step/total) */
    s = rp_schedule_linear(0.2f, 10, 100);
    assert_lr(&s, 0, 0);
    assert_lr(&s, 5, 0.1);
    assert_lr(&s, 9, 0.18);
    assert_lr(&s, 10, 0.2 * 0.9);
    assert_lr(&s, 55, 0.2 * 0.45);
    assert_lr(&s, 100, 0);
    assert_lr(&s, 1000, 0);
    /* no total: 0 after the warm-up */
    s = rp_schedule_linear(0.2f, 0, 0);
    assert_lr(&s, 0, 0);
}

typedef struct tr_job {
    float lr[32];
    int64_t steps_seen;
} tr_job;

static rp_status tr_build(rp_replica *rep, void *ctx, const rp_checkpoint *ck,
                          const rp_trainer_at *at, void **state)
{
    (void)rep;
    (void)ck;
    (void)at;
    *state = ctx;
    return RP_OK;
}

static int64_t tr_steps_per_epoch(void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    return 5;
}

static rp_status tr_train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                               double *scalars)
{
    (void)rep;
    (void)state;
    tr_job *j = ctx;
    if (at->global_step >= 0 && at->global_step < 32) j->lr[at->global_step] = at->lr;
    j->steps_seen++;
    scalars[0] = at->lr;
    return RP_OK;
}

static const rp_trainer_model tr_model = {
    .build = tr_build,
    .steps_per_epoch = tr_steps_per_epoch,
    .train_step = tr_train_step,
};

static rp_trainer_config tr_config(const char *dir)
{
    rp_trainer_config c = rp_trainer_config_default();
    c.runtime.backend = RP_BACKEND_THREADS;
    c.runtime.replicas = 1;
    c.runtime.threads_per_replica = 1;
    c.run_dir = dir;
    c.run_dir_exact = true;
    c.force = true;
    c.no_checkpoint = true;
    c.quiet = true;
    c.lr = 0.4f;
    c.schedule = RP_SCHED_LINEAR;
    return c;
}

static void test_trainer_linear_schedule(void **unused)
{
    (void)unused;
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "linear");
    /* epochs: the decay spans epochs x steps_per_epoch = 10 steps */
    tr_job j;
    memset(&j, 0, sizeof j);
    rp_trainer_config c = tr_config(dir);
    c.epochs = 2;
    rp_trainer *t = NULL;
    rp_status st = rp_trainer_create(&t, &c, &tr_model, &j);
    if (st != RP_OK) fail_msg("create: %s", rp_last_error());
    assert_true(fabsf(rp_trainer_lr(t, 0) - 0.4f) < 1e-7f);
    assert_true(fabsf(rp_trainer_lr(t, 5) - 0.2f) < 1e-7f);
    assert_true(rp_trainer_lr(t, 10) == 0.0f);
    st = rp_trainer_run(t);
    if (st != RP_OK) fail_msg("run: %s", rp_last_error());
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    assert_int_equal(j.steps_seen, 10);
    for (int s = 0; s < 10; s++)
        assert_true(fabs(j.lr[s] - 0.4 * (1 - s / 10.0)) < 1e-6);

    /* steps-only mode, with a warm-up: over cfg.steps */
    memset(&j, 0, sizeof j);
    c = tr_config(dir);
    c.steps = 8;
    c.warmup_steps = 2;
    st = rp_trainer_create(&t, &c, &tr_model, &j);
    if (st != RP_OK) fail_msg("create: %s", rp_last_error());
    st = rp_trainer_run(t);
    if (st != RP_OK) fail_msg("run: %s", rp_last_error());
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    assert_int_equal(j.steps_seen, 8);
    assert_true(j.lr[0] == 0.0f);
    assert_true(fabs(j.lr[1] - 0.2) < 1e-6);
    for (int s = 2; s < 8; s++)
        assert_true(fabs(j.lr[s] - 0.4 * (1 - s / 8.0)) < 1e-6);

    /* a kind the trainer does not take is refused, naming it */
    c = tr_config(dir);
    c.schedule = RP_SCHED_STEP;
    t = (rp_trainer *)&j;
    assert_int_equal(rp_trainer_create(&t, &c, &tr_model, &j), RP_ERR_INVALID);
    assert_null(t);
    tu_assert_error_contains("schedule 1");
    tu_assert_error_contains("RP_SCHED_LINEAR");
}

static int setup(void **unused)
{
    (void)unused;
    rp_log_set_level(RP_LOG_WARN);
    return tu_tmpdir_create("gan_layers");
}

static int teardown(void **unused)
{
    (void)unused;
    tu_tmpdir_remove();
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigma_matches_svd),
        cmocka_unit_test(test_u_update_and_eval),
        cmocka_unit_test(test_sn_errors),
        cmocka_unit_test(test_sn_linear_grad),
        cmocka_unit_test(test_sn_conv_grad),
        cmocka_unit_test(test_sn_embedding_grad),
        cmocka_unit_test(test_glorot_gain_and_init_with),
        cmocka_unit_test(test_sn_replicas_agree),
        cmocka_unit_test(test_cbn_values_and_grad),
        cmocka_unit_test(test_cbn_cross_replica),
        cmocka_unit_test(test_hinge_losses),
        cmocka_unit_test(test_schedule_linear),
        cmocka_unit_test(test_trainer_linear_schedule),
    };
    return tu_run_group_tests(argc, argv, tests, setup, teardown);
}
