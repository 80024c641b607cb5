/*
 * test_tensor_parallel.c - the tensor-parallel layers (nn.h, layers_tp.c) on
 * N threads with a threads-backend communicator, one tape and one parameter
 * list per member, against finite differences and against the dense layers.
 *
 * Gradients. Each layer is checked on 2 members in the convention of nn.h:
 * a replicated tensor (the input of a column layer, a gathered or reduced
 * output, a row layer's bias) is one logical value, so the numeric pass
 * perturbs it on every member at once and every member's gradient must
 * equal the derivative of the job's loss; a split tensor (a member's weight
 * shard, a row layer's split input) is perturbed on its member only. The
 * job's loss is sum(y * R): member 0's alone when y is replicated (every
 * member computes the same one, and it counts once), the sum over members
 * when y is split (each member's slice of the logical output counts once).
 * The numeric pass reruns the forward on every member with recording off and
 * forms the loss in double on the host. The tolerance is test_gradcheck.c's:
 * |a - n| <= rtol * max(|n|, 0.1 G, floor), rtol 5e-3, floor 1e-3, eps 1e-2.
 *
 * Equivalence. An MLP (column then row linear), a ResNet basic block (its
 * two convolutions channel-split, batch norm local on the split channels)
 * and the class-parallel softmax cross-entropy on 2 (and 4) members equal
 * the dense model within 1e-5 (tu_max_rel_diff): the output on every member,
 * the input's gradient, and every parameter's gradient against the member's
 * slice of the dense gradient (rp_tp_shard_copy). The shards' initial values
 * are checked to be the dense values' slices bitwise.
 *
 * cmocka's asserts are not thread-safe, so member threads record what they
 * see and the main thread asserts.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "testutil.h"

#define MAX_N  4
#define MAX_EL 128
#define SEED   42

/* ---- running a function on every member ---------------------------------------------------- */

typedef void (*member_fn)(void *ctx, int rank);

typedef struct member_arg {
    member_fn fn;
    void *ctx;
    int rank;
} member_arg;

static void *member_main(void *p)
{
    member_arg *a = p;
    a->fn(a->ctx, a->rank);
    return NULL;
}

