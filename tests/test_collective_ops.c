/*
 * test_collective_ops.c - the differentiable collectives and batch norm
 * over a communicator, on N threads with a threads-backend communicator
 * (rp_comm_threads_create), one tape per member.
 *
 * Gradients across replicas. The job's loss is the sum of every member's
 * loss, L = sum_r L_r with L_r = sum(y_r * R_r) for a fixed random
 * projection R_r per member (tanh around the collective makes dy depend on
 * y). The analytic gradient of member p's input is what p's backward leaves
 * in x_p->grad. The numeric one perturbs ONE element of ONE member's input
 * by +-eps, reruns the forward on every member (recording off) and
 * differences the sum of all members' losses, formed in double on the host.
 * Send/recv are checked the same way: a pipeline of two stages (stage 0's
 * loss is the send's token, 0) and a ring of three.
 * Megatron's pair is checked in its own convention (tensor.h): a
 * "replicated" input is one logical value, so the numeric pass perturbs it
 * on every member at once and each member's gradient must equal the
 * derivative of the total; "loss once" counts member 0's loss only, every
 * member computing the same one. The tolerance is test_gradcheck.c's
 * (|a - n| <= rtol * max(|n|, 0.1 G, floor), rtol 5e-3).
 *
 * With the gradient wire in bf16 (rp_tape_set_grad_wire), the reducing adjoints (copy_to_group,
 * all-reduce SUM and MEAN, all-gather, broadcast) give exactly the bf16 reduction of the
 * members' gradients (each rounded, summed in f32 in rank order, rounded once), which differs
 * from the f32 sum; the type is the one recorded at the forward.
 *
 * Batch norm with a communicator must give bitwise the outputs, gradients
 * and running statistics of batch norm with the runtime's old reduce hook
 * (written here as rp_cross_replica_bn wrote it: the sums and the count in
 * one f64 all-reduce), and agree within rounding with one replica on the
 * whole batch, and with batch norm in double on badly centred inputs.
 *
 * cmocka's asserts are not thread-safe, so member threads record what they
 * see and the main thread asserts.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_N  4
#define MAX_EL 64

typedef rp_tensor *(*coll_fwd)(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx);

typedef struct coll_case {
    const char *name;
    int n;              /* members */
    int ndim, shape[4]; /* each member's input */
    coll_fwd fwd;
    void *ctx;
    bool replicated;        /* x is one logical value: equal on every member, perturbed together */
    bool loss_once;         /* the loss is member 0's (all compute the same one) */
    float x[MAX_N][MAX_EL]; /* inputs */
    float grad[MAX_N][MAX_EL];
    int64_t numel;
    /* per evaluation */
    bool record;
    rp_comm *comms[MAX_N];
    rp_tape *tapes[MAX_N];
    double loss[MAX_N];
    rp_status status[MAX_N];
    char error[MAX_N][256];
} coll_case;

typedef struct member_arg {
    coll_case *c;
    int rank;
} member_arg;

/* The projection of member r (the same on every member when the loss counts once). */
static void projection(const coll_case *c, int rank, float *r, int64_t n)
{
    tu_fill(r, n, 1000 + (c->loss_once ? 0 : (uint64_t)rank), -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++)
        r[i] = r[i] < 0 ? r[i] - 0.5f : r[i] + 0.5f;
}

static void *member_main(void *p)
{
    member_arg *a = p;
    coll_case *c = a->c;
    int r = a->rank;
    rp_tape *t = c->tapes[r];
    rp_tape_reset(t);
    rp_tape_set_recording(t, c->record);
    c->status[r] = RP_OK;
    rp_tensor *x = rp_tensor_from(t, c->ndim, c->shape, c->x[r]);
    if (c->record) rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = c->fwd(t, c->comms[r], r, x, c->ctx);
    if (!y) goto fail;
    float *proj = rp_arena_alloc(rp_tape_arena(t), (size_t)y->numel * sizeof(float));
    float *yv = rp_arena_alloc(rp_tape_arena(t), (size_t)y->numel * sizeof(float));
    if (!proj || !yv || rp_tensor_read(y, yv, y->numel) != RP_OK) goto fail;
    projection(c, r, proj, y->numel);
    double s = 0;
    for (int64_t i = 0; i < y->numel; i++)
        s += (double)yv[i] * proj[i];
    c->loss[r] = s;
    if (c->record) {
        rp_tensor *R = rp_tensor_from(t, y->ndim, y->shape, proj);
        rp_status st = rp_backward(t, rp_sum(t, rp_mul(t, y, R)));
        if (st != RP_OK) goto fail;
        if (!x->grad)
            memset(c->grad[r], 0, (size_t)c->numel * sizeof(float));
        else if (rp_tensor_read_grad(x, c->grad[r], c->numel) != RP_OK)
            goto fail;
    }
    return NULL;
fail:
    c->status[r] = rp_last_status() != RP_OK ? rp_last_status() : RP_ERR_INVALID;
    snprintf(c->error[r], sizeof c->error[r], "%s", rp_last_error());
    return NULL;
}

