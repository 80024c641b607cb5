/*
 * registry.h - the models the `replicator` command offers (registry.c): one descriptor each
 * (replicator/model.h). train, eval, sample, bench and plan find a model here by name, or a
 * run's model by its saved configuration (dispatch.c), instead of naming models themselves.
 */
#ifndef RP_CLI_REGISTRY_H
#define RP_CLI_REGISTRY_H

#include "replicator/replicator.h"

/* The registered models, NULL-ended. The first is the default: the image classifiers
   (resnet20, resnet18, resnet50, mlp), which take every name no other model claims. */
const rp_model_desc *const *rp_cli_models(void);

/* The registered model whose run saved the configuration `json` (its owns_config says so), or
   NULL: then it is the default model's, or no model's (dispatch.c). */
const rp_model_desc *rp_cli_model_of_config(const char *json);

#endif
