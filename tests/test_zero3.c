/*
 * test_zero3.c - ZeRO-3 (RP_STRATEGY_ZERO3): each replica keeps its shard of the parameter values
 * between uses, and the tape gathers a unit of parameters when an op takes one of them
 * (src/replicator/param_residency.c). On a network of more units than a replica holds at once
 * (8 linear layers, a unit each with buckets of 16 bytes: every forward and backward releases
 * and gathers again):
 *  - the values after 4 steps are bitwise the sync strategy's, with SGD (Nesterov), Adam and
 *    AdamW, on 2, 3 and 4 replicas (threads), with units of 16 bytes and of 1 MiB (one unit);
 *  - an evaluation forward on every replica (the tape not recording) with the values sharded
 *    gives bitwise the sync run's logits, and a second one makes no collective (after the first
 *    pass every unit stays present);
 *  - the broadcasts of a step (the runtime's, counted by the communicator) are exactly the
 *    planner's line "parameter units (ZeRO-3)": calls and bytes (rp_plan_runtime);
 *  - memory: in training the units live in two gather buffers as long as the largest unit (the
 *    runtime's bytes are ZeRO-2's and these), and the value block holds no page outside the
 *    shard after backward or after the step (ZeRO-1 holds every page), counted with mincore;
 *  - an op that would read a parameter the gathers cannot follow is refused with a message
 *    naming it: a view (rp_reshape) of a parameter, an op of more than TAPE_USE_HELD (2)
 *    trainable parameters;
 *  - with keep_gathered (FSDP's reshard_after_forward=False): the same values bitwise, each unit
 *    gathered once a step (forward only; the plan's count, exactly), no gather buffers, every
 *    value resident after backward and only the shard after the step; refused without ZeRO-3;
 *  - with prefetch (the next unit's gather started by messages when a unit is used): the same
 *    values and logits bitwise, alone and with keep_gathered; the step's messages and broadcasts
 *    exactly the plan's (one broadcast gather a step, forward's first; the rest sent and received
 *    one unit ahead), one more gather buffer; refused without ZeRO-3.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define L    8 /* linear layers */
#define W    8 /* their width */
#define IN   6
#define OUT  3
#define GB   12 /* the global batch */
#define MAXP (IN * W + W + (L - 2) * (W * W + W) + W * OUT + OUT)

typedef struct net {
    rp_params *params;
    rp_linear_layer l[L];
    rp_optimizer *opt;
    float logits[GB * OUT]; /* this replica's rows of the last evaluation */
} net;

typedef struct job {
    rp_optim_config oc;
    bool keep;       /* cfg.keep_gathered */
    bool prefetch;   /* cfg.prefetch */
    int width;       /* of the hidden layers (W; the memory test's is larger) */
    float out[MAXP]; /* replica 0's values after the run (fetched) */
    float logits[GB * OUT];
    rp_comm_stats step;  /* the runtime's traffic in the last step, replica 0 */
    rp_comm_stats eval2; /* ... in the second evaluation */
    rp_plan_worker plan; /* replica 0's plan */
    long outside[3];     /* value pages resident outside the last replica's shard: after
                            backward, after the step, after the evaluations */
    size_t runtime[2];   /* the last replica's rp_replica_strategy_bytes after backward: allocated,
                            resident */
    const rp_checkpoint *resume; /* read at build by every replica (replica 0 only: first_only) */
    bool first_only, publish;    /* ... and then rp_replica_optimizer_publish */
    bool write;                  /* instead: rp_params_write_values of values made from a seed */
    long read_outside;           /* value pages resident outside the last replica's shard after */
} job;

static long outside_pages(net *m);