/* fn(ctx, r) on n threads, one per member; returns when all are done. */
static void run_members(int n, member_fn fn, void *ctx)
{
    pthread_t th[MAX_N];
    member_arg args[MAX_N];
    for (int r = 0; r < n; r++) {
        args[r] = (member_arg){fn, ctx, r};
        assert_int_equal(pthread_create(&th[r], NULL, member_main, &args[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
}

/* ---- host copies of storage ---------------------------------------------------------------- */

/*
 * Values and gradients are the kernel table's storage: the test reads and writes them through
 * host copies. Values go through the public API; a gradient has no public reader, so it is
 * downloaded through the table (all zeros when t has none). Neither asserts: member threads
 * call them (cmocka's asserts are not thread-safe).
 */
static rp_status values_into(const rp_tensor *t, float *out)
{
    return rp_tensor_read(t, out, t->numel);
}

static void grad_into(const rp_tensor *t, float *out)
{
    if (t->grad)
        kernels_active()->mem_download(out, t->grad, (size_t)t->numel * sizeof(float));
    else
        memset(out, 0, (size_t)t->numel * sizeof(float));
}

/* A malloc'd host copy of t's values (grad false) or gradient (grad true). */
static float *host_copy(const rp_tensor *t, bool grad)
{
    float *h = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(h);
    if (grad)
        grad_into(t, h);
    else
        assert_int_equal(values_into(t, h), RP_OK);
    return h;
}

/* Overwrites t's n values with tu_fill(seed, lo, hi). */
static void fill_tensor(rp_tensor *t, uint64_t seed, float lo, float hi)
{
    float *h = malloc((size_t)t->numel * sizeof(float));
    assert_non_null(h);
    tu_fill(h, t->numel, seed, lo, hi);
    assert_int_equal(rp_tensor_write(t, h, t->numel), RP_OK);
    free(h);
}

/* The fixed projection R of the loss sum(y * R): magnitudes 0.5 to 1.5, random signs. */
static void projection(float *r, int64_t n, uint64_t seed)
{
    tu_fill(r, n, seed, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++)
        r[i] = r[i] < 0 ? r[i] - 0.5f : r[i] + 0.5f;
}

/* ---- the finite-difference check on N members ----------------------------------------------- */

typedef struct tp_case tp_case;
typedef rp_tensor *(*tp_fwd_fn)(rp_tape *t, tp_case *c, int rank, rp_tensor *x);

struct tp_case {
    const char *name;
    int n;                        /* members */
    int ndim, shape[4];           /* each member's input */
    bool x_split;                 /* x differs per member; else replicated (equal on all) */
    bool y_split;                 /* the loss sums the members'; else member 0's counts once */
    const char *replicated_param; /* a parameter equal on every member, or NULL */
    tp_fwd_fn fwd;
    rp_tp_linear_layer lin[MAX_N];
    rp_tp_conv2d_layer conv[MAX_N];
    int classes;
    int32_t labels[8];
    rp_params *params[MAX_N]; /* NULL: the case has no parameters */
    float x[MAX_N][MAX_EL], xgrad[MAX_N][MAX_EL];
    int64_t numel;
    /* per evaluation */
    bool record;
    rp_comm *comms[MAX_N];
    rp_tape *tapes[MAX_N];
    double loss[MAX_N];
    rp_status status[MAX_N];
    char error[MAX_N][256];
};

static void tp_member(void *ctx, int r)
{
    tp_case *c = ctx;
    rp_tape *t = c->tapes[r];
    rp_tape_reset(t);
    rp_tape_set_recording(t, c->record);
    c->status[r] = RP_OK;
    if (c->record && c->params[r]) rp_params_zero_grad(c->params[r]);
    rp_tensor *x = rp_tensor_from(t, c->ndim, c->shape, c->x[r]);
    if (c->record) rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = c->fwd(t, c, r, x);
    if (!y) goto fail;
    float *proj = rp_arena_alloc(rp_tape_arena(t), (size_t)y->numel * sizeof(float));
    projection(proj, y->numel, 1000 + (c->y_split ? (uint64_t)r : 0));
    float *yv = rp_arena_alloc(rp_tape_arena(t), (size_t)y->numel * sizeof(float));
    if (!yv || values_into(y, yv) != RP_OK) goto fail;
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++)
        s += (double)yv[i] * proj[i];
    c->loss[r] = s;
    if (c->record) {
        rp_tensor *R = rp_tensor_from(t, y->ndim, y->shape, proj);
        if (rp_backward(t, rp_sum(t, rp_mul(t, y, R))) != RP_OK) goto fail;
        grad_into(x, c->xgrad[r]);
    }
    return;
fail:
    c->status[r] = rp_last_status() != RP_OK ? rp_last_status() : RP_ERR_INVALID;
    snprintf(c->error[r], sizeof c->error[r], "%s", rp_last_error());
}

/* One forward (and, when recording, backward) on every member; the job's loss. */
static double tp_evaluate(tp_case *c, bool record)
{
    c->record = record;
    run_members(c->n, tp_member, c);
    double total = 0;
    for (int r = 0; r < c->n; r++) {
        if (c->status[r] != RP_OK) fail_msg("%s: member %d failed: %s", c->name, r, c->error[r]);
        total += c->loss[r];
    }
    if (!c->y_split) /* a replicated output: bitwise the same loss on every member */
        for (int r = 1; r < c->n; r++)
            if (c->loss[r] != c->loss[0])
                fail_msg("%s: member %d's loss %.9g differs from member 0's %.9g", c->name, r,
                         c->loss[r], c->loss[0]);
    return c->y_split ? total : c->loss[0];
}

/* Member r's host copy vals[r] into its tensor (none: vals[r] is the input, uploaded anyway). */
static void put_val(rp_tensor *const *tens, float *const *vals, int r)
{
    if (tens) assert_int_equal(rp_tensor_write(tens[r], vals[r], tens[r]->numel), RP_OK);
}

/*
 * Compares analytic gradients with central differences for one tensor:
 * vals[r] is member r's host copy of it (perturbed on every member at once
 * when `replicated`, else on member p alone, and written to tens[r] when
 * tens is not NULL) and grads[r] its analytic gradient.
 */
static int check_slot(tp_case *c, const char *what, float *vals[MAX_N], float *grads[MAX_N],
                      rp_tensor *const *tens, int64_t numel, bool replicated, double *worst)
{
    const float eps = 1e-2f, rtol = 5e-3f, floor = 1e-3f;
    int misses = 0;
    for (int p = 0; p < (replicated ? 1 : c->n); p++) {
        double *num = malloc((size_t)numel * sizeof(double)), biggest = 0;
        assert_non_null(num);
        for (int64_t i = 0; i < numel; i++) {
            float orig = vals[p][i];
            double l[2];
            for (int side = 0; side < 2; side++) {
                for (int r = 0; r < c->n; r++)
                    if (r == p || replicated) {
                        vals[r][i] = side ? orig - eps : orig + eps;
                        put_val(tens, vals, r);
                    }
                l[side] = tp_evaluate(c, false);
            }
            for (int r = 0; r < c->n; r++)
                if (r == p || replicated) {
                    vals[r][i] = orig;
                    put_val(tens, vals, r);
                }
            num[i] = (l[0] - l[1]) / (2.0 * eps);
            biggest = fmax(biggest, fabs(num[i]));
        }
        for (int q = replicated ? 0 : p; q < (replicated ? c->n : p + 1); q++)
            for (int64_t i = 0; i < numel; i++) {
                double a = grads[q][i];
                double err = fabs(a - num[i]) / fmax(fmax(fabs(num[i]), 0.1 * biggest), floor);
                *worst = fmax(*worst, err);
                if (!(err <= rtol) && misses++ < 5)
                    print_error("%s: %s, member %d [%lld]: analytic %.6g numeric %.6g\n", c->name,
                                what, q, (long long)i, a, num[i]);
            }
        /* Not vacuous: the loss depends on this tensor. */
        if (!(biggest > 1e-3)) fail_msg("%s: %s has no gradient to check", c->name, what);
        free(num);
    }
    return misses;
}

static void tp_case_init(tp_case *c, const char *name, int n, int ndim, const int *shape,
                         tp_fwd_fn fwd)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->n = n;
    c->ndim = ndim;
    memcpy(c->shape, shape, (size_t)ndim * sizeof(int));
    c->numel = rp_shape_numel(ndim, shape);
    assert_true(c->numel <= MAX_EL);
    c->fwd = fwd;
    assert_int_equal(rp_comm_threads_create(c->comms, n, NULL, 30.0), RP_OK);
    for (int r = 0; r < n; r++)
        assert_int_equal(rp_tape_create(&c->tapes[r], 0), RP_OK);
}

/* Fills the inputs (equal on every member unless split) and finalizes the parameters. */
static void tp_case_ready(tp_case *c)
{
    for (int r = 0; r < c->n; r++) {
        tu_fill(c->x[r], c->numel, 50 + (c->x_split ? (uint64_t)r : 0), -1, 1);
        if (c->params[r]) assert_int_equal(rp_params_finalize(c->params[r], SEED), RP_OK);
    }
}

/* The input, then every trainable parameter of every member; frees the case. */
static void tp_check(tp_case *c)
{
    tp_case_ready(c);
    tp_evaluate(c, true);
    float *vals[MAX_N], *grads[MAX_N];
    double worst = 0;
    for (int r = 0; r < c->n; r++) {
        vals[r] = c->x[r];
        grads[r] = c->xgrad[r];
    }
    int misses = check_slot(c, "x", vals, grads, NULL, c->numel, !c->x_split, &worst);
    int np = c->params[0] ? rp_params_trainable_count(c->params[0]) : 0;
    for (int i = 0; i < np; i++) {
        rp_tensor *p0 = rp_params_at(c->params[0], i), *tens[MAX_N];
        for (int r = 0; r < c->n; r++) {
            tens[r] = rp_params_at(c->params[r], i);
            vals[r] = host_copy(tens[r], false);
            grads[r] = host_copy(tens[r], true);
        }
        bool rep = c->replicated_param && strcmp(p0->name, c->replicated_param) == 0;
        misses += check_slot(c, p0->name, vals, grads, tens, p0->numel, rep, &worst);
        for (int r = 0; r < c->n; r++) {
            free(grads[r]);
            free(vals[r]);
        }
    }
    for (int r = 0; r < c->n; r++) {
        rp_tape_destroy(c->tapes[r]);
        rp_params_destroy(c->params[r]);
        rp_comm_destroy(c->comms[r]);
    }
    if (misses) fail_msg("%s: %d gradient elements off (worst error %.3g)", c->name, misses, worst);
}

/* ---- finite-difference checks of every layer, on 2 members ---------------------------------- */

static rp_tensor *fwd_linear(rp_tape *t, tp_case *c, int rank, rp_tensor *x)
{
    return rp_tanh(t, rp_tp_linear_layer_forward(t, &c->lin[rank], x));
}

/* A linear case: in -> out on 2 members, the layer's options set after init. */
static void linear_case(const char *name, rp_tp_split split, bool gather, bool parallel)
{
    static tp_case c;
    int in = 4, out = 6, n = 2;
    bool x_split = split == RP_TP_ROW && parallel;
    tp_case_init(&c, name, n, 2, (int[]){3, x_split ? in / n : in}, fwd_linear);
    c.x_split = x_split;
    c.y_split = split == RP_TP_COLUMN && !gather;
    c.replicated_param = split == RP_TP_ROW ? "fc.bias" : NULL;
    for (int r = 0; r < n; r++) {
        assert_int_equal(rp_params_create(&c.params[r]), RP_OK);
        assert_int_equal(rp_tp_linear_layer_init(&c.lin[r], c.params[r], "fc", c.comms[r], split,
                                                 in, out, true, false),
                         RP_OK);
        c.lin[r].gather_output = gather;
        c.lin[r].input_is_parallel = parallel;
    }
    tp_check(&c);
}

static void test_gradcheck_column_linear(void **state)
{
    linear_case("column linear, split output", RP_TP_COLUMN, false, true);
    linear_case("column linear, gathered output", RP_TP_COLUMN, true, true);
}

static void test_gradcheck_row_linear(void **state)
{
    linear_case("row linear, split input", RP_TP_ROW, false, true);
    linear_case("row linear, replicated input", RP_TP_ROW, false, false);
}

static rp_tensor *fwd_conv(rp_tape *t, tp_case *c, int rank, rp_tensor *x)
{
    return rp_tanh(t, rp_tp_conv2d_layer_forward(t, &c->conv[rank], x));
}

static void conv_case(const char *name, rp_tp_split split, bool gather, bool parallel, int stride)
{
    static tp_case c;
    int in = 4, out = 4, n = 2;
    bool x_split = split == RP_TP_ROW && parallel;
    tp_case_init(&c, name, n, 4, (int[]){2, 4, 4, x_split ? in / n : in}, fwd_conv);
    c.x_split = x_split;
    c.y_split = split == RP_TP_COLUMN && !gather;
    c.replicated_param = split == RP_TP_ROW ? "conv.bias" : NULL;
    for (int r = 0; r < n; r++) {
        assert_int_equal(rp_params_create(&c.params[r]), RP_OK);
        assert_int_equal(rp_tp_conv2d_layer_init(&c.conv[r], c.params[r], "conv", c.comms[r], split,
                                                 in, out, 3, stride, 1, true),
                         RP_OK);
        c.conv[r].gather_output = gather;
        c.conv[r].input_is_parallel = parallel;
    }
    tp_check(&c);
}

static void test_gradcheck_column_conv(void **state)
{
    conv_case("column conv, split output", RP_TP_COLUMN, false, true, 1);
    conv_case("column conv stride 2, gathered output", RP_TP_COLUMN, true, true, 2);
}

static void test_gradcheck_row_conv(void **state)
{
    conv_case("row conv, split input", RP_TP_ROW, false, true, 1);
    conv_case("row conv stride 2, replicated input", RP_TP_ROW, false, false, 2);
}

static rp_tensor *fwd_xent(rp_tape *t, tp_case *c, int rank, rp_tensor *x)
{
    return rp_tp_softmax_cross_entropy(t, c->comms[rank], x, c->labels, c->classes);
}

/* The loss of split logits, labels owned by each member. */
static void test_gradcheck_softmax_xent(void **state)
{
    static tp_case c;
    tp_case_init(&c, "class-parallel softmax cross-entropy", 2, 2, (int[]){5, 3}, fwd_xent);
    c.x_split = true;
    c.classes = 6;
    memcpy(c.labels, (int32_t[]){0, 4, 2, 5, 3}, 5 * sizeof(int32_t));
    tp_check(&c);
}

/* ---- equivalence with the dense model ------------------------------------------------------- */

/*
 * Fails unless `shard` (member r of n) is within tol of its slice of `dense`
 * along `axis` (-1: the whole tensor, replicated); tol 0 asks for bitwise.
 */
static void check_shard(const char *what, int r, const float *shard, const float *dense, int ndim,
                        const int *shape, int axis, int n, double tol)
{
    int64_t numel = rp_shape_numel(ndim, shape);
    float *want = malloc((size_t)numel * sizeof(float));
    assert_non_null(want);
    if (axis < 0)
        memcpy(want, dense, (size_t)numel * sizeof(float));
    else
        assert_int_equal(rp_tp_shard_copy(want, dense, ndim, shape, axis, r, n), RP_OK);
    int64_t k = axis < 0 ? numel : numel / n;
    double d = tu_max_rel_diff(shard, want, k);
    bool ok = tol == 0 ? memcmp(shard, want, (size_t)k * sizeof(float)) == 0 : d < tol;
    free(want);
    if (!ok) fail_msg("%s, member %d of %d: %g from the dense model's", what, r, n, d);
}

/* check_shard on host copies of two tensors' values (grad false) or gradients (grad true). */
static void check_shard_of(const char *what, int r, const rp_tensor *shard, const rp_tensor *dense,
                           bool grad, int ndim, const int *shape, int axis, int n, double tol)
{
    assert_int_equal(dense->numel, rp_shape_numel(ndim, shape));
    float *hs = host_copy(shard, grad), *hd = host_copy(dense, grad);
    check_shard(what, r, hs, hd, ndim, shape, axis, n, tol);
    free(hd);
    free(hs);
}

/* Member r's slice of dense's values along `axis` (-1: all of them) into shard's values. */
static void copy_shard_of(rp_tensor *shard, const rp_tensor *dense, int axis, int r, int n)
{
    float *hd = host_copy(dense, false), *hs = malloc((size_t)shard->numel * sizeof(float));
    assert_non_null(hs);
    if (axis < 0) {
        assert_int_equal(shard->numel, dense->numel);
        memcpy(hs, hd, (size_t)shard->numel * sizeof(float));
    } else {
        assert_int_equal(rp_tp_shard_copy(hs, hd, dense->ndim, dense->shape, axis, r, n), RP_OK);
    }
    assert_int_equal(rp_tensor_write(shard, hs, shard->numel), RP_OK);
    free(hs);
    free(hd);
}

/* The parameter `name` of a list (a test bug if absent). */
static rp_tensor *param_of(rp_params *p, const char *name)
{
    rp_tensor *t = rp_params_find(p, name);
    if (!t) fail_msg("no parameter \"%s\"", name);
    return t;
}

#define MLP_B   6
#define MLP_IN  8
#define MLP_HID 12
#define MLP_OUT 5

typedef struct mlp_run {
    int n;
    float x[MLP_B * MLP_IN], proj[MLP_B * MLP_OUT];
    rp_comm *comms[MAX_N];
    rp_params *params[MAX_N];
    rp_tp_linear_layer fc1[MAX_N], fc2[MAX_N];
    float y[MAX_N][MLP_B * MLP_OUT], dx[MAX_N][MLP_B * MLP_IN];
    rp_status status[MAX_N];
    char error[MAX_N][256];
} mlp_run;

/* y = fc2(relu(fc1(x))), loss sum(y * R) counted once; keeps y and dx. */
static void mlp_member(void *ctx, int r)
{
    mlp_run *m = ctx;
    rp_tape *t;
    m->status[r] = rp_tape_create(&t, 0);
    if (m->status[r] != RP_OK) return;
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){MLP_B, MLP_IN}, m->x);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_tp_linear_layer_forward(
        t, &m->fc2[r], rp_relu(t, rp_tp_linear_layer_forward(t, &m->fc1[r], x)));
    rp_tensor *R = rp_tensor_from(t, 2, (int[]){MLP_B, MLP_OUT}, m->proj);
    rp_status st = y ? rp_backward(t, rp_sum(t, rp_mul(t, y, R))) : rp_last_status();
    if (st == RP_OK) st = values_into(y, m->y[r]);
    if (st == RP_OK) {
        grad_into(x, m->dx[r]);
    } else {
        snprintf(m->error[r], sizeof m->error[r], "%s", rp_last_error());
    }
    m->status[r] = st;
    rp_tape_destroy(t);
}

