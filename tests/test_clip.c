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

/* Gradients (3, 4) and (12, 0): global norm sqrt(9 + 16 + 144) = 13. */
static void set_grads(rp_params *ps)
{
    rp_tensor *a = rp_params_find(ps, "a"), *b = rp_params_find(ps, "b");
    a->grad[0] = 3;
    a->grad[1] = 4;
    b->grad[0] = 12;
    b->grad[1] = 0;
}

static void test_clip_scales_to_max_norm(void **state)
{
    rp_params *ps = make_params();
    set_grads(ps);
    float norm = 0;
    assert_int_equal(rp_clip_grad_norm(ps, 6.5f, &norm), RP_OK);
    assert_float_equal(norm, 13.0f, 1e-6);
    rp_tensor *a = rp_params_find(ps, "a"), *b = rp_params_find(ps, "b");
    /* Scaled by 6.5/13 = 0.5 each. */
    assert_float_equal(a->grad[0], 1.5f, 1e-6);
    assert_float_equal(a->grad[1], 2.0f, 1e-6);
    assert_float_equal(b->grad[0], 6.0f, 1e-6);
    assert_float_equal(b->grad[1], 0.0f, 0);
    /* Clipping again: the norm is now the limit, nothing changes. */
    assert_int_equal(rp_clip_grad_norm(ps, 6.5f, &norm), RP_OK);
    assert_float_equal(norm, 6.5f, 1e-5);
    assert_float_equal(a->grad[0], 1.5f, 1e-6);
    rp_params_destroy(ps);
}

static void test_clip_below_limit_untouched(void **state)
{
    rp_params *ps = make_params();
    set_grads(ps);
    float before[4];
    memcpy(before, rp_params_grad(ps), sizeof before);
    assert_int_equal(rp_clip_grad_norm(ps, 13.5f, NULL), RP_OK);
    assert_memory_equal(before, rp_params_grad(ps), sizeof before);
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
    rp_params_find(ps, "b")->grad[1] = INFINITY;
    float before[4], norm = 0;
    memcpy(before, rp_params_grad(ps), sizeof before);
    assert_int_equal(rp_clip_grad_norm(ps, 1, &norm), RP_ERR_NUMERIC);
    assert_true(isinf(norm));
    assert_memory_equal(before, rp_params_grad(ps), sizeof before);
    rp_params *fresh;
    assert_int_equal(rp_params_create(&fresh), RP_OK);
    assert_int_equal(rp_clip_grad_norm(fresh, 1, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("not finalized");
    rp_params_destroy(fresh);
    rp_params_destroy(ps);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clip_scales_to_max_norm),
        cmocka_unit_test(test_clip_below_limit_untouched),
        cmocka_unit_test(test_clip_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
