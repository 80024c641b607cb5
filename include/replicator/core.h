/*
 * replicator/core.h - status codes, errors, logging, allocation, the per-step
 * arena, the counter-based RNG and clocks.
 *
 * Every public function of replicator either returns an rp_status (RP_OK is 0,
 * errors are negative) or a pointer that is NULL on failure. In both cases
 * rp_last_error() returns a message naming the value at fault. The library
 * never exits or aborts on a user error.
 */
#ifndef REPLICATOR_CORE_H
#define REPLICATOR_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------- */

typedef int rp_status;

enum {
    RP_OK = 0,
    RP_ERR_INVALID = -1,      /* an argument is out of range or NULL */
    RP_ERR_SHAPE = -2,        /* tensor shapes do not fit together */
    RP_ERR_NOMEM = -3,        /* an allocation failed */
    RP_ERR_IO = -4,           /* a file could not be opened, read or written */
    RP_ERR_FORMAT = -5,       /* a file's contents are corrupt or truncated */
    RP_ERR_NUMERIC = -6,      /* a NaN or infinity where a finite value is required */
    RP_ERR_COMM = -7,         /* a communication failure between replicas */
    RP_ERR_TIMEOUT = -8,      /* a peer did not arrive in time */
    RP_ERR_MISMATCH = -9,     /* replicas made different collective calls */
    RP_ERR_UNSUPPORTED = -10, /* valid, but not implemented by this build */
    RP_ERR_BACKEND = -11,     /* an engine underneath (oneDNN, BLAS, MPI) failed */
    RP_ERR_INTERRUPTED = -12  /* stopped by a signal or a user request */
};

/* The constant's name without the prefix, e.g. "SHAPE" for RP_ERR_SHAPE. */
RP_API const char *rp_status_name(rp_status status);

/*
 * The message of the last error on the calling thread, "" if none. The
 * message starts with the file:line that raised it. The pointer is valid until
 * the next error on this thread. Thread-safe (thread-local storage).
 */
RP_API const char *rp_last_error(void);

/* Status code of the last error on the calling thread (RP_OK if none). */
RP_API rp_status rp_last_status(void);

/* Forgets the calling thread's last error. */
RP_API void rp_error_clear(void);

/*
 * Records an error for the calling thread and returns `status`, so that
 * (file NULL: the message is used as it is, e.g. to pass on another thread's)
 * `return RP_ERROR(RP_ERR_SHAPE, "...")` reads naturally. Use the macro.
 */
