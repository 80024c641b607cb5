/*
 * test_tp_resnet.c - the tensor-parallel ResNet (rp_resnet_config.tp_comm) on
 * the runtime's mesh (threads; a role of replicas x model workers), against
 * the dense network run the same way:
 *  - ResNet-20 at tensor parallelism 2 equals the dense network within 1e-5:
 *    the logits of the last step, the loss of every step, and every
 *    parameter and running statistic after 3 steps of SGD with momentum
 *    (a split tensor against its slice of the dense one, rp_tp_shard_copy);
 *    the replicated parameters are bitwise equal on the two model workers;
 *    and after one step from the default initialisation;
 *  - 2 replicas x tensor parallelism 2 (cross-replica batch norm on the data
 *    axis) equal the dense network on 2 replicas;
 *  - ResNet-50 (bottleneck blocks) at 32x32 with 4 classes equals dense at
 *    tensor parallelism 2;
 * The runs of several steps start each block's last gamma at 0
 * (zero_init_residual): see test_resnet50_tp2_equals_dense for why.
 *  - the gradients of one batch from the default initialisation (ResNet-20
 *    and ResNet-50, with and without recompute_bn) against the dense ones
 *    within 1e-5 of each tensor's largest (2e-5 on batch statistics): see
 *    test_tp2_gradients_equal_dense for the sizes;
 *  - rp_resnet_gather_dense / scatter_dense (and the _state forms, for the
 *    momentum) turn the shards into the dense tensors and back bitwise, and
 *    a dense network's tensors scattered into a tensor-parallel one give
 *    its shards bitwise;
 *  - a checkpoint written at T = 2 (gathered) resumes dense, and a dense
 *    one resumes at T = 2 (scattered), each taking the next step as the run
 *    it came from does;
 *  - a 1-member tp_comm is the dense network bitwise; widths that T does
 *    not divide, and a dense list of another shape, are clear errors naming
 *    the layer or tensor.
 * Which tensors are split, and along which axis, is written here from the
 * block layout (docs/model-parallel.md), not derived from the shapes as the
 * library does.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/resnet/resnet.h"
#include "testutil.h"

#define SEED    7
#define STEPS   3
#define LR      0.05f
#define B       4  /* images per replica */
#define MAX_B   16 /* images per replica of the gradient runs */
#define MAX_W   4  /* workers in a job */
#define MAX_CLS 10

/* ---- one job on the mesh: build, train, record ---------------------------------------------- */

typedef struct tr_worker {
    rp_resnet *net;
    rp_optimizer *opt;
    int data, model;           /* coordinates */
    float loss[STEPS + 1];     /* + 1: a run continued after a checkpoint */
    float logits[B * MAX_CLS]; /* the last step's */
    /* gather_job: the dense tensors gathered, and a second network (another seed) scattered into,
       each with its optimizer (the momentum gathered and scattered) */
    rp_resnet *dense, *copy;
    rp_optimizer *dense_opt, *copy_opt;
    rp_status status;
} tr_worker;

typedef struct tr_job {
    rp_resnet_kind kind;
    int img, classes, replicas, tp, steps;
    int batch;          /* images per replica: B, or up to MAX_B for the gradient runs */
    bool bn_cross;      /* cross-replica batch norm over the data axis */
    bool zero_init;     /* rp_resnet_config.zero_init_residual */
    bool recompute;     /* rp_resnet_config.recompute_bn */
    bool training;      /* the gradient runs' batch norm: batch statistics, or running ones */
    const char *resume; /* a checkpoint of the dense network to start from, or NULL */
    float *x;           /* [replicas * batch, img, img, 3]: replica d's from image d * batch */
    int32_t labels[MAX_W * MAX_B];
    int step;
    tr_worker w[MAX_W];
    rp_replicator *r;
} tr_job;

static rp_resnet_config tr_config(const tr_job *j)
{
    rp_resnet_config cfg = rp_resnet_config_default(j->kind);
    cfg.in_channels = 3;
    cfg.classes = j->classes;
    cfg.zero_init_residual = j->zero_init;
    cfg.recompute_bn = j->recompute;
    return cfg;
}

/*
 * A trainer's resume, written against the public API: the checkpoint holds the dense network's
 * tensors and momentum; read them into a dense network and optimizer, then scatter this
 * member's shards (T = 1: a plain copy).
 */
static rp_status tr_load(tr_worker *w, const tr_job *j)
{
    rp_resnet_config cfg = tr_config(j);
    rp_checkpoint *ck = NULL;
    rp_resnet *dense = NULL;
    rp_optimizer *dopt = NULL;
    rp_optim_config oc = rp_optim_config_default();
    rp_status status = RP_OK;
    RP_TRY(rp_checkpoint_load(&ck, j->resume));
    RP_TRY(rp_resnet_create(&dense, &cfg, SEED + 4));
    rp_params *dp = rp_resnet_params(dense);
    RP_TRY(rp_optimizer_create(&dopt, dp, &oc));
    RP_TRY(rp_checkpoint_read_params(ck, dp, "param/"));
    RP_TRY(rp_checkpoint_read_optimizer(ck, dopt, dp, "optim/"));
    RP_TRY(rp_resnet_scatter_dense(w->net, dp));
    RP_TRY(rp_resnet_scatter_state(w->net, w->opt, dp, dopt));
cleanup:
    rp_optimizer_destroy(dopt);
    rp_resnet_destroy(dense);
    rp_checkpoint_destroy(ck);
    return status;
}

