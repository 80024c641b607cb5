/*
 * folder_tar.c - WebDataset shards: tar files whose adjacent members sharing
 * a key (NNNNNN.jpg, NNNNNN.cls) make one sample.
 *
 * The reader is written here rather than taken from libarchive because it
 * needs very little and something libarchive's streaming interface does not
 * give: each member's byte offset in the shard, so that a sample can later be
 * read with one pread() in any order (the loader's per-epoch permutation,
 * resumable at any batch). The ustar format is 512-byte header blocks, each
 * followed by the member's data padded to 512; the index walks the headers
 * once, front to back, reading each .cls label on the way. Understood: ustar
 * and GNU headers (the 155-byte name prefix, base-256 sizes, GNU long names)
 * and pax extended headers (path and size records). Each header's checksum is
 * verified, and a member whose data runs past the end of the file (a shard cut
 * short by a failed copy) is an error, or under skip_bad the end of that shard.
 *
 * Grouping follows webdataset's tariterators.py: the key is the name up to the
 * first dot of its last component, the suffix the rest, lower-cased; a new
 * sample starts when the key changes; a suffix repeated within a sample is an
 * error; names without such a dot are skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/folder_internal.h"

#define TAR_BLOCK    512
#define TAR_NAME_MAX 4096

/* An octal field, or GNU's base-256 when the first byte's high bit is set; -1 if malformed. */
static int64_t tar_number(const uint8_t *p, int len)
{
    if (p[0] & 0x80) {
        int64_t v = p[0] & 0x3F;
        for (int i = 1; i < len; i++) {
            if (v > (INT64_MAX >> 8)) return -1;
            v = v << 8 | p[i];
        }
        return v;
    }
    int i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\0'))
        i++;
    int64_t v = 0;
    bool any = false;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3)) return -1;
        v = v * 8 + (p[i] - '0');
        any = true;
    }
    for (; i < len; i++)
        if (p[i] != ' ' && p[i] != '\0') return -1;
    return any ? v : 0;
}

static bool tar_checksum_ok(const uint8_t *h)
{
    int64_t want = tar_number(h + 148, 8);
    int64_t u = 0, s = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        int b = i >= 148 && i < 156 ? ' ' : h[i];
        u += b;
        s += (int8_t)(i >= 148 && i < 156 ? ' ' : h[i]);
    }
    return want >= 0 && (want == u || want == s); /* some old tars summed signed bytes */
}

/* The sample being gathered: consecutive members with one key. */
typedef struct tar_sample {
    char key[TAR_NAME_MAX];
    char img_name[TAR_NAME_MAX];
    int64_t img_off, img_size;
    int label; /* -1: no .cls yet */
    bool has_img, active;
    char suffixes[512]; /* "|jpg|cls|": for the duplicate check */
} tar_sample;

typedef struct tar_ctx {
    rp_image_source *src;
    int32_t **labels;
    int64_t *n, *cap;
    const char *shard_path;
    int shard;
    int fd;
    int64_t dropped;
} tar_ctx;

/* Ends the sample being gathered: it needs an image and a label. */
static rp_status tar_finish(tar_ctx *t, tar_sample *s)
{
    if (!s->active) return RP_OK;
    s->active = false;
    const char *why = !s->has_img    ? "has no .jpg, .jpeg or .png member"
                      : s->label < 0 ? "has no .cls member (its label)"
                                     : NULL;
    if (why) {
        if (!t->src->cfg.skip_bad)
            return RP_ERROR(RP_ERR_FORMAT, "image shards: %s: sample \"%s\" %s", t->shard_path,
                            s->key, why);
        t->dropped++;
        rp_warn("image shards: %s: sample \"%s\" %s; skipped", t->shard_path, s->key, why);
        return RP_OK;
    }
    return folder_add_sample(t->src, s->img_name, s->label, t->shard, s->img_off, s->img_size,
                             t->labels, t->n, t->cap);
}

