/*
 * replicator_internal.h - the replica and replicator structs, shared by the
 * runtime (replicator.c), the strategy tables (strategy_*.c) and their
 * common helpers (strategy.c).
 *
 * Who calls whom: replicator.c reaches a strategy only through its table
 * (strategy.h); a strategy uses the comm, ps and optim layers and the
 * helpers of strategy.c, never replicator.c. So no two runtime files call
 * each other.
 */
#ifndef RP_REPLICATOR_INTERNAL_H
#define RP_REPLICATOR_INTERNAL_H

#include <pthread.h>

#include "replicator/runtime.h"
#include "replicator/tensor.h"
#include "replicator/trace.h"

#define RP_REPORTS_MAX 32

typedef struct runtime_report {
    char name[32];
    int op; /* rp_reduce_op */
    double value;
} runtime_report;

struct strategy_table;
struct rp_ps_group;

/* What the runtime created (no strcmp on backend names). */
typedef enum {
    RP_LAYOUT_THREADS = 0, /* replicas are threads of this process */
    RP_LAYOUT_MPI,         /* one replica per MPI rank */
    RP_LAYOUT_HIER,        /* threads in each MPI rank */
} runtime_layout;

#define RP_COMMS_MAX 8 /* world, link, role, one per axis, and HSDP's two */

struct rp_replica {
    rp_replicator *r;
    int id, count; /* its replica (data coordinate) and the role's replicas */
    int local;     /* index in this process */
    rp_comm *comm; /* its data axis (the replicas); the same handle as world and role
                      comm when the job is one role of one-worker replicas */
    /* Topology (topology.c). */
    int worker, workers; /* in the job */
    int role;            /* index in r->roles */
    int coord[RP_AXES], shape[RP_AXES];
    rp_comm *axis[RP_AXES]; /* axis[RP_AXIS_DATA] == comm */
    rp_comm *role_comm, *world;
    rp_comm *link; /* every worker, between roles: not left at a run's end (see runtime.h) */
    rp_comm *owned[RP_COMMS_MAX]; /* the distinct handles, destroyed with the replica */
    int nowned;
    rp_comm *live[RP_COMMS_MAX]; /* those with peers: left and rejoined around each run */
    int nlive;
    /* A role started with rp_replicator_start(): its own thread until rp_replicator_wait(). */
    bool busy;
    pthread_t started;
    rp_replica_fn start_fn;
    void *start_arg;
    rp_tape *tape;
    void *user;
    pthread_t thread; /* replicas 1..N-1 */
    bool thread_started;
    /* The last run's outcome. */
    rp_status status;
    char error[1024];
    bool running;        /* inside fn (atomic), for the watchdog */
    uint64_t started_ns; /* rp_now_ns() when fn was called (atomic) */
    bool done;           /* finished the current run (under r->mu) */
    bool abandoned;      /* declared stuck by the watchdog: its thread is left running */
    bool exited;         /* an abandoned thread came back and ended (under r->mu) */
    /* Reports of the current run, and their reduction. */
    int64_t batches; /* rp_replica_next_batch() of lockstep replicas: this run's count */
    int nreports;
    runtime_report reports[RP_REPORTS_MAX];
    int64_t *gather;    /* [count * 2 * RP_REPORTS_MAX] scratch */
    double *bn_scratch; /* cross-replica batch norm: sums and n, grown once */
    int bn_cap;
    void *strategy; /* the strategy's per-replica state */
    /* Sync groups (strategy_groups.c): the replicas in sync with this one, else NULL, 0, 1. */
    rp_comm *group_comm;
    int group_rank, group_size;
    /* HSDP (cfg.hsdp, strategy_zero.c): the data axis cut into groups that shard the state
       (shard_comm) and the members across groups that hold the same shard (repl_comm); made
       by the replica's first ZeRO optimizer, else NULL. */
    rp_comm *shard_comm, *repl_comm;
    int blame; /* a failure agreed by the replicas names this replica (or -1) */
    /* This run: it stopped at a batch because another replica had failed (rt_stop_if_failed),
       so its error is an echo of that one's, never the run's cause. */
    bool stopped_for_peer;
};

