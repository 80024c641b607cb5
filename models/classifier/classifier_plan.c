/*
 * classifier_plan.c - the classifier's planner (classifier_plan.h): the
 * runtime's share (rp_plan_runtime) plus activations, the layers'
 * collectives, the pipeline's messages and the loader's buffers, from a
 * recorded step of each stage at two batches (1 and 2, or larger where a
 * batch norm would see a single value) - on one thread, or with tensor
 * parallelism on one thread per member of the stage's model axis.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
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
 * (h, w, c per example): the arena's live peak, what the layers sent through place->bn_comm
 * (NULL: none) and through place->tp_comm (NULL: none) in it. The last stage's loss is
 * back-propagated as in training; another stage's output from a gradient, as the pipeline's
 * receive gives it, and back to the input it received. With a tp_comm every member of it must call
 * this at once. wire: the run's gradient wire type (the tensor-parallel backward's all-reduces).
 */
static rp_status probe(const rp_classifier *clf, const rp_classifier_place *place, const int *in,
                       int batch, rp_dtype wire, int64_t *peak, rp_comm_stats *sent,
                       rp_comm_stats *model)
{
    const rp_dataset *ds = clf->train;
    rp_classifier_net net = {0};
    rp_tape *t = NULL;
    size_t n_in = (size_t)batch * (size_t)in[0] * (size_t)in[1] * (size_t)in[2];
    float *x = rp_alloc(n_in * sizeof(float)), *dy = NULL;
    int32_t *y = rp_calloc((size_t)batch * sizeof(int32_t));
    rp_status status = RP_OK;
    rp_comm_stats before = {0}, after = {0}, tp_before = {0}, tp_after = {0};
    bool last = place->stage == place->stages - 1;
    memset(sent, 0, sizeof *sent);
    memset(model, 0, sizeof *model);
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
    RP_TRY(rp_tape_set_grad_wire(t, wire));
    if (place->bn_comm) RP_TRY(rp_comm_stats_get(place->bn_comm, &before));
    if (place->tp_comm) RP_TRY(rp_comm_stats_get(place->tp_comm, &tp_before));
    rp_tensor *xt = rp_tensor_from(t, 4, (int[]){batch, in[0], in[1], in[2]}, x);
    /* A later stage's input is a received activation whose gradient goes back (rp_tensor_recv):
       its backward computes it, and with tensor parallelism all-reduces it. */
    if (xt && place->stage > 0) rp_tensor_set_requires_grad(xt, true);
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
    *peak = (int64_t)rp_arena_get_stats(rp_tape_storage(t)).live_peak;
    if (place->bn_comm) {
        RP_TRY(rp_comm_stats_get(place->bn_comm, &after));
        rp_comm_stats_diff(&after, &before, sent);
    }
    if (place->tp_comm) {
        RP_TRY(rp_comm_stats_get(place->tp_comm, &tp_after));
        rp_comm_stats_diff(&tp_after, &tp_before, model);
    }
cleanup:
    rp_tape_destroy(t);
    rp_classifier_net_destroy(&net);
    rp_free(x);
    rp_free(y);
    rp_free(dy);
    return status;
}

/* One member's recording of a stage at two batches (all members of a model axis at once). */
typedef struct member_job {
    const rp_classifier *clf;
    rp_classifier_place place; /* the stage; tp_comm: this member's handle (NULL: not split) */
    const int *in;
    const int *batches; /* the two recorded batches */
    bool bn;       /* cross-replica batch norm: its sums recorded over a one-member communicator */
    rp_dtype wire; /* the gradient wire type */
    int threads;   /* kernel threads of the member's thread */
    int64_t peak[2];
    rp_comm_stats bn_sent[2], model_sent[2];
    int64_t caches; /* rp_kernels_cache_bytes() of its thread after the steps */
    rp_status status;
    char error[1024]; /* its thread's message when status is not RP_OK */
} member_job;

static void member_run(member_job *j)
{
    rp_comm *bn = NULL;
    rp_status status = RP_OK;
    if (j->bn) RP_TRY(rp_comm_threads_create(&bn, 1, NULL, 60.0));
    j->place.bn_comm = bn;
    for (int k = 0; k < 2; k++)
        RP_TRY(probe(j->clf, &j->place, j->in, j->batches[k], j->wire, &j->peak[k], &j->bn_sent[k],
                     &j->model_sent[k]));
    j->caches = (int64_t)rp_kernels_cache_bytes();
cleanup:
    j->place.bn_comm = NULL;
    rp_comm_destroy(bn);
    j->status = status;
    if (status != RP_OK) snprintf(j->error, sizeof j->error, "%s", rp_last_error());
}

