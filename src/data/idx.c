/*
 * idx.c - IDX files (the format of MNIST and Fashion-MNIST) and the loaders
 * built on them.
 *
 * An IDX file is a 4-byte magic (00 00 <type> <ndim>), ndim big-endian 32-bit
 * dimensions, then the elements in row-major order. Files are read through
 * zlib's gzopen/gzread, which detects the gzip magic and reads plain files
 * unchanged, so every check below applies to the decompressed content. That
 * matters for Debian's dataset-fashion-mnist, whose .gz files were
 * recompressed and so differ byte for byte from upstream's while holding the
 * same data.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "replicator/data.h"

#define IDX_TYPE_U8    0x08
#define IDX_MAX_DIMS   4
#define IDX_MAX_ELEMS  (((uint64_t)1 << 31) - 1)
#define IDX_READ_CHUNK ((size_t)1 << 22)
#define IDX_GZ_BUFFER  (1u << 17)
#define IDX_PATH_MAX   4096

/* The name of an IDX element type code, for error messages. */
static const char *idx_type_name(int type)
{
    switch (type) {
    case 0x08:
        return "unsigned byte";
    case 0x09:
        return "signed byte";
    case 0x0B:
        return "int16";
    case 0x0C:
        return "int32";
    case 0x0D:
        return "float32";
    case 0x0E:
        return "float64";
    default:
        return "unknown";
    }
}

/* Writes "10000x28x28" into buf and returns buf. */
static const char *idx_dims_str(const uint64_t *dims, int ndim, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < size; i++) {
        int k =
            snprintf(buf + used, size - used, i ? "x%llu" : "%llu", (unsigned long long)dims[i]);
        if (k < 0) break;
        used += (size_t)k;
    }
    return buf;
}

/*
 * Turns the gzFile's pending error into a status: an operating-system read
 * failure is RP_ERR_IO, anything zlib found wrong in the stream is
 * RP_ERR_FORMAT. `what` says which part of the file was being read.
 */
static rp_status idx_read_error(gzFile f, const char *path, const char *what)
{
    int saved_errno = errno; /* zlib's own message repeats the path; strerror does not */
    int zerr = Z_OK;
    const char *msg = gzerror(f, &zerr);
    if (zerr == Z_ERRNO)
        return RP_ERROR(RP_ERR_IO, "%s: cannot read %s: %s", path, what, strerror(saved_errno));
    return RP_ERROR(RP_ERR_FORMAT, "%s: corrupt gzip stream while reading %s: %s", path, what,
                    msg ? msg : "unknown zlib error");
}

/*
 * Reads up to `len` bytes into buf, stopping early only at the end of the
 * (decompressed) data; *got says how many arrived. A read error or a corrupt
 * stream is an error. A gzip stream that simply stops short is not an error
 * here (zlib hands over what it could decode): the caller compares *got with
 * what it needs and asks idx_gzip_cut() for the reason.
 */
static rp_status idx_read_bytes(gzFile f, const char *path, void *buf, size_t len, size_t *got,
                                const char *what)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > IDX_READ_CHUNK) want = IDX_READ_CHUNK;
        int n = gzread(f, p + *got, (unsigned)want);
        if (n < 0) return idx_read_error(f, path, what);
        if (n == 0) break;
        *got += (size_t)n;
    }
    return RP_OK;
}

/*
 * Reads the `total` data bytes into a new buffer (*out, rp_free'd by the caller; NULL on error),
 * *got saying how many arrived. When `sized` (a plain regular file whose size matched the header)
 * the buffer is allocated whole at once. Otherwise the header's count is not trusted with the
 * allocation, since a few bytes of gzip can announce 2 GiB: the buffer starts at one read chunk
 * and doubles while data keeps coming, so memory follows what the stream really holds.
 */
