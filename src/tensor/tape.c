/*
 * tape.c - recording nodes and driving the backward pass.
 *
 * Memory: node and parameter arrays are persistent and grow to the largest
 * step seen; tensors, saved values and activation gradients come from the
 * arena. So a steady-state step allocates nothing.
 *
 * Liveness: backward walks the nodes in reverse, so once node i's rule has
 * run, nothing reads its output's gradient again (every consumer of the
 * output came later and has run) and nothing reads what node i saved. Those
 * go back to the arena there and then, with the rule's scratch, and the
 * gradients of earlier nodes reuse the memory: the backward pass's footprint
 * is the few gradients alive at once, not the sum of them all. Only leaves
 * (inputs, parameters, detached tensors) keep their gradients, as in
 * PyTorch; an op's output has grad NULL after backward. Forward values are
 * kept until the reset: the caller may read any of them (logits for the
 * accuracy, say) after backward.
 *
 * Gradient-ready: every recorded use of a parameter increments its
 * `pending` count. Backward decrements it after each node's rule has run;
 * when it reaches zero no later node can touch that gradient, and the
 * callback fires. Parameters still pending at the end (used only by nodes
 * past the loss) fire last, so each used parameter fires exactly once.
 * Listeners form a list, called in the order they were added. A parameter
 * that stopped requiring a gradient (frozen) between the forward and the
 * backward fires nothing.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/trace.h"
#include "tape_internal.h"

rp_status rp_tape_create(rp_tape **tape, size_t arena_bytes)
{
    if (!tape) return RP_ERROR(RP_ERR_INVALID, "rp_tape_create: tape is NULL");
    rp_tape *t = rp_calloc(sizeof *t);
    if (!t) return rp_last_status();
    t->k = kernels_active();
    t->mem = (rp_arena_memory){t->k->mem_alloc, t->k->mem_free, t->k->mem_fill};
    rp_status status = rp_arena_create(&t->arena, (size_t)1 << 20);
    if (status == RP_OK)
        status =
            rp_arena_create_on(&t->store, arena_bytes ? arena_bytes : (size_t)16 << 20, &t->mem);
    if (status != RP_OK) {
        rp_arena_destroy(t->arena);
        rp_free(t);
        return status;
    }
    t->recording = true;
    t->precision =
        (rp_precision_policy){.compute = RP_F32, .ops = RP_AUTOCAST_DEFAULT, .activations = RP_F32};
    t->grad_wire = RP_F32;
    t->bf16_grads = true;
    *tape = t;
    return RP_OK;
}

void rp_tape_destroy(rp_tape *t)
{
    if (!t) return;
    rp_tape_reset(t);
    rp_arena_destroy(t->store);
    rp_arena_destroy(t->arena);
    rp_free(t->nodes);
    rp_free(t->params);
    rp_free(t->ready);
    rp_free(t->scratch);
    rp_free(t);
}

void rp_tape_reset(rp_tape *t)
{
    for (int i = 0; i < t->n_params; i++)
        t->params[i]->pending = 0;
    t->n_params = 0;
    t->n_nodes = 0;
    t->backward_done = false;
    rp_arena_reset(t->store);
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

void tape_set_bf16_grads(rp_tape *t, bool on)
{
    if (t) t->bf16_grads = on;
}

int tape_bf16_grads_made(const rp_tape *t)
{
    return t ? t->bf16_grads_made : 0;
}

rp_arena *rp_tape_arena(rp_tape *t)
{
    return t->arena;
}

rp_arena *rp_tape_storage(rp_tape *t)
{
    return t->store;
}

int rp_tape_size(const rp_tape *t)
{
    return t->n_nodes;
}

/* Grows a persistent array to hold at least `need` elements (doubling). */
static bool grow(void **array, int *cap, int need, size_t elem);

void rp_tape_on_grad_ready(rp_tape *t, rp_grad_ready_fn fn, void *ctx)
{
    t->n_ready = 0;
    /* The void call has no status to return: an allocation failure must not pass unseen. */
    if (fn && rp_tape_add_grad_ready(t, fn, ctx) != RP_OK)
        rp_warn("rp_tape_on_grad_ready: %s", rp_last_error());
}

