/*
 * test_plot.c - line charts (rp_plot_write_png): the picture's size, lines
 * where the data says (found through the layout the writer draws with, whose
 * frame is checked against the drawn axis lines), round axis ranges,
 * non-finite points, the legend, argument errors, and atomic writes that
 * leave the previous file whole when writing fails.
 */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "io/plot_internal.h"

/* The first series colour (tab10 blue, 31,119,180) and the second (orange, 255,127,14). */
static bool is_blue(const uint8_t *px)
{
    return px[2] > 120 && px[2] - px[0] > 60;
}

static bool is_orange(const uint8_t *px)
{
    return px[0] > 200 && px[0] - px[2] > 100;
}

static const uint8_t *pixel(const uint8_t *img, int w, int x, int y)
{
    return img + ((size_t)y * (size_t)w + (size_t)x) * 3;
}

/* Writes the chart, reads it back, checks it is h x w RGB and that the layout agrees. */
static uint8_t *draw(const char *name, const rp_plot *p, const rp_plot_series *s, int n,
                     io_plot_frame *f)
{
    char path[512];
    tu_tmp_path(path, sizeof path, name);
    assert_int_equal(rp_plot_write_png(path, p, s, n), RP_OK);
    assert_int_equal(io_plot_layout(p, s, n, f), RP_OK);
    uint8_t *img = NULL;
    int H, W, C;
    assert_int_equal(rp_image_read_png(path, &img, &H, &W, &C), RP_OK);
    assert_int_equal(H, f->height);
    assert_int_equal(W, f->width);
    assert_int_equal(C, 3);
    /* The bottom axis line is drawn dark where the layout says, and the area above it is not. */
    int mid = (int)(0.5 * (f->left + f->right));
    const uint8_t *axis = pixel(img, W, mid, (int)f->bottom);
    assert_true(axis[0] < 100 && axis[1] < 100 && axis[2] < 100);
    return img;
}

static void test_size(void **state)
{
    (void)state;
    double x[3] = {0, 1, 2}, y[3] = {1, 3, 2};
    rp_plot_series s = {"loss", x, y, 3};
    io_plot_frame f;
    rp_plot p = {0};
    uint8_t *img = draw("default.png", &p, &s, 1, &f);
    assert_int_equal(f.width, 800);
    assert_int_equal(f.height, 500);
    rp_free(img);
    p = (rp_plot){.title = "t", .xlabel = "x", .ylabel = "y", .width = 333, .height = 211};
    img = draw("small.png", &p, &s, 1, &f);
    assert_int_equal(f.width, 333);
    assert_int_equal(f.height, 211);
    rp_free(img);
}

/*
 * A horizontal line at y = 0.5 over x in [0, 1]: a constant gets the axis 0..1, and the line's
 * row is blue across the plot area, with no blue far above or below it.
 */
static void test_horizontal_line(void **state)
{
    (void)state;
    double x[5] = {0, 0.25, 0.5, 0.75, 1}, y[5] = {0.5, 0.5, 0.5, 0.5, 0.5};
    rp_plot_series s = {"flat", x, y, 5};
    rp_plot p = {.title = "A flat line", .xlabel = "x", .ylabel = "y"};
    io_plot_frame f;
    uint8_t *img = draw("flat.png", &p, &s, 1, &f);
    assert_true(f.xlo == 0.0 && f.xhi == 1.0);
    assert_true(f.ylo == 0.0 && f.yhi == 1.0);
    int row = (int)floor(io_plot_py(&f, 0.5));
    assert_true(row > f.top + 50 && row < f.bottom - 50);
    int W = f.width, hits = 0, total = 0;
    for (int xx = (int)f.left + 3; xx < (int)f.right - 3; xx++) {
        total++;
        hits += is_blue(pixel(img, W, xx, row)) || is_blue(pixel(img, W, xx, row + 1));
        for (int yy = (int)f.top + 2; yy < (int)f.bottom - 1; yy++)
            if (abs(yy - row) > 6) assert_false(is_blue(pixel(img, W, xx, yy)));
    }
    assert_int_equal(hits, total);
    rp_free(img);
}

