/*
 * mlp.c - the README's example: a two-layer perceptron learns to tell four
 * Gaussian clusters apart, trained synchronously on N replicas (threads of
 * this process; MPI processes under mpirun). The model, the step and the
 * loop are the same code for one replica and for many.
 *
 *     ./mlp [--replicas N] [other runtime options: rp_config_from_args]
 *
 * (--precision bf16, one of them, multiplies the linear layers in bf16 with
 * f32 master weights; examples/trainer_model.c sets the policy by hand.)
 *
 * Prints the loss every 50 steps and the accuracy on held-out points; exits 1
 * below 95%.
 */
#include <stdio.h>
#include <stdlib.h>

#include <replicator/replicator.h>

enum { IN = 2, HIDDEN = 32, CLASSES = 4, GLOBAL_BATCH = 128, STEPS = 200, TEST_BATCH = 1024 };

/*
 * Point g of a stream: class g % 4, around the corner (+-1.5, +-1.5) of its
 * class, with standard deviation 0.5. Element-addressed random numbers make a
 * point the same whichever replica draws it.
 */
static void make_points(uint64_t stream, int64_t first, int n, float *x, int32_t *y)
{
    rp_rng_fill_normal(stream, (uint64_t)first * IN, x, (size_t)n * IN, 0.0f, 0.5f);
    for (int i = 0; i < n; i++) {
        int c = (int)((first + i) % CLASSES);
        y[i] = c;
        x[i * IN + 0] += c & 1 ? 1.5f : -1.5f;
        x[i * IN + 1] += c & 2 ? 1.5f : -1.5f;
    }
}

/* This replica's shard of global batch `k` (k < 0: of the test set). */
static void make_batch(int64_t k, const rp_input_context *in, float *x, int32_t *y)
{
    int64_t first =
        (k < 0 ? 0 : k * in->global_batch) + (int64_t)in->replica * in->per_replica_batch;
    make_points(k < 0 ? 2 : 1, first, in->per_replica_batch, x, y);
}

static rp_status evaluate(rp_replica *rep, void *arg); /* test accuracy (after main) */
static rp_status teardown(rp_replica *rep, void *arg); /* frees each replica's model */

/* [readme] */
/* One replica's model and optimizer. */
struct model {
    rp_params *params;
    rp_linear_layer fc1, fc2;
    rp_optimizer *opt;
};

/* Run once on every replica: its model, and the optimizer that keeps the replicas in sync. */
static rp_status build(rp_replica *rep, void *arg)
{
    (void)arg;
    struct model *m = calloc(1, sizeof *m);
    if (!m) return RP_ERROR(RP_ERR_NOMEM, "model");
    rp_replica_set_user(rep, m);
    RP_CHECK(rp_params_create(&m->params));
    RP_CHECK(rp_linear_layer_init(&m->fc1, m->params, "fc1", IN, HIDDEN, true, true));
    RP_CHECK(rp_linear_layer_init(&m->fc2, m->params, "fc2", HIDDEN, CLASSES, true, false));
    RP_CHECK(rp_params_finalize(m->params, /*seed*/ 1)); /* one block of values, one of gradients */
    rp_optim_config oc = rp_optim_config_default();      /* SGD, momentum 0.9 */
    /* Collective: replica 0's initial values are broadcast to every replica. */
    return rp_replica_optimizer_create(rep, &m->opt, m->params, &oc);
}

static rp_tensor *forward(rp_tape *t, const struct model *m, rp_tensor *x)
{
    return rp_linear_layer_forward(t, &m->fc2, rp_relu(t, rp_linear_layer_forward(t, &m->fc1, x)));
}

/* One training step, written once, as if for one device. */
static rp_status step(rp_replica *rep, void *arg)
{
    struct model *m = rp_replica_user(rep);
    rp_input_context in; /* this replica's share of the batch */
    RP_CHECK(rp_replica_input_context(rep, GLOBAL_BATCH, &in));
    float x[GLOBAL_BATCH * IN];
    int32_t y[GLOBAL_BATCH];
    make_batch(*(const int64_t *)arg, &in, x, y);
    rp_tape *t = rp_replica_tape(rep); /* reset before every run */
    rp_tensor *xt = rp_tensor_from(t, 2, (int[]){in.per_replica_batch, IN}, x);
    rp_tensor *loss = rp_softmax_cross_entropy(t, forward(t, m, xt), y);
    if (!loss) return rp_last_status();         /* NULL flows through; one check */
    RP_CHECK(rp_backward(t, loss));             /* gradients all-reduced meanwhile */
    RP_CHECK(rp_optimizer_step(m->opt, 0.05f)); /* the same update on every replica */
    return rp_replica_report(rep, "loss", rp_item(loss), RP_MEAN);
}

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    rp_config cfg = rp_config_default();
    cfg.replicas = 2;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv)); /* --replicas 4, --backend mpi, ... */
    RP_TRY(rp_replicator_create(&r, &cfg));
    bool lead = rp_replicator_is_leader(r); /* prints (once per job, whatever the layout) */
    RP_TRY(rp_replicator_run(r, build, NULL));
    for (int64_t k = 0; k < STEPS; k++) {
        RP_TRY(rp_replicator_run(r, step, &k)); /* every replica, its own shard */
        double loss;
        RP_TRY(rp_replicator_result(r, "loss", &loss)); /* reduced over the replicas */
        if (lead && (k + 1) % 50 == 0) printf("step %lld  loss %.4f\n", (long long)(k + 1), loss);
    }
    double accuracy;
    RP_TRY(rp_replicator_run(r, evaluate, NULL));
    RP_TRY(rp_replicator_result(r, "accuracy", &accuracy));
    if (lead) printf("replicas %d  test accuracy %.3f\n", rp_replicator_replicas(r), accuracy);
    if (accuracy < 0.95) status = RP_ERROR(RP_ERR_NUMERIC, "accuracy %.3f is below 0.95", accuracy);
cleanup:
    if (r) {
        rp_status down = rp_replicator_run(r, teardown, NULL); /* free each replica's model */
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    if (status != RP_OK) fprintf(stderr, "mlp: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
/* [readme] */

/* Accuracy on this replica's share of the test points, averaged over the replicas. */
static rp_status evaluate(rp_replica *rep, void *arg)
{
    (void)arg;
    struct model *m = rp_replica_user(rep);
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, TEST_BATCH, &in));
    float x[TEST_BATCH * IN];
    int32_t y[TEST_BATCH];
    make_batch(-1, &in, x, y);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_set_recording(t, false); /* no gradients: nothing is saved for backward */
    rp_tensor *logits = forward(t, m, rp_tensor_from(t, 2, (int[]){in.per_replica_batch, IN}, x));
    rp_tape_set_recording(t, true);
    if (!logits) return rp_last_status();
    /* Values live in the kernel table's storage: the scores are read to the host. */
    float v[TEST_BATCH * CLASSES];
    RP_CHECK(rp_tensor_read(logits, v, (int64_t)in.per_replica_batch * CLASSES));
    int correct = 0;
    for (int i = 0; i < in.per_replica_batch; i++) {
        const float *row = v + i * CLASSES;
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            best = row[c] > row[best] ? c : best;
        correct += best == y[i];
    }
    return rp_replica_report(rep, "accuracy", (double)correct / in.per_replica_batch, RP_MEAN);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    struct model *m = rp_replica_user(rep);
    if (!m) return RP_OK;
    rp_optimizer_destroy(m->opt); /* before the parameters it updates */
    rp_params_destroy(m->params);
    free(m);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}
