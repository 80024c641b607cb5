/*
 * test_gif.c - animated GIFs (rp_gif_*, libreplicator-extras): the file read
 * back with giflib (size, frames, delays, the looping extension, colours
 * within the quantiser's 5 bits), nothing left beside it, argument errors
 * named, a FIFO or a missing directory refused, and an aborted or failed GIF
 * that leaves the previous file whole.
 */
#include "testutil.h"

#include <dirent.h>
#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int group_setup(void **state)
{
    (void)state;
    return tu_tmpdir_create("gif");
}

static int group_teardown(void **state)
{
    (void)state;
    tu_tmpdir_remove();
    return 0;
}

/* Entries of the scratch directory whose names start with `prefix`. */
static int entries(const char *prefix)
{
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

#define W 5
#define H 3

/* Frame f: a left half red and a right half blue-ish, shifted by f. */
static void frame(uint8_t *rgb, int f)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = rgb + 3 * (y * W + x);
            bool left = x < 2 + f;
            p[0] = left ? 240 : 16, p[1] = (uint8_t)(40 * y), p[2] = left ? 8 : 200;
        }
}

static void test_frames_read_back(void **unused)
{
    (void)unused;
    char path[512];
    tu_tmp_path(path, sizeof path, "two.gif");
    rp_gif *g = NULL;
    assert_int_equal(rp_gif_create(&g, path, W, H), RP_OK);
    uint8_t rgb[2][W * H * 3];
    frame(rgb[0], 0), frame(rgb[1], 1);
    assert_int_equal(rp_gif_add_frame(g, rgb[0], 7), RP_OK);
    assert_int_equal(rp_gif_add_frame(g, rgb[1], 100), RP_OK);
    assert_int_equal(entries("two.gif"), 1); /* the temporary file only, until close */
    struct stat st;
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(rp_gif_close(g), RP_OK);
    assert_int_equal(entries("two.gif"), 1); /* renamed into place: nothing else left */

    int err = 0;
    GifFileType *gf = DGifOpenFileName(path, &err);
    assert_non_null(gf);
    assert_int_equal(DGifSlurp(gf), GIF_OK);
    assert_int_equal(gf->SWidth, W);
    assert_int_equal(gf->SHeight, H);
    assert_int_equal(gf->ImageCount, 2);
    /* The looping extension, before the first frame (giflib files it with that frame). */
    bool loops = false;
    const SavedImage *first = &gf->SavedImages[0];
    for (int i = 0; i + 1 < first->ExtensionBlockCount; i++) {
        const ExtensionBlock *e = &first->ExtensionBlocks[i];
        loops |= e->Function == APPLICATION_EXT_FUNC_CODE && e->ByteCount == 11 &&
                 !memcmp(e->Bytes, "NETSCAPE2.0", 11) && e[1].ByteCount == 3 &&
                 e[1].Bytes[0] == 1 && e[1].Bytes[1] == 0 && e[1].Bytes[2] == 0;
    }
    assert_true(loops);
    const int delays[2] = {7, 100};
    for (int f = 0; f < 2; f++) {
        GraphicsControlBlock gcb;
        assert_int_equal(DGifSavedExtensionToGCB(gf, f, &gcb), GIF_OK);
        assert_int_equal(gcb.DelayTime, delays[f]);
        const SavedImage *im = &gf->SavedImages[f];
        const ColorMapObject *map = im->ImageDesc.ColorMap;
        assert_non_null(map);
        for (int i = 0; i < W * H; i++) {
            const GifColorType *c = &map->Colors[im->RasterBits[i]];
            const uint8_t *want = rgb[f] + 3 * i;
            /* The median cut keeps 5 bits a channel. */
            assert_true(abs(c->Red - want[0]) <= 8 && abs(c->Green - want[1]) <= 8 &&
                        abs(c->Blue - want[2]) <= 8);
        }
    }
    DGifCloseFile(gf, &err);
}

static void test_errors_named(void **unused)
{
    (void)unused;
    char path[512], fifo[512], missing[512];
    tu_tmp_path(path, sizeof path, "err.gif");
    rp_gif *g = (rp_gif *)&g;
    assert_int_equal(rp_gif_create(&g, path, 0, 4), RP_ERR_INVALID);
    assert_null(g);
    tu_assert_error_contains("size 0x4, each must be 1..65535");
    assert_int_equal(rp_gif_create(&g, NULL, 4, 4), RP_ERR_INVALID);
    tu_assert_error_contains("path is NULL or empty");
    assert_int_equal(rp_gif_create(NULL, path, 4, 4), RP_ERR_INVALID);
    tu_assert_error_contains("gif is NULL");

    tu_tmp_path(missing, sizeof missing, "no/such/dir/a.gif");
    assert_int_equal(rp_gif_create(&g, missing, 4, 4), RP_ERR_IO);
    assert_null(g);
    tu_assert_error_contains("no/such/dir");

    tu_tmp_path(fifo, sizeof fifo, "fifo.gif");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(rp_gif_create(&g, fifo, 4, 4), RP_ERR_IO);
    tu_assert_error_contains("FIFO");
    unlink(fifo);

    assert_int_equal(rp_gif_create(&g, path, W, H), RP_OK);
    uint8_t rgb[W * H * 3];
    frame(rgb, 0);
    assert_int_equal(rp_gif_add_frame(g, rgb, -1), RP_ERR_INVALID);
    tu_assert_error_contains("delay -1, must be 0..65535");
    assert_int_equal(rp_gif_add_frame(g, NULL, 4), RP_ERR_INVALID);
    rp_gif_abort(g);
    rp_gif_abort(NULL);
    assert_int_equal(entries("err.gif"), 0);
    assert_int_equal(rp_gif_close(NULL), RP_ERR_INVALID);
}

/* An abandoned GIF leaves the file that was there whole, and no temporary file. */
static void test_abort_keeps_the_old_file(void **unused)
{
    (void)unused;
    char path[512];
    tu_tmp_path(path, sizeof path, "old.gif");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("the previous episode", f);
    fclose(f);
    rp_gif *g = NULL;
    assert_int_equal(rp_gif_create(&g, path, W, H), RP_OK);
    uint8_t rgb[W * H * 3];
    frame(rgb, 0);
    assert_int_equal(rp_gif_add_frame(g, rgb, 4), RP_OK);
    rp_gif_abort(g);
    size_t n;
    char *text = (char *)tu_read_file(path, &n);
    assert_int_equal(n, strlen("the previous episode"));
    assert_memory_equal(text, "the previous episode", n);
    free(text);
    assert_int_equal(entries("old.gif"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames_read_back),
        cmocka_unit_test(test_errors_named),
        cmocka_unit_test(test_abort_keeps_the_old_file),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
