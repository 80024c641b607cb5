/*
 * checkpoint_shard.c - writing sharded checkpoints: pieces, one shard file
 * per writer, and the index that publishes them (replicator/io.h, "sharded
 * checkpoints").
 *
 * A shard is written through rp_checkpoint_save, from a view of the caller's
 * checkpoint (entries that point into its data), so a shard costs no copy of
 * the state. The index is built from the shards' headers, not from what the
 * writers were told, so that it describes exactly the bytes on disk, and it is
 * renamed into place last: until then the previous generation stays the one
 * published.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "io/checkpoint_internal.h"
#include "io/checkpoint_shard_internal.h"
#include "kernels/kernels.h"

rp_status rp_checkpoint_add_slab_piece(rp_checkpoint *ck, const char *name,
                                       rp_checkpoint_dtype dtype, int ndim, const int64_t *shape,
                                       const rp_checkpoint_slab *slab, int64_t offset,
                                       int64_t count, const void *data)
{
    if (!ck || !name)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_add_piece: ck and name must not be NULL");
    int64_t numel = 0;
    size_t esize = io_ckpt_dtype_size(dtype);
    if (esize == 0 || ndim < 0 || ndim > RP_MAX_DIMS || (ndim > 0 && !shape) ||
        !io_ckpt_shape_numel(ndim, shape, esize, &numel))
        return RP_ERROR(
            RP_ERR_INVALID,
            "rp_checkpoint_add_piece: tensor \"%.64s\": bad dtype %d or shape (ndim %d)", name,
            (int)dtype, ndim);
    rp_checkpoint_slab norm;
    if (!io_ckpt_slab_norm(slab, ndim, shape, &norm, &numel))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_piece: tensor \"%.64s\": the slab [%lld, %lld) along "
                        "axis %d is not inside it",
                        name, (long long)slab->start, (long long)(slab->start + slab->size),
                        slab->axis);
    if (offset < 0 || count < 0 || offset > numel || count > numel - offset)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_piece: tensor \"%.64s\": elements [%lld, %lld) are not "
                        "inside its %lld%s",
                        name, (long long)offset, (long long)(offset + count), (long long)numel,
                        norm.axis >= 0 ? " (of the slab)" : "");
    RP_CHECK(rp_checkpoint_add(ck, name, dtype, 1, &count, data));
    ckpt_tensor *t = &ck->tensors[ck->n_tensors - 1];
    t->piece = true;
    t->whole_ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->whole_shape[d] = shape[d];
    t->piece_offset = offset;
    t->slab = norm;
    return RP_OK;
}

rp_status rp_checkpoint_add_piece(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                                  int ndim, const int64_t *shape, int64_t offset, int64_t count,
                                  const void *data)
{
    return rp_checkpoint_add_slab_piece(ck, name, dtype, ndim, shape, NULL, offset, count, data);
}

void rp_checkpoint_split_range(int64_t numel, int k, int n, int64_t *offset, int64_t *count)
{
    if (n < 1) n = 1;
    int64_t q = numel / n, rem = numel % n;
    *offset = (int64_t)k * q + (k < rem ? k : rem);
    *count = q + (k < rem ? 1 : 0);
}

char *io_ckpt_shard_name(const char *base, int64_t generation, int k, int n, bool relative)
{
    const char *slash = strrchr(base, '/');
    const char *stem = relative && slash ? slash + 1 : base;
    size_t size = strlen(stem) + 96;
    char *path = rp_alloc(size);
    if (!path) return NULL;
    if (k < 0)
        snprintf(path, size, "%s.shards/g%" PRId64, stem, generation);
    else
        snprintf(path, size, "%s.shards/g%" PRId64 "/shard-%d-of-%d.safetensors", stem, generation,
                 k, n);
    return path;
}

char *io_ckpt_join(const char *a, const char *b)
{
    size_t size = strlen(a) + strlen(b) + 2;
    char *path = rp_alloc(size);
    if (path) snprintf(path, size, "%s%s", a, b);
    return path;
}

/* mkdir that takes an existing directory as success. */
static rp_status make_dir(const char *dir)
{
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) return RP_OK;
    return RP_ERROR(RP_ERR_IO, "cannot create the checkpoint's shard directory %s: %s", dir,
                    strerror(errno));
}

/* The 8 lowercase hex digits of a CRC-32, for JSON. */
static void crc_text(uint32_t crc, char out[9])
{
    snprintf(out, 9, "%08x", (unsigned)crc);
}

static cJSON *json_int(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return cJSON_CreateRaw(buf);
}

