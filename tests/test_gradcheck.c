/*
 * test_gradcheck.c - every op and layer against central finite differences.
 *
 * Method. A case builds an op's output y from some inputs and reduces it to
 * a scalar with a fixed random projection, loss = rp_sum(rp_mul(y, R)), where
 * R has y's shape and entries of magnitude 0.5 to 1.5 with random signs. The
 * gradient of that loss with respect to an input is the vector-Jacobian
 * product R^T J, so a wrong entry anywhere in the Jacobian shows up, not only
 * a wrong column sum. The analytic gradient comes from rp_backward() on a
 * recording tape. The numeric one perturbs one input element by +eps and by
 * -eps and re-runs the forward on a fresh tape (rp_tape_reset) with recording
 * off. The op runs in float as always; only the projection sum(y * R) of the
 * perturbed outputs is formed in double on the host, so that the difference
 * of two nearby losses is not lost to the float rounding of the loss itself.
 * Tensors over GC_MAX_CHECK elements are checked on a random subset that
 * always includes the first and the last element.
 *
 * Kernel tables. Every case runs once with each table (cpu and ref) by
 * pointing the tape at the table (tape->k, from tape_internal.h), so one
 * CTest run covers both. (RP_KERNELS=ref only changes the table a new tape
 * starts with, which these tests override.) A table whose storage is not
 * host memory (RP_KERNELS=strict) serves only its own kernels: then the
 * cases run once, with it (gc_tables). Values move in and out through the
 * public reads and writes either way.
 *
 * Tolerance. An element passes when
 *
 *     |analytic - numeric| <= rtol * max(|numeric|, 0.1 * G, floor)
 *
 * where G is the largest |numeric| over the checked elements of that tensor,
 * rtol = 5e-3 and floor = 1e-3 unless a case says otherwise. Why this is
 * safe: the central difference has a truncation error of eps^2/6 * f''' (none
 * for ops linear in the perturbed input; about 2e-5 relative for tanh,
 * sigmoid, softmax or batch norm at eps = 1e-2 on O(1) data) and a rounding
 * error of about k * 6e-8 * |y| / (2 eps) for the k outputs an input reaches.
 * Ops whose output is a scalar (losses, sum, mean) also round the loss itself
 * to float, about 1e-7 * |loss| / eps. The worst error measured over the
 * single-op cases is 1.4e-4 (both tables), so rtol leaves a margin of over
 * 30; the small network, at eps = 2e-3, measures up to 2e-3 and runs at
 * rtol = 1e-2. Why it is tight enough: a gradient off by a factor 1.1 or
 * 0.9, with the wrong sign, taken with a transposed weight or reduced over
 * the wrong broadcast axis is off by 10% or more on the elements whose
 * gradient is within a factor ten of the tensor's largest: twenty times
 * rtol (ten times in the network). A plain
 * 2e-2 * max(1, |numeric|) would let a 10% error through on every gradient
 * below 0.2; the 0.1 * G floor scales with the tensor's own gradient instead
 * (the self-tests at the end catch a 1.1x error on gradients of order 1e-3).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tape_internal.h"

#define GC_MAX_IN    8
#define GC_MAX_CHECK 64

/* Set to 1 to print the worst error of every checked tensor. */
#define GC_VERBOSE 0

/* ---- the checker ------------------------------------------------------------ */

typedef struct gc_input {
    const char *name;
    int ndim;
    int shape[RP_MAX_DIMS];
    float *data;      /* leaf values, owned by the case; NULL for a parameter */
    rp_tensor *param; /* a parameter: perturbed in its storage, gradient read from its grad */
    bool check;       /* compare this input's gradient (a leaf then requires grad) */
} gc_input;

typedef rp_tensor *(*gc_forward_fn)(rp_tape *t, rp_tensor *const *in, void *ctx);
/* Self-tests only: spoils an analytic gradient before the comparison. */
typedef void (*gc_corrupt_fn)(float *grad, const gc_input *in, void *ctx);

typedef struct gc_case {
    const char *name;
    gc_forward_fn forward;
    void *ctx;
    gc_input in[GC_MAX_IN];
    int n_in;
    rp_params *params; /* gradients zeroed before the analytic pass; NULL if none */
    float eps, rtol, floor;
    float proj_scale; /* |R| in [0.5, 1.5] * proj_scale */
    gc_corrupt_fn corrupt;
    void *corrupt_ctx;
    bool quiet; /* no failure report (self-tests expect failures) */
    uint64_t seed;
} gc_case;

static void gc_init(gc_case *c, const char *name, gc_forward_fn forward, void *ctx)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->forward = forward;
    c->ctx = ctx;
    c->eps = 1e-2f;
    c->rtol = 5e-3f;
    c->floor = 1e-3f;
    c->proj_scale = 1.0f;
    c->seed = rp_hash_str(7, name);
}

/* Adds a leaf input filled uniformly in [lo, hi); returns its data for further shaping. */
static float *gc_leaf(gc_case *c, const char *name, int ndim, const int *shape, float lo, float hi,
                      bool check)
{
    assert_true(c->n_in < GC_MAX_IN);
    gc_input *in = &c->in[c->n_in];
    in->name = name;
    in->ndim = ndim;
    for (int i = 0; i < RP_MAX_DIMS; i++)
        in->shape[i] = i < ndim ? shape[i] : 1;
    int64_t n = rp_shape_numel(ndim, shape);
    in->data = malloc((size_t)n * sizeof(float));
    assert_non_null(in->data);
    tu_fill(in->data, n, c->seed + 101 * (uint64_t)(c->n_in + 1), lo, hi);
    in->check = check;
    c->n_in++;
    return in->data;
}

static void gc_param(gc_case *c, rp_tensor *param, bool check)
{
    assert_true(c->n_in < GC_MAX_IN);
    assert_non_null(param);
    gc_input *in = &c->in[c->n_in++];
    in->name = param->name;
    in->ndim = param->ndim;
    memcpy(in->shape, param->shape, sizeof in->shape);
    in->param = param;
    in->check = check;
}

static void gc_free(gc_case *c)
{
    for (int i = 0; i < c->n_in; i++)
        free(c->in[i].data);
}

static int64_t gc_numel(const gc_input *in)
{
    return rp_shape_numel(in->ndim, in->shape);
}

/*
 * The kernel tables a case runs with, into tables[]; returns how many. cpu and ref when the
 * process's table keeps storage in host memory (either table's kernels can then run on a tape's
 * storage); otherwise the process's table alone.
 */
static int gc_tables(const kernels_table **tables)
{
    const kernels_table *active = kernels_active();
    if (!active->host_storage) {
        tables[0] = active;
        return 1;
    }
    tables[0] = kernels_cpu();
    tables[1] = kernels_ref();
    return 2;
}

/* Sets element i of input in to v (a parameter's through its storage); returns the old value. */
static float gc_set(gc_input *in, int64_t i, float v)
{
    if (!in->param) {
        float old = in->data[i];
        in->data[i] = v;
        return old;
    }
    int64_t n = in->param->numel;
    float *vals = malloc((size_t)n * sizeof(float));
    assert_non_null(vals);
    assert_int_equal(rp_tensor_read(in->param, vals, n), RP_OK);
    float old = vals[i];
    vals[i] = v;
    assert_int_equal(rp_tensor_write(in->param, vals, n), RP_OK);
    free(vals);
    return old;
}

/* Runs the case's forward on a fresh tape; xs receives the input tensors. */
static rp_tensor *gc_forward(gc_case *c, rp_tape *t, bool record, rp_tensor **xs)
{
    rp_tape_reset(t);
    rp_tape_set_recording(t, record);
    for (int i = 0; i < GC_MAX_IN; i++)
        xs[i] = NULL;
    for (int i = 0; i < c->n_in; i++) {
        gc_input *in = &c->in[i];
        if (in->param) {
            xs[i] = in->param;
            continue;
        }
        xs[i] = rp_tensor_from(t, in->ndim, in->shape, in->data);
        if (!xs[i]) return NULL;
        if (record && in->check) xs[i]->flags |= RP_TENSOR_REQUIRES_GRAD;
    }
    return c->forward(t, xs, c->ctx);
}

/* sum(y * R) in double: the loss of the numeric pass. */
static double gc_project(const rp_tensor *y, const float *proj)
{
    float *yv = malloc((size_t)y->numel * sizeof(float));
    assert_non_null(yv);
    assert_int_equal(rp_tensor_read(y, yv, y->numel), RP_OK);
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++)
        s += (double)yv[i] * (double)proj[i];
    free(yv);
    return s;
}

/* The numeric derivative of the loss along element i of input in (central, step c->eps). */
static double gc_numeric(gc_case *c, rp_tape *t, gc_input *in, int64_t i, const float *proj,
                         int64_t ny, bool *ok)
{
    rp_tensor *xs[GC_MAX_IN];
    float orig = gc_set(in, i, 0);
    double loss[2], step = 0;
    for (int side = 0; side < 2; side++) {
        float v = side == 0 ? orig + c->eps : orig - c->eps;
        gc_set(in, i, v);
        step += fabs((double)v - (double)orig); /* the step float actually took */
        rp_tensor *y = gc_forward(c, t, false, xs);
        if (!y || y->numel != ny) {
            *ok = false;
            gc_set(in, i, orig);
            return 0;
        }
        loss[side] = gc_project(y, proj);
    }
    gc_set(in, i, orig);
    return (loss[0] - loss[1]) / step;
}

