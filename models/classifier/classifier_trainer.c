/*
 * classifier_trainer.c - the classifier as the trainer sees it: on every
 * replica its network (cross-replica batch norm when sync replicas are
 * several), its optimizer (which broadcasts replica 0's initial values and
 * averages gradients, or pushes them to parameter servers) and its loader
 * (its shard of every global batch, or whole batches in async; with sync
 * groups its shard of each batch its group claims); one batch's
 * forward, loss, backward and update; evaluation; what a checkpoint holds.
 *
 * Logical devices: a replica that spans P workers on the pipe axis holds one
 * stage of the ResNet on each (rp_classifier_net_create_part). Stage 0 reads
 * the batches and sends their labels to the last stage; rp_pipeline_run
 * carries the activations forward and their gradients back, micro-batch by
 * micro-batch; each stage's optimizer averages its own parameters'
 * gradients over the replicas (its data axis). Before a checkpoint every
 * stage of replica 0 sends its tensors to stage 0, which saves the whole
 * model under the names the unsplit network uses, so a checkpoint resumes
 * split or whole, on any number of stages. On one worker, micro-batches
 * accumulate gradients (a pipeline of one stage).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier.h"

/* What each replica holds. */
typedef struct replica_state {
    rp_classifier_net net;
    rp_optimizer *opt;
    rp_loader *loader;
    rp_batch batch; /* the last batch */
    /* A replica cut into stages across workers (stages > 1): */
    int stage, stages;
    rp_comm *pipe;           /* the pipe axis: stage i is rank i */
    rp_pipeline *pipeline;   /* this stage's runner */
    int per_replica;         /* examples of each global batch this replica trains */
    int micro_batches;       /* the pipeline's M */
    int32_t *labels;         /* [per_replica], the last stage's copy of the batch's labels */
    rp_checkpoint *gathered; /* stage 0 of replica 0, from settle to save: every stage's tensors */
    /* Tensor parallelism (tp > 1): this worker holds a shard of each split block. */
    int tp, tp_rank;
    const rp_classifier *clf; /* to build the dense twin a checkpoint goes through */
} replica_state;

/* The labels' message from stage 0 to the last stage. The pipeline tags micro-batch numbers
   (--micro-batches is at most 1024) and the MPI backend takes tags below 4095: in between. */
#define LABELS_TAG 4000

/*
 * Tensor parallelism and whole-file checkpoints, which hold the dense network's tensors: a dense
 * twin of this worker's part (the same stage, no tp_comm) and a plain optimizer over it, which
 * the shards are gathered into (rp_resnet_gather_dense, rp_resnet_gather_state). Resuming needs
 * no twin: each member reads its slices (rp_checkpoint_read_params).
 */
typedef struct dense_twin {
    rp_classifier_net net;
    rp_optimizer *opt;
} dense_twin;

static void twin_destroy(dense_twin *d)
{
    rp_optimizer_destroy(d->opt);
    rp_classifier_net_destroy(&d->net);
}

