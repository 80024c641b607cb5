/*
 * replicator_internal.h - the replica and replicator structs, shared by the
 * runtime (replicator.c) and synchronous training (sync.c).
 */
#ifndef RP_REPLICATOR_INTERNAL_H
#define RP_REPLICATOR_INTERNAL_H

#include <pthread.h>

#include "replicator/runtime.h"
#include "replicator/tensor.h"

#define RP_REPORTS_MAX 32

typedef struct rp_report {
    char name[32];
    int op;       /* rp_reduce_op */
    double value;
} rp_report;

struct rp_sync;  /* sync.c: one per optimizer made by rp_replica_optimizer_create() */
struct rp_async; /* async.c: the same in the async regime */
struct rp_ps;
struct rp_ps_group;

#define RP_ASYNC_SETS_MAX 8

struct rp_replica {
    rp_replicator *r;
    int id, count;            /* in the job */
    int local;                /* index in this process */
    rp_comm *comm;
    rp_tape *tape;
    void *user;
    pthread_t thread;         /* replicas 1..N-1 */
    bool thread_started;
    /* The last run's outcome. */
    rp_status status;
    char error[1024];
    /* Reports of the current run, and their reduction. */
    int nreports;
    rp_report reports[RP_REPORTS_MAX];
    int64_t *gather;          /* [count * 2 * RP_REPORTS_MAX] scratch */
    /* Synchronous training. */
    struct rp_sync *syncs;    /* linked list */
    double *bn_scratch;       /* cross-replica batch norm: sums and n, grown once */
    int bn_cap;
    /* Asynchronous training. */
    struct rp_async *asyncs;  /* linked list, oldest last */
    unsigned async_slots;     /* bit k: an async optimizer alive in slot k (ps_sets[k]) */
};

struct rp_replicator {
    rp_config cfg;
    int n;
    rp_replica *reps;         /* [n] */
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    uint64_t generation;      /* bumped for each run */
    int finished;             /* replicas 1..N-1 done with the current run */
    bool quit;
    rp_replica_fn fn;
    void *arg;
    int nresults;
    rp_report results[RP_REPORTS_MAX];
    /* Asynchronous training. */
    struct rp_ps_group *ps_group; /* MPI: the server and worker ranks (NULL on threads) */
    bool server;                  /* this rank is a parameter server */
    struct rp_ps **ps_sets[RP_ASYNC_SETS_MAX]; /* threads: each set's handles, [n], until taken */
    int64_t claims;               /* rp_replica_claim() without servers: this run's next ticket */
};

/* Async (async.c): join each async set's phase as a replica starts a run, leave as it returns. */
void rp_async_join(rp_replica *rep, uint64_t phase);
void rp_async_leave(rp_replica *rep);
rp_status rp_async_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                    const rp_optim_config *cfg);

/* The tape's gradient-ready callback (sync.c); ctx is the rp_replica. */
void rp_sync_on_grad_ready(rp_tensor *param, void *ctx);

#endif
