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

static const rp_kernels cpu_table = {
    .name = "cpu",
    .gemm = rp_cpu_gemm,
    .gemm_bf16 = rp_cpu_gemm_bf16,
    .conv2d_fwd = rp_cpu_conv2d_fwd,
    .conv2d_bwd_data = rp_cpu_conv2d_bwd_data,
    .conv2d_bwd_weights = rp_cpu_conv2d_bwd_weights,
    .maxpool_fwd = rp_cpu_maxpool_fwd,
    .maxpool_bwd = rp_cpu_maxpool_bwd,
    .avgpool_fwd = rp_cpu_avgpool_fwd,
    .avgpool_bwd = rp_cpu_avgpool_bwd,
    .bn_stats = rp_cpu_bn_stats,
    .bn_norm_fwd = rp_cpu_bn_norm_fwd,
    .bn_stats_bwd = rp_cpu_bn_stats_bwd,
    .bn_bwd_data = rp_cpu_bn_bwd_data,
    .bn_stats_bf16 = rp_bn_stats_bf16,
    .bn_norm_fwd_bf16 = rp_bn_norm_fwd_bf16,
    .bn_stats_bwd_bf16 = rp_bn_stats_bwd_bf16,
    .bn_bwd_data_bf16 = rp_bn_bwd_data_bf16,
    .act_fwd = rp_cpu_act_fwd,
    .act_bwd = rp_cpu_act_bwd,
    .binary = rp_cpu_binary,
    .scale = rp_cpu_scale,
    .add_inplace = rp_cpu_add_inplace,
    .mul = rp_ref_mul,
    .reduce_rows = rp_cpu_reduce_rows,
    .add_scalar = rp_ref_add_scalar,
    .sum = rp_ref_sum,
    .copy_cols = rp_ref_copy_cols,
    .gather_cols = rp_ref_gather_cols,
    .upsample2x_fwd = rp_ref_upsample2x_fwd,
    .upsample2x_bwd = rp_ref_upsample2x_bwd,
    .gap_fwd = rp_cpu_gap_fwd,
    .gap_bwd = rp_cpu_gap_bwd,
    .embedding_fwd = rp_ref_embedding_fwd,
    .embedding_bwd = rp_ref_embedding_bwd,
    .softmax_xent_fwd = rp_ref_softmax_xent_fwd,
    .softmax_xent_bwd = rp_ref_softmax_xent_bwd,
    .binary_bcast = rp_cpu_binary_bcast,
    .reduce_axes = rp_cpu_reduce_axes,
    .expand_axes = rp_cpu_expand_axes,
    .clamp_fwd = rp_cpu_clamp_fwd,
    .clamp_bwd = rp_cpu_clamp_bwd,
    .select_eq_acc = rp_ref_select_eq_acc,
    .layernorm_fwd = rp_cpu_layernorm_fwd,
    .layernorm_bwd = rp_cpu_layernorm_bwd,
    .log_softmax_fwd = rp_cpu_log_softmax_fwd,
    .log_softmax_bwd = rp_cpu_log_softmax_bwd,
    .sum_squares = rp_cpu_sum_squares,
    .scale_inplace = rp_cpu_scale_inplace,
    .cache_bytes = rp_cpu_dnnl_cache_bytes,
    .cast_f32_bf16 = rp_cpu_cast_f32_bf16,
    .cast_bf16_f32 = rp_cpu_cast_bf16_f32,
    .bf16_path = rp_cpu_bf16_path,
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

const rp_kernels *rp_kernels_cpu(void)
{
    return &cpu_table;
}