static int step_no;

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = calloc(1, sizeof *m);
    if (!m) return RP_ERR_NOMEM;
    rp_replica_set_user(rep, m);
    RP_CHECK(rp_params_create(&m->params));
    for (int k = 0; k < L; k++) {
        char name[8];
        snprintf(name, sizeof name, "l%d", k);
        int in = k == 0 ? IN : j->width, out = k == L - 1 ? OUT : j->width;
        RP_CHECK(rp_linear_layer_init(&m->l[k], m->params, name, in, out, true, k < L - 1));
    }
    RP_CHECK(rp_params_finalize(m->params, 5 + (uint64_t)rp_replica_id(rep)));
    RP_CHECK(rp_replica_optimizer_create(rep, &m->opt, m->params, &j->oc));
    if (!j->resume && !j->write) return RP_OK;
    if (j->write) {
        int64_t n = rp_params_numel(m->params);
        float *v = malloc((size_t)n * sizeof(float));
        if (!v) return RP_ERR_NOMEM;
        tu_fill(v, n, 77, -0.2f, 0.2f);
        rp_status status = rp_params_write_values(m->params, v);
        free(v);
        RP_CHECK(status);
    } else if (!j->first_only || rp_replica_id(rep) == 0) {
        RP_CHECK(rp_checkpoint_read_params(j->resume, m->params, "param/"));
    }
    if (rp_replica_id(rep) == rp_replica_count(rep) - 1) j->read_outside = outside_pages(m);
    return j->publish ? rp_replica_optimizer_publish(rep, m->opt) : RP_OK;
}

/* The values of the network of hidden width `width` made with `seed`, as a checkpoint. */
static rp_checkpoint *values_checkpoint(int width, uint64_t seed)
{
    rp_checkpoint *ck;
    rp_params *p;
    rp_linear_layer l[L];
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_params_create(&p), RP_OK);
    for (int k = 0; k < L; k++) {
        char name[8];
        snprintf(name, sizeof name, "l%d", k);
        int in = k == 0 ? IN : width, out = k == L - 1 ? OUT : width;
        assert_int_equal(rp_linear_layer_init(&l[k], p, name, in, out, true, k < L - 1), RP_OK);
    }
    assert_int_equal(rp_params_finalize(p, seed), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, p, "param/"), RP_OK);
    rp_params_destroy(p);
    return ck;
}

static rp_tensor *forward(rp_tape *t, net *m, int id, int n, int64_t s, int32_t **labels)
{
    float x[GB * IN];
    tu_fill(x, GB * IN, 300 + (uint64_t)s, -1.0f, 1.0f);
    int rows = GB / n, r0 = id * rows;
    rp_tensor *h = rp_tensor_new(t, 2, (int[]){rows, IN});
    *labels = rp_arena_alloc(rp_tape_arena(t), (size_t)rows * sizeof(int32_t));
    if (!h || !*labels || rp_tensor_write(h, x + r0 * IN, (int64_t)rows * IN) != RP_OK) return NULL;
    for (int k = 0; k < rows; k++)
        (*labels)[k] = (int32_t)((r0 + k + s) % OUT);
    for (int k = 0; k < L; k++) {
        h = rp_linear_layer_forward(t, &m->l[k], h);
        if (k < L - 1) h = rp_relu(t, h);
    }
    return h;
}

/* Value pages resident outside this replica's range of the optimizer (its shard). */
static long outside_pages(net *m)
{
    long page = sysconf(_SC_PAGESIZE);
    int64_t lo, hi, P = rp_params_trainable_numel(m->params);
    rp_optimizer_range(m->opt, &lo, &hi);
    const char *base = (const char *)rp_params_data(m->params);
    uintptr_t a = ((uintptr_t)base + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t b = ((uintptr_t)base + (size_t)P * sizeof(float)) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t s0 = (uintptr_t)(base + lo * (int64_t)sizeof(float)),
              s1 = (uintptr_t)(base + hi * (int64_t)sizeof(float));
    if (b <= a) return 0;
    size_t n = (b - a) / (size_t)page;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)a, b - a, vec), 0);
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        uintptr_t p = a + i * (size_t)page;
        if ((vec[i] & 1) && (p + (uintptr_t)page <= s0 || p >= s1)) count++;
    }
    free(vec);
    return count;
}

static rp_status step(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    rp_comm_stats before, after;
    RP_CHECK(rp_comm_stats_get(rp_replica_comm(rep), &before));
    int32_t *y = NULL;
    rp_tensor *z = forward(t, m, rp_replica_id(rep), rp_replica_count(rep), step_no, &y);
    rp_tensor *loss = rp_softmax_cross_entropy(t, z, y);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    bool first = rp_replica_id(rep) == 0, last = rp_replica_id(rep) == rp_replica_count(rep) - 1;
    if (last) {
        j->outside[0] = outside_pages(m);
        j->runtime[0] = rp_replica_strategy_bytes(rep, m->opt, false);
        j->runtime[1] = rp_replica_strategy_bytes(rep, m->opt, true);
    }
    RP_CHECK(rp_optimizer_step(m->opt, 0.05f + 0.01f * (float)(step_no % 3)));
    RP_CHECK(rp_comm_stats_get(rp_replica_comm(rep), &after));
    if (last) j->outside[1] = outside_pages(m);
    if (first) rp_comm_stats_diff(&after, &before, &j->step);
    return RP_OK;
}

