/*
 * threads.c - the shared-memory communicator: the members are threads of
 * one process and each collective moves data directly between their
 * buffers.
 *
 * A collective is two rendezvous. On arrival a member publishes its call
 * (kind, count, dtype, op, root, sequence number) and its buffer pointers,
 * then waits until every member has arrived. Every member then compares all
 * the calls; they all see the same published calls, so on a mismatch they all
 * fail with the same message. Then the data moves - for an all-reduce each
 * member reduces its 1/N slice of the buffer, reading the slice from every
 * member's input in rank order, and writes the result straight into every
 * member's output, so each input byte is read once and each output byte
 * written once - and a second rendezvous keeps any member from returning
 * (and reusing its buffers) while a peer still reads or writes them.
 *
 * A rendezvous is a per-member phase counter (two phases per collective):
 * arriving is one atomic store; waiting spins briefly, then sleeps on a
 * condition variable with a deadline. While waiting a member also watches
 * for the communicator breaking (a peer's timeout or mismatch) and for a
 * peer that has left the step without arriving; so a user error is reported
 * on every member within the timeout, never a hang.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "comm/comm_internal.h"

/* A spinning waiter's hint to the core (lets a sibling hyperthread run); nothing where there is
 * none. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Elements of one reduction block: 16 KiB stays in L1 while it is written to every output. */
#define BLOCK_BYTES 16384
/*
 * How long a waiting member spins before it sleeps: long while every member
 * can have a core (a sleeping thread takes tens of microseconds to wake, and
 * cross-replica batch norm meets its peers dozens of times a step), short
 * when members share cores and spinning would steal a peer's time.
 */
#define SPIN_NS_OWN_CORE 1000000
#define SPIN_NS_SHARED   50000
/*
 * All-reduces (and barriers) up to this size take the one-rendezvous path:
 * each member copies its input into its staging slot, and after everyone
 * has arrived each member reduces the whole (small) buffer itself.
 */
#define SMALL_BYTES 32768
/* Outputs at least this large are written with streaming stores (see copy_out). */
#define STREAM_BYTES (1 << 20)

typedef struct member {
    _Atomic uint64_t phase;     /* rendezvous passed: 2 per collective */
    _Atomic uint64_t last;      /* the last call arrived at, packed by pack_call() */
    _Atomic uint64_t last_user; /* its user sequence number, bit 63: internal */
    char last_what[2][48]; /* its name if internal, by sequence parity (written before `last`) */
    _Atomic uint64_t p2p_last[2]; /* the last point-to-point call completed (pack_p2p), 0: none */
    _Atomic int p2p_latest;       /* 1 if that came after the last collective */
    _Atomic int owed; /* 1: this member's next call gets the breaking error itself (p2p mismatch) */
    _Atomic int left; /* 1 while this member has left the step */
    rp_status left_status; /* written before `left` is set */
    char left_reason[256];
    comm_coll_desc
        desc[2]; /* the call of sequence number s is desc[s & 1]; written before `phase` */
    const void *send;
    void *recv;
    char *staging[2]; /* [SMALL_BYTES] each: inputs of small all-reduces, by sequence parity */
} __attribute__((aligned(64))) member;

typedef struct world {
    int n;
    _Atomic int refs; /* member handles alive */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int waiters; /* members sleeping on cv */
    _Atomic int broken;  /* set once, after `reason` */
    rp_status broken_status;
    char reason[1400];
    member *m;     /* [n] */
    char *staging; /* [n * 2 * SMALL_BYTES] */
    uint64_t spin_ns;
    /* Point-to-point, all under mu: per channel (dst * n + src) the sends not yet received. */
    struct tmsg **qhead, **qtail;  /* [n * n] */
    uint64_t *sent, *rcvd;         /* [n * n] sends posted / receives matched per channel */
    struct treq **posted, **ptail; /* [n] receives posted and not yet matched, per destination */
    uint64_t stamp;                /* arrival order, for RP_ANY_SOURCE */
} world;

typedef struct handle {
    world *w;
    const void **sends; /* [n] scratch: the members' input pointers */
    void **recvs;       /* [n] */
} handle;

static const comm_ops threads_ops;

static handle *H(const rp_comm *c)
{
    return c->impl;
}

/* ---- the shared state ------------------------------------------------------ */

static void p2p_free(world *w);

static void world_free(world *w)
{
    if (!w) return;
    p2p_free(w);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    rp_free(w->staging);
    rp_free(w->m);
    free(w);
}

static world *world_create(int n)
{
    world *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->n = n;
    atomic_init(&w->refs, n);
    w->m = rp_calloc((size_t)n * sizeof(member));
    w->staging = rp_alloc((size_t)n * 2 * SMALL_BYTES);
    w->spin_ns = n <= rp_cpu_count() ? SPIN_NS_OWN_CORE : SPIN_NS_SHARED;
    w->qhead = calloc((size_t)n * (size_t)n, sizeof *w->qhead);
    w->qtail = calloc((size_t)n * (size_t)n, sizeof *w->qtail);
    w->sent = calloc((size_t)n * (size_t)n, sizeof *w->sent);
    w->rcvd = calloc((size_t)n * (size_t)n, sizeof *w->rcvd);
    w->posted = calloc((size_t)n, sizeof *w->posted);
    w->ptail = calloc((size_t)n, sizeof *w->ptail);
    bool p2p_ok = w->qhead && w->qtail && w->sent && w->rcvd && w->posted && w->ptail;
    for (int q = 0; w->m && w->staging && q < n; q++)
        for (int k = 0; k < 2; k++)
            w->m[q].staging[k] = w->staging + ((size_t)q * 2 + (size_t)k) * SMALL_BYTES;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (!w->m || !w->staging || !p2p_ok || rc != 0 || pthread_mutex_init(&w->mu, NULL) != 0) {
        if (rc == 0) pthread_cond_destroy(&w->cv);
        p2p_free(w);
        rp_free(w->staging);
        rp_free(w->m);
        free(w);
        return NULL;
    }
    return w;
}

