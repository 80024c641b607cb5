/*
 * config_options.c - the runtime's option table (rp_config_options()) and rp_config_from_args,
 * which takes those options out of a program's argv. Every field a user may set from the
 * command line is one row here; the parser, the help and the messages come from the rows.
 */
#include <stdlib.h>
#include <string.h>

#include "replicator/runtime.h"

_Static_assert(sizeof(rp_backend) == sizeof(int) && sizeof(rp_regime) == sizeof(int) &&
                   sizeof(rp_dtype) == sizeof(int) && sizeof(rp_strategy_kind) == sizeof(int),
               "the enum rows store an int");

static const int backends[] = {RP_BACKEND_THREADS, RP_BACKEND_MPI, RP_BACKEND_AUTO};
static const int regimes[] = {RP_REGIME_SYNC, RP_REGIME_ASYNC};
/* In rp_strategy_name()'s spelling. */
static const int strategies[] = {RP_STRATEGY_SYNC,  RP_STRATEGY_ASYNC, RP_STRATEGY_ZERO1,
                                 RP_STRATEGY_ZERO2, RP_STRATEGY_ZERO3, RP_STRATEGY_SYNC_GROUPS};
static const int dtypes[] = {RP_F32, RP_BF16};

/* --bucket-kb K: the field holds bytes. */
static bool parse_bucket_kb(const rp_option *opt, const char *value, void *dst)
{
    char *end;
    long long k = strtoll(value, &end, 10);
    if (end == value || *end || k < 1 || k > (1LL << 30)) return false;
    ((rp_config *)dst)->bucket_bytes = (size_t)k << 10;
    (void)opt;
    return true;
}

static const rp_option runtime_table[] = {
    RP_OPT_SECTION("runtime (rp_config_from_args):"),
    RP_OPT_ENUM(rp_config, backend, "--backend", "B", "threads|mpi|auto", backends, RP_OPT_RESUME,
                "threads, mpi or auto (default): MPI when started by mpirun or srun"),
    RP_OPT_ENUM(rp_config, strategy, "--strategy", "S", "sync|async|zero1|zero2|zero3|sync-groups",
                strategies, RP_OPT_RESUME,
                "how the replicas combine their work (default sync); the older\n"
                "spellings below (--regime, --zero, --sync-groups) still choose one"),
    RP_OPT_ENUM(rp_config, regime, "--regime", "R", "sync|async", regimes, RP_OPT_RESUME,
                "sync (default): gradients all-reduced every step; async: parameter servers"),
    RP_OPT_INT(rp_config, ps, "--ps", "S", 1, 256, RP_OPT_RESUME,
               "async: parameter servers (default 1)"),
    RP_OPT_INT(rp_config, staleness, "--staleness", "K", -1, 1 << 30, RP_OPT_RESUME,
               "async: at most K steps ahead of the slowest replica (default: unbounded)"),
    RP_OPT_INT(rp_config, replicas, "--replicas", "N", 1, 4096, RP_OPT_RESUME,
               "replicas in this process (under MPI: in each rank; default 1)"),
    RP_OPT_INT(rp_config, threads_per_replica, "--threads-per-replica", "T", 1, 1024, RP_OPT_RESUME,
               "kernel threads of each replica (default cores / replicas)"),
    RP_OPT_UINT64(rp_config, seed, "--seed", "S", 0, 0x7fffffff, 0, "rp_replica_seed()'s seed"),
    RP_OPT_DOUBLE(rp_config, timeout_s, "--comm-timeout", "SECONDS", 0, 1e300,
                  RP_OPT_RESUME | RP_OPT_ABOVE_LO,
                  "how long a replica waits for its peers (default $RP_COMM_TIMEOUT or 300)"),
    RP_OPT_CUSTOM(rp_config, bucket_bytes, sizeof(size_t), "--bucket-kb", "K", parse_bucket_kb,
                  RP_OPT_RESUME, "gradient all-reduce bucket size in KiB (default 1024)"),
    RP_OPT_INT(rp_config, checksum_every, "--checksum-every", "K", 0, 1 << 30, RP_OPT_RESUME,
               "verify every K steps that the replicas agree (0: never; default 100)"),
    RP_OPT_FLAG(rp_config, zero, "--zero", RP_OPT_RESUME,
                "sync: ZeRO-1, each replica keeps 1/N of the optimizer state"),
    RP_OPT_INT(rp_config, hsdp, "--hsdp", "G", 1, 4096, RP_OPT_RESUME,
               "ZeRO as HSDP: shard in groups of G replicas, replicate across them"),
    RP_OPT_FLAG(rp_config, keep_gathered, "--keep-gathered", RP_OPT_RESUME,
                "ZeRO-3: keep each unit gathered in forward until the update\n"
                "(no second gather in backward; every value held meanwhile)"),
    RP_OPT_FLAG(rp_config, prefetch, "--prefetch", RP_OPT_RESUME,
                "ZeRO-3: start gathering the next unit while this one computes\n"
                "(non-blocking messages; one more unit held)"),
    RP_OPT_INT(rp_config, sync_groups, "--sync-groups", "G", 1, 4096, RP_OPT_RESUME,
               "G groups in sync inside, asynchronous between them"),
    RP_OPT_ENUM(rp_config, precision, "--precision", "P", "f32|bf16", dtypes, RP_OPT_RESUME,
                "f32 (default) or bf16 compute (tensor.h)"),
    RP_OPT_ENUM(rp_config, grad_dtype, "--grad-dtype", "T", "f32|bf16", dtypes, RP_OPT_RESUME,
                "sync: the gradients' type on the wire, f32 (default) or bf16"),
    RP_OPTION_END,
};

const rp_option *rp_config_options(void)
{
    return runtime_table;
}

rp_status rp_config_from_args(rp_config *cfg, int *argc, char **argv)
{
    if (!cfg || !argc || !argv)
        return RP_ERROR(RP_ERR_INVALID, "rp_config_from_args: NULL config or argv");
    return rp_options_parse(runtime_table, cfg, argc, argv, RP_OPTIONS_KEEP_UNKNOWN, NULL, NULL);
}
