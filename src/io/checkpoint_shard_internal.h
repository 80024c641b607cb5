/*
 * checkpoint_shard_internal.h - what checkpoint_shard.c (writing shards,
 * publishing the index) and checkpoint_shard_read.c (opening the index,
 * reading pieces, consolidating, resharding) share.
 */
#ifndef RP_IO_CHECKPOINT_SHARD_INTERNAL_H
#define RP_IO_CHECKPOINT_SHARD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "replicator/io.h"

/* A shard file's metadata entry listing its pieces (JSON text). */
#define RP_CKPT_PIECES_KEY "replicator.pieces"
/* The index's "format" and its file name after the base. */
#define RP_CKPT_INDEX_FORMAT "replicator.sharded"
#define RP_CKPT_INDEX_SUFFIX ".index.json"
/* The index starts {"crc32":"XXXXXXXX": the digits' place. */
#define RP_CKPT_INDEX_CRC_PREFIX "{\"crc32\":\""
#define RP_CKPT_INDEX_CRC_AT     (sizeof RP_CKPT_INDEX_CRC_PREFIX - 1)

/*
 * A shard file's path, "<base>.shards/g<G>/shard-<k>-of-<n>.safetensors", or with k < 0 its
 * generation's directory; with `relative`, base's last component only (the index names shards
 * relative to its own directory). rp_alloc'd; NULL when out of memory.
 */
char *io_ckpt_shard_name(const char *base, int64_t generation, int k, int n, bool relative);

/* Removes directory `gen` of a generation (io_ckpt_shard_name with k < 0): its files, then it. */
void io_ckpt_remove_generation_dir(const char *gen);

/* a + b in a new rp_alloc'd string; NULL when out of memory. */
char *io_ckpt_join(const char *a, const char *b);

/* The index's and the shards' JSON fields: a string member (NULL when absent or not a string);
   an integer number in [0, 2^53] (-1 otherwise). */
struct cJSON;
const char *io_ckpt_json_str(const struct cJSON *obj, const char *key);
int64_t io_ckpt_json_count(const struct cJSON *it);

/* A CRC-32 written as 8 hex digits (the shards' and the index's); false for anything else. */
bool io_ckpt_parse_crc(const char *s, uint32_t *crc);

/*
 * A piece entry's slab ("axis", "start", "size"; none: the whole tensor), checked against the
 * tensor's shape[ndim] and normalized (io_ckpt_slab_norm), and its element count. False when
 * damaged or outside the tensor.
 */
bool io_ckpt_json_slab(const struct cJSON *e, int ndim, const int64_t *shape,
                       rp_checkpoint_slab *slab, int64_t *numel);

/*
 * A piece as the index lists it: its shard file, its slab (normalized) and elements
 * [offset, offset + count) of the slab's order, its first byte in the shard file and its CRC.
 */
typedef struct ckpt_piece {
    int shard;
    rp_checkpoint_slab slab;
    int64_t offset, count, begin;
    uint32_t crc;
} ckpt_piece;

/* qsort's order of a tensor's pieces: by slab, then by offset (the index's order). */
int io_ckpt_piece_cmp(const void *a, const void *b);

/*
 * Whether n pieces, sorted by io_ckpt_piece_cmp, tile a tensor of shape[ndim] exactly once:
 * ranges of the whole tensor, or ranges of slabs along one axis that tile it. If not, what is
 * wrong (naming the elements and a shard) into why[size].
 */
bool io_ckpt_pieces_tile(const ckpt_piece *q, int n, int ndim, const int64_t *shape, char *why,
                         size_t size);

/* Reads exactly n bytes of fd at `at` (RP_ERR_FORMAT naming `path` at its end, RP_ERR_IO). */
rp_status io_ckpt_pread_all(int fd, void *buf, size_t n, int64_t at, const char *path);

#endif
