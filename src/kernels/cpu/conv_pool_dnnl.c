/*
 * conv_pool_dnnl.c - convolution and pooling on the CPU: oneDNN 2.6 (C API,
 * op-descriptor flavour) for convolution and average pooling, a vectorised
 * OpenMP loop for max pooling.
 *
 * Why these choices (bench/bench_kernels.c, 2-core Sapphire Rapids VM):
 *  - Weights: the primitive picks its own weight layout (dnnl_format_tag_any)
 *    and we reorder from / to the user's OHWI on every call. Forcing OHWI
 *    leaves oneDNN 2.6 only its reference implementation for NHWC activations
 *    ("ref:any": 0.05 / 0.07 / 0.4 GFLOP/s for fwd / bwd-data / bwd-weights
 *    of a 3x3 16->16 convolution on 32x32, against 156 / 150 / 143 for
 *    brgconv / jit:avx512_core with blocked weights, section (d)); the
 *    reorder of a weight tensor is tiny next to the convolution. Weights
 *    change every step, so the reorder cannot be skipped.
 *  - Max pooling: oneDNN's workspace is not our int32 flat-offset argmax, so
 *    using oneDNN would mean its pass plus a second argmax pass. One loop over
 *    NHWC with channels innermost computes both and vectorises; it ran in
 *    14.5 ms against 17.5 ms for oneDNN's max pooling alone on the ResNet-18
 *    stem pool (N=32, 112x112x64, 3x3 s2 p1) and 0.65 against 1.18 ms for
 *    2x2 s2 on N=128 32x32x16, section (c).
 *  - Scratchpads are user-managed: one buffer per thread, grown only when a
 *    new primitive needs more, so steady-state calls allocate nothing.
 *
 * The cache: each thread owns a small array of entries keyed by (kind, every
 * descriptor field). An entry holds up to three steps (weights reorder in,
 * the primitive, weights reorder out), each with its argument list, and the
 * memory objects they use. Memory objects that stand for caller buffers are
 * created without a buffer and pointed at the caller's data on every call
 * with dnnl_memory_set_data_handle, so no user data is copied except by the
 * weight reorders.
 */
#include <math.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "core/bf16.h"
#include "kernels/cpu/bf16_round.h"
#include "kernels/cpu/conv_pool_dnnl.h"
#include "kernels/ref/conv_pool_ref.h"

/* ---- process-wide state: the engine and the thread-exit hook ------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_status_t g_engine_status = dnnl_runtime_error;
static pthread_key_t g_thread_key;
static int g_thread_key_ok;

/* ---- the per-thread cache ------------------------------------------------ */

typedef enum {
    KIND_CONV_FWD,
    KIND_CONV_FWD_BIAS,
    KIND_CONV_BWD_DATA,
    KIND_CONV_BWD_WEIGHTS,
    KIND_CONV_BWD_WEIGHTS_BIAS,
    KIND_AVGPOOL_FWD,
    KIND_AVGPOOL_BWD,
    KIND_MATMUL
} entry_kind;

static const char *const kind_names[] = {
    "conv2d forward",
    "conv2d forward with bias",
    "conv2d backward data",
    "conv2d backward weights",
    "conv2d backward weights and bias",
    "avgpool forward",
    "avgpool backward",
    "matmul",
};

/* KEY_DY_TYPE: the storage of a backward pass's dy (bf16 once bwd_dy has narrowed it). */
enum {
    KEY_LEN = 17,
    KEY_COMPUTE = 12,
    KEY_X_TYPE = 13,
    KEY_Y_TYPE = 14,
    KEY_DY_TYPE = 15,
    KEY_WINOGRAD = 16
};

/* kind followed by every field of the descriptor, so memcmp decides equality. */
typedef struct cache_key {
    int v[KEY_LEN];
} cache_key;

/* Where a step argument's buffer comes from on each call. */
/* FEED_STAGE0/1: the thread's staging buffers, activations in a Winograd primitive's layout. */
enum { FEED_OWNED = -1, FEED_SCRATCH = -2, FEED_STAGE0 = -3, FEED_STAGE1 = -4 };
enum { MAX_ARGS = 6, MAX_STEPS = 5, MAX_MEMS = 16 };

typedef struct dnnl_step {
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[MAX_ARGS];
    int feed[MAX_ARGS]; /* index into the call's pointer list, FEED_OWNED or FEED_SCRATCH */
} dnnl_step;

typedef struct cache_entry {
    cache_key key;
    bool winograd;      /* the convolution runs oneDNN's Winograd algorithm */
    size_t owned_bytes; /* buffers oneDNN allocated for this entry (weights in its layout) */
    uint64_t last_used;
    int nsteps;
    dnnl_step steps[MAX_STEPS];
    int nmems;
    dnnl_memory_t mems[MAX_MEMS]; /* every memory object the steps use, owned here */
} cache_entry;

typedef struct thread_state {
    dnnl_stream_t stream;
    cache_entry **entries;
    int count, cap;
    int last_hit;
    uint64_t tick;
    void *scratch; /* shared by all entries of this thread; calls are sequential */
    size_t scratch_bytes;
    void *stage[2]; /* likewise: activations reordered to and from a primitive's own layout */
    size_t stage_bytes[2];
    void *dy_half; /* a bf16 backward's dy, narrowed by bwd_dy (once for both passes) */
    size_t dy_half_bytes;
} thread_state;

static _Thread_local thread_state *tls_state;

static const char *dnnl_status_str(dnnl_status_t s)
{
    switch (s) {
    case dnnl_success:
        return "success";
    case dnnl_out_of_memory:
        return "out of memory";
    case dnnl_invalid_arguments:
        return "invalid arguments";
    case dnnl_unimplemented:
        return "unimplemented";
    case dnnl_iterator_ends:
        return "iterator ends";
    case dnnl_runtime_error:
        return "runtime error";
    case dnnl_not_required:
        return "not required";
    default:
        return "unknown status";
    }
}

/* Writes "conv2d forward x[n,h,w,c]=[...] ..." for error messages. */
static void key_describe(const cache_key *k, char *buf, size_t size)
{
    const int *v = k->v + 1;
    if (k->v[0] <= KIND_CONV_BWD_WEIGHTS_BIAS) {
        snprintf(buf, size,
                 "%s, x[n,h,w,c]=[%d,%d,%d,%d], w[o,kh,kw,c]=[%d,%d,%d,%d], "
                 "y[n,oh,ow,o]=[%d,%d,%d,%d], stride %d, pad %d, %s compute",
                 kind_names[k->v[0]], v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[3], v[0], v[7],
                 v[8], v[4], v[9], v[10], rp_dtype_name((rp_dtype)k->v[KEY_COMPUTE]));
    } else if (k->v[0] == KIND_MATMUL) {
        snprintf(buf, size, "%s, %s[%d,%d] x %s[%d,%d], lda %d, ldb %d, ldc %d, %s compute",
                 kind_names[k->v[0]], v[0] ? "A^T" : "A", v[2], v[4], v[1] ? "B^T" : "B", v[4],
                 v[3], v[5], v[6], v[7], rp_dtype_name((rp_dtype)k->v[KEY_COMPUTE]));
    } else {
        snprintf(buf, size,
                 "%s, x[n,h,w,c]=[%d,%d,%d,%d], window %dx%d, stride %d, pad %d, "
                 "y[n,oh,ow,c]=[%d,%d,%d,%d]",
                 kind_names[k->v[0]], v[0], v[1], v[2], v[3], v[6], v[6], v[7], v[8], v[0], v[4],
                 v[5], v[3]);
    }
}

