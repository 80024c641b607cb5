/*
 * export_onnx.c - the network of a run as an ONNX graph (replicator/onnx.h), for `replicator
 * export --format onnx` and `--layout standard`: the configuration stored in the run's
 * checkpoint says which model it is and its sizes, and the model's exporter builds the graph
 * from the checkpoint's tensors.
 */
#include <stdio.h>
#include <string.h>

#include "models/d4pg/d4pg_command.h"
#include "export_onnx.h"
#include "models/classifier/classifier_onnx.h"
#include "models/d4pg/policy_onnx.h"
#include "models/sngan/generator_onnx.h"
#include "models/sngan/sngan_command.h"

/* The classifier: its input size and classes from the dataset, and the normalisation the run
 * trained with (the training split's statistics, as rp_classifier_create computes them). */
static rp_status classifier_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config,
                                  char *what, size_t what_size)
{
    rp_status status = RP_OK;
    rp_dataset *train = NULL, *test = NULL;
    train_opts o;
    RP_TRY(train_opts_from_json(&o, config));
    rp_classifier_config cc;
    train_opts_classifier(&o, &cc);
    RP_TRY(rp_classifier_load_splits(&train, &test, &cc));
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    RP_TRY(rp_dataset_channel_stats(train, mean, std));
    RP_TRY(rp_classifier_onnx(g, &cc, ck, train->h, train->w, train->c, train->num_classes, mean,
                              std));
    snprintf(what, what_size, "%s for %d x %d x %d images of %s", o.model, train->h, train->w,
             train->c, train->name);
cleanup:
    rp_dataset_destroy(test);
    rp_dataset_destroy(train);
    return status;
}

static rp_status sngan_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config, char *what,
                             size_t what_size)
{
    sngan_opts o;
    RP_CHECK(sngan_opts_from_json(&o, config));
    RP_CHECK(rp_sngan_generator_onnx(g, &o.g, ck, "gen/"));
    snprintf(what, what_size, "the SN-GAN's generator (%d x %d x %d images, %d classes)", o.g.h,
             o.g.w, o.g.c, o.g.classes);
    return RP_OK;
}

static rp_status d4pg_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size)
{
    d4pg_opts o;
    rp_d4pg_job *job = NULL;
    rp_status status = RP_OK;
    RP_TRY(d4pg_opts_from_json(&o, config));
    RP_TRY(rp_d4pg_job_create(&job, &o.j, ck)); /* checks the task, fills in its sizes */
    const rp_d4pg_config *agent = &rp_d4pg_job_get_config(job)->agent;
    RP_TRY(rp_d4pg_policy_onnx(g, agent, ck, online ? "d4pg/policy/" : "d4pg/target_policy/"));
    snprintf(what, what_size, "D4PG's %s policy for %s (%d observations, %d actions)",
             online ? "online" : "target", o.j.task, agent->obs_dim, agent->act_dim);
cleanup:
    rp_d4pg_job_destroy(job);
    return status;
}

rp_status export_onnx_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size)
{
    *g = NULL;
    if (sngan_config_is_gan(config))
        RP_CHECK(sngan_graph(g, ck, config, what, what_size));
    else if (d4pg_config_is_d4pg(config))
        RP_CHECK(d4pg_graph(g, ck, config, online, what, what_size));
    else
        RP_CHECK(classifier_graph(g, ck, config, what, what_size));
    rp_status status = rp_onnx_set_meta(*g, "replicator.config", config);
    if (status != RP_OK) {
        rp_onnx_destroy(*g);
        *g = NULL;
    }
    return status;
}
