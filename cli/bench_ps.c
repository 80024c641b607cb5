/*
 * bench_ps.c - `replicator bench ps`: parameter-server throughput, in
 * updates per second, for a set the size of ResNet-20's parameters.
 *
 * Each replica steps an async optimizer (rp_replica_optimizer_create in the
 * async regime: push the gradients, pull the values) as fast as it can for a
 * fixed time, with no model: what is measured is the servers and the
 * transport. One update = one push of the whole set applied by every
 * server. The same code runs on the threads backend (in-process shards) and
 * under mpirun (the last --ps ranks serve). Next to it, the bound of one
 * core: rp_optim_apply over the whole set, back to back, plus the two
 * copies a push and a pull cost.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct ps_job {
    int64_t numel;
    double seconds;
    rp_optim_config optim;
    rp_params **params; /* [local replicas] */
} ps_job;

static rp_status bench_replica(rp_replica *rep, void *arg)
{
    ps_job *job = arg;
    rp_params *p = job->params[rp_replica_local_index(rep)];
    rp_optimizer *opt = NULL;
    float *grad = NULL;
    rp_status status = RP_OK;
    RP_TRY(rp_replica_optimizer_create(rep, &opt, p, &job->optim));
    /* The gradient block is the kernel table's storage: the values are made on the host and
       uploaded (rp_params_write_grads). */
    grad = malloc((size_t)job->numel * sizeof *grad);
    if (!grad) {
        status = RP_ERROR(RP_ERR_NOMEM, "bench ps: %lld gradient values", (long long)job->numel);
        goto cleanup;
    }
    RP_TRY(rp_barrier(rep));
    double t0 = rp_now_s(), t = t0;
    int64_t steps = 0;
    while (t - t0 < job->seconds) {
        /* Small gradients, refreshed each step as a backward pass would (the step zeroes them). */
        for (int64_t i = 0; i < job->numel; i++)
            grad[i] = 1e-6f * (float)((i + steps) & 15);
        RP_TRY(rp_params_write_grads(p, grad));
        RP_TRY(rp_optimizer_step(opt, 0.01f));
        steps++;
        t = rp_now_s();
    }
    RP_TRY(rp_replica_report(rep, "steps", (double)steps, RP_SUM));
    RP_TRY(rp_replica_report(rep, "seconds", t - t0, RP_MAX));
cleanup:
    free(grad);
    rp_optimizer_destroy(opt);
    return status;
}

/* Whole-set updates per second that one core applies locally (plus a push's and a pull's copy). */
static double local_rate(const ps_job *job)
{
    int64_t n = job->numel;
    float *v = rp_calloc((size_t)n * sizeof(float)), *g = rp_calloc((size_t)n * sizeof(float));
    float *s = rp_calloc((size_t)n * 2 * sizeof(float)), *c = rp_calloc((size_t)n * sizeof(float));
    double rate = 0;
    if (v && g && s && c) {
        int64_t k = 0;
        double t0 = rp_now_s(), t = t0;
        while (t - t0 < 1.0) {
            memcpy(c, g, (size_t)n * sizeof(float));
            rp_optim_apply(&job->optim, v, c, s, n, 0.01f, ++k);
            memcpy(c, v, (size_t)n * sizeof(float));
            t = rp_now_s();
        }
        rate = (double)k / (t - t0);
    }
    rp_free(v);
    rp_free(g);
    rp_free(s);
    rp_free(c);
    return rate;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator bench ps [options]       (under mpirun: the last --ps ranks serve)\n"
            "\n"
            "Updates per second through the parameter servers: every replica pushes a gradient\n"
            "and pulls the values as fast as it can, with no model.\n"
            "  --replicas N   replicas (threads; default 3; under mpirun: the other ranks)\n"
            "  --ps S         parameter servers (default 1)\n"
            "  --numel N      floats in the set (default 272186, ResNet-20's parameters)\n"
            "  --optim O      sgd, momentum (default) or adam\n"
            "  --seconds T    how long to run (default 3)\n"
            "  --staleness K  the staleness bound (default unbounded)\n"
            "  --precision P  f32 only: no model runs, and the servers move and apply f32 (bf16\n"
            "                 is refused, naming why)\n");
}