/* One forward (and, when recording, backward) on every member; the job's loss. */
static double evaluate(coll_case *c, bool record)
{
    c->record = record;
    pthread_t th[MAX_N];
    member_arg args[MAX_N];
    for (int r = 0; r < c->n; r++) {
        args[r] = (member_arg){c, r};
        assert_int_equal(pthread_create(&th[r], NULL, member_main, &args[r]), 0);
    }
    for (int r = 0; r < c->n; r++)
        pthread_join(th[r], NULL);
    double total = 0;
    for (int r = 0; r < c->n; r++) {
        if (c->status[r] != RP_OK) fail_msg("%s: member %d failed: %s", c->name, r, c->error[r]);
        total += c->loss[r];
    }
    return c->loss_once ? c->loss[0] : total;
}

static void coll_init(coll_case *c, const char *name, int n, int ndim, const int *shape,
                      coll_fwd fwd, void *ctx)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->n = n;
    c->ndim = ndim;
    memcpy(c->shape, shape, (size_t)ndim * sizeof(int));
    c->numel = rp_shape_numel(ndim, shape);
    assert_true(c->numel <= MAX_EL);
    c->fwd = fwd;
    c->ctx = ctx;
    for (int r = 0; r < n; r++)
        tu_fill(c->x[r], c->numel, 50 + (uint64_t)r, -1, 1);
}

/* Distinct values across all members' inputs, 0.1 apart: max and min never tie within eps. */
static void distinct_inputs(coll_case *c)
{
    int64_t total = c->n * c->numel;
    float *v = malloc((size_t)total * sizeof(float));
    for (int64_t i = 0; i < total; i++)
        v[i] = (float)(i - total / 2) * 0.1f;
    rp_rng rng = rp_rng_make(77, 1);
    for (int64_t i = total - 1; i > 0; i--) {
        int64_t j = rp_rng_below(&rng, (uint32_t)(i + 1));
        float tmp = v[i];
        v[i] = v[j];
        v[j] = tmp;
    }
    for (int r = 0; r < c->n; r++)
        memcpy(c->x[r], v + r * c->numel, (size_t)c->numel * sizeof(float));
    free(v);
}

/* The analytic pass, then every element of every member (all members at once if replicated). */
static void coll_check(coll_case *c)
{
    assert_int_equal(rp_comm_threads_create(c->comms, c->n, NULL, 30.0), RP_OK);
    for (int r = 0; r < c->n; r++)
        assert_int_equal(rp_tape_create(&c->tapes[r], 0), RP_OK);
    if (c->replicated)
        for (int r = 1; r < c->n; r++)
            memcpy(c->x[r], c->x[0], (size_t)c->numel * sizeof(float));
    evaluate(c, true);
    const float eps = 1e-2f, rtol = 5e-3f, floor = 1e-3f;
    int members = c->replicated ? 1 : c->n;
    int misses = 0;
    double worst = 0;
    for (int p = 0; p < members; p++) {
        double num[MAX_EL], biggest = 0;
        for (int64_t i = 0; i < c->numel; i++) {
            float orig = c->x[p][i];
            double l[2];
            for (int side = 0; side < 2; side++) {
                float v = side ? orig - eps : orig + eps;
                for (int r = 0; r < c->n; r++)
                    if (r == p || c->replicated) c->x[r][i] = v;
                l[side] = evaluate(c, false);
            }
            for (int r = 0; r < c->n; r++)
                if (r == p || c->replicated) c->x[r][i] = orig;
            num[i] = (l[0] - l[1]) / (2.0 * eps);
            biggest = fmax(biggest, fabs(num[i]));
        }
        /* Replicated: every member's gradient must be the derivative of the total. */
        for (int q = c->replicated ? 0 : p; q < (c->replicated ? c->n : p + 1); q++)
            for (int64_t i = 0; i < c->numel; i++) {
                double a = c->grad[q][i];
                double err = fabs(a - num[i]) / fmax(fmax(fabs(num[i]), 0.1 * biggest), floor);
                worst = fmax(worst, err);
                if (!(err <= rtol) && misses++ < 5)
                    print_error("%s: member %d x[%lld]: analytic %.6g numeric %.6g\n", c->name, q,
                                (long long)i, a, num[i]);
            }
    }
    for (int r = 0; r < c->n; r++) {
        rp_tape_destroy(c->tapes[r]);
        rp_comm_destroy(c->comms[r]);
    }
    if (misses) fail_msg("%s: %d gradient elements off (worst error %.3g)", c->name, misses, worst);
}

