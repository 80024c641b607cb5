/*
 * loader.c - the loader's lifetime, the caller's side (next, position, seek)
 * and the prefetch thread that prepares the next batch while the current one
 * trains. Making a batch (shuffle, slice, augmentation, normalisation) is in
 * loader_batch.c; the structure they share is in loader_internal.h.
 *
 * Who touches what. Everything in the loader is set at create and read-only
 * afterwards, except:
 *   - the epoch order (perm, perm_epoch): only the producer touches it, which
 *     is the prefetch thread when there is one and the caller otherwise;
 *   - the slots' buffers: written by the producer while a slot is FILLING and
 *     read by the caller while it is HELD; the state changes happen under the
 *     mutex, which orders the writes before the reads;
 *   - the caller's position (pos_epoch, pos_step), the sticky error and
 *     `take`/`held`: the caller's thread only;
 *   - the producer's position, `fill`, the slot states and the flags: under
 *     the mutex; `cancel` is also read without it, once per sample, so that
 *     seek and destroy can interrupt a large batch.
 */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "data/loader_internal.h"
#include "replicator/trace.h"

rp_loader_config rp_loader_config_default(void)
{
    rp_loader_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.global_batch = 128;
    cfg.replica = 0;
    cfg.replicas = 1;
    cfg.seed = 0;
    cfg.shuffle = true;
    cfg.drop_last = true;
    cfg.augment = false;
    cfg.pad = 4;
    cfg.flip = true;
    for (int k = 0; k < RP_LOADER_MAX_CHANNELS; k++) {
        cfg.mean[k] = 0.0f;
        cfg.std[k] = 1.0f;
    }
    cfg.prefetch = true;
    cfg.limit = 0;
    return cfg;
}

/* ---- threading primitives ------------------------------------------------ */

/*
 * Locking, unlocking, waiting and signalling fail only on a mutex or
 * condition variable that is not initialised or was destroyed, which would be
 * a bug here and not a user error: those calls are checked by assertion.
 * Creation and joining can fail for reasons outside our control and return a
 * status.
 */
static void loader_lock(rp_loader *ld)
{
    int rc = pthread_mutex_lock(&ld->mu);
    assert(rc == 0);
    (void)rc;
}

static void loader_unlock(rp_loader *ld)
{
    int rc = pthread_mutex_unlock(&ld->mu);
    assert(rc == 0);
    (void)rc;
}

static void loader_wait(rp_loader *ld, pthread_cond_t *cond)
{
    int rc = pthread_cond_wait(cond, &ld->mu);
    assert(rc == 0);
    (void)rc;
}

static void loader_broadcast(pthread_cond_t *cond)
{
    int rc = pthread_cond_broadcast(cond);
    assert(rc == 0);
    (void)rc;
}

static rp_status loader_pthread(int rc, const char *call)
{
    if (rc == 0) return RP_OK;
    return RP_ERROR(RP_ERR_BACKEND, "rp_loader: %s failed: %s", call, strerror(rc));
}

/* The position after (epoch, step). */
static void loader_advance(const rp_loader *ld, int64_t *epoch, int64_t *step)
{
    if (++*step >= ld->steps) {
        *step = 0;
        ++*epoch;
    }
}

/* ---- the prefetch thread ------------------------------------------------- */

/*
 * Fills the slots in turn, one batch ahead of the caller: it waits until the
 * next slot is free (the caller has moved past it), fills it outside the
 * lock and hands it over. A batch started before a seek or destroy is
 * thrown away. After an error the thread idles until a seek or destroy.
 */
