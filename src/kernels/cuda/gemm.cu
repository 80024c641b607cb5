/*
 * gemm.cu - GEMM through cuBLAS on the calling thread's stream.
 *
 * The table's GEMM is row-major; cuBLAS is column-major. A row-major [M,N] matrix is the
 * column-major [N,M] transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: the
 * operands swap places and M and N swap, the transposes stay.
 *
 * f32 runs cublasSgemm with the default math mode (f32 products, no TF32), as the cpu table's
 * tolerances assume. bf16 rounds A and B to bf16 (rp_bf16_from_f32's rounding) into scratch and
 * runs cublasGemmEx with bf16 inputs, f32 output and f32 compute: the tensor cores' bf16 path,
 * whose products of two bf16 values are exact in f32, as the slot's contract asks.
 */
#include "kernels/cuda/common.cuh"

void kcuda_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    BLAS(kcuda_cublas.cublasSgemm(kcuda_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda,
                                  &beta, c, ldc));
}

__global__ static void round_bf16(uint16_t *y, const float *x, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = kcuda_dev_bf16_round(x[i]);
}

/* A stored row-major matrix of `rows` rows with leading dimension ld, `cols` used: the number of
   elements from its first to its last, which is what is rounded (the gaps too, harmlessly). */
static int64_t span(int rows, int cols, int ld)
{
    return (int64_t)(rows - 1) * ld + cols;
}

rp_status kcuda_gemm_bf16(bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
                          int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return kcuda_take_error();
    int64_t na = k > 0 ? (ta ? span(k, m, lda) : span(m, k, lda)) : 0;
    int64_t nb = k > 0 ? (tb ? span(n, k, ldb) : span(k, n, ldb)) : 0;
    uint16_t *a16 = (uint16_t *)kcuda_scratch((size_t)(na + nb + 8) * sizeof(uint16_t));
    if (!a16) return kcuda_take_error();
    uint16_t *b16 = a16 + ((na + 7) & ~(int64_t)7); /* 16-byte aligned */
    cudaStream_t s = kcuda_stream();
    if (na > 0) {
        round_bf16<<<kcuda_blocks(na), RP_CUDA_THREADS, 0, s>>>(a16, a, na);
        LAUNCHED("gemm_bf16 round A");
    }
    if (nb > 0) {
        round_bf16<<<kcuda_blocks(nb), RP_CUDA_THREADS, 0, s>>>(b16, b, nb);
        LAUNCHED("gemm_bf16 round B");
    }
    BLAS(kcuda_cublas.cublasGemmEx(kcuda_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b16,
                                   CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F,
                                   ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    kcuda_scratch_free(a16);
    return kcuda_take_error();
}
