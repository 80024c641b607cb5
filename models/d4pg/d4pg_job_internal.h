/*
 * models/d4pg/d4pg_job_internal.h - the job's context, shared by its files:
 * d4pg_job.c (configuration, the trainer's callbacks, evaluation, the
 * curve), d4pg_replay.c (the replay role) and d4pg_actor.c (the actor role).
 */
#ifndef RP_MODELS_D4PG_JOB_INTERNAL_H
#define RP_MODELS_D4PG_JOB_INTERNAL_H

#include "models/d4pg/d4pg_job.h"

struct rp_d4pg_job {
    rp_d4pg_job_config cfg;
    char run_dir[4096]; /* up to PATH_MAX */
    /* Where the roles sit in the job (workers in role order: learners, actors, the replay). */
    int first_actor, replay_worker;
    /* Counters the run resumes from (0 for a new run). */
    int64_t resume_env_steps, resume_episodes, resume_learner_steps;
    /* What learner replica 0 last heard from the replay (main thread reads between runs). */
    int64_t env_steps, episodes, held;
    double recent_return;
    double t_start; /* rp_now_s() when the job was made: evaluations record the wall time since */
    /* Evaluation returns against env steps: the learning curve. */
    double *curve_x, *curve_y;
    int curve_n, curve_cap;
};

/* The started roles' functions (arg: the job). */
rp_status rp_d4pg_replay_main(rp_replica *rep, void *arg);
rp_status rp_d4pg_actor_main(rp_replica *rep, void *arg);

/* The seed of episode `episode` of environment slot `slot` (an actor's env, or an evaluation). */
uint64_t rp_d4pg_episode_seed(uint64_t seed, uint64_t slot, uint64_t episode);

#endif
