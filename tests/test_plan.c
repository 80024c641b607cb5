/*
 * test_plan.c - the planner's runtime share (replicator/plan.h) against what
 * the runtime does: on 1, 2 and 3 thread replicas, sync and ZeRO-1, with
 * bucket sizes from 64 bytes (a bucket per parameter and more) to 1 MiB (one
 * bucket), the traffic of one optimizer step, read from the data axis's
 * counters (rp_comm_stats), equals rp_plan_runtime's prediction exactly, and
 * each replica's optimizer state equals the predicted bytes. A plan made for
 * another bucket size differs from the counters (the comparison can fail).
 * With gradients in bf16 on the wire (cfg.grad_dtype) the same holds, and the
 * gradient lines carry exactly half the f32 plan's bytes in as many calls.
 * Pipeline stages: ResNet-20 cut into 2 and 3 stages (rp_resnet_partition),
 * run by rp_pipeline_run on thread members with 1, 2 and 4 micro-batches of
 * 2 images: each stage's messages, read from the counters, are exactly
 * rp_plan_pipeline's.
 * Sync groups: 2 groups of 2 and 3 replicas, and 3 of 2, buckets from 64 B
 * to 1 MiB: each replica's traffic on its group's communicator in a batch
 * (rp_replica_next_batch and an optimizer step) equals the plan's group
 * lines exactly, nothing goes over the data axis, the optimizer state is the
 * replica's own copy; the servers' shards are (1 + slots) x P floats.
 * Plus the line bookkeeping (merging, the limit) and the refusals: async,
 * groups of one replica (run as async), groups that do not divide. A
 * strategy chosen as cfg.strategy is planned exactly as its older spelling
 * (cfg.zero, cfg.sync_groups, cfg.regime), and the choices differ.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "models/resnet/resnet.h"
#include "replicator/replicator.h"

#define MAXR 3

/* Parameter sizes that straddle buckets and shards: odd, one large, one tiny. */
static const int SIZES[] = {37, 1000, 3, 513, 64, 129};
#define NSIZES ((int)(sizeof SIZES / sizeof SIZES[0]))

#define MAXG 6 /* replicas in the sync-group layouts */

typedef struct job {
    rp_optim_config oc;
    rp_comm_stats step[MAXG];                /* each replica's data-axis traffic in its step */
    rp_comm_stats group[MAXG];               /* sync groups: its group's traffic in its batch */
    rp_comm_stats shard[MAXG], across[MAXG]; /* HSDP: its group's, and across the groups' */
    size_t optim[MAXG];                      /* its optimizer state bytes after the step */
} job;

typedef struct net {
    rp_params *params;
    rp_optimizer *opt;
} net;

static rp_status make_params(rp_params **p)
{
    RP_CHECK(rp_params_create(p));
    for (int i = 0; i < NSIZES; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        if (!rp_params_add(*p, name, 1, (int[]){SIZES[i]},
                           (rp_init){.kind = RP_INIT_UNIFORM, .value = 1.0f}, true))
            return rp_last_status();
    }
    /* A buffer: counted in the parameters, not in the gradients. */
    if (!rp_params_add(*p, "running", 1, (int[]){16}, (rp_init){.kind = RP_INIT_ZEROS}, false))
        return rp_last_status();
    return rp_params_finalize(*p, 5);
}

static rp_status build_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = calloc(1, sizeof *m);
    if (!m) return RP_ERR_NOMEM;
    rp_replica_set_user(rep, m);
    RP_CHECK(make_params(&m->params));
    return rp_replica_optimizer_create(rep, &m->opt, m->params, &j->oc);
}

/* Random gradients in [-1, 1), written through a host copy (the gradient block is storage). */
static rp_status fill_grads(rp_params *p, uint64_t seed)
{
    int64_t n = rp_params_trainable_numel(p);
    float *g = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!g) return RP_ERROR(RP_ERR_NOMEM, "test gradients");
    tu_fill(g, n, seed, -1, 1);
    rp_status status = rp_params_write_grads(p, g);
    free(g);
    return status;
}

static rp_status step_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    rp_comm *c = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    rp_comm_stats before, after;
    RP_CHECK(rp_comm_stats_get(c, &before));
    RP_CHECK(fill_grads(m->params, 11 + (uint64_t)rp_replica_id(rep)));
    RP_CHECK(rp_optimizer_step(m->opt, 0.1f));
    RP_CHECK(rp_comm_stats_get(c, &after));
    rp_comm_stats_diff(&after, &before, &j->step[rp_replica_id(rep)]);
    j->optim[rp_replica_id(rep)] = rp_optimizer_state_bytes(m->opt);
    return RP_OK;
}

