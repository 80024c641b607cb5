/*
 * classifier.c - the network behind one face (an MLP or a ResNet), the
 * dataset choice and evaluation, shared by training and `replicator eval`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier.h"

bool rp_classifier_known_model(const char *model)
{
    rp_resnet_kind k;
    return model && (!strcmp(model, "mlp") || rp_resnet_kind_parse(model, &k));
}

rp_status rp_classifier_net_create_part(rp_classifier_net *net, const rp_classifier_config *cfg,
                                        int h, int w, int c, int classes,
                                        const rp_classifier_place *place)
{
    memset(net, 0, sizeof *net);
    int stages = place && place->stages > 1 ? place->stages : 1,
        stage = place && place->stages > 1 ? place->stage : 0;
    net->stage = stage;
    net->stages = stages;
    if (stage < 0 || stage >= stages)
        return RP_ERROR(RP_ERR_INVALID, "stage %d of a network cut into %d stages", stage, stages);
    rp_resnet_kind kind;
    if (rp_resnet_kind_parse(cfg->model, &kind)) {
        rp_resnet_config rc = rp_resnet_config_default(kind);
        rc.in_channels = c;
        rc.classes = classes;
        rc.bn_comm = place ? place->bn_comm : NULL;
        rc.tp_comm = place ? place->tp_comm : NULL;
        if (stages > 1) {
            int bounds[RP_RESNET_MAX_UNITS + 1];
            RP_CHECK(rp_resnet_partition(&rc, h, w, stages, bounds));
            rc.first_unit = bounds[stage];
            rc.last_unit = bounds[stage + 1];
        }
        return rp_resnet_create(&net->resnet, &rc, cfg->seed);
    }
    if (place && place->tp_comm && rp_comm_size(place->tp_comm) > 1)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "%s cannot be split by tensor parallelism: only the ResNets are "
                        "(resnet20, resnet18, resnet50); drop --tensor-parallel",
                        cfg->model);
    if (stages > 1)
        return RP_ERROR(
            RP_ERR_UNSUPPORTED,
            "%s cannot be cut into %d stages: only the ResNets are (resnet20, resnet18, "
            "resnet50); drop --model-parallel",
            cfg->model, stages);
    return rp_mlp_create(&net->mlp, h * w * c, cfg->hidden, cfg->n_hidden, classes, cfg->seed);
}

rp_status rp_classifier_net_create(rp_classifier_net *net, const rp_classifier_config *cfg, int h,
                                   int w, int c, int classes, rp_comm *bn_comm)
{
    rp_classifier_place place = {.bn_comm = bn_comm, .stage = 0, .stages = 1};
    return rp_classifier_net_create_part(net, cfg, h, w, c, classes, &place);
}

void rp_classifier_net_destroy(rp_classifier_net *net)
{
    rp_resnet_destroy(net->resnet);
    rp_mlp_destroy(net->mlp);
    memset(net, 0, sizeof *net);
}

rp_params *rp_classifier_net_params(const rp_classifier_net *net)
{
    return net->resnet ? rp_resnet_params(net->resnet) : net->mlp->params;
}

rp_tensor *rp_classifier_net_forward(rp_tape *t, const rp_classifier_net *net, rp_tensor *x,
                                     bool training)
{
    return net->resnet ? rp_resnet_forward(t, net->resnet, x, training)
                       : rp_mlp_forward(t, net->mlp, x);
}

static rp_status load_stored(rp_dataset **ds, const rp_classifier_config *cfg, const char *split)
{
    if (!strcmp(cfg->dataset, "folder")) {
        /* A user's JPEG/PNG files, decoded and augmented by the loader: made at their size. */
        rp_folder_config fc = cfg->folder.image_size > 0 ? cfg->folder : rp_folder_config_default();
        if (cfg->image_size > 0) fc.image_size = cfg->image_size;
        return rp_dataset_load_folder(ds, cfg->data_dir, split, &fc);
    }
    if (!strcmp(cfg->dataset, "cifar10")) return rp_dataset_load_cifar10(ds, cfg->data_dir, split);
    if (!strcmp(cfg->dataset, "synthetic")) {
        /* ImageNet-shaped, for throughput work: a fixed set, a different seed per split. */
        bool train = !strcmp(split, "train");
        return rp_dataset_synthetic(ds, train ? 1024 : 256, 224, 224, 3, 1000, train ? 1 : 2);
    }
    return rp_dataset_load_mnist(ds, cfg->data_dir, split);
}

rp_status rp_classifier_load_dataset(rp_dataset **ds, const rp_classifier_config *cfg,
                                     const char *split)
{
    RP_CHECK(load_stored(ds, cfg, split));
    if (cfg->image_size <= 0 || ((*ds)->h == cfg->image_size && (*ds)->w == cfg->image_size))
        return RP_OK;
    rp_dataset *padded;
    rp_status status = rp_dataset_pad(&padded, *ds, cfg->image_size, cfg->image_size);
    rp_dataset_destroy(*ds);
    *ds = status == RP_OK ? padded : NULL;
    return status;
}

