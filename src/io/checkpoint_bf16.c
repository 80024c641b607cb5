/*
 * checkpoint_bf16.c - bf16 tensors in a checkpoint: adding them (as they are,
 * or rounded from f32), finding them, and reading any float tensor back as
 * f32. The file format treats BF16 as any other dtype (checkpoint_save.c,
 * checkpoint_load.c); only the conversions live here.
 */
#include <stdio.h>
#include <string.h>

#include "io/checkpoint_internal.h"

rp_status rp_checkpoint_add_bf16(rp_checkpoint *ck, const char *name, int ndim,
                                 const int64_t *shape, const rp_bf16 *data)
{
    return rp_checkpoint_add(ck, name, RP_CHECKPOINT_BF16, ndim, shape, data);
}

rp_status rp_checkpoint_add_f32_as(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                                   int ndim, const int64_t *shape, const float *data)
{
    if (!ck || !name)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_add_f32_as: ck and name must not be NULL");
    if (dtype == RP_CHECKPOINT_F32) return rp_checkpoint_add(ck, name, dtype, ndim, shape, data);
    if (dtype != RP_CHECKPOINT_BF16) {
        char what[32];
        if (io_ckpt_dtype_name(dtype))
            snprintf(what, sizeof what, "%s", io_ckpt_dtype_name(dtype));
        else
            snprintf(what, sizeof what, "dtype %d", (int)dtype);
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_f32_as: tensor \"%.64s\": f32 values can be stored as "
                        "F32 or BF16, not %s",
                        name, what);
    }
    /* Appended first (name, shape and room checked), then rounded straight into place. */
    ckpt_tensor *t = NULL;
    RP_CHECK(io_ckpt_append(ck, name, dtype, ndim, shape, &t));
    if (t->numel > 0 && !data) {
        long long numel = (long long)t->numel;
        io_ckpt_pop(ck);
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_f32_as: tensor \"%s\" has %lld elements but data is "
                        "NULL",
                        name, numel);
    }
    if (t->numel > 0) rp_bf16_from_f32_array(t->data, data, (size_t)t->numel);
    return RP_OK;
}

const rp_bf16 *rp_checkpoint_get_bf16(const rp_checkpoint *ck, const char *name, int *ndim,
                                      int64_t *shape)
{
    rp_checkpoint_dtype dtype;
    int nd = 0;
    int64_t sh[RP_MAX_DIMS];
    const void *data = rp_checkpoint_get(ck, name, &dtype, &nd, sh);
    if (!data) return NULL;
    if (dtype != RP_CHECKPOINT_BF16) {
        RP_ERROR(RP_ERR_INVALID, "checkpoint: tensor \"%s\" is %s, not BF16", name,
                 io_ckpt_dtype_name(dtype));
        return NULL;
    }
    if (ndim) *ndim = nd;
    if (shape) memcpy(shape, sh, (size_t)nd * sizeof *sh);
    return data;
}

rp_status rp_checkpoint_copy_f32(const rp_checkpoint *ck, const char *name, float *dst, int64_t n)
{
    if (!ck || !name || (!dst && n > 0))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_copy_f32: ck, name and dst must not be NULL");
    int i = io_ckpt_find(ck, name);
    if (i < 0) return RP_ERROR(RP_ERR_INVALID, "checkpoint: no tensor named \"%s\"", name);
    const ckpt_tensor *t = &ck->tensors[i];
    if (t->dtype != RP_CHECKPOINT_F32 && t->dtype != RP_CHECKPOINT_BF16)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_copy_f32: tensor \"%s\" is %s, not a float tensor (F32 or "
                        "BF16)",
                        name, io_ckpt_dtype_name(t->dtype));
    if (n != t->numel)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_copy_f32: tensor \"%s\" (%s) has %lld elements, the "
                        "destination %lld",
                        name, io_ckpt_dtype_name(t->dtype), (long long)t->numel, (long long)n);
    if (n == 0) return RP_OK;
    if (t->dtype == RP_CHECKPOINT_F32) return io_ckpt_read_elems(ck, i, NULL, 0, n, dst);
    const void *data = io_ckpt_data(ck, i);
    if (!data) return rp_last_status();
    rp_bf16_to_f32_array(dst, data, (size_t)n);
    return RP_OK;
}