static void wake_all(world *w)
{
    if (atomic_load(&w->waiters) == 0) return;
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* world_break with w->mu held. */
static void world_break_locked(world *w, rp_status status, const char *reason)
{
    if (!atomic_load(&w->broken)) {
        snprintf(w->reason, sizeof w->reason, "%s", reason);
        w->broken_status = status;
        atomic_store(&w->broken, 1);
    }
    pthread_cond_broadcast(&w->cv);
}

/* Marks the communicator broken with `status` and a reason (the first caller wins). */
static void world_break(world *w, rp_status status, const char *reason)
{
    pthread_mutex_lock(&w->mu);
    world_break_locked(w, status, reason);
    pthread_mutex_unlock(&w->mu);
}

/*
 * The error of a call on a broken communicator: the breaking error itself
 * for a member owed it (the sender of a mismatched message learns it at its
 * next call), else RP_ERR_COMM with the original reason.
 */
static rp_status broken_error(rp_comm *c, const char *what)
{
    world *w = H(c)->w;
    if (atomic_exchange(&w->m[c->rank].owed, 0))
        return rp_error_set(w->broken_status, __FILE__, __LINE__, "%s", w->reason);
    return RP_ERROR(RP_ERR_COMM, "%s on %s %d: the communicator is broken by an earlier error: %s",
                    what, comm_noun(c), c->ids[c->rank], w->reason);
}

/* One call in 64 bits, for the racy-but-atomic "last call" a timeout message shows. */
static uint64_t pack_call(const comm_coll_desc *d)
{
    return 1ull << 63 | (uint64_t)(d->kind & 0xff) << 52 | (uint64_t)(d->dtype & 0xff) << 44 |
           (uint64_t)(d->op & 0xff) << 36 | ((uint64_t)d->count & 0xfffffffffull);
}

static comm_coll_desc unpack_call(const member *m, uint64_t seq)
{
    uint64_t v = atomic_load(&m->last), u = atomic_load(&m->last_user);
    comm_coll_desc d = {.kind = (int)(v >> 52 & 0xff),
                        .dtype = (int)(v >> 44 & 0xff),
                        .op = (int)(v >> 36 & 0xff),
                        .count = (int64_t)(v & 0xfffffffffull),
                        .seq = seq,
                        .user_seq = u & ~(1ull << 63),
                        .internal = (int)(u >> 63)};
    if (d.internal) memcpy(d.what, m->last_what[seq & 1], sizeof d.what);
    return d;
}

/* ---- rendezvous -------------------------------------------------------------- */

enum { POLL_WAIT, POLL_READY, POLL_FAILED };

static int poll_members(world *w, uint64_t target)
{
    if (atomic_load_explicit(&w->broken, memory_order_acquire)) return POLL_FAILED;
    for (int q = 0; q < w->n; q++) {
        if (atomic_load_explicit(&w->m[q].phase, memory_order_acquire) >= target) continue;
        /* A member that left has its final phase; re-read it after seeing the flag. */
        if (atomic_load_explicit(&w->m[q].left, memory_order_acquire) &&
            atomic_load_explicit(&w->m[q].phase, memory_order_acquire) < target)
            return POLL_FAILED;
        return POLL_WAIT;
    }
    return POLL_READY;
}

/* Appends to buf (always NUL-terminated). */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* The error for a failed wait at `target`; breaks the communicator for everyone. */
static rp_status wait_failed(rp_comm *c, uint64_t target, const comm_coll_desc *d, bool timed_out)
{
    world *w = H(c)->w;
    char what[128], msg[1024] = "";
    comm_coll_desc_str(d, what, sizeof what);
    if (atomic_load_explicit(&w->broken, memory_order_acquire)) {
        /* A peer diagnosed it first: report its diagnosis. */
        return rp_error_set(w->broken_status, __FILE__, __LINE__, "%s", w->reason);
    }
    for (int q = 0; q < w->n; q++) {
        member *m = &w->m[q];
        if (atomic_load_explicit(&m->left, memory_order_acquire) &&
            atomic_load_explicit(&m->phase, memory_order_acquire) < target) {
            snprintf(msg, sizeof msg,
                     "%s %d ended its step (%s: %s) without calling %s, "
                     "which %s %d is waiting in",
                     comm_noun(c), c->ids[q], rp_status_name(m->left_status), m->left_reason, what,
                     comm_noun(c), c->ids[c->rank]);
            world_break(w, RP_ERR_COMM, msg);
            return rp_error_set(RP_ERR_COMM, __FILE__, __LINE__, "%s", msg);
        }
    }
    if (!timed_out)
        return rp_error_set(RP_ERR_COMM, __FILE__, __LINE__, "rendezvous failed in %s", what);
    snprintf(msg, sizeof msg, "timed out after %gs in %s: ", c->timeout, what);
    int late = 0;
    for (int q = 0; q < w->n; q++) {
        member *m = &w->m[q];
        uint64_t phase = atomic_load(&m->phase);
        if (phase >= target) continue;
        append(msg, sizeof msg, "%s%s %d did not arrive", late++ ? "; " : "", comm_noun(c),
               c->ids[q]);
        if (phase == 0) {
            append(msg, sizeof msg, " (it has made no collective call)");
        } else {
            char lastbuf[128];
            comm_coll_desc ld = unpack_call(m, phase & 1 ? (phase - 1) / 2 : phase / 2 - 1);
            append(msg, sizeof msg, " (%s %s)",
                   phase & 1 ? "it is waiting in" : "its last completed was",
                   comm_coll_desc_str(&ld, lastbuf, sizeof lastbuf));
        }
    }
    append(msg, sizeof msg, "; replicas that arrived:");
    for (int q = 0; q < w->n; q++)
        if (atomic_load(&w->m[q].phase) >= target) append(msg, sizeof msg, " %d", c->ids[q]);
    world_break(w, RP_ERR_TIMEOUT, msg);
    return rp_error_set(w->broken_status, __FILE__, __LINE__, "%s", w->reason);
}

/*
 * Publishes this member's phase, then waits until every member has passed
 * phase `target`, or fails (see the top of the file).
 */
static rp_status rendezvous(rp_comm *c, uint64_t publish, uint64_t target, const comm_coll_desc *d)
{
    world *w = H(c)->w;
    member *me = &w->m[c->rank];
    atomic_store(&me->phase, publish);
    wake_all(w);

    uint64_t start = rp_now_ns();
    for (unsigned spin = 0;; spin++) {
        int st = poll_members(w, target);
        if (st == POLL_READY) return RP_OK;
        if (st == POLL_FAILED) return wait_failed(c, target, d, false);
        if ((spin & 63) == 63) {
            if (rp_now_ns() - start > w->spin_ns) break;
            sched_yield();
        }
        cpu_relax();
    }

    uint64_t deadline_ns = start + (uint64_t)(c->timeout * 1e9);
    struct timespec deadline = {(time_t)(deadline_ns / 1000000000ull),
                                (long)(deadline_ns % 1000000000ull)};
    int st;
    bool timed_out = false;
    pthread_mutex_lock(&w->mu);
    atomic_fetch_add(&w->waiters, 1);
    while ((st = poll_members(w, target)) == POLL_WAIT) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &deadline) == ETIMEDOUT) {
            st = poll_members(w, target);
            timed_out = st == POLL_WAIT;
            break;
        }
    }
    atomic_fetch_sub(&w->waiters, 1);
    pthread_mutex_unlock(&w->mu);
    if (st == POLL_READY) return RP_OK;
    return wait_failed(c, target, d, timed_out);
}

