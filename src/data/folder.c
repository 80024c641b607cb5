/*
 * folder.c - the index of a dataset of image files: an ImageFolder tree, a
 * list file or WebDataset shards (folder_tar.c), read at load; the images
 * themselves are decoded batch by batch (folder_pool.c).
 *
 * The tree is ordered exactly as torchvision 0.14's ImageFolder orders it
 * (datasets/folder.py: find_classes, make_dataset), so that label i and
 * sample k mean the same here and there: classes are the root's
 * subdirectories (symbolic links followed, hidden ones included) sorted by
 * name; a class's samples come from sorted(os.walk(class_dir,
 * followlinks=True)), i.e. every directory under it sorted by its whole path
 * (so "a-b" comes before "a/x": '-' < '/'), each directory's files sorted by
 * name, kept when the lower-cased name ends in an image extension. Python
 * compares str by code point, which strcmp on UTF-8 bytes reproduces.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/folder_internal.h"

rp_folder_config rp_folder_config_default(void)
{
    rp_folder_config c;
    memset(&c, 0, sizeof c);
    c.image_size = 224;
    c.resize_size = 0; /* image_size * 256 / 224: 256 */
    c.scale_min = 0.08f;
    c.scale_max = 1.0f;
    c.ratio_min = 3.0f / 4.0f;
    c.ratio_max = 4.0f / 3.0f;
    /* torchvision's references/classification/presets.py (and _presets.py). */
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(c.mean, mean, sizeof mean);
    memcpy(c.std, std, sizeof std);
    c.threads = 2;
    c.skip_bad = false;
    c.dct_scaling = true;
    return c;
}

static rp_status config_check(const rp_folder_config *c)
{
    if (c->image_size < 1 || c->image_size > 4096)
        return RP_ERROR(RP_ERR_INVALID, "image folder: image_size %d is outside [1, 4096]",
                        c->image_size);
    if ((c->resize_size != 0 && c->resize_size < c->image_size) || c->resize_size > 65535 ||
        c->resize_size < 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "image folder: resize_size %d must be at least image_size %d (the centre "
                        "crop is cut from the resized image) and at most 65535",
                        c->resize_size, c->image_size);
    if (!(c->scale_min > 0 && c->scale_min <= c->scale_max && c->scale_max <= 1))
        return RP_ERROR(RP_ERR_INVALID,
                        "image folder: crop scale (%g, %g) must satisfy 0 < min <= max <= 1",
                        (double)c->scale_min, (double)c->scale_max);
    if (!(c->ratio_min > 0 && c->ratio_min <= c->ratio_max && c->ratio_max < 1e6))
        return RP_ERROR(RP_ERR_INVALID,
                        "image folder: crop ratio (%g, %g) must satisfy 0 < min <= max",
                        (double)c->ratio_min, (double)c->ratio_max);
    for (int k = 0; k < 3; k++)
        if (!(c->std[k] > 0) || c->mean[k] != c->mean[k] || c->std[k] > 1e30f)
            return RP_ERROR(RP_ERR_INVALID,
                            "image folder: mean[%d] %g / std[%d] %g: the std must be positive "
                            "and both finite",
                            k, (double)c->mean[k], k, (double)c->std[k]);
    if (c->threads < 1 || c->threads > 256)
        return RP_ERROR(RP_ERR_INVALID, "image folder: threads %d is outside [1, 256]", c->threads);
    return RP_OK;
}

/* ---- an ImageFolder tree ---------------------------------------------------- */

/* A growable list of malloc'ed strings. */
typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static rp_status strlist_add(strlist *l, const char *s)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 64;
        char **p = realloc(l->v, c * sizeof *p);
        if (!p) return RP_ERROR(RP_ERR_NOMEM, "image folder: cannot grow a list of names");
        l->v = p;
        l->cap = c;
    }
    l->v[l->n] = strdup(s);
    if (!l->v[l->n]) return RP_ERROR(RP_ERR_NOMEM, "image folder: cannot copy a name");
    l->n++;
    return RP_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with_ci(const char *name, const char *ext)
{
    size_t n = strlen(name), e = strlen(ext);
    if (n < e) return false;
    for (size_t i = 0; i < e; i++)
        if (tolower((unsigned char)name[n - e + i]) != ext[i]) return false;
    return true;
}