rp_status rp_tape_add_grad_ready(rp_tape *t, rp_grad_ready_fn fn, void *ctx)
{
    if (!t || !fn)
        return RP_ERROR(RP_ERR_INVALID, "rp_tape_add_grad_ready: tape and fn must not be NULL");
    for (int i = 0; i < t->n_ready; i++)
        if (t->ready[i].fn == fn && t->ready[i].ctx == ctx)
            return RP_ERROR(RP_ERR_INVALID,
                            "rp_tape_add_grad_ready: this (fn, ctx %p) pair is "
                            "already listening",
                            ctx);
    if (!grow((void **)&t->ready, &t->cap_ready, t->n_ready + 1, sizeof *t->ready))
        return rp_last_status();
    t->ready[t->n_ready++] = (struct tape_ready_entry){fn, ctx};
    return RP_OK;
}

void rp_tape_remove_grad_ready(rp_tape *t, rp_grad_ready_fn fn, void *ctx)
{
    if (!t) return;
    for (int i = 0; i < t->n_ready; i++) {
        if (t->ready[i].fn != fn || t->ready[i].ctx != ctx) continue;
        memmove(&t->ready[i], &t->ready[i + 1], (size_t)(t->n_ready - i - 1) * sizeof *t->ready);
        t->n_ready--;
        return;
    }
}

_Thread_local tape_use_fn tape_thread_use;
static _Thread_local void *thread_use_ctx;

void tape_set_thread_use(tape_use_fn fn, void *ctx)
{
    tape_thread_use = fn;
    thread_use_ctx = fn ? ctx : NULL;
}

static _Thread_local tape_grad_fn thread_grad;
static _Thread_local void *thread_grad_ctx;

void tape_set_thread_grad(tape_grad_fn fn, void *ctx)
{
    thread_grad = fn;
    thread_grad_ctx = fn ? ctx : NULL;
}

rp_status tape_use(rp_tape *t, rp_tensor *param, int node)
{
    return tape_thread_use(t, param, node, thread_use_ctx);
}

rp_status tape_use_many(rp_tape *t, rp_tensor *const *in, int n, const char *who)
{
    if (!tape_thread_use) return RP_OK;
    int params = 0;
    for (int i = 0; i < n; i++)
        if (in[i] && (in[i]->flags & RP_TENSOR_PARAM) && in[i]->grad && ++params > TAPE_USE_HELD)
            return RP_ERROR(RP_ERR_UNSUPPORTED,
                            "%s: more than %d trainable parameters (\"%s\" the next) as inputs of "
                            "one op, with the parameters' values sharded (ZeRO-3), which holds "
                            "the values of %d at once; combine fewer per op",
                            who, TAPE_USE_HELD, in[i]->name, TAPE_USE_HELD);
    for (int i = 0; i < n; i++)
        if (in[i] && (in[i]->flags & RP_TENSOR_PARAM)) RP_CHECK(tape_use(t, in[i], -1));
    return RP_OK;
}

rp_status tape_use_view(const rp_tape *t, const rp_tensor *x, const char *who)
{
    (void)t;
    if (!tape_thread_use || !(x->flags & RP_TENSOR_PARAM)) return RP_OK;
    return RP_ERROR(RP_ERR_UNSUPPORTED,
                    "%s: a view of parameter \"%s\", whose values are sharded (ZeRO-3) and "
                    "gathered only for the ops that take the parameter itself; pass the parameter "
                    "to the op (or copy it with an op first)",
                    who, x->name);
}

/* Before a node's rule reads them: its parameter inputs' values present, and where their
   gradients go (tape_residency.h). */
static rp_status use_inputs(rp_tape *t, int i, rp_tensor **in)
{
    if (!tape_thread_use && !thread_grad) return RP_OK;
    for (int j = 0; j < t->nodes[i].n_in; j++) {
        rp_tensor *x = in[j];
        if (!x || !(x->flags & RP_TENSOR_PARAM)) continue;
        if (tape_thread_use) RP_CHECK(tape_use(t, x, i));
        if (thread_grad && tape_wants_grad(x)) thread_grad(x, thread_grad_ctx);
    }
    return RP_OK;
}

static void fire_ready(rp_tape *t, rp_tensor *x)
{
    if (!(x->flags & RP_TENSOR_REQUIRES_GRAD)) return; /* frozen since its use: no gradient */
    for (int i = 0; i < t->n_ready; i++)
        t->ready[i].fn(x, t->ready[i].ctx);
}

void rp_tensor_set_requires_grad(rp_tensor *x, bool on)
{
    /* An op's output keeps its node's say; a buffer has no gradient storage to write. */
    if (!x || x->node >= 0 || ((x->flags & RP_TENSOR_PARAM) && !x->grad)) return;
    if (on)
        x->flags |= RP_TENSOR_REQUIRES_GRAD;
    else
        x->flags &= ~RP_TENSOR_REQUIRES_GRAD;
}

