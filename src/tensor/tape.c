/*
 * tape.c - recording nodes and driving the backward pass.
 *
 * Memory: node and parameter arrays are persistent and grow to the largest
 * step seen; tensors, saved values and activation gradients come from the
 * arena. So a steady-state step allocates nothing.
 *
 * Gradient-ready: every recorded use of a parameter increments its
 * `pending` count. Backward decrements it after each node's rule has run;
 * when it reaches zero no later node can touch that gradient, and the
 * callback fires. Parameters still pending at the end (used only by nodes
 * past the loss) fire last, so each used parameter fires exactly once.
 */
#include <string.h>

#include "tape_internal.h"

rp_status rp_tape_create(rp_tape **tape, size_t arena_bytes)
{
    if (!tape) return RP_ERROR(RP_ERR_INVALID, "rp_tape_create: tape is NULL");
    rp_tape *t = rp_calloc(sizeof *t);
    if (!t) return rp_last_status();
    rp_status status = rp_arena_create(&t->arena, arena_bytes ? arena_bytes : (size_t)16 << 20);
    if (status != RP_OK) {
        rp_free(t);
        return status;
    }
    t->k = rp_kernels_active();
    t->recording = true;
    *tape = t;
    return RP_OK;
}

void rp_tape_destroy(rp_tape *t)
{
    if (!t) return;
    rp_tape_reset(t);
    rp_arena_destroy(t->arena);
    rp_free(t->nodes);
    rp_free(t->params);
    rp_free(t);
}

void rp_tape_reset(rp_tape *t)
{
    for (int i = 0; i < t->n_params; i++) t->params[i]->pending = 0;
    t->n_params = 0;
    t->n_nodes = 0;
    t->backward_done = false;
    rp_arena_reset(t->arena);
}

void rp_tape_set_recording(rp_tape *t, bool on)
{
    t->recording = on;
}

bool rp_tape_recording(const rp_tape *t)
{
    return t->recording;
}

rp_arena *rp_tape_arena(rp_tape *t)
{
    return t->arena;
}

int rp_tape_size(const rp_tape *t)
{
    return t->n_nodes;
}

void rp_tape_on_grad_ready(rp_tape *t, rp_grad_ready_fn fn, void *ctx)
{
    t->ready_fn = fn;
    t->ready_ctx = ctx;
}

bool rp_tape_needs_grad(const rp_tape *t, rp_tensor *const *in, int n)
{
    if (!t->recording) return false;
    for (int i = 0; i < n; i++)
        if (in[i] && (in[i]->flags & RP_TENSOR_REQUIRES_GRAD)) return true;
    return false;
}

/* Grows a persistent array to hold at least `need` elements (doubling). */
static bool grow(void **array, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int fresh = *cap ? *cap * 2 : 64;
    while (fresh < need) fresh *= 2;
    void *p = rp_alloc((size_t)fresh * elem);
    if (!p) return false;
    if (*array) memcpy(p, *array, (size_t)*cap * elem);
    rp_free(*array);
    *array = p;
    *cap = fresh;
    return true;
}

rp_node *rp_tape_record(rp_tape *t, rp_op op, rp_tensor *out, rp_tensor *const *in, int n)
{
    if (!grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof(rp_node))) return NULL;
    rp_node *node = &t->nodes[t->n_nodes];
    memset(node, 0, sizeof *node);
    node->op = op;
    node->out = out;
    node->n_in = n;
    rp_tensor **slots = node->in;
    if (n > RP_NODE_MAX_INPUTS) {
        node->many = rp_arena_alloc(t->arena, (size_t)n * sizeof(rp_tensor *));
        if (!node->many) return NULL;
        slots = node->many;
    }
    for (int i = 0; i < n; i++) {
        slots[i] = in[i];
        rp_tensor *x = in[i];
        if (!x || !(x->flags & RP_TENSOR_PARAM) || !(x->flags & RP_TENSOR_REQUIRES_GRAD)) continue;
        if (x->pending == 0) {
            if (!grow((void **)&t->params, &t->cap_params, t->n_params + 1, sizeof(rp_tensor *)))
                return NULL;
            t->params[t->n_params++] = x;
        }
        x->pending++;
    }
    out->flags |= RP_TENSOR_REQUIRES_GRAD;
    out->node = t->n_nodes++;
    return node;
}

static rp_tensor **node_inputs(rp_node *node)
{
    return node->many ? node->many : node->in;
}

rp_status rp_backward(rp_tape *t, rp_tensor *loss)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "rp_backward: tape is NULL");
    if (!loss) return RP_ERROR(RP_ERR_INVALID, "rp_backward: loss is NULL");
    if (loss->numel != 1) {
        char buf[64];
        return RP_ERROR(RP_ERR_SHAPE, "rp_backward: loss must have one element, got shape %s",
                        rp_shape_str(loss, buf, sizeof buf));
    }
    if (loss->node < 0 || loss->node >= t->n_nodes || t->nodes[loss->node].out != loss)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_backward: the loss was not recorded on this tape (no parameter "
                        "requires a gradient, recording is off, or the tape was reset)");
    if (t->backward_done)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_backward: backward already ran on this tape; reset it first");
    t->backward_done = true;

    loss->grad = rp_arena_alloc(t->arena, sizeof(float));
    if (!loss->grad) return rp_last_status();
    loss->grad[0] = 1.0f;

    for (int i = loss->node; i >= 0; i--) {
        rp_node *node = &t->nodes[i];
        if (node->out->grad) RP_CHECK(rp_node_backward(t, node));
        rp_tensor **in = node_inputs(node);
        for (int j = 0; j < node->n_in; j++) {
            rp_tensor *x = in[j];
            if (!x || !(x->flags & RP_TENSOR_PARAM) || x->pending <= 0) continue;
            if (--x->pending == 0 && t->ready_fn) t->ready_fn(x, t->ready_ctx);
        }
    }
    for (int i = 0; i < t->n_params; i++) {
        rp_tensor *x = t->params[i];
        if (x->pending > 0) {
            x->pending = 0;
            if (t->ready_fn) t->ready_fn(x, t->ready_ctx);
        }
    }
    /* Every count is zero now: the tape holds no reference to the parameters any more. */
    t->n_params = 0;
    return RP_OK;
}
