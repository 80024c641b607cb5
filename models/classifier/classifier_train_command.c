/*
 * classifier_train_command.c - `replicator train [resnet20|resnet18|resnet50|mlp]`: options in,
 * the classifier (classifier.h) trained by the shared trainer (replicator/trainer.h), the
 * header and the summary out.
 *
 * The options come from the command line, or from a run's checkpoint when
 * resuming (a few may change then). The trainer does the rest: the run
 * directory, the loop over global batches in either regime, evaluation and
 * checkpoints after each epoch, the agreed stop on Ctrl-C/SIGTERM, resume.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/classifier/classifier_command.h"

/*
 * Options that may change on --resume (the table's RESUME rows, when given) and those that are
 * never saved (this invocation's); the rest come from the checkpoint.
 */
static void apply_resume_overrides(train_opts *o, const train_opts *cli)
{
    const rp_option *table = train_opts_table();
    const rp_options_given *given = &cli->given;
    /* Reductions depend on the team size: a different count resumes correctly, not bit-exactly. */
    if (rp_options_was_given(table, given, "--threads") && cli->threads != o->threads)
        rp_warn("resuming on %d threads, the run used %d: results will differ in the last bits",
                cli->threads, o->threads);
    if (rp_options_was_given(table, given, "--replicas") && cli->replicas != o->replicas)
        rp_warn("resuming on %d replicas, the run used %d: the same global batch, results "
                "will differ in the last bits",
                cli->replicas, o->replicas);
    if (rp_options_was_given(table, given, "--micro-batches") &&
        cli->micro_batches != o->micro_batches)
        rp_warn("resuming with %d micro-batches, the run used %d: batch norm's "
                "statistics cover other examples, results will differ",
                cli->micro_batches, o->micro_batches);
    /* A layout: the checkpoint holds the whole model, whatever the stages. */
    bool stages = rp_options_was_given(table, given, "--model-parallel");
    rp_options_apply_resume(table, o, cli, given);
    if (stages && o->model_parallel < 2 && !rp_options_was_given(table, given, "--micro-batches"))
        o->micro_batches = 1;
    /* Where the replicas run is this invocation's, never the saved run's. */
    o->replicas_given = cli->replicas_given;
    o->given = cli->given;
}

/*
 * The options (from the checkpoint when resuming), the classifier (its datasets) and the trainer
 * (the replicator and every replica's model, optimizer and loader).
 */
