/*
 * test_comm_p2p.c - point-to-point messages on the threads backend
 * (replicator/comm.h), and the runtime's own calls (begin/end_internal).
 *
 * A ring exchange for every size from 0 to 64 MiB (powers of two and odd
 * sizes), blocking and non-blocking; tag, count and dtype mismatches
 * reported on both sides, naming both calls; a missing sender timing out
 * by name; requests completed in any order; two members sending to each
 * other at once; RP_ANY_SOURCE, RP_ANY_TAG and probe; a broken
 * communicator and a member that left failing a receive at once; and a
 * replica that skips a user collective for an internal one.
 *
 * As in test_comm.c, each member runs on its own thread and records what
 * happened; the main thread asserts after joining, and every join is
 * bounded.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np, strcasestr */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "replicator/comm.h"

#define MAX_MEMBERS     8
#define NOUT            8
#define JOIN_LIMIT_S    120.0
#define SWEEP_TIMEOUT_S 60.0
#define BIG_BYTES       ((int64_t)64 << 20)

/* Replica ids for messages: numbers that cannot be mistaken for a count or a tag. */
static const int IDS[MAX_MEMBERS] = {9000, 9037, 9074, 9111, 9148, 9185, 9222, 9259};

typedef struct {
    rp_status status;
    double elapsed_s;
    char error[1024];
} outcome;

typedef struct team team;

typedef struct {
    team *team;
    int rank;
    rp_comm *comm;
    outcome out[NOUT];
    int bad;
    char bad_what[256];
} member;

typedef void (*member_fn)(member *m, void *ctx);

struct team {
    int n;
    rp_comm *comms[MAX_MEMBERS];
    member m[MAX_MEMBERS];
    member_fn fn;
    void *ctx;
};

static void record(outcome *o, rp_status status, double t0)
{
    o->status = status;
    o->elapsed_s = rp_now_s() - t0;
    snprintf(o->error, sizeof o->error, "%s", status == RP_OK ? "" : rp_last_error());
}

static void member_fail(member *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void member_fail(member *m, const char *fmt, ...)
{
    if (m->bad++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->bad_what, sizeof m->bad_what, fmt, ap);
        va_end(ap);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_comm_p2p: out of memory (%zu bytes)\n", n);
        _exit(1);
    }
    return p;
}

static void team_create(team *t, int n, double timeout_s)
{
    memset(t, 0, sizeof *t);
    t->n = n;
    rp_status s = rp_comm_threads_create(t->comms, n, IDS, timeout_s);
    if (s != RP_OK) {
        print_error("rp_comm_threads_create(n=%d): %s\n", n, rp_last_error());
        fail();
    }
    for (int r = 0; r < n; r++) {
        t->m[r].team = t;
        t->m[r].rank = r;
        t->m[r].comm = t->comms[r];
    }
}

static void *member_thread(void *arg)
{
    member *m = arg;
    m->team->fn(m, m->team->ctx);
    return NULL;
}

static void team_run(team *t, member_fn fn, void *ctx)
{
    t->fn = fn;
    t->ctx = ctx;
    pthread_t th[MAX_MEMBERS];
    for (int r = 0; r < t->n; r++) {
        memset(t->m[r].out, 0, sizeof t->m[r].out);
        for (int k = 0; k < NOUT; k++)
            t->m[r].out[k].status = 1; /* "not called" */
        t->m[r].bad = 0;
        t->m[r].bad_what[0] = '\0';
    }
    for (int r = 0; r < t->n; r++)
        assert_int_equal(pthread_create(&th[r], NULL, member_thread, &t->m[r]), 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)JOIN_LIMIT_S;
    for (int r = 0; r < t->n; r++) {
        if (pthread_timedjoin_np(th[r], NULL, &deadline) != 0) {
            fprintf(stderr,
                    "test_comm_p2p: member %d of %d still running after %.0f s: a call hangs\n", r,
                    t->n, JOIN_LIMIT_S);
            fflush(stderr);
            _exit(1);
        }
    }
    for (int r = 0; r < t->n; r++) {
        if (t->m[r].bad) {
            print_error("member %d: %d failed checks, first: %s\n", r, t->m[r].bad,
                        t->m[r].bad_what);
            fail();
        }
    }
}

static void team_destroy(team *t)
{
    for (int r = 0; r < t->n; r++)
        rp_comm_destroy(t->comms[r]);
    memset(t->comms, 0, sizeof t->comms);
}

static void expect_status(const team *t, int r, int k, rp_status want)
{
    const outcome *o = &t->m[r].out[k];
    if (o->status != want) {
        print_error("member %d call %d: status %d (%s), expected %d (%s); message: \"%s\"\n", r, k,
                    o->status, rp_status_name(o->status), want, rp_status_name(want), o->error);
        fail();
    }
}

static void expect_contains(const team *t, int r, int k, const char *needle)
{
    const char *msg = t->m[r].out[k].error;
    if (!strcasestr(msg, needle)) {
        print_error("member %d call %d: expected message containing \"%s\", got \"%s\"\n", r, k,
                    needle, msg);
        fail();
    }
}

static void expect_fast(const team *t, int r, int k, double limit_s)
{
    if (!(t->m[r].out[k].elapsed_s < limit_s)) {
        print_error("member %d call %d took %.3f s, expected < %.3f s\n", r, k,
                    t->m[r].out[k].elapsed_s, limit_s);
        fail();
    }
}

/* Byte i of the message from `src` numbered `k`: differs by sender, message and position. */
static uint8_t pattern(int src, int k, int64_t i)
{
    uint64_t h = (uint64_t)(src + 1) * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)(k + 1) * 0xc2b2ae3d27d4eb4full ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    return (uint8_t)(h >> 56 ^ h >> 29);
}

