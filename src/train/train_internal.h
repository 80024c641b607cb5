/*
 * train_internal.h - the trainer's state and the seams between its files:
 * trainer.c (create, destroy, queries), loop.c (the loop over global
 * batches), run_dir.c (directory rules, reading checkpoints), saver.c
 * (writing them: whole or sharded, inline or in the background), report.c
 * (the lines shown and metrics.jsonl), signals.c (the stop request) and command.c (a model
 * command's calls: agreeing options, reporting, finishing). Their shared functions are named
 * trainer_*: not rp_*, which is the API's, and not train_*, which is the command's
 * (models/classifier/classifier_command.h, classifier_options.h).
 */
#ifndef TRAIN_INTERNAL_H
#define TRAIN_INTERNAL_H

#include <limits.h>
#include <stdio.h>

#include "replicator/replicator.h"

/* A run directory of any length the system takes (PATH_MAX), with room for the names inside. */
#define TRAIN_PATH_MAX (PATH_MAX + 64)

/* The straggler report's window (straggler.c). */
#define TRAIN_PHASES 4 /* data, compute, optimizer, comm: reported by every replica each step */
typedef struct train_straggler {
    bool on;          /* lockstep with >= 2 replicas and a window */
    int n, window;    /* replicas; steps kept */
    int filled, next; /* steps in the window; the slot of the next */
    double *times;    /* [window][n][TRAIN_PHASES] seconds */
    double *scratch;  /* [max(window, n)] */
    double *medians;  /* [n][TRAIN_PHASES] */
    double *step;     /* [n] one phase of the last step */
    char *hosts;      /* [n][64] replicas' host names, gathered at the first report */
    bool have_hosts;
    int replica, phase; /* the one reported now (replica -1: none) */
    double ratio;
    int reports; /* reports logged so far */
} train_straggler;

typedef struct trainer_saver trainer_saver;

/* Per worker (cfg.checkpoint_per_worker): this process's workers' parts of a checkpoint. */
typedef struct trainer_parts {
    rp_checkpoint **ck; /* [local]: each local worker's part, reused from save to save */
    int *shard;         /* [local]: its shard, its rank in the stepped role */
    int workers;        /* the shard count: the stepped role's workers */
    int64_t generation; /* the last generation written (read from disk at the first save) */
} trainer_parts;

struct rp_trainer {
    rp_trainer_config cfg; /* its strings point at the copies below */
    char run_dir[TRAIN_PATH_MAX];
    char *config_json;
    const rp_trainer_model *model;
    void *ctx;
    /*
     * rp_replicator_lockstep(): true, every replica trains its shard of every batch, one per run,
     * and results are means over replicas. False: the replicas step without waiting for each
     * other (each batch to one replica): each stops on its own at a stop request, a run covers
     * many batches, the lead replica prints the progress, settle() follows every run, and results
     * are sums over batches.
     */
    bool lockstep;
    rp_replicator *rep;
    void **states; /* [local]: what build made on each local replica */
    int local;
    bool server, root, tty;
    bool bystander; /* holds no worker of the stepped role (start_roles): runs started roles only */
    bool roles_started; /* start_roles was called: trainer_finish_roles() is due */
    rp_schedule sched;
    bool steps_only; /* cfg.steps: one stretch of steps, shown and recorded without epochs */
    int64_t steps_per_epoch; /* cfg.steps in steps-only mode (then cfg.epochs is 1) */
    /* The model's scalars (default {"loss"}) and which of them the lines show. */
    int n_scalars;
    const char *scalar_names[RP_TRAINER_MAX_SCALARS];
    bool shown[RP_TRAINER_MAX_SCALARS];
    bool gauge[RP_TRAINER_MAX_SCALARS];    /* shown as the latest value (rp_trainer_model.gauges) */
    double latest[RP_TRAINER_MAX_SCALARS]; /* a gauge's latest value */
    char scalar_reports[RP_TRAINER_MAX_SCALARS]
                       [16];          /* their rp_replica_report() names, made once */
    int64_t epoch, step, global_step; /* the next batch */
    int64_t first_step;               /* global_step when rp_trainer_run started */
    FILE *metrics;
    void *tb; /* cfg.tensorboard_dir's writer's state (root only; NULL: none, or failed) */
    const rp_scalar_writer *tb_writer; /* cfg.tensorboard_writer */
    int64_t tb_step_line;              /* the global step of the last step line it got (-1: none) */
    int stop;                          /* the agreed stop request (0: none) */
    bool stopped, finished;
    int failed; /* independent replicas: one failed; the others stop at their next batch */
    /* The chunk being run: batches [chunk_start, chunk_end) of epoch `epoch`. */
    int64_t chunk_start, chunk_end;
    /*
     * This epoch so far: its steps and the sums of their scalars (kept in the checkpoint, so that
     * a resumed run's epoch line covers the whole epoch); and the steps this process ran of it in
     * epoch_seconds, spent in runs (the rate).
     */
    int64_t epoch_steps;
    double epoch_sums[RP_TRAINER_MAX_SCALARS];
    int64_t epoch_run_steps;
    double epoch_seconds;
    double t_print; /* when the progress line was last drawn */
    train_straggler straggler;
    char straggler_text[96]; /* "  straggler: replica 1 compute 3.0x" on the progress line, or "" */
    bool tracing;            /* this trainer started tracing (cfg.trace) */
    char *trace_path;        /* cfg.trace, copied; NULL: none */
    trainer_saver *saver;    /* the background writer (cfg.checkpoint_background), once started */
    int64_t generation;      /* the last sharded generation written inline (0: read from disk) */
    trainer_parts parts;     /* cfg.checkpoint_per_worker's staging, once the first save made it */
};

