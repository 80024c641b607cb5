/*
 * d4pg_job.c - the D4PG job's configuration and the trainer's callbacks:
 * the learner's build, step, evaluation and checkpoint, and the start and
 * stop of the actor and replay roles (d4pg_actor.c, d4pg_replay.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_job_internal.h"
#include "models/d4pg/d4pg_wire.h"

rp_d4pg_job_config rp_d4pg_job_config_default(void)
{
    rp_d4pg_job_config c;
    memset(&c, 0, sizeof c);
    c.agent = rp_d4pg_config_default();
    snprintf(c.task, sizeof c.task, "cartpole-swingup");
    c.action_repeat = 1;
    c.actors = 1;
    c.envs_per_actor = 1;
    c.learners = 1;
    c.env_steps = 300000;
    c.min_replay = 1000;
    c.samples_per_insert = 32;
    c.replay_capacity = 1000000;
    c.actor_update_every = 1000;
    c.publish_every = 10;
    c.eval_episodes = 5;
    c.seed = 1;
    return c;
}

int64_t rp_d4pg_job_learner_steps(const rp_d4pg_job_config *c)
{
    double steps =
        (double)(c->env_steps - c->min_replay) * c->samples_per_insert / (double)c->agent.batch;
    return steps >= 1 ? (int64_t)steps : 1;
}

static rp_status check(rp_d4pg_job_config *c)
{
    if (c->actors < 1 || c->envs_per_actor < 1 || c->envs_per_actor > 64 || c->learners < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "actors %d, envs per actor %d (1..64), learners %d: each at least 1",
                        c->actors, c->envs_per_actor, c->learners);
    if (c->agent.batch % c->learners)
        return RP_ERROR(RP_ERR_INVALID, "the batch %d does not split over %d learner replicas",
                        c->agent.batch, c->learners);
    if (c->agent.n_step < 1 || c->agent.n_step > 15)
        return RP_ERROR(RP_ERR_INVALID, "n_step %d: 1..15", c->agent.n_step);
    if (c->min_replay < 1 || c->env_steps <= c->min_replay || c->replay_capacity < c->min_replay)
        return RP_ERROR(
            RP_ERR_INVALID,
            "env steps %lld, min replay %lld, capacity %lld: need 1 <= min replay < env "
            "steps and min replay <= capacity",
            (long long)c->env_steps, (long long)c->min_replay, (long long)c->replay_capacity);
    if (!(c->samples_per_insert > 0) || c->error_buffer < 0 || c->actor_update_every < 1 ||
        c->publish_every < 1 || c->eval_episodes < 1 || c->action_repeat < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "samples per insert %g, error buffer %g, actor update %lld, publish %lld, "
                        "eval episodes %d, action repeat %d: out of range",
                        c->samples_per_insert, c->error_buffer, (long long)c->actor_update_every,
                        (long long)c->publish_every, c->eval_episodes, c->action_repeat);
    /* The limiter's window must hold a learner's sample and an actor's insert, or they could wait
     * forever. */
    double buffer =
        c->error_buffer > 0 ? c->error_buffer : (double)c->min_replay * 0.1 * c->samples_per_insert;
    double need = (double)c->agent.batch / c->learners +
                  c->samples_per_insert * c->envs_per_actor * (c->agent.n_step + 1);
    if (2 * buffer < need)
        return RP_ERROR(RP_ERR_INVALID,
                        "the rate limiter's window (2 x error buffer %g samples) is narrower than "
                        "one learner's sample plus one actor's insert (%g): raise --min-replay or "
                        "the error buffer",
                        buffer, need);
    rp_rl_env *env = NULL;
    rp_env_options eo = rp_env_options_default();
    eo.action_repeat = c->action_repeat;
    RP_CHECK(rp_env_create(&env, c->task, &eo));
    const rp_env_spec *sp = rp_env_get_spec(env);
    c->agent.obs_dim = sp->obs_dim;
    c->agent.act_dim = sp->act_dim;
    for (int i = 0; i < sp->act_dim && i < RP_D4PG_MAX_ACT; i++) {
        c->agent.act_min[i] = sp->act_min[i];
        c->agent.act_max[i] = sp->act_max[i];
    }
    rp_env_destroy(env);
    return rp_d4pg_config_check(&c->agent);
}

