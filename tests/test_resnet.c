/*
 * test_resnet.c - the ResNet models: parameter counts that match the
 * published architectures, output shapes, and a few training steps on a tiny
 * batch whose loss must fall.
 */
#include <math.h>
#include <string.h>

#include "models/resnet/resnet.h"
#include "testutil.h"

/* Trainable parameter counts of the reference architectures (torchvision for 18/50). */
static void test_parameter_counts(void **state)
{
    (void)state;
    struct { rp_resnet_kind kind; int in, classes; int64_t want; } cases[] = {
        {RP_RESNET20, 1, 10, 272186},    /* 0.27M, He et al. 2016 table 6 */
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
        rp_tensor *x = rp_tensor_fill(t, 4, (int[]){3, sizes[s][0], sizes[s][1], sizes[s][2]}, 0.5f);
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
    for (int i = 0; i < N; i++) labels[i] = i % 10;
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
    if (!(last < 0.5f * first)) fail_msg("loss %g -> %g did not halve", (double)first, (double)last);
    rp_optimizer_destroy(opt);
    rp_tape_destroy(t);
    rp_resnet_destroy(net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_output_shapes),
        cmocka_unit_test(test_resnet18_forward),
        cmocka_unit_test(test_loss_falls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