/* A forward without recording: this replica's rows of a fixed batch. */
static rp_status evaluate(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    rp_tape_set_recording(t, false);
    rp_comm_stats before, after;
    RP_CHECK(rp_comm_stats_get(rp_replica_comm(rep), &before));
    int32_t *y = NULL;
    rp_tensor *z = forward(t, m, rp_replica_id(rep), rp_replica_count(rep), 99, &y);
    rp_tape_set_recording(t, true);
    if (!z) return rp_last_status();
    RP_CHECK(rp_tensor_read(z, m->logits, z->numel));
    RP_CHECK(rp_comm_stats_get(rp_replica_comm(rep), &after));
    if (rp_replica_id(rep) == 0) rp_comm_stats_diff(&after, &before, &j->eval2);
    return RP_OK;
}

static rp_status fetch(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    return rp_replica_optimizer_fetch(rep, m->opt);
}

static rp_status destroy(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    rp_optimizer_destroy(m->opt);
    rp_params_destroy(m->params);
    free(m);
    return RP_OK;
}

/* `steps` steps on n replicas with strategy kind, two evaluations, then the values fetched. */
static void run(job *j, rp_strategy_kind kind, int n, size_t bucket, int steps)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = n;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.strategy = kind;
    cfg.bucket_bytes = bucket;
    cfg.keep_gathered = j->keep;
    cfg.prefetch = j->prefetch;
    if (!j->width) j->width = W;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    tu_run_ok(r, build, j);
    for (step_no = 0; step_no < steps; step_no++)
        tu_run_ok(r, step, j);
    tu_run_ok(r, evaluate, j);
    tu_run_ok(r, evaluate, j);
    for (int q = 0; q < n; q++) {
        net *m = rp_replica_user(rp_replicator_replica(r, q));
        memcpy(j->logits + q * (GB / n) * OUT, m->logits, (size_t)(GB / n) * OUT * sizeof(float));
    }
    net *m0 = rp_replica_user(rp_replicator_replica(r, 0));
    j->outside[2] = outside_pages(rp_replica_user(rp_replicator_replica(r, n - 1)));
    assert_int_equal(rp_plan_runtime(&cfg, n, 0, m0->params, &j->oc, &j->plan), RP_OK);
    tu_run_ok(r, fetch, j);
    if (rp_params_trainable_numel(m0->params) <= MAXP)
        assert_int_equal(rp_params_read_values(m0->params, j->out), RP_OK);
    tu_run_ok(r, destroy, j);
    rp_replicator_destroy(r);
}

static job make_job(rp_optim_kind kind)
{
    job j;
    memset(&j, 0, sizeof j);
    j.oc = rp_optim_config_default();
    j.oc.kind = kind;
    j.oc.weight_decay = 0.01f;
    if (kind == RP_OPTIM_SGD) j.oc.nesterov = true;
    return j;
}

static const rp_comm_tally *runtime(const rp_comm_stats *s, rp_flight_kind kind)
{
    return &s->by[RP_COMM_RUNTIME][kind];
}

