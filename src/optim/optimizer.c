/*
 * optimizer.c - SGD (momentum, Nesterov, L2 weight decay), Adam and AdamW
 * over one contiguous range of parameters, following torch.optim.
 *
 * The optimizer keeps one state block laid out like the gradient block of
 * its parameter list: slot k of element i lives at state[k*numel + i]. The
 * update itself is the kernel table's update slots over flat arrays, so the
 * same code serves a whole model, a parameter-server shard (rp_optim_apply,
 * on host arrays) or a sharded optimizer. The state block is the table's
 * storage, as the values and gradients are: nothing here reads or writes
 * them element by element (the loops - updates, the scan for NaNs and
 * infinities - are kernel slots, and moving state is mem_copy and
 * mem_fill), so another backend can hold them.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"
#include "replicator/optim.h"
#include "replicator/trace.h"

struct rp_optimizer {
    rp_params *params;      /* not owned */
    const kernels_table *k; /* the table its loops run on, taken at create */
    rp_optim_config cfg;    /* validated at create */
    int slots;              /* 0, 1 or 2 */
    int64_t numel;          /* trainable elements of params */
    int64_t lo, hi; /* the range it updates, [0, numel) unless sharded (rp_optimizer_set_range) */
    float *state;   /* [slots * (hi - lo)] storage of k, zeroed at create; NULL when empty */
    int64_t steps;  /* updates applied so far */
    /* Hook sets, in the order added (rp_optimizer_add_hooks); rp_optimizer_set_hooks() owns
       the one flagged `slot`, kept at the position where it was first set. */
    struct hook_set *hooks;
    int nhooks, hooks_cap;
    /* Whose update replaces the rule (at most one set's), or -1; found once per change, not per
     * step. */
    int updater;
};

typedef struct hook_set {
    rp_optimizer_hooks h;
    void *ctx;
    bool slot; /* set by rp_optimizer_set_hooks()/set_update() */
} hook_set;

/*
 * The optimizers stepped on this thread since the runtime last asked (at most
 * RP_OPTIM_THREAD_MAX distinct ones): the runtime checks after each run that a
 * plain optimizer did not leave the replicas' parameters apart.
 */
#define RP_OPTIM_THREAD_MAX 8
static _Thread_local rp_optimizer *stepped[RP_OPTIM_THREAD_MAX];
static _Thread_local int64_t stepped_count[RP_OPTIM_THREAD_MAX];
static _Thread_local int nstepped;

/*
 * SGD, Nesterov momentum and weight decay 0.9/false/0; Adam's betas and eps
 * as in torch.optim.Adam, so switching `kind` to Adam gives the usual
 * defaults.
 */
rp_optim_config rp_optim_config_default(void)
{
    rp_optim_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.kind = RP_OPTIM_SGD;
    cfg.momentum = 0.9f;
    cfg.nesterov = false;
    cfg.weight_decay = 0.0f;
    cfg.beta1 = 0.9f;
    cfg.beta2 = 0.999f;
    cfg.eps = 1e-8f;
    return cfg;
}

/*
 * The number of n-float state slots the rule needs: none for plain SGD, the
 * momentum buffer for SGD with momentum, the two moments for Adam and AdamW.
 * A NULL or unknown config needs none.
 */
int rp_optim_slots(const rp_optim_config *cfg)
{
    if (!cfg) return 0;
    switch (cfg->kind) {
    case RP_OPTIM_SGD:
        return cfg->momentum != 0.0f ? 1 : 0;
    case RP_OPTIM_ADAM:
    case RP_OPTIM_ADAMW:
        return 2;
    }
    return 0;
}

/*
 * The rule of `cfg` through table k's update slots (kernels.h: sgd_update, adam_update), as
 * torch.optim's SGD (dampening 0), Adam and AdamW (not amsgrad): Adam's L2 decay is added to the
 * gradient (l2), AdamW's decoupled decay scales the values by shrink = 1 - lr*wd first. The
 * scalars that are the same for every element are computed here, once per call: the slots only
 * loop.
 */
