/*
 * test_d4pg_frames.c - frames of a D4PG policy's episode
 * (rp_d4pg_record_frames): a cart-pole episode of a policy with random
 * weights (so the cart moves) drawn every 50 steps gives 21 PNG frames of
 * the asked size, the first two different; its return is the evaluation's
 * of the same seed; stale frames of a longer recording are removed; the
 * contact sheet holds frames 0, 1, 3, ... 20 pixel for pixel; the GIF,
 * read back by giflib, has every frame, in simulated time, close in colour
 * to the PNG frames; a GIF cut short by a full disk is an I/O error that
 * leaves the previous one; bad input is named. Skips (saying why) where no
 * headless GL context can be made.
 */
#include "testutil.h"

#include <gif_lib.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "models/d4pg/d4pg_job.h"

#define W     64
#define H     48
#define EVERY 50
#define TASK  "cartpole-swingup"

static void skip_without_gl(void)
{
    rp_renderer *r = NULL;
    rp_status st = rp_renderer_create(&r, 8, 8);
    if (st == RP_ERR_UNSUPPORTED) {
        fprintf(stderr, "skipping: no headless GL context here: %s\n", rp_last_error());
        skip();
    }
    assert_int_equal(st, RP_OK);
    rp_renderer_destroy(r);
}

/* A small policy for the task, with random weights: its actions push the cart about. */
static rp_d4pg_policy *random_policy(const char *task)
{
    rp_rl_env *env;
    assert_int_equal(rp_env_create(&env, task, NULL), RP_OK);
    rp_d4pg_config c = rp_d4pg_config_default();
    c.obs_dim = rp_env_get_spec(env)->obs_dim;
    c.act_dim = rp_env_get_spec(env)->act_dim;
    rp_env_destroy(env);
    c.policy_layers[0] = 16, c.policy_layers[1] = 16, c.policy_layers[2] = 0;
    rp_d4pg_policy *p;
    assert_int_equal(rp_d4pg_policy_create(&p, &c), RP_OK);
    rp_params *ps = rp_d4pg_policy_params(p);
    float *v = malloc((size_t)rp_params_numel(ps) * sizeof(float));
    assert_non_null(v);
    tu_fill(v, rp_params_numel(ps), 7, -1.0f, 1.0f);
    assert_int_equal(rp_params_write_values(ps, v), RP_OK);
    free(v);
    return p;
}

static uint8_t *read_png(const char *dir, const char *name, int want_h, int want_w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint8_t *px;
    int h, w, c;
    assert_int_equal(rp_image_read_png(path, &px, &h, &w, &c), RP_OK);
    assert_int_equal(h, want_h);
    assert_int_equal(w, want_w);
    assert_int_equal(c, 3);
    return px;
}

static void touch(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("stale", f);
    fclose(f);
}

static bool exists(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void check_gif(const char *dir, uint8_t *const *frames, int n, double control_dt)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/episode.gif", dir);
    int err = 0;
    GifFileType *g = DGifOpenFileName(path, &err);
    assert_non_null(g);
    assert_int_equal(DGifSlurp(g), GIF_OK);
    assert_int_equal(g->SWidth, W);
    assert_int_equal(g->SHeight, H);
    assert_int_equal(g->ImageCount, n);
    int step_cs = (int)lround(EVERY * control_dt * 100);
    double worst_mean = 0;
    for (int i = 0; i < n; i++) {
        SavedImage *im = &g->SavedImages[i];
        assert_int_equal(im->ImageDesc.Width, W);
        assert_int_equal(im->ImageDesc.Height, H);
        ColorMapObject *map = im->ImageDesc.ColorMap ? im->ImageDesc.ColorMap : g->SColorMap;
        assert_non_null(map);
        GraphicsControlBlock gcb;
        assert_int_equal(DGifSavedExtensionToGCB(g, i, &gcb), GIF_OK);
        assert_int_equal(gcb.DelayTime, i == n - 1 ? 100 : step_cs);
        /* The quantised frame is close to the PNG frame: a palette of 256 from the median cut. */
        double sum = 0;
        for (int p = 0; p < W * H; p++) {
            GifColorType col = map->Colors[im->RasterBits[p]];
            sum += abs(col.Red - frames[i][3 * p]) + abs(col.Green - frames[i][3 * p + 1]) +
                   abs(col.Blue - frames[i][3 * p + 2]);
        }
        double mean = sum / (3.0 * W * H);
        worst_mean = mean > worst_mean ? mean : worst_mean;
    }
    assert_true(worst_mean < 4.0);
    assert_int_equal(DGifCloseFile(g, &err), GIF_OK);
}

