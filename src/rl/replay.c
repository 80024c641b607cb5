/*
 * replay.c - the replay table: a ring of transitions in one preallocated
 * block, uniform or proportional prioritised sampling, priority updates, and
 * saving to / loading from a checkpoint.
 *
 * Key k lives in slot k % capacity. Because eviction is FIFO, the held keys
 * are the contiguous range [inserted - size, inserted), so a key's slot is
 * found without a map and a stale key is one below that range.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "replicator/replay.h"
#include "rl/sumtree.h"

#define REPLAY_CAPACITY_MAX ((int64_t)INT32_MAX)

struct rp_replay {
    rp_replay_config cfg;
    int64_t inserted, size;
    float max_priority; /* largest priority inserted or set so far, 1 at first */
    void *block;        /* the one allocation everything below points into */
    float *obs, *act, *reward, *discount, *next_obs; /* [capacity, dim] each */
    float *priority;                                 /* [capacity], prioritised only */
    rl_sumtree tree;                                 /* leaves p^alpha, prioritised only */
};

rp_replay_config rp_replay_config_default(void)
{
    rp_replay_config c;
    memset(&c, 0, sizeof c);
    c.capacity = 1000000;
    c.prioritized = false;
    c.priority_exponent = 0.6f;
    c.importance_exponent = 0.4f;
    return c;
}

static size_t round_up(size_t bytes)
{
    return (bytes + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN;
}

rp_status rp_replay_create(rp_replay **out, const rp_replay_config *cfg)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_replay_create: r is NULL");
    *out = NULL;
    if (!cfg) return RP_ERROR(RP_ERR_INVALID, "rp_replay_create: cfg is NULL");
    if (cfg->capacity < 1 || cfg->capacity > REPLAY_CAPACITY_MAX)
        return RP_ERROR(RP_ERR_INVALID, "replay config: capacity %lld is outside [1, %lld]",
                        (long long)cfg->capacity, (long long)REPLAY_CAPACITY_MAX);
    if (cfg->obs_dim < 1)
        return RP_ERROR(RP_ERR_INVALID, "replay config: obs_dim %d must be >= 1", cfg->obs_dim);
    if (cfg->act_dim < 1)
        return RP_ERROR(RP_ERR_INVALID, "replay config: act_dim %d must be >= 1", cfg->act_dim);
    if (!(cfg->priority_exponent >= 0.0f) || isinf(cfg->priority_exponent))
        return RP_ERROR(RP_ERR_INVALID,
                        "replay config: priority_exponent (alpha) %g must be finite and >= 0",
                        (double)cfg->priority_exponent);
    if (!(cfg->importance_exponent >= 0.0f) || isinf(cfg->importance_exponent))
        return RP_ERROR(RP_ERR_INVALID,
                        "replay config: importance_exponent (beta) %g must be finite and >= 0",
                        (double)cfg->importance_exponent);

    size_t cap = (size_t)cfg->capacity;
    size_t obs_b = round_up(cap * (size_t)cfg->obs_dim * sizeof(float));
    size_t act_b = round_up(cap * (size_t)cfg->act_dim * sizeof(float));
    size_t one_b = round_up(cap * sizeof(float));
    size_t tree_b = cfg->prioritized
                        ? round_up((size_t)(2 * rl_sumtree_p2(cfg->capacity)) * sizeof(double))
                        : 0;
    size_t prio_b = cfg->prioritized ? one_b : 0;
    size_t total = tree_b + 2 * obs_b + act_b + 2 * one_b + prio_b;

    rp_replay *r = rp_calloc(sizeof *r);
    if (!r) return RP_ERROR(RP_ERR_NOMEM, "rp_replay_create: out of memory (%zu bytes)", sizeof *r);
    /* Not zeroed: untouched pages cost nothing until an insert writes them. */
    r->block = rp_alloc(total);
    if (!r->block) {
        rp_free(r);
        return RP_ERROR(RP_ERR_NOMEM,
                        "rp_replay_create: out of memory allocating %zu bytes for %lld items",
                        total, (long long)cfg->capacity);
    }
    char *p = r->block;
    if (cfg->prioritized) {
        rl_sumtree_init(&r->tree, (double *)p, cfg->capacity);
        p += tree_b;
    }
    r->obs = (float *)p, p += obs_b;
    r->next_obs = (float *)p, p += obs_b;
    r->act = (float *)p, p += act_b;
    r->reward = (float *)p, p += one_b;
    r->discount = (float *)p, p += one_b;
    if (cfg->prioritized) r->priority = (float *)p;
    r->cfg = *cfg;
    r->max_priority = 1.0f;
    *out = r;
    return RP_OK;
}