/* ---- the cases ---------------------------------------------------------------------------- */

static rp_tensor *fwd_all_reduce(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    return rp_tanh(t, rp_tensor_all_reduce(t, c, rp_tanh(t, x), *(rp_reduce_op *)ctx));
}

/* all_reduce with every reduction, on 2 and 4 members. */
static void test_all_reduce(void **state)
{
    rp_reduce_op ops[5] = {RP_SUM, RP_MEAN, RP_MAX, RP_MIN, RP_FIRST};
    for (int n = 2; n <= 4; n += 2)
        for (int k = 0; k < 5; k++) {
            char name[64];
            snprintf(name, sizeof name, "all_reduce %s n=%d", rp_reduce_op_name(ops[k]), n);
            coll_case c;
            coll_init(&c, name, n, 2, (int[]){2, 3}, fwd_all_reduce, &ops[k]);
            if (ops[k] == RP_MAX || ops[k] == RP_MIN) distinct_inputs(&c);
            coll_check(&c);
        }
}

static rp_tensor *fwd_ignore(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    rp_tensor *y = rp_tensor_all_reduce(t, c, x, RP_SUM);
    /* Member 1's loss does not use y: its backward must still make the collective. */
    return rank == 1 ? (y ? rp_tanh(t, x) : NULL) : rp_tanh(t, y);
}

/* A member whose loss ignores the all-reduce's output still joins its backward (no hang). */
static void test_all_reduce_unused_output(void **state)
{
    coll_case c;
    coll_init(&c, "all_reduce, member 1 ignores y", 3, 1, (int[]){5}, fwd_ignore, NULL);
    coll_check(&c);
}

static rp_tensor *fwd_all_gather(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    rp_tensor *y = rp_tensor_all_gather(t, c, x);
    if (y && (y->ndim != x->ndim + 1 || y->shape[0] != rp_comm_size(c))) return NULL;
    return rp_tanh(t, y);
}

static void test_all_gather(void **state)
{
    coll_case c;
    coll_init(&c, "all_gather n=3", 3, 2, (int[]){2, 3}, fwd_all_gather, NULL);
    coll_check(&c);
    coll_init(&c, "all_gather n=4", 4, 1, (int[]){4}, fwd_all_gather, NULL);
    coll_check(&c);
}

static rp_tensor *fwd_reduce_scatter(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    rp_tensor *y = rp_tensor_reduce_scatter(t, c, rp_tanh(t, x), *(rp_reduce_op *)ctx);
    if (y && y->shape[0] != x->shape[0] / rp_comm_size(c)) return NULL;
    return rp_tanh(t, y);
}

static void test_reduce_scatter(void **state)
{
    rp_reduce_op sum = RP_SUM, mean = RP_MEAN;
    coll_case c;
    coll_init(&c, "reduce_scatter sum n=2", 2, 2, (int[]){4, 3}, fwd_reduce_scatter, &sum);
    coll_check(&c);
    coll_init(&c, "reduce_scatter mean n=4", 4, 2, (int[]){8, 2}, fwd_reduce_scatter, &mean);
    coll_check(&c);
}

static rp_tensor *fwd_broadcast(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    return rp_tanh(t, rp_tensor_broadcast(t, c, rp_tanh(t, x), *(int *)ctx));
}

static void test_broadcast(void **state)
{
    int root0 = 0, root2 = 2;
    coll_case c;
    coll_init(&c, "broadcast root 0 n=2", 2, 2, (int[]){2, 3}, fwd_broadcast, &root0);
    coll_check(&c);
    coll_init(&c, "broadcast root 2 n=4", 4, 1, (int[]){5}, fwd_broadcast, &root2);
    coll_check(&c);
}

static rp_tensor *fwd_copy_to_group(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    /* Each member's part of the region scales differently. */
    return rp_tanh(t, rp_scale(t, rp_copy_to_group(t, c, x), 1.0f + 0.5f * (float)rank));
}

/* copy_to_group: a replicated x, each member's loss counted (L = sum_r L_r). */
static void test_copy_to_group(void **state)
{
    coll_case c;
    coll_init(&c, "copy_to_group n=3", 3, 2, (int[]){2, 3}, fwd_copy_to_group, NULL);
    c.replicated = true;
    coll_check(&c);
}

static rp_tensor *fwd_reduce_from_group(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    return rp_tanh(
        t, rp_reduce_from_group(t, c, rp_scale(t, rp_tanh(t, x), 1.0f + 0.5f * (float)rank)));
}

/* reduce_from_group: per-member inputs, a replicated loss counted once. */
static void test_reduce_from_group(void **state)
{
    coll_case c;
    coll_init(&c, "reduce_from_group n=3", 3, 2, (int[]){2, 3}, fwd_reduce_from_group, NULL);
    c.loss_once = true;
    coll_check(&c);
}

