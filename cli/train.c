/*
 * train.c - `replicator train`: the training loop, read top to bottom.
 *
 * Set-up: datasets, normalisation statistics and the replicator; then, on
 * every replica, its model, optimizer and loader (build_replica), restored
 * from a run's checkpoint when resuming. Then one step per global batch:
 * every replica runs step_replica on its shard - forward, loss, backward,
 * update, with the gradients averaged across replicas inside the optimizer
 * step - the same code for one replica and for many. After each epoch: the
 * replicas evaluate their shares of the test set, and replica 0's state
 * (identical on all) is checkpointed. A signal stops the loop at the next
 * step boundary and checkpoints there, so an interrupted run resumes at the
 * exact batch, with any number of replicas.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "train.h"

/* What each replica holds. */
typedef struct replica_state {
    train_model model;
    rp_optimizer *opt;
    rp_loader *loader;
    rp_batch batch; /* the last batch's position */
} replica_state;

typedef struct run {
    train_opts o;
    rp_dataset *train, *test;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    rp_replicator *rep;
    replica_state *rs;       /* [replicas] */
    const rp_checkpoint *ck; /* while building, when resuming */
    rp_schedule sched;
    int64_t steps_per_epoch;
    int64_t step; /* global steps taken */
    FILE *metrics;
    bool tty;
    bool root;      /* this process holds replica 0: it prints and writes the run directory */
    int stop;       /* a signal seen by any replica (agreed after each step), 0 if none */
    bool async;     /* --regime async: replicas push to parameter servers (train_async below) */
    bool server;    /* this MPI rank is a parameter server: it serves instead of training */
    int64_t pos_epoch, pos_step; /* async: the next global batch (sync reads it off the loader) */
    int failed;     /* async: a replica failed; the others stop at their next step */
} run;

static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t stop_armed; /* the training loop runs: a signal asks it to stop */

/*
 * SIGINT and SIGTERM are blocked in every thread (set before the first one
 * starts, so the replicas', loaders' and OpenMP's threads inherit it) and
 * taken by this one thread with sigwait: no thread of the computation is
 * ever interrupted by a handler (an interrupted call inside an engine
 * corrupted the heap now and then). While the loop runs, the first signal
 * asks it to stop at the next step; a second one, or one outside the loop,
 * ends the process with the signal's default action.
 */
static void *signal_thread(void *arg)
{
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0) continue;
        if (stop_armed && !stop_signal) {
            stop_signal = sig;
            continue;
        }
        signal(sig, SIG_DFL);
        pthread_sigmask(SIG_UNBLOCK, set, NULL);
        raise(sig);
    }
    return NULL;
}

static void take_signals(void)
{
    static sigset_t set;
    static pthread_t thread;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) return;
    if (pthread_create(&thread, NULL, signal_thread, &set) != 0) {
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* default actions, as before */
        return;
    }
    pthread_detach(thread);
}

static void install_handlers(bool on)
{
    stop_armed = on;
}

/* Creates dir and its parents. */
static rp_status make_dirs(const char *dir)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return RP_ERROR(RP_ERR_IO, "cannot create the run directory %s: %s", dir, strerror(errno));
    return RP_OK;
}

static void format_duration(double s, char *buf, size_t size)
{
    int total = isfinite(s) && s > 0 ? (int)(s + 0.5) : 0;
    if (total >= 3600) snprintf(buf, size, "%dh%02dm", total / 3600, total / 60 % 60);
    else snprintf(buf, size, "%dm%02ds", total / 60, total % 60);
}

/* The next global batch: where a checkpoint resumes. */
static void run_position(const run *r, int64_t *epoch, int64_t *step)
{
    if (r->async) {
        *epoch = r->pos_epoch;
        *step = r->pos_step;
    } else {
        rp_loader_position(r->rs[0].loader, epoch, step);
    }
}

/* Writes the run's whole state; the previous checkpoint survives any failure. */
static rp_status save_checkpoint(run *r)
{
    if (r->o.no_checkpoint || !r->root) return RP_OK;
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL, path[600];
    int64_t epoch, step;
    /*
     * The replicas are bitwise identical (sync training), or hold the servers' state fetched after
     * the last steps (async): replica 0's state is the run's.
     */
    const replica_state *s = &r->rs[0];
    run_position(r, &epoch, &step);
    int64_t position[3] = {epoch, step, r->step};
    RP_TRY(rp_checkpoint_create(&ck));
    RP_TRY(rp_checkpoint_add_params(ck, train_model_params(&s->model), "param/"));
    RP_TRY(rp_checkpoint_add_optimizer(ck, s->opt, train_model_params(&s->model), "optim/"));
    RP_TRY(rp_checkpoint_add_i64(ck, "train/position", 3, position));
    config = train_opts_to_json(&r->o);
    if (!config) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot serialise the configuration");
        goto cleanup;
    }
    RP_TRY(rp_checkpoint_set_meta(ck, "replicator.config", config));
    RP_TRY(rp_checkpoint_set_meta(ck, "replicator.version", RP_VERSION));
    train_checkpoint_path(path, sizeof path, r->o.out_dir);
    RP_TRY(rp_checkpoint_save(ck, path));