int rp_cli_bench_ps(int argc, char **argv)
{
    ps_job job = {.numel = 272186, .seconds = 3, .optim = rp_optim_config_default()};
    rp_config cfg = rp_config_default();
    cfg.regime = RP_REGIME_ASYNC;
    cfg.replicas = 3;
    cfg.threads_per_replica = 1;
    cfg.checksum_every = 0;
    bool mpi = rp_comm_mpi_launched();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        long n = 0;
        bool ok = v && rp_options_parse_long(v, -1, 1L << 30, &n);
        if (!strcmp(a, "--precision") && v) {
            rp_dtype p = RP_F32;
            ok = rp_bench_precision_parse(v, &p);
            if (ok && p != RP_F32) {
                fprintf(stderr,
                        "replicator bench ps: --precision %s: this benchmark runs no model, and "
                        "the parameter servers move and apply f32 values and gradients (bf16 "
                        "payloads are for the synchronous strategies: --grad-dtype); only f32 "
                        "applies\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--optim") && v) {
            ok = true;
            if (!strcmp(v, "sgd"))
                job.optim.momentum = 0;
            else if (!strcmp(v, "adam"))
                job.optim.kind = RP_OPTIM_ADAM;
            else
                ok = !strcmp(v, "momentum");
        } else if (!strcmp(a, "--replicas")) {
            ok = ok && n >= 1 && n <= 64;
            cfg.replicas = (int)n;
        } else if (!strcmp(a, "--ps")) {
            ok = ok && n >= 1 && n <= 256;
            cfg.ps = (int)n;
        } else if (!strcmp(a, "--numel")) {
            ok = ok && n >= 1 && n <= (1L << 30);
            job.numel = n;
        } else if (!strcmp(a, "--seconds")) {
            ok = ok && n >= 1 && n <= 3600;
            job.seconds = (double)n;
        } else if (!strcmp(a, "--staleness")) {
            ok = ok && n >= -1 && n <= (1L << 30);
            cfg.staleness = (int)n;
        } else {
            ok = false;
        }
        if (!ok) {
            fprintf(stderr, "replicator bench ps: bad option %s %s (see --help)\n", a, v ? v : "");
            return 2;
        }
        i++;
    }
    if (mpi) {
        cfg.backend = RP_BACKEND_MPI;
        cfg.replicas = 1;
    } else {
        cfg.backend = RP_BACKEND_THREADS;
    }
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    int local = 0;
    RP_TRY(rp_replicator_create(&r, &cfg));
    if (rp_replicator_is_server(r)) {
        RP_TRY(rp_replicator_serve(r));
        goto cleanup;
    }
    local = rp_replicator_local_replicas(r);
    job.params = calloc((size_t)local, sizeof *job.params);
    if (!job.params) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < local; i++) {
        RP_TRY(rp_params_create(&job.params[i]));
        rp_init init = {.kind = RP_INIT_NORMAL, .value = 0.1f};
        int shape[1] = {(int)job.numel};
        if (!rp_params_add(job.params[i], "w", 1, shape, init, true)) {
            status = rp_last_status();
            goto cleanup;
        }
        RP_TRY(rp_params_finalize(job.params[i], 1));
    }
    RP_TRY(rp_replicator_run(r, bench_replica, &job));
    double steps = 0, seconds = 1;
    RP_TRY(rp_replicator_result(r, "steps", &steps));
    RP_TRY(rp_replicator_result(r, "seconds", &seconds));
    if (rp_replica_id(rp_replicator_replica(r, 0)) == 0) {
        const char *optim = job.optim.kind == RP_OPTIM_ADAM ? "adam"
                            : job.optim.momentum > 0        ? "momentum"
                                                            : "sgd";
        double rate = steps / seconds, bound = local_rate(&job);
        double mb = (double)job.numel * sizeof(float) / 1e6;
        printf("parameter servers (%s): %d replicas, %d server%s, %lld floats (%.2f MB), %s, "
               "precision f32\n",
               rp_replicator_backend(r), rp_replicator_replicas(r), cfg.ps, cfg.ps > 1 ? "s" : "",
               (long long)job.numel, mb, optim);
        printf(
            "  %.0f updates/s (%.0f pushes in %.1f s; %.2f GB/s of gradients in and values out)\n",
            rate, steps, seconds, rate * mb * 2 / 1e3);
        printf("  one core applying the same update locally: %.0f updates/s (ratio %.2f)\n", bound,
               bound > 0 ? rate / bound : 0);
    }
cleanup:
    for (int i = 0; job.params && i < local; i++)
        rp_params_destroy(job.params[i]);
    free(job.params);
    rp_replicator_destroy(r);
    if (status != RP_OK) {
        fprintf(stderr, "replicator bench ps: error: %s\n", rp_last_error());
        rp_comm_mpi_abort(1);
        return 1;
    }
    return 0;
}