static rp_status idx_read_data(gzFile f, const char *path, size_t total, bool sized,
                               const char *dstr, uint8_t **out, size_t *got)
{
    size_t cap = sized || total < IDX_READ_CHUNK ? total : IDX_READ_CHUNK;
    uint8_t *buf = rp_alloc(cap);
    *out = NULL;
    *got = 0;
    for (;;) {
        if (!buf)
            return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate %zu bytes for IDX data (dims %s)",
                            path, cap, dstr);
        size_t n = 0;
        rp_status status = idx_read_bytes(f, path, buf + *got, cap - *got, &n, "the IDX data");
        *got += n;
        if (status != RP_OK || *got < cap || cap == total) {
            if (status == RP_OK)
                *out = buf;
            else
                rp_free(buf);
            return status;
        }
        size_t bigger = cap > total / 2 ? total : 2 * cap;
        uint8_t *grown = rp_alloc(bigger);
        if (grown) memcpy(grown, buf, *got);
        rp_free(buf);
        buf = grown;
        cap = bigger;
    }
}

/* True if the last read stopped because a gzip stream ended before its end. */
static int idx_gzip_cut(gzFile f)
{
    int zerr = Z_OK;
    gzerror(f, &zerr);
    return zerr == Z_BUF_ERROR;
}

/* Counts the bytes left in the file (stopping at the first error). */
static rp_status idx_count_trailing(gzFile f, const char *path, uint64_t *extra)
{
    uint8_t scratch[4096];
    *extra = 0;
    for (;;) {
        int n = gzread(f, scratch, sizeof scratch);
        if (n < 0) return idx_read_error(f, path, "past the end of the data");
        if (n == 0) return RP_OK;
        *extra += (uint64_t)n;
    }
}