static void test_equal_sync(void **state)
{
    (void)state;
    rp_optim_kind kinds[3] = {RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_ADAMW};
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k < 3; k++)
            for (int b = 0; b < 2; b++) {
                size_t bucket = b ? (size_t)1 << 20 : 16;
                job s = make_job(kinds[k]), z = make_job(kinds[k]);
                run(&s, RP_STRATEGY_SYNC, n, bucket, 4);
                run(&z, RP_STRATEGY_ZERO3, n, bucket, 4);
                int P = MAXP;
                char what[96];
                snprintf(what, sizeof what, "ZeRO-3, %d replicas, kind %d, bucket %zu", n,
                         (int)kinds[k], bucket);
                if (memcmp(z.out, s.out, (size_t)P * sizeof(float)) != 0) fail_msg("%s", what);
                /* Evaluated with the values sharded: the sync run's logits, bitwise. */
                if (memcmp(z.logits, s.logits, sizeof s.logits) != 0)
                    fail_msg("%s: evaluation", what);
                /* The second evaluation gathered nothing: every unit was still present. */
                assert_int_equal(runtime(&z.eval2, RP_FLIGHT_BROADCAST)->calls, 0);
                /* The values moved from the start. */
                job c = make_job(kinds[k]);
                run(&c, RP_STRATEGY_ZERO3, n, bucket, 0);
                assert_true(memcmp(c.out, z.out, (size_t)P * sizeof(float)) != 0);
            }
}

static void test_traffic_is_planned(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n++) {
        job z = make_job(RP_OPTIM_ADAM);
        run(&z, RP_STRATEGY_ZERO3, n, 16, 3);
        const rp_plan_traffic *line = NULL;
        for (int i = 0; i < z.plan.ntraffic; i++)
            if (!strcmp(z.plan.traffic[i].what, "parameter units (ZeRO-3)"))
                line = &z.plan.traffic[i];
        assert_non_null(line);
        assert_int_equal(line->kind, RP_FLIGHT_BROADCAST);
        const rp_comm_tally *got = runtime(&z.step, RP_FLIGHT_BROADCAST);
        /* 15 units (a layer's weight and bias each, the last layer's together): 15 gathered in
           forward, 13 in backward. */
        assert_true(got->calls >= 28);
        assert_int_equal(got->calls, line->calls);
        assert_int_equal(got->bytes, line->bytes);
        /* No all-gather of the values after the update (ZeRO-1 and 2 make one per bucket). */
        bool gather = false;
        for (int i = 0; i < z.plan.ntraffic; i++)
            gather = gather || !strcmp(z.plan.traffic[i].what, "parameter shards");
        assert_false(gather);
    }
}

static void test_releases_values(void **state)
{
    (void)state;
    if (!strcmp(rp_kernels_name(), "strict")) skip(); /* its storage is a mapping it only fills */
    long page = sysconf(_SC_PAGESIZE);
    /* Hidden layers of 256 x 256: a weight is 64 pages, a unit (buckets of 64 KiB) each. */
    job z = make_job(RP_OPTIM_SGD), one = make_job(RP_OPTIM_SGD);
    z.width = one.width = 256;
    job two = make_job(RP_OPTIM_SGD);
    two.width = 256;
    run(&z, RP_STRATEGY_ZERO3, 2, 64 << 10, 2);
    run(&one, RP_STRATEGY_ZERO1, 2, 64 << 10, 2);
    run(&two, RP_STRATEGY_ZERO2, 2, 64 << 10, 2);
    long layer = (long)(256 * 256 * sizeof(float)) / page;
    /* ZeRO-1 holds every page of the block. */
    assert_true(one.outside[1] >= 3 * layer);
    /* ZeRO-3 trains with the units in its two gather buffers, each as long as the largest unit
       (layer 6's weight and bias with layer 7's, whose 3 KiB fall under the 64 KiB cut: the
       runtime's buffers are ZeRO-2's and these), and the block
       holds nothing outside the shard after backward or after the step (a page at a unit's edge
       may be left from the first step, which started from whole values). */
    size_t unit = (256 * 256 + 256 + 256 * OUT + OUT) * sizeof(float);
    assert_int_equal(z.runtime[0], two.runtime[0] + 2 * unit);
    /* After backward they hold the units of layers 0 and 1: one holds layer 1's 257 KiB, the
       other gave the pages past layer 0's 7 KiB back when it took it, so about a unit of what
       is allocated is not resident. */
    assert_true(z.runtime[1] >= (256 * 256 + 256) * sizeof(float));
    assert_true(z.runtime[1] + unit - 16 * (size_t)page <= z.runtime[0]);
    assert_true(z.outside[0] <= 2 * L);
    assert_true(z.outside[1] <= 2 * L);
    /* After the evaluations every unit is present (they release nothing). */
    assert_true(z.outside[2] >= 3 * layer);
}

