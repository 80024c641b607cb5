/*
 * mesh_pipeline.c - the mesh's axes: 2 replicas, each a two-stage pipeline
 * written by hand on its MODEL axis, 4 workers in all (threads):
 *
 *               model 0 (stage 0)      model 1 (stage 1)
 *   replica 0   worker 0  --- h ---->  worker 1     loss on the replica's half of the batch
 *                         <-- dL/dh --
 *   replica 1   worker 2  --- h ---->  worker 3
 *                         <-- dL/dh --
 *
 * A stage sends its activation to the next one, and the gradient comes back,
 * with rp_comm_send/recv on rp_replica_axis_comm(rep, RP_AXIS_MODEL) (rank =
 * the stage). Then each stage averages its layer's gradient with the same
 * stage of the other replica: rp_all_reduce() is on the DATA axis, the
 * workers with the same model coordinate in the other replicas, never the
 * other stage of its own replica.
 *
 *   stage 0: h = relu(x W1^T + b1)
 *   stage 1: loss = mse(h W2^T + b2, y)
 *
 * The same network trained on one device on the whole batch, from the same
 * initial values, must end with the same parameters.
 *
 *     ./mesh_pipeline
 *
 * Prints the loss every 50 steps and the largest difference from the
 * one-device run; exits 1 above 1e-5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <replicator/replicator.h>

enum { IN = 4, HIDDEN = 16, REPLICAS = 2, BATCH = 64, STEPS = 200 };
enum { TAG_ACTIVATION = 1, TAG_GRADIENT = 2 };
enum { SHARD = BATCH / REPLICAS };
static const float lr = 0.05f;

/* Batch k: x uniform in [-1,1)^IN, y = sin(x0) + x1 x2 - x3 / 2. Rows [first, first + n). */
static void make_rows(int64_t k, int first, int n, float *x, float *y)
{
    rp_rng_fill_uniform(31, ((uint64_t)k * BATCH + (uint64_t)first) * IN, x, (size_t)n * IN, -1.0f,
                        1.0f);
    for (int i = 0; i < n; i++) {
        const float *r = x + i * IN;
        y[i] = sinf(r[0]) + r[1] * r[2] - 0.5f * r[3];
    }
}

/* A worker: its stage's layer ("fc1" or "fc2", as in the one-device model) and the last loss. */
struct stage {
    rp_params *params;
    rp_linear_layer fc;
    float *grads; /* the layer's gradients on the host, for the all-reduce */
    double loss;
};

static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    if (rp_replica_axis_size(rep, RP_AXIS_MODEL) != 2)
        return RP_ERROR(RP_ERR_INVALID, "the pipeline needs 2 workers on the model axis, not %d",
                        rp_replica_axis_size(rep, RP_AXIS_MODEL));
    struct stage *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "stage");
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->params));
    if (rp_replica_coord(rep, RP_AXIS_MODEL) == 0)
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc1", IN, HIDDEN, true, true));
    else
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc2", HIDDEN, 1, true, false));
    RP_CHECK(
        rp_params_finalize(s->params, 7)); /* the values depend on the seed and the names only */
    s->grads = malloc((size_t)rp_params_trainable_numel(s->params) * sizeof(float));
    return s->grads ? RP_OK : RP_ERROR(RP_ERR_NOMEM, "stage gradients");
}

/*
 * Plain SGD on a parameter block (the stages hold different layers).
 * The values and gradients live in the kernel table's storage and rp_optim_apply is the rule on
 * host arrays: they are copied out, and the updated values back.
 */
