/*
 * checkpoint.c - the in-memory checkpoint: named tensors and metadata,
 * lookups, and the bridges to parameter lists and optimizers. The file
 * format lives in checkpoint_save.c and checkpoint_load.c.
 *
 * Tensors are copied in when added and owned by the checkpoint, each in its
 * own aligned block, so a lookup hands out a pointer that is aligned for its
 * element type whatever the byte offsets in the file were.
 *
 * Parameter values and optimizer state are the kernel table's storage: the
 * bridges see them through one host view of each block (kernels_staging: the
 * block itself on a host table), downloaded before it is copied into the
 * checkpoint and uploaded only after a read has matched every tensor.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <zlib.h>

#include "io/checkpoint_internal.h"
#include "kernels/kernels.h"
#include "nn/params_internal.h"

/*
 * Largest byte size of one tensor. JSON numbers are read as doubles, which
 * hold integers exactly up to 2^53, so no offset in a file may go beyond it.
 */
#define CKPT_BYTES_MAX ((int64_t)1 << 53)

/* ---- small helpers shared with the reader and the writer ---------------- */

/*
 * Python's safetensors refuses a header that is not valid UTF-8, so names
 * and values are checked on the way in, and headers on the way back.
 */
bool io_ckpt_utf8_valid(const char *str, size_t len)
{
    return rp_utf8_valid(str, len);
}

bool rp_utf8_valid(const char *str, size_t len)
{
    if (!str) return len == 0;
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t extra;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (len - i <= extra) return false;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
        i += extra + 1;
    }
    return true;
}

const char *io_ckpt_name_problem(const char *name)
{
    size_t len = strlen(name);
    if (len == 0) return "is empty";
    if (len > RP_CHECKPOINT_NAME_MAX) return "is longer than 255 bytes";
    if (!io_ckpt_utf8_valid(name, len)) return "is not valid UTF-8";
    if (strcmp(name, "__metadata__") == 0) return "is reserved for the metadata";
    return NULL;
}

bool io_ckpt_shape_numel(int ndim, const int64_t *shape, size_t esize, int64_t *numel)
{
    /* The zero dimensions are set aside, so that no order of the others can hide an overflow. */
    int64_t bytes = (int64_t)esize;
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || shape[d] > CKPT_BYTES_MAX) return false;
        if (shape[d] == 0) {
            empty = true;
        } else {
            if (bytes > CKPT_BYTES_MAX / shape[d]) return false;
            bytes *= shape[d];
        }
    }
    *numel = empty ? 0 : bytes / (int64_t)esize;
    return true;
}

/* ---- the name indexes ------------------------------------------------------ */

static const char *tensor_key(const rp_checkpoint *ck, int i)
{
    return ck->tensors[i].name;
}

static const char *meta_key(const rp_checkpoint *ck, int i)
{
    return ck->meta[i].key;
}

int io_ckpt_find(const rp_checkpoint *ck, const char *name)
{
    return io_ckpt_index_find(ck, &ck->tensor_index, tensor_key, name);
}

int io_ckpt_meta_find(const rp_checkpoint *ck, const char *key)
{
    return io_ckpt_index_find(ck, &ck->meta_index, meta_key, key);
}

static char *dup_string(const char *s)
{
    size_t len = strlen(s) + 1;
    char *copy = rp_alloc(len);
    if (copy) memcpy(copy, s, len);
    return copy;
}

/* Grows an array of `size`-byte items to hold at least `need`. */
static rp_status grow(void **items, int *cap, int need, size_t size)
{
    if (need <= *cap) return RP_OK;
    int new_cap = *cap ? *cap * 2 : 16;
    while (new_cap < need)
        new_cap *= 2;
    void *bigger = rp_alloc((size_t)new_cap * size);
    if (!bigger) return rp_last_status();
    if (*items) memcpy(bigger, *items, (size_t)*cap * size);
    rp_free(*items);
    *items = bigger;
    *cap = new_cap;
    return RP_OK;
}

