/*
 * test_frechet.c - the Gaussian sums (rp_gauss_sums_*) and the Fréchet
 * distance: closed forms (diagonal, commuting through a common rotation, and
 * non-commuting 2x2 blocks, whose matrix square root has a formula of its
 * own), moments against a direct two-pass computation, merging, a sample
 * set against itself, and bad input.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A small deterministic generator of doubles in [0, 1) (splitmix64). */
static uint64_t rng_state;
static double urand(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static double *dalloc(size_t n)
{
    double *p = calloc(n, sizeof *p);
    assert_non_null(p);
    return p;
}

/* c = a b (d x d), the plain triple loop. */
static void naive_mul(double *c, const double *a, const double *b, int d)
{
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double s = 0.0;
            for (int k = 0; k < d; k++)
                s += a[i * d + k] * b[k * d + j];
            c[i * d + j] = s;
        }
}

/* A random orthogonal d x d matrix: the product of three Householder reflections. */
static double *random_orthogonal(int d)
{
    double *q = dalloc((size_t)d * d), *h = dalloc((size_t)d * d), *t = dalloc((size_t)d * d);
    double *v = dalloc((size_t)d);
    for (int i = 0; i < d; i++)
        q[i * d + i] = 1.0;
    for (int r = 0; r < 3; r++) {
        double nv = 0.0;
        for (int i = 0; i < d; i++) {
            v[i] = urand() - 0.5;
            nv += v[i] * v[i];
        }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                h[i * d + j] = (i == j) - 2.0 * v[i] * v[j] / nv;
        naive_mul(t, q, h, d);
        memcpy(q, t, (size_t)d * d * sizeof *q);
    }
    free(v);
    free(t);
    free(h);
    return q;
}

/* out = q m q^T. */
static void conjugate(double *out, const double *q, const double *m, int d)
{
    double *t = dalloc((size_t)d * d), *qt = dalloc((size_t)d * d);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++)
            qt[j * d + i] = q[i * d + j];
    naive_mul(t, q, m, d);
    naive_mul(out, t, qt, d);
    free(qt);
    free(t);
}

static void random_means(double *mu1, double *mu2, int d)
{
    for (int i = 0; i < d; i++) {
        mu1[i] = 2.0 * urand() - 1.0;
        mu2[i] = 2.0 * urand() - 1.0;
    }
}

static double mean_term(const double *mu1, const double *mu2, int d)
{
    double s = 0.0;
    for (int i = 0; i < d; i++)
        s += (mu1[i] - mu2[i]) * (mu1[i] - mu2[i]);
    return s;
}

static void check_rel(double got, double want, double tol, const char *what)
{
    if (!(fabs(got - want) <= tol * fabs(want))) {
        print_error("%s: %.17g, expected %.17g (relative error %.3g, tolerance %.1g)\n", what, got,
                    want, fabs(got - want) / fabs(want), tol);
        fail();
    }
}

/*
 * Commuting covariances q diag(a) q^T and q diag(b) q^T (q = I: diagonal):
 * FD = |mu1 - mu2|^2 + sum (sqrt(a_i) - sqrt(b_i))^2. Some variances are 0.
 */