static void *loader_thread(void *arg)
{
    rp_loader *ld = arg;
    loader_lock(ld);
    for (;;) {
        while (!ld->stop &&
               (ld->seeking || ld->failed || ld->slot[ld->fill].state != RP_LOADER_SLOT_FREE))
            loader_wait(ld, &ld->cond_prod);
        if (ld->stop) break;
        loader_slot *s = &ld->slot[ld->fill];
        int64_t epoch = ld->prod_epoch, step = ld->prod_step;
        s->state = RP_LOADER_SLOT_FILLING;
        loader_unlock(ld);

        rp_status status = loader_produce(ld, s, epoch, step, true);

        loader_lock(ld);
        if (status == RP_LOADER_CANCELLED || ld->seeking || ld->stop) {
            s->state = RP_LOADER_SLOT_FREE;
        } else {
            s->status = status;
            s->state = RP_LOADER_SLOT_READY;
            if (status == RP_OK) {
                loader_advance(ld, &ld->prod_epoch, &ld->prod_step);
                ld->fill = (ld->fill + 1) % ld->nslots;
            } else {
                ld->failed = true;
            }
        }
        loader_broadcast(&ld->cond_cons);
    }
    loader_unlock(ld);
    return NULL;
}

/* Stops and joins the thread; a batch in progress is interrupted. */
static void loader_stop_thread(rp_loader *ld)
{
    if (!ld->threaded) return;
    loader_lock(ld);
    ld->stop = true;
    __atomic_store_n(&ld->cancel, 1, __ATOMIC_RELAXED);
    loader_broadcast(&ld->cond_prod);
    loader_unlock(ld);
    int rc = pthread_join(ld->thread, NULL);
    if (rc != 0) rp_log(RP_LOG_ERROR, "rp_loader_destroy: pthread_join failed: %s", strerror(rc));
    ld->threaded = false;
}

/* ---- creating and destroying --------------------------------------------- */

static rp_status loader_validate(const rp_dataset *ds, const rp_loader_config *cfg)
{
    if (ds->n <= 0 || ds->h <= 0 || ds->w <= 0 || ds->c <= 0 || (!ds->pixels && !ds->source) ||
        !ds->labels)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: dataset \"%s\" is empty or unset (n %lld, %dx%dx%d, "
                        "pixels %p, labels %p)",
                        ds->name, (long long)ds->n, ds->h, ds->w, ds->c, (void *)ds->pixels,
                        (void *)ds->labels);
    if (ds->c > RP_LOADER_MAX_CHANNELS)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: dataset \"%s\" has %d channels; the loader handles at "
                        "most %d",
                        ds->name, ds->c, RP_LOADER_MAX_CHANNELS);
    if ((uint64_t)ds->n > UINT32_MAX)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: dataset \"%s\" has %lld samples; the loader handles "
                        "fewer than 2^32",
                        ds->name, (long long)ds->n);
    if (ds->num_classes < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: dataset \"%s\" has num_classes %d",
                        ds->name, ds->num_classes);
    if (cfg->global_batch < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: global_batch %d must be at least 1",
                        cfg->global_batch);
    if (cfg->replicas < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: replicas %d must be at least 1",
                        cfg->replicas);
    if (cfg->replica < 0 || cfg->replica >= cfg->replicas)
        return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: replica %d is outside [0, %d)",
                        cfg->replica, cfg->replicas);
    if (cfg->global_batch % cfg->replicas != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: global_batch %d is not divisible by replicas %d",
                        cfg->global_batch, cfg->replicas);
    /* A row's floats are indexed by int; a batch buffer's bytes must fit size_t. */
    int64_t local = cfg->global_batch / cfg->replicas;
    if ((int64_t)ds->w * ds->c > INT32_MAX / 2 ||
        (int64_t)ds->h * ds->w * ds->c > (int64_t)(SIZE_MAX / 8) / local)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: batches of %lld images of %dx%dx%d are too large",
                        (long long)local, ds->h, ds->w, ds->c);
    if (cfg->augment && (cfg->pad < 0 || cfg->pad > ds->h || cfg->pad > ds->w))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: pad %d is outside [0, %d] for %dx%d images", cfg->pad,
                        ds->h < ds->w ? ds->h : ds->w, ds->h, ds->w);
    for (int k = 0; k < ds->c; k++) {
        if (!isfinite(cfg->mean[k]))
            return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: mean[%d] is %g, not finite", k,
                            (double)cfg->mean[k]);
        if (!(cfg->std[k] > 0.0f) || !isfinite(cfg->std[k]))
            return RP_ERROR(RP_ERR_INVALID,
                            "rp_loader_create: std[%d] is %g; it must be positive and finite", k,
                            (double)cfg->std[k]);
    }
    if (cfg->limit < 0 || cfg->limit > ds->n)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: limit %lld is outside [0, %lld] (0 means all samples "
                        "of \"%s\")",
                        (long long)cfg->limit, (long long)ds->n, ds->name);
    int64_t samples = cfg->limit ? cfg->limit : ds->n;
    if (cfg->drop_last && samples < cfg->global_batch)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_create: drop_last with %lld samples and global_batch %d "
                        "leaves no batch",
                        (long long)samples, cfg->global_batch);
    for (int64_t i = 0; i < samples; i++) {
        if (ds->labels[i] < 0 || ds->labels[i] >= ds->num_classes)
            return RP_ERROR(RP_ERR_FORMAT,
                            "rp_loader_create: sample %lld of dataset \"%s\" has label %d, "
                            "outside [0, %d)",
                            (long long)i, ds->name, (int)ds->labels[i], ds->num_classes);
    }
    return RP_OK;
}

