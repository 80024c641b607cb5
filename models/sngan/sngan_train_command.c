/*
 * sngan_train_command.c - `replicator train sngan`: the class-conditional SN-GAN (this
 * folder) trained by the shared trainer, data-parallel on replicas.
 *
 * One trainer step is one generator iteration (n_dis discriminator steps and
 * one generator step). The options are stored in every checkpoint, so
 * `--resume`, `replicator sample` and `replicator eval` need only the run's
 * directory. With --judge (a ResNet trained by `replicator train resnet20
 * --image-size 32`) the run is scored every --eval-every iterations.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/sngan/sngan_command.h"

void sngan_opts_default(sngan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->g = rp_sngan_config_default();
    snprintf(o->precision, sizeof o->precision, "f32");
    o->g.lr_g = o->g.lr_d = SNGAN_DEFAULT_LR;
    o->grad_dtype = RP_F32;
    o->g.sample_every = 250;
    o->g.seed = 1;
    o->iters = SNGAN_DEFAULT_ITERS;
    o->checkpoint_every = 500;
    o->eval_every = 0;
    o->eval_samples = 10000;
    o->metrics_every = 10;
    snprintf(o->backend, sizeof o->backend, "auto");
}

#define T      sngan_opts
#define SAVED  RP_OPT_SAVED
#define RESUME RP_OPT_RESUME
#define OLD    (RP_OPT_SAVED | RP_OPT_OPTIONAL) /* saved; older runs lack it */

static const int wire_dtypes[] = {RP_F32, RP_BF16};

/*
 * The options of `replicator train sngan`: one row each gives the parser, the help, the
 * checkpoint's JSON and what a --resume takes from the command line (RESUME; the other options
 * given with --resume are the run's, as they always were).
 */