static rp_status setup(train_opts *o, const char *resume, rp_classifier **clf, rp_trainer **t,
                       rp_classifier_plan **plan, plan_check **pc)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL;
    if (resume) {
        const char *saved;
        RP_TRY(rp_trainer_load_run(resume, &ck, &saved));
        train_opts cli = *o;
        RP_TRY(train_opts_from_json(o, saved));
        apply_resume_overrides(o, &cli);
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
    }
    rp_kernels_set_threads(o->threads);
    rp_trainer_config tc = rp_trainer_config_default();
    RP_TRY(train_runtime_config(o, &tc.runtime));
    if (tc.runtime.backend == RP_BACKEND_MPI) {
        /* Every rank's options the same, before the data loads (a data directory and the threads
           may differ by host). */
        static const char *const local[] = {"data_dir", "threads", "threads_per_replica", NULL};
        RP_TRY(train_agree_options(train_opts_to_json(o), local, o->out_dir, o->max_steps,
                                   o->comm_timeout));
    }
    rp_classifier_config cc;
    train_opts_classifier(o, &cc);
    RP_TRY(rp_classifier_create(clf, &cc));
    const rp_trainer_model *model = rp_classifier_trainer_model();
    void *ctx = *clf;
    if (o->plan_check) {
        /* The plan (printed before anything trains, below); the wrapper measures the first steps.
         */
        RP_TRY(plan_for_run(plan, o, &tc.runtime, *clf));
        RP_TRY(plan_check_create(pc, *plan, model, ctx,
                                 o->replicas * (o->model_parallel > 1 ? o->model_parallel : 1) *
                                     (o->tensor_parallel > 1 ? o->tensor_parallel : 1),
                                 (int)o->max_steps));
        model = plan_check_model(*pc);
        ctx = *pc;
    }

    tc.run_dir = o->out_dir;
    tc.run_dir_exact = o->out_given;
    tc.force = o->force;
    tc.resume = ck;
    tc.epochs = o->epochs;
    tc.max_steps = o->max_steps;
    tc.lr = o->lr;
    tc.schedule = !strcmp(o->schedule, "cosine") ? RP_SCHED_COSINE : RP_SCHED_CONSTANT;
    tc.warmup_epochs = o->warmup_epochs;
    tc.no_checkpoint = o->no_checkpoint;
    tc.checkpoint_shards = o->checkpoint_shards;
    tc.checkpoint_background = o->background_save;
    tc.checkpoint_per_worker = o->per_worker_save;
    tc.quiet = o->quiet;
    tc.batch = o->batch;
    tc.rate_unit = "img/s";
    tc.rate_key = "images_per_s";
    tc.slow_replica = o->slow_replica;
    tc.slow_factor = o->slow_factor;
    tc.tensorboard_dir = o->tensorboard;
    tc.tensorboard_writer = rp_tensorboard_scalar_writer();
    tc.trace = o->trace;
    RP_TRY(rp_trainer_create(t, &tc, model, ctx));
    if (rp_trainer_is_server(*t)) {
        o->quiet = true;
        goto cleanup;
    }
    /* What the checkpoints record: the job's replica count, the directory the trainer chose. */
    o->replicas = rp_replicator_replicas(rp_trainer_replicator(*t));
    if (!rp_trainer_is_root(*t)) o->quiet = true;
    if (*plan && rp_trainer_is_root(*t)) {
        plan_print(stdout, *plan, o, *clf, false);
        fflush(stdout);
    }
    snprintf(o->out_dir, sizeof o->out_dir, "%s", rp_trainer_run_dir(*t));
    config = train_opts_to_json(o);
    if (!config) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot serialise the configuration");
        goto cleanup;
    }
    RP_TRY(rp_trainer_set_config_json(*t, config));
cleanup:
    free(config);
    rp_checkpoint_destroy(ck);
    return status;
}

/*
 * A replica cut into stages: which units each stage holds and its share of the forward FLOPs, as
 * the workers built them (rp_resnet_partition); and the whole model's trainable parameters.
 */
static int64_t describe_stages(const train_opts *o, const rp_classifier *clf, char *line,
                               size_t size)
{
    rp_resnet_kind kind;
    line[0] = 0;
    if (!rp_resnet_kind_parse(o->model, &kind)) return 0;
    rp_resnet_config rc = rp_resnet_config_default(kind);
    rc.in_channels = clf->train->c;
    rc.classes = clf->train->num_classes;
    int bounds[RP_RESNET_MAX_UNITS + 1], h = clf->train->h, w = clf->train->w;
    if (rp_resnet_partition(&rc, h, w, o->model_parallel, bounds) != RP_OK) return 0;
    int64_t params = 0;
    double total = 0, flops[RP_RESNET_MAX_UNITS + 1] = {0};
    char first[RP_RESNET_MAX_UNITS + 1][32], last[RP_RESNET_MAX_UNITS + 1][32];
    for (int s = 0; s < o->model_parallel; s++) {
        for (int u = bounds[s]; u < bounds[s + 1]; u++) {
            rp_resnet_unit_info info;
            if (rp_resnet_unit_info_get(&rc, h, w, u, &info) != RP_OK) return 0;
            params += info.params;
            flops[s] += info.flops;
            total += info.flops;
            if (u == bounds[s]) snprintf(first[s], sizeof first[s], "%s", info.name);
            snprintf(last[s], sizeof last[s], "%s", info.name);
        }
    }
    size_t n = (size_t)snprintf(line, size, "  stages (share of the forward FLOPs):");
    for (int s = 0; s < o->model_parallel && n < size; s++)
        n += (size_t)snprintf(line + n, size - n, "%s %d: %s%s%s (%.0f%%)", s ? ";" : "", s,
                              first[s], strcmp(first[s], last[s]) ? " .. " : "",
                              strcmp(first[s], last[s]) ? last[s] : "", 100 * flops[s] / total);
    return params;
}

