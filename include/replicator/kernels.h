/*
 * replicator/kernels.h - what a program may set about the compute kernels:
 * how many threads they run on, and which table is in use. The kernels
 * themselves (GEMM, convolution, element-wise loops) are internal; ops in
 * replicator/tensor.h call them.
 */
#ifndef REPLICATOR_KERNELS_H
#define REPLICATOR_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"

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
RP_API void rp_kernels_set_threads(int n);
/* The calling thread's kernel thread count. */
RP_API int rp_kernels_get_threads(void);
/* The kernel table in use: "cpu" (the fast one), "ref" (the plain reference, RP_KERNELS=ref),
 * "strict" (cpu's kernels over storage the host cannot read, for tests: RP_KERNELS=strict), or
 * "cuda" (a CUDA GPU, RP_KERNELS=cuda, in a build with a CUDA toolkit; docs/gpu.md). */
RP_API const char *rp_kernels_name(void);

/*
 * How the cpu table runs convolutions. AUTO (the default, RP_CONV_ALGO=auto): 3x3 stride-1
 * convolutions of at least 16 input and output channels use oneDNN's Winograd F(4x4, 3x3) where
 * the CPU has it (AVX-512), about 1.8x faster than the direct kernels, with 2-3x their rounding
 * error (each output within 1e-6 of a double reference, relative to the largest); everything
 * else runs direct. DIRECT (RP_CONV_ALGO=direct): direct everywhere, e.g. to compare with runs
 * made before Winograd. Process-wide; convolutions called after the change, on any thread,
 * follow it.
 */
typedef enum { RP_CONV_AUTO = 0, RP_CONV_DIRECT = 1 } rp_conv_algorithm;
RP_API void rp_kernels_set_conv_algorithm(rp_conv_algorithm a);
RP_API rp_conv_algorithm rp_kernels_get_conv_algorithm(void);

/*
 * The path bf16 compute (rp_precision_policy, tensor.h) takes on this CPU
 * with the table in use: "amx" (AMX tiles), "avx512_bf16" (AVX512-BF16
 * dot products), "avx512_core (emulated)" (oneDNN emulates bf16 with
 * AVX-512: correct, slower than f32), or "reference" (no AVX-512, or the
 * ref table: the plain reference kernels, correct and very slow).
 */
RP_API const char *rp_kernels_bf16_path(void);
/*
 * What that path means for speed, one clause for a user: "AMX tiles:
 * --precision bf16 is fast", or for the emulated and reference paths that
 * bf16 is correct but slower (much slower) than f32. The run header, `bench`
 * and `replicator info` print it.
 */
RP_API const char *rp_kernels_bf16_about(void);
/* Whether that path has bf16 units (amx, avx512_bf16): bf16 is not slower than f32 there. */
RP_API bool rp_kernels_bf16_fast(void);

/*
 * Bytes the kernels keep for the calling thread between calls: oneDNN's
 * scratchpad, the staging buffers of Winograd convolutions, and weights held
 * in a primitive's own layout. They grow while new shapes are seen, then stay
 * (a steady-state step allocates nothing). 0 for the ref table.
 */
RP_API size_t rp_kernels_cache_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
