/*
 * fuzz_idx.c - libFuzzer target for the IDX reader (rp_idx_read) and the image/label pair
 * loader over it (rp_dataset_load_idx).
 *
 * The input is an IDX file, plain or gzip-compressed, as rp_idx_read opens it by path. When a
 * plain input holds one whole IDX file followed by more bytes, the two parts are also loaded as
 * an image file and its label file, which is how a seed of the two concatenated reaches the
 * pair loader's own checks (ranks, counts, label range).
 *
 * Checked besides memory safety: an error leaves the outputs empty and says something that
 * names the file; a success returns dims within the documented limits and, for a plain file,
 * exactly the bytes after the header.
 */
#include <stdbool.h>
#include <string.h>

#include "fuzz_common.h"
#include "replicator/data.h"

/* The length of the plain IDX file at the start of data, or 0 if there is none whole. */
static size_t idx_length(const uint8_t *data, size_t size)
{
    if (size < 4 || data[0] != 0 || data[1] != 0 || data[3] < 1 || data[3] > 4) return 0;
    size_t head = 4 + 4 * (size_t)data[3];
    if (size < head) return 0;
    uint64_t total = 1;
    for (int i = 0; i < data[3]; i++) {
        const uint8_t *b = data + 4 + 4 * i;
        total *= (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
        if (total > size) return 0;
    }
    return head + total <= size ? head + (size_t)total : 0;
}

/* Reads f, checks the documented outcome, and frees what was read. */
static void read_one(const fuzz_file *f, const uint8_t *input, size_t size)
{
    uint8_t *out = (uint8_t *)1; /* the reader must overwrite it either way */
    int ndim = -1, dims[4] = {-1, -1, -1, -1};
    rp_status s = rp_idx_read(f->path, &out, &ndim, dims);
    if (s != RP_OK) {
        FUZZ_EXPECT(out == NULL && ndim == 0, "an error left outputs set (ndim %d)", ndim);
        FUZZ_EXPECT(!dims[0] && !dims[1] && !dims[2] && !dims[3], "an error left dims set");
        FUZZ_EXPECT(strstr(rp_last_error(), f->path) != NULL, "status %s without the path",
                    rp_status_name(s));
        return;
    }
    FUZZ_EXPECT(out != NULL && ndim >= 1 && ndim <= 4, "success with ndim %d", ndim);
    uint64_t total = 1;
    for (int i = 0; i < 4; i++) {
        FUZZ_EXPECT(i < ndim ? dims[i] >= 1 : dims[i] == 0, "dims[%d] = %d with ndim %d", i,
                    dims[i], ndim);
        if (i < ndim) total *= (uint64_t)dims[i];
    }
    FUZZ_EXPECT(total < ((uint64_t)1 << 31), "%llu elements", (unsigned long long)total);
    bool gzip = size >= 2 && input[0] == 0x1f && input[1] == 0x8b;
    if (!gzip) {
        size_t head = 4 + 4 * (size_t)ndim;
        FUZZ_EXPECT(size == head + total, "a plain file of %zu bytes gave %llu elements", size,
                    (unsigned long long)total);
        FUZZ_EXPECT(memcmp(out, input + head, (size_t)total) == 0,
                    "the data differs from the file");
    } else {
        /* Every byte must be readable: ASan checks the buffer really holds `total`. */
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < total; i++)
            sink ^= out[i];
        (void)sink;
    }
    rp_free(out);
}

/* Loads an image file and a label file as a dataset and checks the result. */
static void load_pair(const fuzz_file *images, const fuzz_file *labels)
{
    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_idx(&ds, images->path, labels->path, 10, "fuzz");
    if (s != RP_OK) {
        FUZZ_EXPECT(ds == NULL, "an error left the dataset set");
        FUZZ_EXPECT(rp_last_error()[0] != '\0', "status %s without a message", rp_status_name(s));
        return;
    }
    FUZZ_EXPECT(ds->n >= 1 && ds->h >= 1 && ds->w >= 1 && ds->c >= 1, "dataset %lld x %dx%dx%d",
                (long long)ds->n, ds->h, ds->w, ds->c);
    for (int64_t i = 0; i < ds->n; i++)
        FUZZ_EXPECT(ds->labels[i] >= 0 && ds->labels[i] < 10, "label %lld is %d", (long long)i,
                    ds->labels[i]);
    volatile uint8_t last = ds->pixels[ds->n * ds->h * ds->w * ds->c - 1];
    (void)last;
    rp_dataset_destroy(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file whole, images, labels;
    static bool ready;
    if (!ready) {
        fuzz_file_open(&whole, "idx");
        fuzz_file_open(&images, "idx-images");
        fuzz_file_open(&labels, "idx-labels");
        ready = true;
    }
    fuzz_file_set(&whole, data, size);
    read_one(&whole, data, size);

    size_t first = idx_length(data, size);
    if (first > 0 && first < size) {
        fuzz_file_set(&images, data, first);
        fuzz_file_set(&labels, data + first, size - first);
        load_pair(&images, &labels);
    }
    return 0;
}
