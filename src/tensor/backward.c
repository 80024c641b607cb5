/*
 * backward.c - every backward rule, in one place.
 *
 * Gradient targets. A tensor's gradient is written in one of two ways:
 *  - tape_grad_out(): for kernels that overwrite. If this is the tensor's first
 *    contribution (an activation without a gradient yet, or a parameter whose
 *    gradient is fresh zeros), the kernel writes straight into x->grad.
 *    Otherwise it writes into a scratch buffer that tape_grad_commit() adds in.
 *  - tape_grad_acc(): for kernels that accumulate; returns x->grad, zero-filled on
 *    first use.
 * Both return NULL when x needs no gradient, and the rule skips that input.
 * The collectives' rules (at the end) use the same helpers.
 */
#include <stdio.h>
#include <string.h>

#include "tape_internal.h"

bool tape_wants_grad(const rp_tensor *x)
{
    return x && (x->flags & RP_TENSOR_REQUIRES_GRAD);
}

void *tape_scratch(rp_tape *t, size_t bytes)
{
    if (t->n_scratch == t->cap_scratch) {
        /* The list is persistent: it grows to the most scratch one rule takes, then stays. */
        int cap = t->cap_scratch ? 2 * t->cap_scratch : 16;
        struct tape_scratch_entry *grown = rp_alloc((size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        if (t->n_scratch) memcpy(grown, t->scratch, (size_t)t->n_scratch * sizeof *grown);
        rp_free(t->scratch);
        t->scratch = grown;
        t->cap_scratch = cap;
    }
    void *p = rp_arena_alloc(t->store, bytes);
    if (p) t->scratch[t->n_scratch++] = (struct tape_scratch_entry){p, bytes};
    return p;
}

/* Sets *fail on OOM so callers can check once. */
float *tape_grad_out(rp_tape *t, rp_tensor *x, bool *fail)
{
    if (!tape_wants_grad(x)) return NULL;
    size_t bytes = (size_t)x->numel * sizeof(float);
    if (x->flags & RP_TENSOR_PARAM) {
        if (x->flags & RP_TENSOR_GRAD_FRESH) {
            x->flags &= ~RP_TENSOR_GRAD_FRESH;
            return x->grad;
        }
    } else if (!x->grad) {
        x->grad = rp_arena_alloc(t->store, bytes);
        if (!x->grad) *fail = true;
        return x->grad;
    }
    float *scratch = tape_scratch(t, bytes);
    if (!scratch) *fail = true;
    return scratch;
}

void tape_grad_commit(rp_tape *t, rp_tensor *x, float *buf)
{
    if (buf && buf != x->grad) t->k->add_inplace(x->grad, buf, x->numel);
}

float *tape_grad_acc(rp_tape *t, rp_tensor *x, bool *fail)
{
    if (!tape_wants_grad(x)) return NULL;
    if (x->flags & RP_TENSOR_PARAM) {
        x->flags &= ~RP_TENSOR_GRAD_FRESH; /* fresh means zeros: accumulating is right */
        return x->grad;
    }
    if (!x->grad) {
        x->grad = rp_arena_calloc(t->store, (size_t)x->numel * sizeof(float));
        if (!x->grad) *fail = true;
    }
    return x->grad;
}

/*
 * x's gradient += y's, in y's own rule (y's gradient is dead once it returns: release_after
 * hands it back). An activation with no gradient yet takes y's buffer over instead: no zeroing,
 * no add. Only one input of a rule may take it, and the rule must not read y->grad after.
 */
static rp_status grad_pass(rp_tape *t, rp_tensor *x, rp_tensor *y)
{
    if (!tape_wants_grad(x)) return RP_OK;
    if (!x->grad && !(x->flags & RP_TENSOR_PARAM) && !(y->flags & RP_TENSOR_PARAM) &&
        x->numel == y->numel) {
        x->grad = y->grad;
        y->grad = NULL;
        return RP_OK;
    }
    bool fail = false;
    float *dx = tape_grad_acc(t, x, &fail);
    if (fail) return tape_oom();
    t->k->add_inplace(dx, y->grad, y->numel);
    return RP_OK;
}

static rp_status matmul_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    int m = a->shape[0], k = a->shape[1], n = b->shape[1];
    bool fail = false;
    float *da = tape_grad_acc(t, a, &fail), *db = tape_grad_acc(t, b, &fail);
    if (fail) return tape_oom();
    /* da[M,K] += dy[M,N] b^T; db[K,N] += a^T dy */
    if (da)
        RP_CHECK(
            tape_gemm(t, nd->compute, false, true, m, k, n, y->grad, n, b->data, n, 1.0f, da, k));
    if (db)
        RP_CHECK(
            tape_gemm(t, nd->compute, true, false, k, n, m, a->data, k, y->grad, n, 1.0f, db, n));
    return RP_OK;
}

static rp_status linear_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2], *y = nd->out;
    int n = x->shape[0], in_f = x->shape[1], out_f = w->shape[0];
    bool fail = false;
    float *dx = tape_grad_acc(t, x, &fail), *dw = tape_grad_acc(t, w, &fail),
          *db = tape_grad_acc(t, b, &fail);
    if (fail) return tape_oom();
    /* dx[N,in] += dy[N,out] w[out,in]; dw[out,in] += dy^T x; db += column sums of dy */
    if (dx)
        RP_CHECK(tape_gemm(t, nd->compute, false, false, n, in_f, out_f, y->grad, out_f, w->data,
                           in_f, 1.0f, dx, in_f));
    if (dw)
        RP_CHECK(tape_gemm(t, nd->compute, true, false, out_f, in_f, n, y->grad, out_f, x->data,
                           in_f, 1.0f, dw, in_f));
    if (db) t->k->reduce_rows(db, y->grad, n, out_f, true);
    return RP_OK;
}

