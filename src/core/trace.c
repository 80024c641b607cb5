/*
 * trace.c - the recording half of traces (replicator/trace.h): per-thread
 * span stacks, phase self times and fixed event buffers.
 *
 * Each thread keeps its state in a thread-local struct: the open spans (start,
 * phase, time spent in spans inside it) and the phase totals, which need no
 * allocation and are kept whether or not tracing is on. An attached thread's
 * buffer is allocated once, when it attaches with recording on, and linked
 * into a process-wide list under a mutex; recording an event is a bounds
 * check and a store. The list and the buffers are freed by rp_trace_stop.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/trace.h"

#define DEPTH_MAX 32

typedef struct trace_buffer {
    struct trace_buffer *next;
    int tid;
    char name[48];
    rp_trace_event *events;
    int64_t cap, n, dropped;
} trace_buffer;

typedef struct open_span {
    uint64_t start, inner; /* inner: ns spent in the spans inside it */
    rp_trace_phase phase;
} open_span;

typedef struct thread_state {
    open_span stack[DEPTH_MAX];
    int depth;
    int overflow;  /* begins past DEPTH_MAX, not recorded */
    uint64_t mark; /* where "forward" starts; 0: none */
    int mark_depth;
    uint64_t phase_ns[RP_PHASE_COUNT];
    trace_buffer *buf;   /* NULL: not attached, or attached while recording was off */
    uint64_t generation; /* rp_trace_start's count when buf was made */
} thread_state;

static _Thread_local thread_state tls;
static bool enabled;
static uint64_t generation;
static int64_t events_per_thread;
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static trace_buffer *buffers;

const char *rp_trace_phase_name(rp_trace_phase phase)
{
    static const char *names[] = {"data", "compute", "optimizer", "comm", "other"};
    return (unsigned)phase < RP_PHASE_COUNT ? names[phase] : "?";
}

bool rp_trace_enabled(void)
{
    return __atomic_load_n(&enabled, __ATOMIC_RELAXED);
}

rp_status rp_trace_start(int64_t per_thread)
{
    if (rp_trace_enabled()) return RP_ERROR(RP_ERR_INVALID, "tracing is already started");
    events_per_thread = per_thread > 0 ? per_thread : RP_TRACE_DEFAULT_EVENTS;
    __atomic_fetch_add(&generation, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&enabled, true, __ATOMIC_RELEASE);
    return RP_OK;
}

void rp_trace_stop(void)
{
    __atomic_store_n(&enabled, false, __ATOMIC_RELEASE);
    pthread_mutex_lock(&list_mu);
    trace_buffer *b = buffers;
    buffers = NULL;
    __atomic_fetch_add(&generation, 1, __ATOMIC_RELAXED); /* every thread's buf is stale now */
    pthread_mutex_unlock(&list_mu);
    while (b) {
        trace_buffer *next = b->next;
        free(b->events);
        free(b);
        b = next;
    }
}

rp_status rp_trace_thread_attach(int tid, const char *name)
{
    if (!rp_trace_enabled()) return RP_OK;
    pthread_mutex_lock(&list_mu);
    if (tls.buf && tls.generation == __atomic_load_n(&generation, __ATOMIC_RELAXED)) {
        tls.buf->tid = tid;
        snprintf(tls.buf->name, sizeof tls.buf->name, "%s", name ? name : "");
        pthread_mutex_unlock(&list_mu);
        return RP_OK;
    }
    trace_buffer *b = calloc(1, sizeof *b);
    rp_trace_event *ev = b ? malloc((size_t)events_per_thread * sizeof *ev) : NULL;
    if (!ev) {
        pthread_mutex_unlock(&list_mu);
        free(b);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a trace buffer of %lld events for '%s'",
                        (long long)events_per_thread, name ? name : "");
    }
    /* Touch the pages now, so the first events do not fault them in mid-step. */
    memset(ev, 0, (size_t)events_per_thread * sizeof *ev);
    b->events = ev;
    b->cap = events_per_thread;
    b->tid = tid;
    snprintf(b->name, sizeof b->name, "%s", name ? name : "");
    b->next = buffers;
    buffers = b;
    tls.buf = b;
    tls.generation = __atomic_load_n(&generation, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&list_mu);
    return RP_OK;
}

