/*
 * table.c - the fast CPU kernel table. Slots without a faster version point
 * at the reference kernel: those are cheap, rarely-hot loops that GCC
 * already vectorises at -O3, and a copy would only be a second thing to test.
 */
#include "kernels/bn_bf16.h"
#include "kernels/cpu/conv_pool_dnnl.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/ref/optim.h"
#include "kernels/ref/norms.h"

static const kernels_table cpu_table = {
    .name = "cpu",
    .bf16_grads = true,
    .gemm = kcpu_gemm,
    .gemm_bf16 = kcpu_gemm_bf16,
    .conv2d_fwd = kcpu_conv2d_fwd,
    .conv2d_bwd_data = kcpu_conv2d_bwd_data,
    .conv2d_bwd_weights = kcpu_conv2d_bwd_weights,
    .conv2d_bwd = kcpu_conv2d_bwd,
    .maxpool_fwd = kcpu_maxpool_fwd,
    .maxpool_bwd = kcpu_maxpool_bwd,
    .avgpool_fwd = kcpu_avgpool_fwd,
    .avgpool_bwd = kcpu_avgpool_bwd,
    .bn_stats = kcpu_bn_stats,
    .bn_norm_fwd = kcpu_bn_norm_fwd,
    .bn_stats_bwd = kcpu_bn_stats_bwd,
    .bn_bwd_data = kcpu_bn_bwd_data,
    .bn_stats_bf16 = kcpu_bn_stats_bf16,
    .bn_norm_fwd_bf16 = kcpu_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = kcpu_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = kcpu_bn_bwd_data_bf16,
    .act_fwd = kcpu_act_fwd,
    .act_bwd = kcpu_act_bwd,
    .relu_fwd_bf16 = kcpu_relu_fwd_bf16,
    .binary = kcpu_binary,
    .scale = kcpu_scale,
    .add_inplace = kcpu_add_inplace,
    .mul = kref_mul,
    .reduce_rows = kcpu_reduce_rows,
    .add_scalar = kref_add_scalar,
    .sum = kref_sum,
    .copy_cols = kref_copy_cols,
    .gather_cols = kref_gather_cols,
    .upsample2x_fwd = kcpu_upsample2x_fwd,
    .upsample2x_bwd = kcpu_upsample2x_bwd,
    .gap_fwd = kcpu_gap_fwd,
    .gap_bwd = kcpu_gap_bwd,
    .embedding_fwd = kref_embedding_fwd,
    .embedding_bwd = kref_embedding_bwd,
    .softmax_xent_fwd = kref_softmax_xent_fwd,
    .softmax_xent_bwd = kref_softmax_xent_bwd,
    .binary_bcast = kcpu_binary_bcast,
    .reduce_axes = kcpu_reduce_axes,
    .expand_axes = kcpu_expand_axes,
    .clamp_fwd = kcpu_clamp_fwd,
    .clamp_bwd = kcpu_clamp_bwd,
    .select_eq_acc = kref_select_eq_acc,
    .layernorm_fwd = kcpu_layernorm_fwd,
    .layernorm_bwd = kcpu_layernorm_bwd,
    .log_softmax_fwd = kcpu_log_softmax_fwd,
    .log_softmax_bwd = kcpu_log_softmax_bwd,
    .sum_squares = kcpu_sum_squares,
    .scale_inplace = kcpu_scale_inplace,
    .cache_bytes = kcpu_dnnl_cache_bytes,
    .cast_f32_bf16 = kcpu_cast_f32_bf16,
    .cast_bf16_f32 = kcpu_cast_bf16_f32,
    .bf16_path = kcpu_bf16_path,
    /* ---- optimizer ---- */
    .sgd_update = kref_sgd_update,
    .adam_update = kref_adam_update,
    .first_nonfinite = kref_first_nonfinite,
    /* ---- norms, checksums, servers ---- */
    .bn_train_stats = kref_bn_train_stats,
    .bn_eval_stats = kref_bn_eval_stats,
    .bn_bwd_sums = kref_bn_bwd_sums,
    .sn_power = kref_sn_power,
    .sn_fwd = kref_sn_fwd,
    .sn_bwd = kref_sn_bwd,
    .checksum = kref_checksum,
    /* ---- memory: host memory ---- */
    RP_HOST_MEMORY_SLOTS,
};

const kernels_table *kernels_cpu(void)
{
    return &cpu_table;
}