rp_status rp_idx_read(const char *path, uint8_t **data, int *ndim, int dims[4])
{
    rp_status status = RP_OK;
    gzFile f = NULL;
    uint8_t *buf = NULL;
    uint8_t head[4 + 4 * IDX_MAX_DIMS];
    uint64_t udims[IDX_MAX_DIMS] = {0};
    char dstr[96];
    size_t got = 0;

    if (data) *data = NULL;
    if (ndim) *ndim = 0;
    if (dims) memset(dims, 0, IDX_MAX_DIMS * sizeof dims[0]);
    if (!path || !data || !ndim || !dims)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_idx_read: NULL argument (path %s, data %s, ndim %s, dims %s)",
                        path ? "set" : "NULL", data ? "set" : "NULL", ndim ? "set" : "NULL",
                        dims ? "set" : "NULL");

    /* A FIFO or device is refused before gzopen could block on it. */
    int fd = -1;
    RP_TRY(core_file_open_regular(path, "IDX file", &fd));
    f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        status = RP_ERROR(RP_ERR_NOMEM, "cannot open IDX file %s: out of memory", path);
        goto cleanup;
    }
    gzbuffer(f, IDX_GZ_BUFFER);

    /* The magic: two zero bytes, the element type, the number of dimensions. */
    RP_TRY(idx_read_bytes(f, path, head, 4, &got, "the IDX magic"));
    if (got < 4) {
        status =
            RP_ERROR(RP_ERR_FORMAT,
                     "%s: not an IDX file: it holds %zu byte%s%s, expected at least the "
                     "4-byte magic 00 00 08 <ndim>",
                     path, got, got == 1 ? "" : "s", gzdirect(f) ? "" : " after decompression");
        goto cleanup;
    }
    if (head[0] != 0 || head[1] != 0) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: not an IDX file: bad magic %02x %02x %02x %02x, expected 00 00 08 "
                          "<ndim>",
                          path, head[0], head[1], head[2], head[3]);
        goto cleanup;
    }
    if (head[2] != IDX_TYPE_U8) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: IDX element type 0x%02x (%s) is not supported, only 0x08 "
                          "(unsigned byte)",
                          path, head[2], idx_type_name(head[2]));
        goto cleanup;
    }
    int nd = head[3];
    if (nd < 1 || nd > IDX_MAX_DIMS) {
        status = RP_ERROR(RP_ERR_FORMAT, "%s: IDX header declares %d dimensions, expected 1 to %d",
                          path, nd, IDX_MAX_DIMS);
        goto cleanup;
    }

    /* The dimensions, big-endian, each positive, with a sane product. */
    size_t head_bytes = 4 + 4 * (size_t)nd;
    RP_TRY(idx_read_bytes(f, path, head + 4, 4 * (size_t)nd, &got, "the IDX dimensions"));
    if (got < 4 * (size_t)nd) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: truncated IDX header: expected %zu bytes (magic and %d dimensions), "
                          "found %zu",
                          path, head_bytes, nd, 4 + got);
        goto cleanup;
    }
    for (int i = 0; i < nd; i++) {
        const uint8_t *b = head + 4 + 4 * i;
        udims[i] = (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
    }
    idx_dims_str(udims, nd, dstr, sizeof dstr);
    uint64_t total = 1;
    for (int i = 0; i < nd; i++) {
        if (udims[i] == 0) {
            status = RP_ERROR(RP_ERR_FORMAT, "%s: IDX dimension %d is 0 (dims %s)", path, i, dstr);
            goto cleanup;
        }
        /* Both factors are below 2^32 and total stays below 2^31, so this cannot overflow. */
        total *= udims[i];
        if (total > IDX_MAX_ELEMS) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s: IDX dims %s hold 2^31 or more elements, more than supported",
                              path, dstr);
            goto cleanup;
        }
    }

    /*
     * For a plain file the size tells the outcome before the data is read, so
     * a corrupt header cannot make us allocate up to 2 GiB for nothing. The
     * reads below check again, and are the only check for gzip files, whose
     * buffer grows with the data instead (idx_read_data).
     */
    struct stat st;
    bool sized = gzdirect(f) && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (sized) {
        uint64_t size = (uint64_t)st.st_size;
        uint64_t found = size > head_bytes ? size - head_bytes : 0;
        if (found < total) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s: truncated IDX file: expected %llu data bytes after the %zu-byte "
                              "header (dims %s), found %llu",
                              path, (unsigned long long)total, head_bytes, dstr,
                              (unsigned long long)found);
            goto cleanup;
        }
        if (found > total) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s: %llu unexpected trailing byte%s after the %llu data bytes that "
                              "the IDX header announces (dims %s)",
                              path, (unsigned long long)(found - total),
                              found - total == 1 ? "" : "s", (unsigned long long)total, dstr);
            goto cleanup;
        }
    }

    /* The data: exactly `total` bytes, no fewer and no more. */
    RP_TRY(idx_read_data(f, path, (size_t)total, sized, dstr, &buf, &got));
    if (got < total) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: truncated IDX file: expected %llu data bytes after the %zu-byte "
                          "header (dims %s), found %zu%s",
                          path, (unsigned long long)total, head_bytes, dstr, got,
                          idx_gzip_cut(f) ? " (the gzip stream ends early)" : "");
        goto cleanup;
    }
    uint64_t extra = 0;
    RP_TRY(idx_count_trailing(f, path, &extra));
    if (extra > 0) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: %llu unexpected trailing byte%s after the %llu data bytes that the "
                          "IDX header announces (dims %s)",
                          path, (unsigned long long)extra, extra == 1 ? "" : "s",
                          (unsigned long long)total, dstr);
        goto cleanup;
    }
    if (idx_gzip_cut(f)) {
        /* All data arrived, but the gzip trailer (CRC and length) is missing or cut. */
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: truncated gzip stream: the data is complete but the gzip trailer "
                          "is missing, so its checksum cannot be verified",
                          path);
        goto cleanup;
    }

    *data = buf;
    buf = NULL;
    *ndim = nd;
    for (int i = 0; i < nd; i++)
        dims[i] = (int)udims[i];

cleanup:
    rp_free(buf);
    if (f) gzclose(f);
    return status;
}

