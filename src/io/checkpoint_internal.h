/*
 * checkpoint_internal.h - the in-memory checkpoint shared by checkpoint.c
 * (building, lookups, models and optimizers, small shared helpers),
 * checkpoint_dtype.c (dtypes, bf16 tensors and conversions), checkpoint_save.c (the
 * safetensors writer), checkpoint_load.c (the reader) and checkpoint_slab.c (slabs: placing a
 * range of a tensor-parallel slice in another's).
 */
#ifndef RP_IO_CHECKPOINT_INTERNAL_H
#define RP_IO_CHECKPOINT_INTERNAL_H

#include <pthread.h>
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
    void *data;    /* rp_alloc'd [nbytes]; NULL only while `unread` */
    /* A view's tensor (rp_checkpoint_open_sharded) not read yet: its bytes are in the source. */
    bool unread;
    /*
     * A piece of a larger tensor (rp_checkpoint_add_piece, _add_slab_piece): this tensor is
     * elements [piece_offset, piece_offset + numel) of the row-major order of `slab` (normalized:
     * axis -1 for the whole) of the tensor of shape whole_shape.
     */
    bool piece;
    int whole_ndim;
    int64_t whole_shape[RP_MAX_DIMS];
    int64_t piece_offset;
    rp_checkpoint_slab slab;
} ckpt_tensor;

/*
 * Where a view's tensors are read from (rp_checkpoint_open_sharded: a sharded checkpoint's
 * index). read() takes elements [offset, offset + count) of slab `slab` (NULL: the whole) of
 * tensor `name` into dst and must be thread-safe; close() lets the source go with the checkpoint.
 */
typedef struct ckpt_source {
    rp_status (*read)(void *ctx, const char *name, const rp_checkpoint_slab *slab, int64_t offset,
                      int64_t count, void *dst);
    void (*close)(void *ctx);
} ckpt_source;

typedef struct ckpt_meta {
    char *key;
    char *value;
} ckpt_meta;

/*
 * A hash index from names to positions in an array, so that adding, finding
 * and loading n entries costs O(n), not O(n^2) as a scan per name did.
 * Open addressing with linear probing: slots[h] is a position + 1, 0 when
 * empty; cap is a power of two, at most half full. The hash is keyed by the
 * checkpoint's random seed, so a crafted file cannot choose names that all
 * land in one chain.
 */
typedef struct ckpt_index {
    int *slots;
    size_t cap;
} ckpt_index;

struct rp_checkpoint {
    ckpt_tensor *tensors; /* file order */
    int n_tensors, cap_tensors;
    /*
     * After rp_checkpoint_reset: tensors[n_tensors..n_kept) keep the names and data blocks of
     * the previous contents, which the next appends at those positions take over when their
     * sizes match (a staging checkpoint filled the same way at every save allocates nothing).
     */
    int n_kept;
    ckpt_meta *meta; /* insertion order */
    int n_meta, cap_meta;
    ckpt_index tensor_index, meta_index; /* by name, by key */
    uint64_t seed;                       /* the indexes' hash key */
    /*
     * A view (rp_checkpoint_open_sharded): its unread tensors are read from source when first
     * asked for, under source_mu (the replicas of a process read one view concurrently).
     */
    const ckpt_source *source;
    void *source_ctx;
    pthread_mutex_t source_mu;
};

/* Bytes per element of a dtype, 0 for an unknown one. */
size_t io_ckpt_dtype_size(rp_checkpoint_dtype dtype);

/* The safetensors name of a dtype ("F32"), NULL for an unknown one. */
const char *io_ckpt_dtype_name(rp_checkpoint_dtype dtype);

/* The dtype whose safetensors name is `name` ("BF16"); false if none is. */
bool io_ckpt_dtype_parse(const char *name, rp_checkpoint_dtype *dtype);

/* True if s[0..len) is well-formed UTF-8 (no overlong forms, no surrogates). */
bool io_ckpt_utf8_valid(const char *s, size_t len);

/*
 * NULL if `name` can name a tensor or metadata key, otherwise a short reason
 * ("is empty", "is longer than 255 bytes", ...), for error messages.
 */
const char *io_ckpt_name_problem(const char *name);

/*
 * Number of elements of a shape, if every dimension is in 0..2^53 and the
 * bytes it needs at `esize` bytes per element, counting only the non-zero
 * dimensions, are at most 2^53 (the largest offset a JSON double holds
 * exactly). The rule does not depend on the order of the dimensions:
 * [0, 2^53, 2^53] is refused as [2^53, 2^53, 0] is, though both hold no
 * element. Returns false (and leaves *numel alone) otherwise.
 */
bool io_ckpt_shape_numel(int ndim, const int64_t *shape, size_t esize, int64_t *numel);

/* A name of an indexed array: ck->tensors[i].name or ck->meta[i].key. */
typedef const char *(*io_ckpt_key_fn)(const rp_checkpoint *ck, int i);

/* A seed for ck->seed that no file can predict (from the kernel, else clocks). */
uint64_t io_ckpt_index_seed(const void *owner);

/* The position whose key(ck, i) is `name`, or -1. */
int io_ckpt_index_find(const rp_checkpoint *ck, const ckpt_index *ix, io_ckpt_key_fn key,
                       const char *name);

