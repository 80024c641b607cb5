/*
 * folder_make.c - writes a small image dataset for tests/cli_folder.sh:
 *   folder_make DIR CLASSES PER_CLASS_TRAIN PER_CLASS_VAL SIZE
 * makes DIR/train/class<k>/<i>.jpg (and every third a .png) and the same under val/,
 * each image a smooth pattern whose colours depend on its class, so a network can learn
 * them; DIR/list/{train,val}.txt listing the same files; and DIR/tar/{train,val}/0.tar
 * shards (WebDataset: NNNNNN.jpg|png + NNNNNN.cls) of the same bytes.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "folder_fixture.h"

static int split(const char *dir, const char *name, int classes, int per, int size, int salt)
{
    char path[4096], list[4096], tar[4096];
    snprintf(list, sizeof list, "%s/list/%s.txt", dir, name);
    snprintf(path, sizeof path, "%s/tar/%s", dir, name);
    if (fx_mkdirs(path) != 0) return -1;
    snprintf(tar, sizeof tar, "%s/tar/%s/000000.tar", dir, name);
    FILE *lf = fopen(list, "w");
    if (!lf) return -1;
    int n = classes * per;
    char **names = calloc(2 * (size_t)n, sizeof *names);
    uint8_t **data = calloc(2 * (size_t)n, sizeof *data);
    size_t *sizes = calloc(2 * (size_t)n, sizeof *sizes);
    uint8_t *px = malloc((size_t)size * size * 3);
    int m = 0, rc = 0;
    for (int c = 0; c < classes && !rc; c++) {
        snprintf(path, sizeof path, "%s/%s/class%d", dir, name, c);
        if (fx_mkdirs(path) != 0) rc = -1;
        for (int i = 0; i < per && !rc; i++) {
            /* Sizes vary around SIZE, so crops and resizes do real work. */
            int w = size + (i * 7) % (size / 2 + 1), h = size + (i * 5) % (size / 3 + 1);
            px = realloc(px, (size_t)w * h * 3);
            fx_pattern(px, w, h, c * 7 + (salt + i) % 3);
            uint8_t *b;
            size_t nb;
            bool png = i % 3 == 2;
            rc = png ? fx_png_bytes(px, w, h, 3, &b, &nb) : fx_jpeg_bytes(px, w, h, 3, 90, &b, &nb);
            if (rc) break;
            snprintf(path, sizeof path, "%s/%s/class%d/%03d.%s", dir, name, c, i,
                     png ? "png" : "jpg");
            rc = fx_write_file(path, b, nb);
            fprintf(lf, "../%s/class%d/%03d.%s %d\n", name, c, i, png ? "png" : "jpg", c);
            char key[32];
            snprintf(key, sizeof key, "%06d", c * per + i);
            names[m] = malloc(48);
            snprintf(names[m], 48, "%s.%s", key, png ? "png" : "jpg");
            data[m] = b, sizes[m] = nb, m++;
            names[m] = malloc(48);
            snprintf(names[m], 48, "%s.cls", key);
            data[m] = malloc(16);
            sizes[m] = (size_t)snprintf((char *)data[m], 16, "%d", c), m++;
        }
    }
    if (fclose(lf) != 0) rc = -1;
    if (!rc)
        rc = fx_write_tar(tar, (const char *const *)names, (const uint8_t *const *)data, sizes, m);
    for (int i = 0; i < m; i++) {
        free(names[i]);
        free(data[i]);
    }
    free(names);
    free(data);
    free(sizes);
    free(px);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: folder_make DIR CLASSES PER_CLASS_TRAIN PER_CLASS_VAL SIZE\n");
        return 2;
    }
    const char *dir = argv[1];
    int classes = atoi(argv[2]), ntrain = atoi(argv[3]), nval = atoi(argv[4]), size = atoi(argv[5]);
    char p[4096];
    snprintf(p, sizeof p, "%s/list", dir);
    if (classes < 1 || ntrain < 1 || nval < 1 || size < 4 || fx_mkdirs(p) != 0 ||
        split(dir, "train", classes, ntrain, size, 0) != 0 ||
        split(dir, "val", classes, nval, size, 1) != 0) {
        fprintf(stderr, "folder_make: cannot write the dataset in %s\n", dir);
        return 1;
    }
    return 0;
}