static rp_status tar_read(tar_ctx *t, void *buf, size_t len, int64_t off, size_t *got)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(t->fd, (char *)buf + done, len - done, (off_t)(off + (int64_t)done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return RP_ERROR(RP_ERR_IO, "image shards: cannot read %s: %s", t->shard_path,
                            strerror(errno));
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    return RP_OK;
}

/* One regular member: grouped into the current sample by its key. */
static rp_status tar_member(tar_ctx *t, tar_sample *s, const char *name, int64_t off, int64_t size)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base) return RP_OK; /* no key.suffix: not part of a sample */
    size_t klen = (size_t)(dot - name);
    char suffix[64];
    size_t sl = strlen(dot + 1);
    if (sl >= sizeof suffix) return RP_OK;
    for (size_t i = 0; i <= sl; i++)
        suffix[i] = (char)((dot[1 + i] >= 'A' && dot[1 + i] <= 'Z') ? dot[1 + i] + 32 : dot[1 + i]);
    if (!s->active || strlen(s->key) != klen || strncmp(s->key, name, klen) != 0) {
        RP_CHECK(tar_finish(t, s));
        memset(s, 0, sizeof *s);
        memcpy(s->key, name, klen);
        s->key[klen] = '\0';
        s->label = -1;
        s->active = true;
        snprintf(s->suffixes, sizeof s->suffixes, "|");
    }
    char tag[80];
    snprintf(tag, sizeof tag, "|%s|", suffix);
    if (strstr(s->suffixes, tag))
        return RP_ERROR(RP_ERR_FORMAT,
                        "image shards: %s: duplicate file name in tar file: %s (sample \"%s\" "
                        "has two .%s members)",
                        t->shard_path, name, s->key, suffix);
    if (strlen(s->suffixes) + strlen(suffix) + 2 < sizeof s->suffixes) {
        strcat(s->suffixes, suffix);
        strcat(s->suffixes, "|");
    }
    if ((!strcmp(suffix, "jpg") || !strcmp(suffix, "jpeg") || !strcmp(suffix, "png")) &&
        !s->has_img) {
        s->has_img = true;
        s->img_off = off;
        s->img_size = size;
        snprintf(s->img_name, sizeof s->img_name, "%s", name);
    } else if (!strcmp(suffix, "cls")) {
        char text[64];
        size_t got = 0;
        if (size > 32)
            return RP_ERROR(RP_ERR_FORMAT, "image shards: %s: %s holds %lld bytes, not a label",
                            t->shard_path, name, (long long)size);
        RP_CHECK(tar_read(t, text, (size_t)size, off, &got));
        text[got] = '\0';
        char *end;
        errno = 0;
        long v = strtol(text, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')
            end++;
        if (errno || end == text || *end || v < 0 || v >= RP_FOLDER_MAX_CLASSES)
            return RP_ERROR(RP_ERR_FORMAT,
                            "image shards: %s: %s holds \"%.32s\", not a label in [0, %d)",
                            t->shard_path, name, text, RP_FOLDER_MAX_CLASSES);
        s->label = (int)v;
    }
    return RP_OK;
}