static void apply(const kernels_table *k, const rp_optim_config *cfg, float *param,
                  const float *grad, float *state, int64_t n, float lr, int64_t step)
{
    if (!cfg || n <= 0) return;
    if (step < 1) step = 1;

    switch (cfg->kind) {
    case RP_OPTIM_SGD:
        /* Plain SGD (momentum 0) keeps no state: state may be NULL. */
        k->sgd_update(param, cfg->momentum != 0.0f ? state : NULL, grad, n, lr, cfg->momentum,
                      cfg->weight_decay, cfg->nesterov, step == 1);
        break;
    case RP_OPTIM_ADAM:
    case RP_OPTIM_ADAMW: {
        /*
         * The bias corrections are computed once, in double: in the early
         * steps 1 - b2^t is a difference of nearly equal numbers (0.001 at
         * t = 1 for b2 = 0.999), which float would get to only four digits.
         */
        double t = (double)step;
        double bc1 = 1.0 - pow((double)cfg->beta1, t);
        double bc2 = 1.0 - pow((double)cfg->beta2, t);
        float step_size = (float)((double)lr / bc1);
        float sqrt_bc2 = (float)sqrt(bc2);
        bool decoupled = cfg->kind == RP_OPTIM_ADAMW;
        float l2 = decoupled ? 0.0f : cfg->weight_decay;
        float shrink = decoupled ? (float)(1.0 - (double)lr * (double)cfg->weight_decay) : 1.0f;
        k->adam_update(param, state, state + n, grad, n, cfg->beta1, cfg->beta2, cfg->eps, l2,
                       shrink, step_size, sqrt_bc2);
        break;
    }
    }
}

/*
 * Applies the rule of `cfg` to n elements: param and state are updated in
 * place, grad is only read. `state` holds rp_optim_slots(cfg) slots of n
 * floats back to back (it may be NULL when there are none). `step` is the
 * 1-based number of this update; a value below 1 is treated as 1. No
 * argument is checked and nothing is allocated: this is the inner loop of
 * every optimizer step. The arrays must not overlap.
 */
void rp_optim_apply(const rp_optim_config *cfg, float *param, const float *grad, float *state,
                    int64_t n, float lr, int64_t step)
{
    /* Host arrays (a server's shard, a caller's copy): a host table's slots, bitwise the same. */
    apply(kernels_host(), cfg, param, grad, state, n, lr, step);
}

/* The state block's size for a range of n elements. */
static size_t state_bytes(const rp_optimizer *opt, int64_t n)
{
    return (size_t)opt->slots * (size_t)(n > 0 ? n : 0) * sizeof(float);
}

/*
 * Checks the fields of `cfg` that its rule uses and returns RP_ERR_INVALID
 * naming the first bad one. NaNs fail every comparison below, so they are
 * rejected too.
 */
