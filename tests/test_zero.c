/*
 * test_zero.c - ZeRO-1, optimizer-state sharding (runtime.h: cfg.zero;
 * optim.h: rp_optimizer_set_range):
 *  - an optimizer stepped range by range equals one stepped whole, bitwise,
 *    and keeps its state across a change of range;
 *  - ZeRO-1 on 2 and 4 replicas (threads) gives bitwise the values of the
 *    sync strategy after several steps, with momentum SGD (Nesterov, weight
 *    decay), Adam and AdamW, a varying learning rate, one bucket or many;
 *    with gradient accumulation within 1e-6 (the sync strategy reduces its
 *    already-reduced first micro-batch again, ZeRO-1 the local sums);
 *  - with gradients in bf16 on the wire (cfg.grad_dtype) ZeRO-1's reduce-
 *    scatter gives bitwise the values of the sync strategy's bf16 all-reduce
 *    (both round each local gradient, add in f32 in rank order and round
 *    once), and differs from the f32 run;
 *  - 53 trainable values on 3 and 4 replicas (padded shards, not refused);
 *  - each replica holds about 1/N of the optimizer state, counted;
 *  - a run saved on 4 replicas (logical tensors, the same as sync's) resumes
 *    on 2 and equals the sync run that did the same;
 *  - global-norm clipping on the shards equals the sync strategy's to 1e-6;
 *  - a NaN in one replica's data fails the step on every replica, naming it,
 *    with nothing updated;
 *  - ZeRO-1 chosen as cfg.strategy = RP_STRATEGY_ZERO1 is the ZeRO-1 of
 *    cfg.zero (the same values and shards) and equals sync, on 2, 3 and 4
 *    replicas with SGD, Adam and AdamW;
 *  - ZeRO-2 (RP_STRATEGY_ZERO2) passes every case above as ZeRO-1 does (the
 *    cases named *_zero2: the same runs with zero = 2), and after backward a
 *    replica's gradient block holds no resident page (each bucket was kept
 *    and released as it was reduced) where the sync strategy's holds them
 *    all, with the reduced shard in place after the step's reduction;
 *  - HSDP (cfg.hsdp = 2 of 4 replicas), ZeRO-1 and ZeRO-2: the state sharded
 *    in each group of 2 (half of it on each replica) and the values equal
 *    to sync's within 1e-5 (the mean is taken in the group, then across the
 *    groups: another order of the additions), the replicas bitwise identical
 *    (the checksum every step); hsdp = 4 on 4 is plain ZeRO, bitwise; the
 *    clipped norm agrees with sync's; a NaN in the second group's replica
 *    fails the step on every replica, naming it; its checkpoint resumes on 2
 *    plain replicas as sync's does; hsdp that does not divide the replicas,
 *    or without ZeRO, is refused.
 *
 * The model: linear 6 -> 5 with bias, ReLU, linear 5 -> 3 with bias (53
 * values: no replica count above 1 divides it). The global batch of step s
 * is a function of s alone; replica r of n trains rows [r*12/n, (r+1)*12/n).
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define IN   6
#define HID  5
#define OUT  3
#define GB   12
#define NP   53
#define MAXR 4

typedef struct net {
    rp_params *params;
    rp_linear_layer l1, l2;
    rp_optimizer *opt;
} net;

typedef struct job {
    rp_optim_config oc;
    int steps;                   /* steps in this run */
    int64_t step0;               /* global step of the first */
    rp_dtype grad_dtype;         /* the gradients on the wire (f32 by default) */
    int accum;                   /* backward passes per step (1: none) */
    float clip;                  /* > 0: a `before` hook clips to this global norm */
    int nan_replica;             /* >= 0: that replica's input holds a NaN at step nan_step */
    int nan_step;                /* of this run */
    const rp_checkpoint *resume; /* read into every replica at build */
    rp_checkpoint *save;         /* after the run: replica 0's gathered state */
    float out[NP];               /* replica 0's trainable values after the run */
    size_t bytes[MAXR];          /* each replica's optimizer state, after build */
    float norm[MAXR];            /* each replica's last gradient norm (clip) */
    rp_status step_status;       /* of the failing step (nan) */
    bool by_enum;                /* ZeRO-1 chosen as cfg.strategy, not its older spelling */
    int hsdp;                    /* cfg.hsdp: shard in groups of this many replicas */
} job;

typedef struct clip_ctx {
    rp_replica *rep;
    job *j;
} clip_ctx;

static clip_ctx clips[MAXR];

static rp_status clip_before(rp_optimizer *opt, void *ctx)
{
    clip_ctx *c = ctx;
    return rp_replica_clip_grad_norm(c->rep, opt, c->j->clip, &c->j->norm[rp_replica_id(c->rep)]);
}

static rp_status build_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = calloc(1, sizeof *m);
    if (!m) return RP_ERR_NOMEM;
    rp_replica_set_user(rep, m);
    RP_CHECK(rp_params_create(&m->params));
    RP_CHECK(rp_linear_layer_init(&m->l1, m->params, "l1", IN, HID, true, true));
    RP_CHECK(rp_linear_layer_init(&m->l2, m->params, "l2", HID, OUT, true, false));
    /* Replica-dependent initial values: the runtime's broadcast must make them replica 0's. */
    RP_CHECK(rp_params_finalize(m->params, 7 + (uint64_t)rp_replica_id(rep)));
    RP_CHECK(rp_replica_optimizer_create(rep, &m->opt, m->params, &j->oc));
    if (j->resume) {
        RP_CHECK(rp_checkpoint_read_params(j->resume, m->params, "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(j->resume, m->opt, m->params, "optim/"));
    }
    if (j->clip > 0) {
        clip_ctx *c = &clips[rp_replica_id(rep)];
        c->rep = rep;
        c->j = j;
        rp_optimizer_hooks h = {.before = clip_before};
        RP_CHECK(rp_optimizer_add_hooks(m->opt, &h, c));
    }
    j->bytes[rp_replica_id(rep)] = rp_optimizer_state_bytes(m->opt);
    return RP_OK;
}

/* The loss of this replica's rows of global step s's batch. */
static rp_tensor *net_loss(rp_tape *t, const net *m, int id, int n, int64_t s, bool poison)
{
    float x[GB * IN];
    tu_fill(x, GB * IN, 1000 + (uint64_t)s, -1.0f, 1.0f);
    int rows = GB / n, r0 = id * rows;
    rp_tensor *xt = rp_tensor_new(t, 2, (int[]){rows, IN});
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), (size_t)rows * sizeof(int32_t));
    if (!xt || !y) return NULL;
    if (poison) x[r0 * IN + 1] = NAN;
    if (rp_tensor_write(xt, x + r0 * IN, (int64_t)rows * IN) != RP_OK) return NULL;
    for (int k = 0; k < rows; k++)
        y[k] = (int32_t)((r0 + k + s) % OUT);
    rp_tensor *h = rp_relu(t, rp_linear_layer_forward(t, &m->l1, xt));
    return rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &m->l2, h), y);
}

