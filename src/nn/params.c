/*
 * params.c - the named parameter list: one block of values, one of
 * gradients, stable names, seeded initialisers.
 *
 * Both blocks are the kernel table's storage (mem_alloc): the initialisers
 * fill a host buffer that is uploaded once, and zeroing is the table's fill.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/params_internal.h"
#include "replicator/nn.h"

typedef struct param_entry {
    rp_tensor *t;
    rp_init init;
    bool trainable;
    /* A shard (rp_params_add_shard): the dense tensor's size along `shard_axis`, and this
     * member's place; shard_size 0 for a whole tensor. */
    int shard_axis, shard_dense, shard_rank, shard_size;
    uint32_t frozen_flags; /* RP_TENSOR_REQUIRES_GRAD as it was when the set was frozen */
} param_entry;

struct rp_params {
    param_entry *entries; /* declaration order */
    int n, cap;
    int *order;       /* entry index of position i: trainable first */
    int64_t *offsets; /* offset of position i's values */
    int n_trainable;
    float *data, *grad; /* storage of k */
    const kernels_table *k;
    int64_t numel, trainable_numel;
    bool finalized;
    bool frozen;
    bool release; /* zero_grad gives the gradient block's pages back (params_internal.h) */
    int64_t keep_lo, keep_hi; /* with release: the values it fills instead */
    /* Values held in part (params_internal.h): [shard_lo, shard_hi), and the holder's callback. */
    int64_t shard_lo, shard_hi;
    rp_status (*replaced)(void *ctx);
    void *replaced_ctx;
};

rp_status rp_params_create(rp_params **params)
{
    if (!params) return RP_ERROR(RP_ERR_INVALID, "rp_params_create: params is NULL");
    *params = rp_calloc(sizeof **params);
    return *params ? RP_OK : rp_last_status();
}

/* The gradient block's size (one float when nothing is trainable, so it is never empty). */
static size_t grad_bytes(const rp_params *p)
{
    return (size_t)(p->trainable_numel ? p->trainable_numel : 1) * sizeof(float);
}

void rp_params_destroy(rp_params *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        rp_free(p->entries[i].t);
    rp_free(p->entries);
    rp_free(p->order);
    rp_free(p->offsets);
    if (p->data) p->k->mem_free(p->data, (size_t)p->numel * sizeof(float));
    if (p->grad) p->k->mem_free(p->grad, grad_bytes(p));
    rp_free(p);
}

rp_tensor *rp_params_add(rp_params *p, const char *name, int ndim, const int *shape, rp_init init,
                         bool trainable)
{
    if (!p || !name || !shape) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add: params, name and shape must not be NULL");
        return NULL;
    }
    if (p->finalized) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add: cannot add \"%s\": the list is finalized", name);
        return NULL;
    }
    if (strlen(name) == 0 || strlen(name) >= RP_NAME_MAX) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add: name \"%s\" must have 1 to %d characters", name,
                 RP_NAME_MAX - 1);
        return NULL;
    }
    if (ndim < 1 || ndim > RP_MAX_DIMS) {
        RP_ERROR(RP_ERR_SHAPE, "rp_params_add: \"%s\" has %d dims; 1 to %d allowed", name, ndim,
                 RP_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            RP_ERROR(RP_ERR_SHAPE, "rp_params_add: \"%s\" dimension %d is %d", name, i, shape[i]);
            return NULL;
        }
    }
    if (rp_shape_numel(ndim, shape) < 0) {
        RP_ERROR(RP_ERR_SHAPE, "rp_params_add: \"%s\" has more than %lld elements", name,
                 (long long)RP_MAX_NUMEL);
        return NULL;
    }
    if (rp_params_find(p, name)) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add: a parameter named \"%s\" already exists", name);
        return NULL;
    }
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 32;
        param_entry *e = rp_alloc((size_t)cap * sizeof *e);
        if (!e) return NULL;
        if (p->entries) memcpy(e, p->entries, (size_t)p->n * sizeof *e);
        rp_free(p->entries);
        p->entries = e;
        p->cap = cap;
    }
    rp_tensor *t = rp_calloc(sizeof *t);
    if (!t) return NULL;
    t->ndim = ndim;
    for (int i = 0; i < RP_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 1;
    t->numel = rp_shape_numel(ndim, shape);
    t->node = -1;
    t->flags = RP_TENSOR_PARAM | (trainable ? RP_TENSOR_REQUIRES_GRAD : 0);
    snprintf(t->name, sizeof t->name, "%s", name);
    p->entries[p->n++] = (param_entry){t, init, trainable, 0, 0, 0, 0, 0};
    if (p->frozen) { /* joins a frozen set frozen, and thaws with it */
        p->entries[p->n - 1].frozen_flags = t->flags & RP_TENSOR_REQUIRES_GRAD;
        t->flags &= ~RP_TENSOR_REQUIRES_GRAD;
    }
    return t;
}