/* Frees whatever a (possibly partly built) loader holds; the thread is already stopped. */
static void loader_free(rp_loader *ld)
{
    if (!ld) return;
    if (ld->sync_made) {
        pthread_cond_destroy(&ld->cond_cons);
        pthread_cond_destroy(&ld->cond_prod);
        pthread_mutex_destroy(&ld->mu);
    }
    for (int i = 1; i >= 0; i--) {
        rp_free(ld->slot[i].y);
        rp_free(ld->slot[i].x);
    }
    rp_free(ld->perm);
    rp_free(ld->row_shift);
    rp_free(ld->row_scale);
    rp_free(ld);
}

/* Initialises the mutex and both condition variables, all or none. */
static rp_status loader_sync_init(rp_loader *ld)
{
    rp_status status = loader_pthread(pthread_mutex_init(&ld->mu, NULL), "pthread_mutex_init");
    if (status != RP_OK) return status;
    status = loader_pthread(pthread_cond_init(&ld->cond_prod, NULL), "pthread_cond_init");
    if (status != RP_OK) {
        pthread_mutex_destroy(&ld->mu);
        return status;
    }
    status = loader_pthread(pthread_cond_init(&ld->cond_cons, NULL), "pthread_cond_init");
    if (status != RP_OK) {
        pthread_cond_destroy(&ld->cond_prod);
        pthread_mutex_destroy(&ld->mu);
        return status;
    }
    ld->sync_made = true;
    return RP_OK;
}

