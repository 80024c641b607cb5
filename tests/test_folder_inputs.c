/*
 * test_folder_inputs.c - bad inputs to the image-file datasets that the fuzz targets
 * (fuzz/fuzz_image.c, fuzz_tar.c, fuzz_list.c) found, each as a test vector that failed before
 * its fix, with the valid neighbours that must keep working:
 *
 *   - a JPEG whose data ends before its frame header: TurboJPEG's header call succeeds without
 *     a size, which the probe took from an uninitialised variable;
 *   - a JPEG that warns and then fails fatally: TurboJPEG reports the failure as a warning, so
 *     the decode was accepted with pixels never written (the same finding: given the first
 *     bug's stale size, the loader's decode of it failed so and was accepted);
 *   - a JPEG lacking a Huffman table, which a reused TurboJPEG handle decoded with the tables
 *     of the file read before it;
 *   - list-file lines with a NUL byte (which hid the rest of the line, or all of it as a blank
 *     line, and made "a.jpg 3 " a path with label 0) and labels with a sign;
 *   - skip_bad giving up on a run of bad files with an error that named no file.
 *
 * test_folder.c tests the datasets' normal behaviour; the inputs' bytes are also in
 * fuzz/corpus/<target>/finding-*.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "data/folder_internal.h"
#include "folder_fixture.h"
#include "replicator/loader.h"
#include "testutil.h"

/* A 64 x 48 RGB JPEG (4:4:4, quality 90) of the fixture's pattern; the caller frees it. */
static uint8_t *good_jpeg(size_t *n)
{
    uint8_t px[64 * 48 * 3], *b = NULL;
    fx_pattern(px, 64, 48, 4);
    assert_int_equal(fx_jpeg_bytes(px, 64, 48, 3, 90, &b, n), 0);
    return b;
}

/* fuzz/corpus/image/finding-jpeg-ends-before-frame, less fuzz_image's 5 bytes of transform. */
static const uint8_t jpeg_ends_before_frame[] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x01, 0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x03, 0x02, 0x02, 0x03, 0x02, 0x02, 0x03,
    0x03, 0x03, 0x03, 0x04, 0x03, 0x03, 0x04, 0x05, 0x08, 0x05, 0x05, 0x04, 0x04, 0x05, 0x0a, 0x07,
    0x07, 0x06, 0x08, 0x0c, 0x0a, 0x0c, 0x0c, 0x0b, 0x0a, 0x0b, 0x0b, 0x0d, 0x0e, 0x12, 0x10, 0x0d,
    0x10, 0x07, 0x00, 0x00, 0x00, 0x89, 0x50, 0x0e, 0x11, 0x0e, 0x4e, 0x47, 0x0d, 0x0b, 0x0a, 0x1a};

