/*
 * ops_dense.c - forward ops on flat data: matmul, linear, activations,
 * element-wise arithmetic, concatenation, reshapes, reductions and losses.
 * Each validates its inputs, computes through the kernel table and, when a
 * gradient is needed, records a node for backward.c.
 */
#include <math.h>
#include <string.h>

#include "tape_internal.h"

/* A NULL input means an earlier op failed: pass the failure on silently. */
rp_tensor *rp_matmul(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    TAPE_F32_IN(t, a);
    TAPE_F32_IN(t, b);
    char sa[64], sb[64];
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != b->shape[0]) {
        RP_ERROR(RP_ERR_SHAPE, "rp_matmul: cannot multiply %s by %s (need [M,K] x [K,N])",
                 rp_shape_str(a, sa, sizeof sa), rp_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    int m = a->shape[0], k = a->shape[1], n = b->shape[1];
    rp_tensor *y = tape_tensor(t, 2, (int[]){m, n});
    RP_PROPAGATE_NULL(y);
    rp_dtype compute = tape_compute(t, RP_AUTOCAST_MATMUL);
    if (tape_gemm(t, compute, false, false, m, n, k, a->data, k, b->data, n, 0.0f, y->data, n) !=
        RP_OK)
        return NULL;
    rp_tensor *in[] = {a, b};
    if (tape_needs_grad(t, in, 2)) {
        tape_node *node = tape_record(t, RP_OP_MATMUL, y, in, 2);
        RP_PROPAGATE_NULL(node);
        node->compute = compute;
    }
    return y;
}

rp_tensor *rp_linear(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b)
{
    TAPE_F32_IN(t, x);
    TAPE_F32_IN(t, w);
    TAPE_USE(t, b);
    char sx[64], sw[64], sb[64];
    if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1]) {
        RP_ERROR(RP_ERR_SHAPE, "rp_linear: input %s does not fit weight %s (need [N,in], [out,in])",
                 rp_shape_str(x, sx, sizeof sx), rp_shape_str(w, sw, sizeof sw));
        return NULL;
    }
    int n = x->shape[0], in_f = x->shape[1], out_f = w->shape[0];
    if (b && (b->ndim != 1 || b->shape[0] != out_f)) {
        RP_ERROR(RP_ERR_SHAPE, "rp_linear: bias %s does not fit weight %s (need [%d])",
                 rp_shape_str(b, sb, sizeof sb), rp_shape_str(w, sw, sizeof sw), out_f);
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, 2, (int[]){n, out_f});
    RP_PROPAGATE_NULL(y);
    rp_dtype compute = tape_compute(t, RP_AUTOCAST_LINEAR);
    if (tape_gemm(t, compute, false, true, n, out_f, in_f, x->data, in_f, w->data, in_f, 0.0f,
                  y->data, out_f) != RP_OK)
        return NULL;
    if (b) t->k->binary(y->data, y->data, b->data, y->numel, out_f, RP_BIN_ADD);
    rp_tensor *in[] = {x, w, b};
    if (tape_needs_grad(t, in, 3)) {
        tape_node *node = tape_record(t, RP_OP_LINEAR, y, in, 3);
        RP_PROPAGATE_NULL(node);
        node->compute = compute;
    }
    return y;
}

static rp_tensor *activation(rp_tape *t, rp_tensor *x, kernels_act act, float slope)
{
    TAPE_F32_IN(t, x);
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    t->k->act_fwd(y->data, x->data, x->numel, act, slope);
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, RP_OP_ACT, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        node->a.act.act = act;
        node->a.act.slope = slope;
    }
    return y;
}

rp_tensor *rp_relu(rp_tape *t, rp_tensor *x)
{
    return activation(t, x, RP_ACT_RELU, 0.0f);
}

