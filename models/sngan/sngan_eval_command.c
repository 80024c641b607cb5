/*
 * sngan_eval_command.c - `replicator eval RUN` on an SN-GAN run: its samples scored by
 * the domain classifier (class accuracy, Frechet distance, IS analogue), and
 * with --calibrate the scores of real images that give those a scale.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sngan/sngan_command.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator eval RUN [--judge DIR] [--samples N] [--calibrate] [--threads N]\n"
            "\n"
            "Scores the SN-GAN saved in RUN with a domain classifier (the judge: a run of\n"
            "replicator train resnet20 --image-size 32; default: the one the GAN trained with):\n"
            "class accuracy of N class-balanced samples (default 10000), the Frechet distance of\n"
            "their pooled features (and logits) to the test set's, and the IS analogue.\n"
            "  --calibrate  also score N real images of each kind: the test set, the train set,\n"
            "               the test set blurred (3x3 box) and noised (std 0.1)\n");
}

static void print_scores(const char *what, const rp_sngan_scores *s)
{
    printf("  %-22s class acc %6.2f%%  FD %8.3f  FD(logits) %8.3f  IS %5.2f  (%lld images)\n", what,
           100 * s->class_accuracy, s->fd, s->fd_logits, s->is, (long long)s->n);
}

int sngan_eval_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *run = argv[1], *judge_dir = NULL;
    long samples = 10000, threads = 0;
    bool calibrate = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--calibrate")) {
            calibrate = true;
            continue;
        }
        long x = 0;
        if (!strcmp(a, "--judge") && v && v[0])
            judge_dir = v;
        else if (!strcmp(a, "--samples") && v && rp_options_parse_long(v, 2, 10000000, &x))
            samples = x;
        else if (!strcmp(a, "--threads") && v && rp_options_parse_long(v, 1, 1024, &x))
            threads = x;
        else {
            fprintf(stderr, "replicator eval: bad option %s%s%s (see --help)\n", a, v ? " " : "",
                    v ? v : "");
            return 2;
        }
        i++;
    }
    rp_kernels_set_threads((int)threads);
    sngan_opts o;
    rp_sngan_generator *g = NULL;
    rp_sngan_judge *j = NULL;
    rp_tape *tape = NULL;
    rp_sngan_tally t = {0};
    bool tally = false;
    rp_status status = RP_OK;
    RP_TRY(sngan_run_load(run, &o, &g));
    if (!judge_dir) judge_dir = o.judge[0] ? o.judge : NULL;
    if (!judge_dir) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "%s was trained without a judge: name one with --judge DIR (a run of "
                          "replicator train resnet20 --image-size %d)",
                          run, o.g.h);
        goto cleanup;
    }
    RP_TRY(sngan_judge_load(&j, judge_dir));
    RP_TRY(rp_tape_create(&tape, 0));
    RP_TRY(rp_sngan_tally_init(&t, j));
    tally = true;
    double t0 = rp_now_s();
    RP_TRY(rp_sngan_judge_generator(j, g, &o.g, tape, o.g.seed, samples, 0, 1, &t));
    rp_sngan_scores s;
    RP_TRY(rp_sngan_judge_scores(j, &t, &s));
    printf("sngan %s judged by %s (%.0fs):\n", run, judge_dir, rp_now_s() - t0);
    print_scores("samples", &s);
    if (calibrate) {
        rp_sngan_calibration c;
        RP_TRY(rp_sngan_judge_calibrate(j, tape, samples, &c));
        print_scores("test set (reference)", &c.test);
        print_scores("train set", &c.train);
        print_scores("test set, blurred", &c.blurred);
        print_scores("test set, noised", &c.noised);
    }
cleanup:
    if (tally) rp_sngan_tally_free(&t);
    rp_tape_destroy(tape);
    rp_sngan_judge_destroy(j);
    rp_sngan_generator_destroy(g);
    if (status != RP_OK) {
        fprintf(stderr, "replicator eval: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