static void check_commuting(int d, bool rotate)
{
    double *mu1 = dalloc((size_t)d), *mu2 = dalloc((size_t)d);
    double *da = dalloc((size_t)d * d), *db = dalloc((size_t)d * d);
    double *s1 = dalloc((size_t)d * d), *s2 = dalloc((size_t)d * d);
    random_means(mu1, mu2, d);
    double want = mean_term(mu1, mu2, d);
    for (int i = 0; i < d; i++) {
        double a = (i % 5 == 3) ? 0.0 : 0.1 + 3.0 * urand();
        double b = (i % 7 == 2) ? 0.0 : 0.1 + 3.0 * urand();
        da[i * d + i] = a;
        db[i * d + i] = b;
        want += (sqrt(a) - sqrt(b)) * (sqrt(a) - sqrt(b));
    }
    if (rotate) {
        double *q = random_orthogonal(d);
        conjugate(s1, q, da, d);
        conjugate(s2, q, db, d);
        free(q);
    } else {
        memcpy(s1, da, (size_t)d * d * sizeof *s1);
        memcpy(s2, db, (size_t)d * d * sizeof *s2);
    }
    double fd = NAN;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, d, &fd), RP_OK);
    check_rel(fd, want, 1e-9, rotate ? "rotated commuting covariances" : "diagonal covariances");
    /* The distance is symmetric in its two Gaussians. */
    double back = NAN;
    assert_int_equal(rp_frechet_distance(mu2, s2, mu1, s1, d, &back), RP_OK);
    check_rel(back, want, 1e-9, "swapped arguments");
    free(s2);
    free(s1);
    free(db);
    free(da);
    free(mu2);
    free(mu1);
}

static void test_fd_diagonal(void **state)
{
    (void)state;
    rng_state = 1;
    check_commuting(1, false);
    check_commuting(7, false);
    check_commuting(40, false);
}

static void test_fd_commuting_rotated(void **state)
{
    (void)state;
    rng_state = 2;
    check_commuting(2, true);
    check_commuting(33, true);
    check_commuting(300, true); /* wider than one block of the products */
}

/*
 * Non-commuting covariances, block-diagonal in 2x2 blocks A_k, B_k (each a
 * different rotation of a diagonal), then both turned by one rotation q
 * (which leaves the distance unchanged). For 2x2 PSD M, Tr sqrt(M) =
 * sqrt(Tr M + 2 sqrt(det M)); with M = A^1/2 B A^1/2, Tr M = Tr(A B) and
 * det M = det A det B, so each block adds
 *     Tr A + Tr B - 2 sqrt(Tr(A B) + 2 sqrt(det A det B)).
 */
static void check_blocks(int blocks)
{
    int d = 2 * blocks;
    double *mu1 = dalloc((size_t)d), *mu2 = dalloc((size_t)d);
    double *ba = dalloc((size_t)d * d), *bb = dalloc((size_t)d * d);
    double *s1 = dalloc((size_t)d * d), *s2 = dalloc((size_t)d * d);
    random_means(mu1, mu2, d);
    double want = mean_term(mu1, mu2, d);
    for (int k = 0; k < blocks; k++) {
        double m[2][2][2]; /* the two blocks */
        double dets[2];    /* p q, exact (m00 m11 - m01^2 would round a 0 to about eps) */
        for (int which = 0; which < 2; which++) {
            double th = 3.14159 * urand(), c = cos(th), s = sin(th);
            double p = 0.05 + 2.0 * urand(), q = (k % 4 == 1 && which) ? 0.0 : 0.05 + 2.0 * urand();
            m[which][0][0] = c * c * p + s * s * q;
            m[which][1][1] = s * s * p + c * c * q;
            m[which][0][1] = m[which][1][0] = c * s * (p - q);
            dets[which] = p * q;
        }
        double tr_a = m[0][0][0] + m[0][1][1], tr_b = m[1][0][0] + m[1][1][1];
        double tr_ab = 0.0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                tr_ab += m[0][i][j] * m[1][j][i];
        double det = dets[0] * dets[1];
        want += tr_a + tr_b - 2.0 * sqrt(tr_ab + 2.0 * sqrt(det));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                ba[(2 * k + i) * d + 2 * k + j] = m[0][i][j];
                bb[(2 * k + i) * d + 2 * k + j] = m[1][i][j];
            }
    }
    double *q = random_orthogonal(d);
    conjugate(s1, q, ba, d);
    conjugate(s2, q, bb, d);
    free(q);
    double fd = NAN;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, d, &fd), RP_OK);
    check_rel(fd, want, 1e-9, "non-commuting 2x2 blocks");
    free(s2);
    free(s1);
    free(bb);
    free(ba);
    free(mu2);
    free(mu1);
}

