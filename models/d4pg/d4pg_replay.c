/*
 * d4pg_replay.c - the replay role: one worker that holds the replay table,
 * the rate limiter and the latest policy, and answers the actors and the
 * learners (d4pg_wire.h).
 *
 * It waits in one blocking receive from any source. An insert the limiter
 * allows is stored and answered at once; one that would run too far ahead
 * of the learner is held, its actor waiting for the answer, until samples
 * make room. A learner's sample request that would run too far behind the
 * actors is held likewise until inserts arrive. So the limiter's two waits
 * are the peers' receives, each bounded by the communicator's timeout. A
 * policy request before the first publication is held until it comes.
 * When learner 0 says the run is over, every actor is told to stop at its
 * next message (or at once, if it is waiting), and the role returns when
 * all have been told.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_job_internal.h"
#include "models/d4pg/d4pg_wire.h"

#define RECENT 10 /* episodes in the recent return */

typedef struct held_insert {
    bool held;
    int64_t rows, returns, steps;
    float *data; /* [rows * row + returns] */
} held_insert;

typedef struct replay_role {
    const rp_d4pg_job *job;
    rp_comm *link;
    int self, obs, act, learners, actors;
    rp_replay *table;
    rp_rate_limiter limits;
    rp_rng rng;
    rp_replay_batch batch;
    float *wire;   /* a batch on the wire: [n * row + n] (rows, then weights) */
    float *policy; /* the latest published policy values */
    int64_t policy_n, version;
    held_insert *inserts; /* [actors] */
    float *scratch;       /* an insert being received */
    int64_t insert_cap;   /* floats one insert may carry */
    int64_t *sample_n;    /* [learners]: a held sample request's size, 0 if none */
    bool *param_wait;     /* [actors]: a policy request held until the first publication */
    bool *told;           /* [actors]: told to stop */
    double *heard;        /* [actors]: when each last sent something (rp_now_s) */
    double timeout;       /* the link's: an actor silent this long, and not held here, is lost */
    int told_n;
    bool stopping;
    int64_t env_steps, episodes;
    double recent[RECENT];
    int recent_n;
} replay_role;

static rp_status send_params(replay_role *s, int actor_worker, bool stop)
{
    int a = actor_worker - s->job->first_actor;
    if (stop) {
        if (!s->told[a]) s->told[a] = true, s->told_n++;
        return w_send(s->link, actor_worker, W_PARAMS, s->self, s->version, 0, 1, 0, 0, 0);
    }
    RP_CHECK(w_send(s->link, actor_worker, W_PARAMS, s->self, s->version, s->policy_n, 0, 0, 0, 0));
    return rp_comm_send(s->link, s->policy, s->policy_n, RP_F32, actor_worker, W_TAG);
}

static rp_status ack(replay_role *s, int actor_worker)
{
    int a = actor_worker - s->job->first_actor;
    if (s->stopping && !s->told[a]) s->told[a] = true, s->told_n++;
    return w_send(s->link, actor_worker, W_ACK, s->self, s->stopping ? 1 : 0, s->version, 0, 0, 0,
                  0);
}

/* An insert of no transitions (an actor's first N-1 steps) counts its env steps at once. */
static bool may_insert(const replay_role *s, int64_t rows)
{
    return rows == 0 || rp_rate_limiter_can_insert(&s->limits, rows);
}

/* Stores an insert's rows and counts its env steps and finished episodes. */
static rp_status store(replay_role *s, const float *data, int64_t rows, int64_t returns,
                       int64_t steps)
{
    int64_t row = w_row(s->obs, s->act);
    for (int64_t i = 0; i < rows; i++) {
        const float *p = data + i * row;
        rp_transition t = {p, p + s->obs, p[s->obs + s->act], p[s->obs + s->act + 1],
                           p + s->obs + s->act + 2};
        RP_CHECK(rp_replay_insert(s->table, &t, 1, 0.0f));
    }
    rp_rate_limiter_inserted(&s->limits, rows);
    for (int64_t k = 0; k < returns; k++)
        s->recent[(s->episodes + k) % RECENT] = data[rows * row + k];
    s->episodes += returns;
    s->recent_n = s->episodes < RECENT ? (int)s->episodes : RECENT;
    s->env_steps += steps;
    return RP_OK;
}

static double recent_return(const replay_role *s)
{
    if (s->recent_n == 0) return NAN;
    double sum = 0;
    for (int k = 0; k < s->recent_n; k++)
        sum += s->recent[k];
    return sum / s->recent_n;
}