static void fill(uint8_t *buf, int src, int k, int64_t bytes)
{
    for (int64_t i = 0; i < bytes; i++)
        buf[i] = pattern(src, k, i);
}

/* First byte that differs from the pattern, or -1. */
static int64_t first_wrong(const uint8_t *buf, int src, int k, int64_t bytes)
{
    for (int64_t i = 0; i < bytes; i++)
        if (buf[i] != pattern(src, k, i)) return i;
    return -1;
}

/* ---- the ring: every size ------------------------------------------------------------------ */

typedef struct {
    int64_t sizes[128];
    int nsizes;
    bool nonblocking;
    uint8_t *send[MAX_MEMBERS], *recv[MAX_MEMBERS];
} ring_ctx;

/*
 * Each member sends to the next and receives from the previous, for every
 * size. Blocking: send first, then receive - every member sends at once,
 * so a send that waited for its receiver would never return.
 */
static void member_ring(member *m, void *arg)
{
    ring_ctx *c = arg;
    int n = m->team->n, r = m->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int s = 0; s < c->nsizes; s++) {
        int64_t bytes = c->sizes[s];
        /* Alternate the types: u8 for odd sizes, f32 (count bytes/4) where it divides. */
        rp_dtype dt = bytes % 4 == 0 && s % 2 == 0 ? RP_F32 : RP_U8;
        int64_t count = dt == RP_F32 ? bytes / 4 : bytes;
        fill(c->send[r], r, s, bytes);
        memset(c->recv[r], 0xA5, (size_t)bytes + 64);
        rp_status st;
        if (c->nonblocking) {
            rp_comm_request *req[2];
            st = rp_comm_irecv(m->comm, c->recv[r], count, dt, prev, s, &req[0]);
            if (st == RP_OK) st = rp_comm_isend(m->comm, c->send[r], count, dt, next, s, &req[1]);
            if (st == RP_OK) st = rp_comm_wait_all(2, req);
        } else {
            st = rp_comm_send(m->comm, c->send[r], count, dt, next, s);
            if (st == RP_OK) st = rp_comm_recv(m->comm, c->recv[r], count, dt, prev, s);
        }
        if (st != RP_OK) {
            member_fail(m, "size %lld: %s", (long long)bytes, rp_last_error());
            return;
        }
        int64_t at = first_wrong(c->recv[r], prev, s, bytes);
        if (at >= 0)
            member_fail(m, "size %lld from rank %d: byte %lld differs", (long long)bytes, prev,
                        (long long)at);
        for (int g = 0; g < 64; g++)
            if (c->recv[r][bytes + g] != 0xA5) {
                member_fail(m, "size %lld: written past the end (byte %lld)", (long long)bytes,
                            (long long)(bytes + g));
                break;
            }
    }
    if (rp_comm_sequence(m->comm) != 0) member_fail(m, "p2p advanced the collective sequence");
}

static void ring_sweep(int n, bool nonblocking)
{
    ring_ctx c = {.nonblocking = nonblocking};
    for (int k = 0; (1ll << k) <= BIG_BYTES; k++) {
        c.sizes[c.nsizes++] = 1ll << k;
        if (k >= 2 && k % 3 == 0)
            c.sizes[c.nsizes++] = (1ll << k) + 3; /* odd sizes across the eager limit */
    }
    c.sizes[c.nsizes++] = 0;
    c.sizes[c.nsizes++] = 65537;
    c.sizes[c.nsizes++] = BIG_BYTES - 1;
    for (int r = 0; r < n; r++) {
        c.send[r] = xmalloc((size_t)BIG_BYTES);
        c.recv[r] = xmalloc((size_t)BIG_BYTES + 64);
    }
    team t;
    team_create(&t, n, SWEEP_TIMEOUT_S);
    team_run(&t, member_ring, &c);
    team_destroy(&t);
    for (int r = 0; r < n; r++) {
        free(c.send[r]);
        free(c.recv[r]);
    }
}

static void test_ring_blocking_every_size_64mib(void **state)
{
    (void)state;
    ring_sweep(3, false);
}

static void test_ring_nonblocking_every_size_64mib(void **state)
{
    (void)state;
    ring_sweep(4, true);
}

/* Small sizes on 2 members (each other's next and previous) and on 1 (itself). */
static void test_ring_two_and_one(void **state)
{
    (void)state;
    for (int n = 1; n <= 2; n++) {
        ring_ctx c = {0};
        for (int64_t b = 0; b <= 300000; b = b * 3 + 1)
            c.sizes[c.nsizes++] = b;
        for (int r = 0; r < n; r++) {
            c.send[r] = xmalloc(300000);
            c.recv[r] = xmalloc(300000 + 64);
        }
        for (int nb = 0; nb < 2; nb++) {
            c.nonblocking = nb;
            team t;
            team_create(&t, n, SWEEP_TIMEOUT_S);
            team_run(&t, member_ring, &c);
            team_destroy(&t);
        }
        for (int r = 0; r < n; r++) {
            free(c.send[r]);
            free(c.recv[r]);
        }
    }
}

/* ---- mismatches ------------------------------------------------------------------------------ */

typedef struct {
    int64_t scount, rcount;
    rp_dtype sdt, rdt;
    int stag, rtag;
    bool first_ok; /* a matching message first, so the mismatch is #1 */
    /*
     * The send is posted (isend) before the receive, and waited for only
     * after the receive is posted: so a large send is still waiting with its
     * buffer when the receive meets it, however slow the machine. (A blocking
     * large send copies its message after a few ms without a receiver and
     * returns; on a loaded machine the receiver can be that late.)
     */
    bool send_first;
    _Atomic int step; /* send_first: 1 once the send is posted, 2 once the receive is */
} mismatch_ctx;

/* Waits (bounded) until *flag reaches `value`; false on the bound. */
static bool await_flag(_Atomic int *flag, int value)
{
    double t0 = rp_now_s();
    while (atomic_load(flag) < value) {
        if (rp_now_s() - t0 > JOIN_LIMIT_S / 2) return false;
        tu_sleep_s(0.0005);
    }
    return true;
}

