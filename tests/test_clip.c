/*
 * test_clip.c - rp_clip_grad_norm against a norm computed by hand: the
 * reported norm, the scaled gradients (direction kept, norm max_norm), no
 * change below the limit, and the errors.
 */
#include <math.h>
#include <string.h>

#include "testutil.h"

static rp_params *make_params(void)
{
    rp_params *ps;
    assert_int_equal(rp_params_create(&ps), RP_OK);
    rp_init z = {RP_INIT_ZEROS, 0, 0, 0};
    assert_non_null(rp_params_add(ps, "a", 1, (int[]){2}, z, true));
    assert_non_null(rp_params_add(ps, "buf", 1, (int[]){3}, z, false));
    assert_non_null(rp_params_add(ps, "b", 2, (int[]){1, 2}, z, true));
    assert_int_equal(rp_params_finalize(ps, 1), RP_OK);
    return ps;
}

/* Gradients (3, 4) and (12, 0): global norm sqrt(9 + 16 + 144) = 13. The gradient block holds
   the trainable parameters in order, a then b. */
static void set_grads(rp_params *ps)
{
    assert_int_equal(rp_params_write_grads(ps, (const float[]){3, 4, 12, 0}), RP_OK);
}

/* The gradient block, read through a host copy (it is the kernel table's storage). */
static void get_grads(const rp_params *ps, float g[4])
{
    assert_int_equal(rp_params_read_grads(ps, g), RP_OK);
}

static void test_clip_scales_to_max_norm(void **state)
{
    rp_params *ps = make_params();
    set_grads(ps);
    float norm = 0;
    assert_int_equal(rp_clip_grad_norm(ps, 6.5f, &norm), RP_OK);
    assert_float_equal(norm, 13.0f, 1e-6);
    float g[4];
    get_grads(ps, g);
    /* Scaled by 6.5/13 = 0.5 each. */
    assert_float_equal(g[0], 1.5f, 1e-6);
    assert_float_equal(g[1], 2.0f, 1e-6);
    assert_float_equal(g[2], 6.0f, 1e-6);
    assert_float_equal(g[3], 0.0f, 0);
    /* Clipping again: the norm is now the limit, nothing changes. */
    assert_int_equal(rp_clip_grad_norm(ps, 6.5f, &norm), RP_OK);
    assert_float_equal(norm, 6.5f, 1e-5);
    get_grads(ps, g);
    assert_float_equal(g[0], 1.5f, 1e-6);
    rp_params_destroy(ps);
}

static void test_clip_below_limit_untouched(void **state)
{
    rp_params *ps = make_params();
    set_grads(ps);
    float before[4], after[4];
    get_grads(ps, before);
    assert_int_equal(rp_clip_grad_norm(ps, 13.5f, NULL), RP_OK);
    get_grads(ps, after);
    assert_memory_equal(before, after, sizeof before);
    rp_params_destroy(ps);
}

static void test_clip_errors(void **state)
{
    rp_params *ps = make_params();
    set_grads(ps);
    assert_int_equal(rp_clip_grad_norm(NULL, 1, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_clip_grad_norm(ps, 0, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("max_norm 0");
    assert_int_equal(rp_clip_grad_norm(ps, NAN, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_params_write_grads(ps, (const float[]){3, 4, 12, INFINITY}), RP_OK);
    float before[4], after[4], norm = 0;
    get_grads(ps, before);
    assert_true(isinf(before[3])); /* b's second element */
    assert_int_equal(rp_clip_grad_norm(ps, 1, &norm), RP_ERR_NUMERIC);
    assert_true(isinf(norm));
    get_grads(ps, after);
    assert_memory_equal(before, after, sizeof before);
    rp_params *fresh;
    assert_int_equal(rp_params_create(&fresh), RP_OK);
    assert_int_equal(rp_clip_grad_norm(fresh, 1, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("not finalized");
    rp_params_destroy(fresh);
    rp_params_destroy(ps);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clip_scales_to_max_norm),
        cmocka_unit_test(test_clip_below_limit_untouched),
        cmocka_unit_test(test_clip_errors),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