/* ---- the data movement --------------------------------------------------------- */

/*
 * Copies a reduced block into a member's output. For large outputs the
 * stores bypass the cache (streaming stores): an ordinary store first reads
 * the line it writes (read-for-ownership), so a member writing N outputs
 * would move half as many bytes again as the copy itself - the difference
 * between ~65% and ~95% of memcpy's bandwidth here. The caller fences
 * before publishing its phase.
 */
static void copy_out(char *dst, const char *src, size_t bytes, bool stream)
{
#if defined(__SSE2__)
    if (stream) {
        size_t head = (size_t)(-(uintptr_t)dst & 15);
        if (head > bytes) head = bytes;
        memcpy(dst, src, head);
        dst += head;
        src += head;
        bytes -= head;
        size_t i = 0;
        for (; i + 64 <= bytes; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), a);
            _mm_stream_si128((__m128i *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(dst + i + 48), d);
        }
        memcpy(dst + i, src + i, bytes - i);
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, bytes);
}

static void store_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

static void do_all_reduce(rp_comm *c, const comm_coll_desc *d)
{
    handle *h = H(c);
    world *w = h->w;
    size_t es = rp_dtype_size(d->dtype);
    int n = w->n;
    for (int q = 0; q < n; q++) {
        h->sends[q] = w->m[q].send;
        h->recvs[q] = w->m[q].recv;
    }
    int64_t lo, hi, block = BLOCK_BYTES / (int64_t)es;
    comm_slice(d->count, es, c->rank, n, &lo, &hi);
    bool stream = (size_t)d->count * es >= STREAM_BYTES;
    _Alignas(64) char tmp[BLOCK_BYTES];
    for (int64_t off = lo; off < hi; off += block) {
        int64_t len = hi - off < block ? hi - off : block;
        comm_reduce_block(tmp, h->sends, n, off, len, d->dtype, d->op);
        for (int q = 0; q < n; q++)
            copy_out((char *)h->recvs[q] + off * es, tmp, (size_t)len * es, stream);
    }
    if (stream) store_fence();
}

static void do_reduce_scatter(rp_comm *c, const comm_coll_desc *d)
{
    handle *h = H(c);
    world *w = h->w;
    size_t es = rp_dtype_size(d->dtype);
    int n = w->n;
    for (int q = 0; q < n; q++)
        h->sends[q] = w->m[q].send;
    int64_t base, count, block = BLOCK_BYTES / (int64_t)es;
    comm_scatter_block(d, c->rank, &base, &count);
    char *out = w->m[c->rank].recv;
    _Alignas(64) char tmp[BLOCK_BYTES];
    for (int64_t off = 0; off < count; off += block) {
        int64_t len = count - off < block ? count - off : block;
        comm_reduce_block(tmp, h->sends, n, base + off, len, d->dtype, d->op);
        memcpy(out + off * es, tmp, (size_t)len * es);
    }
}

static void do_all_gather(rp_comm *c, const comm_coll_desc *d)
{
    world *w = H(c)->w;
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    const char *src = w->m[c->rank].send;
    for (int q = 0; q < w->n; q++) {
        char *dst = (char *)w->m[q].recv + bytes * (size_t)c->rank;
        if (dst != src) memcpy(dst, src, bytes);
    }
}

static void do_broadcast(rp_comm *c, const comm_coll_desc *d)
{
    world *w = H(c)->w;
    size_t es = rp_dtype_size(d->dtype);
    int64_t lo, hi;
    comm_slice(d->count, es, c->rank, w->n, &lo, &hi);
    const char *src = w->m[d->root].send;
    for (int q = 0; q < w->n; q++)
        if (q != d->root && hi > lo)
            memcpy((char *)w->m[q].recv + lo * es, src + lo * es, (size_t)(hi - lo) * es);
}

/* ---- point-to-point ------------------------------------------------------------------------- */

/*
 * Each destination has a queue per source (a channel) of sends not yet
 * received, and a list of its posted receives not yet matched; all of it is
 * under the world's mutex. A post (isend or irecv) matches at most one pair
 * - the new call with the oldest call waiting for it - and whoever makes the
 * match copies the data outside the lock, then completes both sides.
 *
 * A send whose receive is already posted is copied straight into it. One
 * that finds none is queued: up to EAGER_BYTES it is copied into the
 * message at once and completes; a larger one waits with its buffer
 * (the receiver copies from it: one copy, no staging). A larger send still
 * unmatched after BUFFER_AFTER_NS is copied into the message by its sender,
 * which then completes: that is what keeps two members sending to each
 * other (or a ring of blocking sends) from waiting for each other forever.
 */
