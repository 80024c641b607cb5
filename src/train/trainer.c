/*
 * trainer.c - making and freeing a trainer: the run directory, the
 * replicator, every replica's state (the model's build callback), the
 * schedule and where a resumed run stands; and the queries.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_internal.h"

rp_trainer_config rp_trainer_config_default(void)
{
    rp_trainer_config c;
    memset(&c, 0, sizeof c);
    c.runtime = rp_config_default();
    c.epochs = 1;
    c.lr = 0.1f;
    c.schedule = RP_SCHED_CONSTANT;
    c.checkpoint_every_epochs = 1;
    c.eval_every_epochs = 1;
    c.metrics_every_steps = 50;
    c.batch = 1;
    c.rate_unit = "samples/s";
    c.rate_key = "samples_per_s";
    c.slow_replica = -1;
    c.slow_factor = 1;
    c.straggler_window = 50;
    return c;
}

bool trainer_key_ok(const char *key)
{
    size_t len = strlen(key);
    bool ok = len > 0 && len < 32;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)key[i]) || key[i] == '_';
    return ok;
}

rp_status rp_trainer_metrics_add(rp_trainer_metrics *m, const char *key, double value,
                                 const char *shown_fmt, ...)
{
    if (!m || !key) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_metrics_add: NULL argument");
    if (!trainer_key_ok(key))
        return RP_ERROR(RP_ERR_INVALID, "metric key \"%.64s\": 1..31 letters, digits or '_'", key);
    if (m->n < 0 || m->n >= RP_TRAINER_MAX_METRICS)
        return RP_ERROR(RP_ERR_INVALID, "metric \"%s\": at most %d metrics", key,
                        RP_TRAINER_MAX_METRICS);
    snprintf(m->m[m->n].key, sizeof m->m[m->n].key, "%s", key);
    m->m[m->n].value = value;
    m->m[m->n].shown[0] = '\0';
    if (shown_fmt) {
        va_list ap;
        va_start(ap, shown_fmt);
        vsnprintf(m->m[m->n].shown, sizeof m->m[m->n].shown, shown_fmt, ap);
        va_end(ap);
    }
    m->n++;
    return RP_OK;
}

rp_status rp_trainer_set_config_json(rp_trainer *t, const char *json)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_set_config_json: NULL trainer");
    char *copy = NULL;
    if (json && !(copy = strdup(json)))
        return RP_ERROR(RP_ERR_NOMEM, "cannot copy the configuration");
    free(t->config_json);
    t->config_json = copy;
    return RP_OK;
}

static rp_status check_config(const rp_trainer_config *c, const rp_trainer_model *m)
{
    if (!m || !m->build || !m->train_step || (!m->steps_per_epoch && c->steps <= 0))
        return RP_ERROR(RP_ERR_INVALID, "the trainer's model needs build, train_step and (unless "
                                        "cfg.steps is set) steps_per_epoch");
    if (!c->no_checkpoint && !m->save)
        return RP_ERROR(RP_ERR_INVALID,
                        "the trainer's model has no save callback; set no_checkpoint");
    if (m->evaluate && !m->evaluated)
        return RP_ERROR(RP_ERR_INVALID,
                        "the trainer's model has evaluate but no evaluated callback");
    if (c->tensorboard_dir && (!c->tensorboard_writer || !c->tensorboard_writer->create ||
                               !c->tensorboard_writer->add || !c->tensorboard_writer->flush))
        return RP_ERROR(RP_ERR_INVALID,
                        "tensorboard_dir '%s' is set but tensorboard_writer is %s: link "
                        "libreplicator-extras and set it to rp_tensorboard_scalar_writer()",
                        c->tensorboard_dir, c->tensorboard_writer ? "incomplete" : "NULL");
    if (!c->run_dir || !c->run_dir[0] || strlen(c->run_dir) >= TRAIN_PATH_MAX - 32)
        return RP_ERROR(RP_ERR_INVALID, "run_dir must be set, under %d bytes", TRAIN_PATH_MAX - 32);
    if (c->epochs < 1) return RP_ERROR(RP_ERR_INVALID, "epochs %d; at least 1", c->epochs);
    if (c->max_steps < 0)
        return RP_ERROR(RP_ERR_INVALID, "max_steps %lld < 0", (long long)c->max_steps);
    if (c->steps < 0) return RP_ERROR(RP_ERR_INVALID, "steps %lld < 0", (long long)c->steps);
    if (c->warmup_steps < 0)
        return RP_ERROR(RP_ERR_INVALID, "warmup_steps %lld < 0", (long long)c->warmup_steps);
    if (c->schedule != RP_SCHED_CONSTANT && c->schedule != RP_SCHED_COSINE &&
        c->schedule != RP_SCHED_LINEAR)
        return RP_ERROR(RP_ERR_INVALID,
                        "schedule %d: RP_SCHED_CONSTANT, RP_SCHED_COSINE or RP_SCHED_LINEAR",
                        (int)c->schedule);
    if (c->warmup_epochs < 0 || c->checkpoint_every_epochs < 0 || c->eval_every_epochs < 0 ||
        c->checkpoint_every_steps < 0 || c->eval_every_steps < 0 || c->metrics_every_steps < 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "a negative cadence or warm-up (warmup %d, checkpoint %d/%lld, eval "
                        "%d/%lld, metrics %lld)",
                        c->warmup_epochs, c->checkpoint_every_epochs,
                        (long long)c->checkpoint_every_steps, c->eval_every_epochs,
                        (long long)c->eval_every_steps, (long long)c->metrics_every_steps);
    if (c->batch < 1) return RP_ERROR(RP_ERR_INVALID, "batch %d; at least 1", c->batch);
    if (c->straggler_window < 0 || c->straggler_window > 100000)
        return RP_ERROR(RP_ERR_INVALID, "straggler_window %d: 0 (off) to 100000 steps",
                        c->straggler_window);
    if (c->trace && !c->trace[0]) return RP_ERROR(RP_ERR_INVALID, "trace: an empty path");
    if (c->checkpoint_shards < 0 || c->checkpoint_shards > RP_CHECKPOINT_SHARDS_MAX)
        return RP_ERROR(RP_ERR_INVALID, "checkpoint_shards %d: 0 (one whole file) to %d",
                        c->checkpoint_shards, RP_CHECKPOINT_SHARDS_MAX);
    if (c->checkpoint_per_worker && !c->no_checkpoint && !m->save_part)
        return RP_ERROR(RP_ERR_INVALID, "checkpoint_per_worker: the trainer's model has no "
                                        "save_part callback (each worker's own part)");
    if (c->checkpoint_per_worker && c->checkpoint_shards > 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "checkpoint_per_worker and checkpoint_shards %d: give one (per worker "
                        "there is one shard per worker)",
                        c->checkpoint_shards);
    if (m->stop_roles && !m->start_roles)
        return RP_ERROR(RP_ERR_INVALID, "the trainer's model has stop_roles but no start_roles");
    if (m->start_roles && c->runtime.nroles < 2)
        return RP_ERROR(RP_ERR_INVALID,
                        "the trainer's model starts roles, but cfg.runtime has %d role(s): the "
                        "first is stepped, the others started",
                        c->runtime.nroles);
    return RP_OK;
}

/* On every replica: the model's state for it. */
static rp_status build_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    int i = rp_replica_local_index(rep);
    rp_trainer_at at = {t->epoch, t->step, t->global_step, 0.0f}; /* the schedule comes after */
    const rp_checkpoint *ck = t->cfg.resume;
    return t->model->build(rep, t->ctx, ck, ck ? &at : NULL, &t->states[i]);
}

