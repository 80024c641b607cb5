/*
 * model_parallel.c - a two-stage model-parallel toy: the two layers of one
 * network live on two workers (the 2 replicas of a threads replicator), and
 * activations and their gradients travel between them with point-to-point
 * messages (rp_comm_send / rp_comm_recv):
 *
 *   stage 0 (replica 0): h = relu(x W1^T + b1)          send h     -> stage 1
 *   stage 1 (replica 1): loss = mse(h W2^T + b2, y)     send dL/dh -> stage 0
 *   stage 0:             back-propagates dL/dh from h
 *
 * Each stage updates only its own layer. The same network trained on one
 * device, from the same initial values and batches, must end with the same
 * parameters: the pipeline computes the same function and the same gradients.
 *
 *     ./model_parallel
 *
 * Prints the loss every 50 steps and the largest difference from the
 * one-device run; exits 1 above 1e-5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <replicator/replicator.h>

enum { IN = 4, HIDDEN = 16, BATCH = 32, STEPS = 200 };
enum { TAG_ACTIVATION = 1, TAG_GRADIENT = 2 };
static const float lr = 0.05f;

/* Batch k: x uniform in [-1,1)^IN, y = sin(x0) + x1 x2 - x3 / 2, a target a ReLU layer can fit. */
static void make_batch(int64_t k, float *x, float *y)
{
    rp_rng_fill_uniform(21, (uint64_t)k * BATCH * IN, x, BATCH * IN, -1.0f, 1.0f);
    for (int i = 0; i < BATCH; i++) {
        const float *r = x + i * IN;
        y[i] = sinf(r[0]) + r[1] * r[2] - 0.5f * r[3];
    }
}

/*
 * A layer's parameters by name: "fc1" on stage 0, "fc2" on stage 1, both in the one-device
 * model. Initial values depend only on the seed and the name, so each stage starts where the
 * one-device model does.
 */
struct stage {
    rp_params *params;
    rp_linear_layer fc;
};

static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    if (rp_replica_count(rep) != 2)
        return RP_ERROR(RP_ERR_INVALID, "two stages need 2 replicas, not %d",
                        rp_replica_count(rep));
    struct stage *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "stage");
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->params));
    if (rp_replica_id(rep) == 0)
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc1", IN, HIDDEN, true, true));
    else
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc2", HIDDEN, 1, true, false));
    return rp_params_finalize(s->params, 7);
}

/*
 * Plain SGD on this stage's own parameters. The stages hold different layers, so the replica
 * optimizer (which keeps replicas identical) is not the tool here; rp_optim_apply is the
 * update rule on host arrays the caller owns. The values and gradients live in the kernel
 * table's storage: they are copied out, and the updated values back.
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
    rp_comm *c = rp_replica_comm(rep);
    rp_tape *t = rp_replica_tape(rep);
    float x[BATCH * IN], y[BATCH];
    make_batch(k, x, y);
    double loss = 0;
    if (rp_replica_id(rep) == 0) {
        rp_tensor *h = rp_relu(
            t, rp_linear_layer_forward(t, &s->fc, rp_tensor_from(t, 2, (int[]){BATCH, IN}, x)));
        if (!h) return rp_last_status();
        /* Tensor values live in the kernel table's storage: messages go through host copies. */
        float hv[BATCH * HIDDEN];
        RP_CHECK(rp_tensor_read(h, hv, BATCH * HIDDEN));
        RP_CHECK(rp_comm_send(c, hv, BATCH * HIDDEN, RP_F32, 1, TAG_ACTIVATION));
        float dh[BATCH * HIDDEN];
        RP_CHECK(rp_comm_recv(c, dh, BATCH * HIDDEN, RP_F32, 1, TAG_GRADIENT));
        /* Back-propagate stage 1's dL/dh from h: the gradient of sum(h * dh), dh held constant,
           is exactly dh at h (rp_backward_from does the same in one call, where it exists). */
        rp_tensor *seed = rp_tensor_from(t, 2, (int[]){BATCH, HIDDEN}, dh);
        rp_tensor *through = rp_sum(t, rp_mul(t, h, seed));
        if (!through) return rp_last_status();
        RP_CHECK(rp_backward(t, through));
    } else {
        float hv[BATCH * HIDDEN];
        RP_CHECK(rp_comm_recv(c, hv, BATCH * HIDDEN, RP_F32, 0, TAG_ACTIVATION));
        rp_tensor *h = rp_tensor_from(t, 2, (int[]){BATCH, HIDDEN}, hv);
        if (!h) return rp_last_status();
        rp_tensor_set_requires_grad(h, true); /* a leaf here, but its gradient goes back */
        rp_tensor *l = rp_mse(t, rp_linear_layer_forward(t, &s->fc, h),
                              rp_tensor_from(t, 2, (int[]){BATCH, 1}, y));
        if (!l) return rp_last_status();
        RP_CHECK(rp_backward(t, l));
        RP_CHECK(rp_tensor_read_grad(h, hv, h->numel));
        RP_CHECK(rp_comm_send(c, hv, BATCH * HIDDEN, RP_F32, 0, TAG_GRADIENT));
        loss = rp_item(l);
    }
    RP_CHECK(update(s->params));
    return rp_replica_report(rep, "loss", loss, RP_SUM); /* stage 1's (stage 0 adds 0) */
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    struct stage *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_params_destroy(s->params);
    free(s);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

/* The same network on one device: both layers in one parameter list, the same updates, in the run's
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
        make_batch(k, x, y);
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
    cfg.replicas = 2;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    RP_TRY(one_device(cfg.precision, &ref));
    RP_TRY(rp_replicator_create(&r, &cfg));
    RP_TRY(rp_replicator_run(r, build, NULL));
    for (int64_t k = 0; k < STEPS; k++) {
        RP_TRY(rp_replicator_run(r, pipeline_step, &k));
        double loss;
        RP_TRY(rp_replicator_result(r, "loss", &loss));
        if ((k + 1) % 50 == 0) printf("step %lld  loss %.5f\n", (long long)(k + 1), loss);
    }
    double d = 0;
    for (int i = 0; i < 2; i++) {
        const struct stage *s = rp_replica_user(rp_replicator_replica(r, i));
        d = fmax(d, max_diff(s->params, ref));
    }
    if (d <= 1e-5)
        printf(
            "2 stages: after %d steps the parameters match one replica's (max |difference| %.2g)\n",
            STEPS, d);
    else
        status = RP_ERROR(RP_ERR_NUMERIC, "the stages differ from one replica by %g", d);
cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    rp_params_destroy(ref);
    if (status != RP_OK) fprintf(stderr, "model_parallel: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
