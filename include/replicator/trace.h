/*
 * replicator/trace.h - traces of a run (Chrome trace-event JSON, loaded by
 * ui.perfetto.dev and chrome://tracing) and the per-thread phase times the
 * trainer's straggler report reads.
 *
 * Recording (core): every worker thread that attaches gets one track (pid =
 * the process's MPI rank, tid = the worker) and, while tracing is on, an event
 * buffer of a fixed size allocated at attach, so recording never allocates.
 * A full buffer drops further events and counts them. Spans open and close in
 * LIFO order on their thread (rp_trace_begin / rp_trace_end), so the events of
 * one track nest exactly, as Perfetto requires. The library itself opens spans
 * for the loader's batch wait, forward (from the last mark - the step's start,
 * a batch, a backward pass or an optimizer step - to the start of backward),
 * backward, each collective, the optimizer step, evaluation, checkpoints,
 * parameter-server calls and the runtime's workers; a user program may add its
 * own with the same calls.
 *
 * Phase times (always on, tracing or not): each thread adds the self time of
 * every span (its time minus that of the spans inside it) to its phase's
 * total; rp_trace_phase_take() reads and clears them. This costs two clock
 * reads per span.
 *
 * Thread-safety: begin/end/mark/phase_take act on the calling thread only.
 * rp_trace_start, rp_trace_stop and the writers must not race with recording
 * threads (call them between runs).
 */
#ifndef REPLICATOR_TRACE_H
#define REPLICATOR_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a span's self time counts as, for the straggler report. */
typedef enum {
    RP_PHASE_DATA,      /* waiting for the next batch */
    RP_PHASE_COMPUTE,   /* forward, backward, the step's own code, actor and learner work */
    RP_PHASE_OPTIMIZER, /* the optimizer's update */
    RP_PHASE_COMM,      /* collectives and parameter-server calls, waiting for peers included */
    RP_PHASE_OTHER,     /* evaluation, checkpoints */
    RP_PHASE_COUNT
} rp_trace_phase;

/* The phase's name ("data", "compute", "optimizer", "comm", "other"). */
RP_API const char *rp_trace_phase_name(rp_trace_phase phase);

/* Default events per thread buffer (48 bytes each: 6 MiB a thread; a ResNet-20 step records about
 * 60, so some 2000 steps fit before events are dropped and counted). */
#define RP_TRACE_DEFAULT_EVENTS (1 << 17)

/*
 * Turns recording on: threads that attach from now on get a buffer of
 * `events_per_thread` events (<= 0: RP_TRACE_DEFAULT_EVENTS). Call it
 * before rp_replicator_create, whose workers attach when their threads start
 * (the caller's thread attaches as local replica 0 at its first run); a
 * program of its own threads attaches them itself. Errors: RP_ERR_INVALID
 * (already started).
 */
RP_API rp_status rp_trace_start(int64_t events_per_thread);
/* Whether recording is on (a relaxed load: cheap enough for every call). */
RP_API bool rp_trace_enabled(void);
/* Turns recording off and frees every buffer (call after writing). */
RP_API void rp_trace_stop(void);

/*
 * Names the calling thread's track: tid and a thread name ("replica 1",
 * "actor 0"; copied, at most 47 characters). Allocates its buffer when
 * recording is on and it has none. A thread that never attaches records no
 * events (its phase times still count). Errors: RP_ERR_NOMEM.
 */
RP_API rp_status rp_trace_thread_attach(int tid, const char *name);

/* Opens a span on the calling thread, counted as `phase`. Spans nest up to 32 deep. */
RP_API void rp_trace_begin(rp_trace_phase phase);
/*
 * Closes the innermost open span as an event named `name` (a string that
 * lives until the trace is written: a literal). The _args form adds the
 * collective's bytes and sequence number (< 0: left out) and op name (NULL:
 * left out).
 */
RP_API void rp_trace_end(const char *name);
RP_API void rp_trace_end_args(const char *name, int64_t bytes, int64_t seq, const char *op);
/* Where the next "forward" event starts (the library marks after a batch, a backward pass and an
 * optimizer step; a step's start is marked by its caller). */
RP_API void rp_trace_mark(void);
/* Records "forward" from the last mark to now, if there is one at this depth; clears the mark. */
RP_API void rp_trace_forward(void);

/* The calling thread's phase self times in seconds since its last call, then zeroed. */
RP_API void rp_trace_phase_take(double seconds[RP_PHASE_COUNT]);

/* Events dropped so far because a thread's buffer was full, over all threads. */
RP_API int64_t rp_trace_dropped(void);
/* Events recorded so far, over all threads. */
RP_API int64_t rp_trace_recorded(void);

/* One recorded event, as the writer reads it. */
typedef struct rp_trace_event {
    const char *name;
    uint64_t start_ns, dur_ns; /* rp_now_ns() clock */
    int64_t bytes, seq;        /* < 0: none */
    const char *op;            /* NULL: none */
} rp_trace_event;

/*
 * Calls fn once per attached thread with its tid, name and events (in the
 * order they closed). Returns the first non-OK status fn returns.
 */
RP_API rp_status rp_trace_each_thread(rp_status (*fn)(int tid, const char *name,
                                                      const rp_trace_event *events, int64_t n,
                                                      void *arg),
                                      void *arg);

/* ---- writing (io) ---------------------------------------------------------------------------- */

/* How one process's events map onto the job's time line. */
typedef struct rp_trace_process {
    int pid;                 /* the MPI rank (0 under threads) */
    const char *name;        /* "rank 0 (host)" */
    int64_t clock_offset_ns; /* added to every timestamp: this process's clock to rank 0's */
    int64_t clock_bound_ns;  /* the offset's error bound: half the chosen ping-pong's round trip */
    int64_t clock_rtt_ns;    /* that round trip */
} rp_trace_process;

/*
 * Writes every attached thread's events as one Chrome trace-event JSON file
 * at `path` (written to a temporary name, then renamed): "M" events naming
 * the process and its threads, an "X" event per span (ts and dur in
 * microseconds with nanosecond decimals; ts is the monotonic clock plus the
 * clock offset, so files of one job share a time line), and otherData with
 * the clock offset, its bound, and the recorded and dropped counts. `path`
 * must be absent or a regular file: a FIFO, a device (/dev/null) or a
 * directory there is refused, never replaced (rp_file_check_writable, which
 * a program can call before its run to fail early).
 * Errors: RP_ERR_INVALID (NULL), RP_ERR_IO naming the path and the system's
 * reason ("No space left on device (the file system is full)"); on error
 * nothing is left at or beside `path`.
 */
RP_API rp_status rp_trace_write(const char *path, const rp_trace_process *proc);

/* The largest input file rp_trace_merge reads (2 GiB; a rank's file holds at most its workers'
 * buffers: about 20 MB each at RP_TRACE_DEFAULT_EVENTS). */
#define RP_TRACE_MERGE_MAX_BYTES ((int64_t)2 << 30)

/*
 * Merges per-rank trace files (written by rp_trace_write) into one at
 * `out`: their events concatenated (their timestamps already share rank 0's
 * clock), otherData listing each input's rank, clock offset and bound.
 * Inputs must be regular files of at most RP_TRACE_MERGE_MAX_BYTES (a FIFO
 * or a device is refused at once, not read); `out` follows
 * rp_trace_write's rule.
 * Errors: RP_ERR_IO (a path, named, and why), RP_ERR_FORMAT (an input that
 * is not such a file, named), RP_ERR_NOMEM.
 */
RP_API rp_status rp_trace_merge(const char *out, const char *const *inputs, int n);

#ifdef __cplusplus
}
#endif
#endif
