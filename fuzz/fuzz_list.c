/*
 * fuzz_list.c - libFuzzer target for the list-file parser of the image-file datasets
 * (rp_dataset_load_folder("list:DIR", "train"), src/data/folder.c), DIR/train.txt being a link
 * to a memory file. Input byte 0 bit 0 sets skip_bad; the rest is the list file.
 *
 * The result is checked against the format as docs/data.md and data.h state it, read here
 * independently: lines end at '\n'; a line's trailing spaces, tabs and '\r' and its leading
 * spaces and tabs do not count; an empty line or one starting with '#' is skipped; otherwise
 * the label is the last field after a space or tab, decimal digits only, below
 * RP_FOLDER_MAX_CLASSES, and the path is what comes before it, without the spaces between
 * (relative to DIR unless it starts with '/'). A line without a path and a label, with another
 * label, or with a NUL byte, is bad: without skip_bad the load fails naming the file and that
 * line's number; with it the line is left out. A path too long to join fails the load either
 * way. So does a list with no sample.
 *
 * On success the samples are those lines' paths and labels in order, and num_classes is one
 * above the largest label. An error leaves no dataset and names the list file.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/folder_internal.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_file list;
static char dir[4096], list_path[4096 + 16], spec[4096 + 8];

static void setup(void)
{
    snprintf(dir, sizeof dir, "%s", fuzz_dir_create("list"));
    fuzz_file_open(&list, "train.txt");
    fuzz_dir_link(dir, "train.txt", &list);
    snprintf(list_path, sizeof list_path, "%s/train.txt", dir);
    snprintf(spec, sizeof spec, "list:%s", dir);
    rp_log_set_level(RP_LOG_ERROR); /* skip_bad's warnings, one per bad line */
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* What one line means: skipped, a sample, bad, or a path too long to join. */
enum { LINE_SKIP, LINE_SAMPLE, LINE_BAD, LINE_LONG };

static int classify(const char *p, size_t len, char *path, size_t path_size, long *label)
{
    if (memchr(p, '\0', len)) return LINE_BAD;
    while (len > 0 && (blank(p[len - 1]) || p[len - 1] == '\r'))
        len--;
    size_t b = 0;
    while (b < len && blank(p[b]))
        b++;
    if (b == len || p[b] == '#') return LINE_SKIP;
    size_t lab = len;
    while (lab > b && !blank(p[lab - 1]))
        lab--;
    if (lab == b) return LINE_BAD; /* one field: no path, or no label */
    long v = 0;
    for (size_t i = lab; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return LINE_BAD;
        v = v * 10 + (p[i] - '0');
        if (v >= RP_FOLDER_MAX_CLASSES) return LINE_BAD;
    }
    size_t end = lab;
    while (end > b && blank(p[end - 1]))
        end--;
    int w = p[b] == '/' ? snprintf(path, path_size, "%.*s", (int)(end - b), p + b)
                        : snprintf(path, path_size, "%s/%.*s", dir, (int)(end - b), p + b);
    if (w < 0 || (size_t)w >= 4096) return LINE_LONG;
    *label = v;
    return LINE_SAMPLE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    if (size < 1) return 0;
    const bool skip_bad = data[0] & 1;
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;
    fuzz_file_set(&list, data + 1, n);

    rp_folder_config cfg = rp_folder_config_default();
    cfg.image_size = 8;
    cfg.threads = 1;
    cfg.skip_bad = skip_bad;
    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_folder(&ds, spec, "train", &cfg);
    if (s != RP_OK) FUZZ_EXPECT(ds == NULL, "an error left the dataset set");

    /* Walk the lines as the format says, and compare as we go. */
    static char want[8192 + 4096], got[8192];
    int64_t lineno = 0, k = 0; /* k: the good lines so far */
    long max_label = -1;
    size_t at = 0;
    while (at < n) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t len = nl ? (size_t)(nl - (text + at)) : n - at;
        lineno++;
        long label = -1;
        int kind = classify(text + at, len, want, sizeof want, &label);
        at += len + (nl ? 1 : 0);
        if (kind == LINE_SKIP || (kind == LINE_BAD && skip_bad)) continue;
        if (kind != LINE_SAMPLE) {
            char line[64];
            snprintf(line, sizeof line, "line %lld", (long long)lineno);
            FUZZ_EXPECT(s == RP_ERR_FORMAT, "line %lld is %s, yet the load gave %s",
                        (long long)lineno, kind == LINE_BAD ? "bad" : "too long",
                        rp_status_name(s));
            FUZZ_EXPECT(strstr(rp_last_error(), list_path) && strstr(rp_last_error(), line),
                        "the error does not name the file and %s", line);
            return 0;
        }
        if (s == RP_OK) {
            FUZZ_EXPECT(k < ds->n, "line %lld's sample is missing (%lld samples)",
                        (long long)lineno, (long long)ds->n);
            FUZZ_EXPECT(rp_dataset_sample_path(ds, k, got, sizeof got, NULL) == RP_OK &&
                            strcmp(got, want) == 0,
                        "line %lld: sample %lld is \"%s\", not \"%s\"", (long long)lineno,
                        (long long)k, got, want);
            FUZZ_EXPECT(ds->labels[k] == label, "line %lld: label %d, not %ld", (long long)lineno,
                        ds->labels[k], label);
        }
        if (label > max_label) max_label = label;
        k++;
    }
    if (s != RP_OK) {
        /* No line was bad or too long: only a list without a sample may fail. */
        FUZZ_EXPECT(s == RP_ERR_FORMAT && k == 0, "the load gave %s for a list of %lld samples",
                    rp_status_name(s), (long long)k);
        FUZZ_EXPECT(strstr(rp_last_error(), list_path) != NULL, "the error does not name %s",
                    list_path);
        return 0;
    }
    FUZZ_EXPECT(ds->n == k, "%lld samples from %lld good lines", (long long)ds->n, (long long)k);
    FUZZ_EXPECT(ds->num_classes == max_label + 1, "%d classes, largest label %ld", ds->num_classes,
                max_label);
    rp_dataset_destroy(ds);
    return 0;
}
