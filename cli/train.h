/*
 * train.h - what `replicator train` and `replicator eval` share: the classifiers' run options
 * (models/classifier/classifier_options.h, stored in every checkpoint) and how they map onto
 * the runtime (the layout) and the trainer (replicator/trainer.h).
 */
#ifndef RP_CLI_TRAIN_H
#define RP_CLI_TRAIN_H

#include <limits.h>

#include "cli.h"
#include "models/classifier/classifier_options.h"

/*
 * The replicator's layout from the options (backend, replicas, threads,
 * timeout, regime), shared by every model's training command; settles
 * o->replicas when it is automatic (0). Errors: RP_ERR_INVALID (a batch
 * that does not split across the replicas, threads under mpirun).
 */
rp_status train_runtime_config(train_opts *o, rp_config *cfg);

/* "threads", "mpi" or anything else ("auto") as the runtime's backend. */
rp_backend train_backend(const char *name);

/*
 * The command's rp_config.stuck_exit: true unless RP_STUCK_EXIT=0. The command promises that
 * --comm-timeout bounds a stall, and only the watchdog's exit can end a replica stuck outside
 * every collective on the caller's thread (replica 0 on threads; runtime.h, the watchdog).
 */
bool train_stuck_exit(void);

rp_status train_agree_options(char *json, const char *const *local, const char *out_dir,
                              int64_t max_steps, double timeout_s);

/* The command's name in its errors: "replicator train: error: ..." (rp_trainer_report_error). */
#define TRAIN_CMD "replicator train"

/* `replicator train [resnet20|resnet18|resnet50|mlp] ...`: the classifiers (train.c). */
int train_classifier_main(int argc, char **argv);

#endif