static rp_status conv_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2], *y = nd->out;
    /* x as the forward read it: its bf16 copy when rp_conv2d narrowed it (a.conv.x_type says) */
    const void *xs = nd->saved2 ? nd->saved2 : x->storage;
    kernels_conv_desc d = nd->a.conv;
    if (y->flags & TAPE_GRAD_BF16) d.dy_type = RP_BF16; /* rounded already (grad_bf16_wanted) */
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail), *dw = tape_grad_out(t, w, &fail),
          *db = tape_grad_out(t, b, &fail);
    if (fail) return tape_oom();
    /* bwd_weights always produces dw; give it scratch if w needs no gradient. */
    float *dw_buf = dw || !db ? dw : tape_scratch(t, (size_t)w->numel * sizeof(float));
    if (db && !dw_buf) return tape_oom();
    if (dx && dw_buf) /* both passes, in one call: a table may share their work on dy */
        RP_CHECK(t->k->conv2d_bwd(t->k, dx, dw_buf, db, y->grad, w->data, xs, &d));
    else if (dx)
        RP_CHECK(t->k->conv2d_bwd_data(dx, y->grad, w->data, &d));
    else if (dw_buf)
        RP_CHECK(t->k->conv2d_bwd_weights(dw_buf, db, y->grad, xs, &d));
    if (dx) tape_grad_commit(t, x, dx);
    if (dw) tape_grad_commit(t, w, dw);
    if (db) tape_grad_commit(t, b, db);
    return RP_OK;
}

/*
 * bf16 gradients. A bf16 convolution rounds its dy to bf16 before both backward passes (and the
 * bias's sum). When its output x takes its whole gradient from one batch norm, that batch norm
 * can round dx as it writes it and store it in bf16: the convolution reads the same values, bit
 * for bit, and the f32 gradient is never written, read back and rounded in a pass of its own
 * (PyTorch's autocast keeps such gradients in bf16 too, but there they are rounded before the
 * batch norm's sums; here no value changes). The conditions: x is a bf16 convolution's output
 * that no other recorded op reads (no other gradient adds in), with no gradient yet (not the
 * seed of rp_backward_from), on a table that takes bf16 gradients, with the tape's switch on.
 */
static bool grad_bf16_wanted(const rp_tape *t, const rp_tensor *x)
{
    if (!t->bf16_grads || !t->k->bf16_grads || !tape_wants_grad(x) || x->grad ||
        (x->flags & RP_TENSOR_PARAM) || x->node < 0 || x->pending != 1)
        return false;
    const tape_node *p = &t->nodes[x->node];
    return p->op == RP_OP_CONV2D && p->out == x && p->a.conv.compute == RP_BF16;
}