void rp_trace_begin(rp_trace_phase phase)
{
    if (tls.depth == DEPTH_MAX) {
        tls.overflow++;
        return;
    }
    open_span *s = &tls.stack[tls.depth++];
    s->start = rp_now_ns();
    s->inner = 0;
    s->phase = (unsigned)phase < RP_PHASE_COUNT ? phase : RP_PHASE_OTHER;
}

/* The recording thread's buffer, if it is current and recording is on. */
static trace_buffer *live_buffer(void)
{
    if (!tls.buf || !rp_trace_enabled() ||
        tls.generation != __atomic_load_n(&generation, __ATOMIC_RELAXED))
        return NULL;
    return tls.buf;
}

static void record(const char *name, uint64_t start, uint64_t dur, int64_t bytes, int64_t seq,
                   const char *op)
{
    trace_buffer *b = live_buffer();
    if (!b) return;
    if (b->n == b->cap) {
        __atomic_store_n(&b->dropped, b->dropped + 1, __ATOMIC_RELAXED);
        return;
    }
    /* The event, then the count (release): a writer that reads the count while this thread still
       records - a failed run's trace, with a replica left running - sees only whole events. */
    b->events[b->n] = (rp_trace_event){name, start, dur, bytes, seq, op};
    __atomic_store_n(&b->n, b->n + 1, __ATOMIC_RELEASE);
}

void rp_trace_end_args(const char *name, int64_t bytes, int64_t seq, const char *op)
{
    if (tls.overflow > 0) {
        tls.overflow--;
        return;
    }
    if (tls.depth == 0) return; /* an end without a begin: ignored rather than corrupt */
    uint64_t now = rp_now_ns();
    open_span *s = &tls.stack[--tls.depth];
    uint64_t dur = now - s->start;
    tls.phase_ns[s->phase] += dur > s->inner ? dur - s->inner : 0;
    if (tls.depth > 0) tls.stack[tls.depth - 1].inner += dur;
    if (tls.mark_depth > tls.depth) tls.mark = 0; /* a mark inside it cannot start a sibling */
    record(name, s->start, dur, bytes, seq, op);
}

void rp_trace_end(const char *name)
{
    rp_trace_end_args(name, -1, -1, NULL);
}

void rp_trace_mark(void)
{
    tls.mark = rp_now_ns();
    tls.mark_depth = tls.depth;
}

void rp_trace_forward(void)
{
    if (tls.mark && tls.mark_depth == tls.depth) {
        uint64_t now = rp_now_ns();
        record("forward", tls.mark, now - tls.mark, -1, -1, NULL);
    }
    tls.mark = 0;
}

void rp_trace_phase_take(double seconds[RP_PHASE_COUNT])
{
    for (int p = 0; p < RP_PHASE_COUNT; p++) {
        seconds[p] = (double)tls.phase_ns[p] * 1e-9;
        tls.phase_ns[p] = 0;
    }
}

static int64_t sum_counts(bool dropped)
{
    int64_t total = 0;
    pthread_mutex_lock(&list_mu);
    for (trace_buffer *b = buffers; b; b = b->next)
        total += __atomic_load_n(dropped ? &b->dropped : &b->n, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&list_mu);
    return total;
}

int64_t rp_trace_dropped(void)
{
    return sum_counts(true);
}

int64_t rp_trace_recorded(void)
{
    return sum_counts(false);
}

rp_status rp_trace_each_thread(rp_status (*fn)(int tid, const char *name,
                                               const rp_trace_event *events, int64_t n, void *arg),
                               void *arg)
{
    if (!fn) return RP_ERROR(RP_ERR_INVALID, "rp_trace_each_thread: NULL function");
    rp_status status = RP_OK;
    pthread_mutex_lock(&list_mu);
    for (trace_buffer *b = buffers; b && status == RP_OK; b = b->next)
        status = fn(b->tid, b->name, b->events, __atomic_load_n(&b->n, __ATOMIC_ACQUIRE), arg);
    pthread_mutex_unlock(&list_mu);
    return status;
}