cleanup:
    free(config);
    rp_checkpoint_destroy(ck);
    return status;
}

/* Options that may change on --resume; the rest come from the checkpoint. */
static void apply_resume_overrides(train_opts *o, const train_opts *cli, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--epochs")) o->epochs = cli->epochs;
        else if (!strcmp(argv[i], "--data")) snprintf(o->data_dir, sizeof o->data_dir, "%s", cli->data_dir);
        else if (!strcmp(argv[i], "--threads")) {
            /* Reductions depend on the team size: a different count resumes correctly, not bit-exactly. */
            if (cli->threads != o->threads)
                rp_warn("resuming on %d threads, the run used %d: results will differ in the last bits",
                        cli->threads, o->threads);
            o->threads = cli->threads;
        } else if (!strcmp(argv[i], "--replicas")) {
            if (cli->replicas != o->replicas)
                rp_warn("resuming on %d replicas, the run used %d: the same global batch, results "
                        "will differ in the last bits", cli->replicas, o->replicas);
            o->replicas = cli->replicas;
        } else if (!strcmp(argv[i], "--threads-per-replica")) {
            o->threads_per_replica = cli->threads_per_replica;
        } else if (!strcmp(argv[i], "--regime")) {
            snprintf(o->regime, sizeof o->regime, "%s", cli->regime);
        } else if (!strcmp(argv[i], "--ps")) {
            o->ps = cli->ps;
        } else if (!strcmp(argv[i], "--staleness")) {
            o->staleness = cli->staleness;
        }
    }
    o->slow_replica = cli->slow_replica;
    o->slow_factor = cli->slow_factor;
    /* Where the replicas run is this invocation's, never the saved run's. */
    o->replicas_given = cli->replicas_given;
    o->comm_timeout = cli->comm_timeout;
    snprintf(o->backend, sizeof o->backend, "%s", cli->backend);
    o->quiet = cli->quiet;
    o->max_steps = cli->max_steps;
    o->no_checkpoint = cli->no_checkpoint;
}

/* Processes in the MPI job that started this one (1 if none). */
static int mpi_world_size(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v) v = getenv("PMI_SIZE");
    return v && atoi(v) > 0 ? atoi(v) : 1;
}

/* true if dir holds a checkpoint. */
static bool has_checkpoint(const char *dir)
{
    char path[600];
    train_checkpoint_path(path, sizeof path, dir);
    return access(path, F_OK) == 0;
}

/*
 * A new run never overwrites saved work: the default directory runs/MODEL
 * becomes runs/MODEL-2, -3, ... if taken; an explicit --out that holds a
 * checkpoint needs --force.
 */
static rp_status choose_out_dir(train_opts *o)
{
    if (!has_checkpoint(o->out_dir) || o->force) return RP_OK;
    if (o->out_given)
        return RP_ERROR(RP_ERR_INVALID,
                        "%s already holds a run's checkpoint; continue it with --resume %s, or "
                        "overwrite it with --force", o->out_dir, o->out_dir);
    char base[sizeof o->out_dir];
    snprintf(base, sizeof base, "%s", o->out_dir);
    for (int k = 2; k < 10000; k++) {
        snprintf(o->out_dir, sizeof o->out_dir, "%.500s-%d", base, k);
        if (!has_checkpoint(o->out_dir)) return RP_OK;
    }
    return RP_ERROR(RP_ERR_INVALID, "no free run directory next to %s; pass --out", base);
}

/*
 * On every replica: its model (cross-replica batch norm when there are
 * several), its optimizer (which broadcasts replica 0's initial values and
 * averages gradients) and its loader (its shard of every global batch).
 */