rp_tensor *rp_detach(rp_tape *t, rp_tensor *x)
{
    RP_PROPAGATE_NULL(x);
    if (!t) {
        RP_ERROR(RP_ERR_INVALID, "rp_detach: tape is NULL");
        return NULL;
    }
    if (tape_use_view(t, x, "rp_detach") != RP_OK) return NULL;
    return tape_view(t, x, x->ndim, x->shape); /* a leaf with no node: the gradient path is cut */
}

rp_tensor *tape_view(rp_tape *t, rp_tensor *x, int ndim, const int *shape)
{
    rp_tensor *y = rp_arena_calloc(t->arena, sizeof *y);
    RP_PROPAGATE_NULL(y);
    y->ndim = ndim;
    for (int i = 0; i < RP_MAX_DIMS; i++)
        y->shape[i] = i < ndim ? shape[i] : 1;
    y->numel = x->numel;
    y->dtype = x->dtype;
    y->storage = x->storage;
    y->node = -1;
    y->index = -1;
    return y;
}

bool tape_needs_grad(const rp_tape *t, rp_tensor *const *in, int n)
{
    if (!t->recording) return false;
    for (int i = 0; i < n; i++)
        if (in[i] && (in[i]->flags & RP_TENSOR_REQUIRES_GRAD)) return true;
    return false;
}

static bool grow(void **array, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int fresh = *cap ? *cap * 2 : 64;
    while (fresh < need)
        fresh *= 2;
    void *p = rp_alloc((size_t)fresh * elem);
    if (!p) return false;
    if (*array) memcpy(p, *array, (size_t)*cap * elem);
    rp_free(*array);
    *array = p;
    *cap = fresh;
    return true;
}

tape_node *tape_record(rp_tape *t, tape_op op, rp_tensor *out, rp_tensor *const *in, int n)
{
    if (!grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof(tape_node))) return NULL;
    tape_node *node = &t->nodes[t->n_nodes];
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
        if (x && !(x->flags & RP_TENSOR_PARAM) && x->node >= 0) {
            x->pending++; /* an op output: how many recorded nodes read it */
            continue;
        }
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

static rp_tensor **node_inputs(tape_node *node)
{
    return node->many ? node->many : node->in;
}

rp_status rp_tape_drop(rp_tape *t, rp_tensor *x)
{
    if (!t || !x) return RP_ERROR(RP_ERR_INVALID, "rp_tape_drop: tape and tensor must not be NULL");
    if (x->node < 0 || x->node >= t->n_nodes || t->nodes[x->node].out != x ||
        t->nodes[x->node].op != RP_OP_BATCH_NORM)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tape_drop: only a batch norm's output recorded on this tape can be "
                        "recomputed (this tensor was made by another op, or not recorded)");
    if (t->nodes[x->node].n_in > 3)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tape_drop: rp_batch_norm_add's output cannot be recomputed (its "
                        "residual may be gone by then); drop plain batch norms only");
    if (x->flags & RP_TENSOR_DROPPED)
        return RP_ERROR(RP_ERR_INVALID, "rp_tape_drop: the tensor was already dropped");
    /* The recorded views of x so far (rp_copy_to_group's, rp_reshape's: outputs of later nodes
       that share its storage) lose their values with it, and get them back when a rule reads
       them (recompute_before). */
    for (int k = x->node + 1; k < t->n_nodes; k++) {
        rp_tensor *v = t->nodes[k].out;
        if (v != x && v->storage == x->storage) {
            v->data = NULL;
            v->flags |= TAPE_VIEW_DROPPED;
        }
    }
    rp_arena_release(t->store, x->storage, tape_bytes(x));
    x->storage = NULL;
    x->flags |= RP_TENSOR_DROPPED;
    return RP_OK;
}

/* The values of v, a view of a dropped tensor: its base's, recomputed if they are gone. */
static rp_status recompute_view(rp_tape *t, rp_tensor *v)
{
    rp_tensor *base = v;
    while ((base->flags & TAPE_VIEW_DROPPED) && base->node >= 0)
        base = node_inputs(&t->nodes[base->node])[0];
    if (!(base->flags & RP_TENSOR_DROPPED))
        return RP_ERROR(RP_ERR_INVALID, "a view lost its values, but not to rp_tape_drop");
    if (!base->data) RP_CHECK(tape_recompute(t, base));
    v->data = base->data; /* a view starts where its base does */
    return RP_OK;
}

/*
 * Before node's rule: the values it reads that rp_tape_drop released, recomputed. A view's become
 * stale again once its base's producer releases them, after every reader of the view has run.
 */
