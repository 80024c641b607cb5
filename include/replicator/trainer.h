/*
 * replicator/trainer.h - the trainer every model shares: the run directory,
 * the agreed stop on a signal, checkpoint cadence, resume, metrics (JSONL),
 * the progress line, evaluation callbacks, and one loop over an epoch's
 * global batches for the sync and async regimes alike.
 *
 * A model plugs in through a table of callbacks (rp_trainer_model) and its
 * own context pointer; the trainer creates the replicator, builds every
 * replica, and runs the loop:
 *
 *     rp_trainer_config cfg = rp_trainer_config_default();
 *     cfg.runtime.replicas = 4;           // the replicator the trainer creates
 *     cfg.run_dir = "runs/mine";
 *     cfg.epochs = 10;
 *     cfg.lr = 0.1f;
 *     rp_trainer *t;
 *     rp_trainer_create(&t, &cfg, &my_model, &my_ctx);   // builds every replica
 *     rp_trainer_run(t);                                   // trains, evaluates, checkpoints
 *     rp_trainer_destroy(t);
 *
 * The loop. An epoch is steps_per_epoch global batches, numbered 0.. in the
 * epoch. A model that is not epoch-based (a learner that takes a number of
 * steps) sets cfg.steps instead: the run is then that many global steps, as
 * one stretch with no epochs (the lines and metrics say no epoch), and the
 * model needs no steps_per_epoch callback.
 * Each rp_replicator_run() covers a stretch of them (a "chunk"):
 *  - sync: one batch per run; every replica trains its shard of that batch
 *    (train_step), the gradients are averaged inside its optimizer step
 *    (rp_replicator_lockstep() is true);
 *  - async (lockstep false): the rest of the epoch (bounded by max_steps and the step
 *    cadences) per run; the replicas take the batches one at a time from the
 *    runtime's shared queue (rp_replica_next_batch()), each the whole batch, so a
 *    fast replica takes more of them and the epoch still covers every batch
 *    once; after the run, settle() makes the replicas' state the job's;
 *  - sync groups (lockstep false, rp_replica_in_sync() > 1): as async, but a
 *    batch goes to a group, each replica of it trains its share, and the group
 *    agrees on a stop request before each batch; a chunk's scalars are the
 *    group's means.
 * Batch s of epoch e gets the schedule's rate for its global step in both
 * regimes, so they see the same examples in the same number of updates.
 * After every chunk the replicas agree on a stop request (the largest signal
 * number any of them saw), so every process stops after the same step.
 *
 * The run directory (written only by the process of replica 0, but for the
 * shards of a checkpoint written by every worker):
 *     checkpoint.safetensors  the model's tensors (save callback), the
 *                             tensor "train/position" = {epoch, step in
 *                             epoch, global step} of the next batch, the
 *                             epoch's running scalars ("train/epoch_steps",
 *                             i64 {steps summed}, and "train/epoch_sums",
 *                             u64: each scalar's sum as IEEE-754 bits, so
 *                             that a run resumed mid-epoch writes the
 *                             uninterrupted run's epoch line, bit for bit
 *                             but for the rate, which is measured over the
 *                             steps this process ran; a checkpoint without
 *                             them sums afresh from the resume), and the
 *                             metadata "replicator.config" (cfg.config_json)
 *                             and "replicator.version"; written atomically
 *                             (replicator/io.h), so a failed write leaves the
 *                             previous checkpoint as it was; with
 *                             cfg.checkpoint_shards N, the same tensors as
 *                             checkpoint.index.json and checkpoint.shards/
 *                             (io.h, "sharded checkpoints") instead
 *     metrics.jsonl           one JSON object per line: {"step","epoch",
 *                             every scalar the steps reported (the model's
 *                             `scalars`, by default "loss": the last
 *                             step's, or an async chunk's means),"lr"} every
 *                             metrics_every_steps steps (and after every
 *                             async chunk), and at each epoch's end
 *                             {"step","epoch","train_" and each scalar's name
 *                             (its mean over the epoch), the evaluation's
 *                             metrics, the rate (cfg.rate_key),"lr"}; an
 *                             evaluation between epochs adds {"step","epoch",
 *                             its metrics}. In steps-only mode (cfg.steps)
 *                             the lines have no "epoch". A value that is not
 *                             finite is written as null.
 * TensorBoard (cfg.tensorboard_dir set, with cfg.tensorboard_writer): the
 * process of replica 0 also writes every number of every metrics.jsonl line as
 * a scalar to a new events file in that directory (replicator/tensorboard.h,
 * libreplicator-extras; rp_scalar_writer below), at the line's "step", and
 * flushes it with each line. Tags, by line:
 *     step line         "train/<scalar>", "train/lr", "perf/<rate_key>" (the
 *                       epoch's rate so far; TensorBoard only)
 *     epoch line        "epoch/train_<scalar>", "eval/<metric>" for the
 *                       evaluation's, and "perf/<rate_key>" and "train/lr"
 *                       unless a step line gave them at that step
 *     evaluation line   "eval/<metric>"
 * A value that is not finite (null in metrics.jsonl) is left out. A
 * resumed run starts another file in the directory; its steps continue, and
 * TensorBoard merges the files. A failure to create or write the file warns
 * once; the run goes on without it.
 * A new run never overwrites saved work: a run_dir holding a checkpoint is
 * refused when run_dir_exact (unless force), else the trainer moves on to
 * run_dir-2, -3, ...
 *
 * Thread-safety: one trainer is driven by one thread (the one that created
 * it); the callbacks run on the replicas' threads as documented for each.
 * rp_trainer_request_stop() may be called from any thread.
 */