static const rp_option sngan_table[] = {
    RP_OPT_SECTION("data:"),
    RP_OPT_CHOICE(T, g.dataset, "--dataset", "D", "fashion-mnist|mnist|cifar10", SAVED,
                  "fashion-mnist (default; padded to 32x32), mnist or cifar10"),
    {.type = RP_OPTION_PATH,
     .name = "--data",
     .meta = "DIR",
     .key = "data_dir",
     .offset = offsetof(T, g.data_dir),
     .size = sizeof(((T *)0)->g.data_dir),
     .flags = SAVED | RESUME,
     .help = "dataset directory (default $RP_DATA_DIR or\n"
             "/usr/share/datasets/fashion-mnist)"},
    RP_OPT_INT64(T, g.limit, "--limit", "N", 1, 1LL << 40, SAVED | RP_OPT_ZERO_OK,
                 "train on the first N images only"),
    RP_OPT_SECTION("model:"),
    RP_OPT_INT(T, g.ch_g, "--ch-g", "N", 1, 4096, SAVED, "generator width (default 32)"),
    RP_OPT_INT(T, g.ch_d, "--ch-d", "N", 1, 4096, SAVED, "discriminator width (default 32)"),
    RP_OPT_INT(T, g.z_dim, "--z-dim", "N", 1, 4096, SAVED, "latent size (default 128)"),
    /* Filled in from the dataset (rp_sngan_create), saved for sample and eval. */
    RP_OPT_SAVED_INT(T, g.classes, "classes", 1, 256),
    RP_OPT_SAVED_INT(T, g.h, "h", 1, 4096),
    RP_OPT_SAVED_INT(T, g.w, "w", 1, 4096),
    RP_OPT_SAVED_INT(T, g.c, "c", 1, 4),
    RP_OPT_SECTION("optimisation:"),
    RP_OPT_INT(T, g.d_batch, "--d-batch", "N", 1, 1 << 20, SAVED,
               "real images per discriminator step, global (default 64)"),
    RP_OPT_INT(T, g.g_batch, "--g-batch", "N", 1, 1 << 20, SAVED,
               "fakes per generator step, global (default 128)"),
    RP_OPT_INT(T, g.accum, "--accum", "N", 1, 1024, SAVED,
               "split each step's batch into N micro-batches whose gradients\n"
               "add up (larger batches than memory or replicas hold; default 1)"),
    RP_OPT_INT(T, g.n_dis, "--n-dis", "N", 1, 100, SAVED,
               "discriminator steps per iteration (default 5)"),
    RP_OPT_FLOAT(T, g.lr_g, "--lr-g", "X", 0, 1, SAVED,
                 "the generator's Adam rate (default 4e-04), decayed linearly to 0"),
    RP_OPT_FLOAT(T, g.lr_d, "--lr-d", "X", 0, 1, SAVED,
                 "the discriminator's (default 4e-04), decayed linearly to 0"),
    RP_OPT_FLOAT(T, g.beta1, "--beta1", "X", 0, 0.999999, SAVED, "Adam's beta1 (default 0)"),
    RP_OPT_FLOAT(T, g.beta2, "--beta2", "X", 0, 0.999999, SAVED, "Adam's beta2 (default 0.9)"),
    RP_OPT_SECTION("run:"),
    RP_OPT_UINT64(T, g.seed, "--seed", "N", 0, 0x7fffffff, SAVED, "random seed (default 1)"),
    RP_OPT_INT64(T, g.sample_every, "--sample-every", "N", 0, 100000000, SAVED,
                 "iterations between sample grids (default 250; 0: never)"),
    RP_OPT_INT64(T, iters, "--iters", "N", 1, 100000000, SAVED | RESUME,
                 "generator iterations (default 3500)"),
    RP_OPT_INT64(T, checkpoint_every, "--checkpoint-every", "N", 0, 100000000, SAVED,
                 "iterations between checkpoints (default 500; also at the end\n"
                 "and on Ctrl-C)"),
    RP_OPT_INT64(T, eval_every, "--eval-every", "N", 0, 100000000, SAVED | RESUME,
                 "iterations between scores with --judge (default: 4 in the run)"),
    RP_OPT_INT64(T, eval_samples, "--eval-samples", "N", 2, 10000000, SAVED | RESUME,
                 "class-balanced samples per score (default 10000)"),
    RP_OPT_PATH(T, judge, "--judge", "DIR", SAVED | RESUME,
                "a classifier run (replicator train resnet20 --image-size 32) that\n"
                "scores the samples: class accuracy, FD, IS"),
    RP_OPT_INT(T, threads, "--threads", "N", 1, 1024, SAVED | RP_OPT_ZERO_OK | RESUME,
               "kernel threads in all (default: all cores)"),
    RP_OPT_INT(T, replicas, "--replicas", "N", 1, 256, SAVED | RP_OPT_ZERO_OK | RESUME,
               "data-parallel replicas (default: one per core that divides\n"
               "both batches); cross-replica batch norm in the generator"),
    RP_OPT_CHOICE(T, backend, "--backend", "B", "auto|threads|mpi", RESUME,
                  "auto (default: MPI under mpirun), threads or mpi"),
    RP_OPT_CHOICE(T, precision, "--precision", "P", "f32|bf16", OLD | RESUME,
                  "f32 (default) or bf16 compute for convolutions and linear\n"
                  "layers (docs/precision.md); a run resumes in its own unless given"),
    RP_OPT_CHOICE(T, g.keep_f32, "--keep-f32", "NET", "none|g|d", OLD | RESUME,
                  "with --precision bf16: the network that computes in f32\n"
                  "(g: the generator, d: the discriminator; default none)"),
    RP_OPT_CHOICE(T, g.activations, "--activations", "T", "bf16|f32", OLD | RESUME,
                  "with --precision bf16: activations stored in f32 (default;\n"
                  "bf16 storage cost 0.2 of FD, docs/sngan.md) or bf16 (half\n"
                  "their memory)"),
    RP_OPT_ENUM(T, grad_dtype, "--grad-dtype", "T", "f32|bf16", wire_dtypes, OLD | RESUME,
                "gradients on the wire between replicas: f32 (default) or bf16\n"
                "(half the bytes; summed in f32; docs/precision.md)"),
    RP_OPT_INT(T, zero, "--zero", "[1|2|3]", 1, 3, RESUME | RP_OPT_BARE,
               "ZeRO: each of N replicas keeps the optimizer state of 1/N of\n"
               "each network (1, the default), 2: and only its 1/N of the\n"
               "gradients, 3: and of the values between uses; the same\n"
               "values bitwise (docs/distributed.md)"),
    RP_OPT_INT(T, hsdp, "--hsdp", "G", 2, 256, RESUME,
               "ZeRO as HSDP: sharded in groups of G replicas, replicated\n"
               "across them; implies --zero 1"),
    RP_OPT_FLAG(T, keep_gathered, "--keep-gathered", RESUME,
                "with --zero 3: keep each unit gathered in forward until the\n"
                "update (backward gathers nothing again)"),
    RP_OPT_FLAG(T, prefetch, "--prefetch", RESUME,
                "with --zero 3: start gathering the next unit while this one\n"
                "computes (one more unit held)"),
    RP_OPT_DOUBLE(T, comm_timeout, "--timeout", "S", 0.001, 86400, RESUME,
                  "seconds a collective may wait for a peer"),
    RP_OPT_PATH(T, out_dir, "--out", "DIR", 0, "run directory (default runs/sngan, made unique)"),
    RP_OPT_PATH_REF(T, tensorboard, "--tensorboard", "DIR", RESUME,
                    "also write the metrics as TensorBoard event files in DIR\n"
                    "(view them with: tensorboard --logdir DIR)"),
    RP_OPT_PATH_REF(T, trace, "--trace", "FILE", RESUME,
                    "write a Chrome trace-event JSON of the run to FILE (open it in\n"
                    "ui.perfetto.dev; docs/tracing.md)"),
    RP_OPT_FLAG(T, force, "--force", 0, "overwrite a checkpoint in --out"),
    RP_OPT_INT64(T, max_steps, "--max-steps", "N", 1, 100000000, RESUME,
                 "stop (checkpointed, resumable) after iteration N"),
    RP_OPT_FLAG(T, no_checkpoint, "--no-checkpoint", RESUME, "write no checkpoint"),
    RP_OPT_INT(T, checkpoint_shards, "--checkpoint-shards", "N", 0, 1024, RESUME,
               "write each checkpoint as N shard files and an index (default 0:\n"
               "one file; docs/training.md)"),
    RP_OPT_FLAG(T, background_save, "--background-save", RESUME,
                "write each checkpoint on a background thread while training goes on"),
    RP_OPT_FLAG(T, per_worker_save, "--checkpoint-per-worker", RESUME,
                "each replica writes its own shard of each checkpoint (its ZeRO\n"
                "shard), nothing gathered (sync and ZeRO; docs/training.md)"),
    RP_OPT_FLAG(T, quiet, "--quiet", RESUME, "no progress lines"),
    RP_OPT_PATH_REF(T, resume, "--resume", "DIR", RESUME,
                    "continue the run in DIR (with it: --iters, --threads, --replicas,\n"
                    "--data, --judge, --eval-every, --eval-samples, --tensorboard,\n"
                    "--precision, --grad-dtype, --checkpoint-shards, --background-save)"),
    RP_OPTION_END,
};

