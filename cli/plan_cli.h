/*
 * plan_cli.h - `replicator plan` and `replicator train --plan-check`
 * (plan.c): the classifier's plan (models/classifier/classifier_plan.h)
 * printed, and compared with what the first steps of a run measure.
 */
#ifndef RP_CLI_PLAN_H
#define RP_CLI_PLAN_H

#include "models/classifier/classifier_plan.h"
#include "train.h"

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

#endif
