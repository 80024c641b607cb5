/*
 * registry.c - the models the command offers: one line each. A new model is a folder in
 * models/ that exports an rp_model_desc (replicator/model.h) and one line below
 * (docs/models.md; models/clusters is the example).
 */
#include <string.h>

#include "cli.h"
#include "registry.h"
#include "sngan_cli.h"

/*
 * The classifiers and SN-GAN: their commands still live in cli/ (train.c, train_sngan.c,
 * eval*.c, bench*.c, sample.c, plan.c); their descriptors are here until they move into their
 * folders as D4PG's did (models/d4pg/d4pg_train_command.c).
 */
static const rp_model_desc classifier_model = {
    .name = "resnet20",
    .summary = "image classifiers: resnet20 (default), resnet18, resnet50, mlp",
    .trainer = rp_classifier_trainer_model,
    .train = train_classifier_main,
    .eval = rp_cli_eval, /* the command's default path */
    .bench = rp_cli_bench_resnet,
    .plan = rp_cli_plan,
};

static const rp_model_desc sngan_model = {
    .name = "sngan",
    .summary = "a class-conditional SN-GAN",
    .trainer = rp_sngan_trainer_model,
    .owns_config = sngan_config_is_gan,
    .train = train_sngan_main,
    .eval = sngan_eval_main,
    .sample = rp_cli_sample,
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

const rp_model_desc *rp_cli_model_of_config(const char *json)
{
    for (int i = 1; json && models[i]; i++)
        if (models[i]->owns_config && models[i]->owns_config(json)) return models[i];
    return NULL;
}
