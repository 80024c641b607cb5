/*
 * bench_pipeline.c - `replicator bench pipeline`: the pipeline bubble on
 * real ResNet stages. For each number of micro-batches M it times the
 * classifier's training step (what `replicator train --model-parallel P
 * --pipeline S --micro-batches M` runs, loader and optimizer included) on
 * P workers of one thread each, and the same step's work on one worker of
 * one thread (the M micro-batches' gradients accumulated: a pipeline of one
 * stage). With P workers the work could take 1/P of the one worker's time;
 * the rest is the measured bubble,
 *
 *     bubble = 1 - T(one worker) / (P x T(pipeline)),
 *
 * shown beside the schedule's theoretical (P - 1) / (M + P - 1). The
 * measured one also holds what the theory leaves out: stages of unequal
 * cost (the partition balances FLOPs, not time), the messages, and the
 * smaller kernels of smaller micro-batches (which the one-worker run pays
 * as well, so they cancel).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "models/classifier/classifier_options.h" /* the classifier on pipeline stages */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator bench pipeline [options]\n"
            "\n"
            "The pipeline bubble on real stages: for each M, the training step of a ResNet cut\n"
            "into P stages (one worker of one thread each) against the same work on one worker,\n"
            "next to the schedule's (P - 1) / (M + P - 1) (docs/model-parallel.md).\n"
            "  --model M          resnet20 (default; Fashion-MNIST) or resnet50 (synthetic\n"
            "                     224x224 images)\n"
            "  --stages P         stages, one worker each (default 2: this machine's cores)\n"
            "  --micro LIST       micro-batch counts, e.g. 1,2,4,8 (the default)\n"
            "  --schedule S       gpipe, 1f1b or both (default both)\n"
            "  --batch N          examples per step (default 64 for resnet20, 16 for resnet50)\n"
            "  --steps K          timed steps per point (default 5)\n"
            "  --warmup W         untimed steps first (default 2)\n"
            "  --data DIR         Fashion-MNIST's directory (default $RP_DATA_DIR)\n"
            "  --precision P      f32 (default) or bf16 compute for convolutions and linear\n"
            "                     layers, as train --precision bf16\n"
            "  --json             one JSON line per point\n");
}

/*
 * The median seconds of one training step of the classifier on `stages` workers (1: one worker)
 * of one thread each, with `micro` micro-batches on `schedule`, at `precision`; *ran: the compute
 * type the workers' tapes ran with.
 */
static rp_status time_step(rp_classifier *clf, int stages, int micro, rp_pipe_schedule schedule,
                           int steps, int warmup, rp_dtype precision, double *seconds,
                           rp_dtype *ran)
{
    rp_status status = RP_OK;
    clf->cfg.micro_batches = micro;
    clf->cfg.schedule = schedule;
    rp_bench_driver j = {.model = rp_classifier_trainer_model(), .ctx = clf};
    rp_replicator *r = NULL;
    double *times = calloc((size_t)steps, sizeof *times);
    bool built = false;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.replicas = 1;
    cfg.precision = precision;
    if (stages > 1) {
        cfg.nroles = 1;
        cfg.roles[0] = rp_role_make("replica", 1, 1);
        cfg.roles[0].pipe = stages;
    }
    RP_TRY(rp_replicator_create(&r, &cfg));
    j.states = calloc((size_t)stages, sizeof *j.states);
    j.nstates = stages;
    if (!times || !j.states) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    RP_TRY(rp_replicator_run(r, rp_bench_driver_build, &j));
    built = true;
    int64_t per_epoch = j.model->steps_per_epoch(clf, j.states[0]);
    for (int it = 0; it < warmup + steps; it++) {
        j.at = (rp_trainer_at){it / per_epoch, it % per_epoch, it, 0.01f};
        double t0 = rp_now_s();
        RP_TRY(rp_replicator_run(r, rp_bench_driver_step, &j));
        if (it >= warmup) times[it - warmup] = rp_now_s() - t0;
    }
    *seconds = rp_bench_median(times, steps);
    *ran = rp_bench_precision_ran(r);
cleanup:
    if (built) {
        rp_status teardown = rp_replicator_run(r, rp_bench_driver_destroy, &j);
        if (status == RP_OK) status = teardown;
    }
    rp_replicator_destroy(r);
    free(j.states);
    free(times);
    return status;
}

static bool parse_list(const char *s, int *out, int *n, int max)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1024 || *n >= max) return false;
        out[(*n)++] = (int)v;
        if (*end && *end != ',') return false;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

