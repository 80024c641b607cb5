/*
 * clip.c - global-norm gradient clipping over a parameter list's gradient
 * block, through the kernel table (no element loops above the kernels).
 */
#include <math.h>

#include "kernels/kernels.h"
#include "replicator/optim.h"

rp_status rp_clip_grad_norm(rp_params *params, float max_norm, float *norm)
{
    if (!params) return RP_ERROR(RP_ERR_INVALID, "rp_clip_grad_norm: params is NULL");
    if (!(max_norm > 0) || !isfinite(max_norm))
        return RP_ERROR(RP_ERR_INVALID, "rp_clip_grad_norm: max_norm %g must be finite and > 0",
                        (double)max_norm);
    float *grad = rp_params_grad(params);
    int64_t n = rp_params_trainable_numel(params);
    if (!grad)
        return RP_ERROR(RP_ERR_INVALID, "rp_clip_grad_norm: the parameter list is not finalized");
    const kernels_table *k = kernels_active();
    /* The gradient block holds every trainable gradient back to back: one pass covers them all. */
    double total = sqrt(k->sum_squares(grad, n));
    if (norm) *norm = (float)total;
    if (!isfinite(total))
        return RP_ERROR(RP_ERR_NUMERIC,
                        "rp_clip_grad_norm: the gradient norm is %g (a NaN or "
                        "infinite gradient); nothing was scaled",
                        total);
    if (total > max_norm) k->scale_inplace(grad, (float)(max_norm / total), n);
    return RP_OK;
}