/* Sync groups: one batch as the trainer takes it - its ticket, then the step - on both the data
 * axis and the group's communicator. */
static rp_status group_step_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    int id = rp_replica_id(rep);
    rp_comm *c = rp_replica_axis_comm(rep, RP_AXIS_DATA), *grp = rp_replica_sync_comm(rep);
    rp_comm_stats before, after, gbefore, gafter;
    RP_CHECK(rp_comm_stats_get(c, &before));
    RP_CHECK(rp_comm_stats_get(grp, &gbefore));
    int64_t ticket;
    RP_CHECK(rp_replica_next_batch(rep, &ticket));
    RP_CHECK(fill_grads(m->params, 11 + (uint64_t)id));
    RP_CHECK(rp_optimizer_step(m->opt, 0.1f));
    RP_CHECK(rp_comm_stats_get(c, &after));
    RP_CHECK(rp_comm_stats_get(grp, &gafter));
    rp_comm_stats_diff(&after, &before, &j->step[id]);
    rp_comm_stats_diff(&gafter, &gbefore, &j->group[id]);
    j->optim[id] = rp_optimizer_state_bytes(m->opt);
    return RP_OK;
}

/* HSDP: one step, on the data axis and on the two communicators of HSDP. */
static rp_status hsdp_step_fn(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    int id = rp_replica_id(rep);
    rp_comm *c[3] = {rp_replica_axis_comm(rep, RP_AXIS_DATA), rp_replica_hsdp_comm(rep, false),
                     rp_replica_hsdp_comm(rep, true)};
    rp_comm_stats before[3], after;
    rp_comm_stats *out[3] = {&j->step[id], &j->shard[id], &j->across[id]};
    for (int a = 0; a < 3; a++) {
        if (!c[a]) return RP_ERROR(RP_ERR_INVALID, "replica %d has no HSDP communicator", id);
        RP_CHECK(rp_comm_stats_get(c[a], &before[a]));
    }
    RP_CHECK(fill_grads(m->params, 11 + (uint64_t)id));
    RP_CHECK(rp_optimizer_step(m->opt, 0.1f));
    for (int a = 0; a < 3; a++) {
        RP_CHECK(rp_comm_stats_get(c[a], &after));
        rp_comm_stats_diff(&after, &before[a], out[a]);
    }
    j->optim[id] = rp_optimizer_state_bytes(m->opt);
    return RP_OK;
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

static rp_config layout(int n, bool zero, size_t bucket_bytes)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = n;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.checksum_every = 1; /* a checksum in every step: housekeeping, kept out of the plan */
    cfg.zero = zero;
    cfg.bucket_bytes = bucket_bytes;
    return cfg;
}

/* The user and runtime classes of a and b are equal (housekeeping aside). */
static bool same_step(const rp_comm_stats *a, const rp_comm_stats *b)
{
    return memcmp(a->by[RP_COMM_USER], b->by[RP_COMM_USER], sizeof a->by[0]) == 0 &&
           memcmp(a->by[RP_COMM_RUNTIME], b->by[RP_COMM_RUNTIME], sizeof a->by[0]) == 0;
}