static rp_status send_batch(replay_role *s, int learner, int64_t n)
{
    int obs = s->obs, act = s->act;
    RP_CHECK(rp_replay_sample(s->table, &s->rng, (int)n, &s->batch));
    rp_rate_limiter_sampled(&s->limits, n);
    float *w = s->wire;
    const rp_replay_batch *b = &s->batch;
    for (int64_t i = 0; i < n; i++) {
        memcpy(w, b->obs + i * obs, sizeof *w * (size_t)obs);
        memcpy(w + obs, b->act + i * act, sizeof *w * (size_t)act);
        w[obs + act] = b->reward[i];
        w[obs + act + 1] = b->discount[i];
        memcpy(w + obs + act + 2, b->next_obs + i * obs, sizeof *w * (size_t)obs);
        w += w_row(obs, act);
    }
    memcpy(w, b->weights, sizeof *w * (size_t)n);
    bool prio = s->job->cfg.prioritized;
    /*
     * The learner asked for this batch, so it waits for it: a learner that does not take it has
     * stopped. Half the link's timeout, so that the replay gives up first and its reason, naming
     * the learner, reaches the actors waiting on the replay (rp_comm_leave); with the whole
     * timeout they gave up at the same moment and blamed the replay, as for a stopped replay.
     */
    RP_CHECK(rp_comm_set_timeout(s->link, s->timeout / 2));
    rp_status status = w_send(s->link, learner, W_BATCH, s->self, n, s->env_steps, s->episodes,
                              rp_replay_size(s->table), w_bits(recent_return(s)), prio);
    if (status == RP_OK)
        status = rp_comm_send(s->link, s->wire, n * w_row(obs, act) + n, RP_F32, learner, W_TAG);
    if (status == RP_OK && prio) status = rp_comm_send(s->link, b->keys, n, RP_I64, learner, W_TAG);
    rp_comm_set_timeout(s->link, s->timeout);
    if (status != RP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", rp_last_error()); /* RP_ERROR overwrites it */
        return RP_ERROR(status,
                        "learner %d (worker %d) did not take the batch it asked the replay for "
                        "within %g s: the learner stopped or hangs, not the replay (%s)",
                        learner, learner, s->timeout / 2, why);
    }
    return RP_OK;
}

/* Answers whatever the limiter now allows: held inserts first, then held samples, until neither
 * moves. */
static rp_status drain(replay_role *s)
{
    for (bool moved = true; moved;) {
        moved = false;
        for (int a = 0; a < s->actors; a++) {
            held_insert *h = &s->inserts[a];
            if (!h->held || !may_insert(s, h->rows)) continue;
            RP_CHECK(store(s, h->data, h->rows, h->returns, h->steps));
            h->held = false;
            RP_CHECK(ack(s, s->job->first_actor + a));
            moved = true;
        }
        for (int l = 0; l < s->learners; l++) {
            if (!s->sample_n[l] || !rp_rate_limiter_can_sample(&s->limits, s->sample_n[l]))
                continue;
            int64_t n = s->sample_n[l];
            s->sample_n[l] = 0;
            RP_CHECK(send_batch(s, l, n));
            moved = true;
        }
    }
    return RP_OK;
}

static rp_status on_insert(replay_role *s, const int64_t *h)
{
    int src = (int)h[1], a = src - s->job->first_actor;
    int64_t rows = h[2], returns = h[3], steps = h[4], n = rows * w_row(s->obs, s->act) + returns;
    if (a < 0 || a >= s->actors || rows < 0 || returns < 0 || n > s->insert_cap)
        return RP_ERROR(RP_ERR_FORMAT,
                        "the replay got an insert of %lld rows and %lld returns from worker %d, "
                        "which is not an actor or sends more than an actor can (%lld floats)",
                        (long long)rows, (long long)returns, src, (long long)s->insert_cap);
    held_insert *hi = &s->inserts[a];
    RP_CHECK(rp_comm_recv(s->link, hi->data, n, RP_F32, src, W_TAG));
    if (s->stopping) return ack(s, src);
    if (may_insert(s, rows)) {
        RP_CHECK(store(s, hi->data, rows, returns, steps));
        return ack(s, src);
    }
    hi->held = true;
    hi->rows = rows;
    hi->returns = returns;
    hi->steps = steps;
    return RP_OK;
}

