/*
 * table.c - the CUDA kernel table (RP_KERNELS=cuda): device storage, work queued on the calling
 * thread's stream (cuda.h says how, docs/gpu.md what has run). The slots that take a descriptor
 * check it here, as the reference does, before anything is queued.
 */
#include "kernels/cuda/cuda.h"
#include "kernels/ref/conv_pool_ref.h"

static rp_status conv_fwd(void *y, const void *x, const float *w, const float *bias,
                          const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!y || !x || !w) return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_fwd: NULL y, x or w");
    return kcuda_conv2d_fwd(y, x, w, bias, d);
}

/* A bf16 dy is refused: this table does not set bf16_grads (not yet run on a GPU). */
static rp_status conv_dy_f32(const kernels_conv_desc *d, const char *who)
{
    if (d->dy_type == RP_F32) return RP_OK;
    return RP_ERROR(RP_ERR_UNSUPPORTED, "cuda %s: dy stored as %s (this table takes f32 dy only)",
                    who, rp_dtype_name(d->dy_type));
}

static rp_status conv_bwd_data(float *dx, const void *dy, const float *w,
                               const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dx || !dy || !w) return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_bwd_data: NULL dx, dy or w");
    RP_CHECK(conv_dy_f32(d, "conv2d_bwd_data"));
    return kcuda_conv2d_bwd_data(dx, dy, w, d);
}

static rp_status conv_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                  const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dw || !dy || !x)
        return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_bwd_weights: NULL dw, dy or x");
    RP_CHECK(conv_dy_f32(d, "conv2d_bwd_weights"));
    return kcuda_conv2d_bwd_weights(dw, db, dy, x, d);
}

static rp_status maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !argmax || !x)
        return RP_ERROR(RP_ERR_INVALID, "cuda maxpool_fwd: NULL y, argmax or x");
    return kcuda_maxpool_fwd(y, argmax, x, d);
}

static rp_status maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                             const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !argmax || !dy)
        return RP_ERROR(RP_ERR_INVALID, "cuda maxpool_bwd: NULL dx, argmax or dy");
    return kcuda_maxpool_bwd(dx, argmax, dy, d);
}

static rp_status avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !x) return RP_ERROR(RP_ERR_INVALID, "cuda avgpool_fwd: NULL y or x");
    return kcuda_avgpool_fwd(y, x, d);
}

static rp_status avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !dy) return RP_ERROR(RP_ERR_INVALID, "cuda avgpool_bwd: NULL dx or dy");
    return kcuda_avgpool_bwd(dx, dy, d);
}

/* Device memory stays allocated (cudaMalloc's blocks are not given back piecewise): zeros. */
static void kcuda_mem_discard(void *dst, size_t bytes)
{
    kcuda_mem_fill(dst, 0, bytes);
}

static const kernels_table cuda_table = {
    .name = "cuda",
    .host_storage = false,
    .gemm = kcuda_gemm,
    .gemm_bf16 = kcuda_gemm_bf16,
    .conv2d_fwd = conv_fwd,
    .conv2d_bwd_data = conv_bwd_data,
    .conv2d_bwd_weights = conv_bwd_weights,
    .conv2d_bwd = kernels_conv2d_bwd_pair,
    .maxpool_fwd = maxpool_fwd,
    .maxpool_bwd = maxpool_bwd,
    .avgpool_fwd = avgpool_fwd,
    .avgpool_bwd = avgpool_bwd,
    .bn_stats = kcuda_bn_stats,
    .bn_norm_fwd = kcuda_bn_norm_fwd,
    .bn_stats_bwd = kcuda_bn_stats_bwd,
    .bn_bwd_data = kcuda_bn_bwd_data,
    .bn_stats_bf16 = kcuda_bn_stats_bf16,
    .bn_norm_fwd_bf16 = kcuda_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = kcuda_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = kcuda_bn_bwd_data_bf16,
    .act_fwd = kcuda_act_fwd,
    .act_bwd = kcuda_act_bwd,
    .relu_fwd_bf16 = kcuda_relu_fwd_bf16,
    .binary = kcuda_binary,
    .binary_bcast = kcuda_binary_bcast,
    .reduce_axes = kcuda_reduce_axes,
    .expand_axes = kcuda_expand_axes,
    .clamp_fwd = kcuda_clamp_fwd,
    .clamp_bwd = kcuda_clamp_bwd,
    .select_eq_acc = kcuda_select_eq_acc,
    .layernorm_fwd = kcuda_layernorm_fwd,
    .layernorm_bwd = kcuda_layernorm_bwd,
    .log_softmax_fwd = kcuda_log_softmax_fwd,
    .log_softmax_bwd = kcuda_log_softmax_bwd,
    .sum_squares = kcuda_sum_squares,
    .scale_inplace = kcuda_scale_inplace,
    .scale = kcuda_scale,
    .add_inplace = kcuda_add_inplace,
    .mul = kcuda_mul,
    .reduce_rows = kcuda_reduce_rows,
    .add_scalar = kcuda_add_scalar,
    .sum = kcuda_sum,
    .copy_cols = kcuda_copy_cols,
    .gather_cols = kcuda_gather_cols,
    .upsample2x_fwd = kcuda_upsample2x_fwd,
    .upsample2x_bwd = kcuda_upsample2x_bwd,
    .gap_fwd = kcuda_gap_fwd,
    .gap_bwd = kcuda_gap_bwd,
    .embedding_fwd = kcuda_embedding_fwd,
    .embedding_bwd = kcuda_embedding_bwd,
    .softmax_xent_fwd = kcuda_softmax_xent_fwd,
    .softmax_xent_bwd = kcuda_softmax_xent_bwd,
    .cache_bytes = kcuda_cache_bytes,
    .cast_f32_bf16 = kcuda_cast_f32_bf16,
    .cast_bf16_f32 = kcuda_cast_bf16_f32,
    .bf16_path = kcuda_bf16_path,
    /* ---- optimizer ---- */
    .sgd_update = kcuda_sgd_update,
    .adam_update = kcuda_adam_update,
    .first_nonfinite = kcuda_first_nonfinite,
    /* ---- norms, checksums, servers ---- */
    .bn_train_stats = kcuda_bn_train_stats,
    .bn_eval_stats = kcuda_bn_eval_stats,
    .bn_bwd_sums = kcuda_bn_bwd_sums,
    .sn_power = kcuda_sn_power,
    .sn_fwd = kcuda_sn_fwd,
    .sn_bwd = kcuda_sn_bwd,
    .checksum = kcuda_checksum,
    /* ---- memory: device memory ---- */
    .mem_alloc = kcuda_mem_alloc,
    .mem_free = kcuda_mem_free,
    .mem_upload = kcuda_mem_upload,
    .mem_download = kcuda_mem_download,
    .mem_copy = kcuda_mem_copy,
    .mem_fill = kcuda_mem_fill,
    .mem_discard = kcuda_mem_discard,
    .mem_sync = kcuda_mem_sync,
};

const kernels_table *kernels_cuda(void)
{
    if (kcuda_init() != RP_OK) return NULL;
    return &cuda_table;
}

const kernels_table *kernels_cuda_table(void)
{
    return &cuda_table;
}