static rp_status batch_norm_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *gamma = nd->in[1], *beta = nd->in[2], *y = nd->out;
    int c = gamma->shape[0];
    int64_t m = x->numel / c;
    const float *mean = nd->saved, *invstd = (const float *)nd->saved + c;
    const float *mean_rest = (const float *)nd->saved + 2 * c;
    bool bf16 = x->dtype == RP_BF16;
    const void *relu_out = nd->a.bn.relu ? y->storage : NULL;
    double *sums = tape_scratch(t, (2 * (size_t)c + 1) * sizeof(double));
    float *local = tape_scratch(t, 2 * (size_t)c * sizeof(float));
    if (!sums || !local) return tape_oom();
    /* rp_batch_norm_add's residual: its gradient is dy through the ReLU's mask, written by the
     * statistics pass as it reads dy and y anyway. */
    rp_tensor *residual = nd->in[3];
    bool fail = false;
    float *dr = tape_grad_out(t, residual, &fail);
    if (fail) return tape_oom();
    if (bf16)
        t->k->bn_stats_bwd_bf16(t->k, sums, y->grad, relu_out, x->data_bf16, mean, invstd, m, c,
                                dr);
    else
        t->k->bn_stats_bwd(sums, y->grad, relu_out, x->data, mean, invstd, m, c, dr);
    if (dr) tape_grad_commit(t, residual, dr);
    /*
     * The kernel's xhat uses the float mean, off from the batch's by
     * mean_rest, so its sum(g*xhat) holds an extra mean_rest*invstd*sum(g):
     * up to mean/std * 2^-24 times sum(g), which is what limits dgamma on
     * badly centred inputs. Take it out (in double, before any all-reduce:
     * every replica has the same mean and the correction is linear). The
     * kernel also leaves the corrected sums as floats in `local`.
     */
    t->k->bn_bwd_sums(local, sums, mean_rest, invstd, c);
    float *dgamma = tape_grad_acc(t, gamma, &fail), *dbeta = tape_grad_acc(t, beta, &fail);
    bool dx_bf16 = bf16 && grad_bf16_wanted(t, x);
    float *dx = NULL;
    if (dx_bf16) {
        x->grad = rp_arena_alloc(t->store, (size_t)x->numel * sizeof(rp_bf16));
        if (!x->grad) return tape_oom();
        x->flags |= TAPE_GRAD_BF16;
        t->bf16_grads_made++;
        dx = x->grad;
    } else {
        dx = tape_grad_out(t, x, &fail);
    }
    if (fail) return tape_oom();
    /* Parameter gradients use this replica's sums: the gradient all-reduce averages them. */
    if (dbeta) t->k->add_inplace(dbeta, local, c);
    if (dgamma) t->k->add_inplace(dgamma, local + c, c);
    if (!dx) return RP_OK;
    double count = (double)m;
    if (nd->a.bn.training) {
        if (nd->a.bn.reduce || nd->a.bn.comm) {
            size_t bytes = (2 * (size_t)c + 1) * sizeof(double);
            double *hs = tape_host_in(t, sums, bytes);
            if (!hs) return tape_oom();
            if (nd->a.bn.reduce) RP_CHECK(nd->a.bn.reduce(hs, 2 * c, &count, nd->a.bn.ctx));
            if (nd->a.bn.comm) {
                /* The same one call of 2C+1 doubles as forward (and as the runtime's old hook). */
                hs[2 * c] = count;
                RP_CHECK(rp_comm_all_reduce(nd->a.bn.comm, hs, hs, 2 * c + 1, RP_F64, RP_SUM));
                count = hs[2 * c];
            }
            tape_host_commit(t, sums, hs, bytes);
        }
    } else {
        /* Running statistics are constants: zero sums give dx = gamma*invstd*dy. */
        t->k->mem_fill(sums, 0, 2 * (size_t)c * sizeof(double));
    }
    if (bf16)
        t->k->bn_bwd_data_bf16(t->k, dx, dx_bf16 ? RP_BF16 : RP_F32, y->grad, relu_out,
                               x->data_bf16, mean, invstd, sums, gamma->data, count, m, c);
    else
        t->k->bn_bwd_data(dx, y->grad, relu_out, x->data, mean, invstd, sums, gamma->data, count, m,
                          c);
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

rp_status tape_recompute(rp_tape *t, rp_tensor *y)
{
    tape_node *nd = &t->nodes[y->node]; /* a batch norm (rp_tape_drop checked) */
    rp_tensor *x = nd->in[0], *gamma = nd->in[1], *beta = nd->in[2], *residual = nd->in[3];
    int c = gamma->shape[0];
    const float *mean = nd->saved, *invstd = (const float *)nd->saved + c;
    y->storage = rp_arena_alloc(t->store, tape_bytes(y));
    if (!y->storage) return tape_oom();
    /* The forward pass's own kernel on the same values: bitwise the stored output. */
    if (x->dtype == RP_BF16)
        t->k->bn_norm_fwd_bf16(t->k, y->data_bf16, x->data_bf16, mean, invstd, gamma->data,
                               beta->data, residual ? residual->data_bf16 : NULL, nd->a.bn.relu,
                               x->numel / c, c);
    else
        t->k->bn_norm_fwd(y->data, x->data, mean, invstd, gamma->data, beta->data,
                          residual ? residual->data : NULL, nd->a.bn.relu, x->numel / c, c);
    return RP_OK;
}

static rp_status act_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    /* rp_relu_to's bf16 y: the ReLU's mask from x (x > 0 exactly where y > 0, but for positive
       x under bf16's least value, which rounds to 0 and is passed as the f32 ReLU passes it). */
    const float *ys = y->dtype == RP_BF16 ? x->data : y->data;
    t->k->act_bwd(dx, y->grad, ys, x->data, x->numel, nd->a.act.act, nd->a.act.slope);
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