/* The mismatched message of member_mismatch, posted in the order send_first asks for. */
static rp_status mismatch_call(member *m, mismatch_ctx *c, uint8_t *buf)
{
    if (!c->send_first)
        return m->rank == 0 ? rp_comm_send(m->comm, buf, c->scount, c->sdt, 1, c->stag)
                            : rp_comm_recv(m->comm, buf, c->rcount, c->rdt, 0, c->rtag);
    rp_comm_request *req = NULL;
    rp_status st;
    if (m->rank == 0) {
        st = rp_comm_isend(m->comm, buf, c->scount, c->sdt, 1, c->stag, &req);
        atomic_store(&c->step, 1);
        if (st == RP_OK && !await_flag(&c->step, 2)) member_fail(m, "the receive was never posted");
    } else {
        if (!await_flag(&c->step, 1)) member_fail(m, "the send was never posted");
        st = rp_comm_irecv(m->comm, buf, c->rcount, c->rdt, 0, c->rtag, &req);
        atomic_store(&c->step, 2);
    }
    return st == RP_OK ? rp_comm_wait(req) : st;
}

/* Member 0 sends to member 1, which receives; then each makes one more call (its "next call"). */
static void member_mismatch(member *m, void *arg)
{
    mismatch_ctx *c = arg;
    size_t bytes = (size_t)(c->scount > c->rcount ? c->scount : c->rcount) * 8;
    uint8_t *buf = xmalloc(bytes);
    memset(buf, 1, bytes);
    if (c->first_ok) {
        rp_status st = m->rank == 0 ? rp_comm_send(m->comm, buf, 3, RP_I32, 1, 5)
                                    : rp_comm_recv(m->comm, buf, 3, RP_I32, 0, 5);
        if (st != RP_OK) member_fail(m, "first message: %s", rp_last_error());
    }
    double t0 = rp_now_s();
    record(&m->out[0], mismatch_call(m, c, buf), t0);
    t0 = rp_now_s();
    int32_t v = 0;
    /* Member 0 expects an answer that will not come: the mismatch must end the wait at once. */
    if (m->rank == 0)
        record(&m->out[1], rp_comm_recv(m->comm, &v, 1, RP_I32, 1, 1), t0);
    else
        record(&m->out[1], rp_comm_send(m->comm, &v, 1, RP_I32, 0, 1), t0);
    t0 = rp_now_s();
    record(&m->out[2], rp_comm_barrier(m->comm), t0);
    free(buf);
}

/*
 * The receiver gets RP_ERR_MISMATCH from its receive; the sender from its
 * send (a large one, still waiting) or from its next call (a small one,
 * already buffered); both messages name both calls and both replicas; any
 * later call fails at once with RP_ERR_COMM.
 */
static void expect_p2p_mismatch(mismatch_ctx *c, const char *sent, const char *expected)
{
    team t;
    team_create(&t, 2, 10.0);
    team_run(&t, member_mismatch, c);
    bool small = (size_t)c->scount * rp_dtype_size(c->sdt) <= 65536;
    expect_status(&t, 1, 0, RP_ERR_MISMATCH);
    /*
     * The sender's call that reports it: a small send buffered before the
     * receive was posted has returned, and its next call says it; a large
     * one (or one that met the posted receive) says it itself.
     */
    int k0 = small && t.m[0].out[0].status == RP_OK ? 1 : 0;
    expect_status(&t, 0, k0, RP_ERR_MISMATCH);
    int where[2][2] = {{0, k0}, {1, 0}};
    for (int i = 0; i < 2; i++) {
        int r = where[i][0], k = where[i][1];
        expect_contains(&t, r, k, sent);
        expect_contains(&t, r, k, expected);
        expect_contains(&t, r, k, "replica 9000 sent");
        expect_contains(&t, r, k, "to replica 9037");
        expect_fast(&t, r, k, 5.0);
    }
    /* Later calls: at once, RP_ERR_COMM, with the reason. */
    for (int r = 0; r < 2; r++) {
        for (int k = (r == 0 ? k0 + 1 : 1); k < 3; k++) {
            expect_status(&t, r, k, RP_ERR_COMM);
            expect_contains(&t, r, k, sent);
            expect_fast(&t, r, k, 1.0);
        }
        assert_true(rp_comm_broken(t.comms[r]));
    }
    team_destroy(&t);
}

static void test_mismatch_tag(void **state)
{
    (void)state;
    mismatch_ctx c = {
        .scount = 10, .rcount = 10, .sdt = RP_F32, .rdt = RP_F32, .stag = 7, .rtag = 8};
    expect_p2p_mismatch(&c, "'send #0 (tag 7, count 10, f32)'", "'recv #0 (tag 8, count 10, f32)'");
}

static void test_mismatch_count_numbered_along_channel(void **state)
{
    (void)state;
    mismatch_ctx c = {.scount = 10,
                      .rcount = 11,
                      .sdt = RP_F32,
                      .rdt = RP_F32,
                      .stag = 7,
                      .rtag = 7,
                      .first_ok = true};
    expect_p2p_mismatch(&c, "'send #1 (tag 7, count 10, f32)'", "'recv #1 (tag 7, count 11, f32)'");
}

static void test_mismatch_dtype(void **state)
{
    (void)state;
    mismatch_ctx c = {
        .scount = 10, .rcount = 10, .sdt = RP_F32, .rdt = RP_I32, .stag = 7, .rtag = RP_ANY_TAG};
    expect_p2p_mismatch(&c, "'send #0 (tag 7, count 10, f32)'",
                        "'recv #0 (any tag, count 10, i32)'");
}

