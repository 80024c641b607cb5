/*
 * replicator/optim.h - optimizers (SGD with momentum, Nesterov and weight
 * decay; Adam; AdamW) and learning-rate schedules.
 *
 * An optimizer sees only parameters and gradients: it owns one contiguous
 * block of state (momentum, or Adam's two moments) laid out like the
 * gradient block of its rp_params. The distributed runtime wraps it (sync:
 * all-reduce the gradients first; async: push to parameter servers).
 *
 * The update rules follow PyTorch's torch.optim, so results can be checked
 * against it:
 *   SGD:   g += wd*p; v = mu*v + g (v = g on the first step);
 *          p -= lr * (nesterov ? g + mu*v : v)          (plain g when mu = 0)
 *   Adam:  g += wd*p (AdamW instead: p *= 1 - lr*wd);
 *          m = b1*m + (1-b1) g; v = b2*v + (1-b2) g^2;
 *          p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 */
#ifndef REPLICATOR_OPTIM_H
#define REPLICATOR_OPTIM_H

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RP_OPTIM_SGD, RP_OPTIM_ADAM, RP_OPTIM_ADAMW } rp_optim_kind;

typedef struct rp_optim_config {
    rp_optim_kind kind;
    float momentum;          /* SGD; 0 = plain SGD */
    bool nesterov;           /* SGD; needs momentum > 0 */
    float weight_decay;      /* L2 for SGD and Adam, decoupled for AdamW */
    float beta1, beta2, eps; /* Adam/AdamW: 0.9, 0.999, 1e-8 */
} rp_optim_config;

/* SGD, momentum 0.9, no Nesterov, no weight decay; Adam betas filled in. */
RP_API rp_optim_config rp_optim_config_default(void);

typedef struct rp_optimizer rp_optimizer;

/*
 * Errors: RP_ERR_INVALID for weight decay or momentum < 0, a beta outside
 * [0,1), eps <= 0, Nesterov without momentum, or an unfinalized params list.
 */
RP_API rp_status rp_optimizer_create(rp_optimizer **opt, rp_params *params,
                                     const rp_optim_config *cfg);
RP_API void rp_optimizer_destroy(rp_optimizer *opt);

/*
 * Applies one update with learning rate `lr` to every trainable parameter
 * (to its range's, when sharded: rp_optimizer_set_range), then zeroes the
 * gradients. A negative or non-finite lr is RP_ERR_INVALID. Returns RP_ERR_NUMERIC,
 * naming the parameter, if a gradient holds a NaN or infinity; then nothing is changed. A frozen
 * parameter set (rp_params_set_frozen, nn.h) is RP_ERR_INVALID naming its first and last
 * parameters, before any hook runs: nothing is changed, no gradient is all-reduced or pushed, the
 * step count stays. (A zero gradient would not leave the values alone: momentum and weight decay
 * still move them.) So with two sets, e.g. a GAN's generator stepping with
 * the discriminator frozen, step only the optimizer of the set that trained.
 */
RP_API rp_status rp_optimizer_step(rp_optimizer *opt, float lr);

/*
 * The update rule on one flat range, for callers that hold their own slices
 * (parameter servers, sharded optimizer state). `state` holds the rule's
 * slots back to back (n floats each: 0 for plain SGD, 1 for momentum, 2 for
 * Adam); Adam's moments must start at zero, a momentum buffer is overwritten
 * on step 1. `step` counts from 1 (below 1 is taken as 1). The arrays must not
 * overlap. No finiteness check. The arrays are host memory (a server's shard,
 * a copy read with rp_params_read_values), not tensor storage: the loop runs
 * on the active kernel table when its storage is host memory, else on cpu's;
 * every table gives bitwise the same values. To update a parameter list's own
 * blocks, use an rp_optimizer, whose state lives where the values do.
 */
RP_API void rp_optim_apply(const rp_optim_config *cfg, float *param, const float *grad,
                           float *state, int64_t n, float lr, int64_t step);