/*
 * An MLP with tensor parallelism n (fc1 column-split, fc2 row-split, no
 * gather between them) equals the dense MLP built under the same names and
 * seed: the shards start as the dense values' slices (bitwise), and the
 * output, the input's gradient and every parameter's gradient agree within
 * 1e-5.
 */
static void mlp_equivalence(int n)
{
    static mlp_run m;
    memset(&m, 0, sizeof m);
    m.n = n;
    tu_fill(m.x, MLP_B * MLP_IN, 61, -1, 1);
    projection(m.proj, MLP_B * MLP_OUT, 62);
    /* The dense MLP. */
    rp_params *dp;
    rp_linear_layer d1, d2;
    assert_int_equal(rp_params_create(&dp), RP_OK);
    assert_int_equal(rp_linear_layer_init(&d1, dp, "mlp.fc1", MLP_IN, MLP_HID, true, false), RP_OK);
    assert_int_equal(rp_linear_layer_init(&d2, dp, "mlp.fc2", MLP_HID, MLP_OUT, true, false),
                     RP_OK);
    assert_int_equal(rp_params_finalize(dp, SEED), RP_OK);
    /* Biases start at zero: make them count. */
    fill_tensor(d1.b, 63, -0.5f, 0.5f);
    fill_tensor(d2.b, 64, -0.5f, 0.5f);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){MLP_B, MLP_IN}, m.x);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = rp_linear_layer_forward(t, &d2, rp_relu(t, rp_linear_layer_forward(t, &d1, x)));
    rp_tensor *R = rp_tensor_from(t, 2, (int[]){MLP_B, MLP_OUT}, m.proj);
    assert_int_equal(rp_backward(t, rp_sum(t, rp_mul(t, y, R))), RP_OK);
    /* The same MLP split over n members. */
    assert_int_equal(rp_comm_threads_create(m.comms, n, NULL, 30.0), RP_OK);
    for (int r = 0; r < n; r++) {
        assert_int_equal(rp_params_create(&m.params[r]), RP_OK);
        assert_int_equal(rp_tp_linear_layer_init(&m.fc1[r], m.params[r], "mlp.fc1", m.comms[r],
                                                 RP_TP_COLUMN, MLP_IN, MLP_HID, true, false),
                         RP_OK);
        assert_int_equal(rp_tp_linear_layer_init(&m.fc2[r], m.params[r], "mlp.fc2", m.comms[r],
                                                 RP_TP_ROW, MLP_HID, MLP_OUT, true, false),
                         RP_OK);
        assert_int_equal(m.fc1[r].w->shape[0], MLP_HID / n);
        assert_int_equal(m.fc2[r].w->shape[1], MLP_HID / n);
        assert_int_equal(rp_params_finalize(m.params[r], SEED), RP_OK);
        /* The initialiser's shards are the dense weights' slices, bitwise. */
        check_shard_of("fc1.weight init", r, m.fc1[r].w, d1.w, false, 2, (int[]){MLP_HID, MLP_IN},
                       0, n, 0);
        check_shard_of("fc2.weight init", r, m.fc2[r].w, d2.w, false, 2, (int[]){MLP_OUT, MLP_HID},
                       1, n, 0);
        copy_shard_of(m.fc1[r].b, d1.b, 0, r, n);
        copy_shard_of(m.fc2[r].b, d2.b, -1, r, n);
    }
    run_members(n, mlp_member, &m);
    for (int r = 0; r < n; r++) {
        if (m.status[r] != RP_OK) fail_msg("member %d: %s", r, m.error[r]);
        float *yd = host_copy(y, false), *dxd = host_copy(x, true);
        check_shard("y", r, m.y[r], yd, 2, (int[]){MLP_B, MLP_OUT}, -1, n, 1e-5);
        check_shard("dx", r, m.dx[r], dxd, 2, (int[]){MLP_B, MLP_IN}, -1, n, 1e-5);
        free(dxd);
        free(yd);
        const char *names[4] = {"mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"};
        int axes[4] = {0, 0, 1, -1};
        for (int i = 0; i < 4; i++) {
            rp_tensor *dt = param_of(dp, names[i]);
            check_shard_of(names[i], r, param_of(m.params[r], names[i]), dt, true, dt->ndim,
                           dt->shape, axes[i], n, 1e-5);
        }
        rp_params_destroy(m.params[r]);
        rp_comm_destroy(m.comms[r]);
    }
    rp_tape_destroy(t);
    rp_params_destroy(dp);
}

