/*
 * dispatch.c - the commands that pick a model: `replicator train`, `eval`, `sample`, `bench`
 * and `plan` find it in the registry (registry.c: by name, or by the configuration a run saved)
 * and call its command. What no registered model claims goes to the default model, the
 * registry's first (the classifiers), whose commands also print the usage of `eval` and `bench`.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "registry.h"

#define TRAIN_CMD "replicator train"

/* The registry's first model, which takes what no other model claims. */
static const rp_model_desc *default_model(void)
{
    return rp_cli_models()[0];
}

/* The model registered as `name` (not the default's names), or NULL. */
static const rp_model_desc *model_named(const char *name)
{
    const rp_model_desc *const *models = rp_cli_models();
    for (int i = 1; name && models[i]; i++)
        if (!strcmp(models[i]->name, name)) return models[i];
    return NULL;
}

/* The model whose run saved `json` (its owns_config says so), or NULL (the default's, or none). */
const rp_model_desc *rp_cli_model_of_config(const char *json)
{
    const rp_model_desc *const *models = rp_cli_models();
    for (int i = 1; json && models[i]; i++)
        if (models[i]->owns_config && models[i]->owns_config(json)) return models[i];
    return NULL;
}

/*
 * The model a `--resume DIR` in argv continues, from its checkpoint's configuration, or NULL for
 * the default model's run (and when there is no --resume). NULL with *failed set, and the error
 * printed, when the checkpoint cannot be read or its configuration is no model's (the default's
 * owns_config leaves the reason in rp_last_error()): the options after --resume are the resumed
 * model's (--iters, --env-steps), so parsing them as the default's would blame an option
 * ("unknown option --iters") for the checkpoint's fault.
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
            model = rp_cli_model_of_config(config);
            const rp_model_desc *fallback = default_model();
            if (!model && fallback->owns_config && !fallback->owns_config(config))
                status = rp_last_status();
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

/* `replicator train [MODEL]`: a registered model by name or by the run it resumes; the default
   model otherwise. */
int rp_cli_train(int argc, char **argv)
{
    const rp_model_desc *named = argc >= 2 ? model_named(argv[1]) : NULL;
    if (named && named->train) return named->train(argc - 1, argv + 1);
    bool failed;
    const rp_model_desc *resumed = resumed_model(argc, argv, &failed);
    if (failed) return 1;
    if (resumed && resumed->train) return resumed->train(argc, argv);
    return default_model()->train(argc, argv);
}

/* `replicator eval RUN_DIR`: a registered model's run evaluates itself; the default model's eval
   takes the rest (its runs, the command's usage, a run that cannot be read: it says why). */
int rp_cli_eval(int argc, char **argv)
{
    if (argc >= 2 && argv[1][0] != '-') {
        rp_checkpoint *ck = NULL;
        const char *config = NULL;
        const rp_model_desc *model = NULL;
        if (rp_trainer_load_run(argv[1], &ck, &config) == RP_OK)
            model = rp_cli_model_of_config(config);
        rp_checkpoint_destroy(ck);
        if (model && model->eval) return model->eval(argc, argv);
    }
    return default_model()->eval(argc, argv);
}

/* `replicator sample RUN`: the model that offers it (SN-GAN; its command says what a run of
   another model is). */
int rp_cli_sample(int argc, char **argv)
{
    for (const rp_model_desc *const *m = rp_cli_models(); *m; m++)
        if ((*m)->sample) return (*m)->sample(argc, argv);
    fprintf(stderr, "replicator sample: no model offers it\n");
    return 2;
}

/* `replicator plan [MODEL] ...`: a registered model's plan by name; the default model's
   otherwise (it reads train's options, MODEL among them). */
int rp_cli_plan(int argc, char **argv)
{
    const rp_model_desc *named = argc >= 2 ? model_named(argv[1]) : NULL;
    if (named && named->plan) return named->plan(argc - 1, argv + 1);
    return default_model()->plan(argc, argv);
}

/*
 * `replicator bench NAME`: a registered model's benchmark, the default model's as `bench
 * resnet`, or the command's own (allreduce, ps, pipeline). The command's usage (no NAME,
 * --help) is the default model's benchmark's, which lists the others.
 */
int rp_cli_bench(int argc, char **argv)
{
    const rp_model_desc *fallback = default_model();
    if (argc < 2) return fallback->bench(argc, argv);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        char *help[] = {argv[0], "--help", NULL};
        return fallback->bench(2, help);
    }
    if (!strcmp(argv[1], "resnet")) return fallback->bench(argc - 1, argv + 1);
    const rp_model_desc *model = model_named(argv[1]);
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
