/*
 * checkpoint_internal.h - the in-memory checkpoint shared by checkpoint.c
 * (building, lookups, models and optimizers, small shared helpers),
 * checkpoint_save.c (the safetensors writer) and checkpoint_load.c (the
 * reader).
 */
#ifndef RP_IO_CHECKPOINT_INTERNAL_H
#define RP_IO_CHECKPOINT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replicator/io.h"

/* The reserved metadata key holding the file's CRC-32. */
#define RP_CKPT_CRC_KEY "replicator.crc32"

/*
 * Every header rp_checkpoint_save writes starts with this text and then the
 * CRC's eight lowercase hex digits and a closing quote.
 */
#define RP_CKPT_CRC_PREFIX     "{\"__metadata__\":{\"" RP_CKPT_CRC_KEY "\":\""
#define RP_CKPT_CRC_PREFIX_LEN (sizeof RP_CKPT_CRC_PREFIX - 1)
#define RP_CKPT_CRC_DIGITS     8

typedef struct ckpt_tensor {
    char *name;
    rp_checkpoint_dtype dtype;
    int ndim;
    int64_t shape[RP_MAX_DIMS]; /* shape[0..ndim-1] */
    int64_t numel;
    size_t nbytes; /* numel * element size */
    void *data;    /* rp_alloc'd [nbytes], never NULL */
} ckpt_tensor;

typedef struct ckpt_meta {
    char *key;
    char *value;
} ckpt_meta;

struct rp_checkpoint {
    ckpt_tensor *tensors; /* file order */
    int n_tensors, cap_tensors;
    ckpt_meta *meta; /* insertion order */
    int n_meta, cap_meta;
};

/* Bytes per element of a dtype, 0 for an unknown one. */
size_t rp_ckpt_dtype_size(rp_checkpoint_dtype dtype);

/* The safetensors name of a dtype ("F32"), NULL for an unknown one. */
const char *rp_ckpt_dtype_name(rp_checkpoint_dtype dtype);

/* True if s[0..len) is well-formed UTF-8 (no overlong forms, no surrogates). */
bool rp_ckpt_utf8_valid(const char *s, size_t len);

/*
 * NULL if `name` can name a tensor or metadata key, otherwise a short reason
 * ("is empty", "is longer than 255 bytes", ...), for error messages.
 */
const char *rp_ckpt_name_problem(const char *name);

/* Index of tensor `name`, or -1. */
int rp_ckpt_find(const rp_checkpoint *ck, const char *name);

/*
 * Appends a tensor whose data is allocated but not filled, after checking
 * the name, dtype and shape, and returns it in *out (valid until the next
 * append). Errors: RP_ERR_INVALID, RP_ERR_NOMEM.
 */
rp_status rp_ckpt_append(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype, int ndim,
                         const int64_t *shape, ckpt_tensor **out);

/* True on a little-endian host, the byte order of the file's tensors. */
bool rp_ckpt_host_is_little_endian(void);

/* Continues a zlib CRC-32 over n bytes (any n; zlib itself takes 32-bit lengths). */
uint32_t rp_ckpt_crc_update(uint32_t crc, const void *data, size_t n);

/* The 8-byte little-endian header length field, independent of host byte order. */
void rp_ckpt_put_le64(unsigned char out[8], uint64_t v);
uint64_t rp_ckpt_get_le64(const unsigned char in[8]);

/* Sets a metadata entry without the reserved-key check (for the reader). */
rp_status rp_ckpt_meta_put(rp_checkpoint *ck, const char *key, const char *value);

#endif