static rp_status build_replica(rp_replica *rep, void *arg)
{
    run *r = arg;
    const train_opts *o = &r->o;
    replica_state *s = &r->rs[rp_replica_local_index(rep)];
    rp_replica_set_user(rep, s);
    /* Async replicas never wait for each other, so batch norm keeps per-replica statistics. */
    bool cross = rp_replica_count(rep) > 1 && !r->async;
    RP_CHECK(train_model_create(&s->model, o, r->train->h, r->train->w, r->train->c,
                                r->train->num_classes, cross ? rp_cross_replica_bn : NULL,
                                cross ? rep : NULL));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = o->momentum;
    oc.nesterov = o->nesterov;
    oc.weight_decay = o->weight_decay;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, train_model_params(&s->model), &oc));

    rp_loader_config lc = rp_loader_config_default();
    if (r->async) {
        /* Each push is one whole batch, taken by whichever replica claims it (train_async). */
        lc.global_batch = o->batch;
        lc.replica = 0;
        lc.replicas = 1;
    } else {
        rp_input_context in;
        RP_CHECK(rp_replica_input_context(rep, o->batch, &in));
        lc.global_batch = in.global_batch;
        lc.replica = in.replica;
        lc.replicas = in.replicas;
    }
    lc.seed = o->seed;
    lc.shuffle = true;
    lc.drop_last = true;
    lc.augment = o->augment;
    lc.pad = o->pad;
    lc.flip = o->augment;
    lc.prefetch = !r->async; /* async replicas jump between batches: nothing to prefetch */
    lc.limit = o->limit;
    for (int c = 0; c < r->train->c; c++) {
        lc.mean[c] = r->mean[c];
        lc.std[c] = r->std[c];
    }
    RP_CHECK(rp_loader_create(&s->loader, r->train, &lc));
    if (r->ck) {
        /* Every replica restores the same state; a checkpoint of N replicas resumes on M. */
        int64_t n;
        const int64_t *pos = rp_checkpoint_get_i64(r->ck, "train/position", &n);
        if (!pos || n != 3) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint has no train/position");
        RP_CHECK(rp_checkpoint_read_params(r->ck, train_model_params(&s->model), "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(r->ck, s->opt, train_model_params(&s->model), "optim/"));
        RP_CHECK(rp_loader_seek(s->loader, pos[0], pos[1]));
        /* Async: the restored values and slots go to the parameter servers. */
        if (r->async) RP_CHECK(rp_replica_optimizer_publish(rep, s->opt));
    }
    return RP_OK;
}

/* --slow R:F: replica R sleeps (F - 1) times what its step took, so its steps take F times as long. */
static void straggle(const run *r, const rp_replica *rep, double started)
{
    if (rp_replica_id(rep) != r->o.slow_replica || r->o.slow_factor <= 1) return;
    double pause = (rp_now_s() - started) * (double)(r->o.slow_factor - 1);
    struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One optimisation step on this replica's shard of the next global batch. */
/*
 * Forward, loss, backward and the optimizer step on the batch in s->batch, with learning rate
 * lr (both regimes: the optimizer averages or pushes). *loss gets the batch's loss.
 */
static rp_status train_batch(const run *r, rp_replica *rep, replica_state *s, float lr, double started,
                             float *loss_out)
{
    rp_tape *t = rp_replica_tape(rep);
    const rp_batch *b = &s->batch;
    rp_tensor *x = rp_tensor_from(t, 4, (int[]){b->n, b->h, b->w, b->c}, b->x);
    rp_tensor *loss = rp_softmax_cross_entropy(t, train_model_forward(t, &s->model, x, true), b->y);
    if (!loss) return rp_last_status();
    float l = rp_item(loss);
    if (!isfinite(l))
        return RP_ERROR(RP_ERR_NUMERIC,
                        "the loss is %g at epoch %lld step %lld (lr %g): training diverged; "
                        "nothing was saved from this epoch; start again with a lower --lr",
                        (double)l, (long long)b->epoch + 1, (long long)b->step, (double)lr);
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, lr));
    straggle(r, rep, started);
    *loss_out = l;
    return RP_OK;
}

/* One synchronous step on this replica's shard of the next global batch. */
static rp_status step_replica(rp_replica *rep, void *arg)
{
    run *r = arg;
    replica_state *s = rp_replica_user(rep);
    double started = rp_now_s();
    float l;
    RP_CHECK(rp_loader_next(s->loader, &s->batch));
    RP_CHECK(train_batch(r, rep, s, rp_schedule_lr(&r->sched, r->step), started, &l));
    /* A signal may reach the processes at different steps: they agree here to stop after this one. */
    RP_CHECK(rp_replica_report(rep, "stop", (double)stop_signal, RP_MAX));
    return rp_replica_report(rep, "loss", l, RP_MEAN);
}

/* Each replica evaluates its share of every test batch; the sums are reduced. */
static rp_status eval_replica(rp_replica *rep, void *arg)
{
    run *r = arg;
    replica_state *s = rp_replica_user(rep);
    eval_result ev;
    RP_CHECK(train_evaluate(rp_replica_tape(rep), &s->model, r->test, r->mean, r->std,
                            rp_replica_id(rep), rp_replica_count(rep), &ev));
    RP_CHECK(rp_replica_report(rep, "loss_sum", ev.loss_sum, RP_SUM));
    RP_CHECK(rp_replica_report(rep, "correct", (double)ev.correct, RP_SUM));
    return rp_replica_report(rep, "samples", (double)ev.samples, RP_SUM);
}

