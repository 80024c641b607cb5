/*
 * runtime.cu - the CUDA table's device, streams, cuBLAS handles, errors and memory slots.
 *
 * One device (the current one when the table is first asked for; CUDA_VISIBLE_DEVICES picks it).
 * Each calling thread gets its own non-blocking stream and cuBLAS handle, kept in thread-local
 * storage for the thread's life: replica threads queue their kernels independently. Storage
 * comes from the device's default memory pool through cudaMallocAsync, with the pool's release
 * threshold raised so that what a step frees stays in the pool for the next step (the default
 * threshold, 0, hands memory back to the driver at every synchronisation).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static rp_status init_status = RP_ERR_BACKEND;
static char init_reason[640];
static char device_name[300];
static char bf16_path[340] = "cuda tensor cores";
static int device_id;

kcuda_cublas_api kcuda_cublas;

#define RP_CUBLAS_STR2(x) #x
#define RP_CUBLAS_STR(x)  RP_CUBLAS_STR2(x)

/* Loads cuBLAS and its entry points; false with init_reason set when it cannot. */
static bool load_cublas(void)
{
    void *lib = dlopen(RP_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(init_reason, sizeof init_reason, "cannot load cuBLAS (%s): %s", RP_CUBLAS_SONAME,
                 dlerror());
        return false;
    }
#define RP_CUBLAS_LOAD(f, type)                                                                    \
    kcuda_cublas.f = (type)dlsym(lib, RP_CUBLAS_STR(f));                                           \
    if (!kcuda_cublas.f) {                                                                         \
        snprintf(init_reason, sizeof init_reason, "%s has no %s", RP_CUBLAS_SONAME,                \
                 RP_CUBLAS_STR(f));                                                                \
        return false;                                                                              \
    }
    RP_CUBLAS_FUNCS(RP_CUBLAS_LOAD)
#undef RP_CUBLAS_LOAD
    return true; /* (kept loaded for the process's life, as the table is) */
}

static void init_device(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        bool absent = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
        snprintf(init_reason, sizeof init_reason,
                 "no CUDA device can be used (cudaGetDeviceCount: %s)%s", cudaGetErrorString(e),
                 absent ? "; this machine has no NVIDIA GPU, or no driver for it" : "");
        return;
    }
    if (count < 1) {
        snprintf(init_reason, sizeof init_reason,
                 "no CUDA device can be used (cudaGetDeviceCount: 0 devices)");
        return;
    }
    e = cudaGetDevice(&device_id);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device_id);
    if (e != cudaSuccess) {
        snprintf(init_reason, sizeof init_reason, "CUDA device %d cannot be queried (%s)",
                 device_id, cudaGetErrorString(e));
        return;
    }
    if (prop.major < 7) {
        snprintf(init_reason, sizeof init_reason,
                 "CUDA device %d (%s) is sm_%d%d; this build's kernels need sm_75 or newer "
                 "(built for CMAKE_CUDA_ARCHITECTURES, 90 by default)",
                 device_id, prop.name, prop.major, prop.minor);
        return;
    }
    cudaMemPool_t pool;
    e = cudaDeviceGetDefaultMemPool(&pool, device_id);
    if (e == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    if (e != cudaSuccess) {
        snprintf(init_reason, sizeof init_reason, "CUDA device %d's memory pool: %s", device_id,
                 cudaGetErrorString(e));
        return;
    }
    if (!load_cublas()) return;
    snprintf(device_name, sizeof device_name, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    /* The bf16 path names the device: `replicator info`, the run header and bench's JSON print
       it (the command has no device line of its own yet). */
    snprintf(bf16_path, sizeof bf16_path, "cuda tensor cores on %s", device_name);
    init_status = RP_OK;
}

rp_status kcuda_init(void)
{
    pthread_once(&init_once, init_device);
    if (init_status != RP_OK) return RP_ERROR(init_status, "%s", init_reason);
    return RP_OK;
}

const char *kcuda_device_name(void)
{
    return device_name;
}

/* ---- errors ---- */

static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char error_text[512];
static bool error_kept;

static void keep_error(const char *what, const char *words, const char *file, int line)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_mutex_lock(&error_lock);
    if (!error_kept) {
        snprintf(error_text, sizeof error_text, "CUDA: %s failed at %s:%d (%s)", what, base, line,
                 words);
        error_kept = true;
        rp_log(RP_LOG_ERROR, "%s", error_text);
    }
    pthread_mutex_unlock(&error_lock);
}

bool kcuda_fail(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return true;
    keep_error(what, cudaGetErrorString(e), file, line);
    return false;
}

bool kcuda_blas_fail(cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    keep_error(what, kcuda_cublas.cublasGetStatusString(s), file, line);
    return false;
}

rp_status kcuda_take_error(void)
{
    pthread_mutex_lock(&error_lock);
    bool kept = error_kept;
    char text[sizeof error_text];
    memcpy(text, error_text, sizeof text);
    error_kept = false;
    pthread_mutex_unlock(&error_lock);
    if (!kept) return RP_OK;
    return RP_ERROR(RP_ERR_BACKEND, "%s", text);
}

/* ---- the calling thread's stream and handle ---- */

/* Destroyed when the thread ends (a pthread key's destructor), so replica threads that come and
   go leave nothing behind. */
typedef struct thread_ctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    void *workspace;
    size_t workspace_bytes;
} thread_ctx;