static int step_index; /* the run's step, set before each rp_replicator_run */

static rp_status step_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    int64_t s = j->step0 + step_index;
    rp_tape *t = rp_replica_tape(rep);
    bool poison = rp_replica_id(rep) == j->nan_replica && step_index == j->nan_step;
    for (int a = 0; a < j->accum; a++) {
        if (a > 0) rp_tape_reset(t);
        rp_tensor *loss =
            net_loss(t, m, rp_replica_id(rep), rp_replica_count(rep), s * 7 + a, poison);
        if (!loss) return rp_last_status();
        RP_CHECK(rp_backward(t, loss));
    }
    /* A varying rate, as a schedule gives: the step number reaches the update. */
    float lr = 0.05f + 0.01f * (float)(s % 5);
    return rp_optimizer_step(m->opt, lr);
}

static rp_status fetch_fn(rp_replica *rep, void *arg)
{
    net *m = rp_replica_user(rep);
    return rp_replica_optimizer_fetch(rep, m->opt);
}

static rp_status destroy_fn(rp_replica *rep, void *arg)
{
    net *m = rp_replica_user(rep);
    if (!m) return RP_OK;
    rp_optimizer_destroy(m->opt);
    rp_params_destroy(m->params);
    free(m);
    rp_replica_set_user(rep, NULL);
    return RP_OK;
}

/* The ZeRO stage a test's `zero` runs: 1, or 2 in the *_zero2 cases (their setup sets it). */
static int zero_stage = 1;

static int setup_zero2(void **state)
{
    (void)state;
    zero_stage = 2;
    return 0;
}

static int setup_zero3(void **state)
{
    (void)state;
    zero_stage = 3;
    return 0;
}

static int teardown_zero2(void **state)
{
    (void)state;
    zero_stage = 1;
    return 0;
}

/* One job on n thread replicas, ZeRO (zero_stage) or sync; returns the first failing run's
   status. */
static rp_status run_job(job *j, int n, bool zero, size_t bucket_bytes)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = n;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1;
    if (zero && zero_stage >= 2) /* no older spelling */
        cfg.strategy = zero_stage == 2 ? RP_STRATEGY_ZERO2 : RP_STRATEGY_ZERO3;
    else if (j->by_enum)
        cfg.strategy = zero ? RP_STRATEGY_ZERO1 : RP_STRATEGY_SYNC;
    else
        cfg.zero = zero;
    cfg.grad_dtype = j->grad_dtype;
    cfg.hsdp = j->hsdp;
    if (bucket_bytes) cfg.bucket_bytes = bucket_bytes;
    if (j->accum < 1) j->accum = 1;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    rp_status status = rp_replicator_run(r, build_fn, j);
    for (step_index = 0; status == RP_OK && step_index < j->steps; step_index++)
        status = rp_replicator_run(r, step_fn, j);
    j->step_status = status;
    /* ZeRO-3: each replica holds its shard of the values; the fetch makes them whole. */
    if (status == RP_OK && zero && zero_stage == 3 && n > 1)
        status = rp_replicator_run(r, fetch_fn, j);
    if (status == RP_OK) {
        net *m = rp_replica_user(rp_replicator_replica(r, 0));
        assert_int_equal(rp_params_numel(m->params), NP);
        assert_int_equal(rp_params_read_values(m->params, j->out), RP_OK);
        if (j->save) {
            status = rp_replicator_run(r, fetch_fn, j);
            if (status == RP_OK) status = rp_checkpoint_add_params(j->save, m->params, "param/");
            if (status == RP_OK)
                status = rp_checkpoint_add_optimizer(j->save, m->opt, m->params, "optim/");
        }
    }
    rp_status freed = rp_replicator_run(r, destroy_fn, j);
    rp_replicator_destroy(r);
    return status != RP_OK ? status : freed;
}

static job make_job(rp_optim_kind kind, int steps)
{
    job j;
    memset(&j, 0, sizeof j);
    j.oc = rp_optim_config_default();
    j.oc.kind = kind;
    j.oc.weight_decay = 0.01f;
    if (kind == RP_OPTIM_SGD) j.oc.nesterov = true;
    j.steps = steps;
    j.accum = 1;
    j.nan_replica = -1;
    return j;
}

static void assert_bitwise(const float *a, const float *b, const char *what)
{
    for (int i = 0; i < NP; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            print_error("%s: value %d differs: %.9g vs %.9g\n", what, i, (double)a[i],
                        (double)b[i]);
            fail();
        }
}

/* ---- 1. the optimizer over a range ----------------------------------------------------- */