static rp_status twin_create(const replica_state *s, dense_twin *d)
{
    const rp_classifier *c = s->clf;
    memset(d, 0, sizeof *d);
    rp_classifier_place place = {.stage = s->stage, .stages = s->stages};
    RP_CHECK(rp_classifier_net_create_part(&d->net, &c->cfg, c->train->h, c->train->w, c->train->c,
                                           c->train->num_classes, &place));
    rp_status status = rp_optimizer_create(&d->opt, rp_classifier_net_params(&d->net),
                                           rp_optimizer_config(s->opt));
    if (status != RP_OK) twin_destroy(d);
    return status;
}

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    const rp_classifier *c = ctx;
    const rp_classifier_config *cfg = &c->cfg;
    replica_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a replica's state");
    *out = s; /* freed by destroy() whatever happens below */
    /* Replicas that step independently (async, sync groups) jump between batches; an async
       replica trains whole batches and never meets the others. */
    bool independent = !rp_replica_lockstep(rep);
    int in_sync = rp_replica_in_sync(rep);
    bool async = independent && in_sync == 1;
    if (cfg->batch % in_sync != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas", cfg->batch,
                        in_sync);
    /* Batch norm's statistics cover the replicas in sync (async: each replica's own). */
    rp_comm *bn_comm = in_sync > 1 ? rp_replica_sync_comm(rep) : NULL;
    s->stages = rp_replica_axis_size(rep, RP_AXIS_PIPE);
    s->stage = rp_replica_coord(rep, RP_AXIS_PIPE);
    s->pipe = rp_replica_axis_comm(rep, RP_AXIS_PIPE);
    s->tp = rp_replica_axis_size(rep, RP_AXIS_MODEL);
    s->tp_rank = rp_replica_coord(rep, RP_AXIS_MODEL);
    s->clf = c;
    rp_classifier_place place = {.bn_comm = bn_comm,
                                 .stage = s->stage,
                                 .stages = s->stages,
                                 .tp_comm =
                                     s->tp > 1 ? rp_replica_axis_comm(rep, RP_AXIS_MODEL) : NULL};
    RP_CHECK(rp_classifier_net_create_part(&s->net, cfg, c->train->h, c->train->w, c->train->c,
                                           c->train->num_classes, &place));
    rp_params *p = rp_classifier_net_params(&s->net);
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = cfg->momentum;
    oc.nesterov = cfg->nesterov;
    oc.weight_decay = cfg->weight_decay;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, p, &oc));

    rp_loader_config lc = rp_loader_config_default();
    if (async) {
        /* Each push is one whole batch, taken by whichever replica claims it. */
        lc.global_batch = cfg->batch;
        lc.replica = 0;
        lc.replicas = 1;
    } else {
        rp_input_context in;
        RP_CHECK(rp_replica_input_context(rep, cfg->batch, &in));
        lc.global_batch = in.global_batch;
        lc.replica = in.replica;
        lc.replicas = in.replicas;
    }
    lc.seed = cfg->seed;
    lc.shuffle = true;
    lc.drop_last = true;
    lc.augment = cfg->augment;
    lc.pad = cfg->pad;
    lc.flip = cfg->augment;
    /* Independent replicas jump between batches: nothing to prefetch. Only stage 0 reads the
       images; the other stages' loaders only count the epoch's batches. */
    lc.prefetch = !independent && s->stage == 0;
    lc.limit = cfg->limit;
    for (int k = 0; k < c->train->c; k++) {
        lc.mean[k] = c->mean[k];
        lc.std[k] = c->std[k];
    }
    RP_CHECK(rp_loader_create(&s->loader, c->train, &lc));
    int m = cfg->micro_batches > 1 ? cfg->micro_batches : 1;
    if (s->stages > 1 || m > 1) {
        /* Stages, or micro-batches on one worker: gradient accumulation, a pipeline of one. */
        s->per_replica = lc.global_batch / lc.replicas;
        if (s->per_replica % m != 0)
            return RP_ERROR(RP_ERR_INVALID,
                            "each replica's batch of %d does not split into %d micro-batches "
                            "(batch %d over %d replicas)",
                            s->per_replica, m, cfg->batch, lc.replicas);
        s->micro_batches = m;
        RP_CHECK(rp_pipeline_create(&s->pipeline, s->pipe, cfg->schedule, m));
        if (s->stages > 1 && s->stage == s->stages - 1) {
            s->labels = calloc((size_t)s->per_replica, sizeof *s->labels);
            if (!s->labels) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the labels");
        }
    }
    if (ck) {
        /* Every replica restores the same state; a checkpoint of N replicas resumes on M. A stage
           takes its part of the whole model's tensors, a tensor-parallel member its slices of
           them (from a sharded checkpoint, reading only the pieces that hold them). */
        if (s->stages > 1) {
            RP_CHECK(rp_checkpoint_read_params_part(ck, p, "param/"));
            RP_CHECK(rp_checkpoint_read_optimizer_part(ck, s->opt, p, "optim/"));
        } else {
            RP_CHECK(rp_checkpoint_read_params(ck, p, "param/"));
            RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt, p, "optim/"));
        }
        RP_CHECK(rp_loader_seek(s->loader, at->epoch, at->step));
        /* Async, sync groups: the restored values and slots go to the parameter servers. */
        if (independent) RP_CHECK(rp_replica_optimizer_publish(rep, s->opt));
    }
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *state)
{
    const replica_state *s = state;
    return rp_loader_steps_per_epoch(s->loader);
}

