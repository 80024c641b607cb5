/*
 * replicator/runtime.h - the replicator: N replicas of one program, the
 * replica context, cross-replica primitives and synchronous data-parallel
 * training.
 *
 * A user writes a step function once, as if for one device, and runs it on
 * every replica:
 *
 *     rp_config cfg = rp_config_default();
 *     cfg.replicas = 4;
 *     rp_replicator *r;
 *     rp_replicator_create(&r, &cfg);
 *     rp_replicator_run(r, build_fn, &job);     // each replica: model, optimizer, loader
 *     for (step = 0; step < steps; step++)
 *         rp_replicator_run(r, step_fn, &job);  // each replica: its shard of the batch
 *     rp_replicator_destroy(r);
 *
 * Inside a function a replica calls rp_all_reduce(), rp_all_gather(), ...
 * like any other op. The optimizer made by rp_replica_optimizer_create() is
 * an ordinary rp_optimizer whose rp_optimizer_step() averages the gradients
 * over the replicas first, so the step function is the same code for one
 * replica and for many.
 *
 * Layout: the replicas are threads of this process (the "threads" backend),
 * or MPI processes, chosen automatically under mpirun: one replica per rank
 * ("mpi"), or `replicas` threads in each rank ("mpi+threads", hierarchical:
 * collectives reduce inside each process first, then across ranks).
 * Local replica 0 runs on the thread that calls rp_replicator_run(), the others on
 * threads the replicator keeps for its lifetime (so per-thread caches, such
 * as oneDNN's primitives, survive from step to step). Each replica runs its
 * kernels on `threads_per_replica` threads.
 *
 * Every replica calls the same collectives in the same order (replicator/
 * comm.h): a violation, a replica that fails, or one that never arrives is
 * an error on every replica within the timeout, and rp_replicator_run()
 * returns the error that started it, never a hang.
 */
#ifndef REPLICATOR_RUNTIME_H
#define REPLICATOR_RUNTIME_H

#include "comm.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the replicas run. */
typedef enum {
    RP_BACKEND_AUTO = 0,  /* MPI when started by mpirun/srun (rp_comm_mpi_launched()), else threads */
    RP_BACKEND_THREADS,   /* `replicas` threads of this process */
    RP_BACKEND_MPI,       /* `replicas` threads in each MPI process (hierarchical when > 1) */
} rp_backend;

/* How the replicas combine their gradients. */
typedef enum {
    RP_REGIME_SYNC = 0,  /* all-reduced every step: the replicas stay identical */
    RP_REGIME_ASYNC,     /* pushed to parameter servers; each replica pulls fresh values and goes on */
} rp_regime;

/* ---- topology: roles, each a mesh of workers along named axes ------------------------ */

/* The axes of a role's mesh. A member (a replica) spans model x pipe workers. */
typedef enum {
    RP_AXIS_DATA = 0,  /* across the role's members (replicas): data parallelism */
    RP_AXIS_MODEL = 1, /* across one member's model-parallel workers */
    RP_AXIS_PIPE = 2,  /* across one member's pipeline stages */
} rp_axis;
#define RP_AXES 3
#define RP_ROLES_MAX 8

/*
 * One role of a job: `members` replicas (its data axis), each of `model` x
 * `pipe` workers. Worker w of the role (0 <= w < members*model*pipe) has
 * coordinates data = w / (model*pipe), pipe = w / model % pipe, model = w %
 * model: a member's model workers are adjacent, so they share a process
 * when the layout allows (tensor parallelism wants the fastest links).
 * Placement: the role's workers are the job's workers [first, first +
 * members*model*pipe); first = -1 (the default) places it right after the
 * previous role. The job's workers are numbered as comm numbers them:
 * threads backend, the threads of this process; MPI, rank r's thread t is
 * worker r*replicas + t.
 */