static void check_layout_dtype(int n, bool zero, size_t bucket_bytes, rp_dtype grad_dtype)
{
    job j;
    memset(&j, 0, sizeof j);
    j.oc = rp_optim_config_default(); /* momentum: one slot */
    rp_config cfg = layout(n, zero, bucket_bytes);
    cfg.grad_dtype = grad_dtype;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, build_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, step_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, destroy_fn, &j), RP_OK);
    rp_replicator_destroy(r);

    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    for (int id = 0; id < n; id++) {
        rp_plan_worker w;
        memset(&w, 0, sizeof w);
        assert_int_equal(rp_plan_runtime(&cfg, n, id, p, &j.oc, &w), RP_OK);
        rp_comm_stats want;
        rp_plan_traffic_stats(&w, RP_AXIS_DATA, &want);
        if (!same_step(&want, &j.step[id]))
            fail_msg(
                "%d replicas%s, buckets of %zu B, replica %d: the plan's traffic differs "
                "from the counters' (all_reduce %llu/%llu calls, reduce_scatter %llu/%llu, "
                "all_gather %llu/%llu)",
                n, zero ? " ZeRO-1" : "", bucket_bytes, id,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_REDUCE].calls,
                (unsigned long long)j.step[id].by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_REDUCE].calls,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_REDUCE_SCATTER].calls,
                (unsigned long long)j.step[id].by[RP_COMM_RUNTIME][RP_FLIGHT_REDUCE_SCATTER].calls,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_GATHER].calls,
                (unsigned long long)j.step[id].by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_GATHER].calls);
        assert_int_equal(w.optim, (int64_t)j.optim[id]);
        assert_int_equal(w.grads, rp_params_trainable_numel(p) * 4);
        assert_int_equal(w.params, rp_params_numel(p) * 4);
        /* The checksum ran (housekeeping) and is not in the plan. */
        if (n > 1) assert_true(j.step[id].by[RP_COMM_HOUSEKEEPING][RP_FLIGHT_ALL_GATHER].calls > 0);
        /* A plan for buckets 16x larger sends the same bytes in fewer calls: caught. */
        rp_config other = layout(n, zero, bucket_bytes * 16);
        other.grad_dtype = grad_dtype;
        rp_plan_worker v;
        memset(&v, 0, sizeof v);
        assert_int_equal(rp_plan_runtime(&other, n, id, p, &j.oc, &v), RP_OK);
        rp_plan_traffic_stats(&v, RP_AXIS_DATA, &want);
        if (n > 1 && bucket_bytes < 4096) assert_false(same_step(&want, &j.step[id]));
        if (grad_dtype != RP_BF16 || n < 2) continue;
        /* bf16: the gradients' calls are the f32 plan's, with half its bytes; the rest the same. */
        rp_config f32 = cfg;
        f32.grad_dtype = RP_F32;
        rp_comm_stats full, half;
        memset(&v, 0, sizeof v);
        assert_int_equal(rp_plan_runtime(&f32, n, id, p, &j.oc, &v), RP_OK);
        rp_plan_traffic_stats(&v, RP_AXIS_DATA, &full);
        rp_plan_traffic_stats(&w, RP_AXIS_DATA, &half);
        int grads = zero ? RP_FLIGHT_REDUCE_SCATTER : RP_FLIGHT_ALL_REDUCE;
        const rp_comm_tally *a = &full.by[RP_COMM_RUNTIME][grads],
                            *b = &half.by[RP_COMM_RUNTIME][grads];
        assert_true(a->calls > 0 && a->calls == b->calls);
        assert_int_equal(b->bytes * 2, a->bytes);
        full.by[RP_COMM_RUNTIME][grads] = half.by[RP_COMM_RUNTIME][grads];
        assert_true(same_step(&full, &half));
        assert_true(w.strategy > v.strategy); /* the bf16 copy of a bucket */
    }
    rp_params_destroy(p);
}

static void check_layout(int n, bool zero, size_t bucket_bytes)
{
    check_layout_dtype(n, zero, bucket_bytes, RP_F32);
}

static void test_one_replica(void **state)
{
    (void)state;
    check_layout(1, false, 1 << 20);
    check_layout(1, true, 1 << 20);
}

