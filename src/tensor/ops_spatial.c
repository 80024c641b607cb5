/*
 * ops_spatial.c - forward ops on NHWC images: convolution, batch norm,
 * pooling, global average pooling and upsampling.
 */
#include <math.h>
#include <string.h>

#include "tape_internal.h"

rp_tensor *rp_conv2d(rp_tape *t, rp_tensor *x, rp_tensor *w, rp_tensor *b, rp_conv_params p)
{
    TAPE_PARAM_IN(t, x);
    TAPE_PARAM_IN(t, w);
    TAPE_USE(t, b);
    char sx[64], sw[64], sb[64];
    if (x->ndim != 4 || w->ndim != 4 || x->shape[3] != w->shape[3]) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_conv2d: input %s does not fit weight %s (need NHWC [N,H,W,C] "
                 "and OHWI [O,KH,KW,C] with equal C)",
                 rp_shape_str(x, sx, sizeof sx), rp_shape_str(w, sw, sizeof sw));
        return NULL;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        RP_ERROR(RP_ERR_SHAPE, "rp_conv2d: bias %s does not fit weight %s",
                 rp_shape_str(b, sb, sizeof sb), rp_shape_str(w, sw, sizeof sw));
        return NULL;
    }
    kernels_conv_desc d;
    if (kernels_conv_desc_init(&d, x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                               w->shape[1], w->shape[2], p.stride, p.pad) != RP_OK)
        return NULL;
    d.compute = tape_compute(t, RP_AUTOCAST_CONV);
    /* A bf16 input needs bf16 compute (the kernels multiply bf16 by bf16); else widen it. */
    if (x->dtype != RP_F32 && d.compute != RP_BF16) TAPE_F32_IN(t, x);
    d.x_type = x->dtype;
    d.y_type = d.compute == RP_BF16 ? t->precision.activations : RP_F32;
    rp_tensor *in[] = {x, w, b};
    bool record = tape_needs_grad(t, in, 3);
    /*
     * An f32 input to a bf16 convolution is narrowed to bf16 by both passes that read it: the
     * forward, and backward-weights. When the weights' gradient will be wanted, narrow it once
     * here and keep the bf16 copy for backward (half of x's bytes more, one pass over x less);
     * the products are the same, as each pass would round x the same way.
     */
    rp_tensor *xb = NULL;
    if (record && d.compute == RP_BF16 && x->dtype == RP_F32 &&
        ((w->flags & RP_TENSOR_REQUIRES_GRAD) || (b && (b->flags & RP_TENSOR_REQUIRES_GRAD)))) {
        xb = tape_tensor_typed(t, 4, x->shape, RP_BF16);
        RP_PROPAGATE_NULL(xb);
        t->k->cast_f32_bf16(xb->data_bf16, x->data, x->numel);
        d.x_type = RP_BF16;
    }
    rp_tensor *y = tape_tensor_typed(t, 4, (int[]){d.n, d.oh, d.ow, d.o}, d.y_type);
    RP_PROPAGATE_NULL(y);
    if (t->k->conv2d_fwd(y->storage, (xb ? xb : x)->storage, w->data, b ? b->data : NULL, &d) !=
        RP_OK)
        return NULL;
    if (record) {
        tape_node *node = tape_record(t, RP_OP_CONV2D, y, in, 3);
        RP_PROPAGATE_NULL(node);
        node->a.conv = d;
        node->saved2 = xb ? xb->storage : NULL; /* backward-weights' x, when narrowed here */
    }
    return y;
}

rp_bn_params rp_bn_params_default(void)
{
    rp_bn_params p = {.momentum = 0.1f, .eps = 1e-5f, .training = true};
    return p;
}

static bool is_channel_vector(const rp_tensor *v, int c)
{
    return v && v->ndim == 1 && v->shape[0] == c;
}

