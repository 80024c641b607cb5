/*
 * diff_sendrecv.c - differentiable send and receive: one replica cut into two
 * pipeline stages (2 workers on its PIPE axis, threads), where the messages
 * are tape ops, so backward sends the gradients back by itself:
 *
 *   stage 0: h = relu(x W1^T + b1);  token = rp_tensor_send(h -> stage 1)
 *            rp_backward(token): RECEIVES dL/dh from stage 1, and goes on through stage 0
 *   stage 1: h = rp_tensor_recv(from stage 0);  loss = mse(h W2^T + b2, y)
 *            rp_backward(loss): reaches the receive, which SENDS dL/dh to stage 0
 *
 * (examples/mesh_pipeline.c writes the same messages by hand.) The same
 * network trained on one device, from the same initial values and batches,
 * must end with the same parameters.
 *
 *     ./diff_sendrecv
 *
 * Prints the loss every 50 steps and the largest difference from the
 * one-device run; exits 1 above 1e-5.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <replicator/replicator.h>

enum { IN = 4, HIDDEN = 16, BATCH = 32, STEPS = 200 };
enum { TAG_H = 1 }; /* the activation forward, its gradient backward: one tag */
static const float lr = 0.05f;

/* Batch k: x uniform in [-1,1)^IN, y = sin(x0) + x1 x2 - x3 / 2. Rows [first, first + n). */
static void make_rows(int64_t k, int first, int n, float *x, float *y)
{
    rp_rng_fill_uniform(41, ((uint64_t)k * BATCH + (uint64_t)first) * IN, x, (size_t)n * IN, -1.0f,
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
    double loss;
};

static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    if (rp_replica_axis_size(rep, RP_AXIS_PIPE) != 2)
        return RP_ERROR(RP_ERR_INVALID, "the pipeline needs 2 workers on the pipe axis, not %d",
                        rp_replica_axis_size(rep, RP_AXIS_PIPE));
    struct stage *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "stage");
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->params));
    if (rp_replica_coord(rep, RP_AXIS_PIPE) == 0)
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc1", IN, HIDDEN, true, true));
    else
        RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc2", HIDDEN, 1, true, false));
    return rp_params_finalize(s->params, 7); /* the values depend on the seed and the names only */
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
    rp_comm *pipe = rp_replica_axis_comm(rep, RP_AXIS_PIPE); /* rank = the stage */
    rp_tape *t = rp_replica_tape(rep);
    float x[BATCH * IN], y[BATCH];
    make_rows(k, 0, BATCH, x, y);
    if (rp_replica_coord(rep, RP_AXIS_PIPE) == 0) {
        rp_tensor *h = rp_relu(
            t, rp_linear_layer_forward(t, &s->fc, rp_tensor_from(t, 2, (int[]){BATCH, IN}, x)));
        rp_tensor *token = h ? rp_tensor_send(t, pipe, h, 1, TAG_H) : NULL;
        if (!token) return rp_last_status();
        RP_CHECK(rp_backward(t, token)); /* receives dL/dh, then back-propagates it */
    } else {
        rp_tensor *h = rp_tensor_recv(t, pipe, 2, (int[]){BATCH, HIDDEN}, 0, TAG_H);
        rp_tensor *l = h ? rp_mse(t, rp_linear_layer_forward(t, &s->fc, h),
                                  rp_tensor_from(t, 2, (int[]){BATCH, 1}, y))
                         : NULL;
        if (!l) return rp_last_status();
        RP_CHECK(rp_backward(t, l)); /* sends dL/dh back on the way */
        s->loss = rp_item(l);
    }
    RP_CHECK(update(s->params));
    return RP_OK;
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

/* The same network on one device: both layers in one list, the same updates, in the run's
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
    /* One role of 1 replica of 2 workers on the pipe axis. */
    cfg.nroles = 1;
    cfg.roles[0] = rp_role_make("replica", 1, 1);
    cfg.roles[0].pipe = 2;
    RP_TRY(one_device(cfg.precision, &ref));
    RP_TRY(rp_replicator_create(&r, &cfg));
    RP_TRY(rp_replicator_run(r, build, NULL));
    for (int64_t k = 0; k < STEPS; k++) {
        RP_TRY(rp_replicator_run(r, pipeline_step, &k));
        if ((k + 1) % 50 == 0) {
            /* The last stage holds the loss. */
            double loss = 0;
            for (int i = 0; i < rp_replicator_local_replicas(r); i++) {
                rp_replica *rep = rp_replicator_replica(r, i);
                if (rp_replica_coord(rep, RP_AXIS_PIPE) == 1)
                    loss = ((struct stage *)rp_replica_user(rep))->loss;
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
        printf("2 stages, rp_tensor_send/recv: after %d steps the parameters match one device's "
               "(max |difference| %.2g)\n",
               STEPS, d);
    else
        status = RP_ERROR(RP_ERR_NUMERIC, "the workers differ from one device by %g", d);
cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    rp_params_destroy(ref);
    if (status != RP_OK) fprintf(stderr, "diff_sendrecv: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