static void test_sync(void **state)
{
    (void)state;
    size_t sizes[] = {64, 1000, 2048, 1 << 20};
    for (int n = 2; n <= 3; n++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            check_layout(n, false, sizes[i]);
}

static void test_zero(void **state)
{
    (void)state;
    size_t sizes[] = {64, 1000, 2048, 1 << 20};
    for (int n = 2; n <= 3; n++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            check_layout(n, true, sizes[i]);
}

/* Gradients in bf16 on the wire: sync and ZeRO-1, one bucket and many. */
static void test_bf16_gradients(void **state)
{
    (void)state;
    size_t sizes[] = {64, 2048, 1 << 20};
    for (int n = 2; n <= 3; n++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            check_layout_dtype(n, false, sizes[i], RP_BF16);
            check_layout_dtype(n, true, sizes[i], RP_BF16);
        }
}

/* ---- pipeline stages ---------------------------------------------------------------------- */

#define MAXP 3

typedef struct stage_job {
    rp_comm *comm;
    int stage, stages, micro, mb;
    const int *bounds;
    rp_status status;
    rp_comm_stats sent;
} stage_job;

static rp_resnet_config stage_config(int first, int last)
{
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.in_channels = 1;
    cfg.classes = 10;
    cfg.first_unit = first;
    cfg.last_unit = last;
    return cfg;
}

typedef struct stage_ctx {
    rp_resnet *net;
    bool last;
    int32_t labels[64];
} stage_ctx;

static rp_tensor *stage_fn(rp_tape *t, rp_tensor *x, int micro, void *arg)
{
    stage_ctx *c = arg;
    rp_tensor *y = rp_resnet_forward(t, c->net, x, true);
    return c->last ? rp_softmax_cross_entropy(t, y, c->labels) : y;
}

static void *stage_main(void *arg)
{
    stage_job *j = arg;
    stage_ctx c = {.last = j->stage == j->stages - 1};
    rp_pipeline *p = NULL;
    float *images = NULL;
    rp_tape *tin = NULL; /* stage 0's batch: a leaf on a tape of its own, in storage */
    rp_tensor *in = NULL;
    rp_comm_stats before, after;
    rp_resnet_config cfg = stage_config(j->bounds[j->stage], j->bounds[j->stage + 1]);
    int B = j->micro * j->mb;
    j->status = rp_resnet_create(&c.net, &cfg, 3);
    if (j->status == RP_OK) j->status = rp_pipeline_create(&p, j->comm, RP_PIPE_GPIPE, j->micro);
    if (j->status == RP_OK && j->stage == 0) {
        images = calloc((size_t)B * 28 * 28, sizeof(float));
        j->status = images ? rp_tape_create(&tin, 0) : RP_ERR_NOMEM;
        if (j->status == RP_OK) {
            tu_fill(images, (int64_t)B * 28 * 28, 5, -1, 1);
            in = rp_tensor_from(tin, 4, (int[]){B, 28, 28, 1}, images);
            if (!in) j->status = rp_last_status();
        }
    }
    if (j->status == RP_OK) j->status = rp_comm_stats_get(j->comm, &before);
    if (j->status == RP_OK) j->status = rp_pipeline_run(p, stage_fn, &c, in, NULL);
    if (j->status == RP_OK) j->status = rp_comm_stats_get(j->comm, &after);
    if (j->status == RP_OK) rp_comm_stats_diff(&after, &before, &j->sent);
    rp_pipeline_destroy(p);
    rp_resnet_destroy(c.net);
    rp_tape_destroy(tin);
    free(images);
    return NULL;
}

static void check_pipeline(int stages, int micro)
{
    int bounds[MAXP + 1];
    rp_resnet_config whole = stage_config(0, 0);
    assert_int_equal(rp_resnet_partition(&whole, 28, 28, stages, bounds), RP_OK);
    rp_comm *comms[MAXP];
    assert_int_equal(rp_comm_threads_create(comms, stages, NULL, 60.0), RP_OK);
    stage_job jobs[MAXP];
    pthread_t th[MAXP];
    for (int s = 0; s < stages; s++) {
        jobs[s] = (stage_job){.comm = comms[s],
                              .stage = s,
                              .stages = stages,
                              .micro = micro,
                              .mb = 2,
                              .bounds = bounds};
        assert_int_equal(pthread_create(&th[s], NULL, stage_main, &jobs[s]), 0);
    }
    for (int s = 0; s < stages; s++)
        assert_int_equal(pthread_join(th[s], NULL), 0);
    for (int s = 0; s < stages; s++) {
        assert_int_equal(jobs[s].status, RP_OK);
        /* The stage's input and output per micro-batch: the units' output sizes. */
        rp_resnet_unit_info in = {0}, out;
        if (s > 0)
            assert_int_equal(rp_resnet_unit_info_get(&whole, 28, 28, bounds[s] - 1, &in), RP_OK);
        assert_int_equal(rp_resnet_unit_info_get(&whole, 28, 28, bounds[s + 1] - 1, &out), RP_OK);
        rp_plan_worker w;
        memset(&w, 0, sizeof w);
        assert_int_equal(rp_plan_pipeline(&w, RP_AXIS_PIPE, s, stages, micro,
                                          2 * (int64_t)in.out_h * in.out_w * in.out_c,
                                          2 * (int64_t)out.out_h * out.out_w * out.out_c),
                         RP_OK);
        rp_comm_stats want;
        rp_plan_traffic_stats(&w, RP_AXIS_PIPE, &want);
        for (int k = RP_FLIGHT_SEND; k <= RP_FLIGHT_RECV; k++) {
            const rp_comm_tally *p = &want.by[RP_COMM_USER][k],
                                *g = &jobs[s].sent.by[RP_COMM_USER][k];
            if (p->calls != g->calls || p->bytes != g->bytes)
                fail_msg("%d stages, %d micro-batches, stage %d, %s: planned %llu calls %llu B, "
                         "counted %llu calls %llu B",
                         stages, micro, s, rp_flight_kind_name((rp_flight_kind)k),
                         (unsigned long long)p->calls, (unsigned long long)p->bytes,
                         (unsigned long long)g->calls, (unsigned long long)g->bytes);
        }
        assert_true(same_step(&want, &jobs[s].sent));
    }
    for (int s = 0; s < stages; s++)
        rp_comm_destroy(comms[s]);
}

static void test_pipeline(void **state)
{
    (void)state;
    for (int stages = 2; stages <= MAXP; stages++)
        for (int micro = 1; micro <= 4; micro *= 2)
            check_pipeline(stages, micro);
}

/* ---- sync groups ------------------------------------------------------------------------ */

static void check_groups(int n, int groups, size_t bucket_bytes)
{
    job j;
    memset(&j, 0, sizeof j);
    j.oc = rp_optim_config_default();
    rp_config cfg = layout(n, false, bucket_bytes);
    cfg.sync_groups = groups;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, build_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, group_step_fn, &j), RP_OK);
    assert_int_equal(rp_replicator_run(r, destroy_fn, &j), RP_OK);
    rp_replicator_destroy(r);

    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    int64_t P = rp_params_trainable_numel(p);
    for (int id = 0; id < n; id++) {
        rp_plan_worker w;
        memset(&w, 0, sizeof w);
        assert_int_equal(rp_plan_runtime(&cfg, n, id, p, &j.oc, &w), RP_OK);
        assert_int_equal(w.groups, groups);
        rp_comm_stats want, none;
        rp_plan_traffic_stats(&w, RP_PLAN_GROUP, &want);
        if (!same_step(&want, &j.group[id]))
            fail_msg(
                "%d replicas in %d groups, buckets of %zu B, replica %d: the plan's group "
                "traffic differs from the counters' (all_reduce %llu/%llu calls, broadcast "
                "%llu/%llu calls %llu/%llu B)",
                n, groups, bucket_bytes, id,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_REDUCE].calls,
                (unsigned long long)j.group[id].by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_REDUCE].calls,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST].calls,
                (unsigned long long)j.group[id].by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST].calls,
                (unsigned long long)want.by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST].bytes,
                (unsigned long long)j.group[id].by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST].bytes);
        /* The parameters and the ticket from the group's rank 0: P floats and one int64. */
        assert_int_equal(want.by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST].bytes, P * 4 + 8);
        /* Nothing over the data axis in a step, and nothing planned there. */
        rp_plan_traffic_stats(&w, RP_AXIS_DATA, &none);
        memset(&want, 0, sizeof want);
        assert_true(same_step(&none, &want));
        assert_true(same_step(&j.step[id], &want));
        /* Every replica keeps its own optimizer block (checkpoints), the servers theirs. */
        assert_int_equal(w.optim, (int64_t)j.optim[id]);
        assert_int_equal(w.grads, P * 4);
        /* A plan for buckets 16x larger: fewer all-reduces than the counters saw. */
        rp_config other = cfg;
        other.bucket_bytes = bucket_bytes * 16;
        rp_plan_worker v;
        memset(&v, 0, sizeof v);
        assert_int_equal(rp_plan_runtime(&other, n, id, p, &j.oc, &v), RP_OK);
        rp_plan_traffic_stats(&v, RP_PLAN_GROUP, &want);
        if (bucket_bytes < 4096) assert_false(same_step(&want, &j.group[id]));
    }
    /* One momentum slot: values and slot, P floats each. */
    assert_int_equal(rp_plan_servers(&cfg, p, &j.oc), 2 * P * 4);
    rp_config sync = layout(n, false, bucket_bytes);
    assert_int_equal(rp_plan_servers(&sync, p, &j.oc), 0);
    rp_params_destroy(p);
}

