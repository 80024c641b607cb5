/*
 * strategy.h - how replicas combine their work, as a table chosen once at
 * rp_replicator_create(): synchronous all-reduce (strategy_sync.c) and
 * asynchronous parameter servers (strategy_async.c), ZeRO-1's sharded
 * optimizer state (strategy_zero.c); sync groups will be another table of
 * the same shape.
 *
 * replicator.c calls only these slots and never asks which table it holds.
 * A NULL slot means "nothing to do" (the run path tests the pointer, so a
 * strategy without phases costs nothing per run). State: `state` per
 * process (create/destroy), rep->strategy per replica
 * (replica_init/replica_destroy), and one context per wrapped optimizer,
 * installed with rp_optimizer_add_hooks() and freed by its release.
 */
#ifndef RP_STRATEGY_H
#define RP_STRATEGY_H

#include "replicator/replicator_internal.h"

typedef struct rp_strategy {
    const char *name;
    /* The replicas hold bitwise identical parameters after every step, so the runtime may
       compare them (the plain-optimizer check after each run). */
    bool identical;
    /* The replicas meet in every step (each trains its shard of every batch, and the step's
       collectives join them); false: they step independently within a run. */
    bool lockstep;
    /* Each replica's optimizer holds a shard of the state: fetch gathers it before a checkpoint. */
    bool sharded;
    /*
     * Per process, before the replicas' communicators exist: may take ranks of the job for
     * a role of its own (async: the last cfg.ps ranks serve). Sets r->server on such a rank
     * and returns, in *world, the communicator the replicas split from (or NULL: the
     * runtime makes it). NULL slot: nothing.
     */
    rp_status (*create)(rp_replicator *r, bool mpi, rp_comm **world);
    void (*destroy)(rp_replicator *r);
    /* Per replica; replica_destroy detaches optimizers still alive (see runtime.h: teardown). */
    rp_status (*replica_init)(rp_replica *rep);
    void (*replica_destroy)(rp_replica *rep);
    /* Registered on the replica's tape at create, ctx = the replica. */
    rp_grad_ready_fn grad_ready;
    /* Wraps a fresh plain optimizer (collective); on error the caller destroys opt. */
    rp_status (*optimizer_create)(rp_replica *rep, rp_optimizer *opt, rp_params *params,
                                  const rp_optim_config *cfg);
    /* Whether opt is one of this replica's wrapped optimizers. */
    bool (*owns)(const rp_replica *rep, const rp_optimizer *opt);
    /* Around each run of a replica (async: join/leave the servers' phase). */
    void (*phase_begin)(rp_replica *rep, uint64_t phase);
    void (*phase_end)(rp_replica *rep);
    /* Checkpoint state out of / into the strategy. */
    rp_status (*fetch)(rp_replica *rep, rp_optimizer *opt);
    rp_status (*publish)(rp_replica *rep, rp_optimizer *opt);
    /* The shared work queue (rp_replica_claim). */
    rp_status (*claim)(rp_replica *rep, int64_t *ticket);
    /* The run's next batch index for this replica (rp_replica_next_batch). */
    rp_status (*next_batch)(rp_replica *rep, int64_t *index);
    /* The loop of a rank this strategy took for itself (r->server). */
    rp_status (*serve)(rp_replicator *r);
    /* Global-norm clipping of a wrapped optimizer's reduced gradients (rp_replica_clip_grad_norm);
       NULL: rp_clip_grad_norm of the whole block. */
    rp_status (*clip)(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm);
} rp_strategy;

extern const rp_strategy rp_strategy_sync;
extern const rp_strategy rp_strategy_async;
extern const rp_strategy rp_strategy_zero;

/* ---- helpers every strategy may use (strategy.c) ---------------------------------------- */

/* A 64-bit hash of n floats' bits (four lanes, at memory speed). */
uint64_t rp_strategy_hash_floats(const float *x, int64_t n);

/* Broadcasts replica 0's values of params (and, if any, the optimizer's slots and steps). */
rp_status rp_strategy_broadcast_params(rp_replica *rep, rp_params *params);
rp_status rp_strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt);

/* Tickets of one run on the threads backend (no servers): an atomic counter. */
rp_status rp_strategy_local_claim(rp_replica *rep, int64_t *ticket);

/*
 * Every checksum_every steps (none when steps is not a multiple): one hash per trainable
 * parameter of params, all-gathered and compared with replica 0's; RP_ERR_MISMATCH names the
 * first that differs. hashes: scratch of count x trainable parameters.
 */
rp_status rp_strategy_checksum(rp_replica *rep, rp_params *params, int64_t steps, int64_t *hashes);

/*
 * Global-norm clipping: of the whole gradient block (every replica holds the reduced gradients),
 * or of the optimizer's range, the norm all-reduced over the replicas (each holds its shard).
 */
rp_status rp_strategy_clip_full(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm);
rp_status rp_strategy_clip_range(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm);

/*
 * A strategy's per-replica state: rep->strategy = size zeroed bytes (freed by the strategy's
 * replica_destroy with free()). RP_ERR_NOMEM naming the replica.
 */
rp_status rp_strategy_replica_alloc(rp_replica *rep, size_t size);

/*
 * At replica_destroy: records the error for `alive` (> 0) optimizers the user did not destroy
 * before the replicator; nothing for 0.
 */
void rp_strategy_orphans(const rp_replica *rep, int alive);

/*
 * The name of the trainable parameter holding element `at` of params' gradient (or value)
 * block, with the element's index in it and its numel; "(none)" (index at, numel the block's)
 * past the end. For messages that blame an element.
 */
const char *rp_strategy_param_at(const rp_params *params, int64_t at, int64_t *index,
                                 int64_t *numel);

/* Batches of lockstep replicas: 0, 1, 2, ... on every replica, counted per replica per run. */
rp_status rp_strategy_lockstep_batch(rp_replica *rep, int64_t *index);

#endif