/*
 * A checkpoint read into a ZeRO-3 replica's list writes its shard of the values only (the other
 * replicas read theirs), as rp_params_write_values does, and leaves no page outside it resident:
 * before 2026-12-07 every replica
 * wrote the whole values, and their pages stayed resident for the rest of the run, since later
 * gathers go to the gather buffers. The run goes on bitwise as the sync run's from the same
 * checkpoint, with and without rp_replica_optimizer_publish after the read (every replica read:
 * only the buffers go from replica 0); a publish after a read into replica 0 alone is refused
 * (the others' shards were never read), naming what to do.
 */
static void test_resume_reads_shard(void **state)
{
    (void)state;
    bool strict = !strcmp(rp_kernels_name(), "strict"); /* a mapping it only fills */
    rp_checkpoint *big = values_checkpoint(256, 41), *small = values_checkpoint(W, 43);
    long layer = (long)(256 * 256 * sizeof(float)) / sysconf(_SC_PAGESIZE);
    job z = make_job(RP_OPTIM_SGD), one = make_job(RP_OPTIM_SGD);
    z.width = one.width = 256;
    z.resume = one.resume = big;
    run(&z, RP_STRATEGY_ZERO3, 2, 64 << 10, 1);
    run(&one, RP_STRATEGY_ZERO1, 2, 64 << 10, 1);
    /* rp_params_write_values likewise (tensor parallelism's resume scatters with it). */
    job zw = make_job(RP_OPTIM_SGD);
    zw.width = 256;
    zw.write = true;
    run(&zw, RP_STRATEGY_ZERO3, 2, 64 << 10, 1);
    if (!strict) {
        assert_true(one.read_outside >= 3 * layer); /* ZeRO-1 holds the whole values */
        assert_true(z.read_outside <= 2 * L);
        assert_true(zw.read_outside <= 2 * L);
    }
    for (int n = 2; n <= 3; n++) {
        job s = make_job(RP_OPTIM_ADAM), z3 = make_job(RP_OPTIM_ADAM);
        s.write = z3.write = true;
        run(&s, RP_STRATEGY_SYNC, n, 16, 2);
        run(&z3, RP_STRATEGY_ZERO3, n, 16, 2);
        assert_true(memcmp(z3.out, s.out, (size_t)MAXP * sizeof(float)) == 0);
    }
    for (int publish = 0; publish < 2; publish++)
        for (int n = 2; n <= 3; n++) {
            job s = make_job(RP_OPTIM_ADAM), z3 = make_job(RP_OPTIM_ADAM);
            s.resume = z3.resume = small;
            s.publish = z3.publish = publish;
            run(&s, RP_STRATEGY_SYNC, n, 16, 2);
            run(&z3, RP_STRATEGY_ZERO3, n, 16, 2);
            assert_true(memcmp(z3.out, s.out, (size_t)MAXP * sizeof(float)) == 0);
            job fresh = make_job(RP_OPTIM_ADAM); /* the checkpoint's values, not build's */
            run(&fresh, RP_STRATEGY_ZERO3, n, 16, 2);
            assert_true(memcmp(fresh.out, z3.out, (size_t)MAXP * sizeof(float)) != 0);
        }
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 2;
    cfg.timeout_s = 30;
    cfg.strategy = RP_STRATEGY_ZERO3;
    job bad = make_job(RP_OPTIM_SGD);
    bad.width = W;
    bad.resume = small;
    bad.first_only = bad.publish = true;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, build, &bad), RP_ERR_INVALID);
    tu_assert_error_contains("every replica must read");
    tu_run_ok(r, destroy, NULL);
    rp_replicator_destroy(r);
    rp_checkpoint_destroy(big);
    rp_checkpoint_destroy(small);
}

/* ZeRO-3's options (keep_gathered, prefetch) refused under ZeRO-2, with `message`. */
static void refused_without_zero3(bool keep, bool prefetch, const char *message)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 2;
    cfg.strategy = RP_STRATEGY_ZERO2;
    cfg.keep_gathered = keep;
    cfg.prefetch = prefetch;
    rp_replicator *bad = NULL;
    assert_int_equal(rp_replicator_create(&bad, &cfg), RP_ERR_INVALID);
    tu_assert_error_contains(message);
}

