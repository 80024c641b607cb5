/*
 * classifier_options.c - the image classifiers' run options (classifier_options.h): defaults,
 * command-line parsing, and the JSON form stored in checkpoints.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/classifier/classifier_options.h"

void train_opts_default(train_opts *o, const char *model)
{
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "%s", model);
    snprintf(o->dataset, sizeof o->dataset, "fashion-mnist");
    snprintf(o->data_dir, sizeof o->data_dir, "%s", rp_env_get()->data_dir);
    snprintf(o->schedule, sizeof o->schedule, "cosine");
    o->seed = 1;
    o->batch = 128;
    o->momentum = 0.9f;
    o->weight_decay = 5e-4f;
    o->warmup_epochs = 1;
    o->replicas = 0; /* auto: one replica per thread (measured fastest here; docs/benchmarks.md) */
    snprintf(o->backend, sizeof o->backend, "auto");
    snprintf(o->regime, sizeof o->regime, "sync");
    snprintf(o->precision, sizeof o->precision, "f32");
    o->ps = 1;
    o->staleness = -1;
    o->slow_replica = -1;
    o->model_parallel = 1;
    o->tensor_parallel = 1;
    snprintf(o->pipeline, sizeof o->pipeline, "gpipe");
    o->micro_batches = 1;
    o->folder = rp_folder_config_default();
    if (!strcmp(model, "mlp")) {
        o->epochs = 10;
        o->lr = 0.05f;
        o->hidden[0] = 512;
        o->hidden[1] = 256;
        o->n_hidden = 2;
    } else {
        /* ResNet-20 on Fashion-MNIST: fits the 15-minute budget on 2 cores (docs/training.md). */
        o->epochs = 8;
        o->lr = 0.1f;
        o->nesterov = true;
        o->augment = true;
        o->pad = 2;
    }
}

static const int train_dtypes[] = {RP_F32, RP_BF16};

static bool parse_widths(const char *s, int *out, int *n);
static bool parse_triple(const char *s, float lo, float hi, float out[3]);

/* --model is read before the defaults (train_opts_parse); the row only names it. */
static bool parse_model(const rp_option *opt, const char *value, void *dst)
{
    (void)opt, (void)value, (void)dst;
    return true;
}

static bool parse_hidden(const rp_option *opt, const char *value, void *dst)
{
    train_opts *o = dst;
    (void)opt;
    return parse_widths(value, o->hidden, &o->n_hidden);
}

static bool parse_mean(const rp_option *opt, const char *value, void *dst)
{
    (void)opt;
    return parse_triple(value, -1000.0f, 1000.0f, ((train_opts *)dst)->folder.mean);
}

static bool parse_std(const rp_option *opt, const char *value, void *dst)
{
    (void)opt;
    return parse_triple(value, 1e-6f, 1000.0f, ((train_opts *)dst)->folder.std);
}

/* A whole decimal float in [lo, hi]: the command line's number rule (--slow R:F's factor). */
static bool train_parse_float(const char *s, float lo, float hi, float *v)
{
    char *end;
    *v = strtof(s, &end);
    return end != s && !*end && *v >= lo && *v <= hi;
}

/* --slow R:F */
static bool parse_slow(const rp_option *opt, const char *value, void *dst)
{
    train_opts *o = dst;
    char *end;
    long r = strtol(value, &end, 10);
    (void)opt;
    bool ok = end != value && *end == ':' && r >= 0 && r < 4096;
    if (ok) ok = train_parse_float(end + 1, 1.0f, 1000.0f, &o->slow_factor);
    o->slow_replica = (int)r;
    return ok;
}

/* --faults SPEC: process-wide, not saved (a resumed run injects only what it is given). */
static bool parse_faults(const rp_option *opt, const char *value, void *dst)
{
    (void)dst;
    return rp_comm_faults_set(value, opt->name) == RP_OK;
}

#define T          train_opts
#define SAVED      RP_OPT_SAVED
#define RESUME     RP_OPT_RESUME
#define OLD        (RP_OPT_SAVED | RP_OPT_OPTIONAL) /* saved; older runs may lack it */
#define SLOW_BYTES (offsetof(T, slow_factor) + sizeof(float) - offsetof(T, slow_replica))
#define FOLDER(F)  RP_OPT_OWN_JSON /* saved in the "folder" object (dataset folder only) */

/*
 * The options of `replicator train` for the classifiers: one row each gives the parser, the
 * help, the checkpoint's JSON, which may change on --resume (RESUME) and the header's echo.
 */