static void print_header(const train_opts *o, const rp_classifier *clf, const rp_trainer *t,
                         bool resumed)
{
    rp_replicator *rep = rp_trainer_replicator(t);
    rp_trainer_progress p = rp_trainer_get_progress(t);
    const void *state = rp_trainer_state(t);
    char layout[320], regime[176] = "";
    int tpr = rp_replicator_threads_per_replica(rep), local = rp_replicator_local_replicas(rep);
    const char *backend = rp_replicator_backend(rep);
    bool async = !strcmp(o->regime, "async"), groups = o->sync_groups > 1;
    char bound[32] = "unbounded";
    if (o->staleness >= 0) snprintf(bound, sizeof bound, "%d", o->staleness);
    /* The whole model's parameters (local replica 0 may hold one stage of it). */
    int64_t params = rp_params_trainable_numel(rp_classifier_state_params(state));
    char stages[512] = "";
    int tp = o->tensor_parallel > 1 ? o->tensor_parallel : 1;
    if (o->model_parallel > 1 || tp > 1) {
        int64_t whole = describe_stages(o, clf, stages, sizeof stages);
        if (whole > 0) params = whole;
        if (o->model_parallel < 2) stages[0] = 0; /* one stage: nothing to say */
    }
    if (async) {
        bool ranks = strcmp(backend, "threads") != 0;
        snprintf(regime, sizeof regime, "async: %d parameter-server %s%s, staleness %s", o->ps,
                 ranks ? "rank" : "shard", o->ps > 1 ? "s" : "", bound);
    } else if (groups) {
        snprintf(regime, sizeof regime,
                 "batch norm within a group; groups async: %d parameter-server %s%s, "
                 "staleness %s%s",
                 o->ps, strcmp(backend, "threads") != 0 ? "rank" : "shard", o->ps > 1 ? "s" : "",
                 bound, o->grad_dtype == RP_BF16 ? "; grad all-reduce in bf16" : "");
    } else {
        /* The gradients' type on the wire, where there is a wire (sync with replicas, or the
           tensor-parallel backward's all-reduces). */
        bool tp = o->tensor_parallel > 1, wired = o->grad_dtype == RP_BF16;
        const char *wire = !wired || (o->replicas < 2 && !tp) ? ""
                           : o->replicas < 2 ? ", tensor-parallel grad all-reduce in bf16"
                           : o->zero         ? ", grad reduce-scatter in bf16"
                                             : ", grad all-reduce in bf16";
        snprintf(regime, sizeof regime, "%s%s%s",
                 o->replicas > 1 ? "cross-replica batch norm" : "one replica",
                 o->zero == 3   ? ", ZeRO-3"
                 : o->zero == 2 ? ", ZeRO-2"
                 : o->zero      ? ", ZeRO-1"
                                : "",
                 wire);
        if (o->hsdp > 1)
            snprintf(regime + strlen(regime), sizeof regime - strlen(regime),
                     ", HSDP: sharded in groups of %d", o->hsdp);
    }
    if (o->model_parallel > 1 || tp > 1) {
        /* The mesh: replicas on the data axis, each a pipeline of stages on the pipe axis, each
           stage split over the model axis. */
        char mesh[128] = "";
        size_t n = 0;
        if (o->model_parallel > 1) {
            char schedule[64] = "one batch at a time";
            if (o->micro_batches > 1)
                snprintf(schedule, sizeof schedule, "%s over %d micro-batches", o->pipeline,
                         o->micro_batches);
            n += (size_t)snprintf(mesh + n, sizeof mesh - n, " x %d stages (%s)", o->model_parallel,
                                  schedule);
        }
        if (tp > 1 && n < sizeof mesh)
            snprintf(mesh + n, sizeof mesh - n, " x %d tensor-parallel", tp);
        int workers = o->replicas * (o->model_parallel > 1 ? o->model_parallel : 1) * tp;
        char where[64] = "";
        if (strcmp(backend, "threads") != 0)
            snprintf(where, sizeof where, " in %d ranks x %d", workers / local, local);
        snprintf(layout, sizeof layout, "%d replica%s%s = %d workers%s x %d threads (%s, %s)",
                 o->replicas, o->replicas > 1 ? "s" : "", mesh, workers, where, tpr, backend,
                 regime);
    } else if (groups) {
        char where[64] = "";
        if (strcmp(backend, "threads") != 0)
            snprintf(where, sizeof where, " (%d ranks x %d)", o->replicas / local, local);
        snprintf(layout, sizeof layout,
                 "%d replicas in %d sync groups of %d%s x %d threads (%s, %s)", o->replicas,
                 o->sync_groups, o->replicas / o->sync_groups, where, tpr, backend, regime);
    } else if (strcmp(backend, "threads") != 0)
        snprintf(layout, sizeof layout, "%d replicas (%d ranks x %d) x %d threads (%s, %s)",
                 o->replicas, o->replicas / local, local, tpr, backend, regime);
    else if (o->replicas > 1 || async)
        snprintf(layout, sizeof layout, "%d replicas x %d threads (%s, %s)", o->replicas, tpr,
                 backend, regime);
    else
        snprintf(layout, sizeof layout, "%d threads", tpr);
    fprintf(stderr,
            "replicator train %s on %s: %lld train / %lld test images %dx%dx%d, %d classes\n"
            "  %lld parameters; batch %d, %d epochs x %lld steps; lr %g %s (warm-up %d), momentum "
            "%g%s, wd %g; augment %s; seed %llu; %s, %s kernels\n",
            o->model, clf->train->name, (long long)rp_classifier_state_samples(state),
            (long long)clf->test->n, clf->train->h, clf->train->w, clf->train->c,
            clf->train->num_classes, (long long)params, o->batch, o->epochs,
            (long long)rp_trainer_steps_per_epoch(t), (double)o->lr, o->schedule, o->warmup_epochs,
            (double)o->momentum, o->nesterov ? " nesterov" : "", (double)o->weight_decay,
            o->augment ? (!strcmp(o->dataset, "folder") ? "RandomResizedCrop+flip" : "crop+flip")
                       : "off",
            (unsigned long long)o->seed, layout, rp_kernels_name());
    if (stages[0]) fprintf(stderr, "%s\n", stages);
    rp_trainer_print_precision(o->precision, NULL);
    /* This replica's optimizer state (replica 0's shard, the largest, under ZeRO). */
    const rp_optimizer *opt = rp_classifier_state_optimizer(state);
    size_t held = rp_optimizer_state_bytes(opt),
           whole = opt ? (size_t)rp_optim_slots(rp_optimizer_config(opt)) *
                             (size_t)rp_params_trainable_numel(rp_classifier_state_params(state)) *
                             sizeof(float)
                       : 0;
    fprintf(stderr, "  optimizer state: %zu bytes %s (%.2f MiB)", held,
            o->model_parallel > 1 || tp > 1 ? "on worker 0 (its stage and shard)" : "per replica",
            (double)held / (1 << 20));
    if (held != whole)
        fprintf(stderr, "; ZeRO-%d: %zu bytes unsharded", o->zero ? o->zero : 1, whole);
    fprintf(stderr, "\n");
    if (resumed)
        fprintf(stderr, "  resumed from %s at epoch %lld step %lld\n", o->out_dir,
                (long long)p.epoch + 1, (long long)p.step);
    /* The configuration's echo, from the option table: what differs from the model's defaults. */
    static train_opts defaults; /* static: a few KiB of paths */
    train_opts_default(&defaults, o->model);
    char echo[1024];
    rp_options_describe(train_opts_table(), o, &defaults, echo, sizeof echo);
    if (echo[0]) fprintf(stderr, "  options: %s\n", echo);
    fprintf(stderr, "  run directory: %s\n", o->out_dir);
}