void rp_replay_destroy(rp_replay *r)
{
    if (!r) return;
    rp_free(r->block);
    rp_free(r);
}

int64_t rp_replay_size(const rp_replay *r)
{
    return r ? r->size : 0;
}

int64_t rp_replay_inserted(const rp_replay *r)
{
    return r ? r->inserted : 0;
}

int64_t rp_replay_capacity(const rp_replay *r)
{
    return r ? r->cfg.capacity : 0;
}

/* p^alpha as stored in the tree; 0 stays 0 even when alpha is 0. */
static double leaf_value(const rp_replay *r, float p)
{
    return p > 0.0f ? pow((double)p, (double)r->cfg.priority_exponent) : 0.0;
}

static void write_item(rp_replay *r, int64_t slot, const rp_transition *t)
{
    size_t od = (size_t)r->cfg.obs_dim, ad = (size_t)r->cfg.act_dim;
    memcpy(r->obs + (size_t)slot * od, t->obs, od * sizeof(float));
    memcpy(r->next_obs + (size_t)slot * od, t->next_obs, od * sizeof(float));
    memcpy(r->act + (size_t)slot * ad, t->act, ad * sizeof(float));
    r->reward[slot] = t->reward;
    r->discount[slot] = t->discount;
}

/* Sets slot's priority p, whose tree leaf is `leaf` = leaf_value(r, p). */
static void set_priority_leaf(rp_replay *r, int64_t slot, float p, double leaf)
{
    r->priority[slot] = p;
    rl_sumtree_set(&r->tree, slot, leaf);
    if (p > r->max_priority) r->max_priority = p;
}

static void set_priority(rp_replay *r, int64_t slot, float p)
{
    set_priority_leaf(r, slot, p, leaf_value(r, p));
}

rp_status rp_replay_insert(rp_replay *r, const rp_transition *t, int n, float priority)
{
    if (!r || (!t && n > 0) || n < 0)
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_insert: r or t NULL or n %d < 0", n);
    if (isnan(priority) || isinf(priority))
        return RP_ERROR(RP_ERR_NUMERIC, "rp_replay_insert: priority %g is not finite",
                        (double)priority);
    for (int i = 0; i < n; i++)
        if (!t[i].obs || !t[i].act || !t[i].next_obs)
            return RP_ERROR(RP_ERR_INVALID, "rp_replay_insert: transition %d has a NULL %s", i,
                            !t[i].obs   ? "obs"
                            : !t[i].act ? "act"
                                        : "next_obs");
    float p = priority > 0.0f ? priority : r->max_priority;
    double leaf = r->cfg.prioritized ? leaf_value(r, p) : 0.0; /* one pow() per call */
    for (int i = 0; i < n; i++) {
        int64_t slot = r->inserted % r->cfg.capacity;
        write_item(r, slot, &t[i]);
        if (r->cfg.prioritized) set_priority_leaf(r, slot, p, leaf);
        r->inserted++;
        if (r->size < r->cfg.capacity) r->size++;
    }
    return RP_OK;
}