static void test_optimizer_range(void **state)
{
    rp_optim_kind kinds[3] = {RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_ADAMW};
    for (int k = 0; k < 3; k++) {
        rp_params *p[2];
        rp_optimizer *o[2];
        rp_linear_layer l[2][2];
        rp_optim_config oc = make_job(kinds[k], 0).oc;
        for (int v = 0; v < 2; v++) {
            assert_int_equal(rp_params_create(&p[v]), RP_OK);
            assert_int_equal(rp_linear_layer_init(&l[v][0], p[v], "l1", IN, HID, true, true),
                             RP_OK);
            assert_int_equal(rp_linear_layer_init(&l[v][1], p[v], "l2", HID, OUT, true, false),
                             RP_OK);
            assert_int_equal(rp_params_finalize(p[v], 3), RP_OK);
            assert_int_equal(rp_optimizer_create(&o[v], p[v], &oc), RP_OK);
        }
        assert_int_equal(rp_params_trainable_numel(p[0]), NP);
        size_t whole = rp_optimizer_state_bytes(o[0]);
        assert_int_equal(whole, (size_t)rp_optim_slots(&oc) * NP * sizeof(float));
        /* o[0] steps every value; the same gradients each step. */
        int64_t cut[4] = {0, 20, 37, NP};
        for (int s = 0; s < 4; s++) {
            float g[NP];
            tu_fill(g, NP, 50 + (uint64_t)s, -1.0f, 1.0f);
            assert_int_equal(rp_params_write_grads(p[0], g), RP_OK);
            assert_int_equal(rp_optimizer_step(o[0], 0.1f), RP_OK);
        }
        /* The same steps by three optimizers over p[1], one per range, each with its own state. */
        rp_optimizer *part[3];
        for (int q = 0; q < 3; q++) {
            assert_int_equal(rp_optimizer_create(&part[q], p[1], &oc), RP_OK);
            assert_int_equal(rp_optimizer_set_range(part[q], cut[q], cut[q + 1]), RP_OK);
            int64_t lo, hi;
            rp_optimizer_range(part[q], &lo, &hi);
            assert_int_equal(lo, cut[q]);
            assert_int_equal(hi, cut[q + 1]);
            int64_t n = -1;
            rp_optimizer_state(part[q], &n);
            assert_int_equal(n, rp_optim_slots(&oc) * (cut[q + 1] - cut[q]));
            assert_int_equal(rp_optimizer_state_bytes(part[q]), (size_t)n * sizeof(float));
        }
        for (int s = 0; s < 4; s++) {
            float g[NP];
            tu_fill(g, NP, 50 + (uint64_t)s, -1.0f, 1.0f);
            for (int q = 0; q < 3; q++) {
                assert_int_equal(rp_params_write_grads(p[1], g), RP_OK);
                assert_int_equal(rp_optimizer_step(part[q], 0.1f), RP_OK);
            }
        }
        float v0[NP], v1[NP];
        assert_int_equal(rp_params_read_values(p[0], v0), RP_OK);
        assert_int_equal(rp_params_read_values(p[1], v1), RP_OK);
        assert_bitwise(v1, v0, "three ranges vs whole");
        /* Growing a range back to the whole keeps the range's state and zeroes the rest (host
           copies of the state: it is the kernel table's storage). */
        int64_t n = 0;
        float s0[2 * NP], kept[2 * NP], grown[2 * NP];
        assert_int_equal(rp_optimizer_read_state(o[0], s0), RP_OK);
        assert_int_equal(rp_optimizer_read_state(part[1], kept), RP_OK);
        assert_int_equal(rp_optimizer_set_range(part[1], 0, NP), RP_OK);
        rp_optimizer_state(part[1], &n);
        assert_int_equal(n, rp_optim_slots(&oc) * NP);
        assert_int_equal(rp_optimizer_read_state(part[1], grown), RP_OK);
        assert_memory_equal(grown + cut[1], kept, (size_t)(cut[2] - cut[1]) * sizeof(float));
        assert_memory_equal(grown + cut[1], s0 + cut[1], (size_t)(cut[2] - cut[1]) * sizeof(float));
        assert_true(grown[0] == 0.0f && grown[NP - 1] == 0.0f);
        /* Bad ranges are refused, naming the range; nothing changes. */
        assert_int_equal(rp_optimizer_set_range(part[0], 5, 4), RP_ERR_INVALID);
        tu_assert_error_contains("[5, 4) is not a range of the 53 trainable values");
        assert_int_equal(rp_optimizer_set_range(part[0], 0, NP + 1), RP_ERR_INVALID);
        assert_int_equal(rp_optimizer_set_range(NULL, 0, 1), RP_ERR_INVALID);
        /* A checkpoint stores logical tensors: a sharded optimizer is refused, whole is fine. */
        rp_checkpoint *ck;
        assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
        assert_int_equal(rp_checkpoint_add_optimizer(ck, part[2], p[1], "optim/"), RP_ERR_INVALID);
        tu_assert_error_contains("holds the state of values [37, 53) of 53 only");
        assert_int_equal(rp_checkpoint_add_optimizer(ck, o[0], p[0], "optim/"), RP_OK);
        /* Read into a range: that range's part of each logical tensor. */
        assert_int_equal(rp_checkpoint_read_optimizer(ck, part[2], p[1], "optim/"), RP_OK);
        float got[2 * NP];
        assert_int_equal(rp_optimizer_read_state(part[2], got), RP_OK);
        assert_memory_equal(got, s0 + 37, 16 * sizeof(float));
        rp_checkpoint_destroy(ck);
        for (int q = 0; q < 3; q++)
            rp_optimizer_destroy(part[q]);
        for (int v = 0; v < 2; v++) {
            rp_optimizer_destroy(o[v]);
            rp_params_destroy(p[v]);
        }
    }
}

/* ---- 2. ZeRO-1 equals sync ------------------------------------------------------------ */

static void check_equal(rp_optim_kind kind, int n, size_t bucket, int accum)
{
    job a = make_job(kind, 5), b = make_job(kind, 5);
    a.accum = b.accum = accum;
    assert_int_equal(run_job(&a, n, false, bucket), RP_OK);
    assert_int_equal(run_job(&b, n, true, bucket), RP_OK);
    char what[96];
    snprintf(what, sizeof what, "kind %d, %d replicas, bucket %zu, accum %d", (int)kind, n, bucket,
             accum);
    if (accum == 1)
        assert_bitwise(b.out, a.out, what);
    else /* sync reduces mean1 + local2 again, ZeRO-1 the local sums: one rounding apart */
        tu_check_close(b.out, a.out, NP, 1e-6, what);
    /* The values moved: the comparison is not of two untouched models. */
    job c = make_job(kind, 0);
    assert_int_equal(run_job(&c, n, true, bucket), RP_OK);
    assert_true(memcmp(c.out, b.out, sizeof c.out) != 0);
}