/* Picks up to GC_MAX_CHECK distinct elements of [0, n): all, or a seeded subset with both ends. */
static int gc_pick(int64_t n, uint64_t seed, int64_t *pick)
{
    if (n <= GC_MAX_CHECK) {
        for (int64_t i = 0; i < n; i++)
            pick[i] = i;
        return (int)n;
    }
    int64_t *perm = malloc((size_t)n * sizeof(int64_t));
    assert_non_null(perm);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    rp_rng rng = rp_rng_make(seed, 3);
    /* Both ends first, then a partial Fisher-Yates shuffle of the middle. */
    perm[1] = n - 1;
    perm[n - 1] = 1;
    for (int k = 2; k < GC_MAX_CHECK; k++) {
        int64_t j = k + (int64_t)rp_rng_below(&rng, (uint32_t)(n - k));
        int64_t tmp = perm[k];
        perm[k] = perm[j];
        perm[j] = tmp;
    }
    memcpy(pick, perm, GC_MAX_CHECK * sizeof(int64_t));
    free(perm);
    return GC_MAX_CHECK;
}

/*
 * Checks every input marked `check` of case c with kernel table k. Returns
 * true when every element is within tolerance; otherwise prints the first
 * few misses of each failing input (unless c->quiet).
 */
static bool gc_run(gc_case *c, const kernels_table *k)
{
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    t->k = k;
    rp_tensor *xs[GC_MAX_IN];
    bool pass = true;

    /* Analytic pass. */
    if (c->params) rp_params_zero_grad(c->params);
    rp_tensor *y = gc_forward(c, t, true, xs);
    if (!y) {
        print_error("%s [%s]: forward failed: %s\n", c->name, k->name, rp_last_error());
        rp_tape_destroy(t);
        return false;
    }
    int64_t ny = y->numel;
    float *proj = malloc((size_t)ny * sizeof(float));
    assert_non_null(proj);
    tu_fill(proj, ny, c->seed + 7, -1.0f, 1.0f);
    for (int64_t i = 0; i < ny; i++)
        proj[i] = c->proj_scale * (proj[i] < 0 ? proj[i] - 0.5f : proj[i] + 0.5f);
    rp_tensor *r = rp_tensor_from(t, y->ndim, y->shape, proj);
    rp_tensor *loss = rp_sum(t, rp_mul(t, y, r));
    assert_non_null(loss);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float *grads[GC_MAX_IN] = {0};
    for (int i = 0; i < c->n_in; i++) {
        if (!c->in[i].check) continue;
        int64_t n = gc_numel(&c->in[i]);
        grads[i] = calloc((size_t)n, sizeof(float));
        assert_non_null(grads[i]);
        if (xs[i]->grad) assert_int_equal(rp_tensor_read_grad(xs[i], grads[i], n), RP_OK);
        if (c->corrupt) c->corrupt(grads[i], &c->in[i], c->corrupt_ctx);
    }

    /* Numeric pass and comparison, one input at a time. */
    for (int i = 0; i < c->n_in; i++) {
        gc_input *in = &c->in[i];
        if (!in->check) continue;
        int64_t pick[GC_MAX_CHECK];
        double num[GC_MAX_CHECK];
        int np = gc_pick(gc_numel(in), c->seed + (uint64_t)i, pick);
        double biggest = 0;
        bool ok = true;
        for (int e = 0; e < np; e++) {
            num[e] = gc_numeric(c, t, in, pick[e], proj, ny, &ok);
            biggest = fmax(biggest, fabs(num[e]));
        }
        if (!ok) {
            print_error("%s [%s]: forward failed in the numeric pass: %s\n", c->name, k->name,
                        rp_last_error());
            pass = false;
            break;
        }
        double worst = 0;
        int misses = 0;
        for (int e = 0; e < np; e++) {
            double a = grads[i][pick[e]];
            double denom = fmax(fmax(fabs(num[e]), 0.1 * biggest), c->floor);
            double err = fabs(a - num[e]) / denom;
            if (!(err <= worst)) worst = err;
            if (!(err <= c->rtol)) {
                pass = false;
                if (!c->quiet && misses++ < 5)
                    print_error("%s [%s] %s[%lld]: analytic %.6g numeric %.6g (error %.3g)\n",
                                c->name, k->name, in->name, (long long)pick[e], a, num[e], err);
            }
        }
        if (GC_VERBOSE)
            print_message("%-28s [%s] %-22s worst %.2e over %d\n", c->name, k->name, in->name,
                          worst, np);
    }
    for (int i = 0; i < c->n_in; i++)
        free(grads[i]);
    free(proj);
    rp_tape_destroy(t);
    return pass;
}

/* Asserts that case c passes with every kernel table of gc_tables, then frees it. */
static void gc_check(gc_case *c)
{
    const kernels_table *tables[2];
    int nt = gc_tables(tables);
    bool pass[2];
    for (int i = 0; i < nt; i++)
        pass[i] = gc_run(c, tables[i]);
    gc_free(c);
    char what[128] = "";
    bool failed = false;
    for (int i = 0, len = 0; i < nt; i++) {
        len += snprintf(what + len, sizeof what - (size_t)len, "%s%s %s", i ? ", " : "",
                        tables[i]->name, pass[i] ? "ok" : "FAILED");
        failed |= !pass[i];
    }
    if (failed) fail_msg("gradient check failed (%s)", what);
}

/* ---- input shaping ---------------------------------------------------------- */

/* Moves every value at least `margin` away from zero (keeps relu-like kinks out of reach). */
static void push_from_zero(float *x, int64_t n, float margin)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] < 0 ? x[i] - margin : x[i] + margin;
}

/* A random permutation of 0, spacing, 2*spacing, ...: distinct values far apart. */
static void fill_distinct(float *x, int64_t n, float spacing, uint64_t seed)
{
    rp_rng rng = rp_rng_make(seed, 11);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rp_rng_below(&rng, (uint32_t)(i + 1));
        float tmp = x[i];
        x[i] = x[j];
        x[j] = tmp;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = (x[i] - (float)n / 2) * spacing;
}

#define SHAPE(...) (sizeof((int[]){__VA_ARGS__}) / sizeof(int)), ((int[]){__VA_ARGS__})

/* ---- matmul and linear ------------------------------------------------------ */

static rp_tensor *fwd_matmul(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_matmul(t, in[0], in[1]);
}

/* rp_matmul: both operands of a non-square product. */
static void test_matmul(void **state)
{
    gc_case c;
    gc_init(&c, "matmul", fwd_matmul, NULL);
    gc_leaf(&c, "a", SHAPE(3, 4), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(4, 5), -1, 1, true);
    gc_check(&c);
}

static rp_tensor *fwd_linear(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_linear(t, in[0], in[1], in[2]);
}

/* rp_linear with a bias: x, w and b. */
static void test_linear_bias(void **state)
{
    gc_case c;
    gc_init(&c, "linear+bias", fwd_linear, NULL);
    gc_leaf(&c, "x", SHAPE(4, 3), -1, 1, true);
    gc_leaf(&c, "w", SHAPE(5, 3), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(5), -1, 1, true);
    gc_check(&c);
}

/* rp_linear without a bias: x and w. */
static void test_linear_nobias(void **state)
{
    gc_case c;
    gc_init(&c, "linear", fwd_linear, NULL);
    gc_leaf(&c, "x", SHAPE(6, 7), -1, 1, true);
    gc_leaf(&c, "w", SHAPE(2, 7), -1, 1, true);
    gc_check(&c);
}

/* ---- convolution ------------------------------------------------------------ */

static rp_tensor *fwd_conv(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_conv2d(t, in[0], in[1], in[2], *(const rp_conv_params *)ctx);
}

/* One convolution check: x [n,h,w,c], w [o,k,k,c], optional bias; which inputs need grads. */
static void conv_case(const char *name, int n, int h, int w, int ch, int o, int k, int stride,
                      int pad, bool bias, bool dx, bool dw, bool db)
{
    rp_conv_params p = {stride, pad};
    gc_case c;
    gc_init(&c, name, fwd_conv, &p);
    gc_leaf(&c, "x", SHAPE(n, h, w, ch), -1, 1, dx);
    gc_leaf(&c, "w", SHAPE(o, k, k, ch), -0.5f, 0.5f, dw);
    if (bias) gc_leaf(&c, "b", SHAPE(o), -1, 1, db);
    gc_check(&c);
}

/* rp_conv2d, 3x3 stride 1 pad 1 ("same"). */
static void test_conv_3x3_s1_p1(void **state)
{
    conv_case("conv 3x3 s1 p1", 2, 5, 6, 3, 4, 3, 1, 1, true, true, true, true);
}

/* rp_conv2d, 3x3 stride 2 pad 1 (downsampling; odd and even sizes). */
static void test_conv_3x3_s2_p1(void **state)
{
    conv_case("conv 3x3 s2 p1", 2, 6, 5, 3, 4, 3, 2, 1, true, true, true, true);
}

/* rp_conv2d, 1x1 stride 2 (projection shortcut: skips every other input pixel). */
static void test_conv_1x1_s2(void **state)
{
    conv_case("conv 1x1 s2", 2, 5, 6, 4, 3, 1, 2, 0, true, true, true, true);
}

