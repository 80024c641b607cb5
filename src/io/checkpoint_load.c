/*
 * checkpoint_load.c - reading checkpoints in the safetensors layout.
 *
 * Reading trusts nothing: the length field, the JSON and every offset are
 * checked before any tensor memory is allocated, so a corrupt header cannot
 * make the reader allocate or read more than the file holds. The CRC-32
 * (see replicator/io.h) is computed while the tensors are read.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "io/checkpoint_internal.h"

/* Offsets up to 2^53 are exact in the doubles cJSON parses numbers into. */
#define MAX_EXACT ((double)((int64_t)1 << 53))

/* Reads exactly n bytes; a short read means the file shrank under us. */
static rp_status read_all(int fd, void *data, size_t n, const char *path)
{
    char *p = data;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return RP_ERROR(RP_ERR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
        if (r == 0) {
            return RP_ERROR(
                RP_ERR_FORMAT,
                "checkpoint %s: truncated: the file ended %zu bytes early while reading", path, n);
        }
        p += r;
        n -= (size_t)r;
    }
    return RP_OK;
}

/*
 * The data section read through one buffer, so that a file of many small
 * tensors costs a few large reads rather than a system call per tensor.
 * Tensors at least as large as the buffer are read straight into place.
 */
#define DATA_BUFFER ((size_t)1 << 20)

typedef struct data_reader {
    int fd;
    const char *path;
    unsigned char *buf; /* [DATA_BUFFER] */
    size_t pos, len;    /* buf[pos..len) is read and not yet handed out */
} data_reader;

/* Hands out the next n bytes of the data section into `out`. */
static rp_status data_read(data_reader *r, void *out, size_t n)
{
    unsigned char *dst = out;
    size_t have = r->len - r->pos;
    if (have >= n) {
        memcpy(dst, r->buf + r->pos, n);
        r->pos += n;
        return RP_OK;
    }
    memcpy(dst, r->buf + r->pos, have);
    dst += have;
    n -= have;
    r->pos = r->len = 0;
    if (n >= DATA_BUFFER) return read_all(r->fd, dst, n, r->path);
    while (r->len < n) {
        ssize_t got = read(r->fd, r->buf + r->len, DATA_BUFFER - r->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return RP_ERROR(RP_ERR_IO, "cannot read checkpoint %s: %s", r->path, strerror(errno));
        if (got == 0) {
            return RP_ERROR(
                RP_ERR_FORMAT,
                "checkpoint %s: truncated: the file ended %zu bytes early while reading", r->path,
                n - r->len);
        }
        r->len += (size_t)got;
    }
    memcpy(dst, r->buf, n);
    r->pos = n;
    return RP_OK;
}

/* One tensor entry of a header, validated, before any data is read. */
typedef struct header_entry {
    const char *name; /* points into the parsed JSON */
    rp_checkpoint_dtype dtype;
    int ndim;
    int64_t shape[RP_MAX_DIMS];
    int64_t begin, end;
    int index; /* position in the header, to keep sorting stable */
} header_entry;

static bool json_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A JSON number that is a non-negative integer no larger than 2^53. */
static bool json_uint(const cJSON *item, int64_t *out)
{
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0.0 && v <= MAX_EXACT) || v != floor(v)) return false;
    *out = (int64_t)v;
    return true;
}

/*
 * Types a safetensors file may hold that replicator does not read: refused as
 * unsupported in a foreign file; in a replicator file they can only come
 * from damage.
 */
static bool known_foreign_dtype(const char *s)
{
    static const char *const names[] = {
        "BOOL",    "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3",
        "F6_E3M2", "I16", "U16", "F16",     "I32",     "U32",     "F64", "C64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i]) == 0) return true;
    }
    return false;
}