static void test_equal_sgd(void **state)
{
    for (int n = 2; n <= 4; n += 2) {
        check_equal(RP_OPTIM_SGD, n, 0, 1);
        check_equal(RP_OPTIM_SGD, n, 16, 1); /* buckets of 16 bytes: many of them */
    }
}

static void test_equal_adam(void **state)
{
    for (int n = 2; n <= 4; n += 2) {
        check_equal(RP_OPTIM_ADAM, n, 0, 1);
        check_equal(RP_OPTIM_ADAM, n, 24, 1);
        check_equal(RP_OPTIM_ADAMW, n, 0, 1);
    }
}

static void test_equal_accumulation(void **state)
{
    check_equal(RP_OPTIM_SGD, 2, 16, 2);
    check_equal(RP_OPTIM_ADAM, 4, 0, 3);
}

static void test_equal_bf16(void **state)
{
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k < 2; k++) {
            size_t bucket = k ? 16 : 0;
            job a = make_job(RP_OPTIM_SGD, 5), b = make_job(RP_OPTIM_SGD, 5),
                f = make_job(RP_OPTIM_SGD, 5);
            a.grad_dtype = b.grad_dtype = RP_BF16;
            assert_int_equal(run_job(&a, n, false, bucket), RP_OK);
            assert_int_equal(run_job(&b, n, true, bucket), RP_OK);
            assert_int_equal(run_job(&f, n, true, bucket), RP_OK);
            char what[64];
            snprintf(what, sizeof what, "bf16 gradients, %d replicas, bucket %zu", n, bucket);
            assert_bitwise(b.out, a.out, what);
            assert_true(memcmp(b.out, f.out, sizeof b.out) != 0); /* bf16 is not f32 */
            tu_check_close(b.out, f.out, NP, 1e-2, what);
        }
}

/* 53 values on 3 replicas: shards of 18, 18, 17; on 4: 14, 14, 14, 11. */
static void test_non_dividing(void **state)
{
    check_equal(RP_OPTIM_SGD, 3, 0, 1);
    check_equal(RP_OPTIM_ADAM, 3, 8, 1);
    check_equal(RP_OPTIM_ADAM, 4, 12, 1);
}

/* ---- 3. optimizer-state bytes per replica --------------------------------------------- */

static void test_state_bytes(void **state)
{
    int ns[3] = {2, 3, 4};
    for (int c = 0; c < 3; c++) {
        int n = ns[c];
        job z = make_job(RP_OPTIM_ADAM, 1), s = make_job(RP_OPTIM_ADAM, 1);
        assert_int_equal(run_job(&s, n, false, 0), RP_OK);
        assert_int_equal(run_job(&z, n, true, 0), RP_OK);
        size_t whole = 2 * NP * sizeof(float), total = 0;
        int64_t shard = (NP + n - 1) / n;
        for (int q = 0; q < n; q++) {
            assert_int_equal(s.bytes[q], whole); /* sync: every replica holds it all */
            int64_t lo = q * shard < NP ? q * shard : NP, hi = lo + shard < NP ? lo + shard : NP;
            assert_int_equal(z.bytes[q], (size_t)(2 * (hi - lo)) * sizeof(float));
            /* About 1/N: at most one padded shard's worth above whole / N. */
            assert_true(z.bytes[q] * (size_t)n <= whole + (size_t)(2 * n) * sizeof(float));
            total += z.bytes[q];
        }
        assert_int_equal(total, whole); /* the shards partition the state */
    }
    /* One replica: nothing to shard. */
    job one = make_job(RP_OPTIM_SGD, 1);
    assert_int_equal(run_job(&one, 1, true, 0), RP_OK);
    assert_int_equal(one.bytes[0], NP * sizeof(float));
}

/* ---- 4. save on 4, resume on 2 ---------------------------------------------------------- */

static void test_resume_4_to_2(void **state)
{
    /* Momentum SGD, Adam, and plain SGD (no state: the checkpoint still needs a whole optimizer).
     */
    rp_optim_kind kinds[3] = {RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_SGD};
    for (int k = 0; k < 3; k++) {
        rp_checkpoint *cs, *cz;
        assert_int_equal(rp_checkpoint_create(&cs), RP_OK);
        assert_int_equal(rp_checkpoint_create(&cz), RP_OK);
        job s1 = make_job(kinds[k], 3), z1 = make_job(kinds[k], 3);
        if (k == 2) {
            s1.oc.momentum = z1.oc.momentum = 0.0f;
            s1.oc.nesterov = z1.oc.nesterov = false;
        }
        s1.save = cs;
        z1.save = cz;
        assert_int_equal(run_job(&s1, 4, false, 0), RP_OK);
        assert_int_equal(run_job(&z1, 4, true, 16), RP_OK);
        /* The gathered logical state is the sync run's, tensor by tensor. */
        assert_int_equal(rp_checkpoint_count(cz), rp_checkpoint_count(cs));
        for (int i = 0; i < rp_checkpoint_count(cs); i++) {
            const char *name = rp_checkpoint_name_at(cs, i);
            rp_checkpoint_dtype dt;
            int nd;
            int64_t shape[RP_MAX_DIMS];
            const void *a = rp_checkpoint_get(cs, name, &dt, &nd, shape);
            const void *b = rp_checkpoint_get(cz, name, NULL, NULL, NULL);
            assert_non_null(b);
            int64_t count = 1;
            for (int d = 0; d < nd; d++)
                count *= shape[d];
            assert_memory_equal(a, b, (size_t)count * 4 * (dt == RP_CHECKPOINT_F32 ? 1 : 2));
        }
        /* Resume on 2: sync from the sync checkpoint, ZeRO-1 from its own. */
        job s2 = make_job(kinds[k], 4), z2 = make_job(kinds[k], 4);
        s2.oc = z2.oc = s1.oc;
        s2.step0 = z2.step0 = 3;
        s2.resume = cs;
        z2.resume = cz;
        assert_int_equal(run_job(&s2, 2, false, 0), RP_OK);
        assert_int_equal(run_job(&z2, 2, true, 0), RP_OK);
        assert_bitwise(z2.out, s2.out, "resumed 4 -> 2");
        assert_true(memcmp(z2.out, z1.out, sizeof z1.out) != 0);
        /* And onto 3 (uneven shards) from the same checkpoint. */
        job s3 = make_job(kinds[k], 2), z3 = make_job(kinds[k], 2);
        s3.oc = z3.oc = s1.oc;
        s3.step0 = z3.step0 = 3;
        s3.resume = cs;
        z3.resume = cz;
        assert_int_equal(run_job(&s3, 3, false, 0), RP_OK);
        assert_int_equal(run_job(&z3, 3, true, 0), RP_OK);
        assert_bitwise(z3.out, s3.out, "resumed 4 -> 3");
        rp_checkpoint_destroy(cs);
        rp_checkpoint_destroy(cz);
    }
}

