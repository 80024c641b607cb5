/*
 * none.c - kernels_cuda() in a build without a CUDA toolkit (CMake's RP_CUDA found none, or
 * RP_CUDA=OFF): the table does not exist, and the error says how to get it.
 */
#include "kernels/kernels.h"

const kernels_table *kernels_cuda(void)
{
    RP_ERROR(RP_ERR_UNSUPPORTED,
             "this build has no CUDA kernel table (configure with a CUDA toolkit: "
             "-DRP_CUDA=ON, docs/building.md)");
    return NULL;
}

const kernels_table *kernels_cuda_table(void)
{
    return NULL;
}