rp_status rp_optim_check(const rp_optim_config *cfg)
{
    if (cfg->kind != RP_OPTIM_SGD && cfg->kind != RP_OPTIM_ADAM && cfg->kind != RP_OPTIM_ADAMW)
        return RP_ERROR(RP_ERR_INVALID, "unknown optimizer kind %d", (int)cfg->kind);
    if (!(cfg->weight_decay >= 0.0f) || isinf(cfg->weight_decay))
        return RP_ERROR(RP_ERR_INVALID, "weight_decay = %g: must be finite and >= 0",
                        (double)cfg->weight_decay);
    if (cfg->kind == RP_OPTIM_SGD) {
        if (!(cfg->momentum >= 0.0f) || isinf(cfg->momentum))
            return RP_ERROR(RP_ERR_INVALID, "momentum = %g: must be finite and >= 0",
                            (double)cfg->momentum);
        if (cfg->nesterov && cfg->momentum == 0.0f)
            return RP_ERROR(RP_ERR_INVALID, "nesterov = true needs momentum > 0 (momentum = %g)",
                            (double)cfg->momentum);
        return RP_OK;
    }
    if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f))
        return RP_ERROR(RP_ERR_INVALID, "beta1 = %g: must be in [0, 1)", (double)cfg->beta1);
    if (!(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
        return RP_ERROR(RP_ERR_INVALID, "beta2 = %g: must be in [0, 1)", (double)cfg->beta2);
    if (!(cfg->eps > 0.0f) || isinf(cfg->eps))
        return RP_ERROR(RP_ERR_INVALID, "eps = %g: must be finite and > 0", (double)cfg->eps);
    return RP_OK;
}

/*
 * Creates an optimizer over the trainable parameters of a finalized `params`
 * (not owned; it must outlive the optimizer) with a copy of `cfg`. The state
 * block is allocated here, zeroed, once. Errors: RP_ERR_INVALID for a NULL
 * argument, a list not yet finalized or a bad config field (named in the
 * message); RP_ERR_NOMEM. On error *opt is NULL.
 */
rp_status rp_optimizer_create(rp_optimizer **opt, rp_params *params, const rp_optim_config *cfg)
{
    if (!opt) return RP_ERROR(RP_ERR_INVALID, "opt is NULL");
    *opt = NULL;
    if (!params) return RP_ERROR(RP_ERR_INVALID, "params is NULL");
    if (!cfg) return RP_ERROR(RP_ERR_INVALID, "cfg is NULL");
    RP_CHECK(rp_optim_check(cfg));

    int64_t numel = rp_params_trainable_numel(params);
    if (numel < 0 || (numel > 0 && (!rp_params_data(params) || !rp_params_grad(params))))
        return RP_ERROR(RP_ERR_INVALID,
                        "parameter list has no value or gradient block (trainable numel %lld): "
                        "call rp_params_finalize() first",
                        (long long)numel);

    rp_optimizer *o = rp_calloc(sizeof(*o));
    if (!o) return RP_ERR_NOMEM;
    o->params = params;
    o->k = kernels_active();
    o->cfg = *cfg;
    o->slots = rp_optim_slots(cfg);
    o->numel = numel;
    o->lo = 0;
    o->hi = numel;
    o->steps = 0;
    o->updater = -1;
    if (o->slots > 0 && numel > 0) {
        size_t bytes = state_bytes(o, numel);
        o->state = o->k->mem_alloc(bytes);
        if (!o->state) {
            rp_free(o);
            return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the optimizer's state (%zu bytes)",
                            bytes);
        }
        o->k->mem_fill(o->state, 0, bytes);
    }
    *opt = o;
    return RP_OK;
}

/* Frees the optimizer and its state block (not the parameters). NULL is a no-op. */
void rp_optimizer_destroy(rp_optimizer *opt)
{
    if (!opt) return;
    /* Released in reverse order of adding: a later set may rely on an earlier one's state. */
    for (int i = opt->nhooks - 1; i >= 0; i--)
        if (opt->hooks[i].h.release) opt->hooks[i].h.release(opt->hooks[i].ctx);
    for (int i = 0; i < nstepped; i++)
        if (stepped[i] == opt) {
            stepped[i] = stepped[nstepped - 1];
            stepped_count[i] = stepped_count[nstepped - 1];
            nstepped--;
            break;
        }
    rp_free(opt->hooks);
    if (opt->state) opt->k->mem_free(opt->state, state_bytes(opt, opt->hi - opt->lo));
    rp_free(opt);
}

/*
 * Builds the RP_ERR_NUMERIC error for element `at` of the gradient block, which holds `value`,
 * naming the trainable parameter it belongs to and the index inside it.
 */
static rp_status nonfinite_error(const rp_optimizer *opt, int64_t at, float value)
{
    int count = rp_params_trainable_count(opt->params);
    for (int i = 0; i < count; i++) {
        const rp_tensor *t = rp_params_at(opt->params, i);
        int64_t off = rp_params_offset(opt->params, i);
        if (t && at >= off && at < off + t->numel)
            return RP_ERROR(RP_ERR_NUMERIC,
                            "gradient of parameter '%s' holds %g at element %lld (of %lld); "
                            "no parameter was updated",
                            t->name, (double)value, (long long)(at - off), (long long)t->numel);
    }
    return RP_ERROR(RP_ERR_NUMERIC,
                    "gradient block holds %g at element %lld, outside every parameter; "
                    "no parameter was updated",
                    (double)value, (long long)at);
}

/* Counts a step of `opt` on this thread (rp_optimizer_stepped_here()); a fixed table, no
 * allocation. */
