/*
 * tensor.c - shape helpers and creating leaf tensors on a tape.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tape_internal.h"

int64_t rp_shape_numel(int ndim, const int *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        /* Each factor is below 2^31 and n stays below 2^40, so the product cannot overflow. */
        if (shape[i] < 1) return -1;
        n *= shape[i];
        if (n > RP_MAX_NUMEL) return -1;
    }
    return n;
}

bool rp_tensor_same_shape(const rp_tensor *a, const rp_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *rp_shape_str(const rp_tensor *t, char *buf, size_t size)
{
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, i ? ", %d" : "%d", t->shape[i]);
    if (len < size) snprintf(buf + len, size - len, "]");
    return buf;
}

float rp_item(const rp_tensor *x)
{
    if (!x || x->numel != 1) return NAN;
    return rp_tensor_get(x, 0);
}

float rp_tensor_get(const rp_tensor *x, int64_t i)
{
    if (!x || !x->storage || i < 0 || i >= x->numel) return NAN;
    const kernels_table *k = kernels_active();
    if (x->dtype == RP_BF16) {
        rp_bf16 v;
        k->mem_download(&v, x->data_bf16 + i, sizeof v);
        return rp_bf16_to_f32(v);
    }
    float v;
    k->mem_download(&v, x->data + i, sizeof v);
    return v;
}

rp_status rp_tensor_read(const rp_tensor *x, float *out, int64_t n)
{
    if (!x || !out)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_read: tensor and out must not be NULL");
    char sx[64];
    if (n != x->numel)
        return RP_ERROR(RP_ERR_SHAPE, "rp_tensor_read: the tensor %s has %lld values, not %lld",
                        rp_shape_str(x, sx, sizeof sx), (long long)x->numel, (long long)n);
    if (!x->storage)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_read: the tensor's values were released "
                                        "(rp_tape_drop)");
    const kernels_table *k = kernels_active();
    if (x->dtype == RP_F32) {
        k->mem_download(out, x->data, (size_t)n * sizeof(float));
        return RP_OK;
    }
    /* bf16: download the halves into the top of out, then widen upwards (in place is safe:
       element i is written after halves i and above were read, from the low end). */
    rp_bf16 *half = (rp_bf16 *)(out + n) - n;
    k->mem_download(half, x->data_bf16, (size_t)n * sizeof(rp_bf16));
    for (int64_t i = 0; i < n; i++)
        out[i] = rp_bf16_to_f32(half[i]);
    return RP_OK;
}

rp_status rp_tensor_write(rp_tensor *x, const float *values, int64_t n)
{
    if (!x || !values)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_write: tensor and values must not be NULL");
    char sx[64];
    if (n != x->numel)
        return RP_ERROR(RP_ERR_SHAPE, "rp_tensor_write: the tensor %s has %lld values, not %lld",
                        rp_shape_str(x, sx, sizeof sx), (long long)x->numel, (long long)n);
    if (x->dtype != RP_F32 || !x->storage)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_write: the tensor holds no f32 values to "
                                        "overwrite");
    kernels_active()->mem_upload(x->data, values, (size_t)n * sizeof(float));
    return RP_OK;
}

rp_status rp_tensor_read_grad(const rp_tensor *x, float *out, int64_t n)
{
    if (!x || !out)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_read_grad: tensor and out must not be NULL");
    char sx[64];
    if (n != x->numel)
        return RP_ERROR(RP_ERR_SHAPE,
                        "rp_tensor_read_grad: the tensor %s has %lld values, not %lld",
                        rp_shape_str(x, sx, sizeof sx), (long long)x->numel, (long long)n);
    if (!x->grad)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensor_read_grad: the tensor %s holds no gradient",
                        rp_shape_str(x, sx, sizeof sx));
    kernels_active()->mem_download(out, x->grad, (size_t)n * sizeof(float));
    return RP_OK;
}

/* Validates a shape given by a caller; sets an error naming it if bad. */
static bool shape_ok(int ndim, const int *shape, const char *who)
{
    if (ndim < 0 || ndim > RP_MAX_DIMS) {
        RP_ERROR(RP_ERR_SHAPE, "%s: ndim %d is outside 0..%d", who, ndim, RP_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            RP_ERROR(RP_ERR_SHAPE, "%s: dimension %d is %d; dimensions must be >= 1", who, i,
                     shape[i]);
            return false;
        }
    }
    if (rp_shape_numel(ndim, shape) < 0) {
        RP_ERROR(RP_ERR_SHAPE, "%s: the shape has more than %lld elements", who,
                 (long long)RP_MAX_NUMEL);
        return false;
    }
    return true;
}

rp_tensor *tape_tensor(rp_tape *t, int ndim, const int *shape)
{
    return tape_tensor_typed(t, ndim, shape, RP_F32);
}

rp_tensor *tape_tensor_typed(rp_tape *t, int ndim, const int *shape, rp_dtype dtype)
{
    rp_tensor *x = rp_arena_alloc(t->arena, sizeof *x);
    RP_PROPAGATE_NULL(x);
    memset(x, 0, sizeof *x);
    x->ndim = ndim;
    for (int i = 0; i < RP_MAX_DIMS; i++)
        x->shape[i] = i < ndim ? shape[i] : 1;
    x->numel = rp_shape_numel(ndim, shape);
    x->node = -1;
    x->index = -1;
    x->dtype = dtype;
    x->storage = rp_arena_alloc(t->store, (size_t)x->numel * rp_dtype_size(dtype));
    return x->storage ? x : NULL;
}

rp_tensor *rp_tensor_new(rp_tape *t, int ndim, const int *shape)
{
    if (!t) {
        RP_ERROR(RP_ERR_INVALID, "rp_tensor_new: tape is NULL");
        return NULL;
    }
    if (!shape_ok(ndim, shape, "rp_tensor_new")) return NULL;
    return tape_tensor(t, ndim, shape);
}

rp_tensor *rp_tensor_from(rp_tape *t, int ndim, const int *shape, const float *data)
{
    rp_tensor *x = rp_tensor_new(t, ndim, shape);
    if (x && data) t->k->mem_upload(x->data, data, (size_t)x->numel * sizeof(float));
    return x;
}

rp_tensor *rp_tensor_fill(rp_tape *t, int ndim, const int *shape, float value)
{
    rp_tensor *x = rp_tensor_new(t, ndim, shape);
    RP_PROPAGATE_NULL(x);
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    t->k->mem_fill(x->data, bits, (size_t)x->numel * sizeof(float));
    return x;
}