static rp_tensor *fwd_reduce_inplace(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    rp_tensor *p = rp_scale(t, rp_tanh(t, x), 1.0f + 0.5f * (float)rank);
    rp_tensor *y = rp_reduce_from_group_inplace(t, c, p);
    if (y && y->data != p->data) return NULL; /* the sum must be in p's own storage */
    return rp_tanh(t, y);
}

/* The in-place variant: the same values and gradients as reduce_from_group. */
static void test_reduce_from_group_inplace(void **state)
{
    coll_case c;
    coll_init(&c, "reduce_from_group_inplace n=3", 3, 2, (int[]){2, 3}, fwd_reduce_inplace, NULL);
    c.loss_once = true;
    coll_check(&c);
}

typedef struct mlp_ctx {
    float w[MAX_N][6]; /* member r's shard of the weight, per element */
} mlp_ctx;

static rp_tensor *fwd_megatron(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    mlp_ctx *m = ctx;
    rp_tensor *w = rp_tensor_from(t, x->ndim, x->shape, m->w[rank]);
    rp_tensor *h = rp_tanh(t, rp_mul(t, rp_copy_to_group(t, c, x), w));
    return rp_tanh(t, rp_reduce_from_group(t, c, h));
}

/* The pair composed as in a Megatron MLP: replicated x, sharded weights, the loss counted once. */
static void test_megatron_pair(void **state)
{
    mlp_ctx m;
    for (int r = 0; r < MAX_N; r++)
        tu_fill(m.w[r], 6, 300 + (uint64_t)r, -1.5f, 1.5f);
    coll_case c;
    coll_init(&c, "copy_to_group -> shard -> reduce_from_group n=4", 4, 2, (int[]){2, 3},
              fwd_megatron, &m);
    c.replicated = true;
    c.loss_once = true;
    coll_check(&c);
}

static rp_tensor *fwd_pipeline(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    /* Stage 0 sends tanh(x) and back-propagates from the token; stage 1 computes the loss. */
    if (rank == 0) return rp_tensor_send(t, c, rp_tanh(t, x), 1, 7);
    rp_tensor *h = rp_tensor_recv(t, c, x->ndim, x->shape, 0, 7);
    return rp_tanh(t, rp_scale(t, h, 1.3f));
}

/* Two stages: stage 0's input gradient arrives from stage 1 through send's backward. */
static void test_send_recv_pipeline(void **state)
{
    coll_case c;
    coll_init(&c, "send/recv two stages", 2, 2, (int[]){2, 3}, fwd_pipeline, NULL);
    coll_check(&c);
}

static rp_tensor *fwd_ring(rp_tape *t, rp_comm *c, int rank, rp_tensor *x, void *ctx)
{
    int n = rp_comm_size(c);
    rp_tensor *tok = rp_tensor_send(t, c, rp_tanh(t, x), (rank + 1) % n, 3);
    rp_tensor *h = rp_tensor_recv(t, c, x->ndim, x->shape, (rank + n - 1) % n, 3);
    /* Adding the token (value 0) lets one backward cover the send too. */
    return rp_add(t, rp_add(t, rp_tanh(t, rp_scale(t, h, 1.3f)), rp_tanh(t, x)), tok);
}

/* A ring on 3 members, every one sending and receiving at once, and its own use of x. */
static void test_send_recv_ring(void **state)
{
    coll_case c;
    coll_init(&c, "send/recv ring n=3", 3, 1, (int[]){5}, fwd_ring, NULL);
    coll_check(&c);
}

