/*
 * replicator/bench.h - what a model's benchmark shares with every other (`replicator bench
 * MODEL`, or a user's own timing program): the model's trainer callbacks (trainer.h) driven one
 * step at a time on a replicator, without the trainer's loop, so that what is timed is exactly
 * what training runs per step; the median of the timed steps; and --precision f32|bf16 as the
 * benchmarks take it and report what ran.
 */
#ifndef REPLICATOR_BENCH_H
#define REPLICATOR_BENCH_H

#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A model's trainer callbacks driven on a replicator one rp_replicator_run at a time: pass the
 * driver as the run's argument to rp_bench_driver_build (the model's build on every worker,
 * with no checkpoint; the state goes to states[local index]), then to rp_bench_driver_step as
 * often as wanted (one train_step at `at` on every worker; its scalars are dropped), and last
 * to rp_bench_driver_destroy (the model's destroy of each state built; a NULL state or a model
 * without destroy is skipped). The caller owns the driver and states[] (nstates slots, one per
 * local worker, zeroed) and sets `at` before each step. Each worker touches only its own slot,
 * so the workers' calls may run at once.
 * Errors: RP_ERR_INVALID for a NULL driver, one without a model, build or train_step, or
 * without states, or a worker whose local index is not below nstates; the model's own.
 */
typedef struct rp_bench_driver {
    const rp_trainer_model *model;
    void *ctx;     /* the model's context (its callbacks' ctx) */
    void **states; /* [local workers] */
    int nstates;   /* the slots in states: the replicator's local workers */
    rp_trainer_at at;
} rp_bench_driver;
RP_API rp_status rp_bench_driver_build(rp_replica *rep, void *arg);
RP_API rp_status rp_bench_driver_step(rp_replica *rep, void *arg);
RP_API rp_status rp_bench_driver_destroy(rp_replica *rep, void *arg);

/* The median of the n values in v (sorts them in place); 0 for n < 1. */
RP_API double rp_bench_median(double *v, int n);

/*
 * --precision as every benchmark takes it: "f32" or "bf16" into *out and true; false, *out
 * untouched, for anything else (NULL included).
 */
RP_API bool rp_bench_precision_parse(const char *v, rp_dtype *out);

/*
 * The compute type the steps of replicator r ran with: replica 0's tape's (rp_tape_precision),
 * what a benchmark reports rather than what it asked for. Call it between runs.
 */
RP_API rp_dtype rp_bench_precision_ran(rp_replicator *r);

/*
 * A precision as a benchmark reports it, written into buf (size bytes) and returned: as JSON
 * members `"precision":"bf16","bf16_path":"amx"` (no braces, no comma; f32 has no path) and as
 * text "bf16 on amx" or "f32" (the path: rp_kernels_bf16_path).
 */
RP_API const char *rp_bench_precision_json(rp_dtype p, char *buf, size_t size);
RP_API const char *rp_bench_precision_text(rp_dtype p, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
