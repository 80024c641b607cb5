/*
 * test_image.c - PNG grids (rp_image_grid_write_png) and PNG reading
 * (rp_image_read_png): the grid's size and layout, the value mapping with
 * its clamping and NaN rule, the pad, gray and RGB, atomic writes, and
 * clear errors for missing directories, non-PNG and truncated files.
 */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The byte each ordinary tile value should become: a pattern over tile, row, column, channel. */
static int pattern(int i, int y, int x, int ch)
{
    return (i * 31 + y * 7 + x * 3 + ch * 101) % 256;
}

/*
 * Fills images [n,h,w,c] with values a quarter of a step above byte
 * pattern()'s point of [lo, hi], so that rounding to the nearest byte gives
 * pattern() whatever the float's last bit.
 */
static float *make_images(int n, int h, int w, int c, float lo, float hi)
{
    float *img = malloc((size_t)n * h * w * c * sizeof *img);
    assert_non_null(img);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < c; ch++) {
                    double k = pattern(i, y, x, ch);
                    img[(((size_t)i * h + y) * w + x) * c + ch] =
                        (float)(lo + (k + (k < 255 ? 0.25 : -0.25)) * (hi - lo) / 255.0);
                }
    return img;
}

/*
 * Writes a grid, reads it back and checks its size, every tile pixel
 * against pattern() and every other pixel against pad_value.
 */
static void check_grid(int n, int h, int w, int c, int cols, int pad, uint8_t pad_value)
{
    char path[512];
    float lo = -1.0f, hi = 1.0f;
    float *img = make_images(n, h, w, c, lo, hi);
    tu_tmp_path(path, sizeof path, c == 1 ? "grid_gray.png" : "grid_rgb.png");
    assert_int_equal(rp_image_grid_write_png(path, img, n, h, w, c, cols, pad, pad_value, lo, hi),
                     RP_OK);

    uint8_t *px = NULL;
    int H = 0, W = 0, C = 0;
    assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), RP_OK);
    int rows = (n + cols - 1) / cols;
    assert_int_equal(H, rows * h + (rows + 1) * pad);
    assert_int_equal(W, cols * w + (cols + 1) * pad);
    assert_int_equal(C, c);
    int tiles = 0, pads = 0;
    for (int Y = 0; Y < H; Y++) {
        for (int X = 0; X < W; X++) {
            /* Which tile (if any) this pixel falls in, from the layout's definition. */
            int ty = -1, tx = -1;
            if (Y % (h + pad) >= pad) ty = Y / (h + pad);
            if (X % (w + pad) >= pad) tx = X / (w + pad);
            int i = (ty >= 0 && tx >= 0 && ty < rows && tx < cols) ? ty * cols + tx : -1;
            for (int ch = 0; ch < c; ch++) {
                int got = px[((size_t)Y * W + X) * c + ch];
                if (i >= 0 && i < n) {
                    int want = pattern(i, Y % (h + pad) - pad, X % (w + pad) - pad, ch);
                    if (got != want) {
                        print_error("tile %d pixel (%d,%d) ch %d: %d, expected %d\n", i, Y, X, ch,
                                    got, want);
                        fail();
                    }
                    tiles++;
                } else {
                    if (got != pad_value) {
                        print_error("pad pixel (%d,%d) ch %d: %d, expected %d\n", Y, X, ch, got,
                                    pad_value);
                        fail();
                    }
                    pads++;
                }
            }
        }
    }
    assert_int_equal(tiles, n * h * w * c);
    assert_int_equal(tiles + pads, H * W * c);
    rp_free(px);
    free(img);
}

static void test_grid_gray(void **state)
{
    (void)state;
    check_grid(5, 3, 4, 1, 3, 2, 77); /* 2 rows, the last with an empty cell */
    check_grid(1, 7, 5, 1, 1, 0, 0);  /* one tile, no pad */
    check_grid(6, 2, 3, 1, 2, 1, 255);
}

static void test_grid_rgb(void **state)
{
    (void)state;
    check_grid(7, 4, 3, 3, 4, 1, 200);
    check_grid(4, 5, 6, 3, 2, 0, 9);
    check_grid(3, 2, 2, 3, 5, 3, 128); /* fewer images than columns */
}