/* rp_conv2d, 5x5 pad 2 (windows wider than half the image). */
static void test_conv_5x5_p2(void **state)
{
    conv_case("conv 5x5 s1 p2", 1, 6, 5, 2, 3, 5, 1, 2, true, true, true, true);
}

/* rp_conv2d on odd sizes N=2, H=5, W=7, C=3, O=4, with and without padding. */
static void test_conv_odd_sizes(void **state)
{
    conv_case("conv odd 3x3 s1 p1", 2, 5, 7, 3, 4, 3, 1, 1, true, true, true, true);
    conv_case("conv odd 3x3 s2 p0", 2, 5, 7, 3, 4, 3, 2, 0, true, true, true, true);
}

/* rp_conv2d without a bias, and with only some inputs needing gradients (scratch paths). */
static void test_conv_partial_grads(void **state)
{
    conv_case("conv no bias", 2, 4, 4, 3, 2, 3, 1, 1, false, true, true, false);
    conv_case("conv dw db only", 2, 4, 5, 3, 2, 3, 1, 1, true, false, true, true);
    conv_case("conv dx db only", 2, 4, 5, 3, 2, 3, 1, 0, true, true, false, true);
    conv_case("conv dx only", 1, 5, 4, 2, 3, 3, 2, 1, true, true, false, false);
}

/* ---- batch norm ------------------------------------------------------------- */

typedef struct bn_ctx {
    rp_bn_params p;
} bn_ctx;

/* in: x, gamma, beta, running mean, running var (fresh copies each forward). */
static rp_tensor *fwd_bn(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const bn_ctx *b = ctx;
    return rp_batch_norm(t, in[0], in[1], in[2], in[3], in[4], b->p);
}

static void bn_case(const char *name, int ndim, const int *shape, bool training)
{
    int c = shape[ndim - 1];
    bn_ctx b = {rp_bn_params_default()};
    b.p.training = training;
    gc_case gc;
    gc_init(&gc, name, fwd_bn, &b);
    gc_leaf(&gc, "x", ndim, shape, -1.5f, 2.0f, true);
    gc_leaf(&gc, "gamma", SHAPE(c), 0.5f, 1.5f, true);
    gc_leaf(&gc, "beta", SHAPE(c), -1, 1, true);
    gc_leaf(&gc, "running_mean", SHAPE(c), -0.5f, 0.5f, false);
    gc_leaf(&gc, "running_var", SHAPE(c), 0.5f, 2.0f, false);
    gc_check(&gc);
}

/* rp_batch_norm in training mode (batch statistics): x, gamma and beta, 4-D and 2-D. */
static void test_batch_norm_training(void **state)
{
    bn_case("bn train NHWC", 4, (int[]){3, 2, 3, 4}, true);
    bn_case("bn train NC", 2, (int[]){6, 5}, true);
}

/*
 * The fused ReLU (rp_bn_params.relu) equals rp_relu after an unfused batch
 * norm: the same outputs and the same gradients for x, gamma and beta, in
 * training and inference mode, with both kernel tables.
 */
static void test_batch_norm_fused_relu(void **state)
{
    (void)state;
    enum { N = 4, H = 3, W = 5, C = 6, NUMEL = N * H * W * C };
    static float xv[NUMEL], dyv[NUMEL], gv[C], bv[C], rm[C], rv[C];
    tu_fill(xv, NUMEL, 21, -2, 2);
    tu_fill(dyv, NUMEL, 22, -1, 1);
    tu_fill(gv, C, 23, 0.5f, 1.5f);
    tu_fill(bv, C, 24, -0.5f, 0.5f);
    tu_fill(rm, C, 25, -0.3f, 0.3f);
    tu_fill(rv, C, 26, 0.5f, 1.5f);
    const kernels_table *tables[2];
    int nt = gc_tables(tables);
    for (int k = 0; k < nt; k++)
        for (int training = 0; training < 2; training++) {
            float out[2][NUMEL], grads[2][NUMEL + 2 * C];
            for (int fused = 0; fused < 2; fused++) {
                rp_tape *t;
                assert_int_equal(rp_tape_create(&t, 0), RP_OK);
                t->k = tables[k];
                rp_tensor *x = rp_tensor_from(t, 4, (int[]){N, H, W, C}, xv);
                rp_tensor *g = rp_tensor_from(t, 1, (int[]){C}, gv);
                rp_tensor *b = rp_tensor_from(t, 1, (int[]){C}, bv);
                rp_tensor *mean = rp_tensor_from(t, 1, (int[]){C}, rm);
                rp_tensor *var = rp_tensor_from(t, 1, (int[]){C}, rv);
                rp_tensor *dy = rp_tensor_from(t, 4, (int[]){N, H, W, C}, dyv);
                x->flags |= RP_TENSOR_REQUIRES_GRAD;
                g->flags |= RP_TENSOR_REQUIRES_GRAD;
                b->flags |= RP_TENSOR_REQUIRES_GRAD;
                rp_bn_params p = rp_bn_params_default();
                p.training = training;
                p.relu = fused;
                rp_tensor *y = rp_batch_norm(t, x, g, b, mean, var, p);
                if (!fused) y = rp_relu(t, y);
                rp_tensor *loss = rp_sum(t, rp_mul(t, y, dy));
                assert_non_null(loss);
                assert_int_equal(rp_backward(t, loss), RP_OK);
                assert_int_equal(rp_tensor_read(y, out[fused], NUMEL), RP_OK);
                assert_int_equal(rp_tensor_read_grad(x, grads[fused], NUMEL), RP_OK);
                assert_int_equal(rp_tensor_read_grad(g, grads[fused] + NUMEL, C), RP_OK);
                assert_int_equal(rp_tensor_read_grad(b, grads[fused] + NUMEL + C, C), RP_OK);
                rp_tape_destroy(t);
            }
            assert_true(tu_max_rel_diff(out[1], out[0], NUMEL) < 1e-6);
            double d = tu_max_rel_diff(grads[1], grads[0], NUMEL + 2 * C);
            if (!(d < 1e-5))
                fail_msg("fused relu gradients differ by %g (table %d, training %d)", d, k,
                         training);
        }
}

/* rp_batch_norm in inference mode (running statistics are constants). */
static void test_batch_norm_inference(void **state)
{
    bn_case("bn eval NHWC", 4, (int[]){2, 3, 2, 4}, false);
    bn_case("bn eval NC", 2, (int[]){3, 5}, false);
}

/*
 * Batch norm's values against a hand computation in double: training output
 * and running updates (momentum, unbiased variance), inference output, and
 * running statistics left alone in inference.
 */
static void test_batch_norm_values(void **state)
{
    enum { M = 8, C = 3 };
    const kernels_table *tables[2];
    int nt = gc_tables(tables);
    float x[M * C], gamma[C], beta[C], rm0[C], rv0[C], yv[M * C], rmv[C], rvv[C];
    tu_fill(x, M * C, 41, -2, 3);
    tu_fill(gamma, C, 42, 0.5f, 1.5f);
    tu_fill(beta, C, 43, -1, 1);
    tu_fill(rm0, C, 44, -1, 1);
    tu_fill(rv0, C, 45, 0.5f, 2);
    for (int ti = 0; ti < nt; ti++) {
        rp_tape *t;
        assert_int_equal(rp_tape_create(&t, 0), RP_OK);
        t->k = tables[ti];
        rp_bn_params p = rp_bn_params_default();
        p.momentum = 0.3f;
        p.eps = 1e-3f;
        rp_tensor *xt = rp_tensor_from(t, 3, (int[]){4, 2, C}, x);
        rp_tensor *g = rp_tensor_from(t, 1, (int[]){C}, gamma);
        rp_tensor *b = rp_tensor_from(t, 1, (int[]){C}, beta);
        rp_tensor *rm = rp_tensor_from(t, 1, (int[]){C}, rm0);
        rp_tensor *rv = rp_tensor_from(t, 1, (int[]){C}, rv0);
        rp_tensor *y = rp_batch_norm(t, xt, g, b, rm, rv, p);
        assert_non_null(y);
        assert_int_equal(rp_tensor_read(y, yv, M * C), RP_OK);
        assert_int_equal(rp_tensor_read(rm, rmv, C), RP_OK);
        assert_int_equal(rp_tensor_read(rv, rvv, C), RP_OK);
        for (int j = 0; j < C; j++) {
            double mean = 0, var = 0;
            for (int i = 0; i < M; i++)
                mean += x[i * C + j];
            mean /= M;
            for (int i = 0; i < M; i++)
                var += (x[i * C + j] - mean) * (x[i * C + j] - mean);
            var /= M; /* biased: normalisation */
            for (int i = 0; i < M; i++) {
                double want = gamma[j] * (x[i * C + j] - mean) / sqrt(var + p.eps) + beta[j];
                assert_true(fabs(yv[i * C + j] - want) <= 1e-5 * fmax(1, fabs(want)));
            }
            double want_rm = 0.7 * rm0[j] + 0.3 * mean;
            double want_rv = 0.7 * rv0[j] + 0.3 * var * M / (M - 1); /* unbiased: running */
            assert_true(fabs(rmv[j] - want_rm) <= 1e-6 * fmax(1, fabs(want_rm)));
            assert_true(fabs(rvv[j] - want_rv) <= 1e-6 * fmax(1, fabs(want_rv)));
        }
        /* Inference: running statistics normalise and stay as they were. */
        float rm1[C], rv1[C];
        memcpy(rm1, rmv, sizeof rm1);
        memcpy(rv1, rvv, sizeof rv1);
        p.training = false;
        y = rp_batch_norm(t, xt, g, b, rm, rv, p);
        assert_non_null(y);
        assert_int_equal(rp_tensor_read(y, yv, M * C), RP_OK);
        assert_int_equal(rp_tensor_read(rm, rmv, C), RP_OK);
        assert_int_equal(rp_tensor_read(rv, rvv, C), RP_OK);
        assert_memory_equal(rmv, rm1, sizeof rm1);
        assert_memory_equal(rvv, rv1, sizeof rv1);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < C; j++) {
                double want = gamma[j] * (x[i * C + j] - rm1[j]) / sqrt(rv1[j] + p.eps) + beta[j];
                assert_true(fabs(yv[i * C + j] - want) <= 1e-5 * fmax(1, fabs(want)));
            }
        rp_tape_destroy(t);
    }
}