static rp_status diverged(float loss, const rp_trainer_at *at)
{
    return RP_ERROR(RP_ERR_NUMERIC,
                    "the loss is %g at epoch %lld step %lld (lr %g): training diverged; "
                    "nothing was saved from this epoch; start again with a lower --lr",
                    (double)loss, (long long)at->epoch + 1, (long long)at->step, (double)at->lr);
}

/* What a stage function needs: the stage's network, and on the last stage the labels. */
typedef struct stage_ctx {
    const rp_classifier_net *net;
    const int32_t *labels; /* the last stage's: the batch's */
    int micro;             /* examples per micro-batch */
    bool last;
} stage_ctx;

static rp_tensor *stage_forward(rp_tape *t, rp_tensor *x, int micro, void *arg)
{
    const stage_ctx *c = arg;
    rp_tensor *y = rp_classifier_net_forward(t, c->net, x, true);
    if (!c->last) return y;
    return rp_softmax_cross_entropy(t, y, c->labels + (int64_t)micro * c->micro);
}

/*
 * One step of a replica cut into stages: stage 0 reads the batch and sends its labels to the last
 * stage, the pipeline runs the micro-batches forward and back, the last stage's loss goes to
 * every stage, and each stage steps its own parameters. A replica of one worker with several
 * micro-batches is a pipeline of one stage: gradient accumulation.
 */
static rp_status pipeline_step(rp_replica *rep, replica_state *s, const rp_trainer_at *at,
                               double *scalars)
{
    bool last = s->stage == s->stages - 1;
    rp_tensor *x = NULL;
    if (s->stage == 0) {
        int64_t epoch, step;
        rp_loader_position(s->loader, &epoch, &step);
        if (epoch != at->epoch || step != at->step)
            RP_CHECK(rp_loader_seek(s->loader, at->epoch, at->step));
        RP_CHECK(rp_loader_next(s->loader, &s->batch));
        const rp_batch *b = &s->batch;
        x = rp_tensor_from(rp_replica_tape(rep), 4, (int[]){b->n, b->h, b->w, b->c}, b->x);
        if (!x) return rp_last_status();
        if (s->stages > 1)
            RP_CHECK(rp_comm_send(s->pipe, b->y, b->n, RP_I32, s->stages - 1, LABELS_TAG));
    }
    const int32_t *labels = s->stages > 1 ? s->labels : s->batch.y;
    if (last && s->stages > 1)
        RP_CHECK(rp_comm_recv(s->pipe, s->labels, s->per_replica, RP_I32, 0, LABELS_TAG));
    stage_ctx c = {&s->net, labels, s->per_replica / s->micro_batches, last};
    float loss = NAN;
    RP_CHECK(rp_pipeline_run(s->pipeline, stage_forward, &c, x, &loss));
    if (s->stages > 1) RP_CHECK(rp_comm_broadcast(s->pipe, &loss, 1, RP_F32, s->stages - 1));
    if (!isfinite(loss)) return diverged(loss, at);
    RP_CHECK(rp_optimizer_step(s->opt, at->lr));
    scalars[0] = loss;
    return RP_OK;
}

/* Forward, loss, backward and the optimizer step (which averages or pushes) on batch `at`. */
static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    replica_state *s = state;
    if (s->pipeline) return pipeline_step(rep, s, at, scalars);
    int64_t epoch, step;
    rp_loader_position(s->loader, &epoch, &step);
    if (epoch != at->epoch || step != at->step)
        RP_CHECK(rp_loader_seek(s->loader, at->epoch, at->step));
    RP_CHECK(rp_loader_next(s->loader, &s->batch));
    rp_tape *t = rp_replica_tape(rep);
    const rp_batch *b = &s->batch;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){b->n, b->h, b->w, b->c}, b->x);
    rp_tensor *loss =
        rp_softmax_cross_entropy(t, rp_classifier_net_forward(t, &s->net, x, true), b->y);
    if (!loss) return rp_last_status();
    float l = rp_item(loss);
    if (!isfinite(l)) return diverged(l, at);
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, at->lr));
    scalars[0] = l; /* the default scalar, "loss" */
    return RP_OK;
}

/* One tensor of a checkpoint on its way between workers: this header, then its bytes. */
typedef struct wire_tensor {
    char name[RP_CHECKPOINT_NAME_MAX + 1];
    int32_t dtype, ndim; /* ndim -1: the end of the list */
    int64_t shape[RP_MAX_DIMS];
    int64_t nbytes;
} wire_tensor;

