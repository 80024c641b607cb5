/*
 * gemm.c - the reference matrix multiply: a plain triple loop accumulating in
 * double, the specification kcpu_gemm is tested against.
 */
#include "core/bf16.h"
#include "kernels/ref/conv_pool_ref.h"

/*
 * C[m,n] = alpha * op(A) op(B) + beta * C, row-major. Element (i, p) of op(A)
 * is a[i*lda + p] without transpose and a[p*lda + i] with it; likewise for B.
 * As BLAS specifies, with beta == 0 C is only written, never read, and with
 * alpha == 0 A and B are not read.
 */
static void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc, bool bf16)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (int p = 0; alpha != 0.0f && p < k; p++) {
                float av = trans_a ? a[(int64_t)p * lda + i] : a[(int64_t)i * lda + p];
                float bv = trans_b ? b[(int64_t)j * ldb + p] : b[(int64_t)p * ldb + j];
                if (bf16) {
                    av = core_bf16_widen(core_bf16_round(av));
                    bv = core_bf16_widen(core_bf16_round(bv));
                }
                acc += (double)av * (double)bv;
            }
            float *cij = &c[(int64_t)i * ldc + j];
            double out = (double)alpha * acc;
            if (beta != 0.0f) out += (double)beta * (double)*cij;
            *cij = (float)out;
        }
    }
}

void kref_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
}

/* The bf16 specification: each element of A and B rounded to bf16 as it is read. */
rp_status kref_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, true);
    return RP_OK;
}

/* The conversions are core's (replicator/core.h), which tests/test_bf16.c holds to the spec. */
void kref_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    rp_bf16_from_f32_array(y, x, (size_t)n);
}

void kref_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n)
{
    rp_bf16_to_f32_array(y, x, (size_t)n);
}

const char *kref_bf16_path(void)
{
    return "reference";
}
