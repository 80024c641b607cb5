/*
 * threads.c - in-process parameter servers: the shards of a set live in
 * this process and the workers (replica threads) apply their pushes
 * themselves, each shard under its own mutex.
 *
 * Why a lock per shard rather than lock-free (Hogwild) updates: an update
 * is a read-modify-write of the values and of the optimizer's slots
 * (momentum, Adam's moments and step count). Racing writers lose updates
 * (two workers read the same momentum, both write theirs back), which is
 * exactly what the "no lost updates" contract forbids, and a pull could see
 * half an update. A shard's critical section is short (one element-wise
 * pass over its range: ~0.1 ms for ResNet-20's 272k floats), so with S
 * shards and a worker starting at shard (worker mod S) the workers mostly
 * update different shards at once. Nothing waits for a thread that does
 * not exist: there are no server threads, so a dead server cannot happen
 * here; a lock held past the timeout (a worker stopped inside an update)
 * and the staleness bound's wait are the two waits, and both are bounded.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/ps_internal.h"

typedef struct server {
    pthread_mutex_t mu;
    ps_shard sh;
    int holder; /* worker inside the lock, -1 if none (for messages) */
} server;

typedef struct group {
    int workers;
    int64_t numel;
    rp_ps_config cfg;
    server *servers;    /* [cfg.servers] */
    pthread_mutex_t mu; /* clocks, claims and the reference count */
    pthread_cond_t changed;
    ps_clocks clocks;
    int refs;
} group;

static const ps_ops threads_ops;

static group *G(const rp_ps *ps)
{
    return ps->impl;
}

