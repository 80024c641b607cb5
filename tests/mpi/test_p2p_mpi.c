/*
 * test_p2p_mpi.c - point-to-point messages and the runtime's own calls on
 * the MPI backend, run by CTest under mpirun with 2 and 4 ranks, and on the
 * hierarchical backend: `test_p2p_mpi T` runs T member threads in each rank
 * (CTest: 2 ranks x 2 threads; peers in one process then meet through the
 * threads backend, the others through MPI). Each member checks its own
 * results and prints what failed; the exit status is non-zero if anything
 * failed anywhere. The properties are those of tests/test_comm_p2p.c:
 *
 *  1. a ring exchange for every size from 0 to 64 MiB, blocking (every
 *     member sends first) and non-blocking;
 *  2. tag, count and dtype mismatches: RP_ERR_MISMATCH on both sides, both
 *     calls named;
 *  3. a missing sender: RP_ERR_TIMEOUT naming it by replica, rank and host;
 *  4. non-blocking calls completed in a scrambled order;
 *  5. two members sending 16 MiB to each other at once;
 *  6. RP_ANY_SOURCE, RP_ANY_TAG and probe;
 *  7. point-to-point on a broken communicator fails at once;
 *  8. a peer whose step failed: its reason reaches the receiver waiting for
 *     it, and (MPI) the peers in a collective;
 *  9. a replica that skips a user all-reduce for the runtime's report
 *     all-gather is reported as such, on every member; so is one that skips
 *     a send a member in another process waits for, at once, on every
 *     member, naming the one that skipped it;
 * 10. the call check (hashed on the data messages, full exchange on
 *     demand): a long mixed sequence of calls with ranks running ahead and
 *     behind gives no false mismatch and the right values; a call with
 *     data against one without (all-reduce against barrier), and against
 *     another hashed call (all-gather counts), are mismatches on every rank.
 *
 * `test_p2p_mpi stop` (2 ranks, MPI backend) stops rank 1 (SIGSTOP, from a
 * child process, for 4 s, with a 2 s timeout): once while it waits in an
 * all-reduce, and once just before it calls one its peer then gives up on.
 * On waking it must say that it was not running, or that its peer had
 * already given up on it - not blame the peer.
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/replicator.h"

static atomic_int failures;
static _Thread_local int rank_; /* this member's rank */
static int size_, per_ = 1;     /* members in all; members in each process */

#include "mpi_check.h"

#define BIG_BYTES ((int64_t)64 << 20)

static uint8_t pattern(int src, int k, int64_t i)
{
    uint64_t h = (uint64_t)(src + 1) * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)(k + 1) * 0xc2b2ae3d27d4eb4full ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    return (uint8_t)(h >> 56 ^ h >> 29);
}

static void fill(uint8_t *b, int src, int k, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        b[i] = pattern(src, k, i);
}