rp_status rp_replay_batch_alloc(rp_replay_batch *b, int n, int obs_dim, int act_dim)
{
    if (!b) return RP_ERROR(RP_ERR_INVALID, "rp_replay_batch_alloc: b is NULL");
    memset(b, 0, sizeof *b);
    if (n < 1 || obs_dim < 1 || act_dim < 1)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replay_batch_alloc: n %d, obs_dim %d, act_dim %d must all be >= 1", n,
                        obs_dim, act_dim);
    size_t un = (size_t)n;
    b->obs = rp_alloc(un * (size_t)obs_dim * sizeof(float));
    b->next_obs = rp_alloc(un * (size_t)obs_dim * sizeof(float));
    b->act = rp_alloc(un * (size_t)act_dim * sizeof(float));
    b->reward = rp_alloc(un * sizeof(float));
    b->discount = rp_alloc(un * sizeof(float));
    b->weights = rp_alloc(un * sizeof(float));
    b->keys = rp_alloc(un * sizeof(int64_t));
    if (!b->obs || !b->next_obs || !b->act || !b->reward || !b->discount || !b->weights ||
        !b->keys) {
        rp_replay_batch_free(b);
        return RP_ERROR(RP_ERR_NOMEM, "rp_replay_batch_alloc: out of memory for %d rows", n);
    }
    b->n = n;
    b->obs_dim = obs_dim;
    b->act_dim = act_dim;
    return RP_OK;
}

void rp_replay_batch_free(rp_replay_batch *b)
{
    if (!b) return;
    rp_free(b->obs);
    rp_free(b->next_obs);
    rp_free(b->act);
    rp_free(b->reward);
    rp_free(b->discount);
    rp_free(b->weights);
    rp_free(b->keys);
    memset(b, 0, sizeof *b);
}

/* Uniform in [0, 1) with 53 random bits, so that a mass lands within one part in 2^53 of total. */
static double uniform53(rp_rng *rng)
{
    uint64_t hi = rp_rng_u32(rng) >> 5, lo = rp_rng_u32(rng) >> 6; /* 27 + 26 bits */
    return (double)((hi << 26) | lo) * (1.0 / 9007199254740992.0);
}

/* The key held in `slot` (slot must hold an item). */
static int64_t slot_key(const rp_replay *r, int64_t slot)
{
    int64_t first = r->inserted - r->size, cap = r->cfg.capacity;
    return first + ((slot - first % cap) % cap + cap) % cap;
}

static void copy_row(const rp_replay *r, int64_t slot, rp_replay_batch *b, int row)
{
    size_t od = (size_t)r->cfg.obs_dim, ad = (size_t)r->cfg.act_dim;
    memcpy(b->obs + (size_t)row * od, r->obs + (size_t)slot * od, od * sizeof(float));
    memcpy(b->next_obs + (size_t)row * od, r->next_obs + (size_t)slot * od, od * sizeof(float));
    memcpy(b->act + (size_t)row * ad, r->act + (size_t)slot * ad, ad * sizeof(float));
    b->reward[row] = r->reward[slot];
    b->discount[row] = r->discount[slot];
}