static rp_status read_counter(const rp_checkpoint *ck, const char *name, int64_t *v)
{
    int64_t n = 0;
    const int64_t *p = rp_checkpoint_get_i64(ck, name, &n);
    if (!p || n != 1) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint has no D4PG counter %s", name);
    *v = p[0];
    return RP_OK;
}

static rp_status curve_add(rp_d4pg_job *j, double x, double y)
{
    if (j->curve_n == j->curve_cap) {
        int cap = j->curve_cap ? 2 * j->curve_cap : 64;
        double *nx = realloc(j->curve_x, sizeof *nx * (size_t)cap);
        if (!nx) return RP_ERROR(RP_ERR_NOMEM, "the learning curve");
        j->curve_x = nx;
        double *ny = realloc(j->curve_y, sizeof *ny * (size_t)cap);
        if (!ny) return RP_ERROR(RP_ERR_NOMEM, "the learning curve");
        j->curve_y = ny;
        j->curve_cap = cap;
    }
    j->curve_x[j->curve_n] = x;
    j->curve_y[j->curve_n++] = y;
    return RP_OK;
}

rp_status rp_d4pg_job_create(rp_d4pg_job **out, const rp_d4pg_job_config *cfg,
                             const rp_checkpoint *resume)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_job_create: NULL argument");
    *out = NULL;
    rp_d4pg_job *j = calloc(1, sizeof *j);
    if (!j) return RP_ERROR(RP_ERR_NOMEM, "a D4PG job");
    rp_status status = RP_OK;
    j->cfg = *cfg;
    RP_TRY(check(&j->cfg));
    j->first_actor = j->cfg.learners;
    j->replay_worker = j->cfg.learners + j->cfg.actors;
    j->recent_return = NAN;
    j->t_start = rp_now_s();
    if (resume) {
        RP_TRY(read_counter(resume, "d4pg/env_steps", &j->resume_env_steps));
        RP_TRY(read_counter(resume, "d4pg/episodes", &j->resume_episodes));
        RP_TRY(read_counter(resume, "d4pg/steps", &j->resume_learner_steps));
        int64_t nx = 0, ny[RP_MAX_DIMS] = {0};
        int ndim = 0;
        const int64_t *x = rp_checkpoint_get_i64(resume, "d4pg/curve_env_steps", &nx);
        const float *y = x ? rp_checkpoint_get_f32(resume, "d4pg/curve_return", &ndim, ny) : NULL;
        if (x && y && ndim == 1 && nx == ny[0])
            for (int64_t i = 0; i < nx; i++)
                RP_TRY(curve_add(j, (double)x[i], y[i]));
        rp_error_clear(); /* a run saved before its first evaluation has no curve */
        j->env_steps = j->resume_env_steps;
        j->episodes = j->resume_episodes;
    }
cleanup:
    if (status != RP_OK) {
        rp_d4pg_job_destroy(j);
        return status;
    }
    *out = j;
    return RP_OK;
}

void rp_d4pg_job_destroy(rp_d4pg_job *j)
{
    if (!j) return;
    free(j->curve_x);
    free(j->curve_y);
    free(j);
}

const rp_d4pg_job_config *rp_d4pg_job_get_config(const rp_d4pg_job *j)
{
    return j ? &j->cfg : NULL;
}

rp_status rp_d4pg_job_set_run_dir(rp_d4pg_job *j, const char *dir)
{
    if (!j || !dir || strlen(dir) >= sizeof j->run_dir)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_job_set_run_dir: %s",
                        !j || !dir ? "NULL argument"
                                   : "the run directory is longer than 4095 bytes");
    snprintf(j->run_dir, sizeof j->run_dir, "%s", dir);
    return RP_OK;
}

int rp_d4pg_job_curve(const rp_d4pg_job *j, const double **x, const double **y)
{
    if (x) *x = j->curve_x;
    if (y) *y = j->curve_y;
    return j->curve_n;
}

/* ---- evaluation ---------------------------------------------------------------------- */

