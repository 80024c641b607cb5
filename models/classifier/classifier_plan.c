/*
 * classifier_plan.c - the classifier's planner (classifier_plan.h): the
 * runtime's share (rp_plan_runtime) plus activations, the layers'
 * collectives, the pipeline's messages and the loader's buffers, from a
 * recorded step of each stage at batch 1 and 2.
 */
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_plan.h"

rp_optim_config rp_classifier_optim_config(const rp_classifier_config *cfg)
{
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = cfg->momentum;
    oc.nesterov = cfg->nesterov;
    oc.weight_decay = cfg->weight_decay;
    return oc;
}

/*
 * One training step of a stage's network at `batch` on a fresh tape, from an input of `in`
 * (h, w, c per example): the arena's live peak, and what the layers sent through place->bn_comm
 * (NULL: none) in it. The last stage's loss is back-propagated as in training; another stage's
 * output from a gradient, as the pipeline's receive gives it.
 */
static rp_status probe(const rp_classifier *clf, const rp_classifier_place *place, const int *in,
                       int batch, int64_t *peak, rp_comm_stats *sent)
{
    const rp_dataset *ds = clf->train;
    rp_classifier_net net = {0};
    rp_tape *t = NULL;
    size_t n_in = (size_t)batch * (size_t)in[0] * (size_t)in[1] * (size_t)in[2];
    float *x = rp_alloc(n_in * sizeof(float)), *dy = NULL;
    int32_t *y = rp_calloc((size_t)batch * sizeof(int32_t));
    rp_status status = RP_OK;
    rp_comm_stats before = {0}, after = {0};
    bool last = place->stage == place->stages - 1;
    if (!x || !y) {
        status = rp_last_status();
        goto cleanup;
    }
    /* Normalised-like inputs and distinct labels: no op takes a shortcut on zeros. */
    rp_rng_fill_normal(rp_hash_str(1, "plan"), 0, x, n_in, 0.0f, 1.0f);
    for (int i = 0; i < batch; i++)
        y[i] = i % ds->num_classes;
    RP_TRY(rp_classifier_net_create_part(&net, &clf->cfg, ds->h, ds->w, ds->c, ds->num_classes,
                                         place));
    RP_TRY(rp_tape_create(&t, 0));
    if (place->bn_comm) RP_TRY(rp_comm_stats_get(place->bn_comm, &before));
    rp_tensor *xt = rp_tensor_from(t, 4, (int[]){batch, in[0], in[1], in[2]}, x);
    rp_tensor *out = xt ? rp_classifier_net_forward(t, &net, xt, true) : NULL;
    if (out && last) out = rp_softmax_cross_entropy(t, out, y);
    if (!out) {
        status = rp_last_status();
        goto cleanup;
    }
    if (last) {
        RP_TRY(rp_backward(t, out));
    } else {
        dy = rp_alloc((size_t)out->numel * sizeof(float));
        if (!dy) {
            status = rp_last_status();
            goto cleanup;
        }
        rp_rng_fill_normal(rp_hash_str(2, "plan"), 0, dy, (size_t)out->numel, 0.0f, 1.0f);
        RP_TRY(rp_backward_from(t, out, dy));
    }
    *peak = (int64_t)rp_arena_get_stats(rp_tape_arena(t)).live_peak;
    if (place->bn_comm) RP_TRY(rp_comm_stats_get(place->bn_comm, &after));
    rp_comm_stats_diff(&after, &before, sent);
cleanup:
    rp_tape_destroy(t);
    rp_classifier_net_destroy(&net);
    rp_free(x);
    rp_free(y);
    rp_free(dy);
    return status;
}

void rp_classifier_plan_destroy(rp_classifier_plan *plan)
{
    if (!plan) return;
    free(plan->stage);
    free(plan->worker);
    free(plan);
}

/* The loader's buffers for `batch` samples per step (rp_loader_create's allocations). */
static int64_t loader_bytes(const rp_classifier *clf, int batch, bool prefetch)
{
    const rp_dataset *ds = clf->train;
    int64_t image = (int64_t)ds->h * ds->w * ds->c * (int64_t)sizeof(float);
    int64_t samples = clf->cfg.limit > 0 && clf->cfg.limit < ds->n ? clf->cfg.limit : ds->n;
    int64_t slots = prefetch ? 2 : 1;
    return slots * batch * (image + (int64_t)sizeof(int32_t)) + samples * 4 +
           2 * (int64_t)ds->w * ds->c * (int64_t)sizeof(float);
}