static int64_t first_wrong(const uint8_t *b, int src, int k, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (b[i] != pattern(src, k, i)) return i;
    return -1;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- 1. the ring ----------------------------------------------------------------------------- */

static void test_ring(rp_comm *c)
{
    int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    uint8_t *out = xmalloc((size_t)BIG_BYTES), *in = xmalloc((size_t)BIG_BYTES + 64);
    int k = 0;
    for (int nb = 0; nb < 2; nb++) {
        for (int e = -1; e <= 26; e++) {
            int64_t sizes[2] = {e < 0 ? 0 : (int64_t)1 << e,
                                e >= 2 && e % 4 == 0 ? ((int64_t)1 << e) + 5 : -1};
            if (e == 26) sizes[1] = BIG_BYTES - 3;
            for (int j = 0; j < 2; j++, k++) {
                int64_t bytes = sizes[j];
                if (bytes < 0) continue;
                rp_dtype dt = bytes % 8 == 0 && k % 2 ? RP_F64 : RP_U8;
                int64_t count = dt == RP_F64 ? bytes / 8 : bytes;
                fill(out, rank_, k, bytes);
                memset(in, 0xA5, (size_t)bytes + 64);
                rp_status st;
                if (nb) {
                    rp_comm_request *r[2];
                    st = rp_comm_irecv(c, in, count, dt, prev, k, &r[0]);
                    if (st == RP_OK) st = rp_comm_isend(c, out, count, dt, next, k, &r[1]);
                    if (st == RP_OK) st = rp_comm_wait_all(2, r);
                } else {
                    st = rp_comm_send(c, out, count, dt, next, k);
                    if (st == RP_OK) st = rp_comm_recv(c, in, count, dt, prev, k);
                }
                CHECK(st == RP_OK, "ring %s, %lld bytes: %s", nb ? "non-blocking" : "blocking",
                      (long long)bytes, rp_last_error());
                if (st != RP_OK) goto done;
                int64_t at = first_wrong(in, prev, k, bytes);
                CHECK(at < 0, "ring, %lld bytes from %d: byte %lld differs", (long long)bytes, prev,
                      (long long)at);
                for (int g = 0; g < 64; g++)
                    if (in[bytes + g] != 0xA5) {
                        CHECK(false, "ring, %lld bytes: written past the end", (long long)bytes);
                        break;
                    }
            }
        }
    }
    CHECK(rp_comm_sequence(c) == 0, "p2p advanced the collective sequence to %llu",
          (unsigned long long)rp_comm_sequence(c));
done:
    free(out);
    free(in);
}

/* ---- 2. mismatches ------------------------------------------------------------------------------
 */

typedef struct {
    int64_t scount, rcount;
    rp_dtype sdt, rdt;
    int stag, rtag;
    bool first_ok;
    const char *sent, *expected;
} mismatch_case;

static const mismatch_case cases[] = {
    {10, 10, RP_F32, RP_F32, 7, 8, false, "'send #0 (tag 7, count 10, f32)'",
     "'recv #0 (tag 8, count 10, f32)'"},
    {10, 11, RP_F32, RP_F32, 7, 7, true, "'send #1 (tag 7, count 10, f32)'",
     "'recv #1 (tag 7, count 11, f32)'"},
    {10, 10, RP_F32, RP_I32, 7, RP_ANY_TAG, false, "'send #0 (tag 7, count 10, f32)'",
     "'recv #0 (any tag, count 10, i32)'"},
    {1 << 20, (1 << 20) - 1, RP_F64, RP_F64, 3, 3, false, "'send #0 (tag 3, count 1048576, f64)'",
     "'recv #0 (tag 3, count 1048575, f64)'"},
};
static int case_;

/* Rank 0 sends to the last rank (another process), which receives; then each makes one more call.
 */
static void test_mismatch(rp_comm *c)
{
    const mismatch_case *mc = &cases[case_];
    int last = size_ - 1;
    if (rank_ != 0 && rank_ != last) return;
    uint8_t *buf = xmalloc((size_t)(1 << 20) * 8);
    memset(buf, 0, (size_t)(1 << 20) * 8);
    if (mc->first_ok) {
        rp_status st = rank_ == 0 ? rp_comm_send(c, buf, 3, RP_I32, last, 5)
                                  : rp_comm_recv(c, buf, 3, RP_I32, 0, 5);
        CHECK(st == RP_OK, "first message: %s", rp_last_error());
    }
    double t0 = rp_now_s();
    char msg[1024] = "";
    rp_status st;
    if (rank_ == 0) {
        st = rp_comm_send(c, buf, mc->scount, mc->sdt, last, mc->stag);
        if (st == RP_OK) {
            /* A small send was buffered: its next call reports the mismatch. */
            int32_t v;
            st = rp_comm_recv(c, &v, 1, RP_I32, last, 1);
        }
    } else {
        st = rp_comm_recv(c, buf, mc->rcount, mc->rdt, 0, mc->rtag);
    }
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    CHECK(st == RP_ERR_MISMATCH, "case %d: status %d: %s", case_, st, msg);
    CHECK(strstr(msg, mc->sent) && strstr(msg, mc->expected),
          "case %d: message does not name %s and %s: %s", case_, mc->sent, mc->expected, msg);
    char who[64];
    snprintf(who, sizeof who, "replica %d", rp_comm_replica_id(c, 0));
    CHECK(strstr(msg, who), "case %d: message does not name %s: %s", case_, who, msg);
    snprintf(who, sizeof who, "replica %d", rp_comm_replica_id(c, last));
    CHECK(strstr(msg, who), "case %d: message does not name %s: %s", case_, who, msg);
    CHECK(rp_now_s() - t0 < 10, "case %d: took %.1f s", case_, rp_now_s() - t0);
    t0 = rp_now_s();
    int32_t v = 0;
    st = rp_comm_send(c, &v, 1, RP_I32, rank_ == 0 ? last : 0, 2);
    CHECK(st == RP_ERR_COMM && rp_now_s() - t0 < 1,
          "case %d: a send after the mismatch: status %d after %.2f s", case_, st, rp_now_s() - t0);
    free(buf);
}

/* ---- 3. a missing sender
 * -------------------------------------------------------------------------- */

static void test_missing_sender(rp_comm *c)
{
    int last = size_ - 1;
    int32_t v[4] = {0};
    if (rank_ == last) {
        sleep(2); /* past the 1 s timeout; then it sends into a communicator its peer gave up on */
        (void)rp_comm_send(c, v, 4, RP_I32, 0, 0);
        return;
    }
    if (rank_ != 0) return;
    double t0 = rp_now_s();
    rp_status st = rp_comm_recv(c, v, 4, RP_I32, last, 0);
    double took = rp_now_s() - t0;
    char want[64];
    snprintf(want, sizeof want, "replica %d", rp_comm_replica_id(c, last));
    CHECK(st == RP_ERR_TIMEOUT, "missing sender: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), want) && strstr(rp_last_error(), "did not send"), "message: %s",
          rp_last_error());
    if (per_ == 1 || last / per_ != 0) {
        char host[80];
        snprintf(host, sizeof host, "(rank %d, ", last / per_);
        CHECK(strstr(rp_last_error(), host), "message does not name the rank and host: %s",
              rp_last_error());
    }
    CHECK(took > 0.9 && took < 2.5, "timed out after %.2f s (timeout 1 s)", took);
    t0 = rp_now_s();
    st = rp_comm_recv(c, v, 4, RP_I32, last, 0);
    CHECK(st == RP_ERR_COMM && rp_now_s() - t0 < 0.5, "after the timeout: status %d", st);
}

/* ---- 4. any wait order
 * ---------------------------------------------------------------------------- */

#define NB_MSGS 5
static int64_t nb_bytes(int k)
{
    return k == 1 ? 0 : (int64_t)(41 << (4 * k));
}

static void test_any_order(rp_comm *c)
{
    /* Every member exchanges NB_MSGS messages with every other. */
    int total = 2 * NB_MSGS * (size_ - 1), k = 0;
    rp_comm_request **req = xmalloc((size_t)total * sizeof *req);
    uint8_t **bufs = xmalloc((size_t)total * sizeof *bufs);
    for (int p = 0; p < size_; p++) {
        if (p == rank_) continue;
        for (int i = 0; i < NB_MSGS; i++) {
            bufs[k] = xmalloc((size_t)nb_bytes(i));
            CHECK(rp_comm_irecv(c, bufs[k], nb_bytes(i), RP_U8, p, i, &req[k]) == RP_OK,
                  "irecv: %s", rp_last_error());
            k++;
            bufs[k] = xmalloc((size_t)nb_bytes(i));
            fill(bufs[k], rank_, i, nb_bytes(i));
            CHECK(rp_comm_isend(c, bufs[k], nb_bytes(i), RP_U8, p, i, &req[k]) == RP_OK,
                  "isend: %s", rp_last_error());
            k++;
        }
    }
    int stride = 7;
    while (total % stride == 0)
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
            CHECK(done || st != RP_OK, "request %d never completed by test", i);
        } else {
            st = rp_comm_wait(req[i]);
        }
        CHECK(st == RP_OK, "request %d: %s", i, rp_last_error());
    }
    k = 0;
    for (int p = 0; p < size_; p++) {
        if (p == rank_) continue;
        for (int i = 0; i < NB_MSGS; i++, k += 2)
            CHECK(first_wrong(bufs[k], p, i, nb_bytes(i)) < 0, "message %d from %d differs", i, p);
    }
    for (int i = 0; i < total; i++)
        free(bufs[i]);
    free(bufs);
    free(req);
}