static rp_status destroy_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    int i = rp_replica_local_index(rep);
    if (!t->states[i] || !t->model->destroy) return RP_OK;
    rp_status status = t->model->destroy(rep, t->ctx, t->states[i]);
    t->states[i] = NULL;
    return status;
}

/* Where the resumed run stands: {epoch, step in epoch, global step} of the next batch. */
static rp_status read_position(rp_trainer *t)
{
    int64_t n;
    const int64_t *pos = rp_checkpoint_get_i64(t->cfg.resume, "train/position", &n);
    if (!pos || n != 3) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint has no train/position");
    if (pos[0] < 0 || pos[1] < 0 || pos[2] < 0)
        return RP_ERROR(RP_ERR_FORMAT,
                        "the checkpoint's train/position {%lld, %lld, %lld} is negative",
                        (long long)pos[0], (long long)pos[1], (long long)pos[2]);
    t->epoch = pos[0];
    t->step = pos[1];
    t->global_step = pos[2];
    /*
     * The epoch's running scalars, so that its line covers the steps before the stop too. A
     * checkpoint without them (an older version's) starts them afresh: the epoch's means then
     * cover the steps since the resume.
     */
    const int64_t *steps = rp_checkpoint_get_i64(t->cfg.resume, TRAIN_EPOCH_STEPS, &n);
    int64_t n_sums = 0;
    const uint64_t *sums = rp_checkpoint_get_u64(t->cfg.resume, TRAIN_EPOCH_SUMS, &n_sums);
    if (!steps && !sums) return RP_OK;
    if (!steps || !sums)
        return RP_ERROR(RP_ERR_FORMAT, "the checkpoint has %s but no %s",
                        steps ? TRAIN_EPOCH_STEPS : TRAIN_EPOCH_SUMS,
                        steps ? TRAIN_EPOCH_SUMS : TRAIN_EPOCH_STEPS);
    if (n != 1)
        return RP_ERROR(RP_ERR_FORMAT, "the checkpoint's " TRAIN_EPOCH_STEPS " has %lld values; 1",
                        (long long)n);
    if (n_sums != t->n_scalars)
        return RP_ERROR(RP_ERR_FORMAT,
                        "the checkpoint's " TRAIN_EPOCH_SUMS
                        " holds %lld scalars; the model has %d",
                        (long long)n_sums, t->n_scalars);
    if (steps[0] < 0 || steps[0] > t->step)
        return RP_ERROR(RP_ERR_FORMAT,
                        "the checkpoint's " TRAIN_EPOCH_STEPS " %lld is not in 0..%lld (its step "
                        "in the epoch)",
                        (long long)steps[0], (long long)t->step);
    t->epoch_steps = steps[0];
    memcpy(t->epoch_sums, sums, (size_t)n_sums * sizeof *sums);
    return RP_OK;
}