/* Replica 0's plan line `what` of kind k, or NULL. */
static const rp_plan_traffic *plan_line(const job *j, rp_flight_kind k, const char *what)
{
    for (int i = 0; i < j->plan.ntraffic; i++)
        if (j->plan.traffic[i].kind == k && !strcmp(j->plan.traffic[i].what, what))
            return &j->plan.traffic[i];
    return NULL;
}

/* The step's tally of kind k equals the plan's line (none: nothing of that kind). */
static void assert_planned(const job *j, rp_flight_kind k, const char *what)
{
    const rp_plan_traffic *line = plan_line(j, k, what);
    const rp_comm_tally *got = runtime(&j->step, k);
    assert_int_equal((int64_t)got->calls, line ? line->calls : 0);
    assert_int_equal((int64_t)got->bytes, line ? line->bytes : 0);
}

static void test_prefetch(void **state)
{
    (void)state;
    bool messages = strcmp(rp_kernels_name(), "strict") != 0; /* host storage only */
    const char *units = "parameter units (ZeRO-3)", *ahead = "parameter units prefetched (ZeRO-3)";
    /* Units of 288 bytes hold a layer each (the last two together): the step asks for them one
       after the other, as the prediction (and the plan) assumes. Units of 16 bytes split a
       layer's weight from its bias, which backward asks for weight first, against the
       prediction: those gathers are broadcasts, made as they are asked for - the same values. */
    for (int n = 2; n <= 4; n++)
        for (int keep = 0; keep < 2; keep++)
            for (int split = 0; split < 2; split++) {
                size_t bucket = split ? 16 : 288;
                job s = make_job(RP_OPTIM_ADAM), z = make_job(RP_OPTIM_ADAM),
                    r = make_job(RP_OPTIM_ADAM);
                z.prefetch = true;
                z.keep = r.keep = keep;
                run(&s, RP_STRATEGY_SYNC, n, bucket, 4);
                run(&z, RP_STRATEGY_ZERO3, n, bucket, 4);
                run(&r, RP_STRATEGY_ZERO3, n, bucket, 4);
                assert_memory_equal(z.out, s.out, (size_t)MAXP * sizeof(float));
                assert_memory_equal(z.logits, s.logits, sizeof s.logits);
                if (split) {
                    /* Fewer broadcasts than without prefetch all the same (forward's are right). */
                    if (messages)
                        assert_true(runtime(&z.step, RP_FLIGHT_BROADCAST)->calls <
                                    runtime(&r.step, RP_FLIGHT_BROADCAST)->calls);
                    continue;
                }
                /* Every gather as planned: the broadcasts, and the messages sent and received. */
                assert_planned(&z, RP_FLIGHT_BROADCAST, units);
                assert_planned(&z, RP_FLIGHT_SEND, ahead);
                assert_planned(&z, RP_FLIGHT_RECV, ahead);
                const rp_comm_tally *bz = runtime(&z.step, RP_FLIGHT_BROADCAST),
                                    *br = runtime(&r.step, RP_FLIGHT_BROADCAST);
                if (!messages) {
                    assert_int_equal(bz->calls, br->calls);
                    continue;
                }
                /* One unit broadcast (forward's first, the first layer's: one owner), the 6 others
                   of forward and the 5 of backward (without keep) by messages; replica 0 owns the
                   first units, so it both sends and receives. */
                assert_int_equal(bz->calls, 1);
                assert_true(runtime(&z.step, RP_FLIGHT_SEND)->calls > 0);
                assert_true(runtime(&z.step, RP_FLIGHT_RECV)->calls > 0);
                /* The evaluation (not recording) prefetches nothing, and gathers nothing again. */
                assert_int_equal(runtime(&z.eval2, RP_FLIGHT_SEND)->calls, 0);
                assert_int_equal(runtime(&z.eval2, RP_FLIGHT_BROADCAST)->calls, 0);
            }
    /* One more gather buffer, for the unit in flight. */
    if (strcmp(rp_kernels_name(), "strict") != 0) {
        job z = make_job(RP_OPTIM_SGD), r = make_job(RP_OPTIM_SGD);
        z.width = r.width = 256;
        z.prefetch = true;
        run(&z, RP_STRATEGY_ZERO3, 2, 64 << 10, 2);
        run(&r, RP_STRATEGY_ZERO3, 2, 64 << 10, 2);
        size_t unit = (256 * 256 + 256 + 256 * OUT + OUT) * sizeof(float);
        assert_int_equal(z.runtime[0], r.runtime[0] + unit);
        assert_true(z.outside[1] <= 2 * L); /* and still only the shard after the step */
    }
    refused_without_zero3(false, true, "prefetch (--prefetch) with strategy zero2");
}