/* Records an RP_ERR_BACKEND naming the oneDNN function, its status and the shape. */
static rp_status backend_error(const char *fn, dnnl_status_t s, const cache_key *k,
                               const char *file, int line)
{
    char shape[256];
    key_describe(k, shape, sizeof shape);
    return rp_error_set(RP_ERR_BACKEND, file, line, "oneDNN %s failed (%s, status %d) for %s", fn,
                        dnnl_status_str(s), (int)s, shape);
}

/* Calls fn(args...) and on failure records the error and jumps to cleanup. */
#define DNNL_TRY(fn, args)                                                                         \
    do {                                                                                           \
        dnnl_status_t dnnl_try_status_ = fn args;                                                  \
        if (dnnl_try_status_ != dnnl_success) {                                                    \
            status = backend_error(#fn, dnnl_try_status_, key, __FILE__, __LINE__);                \
            goto cleanup;                                                                          \
        }                                                                                          \
    } while (0)

/* Destroys an entry's primitives and memory objects (never the caller's buffers). NULL is fine. */
static void entry_destroy(cache_entry *e)
{
    if (!e) return;
    for (int i = 0; i < e->nsteps; i++)
        if (e->steps[i].prim) dnnl_primitive_destroy(e->steps[i].prim);
    for (int i = 0; i < e->nmems; i++)
        dnnl_memory_destroy(e->mems[i]);
    rp_free(e);
}

/*
 * Frees a thread's cache, scratchpad and stream: the pthread key destructor
 * at thread exit, and kcpu_dnnl_cache_clear.
 */
static void thread_state_destroy(void *p)
{
    thread_state *t = p;
    if (!t) return;
    for (int i = 0; i < t->count; i++)
        entry_destroy(t->entries[i]);
    rp_free(t->entries);
    rp_free(t->scratch);
    rp_free(t->stage[0]);
    rp_free(t->stage[1]);
    rp_free(t->dy_half);
    if (t->stream) dnnl_stream_destroy(t->stream);
    rp_free(t);
    if (tls_state == t) tls_state = NULL;
}

/* Once per process: the CPU engine, and the key whose destructor frees a thread's cache. */
static void global_init(void)
{
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    g_thread_key_ok = pthread_key_create(&g_thread_key, thread_state_destroy) == 0;
}

/* The calling thread's state, created on first use (engine first, once per process). */
static rp_status thread_state_get(thread_state **out)
{
    if (tls_state) {
        *out = tls_state;
        return RP_OK;
    }
    pthread_once(&g_once, global_init);
    if (g_engine_status != dnnl_success)
        return RP_ERROR(RP_ERR_BACKEND, "oneDNN dnnl_engine_create(dnnl_cpu, 0) failed (%s)",
                        dnnl_status_str(g_engine_status));
    thread_state *t = rp_calloc(sizeof *t);
    if (!t) return RP_ERR_NOMEM;
    dnnl_status_t s = dnnl_stream_create(&t->stream, g_engine, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        rp_free(t);
        return RP_ERROR(RP_ERR_BACKEND, "oneDNN dnnl_stream_create failed (%s)",
                        dnnl_status_str(s));
    }
    if (g_thread_key_ok) pthread_setspecific(g_thread_key, t);
    tls_state = t;
    *out = t;
    return RP_OK;
}

int kcpu_dnnl_cache_entries(void)
{
    return tls_state ? tls_state->count : 0;
}

size_t kcpu_dnnl_cache_bytes(void)
{
    const thread_state *t = tls_state;
    if (!t) return 0;
    size_t bytes = t->scratch_bytes + t->stage_bytes[0] + t->stage_bytes[1] + t->dy_half_bytes;
    for (int i = 0; i < t->count; i++)
        bytes += t->entries[i]->owned_bytes;
    return bytes;
}

void kcpu_dnnl_cache_clear(void)
{
    thread_state *t = tls_state;
    if (!t) return;
    if (g_thread_key_ok) pthread_setspecific(g_thread_key, NULL);
    thread_state_destroy(t);
}

/*
 * Linear search, checking the last hit first: a thread holds a few dozen
 * shapes, and a 52-byte memcmp per entry is nothing next to a convolution.
 */
static cache_entry *cache_find(thread_state *t, const cache_key *k)
{
    if (t->last_hit < t->count && !memcmp(&t->entries[t->last_hit]->key, k, sizeof *k))
        return t->entries[t->last_hit];
    for (int i = 0; i < t->count; i++) {
        if (!memcmp(&t->entries[i]->key, k, sizeof *k)) {
            t->last_hit = i;
            return t->entries[i];
        }
    }
    return NULL;
}

/*
 * Adds a finished entry, evicting the least recently used one when the
 * cache is full. Takes ownership of e (destroys it on failure).
 */
static rp_status cache_insert(thread_state *t, cache_entry *e)
{
    if (t->count == RP_DNNL_CACHE_MAX) {
        int lru = 0;
        for (int i = 1; i < t->count; i++)
            if (t->entries[i]->last_used < t->entries[lru]->last_used) lru = i;
        entry_destroy(t->entries[lru]);
        t->entries[lru] = e;
        t->last_hit = lru;
        return RP_OK;
    }
    if (t->count == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        if (cap > RP_DNNL_CACHE_MAX) cap = RP_DNNL_CACHE_MAX;
        cache_entry **grown = rp_alloc((size_t)cap * sizeof *grown);
        if (!grown) {
            entry_destroy(e);
            return RP_ERR_NOMEM;
        }
        if (t->count) memcpy(grown, t->entries, (size_t)t->count * sizeof *grown);
        rp_free(t->entries);
        t->entries = grown;
        t->cap = cap;
    }
    t->last_hit = t->count;
    t->entries[t->count++] = e;
    return RP_OK;
}

/* ---- building entries ---------------------------------------------------- */

/*
 * Creates a memory object for md and records it in e. With owned, oneDNN
 * allocates the buffer (a weight tensor in the primitive's layout);
 * otherwise the buffer is set on every call.
 */
static rp_status entry_memory(cache_entry *e, dnnl_memory_t *out, const dnnl_memory_desc_t *md,
                              bool owned, const cache_key *key)
{
    rp_status status = RP_OK;
    if (e->nmems == MAX_MEMS) return RP_ERROR(RP_ERR_BACKEND, "conv_pool_dnnl: too many memories");
    DNNL_TRY(dnnl_memory_create,
             (out, md, g_engine, owned ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE));
    e->mems[e->nmems++] = *out;
    if (owned) e->owned_bytes += dnnl_memory_desc_get_size(md);
cleanup:
    return status;
}

/* Appends an execution argument and where its buffer comes from. */
static void step_arg(dnnl_step *s, int arg, dnnl_memory_t m, int feed)
{
    if (s->nargs == MAX_ARGS) return; /* unreachable: no step takes more than 5 arguments */
    s->args[s->nargs] = (dnnl_exec_arg_t){.arg = arg, .memory = m};
    s->feed[s->nargs] = feed;
    s->nargs++;
}

/* Grows a thread's shared buffer to at least bytes (only at build time; the contents are not kept).
 */
static rp_status buffer_grow(void **buf, size_t *have, size_t bytes)
{
    if (bytes <= *have) return RP_OK;
    void *grown = rp_alloc(bytes);
    if (!grown) return RP_ERR_NOMEM;
    rp_free(*buf);
    *buf = grown;
    *have = bytes;
    return RP_OK;
}

/*
 * Appends a step running the primitive of pd. When the primitive needs a
 * scratchpad, the thread's shared scratch buffer grows to fit (only here,
 * at build time) and a scratchpad argument is added.
 */
static rp_status entry_step(thread_state *t, cache_entry *e, const_dnnl_primitive_desc_t pd,
                            dnnl_step **out, const cache_key *key)
{
    rp_status status = RP_OK;
    dnnl_step *s = &e->steps[e->nsteps];
    DNNL_TRY(dnnl_primitive_create, (&s->prim, pd));
    e->nsteps++;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (bytes > 0) {
        RP_TRY(buffer_grow(&t->scratch, &t->scratch_bytes, bytes));
        dnnl_memory_t m;
        RP_TRY(entry_memory(e, &m, smd, false, key));
        step_arg(s, DNNL_ARG_SCRATCHPAD, m, FEED_SCRATCH);
    }
    *out = s;
cleanup:
    return status;
}

/* Appends a reorder step from one memory to another (the weight reorders). */
static rp_status entry_reorder(thread_state *t, cache_entry *e, dnnl_memory_t from, int from_feed,
                               const dnnl_memory_desc_t *from_md, dnnl_memory_t to, int to_feed,
                               const dnnl_memory_desc_t *to_md, const_dnnl_primitive_attr_t attr,
                               const cache_key *key)
{
    rp_status status = RP_OK;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_step *s;
    DNNL_TRY(dnnl_reorder_primitive_desc_create, (&pd, from_md, g_engine, to_md, g_engine, attr));
    RP_TRY(entry_step(t, e, pd, &s, key));
    step_arg(s, DNNL_ARG_FROM, from, from_feed);
    step_arg(s, DNNL_ARG_TO, to, to_feed);
cleanup:
    if (pd) dnnl_primitive_desc_destroy(pd);
    return status;
}

/* Attributes for every primitive we build: scratchpad managed by us, not by oneDNN. */
static rp_status attr_create(dnnl_primitive_attr_t *attr, const cache_key *key)
{
    rp_status status = RP_OK;
    *attr = NULL;
    DNNL_TRY(dnnl_primitive_attr_create, (attr));
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode, (*attr, dnnl_scratchpad_mode_user));
    return RP_OK;
cleanup:
    if (*attr) dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
    return status;
}

