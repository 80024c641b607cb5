/* cli.h - the subcommands of the replicator command. Each returns an exit code. */
#ifndef RP_CLI_H
#define RP_CLI_H

#include "replicator/replicator.h"

int rp_cli_train(int argc, char **argv);
int rp_cli_info(int argc, char **argv);
int rp_cli_bench(int argc, char **argv);
int rp_cli_trace(int argc, char **argv);
/* `replicator plan [MODEL] [train's options] [--json]` (plan.c). */
int rp_cli_plan(int argc, char **argv);
int rp_cli_checkpoint(int argc, char **argv);
int rp_cli_bench_allreduce(int argc, char **argv);
int rp_cli_bench_ps(int argc, char **argv);
int rp_cli_bench_sngan(int argc, char **argv);
/* `replicator bench resnet ...`: a classifier's training throughput (bench.c). */
int rp_cli_bench_resnet(int argc, char **argv);
void rp_cli_bench_usage(FILE *f); /* bench.c: the usage of `replicator bench` */
int rp_cli_bench_pipeline(int argc, char **argv);
/*
 * A model's trainer callbacks driven on a replicator one run at a time (bench_driver.c), for the
 * benchmarks: build (states[] by local index, no checkpoint), one train_step at `at` on every
 * worker, destroy. Pass the driver as the run's argument.
 */
typedef struct rp_cli_driver {
    const rp_trainer_model *model;
    void *ctx;     /* the model's context */
    void **states; /* [local workers] */
    rp_trainer_at at;
} rp_cli_driver;
rp_status rp_cli_driver_build(rp_replica *rep, void *arg);
rp_status rp_cli_driver_step(rp_replica *rep, void *arg);
rp_status rp_cli_driver_destroy(rp_replica *rep, void *arg);
/*
 * --precision f32|bf16 in every benchmark (bench_precision.c). parse: "f32" or "bf16" into *out,
 * false (out untouched) for anything else, NULL included. ran: the compute type of replica 0's
 * tape (rp_tape_precision), what the benchmark's steps ran with; call it between runs. json and
 * text write into buf (size bytes) and return it: `"precision":"bf16","bf16_path":"amx"` (no
 * braces, no comma; f32 has no path) and "bf16 on amx" or "f32".
 */
bool rp_cli_precision_parse(const char *v, rp_dtype *out);
rp_dtype rp_cli_precision_ran(rp_replicator *r);
const char *rp_cli_precision_json(rp_dtype p, char *buf, size_t size);
const char *rp_cli_precision_text(rp_dtype p, char *buf, size_t size);
/* The median of n values (sorts them in place); for the benchmarks. */
double rp_cli_median(double *v, int n);
int rp_cli_eval(int argc, char **argv);
/* The classifiers' eval (eval.c): a run that `owner` (the registry's lookup by a run's saved
   configuration, or NULL) gives to a registered model is evaluated by that model's command. */
typedef const rp_model_desc *(*rp_cli_model_of_config_fn)(const char *json);
int rp_cli_eval_run(int argc, char **argv, rp_cli_model_of_config_fn owner);
int rp_cli_eval_classifier(int argc, char **argv); /* rp_cli_eval_run with no other models */
int rp_cli_sample(int argc, char **argv);
/* `replicator export RUN_DIR OUT [--dtype bf16|f32]`: a run's parameters only (export.c). */
int rp_cli_export(int argc, char **argv);

#endif