static void test_episode(void **state)
{
    (void)state;
    skip_without_gl();
    rp_d4pg_policy *p = random_policy(TASK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "cartpole");
    rp_d4pg_frames_options o = rp_d4pg_frames_options_default();
    o.every = EVERY, o.width = W, o.height = H, o.seed = 99;

    /* A first recording at every 25 leaves frames 21..40; the second must remove them. */
    rp_d4pg_frames_options longer = o;
    longer.every = 25, longer.animation = false;
    double ret = 0;
    int n = 0;
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &longer, &ret, &n), RP_OK);
    assert_int_equal(n, 41);
    assert_true(exists(dir, "frame-0040.png"));
    assert_false(exists(dir, "episode.gif"));
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &o, &ret, &n), RP_OK);
    assert_int_equal(n, rp_d4pg_frames_count(1000, EVERY));
    assert_int_equal(n, 21);
    assert_false(exists(dir, "frame-0021.png"));
    assert_false(exists(dir, "frame-0040.png"));

    /* The episode is the evaluation's first of the same seed. */
    double mean = 0, std = 0;
    assert_int_equal(rp_d4pg_evaluate_policy(p, t, TASK, 1, 1, o.seed, &mean, &std), RP_OK);
    assert_true(ret == mean);
    assert_true(ret > 0);

    uint8_t *frames[21];
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "frame-%04d.png", i);
        frames[i] = read_png(dir, name, H, W);
    }
    long changed = 0, lit = 0;
    for (int k = 0; k < W * H * 3; k++) {
        changed += frames[0][k] != frames[1][k];
        lit += frames[0][k] > 16;
    }
    assert_true(changed > 20); /* the cart or the pole moved in 50 steps */
    assert_true(lit > W * H / 10);

    /* 16 of the 21 frames, 4 x 4, 2 white pixels between and around. */
    uint8_t *sheet = read_png(dir, "contact.png", 4 * H + 10, 4 * W + 10);
    for (int j = 0; j < 16; j++) {
        int f = (int)lround(j * 20.0 / 15.0), y0 = 2 + (j / 4) * (H + 2),
            x0 = 2 + (j % 4) * (W + 2);
        for (int y = 0; y < H; y++)
            assert_memory_equal(sheet + ((size_t)(y0 + y) * (4 * W + 10) + x0) * 3,
                                frames[f] + (size_t)y * W * 3, (size_t)W * 3);
    }
    assert_int_equal(sheet[0], 255);
    check_gif(dir, frames, n, 0.01);

    for (int i = 0; i < n; i++)
        rp_free(frames[i]);
    rp_free(sheet);
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
}

static void test_errors(void **state)
{
    (void)state;
    skip_without_gl();
    rp_d4pg_policy *p = random_policy(TASK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    char dir[512], file[1024];
    tu_tmp_path(dir, sizeof dir, "errors");
    rp_d4pg_frames_options o = rp_d4pg_frames_options_default();
    o.width = 16, o.height = 16, o.every = 500, o.animation = false;
    double ret;

    assert_int_equal(rp_d4pg_record_frames(NULL, t, TASK, dir, &o, &ret, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, NULL, &o, &ret, NULL), RP_ERR_INVALID);
    rp_d4pg_frames_options bad = o;
    bad.every = 0;
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &bad, &ret, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("every 0");
    bad = o, bad.width = 0;
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &bad, &ret, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("0x16");
    assert_int_equal(rp_d4pg_record_frames(p, t, "cheetah-run", dir, &o, &ret, NULL), RP_ERR_SHAPE);
    tu_assert_error_contains("cheetah-run");

    /* A missing parent, and a file where the directory should be: named. */
    snprintf(file, sizeof file, "%s/no/such/dir", dir);
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, file, &o, &ret, NULL), RP_ERR_IO);
    tu_assert_error_contains(file);
    tu_tmp_path(file, sizeof file, "a-file");
    touch(tu_tmpdir(), "a-file");
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, file, &o, &ret, NULL), RP_ERR_IO);
    tu_assert_error_contains("in the way");

    /* Every 500 of 1000 steps: 3 frames, and a sheet of 3 in one row. */
    int n = 0;
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &o, &ret, &n), RP_OK);
    assert_int_equal(n, 3);
    rp_free(read_png(dir, "contact.png", 16 + 4, 3 * 16 + 8));
    assert_int_equal(rp_d4pg_frames_count(1000, 3), 335); /* 0, 3, ..., 999, and 1000 */
    assert_int_equal(rp_d4pg_frames_count(0, 3), 0);
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
}

/*
 * A GIF that cannot be written whole (the file-size limit stops it; SIGXFSZ ignored so write()
 * returns EFBIG) is an I/O error naming the file; the previous episode.gif stays byte for byte,
 * and no temporary file is left.
 */
static void test_gif_write_fails(void **state)
{
    (void)state;
    skip_without_gl();
    rp_d4pg_policy *p = random_policy(TASK);
    rp_tape *t;
    assert_int_equal(rp_tape_create(&t, 0), RP_OK);
    char dir[512], gif[1024];
    tu_tmp_path(dir, sizeof dir, "gif_fails");
    snprintf(gif, sizeof gif, "%s/episode.gif", dir);
    rp_d4pg_frames_options o = rp_d4pg_frames_options_default();
    o.width = W, o.height = H, o.every = 500;
    double ret;
    assert_int_equal(rp_d4pg_record_frames(p, t, TASK, dir, &o, &ret, NULL), RP_OK);
    size_t len0, len1;
    uint8_t *before = tu_read_file(gif, &len0);

    /* 201 frames: frames of ~2 KB fit under the limit, their GIF does not. */
    o.every = 5;
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {20000, old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    rp_status st = rp_d4pg_record_frames(p, t, TASK, dir, &o, &ret, NULL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(st, RP_ERR_IO);
    tu_assert_error_contains("episode.gif.tmp");

    uint8_t *after = tu_read_file(gif, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
    free(before);
    free(after);
    rp_tape_destroy(t);
    rp_d4pg_policy_destroy(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_episode),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gif_write_fails),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
