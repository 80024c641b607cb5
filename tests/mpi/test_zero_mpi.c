/*
 * test_zero_mpi.c - ZeRO-1, ZeRO-2 and ZeRO-3 on MPI ranks, run by CTest under mpirun: one
 * replica per process, or with an argument T, T replica threads per process
 * (hierarchical). A model of 53 trainable values (no replica count above 1
 * divides it) trains a few steps with Adam and a global-norm clip, once with
 * the sync strategy and once with each ZeRO stage on the same layout (buckets
 * of 16 bytes: many of them); then, for each stage:
 *  - the values are bitwise equal (the same backend reduces in the same
 *    order), and every rank holds rank 0's;
 *  - the gathered optimizer state (rp_replica_optimizer_fetch into replica
 *    0) is bitwise the sync run's, and each replica held its shard only
 *    (ceil(53 / N) values x 2 slots) before the gather;
 *  - the clipped norm agrees with the sync run's within 1e-6;
 *  - on 4 replicas (4 ranks, or 2 ranks x 2 threads), HSDP in groups of 2
 *    (cfg.hsdp) with each stage: the values within 1e-5 of sync's (the mean
 *    is taken in the group, then across groups), the same on every rank,
 *    each replica holding half of the state.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

#define IN    6
#define HID   5
#define OUT   3
#define GB    24
#define NP    53
#define STEPS 4

static int failures, rank_;
#include "mpi_check.h"

typedef struct state {
    rp_params *ps;
    rp_linear_layer l1, l2;
    rp_optimizer *opt;
    rp_replica *rep;
    float norm;
    size_t bytes;
} state;

typedef struct job {
    state st[8];
} job;

static rp_status clip_before(rp_optimizer *opt, void *ctx)
{
    state *s = ctx;
    return rp_replica_clip_grad_norm(s->rep, opt, 0.05f, &s->norm);
}

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    state *s = &j->st[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    s->rep = rep;
    RP_CHECK(rp_params_create(&s->ps));
    RP_CHECK(rp_linear_layer_init(&s->l1, s->ps, "l1", IN, HID, true, true));
    RP_CHECK(rp_linear_layer_init(&s->l2, s->ps, "l2", HID, OUT, true, false));
    RP_CHECK(rp_params_finalize(s->ps, 5 + (uint64_t)rp_replica_id(rep)));
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    oc.weight_decay = 1e-3f;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->ps, &oc));
    rp_optimizer_hooks h = {.before = clip_before};
    RP_CHECK(rp_optimizer_add_hooks(s->opt, &h, s));
    s->bytes = rp_optimizer_state_bytes(s->opt);
    return RP_OK;
}

static int step_no;

static rp_status step(rp_replica *rep, void *arg)
{
    (void)arg;
    state *s = rp_replica_user(rep);
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, GB, &in));
    int b = in.per_replica_batch;
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *x = rp_tensor_new(t, 2, (int[]){b, IN});
    int32_t labels[GB];
    float xs[GB * IN]; /* made on the host, written into x's storage */
    if (!x) return rp_last_status();
    for (int k = 0; k < b; k++) {
        int64_t i = (int64_t)step_no * GB + in.replica * b + k;
        rp_rng_fill_normal(rp_hash_str(3, "zero-mpi"), (uint64_t)i * IN, xs + k * IN, IN, 0.0f,
                           1.0f);
        labels[k] = (int32_t)(i % OUT);
    }
    RP_CHECK(rp_tensor_write(x, xs, (int64_t)b * IN));
    rp_tensor *h = rp_relu(t, rp_linear_layer_forward(t, &s->l1, x));
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &s->l2, h), labels);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(s->opt, 0.01f * (float)(1 + step_no));
}

static rp_status fetch(rp_replica *rep, void *arg)
{
    state *s = rp_replica_user(rep);
    return rp_replica_optimizer_fetch(rep, s->opt);
}

static rp_status teardown(rp_replica *rep, void *arg)
{
    (void)arg;
    state *s = rp_replica_user(rep);
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->ps);
    return RP_OK;
}