rp_status rp_d4pg_evaluate_policy(rp_d4pg_policy *policy, rp_tape *t, const char *task,
                                  int action_repeat, int episodes, uint64_t seed, double *mean,
                                  double *std)
{
    if (!policy || !t || !task || episodes < 1 || !mean || !std)
        return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_evaluate_policy: bad argument");
    const rp_d4pg_config *pc = rp_d4pg_policy_config(policy);
    int obs = pc->obs_dim, act = pc->act_dim;
    rp_status status = RP_OK;
    rp_rl_env **envs = calloc((size_t)episodes, sizeof *envs);
    float *o = malloc(sizeof *o * (size_t)(episodes * obs)),
          *a = malloc(sizeof *a * (size_t)(episodes * act));
    double *ret = calloc((size_t)episodes, sizeof *ret);
    bool *done = calloc((size_t)episodes, sizeof *done);
    if (!envs || !o || !a || !ret || !done) {
        status = RP_ERROR(RP_ERR_NOMEM, "evaluation buffers");
        goto cleanup;
    }
    rp_env_options eo = rp_env_options_default();
    eo.action_repeat = action_repeat;
    for (int e = 0; e < episodes; e++) {
        RP_TRY(rp_env_create(&envs[e], task, &eo));
        if (rp_env_get_spec(envs[e])->obs_dim != obs || rp_env_get_spec(envs[e])->act_dim != act) {
            status = RP_ERROR(RP_ERR_SHAPE,
                              "task %s has %d observations and %d actions; the policy %d and %d",
                              task, rp_env_get_spec(envs[e])->obs_dim,
                              rp_env_get_spec(envs[e])->act_dim, obs, act);
            goto cleanup;
        }
        RP_TRY(rp_env_reset(envs[e], rp_d4pg_episode_seed(seed, 0xe7a1ULL, (uint64_t)e),
                            o + (int64_t)e * obs));
    }
    for (int left = episodes; left > 0;) {
        rp_tape_reset(t);
        RP_TRY(rp_d4pg_policy_act(policy, t, o, episodes, 0.0f, NULL, a));
        for (int e = 0; e < episodes; e++) {
            if (done[e]) continue;
            rp_env_step_result r;
            RP_TRY(rp_env_step(envs[e], a + (int64_t)e * act, act, o + (int64_t)e * obs, &r));
            ret[e] += r.reward;
            if (r.last) done[e] = true, left--;
        }
    }
    double sum = 0, sq = 0;
    for (int e = 0; e < episodes; e++)
        sum += ret[e];
    *mean = sum / episodes;
    for (int e = 0; e < episodes; e++)
        sq += (ret[e] - *mean) * (ret[e] - *mean);
    *std = sqrt(sq / episodes);
cleanup:
    rp_tape_reset(t);
    for (int e = 0; envs && e < episodes; e++)
        rp_env_destroy(envs[e]);
    free(envs);
    free(o);
    free(a);
    free(ret);
    free(done);
    return status;
}

/* ---- the learner's callbacks ---------------------------------------------------------- */

typedef struct learner_state {
    rp_d4pg_learner *L;
    int n;              /* this replica's shard */
    float *wire, *cols; /* the batch as it arrives (rows), and as the learner takes it (columns) */
    float *policy;      /* the published policy's values, read out of its storage */
    int64_t *keys;
    float *priorities;
    double rate_t, rate; /* env steps per second, measured over a second or more */
    int64_t rate_steps;
} learner_state;

static rp_status publish(rp_replica *rep, rp_d4pg_job *j, learner_state *s)
{
    /* As Acme's learner, the actors get the target policy. */
    rp_params *p = rp_d4pg_policy_params(rp_d4pg_learner_target_policy(s->L));
    rp_comm *link = rp_replica_link_comm(rep);
    RP_CHECK(rp_params_read_values(p, s->policy));
    RP_CHECK(w_send(link, j->replay_worker, W_PUBLISH, rp_replica_worker(rep), rp_params_numel(p),
                    0, 0, 0, 0, 0));
    return rp_comm_send(link, s->policy, rp_params_numel(p), RP_F32, j->replay_worker, W_TAG);
}