/* Extensions decoded here, and the others torchvision's IMG_EXTENSIONS has. */
static bool decodable(const char *name)
{
    return ends_with_ci(name, ".jpg") || ends_with_ci(name, ".jpeg") || ends_with_ci(name, ".png");
}

static bool torchvision_only(const char *name)
{
    static const char *const ext[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (ends_with_ci(name, ext[i])) return true;
    return false;
}

/* Directories of the current walk's path, to stop at a symbolic-link loop. */
typedef struct ancestor {
    dev_t dev;
    ino_t ino;
} ancestor;

#define WALK_MAX_DEPTH 64

static rp_status path_join(char *buf, size_t size, const char *a, const char *b)
{
    int n = snprintf(buf, size, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= size)
        return RP_ERROR(RP_ERR_INVALID, "image folder: the path %s/%s is too long", a, b);
    return RP_OK;
}

/*
 * os.walk(dir, followlinks=True): appends every directory under `dir` (itself
 * included) to dirs. A directory that is its own ancestor (a link loop) is not
 * entered again.
 */
static rp_status walk_dirs(const char *dir, strlist *dirs, ancestor *up, int depth)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return RP_ERROR(RP_ERR_IO, "image folder: cannot open directory %s: %s", dir,
                        strerror(errno));
    for (int i = 0; i < depth; i++)
        if (up[i].dev == st.st_dev && up[i].ino == st.st_ino) return RP_OK;
    if (depth >= WALK_MAX_DEPTH)
        return RP_ERROR(RP_ERR_FORMAT, "image folder: %s is nested over %d directories deep", dir,
                        WALK_MAX_DEPTH);
    up[depth].dev = st.st_dev;
    up[depth].ino = st.st_ino;
    RP_CHECK(strlist_add(dirs, dir));
    DIR *d = opendir(dir);
    if (!d)
        return RP_ERROR(RP_ERR_IO, "image folder: cannot open directory %s: %s", dir,
                        strerror(errno));
    strlist subs = {0};
    rp_status status = RP_OK;
    char path[4096];
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        RP_TRY(path_join(path, sizeof path, dir, e->d_name));
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) RP_TRY(strlist_add(&subs, path));
    }
    for (size_t i = 0; i < subs.n; i++)
        RP_TRY(walk_dirs(subs.v[i], dirs, up, depth + 1));
cleanup:
    closedir(d);
    strlist_free(&subs);
    return status;
}

/*
 * The entries of `dir`, sorted: its subdirectories (links followed) when `want_dirs` (the class
 * directories), else its other entries (os.walk's files: broken links included).
 */
static rp_status list_entries(const char *dir, bool want_dirs, strlist *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return RP_ERROR(RP_ERR_IO, "image folder: cannot open directory %s: %s", dir,
                        strerror(errno));
    rp_status status = RP_OK;
    char path[4096];
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        RP_TRY(path_join(path, sizeof path, dir, e->d_name));
        struct stat st;
        bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        if (is_dir == want_dirs) RP_TRY(strlist_add(out, e->d_name));
    }
    if (out->n > 1) qsort(out->v, out->n, sizeof *out->v, cmp_str); /* (v is NULL when empty) */
cleanup:
    closedir(d);
    return status;
}

/*
 * Indexes the tree at `root` (DIR/<split>) with the classes `train_classes`
 * (the train split's; the split's own when NULL).
 */
