/*
 * checkpoint_shard_read.c - reading sharded checkpoints: the index checked
 * whole before anything is trusted, any range of any tensor read from only
 * the pieces that overlap it (each piece's CRC checked), the whole state
 * gathered into one checkpoint (consolidation), and resharding offline
 * (replicator/io.h, "sharded checkpoints").
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "io/checkpoint_internal.h"
#include "io/checkpoint_shard_internal.h"

typedef struct ix_tensor {
    char *name;
    rp_checkpoint_dtype dtype;
    int ndim;
    int64_t shape[RP_MAX_DIMS], numel;
    ckpt_piece *pieces; /* sorted by slab and offset, tiling the tensor (io_ckpt_pieces_tile) */
    int n_pieces;
} ix_tensor;

struct rp_checkpoint_index {
    char *path; /* the index file, for messages */
    int64_t generation;
    char *layout;
    int n_shards;
    char **shard_paths;
    ix_tensor *tensors;
    int n_tensors;
    char **meta_keys, **meta_values;
    int n_meta;
};

static char *dup_str(const char *s)
{
    return io_ckpt_join(s, "");
}

void rp_checkpoint_index_close(rp_checkpoint_index *ix)
{
    if (!ix) return;
    for (int i = 0; i < ix->n_shards; i++)
        rp_free(ix->shard_paths[i]);
    free(ix->shard_paths);
    for (int i = 0; i < ix->n_tensors; i++) {
        rp_free(ix->tensors[i].name);
        free(ix->tensors[i].pieces);
    }
    free(ix->tensors);
    for (int i = 0; i < ix->n_meta; i++) {
        rp_free(ix->meta_keys[i]);
        rp_free(ix->meta_values[i]);
    }
    free(ix->meta_keys);
    free(ix->meta_values);
    rp_free(ix->layout);
    rp_free(ix->path);
    free(ix);
}

/* Reads the whole index file (at most 1 GiB), NUL-terminated, into *text. */
static rp_status read_text(const char *path, char **text, size_t *len)
{
    int fd = -1;
    RP_CHECK(core_file_open_regular(path, "checkpoint index", &fd));
    struct stat st;
    rp_status status = RP_OK;
    if (fstat(fd, &st) != 0 || st.st_size > (1 << 30)) {
        status = RP_ERROR(RP_ERR_FORMAT, "checkpoint index %s: %s", path,
                          st.st_size > (1 << 30) ? "larger than 1 GiB" : strerror(errno));
        close(fd);
        return status;
    }
    *len = (size_t)st.st_size;
    *text = rp_alloc(*len + 1);
    if (!*text) {
        close(fd);
        return rp_last_status();
    }
    status = io_ckpt_pread_all(fd, *text, *len, 0, path);
    close(fd);
    if (status != RP_OK) {
        rp_free(*text);
        *text = NULL;
        return status;
    }
    (*text)[*len] = '\0';
    return RP_OK;
}

/* Whether a relative path has a ".." component (a shard must sit below the index). */
static bool climbs(const char *file)
{
    for (const char *p = file; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.') return true;
        p += len;
        if (*p == '/') p++;
    }
    return false;
}

/* The directory part of `base` with a trailing '/' ("" for none). */
static char *base_dir(const char *base)
{
    const char *slash = strrchr(base, '/');
    size_t n = slash ? (size_t)(slash - base) + 1 : 0;
    char *dir = rp_alloc(n + 1);
    if (!dir) return NULL;
    memcpy(dir, base, n);
    dir[n] = '\0';
    return dir;
}

/* A shard file: present, with its recorded size and CRC digits (bytes 45..52). */
static rp_status check_shard(const char *path, int64_t bytes, const char *crc)
{
    int fd = -1;
    RP_CHECK(core_file_open_regular(path, "checkpoint shard", &fd));
    struct stat st;
    rp_status status = RP_OK;
    char digits[RP_CKPT_CRC_DIGITS + 1] = {0};
    if (fstat(fd, &st) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot read checkpoint shard %s: %s", path, strerror(errno));
    } else if ((int64_t)st.st_size != bytes) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint shard %s is %lld bytes; the index says %lld (truncated, or "
                          "not the shard the index published)",
                          path, (long long)st.st_size, (long long)bytes);
    } else if ((status = io_ckpt_pread_all(fd, digits, RP_CKPT_CRC_DIGITS,
                                           8 + RP_CKPT_CRC_PREFIX_LEN, path)) == RP_OK &&
               strcmp(digits, crc) != 0) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint shard %s has CRC %s; the index says %s (not the shard the "
                          "index published)",
                          path, digits, crc);
    }
    close(fd);
    return status;
}