/* Pointer-list layouts passed to entry_run, per kind. */
enum { FWD_Y, FWD_X, FWD_W, FWD_BIAS };
enum { BWDD_DX, BWDD_DY, BWDD_W };
enum { BWDW_DW, BWDW_DB, BWDW_DY, BWDW_X };
enum { POOL_OUT, POOL_IN };

/*
 * The algorithm (rp_kernels_set_conv_algorithm): with AUTO, 3x3 stride-1
 * convolutions of at least 16 input and output channels ask for Winograd
 * F(4x4, 3x3), which oneDNN has on AVX-512 CPUs (jit_wino_4x3); build_conv
 * falls back to direct where it has not. Its blocked layout needs the
 * activations reordered in and out (the staging buffers) and pads channels
 * to 16, so a 1-channel image costs 16x: with 1 input channel it ran 3x
 * slower than direct, hence the 16-channel floor. Measurements:
 * docs/benchmarks.md ("Winograd convolutions").
 */
static bool winograd_wanted(const kernels_conv_desc *d)
{
    return rp_kernels_get_conv_algorithm() == RP_CONV_AUTO && d->compute == RP_F32 &&
           d->x_type == RP_F32 && d->y_type == RP_F32 && d->kh == 3 && d->kw == 3 &&
           d->stride == 1 && d->c >= 16 && d->o >= 16;
}

/*
 * The forward primitive descriptor and, for the backward kinds, the backward
 * one (with the forward as hint), for algorithm alg. fwd[] holds the forward
 * descriptor's source, weights and destination, bwd[] the backward one's
 * (diff) source, (diff) weights and (diff) destination: they differ only in
 * bf16 compute, where a backward pass's f32 output has no forward twin. With
 * Winograd the activations' layout is the primitive's choice (any); NULL pds
 * on failure.
 */
static dnnl_status_t conv_pds(dnnl_alg_kind_t alg, int kind, const dnnl_memory_desc_t *const *fwd,
                              const dnnl_memory_desc_t *const *bwd,
                              const dnnl_memory_desc_t *bias_md, const dnnl_dims_t strides,
                              const dnnl_dims_t pad, const_dnnl_primitive_attr_t attr,
                              dnnl_primitive_desc_t *fwd_pd, dnnl_primitive_desc_t *bwd_pd)
{
    dnnl_convolution_desc_t fwd_desc, bwd_desc;
    dnnl_status_t st = dnnl_convolution_forward_desc_init(
        &fwd_desc, dnnl_forward_training, alg, fwd[0], fwd[1], bias_md, fwd[2], strides, pad, pad);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(fwd_pd, &fwd_desc, attr, g_engine, NULL);
    if (st != dnnl_success) {
        *fwd_pd = NULL;
        return st;
    }
    if (kind == KIND_CONV_BWD_DATA)
        st = dnnl_convolution_backward_data_desc_init(&bwd_desc, alg, bwd[0], bwd[1], bwd[2],
                                                      strides, pad, pad);
    else if (kind == KIND_CONV_BWD_WEIGHTS || kind == KIND_CONV_BWD_WEIGHTS_BIAS)
        st = dnnl_convolution_backward_weights_desc_init(&bwd_desc, alg, bwd[0], bwd[1], bias_md,
                                                         bwd[2], strides, pad, pad);
    else
        return dnnl_success;
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(bwd_pd, &bwd_desc, attr, g_engine, *fwd_pd);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(*fwd_pd);
        *fwd_pd = *bwd_pd = NULL;
    }
    return st;
}