/* ---- 5. clipping over the shards -------------------------------------------------------- */

static void test_clip(void **state)
{
    for (int n = 2; n <= 4; n++) {
        job a = make_job(RP_OPTIM_SGD, 4), b = make_job(RP_OPTIM_SGD, 4);
        a.clip = b.clip = 0.05f; /* below the norms seen: every step clips */
        assert_int_equal(run_job(&a, n, false, 0), RP_OK);
        assert_int_equal(run_job(&b, n, true, 16), RP_OK);
        assert_true(a.norm[0] > 0.05f);
        for (int q = 0; q < n; q++) {
            assert_true(fabsf(b.norm[q] - a.norm[0]) <= 1e-6f * a.norm[0]);
            assert_true(b.norm[q] == b.norm[0]); /* every replica agrees */
        }
        tu_check_close(b.out, a.out, NP, 1e-6, "clipped ZeRO-1 vs sync");
        /* Clipping changed the result: without it the values differ by far more. */
        job c = make_job(RP_OPTIM_SGD, 4);
        assert_int_equal(run_job(&c, n, true, 0), RP_OK);
        assert_true(tu_max_rel_diff(c.out, b.out, NP) > 1e-4);
    }
}

/* ---- 6. a non-finite gradient ----------------------------------------------------------- */

static void test_nonfinite(void **state)
{
    job j = make_job(RP_OPTIM_ADAM, 3);
    j.nan_replica = 2;
    j.nan_step = 1;
    assert_int_equal(run_job(&j, 3, true, 16), RP_ERR_NUMERIC);
    tu_assert_error_contains("replica 2's own gradient of parameter 'l");
    tu_assert_error_contains("no parameter was updated");
}

/* ---- 7. cfg.strategy = RP_STRATEGY_ZERO1 is the same ZeRO-1 as cfg.zero ------------------ */

static void test_strategy_enum(void **state)
{
    rp_optim_kind kinds[3] = {RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_ADAMW};
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k < 3; k++) {
            job s = make_job(kinds[k], 4), z = make_job(kinds[k], 4), e = make_job(kinds[k], 4);
            e.by_enum = true;
            assert_int_equal(run_job(&s, n, false, 16), RP_OK);
            assert_int_equal(run_job(&z, n, true, 16), RP_OK);
            assert_int_equal(run_job(&e, n, true, 16), RP_OK);
            char what[64];
            snprintf(what, sizeof what, "strategy zero1, kind %d, %d replicas", (int)kinds[k], n);
            assert_bitwise(e.out, s.out, what);
            assert_bitwise(e.out, z.out, what);
            for (int q = 0; q < n; q++)
                assert_int_equal(e.bytes[q], z.bytes[q]); /* sharded as cfg.zero shards */
            assert_true(e.bytes[0] < s.bytes[0]);         /* Nesterov SGD has a slot too */
        }
}

/* ---- 8. ZeRO-2 keeps no whole gradient ------------------------------------------------- */

/* Four 256 x 256 layers (about 1 MiB of gradients, 64 KiB buckets: one per weight or more). */
#define BIG 256
typedef struct big {
    rp_params *params;
    rp_linear_layer l[4];
    rp_optimizer *opt;
    long resident[2]; /* pages of the gradient block resident: after backward, after the step */
    long outside[2];  /* ... of them outside the optimizer's range (the shard) */
    long shard_pages; /* the pages wholly inside the shard */
    float shard_max;  /* the largest |gradient| inside the shard after the reduction */
    float rest_max;   /* ... and outside it */
    long faults;      /* page faults of the replica's thread in the last step's backward */
    float *values;    /* the values after the run (big_values) */
} big;

/* big_step runs the layers in the reverse of their declaration: backward finishes the first
   declared first, whose bucket reduces last (buckets are cut from the end of the block). */
static bool big_reverse;

static long resident_pages(const void *p, size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)p + bytes) / (uintptr_t)page * (uintptr_t)page;
    if (hi <= lo) return 0;
    size_t n = (hi - lo) / (size_t)page;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)lo, hi - lo, vec), 0);
    long count = 0;
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
}

static rp_status big_build(rp_replica *rep, void *arg)
{
    (void)arg;
    big *m = calloc(1, sizeof *m);
    if (!m) return RP_ERR_NOMEM;
    rp_replica_set_user(rep, m);
    RP_CHECK(rp_params_create(&m->params));
    for (int k = 0; k < 4; k++) {
        char name[8];
        snprintf(name, sizeof name, "l%d", k);
        RP_CHECK(rp_linear_layer_init(&m->l[k], m->params, name, BIG, BIG, true, true));
    }
    RP_CHECK(rp_params_finalize(m->params, 3));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &m->opt, m->params, &oc);
}

/* The reduction's hook: runs after the runtime's `before`, with the reduced shard in place. */
static rp_status big_before(rp_optimizer *opt, void *ctx)
{
    big *m = ctx;
    int64_t lo, hi, P = rp_params_trainable_numel(m->params);
    rp_optimizer_range(opt, &lo, &hi);
    float *g = malloc((size_t)P * sizeof(float));
    if (!g) return RP_ERR_NOMEM;
    RP_CHECK(rp_params_read_grads(m->params, g));
    for (int64_t i = 0; i < P; i++) {
        float *most = i >= lo && i < hi ? &m->shard_max : &m->rest_max;
        if (fabsf(g[i]) > *most) *most = fabsf(g[i]);
    }
    free(g);
    return RP_OK;
}