static rp_status evaluate(run *r, eval_result *ev)
{
    double loss_sum, correct, samples;
    RP_CHECK(rp_replicator_run(r->rep, eval_replica, r));
    RP_CHECK(rp_replicator_result(r->rep, "loss_sum", &loss_sum));
    RP_CHECK(rp_replicator_result(r->rep, "correct", &correct));
    RP_CHECK(rp_replicator_result(r->rep, "samples", &samples));
    ev->samples = (int64_t)samples;
    ev->loss = samples > 0 ? loss_sum / samples : 0;
    ev->accuracy = samples > 0 ? correct / samples : 0;
    return RP_OK;
}

static rp_status destroy_replica(rp_replica *rep, void *arg)
{
    replica_state *s = rp_replica_user(rep);
    if (!s) return RP_OK;
    rp_loader_destroy(s->loader);
    rp_optimizer_destroy(s->opt);
    train_model_destroy(&s->model);
    return RP_OK;
}

static rp_status setup(run *r, const char *resume, int argc, char **argv, rp_checkpoint **ck)
{
    train_opts *o = &r->o;
    if (!resume && !o->no_checkpoint) RP_CHECK(choose_out_dir(o));
    if (resume) {
        char path[600];
        train_checkpoint_path(path, sizeof path, resume);
        RP_CHECK(rp_checkpoint_load(ck, path));
        const char *config = rp_checkpoint_get_meta(*ck, "replicator.config");
        if (!config) return RP_ERROR(RP_ERR_FORMAT, "%s has no replicator.config metadata", path);
        train_opts cli = *o;
        RP_CHECK(train_opts_from_json(o, config));
        apply_resume_overrides(o, &cli, argc, argv);
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
    }
    rp_kernels_set_threads(o->threads);
    /* Under mpirun (or srun): one replica per rank, or --replicas threads in each (hierarchical). */
    bool mpi = !strcmp(o->backend, "mpi") || (!strcmp(o->backend, "auto") && rp_comm_mpi_launched());
    if (!mpi && rp_comm_mpi_launched() && mpi_world_size() > 1)
        return RP_ERROR(RP_ERR_INVALID, "--backend threads under mpirun with %d ranks: every rank would "
                        "train alone and write the same run directory; start one process, or use the "
                        "MPI backend", mpi_world_size());
    r->async = !strcmp(o->regime, "async");
    if (mpi) o->replicas = o->replicas_given ? o->replicas : 1;
    if (o->replicas == 0) {
        /* Auto: one replica per kernel thread (or per --threads-per-replica threads), as many as divide the batch. */
        int total = rp_kernels_get_threads(), tpr = o->threads_per_replica > 0 ? o->threads_per_replica : 1;
        o->replicas = total / tpr > 0 ? total / tpr : 1;
        while (!r->async && o->batch % o->replicas != 0) o->replicas--;
    }
    if (!r->async && o->batch % o->replicas != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas", o->batch, o->replicas);
    RP_CHECK(train_load_dataset(&r->train, o, "train"));
    RP_CHECK(train_load_dataset(&r->test, o, "test"));
    if (r->train->c > RP_LOADER_MAX_CHANNELS)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "%d channels; at most %d", r->train->c, RP_LOADER_MAX_CHANNELS);
    RP_CHECK(rp_dataset_channel_stats(r->train, r->mean, r->std));

    rp_config cfg = rp_config_default();
    cfg.backend = mpi ? RP_BACKEND_MPI : RP_BACKEND_THREADS;
    cfg.replicas = o->replicas;
    cfg.threads_per_replica = o->threads_per_replica;
    cfg.timeout_s = o->comm_timeout;
    cfg.regime = r->async ? RP_REGIME_ASYNC : RP_REGIME_SYNC;
    cfg.ps = o->ps;
    cfg.staleness = o->staleness;
    /* Under MPI the runtime divides the cores among the ranks on this host, unless --threads says. */
    if (!cfg.threads_per_replica && (!mpi || o->threads > 0)) {
        int total = o->threads > 0 ? o->threads : rp_kernels_get_threads();
        cfg.threads_per_replica = total / o->replicas > 0 ? total / o->replicas : 1;
    }
    cfg.seed = o->seed;
    RP_CHECK(rp_replicator_create(&r->rep, &cfg));
    if (rp_replicator_is_server(r->rep)) {
        /* A parameter server rank (async under MPI): rp_cli_train serves instead of training. */
        r->server = true;
        r->root = false;
        o->quiet = true;
        r->tty = false;
        return RP_OK;
    }
    o->replicas = rp_replicator_replicas(r->rep);
    r->root = rp_replica_id(rp_replicator_replica(r->rep, 0)) == 0;
    if (!r->root) {
        o->quiet = true;
        r->tty = false;
    }
    if (!r->async && o->batch % o->replicas != 0)
        return RP_ERROR(RP_ERR_INVALID, "batch %d does not split across %d replicas", o->batch, o->replicas);
    int local = rp_replicator_local_replicas(r->rep);
    r->rs = calloc((size_t)local, sizeof *r->rs);
    if (!r->rs) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d replicas", local);
    r->ck = *ck;
    RP_CHECK(rp_replicator_run(r->rep, build_replica, r));
    r->ck = NULL;
    r->steps_per_epoch = rp_loader_steps_per_epoch(r->rs[0].loader);
    int64_t total = r->steps_per_epoch * o->epochs, warmup = r->steps_per_epoch * o->warmup_epochs;
    r->sched = !strcmp(o->schedule, "cosine") ? rp_schedule_cosine(o->lr, warmup, total)
                                               : rp_schedule_constant(o->lr);
    r->sched.warmup_steps = warmup;
    if (*ck) {
        int64_t n;
        const int64_t *pos = rp_checkpoint_get_i64(*ck, "train/position", &n);
        r->step = pos[2];
        r->pos_epoch = pos[0];
        r->pos_step = pos[1];
    }
    if (!r->root) return RP_OK;
    RP_CHECK(make_dirs(o->out_dir));
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
    r->metrics = fopen(path, resume ? "a" : "w");
    if (!r->metrics) rp_warn("cannot write %s (%s); continuing without metrics", path, strerror(errno));
    return RP_OK;
}