static rp_status tr_build(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_resnet_config cfg = tr_config(j);
    /* The dense reference has no tp_comm at all (a 1-member one is checked on its own). */
    cfg.tp_comm = j->tp > 1 ? rp_replica_axis_comm(rep, RP_AXIS_MODEL) : NULL;
    cfg.bn_comm = j->bn_cross ? rp_replica_axis_comm(rep, RP_AXIS_DATA) : NULL;
    w->data = rp_replica_coord(rep, RP_AXIS_DATA);
    w->model = rp_replica_coord(rep, RP_AXIS_MODEL);
    RP_CHECK(rp_resnet_create(&w->net, &cfg, j->resume ? SEED + 3 : SEED));
    rp_optim_config oc = rp_optim_config_default(); /* SGD, momentum 0.9 */
    RP_CHECK(rp_replica_optimizer_create(rep, &w->opt, rp_resnet_params(w->net), &oc));
    return j->resume ? tr_load(w, j) : RP_OK;
}

static rp_status tr_step(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_tape *t = rp_replica_tape(rep);
    int d = rp_replica_id(rep), px = j->img * j->img * 3;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){B, j->img, j->img, 3}, j->x + d * B * px);
    rp_tensor *logits = rp_resnet_forward(t, w->net, x, true);
    rp_tensor *loss = rp_softmax_cross_entropy(t, logits, j->labels + d * B);
    if (!loss) return rp_last_status();
    if (j->step == j->steps - 1) RP_CHECK(rp_tensor_read(logits, w->logits, logits->numel));
    w->loss[j->step] = rp_item(loss);
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(w->opt, LR);
}

/* One forward and backward, no update: the gradients stay in the parameters for the checks. */
static rp_status tr_grad(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_tape *t = rp_replica_tape(rep);
    int d = rp_replica_id(rep), px = j->img * j->img * 3;
    int b = j->batch;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){b, j->img, j->img, 3}, j->x + d * b * px);
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, w->net, x, j->training),
                                               j->labels + d * b);
    if (!loss) return rp_last_status();
    w->loss[j->step] = rp_item(loss);
    return rp_backward(t, loss);
}

static rp_status tr_teardown(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_optimizer_destroy(w->opt);
    rp_resnet_destroy(w->net);
    rp_optimizer_destroy(w->dense_opt);
    rp_optimizer_destroy(w->copy_opt);
    rp_resnet_destroy(w->dense);
    rp_resnet_destroy(w->copy);
    memset(w, 0, sizeof *w);
    return RP_OK;
}

/* Builds the networks of the job `j` describes and runs `step` j->steps times. */
static void tr_launch(tr_job *j, rp_replica_fn step)
{
    int replicas = j->replicas, tp = j->tp, img = j->img, classes = j->classes;
    if (!j->batch) j->batch = B;
    int64_t n = (int64_t)replicas * j->batch * img * img * 3;
    j->x = malloc((size_t)n * sizeof(float));
    assert_non_null(j->x);
    tu_fill(j->x, n, 31, -1, 1); /* the same images for every layout */
    for (int i = 0; i < replicas * j->batch; i++)
        j->labels[i] = (int32_t)((i * 3 + 1) % classes);
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 60;
    cfg.checksum_every = 1;
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", replicas, tp);
    assert_int_equal(rp_replicator_create(&j->r, &cfg), RP_OK);
    rp_status st = rp_replicator_run(j->r, tr_build, j);
    for (j->step = 0; st == RP_OK && j->step < j->steps; j->step++)
        st = rp_replicator_run(j->r, step, j);
    if (st != RP_OK)
        fail_msg("%s, %d replicas x %d: %s", rp_resnet_kind_name(j->kind), replicas, tp,
                 rp_last_error());
}

/*
 * Builds the job's networks on a (replicas x tp) mesh, from the checkpoint `resume` if not NULL,
 * and trains them `steps` (<= STEPS) steps.
 */
static void tr_run_from(tr_job *j, rp_resnet_kind kind, int img, int classes, int replicas, int tp,
                        bool bn_cross, bool zero_init, int steps, const char *resume)
{
    memset(j, 0, sizeof *j);
    *j = (tr_job){.kind = kind,
                  .img = img,
                  .classes = classes,
                  .replicas = replicas,
                  .tp = tp,
                  .bn_cross = bn_cross,
                  .zero_init = zero_init,
                  .steps = steps,
                  .resume = resume};
    tr_launch(j, tr_step);
}

/* The gradients of one batch from the default initialisation, at tensor parallelism `tp`. */
static void tr_run_grad(tr_job *j, rp_resnet_kind kind, int batch, int img, int classes, int tp,
                        bool training, bool recompute)
{
    memset(j, 0, sizeof *j);
    *j = (tr_job){.kind = kind,
                  .batch = batch,
                  .img = img,
                  .classes = classes,
                  .replicas = 1,
                  .tp = tp,
                  .recompute = recompute,
                  .training = training,
                  .steps = 1};
    tr_launch(j, tr_grad);
}

