/*
 * registry.c - the models the command offers: one line each. A new model is a folder in
 * models/ that exports an rp_model_desc (replicator/model.h) and one line below
 * (docs/models.md; models/clusters is the example).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "registry.h"
#include "train.h"
#include "models/sngan/sngan_command.h"

/*
 * The classifiers, whose commands still live in cli/ (train.c, eval.c, bench.c, plan.c), and
 * SN-GAN, whose train, eval and sample commands are its folder's (models/sngan/sngan_*_command.c)
 * but whose benchmark is cli's (bench_sngan.c, on the command's benchmark driver): their
 * descriptors are here until their commands are whole in their folders, as D4PG's are.
 */
static const rp_model_desc classifier_model = {
    .name = "resnet20",
    .summary = "image classifiers: resnet20 (default), resnet18, resnet50, mlp",
    .trainer = rp_classifier_trainer_model,
    .train = train_classifier_main,
    .eval = rp_cli_eval_classifier,
    .bench = rp_cli_bench_resnet,
    .plan = rp_cli_plan,
};

static const rp_model_desc sngan_model = {
    .name = "sngan",
    .summary = "a class-conditional SN-GAN",
    .trainer = rp_sngan_trainer_model,
    .owns_config = sngan_config_is_gan,
    .train = sngan_train_main,
    .eval = sngan_eval_main,
    .sample = sngan_sample_main,
    .bench = rp_cli_bench_sngan,
};

extern const rp_model_desc rp_d4pg_model;     /* models/d4pg/d4pg_train_command.c */
extern const rp_model_desc rp_clusters_model; /* models/clusters/clusters.c */

static const rp_model_desc *const models[] = {
    &classifier_model, &sngan_model, &rp_d4pg_model, &rp_clusters_model, NULL,
};

const rp_model_desc *const *rp_cli_models(void)
{
    return models;
}

const rp_model_desc *rp_cli_model_find(const char *name)
{
    for (int i = 1; name && models[i]; i++)
        if (!strcmp(models[i]->name, name)) return models[i];
    return NULL;
}

int rp_cli_sample(int argc, char **argv)
{
    /* `replicator sample RUN`: the model that offers it (SN-GAN; its command says what a run of
       another model is). */
    for (int i = 0; models[i]; i++)
        if (models[i]->sample) return models[i]->sample(argc, argv);
    fprintf(stderr, "replicator sample: no model offers it\n");
    return 2;
}

const rp_model_desc *rp_cli_model_of_config(const char *json)
{
    for (int i = 1; json && models[i]; i++)
        if (models[i]->owns_config && models[i]->owns_config(json)) return models[i];
    return NULL;
}