#define EAGER_BYTES     65536
#define BUFFER_AFTER_NS 2000000ull

enum { REQ_PENDING, REQ_COPYING, REQ_DONE };

typedef struct tmsg {
    struct tmsg *next;
    comm_p2p_desc d; /* the send; d.peer is the destination */
    int src;
    uint64_t stamp;
    const void *data;  /* the sender's buffer, or `owned` */
    char *owned;       /* a copy, once the sender has gone on */
    struct treq *sreq; /* the sender's request while it waits with its buffer, else NULL */
} tmsg;

typedef struct treq {
    rp_comm_request base;
    comm_p2p_desc d;
    _Atomic int state;
    rp_status status;
    char error[1400];
    void *buf;         /* a receive's destination */
    tmsg *msg;         /* a send's queued message, while PENDING */
    struct treq *next; /* in the destination's posted list */
    uint64_t posted_ns;
    bool buffered; /* a send that tried to copy its message */
} treq;

static void p2p_free(world *w)
{
    for (int i = 0; w->qhead && i < w->n * w->n; i++) {
        for (tmsg *m = w->qhead[i], *next; m; m = next) {
            next = m->next;
            free(m->owned);
            free(m);
        }
    }
    free(w->qhead);
    free(w->qtail);
    free(w->sent);
    free(w->rcvd);
    free(w->posted);
    free(w->ptail);
}

/* One point-to-point call in 2 x 64 bits: kind, dtype, peer, count; tag, number. */
static void note_p2p(member *me, const comm_p2p_desc *d)
{
    uint64_t a = 1ull << 63 | (uint64_t)(d->send & 1) << 62 | (uint64_t)(d->dtype & 0xf) << 56 |
                 (uint64_t)(d->peer & 0xffff) << 40 | ((uint64_t)d->count & 0xffffffffffull);
    uint64_t b = (uint64_t)(uint32_t)d->tag << 32 | (d->num & 0xffffffffull);
    atomic_store_explicit(&me->p2p_last[1], b, memory_order_relaxed);
    atomic_store_explicit(&me->p2p_last[0], a, memory_order_relaxed);
    atomic_store_explicit(&me->p2p_latest, 1, memory_order_relaxed);
}

/* "its last completed call was ..." for member q, into buf. */
static const char *last_call_str(const rp_comm *c, int q, char *buf, size_t size)
{
    const member *m = &H(c)->w->m[q];
    uint64_t phase = atomic_load(&m->phase), a = atomic_load(&m->p2p_last[0]);
    char what[160];
    if (a && (atomic_load(&m->p2p_latest) || phase == 0)) {
        uint64_t b = atomic_load(&m->p2p_last[1]);
        comm_p2p_desc d = {.send = (int)(a >> 62 & 1),
                           .dtype = (int)(a >> 56 & 0xf),
                           .peer = (int)(a >> 40 & 0xffff),
                           .count = (int64_t)(a & 0xffffffffffull),
                           .tag = (int)(int32_t)(b >> 32),
                           .num = b & 0xffffffffull};
        snprintf(buf, size, "its last completed call was %s %s %s %d",
                 comm_p2p_desc_str(&d, true, what, sizeof what), d.send ? "to" : "from",
                 comm_noun(c), rp_comm_replica_id(c, d.peer));
    } else if (phase == 0) {
        snprintf(buf, size, "it has completed no call");
    } else {
        comm_coll_desc ld = unpack_call(m, phase & 1 ? (phase - 1) / 2 : phase / 2 - 1);
        snprintf(buf, size, "%s %s", phase & 1 ? "it is waiting in" : "its last completed call was",
                 comm_coll_desc_str(&ld, what, sizeof what));
    }
    return buf;
}

static void req_finish(world *w, treq *r, rp_status status, const char *error)
{
    r->status = status;
    if (status != RP_OK) snprintf(r->error, sizeof r->error, "%s", error);
    atomic_store_explicit(&r->state, REQ_DONE, memory_order_release);
    pthread_cond_broadcast(&w->cv);
}

/* Takes the message off its channel's queue (it is at the head: channels are matched in order). */
static void queue_pop(world *w, int ch)
{
    tmsg *m = w->qhead[ch];
    w->qhead[ch] = m->next;
    if (!w->qhead[ch]) w->qtail[ch] = NULL;
    m->next = NULL;
}

static void posted_remove(world *w, int dst, treq *r)
{
    treq **p = &w->posted[dst], *prev = NULL;
    while (*p && *p != r) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p) return;
    *p = r->next;
    if (w->ptail[dst] == r) w->ptail[dst] = prev;
    r->next = NULL;
}

/* The message a receive from `src` (or any) at `dst` would take next, with a tag filter for probe.
 */
static tmsg *next_message(world *w, int dst, int src, int tag)
{
    int n = w->n;
    if (src >= 0) {
        tmsg *m = w->qhead[dst * n + src];
        return m && (tag == RP_ANY_TAG || m->d.tag == tag) ? m : NULL;
    }
    tmsg *best = NULL;
    for (int q = 0; q < n; q++) {
        tmsg *m = w->qhead[dst * n + q];
        if (m && (tag == RP_ANY_TAG || m->d.tag == tag) && (!best || m->stamp < best->stamp))
            best = m;
    }
    return best;
}

/*
 * Matches receive r with message m (both at the head of their queues) under
 * the lock: both leave their queues; on a mismatch both sides fail and the
 * communicator breaks; else true (the caller copies, then completes).
 */
