/*
 * tfrecord_internal.h - the TFRecord framing of TensorBoard's event files
 * (tensorboard.c writes it; the tests read it back) and the CRC-32C it
 * checks with.
 *
 * A file is a sequence of records, each
 *
 *     uint64  length            little-endian
 *     uint32  masked CRC-32C of the 8 length bytes, little-endian
 *     byte    data[length]
 *     uint32  masked CRC-32C of the data, little-endian
 *
 * where mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (TensorFlow's
 * format, documented in tensorflow/python/lib/io/python_io.py: a CRC stored
 * beside the bytes it covers is masked so that the CRC of a file holding
 * CRCs stays well-behaved).
 */
#ifndef RP_IO_TFRECORD_INTERNAL_H
#define RP_IO_TFRECORD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "replicator/core.h"

/* Bytes a record adds around its data: the length, its CRC, the data's CRC. */
#define IO_TFRECORD_OVERHEAD 16

/*
 * Continues a CRC-32C (Castagnoli, reflected polynomial 0x82f63b78, as in
 * iSCSI and TensorFlow) over n bytes: start with crc 0;
 * io_crc32c(0, "123456789", 9) is 0xe3069283. Thread-safe.
 */
uint32_t io_crc32c(uint32_t crc, const void *data, size_t n);

/* TensorFlow's mask of a stored CRC, and its inverse. */
uint32_t io_crc32c_mask(uint32_t crc);
uint32_t io_crc32c_unmask(uint32_t masked);

/*
 * Writes one record of `len` bytes at `data` to f (buffered: the caller
 * flushes). `name` (the file's path) goes into the error message.
 * Errors: RP_ERR_IO naming the file and the system's reason; after one, part
 * of the record may be in the file.
 */
rp_status io_tfrecord_write(FILE *f, const char *name, const void *data, size_t len);

/* Reads records from a file, one at a time, checking both CRCs of each. */
typedef struct io_tfrecord_reader io_tfrecord_reader;

/*
 * Opens `path`. Errors: RP_ERR_INVALID (NULL), RP_ERR_IO (naming the path and
 * the reason; "not a regular file" for a directory), RP_ERR_NOMEM.
 */
rp_status io_tfrecord_open(io_tfrecord_reader **r, const char *path);

/*
 * The next record: *data (owned by the reader, valid until the next call)
 * and *len; at the end of the file *data is NULL and *len 0. Errors:
 * RP_ERR_FORMAT naming the file, the record's index and byte offset and
 * what is wrong (a truncated record, a length or data CRC that does not
 * match, a length past the end of the file), RP_ERR_IO, RP_ERR_NOMEM; the
 * reader then stays at the bad record.
 */
rp_status io_tfrecord_next(io_tfrecord_reader *r, const uint8_t **data, size_t *len);

/* Closes the file and frees the reader; NULL is a no-op. */
void io_tfrecord_close(io_tfrecord_reader *r);

#endif
