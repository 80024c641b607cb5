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

/* Elements of one reduction block: 16 KiB stays in L1 while it is written to every output. */
#define BLOCK_BYTES 16384
/*
 * How long a waiting member spins before it sleeps: long while every member
 * can have a core (a sleeping thread takes tens of microseconds to wake, and
 * cross-replica batch norm meets its peers dozens of times a step), short
 * when members share cores and spinning would steal a peer's time.
 */
#define SPIN_NS_OWN_CORE 1000000
#define SPIN_NS_SHARED 50000
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
    _Atomic int left;           /* 1 while this member has left the step */
    rp_status left_status;      /* written before `left` is set */
    char left_reason[256];
    rp_coll_desc desc[2];       /* the call of sequence number s is desc[s & 1]; written before `phase` */
    const void *send;
    void *recv;
    char *staging[2];           /* [SMALL_BYTES] each: inputs of small all-reduces, by sequence parity */
} __attribute__((aligned(64))) member;

typedef struct world {
    int n;
    _Atomic int refs;           /* member handles alive */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int waiters;        /* members sleeping on cv */
    _Atomic int broken;         /* set once, after `reason` */
    rp_status broken_status;
    char reason[1024];
    member *m;                  /* [n] */
    char *staging;              /* [n * 2 * SMALL_BYTES] */
    uint64_t spin_ns;
} world;

typedef struct handle {
    world *w;
    const void **sends;         /* [n] scratch: the members' input pointers */
    void **recvs;               /* [n] */
} handle;

static const rp_comm_ops threads_ops;

static handle *H(const rp_comm *c) { return c->impl; }

/* ---- the shared state ------------------------------------------------------ */