static rp_status on_message(replay_role *s, const int64_t *h)
{
    int src = (int)h[1];
    switch (h[0]) {
    case W_INSERT:
        return on_insert(s, h);
    case W_PARAMS_REQ: {
        int a = src - s->job->first_actor;
        if (a < 0 || a >= s->actors)
            return RP_ERROR(RP_ERR_FORMAT, "worker %d asked for the policy", src);
        if (s->stopping) return send_params(s, src, true);
        if (s->version == 0) {
            s->param_wait[a] = true; /* answered by the first publication */
            return RP_OK;
        }
        return send_params(s, src, false);
    }
    case W_SAMPLE:
        if (src < 0 || src >= s->learners || h[2] < 1 || h[2] > s->batch.n)
            return RP_ERROR(RP_ERR_FORMAT, "worker %d asked the replay for %lld samples", src,
                            (long long)h[2]);
        if (rp_rate_limiter_can_sample(&s->limits, h[2])) return send_batch(s, src, h[2]);
        s->sample_n[src] = h[2];
        return RP_OK;
    case W_PRIORITIES: {
        int64_t n = h[2];
        if (n < 1 || n > s->batch.n)
            return RP_ERROR(RP_ERR_FORMAT, "%lld priorities from worker %d", (long long)n, src);
        RP_CHECK(rp_comm_recv(s->link, s->batch.keys, n, RP_I64, src, W_TAG));
        RP_CHECK(rp_comm_recv(s->link, s->batch.weights, n, RP_F32, src, W_TAG));
        return rp_replay_update_priorities(s->table, s->batch.keys, s->batch.weights, (int)n);
    }
    case W_PUBLISH:
        if (h[2] != s->policy_n)
            return RP_ERROR(RP_ERR_SHAPE,
                            "worker %d published a policy of %lld values; the actors' has %lld",
                            src, (long long)h[2], (long long)s->policy_n);
        RP_CHECK(rp_comm_recv(s->link, s->policy, s->policy_n, RP_F32, src, W_TAG));
        s->version++;
        for (int a = 0; a < s->actors; a++)
            if (s->param_wait[a]) {
                s->param_wait[a] = false;
                RP_CHECK(send_params(s, s->job->first_actor + a, false));
            }
        return RP_OK;
    case W_STOP:
        s->stopping = true;
        for (int a = 0; a < s->actors; a++) {
            if (s->inserts[a].held) {
                s->inserts[a].held = false;
                RP_CHECK(ack(s, s->job->first_actor + a));
            }
            if (s->param_wait[a]) {
                s->param_wait[a] = false;
                RP_CHECK(send_params(s, s->job->first_actor + a, true));
            }
        }
        return RP_OK;
    default:
        return RP_ERROR(RP_ERR_FORMAT,
                        "the replay got a message of unknown kind %lld from worker %d",
                        (long long)h[0], src);
    }
}

static void role_free(replay_role *s)
{
    rp_replay_destroy(s->table);
    rp_replay_batch_free(&s->batch);
    free(s->wire);
    free(s->policy);
    if (s->inserts)
        for (int a = 0; a < s->actors; a++)
            free(s->inserts[a].data);
    free(s->inserts);
    free(s->sample_n);
    free(s->param_wait);
    free(s->told);
    free(s->heard);
}

static rp_status role_init(replay_role *s, rp_replica *rep, const rp_d4pg_job *job)
{
    const rp_d4pg_job_config *c = &job->cfg;
    s->job = job;
    s->link = rp_replica_link_comm(rep);
    s->self = rp_replica_worker(rep);
    s->obs = c->agent.obs_dim;
    s->act = c->agent.act_dim;
    s->learners = c->learners;
    s->actors = c->actors;
    s->env_steps = job->resume_env_steps;
    s->episodes = job->resume_episodes;
    s->rng = rp_rng_make(c->seed, 0x5e7a11ULL + (uint64_t)job->resume_learner_steps);
    rp_replay_config rc = rp_replay_config_default();
    rc.capacity = c->replay_capacity;
    rc.obs_dim = s->obs;
    rc.act_dim = s->act;
    rc.prioritized = c->prioritized;
    RP_CHECK(rp_replay_create(&s->table, &rc));
    double buffer =
        c->error_buffer > 0 ? c->error_buffer : (double)c->min_replay * 0.1 * c->samples_per_insert;
    RP_CHECK(rp_rate_limiter_init(&s->limits, c->min_replay, c->samples_per_insert, buffer));
    int per = c->agent.batch / c->learners;
    RP_CHECK(rp_replay_batch_alloc(&s->batch, per, s->obs, s->act));
    int64_t row = w_row(s->obs, s->act);
    /* An actor's insert: each env's last step flushes up to n_step + 1 transitions, and one return.
     */
    s->insert_cap = (int64_t)c->envs_per_actor * ((c->agent.n_step + 1) * row + 1);
    rp_d4pg_policy *probe = NULL;
    RP_CHECK(rp_d4pg_policy_create(&probe, &c->agent));
    s->policy_n = rp_params_numel(rp_d4pg_policy_params(probe));
    rp_d4pg_policy_destroy(probe);
    s->wire = malloc(sizeof *s->wire * (size_t)(per * row + per));
    s->policy = malloc(sizeof *s->policy * (size_t)s->policy_n);
    s->inserts = calloc((size_t)s->actors, sizeof *s->inserts);
    s->sample_n = calloc((size_t)s->learners, sizeof *s->sample_n);
    s->param_wait = calloc((size_t)s->actors, sizeof *s->param_wait);
    s->told = calloc((size_t)s->actors, sizeof *s->told);
    s->heard = calloc((size_t)s->actors, sizeof *s->heard);
    s->timeout = rp_comm_timeout(s->link);
    if (!s->wire || !s->policy || !s->inserts || !s->sample_n || !s->param_wait || !s->told ||
        !s->heard)
        return RP_ERROR(RP_ERR_NOMEM, "the replay's buffers");
    for (int a = 0; a < s->actors; a++) {
        if (!(s->inserts[a].data = malloc(sizeof(float) * (size_t)s->insert_cap)))
            return RP_ERROR(RP_ERR_NOMEM, "the replay's insert buffers");
        s->heard[a] = rp_now_s();
    }
    return RP_OK;
}