/* Bad arguments fail on the calling member with the value named, before any comm call. */
static void test_collective_errors(void **state)
{
    rp_comm *comms[1];
    assert_int_equal(rp_comm_threads_create(comms, 1, NULL, 5.0), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_fill(t, 2, (int[]){3, 2}, 1.0f);
    assert_null(rp_tensor_all_reduce(t, NULL, x, RP_SUM));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    assert_null(rp_tensor_broadcast(t, comms[0], x, 1));
    tu_assert_error_contains("root 1");
    assert_null(rp_tensor_reduce_scatter(t, comms[0], x, RP_MAX));
    tu_assert_error_contains("max");
    rp_tensor *x4 = rp_tensor_fill(t, 4, (int[]){1, 2, 2, 2}, 1.0f);
    assert_null(rp_tensor_all_gather(t, comms[0], x4));
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    /* One member: every collective is the identity (all_gather adds the axis). */
    rp_tensor *g = rp_tensor_all_gather(t, comms[0], x);
    assert_int_equal(g->ndim, 3);
    assert_int_equal(g->shape[0], 1);
    float gv[6], xv[6];
    assert_int_equal(rp_tensor_read(g, gv, 6), RP_OK);
    assert_int_equal(rp_tensor_read(x, xv, 6), RP_OK);
    assert_memory_equal(gv, xv, sizeof gv);
    rp_tape_destroy(t);
    rp_comm_destroy(comms[0]);
}

/* ---- batch norm over a communicator ------------------------------------------------------------
 */

/* The reduce hook as the runtime wrote it (rp_cross_replica_bn): sums and count in one call. */
typedef struct hook_ctx {
    rp_comm *comm;
    double scratch[64];
} hook_ctx;

static rp_status old_hook(double *sums, int count, double *n, void *ctx)
{
    hook_ctx *h = ctx;
    memcpy(h->scratch, sums, (size_t)count * sizeof(double));
    h->scratch[count] = *n;
    RP_CHECK(rp_comm_all_reduce(h->comm, h->scratch, h->scratch, count + 1, RP_F64, RP_SUM));
    memcpy(sums, h->scratch, (size_t)count * sizeof(double));
    *n = h->scratch[count];
    return RP_OK;
}

#define BN_C   5
#define BN_PER 2 /* samples per member */
#define BN_HW  3
#define BN_EL  (BN_PER * BN_HW * BN_HW * BN_C)

typedef struct bn_run {
    int n;                                /* members (1: the whole batch on one) */
    int mode;                             /* 0 comm, 1 hook, 2 none */
    int per;                              /* samples per member */
    const float *x, *proj, *gamma, *beta; /* x and proj: the whole batch */
    rp_comm *comms[MAX_N];
    /* results, the whole batch / per member */
    float y[MAX_N * BN_EL], dx[MAX_N * BN_EL];
    float dgamma[MAX_N][BN_C], dbeta[MAX_N][BN_C], rmean[MAX_N][BN_C], rvar[MAX_N][BN_C];
    rp_status status[MAX_N];
} bn_run;

typedef struct bn_arg {
    bn_run *run;
    int rank;
} bn_arg;

static void *bn_member(void *arg)
{
    bn_arg *a = arg;
    bn_run *b = a->run;
    int r = a->rank;
    int64_t el = (int64_t)b->per * BN_HW * BN_HW * BN_C, off = r * el;
    rp_tape *t;
    hook_ctx h = {b->comms[r], {0}};
    b->status[r] = rp_tape_create(&t, 0);
    if (b->status[r] != RP_OK) return NULL;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){b->per, BN_HW, BN_HW, BN_C}, b->x + off);
    rp_tensor *gamma = rp_tensor_from(t, 1, (int[]){BN_C}, b->gamma);
    rp_tensor *beta = rp_tensor_from(t, 1, (int[]){BN_C}, b->beta);
    rp_tensor *rm = rp_tensor_fill(t, 1, (int[]){BN_C}, 0.0f),
              *rv = rp_tensor_fill(t, 1, (int[]){BN_C}, 1.0f);
    rp_tensor_set_requires_grad(x, true);
    rp_tensor_set_requires_grad(gamma, true);
    rp_tensor_set_requires_grad(beta, true);
    rp_bn_params p = rp_bn_params_default();
    if (b->mode == 0) p.comm = b->comms[r];
    if (b->mode == 1) {
        p.reduce = old_hook;
        p.reduce_ctx = &h;
    }
    rp_tensor *y = rp_batch_norm(t, x, gamma, beta, rm, rv, p);
    rp_tensor *R = rp_tensor_from(t, 4, x->shape, b->proj + off);
    rp_status st = y ? rp_backward(t, rp_sum(t, rp_mul(t, y, R))) : rp_last_status();
    if (st == RP_OK) st = rp_tensor_read(y, b->y + off, el);
    if (st == RP_OK) st = rp_tensor_read_grad(x, b->dx + off, el);
    if (st == RP_OK) st = rp_tensor_read_grad(gamma, b->dgamma[r], BN_C);
    if (st == RP_OK) st = rp_tensor_read_grad(beta, b->dbeta[r], BN_C);
    if (st == RP_OK) st = rp_tensor_read(rm, b->rmean[r], BN_C);
    if (st == RP_OK) st = rp_tensor_read(rv, b->rvar[r], BN_C);
    b->status[r] = st;
    rp_tape_destroy(t);
    return NULL;
}

static void bn_run_all(bn_run *b)
{
    if (b->mode != 2) assert_int_equal(rp_comm_threads_create(b->comms, b->n, NULL, 30.0), RP_OK);
    pthread_t th[MAX_N];
    bn_arg args[MAX_N];
    for (int r = 0; r < b->n; r++) {
        args[r] = (bn_arg){b, r};
        assert_int_equal(pthread_create(&th[r], NULL, bn_member, &args[r]), 0);
    }
    for (int r = 0; r < b->n; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < b->n; r++)
        assert_int_equal(b->status[r], RP_OK);
    if (b->mode != 2)
        for (int r = 0; r < b->n; r++)
            rp_comm_destroy(b->comms[r]);
}