static const rp_option train_table[] = {
    RP_OPT_CUSTOM(T, model, 0, "--model", "MODEL", parse_model, 0, NULL),
    RP_OPT_SECTION("data:"),
    RP_OPT_CHOICE(T, dataset, "--dataset", "D", "fashion-mnist|mnist|cifar10|synthetic|folder",
                  SAVED,
                  "fashion-mnist (default), mnist, cifar10, synthetic, or folder:\n"
                  "your own JPEG/PNG images (docs/data.md)"),
    {.type = RP_OPTION_PATH,
     .name = "--data",
     .meta = "DIR",
     .key = "data_dir",
     .offset = offsetof(T, data_dir),
     .size = sizeof(((T *)0)->data_dir),
     .flags = SAVED | RESUME,
     .help = "dataset directory (default $RP_DATA_DIR or\n"
             "/usr/share/datasets/fashion-mnist); for folder: DIR with\n"
             "train/<class>/*.jpg and val/<class>/*.jpg (torchvision's\n"
             "ImageFolder), list:DIR (DIR/train.txt, DIR/val.txt: lines\n"
             "\"path label\"), or tar:DIR (WebDataset shards DIR/train/*.tar,\n"
             "DIR/val/*.tar of NNNNNN.jpg + NNNNNN.cls)"},
    RP_OPT_INT64(T, limit, "--limit", "N", 1, 1LL << 40, SAVED | RP_OPT_ZERO_OK,
                 "train on the first N samples only"),
    RP_OPT_INT(T, image_size, "--image-size", "N", 1, 4096, OLD | RP_OPT_ZERO_OK,
               "pad the images to N x N, centred (e.g. 32 for Fashion-MNIST,\n"
               "the size the SN-GAN's judge sees)"),
    {.type = RP_OPTION_FLAG,
     .name = "--no-augment",
     .key = "augment",
     .offset = offsetof(T, augment),
     .size = sizeof(bool),
     .flags = SAVED | RP_OPT_NEGATE,
     .help = "no random crop and flip (resnets augment by default)"},
    RP_OPT_INT(T, pad, "--pad", "N", 0, 64, SAVED, "random-crop padding (default 2)"),
    RP_OPT_SECTION("image files (--dataset folder; torchvision's ImageNet recipe, docs/data.md):"),
    RP_OPT_DOC("--image-size", "N",
               "side of the crops (default 224): training takes\n"
               "RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a flip,\n"
               "evaluation Resize(--resize-size) and CenterCrop(N)"),
    RP_OPT_INT(T, folder.resize_size, "--resize-size", "N", 1, 65535, FOLDER(resize_size),
               "evaluation's short side before the centre crop (default\n"
               "N x 256/224: 256 for 224)"),
    RP_OPT_CUSTOM(T, folder.mean, sizeof(float[3]), "--mean", "R,G,B", parse_mean, FOLDER(mean),
                  "normalisation of pixel/255 (default ImageNet's"),
    RP_OPT_CUSTOM(T, folder.std, sizeof(float[3]), "--std", "R,G,B", parse_std, FOLDER(std),
                  "0.485,0.456,0.406 and 0.229,0.224,0.225)"),
    RP_OPT_INT(T, folder.threads, "--loader-threads", "N", 1, 256, RESUME,
               "threads decoding and augmenting images (default 2)"),
    RP_OPT_FLAG(T, folder.skip_bad, "--skip-bad", FOLDER(skip_bad) | RESUME,
                "log, count and replace a file that cannot be decoded (default:\n"
                "stop with an error naming it)"),
    {.type = RP_OPTION_FLAG,
     .name = "--no-dct-scaling",
     .offset = offsetof(T, folder.dct_scaling),
     .size = sizeof(bool),
     .flags = FOLDER(dct_scaling) | RP_OPT_NEGATE,
     .help = "decode every JPEG at full size (default: training crops\n"
             "decode large JPEGs at 1/2, 1/4... in libjpeg-turbo's DCT)"},
    RP_OPT_SECTION("optimisation:"),
    RP_OPT_INT(T, epochs, "--epochs", "N", 1, 100000, SAVED | RESUME,
               "passes over the training set (resnet20: 8, mlp: 10)"),
    RP_OPT_INT(T, batch, "--batch", "N", 1, 1 << 20, SAVED, "batch size (default 128)"),
    RP_OPT_FLOAT(T, lr, "--lr", "X", 0, 100, SAVED,
                 "peak learning rate (resnet: 0.1, mlp: 0.05; mlp async: 0.02)"),
    RP_OPT_FLOAT(T, momentum, "--momentum", "X", 0, 0.9999, SAVED, "SGD momentum (default 0.9)"),
    RP_OPT_FLAG(T, nesterov, "--nesterov", SAVED, "Nesterov momentum (default for resnets)"),
    {.type = RP_OPTION_FLOAT,
     .name = "--wd",
     .meta = "X",
     .key = "weight_decay",
     .offset = offsetof(T, weight_decay),
     .size = sizeof(float),
     .lo = 0,
     .hi = 1,
     .flags = SAVED,
     .help = "weight decay (default 5e-4)"},
    RP_OPT_CHOICE(T, schedule, "--schedule", "S", "cosine|constant", SAVED,
                  "cosine (default) or constant"),
    {.type = RP_OPTION_INT,
     .name = "--warmup",
     .meta = "N",
     .key = "warmup_epochs",
     .offset = offsetof(T, warmup_epochs),
     .size = sizeof(int),
     .lo = 0,
     .hi = 100000,
     .flags = SAVED,
     .help = "linear warm-up epochs (default 1)"},
    RP_OPT_CUSTOM(T, hidden, sizeof(((T *)0)->hidden), "--hidden", "A,B,...", parse_hidden,
                  RP_OPT_OWN_JSON, "mlp hidden widths (default 512,256)"),
    RP_OPT_SECTION("run:"),
    RP_OPT_UINT64(T, seed, "--seed", "N", 0, 0x7fffffff, SAVED, "random seed (default 1)"),
    RP_OPT_INT(T, threads, "--threads", "N", 1, 1024, OLD | RP_OPT_ZERO_OK | RESUME,
               "kernel threads in all (default: all cores)"),
    RP_OPT_INT(T, replicas, "--replicas", "N", 1, 256, OLD | RP_OPT_ZERO_OK | RESUME,
               "data-parallel replicas, threads of this process; the batch is\n"
               "split across them and batch norm is cross-replica (default:\n"
               "one per thread, the fastest layout measured for ResNet-20).\n"
               "Under mpirun: replicas in each rank (default 1)"),
    RP_OPT_INT(T, threads_per_replica, "--threads-per-replica", "N", 1, 1024,
               OLD | RP_OPT_ZERO_OK | RESUME,
               "kernel threads of each replica (default threads/replicas)"),
    RP_OPT_CHOICE(T, backend, "--backend", "B", "auto|threads|mpi", RESUME,
                  "threads, mpi or auto (default): MPI when started by mpirun or\n"
                  "srun, one process of threads otherwise (docs/distributed.md)"),
    RP_OPT_DOUBLE(T, comm_timeout, "--comm-timeout", "S", 0, 1e6, RP_OPT_ABOVE_LO | RESUME,
                  "seconds a replica waits for its peers in a collective (or a\n"
                  "parameter server) before the run fails naming them (default\n"
                  "$RP_COMM_TIMEOUT or 300); a replica stalled in its own\n"
                  "code then ends the command (exit 70) after one more\n"
                  "timeout (docs/distributed.md; RP_STUCK_EXIT=0: off)"),
    RP_OPT_CHOICE(T, regime, "--regime", "R", "sync|async", OLD | RESUME,
                  "sync (default): gradients averaged every step; async: each\n"
                  "replica pushes its gradients to parameter servers and pulls\n"
                  "fresh values, never waiting for the others; --batch is then\n"
                  "each push's batch (docs/training.md)"),
    RP_OPT_INT(T, ps, "--ps", "S", 1, 256, OLD | RESUME,
               "async: parameter servers (default 1): shards in this process,\n"
               "or under mpirun the last S ranks"),
    RP_OPT_INT(T, staleness, "--staleness", "K", -1, 1 << 30, OLD | RESUME,
               "async: no replica runs more than K steps ahead of the slowest\n"
               "(default: unbounded)"),
    RP_OPT_INT(T, sync_groups, "--sync-groups", "G", 1, 4096, OLD | RP_OPT_ZERO_OK | RESUME,
               "G groups of replicas/G: all-reduce inside a group, parameter\n"
               "servers (--ps, --staleness) between groups; each batch goes to\n"
               "one group and is split in it; G must divide --replicas\n"
               "(under mpirun: the ranks less --ps; docs/distributed.md)"),
    RP_OPT_INT(T, zero, "--zero", "[1|2|3]", 1, 3, RESUME | RP_OPT_BARE,
               "sync: ZeRO, each of N replicas keeps the optimizer state of\n"
               "1/N of the parameters (1, the default: gradients reduce-\n"
               "scattered, values all-gathered); 2: and only its 1/N of the\n"
               "gradients, each bucket kept and released as backward makes\n"
               "it; 3: and only its 1/N of the values, each layer's gathered\n"
               "when forward or backward uses it; the same values bitwise\n"
               "(docs/distributed.md)"),
    RP_OPT_INT(T, hsdp, "--hsdp", "G", 2, 4096, RESUME,
               "ZeRO as HSDP: the state sharded in groups of G consecutive\n"
               "replicas and replicated across the groups (reduced in the\n"
               "group, then across); implies --zero 1; G divides the replicas"),
    RP_OPT_FLAG(T, keep_gathered, "--keep-gathered", RESUME,
                "with --zero 3: keep each unit gathered in forward until the\n"
                "update (backward gathers nothing again; every value is held\n"
                "meanwhile, as with --zero 2; FSDP's reshard_after_forward=False)"),
    RP_OPT_FLAG(T, prefetch, "--prefetch", RESUME,
                "with --zero 3: start gathering the next unit while this one\n"
                "computes (non-blocking messages; one more unit held; FSDP's\n"
                "forward_prefetch and backward_prefetch)"),
    RP_OPT_CHOICE(T, precision, "--precision", "P", "f32|bf16", OLD | RESUME,
                  "f32 (default) or bf16: convolutions and linear layers multiply\n"
                  "in bf16 (AMX or AVX512-BF16 where the CPU has them) and\n"
                  "convolution and batch-norm outputs are stored in bf16; master\n"
                  "weights, gradients, norms' statistics, losses and optimizer\n"
                  "state stay f32; a run resumes in either (docs/precision.md)"),
    RP_OPT_ENUM(T, grad_dtype, "--grad-dtype", "T", "f32|bf16", train_dtypes, OLD | RESUME,
                "sync: the gradients' type on the wire, f32 (default) or bf16:\n"
                "half the bytes, reduced with f32 accumulation and rounded\n"
                "once; the replicas stay bitwise identical (docs/distributed.md)"),
    RP_OPT_SECTION("model parallelism (ResNets; docs/model-parallel.md):"),
    RP_OPT_INT(T, model_parallel, "--model-parallel", "W", 1, RP_RESNET_MAX_UNITS, OLD | RESUME,
               "each replica spans W workers, one stage of the network\n"
               "each (logical devices: the layers cut into W stages of\n"
               "balanced cost, the input entering on stage 0); --replicas\n"
               "counts replicas, so the job has replicas x W workers"),
    RP_OPT_CHOICE(T, pipeline, "--pipeline", "S", "gpipe|1f1b", OLD | RESUME,
                  "the schedule over the stages: gpipe (default) or 1f1b"),
    RP_OPT_INT(T, micro_batches, "--micro-batches", "M", 1, 1024, OLD | RESUME,
               "cut each replica's batch into M micro-batches that flow\n"
               "through the stages (default 1, or 2W with --pipeline); batch\n"
               "norm takes its statistics per micro-batch. Without\n"
               "--model-parallel: gradient accumulation over M micro-batches"),
    RP_OPT_INT(T, tensor_parallel, "--tensor-parallel", "T", 1, 64, OLD | RESUME,
               "split every residual block's convolutions over T workers\n"
               "(Megatron-style: one all-reduce forward and one backward per\n"
               "block); with --model-parallel W a replica has W x T workers"),
    RP_OPT_CUSTOM(T, slow_replica, SLOW_BYTES, "--slow", "R:F", parse_slow, RESUME,
                  "make replica R F times slower (a sleep each step), to study\n"
                  "stragglers (R must be one of the job's replicas)"),
    RP_OPT_CUSTOM(T, model, 0, "--faults", "SPEC", parse_faults, RESUME,
                  "inject faults into the workers' calls, e.g.\n"
                  "'kill:worker=1,run=20' or 'delay:worker=any,p=0.01,ms=50'\n"
                  "(docs/faults.md; also $RP_FAULTS)"),
    RP_OPT_PATH(T, out_dir, "--out", "DIR", 0,
                "run directory: checkpoint.safetensors, metrics.jsonl\n"
                "(default runs/MODEL, or runs/MODEL-2, -3... if taken)"),
    RP_OPT_PATH_REF(T, tensorboard, "--tensorboard", "DIR", RESUME,
                    "also write the metrics as TensorBoard event files in DIR\n"
                    "(view them with: tensorboard --logdir DIR)"),
    RP_OPT_PATH_REF(T, trace, "--trace", "FILE", RESUME,
                    "write a Chrome trace-event JSON of the run to FILE (open it in\n"
                    "ui.perfetto.dev; docs/tracing.md)"),
    RP_OPT_FLAG(T, force, "--force", 0, "overwrite a checkpoint already in --out"),
    RP_OPT_PATH_REF(T, resume, "--resume", "DIR", RESUME,
                    "continue the run saved in DIR (with it only the options\n"
                    "listed below may be given)"),
    RP_OPT_INT64(T, max_steps, "--max-steps", "N", 1, 1LL << 40, RESUME,
                 "stop after N steps in all (checkpointed, resumable)"),
    RP_OPT_FLAG(T, plan_check, "--plan-check", 0,
                "print the plan (`replicator plan`), then compare it with what\n"
                "each worker measures in its first steps (memory in percent,\n"
                "communication exactly); stops after 3 steps unless --max-steps\n"
                "says; exit status 1 if anything differs"),
    RP_OPT_FLAG(T, no_checkpoint, "--no-checkpoint", RESUME, "do not write checkpoints"),
    RP_OPT_INT(T, checkpoint_shards, "--checkpoint-shards", "N", 0, 1024, RESUME,
               "write each checkpoint as N shard files and an index\n"
               "(checkpoint.index.json, checkpoint.shards/; default 0: one whole\n"
               "file; `replicator checkpoint` reshards or consolidates them)"),
    RP_OPT_FLAG(T, background_save, "--background-save", RESUME,
                "write each checkpoint on a background thread while training goes\n"
                "on (one save in flight; docs/training.md)"),
    RP_OPT_FLAG(T, per_worker_save, "--checkpoint-per-worker", RESUME,
                "each worker writes its own shard of each checkpoint (its ZeRO\n"
                "shard, its pipeline stage), nothing gathered; a resume reads\n"
                "only each worker's pieces (sync and ZeRO; docs/training.md)"),
    RP_OPT_FLAG(T, quiet, "--quiet", RESUME, "only the summary"),
    RP_OPT_DOC("--help", NULL, "this text"),
    RP_OPTION_END,
};

