/*
 * fuzz_tar.c - libFuzzer target for the WebDataset shard reader (src/data/folder_tar.c) through
 * rp_dataset_load_folder("tar:DIR", "train"), and for reading and decoding the members it
 * indexed (folder_make_sample, evaluation transform, 8 x 8).
 *
 * Input byte 0: bit 0 skip_bad; bit 1 repairs the input's header checksums before the reader
 * sees it (walking the headers as tar does: a header, its octal size, the data rounded up to
 * 512), so that mutations reach what lies behind the checksum; bit 2 decodes up to four of the
 * samples. The rest is DIR/train/a.tar, a link to a memory file.
 *
 * Checked besides memory safety: an error leaves no dataset and names the directory or the
 * shard; a success has at least one sample, labels in [0, num_classes) with num_classes one
 * above the largest, and each sample an image member (.jpg, .jpeg or .png in any case) whose
 * data starts on a block boundary after its header, ends inside the file, and comes after the
 * previous sample's; a decoded member succeeds or fails with an error naming the shard.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/folder_internal.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SIDE 8

static fuzz_file shard;
static char dir[4096], shard_path[4096 + 16], spec[4096 + 8];
static folder_worker worker;
static uint8_t *buf;
static size_t buf_cap;

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s", fuzz_dir_create("tar"));
    char train[4096 + 8];
    snprintf(train, sizeof train, "%s/train", dir);
    FUZZ_EXPECT(mkdir(train, 0700) == 0, "mkdir %s", train);
    fuzz_file_open(&shard, "a.tar");
    fuzz_dir_link(train, "a.tar", &shard);
    snprintf(shard_path, sizeof shard_path, "%s/a.tar", train);
    snprintf(spec, sizeof spec, "tar:%s", dir);
    rp_log_set_level(RP_LOG_ERROR); /* skip_bad's warnings, one per bad member */
}

/* An octal field as tar writes it (digits, then NUL or spaces); -1 otherwise. */
static int64_t octal(const uint8_t *p, int len)
{
    int64_t v = 0;
    int i = 0;
    while (i < len && p[i] == ' ')
        i++;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3)) return -1;
        v = v * 8 + (p[i] - '0');
    }
    return v;
}

/* Rewrites each header's checksum as tar computes it (unsigned sum, the field as spaces). */
static void repair_checksums(uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off + 512 <= n) {
        uint8_t *h = p + off;
        bool zero = true;
        for (int i = 0; i < 512 && zero; i++)
            zero = h[i] == 0;
        if (zero) return;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += h[i];
        snprintf((char *)h + 148, 8, "%06o", sum);
        h[155] = ' ';
        int64_t size = (h[124] & 0x80) ? -1 : octal(h + 124, 12);
        if (size < 0 || (uint64_t)size > n) return;
        off += 512 + ((size_t)size + 511) / 512 * 512;
    }
}

static bool image_suffix(const char *name)
{
    size_t n = strlen(name);
    return (n >= 4 && !strcasecmp(name + n - 4, ".jpg")) ||
           (n >= 5 && !strcasecmp(name + n - 5, ".jpeg")) ||
           (n >= 4 && !strcasecmp(name + n - 4, ".png"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    if (size < 1) return 0;
    const bool skip_bad = data[0] & 1, repair = data[0] & 2, decode = data[0] & 4;
    size_t n = size - 1;
    if (n > buf_cap) {
        free(buf);
        buf = malloc(n);
        FUZZ_EXPECT(buf != NULL, "harness: %zu bytes", n);
        buf_cap = n;
    }
    if (n) memcpy(buf, data + 1, n);
    if (repair) repair_checksums(buf, n);
    fuzz_file_set(&shard, buf, n);

    rp_folder_config cfg = rp_folder_config_default();
    cfg.image_size = SIDE;
    cfg.threads = 1;
    cfg.skip_bad = skip_bad;
    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_folder(&ds, spec, "train", &cfg);
    if (s != RP_OK) {
        FUZZ_EXPECT(ds == NULL, "an error left the dataset set");
        FUZZ_EXPECT(s == RP_ERR_NOMEM || strstr(rp_last_error(), dir) != NULL,
                    "status %s without the directory", rp_status_name(s));
        return 0;
    }
    const rp_image_source *src = ds->source;
    FUZZ_EXPECT(ds->n >= 1 && src && src->kind == FOLDER_TAR, "%lld samples", (long long)ds->n);
    FUZZ_EXPECT(ds->h == SIDE && ds->w == SIDE && ds->c == 3, "shape %dx%dx%d", ds->h, ds->w,
                ds->c);
    int32_t max_label = -1;
    int64_t prev_end = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        FUZZ_EXPECT(ds->labels[i] >= 0 && ds->labels[i] < ds->num_classes,
                    "label %d of sample %lld, %d classes", ds->labels[i], (long long)i,
                    ds->num_classes);
        if (ds->labels[i] > max_label) max_label = ds->labels[i];
        FUZZ_EXPECT(src->shard[i] == 0, "shard %d", src->shard[i]);
        int64_t off = src->offset[i], len = src->size[i];
        FUZZ_EXPECT(off >= 512 && off % 512 == 0 && len >= 0 && off + len <= (int64_t)n &&
                        off >= prev_end,
                    "sample %lld's member at %lld, %lld bytes, in a %zu-byte shard after %lld",
                    (long long)i, (long long)off, (long long)len, n, (long long)prev_end);
        prev_end = off + len;
        const char *name = folder_sample_name(src, i);
        FUZZ_EXPECT(image_suffix(name), "sample %lld's image member is \"%s\"", (long long)i, name);
        char path[8192];
        FUZZ_EXPECT(rp_dataset_sample_path(ds, i, path, sizeof path, NULL) == RP_OK &&
                        strncmp(path, shard_path, strlen(shard_path)) == 0,
                    "sample %lld's path %s", (long long)i, path);
    }
    FUZZ_EXPECT(ds->num_classes == max_label + 1, "%d classes, largest label %d", ds->num_classes,
                max_label);

    if (decode) {
        static float out[SIDE * SIDE * 3];
        const float scale[3] = {1, 1, 1}, shift[3] = {0, 0, 0};
        folder_request req = {.ds = ds, .n = 1, .train = false, .scale = scale, .shift = shift};
        for (int64_t i = 0; i < ds->n && i < 4; i++) {
            int32_t label;
            rp_status ms = folder_make_sample(&req, i, &worker, out, &label);
            if (ms == RP_OK) {
                for (int k = 0; k < SIDE * SIDE * 3; k++)
                    FUZZ_EXPECT(out[k] >= 0 && out[k] <= 255, "value %g", (double)out[k]);
                continue;
            }
            FUZZ_EXPECT(ms == RP_ERR_NOMEM || strstr(rp_last_error(), shard_path) != NULL,
                        "sample %lld: status %s without the shard", (long long)i,
                        rp_status_name(ms));
            if (!skip_bad) break;
        }
    }
    rp_dataset_destroy(ds);
    return 0;
}
