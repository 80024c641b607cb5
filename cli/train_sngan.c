/*
 * train_sngan.c - `replicator train sngan`: the class-conditional SN-GAN
 * (models/sngan) trained by the shared trainer, data-parallel on replicas.
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

#include "sngan_cli.h"

void sngan_opts_default(sngan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->g = rp_sngan_config_default();
    snprintf(o->precision, sizeof o->precision, "f32");
    o->g.lr_g = o->g.lr_d = SNGAN_DEFAULT_LR;
    o->g.sample_every = 250;
    o->g.seed = 1;
    o->iters = SNGAN_DEFAULT_ITERS;
    o->checkpoint_every = 500;
    o->eval_every = 0;
    o->eval_samples = 10000;
    o->metrics_every = 10;
    snprintf(o->backend, sizeof o->backend, "auto");
}

static void usage(FILE *f)
{
    sngan_opts d;
    sngan_opts_default(&d);
    fprintf(
        f,
        "usage: replicator train sngan [options]\n"
        "       replicator train --resume DIR [--iters N] [--threads N] [--replicas N]\n"
        "\n"
        "Trains a class-conditional SN-GAN (ResNet generator with conditional batch norm,\n"
        "spectrally normalised projection discriminator, hinge loss) data-parallel on\n"
        "replicas; writes samples.png (a row per class) as it learns.\n"
        "\n"
        "data:\n"
        "  --dataset D       fashion-mnist (default; padded to 32x32), mnist or cifar10\n"
        "  --data DIR        dataset directory (default $RP_DATA_DIR or\n"
        "                    /usr/share/datasets/fashion-mnist)\n"
        "  --limit N         train on the first N images only\n"
        "model:\n"
        "  --ch-g N          generator width (default %d)\n"
        "  --ch-d N          discriminator width (default %d)\n"
        "  --z-dim N         latent size (default %d)\n"
        "optimisation:\n"
        "  --iters N         generator iterations (default %lld)\n"
        "  --n-dis N         discriminator steps per iteration (default %d)\n"
        "  --d-batch N       real images per discriminator step, global (default %d)\n"
        "  --g-batch N       fakes per generator step, global (default %d)\n"
        "  --accum N         split each step's batch into N micro-batches whose gradients\n"
        "                    add up (larger batches than memory or replicas hold; default 1)\n"
        "  --lr-g X, --lr-d X  Adam rates (default %g, %g), decayed linearly to 0\n"
        "  --beta1 X, --beta2 X  Adam betas (default %g, %g)\n"
        "run:\n"
        "  --seed N          random seed (default %llu)\n"
        "  --threads N       kernel threads in all (default: all cores)\n"
        "  --replicas N      data-parallel replicas (default: one per core that divides\n"
        "                    both batches); cross-replica batch norm in the generator\n"
        "  --backend B       auto (default: MPI under mpirun), threads or mpi\n"
        "  --precision P     f32 (default) or bf16 compute for convolutions and linear\n"
        "                    layers (docs/precision.md)\n"
        "  --timeout S       seconds a collective may wait for a peer\n"
        "  --out DIR         run directory (default runs/sngan, made unique)\n"
        "  --tensorboard DIR also write the metrics as TensorBoard event files in DIR\n"
        "                    (view them with: tensorboard --logdir DIR)\n"
        "  --trace FILE      write a Chrome trace-event JSON of the run to FILE (open it in\n"
        "                    ui.perfetto.dev; docs/tracing.md)\n"
        "  --force           overwrite a checkpoint in --out\n"
        "  --checkpoint-every N  iterations between checkpoints (default %lld; also at the end\n"
        "                    and on Ctrl-C)\n"
        "  --sample-every N  iterations between sample grids (default %lld; 0: never)\n"
        "  --judge DIR       a classifier run (replicator train resnet20 --image-size 32) that\n"
        "                    scores the samples: class accuracy, FD, IS\n"
        "  --eval-every N    iterations between scores with --judge (default: 4 in the run)\n"
        "  --eval-samples N  class-balanced samples per score (default %lld)\n"
        "  --max-steps N     stop (checkpointed, resumable) after iteration N\n"
        "  --no-checkpoint   write no checkpoint\n"
        "  --quiet           no progress lines\n"
        "  --resume DIR      continue the run in DIR (with it: --iters, --threads, --replicas,\n"
        "                    --data, --judge, --eval-every, --eval-samples, --tensorboard,\n"
        "                    --precision)\n",
        d.g.ch_g, d.g.ch_d, d.g.z_dim, (long long)d.iters, d.g.n_dis, d.g.d_batch, d.g.g_batch,
        (double)d.g.lr_g, (double)d.g.lr_d, (double)d.g.beta1, (double)d.g.beta2,
        (unsigned long long)d.g.seed, (long long)d.checkpoint_every, (long long)d.g.sample_every,
        (long long)d.eval_samples);
}

int sngan_opts_parse(int argc, char **argv, sngan_opts *o, const char **resume)
{
    static const char CMD[] = "replicator train sngan";
    *resume = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(a, "--force")) {
            o->force = true;
            continue;
        }
        if (!strcmp(a, "--no-checkpoint")) {
            o->no_checkpoint = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator train sngan: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--dataset")) {
            ok = !strcmp(v, "fashion-mnist") || !strcmp(v, "mnist") || !strcmp(v, "cifar10");
            snprintf(o->g.dataset, sizeof o->g.dataset, "%s", v);
        } else if (!strcmp(a, "--data")) {
            if (!train_copy_path(CMD, a, v, o->g.data_dir, sizeof o->g.data_dir)) return 2;
        } else if (!strcmp(a, "--limit")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->g.limit = n;
        } else if (!strcmp(a, "--ch-g")) {
            ok = train_parse_long(v, 1, 4096, &n);
            o->g.ch_g = (int)n;
        } else if (!strcmp(a, "--ch-d")) {
            ok = train_parse_long(v, 1, 4096, &n);
            o->g.ch_d = (int)n;
        } else if (!strcmp(a, "--z-dim")) {
            ok = train_parse_long(v, 1, 4096, &n);
            o->g.z_dim = (int)n;
        } else if (!strcmp(a, "--iters")) {
            ok = train_parse_long(v, 1, 100000000, &n);
            o->iters = n;
        } else if (!strcmp(a, "--n-dis")) {
            ok = train_parse_long(v, 1, 100, &n);
            o->g.n_dis = (int)n;
        } else if (!strcmp(a, "--d-batch")) {
            ok = train_parse_long(v, 1, 1 << 20, &n);
            o->g.d_batch = (int)n;
        } else if (!strcmp(a, "--g-batch")) {
            ok = train_parse_long(v, 1, 1 << 20, &n);
            o->g.g_batch = (int)n;
        } else if (!strcmp(a, "--accum")) {
            ok = train_parse_long(v, 1, 1024, &n);
            o->g.accum = (int)n;
        } else if (!strcmp(a, "--lr-g"))
            ok = train_parse_float(v, 0, 1, &o->g.lr_g);
        else if (!strcmp(a, "--lr-d"))
            ok = train_parse_float(v, 0, 1, &o->g.lr_d);
        else if (!strcmp(a, "--beta1"))
            ok = train_parse_float(v, 0, 0.999999f, &o->g.beta1);
        else if (!strcmp(a, "--beta2"))
            ok = train_parse_float(v, 0, 0.999999f, &o->g.beta2);
        else if (!strcmp(a, "--seed")) {
            ok = train_parse_long(v, 0, 0x7fffffffL, &n);
            o->g.seed = (uint64_t)n;
        } else if (!strcmp(a, "--threads")) {
            ok = train_parse_long(v, 1, 1024, &n);
            o->threads = (int)n;
        } else if (!strcmp(a, "--replicas")) {
            ok = train_parse_long(v, 1, 256, &n);
            o->replicas = (int)n;
            o->replicas_given = true;
        } else if (!strcmp(a, "--backend")) {
            ok = !strcmp(v, "auto") || !strcmp(v, "threads") || !strcmp(v, "mpi");
            snprintf(o->backend, sizeof o->backend, "%s", v);
        } else if (!strcmp(a, "--precision")) {
            ok = !strcmp(v, "f32") || !strcmp(v, "bf16");
            snprintf(o->precision, sizeof o->precision, "%s", ok ? v : "f32");
        } else if (!strcmp(a, "--timeout")) {
            float s = 0;
            ok = train_parse_float(v, 0.001f, 86400, &s);
            o->comm_timeout = s;
        } else if (!strcmp(a, "--out")) {
            if (!train_copy_path(CMD, a, v, o->out_dir, sizeof o->out_dir)) return 2;
            o->out_given = true;
        } else if (!strcmp(a, "--checkpoint-every")) {
            ok = train_parse_long(v, 0, 100000000, &n);
            o->checkpoint_every = n;
        } else if (!strcmp(a, "--sample-every")) {
            ok = train_parse_long(v, 0, 100000000, &n);
            o->g.sample_every = n;
        } else if (!strcmp(a, "--judge")) {
            if (!train_copy_path(CMD, a, v, o->judge, sizeof o->judge)) return 2;
        } else if (!strcmp(a, "--eval-every")) {
            ok = train_parse_long(v, 0, 100000000, &n);
            o->eval_every = n;
        } else if (!strcmp(a, "--eval-samples")) {
            ok = train_parse_long(v, 2, 10000000, &n);
            o->eval_samples = n;
        } else if (!strcmp(a, "--max-steps")) {
            ok = train_parse_long(v, 1, 100000000, &n);
            o->max_steps = n;
        } else if (!strcmp(a, "--resume")) {
            if (!train_copy_path(CMD, a, v, NULL, sizeof o->out_dir)) return 2;
            *resume = v;
        } else if (!strcmp(a, "--tensorboard")) {
            if (!train_copy_path(CMD, a, v, NULL, CLI_PATH_MAX)) return 2;
            o->tensorboard = v;
        } else if (!strcmp(a, "--trace")) {
            if (!train_copy_path(CMD, a, v, NULL, CLI_PATH_MAX)) return 2;
            o->trace = v;
        } else {
            fprintf(stderr, "replicator train sngan: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "replicator train sngan: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    if (!o->out_given) snprintf(o->out_dir, sizeof o->out_dir, "runs/sngan");
    return 0;
}

char *sngan_opts_to_json(const sngan_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    const rp_sngan_config *g = &o->g;
    cJSON_AddStringToObject(j, "model", "sngan");
    cJSON_AddStringToObject(j, "dataset", g->dataset);
    cJSON_AddStringToObject(j, "data_dir", g->data_dir);
    cJSON_AddNumberToObject(j, "limit", (double)g->limit);
    cJSON_AddNumberToObject(j, "ch_g", g->ch_g);
    cJSON_AddNumberToObject(j, "ch_d", g->ch_d);
    cJSON_AddNumberToObject(j, "z_dim", g->z_dim);
    cJSON_AddNumberToObject(j, "classes", g->classes);
    cJSON_AddNumberToObject(j, "h", g->h);
    cJSON_AddNumberToObject(j, "w", g->w);
    cJSON_AddNumberToObject(j, "c", g->c);
    cJSON_AddNumberToObject(j, "d_batch", g->d_batch);
    cJSON_AddNumberToObject(j, "g_batch", g->g_batch);
    cJSON_AddNumberToObject(j, "accum", g->accum);
    cJSON_AddNumberToObject(j, "n_dis", g->n_dis);
    cJSON_AddNumberToObject(j, "lr_g", g->lr_g);
    cJSON_AddNumberToObject(j, "lr_d", g->lr_d);
    cJSON_AddNumberToObject(j, "beta1", g->beta1);
    cJSON_AddNumberToObject(j, "beta2", g->beta2);
    cJSON_AddNumberToObject(j, "seed", (double)g->seed);
    cJSON_AddNumberToObject(j, "sample_every", (double)g->sample_every);
    cJSON_AddNumberToObject(j, "iters", (double)o->iters);
    cJSON_AddNumberToObject(j, "checkpoint_every", (double)o->checkpoint_every);
    cJSON_AddNumberToObject(j, "eval_every", (double)o->eval_every);
    cJSON_AddNumberToObject(j, "eval_samples", (double)o->eval_samples);
    cJSON_AddStringToObject(j, "judge", o->judge);
    cJSON_AddNumberToObject(j, "threads", o->threads);
    cJSON_AddNumberToObject(j, "replicas", o->replicas);
    char *text = cJSON_PrintUnformatted(j);
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
    rp_sngan_config *g = &o->g;
    double v[24];
    char model[32] = "";
    train_config_reader r = {.json = j};
    bool ok = train_config_str(&r, "model", model, sizeof model);
    if (ok && strcmp(model, "sngan")) ok = train_config_refuse(&r, "model", "not sngan");
    ok = ok && train_config_str(&r, "dataset", g->dataset, sizeof g->dataset) &&
         train_config_str(&r, "data_dir", g->data_dir, sizeof g->data_dir) &&
         train_config_num(&r, "limit", 0, 1e12, &v[0]) &&
         train_config_num(&r, "ch_g", 1, 4096, &v[1]) &&
         train_config_num(&r, "ch_d", 1, 4096, &v[2]) &&
         train_config_num(&r, "z_dim", 1, 4096, &v[3]) &&
         train_config_num(&r, "classes", 1, 256, &v[4]) &&
         train_config_num(&r, "h", 1, 4096, &v[5]) && train_config_num(&r, "w", 1, 4096, &v[6]) &&
         train_config_num(&r, "c", 1, 4, &v[7]) &&
         train_config_num(&r, "d_batch", 1, 1 << 20, &v[8]) &&
         train_config_num(&r, "g_batch", 1, 1 << 20, &v[9]) &&
         train_config_num(&r, "accum", 1, 1024, &v[10]) &&
         train_config_num(&r, "n_dis", 1, 100, &v[11]) &&
         train_config_num(&r, "lr_g", 0, 1, &v[12]) && train_config_num(&r, "lr_d", 0, 1, &v[13]) &&
         train_config_num(&r, "beta1", 0, 1, &v[14]) &&
         train_config_num(&r, "beta2", 0, 1, &v[15]) &&
         train_config_num(&r, "seed", 0, 0x7fffffff, &v[16]) &&
         train_config_num(&r, "sample_every", 0, 1e8, &v[17]) &&
         train_config_num(&r, "iters", 1, 1e8, &v[18]) &&
         train_config_num(&r, "checkpoint_every", 0, 1e8, &v[19]) &&
         train_config_num(&r, "eval_every", 0, 1e8, &v[20]) &&
         train_config_num(&r, "eval_samples", 2, 1e7, &v[21]) &&
         train_config_str(&r, "judge", o->judge, sizeof o->judge) &&
         train_config_num(&r, "threads", 0, 1024, &v[22]) &&
         train_config_num(&r, "replicas", 0, 256, &v[23]);
    rp_status status = ok ? RP_OK : train_config_error(&r, "the SN-GAN checkpoint's configuration");
    cJSON_Delete(j);
    if (!ok) return status;
    g->limit = (int64_t)v[0];
    g->ch_g = (int)v[1];
    g->ch_d = (int)v[2];
    g->z_dim = (int)v[3];
    g->classes = (int)v[4];
    g->h = (int)v[5];
    g->w = (int)v[6];
    g->c = (int)v[7];
    g->d_batch = (int)v[8];
    g->g_batch = (int)v[9];
    g->accum = (int)v[10];
    g->n_dis = (int)v[11];
    g->lr_g = (float)v[12];
    g->lr_d = (float)v[13];
    g->beta1 = (float)v[14];
    g->beta2 = (float)v[15];
    g->seed = (uint64_t)v[16];
    g->sample_every = (int64_t)v[17];
    o->iters = (int64_t)v[18];
    o->checkpoint_every = (int64_t)v[19];
    o->eval_every = (int64_t)v[20];
    o->eval_samples = (int64_t)v[21];
    o->threads = (int)v[22];
    o->replicas = (int)v[23];
    return RP_OK;
}

rp_status sngan_judge_load(rp_sngan_judge **j, const char *dir)
{
    rp_checkpoint *ck = NULL;
    train_opts to;
    const char *config;
    *j = NULL;
    RP_CHECK(train_load_run(dir, &ck, &config));
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

/* Options that may change on --resume, from this command line. */
static void apply_resume_overrides(sngan_opts *o, const sngan_opts *cli, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters"))
            o->iters = cli->iters;
        else if (!strcmp(argv[i], "--data"))
            snprintf(o->g.data_dir, sizeof o->g.data_dir, "%s", cli->g.data_dir);
        else if (!strcmp(argv[i], "--threads"))
            o->threads = cli->threads;
        else if (!strcmp(argv[i], "--replicas"))
            o->replicas = cli->replicas;
        else if (!strcmp(argv[i], "--judge"))
            snprintf(o->judge, sizeof o->judge, "%s", cli->judge);
        else if (!strcmp(argv[i], "--eval-every"))
            o->eval_every = cli->eval_every;
        else if (!strcmp(argv[i], "--eval-samples"))
            o->eval_samples = cli->eval_samples;
    }
    o->replicas_given = cli->replicas_given;
    o->comm_timeout = cli->comm_timeout;
    snprintf(o->backend, sizeof o->backend, "%s", cli->backend);
    snprintf(o->precision, sizeof o->precision, "%s", cli->precision);
    o->quiet = cli->quiet;
    o->max_steps = cli->max_steps;
    o->no_checkpoint = cli->no_checkpoint;
    o->tensorboard = cli->tensorboard;
    o->trace = cli->trace;
}