#undef T
#undef SAVED
#undef RESUME
#undef OLD
#undef SLOW_BYTES
#undef FOLDER

const rp_option *train_opts_table(void)
{
    return train_table;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: replicator train [MODEL] [options]      (or: train resnet --model MODEL)\n"
               "       replicator train --resume DIR [--epochs N] [--threads N]\n"
               "\n"
               "Trains an image classifier and evaluates it on the test split after every epoch.\n"
               "MODEL is resnet20 (default), resnet18, resnet50 or mlp; `resnet` means resnet20.\n"
               "\n");
    rp_options_print_help(f, train_table);
    /* The resume rule, from the rows. */
    fprintf(f, "\nWith --resume only these may be given:");
    int col = 40;
    for (const rp_option *o = train_table; o->type != RP_OPTION_NONE; o++) {
        if (!(o->flags & RP_OPT_RESUME) || o->type == RP_OPTION_DOC) continue;
        int w = (int)strlen(o->name) + 1;
        if (col + w > 78) {
            fprintf(f, "\n ");
            col = 1;
        }
        fprintf(f, " %s", o->name);
        col += w;
    }
    fprintf(f,
            "\n\n"
            "A checkpoint is written after every epoch and on Ctrl-C/SIGTERM; --resume continues\n"
            "at the exact batch. `replicator eval DIR` reports a saved run's test accuracy.\n");
}