/* Checks one "<name>": {"dtype", "shape", "data_offsets"} entry. */
static rp_status parse_entry(const char *path, const cJSON *item, bool strict, header_entry *e)
{
    const char *name = item->string;
    const char *problem = io_ckpt_name_problem(name);
    if (problem)
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: tensor name \"%.64s\" %s", path, name,
                        problem);
    if (!cJSON_IsObject(item)) {
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: entry \"%s\" is not an object", path, name);
    }
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL, *field;
    cJSON_ArrayForEach(field, item)
    {
        const cJSON **slot = strcmp(field->string, "dtype") == 0          ? &dtype
                             : strcmp(field->string, "shape") == 0        ? &shape
                             : strcmp(field->string, "data_offsets") == 0 ? &offsets
                                                                          : NULL;
        if (!slot || *slot) {
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: tensor \"%s\" has an %s field \"%.32s\"",
                            path, name, slot ? "extra" : "unknown", field->string);
        }
        *slot = field;
    }
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offsets)) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: tensor \"%s\" needs a string \"dtype\" and arrays "
                        "\"shape\" and \"data_offsets\"",
                        path, name);
    }
    e->name = name;
    if (!io_ckpt_dtype_parse(dtype->valuestring, &e->dtype)) {
        if (!strict && known_foreign_dtype(dtype->valuestring)) {
            return RP_ERROR(RP_ERR_UNSUPPORTED,
                            "checkpoint %s: tensor \"%s\" has dtype %s; only F32, BF16, I64 and "
                            "U64 are read",
                            path, name, dtype->valuestring);
        }
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: tensor \"%s\" has unknown dtype \"%.16s\"",
                        path, name, dtype->valuestring);
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > RP_MAX_DIMS) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: tensor \"%s\" has %d dimensions, at most %d are allowed",
                        path, name, ndim, RP_MAX_DIMS);
    }
    e->ndim = ndim;
    int d = 0;
    cJSON_ArrayForEach(field, shape)
    {
        if (!json_uint(field, &e->shape[d])) {
            return RP_ERROR(
                RP_ERR_FORMAT,
                "checkpoint %s: tensor \"%s\": dimension %d is not a non-negative integer", path,
                name, d);
        }
        d++;
    }
    size_t esize = io_ckpt_dtype_size(e->dtype);
    int64_t numel = 0;
    if (!io_ckpt_shape_numel(ndim, e->shape, esize, &numel)) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: tensor \"%s\" is impossibly large (its dimensions, zeros "
                        "aside, multiply to more than 2^53 bytes)",
                        path, name);
    }
    int64_t bytes = numel * (int64_t)esize;
    if (cJSON_GetArraySize(offsets) != 2 || !json_uint(cJSON_GetArrayItem(offsets, 0), &e->begin) ||
        !json_uint(cJSON_GetArrayItem(offsets, 1), &e->end) || e->end < e->begin) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: tensor \"%s\": data_offsets must be [begin, end] with 0 <= "
                        "begin <= end",
                        path, name);
    }
    if (e->end - e->begin != bytes) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: tensor \"%s\": its shape needs %lld bytes but data_offsets "
                        "[%lld, %lld] hold %lld",
                        path, name, (long long)bytes, (long long)e->begin, (long long)e->end,
                        (long long)(e->end - e->begin));
    }
    return RP_OK;
}

static int compare_entries(const void *pa, const void *pb)
{
    const header_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return a->index - b->index;
}

static int compare_names(const void *pa, const void *pb)
{
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* Refuses a header that names a tensor twice (cJSON keeps both copies). */
static rp_status check_unique(const char *path, const header_entry *entries, int n)
{
    rp_status status = RP_OK;
    const char **names = rp_alloc((size_t)n * sizeof *names);
    if (!names) return rp_last_status();
    for (int i = 0; i < n; i++)
        names[i] = entries[i].name;
    qsort(names, (size_t)n, sizeof *names, compare_names);
    for (int i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            status =
                RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: tensor \"%s\" appears twice in the header",
                         path, names[i]);
            break;
        }
    }
    rp_free(names);
    return status;
}

/*
 * Validates the tensor entries of the header and sorts them into file order:
 * the first starts at 0 and each begins where the previous one ended, so
 * they tile the buffer with no gap or overlap. *total is the buffer size.
 */