/* "[2, 3]" for an int64 shape, always NUL-terminated. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && len < size; d++) {
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
    }
    if (len < size) snprintf(buf + len, size - len, "]");
    return buf;
}

/* io_ckpt_append, or with `unread` a view's tensor without data (io_ckpt_append_unread). */
static rp_status append(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype, int ndim,
                        const int64_t *shape, bool unread, ckpt_tensor **out)
{
    const char *problem = io_ckpt_name_problem(name);
    if (problem)
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: tensor name \"%.64s\" %s", name, problem);
    size_t esize = io_ckpt_dtype_size(dtype);
    if (esize == 0)
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: tensor \"%s\": unknown dtype %d", name,
                        (int)dtype);
    if (ndim < 0 || ndim > RP_MAX_DIMS || (ndim > 0 && !shape)) {
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: tensor \"%s\": ndim %d is not in 0..%d", name,
                        ndim, RP_MAX_DIMS);
    }
    int64_t numel = 0;
    if (!io_ckpt_shape_numel(ndim, shape, esize, &numel)) {
        char buf[128];
        return RP_ERROR(RP_ERR_INVALID,
                        "checkpoint: tensor \"%s\": bad shape %s (each dimension 0..2^53, and at "
                        "most 2^53 bytes)",
                        name, shape_str(ndim, shape, buf, sizeof buf));
    }
    if (io_ckpt_find(ck, name) >= 0) {
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: a tensor named \"%s\" is already present",
                        name);
    }
    size_t nbytes = (size_t)numel * esize;
    ckpt_tensor t;
    memset(&t, 0, sizeof t);
    if (!unread && ck->n_tensors < ck->n_kept && ck->tensors[ck->n_tensors].nbytes == nbytes) {
        /* The block kept at this position since rp_checkpoint_reset fits: take it over. */
        ckpt_tensor *kept = &ck->tensors[ck->n_tensors];
        t.data = kept->data;
        t.name = strcmp(kept->name, name) == 0 ? kept->name : NULL;
        if (!t.name) rp_free(kept->name);
        kept->data = kept->name = NULL;
    } else {
        io_ckpt_release_kept(ck);
        RP_CHECK(
            grow((void **)&ck->tensors, &ck->cap_tensors, ck->n_tensors + 1, sizeof *ck->tensors));
    }
    t.dtype = dtype;
    t.ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t.shape[d] = shape[d];
    t.numel = numel;
    t.nbytes = nbytes;
    t.unread = unread;
    t.slab.axis = -1;
    if (!t.name) t.name = dup_string(name);
    if (!t.data && !unread) t.data = rp_alloc(t.nbytes);
    if (!t.name || (!t.data && !unread)) {
        rp_free(t.data);
        rp_free(t.name);
        io_ckpt_release_kept(ck);
        return RP_ERR_NOMEM;
    }
    ck->tensors[ck->n_tensors++] = t;
    rp_status status = io_ckpt_index_add(ck, &ck->tensor_index, tensor_key, ck->n_tensors);
    if (status != RP_OK) {
        ck->n_tensors--;
        rp_free(t.data);
        rp_free(t.name);
        return status;
    }
    if (out) *out = &ck->tensors[ck->n_tensors - 1];
    return RP_OK;
}

rp_status io_ckpt_append(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype, int ndim,
                         const int64_t *shape, ckpt_tensor **out)
{
    return append(ck, name, dtype, ndim, shape, false, out);
}

rp_status io_ckpt_append_unread(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                                int ndim, const int64_t *shape)
{
    return append(ck, name, dtype, ndim, shape, true, NULL);
}

void io_ckpt_set_source(rp_checkpoint *ck, const ckpt_source *source, void *ctx)
{
    pthread_mutex_init(&ck->source_mu, NULL);
    ck->source = source;
    ck->source_ctx = ctx;
}

/* Reads unread tensor t whole from the source. Called with source_mu held. */
static rp_status read_unread(const rp_checkpoint *ck, ckpt_tensor *t)
{
    void *data = rp_alloc(t->nbytes);
    if (!data) return rp_last_status();
    rp_status status = ck->source->read(ck->source_ctx, t->name, NULL, 0, t->numel, data);
    if (status != RP_OK) {
        rp_free(data);
        return status;
    }
    t->data = data;
    t->unread = false;
    return RP_OK;
}

/*
 * The view's lazily read tensors are a cache behind a const checkpoint: reading one fills it in,
 * as every reader would see the same bytes.
 */
const void *io_ckpt_data(const rp_checkpoint *ck, int k)
{
    ckpt_tensor *t = &((rp_checkpoint *)ck)->tensors[k];
    if (!ck->source) return t->data;
    pthread_mutex_t *mu = &((rp_checkpoint *)ck)->source_mu;
    pthread_mutex_lock(mu);
    rp_status status = t->unread ? read_unread(ck, t) : RP_OK;
    pthread_mutex_unlock(mu);
    return status == RP_OK ? t->data : NULL;
}