/* Batch norm, with `residual` (when not NULL) added before the optional ReLU. */
static rp_tensor *batch_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                             rp_tensor *running_mean, rp_tensor *running_var, rp_tensor *residual,
                             rp_bn_params p)
{
    TAPE_PARAM_IN(t, x);
    TAPE_PARAM_IN(t, gamma);
    TAPE_PARAM_IN(t, beta);
    TAPE_USE(t, running_mean);
    TAPE_USE(t, running_var);
    char sx[64], sg[64], sbeta[64];
    int c = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 2 || !is_channel_vector(gamma, c) || !is_channel_vector(beta, c)) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_batch_norm: input %s needs gamma and beta of shape [%d], got %s "
                 "and %s",
                 rp_shape_str(x, sx, sizeof sx), c, rp_shape_str(gamma, sg, sizeof sg),
                 rp_shape_str(beta, sbeta, sizeof sbeta));
        return NULL;
    }
    if ((running_mean && !is_channel_vector(running_mean, c)) ||
        (running_var && !is_channel_vector(running_var, c)) ||
        (!p.training && (!running_mean || !running_var))) {
        RP_ERROR(RP_ERR_SHAPE, "rp_batch_norm: running statistics must be [%d]%s", c,
                 p.training ? "" : " and are required in inference mode");
        return NULL;
    }
    if (!(p.eps > 0) || !(p.momentum >= 0 && p.momentum <= 1)) {
        RP_ERROR(RP_ERR_INVALID, "rp_batch_norm: eps %g must be > 0 and momentum %g in [0,1]",
                 (double)p.eps, (double)p.momentum);
        return NULL;
    }
    if (p.comm && p.reduce) {
        RP_ERROR(RP_ERR_INVALID, "rp_batch_norm: set either comm or reduce, not both");
        return NULL;
    }
    /* Activations in bf16: y in x's type, the residual converted to it if it differs. */
    bool bf16 = x->dtype == RP_BF16;
    if (residual && residual->dtype != x->dtype) {
        residual = rp_cast(t, residual, x->dtype);
        RP_PROPAGATE_NULL(residual);
    }
    int64_t m = x->numel / c;
    rp_tensor *y = tape_tensor_typed(t, x->ndim, x->shape, x->dtype);
    /* mean, invstd, and what rounding the mean to float left out of it (see backward) */
    float *stats = rp_arena_alloc(t->store, 3 * (size_t)c * sizeof(float));
    /* sums, sums of squares, and (with a comm) the element count, all-reduced in one call */
    double *sums = rp_arena_alloc(t->store, (2 * (size_t)c + 1) * sizeof(double));
    if (!y || !stats || !sums) return NULL;
    float *mean = stats, *invstd = stats + c, *mean_rest = stats + 2 * c;
    double count = (double)m;
    if (p.training) {
        if (bf16)
            t->k->bn_stats_bf16(t->k, sums, x->data_bf16, m, c);
        else
            t->k->bn_stats(sums, x->data, m, c);
        if (p.reduce || p.comm) { /* host code: on a host view of the sums */
            size_t bytes = (2 * (size_t)c + 1) * sizeof(double);
            double *hs = tape_host_in(t, sums, bytes);
            if (!hs) return NULL;
            if (p.reduce && p.reduce(hs, 2 * c, &count, p.reduce_ctx) != RP_OK) return NULL;
            if (p.comm) {
                hs[2 * c] = count;
                if (rp_comm_all_reduce(p.comm, hs, hs, 2 * c + 1, RP_F64, RP_SUM) != RP_OK)
                    return NULL;
                count = hs[2 * c];
            }
            tape_host_commit(t, sums, hs, bytes);
        }
        if (count < 2) {
            RP_ERROR(RP_ERR_SHAPE,
                     "rp_batch_norm: training needs at least 2 values per channel, "
                     "got %g (input %s)",
                     count, rp_shape_str(x, sx, sizeof sx));
            return NULL;
        }
        t->k->bn_train_stats(mean, invstd, mean_rest, running_mean ? running_mean->data : NULL,
                             running_var ? running_var->data : NULL, sums, count, p.eps, p.momentum,
                             c);
    } else {
        t->k->bn_eval_stats(mean, invstd, mean_rest, running_mean->data, running_var->data, p.eps,
                            c);
    }
    rp_tensor *in[] = {x, gamma, beta, residual};
    int n_in = residual ? 4 : 3;
    if (bf16)
        t->k->bn_norm_fwd_bf16(t->k, y->data_bf16, x->data_bf16, mean, invstd, gamma->data,
                               beta->data, residual ? residual->data_bf16 : NULL, p.relu, m, c);
    else
        t->k->bn_norm_fwd(y->data, x->data, mean, invstd, gamma->data, beta->data,
                          residual ? residual->data : NULL, p.relu, m, c);
    if (tape_needs_grad(t, in, n_in)) {
        /* Backward recomputes xhat from x, mean and invstd, and corrects with mean_rest. */
        tape_node *node = tape_record(t, RP_OP_BATCH_NORM, y, in, n_in);
        RP_PROPAGATE_NULL(node);
        node->saved = stats;
        node->saved_bytes = 3 * (size_t)c * sizeof(float);
        node->a.bn.relu = p.relu;
        node->a.bn.training = p.training;
        node->a.bn.count = count;
        node->a.bn.reduce = p.reduce;
        node->a.bn.ctx = p.reduce_ctx;
        node->a.bn.comm = p.comm;
        node->a.bn.eps = p.eps;
    }
    return y;
}

