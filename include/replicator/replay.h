/*
 * replicator/replay.h - experience replay for the rl layer: a fixed-capacity
 * table of N-step transitions with uniform or proportional prioritised
 * sampling, the N-step adder that assembles those transitions from an
 * episode's steps, and Reverb's SampleToInsertRatio rate limiter (a plain
 * counter, and a blocking gate for threads).
 *
 * The replay. Items are N-step transitions (s_t, a_t, R_t, D_t, s_{t+n'}).
 * Every item is identified by its key, the insertion index (0, 1, 2, ...,
 * monotone over the table's life); it lives in slot key % capacity of one
 * block preallocated at create, so inserting and sampling never allocate.
 * When the table is full an insert evicts the oldest item (FIFO). The keys
 * held are always [inserted - size, inserted): a key below that range was
 * evicted (stale), one at or above it was never issued.
 *
 * Sampling draws n items independently, with replacement:
 *   uniform:      P(i) = 1 / size;
 *   prioritised:  P(i) = p_i^alpha / sum_j p_j^alpha (proportional variant of
 *                 Schaul et al. 2016), by inverse-CDF draws on a sum-tree;
 * importance weights w_i = (size * P(i))^-beta, divided by their maximum over
 * the batch (all 1 when uniform). docs/replay.md has the details.
 *
 * Thread-safety: an rp_replay, rp_nstep and rp_rate_limiter are used by one
 * thread at a time (the owner serialises, e.g. behind an rp_rate_gate and a
 * mutex of its own). rp_rate_gate is thread-safe.
 */
#ifndef REPLICATOR_REPLAY_H
#define REPLICATOR_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- transitions and the replay table -------------------------------------------- */

/* One N-step transition; the pointers are borrowed (see who provides them). */
typedef struct rp_transition {
    const float *obs;      /* [obs_dim] s_t */
    const float *act;      /* [act_dim] a_t */
    float reward;          /* R_t = sum_{k<n'} gamma^k (prod_{j<k} d_{t+j}) r_{t+k} */
    float discount;        /* D_t = gamma^{n'} prod_{k<n'} d_{t+k}: the bootstrap factor */
    const float *next_obs; /* [obs_dim] s_{t+n'} */
} rp_transition;

typedef struct rp_replay_config {
    int64_t capacity;          /* items, 1 .. 2^31-1, preallocated at create; FIFO when full */
    int obs_dim, act_dim;      /* >= 1 each */
    bool prioritized;          /* false: uniform; true: proportional prioritised */
    float priority_exponent;   /* alpha >= 0 (0: uniform through the tree) */
    float importance_exponent; /* beta >= 0 (0: all weights 1) */
} rp_replay_config;

/* capacity 1e6, uniform, alpha 0.6, beta 0.4; obs_dim and act_dim 0: the caller sets them. */
RP_API rp_replay_config rp_replay_config_default(void);

typedef struct rp_replay rp_replay;

/*
 * Creates a replay and allocates all its memory at once: capacity *
 * (2*obs_dim + act_dim + 2) floats, plus, when prioritised, one float per
 * item and a sum-tree of 2*P doubles (P the power of two >= capacity). The
 * pages are not touched until items are written, so a large table creates
 * quickly. Errors: RP_ERR_INVALID (naming the bad field), RP_ERR_NOMEM
 * (naming the bytes).
 */
RP_API rp_status rp_replay_create(rp_replay **r, const rp_replay_config *cfg);
RP_API void rp_replay_destroy(rp_replay *r); /* NULL is a no-op */

/*
 * Copies n transitions into the table (the caller keeps t). They get keys
 * inserted, inserted+1, ...; each evicts the oldest item when full. When
 * prioritised, every one gets `priority`, or when priority <= 0 the largest
 * priority seen so far (1 at first); ignored when uniform. Errors:
 * RP_ERR_INVALID (NULL, n < 0, a NULL field), RP_ERR_NUMERIC (priority NaN
 * or infinite). Nothing is inserted on error.
 */
RP_API rp_status rp_replay_insert(rp_replay *r, const rp_transition *t, int n, float priority);

/* Caller-owned buffers for n sampled transitions (rp_replay_batch_alloc allocates them). */
typedef struct rp_replay_batch {
    int n, obs_dim, act_dim;
    float *obs;      /* [n, obs_dim] */
    float *act;      /* [n, act_dim] */
    float *reward;   /* [n] */
    float *discount; /* [n] */
    float *next_obs; /* [n, obs_dim] */
    int64_t *keys;   /* [n] keys, for rp_replay_update_priorities */
    float *weights;  /* [n] importance weights, max-normalised to 1 over the batch */
} rp_replay_batch;

