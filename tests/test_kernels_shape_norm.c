/*
 * test_kernels_shape_norm.c - the fast kernels added for the next models
 * (per-axis broadcasting, axis reductions and their adjoint, clamp, layer
 * norm, log-softmax, ELU/sqrt/reciprocal, division, sums of squares) against
 * the plain reference, on odd sizes and sizes big enough to go parallel,
 * with the calling thread's team at 1 and at 4 threads.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/kernels.h"
#include "testutil.h"

#define TOL 1e-5

static const kernels_table *ref, *cpu;

static int setup(void **state)
{
    ref = kernels_ref();
    cpu = kernels_cpu();
    return 0;
}

static float *buf(int64_t n, uint64_t seed, float lo, float hi)
{
    float *p = rp_alloc((size_t)(n ? n : 1) * sizeof(float));
    tu_fill(p, n, seed, lo, hi);
    return p;
}

/* 4-D shapes: small odd ones and one big enough for the parallel paths. */
static const int64_t shapes[][4] = {
    {1, 1, 1, 1}, {2, 3, 5, 7}, {3, 1, 4, 17}, {1, 9, 1, 3}, {8, 33, 31, 16},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static int64_t numel4(const int64_t *s)
{
    return s[0] * s[1] * s[2] * s[3];
}

static void body_bcast_reduce(void)
{
    for (size_t si = 0; si < N_SHAPES; si++) {
        const int64_t *shape = shapes[si];
        int64_t n = numel4(shape);
        for (unsigned mask = 0; mask < 16; mask++) {
            /* b has size 1 along the axes in mask. */
            int64_t bstride[4], stride = 1, nb = 1;
            for (int d = 3; d >= 0; d--) {
                int64_t bd = (mask >> d) & 1u ? 1 : shape[d];
                bstride[d] = bd == 1 ? 0 : stride;
                stride *= bd;
                nb *= bd;
            }
            float *a = buf(n, 1 + mask, -2, 2), *b = buf(nb, 2 + mask, 0.5f, 2);
            float *y1 = buf(n, 3, 0, 1), *y2 = buf(n, 3, 0, 1);
            for (int op = RP_BIN_ADD; op <= RP_BIN_DIV; op++) {
                ref->binary_bcast(y1, a, b, shape, bstride, (kernels_binop)op);
                cpu->binary_bcast(y2, a, b, shape, bstride, (kernels_binop)op);
                tu_check_close(y1, y2, n, TOL, "binary_bcast");
            }
            /* In place (y aliases a), as the backward uses it. */
            memcpy(y1, a, (size_t)n * sizeof(float));
            memcpy(y2, a, (size_t)n * sizeof(float));
            ref->binary_bcast(y1, y1, b, shape, bstride, RP_BIN_DIV);
            cpu->binary_bcast(y2, y2, b, shape, bstride, RP_BIN_DIV);
            tu_check_close(y1, y2, n, TOL, "binary_bcast in place");

            float *r1 = buf(nb, 4, -1, 1), *r2 = buf(nb, 4, -1, 1);
            for (int acc = 0; acc < 2; acc++) {
                ref->reduce_axes(r1, a, shape, mask, -0.5f, acc);
                cpu->reduce_axes(r2, a, shape, mask, -0.5f, acc);
                tu_check_close(r1, r2, nb, TOL, "reduce_axes");
                ref->expand_axes(y1, b, shape, mask, 0.25f, acc);
                cpu->expand_axes(y2, b, shape, mask, 0.25f, acc);
                tu_check_close(y1, y2, n, TOL, "expand_axes");
            }
            rp_free(a);
            rp_free(b);
            rp_free(y1);
            rp_free(y2);
            rp_free(r1);
            rp_free(r2);
        }
    }
}

static void test_bcast_reduce(void **state)
{
    tu_for_each_team(body_bcast_reduce);
}

static void body_pointwise(void)
{
    for (size_t si = 0; si < N_SHAPES; si++) {
        int64_t n = numel4(shapes[si]);
        float *x = buf(n, 5, -2, 2), *pos = buf(n, 6, 0.2f, 3), *dy = buf(n, 7, -1, 1);
        float *y1 = buf(n, 8, 0, 1), *y2 = buf(n, 8, 0, 1), *d1 = buf(n, 9, 0, 1),
              *d2 = buf(n, 9, 0, 1);
        kernels_act acts[3] = {RP_ACT_ELU, RP_ACT_SQRT, RP_ACT_RECIPROCAL};
        for (int k = 0; k < 3; k++) {
            const float *in = acts[k] == RP_ACT_ELU ? x : pos;
            ref->act_fwd(y1, in, n, acts[k], 0.7f);
            cpu->act_fwd(y2, in, n, acts[k], 0.7f);
            tu_check_close(y1, y2, n, TOL, "act_fwd");
            ref->act_bwd(d1, dy, y1, in, n, acts[k], 0.7f);
            cpu->act_bwd(d2, dy, y1, in, n, acts[k], 0.7f);
            tu_check_close(d1, d2, n, TOL, "act_bwd");
        }
        ref->clamp_fwd(y1, x, n, -0.5f, 1.0f);
        cpu->clamp_fwd(y2, x, n, -0.5f, 1.0f);
        tu_check_close(y1, y2, n, TOL, "clamp_fwd");
        ref->clamp_bwd(d1, dy, x, n, -0.5f, 1.0f);
        cpu->clamp_bwd(d2, dy, x, n, -0.5f, 1.0f);
        tu_check_close(d1, d2, n, TOL, "clamp_bwd");
        int64_t nb = shapes[si][3];
        ref->binary(y1, x, pos, n, nb, RP_BIN_DIV);
        cpu->binary(y2, x, pos, n, nb, RP_BIN_DIV);
        tu_check_close(y1, y2, n, TOL, "binary div");
        double s1 = ref->sum_squares(x, n), s2 = cpu->sum_squares(x, n);
        assert_true(fabs(s1 - s2) <= 1e-12 * fmax(1, s1));
        memcpy(y1, x, (size_t)n * sizeof(float));
        memcpy(y2, x, (size_t)n * sizeof(float));
        ref->scale_inplace(y1, -1.5f, n);
        cpu->scale_inplace(y2, -1.5f, n);
        tu_check_close(y1, y2, n, TOL, "scale_inplace");
        rp_free(x);
        rp_free(pos);
        rp_free(dy);
        rp_free(y1);
        rp_free(y2);
        rp_free(d1);
        rp_free(d2);
    }
}

static void test_pointwise(void **state)
{
    tu_for_each_team(body_pointwise);
}

static void body_rows(void)
{
    static const int64_t rows_list[] = {1, 3, 17, 4001};
    static const int d_list[] = {1, 3, 16, 37};
    for (int ri = 0; ri < 4; ri++)
        for (int di = 0; di < 4; di++) {
            int64_t rows = rows_list[ri], n = rows * d_list[di];
            int d = d_list[di];
            float *x = buf(n, 11, -2, 2), *dy = buf(n, 12, -1, 1);
            float *g = buf(d, 13, 0.5f, 1.5f), *b = buf(d, 14, -1, 1);
            float *y1 = buf(n, 15, 0, 1), *y2 = buf(n, 15, 0, 1), *d1 = buf(n, 16, 0, 1),
                  *d2 = buf(n, 16, 0, 1);
            float *st1 = buf(2 * rows, 17, 0, 1), *st2 = buf(2 * rows, 17, 0, 1);
            float *dg1 = buf(d, 18, -1, 1), *dg2 = buf(d, 18, -1, 1), *db1 = buf(d, 19, -1, 1),
                  *db2 = buf(d, 19, -1, 1);
            for (int affine = 0; affine < 2; affine++) {
                const float *gg = affine ? g : NULL, *bb = affine ? b : NULL;
                ref->layernorm_fwd(y1, st1, st1 + rows, x, gg, bb, rows, d, 1e-5f);
                cpu->layernorm_fwd(y2, st2, st2 + rows, x, gg, bb, rows, d, 1e-5f);
                tu_check_close(y1, y2, n, TOL, "layernorm_fwd");
                tu_check_close(st1, st2, 2 * rows, TOL, "layernorm stats");
                ref->layernorm_bwd(d1, dg1, db1, dy, x, st1, st1 + rows, gg, rows, d);
                cpu->layernorm_bwd(d2, dg2, db2, dy, x, st1, st1 + rows, gg, rows, d);
                /* d = 1: dx is 0 up to rounding of g - mean(g), compared absolutely. */
                if (d > 1) tu_check_close(d1, d2, n, TOL, "layernorm_bwd dx");
                tu_check_close(dg1, dg2, d, TOL, "layernorm_bwd dgamma");
                tu_check_close(db1, db2, d, TOL, "layernorm_bwd dbeta");
            }
            ref->log_softmax_fwd(y1, x, rows, d);
            cpu->log_softmax_fwd(y2, x, rows, d);
            tu_check_close(y1, y2, n, TOL, "log_softmax_fwd");
            ref->log_softmax_bwd(d1, dy, y1, rows, d);
            cpu->log_softmax_bwd(d2, dy, y1, rows, d);
            tu_check_close(d1, d2, n, TOL, "log_softmax_bwd");
            float *all[] = {x, dy, g, b, y1, y2, d1, d2, st1, st2, dg1, dg2, db1, db2};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                rp_free(all[i]);
        }
}

static void test_rows(void **state)
{
    tu_for_each_team(body_rows);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bcast_reduce),
        cmocka_unit_test(test_pointwise),
        cmocka_unit_test(test_rows),
    };
    return tu_run_group_tests(argc, argv, tests, setup, NULL);
}
