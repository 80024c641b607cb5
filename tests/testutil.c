#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

void tu_fill(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    rp_rng_fill_uniform(rp_hash_str(seed, "test"), 0, x, (size_t)n, lo, hi);
}

double tu_max_rel_diff(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= worst)) worst = d; /* NaN-safe: NaN becomes the worst */
    }
    return worst;
}

void tu_check_close(const float *a, const float *b, int64_t n, double tol, const char *what)
{
    double d = tu_max_rel_diff(a, b, n);
    if (!(d < tol)) fail_msg("%s: cpu differs from ref by %g", what, d);
}

void tu_batch_norm_double(float *y, float *dgamma, float *dbeta, float *dx, const float *x,
                          const float *dy, const float *gamma, const float *beta, double eps,
                          int64_t m, int c)
{
    for (int j = 0; j < c; j++) {
        double mu = 0, var = 0, sg = 0, sgh = 0;
        for (int64_t i = 0; i < m; i++)
            mu += x[i * c + j];
        mu /= (double)m;
        for (int64_t i = 0; i < m; i++)
            var += ((double)x[i * c + j] - mu) * ((double)x[i * c + j] - mu);
        double invstd = 1.0 / sqrt(var / (double)m + eps);
        for (int64_t i = 0; i < m; i++) {
            double h = ((double)x[i * c + j] - mu) * invstd;
            y[i * c + j] = (float)((double)gamma[j] * h + beta[j]);
            sg += dy[i * c + j];
            sgh += dy[i * c + j] * h;
        }
        dbeta[j] = (float)sg, dgamma[j] = (float)sgh;
        for (int64_t i = 0; i < m; i++) {
            double h = ((double)x[i * c + j] - mu) * invstd;
            dx[i * c + j] = (float)((double)gamma[j] * invstd *
                                    (dy[i * c + j] - sg / (double)m - h * sgh / (double)m));
        }
    }
}

void tu_for_each_team(void (*body)(void))
{
    int teams[] = {1, 4};
    for (int i = 0; i < 2; i++) {
        omp_set_num_threads(teams[i]);
        body();
    }
    omp_set_num_threads(1);
}

void tu_assert_error_contains(const char *needle)
{
    const char *msg = rp_last_error();
    if (!strstr(msg, needle)) {
        print_error("expected error containing \"%s\", got \"%s\"\n", needle, msg);
        fail();
    }
}

static char tmp_dir[128];

int tu_tmpdir_create(const char *tag)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/rp_test_%s_XXXXXX", tag);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

const char *tu_tmpdir(void)
{
    return tmp_dir;
}

const char *tu_tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp_dir, name);
    return buf;
}

/* Removes every entry of dir (recursing into directories, not following links) and dir. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void tu_tmpdir_remove(void)
{
    if (tmp_dir[0]) remove_tree(tmp_dir);
}

unsigned char *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    assert_true(size >= 0);
    unsigned char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    buf[size] = 0; /* a NUL after the contents, so a text file can be searched as a string */
    *n = (size_t)size;
    return buf;
}

float *tu_read(const rp_tensor *x)
{
    assert_non_null(x);
    float *v = malloc((size_t)(x->numel > 0 ? x->numel : 1) * sizeof(float));
    assert_non_null(v);
    if (rp_tensor_read(x, v, x->numel) != RP_OK) fail_msg("tu_read: %s", rp_last_error());
    return v;
}

float *tu_read_grad(const rp_tensor *x)
{
    assert_non_null(x);
    float *g = malloc((size_t)(x->numel > 0 ? x->numel : 1) * sizeof(float));
    assert_non_null(g);
    if (rp_tensor_read_grad(x, g, x->numel) != RP_OK) fail_msg("tu_read_grad: %s", rp_last_error());
    return g;
}

float *tu_read_values(const rp_params *p)
{
    int64_t n = rp_params_numel(p);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(v);
    if (rp_params_read_values(p, v) != RP_OK) fail_msg("tu_read_values: %s", rp_last_error());
    return v;
}

float *tu_param_grads(const rp_params *p)
{
    int64_t n = rp_params_trainable_numel(p);
    float *g = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(g);
    if (rp_params_read_grads(p, g) != RP_OK) fail_msg("tu_param_grads: %s", rp_last_error());
    return g;
}

float *tu_optimizer_state(const rp_optimizer *opt, int64_t *n)
{
    int64_t numel = 0;
    rp_optimizer_state(opt, &numel); /* the size only: the block is storage */
    float *state = calloc((size_t)(numel > 0 ? numel : 1), sizeof(float));
    assert_non_null(state);
    if (rp_optimizer_read_state(opt, state) != RP_OK)
        fail_msg("tu_optimizer_state: %s", rp_last_error());
    if (n) *n = numel;
    return state;
}