/*
 * An activation the primitive reads or writes: the caller's NHWC buffer
 * directly, or, when the primitive chose another layout, the thread's staging
 * buffer `stage` plus a reorder from the caller's buffer before the primitive
 * (in) or to it after (out, added by the caller once the primitive's step exists).
 */
typedef struct act_binding {
    dnnl_memory_t user, prim;
    const dnnl_memory_desc_t *prim_md;
    int user_feed, prim_feed;
    bool staged;
} act_binding;

static rp_status act_bind(thread_state *t, cache_entry *e, act_binding *b,
                          const dnnl_memory_desc_t *user_md, const_dnnl_primitive_desc_t pd,
                          dnnl_query_t what, int user_feed, int stage, bool in,
                          const_dnnl_primitive_attr_t attr, const cache_key *key)
{
    rp_status status = RP_OK;
    b->prim_md = dnnl_primitive_desc_query_md(pd, what, 0);
    if (!b->prim_md)
        return backend_error("dnnl_primitive_desc_query_md(activation)", dnnl_runtime_error, key,
                             __FILE__, __LINE__);
    b->user_feed = user_feed;
    b->staged = !dnnl_memory_desc_equal(b->prim_md, user_md);
    RP_TRY(entry_memory(e, &b->user, user_md, false, key));
    if (!b->staged) {
        b->prim = b->user;
        b->prim_feed = user_feed;
        return RP_OK;
    }
    b->prim_feed = stage == 0 ? FEED_STAGE0 : FEED_STAGE1;
    RP_TRY(buffer_grow(&t->stage[stage], &t->stage_bytes[stage],
                       dnnl_memory_desc_get_size(b->prim_md)));
    RP_TRY(entry_memory(e, &b->prim, b->prim_md, false, key));
    if (in)
        RP_TRY(entry_reorder(t, e, b->user, user_feed, user_md, b->prim, b->prim_feed, b->prim_md,
                             attr, key));
cleanup:
    return status;
}

/* The reorder after the primitive that copies a staged output back to the caller's buffer. */
static rp_status act_unbind(thread_state *t, cache_entry *e, const act_binding *b,
                            const dnnl_memory_desc_t *user_md, const_dnnl_primitive_attr_t attr,
                            const cache_key *key)
{
    if (!b->staged) return RP_OK;
    return entry_reorder(t, e, b->prim, b->prim_feed, b->prim_md, b->user, b->user_feed, user_md,
                         attr, key);
}

/*
 * Builds a convolution entry: the primitive with the weight layout oneDNN
 * prefers, plus a reorder from the user's OHWI weights (forward, backward
 * data) or to them (backward weights) when the layouts differ. Direct
 * convolutions take the NHWC activations as they are; Winograd ones take
 * them in their own blocked layout, through the staging reorders.
 * Backward primitives get a forward primitive descriptor as hint.
 */
static rp_status build_conv(thread_state *t, const cache_key *key, const kernels_conv_desc *d,
                            cache_entry **out)
{
    rp_status status = RP_OK;
    const int kind = key->v[0];
    const bool bias = kind == KIND_CONV_FWD_BIAS || kind == KIND_CONV_BWD_WEIGHTS_BIAS;
    const bool fwd = kind == KIND_CONV_FWD || kind == KIND_CONV_FWD_BIAS;
    const bool to_user = kind == KIND_CONV_BWD_WEIGHTS || kind == KIND_CONV_BWD_WEIGHTS_BIAS;
    const dnnl_data_type_t mul_t = key->v[KEY_COMPUTE] == RP_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_data_type_t x_t = key->v[KEY_X_TYPE] == RP_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_data_type_t y_t = key->v[KEY_Y_TYPE] == RP_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_data_type_t dy_t = key->v[KEY_DY_TYPE] == RP_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL;
    cache_entry *e = NULL;
    dnnl_memory_desc_t src_md, dst_md, wuser_md, wany_md, bias_md, src_any, dst_any;
    dnnl_dims_t src_dims = {d->n, d->c, d->h, d->w}, dst_dims = {d->n, d->o, d->oh, d->ow};
    dnnl_dims_t w_dims = {d->o, d->c, d->kh, d->kw}, b_dims = {d->o};
    dnnl_dims_t strides = {d->stride, d->stride}, pad = {d->pad, d->pad};

    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&src_any, 4, src_dims, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&dst_any, 4, dst_dims, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&wuser_md, 4, w_dims, dnnl_f32, dnnl_ohwi));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&wany_md, 4, w_dims, dnnl_f32, dnnl_format_tag_any));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&bias_md, 1, b_dims, dnnl_f32, dnnl_x));
    /* bf16 compute: the multiplied inputs in bf16 on the primitive's side (the staging and
       weight reorders convert the caller's f32), every output f32. */
    dnnl_memory_desc_t src_m, dst_m, w_m, x_md, y_md, dy_md;
    /* The caller's x and forward y in their storage types (gradients are f32: src_md, dst_md). */
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&x_md, 4, src_dims, x_t, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&y_md, 4, dst_dims, y_t, dnnl_nhwc));
    /* The caller's dy: f32, or bf16 already (then no reorder narrows it). */
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&dy_md, 4, dst_dims, dy_t, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&src_m, 4, src_dims, mul_t, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&dst_m, 4, dst_dims, mul_t, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&w_m, 4, w_dims, mul_t, dnnl_format_tag_any));
    RP_TRY(attr_create(&attr, key));

    /* Winograd where this CPU and shape have it (every pass of the kind), else direct. */
    const dnnl_memory_desc_t *wino[] = {&src_any, &wany_md, &dst_any};
    const dnnl_memory_desc_t *fwd_md[] = {&src_m, &w_m, fwd ? &y_md : &dst_m};
    const dnnl_memory_desc_t *bwd_md[] = {kind == KIND_CONV_BWD_DATA ? &src_md : &src_m,
                                          to_user ? &wany_md : &w_m,
                                          kind == KIND_CONV_BWD_DATA || to_user ? &dst_m : &dst_md};
    if (!key->v[KEY_WINOGRAD] ||
        conv_pds(dnnl_convolution_winograd, kind, wino, wino, bias ? &bias_md : NULL, strides, pad,
                 attr, &fwd_pd, &bwd_pd) != dnnl_success)
        DNNL_TRY(conv_pds, (dnnl_convolution_direct, kind, fwd_md, bwd_md, bias ? &bias_md : NULL,
                            strides, pad, attr, &fwd_pd, &bwd_pd));
    const_dnnl_primitive_desc_t pd = bwd_pd ? bwd_pd : fwd_pd;
    const char *impl = NULL;
    bool winograd =
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
        strstr(impl, "wino");

    const dnnl_memory_desc_t *wprim_md = dnnl_primitive_desc_query_md(
        pd, to_user ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    if (!wprim_md) {
        status = backend_error("dnnl_primitive_desc_query_md(weights)", dnnl_runtime_error, key,
                               __FILE__, __LINE__);
        goto cleanup;
    }
    const bool reorder = !dnnl_memory_desc_equal(wprim_md, &wuser_md);

    e = rp_calloc(sizeof *e);
    if (!e) {
        status = RP_ERR_NOMEM;
        goto cleanup;
    }
    e->key = *key;
    e->winograd = winograd;

    /* The weights: the user's buffer directly, or an owned buffer plus a reorder step. */
    const int wfeed = kind == KIND_CONV_BWD_DATA ? BWDD_W : to_user ? BWDW_DW : FWD_W;
    dnnl_memory_t wuser = NULL, wprim = NULL;
    RP_TRY(entry_memory(e, &wuser, &wuser_md, false, key));
    if (reorder) {
        RP_TRY(entry_memory(e, &wprim, wprim_md, true, key));
        if (!to_user)
            RP_TRY(entry_reorder(t, e, wuser, wfeed, &wuser_md, wprim, FEED_OWNED, wprim_md, attr,
                                 key));
    } else {
        wprim = wuser;
    }
    const int wprim_feed = reorder ? FEED_OWNED : wfeed;

    /* The activations: the input side first (its reorder runs before the primitive). */
    act_binding src, dst;
    dnnl_memory_t bmem = NULL;
    if (fwd) {
        RP_TRY(act_bind(t, e, &src, &x_md, pd, dnnl_query_src_md, FWD_X, 0, true, attr, key));
        RP_TRY(act_bind(t, e, &dst, &y_md, pd, dnnl_query_dst_md, FWD_Y, 1, false, attr, key));
    } else if (kind == KIND_CONV_BWD_DATA) {
        RP_TRY(
            act_bind(t, e, &dst, &dy_md, pd, dnnl_query_diff_dst_md, BWDD_DY, 1, true, attr, key));
        RP_TRY(act_bind(t, e, &src, &src_md, pd, dnnl_query_diff_src_md, BWDD_DX, 0, false, attr,
                        key));
    } else {
        RP_TRY(act_bind(t, e, &src, &x_md, pd, dnnl_query_src_md, BWDW_X, 0, true, attr, key));
        RP_TRY(
            act_bind(t, e, &dst, &dy_md, pd, dnnl_query_diff_dst_md, BWDW_DY, 1, true, attr, key));
    }
    if (bias) RP_TRY(entry_memory(e, &bmem, &bias_md, false, key));

    dnnl_step *s;
    RP_TRY(entry_step(t, e, pd, &s, key));
    if (fwd) {
        step_arg(s, DNNL_ARG_SRC, src.prim, src.prim_feed);
        step_arg(s, DNNL_ARG_WEIGHTS, wprim, wprim_feed);
        if (bias) step_arg(s, DNNL_ARG_BIAS, bmem, FWD_BIAS);
        step_arg(s, DNNL_ARG_DST, dst.prim, dst.prim_feed);
        RP_TRY(act_unbind(t, e, &dst, &y_md, attr, key));
    } else if (kind == KIND_CONV_BWD_DATA) {
        step_arg(s, DNNL_ARG_DIFF_SRC, src.prim, src.prim_feed);
        step_arg(s, DNNL_ARG_WEIGHTS, wprim, wprim_feed);
        step_arg(s, DNNL_ARG_DIFF_DST, dst.prim, dst.prim_feed);
        RP_TRY(act_unbind(t, e, &src, &src_md, attr, key));
    } else {
        step_arg(s, DNNL_ARG_SRC, src.prim, src.prim_feed);
        step_arg(s, DNNL_ARG_DIFF_WEIGHTS, wprim, wprim_feed);
        if (bias) step_arg(s, DNNL_ARG_DIFF_BIAS, bmem, BWDW_DB);
        step_arg(s, DNNL_ARG_DIFF_DST, dst.prim, dst.prim_feed);
        if (reorder)
            RP_TRY(entry_reorder(t, e, wprim, FEED_OWNED, wprim_md, wuser, wfeed, &wuser_md, attr,
                                 key));
    }
    *out = e;
    e = NULL;
cleanup:
    entry_destroy(e);
    if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return status;
}