static bool add_int(cJSON *obj, const char *key, int64_t v)
{
    cJSON *num = json_int(v);
    if (num && cJSON_AddItemToObject(obj, key, num)) return true;
    cJSON_Delete(num);
    return false;
}

static bool add_shape(cJSON *obj, const char *key, int ndim, const int64_t *shape)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    for (int d = 0; arr && d < ndim; d++) {
        cJSON *num = json_int(shape[d]);
        if (!num || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            return false;
        }
    }
    return arr != NULL;
}

/* A piece's slab as "axis", "start", "size" (nothing for the whole tensor). */
static bool add_slab(cJSON *e, const rp_checkpoint_slab *slab)
{
    return slab->axis < 0 || (add_int(e, "axis", slab->axis) && add_int(e, "start", slab->start) &&
                              add_int(e, "size", slab->size));
}

/* A piece's entry in a shard's "replicator.pieces": its tensor, whole shape, slab, offset, CRC. */
static bool add_piece_entry(cJSON *arr, const char *name, int ndim, const int64_t *shape,
                            const rp_checkpoint_slab *slab, int64_t offset, const void *data,
                            size_t nbytes)
{
    char crc[9];
    crc_text(io_ckpt_crc_update((uint32_t)crc32(0L, Z_NULL, 0), data, nbytes), crc);
    cJSON *e = cJSON_CreateObject();
    bool ok = e && cJSON_AddStringToObject(e, "name", name) && add_shape(e, "shape", ndim, shape) &&
              add_slab(e, slab) && add_int(e, "offset", offset) &&
              cJSON_AddStringToObject(e, "crc32", crc);
    if (ok && cJSON_AddItemToArray(arr, e)) return true;
    cJSON_Delete(e);
    return false;
}

rp_status rp_checkpoint_save_shard(const rp_checkpoint *ck, const char *base, int64_t generation,
                                   int k, int n, int split)
{
    if (!ck || !base || !*base || generation < 1 || n < 1 || n > RP_CHECKPOINT_SHARDS_MAX ||
        k < 0 || k >= n)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_save_shard: shard %d of %d, generation %lld (ck and base "
                        "set, 0 <= k < n <= %d, generation >= 1)",
                        k, n, (long long)generation, RP_CHECKPOINT_SHARDS_MAX);
    RP_CHECK(io_ckpt_read_all(ck));
    rp_status status = RP_OK;
    rp_checkpoint view;
    memset(&view, 0, sizeof view);
    char *dir = NULL, *gen_dir = NULL, *path = NULL, *pieces_text = NULL;
    cJSON *pieces = cJSON_CreateArray();
    view.tensors = rp_alloc((size_t)(ck->n_tensors > 0 ? ck->n_tensors : 1) * sizeof *view.tensors);
    view.meta = rp_alloc((size_t)(ck->n_meta + 1) * sizeof *view.meta);
    if (!pieces || !view.tensors || !view.meta) {
        status = RP_ERROR(RP_ERR_NOMEM, "checkpoint shard %d of %d: out of memory", k, n);
        goto cleanup;
    }
    bool first = k == 0 || split <= 1;
    for (int i = 0; i < ck->n_tensors; i++) {
        const ckpt_tensor *t = &ck->tensors[i];
        ckpt_tensor v = *t;
        int ndim = t->piece ? t->whole_ndim : t->ndim;
        const int64_t *shape = t->piece ? t->whole_shape : t->shape;
        int64_t offset = t->piece ? t->piece_offset : 0;
        rp_checkpoint_slab whole = {-1, 0, 0};
        const rp_checkpoint_slab *slab = t->piece ? &t->slab : &whole;
        bool integer = t->dtype == RP_CHECKPOINT_I64 || t->dtype == RP_CHECKPOINT_U64;
        if (!t->piece && split > 1) {
            if (integer) {
                if (k != 0) continue; /* small counters: shard 0 writes them whole */
            } else {
                int64_t count;
                rp_checkpoint_split_range(t->numel, k, split, &offset, &count);
                size_t esize = io_ckpt_dtype_size(t->dtype);
                v.data = (char *)t->data + (size_t)offset * esize;
                v.numel = count;
                v.nbytes = (size_t)count * esize;
                v.ndim = 1;
                v.shape[0] = count;
            }
        } else if (!t->piece) {
            /* A whole tensor is its own one piece: stored 1-d as every piece is. */
            v.ndim = 1;
            v.shape[0] = t->numel;
        }
        if (!add_piece_entry(pieces, t->name, ndim, shape, slab, offset, v.data, v.nbytes)) {
            status = RP_ERROR(RP_ERR_NOMEM, "checkpoint shard %d of %d: out of memory", k, n);
            goto cleanup;
        }
        view.tensors[view.n_tensors++] = v;
    }
    for (int i = 0; first && i < ck->n_meta; i++)
        view.meta[view.n_meta++] = ck->meta[i];
    pieces_text = cJSON_PrintUnformatted(pieces);
    if (!pieces_text) {
        status = RP_ERROR(RP_ERR_NOMEM, "checkpoint shard %d of %d: out of memory", k, n);
        goto cleanup;
    }
    view.meta[view.n_meta++] = (ckpt_meta){(char *)RP_CKPT_PIECES_KEY, pieces_text};

    dir = io_ckpt_join(base, ".shards");
    gen_dir = io_ckpt_shard_name(base, generation, -1, n, false);
    path = io_ckpt_shard_name(base, generation, k, n, false);
    if (!dir || !gen_dir || !path) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(make_dir(dir));
    RP_TRY(make_dir(gen_dir));
    RP_TRY(rp_checkpoint_save(&view, path));
cleanup:
    rp_free(path);
    rp_free(gen_dir);
    rp_free(dir);
    cJSON_free(pieces_text);
    cJSON_Delete(pieces);
    rp_free(view.meta);
    rp_free(view.tensors);
    return status;
}

