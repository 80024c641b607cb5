/* cli.h - the subcommands of the replicator command. Each returns an exit code. */
#ifndef RP_CLI_H
#define RP_CLI_H

#include "replicator/replicator.h"

int rp_cli_train(int argc, char **argv);
int rp_cli_info(int argc, char **argv);
int rp_cli_bench(int argc, char **argv);
int rp_cli_trace(int argc, char **argv);
int rp_cli_bench_allreduce(int argc, char **argv);
int rp_cli_bench_ps(int argc, char **argv);
int rp_cli_bench_sngan(int argc, char **argv);
int rp_cli_bench_pipeline(int argc, char **argv);
/* The median of n values (sorts them in place); for the benchmarks. */
double rp_cli_median(double *v, int n);
int rp_cli_eval(int argc, char **argv);
int rp_cli_sample(int argc, char **argv);

#endif
