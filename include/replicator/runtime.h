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
 * returns the error that started it, never a hang. The runtime's own
 * collectives (the report gather at the end of a run, checksums, gradient
 * buckets, broadcasts) are not numbered among the user's: a replica that
 * skips a user call is reported as "replica 3 ended its step without
 * calling all_reduce #2".
 *
 * Topology. A job is a list of roles (rp_role), each a mesh of workers
 * along the axes data, model and pipe; a worker is a thread, an MPI rank or
 * a thread in a rank, and an rp_replica is its context: its role, its
 * coordinates, and a checked communicator for each axis, its role and the
 * world (rp_replica_axis_comm ...). Without roles (the default) the job is
 * one role "replica" of single-worker members: today's layouts, unchanged.
 * A role runs run(fn) steps, or one long-lived function
 * (rp_replicator_start / rp_replicator_wait): an actor loop, a server loop.
 *
 * Strategies. How replicas combine gradients is one choice, cfg.strategy
 * (rp_strategy_kind: sync all-reduce over the data axis, async parameter
 * servers, ZeRO-1 - sync with the optimizer state sharded - and sync groups
 * of replicas that all-reduce inside the group and meet the other groups
 * only at the parameter servers, TF-Replicator's RFC's sync groups), made
 * once at create;
 * the optimizer it wraps composes with other hooks (optim.h:
 * rp_optimizer_add_hooks), so clipping, an EMA or tracing stack on it.
 *
 * Teardown order (anything else is an error with a message, not a crash):
 *  1. destroy the optimizers made by rp_replica_optimizer_create(), inside a
 *     last run or between runs (rp_replicator_destroy() with one alive
 *     records RP_ERR_INVALID in rp_last_error(); the optimizer then fails
 *     every step with RP_ERR_INVALID, and rp_optimizer_destroy() still
 *     frees it safely);
 *  2. free the user's per-replica data that a tape may still refer to
 *     (parameter lists) inside a run - the tape was reset at its start - or
 *     after step 3, never between runs (a tape that recorded a forward pass
 *     without a backward pass refers to the parameters until it is reset);
 *  3. rp_replicator_destroy(): stops the threads, waits for started roles,
 *     frees the replicas, tapes and communicators (not the user data).
 */
#ifndef REPLICATOR_RUNTIME_H
#define REPLICATOR_RUNTIME_H

#include "comm.h"
#include "io.h"
#include "optim.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the replicas run. */
typedef enum {
    RP_BACKEND_AUTO =
        0,              /* MPI when started by mpirun/srun (rp_comm_mpi_launched()), else threads */
    RP_BACKEND_THREADS, /* `replicas` threads of this process */
    RP_BACKEND_MPI,     /* `replicas` threads in each MPI process (hierarchical when > 1) */
} rp_backend;

/*
 * How the replicas combine their work: one choice, cfg.strategy, made once at
 * rp_replicator_create() (each is a table of the runtime's). The older fields are spellings of
 * it and are still accepted: cfg.regime = RP_REGIME_ASYNC means RP_STRATEGY_ASYNC, cfg.zero =
 * true RP_STRATEGY_ZERO1, and cfg.sync_groups = G >= 2 RP_STRATEGY_SYNC_GROUPS (of G groups).
 * cfg.strategy and a spelling that names another strategy are refused (RP_ERR_INVALID).
 */
typedef enum {
    RP_STRATEGY_SYNC = 0,  /* the gradients' mean all-reduced every step: the replicas stay
                              identical */
    RP_STRATEGY_ASYNC = 1, /* parameter servers: each replica pushes its gradients, pulls fresh
                              values and goes on */
    RP_STRATEGY_ZERO1 = 2, /* sync, each replica keeping the optimizer state of 1/N of the values
                              (see "ZeRO-1" below) */
    RP_STRATEGY_SYNC_GROUPS = 3, /* cfg.sync_groups groups, sync inside, parameter servers between
                                    (see "Sync groups" below) */
    RP_STRATEGY_ZERO2 = 4,       /* ZeRO-1, and each replica keeps only its shard of the reduced
                                    gradients (see "ZeRO-1" below) */
    RP_STRATEGY_ZERO3 = 5,       /* ZeRO-2, and each replica keeps only its shard of the values
                                    between uses (see "ZeRO-3" below) */
} rp_strategy_kind;
#define RP_STRATEGIES 6

/* The older spelling of RP_STRATEGY_SYNC and RP_STRATEGY_ASYNC (cfg.regime). */
typedef enum {
    RP_REGIME_SYNC = 0, /* all-reduced every step: the replicas stay identical */
    RP_REGIME_ASYNC, /* pushed to parameter servers; each replica pulls fresh values and goes on */
} rp_regime;

/* ---- topology: roles, each a mesh of workers along named axes ------------------------ */

/* The axes of a role's mesh. A member (a replica) spans model x pipe workers. */
typedef enum {
    RP_AXIS_DATA = 0,  /* across the role's members (replicas): data parallelism */
    RP_AXIS_MODEL = 1, /* across one member's model-parallel workers */
    RP_AXIS_PIPE = 2,  /* across one member's pipeline stages */
} rp_axis;
#define RP_AXES      3
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
    char name[32]; /* unique in the job, 1..31 characters */
    int members;   /* >= 1 */
    int model;     /* workers per member along the model axis; 0 means 1 */
    int pipe;      /* along the pipe axis; 0 means 1 */
    int first;     /* placement: the role's first worker, or -1 (after the previous role) */
} rp_role;

/* A role of `members` x `model` workers, placed after the previous one. */
RP_API rp_role rp_role_make(const char *name, int members, int model);