rp_status io_ckpt_read_all(const rp_checkpoint *ck)
{
    for (int k = 0; ck->source && k < ck->n_tensors; k++)
        if (!io_ckpt_data(ck, k)) return rp_last_status();
    return RP_OK;
}

rp_status io_ckpt_read_elems(const rp_checkpoint *ck, int k, const rp_checkpoint_slab *slab,
                             int64_t offset, int64_t count, void *dst)
{
    const ckpt_tensor *t = &ck->tensors[k];
    size_t esize = io_ckpt_dtype_size(t->dtype);
    if (count <= 0) return RP_OK;
    bool unread = false;
    if (ck->source) {
        pthread_mutex_t *mu = &((rp_checkpoint *)ck)->source_mu;
        pthread_mutex_lock(mu);
        unread = t->unread;
        pthread_mutex_unlock(mu);
    }
    /* Only the pieces holding the range are read, and nothing is kept. */
    if (unread) return ck->source->read(ck->source_ctx, t->name, slab, offset, count, dst);
    rp_checkpoint_slab whole = {-1, 0, 0};
    if (!slab || slab->axis < 0) {
        memcpy(dst, (const char *)t->data + (size_t)offset * esize, (size_t)count * esize);
        return RP_OK;
    }
    io_ckpt_slab_copy(t->ndim, t->shape, esize, &whole, 0, t->numel, t->data, slab, offset, count,
                      dst);
    return RP_OK;
}

void io_ckpt_release_kept(rp_checkpoint *ck)
{
    for (int i = ck->n_tensors; i < ck->n_kept; i++) {
        rp_free(ck->tensors[i].data);
        rp_free(ck->tensors[i].name);
        ck->tensors[i].data = ck->tensors[i].name = NULL;
    }
    ck->n_kept = 0;
}

void io_ckpt_pop(rp_checkpoint *ck)
{
    io_ckpt_release_kept(ck);
    ckpt_tensor *t = &ck->tensors[--ck->n_tensors];
    rp_free(t->data);
    rp_free(t->name);
    io_ckpt_index_rebuild(ck, &ck->tensor_index, tensor_key, ck->n_tensors);
}

rp_status io_ckpt_meta_put(rp_checkpoint *ck, const char *key, const char *value)
{
    char *copy = dup_string(value);
    if (!copy) return RP_ERR_NOMEM;
    int i = io_ckpt_meta_find(ck, key);
    if (i >= 0) {
        rp_free(ck->meta[i].value);
        ck->meta[i].value = copy;
        return RP_OK;
    }
    rp_status status = RP_OK;
    char *key_copy = NULL;
    RP_TRY(grow((void **)&ck->meta, &ck->cap_meta, ck->n_meta + 1, sizeof *ck->meta));
    key_copy = dup_string(key);
    if (!key_copy) {
        status = RP_ERR_NOMEM;
        goto cleanup;
    }
    ck->meta[ck->n_meta].key = key_copy;
    ck->meta[ck->n_meta].value = copy;
    ck->n_meta++;
    status = io_ckpt_index_add(ck, &ck->meta_index, meta_key, ck->n_meta);
    if (status != RP_OK) {
        ck->n_meta--;
        goto cleanup;
    }
    return RP_OK;
cleanup:
    rp_free(key_copy);
    rp_free(copy);
    return status;
}

bool io_ckpt_host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* zlib's crc32 takes 32-bit lengths; feed larger buffers in pieces. */
uint32_t io_ckpt_crc_update(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        uInt piece = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, piece);
        p += piece;
        n -= piece;
    }
    return crc;
}

void io_ckpt_put_le64(unsigned char out[8], uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(v >> (8 * i));
}

uint64_t io_ckpt_get_le64(const unsigned char in[8])
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | in[i];
    return v;
}

/* ---- create, destroy, add ------------------------------------------------- */

rp_status rp_checkpoint_create(rp_checkpoint **ck)
{
    if (!ck) return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_create: ck is NULL");
    *ck = rp_calloc(sizeof **ck);
    if (!*ck) return rp_last_status();
    (*ck)->seed = io_ckpt_index_seed(*ck);
    return RP_OK;
}

void rp_checkpoint_destroy(rp_checkpoint *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->n_meta; i++) {
        rp_free(ck->meta[i].value);
        rp_free(ck->meta[i].key);
    }
    rp_free(ck->meta);
    io_ckpt_release_kept(ck);
    for (int i = 0; i < ck->n_tensors; i++) {
        rp_free(ck->tensors[i].data);
        rp_free(ck->tensors[i].name);
    }
    rp_free(ck->tensors);
    rp_free(ck->tensor_index.slots);
    rp_free(ck->meta_index.slots);
    if (ck->source) {
        ck->source->close(ck->source_ctx);
        pthread_mutex_destroy(&ck->source_mu);
    }
    rp_free(ck);
}