RP_API rp_status rp_error_set(rp_status status, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define RP_ERROR(status, ...) rp_error_set((status), __FILE__, __LINE__, __VA_ARGS__)

/*
 * The trail of a failure: RP_CHECK, RP_TRY and RP_PROPAGATE_NULL call it as an
 * error passes back through them, and at RP_LOG_DEBUG it logs one line
 * "trail: file:line -> status (NAME)", like NCCL's "-> %d", so a failure
 * shows the path it took up the stack. Below debug level it only compares the
 * level. Returns `status`. Only reached on the error path, so the success path
 * of the macros is one predictable branch. Thread-safe.
 */
RP_API rp_status rp_error_trail(rp_status status, const char *file, int line);

/* Returns from the enclosing function if `expr` is not RP_OK, leaving a trail line. */
#define RP_CHECK(expr)                                                                             \
    do {                                                                                           \
        rp_status rp_check_status_ = (expr);                                                       \
        if (__builtin_expect(rp_check_status_ != RP_OK, 0))                                        \
            return rp_error_trail(rp_check_status_, __FILE__, __LINE__);                           \
    } while (0)

/*
 * Stores `expr` in the local `status` and jumps to the local `cleanup` label on error, leaving
 * a trail line.
 */
#define RP_TRY(expr)                                                                               \
    do {                                                                                           \
        status = (expr);                                                                           \
        if (__builtin_expect(status != RP_OK, 0)) {                                                \
            rp_error_trail(status, __FILE__, __LINE__);                                            \
            goto cleanup;                                                                          \
        }                                                                                          \
    } while (0)

/*
 * In a function that returns a pointer, NULL on failure: returns NULL if `ptr`
 * is NULL. For a pointer made by an earlier call that failed and recorded its
 * error (a tensor op's input or result, an arena allocation): that error
 * stands, so it is passed on unchanged, with a trail line.
 */
#define RP_PROPAGATE_NULL(ptr)                                                                     \
    do {                                                                                           \
        if (__builtin_expect((ptr) == NULL, 0)) {                                                  \
            rp_error_trail(rp_last_status(), __FILE__, __LINE__);                                  \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

/* ---- logging ------------------------------------------------------------ */

typedef enum {
    RP_LOG_DEBUG = 0,
    RP_LOG_INFO = 1,
    RP_LOG_WARN = 2,
    RP_LOG_ERROR = 3,
    RP_LOG_OFF = 4
} rp_log_level;

/* Sets the minimum level written to stderr (default: RP_LOG_INFO, or $RP_LOG_LEVEL). */
RP_API void rp_log_set_level(rp_log_level level);
RP_API rp_log_level rp_log_get_level(void);

/*
 * Sets the calling thread's replica id for log prefixes (-1: none). The
 * runtime calls it; users rarely need to.
 */
RP_API void rp_log_set_replica(int replica);
/* The process's MPI rank, shown in every line once set (the MPI backend sets it). */
RP_API void rp_log_set_rank(int rank);
/*
 * The prefix of this thread's log lines into buf: "[host pid]", with
 * " rank R" under MPI and " rN" on a replica's thread. Returns its length.
 */
RP_API int rp_log_prefix(char *buf, size_t size);

/*
 * Writes one line "[host pid r<replica>] LEVEL message" to stderr if `level`
 * is at or above the current level. Thread-safe: a line is written whole.
 */
RP_API void rp_log(rp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define rp_debug(...) rp_log(RP_LOG_DEBUG, __VA_ARGS__)
#define rp_info(...)  rp_log(RP_LOG_INFO, __VA_ARGS__)
#define rp_warn(...)  rp_log(RP_LOG_WARN, __VA_ARGS__)

/* ---- environment -------------------------------------------------------- */

/*
 * Every environment variable replicator reads, read once in one place
 * (src/core/env.c) and printed by `replicator info`.
 */
typedef struct rp_env {
    int log_level;        /* RP_LOG_LEVEL: debug|info|warn|error|off, default info */
    int threads;          /* RP_THREADS: default thread count, 0 = all cores */
    const char *kernels;  /* RP_KERNELS: "cpu" (default), "ref", "strict" or "cuda" */
    const char *data_dir; /* RP_DATA_DIR: default /usr/share/datasets/fashion-mnist */
    double comm_timeout;  /* RP_COMM_TIMEOUT: seconds a replica waits for its peers, default 300 */
    bool mpi_launched;    /* OMPI_COMM_WORLD_SIZE or PMI_SIZE set: started by mpirun or srun */
    int mpi_local_ranks;  /* OMPI_COMM_WORLD_LOCAL_SIZE: MPI ranks on this host (default 1) */
    int mpi_world_size;   /* OMPI_COMM_WORLD_SIZE or PMI_SIZE: ranks in the MPI job (default 1) */
    bool stuck_exit;     /* RP_STUCK_EXIT: set and not "0": rp_config.stuck_exit defaults to true */
    bool stuck_exit_set; /* RP_STUCK_EXIT is set (to anything, "0" included): the replicator
                            command keeps stuck_exit on unless it is "0" */
    int flight_entries;  /* RP_FLIGHT_ENTRIES: calls each communicator handle keeps (flight
                            recorder), default 64, 0 = off, at most 1 << 20 */
    const char *conv_algo; /* RP_CONV_ALGO: "auto" (default: Winograd where it is faster) or
                              "direct" (see rp_kernels_set_conv_algorithm) */
    const char *faults;    /* RP_FAULTS: a fault schedule (docs/faults.md), NULL if unset */
    bool arena_poison;     /* RP_ARENA_POISON: set and not "0": arenas start in poison mode
                              (rp_arena_set_poison), released memory filled with NaN */
    /* RP_STRICT_ARGS, for RP_KERNELS=strict: "abort" (the default: host memory passed to a kernel
       aborts the process), "warn" (said once per kernel and argument) or "off" ("0"). */
    const char *strict_args;
} rp_env;

/* The process's environment settings (read on first call; thread-safe). */
RP_API const rp_env *rp_env_get(void);

/*
 * CPU cores this thread may run on (its affinity: taskset, Slurm's
 * --cpus-per-task, mpirun's binding), else the online cores.
 */
RP_API int rp_cpu_count(void);
/* True if that is fewer than the machine's online cores: the process was given its share. */
RP_API bool rp_cpu_bound(void);

/* ---- files --------------------------------------------------------------- */

/*
 * Whether a file can be written at `path` the way the library writes every
 * file (checkpoints, images, IDX files, traces): a temporary file beside it,
 * then renamed over it. `path` must be absent or a regular file - a FIFO, a
 * device (/dev/null), a directory or a socket is refused, never replaced -
 * and its directory must accept a new file: a temporary file is created
 * there and removed at once. `what` ("trace file") starts the message.
 * Call it before a long run, so that a bad path fails in a second, not when
 * the run ends. Symbolic links are followed. A program that writes a file
 * of its own by renaming over a path can call it just before the rename.
 *
 * Errors: RP_ERR_INVALID (NULL or empty path); RP_ERR_IO naming the path and
 * why: "cannot write trace file /tmp/fifo: it is a FIFO, not a regular file
 * (refusing to replace it)", or the system's reason the directory refused
 * the temporary file. Thread-safe.
 */
RP_API rp_status rp_file_check_writable(const char *path, const char *what);

/*
 * Writes bytes [data, data + len) as the new contents of `path`, the way the
 * library writes every file: through a temporary file in the same directory,
 * fsynced, renamed over `path`, then the directory fsynced, so a reader sees
 * the old file or the new one, never a part. `path` must be absent or a
 * regular file (rp_file_check_writable's rule). `what` ("PNG chart") starts
 * each message. The libraries above the core (libreplicator-extras) write
 * their files with it.
 *
 * Errors: RP_ERR_INVALID (NULL or empty path, NULL data with len > 0);
 * RP_ERR_IO naming the path and the system's reason (on any error `path` is
 * unchanged, except when only the final directory fsync fails: the new file
 * is then in place and the message says so); RP_ERR_NOMEM. Thread-safe.
 */
RP_API rp_status rp_file_write_atomic(const char *path, const char *what, const void *data,
                                      size_t len);

/*
 * True if s[0..len) is well-formed UTF-8 (no overlong forms, no surrogates,
 * nothing above U+10FFFF): what safetensors headers, TensorBoard tags and
 * chart labels must be. NULL with len 0 is valid. Thread-safe.
 */
RP_API bool rp_utf8_valid(const char *s, size_t len);

/* ---- memory ------------------------------------------------------------- */

#define RP_ALIGN 64

/* Allocates `bytes` aligned to RP_ALIGN; NULL (with an error) on failure. */
RP_API void *rp_alloc(size_t bytes);
/* Like rp_alloc, zero-filled. */
RP_API void *rp_calloc(size_t bytes);
RP_API void rp_free(void *ptr);

/* Number of rp_alloc/rp_calloc calls made by this process so far (all threads). */
RP_API uint64_t rp_alloc_count(void);

/*
 * The arena: bump allocation for everything a step creates (activations and
 * their gradients, saved values). rp_arena_reset() frees everything at once.
 * The arena grows by adding chunks while a step needs more; at the next reset
 * it replaces its chunks with one block of the high-water size, so from the
 * second identical step on it makes no system allocation at all.
 * Blocks known to be dead before the reset can be handed back with
 * rp_arena_release(); later allocations of the same step reuse them (best
 * fit), so a step's footprint is its live set rather than the sum of what it
 * made. A step that makes the same requests and releases in the same order
 * gets the same layout every time.
 * Not thread-safe: one arena per replica.
 */
typedef struct rp_arena rp_arena;

RP_API rp_status rp_arena_create(rp_arena **arena, size_t initial_bytes);
RP_API void rp_arena_destroy(rp_arena *arena);

/*
 * Where an arena's chunks come from, when not host memory: a kernel table's storage (a
 * device's, or the strict table's). The arena never reads or writes such memory itself: its
 * bookkeeping lives on the host, rp_arena_calloc zeroes through `fill`, and poison mode fills
 * through it. alloc returns NULL when out of memory; fill sets bytes/4 32-bit words to pattern.
 */
typedef struct rp_arena_memory {
    void *(*alloc)(size_t bytes);
    void (*free)(void *p, size_t bytes);
    void (*fill)(void *p, uint32_t pattern, size_t bytes);
} rp_arena_memory;

/* An arena over `mem`'s memory (NULL: host memory, as rp_arena_create). mem must outlive it. */
RP_API rp_status rp_arena_create_on(rp_arena **arena, size_t initial_bytes,
                                    const rp_arena_memory *mem);

/* `bytes` aligned to RP_ALIGN, uninitialised; NULL (with an error) on failure. */
RP_API void *rp_arena_alloc(rp_arena *arena, size_t bytes);
/* Like rp_arena_alloc, zero-filled. */
RP_API void *rp_arena_calloc(rp_arena *arena, size_t bytes);
RP_API void rp_arena_reset(rp_arena *arena);

/*
 * Hands back `bytes` at `ptr`, a block this arena returned since its last
 * reset and not yet released (with the size it was asked for). Nothing may
 * read or write it afterwards: in poison mode it is filled with NaN (f32
 * 0x7fc00000), and in an AddressSanitizer build any access is reported. NULL
 * is ignored.
 */
RP_API void rp_arena_release(rp_arena *arena, void *ptr, size_t bytes);

/*
 * Poison mode: released blocks are filled with NaN, so a value used after
 * its release shows in the results. Off by default; on for every arena
 * created while the environment variable RP_ARENA_POISON is set (not "0").
 */
RP_API void rp_arena_set_poison(rp_arena *arena, bool on);

typedef struct rp_arena_stats {
    size_t used;            /* bytes the step spans (handed out, or released below the top) */
    size_t capacity;        /* bytes held in chunks */
    size_t high_water;      /* largest `used` seen: the step's footprint */
    uint64_t system_allocs; /* chunks allocated from the system, ever */
    size_t live;            /* handed out and not released since the last reset */
    size_t live_peak;       /* largest `live` seen */
} rp_arena_stats;

RP_API rp_arena_stats rp_arena_get_stats(const rp_arena *arena);

/* ---- random numbers ----------------------------------------------------- */

/*
 * Philox4x32-10, a counter-based generator: the value at position i of stream
 * `key` depends only on (key, i), never on how many threads draw or in what
 * order. A stream is (key, position); drawing advances the position.
 */
typedef struct rp_rng {
    uint64_t key;
    uint64_t counter; /* position in units of 4 x 32-bit words */
} rp_rng;

/* The raw Philox4x32-10 bijection of a 128-bit counter under a 64-bit key. */
RP_API void rp_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The 4 words of block `counter` of stream `key` (counter words 2 and 3 are 0). */
RP_API void rp_philox(uint64_t key, uint64_t counter, uint32_t out[4]);

/* A stream from a seed and a sub-stream id (e.g. a parameter or replica index). */
RP_API rp_rng rp_rng_make(uint64_t seed, uint64_t stream);

/* Mixes a string into a 64-bit key (FNV-1a then a finaliser), e.g. for parameter names. */
RP_API uint64_t rp_hash_str(uint64_t seed, const char *s);

RP_API uint32_t rp_rng_u32(rp_rng *rng);
/* Uniform in [0, 1). */
RP_API float rp_rng_uniform(rp_rng *rng);
/* Uniform integer in [0, n), n > 0. */
RP_API uint32_t rp_rng_below(rp_rng *rng, uint32_t n);

/*
 * Element-addressed fills: out[i] is a function of (key, first + i) only, so
 * filling a range in pieces, on any number of threads, gives the same numbers.
 */
RP_API void rp_rng_fill_uniform(uint64_t key, uint64_t first, float *out, size_t n, float lo,
                                float hi);
RP_API void rp_rng_fill_normal(uint64_t key, uint64_t first, float *out, size_t n, float mean,
                               float std);

/* ---- element types and bfloat16 ---------------------------------------- */

/*
 * Element types: of tensors (F32, BF16), of the collectives' and messages'
 * buffers (all of them), of checkpointed tensors. RP_U8 (raw bytes) is for
 * point-to-point messages and for all-gather and broadcast of raw bytes; a
 * reduction (all-reduce, reduce-scatter) of RP_U8 is RP_ERR_INVALID.
 * RP_BF16 is bfloat16 (rp_bf16, below).
 */
typedef enum { RP_F32 = 0, RP_F64 = 1, RP_I32 = 2, RP_I64 = 3, RP_U8 = 4, RP_BF16 = 5 } rp_dtype;

/* Bytes of one element of the type (0 for an unknown value). */
RP_API size_t rp_dtype_size(rp_dtype dtype);
/* "f32", "f64", "i32", "i64", "u8", "bf16". */
RP_API const char *rp_dtype_name(rp_dtype dtype);

/*
 * bfloat16: the top 16 bits of an IEEE float (1 sign, 8 exponent and 7
 * mantissa bits, 8 significant bits; unit roundoff 2^-8). Widening to float
 * is exact. Narrowing rounds to nearest, ties to even; infinities stay
 * infinities, a NaN stays a NaN of the same sign (made quiet: its payload
 * may shrink), and subnormals round like any other value (AMX and
 * VCVTNEPS2BF16 flush them to zero; our conversions do not). A float too
 * large for bf16 (above 0x1.FEp127 after rounding) becomes infinity.
 */
typedef uint16_t rp_bf16;

/* x rounded to the nearest bf16, ties to even. Thread-safe (pure). */
RP_API rp_bf16 rp_bf16_from_f32(float x);
/* The float that a bf16 value stands for (exact). */
RP_API float rp_bf16_to_f32(rp_bf16 x);
/* Arrays of n values. Pure; the arrays must not overlap. */
RP_API void rp_bf16_from_f32_array(rp_bf16 *y, const float *x, size_t n);
RP_API void rp_bf16_to_f32_array(float *y, const rp_bf16 *x, size_t n);

/* ---- clocks ------------------------------------------------------------- */

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
RP_API uint64_t rp_now_ns(void);
/* Monotonic time in seconds, as a double. */
RP_API double rp_now_s(void);

#ifdef __cplusplus
}
#endif
#endif
