/*
 * d4pg_actor.c - the actor role: envs_per_actor environments stepped in a
 * batch (one policy forward for all of them, Gaussian exploration noise),
 * N-step transitions assembled per environment and sent to the replay
 * with every step, the policy refreshed from the replay every
 * actor_update_every env steps. It runs until the replay says stop.
 *
 * Each actor draws its noise and its episodes' initial states from its own
 * streams (the job's seed, the actor's index, and where the run resumed),
 * so actors explore differently and a run is reproducible in what each
 * actor does (the interleaving of actors and learner is not).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_job_internal.h"
#include "models/d4pg/d4pg_wire.h"

typedef struct actor_role {
    const rp_d4pg_job *job;
    rp_comm *link;
    int self, replay, index, n, obs, act;
    rp_rl_env **envs;
    rp_nstep **adders;
    rp_d4pg_policy *policy;
    float *o, *a, *next, *wire;
    float *values; /* the policy as it arrives, before it goes into the network's storage */
    double *ret;
    int64_t *episode; /* per env: episodes begun */
    int64_t version;
} actor_role;

uint64_t rp_d4pg_episode_seed(uint64_t seed, uint64_t slot, uint64_t episode)
{
    rp_rng g = rp_rng_make(seed ^ 0xd4e9a11ce5eedULL, slot * 0x100000001b3ULL + episode);
    return ((uint64_t)rp_rng_u32(&g) << 32) | rp_rng_u32(&g);
}

/* Asks the replay for the policy; *stop when the run is over. */
static rp_status fetch(actor_role *s, bool *stop)
{
    RP_CHECK(w_send(s->link, s->replay, W_PARAMS_REQ, s->self, s->version, 0, 0, 0, 0, 0));
    int64_t h[W_HDR];
    RP_CHECK(rp_comm_recv(s->link, h, W_HDR, RP_I64, s->replay, W_TAG));
    if (h[0] != W_PARAMS)
        return RP_ERROR(RP_ERR_FORMAT, "actor %d expected the policy, got kind %lld", s->index,
                        (long long)h[0]);
    *stop = h[4] != 0;
    if (*stop) return RP_OK;
    rp_params *p = rp_d4pg_policy_params(s->policy);
    if (h[3] != rp_params_numel(p))
        return RP_ERROR(RP_ERR_SHAPE, "actor %d got a policy of %lld values; its network has %lld",
                        s->index, (long long)h[3], (long long)rp_params_numel(p));
    RP_CHECK(rp_comm_recv(s->link, s->values, h[3], RP_F32, s->replay, W_TAG));
    RP_CHECK(rp_params_write_values(p, s->values));
    s->version = h[2];
    return RP_OK;
}

/* Starts env i's next episode. */
static rp_status begin(actor_role *s, int i)
{
    const rp_d4pg_job *j = s->job;
    /* Slot: this actor's env i, in the generation of the run (a resumed run draws new episodes). */
    uint64_t slot = ((uint64_t)j->resume_env_steps << 20) ^ ((uint64_t)s->index << 8) ^ (uint64_t)i;
    RP_CHECK(rp_env_reset(s->envs[i],
                          rp_d4pg_episode_seed(j->cfg.seed, slot, (uint64_t)s->episode[i]++),
                          s->o + (int64_t)i * s->obs));
    s->ret[i] = 0;
    return rp_nstep_start(s->adders[i], s->o + (int64_t)i * s->obs);
}

/* One batched step of every env; the transitions and finished returns go into the wire buffer. */
static rp_status step(actor_role *s, rp_tape *t, rp_rng *rng, int64_t *rows, int64_t *returns)
{
    const rp_d4pg_job_config *c = &s->job->cfg;
    rp_tape_reset(t);
    RP_CHECK(rp_d4pg_policy_act(s->policy, t, s->o, s->n, c->agent.sigma, rng, s->a));
    int64_t row = w_row(s->obs, s->act), nr = 0, nret = 0;
    float rets[64];
    rp_transition out[16];
    for (int i = 0; i < s->n; i++) {
        float *next = s->next + (int64_t)i * s->obs;
        rp_env_step_result res;
        RP_CHECK(rp_env_step(s->envs[i], s->a + (int64_t)i * s->act, s->act, next, &res));
        s->ret[i] += res.reward;
        int got = 0;
        RP_CHECK(rp_nstep_add(s->adders[i], s->a + (int64_t)i * s->act, res.reward, res.discount,
                              next, res.last, out, (int)(sizeof out / sizeof out[0]), &got));
        for (int k = 0; k < got; k++, nr++) {
            float *w = s->wire + nr * row;
            memcpy(w, out[k].obs, sizeof *w * (size_t)s->obs);
            memcpy(w + s->obs, out[k].act, sizeof *w * (size_t)s->act);
            w[s->obs + s->act] = out[k].reward;
            w[s->obs + s->act + 1] = out[k].discount;
            memcpy(w + s->obs + s->act + 2, out[k].next_obs, sizeof *w * (size_t)s->obs);
        }
        if (res.last) {
            rets[nret++] = (float)s->ret[i];
            RP_CHECK(begin(s, i));
        } else {
            memcpy(s->o + (int64_t)i * s->obs, next, sizeof *next * (size_t)s->obs);
        }
    }
    memcpy(s->wire + nr * row, rets, sizeof *rets * (size_t)nret);
    *rows = nr;
    *returns = nret;
    return RP_OK;
}

