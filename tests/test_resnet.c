/*
 * test_resnet.c - the ResNet models: parameter counts that match the
 * published architectures, output shapes, a few training steps on a tiny
 * batch whose loss must fall, and cross-replica batch norm on a communicator
 * (bn_comm) giving bitwise what the deprecated hook (bn_reduce) gives; the
 * units a network split across workers is cut between (their descriptions
 * against the built network, and a chain of split networks giving bitwise
 * the whole one's outputs and gradients).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/resnet/resnet.h"
#include "testutil.h"

/* Trainable parameter counts of the reference architectures (torchvision for 18/50). */
static void test_parameter_counts(void **state)
{
    (void)state;
    struct {
        rp_resnet_kind kind;
        int in, classes;
        int64_t want;
    } cases[] = {
        {RP_RESNET20, 1, 10, 272186}, /* 0.27M, He et al. 2016 table 6 */
        {RP_RESNET20, 3, 10, 272474},
        {RP_RESNET18, 3, 1000, 11689512},
        {RP_RESNET50, 3, 1000, 25557032},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_resnet_config cfg = rp_resnet_config_default(cases[i].kind);
        cfg.in_channels = cases[i].in;
        cfg.classes = cases[i].classes;
        rp_resnet *net;
        assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_OK);
        int64_t got = rp_params_trainable_numel(rp_resnet_params(net));
        if (got != cases[i].want)
            fail_msg("%s: %lld trainable parameters, want %lld", rp_resnet_kind_name(cases[i].kind),
                     (long long)got, (long long)cases[i].want);
        rp_resnet_destroy(net);
    }
}

static void test_output_shapes(void **state)
{
    (void)state;
    int sizes[][3] = {{28, 28, 1}, {32, 32, 3}};
    for (int s = 0; s < 2; s++) {
        rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
        cfg.in_channels = sizes[s][2];
        rp_resnet *net;
        rp_tape *t;
        assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_OK);
        assert_int_equal(rp_tape_create(&t, 0), RP_OK);
        rp_tensor *x =
            rp_tensor_fill(t, 4, (int[]){3, sizes[s][0], sizes[s][1], sizes[s][2]}, 0.5f);
        rp_tensor *y = rp_resnet_forward(t, net, x, true);
        assert_non_null(y);
        assert_int_equal(y->ndim, 2);
        assert_int_equal(y->shape[0], 3);
        assert_int_equal(y->shape[1], 10);
        /* A wrong channel count is refused with both counts named. */
        rp_tensor *bad = rp_tensor_fill(t, 4, (int[]){1, 8, 8, 5}, 0.0f);
        assert_null(rp_resnet_forward(t, net, bad, true));
        tu_assert_error_contains("[1, 8, 8, 5]");
        rp_tape_destroy(t);
        rp_resnet_destroy(net);
    }
}

/* ImageNet-style forward at a small resolution: the stem and four stages give [N,1000]. */
static void test_resnet18_forward(void **state)
{
    (void)state;
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET18);
    rp_resnet *net;
    rp_tape *t;
    assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_OK);
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_fill(t, 4, (int[]){2, 64, 64, 3}, 0.1f);
    rp_tensor *y = rp_resnet_forward(t, net, x, false);
    assert_non_null(y);
    assert_int_equal(y->shape[1], 1000);
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
}

/* Ten SGD steps on one fixed batch of 16 random images: the network memorises it. */
static void test_loss_falls(void **state)
{
    (void)state;
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.in_channels = 1;
    rp_resnet *net;
    rp_tape *t;
    rp_optimizer *opt;
    assert_int_equal(rp_resnet_create(&net, &cfg, 3), RP_OK);
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_optim_config oc = rp_optim_config_default();
    assert_int_equal(rp_optimizer_create(&opt, rp_resnet_params(net), &oc), RP_OK);
    enum { N = 16, HW = 28 };
    static float images[N * HW * HW];
    tu_fill(images, N * HW * HW, 5, -1, 1);
    int32_t labels[N];
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    float first = 0, last = 0;
    for (int step = 0; step < 10; step++) {
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_from(t, 4, (int[]){N, HW, HW, 1}, images);
        rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, net, x, true), labels);
        assert_non_null(loss);
        if (step == 0) first = rp_item(loss);
        last = rp_item(loss);
        assert_int_equal(rp_backward(t, loss), RP_OK);
        assert_int_equal(rp_optimizer_step(opt, 0.05f), RP_OK);
    }
    /* From ~ln(10) = 2.3 to well under half of it. */
    if (!(last < 0.5f * first))
        fail_msg("loss %g -> %g did not halve", (double)first, (double)last);
    rp_optimizer_destroy(opt);
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
}