/* ---- 5. two members sending to each other at once
 * -------------------------------------------------- */

static void test_exchange(rp_comm *c)
{
    int64_t bytes = 16 << 20;
    uint8_t *out = xmalloc((size_t)bytes), *in = xmalloc((size_t)bytes);
    /* With a neighbour (in the same process in 2 x 2), then across the job. */
    int partners[2] = {rank_ ^ 1, (rank_ + size_ / 2) % size_};
    for (int j = 0; j < 2; j++) {
        int peer = partners[j];
        if (peer >= size_ || (j == 1 && size_ % 2)) continue;
        fill(out, rank_, j, bytes);
        double t0 = rp_now_s();
        rp_status st = rp_comm_send(c, out, bytes, RP_U8, peer, j);
        if (st == RP_OK) st = rp_comm_recv(c, in, bytes, RP_U8, peer, j);
        CHECK(st == RP_OK, "exchange with %d: %s", peer, rp_last_error());
        CHECK(rp_now_s() - t0 < 4, "exchange with %d took %.2f s (timeout 5 s)", peer,
              rp_now_s() - t0);
        if (st == RP_OK)
            CHECK(first_wrong(in, peer, j, bytes) < 0, "exchange with %d: wrong data", peer);
    }
    free(out);
    free(in);
}