/* The runtime's layout, through the classifier command's rules (train_runtime_config). */
static rp_status runtime_config(sngan_opts *o, rp_config *cfg)
{
    train_opts to;
    train_opts_default(&to, "resnet20");
    snprintf(to.backend, sizeof to.backend, "%s", o->backend);
    to.replicas = o->replicas;
    to.replicas_given = o->replicas_given;
    to.threads = o->threads;
    to.comm_timeout = o->comm_timeout;
    snprintf(to.precision, sizeof to.precision, "%s", o->precision);
    /* Replicas that divide both global batches (and their micro-batches). */
    int a = o->g.d_batch / o->g.accum, b = o->g.g_batch / o->g.accum;
    while (b) {
        int r = a % b;
        a = b;
        b = r;
    }
    to.batch = a > 0 ? a : 1;
    RP_CHECK(train_runtime_config(&to, cfg));
    o->replicas = to.replicas;
    if (o->g.d_batch % (o->g.accum * o->replicas) || o->g.g_batch % (o->g.accum * o->replicas))
        return RP_ERROR(RP_ERR_INVALID,
                        "--d-batch %d and --g-batch %d must split into --accum %d x %d replicas",
                        o->g.d_batch, o->g.g_batch, o->g.accum, o->replicas);
    return RP_OK;
}