static rp_status recompute_before(rp_tape *t, tape_node *node)
{
    rp_tensor **in = node_inputs(node);
    for (int j = 0; j < node->n_in; j++) {
        if (in[j] && (in[j]->flags & RP_TENSOR_DROPPED) && !in[j]->data)
            RP_CHECK(tape_recompute(t, in[j]));
        if (in[j] && (in[j]->flags & TAPE_VIEW_DROPPED) && !in[j]->data)
            RP_CHECK(recompute_view(t, in[j]));
    }
    rp_tensor *y = node->out;
    if ((y->flags & RP_TENSOR_DROPPED) && !y->data) RP_CHECK(tape_recompute(t, y));
    return RP_OK;
}

/* After node's rule: its scratch (newest first, so the arena's top comes down), its output's
 * gradient and what it saved are dead. */
static void release_after(rp_tape *t, tape_node *node)
{
    while (t->n_scratch > 0) {
        struct tape_scratch_entry *e = &t->scratch[--t->n_scratch];
        rp_arena_release(t->store, e->p, e->bytes);
    }
    rp_tensor *y = node->out;
    if (y->grad && !(y->flags & RP_TENSOR_PARAM)) {
        rp_arena_release(t->store, y->grad, tape_grad_bytes(y));
        y->grad = NULL;
        y->flags &= ~TAPE_GRAD_BF16;
    }
    if ((y->flags & RP_TENSOR_DROPPED) && y->storage) {
        /* Recomputed for this rule and the ones after it: the producer's was the last. */
        rp_arena_release(t->store, y->storage, tape_bytes(y));
        y->storage = NULL;
    }
    if (node->saved_bytes) {
        rp_arena_release(t->store, node->saved, node->saved_bytes);
        node->saved = NULL;
        node->saved_bytes = 0;
    }
}

/* Seeds y's gradient with dy (or 1 for a scalar when dy is NULL) and runs every node up to y's. */
static rp_status backward_from(rp_tape *t, rp_tensor *y, const float *dy, const char *who)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "%s: tape is NULL", who);
    if (!y) return RP_ERROR(RP_ERR_INVALID, "%s: the output is NULL", who);
    if (y->node < 0 || y->node >= t->n_nodes || t->nodes[y->node].out != y)
        return RP_ERROR(RP_ERR_INVALID,
                        "%s: the output was not recorded on this tape (no parameter "
                        "requires a gradient, recording is off, or the tape was reset)",
                        who);
    if (t->backward_done)
        return RP_ERROR(RP_ERR_INVALID, "%s: backward already ran on this tape; reset it first",
                        who);
    t->backward_done = true;

    y->grad = rp_arena_alloc(t->store, (size_t)y->numel * sizeof(float));
    if (!y->grad) return rp_last_status();
    if (dy) {
        t->k->mem_upload(y->grad, dy, (size_t)y->numel * sizeof(float));
    } else {
        const float one = 1.0f;
        t->k->mem_upload(y->grad, &one, sizeof one);
    }

    for (int i = y->node; i >= 0; i--) {
        tape_node *node = &t->nodes[i];
        if (node->out->grad || tape_op_is_collective(node->op)) {
            rp_status st = use_inputs(t, i, node_inputs(node));
            if (st == RP_OK) st = recompute_before(t, node);
            if (st == RP_OK) st = tape_node_backward(t, node);
            if (st != RP_OK) {
                t->n_scratch = 0; /* the reset takes it all back */
                return st;
            }
        }
        release_after(t, node);
        rp_tensor **in = node_inputs(node);
        for (int j = 0; j < node->n_in; j++) {
            rp_tensor *x = in[j];
            if (!x || !(x->flags & RP_TENSOR_PARAM) || x->pending <= 0) continue;
            if (--x->pending == 0) fire_ready(t, x);
        }
    }
    for (int i = 0; i < t->n_params; i++) {
        rp_tensor *x = t->params[i];
        if (x->pending > 0) {
            x->pending = 0;
            fire_ready(t, x);
        }
    }
    /* Every count is zero now: the tape holds no reference to the parameters any more. */
    t->n_params = 0;
    return RP_OK;
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
    rp_trace_forward();
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_status status = backward_from(t, loss, NULL, "rp_backward");
    rp_trace_end("backward");
    rp_trace_mark();
    return status;
}

rp_status rp_backward_from(rp_tape *t, rp_tensor *y, const float *dy)
{
    if (!dy) return RP_ERROR(RP_ERR_INVALID, "rp_backward_from: dy is NULL");
    rp_trace_forward();
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_status status = backward_from(t, y, dy, "rp_backward_from");
    rp_trace_end("backward");
    rp_trace_mark();
    return status;
}