/* The index's tensors, checked: dtype, shape, pieces inside their shards and tiling the tensor. */
static rp_status parse_tensors(rp_checkpoint_index *ix, const cJSON *arr, const int64_t *bytes)
{
    int n = cJSON_GetArraySize(arr);
    ix->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *ix->tensors);
    if (!ix->tensors) return RP_ERROR(RP_ERR_NOMEM, "out of memory reading %s", ix->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        ix_tensor *t = &ix->tensors[ix->n_tensors];
        const char *name = io_ckpt_json_str(e, "name"), *dname = io_ckpt_json_str(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(e, "pieces");
        bool ok = name && !io_ckpt_name_problem(name) && dname &&
                  io_ckpt_dtype_parse(dname, &t->dtype) && cJSON_IsArray(shape) &&
                  cJSON_GetArraySize(shape) <= RP_MAX_DIMS && cJSON_IsArray(pieces);
        if (ok) {
            t->ndim = cJSON_GetArraySize(shape);
            for (int d = 0; d < t->ndim && ok; d++)
                ok = (t->shape[d] = io_ckpt_json_count(cJSON_GetArrayItem(shape, d))) >= 0;
            ok = ok &&
                 io_ckpt_shape_numel(t->ndim, t->shape, io_ckpt_dtype_size(t->dtype), &t->numel);
        }
        if (!ok)
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint index %s: tensor %d (\"%.64s\") is damaged",
                            ix->path, ix->n_tensors, name ? name : "?");
        t->name = dup_str(name);
        int np = cJSON_GetArraySize(pieces);
        t->pieces = calloc((size_t)(np > 0 ? np : 1), sizeof *t->pieces);
        ix->n_tensors++;
        if (!t->name || !t->pieces) return RP_ERROR(RP_ERR_NOMEM, "out of memory reading an index");
        size_t esize = io_ckpt_dtype_size(t->dtype);
        const cJSON *pe;
        cJSON_ArrayForEach(pe, pieces)
        {
            ckpt_piece *q = &t->pieces[t->n_pieces++];
            int64_t shard = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(pe, "shard"));
            int64_t slab_numel = 0;
            q->offset = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(pe, "offset"));
            q->count = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(pe, "count"));
            q->begin = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(pe, "begin"));
            ok = shard >= 0 && shard < ix->n_shards &&
                 io_ckpt_json_slab(pe, t->ndim, t->shape, &q->slab, &slab_numel) &&
                 q->offset >= 0 && q->count >= 0 && q->offset <= slab_numel &&
                 q->count <= slab_numel - q->offset && q->begin >= 0 && q->begin <= bytes[shard] &&
                 q->count <= (bytes[shard] - q->begin) / (int64_t)esize &&
                 io_ckpt_parse_crc(io_ckpt_json_str(pe, "crc32"), &q->crc);
            if (!ok)
                return RP_ERROR(RP_ERR_FORMAT,
                                "checkpoint index %s: tensor \"%.64s\": piece %d is damaged or "
                                "outside its shard or tensor",
                                ix->path, name, t->n_pieces - 1);
            q->shard = (int)shard;
        }
        qsort(t->pieces, (size_t)t->n_pieces, sizeof *t->pieces, io_ckpt_piece_cmp);
        char why[320];
        if (!io_ckpt_pieces_tile(t->pieces, t->n_pieces, t->ndim, t->shape, why, sizeof why))
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint index %s: tensor \"%.64s\": %s", ix->path,
                            name, why);
    }
    return RP_OK;
}