static rp_status tree_index(rp_image_source *src, const char *root, const char *train_root,
                            int32_t **labels, int64_t *n, int64_t *cap)
{
    rp_status status = RP_OK;
    strlist classes = {0}, here = {0}, dirs = {0}, files = {0};
    int64_t others = 0;
    ancestor up[WALK_MAX_DEPTH];
    char cdir[4096], path[4096];

    RP_TRY(list_entries(train_root, true, &classes));
    if (classes.n == 0) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "image folder: found no class directory in %s (the layout is "
                          "%s/<class>/<image>)",
                          train_root, train_root);
        goto cleanup;
    }
    if (classes.n > RP_FOLDER_MAX_CLASSES) {
        status = RP_ERROR(RP_ERR_FORMAT, "image folder: %s has %zu classes, over the %d allowed",
                          train_root, classes.n, RP_FOLDER_MAX_CLASSES);
        goto cleanup;
    }
    if (strcmp(root, train_root)) {
        /* Another split: its class directories must be train's (a missing one is fine). */
        RP_TRY(list_entries(root, true, &here));
        for (size_t i = 0; i < here.n; i++)
            if (!bsearch(&here.v[i], classes.v, classes.n, sizeof *classes.v, cmp_str)) {
                status = RP_ERROR(RP_ERR_FORMAT,
                                  "image folder: %s/%s is a class the training split %s does "
                                  "not have: labels follow train's sorted classes",
                                  root, here.v[i], train_root);
                goto cleanup;
            }
    }
    src->classes = calloc(classes.n, sizeof *src->classes);
    if (!src->classes) {
        status = RP_ERROR(RP_ERR_NOMEM, "image folder: cannot allocate %zu class names", classes.n);
        goto cleanup;
    }
    src->nclasses = (int)classes.n;
    for (size_t c = 0; c < classes.n; c++) {
        src->classes[c] = classes.v[c];
        classes.v[c] = NULL;
    }
    for (int c = 0; c < src->nclasses; c++) {
        RP_TRY(path_join(cdir, sizeof cdir, root, src->classes[c]));
        struct stat st;
        if (stat(cdir, &st) != 0) continue; /* a class this split lacks */
        strlist_free(&dirs);
        RP_TRY(walk_dirs(cdir, &dirs, up, 0));
        qsort(dirs.v, dirs.n, sizeof *dirs.v, cmp_str);
        int64_t before = *n;
        for (size_t k = 0; k < dirs.n; k++) {
            strlist_free(&files);
            RP_TRY(list_entries(dirs.v[k], false, &files));
            for (size_t f = 0; f < files.n; f++) {
                if (!decodable(files.v[f])) {
                    others += torchvision_only(files.v[f]);
                    continue;
                }
                RP_TRY(path_join(path, sizeof path, dirs.v[k], files.v[f]));
                RP_TRY(folder_add_sample(src, path, c, 0, 0, 0, labels, n, cap));
            }
        }
        if (*n == before) {
            if (!src->cfg.skip_bad) {
                status = RP_ERROR(RP_ERR_FORMAT,
                                  "image folder: class directory %s holds no .jpg, .jpeg or .png "
                                  "file (torchvision stops here too; --skip-bad leaves the class "
                                  "empty and goes on)",
                                  cdir);
                goto cleanup;
            }
            rp_warn("image folder: class directory %s holds no image file; its label %d has no "
                    "samples",
                    cdir, c);
        }
    }
    if (others)
        rp_warn("image folder: %lld files under %s in formats torchvision reads but replicator "
                "does not (.bmp, .ppm, .pgm, .tif, .tiff, .webp) were left out",
                (long long)others, root);
cleanup:
    strlist_free(&files);
    strlist_free(&dirs);
    strlist_free(&here);
    strlist_free(&classes);
    return status;
}

/* ---- a list file -------------------------------------------------------------- */

