/*
 * sngan_bench_command.c - `replicator bench sngan`: the time of one SN-GAN iteration (n_dis
 * discriminator steps and one generator step), comparable one to one with bench/sngan_torch.py
 * (bench/compare_sngan.sh runs both).
 *
 * It drives the model's own trainer callbacks (sngan_trainer.c) on a replicator through the
 * library's benchmark driver (replicator/bench.h), so what is timed is exactly what
 * `replicator train sngan` runs per iteration, data loading included.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan_command.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: replicator bench sngan [options]\n"
        "\n"
        "Milliseconds per SN-GAN iteration (n_dis D steps + 1 G step) on Fashion-MNIST at 32x32.\n"
        "The same in PyTorch: SCRIPT=bench/sngan_torch.py bench/torch_env.sh.\n"
        "  --ch-g N, --ch-d N   widths (default 32, 32)\n"
        "  --d-batch N          real images per D step (default 64)\n"
        "  --g-batch N          fakes per G step (default 128)\n"
        "  --n-dis N            D steps per iteration (default 5)\n"
        "  --iters K            timed iterations (default 10)\n"
        "  --trace FILE         write a Chrome trace-event JSON of the iterations to FILE\n"
        "                       (open it in ui.perfetto.dev; docs/tracing.md)\n"
        "  --warmup W           untimed iterations first (default 2)\n"
        "  --threads T          kernel threads in all (default: all cores)\n"
        "  --replicas N         data-parallel replicas (default: one per core, as in training)\n"
        "  --precision P        f32 (default) or bf16: G's and D's convolutions and linear\n"
        "                       layers multiply in bf16, as train sngan --precision bf16\n"
        "  --activations T      with bf16: activations stored in f32 (default, as train\n"
        "                       sngan) or bf16 (docs/precision.md)\n"
        "  --json               one JSON line\n");
}

int sngan_bench_main(int argc, char **argv)
{
    rp_sngan_config sc = rp_sngan_config_default();
    int iters = 10, warmup = 2, threads = 0, replicas = 0;
    bool json = false;
    const char *trace = NULL;
    rp_dtype precision = RP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--precision")) {
            if (!rp_bench_precision_parse(v, &precision)) {
                fprintf(stderr, "replicator bench sngan: --precision %s: expected f32 or bf16\n",
                        v ? v : "(missing)");
                return 2;
            }
            i++;
            continue;
        }
        if (!strcmp(a, "--activations")) {
            if (!v || (strcmp(v, "f32") && strcmp(v, "bf16"))) {
                fprintf(stderr, "replicator bench sngan: --activations %s: expected f32 or bf16\n",
                        v ? v : "(missing)");
                return 2;
            }
            snprintf(sc.activations, sizeof sc.activations, "%s", v);
            i++;
            continue;
        }
        if (!strcmp(a, "--trace")) {
            if (!v || !*v) {
                fprintf(stderr, "replicator bench sngan: --trace needs a file name\n");
                return 2;
            }
            trace = v;
            i++;
            continue;
        }
        long n = -1;
        int *slot = !strcmp(a, "--ch-g")       ? &sc.ch_g
                    : !strcmp(a, "--ch-d")     ? &sc.ch_d
                    : !strcmp(a, "--d-batch")  ? &sc.d_batch
                    : !strcmp(a, "--g-batch")  ? &sc.g_batch
                    : !strcmp(a, "--n-dis")    ? &sc.n_dis
                    : !strcmp(a, "--iters")    ? &iters
                    : !strcmp(a, "--warmup")   ? &warmup
                    : !strcmp(a, "--threads")  ? &threads
                    : !strcmp(a, "--replicas") ? &replicas
                                               : NULL;
        if (!slot || !v || !rp_options_parse_long(v, slot == &warmup ? 0 : 1, 100000, &n)) {
            fprintf(stderr, "replicator bench sngan: bad option %s%s%s (see --help)\n", a,
                    v ? " " : "", v ? v : "");
            return 2;
        }
        *slot = (int)n;
        i++;
    }
    rp_kernels_set_threads(threads);
    /* As replicator train sngan: a replica per core, as many as divide both batches. */
    if (!replicas) {
        replicas = rp_kernels_get_threads();
        while (replicas > 1 && (sc.d_batch % replicas || sc.g_batch % replicas))
            replicas--;
    }
    rp_bench_driver j = {.model = rp_sngan_trainer_model()};
    rp_sngan *gan = NULL;
    rp_replicator *r = NULL;
    double *times = calloc((size_t)iters, sizeof *times);
    rp_status status = RP_OK;
    bool built = false;
    /* The loader reads only a few batches per iteration; a subset loads faster and times the same.
     */
    sc.limit = 8192;
    RP_TRY(rp_sngan_create(&gan, &sc));
    j.ctx = gan;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = replicas;
    cfg.precision = precision;
    cfg.stuck_exit = rp_trainer_stuck_exit();
    cfg.threads_per_replica =
        rp_kernels_get_threads() / replicas > 0 ? rp_kernels_get_threads() / replicas : 1;
    if (trace) RP_TRY(rp_file_check_writable(trace, "trace file")); /* now, not at the end */
    if (trace) RP_TRY(rp_trace_start(0)); /* before the replicator: its workers' buffers */
    RP_TRY(rp_replicator_create(&r, &cfg));
    j.states = calloc((size_t)replicas, sizeof *j.states);
    j.nstates = replicas;
    if (!times || !j.states) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    RP_TRY(rp_replicator_run(r, rp_bench_driver_build, &j));
    built = true;
    for (int it = 0; it < warmup + iters; it++) {
        j.at = (rp_trainer_at){0, it, it, sc.lr_g};
        double t0 = rp_now_s();
        RP_TRY(rp_replicator_run(r, rp_bench_driver_step, &j));
        if (it >= warmup) times[it - warmup] = rp_now_s() - t0;
    }
    if (trace) RP_TRY(rp_replicator_trace_write(r, trace));
    double sum = 0;
    for (int i = 0; i < iters; i++)
        sum += times[i];
    double med = rp_bench_median(times, iters);
    int tpr = rp_replicator_threads_per_replica(r);
    char prec_json[96], prec_text[64];
    rp_dtype ran = rp_bench_precision_ran(r); /* what the replicas' tapes ran with */
    rp_bench_precision_json(ran, prec_json, sizeof prec_json);
    rp_bench_precision_text(ran, prec_text, sizeof prec_text);
    if (json)
        printf("{\"framework\":\"replicator\",\"model\":\"sngan\",\"ch_g\":%d,\"ch_d\":%d,\"d_"
               "batch\":%d,"
               "\"g_batch\":%d,\"n_dis\":%d,\"replicas\":%d,\"threads_per_replica\":%d,\"format\":"
               "\"nhwc\","
               "\"ms_per_iter\":%.2f,\"mean_ms_per_iter\":%.2f,\"iters\":%d,%s}\n",
               sc.ch_g, sc.ch_d, sc.d_batch, sc.g_batch, sc.n_dis, replicas, tpr, 1e3 * med,
               1e3 * sum / iters, iters, prec_json);
    else
        printf("replicator sngan ch %d/%d, D batch %d x %d + G batch %d, %d replica%s x %d "
               "threads, %s: %.1f ms per iteration (median of %d; mean %.1f)\n",
               sc.ch_g, sc.ch_d, sc.d_batch, sc.n_dis, sc.g_batch, replicas,
               replicas > 1 ? "s" : "", tpr, prec_text, 1e3 * med, iters, 1e3 * sum / iters);
cleanup:
    if (built) {
        rp_status teardown = rp_replicator_run(r, rp_bench_driver_destroy, &j);
        if (status == RP_OK) status = teardown;
    }
    rp_replicator_destroy(r);
    if (trace) rp_trace_stop();
    rp_sngan_destroy(gan);
    free(j.states);
    free(times);
    if (status != RP_OK) {
        fprintf(stderr, "replicator bench sngan: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
