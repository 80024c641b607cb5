/*
 * classifier_trainer.c - the classifier as the trainer sees it: on every
 * replica its network (cross-replica batch norm when sync replicas are
 * several), its optimizer (which broadcasts replica 0's initial values and
 * averages gradients, or pushes them to parameter servers) and its loader
 * (its shard of every global batch, or whole batches in async; with sync
 * groups its shard of each batch its group claims); one batch's
 * forward, loss, backward and update; evaluation; what a checkpoint holds.
 */
#include <math.h>
#include <stdlib.h>

#include "models/classifier/classifier.h"

/* What each replica holds. */
typedef struct replica_state {
    rp_classifier_net net;
    rp_optimizer *opt;
    rp_loader *loader;
    rp_batch batch; /* the last batch */
} replica_state;

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
    RP_CHECK(rp_classifier_net_create(&s->net, cfg, c->train->h, c->train->w, c->train->c,
                                      c->train->num_classes, bn_comm));
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
    lc.prefetch = !independent; /* independent replicas jump between batches: nothing to prefetch */
    lc.limit = cfg->limit;
    for (int k = 0; k < c->train->c; k++) {
        lc.mean[k] = c->mean[k];
        lc.std[k] = c->std[k];
    }
    RP_CHECK(rp_loader_create(&s->loader, c->train, &lc));
    if (ck) {
        /* Every replica restores the same state; a checkpoint of N replicas resumes on M. */
        RP_CHECK(rp_checkpoint_read_params(ck, p, "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt, p, "optim/"));
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

/* Forward, loss, backward and the optimizer step (which averages or pushes) on batch `at`. */
static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    replica_state *s = state;
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
    if (!isfinite(l))
        return RP_ERROR(RP_ERR_NUMERIC,
                        "the loss is %g at epoch %lld step %lld (lr %g): training diverged; "
                        "nothing was saved from this epoch; start again with a lower --lr",
                        (double)l, (long long)b->epoch + 1, (long long)b->step, (double)at->lr);
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, at->lr));
    scalars[0] = l; /* the default scalar, "loss" */
    return RP_OK;
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
    if (!rp_replica_lockstep(rep) && rp_replica_count(rep) > 1 && buffers > 0) {
        float *v = rp_params_data(p) + trainable;
        RP_CHECK(rp_all_reduce(rep, v, v, buffers, RP_F32, RP_MEAN));
    }
    return RP_OK;
}

/* Each replica evaluates its share of every test batch; the sums are reduced. */
static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    const rp_classifier *c = ctx;
    replica_state *s = state;
    rp_classifier_eval ev;
    RP_CHECK(rp_classifier_evaluate(rp_replica_tape(rep), &s->net, c->test, c->mean, c->std,
                                    rp_replica_id(rep), rp_replica_count(rep), &ev));
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
    const replica_state *s = state;
    rp_params *p = rp_classifier_net_params(&s->net);
    RP_CHECK(rp_checkpoint_add_params(ck, p, "param/"));
    return rp_checkpoint_add_optimizer(ck, s->opt, p, "optim/");
}

static rp_status destroy(rp_replica *rep, void *ctx, void *state)
{
    replica_state *s = state;
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