/* ---- bn_comm against the deprecated bn_reduce hook, on 2 replicas ---------------------- */

enum { XR = 2, XN = 3, XHW = 28 };

typedef struct xbn_out {
    float logits[3][XN * 10];
    float *grad[3];
    float *buffers[3];
    int64_t ngrad, nbuf;
} xbn_out;

/* Builds net `k` (0: bn_comm, 1: bn_reduce, 2: per-replica statistics), one forward and backward.
 */
static rp_status xbn_one(rp_replica *rep, int k, xbn_out *o)
{
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.in_channels = 1;
    if (k == 0) cfg.bn_comm = rp_replica_axis_comm(rep, RP_AXIS_DATA);
    if (k == 1) {
        cfg.bn_reduce = rp_cross_replica_bn;
        cfg.bn_reduce_ctx = rep;
    }
    rp_resnet *net = NULL;
    rp_tape *t = NULL;
    rp_status status = RP_OK;
    RP_TRY(rp_resnet_create(&net, &cfg, 9));
    RP_TRY(rp_tape_create(&t, 0));
    static float images[XR][XN * XHW * XHW];
    int q = rp_replica_id(rep);
    tu_fill(images[q], XN * XHW * XHW, (uint64_t)(20 + q), -1, 1);
    int32_t labels[XN];
    for (int i = 0; i < XN; i++)
        labels[i] = (i + 3 * q) % 10;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){XN, XHW, XHW, 1}, images[q]);
    rp_tensor *y = rp_resnet_forward(t, net, x, true);
    rp_tensor *loss = y ? rp_softmax_cross_entropy(t, y, labels) : NULL;
    if (!loss) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(rp_backward(t, loss));
    rp_params *p = rp_resnet_params(net);
    RP_TRY(rp_tensor_read(y, o->logits[k], (int64_t)(sizeof o->logits[k] / sizeof(float))));
    o->ngrad = rp_params_trainable_numel(p);
    o->nbuf = rp_params_numel(p) - o->ngrad;
    o->grad[k] = malloc((size_t)o->ngrad * sizeof(float));
    o->buffers[k] = malloc((size_t)(o->nbuf + 1) * sizeof(float));
    if (!o->grad[k] || !o->buffers[k]) {
        status = RP_ERROR(RP_ERR_NOMEM, "test buffers");
        goto cleanup;
    }
    RP_TRY(rp_params_read_grads(p, o->grad[k]));
    float *values = tu_read_values(p);
    memcpy(o->buffers[k], values + o->ngrad, (size_t)o->nbuf * sizeof(float));
    free(values);
cleanup:
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
    return status;
}

static rp_status xbn_replica(rp_replica *rep, void *arg)
{
    xbn_out *o = (xbn_out *)arg + rp_replica_id(rep);
    for (int k = 0; k < 3; k++)
        RP_CHECK(xbn_one(rep, k, o));
    return RP_OK;
}

static void test_bn_comm_matches_hook(void **state)
{
    (void)state;
    rp_config rc = rp_config_default();
    rc.backend = RP_BACKEND_THREADS;
    rc.replicas = XR;
    rc.threads_per_replica = 1;
    rc.timeout_s = 60;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &rc), RP_OK);
    static xbn_out out[XR];
    rp_status st = rp_replicator_run(r, xbn_replica, out);
    if (st != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    for (int q = 0; q < XR; q++) {
        xbn_out *o = &out[q];
        assert_true(o->nbuf > 0);
        /* The communicator gives the hook's bits: logits, every gradient, the running statistics.
         */
        assert_memory_equal(o->logits[0], o->logits[1], sizeof o->logits[0]);
        assert_memory_equal(o->grad[0], o->grad[1], (size_t)o->ngrad * sizeof(float));
        assert_memory_equal(o->buffers[0], o->buffers[1], (size_t)o->nbuf * sizeof(float));
        /* And it is cross-replica: per-replica statistics give other logits and statistics. */
        assert_memory_not_equal(o->logits[0], o->logits[2], sizeof o->logits[0]);
        assert_memory_not_equal(o->buffers[0], o->buffers[2], (size_t)o->nbuf * sizeof(float));
    }
    /* The running statistics cover the global batch: the same on both replicas. */
    assert_memory_equal(out[0].buffers[0], out[1].buffers[0], (size_t)out[0].nbuf * sizeof(float));
    for (int q = 0; q < XR; q++)
        for (int k = 0; k < 3; k++) {
            free(out[q].grad[k]);
            free(out[q].buffers[k]);
        }
    rp_replicator_destroy(r);

    /* Both at once is refused at create. */
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    rp_comm *c = NULL;
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, 10), RP_OK);
    cfg.bn_comm = c;
    cfg.bn_reduce = rp_cross_replica_bn;
    rp_resnet *net = NULL;
    assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_ERR_INVALID);
    tu_assert_error_contains("both bn_comm and bn_reduce");
    assert_null(net);
    rp_comm_destroy(c);
}

