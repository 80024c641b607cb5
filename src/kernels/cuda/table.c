/*
 * table.c - the CUDA kernel table (RP_KERNELS=cuda): device storage, work queued on the calling
 * thread's stream (cuda.h says how, docs/gpu.md what has run). The slots that take a descriptor
 * check it here, as the reference does, before anything is queued.
 */
#include "kernels/cuda/cuda.h"
#include "kernels/ref/conv_pool_ref.h"

static rp_status conv_fwd(void *y, const void *x, const float *w, const float *bias,
                          const rp_conv_desc *d)
{
    RP_CHECK(rp_conv_desc_validate(d));
    if (!y || !x || !w) return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_fwd: NULL y, x or w");
    return rp_cuda_conv2d_fwd(y, x, w, bias, d);
}

static rp_status conv_bwd_data(float *dx, const float *dy, const float *w, const rp_conv_desc *d)
{
    RP_CHECK(rp_conv_desc_validate(d));
    if (!dx || !dy || !w) return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_bwd_data: NULL dx, dy or w");
    return rp_cuda_conv2d_bwd_data(dx, dy, w, d);
}

static rp_status conv_bwd_weights(float *dw, float *db, const float *dy, const void *x,
                                  const rp_conv_desc *d)
{
    RP_CHECK(rp_conv_desc_validate(d));
    if (!dw || !dy || !x)
        return RP_ERROR(RP_ERR_INVALID, "cuda conv2d_bwd_weights: NULL dw, dy or x");
    return rp_cuda_conv2d_bwd_weights(dw, db, dy, x, d);
}

static rp_status maxpool_fwd(float *y, int32_t *argmax, const float *x, const rp_pool_desc *d)
{
    RP_CHECK(rp_pool_desc_validate(d));
    if (!y || !argmax || !x)
        return RP_ERROR(RP_ERR_INVALID, "cuda maxpool_fwd: NULL y, argmax or x");
    return rp_cuda_maxpool_fwd(y, argmax, x, d);
}

static rp_status maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                             const rp_pool_desc *d)
{
    RP_CHECK(rp_pool_desc_validate(d));
    if (!dx || !argmax || !dy)
        return RP_ERROR(RP_ERR_INVALID, "cuda maxpool_bwd: NULL dx, argmax or dy");
    return rp_cuda_maxpool_bwd(dx, argmax, dy, d);
}

static rp_status avgpool_fwd(float *y, const float *x, const rp_pool_desc *d)
{
    RP_CHECK(rp_pool_desc_validate(d));
    if (!y || !x) return RP_ERROR(RP_ERR_INVALID, "cuda avgpool_fwd: NULL y or x");
    return rp_cuda_avgpool_fwd(y, x, d);
}

static rp_status avgpool_bwd(float *dx, const float *dy, const rp_pool_desc *d)
{
    RP_CHECK(rp_pool_desc_validate(d));
    if (!dx || !dy) return RP_ERROR(RP_ERR_INVALID, "cuda avgpool_bwd: NULL dx or dy");
    return rp_cuda_avgpool_bwd(dx, dy, d);
}

static const rp_kernels cuda_table = {
    .name = "cuda",
    .host_storage = false,
    .gemm = rp_cuda_gemm,
    .gemm_bf16 = rp_cuda_gemm_bf16,
    .conv2d_fwd = conv_fwd,
    .conv2d_bwd_data = conv_bwd_data,
    .conv2d_bwd_weights = conv_bwd_weights,
    .maxpool_fwd = maxpool_fwd,
    .maxpool_bwd = maxpool_bwd,
    .avgpool_fwd = avgpool_fwd,
    .avgpool_bwd = avgpool_bwd,
    .bn_stats = rp_cuda_bn_stats,
    .bn_norm_fwd = rp_cuda_bn_norm_fwd,
    .bn_stats_bwd = rp_cuda_bn_stats_bwd,
    .bn_bwd_data = rp_cuda_bn_bwd_data,
    .bn_stats_bf16 = rp_cuda_bn_stats_bf16,
    .bn_norm_fwd_bf16 = rp_cuda_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = rp_cuda_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = rp_cuda_bn_bwd_data_bf16,
    .act_fwd = rp_cuda_act_fwd,
    .act_bwd = rp_cuda_act_bwd,
    .binary = rp_cuda_binary,
    .binary_bcast = rp_cuda_binary_bcast,
    .reduce_axes = rp_cuda_reduce_axes,
    .expand_axes = rp_cuda_expand_axes,
    .clamp_fwd = rp_cuda_clamp_fwd,
    .clamp_bwd = rp_cuda_clamp_bwd,
    .select_eq_acc = rp_cuda_select_eq_acc,
    .layernorm_fwd = rp_cuda_layernorm_fwd,
    .layernorm_bwd = rp_cuda_layernorm_bwd,
    .log_softmax_fwd = rp_cuda_log_softmax_fwd,
    .log_softmax_bwd = rp_cuda_log_softmax_bwd,
    .sum_squares = rp_cuda_sum_squares,
    .scale_inplace = rp_cuda_scale_inplace,
    .scale = rp_cuda_scale,
    .add_inplace = rp_cuda_add_inplace,
    .mul = rp_cuda_mul,
    .reduce_rows = rp_cuda_reduce_rows,
    .add_scalar = rp_cuda_add_scalar,
    .sum = rp_cuda_sum,
    .copy_cols = rp_cuda_copy_cols,
    .gather_cols = rp_cuda_gather_cols,
    .upsample2x_fwd = rp_cuda_upsample2x_fwd,
    .upsample2x_bwd = rp_cuda_upsample2x_bwd,
    .gap_fwd = rp_cuda_gap_fwd,
    .gap_bwd = rp_cuda_gap_bwd,
    .embedding_fwd = rp_cuda_embedding_fwd,
    .embedding_bwd = rp_cuda_embedding_bwd,
    .softmax_xent_fwd = rp_cuda_softmax_xent_fwd,
    .softmax_xent_bwd = rp_cuda_softmax_xent_bwd,
    .cache_bytes = rp_cuda_cache_bytes,
    .cast_f32_bf16 = rp_cuda_cast_f32_bf16,
    .cast_bf16_f32 = rp_cuda_cast_bf16_f32,
    .bf16_path = rp_cuda_bf16_path,
    /* ---- optimizer ---- */
    .sgd_update = rp_cuda_sgd_update,
    .adam_update = rp_cuda_adam_update,
    .first_nonfinite = rp_cuda_first_nonfinite,
    /* ---- norms, checksums, servers ---- */
    .bn_train_stats = rp_cuda_bn_train_stats,
    .bn_eval_stats = rp_cuda_bn_eval_stats,
    .bn_bwd_sums = rp_cuda_bn_bwd_sums,
    .sn_power = rp_cuda_sn_power,
    .sn_fwd = rp_cuda_sn_fwd,
    .sn_bwd = rp_cuda_sn_bwd,
    .checksum = rp_cuda_checksum,
    /* ---- memory: device memory ---- */
    .mem_alloc = rp_cuda_mem_alloc,
    .mem_free = rp_cuda_mem_free,
    .mem_upload = rp_cuda_mem_upload,
    .mem_download = rp_cuda_mem_download,
    .mem_copy = rp_cuda_mem_copy,
    .mem_fill = rp_cuda_mem_fill,
    .mem_sync = rp_cuda_mem_sync,
};

const rp_kernels *rp_kernels_cuda(void)
{
    if (rp_cuda_init() != RP_OK) return NULL;
    return &cuda_table;
}

const rp_kernels *rp_kernels_cuda_table(void)
{
    return &cuda_table;
}