static void *member_main(void *arg)
{
    member_job *j = arg;
    rp_kernels_set_threads(j->threads);
    member_run(j);
    return NULL;
}

/* Two rp_comm_stats with the same calls per class and kind (bytes aside). */
static bool same_calls(const rp_comm_stats *a, const rp_comm_stats *b)
{
    for (int c = 0; c < RP_COMM_CLASSES; c++)
        for (int k = 0; k < RP_COMM_KINDS; k++)
            if (a->by[c][k].calls != b->by[c][k].calls) return false;
    return true;
}

/*
 * Records stage s of `stages` split over `tp` members (1: whole) at batches st->probe_batch[0]
 * and [1]: st's peaks (the largest member's), its model axis's counters, and what batch norm sent
 * (*bn, the same at both batches). With tp > 1 the members run on tp threads over a tp-member
 * threads communicator, as the trainer's model axis; the calling thread waits for them.
 */
static rp_status record_stage(const rp_classifier *clf, const int *in, int s, int stages, int tp,
                              bool bn, rp_dtype wire, rp_classifier_plan_stage *st,
                              rp_comm_stats *bn_sent, int64_t *caches)
{
    rp_status status = RP_OK;
    member_job *jobs = calloc((size_t)tp, sizeof *jobs);
    rp_comm **comms = calloc((size_t)tp, sizeof *comms);
    pthread_t *th = calloc((size_t)tp, sizeof *th);
    int started = 0;
    if (!jobs || !comms || !th) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot record a stage on %d members", tp);
        goto cleanup;
    }
    if (tp > 1) RP_TRY(rp_comm_threads_create(comms, tp, NULL, 60.0));
    int threads = rp_kernels_get_threads() / tp;
    for (int m = 0; m < tp; m++)
        jobs[m] = (member_job){.clf = clf,
                               .place = {.stage = s, .stages = stages, .tp_comm = comms[m]},
                               .in = in,
                               .batches = st->probe_batch,
                               .bn = bn,
                               .wire = wire,
                               .threads = threads > 0 ? threads : 1};
    if (tp == 1) {
        member_run(&jobs[0]);
    } else {
        for (; started < tp; started++) {
            int rc = pthread_create(&th[started], NULL, member_main, &jobs[started]);
            if (rc != 0) {
                /* The members started wait for this one in vain and fail at their timeout. */
                status = RP_ERROR(RP_ERR_BACKEND, "cannot start the planner's member thread %d: %s",
                                  started, strerror(rc));
                break;
            }
        }
        for (int m = 0; m < started; m++)
            pthread_join(th[m], NULL);
        if (status != RP_OK) goto cleanup;
    }
    for (int m = 0; m < tp; m++)
        if (jobs[m].status != RP_OK) {
            status = rp_error_set(jobs[m].status, NULL, 0, "%s", jobs[m].error);
            goto cleanup;
        }
    for (int m = 0; m < tp; m++) {
        const member_job *j = &jobs[m];
        if (memcmp(&j->bn_sent[0], &j->bn_sent[1], sizeof j->bn_sent[0]) != 0 ||
            !same_calls(&j->model_sent[0], &j->model_sent[1])) {
            status = RP_ERROR(RP_ERR_INVALID,
                              "the planner's recorded steps at batch %d and %d made different "
                              "collectives (stage %d, member %d); the layers' calls depend on the "
                              "batch, which the planner does not model",
                              st->probe_batch[0], st->probe_batch[1], s, m);
            goto cleanup;
        }
        if (memcmp(&j->model_sent, &jobs[0].model_sent, sizeof j->model_sent) != 0) {
            status = RP_ERROR(RP_ERR_INVALID,
                              "the planner's recorded members of stage %d sent different "
                              "collectives on the model axis (member %d and member 0); a worker's "
                              "traffic would depend on its shard, which the planner does not model",
                              s, m);
            goto cleanup;
        }
        for (int k = 0; k < 2; k++)
            if (j->peak[k] > st->probe_peak[k]) st->probe_peak[k] = j->peak[k];
    }
    memcpy(st->model, jobs[0].model_sent, sizeof st->model);
    *bn_sent = jobs[0].bn_sent[0];
    *caches = jobs[0].caches;