static bool pair(rp_comm *c, treq *r, tmsg *m)
{
    world *w = H(c)->w;
    int n = w->n, dst = m->d.peer, ch = dst * n + m->src;
    queue_pop(w, ch);
    posted_remove(w, dst, r);
    r->d.num = w->rcvd[ch]++;
    r->msg = m;
    if (comm_p2p_accepts(&r->d, &m->d)) {
        atomic_store_explicit(&r->state, REQ_COPYING, memory_order_relaxed);
        if (m->sreq) atomic_store_explicit(&m->sreq->state, REQ_COPYING, memory_order_relaxed);
        return true;
    }
    char who_s[32], who_r[32], msg[1024];
    comm_p2p_desc s = m->d, rd = r->d;
    s.peer = dst;
    rd.peer = m->src;
    snprintf(who_s, sizeof who_s, "%s %d", comm_noun(c), c->ids[m->src]);
    snprintf(who_r, sizeof who_r, "%s %d", comm_noun(c), c->ids[dst]);
    comm_p2p_mismatch_str(&s, who_s, &rd, who_r, msg, sizeof msg);
    /*
     * The sender has gone on: its next call says it. Owed before the break
     * is published: broken_error reads the flag without the lock once it
     * sees the break, and must not miss it.
     */
    if (!m->sreq) atomic_store(&w->m[m->src].owed, 1);
    world_break_locked(w, RP_ERR_MISMATCH, msg);
    r->msg = NULL; /* before it completes: its owner may free it once it is done */
    req_finish(w, r, RP_ERR_MISMATCH, msg);
    if (m->sreq) req_finish(w, m->sreq, RP_ERR_MISMATCH, msg);
    free(m->owned);
    free(m);
    return false;
}

/* The copy of a matched pair, outside the lock, then both sides complete. */
static void deliver(world *w, treq *r)
{
    tmsg *m = r->msg;
    size_t bytes = (size_t)m->d.count * rp_dtype_size(m->d.dtype);
    if (bytes) memcpy(r->buf, m->data, bytes);
    pthread_mutex_lock(&w->mu);
    /* Before it completes: once done, its owner may free it (and the address be reused) at once. */
    r->msg = NULL;
    req_finish(w, r, RP_OK, NULL);
    if (m->sreq) {
        m->sreq->msg = NULL;
        req_finish(w, m->sreq, RP_OK, NULL);
    }
    pthread_mutex_unlock(&w->mu);
    free(m->owned);
    free(m);
}

static treq *req_new(rp_comm *c, const comm_p2p_desc *d)
{
    treq *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->base.comm = c;
    r->base.backend = c;
    r->d = *d;
    atomic_init(&r->state, REQ_PENDING);
    r->posted_ns = rp_now_ns();
    return r;
}

static rp_status threads_isend(rp_comm *c, const comm_p2p_desc *d, const void *buf,
                               rp_comm_request **out)
{
    world *w = H(c)->w;
    char what[96];
    if (atomic_load_explicit(&w->broken, memory_order_acquire))
        return broken_error(c, comm_p2p_desc_str(d, false, what, sizeof what));
    /*
     * A destination that has left would never receive it: fail now rather than buffer it (a
     * sender in a loop would never learn, and its messages would pile up).
     */
    const member *dm = &w->m[d->peer];
    if (d->peer != c->rank && atomic_load_explicit(&dm->left, memory_order_acquire)) {
        char msg[1400];
        snprintf(msg, sizeof msg,
                 "%s %d has left (%s: %s): %s from %s %d to it would never be received",
                 comm_noun(c), c->ids[d->peer], rp_status_name(dm->left_status), dm->left_reason,
                 comm_p2p_desc_str(d, false, what, sizeof what), comm_noun(c), c->ids[c->rank]);
        world_break(w, RP_ERR_COMM, msg);
        return RP_ERROR(RP_ERR_COMM, "%s", msg);
    }
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    treq *r = req_new(c, d);
    tmsg *m = calloc(1, sizeof *m);
    if (!r || !m) {
        free(r);
        free(m);
        return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory",
                        comm_p2p_desc_str(d, false, what, sizeof what));
    }
    int n = w->n, dst = d->peer, ch = dst * n + c->rank;
    m->d = *d;
    m->src = c->rank;
    m->data = buf;
    pthread_mutex_lock(&w->mu);
    m->d.num = r->d.num = w->sent[ch]++;
    m->stamp = w->stamp++;
    /*
     * The oldest posted receive that takes from this channel. One is posted
     * only while nothing it accepts is queued, so the channel is empty then.
     */
    treq *match = NULL;
    if (!w->qhead[ch])
        for (treq *p = w->posted[dst]; p && !match; p = p->next)
            if (p->d.peer == c->rank || p->d.peer == RP_ANY_SOURCE) match = p;
    bool copy = false;
    if (!match && bytes <= EAGER_BYTES) {
        /* Small: copied now (outside the lock is not worth it); the send is done. */
        m->owned = bytes ? malloc(bytes) : NULL;
        if (bytes && !m->owned) {
            w->sent[ch]--;
            pthread_mutex_unlock(&w->mu);
            free(m);
            free(r);
            return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory",
                            comm_p2p_desc_str(d, false, what, sizeof what));
        }
        if (bytes) memcpy(m->owned, buf, bytes);
        m->data = m->owned;
        atomic_store(&r->state, REQ_DONE);
    } else {
        m->sreq = r;
        r->msg = m;
    }
    if (w->qtail[ch])
        w->qtail[ch]->next = m;
    else
        w->qhead[ch] = m;
    w->qtail[ch] = m;
    if (match) copy = pair(c, match, m);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (copy) deliver(w, match);
    *out = &r->base;
    return RP_OK;
}

static rp_status threads_irecv(rp_comm *c, const comm_p2p_desc *d, void *buf, rp_comm_request **out)
{
    world *w = H(c)->w;
    char what[96];
    if (atomic_load_explicit(&w->broken, memory_order_acquire))
        return broken_error(c, comm_p2p_desc_str(d, false, what, sizeof what));
    treq *r = req_new(c, d);
    if (!r)
        return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory",
                        comm_p2p_desc_str(d, false, what, sizeof what));
    r->buf = buf;
    int dst = c->rank;
    pthread_mutex_lock(&w->mu);
    /*
     * No receive posted earlier can take a queued message (a post matches
     * whatever it can at once), so this one takes the oldest it accepts.
     */
    tmsg *m = next_message(w, dst, d->peer, RP_ANY_TAG);
    if (w->ptail[dst])
        w->ptail[dst]->next = r;
    else
        w->posted[dst] = r;
    w->ptail[dst] = r;
    bool copy = m ? pair(c, r, m) : false;
    pthread_mutex_unlock(&w->mu);
    if (copy) deliver(w, r);
    *out = &r->base;
    return RP_OK;
}