static void print_header(const run *r, bool resumed)
{
    const train_opts *o = &r->o;
    int64_t epoch, step;
    run_position(r, &epoch, &step);
    char layout[256], regime[96] = "";
    int tpr = rp_replicator_threads_per_replica(r->rep), local = rp_replicator_local_replicas(r->rep);
    const char *backend = rp_replicator_backend(r->rep);
    if (r->async) {
        char bound[32] = "unbounded";
        if (o->staleness >= 0) snprintf(bound, sizeof bound, "%d", o->staleness);
        bool ranks = strcmp(backend, "threads") != 0;
        snprintf(regime, sizeof regime, "async: %d parameter-server %s%s, staleness %s", o->ps,
                 ranks ? "rank" : "shard", o->ps > 1 ? "s" : "", bound);
    } else {
        snprintf(regime, sizeof regime, "cross-replica batch norm");
    }
    if (strcmp(backend, "threads") != 0)
        snprintf(layout, sizeof layout, "%d replicas (%d ranks x %d) x %d threads (%s, %s)", o->replicas,
                 o->replicas / local, local, tpr, backend, regime);
    else if (o->replicas > 1 || r->async)
        snprintf(layout, sizeof layout, "%d replicas x %d threads (%s, %s)", o->replicas, tpr, backend, regime);
    else
        snprintf(layout, sizeof layout, "%d threads", tpr);
    fprintf(stderr,
            "replicator train %s on %s: %lld train / %lld test images %dx%dx%d, %d classes\n"
            "  %lld parameters; batch %d, %d epochs x %lld steps; lr %g %s (warm-up %d), momentum "
            "%g%s, wd %g; augment %s; seed %llu; %s, %s kernels\n",
            o->model, r->train->name, (long long)rp_loader_samples(r->rs[0].loader), (long long)r->test->n,
            r->train->h, r->train->w, r->train->c, r->train->num_classes,
            (long long)rp_params_trainable_numel(train_model_params(&r->rs[0].model)), o->batch, o->epochs,
            (long long)r->steps_per_epoch, (double)o->lr, o->schedule, o->warmup_epochs,
            (double)o->momentum, o->nesterov ? " nesterov" : "", (double)o->weight_decay,
            o->augment ? "crop+flip" : "off", (unsigned long long)o->seed, layout,
            rp_kernels_active()->name);
    if (resumed)
        fprintf(stderr, "  resumed from %s at epoch %lld step %lld\n", o->out_dir,
                (long long)epoch + 1, (long long)step);
    fprintf(stderr, "  run directory: %s\n", o->out_dir);
}