static void test_keep_gathered(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n++) {
        job s = make_job(RP_OPTIM_ADAM), z = make_job(RP_OPTIM_ADAM), r = make_job(RP_OPTIM_ADAM);
        z.keep = true;
        run(&s, RP_STRATEGY_SYNC, n, 16, 4);
        run(&z, RP_STRATEGY_ZERO3, n, 16, 4);
        run(&r, RP_STRATEGY_ZERO3, n, 16, 4);
        assert_memory_equal(z.out, s.out, (size_t)MAXP * sizeof(float));
        assert_memory_equal(z.logits, s.logits, sizeof s.logits);
        /* Each of the 15 units once (in forward), against 28 gathers without keeping. */
        const rp_comm_tally *kept = runtime(&z.step, RP_FLIGHT_BROADCAST);
        const rp_comm_tally *again = runtime(&r.step, RP_FLIGHT_BROADCAST);
        const rp_plan_traffic *line = NULL;
        for (int i = 0; i < z.plan.ntraffic; i++)
            if (!strcmp(z.plan.traffic[i].what, "parameter units (ZeRO-3)"))
                line = &z.plan.traffic[i];
        assert_non_null(line);
        assert_int_equal(kept->calls, line->calls);
        assert_int_equal(kept->bytes, line->bytes);
        assert_true(kept->calls >= 15);
        assert_true(kept->calls < again->calls);
        /* Every value crosses once: the block's bytes outside a replica's shard, about. */
        assert_true(kept->bytes <= (int64_t)MAXP * (int64_t)sizeof(float));
    }
    refused_without_zero3(true, false, "keep_gathered (--keep-gathered) with strategy zero2");
    if (!strcmp(rp_kernels_name(), "strict")) return; /* its storage is a mapping it only fills */
    long page = sysconf(_SC_PAGESIZE), layer = (long)(256 * 256 * sizeof(float)) / page;
    job z = make_job(RP_OPTIM_SGD), two = make_job(RP_OPTIM_SGD);
    z.width = two.width = 256;
    z.keep = true;
    run(&z, RP_STRATEGY_ZERO3, 2, 64 << 10, 2);
    run(&two, RP_STRATEGY_ZERO2, 2, 64 << 10, 2);
    /* No gather buffers: the runtime's buffers are ZeRO-2's. */
    assert_int_equal(z.runtime[0], two.runtime[0]);
    /* After backward the values outside the shard are all there; after the step, gone. */
    assert_true(z.outside[0] >= 3 * layer);
    assert_true(z.outside[1] <= 2 * L);
}

static rp_status bad_view(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    int shape[1] = {(int)m->l[1].w->numel};
    return rp_reshape(t, m->l[1].w, 1, shape) ? RP_OK : rp_last_status();
}

static rp_status bad_many(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    rp_tensor *bs[5] = {m->l[1].b, m->l[2].b, m->l[3].b, m->l[4].b, m->l[5].b};
    return rp_concat(t, bs, 5) ? RP_OK : rp_last_status();
}

static void test_refusals(void **state)
{
    (void)state;
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = 2;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.strategy = RP_STRATEGY_ZERO3;
    cfg.bucket_bytes = 16;
    job j = make_job(RP_OPTIM_SGD);
    j.width = W;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    tu_run_ok(r, build, &j);
    assert_int_equal(rp_replicator_run(r, bad_view, NULL), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("a view of parameter \"l1.weight\"");
    assert_int_equal(rp_replicator_run(r, bad_many, NULL), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("more than 2 trainable parameters (\"l3.bias\" the next)");
    tu_run_ok(r, destroy, NULL);
    rp_replicator_destroy(r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_sync),         cmocka_unit_test(test_traffic_is_planned),
        cmocka_unit_test(test_releases_values),    cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_keep_gathered),      cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_resume_reads_shard),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