static void test_jpeg_ends_before_frame(void **state)
{
    (void)state;
    size_t n;
    uint8_t *good = good_jpeg(&n);
    img_decoder d = {0};
    img_info info;
    int w, h;
    /* A decoder that has just read a 64 x 48 image, as a loader thread's has. */
    assert_int_equal(img_probe(&d, good, n, "good.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, good, n, "good.jpg", &info, (img_scale){1, 1}, &w, &h), RP_OK);
    assert_int_equal(
        img_probe(&d, jpeg_ends_before_frame, sizeof jpeg_ends_before_frame, "cut.jpg", &info),
        RP_ERR_FORMAT);
    tu_assert_error_contains("cut.jpg");
    tu_assert_error_contains("without an image");
    /* The decoder is still good for the next file. */
    assert_int_equal(img_probe(&d, good, n, "good.jpg", &info), RP_OK);
    assert_int_equal(info.w, 64);
    assert_int_equal(info.h, 48);
    img_decoder_free(&d);
    free(good);
}

/* The offset of the k-th (from 1) `marker` (0xFF, marker) in the JPEG; fails the test if none. */
static size_t find_marker(const uint8_t *p, size_t n, uint8_t marker, int k)
{
    for (size_t i = 2; i + 1 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == marker && --k == 0) return i;
    fail_msg("no marker 0x%02x", marker);
    return 0;
}

/* A progressive 64 x 48 JPEG (its scans' Huffman tables in a DHT before each); caller frees. */
static uint8_t *progressive_jpeg(size_t *n)
{
    uint8_t px[64 * 48 * 3];
    fx_pattern(px, 64, 48, 4);
    tjhandle tj = tjInitCompress();
    unsigned char *out = NULL;
    unsigned long on = 0;
    assert_non_null(tj);
    assert_int_equal(
        tjCompress2(tj, px, 64, 0, 48, TJPF_RGB, &out, &on, TJSAMP_444, 90, TJFLAG_PROGRESSIVE), 0);
    tjDestroy(tj);
    uint8_t *b = malloc(on);
    assert_non_null(b);
    memcpy(b, out, on);
    tjFree(out);
    *n = on;
    return b;
}

static void test_jpeg_fatal_after_warning(void **state)
{
    (void)state;
    /* A progressive JPEG: TurboJPEG reads every scan before it writes a pixel. */
    size_t n;
    uint8_t *good = progressive_jpeg(&n);

    img_decoder d = {0};
    img_info info;
    int w, h;
    assert_int_equal(img_probe(&d, good, n, "good.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, good, n, "good.jpg", &info, (img_scale){1, 1}, &w, &h), RP_OK);
    const size_t bytes = (size_t)w * h * 3;
    uint8_t *clean = malloc(bytes);
    assert_non_null(clean);
    memcpy(clean, d.rgb, bytes);

    /* Two stray bytes before the second scan: libjpeg warns after the header, in the decode.
       A warning alone is accepted, as PIL accepts it, with the same pixels. */
    uint8_t *bad = calloc(n + 2, 1);
    assert_non_null(bad);
    size_t sos = find_marker(good, n, 0xDA, 2);
    memcpy(bad, good, sos);
    memcpy(bad + sos + 2, good + sos, n - sos);
    sos += 2;
    memset(d.rgb, 0xAB, bytes);
    assert_int_equal(img_probe(&d, bad, n + 2, "warn.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, bad, n + 2, "warn.jpg", &info, (img_scale){1, 1}, &w, &h),
                     RP_OK);
    assert_memory_equal(d.rgb, clean, bytes);

    /* The warning, then a second scan naming component 9, which the frame lacks: a fatal
       error before any pixel is written, which TurboJPEG 2.1 reports as a warning. It used
       to pass, the buffer's old contents taken for the image; it must be refused. */
    bad[sos + 5] = 9; /* FF DA, length (2), Ns (1), then component 1's id */
    memset(d.rgb, 0xAB, bytes);
    assert_int_equal(img_probe(&d, bad, n + 2, "fatal.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, bad, n + 2, "fatal.jpg", &info, (img_scale){1, 1}, &w, &h),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("fatal.jpg");
    tu_assert_error_contains("Invalid component ID 9");
    img_decoder_free(&d);
    free(bad);
    free(clean);
    free(good);
}

static void test_jpeg_tables_do_not_carry_over(void **state)
{
    (void)state;
    /* The file without its first DHT segment: the first scan's DC tables are then defined
       nowhere in it. A fresh decoder refuses it. */
    size_t n;
    uint8_t *full = progressive_jpeg(&n);
    size_t at = find_marker(full, n, 0xC4, 1), len = (size_t)full[at + 2] << 8 | full[at + 3];
    size_t cn = n - 2 - len;
    uint8_t *cut = malloc(cn);
    assert_non_null(cut);
    memcpy(cut, full, at);
    memcpy(cut + at, full + at + 2 + len, n - at - 2 - len);
    img_decoder d = {0};
    img_info info;
    int w, h;
    assert_int_equal(img_probe(&d, cut, cn, "cut.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, cut, cn, "cut.jpg", &info, (img_scale){1, 1}, &w, &h),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("Huffman table");
    /* A decoder that has just read the whole file must refuse it too: it used to decode it
       with the tables the whole file had left in its TurboJPEG handle (fuzz_image's finding:
       a loader thread's result depended on the file it read before). */
    img_decoder_free(&d);
    assert_int_equal(img_probe(&d, full, n, "full.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, full, n, "full.jpg", &info, (img_scale){1, 1}, &w, &h), RP_OK);
    assert_int_equal(img_probe(&d, cut, cn, "cut.jpg", &info), RP_OK);
    assert_int_equal(img_decode(&d, cut, cn, "cut.jpg", &info, (img_scale){1, 1}, &w, &h),
                     RP_ERR_FORMAT);
    tu_assert_error_contains("cut.jpg");
    tu_assert_error_contains("Huffman table");
    img_decoder_free(&d);
    free(cut);
    free(full);
}

/* Writes DIR/train.txt (bytes, NULs included) and loads "list:DIR"; returns the status. */
static rp_status load_list(const char *dir, const char *text, size_t n, bool skip_bad,
                           rp_dataset **ds)
{
    char path[4096];
    assert_int_equal(fx_mkdirs(dir), 0);
    snprintf(path, sizeof path, "%s/train.txt", dir);
    assert_int_equal(fx_write_file(path, text, n), 0);
    rp_folder_config cfg = rp_folder_config_default();
    cfg.image_size = 8;
    cfg.skip_bad = skip_bad;
    char spec[4200];
    snprintf(spec, sizeof spec, "list:%s", dir);
    return rp_dataset_load_folder(ds, spec, "train", &cfg);
}

static void test_list_nul_and_sign(void **state)
{
    (void)state;
    char dir[4096];
    tu_tmp_path(dir, sizeof dir, "list");
    rp_dataset *ds = NULL;
    /* The fuzzer's case: a NUL before the newline hid nothing yet was read past. */
    static const char nul_end[] = "a.jpg 0\nb.png\t3\0\n";
    /* "c.jpg 3 " before a NUL: once "c.jpg 3" with label 0 (strtol of ""). */
    static const char nul_blank[] = "c.jpg 3 \0 \n";
    /* A line that starts with a NUL was skipped as blank (the fuzzer's second case). */
    static const char nul_start[] = "\0\0\0x.jpg 1\nb.jpg 2\n";
    static const char plus[] = "d.jpg +5\n", minus[] = "e.jpg -0\n";
    struct {
        const char *text;
        size_t n;
        const char *line, *why;
    } bad[] = {
        {nul_end, sizeof nul_end - 1, "line 2", "NUL"},
        {nul_blank, sizeof nul_blank - 1, "line 1", "NUL"},
        {nul_start, sizeof nul_start - 1, "line 1", "NUL"},
        {plus, sizeof plus - 1, "line 1", "not a decimal number"},
        {minus, sizeof minus - 1, "line 1", "not a decimal number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(load_list(dir, bad[i].text, bad[i].n, false, &ds), RP_ERR_FORMAT);
        assert_null(ds);
        tu_assert_error_contains("train.txt");
        tu_assert_error_contains(bad[i].line);
        tu_assert_error_contains(bad[i].why);
    }
    /* With skip_bad those lines are left out and the good ones kept, in order. */
    static const char mixed[] = "a.jpg 0\nb.png\t3\0\nc.jpg 3 \0 \nd.jpg +5\nsub dir/f.jpg 2\n";
    assert_int_equal(load_list(dir, mixed, sizeof mixed - 1, true, &ds), RP_OK);
    assert_int_equal(ds->n, 2);
    assert_int_equal(ds->labels[0], 0);
    assert_int_equal(ds->labels[1], 2);
    assert_int_equal(ds->num_classes, 3);
    char path[8192], want[8192];
    assert_int_equal(rp_dataset_sample_path(ds, 1, path, sizeof path, NULL), RP_OK);
    snprintf(want, sizeof want, "%s/sub dir/f.jpg", dir);
    assert_string_equal(path, want);
    rp_dataset_destroy(ds);
}

/* One batch of a fresh loader over ds (batch 1, augmented, no prefetch): its status. */
static rp_status first_batch(const rp_dataset *ds)
{
    rp_loader_config lc = rp_loader_config_default();
    lc.global_batch = 1;
    lc.augment = true;
    lc.prefetch = false;
    lc.shuffle = false;
    rp_loader *ld = NULL;
    assert_int_equal(rp_loader_create(&ld, ds, &lc), RP_OK);
    rp_batch b;
    rp_status s = rp_loader_next(ld, &b);
    rp_loader_destroy(ld);
    return s;
}

static void test_skip_bad_gives_up_naming_a_file(void **state)
{
    (void)state;
    /* The fuzzer's case: a shard of one sample whose image is not an image, under skip_bad. */
    char dir[4096], shard[4200];
    tu_tmp_path(dir, sizeof dir, "shards");
    snprintf(shard, sizeof shard, "%s/train", dir);
    assert_int_equal(fx_mkdirs(shard), 0);
    snprintf(shard, sizeof shard, "%s/train/0.tar", dir);
    const char *names[] = {"000000.jpg", "000000.cls"};
    const uint8_t *data[] = {(const uint8_t *)"not an image", (const uint8_t *)"0"};
    const size_t sizes[] = {12, 1};
    assert_int_equal(fx_write_tar(shard, names, data, sizes, 2), 0);
    rp_folder_config cfg = rp_folder_config_default();
    cfg.image_size = 8;
    cfg.skip_bad = true;
    rp_dataset *ds = NULL;
    char spec[4200];
    snprintf(spec, sizeof spec, "tar:%s", dir);
    assert_int_equal(rp_dataset_load_folder(&ds, spec, "train", &cfg), RP_OK);
    assert_int_equal(first_batch(ds), RP_ERR_FORMAT);
    tu_assert_error_contains("too many bad files");
    tu_assert_error_contains(shard);
    tu_assert_error_contains("000000.jpg");
    /* Again, once the sample is marked bad and not decoded again: still a file named. */
    assert_int_equal(first_batch(ds), RP_ERR_FORMAT);
    tu_assert_error_contains("000000.jpg");
    assert_int_equal(rp_dataset_bad_files(ds), 1);
    rp_dataset_destroy(ds);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jpeg_ends_before_frame),
        cmocka_unit_test(test_jpeg_fatal_after_warning),
        cmocka_unit_test(test_jpeg_tables_do_not_carry_over),
        cmocka_unit_test(test_list_nul_and_sign),
        cmocka_unit_test(test_skip_bad_gives_up_naming_a_file),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
