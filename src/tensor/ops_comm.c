/*
 * ops_comm.c - differentiable collectives: tape ops whose forward is a comm
 * call and whose backward (in backward.c) is the adjoint collective. See
 * tensor.h for the rules and the convention for the job's loss.
 */
#include <string.h>

#include "tape_internal.h"

static bool check_comm(rp_tape *t, rp_comm *c, const char *who)
{
    if (!t || !c) {
        RP_ERROR(RP_ERR_INVALID, "%s: %s is NULL", who, t ? "the communicator" : "the tape");
        return false;
    }
    return true;
}

/* Records node `op` for y = f(x) when x needs a gradient; false on OOM. */
static bool record(rp_tape *t, tape_op op, rp_tensor *y, rp_tensor *x, rp_comm *c, rp_reduce_op rop,
                   int root)
{
    if (!tape_needs_grad(t, &x, 1)) return true;
    tape_node *node = tape_record(t, op, y, &x, 1);
    if (!node) return false;
    node->a.coll.comm = c;
    node->a.coll.op = rop;
    node->a.coll.root = root;
    node->a.coll.wire = t->grad_wire;
    return true;
}

rp_tensor *rp_tensor_all_reduce(rp_tape *t, rp_comm *c, rp_tensor *x, rp_reduce_op op)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, "rp_tensor_all_reduce")) return NULL;
    if (op < RP_SUM || op > RP_FIRST) {
        RP_ERROR(RP_ERR_INVALID, "rp_tensor_all_reduce: unknown reduction %d", (int)op);
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    size_t bytes = (size_t)x->numel * sizeof(float);
    const float *hx = tape_host_in(t, x->data, bytes);
    float *hy = tape_host_out(t, y->data, bytes);
    if (!hx || !hy || rp_comm_all_reduce(c, hx, hy, x->numel, RP_F32, op) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, bytes);
    return record(t, RP_OP_ALL_REDUCE, y, x, c, op, 0) ? y : NULL;
}

rp_tensor *rp_tensor_all_gather(rp_tape *t, rp_comm *c, rp_tensor *x)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, "rp_tensor_all_gather")) return NULL;
    if (x->ndim >= RP_MAX_DIMS) {
        char sx[64];
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_tensor_all_gather: input %s has %d dims; the gathered result "
                 "adds one, and at most %d are allowed",
                 rp_shape_str(x, sx, sizeof sx), x->ndim, RP_MAX_DIMS);
        return NULL;
    }
    int shape[RP_MAX_DIMS] = {rp_comm_size(c)};
    for (int i = 0; i < x->ndim; i++)
        shape[i + 1] = x->shape[i];
    rp_tensor *y = tape_tensor(t, x->ndim + 1, shape);
    RP_PROPAGATE_NULL(y);
    const float *hx = tape_host_in(t, x->data, (size_t)x->numel * sizeof(float));
    float *hy = tape_host_out(t, y->data, (size_t)y->numel * sizeof(float));
    if (!hx || !hy || rp_comm_all_gather(c, hx, hy, x->numel, RP_F32) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, (size_t)y->numel * sizeof(float));
    return record(t, RP_OP_ALL_GATHER, y, x, c, RP_SUM, 0) ? y : NULL;
}

rp_tensor *rp_tensor_reduce_scatter(rp_tape *t, rp_comm *c, rp_tensor *x, rp_reduce_op op)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, "rp_tensor_reduce_scatter")) return NULL;
    if (op != RP_SUM && op != RP_MEAN) {
        RP_ERROR(RP_ERR_INVALID,
                 "rp_tensor_reduce_scatter: reduction %s has no gradient here; "
                 "use sum or mean",
                 rp_reduce_op_name(op));
        return NULL;
    }
    int n = rp_comm_size(c);
    char sx[64];
    if (x->ndim < 1 || x->shape[0] % n != 0) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_tensor_reduce_scatter: input %s: the leading dimension must "
                 "be divisible by the %d members",
                 rp_shape_str(x, sx, sizeof sx), n);
        return NULL;
    }
    int shape[RP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[0] /= n;
    rp_tensor *y = tape_tensor(t, x->ndim, shape);
    RP_PROPAGATE_NULL(y);
    const float *hx = tape_host_in(t, x->data, (size_t)x->numel * sizeof(float));
    float *hy = tape_host_out(t, y->data, (size_t)y->numel * sizeof(float));
    if (!hx || !hy || rp_comm_reduce_scatter(c, hx, hy, y->numel, RP_F32, op) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, (size_t)y->numel * sizeof(float));
    return record(t, RP_OP_REDUCE_SCATTER, y, x, c, op, 0) ? y : NULL;
}