/* Exact values of the mapping: both ends, the middle (halves round up), clamping, NaN, inf. */
static void test_mapping(void **state)
{
    (void)state;
    static const struct {
        float x;
        int want;
    } cases[] = {
        {-1.0f, 0},
        {1.0f, 255},
        {0.0f, 128},
        {0.5f, 191},
        {-0.5f, 64},
        {-2.0f, 0},
        {3.0f, 255},
        {NAN, 0},
        {INFINITY, 255},
        {-INFINITY, 0},
        {-1.0f + 2.0f / 255.0f * 10.49f, 10},
        {-1.0f + 2.0f / 255.0f * 10.51f, 11},
    };
    enum { n = sizeof cases / sizeof cases[0] };
    float in[n];
    for (int k = 0; k < n; k++)
        in[k] = cases[k].x;
    char path[512];
    tu_tmp_path(path, sizeof path, "mapping.png");
    /* One tile of 1 x n gray pixels, pad 1 of value 42. */
    assert_int_equal(rp_image_grid_write_png(path, in, 1, 1, n, 1, 1, 1, 42, -1.0f, 1.0f), RP_OK);
    uint8_t *px = NULL;
    int H, W, C;
    assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), RP_OK);
    assert_int_equal(H, 3);
    assert_int_equal(W, n + 2);
    assert_int_equal(C, 1);
    for (int x = 0; x < W; x++) {
        assert_int_equal(px[x], 42);
        assert_int_equal(px[2 * W + x], 42);
    }
    assert_int_equal(px[W], 42);
    assert_int_equal(px[2 * W - 1], 42);
    for (int k = 0; k < n; k++) {
        if (px[W + 1 + k] != cases[k].want) {
            print_error("value %g: byte %d, expected %d\n", (double)in[k], px[W + 1 + k],
                        cases[k].want);
            fail();
        }
    }
    rp_free(px);

    /* Another range: [0, 255] maps the integers to themselves. */
    float ramp[256];
    for (int k = 0; k < 256; k++)
        ramp[k] = (float)k;
    assert_int_equal(rp_image_grid_write_png(path, ramp, 1, 16, 16, 1, 1, 0, 0, 0.0f, 255.0f),
                     RP_OK);
    assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), RP_OK);
    assert_int_equal(H * W, 256);
    for (int k = 0; k < 256; k++)
        assert_int_equal(px[k], k);
    rp_free(px);
}

/* Names in the scratch directory that start with prefix. */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) k++;
    closedir(d);
    return k;
}