/* b's gradient in binary_bwd (dy still whole). */
static rp_status binary_bwd_b(rp_tape *t, tape_node *nd)
{
    rp_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    int64_t n = a->numel, nb = nd->a.bin.nb;
    kernels_binop op = nd->a.bin.op;
    bool fail = false;
    if (!tape_wants_grad(b)) return RP_OK;
    if (op == RP_BIN_ADD && nb == n) {
        /* Same shapes (a residual add): b's gradient is dy itself. */
        float *db = tape_grad_out(t, b, &fail);
        if (fail) return tape_oom();
        t->k->mem_copy(db, y->grad, (size_t)n * sizeof(float));
        tape_grad_commit(t, b, db);
        return RP_OK;
    }
    float *db = tape_grad_acc(t, b, &fail);
    if (fail) return tape_oom();
    const float *src = y->grad;
    if (op != RP_BIN_ADD || nb != n) {
        float *tmp = tape_scratch(t, (size_t)n * sizeof(float));
        if (!tmp) return tape_oom();
        if (op == RP_BIN_MUL) {
            t->k->mul(tmp, y->grad, a->data, n, false);
        } else if (op == RP_BIN_DIV) {
            /* d(a/b)/db = -(a/b)/b = -y/b */
            t->k->mul(tmp, y->grad, y->data, n, false);
            t->k->binary(tmp, tmp, b->data, n, nb, RP_BIN_DIV);
            t->k->scale_inplace(tmp, -1.0f, n);
        } else if (op == RP_BIN_SUB) {
            t->k->scale(tmp, y->grad, -1.0f, n, false);
        } else {
            t->k->mem_copy(tmp, y->grad, (size_t)n * sizeof(float));
        }
        src = tmp;
    }
    t->k->reduce_rows(db, src, n / nb, nb, true);
    return RP_OK;
}

static rp_status binary_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    int64_t n = a->numel, nb = nd->a.bin.nb;
    kernels_binop op = nd->a.bin.op;
    bool scaled = op == RP_BIN_MUL || op == RP_BIN_DIV; /* da = dy (*|/) b */
    bool fail = false;
    if (scaled) {
        float *da = tape_grad_out(t, a, &fail);
        if (fail) return tape_oom();
        if (da) {
            t->k->binary(da, y->grad, b->data, n, nb, op);
            tape_grad_commit(t, a, da);
        }
    }
    rp_status st = binary_bwd_b(t, nd);
    /* da = dy for + and -: last, since a may take dy's buffer over. */
    if (st == RP_OK && !scaled) st = grad_pass(t, a, y);
    return st;
}

/* b's gradient in binary_bcast_bwd (dy still whole). */
static rp_status binary_bcast_bwd_b(rp_tape *t, tape_node *nd)
{
    rp_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    const int64_t *shape = nd->a.bcast.shape, *bstride = nd->a.bcast.bstride;
    kernels_binop op = nd->a.bcast.op;
    int64_t n = a->numel;
    bool scaled = op == RP_BIN_MUL || op == RP_BIN_DIV;
    bool fail = false;
    float *db = tape_grad_acc(t, b, &fail);
    if (fail) return tape_oom();
    if (!db) return RP_OK;
    unsigned mask = 0;
    for (int d = 0; d < RP_MAX_DIMS; d++)
        if (bstride[d] == 0 && shape[d] > 1) mask |= 1u << d;
    const float *src = y->grad;
    float scale = op == RP_BIN_ADD ? 1.0f : -1.0f;
    if (scaled) {
        float *tmp = tape_scratch(t, (size_t)n * sizeof(float));
        if (!tmp) return tape_oom();
        if (op == RP_BIN_MUL) {
            t->k->mul(tmp, y->grad, a->data, n, false);
            scale = 1.0f;
        } else {
            t->k->mul(tmp, y->grad, y->data, n, false);
            t->k->binary_bcast(tmp, tmp, b->data, shape, bstride, RP_BIN_DIV);
        }
        src = tmp;
    }
    t->k->reduce_axes(db, src, shape, mask, scale, true);
    return RP_OK;
}

/* Per-axis broadcasting: b's gradient sums over the axes it was repeated along. */
static rp_status binary_bcast_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *a = nd->in[0], *b = nd->in[1], *y = nd->out;
    const int64_t *shape = nd->a.bcast.shape, *bstride = nd->a.bcast.bstride;
    kernels_binop op = nd->a.bcast.op;
    bool scaled = op == RP_BIN_MUL || op == RP_BIN_DIV;
    bool fail = false;
    if (scaled) {
        float *da = tape_grad_out(t, a, &fail);
        if (fail) return tape_oom();
        if (da) {
            t->k->binary_bcast(da, y->grad, b->data, shape, bstride, op);
            tape_grad_commit(t, a, da);
        }
    }
    rp_status st = binary_bcast_bwd_b(t, nd);
    /* da = dy for + and -: last, since a may take dy's buffer over. */
    if (st == RP_OK && !scaled) st = grad_pass(t, a, y);
    return st;
}