#undef T
#undef SAVED
#undef RESUME
#undef OLD

static void usage(FILE *f)
{
    fprintf(f, "usage: replicator train sngan [options]\n"
               "       replicator train --resume DIR [--iters N] [--threads N] [--replicas N]\n"
               "\n"
               "Trains a class-conditional SN-GAN (ResNet generator with conditional batch norm,\n"
               "spectrally normalised projection discriminator, hinge loss) data-parallel on\n"
               "replicas; writes samples.png (a row per class) as it learns.\n"
               "\n");
    rp_options_print_help(f, sngan_table);
}

int sngan_opts_parse(int argc, char **argv, sngan_opts *o, const char **resume)
{
    static const char CMD[] = "replicator train sngan";
    rp_option_fault fault;
    *resume = NULL;
    if (rp_options_parse(sngan_table, o, &argc, argv, RP_OPTIONS_HELP, &o->given, &fault) !=
        RP_OK) {
        return rp_options_print_fault(CMD, &fault);
    }
    if (fault.kind == RP_OPTION_HELP) {
        usage(stdout);
        return 1;
    }
    *resume = o->resume;
    o->replicas_given = rp_options_was_given(sngan_table, &o->given, "--replicas");
    o->out_given = rp_options_was_given(sngan_table, &o->given, "--out");
    if (!o->out_given) snprintf(o->out_dir, sizeof o->out_dir, "runs/sngan");
    return 0;
}

char *sngan_opts_to_json(const sngan_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "model", "sngan");
    char *text = NULL;
    if (rp_options_to_json(sngan_table, o, j) == RP_OK) text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static bool str(const cJSON *j, const char *key, char *dst, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size) return false;
    snprintf(dst, size, "%s", v->valuestring);
    return true;
}

