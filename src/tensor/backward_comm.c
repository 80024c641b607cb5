/*
 * backward_comm.c - the backward rules of the differentiable collectives
 * (the seam split off backward.c). Each rule is itself a collective, so it
 * runs on every member even when this member's output got no gradient
 * (zeros are sent then), and it makes its comm call before looking at
 * whether its own input wants the result: the peers need the call either way.
 */
#include <string.h>

#include "tape_internal.h"

/* The output's gradient, or zeros if the loss did not reach it on this member. */
static const float *out_grad(rp_tape *t, rp_tensor *y)
{
    return y->grad ? y->grad : rp_arena_calloc(t->arena, (size_t)y->numel * sizeof(float));
}

rp_status tape_collective_bwd(rp_tape *t, rp_node *nd)
{
    rp_tensor *x = nd->in[0], *y = nd->out;
    rp_comm *c = nd->a.coll.comm;
    int n = rp_comm_size(c), rank = rp_comm_rank(c);
    bool fail = false;

    if (nd->op == RP_OP_REDUCE_FROM_GROUP) {
        /* Identity backward: no collective, and nothing to add without a gradient. */
        if (!y->grad) return RP_OK;
        float *dx = tape_grad_acc(t, x, &fail);
        if (fail) return tape_oom();
        if (dx) t->k->add_inplace(dx, y->grad, x->numel);
        return RP_OK;
    }

    const float *dy = out_grad(t, y);
    float *g = rp_arena_alloc(t->arena, (size_t)(y->numel > x->numel ? y->numel : x->numel) * sizeof(float));
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
        if (nd->a.coll.op == RP_MEAN) t->k->scale_inplace(g, 1.0f / (float)n, x->numel);
        break;
    default:
        return RP_ERROR(RP_ERR_UNSUPPORTED, "backward: collective op %d has no rule", (int)nd->op);
    }

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