static rp_status clamp_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    t->k->clamp_bwd(dx, y->grad, x->data, x->numel, nd->a.clamp.lo, nd->a.clamp.hi);
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

static rp_status layer_norm_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *gamma = nd->in[1], *beta = nd->in[2], *y = nd->out;
    int d = x->shape[x->ndim - 1];
    int64_t rows = x->numel / d;
    const float *mean = nd->saved, *rstd = (const float *)nd->saved + rows;
    bool fail = false;
    float *dgamma = tape_grad_acc(t, gamma, &fail), *dbeta = tape_grad_acc(t, beta, &fail);
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    /* The kernel always writes dx: scratch when x needs no gradient. */
    float *dx_buf = dx ? dx : tape_scratch(t, (size_t)x->numel * sizeof(float));
    if (!dx_buf) return tape_oom();
    t->k->layernorm_bwd(dx_buf, dgamma, dbeta, y->grad, x->data, mean, rstd,
                        gamma ? gamma->data : NULL, rows, d);
    if (dx) tape_grad_commit(t, x, dx);
    return RP_OK;
}

static rp_status log_softmax_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    int c = x->shape[x->ndim - 1];
    t->k->log_softmax_bwd(dx, y->grad, y->data, x->numel / c, c);
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

static rp_status reduce_axes_bwd(rp_tape *t, tape_node *nd)
{
    bool fail = false;
    float *dx = tape_grad_acc(t, nd->in[0], &fail);
    if (fail) return tape_oom();
    if (dx)
        t->k->expand_axes(dx, nd->out->grad, nd->a.red.shape, nd->a.red.mask, nd->a.red.scale,
                          true);
    return RP_OK;
}

static rp_status custom_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor **in = nd->many ? nd->many : nd->in;
    float **din = rp_arena_alloc(t->arena, (size_t)(nd->n_in ? nd->n_in : 1) * sizeof(float *));
    if (!din) return tape_oom();
    bool fail = false;
    for (int i = 0; i < nd->n_in; i++)
        din[i] = tape_grad_acc(t, in[i], &fail);
    if (fail) return tape_oom();
    const rp_custom_op *op = nd->a.custom.op;
    if (t->k->host_storage) {
        rp_status st = op->backward(nd->a.custom.ctx, nd->out, nd->out->grad, in, din, nd->n_in);
        return st == RP_OK ? RP_OK : tape_custom_error(st, op, "backward");
    }
    /* Host code over host shadows: the values, dout and the gradients it adds to, downloaded,
       then the gradients uploaded back. */
    rp_tensor **hin = rp_arena_alloc(t->arena, (size_t)(nd->n_in ? nd->n_in : 1) * sizeof *hin);
    float **hdin = rp_arena_alloc(t->arena, (size_t)(nd->n_in ? nd->n_in : 1) * sizeof *hdin);
    rp_tensor *hout = tape_host_tensor(t, nd->out, true);
    size_t out_bytes = (size_t)nd->out->numel * sizeof(float);
    const float *hdout = nd->out->grad ? tape_host_in(t, nd->out->grad, out_bytes) : NULL;
    if (!hin || !hdin || !hout || (nd->out->grad && !hdout)) return tape_oom();
    for (int i = 0; i < nd->n_in; i++) {
        hin[i] = tape_host_tensor(t, in[i], true);
        size_t bytes = (size_t)in[i]->numel * sizeof(float);
        hdin[i] = din[i] ? tape_host_in(t, din[i], bytes) : NULL;
        if (!hin[i] || (din[i] && !hdin[i])) return tape_oom();
    }
    rp_status st = op->backward(nd->a.custom.ctx, hout, hdout, hin, hdin, nd->n_in);
    if (st != RP_OK) return tape_custom_error(st, op, "backward");
    for (int i = 0; i < nd->n_in; i++)
        if (din[i]) tape_host_commit(t, din[i], hdin[i], (size_t)in[i]->numel * sizeof(float));
    return RP_OK;
}

/*
 * Spectral normalisation, y = W / sigma with sigma = u'^T W v and u', v held
 * constant (the power iteration is not differentiated, as in the paper):
 *   dW = G / sigma - (sum(G .* W) / sigma^2) u' v^T.
 */
static rp_status spectral_norm_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *w = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dw = tape_grad_acc(t, w, &fail);
    if (fail) return tape_oom();
    if (!dw) return RP_OK;
    int64_t rows = nd->a.sn.rows, cols = nd->a.sn.cols;
    double sigma = nd->a.sn.sigma;
    const double *un = nd->saved, *v = un + rows;
    t->k->sn_bwd(dw, un, v, y->grad, w->data, sigma, rows, cols);
    return RP_OK;
}

