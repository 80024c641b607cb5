/*
 * common.cuh - what the CUDA table's .cu files share: the calling thread's stream and cuBLAS
 * handle, the error check, launch shapes, stream-ordered scratch memory, bf16 rounding on the
 * device, and the block reductions every deterministic sum is built from.
 */
#ifndef RP_KERNELS_CUDA_COMMON_CUH
#define RP_KERNELS_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

/* cuBLAS, loaded when the table starts (dlopen of RP_CUBLAS_SONAME), not linked: a program that
   never selects the cuda table loads no cuBLAS (hundreds of MB mapped and relocated at every
   start otherwise). Calls go through the loaded entry points: kcuda_cublas.cublasSgemm(...). The
   names are cublas_v2.h's macros, so field and symbol are both the _v2 name where there is one. */
/* (cublasGemmEx has a C++ overload taking the old cudaDataType compute type: the one loaded is the
   library's, with cublasComputeType_t.) */
typedef cublasStatus_t (*kcuda_cublas_gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                               int, int, int, const void *, const void *,
                                               cudaDataType, int, const void *, cudaDataType, int,
                                               const void *, void *, cudaDataType, int,
                                               cublasComputeType_t, cublasGemmAlgo_t);
#define RP_CUBLAS_FUNCS(X)                                                                         \
    X(cublasCreate, decltype(&::cublasCreate))                                                     \
    X(cublasDestroy, decltype(&::cublasDestroy))                                                   \
    X(cublasSetStream, decltype(&::cublasSetStream))                                               \
    X(cublasSetMathMode, decltype(&::cublasSetMathMode))                                           \
    X(cublasSetWorkspace, decltype(&::cublasSetWorkspace))                                         \
    X(cublasSgemm, decltype(&::cublasSgemm))                                                       \
    X(cublasGemmEx, kcuda_cublas_gemm_ex)                                                          \
    X(cublasGetStatusString, decltype(&::cublasGetStatusString))
#define RP_CUBLAS_FIELD(f, type) type f;
struct kcuda_cublas_api {
    RP_CUBLAS_FUNCS(RP_CUBLAS_FIELD)
};
extern kcuda_cublas_api kcuda_cublas;

/* The calling thread's stream and cuBLAS handle (created on first use). */
cudaStream_t kcuda_stream(void);
cublasHandle_t kcuda_blas(void);

/* Keeps the first failure (logged with file:line and the runtime's words); returns ok. */
bool kcuda_fail(cudaError_t e, const char *what, const char *file, int line);
bool kcuda_blas_fail(cublasStatus_t s, const char *what, const char *file, int line);
#define CU(call)   kcuda_fail((call), #call, __FILE__, __LINE__)
#define BLAS(call) kcuda_blas_fail((call), #call, __FILE__, __LINE__)
/* After a launch: a bad configuration shows here, a fault at the next synchronising call. */
#define LAUNCHED(name) kcuda_fail(cudaGetLastError(), name, __FILE__, __LINE__)

/* Stream-ordered scratch on the calling thread's stream (the pool keeps it between steps). */
void *kcuda_scratch(size_t bytes);
void kcuda_scratch_free(void *p);
/* Copies `bytes` of device memory to the host and waits: the slots that return a value. */
bool kcuda_read(void *host, const void *dev, size_t bytes);

#define RP_CUDA_THREADS 256
/* Blocks for a grid-stride loop over n elements (at least 1, at most 65535 * 16). */
static inline unsigned kcuda_blocks(int64_t n)
{
    int64_t b = (n + RP_CUDA_THREADS - 1) / RP_CUDA_THREADS;
    if (b < 1) b = 1;
    if (b > 65535 * 16) b = 65535 * 16;
    return (unsigned)b;
}
#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)blockDim.x * gridDim.x)

/* f(i) for i in [0, n) on the calling thread's stream: the element-wise kernels. */
template <typename F> __global__ void kcuda_dev_each(int64_t n, F f)
{
    GRID_STRIDE(i, n) f(i);
}
template <typename F> void kcuda_each(int64_t n, const char *name, F f)
{
    if (n <= 0) return;
    kcuda_dev_each<<<kcuda_blocks(n), RP_CUDA_THREADS, 0, kcuda_stream()>>>(n, f);
    kcuda_fail(cudaGetLastError(), name, __FILE__, __LINE__);
}

