/*
 * loop.c - the loop over an epoch's global batches, for every strategy.
 *
 * Each rp_replicator_run() covers a chunk of the epoch's batches, handed out
 * by rp_replica_next_batch(): one when the replicas step in lockstep (sync:
 * every replica trains its shard of it), the rest of the epoch when they
 * run independently (async: each batch to whichever replica claims it from
 * the runtime's shared queue), cut short at max_steps and at the step
 * cadences; with sync groups, the rest of the epoch too, each batch to
 * whichever group claims it (every replica of the group trains its share).
 * After each chunk the replicas have agreed on a stop request; the main thread
 * then records the steps, draws the progress, and at an epoch's end (or a
 * step cadence) evaluates and checkpoints.
 */
#include <string.h>
#include <time.h>

#include "train_internal.h"

/* slow_replica sleeps (slow_factor - 1) times what its step took, so its steps take that factor
 * longer; the sleep is a compute span, so the straggler report blames its compute. */
static void straggle(const rp_trainer *t, const rp_replica *rep, double started)
{
    if (rp_replica_id(rep) != t->cfg.slow_replica || t->cfg.slow_factor <= 1) return;
    double pause = (rp_now_s() - started) * (double)(t->cfg.slow_factor - 1);
    struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
    rp_trace_begin(RP_PHASE_COMPUTE);
    nanosleep(&ts, NULL);
    rp_trace_end("slow (--slow)");
}

/*
 * Whether an independent replica stops before its next batch: a signal or a failed peer. The
 * replicas of a sync group must decide together (they take each batch as one), so they agree on
 * the largest request over the group's communicator.
 */
static rp_status stop_now(rp_trainer *t, rp_replica *rep, bool *stop)
{
    int64_t want = trainer_stop_reason() || __atomic_load_n(&t->failed, __ATOMIC_RELAXED);
    rp_comm *group = rp_replica_in_sync(rep) > 1 ? rp_replica_sync_comm(rep) : NULL;
    if (group) {
        rp_comm_begin_internal(group, "the trainer's stop agreement");
        rp_status status = rp_comm_all_reduce(group, &want, &want, 1, RP_I64, RP_MAX);
        rp_comm_end_internal(group);
        RP_CHECK(status);
    }
    *stop = want != 0;
    return RP_OK;
}

/*
 * On every replica: the chunk's batches, as the runtime hands them out. Reports the batches this
 * replica trained, the sums of their scalars and the stop request it saw (the largest is agreed).
 */
static rp_status chunk_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    bool independent = !t->lockstep;
    int i = rp_replica_local_index(rep);
    void *state = t->states[i];
    int64_t start = t->chunk_start, end = t->chunk_end, done = 0;
    /* Independent replicas never meet during a chunk: this process's first shows the progress. */
    bool lead = independent && i == 0 && t->root && !t->cfg.quiet;
    double sums[RP_TRAINER_MAX_SCALARS] = {0}, t_chunk = rp_now_s();
    rp_status status = RP_OK;
    /* The step's span: "step" for replicas, the role's name ("learner") for another stepped role.
     */
    const char *step_name = strcmp(rp_replica_role(rep), "replica") ? rp_replica_role(rep) : "step";
    double phases[RP_PHASE_COUNT];
    rp_trace_phase_take(phases); /* what came before this chunk (evaluation, last reports) */
    for (;;) {
        bool stop = false;
        if (independent) RP_TRY(stop_now(t, rep, &stop));
        if (stop) break;
        int64_t ticket;
        RP_TRY(rp_replica_next_batch(rep, &ticket));
        if (start + ticket >= end) break;
        int64_t global = t->global_step + ticket;
        rp_trainer_at at = {t->epoch, start + ticket, global, rp_schedule_lr(&t->sched, global)};
        double started = rp_now_s(), values[RP_TRAINER_MAX_SCALARS] = {0};
        if (independent) rp_tape_reset(rp_replica_tape(rep)); /* one run takes many steps here */
        rp_trace_begin(RP_PHASE_COMPUTE);
        rp_trace_mark(); /* forward runs from here (or from the batch) to backward */
        status = t->model->train_step(rep, t->ctx, state, &at, values);
        if (status == RP_OK) straggle(t, rep, started);
        rp_trace_end(step_name);
        if (status != RP_OK) goto cleanup;
        done++;
        for (int k = 0; k < t->n_scalars; k++)
            sums[k] += values[k];
        if (lead) {
            double means[RP_TRAINER_MAX_SCALARS];
            for (int k = 0; k < t->n_scalars; k++)
                means[k] = sums[k] / (double)done;
            trainer_print_progress(t, at.epoch, at.step, global + 1, means, at.lr,
                                   t->epoch_run_steps + ticket + 1,
                                   t->epoch_seconds + rp_now_s() - t_chunk);
        }
    }