static rp_status parse_entries(const char *path, const cJSON *root, bool strict, header_entry **out,
                               int *out_n, int64_t *total)
{
    rp_status status = RP_OK;
    int n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) n += strcmp(item->string, "__metadata__") != 0;
    header_entry *entries = rp_calloc((size_t)(n > 0 ? n : 1) * sizeof *entries);
    if (!entries) return rp_last_status();
    int k = 0;
    cJSON_ArrayForEach(item, root)
    {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        RP_TRY(parse_entry(path, item, strict, &entries[k]));
        entries[k].index = k;
        k++;
    }
    RP_TRY(check_unique(path, entries, n));
    qsort(entries, (size_t)n, sizeof *entries, compare_entries);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (entries[i].begin != at) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "checkpoint %s: tensor \"%s\" starts at byte %lld of the data, but "
                              "the previous tensor ends at %lld (%s)",
                              path, entries[i].name, (long long)entries[i].begin, (long long)at,
                              entries[i].begin > at ? "a gap" : "an overlap");
            goto cleanup;
        }
        at = entries[i].end;
    }
    *total = at;
    *out = entries;
    *out_n = n;
    return RP_OK;
cleanup:
    rp_free(entries);
    return status;
}

/*
 * The metadata object must map strings to strings. The CRC entry is only
 * valid as the first entry, where the fixed prefix puts it.
 */
static rp_status parse_meta(const char *path, const cJSON *root, bool has_crc, rp_checkpoint *ck)
{
    const cJSON *meta = NULL, *item;
    cJSON_ArrayForEach(item, root)
    {
        if (strcmp(item->string, "__metadata__") != 0) continue;
        if (meta)
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: \"__metadata__\" appears twice", path);
        meta = item;
    }
    if (!meta) return RP_OK;
    if (!cJSON_IsObject(meta)) {
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: \"__metadata__\" is not an object", path);
    }
    bool first = true;
    cJSON_ArrayForEach(item, meta)
    {
        const char *problem = io_ckpt_name_problem(item->string);
        if (problem) {
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: metadata key \"%.64s\" %s", path,
                            item->string, problem);
        }
        if (!cJSON_IsString(item)) {
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: metadata \"%s\" is not a string", path,
                            item->string);
        }
        bool is_crc = strcmp(item->string, RP_CKPT_CRC_KEY) == 0;
        if (is_crc && !(first && has_crc)) {
            return RP_ERROR(RP_ERR_FORMAT,
                            "checkpoint %s: metadata \"%s\" is not in its place at the start of "
                            "the header (damaged header)",
                            path, RP_CKPT_CRC_KEY);
        }
        first = false;
        if (is_crc) continue;
        if (io_ckpt_meta_find(ck, item->string) >= 0) {
            return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: metadata \"%s\" appears twice", path,
                            item->string);
        }
        RP_CHECK(io_ckpt_meta_put(ck, item->string, item->valuestring));
    }
    return RP_OK;
}

/*
 * Finds the CRC at its fixed place: the header starts with RP_CKPT_CRC_PREFIX, then
 * eight lowercase hex digits and a closing quote. Returns false if it is not
 * there; the parsed metadata must then not mention the CRC at all.
 */
static bool find_crc(const char *header, size_t n, uint32_t *crc)
{
    if (n < RP_CKPT_CRC_PREFIX_LEN + RP_CKPT_CRC_DIGITS + 1 ||
        memcmp(header, RP_CKPT_CRC_PREFIX, RP_CKPT_CRC_PREFIX_LEN) != 0) {
        return false;
    }
    const char *d = header + RP_CKPT_CRC_PREFIX_LEN;
    uint32_t v = 0;
    for (int i = 0; i < RP_CKPT_CRC_DIGITS; i++) {
        char c = d[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (x < 0) return false;
        v = (v << 4) | (uint32_t)x;
    }
    if (d[RP_CKPT_CRC_DIGITS] != '"') return false;
    *crc = v;
    return true;
}

/* Bytes a valid JSON text may hold outside strings: no NULs or raw control characters. */
static rp_status check_header_bytes(const char *path, const char *header, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)header[i];
        if (c < 0x20 && !json_is_space((char)c)) {
            return RP_ERROR(RP_ERR_FORMAT,
                            "checkpoint %s: header byte %zu is a control character (0x%02x)", path,
                            i, c);
        }
    }
    if (!io_ckpt_utf8_valid(header, n)) {
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: the header is not valid UTF-8", path);
    }
    return RP_OK;
}