/*
 * Indexes entry n-1, just appended (its name not yet indexed), growing the
 * table to keep it at most half full. Errors: RP_ERR_NOMEM, and then the
 * index is as it was, without entry n-1.
 */
rp_status io_ckpt_index_add(const rp_checkpoint *ck, ckpt_index *ix, io_ckpt_key_fn key, int n);

/* Refills the index with entries 0..n-1, in place (after the last was taken away). */
void io_ckpt_index_rebuild(const rp_checkpoint *ck, ckpt_index *ix, io_ckpt_key_fn key, int n);

/* Index of tensor `name`, or -1; O(1) on average. */
int io_ckpt_find(const rp_checkpoint *ck, const char *name);

/* Index of metadata `key` in ck->meta, or -1; O(1) on average. */
int io_ckpt_meta_find(const rp_checkpoint *ck, const char *key);

/*
 * Appends a tensor whose data is allocated but not filled, after checking
 * the name, dtype and shape, and returns it in *out (valid until the next
 * append). Errors: RP_ERR_INVALID, RP_ERR_NOMEM.
 */
rp_status io_ckpt_append(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype, int ndim,
                         const int64_t *shape, ckpt_tensor **out);

/*
 * Appends a tensor of a view whose bytes stay in ck's source until first asked for (unread, no
 * data). Errors: as io_ckpt_append.
 */
rp_status io_ckpt_append_unread(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                                int ndim, const int64_t *shape);

/* Makes ck a view reading its unread tensors from `source` (which it closes when destroyed). */
void io_ckpt_set_source(rp_checkpoint *ck, const ckpt_source *source, void *ctx);

/*
 * Tensor k's bytes, read whole from the source first if it is a view's unread tensor (once: kept
 * from then on). NULL on error (the source's), with the error set.
 */
const void *io_ckpt_data(const rp_checkpoint *ck, int k);

/* Reads every unread tensor of a view (before writing it out). Errors: the source's. */
rp_status io_ckpt_read_all(const rp_checkpoint *ck);

/*
 * Elements [offset, offset + count) of slab `slab` (NULL: the whole) of tensor k into dst: from
 * memory, or straight from the source for a view's unread tensor (reading only the pieces that
 * hold them, keeping nothing). The slab must be valid for the tensor (io_ckpt_slab_norm).
 */
rp_status io_ckpt_read_elems(const rp_checkpoint *ck, int k, const rp_checkpoint_slab *slab,
                             int64_t offset, int64_t count, void *dst);

/* ---- slabs (checkpoint_slab.c) ---- */

/*
 * Checks slab `in` (NULL: the whole) against a tensor of shape[ndim] and writes it normalized to
 * *out (axis -1 for the whole, also for a slab spanning its axis) with its element count in
 * *numel. False for a slab outside the tensor (an axis out of range, an empty or overhanging
 * interval).
 */
bool io_ckpt_slab_norm(const rp_checkpoint_slab *in, int ndim, const int64_t *shape,
                       rp_checkpoint_slab *out, int64_t *numel);

/*
 * Copies the elements two ranges of one tensor (shape[ndim], esize bytes an element) have in
 * common: elements [a_off, a_off + a_count) of normalized slab a's row-major order, held at src
 * (element a_off first), into their places among elements [b_off, b_off + b_count) of normalized
 * slab b's, held at dst (element b_off first). Returns how many elements the ranges share; with
 * src or dst NULL it only counts them.
 */
int64_t io_ckpt_slab_copy(int ndim, const int64_t *shape, size_t esize, const rp_checkpoint_slab *a,
                          int64_t a_off, int64_t a_count, const void *src,
                          const rp_checkpoint_slab *b, int64_t b_off, int64_t b_count, void *dst);

/* prefix + name into buf (RP_CHECKPOINT_NAME_MAX + 1 bytes). Errors: RP_ERR_INVALID (too long). */
rp_status io_ckpt_full_name(char *buf, const char *prefix, const char *name);

/*
 * The optimizer's state block checked against its parameter list: *slots slots of its range
 * [*lo, *hi) of the trainable values (all of them unless sharded). Errors: RP_ERR_INVALID.
 */
rp_status io_ckpt_optimizer_slots(const rp_optimizer *opt, const rp_params *params, float **state,
                                  int *slots, int64_t *lo, int64_t *hi);

/* Frees the blocks kept since rp_checkpoint_reset that no append has taken over. */
void io_ckpt_release_kept(rp_checkpoint *ck);

/* Takes back the tensor io_ckpt_append() added last (an error path: O(n)). */
void io_ckpt_pop(rp_checkpoint *ck);

/* True on a little-endian host, the byte order of the file's tensors. */
bool io_ckpt_host_is_little_endian(void);

/* Continues a zlib CRC-32 over n bytes (any n; zlib itself takes 32-bit lengths). */
uint32_t io_ckpt_crc_update(uint32_t crc, const void *data, size_t n);

/* The 8-byte little-endian header length field, independent of host byte order. */
void io_ckpt_put_le64(unsigned char out[8], uint64_t v);
uint64_t io_ckpt_get_le64(const unsigned char in[8]);

/*
 * Sets a metadata entry without the reserved-key check (for the reader),
 * replacing the value of an existing key. Errors: RP_ERR_NOMEM.
 */
rp_status io_ckpt_meta_put(rp_checkpoint *ck, const char *key, const char *value);

#endif