static rp_status concat_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor **xs = nd->many ? nd->many : nd->in, *y = nd->out;
    int last = y->ndim - 1, width = y->shape[last];
    int64_t rows = y->numel / width, off = 0;
    for (int i = 0; i < nd->n_in; i++) {
        int w = xs[i]->shape[last];
        bool fail = false;
        float *dx = tape_grad_acc(t, xs[i], &fail);
        if (fail) return tape_oom();
        if (dx) t->k->gather_cols(dx, y->grad, width, off, rows, w, true);
        off += w;
    }
    return RP_OK;
}

static rp_status pool_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    if (nd->op == RP_OP_MAX_POOL)
        RP_CHECK(t->k->maxpool_bwd(dx, nd->saved, y->grad, &nd->a.pool));
    else
        RP_CHECK(t->k->avgpool_bwd(dx, y->grad, &nd->a.pool));
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

static rp_status image_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    bool fail = false;
    float *dx = tape_grad_out(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    if (nd->op == RP_OP_GLOBAL_AVG_POOL)
        t->k->gap_bwd(dx, y->grad, x->shape[0], x->shape[1] * x->shape[2], x->shape[3]);
    else
        t->k->upsample2x_bwd(dx, y->grad, x->shape[0], x->shape[1], x->shape[2], x->shape[3]);
    tape_grad_commit(t, x, dx);
    return RP_OK;
}

static rp_status loss_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    float dl;
    t->k->mem_download(&dl, y->grad, sizeof dl);
    bool fail = false;
    if (nd->op == RP_OP_SOFTMAX_XENT) {
        float *dx = tape_grad_out(t, x, &fail);
        if (fail) return tape_oom();
        if (!dx) return RP_OK;
        int n = x->shape[0], c = x->shape[1];
        bool hard = nd->a.xent.hard;
        t->k->softmax_xent_bwd(dx, nd->saved, hard ? nd->saved2 : NULL, hard ? NULL : nd->saved2,
                               dl / (float)n, n, c);
        tape_grad_commit(t, x, dx);
        return RP_OK;
    }
    if (nd->op == RP_OP_MSE) {
        rp_tensor *b = nd->in[1];
        int64_t n = x->numel;
        float *diff = tape_scratch(t, (size_t)n * sizeof(float));
        float *da = tape_grad_acc(t, x, &fail), *db = tape_grad_acc(t, b, &fail);
        if (fail || !diff) return tape_oom();
        t->k->binary(diff, x->data, b->data, n, n, RP_BIN_SUB);
        float s = 2.0f * dl / (float)n;
        if (da) t->k->scale(da, diff, s, n, true);
        if (db) t->k->scale(db, diff, -s, n, true);
        return RP_OK;
    }
    /* SUM and MEAN: every element gets the same gradient. */
    float *dx = tape_grad_acc(t, x, &fail);
    if (fail) return tape_oom();
    if (dx) t->k->add_scalar(dx, nd->op == RP_OP_MEAN ? dl / (float)x->numel : dl, x->numel);
    return RP_OK;
}

/*
 * The differentiable collectives. Each rule is itself a collective, so it
 * runs on every member even when this member's output got no gradient
 * (zeros are sent then), and it makes its comm call before looking at
 * whether its own input wants the result: the peers need the call either way.
 */
/* The output's gradient, or zeros if the loss did not reach it on this member. */
static const float *out_grad(rp_tape *t, rp_tensor *y)
{
    if (y->grad) return y->grad;
    float *zeros = tape_scratch(t, (size_t)y->numel * sizeof(float));
    if (zeros) t->k->mem_fill(zeros, 0, (size_t)y->numel * sizeof(float));
    return zeros;
}

/* Whether a collective's adjoint adds the members' gradients (and so goes in the recorded wire
   type): all-reduce's (any reduction), broadcast's and copy_to_group's all-reduce, all-gather's
   reduce-scatter. */
static bool adjoint_reduces(const tape_node *nd)
{
    switch (nd->op) {
    case RP_OP_ALL_REDUCE:
    case RP_OP_BROADCAST:
    case RP_OP_COPY_TO_GROUP:
    case RP_OP_ALL_GATHER:
        return true;
    default:
        return false;
    }
}

/*
 * The reducing adjoint with bf16 on the wire (rp_tape_set_grad_wire): dy (ny values) rounded to
 * bf16 in the storage, reduced on host views in bf16 with f32 sums and one rounding, and the
 * result (nx values for all-gather's reduce-scatter, else ny) widened into g.
 */