/* The unit descriptions agree with the networks built: parameter and buffer counts, unit by unit
 * and in sum, and the output shapes a forward pass produces. */
static void test_units_describe_the_network(void **state)
{
    (void)state;
    struct {
        rp_resnet_kind kind;
        int units, h;
    } cases[] = {{RP_RESNET20, 11, 32}, {RP_RESNET18, 10, 64}, {RP_RESNET50, 18, 64}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_resnet_config cfg = rp_resnet_config_default(cases[i].kind);
        cfg.classes = 7;
        assert_int_equal(rp_resnet_units(cases[i].kind), cases[i].units);
        int64_t params = 0, buffers = 0;
        rp_resnet *nets[RP_RESNET_MAX_UNITS] = {0};
        rp_tape *t;
        assert_int_equal(rp_tape_create(&t, 0), RP_OK);
        rp_tensor *x = rp_tensor_fill(t, 4, (int[]){2, cases[i].h, cases[i].h, 3}, 0.25f);
        for (int u = 0; u < cases[i].units; u++) {
            rp_resnet_unit_info info;
            assert_int_equal(rp_resnet_unit_info_get(&cfg, cases[i].h, cases[i].h, u, &info),
                             RP_OK);
            rp_resnet_config one = cfg;
            one.first_unit = u;
            one.last_unit = u + 1;
            rp_resnet *net = NULL;
            assert_int_equal(rp_resnet_create(&net, &one, 3), RP_OK);
            nets[u] = net;
            rp_params *p = rp_resnet_params(net);
            if (rp_params_trainable_numel(p) != info.params ||
                rp_params_numel(p) - rp_params_trainable_numel(p) != info.buffers)
                fail_msg("%s unit %d (%s): built %lld + %lld, described %lld + %lld",
                         rp_resnet_kind_name(cases[i].kind), u, info.name,
                         (long long)rp_params_trainable_numel(p),
                         (long long)(rp_params_numel(p) - rp_params_trainable_numel(p)),
                         (long long)info.params, (long long)info.buffers);
            assert_true(info.flops > 0);
            params += info.params;
            buffers += info.buffers;
            x = rp_resnet_forward(t, net, x, true);
            assert_non_null(x);
            if (u + 1 < cases[i].units) {
                assert_int_equal(x->ndim, 4);
                assert_int_equal(x->shape[1], info.out_h);
                assert_int_equal(x->shape[2], info.out_w);
                assert_int_equal(x->shape[3], info.out_c);
            } else {
                assert_string_equal(info.name, "head");
                assert_int_equal(x->shape[1], 7);
            }
        }
        rp_resnet *whole;
        assert_int_equal(rp_resnet_create(&whole, &cfg, 3), RP_OK);
        assert_int_equal(rp_params_trainable_numel(rp_resnet_params(whole)), params);
        assert_int_equal(rp_params_numel(rp_resnet_params(whole)), params + buffers);
        rp_resnet_destroy(whole);
        /* The tape refers to the units' parameters: it goes first. */
        rp_tape_destroy(t);
        for (int u = 0; u < cases[i].units; u++)
            rp_resnet_destroy(nets[u]);
    }
}

/* The partition covers the chain with non-empty stages and balances it: no stage costs more than
 * the whole over the stage count plus the costliest unit. Bad counts are refused, named. */