/* Takes a pending request out of the queues (it failed). Under the lock. */
static void req_unlink(world *w, rp_comm *c, treq *r)
{
    if (r->d.send) {
        tmsg *m = r->msg;
        if (!m) return;
        int ch = m->d.peer * w->n + c->rank;
        tmsg **p = &w->qhead[ch], *prev = NULL;
        while (*p && *p != m) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p) {
            *p = m->next;
            if (w->qtail[ch] == m) w->qtail[ch] = prev;
        }
        free(m);
        r->msg = NULL;
    } else {
        posted_remove(w, c->rank, r);
    }
}

/*
 * Why pending request r cannot complete, if it cannot (the communicator
 * broke, or its peer left); timed_out adds the timeout. Under the lock;
 * fails r and returns true.
 */
static bool req_check(rp_comm *c, treq *r, bool timed_out)
{
    world *w = H(c)->w;
    char what[96], msg[1400], last[256];
    comm_p2p_desc_str(&r->d, r->d.send, what, sizeof what);
    int me = c->ids[c->rank];
    if (atomic_load(&w->broken)) {
        rp_status st = atomic_exchange(&w->m[c->rank].owed, 0) ? w->broken_status : RP_ERR_COMM;
        snprintf(msg, sizeof msg, "%s on %s %d: the communicator is broken: %.1200s", what,
                 comm_noun(c), me, w->reason);
        req_unlink(w, c, r);
        req_finish(w, r, st, st == RP_ERR_COMM ? msg : w->reason);
        return true;
    }
    int peer = r->d.peer, gone = -1;
    if (peer >= 0) {
        if (atomic_load(&w->m[peer].left)) gone = peer;
    } else {
        gone = -2; /* any source: only when every other member has left */
        for (int q = 0; q < w->n && gone == -2; q++)
            if (q != c->rank && !atomic_load(&w->m[q].left)) gone = -1;
    }
    if (gone != -1) {
        const member *g = gone >= 0 ? &w->m[gone] : NULL;
        if (g)
            snprintf(msg, sizeof msg,
                     "%s %d ended its step (%s: %s) without %s the message of %s, which "
                     "%s %d is waiting in",
                     comm_noun(c), c->ids[gone], rp_status_name(g->left_status), g->left_reason,
                     r->d.send ? "receiving" : "sending", what, comm_noun(c), me);
        else
            snprintf(msg, sizeof msg,
                     "every other %s ended its step while %s %d waits in %s from any %s",
                     comm_noun(c), comm_noun(c), me, what, comm_noun(c));
        world_break_locked(w, RP_ERR_COMM, msg);
        req_unlink(w, c, r);
        req_finish(w, r, RP_ERR_COMM, msg);
        return true;
    }
    /*
     * A receive from a peer that has gone on to a collective this member has
     * not reached: the collective cannot complete without this member, and the
     * peer's send, had it made one, would be queued already (a post matches
     * at once). They wait for each other: the peer skipped the send.
     */
    if (!r->d.send && peer >= 0 &&
        atomic_load_explicit(&w->m[peer].phase, memory_order_acquire) > 2 * c->seq) {
        char coll[128];
        comm_coll_desc ld = unpack_call(&w->m[peer], c->seq);
        snprintf(msg, sizeof msg,
                 "%s %d went on to %s without sending the message of %s, which %s %d is "
                 "waiting in (each waits for the other: a send must come before the sender's "
                 "next collective)",
                 comm_noun(c), c->ids[peer], comm_coll_desc_str(&ld, coll, sizeof coll), what,
                 comm_noun(c), me);
        world_break_locked(w, RP_ERR_MISMATCH, msg);
        req_unlink(w, c, r);
        req_finish(w, r, RP_ERR_MISMATCH, msg);
        return true;
    }
    if (!timed_out) return false;
    if (peer >= 0)
        snprintf(msg, sizeof msg,
                 "timed out after %gs in %s %s %s %d on %s %d: %s %d did not %s (%s)", c->timeout,
                 what, r->d.send ? "to" : "from", comm_noun(c), c->ids[peer], comm_noun(c), me,
                 comm_noun(c), c->ids[peer], r->d.send ? "receive it" : "send",
                 last_call_str(c, peer, last, sizeof last));
    else
        snprintf(msg, sizeof msg,
                 "timed out after %gs in %s from any %s on %s %d: no %s sent to it", c->timeout,
                 what, comm_noun(c), comm_noun(c), me, comm_noun(c));
    world_break_locked(w, RP_ERR_TIMEOUT, msg);
    req_unlink(w, c, r);
    req_finish(w, r, RP_ERR_TIMEOUT, msg);
    return true;
}

/*
 * A send still waiting with its buffer after BUFFER_AFTER_NS: copy the
 * message so the sender can go on (see the top of this section). Called and
 * returns with the lock held; drops it for the copy.
 */
static void buffer_send(world *w, treq *r)
{
    r->buffered = true;
    tmsg *m = r->msg;
    size_t bytes = (size_t)m->d.count * rp_dtype_size(m->d.dtype);
    const void *src = m->data;
    pthread_mutex_unlock(&w->mu);
    char *copy = malloc(bytes);
    if (copy) memcpy(copy, src, bytes); /* the buffer stays valid: the sender is here */
    pthread_mutex_lock(&w->mu);
    if (!copy) return; /* no memory: wait with the buffer */
    if (atomic_load(&r->state) != REQ_PENDING || r->msg != m) {
        free(copy);
        return;
    }
    m->owned = copy;
    m->data = copy;
    m->sreq = NULL;
    r->msg = NULL;
    req_finish(w, r, RP_OK, NULL);
}

static rp_status req_end(rp_comm *c, treq *r)
{
    rp_status status = r->status;
    if (status == RP_OK)
        note_p2p(&H(c)->w->m[c->rank], &r->d);
    else
        rp_error_set(status, __FILE__, __LINE__, "%s", r->error);
    free(r);
    return status;
}