static bool parse_widths(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 16 || *n >= RP_MLP_MAX_LAYERS - 1) return false;
        out[(*n)++] = (int)v;
        if (*end && *end != ',') return false;
        s = *end ? end + 1 : end;
    }
    return *n > 0;
}

/* Three comma-separated numbers in [lo, hi], e.g. "0.485,0.456,0.406". */
static bool parse_triple(const char *s, float lo, float hi, float out[3])
{
    for (int k = 0; k < 3; k++) {
        char *end;
        float v = strtof(s, &end);
        if (end == s || !(v >= lo && v <= hi) || (k < 2 ? *end != ',' : *end != '\0')) return false;
        out[k] = v;
        s = end + 1;
    }
    return true;
}

static bool known_model(const char *m)
{
    return rp_classifier_known_model(m);
}

int train_opts_parse(int argc, char **argv, train_opts *o, const char **resume)
{
    *resume = NULL;
    int i = 1;
    const char *model = "resnet20";
    if (i < argc && argv[i][0] != '-') model = argv[i++];
    /* `train resnet --model resnet50` and `train --model resnet50` name the model by flag. */
    if (!strcmp(model, "resnet")) model = "resnet20";
    for (int k = i; k + 1 < argc; k++)
        if (!strcmp(argv[k], "--model")) model = argv[k + 1];
    if (!known_model(model)) {
        fprintf(stderr,
                "replicator train: unknown model \"%s\" (resnet20, resnet18, resnet50, mlp)\n",
                model);
        return 2;
    }
    train_opts_default(o, model);
    /* argv[i - 1] stands in for the command's name: the options start at argv[i]. */
    int n = argc - (i - 1);
    rp_option_fault fault;
    if (rp_options_parse(train_table, o, &n, argv + (i - 1), RP_OPTIONS_HELP, &o->given, &fault) !=
        RP_OK)
        return rp_options_print_fault("replicator train", &fault);
    if (fault.kind == RP_OPTION_HELP) {
        usage(stdout);
        return 1;
    }
    *resume = o->resume;
    bool lr_given = rp_options_was_given(train_table, &o->given, "--lr");
    bool pipeline_given = rp_options_was_given(train_table, &o->given, "--pipeline");
    bool micro_given = rp_options_was_given(train_table, &o->given, "--micro-batches");
    o->replicas_given = rp_options_was_given(train_table, &o->given, "--replicas");
    o->out_given = rp_options_was_given(train_table, &o->given, "--out");
    bool async = !strcmp(o->regime, "async");
    /*
     * The MLP (no batch norm) at its sync rate diverges with 3 async replicas: stale gradients
     * with momentum 0.9 overshoot (docs/training.md). ResNets keep their rate.
     */
    if (async && !lr_given && !strcmp(o->model, "mlp")) o->lr = 0.02f;
    bool groups = o->sync_groups > 1;
    if (groups && async) {
        fprintf(stderr,
                "replicator train: --sync-groups %d makes the groups asynchronous with "
                "each other already; it does not combine with --regime async\n",
                o->sync_groups);
        return 2;
    }
    if (groups && o->zero) {
        fprintf(stderr, "replicator train: --sync-groups keeps the optimizer state on the "
                        "parameter servers; it does not combine with --zero\n");
        return 2;
    }
    if (groups && o->replicas > 0 && o->replicas % o->sync_groups != 0) {
        fprintf(stderr,
                "replicator train: --sync-groups %d does not divide --replicas %d: every group "
                "needs the same number of replicas\n",
                o->sync_groups, o->replicas);
        return 2;
    }
    /* The batch is split across the replicas in sync: all of them, or a group's. (A resumed
       run's batch is the saved one, checked when the run is set up.) */
    int share = groups && o->replicas > 0 ? o->replicas / o->sync_groups : o->replicas;
    if (!async && !*resume && share > 0 && o->batch % share != 0) {
        fprintf(stderr,
                "replicator train: --batch %d does not split across %d replicas%s; use a "
                "multiple of %d\n",
                o->batch, share, groups ? " (a sync group)" : "", share);
        return 2;
    }
    if (async && o->grad_dtype == RP_BF16) {
        fprintf(stderr, "replicator train: --grad-dtype bf16 is for synchronous replicas (their "
                        "gradient all-reduce); parameter servers take f32 gradients; it does not "
                        "combine with --regime async\n");
        return 2;
    }
    if (async && o->zero) {
        fprintf(stderr, "replicator train: --zero shards the optimizer state of synchronous "
                        "replicas; it does not combine with --regime async\n");
        return 2;
    }
    if (pipeline_given && o->model_parallel < 2) {
        fprintf(stderr, "replicator train: --pipeline schedules a replica cut into stages; add "
                        "--model-parallel W (W >= 2)\n");
        return 2;
    }
    if (o->micro_batches > 1 && async) {
        fprintf(stderr, "replicator train: --micro-batches does not combine with --regime async\n");
        return 2;
    }
    if (pipeline_given && !micro_given) o->micro_batches = 2 * o->model_parallel;
    if (o->tensor_parallel > 1 && async) {
        fprintf(stderr, "replicator train: --tensor-parallel trains synchronously: a replica's "
                        "workers step together; it does not combine with --regime async\n");
        return 2;
    }
    if (groups && o->tensor_parallel > 1) {
        fprintf(stderr, "replicator train: --sync-groups does not combine with "
                        "--tensor-parallel yet\n");
        return 2;
    }
    if (o->model_parallel > 1 && async) {
        fprintf(stderr, "replicator train: --model-parallel trains synchronously: a replica's "
                        "stages step together; it does not combine with --regime async\n");
        return 2;
    }
    if (groups && (o->model_parallel > 1 || o->micro_batches > 1)) {
        fprintf(stderr,
                "replicator train: --sync-groups does not combine with %s yet: a group "
                "is made of single-worker replicas training whole batch shards\n",
                o->model_parallel > 1 ? "--model-parallel" : "--micro-batches");
        return 2;
    }
    if (strcmp(o->dataset, "folder") != 0) {
        static const char *const folder_only[] = {"--resize-size", "--mean",
                                                  "--std",         "--loader-threads",
                                                  "--skip-bad",    "--no-dct-scaling"};
        for (int k = 1; k < argc; k++)
            for (size_t m = 0; m < sizeof folder_only / sizeof folder_only[0]; m++)
                if (!strcmp(argv[k], folder_only[m]) && !*resume) {
                    fprintf(stderr,
                            "replicator train: %s is for image files (--dataset folder); "
                            "%s is read whole\n",
                            argv[k], o->dataset);
                    return 2;
                }
    }
    if (!strcmp(o->dataset, "folder") && o->folder.resize_size &&
        o->folder.resize_size < (o->image_size ? o->image_size : 224)) {
        fprintf(stderr,
                "replicator train: --resize-size %d is smaller than the crop (--image-size %d): "
                "the centre crop is cut from the resized image\n",
                o->folder.resize_size, o->image_size ? o->image_size : 224);
        return 2;
    }
    if (o->nesterov && o->momentum <= 0) {
        fprintf(stderr, "replicator train: --nesterov needs --momentum > 0\n");
        return 2;
    }
    /* The rest of the configuration comes from the checkpoint: refuse what would be ignored. */
    if (*resume && rp_options_check_resume(train_table, argc, argv, NULL, &fault) != RP_OK)
        return rp_options_print_fault("replicator train", &fault);
    if (!o->out_dir[0]) snprintf(o->out_dir, sizeof o->out_dir, "runs/%s", o->model);
    /* A plan check is a short run: the first steps, then the comparison. */
    if (o->plan_check && !o->max_steps) o->max_steps = 3;
    return 0;
}

