/*
 * train_internal.h - the trainer's state and the seams between its files:
 * trainer.c (create, destroy, queries), loop.c (the loop over global
 * batches), run_dir.c (directory rules, checkpoints), report.c (the lines
 * shown and metrics.jsonl) and signals.c (the stop request).
 */
#ifndef TRAIN_INTERNAL_H
#define TRAIN_INTERNAL_H

#include <stdio.h>

#include "replicator/replicator.h"

#define TRAIN_PATH_MAX 600

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
    rp_schedule sched;
    int64_t steps_per_epoch;
    int64_t epoch, step, global_step; /* the next batch */
    int64_t first_step;               /* global_step when rp_trainer_run started */
    FILE *metrics;
    int stop;   /* the agreed stop request (0: none) */
    bool stopped, finished;
    int failed; /* independent replicas: one failed; the others stop at their next batch */
    /* The chunk being run: batches [chunk_start, chunk_end) of epoch `epoch`. */
    int64_t chunk_start, chunk_end;
    /* This epoch so far: steps, the sum of their losses, seconds spent in runs. */
    int64_t epoch_steps;
    double epoch_loss_sum, epoch_seconds;
    double t_print; /* when the progress line was last drawn */
};

/* run_dir.c */
rp_status train_choose_run_dir(char *dir, size_t size, bool exact, bool force);
rp_status train_make_dirs(const char *dir);
/* Saves the run's state to its checkpoint (the root process only; nothing with no_checkpoint). */
rp_status train_save_checkpoint(const rp_trainer *t);

/* report.c */
void train_print_progress(rp_trainer *t, int64_t epoch, int64_t step, int64_t global_done, double loss,
                          float lr, int64_t done, double seconds);
void train_print_epoch(const rp_trainer *t, int64_t epoch, double train_loss, double rate,
                       double seconds, const rp_trainer_metrics *m);
void train_print_eval(const rp_trainer *t, const rp_trainer_metrics *m);
void train_metrics_step(const rp_trainer *t, int64_t epoch, double loss);
void train_metrics_epoch(const rp_trainer *t, int64_t epoch, double train_loss, double rate,
                         const rp_trainer_metrics *m);
void train_metrics_eval(const rp_trainer *t, const rp_trainer_metrics *m);

/* signals.c: the process's stop request, taken while a trainer runs. */
void train_stop_arm(bool on);
int train_stop_reason(void);

#endif
