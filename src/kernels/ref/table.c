/* table.c - the reference kernel table. */
#include "kernels/bn_bf16.h"
#include "kernels/ref/conv_pool_ref.h"
#include "kernels/ref/elementwise.h"
#include "kernels/ref/optim.h"
#include "kernels/ref/norms.h"

static const rp_kernels ref_table = {
    .name = "ref",
    .gemm = rp_ref_gemm,
    .gemm_bf16 = rp_ref_gemm_bf16,
    .conv2d_fwd = rp_ref_conv2d_fwd,
    .conv2d_bwd_data = rp_ref_conv2d_bwd_data,
    .conv2d_bwd_weights = rp_ref_conv2d_bwd_weights,
    .maxpool_fwd = rp_ref_maxpool_fwd,
    .maxpool_bwd = rp_ref_maxpool_bwd,
    .avgpool_fwd = rp_ref_avgpool_fwd,
    .avgpool_bwd = rp_ref_avgpool_bwd,
    .bn_stats = rp_ref_bn_stats,
    .bn_norm_fwd = rp_ref_bn_norm_fwd,
    .bn_stats_bwd = rp_ref_bn_stats_bwd,
    .bn_bwd_data = rp_ref_bn_bwd_data,
    .bn_stats_bf16 = rp_bn_stats_bf16,
    .bn_norm_fwd_bf16 = rp_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = rp_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = rp_bn_bwd_data_bf16,
    .act_fwd = rp_ref_act_fwd,
    .act_bwd = rp_ref_act_bwd,
    .binary = rp_ref_binary,
    .scale = rp_ref_scale,
    .add_inplace = rp_ref_add_inplace,
    .mul = rp_ref_mul,
    .reduce_rows = rp_ref_reduce_rows,
    .add_scalar = rp_ref_add_scalar,
    .sum = rp_ref_sum,
    .copy_cols = rp_ref_copy_cols,
    .gather_cols = rp_ref_gather_cols,
    .upsample2x_fwd = rp_ref_upsample2x_fwd,
    .upsample2x_bwd = rp_ref_upsample2x_bwd,
    .gap_fwd = rp_ref_gap_fwd,
    .gap_bwd = rp_ref_gap_bwd,
    .embedding_fwd = rp_ref_embedding_fwd,
    .embedding_bwd = rp_ref_embedding_bwd,
    .softmax_xent_fwd = rp_ref_softmax_xent_fwd,
    .softmax_xent_bwd = rp_ref_softmax_xent_bwd,
    .binary_bcast = rp_ref_binary_bcast,
    .reduce_axes = rp_ref_reduce_axes,
    .expand_axes = rp_ref_expand_axes,
    .clamp_fwd = rp_ref_clamp_fwd,
    .clamp_bwd = rp_ref_clamp_bwd,
    .select_eq_acc = rp_ref_select_eq_acc,
    .layernorm_fwd = rp_ref_layernorm_fwd,
    .layernorm_bwd = rp_ref_layernorm_bwd,
    .log_softmax_fwd = rp_ref_log_softmax_fwd,
    .log_softmax_bwd = rp_ref_log_softmax_bwd,
    .sum_squares = rp_ref_sum_squares,
    .scale_inplace = rp_ref_scale_inplace,
    .cast_f32_bf16 = rp_ref_cast_f32_bf16,
    .cast_bf16_f32 = rp_ref_cast_bf16_f32,
    .bf16_path = rp_ref_bf16_path,
    /* ---- optimizer ---- */
    .sgd_update = rp_ref_sgd_update,
    .adam_update = rp_ref_adam_update,
    .first_nonfinite = rp_ref_first_nonfinite,
    /* ---- norms, checksums, servers ---- */
    .bn_train_stats = rp_ref_bn_train_stats,
    .bn_eval_stats = rp_ref_bn_eval_stats,
    .bn_bwd_sums = rp_ref_bn_bwd_sums,
    .sn_power = rp_ref_sn_power,
    .sn_fwd = rp_ref_sn_fwd,
    .sn_bwd = rp_ref_sn_bwd,
    .checksum = rp_ref_checksum,
    /* ---- memory: host memory ---- */
    RP_HOST_MEMORY_SLOTS,
};

const rp_kernels *rp_kernels_ref(void)
{
    return &ref_table;
}