static void test_groups(void **state)
{
    (void)state;
    size_t sizes[] = {64, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_groups(4, 2, sizes[i]);
        check_groups(6, 2, sizes[i]);
        check_groups(6, 3, sizes[i]);
    }
}

static void test_lines(void **state)
{
    (void)state;
    rp_plan_worker w;
    memset(&w, 0, sizeof w);
    assert_int_equal(rp_plan_add_traffic(&w, RP_AXIS_DATA, RP_COMM_USER, RP_FLIGHT_ALL_REDUCE,
                                         "batch norm sums", 2, 16),
                     RP_OK);
    assert_int_equal(rp_plan_add_traffic(&w, RP_AXIS_DATA, RP_COMM_USER, RP_FLIGHT_ALL_REDUCE,
                                         "batch norm sums", 3, 24),
                     RP_OK);
    assert_int_equal(w.ntraffic, 1);
    assert_int_equal(w.traffic[0].calls, 5);
    assert_int_equal(w.traffic[0].bytes, 40);
    for (int i = 1; i < RP_PLAN_MAX_TRAFFIC; i++) {
        char what[16];
        snprintf(what, sizeof what, "line %d", i);
        assert_int_equal(
            rp_plan_add_traffic(&w, RP_AXIS_MODEL, RP_COMM_USER, RP_FLIGHT_SEND, what, 1, 4),
            RP_OK);
    }
    assert_int_equal(
        rp_plan_add_traffic(&w, RP_AXIS_MODEL, RP_COMM_USER, RP_FLIGHT_SEND, "one too many", 1, 4),
        RP_ERR_NOMEM);
    assert_non_null(strstr(rp_last_error(), "one too many"));
    rp_comm_stats s;
    rp_plan_traffic_stats(&w, RP_AXIS_MODEL, &s);
    assert_int_equal(s.by[RP_COMM_USER][RP_FLIGHT_SEND].calls, RP_PLAN_MAX_TRAFFIC - 1);
    assert_int_equal(s.by[RP_COMM_USER][RP_FLIGHT_ALL_REDUCE].calls, 0);
    assert_string_equal(rp_plan_axis_name(RP_AXIS_MODEL), "model");
    assert_string_equal(rp_plan_axis_name(RP_PLAN_GROUP), "group");
}