char *train_opts_to_json(const train_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "model", o->model);
    if (rp_options_to_json(train_table, o, j) != RP_OK) {
        cJSON_Delete(j);
        return NULL;
    }
    /* The rows the program saves itself: the image-folder options, the MLP's widths. */
    if (!strcmp(o->dataset, "folder")) {
        const rp_folder_config *f = &o->folder;
        cJSON *fj = cJSON_AddObjectToObject(j, "folder");
        if (fj) {
            cJSON_AddNumberToObject(fj, "resize_size", f->resize_size);
            cJSON_AddNumberToObject(fj, "scale_min", f->scale_min);
            cJSON_AddNumberToObject(fj, "scale_max", f->scale_max);
            cJSON_AddNumberToObject(fj, "ratio_min", f->ratio_min);
            cJSON_AddNumberToObject(fj, "ratio_max", f->ratio_max);
            cJSON_AddItemToObject(fj, "mean", cJSON_CreateFloatArray(f->mean, 3));
            cJSON_AddItemToObject(fj, "std", cJSON_CreateFloatArray(f->std, 3));
            cJSON_AddBoolToObject(fj, "skip_bad", f->skip_bad);
            cJSON_AddBoolToObject(fj, "dct_scaling", f->dct_scaling);
        }
    }
    cJSON *hidden = cJSON_AddArrayToObject(j, "hidden");
    for (int i = 0; hidden && i < o->n_hidden; i++)
        cJSON_AddItemToArray(hidden, cJSON_CreateNumber(o->hidden[i]));
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