static void note_stepped(rp_optimizer *opt)
{
    for (int i = 0; i < nstepped; i++)
        if (stepped[i] == opt) {
            stepped_count[i]++;
            return;
        }
    if (nstepped == RP_OPTIM_THREAD_MAX) return;
    stepped[nstepped] = opt;
    stepped_count[nstepped++] = 1;
}

/*
 * One update of every trainable parameter with rate `lr`, then zeroed
 * gradients. The whole gradient block is checked first, so a NaN or infinity
 * anywhere leaves values, state, gradients and the step count untouched.
 * Errors: RP_ERR_INVALID (NULL optimizer, negative or non-finite lr),
 * RP_ERR_NUMERIC. Allocates nothing.
 */
/*
 * A frozen set is refused before any hook runs: a zero gradient does not
 * leave the values alone (momentum and weight decay still move them), and a
 * data-parallel hook would all-reduce the buckets that freezing skipped.
 */
static rp_status frozen_error(const rp_optimizer *opt)
{
    int count = rp_params_trainable_count(opt->params);
    const rp_tensor *first = rp_params_at(opt->params, 0),
                    *last = rp_params_at(opt->params, count - 1);
    return RP_ERROR(
        RP_ERR_INVALID,
        "rp_optimizer_step: its parameter set ('%s' .. '%s', %d trainable) is frozen "
        "(rp_params_set_frozen); stepping it would still move the values through momentum "
        "and weight decay: thaw the set first, or step only the optimizers of the sets "
        "that trained; nothing was changed",
        first ? first->name : "(none)", last ? last->name : "(none)", count);
}

static rp_status optimizer_step(rp_optimizer *opt, float lr);

/* The step as a trace span (its hooks' collectives inside it), then the update. */
rp_status rp_optimizer_step(rp_optimizer *opt, float lr)
{
    rp_trace_begin(RP_PHASE_OPTIMIZER);
    rp_status status = optimizer_step(opt, lr);
    rp_trace_end("optimizer");
    rp_trace_mark();
    return status;
}

static rp_status optimizer_step(rp_optimizer *opt, float lr)
{
    if (!opt) return RP_ERROR(RP_ERR_INVALID, "optimizer is NULL");
    if (!(lr >= 0.0f) || isinf(lr))
        return RP_ERROR(RP_ERR_INVALID, "learning rate lr = %g: must be finite and >= 0",
                        (double)lr);
    if (rp_params_frozen(opt->params)) return frozen_error(opt);

    for (int i = 0; i < opt->nhooks; i++)
        if (opt->hooks[i].h.before) RP_CHECK(opt->hooks[i].h.before(opt, opt->hooks[i].ctx));
    /* A sharded optimizer checks and updates its range only: the rest is other replicas' work. */
    float *grad = rp_params_grad(opt->params);
    int64_t n = opt->hi - opt->lo;
    if (n > 0) {
        float value = 0.0f;
        int64_t bad = opt->k->first_nonfinite(&value, grad + opt->lo, n);
        if (bad >= 0) return nonfinite_error(opt, opt->lo + bad, value);
    }

    int64_t t = opt->steps + 1;
    if (opt->updater >= 0) {
        const hook_set *u = &opt->hooks[opt->updater];
        RP_CHECK(u->h.update(opt, lr, u->ctx));
    } else {
        RP_CHECK(rp_optimizer_apply_rule(opt, lr));
    }
    opt->steps = t;
    rp_params_zero_grad(opt->params);
    note_stepped(opt);
    for (int i = opt->nhooks - 1; i >= 0; i--)
        if (opt->hooks[i].h.after) RP_CHECK(opt->hooks[i].h.after(opt, opt->hooks[i].ctx));
    return RP_OK;
}

static void find_updater(rp_optimizer *opt)
{
    opt->updater = -1;
    for (int i = 0; i < opt->nhooks; i++)
        if (opt->hooks[i].h.update && (opt->updater < 0 || opt->hooks[i].slot)) opt->updater = i;
}