/* Allocates b's buffers for n >= 1 rows. Errors: RP_ERR_INVALID, RP_ERR_NOMEM. */
RP_API rp_status rp_replay_batch_alloc(rp_replay_batch *b, int n, int obs_dim, int act_dim);
/* Frees b's buffers and zeroes it; a zeroed batch is a no-op. */
RP_API void rp_replay_batch_free(rp_replay_batch *b);

/*
 * Samples n (1 .. b->n) items with replacement into rows [0, n) of b, drawing
 * from `rng` (advanced). Uniform: one rp_rng_below draw per row.
 * Prioritised: one 53-bit uniform u per row, the item whose cumulative
 * mass interval holds u * total (plain inverse-CDF draws, independent rows,
 * as Reverb's prioritised selector). Errors: RP_ERR_INVALID (empty table, n
 * out of range, b's dims differ from the table's, every priority 0).
 */
RP_API rp_status rp_replay_sample(rp_replay *r, rp_rng *rng, int n, rp_replay_batch *b);

/*
 * Sets the priorities of n keys (a no-op when uniform). Keys already evicted
 * are skipped. Everything is checked before anything changes: RP_ERR_NUMERIC
 * for a NaN, infinite or negative priority, RP_ERR_INVALID for a key never
 * issued (negative or >= inserted), each naming the key. A priority of 0
 * means the item is never sampled.
 */
RP_API rp_status rp_replay_update_priorities(rp_replay *r, const int64_t *keys,
                                             const float *priorities, int n);

RP_API int64_t rp_replay_size(const rp_replay *r);     /* items held now (<= capacity) */
RP_API int64_t rp_replay_inserted(const rp_replay *r); /* items ever inserted: the next key */
RP_API int64_t rp_replay_capacity(const rp_replay *r);

/*
 * The item with `key`: *t points into the table (valid until the next
 * insert or load), *priority its priority (1 when uniform; may be NULL).
 * Errors: RP_ERR_INVALID when the key is not held (evicted or never issued).
 */
RP_API rp_status rp_replay_get(const rp_replay *r, int64_t key, rp_transition *t, float *priority);

/*
 * Adds the table to a checkpoint under `prefix` (e.g. "replay/"): f32
 * tensors obs [size, obs_dim], act [size, act_dim], reward, discount [size],
 * next_obs [size, obs_dim] and (prioritised) priority [size], oldest first;
 * i64 "counters" [inserted, size, obs_dim, act_dim, prioritized] and f32
 * "max_priority" [1]. Errors: as rp_checkpoint_add (e.g. a name taken).
 */
RP_API rp_status rp_replay_save(const rp_replay *r, rp_checkpoint *ck, const char *prefix);

/*
 * Replaces r's contents with those saved under `prefix`: the same items with
 * the same keys, order and priorities, and the counters. A table saved
 * uniform and loaded prioritised gives every item priority 1; the other way
 * the priorities are dropped. Errors: RP_ERR_INVALID (a tensor missing or of
 * the wrong dtype or length), RP_ERR_SHAPE (different obs_dim or act_dim, or
 * more items saved than r's capacity), RP_ERR_NUMERIC (a bad saved
 * priority). On error r is unchanged.
 */
RP_API rp_status rp_replay_load(rp_replay *r, const rp_checkpoint *ck, const char *prefix);

/* ---- N-step transitions -------------------------------------------------------------- */

/*
 * Assembles N-step transitions from an episode's steps, with the semantics of
 * Acme's NStepTransitionAdder except two documented choices: the discount is
 * the full bootstrap factor gamma^{n'} prod d (Acme stores gamma^{n'-1} prod d
 * and its learner multiplies by gamma once more), and no shorter
 * transitions are written at the start of an episode (Acme also writes
 * s_0 -> s_k for k < n, so s_0 appears n times). Not thread-safe.
 */
typedef struct rp_nstep rp_nstep;

/* n >= 1, gamma in [0, 1], dims >= 1. Errors: RP_ERR_INVALID, RP_ERR_NOMEM. */
RP_API rp_status rp_nstep_create(rp_nstep **a, int n, float gamma, int obs_dim, int act_dim);
RP_API void rp_nstep_destroy(rp_nstep *a); /* NULL is a no-op */

/* Begins an episode at its first observation (copied), dropping any unfinished one. */
RP_API rp_status rp_nstep_start(rp_nstep *a, const float *obs);

/*
 * Adds one step: the action taken at the last observation, the reward r and
 * env discount d (in [0, 1]) that followed, the next observation, and
 * whether the episode ended there (`last`: a truncation when d is 1, a
 * terminal when d is 0). Writes the transitions now complete into
 * out[0 .. *n_out): once n steps are buffered, one per call, for the oldest
 * step; at `last`, every pending one, each with its shorter horizon n' (a
 * truncation still bootstraps from s_T with gamma^{n'}; a terminal gives
 * discount 0). At most n come out per call; max_out must be >= n. The
 * transitions point into the adder's memory, valid until its next call.
 * After `last`, call rp_nstep_start before adding again.
 * Errors: RP_ERR_INVALID (no episode started, NULLs, max_out < n, d outside
 * [0, 1]), RP_ERR_NUMERIC (reward or discount NaN/infinite).
 */