/* Builds an average pooling entry (padding excluded), forward or backward. */
static rp_status build_avgpool(thread_state *t, const cache_key *key, const kernels_pool_desc *d,
                               cache_entry **out)
{
    rp_status status = RP_OK;
    const bool backward = key->v[0] == KIND_AVGPOOL_BWD;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fwd_pd = NULL, bwd_pd = NULL;
    cache_entry *e = NULL;
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_dims_t src_dims = {d->n, d->c, d->h, d->w}, dst_dims = {d->n, d->c, d->oh, d->ow};
    dnnl_dims_t kernel = {d->k, d->k}, strides = {d->stride, d->stride}, pad = {d->pad, d->pad};
    dnnl_pooling_desc_t fwd_desc, bwd_desc;

    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc));
    RP_TRY(attr_create(&attr, key));
    DNNL_TRY(dnnl_pooling_forward_desc_init,
             (&fwd_desc, dnnl_forward_training, dnnl_pooling_avg_exclude_padding, &src_md, &dst_md,
              strides, kernel, pad, pad));
    DNNL_TRY(dnnl_primitive_desc_create, (&fwd_pd, &fwd_desc, attr, g_engine, NULL));
    if (backward) {
        DNNL_TRY(dnnl_pooling_backward_desc_init, (&bwd_desc, dnnl_pooling_avg_exclude_padding,
                                                   &src_md, &dst_md, strides, kernel, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create, (&bwd_pd, &bwd_desc, attr, g_engine, fwd_pd));
    }

    e = rp_calloc(sizeof *e);
    if (!e) {
        status = RP_ERR_NOMEM;
        goto cleanup;
    }
    e->key = *key;
    dnnl_memory_t src, dst;
    dnnl_step *s;
    RP_TRY(entry_memory(e, &src, &src_md, false, key));
    RP_TRY(entry_memory(e, &dst, &dst_md, false, key));
    RP_TRY(entry_step(t, e, backward ? bwd_pd : fwd_pd, &s, key));
    step_arg(s, backward ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, src, backward ? POOL_OUT : POOL_IN);
    step_arg(s, backward ? DNNL_ARG_DIFF_DST : DNNL_ARG_DST, dst, backward ? POOL_IN : POOL_OUT);
    *out = e;
    e = NULL;
cleanup:
    entry_destroy(e);
    if (bwd_pd) dnnl_primitive_desc_destroy(bwd_pd);
    if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return status;
}

/* Pointer-list layout of a matmul entry. */
enum { MM_C, MM_A, MM_B };

/*
 * Builds a matmul entry for C[m,n] = alpha op(A) op(B) + beta C with the
 * multiplied inputs in the key's compute type: the caller's f32 A and B
 * (strided, transposed or not) are reordered into the staging buffers in
 * the primitive's type and layout (B in the layout the primitive prefers,
 * which AMX needs), C is written in place through a sum post-op.
 */