/* ---- publishing: the index built from the shards' headers ------------------------------- */

/* Reads exactly n bytes at `at`, or fails naming the file. */
rp_status io_ckpt_pread_all(int fd, void *buf, size_t n, int64_t at, const char *path)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return RP_ERROR(RP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        if (r == 0)
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint shard %s is truncated (ends at byte %lld)",
                            path, (long long)at);
        p += r;
        n -= (size_t)r;
        at += r;
    }
    return RP_OK;
}

/* What publish gathers of one tensor. */
typedef struct pub_tensor {
    char *name;
    rp_checkpoint_dtype dtype;
    int ndim;
    int64_t shape[RP_MAX_DIMS], numel;
    ckpt_piece *pieces;
    int n_pieces, cap_pieces;
    cJSON *values; /* small integer tensors' values (shard 0's piece), or NULL */
} pub_tensor;

typedef struct pub_state {
    pub_tensor *tensors;
    int n, cap, cursor;
} pub_state;

static void pub_free(pub_state *p)
{
    for (int i = 0; i < p->n; i++) {
        rp_free(p->tensors[i].name);
        free(p->tensors[i].pieces);
        cJSON_Delete(p->tensors[i].values);
    }
    free(p->tensors);
}

/* The tensor named `name`: the one after the last found first (shards list them in one order). */
static pub_tensor *pub_find(pub_state *p, const char *name)
{
    for (int k = 0; k < p->n; k++) {
        int i = (p->cursor + k) % p->n;
        if (!strcmp(p->tensors[i].name, name)) {
            p->cursor = i + 1;
            return &p->tensors[i];
        }
    }
    return NULL;
}

static bool grow(void **items, int *cap, int need, size_t size)
{
    if (need <= *cap) return true;
    int cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*items, (size_t)cap2 * size);
    if (!p) return false;
    *items = p;
    *cap = cap2;
    return true;
}

const char *io_ckpt_json_str(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

bool io_ckpt_parse_crc(const char *s, uint32_t *crc)
{
    if (!s || strlen(s) != 8) return false;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (!isxdigit((unsigned char)s[i])) return false;
        v = v << 4 |
            (uint32_t)(isdigit((unsigned char)s[i]) ? s[i] - '0'
                                                    : tolower((unsigned char)s[i]) - 'a' + 10);
    }
    *crc = v;
    return true;
}

int64_t io_ckpt_json_count(const cJSON *it)
{
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 9007199254740992.0 ||
        it->valuedouble != (double)(int64_t)it->valuedouble)
        return -1;
    return (int64_t)it->valuedouble;
}

bool io_ckpt_json_slab(const cJSON *e, int ndim, const int64_t *shape, rp_checkpoint_slab *slab,
                       int64_t *numel)
{
    const cJSON *axis = cJSON_GetObjectItemCaseSensitive(e, "axis");
    if (!axis) return io_ckpt_slab_norm(NULL, ndim, shape, slab, numel);
    int64_t a = io_ckpt_json_count(axis);
    int64_t start = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(e, "start"));
    int64_t size = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(e, "size"));
    if (a < 0 || a >= ndim || start < 0 || size < 0) return false;
    rp_checkpoint_slab in = {(int)a, start, size};
    return io_ckpt_slab_norm(&in, ndim, shape, slab, numel) && slab->axis >= 0;
}