rp_tensor *rp_relu_to(rp_tape *t, rp_tensor *x, rp_dtype dtype)
{
    if (dtype == RP_F32) return rp_relu(t, x);
    if (dtype != RP_BF16) {
        RP_ERROR(RP_ERR_INVALID, "rp_relu_to: output type %s (%d) is neither f32 nor bf16",
                 rp_dtype_name(dtype), (int)dtype);
        return NULL;
    }
    TAPE_F32_IN(t, x);
    rp_tensor *y = tape_tensor_typed(t, x->ndim, x->shape, RP_BF16);
    RP_PROPAGATE_NULL(y);
    t->k->relu_fwd_bf16(y->data_bf16, x->data, x->numel);
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, RP_OP_ACT, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        node->a.act.act = RP_ACT_RELU; /* act_bwd takes its mask from x, y being bf16 */
        node->a.act.slope = 0.0f;
    }
    return y;
}

rp_tensor *rp_leaky_relu(rp_tape *t, rp_tensor *x, float slope)
{
    return activation(t, x, RP_ACT_LEAKY_RELU, slope);
}

rp_tensor *rp_tanh(rp_tape *t, rp_tensor *x)
{
    return activation(t, x, RP_ACT_TANH, 0.0f);
}

rp_tensor *rp_sigmoid(rp_tape *t, rp_tensor *x)
{
    return activation(t, x, RP_ACT_SIGMOID, 0.0f);
}

rp_tensor *rp_elu(rp_tape *t, rp_tensor *x, float alpha)
{
    if (!(alpha > 0) || !isfinite(alpha)) {
        RP_ERROR(RP_ERR_INVALID, "rp_elu: alpha %g must be a finite value > 0", (double)alpha);
        return NULL;
    }
    return activation(t, x, RP_ACT_ELU, alpha);
}

rp_tensor *rp_sqrt(rp_tape *t, rp_tensor *x)
{
    return activation(t, x, RP_ACT_SQRT, 0.0f);
}

rp_tensor *rp_reciprocal(rp_tape *t, rp_tensor *x)
{
    return activation(t, x, RP_ACT_RECIPROCAL, 0.0f);
}

rp_tensor *rp_clamp(rp_tape *t, rp_tensor *x, float lo, float hi)
{
    TAPE_F32_IN(t, x);
    if (!(lo <= hi)) {
        RP_ERROR(RP_ERR_INVALID, "rp_clamp: lo %g must be <= hi %g (and neither NaN)", (double)lo,
                 (double)hi);
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    t->k->clamp_fwd(y->data, x->data, x->numel, lo, hi);
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, RP_OP_CLAMP, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        node->a.clamp.lo = lo;
        node->a.clamp.hi = hi;
    }
    return y;
}

/* b broadcasts against a if b's shape, leading 1s dropped, is a suffix of a's. */
static bool broadcasts(const rp_tensor *a, const rp_tensor *b)
{
    int lead = 0;
    while (lead < b->ndim - 1 && b->shape[lead] == 1)
        lead++;
    int bn = b->ndim - lead;
    if (bn > a->ndim) return false;
    for (int i = 0; i < bn; i++)
        if (b->shape[b->ndim - 1 - i] != a->shape[a->ndim - 1 - i]) return false;
    return true;
}

/*
 * Per-axis broadcasting: both shapes padded to 4-D with leading 1s, each of
 * b's dimensions a's or 1. Fills a's padded shape and b's strides (0 along
 * its size-1 axes).
 */
static bool broadcasts_per_axis(const rp_tensor *a, const rp_tensor *b, int64_t *shape,
                                int64_t *bstride)
{
    if (b->ndim > a->ndim) return false;
    int64_t bs[RP_MAX_DIMS];
    for (int d = 0; d < RP_MAX_DIMS; d++) {
        int ia = d - (RP_MAX_DIMS - a->ndim), ib = d - (RP_MAX_DIMS - b->ndim);
        shape[d] = ia >= 0 ? a->shape[ia] : 1;
        bs[d] = ib >= 0 ? b->shape[ib] : 1;
        if (bs[d] != shape[d] && bs[d] != 1) return false;
    }
    int64_t stride = 1;
    for (int d = RP_MAX_DIMS - 1; d >= 0; d--) {
        bstride[d] = bs[d] == 1 ? 0 : stride;
        stride *= bs[d];
    }
    return true;
}