static void test_mlp_equals_dense(void **state)
{
    mlp_equivalence(2);
    mlp_equivalence(4);
}

#define BLK_N  2
#define BLK_HW 5
#define BLK_C  4
#define BLK_EL (BLK_N * BLK_HW * BLK_HW * BLK_C)

/* A ResNet basic block's layers, dense or channel-split. */
typedef struct block_layers {
    rp_conv2d_layer conv1, conv2; /* dense */
    rp_tp_conv2d_layer tconv1, tconv2;
    rp_batchnorm_layer bn1, bn2;
    bool split;
} block_layers;

/* relu(bn2(conv2(relu(bn1(conv1(x))))) + x), training-mode batch norm. */
static rp_tensor *block_forward(rp_tape *t, const block_layers *b, rp_tensor *x)
{
    rp_tensor *h = b->split ? rp_tp_conv2d_layer_forward(t, &b->tconv1, x)
                            : rp_conv2d_layer_forward(t, &b->conv1, x);
    h = rp_relu(t, rp_batchnorm_layer_forward(t, &b->bn1, h, true));
    h = b->split ? rp_tp_conv2d_layer_forward(t, &b->tconv2, h)
                 : rp_conv2d_layer_forward(t, &b->conv2, h);
    h = rp_batchnorm_layer_forward(t, &b->bn2, h, true);
    return rp_relu(t, rp_add(t, h, x));
}

typedef struct block_run {
    float x[BLK_EL], proj[BLK_EL];
    rp_comm *comms[MAX_N];
    rp_params *params[MAX_N];
    block_layers layers[MAX_N];
    float y[MAX_N][BLK_EL], dx[MAX_N][BLK_EL];
    rp_status status[MAX_N];
    char error[MAX_N][256];
} block_run;

/* Forward and backward of one block on a fresh tape; y and dx out. */
static rp_status block_step(const block_layers *b, const float *xv, const float *proj, float *y,
                            float *dx)
{
    rp_tape *t;
    RP_CHECK(rp_tape_create(&t, 0));
    int shape[4] = {BLK_N, BLK_HW, BLK_HW, BLK_C};
    rp_tensor *x = rp_tensor_from(t, 4, shape, xv);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *out = block_forward(t, b, x);
    rp_tensor *R = rp_tensor_from(t, 4, shape, proj);
    rp_status st = out ? rp_backward(t, rp_sum(t, rp_mul(t, out, R))) : rp_last_status();
    if (st == RP_OK) st = values_into(out, y);
    if (st == RP_OK) grad_into(x, dx);
    rp_tape_destroy(t);
    return st;
}

static void block_member(void *ctx, int r)
{
    block_run *b = ctx;
    b->status[r] = block_step(&b->layers[r], b->x, b->proj, b->y[r], b->dx[r]);
    if (b->status[r] != RP_OK) snprintf(b->error[r], sizeof b->error[r], "%s", rp_last_error());
}

/*
 * A ResNet basic block (conv-bn-relu-conv-bn, the residual added, relu) with
 * conv1 split by output channels and conv2 by input channels over n members
 * equals the dense block: batch norm 1 runs on each member's own channels
 * (per-channel statistics need no collective), batch norm 2 on the reduced,
 * replicated output. Output, input gradient, every parameter's gradient and
 * the running statistics agree within 1e-5.
 */