void rp_checkpoint_reset(rp_checkpoint *ck)
{
    if (!ck) return;
    for (int i = 0; i < ck->n_meta; i++) {
        rp_free(ck->meta[i].value);
        rp_free(ck->meta[i].key);
    }
    ck->n_meta = 0;
    if (ck->n_tensors > ck->n_kept) ck->n_kept = ck->n_tensors;
    ck->n_tensors = 0;
    io_ckpt_index_rebuild(ck, &ck->tensor_index, tensor_key, 0);
    io_ckpt_index_rebuild(ck, &ck->meta_index, meta_key, 0);
}

rp_status rp_checkpoint_add(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                            int ndim, const int64_t *shape, const void *data)
{
    if (!ck || !name)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_add: ck and name must not be NULL");
    ckpt_tensor *t = NULL;
    RP_CHECK(io_ckpt_append(ck, name, dtype, ndim, shape, &t));
    if (t->nbytes > 0 && !data) {
        long long numel = (long long)t->numel;
        io_ckpt_pop(ck);
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add: tensor \"%s\" has %lld elements but data is NULL", name,
                        numel);
    }
    if (t->nbytes > 0) memcpy(t->data, data, t->nbytes);
    return RP_OK;
}

rp_status rp_checkpoint_add_f32(rp_checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                                const float *data)
{
    return rp_checkpoint_add(ck, name, RP_CHECKPOINT_F32, ndim, shape, data);
}

rp_status rp_checkpoint_add_i64(rp_checkpoint *ck, const char *name, int64_t n, const int64_t *data)
{
    return rp_checkpoint_add(ck, name, RP_CHECKPOINT_I64, 1, &n, data);
}

rp_status rp_checkpoint_add_u64(rp_checkpoint *ck, const char *name, int64_t n,
                                const uint64_t *data)
{
    return rp_checkpoint_add(ck, name, RP_CHECKPOINT_U64, 1, &n, data);
}

rp_status rp_checkpoint_set_meta(rp_checkpoint *ck, const char *key, const char *value)
{
    if (!ck || !key || !value) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_set_meta: ck, key and value must not be NULL");
    }
    const char *problem = io_ckpt_name_problem(key);
    if (problem)
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: metadata key \"%.64s\" %s", key, problem);
    if (strcmp(key, RP_CKPT_CRC_KEY) == 0) {
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: metadata key \"%s\" is reserved", key);
    }
    if (!io_ckpt_utf8_valid(value, strlen(value))) {
        return RP_ERROR(RP_ERR_INVALID,
                        "checkpoint: the value of metadata \"%s\" is not valid UTF-8", key);
    }
    return io_ckpt_meta_put(ck, key, value);
}

/* ---- lookups ---------------------------------------------------------------- */

const void *rp_checkpoint_get(const rp_checkpoint *ck, const char *name, rp_checkpoint_dtype *dtype,
                              int *ndim, int64_t *shape)
{
    if (!ck || !name) {
        RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_get: ck and name must not be NULL");
        return NULL;
    }
    int i = io_ckpt_find(ck, name);
    if (i < 0) {
        RP_ERROR(RP_ERR_INVALID, "checkpoint: no tensor named \"%s\"", name);
        return NULL;
    }
    const ckpt_tensor *t = &ck->tensors[i];
    if (dtype) *dtype = t->dtype;
    if (ndim) *ndim = t->ndim;
    if (shape) {
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
    }
    return io_ckpt_data(ck, i);
}

/* The data of `name` if it has `want` dtype, with its element count. */
static const void *get_typed(const rp_checkpoint *ck, const char *name, rp_checkpoint_dtype want,
                             int *ndim, int64_t *shape, int64_t *n)
{
    rp_checkpoint_dtype dtype;
    const void *data = rp_checkpoint_get(ck, name, &dtype, ndim, shape);
    if (!data) return NULL;
    if (dtype != want) {
        RP_ERROR(RP_ERR_INVALID, "checkpoint: tensor \"%s\" is %s, not %s", name,
                 io_ckpt_dtype_name(dtype), io_ckpt_dtype_name(want));
        return NULL;
    }
    if (n) *n = ck->tensors[io_ckpt_find(ck, name)].numel;
    return data;
}

