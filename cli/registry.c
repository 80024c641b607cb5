/*
 * registry.c - the models the command offers: one line each. A new model is a folder in
 * models/ that exports an rp_model_desc (replicator/model.h) and one line below
 * (docs/models.md; models/clusters is the example).
 */
#include <string.h>

#include "cli.h"
#include "d4pg_cli.h"
#include "registry.h"
#include "sngan_cli.h"

/*
 * The classifiers, SN-GAN and D4PG: their commands still live in cli/ (train.c, train_sngan.c,
 * train_d4pg.c, eval*.c, bench*.c, plan.c) and use the command's helpers; their descriptors
 * are here until those helpers are library calls.
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

static const rp_model_desc d4pg_model = {
    .name = "d4pg",
    .summary = "D4PG with distributed actors on a MuJoCo control task",
    .trainer = rp_d4pg_trainer_model,
    .owns_config = d4pg_config_is_d4pg,
    .train = train_d4pg_main,
    .eval = d4pg_eval_main,
};

extern const rp_model_desc rp_clusters_model; /* models/clusters/clusters.c */

static const rp_model_desc *const models[] = {
    &classifier_model, &sngan_model, &d4pg_model, &rp_clusters_model, NULL,
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
