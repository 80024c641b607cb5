/*
 * roles.c - a job of roles: one learner and two actors, as in distributed
 * reinforcement learning, talking with point-to-point messages:
 *
 *   learner (worker 0)                       actor a (workers 1, 2)
 *     each round: parameters {go, w, b} -->  takes them, acts: observes 32 points
 *                                             (x, y = 3x - 0.5 + noise) and scores w, b
 *                 <-- experience {score, x[32], y[32]}
 *     an SGD step on each actor's points
 *     at the end: {stop, w, b} ------------>  returns
 *
 * The learner is a role of steps: rp_replicator_run() runs its step function
 * (only on the learner: the actors' role is started). The actors are a role
 * of one long-lived function each (rp_replicator_start), waited for with
 * rp_replicator_wait() once the learner has told them to stop - a started
 * role must be told, or it would wait for the next round. The messages go
 * over rp_replica_link_comm(), every worker of the job (rank = worker
 * index), which stays open between the learner's runs.
 *
 *     ./roles            (threads; under mpirun -np 3 the same program runs a worker per rank)
 *
 * Prints the actors' score every 50 rounds and the fitted line; exits 1 if it
 * is not y = 3x - 0.5 within 0.05.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <replicator/replicator.h>

enum { ACTORS = 2, POINTS = 32, ROUNDS = 300 };
enum { TAG_PARAMS = 1, TAG_EXPERIENCE = 2 };
enum { GO = 0, STOP = 1 };
static const float true_w = 3.0f, true_b = -0.5f, lr = 0.1f;

struct job {
    int learner;          /* the learner's worker index (the link's rank) */
    int actors[ACTORS];   /* the actors' */
    float w, b;           /* the learner's parameters */
    double score[ACTORS]; /* the last round's: each actor's mean squared error under w, b */
    int64_t round;        /* the learner's next round */
};

/* An actor: each round, the parameters in; its points and their score under them out. */
static rp_status actor(rp_replica *rep, void *arg)
{
    const struct job *job = arg;
    rp_comm *link = rp_replica_link_comm(rep);
    int id = rp_replica_id(rep); /* its index in the "actor" role */
    for (uint64_t round = 0;; round++) {
        float params[3];
        RP_CHECK(rp_comm_recv(link, params, 3, RP_F32, job->learner, TAG_PARAMS));
        if (params[0] == STOP) return RP_OK;
        /* Act: observe the environment (its own stream of points) and score the parameters. */
        float msg[1 + 2 * POINTS], *x = msg + 1, *y = msg + 1 + POINTS;
        rp_rng_fill_uniform(100 + (uint64_t)id, round * POINTS, x, POINTS, -1.0f, 1.0f);
        rp_rng_fill_normal(200 + (uint64_t)id, round * POINTS, y, POINTS, 0.0f, 0.05f);
        double se = 0;
        for (int i = 0; i < POINTS; i++) {
            y[i] += true_w * x[i] + true_b;
            double e = params[1] * x[i] + params[2] - y[i];
            se += e * e;
        }
        msg[0] = (float)(se / POINTS);
        RP_CHECK(rp_comm_send(link, msg, 1 + 2 * POINTS, RP_F32, job->learner, TAG_EXPERIENCE));
    }
}

/* The learner's step: one round with every actor, then an SGD step on each one's points. */
static rp_status learn(rp_replica *rep, void *arg)
{
    struct job *job = arg;
    rp_comm *link = rp_replica_link_comm(rep);
    float params[3] = {GO, job->w, job->b};
    for (int a = 0; a < ACTORS; a++)
        RP_CHECK(rp_comm_send(link, params, 3, RP_F32, job->actors[a], TAG_PARAMS));
    for (int a = 0; a < ACTORS; a++) {
        float msg[1 + 2 * POINTS];
        RP_CHECK(rp_comm_recv(link, msg, 1 + 2 * POINTS, RP_F32, job->actors[a], TAG_EXPERIENCE));
        job->score[a] = msg[0];
        const float *x = msg + 1, *y = msg + 1 + POINTS;
        double gw = 0, gb = 0; /* the gradient of the mean squared error */
        for (int i = 0; i < POINTS; i++) {
            double e = job->w * x[i] + job->b - y[i];
            gw += 2 * e * x[i] / POINTS;
            gb += 2 * e / POINTS;
        }
        job->w -= lr * (float)gw;
        job->b -= lr * (float)gb;
    }
    job->round++;
    return RP_OK;
}

/* The learner's last message: every actor returns. */
static rp_status stop_actors(rp_replica *rep, void *arg)
{
    struct job *job = arg;
    float params[3] = {STOP, job->w, job->b};
    for (int a = 0; a < ACTORS; a++)
        RP_CHECK(
            rp_comm_send(rp_replica_link_comm(rep), params, 3, RP_F32, job->actors[a], TAG_PARAMS));
    return RP_OK;
}

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_replicator *r = NULL;
    struct job job = {0};
    bool started = false;
    rp_config cfg = rp_config_default();
    cfg.threads_per_replica = 1;
    RP_TRY(rp_config_from_args(&cfg, &argc, argv));
    cfg.nroles = 2;
    cfg.roles[0] = rp_role_make("learner", 1, 1);
    cfg.roles[1] = rp_role_make("actor", ACTORS, 1);
    RP_TRY(rp_replicator_create(&r, &cfg));
    /* Where the roles were placed: their first worker (the link's rank) and the members after. */
    job.learner = rp_replicator_role(r, 0)->first;
    for (int a = 0; a < ACTORS; a++)
        job.actors[a] = rp_replicator_role(r, 1)->first + a;
    RP_TRY(rp_replicator_start(r, "actor", actor, &job));
    started = true;
    /* A process holding no learner (an actor's rank under mpirun) only runs its actors. */
    bool learner_here = !strcmp(rp_replica_role(rp_replicator_replica(r, 0)), "learner");
    for (int64_t k = 0; learner_here && k < ROUNDS; k++) {
        RP_TRY(rp_replicator_run(r, learn, &job));
        if ((k + 1) % 50 == 0)
            printf("round %lld  actors' mean squared error %.5f %.5f\n", (long long)(k + 1),
                   job.score[0], job.score[1]);
    }
    if (learner_here) RP_TRY(rp_replicator_run(r, stop_actors, &job));
    started = false;
    RP_TRY(rp_replicator_wait(r, "actor"));
    if (learner_here) {
        if (fabsf(job.w - true_w) < 0.05f && fabsf(job.b - true_b) < 0.05f)
            printf("learner and %d actors: after %lld rounds y = %.3f x %+.3f (true: 3x - 0.5)\n",
                   ACTORS, (long long)job.round, job.w, job.b);
        else
            status = RP_ERROR(RP_ERR_NUMERIC, "the learner fitted y = %g x %+g, not 3x - 0.5",
                              job.w, job.b);
    }
cleanup:
    if (started) {
        /* On the way out of an error the actors wait for a round that will not come: stop them. */
        if (rp_replicator_run(r, stop_actors, &job) == RP_OK) rp_replicator_wait(r, "actor");
    }
    rp_replicator_destroy(r);
    if (status != RP_OK) fprintf(stderr, "roles: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