static bool json_shape(const cJSON *arr, int *ndim, int64_t *shape)
{
    if (!cJSON_IsArray(arr)) return false;
    int n = cJSON_GetArraySize(arr);
    if (n > RP_MAX_DIMS) return false;
    for (int d = 0; d < n; d++)
        if ((shape[d] = io_ckpt_json_count(cJSON_GetArrayItem(arr, d))) < 0) return false;
    *ndim = n;
    return true;
}

/* The values of a small integer piece, as decimal strings, from its shard file. */
static cJSON *read_values(int fd, const char *path, rp_checkpoint_dtype dtype, int64_t begin,
                          int64_t count)
{
    uint64_t v[64];
    if (io_ckpt_pread_all(fd, v, (size_t)count * 8, begin, path) != RP_OK) return NULL;
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = 0; arr && i < count; i++) {
        char buf[24];
        if (dtype == RP_CHECKPOINT_I64)
            snprintf(buf, sizeof buf, "%" PRId64, (int64_t)v[i]);
        else
            snprintf(buf, sizeof buf, "%" PRIu64, v[i]);
        cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
    }
    return arr;
}

/* One shard's header into p (and its metadata into *meta for shard 0). */
static rp_status read_shard(pub_state *p, const char *base, int64_t generation, int k, int n,
                            cJSON *shards, cJSON **meta)
{
    rp_status status = RP_OK;
    char *path = io_ckpt_shard_name(base, generation, k, n, false);
    char *rel = io_ckpt_shard_name(base, generation, k, n, true);
    char *header = NULL;
    cJSON *root = NULL, *list = NULL;
    int fd = -1;
    if (!path || !rel) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(core_file_open_regular(path, "checkpoint shard", &fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot read checkpoint shard %s: %s", path, strerror(errno));
        goto cleanup;
    }
    int64_t size = (int64_t)st.st_size;
    unsigned char len_field[8];
    if (size < 8) {
        status = RP_ERROR(RP_ERR_FORMAT, "checkpoint shard %s is %lld bytes: truncated", path,
                          (long long)size);
        goto cleanup;
    }
    RP_TRY(io_ckpt_pread_all(fd, len_field, 8, 0, path));
    uint64_t hlen = io_ckpt_get_le64(len_field);
    if (hlen > RP_CHECKPOINT_HEADER_MAX || (int64_t)hlen > size - 8 ||
        hlen < RP_CKPT_CRC_PREFIX_LEN + RP_CKPT_CRC_DIGITS) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint shard %s: header length %llu does not fit its %lld bytes",
                          path, (unsigned long long)hlen, (long long)size);
        goto cleanup;
    }
    header = rp_alloc(hlen + 1);
    if (!header) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(io_ckpt_pread_all(fd, header, hlen, 8, path));
    header[hlen] = '\0';
    root = cJSON_Parse(header);
    cJSON *md = root ? cJSON_GetObjectItemCaseSensitive(root, "__metadata__") : NULL;
    const char *crc = md ? io_ckpt_json_str(md, RP_CKPT_CRC_KEY) : NULL;
    const char *pieces_text = md ? io_ckpt_json_str(md, RP_CKPT_PIECES_KEY) : NULL;
    list = pieces_text ? cJSON_Parse(pieces_text) : NULL;
    if (!crc || strlen(crc) != 8 || !cJSON_IsArray(list)) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint shard %s: its header is damaged or has no " RP_CKPT_PIECES_KEY
                          " list (not written by rp_checkpoint_save_shard?)",
                          path);
        goto cleanup;
    }
    cJSON *sh = cJSON_CreateObject();
    if (!sh || !cJSON_AddItemToArray(shards, sh)) {
        cJSON_Delete(sh);
        sh = NULL;
    }
    if (!sh || !cJSON_AddStringToObject(sh, "file", rel) || !add_int(sh, "bytes", size) ||
        !cJSON_AddStringToObject(sh, "crc32", crc)) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory building the checkpoint index");
        goto cleanup;
    }
    if (k == 0) {
        /* The run's metadata, without the file's own entries. */
        *meta = cJSON_CreateObject();
        const cJSON *e;
        cJSON_ArrayForEach(e, md)
        {
            if (!strcmp(e->string, RP_CKPT_CRC_KEY) || !strcmp(e->string, RP_CKPT_PIECES_KEY) ||
                !cJSON_IsString(e))
                continue;
            cJSON_AddStringToObject(*meta, e->string, e->valuestring);
        }
    }
    int64_t data_start = 8 + (int64_t)hlen;
    const cJSON *pe;
    cJSON_ArrayForEach(pe, list)
    {
        const char *name = io_ckpt_json_str(pe, "name");
        const cJSON *entry = name ? cJSON_GetObjectItemCaseSensitive(root, name) : NULL;
        const char *dname = entry ? io_ckpt_json_str(entry, "dtype") : NULL;
        const cJSON *offs = entry ? cJSON_GetObjectItemCaseSensitive(entry, "data_offsets") : NULL;
        int ndim = 0, pn = 0;
        int64_t shape[RP_MAX_DIMS], pshape[RP_MAX_DIMS], numel = 0;
        int64_t offset = io_ckpt_json_count(cJSON_GetObjectItemCaseSensitive(pe, "offset"));
        rp_checkpoint_dtype dtype;
        uint32_t crc = 0;
        bool ok = name && io_ckpt_parse_crc(io_ckpt_json_str(pe, "crc32"), &crc) && dname &&
                  io_ckpt_dtype_parse(dname, &dtype) &&
                  json_shape(cJSON_GetObjectItemCaseSensitive(pe, "shape"), &ndim, shape) &&
                  json_shape(cJSON_GetObjectItemCaseSensitive(entry, "shape"), &pn, pshape) &&
                  pn == 1 && offset >= 0 && cJSON_IsArray(offs) && cJSON_GetArraySize(offs) == 2 &&
                  io_ckpt_shape_numel(ndim, shape, io_ckpt_dtype_size(dtype), &numel);
        int64_t b = ok ? io_ckpt_json_count(cJSON_GetArrayItem(offs, 0)) : -1;
        int64_t count = ok ? pshape[0] : 0, slab_numel = 0;
        rp_checkpoint_slab slab = {-1, 0, 0};
        ok = ok && io_ckpt_json_slab(pe, ndim, shape, &slab, &slab_numel);
        ok = ok && b >= 0 && offset <= slab_numel && count <= slab_numel - offset &&
             data_start + b + count * (int64_t)io_ckpt_dtype_size(dtype) <= size;
        if (!ok) {
            status = RP_ERROR(RP_ERR_FORMAT, "checkpoint shard %s: piece \"%.64s\" is damaged",
                              path, name ? name : "?");
            goto cleanup;
        }
        pub_tensor *t = pub_find(p, name);
        if (!t) {
            if (!grow((void **)&p->tensors, &p->cap, p->n + 1, sizeof *p->tensors)) {
                status = RP_ERROR(RP_ERR_NOMEM, "out of memory building the checkpoint index");
                goto cleanup;
            }
            t = &p->tensors[p->n++];
            memset(t, 0, sizeof *t);
            t->name = io_ckpt_join(name, "");
            if (!t->name) {
                p->n--;
                status = rp_last_status();
                goto cleanup;
            }
            t->dtype = dtype;
            t->ndim = ndim;
            memcpy(t->shape, shape, sizeof shape);
            t->numel = numel;
            p->cursor = p->n;
        } else {
            bool same = t->dtype == dtype && t->ndim == ndim;
            for (int d = 0; same && d < ndim; d++)
                same = t->shape[d] == shape[d];
            if (!same) {
                status = RP_ERROR(RP_ERR_FORMAT,
                                  "checkpoint shard %s: tensor \"%.64s\" has another dtype or "
                                  "shape than in an earlier shard",
                                  path, name);
                goto cleanup;
            }
        }
        if (!grow((void **)&t->pieces, &t->cap_pieces, t->n_pieces + 1, sizeof *t->pieces)) {
            status = RP_ERROR(RP_ERR_NOMEM, "out of memory building the checkpoint index");
            goto cleanup;
        }
        ckpt_piece *q = &t->pieces[t->n_pieces++];
        q->shard = k;
        q->slab = slab;
        q->offset = offset;
        q->count = count;
        q->begin = data_start + b;
        q->crc = crc;
        bool integer = dtype == RP_CHECKPOINT_I64 || dtype == RP_CHECKPOINT_U64;
        if (integer && slab.axis < 0 && offset == 0 && count == numel && numel <= 64 && !t->values)
            t->values = read_values(fd, path, dtype, q->begin, count);
    }