/*
 * Hooks: code that runs around every rp_optimizer_step(). The distributed
 * runtime wraps an optimizer this way (sync: all-reduce the gradients in
 * `before`, compare parameter checksums in `after`; async: replace the
 * update by a push to the parameter servers), and user code stacks its own
 * on top: gradient clipping, an exponential moving average, tracing.
 *
 * A step runs, in this order: every set's `before` in the order the sets
 * were added; the finiteness check of the gradients; the update (the one
 * set's `update` that replaces it, or the rule); the step count advances
 * and the gradients are zeroed; every set's `after` in reverse order of
 * adding (so a set added later is nested inside the earlier ones: a user
 * `before` added after the runtime's sees the all-reduced gradients, a user
 * `after` runs before the runtime's checksum). A step of a frozen set runs
 * no hook at all (see rp_optimizer_step). An error from a `before`
 * fails the step with nothing changed (later befores do not run); an error
 * from the update fails it with the step count unchanged; an error from an
 * `after` is returned after the update (the remaining afters do not run).
 * `release(ctx)` runs exactly once per set: when the optimizer is
 * destroyed (sets in reverse order of adding), or when
 * rp_optimizer_set_hooks() replaces its set. Any field may be NULL.
 */
typedef rp_status (*rp_optimizer_hook)(rp_optimizer *opt, void *ctx);
/*
 * Replaces the local update: update(opt, lr, ctx) is called in
 * rp_optimizer_step() after the befores and the finiteness check, with the
 * gradients in the params' gradient block; it must leave the new values in
 * the params' value block. Asynchronous training pushes the gradients to
 * parameter servers and pulls the values there. An error fails the step
 * (the step count does not advance).
 */
typedef rp_status (*rp_optimizer_update)(rp_optimizer *opt, float lr, void *ctx);

typedef struct rp_optimizer_hooks {
    rp_optimizer_hook before;   /* in order added */
    rp_optimizer_hook after;    /* in reverse order */
    rp_optimizer_update update; /* at most one hook set may replace the update */
    void (*release)(void *ctx);
} rp_optimizer_hooks;

/*
 * Appends a hook set (copied; ctx is passed to each of its functions and is
 * owned by the caller until `release` runs). Not thread-safe with a
 * concurrent step of the same optimizer; allocates only when the list grows.
 * Errors: RP_ERR_INVALID for a NULL argument or a second set with an
 * `update` (naming the set that has one); RP_ERR_NOMEM. On error nothing was
 * added and release is not called.
 */
RP_API rp_status rp_optimizer_add_hooks(rp_optimizer *opt, const rp_optimizer_hooks *h, void *ctx);

/*
 * The older single-slot interface, kept working: the optimizer has one
 * "slot" hook set, created at the end of the list by the first call and kept
 * at that position. rp_optimizer_set_hooks() replaces that slot (releasing
 * its previous ctx; the sets added with rp_optimizer_add_hooks() stay) and
 * clears the slot's update; rp_optimizer_set_update() sets the slot's
 * update (ctx: the slot's). If an added set also replaces the update, the
 * slot's wins. The runtime no longer uses the slot, so user code may.
 * Out of memory: set_hooks keeps the old slot, calls release(ctx) at once
 * and records RP_ERR_NOMEM in rp_last_error().
 */
RP_API void rp_optimizer_set_hooks(rp_optimizer *opt, rp_optimizer_hook before,
                                   rp_optimizer_hook after, void (*release)(void *ctx), void *ctx);
RP_API void rp_optimizer_set_update(rp_optimizer *opt, rp_optimizer_update update);

/*
 * For the runtime's checks: the optimizers stepped on the calling thread
 * since the previous call (at most 8 distinct ones are tracked), first
 * stepped first, with their step counts; writes at most `max` into
 * opts/steps (either may be NULL), returns how many were tracked, and
 * forgets them. An optimizer destroyed on this thread is forgotten at
 * once; one destroyed on another thread after stepping here leaves a
 * dangling entry, so the runtime asks at the end of every run, before user
 * code can move optimizers between threads. Thread-local; allocates nothing.
 */
RP_API int rp_optimizer_stepped_here(rp_optimizer **opts, int64_t *steps, int max);