rp_status rp_replay_sample(rp_replay *r, rp_rng *rng, int n, rp_replay_batch *b)
{
    if (!r || !rng || !b) return RP_ERROR(RP_ERR_INVALID, "rp_replay_sample: NULL argument");
    if (r->size == 0) return RP_ERROR(RP_ERR_INVALID, "rp_replay_sample: the replay is empty");
    if (n < 1 || n > b->n)
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_sample: n %d is outside [1, batch rows %d]", n,
                        b->n);
    if (b->obs_dim != r->cfg.obs_dim || b->act_dim != r->cfg.act_dim)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replay_sample: batch dims obs %d act %d differ from the replay's obs "
                        "%d act %d",
                        b->obs_dim, b->act_dim, r->cfg.obs_dim, r->cfg.act_dim);
    if (!r->cfg.prioritized) {
        int64_t first = r->inserted - r->size;
        for (int i = 0; i < n; i++) {
            int64_t key = first + (int64_t)rp_rng_below(rng, (uint32_t)r->size);
            copy_row(r, key % r->cfg.capacity, b, i);
            b->keys[i] = key;
            b->weights[i] = 1.0f;
        }
        return RP_OK;
    }
    double total = rl_sumtree_total(&r->tree);
    if (!(total > 0.0))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replay_sample: all %lld items have priority 0, nothing to sample",
                        (long long)r->size);
    double beta = r->cfg.importance_exponent, wmax = 0.0;
    for (int i = 0; i < n; i++) {
        int64_t slot = rl_sumtree_find(&r->tree, uniform53(rng) * total);
        copy_row(r, slot, b, i);
        b->keys[i] = slot_key(r, slot);
        /* w = (N P(i))^-beta; the max-normalisation below makes the largest exactly 1. */
        double prob = rl_sumtree_get(&r->tree, slot) / total;
        double w = pow((double)r->size * prob, -beta);
        b->weights[i] = (float)w;
        if (w > wmax) wmax = w;
    }
    for (int i = 0; i < n; i++)
        b->weights[i] = (float)((double)b->weights[i] / wmax);
    return RP_OK;
}

rp_status rp_replay_update_priorities(rp_replay *r, const int64_t *keys, const float *priorities,
                                      int n)
{
    if (!r || n < 0 || (n > 0 && (!keys || !priorities)))
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_update_priorities: NULL argument or n %d < 0",
                        n);
    for (int i = 0; i < n; i++) {
        if (!(priorities[i] >= 0.0f) || isinf(priorities[i]))
            return RP_ERROR(RP_ERR_NUMERIC,
                            "rp_replay_update_priorities: priority %g for key %lld (row %d) is "
                            "not a finite number >= 0",
                            (double)priorities[i], (long long)keys[i], i);
        if (keys[i] < 0 || keys[i] >= r->inserted)
            return RP_ERROR(RP_ERR_INVALID,
                            "rp_replay_update_priorities: key %lld (row %d) was never issued "
                            "(keys so far: [0, %lld))",
                            (long long)keys[i], i, (long long)r->inserted);
    }
    if (!r->cfg.prioritized) return RP_OK;
    int64_t first = r->inserted - r->size;
    for (int i = 0; i < n; i++)
        if (keys[i] >= first) set_priority(r, keys[i] % r->cfg.capacity, priorities[i]);
    return RP_OK;
}

rp_status rp_replay_get(const rp_replay *r, int64_t key, rp_transition *t, float *priority)
{
    if (!r || !t) return RP_ERROR(RP_ERR_INVALID, "rp_replay_get: NULL argument");
    if (key < r->inserted - r->size || key >= r->inserted)
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_get: key %lld is not held (held: [%lld, %lld))",
                        (long long)key, (long long)(r->inserted - r->size), (long long)r->inserted);
    int64_t slot = key % r->cfg.capacity;
    size_t od = (size_t)r->cfg.obs_dim, ad = (size_t)r->cfg.act_dim;
    t->obs = r->obs + (size_t)slot * od;
    t->next_obs = r->next_obs + (size_t)slot * od;
    t->act = r->act + (size_t)slot * ad;
    t->reward = r->reward[slot];
    t->discount = r->discount[slot];
    if (priority) *priority = r->cfg.prioritized ? r->priority[slot] : 1.0f;
    return RP_OK;
}

/* ---- checkpoints ---------------------------------------------------------------------- */

#define REPLAY_NCOUNTERS 5 /* inserted, size, obs_dim, act_dim, prioritized */

static rp_status tensor_name(char *buf, size_t size, const char *prefix, const char *name)
{
    int len = snprintf(buf, size, "%s%s", prefix ? prefix : "", name);
    if (len < 0 || (size_t)len >= size || len > RP_CHECKPOINT_NAME_MAX)
        return RP_ERROR(RP_ERR_INVALID, "replay checkpoint: prefix \"%s\" is too long",
                        prefix ? prefix : "");
    return RP_OK;
}