cleanup:
    if (fd >= 0) close(fd);
    cJSON_Delete(list);
    cJSON_Delete(root);
    rp_free(header);
    rp_free(rel);
    rp_free(path);
    return status;
}

/* Every tensor covered exactly once by its pieces (sorted: by slab, then offset). */
static rp_status check_cover(pub_state *p, const char *base)
{
    for (int i = 0; i < p->n; i++) {
        pub_tensor *t = &p->tensors[i];
        qsort(t->pieces, (size_t)t->n_pieces, sizeof *t->pieces, io_ckpt_piece_cmp);
        char why[320];
        if (!io_ckpt_pieces_tile(t->pieces, t->n_pieces, t->ndim, t->shape, why, sizeof why))
            return RP_ERROR(RP_ERR_FORMAT, "sharded checkpoint %s: tensor \"%.64s\": %s", base,
                            t->name, why);
    }
    return RP_OK;
}

static cJSON *tensor_json(const pub_tensor *t)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *pieces = e ? cJSON_CreateArray() : NULL;
    bool ok = pieces && cJSON_AddStringToObject(e, "name", t->name) &&
              cJSON_AddStringToObject(e, "dtype", io_ckpt_dtype_name(t->dtype)) &&
              add_shape(e, "shape", t->ndim, t->shape);
    for (int j = 0; ok && j < t->n_pieces; j++) {
        const ckpt_piece *q = &t->pieces[j];
        cJSON *pj = cJSON_CreateObject();
        char crc[9];
        crc_text(q->crc, crc);
        ok = pj && add_int(pj, "shard", q->shard) && add_slab(pj, &q->slab) &&
             add_int(pj, "offset", q->offset) && add_int(pj, "count", q->count) &&
             add_int(pj, "begin", q->begin) && cJSON_AddStringToObject(pj, "crc32", crc);
        if (ok) ok = cJSON_AddItemToArray(pieces, pj);
        if (!ok) cJSON_Delete(pj);
    }
    if (ok)
        ok = cJSON_AddItemToObject(e, "pieces", pieces);
    else
        cJSON_Delete(pieces);
    if (ok && t->values) ok = cJSON_AddItemReferenceToObject(e, "values", t->values);
    if (ok) return e;
    cJSON_Delete(e);
    return NULL;
}