#ifndef REPLICATOR_TRAINER_H
#define REPLICATOR_TRAINER_H

#include "io.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_trainer rp_trainer;

/* Where a step is: what train_step trains on, and what build resumes at. */
typedef struct rp_trainer_at {
    int64_t epoch;       /* from 0 */
    int64_t step;        /* the global batch's index in its epoch, from 0 */
    int64_t global_step; /* steps taken before this one in the whole run (the schedule's step) */
    float lr;            /* the schedule's rate at global_step (a model with several optimizers,
                            e.g. a GAN's two, scales it by its own ratios) */
} rp_trainer_at;

/* At most this many scalars per step (rp_trainer_model.scalars). */
#define RP_TRAINER_MAX_SCALARS 8

/* Named values an evaluation produces: written to metrics.jsonl and shown on the epoch's line. */
#define RP_TRAINER_MAX_METRICS 8
typedef struct rp_trainer_metrics {
    int n;
    struct {
        char key[32];   /* the JSON key, e.g. "test_accuracy" */
        double value;   /* written with 6 decimals */
        char shown[64]; /* the text on the epoch line, e.g. "test acc 91.20%" ("" : not shown) */
    } m[RP_TRAINER_MAX_METRICS];
} rp_trainer_metrics;

/*
 * Appends a metric: `key` (1..31 bytes, a JSON-safe name: letters, digits,
 * '_') and `value`; `shown_fmt` (printf, may be NULL) formats the text shown
 * on the epoch line from the arguments that follow. Errors: RP_ERR_INVALID
 * (a bad key, or more than RP_TRAINER_MAX_METRICS).
 */
