/*
 * test_blame_mpi.c - issue 26's first two items under mpirun, through the
 * runtime (replicator/runtime.h): `test_blame_mpi [T]` runs T workers per
 * rank (T > 1: the hierarchical backend). CTest runs it on 2 and 4 ranks
 * and on 2 ranks x 2 threads, with a 10 s timeout in each replicator.
 *
 *  1. A forgotten send: replica 0 returns from its step without the send a
 *     peer waits for (a peer in another process, and on 2 x 2 also one in
 *     its own). Every rank's run fails within 2 s (a fifth of the timeout)
 *     with RP_ERR_MISMATCH, and its message names replica 0 as the one that
 *     skipped the send - on the waiting replica's rank and on the ranks of
 *     the replicas that only waited for it in the runtime's report
 *     all-gather - never "did not arrive" nor a timeout. (A skip between
 *     two threads of rank 0 reaches the other ranks as rank 0's failure,
 *     RP_ERR_COMM, its message naming replica 0 all the same.)
 *  2. Destroy with a started role on another rank: the actors (every
 *     worker but the learners on rank 0) send to learner worker 0 in a loop
 *     and are never stopped; every rank calls rp_replicator_destroy. The
 *     actors' sends fail at once naming worker 0 and why ("worker 0's
 *     replicator was destroyed"), and every rank's destroy ends within 2 s
 *     (its bound is the timeout).
 *  3. After that (the notices and the actors' messages to the destroyed
 *     learner still about), new replicators are created and run collectives
 *     and point-to-point messages, several times: nothing stale reaches
 *     them (a message that reaches a process after it freed that MPI
 *     communicator used to be taken by the next one given its context id,
 *     and crashed it).
 *
 * Each rank prints its failures; rank 0 prints ok or FAIL.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replicator/replicator.h"

static int failures;
static int rank_, nranks_, per_ = 1;

#include "mpi_check.h"

#define TIMEOUT_S 10.0
#define PROMPT_S  2.0 /* "at once": a fifth of the timeout */

static rp_config base(void)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_MPI;
    cfg.replicas = per_;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = TIMEOUT_S;
    return cfg;
}