typedef struct rp_config {
    rp_backend backend;        /* default RP_BACKEND_AUTO */
    rp_strategy_kind strategy; /* default RP_STRATEGY_SYNC (see rp_strategy_kind) */
    rp_regime regime;          /* older spelling: RP_REGIME_ASYNC is RP_STRATEGY_ASYNC */
    int ps;                  /* async: parameter servers (threads: in-process shards; MPI: the last
                                `ps` ranks serve, the others are replicas); default 1 */
    int staleness;           /* async: at most this many steps ahead of the slowest replica; -1
                                (default): unbounded */
    int replicas;            /* >= 1, in this process (under MPI: in each rank); default 1 */
    int threads_per_replica; /* kernel threads of each replica; 0: cores / replicas (at least 1) */
    uint64_t seed;           /* rp_replica_seed(); default 0 */
    double timeout_s;        /* how long a replica waits for its peers; 0: $RP_COMM_TIMEOUT (300) */
    size_t bucket_bytes;     /* gradient all-reduce bucket size; default 1 MiB */
    int checksum_every; /* verify every K optimizer steps that the replicas agree; 0: never; default
                           100 */
    size_t arena_bytes; /* initial size of each replica's tape arena; 0: a default */
    rp_dtype precision; /* RP_F32 (default) or RP_BF16: each replica's tape gets
                           rp_precision_policy_make(precision) (tensor.h: convolutions, linear
                           layers and matmuls multiply in bf16; the rest, and every stored
                           tensor, stay f32); a step may change its tape's policy */
    int nroles;         /* 0 (default): one role "replica" of every worker on the data axis */
    rp_role roles[RP_ROLES_MAX]; /* the job's roles (see rp_role); threads backend: `replicas` is
                                    ignored and every worker is a thread here; MPI: `replicas`
                                    threads per rank, ranks x replicas = the roles' workers */
    bool stuck_exit;             /* a replica stuck outside every collective ends the process (exit
                                    status RP_STUCK_EXIT_CODE) instead of failing the run; default
                                    $RP_STUCK_EXIT (see rp_replicator_run: the watchdog) */
    bool zero;                   /* older spelling: true is RP_STRATEGY_ZERO1; default false */
    int sync_groups; /* RP_STRATEGY_SYNC_GROUPS' G >= 2 groups of replicas/G, in sync inside a
                        group and asynchronous between groups through `ps` parameter servers
                        (see "Sync groups" below); must divide the job's replicas (under MPI: the
                        ranks less the servers); G = replicas is async training. Also its older
                        spelling: G >= 2 with strategy RP_STRATEGY_SYNC means the sync groups;
                        0 or 1 (default): off */
    /*
     * sync only: the type of the gradients on the wire (their mean across replicas, in the sync
     * strategy's buckets, ZeRO's reductions and a sync group's all-reduce). RP_F32
     * (default) or RP_BF16: each bucket is rounded to bf16 (nearest even), reduced with f32
     * accumulation and rounded once more (comm.h: "bf16 payloads"), and the optimizer sees
     * the widened result: half the gradient bytes, the replicas still bitwise identical, each
     * gradient off by at most about 2^-8 of its size (two bf16 roundings). Buckets keep their
     * size in f32 bytes (bucket_bytes). It is also every replica tape's gradient wire
     * (rp_tape_set_grad_wire, tensor.h): the differentiable collectives' backward reductions -
     * tensor parallelism's all-reduce of its input's gradient - go in bf16 too. Other types
     * are RP_ERR_INVALID.
     */
    rp_dtype grad_dtype;
    /*
     * ZeRO (RP_STRATEGY_ZERO1, _ZERO2) as HSDP, hybrid sharding on a 2-D data mesh: the
     * replicas form groups of `hsdp` consecutive ones (data_shard) and the state is sharded
     * inside a group and replicated across the groups (data_replicate): a step reduces the
     * gradients in the group (ZeRO-1's reduce-scatter or ZeRO-2's all-reduce), all-reduces each
     * member's shard across the groups (the members that hold the same shard), updates it and
     * all-gathers the values in the group. Each replica keeps 1/hsdp of the state. Must divide
     * the replicas; 0, 1 or the replica count (default 0): shard over every replica. Other
     * strategies refuse it (RP_ERR_INVALID). See "HSDP" in docs/distributed.md.
     */
    int hsdp;
    /*
     * ZeRO-3 (RP_STRATEGY_ZERO3): a unit of values gathered in forward stays until the step's
     * update (FSDP's reshard_after_forward=False): backward gathers nothing again (half the
     * gather traffic), at the cost of holding every value from the end of forward to the
     * update, as ZeRO-2 does; between steps each replica still holds its shard only. Default
     * false: units are released as the step moves on and gathered again in backward. Other
     * strategies refuse it (RP_ERR_INVALID).
     */
    bool keep_gathered;
    /*
     * ZeRO-3: while training, the gather of the unit the step asks for next (forward: the next
     * layer's; backward: the one before) starts as soon as this one is used, by non-blocking
     * messages, and is waited for when the step asks for it (FSDP's forward_prefetch and
     * backward_prefetch): the step computes while the values come, and a replica no longer
     * meets every other at each gather. One more gather buffer (a unit) is held, for the unit
     * in flight. Where the kernels' storage is not host memory it is ignored (each gather
     * blocks). Default false. Other strategies refuse it (RP_ERR_INVALID).
     */
    bool prefetch;
} rp_config;

/* The exit status of a process ended by cfg.stuck_exit (EX_SOFTWARE). */
#define RP_STUCK_EXIT_CODE 70

RP_API rp_config rp_config_default(void);

/*
 * The strategy cfg chooses: cfg->strategy, or the one an older spelling names (regime async,
 * zero, sync_groups >= 2) when cfg->strategy is RP_STRATEGY_SYNC. Whether the choice is valid is
 * rp_replicator_create()'s to say. RP_STRATEGY_SYNC for NULL.
 */
RP_API rp_strategy_kind rp_config_strategy(const rp_config *cfg);

/* "sync", "async", "zero1", "sync-groups", "zero2" (as --strategy takes them); "?" for another
   value. */
RP_API const char *rp_strategy_name(rp_strategy_kind strategy);

/*
 * The runtime's options (replicator/options.h), one row each: --backend threads|mpi|auto,
 * --strategy sync|async|zero1|zero2|sync-groups, --regime sync|async, --ps S, --staleness K,
 * --replicas N, --threads-per-replica T, --seed S,
 * --comm-timeout SECONDS, --bucket-kb K, --checksum-every K, --zero, --sync-groups G,
 * --precision f32|bf16, --grad-dtype f32|bf16, over the fields of rp_config. A program prints
 * them with rp_options_print_help(stdout, rp_config_options()).
 */