static void learner_free(learner_state *s)
{
    if (!s) return;
    rp_d4pg_learner_destroy(s->L);
    free(s->wire);
    free(s->cols);
    free(s->policy);
    free(s->keys);
    free(s->priorities);
    free(s);
}

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    rp_d4pg_job *j = ctx;
    const rp_d4pg_job_config *c = &j->cfg;
    rp_status status = RP_OK;
    learner_state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "a learner's state");
    s->n = c->agent.batch / c->learners;
    s->wire =
        malloc(sizeof *s->wire * (size_t)(s->n * w_row(c->agent.obs_dim, c->agent.act_dim) + s->n));
    s->cols = malloc(sizeof *s->cols * (size_t)(s->n * w_row(c->agent.obs_dim, c->agent.act_dim)));
    s->keys = malloc(sizeof *s->keys * (size_t)s->n);
    s->priorities = malloc(sizeof *s->priorities * (size_t)s->n);
    if (!s->wire || !s->cols || !s->keys || !s->priorities) {
        status = RP_ERROR(RP_ERR_NOMEM, "a learner's buffers");
        goto cleanup;
    }
    RP_TRY(rp_d4pg_learner_create(rep, &s->L, &c->agent, c->seed));
    int64_t values = rp_params_numel(rp_d4pg_policy_params(rp_d4pg_learner_policy(s->L)));
    s->policy = malloc(sizeof *s->policy * (size_t)values);
    if (!s->policy) {
        status =
            RP_ERROR(RP_ERR_NOMEM, "a learner's policy buffer (%lld floats)", (long long)values);
        goto cleanup;
    }
    if (ck) RP_TRY(rp_d4pg_learner_load(s->L, ck));
    if (rp_replica_id(rep) == 0) RP_TRY(publish(rep, j, s));
cleanup:
    if (status != RP_OK) {
        learner_free(s);
        return status;
    }
    *out = s;
    return RP_OK;
}

static const char *const scalars[] = {"critic_loss", "policy_loss", "q",      "return",
                                      "env_steps",   "env_per_s",   "replay", NULL};
static const char *const gauges[] = {"return", "env_steps", "env_per_s", "replay", NULL};

static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *out)
{
    rp_d4pg_job *j = ctx;
    learner_state *s = state;
    int obs = j->cfg.agent.obs_dim, act = j->cfg.agent.act_dim, n = s->n;
    rp_comm *link = rp_replica_link_comm(rep);
    int self = rp_replica_worker(rep);
    RP_CHECK(w_send(link, j->replay_worker, W_SAMPLE, self, n, 0, 0, 0, 0, 0));
    int64_t h[W_HDR];
    RP_CHECK(rp_comm_recv(link, h, W_HDR, RP_I64, j->replay_worker, W_TAG));
    if (h[0] != W_BATCH || h[2] != n)
        return RP_ERROR(RP_ERR_FORMAT, "learner %d asked for %d samples and got kind %lld of %lld",
                        rp_replica_id(rep), n, (long long)h[0], (long long)h[2]);
    int64_t row = w_row(obs, act);
    RP_CHECK(rp_comm_recv(link, s->wire, n * row + n, RP_F32, j->replay_worker, W_TAG));
    bool prio = h[7] != 0;
    if (prio) RP_CHECK(rp_comm_recv(link, s->keys, n, RP_I64, j->replay_worker, W_TAG));
    /* The rows arrive interleaved; the learner takes column arrays (not on the tape: the step
     * resets it). */
    float *o = s->cols, *a = o + (int64_t)n * obs, *r = a + (int64_t)n * act, *d = r + n,
          *no = d + n;
    for (int i = 0; i < n; i++) {
        const float *w = s->wire + (int64_t)i * row;
        memcpy(o + (int64_t)i * obs, w, sizeof *o * (size_t)obs);
        memcpy(a + (int64_t)i * act, w + obs, sizeof *a * (size_t)act);
        r[i] = w[obs + act];
        d[i] = w[obs + act + 1];
        memcpy(no + (int64_t)i * obs, w + obs + act + 2, sizeof *no * (size_t)obs);
    }
    rp_d4pg_batch b = {n, o, a, r, d, no, prio ? s->wire + (int64_t)n * row : NULL};
    rp_d4pg_step_stats st;
    memset(&st, 0, sizeof st);
    st.priorities = prio ? s->priorities : NULL;
    RP_CHECK(rp_d4pg_learner_step(rep, s->L, &b, &st));
    if (prio) {
        RP_CHECK(w_send(link, j->replay_worker, W_PRIORITIES, self, n, 0, 0, 0, 0, 0));
        RP_CHECK(rp_comm_send(link, s->keys, n, RP_I64, j->replay_worker, W_TAG));
        RP_CHECK(rp_comm_send(link, s->priorities, n, RP_F32, j->replay_worker, W_TAG));
    }
    if (rp_replica_id(rep) == 0) {
        if (rp_d4pg_learner_steps(s->L) % j->cfg.publish_every == 0) RP_CHECK(publish(rep, j, s));
        j->env_steps = h[3];
        j->episodes = h[4];
        j->held = h[5];
        j->recent_return = w_double(h[6]);
    }
    out[0] = st.critic_loss;
    out[1] = st.policy_loss;
    out[2] = st.q_mean;
    double now = rp_now_s();
    if (s->rate_t == 0) s->rate_t = now, s->rate_steps = h[3];
    if (now - s->rate_t >= 1.0) {
        s->rate = (double)(h[3] - s->rate_steps) / (now - s->rate_t);
        s->rate_t = now;
        s->rate_steps = h[3];
    }
    out[3] = w_double(h[6]);
    out[4] = (double)h[3];
    out[5] = s->rate;
    out[6] = (double)h[5];
    return RP_OK;
}