static void test_fd_noncommuting(void **state)
{
    (void)state;
    rng_state = 3;
    check_blocks(1);
    check_blocks(20);
    check_blocks(140); /* d 280 */
}

/* Rows of correlated features: x = z W + offset, z uniform. */
static float *make_features(int64_t rows, int d, uint64_t seed, float offset)
{
    float *z = malloc((size_t)rows * d * sizeof *z), *x = malloc((size_t)rows * d * sizeof *x);
    float *wm = malloc((size_t)d * d * sizeof *wm);
    assert_non_null(z);
    assert_non_null(x);
    assert_non_null(wm);
    tu_fill(z, rows * d, seed, -1.0f, 1.0f);
    tu_fill(wm, (int64_t)d * d, seed + 1, -0.5f, 0.5f);
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < d; j++) {
            float s = offset;
            for (int k = 0; k < d; k++)
                s += z[r * d + k] * wm[k * d + j];
            x[r * d + j] = s;
        }
    free(wm);
    free(z);
    return x;
}

static void test_moments_two_pass(void **state)
{
    (void)state;
    const int d = 37;
    const int64_t rows = 1000;
    float *x = make_features(rows, d, 11, 0.5f);
    rp_gauss_sums s;
    assert_int_equal(rp_gauss_sums_init(&s, d), RP_OK);
    /* Pieces of odd sizes, across the accumulator's 64-row blocks. */
    assert_int_equal(rp_gauss_sums_add(&s, x, 1), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&s, x + 1 * d, 0), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&s, x + 1 * d, 500), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&s, x + 501 * d, rows - 501), RP_OK);
    assert_true(s.n == (double)rows);
    double *mean = dalloc((size_t)d), *cov = dalloc((size_t)d * d);
    assert_int_equal(rp_gauss_sums_moments(&s, mean, cov), RP_OK);

    /* Two passes: the mean, then the centred products. */
    double *m2 = dalloc((size_t)d), *c2 = dalloc((size_t)d * d);
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < d; j++)
            m2[j] += x[r * d + j];
    for (int j = 0; j < d; j++)
        m2[j] /= (double)rows;
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                c2[i * d + j] += (x[r * d + i] - m2[i]) * (x[r * d + j] - m2[j]);
    double cmax = 0.0;
    for (int k = 0; k < d * d; k++) {
        c2[k] /= (double)(rows - 1);
        if (fabs(c2[k]) > cmax) cmax = fabs(c2[k]);
    }
    for (int j = 0; j < d; j++)
        assert_true(fabs(mean[j] - m2[j]) <= 1e-12 * fabs(m2[j]) + 1e-15);
    for (int k = 0; k < d * d; k++) {
        if (!(fabs(cov[k] - c2[k]) <= 1e-11 * cmax)) {
            print_error("cov[%d, %d] %.17g, two-pass %.17g\n", k / d, k % d, cov[k], c2[k]);
            fail();
        }
    }
    /* outer and cov are exactly symmetric. */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            assert_true(s.outer[i * d + j] == s.outer[j * d + i]);
            assert_true(cov[i * d + j] == cov[j * d + i]);
        }
    /* Either output may be NULL. */
    double m3[37];
    assert_int_equal(rp_gauss_sums_moments(&s, m3, NULL), RP_OK);
    assert_memory_equal(m3, mean, sizeof m3);
    assert_int_equal(rp_gauss_sums_moments(&s, NULL, c2), RP_OK);
    assert_memory_equal(c2, cov, (size_t)d * d * sizeof *cov);
    rp_gauss_sums_free(&s);
    free(c2);
    free(m2);
    free(cov);
    free(mean);
    free(x);
}