cleanup:
    if (status != RP_OK) {
        if (independent) __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return status;
    }
    RP_CHECK(rp_replica_report(rep, "steps", (double)done, RP_SUM));
    if (!independent) RP_CHECK(trainer_straggler_report(rep));
    for (int k = 0; k < t->n_scalars; k++)
        RP_CHECK(rp_replica_report(rep, t->scalar_reports[k], sums[k], RP_SUM));
    /* A signal may reach the processes at different steps: they agree here to stop after this one.
     */
    return rp_replica_report(rep, "stop", (double)trainer_stop_reason(), RP_MAX);
}

static rp_status settle_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    return t->model->settle(rep, t->ctx, t->states[rp_replica_local_index(rep)]);
}

/*
 * A checkpoint of local replica 0's state: where each replica's optimizer holds a shard of the
 * state (ZeRO-1), settle first gathers it (rp_replica_optimizer_fetch) - a run, so every process
 * takes part, not only the one that writes.
 */
static rp_status save_checkpoint(rp_trainer *t)
{
    /* Per worker: each worker writes what it holds; nothing is gathered. */
    if (!t->cfg.no_checkpoint && !t->cfg.checkpoint_per_worker && rp_replicator_sharded(t->rep) &&
        t->model->settle)
        RP_CHECK(rp_replicator_run(t->rep, settle_replica, t));
    return trainer_save_checkpoint(t);
}

static rp_status evaluate_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    rp_trace_begin(RP_PHASE_OTHER);
    rp_status status = t->model->evaluate(rep, t->ctx, t->states[rp_replica_local_index(rep)]);
    rp_trace_end("evaluate");
    return status;
}

static rp_status evaluate(rp_trainer *t, rp_trainer_metrics *m)
{
    m->n = 0;
    RP_CHECK(rp_replicator_run(t->rep, evaluate_replica, t));
    return t->model->evaluated(t->ctx, t->rep, m);
}

rp_status rp_trainer_evaluate(rp_trainer *t, rp_trainer_metrics *m)
{
    if (!t || !m) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_evaluate: NULL argument");
    if (t->server)
        return RP_ERROR(RP_ERR_INVALID, "a parameter-server rank has no replicas to evaluate");
    if (!t->model->evaluate)
        return RP_ERROR(RP_ERR_INVALID, "the trainer's model has no evaluate callback");
    return evaluate(t, m);
}

/* The end of the chunk that starts at the current position: the epoch's end, or sooner. */
static int64_t chunk_end(const rp_trainer *t)
{
    if (t->lockstep) return t->step + 1;
    int64_t left = t->steps_per_epoch - t->step;
    const rp_trainer_config *c = &t->cfg;
    if (c->max_steps && c->max_steps - t->global_step < left) left = c->max_steps - t->global_step;
    int64_t every[2] = {c->checkpoint_every_steps, c->eval_every_steps};
    for (int k = 0; k < 2; k++) {
        if (every[k] <= 0) continue;
        int64_t to_next = every[k] - t->global_step % every[k];
        if (to_next < left) left = to_next;
    }
    return t->step + left;
}

/* Whether global steps (from, to] include a multiple of `every` (> 0). */
static bool crosses(int64_t from, int64_t to, int64_t every)
{
    return every > 0 && from / every != to / every;
}

