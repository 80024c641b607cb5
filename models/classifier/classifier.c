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

rp_status rp_classifier_net_create(rp_classifier_net *net, const rp_classifier_config *cfg, int h,
                                   int w, int c, int classes, rp_comm *bn_comm)
{
    memset(net, 0, sizeof *net);
    rp_resnet_kind kind;
    if (rp_resnet_kind_parse(cfg->model, &kind)) {
        rp_resnet_config rc = rp_resnet_config_default(kind);
        rc.in_channels = c;
        rc.classes = classes;
        rc.bn_comm = bn_comm;
        return rp_resnet_create(&net->resnet, &rc, cfg->seed);
    }
    return rp_mlp_create(&net->mlp, h * w * c, cfg->hidden, cfg->n_hidden, classes, cfg->seed);
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

rp_status rp_classifier_evaluate(rp_tape *t, const rp_classifier_net *net, const rp_dataset *test,
                                 const float *mean, const float *std, int replica, int replicas,
                                 rp_classifier_eval *r)
{
    rp_status status = RP_OK;
    rp_loader *ld = NULL;
    rp_loader_config lc = rp_loader_config_default();
    /* About 256 images per test batch in all, whatever the replica count: each replica's arena
       holds one batch's activations, so the memory of evaluation does not grow with replicas. */
    int per = (256 + replicas - 1) / replicas;
    lc.global_batch = (per < 16 ? 16 : per) * replicas;
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
    RP_TRY(rp_loader_create(&ld, test, &lc));
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    rp_tape_set_recording(t, false);
    for (int64_t s = 0; s < rp_loader_steps_per_epoch(ld); s++) {
        rp_batch b;
        RP_TRY(rp_loader_next(ld, &b));
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 4, (int[]){b.n, b.h, b.w, b.c}, b.x);
        rp_tensor *logits = rp_classifier_net_forward(t, net, x, false);
        rp_tensor *loss = rp_softmax_cross_entropy(t, logits, b.y);
        if (!loss) {
            status = rp_last_status();
            goto cleanup;
        }
        loss_sum += (double)rp_item(loss) * b.n;
        int classes = logits->shape[1];
        for (int i = 0; i < b.n; i++) {
            const float *row = logits->data + (int64_t)i * classes;
            int best = 0;
            for (int k = 1; k < classes; k++)
                if (row[k] > row[best]) best = k;
            correct += best == b.y[i];
        }
        seen += b.n;
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
    RP_TRY(rp_classifier_load_dataset(&c->train, cfg, "train"));
    RP_TRY(rp_classifier_load_dataset(&c->test, cfg, "test"));
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