static int64_t dataset_bytes(const rp_dataset *ds)
{
    return ds ? ds->n * ((int64_t)ds->h * ds->w * ds->c + (int64_t)sizeof(int32_t)) : 0;
}

/*
 * Each stage's input and output per example (h, w, c): the images, the units' outputs at the
 * cuts (rp_resnet_partition, as rp_classifier_net_create_part cuts), the logits.
 */
static rp_status stage_shapes(const rp_classifier *clf, int stages, int (*in)[3], int (*out)[3])
{
    const rp_dataset *ds = clf->train;
    in[0][0] = ds->h;
    in[0][1] = ds->w;
    in[0][2] = ds->c;
    out[stages - 1][0] = out[stages - 1][1] = 1;
    out[stages - 1][2] = ds->num_classes;
    if (stages == 1) return RP_OK;
    rp_resnet_kind kind;
    if (!rp_resnet_kind_parse(clf->cfg.model, &kind))
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "%s cannot be cut into %d stages: only the ResNets are (resnet20, "
                        "resnet18, resnet50); drop --model-parallel",
                        clf->cfg.model, stages);
    rp_resnet_config rc = rp_resnet_config_default(kind);
    rc.in_channels = ds->c;
    rc.classes = ds->num_classes;
    int bounds[RP_RESNET_MAX_UNITS + 1];
    RP_CHECK(rp_resnet_partition(&rc, ds->h, ds->w, stages, bounds));
    for (int s = 0; s + 1 < stages; s++) {
        rp_resnet_unit_info info;
        RP_CHECK(rp_resnet_unit_info_get(&rc, ds->h, ds->w, bounds[s + 1] - 1, &info));
        out[s][0] = in[s + 1][0] = info.out_h;
        out[s][1] = in[s + 1][1] = info.out_w;
        out[s][2] = in[s + 1][2] = info.out_c;
    }
    return RP_OK;
}

/* Stage s's worker plan (of replica `id`): memory and both axes' traffic in one step. */
static rp_status plan_worker(rp_classifier_plan *p, const rp_classifier *clf, const rp_config *rcfg,
                             const rp_params *params, const rp_comm_stats *bn, int s, int id,
                             rp_plan_worker *w)
{
    const rp_classifier_plan_stage *st = &p->stage[s];
    int M = p->micro_batches, last = p->stages - 1;
    rp_optim_config oc = rp_classifier_optim_config(&clf->cfg);
    w->batch = p->batch;
    w->stage = s;
    w->stages = p->stages;
    double one = st->act_a + st->act_b * p->micro;
    w->activations = (int64_t)(one * st->tapes + 0.5);
    /* Only stage 0 reads images ahead; the last stage keeps the batch's labels. */
    w->loader = loader_bytes(clf, p->batch, s == 0) +
                (p->stages > 1 && s == last ? (int64_t)p->batch * 4 : 0);
    RP_CHECK(rp_plan_runtime(rcfg, p->replicas, id, params, &oc, w));
    w->worker = id * p->stages + s; /* the job's worker, as rp_replica_worker numbers it */
    /* The layers' collectives in one micro-batch, as recorded, once per micro-batch. */
    for (int k = 0; k < RP_COMM_KINDS && p->replicas > 1; k++) {
        const rp_comm_tally *c = &bn->by[RP_COMM_USER][k];
        if (c->calls == 0) continue;
        RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_USER, (rp_flight_kind)k,
                                     "batch norm sums", (int64_t)c->calls * M,
                                     (int64_t)c->bytes * M));
    }
    if (p->stages == 1) return RP_OK;
    /* classifier_trainer.c's step: the labels from stage 0 to the last, the pipeline, the loss
       broadcast from the last stage. */
    if (s == 0)
        RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_PIPE, RP_COMM_USER, RP_FLIGHT_SEND,
                                     "labels to the last stage", 1, (int64_t)p->batch * 4));
    if (s == last)
        RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_PIPE, RP_COMM_USER, RP_FLIGHT_RECV,
                                     "labels from stage 0", 1, (int64_t)p->batch * 4));
    RP_CHECK(rp_plan_pipeline(w, RP_AXIS_PIPE, s, p->stages, M, st->in_floats * p->micro,
                              st->out_floats * p->micro));
    return rp_plan_add_traffic(w, RP_AXIS_PIPE, RP_COMM_USER, RP_FLIGHT_BROADCAST,
                               "the loss from the last stage", 1, 4);
}

