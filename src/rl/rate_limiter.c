/*
 * rate_limiter.c - Reverb's SampleToInsertRatio rate limiter: the counting
 * rules (checked against reverb/cc/rate_limiter.cc and the validation in
 * reverb/rate_limiters.py), and a gate that makes threads wait on them.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "replicator/replay.h"

rp_status rp_rate_limiter_init_range(rp_rate_limiter *l, int64_t min_size_to_sample,
                                     double samples_per_insert, double min_diff, double max_diff)
{
    if (!l) return RP_ERROR(RP_ERR_INVALID, "rp_rate_limiter_init: l is NULL");
    if (min_size_to_sample < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rate limiter: min_size_to_sample %lld must be a positive integer",
                        (long long)min_size_to_sample);
    if (!(samples_per_insert > 0.0) || isinf(samples_per_insert))
        return RP_ERROR(RP_ERR_INVALID,
                        "rate limiter: samples_per_insert %g must be finite and > 0",
                        samples_per_insert);
    if (isnan(min_diff) || isnan(max_diff))
        return RP_ERROR(RP_ERR_INVALID, "rate limiter: min_diff %g or max_diff %g is NaN", min_diff,
                        max_diff);
    double need = 2.0 * fmax(1.0, samples_per_insert);
    if (max_diff - min_diff < need)
        return RP_ERROR(
            RP_ERR_INVALID,
            "rate limiter: the error window [%g, %g] is %g wide, less than 2 * max(1, "
            "samples_per_insert %g) = %g, which could block inserts or samples for good",
            min_diff, max_diff, max_diff - min_diff, samples_per_insert, need);
    double offset = samples_per_insert * (double)min_size_to_sample;
    if (min_diff > offset)
        return RP_ERROR(RP_ERR_INVALID,
                        "rate limiter: min_diff %g is above samples_per_insert * "
                        "min_size_to_sample = %g: sampling would deadlock once min_size items "
                        "are in",
                        min_diff, offset);
    if (max_diff < offset)
        rp_warn("rate limiter: max_diff %g is below samples_per_insert * min_size_to_sample = %g: "
                "inserts stop at min_size until something samples concurrently",
                max_diff, offset);
    memset(l, 0, sizeof *l);
    l->min_size_to_sample = min_size_to_sample;
    l->samples_per_insert = samples_per_insert;
    l->min_diff = min_diff;
    l->max_diff = max_diff;
    return RP_OK;
}

rp_status rp_rate_limiter_init(rp_rate_limiter *l, int64_t min_size_to_sample,
                               double samples_per_insert, double error_buffer)
{
    if (!(error_buffer >= 0.0))
        return RP_ERROR(RP_ERR_INVALID, "rate limiter: error_buffer %g must be >= 0", error_buffer);
    double offset = samples_per_insert * (double)min_size_to_sample;
    return rp_rate_limiter_init_range(l, min_size_to_sample, samples_per_insert,
                                      offset - error_buffer, offset + error_buffer);
}

bool rp_rate_limiter_can_insert(const rp_rate_limiter *l, int64_t n)
{
    if (!l || n < 1) return false;
    /* Until the table holds min_size items, inserts are free. */
    if (l->inserts + n - l->deletes <= l->min_size_to_sample) return true;
    return (double)(l->inserts + n) * l->samples_per_insert - (double)l->samples <= l->max_diff;
}

bool rp_rate_limiter_can_sample(const rp_rate_limiter *l, int64_t n)
{
    if (!l || n < 1) return false;
    if (l->inserts - l->deletes < l->min_size_to_sample) return false;
    return (double)l->inserts * l->samples_per_insert - (double)l->samples - (double)n >=
           l->min_diff;
}

void rp_rate_limiter_inserted(rp_rate_limiter *l, int64_t n)
{
    if (l) l->inserts += n;
}

void rp_rate_limiter_sampled(rp_rate_limiter *l, int64_t n)
{
    if (l) l->samples += n;
}

void rp_rate_limiter_deleted(rp_rate_limiter *l, int64_t n)
{
    if (l) l->deletes += n;
}

/* ---- the gate ------------------------------------------------------------------------ */

struct rp_rate_gate {
    pthread_mutex_t mu;
    pthread_cond_t can_insert, can_sample; /* on CLOCK_MONOTONIC */
    rp_rate_limiter l;
    bool closed;
};