rp_status rp_checkpoint_index_open(rp_checkpoint_index **out, const char *base)
{
    if (!out || !base || !*base)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_index_open: NULL argument");
    *out = NULL;
    rp_status status = RP_OK;
    char *text = NULL, *dir = NULL;
    int64_t *bytes = NULL;
    cJSON *root = NULL;
    size_t len = 0;
    rp_checkpoint_index *ix = calloc(1, sizeof *ix);
    if (!ix) return RP_ERROR(RP_ERR_NOMEM, "out of memory opening %s", base);
    ix->path = io_ckpt_join(base, RP_CKPT_INDEX_SUFFIX);
    dir = base_dir(base);
    if (!ix->path || !dir) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(read_text(ix->path, &text, &len));
    uint32_t want = 0;
    char digits[9] = {0};
    if (len < RP_CKPT_INDEX_CRC_AT + 8 ||
        memcmp(text, RP_CKPT_INDEX_CRC_PREFIX, RP_CKPT_INDEX_CRC_AT) != 0 ||
        (memcpy(digits, text + RP_CKPT_INDEX_CRC_AT, 8), !io_ckpt_parse_crc(digits, &want))) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint index %s is damaged: it does not start with "
                          "{\"crc32\":\"<8 hex digits>\"",
                          ix->path);
        goto cleanup;
    }
    memset(text + RP_CKPT_INDEX_CRC_AT, '0', 8);
    uint32_t got = io_ckpt_crc_update((uint32_t)crc32(0L, Z_NULL, 0), text, len);
    if (got != want) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint index %s is damaged: its CRC-32 is %08x, the file says %s "
                          "(truncated or changed)",
                          ix->path, (unsigned)got, digits);
        goto cleanup;
    }
    root = cJSON_ParseWithLength(text, len);
    const char *format = root ? io_ckpt_json_str(root, "format") : NULL;
    const cJSON *shards = root ? cJSON_GetObjectItemCaseSensitive(root, "shards") : NULL;
    const cJSON *tensors = root ? cJSON_GetObjectItemCaseSensitive(root, "tensors") : NULL;
    const cJSON *meta = root ? cJSON_GetObjectItemCaseSensitive(root, "metadata") : NULL;
    const char *layout = root ? io_ckpt_json_str(root, "layout") : NULL;
    ix->generation =
        root ? io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(root, "generation")) : -1;
    if (!format || strcmp(format, RP_CKPT_INDEX_FORMAT) != 0 ||
        io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(root, "version")) != 1 ||
        !cJSON_IsArray(shards) || cJSON_GetArraySize(shards) < 1 ||
        cJSON_GetArraySize(shards) > RP_CHECKPOINT_SHARDS_MAX || !cJSON_IsArray(tensors) ||
        !layout || ix->generation < 1 || (meta && !cJSON_IsObject(meta))) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint index %s: not a version 1 " RP_CKPT_INDEX_FORMAT
                          " index (format, version, generation, layout, shards, tensors)",
                          ix->path);
        goto cleanup;
    }
    ix->layout = dup_str(layout);
    ix->n_shards = cJSON_GetArraySize(shards);
    ix->shard_paths = calloc((size_t)ix->n_shards, sizeof *ix->shard_paths);
    bytes = calloc((size_t)ix->n_shards, sizeof *bytes);
    if (!ix->layout || !ix->shard_paths || !bytes) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory opening %s", ix->path);
        goto cleanup;
    }
    for (int k = 0; k < ix->n_shards; k++) {
        const cJSON *sh = cJSON_GetArrayItem(shards, k);
        const char *file = io_ckpt_json_str(sh, "file"), *crc = io_ckpt_json_str(sh, "crc32");
        bytes[k] = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(sh, "bytes"));
        if (!file || !*file || file[0] == '/' || climbs(file) || !crc || bytes[k] < 0) {
            status = RP_ERROR(RP_ERR_FORMAT, "checkpoint index %s: shard %d's entry is damaged",
                              ix->path, k);
            goto cleanup;
        }
        ix->shard_paths[k] = io_ckpt_join(dir, file);
        if (!ix->shard_paths[k]) {
            status = rp_last_status();
            goto cleanup;
        }
        RP_TRY(check_shard(ix->shard_paths[k], bytes[k], crc));
    }
    RP_TRY(parse_tensors(ix, tensors, bytes));
    int nm = meta ? cJSON_GetArraySize(meta) : 0;
    ix->meta_keys = calloc((size_t)(nm > 0 ? nm : 1), sizeof *ix->meta_keys);
    ix->meta_values = calloc((size_t)(nm > 0 ? nm : 1), sizeof *ix->meta_values);
    if (!ix->meta_keys || !ix->meta_values) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory opening %s", ix->path);
        goto cleanup;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, meta)
    {
        if (!cJSON_IsString(m)) {
            status = RP_ERROR(RP_ERR_FORMAT, "checkpoint index %s: metadata \"%.64s\" is not text",
                              ix->path, m->string);
            goto cleanup;
        }
        ix->meta_keys[ix->n_meta] = dup_str(m->string);
        ix->meta_values[ix->n_meta] = dup_str(m->valuestring);
        ix->n_meta++;
        if (!ix->meta_keys[ix->n_meta - 1] || !ix->meta_values[ix->n_meta - 1]) {
            status = rp_last_status();
            goto cleanup;
        }
    }