static rp_status threads_wait(rp_comm_request *req, double deadline)
{
    treq *r = (treq *)req;
    rp_comm *c = req->backend;
    world *w = H(c)->w;
    uint64_t start = rp_now_ns();
    for (unsigned spin = 0; atomic_load_explicit(&r->state, memory_order_acquire) != REQ_DONE;
         spin++) {
        if ((spin & 63) == 63 && (rp_now_ns() - start > w->spin_ns || atomic_load(&w->broken)))
            break;
        cpu_relax();
    }
    pthread_mutex_lock(&w->mu);
    /* Counted among the sleepers, so a peer arriving at a collective wakes it (see req_check). */
    atomic_fetch_add(&w->waiters, 1);
    while (atomic_load(&r->state) != REQ_DONE) {
        uint64_t now = rp_now_ns();
        if (atomic_load(&r->state) == REQ_PENDING) {
            if (req_check(c, r, rp_now_s() > deadline)) break;
            if (r->d.send && !r->buffered && r->msg && now - r->posted_ns >= BUFFER_AFTER_NS) {
                buffer_send(w, r);
                continue;
            }
        }
        /* Sleep until woken, the deadline, or (a send with its buffer) the time to copy it. */
        double until = deadline;
        if (r->d.send && !r->buffered) {
            double b = (double)(r->posted_ns + BUFFER_AFTER_NS) * 1e-9;
            if (b < until) until = b;
        }
        double now_s = rp_now_s();
        if (until < now_s + 1e-4) until = now_s + 1e-4;
        uint64_t ns = (uint64_t)(until * 1e9);
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    atomic_fetch_sub(&w->waiters, 1);
    pthread_mutex_unlock(&w->mu);
    return req_end(c, r);
}

static rp_status threads_test(rp_comm_request *req, bool *done)
{
    treq *r = (treq *)req;
    rp_comm *c = req->backend;
    world *w = H(c)->w;
    *done = false;
    if (atomic_load_explicit(&r->state, memory_order_acquire) != REQ_DONE) {
        pthread_mutex_lock(&w->mu);
        if (atomic_load(&r->state) == REQ_PENDING) req_check(c, r, false);
        pthread_mutex_unlock(&w->mu);
        if (atomic_load_explicit(&r->state, memory_order_acquire) != REQ_DONE) return RP_OK;
    }
    *done = true;
    return req_end(c, r);
}

static rp_status threads_probe(rp_comm *c, int peer, int tag, bool *ready, comm_p2p_desc *found)
{
    world *w = H(c)->w;
    if (atomic_load_explicit(&w->broken, memory_order_acquire)) return broken_error(c, "probe");
    pthread_mutex_lock(&w->mu);
    tmsg *m = next_message(w, c->rank, peer, tag);
    *ready = m != NULL;
    if (m) {
        *found = m->d;
        found->peer = m->src;
    }
    pthread_mutex_unlock(&w->mu);
    return RP_OK;
}

/* ---- the table ---------------------------------------------------------------- */

static rp_status threads_collective(rp_comm *c, const comm_coll_desc *d, const void *send,
                                    void *recv)
{
    handle *h = H(c);
    world *w = h->w;
    char what[128];
    if (atomic_load_explicit(&w->broken, memory_order_acquire))
        return broken_error(c, comm_coll_desc_str(d, what, sizeof what));
    member *me = &w->m[c->rank];
    int parity = (int)(d->seq & 1);
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    bool small =
        (d->kind == RP_COLL_ALL_REDUCE && bytes <= SMALL_BYTES) || d->kind == RP_COLL_BARRIER;
    me->desc[parity] = *d;
    me->send = send;
    me->recv = recv;
    if (d->internal) memcpy(me->last_what[parity], d->what, sizeof d->what);
    atomic_store_explicit(&me->last_user, d->user_seq | (uint64_t)(d->internal != 0) << 63,
                          memory_order_relaxed);
    atomic_store_explicit(&me->last, pack_call(d), memory_order_release);
    atomic_store_explicit(&me->p2p_latest, 0, memory_order_relaxed);
    /*
     * The small path has one rendezvous: the input goes to the staging slot
     * of this sequence parity, and the member publishes the phase of a
     * completed call. A slot is written again two calls later, which no
     * member reaches before every member has arrived at the call in
     * between, i.e. has finished reading this one.
     */
    if (small && bytes > 0) memcpy(me->staging[parity], send, bytes);
    RP_CHECK(rendezvous(c, 2 * d->seq + (small ? 2 : 1), 2 * d->seq + 1, d));

    /* Every member compares every call with rank 0's, so all report the same mismatch. */
    const comm_coll_desc *first = &w->m[0].desc[parity];
    for (int q = 1; q < w->n; q++) {
        const comm_coll_desc *other = &w->m[q].desc[parity];
        if (comm_coll_desc_equal(other, first)) continue;
        char a[32], b[32], msg[640];
        snprintf(a, sizeof a, "%s %d", comm_noun(c), c->ids[0]);
        snprintf(b, sizeof b, "%s %d", comm_noun(c), c->ids[q]);
        comm_coll_mismatch_str(first, a, other, b, msg, sizeof msg);
        world_break(w, RP_ERR_MISMATCH, msg);
        return RP_ERROR(RP_ERR_MISMATCH, "%s", msg);
    }
    if (small) {
        if (d->count > 0) {
            /* Every member reduces the whole buffer, in rank order: bitwise the same everywhere. */
            for (int q = 0; q < w->n; q++)
                h->sends[q] = w->m[q].staging[parity];
            comm_reduce_block(recv, h->sends, w->n, 0, d->count, d->dtype, d->op);
        }
        c->seq++;
        return RP_OK;
    }
    if (d->count > 0) {
        switch (d->kind) {
        case RP_COLL_ALL_REDUCE:
            do_all_reduce(c, d);
            break;
        case RP_COLL_REDUCE_SCATTER:
            do_reduce_scatter(c, d);
            break;
        case RP_COLL_ALL_GATHER:
            do_all_gather(c, d);
            break;
        case RP_COLL_BROADCAST:
            do_broadcast(c, d);
            break;
        default:
            break;
        }
    }
    RP_CHECK(rendezvous(c, 2 * d->seq + 2, 2 * d->seq + 2, d));
    c->seq++;
    return RP_OK;
}

static bool threads_broken(const rp_comm *c)
{
    const handle *h = H(c);
    return atomic_load(&h->w->broken) != 0;
}

static void threads_leave(rp_comm *c, rp_status status, const char *reason)
{
    handle *h = H(c);
    member *me = &h->w->m[c->rank];
    me->left_status = status;
    snprintf(me->left_reason, sizeof me->left_reason, "%s", reason);
    atomic_store_explicit(&me->left, 1, memory_order_release);
    /* Wake sleepers unconditionally: one may be about to wait on this member. */
    pthread_mutex_lock(&h->w->mu);
    pthread_cond_broadcast(&h->w->cv);
    pthread_mutex_unlock(&h->w->mu);
}

static void threads_fail(rp_comm *c, rp_status status, const char *reason)
{
    world_break(H(c)->w, status, reason);
}

static void threads_rejoin(rp_comm *c)
{
    handle *h = H(c);
    atomic_store(&h->w->m[c->rank].left, 0);
}

static void threads_destroy(rp_comm *c)
{
    handle *h = H(c);
    if (atomic_fetch_sub(&h->w->refs, 1) == 1) world_free(h->w);
    free(c->ids);
    free(c);
}

/*
 * One member's handle on world w: the rp_comm and the backend's handle in
 * one allocation (handle right after the rp_comm), so destroy is one free.
 */
static rp_status handle_create(rp_comm **out, world *w, int rank, const int *ids, double timeout)
{
    int n = w->n;
    size_t size = sizeof(rp_comm) + sizeof(handle) + (size_t)n * 2 * sizeof(void *);
    rp_comm *c = calloc(1, size);
    int *idcopy = malloc((size_t)n * sizeof(int));
    if (!c || !idcopy) {
        free(c);
        free(idcopy);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a communicator handle for %d members", n);
    }
    handle *h = (handle *)(c + 1);
    h->w = w;
    h->sends = (const void **)(h + 1);
    h->recvs = (void **)(h->sends + n);
    for (int q = 0; q < n; q++)
        idcopy[q] = ids ? ids[q] : q;
    c->ops = &threads_ops;
    c->rank = rank;
    c->size = n;
    c->ids = idcopy;
    c->timeout = timeout;
    c->impl = h;
    *out = c;
    return RP_OK;
}

rp_status rp_comm_threads_create(rp_comm **comms, int n, const int *ids, double timeout_s)
{
    if (!comms) return RP_ERROR(RP_ERR_INVALID, "comms is NULL");
    if (n < 1) return RP_ERROR(RP_ERR_INVALID, "%d members: need at least 1", n);
    if (!(timeout_s > 0)) return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be > 0", timeout_s);
    world *w = world_create(n);
    if (!w) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a communicator of %d members", n);
    for (int r = 0; r < n; r++) {
        rp_status status = handle_create(&comms[r], w, r, ids, timeout_s);
        if (status != RP_OK) {
            for (int q = 0; q < r; q++) {
                free(comms[q]->ids);
                free(comms[q]);
                comms[q] = NULL;
            }
            world_free(w);
            return status;
        }
    }
    return RP_OK;
}

/*
 * Split: the members exchange (color, key) with an all-gather; the first
 * member of each group (in (key, rank) order) creates the group's shared
 * state and the pointers are exchanged with a second all-gather.
 */
static rp_status threads_split(rp_comm *c, int color, int key, rp_comm **out)
{
    int n = c->size;
    rp_status status = RP_OK;
    int64_t mine[2] = {color, key};
    int64_t *all = malloc((size_t)n * 2 * sizeof(int64_t)),
            *ptrs = malloc((size_t)n * sizeof(int64_t));
    int *order = malloc((size_t)n * sizeof(int)), *ids = malloc((size_t)n * sizeof(int));
    world *created = NULL;
    if (!all || !ptrs || !order || !ids) {
        free(all);
        free(ptrs);
        free(order);
        free(ids);
        /* Still take part, so the peers do not wait for this member. */
        rp_comm_leave(c, RP_ERR_NOMEM, "out of memory in rp_comm_split");
        return RP_ERROR(RP_ERR_NOMEM, "rp_comm_split: out of memory");
    }
    RP_TRY(rp_comm_all_gather(c, mine, all, 2, RP_I64));
    /* The group in (key, rank) order. */
    int g = color >= 0 ? comm_group_order(all, n, color, order) : 0, pos = -1;
    for (int j = 0; j < g; j++) {
        if (order[j] == c->rank) pos = j;
        ids[j] = c->ids[order[j]];
    }
    if (pos == 0) created = world_create(g);
    int64_t ptr = (int64_t)(intptr_t)created;
    RP_TRY(rp_comm_all_gather(c, &ptr, ptrs, 1, RP_I64));
    if (color >= 0) {
        world *w = (world *)(intptr_t)ptrs[order[0]];
        if (!w) {
            status = RP_ERROR(RP_ERR_NOMEM,
                              "rp_comm_split: the group of color %d could not be created", color);
            goto cleanup;
        }
        RP_TRY(handle_create(out, w, pos, ids, c->timeout));
        created = NULL;
    }
cleanup:
    if (created) world_free(created);
    free(all);
    free(ptrs);
    free(order);
    free(ids);
    return status;
}

static const comm_ops threads_ops = {
    .name = "threads",
    .collective = threads_collective,
    .split = threads_split,
    .leave = threads_leave,
    .rejoin = threads_rejoin,
    .fail = threads_fail,
    .broken = threads_broken,
    .destroy = threads_destroy,
    .isend = threads_isend,
    .irecv = threads_irecv,
    .wait = threads_wait,
    .test = threads_test,
    .probe = threads_probe,
};