/*
 * A large send (past the eager size) waits with its buffer: its own send
 * reports the mismatch. Posted before the receive, so that it is the queued
 * message (not a posted receive) that the mismatch is found on.
 */
static void test_mismatch_large_count(void **state)
{
    (void)state;
    mismatch_ctx c = {.scount = 1 << 20,
                      .rcount = (1 << 20) - 1,
                      .sdt = RP_F64,
                      .rdt = RP_F64,
                      .stag = 3,
                      .rtag = 3,
                      .send_first = true};
    expect_p2p_mismatch(&c, "'send #0 (tag 3, count 1048576, f64)'",
                        "'recv #0 (tag 3, count 1048575, f64)'");
}

/* ---- a missing sender ----------------------------------------------------------------------- */

typedef struct {
    pthread_barrier_t start; /* every member running before the short-timeout barrier */
    _Atomic int timed_out;   /* member 0's receive has returned */
} missing_ctx;

static void member_missing_sender(member *m, void *arg)
{
    missing_ctx *c = arg;
    pthread_barrier_wait(&c->start);
    double t0 = rp_now_s();
    record(&m->out[0], rp_comm_barrier(m->comm), t0);
    int32_t v[4] = {0};
    if (m->rank == 0) {
        t0 = rp_now_s();
        record(&m->out[1], rp_comm_recv(m->comm, v, 4, RP_I32, 2, 0), t0);
        atomic_store(&c->timed_out, 1);
        t0 = rp_now_s();
        record(&m->out[2], rp_comm_recv(m->comm, v, 4, RP_I32, 1, 0), t0);
    } else if (m->rank == 1) {
        /* Waits for nothing: one timeout, member 0's, breaks the communicator. */
    } else {
        /* Member 2 sends only after member 0's receive has given up (not after a guessed delay). */
        if (!await_flag(&c->timed_out, 1)) member_fail(m, "member 0's receive never returned");
        t0 = rp_now_s();
        record(&m->out[1], rp_comm_send(m->comm, v, 4, RP_I32, 0, 0), t0);
    }
}

/*
 * Timeout 0.3 s: member 0's receive from member 2 times out after about
 * that, naming replica 9074 and its last completed call (the barrier);
 * every later call fails at once.
 */
static void test_missing_sender_times_out_naming_it(void **state)
{
    (void)state;
    team t;
    team_create(&t, 3, 0.3);
    missing_ctx c = {0};
    assert_int_equal(pthread_barrier_init(&c.start, NULL, 3), 0);
    team_run(&t, member_missing_sender, &c);
    pthread_barrier_destroy(&c.start);
    for (int r = 0; r < 3; r++)
        expect_status(&t, r, 0, RP_OK);
    expect_status(&t, 0, 1, RP_ERR_TIMEOUT);
    if (!(t.m[0].out[1].elapsed_s >= 0.25 && t.m[0].out[1].elapsed_s <= 3.0)) {
        print_error("the receive timed out after %.3f s with a 0.3 s timeout\n",
                    t.m[0].out[1].elapsed_s);
        fail();
    }
    expect_contains(&t, 0, 1, "replica 9074 did not send");
    expect_contains(&t, 0, 1, "recv (tag 0, count 4, i32) from replica 9074");
    expect_contains(&t, 0, 1, "its last completed call was barrier #0");
    expect_status(&t, 0, 2, RP_ERR_COMM);
    expect_fast(&t, 0, 2, 1.0);
    expect_contains(&t, 0, 2, "9074");
    expect_status(&t, 2, 1, RP_ERR_COMM);
    expect_fast(&t, 2, 1, 1.0);
    team_destroy(&t);
}

/* ---- non-blocking: any wait order -------------------------------------------------------------
 */

#define NB_MSGS 6

static int64_t nb_bytes(int k)
{
    return k == 2 ? 0 : (int64_t)(37 << (3 * k));
} /* 37 B .. 1.2 MiB, and 0 */

/*
 * Member 0 sends NB_MSGS messages of growing size to each other member and
 * receives as many from each; everyone posts all its calls first, then
 * completes them in a scrambled order, some by polling rp_comm_test.
 */
static void member_any_order(member *m, void *arg)
{
    (void)arg;
    int n = m->team->n;
    int peers = m->rank == 0 ? n - 1 : 1;
    int total = 2 * NB_MSGS * peers;
    rp_comm_request **req = xmalloc((size_t)total * sizeof *req);
    uint8_t **bufs = xmalloc((size_t)total * sizeof *bufs);
    int k = 0;
    for (int p = 0; p < peers; p++) {
        int peer = m->rank == 0 ? p + 1 : 0;
        for (int i = 0; i < NB_MSGS; i++) {
            int64_t bytes = nb_bytes(i);
            bufs[k] = xmalloc((size_t)bytes);
            if (rp_comm_irecv(m->comm, bufs[k], bytes, RP_U8, peer, 100 + i, &req[k]) != RP_OK)
                member_fail(m, "irecv: %s", rp_last_error());
            k++;
            bufs[k] = xmalloc((size_t)bytes);
            fill(bufs[k], m->rank, i, bytes);
            if (rp_comm_isend(m->comm, bufs[k], bytes, RP_U8, peer, 100 + i, &req[k]) != RP_OK)
                member_fail(m, "isend: %s", rp_last_error());
            k++;
        }
    }
    /* A scrambled order: a stride coprime with total, starting off the end; every third polled. */
    int stride = 7;
    while (total % stride == 0 || stride % 2 == 0)
        stride += 2;
    for (int j = 0; j < total; j++) {
        int i = (total - 1 + j * stride) % total;
        rp_status st;
        if (j % 3 == 0) {
            bool done = false;
            double end = rp_now_s() + 30;
            do
                st = rp_comm_test(req[i], &done);
            while (st == RP_OK && !done && rp_now_s() < end);
            if (!done && st == RP_OK) member_fail(m, "request %d never completed by test", i);
        } else {
            st = rp_comm_wait(req[i]);
        }
        req[i] = NULL;
        if (st != RP_OK) member_fail(m, "request %d: %s", i, rp_last_error());
    }
    k = 0;
    for (int p = 0; p < peers; p++) {
        int peer = m->rank == 0 ? p + 1 : 0;
        for (int i = 0; i < NB_MSGS; i++, k += 2) {
            int64_t at = first_wrong(bufs[k], peer, i, nb_bytes(i));
            if (at >= 0)
                member_fail(m, "message %d from %d: byte %lld differs", i, peer, (long long)at);
        }
    }
    for (int i = 0; i < total; i++)
        free(bufs[i]);
    free(bufs);
    free(req);
}