static rp_status reduce_bf16(rp_tape *t, const tape_node *nd, const float *dy, int64_t ny, float *g,
                             int64_t nx)
{
    rp_comm *c = nd->a.coll.comm;
    int64_t nr = nd->op == RP_OP_ALL_GATHER ? nx : ny;
    size_t in_bytes = (size_t)ny * sizeof(rp_bf16), out_bytes = (size_t)nr * sizeof(rp_bf16);
    rp_bf16 *wire = tape_scratch(t, in_bytes), *sum = tape_scratch(t, out_bytes);
    if (!wire || !sum) return tape_oom();
    t->k->cast_f32_bf16(wire, dy, ny);
    const rp_bf16 *hw = tape_host_in(t, wire, in_bytes);
    rp_bf16 *hs = tape_host_out(t, sum, out_bytes);
    if (!hw || !hs) return tape_oom();
    if (nd->op == RP_OP_ALL_GATHER)
        RP_CHECK(rp_comm_reduce_scatter(c, hw, hs, nr, RP_BF16, RP_SUM));
    else
        RP_CHECK(rp_comm_all_reduce(
            c, hw, hs, nr, RP_BF16,
            nd->op == RP_OP_ALL_REDUCE && nd->a.coll.op == RP_MEAN ? RP_MEAN : RP_SUM));
    tape_host_commit(t, sum, hs, out_bytes);
    t->k->cast_bf16_f32(g, sum, nr);
    return RP_OK;
}

/* Adds a collective's adjoint g (the reduced or gathered gradient, in the storage) into dx. */
static rp_status collective_acc(rp_tape *t, tape_node *nd, float *g)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    int n = rp_comm_size(nd->a.coll.comm), rank = rp_comm_rank(nd->a.coll.comm);
    bool fail = false;
    if (nd->op == RP_OP_REDUCE_SCATTER && nd->a.coll.op == RP_MEAN)
        t->k->scale_inplace(g, 1.0f / (float)n, x->numel);

    float *dx = tape_grad_acc(t, x, &fail);
    if (fail) return tape_oom();
    if (!dx) return RP_OK;
    if (nd->op == RP_OP_ALL_REDUCE && (nd->a.coll.op == RP_MAX || nd->a.coll.op == RP_MIN)) {
        t->k->select_eq_acc(dx, g, x->data, y->data, x->numel);
    } else if ((nd->op == RP_OP_ALL_REDUCE && nd->a.coll.op == RP_FIRST) ||
               nd->op == RP_OP_BROADCAST) {
        int root = nd->op == RP_OP_BROADCAST ? nd->a.coll.root : 0;
        if (rank == root) t->k->add_inplace(dx, g, x->numel);
    } else {
        t->k->add_inplace(dx, g, x->numel);
    }
    return RP_OK;
}

static rp_status collective_bwd(rp_tape *t, tape_node *nd)
{
    rp_tensor *x = nd->n_in ? nd->in[0] : NULL, *y = nd->out;
    rp_comm *c = nd->a.coll.comm;
    bool fail = false;

    if (nd->op == RP_OP_REDUCE_FROM_GROUP) {
        /* Identity backward: no collective, and nothing to add without a gradient. */
        if (!y->grad) return RP_OK;
        float *dx = tape_grad_acc(t, x, &fail);
        if (fail) return tape_oom();
        if (dx) t->k->add_inplace(dx, y->grad, x->numel);
        return RP_OK;
    }

    if (nd->op == RP_OP_SEND) {
        /* The peer's receive sends back the gradient of what it received. */
        size_t bytes = (size_t)x->numel * sizeof(float);
        float *g = tape_scratch(t, bytes), *hg = g ? tape_host_out(t, g, bytes) : NULL;
        if (!hg) return tape_oom();
        RP_CHECK(rp_comm_recv(c, hg, x->numel, RP_F32, nd->a.coll.peer, nd->a.coll.tag));
        tape_host_commit(t, g, hg, bytes);
        float *dx = tape_grad_acc(t, x, &fail);
        if (fail) return tape_oom();
        if (dx) t->k->add_inplace(dx, g, x->numel);
        return RP_OK;
    }
    if (nd->op == RP_OP_RECV) {
        const float *dy = out_grad(t, y);
        const float *hdy = dy ? tape_host_in(t, dy, (size_t)y->numel * sizeof(float)) : NULL;
        if (!hdy) return tape_oom();
        return rp_comm_send(c, hdy, y->numel, RP_F32, nd->a.coll.peer, nd->a.coll.tag);
    }

    const float *dy_store = out_grad(t, y);
    size_t g_bytes = (size_t)(y->numel > x->numel ? y->numel : x->numel) * sizeof(float);
    float *g_store = tape_scratch(t, g_bytes);
    if (!dy_store || !g_store) return tape_oom();
    if (nd->a.coll.wire == RP_BF16 && adjoint_reduces(nd)) {
        RP_CHECK(reduce_bf16(t, nd, dy_store, y->numel, g_store, x->numel));
        return collective_acc(t, nd, g_store);
    }
    /* The collective runs on host views (the storage itself for a host table). */
    const float *dy = tape_host_in(t, dy_store, (size_t)y->numel * sizeof(float));
    float *g = tape_host_out(t, g_store, g_bytes);
    if (!dy || !g) return tape_oom();
    switch (nd->op) {
    case RP_OP_ALL_REDUCE:
        RP_CHECK(rp_comm_all_reduce(c, dy, g, y->numel, RP_F32,
                                    nd->a.coll.op == RP_MEAN ? RP_MEAN : RP_SUM));
        break;
    case RP_OP_BROADCAST:
    case RP_OP_COPY_TO_GROUP:
        RP_CHECK(rp_comm_all_reduce(c, dy, g, y->numel, RP_F32, RP_SUM));
        break;
    case RP_OP_ALL_GATHER:
        /* Block r of every member's dy, summed, is rank r's gradient. */
        RP_CHECK(rp_comm_reduce_scatter(c, dy, g, x->numel, RP_F32, RP_SUM));
        break;
    case RP_OP_REDUCE_SCATTER:
        RP_CHECK(rp_comm_all_gather(c, dy, g, y->numel, RP_F32));
        break;
    default:
        return RP_ERROR(RP_ERR_UNSUPPORTED, "backward: collective op %d has no rule", (int)nd->op);
    }
    tape_host_commit(t, g_store, g, g_bytes);
    return collective_acc(t, nd, g_store);
}