static void block_equivalence(int n)
{
    static block_run b;
    memset(&b, 0, sizeof b);
    tu_fill(b.x, BLK_EL, 71, -1, 1);
    projection(b.proj, BLK_EL, 72);
    /* The dense block; batch norm's gamma and beta made non-trivial. */
    rp_params *dp;
    block_layers d = {.split = false};
    assert_int_equal(rp_params_create(&dp), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&d.conv1, dp, "blk.conv1", BLK_C, BLK_C, 3, 1, 1, false),
                     RP_OK);
    assert_int_equal(rp_batchnorm_layer_init(&d.bn1, dp, "blk.bn1", BLK_C), RP_OK);
    assert_int_equal(rp_conv2d_layer_init(&d.conv2, dp, "blk.conv2", BLK_C, BLK_C, 3, 1, 1, false),
                     RP_OK);
    assert_int_equal(rp_batchnorm_layer_init(&d.bn2, dp, "blk.bn2", BLK_C), RP_OK);
    assert_int_equal(rp_params_finalize(dp, SEED), RP_OK);
    rp_tensor *bn[4] = {d.bn1.gamma, d.bn1.beta, d.bn2.gamma, d.bn2.beta};
    for (int i = 0; i < 4; i++)
        fill_tensor(bn[i], 73 + (uint64_t)i, i % 2 ? -0.5f : 0.5f, i % 2 ? 0.5f : 1.5f);
    static float y[BLK_EL], dx[BLK_EL];
    assert_int_equal(block_step(&d, b.x, b.proj, y, dx), RP_OK);
    /* The same block split over n members. */
    assert_int_equal(rp_comm_threads_create(b.comms, n, NULL, 30.0), RP_OK);
    for (int r = 0; r < n; r++) {
        block_layers *l = &b.layers[r];
        rp_params *p;
        assert_int_equal(rp_params_create(&b.params[r]), RP_OK);
        p = b.params[r];
        l->split = true;
        assert_int_equal(rp_tp_conv2d_layer_init(&l->tconv1, p, "blk.conv1", b.comms[r],
                                                 RP_TP_COLUMN, BLK_C, BLK_C, 3, 1, 1, false),
                         RP_OK);
        assert_int_equal(rp_batchnorm_layer_init(&l->bn1, p, "blk.bn1", BLK_C / n), RP_OK);
        assert_int_equal(rp_tp_conv2d_layer_init(&l->tconv2, p, "blk.conv2", b.comms[r], RP_TP_ROW,
                                                 BLK_C, BLK_C, 3, 1, 1, false),
                         RP_OK);
        assert_int_equal(rp_batchnorm_layer_init(&l->bn2, p, "blk.bn2", BLK_C), RP_OK);
        assert_int_equal(rp_params_finalize(p, SEED), RP_OK);
        check_shard_of("conv1.weight init", r, l->tconv1.w, d.conv1.w, false, 4,
                       (int[]){BLK_C, 3, 3, BLK_C}, 0, n, 0);
        check_shard_of("conv2.weight init", r, l->tconv2.w, d.conv2.w, false, 4,
                       (int[]){BLK_C, 3, 3, BLK_C}, 3, n, 0);
        copy_shard_of(l->bn1.gamma, d.bn1.gamma, 0, r, n);
        copy_shard_of(l->bn1.beta, d.bn1.beta, 0, r, n);
        copy_shard_of(l->bn2.gamma, d.bn2.gamma, -1, r, n);
        copy_shard_of(l->bn2.beta, d.bn2.beta, -1, r, n);
    }
    run_members(n, block_member, &b);
    const int wshape[4] = {BLK_C, 3, 3, BLK_C}, cshape[1] = {BLK_C};
    for (int r = 0; r < n; r++) {
        block_layers *l = &b.layers[r];
        if (b.status[r] != RP_OK) fail_msg("member %d: %s", r, b.error[r]);
        check_shard("y", r, b.y[r], y, 4, (int[]){BLK_N, BLK_HW, BLK_HW, BLK_C}, -1, n, 1e-5);
        check_shard("dx", r, b.dx[r], dx, 4, (int[]){BLK_N, BLK_HW, BLK_HW, BLK_C}, -1, n, 1e-5);
        check_shard_of("conv1.weight grad", r, l->tconv1.w, d.conv1.w, true, 4, wshape, 0, n, 1e-5);
        check_shard_of("conv2.weight grad", r, l->tconv2.w, d.conv2.w, true, 4, wshape, 3, n, 1e-5);
        check_shard_of("bn1.weight grad", r, l->bn1.gamma, d.bn1.gamma, true, 1, cshape, 0, n,
                       1e-5);
        check_shard_of("bn1.bias grad", r, l->bn1.beta, d.bn1.beta, true, 1, cshape, 0, n, 1e-5);
        check_shard_of("bn1.running_mean", r, l->bn1.running_mean, d.bn1.running_mean, false, 1,
                       cshape, 0, n, 1e-5);
        check_shard_of("bn1.running_var", r, l->bn1.running_var, d.bn1.running_var, false, 1,
                       cshape, 0, n, 1e-5);
        check_shard_of("bn2.weight grad", r, l->bn2.gamma, d.bn2.gamma, true, 1, cshape, -1, n,
                       1e-5);
        check_shard_of("bn2.bias grad", r, l->bn2.beta, d.bn2.beta, true, 1, cshape, -1, n, 1e-5);
        check_shard_of("bn2.running_mean", r, l->bn2.running_mean, d.bn2.running_mean, false, 1,
                       cshape, -1, n, 1e-5);
        check_shard_of("bn2.running_var", r, l->bn2.running_var, d.bn2.running_var, false, 1,
                       cshape, -1, n, 1e-5);
        rp_params_destroy(b.params[r]);
        rp_comm_destroy(b.comms[r]);
    }
    rp_params_destroy(dp);
}

static void test_resnet_block_equals_dense(void **state)
{
    block_equivalence(2);
    block_equivalence(4);
}

#define XE_N 6
#define XE_C 8

typedef struct xent_run {
    int n;
    float logits[XE_N * XE_C];
    int32_t labels[XE_N];
    rp_comm *comms[MAX_N];
    float loss[MAX_N], dlogits[MAX_N][XE_N * XE_C];
    rp_status status[MAX_N];
    char error[MAX_N][256];
} xent_run;

static void xent_member(void *ctx, int r)
{
    xent_run *x = ctx;
    rp_tape *t;
    x->status[r] = rp_tape_create(&t, 0);
    if (x->status[r] != RP_OK) return;
    int k = XE_C / x->n;
    float shard[XE_N * XE_C];
    rp_tp_shard_copy(shard, x->logits, 2, (int[]){XE_N, XE_C}, 1, r, x->n);
    rp_tensor *z = rp_tensor_from(t, 2, (int[]){XE_N, k}, shard);
    rp_tensor_set_requires_grad(z, true);
    rp_tensor *loss = rp_tp_softmax_cross_entropy(t, x->comms[r], z, x->labels, XE_C);
    rp_status st = loss ? rp_backward(t, loss) : rp_last_status();
    if (st == RP_OK) {
        x->loss[r] = rp_item(loss);
        grad_into(z, x->dlogits[r]);
    } else {
        snprintf(x->error[r], sizeof x->error[r], "%s", rp_last_error());
    }
    x->status[r] = st;
    rp_tape_destroy(t);
}

/*
 * The class-parallel softmax cross-entropy on n members equals
 * rp_softmax_cross_entropy on the whole logits (loss on every member, each
 * member's slice of the logits' gradient) within 1e-5, with labels owned by
 * every member; logits near 1000 (exp would overflow unshifted) included.
 */