rp_status rp_classifier_load_splits(rp_dataset **train, rp_dataset **test,
                                    const rp_classifier_config *cfg)
{
    *train = *test = NULL;
    RP_CHECK(rp_classifier_load_dataset(train, cfg, "train"));
    rp_status status = rp_classifier_load_dataset(test, cfg, "test");
    if (status == RP_OK &&
        ((*train)->h != (*test)->h || (*train)->w != (*test)->w || (*train)->c != (*test)->c))
        status = RP_ERROR(RP_ERR_SHAPE,
                          "the train images (%s) are %dx%dx%d but the test images (%s) "
                          "%dx%dx%d: a network scores images of the size it trained on (pad both "
                          "to one size with image_size, --image-size N, or give splits of one "
                          "size)",
                          (*train)->name, (*train)->h, (*train)->w, (*train)->c, (*test)->name,
                          (*test)->h, (*test)->w, (*test)->c);
    if (status != RP_OK) {
        rp_dataset_destroy(*test);
        rp_dataset_destroy(*train);
        *train = *test = NULL;
    }
    return status;
}

rp_status rp_classifier_evaluate(rp_tape *t, const rp_classifier_net *net, const rp_dataset *test,
                                 const float *mean, const float *std, int replica, int replicas,
                                 rp_classifier_eval *r)
{
    return rp_classifier_evaluate_stages(t, net, test, mean, std, replica, replicas, NULL, r);
}

/* Messages between stages in evaluation, on the pipe's channels: a tag above the pipeline's
 * micro-batch numbers and below the 4095 tags of the MPI backend. */
#define EVAL_TAG 4002

/* Scores a batch's logits: the loss sum and the count of correct top-1 predictions. */
static rp_status score(rp_tape *t, rp_tensor *logits, const int32_t *labels, int n,
                       double *loss_sum, int64_t *correct)
{
    rp_tensor *loss = rp_softmax_cross_entropy(t, logits, labels);
    if (!loss) return rp_last_status();
    *loss_sum += (double)rp_item(loss) * n;
    int classes = logits->shape[1];
    float *values = rp_arena_alloc(rp_tape_arena(t), (size_t)logits->numel * sizeof(float));
    if (!values) return rp_last_status();
    RP_CHECK(rp_tensor_read(logits, values, logits->numel));
    for (int i = 0; i < n; i++) {
        const float *row = values + (int64_t)i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (row[k] > row[best]) best = k;
        *correct += best == labels[i];
    }
    return RP_OK;
}

/*
 * One stage's side of the evaluation: stage 0 reads the batches (from its loader), the others
 * receive them from the stage before; each but the last passes its output on.
 */
static rp_status evaluate_loop(rp_tape *t, const rp_classifier_net *net, rp_loader *ld,
                               rp_comm *pipe, int stage, int stages, int32_t *labels, int max_n,
                               double *loss_sum, int64_t *correct, int64_t *seen)
{
    bool last = stage == stages - 1;
    for (int64_t s = 0;; s++) {
        rp_tape_reset(t);
        rp_tensor *x;
        int n;
        if (stage == 0) {
            if (s == rp_loader_steps_per_epoch(ld)) break;
            rp_batch b;
            RP_CHECK(rp_loader_next(ld, &b));
            x = rp_tensor_from(t, 4, (int[]){b.n, b.h, b.w, b.c}, b.x);
            memcpy(labels, b.y, (size_t)b.n * sizeof *labels);
            n = b.n;
        } else {
            int32_t shape[4];
            RP_CHECK(rp_comm_recv(pipe, shape, 4, RP_I32, stage - 1, EVAL_TAG));
            if (shape[0] == 0) break;
            if (shape[0] < 0 || shape[0] > max_n)
                return RP_ERROR(RP_ERR_FORMAT, "evaluation stage %d: a batch of %d from stage %d",
                                stage, shape[0], stage - 1);
            int64_t numel = rp_shape_numel(4, shape);
            if (numel < 1)
                return RP_ERROR(RP_ERR_FORMAT,
                                "evaluation stage %d: a batch of shape [%d, %d, %d, %d] from "
                                "stage %d",
                                stage, shape[0], shape[1], shape[2], shape[3], stage - 1);
            float *in = rp_arena_alloc(rp_tape_arena(t), (size_t)numel * sizeof(float));
            if (!in) return rp_last_status();
            RP_CHECK(rp_comm_recv(pipe, in, numel, RP_F32, stage - 1, EVAL_TAG));
            x = rp_tensor_from(t, 4, shape, in);
            if (!x) return rp_last_status();
            RP_CHECK(rp_comm_recv(pipe, labels, shape[0], RP_I32, stage - 1, EVAL_TAG));
            n = shape[0];
        }
        rp_tensor *y = rp_classifier_net_forward(t, net, x, false);
        if (!y) return rp_last_status();
        if (last) {
            RP_CHECK(score(t, y, labels, n, loss_sum, correct));
            *seen += n;
            continue;
        }
        int32_t shape[4] = {y->shape[0], y->shape[1], y->shape[2], y->shape[3]};
        float *out = rp_arena_alloc(rp_tape_arena(t), (size_t)y->numel * sizeof(float));
        if (!out) return rp_last_status();
        RP_CHECK(rp_tensor_read(y, out, y->numel));
        RP_CHECK(rp_comm_send(pipe, shape, 4, RP_I32, stage + 1, EVAL_TAG));
        RP_CHECK(rp_comm_send(pipe, out, y->numel, RP_F32, stage + 1, EVAL_TAG));
        RP_CHECK(rp_comm_send(pipe, labels, n, RP_I32, stage + 1, EVAL_TAG));
    }
    if (!last)
        RP_CHECK(rp_comm_send(pipe, (int32_t[]){0, 0, 0, 0}, 4, RP_I32, stage + 1, EVAL_TAG));
    return RP_OK;
}