/* ---- 6. any source, any tag, probe
 * ---------------------------------------------------------------- */

static void test_any_source(rp_comm *c)
{
    if (rank_ != 0) {
        int32_t v[64];
        for (int i = 0; i <= rank_; i++)
            v[i] = rank_ * 100 + i;
        CHECK(rp_comm_send(c, v, rank_ + 1, RP_I32, 0, 10 + rank_) == RP_OK, "send: %s",
              rp_last_error());
        return;
    }
    int seen[64] = {0};
    for (int got = 0; got < size_ - 1; got++) {
        bool ready = false;
        int source = -5, tag = -5;
        int64_t count = -5;
        rp_dtype dt = RP_F64;
        double end = rp_now_s() + 30;
        do
            CHECK(rp_comm_probe(c, RP_ANY_SOURCE, RP_ANY_TAG, &ready, &source, &tag, &count, &dt) ==
                      RP_OK,
                  "probe: %s", rp_last_error());
        while (!ready && rp_now_s() < end);
        CHECK(ready, "message %d never came", got);
        if (!ready || source < 1 || source >= size_) return;
        CHECK(tag == 10 + source && count == source + 1 && dt == RP_I32,
              "probe: from %d tag %d count %lld dtype %d", source, tag, (long long)count, dt);
        int32_t v[64] = {0};
        CHECK(rp_comm_recv(c, v, count, dt, RP_ANY_SOURCE, RP_ANY_TAG) == RP_OK, "recv: %s",
              rp_last_error());
        for (int i = 0; i < count; i++)
            CHECK(v[i] == source * 100 + i, "from %d: element %d is %d", source, i, v[i]);
        seen[source]++;
    }
    for (int q = 1; q < size_; q++)
        CHECK(seen[q] == 1, "member %d's message seen %d times", q, seen[q]);
    bool ready = true;
    CHECK(rp_comm_probe(c, RP_ANY_SOURCE, RP_ANY_TAG, &ready, NULL, NULL, NULL, NULL) == RP_OK &&
              !ready,
          "a message left after all were received");
}

/* ---- 7. after a broken communicator
 * --------------------------------------------------------------- */

static void test_after_broken(rp_comm *c)
{
    float x[16] = {0};
    bool last = rank_ / per_ == size_ / per_ - 1;
    rp_status st = rp_comm_all_reduce(c, x, x, last ? 9 : 7, RP_F32, RP_SUM);
    CHECK(st == RP_ERR_MISMATCH, "mismatch: status %d: %s", st, rp_last_error());
    double t0 = rp_now_s();
    st = rp_comm_send(c, x, 4, RP_F32, (rank_ + 1) % size_, 0);
    CHECK(st == RP_ERR_COMM && strstr(rp_last_error(), "count 9"), "send after broken: %d: %s", st,
          rp_last_error());
    st = rp_comm_recv(c, x, 4, RP_F32, RP_ANY_SOURCE, 0);
    CHECK(st == RP_ERR_COMM && strstr(rp_last_error(), "count 9"), "recv after broken: %d: %s", st,
          rp_last_error());
    CHECK(rp_now_s() - t0 < 0.5, "p2p on a broken communicator took %.2f s", rp_now_s() - t0);
}