cleanup:
    cJSON_Delete(root);
    free(bytes);
    rp_free(text);
    rp_free(dir);
    if (status != RP_OK) {
        rp_checkpoint_index_close(ix);
        return status;
    }
    *out = ix;
    return RP_OK;
}

int rp_checkpoint_index_count(const rp_checkpoint_index *ix)
{
    return ix ? ix->n_tensors : 0;
}
const char *rp_checkpoint_index_name_at(const rp_checkpoint_index *ix, int i)
{
    return ix && i >= 0 && i < ix->n_tensors ? ix->tensors[i].name : NULL;
}
const char *rp_checkpoint_index_layout(const rp_checkpoint_index *ix)
{
    return ix ? ix->layout : NULL;
}
int64_t rp_checkpoint_index_generation(const rp_checkpoint_index *ix)
{
    return ix ? ix->generation : 0;
}
int rp_checkpoint_index_shards(const rp_checkpoint_index *ix)
{
    return ix ? ix->n_shards : 0;
}

static const ix_tensor *find(const rp_checkpoint_index *ix, const char *name)
{
    for (int i = 0; ix && name && i < ix->n_tensors; i++)
        if (!strcmp(ix->tensors[i].name, name)) return &ix->tensors[i];
    return NULL;
}

rp_status rp_checkpoint_index_info(const rp_checkpoint_index *ix, const char *name,
                                   rp_checkpoint_dtype *dtype, int *ndim, int64_t *shape,
                                   int64_t *numel)
{
    const ix_tensor *t = find(ix, name);
    if (!t)
        return RP_ERROR(RP_ERR_INVALID, "the sharded checkpoint %s has no tensor \"%.64s\"",
                        ix ? ix->path : "(NULL)", name ? name : "(NULL)");
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    if (numel) *numel = t->numel;
    return RP_OK;
}

/* Reads piece q of t whole into buf and checks its CRC. */
static rp_status read_piece(const rp_checkpoint_index *ix, const ix_tensor *t, const ckpt_piece *q,
                            void *buf)
{
    const char *path = ix->shard_paths[q->shard];
    size_t n = (size_t)q->count * io_ckpt_dtype_size(t->dtype);
    int fd = -1;
    RP_CHECK(core_file_open_regular(path, "checkpoint shard", &fd));
    rp_status status = io_ckpt_pread_all(fd, buf, n, q->begin, path);
    close(fd);
    RP_CHECK(status);
    uint32_t crc = io_ckpt_crc_update((uint32_t)crc32(0L, Z_NULL, 0), buf, n);
    if (crc != q->crc) {
        char slab[96] = "";
        if (q->slab.axis >= 0)
            snprintf(slab, sizeof slab, " of the slab [%lld, %lld) along axis %d",
                     (long long)q->slab.start, (long long)(q->slab.start + q->slab.size),
                     q->slab.axis);
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint shard %s is damaged: tensor \"%.64s\" elements [%lld, %lld)%s "
                        "have CRC-32 %08x, the index says %08x",
                        path, t->name, (long long)q->offset, (long long)(q->offset + q->count),
                        slab, (unsigned)crc, (unsigned)q->crc);
    }
    return RP_OK;
}