rp_tensor *rp_params_add_shard(rp_params *p, const char *name, int ndim, const int *dense_shape,
                               rp_init init, bool trainable, int axis, int rank, int size)
{
    if (!p || !name || !dense_shape) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add_shard: params, name and shape must not be NULL");
        return NULL;
    }
    if (ndim < 1 || ndim > RP_MAX_DIMS || axis < 0 || axis >= ndim) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add_shard: \"%s\": axis %d is not one of its %d dims",
                 name, axis, ndim);
        return NULL;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        RP_ERROR(RP_ERR_INVALID, "rp_params_add_shard: \"%s\": rank %d is not in [0, %d)", name,
                 rank, size);
        return NULL;
    }
    if (dense_shape[axis] < 1 || dense_shape[axis] % size != 0) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_params_add_shard: \"%s\": dimension %d (%d) does not split evenly over %d "
                 "members",
                 name, axis, dense_shape[axis], size);
        return NULL;
    }
    int shape[RP_MAX_DIMS];
    memcpy(shape, dense_shape, (size_t)ndim * sizeof(int));
    shape[axis] = dense_shape[axis] / size;
    rp_tensor *t = rp_params_add(p, name, ndim, shape, init, trainable);
    if (!t) return NULL;
    param_entry *e = &p->entries[p->n - 1];
    e->shard_axis = axis;
    e->shard_dense = dense_shape[axis];
    e->shard_rank = rank;
    e->shard_size = size;
    return t;
}

rp_status rp_params_mark_shard(rp_params *p, const rp_tensor *t, int axis, int rank, int size)
{
    param_entry *e = NULL;
    for (int i = 0; p && t && i < p->n && !e; i++)
        if (p->entries[i].t == t) e = &p->entries[i];
    if (!e) return RP_ERROR(RP_ERR_INVALID, "rp_params_mark_shard: the tensor is not in the list");
    if (p->finalized)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_params_mark_shard: \"%s\": the list is finalized already", t->name);
    if (axis < 0 || axis >= t->ndim || size < 1 || rank < 0 || rank >= size)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_params_mark_shard: \"%s\": axis %d of %d dims, rank %d of %d members",
                        t->name, axis, t->ndim, rank, size);
    e->shard_axis = axis;
    e->shard_dense = t->shape[axis] * size;
    e->shard_rank = size > 1 ? rank : 0;
    e->shard_size = size > 1 ? size : 0;
    return RP_OK;
}

bool rp_params_shard_of(const rp_params *p, int i, int *axis, int *rank, int *size)
{
    if (!p || i < 0 || i >= p->n) return false;
    const param_entry *e = &p->entries[p->finalized ? p->order[i] : i];
    if (e->shard_size < 2) return false;
    if (axis) *axis = e->shard_axis;
    if (rank) *rank = e->shard_rank;
    if (size) *size = e->shard_size;
    return true;
}

