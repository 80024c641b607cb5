/*
 * test_kernels_optim.c - the optimizer's kernel slots (sgd_update,
 * adam_update, first_nonfinite) of both tables against plain per-element
 * references written here from torch.optim's formulas. The updates are held
 * to bitwise equality, not a tolerance: checkpoints and the replicas'
 * agreement are compared byte for byte, so a table that regrouped one float
 * operation would break resumes and the sync checksum.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "testutil.h"

static const kernels_table *tables[2];

static int setup(void **state)
{
    (void)state;
    tables[0] = kernels_ref();
    tables[1] = kernels_cpu();
    return 0;
}

/* Sizes that are not multiples of any vector width, and one past the parallel threshold. */
static const int64_t sizes[] = {1, 3, 17, 1000, 40001};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

static float *buf(int64_t n, uint64_t seed, float lo, float hi)
{
    float *p = rp_alloc((size_t)n * sizeof(float));
    assert_non_null(p);
    tu_fill(p, n, seed, lo, hi);
    return p;
}

static float *copy_of(const float *x, int64_t n)
{
    float *p = rp_alloc((size_t)n * sizeof(float));
    assert_non_null(p);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* Fails naming the table, the case and the first element whose bits differ. */
static void assert_same_bits(const float *got, const float *want, int64_t n, const char *table,
                             const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s %s: element %lld of %lld is %.9g, the reference %.9g", table, what,
                     (long long)i, (long long)n, (double)got[i], (double)want[i]);
    }
}

static void test_slots_present(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        assert_non_null(tables[t]->sgd_update);
        assert_non_null(tables[t]->adam_update);
        assert_non_null(tables[t]->first_nonfinite);
    }
}

/* ---- sgd_update ------------------------------------------------------------------------- */

/* torch.optim.SGD with dampening 0, one element: returns the new value, updates *buf. */
static float sgd_one(float w, float *buf, float g, float lr, float mu, float wd, bool nesterov,
                     bool first)
{
    if (mu == 0.0f) return wd != 0.0f ? w - lr * (g + wd * w) : w - lr * g;
    float d = g + wd * w;
    float b = first ? d : mu * *buf + d;
    *buf = b;
    return nesterov ? w - lr * (d + mu * b) : w - lr * b;
}

/*
 * Four steps of every SGD variant on each size, from a momentum buffer full of NaN: the first
 * step must set it, not blend it. Plain SGD gets a NULL buffer, which it must not touch.
 */
static void test_sgd_update(void **state)
{
    (void)state;
    const struct {
        float mu, wd;
        bool nesterov;
    } cases[] = {{0.0f, 0.0f, false},  {0.0f, 1e-2f, false}, {0.9f, 0.0f, false},
                 {0.9f, 5e-4f, false}, {0.9f, 0.0f, true},   {0.9f, 5e-4f, true},
                 {0.5f, 0.1f, true}};
    const float lrs[4] = {0.1f, 0.05f, 0.3f, 0.0125f};
    for (int t = 0; t < 2; t++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (int s = 0; s < NSIZES; s++) {
                int64_t n = sizes[s];
                float mu = cases[c].mu, wd = cases[c].wd;
                bool nest = cases[c].nesterov;
                float *w = buf(n, 11 + c, -2.0f, 2.0f), *want = copy_of(w, n);
                float *mom = buf(n, 12, 0.0f, 1.0f), *want_mom = copy_of(mom, n);
                for (int64_t i = 0; i < n; i++)
                    mom[i] = want_mom[i] = NAN;
                for (int step = 0; step < 4; step++) {
                    float *g = buf(n, 100 + (uint64_t)step, -1.0f, 1.0f);
                    tables[t]->sgd_update(w, mu != 0.0f ? mom : NULL, g, n, lrs[step], mu, wd, nest,
                                          step == 0);
                    for (int64_t i = 0; i < n; i++)
                        want[i] = sgd_one(want[i], &want_mom[i], g[i], lrs[step], mu, wd, nest,
                                          step == 0);
                    rp_free(g);
                }
                char what[96];
                snprintf(what, sizeof what, "sgd_update (momentum %g, wd %g, nesterov %d, n %lld)",
                         (double)mu, (double)wd, (int)nest, (long long)n);
                assert_same_bits(w, want, n, tables[t]->name, what);
                if (mu != 0.0f) {
                    assert_same_bits(mom, want_mom, n, tables[t]->name, what);
                } else {
                    for (int64_t i = 0; i < n; i++)
                        assert_true(isnan(mom[i])); /* untouched */
                }
                rp_free(w), rp_free(want), rp_free(mom), rp_free(want_mom);
            }
        }
    }
}

/* An exactly representable case worked by hand: the formula, not only agreement with itself. */
static void test_sgd_update_by_hand(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        /* Nesterov, mu 0.5, wd 0.25, lr 0.5: step 1 from w 2, g 1: d = 1.5, b = 1.5,
           w = 2 - 0.5*(1.5 + 0.75) = 0.875. Step 2, g 0.5: d = 0.71875, b = 0.75 + 0.71875
           = 1.46875, w = 0.875 - 0.5*(0.71875 + 0.734375) = 0.1484375. */
        float w = 2.0f, mom = NAN, g = 1.0f;
        tables[t]->sgd_update(&w, &mom, &g, 1, 0.5f, 0.5f, 0.25f, true, true);
        assert_true(w == 0.875f && mom == 1.5f);
        g = 0.5f;
        tables[t]->sgd_update(&w, &mom, &g, 1, 0.5f, 0.5f, 0.25f, true, false);
        assert_true(mom == 1.46875f);
        assert_true(w == 0.1484375f);
    }
}