static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    rp_d4pg_job *j = ctx;
    learner_state *s = state;
    int R = rp_replica_count(rep), id = rp_replica_id(rep), E = j->cfg.eval_episodes;
    int mine = E / R + (id < E % R);
    double mean = 0, std = 0;
    /* Fresh starts at every evaluation: the episodes' seed mixes in the learner step, so a
     * curve is not the policy's score on the same E starts again and again. */
    uint64_t starts = rp_d4pg_episode_seed(j->cfg.seed, 0xe7a2ULL + (uint64_t)id,
                                           (uint64_t)rp_d4pg_learner_steps(s->L));
    if (mine > 0) {
        /* In f32 whatever the run's precision, as the actors act (d4pg_actor.c); then back. */
        rp_tape *t = rp_replica_tape(rep);
        rp_precision_policy keep = rp_tape_precision(t);
        RP_CHECK(rp_tape_set_precision(t, rp_precision_policy_make(RP_F32)));
        rp_status status =
            rp_d4pg_evaluate_policy(rp_d4pg_learner_target_policy(s->L), t, j->cfg.task,
                                    j->cfg.action_repeat, mine, starts, &mean, &std);
        RP_CHECK(rp_tape_set_precision(t, keep));
        RP_CHECK(status);
    }
    RP_CHECK(rp_replica_report(rep, "eval_sum", mean * mine, RP_SUM));
    RP_CHECK(rp_replica_report(rep, "eval_sumsq", (std * std + mean * mean) * mine, RP_SUM));
    return rp_replica_report(rep, "eval_n", mine, RP_SUM);
}

static void draw_curve(const rp_d4pg_job *j)
{
    if (!j->run_dir[0] || j->curve_n == 0) return;
    char path[4096 + 64], title[160]; /* run_dir and a file name */
    snprintf(path, sizeof path, "%s/learning_curve.png", j->run_dir);
    snprintf(title, sizeof title, "D4PG on %s: evaluation return (%d episodes, no noise)",
             j->cfg.task, j->cfg.eval_episodes);
    rp_plot p = {title, "environment steps", "return", 0, 0, true};
    rp_plot_series series = {"D4PG", j->curve_x, j->curve_y, j->curve_n};
    if (rp_plot_write_png(path, &p, &series, 1) != RP_OK)
        rp_warn("could not draw the learning curve: %s", rp_last_error());
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    rp_d4pg_job *j = ctx;
    double sum = 0, sq = 0, n = 0;
    RP_CHECK(rp_replicator_result(r, "eval_sum", &sum));
    RP_CHECK(rp_replicator_result(r, "eval_sumsq", &sq));
    RP_CHECK(rp_replicator_result(r, "eval_n", &n));
    double mean = sum / n, var = sq / n - mean * mean, std = sqrt(var > 0 ? var : 0);
    RP_CHECK(curve_add(j, (double)j->env_steps, mean));
    draw_curve(j);
    RP_CHECK(rp_trainer_metrics_add(m, "eval_return", mean, "eval return %.1f +- %.1f", mean, std));
    RP_CHECK(rp_trainer_metrics_add(m, "eval_return_std", std, NULL));
    RP_CHECK(rp_trainer_metrics_add(m, "env_steps", (double)j->env_steps, "at %lld env steps",
                                    (long long)j->env_steps));
    /* Wall time since the job was made (a resumed run counts from its own start). */
    return rp_trainer_metrics_add(m, "wall_s", rp_now_s() - j->t_start, NULL);
}