#define GATHER_TAG 4001

/*
 * A stage's parameters and optimizer state as a checkpoint's tensors ("param/", "optim/"), dense:
 * with tensor parallelism the members' shards are gathered first (collective over the model
 * axis; every member gets them, and all but rank 0 let them go).
 */
static rp_status stage_tensors(const replica_state *s, rp_checkpoint **out)
{
    rp_params *p = rp_classifier_net_params(&s->net);
    const rp_optimizer *opt = s->opt;
    dense_twin d = {0};
    bool twin = s->tp > 1;
    if (twin) {
        RP_CHECK(twin_create(s, &d));
        p = rp_classifier_net_params(&d.net);
        opt = d.opt;
    }
    rp_checkpoint *ck = NULL;
    rp_status status = RP_OK;
    if (twin) {
        status = rp_resnet_gather_dense(s->net.resnet, p);
        if (status == RP_OK) status = rp_resnet_gather_state(s->net.resnet, s->opt, p, d.opt);
    }
    if (status == RP_OK) status = rp_checkpoint_create(&ck);
    if (status == RP_OK) status = rp_checkpoint_add_params(ck, p, "param/");
    if (status == RP_OK) status = rp_checkpoint_add_optimizer(ck, opt, p, "optim/");
    if (twin) twin_destroy(&d);
    if (status != RP_OK) {
        rp_checkpoint_destroy(ck);
        return status;
    }
    *out = ck;
    return RP_OK;
}

static rp_status send_tensors(rp_comm *pipe, const rp_checkpoint *ck, int to)
{
    for (int i = 0; i <= rp_checkpoint_count(ck); i++) {
        wire_tensor w;
        memset(&w, 0, sizeof w);
        w.ndim = -1;
        const void *data = NULL;
        if (i < rp_checkpoint_count(ck)) {
            rp_checkpoint_dtype dtype;
            int ndim;
            snprintf(w.name, sizeof w.name, "%s", rp_checkpoint_name_at(ck, i));
            data = rp_checkpoint_get(ck, w.name, &dtype, &ndim, w.shape);
            if (!data) return rp_last_status();
            w.dtype = (int32_t)dtype;
            w.ndim = ndim;
            int64_t numel = 1;
            for (int d = 0; d < ndim; d++)
                numel *= w.shape[d];
            w.nbytes = numel * (dtype == RP_CHECKPOINT_F32 ? 4 : 8);
        }
        RP_CHECK(rp_comm_send(pipe, &w, (int64_t)sizeof w, RP_U8, to, GATHER_TAG));
        if (w.nbytes > 0) RP_CHECK(rp_comm_send(pipe, data, w.nbytes, RP_U8, to, GATHER_TAG));
    }
    return RP_OK;
}

/* Receives what send_tensors sent from stage `from` into ck (a name ck holds already, such as the
 * optimizer's step count every stage has, is kept once). */
static rp_status recv_tensors(rp_comm *pipe, rp_checkpoint *ck, int from)
{
    for (;;) {
        wire_tensor w;
        RP_CHECK(rp_comm_recv(pipe, &w, (int64_t)sizeof w, RP_U8, from, GATHER_TAG));
        if (w.ndim < 0) return RP_OK;
        w.name[RP_CHECKPOINT_NAME_MAX] = 0;
        if (w.ndim > RP_MAX_DIMS || w.nbytes < 0 || w.nbytes > ((int64_t)1 << 40))
            return RP_ERROR(RP_ERR_FORMAT, "stage %d sent a malformed tensor header (\"%.64s\")",
                            from, w.name);
        void *data = w.nbytes > 0 ? malloc((size_t)w.nbytes) : NULL;
        if (w.nbytes > 0 && !data)
            return RP_ERROR(RP_ERR_NOMEM, "cannot receive %lld bytes of %s from stage %d",
                            (long long)w.nbytes, w.name, from);
        rp_status status =
            w.nbytes > 0 ? rp_comm_recv(pipe, data, w.nbytes, RP_U8, from, GATHER_TAG) : RP_OK;
        bool have = false;
        for (int i = 0; i < rp_checkpoint_count(ck) && !have; i++)
            have = !strcmp(rp_checkpoint_name_at(ck, i), w.name);
        if (status == RP_OK && !have)
            status =
                rp_checkpoint_add(ck, w.name, (rp_checkpoint_dtype)w.dtype, w.ndim, w.shape, data);
        free(data);
        RP_CHECK(status);
    }
}

