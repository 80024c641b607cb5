/*
 * test_ps_mpi.c - the MPI parameter servers, run by CTest under mpirun:
 * `test_ps_mpi S` makes the last S ranks servers and the others workers
 * (CTest: 3 ranks with 1 server, 4 ranks with 2). Each worker checks its own
 * results and prints what failed; the exit status is non-zero if anything
 * failed anywhere (the verdict is summed over MPI_COMM_WORLD).
 *
 *  1. no lost or duplicated updates: plain SGD, every worker pushes K known
 *     gradients (exact in float, so any order gives the same bits); the
 *     snapshot equals init - lr * (sum of every push), and every server
 *     counts W*K pushes applied and received, K from each worker;
 *  2. momentum, Nesterov and Adam: one worker's pushes give, bitwise, what
 *     rp_optim_apply gives step by step on the whole block, slots included;
 *  3. resume: init with values, slots and a step, a snapshot returns them,
 *     and the next push continues Adam's bias correction from that step;
 *  4. the staleness bound k = 1 with the last worker sleeping 40 ms a step:
 *     each time a pull returns, every other worker has pushed at least
 *     (my clock - 1) times (without the bound the fast workers finish their
 *     steps while the slow one is still at its first few);
 *  5. a pull held back past 0.8 x the timeout: RP_ERR_TIMEOUT naming the
 *     slowest worker and its rank, from the server before the worker's own
 *     deadline;
 *  6. claims: the workers' tickets are exactly 0 .. N-1, each once;
 *  7. a worker reporting a failure: every server's rp_ps_mpi_serve()
 *     returns RP_ERR_COMM naming that worker;
 *  8. a large set (3M floats, well past any eager limit, so each server's
 *     slice goes straight from the caller's gradient and comes straight
 *     into its values): pushes from every worker and Adam's slots through
 *     init and snapshot come back exact.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replicator/ps.h"

static int failures, rank_, W, S;
static MPI_Comm workers_; /* the workers only */

#include "mpi_check.h"

#define OK(expr) CHECK((expr) == RP_OK, "%s: %s", #expr, rp_last_error())

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static rp_ps_config config(rp_optim_kind kind, float momentum, int staleness, double timeout_s)
{
    rp_ps_config cfg = rp_ps_config_default();
    cfg.servers = S;
    cfg.staleness = staleness;
    cfg.timeout_s = timeout_s;
    cfg.optim.kind = kind;
    cfg.optim.momentum = momentum;
    return cfg;
}

/* 1. Gradient element i of worker w's push j: a multiple of 1/64 below 4, so every partial sum is
 * exact. */
static float grad_value(int w, int j, int64_t i)
{
    return (float)(((w + 1) * (j + 1) + (int)(i % 7)) % 256) / 64.0f;
}

static void test_no_lost_updates(rp_ps_group *g)
{
    const int64_t n =
        1000; /* not a multiple of 16: the last server's range ends in a partial line */
    const int K = 40;
    const float lr = 0.5f;
    rp_ps_config cfg = config(RP_OPTIM_SGD, 0.0f, -1, 30.0);
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, n, &cfg));
    if (!ps) return;
    CHECK(strcmp(rp_ps_backend(ps), "mpi") == 0, "backend %s", rp_ps_backend(ps));
    CHECK(rp_ps_worker(ps) == rank_ && rp_ps_workers(ps) == W && rp_ps_servers(ps) == S,
          "handle's numbers");
    float *init = malloc((size_t)n * sizeof(float)), *grad = malloc((size_t)n * sizeof(float));
    float *got = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        init[i] = (float)(i % 100) / 8.0f;
    if (rank_ == 0) OK(rp_ps_init(ps, init, NULL, 0));
    MPI_Barrier(workers_);
    for (int j = 0; j < K; j++) {
        for (int64_t i = 0; i < n; i++)
            grad[i] = grad_value(rank_, j, i);
        /* Every kind of call: push, push_pull and a pull now and then. */
        if (j % 2)
            OK(rp_ps_push_pull(ps, grad, lr, got));
        else
            OK(rp_ps_push(ps, grad, lr));
        if (j % 5 == 0) OK(rp_ps_pull(ps, got));
    }
    CHECK(rp_ps_clock(ps) == K, "clock %lld after %d pushes", (long long)rp_ps_clock(ps), K);
    MPI_Barrier(workers_);
    int64_t step = -1;
    OK(rp_ps_snapshot(ps, got, NULL, &step));
    CHECK(step == (int64_t)W * K, "step %lld after %d pushes", (long long)step, W * K);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = init[i];
        for (int w = 0; w < W; w++)
            for (int j = 0; j < K; j++)
                want -= (double)lr * grad_value(w, j, i);
        if (fabs(got[i] - want) > 1e-6 * (1 + fabs(want)) && bad++ < 3)
            CHECK(0, "element %lld is %.9g, init - lr * sum of pushes is %.9g", (long long)i,
                  (double)got[i], want);
    }
    CHECK(bad == 0, "%d of %lld elements differ from init - lr * sum of pushes", bad, (long long)n);
    for (int s = 0; s < S; s++) {
        rp_ps_server_stats st;
        memset(&st, 0xff, sizeof st);
        OK(rp_ps_stats(ps, s, &st));
        CHECK(st.applied == (int64_t)W * K && st.received == (int64_t)W * K,
              "server %d applied %lld and received %lld pushes, %d were made", s,
              (long long)st.applied, (long long)st.received, W * K);
        for (int w = 0; w < W; w++)
            CHECK(st.from_worker[w] == K, "server %d: %lld pushes from worker %d, %d were made", s,
                  (long long)st.from_worker[w], w, K);
    }
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);
    free(init);
    free(grad);
    free(got);
}

