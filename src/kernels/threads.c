/*
 * threads.c - choosing the kernel table, the calling thread's team size and the convolution
 * algorithm.
 */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"

/*
 * The cuda table, or NULL (logged once) where it cannot run. Asked once: the answer does not
 * change within a process, and the calling thread's last error is left as it was (ops ask for
 * the active table on their error paths too).
 */
static int cuda_state; /* 0: not asked yet, 1: usable, -1: not */

static const kernels_table *cuda_or_null(void)
{
    int state = __atomic_load_n(&cuda_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        rp_status had = rp_last_status();
        char kept[512];
        snprintf(kept, sizeof kept, "%s", rp_last_error());
        const kernels_table *k = kernels_cuda();
        if (!k)
            rp_log(RP_LOG_ERROR, "RP_KERNELS=cuda: %s; the cpu table stands in", rp_last_error());
        if (had == RP_OK)
            rp_error_clear();
        else
            rp_error_set(had, NULL, 0, "%s", kept);
        state = k ? 1 : -1;
        __atomic_store_n(&cuda_state, state, __ATOMIC_RELEASE);
    }
    return state > 0 ? kernels_cuda() : NULL;
}

const kernels_table *kernels_active(void)
{
    const char *name = rp_env_get()->kernels;
    if (strcmp(name, "ref") == 0) return kernels_ref();
    if (strcmp(name, "strict") == 0) return kernels_strict();
    if (strcmp(name, "cuda") == 0) {
        const kernels_table *k = cuda_or_null();
        if (k) return k;
    }
    return kernels_cpu();
}

rp_status kernels_check(void)
{
    if (strcmp(rp_env_get()->kernels, "cuda") != 0 || kernels_cuda()) return RP_OK;
    rp_status st = rp_last_status();
    /* The reason without its "file:line: " (this error gets its own). */
    const char *m = rp_last_error(), *colon = strstr(m, ": ");
    char why[512];
    snprintf(why, sizeof why, "%s", colon ? colon + 2 : m);
    return RP_ERROR(st, "RP_KERNELS=cuda: %s", why);
}

const kernels_table *kernels_host(void)
{
    const kernels_table *k = kernels_active();
    return k->host_storage ? k : kernels_cpu();
}

static _Thread_local int team_size;

void rp_kernels_set_threads(int n)
{
    if (n <= 0) n = rp_env_get()->threads > 0 ? rp_env_get()->threads : rp_cpu_count();
    team_size = n;
    /* OpenMP's thread count is a per-thread setting: oneDNN (GEMM, convolution) and our loops
     * follow it. */
    omp_set_num_threads(n);
}

int rp_kernels_get_threads(void)
{
    return team_size > 0 ? team_size : omp_get_max_threads();
}

const char *rp_kernels_name(void)
{
    return kernels_active()->name;
}

const char *rp_kernels_bf16_path(void)
{
    return kernels_active()->bf16_path();
}

bool rp_kernels_bf16_fast(void)
{
    const char *path = rp_kernels_bf16_path();
    return !strcmp(path, "amx") || !strcmp(path, "avx512_bf16");
}

const char *rp_kernels_bf16_about(void)
{
    const char *path = rp_kernels_bf16_path();
    return !strcmp(path, "amx")           ? "AMX tiles: --precision bf16 is fast"
           : !strcmp(path, "avx512_bf16") ? "AVX512-BF16 dot products: --precision bf16 is fast"
           : !strcmp(path, "reference")
               ? "no bf16 units in use (the plain reference kernels compute it): "
                 "--precision bf16 is correct but much slower than f32"
               : "no bf16 units in use (oneDNN emulates bf16 with AVX-512): "
                 "--precision bf16 is correct but slower than f32";
}

/* -1 until first asked: then RP_CONV_ALGO's value, until a program sets another. */
static int conv_algorithm = -1;

void rp_kernels_set_conv_algorithm(rp_conv_algorithm a)
{
    __atomic_store_n(&conv_algorithm, a == RP_CONV_DIRECT ? RP_CONV_DIRECT : RP_CONV_AUTO,
                     __ATOMIC_RELAXED);
}

rp_conv_algorithm rp_kernels_get_conv_algorithm(void)
{
    int a = __atomic_load_n(&conv_algorithm, __ATOMIC_RELAXED);
    if (a < 0) {
        a = strcmp(rp_env_get()->conv_algo, "direct") == 0 ? RP_CONV_DIRECT : RP_CONV_AUTO;
        int unset = -1; /* a concurrent setter wins */
        __atomic_compare_exchange_n(&conv_algorithm, &unset, a, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
        a = __atomic_load_n(&conv_algorithm, __ATOMIC_RELAXED);
    }
    return (rp_conv_algorithm)a;
}

size_t rp_kernels_cache_bytes(void)
{
    const kernels_table *k = kernels_active();
    return k->cache_bytes ? k->cache_bytes() : 0;
}