cleanup:
    for (int m = 0; comms && m < tp; m++)
        rp_comm_destroy(comms[m]);
    free(comms);
    free(jobs);
    free(th);
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
    /* A dataset of image files keeps only its labels in memory (and an index of names). */
    if (ds && !ds->pixels) return ds->n * (int64_t)sizeof(int32_t);
    return ds ? ds->n * ((int64_t)ds->h * ds->w * ds->c + (int64_t)sizeof(int32_t)) : 0;
}

/* Where a stage's batch norms see the fewest values per channel of each example. */
typedef struct bn_least {
    int area; /* h x w of that unit's output (INT_MAX: the stage has no batch norm) */
    int h, w;
    char unit[32]; /* the unit's name */
} bn_least;

/*
 * Each stage's input and output per example (h, w, c): the images, the units' outputs at the
 * cuts (rp_resnet_partition, as rp_classifier_net_create_part cuts), the logits; and where its
 * batch norms see the fewest values (a unit's batch norms see its input's or its output's pixels,
 * and a unit's output is never larger than its input).
 */
static rp_status stage_shapes(const rp_classifier *clf, int stages, int (*in)[3], int (*out)[3],
                              bn_least *bn)
{
    const rp_dataset *ds = clf->train;
    in[0][0] = ds->h;
    in[0][1] = ds->w;
    in[0][2] = ds->c;
    out[stages - 1][0] = out[stages - 1][1] = 1;
    out[stages - 1][2] = ds->num_classes;
    for (int s = 0; s < stages; s++)
        bn[s] = (bn_least){.area = INT_MAX};
    rp_resnet_kind kind;
    if (!rp_resnet_kind_parse(clf->cfg.model, &kind)) {
        if (stages == 1) return RP_OK; /* the MLP: no batch norm */
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "%s cannot be cut into %d stages: only the ResNets are (resnet20, "
                        "resnet18, resnet50); drop --model-parallel",
                        clf->cfg.model, stages);
    }
    rp_resnet_config rc = rp_resnet_config_default(kind);
    rc.in_channels = ds->c;
    rc.classes = ds->num_classes;
    int bounds[RP_RESNET_MAX_UNITS + 1];
    RP_CHECK(rp_resnet_partition(&rc, ds->h, ds->w, stages, bounds));
    for (int s = 0; s < stages; s++)
        for (int u = bounds[s]; u < bounds[s + 1]; u++) {
            rp_resnet_unit_info info;
            RP_CHECK(rp_resnet_unit_info_get(&rc, ds->h, ds->w, u, &info));
            if (info.buffers > 0 && info.out_h * info.out_w < bn[s].area) {
                bn[s].area = info.out_h * info.out_w;
                bn[s].h = info.out_h;
                bn[s].w = info.out_w;
                snprintf(bn[s].unit, sizeof bn[s].unit, "%s", info.name);
            }
            if (u + 1 == bounds[s + 1] && s + 1 < stages) {
                out[s][0] = in[s + 1][0] = info.out_h;
                out[s][1] = in[s + 1][1] = info.out_w;
                out[s][2] = in[s + 1][2] = info.out_c;
            }
        }
    return RP_OK;
}

/*
 * The worker plan of shard m of stage s of replica `id`: memory and the traffic of every axis in
 * one step. bn: what the stage's batch norms sent in a recorded step.
 */