static rp_tensor *binary(rp_tape *t, rp_tensor *a, rp_tensor *b, kernels_binop op, const char *who)
{
    TAPE_F32_IN(t, a);
    TAPE_F32_IN(t, b);
    int64_t shape[RP_MAX_DIMS], bstride[RP_MAX_DIMS];
    if (!broadcasts(a, b)) {
        if (!broadcasts_per_axis(a, b, shape, bstride)) {
            char sa[64], sb[64];
            RP_ERROR(RP_ERR_SHAPE,
                     "%s: shape %s does not broadcast against %s (b's shape must be "
                     "a suffix of a's, or have a's dimensions with some of them 1)",
                     who, rp_shape_str(b, sb, sizeof sb), rp_shape_str(a, sa, sizeof sa));
            return NULL;
        }
        rp_tensor *y = tape_tensor(t, a->ndim, a->shape);
        RP_PROPAGATE_NULL(y);
        t->k->binary_bcast(y->data, a->data, b->data, shape, bstride, op);
        rp_tensor *in[] = {a, b};
        if (tape_needs_grad(t, in, 2)) {
            tape_node *node = tape_record(t, RP_OP_BINARY_BCAST, y, in, 2);
            RP_PROPAGATE_NULL(node);
            node->a.bcast.op = op;
            memcpy(node->a.bcast.shape, shape, sizeof shape);
            memcpy(node->a.bcast.bstride, bstride, sizeof bstride);
        }
        return y;
    }
    rp_tensor *y = tape_tensor(t, a->ndim, a->shape);
    RP_PROPAGATE_NULL(y);
    t->k->binary(y->data, a->data, b->data, a->numel, b->numel, op);
    rp_tensor *in[] = {a, b};
    if (tape_needs_grad(t, in, 2)) {
        tape_node *node = tape_record(t, RP_OP_BINARY, y, in, 2);
        RP_PROPAGATE_NULL(node);
        node->a.bin.op = op;
        node->a.bin.nb = b->numel;
    }
    return y;
}

rp_tensor *rp_add(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    return binary(t, a, b, RP_BIN_ADD, "rp_add");
}

rp_tensor *rp_sub(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    return binary(t, a, b, RP_BIN_SUB, "rp_sub");
}

rp_tensor *rp_mul(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    return binary(t, a, b, RP_BIN_MUL, "rp_mul");
}

rp_tensor *rp_div(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    return binary(t, a, b, RP_BIN_DIV, "rp_div");
}

rp_tensor *rp_scale(rp_tape *t, rp_tensor *x, float s)
{
    TAPE_F32_IN(t, x);
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    t->k->scale(y->data, x->data, s, x->numel, false);
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, RP_OP_SCALE, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        node->a.scale.s = s;
    }
    return y;
}