/*
 * Batch norm with p.comm on 2 and 4 members equals batch norm with the old
 * reduce hook bitwise (outputs, input gradients, gamma and beta gradients,
 * running statistics), and one replica on the whole batch within rounding
 * (its gamma/beta gradients equal the sum of the members').
 */
static void test_batch_norm_comm(void **state)
{
    static float x[MAX_N * BN_EL], proj[MAX_N * BN_EL], gamma[BN_C], beta[BN_C];
    tu_fill(x, MAX_N * BN_EL, 5, -2, 3);
    tu_fill(proj, MAX_N * BN_EL, 6, -1, 1);
    tu_fill(gamma, BN_C, 7, 0.5f, 1.5f);
    tu_fill(beta, BN_C, 8, -1, 1);
    for (int n = 2; n <= 4; n += 2) {
        static bn_run comm, hook, one;
        comm = (bn_run){
            .n = n, .mode = 0, .per = BN_PER, .x = x, .proj = proj, .gamma = gamma, .beta = beta};
        hook = comm;
        hook.mode = 1;
        one = comm;
        one.n = 1;
        one.mode = 2;
        one.per = BN_PER * n;
        bn_run_all(&comm);
        bn_run_all(&hook);
        bn_run_all(&one);
        int64_t total = (int64_t)n * BN_EL;
        assert_memory_equal(comm.y, hook.y, (size_t)total * sizeof(float));
        assert_memory_equal(comm.dx, hook.dx, (size_t)total * sizeof(float));
        assert_memory_equal(comm.dgamma, hook.dgamma, sizeof comm.dgamma);
        assert_memory_equal(comm.dbeta, hook.dbeta, sizeof comm.dbeta);
        assert_memory_equal(comm.rmean, hook.rmean, sizeof comm.rmean);
        assert_memory_equal(comm.rvar, hook.rvar, sizeof comm.rvar);
        assert_true(tu_max_rel_diff(comm.y, one.y, total) < 1e-5);
        assert_true(tu_max_rel_diff(comm.dx, one.dx, total) < 1e-4);
        float dg[BN_C] = {0}, dbt[BN_C] = {0};
        for (int r = 0; r < n; r++) {
            assert_true(tu_max_rel_diff(comm.rmean[r], one.rmean[0], BN_C) < 1e-5);
            assert_true(tu_max_rel_diff(comm.rvar[r], one.rvar[0], BN_C) < 1e-5);
            for (int j = 0; j < BN_C; j++) {
                dg[j] += comm.dgamma[r][j];
                dbt[j] += comm.dbeta[r][j];
            }
        }
        assert_true(tu_max_rel_diff(dg, one.dgamma[0], BN_C) < 1e-4);
        assert_true(tu_max_rel_diff(dbt, one.dbeta[0], BN_C) < 1e-4);
        /* Not vacuous: a member's own statistics differ from the whole batch's. */
        static bn_run alone;
        alone = comm;
        alone.mode = 2;
        bn_run_all(&alone);
        assert_true(tu_max_rel_diff(alone.y, one.y, total) > 1e-3);
    }
}

/*
 * Cross-replica batch norm on badly centred inputs (per-channel mean 100
 * times the standard deviation): with p.comm on 2 and 4 members, the output,
 * the input gradients and the members' summed gamma and beta gradients are
 * within 1e-4 of batch norm computed in double over the whole batch. Each
 * member's sums are plain (unshifted) f64 sums, so they add up across
 * members whatever each member's kernel did inside.
 */
static void test_batch_norm_comm_off_centre(void **state)
{
    enum { TOTAL = MAX_N * BN_EL };
    static float x[TOTAL], proj[TOTAL], gamma[BN_C], beta[BN_C];
    static float y[TOTAL], dx[TOTAL], dgamma[BN_C], dbeta[BN_C];
    tu_fill(x, TOTAL, 9, -1, 1);
    for (int i = 0; i < TOTAL; i++) /* std sqrt(1/3) * 2^(j%3), mean 100 times it */
        x[i] = (float)((100 / sqrt(3.0) + x[i]) * (1 << (i % BN_C % 3)));
    tu_fill(proj, TOTAL, 10, 0, 2);
    tu_fill(gamma, BN_C, 11, 0.5f, 1.5f);
    tu_fill(beta, BN_C, 12, -1, 1);
    for (int n = 2; n <= 4; n += 2) {
        static bn_run comm;
        comm = (bn_run){
            .n = n, .mode = 0, .per = BN_PER, .x = x, .proj = proj, .gamma = gamma, .beta = beta};
        bn_run_all(&comm);
        int64_t total = (int64_t)n * BN_EL;
        tu_batch_norm_double(y, dgamma, dbeta, dx, x, proj, gamma, beta, 1e-5, total / BN_C, BN_C);
        float dg[BN_C] = {0}, dbt[BN_C] = {0};
        for (int r = 0; r < n; r++)
            for (int j = 0; j < BN_C; j++) {
                dg[j] += comm.dgamma[r][j];
                dbt[j] += comm.dbeta[r][j];
            }
        double d[4] = {tu_max_rel_diff(comm.y, y, total), tu_max_rel_diff(comm.dx, dx, total),
                       tu_max_rel_diff(dg, dgamma, BN_C), tu_max_rel_diff(dbt, dbeta, BN_C)};
        const char *what[4] = {"y", "dx", "dgamma", "dbeta"};
        for (int q = 0; q < 4; q++)
            if (!(d[q] < 1e-4)) fail_msg("%d members: %s %g from double", n, what[q], d[q]);
    }
}