static void test_nonblocking_any_wait_order(void **state)
{
    (void)state;
    for (int n = 2; n <= 4; n++) {
        team t;
        team_create(&t, n, SWEEP_TIMEOUT_S);
        team_run(&t, member_any_order, NULL);
        team_destroy(&t);
    }
}

/* ---- two members sending to each other at once ----------------------------------------------- */

static void member_exchange(member *m, void *arg)
{
    int64_t bytes = *(int64_t *)arg;
    int peer = 1 - m->rank;
    uint8_t *out = xmalloc((size_t)bytes), *in = xmalloc((size_t)bytes);
    for (int round = 0; round < 3; round++) {
        fill(out, m->rank, round, bytes);
        double t0 = rp_now_s();
        rp_status st = rp_comm_send(m->comm, out, bytes, RP_U8, peer, round);
        if (st == RP_OK) st = rp_comm_recv(m->comm, in, bytes, RP_U8, peer, round);
        record(&m->out[round], st, t0);
        if (st == RP_OK && first_wrong(in, peer, round, bytes) >= 0)
            member_fail(m, "round %d: wrong data", round);
    }
    free(out);
    free(in);
}

/*
 * Both members send first, then receive: 8 B, at the eager limit, past it,
 * and 16 MiB. With a timeout of 5 s, a send that waited for its receiver
 * would time out; each round must complete well within it.
 */
static void test_two_peers_send_to_each_other(void **state)
{
    (void)state;
    int64_t sizes[] = {8, 65536, 65537, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        team t;
        team_create(&t, 2, 5.0);
        team_run(&t, member_exchange, &sizes[i]);
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < 3; k++) {
                expect_status(&t, r, k, RP_OK);
                expect_fast(&t, r, k, 2.5);
            }
        team_destroy(&t);
    }
}

/* ---- any source, any tag, probe ------------------------------------------------------------- */

/*
 * Members 1..n-1 each send member 0 one message (tag 10 + rank, rank + 1
 * elements of i32) after a barrier, member 3 a second one (tag 50). Member
 * 0 first probes for tag 50 from member 3 until ready, then probes any
 * source, and receives what each probe announced with RP_ANY_SOURCE and
 * RP_ANY_TAG; every message must come once, with the probed fields.
 */
static void member_any_source(member *m, void *arg)
{
    (void)arg;
    int n = m->team->n;
    if (m->rank != 0) {
        int32_t v[8];
        for (int i = 0; i <= m->rank; i++)
            v[i] = m->rank * 100 + i;
        if (rp_comm_send(m->comm, v, m->rank + 1, RP_I32, 0, 10 + m->rank) != RP_OK)
            member_fail(m, "send: %s", rp_last_error());
        if (m->rank == 3 && rp_comm_send(m->comm, v, 2, RP_I32, 0, 50) != RP_OK)
            member_fail(m, "second send: %s", rp_last_error());
        return;
    }
    bool ready = true;
    int source = -5, tag = -5;
    int64_t count = -5;
    rp_dtype dt = RP_F64;
    /* Nothing from member 3 with tag 50 can be next on its channel: tag 13 comes first. */
    double end = rp_now_s() + 30;
    do {
        if (rp_comm_probe(m->comm, 3, 13, &ready, &source, &tag, &count, &dt) != RP_OK)
            member_fail(m, "probe: %s", rp_last_error());
    } while (!ready && rp_now_s() < end);
    if (!ready || source != 3 || tag != 13 || count != 4 || dt != RP_I32)
        member_fail(m, "probe(3, 13): ready %d source %d tag %d count %lld", ready, source, tag,
                    (long long)count);
    if (rp_comm_probe(m->comm, 3, 50, &ready, NULL, NULL, NULL, NULL) != RP_OK || ready)
        member_fail(m, "probe(3, 50) is ready before the message before it was received");
    int seen[MAX_MEMBERS] = {0};
    for (int got = 0; got < n; got++) {
        end = rp_now_s() + 30;
        do {
            if (rp_comm_probe(m->comm, RP_ANY_SOURCE, RP_ANY_TAG, &ready, &source, &tag, &count,
                              &dt) != RP_OK)
                member_fail(m, "probe: %s", rp_last_error());
        } while (!ready && rp_now_s() < end);
        if (!ready) {
            member_fail(m, "message %d never came", got);
            return;
        }
        int32_t v[8] = {0};
        if (source < 1 || source >= n || count < 1 || count > 8) {
            member_fail(m, "probe: source %d count %lld", source, (long long)count);
            return;
        }
        if (rp_comm_recv(m->comm, v, count, dt, RP_ANY_SOURCE, RP_ANY_TAG) != RP_OK)
            member_fail(m, "recv: %s", rp_last_error());
        bool second = tag == 50;
        if (second ? source != 3 || count != 2 : tag != 10 + source || count != source + 1)
            member_fail(m, "message from %d: tag %d count %lld", source, tag, (long long)count);
        for (int i = 0; i < count; i++)
            if (v[i] != source * 100 + i)
                member_fail(m, "message from %d: element %d is %d", source, i, v[i]);
        seen[source] += second ? 10 : 1;
    }
    for (int q = 1; q < n; q++)
        if (seen[q] != (q == 3 ? 11 : 1))
            member_fail(m, "member %d's messages seen %d times", q, seen[q]);
    if (rp_comm_probe(m->comm, RP_ANY_SOURCE, RP_ANY_TAG, &ready, NULL, NULL, NULL, NULL) !=
            RP_OK ||
        ready)
        member_fail(m, "a message left after all were received");
}