const float *rp_checkpoint_get_f32(const rp_checkpoint *ck, const char *name, int *ndim,
                                   int64_t *shape)
{
    return get_typed(ck, name, RP_CHECKPOINT_F32, ndim, shape, NULL);
}

const int64_t *rp_checkpoint_get_i64(const rp_checkpoint *ck, const char *name, int64_t *n)
{
    return get_typed(ck, name, RP_CHECKPOINT_I64, NULL, NULL, n);
}

const uint64_t *rp_checkpoint_get_u64(const rp_checkpoint *ck, const char *name, int64_t *n)
{
    return get_typed(ck, name, RP_CHECKPOINT_U64, NULL, NULL, n);
}

const char *rp_checkpoint_get_meta(const rp_checkpoint *ck, const char *key)
{
    if (!ck || !key) {
        RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_get_meta: ck and key must not be NULL");
        return NULL;
    }
    int i = io_ckpt_meta_find(ck, key);
    if (i >= 0) return ck->meta[i].value;
    RP_ERROR(RP_ERR_INVALID, "checkpoint: no metadata entry \"%s\"", key);
    return NULL;
}

int rp_checkpoint_count(const rp_checkpoint *ck)
{
    return ck ? ck->n_tensors : 0;
}

const char *rp_checkpoint_name_at(const rp_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n_tensors ? ck->tensors[i].name : NULL;
}

int rp_checkpoint_meta_count(const rp_checkpoint *ck)
{
    return ck ? ck->n_meta : 0;
}

const char *rp_checkpoint_meta_key_at(const rp_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n_meta ? ck->meta[i].key : NULL;
}

/* ---- models and optimizers ---------------------------------------------------- */

/* Writes prefix + name into buf (RP_CHECKPOINT_NAME_MAX + 1 bytes), or fails. */
rp_status io_ckpt_full_name(char *buf, const char *prefix, const char *name)
{
    int len = snprintf(buf, RP_CHECKPOINT_NAME_MAX + 1, "%s%s", prefix ? prefix : "", name);
    if (len < 0 || len > RP_CHECKPOINT_NAME_MAX) {
        return RP_ERROR(RP_ERR_INVALID, "checkpoint: name \"%s%s\" is longer than %d bytes",
                        prefix ? prefix : "", name, RP_CHECKPOINT_NAME_MAX);
    }
    return RP_OK;
}

/* One tensor a reader expects: its full name, dtype, shape and destination. */
typedef struct ckpt_want {
    char name[RP_CHECKPOINT_NAME_MAX + 1];
    rp_checkpoint_dtype dtype;
    int ndim;
    int64_t shape[RP_MAX_DIMS];
    void *dst;
    /* f32 elements [skip, skip + take) of the slab go to dst; take < 0: all of it. */
    int64_t skip, take;
    /* What of the tensor is wanted: a member's slice of it (axis >= 0), or all of it (-1). */
    rp_checkpoint_slab slab;
    int64_t numel; /* the slab's elements */
} ckpt_want;

/* Problems found while matching a checkpoint to a model, joined with "; ". */
typedef struct ckpt_problems {
    char text[768];
    size_t len;
    int count, omitted;
} ckpt_problems;