rp_status rp_loader_create(rp_loader **ld, const rp_dataset *ds, const rp_loader_config *cfg)
{
    rp_status status = RP_OK;
    rp_loader *out = NULL;

    if (!ld) return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: ld is NULL");
    *ld = NULL;
    if (!ds || !cfg)
        return RP_ERROR(RP_ERR_INVALID, "rp_loader_create: %s is NULL", !ds ? "ds" : "cfg");
    RP_CHECK(loader_validate(ds, cfg));

    out = rp_calloc(sizeof *out);
    if (!out) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_loader_create: cannot allocate the loader");
        goto cleanup;
    }
    out->ds = ds;
    out->cfg = *cfg;
    out->samples = cfg->limit ? cfg->limit : ds->n;
    out->steps = cfg->drop_last ? out->samples / cfg->global_batch
                                : (out->samples + cfg->global_batch - 1) / cfg->global_batch;
    out->local_batch = cfg->global_batch / cfg->replicas;
    out->row_floats = ds->w * ds->c;
    out->image_floats = (size_t)ds->h * (size_t)out->row_floats;
    out->nslots = cfg->prefetch ? 2 : 1;
    out->perm_epoch = -1;
    out->held = -1;
    if (!cfg->augment) out->cfg.pad = 0;
    out->shuffle_seed = rp_hash_str(cfg->seed, "loader/shuffle");
    uint64_t akey = rp_hash_str(cfg->seed, "loader/augment");
    out->augment_key[0] = (uint32_t)akey;
    out->augment_key[1] = (uint32_t)(akey >> 32);

    /* x * scale + shift = (x / 255 - mean) / std. */
    for (int k = 0; k < ds->c; k++) {
        out->scale[k] = 1.0f / (255.0f * cfg->std[k]);
        out->shift[k] = -cfg->mean[k] / cfg->std[k];
    }
    out->row_scale = rp_alloc((size_t)out->row_floats * sizeof(float));
    out->row_shift = rp_alloc((size_t)out->row_floats * sizeof(float));
    if (cfg->shuffle) out->perm = rp_alloc((size_t)out->samples * sizeof(uint32_t));
    if (!out->row_scale || !out->row_shift || (cfg->shuffle && !out->perm)) {
        status = RP_ERROR(RP_ERR_NOMEM,
                          "rp_loader_create: cannot allocate the epoch order of "
                          "%lld samples",
                          (long long)out->samples);
        goto cleanup;
    }
    for (int j = 0; j < out->row_floats; j++) {
        out->row_scale[j] = out->scale[j % ds->c];
        out->row_shift[j] = out->shift[j % ds->c];
    }
    for (int i = 0; i < out->nslots; i++) {
        loader_slot *s = &out->slot[i];
        s->x = rp_alloc((size_t)out->local_batch * out->image_floats * sizeof(float));
        s->y = rp_alloc((size_t)out->local_batch * sizeof(int32_t));
        if (!s->x || !s->y) {
            status = RP_ERROR(RP_ERR_NOMEM,
                              "rp_loader_create: cannot allocate a batch of %d images of "
                              "%dx%dx%d floats",
                              out->local_batch, ds->h, ds->w, ds->c);
            goto cleanup;
        }
        s->state = RP_LOADER_SLOT_FREE;
    }

    if (cfg->prefetch) {
        RP_TRY(loader_sync_init(out));
        /*
         * The thread starts with every signal blocked (it inherits the mask
         * in force at pthread_create), so that signals such as SIGINT reach
         * the application's own threads and never interrupt a batch.
         */
        sigset_t all, old;
        sigfillset(&all);
        RP_TRY(loader_pthread(pthread_sigmask(SIG_SETMASK, &all, &old), "pthread_sigmask"));
        int rc = pthread_create(&out->thread, NULL, loader_thread, out);
        int rc_mask = pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc == 0) out->threaded = true;
        RP_TRY(loader_pthread(rc, "pthread_create"));
        RP_TRY(loader_pthread(rc_mask, "pthread_sigmask"));
    }
    *ld = out;
    out = NULL;

cleanup:
    if (out) loader_stop_thread(out);
    loader_free(out);
    return status;
}

void rp_loader_destroy(rp_loader *ld)
{
    if (!ld) return;
    loader_stop_thread(ld);
    loader_free(ld);
}

/* ---- the caller's side --------------------------------------------------- */

static void loader_fill_batch(const rp_loader *ld, const loader_slot *s, rp_batch *b)
{
    b->x = s->x;
    b->y = s->y;
    b->n = s->n;
    b->h = ld->ds->h;
    b->w = ld->ds->w;
    b->c = ld->ds->c;
    b->epoch = s->epoch;
    b->step = s->step;
    b->first_global = s->first_global;
    b->end_of_epoch = s->end_of_epoch;
}

/* Records an error that every rp_loader_next() returns until a seek, and raises it. */
static rp_status loader_fail(rp_loader *ld, rp_status status, const char *msg)
{
    ld->sticky = status;
    snprintf(ld->sticky_msg, sizeof ld->sticky_msg, "%s", msg);
    return RP_ERROR(status, "%s", ld->sticky_msg);
}

static rp_status loader_next(rp_loader *ld, rp_batch *b);

/* The wait for a batch as a trace span ("data"); the forward pass is timed from its end. */
rp_status rp_loader_next(rp_loader *ld, rp_batch *b)
{
    rp_trace_begin(RP_PHASE_DATA);
    rp_status status = loader_next(ld, b);
    rp_trace_end("data");
    rp_trace_mark();
    return status;
}

