/*
 * strategy.h - how replicas combine their work, as a table chosen once at
 * rp_replicator_create() by cfg.strategy (strategy_of): synchronous all-reduce (strategy_sync.c)
 * and asynchronous parameter servers (strategy_async.c), ZeRO-1's sharded optimizer state
 * (strategy_zero.c), and sync groups: all-reduce inside a group, parameter servers between groups
 * (strategy_groups.c).
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
#include "replicator/plan.h"
#include "replicator/ps.h"
#include "replicator/replicator_internal.h"
#include "tensor/tape_residency.h"

typedef struct strategy_table {
    const char *name;
    /* The replicas hold bitwise identical parameters after every step, so the runtime may
       compare them (the plain-optimizer check after each run). */
    bool identical;
    /* The replicas meet in every step (each trains its shard of every batch, and the step's
       collectives join them); false: they step independently within a run. */
    bool lockstep;
    /* Each replica's optimizer holds a shard of the state: fetch gathers it before a checkpoint. */
    bool sharded;
    /* It uses parameter servers (cfg.ps, cfg.staleness apply). */
    bool servers;
    /*
     * The table that runs this choice on r's layout (r->n replicas here, `mpi`): another where a
     * layout makes the strategy another's (sync groups of one replica each are async training).
     * NULL slot: this one.
     */
    const struct strategy_table *(*resolve)(const rp_replicator *r, bool mpi);
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
    /*
     * The planner's prediction (replicator/plan.h: rp_plan_runtime, whose arguments, checked,
     * and errors these are) of worker `id` of `replicas` on layout cfg, training params with oc:
     * its memory and this strategy's traffic lines in one step, from the rules of the strategy's
     * own step. Required.
     */
    rp_status (*plan)(const rp_config *cfg, int replicas, int id, const rp_params *params,
                      const rp_optim_config *oc, rp_plan_worker *w);
    /* The runtime's buffers for a wrapped optimizer (rp_replica_strategy_bytes); NULL slot: 0. */
    size_t (*bytes)(const rp_replica *rep, const rp_optimizer *opt, bool resident);
    /* The parameter servers' memory, process-wide (rp_plan_servers); NULL slot: none. */
    int64_t (*plan_servers)(const rp_config *cfg, const rp_params *params,
                            const rp_optim_config *oc);
} strategy_table;

extern const strategy_table strategy_sync;
extern const strategy_table strategy_async;
extern const strategy_table strategy_zero;
extern const strategy_table strategy_zero2;
extern const strategy_table strategy_zero3;
extern const strategy_table strategy_groups;

/* The table of a choice (strategy_table.c), NULL for a value that names none. */
const strategy_table *strategy_of(rp_strategy_kind kind);
/* *out = the choice rp_strategy_name() calls `name`; RP_ERR_INVALID naming --strategy's values. */
rp_status strategy_parse(const char *name, rp_strategy_kind *out);

/* ---- helpers every strategy may use (strategy.c) ---------------------------------------- */

/*
 * Collectives over storage (the kernel table's: values, gradients, optimizer state) run on host
 * views. strategy_view is kernels_staging_view on the active table (the storage itself with a host
 * table; NULL with the error recorded when out of memory), and the storage itself when bytes is
 * 0 (a collective of nothing is still made); strategy_commit uploads what the view received.
 */
void *strategy_view(kernels_staging *s, const void *storage, size_t bytes, bool download);
void strategy_commit(void *storage, const void *view, size_t bytes);
/* Broadcasts count elements of storage from comm's rank 0, through s's host view. */
rp_status strategy_broadcast_storage(rp_comm *comm, void *storage, int64_t count, rp_dtype dtype,
                                     kernels_staging *s);

/* Broadcasts replica 0's values of params (and, if any, the optimizer's slots and steps). */
rp_status strategy_broadcast_params(rp_replica *rep, rp_params *params);
rp_status strategy_broadcast_state(rp_replica *rep, rp_optimizer *opt);