struct rp_replicator {
    rp_config cfg;
    int n;
    rp_replica *reps; /* [n] */
    runtime_layout layout;
    const struct strategy_table *strategy; /* chosen once at create */
    void *strategy_state;                  /* the strategy's, per process */
    pthread_mutex_t mu;
    pthread_cond_t start, done, wake;
    uint64_t generation; /* bumped for each run */
    int finished;        /* replicas 1..N-1 done with the current run */
    bool quit;
    rp_replica_fn fn;
    void *arg;
    int nresults;
    runtime_report results[RP_REPORTS_MAX];
    double *each;        /* [RP_REPORTS_MAX][each_cap]: every replica's value of each result */
    int each_cap;        /* replicas it holds room for */
    int each_count;      /* replicas in the last run's results */
    int keeper;          /* the local worker whose reduced reports are kept (-1: none yet) */
    int64_t keeper_rank; /* its rank (replicator.c: keeper_rank): a better one replaces it */
    bool ran_here;       /* a worker of this process ran the last run */
    bool server;         /* this rank serves (a strategy's role), not a replica */
    int nroles;          /* the job's roles, placed (first filled in) */
    rp_role roles[RP_ROLES_MAX];
    int64_t claims;           /* rp_replica_claim() on threads: this run's next ticket */
    int failed_first;         /* this run: 1 + the id of the first local replica whose step
                                 failed, 0 while none has (atomic) */
    bool in_run;              /* between the start and the end of rp_replicator_run (under mu) */
    bool abandoned;           /* a replica thread was left stuck in user code (watchdog) */
    char abandoned_error[64]; /* which one */
    pthread_t watchdog;       /* cfg.stuck_exit only */
    bool watchdog_started;
    char flight_dir[4096]; /* where a failed run leaves the flight recorders ("": the log only) */
};

/* ---- topology (topology.c; calls only comm) --------------------------------------------- */

/* Checks cfg's roles and places them: out[] with every field filled, the job's worker count. */
/*
 * Threads per replica when none are given: the cores over the workers here (local workers x
 * MPI ranks on this host), at least 1 (rp_config_resolve and rp_replicator_create).
 */
int replicator_default_threads(int cores, int local_workers, int ranks_here);

rp_status runtime_topology_resolve(const rp_config *cfg, rp_role *out, int *nroles, int *workers);
/* The role and coordinates of rep->worker (rep->r->roles placed). */
void runtime_topology_assign(rp_replica *rep);
/*
 * Collective over the world (every worker, each on its own thread): the role and axis
 * communicators of rep from rep->world; then rep->comm, id and count are its data axis.
 * One-role, one-worker-per-member jobs split nothing (the world is the data axis).
 */
rp_status runtime_topology_split(rp_replica *rep);
/* Frees the handles rep owns. */
void runtime_topology_destroy(rp_replica *rep);

/* ---- the flight recorder's dumps (flight.c) ------------------------------------------------ */

/*
 * After a failed run (every replica done; the caller's thread): each local
 * worker that ran, but not one abandoned by the watchdog, writes the rings of
 * its communicators to <flight_dir>/flight-<worker>.txt and .jsonl and logs
 * its last calls. Never fails the caller: a file that cannot be written is a
 * warning, and the caller's last error is kept.
 */
void rt_flight_dump_workers(rp_replicator *r);

/*
 * The runtime's own collectives (report gathers, checksums, gradient buckets,
 * parameter broadcasts, creation barriers) are marked so that comm keeps them
 * out of the user's call numbers and names them in messages.
 */
static inline void rt_internal_begin(rp_comm *c, const char *what)
{
    rp_comm_begin_internal(c, what);
}
/* The runtime's checks and bookkeeping (report gathers, checksums, splits): counted apart from a
   step's traffic (rp_comm_stats' RP_COMM_HOUSEKEEPING). Ended by rt_internal_end. */
static inline void rt_housekeeping_begin(rp_comm *c, const char *what)
{
    rp_comm_begin_housekeeping(c, what);
}
static inline void rt_internal_end(rp_comm *c)
{
    rp_comm_end_internal(c);
}

#endif
