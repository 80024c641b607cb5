/*
 * fuzz_cifar.c - libFuzzer target for the CIFAR-10 binary reader (rp_dataset_load_cifar10).
 *
 * The reader takes a directory: test_batch.bin for the test split, data_batch_1..5.bin for the
 * training split. A scratch directory holds those names once, as links to memory files that each
 * input refills. The first input byte chooses the split (bit 0 set: train); the rest is the test
 * batch, or is cut into five nearly equal parts, one per training batch.
 *
 * Checked besides memory safety: an error leaves no dataset and names the directory's file at
 * fault; a success holds size / 3073 records in NHWC with labels below 10, each pixel where the
 * channel-first record put it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "replicator/data.h"

#define RECORD 3073
#define PLANE  1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file batch[6]; /* [0..4]: data_batch_1..5.bin, [5]: test_batch.bin */
    static const char *dir;
    if (!dir) {
        dir = fuzz_dir_create("cifar");
        for (int i = 0; i < 6; i++) {
            char name[32];
            if (i < 5)
                snprintf(name, sizeof name, "data_batch_%d.bin", i + 1);
            else
                snprintf(name, sizeof name, "test_batch.bin");
            fuzz_file_open(&batch[i], name);
            fuzz_dir_link(dir, name, &batch[i]);
        }
    }
    if (size < 1) return 0;
    bool train = data[0] & 1;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    size_t begin[6], len[6];
    if (train) {
        for (int i = 0; i < 5; i++) {
            begin[i] = n * (size_t)i / 5;
            len[i] = n * (size_t)(i + 1) / 5 - begin[i];
            fuzz_file_set(&batch[i], rest + begin[i], len[i]);
        }
    } else {
        begin[5] = 0;
        len[5] = n;
        fuzz_file_set(&batch[5], rest, n);
    }

    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_cifar10(&ds, dir, train ? "train" : "test");
    if (s != RP_OK) {
        FUZZ_EXPECT(ds == NULL, "an error left the dataset set");
        FUZZ_EXPECT(strstr(rp_last_error(), dir) != NULL, "status %s without the directory",
                    rp_status_name(s));
        return 0;
    }
    FUZZ_EXPECT(ds->h == 32 && ds->w == 32 && ds->c == 3 && ds->num_classes == 10,
                "shape %dx%dx%d, %d classes", ds->h, ds->w, ds->c, ds->num_classes);
    int64_t at = 0;
    for (int f = train ? 0 : 5; f < (train ? 5 : 6); f++) {
        FUZZ_EXPECT(len[f] % RECORD == 0 && len[f] > 0, "accepted a batch of %zu bytes", len[f]);
        for (size_t r = 0; r < len[f] / RECORD; r++, at++) {
            const uint8_t *rec = rest + begin[f] + r * RECORD;
            const uint8_t *img = ds->pixels + at * RECORD - at; /* 3072 bytes per image */
            FUZZ_EXPECT(ds->labels[at] == rec[0], "label %lld", (long long)at);
            for (int p = 0; p < PLANE; p++)
                for (int c = 0; c < 3; c++)
                    FUZZ_EXPECT(img[p * 3 + c] == rec[1 + c * PLANE + p],
                                "pixel %d channel %d of image %lld", p, c, (long long)at);
        }
    }
    FUZZ_EXPECT(ds->n == at, "%lld images from %lld records", (long long)ds->n, (long long)at);
    rp_dataset_destroy(ds);
    return 0;
}