rp_tensor *rp_concat(rp_tape *t, rp_tensor *const *xs, int n)
{
    if (!xs || n < 1) {
        RP_ERROR(RP_ERR_INVALID, "rp_concat: need at least one tensor, got %d", n);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        RP_PROPAGATE_NULL(xs[i]);
    if (tape_use_many(t, xs, n, "rp_concat") != RP_OK) return NULL;
    for (int i = 0; i < n; i++)
        if (xs[i]->dtype != RP_F32) {
            /* Widen every bf16 member (the caller's array is const: a copy of it). */
            rp_tensor **wide = rp_arena_alloc(t->arena, (size_t)n * sizeof *wide);
            RP_PROPAGATE_NULL(wide);
            for (int k = 0; k < n; k++) {
                wide[k] = xs[k];
                TAPE_F32_IN(t, wide[k]);
            }
            xs = wide;
            break;
        }
    const rp_tensor *x0 = xs[0];
    int last = x0->ndim - 1, width = 0;
    if (x0->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "rp_concat: tensors must have at least one dimension");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        bool ok = xs[i]->ndim == x0->ndim;
        for (int d = 0; ok && d < last; d++)
            ok = xs[i]->shape[d] == x0->shape[d];
        if (!ok) {
            char s0[64], si[64];
            RP_ERROR(RP_ERR_SHAPE,
                     "rp_concat: tensor %d has shape %s, tensor 0 has %s; all but "
                     "the last dimension must match",
                     i, rp_shape_str(xs[i], si, sizeof si), rp_shape_str(x0, s0, sizeof s0));
            return NULL;
        }
        width += xs[i]->shape[last];
    }
    int shape[RP_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[last] = width;
    rp_tensor *y = tape_tensor(t, x0->ndim, shape);
    RP_PROPAGATE_NULL(y);
    int64_t rows = y->numel / width, off = 0;
    for (int i = 0; i < n; i++) {
        t->k->copy_cols(y->data, width, off, xs[i]->data, rows, xs[i]->shape[last]);
        off += xs[i]->shape[last];
    }
    if (tape_needs_grad(t, xs, n) && !tape_record(t, RP_OP_CONCAT, y, xs, n)) return NULL;
    return y;
}

rp_tensor *rp_reshape(rp_tape *t, rp_tensor *x, int ndim, const int *shape)
{
    RP_PROPAGATE_NULL(x);
    if (tape_use_view(t, x, "rp_reshape") != RP_OK) return NULL;
    if (ndim < 0 || ndim > RP_MAX_DIMS || rp_shape_numel(ndim, shape) != x->numel) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_reshape: cannot reshape %s (%lld elements) to %d dims with %lld "
                 "elements",
                 rp_shape_str(x, sx, sizeof sx), (long long)x->numel, ndim,
                 ndim >= 0 && ndim <= RP_MAX_DIMS ? (long long)rp_shape_numel(ndim, shape) : -1LL);
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            RP_ERROR(RP_ERR_SHAPE, "rp_reshape: dimension %d is %d", i, shape[i]);
            return NULL;
        }
    }
    rp_tensor *y = tape_view(t, x, ndim, shape);
    RP_PROPAGATE_NULL(y);
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, RP_OP_RESHAPE, y, &x, 1)) return NULL;
    return y;
}

rp_tensor *rp_flatten(rp_tape *t, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    if (x->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "rp_flatten: a scalar has no batch dimension");
        return NULL;
    }
    int shape[2] = {x->shape[0], (int)(x->numel / x->shape[0])};
    return rp_reshape(t, x, 2, shape);
}

static rp_tensor *reduce_all(rp_tape *t, rp_tensor *x, bool mean)
{
    TAPE_F32_IN(t, x);
    rp_tensor *y = tape_tensor(t, 0, NULL);
    RP_PROPAGATE_NULL(y);
    double s = t->k->sum(x->data, x->numel);
    tape_set_scalar(t, y, (float)(mean ? s / (double)x->numel : s));
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, mean ? RP_OP_MEAN : RP_OP_SUM, y, &x, 1))
        return NULL;
    return y;
}

rp_tensor *rp_sum(rp_tape *t, rp_tensor *x)
{
    return reduce_all(t, x, false);
}

rp_tensor *rp_mean(rp_tape *t, rp_tensor *x)
{
    return reduce_all(t, x, true);
}

rp_tensor *rp_embedding(rp_tape *t, rp_tensor *table, const int32_t *idx, int n)
{
    TAPE_F32_IN(t, table);
    char st[64];
    if (table->ndim != 2 || !idx || n < 1) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_embedding: need a [V,D] table, indices and n >= 1; got table %s, "
                 "n %d",
                 rp_shape_str(table, st, sizeof st), n);
        return NULL;
    }
    int v = table->shape[0], d = table->shape[1];
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= v) {
            RP_ERROR(RP_ERR_INVALID, "rp_embedding: index %d is %d, outside the table's %d rows", i,
                     (int)idx[i], v);
            return NULL;
        }
    }
    rp_tensor *y = tape_tensor(t, 2, (int[]){n, d});
    int32_t *stored = tape_upload(t, idx, (size_t)n * sizeof(int32_t)); /* the kernels' copy */
    if (!y || !stored) return NULL;
    t->k->embedding_fwd(y->data, table->data, stored, n, d);
    if (tape_needs_grad(t, &table, 1)) {
        tape_node *node = tape_record(t, RP_OP_EMBEDDING, y, &table, 1);
        RP_PROPAGATE_NULL(node);
        node->saved = stored;
        node->saved_bytes = (size_t)n * sizeof(int32_t);
        node->a.emb.n = n;
    }
    return y;
}