/* n values of the initialiser's random stream `key` from position `first`, into out. */
static void init_range(float *out, size_t n, rp_init init, uint64_t key, uint64_t first)
{
    double fan_in = init.fan_in > 0 ? init.fan_in : 1,
           fan_out = init.fan_out > 0 ? init.fan_out : 1;
    double gain =
        init.value != 0.0f ? (double)init.value : 1.0; /* Glorot's; 0 keeps old callers' 1 */
    switch (init.kind) {
    case RP_INIT_ZEROS:
        memset(out, 0, n * sizeof(float));
        break;
    case RP_INIT_CONSTANT:
        for (size_t i = 0; i < n; i++)
            out[i] = init.value;
        break;
    case RP_INIT_NORMAL:
        rp_rng_fill_normal(key, first, out, n, 0.0f, init.value);
        break;
    case RP_INIT_UNIFORM:
        rp_rng_fill_uniform(key, first, out, n, -init.value, init.value);
        break;
    case RP_INIT_HE_NORMAL:
        rp_rng_fill_normal(key, first, out, n, 0.0f, (float)sqrt(2.0 / fan_in));
        break;
    case RP_INIT_HE_UNIFORM: {
        float b = (float)sqrt(6.0 / fan_in);
        rp_rng_fill_uniform(key, first, out, n, -b, b);
        break;
    }
    case RP_INIT_GLOROT_NORMAL:
        rp_rng_fill_normal(key, first, out, n, 0.0f,
                           (float)(gain * sqrt(2.0 / (fan_in + fan_out))));
        break;
    case RP_INIT_GLOROT_UNIFORM: {
        float b = (float)(gain * sqrt(6.0 / (fan_in + fan_out)));
        rp_rng_fill_uniform(key, first, out, n, -b, b);
        break;
    }
    }
}

/*
 * Fills one parameter from its initialiser; the stream is keyed by seed and
 * name, one position per element of the dense tensor. A shard takes the
 * positions of its slice (one contiguous run per index of the axes before the
 * split one), so the shards of every member together hold the dense values.
 */
static void init_one(const param_entry *e, float *dst, uint64_t seed)
{
    rp_tensor *t = e->t;
    uint64_t key = rp_hash_str(seed, t->name);
    if (e->shard_size == 0) {
        init_range(dst, (size_t)t->numel, e->init, key, 0);
        return;
    }
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < e->shard_axis; i++)
        outer *= t->shape[i];
    for (int i = e->shard_axis + 1; i < t->ndim; i++)
        inner *= t->shape[i];
    int64_t k = t->shape[e->shard_axis], run = k * inner;
    for (int64_t o = 0; o < outer; o++) {
        uint64_t first = (uint64_t)((o * e->shard_dense + (int64_t)e->shard_rank * k) * inner);
        init_range(dst + o * run, (size_t)run, e->init, key, first);
    }
}

/* This thread's guards (rp_params_guard_push), outermost first. */
static _Thread_local struct {
    rp_params_guard_fn fn;
    void *arg;
} guards[RP_PARAMS_GUARDS];
static _Thread_local int n_guards;

rp_status rp_params_guard_push(rp_params_guard_fn fn, void *arg)
{
    if (!fn) return RP_ERROR(RP_ERR_INVALID, "rp_params_guard_push: fn is NULL");
    if (n_guards == RP_PARAMS_GUARDS)
        return RP_ERROR(RP_ERR_INVALID, "rp_params_guard_push: %d guards are installed already",
                        RP_PARAMS_GUARDS);
    guards[n_guards].fn = fn;
    guards[n_guards].arg = arg;
    n_guards++;
    return RP_OK;
}

void rp_params_guard_pop(void)
{
    if (n_guards > 0) n_guards--;
}

rp_status rp_params_finalize(rp_params *p, uint64_t seed)
{
    if (!p) return RP_ERROR(RP_ERR_INVALID, "rp_params_finalize: params is NULL");
    if (p->finalized) return RP_ERROR(RP_ERR_INVALID, "rp_params_finalize: already finalized");
    if (p->n == 0) return RP_ERROR(RP_ERR_INVALID, "rp_params_finalize: no parameters declared");
    for (int g = n_guards - 1; g >= 0; g--)
        RP_CHECK(guards[g].fn(p, guards[g].arg));
    p->order = rp_alloc((size_t)p->n * sizeof(int));
    p->offsets = rp_alloc((size_t)p->n * sizeof(int64_t));
    if (!p->order || !p->offsets) return rp_last_status();
    int pos = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->n; i++)
            if (p->entries[i].trainable == (pass == 0)) p->order[pos++] = i;
    p->numel = p->trainable_numel = 0;
    p->n_trainable = 0;
    for (int i = 0; i < p->n; i++) {
        param_entry *e = &p->entries[p->order[i]];
        p->offsets[i] = p->numel;
        p->numel += e->t->numel;
        if (e->trainable) {
            p->trainable_numel += e->t->numel;
            p->n_trainable++;
        }
    }
    p->k = kernels_active();
    p->data = p->k->mem_alloc((size_t)p->numel * sizeof(float));
    p->grad = p->k->mem_alloc(grad_bytes(p));
    if (!p->data || !p->grad)
        return RP_ERROR(RP_ERR_NOMEM,
                        "rp_params_finalize: the %s kernels could not allocate the "
                        "%lld parameters' values and gradients",
                        p->k->name, (long long)p->numel);
    p->k->mem_fill(p->grad, 0, grad_bytes(p));
    for (int i = 0; i < p->n; i++) {
        rp_tensor *t = p->entries[p->order[i]].t;
        t->index = i;
        t->data = p->data + p->offsets[i];
        if (p->entries[p->order[i]].trainable) {
            t->grad = p->grad + p->offsets[i];
            t->flags |= RP_TENSOR_GRAD_FRESH;
        }
    }
    p->finalized = true;
    return rp_params_reinit(p, seed);
}