/* Tickets of one run on the threads backend (no servers): an atomic counter. */
rp_status strategy_local_claim(rp_replica *rep, int64_t *ticket);

/*
 * Every checksum_every steps (none when steps is not a multiple): one hash per trainable
 * parameter of params, all-gathered over comm (the replicas that must agree: rep->comm, or a sync
 * group's) and compared with its rank 0's; RP_ERR_MISMATCH names the first parameter that
 * differs and the replica (rank q of comm is replica rep->id - rank + q: groups are contiguous).
 * hashes: scratch of comm's size x trainable parameters.
 */
rp_status strategy_checksum(rp_replica *rep, rp_comm *comm, rp_params *params, int64_t steps,
                            int64_t *hashes);

/*
 * Global-norm clipping: of the whole gradient block (every replica holds the reduced gradients),
 * or of the optimizer's range, the norm all-reduced over the replicas (each holds its shard).
 */
rp_status strategy_clip_full(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm);
rp_status strategy_clip_range(rp_replica *rep, rp_comm *comm, rp_optimizer *opt, float max_norm,
                              float *norm);

/* ---- the bookkeeping every strategy shares: its wrapped optimizers ------------------------ */

/*
 * The head of every strategy's per-optimizer context (its first member, so a context and its
 * link convert both ways): the replica that made it, the optimizer it wraps, and its place in the
 * replica's list. rep is NULL once the replicator was destroyed while the optimizer lived on.
 */
typedef struct strategy_link {
    rp_replica *rep;
    rp_optimizer *opt;
    int slot; /* its set slot (async, sync groups: the same on every replica), or -1 */
    struct strategy_link *next;
} strategy_link;

/* Every strategy's per-replica state (rep->strategy). */
typedef struct strategy_replica {
    strategy_link *opts; /* this replica's wrapped optimizers, newest first */
    unsigned slots;      /* bit k: an optimizer alive in set slot k */
} strategy_replica;

/* replica_init: rep->strategy = a zeroed strategy_replica. RP_ERR_NOMEM naming the replica. */
rp_status strategy_replica_init(rp_replica *rep);

/*
 * replica_destroy: every optimizer still wrapped is cut loose (its link's rep = NULL, then
 * detach(link) if detach is not NULL: a strategy's handles that must go now), the error for them
 * is recorded (the user should have destroyed them first), and rep->strategy is freed.
 */
void strategy_replica_fini(rp_replica *rep, void (*detach)(strategy_link *link));
/* replica_destroy of a strategy with nothing to detach: strategy_replica_fini(rep, NULL). */
void strategy_replica_destroy(rp_replica *rep);

/* The first set slot free on this replica, below max; -1 when all are taken. */
int strategy_slot_free(const rp_replica *rep, int max);

/* Puts link (wrapping opt, in set slot `slot` or -1) at the head of rep's list. */
void strategy_attach(rp_replica *rep, strategy_link *link, rp_optimizer *opt, int slot);

/* Takes link off its replica's list and frees its slot (at the optimizer's release). */
void strategy_detach(strategy_link *link);

/* The link of rep's wrapped opt, or NULL; the oldest alive, or NULL. */
strategy_link *strategy_find(const rp_replica *rep, const rp_optimizer *opt);
strategy_link *strategy_oldest(const rp_replica *rep);

/* Whether opt is one of this replica's wrapped optimizers. */
bool strategy_owns(const rp_replica *rep, const rp_optimizer *opt);

/* RP_OK while link's replicator lives; RP_ERR_INVALID (the optimizer outlived it) after. */
rp_status strategy_alive(const strategy_link *link);

/*
 * The name of the trainable parameter holding element `at` of params' gradient (or value)
 * block, with the element's index in it and its numel; "(none)" (index at, numel the block's)
 * past the end. For messages that blame an element.
 */
const char *strategy_param_at(const rp_params *params, int64_t at, int64_t *index, int64_t *numel);

