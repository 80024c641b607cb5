/*
 * gemm.c - the fast GEMM: oneDNN's dnnl_sgemm (row-major).
 *
 * Why not OpenBLAS, which DESIGN.md names: measured here (bench_kernels,
 * docs/benchmarks.md), Debian's OpenBLAS 0.3.21 does not know this CPU
 * (family 6 model 207) and falls back to its Prescott kernels, about 4x
 * slower than oneDNN's AVX-512 GEMM; and its pthread pool fights the OpenMP
 * pool that oneDNN and our loops use, which made a 2-thread MLP step 3x
 * slower than a 1-thread one. dnnl_sgemm runs on the calling thread's OpenMP
 * team, so one thread setting governs every kernel of a replica.
 */
#include <oneapi/dnnl/dnnl.h>

#include "kernels/cpu/conv_pool_dnnl.h"

/*
 * Straight through to cblas_sgemm. Degenerate products are done here:
 * BLAS rejects a leading dimension of 0, which callers legitimately pass
 * when k == 0, and there is nothing to multiply anyway.
 */
void kcpu_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
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
    dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc);
}