/* After the last step of `epoch` (from 0): evaluate, report, checkpoint. */
static rp_status finish_epoch(run *r, int64_t epoch, double train_loss, int64_t steps, double seconds,
                              double *best_acc, eval_result *ev, int *epochs_done)
{
    const train_opts *o = &r->o;
    double rate = (double)steps * o->batch / seconds;
    RP_CHECK(evaluate(r, ev));
    if (ev->accuracy > *best_acc) *best_acc = ev->accuracy;
    *epochs_done = (int)epoch + 1;
    if (!o->quiet)
        fprintf(stderr, "%s  epoch %lld/%d  train loss %.4f  test loss %.4f  test acc %.2f%%  "
                "%.0f img/s  %.0fs\n", r->tty ? "\r" : "", (long long)epoch + 1, o->epochs,
                train_loss, ev->loss, 100 * ev->accuracy, rate, seconds);
    if (r->metrics) {
        fprintf(r->metrics,
                "{\"step\":%lld,\"epoch\":%lld,\"train_loss\":%.6f,\"test_loss\":%.6f,"
                "\"test_accuracy\":%.6f,\"images_per_s\":%.1f,\"lr\":%.6g}\n",
                (long long)r->step, (long long)epoch + 1, train_loss, ev->loss, ev->accuracy, rate,
                (double)rp_schedule_lr(&r->sched, r->step - 1));
        fflush(r->metrics);
    }
    return save_checkpoint(r);
}

static rp_status train_loop(run *r, double *best_acc, eval_result *ev, int *epochs_done)
{
    const train_opts *o = &r->o;
    double t_epoch = rp_now_s(), t_print = 0, loss_sum = 0;
    int64_t loss_n = 0, epoch, pos_step;
    rp_loader_position(r->rs[0].loader, &epoch, &pos_step);
    *epochs_done = (int)epoch;
    while (epoch < o->epochs) {
        if (r->stop || (o->max_steps && r->step >= o->max_steps)) return RP_ERR_INTERRUPTED;
        RP_CHECK(rp_replicator_run(r->rep, step_replica, r));
        rp_batch b = r->rs[0].batch;
        double l = 0, stop = 0;
        RP_CHECK(rp_replicator_result(r->rep, "loss", &l));
        RP_CHECK(rp_replicator_result(r->rep, "stop", &stop));
        r->stop = (int)stop;
        rp_debug("step %lld loss %.7f", (long long)r->step, l);
        r->step++;
        loss_sum += l;
        loss_n++;
        double now = rp_now_s();
        if (r->tty && (now - t_print > 0.25 || b.end_of_epoch)) {
            double rate = (double)loss_n * o->batch / (now - t_epoch);
            double left = (double)(r->steps_per_epoch * o->epochs - r->step) * o->batch / rate;
            char eta[32];
            format_duration(left, eta, sizeof eta);
            fprintf(stderr, "\r  epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  ETA %s  ",
                    (long long)b.epoch + 1, o->epochs, (long long)b.step + 1,
                    (long long)r->steps_per_epoch, loss_sum / (double)loss_n,
                    (double)rp_schedule_lr(&r->sched, r->step - 1), rate, eta);
            t_print = now;
        }
        /* Not a terminal: a plain line about every tenth of an epoch instead of the live one. */
        int64_t every = r->steps_per_epoch >= 10 ? r->steps_per_epoch / 10 : 1;
        if (!r->tty && !o->quiet && (b.step + 1) % every == 0 && !b.end_of_epoch)
            fprintf(stderr, "  epoch %lld/%d  step %lld/%lld  loss %.4f  %.0f img/s\n",
                    (long long)b.epoch + 1, o->epochs, (long long)b.step + 1,
                    (long long)r->steps_per_epoch, loss_sum / (double)loss_n,
                    (double)loss_n * o->batch / (now - t_epoch));
        if (r->metrics && r->step % 50 == 0)
            fprintf(r->metrics, "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g}\n",
                    (long long)r->step, (long long)b.epoch + 1, (double)l,
                    (double)rp_schedule_lr(&r->sched, r->step - 1));
        if (!b.end_of_epoch) continue;

        RP_CHECK(finish_epoch(r, b.epoch, loss_sum / (double)loss_n, loss_n, rp_now_s() - t_epoch,
                              best_acc, ev, epochs_done));
        epoch = b.epoch + 1;
        loss_sum = 0;
        loss_n = 0;
        t_epoch = rp_now_s();
    }
    return RP_OK;
}

/*
 * Asynchronous training. One run per epoch (or until a signal or --max-steps): every replica
 * claims the epoch's batches one at a time from the shared queue, so a fast replica takes more
 * of them than a slow one and the epoch still covers each batch once; its optimizer step pushes
 * the gradients to the parameter servers and pulls fresh values. No replica waits for another
 * until the run ends. Batch s of an epoch is the one sync training uses for its step s, with
 * the same learning rate, so the regimes see the same examples in the same number of updates.
 */
