/* table.c - the reference kernel table. */
#include "kernels/bn_bf16.h"
#include "kernels/ref/conv_pool_ref.h"
#include "kernels/ref/elementwise.h"
#include "kernels/ref/optim.h"
#include "kernels/ref/norms.h"

static const kernels_table ref_table = {
    .name = "ref",
    .bf16_grads = true,
    .gemm = kref_gemm,
    .gemm_bf16 = kref_gemm_bf16,
    .conv2d_fwd = kref_conv2d_fwd,
    .conv2d_bwd_data = kref_conv2d_bwd_data,
    .conv2d_bwd_weights = kref_conv2d_bwd_weights,
    .conv2d_bwd = kernels_conv2d_bwd_pair,
    .maxpool_fwd = kref_maxpool_fwd,
    .maxpool_bwd = kref_maxpool_bwd,
    .avgpool_fwd = kref_avgpool_fwd,
    .avgpool_bwd = kref_avgpool_bwd,
    .bn_stats = kref_bn_stats,
    .bn_norm_fwd = kref_bn_norm_fwd,
    .bn_stats_bwd = kref_bn_stats_bwd,
    .bn_bwd_data = kref_bn_bwd_data,
    .bn_stats_bf16 = kernels_bn_stats_bf16,
    .bn_norm_fwd_bf16 = kernels_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = kernels_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = kernels_bn_bwd_data_bf16,
    .act_fwd = kref_act_fwd,
    .act_bwd = kref_act_bwd,
    .relu_fwd_bf16 = kref_relu_fwd_bf16,
    .binary = kref_binary,
    .scale = kref_scale,
    .add_inplace = kref_add_inplace,
    .mul = kref_mul,
    .reduce_rows = kref_reduce_rows,
    .add_scalar = kref_add_scalar,
    .sum = kref_sum,
    .copy_cols = kref_copy_cols,
    .gather_cols = kref_gather_cols,
    .upsample2x_fwd = kref_upsample2x_fwd,
    .upsample2x_bwd = kref_upsample2x_bwd,
    .gap_fwd = kref_gap_fwd,
    .gap_bwd = kref_gap_bwd,
    .embedding_fwd = kref_embedding_fwd,
    .embedding_bwd = kref_embedding_bwd,
    .softmax_xent_fwd = kref_softmax_xent_fwd,
    .softmax_xent_bwd = kref_softmax_xent_bwd,
    .binary_bcast = kref_binary_bcast,
    .reduce_axes = kref_reduce_axes,
    .expand_axes = kref_expand_axes,
    .clamp_fwd = kref_clamp_fwd,
    .clamp_bwd = kref_clamp_bwd,
    .select_eq_acc = kref_select_eq_acc,
    .layernorm_fwd = kref_layernorm_fwd,
    .layernorm_bwd = kref_layernorm_bwd,
    .log_softmax_fwd = kref_log_softmax_fwd,
    .log_softmax_bwd = kref_log_softmax_bwd,
    .sum_squares = kref_sum_squares,
    .scale_inplace = kref_scale_inplace,
    .cast_f32_bf16 = kref_cast_f32_bf16,
    .cast_bf16_f32 = kref_cast_bf16_f32,
    .bf16_path = kref_bf16_path,
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

const kernels_table *kernels_ref(void)
{
    return &ref_table;
}