static void tr_run(tr_job *j, rp_resnet_kind kind, int img, int classes, int replicas, int tp,
                   bool bn_cross, bool zero_init, int steps)
{
    tr_run_from(j, kind, img, classes, replicas, tp, bn_cross, zero_init, steps, NULL);
}

/*
 * One more step on the images of step `step` (the same images every step): the step a run
 * resumed from a checkpoint takes next.
 */
static void tr_continue(tr_job *j)
{
    j->steps++;
    if (rp_replicator_run(j->r, tr_step, j) != RP_OK) fail_msg("continue: %s", rp_last_error());
    j->step++;
}

static void tr_destroy(tr_job *j)
{
    assert_int_equal(rp_replicator_run(j->r, tr_teardown, j), RP_OK);
    rp_replicator_destroy(j->r);
    free(j->x);
    j->x = NULL;
}

/* ---- which tensors are split ------------------------------------------------------------------
 */

/*
 * The axis along which `name` is split at tensor parallelism > 1, -1 if replicated: a basic
 * block's conv1 by output channels (axis 0 of OHWI) with bn1, conv2 by input channels (axis 3);
 * a bottleneck's conv2 by output channels with bn2, conv3 by input channels.
 */
static int split_axis(rp_resnet_kind kind, const char *name)
{
    if (strncmp(name, "stage", 5) != 0 || strstr(name, "shortcut")) return -1;
    bool bottleneck = kind == RP_RESNET50;
    if (strstr(name, bottleneck ? ".conv2.weight" : ".conv1.weight")) return 0;
    if (strstr(name, bottleneck ? ".bn2." : ".bn1.")) return 0;
    if (strstr(name, bottleneck ? ".conv3.weight" : ".conv2.weight")) return 3;
    return -1;
}

/*
 * Fails unless `shard` (member r of n) is within tol of its slice of the dense tensor `dense`
 * along `axis` (-1: the whole tensor); tol 0 asks for bitwise.
 */
static void check_shard(const char *what, int r, const rp_tensor *shard, const float *svals,
                        const rp_tensor *dense, const float *dvals, int axis, int n, double tol)
{
    int64_t k = axis < 0 ? dense->numel : dense->numel / n;
    if (shard->numel != k)
        fail_msg("%s, member %d of %d: %lld elements, want %lld", what, r, n,
                 (long long)shard->numel, (long long)k);
    float *want = malloc((size_t)dense->numel * sizeof(float));
    assert_non_null(want);
    if (axis < 0)
        memcpy(want, dvals, (size_t)k * sizeof(float));
    else
        assert_int_equal(rp_tp_shard_copy(want, dvals, dense->ndim, dense->shape, axis, r, n),
                         RP_OK);
    double d = tu_max_rel_diff(svals, want, k);
    bool ok = tol == 0 ? memcmp(svals, want, (size_t)k * sizeof(float)) == 0 : d < tol;
    free(want);
    if (!ok) fail_msg("%s, member %d of %d: %g from the dense model's", what, r, n, d);
}

/* Every tensor of `net` (member r of n) against its slice of `dense`'s. */
static void check_net(rp_resnet_kind kind, const rp_resnet *net, int r, int n,
                      const rp_resnet *dense, double tol)
{
    rp_params *dp = rp_resnet_params(dense), *sp = rp_resnet_params(net);
    assert_int_equal(rp_params_count(sp), rp_params_count(dp));
    int split = 0;
    for (int i = 0; i < rp_params_count(dp); i++) {
        const rp_tensor *d = rp_params_at(dp, i);
        const rp_tensor *s = rp_params_find(sp, d->name);
        if (!s) fail_msg("no tensor \"%s\" in the tensor-parallel network", d->name);
        int axis = n > 1 ? split_axis(kind, d->name) : -1;
        split += axis >= 0;
        float *sv = tu_read(s), *dv = tu_read(d);
        check_shard(d->name, r, s, sv, d, dv, axis, n, tol);
        free(dv);
        free(sv);
    }
    if (n > 1 && split == 0) fail_msg("no tensor of the network is split");
}

/*
 * Every trainable parameter's gradient on each member of `tp` against its slice of the dense
 * job's, as the largest difference over the dense tensor's largest gradient magnitude; fails
 * above tol. The largest relative difference seen goes to *worst.
 */
static void check_grads(const tr_job *tp, const tr_job *dense, double tol, double *worst)
{
    rp_params *dp = rp_resnet_params(dense->w[0].net);
    float *dgrads = tu_param_grads(dp);
    for (int m = 0; m < tp->tp; m++) {
        rp_params *sp = rp_resnet_params(tp->w[m].net);
        float *sgrads = tu_param_grads(sp);
        for (int i = 0; i < rp_params_trainable_count(dp); i++) {
            const rp_tensor *d = rp_params_at(dp, i);
            const rp_tensor *s = rp_params_find(sp, d->name);
            if (!s) fail_msg("no tensor \"%s\" in the tensor-parallel network", d->name);
            assert_true(s->index < rp_params_trainable_count(sp));
            const float *dg = dgrads + rp_params_offset(dp, i);
            const float *sg = sgrads + rp_params_offset(sp, s->index);
            int axis = split_axis(tp->kind, d->name);
            int64_t k = axis < 0 ? d->numel : d->numel / tp->tp;
            assert_int_equal(s->numel, k);
            float *want = malloc((size_t)d->numel * sizeof(float));
            assert_non_null(want);
            if (axis < 0)
                memcpy(want, dg, (size_t)k * sizeof(float));
            else
                assert_int_equal(
                    rp_tp_shard_copy(want, dg, d->ndim, d->shape, axis, tp->w[m].model, tp->tp),
                    RP_OK);
            double max = 0, diff = 0;
            for (int64_t e = 0; e < d->numel; e++)
                max = fmax(max, fabs(dg[e]));
            for (int64_t e = 0; e < k; e++)
                diff = fmax(diff, fabs((double)sg[e] - want[e]));
            free(want);
            if (max == 0) fail_msg("\"%s\" has no gradient in the dense network", d->name);
            *worst = fmax(*worst, diff / max);
            if (!(diff <= tol * max))
                fail_msg("%s, member %d of %d: gradient %g from the dense one's (max %g)", d->name,
                         tp->w[m].model, tp->tp, diff / max, max);
        }
        free(sgrads);
    }
    free(dgrads);
}

