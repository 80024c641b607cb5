/*
 * replicator/io.h - checkpoints in the safetensors layout, and PNG images.
 *
 * A checkpoint is an in-memory set of named tensors (f32, bf16, int64,
 * uint64) and string metadata. It holds whatever a run needs to resume: parameters and
 * buffers (rp_checkpoint_add_params), optimizer state
 * (rp_checkpoint_add_optimizer), RNG state and loader position (small
 * integer tensors), and the configuration (a metadata string, e.g. JSON).
 *
 * The file layout is safetensors, so Python's safetensors (and anything that
 * reads it) can open a replicator checkpoint:
 *
 *     [8 bytes]  N, the header length, unsigned little-endian
 *     [N bytes]  UTF-8 JSON, padded with spaces so that 8 + N is a multiple of 8:
 *                {"__metadata__": {"key": "value", ...},
 *                 "<name>": {"dtype": "F32"|"BF16"|"I64"|"U64", "shape": [...],
 *                            "data_offsets": [begin, end]}, ...}
 *     [...]      the byte buffer: every tensor's raw little-endian bytes,
 *                row-major, back to back with no gaps; offsets are
 *                relative to the start of the buffer. Tensors of 8-byte
 *                types come first, then f32, then bf16, each group in
 *                insertion order, so every tensor starts at a multiple of
 *                its element size (as safetensors' own writer arranges it)
 *
 * Integrity, which safetensors itself lacks: the first metadata entry is
 * always "replicator.crc32", eight lowercase hex digits, so the header
 * starts with the fixed text
 *
 *     {"__metadata__":{"replicator.crc32":"XXXXXXXX"
 *
 * and the digits sit at a fixed place in the file (bytes 45..52). They hold
 * the CRC-32 (zlib's crc32) of the whole file as it reads with those eight
 * digits set to '0': length field, header and data. A CRC-32 detects every
 * error burst of up to 32 bits, so any change confined to one byte anywhere
 * (outside the digits) is always detected; a change to the digits themselves
 * makes them disagree with the rest. A file that is too short or too long is
 * refused by the size checks before the CRC is computed, with the expected
 * and actual sizes in the message. Every structural rule of safetensors is
 * checked as well, so a damaged file gets the most specific message
 * available.
 *
 * Saving is atomic: the file is written to "<path>.tmp.<pid>.<n>" in the
 * same directory, fsynced, renamed over `path`, and the directory is
 * fsynced. A failed save removes its temporary file and leaves any existing
 * file at `path` untouched, so the previous good checkpoint survives a full
 * disk or a crash mid-write. A save also removes the temporary files of
 * earlier saves whose process has gone (killed mid-write); on a file system
 * shared between machines, where a pid says nothing, do not let two
 * machines save to one path.
 *
 * Byte order: tensors are stored little-endian, as safetensors requires.
 * The length field is encoded portably; tensor bytes are copied as they are
 * in memory, so save and load return RP_ERR_UNSUPPORTED on a big-endian
 * host rather than write or read swapped numbers.
 *
 * Thread-safety: a checkpoint object is used by one thread at a time; const
 * functions (lookups, save) may run concurrently on the same object while
 * nothing modifies it. Different objects and different paths are
 * independent; concurrent saves to the same path each write their own
 * temporary file, and the last rename wins whole.
 */
#ifndef REPLICATOR_IO_H
#define REPLICATOR_IO_H

#include <stdint.h>