/*
 * An actor that has sent nothing for the timeout while nothing here holds it (no insert or policy
 * request waiting for an answer) has stopped or hangs: the others would go on without it and
 * the run would never notice, so the job ends naming it. (A killed MPI rank ends the job through
 * mpirun before this.)
 */
static rp_status check_actors(const replay_role *s)
{
    double now = rp_now_s();
    for (int a = 0; a < s->actors; a++) {
        if (s->told[a] || s->inserts[a].held || s->param_wait[a] || now - s->heard[a] <= s->timeout)
            continue;
        return RP_ERROR(RP_ERR_TIMEOUT,
                        "the replay has heard nothing from actor %d (worker %d) for %.0f s, more "
                        "than the timeout of %g s: that actor stopped or hangs",
                        a, s->job->first_actor + a, now - s->heard[a], s->timeout);
    }
    return RP_OK;
}

/*
 * Nothing came for half the timeout while actors' inserts are held until the learners sample:
 * the learners that are not waiting for a batch here have stopped or hang. Named, so that the
 * actors waiting on the replay are told it (rp_comm_leave) before their own timeout blames it.
 */
static rp_status learners_silent(const replay_role *s)
{
    char why[512], which[128] = "";
    snprintf(why, sizeof why, "%s", rp_last_error()); /* RP_ERROR overwrites it */
    size_t n = 0;
    int held = 0, silent = 0;
    for (int a = 0; a < s->actors; a++)
        held += s->inserts[a].held;
    for (int l = 0; l < s->learners && n < sizeof which; l++)
        if (!s->sample_n[l]) {
            n += (size_t)snprintf(which + n, sizeof which - n, "%s%d", silent ? ", " : "", l);
            silent++;
        }
    return RP_ERROR(RP_ERR_TIMEOUT,
                    "the replay holds %d actor%s inserts until the learners sample, and learner%s "
                    "%s asked for no batch in %g s: %s stopped or hang%s, not the replay (%s)",
                    held, held > 1 ? "s'" : "'s", silent > 1 ? "s" : "", which, s->timeout / 2,
                    silent > 1 ? "they" : "it", silent > 1 ? "" : "s", why);
}

rp_status rp_d4pg_replay_main(rp_replica *rep, void *arg)
{
    replay_role s;
    memset(&s, 0, sizeof s);
    rp_status status = role_init(&s, rep, arg);
    while (status == RP_OK && !(s.stopping && s.told_n == s.actors)) {
        int64_t h[W_HDR];
        /* While inserts are held the actors wait on the learners through the replay: half the
           timeout, so that a stopped learner is named here before the actors blame the replay. */
        bool held = false;
        for (int a = 0; a < s.actors; a++)
            held = held || s.inserts[a].held;
        if (held) status = rp_comm_set_timeout(s.link, s.timeout / 2);
        if (status == RP_OK) status = rp_comm_recv(s.link, h, W_HDR, RP_I64, RP_ANY_SOURCE, W_TAG);
        if (held) rp_comm_set_timeout(s.link, s.timeout);
        if (status == RP_ERR_TIMEOUT) {
            rp_status lost = check_actors(&s); /* name the actor that went silent, if one did */
            if (lost == RP_OK && held) lost = learners_silent(&s);
            if (lost != RP_OK) status = lost;
        }
        int a = status == RP_OK ? (int)h[1] - s.job->first_actor : -1;
        if (a >= 0 && a < s.actors) s.heard[a] = rp_now_s();
        if (status == RP_OK) status = on_message(&s, h);
        if (status == RP_OK) status = check_actors(&s);
        if (status == RP_OK && !s.stopping) status = drain(&s);
    }
    role_free(&s);
    return status;
}