/* The parameter servers' configuration from the replicator's (cfg.ps, staleness, timeout) for an
 * optimizer of `cfg`: the async strategy's and the sync groups'. */
rp_ps_config strategy_ps_config(const rp_replicator *r, const rp_optim_config *cfg);

/*
 * The threads backend's handles on a new set of parameter-server variables (the async strategy's
 * and the sync groups'): local replica 0 makes `count` worker handles on in-process servers into
 * *set (freeing the array an earlier, destroyed set left), every replica meets it at a barrier,
 * and then takes handle `index` into *ps (index < 0: none). RP_ERR_SHAPE if this replica's
 * numel is not replica 0's; RP_ERR_NOMEM; the barrier's errors.
 */
rp_status strategy_ps_take(rp_replica *rep, rp_ps ***set, int count, int index, int64_t numel,
                           const rp_ps_config *pc, rp_ps **ps);

/* Batches of lockstep replicas: 0, 1, 2, ... on every replica, counted per replica per run. */
rp_status strategy_lockstep_batch(rp_replica *rep, int64_t *index);

/* ---- what every plan slot shares ----------------------------------------------------------- */

/*
 * A plan's start: oc checked (rp_optim_check's errors), then w->worker = id, replicas,
 * params, grads, optim (the whole state: slots x trainable values), strategy = 0, groups = 1.
 */
rp_status strategy_plan_base(int replicas, int id, const rp_params *params,
                             const rp_optim_config *oc, rp_plan_worker *w);

/*
 * The all-reduce buckets reducer_init would cut for params in buckets of `bytes`
 * (strategy_bucket_order_cut): how many, and the values of the largest (0 without parameters).
 * RP_ERR_NOMEM.
 */
rp_status strategy_plan_buckets(const rp_params *params, size_t bytes, int *nbuckets,
                                int64_t *most);

/* The bf16 copy of the largest all-reduce bucket (`most` values) a reducer keeps for
   cfg.grad_dtype bf16; 0 for f32. */
int64_t strategy_plan_wire(const rp_config *cfg, int64_t most);

/* ---- gradient buckets: the order they start in (sync, ZeRO-1, sync groups) ------------- */

/*
 * Buckets reduced from backward's gradient-ready callbacks. Parameter i
 * touches buckets list[first[i] .. first[i+1]); a bucket is complete when
 * every parameter touching it is final in this backward pass, and buckets
 * start in index order only (a complete bucket waits for the ones before it),
 * so every replica reduces the same buckets in the same order whatever order
 * its backward finished them in. A parameter of a bucket that has started
 * made final again (a second backward before the step: gradient
 * accumulation) sets `again`: the step then reduces every bucket once more.
 * (Any one, not the whole bucket again: a second pass that leaves out some
 * of a bucket's parameters still changed the others' gradients.)
 */
typedef struct strategy_bucket_order {
    int nparams, nbuckets;
    int *first, *list; /* [nparams + 1], [first[nparams]] */
    int *params;       /* [nbuckets] the parameters touching each bucket */
    int *ready;        /* [nbuckets] of those, final in this backward pass */
    int started;       /* buckets [0, started) have started since the last step */
    bool again;        /* a started bucket's gradient changed since it started */
} strategy_bucket_order;

/* Starts bucket b's reduction (the strategy's own: all-reduce, reduce-scatter ...). */
typedef void (*strategy_bucket_start_fn)(void *ctx, int b);

/*
 * Makes the order of nbuckets buckets from touch(ctx, i, mark, out): the number of distinct
 * buckets parameter i touches, written to out when it is not NULL; mark[nbuckets] (-1 before the
 * first parameter, each pass) is the callee's to remove repeats with. RP_ERR_NOMEM.
 */
rp_status strategy_bucket_order_create(strategy_bucket_order *o, int nparams, int nbuckets,
                                       int (*touch)(void *ctx, int i, int *mark, int *out),
                                       void *ctx);

