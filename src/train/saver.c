/*
 * saver.c - writing the run's checkpoint: whole or sharded, inline or on a
 * background thread (trainer.h, "Background saving").
 *
 * The background writer owns nothing the replicas touch: at a step boundary
 * the main thread fills the one staging checkpoint (a copy of the state,
 * reused from save to save) and hands it over; the writer thread writes and
 * publishes it and records how that went. One save at a time: the next one
 * waits for the writer before it touches the staging checkpoint, so the
 * staging memory is one state and a slow disk slows the saves, never
 * corrupts them. The writer's result is taken by the main thread at the next
 * step boundary (trainer_saver_poll) or when it waits.
 *
 * Per worker (cfg.checkpoint_per_worker): every worker of the stepped role puts its own part in
 * a run (the model's save_part, into that worker's reused staging checkpoint), and every process
 * writes its workers' shards - inline, or on its writer thread - and the process of worker 0
 * waits for all the shard files and publishes the index. Worker 0 first clears what an earlier,
 * unpublished attempt left of the generation, and the workers meet before any writes, so the
 * publisher never takes a stale file for a new one.
 */
#define _GNU_SOURCE /* SCHED_IDLE */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

#define CHECKPOINT_FILE "checkpoint.safetensors"

struct trainer_saver {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rp_checkpoint *staging; /* the gathered state's copy (unused per worker) */
    /* What is written (or waits to be): the staging copy, or this process's workers' parts. */
    rp_checkpoint *const *parts;
    const int *shard; /* per worker: each part's shard */
    int n_parts;
    int workers;             /* per worker: the shard count (0: the gathered state) */
    int64_t part_generation; /* per worker: the generation being written */
    bool pending;            /* staged and not yet finished */
    bool quit;
    bool failed;     /* the last write failed and the main thread has not been told */
    rp_status error; /* its status */
    char message[1024];
    int64_t step; /* the global step of the save in flight (or the failed one) */
    char run_dir[TRAIN_PATH_MAX];
    int shards;
    char layout[256];   /* the index's layout text */
    int64_t generation; /* the last published sharded generation (0: read it from disk) */
    int timeout_ms;     /* per worker: how long the publisher waits for the other shards */
};

/* "<dir>/<name>", truncated paths fail to open by name later. */
static void join(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
}

void trainer_layout_text(const rp_trainer *t, char *buf, size_t size)
{
    const rp_replica *first = rp_replicator_replica(t->rep, 0);
    char shards[96];
    if (t->cfg.checkpoint_per_worker)
        snprintf(shards, sizeof shards, "shards=%d, each worker's own pieces; written by",
                 t->parts.workers); /* parts_init ran before any per-worker save asks */
    else
        snprintf(shards, sizeof shards,
                 "shards=%d (each tensor split evenly); written from the gathered state of",
                 t->cfg.checkpoint_shards);
    snprintf(buf, size, "%s replicas=%d zero=%d tp=%d stages=%d", shards,
             rp_replicator_replicas(t->rep),
             rp_config_strategy(&t->cfg.runtime) == RP_STRATEGY_ZERO3   ? 3
             : rp_config_strategy(&t->cfg.runtime) == RP_STRATEGY_ZERO2 ? 2
             : rp_config_strategy(&t->cfg.runtime) == RP_STRATEGY_ZERO1 ? 1
                                                                        : 0,
             first ? rp_replica_axis_size(first, RP_AXIS_MODEL) : 1,
             first ? rp_replica_axis_size(first, RP_AXIS_PIPE) : 1);
}

/* Publishes generation g's n shards at base; the whole file beside them (older now) goes. */
static rp_status publish(const char *base, const char *whole, int64_t g, int n, const char *layout)
{
    RP_CHECK(rp_checkpoint_publish(base, g, n, layout));
    if (unlink(whole) != 0 && errno != ENOENT)
        return RP_ERROR(RP_ERR_IO,
                        "the sharded checkpoint was published, but the older %s cannot "
                        "be removed: %s",
                        whole, strerror(errno));
    return RP_OK;
}

