/*
 * threads.c - choosing the kernel table and the calling thread's team size.
 */
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"

const rp_kernels *rp_kernels_active(void)
{
    return strcmp(rp_env_get()->kernels, "ref") == 0 ? rp_kernels_ref() : rp_kernels_cpu();
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
    return rp_kernels_active()->name;
}
