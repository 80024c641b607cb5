/*
 * info.c - `replicator info`: the build, the engines, the bf16 path (rp_kernels_bf16_path), the
 * environment and the control tasks.
 */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <mujoco/mujoco.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int rp_cli_info(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf(
            "usage: replicator info\n\nPrints the build, the engines, the path bf16 compute takes "
            "on this CPU, the environment and the control tasks.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "replicator info: takes no %s, but was given %s (see --help)\n",
                argv[1][0] == '-' ? "options" : "arguments", argv[1]);
        return 2;
    }
    const rp_env *env = rp_env_get();
    const dnnl_version_t *v = dnnl_version();
    printf("replicator %s\n", RP_VERSION);
    printf("cores          %d\n", rp_cpu_count());
    printf("kernels        %s\n", rp_kernels_name());
    printf("oneDNN         %d.%d.%d (cpu runtime %s)\n", v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
    printf("OpenMP threads %d\n", omp_get_max_threads());
    printf("environment    RP_LOG_LEVEL=%d RP_THREADS=%d RP_KERNELS=%s RP_DATA_DIR=%s "
           "RP_COMM_TIMEOUT=%g RP_FLIGHT_ENTRIES=%d RP_CONV_ALGO=%s%s%s%s%s%s\n",
           env->log_level, env->threads, env->kernels, env->data_dir, env->comm_timeout,
           env->flight_entries, env->conv_algo, env->faults ? " RP_FAULTS=" : "",
           env->faults ? env->faults : "", env->arena_poison ? " RP_ARENA_POISON=1" : "",
           strcmp(env->kernels, "strict") == 0 ? " RP_STRICT_ARGS=" : "",
           strcmp(env->kernels, "strict") == 0 ? env->strict_args : "");
    printf("convolutions   %s\n",
           rp_kernels_get_conv_algorithm() == RP_CONV_DIRECT ? "direct (RP_CONV_ALGO=direct)"
           : dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core
               ? "Winograd for 3x3 stride 1 with >= 16 channels, direct otherwise"
               : "direct (this CPU has no AVX-512, which oneDNN's Winograd needs)");
    printf("bf16           %s - %s\n", rp_kernels_bf16_path(), rp_kernels_bf16_about());
    printf("MuJoCo         %s (replicator train d4pg --task T)\n", mj_versionString());
    for (int i = 0; i < rp_env_task_count(); i++)
        printf("  %s\n", rp_env_task_about(i));
    return 0;
}