/*
 * The sync strategies' buckets: contiguous ranges of params' gradient block of at least `bytes`,
 * cut at parameter boundaries from the end of the block (backward finishes the last parameters
 * first, so bucket 0 is ready first). *ranges (malloc'd, the caller frees it) gets lo, hi of
 * each bucket, back to back. RP_ERR_NOMEM.
 */
rp_status strategy_bucket_order_cut(strategy_bucket_order *o, const rp_params *params, size_t bytes,
                                    int64_t **ranges);

void strategy_bucket_order_destroy(strategy_bucket_order *o);

/*
 * A cut order's parameters by bucket: bucket b holds the parameters [(*first)[b + 1],
 * (*first)[b]) (malloc'd, nbuckets + 1 entries, the caller frees it). RP_ERR_NOMEM.
 */
rp_status strategy_bucket_params(const strategy_bucket_order *o, int **first);

/*
 * Points the values (grad false) or the gradients (grad true) of params' trainable parameters
 * [i0, i1) at base, which stands for position a of the block: memory of a parameter's own (a
 * gather buffer, a gradient buffer), or the block itself (base = block + a).
 */
void strategy_point(const rp_params *params, int i0, int i1, int64_t a, float *base, bool grad);

/* Parameter i is final (the gradient-ready callback): starts the buckets that may start now. */
void strategy_bucket_order_ready(strategy_bucket_order *o, int i, strategy_bucket_start_fn start,
                                 void *ctx);

/* At the step: starts every bucket that has not started (in order), every bucket once more if
 * a started one changed, and resets the counts for the next backward pass. */
void strategy_bucket_order_flush(strategy_bucket_order *o, strategy_bucket_start_fn start,
                                 void *ctx);

/*
 * The mean reduction of a parameter list's gradients over a communicator, in buckets started
 * from backward, parameterised by its collective:
 *  - RP_GRAD_ALL_REDUCE (the sync strategy over the replicas, a sync group's over the group):
 *    the buckets of strategy_bucket_order_cut, each all-reduced in place, so every member holds the
 *    whole mean gradient;
 *  - RP_GRAD_REDUCE_SCATTER (ZeRO): the P values are cut into N shards of S = ceil(P / N)
 *    (member r owns [rS, (r+1)S) clipped to P: the last may be short or empty); a bucket is a
 *    range [a, b) of shard-local positions, cut from the end of the shard, covering the segment
 *    [qS + a, qS + b) of every shard q, packed back to back (zero-padded past P) for one
 *    reduce-scatter into this member's shard of the mean (sgrad). finish puts the reduced shard
 *    in place in the gradient block; the rest of the block keeps the local gradients.
 *  - RP_GRAD_ALL_REDUCE_SHARD (ZeRO-2 and 3): the all-reduce's buckets, in backward's order,
 *    and ZeRO's shards: each bucket is reduce-scattered in place to the owners of its parts
 *    (rp_comm_reduce_scatter_v: the shards cut a contiguous bucket into one or two non-empty
 *    blocks, which a uniform reduce-scatter could serve only by padding every member's part),
 *    the member keeps its part in its place in the gradient block (added to it after a second
 *    backward) and releases the rest of the bucket's gradients (mem_discard: zeros, pages given
 *    back). So no whole gradient outlives its bucket: a member holds its shard plus the buckets
 *    backward has not finished, and at finish the block holds the reduced shard, zeros
 *    elsewhere. (Backward writes a bucket into a gradient buffer, not the block, so the shard's
 *    place is free for what is kept.)
 * The reductions add the members in rank order, and a second backward before the step
 * (gradient accumulation) reduces every bucket once more at the step (by linearity, the mean of
 * the accumulated gradients).
 *
 * Non-finite gradients: the mean of a NaN is a NaN, so after the reduction nobody can tell whose
 * data made it. Each bucket is scanned before its reduction (the first non-finite local element
 * is remembered) and after it (cache-hot). All-reduce: a reduced bucket is non-finite on every
 * member alike, so only then do the members exchange what they saw (housekeeping), and finish
 * fails naming the replica whose own gradient first held it (and sets rep->blame) and the
 * parameter. Reduce-scatter and all-reduce-shard: each member saw only its shard, so the
 * members always exchange what they saw (one all-gather of 3 int64 per step) and agree on the
 * same error.
 */
