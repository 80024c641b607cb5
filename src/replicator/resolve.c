/*
 * resolve.c - rp_config_resolve: the one home of the layout rules - the automatic replica
 * count, the MPI world's arithmetic (ranks x threads, workers per replica, the servers a sync
 * group's world leaves out) and the kernel threads each replica gets. Every command and any
 * program calls it before rp_replicator_create; the runtime's own default for threads per
 * replica (rp_replicator_create with 0) is replicator_default_threads below, the same rule.
 */
#include <string.h>

#include "replicator/env.h"
#include "replicator/kernels.h"
#include "replicator/runtime.h"
#include "replicator_internal.h"

int replicator_default_threads(int cores, int local_workers, int ranks_here)
{
    int workers = local_workers * (ranks_here > 0 ? ranks_here : 1);
    int t = workers > 0 ? cores / workers : cores;
    return t > 0 ? t : 1;
}

rp_job_shape rp_job_shape_default(void)
{
    rp_job_shape l;
    memset(&l, 0, sizeof l);
    return l;
}

rp_status rp_config_resolve(rp_config *cfg, rp_job_shape *layout)
{
    if (!cfg || !layout) return RP_ERROR(RP_ERR_INVALID, "rp_config_resolve: NULL argument");
    const rp_env *env = rp_env_get();
    bool launched = rp_comm_mpi_launched();
    /* Under mpirun (or srun): one replica per rank, or cfg->replicas threads in each. */
    bool mpi = cfg->backend == RP_BACKEND_MPI || (cfg->backend == RP_BACKEND_AUTO && launched);
    if (!mpi && launched && env->mpi_world_size > 1)
        return RP_ERROR(
            RP_ERR_INVALID,
            "--backend threads under mpirun with %d ranks: every rank would "
            "train alone and write the same run directory; start one process, or use the "
            "MPI backend",
            env->mpi_world_size);
    bool async = cfg->regime == RP_REGIME_ASYNC;
    /* Workers per replica: its stages (logical devices) x its tensor-parallel workers. */
    int stages = layout->stages > 1 ? layout->stages : 1,
        tp = layout->tensor_parallel > 1 ? layout->tensor_parallel : 1, span = stages * tp;
    int replicas = cfg->replicas;
    if (mpi && (replicas <= 0 || layout->replicas_from_run)) replicas = 1;
    int per_rank = replicas; /* under MPI: workers (threads) in each rank */
    if (mpi && span > 1) {
        /* The ranks' threads are the job's workers; a replica spans `span` of them. */
        int workers = env->mpi_world_size * per_rank;
        if (workers % span != 0)
            return RP_ERROR(RP_ERR_INVALID,
                            "%d workers (%d ranks x %d) do not make replicas of %d workers "
                            "(--model-parallel %d x --tensor-parallel %d): use a multiple of %d "
                            "workers",
                            workers, env->mpi_world_size, per_rank, span, stages, tp, span);
        replicas = workers / span;
    }
    int groups = cfg->sync_groups > 1 ? cfg->sync_groups : 1;
    if (replicas <= 0) {
        /* Auto: one worker per kernel thread (or per threads_per_replica threads), as many
           replicas as divide the batch; with sync groups a multiple of the groups (at least one
           each). */
        int total = rp_kernels_get_threads(),
            tpr = cfg->threads_per_replica > 0 ? cfg->threads_per_replica : 1;
        replicas = total / tpr / span > 0 ? total / tpr / span : 1;
        replicas = replicas > groups ? replicas / groups * groups : groups;
        while (!async && layout->batch > 0 && replicas > groups &&
               layout->batch % (replicas / groups) != 0)
            replicas -= groups;
    }
    /* The job's replicas: under MPI with sync groups, the ranks less the parameter servers (the
       runtime refuses more than one replica per rank there, and too many servers). */
    int job = mpi && groups > 1 ? (env->mpi_world_size - cfg->ps) * per_rank : replicas;
    if (job > 0 && job % groups != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "--sync-groups %d does not divide the %d replicas%s: every group needs "
                        "the same number of replicas",
                        groups, job, mpi && groups > 1 ? " (the ranks less --ps)" : "");
    if (!async && layout->batch > 0 && job > 0 && layout->batch % (job / groups) != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas%s",
                        layout->batch, job / groups, groups > 1 ? " (a sync group)" : "");
    cfg->backend = mpi ? RP_BACKEND_MPI : RP_BACKEND_THREADS;
    cfg->replicas = mpi && span > 1 ? per_rank : replicas;
    if (span > 1) {
        /* One role: replicas on the data axis, each of `stages` stages on the pipe axis and
           `tp` tensor-parallel workers on the model axis (adjacent: the fastest links). */
        cfg->nroles = 1;
        cfg->roles[0] = rp_role_make("replica", replicas, tp);
        cfg->roles[0].pipe = stages;
    }
    /* Under MPI the runtime divides the cores among the ranks on this host (at create, where it
       knows them), unless the threads in all are given. */
    int local_workers = mpi ? per_rank : replicas * span;
    if (!cfg->threads_per_replica && (!mpi || layout->threads > 0))
        cfg->threads_per_replica = replicator_default_threads(
            layout->threads > 0 ? layout->threads : rp_kernels_get_threads(), local_workers, 1);
    layout->replicas = replicas;
    return RP_OK;
}
