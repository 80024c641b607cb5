/*
 * strategy.h - how replicas combine their work, as a table chosen once at
 * rp_replicator_create(): synchronous all-reduce (strategy_sync.c) and
 * asynchronous parameter servers (strategy_async.c), ZeRO-1's sharded
 * optimizer state (strategy_zero.c), and sync groups: all-reduce inside a
 * group, parameter servers between groups (strategy_groups.c).
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

#include "kernels/kernels.h"
#include "replicator/ps.h"
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
extern const rp_strategy rp_strategy_groups;

/* ---- helpers every strategy may use (strategy.c) ---------------------------------------- */

/*
 * Collectives over storage (the kernel table's: values, gradients, optimizer state) run on host
 * views. rp_strategy_view is rp_staging_view on the active table (the storage itself with a host
 * table; NULL with the error recorded when out of memory), and the storage itself when bytes is
 * 0 (a collective of nothing is still made); rp_strategy_commit uploads what the view received.
 */
void *rp_strategy_view(rp_staging *s, const void *storage, size_t bytes, bool download);
void rp_strategy_commit(void *storage, const void *view, size_t bytes);
/* Broadcasts count elements of storage from comm's rank 0, through s's host view. */
rp_status rp_strategy_broadcast_storage(rp_comm *comm, void *storage, int64_t count, rp_dtype dtype,
                                        rp_staging *s);

/* Broadcasts replica 0's values of params (and, if any, the optimizer's slots and steps). */
rp_status rp_strategy_broadcast_params(rp_replica *rep, rp_params *params);
rp_status rp_strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt);

/* Tickets of one run on the threads backend (no servers): an atomic counter. */
rp_status rp_strategy_local_claim(rp_replica *rep, int64_t *ticket);

/*
 * Every checksum_every steps (none when steps is not a multiple): one hash per trainable
 * parameter of params, all-gathered over comm (the replicas that must agree: rep->comm, or a sync
 * group's) and compared with its rank 0's; RP_ERR_MISMATCH names the first parameter that
 * differs and the replica (rank q of comm is replica rep->id - rank + q: groups are contiguous).
 * hashes: scratch of comm's size x trainable parameters.
 */
rp_status rp_strategy_checksum(rp_replica *rep, rp_comm *comm, rp_params *params, int64_t steps,
                               int64_t *hashes);

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

/* The parameter servers' configuration from the replicator's (cfg.ps, staleness, timeout) for an
 * optimizer of `cfg`: the async strategy's and the sync groups'. */
rp_ps_config rp_strategy_ps_config(const rp_replicator *r, const rp_optim_config *cfg);

/*
 * The threads backend's handles on a new set of parameter-server variables (the async strategy's
 * and the sync groups'): local replica 0 makes `count` worker handles on in-process servers into
 * *set (freeing the array an earlier, destroyed set left), every replica meets it at a barrier,
 * and then takes handle `index` into *ps (index < 0: none). RP_ERR_SHAPE if this replica's
 * numel is not replica 0's; RP_ERR_NOMEM; the barrier's errors.
 */
rp_status rp_strategy_ps_take(rp_replica *rep, rp_ps ***set, int count, int index, int64_t numel,
                              const rp_ps_config *pc, rp_ps **ps);

/* Batches of lockstep replicas: 0, 1, 2, ... on every replica, counted per replica per run. */
rp_status rp_strategy_lockstep_batch(rp_replica *rep, int64_t *index);

/* ---- gradient buckets: the order they start in (sync, ZeRO-1, sync groups) ------------- */

/*
 * Buckets reduced from backward's gradient-ready callbacks. Parameter i
 * touches buckets list[first[i] .. first[i+1]); a bucket is complete when
 * every parameter touching it is final in this backward pass, and buckets
 * start in index order only (a complete bucket waits for the ones before it),
 * so every replica reduces the same buckets in the same order whatever order
 * its backward finished them in. A bucket that completes again after it
 * started (a second backward before the step: gradient accumulation) sets
 * `again`: the step then reduces every bucket once more.
 */
typedef struct rp_bucket_order {
    int nparams, nbuckets;
    int *first, *list; /* [nparams + 1], [first[nparams]] */
    int *params;       /* [nbuckets] the parameters touching each bucket */
    int *ready;        /* [nbuckets] of those, final in this backward pass */
    int started;       /* buckets [0, started) have started since the last step */
    bool again;        /* a bucket completed a second time since it started */
} rp_bucket_order;

