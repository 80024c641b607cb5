/*
 * test_folder.c - datasets of image files (rp_dataset_load_folder) and what the
 * loader makes of them: torchvision's ImageFolder order, JPEG and PNG decoding,
 * DCT scaling, RandomResizedCrop against a reimplementation of torchvision's
 * rule, the evaluation crop, Pillow's resampling, flip and normalisation, list
 * files and tar shards giving the same batches as the tree, resumable and
 * replica-independent augmentation, and bad files.
 *
 * Every image is written at test time into a scratch directory, JPEGs by
 * TurboJPEG's compressor and PNGs by libpng (folder_fixture.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "data/folder_internal.h"
#include "folder_fixture.h"
#include "testutil.h"

static char root[4096];

static const char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char pbuf[8][8192];
static int pnext;
/* A path under the scratch directory, from a small ring of buffers. */
static const char *P(const char *fmt, ...)
{
    char rel[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char *b = pbuf[pnext++ % 8];
    snprintf(b, 8192, "%s/%s", root, rel);
    return b;
}

/* "list:PATH" or "tar:PATH" (in a ring buffer too). */
static const char *spec(const char *kind, const char *path)
{
    char *b = pbuf[pnext++ % 8];
    snprintf(b, 8192, "%s%.4000s", kind, path);
    return b;
}

static void put_jpeg(const char *path, int w, int h, int seed)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    assert_non_null(px);
    fx_pattern(px, w, h, seed);
    assert_int_equal(fx_write_jpeg(path, px, w, h, 3, 95), 0);
    free(px);
}

static void put_png(const char *path, int w, int h, int seed)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    assert_non_null(px);
    fx_pattern(px, w, h, seed);
    assert_int_equal(fx_write_png(path, px, w, h, 3), 0);
    free(px);
}

/* The tree whose torchvision order the first test spells out. */
static void make_tree(const char *top)
{
    char d[4096];
    const char *dirs[] = {"train/Bee", "train/ant/a/x", "train/ant/a-b", "train/cat",
                          "train/dog", "val/ant",       "val/dog"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(d, sizeof d, "%s/%s", top, dirs[i]);
        assert_int_equal(fx_mkdirs(d), 0);
    }
    char p[4096];
#define AT(rel) (snprintf(p, sizeof p, "%s/%s", top, rel), p)
    put_png(AT("train/Bee/b1.png"), 40, 30, 1);
    put_jpeg(AT("train/ant/2.JPG"), 48, 36, 2);
    put_jpeg(AT("train/ant/1.jpeg"), 30, 50, 3);
    assert_int_equal(fx_write_file(AT("train/ant/notes.txt"), "hello", 5), 0);
    assert_int_equal(fx_write_file(AT("train/ant/x.bmp"), "BM", 2), 0);
    put_png(AT("train/ant/a/3.png"), 33, 33, 4);
    put_jpeg(AT("train/ant/a-b/4.jpg"), 64, 40, 5);
    put_jpeg(AT("train/ant/a/x/5.jpg"), 40, 64, 6);
    put_jpeg(AT("train/cat/c.jpg"), 50, 50, 7);
    put_png(AT("train/dog/d.png"), 36, 45, 8);
    put_jpeg(AT("val/ant/v1.jpg"), 44, 44, 9);
    put_png(AT("val/dog/v2.png"), 60, 30, 10);
#undef AT
}

static int setup(void **state)
{
    (void)state;
    if (tu_tmpdir_create("folder") != 0) return -1;
    snprintf(root, sizeof root, "%s", tu_tmpdir());
    /* The tree the index, source and resume cases read: made here, as each case may run alone. */
    make_tree(P("tree"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove();
    return 0;
}

static rp_folder_config small_cfg(int size)
{
    rp_folder_config c = rp_folder_config_default();
    c.image_size = size;
    c.threads = 2;
    return c;
}

/* ---- the index ----------------------------------------------------------------- */

static void test_tree_order(void **state)
{
    (void)state;
    rp_folder_config c = small_cfg(16);
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, P("tree"), "train", &c), RP_OK);
    /* torchvision: classes sorted (uppercase first), os.walk's dirs sorted by full path ("a-b"
       before "a/x"), files sorted, extensions in any case, .txt and .bmp left out. */
    const char *want[] = {"Bee/b1.png",    "ant/1.jpeg",    "ant/2.JPG", "ant/a/3.png",
                          "ant/a-b/4.jpg", "ant/a/x/5.jpg", "cat/c.jpg", "dog/d.png"};
    const int label[] = {0, 1, 1, 1, 1, 1, 2, 3};
    const char *cls[] = {"Bee", "ant", "cat", "dog"};
    assert_int_equal(ds->n, 8);
    assert_int_equal(ds->num_classes, 4);
    assert_int_equal(ds->h, 16);
    assert_int_equal(ds->c, 3);
    assert_null(ds->pixels);
    for (int i = 0; i < 8; i++) {
        char path[4096];
        const char *cn;
        assert_int_equal(rp_dataset_sample_path(ds, i, path, sizeof path, &cn), RP_OK);
        assert_string_equal(path, P("tree/train/%s", want[i]));
        assert_int_equal(ds->labels[i], label[i]);
        assert_string_equal(cn, cls[label[i]]);
    }
    rp_dataset_destroy(ds);
    /* val: labels are train's (ant 1, dog 3) though val has two classes only. */
    assert_int_equal(rp_dataset_load_folder(&ds, P("tree"), "test", &c), RP_OK);
    assert_int_equal(ds->n, 2);
    assert_int_equal(ds->num_classes, 4);
    assert_int_equal(ds->labels[0], 1);
    assert_int_equal(ds->labels[1], 3);
    assert_string_equal(ds->name, "tree/val");
    rp_dataset_destroy(ds);
}