rp_status rp_params_reinit(rp_params *p, uint64_t seed)
{
    if (!p || !p->finalized) return RP_ERROR(RP_ERR_INVALID, "rp_params_reinit: not finalized");
    float *host = rp_alloc((size_t)p->numel * sizeof(float));
    if (!host) return rp_last_status();
    for (int i = 0; i < p->n; i++) {
        const param_entry *e = &p->entries[p->order[i]];
        init_one(e, host + p->offsets[i], seed);
    }
    p->k->mem_upload(p->data, host, (size_t)p->numel * sizeof(float));
    rp_free(host);
    return RP_OK;
}

int rp_params_count(const rp_params *p)
{
    return p->n;
}

int rp_params_trainable_count(const rp_params *p)
{
    return p->finalized ? p->n_trainable : 0;
}

rp_tensor *rp_params_at(const rp_params *p, int i)
{
    if (!p || i < 0 || i >= p->n) return NULL;
    return p->finalized ? p->entries[p->order[i]].t : p->entries[i].t;
}

rp_tensor *rp_params_find(const rp_params *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->entries[i].t->name, name) == 0) return p->entries[i].t;
    return NULL;
}

float *rp_params_data(const rp_params *p)
{
    return p->data;
}

int64_t rp_params_numel(const rp_params *p)
{
    return p->numel;
}

float *rp_params_grad(const rp_params *p)
{
    return p->grad;
}

int64_t rp_params_trainable_numel(const rp_params *p)
{
    return p->trainable_numel;
}

int64_t rp_params_offset(const rp_params *p, int i)
{
    return (p->finalized && i >= 0 && i < p->n) ? p->offsets[i] : -1;
}

void rp_params_zero_grad(rp_params *p)
{
    if (!p->finalized) return;
    int64_t P = p->trainable_numel, lo = p->release ? p->keep_lo : 0,
            hi = p->release ? p->keep_hi : P;
    if (lo > 0) p->k->mem_discard(p->grad, (size_t)lo * sizeof(float));
    if (hi > lo) p->k->mem_fill(p->grad + lo, 0, (size_t)(hi - lo) * sizeof(float));
    if (P > hi) p->k->mem_discard(p->grad + hi, (size_t)(P - hi) * sizeof(float));
    for (int i = 0; i < p->n_trainable; i++)
        p->entries[p->order[i]].t->flags |= RP_TENSOR_GRAD_FRESH;
}

void params_set_value_shard(rp_params *p, int64_t lo, int64_t hi, rp_status (*replaced)(void *),
                            void *ctx)
{
    if (!p) return;
    p->shard_lo = lo;
    p->shard_hi = hi;
    p->replaced = replaced;
    p->replaced_ctx = ctx;
}

bool params_value_shard(const rp_params *p, int64_t *lo, int64_t *hi)
{
    if (!p || !p->replaced) return false;
    *lo = p->shard_lo;
    *hi = p->shard_hi;
    return true;
}

rp_status params_values_replaced(rp_params *p)
{
    return p && p->replaced ? p->replaced(p->replaced_ctx) : RP_OK;
}

void params_set_grad_release(rp_params *p, bool release, int64_t keep_lo, int64_t keep_hi)
{
    if (!p) return;
    int64_t P = p->trainable_numel;
    p->release = release;
    p->keep_lo = keep_lo < 0 ? 0 : keep_lo > P ? P : keep_lo;
    p->keep_hi = keep_hi < p->keep_lo ? p->keep_lo : keep_hi > P ? P : keep_hi;
}