static rp_status loader_next(rp_loader *ld, rp_batch *b)
{
    if (b) memset(b, 0, sizeof *b);
    if (!ld || !b) return RP_ERROR(RP_ERR_INVALID, "rp_loader_next: %s is NULL", !ld ? "ld" : "b");
    if (ld->sticky != RP_OK) return RP_ERROR(ld->sticky, "%s", ld->sticky_msg);

    loader_slot *s;
    if (!ld->threaded) {
        s = &ld->slot[0];
        rp_status status = loader_produce(ld, s, ld->pos_epoch, ld->pos_step, false);
        if (status != RP_OK) return loader_fail(ld, status, s->error);
    } else {
        loader_lock(ld);
        if (ld->held >= 0) {
            ld->slot[ld->held].state = RP_LOADER_SLOT_FREE;
            ld->held = -1;
            loader_broadcast(&ld->cond_prod);
        }
        s = &ld->slot[ld->take];
        while (s->state != RP_LOADER_SLOT_READY)
            loader_wait(ld, &ld->cond_cons);
        if (s->status != RP_OK) {
            /* The slot stays READY with its error; the thread idles until a seek. */
            char msg[RP_LOADER_ERROR_MAX + 32];
            snprintf(msg, sizeof msg, "prefetch thread: %s", s->error);
            rp_status status = s->status;
            loader_unlock(ld);
            return loader_fail(ld, status, msg);
        }
        s->state = RP_LOADER_SLOT_HELD;
        ld->held = ld->take;
        ld->take = (ld->take + 1) % ld->nslots;
        loader_unlock(ld);
    }
    /* The producer and the caller walk the same sequence of positions. */
    assert(s->epoch == ld->pos_epoch && s->step == ld->pos_step);
    loader_fill_batch(ld, s, b);
    loader_advance(ld, &ld->pos_epoch, &ld->pos_step);
    return RP_OK;
}

int64_t rp_loader_steps_per_epoch(const rp_loader *ld)
{
    return ld ? ld->steps : 0;
}

int64_t rp_loader_samples(const rp_loader *ld)
{
    return ld ? ld->samples : 0;
}

int rp_loader_max_batch(const rp_loader *ld)
{
    return ld ? ld->local_batch : 0;
}

void rp_loader_position(const rp_loader *ld, int64_t *epoch, int64_t *step)
{
    if (epoch) *epoch = ld ? ld->pos_epoch : 0;
    if (step) *step = ld ? ld->pos_step : 0;
}

rp_status rp_loader_seek(rp_loader *ld, int64_t epoch, int64_t step)
{
    if (!ld) return RP_ERROR(RP_ERR_INVALID, "rp_loader_seek: ld is NULL");
    if (epoch < 0 || step < 0 || step >= ld->steps)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_loader_seek: position (epoch %lld, step %lld) is invalid: epoch must "
                        "be >= 0 and step in [0, %lld)",
                        (long long)epoch, (long long)step, (long long)ld->steps);
    if (ld->threaded) {
        loader_lock(ld);
        /* Hold the thread off, interrupt its batch and wait until it has let go of it. */
        ld->seeking = true;
        __atomic_store_n(&ld->cancel, 1, __ATOMIC_RELAXED);
        for (;;) {
            bool filling = false;
            for (int i = 0; i < ld->nslots; i++)
                filling |= ld->slot[i].state == RP_LOADER_SLOT_FILLING;
            if (!filling) break;
            loader_wait(ld, &ld->cond_cons);
        }
        for (int i = 0; i < ld->nslots; i++)
            ld->slot[i].state = RP_LOADER_SLOT_FREE;
        ld->fill = 0;
        ld->take = 0;
        ld->held = -1;
        ld->prod_epoch = epoch;
        ld->prod_step = step;
        ld->failed = false;
        ld->seeking = false;
        __atomic_store_n(&ld->cancel, 0, __ATOMIC_RELAXED);
        loader_broadcast(&ld->cond_prod);
        loader_unlock(ld);
    }
    ld->pos_epoch = epoch;
    ld->pos_step = step;
    ld->sticky = RP_OK;
    ld->sticky_msg[0] = '\0';
    return RP_OK;
}
