/*
 * async_mpi.c - asynchronous training with a parameter server, meant for
 * mpirun:
 *
 *     mpirun -np 3 ./async_mpi --ps 1      # ranks 0 and 1 train, rank 2 serves
 *     ./async_mpi                          # the same in one process: 2 replica threads,
 *                                          # an in-process server
 *
 * The task is example linear_regression's (fit y = x.w + b), but the
 * replicas do not wait for each other: each claims the next batch from a
 * queue shared by the whole job, pushes its gradient to the server (which
 * applies SGD) and pulls fresh values. A fast replica takes
 * more batches than a slow one; every batch is used once.
 *
 * Prints, from replica 0, how many batches each replica took and the largest
 * error in w and b after pulling the server's final values; exits 1 if an
 * error exceeds 0.01.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <replicator/replicator.h>

enum { DIM = 8, BATCH = 32, BATCHES = 600 };
static const float true_w[DIM] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.25f, 0.75f, -2.0f};
static const float true_b = 0.3f;

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
    /* Plain SGD, applied on the server. (Momentum 0.9 with stale gradients can diverge at
       this learning rate: each push is computed on values up to a step or two old.) */
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0.0f;
    /* Collective: replica 0's values go to the server, every replica pulls them. */
    return rp_replica_optimizer_create(rep, &s->opt, s->params, &oc);
}

/* Batch `k`: the same numbers whichever replica claims it. */
static void make_batch(int64_t k, float *x, float *y)
{
    rp_rng_fill_uniform(11, (uint64_t)k * BATCH * DIM, x, BATCH * DIM, -1.0f, 1.0f);
    rp_rng_fill_normal(12, (uint64_t)k * BATCH, y, BATCH, 0.0f, 0.01f);
    for (int i = 0; i < BATCH; i++) {
        y[i] += true_b;
        for (int j = 0; j < DIM; j++)
            y[i] += x[i * DIM + j] * true_w[j];
    }
}

/* One run is the whole training: claim a batch, step, until the queue passes BATCHES. */
static rp_status train(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    int64_t taken = 0;
    double loss = 0;
    for (;;) {
        int64_t k;
        RP_CHECK(rp_replica_claim(rep, &k));
        if (k >= BATCHES) break;
        float x[BATCH * DIM], y[BATCH];
        make_batch(k, x, y);
        rp_tape_reset(t); /* many steps in one run: reset the tape for each */
        rp_tensor *l =
            rp_mse(t, rp_linear(t, rp_tensor_from(t, 2, (int[]){BATCH, DIM}, x), s->w, s->b),
                   rp_tensor_from(t, 2, (int[]){BATCH, 1}, y));
        if (!l) return rp_last_status();
        RP_CHECK(rp_backward(t, l));
        RP_CHECK(rp_optimizer_step(s->opt, 0.2f)); /* push the gradient, pull the values */
        loss = rp_item(l);
        taken++;
    }
    RP_CHECK(rp_replica_report(rep, "batches", (double)taken, RP_SUM));
    RP_CHECK(rp_replica_report(rep, "fewest", (double)taken, RP_MIN));
    return rp_replica_report(rep, "last_loss", loss, RP_MEAN);
}

/* Pulls the server's values and measures them against the true ones. */
static rp_status check(rp_replica *rep, void *arg)
{
    (void)arg;
    struct replica_state *s = rp_replica_user(rep);
    RP_CHECK(rp_replica_optimizer_fetch(rep, s->opt));
    float w[DIM];
    RP_CHECK(rp_tensor_read(s->w, w, DIM));
    double err = fabs(rp_item(s->b) - true_b);
    for (int j = 0; j < DIM; j++)
        err = fmax(err, fabs(w[j] - true_w[j]));
    return rp_replica_report(rep, "error", err, RP_MAX);
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
    cfg.strategy = RP_STRATEGY_ASYNC;
    cfg.ps = 1;
    /* No replica runs more than 4 steps ahead of the slowest: without a bound, a replica that
       starts late pushes a gradient computed on the initial values after the others have
       converged, and that one step undoes much of the fit. */
    cfg.staleness = 4;
    cfg.replicas = rp_comm_mpi_launched() ? 1 : 2; /* async under MPI: one replica per rank */
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    RP_TRY(rp_replicator_create(&r, &cfg));
    if (rp_replicator_is_server(r)) { /* the last --ps ranks: serve until the replicas are done */
        RP_TRY(rp_replicator_serve(r));
        goto cleanup;
    }
    RP_TRY(rp_replicator_run(r, build, NULL));
    RP_TRY(rp_replicator_run(r, train, NULL));
    double batches, fewest, loss, err;
    RP_TRY(rp_replicator_result(r, "batches", &batches));
    RP_TRY(rp_replicator_result(r, "fewest", &fewest));
    RP_TRY(rp_replicator_result(r, "last_loss", &loss));
    RP_TRY(rp_replicator_run(r, check, NULL));
    RP_TRY(rp_replicator_result(r, "error", &err));
    bool first = rp_replica_id(rp_replicator_replica(r, 0)) == 0; /* print once, not per rank */
    if (first)
        printf("backend %s, %d replicas, %d server(s): %.0f batches (the fewest on one replica: "
               "%.0f), "
               "last loss %.6f, max |error| in w, b: %.5f\n",
               rp_replicator_backend(r), rp_replicator_replicas(r), cfg.ps, batches, fewest, loss,
               err);
    if (batches != BATCHES)
        status = RP_ERROR(RP_ERR_INVALID, "%.0f batches taken, not %d", batches, BATCHES);
    else if (err > 0.01)
        status = RP_ERROR(RP_ERR_NUMERIC, "the fit is off by %g", err);
cleanup:
    if (r && !rp_replicator_is_server(r)) {
        rp_status down = rp_replicator_run(r, teardown, NULL);
        if (status == RP_OK) status = down;
    }
    rp_replicator_destroy(r);
    if (status != RP_OK) fprintf(stderr, "async_mpi: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