/*
 * The tensor-parallel job against the dense one on as many replicas: every worker's losses,
 * last logits and tensors against its replica's dense ones; the replicated tensors bitwise
 * equal on the model workers of one replica.
 */
static void compare_jobs(const tr_job *tp, const tr_job *dense, double tol)
{
    int n = tp->tp, workers = tp->replicas * tp->tp;
    for (int i = 0; i < workers; i++) {
        const tr_worker *w = &tp->w[i];
        const tr_worker *d = NULL;
        for (int k = 0; k < dense->replicas; k++)
            if (dense->w[k].data == w->data) d = &dense->w[k];
        assert_non_null(d);
        char what[64];
        snprintf(what, sizeof what, "worker %d's logits", i);
        tu_check_close(w->logits, d->logits, B * tp->classes, tol, what);
        snprintf(what, sizeof what, "worker %d's losses", i);
        tu_check_close(w->loss, d->loss, tp->steps, tol, what);
        check_net(tp->kind, w->net, w->model, n, d->net, tol);
        /* Megatron's regions give replicated tensors the same gradient on every member. */
        const tr_worker *first = NULL;
        for (int k = 0; k < workers; k++)
            if (tp->w[k].data == w->data && tp->w[k].model == 0) first = &tp->w[k];
        assert_non_null(first);
        rp_params *p = rp_resnet_params(w->net), *p0 = rp_resnet_params(first->net);
        for (int k = 0; k < rp_params_count(p); k++) {
            const rp_tensor *s = rp_params_at(p, k);
            if (split_axis(tp->kind, s->name) >= 0) continue;
            const rp_tensor *s0 = rp_params_find(p0, s->name);
            float *v = tu_read(s), *v0 = tu_read(s0);
            bool same = memcmp(v, v0, (size_t)s->numel * sizeof(float)) == 0;
            free(v0);
            free(v);
            if (!same)
                fail_msg("replicated \"%s\" differs between model workers %d and 0 of replica %d",
                         s->name, w->model, w->data);
        }
    }
}

/* ---- equivalence ------------------------------------------------------------------------------
 */

static tr_job dense_job, tp_job;

static void test_resnet20_tp2_equals_dense(void **state)
{
    (void)state;
    tr_run(&dense_job, RP_RESNET20, 8, 10, 1, 1, false, true, STEPS);
    tr_run(&tp_job, RP_RESNET20, 8, 10, 1, 2, false, true, STEPS);
    compare_jobs(&tp_job, &dense_job, 1e-5);
    /* Not trivially: the steps moved the parameters and the losses differ between steps. */
    assert_true(dense_job.w[0].loss[0] != dense_job.w[0].loss[STEPS - 1]);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
}

/*
 * One step from the default initialisation (every residual branch live from the start), at
 * 32x32 where batch statistics cover enough values for rounding to stay below 1e-5 (2e-6 to 3e-6
 * here): the logits, the loss and every tensor after the update.
 */
static void test_resnet20_tp2_first_step_equals_dense(void **state)
{
    (void)state;
    tr_run(&dense_job, RP_RESNET20, 32, 10, 1, 1, false, false, 1);
    tr_run(&tp_job, RP_RESNET20, 32, 10, 1, 2, false, false, 1);
    compare_jobs(&tp_job, &dense_job, 1e-5);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
}

static void test_resnet20_tp2_x_data2_equals_dense(void **state)
{
    (void)state;
    tr_run(&dense_job, RP_RESNET20, 8, 10, 2, 1, true, true, STEPS);
    tr_run(&tp_job, RP_RESNET20, 8, 10, 2, 2, true, true, STEPS);
    compare_jobs(&tp_job, &dense_job, 1e-5);
    /* The two replicas saw different images. */
    assert_true(tp_job.w[0].loss[0] != tp_job.w[2].loss[0]);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
}

