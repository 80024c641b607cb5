/*
 * train_model.c - the model wrapper, dataset choice and evaluation shared by
 * `replicator train` and `replicator eval`.
 */
#include <stdio.h>
#include <string.h>

#include "train.h"

rp_status train_model_create(train_model *m, const train_opts *o, int h, int w, int c, int classes,
                             rp_bn_reduce_fn bn_reduce, void *bn_ctx)
{
    memset(m, 0, sizeof *m);
    rp_resnet_kind kind;
    if (rp_resnet_kind_parse(o->model, &kind)) {
        rp_resnet_config cfg = rp_resnet_config_default(kind);
        cfg.in_channels = c;
        cfg.classes = classes;
        cfg.bn_reduce = bn_reduce;
        cfg.bn_reduce_ctx = bn_ctx;
        return rp_resnet_create(&m->resnet, &cfg, o->seed);
    }
    return rp_mlp_create(&m->mlp, h * w * c, o->hidden, o->n_hidden, classes, o->seed);
}

void train_model_destroy(train_model *m)
{
    rp_resnet_destroy(m->resnet);
    rp_mlp_destroy(m->mlp);
    memset(m, 0, sizeof *m);
}

rp_params *train_model_params(const train_model *m)
{
    return m->resnet ? rp_resnet_params(m->resnet) : m->mlp->params;
}

rp_tensor *train_model_forward(rp_tape *t, const train_model *m, rp_tensor *x, bool training)
{
    return m->resnet ? rp_resnet_forward(t, m->resnet, x, training) : rp_mlp_forward(t, m->mlp, x);
}

rp_status train_load_dataset(rp_dataset **ds, const train_opts *o, const char *split)
{
    if (!strcmp(o->dataset, "cifar10")) return rp_dataset_load_cifar10(ds, o->data_dir, split);
    if (!strcmp(o->dataset, "synthetic")) {
        /* ImageNet-shaped, for throughput work: a fixed set, a different seed per split. */
        bool train = !strcmp(split, "train");
        return rp_dataset_synthetic(ds, train ? 1024 : 256, 224, 224, 3, 1000, train ? 1 : 2);
    }
    return rp_dataset_load_mnist(ds, o->data_dir, split);
}

rp_status train_evaluate(rp_tape *t, const train_model *m, const rp_dataset *test,
                         const float *mean, const float *std, int replica, int replicas,
                         eval_result *r)
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
        rp_tensor *logits = train_model_forward(t, m, x, false);
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

void train_checkpoint_path(char *buf, size_t size, const char *dir)
{
    snprintf(buf, size, "%s/checkpoint.safetensors", dir);
}