#include "core.h"
#include "nn.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Element types a checkpoint holds, named in the file as "F32", "I64", "U64",
 * "BF16". BF16 is bfloat16 (rp_bf16 of core.h): 2 bytes, the top half of an
 * f32. Training checkpoints hold f32 masters (rp_checkpoint_add_params and
 * rp_checkpoint_add_optimizer write F32 whatever the run's precision); BF16
 * is for exported weights (rp_checkpoint_add_f32_as, `replicator export`).
 */
typedef enum {
    RP_CHECKPOINT_F32 = 0,
    RP_CHECKPOINT_I64 = 1,
    RP_CHECKPOINT_U64 = 2,
    RP_CHECKPOINT_BF16 = 3,
} rp_checkpoint_dtype;

/* Longest tensor name or metadata key, in bytes (not counting the NUL). */
#define RP_CHECKPOINT_NAME_MAX 255

/*
 * Limit on the JSON header of a file, in bytes: safetensors' own
 * (100,000,000), so a file one reads the other reads. It also bounds the
 * number of tensors a file can describe (about 1.5 million).
 */
#define RP_CHECKPOINT_HEADER_MAX 100000000

typedef struct rp_checkpoint rp_checkpoint;

/* Creates an empty checkpoint. Errors: RP_ERR_INVALID (ck NULL), RP_ERR_NOMEM. */
RP_API rp_status rp_checkpoint_create(rp_checkpoint **ck);

/* Frees the checkpoint and every tensor and string it holds. NULL is a no-op. */
RP_API void rp_checkpoint_destroy(rp_checkpoint *ck);

/* ---- building a checkpoint ------------------------------------------------ */

/*
 * Adds a tensor named `name` with `ndim` (0..RP_MAX_DIMS) dimensions of
 * `shape` (each >= 0; a 0-d tensor holds one element, a dimension of 0 makes
 * it empty). The data is copied at once: the caller keeps ownership of
 * `data` and may change or free it right after the call. `data` may be NULL
 * only for an empty tensor.
 *
 * Names are 1..RP_CHECKPOINT_NAME_MAX bytes of valid UTF-8, unique in the
 * checkpoint, and not "__metadata__". Tensors keep the order they are
 * added in, within their group in the file (see the top of this file).
 *
 * Errors: RP_ERR_INVALID (a bad name, a duplicate, a bad dtype or shape),
 * RP_ERR_NOMEM.
 */
RP_API rp_status rp_checkpoint_add(rp_checkpoint *ck, const char *name, rp_checkpoint_dtype dtype,
                                   int ndim, const int64_t *shape, const void *data);

/* rp_checkpoint_add() for f32. */
RP_API rp_status rp_checkpoint_add_f32(rp_checkpoint *ck, const char *name, int ndim,
                                       const int64_t *shape, const float *data);

/* A 1-d int64 tensor of n elements (step counters, loader positions). */
RP_API rp_status rp_checkpoint_add_i64(rp_checkpoint *ck, const char *name, int64_t n,
                                       const int64_t *data);

/* A 1-d uint64 tensor of n elements (RNG keys and counters). */
RP_API rp_status rp_checkpoint_add_u64(rp_checkpoint *ck, const char *name, int64_t n,
                                       const uint64_t *data);

/* rp_checkpoint_add() for bf16 values, stored as they are. */
RP_API rp_status rp_checkpoint_add_bf16(rp_checkpoint *ck, const char *name, int ndim,
                                        const int64_t *shape, const rp_bf16 *data);

/*
 * Adds the f32 values `data` (numel of `shape` of them) stored as `dtype`:
 * RP_CHECKPOINT_F32 copies them; RP_CHECKPOINT_BF16 rounds each with
 * rp_bf16_from_f32 (to nearest, ties to even; NaN stays NaN, infinities stay
 * infinite, a value too large for bf16 becomes infinity). Otherwise as
 * rp_checkpoint_add(). Errors: those of rp_checkpoint_add(); RP_ERR_INVALID
 * naming the dtype if it is neither F32 nor BF16.
 */
RP_API rp_status rp_checkpoint_add_f32_as(rp_checkpoint *ck, const char *name,
                                          rp_checkpoint_dtype dtype, int ndim, const int64_t *shape,
                                          const float *data);

/*
 * Sets metadata `key` to `value` (both copied; a second call with the same
 * key replaces the value). Stored in the safetensors "__metadata__" object,
 * which maps strings to strings: store structured configuration as JSON
 * text. Keys follow the rules of tensor names; values are any valid UTF-8.
 * "replicator.crc32" is reserved.
 *
 * Errors: RP_ERR_INVALID (a bad or reserved key, invalid UTF-8), RP_ERR_NOMEM.
 */
RP_API rp_status rp_checkpoint_set_meta(rp_checkpoint *ck, const char *key, const char *value);

/* ---- files ---------------------------------------------------------------- */

/*
 * Writes the checkpoint to `path` atomically (see the top of this file).
 * `path` must be absent or a regular file; anything else (a directory, a
 * device) is refused so that it is never replaced. A symbolic link at `path`
 * is replaced by the new file; its old target is left as it was.
 *
 * Errors: RP_ERR_INVALID (NULL arguments, or a header over
 * RP_CHECKPOINT_HEADER_MAX bytes, which no reader would accept), RP_ERR_IO
 * (the temporary file cannot be created or written, e.g. a missing
 * directory or a full disk; fsync or rename fails; `path` is not a regular
 * file), RP_ERR_UNSUPPORTED
 * (big-endian host), RP_ERR_NOMEM. The message names the path and the
 * system's reason. On any error the temporary file is removed and `path` is
 * unchanged, except when only the final directory fsync fails: then the
 * new file is in place but may not survive a crash, and RP_ERR_IO says so.
 */
RP_API rp_status rp_checkpoint_save(const rp_checkpoint *ck, const char *path);

/*
 * Reads and validates a checkpoint written by rp_checkpoint_save(). On
 * success *ck owns a new checkpoint (free it with rp_checkpoint_destroy);
 * on error *ck is NULL.
 *
 * Checked: that `path` is a regular file (a FIFO or device is refused at
 * once, never waited on), the size (at least 8 bytes; a header length no
 * larger than RP_CHECKPOINT_HEADER_MAX and the file; exactly 8 + N + the
 * bytes the header describes), the header (valid UTF-8 JSON object starting
 * with '{', only whitespace after it, no \u0000 escape in any string,
 * metadata values all strings, every tensor with a known dtype, 0..4
 * dimensions of 0..2^53 whose non-zero ones need at most 2^53 bytes in any
 * order, data offsets whose length matches the shape, tensors covering the
 * buffer exactly with no gap or overlap, unique names and metadata keys)
 * and the CRC-32. docs/architecture.md lists the rules and limits. The CRC entry is required: a
 * file without it is refused (use rp_checkpoint_load_safetensors for files from other tools). The
 * CRC entry itself is not kept in the loaded metadata.
 *
 * Errors: RP_ERR_IO (cannot open or read), RP_ERR_FORMAT (corrupt or
 * truncated; the message names the path and what is wrong, for a wrong size
 * the expected and actual byte counts), RP_ERR_UNSUPPORTED (big-endian host,
 * or a dtype other than F32/BF16/I64/U64), RP_ERR_NOMEM, RP_ERR_INVALID.
 */
RP_API rp_status rp_checkpoint_load(rp_checkpoint **ck, const char *path);

/*
 * Like rp_checkpoint_load(), for any safetensors file (e.g. reference
 * weights exported from PyTorch): every structural check still applies, and
 * the CRC is verified when the file carries one in its place, but a file
 * without "replicator.crc32" is accepted. A "replicator.crc32" entry
 * anywhere but first in the metadata is refused as damaged.
 */
RP_API rp_status rp_checkpoint_load_safetensors(rp_checkpoint **ck, const char *path);

/* ---- lookups ---------------------------------------------------------------- */

/*
 * Finds tensor `name`. Returns its data (read-only, owned by the checkpoint,
 * valid until it is destroyed, aligned to RP_ALIGN, never NULL even for an
 * empty tensor), and sets *dtype, *ndim and shape[0..ndim-1] where the
 * pointers are not NULL (`shape` has room for RP_MAX_DIMS). Returns NULL
 * with RP_ERR_INVALID if there is no such tensor.
 */
RP_API const void *rp_checkpoint_get(const rp_checkpoint *ck, const char *name,
                                     rp_checkpoint_dtype *dtype, int *ndim, int64_t *shape);

/* rp_checkpoint_get() for an f32 tensor; NULL (RP_ERR_INVALID) if absent or of another dtype. */
RP_API const float *rp_checkpoint_get_f32(const rp_checkpoint *ck, const char *name, int *ndim,
                                          int64_t *shape);

/* rp_checkpoint_get() for a bf16 tensor; NULL (RP_ERR_INVALID) if absent or of another dtype. */
RP_API const rp_bf16 *rp_checkpoint_get_bf16(const rp_checkpoint *ck, const char *name, int *ndim,
                                             int64_t *shape);

/*
 * Copies float tensor `name` into dst[0..n) as f32, for a caller that wants
 * f32 whatever was stored: an F32 tensor as it is, a BF16 one widened
 * (rp_bf16_to_f32, exact). `n` must be the tensor's element count (from the
 * shape rp_checkpoint_get gives). Errors: RP_ERR_INVALID (NULL arguments, no
 * such tensor, an I64 or U64 tensor, or n not its element count; the message
 * names the tensor, its dtype and element count); dst is then unchanged.
 */
RP_API rp_status rp_checkpoint_copy_f32(const rp_checkpoint *ck, const char *name, float *dst,
                                        int64_t n);

/* An int64 tensor of any shape and its element count *n; NULL if absent or of another dtype. */
RP_API const int64_t *rp_checkpoint_get_i64(const rp_checkpoint *ck, const char *name, int64_t *n);

/* A uint64 tensor of any shape and its element count *n; NULL if absent or of another dtype. */
RP_API const uint64_t *rp_checkpoint_get_u64(const rp_checkpoint *ck, const char *name, int64_t *n);

/* The value of metadata `key` (owned by the checkpoint), or NULL (RP_ERR_INVALID) if absent. */
RP_API const char *rp_checkpoint_get_meta(const rp_checkpoint *ck, const char *key);

/*
 * Number of tensors, and the name of tensor i (NULL if out of range): in the
 * order added, or for a loaded checkpoint in the order of the file.
 */
RP_API int rp_checkpoint_count(const rp_checkpoint *ck);
RP_API const char *rp_checkpoint_name_at(const rp_checkpoint *ck, int i);

/* Number of metadata entries, and key i (NULL if out of range). */
RP_API int rp_checkpoint_meta_count(const rp_checkpoint *ck);
RP_API const char *rp_checkpoint_meta_key_at(const rp_checkpoint *ck, int i);

/* ---- models and optimizers ---------------------------------------------------- */

/*
 * Adds every parameter and buffer of a finalized `params` as an f32 tensor
 * named prefix + parameter name (e.g. prefix "param/" gives
 * "param/fc1.weight"). `prefix` may be NULL or "" for none.
 *
 * A tensor-parallel member's slice (rp_params_shard_of) is added as it is
 * held, with the slice's shape under the dense name: such a file is not the
 * dense model, and rp_checkpoint_read_params (which wants the dense shape)
 * does not take it back; gather the members into a dense list first, or
 * write each member's pieces (rp_checkpoint_add_params_pieces).
 *
 * Errors: as rp_checkpoint_add(); RP_ERR_INVALID if params is not finalized
 * or a name is taken.
 */
RP_API rp_status rp_checkpoint_add_params(rp_checkpoint *ck, const rp_params *params,
                                          const char *prefix);

/*
 * Copies prefix + name of the checkpoint into every parameter and buffer of
 * `params`. Nothing is copied unless everything fits: every parameter must
 * be present as f32 with exactly its shape, and (when `prefix` is not empty)
 * no tensor under `prefix` may be left over. Otherwise returns RP_ERR_SHAPE
 * with a message listing the missing, mismatched (both shapes) and unexpected
 * tensors by name, and `params` is unchanged. A tensor that is a member's
 * slice (rp_params_shard_of: tensor parallelism) takes its slab of the dense
 * tensor, which must have the dense shape; from a sharded checkpoint
 * (rp_checkpoint_open_sharded) only the pieces holding the slab are read.
 */
RP_API rp_status rp_checkpoint_read_params(const rp_checkpoint *ck, rp_params *params,
                                           const char *prefix);

/*
 * Adds an optimizer's state: for each state slot k (rp_optim_slots: 1 for
 * SGD momentum, 2 for Adam's moments) and each trainable parameter, an f32
 * tensor prefix + "slot<k>/" + parameter name with the parameter's shape,
 * and the step count as a 1-element int64 tensor prefix + "steps". `params`
 * is the list the optimizer was created over. Names, not positions, tie the
 * state to parameters, so it survives a change in parameter order.
 *
 * The tensors are logical (unsharded): an optimizer restricted to a range
 * (rp_optimizer_set_range, ZeRO-1) is refused; gather its state first
 * (rp_replica_optimizer_fetch).
 *
 * Errors: as rp_checkpoint_add(); RP_ERR_INVALID if the state does not fit
 * `params`, or the optimizer is sharded.
 */
RP_API rp_status rp_checkpoint_add_optimizer(rp_checkpoint *ck, const rp_optimizer *opt,
                                             const rp_params *params, const char *prefix);

/*
 * Restores what rp_checkpoint_add_optimizer() stored into `opt` (state and
 * step count). All or nothing, with the checks and RP_ERR_SHAPE message of
 * rp_checkpoint_read_params(); a checkpoint from an optimizer with a
 * different number of slots (e.g. Adam into SGD) is refused the same way.
 * A sharded optimizer (rp_optimizer_set_range) takes the part of each
 * logical tensor inside its range (every tensor's name and shape is still
 * checked), so a checkpoint saved by N replicas resumes on M.
 */
RP_API rp_status rp_checkpoint_read_optimizer(const rp_checkpoint *ck, rp_optimizer *opt,
                                              const rp_params *params, const char *prefix);

/*
 * The same two reads for a worker that holds part of a model (a stage of a
 * network split across workers): tensors under `prefix` that `params` does
 * not hold belong to other workers and are left alone instead of refused.
 * Everything else is checked as above (each of this part's tensors present,
 * with its dtype and shape; all or nothing).
 */
RP_API rp_status rp_checkpoint_read_params_part(const rp_checkpoint *ck, rp_params *params,
                                                const char *prefix);
RP_API rp_status rp_checkpoint_read_optimizer_part(const rp_checkpoint *ck, rp_optimizer *opt,
                                                   const rp_params *params, const char *prefix);

/* ---- reusing a checkpoint as a staging buffer ---------------------------------- */

/*
 * Empties `ck` (tensors and metadata) but keeps its tensors' memory: the next
 * rp_checkpoint_add (or add_params, add_optimizer, ...) at position i takes
 * over the block that position i held if it has the same byte size, and
 * frees the rest of the kept blocks at the first that does not fit. A
 * checkpoint filled the same way at every save (a trainer's background
 * staging copy) therefore allocates no tensor memory after the first, and
 * never holds more than one state's size. NULL is a no-op.
 */
RP_API void rp_checkpoint_reset(rp_checkpoint *ck);

/* ---- sharded checkpoints ------------------------------------------------------- */

/*
 * A sharded checkpoint is several safetensors files, one per writer (a
 * worker, or a split of one state), and one small index that names every
 * tensor's pieces. For a base path B (a trainer's is "<run_dir>/checkpoint"):
 *
 *     B.index.json                          the index, written last, atomically
 *     B.shards/g<G>/shard-<k>-of-<n>.safetensors   shard k of generation G
 *
 * A piece is a contiguous range [offset, offset + count) of a tensor's
 * elements in row-major order (a ZeRO shard's range, a split along the first
 * dimension, or the whole tensor), or of a slab's (rp_checkpoint_slab: a
 * tensor-parallel member's slice, in the slice's own row-major order).
 * Every shard file is an ordinary replicator checkpoint (CRC-32, atomic
 * write) whose tensors are its pieces, each stored 1-d under the tensor's
 * name, with metadata "replicator.pieces" (a JSON array, one entry per
 * piece, in order: {"name", "shape": the whole tensor's shape, "offset",
 * "crc32": the piece's bytes' CRC-32 as 8 hex digits, and for a piece of a
 * slab "axis", "start", "size"}). A shard holds at most one piece of a
 * tensor. A tensor's pieces tile it exactly once: either ranges of the whole
 * tensor, or ranges of slabs along one axis that tile that axis.
 *
 * The index (JSON) starts with {"crc32":"XXXXXXXX", the CRC-32 of the file
 * with those digits read as '0' (as a checkpoint's), then "format":
 * "replicator.sharded", "version": 1, "generation": G, "layout": the
 * writer's description of how the state was split (free text, e.g.
 * "replicas=4 zero=1" or "shards=4"), "shards": [{"file": relative path,
 * "bytes": size, "crc32": the shard file's CRC}], "metadata": shard 0's
 * metadata (the run's configuration), "position": the tensor
 * "train/position" when present (where the loader resumes), and "tensors":
 * [{"name", "dtype", "shape", "pieces": [{"shard", "offset", "count",
 * "begin": the piece's first byte in its shard file, "crc32", and for a
 * slab's piece "axis", "start", "size"}]}] (sorted by slab, then offset) in the
 * order of shard 0 and then of first appearance. Small integer tensors
 * (I64/U64 of at most 64 elements: positions, counters, RNG keys) carry
 * their values too ("values", decimal strings).
 *
 * Publishing is atomic: a save writes generation G + 1's shards into a
 * directory of their own while the index still names generation G, then
 * renames the new index over the old one, then removes the other
 * generations' directories. A crash or kill at any moment leaves an index
 * whose every shard is intact; the leftovers of an unpublished generation
 * are removed by the next publish.
 *
 * Reading: rp_checkpoint_index_open reads and checks the index (its CRC,
 * that every tensor's pieces tile it exactly once, that each shard file has
 * its recorded size and CRC digits) without reading any tensor data;
 * rp_checkpoint_index_read then reads any range of any tensor, touching only
 * the pieces that overlap it, and checks each piece's CRC as it reads it.
 * So a worker of any layout (another replica count, ZeRO shard, split or
 * pipeline stage) reads only what it holds.
 */

/* Largest number of shards a sharded checkpoint may have. */
#define RP_CHECKPOINT_SHARDS_MAX 65536

/*
 * A slab of a tensor: the indices [start, start + size) along `axis` and all
 * of every other axis, as a tensor-parallel member holds its slice
 * (rp_params_shard_of). axis -1 (or NULL where a slab is asked for): the
 * whole tensor; a slab that spans its axis is the whole tensor too.
 */
typedef struct rp_checkpoint_slab {
    int axis;
    int64_t start, size;
} rp_checkpoint_slab;

/*
 * Adds elements [offset, offset + count) (row-major) of a tensor `name`
 * whose whole shape is shape[ndim], for a shard: the piece is stored 1-d
 * [count] under `name` (so rp_checkpoint_get sees the piece, not the whole)
 * and remembered as a piece by rp_checkpoint_save_shard. Errors: those of
 * rp_checkpoint_add; RP_ERR_INVALID if the range is not inside the tensor.
 */
RP_API rp_status rp_checkpoint_add_piece(rp_checkpoint *ck, const char *name,
                                         rp_checkpoint_dtype dtype, int ndim, const int64_t *shape,
                                         int64_t offset, int64_t count, const void *data);

/*
 * rp_checkpoint_add_piece of a slab: elements [offset, offset + count) of
 * the slab's row-major order (its own shape: shape with slab->size along
 * slab->axis). Errors: as rp_checkpoint_add_piece's; RP_ERR_INVALID for a
 * slab outside the tensor.
 */
RP_API rp_status rp_checkpoint_add_slab_piece(rp_checkpoint *ck, const char *name,
                                              rp_checkpoint_dtype dtype, int ndim,
                                              const int64_t *shape, const rp_checkpoint_slab *slab,
                                              int64_t offset, int64_t count, const void *data);

/*
 * The element range [*offset, *offset + *count) that part k of n takes of a
 * tensor of `numel` elements when it is split evenly: the first numel % n
 * parts take one element more, so part 0 is empty only for an empty tensor.
 */
RP_API void rp_checkpoint_split_range(int64_t numel, int k, int n, int64_t *offset, int64_t *count);

/*
 * A worker's own part of a model, for a sharded checkpoint written by every
 * worker (each its shard, rp_checkpoint_save_shard with split 1):
 *  - rp_checkpoint_add_params_pieces adds the elements [lo, hi) of the
 *    parameter list's flat block (rp_params_offset order: the trainable
 *    values, then the buffers) as pieces of prefix + each name; it reads
 *    only those elements (a ZeRO-3 replica holds no others). A tensor that
 *    is a member's slice (rp_params_shard_of: tensor parallelism) is written
 *    as that slab of the dense tensor; with `replicated` false the others
 *    are left out (they are one member's to write: every member holds them);
 *  - rp_checkpoint_add_optimizer_pieces adds the state of the trainable
 *    values [lo, hi) as pieces of the tensors rp_checkpoint_add_optimizer
 *    writes whole, and with `steps` the step count; the range must lie
 *    inside the optimizer's (rp_optimizer_range: a ZeRO replica's shard).
 * A tensor without elements goes with the range that starts at 0. Workers
 * whose ranges partition [0, numel) and of which exactly one passes `steps`
 * (and adds the buffers' range) write pieces that tile every tensor once,
 * which rp_checkpoint_publish checks; rp_replica_checkpoint_range
 * (runtime.h) gives a replica its range. Errors: RP_ERR_INVALID (a range
 * outside the list or the optimizer's), those of rp_checkpoint_add_piece.
 */
RP_API rp_status rp_checkpoint_add_params_pieces(rp_checkpoint *ck, const rp_params *params,
                                                 const char *prefix, int64_t lo, int64_t hi,
                                                 bool replicated);
RP_API rp_status rp_checkpoint_add_optimizer_pieces(rp_checkpoint *ck, const rp_optimizer *opt,
                                                    const rp_params *params, const char *prefix,
                                                    int64_t lo, int64_t hi, bool replicated,
                                                    bool steps);

/*
 * Writes shard k of n of generation `generation` (>= 1) of the sharded
 * checkpoint at `base` (see above), atomically, creating the directories it
 * needs. With split > 1, every tensor of `ck` that is not a piece is written
 * as its part k of `split` (rp_checkpoint_split_range) and metadata only by
 * k == 0, except integer tensors, which shard 0 writes whole and the others
 * not at all; with split <= 1 every tensor and the metadata are written as
 * they are (a tensor added whole is its own one piece). Pieces added with
 * rp_checkpoint_add_piece are written as they are in both cases. Thread-safe
 * across different k; the caller makes sure no two writers write one k.
 * Errors: RP_ERR_INVALID (bad arguments), and those of rp_checkpoint_save.
 */
RP_API rp_status rp_checkpoint_save_shard(const rp_checkpoint *ck, const char *base,
                                          int64_t generation, int k, int n, int split);

/*
 * After all n shards of `generation` are written (by every writer: call it
 * on one process, after a barrier): reads the shards' headers (not their
 * data), checks that every tensor's pieces agree on its dtype and shape and
 * cover it exactly once, writes the index atomically with `layout` (free
 * text; NULL: "") and removes the directories of the other generations.
 * Until the index is renamed into place the previous checkpoint is the one
 * published. Errors: RP_ERR_IO (a shard cannot be read), RP_ERR_FORMAT
 * (pieces that overlap, leave a gap or disagree; a damaged shard header:
 * the message names the file and the tensor), RP_ERR_NOMEM.
 */
RP_API rp_status rp_checkpoint_publish(const char *base, int64_t generation, int n,
                                       const char *layout);

/*
 * For writers in several processes that publish without meeting (a
 * background save): rp_checkpoint_discard_generation removes whatever an
 * earlier, unpublished attempt left of `generation` (call it before any
 * writer starts; the published generation is refused), and
 * rp_checkpoint_wait_shards waits until all n shard files of `generation`
 * exist (each appears whole: rp_checkpoint_save renames it into place),
 * for at most timeout_ms. Errors: RP_ERR_INVALID; RP_ERR_IO (the directory
 * cannot be cleared); RP_ERR_TIMEOUT naming the first shard file still
 * missing and how many are.
 */
RP_API rp_status rp_checkpoint_discard_generation(const char *base, int64_t generation);
RP_API rp_status rp_checkpoint_wait_shards(const char *base, int64_t generation, int n,
                                           int timeout_ms);

/*
 * Removes the sharded checkpoint at `base`: its index first (so that nothing
 * names the shards any more), then every generation's directory. Best
 * effort; a missing checkpoint is no error. Errors: RP_ERR_IO if the index
 * exists and cannot be removed.
 */
RP_API rp_status rp_checkpoint_remove_sharded(const char *base);

/* The generation of the checkpoint published at `base`, or 0 if none can be read. */
RP_API int64_t rp_checkpoint_published_generation(const char *base);

/* An opened sharded checkpoint (its index); read-only after open, so thread-safe to read from. */
typedef struct rp_checkpoint_index rp_checkpoint_index;

/*
 * Opens the sharded checkpoint at `base`: reads and checks its index and
 * each shard file's size and CRC digits, reading no tensor data. Errors:
 * RP_ERR_IO (no index, or a shard file missing: the message names it),
 * RP_ERR_FORMAT (a damaged index or shard, naming the file and what is
 * wrong), RP_ERR_NOMEM. *ix is NULL on error.
 */
RP_API rp_status rp_checkpoint_index_open(rp_checkpoint_index **ix, const char *base);
RP_API void rp_checkpoint_index_close(rp_checkpoint_index *ix);

/* The number of tensors, tensor i's name, and the index's layout text and generation. */
RP_API int rp_checkpoint_index_count(const rp_checkpoint_index *ix);
RP_API const char *rp_checkpoint_index_name_at(const rp_checkpoint_index *ix, int i);
RP_API const char *rp_checkpoint_index_layout(const rp_checkpoint_index *ix);
RP_API int64_t rp_checkpoint_index_generation(const rp_checkpoint_index *ix);
RP_API int rp_checkpoint_index_shards(const rp_checkpoint_index *ix);

/*
 * Tensor `name`'s dtype, whole shape and element count (any pointer may be
 * NULL; shape has room for RP_MAX_DIMS). Errors: RP_ERR_INVALID (no such tensor).
 */
RP_API rp_status rp_checkpoint_index_info(const rp_checkpoint_index *ix, const char *name,
                                          rp_checkpoint_dtype *dtype, int *ndim, int64_t *shape,
                                          int64_t *numel);

/*
 * Reads elements [offset, offset + count) of tensor `name` into dst (count
 * elements of its dtype), from the pieces that overlap the range only, each
 * piece's CRC checked over the bytes of it read (a piece read in part is
 * read whole to check it). Errors: RP_ERR_INVALID (no such tensor, a range
 * outside it), RP_ERR_IO (a shard cannot be read), RP_ERR_FORMAT (a piece
 * whose CRC does not match: the message names the shard file and the
 * tensor). Thread-safe.
 */
RP_API rp_status rp_checkpoint_index_read(const rp_checkpoint_index *ix, const char *name,
                                          int64_t offset, int64_t count, void *dst);

/*
 * rp_checkpoint_index_read of a slab: elements [offset, offset + count) of
 * the slab's row-major order, from whichever pieces hold them (ranges of the
 * whole tensor or of other slabs: a checkpoint written at one
 * tensor-parallel degree reads at another). Errors: as
 * rp_checkpoint_index_read's; RP_ERR_INVALID for a slab outside the tensor.
 */
RP_API rp_status rp_checkpoint_index_read_slab(const rp_checkpoint_index *ix, const char *name,
                                               const rp_checkpoint_slab *slab, int64_t offset,
                                               int64_t count, void *dst);

/*
 * Reads the whole checkpoint into one in-memory checkpoint, as if it had
 * been written whole: the tensors in the order the writer added them (when
 * shard 0 holds a piece of each, as rp_checkpoint_save_shard's splits do)
 * and shard 0's metadata, so rp_checkpoint_save of the result writes the
 * bytes the whole-file save of the same state writes (consolidation).
 * Errors: those of rp_checkpoint_index_read, RP_ERR_NOMEM.
 */
RP_API rp_status rp_checkpoint_index_load(const rp_checkpoint_index *ix, rp_checkpoint **ck);

/*
 * Opens the sharded checkpoint at `base` (its index checked as by
 * rp_checkpoint_index_open) as a checkpoint that reads its tensors when they
 * are asked for, not before: rp_checkpoint_get (and what calls it) reads a
 * tensor whole the first time and keeps it; rp_checkpoint_read_params_part
 * and rp_checkpoint_read_optimizer_part read only the tensors the part
 * holds; rp_checkpoint_read_optimizer of a sharded optimizer
 * (rp_optimizer_set_range: a ZeRO replica) reads only the elements in its
 * range, from the pieces holding them, keeping nothing. So each replica of a
 * resumed run reads the pieces it needs, and the optimizer state is never
 * whole in memory. Names, dtypes, shapes and metadata are there from the
 * start; saving it reads everything. Thread-safe for reading (the replicas
 * of a process share one). Errors: those of rp_checkpoint_index_open; a
 * later read's errors (a damaged piece, naming its shard file) come from
 * the call that reads it (rp_checkpoint_get returns NULL).
 */
RP_API rp_status rp_checkpoint_open_sharded(rp_checkpoint **ck, const char *base);

/*
 * Rewrites the sharded checkpoint at `base` as `shards` shards split evenly
 * (generation + 1, published atomically; layout "shards=<n>"), reading one
 * output shard's pieces at a time, so it needs the memory of one shard.
 */
RP_API rp_status rp_checkpoint_reshard(const char *base, int shards);

/* ---- images (PNG) ------------------------------------------------------------ */

/*
 * Writes n images as one PNG grid: `images` is float NHWC [n, h, w, c], c 1
 * (8-bit gray) or 3 (8-bit RGB). The tiles go row by row into `cols`
 * columns and rows = ceil(n / cols) rows, so the picture is
 *
 *     height = rows * h + (rows + 1) * pad,   width = cols * w + (cols + 1) * pad
 *
 * with `pad` pixels (0 or more) of value pad_value (every channel) between
 * the tiles and around them; the cells of a last row that has fewer than
 * `cols` images are pad_value too. A value x maps to
 * round((x - lo) / (hi - lo) * 255), halves rounded up, clamped to 0..255
 * (so x <= lo is 0, x >= hi is 255, infinities clamp the same way), and a
 * NaN is drawn as 0. Both dimensions must be at most RP_IMAGE_MAX_SIDE.
 *
 * The file is written atomically (a temporary file in the same directory,
 * fsynced, then renamed over `path`): a failed write leaves an older file at
 * `path` intact and nothing else behind. `path` must be absent or a regular
 * file. `images` is only read; the caller keeps it.
 *
 * Errors: RP_ERR_INVALID (naming the argument: a NULL or empty path, NULL
 * images, n, h, w or cols below 1, c not 1 or 3, pad below 0, lo or hi not
 * finite or lo >= hi, a picture over RP_IMAGE_MAX_SIDE), RP_ERR_IO (naming
 * the path and the system's reason, e.g. a missing directory), RP_ERR_NOMEM,
 * RP_ERR_BACKEND (libpng refused to encode). Thread-safe: calls share no state.
 */
#define RP_IMAGE_MAX_SIDE 1000000 /* libpng's default limit on either side */
RP_API rp_status rp_image_grid_write_png(const char *path, const float *images, int n, int h, int w,
                                         int c, int cols, int pad, uint8_t pad_value, float lo,
                                         float hi);

/*
 * Whether rp_image_grid_write_png could write a grid of n tiles of h x w x c in `cols` columns
 * with `pad`: the same size rules (every count at least 1, c 1 or 3, each side at most
 * RP_IMAGE_MAX_SIDE, at most 4 GiB of pixels), checked before the images exist, so a caller
 * refuses a grid it cannot write before computing its tiles. Errors: RP_ERR_INVALID, naming the
 * grid's size and the limit. Thread-safe.
 */
RP_API rp_status rp_image_grid_check(int n, int h, int w, int c, int cols, int pad);

/*
 * Reads a PNG into *pixels, [h, w, c] bytes row-major, c 1 for a gray image
 * (gray, gray+alpha) and 3 for a colour one (RGB, RGBA, palette). 8-bit
 * images are returned as stored (no gamma correction); alpha and any
 * transparency chunk are dropped; palette entries and 1/2/4-bit gray are
 * expanded, 16-bit samples scaled to 8 bits. Interlaced files are read
 * whole. On success *pixels belongs to the caller (free it with rp_free());
 * on error *pixels is NULL and *h, *w, *c are 0.
 *
 * Errors: RP_ERR_INVALID (a NULL argument), RP_ERR_IO (the file cannot be
 * opened or read; the message names the path and the reason), RP_ERR_FORMAT
 * (not a PNG, truncated, or corrupt: the message names the path and what
 * libpng found), RP_ERR_NOMEM. Thread-safe: calls share no state.
 */
RP_API rp_status rp_image_read_png(const char *path, uint8_t **pixels, int *h, int *w, int *c);

/* ---- line plots (PNG; these live in libreplicator-extras) ---------------------- */

/* One line of a chart: n points (x[i], y[i]); `label` names it in the legend (NULL: "series k"). */
typedef struct rp_plot_series {
    const char *label;
    const double *x, *y;
    int n;
} rp_plot_series;

/* A chart's text and size. Start from zero ({0}): every field has a default. */
typedef struct rp_plot {
    const char *title, *xlabel, *ylabel; /* NULL or "": not drawn */
    int width, height;                   /* pixels; 0 takes the default, 800 x 500 */
    bool y_from_zero;                    /* the y axis starts at 0 (or ends there, data all < 0) */
} rp_plot;

#define RP_PLOT_MIN_SIDE 160 /* smallest width or height: room for the labels */
#define RP_PLOT_MAX_SIDE 8192

/*
 * Writes a line chart of the `nseries` series `s` to `path` as an RGB PNG of
 * p->width x p->height pixels, drawn with cairo: axes whose ranges are the
 * data's widened to round-numbered ticks (1, 2 or 5 times a power of ten;
 * 10,000 and up as "k", "M" or "G": 200k, 1.5M), light grid lines at the ticks, the
 * title, axis labels, and a legend in the emptiest corner when there is more
 * than one series. Each series is one line in a colour of its own, in the
 * order given; a point with a non-finite x or y (or beyond +-1e300) is
 * skipped and breaks the line there, and a point with no drawn neighbour is
 * drawn as a dot. An empty series (n 0) takes no room and draws nothing; with
 * no points at all the axes run from 0 to 1. A series whose values are all
 * equal gets an axis around the value (0.5 gives 0..1).
 *
 * The file is written atomically, as rp_image_grid_write_png does: a failed
 * write leaves an older file at `path` intact and nothing else behind.
 * Nothing is kept: the caller owns every array and string, only read here.
 *
 * Errors: RP_ERR_INVALID (naming the argument: a NULL or empty path, p NULL,
 * nseries < 0, s NULL with nseries > 0, a series with n < 0 or with n > 0 and
 * x or y NULL, a width or height that is not 0 or within
 * RP_PLOT_MIN_SIDE..RP_PLOT_MAX_SIDE, text that is not valid UTF-8),
 * RP_ERR_IO (naming the path and the system's reason, e.g. a missing
 * directory), RP_ERR_NOMEM, RP_ERR_BACKEND (cairo failed). Thread-safe:
 * calls share no state.
 */
RP_API rp_status rp_plot_write_png(const char *path, const rp_plot *p, const rp_plot_series *s,
                                   int nseries);

#ifdef __cplusplus
}
#endif
#endif