static rp_replicator *make(const rp_config *cfg)
{
    rp_replicator *r = NULL;
    if (rp_replicator_create(&r, cfg) != RP_OK) {
        fprintf(stderr, "rank %d: create: %s\n", rank_, rp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return r;
}

/* ---- 1. a forgotten send ------------------------------------------------------------------- */

/* Replica 0 returns without the send replica *victim waits for; the others just return. */
static rp_status skip_send_fn(rp_replica *rep, void *arg)
{
    int victim = *(const int *)arg;
    float x = 0;
    if (rp_replica_id(rep) == victim)
        return rp_comm_recv(rp_replica_comm(rep), &x, 1, RP_F32, 0, 7);
    return RP_OK;
}

static void skipped_send(int victim)
{
    rp_config cfg = base();
    rp_replicator *r = make(&cfg);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = rp_now_s();
    rp_status st = rp_replicator_run(r, skip_send_fn, &victim);
    double took = rp_now_s() - t0;
    const char *e = rp_last_error();
    /* Across processes MPI names the rank and host; in one, the threads backend does not. */
    bool local = victim / per_ == 0;
    char want[128];
    snprintf(want, sizeof want, "which replica %d %s", victim, local ? "is" : "(rank ");
    /* A skip inside one process is that process's failure to the others (RP_ERR_COMM, "rank 0
     * ended its step (MISMATCH: replica 0 went on to ...)"); one across processes is told to
     * every process as the mismatch it is. */
    bool elsewhere = local && rank_ != 0;
    CHECK(st == RP_ERR_MISMATCH || (elsewhere && st == RP_ERR_COMM), "victim %d: status %s: %s",
          victim, rp_status_name(st), e);
    CHECK(took < PROMPT_S, "victim %d: the skipped send took %.2f s to report (timeout %g s): %s",
          victim, took, TIMEOUT_S, e);
    CHECK(strstr(e, local ? "replica 0 went on to " : "replica 0 (rank 0, ") &&
              strstr(e, "without sending the message of recv (tag 7, count 1, f32)") &&
              strstr(e, want),
          "victim %d: the message does not name replica 0 as the one that skipped the send: %s",
          victim, e);
    CHECK(!strstr(e, "did not arrive") && !strstr(e, "timed out"),
          "victim %d: a replica that waited is blamed: %s", victim, e);
    rp_replicator_destroy(r);
}

/* ---- 2. destroy with a started role on another rank ---------------------------------------- */

typedef struct actor_job {
    long sent;
    rp_status status;
    char error[1024];
} actor_job;

static actor_job actors_[8]; /* by local index */

/* An actor that sends to the learner (worker 0) forever: the program forgot to stop it. */
static rp_status sending_actor_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    actor_job *j = &actors_[rp_replica_local_index(rep)];
    float x = 1;
    rp_status st;
    while ((st = rp_comm_send(rp_replica_link_comm(rep), &x, 1, RP_F32, 0, 3)) == RP_OK)
        j->sent++;
    j->status = st;
    snprintf(j->error, sizeof j->error, "%s", rp_last_error());
    return st;
}

static void destroy_with_sending_actor(void)
{
    int learners = per_, actors = nranks_ * per_ - learners; /* rank 0 holds the learners */
    rp_config cfg = base();
    cfg.nroles = 2;
    cfg.roles[0] = rp_role_make("learner", learners, 1);
    cfg.roles[1] = rp_role_make("actor", actors, 1);
    rp_replicator *r = make(&cfg);
    memset(actors_, 0, sizeof actors_);
    CHECK(rp_replicator_start(r, "actor", sending_actor_fn, NULL) == RP_OK, "start: %s",
          rp_last_error());
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double t0 = rp_now_s();
    rp_replicator_destroy(r);
    double took = rp_now_s() - t0;
    CHECK(took < PROMPT_S, "destroy took %.2f s (timeout %g s)", took, TIMEOUT_S);
    if (rank_ == 0) return;
    for (int i = 0; i < per_; i++) {
        actor_job *j = &actors_[i];
        /* "worker 0 (rank 0, host) has left (COMM: worker 0's replicator was destroyed): send
         * (tag 3, ...) from worker 1 (rank 1, host) to it would never be received", or, for a
         * send MPI had not yet completed, "worker 0 (...) ended its step (COMM: ...) without
         * receiving the message of send #127 (tag 3, ...)"; a second actor in the process may
         * find the link broken by the first one's error, which it quotes. */
        CHECK(j->status == RP_ERR_COMM, "actor %d: status %s: %s", i, rp_status_name(j->status),
              j->error);
        CHECK(strstr(j->error, "worker 0 (rank 0, ") &&
                  strstr(j->error, " (COMM: worker 0's replicator was destroyed)") &&
                  strstr(j->error, "(tag 3, count 1, f32)"),
              "actor %d's error does not name the learner that left and why: %s", i, j->error);
    }
}

/* ---- 3. new communicators after it ----------------------------------------------------------- */

/* A collective on every communicator the runtime made, and a ring of messages on the link. */
static rp_status after_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    float x = 1, y = 0;
    RP_CHECK(rp_all_reduce(rep, &x, &y, 1, RP_F32, RP_SUM));
    if (y != (float)rp_replica_count(rep))
        return RP_ERROR(RP_ERR_INVALID, "all-reduce of ones: %g, expected %d", y,
                        rp_replica_count(rep));
    rp_comm *link = rp_replica_link_comm(rep);
    int n = rp_comm_size(link), me = rp_comm_rank(link);
    float out = (float)me, in = -1;
    rp_comm_request *req = NULL;
    RP_CHECK(rp_comm_irecv(link, &in, 1, RP_F32, (me + n - 1) % n, 5, &req));
    RP_CHECK(rp_comm_send(link, &out, 1, RP_F32, (me + 1) % n, 5));
    RP_CHECK(rp_comm_wait(req));
    if (in != (float)((me + n - 1) % n))
        return RP_ERROR(RP_ERR_INVALID, "worker %d got %g from worker %d", me, in,
                        (me + n - 1) % n);
    return RP_OK;
}

/*
 * Replicators destroyed one rank after another (rank r 0.1 s after rank r - 1), so that what a
 * later rank sends as it destroys (its notices, its closes) reaches ranks that have destroyed
 * theirs already, each followed by the next replicator on every rank (OpenMPI held such a
 * message for the next communicator given the same context id, whose own messages then came
 * out of order).
 */
static void fresh_replicators(void)
{
    for (int k = 0; k < 4; k++) {
        rp_config cfg = base();
        rp_replicator *r = make(&cfg);
        /* Each more runs than the last, so its messages pass the sequence numbers of whatever
         * came late for the last one's communicators (one of which its own may reuse). */
        rp_status st = RP_OK;
        for (int run = 0; run <= k && st == RP_OK; run++)
            st = rp_replicator_run(r, after_fn, NULL);
        CHECK(st == RP_OK, "replicator %d after the destroy: %s", k, rp_last_error());
        struct timespec ts = {0, (k % 2 ? nranks_ - 1 - rank_ : rank_) * 100 * 1000 * 1000L};
        nanosleep(&ts, NULL);
        rp_replicator_destroy(r);
    }
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_OFF); /* the failures are expected; the checks print what differs */
    per_ = argc > 1 ? atoi(argv[1]) : 1;
    if (per_ < 1 || per_ > 8) {
        fprintf(stderr, "usage: test_blame_mpi [workers per rank, 1..8]\n");
        return 2;
    }
    rp_comm *world = NULL; /* initialises MPI */
    if (rp_comm_mpi_create(&world, TIMEOUT_S) != RP_OK) {
        fprintf(stderr, "MPI: %s\n", rp_last_error());
        return 1;
    }
    rp_comm_destroy(world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
    int size = nranks_ * per_;
    skipped_send(size - 1);
    if (per_ > 1) skipped_send(1); /* in replica 0's own process */
    destroy_with_sending_actor();
    fresh_replicators();
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("%s: %d ranks x %d workers, %d failures\n", total ? "FAIL" : "ok", nranks_, per_,
               total);
    return total ? 1 : 0;
}