rp_status rp_idx_write(const char *path, const uint8_t *data, int ndim, const int *dims)
{
    if (!path || !*path || !data || !dims)
        return RP_ERROR(RP_ERR_INVALID, "rp_idx_write: path %s, data %s, dims %s",
                        path ? (*path ? path : "empty") : "NULL", data ? "set" : "NULL",
                        dims ? "set" : "NULL");
    if (ndim < 1 || ndim > IDX_MAX_DIMS)
        return RP_ERROR(RP_ERR_INVALID, "rp_idx_write %s: ndim is %d, expected 1 to %d", path, ndim,
                        IDX_MAX_DIMS);
    uint8_t head[4 + 4 * IDX_MAX_DIMS] = {0, 0, IDX_TYPE_U8, (uint8_t)ndim};
    uint64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 1)
            return RP_ERROR(RP_ERR_INVALID, "rp_idx_write %s: dims[%d] is %d, expected >= 1", path,
                            i, dims[i]);
        total *= (uint64_t)dims[i]; /* stays below 2^62: each factor is below 2^31 */
        if (total > IDX_MAX_ELEMS)
            return RP_ERROR(
                RP_ERR_INVALID,
                "rp_idx_write %s: the dims hold 2^31 or more elements (dims[%d] is %d), "
                "more than rp_idx_read accepts",
                path, i, dims[i]);
        uint32_t d = (uint32_t)dims[i];
        uint8_t *b = head + 4 + 4 * i;
        b[0] = (uint8_t)(d >> 24);
        b[1] = (uint8_t)(d >> 16);
        b[2] = (uint8_t)(d >> 8);
        b[3] = (uint8_t)d;
    }
    core_file_piece pieces[2] = {{head, 4 + 4 * (size_t)ndim}, {data, (size_t)total}};
    return core_file_write_atomic(path, "IDX file", pieces, 2);
}

rp_status rp_dataset_load_idx(rp_dataset **ds, const char *images_path, const char *labels_path,
                              int num_classes, const char *name)
{
    rp_status status = RP_OK;
    uint8_t *pixels = NULL;
    uint8_t *raw_labels = NULL;
    int32_t *labels = NULL;
    rp_dataset *out = NULL;
    int img_nd = 0, lab_nd = 0;
    int img_dims[4], lab_dims[4];

    if (!ds) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_idx: ds is NULL");
    *ds = NULL;
    if (!images_path || !labels_path)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_idx: %s path is NULL",
                        images_path ? "labels" : "images");
    if (num_classes < 1 || num_classes > 256)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_load_idx: num_classes %d is out of range, expected 1 to 256 "
                        "(labels are bytes)",
                        num_classes);

    RP_TRY(rp_idx_read(images_path, &pixels, &img_nd, img_dims));
    if (img_nd != 3 && img_nd != 4) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: an image file must be 3-D [n, h, w] or 4-D [n, h, w, c], found "
                          "%d-D with first dimension %d",
                          images_path, img_nd, img_dims[0]);
        goto cleanup;
    }
    RP_TRY(rp_idx_read(labels_path, &raw_labels, &lab_nd, lab_dims));
    if (lab_nd != 1) {
        status = RP_ERROR(RP_ERR_FORMAT,
                          "%s: a label file must be 1-D [n], found %d-D with first dimension %d",
                          labels_path, lab_nd, lab_dims[0]);
        goto cleanup;
    }
    if (lab_dims[0] != img_dims[0]) {
        status = RP_ERROR(RP_ERR_FORMAT, "%s holds %d images but %s holds %d labels", images_path,
                          img_dims[0], labels_path, lab_dims[0]);
        goto cleanup;
    }

    int64_t n = img_dims[0];
    labels = rp_alloc((size_t)n * sizeof *labels);
    if (!labels) {
        status =
            RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate %lld labels", labels_path, (long long)n);
        goto cleanup;
    }
    for (int64_t i = 0; i < n; i++) {
        if (raw_labels[i] >= num_classes) {
            status = RP_ERROR(RP_ERR_FORMAT, "%s: label of sample %lld is %d, out of range [0, %d)",
                              labels_path, (long long)i, raw_labels[i], num_classes);
            goto cleanup;
        }
        labels[i] = raw_labels[i];
    }

    out = rp_calloc(sizeof *out);
    if (!out) {
        status = RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate the dataset", images_path);
        goto cleanup;
    }
    out->n = n;
    out->h = img_dims[1];
    out->w = img_dims[2];
    out->c = img_nd == 4 ? img_dims[3] : 1;
    out->num_classes = num_classes;
    out->pixels = pixels;
    out->labels = labels;
    snprintf(out->name, sizeof out->name, "%s", name ? name : "idx");
    pixels = NULL;
    labels = NULL;
    *ds = out;
    out = NULL;

