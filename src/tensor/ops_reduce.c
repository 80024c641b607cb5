/*
 * ops_reduce.c - forward ops that work along axes: sums and means over
 * chosen axes and per row, log-softmax and layer norm over the last axis.
 * Each validates its inputs, computes through the kernel table and records
 * a node for backward.c when a gradient is needed.
 */
#include <math.h>
#include <string.h>

#include "tape_internal.h"

/* Reduces x over the axes in `mask` (bits of x's own axes), keeping them as 1s or dropping them. */
static rp_tensor *reduce(rp_tape *t, rp_tensor *x, unsigned mask, bool keepdims, bool mean)
{
    int64_t shape[RP_MAX_DIMS], count = 1;
    unsigned mask4 = 0;
    int lead = RP_MAX_DIMS - x->ndim, out_shape[RP_MAX_DIMS], out_ndim = 0;
    for (int d = 0; d < RP_MAX_DIMS; d++)
        shape[d] = d < lead ? 1 : x->shape[d - lead];
    for (int i = 0; i < x->ndim; i++) {
        if (mask & (1u << i)) {
            mask4 |= 1u << (i + lead);
            count *= x->shape[i];
            if (keepdims) out_shape[out_ndim++] = 1;
        } else {
            out_shape[out_ndim++] = x->shape[i];
        }
    }
    rp_tensor *y = tape_tensor(t, out_ndim, out_shape);
    RP_PROPAGATE_NULL(y);
    float scale = mean ? (float)(1.0 / (double)count) : 1.0f;
    t->k->reduce_axes(y->data, x->data, shape, mask4, scale, false);
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, RP_OP_REDUCE_AXES, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        memcpy(node->a.red.shape, shape, sizeof shape);
        node->a.red.mask = mask4;
        node->a.red.scale = scale;
    }
    return y;
}

static rp_tensor *reduce_axes(rp_tape *t, rp_tensor *x, int n_axes, const int *axes, bool keepdims,
                              bool mean, const char *who)
{
    TAPE_F32_IN(t, x);
    if (n_axes < 1 || !axes) {
        RP_ERROR(RP_ERR_INVALID, "%s: need at least one axis, got %d", who, n_axes);
        return NULL;
    }
    unsigned mask = 0;
    for (int i = 0; i < n_axes; i++) {
        char sx[64];
        if (axes[i] < 0 || axes[i] >= x->ndim || (mask & (1u << axes[i]))) {
            RP_ERROR(RP_ERR_INVALID, "%s: axis %d (entry %d) is %s for input %s", who, axes[i], i,
                     axes[i] < 0 || axes[i] >= x->ndim ? "out of range" : "repeated",
                     rp_shape_str(x, sx, sizeof sx));
            return NULL;
        }
        mask |= 1u << axes[i];
    }
    return reduce(t, x, mask, keepdims, mean);
}

rp_tensor *rp_sum_axes(rp_tape *t, rp_tensor *x, int n_axes, const int *axes, bool keepdims)
{
    return reduce_axes(t, x, n_axes, axes, keepdims, false, "rp_sum_axes");
}

rp_tensor *rp_mean_axes(rp_tape *t, rp_tensor *x, int n_axes, const int *axes, bool keepdims)
{
    return reduce_axes(t, x, n_axes, axes, keepdims, true, "rp_mean_axes");
}

static rp_tensor *reduce_rows(rp_tape *t, rp_tensor *x, bool mean, const char *who)
{
    TAPE_F32_IN(t, x);
    if (x->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "%s: a scalar has no rows", who);
        return NULL;
    }
    unsigned mask = ((1u << x->ndim) - 1u) & ~1u; /* every axis but the first */
    return reduce(t, x, mask, false, mean);
}

rp_tensor *rp_sum_rows(rp_tape *t, rp_tensor *x)
{
    return reduce_rows(t, x, false, "rp_sum_rows");
}

rp_tensor *rp_mean_rows(rp_tape *t, rp_tensor *x)
{
    return reduce_rows(t, x, true, "rp_mean_rows");
}

rp_tensor *rp_log_softmax(rp_tape *t, rp_tensor *x)
{
    TAPE_F32_IN(t, x);
    if (x->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "rp_log_softmax: need at least one dimension, got a scalar");
        return NULL;
    }
    int c = x->shape[x->ndim - 1];
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    t->k->log_softmax_fwd(y->data, x->data, x->numel / c, c);
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, RP_OP_LOG_SOFTMAX, y, &x, 1)) return NULL;
    return y;
}

rp_tensor *rp_layer_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta, float eps)
{
    TAPE_F32_IN(t, x);
    TAPE_USE(t, gamma);
    TAPE_USE(t, beta);
    char sx[64], sg[64], sb[64];
    int d = x->ndim ? x->shape[x->ndim - 1] : 0;
    bool gok = !gamma || (gamma->ndim == 1 && gamma->shape[0] == d);
    bool bok = !beta || (beta->ndim == 1 && beta->shape[0] == d);
    if (x->ndim < 1 || !gok || !bok) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_layer_norm: input %s needs gamma and beta of shape [%d] (or "
                 "NULL), got %s and %s",
                 rp_shape_str(x, sx, sizeof sx), d, rp_shape_str(gamma, sg, sizeof sg),
                 rp_shape_str(beta, sb, sizeof sb));
        return NULL;
    }
    if (!(eps > 0) || !isfinite(eps)) {
        RP_ERROR(RP_ERR_INVALID, "rp_layer_norm: eps %g must be a finite value > 0", (double)eps);
        return NULL;
    }
    int64_t rows = x->numel / d;
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    float *stats = rp_arena_alloc(t->store, 2 * (size_t)rows * sizeof(float)); /* mean, rstd */
    if (!y || !stats) return NULL;
    t->k->layernorm_fwd(y->data, stats, stats + rows, x->data, gamma ? gamma->data : NULL,
                        beta ? beta->data : NULL, rows, d, eps);
    rp_tensor *in[] = {x, gamma, beta};
    if (tape_needs_grad(t, in, 3)) {
        tape_node *node = tape_record(t, RP_OP_LAYER_NORM, y, in, 3);
        RP_PROPAGATE_NULL(node);
        node->saved = stats;
        node->saved_bytes = 2 * (size_t)rows * sizeof(float);
        node->a.ln.eps = eps;
    }
    return y;
}