rp_status trainer_write_checkpoint(const char *run_dir, int shards, const char *layout,
                                   int64_t *generation, const rp_checkpoint *ck)
{
    char whole[TRAIN_PATH_MAX + 32], base[TRAIN_PATH_MAX + 32];
    join(whole, sizeof whole, run_dir, CHECKPOINT_FILE);
    join(base, sizeof base, run_dir, "checkpoint");
    if (shards <= 0) {
        RP_CHECK(rp_checkpoint_save(ck, whole));
        /* A sharded checkpoint of an earlier part of the run is older now: it goes. */
        return rp_checkpoint_remove_sharded(base);
    }
    if (*generation <= 0) *generation = rp_checkpoint_published_generation(base);
    int64_t g = *generation + 1;
    for (int k = 0; k < shards; k++)
        RP_CHECK(rp_checkpoint_save_shard(ck, base, g, k, shards, shards));
    RP_CHECK(publish(base, whole, g, shards, layout));
    *generation = g;
    return RP_OK;
}

rp_status trainer_write_parts(const char *run_dir, rp_checkpoint *const *parts, const int *shard,
                              int n_parts, int workers, const char *layout, int64_t generation,
                              int timeout_ms)
{
    char whole[TRAIN_PATH_MAX + 32], base[TRAIN_PATH_MAX + 32];
    join(whole, sizeof whole, run_dir, CHECKPOINT_FILE);
    join(base, sizeof base, run_dir, "checkpoint");
    bool publisher = false;
    for (int i = 0; i < n_parts; i++) {
        RP_CHECK(rp_checkpoint_save_shard(parts[i], base, generation, shard[i], workers, 1));
        publisher = publisher || shard[i] == 0;
    }
    if (!publisher) return RP_OK;
    /* The other processes' shards: each appears whole when its writer is done. */
    RP_CHECK(rp_checkpoint_wait_shards(base, generation, workers, timeout_ms));
    return publish(base, whole, generation, workers, layout);
}

/* The writer's job: the staged state, whole or sharded, or this process's parts. */
static rp_status write_staged(trainer_saver *s)
{
    if (s->workers > 0)
        return trainer_write_parts(s->run_dir, s->parts, s->shard, s->n_parts, s->workers,
                                   s->layout, s->part_generation, s->timeout_ms);
    return trainer_write_checkpoint(s->run_dir, s->shards, s->layout, &s->generation, s->staging);
}

static void *writer_main(void *arg)
{
    trainer_saver *s = arg;
    /*
     * The writer runs only on a core the training leaves idle (SCHED_IDLE): beside training
     * threads that keep every core busy, a writer of ordinary priority preempts one of them,
     * and the step's other threads wait for it at the kernels' joins - on 2 cores that cost
     * more than writing inline. Idle cores come at the collectives' waits and, at the latest,
     * when the next save waits for this one. Where the policy is refused it writes as before.
     */
    struct sched_param idle = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->pending && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->pending) break;
        pthread_mutex_unlock(&s->mu);
        /* The staging copy is this thread's until pending is cleared. */
        rp_status status = write_staged(s);
        pthread_mutex_lock(&s->mu);
        if (status != RP_OK) {
            s->failed = true;
            s->error = status;
            snprintf(s->message, sizeof s->message, "%s", rp_last_error());
        }
        s->pending = false;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static rp_status saver_start(rp_trainer *t)
{
    trainer_saver *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the checkpoint writer");
    snprintf(s->run_dir, sizeof s->run_dir, "%s", t->run_dir);
    s->shards = t->cfg.checkpoint_shards;
    s->timeout_ms = trainer_shard_timeout_ms(t);
    trainer_layout_text(t, s->layout, sizeof s->layout);
    rp_status status = rp_checkpoint_create(&s->staging);
    if (status != RP_OK) {
        free(s);
        return status;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = pthread_create(&s->thread, NULL, writer_main, s);
    if (rc != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        rp_checkpoint_destroy(s->staging);
        free(s);
        return RP_ERROR(RP_ERR_BACKEND, "cannot start the checkpoint writer thread: %s",
                        strerror(rc));
    }
    t->saver = s;
    return RP_OK;
}

/* The failure the writer recorded, as this thread's error (once). Called with s->mu held. */
static rp_status take_failure(trainer_saver *s)
{
    if (!s->failed) return RP_OK;
    s->failed = false;
    return rp_error_set(s->error, NULL, 0,
                        "the background checkpoint save of step %lld failed: %s (the previously "
                        "published checkpoint is intact)",
                        (long long)s->step, s->message);
}

rp_status trainer_saver_poll(rp_trainer *t)
{
    trainer_saver *s = t->saver;
    if (!s) return RP_OK;
    pthread_mutex_lock(&s->mu);
    rp_status status = take_failure(s);
    pthread_mutex_unlock(&s->mu);
    return status;
}

rp_status trainer_saver_wait(rp_trainer *t)
{
    trainer_saver *s = t->saver;
    if (!s) return RP_OK;
    pthread_mutex_lock(&s->mu);
    if (s->pending) {
        rp_trace_begin(RP_PHASE_OTHER);
        while (s->pending)
            pthread_cond_wait(&s->cv, &s->mu);
        rp_trace_end("checkpoint wait");
    }
    rp_status status = take_failure(s);
    pthread_mutex_unlock(&s->mu);
    return status;
}

void trainer_saver_stop(rp_trainer *t)
{
    trainer_saver *s = t->saver;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL); /* a save in flight is finished first */
    if (s->failed)
        rp_warn("the background checkpoint save of step %lld failed: %s", (long long)s->step,
                s->message);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    rp_checkpoint_destroy(s->staging);
    free(s);
    t->saver = NULL;
}