static void world_free(world *w)
{
    if (!w) return;
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
    for (int q = 0; w->m && w->staging && q < n; q++)
        for (int k = 0; k < 2; k++) w->m[q].staging[k] = w->staging + ((size_t)q * 2 + (size_t)k) * SMALL_BYTES;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&w->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (!w->m || !w->staging || rc != 0 || pthread_mutex_init(&w->mu, NULL) != 0) {
        if (rc == 0) pthread_cond_destroy(&w->cv);
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

/* Marks the communicator broken with `status` and a reason (the first caller wins). */
static void world_break(world *w, rp_status status, const char *reason)
{
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->broken)) {
        snprintf(w->reason, sizeof w->reason, "%s", reason);
        w->broken_status = status;
        atomic_store(&w->broken, 1);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* One call in 64 bits, for the racy-but-atomic "last call" a timeout message shows. */
static uint64_t pack_call(const rp_coll_desc *d)
{
    return 1ull << 63 | (uint64_t)(d->kind & 0xff) << 52 | (uint64_t)(d->dtype & 0xff) << 44 |
           (uint64_t)(d->op & 0xff) << 36 | ((uint64_t)d->count & 0xfffffffffull);
}

static rp_coll_desc unpack_call(uint64_t v, uint64_t seq)
{
    rp_coll_desc d = {.kind = (int)(v >> 52 & 0xff), .dtype = (int)(v >> 44 & 0xff),
                      .op = (int)(v >> 36 & 0xff), .count = (int64_t)(v & 0xfffffffffull), .seq = seq};
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
static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
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
static rp_status wait_failed(rp_comm *c, uint64_t target, const rp_coll_desc *d, bool timed_out)
{
    world *w = H(c)->w;
    char what[128], msg[1024] = "";
    rp_coll_desc_str(d, what, sizeof what);
    if (atomic_load_explicit(&w->broken, memory_order_acquire)) {
        /* A peer diagnosed it first: report its diagnosis. */
        return rp_error_set(w->broken_status, __FILE__, __LINE__, "%s", w->reason);
    }
    for (int q = 0; q < w->n; q++) {
        member *m = &w->m[q];
        if (atomic_load_explicit(&m->left, memory_order_acquire) &&
            atomic_load_explicit(&m->phase, memory_order_acquire) < target) {
            snprintf(msg, sizeof msg, "replica %d ended its step (%s: %s) without calling %s, "
                     "which replica %d is waiting in", c->ids[q], rp_status_name(m->left_status),
                     m->left_reason, what, c->ids[c->rank]);
            world_break(w, RP_ERR_COMM, msg);
            return rp_error_set(RP_ERR_COMM, __FILE__, __LINE__, "%s", msg);
        }
    }
    if (!timed_out) return rp_error_set(RP_ERR_COMM, __FILE__, __LINE__, "rendezvous failed in %s", what);
    snprintf(msg, sizeof msg, "timed out after %gs in %s: ", c->timeout, what);
    int late = 0;
    for (int q = 0; q < w->n; q++) {
        member *m = &w->m[q];
        uint64_t phase = atomic_load(&m->phase);
        if (phase >= target) continue;
        append(msg, sizeof msg, "%sreplica %d did not arrive", late++ ? "; " : "", c->ids[q]);
        if (phase == 0) {
            append(msg, sizeof msg, " (it has made no collective call)");
        } else {
            char lastbuf[128];
            rp_coll_desc ld = unpack_call(atomic_load(&m->last), phase & 1 ? (phase - 1) / 2 : phase / 2 - 1);
            append(msg, sizeof msg, " (%s %s)", phase & 1 ? "it is waiting in" : "its last completed was",
                   rp_coll_desc_str(&ld, lastbuf, sizeof lastbuf));
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
static rp_status rendezvous(rp_comm *c, uint64_t publish, uint64_t target, const rp_coll_desc *d)
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
        __builtin_ia32_pause();
    }

    uint64_t deadline_ns = start + (uint64_t)(c->timeout * 1e9);
    struct timespec deadline = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
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

static void do_all_reduce(rp_comm *c, const rp_coll_desc *d)
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
    rp_comm_slice(d->count, es, c->rank, n, &lo, &hi);
    bool stream = (size_t)d->count * es >= STREAM_BYTES;
    _Alignas(64) char tmp[BLOCK_BYTES];
    for (int64_t off = lo; off < hi; off += block) {
        int64_t len = hi - off < block ? hi - off : block;
        rp_reduce_block(tmp, h->sends, n, off, len, d->dtype, d->op);
        for (int q = 0; q < n; q++) copy_out((char *)h->recvs[q] + off * es, tmp, (size_t)len * es, stream);
    }
    if (stream) store_fence();
}

static void do_reduce_scatter(rp_comm *c, const rp_coll_desc *d)
{
    handle *h = H(c);
    world *w = h->w;
    size_t es = rp_dtype_size(d->dtype);
    int n = w->n;
    for (int q = 0; q < n; q++) h->sends[q] = w->m[q].send;
    int64_t base = d->count * c->rank, block = BLOCK_BYTES / (int64_t)es;
    char *out = w->m[c->rank].recv;
    _Alignas(64) char tmp[BLOCK_BYTES];
    for (int64_t off = 0; off < d->count; off += block) {
        int64_t len = d->count - off < block ? d->count - off : block;
        rp_reduce_block(tmp, h->sends, n, base + off, len, d->dtype, d->op);
        memcpy(out + off * es, tmp, (size_t)len * es);
    }
}

static void do_all_gather(rp_comm *c, const rp_coll_desc *d)
{
    world *w = H(c)->w;
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    const char *src = w->m[c->rank].send;
    for (int q = 0; q < w->n; q++) {
        char *dst = (char *)w->m[q].recv + bytes * (size_t)c->rank;
        if (dst != src) memcpy(dst, src, bytes);
    }
}

static void do_broadcast(rp_comm *c, const rp_coll_desc *d)
{
    world *w = H(c)->w;
    size_t es = rp_dtype_size(d->dtype);
    int64_t lo, hi;
    rp_comm_slice(d->count, es, c->rank, w->n, &lo, &hi);
    const char *src = w->m[d->root].send;
    for (int q = 0; q < w->n; q++)
        if (q != d->root && hi > lo)
            memcpy((char *)w->m[q].recv + lo * es, src + lo * es, (size_t)(hi - lo) * es);
}

/* ---- the table ---------------------------------------------------------------- */

static rp_status threads_collective(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv)
{
    handle *h = H(c);
    world *w = h->w;
    char what[128];
    if (atomic_load_explicit(&w->broken, memory_order_acquire))
        return RP_ERROR(RP_ERR_COMM, "%s on replica %d: the communicator is broken by an earlier "
                        "error: %s", rp_coll_desc_str(d, what, sizeof what), c->ids[c->rank], w->reason);
    member *me = &w->m[c->rank];
    int parity = (int)(d->seq & 1);
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    bool small = (d->kind == RP_COLL_ALL_REDUCE && bytes <= SMALL_BYTES) || d->kind == RP_COLL_BARRIER;
    me->desc[parity] = *d;
    me->send = send;
    me->recv = recv;
    atomic_store_explicit(&me->last, pack_call(d), memory_order_relaxed);
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
    const rp_coll_desc *first = &w->m[0].desc[parity];
    for (int q = 1; q < w->n; q++) {
        const rp_coll_desc *other = &w->m[q].desc[parity];
        if (rp_coll_desc_equal(other, first)) continue;
        char a[128], b[128], msg[512];
        snprintf(msg, sizeof msg, "collective mismatch: replica %d called %s but replica %d called %s; "
                 "every replica must make the same collective calls in the same order",
                 c->ids[0], rp_coll_desc_str(first, a, sizeof a), c->ids[q],
                 rp_coll_desc_str(other, b, sizeof b));
        world_break(w, RP_ERR_MISMATCH, msg);
        return RP_ERROR(RP_ERR_MISMATCH, "%s", msg);
    }
    if (small) {
        if (d->count > 0) {
            /* Every member reduces the whole buffer, in rank order: bitwise the same everywhere. */
            for (int q = 0; q < w->n; q++) h->sends[q] = w->m[q].staging[parity];
            rp_reduce_block(recv, h->sends, w->n, 0, d->count, d->dtype, d->op);
        }
        c->seq++;
        return RP_OK;
    }
    if (d->count > 0) {
        switch (d->kind) {
        case RP_COLL_ALL_REDUCE: do_all_reduce(c, d); break;
        case RP_COLL_REDUCE_SCATTER: do_reduce_scatter(c, d); break;
        case RP_COLL_ALL_GATHER: do_all_gather(c, d); break;
        case RP_COLL_BROADCAST: do_broadcast(c, d); break;
        default: break;
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
    for (int q = 0; q < n; q++) idcopy[q] = ids ? ids[q] : q;
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
    int64_t *all = malloc((size_t)n * 2 * sizeof(int64_t)), *ptrs = malloc((size_t)n * sizeof(int64_t));
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
    int g = color >= 0 ? rp_comm_group_order(all, n, color, order) : 0, pos = -1;
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
            status = RP_ERROR(RP_ERR_NOMEM, "rp_comm_split: the group of color %d could not be created", color);
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

static const rp_comm_ops threads_ops = {
    .name = "threads",
    .collective = threads_collective,
    .split = threads_split,
    .leave = threads_leave,
    .rejoin = threads_rejoin,
    .fail = threads_fail,
    .broken = threads_broken,
    .destroy = threads_destroy,
};
