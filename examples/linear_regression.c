/*
 * linear_regression.c - fits y = x.w + b on 4 replicas (threads of this
 * process), synchronously: each replica takes its quarter of every global
 * batch, the runtime averages the gradients, and every replica applies the
 * same update. At the end the weights must match the ones that generated the
 * data, and the 4 replicas must hold bitwise the same values.
 *
 *     ./linear_regression [--replicas N] [other runtime options]
 *
 * Prints the loss every 100 steps and the largest error in w and b; exits 1 if
 * an error exceeds 0.01 or the replicas disagree. Needs no MPI.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <replicator/replicator.h>

enum { DIM = 8, GLOBAL_BATCH = 64, STEPS = 400 };
static const float true_w[DIM] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.25f, 0.75f, -2.0f};
static const float true_b = 0.3f;

/* One replica's model: w [1,DIM] and b [1], and the optimizer that keeps them in sync. */
struct replica_state {
    rp_params *params;
    rp_tensor *w, *b;
    rp_optimizer *opt;
};

static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "replica state");
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->params));
    rp_init zeros = {.kind = RP_INIT_ZEROS};
    s->w = rp_params_add(s->params, "w", 2, (int[]){1, DIM}, zeros, true);
    s->b = rp_params_add(s->params, "b", 1, (int[]){1}, zeros, true);
    if (!s->w || !s->b) return rp_last_status();
    RP_CHECK(rp_params_finalize(s->params, 1));
    rp_optim_config oc = rp_optim_config_default(); /* SGD, momentum 0.9 */
    return rp_replica_optimizer_create(rep, &s->opt, s->params, &oc);
}

/*
 * Sample g of the whole run: x uniform in [-1,1)^DIM, y = x.w + b + noise. Drawn from
 * element-addressed streams, so a sample is the same whichever replica draws it.
 */
static void sample(int64_t g, float *x, float *y)
{
    rp_rng_fill_uniform(11, (uint64_t)g * DIM, x, DIM, -1.0f, 1.0f);
    float noise;
    rp_rng_fill_normal(12, (uint64_t)g, &noise, 1, 0.0f, 0.01f);
    *y = true_b + noise;
    for (int j = 0; j < DIM; j++)
        *y += x[j] * true_w[j];
}

static rp_status step(rp_replica *rep, void *arg)
{
    int64_t k = *(const int64_t *)arg;
    struct replica_state *s = rp_replica_user(rep);
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, GLOBAL_BATCH, &in));
    int n = in.per_replica_batch;
    float x[GLOBAL_BATCH * DIM], y[GLOBAL_BATCH];
    for (int i = 0; i < n; i++)
        sample(k * GLOBAL_BATCH + (int64_t)in.replica * n + i, x + i * DIM, y + i);

    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *xt = rp_tensor_from(t, 2, (int[]){n, DIM}, x);
    rp_tensor *yt = rp_tensor_from(t, 2, (int[]){n, 1}, y);
    rp_tensor *loss = rp_mse(t, rp_linear(t, xt, s->w, s->b), yt);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, 0.1f)); /* the mean gradient over the replicas */
    return rp_replica_report(rep, "loss", rp_item(loss), RP_MEAN);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->params);
    free(s);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    rp_config cfg = rp_config_default();
    cfg.replicas = 4;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    RP_TRY(rp_replicator_create(&r, &cfg));
    RP_TRY(rp_replicator_run(r, build, NULL));
    for (int64_t k = 0; k < STEPS; k++) {
        RP_TRY(rp_replicator_run(r, step, &k));
        if ((k + 1) % 100 == 0) {
            double loss;
            RP_TRY(rp_replicator_result(r, "loss", &loss));
            printf("step %lld  loss %.6f\n", (long long)(k + 1), loss);
        }
    }

    /* Between runs the replicas' state can be read from here (threads backend), through the
       public reads: the values live in the kernel table's storage. */
    const struct replica_state *s0 = rp_replica_user(rp_replicator_replica(r, 0));
    float w0[DIM], wi[DIM];
    RP_TRY(rp_tensor_read(s0->w, w0, DIM));
    double err = fabs(rp_item(s0->b) - true_b);
    for (int j = 0; j < DIM; j++)
        err = fmax(err, fabs(w0[j] - true_w[j]));
    int same = 1;
    for (int i = 1; i < rp_replicator_local_replicas(r); i++) {
        const struct replica_state *si = rp_replica_user(rp_replicator_replica(r, i));
        RP_TRY(rp_tensor_read(si->w, wi, DIM));
        same &= memcmp(wi, w0, DIM * sizeof(float)) == 0 && rp_item(si->b) == rp_item(s0->b);
    }
    printf("replicas %d  max |error| in w, b: %.5f  replicas identical: %s\n",
           rp_replicator_replicas(r), err, same ? "yes" : "no");
    if (err > 0.01 || !same)
        status = RP_ERROR(RP_ERR_NUMERIC, "the fit is off by %g (identical: %d)", err, same);

cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    if (status != RP_OK) fprintf(stderr, "linear_regression: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