/* The layer (in the order used) the passes after the first leave out, or -1. */
static int big_skip = -1;

/* One forward and backward pass of the big network, on the replica's data for that pass. */
static rp_status big_backward(rp_replica *rep, big *m, int pass)
{
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    float x[4 * BIG];
    tu_fill(x, 4 * BIG, 11 + (uint64_t)rp_replica_id(rep) + 7 * (uint64_t)pass, -1.0f, 1.0f);
    rp_tensor *h = rp_tensor_new(t, 2, (int[]){4, BIG});
    if (!h) return rp_last_status();
    RP_CHECK(rp_tensor_write(h, x, 4 * BIG));
    for (int k = 0; k < 4; k++)
        if (!pass || k != big_skip)
            h = rp_linear_layer_forward(t, &m->l[big_reverse ? 3 - k : k], h);
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), 4 * sizeof(int32_t));
    if (!y) return rp_last_status();
    for (int i = 0; i < 4; i++)
        y[i] = (i + pass) % 4;
    rp_tensor *loss = rp_softmax_cross_entropy(t, h, y);
    if (!loss) return rp_last_status();
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    RP_CHECK(rp_backward(t, loss));
    getrusage(RUSAGE_THREAD, &after);
    m->faults = after.ru_minflt - before.ru_minflt + after.ru_majflt - before.ru_majflt;
    return RP_OK;
}

/* Backward passes before each step (gradient accumulation), and the bucket size of big_run. */
static int big_passes = 1;
static size_t big_bucket = 64 << 10;

static rp_status big_step(rp_replica *rep, void *arg)
{
    (void)arg;
    big *m = rp_replica_user(rep);
    if (!m->shard_max && !m->rest_max) {
        rp_optimizer_hooks h = {.before = big_before};
        RP_CHECK(rp_optimizer_add_hooks(m->opt, &h, m));
    }
    for (int pass = 0; pass < big_passes; pass++)
        RP_CHECK(big_backward(rep, m, pass));
    int64_t lo, hi, P = rp_params_trainable_numel(m->params);
    rp_optimizer_range(m->opt, &lo, &hi);
    const float *g = rp_params_grad(m->params);
    for (int k = 0; k < 2; k++) {
        if (k) RP_CHECK(rp_optimizer_step(m->opt, 0.01f));
        m->resident[k] = resident_pages(g, (size_t)P * sizeof(float));
        m->outside[k] = resident_pages(g, (size_t)lo * sizeof(float)) +
                        resident_pages(g + hi, (size_t)(P - hi) * sizeof(float));
    }
    m->shard_pages = (long)((size_t)(hi - lo) * sizeof(float) / (size_t)sysconf(_SC_PAGESIZE)) - 1;
    return RP_OK;
}

/* The values, whole on every replica (ZeRO-3 gathers them). */
static rp_status big_values(rp_replica *rep, void *arg)
{
    (void)arg;
    big *m = rp_replica_user(rep);
    RP_CHECK(rp_replica_optimizer_fetch(rep, m->opt));
    m->values = malloc((size_t)rp_params_numel(m->params) * sizeof(float));
    if (!m->values) return RP_ERR_NOMEM;
    return rp_params_read_values(m->params, m->values);
}

static rp_status big_destroy(rp_replica *rep, void *arg)
{
    (void)arg;
    big *m = rp_replica_user(rep);
    rp_optimizer_destroy(m->opt);
    rp_params_destroy(m->params);
    free(m);
    return RP_OK;
}

static void big_run(rp_strategy_kind kind, big *out)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 2;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.strategy = kind;
    cfg.bucket_bytes = big_bucket;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    tu_run_ok(r, big_build, NULL);
    tu_run_ok(r, big_step, NULL);
    tu_run_ok(r, big_step, NULL);
    tu_run_ok(r, big_values, NULL);
    for (int q = 0; q < 2; q++)
        out[q] = *(big *)rp_replica_user(rp_replicator_replica(r, q));
    tu_run_ok(r, big_destroy, NULL);
    rp_replicator_destroy(r);
}

static void test_zero2_releases(void **state)
{
    (void)state;
    /* The strict table keeps its storage in a mapping of its own, which it only fills. */
    if (!strcmp(rp_kernels_name(), "strict")) skip();
    big sync[2], z1[2], z2[2];
    big_run(RP_STRATEGY_SYNC, sync);
    big_run(RP_STRATEGY_ZERO1, z1);
    big_run(RP_STRATEGY_ZERO2, z2);
    long pages = (long)((4 * (BIG * BIG + BIG)) * sizeof(float) / (size_t)sysconf(_SC_PAGESIZE));
    for (int q = 0; q < 2; q++) {
        /* Sync and ZeRO-1 keep the whole gradient after backward (and zero it in place). */
        assert_true(sync[q].resident[0] >= pages - 2);
        assert_true(z1[q].resident[0] >= pages - 2);
        assert_true(z1[q].resident[1] >= pages - 2);
        /* ZeRO-2: every bucket was released as it was reduced, and the step released the rest
           (a page at each bucket's edge may be left, shared with the next bucket); the shard
           of the gradients stays, in place, from step to step. */
        assert_true(z2[q].outside[0] <= 8);
        assert_true(z2[q].outside[1] <= 8);
        assert_true(z2[q].shard_pages > 32);
        assert_true(z2[q].resident[0] >= z2[q].shard_pages);
        assert_true(z2[q].resident[1] >= z2[q].shard_pages);
        /* The reduced shard is in place for the hooks after the runtime's; zeros elsewhere. */
        assert_true(z2[q].shard_max > 0.0f);
        assert_true(z2[q].rest_max == 0.0f);
        assert_true(z1[q].rest_max > 0.0f); /* ZeRO-1 leaves the local gradients there */
        free(sync[q].values);
        free(z1[q].values);
        free(z2[q].values);
    }
}

