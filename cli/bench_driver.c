/*
 * bench_driver.c - a model's trainer callbacks (replicator/trainer.h) driven step by step on a
 * replicator, without the trainer's loop: what the benchmarks time is exactly what training runs
 * per step.
 */
#include "cli.h"

rp_status rp_cli_driver_build(rp_replica *rep, void *arg)
{
    rp_cli_driver *d = arg;
    return d->model->build(rep, d->ctx, NULL, NULL, &d->states[rp_replica_local_index(rep)]);
}

rp_status rp_cli_driver_step(rp_replica *rep, void *arg)
{
    rp_cli_driver *d = arg;
    double scalars[RP_TRAINER_MAX_SCALARS] = {0};
    return d->model->train_step(rep, d->ctx, d->states[rp_replica_local_index(rep)], &d->at,
                                scalars);
}

rp_status rp_cli_driver_destroy(rp_replica *rep, void *arg)
{
    rp_cli_driver *d = arg;
    void *s = d->states[rp_replica_local_index(rep)];
    return s && d->model->destroy ? d->model->destroy(rep, d->ctx, s) : RP_OK;
}