static pthread_key_t ctx_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread thread_ctx *tls_ctx;

static void ctx_destroy(void *p)
{
    thread_ctx *c = (thread_ctx *)p;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->blas) kcuda_cublas.cublasDestroy(c->blas);
    if (c->workspace) cudaFree(c->workspace);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static void make_key(void)
{
    pthread_key_create(&ctx_key, ctx_destroy);
}

/* cuBLAS's recommended workspace on Hopper. */
#define BLAS_WORKSPACE (32u << 20)

static thread_ctx *ctx(void)
{
    if (tls_ctx) return tls_ctx;
    pthread_once(&key_once, make_key);
    thread_ctx *c = (thread_ctx *)calloc(1, sizeof *c);
    if (!c) return NULL;
    CU(cudaSetDevice(device_id));
    CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (BLAS(kcuda_cublas.cublasCreate(&c->blas))) {
        BLAS(kcuda_cublas.cublasSetStream(c->blas, c->stream));
        /* Products in f32 stay f32 (no TF32): the cpu table's tolerances hold. */
        BLAS(kcuda_cublas.cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
        if (CU(cudaMalloc(&c->workspace, BLAS_WORKSPACE))) {
            c->workspace_bytes = BLAS_WORKSPACE;
            BLAS(kcuda_cublas.cublasSetWorkspace(c->blas, c->workspace, BLAS_WORKSPACE));
        }
    }
    pthread_setspecific(ctx_key, c);
    tls_ctx = c;
    return c;
}

cudaStream_t kcuda_stream(void)
{
    thread_ctx *c = ctx();
    return c ? c->stream : (cudaStream_t)0;
}

cublasHandle_t kcuda_blas(void)
{
    thread_ctx *c = ctx();
    return c ? c->blas : (cublasHandle_t)0;
}

size_t kcuda_cache_bytes(void)
{
    return tls_ctx ? tls_ctx->workspace_bytes : 0;
}

const char *kcuda_bf16_path(void)
{
    return bf16_path;
}

/* ---- scratch and the memory slots ---- */

void *kcuda_scratch(size_t bytes)
{
    void *p = NULL;
    if (!CU(cudaMallocAsync(&p, bytes ? bytes : 16, kcuda_stream()))) return NULL;
    return p;
}

void kcuda_scratch_free(void *p)
{
    if (p) CU(cudaFreeAsync(p, kcuda_stream()));
}

bool kcuda_read(void *host, const void *dev, size_t bytes)
{
    cudaStream_t s = kcuda_stream();
    return CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s)) &&
           CU(cudaStreamSynchronize(s));
}

__global__ void kcuda_dev_sum_final(double *out, const double *part, int nparts)
{
    double s = 0;
    /* Each thread sums a fixed stride of the parts, then the tree: a fixed order. */
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        s += part[i];
    s = kcuda_dev_block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

/*
 * Buffers cross threads (a parameter block built on one thread and read by every replica's, a
 * checkpoint written from another thread than the step's), and each thread queues on its own
 * stream. So the slots that hand storage between the host and the device order themselves
 * against the whole device: an allocation is complete before it returns, a free waits until no
 * stream can still use the block, and a transfer waits for all queued work first (a writer on
 * another thread's stream) and for its own copy after. Within one thread's stream, kernels and
 * mem_copy/mem_fill need no such waits. The cost: a download (the loss each step) waits for
 * every replica's queued work, not only its own; per-buffer events would lift that (docs/gpu.md).
 */
void *kcuda_mem_alloc(size_t bytes)
{
    void *p = NULL;
    cudaStream_t s = kcuda_stream();
    /* Out of memory is the caller's to report (it names what the buffer was for), not a kept
       failure. */
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CU(cudaStreamSynchronize(s));
    return p;
}

void kcuda_mem_free(void *p, size_t bytes)
{
    if (!p) return;
    CU(cudaDeviceSynchronize());
    CU(cudaFreeAsync(p, kcuda_stream()));
}

void kcuda_mem_upload(void *dst, const void *host, size_t bytes)
{
    cudaStream_t s = kcuda_stream();
    if (bytes == 0) return;
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
    CU(cudaStreamSynchronize(s));
}

void kcuda_mem_download(void *host, const void *src, size_t bytes)
{
    if (bytes == 0) return;
    CU(cudaDeviceSynchronize());
    kcuda_read(host, src, bytes);
}

void kcuda_mem_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return;
    CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kcuda_stream()));
}

__global__ static void fill_words(uint32_t *dst, uint32_t pattern, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] = pattern;
}

void kcuda_mem_fill(void *dst, uint32_t pattern, size_t bytes)
{
    int64_t n = (int64_t)(bytes / 4);
    if (n == 0) return;
    if (pattern == 0) {
        CU(cudaMemsetAsync(dst, 0, bytes, kcuda_stream()));
        return;
    }
    fill_words<<<kcuda_blocks(n), RP_CUDA_THREADS, 0, kcuda_stream()>>>((uint32_t *)dst, pattern,
                                                                        n);
    LAUNCHED("mem_fill");
}

/* All queued work, on every thread's stream (the slot's "all queued work is done"). */
void kcuda_mem_sync(void)
{
    kcuda_stream(); /* (a thread's first call makes its context current) */
    CU(cudaDeviceSynchronize());
}
