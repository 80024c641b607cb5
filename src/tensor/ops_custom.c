/*
 * ops_custom.c - rp_custom: an op whose forward and backward a caller
 * supplies (tensor.h), recorded like any other.
 */
#include "tape_internal.h"

rp_tensor *rp_custom(rp_tape *t, const rp_custom_op *op, void *ctx, rp_tensor *const *in, int n,
                     int ndim, const int *shape)
{
    if (!t || !op || !op->forward || !op->backward || n < 0 || (n > 0 && !in)) {
        RP_ERROR(RP_ERR_INVALID,
                 "rp_custom: need a tape, an op with forward and backward, and "
                 "n >= 0 inputs (got n %d)",
                 n);
        return NULL;
    }
    const char *name = op->name ? op->name : "(unnamed)";
    for (int i = 0; i < n; i++)
        RP_PROPAGATE_NULL(in[i]);
    if (tape_use_many(t, in, n, "rp_custom") != RP_OK) return NULL;
    for (int i = 0; i < n; i++)
        if (in[i]->dtype != RP_F32) {
            /* A custom op reads f32: widen the bf16 inputs (a copy of the caller's array). */
            rp_tensor **wide = rp_arena_alloc(t->arena, (size_t)n * sizeof *wide);
            RP_PROPAGATE_NULL(wide);
            for (int k = 0; k < n; k++) {
                wide[k] = in[k];
                TAPE_F32_IN(t, wide[k]);
            }
            in = wide;
            break;
        }
    if (ndim < 0 || ndim > RP_MAX_DIMS || (ndim > 0 && !shape) || rp_shape_numel(ndim, shape) < 1) {
        RP_ERROR(RP_ERR_SHAPE, "rp_custom: op \"%s\": the output shape (%d dims) is invalid", name,
                 ndim);
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, ndim, shape);
    RP_PROPAGATE_NULL(y);
    /* The callbacks are host code: they get host shadows of the tensors (the tensors themselves
       when storage is host memory). */
    rp_tensor *const *hin = in;
    if (!t->k->host_storage && n > 0) {
        rp_tensor **shadows = rp_arena_alloc(t->arena, (size_t)n * sizeof *shadows);
        RP_PROPAGATE_NULL(shadows);
        for (int i = 0; i < n; i++) {
            shadows[i] = tape_host_tensor(t, in[i], true);
            RP_PROPAGATE_NULL(shadows[i]);
        }
        hin = shadows;
    }
    rp_tensor *hy = tape_host_tensor(t, y, false);
    RP_PROPAGATE_NULL(hy);
    rp_status st = op->forward(ctx, hy, hin, n);
    if (st != RP_OK) {
        tape_custom_error(st, op, "forward");
        return NULL;
    }
    tape_host_tensor_commit(t, y, hy);
    if (tape_needs_grad(t, in, n)) {
        tape_node *node = tape_record(t, RP_OP_CUSTOM, y, in, n);
        RP_PROPAGATE_NULL(node);
        node->a.custom.op = op;
        node->a.custom.ctx = ctx;
    }
    return y;
}