/*
 * ResNet-50 with zero_init_residual. In float, a ResNet-50 training on 4 images at 32x32 (to
 * 128x128) is too sensitive for a 1e-5 comparison of anything computed in another order - the
 * dense network's own logits move by 5e-3 (1e-4 at 64 and 128) when one input element in 7 is
 * scaled by 1 + 1e-7, since batch statistics over so few values amplify rounding block after
 * block; ResNet-20 over 3 steps of lr 0.05 on 4 images drifts the same way (1e-5 to 3e-4 in
 * some runs). With each block's last gamma at 0 the blocks start as their shortcuts, so rounding
 * is not amplified through the residual branches, yet every branch is exercised: the gammas'
 * gradients are the branches' normalised outputs (the row convolution's all-reduce), and from
 * the second step on the branches' convolutions and batch norms train and change the loss. The
 * differences stay below 3e-6 (2e-7 for ResNet-20); 0.001 added to one member's shard of a
 * block's conv1, conv2 or bn1 (ResNet-20), or a 1e-3 change of one element of conv3 or bn2
 * (ResNet-50), fails the comparison.
 */
static void test_resnet50_tp2_equals_dense(void **state)
{
    (void)state;
    tr_run(&dense_job, RP_RESNET50, 32, 4, 1, 1, false, true, STEPS);
    tr_run(&tp_job, RP_RESNET50, 32, 4, 1, 2, false, true, STEPS);
    compare_jobs(&tp_job, &dense_job, 1e-5);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
}

/*
 * The gradients themselves, from the default initialisation (every residual branch live, so each
 * block's input gets both the fused batch norm's shortcut gradient and the column split's
 * all-reduced one), with and without recomputed batch norms: every parameter's gradient at T = 2
 * against the dense one's, relative to the dense tensor's largest. The two layouts round
 * differently (the row convolution's all-reduce adds the partial sums in another order), and
 * the gradients are far more sensitive to that than the values: a pre-activation within
 * rounding of 0 takes the other side of its ReLU, which moves every gradient below it by 1e-3
 * to 1e-2 (ResNet-20 on 32 images of 32x32; the dense network's own gradients move as much when
 * one input element changes by one ulp), and batch statistics over few values amplify rounding
 * block after block. So: batch norm on the running statistics (no amplification; 2e-6 for
 * ResNet-20, 4e-6 for ResNet-50) within 1e-5, and ResNet-20 on batch statistics, at a size
 * where no ReLU sits that close to 0 (16 images of 16x16: up to 7.5e-6), within 2e-5. A wrong
 * gradient reaching a block's input is off by far more.
 */
static void test_tp2_gradients_equal_dense(void **state)
{
    (void)state;
    struct {
        rp_resnet_kind kind;
        int batch, img, classes;
        bool training;
        double tol;
    } runs[3] = {{RP_RESNET20, 4, 8, 10, false, 1e-5},
                 {RP_RESNET50, 4, 64, 4, false, 1e-5},
                 {RP_RESNET20, 16, 16, 10, true, 2e-5}};
    for (int k = 0; k < 3; k++)
        for (int recompute = 0; recompute < 2; recompute++) {
            tr_run_grad(&dense_job, runs[k].kind, runs[k].batch, runs[k].img, runs[k].classes, 1,
                        runs[k].training, recompute);
            tr_run_grad(&tp_job, runs[k].kind, runs[k].batch, runs[k].img, runs[k].classes, 2,
                        runs[k].training, recompute);
            tu_check_close(tp_job.w[0].loss, dense_job.w[0].loss, 1, 1e-5, "loss");
            double worst = 0;
            check_grads(&tp_job, &dense_job, runs[k].tol, &worst);
            print_message("%s, %s batch norm, recompute %d: gradients within %.2g\n",
                          rp_resnet_kind_name(runs[k].kind), runs[k].training ? "training" : "eval",
                          recompute, worst);
            tr_destroy(&tp_job);
            tr_destroy(&dense_job);
        }
}

/* ---- dense tensors for checkpoints ----------------------------------------------------------- */

/*
 * On every worker of tp_job: gather the trained shards (values and momentum) into a dense
 * network and its fresh optimizer, then scatter them into a second tensor-parallel network of
 * another seed and its fresh optimizer.
 */
static rp_status tr_gather(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_resnet_config cfg = tr_config(j);
    RP_CHECK(rp_resnet_create(&w->dense, &cfg, SEED + 1));
    cfg.tp_comm = rp_replica_axis_comm(rep, RP_AXIS_MODEL);
    RP_CHECK(rp_resnet_create(&w->copy, &cfg, SEED + 2));
    RP_CHECK(rp_resnet_gather_dense(w->net, rp_resnet_params(w->dense)));
    RP_CHECK(rp_resnet_scatter_dense(w->copy, rp_resnet_params(w->dense)));
    rp_optim_config oc = rp_optim_config_default(); /* SGD, momentum 0.9, as the job's */
    RP_CHECK(rp_optimizer_create(&w->dense_opt, rp_resnet_params(w->dense), &oc));
    RP_CHECK(rp_optimizer_create(&w->copy_opt, rp_resnet_params(w->copy), &oc));
    RP_CHECK(rp_resnet_gather_state(w->net, w->opt, rp_resnet_params(w->dense), w->dense_opt));
    return rp_resnet_scatter_state(w->copy, w->copy_opt, rp_resnet_params(w->dense), w->dense_opt);
}