static void test_merge(void **state)
{
    (void)state;
    const int d = 19;
    const int64_t rows = 301, half = 137;
    float *x = make_features(rows, d, 21, -0.25f);
    rp_gauss_sums whole, a, b, pieces;
    assert_int_equal(rp_gauss_sums_init(&whole, d), RP_OK);
    assert_int_equal(rp_gauss_sums_init(&a, d), RP_OK);
    assert_int_equal(rp_gauss_sums_init(&b, d), RP_OK);
    assert_int_equal(rp_gauss_sums_init(&pieces, d), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&whole, x, rows), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&a, x, half), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&b, x + half * d, rows - half), RP_OK);
    assert_int_equal(rp_gauss_sums_merge(&a, &b), RP_OK);
    assert_true(a.n == whole.n);
    for (int j = 0; j < d; j++)
        assert_true(fabs(a.sum[j] - whole.sum[j]) <= 1e-12 * (fabs(whole.sum[j]) + 1.0));
    for (int k = 0; k < d * d; k++)
        assert_true(fabs(a.outer[k] - whole.outer[k]) <= 1e-12 * (fabs(whole.outer[k]) + 1.0));
    /* Added in pieces into one set: bitwise the whole's sums. */
    assert_int_equal(rp_gauss_sums_add(&pieces, x, half), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&pieces, x + half * d, rows - half), RP_OK);
    assert_true(pieces.n == whole.n);
    assert_memory_equal(pieces.sum, whole.sum, (size_t)d * sizeof *whole.sum);
    assert_memory_equal(pieces.outer, whole.outer, (size_t)d * d * sizeof *whole.outer);
    rp_gauss_sums_free(&pieces);
    rp_gauss_sums_free(&b);
    rp_gauss_sums_free(&a);
    rp_gauss_sums_free(&whole);
    free(x);
}

/* A sample set against itself is 0; against itself shifted by c, |c|^2. */
static void test_fd_self(void **state)
{
    (void)state;
    const int d = 64;
    const int64_t rows = 600;
    float *x = make_features(rows, d, 31, 0.3f);
    rp_gauss_sums s;
    assert_int_equal(rp_gauss_sums_init(&s, d), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&s, x, rows), RP_OK);
    double *mu = dalloc((size_t)d), *cov = dalloc((size_t)d * d), *mu_c = dalloc((size_t)d);
    assert_int_equal(rp_gauss_sums_moments(&s, mu, cov), RP_OK);
    double trace = 0.0, shift = 0.0;
    for (int i = 0; i < d; i++) {
        trace += cov[i * d + i];
        double c = 0.01 * (i % 9) - 0.04;
        mu_c[i] = mu[i] + c;
        shift += (mu_c[i] - mu[i]) * (mu_c[i] - mu[i]);
    }
    double fd = NAN;
    assert_int_equal(rp_frechet_distance(mu, cov, mu, cov, d, &fd), RP_OK);
    if (!(fabs(fd) < 1e-9 * trace)) {
        print_error("FD of a set with itself: %.17g (trace %.17g)\n", fd, trace);
        fail();
    }
    assert_int_equal(rp_frechet_distance(mu, cov, mu_c, cov, d, &fd), RP_OK);
    assert_true(fabs(fd - shift) < 1e-9 * trace);
    /* And a different set is clearly apart. */
    float *y = make_features(rows, d, 41, 0.3f);
    rp_gauss_sums t;
    assert_int_equal(rp_gauss_sums_init(&t, d), RP_OK);
    assert_int_equal(rp_gauss_sums_add(&t, y, rows), RP_OK);
    double *mu2 = dalloc((size_t)d), *cov2 = dalloc((size_t)d * d);
    assert_int_equal(rp_gauss_sums_moments(&t, mu2, cov2), RP_OK);
    assert_int_equal(rp_frechet_distance(mu, cov, mu2, cov2, d, &fd), RP_OK);
    assert_true(fd > 0.01 * trace);
    rp_gauss_sums_free(&t);
    rp_gauss_sums_free(&s);
    free(cov2);
    free(mu2);
    free(y);
    free(mu_c);
    free(cov);
    free(mu);
    free(x);
}

