/*
 * registry.c - the models the command offers: one line each. A new model is a folder in
 * models/ that exports an rp_model_desc (replicator/model.h) and one line below
 * (docs/models.md; models/clusters is the example). The first is the default: it takes every
 * command line no other model claims (dispatch.c).
 */
#include "registry.h"

extern const rp_model_desc rp_classifier_model; /* models/classifier/classifier_model.c */
extern const rp_model_desc rp_sngan_model;      /* models/sngan/sngan_model.c */
extern const rp_model_desc rp_d4pg_model;       /* models/d4pg/d4pg_model.c */
extern const rp_model_desc rp_clusters_model;   /* models/clusters/clusters.c */

static const rp_model_desc *const models[] = {
    &rp_classifier_model, &rp_sngan_model, &rp_d4pg_model, &rp_clusters_model, NULL,
};

const rp_model_desc *const *rp_cli_models(void)
{
    return models;
}