rp_tensor *rp_tensor_broadcast(rp_tape *t, rp_comm *c, rp_tensor *x, int root)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, "rp_tensor_broadcast")) return NULL;
    if (root < 0 || root >= rp_comm_size(c)) {
        RP_ERROR(RP_ERR_INVALID, "rp_tensor_broadcast: root %d is outside the %d members", root,
                 rp_comm_size(c));
        return NULL;
    }
    rp_tensor *y = tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    size_t bytes = (size_t)x->numel * sizeof(float);
    float *hy = tape_host_in(t, x->data, bytes); /* x's own values when storage is host memory */
    if (hy == x->data) {
        t->k->mem_copy(y->data, x->data, bytes);
        hy = y->data;
    }
    if (!hy || rp_comm_broadcast(c, hy, y->numel, RP_F32, root) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, bytes);
    return record(t, RP_OP_BROADCAST, y, x, c, RP_SUM, root) ? y : NULL;
}

rp_tensor *rp_copy_to_group(rp_tape *t, rp_comm *c, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    if (tape_use_view(t, x, "rp_copy_to_group") != RP_OK) return NULL;
    if (!check_comm(t, c, "rp_copy_to_group")) return NULL;
    rp_tensor *y = tape_view(t, x, x->ndim, x->shape); /* the identity: x's values, not a copy */
    RP_PROPAGATE_NULL(y);
    return record(t, RP_OP_COPY_TO_GROUP, y, x, c, RP_SUM, 0) ? y : NULL;
}

static rp_tensor *reduce_from_group(rp_tape *t, rp_comm *c, rp_tensor *x, bool inplace,
                                    const char *who)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, who)) return NULL;
    rp_tensor *y = inplace ? tape_view(t, x, x->ndim, x->shape) : tape_tensor(t, x->ndim, x->shape);
    RP_PROPAGATE_NULL(y);
    size_t bytes = (size_t)x->numel * sizeof(float);
    const float *hx = tape_host_in(t, x->data, bytes);
    float *hy = tape_host_out(t, y->data, bytes);
    if (!hx || !hy || rp_comm_all_reduce(c, hx, hy, x->numel, RP_F32, RP_SUM) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, bytes);
    /* The backward is the identity on dy: it reads neither x's values nor y's. */
    return record(t, RP_OP_REDUCE_FROM_GROUP, y, x, c, RP_SUM, 0) ? y : NULL;
}

rp_tensor *rp_reduce_from_group(rp_tape *t, rp_comm *c, rp_tensor *x)
{
    return reduce_from_group(t, c, x, false, "rp_reduce_from_group");
}

rp_tensor *rp_reduce_from_group_inplace(rp_tape *t, rp_comm *c, rp_tensor *x)
{
    return reduce_from_group(t, c, x, true, "rp_reduce_from_group_inplace");
}

rp_tensor *rp_tensor_send(rp_tape *t, rp_comm *c, rp_tensor *x, int peer, int tag)
{
    TAPE_F32_IN(t, x);
    if (!check_comm(t, c, "rp_tensor_send")) return NULL;
    rp_tensor *token = tape_tensor(t, 0, NULL);
    RP_PROPAGATE_NULL(token);
    tape_set_scalar(t, token, 0.0f);
    const float *hx = tape_host_in(t, x->data, (size_t)x->numel * sizeof(float));
    if (!hx || rp_comm_send(c, hx, x->numel, RP_F32, peer, tag) != RP_OK) return NULL;
    /* Recorded whenever the tape records, as the matching receive is: the peer's backward sends. */
    if (!t->recording) return token;
    tape_node *node = tape_record(t, RP_OP_SEND, token, &x, 1);
    RP_PROPAGATE_NULL(node);
    node->a.coll.comm = c;
    node->a.coll.peer = peer;
    node->a.coll.tag = tag;
    return token;
}

rp_tensor *rp_tensor_recv(rp_tape *t, rp_comm *c, int ndim, const int *shape, int peer, int tag)
{
    if (!check_comm(t, c, "rp_tensor_recv")) return NULL;
    rp_tensor *y = rp_tensor_new(t, ndim, shape);
    RP_PROPAGATE_NULL(y);
    float *hy = tape_host_out(t, y->data, (size_t)y->numel * sizeof(float));
    if (!hy || rp_comm_recv(c, hy, y->numel, RP_F32, peer, tag) != RP_OK) return NULL;
    tape_host_commit(t, y->data, hy, (size_t)y->numel * sizeof(float));
    if (!t->recording) return y;
    tape_node *node = tape_record(t, RP_OP_RECV, y, NULL, 0);
    RP_PROPAGATE_NULL(node);
    node->a.coll.comm = c;
    node->a.coll.peer = peer;
    node->a.coll.tag = tag;
    return y;
}