static void format_duration(double s, char *buf, size_t size)
{
    int total = s > 0 ? (int)(s + 0.5) : 0;
    if (total >= 3600)
        snprintf(buf, size, "%dh%02dm", total / 3600, total / 60 % 60);
    else
        snprintf(buf, size, "%dm%02ds", total / 60, total % 60);
}

/* `replicator train [resnet20|resnet18|resnet50|mlp] ...`: the classifiers. */
int train_classifier_main(int argc, char **argv)
{
    train_opts o;
    const char *resume = NULL;
    int rc = train_opts_parse(argc, argv, &o, &resume);
    if (rc) return rc == 1 ? 0 : rc;
    rp_trainer_catch_signals(); /* first: every thread started later inherits the blocked signals */

    rp_classifier *clf = NULL;
    rp_trainer *t = NULL;
    rp_classifier_plan *plan = NULL;
    plan_check *pc = NULL;
    double t_start = rp_now_s();
    rp_status status = setup(&o, resume, &clf, &t, &plan, &pc);
    bool tty = isatty(STDERR_FILENO) && !o.quiet;
    if (status == RP_OK && rp_trainer_is_server(t)) {
        /* A parameter server rank: it serves until every replica's process is done. */
        status = rp_trainer_run(t);
        if (status != RP_OK) {
            rp_trainer_report_error(TRAIN_CMD, false);
            rp_comm_mpi_abort(1);
        }
        rp_trainer_destroy(t);
        rp_classifier_destroy(clf);
        return status == RP_OK ? 0 : 1;
    }
    if (status == RP_OK) {
        if (!o.quiet) print_header(&o, clf, t, resume != NULL);
        t_start = rp_now_s();
        status = rp_trainer_run(t);
    }
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (status == RP_OK && pc) {
        int flags = plan_check_report(pc, stdout);
        if (flags)
            status =
                RP_ERROR(RP_ERR_MISMATCH, "--plan-check: %d difference%s from the plan (above)",
                         flags, flags > 1 ? "s" : "");
    }
    if (status == RP_OK && p.stopped && !o.quiet) {
        if (o.no_checkpoint)
            fprintf(stderr,
                    "%s  stopped at epoch %lld step %lld; nothing saved (--no-checkpoint)\n",
                    tty ? "\n" : "", (long long)p.epoch + 1, (long long)p.step);
        else
            fprintf(stderr,
                    "%s  stopped at epoch %lld step %lld (%s); resume with: replicator "
                    "train --resume %s\n",
                    tty ? "\n" : "", (long long)p.epoch + 1, (long long)p.step,
                    p.stop_signal ? "signal" : "--max-steps", o.out_dir);
    }
    if (status != RP_OK || !rp_trainer_is_root(t)) {
        /* Only the process of replica 0 reports the run. */
    } else if (p.finished && p.steps_this_run == 0) {
        printf("%s: nothing to do: the run in %s already completed %d epochs (extend it with "
               "--epochs)\n",
               o.model, o.out_dir, o.epochs);
    } else if (p.finished) {
        char total[32];
        format_duration(rp_now_s() - t_start, total, sizeof total);
        printf("%s on %s: test accuracy %.2f%% (best %.2f%%) after %lld epochs (%lld steps this "
               "run), %s\n",
               o.model, clf->train->name, 100 * clf->last_accuracy, 100 * clf->best_accuracy,
               (long long)p.epoch, (long long)p.steps_this_run, total);
    }
    if (clf && t && rp_trainer_is_root(t)) {
        int64_t bad = rp_dataset_bad_files(clf->train) + rp_dataset_bad_files(clf->test);
        if (bad)
            fprintf(stderr,
                    "  %lld image file%s could not be decoded and %s skipped (--skip-bad; "
                    "the warnings name them)\n",
                    (long long)bad, bad > 1 ? "s" : "", bad > 1 ? "were" : "was");
    }
    bool reported = false;
    if (status != RP_OK && rp_comm_mpi_launched()) {
        /*
         * Under mpirun every rank reports its own error (the others are quiet otherwise), then
         * ends the whole job: a peer may be dead or stopped, and the clean-up below or
         * MPI_Finalize at exit could wait for it forever. Nothing is saved on this path: the
         * last checkpoint is the last one an epoch or an agreed stop wrote.
         */
        rp_trainer_report_error(TRAIN_CMD, tty);
        reported = true;
        rp_comm_mpi_abort(1); /* returns where MPI is not running (an error before it started) */
    }
    if (status != RP_OK && !reported) {
        rp_trainer_report_error(TRAIN_CMD, tty);
        reported = true;
    }
    rp_status teardown = rp_trainer_destroy(t);
    plan_check_destroy(pc);
    rp_classifier_plan_destroy(plan);
    rp_classifier_destroy(clf);
    if (teardown != RP_OK && status == RP_OK) status = teardown;
    if (status != RP_OK) {
        if (!reported) rp_trainer_report_error(TRAIN_CMD, tty);
        rp_comm_mpi_abort(
            1); /* a clean-up error under mpirun: a peer may still wait for this rank */
        return 1;
    }
    return p.stopped && p.stop_signal ? 128 + p.stop_signal : 0;
}