/* A rising line and a falling one in two colours, each where its data says; the legend names both.
 */
static void test_two_series(void **state)
{
    (void)state;
    enum { N = 101 };
    double x[N], up[N], down[N];
    for (int i = 0; i < N; i++) {
        x[i] = i * 1000.0; /* 0 .. 100k: the labels use "k" */
        up[i] = i / 100.0;
        down[i] = 1.0 - i / 100.0;
    }
    rp_plot_series s[2] = {{"return", x, up, N}, {"loss", x, down, N}};
    rp_plot p = {
        .title = "Two lines", .xlabel = "env steps", .ylabel = "value", .y_from_zero = true};
    io_plot_frame f;
    uint8_t *img = draw("two.png", &p, s, 2, &f);
    assert_true(f.xlo == 0.0 && f.xhi == 100000.0);
    assert_true(f.ylo == 0.0 && f.yhi == 1.0);
    int W = f.width;
    /* Away from the crossing and the corners (where a legend may sit), along each line. */
    for (double t = 0.3; t <= 0.71; t += 0.1) {
        int xx = (int)io_plot_px(&f, t * 100000.0);
        int yu = (int)io_plot_py(&f, t), yd = (int)io_plot_py(&f, 1.0 - t);
        if (fabs(t - 0.5) < 0.05) continue;
        bool blue = false, orange = false;
        for (int d = -2; d <= 2; d++) {
            blue |= is_blue(pixel(img, W, xx, yu + d));
            orange |= is_orange(pixel(img, W, xx, yd + d));
        }
        assert_true(blue);
        assert_true(orange);
        assert_false(is_blue(pixel(img, W, xx, yd)));
        assert_false(is_orange(pixel(img, W, xx, yu)));
    }
    rp_free(img);
}

/* NaN and infinities are skipped and break the line; a point alone between them is a dot. */
static void test_non_finite(void **state)
{
    (void)state;
    double x[7] = {0, 1, NAN, 2, INFINITY, 3, 4};
    double y[7] = {0, 1, 5, 0.5, 2, 1, -INFINITY};
    rp_plot_series s = {"gappy", x, y, 7};
    rp_plot p = {0};
    io_plot_frame f;
    uint8_t *img = draw("gappy.png", &p, &s, 1, &f);
    /* The axes fit the finite points only: x 0..3, y 0..1. */
    assert_true(f.xlo == 0.0 && f.xhi == 3.0);
    assert_true(f.ylo == 0.0 && f.yhi == 1.0);
    int W = f.width;
    /* The segment (0,0)-(1,1) is drawn; nothing joins (1,1) to (2,0.5) across the NaN. */
    int x1 = (int)io_plot_px(&f, 0.5), y1 = (int)io_plot_py(&f, 0.5);
    bool seg = false;
    for (int d = -2; d <= 2; d++)
        seg |= is_blue(pixel(img, W, x1, y1 + d));
    assert_true(seg);
    int xg = (int)io_plot_px(&f, 1.5), yg = (int)io_plot_py(&f, 0.75);
    for (int d = -4; d <= 4; d++)
        assert_false(is_blue(pixel(img, W, xg, yg + d)));
    /* (2, 0.5) stands alone: a dot. */
    assert_true(is_blue(pixel(img, W, (int)io_plot_px(&f, 2), (int)io_plot_py(&f, 0.5))));
    rp_free(img);

    /* No finite point at all, and an empty series: axes 0..1 and nothing blue. */
    double nx[2] = {NAN, 1}, ny[2] = {1, NAN};
    rp_plot_series e[2] = {{"none", nx, ny, 2}, {"empty", NULL, NULL, 0}};
    img = draw("empty.png", &p, e, 2, &f);
    assert_true(f.xlo == 0.0 && f.xhi == 1.0 && f.ylo == 0.0 && f.yhi == 1.0);
    int blue = 0;
    for (int yy = (int)f.top; yy < (int)f.bottom; yy++)
        for (int xx = (int)f.left; xx < (int)f.right; xx++)
            blue += is_blue(pixel(img, W, xx, yy));
    /* Only the legend's sample line for "none" (a short stroke) may be blue. */
    assert_true(blue < 200);
    rp_free(img);
    img = draw("nothing.png", &p, NULL, 0, &f);
    rp_free(img);
}