/* Keeps the first failure only: it explains the others. */
static bool reader_fail(train_config_reader *r, const char *key, const cJSON *v, const char *why)
{
    if (r->bad[0]) return false;
    if (!v) {
        snprintf(r->bad, sizeof r->bad, "\"%.64s\" is missing", key);
        return false;
    }
    char value[80];
    rp_options_value_text(v, value, sizeof value);
    snprintf(r->bad, sizeof r->bad, "\"%.64s\" is %s, %s", key, value, why);
    return false;
}

bool train_config_num(train_config_reader *r, const char *key, double lo, double hi, double *out)
{
    if (r->bad[0]) return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    if (!cJSON_IsNumber(v)) return reader_fail(r, key, v, "not a number");
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        char why[96], low[32], high[32];
        rp_options_number_text(lo, low, sizeof low);
        rp_options_number_text(hi, high, sizeof high);
        snprintf(why, sizeof why, "outside [%s, %s]", low, high);
        return reader_fail(r, key, v, why);
    }
    *out = v->valuedouble;
    return true;
}

bool train_config_str(train_config_reader *r, const char *key, char *dst, size_t size)
{
    if (r->bad[0]) return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    if (!cJSON_IsString(v)) return reader_fail(r, key, v, "not a string");
    size_t n = strlen(v->valuestring);
    if (n >= size) {
        char why[96];
        snprintf(why, sizeof why, "%zu bytes long, over the %zu it may have", n, size - 1);
        return reader_fail(r, key, v, why);
    }
    snprintf(dst, size, "%s", v->valuestring);
    return true;
}