/* comm and reduce together are refused. */
static void test_batch_norm_comm_and_hook(void **state)
{
    rp_comm *comms[1];
    assert_int_equal(rp_comm_threads_create(comms, 1, NULL, 5.0), RP_OK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    hook_ctx h = {comms[0], {0}};
    rp_bn_params p = rp_bn_params_default();
    p.comm = comms[0];
    p.reduce = old_hook;
    p.reduce_ctx = &h;
    rp_tensor *x = rp_tensor_fill(t, 2, (int[]){4, 3}, 1.0f);
    rp_tensor *g = rp_tensor_fill(t, 1, (int[]){3}, 1.0f),
              *b = rp_tensor_fill(t, 1, (int[]){3}, 0.0f);
    assert_null(rp_batch_norm(t, x, g, b, NULL, NULL, p));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
    tu_assert_error_contains("not both");
    rp_tape_destroy(t);
    rp_comm_destroy(comms[0]);
}

/* ---- gradients in bf16 on the wire (rp_tape_set_grad_wire) ------------------------------- */

/*
 * Each member's y is the collective of its x alone, and L_r = sum(y_r * R_r), so dy_r = R_r
 * exactly. With the wire in bf16 the reducing adjoints must give exactly the comm's bf16
 * reduction of the R_r: each rounded to bf16, added in f32 in rank order, (divided by n for
 * MEAN,) rounded once, widened; and that must differ from the f32 sum (the rounding happened).
 * The wire recorded at the forward rules, whatever the tape says at the backward.
 */
enum { W_COPY, W_SUM, W_MEAN, W_GATHER, W_BCAST, W_KINDS };
#define W_N 3
#define W_K 40

typedef struct wire_case {
    int kind;
    rp_comm *comms[W_N];
    float grad[W_N][W_K];
    rp_status status[W_N];
    char error[W_N][256];
} wire_case;

typedef struct wire_arg {
    wire_case *c;
    int rank;
} wire_arg;

/* Member r's projection: values whose bf16 roundings and sums are all inexact. */
static void wire_projection(int rank, float *r, int64_t n)
{
    tu_fill(r, n, 4000 + (uint64_t)rank, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; i++)
        r[i] += 1e-3f * (float)(i + 1);
}

static void *wire_member(void *p)
{
    wire_arg *a = p;
    wire_case *c = a->c;
    int r = a->rank;
    rp_tape *t = NULL;
    rp_comm *cm = c->comms[r];
    c->status[r] = rp_tape_create(&t, 0);
    if (c->status[r] != RP_OK) goto fail;
    if ((c->status[r] = rp_tape_set_grad_wire(t, RP_BF16)) != RP_OK) goto fail;
    float xv[W_K];
    tu_fill(xv, W_K, 60 + (uint64_t)r, -1, 1);
    rp_tensor *x = rp_tensor_from(t, 1, (int[]){W_K}, xv), *y = NULL;
    rp_tensor_set_requires_grad(x, true);
    switch (c->kind) {
    case W_COPY:
        y = rp_copy_to_group(t, cm, x);
        break;
    case W_SUM:
        y = rp_tensor_all_reduce(t, cm, x, RP_SUM);
        break;
    case W_MEAN:
        y = rp_tensor_all_reduce(t, cm, x, RP_MEAN);
        break;
    case W_GATHER:
        y = rp_tensor_all_gather(t, cm, x);
        break;
    default:
        y = rp_tensor_broadcast(t, cm, x, 1);
        break;
    }
    if (!y) goto fail;
    /* The backward follows the wire each op recorded, not the tape's setting now. */
    if ((c->status[r] = rp_tape_set_grad_wire(t, RP_F32)) != RP_OK) goto fail;
    float proj[W_N * W_K];
    wire_projection(r, proj, y->numel);
    rp_tensor *R = rp_tensor_from(t, y->ndim, y->shape, proj);
    if ((c->status[r] = rp_backward(t, rp_sum(t, rp_mul(t, y, R)))) != RP_OK) goto fail;
    if (!x->grad)
        memset(c->grad[r], 0, sizeof c->grad[r]);
    else if ((c->status[r] = rp_tensor_read_grad(x, c->grad[r], W_K)) != RP_OK)
        goto fail;
    rp_tape_destroy(t);
    return NULL;
fail:
    if (c->status[r] == RP_OK) c->status[r] = rp_last_status() ? rp_last_status() : RP_ERR_INVALID;
    snprintf(c->error[r], sizeof c->error[r], "%s", rp_last_error());
    rp_tape_destroy(t);
    return NULL;
}

static void test_grad_wire_bf16(void **state)
{
    (void)state;
    static const char *names[W_KINDS] = {"copy_to_group", "all_reduce sum", "all_reduce mean",
                                         "all_gather", "broadcast"};
    for (int kind = 0; kind < W_KINDS; kind++) {
        wire_case c = {.kind = kind};
        assert_int_equal(rp_comm_threads_create(c.comms, W_N, NULL, 30.0), RP_OK);
        pthread_t th[W_N];
        wire_arg args[W_N];
        for (int r = 0; r < W_N; r++) {
            args[r] = (wire_arg){&c, r};
            assert_int_equal(pthread_create(&th[r], NULL, wire_member, &args[r]), 0);
        }
        for (int r = 0; r < W_N; r++)
            pthread_join(th[r], NULL);
        for (int r = 0; r < W_N; r++) {
            rp_comm_destroy(c.comms[r]);
            if (c.status[r] != RP_OK) fail_msg("%s: member %d: %s", names[kind], r, c.error[r]);
        }
        /* The expected gradients: member r's block (all_gather: block r of every R_s; else the
           whole R_s), summed over s in rank order in f32, in bf16 on the way in and out. */
        int ny = kind == W_GATHER ? W_N * W_K : W_K;
        float proj[W_N][W_N * W_K];
        for (int s = 0; s < W_N; s++)
            wire_projection(s, proj[s], ny);
        int differs = 0;
        for (int r = 0; r < W_N; r++)
            for (int i = 0; i < W_K; i++) {
                int at = kind == W_GATHER ? r * W_K + i : i;
                float bsum = 0, fsum = 0;
                for (int s = 0; s < W_N; s++) {
                    bsum += rp_bf16_to_f32(rp_bf16_from_f32(proj[s][at]));
                    fsum += proj[s][at];
                }
                if (kind == W_MEAN) {
                    bsum /= (float)W_N;
                    fsum /= (float)W_N;
                }
                float want = rp_bf16_to_f32(rp_bf16_from_f32(bsum));
                if (kind == W_BCAST && r != 1) want = fsum = 0; /* only the root's input */
                if (memcmp(&c.grad[r][i], &want, sizeof want) != 0)
                    fail_msg("%s: member %d dx[%d] = %.9g, want %.9g (bf16 sum of bf16 values)",
                             names[kind], r, i, c.grad[r][i], want);
                differs += c.grad[r][i] != fsum;
            }
        if (differs == 0) fail_msg("%s: the bf16 wire gave the f32 sums exactly", names[kind]);
    }
    /* The setter's checks. */
    rp_tape *t = NULL;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    assert_int_equal(rp_tape_grad_wire(t), RP_F32);
    assert_int_equal(rp_tape_set_grad_wire(t, RP_F64), RP_ERR_INVALID);
    tu_assert_error_contains("f32 or bf16, not f64");
    assert_int_equal(rp_tape_grad_wire(t), RP_F32);
    assert_int_equal(rp_tape_set_grad_wire(NULL, RP_BF16), RP_ERR_INVALID);
    assert_int_equal(rp_tape_grad_wire(NULL), RP_F32);
    rp_tape_destroy(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_reduce),
        cmocka_unit_test(test_all_reduce_unused_output),
        cmocka_unit_test(test_all_gather),
        cmocka_unit_test(test_reduce_scatter),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_copy_to_group),
        cmocka_unit_test(test_grad_wire_bf16),
        cmocka_unit_test(test_reduce_from_group),
        cmocka_unit_test(test_reduce_from_group_inplace),
        cmocka_unit_test(test_megatron_pair),
        cmocka_unit_test(test_send_recv_pipeline),
        cmocka_unit_test(test_send_recv_ring),
        cmocka_unit_test(test_collective_errors),
        cmocka_unit_test(test_batch_norm_comm),
        cmocka_unit_test(test_batch_norm_comm_off_centre),
        cmocka_unit_test(test_batch_norm_comm_and_hook),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