/* Trains on MPI; local replica 0's values, (gathered) state, norm, and every local state size. */
/* zero: 0 sync, 1 ZeRO-1, 2 ZeRO-2, 3 ZeRO-3; hsdp: cfg.hsdp. */
static int hsdp_;
static int train(int zero, int per, float *values, float *slots, float *norm, size_t *bytes)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.replicas = per;
    cfg.threads_per_replica = 1;
    cfg.checksum_every = 1;
    cfg.timeout_s = 60;
    cfg.bucket_bytes = 16;
    const rp_strategy_kind kinds[] = {RP_STRATEGY_SYNC, RP_STRATEGY_ZERO1, RP_STRATEGY_ZERO2,
                                      RP_STRATEGY_ZERO3};
    cfg.strategy = kinds[zero];
    cfg.hsdp = zero ? hsdp_ : 0;
    rp_replicator *r;
    job j;
    memset(&j, 0, sizeof j);
    if (rp_replicator_create(&r, &cfg) != RP_OK || rp_replicator_run(r, build, &j) != RP_OK) {
        fprintf(stderr, "build: %s\n", rp_last_error());
        return 1;
    }
    for (int i = 0; i < per; i++)
        bytes[i] = j.st[i].bytes;
    for (step_no = 0; step_no < STEPS; step_no++)
        if (rp_replicator_run(r, step, &j) != RP_OK) {
            fprintf(stderr, "step %d: %s\n", step_no, rp_last_error());
            return 1;
        }
    if (rp_replicator_run(r, fetch, &j) != RP_OK) {
        fprintf(stderr, "fetch: %s\n", rp_last_error());
        return 1;
    }
    /* The blocks and the state are the kernel table's storage: read through host copies. */
    if (rp_params_numel(j.st[0].ps) != NP || rp_params_read_values(j.st[0].ps, values) != RP_OK) {
        fprintf(stderr, "read: %lld values (%s)\n", (long long)rp_params_numel(j.st[0].ps),
                rp_last_error());
        return 1;
    }
    /* Replica 0 (local replica 0 of rank 0) holds the whole state after the fetch. */
    int64_t n = 0;
    rp_optimizer_state(j.st[0].opt, &n);
    if (n == 2 * NP && rp_optimizer_read_state(j.st[0].opt, slots) != RP_OK) {
        fprintf(stderr, "read: %s\n", rp_last_error());
        return 1;
    }
    *norm = j.st[0].norm;
    rp_replicator_run(r, teardown, &j);
    rp_replicator_destroy(r);
    return 0;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    int per = argc > 1 ? atoi(argv[1]) : 1;
    if (per < 1 || per > 8) {
        fprintf(stderr, "usage: test_zero_mpi [replicas per rank, 1..8]\n");
        return 2;
    }
    static float sv[NP], zv[NP], ss[2 * NP], zs[2 * NP];
    float sn = 0, zn = 0;
    size_t sb[8], zb[8];
    memset(ss, 0, sizeof ss);
    memset(zs, 0, sizeof zs);
    /* The runtime initialises MPI. */
    int bad = train(0, per, sv, ss, &sn, sb);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int stage = 1; stage <= 3; stage++) {
        memset(zs, 0, sizeof zs);
        bad += train(stage, per, zv, zs, &zn, zb);
        CHECK(bad == 0, "a run failed (ZeRO-%d)", stage);
        if (bad) break;
        CHECK(!memcmp(zv, sv, sizeof sv), "ZeRO-%d's values differ from sync's", stage);
        int n = size * per;
        int64_t shard = (NP + n - 1) / n;
        for (int i = 0; i < per; i++) {
            int id = rank_ * per + i;
            int64_t lo = id * shard < NP ? id * shard : NP, hi = lo + shard < NP ? lo + shard : NP;
            CHECK(sb[i] == 2 * NP * sizeof(float), "sync replica %d holds %zu bytes", id, sb[i]);
            CHECK(zb[i] == (size_t)(2 * (hi - lo)) * sizeof(float),
                  "ZeRO-%d replica %d holds %zu bytes, its shard is %lld values", stage, id, zb[i],
                  (long long)(hi - lo));
        }
        if (rank_ == 0) CHECK(!memcmp(zs, ss, sizeof ss), "gathered state differs from sync's");
        CHECK(sn > 0.05f && fabsf(zn - sn) <= 1e-6f * sn, "clip norm %g vs sync %g", (double)zn,
              (double)sn);
        static float root[NP];
        memcpy(root, zv, sizeof root);
        MPI_Bcast(root, NP, MPI_FLOAT, 0, MPI_COMM_WORLD);
        CHECK(!memcmp(root, zv, sizeof zv), "values differ from rank 0's");
        if (rank_ == 0)
            printf("%d ranks x %d replicas: ZeRO-%d equals sync bitwise after %d steps, shard "
                   "%lld of %d values, norm %g vs %g\n",
                   size, per, stage, STEPS, (long long)shard, NP, (double)zn, (double)sn);
    }
    /* HSDP: groups of 2 of 4 replicas (2 ranks x 2 threads: a group is one process). */
    for (int stage = 1; stage <= 3 && !bad && size * per == 4; stage++) {
        hsdp_ = 2;
        bad += train(stage, per, zv, zs, &zn, zb);
        hsdp_ = 0;
        CHECK(bad == 0, "an HSDP run failed (ZeRO-%d)", stage);
        if (bad) break;
        double worst = 0;
        for (int i = 0; i < NP; i++) {
            double d = fabs((double)zv[i] - (double)sv[i]) / (fabs((double)sv[i]) + 1e-6);
            if (d > worst) worst = d;
        }
        CHECK(worst <= 1e-5, "HSDP ZeRO-%d's values differ from sync's by %g", stage, worst);
        for (int i = 0; i < per; i++) {
            int id = rank_ * per + i;
            int64_t lo = (id % 2) * 27, hi = lo + 27 < NP ? lo + 27 : NP;
            CHECK(zb[i] == (size_t)(2 * (hi - lo)) * sizeof(float),
                  "HSDP replica %d holds %zu bytes, its shard is %lld values", id, zb[i],
                  (long long)(hi - lo));
        }
        CHECK(fabsf(zn - sn) <= 1e-6f * sn, "HSDP clip norm %g vs sync %g", (double)zn, (double)sn);
        static float root[NP];
        memcpy(root, zv, sizeof root);
        MPI_Bcast(root, NP, MPI_FLOAT, 0, MPI_COMM_WORLD);
        CHECK(!memcmp(root, zv, sizeof zv), "HSDP values differ from rank 0's");
        if (rank_ == 0)
            printf("%d ranks x %d replicas: HSDP 2 x 2 with ZeRO-%d within %.2g of sync\n", size,
                   per, stage, worst);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("%s\n", total ? "FAIL" : "ok");
    return total ? 1 : 0;
}