rp_status rp_classifier_plan_create(rp_classifier_plan **out, const rp_classifier *clf,
                                    const rp_config *rcfg, int replicas, int stages)
{
    if (!out || !clf || !rcfg)
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_plan_create: NULL argument");
    *out = NULL;
    if (replicas < 1 || stages < 1 || stages > RP_RESNET_MAX_UNITS)
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_plan_create: %d replicas of %d stages",
                        replicas, stages);
    if (clf->cfg.batch % replicas != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas",
                        clf->cfg.batch, replicas);
    /* Micro-batches run through rp_pipeline_run, on one worker too (gradient accumulation). */
    int M = clf->cfg.micro_batches > 1 ? clf->cfg.micro_batches : 1;
    if (clf->cfg.batch / replicas % M != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "each replica's batch of %d does not split into %d micro-batches",
                        clf->cfg.batch / replicas, M);
    rp_status status = RP_OK;
    rp_comm *bn_comm = NULL;
    rp_classifier_net net = {0};
    rp_comm_stats *bn = NULL;
    int(*in)[3] = NULL, (*outs)[3] = NULL;
    rp_classifier_plan *p = calloc(1, sizeof *p);
    if (p) {
        p->stage = calloc((size_t)stages, sizeof *p->stage);
        p->worker = calloc((size_t)replicas * (size_t)stages, sizeof *p->worker);
    }
    bn = calloc((size_t)stages, sizeof *bn);
    in = calloc((size_t)stages, sizeof *in);
    outs = calloc((size_t)stages, sizeof *outs);
    if (!p || !p->stage || !p->worker || !bn || !in || !outs) {
        status =
            RP_ERROR(RP_ERR_NOMEM, "cannot allocate a plan of %d x %d workers", replicas, stages);
        goto cleanup;
    }
    p->replicas = replicas;
    p->stages = stages;
    p->micro_batches = M;
    p->batch = clf->cfg.batch / replicas;
    p->micro = p->batch / M;
    p->workers = replicas * stages;
    RP_TRY(stage_shapes(clf, stages, in, outs));
    /* Batch norm is cross-replica when sync replicas are several (classifier_trainer.c). */
    if (replicas > 1) RP_TRY(rp_comm_threads_create(&bn_comm, 1, NULL, 60.0));
    for (int s = 0; s < stages; s++) {
        rp_classifier_plan_stage *st = &p->stage[s];
        rp_classifier_place place = {.bn_comm = bn_comm, .stage = s, .stages = stages};
        rp_comm_stats again = {0};
        RP_TRY(probe(clf, &place, in[s], 1, &st->probe_peak[0], &bn[s]));
        RP_TRY(probe(clf, &place, in[s], 2, &st->probe_peak[1], &again));
        if (memcmp(&bn[s], &again, sizeof again) != 0) {
            status = RP_ERROR(RP_ERR_INVALID,
                              "the planner's recorded steps at batch 1 and 2 made different "
                              "collectives; the layers' traffic depends on the batch, which the "
                              "planner does not model");
            goto cleanup;
        }
        st->act_b = (double)(st->probe_peak[1] - st->probe_peak[0]);
        st->act_a = (double)st->probe_peak[0] - st->act_b;
        int w1f1b = stages - s - 1 < M ? stages - s - 1 : M;
        st->tapes = clf->cfg.schedule == RP_PIPE_1F1B ? w1f1b + 1 : M;
        st->in_floats = (int64_t)in[s][0] * in[s][1] * in[s][2];
        st->out_floats = (int64_t)outs[s][0] * outs[s][1] * outs[s][2];
    }
    p->kernel_caches = (int64_t)rp_kernels_cache_bytes();
    p->datasets = dataset_bytes(clf->train) + dataset_bytes(clf->test);
    for (int s = 0; s < stages; s++) {
        rp_classifier_place place = {.bn_comm = NULL, .stage = s, .stages = stages};
        RP_TRY(rp_classifier_net_create_part(&net, &clf->cfg, clf->train->h, clf->train->w,
                                             clf->train->c, clf->train->num_classes, &place));
        for (int id = 0; id < replicas; id++) {
            rp_plan_worker *w = &p->worker[id * stages + s];
            RP_TRY(plan_worker(p, clf, rcfg, rp_classifier_net_params(&net), &bn[s], s, id, w));
        }
        rp_classifier_net_destroy(&net);
    }
cleanup:
    rp_classifier_net_destroy(&net);
    rp_comm_destroy(bn_comm);
    free(bn);
    free(in);
    free(outs);
    if (status == RP_OK)
        *out = p;
    else
        rp_classifier_plan_destroy(p);
    return status;
}