/*
 * Before a checkpoint of a replica spanning workers: replica 0's stages (each gathered from its
 * tensor-parallel shards first) send their tensors to its stage 0, which keeps the whole model's
 * until save() writes them (the replicas are identical).
 */
static rp_status gather_stages(rp_replica *rep, replica_state *s)
{
    if (rp_replica_id(rep) != 0) return RP_OK;
    rp_checkpoint *mine = NULL;
    RP_CHECK(stage_tensors(s, &mine));
    if (s->tp_rank != 0) {
        /* Its shards went to the stage's tensor-parallel rank 0 in stage_tensors. */
        rp_checkpoint_destroy(mine);
        return RP_OK;
    }
    if (s->stage != 0) {
        rp_status status = send_tensors(s->pipe, mine, 0);
        rp_checkpoint_destroy(mine);
        return status;
    }
    rp_checkpoint_destroy(s->gathered);
    s->gathered = mine;
    for (int from = 1; from < s->stages; from++)
        RP_CHECK(recv_tensors(s->pipe, s->gathered, from));
    return RP_OK;
}

/* The mean over the replicas of the buffers (the values after the trainable ones), through the
 * host: the collective runs on host memory, the values live in the kernel table's storage. */
static rp_status average_buffers(rp_replica *rep, rp_params *p, int64_t trainable, int64_t buffers)
{
    float *v = malloc((size_t)buffers * sizeof *v);
    if (!v)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the %lld buffer values to average",
                        (long long)buffers);
    rp_status status = RP_OK;
    int first = rp_params_trainable_count(p), count = rp_params_count(p);
    for (int i = first; i < count && status == RP_OK; i++) {
        const rp_tensor *b = rp_params_at(p, i);
        status = rp_tensor_read(b, v + (rp_params_offset(p, i) - trainable), b->numel);
    }
    if (status == RP_OK) status = rp_all_reduce(rep, v, v, buffers, RP_F32, RP_MEAN);
    for (int i = first; i < count && status == RP_OK; i++) {
        rp_tensor *b = rp_params_at(p, i);
        status = rp_tensor_write(b, v + (rp_params_offset(p, i) - trainable), b->numel);
    }
    free(v);
    return status;
}

/*
 * After a run of async pushes: every replica takes the servers' values (and replica 0's optimizer
 * the slots, for the checkpoint), and the replicas' batch-norm statistics, which each kept for
 * itself, are averaged, so the replicas evaluate and save one model. Before a ZeRO-1 checkpoint:
 * replica 0's optimizer gathers every shard's state.
 */
static rp_status settle(rp_replica *rep, void *ctx, void *state)
{
    replica_state *s = state;
    rp_params *p = rp_classifier_net_params(&s->net);
    RP_CHECK(rp_replica_optimizer_fetch(rep, s->opt));
    /* Lockstep replicas (ZeRO-1 before a checkpoint) hold equal buffers: averaging them could only
     * round them. */
    int64_t trainable = rp_params_trainable_numel(p), buffers = rp_params_numel(p) - trainable;
    if (!rp_replica_lockstep(rep) && rp_replica_count(rep) > 1 && buffers > 0)
        RP_CHECK(average_buffers(rep, p, trainable, buffers));
    return s->stages > 1 || s->tp > 1 ? gather_stages(rep, s) : RP_OK;
}

