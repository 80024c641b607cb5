/*
 * cifar.c - CIFAR-10 in its binary distribution (cifar-10-binary.tar.gz).
 *
 * Each batch file is a run of 3073-byte records: a label byte, then the red,
 * green and blue 32x32 planes (channel-first). We convert to NHWC on load so
 * that everything above sees one image layout.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_internal.h"
#include "replicator/data.h"

#define CIFAR_SIDE      32
#define CIFAR_CHANNELS  3
#define CIFAR_PLANE     (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_IMAGE     (CIFAR_CHANNELS * CIFAR_PLANE)
#define CIFAR_RECORD    (1 + CIFAR_IMAGE)
#define CIFAR_CLASSES   10
#define CIFAR_MAX_FILES 5
#define CIFAR_PATH_MAX  4096

/*
 * Checks one batch file's size and returns its record count: it must exist,
 * be a regular file and hold a positive whole number of records.
 */
static rp_status cifar_count(const char *path, int64_t *records)
{
    struct stat st;
    *records = 0;
    if (stat(path, &st) != 0)
        return RP_ERROR(RP_ERR_IO, "cifar-10: cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return RP_ERROR(RP_ERR_IO, "cifar-10: %s is not a regular file", path);
    int64_t size = (int64_t)st.st_size;
    if (size == 0) return RP_ERROR(RP_ERR_FORMAT, "cifar-10: %s is empty", path);
    if (size % CIFAR_RECORD != 0)
        return RP_ERROR(RP_ERR_FORMAT,
                        "cifar-10: %s: truncated record: the file holds %lld bytes, not a whole "
                        "number of %d-byte records (%lld whole records and %lld bytes left over)",
                        path, (long long)size, CIFAR_RECORD, (long long)(size / CIFAR_RECORD),
                        (long long)(size % CIFAR_RECORD));
    *records = size / CIFAR_RECORD;
    return RP_OK;
}

/*
 * Reads `records` records from path into pixels (NHWC) and labels. The size
 * was checked by cifar_count(); reading checks it again in case the file
 * changed in between.
 */
static rp_status cifar_read(const char *path, int64_t records, uint8_t *pixels, int32_t *labels)
{
    rp_status status = RP_OK;
    uint8_t rec[CIFAR_RECORD];
    FILE *f = NULL;
    /* Checked again at the open: a FIFO put there since cifar_count() must not block us. */
    int fd = -1;
    RP_TRY(core_file_open_regular(path, "CIFAR-10 batch", &fd));
    f = fdopen(fd, "rb");
    if (!f) {
        status = RP_ERROR(RP_ERR_IO, "cifar-10: cannot open %s: %s", path, strerror(errno));
        close(fd);
        goto cleanup;
    }
    for (int64_t r = 0; r < records; r++) {
        size_t got = fread(rec, 1, sizeof rec, f);
        if (got != sizeof rec) {
            if (ferror(f))
                status = RP_ERROR(RP_ERR_IO, "cifar-10: cannot read %s: %s", path, strerror(errno));
            else
                status = RP_ERROR(RP_ERR_FORMAT,
                                  "cifar-10: %s: truncated record %lld: expected %d bytes, found "
                                  "%zu (the file shrank while being read)",
                                  path, (long long)r, CIFAR_RECORD, got);
            goto cleanup;
        }
        if (rec[0] >= CIFAR_CLASSES) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "cifar-10: %s: label of record %lld is %d, out of range [0, %d)",
                              path, (long long)r, rec[0], CIFAR_CLASSES);
            goto cleanup;
        }
        labels[r] = rec[0];
        uint8_t *img = pixels + r * CIFAR_IMAGE;
        const uint8_t *planes = rec + 1;
        for (int p = 0; p < CIFAR_PLANE; p++)
            for (int ch = 0; ch < CIFAR_CHANNELS; ch++)
                img[p * CIFAR_CHANNELS + ch] = planes[ch * CIFAR_PLANE + p];
    }
    if (fgetc(f) != EOF) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "cifar-10: %s: trailing bytes after %lld records (the file grew while "
                          "being read)",
                          path, (long long)records);
        goto cleanup;
    }

cleanup:
    if (f) fclose(f);
    return status;
}

rp_status rp_dataset_load_cifar10(rp_dataset **ds, const char *dir, const char *split)
{
    rp_status status = RP_OK;
    char paths[CIFAR_MAX_FILES][CIFAR_PATH_MAX];
    int64_t counts[CIFAR_MAX_FILES];
    int files = 0;
    int64_t n = 0;
    uint8_t *pixels = NULL;
    int32_t *labels = NULL;
    rp_dataset *out = NULL;

    if (!ds) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_cifar10: ds is NULL");
    *ds = NULL;
    if (!dir || !split)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_cifar10: %s is NULL",
                        dir ? "split" : "dir");
    int train = !strcmp(split, "train");
    if (!train && strcmp(split, "test") != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "cifar-10: unknown split \"%s\", expected \"train\" or \"test\"", split);

    files = train ? CIFAR_MAX_FILES : 1;
    for (int i = 0; i < files; i++) {
        int k = train ? snprintf(paths[i], CIFAR_PATH_MAX, "%s/data_batch_%d.bin", dir, i + 1)
                      : snprintf(paths[i], CIFAR_PATH_MAX, "%s/test_batch.bin", dir);
        if (k < 0 || k >= CIFAR_PATH_MAX) {
            status = RP_ERROR(RP_ERR_INVALID, "cifar-10: directory path is too long: %s", dir);
            goto cleanup;
        }
        RP_TRY(cifar_count(paths[i], &counts[i]));
        n += counts[i];
    }

    pixels = rp_alloc((size_t)n * CIFAR_IMAGE);
    labels = rp_alloc((size_t)n * sizeof *labels);
    out = rp_calloc(sizeof *out);
    if (!pixels || !labels || !out) {
        status = RP_ERROR(RP_ERR_NOMEM, "cifar-10: cannot allocate %lld images in %s", (long long)n,
                          dir);
        goto cleanup;
    }
    int64_t first = 0;
    for (int i = 0; i < files; i++) {
        RP_TRY(cifar_read(paths[i], counts[i], pixels + first * CIFAR_IMAGE, labels + first));
        first += counts[i];
    }

    out->n = n;
    out->h = CIFAR_SIDE;
    out->w = CIFAR_SIDE;
    out->c = CIFAR_CHANNELS;
    out->num_classes = CIFAR_CLASSES;
    out->pixels = pixels;
    out->labels = labels;
    snprintf(out->name, sizeof out->name, "cifar-10/%s", train ? "train" : "test");
    pixels = NULL;
    labels = NULL;
    *ds = out;
    out = NULL;

cleanup:
    rp_free(out);
    rp_free(labels);
    rp_free(pixels);
    return status;
}
