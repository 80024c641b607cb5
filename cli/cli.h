/* cli.h - the subcommands of the replicator command. Each returns an exit code. */
#ifndef RP_CLI_H
#define RP_CLI_H

#include "replicator/replicator.h"

/* The commands that pick a model from the registry (dispatch.c). */
int rp_cli_train(int argc, char **argv);
int rp_cli_eval(int argc, char **argv);
int rp_cli_sample(int argc, char **argv);
int rp_cli_bench(int argc, char **argv);
/* `replicator plan [MODEL] [train's options] [--json]`. */
int rp_cli_plan(int argc, char **argv);

/* The command's own. */
int rp_cli_info(int argc, char **argv);
int rp_cli_trace(int argc, char **argv);
int rp_cli_checkpoint(int argc, char **argv);
int rp_cli_bench_allreduce(int argc, char **argv);
int rp_cli_bench_ps(int argc, char **argv);
int rp_cli_bench_pipeline(int argc, char **argv);
/* `replicator export RUN_DIR OUT [--dtype bf16|f32]`: a run's parameters only (export.c). */
int rp_cli_export(int argc, char **argv);

#endif