RP_API const rp_option *rp_config_options(void);

/*
 * Takes the runtime's options (rp_config_options()) out of argv, shifting the rest down in their
 * order and updating *argc. Errors: RP_ERR_INVALID naming the option and value ("--replicas 0:
 * expected an integer in [1, 4096]").
 */
RP_API rp_status rp_config_from_args(rp_config *cfg, int *argc, char **argv);

/*
 * What rp_config_resolve needs besides the config: the job's shape as a command sees it.
 * Start from rp_job_shape_default() (all 0: one worker per replica, no batch check).
 */
typedef struct rp_job_shape {
    int threads;         /* kernel threads in all in this process (0: rp_kernels_get_threads()) */
    int batch;           /* the global batch a synchronous step splits (0: not checked) */
    int stages;          /* pipeline stages per replica (0, 1: none) */
    int tensor_parallel; /* tensor-parallel workers per stage (0, 1: none) */
    bool replicas_from_run; /* cfg->replicas is a saved run's count, not this invocation's: under
                               MPI it gives way to one replica per rank */
    int replicas;           /* out: the job's replicas (under MPI with stages or tensor
                               parallelism: in all; otherwise as cfg->replicas) */
} rp_job_shape;

RP_API rp_job_shape rp_job_shape_default(void);

/*
 * The layout rules, in one place: settles cfg->backend (AUTO: MPI when started by mpirun or
 * srun), cfg->replicas (0: automatic, one worker per kernel thread - or per
 * threads_per_replica threads - as many as divide layout->batch, a multiple of the sync
 * groups; under MPI one per rank unless given), one role of replicas x stages x
 * tensor_parallel workers when a replica spans several, and cfg->threads_per_replica (0:
 * the threads in all / this process's workers; under MPI left to rp_replicator_create, which
 * also divides by the ranks on this host, unless layout->threads is given). Call it before
 * rp_replicator_create; every command does. Errors: RP_ERR_INVALID - the threads backend under
 * mpirun with several ranks, workers that do not make whole replicas, sync groups that do not
 * divide the replicas, a batch that does not split across them.
 */
RP_API rp_status rp_config_resolve(rp_config *cfg, rp_job_shape *layout);

typedef struct rp_replicator rp_replicator;
typedef struct rp_replica rp_replica;

/*
 * Starts the replicas' threads. Errors: RP_ERR_INVALID for a bad field
 * (named), RP_ERR_NOMEM, RP_ERR_BACKEND if a thread cannot be started.
 */
RP_API rp_status rp_replicator_create(rp_replicator **r, const rp_config *cfg);
/*
 * Stops the threads and frees the replicas (not their user data); see the
 * teardown order above. A role started and not waited for, here or (under
 * MPI) on another rank: the workers here that are not in one first leave
 * their communicators for good (the link too; under MPI always, since a
 * role started elsewhere is not seen from here), so a started function's
 * next send to them, or a receive from them, fails at once with
 * RP_ERR_COMM ("worker 0 has left (COMM: worker 0's replicator was
 * destroyed): send (tag 3, ...) from worker 1 to it would never be
 * received"; under MPI the workers are named with their rank and host) -
 * an actor sending in a loop ends, whichever rank it runs on; then destroy
 * waits for the started threads here at most the timeout (cfg.timeout_s,
 * at least 2 s). One still running then (a loop that makes no comm call)
 * is named in the log and in rp_last_error() (RP_ERR_TIMEOUT,
 * "rp_replicator_destroy: role 'actor', worker 1 did not return from its
 * started function within 2 s ..."), its thread is detached and the
 * replicator's memory is left allocated, as for a stuck replica below.
 * Stopping the roles and rp_replicator_wait() for them before destroy is
 * still the clean way: their results and errors are theirs. With
 * replica optimizers still alive it detaches them and records RP_ERR_INVALID
 * ("replica 0 still had 1 optimizer(s) ... destroy them first") in
 * rp_last_error(). After the watchdog abandoned a stuck replica it waits
 * 2 s for that thread to come back; if it does not, the thread is detached
 * and the replicator's memory is left allocated (freeing it under a thread
 * that may still return would crash it). NULL is ignored.
 */