static struct timespec realtime_in(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = (double)(int64_t)seconds;
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static struct timespec monotonic_at(double deadline)
{
    double whole = (double)(int64_t)deadline;
    struct timespec ts = {.tv_sec = (time_t)whole, .tv_nsec = (long)((deadline - whole) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Takes server s's lock before the deadline, or names it. */
static rp_status lock_server(rp_ps *ps, int s, double deadline, const char *what)
{
    server *sv = &G(ps)->servers[s];
    double left = deadline - rp_now_s();
    struct timespec at = realtime_in(left > 0 ? left : 0);
    int rc = pthread_mutex_timedlock(&sv->mu, &at);
    if (rc == 0) {
        __atomic_store_n(&sv->holder, ps->worker, __ATOMIC_RELAXED);
        return RP_OK;
    }
    int holder = __atomic_load_n(&sv->holder, __ATOMIC_RELAXED);
    char who[48] = "";
    if (holder >= 0) snprintf(who, sizeof who, " by worker %d", holder);
    return RP_ERROR(
        RP_ERR_TIMEOUT,
        "%s by worker %d: parameter server %d (in-process shard [%lld, %lld)) stayed locked%s "
        "for %g s: that worker is stopped or stuck inside an update",
        what, ps->worker, s, (long long)sv->sh.lo, (long long)(sv->sh.lo + sv->sh.n), who,
        ps->cfg.timeout_s);
}

static void unlock_server(rp_ps *ps, int s)
{
    server *sv = &G(ps)->servers[s];
    __atomic_store_n(&sv->holder, -1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&sv->mu);
}

/* Waits until the staleness bound lets this worker go on. */
static rp_status wait_staleness(rp_ps *ps, double deadline)
{
    group *g = G(ps);
    rp_status status = RP_OK;
    int slowest = -1;
    pthread_mutex_lock(&g->mu);
    while (!ps_clocks_may_go(&g->clocks, ps->worker, &slowest)) {
        struct timespec at = monotonic_at(deadline);
        if (pthread_cond_timedwait(&g->changed, &g->mu, &at) == ETIMEDOUT &&
            !ps_clocks_may_go(&g->clocks, ps->worker, &slowest)) {
            status = RP_ERROR(
                RP_ERR_TIMEOUT,
                "staleness bound %d: worker %d, at step %lld of this phase, waited %g s for "
                "worker %d, still at step %lld: that worker is stopped, stuck or far slower",
                g->cfg.staleness, ps->worker, (long long)g->clocks.clock[ps->worker],
                ps->cfg.timeout_s, slowest, (long long)ps_clocks_of(&g->clocks, slowest));
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return status;
}

static rp_status threads_push_pull(rp_ps *ps, const float *grad, float lr, float *values)
{
    group *g = G(ps);
    int S = g->cfg.servers;
    double deadline = rp_now_s() + ps->cfg.timeout_s;
    if (grad) {
        /* Each worker starts at a different shard, so concurrent pushes spread over the locks. */
        for (int i = 0; i < S; i++) {
            int s = (ps->worker + i) % S;
            RP_CHECK(lock_server(ps, s, deadline, "push"));
            server *sv = &g->servers[s];
            ps_shard_apply(&sv->sh, &g->cfg.optim, grad + sv->sh.lo, lr, ps->worker);
            unlock_server(ps, s);
        }
        pthread_mutex_lock(&g->mu);
        ps_clocks_tick(&g->clocks, ps->worker);
        pthread_cond_broadcast(&g->changed);
        pthread_mutex_unlock(&g->mu);
    }
    if (!values) return RP_OK;
    RP_CHECK(wait_staleness(ps, deadline));
    for (int i = 0; i < S; i++) {
        int s = (ps->worker + i) % S;
        RP_CHECK(lock_server(ps, s, deadline, "pull"));
        server *sv = &g->servers[s];
        if (sv->sh.n > 0)
            memcpy(values + sv->sh.lo, sv->sh.values, (size_t)sv->sh.n * sizeof(float));
        unlock_server(ps, s);
    }
    return RP_OK;
}

static rp_status threads_init(rp_ps *ps, const float *values, const float *slots, int64_t step)
{
    group *g = G(ps);
    double deadline = rp_now_s() + ps->cfg.timeout_s;
    for (int s = 0; s < g->cfg.servers; s++) {
        RP_CHECK(lock_server(ps, s, deadline, "init"));
        server *sv = &g->servers[s];
        ps_shard_load(&sv->sh, values + sv->sh.lo, slots ? slots + sv->sh.lo : NULL, g->numel,
                      step);
        unlock_server(ps, s);
    }
    return RP_OK;
}

static rp_status threads_snapshot(rp_ps *ps, float *values, float *slots, int64_t *step)
{
    group *g = G(ps);
    double deadline = rp_now_s() + ps->cfg.timeout_s;
    for (int s = 0; s < g->cfg.servers; s++) {
        RP_CHECK(lock_server(ps, s, deadline, "snapshot"));
        server *sv = &g->servers[s];
        ps_shard_save(&sv->sh, values + sv->sh.lo, slots ? slots + sv->sh.lo : NULL, g->numel);
        if (s == 0) *step = sv->sh.step;
        unlock_server(ps, s);
    }
    return RP_OK;
}

static rp_status threads_stats(rp_ps *ps, int s, rp_ps_server_stats *st)
{
    group *g = G(ps);
    RP_CHECK(lock_server(ps, s, rp_now_s() + ps->cfg.timeout_s, "stats"));
    const ps_shard *sh = &g->servers[s].sh;
    memset(st, 0, sizeof *st);
    st->applied = sh->applied;
    st->workers = g->workers;
    for (int w = 0; w < g->workers; w++) {
        st->from_worker[w] = sh->from_worker[w];
        st->received += sh->from_worker[w];
    }
    unlock_server(ps, s);
    return RP_OK;
}

static rp_status threads_join(rp_ps *ps, uint64_t phase)
{
    group *g = G(ps);
    pthread_mutex_lock(&g->mu);
    ps_clocks_join(&g->clocks, ps->worker, phase);
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->mu);
    return RP_OK;
}

static rp_status threads_leave(rp_ps *ps)
{
    group *g = G(ps);
    pthread_mutex_lock(&g->mu);
    ps_clocks_leave(&g->clocks, ps->worker);
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->mu);
    return RP_OK;
}

static rp_status threads_claim(rp_ps *ps, int64_t *ticket)
{
    group *g = G(ps);
    pthread_mutex_lock(&g->mu);
    *ticket = ps_clocks_claim(&g->clocks);
    pthread_mutex_unlock(&g->mu);
    return RP_OK;
}

static void group_free(group *g)
{
    for (int s = 0; g->servers && s < g->cfg.servers; s++) {
        pthread_mutex_destroy(&g->servers[s].mu);
        ps_shard_destroy(&g->servers[s].sh);
    }
    free(g->servers);
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void threads_destroy(rp_ps *ps)
{
    group *g = G(ps);
    pthread_mutex_lock(&g->mu);
    /* A worker gone holds no one back (an MPI server treats a dropped handle alike). */
    ps_clocks_leave(&g->clocks, ps->worker);
    pthread_cond_broadcast(&g->changed);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) group_free(g);
    free(ps);
}

rp_status rp_ps_threads_create(rp_ps **handles, int workers, int64_t numel, const rp_ps_config *cfg)
{
    if (!handles || !cfg) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (workers < 1 || workers > RP_PS_MAX_WORKERS)
        return RP_ERROR(RP_ERR_INVALID, "%d workers: must be in [1, %d]", workers,
                        RP_PS_MAX_WORKERS);
    if (numel < 0) return RP_ERROR(RP_ERR_INVALID, "numel %lld < 0", (long long)numel);
    if (cfg->servers < 1 || cfg->servers > 256)
        return RP_ERROR(RP_ERR_INVALID, "%d parameter servers: must be in [1, 256]", cfg->servers);
    if (cfg->timeout_s < 0 || cfg->timeout_s != cfg->timeout_s)
        return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be >= 0 (0: the default)",
                        cfg->timeout_s);
    /* The rule's own checks (momentum, betas, eps), on an empty optimizer. */
    RP_CHECK(rp_optim_check(&cfg->optim));
    for (int w = 0; w < workers; w++)
        handles[w] = NULL;
    rp_status status = RP_OK;
    group *g = calloc(1, sizeof *g);
    if (!g) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate parameter servers");
    g->workers = workers;
    g->numel = numel;
    g->cfg = *cfg;
    if (g->cfg.timeout_s == 0) g->cfg.timeout_s = rp_env_get()->comm_timeout;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->changed, &ca);
    pthread_condattr_destroy(&ca);
    ps_clocks_init(&g->clocks, workers, cfg->staleness);
    g->servers = calloc((size_t)cfg->servers, sizeof *g->servers);
    if (!g->servers) {
        group_free(g);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d parameter servers", cfg->servers);
    }
    for (int s = 0; s < cfg->servers; s++) {
        int64_t lo, hi;
        rp_ps_shard_range(numel, cfg->servers, s, &lo, &hi);
        pthread_mutex_init(&g->servers[s].mu, NULL);
        g->servers[s].holder = -1;
        RP_TRY(ps_shard_create(&g->servers[s].sh, lo, hi, &cfg->optim));
    }
    for (int w = 0; w < workers; w++) {
        rp_ps *ps = calloc(1, sizeof *ps);
        if (!ps) {
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate a parameter-server handle");
            goto cleanup;
        }
        ps->ops = &threads_ops;
        ps->worker = w;
        ps->workers = workers;
        ps->numel = numel;
        ps->cfg = g->cfg;
        ps->impl = g;
        handles[w] = ps;
        g->refs++;
    }
    return RP_OK;
cleanup:
    for (int w = 0; w < workers; w++) {
        free(handles[w]);
        handles[w] = NULL;
    }
    group_free(g);
    return status;
}

static const ps_ops threads_ops = {
    .name = "threads",
    .push_pull = threads_push_pull,
    .init = threads_init,
    .snapshot = threads_snapshot,
    .stats = threads_stats,
    .join = threads_join,
    .leave = threads_leave,
    .claim = threads_claim,
    .destroy = threads_destroy,
};