bool sngan_config_is_gan(const char *json)
{
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    char model[32] = "";
    bool gan = j && str(j, "model", model, sizeof model) && !strcmp(model, "sngan");
    cJSON_Delete(j);
    return gan;
}

rp_status sngan_opts_from_json(sngan_opts *o, const char *json)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint's configuration is not valid JSON");
    sngan_opts_default(o);
    /* Runs saved before --activations stored bf16 runs' activations in bf16, and resume so. */
    snprintf(o->g.activations, sizeof o->g.activations, "bf16");
    char model[32] = "";
    train_config_reader r = {.json = j};
    bool ok = train_config_str(&r, "model", model, sizeof model);
    if (ok && strcmp(model, "sngan")) ok = train_config_refuse(&r, "model", "not sngan");
    /* The table's rows, with the command line's ranges. */
    if (ok && rp_options_from_json(sngan_table, o, j, r.bad, sizeof r.bad) != RP_OK) ok = false;
    rp_status status = ok ? RP_OK : train_config_error(&r, "the SN-GAN checkpoint's configuration");
    cJSON_Delete(j);
    return status;
}

rp_status sngan_judge_load(rp_sngan_judge **j, const char *dir)
{
    rp_checkpoint *ck = NULL;
    train_opts to;
    const char *config;
    *j = NULL;
    RP_CHECK(rp_trainer_load_run(dir, &ck, &config));
    rp_status status = train_opts_from_json(&to, config);
    if (status == RP_OK) {
        rp_classifier_config cc;
        train_opts_classifier(&to, &cc);
        status = rp_sngan_judge_create(j, &cc, ck);
    }
    if (status != RP_OK && !strstr(rp_last_error(), dir)) {
        char why[512];
        snprintf(why, sizeof why, "%s", rp_last_error()); /* RP_ERROR overwrites it */
        status = RP_ERROR(status, "the judge %s: %s", dir, why);
    }
    rp_checkpoint_destroy(ck);
    return status;
}

/* Options that may change on --resume (RESUME rows given here) and the unsaved ones. */
static void apply_resume_overrides(sngan_opts *o, const sngan_opts *cli)
{
    rp_options_apply_resume(sngan_table, o, cli, &cli->given);
    o->replicas_given = cli->replicas_given;
    o->given = cli->given;
}

/* The runtime's layout: the library's rules (rp_config_resolve). */
static rp_status runtime_config(sngan_opts *o, rp_config *cfg)
{
    *cfg = rp_config_default();
    cfg->backend = !strcmp(o->backend, "threads") ? RP_BACKEND_THREADS
                   : !strcmp(o->backend, "mpi")   ? RP_BACKEND_MPI
                                                  : RP_BACKEND_AUTO;
    cfg->replicas = o->replicas;
    cfg->timeout_s = o->comm_timeout;
    cfg->precision = !strcmp(o->precision, "bf16") ? RP_BF16 : RP_F32;
    cfg->grad_dtype = (rp_dtype)o->grad_dtype;
    if (o->hsdp > 1 && !o->zero) o->zero = 1; /* HSDP is ZeRO in groups */
    cfg->zero = o->zero == 1;
    if (o->zero >= 2) cfg->strategy = o->zero == 2 ? RP_STRATEGY_ZERO2 : RP_STRATEGY_ZERO3;
    cfg->hsdp = o->hsdp;
    cfg->keep_gathered = o->keep_gathered;
    cfg->prefetch = o->prefetch;
    cfg->seed = o->g.seed;
    /* The command's promise: --timeout bounds a stall (on unless RP_STUCK_EXIT=0; runtime.h). */
    cfg->stuck_exit = rp_trainer_stuck_exit();
    /* Replicas that divide both global batches (and their micro-batches). */
    int a = o->g.d_batch / o->g.accum, b = o->g.g_batch / o->g.accum;
    while (b) {
        int r = a % b;
        a = b;
        b = r;
    }
    rp_job_shape layout = rp_job_shape_default();
    layout.threads = o->threads;
    layout.batch = a > 0 ? a : 1;
    layout.replicas_from_run = !o->replicas_given;
    RP_CHECK(rp_config_resolve(cfg, &layout));
    o->replicas = layout.replicas;
    if (o->g.d_batch % (o->g.accum * o->replicas) || o->g.g_batch % (o->g.accum * o->replicas))
        return RP_ERROR(RP_ERR_INVALID,
                        "--d-batch %d and --g-batch %d must split into --accum %d x %d replicas",
                        o->g.d_batch, o->g.g_batch, o->g.accum, o->replicas);
    return RP_OK;
}