static void test_gather_scatter_round_trip(void **state)
{
    (void)state;
    tr_run(&dense_job, RP_RESNET20, 8, 10, 1, 1, false, true, STEPS);
    tr_run(&tp_job, RP_RESNET20, 8, 10, 1, 2, false, true, STEPS);
    if (rp_replicator_run(tp_job.r, tr_gather, &tp_job) != RP_OK)
        fail_msg("gather: %s", rp_last_error());
    int64_t n0, n1, dn, gn;
    float *dense_state = tu_optimizer_state(dense_job.w[0].opt, &dn);
    float *gathered[2];
    for (int i = 0; i < 2; i++) {
        tr_worker *w = &tp_job.w[i];
        /* The gathered tensors are the dense run's (within rounding) and the same on both. */
        check_net(RP_RESNET20, w->dense, 0, 1, dense_job.w[0].net, 1e-5);
        check_net(RP_RESNET20, w->dense, 0, 1, tp_job.w[0].dense, 0);
        gathered[i] = tu_optimizer_state(w->dense_opt, &gn);
        assert_int_equal(gn, dn);
        tu_check_close(gathered[i], dense_state, dn, 1e-5, "gathered momentum");
        assert_int_equal(rp_optimizer_steps(w->dense_opt), rp_optimizer_steps(w->opt));
        /* Scattered back into another network: this member's shards, bitwise. */
        check_net(RP_RESNET20, w->copy, 0, 1, w->net, 0);
        float *st = tu_optimizer_state(w->opt, &n0);
        float *copy_state = tu_optimizer_state(w->copy_opt, &n1);
        assert_int_equal(n1, n0);
        assert_memory_equal(copy_state, st, (size_t)n0 * sizeof(float));
        assert_int_equal(rp_optimizer_steps(w->copy_opt), rp_optimizer_steps(w->opt));
        free(copy_state);
        free(st);
    }
    /* The gathered momentum is not trivially zero. */
    double norm = 0;
    for (int64_t k = 0; k < dn; k++)
        norm += fabs(gathered[0][k]);
    assert_true(norm > 0);
    for (int i = 0; i < 2; i++)
        free(gathered[i]);
    free(dense_state);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
}

/* A dense network's tensors scattered into a tensor-parallel one are its shards; gathered, dense.
 */
static rp_comm *rt_comms[2];
static rp_resnet *rt_nets[2], *rt_dense, *rt_back[2];
static rp_status rt_status[2];

static void *rt_member(void *arg)
{
    int r = (int)(intptr_t)arg;
    rt_status[r] = rp_resnet_scatter_dense(rt_nets[r], rp_resnet_params(rt_dense));
    if (rt_status[r] == RP_OK)
        rt_status[r] = rp_resnet_gather_dense(rt_nets[r], rp_resnet_params(rt_back[r]));
    return NULL;
}

/*
 * A trainer's save, written against the public API: gather the shards and the momentum into a
 * dense network and optimizer, and let model worker 0 write the checkpoint of the dense model.
 */
static const char *save_path;

static rp_status tr_save(rp_replica *rep, void *arg)
{
    tr_job *j = arg;
    tr_worker *w = &j->w[rp_replica_local_index(rep)];
    rp_resnet_config cfg = tr_config(j);
    rp_resnet *dense = NULL;
    rp_optimizer *dopt = NULL;
    rp_checkpoint *ck = NULL;
    rp_optim_config oc = rp_optim_config_default();
    rp_status status = RP_OK;
    RP_TRY(rp_resnet_create(&dense, &cfg, SEED + 5));
    rp_params *dp = rp_resnet_params(dense);
    RP_TRY(rp_optimizer_create(&dopt, dp, &oc));
    RP_TRY(rp_resnet_gather_dense(w->net, dp));
    RP_TRY(rp_resnet_gather_state(w->net, w->opt, dp, dopt));
    if (w->model == 0) {
        RP_TRY(rp_checkpoint_create(&ck));
        RP_TRY(rp_checkpoint_add_params(ck, dp, "param/"));
        RP_TRY(rp_checkpoint_add_optimizer(ck, dopt, dp, "optim/"));
        RP_TRY(rp_checkpoint_save(ck, save_path));
    }
cleanup:
    rp_checkpoint_destroy(ck);
    rp_optimizer_destroy(dopt);
    rp_resnet_destroy(dense);
    return status;
}

/*
 * Checkpoints stay logical: a run at T = 2 saved after 3 steps resumes dense, a dense run resumes
 * at T = 2, and either takes the next step as the run it came from does (within 1e-5: the two
 * layouts' arithmetic differs in order). The checkpoint of T = 2 holds the dense network's names
 * and shapes.
 */
static tr_job resumed;

