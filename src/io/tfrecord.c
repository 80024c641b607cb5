/*
 * tfrecord.c - TFRecord framing (see tfrecord_internal.h) and CRC-32C.
 *
 * Debian packages no C library for CRC-32C (zlib's crc32 is the other
 * polynomial), so it is computed here, a byte at a time from a 256-entry
 * table: event records are a few dozen bytes each, far from needing more.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "io/tfrecord_internal.h"

#define CRC32C_POLY 0x82f63b78u /* Castagnoli's polynomial, bit-reversed */
#define MASK_DELTA  0xa282ead8u

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t io_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_table_init);
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t io_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + MASK_DELTA;
}

uint32_t io_crc32c_unmask(uint32_t masked)
{
    uint32_t rot = masked - MASK_DELTA;
    return (rot >> 17) | (rot << 15);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

rp_status io_tfrecord_write(FILE *f, const char *name, const void *data, size_t len)
{
    uint8_t head[12], foot[4];
    put_u64(head, (uint64_t)len);
    put_u32(head + 8, io_crc32c_mask(io_crc32c(0, head, 8)));
    put_u32(foot, io_crc32c_mask(io_crc32c(0, data, len)));
    if (fwrite(head, 1, sizeof head, f) != sizeof head || (len && fwrite(data, 1, len, f) != len) ||
        fwrite(foot, 1, sizeof foot, f) != sizeof foot)
        return RP_ERROR(RP_ERR_IO, "cannot write to %s: %s", name, strerror(errno));
    return RP_OK;
}

struct io_tfrecord_reader {
    FILE *f;
    char *path;
    uint64_t size;   /* the file's size when opened */
    uint64_t offset; /* where the next record starts */
    int64_t index;   /* the next record's number, from 0 */
    uint8_t *buf;    /* the last record's data and its CRC */
    size_t cap;
};

rp_status io_tfrecord_open(io_tfrecord_reader **out, const char *path)
{
    if (!out || !path) return RP_ERROR(RP_ERR_INVALID, "io_tfrecord_open: NULL argument");
    *out = NULL;
    io_tfrecord_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a reader for %s", path);
    }
    struct stat st;
    const char *why = NULL;
    r->f = fopen(path, "rb");
    if (!r->f || fstat(fileno(r->f), &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    if (why) {
        rp_status status = RP_ERROR(RP_ERR_IO, "cannot read %s: %s", path, why);
        io_tfrecord_close(r);
        return status;
    }
    r->size = (uint64_t)st.st_size;
    *out = r;
    return RP_OK;
}

/* Reads exactly n bytes; false on a short read (errno says whether it was an error). */
static bool read_exact(io_tfrecord_reader *r, void *p, size_t n)
{
    errno = 0;
    return fread(p, 1, n, r->f) == n;
}

rp_status io_tfrecord_next(io_tfrecord_reader *r, const uint8_t **data, size_t *len)
{
    if (!r || !data || !len) return RP_ERROR(RP_ERR_INVALID, "io_tfrecord_next: NULL argument");
    *data = NULL;
    *len = 0;
    if (r->offset == r->size) return RP_OK;
    long long at = (long long)r->offset, idx = (long long)r->index;
    if (fseeko(r->f, (off_t)r->offset, SEEK_SET) != 0)
        return RP_ERROR(RP_ERR_IO, "cannot read %s: %s", r->path, strerror(errno));
    uint8_t head[12];
    uint64_t left = r->size - r->offset;
    if (left < sizeof head)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: record %lld at byte %lld is truncated: the file ends %llu bytes into "
                        "its 12-byte header",
                        r->path, idx, at, (unsigned long long)left);
    if (!read_exact(r, head, sizeof head))
        return RP_ERROR(errno ? RP_ERR_IO : RP_ERR_FORMAT, "cannot read record %lld of %s: %s", idx,
                        r->path, errno ? strerror(errno) : "the file shrank while being read");
    uint64_t n = get_u64(head);
    uint32_t stored = io_crc32c_unmask(get_u32(head + 8)), computed = io_crc32c(0, head, 8);
    if (stored != computed)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: record %lld at byte %lld: the CRC of its length field does not match "
                        "(stored %08x, computed %08x): the file is corrupt",
                        r->path, idx, at, (unsigned)stored, (unsigned)computed);
    if (n > left - IO_TFRECORD_OVERHEAD)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: record %lld at byte %lld is truncated: it holds %llu bytes of data, "
                        "the file has %llu more",
                        r->path, idx, at, (unsigned long long)n,
                        (unsigned long long)(left - sizeof head));
    if (n + 4 > r->cap) {
        uint8_t *grown = realloc(r->buf, (size_t)n + 4);
        if (!grown)
            return RP_ERROR(RP_ERR_NOMEM, "%s: cannot allocate record %lld's %llu bytes", r->path,
                            idx, (unsigned long long)n);
        r->buf = grown;
        r->cap = (size_t)n + 4;
    }
    if (!read_exact(r, r->buf, (size_t)n + 4))
        return RP_ERROR(errno ? RP_ERR_IO : RP_ERR_FORMAT, "cannot read record %lld of %s: %s", idx,
                        r->path, errno ? strerror(errno) : "the file shrank while being read");
    stored = io_crc32c_unmask(get_u32(r->buf + n));
    computed = io_crc32c(0, r->buf, (size_t)n);
    if (stored != computed)
        return RP_ERROR(RP_ERR_FORMAT,
                        "%s: record %lld at byte %lld: the CRC of its %llu data bytes does not "
                        "match (stored %08x, computed %08x): the file is corrupt",
                        r->path, idx, at, (unsigned long long)n, (unsigned)stored,
                        (unsigned)computed);
    r->offset += n + IO_TFRECORD_OVERHEAD;
    r->index++;
    *data = r->buf;
    *len = (size_t)n;
    return RP_OK;
}

void io_tfrecord_close(io_tfrecord_reader *r)
{
    if (!r) return;
    if (r->f) fclose(r->f);
    free(r->buf);
    free(r->path);
    free(r);
}
