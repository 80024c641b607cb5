/*
 * test_replicator_mpi.c - the runtime on MPI ranks, run by CTest under
 * mpirun: one replica per process, or with an argument T, T replica threads
 * per process (hierarchical). The same step function trains a small model
 * with cross-replica batch norm for a few steps on the MPI ranks and, in
 * each process, on as many threads as there are replicas in the job; the
 * parameters must agree within 1e-6 relative (with one replica per rank
 * both backends reduce in rank order, so they are expected bitwise equal),
 * and every rank must hold the same parameters.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

#define GLOBAL_BATCH 16
#define IN           12
#define HIDDEN       8
#define CLASSES      4
#define STEPS        5

typedef struct state {
    rp_params *ps;
    rp_linear_layer fc1, fc2;
    rp_batchnorm_layer bn;
    rp_optimizer *opt;
} state;

typedef struct job {
    state st[8];
} job;

/* Sample i's features: the same whichever replica holds it. */
static void sample(float *x, int64_t i)
{
    rp_rng_fill_normal(rp_hash_str(3, "mpi-test"), (uint64_t)i * IN, x, IN, 0.0f, 1.0f);
    x[i % IN] += 2.0f;
}

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    state *s = &j->st[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    RP_CHECK(rp_params_create(&s->ps));
    RP_CHECK(rp_linear_layer_init(&s->fc1, s->ps, "fc1", IN, HIDDEN, true, true));
    RP_CHECK(rp_batchnorm_layer_init(&s->bn, s->ps, "bn", HIDDEN));
    s->bn.p.reduce = rp_cross_replica_bn;
    s->bn.p.reduce_ctx = rep;
    RP_CHECK(rp_linear_layer_init(&s->fc2, s->ps, "fc2", HIDDEN, CLASSES, true, false));
    RP_CHECK(rp_params_finalize(s->ps, 5));
    rp_optim_config oc = rp_optim_config_default();
    oc.weight_decay = 1e-4f;
    return rp_replica_optimizer_create(rep, &s->opt, s->ps, &oc);
}

static int step_no;

static rp_status step(rp_replica *rep, void *arg)
{
    (void)arg;
    state *s = rp_replica_user(rep);
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, GLOBAL_BATCH, &in));
    int b = in.per_replica_batch;
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *x = rp_tensor_new(t, 2, (int[]){b, IN});
    int32_t labels[GLOBAL_BATCH];
    float xs[GLOBAL_BATCH * IN]; /* made on the host, written into x's storage */
    if (!x) return rp_last_status();
    for (int k = 0; k < b; k++) {
        int64_t i = (int64_t)step_no * GLOBAL_BATCH + in.replica * b + k;
        sample(xs + (int64_t)k * IN, i);
        labels[k] = (int32_t)(i % CLASSES);
    }
    RP_CHECK(rp_tensor_write(x, xs, (int64_t)b * IN));
    rp_tensor *h = rp_linear_layer_forward(t, &s->fc1, x);
    h = rp_relu(t, rp_batchnorm_layer_forward(t, &s->bn, h, true));
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &s->fc2, h), labels);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, 0.1f));
    return rp_replica_report(rep, "loss", rp_item(loss), RP_MEAN);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    state *s = rp_replica_user(rep);
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->ps);
    return RP_OK;
}

/* Trains on the given backend; copies replica (local 0)'s values into out. */
static int train(rp_backend backend, int replicas, float *out, int64_t *numel, double *loss)
{
    rp_config cfg = rp_config_default();
    cfg.backend = backend;
    cfg.replicas = replicas;
    cfg.threads_per_replica = 1;
    cfg.checksum_every = 1;
    cfg.timeout_s = 60;
    rp_replicator *r;
    job j;
    memset(&j, 0, sizeof j);
    if (rp_replicator_create(&r, &cfg) != RP_OK || rp_replicator_run(r, build, &j) != RP_OK) {
        fprintf(stderr, "build: %s\n", rp_last_error());
        return 1;
    }
    for (step_no = 0; step_no < STEPS; step_no++)
        if (rp_replicator_run(r, step, &j) != RP_OK) {
            fprintf(stderr, "step %d: %s\n", step_no, rp_last_error());
            return 1;
        }
    rp_replicator_result(r, "loss", loss);
    *numel = rp_params_numel(j.st[0].ps);
    if (rp_params_read_values(j.st[0].ps, out) != RP_OK) {
        fprintf(stderr, "read: %s\n", rp_last_error());
        return 1;
    }
    rp_replicator_run(r, teardown, &j);
    rp_replicator_destroy(r);
    return 0;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    int per = argc > 1 ? atoi(argv[1]) : 1;
    if (per < 1 || per > 8) {
        fprintf(stderr, "usage: test_replicator_mpi [replicas per rank, 1..8]\n");
        return 2;
    }
    static float mpi_values[4096], thr_values[4096];
    int64_t n_mpi = 0, n_thr = 0;
    double loss_mpi = 0, loss_thr = 0;
    int failures = train(RP_BACKEND_MPI, per, mpi_values, &n_mpi, &loss_mpi);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    failures += train(RP_BACKEND_THREADS, size * per, thr_values, &n_thr, &loss_thr);
    if (!failures) {
        double worst = 0;
        int equal =
            n_mpi == n_thr && !memcmp(mpi_values, thr_values, (size_t)n_mpi * sizeof(float));
        for (int64_t i = 0; i < n_mpi && n_mpi == n_thr; i++) {
            double d = fabs((double)mpi_values[i] - thr_values[i]) /
                       fmax(1.0, fabs((double)thr_values[i]));
            if (d > worst) worst = d;
        }
        if (n_mpi != n_thr || worst > 1e-6) {
            fprintf(stderr,
                    "rank %d: MPI and threads differ: %lld vs %lld values, worst relative %g\n",
                    rank, (long long)n_mpi, (long long)n_thr, worst);
            failures++;
        }
        /* Every rank holds rank 0's values. */
        static float root[4096];
        memcpy(root, mpi_values, sizeof root);
        MPI_Bcast(root, (int)n_mpi, MPI_FLOAT, 0, MPI_COMM_WORLD);
        if (memcmp(root, mpi_values, (size_t)n_mpi * sizeof(float))) {
            fprintf(stderr, "rank %d: parameters differ from rank 0's\n", rank);
            failures++;
        }
        if (rank == 0)
            printf("%d ranks x %d replicas: MPI vs threads after %d steps: %s (worst relative %g), "
                   "loss %.6f vs %.6f\n",
                   size, per, STEPS, equal ? "bitwise equal" : "not bitwise equal", worst, loss_mpi,
                   loss_thr);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", total ? "FAIL" : "ok");
    return total ? 1 : 0;
}