static rp_status build_matmul(thread_state *t, const cache_key *key, cache_entry **out)
{
    rp_status status = RP_OK;
    const int *v = key->v + 1;
    const bool ta = v[0], tb = v[1];
    const int m = v[2], n = v[3], k = v[4], lda = v[5], ldb = v[6], ldc = v[7];
    float alpha, beta;
    memcpy(&alpha, &v[8], sizeof alpha);
    memcpy(&beta, &v[9], sizeof beta);
    const dnnl_data_type_t mul_t = key->v[KEY_COMPUTE] == RP_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_primitive_attr_t attr = NULL, plain = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    cache_entry *e = NULL;
    dnnl_memory_desc_t a_user, b_user, c_md, a_md, b_md;
    dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    dnnl_dims_t a_str = {ta ? 1 : lda, ta ? lda : 1}, b_str = {tb ? 1 : ldb, tb ? ldb : 1};
    dnnl_dims_t c_str = {ldc, 1};

    DNNL_TRY(dnnl_memory_desc_init_by_strides, (&a_user, 2, a_dims, dnnl_f32, a_str));
    DNNL_TRY(dnnl_memory_desc_init_by_strides, (&b_user, 2, b_dims, dnnl_f32, b_str));
    DNNL_TRY(dnnl_memory_desc_init_by_strides, (&c_md, 2, c_dims, dnnl_f32, c_str));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&a_md, 2, a_dims, mul_t, dnnl_ab));
    DNNL_TRY(dnnl_memory_desc_init_by_tag, (&b_md, 2, b_dims, mul_t, dnnl_format_tag_any));
    RP_TRY(attr_create(&attr, key));
    RP_TRY(attr_create(&plain, key)); /* the reorders: no scale, no post-op */
    if (alpha != 1.0f) DNNL_TRY(dnnl_primitive_attr_set_output_scales, (attr, 1, 0, &alpha));
    if (beta != 0.0f) {
        DNNL_TRY(dnnl_post_ops_create, (&po));
        DNNL_TRY(dnnl_post_ops_append_sum, (po, beta));
        DNNL_TRY(dnnl_primitive_attr_set_post_ops, (attr, po));
    }
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init, (&desc, &a_md, &b_md, NULL, &c_md));
    DNNL_TRY(dnnl_primitive_desc_create, (&pd, &desc, attr, g_engine, NULL));

    e = rp_calloc(sizeof *e);
    if (!e) {
        status = RP_ERR_NOMEM;
        goto cleanup;
    }
    e->key = *key;
    act_binding a, b;
    dnnl_memory_t c;
    RP_TRY(act_bind(t, e, &a, &a_user, pd, dnnl_query_src_md, MM_A, 0, true, plain, key));
    RP_TRY(act_bind(t, e, &b, &b_user, pd, dnnl_query_weights_md, MM_B, 1, true, plain, key));
    RP_TRY(entry_memory(e, &c, &c_md, false, key));
    dnnl_step *s;
    RP_TRY(entry_step(t, e, pd, &s, key));
    step_arg(s, DNNL_ARG_SRC, a.prim, a.prim_feed);
    step_arg(s, DNNL_ARG_WEIGHTS, b.prim, b.prim_feed);
    step_arg(s, DNNL_ARG_DST, c, MM_C);
    *out = e;
    e = NULL;
cleanup:
    entry_destroy(e);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (plain) dnnl_primitive_attr_destroy(plain);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return status;
}

/* ---- running entries ----------------------------------------------------- */

/*
 * Points every caller-fed memory object at its buffer and executes the
 * steps in order on the thread's stream. Creates and allocates nothing.
 */
static rp_status entry_run(thread_state *t, cache_entry *e, void *const *ptrs)
{
    rp_status status = RP_OK;
    const cache_key *key = &e->key;
    e->last_used = ++t->tick;
    for (int i = 0; i < e->nsteps; i++) {
        dnnl_step *s = &e->steps[i];
        for (int a = 0; a < s->nargs; a++) {
            if (s->feed[a] == FEED_OWNED) continue;
            int f = s->feed[a];
            void *p = f == FEED_SCRATCH  ? t->scratch
                      : f == FEED_STAGE0 ? t->stage[0]
                      : f == FEED_STAGE1 ? t->stage[1]
                                         : ptrs[f];
            DNNL_TRY(dnnl_memory_set_data_handle, (s->args[a].memory, p));
        }
    }
    for (int i = 0; i < e->nsteps; i++)
        DNNL_TRY(dnnl_primitive_execute,
                 (e->steps[i].prim, t->stream, e->steps[i].nargs, e->steps[i].args));
    DNNL_TRY(dnnl_stream_wait, (t->stream));
cleanup:
    return status;
}

/* Cache keys: the kind and every descriptor field, unused slots zero; a convolution's last slot
 * says whether Winograd is wanted, so a change of algorithm takes effect on the next call. */
static cache_key conv_key(entry_kind kind, const kernels_conv_desc *d)
{
    return (cache_key){{kind, d->n, d->h, d->w, d->c, d->o, d->kh, d->kw, d->oh, d->ow, d->stride,
                        d->pad, (int)d->compute, (int)d->x_type, (int)d->y_type, (int)RP_F32,
                        winograd_wanted(d)}};
}

static cache_key pool_key(entry_kind kind, const kernels_pool_desc *d)
{
    return (cache_key){
        {kind, d->n, d->h, d->w, d->c, d->oh, d->ow, d->k, d->stride, d->pad, 0, 0, 0, 0, 0, 0}};
}

/* Finds or builds the entry for key, then runs it on ptrs. */
static rp_status run_cached(const cache_key *key, const kernels_conv_desc *cd,
                            const kernels_pool_desc *pd, void *const *ptrs)
{
    thread_state *t = NULL;
    RP_CHECK(thread_state_get(&t));
    cache_entry *e = cache_find(t, key);
    if (!e) {
        RP_CHECK(cd   ? build_conv(t, key, cd, &e)
                 : pd ? build_avgpool(t, key, pd, &e)
                      : build_matmul(t, key, &e));
        RP_CHECK(cache_insert(t, e));
    }
    return entry_run(t, e, ptrs);
}

/* ---- bf16 -------------------------------------------------------------------- */

/*
 * oneDNN fixes its ISA for the process at its first use ($ONEDNN_MAX_CPU_ISA included), so the
 * path is looked up once: every bf16 GEMM and convolution asks whether to take the reference.
 */
static pthread_once_t g_path_once = PTHREAD_ONCE_INIT;
static const char *g_path = "reference";
static bool g_by_reference = true; /* below AVX-512: oneDNN has no bf16 */

static void path_init(void)
{
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx)
        g_path = "amx";
    else if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        g_path = "avx512_bf16";
    else if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        g_path = "avx512_core (emulated)";
    g_by_reference = !strcmp(g_path, "reference");
}

const char *kcpu_bf16_path(void)
{
    pthread_once(&g_path_once, path_init);
    return g_path;
}

/* The conversions, split over the calling thread's team: narrowing by kcpu_bf16_round (the
   CPU's bf16 instruction where it has one), widening by the reference loop (a shift). */