/*
 * ZeRO-2 and 3 write each bucket's gradients into a gradient buffer that stays resident, not into
 * the block's pages (given back after each reduction, so a fault a page when written again): the
 * second step's backward faults no gradient page in. The sync strategy zeroes its block in place
 * (no faults either); without the buffers ZeRO-2 faulted in the whole block outside what stayed
 * resident (4 x 65,792 values: 257 pages here, 129 outside the shard), and ZeRO-3, which kept its
 * reduced shard in a buffer of its own and gave both copies' pages back, the shard (128).
 */
static void test_zero2_buffers(void **state)
{
    (void)state;
    if (!strcmp(rp_kernels_name(), "strict")) skip();
    big sync[2], z2[2], z3[2];
    big_run(RP_STRATEGY_SYNC, sync);
    big_run(RP_STRATEGY_ZERO2, z2);
    big_run(RP_STRATEGY_ZERO3, z3);
    /* AddressSanitizer's allocator faults pages of its own (its quarantine hands out fresh
       memory): there the counts say nothing about the runtime's. */
#if defined(__SANITIZE_ADDRESS__)
    bool counted = false;
#else
    bool counted = true;
#endif
    for (int q = 0; q < 2 && counted; q++) {
        /* A few pages of the tape's own, at most: nothing of a bucket's 64 KiB (16 pages). */
        assert_true(sync[q].faults < 16);
        assert_true(z2[q].faults < 16);
        /* ZeRO-3 too: the reduced shard is kept in place, whose pages the step keeps. */
        assert_true(z3[q].faults < 16);
    }
    for (int q = 0; q < 2; q++) {
        assert_true(z2[q].outside[0] <= 8); /* and the rest of the block stays released */
        assert_true(z3[q].outside[1] <= 8);
        assert_true(memcmp(z2[q].values, sync[q].values,
                           (size_t)(4 * (BIG * BIG + BIG)) * sizeof(float)) == 0);
        free(sync[q].values);
        free(z2[q].values);
        free(z3[q].values);
    }
}

/*
 * Buckets reduce in order, so a network that finishes its first bucket last in backward keeps
 * every other bucket waiting: two take the gradient buffers, the others are written in the block
 * (as before the buffers) - the values stay bitwise the sync strategy's, on every stage.
 */
static void test_zero2_buffers_taken(void **state)
{
    (void)state;
    big_reverse = true;
    big sync[2], z2[2], z3[2];
    big_run(RP_STRATEGY_SYNC, sync);
    big_run(RP_STRATEGY_ZERO2, z2);
    big_run(RP_STRATEGY_ZERO3, z3);
    big_reverse = false;
    size_t bytes = (size_t)(4 * (BIG * BIG + BIG)) * sizeof(float);
    for (int q = 0; q < 2; q++) {
        assert_true(memcmp(z2[q].values, sync[q].values, bytes) == 0);
        assert_true(memcmp(z3[q].values, sync[q].values, bytes) == 0);
        assert_true(memcmp(sync[q].values, sync[0].values, bytes) == 0);
        assert_true(sync[q].shard_max > 0.0f); /* the run trained */
    }
    for (int q = 0; q < 2; q++) {
        free(sync[q].values);
        free(z2[q].values);
        free(z3[q].values);
    }
}

/*
 * Gradient accumulation with the buffers taken: in the second backward the first declared layer's
 * bucket, whose shard part is kept in the block since the first, is written in the block again
 * (every buffer is taken), so its kept part is set aside and added back after its reduction. The
 * reductions are elementwise, so where a bucket's gradients were written changes nothing: the
 * values equal bitwise those of one bucket for everything (never two in flight, never in the
 * block), and the sync strategy's within 1e-6 (it reduces the accumulated sums again instead).
 * Then the second backward leaves a layer out: its buckets, reduced again with nothing written
 * since, are reduced from zeros, not from the kept shard in the block; and one bucket for
 * everything, which that pass never completes, is still reduced again at the step (it was not, in
 * every strategy, before 2026-12-07).
 */
static void check_accumulation_taken(void)
{
    big_reverse = true;
    big_passes = 2;
    big sync[2], sync1[2], z[2][2], one[2][2];
    big_run(RP_STRATEGY_SYNC, sync);
    big_bucket = 64 << 20;
    big_run(RP_STRATEGY_SYNC, sync1);
    big_bucket = 64 << 10;
    for (int k = 0; k < 2; k++) {
        big_run(k ? RP_STRATEGY_ZERO3 : RP_STRATEGY_ZERO2, z[k]);
        big_bucket = 64 << 20;
        big_run(k ? RP_STRATEGY_ZERO3 : RP_STRATEGY_ZERO2, one[k]);
        big_bucket = 64 << 10;
    }
    big_reverse = false;
    big_passes = 1;
    int64_t n = 4 * (BIG * BIG + BIG);
    for (int q = 0; q < 2; q++) {
        for (int k = 0; k < 2; k++) {
            assert_true(memcmp(z[k][q].values, one[k][q].values, (size_t)n * sizeof(float)) == 0);
            tu_check_close(z[k][q].values, sync[q].values, n, 1e-6, "accumulated, buffers taken");
            free(z[k][q].values);
            free(one[k][q].values);
        }
        /* One bucket: the sync strategy too reduces it again although it did not complete. */
        tu_check_close(sync1[q].values, sync[q].values, n, 1e-6, "sync, one bucket");
        assert_true(memcmp(sync1[q].values, sync1[0].values, (size_t)n * sizeof(float)) == 0);
        assert_true(sync[q].shard_max > 0.0f);
    }
    for (int q = 0; q < 2; q++) {
        free(sync[q].values);
        free(sync1[q].values);
    }
}

static void test_zero2_accumulation_taken(void **state)
{
    (void)state;
    for (int skip = -1; skip <= 1; skip += 2) {
        big_skip = skip;
        check_accumulation_taken();
    }
    big_skip = -1;
}

/* ---- 9. HSDP: ZeRO in groups ---------------------------------------------------------- */