static rp_status list_index(rp_image_source *src, const char *file, const char *dir,
                            int32_t **labels, int64_t *n, int64_t *cap, int *max_label)
{
    FILE *f = fopen(file, "r");
    if (!f) return RP_ERROR(RP_ERR_IO, "image list: cannot open %s: %s", file, strerror(errno));
    rp_status status = RP_OK;
    char *line = NULL, path[4096];
    size_t line_cap = 0;
    ssize_t len;
    int64_t lineno = 0, dropped = 0;
    *max_label = -1;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        /* A NUL would end the line early for what follows, hiding the rest of it (or all of
           it, as a blank line): a corrupt or binary file, so the line is bad. */
        bool nul = memchr(line, '\0', (size_t)len) != NULL;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                           line[len - 1] == '\t'))
            line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!nul && (!*p || *p == '#')) continue;
        /* The label is the last field, so a path may hold spaces. */
        char *sep = p + strlen(p);
        while (sep > p && sep[-1] != ' ' && sep[-1] != '\t')
            sep--;
        char *lab = sep, *end = NULL;
        while (sep > p && (sep[-1] == ' ' || sep[-1] == '\t'))
            sep--;
        /* Decimal digits only: strtol would also take a sign, and "" as 0. */
        bool digits = *lab != '\0';
        for (const char *q = lab; *q && digits; q++)
            digits = *q >= '0' && *q <= '9';
        errno = 0;
        long v = sep > p && digits ? strtol(lab, &end, 10) : -1;
        const char *why = nul        ? "the line holds a NUL byte (a binary file?)"
                          : sep == p ? "no label after the path"
                          : !digits  ? "the label is not a decimal number >= 0"
                          : errno || v >= RP_FOLDER_MAX_CLASSES ? "the label is too large"
                                                                : NULL;
        if (why) {
            if (!src->cfg.skip_bad) {
                status = RP_ERROR(RP_ERR_FORMAT,
                                  "image list: %s line %lld: %s (each line is \"path label\")",
                                  file, (long long)lineno, why);
                goto cleanup;
            }
            dropped++;
            rp_warn("image list: %s line %lld: %s; line skipped", file, (long long)lineno, why);
            continue;
        }
        *sep = '\0';
        int w = p[0] == '/' ? snprintf(path, sizeof path, "%s", p)
                            : snprintf(path, sizeof path, "%s/%s", dir, p);
        if (w < 0 || (size_t)w >= sizeof path) {
            status = RP_ERROR(RP_ERR_FORMAT, "image list: %s line %lld: the path is too long", file,
                              (long long)lineno);
            goto cleanup;
        }
        RP_TRY(folder_add_sample(src, path, (int32_t)v, 0, 0, 0, labels, n, cap));
        if (v > *max_label) *max_label = (int)v;
    }
    if (ferror(f)) {
        status = RP_ERROR(RP_ERR_IO, "image list: cannot read %s: %s", file, strerror(errno));
        goto cleanup;
    }
    if (*n == 0) {
        status = RP_ERROR(RP_ERR_FORMAT, "image list: %s lists no image%s", file,
                          dropped ? " (every line was bad)" : "");
        goto cleanup;
    }
cleanup:
    free(line);
    fclose(f);
    return status;
}

/* ---- lifetime ------------------------------------------------------------------ */

void folder_source_destroy(rp_image_source *src)
{
    if (!src) return;
    folder_pool_stop(&src->pool);
    for (int i = 0; i < src->nshards; i++) {
        if (src->shards[i].fd >= 0) close(src->shards[i].fd);
        free(src->shards[i].path);
    }
    free(src->shards);
    for (int i = 0; i < src->nclasses; i++)
        free(src->classes[i]);
    free(src->classes);
    free(src->bad);
    free(src->size);
    free(src->offset);
    free(src->shard);
    free(src->name_off);
    free(src->names);
    free(src);
}

/* The last path component of `dir`, for the dataset's name. */
static const char *base_name(const char *dir, char *buf, size_t size)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    snprintf(buf, size, "%.*s", (int)(n - b), dir + b);
    return buf;
}

static rp_status dir_exists(const char *path, const char *what, const char *layout)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return RP_ERROR(RP_ERR_IO, "%s: %s: %s (the layout is %s)", what, path, strerror(errno),
                        layout);
    if (!S_ISDIR(st.st_mode))
        return RP_ERROR(RP_ERR_IO, "%s: %s is not a directory (the layout is %s)", what, path,
                        layout);
    return RP_OK;
}