RP_API rp_status rp_nstep_add(rp_nstep *a, const float *act, float reward, float discount,
                              const float *next_obs, bool last, rp_transition *out, int max_out,
                              int *n_out);

/* ---- rate limiter ---------------------------------------------------------------------- */

/*
 * Reverb's SampleToInsertRatio as a plain counter (not thread-safe). With
 * diff = inserts * samples_per_insert - samples:
 *   can_insert(n): inserts + n - deletes <= min_size_to_sample (filling up),
 *                  or (inserts + n) * spi - samples <= max_diff;
 *   can_sample(n): inserts - deletes >= min_size_to_sample and
 *                  inserts * spi - samples - n >= min_diff.
 * A sampled batch of B items counts as B samples, as in Reverb.
 */
typedef struct rp_rate_limiter {
    int64_t min_size_to_sample;
    double samples_per_insert, min_diff, max_diff;
    int64_t inserts, samples, deletes; /* deletes: items removed (evicted) from the table */
} rp_rate_limiter;

/*
 * min_diff/max_diff = spi * min_size -/+ error_buffer, counters 0. Refused
 * (RP_ERR_INVALID, the message says why) where Reverb raises:
 * min_size_to_sample < 1, spi not finite and > 0, error_buffer NaN or
 * negative, or max_diff - min_diff < 2 * max(1, spi) (which could block
 * inserts or samples for good).
 */
RP_API rp_status rp_rate_limiter_init(rp_rate_limiter *l, int64_t min_size_to_sample,
                                      double samples_per_insert, double error_buffer);
/*
 * Reverb's explicit-range form (error_buffer given as a (min, max) pair):
 * the checks above, and min_diff > spi * min_size is refused too (a deadlock
 * once min_size items are in). max_diff below spi * min_size is allowed
 * with a warning, as in Reverb (sampling must run concurrently).
 */
RP_API rp_status rp_rate_limiter_init_range(rp_rate_limiter *l, int64_t min_size_to_sample,
                                            double samples_per_insert, double min_diff,
                                            double max_diff);
RP_API bool rp_rate_limiter_can_insert(const rp_rate_limiter *l, int64_t n); /* false for n < 1 */
RP_API bool rp_rate_limiter_can_sample(const rp_rate_limiter *l, int64_t n); /* false for n < 1 */
RP_API void rp_rate_limiter_inserted(rp_rate_limiter *l, int64_t n);
RP_API void rp_rate_limiter_sampled(rp_rate_limiter *l, int64_t n);
RP_API void rp_rate_limiter_deleted(rp_rate_limiter *l, int64_t n);

/*
 * The same limiter shared by threads (a mutex and two condition variables).
 * All functions are thread-safe; destroy only when no thread is inside.
 */
typedef struct rp_rate_gate rp_rate_gate;

/* A gate starting from `limits` (its counters too). Errors: RP_ERR_INVALID, RP_ERR_NOMEM. */
RP_API rp_status rp_rate_gate_create(rp_rate_gate **g, const rp_rate_limiter *limits);
RP_API void rp_rate_gate_destroy(rp_rate_gate *g); /* NULL is a no-op */

/*
 * Waits until n >= 1 inserts (samples) are allowed, then counts them, all
 * under the gate's lock. timeout_s bounds the wait (0: just try once).
 * Errors: RP_ERR_TIMEOUT (the message names the caller's thread and call,
 * the time waited and the counters: inserts, samples, deletes and the
 * allowed range), RP_ERR_INTERRUPTED once rp_rate_gate_close() was called
 * (nothing is counted), RP_ERR_INVALID (n < 1, timeout NaN or negative).
 */
RP_API rp_status rp_rate_gate_insert(rp_rate_gate *g, int64_t n, double timeout_s);
RP_API rp_status rp_rate_gate_sample(rp_rate_gate *g, int64_t n, double timeout_s);
/* Counts n deletes (items the table evicted), which may allow inserts, never waits. */
RP_API void rp_rate_gate_deleted(rp_rate_gate *g, int64_t n);
/* Wakes every waiter; they and all later waits return RP_ERR_INTERRUPTED. */
RP_API void rp_rate_gate_close(rp_rate_gate *g);
/* A consistent snapshot of the limits and counters. */
RP_API rp_rate_limiter rp_rate_gate_counters(rp_rate_gate *g);

#ifdef __cplusplus
}
#endif
#endif
