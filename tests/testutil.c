#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

rp_replicator *tu_replicator_make(const rp_config *cfg)
{
    rp_replicator *r = NULL;
    rp_status st = rp_replicator_create(&r, cfg);
    if (st != RP_OK) print_error("rp_replicator_create: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_non_null(r);
    return r;
}

void tu_run_ok(rp_replicator *r, rp_replica_fn fn, void *arg)
{
    rp_status st = rp_replicator_run(r, fn, arg);
    if (st != RP_OK)
        print_error("rp_replicator_run: %s: %s\n", rp_status_name(st), rp_last_error());
    assert_int_equal(st, RP_OK);
}

bool tu_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

void tu_sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Does nothing: the signal's work is to interrupt the blocked call (no SA_RESTART). */
static void on_alarm(int sig)
{
    (void)sig;
}

/* The handler tu_alarm_arm replaced, restored by tu_alarm_disarm. */
static struct sigaction alarm_old;

void tu_alarm_arm(unsigned seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &alarm_old), 0);
    alarm(seconds);
}

void tu_alarm_disarm(void)
{
    alarm(0);
    assert_int_equal(sigaction(SIGALRM, &alarm_old, NULL), 0);
}

void tu_fill(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    rp_rng_fill_uniform(rp_hash_str(seed, "test"), 0, x, (size_t)n, lo, hi);
}

bool tu_all_zero(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0.0f) return false;
    return true;
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

int tu_tmpdir_setup(void **state)
{
    (void)state;
    return tu_tmpdir_create(tu_program());
}

int tu_tmpdir_teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove();
    return 0;
}

unsigned char *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_true(size >= 0);
    unsigned char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    buf[size] = 0; /* a NUL after the contents, so a text file can be searched as a string */
    *n = (size_t)size;
    return buf;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tu_damage_float(const char *path, float value)
{
    assert_true(value != 0);
    size_t size;
    unsigned char *bytes = tu_read_file(path, &size);
    unsigned char *hit = NULL;
    for (size_t i = 0; i + 4 <= size && !hit; i++)
        if (!memcmp(bytes + i, &value, 4)) hit = bytes + i;
    assert_non_null(hit);
    hit[1] ^= 0x40;
    tu_write_file(path, bytes, size);
    free(bytes);
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