static void xent_equivalence(int n, float offset)
{
    static xent_run x;
    memset(&x, 0, sizeof x);
    x.n = n;
    tu_fill(x.logits, XE_N * XE_C, 81, -3, 3);
    for (int i = 0; i < XE_N * XE_C; i++)
        x.logits[i] += offset * (float)(i / XE_C % 2); /* every other row shifted */
    /* Labels in every member's classes (2 and 4 members: 4 and 2 classes each). */
    memcpy(x.labels, (int32_t[]){0, 7, 3, 4, 1, 6}, sizeof x.labels);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *z = rp_tensor_from(t, 2, (int[]){XE_N, XE_C}, x.logits);
    rp_tensor_set_requires_grad(z, true);
    rp_tensor *loss = rp_softmax_cross_entropy(t, z, x.labels);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float dense_loss = rp_item(loss);
    assert_true(isfinite(dense_loss));
    float *dz = host_copy(z, true);
    assert_int_equal(rp_comm_threads_create(x.comms, n, NULL, 30.0), RP_OK);
    run_members(n, xent_member, &x);
    for (int r = 0; r < n; r++) {
        if (x.status[r] != RP_OK) fail_msg("member %d: %s", r, x.error[r]);
        check_shard("loss", r, &x.loss[r], &dense_loss, 1, (int[]){1}, -1, n, 1e-5);
        check_shard("dlogits", r, x.dlogits[r], dz, 2, (int[]){XE_N, XE_C}, 1, n, 1e-5);
        rp_comm_destroy(x.comms[r]);
    }
    free(dz);
    rp_tape_destroy(t);
}

static void test_softmax_xent_equals_dense(void **state)
{
    xent_equivalence(2, 0.0f);
    xent_equivalence(4, 0.0f);
    xent_equivalence(2, 1000.0f);
}

/* ---- on the runtime's mesh: 2 replicas x tensor parallelism 2 ------------------------------ */

#define MT_B     4 /* rows per replica */
#define MT_IN    6
#define MT_HID   8
#define MT_CLS   6
#define MT_REP   2
#define MT_TP    2
#define MT_STEPS 3

/* One worker's model: fc1 column, relu, fc2 row, relu, head column (split classes), the loss. */
typedef struct mt_worker {
    rp_params *params;
    rp_tp_linear_layer fc1, fc2, head;
    rp_optimizer *opt;
} mt_worker;

typedef struct mt_job {
    float x[MT_REP * MT_B * MT_IN]; /* the global batch: replica d takes rows [d*B, (d+1)*B) */
    int32_t labels[MT_REP * MT_B];
    mt_worker w[MT_REP * MT_TP];
    float loss[MT_REP * MT_TP];
} mt_job;

static rp_status mt_build(rp_replica *rep, void *arg)
{
    mt_job *j = arg;
    mt_worker *s = &j->w[rp_replica_local_index(rep)];
    rp_comm *model = rp_replica_axis_comm(rep, RP_AXIS_MODEL);
    RP_CHECK(rp_params_create(&s->params));
    RP_CHECK(rp_tp_linear_layer_init(&s->fc1, s->params, "fc1", model, RP_TP_COLUMN, MT_IN, MT_HID,
                                     true, false));
    RP_CHECK(rp_tp_linear_layer_init(&s->fc2, s->params, "fc2", model, RP_TP_ROW, MT_HID, MT_HID,
                                     true, false));
    RP_CHECK(rp_tp_linear_layer_init(&s->head, s->params, "head", model, RP_TP_COLUMN, MT_HID,
                                     MT_CLS, true, false));
    RP_CHECK(rp_params_finalize(s->params, SEED));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &s->opt, s->params, &oc);
}

/* The dense model's forward on rows x [n, MT_IN]: the mean loss. */
static rp_tensor *mt_dense_forward(rp_tape *t, rp_linear_layer *l, rp_tensor *x,
                                   const int32_t *labels)
{
    rp_tensor *h = rp_relu(t, rp_linear_layer_forward(t, &l[0], x));
    h = rp_relu(t, rp_linear_layer_forward(t, &l[1], h));
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &l[2], h), labels);
}

static rp_status mt_step(rp_replica *rep, void *arg)
{
    mt_job *j = arg;
    mt_worker *s = &j->w[rp_replica_local_index(rep)];
    rp_tape *t = rp_replica_tape(rep);
    int d = rp_replica_id(rep);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){MT_B, MT_IN}, j->x + d * MT_B * MT_IN);
    rp_tensor *h = rp_relu(t, rp_tp_linear_layer_forward(t, &s->fc1, x));
    h = rp_relu(t, rp_tp_linear_layer_forward(t, &s->fc2, h));
    rp_tensor *loss = rp_tp_softmax_cross_entropy(
        t, s->head.comm, rp_tp_linear_layer_forward(t, &s->head, h), j->labels + d * MT_B, MT_CLS);
    if (!loss) return rp_last_status();
    j->loss[rp_replica_local_index(rep)] = rp_item(loss);
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(s->opt, 0.1f);
}

static rp_status mt_teardown(rp_replica *rep, void *arg)
{
    mt_job *j = arg;
    mt_worker *s = &j->w[rp_replica_local_index(rep)];
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->params);
    s->params = NULL;
    return RP_OK;
}

/*
 * Data parallelism 2 x tensor parallelism 2 on the runtime's mesh (threads):
 * each replica's two model workers split the MLP and the class-parallel
 * loss over their RP_AXIS_MODEL communicator, the sync strategy averages
 * gradients over the data axis (SGD with momentum), and after 3 steps every
 * worker's shards equal the slices of a dense MLP trained on the global
 * batch within 1e-5, and the loss on every worker is its replica's.
 */
static void test_mesh_data_x_tensor_parallel(void **state)
{
    static mt_job j;
    memset(&j, 0, sizeof j);
    tu_fill(j.x, MT_REP * MT_B * MT_IN, 91, -1, 1);
    for (int i = 0; i < MT_REP * MT_B; i++)
        j.labels[i] = (int32_t)((i * 5 + 1) % MT_CLS);
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1;
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", MT_REP, MT_TP);
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    rp_status st = rp_replicator_run(r, mt_build, &j);
    for (int s = 0; st == RP_OK && s < MT_STEPS; s++)
        st = rp_replicator_run(r, mt_step, &j);
    if (st != RP_OK) fail_msg("run: %s", rp_last_error());
    /* The dense MLP on the global batch: the mean loss's gradient is the replicas' average. */
    rp_params *dp;
    rp_linear_layer l[3];
    assert_int_equal(rp_params_create(&dp), RP_OK);
    assert_int_equal(rp_linear_layer_init(&l[0], dp, "fc1", MT_IN, MT_HID, true, false), RP_OK);
    assert_int_equal(rp_linear_layer_init(&l[1], dp, "fc2", MT_HID, MT_HID, true, false), RP_OK);
    assert_int_equal(rp_linear_layer_init(&l[2], dp, "head", MT_HID, MT_CLS, true, false), RP_OK);
    assert_int_equal(rp_params_finalize(dp, SEED), RP_OK);
    rp_optimizer *opt;
    rp_optim_config oc = rp_optim_config_default();
    assert_int_equal(rp_optimizer_create(&opt, dp, &oc), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    for (int s = 0; s < MT_STEPS; s++) {
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 2, (int[]){MT_REP * MT_B, MT_IN}, j.x);
        assert_int_equal(rp_backward(t, mt_dense_forward(t, l, x, j.labels)), RP_OK);
        assert_int_equal(rp_optimizer_step(opt, 0.1f), RP_OK);
    }
    const char *names[6] = {"fc1.weight", "fc1.bias",    "fc2.weight",
                            "fc2.bias",   "head.weight", "head.bias"};
    int axes[6] = {0, 0, 1, -1, 0, 0};
    for (int w = 0; w < MT_REP * MT_TP; w++) {
        rp_replica *rep = rp_replicator_replica(r, w);
        int m = rp_replica_coord(rep, RP_AXIS_MODEL);
        assert_int_equal(m, w % MT_TP);
        for (int i = 0; i < 6; i++) {
            rp_tensor *dt = param_of(dp, names[i]);
            check_shard_of(names[i], m, param_of(j.w[w].params, names[i]), dt, false, dt->ndim,
                           dt->shape, axes[i], MT_TP, 1e-5);
        }
    }
    /* The two model workers of a replica computed one loss; the replicas' losses differ. */
    assert_true(j.loss[0] == j.loss[1] && j.loss[2] == j.loss[3]);
    assert_true(j.loss[0] != j.loss[2]);
    assert_int_equal(rp_replicator_run(r, mt_teardown, &j), RP_OK);
    rp_replicator_destroy(r);
    rp_optimizer_destroy(opt);
    rp_tape_destroy(t);
    rp_params_destroy(dp);
}

