/*
 * async.c - asynchronous data parallelism: the wrapped optimizer whose
 * update is a push of the gradients to the parameter servers and a pull of
 * the current values (replicator/ps.h), and the calls that move its state
 * in and out of the servers for checkpoints.
 *
 * The optimizer keeps its local state block, unused while training: the
 * servers hold the live slots. rp_replica_optimizer_fetch() copies them
 * back, so a checkpoint of an async run is written by the same code, in the
 * same format, as a sync one, and either regime can resume the other's.
 *
 * Sets. Each async optimizer is one set of variables on the servers,
 * numbered in creation order (the same on every replica). On the threads
 * backend local replica 0 creates the set's handles and each replica takes
 * its own after a barrier; under MPI each rank's replica creates its handle
 * and the servers make their shards when the set's first message arrives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps_internal.h"
#include "replicator/replicator_internal.h"

typedef struct rp_async {
    rp_replica *rep;
    rp_optimizer *opt;
    rp_params *params;
    rp_ps *ps;
    int slot; /* in rep->async_slots: the same on every replica, as they create in the same order */
    struct rp_async *next;
} rp_async;

static rp_status async_update(rp_optimizer *opt, float lr, void *ctx)
{
    rp_async *a = ctx;
    /* rp_optimizer_step has checked lr and found every gradient finite. */
    return rp_ps_exchange(a->ps, rp_params_grad(a->params), lr, rp_params_data(a->params));
}

static void async_release(void *ctx)
{
    rp_async *a = ctx;
    for (rp_async **p = &a->rep->asyncs; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    a->rep->async_slots &= ~(1u << a->slot);
    rp_ps_destroy(a->ps);
    free(a);
}

static rp_async *find(const rp_replica *rep, const rp_optimizer *opt)
{
    for (rp_async *a = rep->asyncs; a; a = a->next)
        if (a->opt == opt) return a;
    return NULL;
}

void rp_async_join(rp_replica *rep, uint64_t phase)
{
    /* A failure here (a server gone) comes back, named, from the next push or pull. */
    for (rp_async *a = rep->asyncs; a; a = a->next) (void)rp_ps_join(a->ps, phase);
}

void rp_async_leave(rp_replica *rep)
{
    if (!rep->asyncs) return;
    /* The step's own error, if any, is the one to report, not a leave that failed because of it. */
    rp_status status = rp_last_status();
    char message[1024];
    snprintf(message, sizeof message, "%s", rp_last_error());
    for (rp_async *a = rep->asyncs; a; a = a->next) (void)rp_ps_leave(a->ps);
    if (status != RP_OK) rp_error_set(status, NULL, 0, "%s", message);
    else rp_error_clear();
}

/* This replica's handle on set k: made by local replica 0 (threads) or by this rank (MPI). */
static rp_status take_handle(rp_replica *rep, int k, int64_t numel, const rp_ps_config *pc, rp_ps **ps)
{
    rp_replicator *r = rep->r;
    if (r->ps_group) {
        if (r->n > 1)
            return RP_ERROR(RP_ERR_UNSUPPORTED, "asynchronous training under MPI runs one replica per rank "
                            "(this rank has %d): start more ranks instead of --replicas", r->n);
        return rp_ps_mpi_create(ps, r->ps_group, numel, pc);
    }
    if (rep->local == 0) {
        /* The slot's array of an earlier, destroyed set: every replica took its handle then. */
        free(r->ps_sets[k]);
        r->ps_sets[k] = calloc((size_t)r->n, sizeof(rp_ps *));
        if (!r->ps_sets[k]) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d handles", r->n);
        RP_CHECK(rp_ps_threads_create(r->ps_sets[k], r->n, numel, pc));
    }
    RP_CHECK(rp_comm_barrier(rep->comm));
    *ps = r->ps_sets[k][rep->local];
    r->ps_sets[k][rep->local] = NULL;
    if (rp_ps_numel(*ps) != numel)
        return RP_ERROR(RP_ERR_SHAPE, "replica %d has %lld trainable values, replica 0 %lld: every replica "
                        "must build the same model", rep->id, (long long)numel, (long long)rp_ps_numel(*ps));
    return RP_OK;
}

rp_status rp_async_optimizer_create(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                    const rp_optim_config *cfg)
{
    rp_replicator *r = rep->r;
    int k = 0;
    while (k < RP_ASYNC_SETS_MAX && (rep->async_slots >> k & 1u)) k++;
    if (k == RP_ASYNC_SETS_MAX)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "at most %d async optimizers alive per replica", RP_ASYNC_SETS_MAX);
    rp_ps_config pc = rp_ps_config_default();
    pc.servers = r->cfg.ps;
    pc.staleness = r->cfg.staleness;
    pc.timeout_s = r->cfg.timeout_s;
    pc.optim = *cfg;
    int64_t numel = rp_params_trainable_numel(params);
    rp_ps *ps = NULL;
    RP_CHECK(take_handle(rep, k, numel, &pc, &ps));
    rp_async *a = calloc(1, sizeof *a);
    if (!a) {
        rp_ps_destroy(ps);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the asynchronous optimizer");
    }
    a->rep = rep;
    a->opt = opt;
    a->params = params;
    a->ps = ps;
    a->slot = k;
    rep->async_slots |= 1u << k;
    a->next = rep->asyncs;
    rep->asyncs = a;
    rp_optimizer_set_hooks(opt, NULL, NULL, async_release, a);
    rp_optimizer_set_update(opt, async_update);
    RP_CHECK(rp_ps_join(ps, r->generation));
    /* Replica 0's initial values become everyone's, as in sync training. */
    if (rep->id == 0) RP_CHECK(rp_ps_init(ps, rp_params_data(params), NULL, 0));
    RP_CHECK(rp_comm_barrier(rep->comm));
    RP_CHECK(rp_ps_pull(ps, rp_params_data(params)));
    rp_debug("async optimizer: set %d, %lld values on %d %s parameter servers, staleness %d", k,
             (long long)numel, pc.servers, rp_ps_backend(ps), pc.staleness);
    return RP_OK;
}