static rp_status update(rp_params *p)
{
    /* The whole one-device model at most: fc1's weight and bias, fc2's. */
    float w[(IN + 1) * HIDDEN + HIDDEN + 1], g[(IN + 1) * HIDDEN + HIDDEN + 1];
    int64_t n = rp_params_trainable_numel(p);
    if (rp_params_numel(p) > (int64_t)(sizeof w / sizeof w[0]))
        return RP_ERROR(RP_ERR_INVALID, "update: %lld values", (long long)rp_params_numel(p));
    rp_optim_config sgd = rp_optim_config_default();
    sgd.momentum = 0.0f;
    RP_CHECK(rp_params_read_values(p, w));
    RP_CHECK(rp_params_read_grads(p, g));
    rp_optim_apply(&sgd, w, g, NULL, n, lr, 1);
    RP_CHECK(rp_params_write_values(p, w));
    rp_params_zero_grad(p);
    return RP_OK;
}

static rp_status pipeline_step(rp_replica *rep, void *arg)
{
    int64_t k = *(const int64_t *)arg;
    struct stage *s = rp_replica_user(rep);
    rp_comm *model = rp_replica_axis_comm(rep, RP_AXIS_MODEL); /* this replica's two stages */
    rp_tape *t = rp_replica_tape(rep);
    float x[SHARD * IN], y[SHARD];
    make_rows(k, rp_replica_id(rep) * SHARD, SHARD, x, y); /* this replica's half of batch k */
    if (rp_replica_coord(rep, RP_AXIS_MODEL) == 0) {
        rp_tensor *h = rp_relu(
            t, rp_linear_layer_forward(t, &s->fc, rp_tensor_from(t, 2, (int[]){SHARD, IN}, x)));
        if (!h) return rp_last_status();
        /* Tensor values live in the kernel table's storage: messages go through host copies. */
        float hv[SHARD * HIDDEN];
        RP_CHECK(rp_tensor_read(h, hv, SHARD * HIDDEN));
        RP_CHECK(rp_comm_send(model, hv, SHARD * HIDDEN, RP_F32, 1, TAG_ACTIVATION));
        float dh[SHARD * HIDDEN];
        RP_CHECK(rp_comm_recv(model, dh, SHARD * HIDDEN, RP_F32, 1, TAG_GRADIENT));
        RP_CHECK(rp_backward_from(t, h, dh)); /* stage 1's dL/dh, back through this stage */
    } else {
        float hv[SHARD * HIDDEN];
        RP_CHECK(rp_comm_recv(model, hv, SHARD * HIDDEN, RP_F32, 0, TAG_ACTIVATION));
        rp_tensor *h = rp_tensor_from(t, 2, (int[]){SHARD, HIDDEN}, hv);
        if (!h) return rp_last_status();
        rp_tensor_set_requires_grad(h, true); /* a leaf here, but its gradient goes back */
        rp_tensor *l = rp_mse(t, rp_linear_layer_forward(t, &s->fc, h),
                              rp_tensor_from(t, 2, (int[]){SHARD, 1}, y));
        if (!l) return rp_last_status();
        RP_CHECK(rp_backward(t, l));
        RP_CHECK(rp_tensor_read_grad(h, hv, h->numel));
        RP_CHECK(rp_comm_send(model, hv, SHARD * HIDDEN, RP_F32, 0, TAG_GRADIENT));
        s->loss = rp_item(l);
    }
    /* The data axis: this stage's gradient averaged with the same stage of the other replica,
       which is the gradient of the mean loss over the whole batch. */
    RP_CHECK(rp_params_read_grads(s->params, s->grads));
    RP_CHECK(rp_all_reduce(rep, s->grads, s->grads, rp_params_trainable_numel(s->params), RP_F32,
                           RP_MEAN));
    RP_CHECK(rp_params_write_grads(s->params, s->grads));
    RP_CHECK(update(s->params));
    return RP_OK;
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    struct stage *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_params_destroy(s->params);
    free(s->grads);
    free(s);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

/* The same network on one device, on the whole batch: both layers in one list, in the run's
 * precision. */
static rp_status one_device(rp_dtype precision, rp_params **out)
{
    rp_status status = RP_OK;
    rp_params *p = NULL;
    rp_tape *t = NULL;
    rp_linear_layer fc1, fc2;
    RP_TRY(rp_params_create(&p));
    RP_TRY(rp_linear_layer_init(&fc1, p, "fc1", IN, HIDDEN, true, true));
    RP_TRY(rp_linear_layer_init(&fc2, p, "fc2", HIDDEN, 1, true, false));
    RP_TRY(rp_params_finalize(p, 7));
    RP_TRY(rp_tape_create(&t, 0));
    RP_TRY(rp_tape_set_precision(t, rp_precision_policy_make(precision))); /* as the replicas */
    for (int64_t k = 0; k < STEPS; k++) {
        float x[BATCH * IN], y[BATCH];
        make_rows(k, 0, BATCH, x, y);
        rp_tape_reset(t);
        rp_tensor *h = rp_relu(
            t, rp_linear_layer_forward(t, &fc1, rp_tensor_from(t, 2, (int[]){BATCH, IN}, x)));
        rp_tensor *l = rp_mse(t, rp_linear_layer_forward(t, &fc2, h),
                              rp_tensor_from(t, 2, (int[]){BATCH, 1}, y));
        if (!l) RP_TRY(rp_last_status());
        RP_TRY(rp_backward(t, l));
        RP_TRY(update(p));
    }
cleanup:
    rp_tape_destroy(t);
    if (status != RP_OK) rp_params_destroy(p);
    *out = status == RP_OK ? p : NULL;
    return status;
}

/* Largest |a - b| between a stage's parameters and the same-named ones of the reference. */
static double max_diff(const rp_params *stage, const rp_params *ref)
{
    double d = 0;
    for (int i = 0; i < rp_params_trainable_count(stage); i++) {
        const rp_tensor *a = rp_params_at(stage, i), *b = rp_params_find(ref, a->name);
        if (!b || b->numel != a->numel) return INFINITY;
        float va[IN * HIDDEN], vb[IN * HIDDEN]; /* the largest tensor: fc1's weight */
        if (a->numel > IN * HIDDEN || rp_tensor_read(a, va, a->numel) != RP_OK ||
            rp_tensor_read(b, vb, b->numel) != RP_OK)
            return INFINITY;
        for (int64_t j = 0; j < a->numel; j++)
            d = fmax(d, fabs(va[j] - vb[j]));
    }
    return d;
}

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    rp_params *ref = NULL;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.threads_per_replica = 1;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    /* One role of 2 replicas, each 2 workers on the model axis. */
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", REPLICAS, 2);
    RP_TRY(one_device(cfg.precision, &ref));
    RP_TRY(rp_replicator_create(&r, &cfg));
    RP_TRY(rp_replicator_run(r, build, NULL));
    for (int64_t k = 0; k < STEPS; k++) {
        RP_TRY(rp_replicator_run(r, pipeline_step, &k));
        if ((k + 1) % 50 == 0) {
            /* Each last stage holds its replica's loss: the mean over this process's. */
            double loss = 0;
            for (int i = 0; i < rp_replicator_local_replicas(r); i++) {
                rp_replica *rep = rp_replicator_replica(r, i);
                if (rp_replica_coord(rep, RP_AXIS_MODEL) == 1)
                    loss += ((struct stage *)rp_replica_user(rep))->loss / REPLICAS;
            }
            printf("step %lld  loss %.5f\n", (long long)(k + 1), loss);
        }
    }
    double d = 0;
    for (int i = 0; i < rp_replicator_local_replicas(r); i++) {
        const struct stage *s = rp_replica_user(rp_replicator_replica(r, i));
        d = fmax(d, max_diff(s->params, ref));
    }
    if (d <= 1e-5)
        printf("%d replicas x 2 stages: after %d steps every worker's layer matches one device's "
               "(max |difference| %.2g)\n",
               REPLICAS, STEPS, d);
    else
        status = RP_ERROR(RP_ERR_NUMERIC, "the workers differ from one device by %g", d);
cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    rp_params_destroy(ref);
    if (status != RP_OK) fprintf(stderr, "mesh_pipeline: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