static rp_status async_epoch_replica(rp_replica *rep, void *arg)
{
    run *r = arg;
    const train_opts *o = &r->o;
    replica_state *s = rp_replica_user(rep);
    int64_t start = r->pos_step, end = r->steps_per_epoch, done = 0;
    if (o->max_steps && r->step + (end - start) > o->max_steps) end = start + (o->max_steps - r->step);
    bool lead = rp_replica_local_index(rep) == 0 && r->root && !o->quiet;
    double loss_sum = 0, t_start = rp_now_s(), t_print = 0;
    rp_status status = RP_OK;
    while (!stop_signal && !__atomic_load_n(&r->failed, __ATOMIC_RELAXED)) {
        int64_t ticket;
        RP_TRY(rp_replica_claim(rep, &ticket));
        int64_t step = start + ticket;
        if (step >= end) break;
        double started = rp_now_s();
        int64_t le, ls;
        rp_loader_position(s->loader, &le, &ls);
        if (le != r->pos_epoch || ls != step) RP_TRY(rp_loader_seek(s->loader, r->pos_epoch, step));
        RP_TRY(rp_loader_next(s->loader, &s->batch));
        float lr = rp_schedule_lr(&r->sched, r->step + ticket), l;
        rp_tape_reset(rp_replica_tape(rep)); /* one run takes many steps here */
        RP_TRY(train_batch(r, rep, s, lr, started, &l));
        done++;
        loss_sum += l;
        /* This process's first replica shows the progress of all: the batches claimed so far. */
        double now = rp_now_s();
        if (lead && (r->tty ? now - t_print > 0.25 : (ticket + 1) % (r->steps_per_epoch / 10 + 1) == 0)) {
            double rate = (double)(ticket + 1) * o->batch / (now - t_start);
            fprintf(stderr, r->tty ? "\r  epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  "
                                   : "  epoch %lld/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s\n",
                    (long long)r->pos_epoch + 1, o->epochs, (long long)step + 1,
                    (long long)r->steps_per_epoch, loss_sum / (double)done, (double)lr, rate);
            t_print = now;
        }
    }
cleanup:
    if (status != RP_OK) __atomic_store_n(&r->failed, 1, __ATOMIC_RELAXED);
    else {
        RP_CHECK(rp_replica_report(rep, "steps", (double)done, RP_SUM));
        RP_CHECK(rp_replica_report(rep, "loss_sum", loss_sum, RP_SUM));
        RP_CHECK(rp_replica_report(rep, "stop", (double)stop_signal, RP_MAX));
    }
    return status;
}

/*
 * After the pushes of a run: every replica takes the servers' values (and replica 0's optimizer
 * the slots, for the checkpoint), and the replicas' batch-norm statistics, which each kept for
 * itself, are averaged, so the replicas evaluate and save one model.
 */
static rp_status settle_replica(rp_replica *rep, void *arg)
{
    replica_state *s = rp_replica_user(rep);
    rp_params *p = train_model_params(&s->model);
    RP_CHECK(rp_replica_optimizer_fetch(rep, s->opt));
    int64_t trainable = rp_params_trainable_numel(p), buffers = rp_params_numel(p) - trainable;
    if (rp_replica_count(rep) > 1 && buffers > 0) {
        float *v = rp_params_data(p) + trainable;
        RP_CHECK(rp_all_reduce(rep, v, v, buffers, RP_F32, RP_MEAN));
    }
    return RP_OK;
}

static rp_status train_async(run *r, double *best_acc, eval_result *ev, int *epochs_done)
{
    const train_opts *o = &r->o;
    *epochs_done = (int)r->pos_epoch;
    double seconds = 0, loss_sum = 0;
    int64_t steps_epoch = 0;
    while (r->pos_epoch < o->epochs) {
        if (r->stop || (o->max_steps && r->step >= o->max_steps)) return RP_ERR_INTERRUPTED;
        double t0 = rp_now_s(), steps = 0, losses = 0, stop = 0;
        RP_CHECK(rp_replicator_run(r->rep, async_epoch_replica, r));
        RP_CHECK(rp_replicator_result(r->rep, "steps", &steps));
        RP_CHECK(rp_replicator_result(r->rep, "loss_sum", &losses));
        RP_CHECK(rp_replicator_result(r->rep, "stop", &stop));
        RP_CHECK(rp_replicator_run(r->rep, settle_replica, r));
        seconds += rp_now_s() - t0;
        r->stop = (int)stop;
        r->step += (int64_t)steps;
        r->pos_step += (int64_t)steps;
        steps_epoch += (int64_t)steps;
        loss_sum += losses;
        if (r->metrics && steps > 0)
            fprintf(r->metrics, "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g}\n", (long long)r->step,
                    (long long)r->pos_epoch + 1, losses / steps, (double)rp_schedule_lr(&r->sched, r->step - 1));
        if (r->pos_step < r->steps_per_epoch) continue;
        /* The checkpoint resumes at the next epoch's first batch. */
        r->pos_epoch++;
        r->pos_step = 0;
        RP_CHECK(finish_epoch(r, r->pos_epoch - 1, steps_epoch ? loss_sum / (double)steps_epoch : 0,
                              steps_epoch, seconds, best_acc, ev, epochs_done));
        seconds = loss_sum = 0;
        steps_epoch = 0;
    }
    return RP_OK;
}