static void test_any_source_any_tag_and_probe(void **state)
{
    (void)state;
    team t;
    team_create(&t, 5, SWEEP_TIMEOUT_S);
    team_run(&t, member_any_source, NULL);
    team_destroy(&t);
}

/* An ANY_SOURCE receive posted before the sends, and a specific one after it. */
static void member_posted_any(member *m, void *arg)
{
    (void)arg;
    int32_t a = -1, b = -1, v;
    if (m->rank == 0) {
        rp_comm_request *r[2];
        if (rp_comm_irecv(m->comm, &a, 1, RP_I32, RP_ANY_SOURCE, RP_ANY_TAG, &r[0]) != RP_OK ||
            rp_comm_irecv(m->comm, &b, 1, RP_I32, 2, 22, &r[1]) != RP_OK)
            member_fail(m, "irecv: %s", rp_last_error());
        if (rp_comm_barrier(m->comm) != RP_OK) member_fail(m, "barrier: %s", rp_last_error());
        if (rp_comm_wait_all(2, r) != RP_OK) member_fail(m, "wait_all: %s", rp_last_error());
        if (a != 11 || b != 22) member_fail(m, "received %d and %d, expected 11 and 22", a, b);
    } else {
        if (rp_comm_barrier(m->comm) != RP_OK) member_fail(m, "barrier: %s", rp_last_error());
        /* Member 1 sends first; member 2 waits for member 1's go-ahead through member 0's receive.
         */
        if (m->rank == 1) {
            v = 11;
            if (rp_comm_send(m->comm, &v, 1, RP_I32, 0, 11) != RP_OK)
                member_fail(m, "send: %s", rp_last_error());
            if (rp_comm_send(m->comm, &v, 1, RP_I32, 2, 0) != RP_OK)
                member_fail(m, "send: %s", rp_last_error());
        } else {
            if (rp_comm_recv(m->comm, &v, 1, RP_I32, 1, 0) != RP_OK)
                member_fail(m, "recv: %s", rp_last_error());
            v = 22;
            if (rp_comm_send(m->comm, &v, 1, RP_I32, 0, 22) != RP_OK)
                member_fail(m, "send: %s", rp_last_error());
        }
    }
}

static void test_posted_any_source_takes_first_arrival(void **state)
{
    (void)state;
    team t;
    team_create(&t, 3, SWEEP_TIMEOUT_S);
    team_run(&t, member_posted_any, NULL);
    team_destroy(&t);
}

/* ---- broken communicators, leaving, invalid calls -----------------------------------------------
 */

static void member_after_broken(member *m, void *arg)
{
    (void)arg;
    float x[16] = {0};
    double t0 = rp_now_s();
    /* A count mismatch breaks the communicator. */
    record(&m->out[0], rp_comm_all_reduce(m->comm, x, x, m->rank == 1 ? 15 : 16, RP_F32, RP_SUM),
           t0);
    rp_comm_request *req = (rp_comm_request *)1;
    int peer = 1 - m->rank;
    t0 = rp_now_s();
    record(&m->out[1], rp_comm_send(m->comm, x, 4, RP_F32, peer, 0), t0);
    t0 = rp_now_s();
    record(&m->out[2], rp_comm_recv(m->comm, x, 4, RP_F32, peer, 0), t0);
    t0 = rp_now_s();
    record(&m->out[3], rp_comm_irecv(m->comm, x, 4, RP_F32, RP_ANY_SOURCE, 0, &req), t0);
    if (req != NULL) member_fail(m, "irecv on a broken communicator left a request");
    bool ready = true;
    t0 = rp_now_s();
    record(&m->out[4],
           rp_comm_probe(m->comm, RP_ANY_SOURCE, RP_ANY_TAG, &ready, NULL, NULL, NULL, NULL), t0);
}

static void test_p2p_after_broken_comm_fails_at_once(void **state)
{
    (void)state;
    team t;
    team_create(&t, 2, 10.0);
    team_run(&t, member_after_broken, NULL);
    for (int r = 0; r < 2; r++) {
        expect_status(&t, r, 0, RP_ERR_MISMATCH);
        for (int k = 1; k <= 4; k++) {
            expect_status(&t, r, k, RP_ERR_COMM);
            expect_fast(&t, r, k, 0.5);
            expect_contains(&t, r, k, "count 15");
        }
    }
    team_destroy(&t);
}

/* Member 1 leaves (its step failed) while member 0 waits in a receive from it; member 0 fails at
 * once. */
static void member_leave(member *m, void *arg)
{
    (void)arg;
    double t0 = rp_now_s();
    record(&m->out[0], rp_comm_barrier(m->comm), t0);
    if (m->rank == 0) {
        int32_t v;
        t0 = rp_now_s();
        record(&m->out[1], rp_comm_recv(m->comm, &v, 1, RP_I32, 1, 4), t0);
    } else {
        tu_sleep_s(0.2);
        rp_comm_leave(m->comm, RP_ERR_INVALID, "the loss of replica 9037 is NaN");
    }
}

static void test_leave_fails_receiver_at_once(void **state)
{
    (void)state;
    team t;
    team_create(&t, 2, 20.0);
    team_run(&t, member_leave, NULL);
    expect_status(&t, 0, 1, RP_ERR_COMM);
    expect_fast(&t, 0, 1, 5.0);
    expect_contains(&t, 0, 1, "replica 9037 ended its step");
    expect_contains(&t, 0, 1, "the loss of replica 9037 is NaN");
    expect_contains(&t, 0, 1, "recv (tag 4, count 1, i32)");
    team_destroy(&t);
}