/* rp_bf16_from_f32's rounding (to nearest even, NaN kept quiet), bit for bit. */
__device__ __forceinline__ uint16_t kcuda_dev_bf16_round(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
__device__ __forceinline__ float kcuda_dev_bf16_widen(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}
/* An activation element as float, whether it is stored as f32 or as bf16. */
__device__ __forceinline__ float kcuda_dev_load(const float *p, int64_t i)
{
    return p[i];
}
__device__ __forceinline__ float kcuda_dev_load(const uint16_t *p, int64_t i)
{
    return kcuda_dev_bf16_widen(p[i]);
}
__device__ __forceinline__ void kcuda_dev_store(float *p, int64_t i, float v)
{
    p[i] = v;
}
__device__ __forceinline__ void kcuda_dev_store(uint16_t *p, int64_t i, float v)
{
    p[i] = kcuda_dev_bf16_round(v);
}

/* The sum of v over the block, in a fixed order (a tree), valid in thread 0. blockDim.x must
   be a power of two <= 1024; every thread of the block must call it. */
template <typename T> __device__ T kcuda_dev_block_sum(T v)
{
    __shared__ T part[1024];
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    T r = part[0];
    __syncthreads();
    return r;
}

/*
 * The sum of f(i) over i in [0, n), in double, deterministic: partial sums of fixed blocks of
 * a fixed grid, then one block adds them in order. Returns it to the host (waits).
 */
template <typename F> __global__ void kcuda_dev_sum_partials(double *part, int64_t n, F f)
{
    double s = 0;
    GRID_STRIDE(i, n) s += f(i);
    s = kcuda_dev_block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void kcuda_dev_sum_final(double *out, const double *part, int nparts);

/* The same left on the device: *out (device memory) receives the sum; nothing waits. */
template <typename F> bool kcuda_sum_to(double *out, int64_t n, F f)
{
    const unsigned blocks = 512;
    double *part = (double *)kcuda_scratch(blocks * sizeof(double));
    if (!part) return false;
    kcuda_dev_sum_partials<<<blocks, RP_CUDA_THREADS, 0, kcuda_stream()>>>(part, n, f);
    LAUNCHED("sum partials");
    kcuda_dev_sum_final<<<1, RP_CUDA_THREADS, 0, kcuda_stream()>>>(out, part, blocks);
    LAUNCHED("sum final");
    kcuda_scratch_free(part);
    return true;
}

template <typename F> double kcuda_sum_of(int64_t n, F f)
{
    double *out = (double *)kcuda_scratch(sizeof(double));
    double r = 0.0 / 0.0;
    if (out && kcuda_sum_to(out, n, f)) kcuda_read(&r, out, sizeof r);
    kcuda_scratch_free(out);
    return r;
}

/*
 * Column sums of an [m, c] array, K values per element: f(i, j, out) adds element (i, j)'s K
 * terms to out[0..K). A grid of (column groups of 32, row chunks) writes partial sums, then a
 * second pass adds the chunks in order and calls g(j, sums) with column j's K totals. Fixed
 * order, so deterministic. Queued on the stream; nothing waits.
 */
#define RP_COL_CHUNKS_MAX 128
template <int K, typename F>
__global__ void kcuda_dev_col_partials(double *part, int64_t m, int c, int64_t rows_per, F f)
{
    int j = blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = blockIdx.y * rows_per, r1 = r0 + rows_per < m ? r0 + rows_per : m;
    double acc[K];
    for (int k = 0; k < K; k++)
        acc[k] = 0;
    if (j < c)
        for (int64_t i = r0 + threadIdx.y; i < r1; i += blockDim.y)
            f(i, j, acc);
    __shared__ double sh[8][32][K];
    for (int k = 0; k < K; k++)
        sh[threadIdx.y][threadIdx.x][k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && j < c) {
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int t = 0; t < (int)blockDim.y; t++)
                s += sh[t][threadIdx.x][k];
            part[((int64_t)blockIdx.y * K + k) * c + j] = s;
        }
    }
}
template <int K, typename G>
__global__ void kcuda_dev_col_final(const double *part, int chunks, int c, G g)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double s[K];
    for (int k = 0; k < K; k++) {
        s[k] = 0;
        for (int t = 0; t < chunks; t++)
            s[k] += part[((int64_t)t * K + k) * c + j];
    }
    g(j, s);
}
template <int K, typename F, typename G> void kcuda_col_sums(int64_t m, int c, F f, G g)
{
    if (c <= 0) return;
    int64_t chunks = (m + 255) / 256;
    if (chunks > RP_COL_CHUNKS_MAX) chunks = RP_COL_CHUNKS_MAX;
    if (chunks < 1) chunks = 1;
    int64_t rows_per = (m + chunks - 1) / chunks;
    if (rows_per < 1) rows_per = 1;
    double *part = (double *)kcuda_scratch((size_t)chunks * K * c * sizeof(double));
    if (!part) return;
    dim3 grid((unsigned)((c + 31) / 32), (unsigned)chunks), block(32, 8);
    kcuda_dev_col_partials<K><<<grid, block, 0, kcuda_stream()>>>(part, m, c, rows_per, f);
    LAUNCHED("column partials");
    kcuda_dev_col_final<K><<<(c + 127) / 128, 128, 0, kcuda_stream()>>>(part, (int)chunks, c, g);
    LAUNCHED("column final");
    kcuda_scratch_free(part);
}

#endif