/*
 * Every process prints its own error, replica 0's or not: it may be the one that explains the
 * others'. Under mpirun the lines of all ranks meet on one terminal, so each says whose it is.
 */
static void report_error(const run *r)
{
    char who[128] = "";
    if (rp_comm_mpi_launched() && rp_log_prefix(who, sizeof who - 1) > 0) strcat(who, " ");
    fprintf(stderr, "%s%sreplicator train: error: %s\n", r->tty ? "\n" : "", who, rp_last_error());
}

int rp_cli_train(int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    const char *resume = NULL;
    int rc = train_opts_parse(argc, argv, &r.o, &resume);
    if (rc) return rc == 1 ? 0 : rc;
    r.tty = isatty(STDERR_FILENO) && !r.o.quiet;
    r.root = true;
    take_signals();

    rp_checkpoint *ck = NULL;
    rp_status status = setup(&r, resume, argc, argv, &ck);
    rp_checkpoint_destroy(ck);
    if (status == RP_OK && r.server) {
        /* A parameter server rank: it serves until every replica's process is done. */
        status = rp_replicator_serve(r.rep);
        if (status != RP_OK) {
            report_error(&r);
            rp_comm_mpi_abort(1);
        }
        rp_replicator_destroy(r.rep);
        rp_dataset_destroy(r.test);
        rp_dataset_destroy(r.train);
        return status == RP_OK ? 0 : 1;
    }
    double t_start = rp_now_s(), best_acc = 0;
    eval_result ev = {0, 0, 0, 0, 0};
    int epochs_done = 0;
    int64_t first_step = r.step;
    if (status == RP_OK) {
        if (!r.o.quiet) print_header(&r, resume != NULL);
        install_handlers(true);
        status = r.async ? train_async(&r, &best_acc, &ev, &epochs_done)
                         : train_loop(&r, &best_acc, &ev, &epochs_done);
        install_handlers(false);
    }
    bool interrupted = status == RP_ERR_INTERRUPTED;
    if (interrupted) {
        status = save_checkpoint(&r);
        int64_t epoch, step;
        run_position(&r, &epoch, &step);
        if (status == RP_OK && !r.o.quiet) {
            if (r.o.no_checkpoint)
                fprintf(stderr, "%s  stopped at epoch %lld step %lld; nothing saved (--no-checkpoint)\n",
                        r.tty ? "\n" : "", (long long)epoch + 1, (long long)step);
            else
                fprintf(stderr, "%s  stopped at epoch %lld step %lld (%s); resume with: replicator "
                        "train --resume %s\n", r.tty ? "\n" : "", (long long)epoch + 1,
                        (long long)step, r.stop ? "signal" : "--max-steps", r.o.out_dir);
        }
    }
    if (!r.root) {
        /* Only the process of replica 0 reports the run. */
    } else if (status == RP_OK && !interrupted && r.step == first_step) {
        printf("%s: nothing to do: the run in %s already completed %d epochs (extend it with "
               "--epochs)\n", r.o.model, r.o.out_dir, r.o.epochs);
    } else if (status == RP_OK && !interrupted) {
        char total[32];
        format_duration(rp_now_s() - t_start, total, sizeof total);
        printf("%s on %s: test accuracy %.2f%% (best %.2f%%) after %d epochs (%lld steps this run), %s\n",
               r.o.model, r.train->name, 100 * ev.accuracy, 100 * best_acc, epochs_done,
               (long long)(r.step - first_step), total);
    }
    if (r.metrics) fclose(r.metrics);
    bool reported = false;
    if (status != RP_OK && rp_comm_mpi_launched()) {
        /*
         * Under mpirun every rank reports its own error (the others are quiet otherwise), then
         * ends the whole job: a peer may be dead or stopped, and the clean-up below or
         * MPI_Finalize at exit could wait for it forever. Nothing is saved on this path: the
         * last checkpoint is the last one an epoch or an agreed stop wrote.
         */
        report_error(&r);
        reported = true;
        rp_comm_mpi_abort(1); /* returns where MPI is not running (an error before it started) */
    }
    if (r.rep) {
        rp_status teardown = rp_replicator_run(r.rep, destroy_replica, &r);
        if (teardown != RP_OK && status == RP_OK) status = teardown;
    }
    rp_replicator_destroy(r.rep);
    free(r.rs);
    rp_dataset_destroy(r.test);
    rp_dataset_destroy(r.train);
    if (status != RP_OK) {
        if (!reported) report_error(&r);
        rp_comm_mpi_abort(1); /* a clean-up error under mpirun: a peer may still wait for this rank */
        return 1;
    }
    return interrupted && r.stop ? 128 + r.stop : 0;
}