/*
 * The model's tensors (local replica 0's state: the replicas agree), the
 * position of the next batch, the epoch's running scalars and the
 * configuration, into ck.
 */
/* The trainer's own tensors and the metadata: the loader's position, the epoch's scalars. */
static rp_status stage_run_state(const rp_trainer *t, rp_checkpoint *ck)
{
    int64_t position[3] = {t->epoch, t->step, t->global_step};
    /* The sums' bits, not rounded values: the resumed epoch's means come out bit for bit. */
    _Static_assert(sizeof(uint64_t) == sizeof(double), "a sum's bits fill a u64");
    uint64_t sums[RP_TRAINER_MAX_SCALARS];
    memcpy(sums, t->epoch_sums, sizeof sums);
    RP_CHECK(rp_checkpoint_add_i64(ck, "train/position", 3, position));
    RP_CHECK(rp_checkpoint_add_i64(ck, TRAIN_EPOCH_STEPS, 1, &t->epoch_steps));
    RP_CHECK(rp_checkpoint_add_u64(ck, TRAIN_EPOCH_SUMS, t->n_scalars, sums));
    if (t->config_json) RP_CHECK(rp_checkpoint_set_meta(ck, "replicator.config", t->config_json));
    return rp_checkpoint_set_meta(ck, "replicator.version", RP_VERSION);
}

static rp_status stage(const rp_trainer *t, rp_checkpoint *ck)
{
    RP_CHECK(t->model->save(t->ctx, t->states[0], ck));
    return stage_run_state(t, ck);
}

/* Inline: staged into a checkpoint of its own and written before returning. */
static rp_status save_now(rp_trainer *t)
{
    rp_checkpoint *ck = NULL;
    RP_CHECK(rp_checkpoint_create(&ck));
    rp_status status = stage(t, ck);
    char layout[256];
    trainer_layout_text(t, layout, sizeof layout);
    if (status == RP_OK)
        status = trainer_write_checkpoint(t->run_dir, t->cfg.checkpoint_shards, layout,
                                          &t->generation, ck);
    rp_checkpoint_destroy(ck);
    return status;
}

/* Background: wait for the previous save, stage into the reused copy, hand it to the writer. */
static rp_status save_background(rp_trainer *t)
{
    if (!t->saver) RP_CHECK(saver_start(t));
    trainer_saver *s = t->saver;
    RP_CHECK(trainer_saver_wait(t));
    rp_checkpoint_reset(s->staging);
    rp_trace_begin(RP_PHASE_OTHER);
    rp_status status = stage(t, s->staging);
    rp_trace_end("checkpoint stage");
    RP_CHECK(status);
    pthread_mutex_lock(&s->mu);
    s->step = t->global_step;
    s->pending = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return RP_OK;
}