static void test_partition(void **state)
{
    (void)state;
    rp_resnet_kind kinds[] = {RP_RESNET20, RP_RESNET50};
    for (int k = 0; k < 2; k++) {
        rp_resnet_config cfg = rp_resnet_config_default(kinds[k]);
        int h = k ? 224 : 32, units = rp_resnet_units(kinds[k]);
        double cost[32], total = 0, largest = 0;
        for (int u = 0; u < units; u++) {
            rp_resnet_unit_info info;
            assert_int_equal(rp_resnet_unit_info_get(&cfg, h, h, u, &info), RP_OK);
            cost[u] = info.flops;
            total += cost[u];
            if (cost[u] > largest) largest = cost[u];
        }
        for (int stages = 1; stages <= 4; stages++) {
            int bounds[8];
            assert_int_equal(rp_resnet_partition(&cfg, h, h, stages, bounds), RP_OK);
            assert_int_equal(bounds[0], 0);
            assert_int_equal(bounds[stages], units);
            for (int s = 0; s < stages; s++) {
                assert_true(bounds[s] < bounds[s + 1]);
                double c = 0;
                for (int u = bounds[s]; u < bounds[s + 1]; u++)
                    c += cost[u];
                assert_true(c <= total / stages + largest);
            }
        }
        int bounds[32];
        assert_int_equal(rp_resnet_partition(&cfg, h, h, units + 1, bounds), RP_ERR_INVALID);
        tu_assert_error_contains("stages");
        assert_int_equal(rp_resnet_partition(&cfg, h, h, 0, bounds), RP_ERR_INVALID);
    }
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    cfg.first_unit = 5;
    cfg.last_unit = 3;
    rp_resnet *net = NULL;
    assert_int_equal(rp_resnet_create(&net, &cfg, 1), RP_ERR_INVALID);
    tu_assert_error_contains("[5, 3)");
    assert_null(net);
}

/* ResNet-20 cut into three networks chained on one tape gives bitwise the whole network's loss,
 * parameter gradients and running statistics. */
static void test_split_chain_is_the_network(void **state)
{
    (void)state;
    rp_resnet_config cfg = rp_resnet_config_default(RP_RESNET20);
    int bounds[4];
    assert_int_equal(rp_resnet_partition(&cfg, 16, 16, 3, bounds), RP_OK);
    rp_resnet *whole, *part[3];
    assert_int_equal(rp_resnet_create(&whole, &cfg, 9), RP_OK);
    for (int s = 0; s < 3; s++) {
        rp_resnet_config c = cfg;
        c.first_unit = bounds[s];
        c.last_unit = bounds[s + 1];
        assert_int_equal(rp_resnet_create(&part[s], &c, 9), RP_OK);
    }
    float images[4 * 16 * 16 * 3];
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++)
        images[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    int32_t labels[4] = {1, 3, 3, 9};
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){4, 16, 16, 3}, images);
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_resnet_forward(t, whole, x, true), labels);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    float whole_loss = rp_item(loss);
    rp_tape_reset(t);
    x = rp_tensor_from(t, 4, (int[]){4, 16, 16, 3}, images);
    for (int s = 0; s < 3; s++)
        x = rp_resnet_forward(t, part[s], x, true);
    loss = rp_softmax_cross_entropy(t, x, labels);
    assert_int_equal(rp_backward(t, loss), RP_OK);
    assert_true(rp_item(loss) == whole_loss);
    rp_params *wp = rp_resnet_params(whole);
    float *wv = tu_read_values(wp), *wg = tu_param_grads(wp);
    int matched = 0;
    for (int s = 0; s < 3; s++) {
        rp_params *pp = rp_resnet_params(part[s]);
        float *pv = tu_read_values(pp), *pg = tu_param_grads(pp);
        for (int i = 0; i < rp_params_count(pp); i++) {
            rp_tensor *a = rp_params_at(pp, i), *b = rp_params_find(wp, a->name);
            assert_non_null(b);
            int64_t ao = rp_params_offset(pp, i), bo = rp_params_offset(wp, b->index);
            assert_memory_equal(pv + ao, wv + bo, (size_t)a->numel * sizeof(float));
            bool trainable = i < rp_params_trainable_count(pp);
            assert_int_equal(trainable, b->index < rp_params_trainable_count(wp));
            if (trainable) assert_memory_equal(pg + ao, wg + bo, (size_t)a->numel * sizeof(float));
            matched++;
        }
        free(pg);
        free(pv);
    }
    free(wg);
    free(wv);
    assert_int_equal(matched, rp_params_count(wp));
    rp_tape_destroy(t);
    for (int s = 0; s < 3; s++)
        rp_resnet_destroy(part[s]);
    rp_resnet_destroy(whole);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_output_shapes),
        cmocka_unit_test(test_resnet18_forward),
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_bn_comm_matches_hook),
        cmocka_unit_test(test_units_describe_the_network),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_split_chain_is_the_network),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