/* ---- adam_update ------------------------------------------------------------------------ */

static float adam_one(float w, float *m, float *v, float g, float b1, float b2, float eps, float l2,
                      float shrink, float step_size, float sqrt_bc2)
{
    float wi = w * shrink;
    float gi = g + l2 * wi;
    float mi = b1 * *m + (1.0f - b1) * gi;
    float vi = b2 * *v + (1.0f - b2) * gi * gi;
    *m = mi;
    *v = vi;
    return wi - step_size * (mi / (sqrtf(vi) / sqrt_bc2 + eps));
}

/* Three steps of Adam (L2 decay) and AdamW (decoupled: shrink) with the bias corrections of
 * steps 1..3, on each size. */
static void test_adam_update(void **state)
{
    (void)state;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 1e-3f, wd = 0.01f;
    for (int t = 0; t < 2; t++) {
        for (int decoupled = 0; decoupled < 2; decoupled++) {
            for (int s = 0; s < NSIZES; s++) {
                int64_t n = sizes[s];
                float *w = buf(n, 21, -1.0f, 1.0f), *want = copy_of(w, n);
                float *m = buf(n, 22, 0.0f, 0.0f), *v = buf(n, 23, 0.0f, 0.0f);
                float *wm = copy_of(m, n), *wv = copy_of(v, n);
                for (int step = 1; step <= 3; step++) {
                    float *g = buf(n, 200 + (uint64_t)step, -1.0f, 1.0f);
                    float step_size = (float)(lr / (1.0 - pow(b1, step)));
                    float sqrt_bc2 = (float)sqrt(1.0 - pow(b2, step));
                    float l2 = decoupled ? 0.0f : wd;
                    float shrink = decoupled ? (float)(1.0 - (double)lr * wd) : 1.0f;
                    tables[t]->adam_update(w, m, v, g, n, b1, b2, eps, l2, shrink, step_size,
                                           sqrt_bc2);
                    for (int64_t i = 0; i < n; i++)
                        want[i] = adam_one(want[i], &wm[i], &wv[i], g[i], b1, b2, eps, l2, shrink,
                                           step_size, sqrt_bc2);
                    rp_free(g);
                }
                char what[64];
                snprintf(what, sizeof what, "adam_update (%s, n %lld)",
                         decoupled ? "AdamW" : "Adam", (long long)n);
                assert_same_bits(w, want, n, tables[t]->name, what);
                assert_same_bits(m, wm, n, tables[t]->name, what);
                assert_same_bits(v, wv, n, tables[t]->name, what);
                rp_free(w), rp_free(want), rp_free(m), rp_free(v), rp_free(wm), rp_free(wv);
            }
        }
    }
}

/* ---- first_nonfinite -------------------------------------------------------------------- */

/* Finite extremes are not flagged: the largest floats, the smallest denormal, zeros of both
 * signs. value is left alone when nothing is found. */
static void test_first_nonfinite_clean(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        for (int s = 0; s < NSIZES; s++) {
            int64_t n = sizes[s];
            float *x = buf(n, 31, -3.0f, 3.0f);
            const float extremes[6] = {FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, -0.0f};
            for (int k = 0; k < 6 && k < n; k++)
                x[(n - 1) * k / 5] = extremes[k];
            float value = 42.0f;
            assert_int_equal(tables[t]->first_nonfinite(&value, x, n), -1);
            assert_true(value == 42.0f);
            assert_int_equal(tables[t]->first_nonfinite(NULL, x, n), -1);
            rp_free(x);
        }
        float value = 42.0f;
        assert_int_equal(tables[t]->first_nonfinite(&value, NULL, 0), -1);
        assert_true(value == 42.0f);
    }
}

/* NaN, +inf and -inf at the first, a middle and the last element, with later bad ones too: the
 * index of the first and its value. */
static void test_first_nonfinite_finds_first(void **state)
{
    (void)state;
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int t = 0; t < 2; t++) {
        for (int s = 0; s < NSIZES; s++) {
            int64_t n = sizes[s];
            int64_t places[3] = {0, n / 2, n - 1};
            for (int b = 0; b < 3; b++) {
                for (int p = 0; p < 3; p++) {
                    float *x = buf(n, 41, -3.0f, 3.0f);
                    int64_t at = places[p];
                    x[at] = bad[b];
                    for (int64_t i = at + 1; i < n; i += 7)
                        x[i] = bad[(b + 1) % 3]; /* later ones must not be reported */
                    float value = 0.0f;
                    int64_t got = tables[t]->first_nonfinite(&value, x, n);
                    if (got != at)
                        fail_msg("%s first_nonfinite: %g at %lld of %lld, found %lld",
                                 tables[t]->name, (double)bad[b], (long long)at, (long long)n,
                                 (long long)got);
                    if (isnan(bad[b]))
                        assert_true(isnan(value));
                    else
                        assert_true(value == bad[b]);
                    assert_int_equal(tables[t]->first_nonfinite(NULL, x, n), at);
                    rp_free(x);
                }
            }
        }
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_present),
        cmocka_unit_test(test_sgd_update),
        cmocka_unit_test(test_sgd_update_by_hand),
        cmocka_unit_test(test_adam_update),
        cmocka_unit_test(test_first_nonfinite_clean),
        cmocka_unit_test(test_first_nonfinite_finds_first),
    };
    return tu_run_group_tests(argc, argv, tests, setup, NULL);
}