rp_status tape_node_backward(rp_tape *t, tape_node *nd)
{
    bool fail = false;
    switch (nd->op) {
    case RP_OP_MATMUL:
        return matmul_bwd(t, nd);
    case RP_OP_LINEAR:
        return linear_bwd(t, nd);
    case RP_OP_CONV2D:
        return conv_bwd(t, nd);
    case RP_OP_BATCH_NORM:
        return batch_norm_bwd(t, nd);
    case RP_OP_ACT:
        return act_bwd(t, nd);
    case RP_OP_BINARY:
        return binary_bwd(t, nd);
    case RP_OP_SCALE: {
        float *dx = tape_grad_acc(t, nd->in[0], &fail);
        if (fail) return tape_oom();
        if (dx) t->k->scale(dx, nd->out->grad, nd->a.scale.s, nd->out->numel, true);
        return RP_OK;
    }
    case RP_OP_CONCAT:
        return concat_bwd(t, nd);
    case RP_OP_RESHAPE:
        return grad_pass(t, nd->in[0], nd->out);
    case RP_OP_MAX_POOL:
    case RP_OP_AVG_POOL:
        return pool_bwd(t, nd);
    case RP_OP_GLOBAL_AVG_POOL:
    case RP_OP_UPSAMPLE2X:
        return image_bwd(t, nd);
    case RP_OP_EMBEDDING: {
        float *dtable = tape_grad_acc(t, nd->in[0], &fail);
        if (fail) return tape_oom();
        if (dtable)
            t->k->embedding_bwd(dtable, nd->out->grad, nd->saved, nd->a.emb.n, nd->in[0]->shape[1]);
        return RP_OK;
    }
    case RP_OP_SOFTMAX_XENT:
    case RP_OP_MSE:
    case RP_OP_SUM:
    case RP_OP_MEAN:
        return loss_bwd(t, nd);
    case RP_OP_BINARY_BCAST:
        return binary_bcast_bwd(t, nd);
    case RP_OP_CLAMP:
        return clamp_bwd(t, nd);
    case RP_OP_LAYER_NORM:
        return layer_norm_bwd(t, nd);
    case RP_OP_LOG_SOFTMAX:
        return log_softmax_bwd(t, nd);
    case RP_OP_REDUCE_AXES:
        return reduce_axes_bwd(t, nd);
    case RP_OP_CUSTOM:
        return custom_bwd(t, nd);
    case RP_OP_SPECTRAL_NORM:
        return spectral_norm_bwd(t, nd);
    case RP_OP_CAST:
        /* Gradients are f32 on both sides: the cast passes them on unchanged. */
        return grad_pass(t, nd->in[0], nd->out);
    case RP_OP_ALL_REDUCE:
    case RP_OP_ALL_GATHER:
    case RP_OP_REDUCE_SCATTER:
    case RP_OP_BROADCAST:
    case RP_OP_COPY_TO_GROUP:
    case RP_OP_REDUCE_FROM_GROUP:
    case RP_OP_SEND:
    case RP_OP_RECV:
        return collective_bwd(t, nd);
    }
    return RP_ERROR(RP_ERR_INVALID, "backward: unknown op %d", (int)nd->op);
}
