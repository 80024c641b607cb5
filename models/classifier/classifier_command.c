/*
 * classifier_command.c - what the classifiers' commands share on top of the library's command
 * calls (replicator/trainer.h: loading a run, agreeing across ranks, ending a run): the
 * replicator's layout from the run options, and whether a saved configuration is a
 * classifier's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_command.h"
#include "models/classifier/classifier_onnx.h"

rp_backend train_backend(const char *name)
{
    return !strcmp(name, "threads") ? RP_BACKEND_THREADS
           : !strcmp(name, "mpi")   ? RP_BACKEND_MPI
                                    : RP_BACKEND_AUTO;
}

rp_status train_runtime_config(train_opts *o, rp_config *cfg)
{
    *cfg = rp_config_default();
    cfg->backend = train_backend(o->backend);
    cfg->replicas = o->replicas;
    cfg->threads_per_replica = o->threads_per_replica;
    cfg->timeout_s = o->comm_timeout;
    cfg->regime = !strcmp(o->regime, "async") ? RP_REGIME_ASYNC : RP_REGIME_SYNC;
    cfg->ps = o->ps;
    cfg->staleness = o->staleness;
    if (o->hsdp > 1 && !o->zero) o->zero = 1; /* HSDP is ZeRO in groups */
    cfg->zero = o->zero == 1;
    if (o->zero >= 2) cfg->strategy = o->zero == 2 ? RP_STRATEGY_ZERO2 : RP_STRATEGY_ZERO3;
    cfg->hsdp = o->hsdp;
    cfg->keep_gathered = o->keep_gathered;
    cfg->prefetch = o->prefetch;
    cfg->precision = !strcmp(o->precision, "bf16") ? RP_BF16 : RP_F32;
    cfg->grad_dtype = o->grad_dtype;
    cfg->sync_groups = o->sync_groups;
    cfg->seed = o->seed;
    cfg->stuck_exit = rp_trainer_stuck_exit();
    /* The layout rules are the library's (rp_config_resolve). */
    rp_job_shape layout = rp_job_shape_default();
    layout.threads = o->threads;
    layout.batch = o->batch;
    layout.stages = o->model_parallel;
    layout.tensor_parallel = o->tensor_parallel;
    layout.replicas_from_run = !o->replicas_given;
    RP_CHECK(rp_config_resolve(cfg, &layout));
    o->replicas = layout.replicas;
    return RP_OK;
}

bool classifier_config_is_classifier(const char *json)
{
    train_opts *o = malloc(sizeof *o); /* a few KiB of paths */
    if (!o) {
        RP_ERROR(RP_ERR_NOMEM, "cannot read a run's configuration: out of memory");
        return false;
    }
    bool ok = json && train_opts_from_json(o, json) == RP_OK;
    free(o);
    return ok;
}

rp_status train_agree_options(char *json, const char *const *local, const char *out_dir,
                              int64_t max_steps, double timeout_s)
{
    rp_status status = rp_trainer_agree_config(json, local, out_dir, max_steps, timeout_s);
    free(json);
    return status;
}

rp_status classifier_run_data(const char *config, train_opts *o, rp_classifier_config *cc,
                              rp_dataset **train, rp_dataset **test, float *mean, float *std)
{
    RP_CHECK(train_opts_from_json(o, config));
    train_opts_classifier(o, cc);
    RP_CHECK(rp_classifier_load_splits(train, test, cc));
    return rp_dataset_channel_stats(*train, mean, std);
}

/* `replicator export --format onnx` of a classifier's run (rp_model_desc.onnx): its input size
 * and classes from the dataset, and the normalisation the run trained with (the training
 * split's statistics, as rp_classifier_create computes them). */
rp_status classifier_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config,
                                 bool online, char *what, size_t what_size)
{
    (void)online; /* one set of parameters */
    rp_status status = RP_OK;
    rp_dataset *train = NULL, *test = NULL;
    train_opts o;
    rp_classifier_config cc;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    *g = NULL;
    RP_TRY(classifier_run_data(config, &o, &cc, &train, &test, mean, std));
    RP_TRY(rp_classifier_onnx(g, &cc, ck, train->h, train->w, train->c, train->num_classes, mean,
                              std));
    snprintf(what, what_size, "%s for %d x %d x %d images of %s", o.model, train->h, train->w,
             train->c, train->name);
cleanup:
    rp_dataset_destroy(test);
    rp_dataset_destroy(train);
    return status;
}