/* ---- 8. a peer whose step failed
 * ------------------------------------------------------------------ */

static void test_leave_p2p(rp_comm *c)
{
    int last = size_ - 1, waiter = size_ - 2;
    if (rank_ == last) {
        usleep(200000);
        rp_comm_leave(c, RP_ERR_NUMERIC, "the loss is nan on purpose");
        return;
    }
    if (rank_ != waiter) return;
    int32_t v;
    double t0 = rp_now_s();
    rp_status st = rp_comm_recv(c, &v, 1, RP_I32, last, 3);
    CHECK(st == RP_ERR_COMM, "recv from a member that left: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "the loss is nan on purpose"), "its reason is missing: %s",
          rp_last_error());
    CHECK(rp_now_s() - t0 < 5, "took %.1f s (timeout 30 s)", rp_now_s() - t0);
}

/* The MPI backend: the reason reaches the peers waiting in a collective too (it used to read "its
 * own message says why"). */
static void test_leave_collective(rp_comm *c)
{
    float buf[4] = {0};
    if (rank_ == size_ - 1) {
        rp_comm_leave(c, RP_ERR_NUMERIC, "replica's loss is nan at step 7");
        return;
    }
    rp_status st = rp_comm_all_reduce(c, buf, buf, 4, RP_F32, RP_SUM);
    CHECK(st == RP_ERR_COMM, "after a peer left: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "replica's loss is nan at step 7"), "the reason is missing: %s",
          rp_last_error());
}

/* ---- 9. a user call skipped for an internal one
 * --------------------------------------------------- */

#define REPORT "the runtime's report all-gather"

static void test_internal_skip(rp_comm *c)
{
    float x[8] = {1};
    int64_t mine[2] = {rank_, 0}, all[128];
    bool skipper = rank_ / per_ == size_ / per_ - 1; /* the last process's members */
    /* A first step of three user calls and the report: the second step's calls are numbered from #0
     * again. */
    rp_comm_rejoin(c);
    rp_status st = RP_OK;
    for (int k = 0; k < 3 && st == RP_OK; k++)
        st = rp_comm_all_reduce(c, x, x, 8, RP_F32, RP_SUM);
    CHECK(st == RP_OK, "step 1's user all_reduce: %s", rp_last_error());
    rp_comm_begin_internal(c, REPORT);
    st = rp_comm_all_gather(c, mine, all, 2, RP_I64);
    rp_comm_end_internal(c);
    CHECK(st == RP_OK, "step 1's report: %s", rp_last_error());
    rp_comm_rejoin(c);
    CHECK(rp_comm_step_user_sequence(c) == 0 && rp_comm_user_sequence(c) == 3,
          "after rejoin: step %llu, total %llu", (unsigned long long)rp_comm_step_user_sequence(c),
          (unsigned long long)rp_comm_user_sequence(c));
    st = rp_comm_all_reduce(c, x, x, 8, RP_F32, RP_SUM);
    CHECK(st == RP_OK, "user all_reduce #0: %s", rp_last_error());
    if (!skipper) st = rp_comm_all_reduce(c, x, x, 8, RP_F32, RP_SUM);
    if (skipper || st == RP_OK) {
        rp_comm_begin_internal(c, REPORT);
        st = rp_comm_all_gather(c, mine, all, 2, RP_I64);
        rp_comm_end_internal(c);
    }
    const char *e = rp_last_error();
    CHECK(st == RP_ERR_MISMATCH, "skipped call: status %d: %s", st, e);
    CHECK(strstr(e, "ended its step without calling all_reduce #1 (count 8, f32, sum) (it went on "
                    "to " REPORT),
          "message: %s", e);
    CHECK(!strstr(e, "all_gather #"), "the internal call is numbered: %s", e);
    CHECK(!strstr(e, "all_reduce #4"),
          "numbered from the communicator's creation, not the step: %s", e);
}