/* ---- bad input ------------------------------------------------------------------------------ */

/* Sizes that do not divide over the group, bad splits and ranks: refused at init, named. */
static void test_bad_sizes(void **state)
{
    rp_comm *comms[2];
    assert_int_equal(rp_comm_threads_create(comms, 2, NULL, 5.0), RP_OK);
    rp_params *p;
    assert_int_equal(rp_params_create(&p), RP_OK);
    rp_tp_linear_layer l;
    rp_tp_conv2d_layer cv;
    assert_int_equal(rp_tp_linear_layer_init(&l, p, "a", comms[0], RP_TP_COLUMN, 4, 5, true, false),
                     RP_ERR_SHAPE);
    tu_assert_error_contains("5 output features do not split evenly over 2 members");
    assert_int_equal(rp_tp_linear_layer_init(&l, p, "b", comms[0], RP_TP_ROW, 5, 4, true, false),
                     RP_ERR_SHAPE);
    tu_assert_error_contains("5 input features do not split evenly over 2 members");
    assert_int_equal(
        rp_tp_conv2d_layer_init(&cv, p, "c", comms[0], RP_TP_COLUMN, 4, 3, 3, 1, 1, false),
        RP_ERR_SHAPE);
    tu_assert_error_contains("3 output features");
    assert_int_equal(
        rp_tp_conv2d_layer_init(&cv, p, "d", comms[0], RP_TP_ROW, 7, 4, 3, 1, 1, false),
        RP_ERR_SHAPE);
    tu_assert_error_contains("7 input features");
    assert_int_equal(rp_tp_linear_layer_init(&l, p, "e", NULL, RP_TP_ROW, 4, 4, true, false),
                     RP_ERR_INVALID);
    tu_assert_error_contains("communicator is NULL");
    assert_int_equal(
        rp_tp_linear_layer_init(&l, p, "f", comms[0], (rp_tp_split)7, 4, 4, true, false),
        RP_ERR_INVALID);
    tu_assert_error_contains("split 7");
    assert_int_equal(
        rp_tp_conv2d_layer_init(&cv, p, "g", comms[0], RP_TP_ROW, 4, 4, 3, 0, 1, false),
        RP_ERR_INVALID);
    tu_assert_error_contains("stride 0");
    /* Nothing was declared by the refused layers. */
    assert_int_equal(rp_params_count(p), 0);
    rp_init z = {RP_INIT_ZEROS, 0, 0, 0};
    assert_null(rp_params_add_shard(p, "s", 2, (int[]){4, 6}, z, true, 2, 0, 2));
    tu_assert_error_contains("axis 2");
    assert_null(rp_params_add_shard(p, "s", 2, (int[]){4, 6}, z, true, 1, 2, 2));
    tu_assert_error_contains("rank 2");
    assert_null(rp_params_add_shard(p, "s", 2, (int[]){4, 5}, z, true, 1, 0, 2));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("dimension 1 (5)");
    float dense[30] = {0}, shard[30];
    assert_int_equal(rp_tp_shard_copy(shard, dense, 2, (int[]){6, 5}, 1, 0, 2), RP_ERR_SHAPE);
    tu_assert_error_contains("dimension 1 (5)");
    assert_int_equal(rp_tp_shard_copy(shard, dense, 2, (int[]){6, 5}, 0, -1, 2), RP_ERR_INVALID);
    assert_int_equal(rp_tp_shard_copy(shard, dense, 2, (int[]){6, 5}, 2, 0, 2), RP_ERR_INVALID);
    /* The slice itself: dense [3, 4] = 0..11, columns 2 and 3 of member 1. */
    for (int i = 0; i < 12; i++)
        dense[i] = (float)i;
    assert_int_equal(rp_tp_shard_copy(shard, dense, 2, (int[]){3, 4}, 1, 1, 2), RP_OK);
    float want[6] = {2, 3, 6, 7, 10, 11};
    assert_memory_equal(shard, want, sizeof want);
    /* rp_tp_scatter checks the width before any collective (only member 0 calls it here). */
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    assert_null(rp_tp_scatter(t, comms[0], rp_tensor_fill(t, 2, (int[]){3, 5}, 1.0f)));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("(5) does not split evenly over 2 members");
    rp_tape_destroy(t);
    rp_params_destroy(p);
    rp_comm_destroy(comms[0]);
    rp_comm_destroy(comms[1]);
}