/* Each replica evaluates its share of every test batch; the sums are reduced. */
static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    const rp_classifier *c = ctx;
    replica_state *s = state;
    rp_classifier_eval ev;
    RP_CHECK(rp_classifier_evaluate_stages(rp_replica_tape(rep), &s->net, c->test, c->mean, c->std,
                                           rp_replica_id(rep), rp_replica_count(rep),
                                           s->stages > 1 ? s->pipe : NULL, &ev));
    RP_CHECK(rp_replica_report(rep, "loss_sum", ev.loss_sum, RP_SUM));
    RP_CHECK(rp_replica_report(rep, "correct", (double)ev.correct, RP_SUM));
    return rp_replica_report(rep, "samples", (double)ev.samples, RP_SUM);
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    rp_classifier *c = ctx;
    double loss_sum, correct, samples;
    RP_CHECK(rp_replicator_result(r, "loss_sum", &loss_sum));
    RP_CHECK(rp_replicator_result(r, "correct", &correct));
    RP_CHECK(rp_replicator_result(r, "samples", &samples));
    c->last_loss = samples > 0 ? loss_sum / samples : 0;
    c->last_accuracy = samples > 0 ? correct / samples : 0;
    if (c->last_accuracy > c->best_accuracy) c->best_accuracy = c->last_accuracy;
    RP_CHECK(rp_trainer_metrics_add(m, "test_loss", c->last_loss, "test loss %.4f", c->last_loss));
    return rp_trainer_metrics_add(m, "test_accuracy", c->last_accuracy, "test acc %.2f%%",
                                  100 * c->last_accuracy);
}

static rp_status save(void *ctx, void *state, rp_checkpoint *ck)
{
    replica_state *s = state;
    if (s->stages > 1 || s->tp > 1) {
        /* The tensors every stage sent in settle, under the unsplit network's names. */
        if (!s->gathered)
            return RP_ERROR(RP_ERR_INVALID,
                            "a checkpoint of a replica spanning %d workers needs its parts "
                            "gathered first (settle)",
                            s->stages * s->tp);
        rp_status status = RP_OK;
        for (int i = 0; i < rp_checkpoint_count(s->gathered) && status == RP_OK; i++) {
            const char *name = rp_checkpoint_name_at(s->gathered, i);
            rp_checkpoint_dtype dtype;
            int ndim;
            int64_t shape[RP_MAX_DIMS];
            const void *data = rp_checkpoint_get(s->gathered, name, &dtype, &ndim, shape);
            status =
                data ? rp_checkpoint_add(ck, name, dtype, ndim, shape, data) : rp_last_status();
        }
        rp_checkpoint_destroy(s->gathered);
        s->gathered = NULL;
        return status;
    }
    rp_params *p = rp_classifier_net_params(&s->net);
    RP_CHECK(rp_checkpoint_add_params(ck, p, "param/"));
    return rp_checkpoint_add_optimizer(ck, s->opt, p, "optim/");
}

/*
 * Each worker's own part of a checkpoint, nothing gathered: a replica's range of the values and
 * the optimizer state (its ZeRO shard, or an even part); a pipeline stage's worker its stage's
 * tensors, a tensor-parallel member its slices of them (rp_replica_checkpoint_part).
 */
static rp_status save_part(rp_replica *rep, void *ctx, void *state, rp_checkpoint *ck)
{
    (void)ctx;
    replica_state *s = state;
    return rp_replica_checkpoint_part(rep, ck, s->opt, "param/", "optim/");
}

static rp_status destroy(rp_replica *rep, void *ctx, void *state)
{
    replica_state *s = state;
    rp_checkpoint_destroy(s->gathered);
    rp_pipeline_destroy(s->pipeline);
    free(s->labels);
    rp_loader_destroy(s->loader);
    rp_optimizer_destroy(s->opt);
    rp_classifier_net_destroy(&s->net);
    free(s);
    return RP_OK;
}

const rp_trainer_model *rp_classifier_trainer_model(void)
{
    static const rp_trainer_model model = {
        .build = build,
        .steps_per_epoch = steps_per_epoch,
        .train_step = train_step,
        .settle = settle,
        .evaluate = evaluate,
        .evaluated = evaluated,
        .save = save,
        .save_part = save_part,
        .destroy = destroy,
    };
    return &model;
}

rp_optimizer *rp_classifier_state_optimizer(const void *state)
{
    return state ? ((const replica_state *)state)->opt : NULL;
}

rp_params *rp_classifier_state_params(const void *state)
{
    return state ? rp_classifier_net_params(&((const replica_state *)state)->net) : NULL;
}

int64_t rp_classifier_state_samples(const void *state)
{
    return state ? rp_loader_samples(((const replica_state *)state)->loader) : 0;
}

const rp_pipeline *rp_classifier_state_pipeline(const void *state)
{
    return state ? ((const replica_state *)state)->pipeline : NULL;
}
