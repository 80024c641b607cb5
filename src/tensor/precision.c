/*
 * precision.c - the tape's mixed-precision policy (tensor.h): setting and
 * reading it, the compute type it gives an op, the GEMM in that type, and the
 * cast between f32 and bf16 that every f32-only op applies to a bf16 input.
 */
#include "tape_internal.h"

rp_precision_policy rp_precision_policy_make(rp_dtype compute)
{
    rp_precision_policy p = {
        .compute = compute, .ops = RP_AUTOCAST_DEFAULT, .activations = compute};
    return p;
}

rp_status rp_tape_set_precision(rp_tape *t, rp_precision_policy p)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "rp_tape_set_precision: tape is NULL");
    if (p.compute != RP_F32 && p.compute != RP_BF16)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tape_set_precision: compute type %s (%d) is neither f32 nor bf16",
                        rp_dtype_name(p.compute), (int)p.compute);
    if (p.activations != RP_F32 && !(p.activations == RP_BF16 && p.compute == RP_BF16))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tape_set_precision: activations in %s need bf16 compute (got %s)",
                        rp_dtype_name(p.activations), rp_dtype_name(p.compute));
    if (p.ops & ~(unsigned)RP_AUTOCAST_ALL)
        return RP_ERROR(
            RP_ERR_INVALID,
            "rp_tape_set_precision: ops 0x%x name classes that do not exist (all: 0x%x)", p.ops,
            (unsigned)RP_AUTOCAST_ALL);
    t->precision = p;
    return RP_OK;
}

rp_precision_policy rp_tape_precision(const rp_tape *t)
{
    return t ? t->precision : rp_precision_policy_make(RP_F32);
}

rp_status rp_tape_set_grad_wire(rp_tape *t, rp_dtype dtype)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "rp_tape_set_grad_wire: tape is NULL");
    if (dtype != RP_F32 && dtype != RP_BF16)
        return RP_ERROR(
            RP_ERR_INVALID,
            "rp_tape_set_grad_wire: gradients go on the wire in f32 or bf16, not %s (%d)",
            rp_dtype_name(dtype), (int)dtype);
    t->grad_wire = dtype;
    return RP_OK;
}

rp_dtype rp_tape_grad_wire(const rp_tape *t)
{
    return t ? t->grad_wire : RP_F32;
}

rp_dtype tape_compute(const rp_tape *t, unsigned cls)
{
    return t->precision.compute == RP_BF16 && (t->precision.ops & cls) ? RP_BF16 : RP_F32;
}

rp_status tape_gemm(rp_tape *t, rp_dtype compute, bool ta, bool tb, int m, int n, int k,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (compute == RP_BF16)
        return t->k->gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    t->k->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return RP_OK;
}

rp_tensor *tape_f32(rp_tape *t, rp_tensor *x)
{
    return rp_cast(t, x, RP_F32);
}

rp_tensor *rp_cast(rp_tape *t, rp_tensor *x, rp_dtype dtype)
{
    TAPE_PARAM_IN(t, x);
    if (dtype != RP_F32 && dtype != RP_BF16) {
        RP_ERROR(RP_ERR_INVALID, "rp_cast: dtype %s (%d) is neither f32 nor bf16",
                 rp_dtype_name(dtype), (int)dtype);
        return NULL;
    }
    if (x->dtype == dtype) return x;
    rp_tensor *y = tape_tensor_typed(t, x->ndim, x->shape, dtype);
    RP_PROPAGATE_NULL(y);
    if (dtype == RP_F32)
        t->k->cast_bf16_f32(y->data, x->data_bf16, x->numel);
    else
        t->k->cast_f32_bf16(y->data_bf16, x->data, x->numel);
    if (tape_needs_grad(t, &x, 1) && !tape_record(t, RP_OP_CAST, y, &x, 1)) return NULL;
    return y;
}