/* Inputs of the wrong shape, on a group of one: a clear error naming the layer, no collective. */
static void test_bad_input_shapes(void **state)
{
    rp_comm *comms[1];
    assert_int_equal(rp_comm_threads_create(comms, 1, NULL, 5.0), RP_OK);
    rp_params *p;
    assert_int_equal(rp_params_create(&p), RP_OK);
    rp_tp_linear_layer col, row;
    rp_tp_conv2d_layer cv;
    assert_int_equal(
        rp_tp_linear_layer_init(&col, p, "col", comms[0], RP_TP_COLUMN, 4, 6, true, false), RP_OK);
    assert_int_equal(
        rp_tp_linear_layer_init(&row, p, "row", comms[0], RP_TP_ROW, 6, 3, true, false), RP_OK);
    assert_int_equal(
        rp_tp_conv2d_layer_init(&cv, p, "cv", comms[0], RP_TP_COLUMN, 3, 4, 3, 1, 1, false), RP_OK);
    assert_int_equal(rp_params_finalize(p, SEED), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    assert_null(rp_tp_linear_layer_forward(t, &col, rp_tensor_fill(t, 2, (int[]){3, 5}, 1.0f)));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("col.weight");
    tu_assert_error_contains("[3, 5]");
    assert_null(rp_tp_linear_layer_forward(t, &row, rp_tensor_fill(t, 2, (int[]){3, 4}, 1.0f)));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("row.weight");
    assert_null(
        rp_tp_conv2d_layer_forward(t, &cv, rp_tensor_fill(t, 4, (int[]){1, 4, 4, 2}, 1.0f)));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    tu_assert_error_contains("cv.weight");
    /* The loss: logits not 2-D, a label outside the classes, NULL labels. */
    int32_t labels[3] = {0, 9, 1};
    assert_null(rp_tp_softmax_cross_entropy(t, comms[0], rp_tensor_fill(t, 1, (int[]){6}, 0.0f),
                                            labels, 6));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    rp_tensor *z = rp_tensor_fill(t, 2, (int[]){3, 6}, 0.0f);
    assert_null(rp_tp_softmax_cross_entropy(t, comms[0], z, labels, 6));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("label 1 is 9, outside the 6 classes");
    assert_null(rp_tp_softmax_cross_entropy(t, comms[0], z, NULL, 6));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    /* With one member, the layers and the loss are the dense ones, and they work. */
    labels[1] = 5;
    rp_tensor *loss = rp_tp_softmax_cross_entropy(t, comms[0], z, labels, 6);
    assert_non_null(loss);
    assert_true(fabsf(rp_item(loss) - logf(6.0f)) < 1e-6f);
    rp_tape_destroy(t);
    rp_params_destroy(p);
    rp_comm_destroy(comms[0]);
}

/* Two members that disagree: what each passes, and what each gets back. */
typedef struct mismatch_run {
    int case_id;
    rp_comm *comms[2];
    rp_status status[2];
    char error[2][256];
} mismatch_run;

static void mismatch_member(void *ctx, int r)
{
    mismatch_run *m = ctx;
    rp_tape *t;
    rp_params *p = NULL;
    rp_tensor *y = NULL;
    m->status[r] = rp_tape_create(&t, 0);
    if (m->status[r] != RP_OK) return;
    int32_t labels[3] = {0, 4, 2};
    switch (m->case_id) {
    case 0: /* logits of 3 and 2 classes */
        y = rp_tp_softmax_cross_entropy(t, m->comms[r], rp_tensor_fill(t, 2, (int[]){3, 3 - r}, 0),
                                        labels, 5);
        break;
    case 1: /* equal widths that do not make the classes */
        y = rp_tp_softmax_cross_entropy(t, m->comms[r], rp_tensor_fill(t, 2, (int[]){3, 2}, 0),
                                        labels, 5);
        break;
    case 2: /* a label out of range on member 1 only */
        labels[2] = r == 1 ? 7 : 2;
        y = rp_tp_softmax_cross_entropy(t, m->comms[r], rp_tensor_fill(t, 2, (int[]){3, 3}, 0),
                                        labels, 6);
        break;
    case 3: /* different labels */
        labels[0] = r;
        y = rp_tp_softmax_cross_entropy(t, m->comms[r], rp_tensor_fill(t, 2, (int[]){3, 3}, 0),
                                        labels, 6);
        break;
    case 4: { /* column layers built for 4 and 6 outputs, gathered */
        rp_tp_linear_layer l;
        if (rp_params_create(&p) != RP_OK ||
            rp_tp_linear_layer_init(&l, p, "fc", m->comms[r], RP_TP_COLUMN, 3, 4 + 2 * r, false,
                                    false) != RP_OK ||
            rp_params_finalize(p, SEED) != RP_OK)
            break;
        l.gather_output = true;
        y = rp_tp_linear_layer_forward(t, &l, rp_tensor_fill(t, 2, (int[]){2, 3}, 1.0f));
        break;
    }
    case 5: { /* a row layer given the wrong input width on member 1 only */
        rp_tp_linear_layer l;
        if (rp_params_create(&p) != RP_OK ||
            rp_tp_linear_layer_init(&l, p, "fc", m->comms[r], RP_TP_ROW, 4, 3, true, false) !=
                RP_OK ||
            rp_params_finalize(p, SEED) != RP_OK)
            break;
        y = rp_tp_linear_layer_forward(t, &l, rp_tensor_fill(t, 2, (int[]){2, 2 + r}, 1.0f));
        /* What the runtime does when a member's step fails: its peers stop waiting for it. */
        if (!y) rp_comm_leave(m->comms[r], rp_last_status(), rp_last_error());
        break;
    }
    }
    m->status[r] = y ? RP_OK : rp_last_status();
    snprintf(m->error[r], sizeof m->error[r], "%s", y ? "" : rp_last_error());
    rp_tape_destroy(t); /* before the parameters it may still refer to */
    rp_params_destroy(p);
}

static mismatch_run *run_mismatch(int case_id)
{
    static mismatch_run m;
    memset(&m, 0, sizeof m);
    m.case_id = case_id;
    assert_int_equal(rp_comm_threads_create(m.comms, 2, NULL, 10.0), RP_OK);
    run_members(2, mismatch_member, &m);
    rp_comm_destroy(m.comms[0]);
    rp_comm_destroy(m.comms[1]);
    for (int r = 0; r < 2; r++)
        if (m.status[r] == RP_OK) fail_msg("case %d: member %d did not fail", case_id, r);
    return &m;
}

static void assert_contains(const char *msg, const char *needle)
{
    if (!strstr(msg, needle)) fail_msg("\"%s\" not in: %s", needle, msg);
}

/*
 * Members whose shards or labels disagree all get a clear error (the loss
 * checks its agreement in its first collective; the comm checks sizes),
 * never a hang or a wrong number.
 */
static void test_mismatched_members(void **state)
{
    mismatch_run *m = run_mismatch(0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(m->status[r], RP_ERR_SHAPE);
        assert_contains(m->error[r], "from 2 to 3 classes");
    }
    m = run_mismatch(1);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(m->status[r], RP_ERR_SHAPE);
        assert_contains(m->error[r], "2 members with 2 classes each do not make the 5 classes");
    }
    m = run_mismatch(2);
    assert_int_equal(m->status[0], RP_ERR_INVALID);
    assert_contains(m->error[0], "another member of the group has a label outside the 6 classes");
    assert_int_equal(m->status[1], RP_ERR_INVALID);
    assert_contains(m->error[1], "label 2 is 7");
    m = run_mismatch(3);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(m->status[r], RP_ERR_INVALID);
        assert_contains(m->error[r], "labels differ");
    }
    /* Gathered slices of 4/2 and 6/2 outputs: the comm's size check, on both members. */
    m = run_mismatch(4);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(m->status[r], RP_ERR_MISMATCH);
        assert_contains(m->error[r], "rp_tp_gather");
        assert_contains(m->error[r], "count 4");
        assert_contains(m->error[r], "count 6");
    }
    /* Member 1's input is refused at once; member 0 learns why instead of waiting. */
    m = run_mismatch(5);
    assert_int_equal(m->status[1], RP_ERR_SHAPE);
    assert_contains(m->error[1], "input [2, 3] must be 2-D with 2 features");
    assert_int_equal(m->status[0], RP_ERR_COMM);
    assert_contains(m->error[0], "replica 1 ended its step");
    assert_contains(m->error[0], "input [2, 3]");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_column_linear),
        cmocka_unit_test(test_gradcheck_row_linear),
        cmocka_unit_test(test_gradcheck_column_conv),
        cmocka_unit_test(test_gradcheck_row_conv),
        cmocka_unit_test(test_gradcheck_softmax_xent),
        cmocka_unit_test(test_mlp_equals_dense),
        cmocka_unit_test(test_resnet_block_equals_dense),
        cmocka_unit_test(test_softmax_xent_equals_dense),
        cmocka_unit_test(test_mesh_data_x_tensor_parallel),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_bad_input_shapes),
        cmocka_unit_test(test_mismatched_members),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