/* 2 and 3. The servers' rule against rp_optim_apply on the whole block, bitwise; values, slots and
 * step. */
static void test_rule(rp_ps_group *g, rp_ps_config cfg, int64_t start_step, bool resume)
{
    const int64_t n = 777;
    const int K = 6;
    const float lr = 0.01f;
    int k = rp_optim_slots(&cfg.optim);
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, n, &cfg));
    if (!ps) return;
    float *p = malloc((size_t)n * sizeof(float)), *gr = malloc((size_t)n * sizeof(float));
    float *state = calloc((size_t)(k + 1) * (size_t)n, sizeof(float)),
          *got = malloc((size_t)n * sizeof(float));
    float *got_state = calloc((size_t)(k + 1) * (size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = sinf((float)i * 0.37f);
    if (resume)
        for (int64_t i = 0; i < k * n; i++)
            state[i] = fabsf(cosf((float)i * 0.11f)) * 0.01f;
    if (rank_ == 0) {
        OK(rp_ps_init(ps, p, resume ? state : NULL, start_step));
        if (resume) {
            int64_t step = -1;
            OK(rp_ps_snapshot(ps, got, got_state, &step));
            CHECK(step == start_step, "snapshot after init: step %lld, init gave %lld",
                  (long long)step, (long long)start_step);
            CHECK(memcmp(got, p, (size_t)n * sizeof(float)) == 0,
                  "snapshot after init: other values");
            CHECK(memcmp(got_state, state, (size_t)(k * n) * sizeof(float)) == 0,
                  "snapshot after init: other slots");
        }
        for (int j = 0; j < K; j++) {
            for (int64_t i = 0; i < n; i++)
                gr[i] = cosf((float)(i * (j + 3)) * 0.01f) * (j % 2 ? 1.0f : -0.5f);
            OK(rp_ps_push_pull(ps, gr, lr, got));
            rp_optim_apply(&cfg.optim, p, gr, state, n, lr, start_step + j + 1);
            CHECK(memcmp(got, p, (size_t)n * sizeof(float)) == 0,
                  "rule %d (momentum %g, slots %d): push %d pulled "
                  "other values than rp_optim_apply",
                  (int)cfg.optim.kind, (double)cfg.optim.momentum, k, j);
        }
        int64_t step = -1;
        OK(rp_ps_snapshot(ps, got, got_state, &step));
        CHECK(step == start_step + K, "step %lld, expected %lld", (long long)step,
              (long long)(start_step + K));
        CHECK(memcmp(got, p, (size_t)n * sizeof(float)) == 0,
              "snapshot: other values than rp_optim_apply");
        CHECK(memcmp(got_state, state, (size_t)(k * n) * sizeof(float)) == 0,
              "snapshot: other slots than rp_optim_apply (%d slots)", k);
    }
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);
    free(p);
    free(gr);
    free(state);
    free(got);
    free(got_state);
}

/* 4. k = 1, the last worker slow: a returned pull never finds another worker more than 1 step
 * behind. */