/* After the last step of epoch `epoch` (the position is already the next one's first batch). */
static rp_status finish_epoch(rp_trainer *t, int64_t epoch, bool eval_steps, bool save_steps)
{
    const rp_trainer_config *c = &t->cfg;
    bool last = epoch + 1 == c->epochs;
    bool eval =
        t->model->evaluate &&
        (eval_steps || last || (c->eval_every_epochs && (epoch + 1) % c->eval_every_epochs == 0));
    bool save = save_steps || last ||
                (c->checkpoint_every_epochs && (epoch + 1) % c->checkpoint_every_epochs == 0);
    double seconds = t->epoch_seconds,
           rate = seconds > 0 ? (double)t->epoch_run_steps * c->batch / seconds : 0;
    double means[RP_TRAINER_MAX_SCALARS];
    for (int k = 0; k < t->n_scalars; k++)
        means[k] = t->gauge[k]      ? t->latest[k]
                   : t->epoch_steps ? t->epoch_sums[k] / (double)t->epoch_steps
                                    : 0;
    rp_trainer_metrics m = {0};
    if (eval) RP_CHECK(evaluate(t, &m));
    trainer_print_epoch(t, epoch, means, rate, seconds, &m);
    trainer_metrics_epoch(t, epoch, means, rate, &m);
    /* Before the checkpoint: it resumes at the next epoch's first batch, with nothing summed. */
    t->epoch_steps = t->epoch_run_steps = 0;
    memset(t->epoch_sums, 0, sizeof t->epoch_sums);
    t->epoch_seconds = 0;
    return save ? save_checkpoint(t) : RP_OK;
}

/* One chunk: run it, take the agreed results, record them, and what falls due after it. */
static rp_status run_chunk(rp_trainer *t)
{
    const rp_trainer_config *c = &t->cfg;
    t->chunk_start = t->step;
    t->chunk_end = chunk_end(t);
    double t0 = rp_now_s(), steps = 0, sums[RP_TRAINER_MAX_SCALARS] = {0}, stop = 0;
    RP_CHECK(rp_replicator_run(t->rep, chunk_replica, t));
    /* A step boundary: a background save that failed meanwhile is reported here. */
    RP_CHECK(trainer_saver_poll(t));
    RP_CHECK(rp_replicator_result(t->rep, "steps", &steps));
    for (int k = 0; k < t->n_scalars; k++)
        RP_CHECK(rp_replicator_result(t->rep, t->scalar_reports[k], &sums[k]));
    RP_CHECK(rp_replicator_result(t->rep, "stop", &stop));
    if (!t->lockstep && t->model->settle) RP_CHECK(rp_replicator_run(t->rep, settle_replica, t));
    t->epoch_seconds += rp_now_s() - t0;
    t->stop = (int)stop;
    if (t->lockstep || rp_replicator_in_sync(t->rep) > 1) {
        /* The replicas in sync trained a shard each of every batch (sync: all of them; sync
           groups: a group): the batch's scalars are their means. */
        int n = t->lockstep ? rp_replicator_replicas(t->rep) : rp_replicator_in_sync(t->rep);
        steps /= n;
        for (int k = 0; k < t->n_scalars; k++)
            sums[k] /= n;
    }
    int64_t n = (int64_t)steps, epoch = t->epoch, before = t->global_step;
    t->global_step += n;
    t->step += n;
    t->epoch_steps += n;
    t->epoch_run_steps += n;
    double chunk_means[RP_TRAINER_MAX_SCALARS], epoch_means[RP_TRAINER_MAX_SCALARS];
    for (int k = 0; k < t->n_scalars; k++) {
        t->epoch_sums[k] += sums[k];
        chunk_means[k] = n > 0 ? sums[k] / (double)n : 0;
        if (t->gauge[k] && n > 0) t->latest[k] = chunk_means[k];
        epoch_means[k] = t->gauge[k]      ? t->latest[k]
                         : t->epoch_steps ? t->epoch_sums[k] / (double)t->epoch_steps
                                          : 0;
    }
    if (n > 0) rp_debug("step %lld %s %.7f", (long long)before, t->scalar_names[0], chunk_means[0]);
    if (t->lockstep && n > 0) RP_CHECK(trainer_straggler_step(t));
    if (t->lockstep && n > 0)
        trainer_print_progress(t, epoch, t->step - 1, t->global_step, epoch_means,
                               rp_schedule_lr(&t->sched, t->global_step - 1), t->epoch_run_steps,
                               t->epoch_seconds);
    if (n > 0 && (!t->lockstep || crosses(before, t->global_step, c->metrics_every_steps)))
        trainer_metrics_step(t, epoch, chunk_means);
    bool eval_steps = t->model->evaluate && crosses(before, t->global_step, c->eval_every_steps);
    bool save_steps = crosses(before, t->global_step, c->checkpoint_every_steps);
    if (t->step >= t->steps_per_epoch) {
        /* The checkpoint resumes at the next epoch's first batch. */
        t->epoch++;
        t->step = 0;
        return finish_epoch(t, epoch, eval_steps, save_steps);
    }
    if (eval_steps) {
        rp_trainer_metrics m = {0};
        RP_CHECK(evaluate(t, &m));
        trainer_print_eval(t, &m);
        trainer_metrics_eval(t, &m);
    }
    return save_steps ? save_checkpoint(t) : RP_OK;
}