static void test_checkpoint_resumes_across_layouts(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("tp_resnet"), 0);
    char tp_path[512], dense_path[512];
    tu_tmp_path(tp_path, sizeof tp_path, "tp.ckpt");
    tu_tmp_path(dense_path, sizeof dense_path, "dense.ckpt");
    tr_run(&dense_job, RP_RESNET20, 8, 10, 1, 1, false, true, STEPS);
    tr_run(&tp_job, RP_RESNET20, 8, 10, 1, 2, false, true, STEPS);
    save_path = tp_path;
    if (rp_replicator_run(tp_job.r, tr_save, &tp_job) != RP_OK)
        fail_msg("save at T = 2: %s", rp_last_error());
    save_path = dense_path;
    if (rp_replicator_run(dense_job.r, tr_save, &dense_job) != RP_OK)
        fail_msg("save dense: %s", rp_last_error());
    /* The T = 2 checkpoint is the dense model's: its conv1 weight has all 16 output channels. */
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, tp_path), RP_OK);
    int ndim;
    int64_t shape[RP_MAX_DIMS];
    assert_non_null(rp_checkpoint_get_f32(ck, "param/stage1.block0.conv1.weight", &ndim, shape));
    assert_int_equal(shape[0], 16);
    assert_int_equal(shape[3], 16);
    rp_checkpoint_destroy(ck);
    /* T = 2 -> dense: the resumed dense run's next step against the T = 2 run's next step. */
    tr_run_from(&resumed, RP_RESNET20, 8, 10, 1, 1, false, true, 0, tp_path);
    tr_continue(&resumed);
    tr_continue(&tp_job);
    for (int m = 0; m < 2; m++)
        check_net(RP_RESNET20, tp_job.w[m].net, tp_job.w[m].model, 2, resumed.w[0].net, 1e-5);
    tu_check_close(resumed.w[0].loss, &tp_job.w[0].loss[STEPS], 1, 1e-5, "loss after resuming");
    tr_destroy(&resumed);
    /* dense -> T = 2. */
    tr_run_from(&resumed, RP_RESNET20, 8, 10, 1, 2, false, true, 0, dense_path);
    tr_continue(&resumed);
    tr_continue(&dense_job);
    for (int m = 0; m < 2; m++)
        check_net(RP_RESNET20, resumed.w[m].net, resumed.w[m].model, 2, dense_job.w[0].net, 1e-5);
    tu_check_close(resumed.w[0].loss, &dense_job.w[0].loss[STEPS], 1, 1e-5,
                   "loss after resuming at T = 2");
    tr_destroy(&resumed);
    tr_destroy(&tp_job);
    tr_destroy(&dense_job);
    tu_tmpdir_remove();
}

static void test_dense_to_tp_and_back(void **state)
{
    (void)state;
    assert_int_equal(rp_comm_threads_create(rt_comms, 2, NULL, 30.0), RP_OK);
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    assert_int_equal(rp_resnet_create(&rt_dense, &cfg, 3), RP_OK);
    /* Running statistics and gammas that are not their initial constants. */
    rp_params *dp = rp_resnet_params(rt_dense);
    for (int i = 0; i < rp_params_count(dp); i++) {
        rp_tensor *t = rp_params_at(dp, i);
        if (!strstr(t->name, ".bn")) continue;
        float *v = malloc((size_t)t->numel * sizeof(float));
        assert_non_null(v);
        tu_fill(v, t->numel, 50 + (uint64_t)i, 0.5f, 1.5f);
        assert_int_equal(rp_tensor_write(t, v, t->numel), RP_OK);
        free(v);
    }
    for (int r = 0; r < 2; r++) {
        rp_resnet_config tc = cfg;
        tc.tp_comm = rt_comms[r];
        assert_int_equal(rp_resnet_create(&rt_nets[r], &tc, 4), RP_OK);
        assert_int_equal(rp_resnet_tp_size(rt_nets[r]), 2);
        assert_int_equal(rp_resnet_create(&rt_back[r], &cfg, 5), RP_OK);
    }
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&th[r], NULL, rt_member, (void *)(intptr_t)r), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        if (rt_status[r] != RP_OK) fail_msg("member %d: %s", r, rp_last_error());
        check_net(RP_RESNET20, rt_nets[r], r, 2, rt_dense, 0);
        check_net(RP_RESNET20, rt_back[r], 0, 1, rt_dense, 0);
    }
    for (int r = 0; r < 2; r++) {
        rp_resnet_destroy(rt_back[r]);
        rp_resnet_destroy(rt_nets[r]);
        rp_comm_destroy(rt_comms[r]);
    }
    rp_resnet_destroy(rt_dense);
}

/* At step 0 the members' shards are the dense network's slices of the same seed, bitwise. */
static void test_initial_shards_are_dense_slices(void **state)
{
    (void)state;
    rp_resnet_kind kinds[2] = {RP_RESNET20, RP_RESNET50};
    for (int k = 0; k < 2; k++) {
        rp_comm *comms[2];
        assert_int_equal(rp_comm_threads_create(comms, 2, NULL, 30.0), RP_OK);
        rp_resnet_config cfg = rp_resnet_config_default(kinds[k]);
        cfg.classes = 4;
        rp_resnet *dense;
        assert_int_equal(rp_resnet_create(&dense, &cfg, SEED), RP_OK);
        for (int r = 0; r < 2; r++) {
            rp_resnet_config tc = cfg;
            tc.tp_comm = comms[r];
            rp_resnet *net;
            assert_int_equal(rp_resnet_create(&net, &tc, SEED), RP_OK);
            check_net(kinds[k], net, r, 2, dense, 0);
            rp_resnet_destroy(net);
            rp_comm_destroy(comms[r]);
        }
        rp_resnet_destroy(dense);
    }
}

/* ---- the dense limit and bad input ------------------------------------------------------------
 */

