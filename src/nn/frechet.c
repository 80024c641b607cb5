/*
 * frechet.c - Gaussian sums (mergeable across replicas) and the Fréchet
 * distance between two Gaussians, the statistic behind FID.
 *
 * The sums are kept in double: FID compares covariances of thousands of
 * features over tens of thousands of samples, where float sums would lose
 * the digits that the distance is made of. The distance needs matrix square
 * roots, which come from LAPACK's symmetric eigensolver; the two matrix
 * products around it are plain blocked loops here, since the library's GEMM
 * (oneDNN) is single precision and LAPACK does not export BLAS portably.
 *
 * LAPACKE is loaded on first use (dlopen), not linked: Debian's LAPACK is
 * usually OpenBLAS's, whose constructor starts a thread pool when the library
 * loads - before main() can block SIGINT and SIGTERM - and such a thread,
 * with the signals unblocked, would take the trainer's stop signal and drop
 * it (or die of it). Loaded later, from a thread that blocks them, its
 * threads block them too; and programs that never ask for a distance never
 * load it.
 */
#include <dlfcn.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "replicator/nn.h"

typedef lapack_int (*dsyevd_fn)(int layout, char jobz, char uplo, lapack_int n, double *a,
                                lapack_int lda, double *w);
static dsyevd_fn lapack_dsyevd;
static char lapack_error[256];
static pthread_once_t lapack_once = PTHREAD_ONCE_INIT;

static void lapack_load(void)
{
    static const char *const names[] = {"liblapacke.so.3", "liblapacke.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lapack_dsyevd; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(lapack_error, sizeof lapack_error, "%s", dlerror());
            continue;
        }
        lapack_dsyevd = (dsyevd_fn)dlsym(h, "LAPACKE_dsyevd");
        if (!lapack_dsyevd) snprintf(lapack_error, sizeof lapack_error, "%s", dlerror());
    }
}

/* LAPACKE_dsyevd, loaded once; RP_ERR_UNSUPPORTED naming what failed if it cannot be. */
static rp_status lapack_get(dsyevd_fn *fn)
{
    pthread_once(&lapack_once, lapack_load);
    *fn = lapack_dsyevd;
    if (*fn) return RP_OK;
    return RP_ERROR(RP_ERR_UNSUPPORTED,
                    "rp_frechet_distance needs LAPACKE, which could not be loaded "
                    "(%s): apt-get install liblapacke",
                    lapack_error);
}

/* Rows converted to double at a time in rp_gauss_sums_add (the block's x stays in cache). */
#define SUMS_BLOCK_ROWS 64
/* Column and depth blocks of the matrix product: a GEMM_KB x GEMM_JB block of B is 256 KiB. */
#define GEMM_JB 256
#define GEMM_KB 128

rp_status rp_gauss_sums_init(rp_gauss_sums *s, int d)
{
    if (!s) return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_init: s is NULL");
    memset(s, 0, sizeof *s);
    if (d < 1) return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_init: d is %d, expected >= 1", d);
    s->sum = rp_calloc((size_t)d * sizeof *s->sum);
    s->outer = rp_calloc((size_t)d * (size_t)d * sizeof *s->outer);
    if (!s->sum || !s->outer) {
        rp_free(s->sum);
        rp_free(s->outer);
        memset(s, 0, sizeof *s);
        return RP_ERROR(RP_ERR_NOMEM, "rp_gauss_sums_init: cannot allocate %d x %d doubles", d, d);
    }
    s->d = d;
    return RP_OK;
}

void rp_gauss_sums_free(rp_gauss_sums *s)
{
    if (!s) return;
    rp_free(s->sum);
    rp_free(s->outer);
    memset(s, 0, sizeof *s);
}

static bool sums_ok(const rp_gauss_sums *s)
{
    return s && s->d >= 1 && s->sum && s->outer;
}

/* Copies the upper triangle of the d x d matrix m onto its lower one. */
static void mirror_upper(double *m, int d)
{
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++)
            m[(size_t)j * d + i] = m[(size_t)i * d + j];
}