rp_status rp_classifier_evaluate_stages(rp_tape *t, const rp_classifier_net *net,
                                        const rp_dataset *test, const float *mean, const float *std,
                                        int replica, int replicas, rp_comm *pipe,
                                        rp_classifier_eval *r)
{
    rp_status status = RP_OK;
    rp_loader *ld = NULL;
    int32_t *labels = NULL;
    int stages = pipe ? rp_comm_size(pipe) : 1, stage = pipe ? rp_comm_rank(pipe) : 0;
    rp_loader_config lc = rp_loader_config_default();
    /* About 256 images per test batch in all, whatever the replica count: each replica's arena
       holds one batch's activations, so the memory of evaluation does not grow with replicas.
       And at most 4M input values per replica: ResNet-50's 224x224x3 images go 27 at a time
       (a forward pass of 256 of them held about 20 GB). */
    int per = (256 + replicas - 1) / replicas;
    if (per < 16) per = 16;
    int64_t image = (int64_t)test->h * test->w * test->c, cap = (4 << 20) / (image > 0 ? image : 1);
    if (per > cap) per = cap > 1 ? (int)cap : 1;
    lc.global_batch = per * replicas;
    lc.replica = replica;
    lc.replicas = replicas;
    lc.shuffle = false;
    lc.drop_last = false;
    lc.augment = false;
    lc.prefetch = true;
    for (int c = 0; c < test->c && c < RP_LOADER_MAX_CHANNELS; c++) {
        lc.mean[c] = mean[c];
        lc.std[c] = std[c];
    }
    labels = rp_alloc((size_t)per * sizeof *labels);
    if (!labels) return rp_last_status();
    if (stage == 0) RP_TRY(rp_loader_create(&ld, test, &lc));
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    rp_tape_set_recording(t, false);
    RP_TRY(evaluate_loop(t, net, ld, pipe, stage, stages, labels, per, &loss_sum, &correct, &seen));
    if (stages > 1) {
        /* The last stage scored the batches: every stage returns its sums. */
        double sums[3] = {loss_sum, (double)correct, (double)seen};
        RP_TRY(rp_comm_broadcast(pipe, sums, 3, RP_F64, stages - 1));
        loss_sum = sums[0];
        correct = (int64_t)sums[1];
        seen = (int64_t)sums[2];
    }
    r->loss = seen ? loss_sum / (double)seen : 0;
    r->accuracy = seen ? (double)correct / (double)seen : 0;
    r->samples = seen;
    r->loss_sum = loss_sum;
    r->correct = correct;
cleanup:
    rp_tape_set_recording(t, true);
    rp_tape_reset(t);
    rp_loader_destroy(ld);
    rp_free(labels);
    return status;
}

rp_status rp_classifier_create(rp_classifier **out, const rp_classifier_config *cfg)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "rp_classifier_create: NULL argument");
    *out = NULL;
    if (!rp_classifier_known_model(cfg->model))
        return RP_ERROR(RP_ERR_INVALID, "unknown model \"%s\" (resnet20, resnet18, resnet50, mlp)",
                        cfg->model);
    if (cfg->batch < 1) return RP_ERROR(RP_ERR_INVALID, "batch %d; at least 1", cfg->batch);
    rp_status status = RP_OK;
    rp_classifier *c = calloc(1, sizeof *c);
    if (!c) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a classifier");
    c->cfg = *cfg;
    RP_TRY(rp_classifier_load_splits(&c->train, &c->test, cfg));
    if (c->train->c > RP_LOADER_MAX_CHANNELS) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED, "%d channels; at most %d", c->train->c,
                          RP_LOADER_MAX_CHANNELS);
        goto cleanup;
    }
    RP_TRY(rp_dataset_channel_stats(c->train, c->mean, c->std));
    *out = c;
    return RP_OK;
cleanup:
    rp_classifier_destroy(c);
    return status;
}

void rp_classifier_destroy(rp_classifier *c)
{
    if (!c) return;
    rp_dataset_destroy(c->test);
    rp_dataset_destroy(c->train);
    free(c);
}