static rp_status setup(sngan_opts *o, const char *resume, rp_sngan **gan, rp_sngan_eval *ev,
                       rp_trainer **t)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL;
    if (resume) {
        const char *saved;
        RP_TRY(rp_trainer_load_run(resume, &ck, &saved));
        if (!sngan_config_is_gan(saved)) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s is not an SN-GAN run (its checkpoint's configuration says "
                              "otherwise or nothing)",
                              resume);
            goto cleanup;
        }
        sngan_opts cli = *o;
        RP_TRY(sngan_opts_from_json(o, saved));
        apply_resume_overrides(o, &cli);
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
    }
    rp_kernels_set_threads(o->threads);
    rp_trainer_config tc = rp_trainer_config_default();
    RP_TRY(runtime_config(o, &tc.runtime));
    if (tc.runtime.backend == RP_BACKEND_MPI) {
        /* Every rank's options the same, before the data loads (paths and threads may differ by
           host). */
        static const char *const local[] = {"data_dir", "threads", "judge", NULL};
        char *mine = sngan_opts_to_json(o);
        status = rp_trainer_agree_config(mine, local, o->out_dir, o->max_steps, o->comm_timeout);
        free(mine);
        if (status != RP_OK) goto cleanup;
    }
    RP_TRY(rp_sngan_create(gan, &o->g));
    o->g = *rp_sngan_get_config(*gan); /* the dataset's shape and classes filled in */
    if (o->judge[0]) {
        RP_TRY(sngan_judge_load(&ev->judge, o->judge));
        ev->samples = o->eval_samples;
        rp_sngan_set_eval(*gan, ev);
        if (!o->eval_every) o->eval_every = o->iters / 4 > 0 ? o->iters / 4 : 1;
    }
    tc.run_dir = o->out_dir;
    tc.run_dir_exact = o->out_given;
    tc.force = o->force;
    tc.resume = ck;
    tc.steps = o->iters;
    tc.max_steps = o->max_steps;
    rp_sngan_trainer_config_apply(&o->g, &tc); /* lr, the linear schedule, the scalars shown */
    tc.checkpoint_every_steps = o->checkpoint_every;
    tc.checkpoint_shards = o->checkpoint_shards;
    tc.checkpoint_background = o->background_save;
    tc.checkpoint_per_worker = o->per_worker_save;
    tc.eval_every_steps = o->judge[0] ? o->eval_every : 0;
    tc.metrics_every_steps = o->metrics_every;
    tc.no_checkpoint = o->no_checkpoint;
    tc.quiet = o->quiet;
    tc.tensorboard_dir = o->tensorboard;
    tc.tensorboard_writer = rp_tensorboard_scalar_writer();
    tc.trace = o->trace;
    RP_TRY(rp_trainer_create(t, &tc, rp_sngan_trainer_model(), *gan));
    if (!rp_trainer_is_root(*t)) o->quiet = true;
    snprintf(o->out_dir, sizeof o->out_dir, "%s", rp_trainer_run_dir(*t));
    RP_TRY(rp_sngan_set_run_dir(*gan, rp_trainer_is_root(*t) ? o->out_dir : NULL));
    o->replicas = rp_replicator_replicas(rp_trainer_replicator(*t));
    config = sngan_opts_to_json(o);
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