/* A new hook set at the end of the list (grown by doubling; never in the step). */
static hook_set *append_set(rp_optimizer *opt)
{
    if (opt->nhooks == opt->hooks_cap) {
        int cap = opt->hooks_cap ? 2 * opt->hooks_cap : 4;
        hook_set *grown = rp_calloc((size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        if (opt->nhooks) memcpy(grown, opt->hooks, (size_t)opt->nhooks * sizeof *grown);
        rp_free(opt->hooks);
        opt->hooks = grown;
        opt->hooks_cap = cap;
    }
    hook_set *e = &opt->hooks[opt->nhooks++];
    memset(e, 0, sizeof *e);
    return e;
}

rp_status rp_optimizer_add_hooks(rp_optimizer *opt, const rp_optimizer_hooks *h, void *ctx)
{
    if (!opt || !h)
        return RP_ERROR(RP_ERR_INVALID, "rp_optimizer_add_hooks: %s is NULL",
                        opt ? "hooks" : "optimizer");
    if (h->update)
        for (int i = 0; i < opt->nhooks; i++)
            if (opt->hooks[i].h.update)
                return RP_ERROR(RP_ERR_INVALID,
                                "rp_optimizer_add_hooks: hook set %d already replaces the "
                                "update (at most one set may; this optimizer has %d sets)",
                                i, opt->nhooks);
    hook_set *e = append_set(opt);
    if (!e)
        return RP_ERROR(RP_ERR_NOMEM, "cannot grow the optimizer's hook list past %d sets",
                        opt->nhooks);
    e->h = *h;
    e->ctx = ctx;
    find_updater(opt);
    return RP_OK;
}

static hook_set *slot_set(rp_optimizer *opt)
{
    for (int i = 0; i < opt->nhooks; i++)
        if (opt->hooks[i].slot) return &opt->hooks[i];
    return NULL;
}

void rp_optimizer_set_hooks(rp_optimizer *opt, rp_optimizer_hook before, rp_optimizer_hook after,
                            void (*release)(void *ctx), void *ctx)
{
    if (!opt) return;
    hook_set *e = slot_set(opt);
    if (e && e->h.release) e->h.release(e->ctx);
    if (!e) e = append_set(opt);
    if (!e) {
        /* Out of memory for a 4-entry array: the old hooks are kept, the failure recorded. */
        rp_error_set(RP_ERR_NOMEM, __FILE__, __LINE__,
                     "rp_optimizer_set_hooks: cannot grow the hook list");
        if (release) release(ctx);
        return;
    }
    e->h.before = before;
    e->h.after = after;
    e->h.release = release;
    e->h.update = NULL;
    e->ctx = ctx;
    e->slot = true;
    find_updater(opt);
}

void rp_optimizer_set_update(rp_optimizer *opt, rp_optimizer_update update)
{
    if (!opt) return;
    hook_set *e = slot_set(opt);
    if (!e) {
        rp_optimizer_set_hooks(opt, NULL, NULL, NULL, NULL);
        e = slot_set(opt);
        if (!e) return;
    }
    e->h.update = update;
    find_updater(opt);
}

int rp_optimizer_stepped_here(rp_optimizer **opts, int64_t *steps, int max)
{
    int n = 0;
    for (int i = 0; i < nstepped && n < max; i++, n++) {
        if (opts) opts[n] = stepped[i];
        if (steps) steps[n] = stepped_count[i];
    }
    int total = nstepped;
    nstepped = 0;
    return total;
}

rp_params *rp_optimizer_params(const rp_optimizer *opt)
{
    return opt->params;
}

const rp_optim_config *rp_optimizer_config(const rp_optimizer *opt)
{
    return &opt->cfg;
}

/* The number of successful rp_optimizer_step() calls (or the value last set). */
int64_t rp_optimizer_steps(const rp_optimizer *opt)
{
    return opt ? opt->steps : 0;
}

/*
 * Sets the step count, e.g. when restoring a checkpoint together with the
 * state block; the next step uses steps + 1 for Adam's bias corrections and
 * SGD's first-step rule. A negative count is stored as 0.
 */
void rp_optimizer_set_steps(rp_optimizer *opt, int64_t steps)
{
    if (!opt) return;
    opt->steps = steps < 0 ? 0 : steps;
}

/*
 * The state block, owned by the optimizer: rp_optim_slots() slots of
 * trainable-numel floats each, slot after slot. *numel (if not NULL)
 * receives its total length in floats. NULL (and 0) when the rule keeps no
 * state.
 */
float *rp_optimizer_state(const rp_optimizer *opt, int64_t *numel)
{
    int64_t total = 0;
    float *state = NULL;
    if (opt && opt->state) {
        total = (int64_t)opt->slots * (opt->hi - opt->lo);
        state = opt->state;
    }
    if (numel) *numel = total;
    return state;
}

rp_status rp_optimizer_apply_rule(rp_optimizer *opt, float lr)
{
    if (!opt) return RP_ERROR(RP_ERR_INVALID, "rp_optimizer_apply_rule: optimizer is NULL");
    int64_t n = opt->hi - opt->lo;
    if (n > 0)
        apply(opt->k, &opt->cfg, rp_params_data(opt->params) + opt->lo,
              rp_params_grad(opt->params) + opt->lo, opt->state, n, lr, opt->steps + 1);
    return RP_OK;
}

/*
 * The new state block is allocated before the old one is freed, so a failure
 * leaves the optimizer as it was. Elements in both ranges keep their state;
 * the others start at zero, like a fresh optimizer's.
 */
rp_status rp_optimizer_set_range(rp_optimizer *opt, int64_t lo, int64_t hi)
{
    if (!opt) return RP_ERROR(RP_ERR_INVALID, "rp_optimizer_set_range: optimizer is NULL");
    if (lo < 0 || hi < lo || hi > opt->numel)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_optimizer_set_range: [%lld, %lld) is not a range of the %lld "
                        "trainable values (0 <= lo <= hi <= %lld)",
                        (long long)lo, (long long)hi, (long long)opt->numel, (long long)opt->numel);
    if (lo == opt->lo && hi == opt->hi) return RP_OK;
    const kernels_table *k = opt->k;
    float *state = NULL;
    int64_t n = hi - lo, old = opt->hi - opt->lo;
    if (opt->slots > 0 && n > 0) {
        state = k->mem_alloc(state_bytes(opt, n));
        if (!state)
            return RP_ERROR(RP_ERR_NOMEM,
                            "rp_optimizer_set_range: cannot allocate %zu bytes of state",
                            state_bytes(opt, n));
        k->mem_fill(state, 0, state_bytes(opt, n));
        int64_t from = lo > opt->lo ? lo : opt->lo, to = hi < opt->hi ? hi : opt->hi;
        for (int s = 0; s < opt->slots && from < to && opt->state; s++)
            k->mem_copy(state + (int64_t)s * n + (from - lo),
                        opt->state + (int64_t)s * old + (from - opt->lo),
                        (size_t)(to - from) * sizeof(float));
    }
    if (opt->state) k->mem_free(opt->state, state_bytes(opt, old));
    opt->state = state;
    opt->lo = lo;
    opt->hi = hi;
    return RP_OK;
}

void rp_optimizer_range(const rp_optimizer *opt, int64_t *lo, int64_t *hi)
{
    if (lo) *lo = opt ? opt->lo : 0;
    if (hi) *hi = opt ? opt->hi : 0;
}

size_t rp_optimizer_state_bytes(const rp_optimizer *opt)
{
    return opt ? state_bytes(opt, opt->hi - opt->lo) : 0;
}

rp_status rp_optimizer_read_state(const rp_optimizer *opt, float *out)
{
    if (!opt || !out) return RP_ERROR(RP_ERR_INVALID, "rp_optimizer_read_state: NULL argument");
    if (opt->state) opt->k->mem_download(out, opt->state, state_bytes(opt, opt->hi - opt->lo));
    return RP_OK;
}

rp_status rp_optimizer_write_state(rp_optimizer *opt, const float *in)
{
    if (!opt || !in) return RP_ERROR(RP_ERR_INVALID, "rp_optimizer_write_state: NULL argument");
    if (opt->state) opt->k->mem_upload(opt->state, in, state_bytes(opt, opt->hi - opt->lo));
    return RP_OK;
}