rp_status rp_gauss_sums_add(rp_gauss_sums *s, const float *x, int64_t rows)
{
    if (!sums_ok(s)) return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_add: sums not initialised");
    if (rows < 0 || (rows > 0 && !x))
        return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_add: rows %lld, x %s", (long long)rows,
                        x ? "set" : "NULL");
    const int d = s->d;
    /* All or nothing: a non-finite feature must not leave half a batch in the sums. */
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < d; j++)
            if (!isfinite(x[r * d + j]))
                return RP_ERROR(RP_ERR_NUMERIC,
                                "rp_gauss_sums_add: x[%lld, %d] is %g, expected a finite value",
                                (long long)r, j, (double)x[r * d + j]);
    if (rows == 0) return RP_OK;

    double *blk = rp_alloc((size_t)SUMS_BLOCK_ROWS * (size_t)d * sizeof *blk);
    if (!blk) return rp_last_status();
    for (int64_t r0 = 0; r0 < rows; r0 += SUMS_BLOCK_ROWS) {
        int nb = rows - r0 < SUMS_BLOCK_ROWS ? (int)(rows - r0) : SUMS_BLOCK_ROWS;
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < d; j++)
                blk[(size_t)b * d + j] = x[(r0 + b) * d + j];
        /*
         * Upper triangle, row i of outer held in cache across the block's
         * rows; each entry still receives the rows in order.
         */
        for (int i = 0; i < d; i++) {
            double *out = s->outer + (size_t)i * d;
            for (int b = 0; b < nb; b++) {
                const double *xb = blk + (size_t)b * d;
                const double a = xb[i];
                for (int j = i; j < d; j++)
                    out[j] += a * xb[j];
            }
        }
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < d; j++)
                s->sum[j] += blk[(size_t)b * d + j];
    }
    rp_free(blk);
    mirror_upper(s->outer, d);
    s->n += (double)rows;
    return RP_OK;
}

rp_status rp_gauss_sums_merge(rp_gauss_sums *into, const rp_gauss_sums *from)
{
    if (!sums_ok(into) || !sums_ok(from))
        return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_merge: %s sums not initialised",
                        sums_ok(into) ? "source" : "destination");
    if (into->d != from->d)
        return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_merge: d %d into d %d", from->d, into->d);
    const size_t d = (size_t)into->d;
    into->n += from->n;
    for (size_t j = 0; j < d; j++)
        into->sum[j] += from->sum[j];
    for (size_t k = 0; k < d * d; k++)
        into->outer[k] += from->outer[k];
    return RP_OK;
}

rp_status rp_gauss_sums_moments(const rp_gauss_sums *s, double *mean, double *cov)
{
    if (!sums_ok(s)) return RP_ERROR(RP_ERR_INVALID, "rp_gauss_sums_moments: sums not initialised");
    if (!(s->n >= 2))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_gauss_sums_moments: n is %g, a covariance needs at least 2 rows", s->n);
    const int d = s->d;
    const double n = s->n;
    if (mean)
        for (int j = 0; j < d; j++)
            mean[j] = s->sum[j] / n;
    if (cov)
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++)
                cov[(size_t)i * d + j] =
                    (s->outer[(size_t)i * d + j] - s->sum[i] * s->sum[j] / n) / (n - 1.0);
    return RP_OK;
}

/* ---- the Fréchet distance --------------------------------------------------- */

/* Fails with RP_ERR_NUMERIC on the first non-finite of v[n], named `name`. */
static rp_status check_finite(const double *v, size_t n, int d, const char *name, bool matrix)
{
    for (size_t k = 0; k < n; k++) {
        if (isfinite(v[k])) continue;
        if (matrix)
            return RP_ERROR(RP_ERR_NUMERIC, "rp_frechet_distance: %s[%zu, %zu] is %g", name,
                            k / (size_t)d, k % (size_t)d, v[k]);
        return RP_ERROR(RP_ERR_NUMERIC, "rp_frechet_distance: %s[%zu] is %g", name, k, v[k]);
    }
    return RP_OK;
}

/* c = a b for d x d row-major matrices (c distinct from both), blocked for the cache. */
static void matmul(double *c, const double *a, const double *b, int d)
{
    memset(c, 0, (size_t)d * (size_t)d * sizeof *c);
    for (int j0 = 0; j0 < d; j0 += GEMM_JB) {
        int j1 = j0 + GEMM_JB < d ? j0 + GEMM_JB : d;
        for (int k0 = 0; k0 < d; k0 += GEMM_KB) {
            int k1 = k0 + GEMM_KB < d ? k0 + GEMM_KB : d;
            for (int i = 0; i < d; i++) {
                double *ci = c + (size_t)i * d;
                const double *ai = a + (size_t)i * d;
                for (int k = k0; k < k1; k++) {
                    const double aik = ai[k];
                    const double *bk = b + (size_t)k * d;
                    for (int j = j0; j < j1; j++)
                        ci[j] += aik * bk[j];
                }
            }
        }
    }
}

/*
 * The size below which an eigenvalue of w[d] is rounding, not signal:
 * dsyevd's eigenvalues are accurate to about d * eps * max |w|, and a zero
 * eigenvalue computed as that much would add its square root, about 1e-8 of
 * the scale, to the trace. Eigenvalues up to this floor count as 0; a true one
 * that small contributes no more than the rounding does.
 */
static double rounding_floor(const double *w, int d)
{
    double big = 0.0;
    for (int i = 0; i < d; i++)
        if (fabs(w[i]) > big) big = fabs(w[i]);
    return (double)d * DBL_EPSILON * big;
}