static void member_invalid(member *m, void *arg)
{
    (void)arg;
    int32_t v = 0;
    rp_comm_request *req;
    double t0 = rp_now_s();
    if (m->rank == 0) {
        record(&m->out[0], rp_comm_send(m->comm, &v, -1, RP_I32, 1, 0), t0);
    } else {
        record(&m->out[0], rp_comm_recv(m->comm, &v, 1, RP_I32, 0, 0), t0);
    }
    /* Every further invalid form on its own (the communicator is broken now, but the checks come
     * first). */
    record(&m->out[1], rp_comm_send(m->comm, NULL, 3, RP_I32, 1 - m->rank, 0), t0);
    record(&m->out[2], rp_comm_send(m->comm, &v, 1, RP_I32, 2, 0), t0);
    record(&m->out[3], rp_comm_send(m->comm, &v, 1, RP_I32, 1 - m->rank, -1), t0);
    record(&m->out[4], rp_comm_irecv(m->comm, &v, 1, (rp_dtype)9, 0, 0, &req), t0);
    record(&m->out[5], rp_comm_recv(m->comm, &v, 1, RP_I32, -2, 0), t0);
    record(&m->out[6], rp_comm_isend(m->comm, &v, 1, RP_I32, 0, 0, NULL), t0);
}

static void test_invalid_calls(void **state)
{
    (void)state;
    team t;
    team_create(&t, 2, 20.0);
    team_run(&t, member_invalid, NULL);
    expect_status(&t, 0, 0, RP_ERR_INVALID);
    expect_contains(&t, 0, 0, "count -1");
    /* The receiver of the invalid send is told at once. */
    expect_status(&t, 1, 0, RP_ERR_COMM);
    expect_fast(&t, 1, 0, 5.0);
    expect_contains(&t, 1, 0, "count -1");
    for (int r = 0; r < 2; r++) {
        for (int k = 1; k <= 6; k++)
            expect_status(&t, r, k, RP_ERR_INVALID);
        expect_contains(&t, r, 1, "NULL");
        expect_contains(&t, r, 2, "peer 2");
        expect_contains(&t, r, 3, "tag -1");
        expect_contains(&t, r, 4, "dtype 9");
        expect_contains(&t, r, 5, "peer -2");
    }
    team_destroy(&t);
}

static void test_u8_names_and_reductions_refused(void **state)
{
    (void)state;
    assert_int_equal(rp_dtype_size(RP_U8), 1);
    assert_string_equal(rp_dtype_name(RP_U8), "u8");
    rp_comm *c;
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, 1.0), RP_OK);
    uint8_t b[4] = {1, 2, 3, 4}, out[4] = {0};
    assert_int_equal(rp_comm_all_reduce(c, b, b, 4, RP_U8, RP_SUM), RP_ERR_INVALID);
    tu_assert_error_contains("u8");
    rp_comm_destroy(c);
    /* Gathers and broadcasts of bytes work. */
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, 1.0), RP_OK);
    assert_int_equal(rp_comm_all_gather(c, b, out, 4, RP_U8), RP_OK);
    assert_memory_equal(b, out, 4);
    assert_int_equal(rp_comm_broadcast(c, out, 4, RP_U8, 0), RP_OK);
    rp_comm_destroy(c);
}

/* ---- the runtime's own calls ----------------------------------------------------------------- */

#define REPORT "the runtime's report all-gather"

/*
 * A first step (rp_comm_rejoin, as the runtime starts each) of two user
 * all-reduces and the report; then, in the second step, every member
 * all-reduces twice (the step's user calls #0 and #1), except member 3,
 * which skips the second and goes on to the runtime's report all-gather.
 */
static void member_skip_to_internal(member *m, void *arg)
{
    (void)arg;
    float x[8] = {1};
    int64_t report[2] = {m->rank, 0}, all[16];
    rp_comm_rejoin(m->comm);
    for (int k = 0; k < 2; k++)
        if (rp_comm_all_reduce(m->comm, x, x, 8, RP_F32, RP_SUM) != RP_OK)
            member_fail(m, "step 1: %s", rp_last_error());
    rp_comm_begin_internal(m->comm, REPORT);
    if (rp_comm_all_gather(m->comm, report, all, 2, RP_I64) != RP_OK)
        member_fail(m, "step 1's report: %s", rp_last_error());
    rp_comm_end_internal(m->comm);
    rp_comm_rejoin(m->comm);
    if (rp_comm_step_user_sequence(m->comm) != 0 || rp_comm_user_sequence(m->comm) != 2)
        member_fail(m,
                    "after rejoin: step user sequence %llu, user sequence %llu; expected 0 and 2",
                    (unsigned long long)rp_comm_step_user_sequence(m->comm),
                    (unsigned long long)rp_comm_user_sequence(m->comm));
    /* An internal call first: it must not count in the user's numbers. */
    rp_comm_begin_internal(m->comm, "the runtime's start barrier");
    double t0 = rp_now_s();
    record(&m->out[0], rp_comm_barrier(m->comm), t0);
    rp_comm_end_internal(m->comm);
    t0 = rp_now_s();
    record(&m->out[1], rp_comm_all_reduce(m->comm, x, x, 8, RP_F32, RP_SUM), t0);
    if (rp_comm_step_user_sequence(m->comm) != 1 || rp_comm_user_sequence(m->comm) != 3 ||
        rp_comm_sequence(m->comm) != 5)
        member_fail(
            m, "step user sequence %llu, user sequence %llu, sequence %llu; expected 1, 3 and 5",
            (unsigned long long)rp_comm_step_user_sequence(m->comm),
            (unsigned long long)rp_comm_user_sequence(m->comm),
            (unsigned long long)rp_comm_sequence(m->comm));
    t0 = rp_now_s();
    if (m->rank != 3) record(&m->out[2], rp_comm_all_reduce(m->comm, x, x, 8, RP_F32, RP_SUM), t0);
    t0 = rp_now_s();
    rp_comm_begin_internal(m->comm, REPORT);
    rp_comm_begin_internal(m->comm, "an inner name that is not shown");
    record(&m->out[3], rp_comm_all_gather(m->comm, report, all, 2, RP_I64), t0);
    rp_comm_end_internal(m->comm);
    rp_comm_end_internal(m->comm);
}