/*
 * The model's scalar names (default {"loss"}), checked, and which of them cfg.shown_scalars shows
 * (default the first).
 */
static rp_status take_scalars(rp_trainer *t, const char *shown_list)
{
    static const char *const default_names[] = {"loss", NULL};
    const char *const *names = t->model->scalars ? t->model->scalars : default_names;
    int n = 0;
    for (; names[n]; n++) {
        if (n == RP_TRAINER_MAX_SCALARS)
            return RP_ERROR(RP_ERR_INVALID, "the model has more than %d scalars",
                            RP_TRAINER_MAX_SCALARS);
        if (!trainer_key_ok(names[n]))
            return RP_ERROR(RP_ERR_INVALID,
                            "the model's scalar \"%.64s\": 1..31 letters, digits or '_'", names[n]);
        for (int k = 0; k < n; k++)
            if (!strcmp(names[k], names[n]))
                return RP_ERROR(RP_ERR_INVALID, "the model names scalar \"%s\" twice", names[n]);
        t->scalar_names[n] = names[n];
        snprintf(t->scalar_reports[n], sizeof t->scalar_reports[n], "train/scalar%d", n);
    }
    if (n == 0)
        return RP_ERROR(RP_ERR_INVALID, "the model's scalars list is empty; NULL means {\"loss\"}");
    t->n_scalars = n;
    for (const char *const *g = t->model->gauges; g && *g; g++) {
        int found = -1;
        for (int k = 0; k < n && found < 0; k++)
            if (!strcmp(names[k], *g)) found = k;
        if (found < 0)
            return RP_ERROR(RP_ERR_INVALID, "the model's gauge \"%.64s\" is not one of its scalars",
                            *g);
        t->gauge[found] = true;
    }
    if (!shown_list) {
        t->shown[0] = true;
        return RP_OK;
    }
    for (const char *p = shown_list; *p;) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int k = 0; k < n && found < 0; k++)
            if (strlen(names[k]) == len && !strncmp(names[k], p, len)) found = k;
        if (found < 0)
            return RP_ERROR(RP_ERR_INVALID,
                            "shown_scalars \"%s\": the model has no scalar \"%.*s\"", shown_list,
                            (int)(len < 64 ? len : 64), p);
        t->shown[found] = true;
        p += len;
        if (*p == ',') p++;
    }
    return RP_OK;
}

static void make_schedule(rp_trainer *t)
{
    const rp_trainer_config *c = &t->cfg;
    int64_t total = t->steps_per_epoch * c->epochs,
            warmup = t->steps_per_epoch * c->warmup_epochs + c->warmup_steps;
    t->sched = c->schedule == RP_SCHED_COSINE   ? rp_schedule_cosine(c->lr, warmup, total)
               : c->schedule == RP_SCHED_LINEAR ? rp_schedule_linear(c->lr, warmup, total)
                                                : rp_schedule_constant(c->lr);
    t->sched.warmup_steps = warmup;
}