/* A forgotten send (issue 26): member skipper_ goes on to the runtime's report all-gather without
 * the send member victim_ (in another process) waits for; the others go on to the all-gather.
 * Every member fails at once (not at the 10 s timeout) with the message that names the skipper -
 * not the victim, which never arrived at the all-gather because it waited: the victim and the
 * skipper from their own calls, the others from the notice the victim sends every process, or
 * (in the victim's process) from the victim's failure. */
static int skipper_, victim_;

static void test_skipped_send(rp_comm *c)
{
    int64_t mine[2] = {rank_, 0}, all[2 * 64];
    float v = 0;
    double t0 = rp_now_s();
    rp_status st = RP_OK;
    if (rank_ == victim_) st = rp_comm_recv(c, &v, 1, RP_F32, skipper_, 7);
    if (st == RP_OK) {
        rp_comm_begin_internal(c, REPORT);
        st = rp_comm_all_gather(c, mine, all, 2, RP_I64);
        rp_comm_end_internal(c);
    }
    double took = rp_now_s() - t0;
    const char *e = rp_last_error();
    char skipper[64], victim[64];
    snprintf(skipper, sizeof skipper, "replica %d (rank %d, ", skipper_, skipper_ / per_);
    snprintf(victim, sizeof victim, "which replica %d (rank %d, ", victim_, victim_ / per_);
    CHECK(st == RP_ERR_MISMATCH || st == RP_ERR_COMM, "skipped send: status %d: %s", st, e);
    CHECK(took < 2.0, "the skipped send took %.2f s to report (timeout 10 s): %s", took, e);
    CHECK(strstr(e, skipper) && strstr(e, "went on to its next collective") &&
              strstr(e, "without sending the message of recv (tag 7, count 1, f32)") &&
              strstr(e, victim),
          "skipper %d, victim %d: message: %s", skipper_, victim_, e);
    CHECK(!strstr(e, "did not arrive") && !strstr(e, "timed out"),
          "the waiting member is blamed: %s", e);
}

/* ---- 10. the call check
 * ----------------------------------------------------------------------------- */

static void test_call_sequence(rp_comm *c)
{
    int64_t buf[64], out[64 * 64];
    for (int it = 0; it < 240; it++) {
        /* Some members run ahead, some behind: jitter of up to 2 ms, by rank and step. */
        if ((it * 7 + rank_ * 3) % 5 == 0) usleep((useconds_t)((it + rank_) % 4) * 500);
        int kind = it % 6;
        int64_t count = 1 + (it * 13) % 50;
        for (int i = 0; i < count; i++)
            buf[i] = rank_ * 1000 + it + i;
        rp_status st = RP_OK;
        switch (kind) {
        case 0:
            st = rp_comm_all_reduce(c, buf, buf, count, RP_I64, RP_SUM);
            for (int i = 0; st == RP_OK && i < count; i++) {
                int64_t want = 1000LL * size_ * (size_ - 1) / 2 + (int64_t)size_ * (it + i);
                if (buf[i] != want) {
                    CHECK(false, "step %d: all_reduce[%d] = %lld, want %lld", it, i,
                          (long long)buf[i], (long long)want);
                    break;
                }
            }
            break;
        case 1:
            st = rp_comm_barrier(c);
            break;
        case 2:
            st = rp_comm_broadcast(c, buf, count, RP_I64, it % size_);
            CHECK(st != RP_OK || buf[0] == (it % size_) * 1000 + it, "step %d: broadcast %lld", it,
                  (long long)buf[0]);
            break;
        case 3:
            st = rp_comm_all_gather(c, buf, out, count, RP_I64);
            for (int q = 0; st == RP_OK && q < size_; q++)
                CHECK(out[q * count] == q * 1000 + it, "step %d: all_gather from %d: %lld", it, q,
                      (long long)out[q * count]);
            break;
        case 4: {
            int64_t big[64 * 8];
            int64_t per = count < 8 ? count : 8;
            for (int i = 0; i < per * size_; i++)
                big[i] = i;
            st = rp_comm_reduce_scatter(c, big, buf, per, RP_I64, RP_SUM);
            CHECK(st != RP_OK || buf[0] == (int64_t)size_ * (rank_ * per),
                  "step %d: reduce_scatter %lld", it, (long long)buf[0]);
            break;
        }
        default:
            st = rp_comm_all_reduce(c, buf, buf, 0, RP_I64, RP_SUM);
            break;
        }
        CHECK(st == RP_OK, "step %d (kind %d): %s", it, kind, rp_last_error());
        if (st != RP_OK) return;
    }
}