/*
 * cJSON's parser records its last error in a process-wide variable; one lock
 * keeps loads on different threads from racing on it. Headers are small, so
 * the parse is a negligible part of a load.
 */
static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

/* Parses the header as one JSON object followed only by whitespace. */
static rp_status parse_json(const char *path, const char *header, size_t n, cJSON **root)
{
    const char *end = NULL;
    pthread_mutex_lock(&parse_lock);
    *root = cJSON_ParseWithLengthOpts(header, n, &end, 0);
    pthread_mutex_unlock(&parse_lock);
    if (!*root) {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: the header is not valid JSON (error near byte %lld of %zu)",
                        path, end ? (long long)(end - header) : -1LL, n);
    }
    for (const char *p = end; p < header + n; p++) {
        if (!json_is_space(*p)) {
            return RP_ERROR(
                RP_ERR_FORMAT,
                "checkpoint %s: unexpected byte 0x%02x at header byte %lld, after the JSON", path,
                (unsigned char)*p, (long long)(p - header));
        }
    }
    if (!cJSON_IsObject(*root)) {
        return RP_ERROR(RP_ERR_FORMAT, "checkpoint %s: the header is not a JSON object", path);
    }
    if (header[0] != '{') {
        return RP_ERROR(RP_ERR_FORMAT,
                        "checkpoint %s: the header starts with byte 0x%02x; safetensors requires "
                        "'{' first",
                        path, (unsigned char)header[0]);
    }
    return RP_OK;
}

/*
 * Refuses a "\u0000" escape in any string of a header known to be valid JSON.
 * cJSON decodes it into a NUL inside the C string, so "F32\u0000x" would
 * read as the dtype "F32" and "a\u0000b" as the name "a": every string the
 * reader compares would be cut short. No name, dtype or metadata string a
 * writer has reason to produce holds a NUL, so such a header is refused.
 */
static rp_status check_no_nul_escape(const char *path, const char *header, size_t n)
{
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = header[i];
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < n) {
            if (header[i + 1] == 'u' && i + 5 < n && memcmp(header + i + 2, "0000", 4) == 0) {
                return RP_ERROR(RP_ERR_FORMAT,
                                "checkpoint %s: header byte %zu: a \\u0000 escape (a NUL inside a "
                                "name, dtype or metadata string) is not allowed",
                                path, i);
            }
            i++; /* the escaped character, which may be a quote */
        }
    }
    return RP_OK;
}