void kcpu_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n)
{
#pragma omp parallel for if (n >= (1 << 16)) schedule(static)
    for (int64_t b = 0; b < n; b += 4096)
        kcpu_bf16_round(y + b, x + b, n - b < 4096 ? n - b : 4096);
}

void kcpu_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n)
{
#pragma omp parallel for if (n >= (1 << 16)) schedule(static)
    for (int64_t b = 0; b < n; b += 4096)
        kref_cast_bf16_f32(y + b, x + b, n - b < 4096 ? n - b : 4096);
}

/* Below AVX-512 oneDNN has no bf16 primitives at all: the reference kernels compute them. */
static bool bf16_by_reference(void)
{
    pthread_once(&g_path_once, path_init);
    return g_by_reference;
}

rp_status kcpu_gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc)
{
    if (m <= 0 || n <= 0 || k <= 0 || alpha == 0.0f) {
        kcpu_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return RP_OK;
    }
    if (bf16_by_reference())
        return kref_gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    cache_key key = {
        {KIND_MATMUL, trans_a, trans_b, m, n, k, lda, ldb, ldc, 0, 0, 0, RP_BF16, 0, 0, 0}};
    memcpy(&key.v[9], &alpha, sizeof alpha);
    memcpy(&key.v[10], &beta, sizeof beta);
    void *ptrs[] = {[MM_C] = c, [MM_A] = (void *)a, [MM_B] = (void *)b};
    return run_cached(&key, NULL, NULL, ptrs);
}

/* ---- convolution --------------------------------------------------------- */

rp_status kcpu_conv2d_uses_winograd(const kernels_conv_desc *d, int pass, bool *winograd)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (pass < 0 || pass > 2 || !winograd)
        return RP_ERROR(RP_ERR_INVALID, "kcpu_conv2d_uses_winograd: pass %d (0-2) or NULL", pass);
    static const entry_kind kinds[] = {KIND_CONV_FWD, KIND_CONV_BWD_DATA, KIND_CONV_BWD_WEIGHTS};
    cache_key key = conv_key(kinds[pass], d);
    thread_state *t = NULL;
    RP_CHECK(thread_state_get(&t));
    cache_entry *e = cache_find(t, &key);
    if (!e) {
        RP_CHECK(build_conv(t, &key, d, &e));
        RP_CHECK(cache_insert(t, e));
    }
    *winograd = e->winograd;
    return RP_OK;
}

rp_status kcpu_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                          const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!y || !x || !w) return RP_ERROR(RP_ERR_INVALID, "kcpu_conv2d_fwd: NULL y, x or w");
    if (d->compute == RP_BF16 && bf16_by_reference()) return kref_conv2d_fwd(y, x, w, bias, d);
    cache_key key = conv_key(bias ? KIND_CONV_FWD_BIAS : KIND_CONV_FWD, d);
    void *ptrs[] = {
        [FWD_Y] = y, [FWD_X] = (void *)x, [FWD_W] = (void *)w, [FWD_BIAS] = (void *)bias};
    return run_cached(&key, d, NULL, ptrs);
}

/*
 * dy for a backward pass, and its type for the key: with bf16 compute, narrowed to bf16 by
 * kcpu_cast_f32_bf16 into the thread's buffer (dy_half; the primitive reads it as it is); else
 * dy itself, in f32. oneDNN's staging reorder would narrow it too, once per pass: kcpu_conv2d_bwd
 * narrows once for both (43 reorders a ResNet-20 step, 8% of its oneDNN time), and a pass alone
 * narrows here as well, so the staging buffer is never grown for dy besides dy_half (ResNet-50's
 * largest dy is 51 MB in bf16). The rounding is rp_bf16_from_f32's, as oneDNN's reorder, but a
 * subnormal dy is rounded where the reorder flushed it to zero.
 */
static rp_status bwd_dy(const kernels_conv_desc *d, const void *dy, void **out, int *type)
{
    *out = (void *)dy;
    *type = d->dy_type; /* a bf16 dy (the tape's bf16 gradients) is already what we would make */
    if (d->compute != RP_BF16 || d->dy_type == RP_BF16) return RP_OK;
    thread_state *t = NULL;
    RP_CHECK(thread_state_get(&t));
    int64_t n = (int64_t)d->n * d->oh * d->ow * d->o;
    RP_CHECK(buffer_grow(&t->dy_half, &t->dy_half_bytes, (size_t)n * sizeof(rp_bf16)));
    kcpu_cast_f32_bf16(t->dy_half, dy, n);
    *out = t->dy_half;
    *type = RP_BF16;
    return RP_OK;
}

/* The two backward passes on dy as bwd_dy gave it (dyk: its type in the key). */
static rp_status bwd_data_run(float *dx, void *dy, int dyk, const float *w,
                              const kernels_conv_desc *d)
{
    cache_key key = conv_key(KIND_CONV_BWD_DATA, d);
    key.v[KEY_DY_TYPE] = dyk;
    void *ptrs[] = {[BWDD_DX] = dx, [BWDD_DY] = dy, [BWDD_W] = (void *)w};
    return run_cached(&key, d, NULL, ptrs);
}

static rp_status bwd_weights_run(float *dw, float *db, void *dy, int dyk, const void *x,
                                 const kernels_conv_desc *d)
{
    cache_key key = conv_key(db ? KIND_CONV_BWD_WEIGHTS_BIAS : KIND_CONV_BWD_WEIGHTS, d);
    key.v[KEY_DY_TYPE] = dyk;
    void *ptrs[] = {[BWDW_DW] = dw, [BWDW_DB] = db, [BWDW_DY] = dy, [BWDW_X] = (void *)x};
    return run_cached(&key, d, NULL, ptrs);
}

rp_status kcpu_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                               const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dx || !dy || !w) return RP_ERROR(RP_ERR_INVALID, "kcpu_conv2d_bwd_data: NULL dx, dy or w");
    if (d->compute == RP_BF16 && bf16_by_reference()) return kref_conv2d_bwd_data(dx, dy, w, d);
    void *dyp;
    int dyk;
    RP_CHECK(bwd_dy(d, dy, &dyp, &dyk));
    return bwd_data_run(dx, dyp, dyk, w, d);
}

rp_status kcpu_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                  const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dw || !dy || !x)
        return RP_ERROR(RP_ERR_INVALID, "kcpu_conv2d_bwd_weights: NULL dw, dy or x");
    if (d->compute == RP_BF16 && bf16_by_reference())
        return kref_conv2d_bwd_weights(dw, db, dy, x, d);
    void *dyp;
    int dyk;
    RP_CHECK(bwd_dy(d, dy, &dyp, &dyk));
    return bwd_weights_run(dw, db, dyp, dyk, x, d);
}

