/*
 * dispatch.c - the commands that pick a model: `replicator train`, `eval` and `bench` find it
 * in the registry (registry.c: by name, or by the configuration a run saved) and call its
 * command; what no registered model claims goes to the classifiers' commands (train.c,
 * eval.c, bench.c). It sits above both, so the registry, which names the classifiers'
 * commands, and those commands never call each other.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "registry.h"
#include "train.h"

/*
 * The model a `--resume DIR` in argv continues, from its checkpoint's configuration: "sngan",
 * "d4pg", or "" for a classifier's run (and when there is no --resume). NULL, with the error
 * printed, when the checkpoint cannot be read or its configuration is no model's: the options
 * after --resume are the resumed model's (--iters, --env-steps), so parsing them as the
 * classifier's would blame an option ("unknown option --iters") for the checkpoint's fault.
 */
static const rp_model_desc *resumed_model(int argc, char **argv, bool *failed)
{
    *failed = false;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--resume")) continue;
        rp_checkpoint *ck = NULL;
        const char *config = NULL;
        const rp_model_desc *model = NULL;
        rp_status status = rp_trainer_load_run(argv[i + 1], &ck, &config);
        if (status == RP_OK) {
            static train_opts classifier; /* static: a few KiB of paths */
            model = rp_cli_model_of_config(config);
            if (!model) status = train_opts_from_json(&classifier, config);
        }
        rp_checkpoint_destroy(ck);
        if (status != RP_OK) {
            rp_trainer_report_error(TRAIN_CMD, false);
            *failed = true;
        }
        return model;
    }
    return NULL;
}

/* `replicator train [MODEL]`: a registered model by name or by the run it resumes (registry.c);
   the classifiers otherwise. */
int rp_cli_train(int argc, char **argv)
{
    const rp_model_desc *named = argc >= 2 ? rp_cli_model_find(argv[1]) : NULL;
    if (named && named->train) return named->train(argc - 1, argv + 1);
    bool failed;
    const rp_model_desc *resumed = resumed_model(argc, argv, &failed);
    if (failed) return 1;
    if (resumed && resumed->train) return resumed->train(argc, argv);
    return train_classifier_main(argc, argv);
}

int rp_cli_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        rp_cli_bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "resnet")) return rp_cli_bench_resnet(argc - 1, argv + 1);
    /* A registered model's benchmark (registry.c). */
    const rp_model_desc *model = rp_cli_model_find(argv[1]);
    if (model && model->bench) return model->bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "allreduce")) return rp_cli_bench_allreduce(argc - 1, argv + 1);
    if (!strcmp(argv[1], "ps")) return rp_cli_bench_ps(argc - 1, argv + 1);
    if (!strcmp(argv[1], "pipeline")) return rp_cli_bench_pipeline(argc - 1, argv + 1);
    fprintf(stderr,
            "replicator bench: unknown benchmark \"%s\" (available: resnet, sngan, allreduce, ps, "
            "pipeline)\n",
            argv[1]);
    return 2;
}

int rp_cli_eval(int argc, char **argv)
{
    return rp_cli_eval_run(argc, argv, rp_cli_model_of_config);
}