rp_status rp_trainer_create(rp_trainer **out, const rp_trainer_config *cfg,
                            const rp_trainer_model *model, void *ctx)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_create: NULL argument");
    *out = NULL;
    RP_CHECK(check_config(cfg, model));
    /* A trace path that cannot be written fails now, not when a finished run tries to write it. */
    if (cfg->trace) RP_CHECK(rp_file_check_writable(cfg->trace, "trace file"));
    rp_status status = RP_OK;
    rp_trainer *t = calloc(1, sizeof *t);
    if (!t) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a trainer");
    t->cfg = *cfg;
    t->model = model;
    t->ctx = ctx;
    snprintf(t->run_dir, sizeof t->run_dir, "%s", cfg->run_dir);
    t->cfg.run_dir = t->run_dir;
    if (!t->cfg.rate_unit) t->cfg.rate_unit = "samples/s";
    if (!t->cfg.rate_key) t->cfg.rate_key = "samples_per_s";
    RP_TRY(rp_trainer_set_config_json(t, cfg->config_json));
    t->cfg.config_json = NULL;
    t->cfg.shown_scalars = NULL;   /* taken below, not kept */
    t->cfg.tensorboard_dir = NULL; /* used below, not kept */
    t->tb_writer = cfg->tensorboard_writer;
    t->tb_step_line = -1;
    RP_TRY(take_scalars(t, cfg->shown_scalars));
    if (cfg->steps > 0) {
        /* Steps-only: one stretch of cfg.steps, with the epoch machinery's single epoch. */
        t->steps_only = true;
        t->cfg.epochs = 1;
        t->cfg.warmup_epochs = 0;
    }
    if (cfg->resume) {
        RP_TRY(read_position(t));
        if (t->steps_only) {
            /* One stretch: the position is the global step. A finished run's checkpoint closed
               the stretch (epoch 1), so resuming it with more steps (--iters, --env-steps)
               reopens it at its global step instead of finding it finished. */
            t->epoch = t->global_step >= cfg->steps ? 1 : 0;
            t->step = t->epoch ? 0 : t->global_step;
            if (t->epoch_steps > t->step) t->epoch_steps = t->step;
        }
    } else if (!cfg->no_checkpoint)
        RP_TRY(
            trainer_choose_run_dir(t->run_dir, sizeof t->run_dir, cfg->run_dir_exact, cfg->force));

    t->cfg.trace = NULL; /* copied into trace_path */
    if (cfg->trace) {
        t->trace_path = strdup(cfg->trace);
        if (!t->trace_path) RP_TRY(RP_ERROR(RP_ERR_NOMEM, "cannot copy the trace path"));
        /* Before the replicator, so that its workers' buffers are made as their threads start. */
        if (!rp_trace_enabled()) {
            RP_TRY(rp_trace_start(0));
            t->tracing = true;
        }
    }
    RP_TRY(rp_replicator_create(&t->rep, &cfg->runtime));
    RP_TRY(
        rp_replicator_set_flight_dir(t->rep, t->run_dir)); /* a failed run's flight-<worker>.txt */
    t->lockstep = rp_replicator_lockstep(t->rep);
    if (cfg->checkpoint_per_worker && !cfg->no_checkpoint && !t->lockstep)
        RP_TRY(RP_ERROR(RP_ERR_INVALID,
                        "checkpoint_per_worker (--checkpoint-per-worker) needs replicas that step "
                        "in lockstep (sync or ZeRO): with %s each replica holds values of its own; "
                        "write the gathered state instead (--checkpoint-shards N)",
                        rp_strategy_name(rp_config_strategy(&cfg->runtime))));
    if (rp_replicator_is_server(t->rep)) {
        t->server = true;
        t->cfg.quiet = true;
        goto cleanup;
    }
    if (model->start_roles) {
        t->roles_started = true; /* (some may have started when it fails) */
        RP_TRY(model->start_roles(t->rep, ctx));
        /* The stepped role is the first: a process holding any of its workers holds them first. */
        const char *stepped = rp_replicator_role(t->rep, 0)->name;
        if (strcmp(rp_replica_role(rp_replicator_replica(t->rep, 0)), stepped) != 0) {
            t->bystander = true;
            t->cfg.quiet = true;
            goto cleanup;
        }
    }
    /* A straggler study of a replica the job does not have would never sleep: refused by name. */
    int replicas = rp_replicator_replicas(t->rep);
    if (t->cfg.slow_replica >= replicas) {
        char ids[32] = "0";
        if (replicas > 1) snprintf(ids, sizeof ids, "0 to %d", replicas - 1);
        status = RP_ERROR(RP_ERR_INVALID,
                          "slow_replica (--slow) %d: the job has no replica %d, only %d (%s)",
                          t->cfg.slow_replica, t->cfg.slow_replica, replicas, ids);
        goto cleanup;
    }
    /* The root holds replica 0's first worker (a replica may span workers, and processes). */
    const rp_replica *first = rp_replicator_replica(t->rep, 0);
    t->root = rp_replica_id(first) == 0 && rp_replica_coord(first, RP_AXIS_MODEL) == 0 &&
              rp_replica_coord(first, RP_AXIS_PIPE) == 0;
    if (!t->root) t->cfg.quiet = true;
    t->tty = isatty(STDERR_FILENO) && !t->cfg.quiet;
    t->local = rp_replicator_local_replicas(t->rep);
    t->states = calloc((size_t)t->local, sizeof *t->states);
    if (!t->states) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d replicas' states", t->local);
        goto cleanup;
    }
    RP_TRY(rp_replicator_run(t->rep, build_replica, t));
    t->steps_per_epoch = t->steps_only ? cfg->steps : model->steps_per_epoch(ctx, t->states[0]);
    if (t->steps_per_epoch < 1) {
        status =
            RP_ERROR(RP_ERR_INVALID, "the model has %lld batches per epoch; at least 1 is needed",
                     (long long)t->steps_per_epoch);
        goto cleanup;
    }
    if (t->step >= t->steps_per_epoch) {
        status = RP_ERROR(RP_ERR_FORMAT, "the checkpoint resumes at step %lld of an epoch of %lld",
                          (long long)t->step, (long long)t->steps_per_epoch);
        goto cleanup;
    }
    make_schedule(t);
    if (!t->server) RP_TRY(trainer_straggler_init(t));
    if (t->root) {
        RP_TRY(trainer_make_dirs(t->run_dir));
        char path[TRAIN_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/metrics.jsonl", t->run_dir);
        t->metrics = fopen(path, cfg->resume ? "a" : "w");
        if (!t->metrics)
            rp_warn("cannot write %s (%s); continuing without metrics", path, strerror(errno));
        if (cfg->tensorboard_dir && t->tb_writer->create(&t->tb, cfg->tensorboard_dir) != RP_OK) {
            rp_warn("%s; continuing without TensorBoard events", rp_last_error());
            t->tb = NULL;
        }
    }
cleanup:
    t->cfg.resume = NULL;
    if (status != RP_OK && t->roles_started) trainer_finish_roles(t, status);
    if (status != RP_OK) {
        rp_status keep = status;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_trainer_destroy(t);
        return rp_error_set(keep, NULL, 0, "%s", msg);
    }
    *out = t;
    return RP_OK;
}

