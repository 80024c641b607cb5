/*
 * classifier_command.h - the image classifiers' commands (resnet20, resnet18, resnet50, mlp):
 * `replicator train` (classifier_train_command.c), `eval` of a classifier's run
 * (classifier_eval_command.c), `bench resnet` (classifier_bench_command.c), `plan` and
 * `train --plan-check` (classifier_plan_command.c), what they share (classifier_command.c: the
 * runtime's layout from the run options of classifier_options.h), and the descriptor the
 * command's registry lists (rp_classifier_model, classifier_model.c). Written against the public
 * headers, this folder's and models/resnet's.
 */
#ifndef RP_MODELS_CLASSIFIER_COMMAND_H
#define RP_MODELS_CLASSIFIER_COMMAND_H

#include <limits.h>

#include "models/classifier/classifier_options.h"
#include "models/classifier/classifier_plan.h"

/*
 * The replicator's layout from the options (backend, replicas, threads,
 * timeout, regime); settles o->replicas when it is automatic (0). Errors:
 * RP_ERR_INVALID (a batch that does not split across the replicas, threads
 * under mpirun).
 */
rp_status train_runtime_config(train_opts *o, rp_config *cfg);

/* "threads", "mpi" or anything else ("auto") as the runtime's backend. */
rp_backend train_backend(const char *name);

/* rp_trainer_agree_config on json, which it frees. */
rp_status train_agree_options(char *json, const char *const *local, const char *out_dir,
                              int64_t max_steps, double timeout_s);

/* The command's name in its errors: "replicator train: error: ..." (rp_trainer_report_error). */
#define TRAIN_CMD "replicator train"

/*
 * The commands. The registry gives the classifiers, its default model, every command line no
 * other model claims, from the subcommand on: argv[0] is "train", "eval", "plan" or "bench"
 * (`replicator bench` alone or with --help: the command's usage), or "resnet" for
 * `replicator bench resnet`.
 */
int train_classifier_main(int argc, char **argv); /* `replicator train [MODEL] ...` */
int classifier_eval_main(int argc, char **argv);  /* `replicator eval RUN_DIR [--threads N]` */
int classifier_bench_main(int argc, char **argv); /* `replicator bench resnet ...` */
int classifier_plan_main(int argc, char **argv);  /* `replicator plan [MODEL] ... [--json]` */

/*
 * Whether json is a classifier's saved run options (train_opts_from_json reads it); when not,
 * rp_last_error() names the first bad key, so the command can say why a run is no model's.
 */
bool classifier_config_is_classifier(const char *json);

/* ---- the plan (classifier_plan_command.c) ---------------------------------------------- */

/*
 * Prints plan p of the run o (o->replicas settled) to f: a table, or one
 * JSON object (json).
 */
void plan_print(FILE *f, const rp_classifier_plan *p, const train_opts *o, const rp_classifier *clf,
                bool json);

/* The plan of run o as `train` will lay it out (rcfg from train_runtime_config). */
rp_status plan_for_run(rp_classifier_plan **p, const train_opts *o, const rp_config *rcfg,
                       const rp_classifier *clf);

/*
 * --plan-check: a trainer model that wraps `inner` (ctx inner_ctx) and, on
 * each of the first `steps` steps of every local worker, measures the
 * worker's memory (parameters, gradients, optimizer state, the arena's live
 * peak) and its traffic over the step (rp_comm_stats) on its data, pipe and
 * model axes, and on its sync group's communicator from the end of its last
 * step (or of build) to the end of this one.
 * `workers` is the number of local workers (rp_config.replicas).
 */
typedef struct plan_check plan_check;
rp_status plan_check_create(plan_check **pc, const rp_classifier_plan *plan,
                            const rp_trainer_model *inner, void *inner_ctx, int workers, int steps);
/* The wrapping model; its callbacks take the plan_check as ctx. */
const rp_trainer_model *plan_check_model(const plan_check *pc);
/*
 * Prints each measured worker's values against the plan to f (memory: the
 * difference in percent, flagged beyond 10%; traffic: exact, any difference
 * flagged) and returns the number of flags.
 */
int plan_check_report(const plan_check *pc, FILE *f);
void plan_check_destroy(plan_check *pc);

/*
 * What a saved classifier run's configuration (JSON) needs before its network: its options, the
 * classifier config, its dataset's splits (*train and *test: the caller destroys them, also on
 * an error) and the training split's per-channel mean and std (RP_LOADER_MAX_CHANNELS each), the
 * normalisation the run trained with. Shared by eval, export and the ONNX test's forward.
 */
rp_status classifier_run_data(const char *config, train_opts *o, rp_classifier_config *cc,
                              rp_dataset **train, rp_dataset **test, float *mean, float *std);

/* `replicator export --format onnx` of a classifier's run (the descriptor's onnx hook). */
rp_status classifier_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config,
                                 bool online, char *what, size_t what_size);

/* The descriptor (classifier_model.c): the registry's first, default model. */
extern const rp_model_desc rp_classifier_model;

#endif