/*
 * rp_batch_norm and its backward on badly centred inputs: per-channel mean
 * 20 and 100 times the standard deviation, an upstream gradient with mean 1,
 * with both tables. The output and the gradients of x, gamma and beta are
 * within 1e-4 (relative, or absolute below 1) of batch norm computed in
 * double. The gamma gradient needs backward's correction for the float-
 * rounded mean: without it, it is off by up to mean/std * 2^-24 * sum(dy).
 */
static void test_batch_norm_off_centre(void **state)
{
    (void)state;
    enum { N = 8, H = 16, W = 16, C = 16, M = N * H * W, NUMEL = M * C };
    static float xv[NUMEL], dyv[NUMEL], want[2 * NUMEL + 2 * C], got[2 * NUMEL + 2 * C];
    float gv[C], bv[C];
    tu_fill(gv, C, 51, 0.5f, 1.5f);
    tu_fill(bv, C, 52, -1, 1);
    tu_fill(dyv, NUMEL, 53, 0, 2);
    const kernels_table *tables[2];
    int nt = gc_tables(tables);
    const double ratios[2] = {20, 100};
    for (int r = 0; r < 2; r++) {
        tu_fill(xv, NUMEL, 54, -1, 1);
        for (int64_t i = 0; i < NUMEL; i++) /* std sqrt(1/3) * 2^(j%4), mean ratio times it */
            xv[i] = (float)((ratios[r] / sqrt(3.0) + xv[i]) * (1 << (i % C % 4)));
        /* want and got: y [NUMEL], dx [NUMEL], dgamma [C], dbeta [C] */
        tu_batch_norm_double(want, want + 2 * NUMEL, want + 2 * NUMEL + C, want + NUMEL, xv, dyv,
                             gv, bv, 1e-5, M, C);
        for (int k = 0; k < nt; k++) {
            rp_tape *t;
            assert_int_equal(rp_tape_create(&t, 0), RP_OK);
            t->k = tables[k];
            rp_tensor *x = rp_tensor_from(t, 4, (int[]){N, H, W, C}, xv);
            rp_tensor *g = rp_tensor_from(t, 1, (int[]){C}, gv);
            rp_tensor *b = rp_tensor_from(t, 1, (int[]){C}, bv);
            rp_tensor_set_requires_grad(x, true);
            rp_tensor_set_requires_grad(g, true);
            rp_tensor_set_requires_grad(b, true);
            rp_tensor *y = rp_batch_norm(t, x, g, b, NULL, NULL, rp_bn_params_default());
            assert_non_null(y);
            assert_int_equal(rp_backward_from(t, y, dyv), RP_OK);
            assert_int_equal(rp_tensor_read(y, got, NUMEL), RP_OK);
            assert_int_equal(rp_tensor_read_grad(x, got + NUMEL, NUMEL), RP_OK);
            assert_int_equal(rp_tensor_read_grad(g, got + 2 * NUMEL, C), RP_OK);
            assert_int_equal(rp_tensor_read_grad(b, got + 2 * NUMEL + C, C), RP_OK);
            const char *what[4] = {"y", "dx", "dgamma", "dbeta"};
            const int64_t off[5] = {0, NUMEL, 2 * NUMEL, 2 * NUMEL + C, 2 * NUMEL + 2 * C};
            for (int q = 0; q < 4; q++) {
                double d = tu_max_rel_diff(got + off[q], want + off[q], off[q + 1] - off[q]);
                if (!(d < 1e-4))
                    fail_msg("batch norm %s, %s table, mean/std %g: %g from double", what[q],
                             tables[k]->name, ratios[r], d);
            }
            rp_tape_destroy(t);
        }
    }
}

/* ---- activations ------------------------------------------------------------ */

typedef struct act_ctx {
    int kind; /* 0 relu, 1 leaky relu, 2 tanh, 3 sigmoid */
    float slope;
} act_ctx;

static rp_tensor *fwd_act(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const act_ctx *a = ctx;
    switch (a->kind) {
    case 0:
        return rp_relu(t, in[0]);
    case 1:
        return rp_leaky_relu(t, in[0], a->slope);
    case 2:
        return rp_tanh(t, in[0]);
    default:
        return rp_sigmoid(t, in[0]);
    }
}

static void act_case(const char *name, int kind, float slope)
{
    act_ctx a = {kind, slope};
    gc_case c;
    gc_init(&c, name, fwd_act, &a);
    float *x = gc_leaf(&c, "x", SHAPE(3, 4, 5), -2, 2, true);
    push_from_zero(x, 60, 0.1f); /* 10 eps from the kink at 0 */
    gc_check(&c);
}

/* rp_relu, rp_leaky_relu, rp_tanh, rp_sigmoid on both sides of zero. */
static void test_activations(void **state)
{
    act_case("relu", 0, 0);
    act_case("leaky_relu", 1, 0.1f);
    act_case("leaky_relu slope 0.3", 1, 0.3f);
    act_case("tanh", 2, 0);
    act_case("sigmoid", 3, 0);
}

/* ---- element-wise arithmetic ------------------------------------------------ */

static rp_tensor *fwd_binary(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    switch (*(const int *)ctx) {
    case 0:
        return rp_add(t, in[0], in[1]);
    case 1:
        return rp_sub(t, in[0], in[1]);
    default:
        return rp_mul(t, in[0], in[1]);
    }
}

/* Checks add, sub and mul of a (shape sa) and b (shape sb), grads to both. */
static void binary_cases(const char *what, int na, const int *sa, int nbd, const int *sb)
{
    static const char *ops[3] = {"add", "sub", "mul"};
    for (int op = 0; op < 3; op++) {
        char name[64];
        snprintf(name, sizeof name, "%s %s", ops[op], what);
        gc_case c;
        gc_init(&c, name, fwd_binary, &op);
        gc_leaf(&c, "a", na, sa, -1, 1, true);
        gc_leaf(&c, "b", nbd, sb, -1, 1, true);
        gc_check(&c);
    }
}

/* rp_add, rp_sub, rp_mul with equal shapes. */
static void test_binary_same_shape(void **state)
{
    binary_cases("[2,3,4]", 3, (int[]){2, 3, 4}, 3, (int[]){2, 3, 4});
    binary_cases("[N] [N]", 1, (int[]){5}, 1, (int[]){5});
}

/* Broadcasting [C] and [1,H,W,C] against [N,H,W,C]: b's gradient sums over a's rows. */
static void test_binary_broadcast(void **state)
{
    binary_cases("[C] bcast", 4, (int[]){2, 3, 2, 4}, 1, (int[]){4});
    binary_cases("[1,H,W,C] bcast", 4, (int[]){3, 2, 3, 2}, 4, (int[]){1, 2, 3, 2});
}

static rp_tensor *fwd_square(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_mul(t, in[0], in[0]);
}

/* x * x: one tensor as both operands of one node, both contributions accumulate (2x). */
static void test_mul_self(void **state)
{
    gc_case c;
    gc_init(&c, "mul self", fwd_square, NULL);
    gc_leaf(&c, "x", SHAPE(4, 5), -1, 1, true);
    gc_check(&c);
}

static rp_tensor *fwd_scale(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_scale(t, in[0], *(const float *)ctx);
}

/* rp_scale by a negative non-integer factor. */
static void test_scale(void **state)
{
    float s = -1.7f;
    gc_case c;
    gc_init(&c, "scale", fwd_scale, &s);
    gc_leaf(&c, "x", SHAPE(2, 3, 4), -1, 1, true);
    gc_check(&c);
}

/* ---- shape ops ---------------------------------------------------------------- */

static rp_tensor *fwd_concat(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_concat(t, in, *(const int *)ctx);
}

/* rp_concat of 3 inputs of widths 2, 1, 4; and of 5 inputs (the node's overflow list). */
static void test_concat(void **state)
{
    int n = 3;
    gc_case c;
    gc_init(&c, "concat 3", fwd_concat, &n);
    gc_leaf(&c, "x0", SHAPE(2, 3, 2), -1, 1, true);
    gc_leaf(&c, "x1", SHAPE(2, 3, 1), -1, 1, true);
    gc_leaf(&c, "x2", SHAPE(2, 3, 4), -1, 1, true);
    gc_check(&c);

    int n5 = 5;
    gc_init(&c, "concat 5", fwd_concat, &n5);
    static const char *names[5] = {"x0", "x1", "x2", "x3", "x4"};
    for (int i = 0; i < 5; i++)
        gc_leaf(&c, names[i], SHAPE(3, 1 + i % 3), -1, 1, i != 2);
    gc_check(&c);
}