rp_status rp_checkpoint_index_read_slab(const rp_checkpoint_index *ix, const char *name,
                                        const rp_checkpoint_slab *slab, int64_t offset,
                                        int64_t count, void *dst)
{
    const ix_tensor *t = find(ix, name);
    if (!t)
        return RP_ERROR(RP_ERR_INVALID, "the sharded checkpoint %s has no tensor \"%.64s\"",
                        ix ? ix->path : "(NULL)", name ? name : "(NULL)");
    rp_checkpoint_slab want;
    int64_t numel = 0;
    if (!io_ckpt_slab_norm(slab, t->ndim, t->shape, &want, &numel))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_index_read: the slab [%lld, %lld) along axis %d is not "
                        "inside \"%.64s\"",
                        (long long)slab->start, (long long)(slab->start + slab->size), slab->axis,
                        name);
    if (offset < 0 || count < 0 || offset > numel || count > numel - offset || (count > 0 && !dst))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_index_read: elements [%lld, %lld) of \"%.64s\", which has "
                        "%lld%s",
                        (long long)offset, (long long)(offset + count), name, (long long)numel,
                        want.axis >= 0 ? " in the slab" : "");
    size_t esize = io_ckpt_dtype_size(t->dtype);
    for (int j = 0; j < t->n_pieces; j++) {
        const ckpt_piece *q = &t->pieces[j];
        if (io_ckpt_slab_copy(t->ndim, t->shape, esize, &q->slab, q->offset, q->count, NULL, &want,
                              offset, count, NULL) == 0)
            continue;
        bool same =
            q->slab.axis == want.axis && q->slab.start == want.start && q->slab.size == want.size;
        if (same && q->offset >= offset && q->offset + q->count <= offset + count) {
            /* The whole piece lands in the range, in order: read straight into place. */
            RP_CHECK(read_piece(ix, t, q, (char *)dst + (size_t)(q->offset - offset) * esize));
            continue;
        }
        /* Part of a piece, or another slab's: read whole (to check its CRC), then placed. */
        void *buf = malloc((size_t)q->count * esize);
        if (!buf)
            return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a piece of %lld elements of \"%.64s\"",
                            (long long)q->count, name);
        rp_status status = read_piece(ix, t, q, buf);
        if (status == RP_OK)
            io_ckpt_slab_copy(t->ndim, t->shape, esize, &q->slab, q->offset, q->count, buf, &want,
                              offset, count, dst);
        free(buf);
        RP_CHECK(status);
    }
    return RP_OK;
}

rp_status rp_checkpoint_index_read(const rp_checkpoint_index *ix, const char *name, int64_t offset,
                                   int64_t count, void *dst)
{
    return rp_checkpoint_index_read_slab(ix, name, NULL, offset, count, dst);
}

/* Copies the index's metadata into ck. */
static rp_status copy_meta(const rp_checkpoint_index *ix, rp_checkpoint *ck)
{
    for (int i = 0; i < ix->n_meta; i++)
        RP_CHECK(rp_checkpoint_set_meta(ck, ix->meta_keys[i], ix->meta_values[i]));
    return RP_OK;
}

rp_status rp_checkpoint_index_load(const rp_checkpoint_index *ix, rp_checkpoint **out)
{
    if (!ix || !out) return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_index_load: NULL argument");
    *out = NULL;
    rp_checkpoint *ck = NULL;
    RP_CHECK(rp_checkpoint_create(&ck));
    rp_status status = copy_meta(ix, ck);
    for (int i = 0; i < ix->n_tensors && status == RP_OK; i++) {
        const ix_tensor *t = &ix->tensors[i];
        ckpt_tensor *ct = NULL;
        status = io_ckpt_append(ck, t->name, t->dtype, t->ndim, t->shape, &ct);
        if (status == RP_OK) status = rp_checkpoint_index_read(ix, t->name, 0, t->numel, ct->data);
    }
    if (status != RP_OK) {
        rp_checkpoint_destroy(ck);
        return status;
    }
    *out = ck;
    return RP_OK;
}

static rp_status view_read(void *ctx, const char *name, const rp_checkpoint_slab *slab,
                           int64_t offset, int64_t count, void *dst)
{
    return rp_checkpoint_index_read_slab(ctx, name, slab, offset, count, dst);
}

static void view_close(void *ctx)
{
    rp_checkpoint_index_close(ctx);
}

static const ckpt_source index_source = {.read = view_read, .close = view_close};