void io_ckpt_remove_generation_dir(const char *gen)
{
    DIR *gd = opendir(gen);
    struct dirent *f;
    while (gd && (f = readdir(gd))) {
        if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
        char *file = rp_alloc(strlen(gen) + strlen(f->d_name) + 2);
        if (!file) break;
        sprintf(file, "%s/%s", gen, f->d_name);
        unlink(file);
        rp_free(file);
    }
    if (gd) closedir(gd);
    rmdir(gen);
}

/* Removes <base>.shards/g<G> directories other than `keep`. */
static void remove_other_generations(const char *base, int64_t keep)
{
    char *dir = io_ckpt_join(base, ".shards");
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        if (e->d_name[0] != 'g' || !e->d_name[1]) continue;
        long long g = strtoll(e->d_name + 1, &end, 10);
        if (*end || g == keep) continue;
        size_t size = strlen(dir) + strlen(e->d_name) + 2;
        char *gen = rp_alloc(size);
        if (!gen) break;
        snprintf(gen, size, "%s/%s", dir, e->d_name);
        io_ckpt_remove_generation_dir(gen);
        rp_free(gen);
    }
    if (d) closedir(d);
    rp_free(dir);
}

rp_status rp_checkpoint_wait_shards(const char *base, int64_t generation, int n, int timeout_ms)
{
    if (!base || !*base || generation < 1 || n < 1 || n > RP_CHECKPOINT_SHARDS_MAX ||
        timeout_ms < 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_wait_shards: base set, generation %lld >= 1, shards %d in "
                        "1..%d, timeout %d ms >= 0",
                        (long long)generation, n, RP_CHECKPOINT_SHARDS_MAX, timeout_ms);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int next = 0; /* shards before it exist */
    for (;;) {
        while (next < n) {
            char *path = io_ckpt_shard_name(base, generation, next, n, false);
            if (!path) return rp_last_status();
            bool there = access(path, F_OK) == 0;
            if (!there) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                int64_t waited = (int64_t)(now.tv_sec - start.tv_sec) * 1000 +
                                 (now.tv_nsec - start.tv_nsec) / 1000000;
                if (waited >= timeout_ms) {
                    int missing = 0;
                    for (int k = next; k < n; k++) {
                        char *p = io_ckpt_shard_name(base, generation, k, n, false);
                        missing += p && access(p, F_OK) != 0;
                        rp_free(p);
                    }
                    rp_status status =
                        RP_ERROR(RP_ERR_TIMEOUT,
                                 "checkpoint shard %s was not written within %d ms (%d of %d "
                                 "shards missing): its worker failed or is stuck",
                                 path, timeout_ms, missing, n);
                    rp_free(path);
                    return status;
                }
            }
            rp_free(path);
            if (!there) break;
            next++;
        }
        if (next == n) return RP_OK;
        struct timespec pause = {0, 5 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

rp_status rp_checkpoint_remove_sharded(const char *base)
{
    if (!base) return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_remove_sharded: NULL base");
    char *index = io_ckpt_join(base, RP_CKPT_INDEX_SUFFIX);
    if (!index) return rp_last_status();
    rp_status status = RP_OK;
    if (unlink(index) != 0 && errno != ENOENT)
        status = RP_ERROR(RP_ERR_IO, "cannot remove the checkpoint index %s: %s", index,
                          strerror(errno));
    rp_free(index);
    if (status == RP_OK) {
        remove_other_generations(base, -1);
        char *dir = io_ckpt_join(base, ".shards");
        if (dir) rmdir(dir);
        rp_free(dir);
    }
    return status;
}

rp_status rp_checkpoint_publish(const char *base, int64_t generation, int n, const char *layout)
{
    if (!base || !*base || generation < 1 || n < 1 || n > RP_CHECKPOINT_SHARDS_MAX)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_publish: base set, generation %lld >= 1, shards %d in 1..%d",
                        (long long)generation, n, RP_CHECKPOINT_SHARDS_MAX);
    rp_status status = RP_OK;
    pub_state p;
    memset(&p, 0, sizeof p);
    cJSON *root = cJSON_CreateObject(), *meta = NULL;
    cJSON *shards = root ? cJSON_CreateArray() : NULL;
    char *text = NULL, *index = NULL;
    if (!shards) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory building the checkpoint index");
        goto cleanup;
    }
    for (int k = 0; k < n; k++)
        RP_TRY(read_shard(&p, base, generation, k, n, shards, &meta));
    RP_TRY(check_cover(&p, base));
    bool ok = cJSON_AddStringToObject(root, "crc32", "00000000") &&
              cJSON_AddStringToObject(root, "format", RP_CKPT_INDEX_FORMAT) &&
              add_int(root, "version", 1) && add_int(root, "generation", generation) &&
              cJSON_AddStringToObject(root, "layout", layout ? layout : "") &&
              cJSON_AddItemToObject(root, "shards", shards);
    if (ok) shards = NULL;
    if (ok && meta) {
        ok = cJSON_AddItemToObject(root, "metadata", meta);
        if (ok) meta = NULL;
    }
    for (int i = 0; ok && i < p.n; i++) {
        if (strcmp(p.tensors[i].name, "train/position") || !p.tensors[i].values) continue;
        ok = cJSON_AddItemReferenceToObject(root, "position", p.tensors[i].values);
    }
    cJSON *tensors = ok ? cJSON_AddArrayToObject(root, "tensors") : NULL;
    for (int i = 0; tensors && i < p.n; i++) {
        cJSON *e = tensor_json(&p.tensors[i]);
        if (!e || !cJSON_AddItemToArray(tensors, e)) {
            cJSON_Delete(e);
            tensors = NULL;
        }
    }
    text = tensors ? cJSON_PrintUnformatted(root) : NULL;
    if (!text) {
        status = RP_ERROR(RP_ERR_NOMEM, "out of memory building the checkpoint index");
        goto cleanup;
    }
    size_t len = strlen(text);
    if (len < RP_CKPT_INDEX_CRC_AT + 8 ||
        memcmp(text, RP_CKPT_INDEX_CRC_PREFIX, RP_CKPT_INDEX_CRC_AT) != 0) {
        status = RP_ERROR(RP_ERR_BACKEND, "checkpoint index: cJSON did not print the CRC first");
        goto cleanup;
    }
    /* {"crc32":"XXXXXXXX" : the digits at a fixed place, the CRC of the file with them as '0'. */
    char crc[9];
    crc_text(io_ckpt_crc_update((uint32_t)crc32(0L, Z_NULL, 0), text, len), crc);
    memcpy(text + RP_CKPT_INDEX_CRC_AT, crc, 8);
    index = io_ckpt_join(base, RP_CKPT_INDEX_SUFFIX);
    if (!index) {
        status = rp_last_status();
        goto cleanup;
    }
    core_file_piece piece = {text, len};
    RP_TRY(core_file_write_atomic(index, "checkpoint index", &piece, 1));
    remove_other_generations(base, generation);
cleanup:
    rp_free(index);
    cJSON_free(text);
    cJSON_Delete(shards);
    cJSON_Delete(meta);
    cJSON_Delete(root);
    pub_free(&p);
    return status;
}