/* Plans of every worker of n replicas, byte for byte. */
static bool same_plans(const rp_config *a, const rp_config *b, int n, const rp_params *p,
                       const rp_optim_config *oc)
{
    for (int id = 0; id < n; id++) {
        rp_plan_worker x, y;
        memset(&x, 0, sizeof x);
        memset(&y, 0, sizeof y);
        assert_int_equal(rp_plan_runtime(a, n, id, p, oc, &x), RP_OK);
        assert_int_equal(rp_plan_runtime(b, n, id, p, oc, &y), RP_OK);
        if (memcmp(&x, &y, sizeof x) != 0) return false;
    }
    return true;
}

static void test_strategy_choice(void **state)
{
    (void)state;
    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    rp_config sync = layout(4, false, 256), zero = layout(4, true, 256), zero1 = sync;
    zero1.strategy = RP_STRATEGY_ZERO1;
    assert_true(same_plans(&zero1, &zero, 4, p, &oc));
    assert_false(same_plans(&zero1, &sync, 4, p, &oc));
    rp_config groups = sync, chosen = sync;
    groups.sync_groups = 2;
    chosen.strategy = RP_STRATEGY_SYNC_GROUPS;
    chosen.sync_groups = 2;
    assert_true(same_plans(&chosen, &groups, 4, p, &oc));
    assert_false(same_plans(&chosen, &sync, 4, p, &oc));
    assert_int_equal(rp_plan_servers(&chosen, p, &oc), rp_plan_servers(&groups, p, &oc));
    assert_true(rp_plan_servers(&chosen, p, &oc) > 0);
    assert_int_equal(rp_plan_servers(&zero1, p, &oc), 0);
    rp_plan_worker w;
    memset(&w, 0, sizeof w);
    rp_config async = sync;
    async.strategy = RP_STRATEGY_ASYNC;
    assert_int_equal(rp_plan_runtime(&async, 4, 0, p, &oc, &w), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "the planner covers synchronous layouts"));
    async.strategy = (rp_strategy_kind)9;
    assert_int_equal(rp_plan_runtime(&async, 4, 0, p, &oc, &w), RP_ERR_INVALID);
    assert_non_null(strstr(rp_last_error(), "strategy = 9"));
    rp_params_destroy(p);
}

/* The traffic line of kind k: its calls and bytes (0, 0 when there is none). */
static rp_plan_traffic traffic_of(const rp_plan_worker *w, rp_flight_kind k)
{
    rp_plan_traffic t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < w->ntraffic; i++)
        if (w->traffic[i].kind == k && w->traffic[i].cls == RP_COMM_RUNTIME) t = w->traffic[i];
    return t;
}

/*
 * ZeRO-2: ZeRO-1's optimizer shard on every worker, the sync strategy's gradient buckets each
 * reduce-scattered to the owners of its parts (a call per bucket; the workers' results together
 * are the all-reduce's bytes, once) and ZeRO-1's parameter all-gather; no all-reduce.
 */