static rp_tensor *fwd_reshape(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    /* tanh after the view: a gradient that is not the same everywhere flows back through it. */
    return rp_tanh(t, rp_reshape(t, in[0], 2, (const int *)ctx));
}

static rp_tensor *fwd_flatten(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_flatten(t, in[0]);
}

/* rp_reshape and rp_flatten: views whose gradients land in the source's layout. */
static void test_reshape_flatten(void **state)
{
    int shape[2] = {4, 6};
    gc_case c;
    gc_init(&c, "reshape", fwd_reshape, shape);
    gc_leaf(&c, "x", SHAPE(2, 3, 4), -1, 1, true);
    gc_check(&c);

    gc_init(&c, "flatten", fwd_flatten, NULL);
    gc_leaf(&c, "x", SHAPE(2, 3, 2, 2), -1, 1, true);
    gc_check(&c);
}

/* ---- pooling and resampling ----------------------------------------------------- */

typedef struct pool_ctx {
    rp_pool_params p;
    bool max;
} pool_ctx;

static rp_tensor *fwd_pool(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const pool_ctx *p = ctx;
    return p->max ? rp_max_pool2d(t, in[0], p->p) : rp_avg_pool2d(t, in[0], p->p);
}

static void pool_case(const char *name, bool max, int n, int h, int w, int ch, int k, int stride,
                      int pad)
{
    pool_ctx p = {{k, stride, pad}, max};
    gc_case c;
    gc_init(&c, name, fwd_pool, &p);
    float *x = gc_leaf(&c, "x", SHAPE(n, h, w, ch), -1, 1, true);
    /* Values 0.1 apart, ten times the step: a perturbation never changes a window's argmax. */
    if (max) fill_distinct(x, (int64_t)n * h * w * ch, 0.1f, c.seed);
    gc_check(&c);
}

/* rp_max_pool2d: non-overlapping, overlapping (one input wins several windows) and padded. */
static void test_max_pool(void **state)
{
    pool_case("maxpool k2 s2", true, 2, 4, 6, 3, 2, 2, 0);
    pool_case("maxpool k3 s1 p1", true, 2, 4, 5, 2, 3, 1, 1);
    pool_case("maxpool k3 s2 p1", true, 1, 5, 5, 3, 3, 2, 1);
}

/* rp_avg_pool2d, padding excluded from the divisor (border windows average fewer inputs). */
static void test_avg_pool(void **state)
{
    pool_case("avgpool k3 s2 p1", false, 2, 5, 6, 3, 3, 2, 1);
    pool_case("avgpool k3 s1 p1", false, 1, 4, 4, 2, 3, 1, 1);
    pool_case("avgpool k2 s2", false, 2, 4, 4, 3, 2, 2, 0);
}

static rp_tensor *fwd_gap(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_global_avg_pool(t, in[0]);
}

static rp_tensor *fwd_upsample(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_upsample2x(t, in[0]);
}

/* rp_global_avg_pool and rp_upsample2x. */
static void test_gap_upsample(void **state)
{
    gc_case c;
    gc_init(&c, "global_avg_pool", fwd_gap, NULL);
    gc_leaf(&c, "x", SHAPE(2, 3, 4, 5), -1, 1, true);
    gc_check(&c);

    gc_init(&c, "upsample2x", fwd_upsample, NULL);
    gc_leaf(&c, "x", SHAPE(2, 3, 2, 3), -1, 1, true);
    gc_check(&c);
}

/* ---- embedding and losses ---------------------------------------------------- */

typedef struct emb_ctx {
    const int32_t *idx;
    int n;
} emb_ctx;

static rp_tensor *fwd_embedding(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const emb_ctx *e = ctx;
    return rp_embedding(t, in[0], e->idx, e->n);
}

/* rp_embedding with repeated indices (their rows' gradients add) and unused rows (zero). */
static void test_embedding(void **state)
{
    static const int32_t idx[7] = {2, 0, 2, 4, 2, 1, 0};
    emb_ctx e = {idx, 7};
    gc_case c;
    gc_init(&c, "embedding", fwd_embedding, &e);
    gc_leaf(&c, "table", SHAPE(6, 3), -1, 1, true);
    gc_check(&c);
}

static rp_tensor *fwd_xent(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_softmax_cross_entropy(t, in[0], (const int32_t *)ctx);
}

static rp_tensor *fwd_xent_soft(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_softmax_cross_entropy_soft(t, in[0], in[1]);
}

/* rp_softmax_cross_entropy (hard labels) and _soft (targets whose rows need not sum to 1). */
static void test_cross_entropy(void **state)
{
    static const int32_t labels[4] = {2, 0, 4, 2};
    gc_case c;
    gc_init(&c, "softmax_xent", fwd_xent, (void *)labels);
    gc_leaf(&c, "logits", SHAPE(4, 5), -2, 2, true);
    gc_check(&c);

    gc_init(&c, "softmax_xent_soft", fwd_xent_soft, NULL);
    gc_leaf(&c, "logits", SHAPE(3, 4), -2, 2, true);
    gc_leaf(&c, "target", SHAPE(3, 4), 0, 1, false);
    gc_check(&c);
}

static rp_tensor *fwd_mse(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_mse(t, in[0], in[1]);
}

/* rp_mse: gradients to both sides (opposite signs). */
static void test_mse(void **state)
{
    gc_case c;
    gc_init(&c, "mse", fwd_mse, NULL);
    gc_leaf(&c, "a", SHAPE(3, 4), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(3, 4), -1, 1, true);
    gc_check(&c);
}

static rp_tensor *fwd_reduce(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return *(const int *)ctx ? rp_mean(t, in[0]) : rp_sum(t, in[0]);
}

/* rp_sum and rp_mean (the mean's gradient is 1/numel, not 1). */
static void test_sum_mean(void **state)
{
    int mean = 0;
    gc_case c;
    gc_init(&c, "sum", fwd_reduce, &mean);
    gc_leaf(&c, "x", SHAPE(2, 3, 4), -1, 1, true);
    gc_check(&c);

    int mean1 = 1;
    gc_init(&c, "mean", fwd_reduce, &mean1);
    gc_leaf(&c, "x", SHAPE(2, 3, 4), -1, 1, true);
    gc_check(&c);
}

/* ---- layers, through their parameters ---------------------------------------- */

/* Overwrites a parameter's initial values (zeros, ones) with random ones. */
static void randomize(rp_tensor *p, uint64_t seed, float lo, float hi)
{
    float *v = malloc((size_t)p->numel * sizeof(float));
    assert_non_null(v);
    tu_fill(v, p->numel, seed, lo, hi);
    assert_int_equal(rp_tensor_write(p, v, p->numel), RP_OK);
    free(v);
}

static rp_tensor *fwd_linear_layer(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_linear_layer_forward(t, ctx, in[0]);
}

/* rp_linear_layer: x and the weight and bias parameters (gradients in the grad block). */
static void test_linear_layer(void **state)
{
    rp_params *ps;
    rp_linear_layer l;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_int_equal(rp_linear_layer_init(&l, ps, "fc", 5, 3, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 1), RP_OK);
    randomize(l.b, 2, -1, 1);
    gc_case c;
    gc_init(&c, "linear_layer", fwd_linear_layer, &l);
    c.params = ps;
    gc_leaf(&c, "x", SHAPE(4, 5), -1, 1, true);
    gc_param(&c, l.w, true);
    gc_param(&c, l.b, true);
    gc_check(&c);
    rp_params_destroy(ps);
}

static rp_tensor *fwd_conv_layer(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_conv2d_layer_forward(t, ctx, in[0]);
}

/* rp_conv2d_layer (3x3 stride 1 pad 1, bias): x, weight and bias. */
static void test_conv2d_layer(void **state)
{
    rp_params *ps;
    rp_conv2d_layer l;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&l, ps, "conv", 3, 4, 3, 1, 1, true), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 3), RP_OK);
    randomize(l.b, 4, -1, 1);
    gc_case c;
    gc_init(&c, "conv2d_layer", fwd_conv_layer, &l);
    c.params = ps;
    gc_leaf(&c, "x", SHAPE(2, 5, 4, 3), -1, 1, true);
    gc_param(&c, l.w, true);
    gc_param(&c, l.b, true);
    gc_check(&c);
    rp_params_destroy(ps);
}

typedef struct bn_layer_ctx {
    rp_batchnorm_layer *l;
    bool training;
} bn_layer_ctx;

static rp_tensor *fwd_bn_layer(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const bn_layer_ctx *b = ctx;
    return rp_batchnorm_layer_forward(t, b->l, in[0], b->training);
}

/* rp_batchnorm_layer in training and inference mode: x, gamma and beta. */
static void test_batchnorm_layer(void **state)
{
    rp_params *ps;
    rp_batchnorm_layer l;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_int_equal(rp_batchnorm_layer_init(&l, ps, "bn", 4), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 5), RP_OK);
    randomize(l.gamma, 6, 0.5f, 1.5f);
    randomize(l.beta, 7, -1, 1);
    randomize(l.running_mean, 8, -0.5f, 0.5f);
    randomize(l.running_var, 9, 0.5f, 2);
    for (int training = 1; training >= 0; training--) {
        bn_layer_ctx b = {&l, training};
        gc_case c;
        gc_init(&c, training ? "batchnorm_layer train" : "batchnorm_layer eval", fwd_bn_layer, &b);
        c.params = ps;
        gc_leaf(&c, "x", SHAPE(3, 2, 2, 4), -1, 2, true);
        gc_param(&c, l.gamma, true);
        gc_param(&c, l.beta, true);
        gc_check(&c);
    }
    rp_params_destroy(ps);
}