/* Both backward passes from one dy, narrowed once (bwd_dy). */
rp_status kcpu_conv2d_bwd(const kernels_table *k, float *dx, float *dw, float *db, const void *dy,
                          const float *w, const void *x, const kernels_conv_desc *d)
{
    (void)k;
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dx || !dw || !dy || !w || !x)
        return RP_ERROR(RP_ERR_INVALID, "kcpu_conv2d_bwd: NULL dx, dw, dy, w or x");
    if (d->compute == RP_BF16 && bf16_by_reference()) {
        RP_CHECK(kref_conv2d_bwd_data(dx, dy, w, d));
        return kref_conv2d_bwd_weights(dw, db, dy, x, d);
    }
    void *dyp;
    int dyk;
    RP_CHECK(bwd_dy(d, dy, &dyp, &dyk));
    RP_CHECK(bwd_data_run(dx, dyp, dyk, w, d));
    return bwd_weights_run(dw, db, dyp, dyk, x, d);
}

/* ---- average pooling ----------------------------------------------------- */

rp_status kcpu_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !x) return RP_ERROR(RP_ERR_INVALID, "kcpu_avgpool_fwd: NULL y or x");
    cache_key key = pool_key(KIND_AVGPOOL_FWD, d);
    void *ptrs[] = {[POOL_OUT] = y, [POOL_IN] = (void *)x};
    return run_cached(&key, NULL, d, ptrs);
}

rp_status kcpu_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !dy) return RP_ERROR(RP_ERR_INVALID, "kcpu_avgpool_bwd: NULL dx or dy");
    cache_key key = pool_key(KIND_AVGPOOL_BWD, d);
    void *ptrs[] = {[POOL_OUT] = dx, [POOL_IN] = (void *)dy};
    return run_cached(&key, NULL, d, ptrs);
}

/* ---- max pooling --------------------------------------------------------- */

/* Below this many window reads a loop is not worth waking the thread team. */
#define RP_POOL_PARALLEL_MIN 32768

/*
 * One pass over NHWC computing the maximum and its flat offset together.
 * For each output pixel the first in-input window element seeds the
 * result, then the others replace it where strictly greater; the compare
 * and both selects are branch-free over the contiguous channels, so the
 * inner loop vectorises. Rows (n, oy) are split over the thread team.
 */
/* Max pooling over f32 or, with `half`, bf16 values (compared widened, the winner's own bits
 * stored): the running maxima live in y. */
static inline __attribute__((always_inline)) void
maxpool_rows(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d, bool half)
{
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad, K = d->k;
    const int OH = d->oh, OW = d->ow, rows = d->n * d->oh;
    const int64_t work = (int64_t)rows * OW * C * K * K;
#define MP_LD(p, i) (half ? core_bf16_widen(((const rp_bf16 *)(p))[i]) : ((const float *)(p))[i])
#define MP_PUT(p, i, q, j)                                                                         \
    do {                                                                                           \
        if (half)                                                                                  \
            ((rp_bf16 *)(p))[i] = ((const rp_bf16 *)(q))[j];                                       \
        else                                                                                       \
            ((float *)(p))[i] = ((const float *)(q))[j];                                           \
    } while (0)
    const size_t e = half ? sizeof(rp_bf16) : sizeof(float);
#pragma omp parallel for schedule(static) if (work > RP_POOL_PARALLEL_MIN)
    for (int r = 0; r < rows; r++) {
        const int n = r / OH, oy = r % OH;
        int iy0 = oy * S - P, iy1 = iy0 + K;
        if (iy0 < 0) iy0 = 0;
        if (iy1 > H) iy1 = H;
        for (int ox = 0; ox < OW; ox++) {
            int ix0 = ox * S - P, ix1 = ix0 + K;
            if (ix0 < 0) ix0 = 0;
            if (ix1 > W) ix1 = W;
            void *yp = (char *)y + ((int64_t)r * OW + ox) * C * e;
            int32_t *restrict ap = argmax + ((int64_t)r * OW + ox) * C;
            const int32_t first = (int32_t)((((int64_t)n * H + iy0) * W + ix0) * C);
            const void *xp = (const char *)x + (int64_t)first * e;
            for (int c = 0; c < C; c++) {
                MP_PUT(yp, c, xp, c);
                ap[c] = first + c;
            }
            for (int iy = iy0; iy < iy1; iy++) {
                for (int ix = iy == iy0 ? ix0 + 1 : ix0; ix < ix1; ix++) {
                    const int32_t off = (int32_t)((((int64_t)n * H + iy) * W + ix) * C);
                    const void *xq = (const char *)x + (int64_t)off * e;
                    for (int c = 0; c < C; c++) {
                        const bool gt = MP_LD(xq, c) > MP_LD(yp, c);
                        if (half) {
                            rp_bf16 *yh = yp;
                            const rp_bf16 *xh = xq;
                            yh[c] = gt ? xh[c] : yh[c];
                        } else {
                            float *yf = yp;
                            const float *xf = xq;
                            yf[c] = gt ? xf[c] : yf[c];
                        }
                        ap[c] = gt ? off + c : ap[c];
                    }
                }
            }
        }
    }
#undef MP_LD
#undef MP_PUT
}

rp_status kcpu_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !argmax || !x)
        return RP_ERROR(RP_ERR_INVALID, "kcpu_maxpool_fwd: NULL y, argmax or x");
    if (d->type == RP_BF16)
        maxpool_rows(y, argmax, x, d, true);
    else
        maxpool_rows(y, argmax, x, d, false);
    return RP_OK;
}

/*
 * Scatter of dy through argmax. Images are independent (an output's
 * argmax points into its own image), so each thread zeroes and fills whole
 * images and no two threads touch the same dx element. An argmax outside
 * its image is reported rather than written.
 */
rp_status kcpu_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                           const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !argmax || !dy)
        return RP_ERROR(RP_ERR_INVALID, "kcpu_maxpool_bwd: NULL dx, argmax or dy");
    const int64_t in_img = (int64_t)d->h * d->w * d->c, out_img = (int64_t)d->oh * d->ow * d->c;
    const int64_t work = (int64_t)d->n * (in_img + out_img);
    int64_t bad = -1;

#pragma omp parallel for schedule(static) if (work > RP_POOL_PARALLEL_MIN) reduction(max : bad)
    for (int n = 0; n < d->n; n++) {
        float *restrict dxn = dx + n * in_img;
        const int32_t *an = argmax + n * out_img;
        const float *dyn = dy + n * out_img;
        const int64_t lo = n * in_img;
        memset(dxn, 0, (size_t)in_img * sizeof *dxn);
        for (int64_t i = 0; i < out_img; i++) {
            const int64_t a = (int64_t)an[i] - lo;
            if (a < 0 || a >= in_img) {
                if (n * out_img + i > bad) bad = n * out_img + i;
                continue;
            }
            dxn[a] += dyn[i];
        }
    }
    if (bad >= 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "kcpu_maxpool_bwd: argmax[%lld] = %d lies outside its image (input "
                        "[n=%d,h=%d,w=%d,c=%d])",
                        (long long)bad, (int)argmax[bad], d->n, d->h, d->w, d->c);
    return RP_OK;
}
