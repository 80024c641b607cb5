/*
 * ps.c - the parameter servers' public calls (checked here once, then
 * handed to the backend's table), and what every backend's servers share:
 * the shard of a set and the staleness clocks.
 *
 * Memory: everything here is host memory. The arrays a worker passes (gradients to push, values
 * to pull into, slots) are its host copies - a replica stages its storage through kernels_staging
 * on its side (strategy_async.c, strategy_groups.c) - and a server's shard is host memory it owns,
 * updated with a host table's kernels (kernels_host: cpu's when the replicas run on a device),
 * since the servers serve over the network and their state never needs to be on a device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ps/ps_internal.h"
#include "replicator/trace.h"

/* Shard boundaries fall on multiples of 16 floats: no two servers share a cache line. */
#define ALIGN 16

void rp_ps_shard_range(int64_t numel, int servers, int s, int64_t *lo, int64_t *hi)
{
    if (servers < 1 || numel <= 0 || s < 0 || s >= servers) {
        *lo = *hi = 0;
        return;
    }
    int64_t units = (numel + ALIGN - 1) / ALIGN; /* 16-float lines, the last maybe partial */
    int64_t a = units * s / servers, b = units * (s + 1) / servers;
    *lo = a * ALIGN < numel ? a * ALIGN : numel;
    *hi = b * ALIGN < numel ? b * ALIGN : numel;
}

rp_ps_config rp_ps_config_default(void)
{
    return (rp_ps_config){
        .servers = 1, .staleness = -1, .timeout_s = 0, .optim = rp_optim_config_default()};
}

/* ---- public calls ------------------------------------------------------------------- */

void rp_ps_destroy(rp_ps *ps)
{
    if (ps) ps->ops->destroy(ps);
}

const char *rp_ps_backend(const rp_ps *ps)
{
    return ps->ops->name;
}
int rp_ps_worker(const rp_ps *ps)
{
    return ps->worker;
}
int rp_ps_workers(const rp_ps *ps)
{
    return ps->workers;
}
int rp_ps_servers(const rp_ps *ps)
{
    return ps->cfg.servers;
}
int64_t rp_ps_numel(const rp_ps *ps)
{
    return ps->numel;
}
int64_t rp_ps_clock(const rp_ps *ps)
{
    return ps->clock;
}

static rp_status check_push(const rp_ps *ps, const float *grad, float lr)
{
    if (!grad) return RP_ERROR(RP_ERR_INVALID, "push: gradient is NULL");
    if (!(lr >= 0.0f) || isinf(lr))
        return RP_ERROR(RP_ERR_INVALID, "push: learning rate %g: must be finite and >= 0",
                        (double)lr);
    float value = 0.0f;
    int64_t at = kernels_host()->first_nonfinite(&value, grad, ps->numel);
    if (at >= 0)
        return RP_ERROR(RP_ERR_NUMERIC,
                        "push by worker %d: gradient element %lld is %g; nothing was "
                        "sent",
                        ps->worker, (long long)at, (double)value);
    return RP_OK;
}

rp_status rp_ps_push(rp_ps *ps, const float *grad, float lr)
{
    if (!ps) return RP_ERROR(RP_ERR_INVALID, "parameter server handle is NULL");
    RP_CHECK(check_push(ps, grad, lr));
    rp_trace_begin(RP_PHASE_COMM);
    rp_status status = ps->ops->push_pull(ps, grad, lr, NULL);
    rp_trace_end("ps push");
    RP_CHECK(status);
    ps->clock++;
    return RP_OK;
}

rp_status rp_ps_pull(rp_ps *ps, float *values)
{
    if (!ps || !values) return RP_ERROR(RP_ERR_INVALID, "pull: NULL argument");
    rp_trace_begin(RP_PHASE_COMM);
    rp_status status = ps->ops->push_pull(ps, NULL, 0, values);
    rp_trace_end("ps pull");
    return status;
}

rp_status rp_ps_push_pull(rp_ps *ps, const float *grad, float lr, float *values)
{
    if (!ps || !values) return RP_ERROR(RP_ERR_INVALID, "push_pull: NULL argument");
    RP_CHECK(check_push(ps, grad, lr));
    return ps_exchange(ps, grad, lr, values);
}

rp_status ps_exchange(rp_ps *ps, const float *grad, float lr, float *values)
{
    rp_trace_begin(RP_PHASE_COMM);
    rp_status status = ps->ops->push_pull(ps, grad, lr, values);
    rp_trace_end("ps push/pull");
    RP_CHECK(status);
    ps->clock++;
    return RP_OK;
}

rp_status rp_ps_init(rp_ps *ps, const float *values, const float *slots, int64_t step)
{
    if (!ps || (!values && ps->numel > 0)) return RP_ERROR(RP_ERR_INVALID, "init: NULL argument");
    if (step < 0) return RP_ERROR(RP_ERR_INVALID, "init: step %lld < 0", (long long)step);
    return ps->ops->init(ps, values, slots, step);
}

rp_status rp_ps_snapshot(rp_ps *ps, float *values, float *slots, int64_t *step)
{
    if (!ps || (!values && ps->numel > 0) || !step)
        return RP_ERROR(RP_ERR_INVALID, "snapshot: NULL argument");
    return ps->ops->snapshot(ps, values, slots, step);
}