typedef enum {
    RP_GRAD_ALL_REDUCE = 0,
    RP_GRAD_REDUCE_SCATTER,
    RP_GRAD_ALL_REDUCE_SHARD,
} reducer_collective;

/* ZeRO-2 and 3's gradient buffers (reducer.gbuf), and where a bucket's gradients are. */
#define REDUCER_GRAD_BUFFERS 2
#define REDUCER_IN_BLOCK     (-1) /* written in the block: no buffer was free */
#define REDUCER_UNTOUCHED    (-2) /* nothing written since its reduction: zeros, in the block */
/* reducer.kept[b]: what of bucket b's shard part is kept since the step, and where. */
#define REDUCER_KEPT       1 /* in place in the gradient block */
#define REDUCER_KEPT_ASIDE 2 /* in sgrad, while backward writes the bucket in the block again */

typedef struct reducer {
    reducer_collective collective;
    rp_replica *rep;
    rp_comm *comm; /* the members whose gradients are averaged; rank q is replica base + q */
    int base, rank, size;
    const rp_params *params;
    float *grad; /* the gradient block (storage) */
    int64_t numel;
    const kernels_table *k; /* the table its scans run on */
    strategy_bucket_order order;
    /* [2 * buckets]: lo, hi of each; in the gradient block (all-reduce) or shard-local
       positions (reduce-scatter) */
    int64_t *ranges;
    /* Sharded (reduce-scatter, all-reduce-shard): S, this member's shard [lo, hi) of the block,
       the length of a gather bucket; and the gather buckets, shard-local [lo, hi) pairs (the
       reduce-scatter's own buckets; all-reduce-shard's are block ranges, these its own). */
    int64_t shard, lo, hi, chunk;
    int64_t *gather_ranges;
    int ngather;
    unsigned char *kept; /* all-reduce-shard: [buckets] 0, REDUCER_KEPT or REDUCER_KEPT_ASIDE */
    /* All-reduce-shard: the gradient buffers (grad_reducer.c), each as long as the largest
       bucket, that a bucket's gradients are written into while backward fills it instead of
       the block's pages; gbuf_bucket[s] the bucket buffer s holds or -1; gwhere[b] the buffer
       bucket b is in, REDUCER_IN_BLOCK or REDUCER_UNTOUCHED; bfirst[buckets + 1] the buckets'
       parameters (strategy_bucket_params); spilled counts buckets written in the block. */
    float *gbuf[REDUCER_GRAD_BUFFERS];
    int gbuf_bucket[REDUCER_GRAD_BUFFERS];
    int ngbuf;
    int64_t gbuf_len, gbuf_used[REDUCER_GRAD_BUFFERS]; /* used: the values resident of each */
    int *gwhere, *bfirst;
    int64_t spilled;
    bool release_kept; /* all-reduce-shard: the gradient buffers hold only what is in flight,
                          and sgrad's pages go back once added (ZeRO-3) */
    /* Reduce-scatter: [S] this member's shard of the mean gradient (storage); all-reduce-shard:
       the kept parts set aside (REDUCER_KEPT_ASIDE), allocated at the first need, else NULL. */
    float *sgrad;
    float *pack;   /* sharded: [N * chunk] one bucket's segments, back to back (storage) */
    float *one;    /* sharded: [chunk] one segment, zero-padded (storage) */
    rp_bf16 *wire; /* cfg.grad_dtype bf16 (storage), NULL for f32: the payload rounded
                      (all-reduce: [the largest bucket]; reduce-scatter: [N * chunk] the packed
                      segments, then [chunk] the reduced segment) */
    size_t sgrad_bytes, pack_bytes, one_bytes, wire_bytes; /* what mem_free takes back */
    kernels_staging stage, recv; /* the host views a collective sends from (all-reduce: in place)
                               and receives into */
    int64_t *scratch;    /* [comm size x 2] the non-finite exchange (all-reduce); [comm size x
                            max(3, trainable parameters)] the finiteness exchange, free for the
                            strategy's checksums between steps (reduce-scatter) */
    int64_t local_bad;   /* first element of the block non-finite before its reduction, or -1 */
    float local_value;   /* its value */
    int64_t reduced_bad; /* first element of this member's reduced gradients non-finite, or -1 */
    float reduced_value; /* its value (all-reduce) */
    /* HSDP (reducer_set_replicas): the members across groups that hold this member's shard,
       and every member of the data axis (the finiteness agreement, the state's scatter); NULL
       and comm without it. all_base, all_size: replica all_base + q is rank q of `all`. */
    rp_comm *repl, *all;
    int all_base, all_size;
    rp_status error; /* first failure inside a callback, re-raised by finish */
    char message[1024];
} reducer;