static void test_errors(void **state)
{
    (void)state;
    rp_gauss_sums s, other;
    memset(&s, 0x5a, sizeof s);
    assert_int_equal(rp_gauss_sums_init(&s, 0), RP_ERR_INVALID);
    tu_assert_error_contains("d is 0");
    assert_null(s.sum);
    assert_null(s.outer);
    assert_int_equal(rp_gauss_sums_init(NULL, 3), RP_ERR_INVALID);
    assert_int_equal(rp_gauss_sums_add(&s, NULL, 0), RP_ERR_INVALID); /* not initialised */
    rp_gauss_sums_free(&s);                                           /* zeroed: a no-op */

    assert_int_equal(rp_gauss_sums_init(&s, 3), RP_OK);
    float x[5 * 3];
    for (int k = 0; k < 15; k++)
        x[k] = (float)k;
    assert_int_equal(rp_gauss_sums_add(&s, x, 1), RP_OK);
    assert_int_equal(rp_gauss_sums_moments(&s, NULL, NULL), RP_ERR_INVALID); /* n = 1 */
    tu_assert_error_contains("n is 1");
    x[3 * 3 + 2] = NAN;
    double sum_before[3], outer_before[9];
    memcpy(sum_before, s.sum, sizeof sum_before);
    memcpy(outer_before, s.outer, sizeof outer_before);
    assert_int_equal(rp_gauss_sums_add(&s, x, 5), RP_ERR_NUMERIC);
    tu_assert_error_contains("x[3, 2]");
    assert_true(s.n == 1.0); /* nothing added */
    assert_memory_equal(s.sum, sum_before, sizeof sum_before);
    assert_memory_equal(s.outer, outer_before, sizeof outer_before);
    x[3 * 3 + 2] = INFINITY;
    assert_int_equal(rp_gauss_sums_add(&s, x, 5), RP_ERR_NUMERIC);
    assert_int_equal(rp_gauss_sums_add(&s, x, -1), RP_ERR_INVALID);
    assert_int_equal(rp_gauss_sums_add(&s, NULL, 2), RP_ERR_INVALID);
    assert_int_equal(rp_gauss_sums_init(&other, 4), RP_OK);
    assert_int_equal(rp_gauss_sums_merge(&s, &other), RP_ERR_INVALID);
    tu_assert_error_contains("d 4 into d 3");
    rp_gauss_sums_free(&other);
    rp_gauss_sums_free(&s);
    rp_gauss_sums_free(&s); /* twice: a no-op */
    rp_gauss_sums_free(NULL);

    double mu1[2] = {0, 0}, mu2[2] = {1, 0}, s1[4] = {1, 0, 0, 1}, s2[4] = {2, 0, 0, 1};
    double fd = 123.0;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, 0, &fd), RP_ERR_INVALID);
    tu_assert_error_contains("d is 0");
    assert_int_equal(rp_frechet_distance(mu1, NULL, mu2, s2, 2, &fd), RP_ERR_INVALID);
    tu_assert_error_contains("s1 NULL");
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, 2, NULL), RP_ERR_INVALID);
    s2[2] = NAN;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, 2, &fd), RP_ERR_NUMERIC);
    tu_assert_error_contains("s2[1, 0]");
    s2[2] = 0.0;
    mu1[1] = -INFINITY;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, 2, &fd), RP_ERR_NUMERIC);
    tu_assert_error_contains("mu1[1]");
    assert_true(fd == 123.0); /* untouched on error */
    mu1[1] = 0.0;
    assert_int_equal(rp_frechet_distance(mu1, s1, mu2, s2, 2, &fd), RP_OK);
    check_rel(fd, 1.0 + (sqrt(2.0) - 1.0) * (sqrt(2.0) - 1.0), 1e-12, "2-d diagonal");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_diagonal),     cmocka_unit_test(test_fd_commuting_rotated),
        cmocka_unit_test(test_fd_noncommuting), cmocka_unit_test(test_moments_two_pass),
        cmocka_unit_test(test_merge),           cmocka_unit_test(test_fd_self),
        cmocka_unit_test(test_errors),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