cleanup:
    rp_free(out);
    rp_free(labels);
    rp_free(raw_labels);
    rp_free(pixels);
    return status;
}

/* True if a regular file (or anything stat() accepts) exists at path. */
static int idx_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/*
 * Finds dir/file or dir/file.gz and writes the one found into out. A missing
 * file is an RP_ERR_IO that names both candidates and, for the Debian default
 * directory, the package that provides them.
 */
static rp_status mnist_find(char *out, size_t size, const char *dir, const char *file,
                            int is_default)
{
    int k = snprintf(out, size, "%s/%s", dir, file);
    if (k < 0 || (size_t)k + 3 >= size)
        return RP_ERROR(RP_ERR_INVALID, "mnist: directory path is too long: %s", dir);
    if (idx_exists(out)) return RP_OK;
    snprintf(out, size, "%s/%s.gz", dir, file);
    if (idx_exists(out)) return RP_OK;
    return RP_ERROR(RP_ERR_IO, "mnist: cannot find %s or %s.gz in %s%s", file, file, dir,
                    is_default ? " (install the data with `apt-get install dataset-fashion-mnist`)"
                               : "");
}

rp_status rp_dataset_load_mnist(rp_dataset **ds, const char *dir, const char *split)
{
    char images[IDX_PATH_MAX];
    char labels[IDX_PATH_MAX];
    char name[64];
    const char *prefix;

    if (!ds) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_mnist: ds is NULL");
    *ds = NULL;
    if (!split) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_load_mnist: split is NULL");
    if (!strcmp(split, "train")) {
        prefix = "train";
    } else if (!strcmp(split, "test") || !strcmp(split, "t10k")) {
        prefix = "t10k";
        split = "test";
    } else {
        return RP_ERROR(RP_ERR_INVALID,
                        "mnist: unknown split \"%s\", expected \"train\" or \"test\"", split);
    }
    if (!dir) dir = rp_env_get()->data_dir;
    if (!dir || !*dir) dir = RP_FASHION_MNIST_DIR;

    /* Ignore trailing slashes when comparing with the default and naming the dataset. */
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    int is_default =
        len == strlen(RP_FASHION_MNIST_DIR) && !strncmp(dir, RP_FASHION_MNIST_DIR, len);
    size_t base = len;
    while (base > 0 && dir[base - 1] != '/')
        base--;
    if (base == len || (len - base == 1 && dir[base] == '.'))
        snprintf(name, sizeof name, "mnist/%s", split);
    else
        snprintf(name, sizeof name, "%.*s/%s", (int)(len - base), dir + base, split);

    char file[64];
    snprintf(file, sizeof file, "%s-images-idx3-ubyte", prefix);
    RP_CHECK(mnist_find(images, sizeof images, dir, file, is_default));
    snprintf(file, sizeof file, "%s-labels-idx1-ubyte", prefix);
    RP_CHECK(mnist_find(labels, sizeof labels, dir, file, is_default));
    return rp_dataset_load_idx(ds, images, labels, 10, name);
}