static void test_tree_errors(void **state)
{
    (void)state;
    rp_folder_config c = small_cfg(16);
    rp_dataset *ds = (rp_dataset *)1;
    /* No val/. */
    assert_int_equal(fx_mkdirs(P("noval/train/a")), 0);
    put_jpeg(P("noval/train/a/1.jpg"), 20, 20, 1);
    assert_int_equal(rp_dataset_load_folder(&ds, P("noval"), "val", &c), RP_ERR_IO);
    assert_null(ds);
    tu_assert_error_contains(P("noval/val"));
    /* An empty class: an error naming it, or with skip_bad a warning and a class of no samples. */
    assert_int_equal(fx_mkdirs(P("empty/train/a")), 0);
    assert_int_equal(fx_mkdirs(P("empty/train/b")), 0);
    put_jpeg(P("empty/train/b/1.jpg"), 20, 20, 1);
    assert_int_equal(rp_dataset_load_folder(&ds, P("empty"), "train", &c), RP_ERR_FORMAT);
    tu_assert_error_contains(P("empty/train/a"));
    c.skip_bad = true;
    assert_int_equal(rp_dataset_load_folder(&ds, P("empty"), "train", &c), RP_OK);
    assert_int_equal(ds->n, 1);
    assert_int_equal(ds->num_classes, 2);
    assert_int_equal(ds->labels[0], 1);
    rp_dataset_destroy(ds);
    c.skip_bad = false;
    /* No class directory at all. */
    assert_int_equal(fx_mkdirs(P("noclass/train")), 0);
    assert_int_equal(rp_dataset_load_folder(&ds, P("noclass"), "train", &c), RP_ERR_FORMAT);
    tu_assert_error_contains("no class directory");
    /* A val class train lacks. */
    assert_int_equal(fx_mkdirs(P("noval/val/zzz")), 0);
    assert_int_equal(rp_dataset_load_folder(&ds, P("noval"), "val", &c), RP_ERR_FORMAT);
    tu_assert_error_contains("zzz");
    /* Bad configuration and split. */
    assert_int_equal(rp_dataset_load_folder(&ds, P("noval"), "dev", &c), RP_ERR_INVALID);
    c.resize_size = 8;
    assert_int_equal(rp_dataset_load_folder(&ds, P("noval"), "train", &c), RP_ERR_INVALID);
    tu_assert_error_contains("resize_size 8");
}

/* ---- decoding ------------------------------------------------------------------- */

static void decode_bytes(const uint8_t *b, size_t n, img_scale s, int *w, int *h, img_decoder *d,
                         img_info *info)
{
    assert_int_equal(img_probe(d, b, n, "mem", info), RP_OK);
    assert_int_equal(img_decode(d, b, n, "mem", info, s, w, h), RP_OK);
}