static void problem_add(ckpt_problems *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends one problem while it fits whole; later ones are only counted. */
static void problem_add(ckpt_problems *p, const char *fmt, ...)
{
    char item[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    size_t need = strlen(item) + (p->count ? 2 : 0);
    p->count++;
    if (p->omitted || p->len + need >= sizeof p->text) {
        p->omitted++;
        return;
    }
    snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s", p->len ? "; " : "", item);
    p->len += need;
}

/*
 * Checks every wanted tensor (present, dtype, shape) and, under a non-empty
 * prefix, that nothing else is there; copies only if all is well, so a
 * failed read leaves the destination as it was.
 */
static rp_status read_set(const rp_checkpoint *ck, const char *prefix, const ckpt_want *want, int n,
                          const char *what, bool part)
{
    ckpt_problems p;
    memset(&p, 0, sizeof p);
    char a[96], b[96];
    size_t plen = prefix ? strlen(prefix) : 0;
    /* found[k]: tensor k is wanted, so that finding the unexpected ones takes one pass. */
    if (part) plen = 0; /* a part of the model: the rest of the checkpoint is other workers' */
    bool *found = plen > 0 ? rp_calloc((size_t)(ck->n_tensors > 0 ? ck->n_tensors : 1)) : NULL;
    if (plen > 0 && !found) return rp_last_status();
    for (int i = 0; i < n; i++) {
        const ckpt_want *w = &want[i];
        int k = io_ckpt_find(ck, w->name);
        shape_str(w->ndim, w->shape, b, sizeof b);
        if (k < 0) {
            problem_add(&p, "missing %s %s", w->name, b);
            continue;
        }
        if (found) found[k] = true;
        const ckpt_tensor *t = &ck->tensors[k];
        bool same = t->ndim == w->ndim;
        for (int d = 0; same && d < w->ndim; d++)
            same = t->shape[d] == w->shape[d];
        if (t->dtype != w->dtype) {
            problem_add(&p, "%s is %s in the checkpoint, %s in the %s", w->name,
                        io_ckpt_dtype_name(t->dtype), io_ckpt_dtype_name(w->dtype), what);
        } else if (!same) {
            problem_add(&p, "%s has shape %s in the checkpoint, %s in the %s", w->name,
                        shape_str(t->ndim, t->shape, a, sizeof a), b, what);
        }
    }
    for (int k = 0; plen > 0 && k < ck->n_tensors; k++) {
        const ckpt_tensor *t = &ck->tensors[k];
        if (!found[k] && strncmp(t->name, prefix, plen) == 0) {
            problem_add(&p, "unexpected %s %s (not in the %s)", t->name,
                        shape_str(t->ndim, t->shape, a, sizeof a), what);
        }
    }
    rp_free(found);
    if (p.count > 0) {
        char more[32] = "";
        if (p.omitted) snprintf(more, sizeof more, "; and %d more", p.omitted);
        return RP_ERROR(RP_ERR_SHAPE, "checkpoint does not fit the %s (%d problem%s): %s%s", what,
                        p.count, p.count == 1 ? "" : "s", p.text, more);
    }
    for (int i = 0; i < n; i++) {
        int k = io_ckpt_find(ck, want[i].name);
        /* A shard's part (the shape matched, so the range lies inside the slab), or all of it:
           a view reads only the pieces of its source holding the range. */
        bool part = want[i].take >= 0;
        RP_CHECK(io_ckpt_read_elems(ck, k, &want[i].slab, part ? want[i].skip : 0,
                                    part ? want[i].take : want[i].numel, want[i].dst));
    }
    return RP_OK;
}

/*
 * Fills a want from tensor i of a parameter list, as it is held. With `dense`, a member's slice
 * of a dense tensor (rp_params_shard_of) wants its slab of a tensor of the dense shape.
 */
static rp_status want_param(ckpt_want *w, const char *prefix, const rp_params *params, int i,
                            bool dense, float *dst)
{
    const rp_tensor *t = rp_params_at(params, i);
    RP_CHECK(io_ckpt_full_name(w->name, prefix, t->name));
    w->dtype = RP_CHECKPOINT_F32;
    w->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        w->shape[d] = t->shape[d];
    w->dst = dst;
    w->skip = 0;
    w->take = -1;
    w->slab = (rp_checkpoint_slab){-1, 0, 0};
    w->numel = t->numel;
    int axis, rank, members;
    if (dense && rp_params_shard_of(params, i, &axis, &rank, &members)) {
        w->slab = (rp_checkpoint_slab){axis, (int64_t)rank * t->shape[axis], t->shape[axis]};
        w->shape[axis] *= members;
    }
    return RP_OK;
}

rp_status rp_checkpoint_add_params(rp_checkpoint *ck, const rp_params *params, const char *prefix)
{
    if (!ck || !params) {
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_add_params: ck and params must not be NULL");
    }
    int n = rp_params_count(params);
    if (n > 0 && !rp_params_data(params)) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_params: the parameter list is not finalized");
    }
    if (n == 0) return RP_OK;
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    rp_status status = RP_OK;
    const float *values = kernels_staging_view(
        &stage, k, rp_params_data(params), (size_t)rp_params_numel(params) * sizeof(float), true);
    if (!values) return rp_last_status();
    for (int i = 0; i < n; i++) {
        ckpt_want w;
        RP_TRY(want_param(&w, prefix, params, i, false, NULL));
        RP_TRY(rp_checkpoint_add(ck, w.name, RP_CHECKPOINT_F32, w.ndim, w.shape,
                                 values + rp_params_offset(params, i)));
    }
cleanup:
    kernels_staging_free(&stage);
    return status;
}

static rp_status read_params(const rp_checkpoint *ck, rp_params *params, const char *prefix,
                             bool part)
{
    if (!ck || !params) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_read_params: ck and params must not be NULL");
    }
    int n = rp_params_count(params);
    if (n > 0 && !rp_params_data(params)) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_read_params: the parameter list is not finalized");
    }
    rp_status status = RP_OK;
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    size_t bytes = (size_t)rp_params_numel(params) * sizeof(float);
    float *values = NULL;
    ckpt_want *want = rp_alloc((size_t)(n > 0 ? n : 1) * sizeof *want);
    if (!want) return rp_last_status();
    if (n > 0) {
        /* Downloaded too, so that the view holds the model's values wherever no want lands. */
        values = kernels_staging_view(&stage, k, rp_params_data(params), bytes, true);
        if (!values) {
            status = rp_last_status();
            goto cleanup;
        }
    }
    /* Values held in part (ZeRO-3): a trainable tensor's elements inside the shard only, so a
       sharded checkpoint's pieces outside it are never read; every tensor is still checked. */
    int64_t lo = 0, hi = 0, P = rp_params_trainable_numel(params);
    bool sharded = params_value_shard(params, &lo, &hi);
    for (int i = 0; i < n; i++) {
        rp_tensor *t = rp_params_at(params, i);
        int64_t off = rp_params_offset(params, i);
        RP_TRY(want_param(&want[i], prefix, params, i, true, values + off));
        if (!sharded || off >= P) continue;
        int64_t a = off > lo ? off : lo, b = off + t->numel < hi ? off + t->numel : hi;
        want[i].skip = b > a ? a - off : 0;
        want[i].take = b > a ? b - a : 0;
        want[i].dst = values + off + want[i].skip;
    }
    RP_TRY(read_set(ck, prefix, want, n, "model", part));
    if (n > 0) kernels_staging_commit(k, rp_params_data(params), values, bytes);
    if (sharded) status = params_values_replaced(params);
