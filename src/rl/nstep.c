/*
 * nstep.c - N-step transitions from an episode's steps (see replay.h for the
 * semantics and how they differ from Acme's adder).
 *
 * The adder keeps the last n+1 observations and the last n actions, rewards
 * and discounts in rings indexed by the step's time in the episode, so it
 * copies each observation once and allocates nothing after create.
 */
#include <math.h>
#include <string.h>

#include "replicator/replay.h"

struct rp_nstep {
    int n, obs_dim, act_dim;
    double gamma;
    float *obs;      /* [n+1, obs_dim]: s_t at t % (n+1) */
    float *act;      /* [n, act_dim]: a_t at t % n */
    float *reward;   /* [n] */
    float *discount; /* [n] */
    int64_t first;   /* time of the oldest step not yet written */
    int64_t now;     /* time of the latest observation (steps added this episode) */
    bool started;    /* an episode is open: rp_nstep_start called, `last` not yet seen */
};

rp_status rp_nstep_create(rp_nstep **out, int n, float gamma, int obs_dim, int act_dim)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_nstep_create: a is NULL");
    *out = NULL;
    if (n < 1) return RP_ERROR(RP_ERR_INVALID, "rp_nstep_create: n %d must be >= 1", n);
    if (!(gamma >= 0.0f && gamma <= 1.0f))
        return RP_ERROR(RP_ERR_INVALID, "rp_nstep_create: gamma %g is outside [0, 1]",
                        (double)gamma);
    if (obs_dim < 1 || act_dim < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_nstep_create: obs_dim %d and act_dim %d must be >= 1",
                        obs_dim, act_dim);
    rp_nstep *a = rp_calloc(sizeof *a);
    if (!a) return RP_ERR_NOMEM;
    a->n = n;
    a->gamma = gamma;
    a->obs_dim = obs_dim;
    a->act_dim = act_dim;
    a->obs = rp_alloc((size_t)(n + 1) * (size_t)obs_dim * sizeof(float));
    a->act = rp_alloc((size_t)n * (size_t)act_dim * sizeof(float));
    a->reward = rp_alloc((size_t)n * sizeof(float));
    a->discount = rp_alloc((size_t)n * sizeof(float));
    if (!a->obs || !a->act || !a->reward || !a->discount) {
        rp_nstep_destroy(a);
        return RP_ERROR(RP_ERR_NOMEM, "rp_nstep_create: out of memory for n %d", n);
    }
    *out = a;
    return RP_OK;
}

void rp_nstep_destroy(rp_nstep *a)
{
    if (!a) return;
    rp_free(a->obs);
    rp_free(a->act);
    rp_free(a->reward);
    rp_free(a->discount);
    rp_free(a);
}

static float *obs_at(const rp_nstep *a, int64_t t)
{
    return a->obs + (size_t)(t % (a->n + 1)) * (size_t)a->obs_dim;
}

rp_status rp_nstep_start(rp_nstep *a, const float *obs)
{
    if (!a || !obs) return RP_ERROR(RP_ERR_INVALID, "rp_nstep_start: a or obs is NULL");
    a->first = a->now = 0;
    memcpy(obs_at(a, 0), obs, (size_t)a->obs_dim * sizeof(float));
    a->started = true;
    return RP_OK;
}

/* The transition from step t over h steps: rewards and discounts folded in double. */
static void emit(const rp_nstep *a, int64_t t, int h, rp_transition *out)
{
    double ret = 0.0, scale = 1.0; /* scale = gamma^k prod_{j<k} d_{t+j} */
    for (int k = 0; k < h; k++) {
        int64_t i = (t + k) % a->n;
        ret += scale * (double)a->reward[i];
        scale *= a->gamma * (double)a->discount[i];
    }
    out->obs = obs_at(a, t);
    out->act = a->act + (size_t)(t % a->n) * (size_t)a->act_dim;
    out->reward = (float)ret;
    out->discount = (float)scale;
    out->next_obs = obs_at(a, t + h);
}

rp_status rp_nstep_add(rp_nstep *a, const float *act, float reward, float discount,
                       const float *next_obs, bool last, rp_transition *out, int max_out,
                       int *n_out)
{
    if (n_out) *n_out = 0;
    if (!a || !act || !next_obs || !out || !n_out)
        return RP_ERROR(RP_ERR_INVALID, "rp_nstep_add: NULL argument");
    if (!a->started)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_nstep_add: no episode open (call rp_nstep_start first, and again "
                        "after a step with last set)");
    if (max_out < a->n)
        return RP_ERROR(RP_ERR_INVALID, "rp_nstep_add: max_out %d must be >= n %d", max_out, a->n);
    if (!isfinite(reward) || !isfinite(discount))
        return RP_ERROR(RP_ERR_NUMERIC, "rp_nstep_add: reward %g or discount %g is not finite",
                        (double)reward, (double)discount);
    if (discount < 0.0f || discount > 1.0f)
        return RP_ERROR(RP_ERR_INVALID, "rp_nstep_add: discount %g is outside [0, 1]",
                        (double)discount);
    int64_t t = a->now;
    memcpy(a->act + (size_t)(t % a->n) * (size_t)a->act_dim, act,
           (size_t)a->act_dim * sizeof(float));
    a->reward[t % a->n] = reward;
    a->discount[t % a->n] = discount;
    memcpy(obs_at(a, t + 1), next_obs, (size_t)a->obs_dim * sizeof(float));
    a->now = t + 1;

    int k = 0;
    if (a->now - a->first == a->n) emit(a, a->first++, a->n, &out[k++]);
    if (last) {
        /* Every pending step, with the horizon left to s_T. */
        for (; a->first < a->now; a->first++)
            emit(a, a->first, (int)(a->now - a->first), &out[k++]);
        a->started = false;
    }
    *n_out = k;
    return RP_OK;
}