static void role_free(actor_role *s)
{
    for (int i = 0; s->envs && i < s->n; i++)
        rp_env_destroy(s->envs[i]);
    for (int i = 0; s->adders && i < s->n; i++)
        rp_nstep_destroy(s->adders[i]);
    free(s->envs);
    free(s->adders);
    rp_d4pg_policy_destroy(s->policy);
    free(s->o);
    free(s->a);
    free(s->next);
    free(s->wire);
    free(s->values);
    free(s->ret);
    free(s->episode);
}

static rp_status role_init(actor_role *s, rp_replica *rep, const rp_d4pg_job *job)
{
    const rp_d4pg_job_config *c = &job->cfg;
    s->job = job;
    s->link = rp_replica_link_comm(rep);
    s->self = rp_replica_worker(rep);
    s->replay = job->replay_worker;
    s->index = rp_replica_id(rep);
    s->n = c->envs_per_actor;
    s->obs = c->agent.obs_dim;
    s->act = c->agent.act_dim;
    if (s->n > 64) return RP_ERROR(RP_ERR_INVALID, "envs_per_actor %d: at most 64", s->n);
    s->envs = calloc((size_t)s->n, sizeof *s->envs);
    s->adders = calloc((size_t)s->n, sizeof *s->adders);
    s->o = malloc(sizeof *s->o * (size_t)(s->n * s->obs));
    s->next = malloc(sizeof *s->next * (size_t)(s->n * s->obs));
    s->a = malloc(sizeof *s->a * (size_t)(s->n * s->act));
    s->wire = malloc(sizeof *s->wire *
                     (size_t)(s->n * ((c->agent.n_step + 1) * w_row(s->obs, s->act) + 1)));
    s->ret = calloc((size_t)s->n, sizeof *s->ret);
    s->episode = calloc((size_t)s->n, sizeof *s->episode);
    if (!s->envs || !s->adders || !s->o || !s->next || !s->a || !s->wire || !s->ret || !s->episode)
        return RP_ERROR(RP_ERR_NOMEM, "actor %d's buffers", s->index);
    rp_env_options eo = rp_env_options_default();
    eo.action_repeat = c->action_repeat;
    for (int i = 0; i < s->n; i++) {
        RP_CHECK(rp_env_create(&s->envs[i], c->task, &eo));
        RP_CHECK(
            rp_nstep_create(&s->adders[i], c->agent.n_step, c->agent.discount, s->obs, s->act));
    }
    RP_CHECK(rp_d4pg_policy_create(&s->policy, &c->agent));
    int64_t values = rp_params_numel(rp_d4pg_policy_params(s->policy));
    s->values = malloc(sizeof *s->values * (size_t)values);
    if (!s->values)
        return RP_ERROR(RP_ERR_NOMEM, "actor %d's policy buffer (%lld floats)", s->index,
                        (long long)values);
    for (int i = 0; i < s->n; i++)
        RP_CHECK(begin(s, i));
    return RP_OK;
}

rp_status rp_d4pg_actor_main(rp_replica *rep, void *arg)
{
    const rp_d4pg_job *job = arg;
    const rp_d4pg_job_config *c = &job->cfg;
    rp_kernels_set_threads(1); /* a small forward: the cores belong to the learner */
    actor_role s;
    memset(&s, 0, sizeof s);
    rp_rng rng = rp_rng_make(c->seed, 0xac7000ULL + ((uint64_t)job->resume_env_steps << 16) +
                                          (uint64_t)rp_replica_id(rep));
    rp_tape *t = rp_replica_tape(rep);
    bool stop = false;
    /* Actors act in f32 whatever the run's precision (the learners train in it): a forward of a
       few observations is several times slower in bf16 (`bench_d4pg --actor`: 0.2x at one
       observation, parity only at 64), and exploration needs no more speed from the policy than
       f32 gives. */
    rp_status status = rp_tape_set_precision(t, rp_precision_policy_make(RP_F32));
    if (status == RP_OK) status = role_init(&s, rep, job);
    if (status == RP_OK) status = fetch(&s, &stop);
    int64_t since_fetch = 0;
    while (status == RP_OK && !stop) {
        int64_t rows = 0, returns = 0, h[W_HDR];
        rp_trace_begin(RP_PHASE_COMPUTE); /* the actor's work on its track (replicator/trace.h) */
        status = step(&s, t, &rng, &rows, &returns);
        rp_trace_end("act");
        if (status != RP_OK) break;
        int64_t n = rows * w_row(s.obs, s.act) + returns;
        status = w_send(s.link, s.replay, W_INSERT, s.self, rows, returns, s.n, 0, 0, 0);
        if (status == RP_OK) status = rp_comm_send(s.link, s.wire, n, RP_F32, s.replay, W_TAG);
        if (status == RP_OK) status = rp_comm_recv(s.link, h, W_HDR, RP_I64, s.replay, W_TAG);
        if (status != RP_OK) break;
        if (h[0] != W_ACK) {
            status =
                RP_ERROR(RP_ERR_FORMAT, "actor %d expected an answer to its insert, got kind %lld",
                         s.index, (long long)h[0]);
            break;
        }
        stop = h[2] != 0;
        since_fetch += s.n;
        if (!stop && since_fetch >= c->actor_update_every && h[3] > s.version) {
            since_fetch = 0;
            status = fetch(&s, &stop);
        }
    }
    role_free(&s);
    return status;
}