cleanup:
    kernels_staging_free(&stage);
    rp_free(want);
    return status;
}

/*
 * Slots of the optimizer's state block, checked against the parameter list: slots x the
 * optimizer's range [lo, hi) of the trainable values (all of them unless sharded).
 */
rp_status io_ckpt_optimizer_slots(const rp_optimizer *opt, const rp_params *params, float **state,
                                  int *slots, int64_t *lo, int64_t *hi)
{
    int64_t numel = 0;
    int64_t trainable = rp_params_trainable_numel(params);
    *state = rp_optimizer_state(opt, &numel);
    rp_optimizer_range(opt, lo, hi);
    *slots = rp_optim_slots(rp_optimizer_config(opt));
    if (*hi > trainable || numel != (int64_t)*slots * (*hi - *lo) || (numel > 0 && !*state)) {
        return RP_ERROR(RP_ERR_INVALID,
                        "checkpoint: optimizer state of %lld floats (range [%lld, %lld)) does not "
                        "fit %lld trainable values",
                        (long long)numel, (long long)*lo, (long long)*hi, (long long)trainable);
    }
    return RP_OK;
}

/*
 * Fills want[0..slots*trainable) with the state tensors and want[last] with the step count. A
 * sharded optimizer's range [lo, hi) takes each tensor's part inside it (none for the others,
 * which are still checked).
 */
static rp_status optimizer_wants(ckpt_want *want, const rp_params *params, const char *prefix,
                                 float *state, int slots, int64_t lo, int64_t hi, bool dense,
                                 int64_t *steps)
{
    int n_train = rp_params_trainable_count(params);
    int64_t len = hi - lo;
    int w = 0;
    for (int k = 0; k < slots; k++) {
        char slot_prefix[RP_CHECKPOINT_NAME_MAX + 1];
        char slot[16];
        snprintf(slot, sizeof slot, "slot%d/", k);
        RP_CHECK(io_ckpt_full_name(slot_prefix, prefix, slot));
        for (int i = 0; i < n_train; i++) {
            const rp_tensor *t = rp_params_at(params, i);
            int64_t off = rp_params_offset(params, i);
            int64_t from = off > lo ? off : lo, to = off + t->numel < hi ? off + t->numel : hi;
            ckpt_want *x = &want[w++];
            RP_CHECK(want_param(x, slot_prefix, params, i, dense, NULL));
            x->skip = from < to ? from - off : 0;
            x->take = from < to ? to - from : 0;
            x->dst = from < to ? state + (int64_t)k * len + (from - lo) : NULL;
        }
    }
    ckpt_want *last = &want[w];
    RP_CHECK(io_ckpt_full_name(last->name, prefix, "steps"));
    last->dtype = RP_CHECKPOINT_I64;
    last->ndim = 1;
    last->shape[0] = 1;
    last->dst = steps;
    last->skip = 0;
    last->take = -1;
    last->slab = (rp_checkpoint_slab){-1, 0, 0};
    last->numel = 1;
    return RP_OK;
}