int rp_cli_bench_pipeline(int argc, char **argv)
{
    const char *model = "resnet20", *data = NULL, *schedule = "both";
    int stages = 2, batch = 0, steps = 5, warmup = 2, micro[16] = {1, 2, 4, 8}, n_micro = 4;
    bool json = false;
    rp_dtype precision = RP_F32, ran = RP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator bench pipeline: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model")) {
            model = v;
            ok = !strcmp(v, "resnet20") || !strcmp(v, "resnet50");
        } else if (!strcmp(a, "--schedule")) {
            schedule = v;
            ok = !strcmp(v, "gpipe") || !strcmp(v, "1f1b") || !strcmp(v, "both");
        } else if (!strcmp(a, "--precision")) {
            ok = rp_bench_precision_parse(v, &precision);
        } else if (!strcmp(a, "--data")) {
            data = v;
        } else if (!strcmp(a, "--micro")) {
            ok = parse_list(v, micro, &n_micro, 16);
        } else if (!strcmp(a, "--stages") || !strcmp(a, "--batch") || !strcmp(a, "--steps") ||
                   !strcmp(a, "--warmup")) {
            ok = rp_options_parse_long(v, !strcmp(a, "--warmup") ? 0 : 1, 100000, &n);
            *(!strcmp(a, "--stages")  ? &stages
              : !strcmp(a, "--batch") ? &batch
              : !strcmp(a, "--steps") ? &steps
                                      : &warmup) = (int)n;
        } else {
            fprintf(stderr, "replicator bench pipeline: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "replicator bench pipeline: bad value \"%s\" for %s (see --help)\n", v,
                    a);
            return 2;
        }
    }
    bool r50 = !strcmp(model, "resnet50");
    if (!batch) batch = r50 ? 16 : 64;
    train_opts o;
    train_opts_default(&o, model);
    o.batch = batch;
    o.augment = false;
    o.limit = 4 * batch; /* a few batches: the loader's epoch wraps, the step is what is timed */
    if (r50) snprintf(o.dataset, sizeof o.dataset, "synthetic");
    if (data) snprintf(o.data_dir, sizeof o.data_dir, "%s", data);
    rp_classifier_config cc;
    train_opts_classifier(&o, &cc);
    rp_classifier *clf = NULL;
    rp_status status = rp_classifier_create(&clf, &cc);
    for (int k = 0; status == RP_OK && k < n_micro; k++)
        if (batch % micro[k] != 0)
            status = RP_ERROR(RP_ERR_INVALID, "batch %d does not split into %d micro-batches",
                              batch, micro[k]);
    rp_kernels_set_threads(stages);
    char prec[96];
    if (status == RP_OK && !json)
        printf("replicator bench pipeline: %s, batch %d, %s, %d stages of one thread each "
               "against one worker of one thread; median of %d steps\n"
               "   M   theory   one worker   %-24s %-24s\n",
               model, batch, rp_bench_precision_text(precision, prec, sizeof prec), stages, steps,
               strcmp(schedule, "1f1b") ? "gpipe: step, bubble" : "",
               strcmp(schedule, "gpipe") ? "1f1b: step, bubble" : "");
    for (int k = 0; status == RP_OK && k < n_micro; k++) {
        int m = micro[k];
        double one = 0, t[2] = {0, 0}, theory = (double)(stages - 1) / (m + stages - 1);
        status = time_step(clf, 1, m, RP_PIPE_GPIPE, steps, warmup, precision, &one, &ran);
        for (int s = 0; s < 2 && status == RP_OK; s++) {
            if (!strcmp(schedule, s ? "gpipe" : "1f1b")) continue;
            status = time_step(clf, stages, m, s ? RP_PIPE_1F1B : RP_PIPE_GPIPE, steps, warmup,
                               precision, &t[s], &ran);
        }
        if (status != RP_OK) break;
        double bubble[2];
        for (int s = 0; s < 2; s++)
            bubble[s] = t[s] > 0 ? 1 - one / (stages * t[s]) : 0;
        if (json) {
            printf("{\"model\":\"%s\",\"batch\":%d,\"stages\":%d,\"micro_batches\":%d,"
                   "\"theory\":%.4f,\"one_worker_ms\":%.2f,\"gpipe_ms\":%.2f,\"gpipe_bubble\":%.4f,"
                   "\"1f1b_ms\":%.2f,\"1f1b_bubble\":%.4f,%s}\n",
                   model, batch, stages, m, theory, 1e3 * one, 1e3 * t[0], bubble[0], 1e3 * t[1],
                   bubble[1], rp_bench_precision_json(ran, prec, sizeof prec));
            continue;
        }
        printf("%4d   %5.1f%%   %7.1f ms  ", m, 100 * theory, 1e3 * one);
        for (int s = 0; s < 2; s++) {
            if (t[s] > 0)
                printf("  %7.1f ms, %5.1f%%       ", 1e3 * t[s], 100 * bubble[s]);
            else
                printf("  %-24s", "");
        }
        printf("\n");
        fflush(stdout);
    }
    rp_classifier_destroy(clf);
    if (status != RP_OK) {
        fprintf(stderr, "replicator bench pipeline: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
