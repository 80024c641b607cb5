/*
 * classifier_eval_command.c - `replicator eval DIR` on a classifier's run: the test accuracy of
 * its checkpoint. As the registry's default model it also answers `replicator eval` with no run
 * (the command's usage) and a run no other model claims.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_command.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator eval RUN_DIR [--threads N]\n"
            "\n"
            "Loads RUN_DIR/checkpoint.safetensors (written by replicator train), rebuilds the\n"
            "model from the configuration stored in it and reports test loss and accuracy.\n"
            "On an SN-GAN run it scores the samples instead: see replicator eval GAN_RUN --help\n"
            "for its options (--judge, --samples, --calibrate). On a D4PG run it plays\n"
            "evaluation episodes and records their frames: see replicator eval D4PG_RUN --help\n"
            "(--episodes, --frames).\n");
}

int classifier_eval_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (argv[1][0] == '-') {
        fprintf(stderr,
                "replicator eval: the run directory comes first (replicator eval RUN_DIR "
                "[options]), not %s\n",
                argv[1]);
        return 2;
    }

    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    rp_dataset *train = NULL, *test = NULL;
    rp_classifier_net net = {0};
    rp_tape *tape = NULL;
    train_opts o;
    const char *config;
    RP_TRY(rp_trainer_load_run(argv[1], &ck, &config));
    /* A classifier's run (a registered model's run went to its own eval: cli/dispatch.c): its
       options, as strictly as train's (the others parse their own). */
    long threads = 0;
    for (int i = 2; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            rp_checkpoint_destroy(ck);
            return 0;
        }
        if (strcmp(a, "--threads") != 0) {
            fprintf(stderr, "replicator eval: unknown %s %s for a classifier's run (see --help)\n",
                    a[0] == '-' ? "option" : "argument", a);
            rp_checkpoint_destroy(ck);
            return 2;
        }
        if (!v || !rp_options_parse_long(v, 1, 1024, &threads)) {
            fprintf(stderr, "replicator eval: %s needs a number of threads from 1 to 1024%s%s%s\n",
                    a, v ? ", not \"" : "", v ? v : "", v ? "\"" : "");
            rp_checkpoint_destroy(ck);
            return 2;
        }
    }
    rp_kernels_set_threads((int)threads);
    rp_classifier_config cc;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    RP_TRY(classifier_run_data(config, &o, &cc, &train, &test, mean, std));
    /* The network's tensors held to the checkpoint's before they are allocated. */
    rp_trainer_guard_arg guard = {ck, "param/"};
    RP_TRY(rp_params_guard_push(rp_trainer_checkpoint_guard, &guard));
    status =
        rp_classifier_net_create(&net, &cc, train->h, train->w, train->c, train->num_classes, NULL);
    rp_params_guard_pop();
    if (status != RP_OK) goto cleanup;
    RP_TRY(rp_checkpoint_read_params(ck, rp_classifier_net_params(&net), "param/"));
    RP_TRY(rp_tape_create(&tape, 0));
    rp_classifier_eval ev;
    RP_TRY(rp_classifier_evaluate(tape, &net, test, mean, std, 0, 1, &ev));
    int64_t n;
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    printf("%s on %s: test accuracy %.2f%%, test loss %.4f (%lld images; checkpoint after %lld "
           "steps)\n",
           o.model, test->name, 100 * ev.accuracy, ev.loss, (long long)ev.samples,
           pos && n == 3 ? (long long)pos[2] : -1LL);
cleanup:
    rp_tape_destroy(tape);
    rp_classifier_net_destroy(&net);
    rp_dataset_destroy(test);
    rp_dataset_destroy(train);
    rp_checkpoint_destroy(ck);
    if (status != RP_OK) {
        fprintf(stderr, "replicator eval: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
