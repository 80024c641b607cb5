/*
 * replicator/kernels.h - what a program may set about the compute kernels:
 * how many threads they run on, and which table is in use. The kernels
 * themselves (GEMM, convolution, element-wise loops) are internal; ops in
 * replicator/tensor.h call them.
 */
#ifndef REPLICATOR_KERNELS_H
#define REPLICATOR_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Sets the calling thread's kernel thread count: OpenMP's team size for this
 * thread, which every cpu kernel (oneDNN GEMM and convolution, our loops)
 * follows. Each replica thread sets its own (the runtime does it for the
 * replicas it runs). n <= 0 means $RP_THREADS or all cores. Thread-safe: it
 * changes the calling thread only.
 */
void rp_kernels_set_threads(int n);
/* The calling thread's kernel thread count. */
int rp_kernels_get_threads(void);
/* The kernel table in use: "cpu" (the fast one), or "ref" (the plain reference, RP_KERNELS=ref). */
const char *rp_kernels_name(void);

#ifdef __cplusplus
}
#endif

#endif