/* The parameter list the optimizer updates, and its configuration. */
RP_API rp_params *rp_optimizer_params(const rp_optimizer *opt);
RP_API const rp_optim_config *rp_optimizer_config(const rp_optimizer *opt);

/* RP_ERR_INVALID naming the first bad field of cfg (what rp_optimizer_create() checks). */
RP_API rp_status rp_optim_check(const rp_optim_config *cfg);

/* Number of state slots of the rule (0, 1 or 2). */
RP_API int rp_optim_slots(const rp_optim_config *cfg);

/*
 * Steps taken so far, and the state block: slots x (hi - lo) floats for the
 * optimizer's range [lo, hi) (the whole trainable numel unless sharded),
 * slot after slot. The block is the kernel table's storage, like the
 * parameter list's blocks: the pointer names it (for the library's own
 * kernels and collectives) and host code does not dereference it; read and
 * write its values with rp_optimizer_read_state and rp_optimizer_write_state.
 * rp_optimizer_state returns NULL (and *numel 0) when the rule keeps no state.
 */
RP_API int64_t rp_optimizer_steps(const rp_optimizer *opt);
RP_API void rp_optimizer_set_steps(rp_optimizer *opt, int64_t steps);
RP_API float *rp_optimizer_state(const rp_optimizer *opt, int64_t *numel);
/*
 * Host copies of the state block: read copies its rp_optimizer_state() numel floats into out,
 * write replaces them from in (nothing when there is no state). RP_ERR_INVALID for NULL. Not
 * thread-safe with a step of the same optimizer.
 */
RP_API rp_status rp_optimizer_read_state(const rp_optimizer *opt, float *out);
RP_API rp_status rp_optimizer_write_state(rp_optimizer *opt, const float *in);

/* ---- sharding: an optimizer over one contiguous range (ZeRO-1) ----------- */

/*
 * Restricts the optimizer to the trainable elements [lo, hi) of its
 * parameter list's flat blocks (value, gradient): a shard of the model, as
 * ZeRO-1 gives each data-parallel replica. From then on:
 *  - the state block holds slots x (hi - lo) floats (rp_optimizer_state,
 *    rp_optimizer_state_bytes); an element in both the old and the new range
 *    keeps its state, the others start at zero as in a fresh optimizer;
 *  - rp_optimizer_step() checks the finiteness of, and updates, gradients and
 *    values in [lo, hi) only; every gradient is still zeroed afterwards, and
 *    the values outside the range are left as they are (the caller brings
 *    them up to date, e.g. by an all-gather);
 *  - the rule is elementwise, so updating every range of a partition once
 *    gives bitwise the values of one unsharded step on the same gradients.
 * [0, trainable numel) is the unsharded optimizer again (the state grows back,
 * zero outside the old range). Allocates (not in a step): call it between
 * steps, not concurrently with one. Errors: RP_ERR_INVALID (NULL, a range
 * outside [0, trainable numel] or with hi < lo), RP_ERR_NOMEM (nothing
 * changed).
 */
RP_API rp_status rp_optimizer_set_range(rp_optimizer *opt, int64_t lo, int64_t hi);
/* The range the optimizer updates: [0, trainable numel) unless set; 0, 0 for NULL. */
RP_API void rp_optimizer_range(const rp_optimizer *opt, int64_t *lo, int64_t *hi);
/* Bytes of optimizer state it holds now: slots x (hi - lo) x 4. 0 for NULL. */
RP_API size_t rp_optimizer_state_bytes(const rp_optimizer *opt);
/*
 * The rule alone, for an `update` hook that wraps it (ZeRO-1: the rule on the
 * shard, then an all-gather of the values): applies rp_optim_apply() to the
 * optimizer's range with the step number steps + 1, reading the gradients
 * as they are (no finiteness check, no zeroing, the step count unchanged).
 * Errors: RP_ERR_INVALID for NULL.
 */
RP_API rp_status rp_optimizer_apply_rule(rp_optimizer *opt, float lr);

/* ---- schedules ------------------------------------------------------------ */