rp_tensor *rp_batch_norm(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                         rp_tensor *running_mean, rp_tensor *running_var, rp_bn_params p)
{
    return batch_norm(t, x, gamma, beta, running_mean, running_var, NULL, p);
}

rp_tensor *rp_batch_norm_add(rp_tape *t, rp_tensor *x, rp_tensor *gamma, rp_tensor *beta,
                             rp_tensor *running_mean, rp_tensor *running_var, rp_tensor *residual,
                             rp_bn_params p)
{
    RP_PROPAGATE_NULL(x);
    RP_PROPAGATE_NULL(residual);
    if (!rp_tensor_same_shape(x, residual)) {
        char sx[64], sr[64];
        RP_ERROR(RP_ERR_SHAPE, "rp_batch_norm_add: the residual %s must have the input's shape %s",
                 rp_shape_str(residual, sr, sizeof sr), rp_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    return batch_norm(t, x, gamma, beta, running_mean, running_var, residual, p);
}

static rp_tensor *pool(rp_tape *t, rp_tensor *x, rp_pool_params p, bool max)
{
    /* A maximum is exact in bf16: max pooling keeps a bf16 input's type, averaging widens it. */
    if (max)
        TAPE_PARAM_IN(t, x);
    else
        TAPE_F32_IN(t, x);
    const char *who = max ? "rp_max_pool2d" : "rp_avg_pool2d";
    if (x->ndim != 4) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE, "%s: input must be NHWC [N,H,W,C], got %s", who,
                 rp_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    kernels_pool_desc d;
    if (kernels_pool_desc_init(&d, x->shape[0], x->shape[1], x->shape[2], x->shape[3], p.kernel,
                               p.stride, p.pad) != RP_OK)
        return NULL;
    d.type = x->dtype;
    rp_tensor *y = tape_tensor_typed(t, 4, (int[]){d.n, d.oh, d.ow, d.c}, x->dtype);
    RP_PROPAGATE_NULL(y);
    int32_t *argmax = NULL;
    if (max) {
        argmax = rp_arena_alloc(t->store, (size_t)y->numel * sizeof(int32_t));
        if (!argmax || t->k->maxpool_fwd(y->storage, argmax, x->storage, &d) != RP_OK) return NULL;
    } else if (t->k->avgpool_fwd(y->data, x->data, &d) != RP_OK) {
        return NULL;
    }
    if (tape_needs_grad(t, &x, 1)) {
        tape_node *node = tape_record(t, max ? RP_OP_MAX_POOL : RP_OP_AVG_POOL, y, &x, 1);
        RP_PROPAGATE_NULL(node);
        node->a.pool = d;
        node->saved = argmax;
        node->saved_bytes = max ? (size_t)y->numel * sizeof(int32_t) : 0;
    }
    return y;
}

rp_tensor *rp_max_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p)
{
    return pool(t, x, p, true);
}

rp_tensor *rp_avg_pool2d(rp_tape *t, rp_tensor *x, rp_pool_params p)
{
    return pool(t, x, p, false);
}

rp_tensor *rp_global_avg_pool(rp_tape *t, rp_tensor *x)
{
    TAPE_F32_IN(t, x);
    if (x->ndim != 4) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE, "rp_global_avg_pool: input must be NHWC [N,H,W,C], got %s",
                 rp_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    int n = x->shape[0], hw = x->shape[1] * x->shape[2], c = x->shape[3];
    rp_tensor *y = tape_tensor(t, 2, (int[]){n, c});
    RP_PROPAGATE_NULL(y);
    t->k->gap_fwd(y->data, x->data, n, hw, c);
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, RP_OP_GLOBAL_AVG_POOL, y, &x, 1)) return NULL;
    return y;
}

rp_tensor *rp_upsample2x(rp_tape *t, rp_tensor *x)
{
    TAPE_PARAM_IN(t, x); /* a copy: any dtype as it is */
    if (x->ndim != 4) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE, "rp_upsample2x: input must be NHWC [N,H,W,C], got %s",
                 rp_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    int n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3];
    rp_tensor *y = tape_tensor_typed(t, 4, (int[]){n, 2 * h, 2 * w, c}, x->dtype);
    RP_PROPAGATE_NULL(y);
    t->k->upsample2x_fwd(y->storage, x->storage, x->dtype, n, h, w, c);
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, RP_OP_UPSAMPLE2X, y, &x, 1)) return NULL;
    return y;
}