static void test_staleness(rp_ps_group *g)
{
    const int64_t n = 64;
    const int steps = 12, k = 1;
    rp_ps_config cfg = config(RP_OPTIM_SGD, 0.0f, k, 30.0);
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, n, &cfg));
    if (!ps) return;
    float grad[64] = {0}, got[64];
    OK(rp_ps_join(ps, 1));
    MPI_Barrier(workers_);
    bool slow = rank_ == W - 1;
    double t0 = MPI_Wtime();
    int64_t worst = 0;
    for (int j = 0; j < steps; j++) {
        if (slow) sleep_ms(40);
        OK(rp_ps_push_pull(ps, grad, 0.1f, got));
        int64_t mine = rp_ps_clock(ps);
        rp_ps_server_stats st;
        OK(rp_ps_stats(ps, j % S, &st));
        /* Counts only grow: if they are within the bound now, they were when the pull returned. */
        for (int w = 0; w < W; w++)
            if (w != rank_ && mine - st.from_worker[w] > worst) worst = mine - st.from_worker[w];
    }
    double elapsed = MPI_Wtime() - t0;
    CHECK(worst <= k,
          "worker %d's pull returned %lld steps ahead of another worker; the bound is %d", rank_,
          (long long)worst, k);
    /* A fast worker must have been held back to about the slow one's pace. */
    if (!slow)
        CHECK(elapsed > 0.040 * (steps - k - 1), "worker %d took only %.3f s: not held back", rank_,
              elapsed);
    OK(rp_ps_leave(ps));
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);
}

/* 5. k = 0: worker 0's first pull waits for the last worker, which never pushes: an error naming
 * it. */
static void test_staleness_timeout(rp_ps_group *g)
{
    float grad[16] = {0}, got[16];
    rp_ps_config cfg = config(RP_OPTIM_SGD, 0.0f, 0,
                              2.0); /* the server answers at 1.6 s, the worker gives up at 2 */
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, 16, &cfg));
    if (!ps) return;
    OK(rp_ps_join(ps, 1));
    MPI_Barrier(workers_);
    if (rank_ == 0) {
        double t0 = MPI_Wtime();
        rp_status st = rp_ps_push_pull(ps, grad, 0.1f, got);
        double took = MPI_Wtime() - t0;
        char want[64];
        snprintf(want, sizeof want, "for worker %d (rank %d on host", W - 1, W - 1);
        CHECK(st == RP_ERR_TIMEOUT, "a held-back pull returned %s, not TIMEOUT",
              rp_status_name(st));
        CHECK(strstr(rp_last_error(), want) && strstr(rp_last_error(), "staleness bound 0"),
              "the error does not name the slowest worker ('%s'): %s", want, rp_last_error());
        CHECK(took > 1.5 && took < 2.5,
              "the held-back pull failed after %.2f s, the timeout is 2 s", took);
    } else if (rank_ < W - 1) {
        OK(rp_ps_leave(ps)); /* holds no one back */
    }
    MPI_Barrier(workers_);
    if (rank_ == W - 1) OK(rp_ps_leave(ps));
    rp_ps_destroy(ps);
}

/* 6. Tickets 0 .. N-1 across all workers' claims, each exactly once. */
static void test_claims(rp_ps_group *g)
{
    enum { N = 300 };
    rp_ps_config cfg = config(RP_OPTIM_SGD, 0.0f, -1, 30.0);
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, 16, &cfg));
    if (!ps) return;
    OK(rp_ps_join(ps, 1));
    MPI_Barrier(workers_);
    int mine[N] = {0}, all[N] = {0}, taken = 0;
    for (int k = 0;; k++) {
        int64_t t = -1;
        rp_status st = rp_ps_claim(ps, &t);
        /* Every worker takes its first ticket before any takes a second, so each gets one
           however the ranks are scheduled (N is far above the workers; on an oversubscribed
           machine one worker once took all 300 before the other's first claim). */
        if (k == 0) MPI_Barrier(workers_);
        if (st != RP_OK) {
            CHECK(0, "claim: %s", rp_last_error());
            break;
        }
        if (t >= N) break;
        CHECK(t >= 0, "ticket %lld", (long long)t);
        if (t >= 0) mine[t]++;
        taken++;
    }
    MPI_Allreduce(mine, all, N, MPI_INT, MPI_SUM, workers_);
    for (int i = 0; i < N; i++)
        CHECK(all[i] == 1, "ticket %d was handed out %d times", i, all[i]);
    CHECK(taken > 0, "worker %d got no ticket", rank_);
    OK(rp_ps_leave(ps));
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);
}