void rp_params_set_frozen(rp_params *p, bool frozen)
{
    if (!p || p->frozen == frozen) return;
    for (int i = 0; i < p->n; i++) {
        param_entry *e = &p->entries[i];
        if (frozen) {
            e->frozen_flags = e->t->flags & RP_TENSOR_REQUIRES_GRAD;
            e->t->flags &= ~RP_TENSOR_REQUIRES_GRAD;
        } else {
            /* Exactly the previous flag: a parameter the user had switched off stays off. */
            e->t->flags = (e->t->flags & ~RP_TENSOR_REQUIRES_GRAD) | e->frozen_flags;
        }
    }
    p->frozen = frozen;
}

bool rp_params_frozen(const rp_params *p)
{
    return p && p->frozen;
}

/* ---- host copies of the blocks (the kernel table moves them) ---- */

static rp_status check_block(const rp_params *p, const void *host, const char *fn)
{
    if (!p || !host) return RP_ERROR(RP_ERR_INVALID, "%s: NULL argument", fn);
    if (!p->finalized) return RP_ERROR(RP_ERR_INVALID, "%s: the list is not finalized", fn);
    return RP_OK;
}

rp_status rp_params_read_values(const rp_params *p, float *out)
{
    RP_CHECK(check_block(p, out, "rp_params_read_values"));
    if (p->numel) p->k->mem_download(out, p->data, (size_t)p->numel * sizeof(float));
    return RP_OK;
}

rp_status rp_params_write_values(rp_params *p, const float *in)
{
    RP_CHECK(check_block(p, in, "rp_params_write_values"));
    if (!p->replaced) {
        if (p->numel) p->k->mem_upload(p->data, in, (size_t)p->numel * sizeof(float));
        return RP_OK;
    }
    /* Held in part (params_set_value_shard): the shard and the buffers, then the holder told. */
    int64_t lo = p->shard_lo, hi = p->shard_hi, P = p->trainable_numel;
    if (hi > lo) p->k->mem_upload(p->data + lo, in + lo, (size_t)(hi - lo) * sizeof(float));
    if (p->numel > P) p->k->mem_upload(p->data + P, in + P, (size_t)(p->numel - P) * sizeof(float));
    return params_values_replaced(p);
}

rp_status rp_params_read_grads(const rp_params *p, float *out)
{
    RP_CHECK(check_block(p, out, "rp_params_read_grads"));
    if (p->trainable_numel)
        p->k->mem_download(out, p->grad, (size_t)p->trainable_numel * sizeof(float));
    return RP_OK;
}

rp_status rp_params_write_grads(rp_params *p, const float *in)
{
    RP_CHECK(check_block(p, in, "rp_params_write_grads"));
    if (p->trainable_numel)
        p->k->mem_upload(p->grad, in, (size_t)p->trainable_numel * sizeof(float));
    /* No longer zeros: a later backward accumulates onto them. */
    for (int i = 0; i < p->n_trainable; i++)
        p->entries[p->order[i]].t->flags &= ~RP_TENSOR_GRAD_FRESH;
    return RP_OK;
}

rp_status rp_params_copy_values(rp_params *dst, const rp_params *src)
{
    RP_CHECK(check_block(dst, src, "rp_params_copy_values"));
    RP_CHECK(check_block(src, dst, "rp_params_copy_values"));
    if (dst->n != src->n)
        return RP_ERROR(RP_ERR_SHAPE, "rp_params_copy_values: %d tensors into a list of %d", src->n,
                        dst->n);
    for (int i = 0; i < src->n; i++) {
        const rp_tensor *a = src->entries[src->order[i]].t, *b = dst->entries[dst->order[i]].t;
        if (a->numel != b->numel || src->offsets[i] != dst->offsets[i])
            return RP_ERROR(RP_ERR_SHAPE,
                            "rp_params_copy_values: tensor %d is \"%s\" of %lld values in the "
                            "source and \"%s\" of %lld in the destination",
                            i, a->name, (long long)a->numel, b->name, (long long)b->numel);
    }
    /* Storage to storage: nothing passes through the host. */
    dst->k->mem_copy(dst->data, src->data, (size_t)src->numel * sizeof(float));
    return RP_OK;
}