static rp_status plan_worker(rp_classifier_plan *p, const rp_classifier *clf, const rp_config *rcfg,
                             const rp_params *params, const rp_comm_stats *bn, int s, int id, int m,
                             rp_plan_worker *w)
{
    const rp_classifier_plan_stage *st = &p->stage[s];
    int M = p->micro_batches, last = p->stages - 1;
    rp_optim_config oc = rp_classifier_optim_config(&clf->cfg);
    w->batch = p->batch;
    w->stage = s;
    w->stages = p->stages;
    w->shard = m;
    w->shards = p->tp;
    double one = st->act_a + st->act_b * p->micro;
    w->activations = (int64_t)(one * st->tapes + 0.5);
    /* Only stage 0 reads images ahead, and only in lockstep (sync groups jump between batches);
       the last stage keeps the batch's labels. */
    w->loader = loader_bytes(clf, p->batch, s == 0 && p->groups == 1) +
                (p->stages > 1 && s == last ? (int64_t)p->batch * 4 : 0);
    RP_CHECK(rp_plan_runtime(rcfg, p->replicas, id, params, &oc, w));
    /* The job's worker, as rp_replica_worker numbers it. */
    w->worker = (id * p->stages + s) * p->tp + m;
    /* The layers' collectives in one micro-batch, as recorded, once per micro-batch: batch norm's
       sums over the replicas in sync (the data axis, or the sync group's communicator). */
    rp_axis sync_axis = p->groups > 1 ? RP_PLAN_GROUP : RP_AXIS_DATA;
    for (int k = 0; k < RP_COMM_KINDS && p->in_sync > 1; k++) {
        const rp_comm_tally *c = &bn->by[RP_COMM_USER][k];
        if (c->calls == 0) continue;
        RP_CHECK(rp_plan_add_traffic(w, sync_axis, RP_COMM_USER, (rp_flight_kind)k,
                                     "batch norm sums", (int64_t)c->calls * M,
                                     (int64_t)c->bytes * M));
    }
    /* Tensor parallelism: the split blocks' collectives, the same calls at every batch and bytes
       affine in it (activations and their gradients), from the two recorded steps. */
    int64_t k1 = st->probe_batch[0], dk = st->probe_batch[1] - st->probe_batch[0];
    for (int c = RP_COMM_USER; c <= RP_COMM_RUNTIME && p->tp > 1; c++)
        for (int k = 0; k < RP_COMM_KINDS; k++) {
            const rp_comm_tally *b1 = &st->model[0].by[c][k], *b2 = &st->model[1].by[c][k];
            if (b1->calls == 0) continue;
            int64_t bytes = (int64_t)b1->bytes + ((int64_t)b2->bytes - (int64_t)b1->bytes) *
                                                     ((int64_t)p->micro - k1) / dk;
            RP_CHECK(rp_plan_add_traffic(w, RP_AXIS_MODEL, (rp_comm_class)c, (rp_flight_kind)k,
                                         "split blocks' collectives", (int64_t)b1->calls * M,
                                         bytes * M));
        }
    /* Sync groups: before each batch the group agrees whether to stop (the trainer's loop). */
    if (p->groups > 1)
        RP_CHECK(rp_plan_add_traffic(w, RP_PLAN_GROUP, RP_COMM_RUNTIME, RP_FLIGHT_ALL_REDUCE,
                                     "the trainer's stop agreement", 1, (int64_t)sizeof(int64_t)));
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
                                    const rp_config *rcfg, int replicas, int stages, int tp)
{
    if (!out || !clf || !rcfg)
        return RP_ERROR(RP_ERR_INVALID, "rp_classifier_plan_create: NULL argument");
    *out = NULL;
    if (replicas < 1 || stages < 1 || stages > RP_RESNET_MAX_UNITS || tp < 1 || tp > 64)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_classifier_plan_create: %d replicas of %d stages of %d workers",
                        replicas, stages, tp);
    int groups = rcfg->sync_groups > 1 ? rcfg->sync_groups : 1;
    if (replicas % groups != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "--sync-groups %d does not divide the %d replicas: every group needs the "
                        "same number of replicas",
                        groups, replicas);
    /* The replicas that share each batch: all of them, or a group's. */
    int in_sync = replicas / groups;
    if (clf->cfg.batch % in_sync != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas%s",
                        clf->cfg.batch, in_sync, groups > 1 ? " (a sync group)" : "");
    /* Micro-batches run through rp_pipeline_run, on one worker too (gradient accumulation). */
    int M = clf->cfg.micro_batches > 1 ? clf->cfg.micro_batches : 1;
    if (clf->cfg.batch / in_sync % M != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "each replica's batch of %d does not split into %d micro-batches",
                        clf->cfg.batch / in_sync, M);
    rp_status status = RP_OK;
    rp_comm **tp_comms = NULL;
    rp_classifier_net net = {0};
    rp_comm_stats *bn = NULL;
    bn_least *least = NULL;
    int(*in)[3] = NULL, (*outs)[3] = NULL;
    int workers = replicas * stages * tp;
    rp_classifier_plan *p = calloc(1, sizeof *p);
    if (p) {
        p->stage = calloc((size_t)stages, sizeof *p->stage);
        p->worker = calloc((size_t)workers, sizeof *p->worker);
    }
    bn = calloc((size_t)stages, sizeof *bn);
    least = calloc((size_t)stages, sizeof *least);
    in = calloc((size_t)stages, sizeof *in);
    outs = calloc((size_t)stages, sizeof *outs);
    tp_comms = calloc((size_t)tp, sizeof *tp_comms);
    if (!p || !p->stage || !p->worker || !bn || !least || !in || !outs || !tp_comms) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate a plan of %d x %d x %d workers", replicas,
                          stages, tp);
        goto cleanup;
    }
    p->replicas = replicas;
    p->groups = groups;
    p->in_sync = in_sync;
    p->stages = stages;
    p->tp = tp;
    p->micro_batches = M;
    p->batch = clf->cfg.batch / in_sync;
    p->micro = p->batch / M;
    p->workers = workers;
    RP_TRY(stage_shapes(clf, stages, in, outs, least));
    for (int s = 0; s < stages; s++) {
        rp_classifier_plan_stage *st = &p->stage[s];
        /*
         * Batch norm in training needs at least 2 values per channel: a micro-batch's examples
         * times the pixels at its smallest, over the replicas in sync (cross-replica batch norm).
         * A layout where it gets fewer cannot train: say what to change.
         */
        if (least[s].area < INT_MAX && (int64_t)p->micro * least[s].area * in_sync < 2) {
            char where[32] = "";
            if (stages > 1) snprintf(where, sizeof where, ", pipeline stage %d", s);
            status = RP_ERROR(RP_ERR_INVALID,
                              "this layout cannot train: batch norm in %s (%dx%d pixels per "
                              "example%s) would see %lld value(s) per channel from a micro-batch "
                              "of %d example(s) on %d replica(s) in sync, and training needs at "
                              "least 2; raise --batch (now %d) or lower --micro-batches",
                              least[s].unit, least[s].h, least[s].w, where,
                              (long long)p->micro * least[s].area * in_sync, p->micro, in_sync,
                              clf->cfg.batch);
            goto cleanup;
        }
        /*
         * The recorded batches: 1 and 2, or the smallest k and 2k at which every batch norm sees
         * 2 values (a ResNet-50's last units are 1x1 on 28x28 images). The recording's batch norm
         * runs over a one-member communicator, so its values are the recorded batch's only.
         */
        int k = least[s].area >= 2 ? 1 : 2;
        st->probe_batch[0] = k;
        st->probe_batch[1] = 2 * k;
        /* Batch norm is cross-replica when the replicas in sync are several (classifier_trainer.c).
         */
        RP_TRY(record_stage(clf, in[s], s, stages, tp, in_sync > 1, rcfg->grad_dtype, st, &bn[s],
                            &p->kernel_caches));
        st->act_b = (double)(st->probe_peak[1] - st->probe_peak[0]) / k;
        st->act_a = (double)st->probe_peak[0] - st->act_b * k;
        int w1f1b = stages - s - 1 < M ? stages - s - 1 : M;
        st->tapes = clf->cfg.schedule == RP_PIPE_1F1B ? w1f1b + 1 : M;
        st->in_floats = (int64_t)in[s][0] * in[s][1] * in[s][2];
        st->out_floats = (int64_t)outs[s][0] * outs[s][1] * outs[s][2];
    }
    p->datasets = dataset_bytes(clf->train) + dataset_bytes(clf->test);
    /* Each worker's parameters: its stage's part, split as its member of the model axis holds it
       (building a split network makes no collective, so one thread builds every member's). */
    if (tp > 1) RP_TRY(rp_comm_threads_create(tp_comms, tp, NULL, 60.0));
    rp_optim_config oc = rp_classifier_optim_config(&clf->cfg);
    for (int s = 0; s < stages; s++)
        for (int m = 0; m < tp; m++) {
            rp_classifier_place place = {.stage = s, .stages = stages, .tp_comm = tp_comms[m]};
            RP_TRY(rp_classifier_net_create_part(&net, &clf->cfg, clf->train->h, clf->train->w,
                                                 clf->train->c, clf->train->num_classes, &place));
            const rp_params *params = rp_classifier_net_params(&net);
            if (s == 0 && m == 0) p->servers = rp_plan_servers(rcfg, params, &oc);
            for (int id = 0; id < replicas; id++) {
                rp_plan_worker *w = &p->worker[(id * stages + s) * tp + m];
                RP_TRY(plan_worker(p, clf, rcfg, params, &bn[s], s, id, m, w));
            }
            rp_classifier_net_destroy(&net);
        }
cleanup:
    rp_classifier_net_destroy(&net);
    for (int m = 0; tp_comms && m < tp; m++)
        rp_comm_destroy(tp_comms[m]);
    free(tp_comms);
    free(bn);
    free(least);
    free(in);
    free(outs);
    if (status == RP_OK)
        *out = p;
    else
        rp_classifier_plan_destroy(p);
    return status;
}