typedef struct shared_ctx {
    rp_conv2d_layer *conv;
    rp_linear_layer *fc;
} shared_ctx;

static rp_tensor *fwd_shared(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const shared_ctx *s = ctx;
    if (s->conv) {
        rp_tensor *h = rp_tanh(t, rp_conv2d_layer_forward(t, s->conv, in[0]));
        return rp_conv2d_layer_forward(t, s->conv, h);
    }
    rp_tensor *h = rp_tanh(t, rp_linear_layer_forward(t, s->fc, in[0]));
    return rp_linear_layer_forward(t, s->fc, h);
}

/*
 * One layer applied twice (shared weights): the parameter's gradient is the
 * sum of both uses, whether the rule overwrites a fresh gradient and adds
 * the second through scratch (conv) or accumulates (linear).
 */
static void test_shared_layers(void **state)
{
    rp_params *ps;
    rp_conv2d_layer conv;
    rp_linear_layer fc;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&conv, ps, "conv", 3, 3, 3, 1, 1, true), RP_OK);
    assert_int_equal(rp_linear_layer_init(&fc, ps, "fc", 4, 4, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 21), RP_OK);
    randomize(conv.b, 22, -0.5f, 0.5f);
    randomize(fc.b, 23, -0.5f, 0.5f);

    shared_ctx sc = {&conv, NULL};
    gc_case c;
    gc_init(&c, "conv layer twice", fwd_shared, &sc);
    c.params = ps;
    gc_leaf(&c, "x", SHAPE(2, 4, 5, 3), -1, 1, true);
    gc_param(&c, conv.w, true);
    gc_param(&c, conv.b, true);
    gc_check(&c);

    shared_ctx sf = {NULL, &fc};
    gc_init(&c, "linear layer twice", fwd_shared, &sf);
    c.params = ps;
    gc_leaf(&c, "x", SHAPE(3, 4), -1, 1, true);
    gc_param(&c, fc.w, true);
    gc_param(&c, fc.b, true);
    gc_check(&c);
    rp_params_destroy(ps);
}

/* ---- a small network ---------------------------------------------------------- */

typedef struct net {
    rp_conv2d_layer conv;
    rp_batchnorm_layer bn;
    rp_linear_layer fc;
    const int32_t *labels;
} net;

static rp_tensor *fwd_net(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const net *m = ctx;
    rp_tensor *h = rp_conv2d_layer_forward(t, &m->conv, in[0]);
    h = rp_relu(t, rp_batchnorm_layer_forward(t, &m->bn, h, true));
    h = rp_flatten(t, rp_max_pool2d(t, h, (rp_pool_params){2, 2, 0}));
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &m->fc, h), m->labels);
}

/*
 * The distance of the network at input x from its nearest kink: the smallest
 * |relu input| and the smallest gap between the two largest values of a max
 * pool window.
 */
static float net_margin(const net *m, const float *x)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tape_set_recording(t, false);
    rp_tensor *x_t = rp_tensor_from(t, 4, (int[]){2, 4, 4, 2}, x);
    rp_tensor *h = rp_conv2d_layer_forward(t, &m->conv, x_t);
    h = rp_batchnorm_layer_forward(t, &m->bn, h, true);
    assert_non_null(h);
    float *hv = malloc((size_t)h->numel * sizeof(float));
    assert_non_null(hv);
    assert_int_equal(rp_tensor_read(h, hv, h->numel), RP_OK);
    float margin = INFINITY;
    for (int64_t i = 0; i < h->numel; i++)
        margin = fminf(margin, fabsf(hv[i]));
    int c = h->shape[3], w = h->shape[2];
    for (int n = 0; n < h->shape[0]; n++)
        for (int oy = 0; oy < h->shape[1] / 2; oy++)
            for (int ox = 0; ox < w / 2; ox++)
                for (int k = 0; k < c; k++) {
                    float best = 0, second = 0; /* relu outputs are >= 0 */
                    for (int q = 0; q < 4; q++) {
                        int64_t row = (int64_t)n * h->shape[1] + 2 * oy + q / 2;
                        float z = hv[(row * w + 2 * ox + q % 2) * c + k];
                        z = z > 0 ? z : 0;
                        if (z > best) {
                            second = best;
                            best = z;
                        } else if (z > second) {
                            second = z;
                        }
                    }
                    if (best > 0) margin = fminf(margin, best - second);
                }
    free(hv);
    rp_tape_destroy(t);
    return margin;
}

/*
 * conv -> batch norm -> relu -> max pool -> flatten -> linear -> cross
 * entropy: every parameter's gradient and the input's. The conv bias feeds
 * batch norm, which removes any per-channel shift, so its true gradient is
 * zero; the check asserts that too (within rtol * floor, where the float
 * rounding of the scalar loss, about 6e-5 in the quotient, sets the floor).
 * Relu and max pool have kinks, and a central difference is wrong for any
 * element whose perturbation moves a relu input across zero or reorders a
 * pooling window. So the input is drawn (seeded) until every relu input and
 * every window's top-two gap is at least 2e-2 from its kink; a step of
 * eps = 2e-3 in one input or parameter moves them by a few eps at most
 * (|x|, |w|, |xhat| and gamma * invstd are all of order one).
 */
static void test_small_network(void **state)
{
    static const int32_t labels[2] = {1, 3};
    rp_params *ps;
    net m = {.labels = labels};
    assert_int_equal(rp_params_create(&ps), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&m.conv, ps, "conv", 2, 3, 3, 1, 1, true), RP_OK);
    assert_int_equal(rp_batchnorm_layer_init(&m.bn, ps, "bn", 3), RP_OK);
    assert_int_equal(rp_linear_layer_init(&m.fc, ps, "fc", 3 * 2 * 2, 4, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(ps, 11), RP_OK);
    randomize(m.conv.b, 12, -0.5f, 0.5f);
    randomize(m.bn.gamma, 13, 0.5f, 1.5f);
    randomize(m.bn.beta, 14, -0.5f, 0.5f);
    randomize(m.fc.b, 15, -0.5f, 0.5f);
    gc_case c;
    gc_init(&c, "conv-bn-relu-pool-fc-xent", fwd_net, &m);
    c.params = ps;
    c.eps = 2e-3f;
    c.floor = 2e-2f;
    c.rtol = 1e-2f;
    float *x = gc_leaf(&c, "x", SHAPE(2, 4, 4, 2), -1, 1, true);
    int tries = 0;
    while (net_margin(&m, x) < 2e-2f) {
        assert_true(++tries < 1000);
        tu_fill(x, 2 * 4 * 4 * 2, 1000 + (uint64_t)tries, -1, 1);
    }
    for (int i = 0; i < rp_params_trainable_count(ps); i++)
        gc_param(&c, rp_params_at(ps, i), true);
    assert_int_equal(c.n_in, 7);
    gc_check(&c);
    rp_params_destroy(ps);
}

/* ---- ops added for the next models ---------------------------------------------- */

typedef struct unary_ctx {
    int kind; /* 0 elu, 1 sqrt, 2 reciprocal, 3 clamp, 4 log_softmax */
    float p, q;
} unary_ctx;

static rp_tensor *fwd_unary(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const unary_ctx *u = ctx;
    switch (u->kind) {
    case 0:
        return rp_elu(t, in[0], u->p);
    case 1:
        return rp_sqrt(t, in[0]);
    case 2:
        return rp_reciprocal(t, in[0]);
    case 3:
        return rp_clamp(t, in[0], u->p, u->q);
    default:
        return rp_log_softmax(t, in[0]);
    }
}

/* Moves every value at least `margin` away from v. */
static void push_from(float *x, int64_t n, float v, float margin)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] < v ? fminf(x[i], v - margin) : fmaxf(x[i], v + margin);
}

/*
 * rp_elu (both sides of its kink, two alphas), rp_sqrt on [0.3, 2],
 * rp_reciprocal away from 0, rp_clamp with values on both sides of both
 * bounds (kept 10 eps from them), rp_log_softmax over rows of 7.
 */
static void test_unary_ops(void **state)
{
    gc_case c;
    unary_ctx u = {0, 1.0f, 0};
    gc_init(&c, "elu", fwd_unary, &u);
    push_from_zero(gc_leaf(&c, "x", SHAPE(3, 4, 5), -2, 2, true), 60, 0.1f);
    gc_check(&c);
    unary_ctx u2 = {0, 0.3f, 0};
    gc_init(&c, "elu alpha 0.3", fwd_unary, &u2);
    push_from_zero(gc_leaf(&c, "x", SHAPE(4, 6), -2, 2, true), 24, 0.1f);
    gc_check(&c);
    unary_ctx us = {1, 0, 0};
    gc_init(&c, "sqrt", fwd_unary, &us);
    gc_leaf(&c, "x", SHAPE(3, 7), 0.3f, 2, true);
    gc_check(&c);
    unary_ctx ur = {2, 0, 0};
    gc_init(&c, "reciprocal", fwd_unary, &ur);
    push_from_zero(gc_leaf(&c, "x", SHAPE(2, 9), -2, 2, true), 18, 0.5f);
    gc_check(&c);
    unary_ctx uc = {3, -0.5f, 0.7f};
    gc_init(&c, "clamp", fwd_unary, &uc);
    float *x = gc_leaf(&c, "x", SHAPE(5, 8), -1.5f, 1.5f, true);
    push_from(x, 40, -0.5f, 0.1f);
    push_from(x, 40, 0.7f, 0.1f);
    gc_check(&c);
    unary_ctx ul = {4, 0, 0};
    gc_init(&c, "log_softmax", fwd_unary, &ul);
    gc_leaf(&c, "x", SHAPE(2, 3, 7), -2, 2, true);
    gc_check(&c);
    gc_init(&c, "log_softmax 1-D", fwd_unary, &ul);
    gc_leaf(&c, "x", SHAPE(5), -2, 2, true);
    gc_check(&c);
}