static rp_tensor *softmax_xent(rp_tape *t, rp_tensor *logits, const int32_t *labels,
                               rp_tensor *target, const char *who)
{
    TAPE_F32_IN(t, logits);
    if (target) TAPE_F32_IN(t, target);
    char sl[64], st[64];
    if (logits->ndim != 2) {
        RP_ERROR(RP_ERR_SHAPE, "%s: logits must be [N,C], got %s", who,
                 rp_shape_str(logits, sl, sizeof sl));
        return NULL;
    }
    int n = logits->shape[0], c = logits->shape[1];
    if (target && !rp_tensor_same_shape(logits, target)) {
        RP_ERROR(RP_ERR_SHAPE, "%s: target %s does not match logits %s", who,
                 rp_shape_str(target, st, sizeof st), rp_shape_str(logits, sl, sizeof sl));
        return NULL;
    }
    if (!target) {
        if (!labels) {
            RP_ERROR(RP_ERR_INVALID, "%s: labels is NULL", who);
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            if (labels[i] < 0 || labels[i] >= c) {
                RP_ERROR(RP_ERR_INVALID, "%s: label %d is %d, outside the %d classes", who, i,
                         (int)labels[i], c);
                return NULL;
            }
        }
    }
    rp_tensor *y = tape_tensor(t, 0, NULL);
    float *probs = rp_arena_alloc(t->store, (size_t)logits->numel * sizeof(float));
    int32_t *stored = target ? NULL : tape_upload(t, labels, (size_t)n * sizeof(int32_t));
    if (!y || !probs || (!target && !stored)) return NULL;
    tape_set_scalar(t, y,
                    (float)t->k->softmax_xent_fwd(probs, logits->data, stored,
                                                  target ? target->data : NULL, n, c));
    if (tape_needs_grad(t, &logits, 1)) {
        tape_node *node = tape_record(t, RP_OP_SOFTMAX_XENT, y, &logits, 1);
        RP_PROPAGATE_NULL(node);
        node->saved = probs;
        node->saved_bytes = (size_t)logits->numel * sizeof(float);
        if (target) {
            node->saved2 = target->data; /* lives in an arena or a parameter block until reset */
        } else {
            node->a.xent.hard = true;
            node->saved2 = stored;
        }
    }
    return y;
}

rp_tensor *rp_softmax_cross_entropy(rp_tape *t, rp_tensor *logits, const int32_t *labels)
{
    return softmax_xent(t, logits, labels, NULL, "rp_softmax_cross_entropy");
}

rp_tensor *rp_softmax_cross_entropy_soft(rp_tape *t, rp_tensor *logits, rp_tensor *target)
{
    TAPE_F32_IN(t, target);
    return softmax_xent(t, logits, NULL, target, "rp_softmax_cross_entropy_soft");
}

rp_tensor *rp_mse(rp_tape *t, rp_tensor *a, rp_tensor *b)
{
    TAPE_F32_IN(t, a);
    TAPE_F32_IN(t, b);
    if (!rp_tensor_same_shape(a, b)) {
        char sa[64], sb[64];
        RP_ERROR(RP_ERR_SHAPE, "rp_mse: shapes differ: %s and %s", rp_shape_str(a, sa, sizeof sa),
                 rp_shape_str(b, sb, sizeof sb));
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, 0, NULL);
    float *diff = rp_arena_alloc(t->store, (size_t)a->numel * sizeof(float));
    if (!y || !diff) return NULL;
    t->k->binary(diff, a->data, b->data, a->numel, a->numel, RP_BIN_SUB);
    t->k->mul(diff, diff, diff, a->numel, false);
    tape_set_scalar(t, y, (float)(t->k->sum(diff, a->numel) / (double)a->numel));
    rp_tensor *in[] = {a, b};
    if (tape_needs_grad(t, in, 2) && !tape_record(t, RP_OP_MSE, y, in, 2)) return NULL;
    return y;
}