rp_status rp_rate_gate_create(rp_rate_gate **out, const rp_rate_limiter *limits)
{
    if (!out || !limits) return RP_ERROR(RP_ERR_INVALID, "rp_rate_gate_create: NULL argument");
    *out = NULL;
    rp_rate_gate *g = rp_calloc(sizeof *g);
    if (!g) return RP_ERR_NOMEM;
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc == 0) rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    bool mu = false, ci = false;
    if (rc == 0) rc = pthread_mutex_init(&g->mu, NULL), mu = rc == 0;
    if (rc == 0) rc = pthread_cond_init(&g->can_insert, &attr), ci = rc == 0;
    if (rc == 0) rc = pthread_cond_init(&g->can_sample, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) {
        if (ci) pthread_cond_destroy(&g->can_insert);
        if (mu) pthread_mutex_destroy(&g->mu);
        rp_free(g);
        return RP_ERROR(RP_ERR_BACKEND, "rp_rate_gate_create: pthread init failed: %s",
                        strerror(rc));
    }
    g->l = *limits;
    *out = g;
    return RP_OK;
}

void rp_rate_gate_destroy(rp_rate_gate *g)
{
    if (!g) return;
    pthread_cond_destroy(&g->can_sample);
    pthread_cond_destroy(&g->can_insert);
    pthread_mutex_destroy(&g->mu);
    rp_free(g);
}

/* Wakes both sides: a count on either side can open the other (or, after deletes, the same). */
static void signal_all(rp_rate_gate *g)
{
    pthread_cond_broadcast(&g->can_insert);
    pthread_cond_broadcast(&g->can_sample);
}

static rp_status gate_wait(rp_rate_gate *g, int64_t n, double timeout_s, bool insert)
{
    const char *what = insert ? "rp_rate_gate_insert" : "rp_rate_gate_sample";
    if (!g || n < 1 || !(timeout_s >= 0.0))
        return RP_ERROR(RP_ERR_INVALID, "%s: gate NULL, n %lld < 1 or timeout %g s invalid", what,
                        (long long)n, timeout_s);
    double start = rp_now_s();
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double whole = floor(timeout_s);
    deadline.tv_sec += (time_t)fmin(whole, 1e9);
    deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;

    pthread_mutex_lock(&g->mu);
    pthread_cond_t *cv = insert ? &g->can_insert : &g->can_sample;
    bool timed_out = false;
    while (!g->closed && !(insert ? rp_rate_limiter_can_insert(&g->l, n)
                                  : rp_rate_limiter_can_sample(&g->l, n))) {
        if (timed_out) break;
        if (pthread_cond_timedwait(cv, &g->mu, &deadline) == ETIMEDOUT) timed_out = true;
    }
    if (g->closed) {
        pthread_mutex_unlock(&g->mu);
        return RP_ERROR(RP_ERR_INTERRUPTED, "%s(n=%lld): the gate was closed", what, (long long)n);
    }
    bool allowed =
        insert ? rp_rate_limiter_can_insert(&g->l, n) : rp_rate_limiter_can_sample(&g->l, n);
    if (!allowed) {
        rp_rate_limiter l = g->l;
        pthread_mutex_unlock(&g->mu);
        char who[128];
        rp_log_prefix(who, sizeof who);
        return RP_ERROR(RP_ERR_TIMEOUT,
                        "%s %s(n=%lld) waited %.3f s (timeout %g s): inserts %lld, samples %lld, "
                        "deletes %lld; inserts*spi - samples = %g must stay in [%g, %g] "
                        "(spi %g, min_size_to_sample %lld)",
                        who, what, (long long)n, rp_now_s() - start, timeout_s,
                        (long long)l.inserts, (long long)l.samples, (long long)l.deletes,
                        (double)l.inserts * l.samples_per_insert - (double)l.samples, l.min_diff,
                        l.max_diff, l.samples_per_insert, (long long)l.min_size_to_sample);
    }
    if (insert)
        g->l.inserts += n;
    else
        g->l.samples += n;
    signal_all(g);
    pthread_mutex_unlock(&g->mu);
    return RP_OK;
}

rp_status rp_rate_gate_insert(rp_rate_gate *g, int64_t n, double timeout_s)
{
    return gate_wait(g, n, timeout_s, true);
}

rp_status rp_rate_gate_sample(rp_rate_gate *g, int64_t n, double timeout_s)
{
    return gate_wait(g, n, timeout_s, false);
}

void rp_rate_gate_deleted(rp_rate_gate *g, int64_t n)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->l.deletes += n;
    signal_all(g);
    pthread_mutex_unlock(&g->mu);
}

void rp_rate_gate_close(rp_rate_gate *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    signal_all(g);
    pthread_mutex_unlock(&g->mu);
}

rp_rate_limiter rp_rate_gate_counters(rp_rate_gate *g)
{
    rp_rate_limiter l;
    memset(&l, 0, sizeof l);
    if (!g) return l;
    pthread_mutex_lock(&g->mu);
    l = g->l;
    pthread_mutex_unlock(&g->mu);
    return l;
}