rp_status rp_replica_optimizer_fetch(rp_replica *rep, rp_optimizer *opt)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    rp_async *a = find(rep, opt);
    if (!a) return RP_OK;
    int64_t step = 0;
    RP_CHECK(rp_ps_snapshot(a->ps, rp_params_data(a->params), rp_optimizer_state(opt, NULL), &step));
    rp_optimizer_set_steps(opt, step);
    return RP_OK;
}

rp_status rp_replica_optimizer_publish(rp_replica *rep, rp_optimizer *opt)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    rp_params *params = rp_optimizer_params(opt);
    int64_t steps = rp_optimizer_steps(opt), nstate = 0;
    float *state = rp_optimizer_state(opt, &nstate);
    rp_async *a = find(rep, opt);
    if (a) {
        if (rep->id == 0) RP_CHECK(rp_ps_init(a->ps, rp_params_data(params), state, steps));
        RP_CHECK(rp_comm_barrier(rep->comm));
        RP_CHECK(rp_ps_pull(a->ps, rp_params_data(params)));
    } else {
        RP_CHECK(rp_replica_broadcast_params(rep, params));
        if (nstate > 0) RP_CHECK(rp_comm_broadcast(rep->comm, state, nstate, RP_F32, 0));
    }
    RP_CHECK(rp_comm_broadcast(rep->comm, &steps, 1, RP_I64, 0));
    rp_optimizer_set_steps(opt, steps);
    return RP_OK;
}

rp_status rp_replica_claim(rp_replica *rep, int64_t *ticket)
{
    if (!rep || !ticket) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    rp_async *oldest = rep->asyncs;
    while (oldest && oldest->next) oldest = oldest->next;
    if (oldest) return rp_ps_claim(oldest->ps, ticket);
    if (rep->r->ps_group || strcmp(rp_comm_backend(rep->comm), "threads") != 0)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "rp_replica_claim across processes needs the async regime "
                        "and an optimizer made by rp_replica_optimizer_create() first");
    *ticket = __atomic_fetch_add(&rep->r->claims, 1, __ATOMIC_RELAXED);
    return RP_OK;
}