typedef struct rp_role {
    char name[32];  /* unique in the job, 1..31 characters */
    int members;    /* >= 1 */
    int model;      /* workers per member along the model axis; 0 means 1 */
    int pipe;       /* along the pipe axis; 0 means 1 */
    int first;      /* placement: the role's first worker, or -1 (after the previous role) */
} rp_role;

/* A role of `members` x `model` workers, placed after the previous one. */
rp_role rp_role_make(const char *name, int members, int model);

typedef struct rp_config {
    rp_backend backend;      /* default RP_BACKEND_AUTO */
    rp_regime regime;        /* default RP_REGIME_SYNC */
    int ps;                  /* async: parameter servers (threads: in-process shards; MPI: the last
                                `ps` ranks serve, the others are replicas); default 1 */
    int staleness;           /* async: at most this many steps ahead of the slowest replica; -1
                                (default): unbounded */
    int replicas;            /* >= 1, in this process (under MPI: in each rank); default 1 */
    int threads_per_replica; /* kernel threads of each replica; 0: cores / replicas (at least 1) */
    uint64_t seed;           /* rp_replica_seed(); default 0 */
    double timeout_s;        /* how long a replica waits for its peers; 0: $RP_COMM_TIMEOUT (300) */
    size_t bucket_bytes;     /* gradient all-reduce bucket size; default 1 MiB */
    int checksum_every;      /* verify every K optimizer steps that the replicas agree; 0: never; default 100 */
    size_t arena_bytes;      /* initial size of each replica's tape arena; 0: a default */
    int nroles;              /* 0 (default): one role "replica" of every worker on the data axis */
    rp_role roles[RP_ROLES_MAX]; /* the job's roles (see rp_role); threads backend: `replicas` is
                                    ignored and every worker is a thread here; MPI: `replicas`
                                    threads per rank, ranks x replicas = the roles' workers */
    bool stuck_exit;         /* a replica stuck outside every collective ends the process (exit
                                status RP_STUCK_EXIT_CODE) instead of failing the run; default
                                $RP_STUCK_EXIT (see rp_replicator_run: the watchdog) */
} rp_config;

/* The exit status of a process ended by cfg.stuck_exit (EX_SOFTWARE). */
#define RP_STUCK_EXIT_CODE 70

rp_config rp_config_default(void);

/*
 * Takes the runtime's options out of argv (shifting the rest down and
 * updating *argc): --backend threads|mpi|auto, --regime sync|async, --ps S, --staleness K,
 * --replicas N, --threads-per-replica T, --seed S,
 * --comm-timeout SECONDS, --bucket-kb K, --checksum-every K. Errors:
 * RP_ERR_INVALID naming the option and value.
 */
rp_status rp_config_from_args(rp_config *cfg, int *argc, char **argv);

typedef struct rp_replicator rp_replicator;
typedef struct rp_replica rp_replica;

/*
 * Starts the replicas' threads. Errors: RP_ERR_INVALID for a bad field
 * (named), RP_ERR_NOMEM, RP_ERR_BACKEND if a thread cannot be started.
 */
rp_status rp_replicator_create(rp_replicator **r, const rp_config *cfg);
/* Stops the threads and frees the replicas (not their user data). NULL is ignored. */
void rp_replicator_destroy(rp_replicator *r);

/* A function run on every replica; its return value is that replica's status. */
typedef rp_status (*rp_replica_fn)(rp_replica *rep, void *arg);

/*
 * Runs fn(replica, arg) on every replica at once and returns when all have
 * returned. Before fn, each replica's tape is reset (activations live for
 * one run). Afterwards the values reported with rp_replica_report() are
 * reduced across replicas (rp_replicator_result()).
 * Returns RP_OK if every replica returned RP_OK; otherwise the error of the
 * replica whose failure started it (its own error, not a peer's "replica 1
 * failed"), its message prefixed with the replica id when there are several. After an error in a
 * collective the replicas' communicator is broken and later runs that use it
 * fail at once: an error in run() ends the job.
 * Not re-entrant: call it from one thread, not from inside fn.
 */