static void test_skipped_user_call_named_against_internal_call(void **state)
{
    (void)state;
    team t;
    team_create(&t, 4, 10.0);
    team_run(&t, member_skip_to_internal, NULL);
    for (int r = 0; r < 4; r++) {
        expect_status(&t, r, 0, RP_OK);
        expect_status(&t, r, 1, RP_OK);
        int k = r == 3 ? 3 : 2;
        expect_status(&t, r, k, RP_ERR_MISMATCH);
        expect_contains(
            &t, r, k,
            "replica 9111 ended its step without calling all_reduce #1 (count 8, f32, sum)");
        expect_contains(&t, r, k, "(it went on to " REPORT);
        if (strstr(t.m[r].out[k].error, "all_gather #")) {
            print_error("member %d: the internal call is numbered: %s\n", r, t.m[r].out[k].error);
            fail();
        }
        if (strstr(t.m[r].out[k].error, "all_reduce #3")) {
            print_error("member %d: numbered from creation, not from the step: %s\n", r,
                        t.m[r].out[k].error);
            fail();
        }
        if (strstr(t.m[r].out[k].error, "inner name")) {
            print_error("member %d: the nested name is shown: %s\n", r, t.m[r].out[k].error);
            fail();
        }
    }
    team_destroy(&t);
}

/*
 * A count mismatch after internal calls is numbered among the user's calls
 * only: without rp_comm_rejoin from the creation (step 0 below); after it,
 * from the step's start (step 1: the mismatch is the step's user call #1,
 * the communicator's #3).
 */
static void member_user_numbering(member *m, void *arg)
{
    int step = *(const int *)arg;
    float x[8] = {0};
    if (step == 1) {
        /* Step 0 already made its 3 internal and 2 user calls on these members. */
        rp_comm_rejoin(m->comm);
    }
    for (int i = 0; i < 3; i++) {
        rp_comm_begin_internal(m->comm, "the runtime's check");
        if (rp_comm_barrier(m->comm) != RP_OK) member_fail(m, "barrier: %s", rp_last_error());
        rp_comm_end_internal(m->comm);
    }
    if (rp_comm_all_reduce(m->comm, x, x, 8, RP_F32, RP_SUM) != RP_OK)
        member_fail(m, "%s", rp_last_error());
    double t0 = rp_now_s();
    bool bad = step == 1 && m->rank == 1;
    record(&m->out[0], rp_comm_all_reduce(m->comm, x, x, bad ? 7 : 8, RP_F32, RP_SUM), t0);
}

static void test_user_calls_numbered_without_internal_ones(void **state)
{
    (void)state;
    team t;
    team_create(&t, 3, 10.0);
    /* Step 0, no rejoin yet: numbered from the creation; the step's calls agree. */
    int step = 0;
    team_run(&t, member_user_numbering, &step);
    for (int r = 0; r < 3; r++) {
        expect_status(&t, r, 0, RP_OK);
        assert_int_equal(rp_comm_user_sequence(t.comms[r]), 2);
        assert_int_equal(rp_comm_step_user_sequence(t.comms[r]), 2);
    }
    step = 1;
    team_run(&t, member_user_numbering, &step);
    for (int r = 0; r < 3; r++) {
        expect_status(&t, r, 0, RP_ERR_MISMATCH);
        expect_contains(&t, r, 0, "all_reduce #1 (count 8");
        expect_contains(&t, r, 0, "all_reduce #1 (count 7");
        expect_contains(&t, r, 0, "numbered from #0 in each step");
        if (strstr(t.m[r].out[0].error, "#3")) {
            print_error("member %d: numbered from creation, not from the step: %s\n", r,
                        t.m[r].out[0].error);
            fail();
        }
        assert_int_equal(rp_comm_user_sequence(t.comms[r]), 3);
        assert_int_equal(rp_comm_step_user_sequence(t.comms[r]), 1);
        assert_int_equal(rp_comm_sequence(t.comms[r]), 9);
    }
    team_destroy(&t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u8_names_and_reductions_refused),
        cmocka_unit_test(test_ring_two_and_one),
        cmocka_unit_test(test_ring_blocking_every_size_64mib),
        cmocka_unit_test(test_ring_nonblocking_every_size_64mib),
        cmocka_unit_test(test_mismatch_tag),
        cmocka_unit_test(test_mismatch_count_numbered_along_channel),
        cmocka_unit_test(test_mismatch_dtype),
        cmocka_unit_test(test_mismatch_large_count),
        cmocka_unit_test(test_missing_sender_times_out_naming_it),
        cmocka_unit_test(test_nonblocking_any_wait_order),
        cmocka_unit_test(test_two_peers_send_to_each_other),
        cmocka_unit_test(test_any_source_any_tag_and_probe),
        cmocka_unit_test(test_posted_any_source_takes_first_arrival),
        cmocka_unit_test(test_p2p_after_broken_comm_fails_at_once),
        cmocka_unit_test(test_leave_fails_receiver_at_once),
        cmocka_unit_test(test_invalid_calls),
        cmocka_unit_test(test_skipped_user_call_named_against_internal_call),
        cmocka_unit_test(test_user_calls_numbered_without_internal_ones),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