static rp_status setup(sngan_opts *o, const char *resume, int argc, char **argv, rp_sngan **gan,
                       rp_sngan_eval *ev, rp_trainer **t)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char *config = NULL;
    if (resume) {
        const char *saved;
        RP_TRY(train_load_run(resume, &ck, &saved));
        if (!sngan_config_is_gan(saved)) {
            status = RP_ERROR(RP_ERR_FORMAT,
                              "%s is not an SN-GAN run (its checkpoint's configuration says "
                              "otherwise or nothing)",
                              resume);
            goto cleanup;
        }
        sngan_opts cli = *o;
        RP_TRY(sngan_opts_from_json(o, saved));
        apply_resume_overrides(o, &cli, argc, argv);
        snprintf(o->out_dir, sizeof o->out_dir, "%s", resume);
    }
    rp_kernels_set_threads(o->threads);
    rp_trainer_config tc = rp_trainer_config_default();
    RP_TRY(runtime_config(o, &tc.runtime));
    if (tc.runtime.backend == RP_BACKEND_MPI) {
        /* Every rank's options the same, before the data loads (paths and threads may differ by
           host). */
        static const char *const local[] = {"data_dir", "threads", "judge", NULL};
        RP_TRY(train_agree_options(sngan_opts_to_json(o), local, o->out_dir, o->max_steps,
                                   o->comm_timeout));
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
    train_print_precision(o->precision);
    if (o->judge[0])
        fprintf(stderr, "  judged by %s every %lld iterations on %lld samples\n", o->judge,
                (long long)o->eval_every, (long long)o->eval_samples);
    if (resumed)
        fprintf(stderr, "  resumed from %s at iteration %lld\n", o->out_dir,
                (long long)p.global_step);
    fprintf(stderr, "  run directory: %s (samples.png every %lld iterations)\n", o->out_dir,
            (long long)g->sample_every);
}

int train_sngan_main(int argc, char **argv)
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
    rp_status status = setup(&o, resume, argc, argv, &gan, &ev, &t);
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
    rc = train_finish(t, status, tty);
    rp_sngan_destroy(gan);
    rp_sngan_judge_destroy(ev.judge);
    return rc;
}