/* LAPACKE's info as a status: its own allocation failure, a bad argument, no convergence. */
static rp_status lapack_status(lapack_int info, const char *what, int d)
{
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return RP_ERROR(RP_ERR_NOMEM,
                        "rp_frechet_distance: LAPACK dsyevd (%s, d %d) is out of "
                        "memory",
                        what, d);
    if (info < 0)
        return RP_ERROR(RP_ERR_BACKEND,
                        "rp_frechet_distance: LAPACK dsyevd (%s, d %d) rejected "
                        "argument %d",
                        what, d, (int)-info);
    return RP_ERROR(RP_ERR_NUMERIC,
                    "rp_frechet_distance: LAPACK dsyevd (%s, d %d) did not converge (info %d)",
                    what, d, (int)info);
}

rp_status rp_frechet_distance(const double *mu1, const double *s1, const double *mu2,
                              const double *s2, int d, double *fd)
{
    rp_status status = RP_OK;
    double *e = NULL, *a = NULL, *t = NULL, *m = NULL, *w = NULL;

    if (!mu1 || !s1 || !mu2 || !s2 || !fd)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_frechet_distance: NULL argument (mu1 %s, s1 %s, mu2 %s, s2 %s, fd %s)",
                        mu1 ? "set" : "NULL", s1 ? "set" : "NULL", mu2 ? "set" : "NULL",
                        s2 ? "set" : "NULL", fd ? "set" : "NULL");
    if (d < 1) return RP_ERROR(RP_ERR_INVALID, "rp_frechet_distance: d is %d, expected >= 1", d);
    const size_t dd = (size_t)d * (size_t)d;
    RP_CHECK(check_finite(mu1, (size_t)d, d, "mu1", false));
    RP_CHECK(check_finite(mu2, (size_t)d, d, "mu2", false));
    RP_CHECK(check_finite(s1, dd, d, "s1", true));
    RP_CHECK(check_finite(s2, dd, d, "s2", true));

    e = rp_alloc(dd * sizeof *e);
    a = rp_alloc(dd * sizeof *a);
    t = rp_alloc(dd * sizeof *t);
    m = rp_alloc(dd * sizeof *m);
    w = rp_alloc((size_t)d * sizeof *w);
    if (!e || !a || !t || !m || !w) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_frechet_distance: cannot allocate 4 x %d x %d doubles",
                          d, d);
        goto cleanup;
    }

    double diff = 0.0, tr1 = 0.0, tr2 = 0.0;
    for (int i = 0; i < d; i++) {
        double dm = mu1[i] - mu2[i];
        diff += dm * dm;
        tr1 += s1[(size_t)i * d + i];
        tr2 += s2[(size_t)i * d + i];
    }
    /* Both matrices symmetrised, so that rounding asymmetry in the inputs cannot matter. */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            e[(size_t)i * d + j] = 0.5 * (s1[(size_t)i * d + j] + s1[(size_t)j * d + i]);
            m[(size_t)i * d + j] = 0.5 * (s2[(size_t)i * d + j] + s2[(size_t)j * d + i]);
        }

    /*
     * s1 = V L V^T. Asked for column-major, LAPACK leaves eigenvector i
     * contiguous at e + i*d, which read row-major is V^T: row i of A =
     * L^{1/2} V^T is sqrt(l_i) times it.
     */
    dsyevd_fn dsyevd;
    RP_TRY(lapack_get(&dsyevd));
    lapack_int info = dsyevd(LAPACK_COL_MAJOR, 'V', 'U', d, e, d, w);
    if (info != 0) {
        status = lapack_status(info, "eigenvectors of s1", d);
        goto cleanup;
    }
    double floor1 = rounding_floor(w, d);
    for (int i = 0; i < d; i++) {
        double r = w[i] > floor1 ? sqrt(w[i]) : 0.0;
        for (int k = 0; k < d; k++)
            a[(size_t)i * d + k] = r * e[(size_t)i * d + k];
    }
    /* A s2 A^T = (A s2) A^T, the second product through A's transpose (kept in e). */
    matmul(t, a, m, d);
    for (int i = 0; i < d; i++)
        for (int k = 0; k < d; k++)
            e[(size_t)k * d + i] = a[(size_t)i * d + k];
    matmul(m, t, e, d);
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++) {
            double v = 0.5 * (m[(size_t)i * d + j] + m[(size_t)j * d + i]);
            m[(size_t)i * d + j] = m[(size_t)j * d + i] = v;
        }
    info = dsyevd(LAPACK_ROW_MAJOR, 'N', 'U', d, m, d, w);
    if (info != 0) {
        status = lapack_status(info, "eigenvalues of s1^1/2 s2 s1^1/2", d);
        goto cleanup;
    }
    double floor2 = rounding_floor(w, d), tr_sqrt = 0.0;
    for (int i = 0; i < d; i++)
        if (w[i] > floor2) tr_sqrt += sqrt(w[i]);
    *fd = diff + tr1 + tr2 - 2.0 * tr_sqrt;

cleanup:
    rp_free(w);
    rp_free(m);
    rp_free(t);
    rp_free(a);
    rp_free(e);
    return status;
}