static rp_status load(rp_checkpoint **out, const char *path, bool strict)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    header_entry *entries = NULL;
    cJSON *root = NULL;
    char *header = NULL;
    int fd = -1;
    int n_entries = 0;

    if (!out || !path)
        return RP_ERROR(RP_ERR_INVALID, "rp_checkpoint_load: ck and path must not be NULL");
    *out = NULL;
    if (!io_ckpt_host_is_little_endian()) {
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_checkpoint_load: %s: big-endian hosts are not supported", path);
    }
    RP_CHECK(core_file_open_regular(path, "checkpoint", &fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot read checkpoint %s: %s", path, strerror(errno));
        goto cleanup;
    }
    int64_t size = (int64_t)st.st_size;
    if (size < 8) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint %s: truncated: expected at least 8 bytes (the header "
                          "length), the file has %lld",
                          path, (long long)size);
        goto cleanup;
    }
    unsigned char len_field[8];
    RP_TRY(read_all(fd, len_field, sizeof len_field, path));
    uint64_t n = io_ckpt_get_le64(len_field);
    if (n > RP_CHECKPOINT_HEADER_MAX) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint %s: header length %llu is over the limit of %d bytes "
                          "(corrupt length field)",
                          path, (unsigned long long)n, RP_CHECKPOINT_HEADER_MAX);
        goto cleanup;
    }
    if ((int64_t)n > size - 8) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint %s: truncated: the header length %llu needs at least %lld "
                          "bytes, the file has %lld",
                          path, (unsigned long long)n, (long long)(8 + n), (long long)size);
        goto cleanup;
    }
    header = rp_alloc(n + 1);
    if (!header) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(read_all(fd, header, n, path));
    header[n] = '\0';
    RP_TRY(check_header_bytes(path, header, n));
    RP_TRY(parse_json(path, header, n, &root));
    RP_TRY(check_no_nul_escape(path, header, n));
    int64_t total = 0;
    RP_TRY(parse_entries(path, root, strict, &entries, &n_entries, &total));
    if (size != 8 + (int64_t)n + total) {
        bool short_file = size < 8 + (int64_t)n + total;
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint %s: %s: expected %lld bytes (8 + %llu header + %lld data), "
                          "the file has %lld",
                          path, short_file ? "truncated" : "trailing bytes after the data",
                          (long long)(8 + n + total), (unsigned long long)n, (long long)total,
                          (long long)size);
        goto cleanup;
    }
    uint32_t stored = 0;
    bool has_crc = find_crc(header, n, &stored);
    if (strict && !has_crc) {
        status =
            RP_ERROR(RP_ERR_FORMAT,
                     "checkpoint %s: no \"%s\" at the start of the header: damaged, or not written "
                     "by replicator (rp_checkpoint_load_safetensors reads other safetensors files)",
                     path, RP_CKPT_CRC_KEY);
        goto cleanup;
    }
    RP_TRY(rp_checkpoint_create(&ck));
    RP_TRY(parse_meta(path, root, has_crc, ck));

    /* CRC over the file as written: the digits read as '0'. */
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    crc = io_ckpt_crc_update(crc, len_field, sizeof len_field);
    if (has_crc) memset(header + RP_CKPT_CRC_PREFIX_LEN, '0', RP_CKPT_CRC_DIGITS);
    crc = io_ckpt_crc_update(crc, header, n);
    data_reader reader = {fd, path, NULL, 0, 0};
    if (n_entries > 0) {
        reader.buf = rp_alloc(DATA_BUFFER);
        if (!reader.buf) {
            status = rp_last_status();
            goto cleanup;
        }
    }
    for (int i = 0; i < n_entries; i++) {
        const header_entry *e = &entries[i];
        ckpt_tensor *t = NULL;
        status = io_ckpt_append(ck, e->name, e->dtype, e->ndim, e->shape, &t);
        if (status == RP_OK) status = data_read(&reader, t->data, t->nbytes);
        if (status != RP_OK) break;
        crc = io_ckpt_crc_update(crc, t->data, t->nbytes);
    }
    rp_free(reader.buf);
    if (status != RP_OK) goto cleanup;
    if (has_crc && crc != stored) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "checkpoint %s: CRC-32 mismatch: the header records %08x, the contents "
                          "give %08x (the file is corrupt)",
                          path, (unsigned)stored, (unsigned)crc);
        goto cleanup;
    }
    *out = ck;
    ck = NULL;
cleanup:
    rp_checkpoint_destroy(ck);
    rp_free(entries);
    cJSON_Delete(root);
    rp_free(header);
    if (fd >= 0) close(fd);
    return status;
}

rp_status rp_checkpoint_load(rp_checkpoint **ck, const char *path)
{
    return load(ck, path, true);
}

rp_status rp_checkpoint_load_safetensors(rp_checkpoint **ck, const char *path)
{
    return load(ck, path, false);
}