RP_API void rp_replicator_destroy(rp_replicator *r);

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
 * fail at once: an error in run() ends the job. A failure the replicas
 * agree on names the replica that caused it: a non-finite gradient is
 * "replica 2: replica 2's own gradient of parameter 'fc.weight' held nan
 * ... before the all-reduce" (RP_ERR_NUMERIC, nothing updated).
 * In a mesh or a job of roles the message names workers, prefix included
 * ("worker 3: ..."), and the communicator a call failed on ("data axis:
 * worker 1 ended its step ..."; the runtime names each worker's data, model
 * and pipe axes, role, world and link: rp_comm_set_name). When every worker
 * of a role ran in this process and exactly one made other user
 * collectives than all the others, counted per axis (a call on the wrong
 * axis, or one skipped), that worker is named first: "worker 3: worker 3
 * made other collective calls than every other worker of role 'replica'
 * (user collectives on each axis in this step - worker 3: data 1, model 0;
 * each other worker: data 0, model 1): a call on the wrong axis, or one
 * skipped (the data axis reported: ...)" - the axis alone cannot tell,
 * when two workers meet on it, which of them erred.
 * With roles, fn runs on every worker except those of a started role
 * (rp_replicator_start); the reports are reduced over each worker's data
 * axis, and rp_replicator_result() gives those of one worker of this
 * process (the last stage's in a mesh: see there).
 *
 * Divergence by a plain optimizer: when the replicas must stay identical
 * (sync), an rp_optimizer_create() optimizer stepped inside the run (on the
 * replica's thread, up to 8 per replica) has its parameter values hashed and
 * compared in the run's report gather (no extra collective); replicas that
 * differ fail the run with RP_ERR_MISMATCH ("the replicas diverged: ... make
 * it with rp_replica_optimizer_create()"). A plain optimizer whose replicas
 * stay equal (the user all-reduced the gradients) passes.
 *
 * The watchdog: a replica stuck in its own code (in no collective) cannot
 * be ended by comm's timeout; its peers time out waiting and return. If a
 * local replica has then been in fn longer than the timeout, and is still
 * there one more timeout (at least 2 s) after a peer's failure - a replica
 * in a collective fails at once when its peers leave - run() returns
 * RP_ERR_TIMEOUT: "replica 1 has been in its step function for 30 s and did
 * not reach a collective; its peers timed out waiting". A thread cannot be
 * killed: it is abandoned, left running whatever it runs; its replica, tape
 * and communicators stay valid for it; should it return, it ends. The
 * replicator refuses later runs (RP_ERR_INVALID); destroy it. The watchdog
 * sees the replicas of this process: local replica 0 runs on the caller's
 * thread, so if it is the stuck one run() cannot return - then, and for a
 * replica that can never return, set cfg.stuck_exit (or RP_STUCK_EXIT=1):
 * a watchdog thread logs the same message and ends the process with exit
 * status RP_STUCK_EXIT_CODE (MPI_Abort under MPI, ending the job). Under
 * MPI with one replica per rank the stuck rank's peers are in other
 * processes: they report it by name (timeout) and the program ends the job
 * (rp_comm_mpi_abort), as the CLI does.
 * Not re-entrant: call it from one thread, not from inside fn.
 */
RP_API rp_status rp_replicator_run(rp_replicator *r, rp_replica_fn fn, void *arg);

/*
 * The flight recorder's directory (replicator/comm.h: every communicator
 * handle keeps its last calls). When rp_replicator_run() fails, each of
 * this process's workers that ran writes the rings of its communicators to
 * <dir>/flight-<worker>.txt (a table, oldest call first) and
 * flight-<worker>.jsonl (JSON lines), <worker> its job-wide index, and logs
 * its last calls (one error line per worker, with the file's path). Under
 * MPI every rank whose run failed writes its own workers' files. NULL or ""
 * (the default): the log lines only. The directory is created if missing
 * (one level); a file that cannot be written is a warning, never a new
 * error. The trainer sets its run directory. dir is copied. Errors:
 * RP_ERR_INVALID (NULL r, dir of 4000 bytes or more).
 */
RP_API rp_status rp_replicator_set_flight_dir(rp_replicator *r, const char *dir);

/*
 * Asynchronous training under MPI: the last cfg.ps ranks are parameter
 * servers, not replicas. On such a rank rp_replicator_is_server() is true
 * and the program calls rp_replicator_serve() instead of running replicas.
 */
RP_API bool rp_replicator_is_server(const rp_replicator *r);
/*
 * Serves the replicas' pushes and pulls until every replica's process has
 * destroyed its replicator. RP_ERR_INVALID on a replica's process.
 */
RP_API rp_status rp_replicator_serve(rp_replicator *r);

/* Replicas in the whole job (all processes). */
RP_API int rp_replicator_replicas(const rp_replicator *r);
/* Replicas in this process (the same as the above on the threads backend). */
RP_API int rp_replicator_local_replicas(const rp_replicator *r);
/* Kernel threads each replica runs on (set, or derived from the cores). */
RP_API int rp_replicator_threads_per_replica(const rp_replicator *r);
/* The backend in use ("threads", "mpi" or "mpi+threads"). */
RP_API const char *rp_replicator_backend(const rp_replicator *r);
/*
 * Local replica i (0 <= i < local replicas), e.g. to read its user data
 * between runs; NULL if out of range. Its rp_replica_id() is its id in the job.
 */
RP_API rp_replica *rp_replicator_replica(rp_replicator *r, int i);

/*
 * The value reported under `name` in the last run, reduced across replicas
 * with the op it was reported with. The reports are reduced over each
 * worker's data axis, so in a mesh each model or pipeline position has its
 * own; the result is that of this process's worker that ranks first among
 * those that reported anything: the first role, then the last pipeline
 * stage and the last model worker (where a model's loss is known), then the
 * first worker. So a loss reported by the last stage only is found on the
 * process holding it. RP_ERR_INVALID if no such report - also on a process
 * whose workers all ran a started role during the run (under MPI, a rank
 * holding only actors): "no worker of this process ran the last run"; read
 * the results on a process whose workers reported (rp_replicator_is_leader).
 */
RP_API rp_status rp_replicator_result(const rp_replicator *r, const char *name, double *value);

/*
 * Every replica's own value of the report `name` in the last run, in replica
 * order, before the reduction: values[n], n = the replicas whose reports were
 * reduced (rp_replicator_replicas() in a one-role job). The values ride along
 * with the report exchange the run makes anyway. Errors: RP_ERR_INVALID (NULL,
 * no such report, n not that count).
 */
RP_API rp_status rp_replicator_result_each(const rp_replicator *r, const char *name, double *values,
                                           int n);

/*
 * Writes the trace recorded so far (replicator/trace.h) for the whole job.
 * On one process: the file `path`. Across MPI processes: each measures its
 * clock's offset to the process of worker 0 (a run of point-to-point round
 * trips; the offset of the shortest is applied, half its round trip is the
 * bound written in otherData), writes `path`.rank<N>.json, and after a
 * barrier the process of worker 0 merges them into `path` when it can read
 * them all (one file system) and removes them; otherwise it warns and they
 * stay, for `replicator trace merge`. Call it on every process, between runs;
 * a parameter-server rank writes nothing. Errors: those of the runs and of
 * rp_trace_write / rp_trace_merge.
 */
RP_API rp_status rp_replicator_trace_write(rp_replicator *r, const char *path);

/*
 * Writes this process's trace without meeting the other processes: for a
 * run that failed, whose communicators may be broken (the trainer calls it
 * then). On one process: the file `path`, as rp_replicator_trace_write, and
 * an INFO line naming it. Across processes: `path`.rank<N>.json, without a
 * clock offset (bound -1, except on rank 0), and a warning naming it and the
 * `replicator trace merge` line. Events
 * of a replica still running (abandoned by the watchdog) are written up to
 * the last one it closed. A parameter-server rank writes nothing. Errors:
 * those of rp_trace_write.
 */
RP_API rp_status rp_replicator_trace_write_local(rp_replicator *r, const char *path);

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
RP_API rp_status rp_replicator_start(rp_replicator *r, const char *role, rp_replica_fn fn,
                                     void *arg);
/*
 * Waits until every worker of `role` in this process has returned from the
 * function started on it, and returns the error that started a failure
 * ("role 'actor', worker 3: ...", a worker's own error before a peer's
 * RP_ERR_COMM), or RP_OK (also when the role was not started here).
 * rp_replicator_destroy() waits for a started role that was not waited for.
 */
RP_API rp_status rp_replicator_wait(rp_replicator *r, const char *role);

/* The job's roles (placed: `first` filled in), 0 <= i < rp_replicator_roles(); NULL if out of
 * range. */
RP_API int rp_replicator_roles(const rp_replicator *r);
RP_API const rp_role *rp_replicator_role(const rp_replicator *r, int i);

/* ---- the replica context (valid inside a run, and between runs) ------------------- */

/*
 * The replica's id (0 .. count-1) and the replica count: its data
 * coordinate and its role's members (num_replicas; a replica of model x
 * pipe workers is one replica). Without roles: the job's replicas.
 */
RP_API int rp_replica_id(const rp_replica *rep);
RP_API int rp_replica_count(const rp_replica *rep);
/* Its index among this process's replicas (what rp_replicator_replica() takes). */
RP_API int rp_replica_local_index(const rp_replica *rep);
RP_API uint64_t rp_replica_seed(const rp_replica *rep);
/* This replica's tape: reset at the start of each run. */
RP_API rp_tape *rp_replica_tape(rp_replica *rep);
/*
 * The communicator of the replicas: this worker's data axis (its role's
 * members with the same model and pipe coordinates), rank = its replica id.
 * Owned by the replicator; use it on this worker's thread only.
 */
RP_API rp_comm *rp_replica_comm(rp_replica *rep);

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
RP_API int rp_replica_worker(const rp_replica *rep);
RP_API int rp_replica_workers(const rp_replica *rep);
/*
 * The print-once predicate: true on exactly one worker of the job - the
 * first role's replica 0, its last worker along the model and pipe axes
 * (the one that holds the end of the model, and so the loss; in a job of
 * single-worker replicas, replica 0). rp_replica_id(rep) == 0 is true on
 * every model worker of replica 0 and prints once per stage.
 * rp_replicator_is_leader: whether this process holds that worker (true on
 * one process of the job; false on a parameter-server rank and for NULL);
 * its rp_replicator_result() is the leader's, as the leader reported.
 * Thread-safe.
 */
RP_API bool rp_replica_is_leader(const rp_replica *rep);
RP_API bool rp_replicator_is_leader(const rp_replicator *r);
RP_API const char *rp_replica_role(const rp_replica *rep);
RP_API int rp_replica_coord(const rp_replica *rep, rp_axis axis);
RP_API int rp_replica_axis_size(const rp_replica *rep, rp_axis axis);
RP_API rp_comm *rp_replica_axis_comm(rp_replica *rep, rp_axis axis);
RP_API rp_comm *rp_replica_role_comm(rp_replica *rep);
RP_API rp_comm *rp_replica_world_comm(rp_replica *rep);
/*
 * The link: every worker of the job (rank = worker index, as the world),
 * for messages between roles that outlive runs - an actor's experience to a
 * replay server, a learner's parameters to its actors. Unlike the others it
 * is not left when a run ends: a started worker waiting on the link for a
 * learner between two runs keeps waiting (up to the timeout) instead of
 * failing at once because the learner's step ended. A worker whose run
 * failed, or whose started function returned, leaves it, so a peer waiting
 * for that worker in particular fails at once naming it (a receive from
 * RP_ANY_SOURCE fails so only when every other worker has left). Collectives
 * on it would have to be made by every worker of the job; use it for
 * point-to-point messages. The same handle as the world when the job has one
 * role. Owned by the replicator; this worker's thread only.
 */
RP_API rp_comm *rp_replica_link_comm(rp_replica *rep);
/*
 * TF-Replicator's num_replicas_in_sync: the replicas whose gradients one
 * step combines synchronously - rp_replica_count() in sync training, 1 in
 * async (each replica steps alone), the group's size with sync groups.
 * rp_replica_count() is num_replicas. rp_replicator_in_sync: the same, for
 * the replicator (0 for NULL).
 */
RP_API int rp_replica_in_sync(const rp_replica *rep);
RP_API int rp_replicator_in_sync(const rp_replicator *r);
/*
 * The communicator of the replicas in sync with this one (rank = its place
 * among them): the data axis in sync training (rp_replica_comm), its group's
 * with sync groups, NULL in async training and for NULL. For collectives
 * that must stay inside the replicas that step together - cross-replica
 * batch norm, a stop request agreed before each batch. Owned by the
 * replicator; this worker's thread only.
 */
RP_API rp_comm *rp_replica_sync_comm(rp_replica *rep);
/*
 * HSDP (rp_config.hsdp = G): the communicator of the G replicas of this one's group, which shard
 * the state between them (across false; rank = its place in the group), or of the replicas of
 * the other groups that hold the same shard (across true; rank = its group). NULL without HSDP,
 * before the replica's first ZeRO optimizer is created (which makes them) and for NULL. For
 * measuring their traffic (--plan-check); the runtime's collectives run on them. Owned by the
 * replicator; this worker's thread only.
 */
RP_API rp_comm *rp_replica_hsdp_comm(rp_replica *rep, bool across);
/* The user's per-replica state, NULL until set. */
RP_API void *rp_replica_user(const rp_replica *rep);
RP_API void rp_replica_set_user(rp_replica *rep, void *user);

/*
 * The input context (as TF-Replicator's): the share of a global batch this
 * replica trains, among the replicas that train each batch together
 * (rp_replica_in_sync()): `replicas` of them, this one `replica`-th, each
 * `per_replica_batch` = global_batch / replicas examples, the share starting
 * at example replica x per_replica_batch of the batch; and its input
 * pipeline (one per replica here: pipeline = replica id, pipelines = the
 * replica count, so every worker of one model group reads the same batch).
 *  - sync (and ZeRO): every replica trains its shard of every batch:
 *    replica = its id, replicas = the replica count; RP_ERR_INVALID if that
 *    does not divide the batch;
 *  - async: a batch goes to the one replica that claims it
 *    (rp_replica_next_batch()), which trains all of it: replica = 0,
 *    replicas = 1, per_replica_batch = global_batch, whatever the replica
 *    count (a global batch is one push's);
 *  - sync groups: a group trains each batch together: replica and replicas
 *    are its rank in its group and the group's size, and the share is the
 *    batch / the group's size (RP_ERR_INVALID if that does not divide it);
 *    G = N groups is async's share.
 */
typedef struct rp_input_context {
    int replica, replicas;
    int pipeline, pipelines;
    int global_batch, per_replica_batch;
} rp_input_context;

RP_API rp_status rp_replica_input_context(const rp_replica *rep, int global_batch,
                                          rp_input_context *ctx);

/*
 * Reports a scalar for logging; at the end of the run the values of all
 * replicas are reduced with `op` (in replica order) and can be read with
 * rp_replicator_result(). Every replica must report the same names in the
 * same order (checked; a difference fails the run). At most 32 per run;
 * names up to 31 characters.
 */
RP_API rp_status rp_replica_report(rp_replica *rep, const char *name, double value,
                                   rp_reduce_op op);

/* ---- cross-replica primitives: rp_comm_* on the replica's communicator ------------ */

/*
 * Each is the rp_comm_* call (replicator/comm.h) on rp_replica_comm(rep):
 * the DATA axis - the replicas, rank = rp_replica_id(). In a mesh (roles,
 * or a replica of model x pipe workers) that is this worker's peers with the
 * same model and pipe coordinates in the other replicas, never the workers of
 * its own replica: for those, call rp_comm_* on rp_replica_axis_comm(rep,
 * RP_AXIS_MODEL or RP_AXIS_PIPE), and on rp_replica_role_comm() or
 * rp_replica_world_comm() for a whole role or job. Without a mesh the data
 * axis is every replica of the job. Errors: those of the rp_comm_* call.
 */
RP_API rp_status rp_all_reduce(rp_replica *rep, const void *send, void *recv, int64_t count,
                               rp_dtype dtype, rp_reduce_op op);
RP_API rp_status rp_reduce_scatter(rp_replica *rep, const void *send, void *recv, int64_t count,
                                   rp_dtype dtype, rp_reduce_op op);
RP_API rp_status rp_all_gather(rp_replica *rep, const void *send, void *recv, int64_t count,
                               rp_dtype dtype);
RP_API rp_status rp_broadcast(rp_replica *rep, void *buf, int64_t count, rp_dtype dtype, int root);
RP_API rp_status rp_barrier(rp_replica *rep);

/*
 * Deprecated: set rp_bn_params.comm (or a model's bn_comm) to the
 * replica's data-axis communicator, rp_replica_axis_comm(rep, RP_AXIS_DATA),
 * instead; the layer then all-reduces its sums itself, with bitwise the same
 * results. Kept working for existing callers:
 * cross-replica batch norm as an rp_bn_reduce_fn (tensor.h) whose ctx is the
 * rp_replica. Put it in rp_bn_params.reduce (or a model's bn_reduce) and the
 * layer's statistics cover the global batch: the per-channel sums (forward)
 * and gradient sums (backward) are all-reduced across replicas (the data
 * axis; nothing with one replica). RP_ERR_INVALID for a NULL ctx; errors of
 * the all-reduce (RP_ERR_MISMATCH, RP_ERR_TIMEOUT) fail the layer.
 */
RP_API rp_status rp_cross_replica_bn(double *sums, int count, double *n, void *rep);

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
 * rp_optimizer_destroy() (from inside a run or after the last one, before
 * rp_replicator_destroy()). In a mesh the replicas are the data axis: each
 * worker's parameters (its model shard) are broadcast from, and all-reduced
 * with, the workers of the same model and pipe coordinates only.
 * Two parameter sets, each with its own replica optimizer, may take turns
 * (a GAN): while a set is frozen (rp_params_set_frozen), backward fires no
 * gradient-ready callback for it, so none of its buckets is all-reduced,
 * and stepping its optimizer is refused (RP_ERR_INVALID, before any
 * collective); step only the optimizer of the set that trained.
 * The wrapping is one hook set (optim.h); hooks the user adds afterwards
 * run inside it: a `before` sees the all-reduced gradients, an `after`
 * runs after the update and before the checksum.
 */
RP_API rp_status rp_replica_optimizer_create(rp_replica *rep, rp_optimizer **opt, rp_params *params,
                                             const rp_optim_config *cfg);

/*
 * ZeRO-1 (RP_STRATEGY_ZERO1, or cfg.zero): rp_replica_optimizer_create() makes an optimizer that
 * behaves as the sync one above - the same values after every step, bitwise
 * (the reductions add in the same order and the rule is elementwise), the
 * same checksums - while each of the N replicas keeps the optimizer state
 * of one shard of the trainable values only: the flat block of P values is
 * cut into N shards of ceil(P / N) (the last ones shorter or empty: no size
 * is refused), so rp_optimizer_state_bytes() falls to about 1/N. A step
 * reduce-scatters the gradients (mean, in buckets of cfg.bucket_bytes,
 * started from backward), agrees across replicas that they are finite (a
 * non-finite one fails the step on every replica, naming the replica whose
 * own gradient held it), updates the replica's shard (optim.h:
 * rp_optimizer_set_range) and all-gathers the values in buckets. Costs
 * besides the state: a reduced-gradient shard of P/N floats and
 * 2 x bucket_bytes of scratch per replica.
 * What user hooks see: a `before` added after the runtime's sees the
 * replica's shard [lo, hi) (rp_optimizer_range) of the reduced gradients in
 * place, and the rest of the gradient block holding local gradients: clip
 * with rp_replica_clip_grad_norm(), not rp_clip_grad_norm(). An `after`
 * sees the whole updated values. rp_replica_optimizer_fetch() (collective)
 * gathers every shard's state into replica 0's optimizer, whose state block
 * then is the whole logical state until its next step shards it again - do
 * so before rp_checkpoint_add_optimizer(), which stores logical tensors
 * (the trainer does it before each checkpoint: rp_replicator_sharded()).
 * rp_checkpoint_read_optimizer() into a ZeRO-1 optimizer takes its shard of
 * each logical tensor, so a run saved on N replicas resumes on M.
 * rp_replica_optimizer_publish() sends replica 0's values and steps, and
 * its state's shards when replica 0 holds the whole state. With one
 * replica it is the plain optimizer.
 *
 * ZeRO-2 (RP_STRATEGY_ZERO2) is ZeRO-1 with the reduced gradients sharded
 * too: the gradient buckets are the sync strategy's (contiguous, in
 * backward's order), each all-reduced as soon as backward finishes it; the
 * replica keeps the bucket's part inside its shard, in place in the gradient
 * block, and gives the rest of the bucket's gradient memory back (backward
 * writes a bucket into one of two reused buffers; the optimizer's zeroing
 * releases the block but the shard). So a
 * replica holds its shard of the gradients plus the buckets backward has
 * not finished, never the whole gradient at once (with one backward per
 * step). The sums are the sync strategy's: the values are bitwise its
 * values. Everything else is ZeRO-1's: the state shards, fetch, publish,
 * checkpoints, clipping. A `before` hook sees the reduced shard in place
 * and zeros elsewhere. Each bucket moves an all-reduce's bytes (a
 * reduce-scatter's twice): the price, for now, of buckets that follow
 * backward.
 *
 * ZeRO-3 (RP_STRATEGY_ZERO3) is ZeRO-2 with the values sharded too: after
 * the update a replica keeps only its shard of the values (the pages of the
 * rest go back to the system), and when an op takes a parameter, forward or
 * backward, the unit holding it (parameters cut at their boundaries in
 * units of cfg.bucket_bytes, as the gradient buckets are) is gathered from
 * the replicas that own it, one broadcast per owner, into one of two
 * buffers as long as the largest unit, with its parameters' `data` pointed
 * at it until it is released (do not keep a parameter's data pointer across
 * ops). While
 * the tape records, a replica holds its shard and the 2 units used last
 * (one op reads at most 2 trainable parameters); an evaluation (not recording)
 * releases nothing, so its first pass gathers every unit and later passes
 * make no collective. From rp_replica_optimizer_create() on, a replica
 * holds only its shard outside a step's use (read values whole after
 * rp_replica_optimizer_fetch()). The values are bitwise the sync strategy's; every
 * replica must run the same ops in the same order (they do in a step),
 * since each gather is a collective. A view of a parameter (rp_reshape,
 * rp_detach, rp_copy_to_group) and an op of more than 2 trainable parameters are
 * refused (RP_ERR_UNSUPPORTED). rp_replica_optimizer_fetch() makes every
 * replica's values whole until the next step (do so before reading them
 * outside a step, or before destroying the optimizer if the values must
 * outlive it). rp_checkpoint_read_params() and rp_params_write_values()
 * into a ZeRO-3 replica's list write only its shard of the values (and the
 * buffers): every replica writes, and the next use gathers the rest from
 * their owners; a
 * rp_replica_optimizer_publish() after a read into some replicas but not
 * all is refused. Threads, MPI and hierarchical; with tensor parallelism and
 * pipeline stages (every tape a replica's thread uses gathers).
 */

/*
 * Whether a replica's state is held in pieces, so that it must be gathered
 * before a checkpoint is written: the replicator's optimizers hold a shard
 * of their state each (ZeRO-1; rp_replica_optimizer_fetch() gathers it), or
 * a replica of the first role spans several workers (model x pipe > 1:
 * each holds its part of the model; the model gathers them). False for NULL.
 */
RP_API bool rp_replicator_sharded(const rp_replicator *r);

/*
 * Global-norm gradient clipping of a replica optimizer's reduced gradients,
 * for a `before` hook added to it after the runtime's (so that the
 * gradients are reduced): the L2 norm of the whole mean gradient, and when
 * it exceeds max_norm every gradient scaled by max_norm / norm, as
 * rp_clip_grad_norm() does. Sync, async and plain optimizers: exactly
 * rp_clip_grad_norm() of the block. ZeRO-1: each replica's shard's squared
 * norm (double) all-reduced, then its shard scaled: a collective, every
 * replica calls it in the same step; the norm agrees with the sync
 * strategy's to rounding (the squares are added in another order). *norm
 * (may be NULL) receives the norm before clipping, the same on every
 * replica. Errors: those of rp_clip_grad_norm (RP_ERR_INVALID for max_norm
 * not finite and > 0, RP_ERR_NUMERIC for a non-finite norm: nothing
 * scaled), and the all-reduce's.
 */
RP_API rp_status rp_replica_clip_grad_norm(rp_replica *rep, rp_optimizer *opt, float max_norm,
                                           float *norm);

/*
 * Copies replica 0's parameter values (and buffers) to every replica
 * (collective), e.g. after restoring a checkpoint on replica 0 only.
 */
RP_API rp_status rp_replica_broadcast_params(rp_replica *rep, rp_params *params);

/* ---- asynchronous training (RP_STRATEGY_ASYNC, or cfg.regime = RP_REGIME_ASYNC) -------- */

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
RP_API rp_status rp_replica_optimizer_fetch(rp_replica *rep, rp_optimizer *opt);

/*
 * The runtime's own buffers for a replica's optimizer (ZeRO: the reduced-gradient shard and the
 * packing buffers; 0 for the other strategies and for NULL): their allocated bytes, or with
 * `resident` those of their pages in memory now (mincore; the allocated bytes where the kernel
 * table's storage is not host memory). For memory reports beside rp_optimizer_state_bytes().
 */
RP_API size_t rp_replica_strategy_bytes(const rp_replica *rep, const rp_optimizer *opt,
                                        bool resident);

/*
 * The trainable values [*lo, *hi) of opt's parameter list whose values and
 * optimizer state this replica writes when every replica writes its own
 * part of a checkpoint (rp_checkpoint_add_params_pieces and
 * rp_checkpoint_add_optimizer_pieces, io.h): under ZeRO its shard (under
 * HSDP the first group's replicas only; the others' ranges are empty), else
 * an even part of the values (they are equal on every replica). The ranges
 * of a data axis's replicas tile [0, trainable numel) exactly once; the
 * buffers and step counts are for one writer (replica 0) to add. Not a
 * collective. Errors: RP_ERR_INVALID (NULL), RP_ERR_UNSUPPORTED (replicas
 * that step independently: async, sync groups; their values differ).
 */
RP_API rp_status rp_replica_checkpoint_range(const rp_replica *rep, const rp_optimizer *opt,
                                             int64_t *lo, int64_t *hi);

/*
 * Adds this worker's part of a model to ck, for a checkpoint every worker
 * writes its own shard of (rp_trainer_model.save_part): the values and the
 * optimizer state of its range (rp_replica_checkpoint_range) as pieces of
 * param_prefix + name and of the tensors rp_checkpoint_add_optimizer names
 * under optim_prefix; replica 0 adds the buffers. Any worker of a replica
 * that spans workers calls it with its own part: a pipeline stage its
 * stage's tensors, a tensor-parallel member its slices (rp_params_shard_of)
 * as slabs of the dense tensors, the tensors every member holds whole only
 * on the model axis's first member; the step count comes from replica 0's
 * first worker (pipe and model coordinates 0). Reads only what the worker
 * holds (no collective, nothing gathered). Errors: those of
 * rp_replica_checkpoint_range and rp_checkpoint_add_piece.
 */
RP_API rp_status rp_replica_checkpoint_part(rp_replica *rep, rp_checkpoint *ck,
                                            const rp_optimizer *opt, const char *param_prefix,
                                            const char *optim_prefix);

/*
 * Collective: makes replica 0's optimizer state (parameter values, slots,
 * step count) the job's - async: loaded into the servers, then pulled by
 * every replica; sync: broadcast. For resuming a checkpoint read into
 * replica 0's (or every replica's) optimizer.
 */
RP_API rp_status rp_replica_optimizer_publish(rp_replica *rep, rp_optimizer *opt);

/*
 * A shared work queue for the replicas of one run: 0, 1, 2, ... each to
 * exactly one replica, across processes. Asynchronous replicas take batch
 * numbers this way, so a fast replica takes more batches than a slow one and
 * an epoch still covers every batch once. It restarts at 0 in each run.
 * Threads backend: always; MPI: in the async regime, after an optimizer was
 * created (server 0 counts); RP_ERR_UNSUPPORTED otherwise.
 */
RP_API rp_status rp_replica_claim(rp_replica *rep, int64_t *ticket);

/* ---- sync groups (RP_STRATEGY_SYNC_GROUPS with cfg.sync_groups = G) ----------------- */

/*
 * The N replicas form G groups of S = N / G consecutive replicas (group g:
 * replicas gS .. gS + S - 1). Inside a group the replicas are in sync: an
 * optimizer made by rp_replica_optimizer_create() (collective: every
 * replica, one run) all-reduces the gradients over the group (mean, in
 * buckets from backward, finiteness agreed and blamed as in sync training),
 * then the group's rank 0 pushes the group's mean gradient to the
 * parameter servers and pulls the current values, and broadcasts them in
 * the group: one push per group step, so the servers' step count is the
 * number of group steps, and the group's replicas stay bitwise identical
 * (checksummed within the group every checksum_every steps). Between
 * groups it is async training: the groups never wait for each other except
 * under a staleness bound (cfg.staleness counts group steps), and a step
 * function calls collectives only on rp_replica_sync_comm() (cross-replica
 * batch norm inside the group), never rp_all_reduce() & co. over every
 * replica. Work: rp_replica_claim()/rp_replica_next_batch() hand each
 * ticket to one group (its rank 0 claims, the group learns it), so every
 * replica of a group trains its share (rp_replica_input_context) of the
 * same batch. rp_replica_optimizer_fetch() (collective in the group) brings
 * the servers' values, slots and step to every replica of the group;
 * rp_replica_optimizer_publish() loads replica 0's into the servers.
 * rp_replica_lockstep() is false, rp_replica_in_sync() is S. G = 1 is sync
 * training and G = N async training (the same tables). No roles, no
 * ZeRO-1, regime sync. rp_replicator_create() refuses a G that does not
 * divide the replicas (RP_ERR_INVALID naming both).
 * Under MPI: one replica per rank (cfg.replicas = 1; more is
 * RP_ERR_UNSUPPORTED); the last cfg.ps ranks serve, as in the async regime,
 * and G divides the other ranks (group g: replica ranks gS .. gS + S - 1).
 * The servers count G workers, the groups' ranks 0, so the staleness bound,
 * the step count and the claims are per group exactly as on threads.
 */

/* ---- iterating over batches: one loop for every strategy ---------------------------- */

/*
 * The next batch this replica trains in the current run, as an index
 * 0, 1, 2, ... counted from the start of the run (the caller adds its
 * position in the epoch and stops at the end of its range). The strategy
 * decides who gets which index:
 *  - lockstep (sync): every replica gets every index, in order, each
 *    trains its shard of that batch, and the step's collectives join them;
 *    counted per replica, so it costs no message; it restarts at 0 in
 *    each run.
 *  - independent (async): rp_replica_claim()'s shared queue - each index
 *    to exactly one replica, whichever asks first, so a fast replica takes
 *    more batches and a range is still covered once. Same conditions and
 *    errors as rp_replica_claim() (RP_ERR_UNSUPPORTED across processes
 *    before an optimizer was created).
 * So a loop written once serves both:
 *     for (;;) { rp_replica_next_batch(rep, &i); if (start + i >= end) break; ... }
 * Call it from the replica's own thread, inside a run. RP_ERR_INVALID for
 * NULL arguments.
 */
RP_API rp_status rp_replica_next_batch(rp_replica *rep, int64_t *index);

/*
 * Whether the replicas meet in every step (true: sync - each trains its
 * shard of every batch given by rp_replica_next_batch(), results of a run
 * are per batch on each replica, and a run may hold collectives) or run
 * independently within a run (false: async - each batch to one replica,
 * so a run should cover many batches, call no collectives, and check a stop
 * request on its own). Chosen at rp_replicator_create() by cfg.strategy, fixed
 * for the replicator's life; thread-safe. False for NULL.
 */
RP_API bool rp_replica_lockstep(const rp_replica *rep);
/* The same, for the replicator (e.g. on the main thread between runs). */
RP_API bool rp_replicator_lockstep(const rp_replicator *r);

#ifdef __cplusplus
}
#endif

#endif