bool train_config_bool(train_config_reader *r, const char *key, bool *dst)
{
    if (r->bad[0]) return false;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    if (!cJSON_IsBool(v)) return reader_fail(r, key, v, "not true or false");
    *dst = cJSON_IsTrue(v);
    return true;
}

bool train_config_refuse(train_config_reader *r, const char *key, const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    return reader_fail(r, key, v, why);
}

rp_status train_config_error(const train_config_reader *r, const char *what)
{
    return RP_ERROR(RP_ERR_FORMAT, "%s is incomplete or invalid: %s", what,
                    r->bad[0] ? r->bad : "it is not a JSON object");
}

/*
 * The image-folder options (--dataset folder), checked with the command line's ranges. The
 * decoding threads are not saved: like --threads they are this machine's, and the samples are
 * the same on any count (a resumed run takes --loader-threads again, or the default).
 */
static bool folder_from_json(train_config_reader *r, const cJSON *fj, rp_folder_config *f)
{
    train_config_reader fr = {.json = (cJSON *)fj};
    double resize = 0, s0 = 0, s1 = 0, r0 = 0, r1 = 0;
    bool ok = cJSON_IsObject(fj) && train_config_num(&fr, "resize_size", 0, 65535, &resize) &&
              train_config_num(&fr, "scale_min", 1e-9, 1, &s0) &&
              train_config_num(&fr, "scale_max", 1e-9, 1, &s1) &&
              train_config_num(&fr, "ratio_min", 1e-9, 1e6, &r0) &&
              train_config_num(&fr, "ratio_max", 1e-9, 1e6, &r1) &&
              train_config_bool(&fr, "skip_bad", &f->skip_bad) &&
              train_config_bool(&fr, "dct_scaling", &f->dct_scaling);
    const char *keys[2] = {"mean", "std"};
    float *dst[2] = {f->mean, f->std};
    for (int a = 0; ok && a < 2; a++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(fj, keys[a]);
        ok = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 3;
        for (int k = 0; ok && k < 3; k++) {
            const cJSON *v = cJSON_GetArrayItem(arr, k);
            ok = cJSON_IsNumber(v) && v->valuedouble > (a ? 0 : -1000) && v->valuedouble < 1000;
            if (ok) dst[a][k] = (float)v->valuedouble;
        }
        if (!ok) snprintf(fr.bad, sizeof fr.bad, "\"%s\" is not 3 numbers in range", keys[a]);
    }
    if (!ok) {
        snprintf(r->bad, sizeof r->bad, "\"folder\": %.200s", fr.bad[0] ? fr.bad : "not an object");
        return false;
    }
    f->resize_size = (int)resize;
    f->scale_min = (float)s0;
    f->scale_max = (float)s1;
    f->ratio_min = (float)r0;
    f->ratio_max = (float)r1;
    return true;
}