static void test_check_data_against_barrier(rp_comm *c)
{
    float x[64] = {0};
    bool last = rank_ / per_ == size_ / per_ - 1;
    CHECK(rp_comm_all_reduce(c, x, x, 64, RP_F32, RP_SUM) == RP_OK, "all_reduce #0: %s",
          rp_last_error());
    double t0 = rp_now_s();
    rp_status st = last ? rp_comm_barrier(c) : rp_comm_all_reduce(c, x, x, 64, RP_F32, RP_SUM);
    CHECK(st == RP_ERR_MISMATCH, "all_reduce against barrier: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "barrier #1") &&
              strstr(rp_last_error(), "all_reduce #1 (count 64"),
          "message: %s", rp_last_error());
    CHECK(rp_now_s() - t0 < 5, "took %.1f s (timeout 20 s)", rp_now_s() - t0);
}

static void test_check_gather_counts(rp_comm *c)
{
    int32_t x[8] = {0}, all[8 * 64];
    bool last = rank_ / per_ == size_ / per_ - 1;
    double t0 = rp_now_s();
    rp_status st = rp_comm_all_gather(c, x, all, last ? 5 : 6, RP_I32);
    CHECK(st == RP_ERR_MISMATCH, "all_gather counts: status %d: %s", st, rp_last_error());
    CHECK(strstr(rp_last_error(), "all_gather #0 (count 5") &&
              strstr(rp_last_error(), "all_gather #0 (count 6"),
          "message: %s", rp_last_error());
    CHECK(rp_now_s() - t0 < 5, "took %.1f s (timeout 20 s)", rp_now_s() - t0);
    st = rp_comm_barrier(c);
    CHECK(st == RP_ERR_COMM, "after the mismatch: %d", st);
}

/* ---- SIGSTOP: the stopped rank's own message
 * ------------------------------------------------------- */

/* A child that stops this process after `after_s` for `for_s` seconds. */
static pid_t stop_me(double after_s, double for_s)
{
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        usleep((useconds_t)(after_s * 1e6));
        kill(parent, SIGSTOP);
        usleep((useconds_t)(for_s * 1e6));
        kill(parent, SIGCONT);
        _exit(0);
    }
    return pid;
}

/* Stopped inside the wait: its own poll sees the gap. */
static void test_stop_in_wait(rp_comm *c)
{
    float x[4096] = {0};
    CHECK(rp_comm_all_reduce(c, x, x, 4096, RP_F32, RP_SUM) == RP_OK, "warm-up: %s",
          rp_last_error());
    if (rank_ == 1) {
        pid_t child = stop_me(0.3, 4.0);
        rp_status st = rp_comm_all_reduce(c, x, x, 4096, RP_F32, RP_SUM);
        waitpid(child, NULL, 0);
        CHECK(st == RP_ERR_TIMEOUT, "stopped in the wait: status %d: %s", st, rp_last_error());
        CHECK(strstr(rp_last_error(), "this rank was not running for"), "message: %s",
              rp_last_error());
        CHECK(!strstr(rp_last_error(), "did not arrive") &&
                  !strstr(rp_last_error(), "stopped or died"),
              "the stopped rank blames its peer: %s", rp_last_error());
    } else {
        sleep(6); /* never calls: rank 1 times out, having been stopped past its deadline */
    }
}