/* Adds column `src` ([capacity, dim]) oldest item first, gathered through `tmp`. */
static rp_status save_rows(const rp_replay *r, rp_checkpoint *ck, const char *prefix,
                           const char *name, const float *src, int dim, float *tmp)
{
    char full[RP_CHECKPOINT_NAME_MAX + 2];
    RP_CHECK(tensor_name(full, sizeof full, prefix, name));
    int64_t first = r->inserted - r->size;
    for (int64_t k = 0; k < r->size; k++)
        memcpy(tmp + (size_t)k * (size_t)dim,
               src + (size_t)((first + k) % r->cfg.capacity) * (size_t)dim,
               (size_t)dim * sizeof(float));
    int64_t shape[2] = {r->size, dim};
    return rp_checkpoint_add_f32(ck, full, dim == 1 ? 1 : 2, shape, r->size ? tmp : NULL);
}

rp_status rp_replay_save(const rp_replay *r, rp_checkpoint *ck, const char *prefix)
{
    if (!r || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_replay_save: r or ck is NULL");
    rp_status status = RP_OK;
    int widest = r->cfg.obs_dim > r->cfg.act_dim ? r->cfg.obs_dim : r->cfg.act_dim;
    float *tmp = rp_alloc((size_t)(r->size ? r->size : 1) * (size_t)widest * sizeof(float));
    if (!tmp) return RP_ERR_NOMEM;
    int64_t counters[REPLAY_NCOUNTERS] = {r->inserted, r->size, r->cfg.obs_dim, r->cfg.act_dim,
                                          r->cfg.prioritized};
    char full[RP_CHECKPOINT_NAME_MAX + 2];
    RP_TRY(tensor_name(full, sizeof full, prefix, "counters"));
    RP_TRY(rp_checkpoint_add_i64(ck, full, REPLAY_NCOUNTERS, counters));
    RP_TRY(tensor_name(full, sizeof full, prefix, "max_priority"));
    int64_t one = 1;
    RP_TRY(rp_checkpoint_add_f32(ck, full, 1, &one, &r->max_priority));
    RP_TRY(save_rows(r, ck, prefix, "obs", r->obs, r->cfg.obs_dim, tmp));
    RP_TRY(save_rows(r, ck, prefix, "act", r->act, r->cfg.act_dim, tmp));
    RP_TRY(save_rows(r, ck, prefix, "reward", r->reward, 1, tmp));
    RP_TRY(save_rows(r, ck, prefix, "discount", r->discount, 1, tmp));
    RP_TRY(save_rows(r, ck, prefix, "next_obs", r->next_obs, r->cfg.obs_dim, tmp));
    if (r->cfg.prioritized) RP_TRY(save_rows(r, ck, prefix, "priority", r->priority, 1, tmp));
cleanup:
    rp_free(tmp);
    return status;
}

/* Finds f32 tensor prefix+name holding rows x dim values (shape [rows] when dim is 1). */
static rp_status load_rows(const rp_checkpoint *ck, const char *prefix, const char *name,
                           int64_t rows, int dim, const float **out)
{
    char full[RP_CHECKPOINT_NAME_MAX + 2];
    RP_CHECK(tensor_name(full, sizeof full, prefix, name));
    int ndim = 0;
    int64_t shape[8] = {0};
    const float *p = rp_checkpoint_get_f32(ck, full, &ndim, shape);
    if (!p)
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_load: no f32 tensor \"%s\" in the checkpoint",
                        full);
    bool ok = dim == 1 ? (ndim == 1 && shape[0] == rows)
                       : (ndim == 2 && shape[0] == rows && shape[1] == dim);
    if (!ok) {
        rp_status code = (ndim == 2 && shape[0] == rows) ? RP_ERR_SHAPE : RP_ERR_INVALID;
        return RP_ERROR(
            code, "rp_replay_load: \"%s\" has %d dims [%lld, %lld], expected [%lld, %d]", full,
            ndim, (long long)shape[0], (long long)(ndim > 1 ? shape[1] : 1), (long long)rows, dim);
    }
    *out = p;
    return RP_OK;
}