/* trainer.c: whether `key` is a JSON-safe name of 1..31 letters, digits or '_'. */
bool trainer_key_ok(const char *key);

/* run_dir.c */
rp_status trainer_choose_run_dir(char *dir, size_t size, bool exact, bool force);
/* Creates dir and its parents and checks that files can be made in it (RP_ERR_IO naming why). */
rp_status trainer_make_dirs(const char *dir);
/*
 * saver.c: saves the run's state to its checkpoint (the root process only; nothing with
 * no_checkpoint): inline, or staged and handed to the background writer
 * (cfg.checkpoint_background), after waiting for the save before it.
 */
rp_status trainer_save_checkpoint(rp_trainer *t);
/* Writes ck as the run's checkpoint: whole (shards 0) or as `shards` shards of generation
 * *generation + 1 (0: read the published one first) with `layout` in the index, published
 * atomically. */
rp_status trainer_write_checkpoint(const char *run_dir, int shards, const char *layout,
                                   int64_t *generation, const rp_checkpoint *ck);
/* The index's layout text: the shards, and the run's layout whose gathered state they split. */
void trainer_layout_text(const rp_trainer *t, char *buf, size_t size);
/*
 * Per worker: writes this process's parts (parts[i] as shard shard[i] of `workers`) of
 * `generation`; the process holding shard 0 then waits (at most timeout_ms) for every shard
 * file and publishes the index, removing a whole file beside it.
 */
rp_status trainer_write_parts(const char *run_dir, rp_checkpoint *const *parts, const int *shard,
                              int n_parts, int workers, const char *layout, int64_t generation,
                              int timeout_ms);
/* How long the publisher of a checkpoint written per worker waits for the others' shards. */
int trainer_shard_timeout_ms(const rp_trainer *t);
/* Frees the per-worker staging parts. */
void trainer_parts_free(rp_trainer *t);
/* A failed background write, reported once (RP_OK if none, or no writer). */
rp_status trainer_saver_poll(rp_trainer *t);
/* Waits for the save in flight; then as trainer_saver_poll. */
rp_status trainer_saver_wait(rp_trainer *t);
/* Finishes the save in flight and stops the writer thread (a failure not yet reported warns). */
void trainer_saver_stop(rp_trainer *t);
/*
 * The epoch's running scalars in a checkpoint: "train/epoch_steps" (i64, 1) the steps they cover,
 * and "train/epoch_sums" (u64, one per scalar) their sums' IEEE-754 bits, exact.
 */
#define TRAIN_EPOCH_STEPS "train/epoch_steps"
#define TRAIN_EPOCH_SUMS  "train/epoch_sums"

/* report.c; `means` are the scalars' means, in the model's order. */
void trainer_print_progress(rp_trainer *t, int64_t epoch, int64_t step, int64_t global_done,
                            const double *means, float lr, int64_t done, double seconds);
void trainer_print_epoch(const rp_trainer *t, int64_t epoch, const double *means, double rate,
                         double seconds, const rp_trainer_metrics *m);
void trainer_print_eval(const rp_trainer *t, const rp_trainer_metrics *m);
/*
 * The metrics lines: metrics.jsonl's, and the same numbers as TensorBoard scalars. A
 * metrics.jsonl line that cannot be written whole (a full disk) is reported once, and
 * t->metrics is closed and NULL: the run goes on without it.
 */
void trainer_metrics_step(rp_trainer *t, int64_t epoch, const double *means);
void trainer_metrics_epoch(rp_trainer *t, int64_t epoch, const double *means, double rate,
                           const rp_trainer_metrics *m);
void trainer_metrics_eval(rp_trainer *t, const rp_trainer_metrics *m);
/* Closes the TensorBoard writer (once; a failure warns). */
void trainer_tensorboard_close(rp_trainer *t);

/*
 * loop.c: after a run (or a failed create) of a job with started roles: the stepped replicas'
 * stop_roles, then a wait for every started role. Returns `status` if it is an error, else the
 * first error of the roles. Once; later calls return `status`.
 */
rp_status trainer_finish_roles(rp_trainer *t, rp_status status);

rp_status trainer_straggler_init(rp_trainer *t);
void trainer_straggler_free(rp_trainer *t);
/* On each replica at the end of its lockstep chunk: its phase times as reports. */
rp_status trainer_straggler_report(rp_replica *rep);
/* After each lockstep chunk: the window, and a report when a straggler appears, changes or goes.
 */
rp_status trainer_straggler_step(rp_trainer *t);
/* signals.c: the process's stop request, taken while a trainer runs. */
void trainer_stop_arm(bool on);
int trainer_stop_reason(void);

#endif