/* Starts bucket b's reduction (the strategy's own: all-reduce, reduce-scatter ...). */
typedef void (*rp_bucket_start_fn)(void *ctx, int b);

/*
 * Makes the order of nbuckets buckets from touch(ctx, i, mark, out): the number of distinct
 * buckets parameter i touches, written to out when it is not NULL; mark[nbuckets] (-1 before the
 * first parameter, each pass) is the callee's to remove repeats with. RP_ERR_NOMEM.
 */
rp_status rp_bucket_order_create(rp_bucket_order *o, int nparams, int nbuckets,
                                 int (*touch)(void *ctx, int i, int *mark, int *out), void *ctx);

/*
 * The sync strategies' buckets: contiguous ranges of params' gradient block of at least `bytes`,
 * cut at parameter boundaries from the end of the block (backward finishes the last parameters
 * first, so bucket 0 is ready first). *ranges (malloc'd, the caller frees it) gets lo, hi of
 * each bucket, back to back. RP_ERR_NOMEM.
 */
rp_status rp_bucket_order_cut(rp_bucket_order *o, const rp_params *params, size_t bytes,
                              int64_t **ranges);

void rp_bucket_order_destroy(rp_bucket_order *o);

/* Parameter i is final (the gradient-ready callback): starts the buckets that may start now. */
void rp_bucket_order_ready(rp_bucket_order *o, int i, rp_bucket_start_fn start, void *ctx);

/* At the step: starts every bucket that has not started (in order), every bucket once more if
 * one completed again, and resets the counts for the next backward pass. */
void rp_bucket_order_flush(rp_bucket_order *o, rp_bucket_start_fn start, void *ctx);

/*
 * The mean all-reduce of a parameter list's gradients over a communicator
 * (the sync strategy's over the replicas, a sync group's over the group), in
 * the buckets of rp_bucket_order_cut, each started from backward.
 *
 * Non-finite gradients: the mean of a NaN is a NaN on every member, so after
 * the all-reduce nobody can tell whose data made it. Each bucket is scanned
 * before its all-reduce (the first non-finite local element is remembered)
 * and after it (cache-hot, an OR over exponent bits). Only when a reduced
 * bucket is non-finite - identically on every member - do the members
 * exchange what they saw, and finish fails naming the replica whose own
 * gradient first held it (and sets rep->blame) and the parameter.
 */
typedef struct rp_grad_reducer {
    rp_replica *rep;
    rp_comm *comm; /* the members whose gradients are averaged; rank q is replica base + q */
    int base;
    const rp_params *params;
    float *grad; /* the gradient block (storage) */
    int64_t numel;
    const rp_kernels *k; /* the table its scans run on */
    rp_bucket_order order;
    int64_t *ranges;   /* [2 * buckets]: lo, hi of each in the gradient block */
    rp_bf16 *wire;     /* cfg.grad_dtype bf16: [the largest bucket] its payload (storage of k);
                          NULL for f32 */
    size_t wire_bytes;
    rp_staging stage;  /* the host view each bucket's all-reduce runs on */
    int64_t *scratch;  /* [2 * comm size]: the non-finite exchange */
    int64_t local_bad; /* first element of the block non-finite before its all-reduce, or -1 */
    float local_value; /* its value */
    bool reduced_bad;  /* a reduced bucket was non-finite (the same on every member) */
    rp_status error;   /* first failure inside a callback, re-raised by finish */
    char message[1024];
} rp_grad_reducer;

/* For params' trainable gradients over comm (rank q = replica rep->id - rank + q). RP_ERR_NOMEM. */
rp_status rp_grad_reducer_init(rp_grad_reducer *g, rp_replica *rep, rp_comm *comm,
                               const rp_params *params);
void rp_grad_reducer_free(rp_grad_reducer *g);
/* Whether param's gradient lies in this reducer's block; if so, counts it final (the callback). */
bool rp_grad_reducer_ready(rp_grad_reducer *g, const rp_tensor *param);
/*
 * Before the update: every bucket reduced exactly once since the last step (the rest start now),
 * then a failure of a callback's all-reduce, or the agreed non-finite error (RP_ERR_NUMERIC).
 */
rp_status rp_grad_reducer_finish(rp_grad_reducer *g);

#endif
