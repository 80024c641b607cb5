/*
 * env.c - the one place where replicator reads environment variables.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/core.h"

static rp_env env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static int parse_level(const char *s)
{
    if (!s) return RP_LOG_INFO;
    if (!strcmp(s, "debug")) return RP_LOG_DEBUG;
    if (!strcmp(s, "warn")) return RP_LOG_WARN;
    if (!strcmp(s, "error")) return RP_LOG_ERROR;
    if (!strcmp(s, "off")) return RP_LOG_OFF;
    return RP_LOG_INFO;
}

static void read_env(void)
{
    env.log_level = parse_level(getenv("RP_LOG_LEVEL"));
    const char *threads = getenv("RP_THREADS");
    env.threads = threads ? atoi(threads) : 0;
    if (env.threads < 0) env.threads = 0;
    const char *kernels = getenv("RP_KERNELS");
    env.kernels = (kernels && !strcmp(kernels, "ref"))      ? "ref"
                  : (kernels && !strcmp(kernels, "strict")) ? "strict"
                  : (kernels && !strcmp(kernels, "cuda"))   ? "cuda"
                                                            : "cpu";
    const char *data = getenv("RP_DATA_DIR");
    env.data_dir = data && *data ? data : "/usr/share/datasets/fashion-mnist";
    /* Set by OpenMPI's mpirun (and by PMI launchers such as Slurm's srun). */
    env.mpi_launched = getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    env.mpi_local_ranks = local && atoi(local) > 0 ? atoi(local) : 1;
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (!world) world = getenv("PMI_SIZE");
    env.mpi_world_size = world && atoi(world) > 0 ? atoi(world) : 1;
    const char *timeout = getenv("RP_COMM_TIMEOUT");
    env.comm_timeout = timeout ? atof(timeout) : 0;
    if (!(env.comm_timeout > 0)) env.comm_timeout = 300;
    /* The runtime's watchdog: end the process when a replica is stuck outside every collective. */
    const char *stuck = getenv("RP_STUCK_EXIT");
    env.stuck_exit = stuck && *stuck && strcmp(stuck, "0") != 0;
    env.stuck_exit_set = stuck && *stuck;
    /* The communicators' flight recorder: the last calls of each handle, dumped when a run fails.
     */
    const char *flight = getenv("RP_FLIGHT_ENTRIES");
    env.flight_entries = flight && *flight ? atoi(flight) : 64;
    if (env.flight_entries < 0) env.flight_entries = 0;
    if (env.flight_entries > (1 << 20)) env.flight_entries = 1 << 20;
    const char *algo = getenv("RP_CONV_ALGO");
    env.conv_algo = algo && !strcmp(algo, "direct") ? "direct" : "auto";
    /* Faults to inject into the communicators' calls (checked by src/comm/fault.c). */
    const char *faults = getenv("RP_FAULTS");
    env.faults = faults && *faults ? faults : NULL;
    /* Released arena memory filled with NaN (src/core/arena.c), for tests of the liveness plan. */
    const char *poison = getenv("RP_ARENA_POISON");
    env.arena_poison = poison && *poison && strcmp(poison, "0") != 0;
    /* The strict kernel table's check that kernels receive storage only (src/kernels/strict/). */
    const char *strict = getenv("RP_STRICT_ARGS");
    env.strict_args = strict && !strcmp(strict, "0")      ? "off"
                      : strict && !strcmp(strict, "warn") ? "warn"
                                                          : "abort";
}

const rp_env *rp_env_get(void)
{
    pthread_once(&env_once, read_env);
    return &env;
}

int rp_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

bool rp_cpu_bound(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 && rp_cpu_count() < online;
}