rp_status rp_replicator_run(rp_replicator *r, rp_replica_fn fn, void *arg);

/*
 * Asynchronous training under MPI: the last cfg.ps ranks are parameter
 * servers, not replicas. On such a rank rp_replicator_is_server() is true
 * and the program calls rp_replicator_serve() instead of running replicas.
 */
bool rp_replicator_is_server(const rp_replicator *r);
/*
 * Serves the replicas' pushes and pulls until every replica's process has
 * destroyed its replicator. RP_ERR_INVALID on a replica's process.
 */
rp_status rp_replicator_serve(rp_replicator *r);

/* Replicas in the whole job (all processes). */
int rp_replicator_replicas(const rp_replicator *r);
/* Replicas in this process (the same as the above on the threads backend). */
int rp_replicator_local_replicas(const rp_replicator *r);
/* Kernel threads each replica runs on (set, or derived from the cores). */
int rp_replicator_threads_per_replica(const rp_replicator *r);
/* The backend in use ("threads", "mpi" or "mpi+threads"). */
const char *rp_replicator_backend(const rp_replicator *r);
/*
 * Local replica i (0 <= i < local replicas), e.g. to read its user data
 * between runs; NULL if out of range. Its rp_replica_id() is its id in the job.
 */
rp_replica *rp_replicator_replica(rp_replicator *r, int i);

/*
 * The value reported under `name` in the last run, reduced across replicas
 * with the op it was reported with. RP_ERR_INVALID if no such report.
 */
rp_status rp_replicator_result(const rp_replicator *r, const char *name, double *value);

/* ---- roles: long-lived functions --------------------------------------------------- */

/*
 * Starts fn(worker, arg) once on every worker of `role` held by this
 * process, each on a thread of its own, and returns without waiting: an
 * actor loop, a server loop, a learner that trains continuously. On a
 * process holding no worker of the role it does nothing (RP_OK), so one
 * program runs unchanged on threads and under mpirun. Until
 * rp_replicator_wait(r, role), rp_replicator_run() skips the role's workers
 * (it runs fn on the other roles' workers only). Each started worker's tape
 * is reset first; its reports are not reduced. When fn returns, the worker
 * leaves its communicators (its peers' collectives with it fail at once).
 * Call from the thread that calls rp_replicator_run(), not from inside a
 * function. Errors: RP_ERR_INVALID (NULL, an unknown role - the message lists
 * the job's roles -, a role already started, a replicator with a stuck
 * replica), RP_ERR_BACKEND (no thread: the workers started so far run on;
 * wait for them).
 */
rp_status rp_replicator_start(rp_replicator *r, const char *role, rp_replica_fn fn, void *arg);
/*
 * Waits until every worker of `role` in this process has returned from the
 * function started on it, and returns the error that started a failure
 * ("role 'actor', worker 3: ...", a worker's own error before a peer's
 * RP_ERR_COMM), or RP_OK (also when the role was not started here).
 * rp_replicator_destroy() waits for a started role that was not waited for.
 */
rp_status rp_replicator_wait(rp_replicator *r, const char *role);

/* The job's roles (placed: `first` filled in), 0 <= i < rp_replicator_roles(); NULL if out of range. */
int rp_replicator_roles(const rp_replicator *r);
const rp_role *rp_replicator_role(const rp_replicator *r, int i);

/* ---- the replica context (valid inside a run, and between runs) ------------------- */

/* The replica's id in the job (0 .. count-1) and the job's replica count. */
int rp_replica_id(const rp_replica *rep);
int rp_replica_count(const rp_replica *rep);
/* Its index among this process's replicas (what rp_replicator_replica() takes). */
int rp_replica_local_index(const rp_replica *rep);
uint64_t rp_replica_seed(const rp_replica *rep);
/* This replica's tape: reset at the start of each run. */
rp_tape *rp_replica_tape(rp_replica *rep);
/*
 * The communicator of the replicas: this worker's data axis (its role's
 * members with the same model and pipe coordinates), rank = its replica id.
 * Owned by the replicator; use it on this worker's thread only.
 */