static rp_status save(void *ctx, void *state, rp_checkpoint *ck)
{
    rp_d4pg_job *j = ctx;
    learner_state *s = state;
    RP_CHECK(rp_d4pg_learner_save(s->L, ck));
    RP_CHECK(rp_checkpoint_add_i64(ck, "d4pg/env_steps", 1, &j->env_steps));
    RP_CHECK(rp_checkpoint_add_i64(ck, "d4pg/episodes", 1, &j->episodes));
    if (j->curve_n == 0) return RP_OK;
    int64_t *x = malloc(sizeof *x * (size_t)j->curve_n);
    float *y = malloc(sizeof *y * (size_t)j->curve_n);
    rp_status status = RP_OK;
    if (!x || !y) status = RP_ERROR(RP_ERR_NOMEM, "the learning curve");
    for (int i = 0; status == RP_OK && i < j->curve_n; i++) {
        x[i] = (int64_t)j->curve_x[i];
        y[i] = (float)j->curve_y[i];
    }
    int64_t shape[1] = {j->curve_n};
    if (status == RP_OK) status = rp_checkpoint_add_i64(ck, "d4pg/curve_env_steps", j->curve_n, x);
    if (status == RP_OK) status = rp_checkpoint_add_f32(ck, "d4pg/curve_return", 1, shape, y);
    free(x);
    free(y);
    return status;
}

static rp_status destroy(rp_replica *rep, void *ctx, void *state)
{
    learner_free(state);
    return RP_OK;
}

static rp_status start_roles(rp_replicator *r, void *ctx)
{
    RP_CHECK(rp_replicator_start(r, "replay", rp_d4pg_replay_main, ctx));
    return rp_replicator_start(r, "actor", rp_d4pg_actor_main, ctx);
}

static rp_status stop_roles(rp_replica *rep, void *ctx, void *state)
{
    rp_d4pg_job *j = ctx;
    if (rp_replica_id(rep) != 0) return RP_OK;
    return w_send(rp_replica_link_comm(rep), j->replay_worker, W_STOP, rp_replica_worker(rep), 0, 0,
                  0, 0, 0, 0);
}

static const rp_trainer_model model = {
    .build = build,
    .train_step = train_step,
    .scalars = scalars,
    .gauges = gauges,
    .evaluate = evaluate,
    .evaluated = evaluated,
    .save = save,
    .destroy = destroy,
    .start_roles = start_roles,
    .stop_roles = stop_roles,
};

const rp_trainer_model *rp_d4pg_trainer_model(void)
{
    return &model;
}

void rp_d4pg_trainer_config_apply(const rp_d4pg_job_config *c, rp_trainer_config *tc)
{
    tc->runtime.nroles = 3;
    tc->runtime.roles[0] = rp_role_make("learner", c->learners, 1);
    tc->runtime.roles[1] = rp_role_make("actor", c->actors, 1);
    tc->runtime.roles[2] = rp_role_make("replay", 1, 1);
    tc->steps = rp_d4pg_job_learner_steps(c);
    tc->batch = 1;
    tc->rate_unit = "learner steps/s";
    tc->rate_key = "learner_steps_per_s";
    tc->shown_scalars = "return,env_steps,env_per_s,replay,critic_loss";
    tc->lr = c->agent.critic_lr;
    tc->schedule = RP_SCHED_CONSTANT;
    tc->eval_every_epochs = 0;
}