RP_API rp_status rp_trainer_metrics_add(rp_trainer_metrics *m, const char *key, double value,
                                        const char *shown_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * A model, as the trainer sees it: a table of callbacks, each given the
 * context pointer passed to rp_trainer_create() (`ctx`) and, where it has
 * one, the replica's state that build() made (`state`). A callback returns
 * RP_OK or an error (with RP_ERROR's message), which ends the run with it.
 * Callbacks marked "every replica" run inside rp_replicator_run() on each
 * replica's thread at once: they may call the replica's collectives, and
 * must not touch another replica's state. "Main thread" ones run between
 * runs on the thread driving the trainer.
 */
typedef struct rp_trainer_model {
    /*
     * Required. Every replica, once, in one run: creates this replica's
     * state into *state (model, optimizer with rp_replica_optimizer_create(),
     * input). When resuming, ck is the checkpoint (read-only, valid during
     * the call) and `at` the position of the next batch (its lr is 0: the
     * schedule needs steps_per_epoch, asked after build): restore the state
     * the save callback wrote and position the input at it (async: publish
     * the restored optimizer, rp_replica_optimizer_publish()). ck and at are
     * NULL for a new run.
     */
    rp_status (*build)(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **state);
    /*
     * Required unless cfg.steps is set (then unused). Main thread, after
     * build: global batches per epoch (>= 1), from local replica 0's state.
     */
    int64_t (*steps_per_epoch)(void *ctx, void *state);
    /*
     * Required. Every replica: trains on this replica's share of batch
     * at->step of epoch at->epoch with rate at->lr, and writes the step's
     * scalars: scalars[i] for the model's scalars[i] (below), every one on
     * every step (they start at 0). The trainer averages each over the
     * replicas of a sync step (each trained a shard) and over the steps, and
     * writes them all to metrics.jsonl; cfg.shown_scalars picks the ones on
     * the progress and epoch lines. Sync: every replica, in step, its shard
     * of one global batch. Async: only the replica that claimed the batch,
     * the whole batch; the replica's tape is reset before each batch.
     * rp_replica_input_context() gives that share in every regime (sync:
     * the replica's shard; async: replica 0 of 1, the whole batch; sync
     * groups: the replica's shard within its group). A
     * replica's batches come in increasing order within an epoch.
     */
    rp_status (*train_step)(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars);
    /*
     * Optional. The names of the scalars train_step writes, in its order,
     * ended by NULL (e.g. {"g_loss", "d_loss", NULL} for a GAN's step): 1 to
     * RP_TRAINER_MAX_SCALARS names of 1..31 letters, digits or '_', each
     * once. NULL: one scalar, "loss". Borrowed for the trainer's lifetime.
     */
    const char *const *scalars;
    /*
     * Optional. Those of the scalars that are gauges - a count or a level
     * read off at each step (env steps so far, a replay's size, a recent
     * return) rather than a per-step loss - ended by NULL: the lines shown
     * and metrics.jsonl give their latest value (the last step's, averaged
     * over the replicas of a sync step) instead of a mean over steps.
     */
    const char *const *gauges;
    /*
     * Optional. Every replica, after each run in which the replicas stepped
     * independently (async): makes the job's state every replica's
     * (rp_replica_optimizer_fetch(), averaging per-replica buffers), so that
     * evaluation and the checkpoint see one model. Also before each
     * checkpoint when a replica's state is held in pieces
     * (rp_replicator_sharded()): ZeRO-1's optimizer shards,
     * which rp_replica_optimizer_fetch() gathers into replica 0's
     * optimizer, or a replica spanning several workers (model or pipe axis),
     * whose parts the model gathers into the state save() sees (local
     * replica 0's of the process of worker 0); the replicas step in
     * lockstep (rp_replica_lockstep), their buffers are equal already.
     */
    rp_status (*settle)(rp_replica *rep, void *ctx, void *state);
    /*
     * Optional. Every replica: evaluates its share and reports sums with
     * rp_replica_report(); then `evaluated` (main thread, required with it)
     * reads them with rp_replicator_result() and fills *m.
     */
    rp_status (*evaluate)(rp_replica *rep, void *ctx, void *state);
    rp_status (*evaluated)(void *ctx, const rp_replicator *r, rp_trainer_metrics *m);
    /*
     * Required unless checkpoints are off. Main thread: adds local replica
     * 0's state to ck (the replicas agree: sync keeps them identical, async's
     * settle made them so). The trainer adds "train/position" after it.
     */
    rp_status (*save)(void *ctx, void *state, rp_checkpoint *ck);
    /*
     * Optional; needed for cfg.checkpoint_per_worker. Every worker of the
     * stepped role, in a run at the checkpoint's step boundary: adds the
     * pieces of the state this worker holds to ck, its own shard
     * (rp_replica_checkpoint_part for a replica's parameters and optimizer;
     * rp_checkpoint_add_piece, or whole tensors, for the rest), so that the
     * workers' pieces tile every tensor exactly once under the names save()
     * uses. It replaces settle and save for such a checkpoint: nothing is
     * gathered unless the model gathers it. The trainer adds
     * "train/position" and the metadata to worker 0's shard.
     */
    rp_status (*save_part)(rp_replica *rep, void *ctx, void *state, rp_checkpoint *ck);
    /* Optional. Every replica, in rp_trainer_destroy(): frees the state build made (may be NULL).
     */
    rp_status (*destroy)(rp_replica *rep, void *ctx, void *state);
    /*
     * Optional: a job whose roles do more than step (D4PG's actors and its
     * replay beside a learner). The job's FIRST role (cfg.runtime.roles[0])
     * is the one the trainer steps; start_roles (main thread, once, right
     * after the replicator is created and before build) starts every other
     * role's long-lived function with rp_replicator_start(). build, the
     * steps, evaluation and checkpoints then run on the first role's workers
     * only. A process holding none of them (an actor rank under mpirun) builds
     * nothing, prints nothing, and its rp_trainer_run() waits for its started
     * roles to return.
     */
    rp_status (*start_roles)(rp_replicator *r, void *ctx);
    /*
     * Optional, with start_roles. Every replica of the first role, once, when
     * rp_trainer_run() ends - finished, stopped or failing (then its error is
     * ignored: the original one is returned): tells the started roles to
     * return (e.g. a message to their server). The trainer then waits for
     * every started role (rp_replicator_wait) and returns the first error.
     * Without it the started roles must return on their own.
     */
    rp_status (*stop_roles)(rp_replica *rep, void *ctx, void *state);
} rp_trainer_model;

/*
 * A writer of scalars beside metrics.jsonl: how the trainer writes cfg.tensorboard_dir. The
 * core library holds no TensorBoard code (it lives in libreplicator-extras, whose
 * rp_tensorboard_scalar_writer() returns this table for its events files), so a program that
 * wants the events files hands the writer in; any other table of the same shape works too.
 * The trainer calls create(&w, dir) once, on the process of replica 0, in
 * rp_trainer_create(); add() for each number of each metrics line, flush() after the line, and
 * destroy() at rp_trainer_destroy() (or after the first failure: an error from create, add or
 * flush is warned about once, with rp_last_error(), and the run goes on without the writer).
 * Tags are at most RP_TRAINER_TAG_MAX bytes. All four are required.
 */
typedef struct rp_scalar_writer {
    rp_status (*create)(void **w, const char *dir);
    rp_status (*add)(void *w, const char *tag, int64_t step, double value);
    rp_status (*flush)(void *w);
    rp_status (*destroy)(void *w); /* NULL: a no-op */
} rp_scalar_writer;

/* The longest tag the trainer hands a scalar writer, in bytes (not counting the NUL). */
#define RP_TRAINER_TAG_MAX 255

typedef struct rp_trainer_config {
    rp_config runtime;           /* the replicator the trainer creates; rp_config_default() */
    const char *run_dir;         /* required: the run directory (copied) */
    bool run_dir_exact;          /* named by the user: a checkpoint in it is refused unless force;
                                    false (default): run_dir-2, -3, ... if taken */
    bool force;                  /* overwrite a checkpoint already in run_dir */
    const rp_checkpoint *resume; /* continue this checkpoint's run in run_dir (borrowed during
                                   rp_trainer_create); NULL: a new run */
    const char
        *config_json;  /* stored as the checkpoint's "replicator.config" (copied); may be NULL */
    int epochs;        /* >= 1; default 1 */
    int64_t steps;     /* > 0: steps-only mode, a run of this many global steps with no
                          epochs (epochs and the *_every_epochs cadences are unused, the
                          checkpoint and evaluation come at the end and at the step
                          cadences); 0 (default): epochs of steps_per_epoch */
    int64_t max_steps; /* stop (checkpointed, resumable) after this global step; 0: none */
    float lr;          /* the schedule's peak rate; default 0.1 */
    rp_sched_kind schedule;      /* RP_SCHED_COSINE (over all epochs), RP_SCHED_LINEAR (lr to 0 over
                                    the run's total steps: epochs x steps_per_epoch, or cfg.steps),
                                    or RP_SCHED_CONSTANT (default); others: RP_ERR_INVALID */
    int warmup_epochs;           /* linear warm-up; default 0 */
    int64_t warmup_steps;        /* added to the warm-up (steps-only mode's); default 0 */
    int checkpoint_every_epochs; /* default 1; 0: only on a stop and after the last epoch */
    int64_t checkpoint_every_steps; /* also every K global steps; 0 (default): no */
    int eval_every_epochs;          /* default 1; 0: never at an epoch's end */
    int64_t eval_every_steps;       /* also every K global steps; 0 (default): no */
    int64_t metrics_every_steps;    /* a step line in metrics.jsonl every K steps; default 50 */
    const char *tensorboard_dir; /* also write every metrics line's numbers as TensorBoard scalars
                                   to an events file in this directory (created if missing;
                                   replicator/tensorboard.h, "TensorBoard" above); NULL
                                   (default): none */
    const rp_scalar_writer *tensorboard_writer; /* what writes tensorboard_dir: required when
                                   it is set (RP_ERR_INVALID otherwise); the TensorBoard
                                   writer of libreplicator-extras is
                                   rp_tensorboard_scalar_writer() */
    bool no_checkpoint;    /* write no checkpoint (the directory and metrics still are) */
    bool quiet;            /* no progress or epoch lines (the process of replica 0 prints them) */
    int batch;             /* samples in one global batch, for the rate shown; default 1 */
    const char *rate_unit; /* the rate's unit on the lines shown; default "samples/s" */
    const char *rate_key;  /* its key in metrics.jsonl; default "samples_per_s" */
    const char *shown_scalars; /* the model's scalars on the progress and epoch lines, named and
                                  separated by commas ("g_loss,d_loss"; read by create), shown
                                  in the model's order; NULL (default): the first; "": none */
    int slow_replica;          /* replica R sleeps (slow_factor - 1) x its step time each step,
                                  to study stragglers; -1 (default): none. The sleep counts as
                                  its compute time (a "slow (--slow)" span in the trace). A
                                  replica the job does not have is refused by create */
    float slow_factor;
    const char *trace;          /* write a Chrome trace-event JSON of the run here at its end
                                   (rp_replicator_trace_write; tracing is started before the
                                   replicator is created), and also when the run fails
                                   (rp_replicator_trace_write_local); create refuses a path that
                                   cannot be written (rp_file_check_writable); NULL (default): none */
    int straggler_window;       /* the straggler report's window in steps (lockstep, >= 2 replicas;
                                   docs/tracing.md); default 50, 0: off */
    int checkpoint_shards;      /* 0 (default): one whole file, checkpoint.safetensors; N >= 1: a
                                   sharded checkpoint (io.h) of N shards, checkpoint.index.json and
                                   checkpoint.shards/, each tensor split evenly over the shards */
    bool checkpoint_background; /* write each checkpoint on a background thread while training
                                   goes on (see "Background saving" below); false (default):
                                   the step waits for the write */
    bool checkpoint_per_worker; /* every worker of the stepped role writes its own shard of
                                   each checkpoint (the model's save_part; lockstep strategies:
                                   sync, ZeRO) and worker 0's process publishes the index:
                                   nothing is gathered, and a resume reads each worker's pieces
                                   (see "Checkpoints written by every worker" below); with
                                   checkpoint_background too, each process's writer writes its
                                   workers' shards. Not with checkpoint_shards */
} rp_trainer_config;

/* The defaults noted on each field (run_dir, which has none, must be set). */
RP_API rp_trainer_config rp_trainer_config_default(void);

/*
 * Replaces the configuration text stored in later checkpoints (copied),
 * e.g. once the replicator has settled the replica count. Errors:
 * RP_ERR_NOMEM.
 */
RP_API rp_status rp_trainer_set_config_json(rp_trainer *t, const char *json);

/*
 * Creates the trainer: settles the run directory (the rules above; not when
 * resuming or with no_checkpoint), creates the replicator from cfg->runtime,
 * builds every replica (model->build, from cfg->resume when resuming) and,
 * on the process of replica 0, creates the directory and opens
 * metrics.jsonl (appending when resuming). On an MPI parameter-server rank
 * (rp_trainer_is_server()) nothing is built: rp_trainer_run() serves.
 * `model` and `ctx` are borrowed for the trainer's lifetime.
 * Errors: RP_ERR_INVALID (a bad field, named; a model's scalar name that is
 * malformed or repeated, or a shown_scalars name the model does not have; a run_dir holding a
 * checkpoint, as above; a slow_replica the job does not have), RP_ERR_FORMAT
 * (a resume checkpoint without "train/position", or with epoch sums that do
 * not fit the model's scalars, each named), RP_ERR_IO (the directory; a trace
 * path that cannot be written), the replicator's and the build callback's
 * errors. On error *t is NULL and everything made is freed (the replicas'
 * states through model->destroy).
 */
RP_API rp_status rp_trainer_create(rp_trainer **t, const rp_trainer_config *cfg,
                                   const rp_trainer_model *model, void *ctx);

/*
 * Trains from the current position to the end of the last epoch: after
 * each epoch, evaluates and checkpoints at the configured cadence. A stop
 * request (rp_trainer_request_stop(), e.g. from a signal) or max_steps ends
 * it at a step boundary with a checkpoint there; rp_trainer_progress() then
 * says stopped. Returns RP_OK when finished or stopped; otherwise the first
 * error (a callback's, a collective's, a failed checkpoint write: the
 * previous checkpoint is intact), and nothing more is saved. On a parameter
 * server rank it serves the replicas until they are done. Call it once.
 */
RP_API rp_status rp_trainer_run(rp_trainer *t);

/*
 * Frees the replicas' states (model->destroy on every replica), the
 * replicator and the trainer. Returns the first destroy callback's error
 * (everything is freed regardless). NULL is ignored.
 */
RP_API rp_status rp_trainer_destroy(rp_trainer *t);

/*
 * Evaluates now (model->evaluate on every replica, then model->evaluated)
 * and fills *m, e.g. after rp_trainer_run() or before it for a baseline.
 * Main thread, between runs. Errors: RP_ERR_INVALID (no evaluate callback,
 * or a parameter-server rank), the callbacks' errors.
 */
RP_API rp_status rp_trainer_evaluate(rp_trainer *t, rp_trainer_metrics *m);

/* Where the run stands (main thread, between calls). */
typedef struct rp_trainer_progress {
    int64_t epoch, step;    /* the next batch: where a checkpoint resumes */
    int64_t global_step;    /* steps taken in the whole run */
    int64_t steps_this_run; /* steps rp_trainer_run() took */
    bool finished;          /* every epoch is done */
    bool stopped;           /* stopped early by a stop request or max_steps, checkpointed */
    int stop_signal;        /* the agreed stop request's number (a signal), 0 if none */
} rp_trainer_progress;

/* Where the run stands now (all zero for NULL). */
RP_API rp_trainer_progress rp_trainer_get_progress(const rp_trainer *t);

/*
 * The queries below are for the thread driving the trainer, between calls;
 * each returns NULL, 0 or false for a NULL trainer.
 */
/* The replicator the trainer runs on (owned by it). */
RP_API rp_replicator *rp_trainer_replicator(const rp_trainer *t);
/* True on an MPI parameter-server rank (async): it serves, it has no replicas. */
RP_API bool rp_trainer_is_server(const rp_trainer *t);
/*
 * True on a process that holds no worker of the stepped role (a job with
 * start_roles under mpirun, e.g. an actor rank): it only runs started roles.
 */
RP_API bool rp_trainer_is_bystander(const rp_trainer *t);
/* True on the process of replica 0: it prints and writes the run directory. */
RP_API bool rp_trainer_is_root(const rp_trainer *t);
/* The run directory chosen (owned by the trainer). */
RP_API const char *rp_trainer_run_dir(const rp_trainer *t);
/*
 * Global batches per epoch, as the model's steps_per_epoch said; in
 * steps-only mode cfg.steps (0 on a server rank).
 */
RP_API int64_t rp_trainer_steps_per_epoch(const rp_trainer *t);
/* Local replica 0's state as build made it (NULL on a server rank). */
RP_API void *rp_trainer_state(const rp_trainer *t);
/* The schedule's rate at global step `step` (0-based; 0 on a server rank). */
RP_API float rp_trainer_lr(const rp_trainer *t, int64_t step);

/* ---- stopping on a signal -------------------------------------------------------- */

/*
 * Blocks SIGINT and SIGTERM in the calling thread (and so in every thread
 * started after it: call it first thing in main) and takes them on one
 * thread of its own with sigwait, so that no computing thread is ever
 * interrupted by a handler. While a trainer runs, the first signal asks it
 * to stop at the next step boundary (rp_trainer_request_stop()); a second
 * one, or one while no trainer runs, ends the process with the signal's
 * default action. Once per process; later calls do nothing.
 * Errors: RP_ERR_BACKEND if the thread cannot be started (the default
 * actions stay).
 */
RP_API rp_status rp_trainer_catch_signals(void);

/*
 * Asks the running trainer (in this process) to stop after the current
 * step, checkpointed; `reason` (> 0, a signal number by convention) becomes
 * rp_trainer_progress().stop_signal. The processes agree after each step, so
 * every replica stops after the same one. Returns false, doing nothing, if
 * no trainer is running or a stop was already asked. Thread-safe and
 * async-signal-safe.
 */
RP_API bool rp_trainer_request_stop(int reason);

/* ---- the run directory --------------------------------------------------------------- */

/*
 * Background saving (cfg.checkpoint_background). At a checkpoint's step
 * boundary the main thread copies the state (the model's save callback, the
 * position, the epoch's sums) into one staging checkpoint that the trainer
 * keeps and reuses (rp_checkpoint_reset: after the first save no tensor
 * memory is allocated, and it never holds more than one state), and hands it
 * to the trainer's writer thread, which writes and publishes it (atomically:
 * whole file or shards + index) while the replicas train on. At most one save
 * is in flight: a checkpoint that falls due while the previous one is still
 * being written waits for it first (never skipped, so every cadence point is
 * saved; the wait is the "checkpoint wait" trace span). The last checkpoint of
 * a run (at a stop, max_steps or the end) is waited for before
 * rp_trainer_run returns. A failed background write (a full disk) fails the
 * run at the next step boundary, with the writer's message and the step it
 * was saving; the previously published checkpoint is untouched. A kill at any
 * moment leaves the previously published checkpoint loadable.
 */

/*
 * Checkpoints written by every worker (cfg.checkpoint_per_worker). At a
 * checkpoint's step boundary every worker of the stepped role, in a run,
 * puts the part of the state it holds into its own staging checkpoint
 * (model->save_part; a replica's values and optimizer state of its range,
 * rp_replica_checkpoint_part: its ZeRO shard, or an even part under sync),
 * worker 0 adds the position, the epoch's sums and the metadata and clears
 * what an unpublished earlier attempt left of the generation, and the
 * workers meet. Then every process writes its workers' shards
 * (checkpoint.shards/g<G>/shard-<w>-of-<W>.safetensors, W the role's
 * workers) - inline, or on its writer thread with cfg.checkpoint_background
 * - and the process of worker 0 waits for all W shard files (at most the
 * communicators' timeout, at least a minute; a missing one is named) and
 * publishes the index. Nothing is gathered: no worker holds more than its
 * part, and each process writes only its own bytes. A resume reads each
 * worker's pieces (rp_trainer_load_checkpoint opens a sharded checkpoint
 * lazily). Every reader (eval, export, `replicator checkpoint`) takes it as
 * any sharded checkpoint. Needs lockstep replicas (sync, ZeRO-1/2/3, HSDP):
 * RP_ERR_INVALID at create otherwise.
 */

/* The checkpoint's path in run directory `dir`: "<dir>/checkpoint.safetensors". */
RP_API void rp_trainer_checkpoint_path(char *buf, size_t size, const char *dir);

/*
 * Loads the checkpoint of run directory `dir` (rp_checkpoint_load()); free
 * it with rp_checkpoint_destroy(). A sharded checkpoint (checkpoint.index.json)
 * is opened lazily (rp_checkpoint_open_sharded: each tensor read when asked
 * for, a sharded optimizer's range read alone); where a directory holds both
 * kinds (a run that changed cfg.checkpoint_shards between resumes, killed
 * between publishing one and removing the other), the newer file wins.
 * Errors: those of rp_checkpoint_load() or rp_checkpoint_index_open(),
 * naming the file.
 */
RP_API rp_status rp_trainer_load_checkpoint(rp_checkpoint **ck, const char *dir);

/*
 * The checkpoint of run directory `dir` and the configuration text stored in it (the
 * "replicator.config" metadata that rp_trainer_set_config_json saved; owned by *ck, free both
 * with rp_checkpoint_destroy()): what a model's command needs to resume, evaluate or sample a
 * run from its directory alone. Errors: those of rp_trainer_load_checkpoint (naming the file);
 * RP_ERR_FORMAT "<dir>/checkpoint.safetensors has no replicator.config metadata" for a
 * checkpoint without one. On an error *ck and *config are NULL.
 */
RP_API rp_status rp_trainer_load_run(const char *dir, rp_checkpoint **ck, const char **config);

/*
 * A parameter guard (rp_params_guard_push, nn.h) that holds a model built from a checkpoint's
 * configuration to the checkpoint's tensors before anything is allocated: push it with a
 * rp_trainer_guard_arg around the build. Every parameter the configuration declares must be in
 * the checkpoint as prefix + name, f32, with the declared shape; otherwise RP_ERR_SHAPE naming
 * the tensor and both shapes (a crafted or edited configuration, or another run's file), and
 * the build fails with nothing allocated.
 */
typedef struct rp_trainer_guard_arg {
    const rp_checkpoint *ck;
    const char *prefix; /* "param/", "gen/", ... */
} rp_trainer_guard_arg;
RP_API rp_status rp_trainer_checkpoint_guard(const rp_params *params, void *arg);

/* ---- a model's training command ------------------------------------------------------ */

/*
 * Under mpirun (more than one rank), refuses a job whose ranks were started with different
 * options, before anything loads or trains: every rank calls it with its resolved configuration
 * (the JSON object text it saves with rp_trainer_set_config_json), its run directory and
 * max_steps (which that text does not hold), and the keys that may differ by host (`local`,
 * NULL-ended: a data directory, a thread count). The ranks all-gather a hash of the rest; on a
 * mismatch they compare it with rank 0's, and every rank returns RP_ERR_MISMATCH naming the
 * first differing key, both values and the ranks that differ ("rank 1's "seed" is 2, rank 0's
 * 1"). Elsewhere it does nothing. `timeout_s` bounds the wait for a peer (0: $RP_COMM_TIMEOUT's).
 * Errors: RP_ERR_NOMEM for json NULL (the caller's serialisation failed), RP_ERR_INVALID for
 * text that is not JSON (under mpirun), the communicator's.
 */
RP_API rp_status rp_trainer_agree_config(const char *json, const char *const *local,
                                         const char *out_dir, int64_t max_steps, double timeout_s);

/*
 * Prints "<cmd>: error: <rp_last_error()>" on stderr, prefixed with the rank under mpirun
 * (every process prints its own error: it may be the one that explains the others'), after a
 * newline when `tty` (a progress line may be open). cmd: e.g. "replicator train".
 */
RP_API void rp_trainer_report_error(const char *cmd, bool tty);

/*
 * The end of a model's training command, after rp_trainer_run() returned `status`: reports an
 * error as rp_trainer_report_error(cmd, tty) does (and ends an MPI job: rp_comm_mpi_abort),
 * destroys the trainer (reporting a teardown error) and returns the process's exit status: 1 on
 * an error, 128 + the signal when one stopped the run (rp_trainer_catch_signals), else 0.
 */
RP_API int rp_trainer_finish(rp_trainer *t, rp_status status, const char *cmd, bool tty);

/*
 * A run header's precision line on stderr, for `precision` "bf16" only (nothing for "f32" or
 * NULL): which ops run in bf16 and on which path (rp_kernels_bf16_path), with a warning where
 * that path is slower than f32, and where activations are stored: `activations` "f32" (bf16
 * compute, f32 storage), else (NULL or "bf16") convolution and batch-norm outputs in bf16.
 */
RP_API void rp_trainer_print_precision(const char *precision, const char *activations);

/*
 * What a command sets rp_config.stuck_exit to: true unless RP_STUCK_EXIT is "0" (rp_env). A
 * command promises that its --comm-timeout bounds a stall, and only the watchdog's exit can end
 * a replica stuck outside every collective on the caller's thread (runtime.h, the watchdog); a
 * library caller keeps rp_config_default()'s, which follows RP_STUCK_EXIT alone.
 */
RP_API bool rp_trainer_stuck_exit(void);

#ifdef __cplusplus
}
#endif

#endif