rp_comm *rp_replica_comm(rp_replica *rep);

/*
 * Where this worker sits. A worker is one thread (threads backend), one MPI
 * rank, or one thread of a rank (mpi+threads); rp_replica is its context.
 *  - rp_replica_worker/workers: its index in the job and the job's count
 *    (the world communicator's rank and size);
 *  - rp_replica_role: its role's name (without roles: "replica", or
 *    "server" on an async parameter-server rank);
 *  - rp_replica_coord/axis_size: its coordinate on an axis and the axis's
 *    extent in its role (RP_AXIS_DATA: its replica id and the role's
 *    replicas, the same as rp_replica_id/count);
 *  - rp_replica_axis_comm: the checked communicator of the workers of its
 *    role that differ from it on that axis only, ranked by that coordinate
 *    (an axis of extent 1: a communicator of this worker alone);
 *  - rp_replica_role_comm: every worker of its role, ranked by worker index;
 *  - rp_replica_world_comm: every worker of the job, rank = worker index.
 * Several of these may be one handle (a one-role job of single-worker
 * replicas: world = role = data axis). The communicators are owned by the
 * replicator (valid until rp_replicator_destroy) and belong to this worker's
 * thread. Out-of-range axes give -1, 0 and NULL.
 */
int rp_replica_worker(const rp_replica *rep);
int rp_replica_workers(const rp_replica *rep);
const char *rp_replica_role(const rp_replica *rep);
int rp_replica_coord(const rp_replica *rep, rp_axis axis);
int rp_replica_axis_size(const rp_replica *rep, rp_axis axis);
rp_comm *rp_replica_axis_comm(rp_replica *rep, rp_axis axis);
rp_comm *rp_replica_role_comm(rp_replica *rep);
rp_comm *rp_replica_world_comm(rp_replica *rep);
/*
 * TF-Replicator's num_replicas_in_sync: the replicas whose gradients one
 * step combines synchronously - rp_replica_count() in sync training, 1 in
 * async (each replica steps alone). rp_replica_count() is num_replicas.
 */
int rp_replica_in_sync(const rp_replica *rep);
/* The user's per-replica state, NULL until set. */
void *rp_replica_user(const rp_replica *rep);
void rp_replica_set_user(rp_replica *rep, void *user);

/*
 * The input context (as TF-Replicator's): the replica's id and count, its
 * input pipeline (one per replica here) and the per-replica share of a
 * global batch. RP_ERR_INVALID if the replica count does not divide it.
 */
typedef struct rp_input_context {
    int replica, replicas;
    int pipeline, pipelines;
    int global_batch, per_replica_batch;
} rp_input_context;

rp_status rp_replica_input_context(const rp_replica *rep, int global_batch, rp_input_context *ctx);

/*
 * Reports a scalar for logging; at the end of the run the values of all
 * replicas are reduced with `op` (in replica order) and can be read with
 * rp_replicator_result(). Every replica must report the same names in the
 * same order (checked; a difference fails the run). At most 32 per run;
 * names up to 31 characters.
 */
rp_status rp_replica_report(rp_replica *rep, const char *name, double value, rp_reduce_op op);

/* ---- cross-replica primitives: rp_comm_* on the replica's communicator ------------ */

rp_status rp_all_reduce(rp_replica *rep, const void *send, void *recv, int64_t count,
                        rp_dtype dtype, rp_reduce_op op);
rp_status rp_reduce_scatter(rp_replica *rep, const void *send, void *recv, int64_t count,
                            rp_dtype dtype, rp_reduce_op op);
rp_status rp_all_gather(rp_replica *rep, const void *send, void *recv, int64_t count, rp_dtype dtype);
rp_status rp_broadcast(rp_replica *rep, void *buf, int64_t count, rp_dtype dtype, int root);
rp_status rp_barrier(rp_replica *rep);

