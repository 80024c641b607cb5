/*
 * gemm.c - the fast GEMM: OpenBLAS's cblas_sgemm in row-major order.
 */
#include <cblas.h>

#include "kernels/cpu/conv_pool_dnnl.h"

/*
 * Straight through to cblas_sgemm. Degenerate products are done here:
 * BLAS rejects a leading dimension of 0, which callers legitimately pass
 * when k == 0, and there is nothing to multiply anyway.
 */
void rp_cpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        for (int i = 0; i < m; i++) {
            float *row = c + (int64_t)i * ldc;
            for (int j = 0; j < n; j++)
                row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
