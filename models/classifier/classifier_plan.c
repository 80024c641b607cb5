/*
 * classifier_plan.c - the classifier's planner (classifier_plan.h): the
 * runtime's share (rp_plan_runtime) plus activations, the layers'
 * collectives and the loader's buffers, from a recorded step at batch 1
 * and 2.
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
 * One training step of the worker's network at `batch` on a fresh tape: the arena's live peak,
 * and what the layers sent through bn_comm (NULL: none) in it.
 */
static rp_status probe(const rp_classifier *clf, rp_comm *bn_comm, int batch, int64_t *peak,
                       rp_comm_stats *sent)
{
    const rp_dataset *ds = clf->train;
    rp_classifier_net net = {0};
    rp_tape *t = NULL;
    size_t n_pixels = (size_t)batch * (size_t)ds->h * (size_t)ds->w * (size_t)ds->c;
    float *x = rp_alloc(n_pixels * sizeof(float));
    int32_t *y = rp_calloc((size_t)batch * sizeof(int32_t));
    rp_status status = RP_OK;
    rp_comm_stats before = {0}, after = {0};
    if (!x || !y) {
        status = rp_last_status();
        goto cleanup;
    }
    /* Normalised-like inputs and distinct labels: no op takes a shortcut on zeros. */
    rp_rng_fill_normal(rp_hash_str(1, "plan"), 0, x, n_pixels, 0.0f, 1.0f);
    for (int i = 0; i < batch; i++)
        y[i] = i % ds->num_classes;
    RP_TRY(
        rp_classifier_net_create(&net, &clf->cfg, ds->h, ds->w, ds->c, ds->num_classes, bn_comm));
    RP_TRY(rp_tape_create(&t, 0));
    if (bn_comm) RP_TRY(rp_comm_stats_get(bn_comm, &before));
    rp_tensor *xt = rp_tensor_from(t, 4, (int[]){batch, ds->h, ds->w, ds->c}, x);
    rp_tensor *loss =
        xt ? rp_softmax_cross_entropy(t, rp_classifier_net_forward(t, &net, xt, true), y) : NULL;
    if (!loss) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(rp_backward(t, loss));
    *peak = (int64_t)rp_arena_get_stats(rp_tape_arena(t)).live_peak;
    if (bn_comm) RP_TRY(rp_comm_stats_get(bn_comm, &after));
    rp_comm_stats_diff(&after, &before, sent);
cleanup:
    rp_tape_destroy(t);
    rp_classifier_net_destroy(&net);
    rp_free(x);
    rp_free(y);
    return status;
}

void rp_classifier_plan_destroy(rp_classifier_plan *plan)
{
    if (!plan) return;
    free(plan->workers);
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

rp_status rp_classifier_plan_create(rp_classifier_plan **out, const rp_classifier *clf,
                                    const rp_config *rcfg, int replicas)
{
    if (!out || !clf || !rcfg)
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_plan_create: NULL argument");
    *out = NULL;
    if (replicas < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_plan_create: %d replicas", replicas);
    if (clf->cfg.batch % replicas != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas",
                        clf->cfg.batch, replicas);
    rp_status status = RP_OK;
    rp_comm *bn_comm = NULL;
    rp_classifier_net net = {0};
    rp_classifier_plan *p = calloc(1, sizeof *p);
    if (p) p->workers = calloc((size_t)replicas, sizeof *p->workers);
    if (!p || !p->workers) {
        rp_classifier_plan_destroy(p);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a plan of %d workers", replicas);
    }
    p->replicas = replicas;
    p->batch = clf->cfg.batch / replicas;
    /* Batch norm is cross-replica when sync replicas are several (classifier_trainer.c). */
    if (replicas > 1) RP_TRY(rp_comm_threads_create(&bn_comm, 1, NULL, 60.0));
    rp_comm_stats sent1 = {0}, sent2 = {0};
    RP_TRY(probe(clf, bn_comm, 1, &p->probe_peak[0], &sent1));
    RP_TRY(probe(clf, bn_comm, 2, &p->probe_peak[1], &sent2));
    p->kernel_caches = (int64_t)rp_kernels_cache_bytes();
    p->act_b = (double)(p->probe_peak[1] - p->probe_peak[0]);
    p->act_a = (double)p->probe_peak[0] - p->act_b;
    p->datasets = dataset_bytes(clf->train) + dataset_bytes(clf->test);

    RP_TRY(rp_classifier_net_create(&net, &clf->cfg, clf->train->h, clf->train->w, clf->train->c,
                                    clf->train->num_classes, NULL));
    rp_optim_config oc = rp_classifier_optim_config(&clf->cfg);
    for (int id = 0; id < replicas; id++) {
        rp_plan_worker *w = &p->workers[id];
        w->batch = p->batch;
        w->activations = (int64_t)(p->act_a + p->act_b * p->batch + 0.5);
        w->loader = loader_bytes(clf, p->batch, true);
        RP_TRY(rp_plan_runtime(rcfg, replicas, id, rp_classifier_net_params(&net), &oc, w));
        /* The layers' collectives in one step, as recorded (the same at either batch). */
        for (int k = 0; k < RP_COMM_KINDS && replicas > 1; k++) {
            const rp_comm_tally *c = &sent1.by[RP_COMM_USER][k];
            if (c->calls == 0) continue;
            RP_TRY(rp_plan_add_traffic(w, RP_AXIS_DATA, RP_COMM_USER, (rp_flight_kind)k,
                                       "batch norm sums", (int64_t)c->calls, (int64_t)c->bytes));
        }
    }
    if (memcmp(&sent1, &sent2, sizeof sent1) != 0)
        status = RP_ERROR(RP_ERR_INVALID,
                          "the planner's recorded steps at batch 1 and 2 made different "
                          "collectives; the layers' traffic depends on the batch, which the "
                          "planner does not model");
cleanup:
    rp_classifier_net_destroy(&net);
    rp_comm_destroy(bn_comm);
    if (status == RP_OK)
        *out = p;
    else
        rp_classifier_plan_destroy(p);
    return status;
}