static rp_status train(rp_trainer *t)
{
    const rp_trainer_config *c = &t->cfg;
    while (t->epoch < c->epochs) {
        if (t->stop || (c->max_steps && t->global_step >= c->max_steps)) {
            t->stopped = true;
            return save_checkpoint(t);
        }
        RP_CHECK(run_chunk(t));
    }
    t->finished = true;
    return RP_OK;
}

static rp_status stop_roles_replica(rp_replica *rep, void *arg)
{
    rp_trainer *t = arg;
    return t->model->stop_roles(rep, t->ctx,
                                t->states ? t->states[rp_replica_local_index(rep)] : NULL);
}

rp_status trainer_finish_roles(rp_trainer *t, rp_status status)
{
    if (!t->roles_started) return status;
    t->roles_started = false;
    char first[1024] = "";
    if (status != RP_OK) snprintf(first, sizeof first, "%s", rp_last_error());
    if (!t->bystander && t->model->stop_roles) {
        rp_status st = rp_replicator_run(t->rep, stop_roles_replica, t);
        if (status == RP_OK) status = st; /* on the way out of an error, the error stays the one */
    }
    for (int i = 1; i < rp_replicator_roles(t->rep); i++) {
        rp_status st = rp_replicator_wait(t->rep, rp_replicator_role(t->rep, i)->name);
        if (st != RP_OK && status != RP_OK)
            rp_warn("and %s", rp_last_error()); /* the first error stays */
        if (status == RP_OK) status = st;
    }
    if (first[0]) rp_error_set(status, NULL, 0, "%s", first);
    return status;
}

rp_status rp_trainer_run(rp_trainer *t)
{
    if (!t) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_run: NULL trainer");
    /* A parameter server rank: it serves until every replica's process is done. */
    if (t->server) return rp_replicator_serve(t->rep);
    /* A process of started roles only: they run until the stepped role tells them to stop. */
    if (t->bystander) return trainer_finish_roles(t, RP_OK);
    t->first_step = t->global_step;
    t->stop = 0;
    t->stopped = t->finished = false;
    /* The epoch's steps and sums are where create left them (restored when resuming). */
    t->epoch_run_steps = 0;
    t->epoch_seconds = 0;
    trainer_stop_arm(true);
    rp_status status = train(t);
    /* The run's last checkpoint is on disk when it returns (a background save is waited for);
       a run that failed keeps its own error. */
    char first[1024] = "";
    if (status != RP_OK) snprintf(first, sizeof first, "%s", rp_last_error());
    rp_status saved = trainer_saver_wait(t);
    if (status == RP_OK)
        status = saved;
    else if (saved != RP_OK)
        rp_error_set(status, NULL, 0, "%s", first);
    trainer_stop_arm(false);
    status = trainer_finish_roles(t, status); /* first: the started roles' spans end with them */
    if (status == RP_OK && t->trace_path) {
        status = rp_replicator_trace_write(t->rep, t->trace_path);
        if (status == RP_OK && t->root && !t->cfg.quiet)
            rp_info("trace: %s (open it in ui.perfetto.dev)", t->trace_path);
    } else if (t->trace_path) {
        /* A failed run's trace is the one most needed: this process's, without the others (a
           broken communicator cannot exchange clocks); the run's error stays the one reported. */
        char first[1024];
        snprintf(first, sizeof first, "%s", rp_last_error());
        if (rp_replicator_trace_write_local(t->rep, t->trace_path) != RP_OK)
            rp_warn("the trace of the failed run was not written: %s", rp_last_error());
        rp_error_set(status, NULL, 0, "%s", first);
    }
    return status;
}
