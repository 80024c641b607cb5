/*
 * bench.c - what a model's benchmark shares (replicator/bench.h): its trainer callbacks driven
 * step by step on a replicator without the trainer's loop, the median of the timed steps, and
 * --precision as the benchmarks take and report it.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/bench.h"
#include "replicator/replicator.h"

/* The driver of a run and this worker's state slot, or NULL with the error set. */
static void **driver_slot(rp_replica *rep, rp_bench_driver *d, const char *what)
{
    if (!d || !d->model || !d->model->build || !d->model->train_step || !d->states) {
        RP_ERROR(RP_ERR_INVALID, "%s: a driver needs a model with build and train_step, and states",
                 what);
        return NULL;
    }
    int i = rp_replica_local_index(rep);
    if (i < 0 || i >= d->nstates) {
        RP_ERROR(RP_ERR_INVALID, "%s: local worker %d has no state slot (nstates %d)", what, i,
                 d->nstates);
        return NULL;
    }
    return &d->states[i];
}

rp_status rp_bench_driver_build(rp_replica *rep, void *arg)
{
    rp_bench_driver *d = arg;
    void **slot = driver_slot(rep, d, "rp_bench_driver_build");
    if (!slot) return rp_last_status();
    return d->model->build(rep, d->ctx, NULL, NULL, slot);
}

rp_status rp_bench_driver_step(rp_replica *rep, void *arg)
{
    rp_bench_driver *d = arg;
    void **slot = driver_slot(rep, d, "rp_bench_driver_step");
    if (!slot) return rp_last_status();
    double scalars[RP_TRAINER_MAX_SCALARS] = {0};
    return d->model->train_step(rep, d->ctx, *slot, &d->at, scalars);
}

rp_status rp_bench_driver_destroy(rp_replica *rep, void *arg)
{
    rp_bench_driver *d = arg;
    void **slot = driver_slot(rep, d, "rp_bench_driver_destroy");
    if (!slot) return rp_last_status();
    if (!*slot || !d->model->destroy) return RP_OK;
    rp_status status = d->model->destroy(rep, d->ctx, *slot);
    *slot = NULL;
    return status;
}

double rp_bench_median(double *v, int n)
{
    if (!v || n < 1) return 0;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool rp_bench_precision_parse(const char *v, rp_dtype *out)
{
    if (!v) return false;
    if (!strcmp(v, "f32")) {
        *out = RP_F32;
        return true;
    }
    if (!strcmp(v, "bf16")) {
        *out = RP_BF16;
        return true;
    }
    return false;
}

rp_dtype rp_bench_precision_ran(rp_replicator *r)
{
    return rp_tape_precision(rp_replica_tape(rp_replicator_replica(r, 0))).compute;
}

const char *rp_bench_precision_json(rp_dtype p, char *buf, size_t size)
{
    if (p == RP_BF16)
        snprintf(buf, size, "\"precision\":\"bf16\",\"bf16_path\":\"%s\"", rp_kernels_bf16_path());
    else
        snprintf(buf, size, "\"precision\":\"%s\"", rp_dtype_name(p));
    return buf;
}

const char *rp_bench_precision_text(rp_dtype p, char *buf, size_t size)
{
    if (p == RP_BF16)
        snprintf(buf, size, "bf16 on %s%s", rp_kernels_bf16_path(),
                 rp_kernels_bf16_fast() ? "" : " (slower than f32)");
    else
        snprintf(buf, size, "%s", rp_dtype_name(p));
    return buf;
}