/*
 * For params' trainable gradients over comm (rank q = replica rep->id - rank + q), in buckets of
 * rep's cfg.bucket_bytes, the payload in cfg.grad_dtype. RP_ERR_NOMEM.
 */
rp_status reducer_init(reducer *g, rp_replica *rep, rp_comm *comm, const rp_params *params,
                       reducer_collective collective);
/*
 * HSDP, for a sharded reducer over one group of `all` (comm): finish all-reduces (mean) the
 * reduced shard over repl (the groups' members that hold the same shard) before the members of
 * `all` agree that it is finite, and the state's scatter broadcasts from `all`'s rank 0.
 * RP_ERR_NOMEM.
 */
rp_status reducer_set_replicas(reducer *g, rp_comm *repl, rp_comm *all);
void reducer_free(reducer *g);
/* Its buffers' bytes (sgrad, pack, one, wire), or those resident now (kernels_resident_bytes). */
size_t reducer_bytes(const reducer *g, bool resident);
/* Whether param's gradient lies in this reducer's block; if so, counts it final (the callback). */
bool reducer_ready(reducer *g, const rp_tensor *param);
/*
 * All-reduce-shard: backward is about to write param's gradient (tape_residency.h's gradient
 * hook). Whether param is this reducer's; if so, and its bucket has had nothing written since
 * its last reduction, the bucket's gradients go into a free gradient buffer (zeroed).
 */
bool reducer_grad_target(reducer *g, const rp_tensor *param);
/* Records a failure of the step's own (the first one wins), re-raised by finish. */
void reducer_fail(reducer *g, rp_status status);
/*
 * Before the update: every bucket reduced exactly once since the last step (the rest start now),
 * then a failure of a callback's collective, or the agreed non-finite error (RP_ERR_NUMERIC);
 * reduce-scatter: the reduced shard is then in place in the gradient block.
 */
rp_status reducer_finish(reducer *g);

/*
 * Sharded reducers (reduce-scatter, all-reduce-shard): all-gathers a sharded array bucket by bucket
 * - `mine` holds this member's shard (position i of the shard at mine[i]); on return full[0, P)
 * holds every shard (full may be NULL: take part only) - as one of the runtime's calls named
 * `what`; and the reverse, replica 0's full[0, P) cut into shards, each member's into mine (a
 * broadcast per bucket).
 */
rp_status reducer_gather(reducer *g, const float *mine, float *full, const char *what);
rp_status reducer_scatter(reducer *g, const float *full, float *mine);

/*
 * The reduce-scatter's layout of P values over N members with buckets of `bytes` (what
 * reducer_init makes, for the planner): *shard = S = ceil(P / N), *chunk = the bucket
 * length (bytes / (4N) positions, clamped to [1, S]), *nbuckets = ceil(S / chunk) (0 for S = 0).
 */