typedef enum { RP_SCHED_CONSTANT, RP_SCHED_STEP, RP_SCHED_COSINE, RP_SCHED_LINEAR } rp_sched_kind;

/*
 * lr(step): a linear warm-up from base_lr*warmup_start over warmup_steps, then
 *   CONSTANT: base_lr
 *   STEP:     base_lr * gamma^(number of milestones <= step)
 *   COSINE:   min_lr + (base_lr-min_lr)(1+cos(pi*p))/2, p = (step-warmup)/(total-warmup)
 *   LINEAR:   base_lr * (1 - step/total), 0 from total_steps on
 * Steps count from 0.
 */
typedef struct rp_schedule {
    rp_sched_kind kind;
    float base_lr;
    int64_t warmup_steps;
    float warmup_start;  /* fraction of base_lr at step 0 of the warm-up (default 0) */
    int64_t total_steps; /* COSINE, LINEAR */
    float min_lr;        /* COSINE */
    float gamma;         /* STEP */
    int n_milestones;    /* STEP: entries of milestones, >= 0 */
    /*
     * STEP: absolute step numbers, in any order; NULL when n_milestones is 0. The
     * caller owns the array, which must outlive the schedule and its copies.
     */
    const int64_t *milestones;
} rp_schedule;

RP_API rp_schedule rp_schedule_constant(float lr);
/*
 * Step decay: lr * gamma^(number of milestones <= step), no warm-up. The
 * schedule points at `milestones` (n entries, caller-owned, see above); it
 * is not copied. Pure: rp_schedule_check() says whether the result is valid.
 */
RP_API rp_schedule rp_schedule_step(float lr, float gamma, const int64_t *milestones, int n);
RP_API rp_schedule rp_schedule_cosine(float lr, int64_t warmup_steps, int64_t total_steps);
/*
 * Linear decay (SN-GAN's): after the warm-up (from 0 over warmup_steps),
 * lr * (1 - step/total_steps), falling linearly to 0 at total_steps and 0
 * after. The decay counts from step 0, not from the warm-up's end (the rate
 * just after a warm-up is lr * (1 - warmup/total)). total_steps <= 0 gives 0
 * after the warm-up. Pure.
 */
RP_API rp_schedule rp_schedule_linear(float lr, int64_t warmup_steps, int64_t total_steps);
/*
 * The rate at `step`. Pure and thread-safe; 0 for a NULL schedule. A STEP
 * schedule with a NULL milestones array counts no milestones (it fails
 * rp_schedule_check()).
 */
RP_API float rp_schedule_lr(const rp_schedule *s, int64_t step);

/*
 * RP_ERR_INVALID naming the first bad field of `s`: NULL, an unknown kind, a
 * base_lr, min_lr, gamma or warmup_start that is not finite, a negative
 * warmup_steps, or (STEP) a negative n_milestones or a NULL milestones
 * array with n_milestones > 0. RP_OK otherwise.
 */
RP_API rp_status rp_schedule_check(const rp_schedule *s);

/* The linear scaling rule: base_lr * global_batch / reference_batch. */
RP_API float rp_lr_scale(float base_lr, int global_batch, int reference_batch);

/* ---- gradient clipping ------------------------------------------------------ */

/*
 * Global-norm clipping: computes the L2 norm of every trainable gradient of
 * `params` together (one vector; summed in double) and, when it exceeds
 * max_norm, scales every gradient by max_norm / norm so the norm becomes
 * max_norm (within float rounding). Gradients are left alone otherwise.
 * *norm (may be NULL) receives the norm before clipping. In synchronous
 * training, clip after the gradient all-reduce, so that every replica scales
 * by the same factor. Deterministic for a given thread count.
 * Errors: RP_ERR_INVALID (NULL params, max_norm not finite and > 0, a list
 * not finalized); RP_ERR_NUMERIC if the norm is not finite (a NaN or
 * infinite gradient: nothing is scaled, *norm holds it).
 */
RP_API rp_status rp_clip_grad_norm(rp_params *params, float max_norm, float *norm);

#ifdef __cplusplus
}
#endif
#endif