rp_status rp_checkpoint_add_optimizer(rp_checkpoint *ck, const rp_optimizer *opt,
                                      const rp_params *params, const char *prefix)
{
    if (!ck || !opt || !params) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_optimizer: ck, opt and params must not be NULL");
    }
    rp_status status = RP_OK;
    float *state;
    int slots;
    int64_t lo, hi;
    RP_CHECK(io_ckpt_optimizer_slots(opt, params, &state, &slots, &lo, &hi));
    int64_t trainable = rp_params_trainable_numel(params);
    if (lo != 0 || hi != trainable)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_add_optimizer: the optimizer holds the state of values "
                        "[%lld, %lld) of %lld only (sharded); a checkpoint stores the whole "
                        "state: gather it first (rp_replica_optimizer_fetch)",
                        (long long)lo, (long long)hi, (long long)trainable);
    int n = slots * rp_params_trainable_count(params) + 1;
    int64_t steps = rp_optimizer_steps(opt);
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    float *values = NULL;
    size_t bytes = (size_t)slots * (size_t)(hi - lo) * sizeof(float);
    ckpt_want *want = rp_alloc((size_t)n * sizeof *want);
    if (!want) return rp_last_status();
    if (bytes > 0) {
        values = kernels_staging_view(&stage, k, state, bytes, true);
        if (!values) {
            status = rp_last_status();
            goto cleanup;
        }
    }
    RP_TRY(optimizer_wants(want, params, prefix, values, slots, lo, hi, false, &steps));
    for (int i = 0; i < n; i++) {
        RP_TRY(rp_checkpoint_add(ck, want[i].name, want[i].dtype, want[i].ndim, want[i].shape,
                                 want[i].dst));
    }
cleanup:
    kernels_staging_free(&stage);
    rp_free(want);
    return status;
}

static rp_status read_optimizer(const rp_checkpoint *ck, rp_optimizer *opt, const rp_params *params,
                                const char *prefix, bool part)
{
    if (!ck || !opt || !params) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_read_optimizer: ck, opt and params must not be NULL");
    }
    rp_status status = RP_OK;
    float *state;
    int slots;
    int64_t lo, hi;
    RP_CHECK(io_ckpt_optimizer_slots(opt, params, &state, &slots, &lo, &hi));
    int n = slots * rp_params_trainable_count(params) + 1;
    int64_t steps = 0;
    const kernels_table *k = kernels_active();
    kernels_staging stage = {0};
    float *values = NULL;
    size_t bytes = (size_t)slots * (size_t)(hi - lo) * sizeof(float);
    ckpt_want *want = rp_alloc((size_t)n * sizeof *want);
    if (!want) return rp_last_status();
    if (bytes > 0) {
        values = kernels_staging_view(&stage, k, state, bytes, true);
        if (!values) {
            status = rp_last_status();
            goto cleanup;
        }
    }
    RP_TRY(optimizer_wants(want, params, prefix, values, slots, lo, hi, true, &steps));
    RP_TRY(read_set(ck, prefix, want, n, "optimizer", part));
    if (bytes > 0) kernels_staging_commit(k, state, values, bytes);
    rp_optimizer_set_steps(opt, steps);
cleanup:
    kernels_staging_free(&stage);
    rp_free(want);
    return status;
}

rp_status rp_checkpoint_read_params(const rp_checkpoint *ck, rp_params *params, const char *prefix)
{
    return read_params(ck, params, prefix, false);
}

rp_status rp_checkpoint_read_params_part(const rp_checkpoint *ck, rp_params *params,
                                         const char *prefix)
{
    return read_params(ck, params, prefix, true);
}

rp_status rp_checkpoint_read_optimizer(const rp_checkpoint *ck, rp_optimizer *opt,
                                       const rp_params *params, const char *prefix)
{
    return read_optimizer(ck, opt, params, prefix, false);
}

rp_status rp_checkpoint_read_optimizer_part(const rp_checkpoint *ck, rp_optimizer *opt,
                                            const rp_params *params, const char *prefix)
{
    return read_optimizer(ck, opt, params, prefix, true);
}