/* Walks one shard's headers. */
static rp_status tar_shard(tar_ctx *t)
{
    rp_status status = RP_OK;
    struct stat st;
    if (fstat(t->fd, &st) != 0)
        return RP_ERROR(RP_ERR_IO, "image shards: cannot stat %s: %s", t->shard_path,
                        strerror(errno));
    int64_t file_size = (int64_t)st.st_size;
    tar_sample *s = calloc(1, sizeof *s);
    char *long_name = NULL;
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "image shards: cannot allocate a sample");
    char name[TAR_NAME_MAX];
    int64_t pax_size = -1;
    uint8_t h[TAR_BLOCK];
    int64_t off = 0;
    for (;;) {
        size_t got = 0;
        RP_TRY(tar_read(t, h, TAR_BLOCK, off, &got));
        if (got == 0) break; /* the end without the two zero blocks: accepted, as tar does */
        if (got < TAR_BLOCK) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "image shards: %s is truncated: a header at byte %lld is cut "
                              "short (%zu of 512 bytes)",
                              t->shard_path, (long long)off, got);
            goto truncated;
        }
        bool zero = true;
        for (int i = 0; i < TAR_BLOCK && zero; i++)
            zero = h[i] == 0;
        if (zero) break;
        if (!tar_checksum_ok(h)) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "image shards: %s: the header at byte %lld has a bad checksum: not "
                              "a tar file, or a corrupt one",
                              t->shard_path, (long long)off);
            goto cleanup;
        }
        int64_t size = tar_number(h + 124, 12);
        if (pax_size >= 0) size = pax_size;
        if (size < 0) {
            status = RP_ERROR(RP_ERR_FORMAT, "image shards: %s: bad size field at byte %lld",
                              t->shard_path, (long long)off);
            goto cleanup;
        }
        int64_t data = off + TAR_BLOCK;
        if (size > file_size - data) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "image shards: %s is truncated: member \"%.100s\" needs %lld bytes "
                              "at byte %lld, but the file ends at %lld",
                              t->shard_path, (const char *)h, (long long)size, (long long)data,
                              (long long)file_size);
            goto truncated;
        }
        char type = (char)h[156];
        if (long_name)
            snprintf(name, sizeof name, "%s", long_name);
        else if (h[345] && !memcmp(h + 257, "ustar", 5))
            snprintf(name, sizeof name, "%.155s/%.100s", (const char *)h + 345, (const char *)h);
        else
            snprintf(name, sizeof name, "%.100s", (const char *)h);
        if (type == 'x' || type == 'L') {
            /* The next member's name (GNU) or pax records "LEN key=value\n". */
            if (size > 1 << 20) {
                status = RP_ERROR(RP_ERR_FORMAT, "image shards: %s: a %lld-byte extended header",
                                  t->shard_path, (long long)size);
                goto cleanup;
            }
            char *text = malloc((size_t)size + 1);
            if (!text) {
                status = RP_ERROR(RP_ERR_NOMEM, "image shards: cannot read an extended header");
                goto cleanup;
            }
            status = tar_read(t, text, (size_t)size, data, &got);
            text[status == RP_OK ? got : 0] = '\0';
            if (status != RP_OK) {
                free(text);
                goto cleanup;
            }
            if (type == 'L') {
                free(long_name);
                long_name = text;
            } else {
                for (char *p = text; p < text + got;) {
                    char *sp = strchr(p, ' '), *end;
                    long len = strtol(p, &end, 10);
                    if (!sp || len <= 0 || p + len > text + got) break;
                    char *rec = sp + 1, *stop = p + len - 1; /* the '\n' */
                    if (!strncmp(rec, "path=", 5)) {
                        free(long_name);
                        long_name = strndup(rec + 5, (size_t)(stop - rec - 5));
                    } else if (!strncmp(rec, "size=", 5)) {
                        pax_size = strtoll(rec + 5, NULL, 10);
                    }
                    p += len;
                }
                free(text);
            }
            off = data + (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
            continue;
        }
        if (type == '0' || type == '\0' || type == '7') RP_TRY(tar_member(t, s, name, data, size));
        free(long_name);
        long_name = NULL;
        pax_size = -1;
        off = data + (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    }
    status = tar_finish(t, s);
    goto cleanup;
truncated:
    if (t->src->cfg.skip_bad) {
        /* What came before the cut is sound; the sample being gathered may not be complete. */
        rp_warn("%s; the rest of the shard is skipped", rp_last_error());
        status = tar_finish(t, s); /* kept if whole, else dropped with a warning */
    }
cleanup:
    free(long_name);
    free(s);
    return status;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

rp_status folder_tar_index(rp_image_source *src, const char *dir, int32_t **labels, int64_t *n,
                           int64_t *cap)
{
    rp_status status = RP_OK;
    char **names = NULL;
    size_t count = 0, names_cap = 0;
    DIR *d = opendir(dir);
    if (!d)
        return RP_ERROR(RP_ERR_IO, "image shards: cannot open directory %s: %s", dir,
                        strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".tar")) continue;
        if (count == names_cap) {
            size_t c = names_cap ? names_cap * 2 : 16;
            char **p = realloc(names, c * sizeof *p);
            if (!p) {
                status = RP_ERROR(RP_ERR_NOMEM, "image shards: cannot list %s", dir);
                goto cleanup;
            }
            names = p;
            names_cap = c;
        }
        names[count] = strdup(e->d_name);
        if (!names[count]) {
            status = RP_ERROR(RP_ERR_NOMEM, "image shards: cannot list %s", dir);
            goto cleanup;
        }
        count++;
    }
    if (count == 0) {
        status = RP_ERROR(RP_ERR_FORMAT, "image shards: %s holds no .tar file", dir);
        goto cleanup;
    }
    qsort(names, count, sizeof *names, cmp_str);
    src->shards = calloc(count, sizeof *src->shards);
    if (!src->shards) {
        status = RP_ERROR(RP_ERR_NOMEM, "image shards: cannot allocate %zu shards", count);
        goto cleanup;
    }
    for (size_t i = 0; i < count; i++)
        src->shards[i].fd = -1;
    src->nshards = (int)count;
    for (size_t i = 0; i < count; i++) {
        char path[4096];
        int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (w < 0 || (size_t)w >= sizeof path) {
            status =
                RP_ERROR(RP_ERR_INVALID, "image shards: the path %s/%s is too long", dir, names[i]);
            goto cleanup;
        }
        src->shards[i].path = strdup(path);
        if (!src->shards[i].path) {
            status = RP_ERROR(RP_ERR_NOMEM, "image shards: cannot copy a path");
            goto cleanup;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            status = RP_ERROR(RP_ERR_IO, "image shards: cannot open %s: %s", path, strerror(errno));
            goto cleanup;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            status = RP_ERROR(RP_ERR_IO, "image shards: %s is not a regular file", path);
            goto cleanup;
        }
        fcntl(fd, F_SETFL, 0);
        src->shards[i].fd = fd;
        tar_ctx t = {.src = src,
                     .labels = labels,
                     .n = n,
                     .cap = cap,
                     .shard_path = src->shards[i].path,
                     .shard = (int)i,
                     .fd = fd};
        RP_TRY(tar_shard(&t));
    }
    if (*n == 0)
        status = RP_ERROR(RP_ERR_FORMAT, "image shards: the shards in %s hold no sample", dir);
cleanup:
    if (d) closedir(d);
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
    return status;
}