rp_status rp_dataset_load_folder(rp_dataset **ds, const char *spec, const char *split,
                                 const rp_folder_config *cfg)
{
    rp_status status = RP_OK;
    rp_dataset *out = NULL;
    rp_image_source *src = NULL;
    int32_t *labels = NULL;
    int64_t n = 0, cap = 0;
    char root[4096], train_root[4096], name[64];

    if (!ds) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_folder: ds is NULL");
    *ds = NULL;
    if (!spec || !split || !cfg)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_folder: %s is NULL",
                        !spec    ? "spec"
                        : !split ? "split"
                                 : "cfg");
    const char *sp = !strcmp(split, "train")                           ? "train"
                     : !strcmp(split, "val") || !strcmp(split, "test") ? "val"
                                                                       : NULL;
    if (!sp)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_load_folder: unknown split \"%s\" (train, val or test)", split);
    RP_CHECK(config_check(cfg));
    int kind = FOLDER_TREE;
    const char *dir = spec;
    if (!strncmp(spec, "list:", 5)) {
        kind = FOLDER_LIST;
        dir = spec + 5;
    } else if (!strncmp(spec, "tar:", 4)) {
        kind = FOLDER_TAR;
        dir = spec + 4;
    }
    if (!*dir)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_folder: \"%s\" names no directory", spec);

    src = calloc(1, sizeof *src);
    out = rp_calloc(sizeof *out);
    if (!src || !out) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_dataset_load_folder: cannot allocate the dataset");
        goto cleanup;
    }
    src->cfg = *cfg;
    if (src->cfg.resize_size == 0) src->cfg.resize_size = (cfg->image_size * 256 + 112) / 224;
    src->kind = kind;
    RP_TRY(folder_pool_init(&src->pool));
    int num_classes = 0;
    if (kind == FOLDER_TREE) {
        const char *layout = "DIR/train/<class>/<image> and DIR/val/<class>/<image>";
        RP_TRY(path_join(root, sizeof root, dir, sp));
        RP_TRY(path_join(train_root, sizeof train_root, dir, "train"));
        RP_TRY(dir_exists(train_root, "image folder", layout));
        RP_TRY(dir_exists(root, "image folder", layout));
        RP_TRY(tree_index(src, root, train_root, &labels, &n, &cap));
        num_classes = src->nclasses;
        if (n == 0) {
            status = RP_ERROR(RP_ERR_FORMAT, "image folder: %s holds no image file", root);
            goto cleanup;
        }
    } else if (kind == FOLDER_LIST) {
        int max_label = -1;
        char file[4096];
        int w = snprintf(file, sizeof file, "%s/%s.txt", dir, sp);
        if (w < 0 || (size_t)w >= sizeof file) {
            status = RP_ERROR(RP_ERR_INVALID, "image list: the path %s is too long", dir);
            goto cleanup;
        }
        RP_TRY(list_index(src, file, dir, &labels, &n, &cap, &max_label));
        num_classes = max_label + 1;
    } else {
        RP_TRY(path_join(root, sizeof root, dir, sp));
        RP_TRY(dir_exists(root, "image shards", "DIR/train/*.tar and DIR/val/*.tar"));
        RP_TRY(folder_tar_index(src, root, &labels, &n, &cap));
        for (int64_t i = 0; i < n; i++)
            if (labels[i] >= num_classes) num_classes = labels[i] + 1;
    }
    src->bad = calloc((size_t)n, 1);
    if (!src->bad) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_dataset_load_folder: cannot allocate %lld flags",
                          (long long)n);
        goto cleanup;
    }
    out->n = n;
    out->h = out->w = cfg->image_size;
    out->c = 3;
    out->num_classes = num_classes;
    out->labels = rp_alloc((size_t)n * sizeof *out->labels);
    if (!out->labels) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_dataset_load_folder: cannot allocate %lld labels",
                          (long long)n);
        goto cleanup;
    }
    memcpy(out->labels, labels, (size_t)n * sizeof *labels);
    snprintf(out->name, sizeof out->name, "%.40s/%s", base_name(dir, name, sizeof name), sp);
    out->source = src;
    src = NULL;
    *ds = out;
    out = NULL;
cleanup:
    free(labels);
    folder_source_destroy(src);
    if (out) rp_free(out->labels);
    rp_free(out);
    return status;
}

rp_status rp_dataset_sample_path(const rp_dataset *ds, int64_t i, char *buf, size_t size,
                                 const char **class_name)
{
    if (class_name) *class_name = NULL;
    if (!ds || !ds->source || !buf || size == 0 || i < 0 || i >= ds->n)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_sample_path: no such sample %lld (a dataset of image files "
                        "and a buffer are needed)",
                        (long long)i);
    const rp_image_source *src = ds->source;
    folder_sample_describe(src, i, buf, size);
    if (class_name && src->classes && ds->labels[i] >= 0 && ds->labels[i] < src->nclasses)
        *class_name = src->classes[ds->labels[i]];
    return RP_OK;
}

int64_t rp_dataset_bad_files(const rp_dataset *ds)
{
    if (!ds || !ds->source) return 0;
    return __atomic_load_n(&ds->source->bad_count, __ATOMIC_RELAXED);
}