static void print_header(const sngan_opts *o, const rp_trainer *t, bool resumed)
{
    const rp_sngan_config *g = &o->g;
    rp_replicator *rep = rp_trainer_replicator(t);
    rp_sngan_generator *gen = rp_sngan_state_generator(rp_trainer_state(t));
    rp_trainer_progress p = rp_trainer_get_progress(t);
    fprintf(
        stderr,
        "replicator train sngan on %s: %dx%dx%d images, %d classes\n"
        "  generator ch %d (%lld parameters), discriminator ch %d; z %d; %lld iterations of %d D "
        "steps (batch %d) + 1 G step (batch %d)%s; Adam %g/%g, betas (%g, %g), linear decay; seed "
        "%llu\n"
        "  %d replicas x %d threads (%s, cross-replica batch norm in G), %s kernels\n",
        g->dataset, g->h, g->w, g->c, g->classes, g->ch_g,
        (long long)rp_params_trainable_numel(rp_sngan_generator_params(gen)), g->ch_d, g->z_dim,
        (long long)o->iters, g->n_dis, g->d_batch, g->g_batch,
        g->accum > 1 ? " in micro-batches" : "", (double)g->lr_g, (double)g->lr_d, (double)g->beta1,
        (double)g->beta2, (unsigned long long)g->seed, o->replicas,
        rp_replicator_threads_per_replica(rep), rp_replicator_backend(rep), rp_kernels_name());
    rp_trainer_print_precision(o->precision, o->g.activations);
    if (!strcmp(o->precision, "bf16") && (!strcmp(g->keep_f32, "g") || !strcmp(g->keep_f32, "d")))
        fprintf(stderr, "  the %s computes and stores in f32 (--keep-f32 %s)\n",
                g->keep_f32[0] == 'g' ? "generator" : "discriminator", g->keep_f32);
    if (o->grad_dtype == RP_BF16 && o->replicas > 1)
        fprintf(stderr, "  gradients all-reduced in bf16 (summed in f32)\n");
    if (o->zero && o->replicas > 1)
        fprintf(stderr,
                "  ZeRO-%d: each replica keeps the optimizer state%s of 1/%d of each network\n",
                o->zero,
                o->zero == 3   ? ", the reduced gradients and the values"
                : o->zero == 2 ? " and the reduced gradients"
                               : "",
                o->hsdp > 1 ? o->hsdp : o->replicas);
    if (o->hsdp > 1 && o->replicas > 1)
        fprintf(stderr, "  HSDP: sharded in groups of %d replicas, replicated across the groups\n",
                o->hsdp);
    if (o->judge[0])
        fprintf(stderr, "  judged by %s every %lld iterations on %lld samples\n", o->judge,
                (long long)o->eval_every, (long long)o->eval_samples);
    if (resumed)
        fprintf(stderr, "  resumed from %s at iteration %lld\n", o->out_dir,
                (long long)p.global_step);
    /* The configuration's echo, from the option table: what differs from the defaults. */
    static sngan_opts defaults; /* static: a few KiB of paths */
    sngan_opts_default(&defaults);
    char echo[1024];
    rp_options_describe(sngan_table, o, &defaults, echo, sizeof echo);
    if (echo[0]) fprintf(stderr, "  options: %s\n", echo);
    fprintf(stderr, "  run directory: %s (samples.png every %lld iterations)\n", o->out_dir,
            (long long)g->sample_every);
}

int sngan_train_main(int argc, char **argv)
{
    sngan_opts o;
    sngan_opts_default(&o);
    const char *resume = NULL;
    int rc = sngan_opts_parse(argc, argv, &o, &resume);
    if (rc) return rc == 1 ? 0 : rc;
    rp_trainer_catch_signals();

    rp_sngan *gan = NULL;
    rp_sngan_eval ev = {0};
    rp_trainer *t = NULL;
    double t_start = rp_now_s();
    rp_status status = setup(&o, resume, &gan, &ev, &t);
    bool tty = isatty(STDERR_FILENO) && !o.quiet;
    if (status == RP_OK) {
        if (!o.quiet) print_header(&o, t, resume != NULL);
        t_start = rp_now_s();
        status = rp_trainer_run(t);
    }
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (status == RP_OK && p.stopped && !o.quiet)
        fprintf(stderr, "%s  stopped at iteration %lld%s%s\n", tty ? "\n" : "",
                (long long)p.global_step,
                o.no_checkpoint ? "; nothing saved (--no-checkpoint)"
                                : "; resume with: replicator train --resume ",
                o.no_checkpoint ? "" : o.out_dir);
    if (status == RP_OK && rp_trainer_is_root(t) && p.finished) {
        double s = rp_now_s() - t_start;
        printf("sngan on %s: %lld iterations (%lld this run) in %.0fs", o.g.dataset,
               (long long)p.global_step, (long long)p.steps_this_run, s);
        if (ev.judge && ev.last.n > 0)
            printf("; class accuracy %.1f%%, FD %.2f, IS %.2f (%lld samples)",
                   100 * ev.last.class_accuracy, ev.last.fd, ev.last.is, (long long)ev.last.n);
        printf("; samples in %s/samples.png\n", o.out_dir);
    }
    rc = rp_trainer_finish(t, status, "replicator train", tty);
    rp_sngan_destroy(gan);
    rp_sngan_judge_destroy(ev.judge);
    return rc;
}