static void test_zero2(void **state)
{
    (void)state;
    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    for (int n = 2; n <= 4; n++) {
        rp_config sync = layout(n, false, 256), zero1 = layout(n, true, 256), zero2 = sync;
        zero2.strategy = RP_STRATEGY_ZERO2;
        int64_t optim = 0, scattered = 0, all_reduced = 0;
        for (int id = 0; id < n; id++) {
            rp_plan_worker s, z1, z2;
            memset(&s, 0, sizeof s);
            memset(&z1, 0, sizeof z1);
            memset(&z2, 0, sizeof z2);
            assert_int_equal(rp_plan_runtime(&sync, n, id, p, &oc, &s), RP_OK);
            assert_int_equal(rp_plan_runtime(&zero1, n, id, p, &oc, &z1), RP_OK);
            assert_int_equal(rp_plan_runtime(&zero2, n, id, p, &oc, &z2), RP_OK);
            assert_int_equal(z2.optim, z1.optim);
            assert_true(z2.optim < s.optim);
            optim += z2.optim;
            rp_plan_traffic rs = traffic_of(&z2, RP_FLIGHT_REDUCE_SCATTER),
                            sar = traffic_of(&s, RP_FLIGHT_ALL_REDUCE);
            assert_int_equal(rs.calls, sar.calls);
            assert_true(rs.bytes > 0 && rs.bytes < sar.bytes);
            scattered += rs.bytes;
            all_reduced = sar.bytes;
            assert_int_equal(traffic_of(&z2, RP_FLIGHT_ALL_REDUCE).calls, 0);
            assert_true(traffic_of(&z1, RP_FLIGHT_REDUCE_SCATTER).calls > 0);
            /* The values' all-gather is ZeRO-1's (its line is the first all-gather). */
            bool found = false;
            for (int i = 0; i < z1.ntraffic; i++)
                if (!strcmp(z1.traffic[i].what, "parameter shards"))
                    for (int k = 0; k < z2.ntraffic; k++)
                        if (!strcmp(z2.traffic[k].what, "parameter shards")) {
                            assert_int_equal(z2.traffic[k].calls, z1.traffic[i].calls);
                            assert_int_equal(z2.traffic[k].bytes, z1.traffic[i].bytes);
                            found = true;
                        }
            assert_true(found);
        }
        assert_int_equal(scattered, all_reduced);
        /* The shards partition the state: n x the sync worker's would be every slot n times. */
        rp_plan_worker s;
        memset(&s, 0, sizeof s);
        assert_int_equal(rp_plan_runtime(&sync, n, 0, p, &oc, &s), RP_OK);
        assert_int_equal(optim, s.optim);
        /* HSDP's groups must divide the replicas (test_hsdp plans those that do). */
        rp_plan_worker h;
        memset(&h, 0, sizeof h);
        rp_config hs = zero2;
        hs.hsdp = 2;
        if (n == 3) {
            assert_int_equal(rp_plan_runtime(&hs, n, 0, p, &oc, &h), RP_ERR_INVALID);
            assert_non_null(strstr(rp_last_error(), "hsdp = 2 does not divide the 3 replicas"));
        }
    }
    rp_params_destroy(p);
}

/*
 * HSDP (n replicas in groups of G) for every ZeRO stage: the plan of each worker is what its step
 * sends on the data axis (the finiteness agreement), in its group (reductions and gathers) and
 * across the groups (its shard's all-reduce), measured; its group's lines are those of plain ZeRO
 * on G replicas, and its optimizer state the shard of G replicas'.
 */