/*
 * Cross-replica batch norm: an rp_bn_reduce_fn (tensor.h) whose ctx is the
 * rp_replica. Put it in rp_bn_params.reduce (or a model's bn_reduce) and the
 * layer's statistics cover the global batch: the per-channel sums (forward)
 * and gradient sums (backward) are all-reduced across replicas.
 */
rp_status rp_cross_replica_bn(double *sums, int count, double *n, void *rep);

/* ---- synchronous data parallelism --------------------------------------------------- */

/*
 * Creates this replica's optimizer for `params` (collective: every replica
 * calls it in the same run, with parameter lists of the same layout):
 *  - the values (parameters and buffers) are broadcast from replica 0, so
 *    every replica starts from the same model;
 *  - during rp_backward() on this replica's tape, gradients are all-reduced
 *    (mean over replicas) in buckets of cfg.bucket_bytes, each bucket as soon
 *    as all its gradients are final;
 *  - rp_optimizer_step() finishes the remaining buckets, then every replica
 *    applies the same update, so the replicas stay bitwise identical;
 *  - every checksum_every steps the trainable values are compared across
 *    replicas; a difference is RP_ERR_MISMATCH naming the first parameter
 *    that differs.
 * With one replica it is a plain optimizer. Destroy it with
 * rp_optimizer_destroy() (from inside a run or after the last one).
 */
rp_status rp_replica_optimizer_create(rp_replica *rep, rp_optimizer **opt, rp_params *params,
                                      const rp_optim_config *cfg);

/*
 * Copies replica 0's parameter values (and buffers) to every replica
 * (collective), e.g. after restoring a checkpoint on replica 0 only.
 */
rp_status rp_replica_broadcast_params(rp_replica *rep, rp_params *params);

/* ---- asynchronous training (cfg.regime = RP_REGIME_ASYNC) ----------------------------- */

/*
 * In the async regime rp_replica_optimizer_create() (still collective: every
 * replica, the same run) makes an optimizer whose variables live on the
 * parameter servers (replicator/ps.h): replica 0's initial values are loaded
 * into the servers, every replica pulls them, and each rp_optimizer_step()
 * pushes this replica's gradients with its learning rate and pulls the
 * current values into the parameter list, waiting there only if the
 * staleness bound says so. The servers apply the configured rule (SGD,
 * momentum, Adam) to each push. Replicas do not wait for each other, so the
 * step function must not call collectives (nor cross-replica batch norm):
 * each replica's buffers (batch-norm statistics) stay its own.
 * Async on MPI runs one replica per rank (RP_ERR_UNSUPPORTED otherwise).
 */

/*
 * Copies the servers' state into this replica's optimizer: the values
 * into its parameter list, the slots into rp_optimizer_state(), the step
 * count. Call it between runs' steps (no push in flight), e.g. before
 * evaluating or checkpointing replica 0's optimizer as in sync training.
 * A sync optimizer is left as it is (it holds the state already).
 */
rp_status rp_replica_optimizer_fetch(rp_replica *rep, rp_optimizer *opt);

/*
 * Collective: makes replica 0's optimizer state (parameter values, slots,
 * step count) the job's - async: loaded into the servers, then pulled by
 * every replica; sync: broadcast. For resuming a checkpoint read into
 * replica 0's (or every replica's) optimizer.
 */
rp_status rp_replica_optimizer_publish(rp_replica *rep, rp_optimizer *opt);

/*
 * A shared work queue for the replicas of one run: 0, 1, 2, ... each to
 * exactly one replica, across processes. Asynchronous replicas take batch
 * numbers this way, so a fast replica takes more batches than a slow one and
 * an epoch still covers every batch once. It restarts at 0 in each run.
 * Threads backend: always; MPI: in the async regime, after an optimizer was
 * created (server 0 counts); RP_ERR_UNSUPPORTED otherwise.
 */
rp_status rp_replica_claim(rp_replica *rep, int64_t *ticket);

#ifdef __cplusplus
}
#endif

#endif