/* Clamp's gradient is exactly dy inside [lo, hi] (ends included) and 0 outside. */
static void test_clamp_mask(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xd[5] = {-2, -1, 0, 1, 2};
    rp_tensor *x = rp_tensor_from(t, 1, (int[]){5}, xd);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_clamp(t, x, -1, 1);
    assert_int_equal(rp_backward_from(t, y, (float[]){5, 6, 7, 8, 9}), RP_OK);
    float want_y[5] = {-1, -1, 0, 1, 1}, want_g[5] = {0, 6, 7, 8, 0};
    float got_y[5], got_g[5];
    assert_int_equal(rp_tensor_read(y, got_y, 5), RP_OK);
    assert_int_equal(rp_tensor_read_grad(x, got_g, 5), RP_OK);
    assert_memory_equal(got_y, want_y, sizeof want_y);
    assert_memory_equal(got_g, want_g, sizeof want_g);
    assert_null(rp_clamp(t, x, 1, -1));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    rp_tape_destroy(t);
}

static rp_tensor *fwd_div(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_div(t, in[0], in[1]);
}

/* rp_div with equal shapes, suffix broadcasting and per-axis broadcasting; b kept from 0. */
static void test_div(void **state)
{
    struct {
        const char *name;
        int na, sa[4], nb, sb[4];
    } cases[] = {
        {"div same", 3, {2, 3, 4}, 3, {2, 3, 4}},
        {"div [C] bcast", 4, {2, 3, 2, 4}, 1, {4}},
        {"div [N,1,1,C] bcast", 4, {3, 2, 3, 4}, 4, {3, 1, 1, 4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gc_case c;
        gc_init(&c, cases[i].name, fwd_div, NULL);
        gc_leaf(&c, "a", cases[i].na, cases[i].sa, -1, 1, true);
        float *b = gc_leaf(&c, "b", cases[i].nb, cases[i].sb, -1, 1, true);
        push_from_zero(b, rp_shape_numel(cases[i].nb, cases[i].sb), 0.5f);
        gc_check(&c);
    }
}

/*
 * Per-axis (per-sample) broadcasting for add, sub and mul: [N,1,1,C] (a
 * class-conditional BN's gamma), [1,H,1,C], [N,H,1,1], and [H,1,C] with
 * fewer dims than a; b's gradient sums over its repeated axes.
 */
static void test_binary_per_axis(void **state)
{
    binary_cases("[N,1,1,C]", 4, (int[]){3, 2, 3, 4}, 4, (int[]){3, 1, 1, 4});
    binary_cases("[1,H,1,C]", 4, (int[]){2, 3, 2, 4}, 4, (int[]){1, 3, 1, 4});
    binary_cases("[N,H,1,1]", 4, (int[]){2, 3, 4, 2}, 4, (int[]){2, 3, 1, 1});
    binary_cases("[H,1,C]", 4, (int[]){2, 3, 2, 4}, 3, (int[]){3, 1, 4});
    binary_cases("[N,1] 2-D", 2, (int[]){5, 3}, 2, (int[]){5, 1});
}

/* Values of a per-sample broadcast against a hand-written loop, and the shape error. */
static void test_per_axis_values(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float ad[2 * 2 * 3 * 2], bd[2 * 2];
    tu_fill(ad, 24, 1, -1, 1);
    tu_fill(bd, 4, 2, -1, 1);
    rp_tensor *a = rp_tensor_from(t, 4, (int[]){2, 2, 3, 2}, ad);
    rp_tensor *b = rp_tensor_from(t, 4, (int[]){2, 1, 1, 2}, bd);
    rp_tensor *y = rp_mul(t, a, b);
    assert_non_null(y);
    for (int n = 0; n < 2; n++)
        for (int p = 0; p < 6; p++)
            for (int c = 0; c < 2; c++)
                assert_float_equal(rp_tensor_get(y, (n * 6 + p) * 2 + c),
                                   ad[(n * 6 + p) * 2 + c] * bd[n * 2 + c], 0);
    rp_tensor *bad = rp_tensor_fill(t, 4, (int[]){2, 1, 2, 2}, 1.0f);
    assert_null(rp_add(t, a, bad));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("[2, 1, 2, 2]");
    rp_tape_destroy(t);
}

typedef struct axes_ctx {
    int n;
    int axes[4];
    bool keep, mean;
    int rows; /* 1: rp_sum_rows / rp_mean_rows instead */
} axes_ctx;

static rp_tensor *fwd_axes(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const axes_ctx *a = ctx;
    if (a->rows) return a->mean ? rp_mean_rows(t, in[0]) : rp_sum_rows(t, in[0]);
    return a->mean ? rp_mean_axes(t, in[0], a->n, a->axes, a->keep)
                   : rp_sum_axes(t, in[0], a->n, a->axes, a->keep);
}

/* Sums and means over axis sets of a [2,3,4,5] tensor (inner, outer, middle, mixed, all) and per
 * row. */
static void test_reduce_axes(void **state)
{
    axes_ctx cases[] = {
        {1, {3}, false, false, 0},       {1, {0}, true, true, 0},
        {2, {1, 2}, false, true, 0},     {2, {0, 2}, true, false, 0},
        {3, {3, 1, 0}, false, false, 0}, {4, {0, 1, 2, 3}, false, true, 0},
        {0, {0}, false, false, 1},       {0, {0}, false, true, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "reduce axes case %zu", i);
        gc_case c;
        gc_init(&c, name, fwd_axes, &cases[i]);
        gc_leaf(&c, "x", SHAPE(2, 3, 4, 5), -1, 1, true);
        gc_check(&c);
    }
}

/* Shapes and values of axis reductions, and the errors for bad axes. */
static void test_reduce_axes_values(void **state)
{
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xd[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        xd[i] = (float)i;
    rp_tensor *x = rp_tensor_from(t, 3, (int[]){2, 3, 4}, xd);
    rp_tensor *s = rp_sum_axes(t, x, 2, (int[]){0, 2}, false);
    assert_int_equal(s->ndim, 1);
    assert_int_equal(s->shape[0], 3);
    for (int j = 0; j < 3; j++) {
        float want = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++)
                want += xd[(i * 3 + j) * 4 + k];
        assert_float_equal(rp_tensor_get(s, j), want, 0);
    }
    rp_tensor *m = rp_mean_axes(t, x, 1, (int[]){1}, true);
    assert_int_equal(m->ndim, 3);
    assert_int_equal(m->shape[1], 1);
    assert_float_equal(rp_tensor_get(m, 0), (0 + 4 + 8) / 3.0f, 1e-6);
    rp_tensor *r = rp_sum_rows(t, x);
    assert_int_equal(r->ndim, 1);
    assert_float_equal(rp_tensor_get(r, 1), (12 + 23) * 12 / 2.0f, 0);
    rp_tensor *all = rp_sum_axes(t, x, 3, (int[]){0, 1, 2}, false);
    assert_int_equal(all->ndim, 0);
    assert_float_equal(rp_item(all), 276, 0);
    assert_null(rp_sum_axes(t, x, 1, (int[]){3}, false));
    tu_assert_error_contains("axis 3");
    assert_null(rp_sum_axes(t, x, 2, (int[]){1, 1}, false));
    tu_assert_error_contains("repeated");
    rp_tape_destroy(t);
}

typedef struct ln_ctx {
    bool affine;
} ln_ctx;

static rp_tensor *fwd_ln(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    const ln_ctx *l = ctx;
    return rp_layer_norm(t, in[0], l->affine ? in[1] : NULL, l->affine ? in[2] : NULL, 1e-5f);
}

/* rp_layer_norm over rows of 6 (x, gamma, beta) and without gamma and beta; values per row. */
static void test_layer_norm(void **state)
{
    ln_ctx yes = {true}, no = {false};
    gc_case c;
    gc_init(&c, "layer_norm", fwd_ln, &yes);
    gc_leaf(&c, "x", SHAPE(2, 3, 6), -1, 1, true);
    gc_leaf(&c, "gamma", SHAPE(6), 0.5f, 1.5f, true);
    gc_leaf(&c, "beta", SHAPE(6), -1, 1, true);
    gc_check(&c);
    gc_init(&c, "layer_norm plain", fwd_ln, &no);
    gc_leaf(&c, "x", SHAPE(4, 5), -2, 2, true);
    gc_check(&c);

    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    float xd[8] = {1, 2, 3, 4, -4, 0, 4, 8};
    rp_tensor *y = rp_layer_norm(t, rp_tensor_from(t, 2, (int[]){2, 4}, xd), NULL, NULL, 1e-5f);
    for (int r = 0; r < 2; r++) {
        double mu = 0, var = 0;
        for (int j = 0; j < 4; j++)
            mu += xd[r * 4 + j] / 4.0;
        for (int j = 0; j < 4; j++)
            var += (xd[r * 4 + j] - mu) * (xd[r * 4 + j] - mu) / 4.0;
        for (int j = 0; j < 4; j++)
            assert_float_equal(rp_tensor_get(y, r * 4 + j), (xd[r * 4 + j] - mu) / sqrt(var + 1e-5),
                               1e-5);
    }
    assert_null(rp_layer_norm(t, rp_tensor_fill(t, 2, (int[]){2, 4}, 1),
                              rp_tensor_fill(t, 1, (int[]){3}, 1), NULL, 1e-5f));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    rp_tape_destroy(t);
}

/* A custom op y = a^2 * b (b per channel), keeping a^2 in arena memory from forward to backward. */
typedef struct sq_ctx {
    float *a2; /* [numel(a)], arena */
} sq_ctx;

static rp_status sq_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    sq_ctx *s = ctx;
    int64_t na = in[0]->numel, nb = in[1]->numel;
    for (int64_t i = 0; i < na; i++) {
        s->a2[i] = in[0]->data[i] * in[0]->data[i];
        out->data[i] = s->a2[i] * in[1]->data[i % nb];
    }
    return RP_OK;
}

static rp_status sq_backward(void *ctx, const rp_tensor *out, const float *dout,
                             rp_tensor *const *in, float *const *din, int n)
{
    sq_ctx *s = ctx;
    int64_t na = in[0]->numel, nb = in[1]->numel;
    for (int64_t i = 0; i < na; i++) {
        if (din[0]) din[0][i] += 2.0f * in[0]->data[i] * in[1]->data[i % nb] * dout[i];
        if (din[1]) din[1][i % nb] += s->a2[i] * dout[i];
    }
    return RP_OK;
}

static const rp_custom_op sq_op = {"square_times", sq_forward, sq_backward};

static rp_tensor *fwd_custom(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    sq_ctx *s = rp_arena_alloc(rp_tape_arena(t), sizeof *s);
    s->a2 = rp_arena_alloc(rp_tape_arena(t), (size_t)in[0]->numel * sizeof(float));
    /* Followed by a built-in op, so gradients flow through the custom node from the tape. */
    rp_tensor *y = rp_custom(t, &sq_op, s, in, 2, in[0]->ndim, in[0]->shape);
    return rp_tanh(t, y);
}

/* y = sum_i (i+1) * in_i^2 over n inputs of one shape: more inputs than a node holds inline. */
static rp_status many_forward(void *ctx, rp_tensor *out, rp_tensor *const *in, int n)
{
    for (int64_t k = 0; k < out->numel; k++) {
        float s = 0;
        for (int i = 0; i < n; i++)
            s += (float)(i + 1) * in[i]->data[k] * in[i]->data[k];
        out->data[k] = s;
    }
    return RP_OK;
}

static rp_status many_backward(void *ctx, const rp_tensor *out, const float *dout,
                               rp_tensor *const *in, float *const *din, int n)
{
    for (int i = 0; i < n; i++)
        if (din[i])
            for (int64_t k = 0; k < out->numel; k++)
                din[i][k] += 2.0f * (float)(i + 1) * in[i]->data[k] * dout[k];
    return RP_OK;
}

static const rp_custom_op many_op = {"many", many_forward, many_backward};

static rp_tensor *fwd_custom_many(rp_tape *t, rp_tensor *const *in, void *ctx)
{
    return rp_custom(t, &many_op, NULL, in, 6, in[0]->ndim, in[0]->shape);
}

static void test_custom_op(void **state)
{
    gc_case c;
    gc_init(&c, "custom op", fwd_custom, NULL);
    gc_leaf(&c, "a", SHAPE(3, 4), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(4), -1, 1, true);
    gc_check(&c);
    gc_init(&c, "custom op, b constant", fwd_custom, NULL);
    gc_leaf(&c, "a", SHAPE(2, 5), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(5), -1, 1, false);
    gc_check(&c);
    gc_init(&c, "custom op, 6 inputs", fwd_custom_many, NULL);
    static const char *names[6] = {"x0", "x1", "x2", "x3", "x4", "x5"};
    for (int i = 0; i < 6; i++)
        gc_leaf(&c, names[i], SHAPE(2, 3), -1, 1, i != 2);
    gc_check(&c);
}

/* ---- self-tests: the checker catches wrong gradients ---------------------------- */

typedef struct spoil {
    const char *target; /* the input to spoil */
    int how;            /* 0 scale, 1 transpose (square 2-D), 2 negate one element */
    float factor;
} spoil;

static void spoil_grad(float *grad, const gc_input *in, void *ctx)
{
    const spoil *s = ctx;
    if (strcmp(in->name, s->target) != 0) return;
    int64_t n = gc_numel(in);
    if (s->how == 0) {
        for (int64_t i = 0; i < n; i++)
            grad[i] *= s->factor;
    } else if (s->how == 1) {
        int d = in->shape[0];
        for (int i = 0; i < d; i++)
            for (int j = i + 1; j < d; j++) {
                float tmp = grad[i * d + j];
                grad[i * d + j] = grad[j * d + i];
                grad[j * d + i] = tmp;
            }
    } else {
        grad[n / 2] = -grad[n / 2];
    }
}

/* Runs a linear case (w square) with the given spoiling and projection scale, on the cpu table. */
static bool linear_with(const spoil *s, float proj_scale)
{
    gc_case c;
    gc_init(&c, "selftest linear", fwd_linear, NULL);
    gc_leaf(&c, "x", SHAPE(6, 4), -1, 1, true);
    gc_leaf(&c, "w", SHAPE(4, 4), -1, 1, true);
    gc_leaf(&c, "b", SHAPE(4), -1, 1, true);
    c.proj_scale = proj_scale;
    if (s) {
        c.corrupt = spoil_grad;
        c.corrupt_ctx = (void *)s;
        c.quiet = true;
    }
    const kernels_table *tables[2];
    gc_tables(tables);
    bool pass = gc_run(&c, tables[0]); /* cpu, or the process's table when that is not host */
    gc_free(&c);
    return pass;
}

/* A gradient 10% too large or too small, in any one input, fails the check. */
static void test_selftest_scaled(void **state)
{
    assert_true(linear_with(NULL, 1.0f));
    static const char *targets[3] = {"x", "w", "b"};
    for (int i = 0; i < 3; i++) {
        spoil up = {targets[i], 0, 1.1f}, down = {targets[i], 0, 0.9f};
        assert_false(linear_with(&up, 1.0f));
        assert_false(linear_with(&down, 1.0f));
    }
    /* A bias gradient averaged instead of summed over the batch of 6. */
    spoil mean = {"b", 0, 1.0f / 6};
    assert_false(linear_with(&mean, 1.0f));
}

/* A transposed weight gradient and a single element with the wrong sign fail too. */
static void test_selftest_transposed_and_sign(void **state)
{
    spoil tr = {"w", 1, 0}, sign = {"x", 2, 0};
    assert_false(linear_with(&tr, 1.0f));
    assert_false(linear_with(&sign, 1.0f));
}

/* The floor scales with the gradient: a 1.1x error is caught on gradients of order 1e-3. */
static void test_selftest_small_gradients(void **state)
{
    assert_true(linear_with(NULL, 1e-3f));
    spoil up = {"w", 0, 1.1f};
    assert_false(linear_with(&up, 1e-3f));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selftest_scaled),
        cmocka_unit_test(test_selftest_transposed_and_sign),
        cmocka_unit_test(test_selftest_small_gradients),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_linear_bias),
        cmocka_unit_test(test_linear_nobias),
        cmocka_unit_test(test_conv_3x3_s1_p1),
        cmocka_unit_test(test_conv_3x3_s2_p1),
        cmocka_unit_test(test_conv_1x1_s2),
        cmocka_unit_test(test_conv_5x5_p2),
        cmocka_unit_test(test_conv_odd_sizes),
        cmocka_unit_test(test_conv_partial_grads),
        cmocka_unit_test(test_batch_norm_training),
        cmocka_unit_test(test_batch_norm_inference),
        cmocka_unit_test(test_batch_norm_fused_relu),
        cmocka_unit_test(test_batch_norm_values),
        cmocka_unit_test(test_batch_norm_off_centre),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_binary_same_shape),
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_mul_self),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_reshape_flatten),
        cmocka_unit_test(test_max_pool),
        cmocka_unit_test(test_avg_pool),
        cmocka_unit_test(test_gap_upsample),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_sum_mean),
        cmocka_unit_test(test_linear_layer),
        cmocka_unit_test(test_conv2d_layer),
        cmocka_unit_test(test_batchnorm_layer),
        cmocka_unit_test(test_shared_layers),
        cmocka_unit_test(test_small_network),
        cmocka_unit_test(test_unary_ops),
        cmocka_unit_test(test_clamp_mask),
        cmocka_unit_test(test_div),
        cmocka_unit_test(test_binary_per_axis),
        cmocka_unit_test(test_per_axis_values),
        cmocka_unit_test(test_reduce_axes),
        cmocka_unit_test(test_reduce_axes_values),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_custom_op),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