static void test_hsdp(void **state)
{
    (void)state;
    static const rp_strategy_kind stages[3] = {RP_STRATEGY_ZERO1, RP_STRATEGY_ZERO2,
                                               RP_STRATEGY_ZERO3};
    static const int layouts[][2] = {{4, 2}, {6, 3}, {6, 2}};
    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < 3; l++) {
            int n = layouts[l][0], G = layouts[l][1];
            job j;
            memset(&j, 0, sizeof j);
            j.oc = rp_optim_config_default();
            j.oc.kind = RP_OPTIM_ADAM;
            rp_config cfg = layout(n, false, 256), plain = layout(G, false, 256);
            cfg.strategy = plain.strategy = stages[k];
            cfg.hsdp = G;
            rp_replicator *r;
            assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
            assert_int_equal(rp_replicator_run(r, build_fn, &j), RP_OK);
            assert_int_equal(rp_replicator_run(r, hsdp_step_fn, &j), RP_OK);
            assert_int_equal(rp_replicator_run(r, destroy_fn, &j), RP_OK);
            rp_replicator_destroy(r);
            for (int id = 0; id < n; id++) {
                rp_plan_worker w, v;
                memset(&w, 0, sizeof w);
                memset(&v, 0, sizeof v);
                assert_int_equal(rp_plan_runtime(&cfg, n, id, p, &j.oc, &w), RP_OK);
                assert_int_equal(rp_plan_runtime(&plain, G, id % G, p, &j.oc, &v), RP_OK);
                rp_comm_stats want;
                const rp_axis axes[3] = {RP_AXIS_DATA, RP_PLAN_SHARD, RP_PLAN_REPLICATE};
                const rp_comm_stats *got[3] = {&j.step[id], &j.shard[id], &j.across[id]};
                for (int a = 0; a < 3; a++) {
                    rp_plan_traffic_stats(&w, axes[a], &want);
                    /* ZeRO-3's gathers are forward's and backward's, which this step has not
                       (tests/cli_zero.sh checks them under --plan-check): only those. */
                    rp_comm_tally *units = &want.by[RP_COMM_RUNTIME][RP_FLIGHT_BROADCAST];
                    if (k == 2 && a == 1) assert_true(units->calls > 0);
                    if (k == 2) *units = (rp_comm_tally){0};
                    if (!same_step(&want, got[a]))
                        fail_msg("ZeRO-%d, %d replicas in groups of %d, replica %d: the plan's "
                                 "traffic on the %s axis differs from the counters'",
                                 k + 1, n, G, id, rp_plan_axis_name(axes[a]));
                }
                /* The group's reductions and gathers are plain ZeRO's on G replicas. */
                rp_comm_stats mine, theirs;
                rp_plan_traffic_stats(&w, RP_PLAN_SHARD, &mine);
                rp_plan_traffic_stats(&v, RP_AXIS_DATA, &theirs);
                /* The finiteness exchange: on the data axis here. */
                theirs.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_GATHER].calls -= 1;
                theirs.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_GATHER].bytes -= 24;
                assert_true(same_step(&mine, &theirs));
                assert_int_equal(w.optim, v.optim);
                assert_int_equal(w.optim, (int64_t)j.optim[id]);
                rp_plan_traffic_stats(&w, RP_PLAN_REPLICATE, &want);
                assert_int_equal(want.by[RP_COMM_RUNTIME][RP_FLIGHT_ALL_REDUCE].calls, 1);
            }
        }
    rp_params_destroy(p);
}

static void test_refusals(void **state)
{
    (void)state;
    rp_params *p;
    assert_int_equal(make_params(&p), RP_OK);
    rp_optim_config oc = rp_optim_config_default();
    rp_config cfg = layout(2, false, 1 << 20);
    rp_plan_worker w;
    memset(&w, 0, sizeof w);
    cfg.regime = RP_REGIME_ASYNC;
    assert_int_equal(rp_plan_runtime(&cfg, 2, 0, p, &oc, &w), RP_ERR_UNSUPPORTED);
    cfg.regime = RP_REGIME_SYNC;
    /* Groups of one replica are async training; groups must divide the replicas. */
    cfg.sync_groups = 2;
    assert_int_equal(rp_plan_runtime(&cfg, 2, 0, p, &oc, &w), RP_ERR_UNSUPPORTED);
    assert_non_null(strstr(rp_last_error(), "groups of one replica"));
    assert_int_equal(rp_plan_runtime(&cfg, 3, 0, p, &oc, &w), RP_ERR_INVALID);
    assert_non_null(strstr(rp_last_error(), "does not divide the 3 replicas"));
    cfg.sync_groups = 0;
    assert_int_equal(rp_plan_runtime(&cfg, 2, 2, p, &oc, &w), RP_ERR_INVALID);
    assert_non_null(strstr(rp_last_error(), "worker 2 of 2"));
    oc.momentum = -1;
    assert_int_equal(rp_plan_runtime(&cfg, 2, 0, p, &oc, &w), RP_ERR_INVALID);
    assert_int_equal(rp_plan_runtime(NULL, 2, 0, p, &oc, &w), RP_ERR_INVALID);
    rp_params_destroy(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_replica),
        cmocka_unit_test(test_sync),
        cmocka_unit_test(test_zero),
        cmocka_unit_test(test_bf16_gradients),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_strategy_choice),
        cmocka_unit_test(test_zero2),
        cmocka_unit_test(test_hsdp),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