rp_status rp_ps_stats(rp_ps *ps, int server, rp_ps_server_stats *st)
{
    if (!ps || !st) return RP_ERROR(RP_ERR_INVALID, "stats: NULL argument");
    if (server < 0 || server >= ps->cfg.servers)
        return RP_ERROR(RP_ERR_INVALID, "stats: server %d of %d", server, ps->cfg.servers);
    return ps->ops->stats(ps, server, st);
}

rp_status rp_ps_join(rp_ps *ps, uint64_t phase)
{
    if (!ps) return RP_ERROR(RP_ERR_INVALID, "join: handle is NULL");
    ps->clock = 0;
    return ps->ops->join(ps, phase);
}

rp_status rp_ps_leave(rp_ps *ps)
{
    if (!ps) return RP_ERROR(RP_ERR_INVALID, "leave: handle is NULL");
    return ps->ops->leave(ps);
}

rp_status rp_ps_claim(rp_ps *ps, int64_t *ticket)
{
    if (!ps || !ticket) return RP_ERROR(RP_ERR_INVALID, "claim: NULL argument");
    return ps->ops->claim(ps, ticket);
}

/* ---- shards ------------------------------------------------------------------------- */

rp_status ps_shard_create(ps_shard *sh, int64_t lo, int64_t hi, const rp_optim_config *cfg)
{
    memset(sh, 0, sizeof *sh);
    sh->lo = lo;
    sh->n = hi - lo;
    sh->slots = rp_optim_slots(cfg);
    size_t n = (size_t)(sh->n > 0 ? sh->n : 1);
    sh->values = rp_alloc(n * sizeof(float));
    sh->state = rp_alloc(n * (size_t)(sh->slots > 0 ? sh->slots : 1) * sizeof(float));
    if (!sh->values || !sh->state) {
        ps_shard_destroy(sh);
        return RP_ERROR(RP_ERR_NOMEM, "parameter server: cannot allocate a shard of %lld floats",
                        (long long)sh->n);
    }
    memset(sh->values, 0, n * sizeof(float));
    memset(sh->state, 0, n * (size_t)(sh->slots > 0 ? sh->slots : 1) * sizeof(float));
    return RP_OK;
}

void ps_shard_destroy(ps_shard *sh)
{
    rp_free(sh->values);
    rp_free(sh->state);
    sh->values = sh->state = NULL;
}

void ps_shard_apply(ps_shard *sh, const rp_optim_config *cfg, const float *grad, float lr,
                    int worker)
{
    sh->step++;
    sh->applied++;
    if (worker >= 0 && worker < RP_PS_MAX_WORKERS) sh->from_worker[worker]++;
    rp_optim_apply(cfg, sh->values, grad, sh->state, sh->n, lr, sh->step);
}

void ps_shard_load(ps_shard *sh, const float *values, const float *slots, int64_t slots_stride,
                   int64_t step)
{
    if (sh->n > 0) memcpy(sh->values, values, (size_t)sh->n * sizeof(float));
    for (int k = 0; k < sh->slots; k++) {
        float *dst = sh->state + (size_t)k * (size_t)sh->n;
        if (slots)
            memcpy(dst, slots + (size_t)k * (size_t)slots_stride, (size_t)sh->n * sizeof(float));
        else
            memset(dst, 0, (size_t)sh->n * sizeof(float));
    }
    sh->step = step;
    sh->applied = 0;
    memset(sh->from_worker, 0, sizeof sh->from_worker);
}

void ps_shard_save(const ps_shard *sh, float *values, float *slots, int64_t slots_stride)
{
    if (sh->n > 0) memcpy(values, sh->values, (size_t)sh->n * sizeof(float));
    for (int k = 0; slots && k < sh->slots; k++)
        memcpy(slots + (size_t)k * (size_t)slots_stride, sh->state + (size_t)k * (size_t)sh->n,
               (size_t)sh->n * sizeof(float));
}

/* ---- staleness clocks --------------------------------------------------------------- */

void ps_clocks_init(ps_clocks *c, int workers, int staleness)
{
    memset(c, 0, sizeof *c);
    c->workers = workers;
    c->staleness = staleness;
}

void ps_clocks_join(ps_clocks *c, int worker, uint64_t phase)
{
    if (phase > c->phase) {
        c->phase = phase;
        c->claims = 0;
    }
    c->joined[worker] = phase;
    c->left[worker] = false;
    c->clock[worker] = 0;
}

void ps_clocks_leave(ps_clocks *c, int worker)
{
    c->left[worker] = true;
}

void ps_clocks_tick(ps_clocks *c, int worker)
{
    c->clock[worker]++;
}

int64_t ps_clocks_of(const ps_clocks *c, int q)
{
    /* Not yet in the newest phase: about to start it at clock 0. Left it: holds no one back. */
    return c->joined[q] < c->phase ? 0 : c->left[q] ? INT64_MAX : c->clock[q];
}

bool ps_clocks_may_go(const ps_clocks *c, int worker, int *slowest)
{
    if (c->staleness < 0) return true;
    int64_t mine = c->clock[worker], least = INT64_MAX;
    int who = -1;
    for (int q = 0; q < c->workers; q++) {
        if (q == worker) continue;
        int64_t clock = ps_clocks_of(c, q);
        if (clock < least) {
            least = clock;
            who = q;
        }
    }
    if (who < 0 || mine - least <= c->staleness) return true;
    if (slowest) *slowest = who;
    return false;
}

int64_t ps_clocks_claim(ps_clocks *c)
{
    return c->claims++;
}