static void test_hsdp(void **state)
{
    (void)state;
    rp_optim_kind kinds[3] = {RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_ADAMW};
    for (int stage = 1; stage <= 3; stage++)
        for (int k = 0; k < 3; k++) {
            zero_stage = stage;
            job s = make_job(kinds[k], 5), h = make_job(kinds[k], 5), z = make_job(kinds[k], 5),
                w = make_job(kinds[k], 5);
            h.hsdp = 2;
            w.hsdp = 4; /* one group of every replica: plain ZeRO */
            h.clip = s.clip = 0.05f;
            assert_int_equal(run_job(&s, 4, false, 16), RP_OK);
            assert_int_equal(run_job(&h, 4, true, 16), RP_OK);
            z.clip = w.clip = 0.0f;
            assert_int_equal(run_job(&z, 4, true, 16), RP_OK);
            assert_int_equal(run_job(&w, 4, true, 16), RP_OK);
            char what[64];
            snprintf(what, sizeof what, "HSDP 2 x 2, ZeRO-%d, kind %d", stage, (int)kinds[k]);
            tu_check_close(h.out, s.out, NP, 1e-5, what);
            assert_bitwise(w.out, z.out, "hsdp = replicas is plain ZeRO");
            /* Half of the state on each replica of a group (shards of 27 and 26 values). */
            for (int q = 0; q < 4; q++) {
                int64_t lo = (q % 2) * 27, hi = lo + 27 < NP ? lo + 27 : NP;
                int slots = kinds[k] == RP_OPTIM_SGD ? 1 : 2; /* Nesterov momentum: one */
                assert_int_equal(h.bytes[q], (size_t)(slots * (hi - lo)) * sizeof(float));
                assert_true(fabsf(h.norm[q] - s.norm[0]) <= 1e-6f * s.norm[0]);
            }
        }
    zero_stage = 1;
}

static void test_hsdp_errors(void **state)
{
    (void)state;
    for (int stage = 1; stage <= 3; stage++) {
        zero_stage = stage;
        job j = make_job(RP_OPTIM_ADAM, 3);
        j.hsdp = 2;
        j.nan_replica = 3;
        j.nan_step = 1;
        assert_int_equal(run_job(&j, 4, true, 16), RP_ERR_NUMERIC);
        tu_assert_error_contains("replica 3's own gradient of parameter 'l");
        tu_assert_error_contains("no parameter was updated");
    }
    zero_stage = 1;
    /* Save under HSDP, resume on 2 plain replicas: as sync's checkpoint resumed. */
    rp_checkpoint *cs, *ch;
    assert_int_equal(rp_checkpoint_create(&cs), RP_OK);
    assert_int_equal(rp_checkpoint_create(&ch), RP_OK);
    job s1 = make_job(RP_OPTIM_ADAM, 3), h1 = make_job(RP_OPTIM_ADAM, 3);
    h1.hsdp = 2;
    s1.save = cs;
    h1.save = ch;
    assert_int_equal(run_job(&s1, 4, false, 0), RP_OK);
    assert_int_equal(run_job(&h1, 4, true, 0), RP_OK);
    job s2 = make_job(RP_OPTIM_ADAM, 3), h2 = make_job(RP_OPTIM_ADAM, 3);
    s2.step0 = h2.step0 = 3;
    s2.resume = cs;
    h2.resume = ch;
    assert_int_equal(run_job(&s2, 2, false, 0), RP_OK);
    assert_int_equal(run_job(&h2, 2, false, 0), RP_OK);
    tu_check_close(h2.out, s2.out, NP, 1e-5, "HSDP checkpoint resumed on 2");
    rp_checkpoint_destroy(cs);
    rp_checkpoint_destroy(ch);
    /* Refused: groups that do not divide the replicas; HSDP without ZeRO. */
    job bad = make_job(RP_OPTIM_SGD, 1);
    bad.hsdp = 3;
    assert_int_equal(run_job(&bad, 4, true, 0), RP_ERR_INVALID);
    tu_assert_error_contains("hsdp = 3 does not divide the 4 replicas");
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 4;
    cfg.hsdp = 2;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains("give strategy zero1, zero2 or zero3");
}

#define ZERO2_CASE(f)                                                                              \
    {                                                                                              \
#f "_zero2", f, setup_zero2, teardown_zero2, NULL                                          \
    }
#define ZERO3_CASE(f)                                                                              \
    {                                                                                              \
#f "_zero3", f, setup_zero3, teardown_zero2, NULL                                          \
    }

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optimizer_range),
        cmocka_unit_test(test_equal_sgd),
        cmocka_unit_test(test_equal_adam),
        cmocka_unit_test(test_equal_accumulation),
        cmocka_unit_test(test_equal_bf16),
        cmocka_unit_test(test_non_dividing),
        cmocka_unit_test(test_state_bytes),
        cmocka_unit_test(test_resume_4_to_2),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_strategy_enum),
        ZERO2_CASE(test_equal_sgd),
        ZERO2_CASE(test_equal_adam),
        ZERO2_CASE(test_equal_accumulation),
        ZERO2_CASE(test_equal_bf16),
        ZERO2_CASE(test_non_dividing),
        ZERO2_CASE(test_state_bytes),
        ZERO2_CASE(test_resume_4_to_2),
        ZERO2_CASE(test_clip),
        ZERO2_CASE(test_nonfinite),
        ZERO3_CASE(test_equal_sgd),
        ZERO3_CASE(test_equal_adam),
        ZERO3_CASE(test_equal_accumulation),
        ZERO3_CASE(test_equal_bf16),
        ZERO3_CASE(test_non_dividing),
        ZERO3_CASE(test_state_bytes),
        ZERO3_CASE(test_resume_4_to_2),
        ZERO3_CASE(test_clip),
        ZERO3_CASE(test_nonfinite),
        cmocka_unit_test(test_zero2_releases),
        cmocka_unit_test(test_zero2_buffers),
        cmocka_unit_test(test_zero2_buffers_taken),
        cmocka_unit_test(test_zero2_accumulation_taken),
        cmocka_unit_test(test_hsdp),
        cmocka_unit_test(test_hsdp_errors),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