static void test_decode(void **state)
{
    (void)state;
    const int W = 64, H = 48;
    uint8_t *px = malloc(W * H * 4), *b;
    size_t n;
    fx_pattern(px, W, H, 3);
    img_decoder d = {0};
    img_info info;
    int w, h;
    /* JPEG at quality 95, 4:4:4, of a smooth pattern: within JPEG's loss. */
    assert_int_equal(fx_jpeg_bytes(px, W, H, 3, 95, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    assert_int_equal(info.format, IMG_JPEG);
    assert_int_equal(w, W);
    assert_int_equal(h, H);
    double sum = 0;
    int worst = 0;
    for (int i = 0; i < W * H * 3; i++) {
        int e = abs((int)d.rgb[i] - px[i]);
        sum += e;
        if (e > worst) worst = e;
    }
    assert_true(worst <= 6);
    assert_true(sum / (W * H * 3) < 1.5);
    free(b);
    /* PNG: exact; and a PNG's bytes under any name decode (the format is sniffed). */
    assert_int_equal(fx_png_bytes(px, W, H, 3, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    assert_int_equal(info.format, IMG_PNG);
    assert_memory_equal(d.rgb, px, (size_t)W * H * 3);
    free(b);
    /* Gray PNG: replicated; RGBA: alpha dropped, not composited (PIL's convert("RGB")). */
    uint8_t *g = malloc(W * H), *rgba = malloc(W * H * 4);
    for (int i = 0; i < W * H; i++) {
        g[i] = (uint8_t)(i * 7);
        for (int k = 0; k < 3; k++)
            rgba[4 * i + k] = px[3 * i + k];
        rgba[4 * i + 3] = (uint8_t)(i % 256);
    }
    assert_int_equal(fx_png_bytes(g, W, H, 1, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    for (int i = 0; i < W * H; i++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(d.rgb[3 * i + k], g[i]);
    free(b);
    assert_int_equal(fx_png_bytes(rgba, W, H, 4, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    assert_memory_equal(d.rgb, px, (size_t)W * H * 3);
    free(b);
    /* Gray JPEG: three equal channels close to the gray values. */
    for (int i = 0; i < W * H; i++)
        g[i] = (uint8_t)(60 + (i % W) * 2);
    assert_int_equal(fx_jpeg_bytes(g, W, H, 1, 95, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    for (int i = 0; i < W * H; i++) {
        assert_int_equal(d.rgb[3 * i], d.rgb[3 * i + 1]);
        assert_int_equal(d.rgb[3 * i], d.rgb[3 * i + 2]);
        assert_true(abs((int)d.rgb[3 * i] - g[i]) <= 4);
    }
    free(b);
    /* CMYK (TurboJPEG writes Adobe's marker): Pillow's cmyk2rgb of the inverted values,
       R = k' - k' * (255 - c') / 255 with the stored c', k'. */
    for (int i = 0; i < W * H; i++) {
        rgba[4 * i + 0] = 200;
        rgba[4 * i + 1] = 100;
        rgba[4 * i + 2] = 50;
        rgba[4 * i + 3] = 180;
    }
    assert_int_equal(fx_jpeg_bytes(rgba, W, H, 4, 100, &b, &n), 0);
    decode_bytes(b, n, (img_scale){1, 1}, &w, &h, &d, &info);
    assert_true(info.cmyk);
    const int stored[3] = {200, 100, 50};
    for (int k = 0; k < 3; k++) {
        double want = 180 - 180.0 * (255 - stored[k]) / 255;
        assert_true(fabs(d.rgb[3 * (W * H / 2) + k] - want) <= 3);
    }
    free(b);
    free(g);
    free(rgba);
    free(px);
    img_decoder_free(&d);
}

static void test_dct_scale(void **state)
{
    (void)state;
    /* The smallest of 1/8, 1/4, 1/2, 1 keeping the box at least `out` a side (libjpeg-turbo's
       5/8, which would keep 240 of 384, has no SIMD IDCT: not taken). */
    img_scale s = img_pick_scale(512, 384, 224);
    assert_int_equal(s.num, s.denom); /* 1/1: 384 / 2 = 192 < 224 */
    s = img_pick_scale(600, 460, 224);
    assert_int_equal(s.num * 2, s.denom); /* 1/2: 230 >= 224 */
    s = img_pick_scale(1000, 900, 224);
    assert_int_equal(s.num * 4, s.denom); /* 1/4: 225 >= 224 */
    s = img_pick_scale(2000, 1800, 224);
    assert_int_equal(s.num * 8, 1 * s.denom); /* 1/8: 225 >= 224 */
    s = img_pick_scale(100, 300, 224);
    assert_int_equal(s.num, s.denom); /* no reduction */
    /* A decode at 1/2 is half the size and close to the 2x2 means of the full decode. */
    const int W = 256, H = 192;
    uint8_t *px = malloc(W * H * 3), *b;
    size_t n;
    fx_pattern(px, W, H, 5);
    assert_int_equal(fx_jpeg_bytes(px, W, H, 3, 95, &b, &n), 0);
    img_decoder d = {0};
    img_info info;
    int w, h;
    decode_bytes(b, n, (img_scale){1, 2}, &w, &h, &d, &info);
    assert_int_equal(w, W / 2);
    assert_int_equal(h, H / 2);
    int worst = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < 3; k++) {
                int m = 0;
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++)
                        m += px[((2 * y + dy) * W + 2 * x + dx) * 3 + k];
                int e = abs((int)d.rgb[(y * w + x) * 3 + k] - (m + 2) / 4);
                if (e > worst) worst = e;
            }
    assert_true(worst <= 6);
    free(b);
    free(px);
    img_decoder_free(&d);
}

/*
 * A region decoded alone (img_decode_region: libjpeg's crop and skip) holds exactly the whole
 * decode's pixels there: 4:2:0, 4:2:2, 4:4:4 and grayscale, baseline and progressive, at 1/1
 * and 1/2 and 3/8, for regions at the edges, on iMCU boundaries and off them. A truncated file
 * fails as the whole decode does, whatever the region.
 */
static void test_region_decode(void **state)
{
    (void)state;
    const int W = 203, H = 141; /* no side a multiple of an iMCU */
    uint8_t *px = malloc(W * H * 3);
    assert_non_null(px);
    /* Noise: a smooth image would hide an edge column that is upsampled differently. */
    uint32_t noise = 9;
    for (int i = 0; i < W * H * 3; i++) {
        noise = noise * 1664525u + 1013904223u;
        px[i] = (uint8_t)(noise >> 24);
    }
    const int samps[4] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY};
    const img_scale scales[3] = {{1, 1}, {1, 2}, {3, 8}};
    img_decoder whole = {0}, part = {0};
    uint32_t lcg = 12345;
    int checked = 0;
    for (int k = 0; k < 4; k++)
        for (int prog = 0; prog < 2; prog++) {
            tjhandle tj = tjInitCompress();
            unsigned char *buf = NULL;
            unsigned long n = 0;
            assert_int_equal(tjCompress2(tj, px, W, 0, H, TJPF_RGB, &buf, &n, samps[k], 90,
                                         TJFLAG_ACCURATEDCT | (prog ? TJFLAG_PROGRESSIVE : 0)),
                             0);
            tjDestroy(tj);
            for (int si = 0; si < 3; si++) {
                img_info info;
                int w, h;
                decode_bytes(buf, n, scales[si], &w, &h, &whole, &info);
                for (int t = 0; t < 12; t++) {
                    int x0, y0, x1, y1;
                    if (t == 0) { /* the whole image */
                        x0 = y0 = 0;
                        x1 = w;
                        y1 = h;
                    } else if (t == 1) { /* the bottom-right corner */
                        x0 = w - 7;
                        y0 = h - 5;
                        x1 = w;
                        y1 = h;
                    } else if (t == 2) { /* iMCU boundaries (16 at 1/1) */
                        x0 = 16 < w ? 16 : 0;
                        y0 = 16 < h ? 16 : 0;
                        x1 = w > 48 ? 48 : w;
                        y1 = h > 32 ? 32 : h;
                    } else {
                        lcg = lcg * 1103515245u + 12345u;
                        x0 = (int)(lcg >> 8) % (w - 1);
                        lcg = lcg * 1103515245u + 12345u;
                        y0 = (int)(lcg >> 8) % (h - 1);
                        lcg = lcg * 1103515245u + 12345u;
                        x1 = x0 + 1 + (int)(lcg >> 8) % (w - x0);
                        lcg = lcg * 1103515245u + 12345u;
                        y1 = y0 + 1 + (int)(lcg >> 8) % (h - y0);
                    }
                    img_region r;
                    assert_int_equal(img_decode_region(&part, buf, n, "mem", &info, scales[si], x0,
                                                       y0, x1, y1, &r),
                                     RP_OK);
                    for (int y = y0; y < y1; y++)
                        if (memcmp(r.pix + (size_t)(y - y0) * r.stride,
                                   whole.rgb + ((size_t)y * w + x0) * 3, (size_t)(x1 - x0) * 3)) {
                            print_error("samp %d prog %d scale %d/%d region [%d,%d)x[%d,%d): row "
                                        "%d differs from the whole decode\n",
                                        samps[k], prog, scales[si].num, scales[si].denom, x0, x1,
                                        y0, y1, y);
                            fail();
                        }
                    checked++;
                }
            }
            /* Truncated: the region above the cut still fails, naming the file. */
            img_info info;
            assert_int_equal(img_probe(&part, buf, n, "cut.jpg", &info), RP_OK);
            img_region r;
            assert_int_equal(img_decode_region(&part, buf, n * 2 / 3, "cut.jpg", &info,
                                               (img_scale){1, 1}, 0, 0, 8, 8, &r),
                             RP_ERR_FORMAT);
            tu_assert_error_contains("cut.jpg: corrupt or truncated JPEG");
            tjFree(buf);
        }
    assert_int_equal(checked, 4 * 2 * 3 * 12);
    img_decoder_free(&whole);
    img_decoder_free(&part);
    free(px);
}

/* ---- RandomResizedCrop ---------------------------------------------------------- */

/* A fixed stream of doubles in [0, 1) (an LCG), the same for both implementations. */
typedef struct lcg {
    uint64_t s;
} lcg;

static double lcg_next(void *ctx)
{
    lcg *g = ctx;
    g->s = g->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(g->s >> 11) * (1.0 / 9007199254740992.0);
}

/* Python's round(): to nearest, ties to even, written out. */
static int py_round(double x)
{
    double f = floor(x), r = x - f;
    if (r > 0.5) return (int)f + 1;
    if (r < 0.5) return (int)f;
    return ((int64_t)f % 2 == 0) ? (int)f : (int)f + 1;
}

/*
 * torchvision 0.14 RandomResizedCrop.get_params, line by line (transforms.py), with
 * torch.empty(1).uniform_(a, b) = a + (b - a) * u and torch.randint(0, n) = floor(u * n).
 */
static void tv_get_params(int height, int width, const double scale[2], const double ratio[2],
                          lcg *g, int out[4])
{
    double area = (double)height * width;
    double log_ratio[2] = {log(ratio[0]), log(ratio[1])};
    for (int t = 0; t < 10; t++) {
        double target_area = area * (scale[0] + (scale[1] - scale[0]) * lcg_next(g));
        double aspect_ratio = exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * lcg_next(g));
        int w = py_round(sqrt(target_area * aspect_ratio));
        int h = py_round(sqrt(target_area / aspect_ratio));
        if (0 < w && w <= width && 0 < h && h <= height) {
            int i = (int)(lcg_next(g) * (height - h + 1));
            int j = (int)(lcg_next(g) * (width - w + 1));
            out[0] = i, out[1] = j, out[2] = h, out[3] = w;
            return;
        }
    }
    double in_ratio = (double)width / height;
    int w, h;
    if (in_ratio < fmin(ratio[0], ratio[1])) {
        w = width;
        h = py_round(w / fmin(ratio[0], ratio[1]));
    } else if (in_ratio > fmax(ratio[0], ratio[1])) {
        h = height;
        w = py_round(h * fmax(ratio[0], ratio[1]));
    } else {
        w = width;
        h = height;
    }
    out[0] = (height - h) / 2, out[1] = (width - w) / 2, out[2] = h, out[3] = w;
}

static void test_rrc_matches_torchvision(void **state)
{
    (void)state;
    const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    const int sizes[][2] = {{224, 224}, {375, 500}, {500, 375}, {1, 1},       {7, 3},
                            {1000, 10}, {10, 1000}, {31, 32},   {4000, 3000}, {2, 900}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int rep = 0; rep < 500; rep++) {
            lcg a = {k * 1000003 + rep}, b = a;
            int want[4];
            tv_get_params(sizes[k][0], sizes[k][1], scale, ratio, &a, want);
            aug_box got = aug_random_resized_crop(sizes[k][0], sizes[k][1], scale[0], scale[1],
                                                  ratio[0], ratio[1], lcg_next, &b);
            assert_int_equal(got.top, want[0]);
            assert_int_equal(got.left, want[1]);
            assert_int_equal(got.h, want[2]);
            assert_int_equal(got.w, want[3]);
            assert_int_equal(a.s, b.s); /* the same number of draws */
        }
    /* The fallback, directly: a 1000 x 10 strip never fits (ratio clamped to 3/4: w = 10,
       h = round(10 / 0.75) = 13, centred), a 10 x 1000 strip gives h = 10, w = 13. */
    lcg g = {1};
    aug_box f = aug_random_resized_crop(1000, 10, 0.08, 1, 0.75, 4.0 / 3, lcg_next, &g);
    assert_int_equal(f.w, 10);
    assert_int_equal(f.h, 13);
    assert_int_equal(f.top, (1000 - 13) / 2);
    assert_int_equal(f.left, 0);
    f = aug_random_resized_crop(10, 1000, 0.08, 1, 0.75, 4.0 / 3, lcg_next, &g);
    assert_int_equal(f.h, 10);
    assert_int_equal(f.w, 13);
    assert_int_equal(f.left, (1000 - 13) / 2);
}

static void test_rrc_statistics(void **state)
{
    (void)state;
    /* With the per-sample Philox stream: area fractions uniform on [0.08, 1], log aspect
       ratios uniform on [log 3/4, log 4/3], offsets uniform over the valid range. */
    const uint32_t key[2] = {12345, 678};
    const int N = 20000, H = 1000, W = 1000;
    double sum_area = 0, sum_log = 0, lo_area = 1, hi_area = 0, sum_top_frac = 0;
    int in_range = 0;
    for (int i = 0; i < N; i++) {
        aug_rng r;
        aug_rng_init(&r, key, (uint32_t)i, 3);
        aug_box b = aug_random_resized_crop(H, W, 0.08, 1, 0.75, 4.0 / 3, aug_rng_uniform, &r);
        double a = (double)b.h * b.w / ((double)H * W);
        sum_area += a;
        if (a < lo_area) lo_area = a;
        if (a > hi_area) hi_area = a;
        sum_log += log((double)b.w / b.h);
        in_range += b.top >= 0 && b.left >= 0 && b.top + b.h <= H && b.left + b.w <= W;
        if (H > b.h) sum_top_frac += (double)b.top / (H - b.h);
    }
    assert_int_equal(in_range, N);
    /* E[area] for uniform [0.08, 1] is 0.54, less the tries that did not fit (large areas with
       extreme ratios fail and are drawn again): a little below. */
    assert_true(sum_area / N > 0.45 && sum_area / N < 0.56);
    assert_true(lo_area < 0.085 && hi_area > 0.95);
    assert_true(fabs(sum_log / N) < 0.01); /* symmetric in log ratio */
    assert_true(fabs(sum_top_frac / N - 0.5) < 0.02);
    /* Same (seed, epoch, sample): same box; another epoch: another box. */
    aug_rng r1, r2, r3;
    aug_rng_init(&r1, key, 7, 3);
    aug_rng_init(&r2, key, 7, 3);
    aug_rng_init(&r3, key, 7, 4);
    aug_box b1 = aug_random_resized_crop(H, W, 0.08, 1, 0.75, 4.0 / 3, aug_rng_uniform, &r1);
    aug_box b2 = aug_random_resized_crop(H, W, 0.08, 1, 0.75, 4.0 / 3, aug_rng_uniform, &r2);
    aug_box b3 = aug_random_resized_crop(H, W, 0.08, 1, 0.75, 4.0 / 3, aug_rng_uniform, &r3);
    assert_memory_equal(&b1, &b2, sizeof b1);
    assert_memory_not_equal(&b1, &b3, sizeof b1);
}

/* ---- evaluation geometry and resampling -------------------------------------- */

static void test_eval_geometry(void **state)
{
    (void)state;
    int rh, rw, top, left;
    /* Resize(256) of 300x500 (h x w): 256 x int(256*500/300) = 426; crop offsets
       round(32/2) = 16 and round(202/2) = 101. */
    aug_eval_geometry(300, 500, 256, 224, &rh, &rw, &top, &left);
    assert_int_equal(rh, 256);
    assert_int_equal(rw, 426);
    assert_int_equal(top, 16);
    assert_int_equal(left, 101);
    /* Portrait, and a half offset rounded to even: 256 x 227 -> 1.5 -> 2; 229 -> 2.5 -> 2. */
    aug_eval_geometry(455, 400, 256, 224, &rh, &rw, &top, &left);
    assert_int_equal(rw, 256);
    assert_int_equal(rh, 291); /* int(256 * 455 / 400) = int(291.2) */
    assert_int_equal(top, 34); /* round(33.5) = 34 (even) */
    aug_eval_geometry(227, 256, 227, 224, &rh, &rw, &top, &left);
    assert_int_equal(rh, 227);
    assert_int_equal(top, 2); /* round(1.5) = 2 */
    aug_eval_geometry(229, 300, 229, 224, &rh, &rw, &top, &left);
    assert_int_equal(top, 2); /* round(2.5) = 2 */
}

/*
 * Pillow's reduction in doubles, written from Resample.c's description: each output value
 * averages the inputs under a triangle of half-width max(scale, 1) around its centre, the
 * horizontal pass rounded to bytes first.
 */
static void ref_resize(const uint8_t *src, int W, int H, int OW, int OH, uint8_t *dst)
{
    double *tmp = malloc(sizeof(double) * H * OW * 3);
    for (int pass = 0; pass < 2; pass++) {
        int in = pass ? H : W, out = pass ? OH : OW;
        double scale = (double)in / out, fs = scale < 1 ? 1 : scale;
        for (int o = 0; o < out; o++) {
            double center = (o + 0.5) * scale;
            int lo = (int)(center - fs + 0.5), hi = (int)(center + fs + 0.5);
            if (lo < 0) lo = 0;
            if (hi > in) hi = in;
            double wsum = 0, wt[4096];
            for (int x = lo; x < hi; x++) {
                double t = fabs((x - center + 0.5) / fs);
                wt[x - lo] = t < 1 ? 1 - t : 0;
                wsum += wt[x - lo];
            }
            int lines = pass ? OW : H;
            for (int l = 0; l < lines; l++)
                for (int k = 0; k < 3; k++) {
                    double acc = 0;
                    for (int x = lo; x < hi; x++)
                        acc += wt[x - lo] / wsum *
                               (pass ? tmp[((size_t)x * OW + l) * 3 + k]
                                     : src[((size_t)l * W + x) * 3 + k]);
                    double v = floor(acc + 0.5);
                    v = v < 0 ? 0 : v > 255 ? 255 : v;
                    if (pass)
                        dst[((size_t)o * OW + l) * 3 + k] = (uint8_t)v;
                    else
                        tmp[((size_t)l * OW + o) * 3 + k] = v;
                }
        }
    }
    free(tmp);
}

static void test_resample(void **state)
{
    (void)state;
    const int W = 97, H = 61;
    uint8_t *src = malloc(W * H * 3), *out = malloc(W * H * 3), *ref = malloc(W * H * 3);
    for (int i = 0; i < W * H * 3; i++)
        src[i] = (uint8_t)((i * 37) ^ (i >> 3));
    aug_scratch s = {0};
    /* The same size: a copy. */
    assert_int_equal(aug_resample(&s, src, W * 3, W, H, 0, 0, W, H, W, H, 0, 0, W, H, out), RP_OK);
    assert_memory_equal(out, src, (size_t)W * H * 3);
    /* Reductions (antialiased: 97 -> 20 averages ~10 inputs) and an enlargement, against the
       reference within 1 (fixed point against doubles). */
    const int sizes[][2] = {{20, 13}, {48, 30}, {150, 90}, {97, 20}};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int ow = sizes[k][0], oh = sizes[k][1];
        uint8_t *o2 = malloc((size_t)ow * oh * 3), *r2 = malloc((size_t)ow * oh * 3);
        assert_int_equal(aug_resample(&s, src, W * 3, W, H, 0, 0, W, H, ow, oh, 0, 0, ow, oh, o2),
                         RP_OK);
        ref_resize(src, W, H, ow, oh, r2);
        for (int i = 0; i < ow * oh * 3; i++)
            assert_true(abs((int)o2[i] - r2[i]) <= 1);
        /* A window of the output (the centre crop) is that window of the whole. */
        uint8_t *win = malloc((size_t)ow * oh * 3);
        int cx = ow / 3, cy = oh / 4, cw = ow / 2, ch = oh / 2;
        assert_int_equal(
            aug_resample(&s, src, W * 3, W, H, 0, 0, W, H, ow, oh, cx, cy, cw, ch, win), RP_OK);
        for (int y = 0; y < ch; y++)
            assert_memory_equal(win + (size_t)y * cw * 3, o2 + ((size_t)(y + cy) * ow + cx) * 3,
                                (size_t)cw * 3);
        free(win);
        free(o2);
        free(r2);
    }
    aug_scratch_free(&s);
    free(src);
    free(out);
    free(ref);
}

/* ---- through the loader ----------------------------------------------------------- */

static rp_loader_config loader_cfg(const rp_dataset *ds, int batch, bool train)
{
    rp_loader_config lc = rp_loader_config_default();
    lc.global_batch = batch;
    lc.seed = 11;
    lc.shuffle = train;
    lc.drop_last = false;
    lc.augment = train;
    lc.flip = train;
    lc.prefetch = true;
    float mean[3], std[3];
    assert_int_equal(rp_dataset_channel_stats(ds, mean, std), RP_OK);
    for (int k = 0; k < 3; k++) {
        lc.mean[k] = mean[k];
        lc.std[k] = std[k];
    }
    return lc;
}

/* The whole epoch's floats and labels (n * S * S * 3, n). */
static void epoch_of(const rp_dataset *ds, const rp_loader_config *lc, int64_t epoch, float *x,
                     int32_t *y)
{
    rp_loader *ld;
    assert_int_equal(rp_loader_create(&ld, ds, lc), RP_OK);
    assert_int_equal(rp_loader_seek(ld, epoch, 0), RP_OK);
    size_t image = (size_t)ds->h * ds->w * 3;
    int64_t at = 0;
    for (int64_t s = 0; s < rp_loader_steps_per_epoch(ld); s++) {
        rp_batch b;
        assert_int_equal(rp_loader_next(ld, &b), RP_OK);
        memcpy(x + at * image, b.x, (size_t)b.n * image * sizeof(float));
        memcpy(y + at, b.y, (size_t)b.n * sizeof(int32_t));
        at += b.n;
    }
    assert_int_equal(at, ds->n);
    rp_loader_destroy(ld);
}

static void test_eval_identity_and_flip(void **state)
{
    (void)state;
    /* 24x24 PNGs: Resize(24) and CenterCrop(24) are the identity, so the floats are exactly
       (pixel / 255 - mean) / std as the loader computes it. */
    const int S = 24;
    assert_int_equal(fx_mkdirs(P("sq/train/a")), 0);
    assert_int_equal(fx_mkdirs(P("sq/val/a")), 0);
    uint8_t px[24 * 24 * 3];
    for (int i = 0; i < 4; i++) {
        fx_pattern(px, S, S, 20 + i);
        assert_int_equal(fx_write_png(P("sq/train/a/%d.png", i), px, S, S, 3), 0);
    }
    rp_folder_config c = small_cfg(S);
    c.resize_size = S;
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, P("sq"), "train", &c), RP_OK);
    rp_loader_config lc = loader_cfg(ds, 4, false);
    float *x = malloc(sizeof(float) * 4 * S * S * 3);
    int32_t y[4];
    epoch_of(ds, &lc, 0, x, y);
    for (int i = 0; i < 4; i++) {
        fx_pattern(px, S, S, 20 + i);
        for (int j = 0; j < S * S * 3; j++) {
            int k = j % 3;
            float scale = 1.0f / (255.0f * c.std[k]), shift = -c.mean[k] / c.std[k];
            assert_true(fabsf(x[i * S * S * 3 + j] - ((float)px[j] * scale + shift)) < 1e-5f);
        }
    }
    /* Training with scale (1, 1) and ratio (1, 1): the box is the whole image and the
       resize a copy, so each sample is its image, mirrored or not, and over the epochs both
       happen about half the time. */
    rp_dataset_destroy(ds);
    c.scale_min = c.scale_max = 1;
    c.ratio_min = c.ratio_max = 1;
    assert_int_equal(rp_dataset_load_folder(&ds, P("sq"), "train", &c), RP_OK);
    lc = loader_cfg(ds, 4, true);
    lc.shuffle = false;
    int flips = 0, total = 0;
    for (int e = 0; e < 25; e++) {
        epoch_of(ds, &lc, e, x, y);
        for (int i = 0; i < 4; i++) {
            fx_pattern(px, S, S, 20 + i);
            bool same = true, mirror = true;
            for (int r = 0; r < S; r++)
                for (int col = 0; col < S; col++)
                    for (int k = 0; k < 3; k++) {
                        float scale = 1.0f / (255.0f * c.std[k]), shift = -c.mean[k] / c.std[k];
                        float v = x[((i * S + r) * S + col) * 3 + k];
                        same &=
                            fabsf(v - ((float)px[(r * S + col) * 3 + k] * scale + shift)) < 1e-5f;
                        mirror &=
                            fabsf(v - ((float)px[(r * S + S - 1 - col) * 3 + k] * scale + shift)) <
                            1e-5f;
                    }
            assert_true(same || mirror);
            flips += mirror && !same;
            total++;
        }
    }
    assert_true(flips > total / 4 && flips < 3 * total / 4);
    free(x);
    rp_dataset_destroy(ds);
}

/* The tree's train split as a list file and as two tar shards, with the same bytes. */
static void make_list_and_tar(const rp_dataset *tree)
{
    assert_int_equal(fx_mkdirs(P("lst")), 0);
    assert_int_equal(fx_mkdirs(P("tars/train")), 0);
    FILE *f = fopen(P("lst/train.txt"), "w");
    assert_non_null(f);
    fprintf(f, "# path label\n\n");
    const char *names[32];
    const uint8_t *data[32];
    size_t sizes[32];
    char namebuf[32][64], cls[32][16];
    uint8_t *bytes[16];
    int m = 0, first_shard_end = 0;
    for (int64_t i = 0; i < tree->n; i++) {
        char path[4096];
        assert_int_equal(rp_dataset_sample_path(tree, i, path, sizeof path, NULL), RP_OK);
        /* Relative paths are relative to the list's directory. */
        fprintf(f, "%s%s  %d\n", i % 2 ? "" : "../", i % 2 ? path : path + strlen(root) + 1,
                tree->labels[i]);
        size_t n;
        bytes[i] = tu_read_file(path, &n);
        const char *ext = strrchr(path, '.') + 1;
        snprintf(namebuf[m], sizeof namebuf[m], "d/%06d.%s", (int)i, ext);
        names[m] = namebuf[m], data[m] = bytes[i], sizes[m] = n, m++;
        snprintf(cls[i], sizeof cls[i], "%d\n", tree->labels[i]);
        snprintf(namebuf[m], sizeof namebuf[m], "d/%06d.cls", (int)i);
        names[m] = namebuf[m], data[m] = (const uint8_t *)cls[i], sizes[m] = strlen(cls[i]), m++;
        if (i == 2) first_shard_end = m;
    }
    fclose(f);
    assert_int_equal(
        fx_write_tar(P("tars/train/shard-000000.tar"), names, data, sizes, first_shard_end), 0);
    assert_int_equal(fx_write_tar(P("tars/train/shard-000001.tar"), names + first_shard_end,
                                  data + first_shard_end, sizes + first_shard_end,
                                  m - first_shard_end),
                     0);
    for (int64_t i = 0; i < tree->n; i++)
        free(bytes[i]);
}

static void test_sources_agree(void **state)
{
    (void)state;
    rp_folder_config c = small_cfg(20);
    rp_dataset *tree, *list, *tar;
    assert_int_equal(rp_dataset_load_folder(&tree, P("tree"), "train", &c), RP_OK);
    make_list_and_tar(tree);
    assert_int_equal(rp_dataset_load_folder(&list, spec("list:", P("lst")), "train", &c), RP_OK);
    assert_int_equal(rp_dataset_load_folder(&tar, spec("tar:", P("tars")), "train", &c), RP_OK);
    assert_int_equal(list->n, tree->n);
    assert_int_equal(tar->n, tree->n);
    assert_int_equal(list->num_classes, 4);
    char path[4096];
    assert_int_equal(rp_dataset_sample_path(tar, 3, path, sizeof path, NULL), RP_OK);
    assert_string_equal(path, P("tars/train/shard-000001.tar:d/000003.png"));
    size_t size = (size_t)tree->n * 20 * 20 * 3;
    float *a = malloc(size * sizeof(float)), *b = malloc(size * sizeof(float));
    int32_t ya[8], yb[8];
    for (int train = 0; train < 2; train++) {
        rp_loader_config lc = loader_cfg(tree, 3, train);
        epoch_of(tree, &lc, 1, a, ya);
        epoch_of(list, &lc, 1, b, yb);
        assert_memory_equal(a, b, size * sizeof(float));
        assert_memory_equal(ya, yb, sizeof ya);
        epoch_of(tar, &lc, 1, b, yb);
        assert_memory_equal(a, b, size * sizeof(float));
        assert_memory_equal(ya, yb, sizeof ya);
    }
    free(a);
    free(b);
    rp_dataset_destroy(tar);
    rp_dataset_destroy(list);
    rp_dataset_destroy(tree);
    /* A list line without a label names the file and line. */
    assert_int_equal(fx_mkdirs(P("badlist")), 0);
    assert_int_equal(fx_write_file(P("badlist/train.txt"), "a.jpg 1\nb.jpg\n", 14), 0);
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, spec("list:", P("badlist")), "train", &c),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("train.txt line 2");
}

static void test_resume_replicas_threads(void **state)
{
    (void)state;
    const int S = 20, B = 4;
    rp_folder_config c = small_cfg(S);
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, P("tree"), "train", &c), RP_OK);
    rp_loader_config lc = loader_cfg(ds, B, true);
    size_t image = (size_t)S * S * 3;
    /* A loader run from the start to (epoch 2, step 1), and one that seeks there. */
    rp_loader *run, *resumed;
    rp_batch b1, b2;
    assert_int_equal(rp_loader_create(&run, ds, &lc), RP_OK);
    for (int k = 0; k < 2 * 2 + 1; k++)
        assert_int_equal(rp_loader_next(run, &b1), RP_OK);
    assert_int_equal(rp_loader_next(run, &b1), RP_OK);
    assert_int_equal(b1.epoch, 2);
    assert_int_equal(b1.step, 1);
    assert_int_equal(rp_loader_create(&resumed, ds, &lc), RP_OK);
    assert_int_equal(rp_loader_seek(resumed, 2, 1), RP_OK);
    assert_int_equal(rp_loader_next(resumed, &b2), RP_OK);
    assert_int_equal(b2.n, B);
    assert_memory_equal(b1.x, b2.x, B * image * sizeof(float));
    assert_memory_equal(b1.y, b2.y, B * sizeof(int32_t));
    /* Two replicas' slices, made on a dataset with another thread count, are the halves. */
    rp_folder_config c3 = c;
    c3.threads = 3;
    rp_dataset *ds3;
    assert_int_equal(rp_dataset_load_folder(&ds3, P("tree"), "train", &c3), RP_OK);
    for (int r = 0; r < 2; r++) {
        rp_loader_config l2 = lc;
        l2.replica = r;
        l2.replicas = 2;
        l2.prefetch = r == 0;
        rp_loader *ld;
        rp_batch h;
        assert_int_equal(rp_loader_create(&ld, ds3, &l2), RP_OK);
        assert_int_equal(rp_loader_seek(ld, 2, 1), RP_OK);
        assert_int_equal(rp_loader_next(ld, &h), RP_OK);
        assert_int_equal(h.n, B / 2);
        assert_memory_equal(h.x, b1.x + (size_t)r * (B / 2) * image, B / 2 * image * sizeof(float));
        assert_memory_equal(h.y, b1.y + r * (B / 2), B / 2 * sizeof(int32_t));
        rp_loader_destroy(ld);
    }
    /* Another epoch augments differently. */
    assert_int_equal(rp_loader_seek(resumed, 3, 1), RP_OK);
    assert_int_equal(rp_loader_next(resumed, &b2), RP_OK);
    assert_memory_not_equal(b1.x, b2.x, B * image * sizeof(float));
    rp_loader_destroy(resumed);
    rp_loader_destroy(run);
    rp_dataset_destroy(ds3);
    rp_dataset_destroy(ds);
}

/* ---- bad files ------------------------------------------------------------------ */

/* The first error of an epoch over the split (one batch of all), or RP_OK. */
static rp_status run_epoch(const rp_dataset *ds, bool train)
{
    rp_loader_config lc = loader_cfg(ds, (int)ds->n, train);
    lc.shuffle = false;
    rp_loader *ld;
    assert_int_equal(rp_loader_create(&ld, ds, &lc), RP_OK);
    rp_batch b;
    rp_status st = rp_loader_next(ld, &b);
    rp_loader_destroy(ld);
    return st;
}

static void test_bad_files(void **state)
{
    (void)state;
    assert_int_equal(fx_mkdirs(P("bad/train/a")), 0);
    assert_int_equal(fx_mkdirs(P("bad/train/b")), 0);
    uint8_t *good;
    size_t n;
    uint8_t px[64 * 48 * 3];
    fx_pattern(px, 64, 48, 1);
    assert_int_equal(fx_jpeg_bytes(px, 64, 48, 3, 90, &good, &n), 0);
    /* A PNG named .jpg decodes, as PIL opens it. */
    put_png(P("bad/train/a/0_png.jpg"), 30, 30, 2);
    put_jpeg(P("bad/train/a/1_good.jpg"), 30, 30, 3);
    put_jpeg(P("bad/train/b/9_good.jpg"), 30, 30, 4);
    rp_folder_config c = small_cfg(16);
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, P("bad"), "train", &c), RP_OK);
    assert_int_equal(run_epoch(ds, true), RP_OK);
    assert_int_equal(run_epoch(ds, false), RP_OK);
    rp_dataset_destroy(ds);

    struct {
        const char *name, *needle;
        const void *bytes;
        size_t size;
    } cases[5];
    uint8_t big[4096];
    memcpy(big, good, n < sizeof big ? n : sizeof big);
    /* A 30000 x 30000 SOF in a JPEG of a few hundred bytes: refused before any allocation. */
    for (size_t i = 2; i + 9 < n; i++)
        if (big[i] == 0xFF && big[i + 1] == 0xC0) {
            big[i + 5] = 30000 >> 8, big[i + 6] = 30000 & 255;
            big[i + 7] = 30000 >> 8, big[i + 8] = 30000 & 255;
            break;
        }
    cases[0].name = "trunc.jpg", cases[0].needle = "truncated", cases[0].bytes = good,
    cases[0].size = n / 2;
    cases[1].name = "zero.jpg", cases[1].needle = "empty", cases[1].bytes = "", cases[1].size = 0;
    cases[2].name = "text.jpeg", cases[2].needle = "not a JPEG or PNG", cases[2].bytes = "hello",
    cases[2].size = 5;
    cases[3].name = "huge.jpg", cases[3].needle = "", cases[3].bytes = big,
    cases[3].size = n < sizeof big ? n : sizeof big;
    cases[4].name = "trunc.png", cases[4].needle = "PNG", cases[4].bytes = NULL;
    uint8_t *pngb;
    size_t pn;
    assert_int_equal(fx_png_bytes(px, 64, 48, 3, &pngb, &pn), 0);
    cases[4].bytes = pngb, cases[4].size = pn - 20;
    for (int k = 0; k < 5; k++) {
        for (int train = 0; train < 2; train++) {
            char path[8192];
            snprintf(path, sizeof path, "%s", P("bad/train/a/5_%s", cases[k].name));
            assert_int_equal(fx_write_file(path, cases[k].bytes, cases[k].size), 0);
            assert_int_equal(rp_dataset_load_folder(&ds, P("bad"), "train", &c), RP_OK);
            rp_status st = run_epoch(ds, train);
            assert_int_equal(st, RP_ERR_FORMAT);
            tu_assert_error_contains(path);
            tu_assert_error_contains(cases[k].needle);
            rp_dataset_destroy(ds);
            /* Under skip_bad: counted once, replaced by the next sample (b's, label 1). */
            rp_folder_config cs = c;
            cs.skip_bad = true;
            assert_int_equal(rp_dataset_load_folder(&ds, P("bad"), "train", &cs), RP_OK);
            assert_int_equal(run_epoch(ds, train), RP_OK);
            assert_int_equal(rp_dataset_bad_files(ds), 1);
            rp_dataset_destroy(ds);
            unlink(path);
        }
    }
    /* A file deleted after the index was read. */
    put_jpeg(P("bad/train/a/7_gone.jpg"), 30, 30, 5);
    assert_int_equal(rp_dataset_load_folder(&ds, P("bad"), "train", &c), RP_OK);
    unlink(P("bad/train/a/7_gone.jpg"));
    assert_int_equal(run_epoch(ds, false), RP_ERR_IO);
    tu_assert_error_contains("7_gone.jpg");
    tu_assert_error_contains("deleted");
    rp_dataset_destroy(ds);
    free(pngb);
    free(good);
}