/* Names in the scratch directory that start with prefix. */
static int count_entries(const char *prefix)
{
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) k++;
    closedir(d);
    return k;
}

static void test_errors(void **state)
{
    (void)state;
    char path[512];
    double x[2] = {0, 1}, y[2] = {0, 1};
    rp_plot_series s = {"a", x, y, 2};
    rp_plot p = {0};

    /* A missing directory: RP_ERR_IO naming the path, nothing created. */
    tu_tmp_path(path, sizeof path, "no_such_dir/chart.png");
    assert_int_equal(rp_plot_write_png(path, &p, &s, 1), RP_ERR_IO);
    tu_assert_error_contains(path);
    assert_int_equal(count_entries("no_such_dir"), 0);

    tu_tmp_path(path, sizeof path, "bad.png");
    assert_int_equal(rp_plot_write_png(NULL, &p, &s, 1), RP_ERR_INVALID);
    tu_assert_error_contains("path is NULL");
    assert_int_equal(rp_plot_write_png(path, NULL, &s, 1), RP_ERR_INVALID);
    tu_assert_error_contains("p (the plot's settings) is NULL");
    assert_int_equal(rp_plot_write_png(path, &p, &s, -1), RP_ERR_INVALID);
    tu_assert_error_contains("nseries is -1");
    assert_int_equal(rp_plot_write_png(path, &p, NULL, 1), RP_ERR_INVALID);
    tu_assert_error_contains("s is NULL");
    rp_plot_series bad = {"b", x, NULL, 2};
    assert_int_equal(rp_plot_write_png(path, &p, &bad, 1), RP_ERR_INVALID);
    tu_assert_error_contains("series 0 has n 2 but y is NULL");
    bad = (rp_plot_series){"b", x, y, -3};
    assert_int_equal(rp_plot_write_png(path, &p, &bad, 1), RP_ERR_INVALID);
    tu_assert_error_contains("n -3");
    p.width = 100;
    assert_int_equal(rp_plot_write_png(path, &p, &s, 1), RP_ERR_INVALID);
    tu_assert_error_contains("width is 100");
    p = (rp_plot){.height = 9000};
    assert_int_equal(rp_plot_write_png(path, &p, &s, 1), RP_ERR_INVALID);
    tu_assert_error_contains("height is 9000");
    p = (rp_plot){.title = "\xff\xfe"};
    assert_int_equal(rp_plot_write_png(path, &p, &s, 1), RP_ERR_INVALID);
    tu_assert_error_contains("title is not valid UTF-8");
    assert_int_equal(count_entries("bad.png"), 0);
}

/*
 * A write that fails part-way (the file-size limit stops it; SIGXFSZ ignored so write() returns
 * EFBIG) leaves the previous chart byte for byte and no temporary file.
 */
static void test_failed_write_keeps_previous(void **state)
{
    (void)state;
    char path[512];
    tu_tmp_path(path, sizeof path, "keep.png");
    double x[3] = {0, 1, 2}, y[3] = {0, 2, 1};
    rp_plot_series s = {"first", x, y, 3};
    rp_plot p = {.title = "first"};
    assert_int_equal(rp_plot_write_png(path, &p, &s, 1), RP_OK);
    size_t len0;
    uint8_t *before = tu_read_file(path, &len0);
    assert_true(len0 > 0);

    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {1024, old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    p.title = "second, which does not fit";
    rp_status st = rp_plot_write_png(path, &p, &s, 1);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(st, RP_ERR_IO);
    tu_assert_error_contains(path);

    size_t len1;
    uint8_t *after = tu_read_file(path, &len1);
    assert_true(len1 > 0);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    assert_int_equal(count_entries("keep.png"), 1);
    free(before);
    free(after);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size),       cmocka_unit_test(test_horizontal_line),
        cmocka_unit_test(test_two_series), cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_errors),     cmocka_unit_test(test_failed_write_keeps_previous),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