/* ---- a worker's pieces of a model (a sharded checkpoint written by every worker) ---------- */

/*
 * Adds, as pieces named prefix + slot + tensor name, the part inside [lo, hi) of each tensor
 * i in [first, last) of params, reading its elements from values (element `base` of the flat
 * list at values[0]); a tensor without elements goes with the range that starts at 0. A
 * member's slice of a dense tensor is a piece of its slab; without `replicated` only those are
 * added.
 */
static rp_status add_range_pieces(rp_checkpoint *ck, const rp_params *params, const char *prefix,
                                  int first, int last, int64_t lo, int64_t hi, const float *values,
                                  int64_t base, bool replicated)
{
    for (int i = first; i < last; i++) {
        const rp_tensor *t = rp_params_at(params, i);
        int axis, rank, members;
        bool sliced = rp_params_shard_of(params, i, &axis, &rank, &members);
        if (!sliced && !replicated) continue;
        int64_t off = rp_params_offset(params, i);
        int64_t from = off > lo ? off : lo, to = off + t->numel < hi ? off + t->numel : hi;
        bool empty_here = t->numel == 0 && lo == 0;
        if (from >= to && !empty_here) continue;
        char name[RP_CHECKPOINT_NAME_MAX + 1];
        RP_CHECK(io_ckpt_full_name(name, prefix, t->name));
        int64_t count = from < to ? to - from : 0, shape[RP_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
        rp_checkpoint_slab slab = {-1, 0, 0};
        if (sliced) {
            slab = (rp_checkpoint_slab){axis, (int64_t)rank * t->shape[axis], t->shape[axis]};
            shape[axis] *= members;
        }
        RP_CHECK(rp_checkpoint_add_slab_piece(ck, name, RP_CHECKPOINT_F32, t->ndim, shape, &slab,
                                              count > 0 ? from - off : 0, count,
                                              count > 0 ? values + (from - base) : NULL));
    }
    return RP_OK;
}

rp_status rp_checkpoint_add_params_pieces(rp_checkpoint *ck, const rp_params *params,
                                          const char *prefix, int64_t lo, int64_t hi,
                                          bool replicated)
{
    if (!ck || !params)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_params_pieces: ck and params must not be NULL");
    int64_t numel = rp_params_numel(params);
    if (rp_params_count(params) > 0 && !rp_params_data(params))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_params_pieces: the parameter list is not finalized");
    if (lo < 0 || hi < lo || hi > numel)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_params_pieces: [%lld, %lld) is not a range of the %lld "
                        "values",
                        (long long)lo, (long long)hi, (long long)numel);
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    const float *values = NULL;
    if (hi > lo) {
        /* Only the range: under ZeRO-3 the rest of the block is not this worker's. */
        values = kernels_staging_view(&stage, k, rp_params_data(params) + lo,
                                      (size_t)(hi - lo) * sizeof(float), true);
        if (!values) return rp_last_status();
    }
    rp_status status = add_range_pieces(ck, params, prefix, 0, rp_params_count(params), lo, hi,
                                        values, lo, replicated);
    kernels_staging_free(&stage);
    return status;
}