static void test_write_errors(void **state)
{
    (void)state;
    char path[512];
    float img[2 * 2 * 3] = {0};

    /* A missing directory: RP_ERR_IO naming the path, and nothing created. */
    tu_tmp_path(path, sizeof path, "no_such_dir/grid.png");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_IO);
    tu_assert_error_contains(path);
    tu_assert_error_contains("No such file or directory");
    struct stat st;
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "no_such_dir");
    assert_int_not_equal(stat(dir, &st), 0);
    assert_int_equal(count_entries(tu_tmpdir(), "no_such_dir"), 0);

    /* A directory at the path is refused, not replaced. */
    tu_tmp_path(path, sizeof path, "a_dir.png");
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_IO);
    tu_assert_error_contains(path);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(count_entries(tu_tmpdir(), "a_dir.png"), 1); /* no temporary file left */

    /* Bad arguments, each named. */
    tu_tmp_path(path, sizeof path, "bad.png");
    assert_int_equal(rp_image_grid_write_png(NULL, img, 1, 2, 2, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("path");
    assert_int_equal(rp_image_grid_write_png(path, NULL, 1, 2, 2, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("images");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 2, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("c is 2");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 0, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("cols 0");
    assert_int_equal(rp_image_grid_write_png(path, img, 0, 2, 2, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("n 0");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 1, -1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("pad is -1");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 1, 1, 0, 1.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("lo < hi");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 2, 2, 3, 1, 1, 0, NAN, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("lo nan");
    assert_int_equal(rp_image_grid_write_png(path, img, 1, 200000, 200000, 3, 1, 1, 0, 0.0f, 1.0f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("over the limit");
    assert_int_equal(count_entries(tu_tmpdir(), "bad.png"), 0);
}

/* rp_image_grid_check: the writer's size rules, before any image exists. */
static void test_grid_check(void **state)
{
    (void)state;
    /* 1000 columns of 1000 pixels: exactly the side limit. */
    assert_int_equal(rp_image_grid_check(1000, 1, 1000, 1, 1000, 0), RP_OK);
    assert_int_equal(rp_image_grid_check(1001, 1, 1000, 1, 1001, 0), RP_ERR_INVALID);
    tu_assert_error_contains("the grid would be 1 x 1001000 x 1");
    /* sample --class 0 --n 1000000: 100,000 rows of 10 tiles of 32x32. */
    assert_int_equal(rp_image_grid_check(1000000, 32, 32, 1, 10, 2), RP_ERR_INVALID);
    tu_assert_error_contains("3400002 x 342 x 1 (100000 rows of 10 tiles of 32x32, pad 2)");
    /* Under both sides' limit but over 4 GiB of pixels. */
    assert_int_equal(rp_image_grid_check(1, 40000, 40000, 3, 1, 0), RP_ERR_INVALID);
    tu_assert_error_contains("4 GiB");
    assert_int_equal(rp_image_grid_check(0, 2, 2, 1, 1, 0), RP_ERR_INVALID);
    assert_int_equal(rp_image_grid_check(1, 2, 2, 2, 1, 0), RP_ERR_INVALID);
    assert_int_equal(rp_image_grid_check(1, 2, 2, 1, 1, -1), RP_ERR_INVALID);
}

/* A second write replaces the file whole. */
static void test_overwrite(void **state)
{
    (void)state;
    char path[512];
    float *a = make_images(4, 3, 3, 1, 0.0f, 1.0f);
    tu_tmp_path(path, sizeof path, "over.png");
    assert_int_equal(rp_image_grid_write_png(path, a, 4, 3, 3, 1, 2, 1, 0, 0.0f, 1.0f), RP_OK);
    assert_int_equal(rp_image_grid_write_png(path, a, 2, 3, 3, 1, 2, 0, 0, 0.0f, 1.0f), RP_OK);
    uint8_t *px = NULL;
    int H, W, C;
    assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), RP_OK);
    assert_int_equal(H, 3);
    assert_int_equal(W, 6);
    assert_int_equal(px[3], pattern(1, 0, 0, 0));
    rp_free(px);
    assert_int_equal(count_entries(tu_tmpdir(), "over.png"), 1);
    free(a);
}

/* Reads path expecting `want`, a message naming the path and `needle`, and cleared outputs. */
static void expect_read_error(const char *path, rp_status want, const char *needle)
{
    uint8_t *px = (uint8_t *)1;
    int H = -1, W = -1, C = -1;
    assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), want);
    assert_null(px);
    assert_int_equal(H, 0);
    assert_int_equal(W, 0);
    assert_int_equal(C, 0);
    tu_assert_error_contains(path);
    tu_assert_error_contains(needle);
}

static void test_read_errors(void **state)
{
    (void)state;
    char path[512], bad[512];

    tu_tmp_path(bad, sizeof bad, "missing.png");
    expect_read_error(bad, RP_ERR_IO, "No such file");

    tu_tmp_path(bad, sizeof bad, "text.png");
    const char *text = "this is not a PNG file, only text\n";
    tu_write_file(bad, text, strlen(text));
    expect_read_error(bad, RP_ERR_FORMAT, "not a PNG");

    tu_tmp_path(bad, sizeof bad, "empty.png");
    tu_write_file(bad, "", 0);
    expect_read_error(bad, RP_ERR_FORMAT, "not a PNG");

    /* A real PNG (noise, so that the data is not tiny), then cut at several places. */
    float *img = make_images(4, 16, 16, 3, 0.0f, 1.0f);
    tu_tmp_path(path, sizeof path, "whole.png");
    assert_int_equal(rp_image_grid_write_png(path, img, 4, 16, 16, 3, 2, 1, 0, 0.0f, 1.0f), RP_OK);
    free(img);
    size_t len = 0;
    uint8_t *whole = tu_read_file(path, &len);
    assert_true(len > 200);
    const size_t cuts[] = {4, 8, 20, 40, len / 2, len - 20, len - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        tu_tmp_path(bad, sizeof bad, "cut.png");
        tu_write_file(bad, whole, cuts[k]);
        if (cuts[k] < 8)
            expect_read_error(bad, RP_ERR_FORMAT, "not a PNG");
        else
            expect_read_error(bad, RP_ERR_FORMAT, "PNG");
    }
    /* A flipped byte in the middle of the image data fails its chunk's CRC. */
    whole[len / 2] ^= 0x5a;
    tu_tmp_path(bad, sizeof bad, "flipped.png");
    tu_write_file(bad, whole, len);
    expect_read_error(bad, RP_ERR_FORMAT, "corrupt");
    free(whole);

    uint8_t *px;
    int H, W, C;
    assert_int_equal(rp_image_read_png(NULL, &px, &H, &W, &C), RP_ERR_INVALID);
    assert_int_equal(rp_image_read_png(path, NULL, &H, &W, &C), RP_ERR_INVALID);
}

/*
 * A FIFO at the PNG path: refused as not a regular file within a second. Opening a FIFO waits for
 * a writer, so a reader that opened before checking would block forever; the alarm interrupts
 * such an open after 2 s, so that a regression fails here instead of hanging.
 */
static void test_read_fifo(void **state)
{
    (void)state;
    char path[512];
    tu_tmp_path(path, sizeof path, "fifo.png");
    assert_int_equal(mkfifo(path, 0600), 0);
    double t0 = rp_now_s();
    tu_alarm_arm(2);
    uint8_t *px = NULL;
    int H = -1, W = -1, C = -1;
    rp_status s = rp_image_read_png(path, &px, &H, &W, &C);
    tu_alarm_disarm();
    double took = rp_now_s() - t0;
    assert_int_equal(s, RP_ERR_IO);
    tu_assert_error_contains("it is a FIFO, not a regular file");
    tu_assert_error_contains(path);
    assert_null(px);
    assert_true(took < 1.0);
}

/* Files from another writer (libpng's own encoder): alpha is dropped, gray stays one channel. */
static void test_read_alpha(void **state)
{
    (void)state;
    char path[512];
    const int h = 3, w = 5;
    uint8_t rgba[3 * 5 * 4], ga[3 * 5 * 2];
    for (int k = 0; k < h * w; k++) {
        for (int ch = 0; ch < 4; ch++)
            rgba[k * 4 + ch] = (uint8_t)(k * 13 + ch * 50);
        ga[k * 2] = (uint8_t)(k * 17);
        ga[k * 2 + 1] = (uint8_t)(255 - k);
    }
    const struct {
        const char *name;
        uint32_t format;
        const uint8_t *data;
        int in_c, out_c;
    } cases[] = {{"rgba.png", PNG_FORMAT_RGBA, rgba, 4, 3}, {"ga.png", PNG_FORMAT_GA, ga, 2, 1}};
    for (int t = 0; t < 2; t++) {
        png_image image;
        memset(&image, 0, sizeof image);
        image.version = PNG_IMAGE_VERSION;
        image.width = (png_uint_32)w;
        image.height = (png_uint_32)h;
        image.format = cases[t].format;
        tu_tmp_path(path, sizeof path, cases[t].name);
        assert_true(png_image_write_to_file(&image, path, 0, cases[t].data, 0, NULL));
        png_image_free(&image);

        uint8_t *px = NULL;
        int H, W, C;
        assert_int_equal(rp_image_read_png(path, &px, &H, &W, &C), RP_OK);
        assert_int_equal(H, h);
        assert_int_equal(W, w);
        assert_int_equal(C, cases[t].out_c);
        for (int k = 0; k < h * w; k++)
            for (int ch = 0; ch < C; ch++)
                assert_int_equal(px[k * C + ch], cases[t].data[k * cases[t].in_c + ch]);
        rp_free(px);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_gray),  cmocka_unit_test(test_grid_rgb),
        cmocka_unit_test(test_mapping),    cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_overwrite),  cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_grid_check), cmocka_unit_test(test_read_alpha),
        cmocka_unit_test(test_read_fifo),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