void reducer_shard_layout(int64_t P, int N, size_t bytes, int64_t *shard, int64_t *chunk,
                          int *nbuckets);

/* ---- ZeRO-3: parameter values sharded between uses (param_residency.c) ------------------- */
/*
 * A parameter list's values as ZeRO-3 holds them: each member keeps its shard [lo, hi) of the
 * block (the reducer's), and units (ranges cut at parameter boundaries, as the gradient buckets
 * are) are gathered when the tape asks for one of their parameters (tape_residency.h): into a
 * gather buffer while training (the parameters pointed at it), into their place in the block
 * otherwise; and released when no longer held. Which units are present is the same on every
 * member (param_residency.c says why).
 */
/* ZeRO-3's gather buffers: the units one op reads, and one more for the unit prefetched. */
#define RESIDENCY_SLOTS (TAPE_USE_HELD + 1)

typedef struct residency {
    rp_comm *comm; /* the reducer's: the members that hold the shards */
    const rp_params *params;
    float *value; /* the value block (storage) */
    int64_t numel, shard, lo, hi;
    int size;
    const kernels_table *k;
    strategy_bucket_order order; /* parameter i lies in unit list[first[i]] */
    int64_t *ranges;             /* [2 * units] lo, hi of each unit in the block */
    int nunits;
    unsigned char *present; /* [units] */
    uint64_t *stamp, clock; /* [units] when each was last used */
    int *first;             /* [units + 1] unit u holds the parameters [first[u + 1], first[u]) */
    int *node;              /* [units] the backward node that last asked for each, or -1 */
    int *where;             /* [units] the slot holding it, or -1 (absent, or in place) */
    float *slot[RESIDENCY_SLOTS]; /* the gather buffers (storage), slot_len values each */
    int64_t slot_len, slot_used[RESIDENCY_SLOTS]; /* the largest unit; what each slot last held */
    int slot_unit[RESIDENCY_SLOTS];               /* the unit in each slot, or -1 */
    int resident;                                 /* units present */
    kernels_staging view;                         /* the broadcasts' host view */
    /* cfg.keep_gathered: a unit gathered while training stays, in place, until the step's
       update releases every unit (no gather buffers; backward gathers nothing again). */
    bool keep;
    /* cfg.prefetch: while training, the unit the step will ask for next (forward: the one
       before in the block; backward: after) is gathered by messages started when this one is
       used (ahead, -1 when none is in flight), and waited for when it is asked for. */
    bool prefetch;
    int ahead;
    rp_comm_request **reqs; /* [size * size] its messages in flight */
    int nreqs;
} residency;

/*
 * For params over red's members and shards, units of at least unit_bytes; everything present.
 * With `keep`, units gathered while training stay until residency_release_all.
 */
rp_status residency_init(residency *z, const reducer *red, const rp_params *params,
                         size_t unit_bytes, bool keep, bool prefetch);
void residency_free(residency *z);
/* The unit holding param's values, or -1 when param is not one of this list's trainable ones. */
int residency_unit_of(const residency *z, const rp_tensor *param);
/*
 * Unit u present (a collective gather when it is not, the wait when it is the one prefetched),
 * and marked used; while recording, first releases units past TAPE_USE_HELD (node: the tape's,
 * tape_residency.h; the choice is param_residency.c's), and with prefetch then starts the
 * gather of the unit asked for next. The gather's error on failure.
 */
rp_status residency_use(residency *z, int u, bool recording, int node);
/* Every unit released (after the update: each member keeps its shard only); a prefetch in flight
   is waited for first (its error). */
rp_status residency_release_all(residency *z);
/* Every unit gathered (collective): the values whole, as for a checkpoint. */
rp_status residency_whole(residency *z);
/* Every unit marked present (the values were made whole by a broadcast of the block). */
void residency_mark_whole(residency *z);
/* The gather buffers' bytes, or those resident now (kernels_resident_bytes). */
size_t residency_bytes(const residency *z, bool resident);

#endif