/* Stopped before the call: its peer gives up on it first and says so. */
static void test_stop_before_call(rp_comm *c)
{
    float x[4096] = {0};
    CHECK(rp_comm_all_reduce(c, x, x, 4096, RP_F32, RP_SUM) == RP_OK, "warm-up: %s",
          rp_last_error());
    if (rank_ == 1) {
        pid_t child = stop_me(0.0, 4.0);
        usleep(500000); /* stopped in here */
        waitpid(child, NULL, 0);
        rp_status st = rp_comm_all_reduce(c, x, x, 4096, RP_F32, RP_SUM);
        CHECK(st == RP_ERR_TIMEOUT, "late after a stop: status %d: %s", st, rp_last_error());
        CHECK(strstr(rp_last_error(), "rank 0 (") &&
                  strstr(rp_last_error(), "had already given up on this rank"),
              "message: %s", rp_last_error());
        /* The peer's own message is quoted; what this rank says after it must not blame the peer.
         */
        const char *own = strstr(rp_last_error(), "this rank was late");
        CHECK(own && !strstr(own, "stopped or died") && !strstr(own, "did not arrive"),
              "the stopped rank blames its peer: %s", rp_last_error());
    } else {
        rp_status st = rp_comm_all_reduce(c, x, x, 4096, RP_F32, RP_SUM);
        CHECK(st == RP_ERR_TIMEOUT && strstr(rp_last_error(), "rank 1 ("),
              "the waiting rank: %d: %s", st, rp_last_error());
        sleep(5); /* until rank 1 has timed out too */
    }
}

/* ---- the harness
 * ------------------------------------------------------------------------------------ */

static rp_comm *comms_[64];

static void create_comms(double timeout)
{
    rp_status st = per_ == 1 ? rp_comm_mpi_create(&comms_[0], timeout)
                             : rp_comm_hier_create(comms_, per_, timeout);
    if (st != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        exit(1);
    }
}

typedef struct member_arg {
    void (*fn)(rp_comm *);
    int t;
} member_arg;

static void *member_main(void *p)
{
    member_arg *a = p;
    rank_ = rp_comm_rank(comms_[a->t]);
    a->fn(comms_[a->t]);
    return NULL;
}

/* Runs fn on every member of this process on a fresh communicator, then destroys it (between
 * barriers). */
static void on_members(void (*fn)(rp_comm *), double timeout)
{
    create_comms(timeout);
    pthread_t th[64];
    member_arg args[64];
    for (int t = 0; t < per_; t++) {
        args[t] = (member_arg){fn, t};
        if (pthread_create(&th[t], NULL, member_main, &args[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int t = 0; t < per_; t++)
        pthread_join(th[t], NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < per_; t++) {
        rp_comm_destroy(comms_[t]);
        comms_[t] = NULL;
    }
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    bool stop = argc > 1 && !strcmp(argv[1], "stop");
    per_ = argc > 1 && !stop ? atoi(argv[1]) : 1;
    if (per_ < 1 || per_ > 64) {
        fprintf(stderr, "usage: test_p2p_mpi [members per process, 1..64]\n");
        return 2;
    }
    create_comms(60.0);
    size_ = rp_comm_size(comms_[0]);
    int process = rp_comm_rank(comms_[0]) / per_;
    for (int t = 0; t < per_; t++)
        rp_comm_destroy(comms_[t]);
    rank_ = process * per_;
    if (stop) {
        on_members(test_stop_in_wait, 2.0);
        on_members(test_stop_before_call, 2.0);
        goto verdict;
    }
    on_members(test_ring, 60.0);
    for (case_ = 0; case_ < (int)(sizeof cases / sizeof *cases); case_++)
        on_members(test_mismatch, 10.0);
    on_members(test_missing_sender, 1.0);
    on_members(test_any_order, 30.0);
    on_members(test_exchange, 5.0);
    on_members(test_any_source, 30.0);
    on_members(test_after_broken, 10.0);
    if (size_ >= 2) on_members(test_leave_p2p, 30.0);
    if (per_ == 1) on_members(test_leave_collective, 30.0);
    on_members(test_internal_skip, 10.0);
    /* The victim in the last process; the skipper the first member of the first (it makes its
     * process's MPI calls), and in a process of several also another member. */
    skipper_ = 0;
    victim_ = size_ - 1;
    on_members(test_skipped_send, 10.0);
    if (per_ > 1) {
        skipper_ = per_ - 1;
        victim_ = size_ - per_;
        on_members(test_skipped_send, 10.0);
    }
    on_members(test_call_sequence, 30.0);
    on_members(test_check_data_against_barrier, 20.0);
    on_members(test_check_gather_counts, 20.0);
verdict:;
    int mine = atomic_load(&failures), total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (process == 0)
        printf("%s: %d ranks x %d members, %d failures\n", total ? "FAIL" : "ok", size_ / per_,
               per_, total);
    return total ? 1 : 0;
}