int trainer_shard_timeout_ms(const rp_trainer *t)
{
    /* The communicators' timeout (a worker that stops writing is as stuck as one that stops
       sending), and at least a minute: a shard is many collectives' worth of bytes. */
    double s = t->cfg.runtime.timeout_s > 0 ? t->cfg.runtime.timeout_s : 300;
    if (s < 60) s = 60;
    return s > 86400 ? 86400 * 1000 : (int)(s * 1000);
}

/* Per worker, in a run: this worker's part into its staging checkpoint. */
static rp_status stage_part(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    trainer_parts *p = &t->parts;
    int i = rp_replica_local_index(rep);
    rp_comm *role = rp_replica_role_comm(rep);
    p->shard[i] = rp_comm_rank(role);
    rp_checkpoint_reset(p->ck[i]);
    RP_CHECK(t->model->save_part(rep, t->ctx, t->states[i], p->ck[i]));
    if (p->shard[i] == 0) {
        RP_CHECK(stage_run_state(t, p->ck[i]));
        char base[TRAIN_PATH_MAX + 32];
        join(base, sizeof base, t->run_dir, "checkpoint");
        RP_CHECK(rp_checkpoint_discard_generation(base, p->generation + 1));
    }
    /* No worker writes before worker 0 has cleared the generation. */
    return rp_comm_barrier(role);
}

static rp_status parts_init(rp_trainer *t)
{
    trainer_parts *p = &t->parts;
    if (p->ck) return RP_OK;
    p->ck = calloc((size_t)t->local, sizeof *p->ck);
    p->shard = calloc((size_t)t->local, sizeof *p->shard);
    if (!p->ck || !p->shard) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the staging parts");
    for (int i = 0; i < t->local; i++)
        RP_CHECK(rp_checkpoint_create(&p->ck[i]));
    p->workers = rp_comm_size(rp_replica_role_comm(rp_replicator_replica(t->rep, 0)));
    char base[TRAIN_PATH_MAX + 32];
    join(base, sizeof base, t->run_dir, "checkpoint");
    p->generation = rp_checkpoint_published_generation(base);
    return RP_OK;
}

void trainer_parts_free(rp_trainer *t)
{
    trainer_parts *p = &t->parts;
    for (int i = 0; p->ck && i < t->local; i++)
        rp_checkpoint_destroy(p->ck[i]);
    free(p->ck);
    free(p->shard);
    memset(p, 0, sizeof *p);
}

/*
 * Every process: its workers' parts staged in a run (after the save before it is done), then
 * written here or handed to the writer thread.
 */
static rp_status save_per_worker(rp_trainer *t)
{
    RP_CHECK(parts_init(t));
    trainer_parts *p = &t->parts;
    if (t->cfg.checkpoint_background) {
        if (!t->saver) RP_CHECK(saver_start(t));
        RP_CHECK(trainer_saver_wait(t));
    }
    rp_trace_begin(RP_PHASE_OTHER);
    rp_status status = rp_replicator_run(t->rep, stage_part, t);
    rp_trace_end("checkpoint stage");
    RP_CHECK(status);
    int64_t g = ++p->generation;
    if (!t->cfg.checkpoint_background) {
        char layout[256];
        trainer_layout_text(t, layout, sizeof layout);
        rp_trace_begin(RP_PHASE_OTHER);
        status = trainer_write_parts(t->run_dir, p->ck, p->shard, t->local, p->workers, layout, g,
                                     trainer_shard_timeout_ms(t));
        rp_trace_end("checkpoint");
        return status;
    }
    trainer_saver *s = t->saver;
    pthread_mutex_lock(&s->mu);
    s->parts = p->ck;
    s->shard = p->shard;
    s->n_parts = t->local;
    s->workers = p->workers;
    s->part_generation = g;
    s->step = t->global_step;
    s->pending = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return RP_OK;
}

rp_status trainer_save_checkpoint(rp_trainer *t)
{
    if (t->cfg.no_checkpoint) return RP_OK;
    if (t->cfg.checkpoint_per_worker) return save_per_worker(t);
    if (!t->root) return RP_OK;
    if (t->cfg.checkpoint_background) return save_background(t);
    rp_trace_begin(RP_PHASE_OTHER);
    rp_status status = save_now(t);
    rp_trace_end("checkpoint");
    return status;
}