rp_status train_opts_from_json(train_opts *o, const char *json)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) return RP_ERROR(RP_ERR_FORMAT, "the checkpoint's configuration is not valid JSON");
    train_config_reader r = {.json = j};
    char model[32];
    bool ok = cJSON_IsObject(j) && train_config_str(&r, "model", model, sizeof model);
    if (ok && !known_model(model))
        ok = train_config_refuse(&r, "model",
                                 "not a classifier (resnet20, resnet18, resnet50, mlp)");
    if (ok) train_opts_default(o, model);
    /* A momentum just below 1 as a double is 1 as a float, which no later resume accepts. */
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "momentum");
    if (ok && cJSON_IsNumber(m) && m->valuedouble >= 0 && m->valuedouble <= 1 &&
        !((float)m->valuedouble < 1.0f))
        ok = train_config_refuse(&r, "momentum",
                                 "not below 1 as a float (a momentum must stay below 1)");
    /* The table's rows, with the command line's ranges; checked before any cast. */
    if (ok && rp_options_from_json(train_table, o, j, r.bad, sizeof r.bad) != RP_OK) ok = false;
    const cJSON *hidden = cJSON_GetObjectItemCaseSensitive(j, "hidden");
    if (ok && !(cJSON_IsArray(hidden) && cJSON_GetArraySize(hidden) < RP_MLP_MAX_LAYERS)) {
        char why[64];
        snprintf(why, sizeof why, "not an array of at most %d widths", RP_MLP_MAX_LAYERS - 1);
        ok = train_config_refuse(&r, "hidden", why);
    }
    if (ok) {
        o->n_hidden = 0;
        const cJSON *h;
        cJSON_ArrayForEach(h, hidden)
        {
            if (ok && !(cJSON_IsNumber(h) && h->valuedouble >= 1 && h->valuedouble <= 65536))
                ok = train_config_refuse(&r, "hidden", "with a width outside [1, 65536]");
            if (ok) o->hidden[o->n_hidden++] = (int)h->valuedouble;
        }
        const cJSON *fj = cJSON_GetObjectItemCaseSensitive(j, "folder");
        if (ok && fj) ok = folder_from_json(&r, fj, &o->folder);
    }
    rp_status status = ok ? RP_OK : train_config_error(&r, "the checkpoint's configuration");
    cJSON_Delete(j);
    return status;
}

void train_opts_classifier(const train_opts *o, rp_classifier_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "%s", o->model);
    snprintf(c->dataset, sizeof c->dataset, "%s", o->dataset);
    snprintf(c->data_dir, sizeof c->data_dir, "%s", o->data_dir);
    c->batch = o->batch;
    c->momentum = o->momentum;
    c->weight_decay = o->weight_decay;
    c->nesterov = o->nesterov;
    c->seed = o->seed;
    memcpy(c->hidden, o->hidden, sizeof c->hidden);
    c->n_hidden = o->n_hidden;
    c->augment = o->augment;
    c->pad = o->pad;
    c->limit = o->limit;
    c->image_size = o->image_size;
    c->folder = o->folder;
    if (c->folder.image_size <= 0) c->folder.image_size = 224;
    c->schedule = !strcmp(o->pipeline, "1f1b") ? RP_PIPE_1F1B : RP_PIPE_GPIPE;
    c->micro_batches = o->micro_batches;
}