rp_status rp_trainer_destroy(rp_trainer *t)
{
    if (!t) return RP_OK;
    rp_status status = trainer_finish_roles(t, RP_OK); /* roles started but never run */
    if (t->rep && t->states) {
        bool any = false;
        for (int i = 0; i < t->local; i++)
            any |= t->states[i] != NULL;
        if (any) {
            rp_status st = rp_replicator_run(t->rep, destroy_replica, t);
            if (status == RP_OK) status = st;
        }
    }
    trainer_saver_stop(t);
    trainer_parts_free(t);
    if (t->metrics) fclose(t->metrics);
    trainer_tensorboard_close(t);
    rp_replicator_destroy(t->rep);
    trainer_straggler_free(t);
    if (t->tracing) rp_trace_stop();
    free(t->trace_path);
    free(t->states);
    free(t->config_json);
    free(t);
    return status;
}

rp_trainer_progress rp_trainer_get_progress(const rp_trainer *t)
{
    rp_trainer_progress p;
    memset(&p, 0, sizeof p);
    if (!t) return p;
    p.epoch = t->epoch;
    p.step = t->step;
    p.global_step = t->global_step;
    p.steps_this_run = t->global_step - t->first_step;
    p.finished = t->finished;
    p.stopped = t->stopped;
    p.stop_signal = t->stop;
    return p;
}

rp_replicator *rp_trainer_replicator(const rp_trainer *t)
{
    return t ? t->rep : NULL;
}
bool rp_trainer_is_server(const rp_trainer *t)
{
    return t && t->server;
}
bool rp_trainer_is_root(const rp_trainer *t)
{
    return t && t->root;
}
bool rp_trainer_is_bystander(const rp_trainer *t)
{
    return t && t->bystander;
}
const char *rp_trainer_run_dir(const rp_trainer *t)
{
    return t ? t->run_dir : NULL;
}
int64_t rp_trainer_steps_per_epoch(const rp_trainer *t)
{
    return t ? t->steps_per_epoch : 0;
}
void *rp_trainer_state(const rp_trainer *t)
{
    return t && t->states ? t->states[0] : NULL;
}

float rp_trainer_lr(const rp_trainer *t, int64_t step)
{
    return t ? rp_schedule_lr(&t->sched, step) : 0.0f;
}