rp_status rp_checkpoint_open_sharded(rp_checkpoint **out, const char *base)
{
    if (!out || !base) return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_open_sharded: NULL argument");
    *out = NULL;
    rp_checkpoint_index *ix = NULL;
    RP_CHECK(rp_checkpoint_index_open(&ix, base));
    rp_checkpoint *ck = NULL;
    rp_status status = rp_checkpoint_create(&ck);
    if (status != RP_OK) {
        rp_checkpoint_index_close(ix);
        return status;
    }
    io_ckpt_set_source(ck, &index_source, ix); /* ck closes ix from here on */
    status = copy_meta(ix, ck);
    for (int i = 0; i < ix->n_tensors && status == RP_OK; i++) {
        const ix_tensor *t = &ix->tensors[i];
        status = io_ckpt_append_unread(ck, t->name, t->dtype, t->ndim, t->shape);
    }
    if (status != RP_OK) {
        rp_checkpoint_destroy(ck);
        return status;
    }
    *out = ck;
    return RP_OK;
}

int64_t rp_checkpoint_published_generation(const char *base)
{
    rp_checkpoint_index *ix = NULL;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", rp_last_error());
    if (rp_checkpoint_index_open(&ix, base) != RP_OK) {
        rp_error_set(RP_OK, NULL, 0, "%s", keep); /* a missing index is no error here */
        return 0;
    }
    int64_t g = ix->generation;
    rp_checkpoint_index_close(ix);
    return g;
}

rp_status rp_checkpoint_discard_generation(const char *base, int64_t generation)
{
    if (!base || !*base || generation < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_discard_generation: base set, generation "
                        "%lld >= 1",
                        (long long)generation);
    if (generation == rp_checkpoint_published_generation(base))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_discard_generation: generation %lld of %s is the "
                        "published one",
                        (long long)generation, base);
    char *gen = io_ckpt_shard_name(base, generation, -1, 1, false);
    if (!gen) return rp_last_status();
    io_ckpt_remove_generation_dir(gen);
    struct stat st;
    rp_status status = stat(gen, &st) == 0 ? RP_ERROR(RP_ERR_IO,
                                                      "cannot clear %s, left by an unpublished "
                                                      "checkpoint save",
                                                      gen)
                                           : RP_OK;
    rp_free(gen);
    return status;
}

rp_status rp_checkpoint_reshard(const char *base, int shards)
{
    if (!base || shards < 1 || shards > RP_CHECKPOINT_SHARDS_MAX)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_reshard: %d shards; 1..%d", shards,
                        RP_CHECKPOINT_SHARDS_MAX);
    rp_checkpoint_index *ix = NULL;
    RP_CHECK(rp_checkpoint_index_open(&ix, base));
    int64_t generation = ix->generation + 1;
    rp_status status = RP_OK;
    for (int k = 0; k < shards && status == RP_OK; k++) {
        rp_checkpoint *ck = NULL;
        status = rp_checkpoint_create(&ck);
        if (status == RP_OK && k == 0) status = copy_meta(ix, ck);
        for (int i = 0; i < ix->n_tensors && status == RP_OK; i++) {
            const ix_tensor *t = &ix->tensors[i];
            bool integer = t->dtype == RP_CHECKPOINT_I64 || t->dtype == RP_CHECKPOINT_U64;
            int64_t offset = 0, count = t->numel;
            if (integer && k != 0) continue; /* counters: shard 0 holds them whole */
            if (!integer) rp_checkpoint_split_range(t->numel, k, shards, &offset, &count);
            ckpt_tensor *ct = NULL;
            status = io_ckpt_append(ck, t->name, t->dtype, 1, &count, &ct);
            if (status != RP_OK) break;
            ct->piece = true;
            ct->whole_ndim = t->ndim;
            memcpy(ct->whole_shape, t->shape, sizeof t->shape);
            ct->piece_offset = offset;
            ct->slab = (rp_checkpoint_slab){-1, 0, 0};
            status = rp_checkpoint_index_read(ix, t->name, offset, count, ct->data);
        }
        if (status == RP_OK) status = rp_checkpoint_save_shard(ck, base, generation, k, shards, 1);
        rp_checkpoint_destroy(ck);
    }
    char layout[64];
    snprintf(layout, sizeof layout, "shards=%d", shards);
    if (status == RP_OK) status = rp_checkpoint_publish(base, generation, shards, layout);
    rp_checkpoint_index_close(ix);
    return status;
}