/* 8. A set of 3M floats: exact sums of every worker's pushes, and init/snapshot of Adam's slots. */
static void test_large_set(rp_ps_group *g)
{
    const int64_t n = 3 * 1000 * 1000 + 7;
    const int K = 3;
    rp_ps_config cfg = config(RP_OPTIM_SGD, 0.0f, -1, 30.0);
    rp_ps *ps = NULL;
    OK(rp_ps_mpi_create(&ps, g, n, &cfg));
    if (!ps) return;
    float *grad = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    if (rank_ == 0) {
        for (int64_t i = 0; i < n; i++)
            got[i] = (float)(i % 1000) / 4.0f;
        OK(rp_ps_init(ps, got, NULL, 0));
    }
    MPI_Barrier(workers_);
    for (int j = 0; j < K; j++) {
        for (int64_t i = 0; i < n; i++)
            grad[i] = grad_value(rank_, j, i);
        OK(rp_ps_push_pull(ps, grad, 1.0f, got));
    }
    MPI_Barrier(workers_);
    int64_t step = -1;
    OK(rp_ps_snapshot(ps, got, NULL, &step));
    CHECK(step == (int64_t)W * K, "large set: step %lld after %d pushes", (long long)step, W * K);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double want = (double)(i % 1000) / 4.0;
        for (int w = 0; w < W; w++)
            for (int j = 0; j < K; j++)
                want -= grad_value(w, j, i);
        if ((double)got[i] != want && bad++ == 0) first = i;
    }
    CHECK(bad == 0,
          "large set: %lld of %lld elements differ from init - sum of pushes (first %lld)",
          (long long)bad, (long long)n, (long long)first);
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);

    rp_ps_config adam = config(RP_OPTIM_ADAM, 0.0f, -1, 30.0);
    OK(rp_ps_mpi_create(&ps, g, n, &adam));
    if (ps && rank_ == 0) {
        float *slots = malloc(2 * (size_t)n * sizeof(float)),
              *got_slots = malloc(2 * (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            grad[i] = (float)(i % 77) - 38.0f;
        for (int64_t i = 0; i < 2 * n; i++)
            slots[i] = (float)(i % 101) / 128.0f;
        OK(rp_ps_init(ps, grad, slots, 5));
        step = -1;
        OK(rp_ps_snapshot(ps, got, got_slots, &step));
        CHECK(step == 5, "large set: snapshot step %lld after init at 5", (long long)step);
        CHECK(memcmp(got, grad, (size_t)n * sizeof(float)) == 0,
              "large set: snapshot values differ from init");
        CHECK(memcmp(got_slots, slots, 2 * (size_t)n * sizeof(float)) == 0,
              "large set: snapshot slots differ from init");
        free(slots);
        free(got_slots);
    }
    MPI_Barrier(workers_);
    rp_ps_destroy(ps);
    free(grad);
    free(got);
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    S = argc > 1 ? atoi(argv[1]) : 1;
    rp_ps_group *g = NULL;
    rp_status st = rp_ps_mpi_group_create(&g, S, 30.0);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    if (st != RP_OK) {
        fprintf(stderr, "rank %d: FAIL: rp_ps_mpi_group_create: %s\n", rank_, rp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bool server = rp_ps_group_is_server(g);
    W = rp_ps_group_workers(g);
    MPI_Comm_split(MPI_COMM_WORLD, server, rank_, &workers_);
    if (server) {
        CHECK(rp_ps_group_index(g) == rank_ - W, "server index %d on rank %d", rp_ps_group_index(g),
              rank_);
        OK(rp_ps_mpi_serve(g));
        rp_ps_group_destroy(g);
        /* 7. A second group, ended by a worker's failure report. */
        OK(rp_ps_mpi_group_create(&g, S, 30.0));
        st = rp_ps_mpi_serve(g);
        CHECK(st == RP_ERR_COMM, "serve after a worker's failure report returned %s",
              rp_status_name(st));
        CHECK(strstr(rp_last_error(), "worker 0 (rank 0 on host") &&
                  strstr(rp_last_error(), "out of memory here"),
              "serve's error does not name worker 0 and its reason: %s", rp_last_error());
        rp_ps_group_destroy(g);
    } else {
        CHECK(rp_ps_group_index(g) == rank_, "worker index %d on rank %d", rp_ps_group_index(g),
              rank_);
        test_no_lost_updates(g);
        test_rule(g, config(RP_OPTIM_SGD, 0.9f, -1, 30.0), 0, false);
        rp_ps_config nesterov = config(RP_OPTIM_SGD, 0.9f, -1, 30.0);
        nesterov.optim.nesterov = true;
        nesterov.optim.weight_decay = 1e-3f;
        test_rule(g, nesterov, 0, false);
        test_rule(g, config(RP_OPTIM_ADAM, 0.0f, -1, 30.0), 0, false);
        test_rule(g, config(RP_OPTIM_ADAM, 0.0f, -1, 30.0), 7, true);
        test_rule(g, config(RP_OPTIM_SGD, 0.9f, -1, 30.0), 3, true);
        test_staleness(g);
        test_staleness_timeout(g);
        test_claims(g);
        test_large_set(g);
        rp_ps_group_destroy(g);
        OK(rp_ps_mpi_group_create(&g, S, 30.0));
        MPI_Barrier(workers_);
        if (rank_ == 0) rp_ps_group_fail(g, RP_ERR_NOMEM, "out of memory here");
        rp_ps_group_destroy(g);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("%s: %d workers, %d servers, %d failures\n", total ? "FAIL" : "ok", W, S, total);
    MPI_Comm_free(&workers_);
    return total ? 1 : 0;
}