static void test_tar_errors(void **state)
{
    (void)state;
    assert_int_equal(fx_mkdirs(P("tbad/train")), 0);
    uint8_t px[32 * 32 * 3], *jpg;
    size_t n;
    fx_pattern(px, 32, 32, 1);
    assert_int_equal(fx_jpeg_bytes(px, 32, 32, 3, 90, &jpg, &n), 0);
    const char *names[] = {"000000.jpg", "000000.cls", "000001.jpg", "000001.cls"};
    const uint8_t *data[] = {jpg, (const uint8_t *)"0", jpg, (const uint8_t *)"1\n"};
    size_t sizes[] = {n, 1, n, 2};
    char path[8192];
    snprintf(path, sizeof path, "%s", P("tbad/train/s.tar"));
    assert_int_equal(fx_write_tar(path, names, data, sizes, 4), 0);
    rp_folder_config c = small_cfg(16);
    rp_dataset *ds;
    assert_int_equal(rp_dataset_load_folder(&ds, spec("tar:", P("tbad")), "train", &c), RP_OK);
    assert_int_equal(ds->n, 2);
    assert_int_equal(ds->labels[1], 1);
    assert_int_equal(run_epoch(ds, true), RP_OK);
    rp_dataset_destroy(ds);
    /* Cut inside the second image: an error naming the shard and the member, or with
       skip_bad the samples before the cut. */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* Headers and data: jpg 0, cls 0, then the header of jpg 1 and 100 of its bytes. */
    off_t cut = 512 + (off_t)(n + 511) / 512 * 512 + 512 + 512 + 512 + 100;
    assert_true(st.st_size > cut);
    assert_int_equal(truncate(path, cut), 0);
    assert_int_equal(rp_dataset_load_folder(&ds, spec("tar:", P("tbad")), "train", &c),
                     RP_ERR_FORMAT);
    tu_assert_error_contains(path);
    tu_assert_error_contains("000001.jpg");
    c.skip_bad = true;
    assert_int_equal(rp_dataset_load_folder(&ds, spec("tar:", P("tbad")), "train", &c), RP_OK);
    assert_int_equal(ds->n, 1);
    rp_dataset_destroy(ds);
    c.skip_bad = false;
    /* A sample without its label; a corrupt header. */
    assert_int_equal(fx_write_tar(path, names, data, sizes, 3), 0);
    assert_int_equal(rp_dataset_load_folder(&ds, spec("tar:", P("tbad")), "train", &c),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("no .cls");
    assert_int_equal(fx_write_file(path, "not a tar file at all", 21), 0);
    assert_int_equal(rp_dataset_load_folder(&ds, spec("tar:", P("tbad")), "train", &c),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("truncated");
    free(jpg);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_order),     cmocka_unit_test(test_tree_errors),
        cmocka_unit_test(test_decode),         cmocka_unit_test(test_dct_scale),
        cmocka_unit_test(test_region_decode),  cmocka_unit_test(test_rrc_matches_torchvision),
        cmocka_unit_test(test_rrc_statistics), cmocka_unit_test(test_eval_geometry),
        cmocka_unit_test(test_resample),       cmocka_unit_test(test_eval_identity_and_flip),
        cmocka_unit_test(test_sources_agree),  cmocka_unit_test(test_resume_replicas_threads),
        cmocka_unit_test(test_bad_files),      cmocka_unit_test(test_tar_errors),
    };
    return tu_run_group_tests(argc, argv, tests, setup, teardown);
}