rp_status rp_replay_load(rp_replay *r, const rp_checkpoint *ck, const char *prefix)
{
    if (!r || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_replay_load: r or ck is NULL");
    char full[RP_CHECKPOINT_NAME_MAX + 2];
    RP_CHECK(tensor_name(full, sizeof full, prefix, "counters"));
    int64_t nc = 0;
    const int64_t *c = rp_checkpoint_get_i64(ck, full, &nc);
    if (!c || nc != REPLAY_NCOUNTERS)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_replay_load: \"%s\" is missing or not %d int64 values (has %lld)", full,
                        REPLAY_NCOUNTERS, (long long)nc);
    int64_t inserted = c[0], size = c[1];
    if (c[2] != r->cfg.obs_dim || c[3] != r->cfg.act_dim)
        return RP_ERROR(RP_ERR_SHAPE,
                        "rp_replay_load: saved obs_dim %lld act_dim %lld, this replay has obs_dim "
                        "%d act_dim %d",
                        (long long)c[2], (long long)c[3], r->cfg.obs_dim, r->cfg.act_dim);
    if (size < 0 || inserted < size)
        return RP_ERROR(RP_ERR_INVALID, "rp_replay_load: bad counters inserted %lld size %lld",
                        (long long)inserted, (long long)size);
    if (size > r->cfg.capacity)
        return RP_ERROR(RP_ERR_SHAPE,
                        "rp_replay_load: %lld items saved, more than this replay's capacity %lld",
                        (long long)size, (long long)r->cfg.capacity);
    bool saved_prio = c[4] != 0;
    const float *obs, *act, *reward, *discount, *next_obs, *prio = NULL, *maxp;
    RP_CHECK(load_rows(ck, prefix, "obs", size, r->cfg.obs_dim, &obs));
    RP_CHECK(load_rows(ck, prefix, "act", size, r->cfg.act_dim, &act));
    RP_CHECK(load_rows(ck, prefix, "reward", size, 1, &reward));
    RP_CHECK(load_rows(ck, prefix, "discount", size, 1, &discount));
    RP_CHECK(load_rows(ck, prefix, "next_obs", size, r->cfg.obs_dim, &next_obs));
    RP_CHECK(load_rows(ck, prefix, "max_priority", 1, 1, &maxp));
    if (saved_prio) {
        RP_CHECK(load_rows(ck, prefix, "priority", size, 1, &prio));
        for (int64_t k = 0; k < size; k++)
            if (!(prio[k] >= 0.0f) || isinf(prio[k]))
                return RP_ERROR(RP_ERR_NUMERIC, "rp_replay_load: saved priority %g of key %lld",
                                (double)prio[k], (long long)(inserted - size + k));
    }
    if (!(maxp[0] > 0.0f) || isinf(maxp[0]))
        return RP_ERROR(RP_ERR_NUMERIC, "rp_replay_load: saved max_priority %g", (double)maxp[0]);

    /* Everything checked: now replace the contents. */
    r->inserted = inserted;
    r->size = size;
    r->max_priority = saved_prio ? maxp[0] : 1.0f;
    if (r->cfg.prioritized) rl_sumtree_init(&r->tree, r->tree.node, r->cfg.capacity);
    size_t od = (size_t)r->cfg.obs_dim, ad = (size_t)r->cfg.act_dim;
    for (int64_t k = 0; k < size; k++) {
        rp_transition t = {obs + (size_t)k * od, act + (size_t)k * ad, reward[k], discount[k],
                           next_obs + (size_t)k * od};
        int64_t slot = (inserted - size + k) % r->cfg.capacity;
        write_item(r, slot, &t);
        if (r->cfg.prioritized) set_priority(r, slot, prio ? prio[k] : 1.0f);
    }
    return RP_OK;
}