rp_status rp_checkpoint_add_optimizer_pieces(rp_checkpoint *ck, const rp_optimizer *opt,
                                             const rp_params *params, const char *prefix,
                                             int64_t lo, int64_t hi, bool replicated, bool steps)
{
    if (!ck || !opt || !params)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_optimizer_pieces: ck, opt and params must not be NULL");
    float *state;
    int slots;
    int64_t olo, ohi;
    RP_CHECK(io_ckpt_optimizer_slots(opt, params, &state, &slots, &olo, &ohi));
    if (lo < olo || hi < lo || hi > ohi)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_optimizer_pieces: [%lld, %lld) is not inside the "
                        "values [%lld, %lld) whose state the optimizer holds",
                        (long long)lo, (long long)hi, (long long)olo, (long long)ohi);
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    const float *values = NULL;
    size_t bytes = (size_t)slots * (size_t)(ohi - olo) * sizeof(float);
    if (bytes > 0 && hi > lo) {
        values = kernels_staging_view(&stage, k, state, bytes, true);
        if (!values) return rp_last_status();
    }
    rp_status status = RP_OK;
    int n_train = rp_params_trainable_count(params);
    for (int s = 0; s < slots && status == RP_OK; s++) {
        char slot[16], slot_prefix[RP_CHECKPOINT_NAME_MAX + 1];
        snprintf(slot, sizeof slot, "slot%d/", s);
        status = io_ckpt_full_name(slot_prefix, prefix, slot);
        if (status == RP_OK)
            status = add_range_pieces(ck, params, slot_prefix, 0, n_train, lo, hi,
                                      values ? values + (int64_t)s * (ohi - olo) : NULL, olo,
                                      replicated);
    }
    kernels_staging_free(&stage);
    RP_CHECK(status);
    if (!steps) return RP_OK;
    char name[RP_CHECKPOINT_NAME_MAX + 1];
    RP_CHECK(io_ckpt_full_name(name, prefix, "steps"));
    int64_t count = rp_optimizer_steps(opt);
    return rp_checkpoint_add_i64(ck, name, 1, &count);
}