/* A 1-member tp_comm is the dense network: the same logits and gradients, bitwise. */
static void test_one_member_is_dense(void **state)
{
    (void)state;
    rp_comm *one;
    assert_int_equal(rp_comm_threads_create(&one, 1, NULL, 30.0), RP_OK);
    rp_resnet *nets[2];
    float *out[2];
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    float x[B * 8 * 8 * 3];
    tu_fill(x, B * 8 * 8 * 3, 5, -1, 1);
    int32_t labels[B] = {0, 3, 7, 9};
    for (int i = 0; i < 2; i++) {
        cfg.tp_comm = i ? one : NULL;
        assert_int_equal(rp_resnet_create(&nets[i], &cfg, SEED), RP_OK);
        assert_int_equal(rp_resnet_tp_size(nets[i]), 1);
        rp_tape *t;
        assert_int_equal(rp_tape_create(&t, 0), RP_OK);
        rp_tensor *logits =
            rp_resnet_forward(t, nets[i], rp_tensor_from(t, 4, (int[]){B, 8, 8, 3}, x), true);
        assert_int_equal(rp_backward(t, rp_softmax_cross_entropy(t, logits, labels)), RP_OK);
        rp_params *p = rp_resnet_params(nets[i]);
        int64_t n = rp_params_trainable_numel(p);
        out[i] = malloc((size_t)(n + logits->numel) * sizeof(float));
        assert_non_null(out[i]);
        assert_int_equal(rp_params_read_grads(p, out[i]), RP_OK);
        assert_int_equal(rp_tensor_read(logits, out[i] + n, logits->numel), RP_OK);
        rp_tape_destroy(t);
    }
    int64_t n = rp_params_trainable_numel(rp_resnet_params(nets[0])) + B * 10;
    assert_int_equal(rp_params_count(rp_resnet_params(nets[0])),
                     rp_params_count(rp_resnet_params(nets[1])));
    assert_memory_equal(out[0], out[1], (size_t)n * sizeof(float));
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        rp_resnet_destroy(nets[i]);
    }
    rp_comm_destroy(one);
}

/*
 * Widths that T does not divide are refused at create, naming the layer: ResNet-20's first
 * block's conv1 (16 channels over 3), ResNet-50's first split one, conv2 (64 over 3). A dense
 * list of another shape is refused by gather and scatter before any collective, naming the tensor.
 */
static void test_bad_sizes(void **state)
{
    (void)state;
    rp_comm *comms[3];
    assert_int_equal(rp_comm_threads_create(comms, 3, NULL, 30.0), RP_OK);
    rp_resnet *net = NULL;
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.tp_comm = comms[0];
    assert_int_equal(rp_resnet_create(&net, &cfg, SEED), RP_ERR_SHAPE);
    tu_assert_error_contains("stage1.block0.conv1");
    tu_assert_error_contains("16 output features do not split evenly over 3 members");
    cfg = rp_resnet_config_default(RP_RESNET50);
    cfg.tp_comm = comms[0];
    assert_int_equal(rp_resnet_create(&net, &cfg, SEED), RP_ERR_SHAPE);
    tu_assert_error_contains("stage1.block0.conv2");
    for (int r = 0; r < 3; r++)
        rp_comm_destroy(comms[r]);

    rp_comm *two[2];
    assert_int_equal(rp_comm_threads_create(two, 2, NULL, 30.0), RP_OK);
    cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.tp_comm = two[0];
    assert_int_equal(rp_resnet_create(&net, &cfg, SEED), RP_OK);
    rp_resnet *other, *wider;
    rp_resnet_config oc = rp_resnet_config_default(RP_RESNET20);
    oc.in_channels = 1; /* stem.conv0.weight [16,3,3,1] against [16,3,3,3] */
    assert_int_equal(rp_resnet_create(&other, &oc, SEED), RP_OK);
    assert_int_equal(rp_resnet_gather_dense(net, rp_resnet_params(other)), RP_ERR_SHAPE);
    tu_assert_error_contains("stem.conv0.weight");
    assert_int_equal(rp_resnet_scatter_dense(net, rp_resnet_params(other)), RP_ERR_SHAPE);
    tu_assert_error_contains("stem.conv0.weight");
    oc = rp_resnet_config_default(RP_RESNET18); /* other names and counts */
    assert_int_equal(rp_resnet_create(&wider, &oc, SEED), RP_OK);
    assert_int_equal(rp_resnet_scatter_dense(net, rp_resnet_params(wider)), RP_ERR_SHAPE);
    assert_int_equal(rp_resnet_gather_state(net, NULL, rp_resnet_params(other), NULL),
                     RP_ERR_INVALID);
    assert_int_equal(rp_resnet_gather_dense(NULL, rp_resnet_params(other)), RP_ERR_INVALID);
    rp_resnet_destroy(wider);
    rp_resnet_destroy(other);
    rp_resnet_destroy(net);
    for (int r = 0; r < 2; r++)
        rp_comm_destroy(two[r]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet20_tp2_equals_dense),
        cmocka_unit_test(test_resnet20_tp2_first_step_equals_dense),
        cmocka_unit_test(test_resnet20_tp2_x_data2_equals_dense),
        cmocka_unit_test(test_resnet50_tp2_equals_dense),
        cmocka_unit_test(test_tp2_gradients_equal_dense),
        cmocka_unit_test(test_gather_scatter_round_trip),
        cmocka_unit_test(test_checkpoint_resumes_across_layouts),
        cmocka_unit_test(test_dense_to_tp_and_back),
        cmocka_unit_test(test_initial_shards_are_dense_slices),
        cmocka_unit_test(test_one_member_is_dense),
        cmocka_unit_test(test_bad_sizes),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
