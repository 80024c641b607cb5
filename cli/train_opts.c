/*
 * train_opts.c - the options of `replicator train`: defaults, command-line
 * parsing, and the JSON form stored in checkpoints.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator train [MODEL] [options]      (or: train resnet --model MODEL)\n"
            "       replicator train --resume DIR [--epochs N] [--threads N]\n"
            "\n"
            "Trains an image classifier and evaluates it on the test split after every epoch.\n"
            "MODEL is resnet20 (default), resnet18, resnet50 or mlp; `resnet` means resnet20.\n"
            "\n"
            "data:\n"
            "  --dataset D       fashion-mnist (default), mnist, cifar10, synthetic, or folder:\n"
            "                    your own JPEG/PNG images (docs/data.md)\n"
            "  --data DIR        dataset directory (default $RP_DATA_DIR or\n"
            "                    /usr/share/datasets/fashion-mnist); for folder: DIR with\n"
            "                    train/<class>/*.jpg and val/<class>/*.jpg (torchvision's\n"
            "                    ImageFolder), list:DIR (DIR/train.txt, DIR/val.txt: lines\n"
            "                    \"path label\"), or tar:DIR (WebDataset shards DIR/train/*.tar,\n"
            "                    DIR/val/*.tar of NNNNNN.jpg + NNNNNN.cls)\n"
            "  --limit N         train on the first N samples only\n"
            "  --image-size N    pad the images to N x N, centred (e.g. 32 for Fashion-MNIST,\n"
            "                    the size the SN-GAN's judge sees)\n"
            "  --no-augment      no random crop and flip (resnets augment by default)\n"
            "  --pad N           random-crop padding (default 2)\n"
            "image files (--dataset folder; torchvision's ImageNet recipe, docs/data.md):\n"
            "  --image-size N    side of the crops (default 224): training takes\n"
            "                    RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a flip,\n"
            "                    evaluation Resize(--resize-size) and CenterCrop(N)\n"
            "  --resize-size N   evaluation's short side before the centre crop (default\n"
            "                    N x 256/224: 256 for 224)\n"
            "  --mean R,G,B      normalisation of pixel/255 (default ImageNet's\n"
            "  --std R,G,B       0.485,0.456,0.406 and 0.229,0.224,0.225)\n"
            "  --loader-threads N  threads decoding and augmenting images (default 2)\n"
            "  --skip-bad        log, count and replace a file that cannot be decoded (default:\n"
            "                    stop with an error naming it)\n"
            "  --no-dct-scaling  decode every JPEG at full size (default: training crops\n"
            "                    decode large JPEGs at 1/2, 1/4... in libjpeg-turbo's DCT)\n"
            "optimisation:\n"
            "  --epochs N        passes over the training set (resnet20: 8, mlp: 10)\n"
            "  --batch N         batch size (default 128)\n"
            "  --lr X            peak learning rate (resnet: 0.1, mlp: 0.05; mlp async: 0.02)\n"
            "  --momentum X      SGD momentum (default 0.9)\n"
            "  --nesterov        Nesterov momentum (default for resnets)\n"
            "  --wd X            weight decay (default 5e-4)\n"
            "  --schedule S      cosine (default) or constant\n"
            "  --warmup N        linear warm-up epochs (default 1)\n"
            "  --hidden A,B,...  mlp hidden widths (default 512,256)\n"
            "run:\n"
            "  --seed N          random seed (default 1)\n"
            "  --threads N       kernel threads in all (default: all cores)\n"
            "  --replicas N      data-parallel replicas, threads of this process; the batch is\n"
            "                    split across them and batch norm is cross-replica (default:\n"
            "                    one per thread, the fastest layout measured for ResNet-20).\n"
            "                    Under mpirun: replicas in each rank (default 1)\n"
            "  --threads-per-replica N  kernel threads of each replica (default threads/replicas)\n"
            "  --backend B       threads, mpi or auto (default): MPI when started by mpirun or\n"
            "                    srun, one process of threads otherwise (docs/distributed.md)\n"
            "  --comm-timeout S  seconds a replica waits for its peers in a collective (or a\n"
            "                    parameter server) before the run fails naming them (default\n"
            "                    $RP_COMM_TIMEOUT or 300); a replica stalled in its own\n"
            "                    code then ends the command (exit 70) after one more\n"
            "                    timeout (docs/distributed.md; RP_STUCK_EXIT=0: off)\n"
            "  --regime R        sync (default): gradients averaged every step; async: each\n"
            "                    replica pushes its gradients to parameter servers and pulls\n"
            "                    fresh values, never waiting for the others; --batch is then\n"
            "                    each push's batch (docs/training.md)\n"
            "  --ps S            async: parameter servers (default 1): shards in this process,\n"
            "                    or under mpirun the last S ranks\n"
            "  --staleness K     async: no replica runs more than K steps ahead of the slowest\n"
            "                    (default: unbounded)\n"
            "  --sync-groups G   G groups of replicas/G: all-reduce inside a group, parameter\n"
            "                    servers (--ps, --staleness) between groups; each batch goes to\n"
            "                    one group and is split in it; G must divide --replicas\n"
            "                    (under mpirun: the ranks less --ps; docs/distributed.md)\n"
            "  --zero            sync: ZeRO-1, each of N replicas keeps the optimizer state of\n"
            "                    1/N of the parameters (gradients reduce-scattered, values\n"
            "                    all-gathered); the same values bitwise (docs/distributed.md)\n"
            "  --precision P     f32 (default) or bf16: convolutions and linear layers multiply\n"
            "                    in bf16 (AMX or AVX512-BF16 where the CPU has them) and\n"
            "                    convolution and batch-norm outputs are stored in bf16; master\n"
            "                    weights, gradients, norms' statistics, losses and optimizer\n"
            "                    state stay f32; a run resumes in either (docs/precision.md)\n"
            "  --grad-dtype T    sync: the gradients' type on the wire, f32 (default) or bf16:\n"
            "                    half the bytes, reduced with f32 accumulation and rounded\n"
            "                    once; the replicas stay bitwise identical (docs/distributed.md)\n"
            "model parallelism (ResNets; docs/model-parallel.md):\n"
            "  --model-parallel W  each replica spans W workers, one stage of the network\n"
            "                    each (logical devices: the layers cut into W stages of\n"
            "                    balanced cost, the input entering on stage 0); --replicas\n"
            "                    counts replicas, so the job has replicas x W workers\n"
            "  --pipeline S      the schedule over the stages: gpipe (default) or 1f1b\n"
            "  --micro-batches M cut each replica's batch into M micro-batches that flow\n"
            "                    through the stages (default 1, or 2W with --pipeline); batch\n"
            "                    norm takes its statistics per micro-batch. Without\n"
            "                    --model-parallel: gradient accumulation over M micro-batches\n"
            "  --tensor-parallel T  split every residual block's convolutions over T workers\n"
            "                    (Megatron-style: one all-reduce forward and one backward per\n"
            "                    block); with --model-parallel W a replica has W x T workers\n"
            "  --slow R:F        make replica R F times slower (a sleep each step), to study\n"
            "                    stragglers (R must be one of the job's replicas)\n"
            "  --faults SPEC     inject faults into the workers' calls, e.g.\n"
            "                    'kill:worker=1,run=20' or 'delay:worker=any,p=0.01,ms=50'\n"
            "                    (docs/faults.md; also $RP_FAULTS)\n"
            "  --out DIR         run directory: checkpoint.safetensors, metrics.jsonl\n"
            "                    (default runs/MODEL, or runs/MODEL-2, -3... if taken)\n"
            "  --tensorboard DIR also write the metrics as TensorBoard event files in DIR\n"
            "                    (view them with: tensorboard --logdir DIR)\n"
            "  --trace FILE      write a Chrome trace-event JSON of the run to FILE (open it in\n"
            "                    ui.perfetto.dev; docs/tracing.md)\n"
            "  --force           overwrite a checkpoint already in --out\n"
            "  --resume DIR      continue the run saved in DIR (with it only --epochs, --data,\n"
            "                    --threads, --replicas, --threads-per-replica, --backend,\n"
            "                    --comm-timeout, --regime, --ps, --staleness, --zero,\n"
            "                    --grad-dtype,\n"
            "                    --model-parallel, --pipeline, --micro-batches, --slow,\n"
            "                    --sync-groups, --precision,\n"
            "                    --faults, --max-steps, --no-checkpoint, --tensorboard,\n"
            "                    --trace and\n"
            "                    --quiet)\n"
            "  --max-steps N     stop after N steps in all (checkpointed, resumable)\n"
            "  --plan-check      print the plan (`replicator plan`), then compare it with what\n"
            "                    each worker measures in its first steps (memory in percent,\n"
            "                    communication exactly); stops after 3 steps unless --max-steps\n"
            "                    says; exit status 1 if anything differs\n"
            "  --no-checkpoint   do not write checkpoints\n"
            "  --quiet           only the summary\n"
            "  --help            this text\n"
            "\n"
            "A checkpoint is written after every epoch and on Ctrl-C/SIGTERM; --resume continues\n"
            "at the exact batch. `replicator eval DIR` reports a saved run's test accuracy.\n");
}

bool train_copy_path(const char *cmd, const char *option, const char *value, char *dst, size_t size)
{
    size_t len = strlen(value);
    if (len == 0) {
        fprintf(stderr, "%s: %s needs a path, not an empty string\n", cmd, option);
        return false;
    }
    if (len >= size) {
        fprintf(stderr, "%s: %s is %zu bytes long, over the %zu a path may have\n", cmd, option,
                len, size - 1);
        return false;
    }
    if (dst) memcpy(dst, value, len + 1);
    return true;
}

bool train_parse_long(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

bool train_parse_float(const char *s, float lo, float hi, float *v)
{
    char *end;
    *v = strtof(s, &end);
    return end != s && !*end && *v >= lo && *v <= hi;
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
    bool lr_given = false, pipeline_given = false, micro_given = false;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--nesterov")) {
            o->nesterov = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(a, "--no-augment")) {
            o->augment = false;
            continue;
        }
        if (!strcmp(a, "--no-checkpoint")) {
            o->no_checkpoint = true;
            continue;
        }
        if (!strcmp(a, "--force")) {
            o->force = true;
            continue;
        }
        if (!strcmp(a, "--zero")) {
            o->zero = true;
            continue;
        }
        if (!strcmp(a, "--plan-check")) {
            o->plan_check = true;
            continue;
        }
        if (!strcmp(a, "--skip-bad")) {
            o->folder.skip_bad = true;
            continue;
        }
        if (!strcmp(a, "--no-dct-scaling")) {
            o->folder.dct_scaling = false;
            continue;
        }
        if (!v) {
            fprintf(stderr, "replicator train: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--data")) {
            if (!train_copy_path("replicator train", a, v, o->data_dir, sizeof o->data_dir))
                return 2;
        } else if (!strcmp(a, "--out")) {
            if (!train_copy_path("replicator train", a, v, o->out_dir, sizeof o->out_dir)) return 2;
            o->out_given = true;
        } else if (!strcmp(a, "--resume")) {
            if (!train_copy_path("replicator train", a, v, NULL, sizeof o->out_dir)) return 2;
            *resume = v;
        } else if (!strcmp(a, "--tensorboard")) {
            if (!train_copy_path("replicator train", a, v, NULL, CLI_PATH_MAX)) return 2;
            o->tensorboard = v;
        } else if (!strcmp(a, "--trace")) {
            if (!train_copy_path("replicator train", a, v, NULL, CLI_PATH_MAX)) return 2;
            o->trace = v;
        } else if (!strcmp(a, "--model"))
            continue; /* read above, before the defaults */
        else if (!strcmp(a, "--dataset")) {
            ok = !strcmp(v, "fashion-mnist") || !strcmp(v, "mnist") || !strcmp(v, "cifar10") ||
                 !strcmp(v, "synthetic") || !strcmp(v, "folder");
            snprintf(o->dataset, sizeof o->dataset, "%s", v);
        } else if (!strcmp(a, "--schedule")) {
            ok = !strcmp(v, "cosine") || !strcmp(v, "constant");
            snprintf(o->schedule, sizeof o->schedule, "%s", v);
        } else if (!strcmp(a, "--epochs")) {
            ok = train_parse_long(v, 1, 100000, &n);
            o->epochs = (int)n;
        } else if (!strcmp(a, "--batch")) {
            ok = train_parse_long(v, 1, 1 << 20, &n);
            o->batch = (int)n;
        } else if (!strcmp(a, "--warmup")) {
            ok = train_parse_long(v, 0, 100000, &n);
            o->warmup_epochs = (int)n;
        } else if (!strcmp(a, "--seed")) {
            ok = train_parse_long(v, 0, 0x7fffffffL, &n);
            o->seed = (uint64_t)n;
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
        } else if (!strcmp(a, "--comm-timeout")) {
            char *end;
            o->comm_timeout = strtod(v, &end);
            ok = *end == '\0' && o->comm_timeout > 0 && o->comm_timeout <= 1e6;
        } else if (!strcmp(a, "--regime")) {
            ok = !strcmp(v, "sync") || !strcmp(v, "async");
            snprintf(o->regime, sizeof o->regime, "%s", v);
        } else if (!strcmp(a, "--precision")) {
            ok = !strcmp(v, "f32") || !strcmp(v, "bf16");
            snprintf(o->precision, sizeof o->precision, "%s", ok ? v : "f32");
        } else if (!strcmp(a, "--grad-dtype")) {
            ok = !strcmp(v, "f32") || !strcmp(v, "bf16");
            o->grad_dtype = !strcmp(v, "bf16") ? RP_BF16 : RP_F32;
        } else if (!strcmp(a, "--sync-groups")) {
            ok = train_parse_long(v, 1, 4096, &n);
            o->sync_groups = (int)n;
        } else if (!strcmp(a, "--ps")) {
            ok = train_parse_long(v, 1, 256, &n);
            o->ps = (int)n;
        } else if (!strcmp(a, "--model-parallel")) {
            ok = train_parse_long(v, 1, RP_RESNET_MAX_UNITS, &n);
            o->model_parallel = (int)n;
        } else if (!strcmp(a, "--tensor-parallel")) {
            ok = train_parse_long(v, 1, 64, &n);
            o->tensor_parallel = (int)n;
        } else if (!strcmp(a, "--pipeline")) {
            ok = !strcmp(v, "gpipe") || !strcmp(v, "1f1b");
            snprintf(o->pipeline, sizeof o->pipeline, "%s", v);
            pipeline_given = true;
        } else if (!strcmp(a, "--micro-batches")) {
            ok = train_parse_long(v, 1, 1024, &n);
            o->micro_batches = (int)n;
            micro_given = true;
        } else if (!strcmp(a, "--staleness")) {
            ok = train_parse_long(v, -1, 1L << 30, &n);
            o->staleness = (int)n;
        } else if (!strcmp(a, "--slow")) {
            char *end;
            long r = strtol(v, &end, 10);
            ok = end != v && *end == ':' && r >= 0 && r < 4096;
            if (ok) ok = train_parse_float(end + 1, 1.0f, 1000.0f, &o->slow_factor);
            o->slow_replica = (int)r;
        } else if (!strcmp(a, "--faults")) {
            /* Process-wide, not saved in the checkpoint: a resumed run injects only what it is
               given. */
            if (rp_comm_faults_set(v, "--faults") != RP_OK) {
                fprintf(stderr, "replicator train: %s\n", rp_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--threads-per-replica")) {
            ok = train_parse_long(v, 1, 1024, &n);
            o->threads_per_replica = (int)n;
        } else if (!strcmp(a, "--pad")) {
            ok = train_parse_long(v, 0, 64, &n);
            o->pad = (int)n;
        } else if (!strcmp(a, "--limit")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->limit = n;
        } else if (!strcmp(a, "--image-size")) {
            ok = train_parse_long(v, 1, 4096, &n);
            o->image_size = (int)n;
        } else if (!strcmp(a, "--resize-size")) {
            ok = train_parse_long(v, 1, 65535, &n);
            o->folder.resize_size = (int)n;
        } else if (!strcmp(a, "--loader-threads")) {
            ok = train_parse_long(v, 1, 256, &n);
            o->folder.threads = (int)n;
        } else if (!strcmp(a, "--mean")) {
            ok = parse_triple(v, -1000.0f, 1000.0f, o->folder.mean);
        } else if (!strcmp(a, "--std")) {
            ok = parse_triple(v, 1e-6f, 1000.0f, o->folder.std);
        } else if (!strcmp(a, "--max-steps")) {
            ok = train_parse_long(v, 1, 1L << 40, &n);
            o->max_steps = n;
        } else if (!strcmp(a, "--lr")) {
            ok = train_parse_float(v, 0.0f, 100.0f, &o->lr);
            lr_given = true;
        } else if (!strcmp(a, "--momentum"))
            ok = train_parse_float(v, 0.0f, 0.9999f, &o->momentum);
        else if (!strcmp(a, "--wd"))
            ok = train_parse_float(v, 0.0f, 1.0f, &o->weight_decay);
        else if (!strcmp(a, "--hidden"))
            ok = parse_widths(v, o->hidden, &o->n_hidden);
        else {
            fprintf(stderr, "replicator train: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "replicator train: bad value \"%s\" for %s (see --help)\n", v, a);
            return 2;
        }
    }
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
    /* The batch is split across the replicas in sync: all of them, or a group's. */
    int share = groups && o->replicas > 0 ? o->replicas / o->sync_groups : o->replicas;
    if (!async && share > 0 && o->batch % share != 0) {
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
    if (*resume) {
        /* The rest of the configuration comes from the checkpoint: refuse what would be ignored. */
        static const char *const allowed[] = {"--resume",
                                              "--epochs",
                                              "--data",
                                              "--threads",
                                              "--replicas",
                                              "--threads-per-replica",
                                              "--max-steps",
                                              "--no-checkpoint",
                                              "--quiet",
                                              "--backend",
                                              "--comm-timeout",
                                              "--regime",
                                              "--ps",
                                              "--staleness",
                                              "--slow",
                                              "--faults",
                                              "--tensorboard",
                                              "--trace",
                                              "--zero",
                                              "--model-parallel",
                                              "--pipeline",
                                              "--micro-batches",
                                              "--sync-groups",
                                              "--tensor-parallel",
                                              "--precision",
                                              "--grad-dtype",
                                              "--loader-threads",
                                              "--skip-bad"};
        for (int k = 1; k < argc; k++) {
            if (strncmp(argv[k], "--", 2) != 0) continue;
            bool ok = false;
            for (size_t m = 0; m < sizeof allowed / sizeof allowed[0]; m++)
                ok |= !strcmp(argv[k], allowed[m]);
            if (!ok) {
                fprintf(stderr,
                        "replicator train: %s cannot be changed when resuming; the run's "
                        "configuration comes from its checkpoint (start a new run with --out)\n",
                        argv[k]);
                return 2;
            }
        }
    }
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
    cJSON_AddStringToObject(j, "dataset", o->dataset);
    cJSON_AddStringToObject(j, "data_dir", o->data_dir);
    cJSON_AddNumberToObject(j, "epochs", o->epochs);
    cJSON_AddNumberToObject(j, "batch", o->batch);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "momentum", o->momentum);
    cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    cJSON_AddBoolToObject(j, "nesterov", o->nesterov);
    cJSON_AddStringToObject(j, "schedule", o->schedule);
    cJSON_AddNumberToObject(j, "warmup_epochs", o->warmup_epochs);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddBoolToObject(j, "augment", o->augment);
    cJSON_AddNumberToObject(j, "pad", o->pad);
    cJSON_AddNumberToObject(j, "limit", (double)o->limit);
    cJSON_AddNumberToObject(j, "image_size", o->image_size);
    cJSON_AddNumberToObject(j, "threads", o->threads);
    cJSON_AddNumberToObject(j, "replicas", o->replicas);
    cJSON_AddNumberToObject(j, "threads_per_replica", o->threads_per_replica);
    cJSON_AddStringToObject(j, "regime", o->regime);
    cJSON_AddStringToObject(j, "precision", o->precision);
    cJSON_AddNumberToObject(j, "ps", o->ps);
    cJSON_AddNumberToObject(j, "sync_groups", o->sync_groups);
    cJSON_AddStringToObject(j, "grad_dtype", rp_dtype_name(o->grad_dtype));
    cJSON_AddNumberToObject(j, "staleness", o->staleness);
    cJSON_AddNumberToObject(j, "model_parallel", o->model_parallel);
    cJSON_AddNumberToObject(j, "tensor_parallel", o->tensor_parallel);
    cJSON_AddStringToObject(j, "pipeline", o->pipeline);
    cJSON_AddNumberToObject(j, "micro_batches", o->micro_batches);
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

/* The fewest digits that read back as the same double: as the file most likely has it. */
static void number_text(double x, char *buf, size_t size)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
}

/* A short text of a value for a message: a number in full, a string quoted, cut at 64 bytes. */
static void value_text(const cJSON *v, char *buf, size_t size)
{
    if (cJSON_IsNumber(v)) {
        number_text(v->valuedouble, buf, size);
        return;
    }
    char *text = cJSON_PrintUnformatted(v);
    if (!text) {
        snprintf(buf, size, "a value");
        return;
    }
    size_t n = strlen(text);
    snprintf(buf, size, "%.64s%s", text, n > 64 ? "..." : "");
    free(text);
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
    value_text(v, value, sizeof value);
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
        number_text(lo, low, sizeof low);
        number_text(hi, high, sizeof high);
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

/* Optional keys (absent in runs saved before they existed) keep their default when absent. */
static bool get_num(const cJSON *j, const char *key, double *dst)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) return false;
    *dst = v->valuedouble;
    return true;
}

static bool get_str(const cJSON *j, const char *key, char *dst, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= size) return false;
    snprintf(dst, size, "%s", v->valuestring);
    return true;
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
    double epochs = 0, batch = 0, lr = 0, momentum = 0, wd = 0, warmup = 0, seed = 0, pad = 0,
           limit = 0;
    bool ok = cJSON_IsObject(j) && train_config_str(&r, "model", model, sizeof model);
    if (ok && !known_model(model))
        ok = train_config_refuse(&r, "model",
                                 "not a classifier (resnet20, resnet18, resnet50, mlp)");
    if (ok) train_opts_default(o, model);
    /* The same ranges as the command line; checked before any cast. */
    ok = ok && train_config_str(&r, "dataset", o->dataset, sizeof o->dataset) &&
         train_config_str(&r, "data_dir", o->data_dir, sizeof o->data_dir) &&
         train_config_str(&r, "schedule", o->schedule, sizeof o->schedule) &&
         train_config_num(&r, "epochs", 1, 100000, &epochs) &&
         train_config_num(&r, "batch", 1, 1 << 20, &batch) &&
         train_config_num(&r, "lr", 0, 100, &lr) &&
         train_config_num(&r, "momentum", 0, 1, &momentum) &&
         train_config_num(&r, "weight_decay", 0, 1, &wd) &&
         train_config_num(&r, "warmup_epochs", 0, 100000, &warmup) &&
         train_config_num(&r, "seed", 0, 0x7fffffff, &seed) &&
         train_config_num(&r, "pad", 0, 64, &pad) &&
         train_config_num(&r, "limit", 0, 1e12, &limit) &&
         train_config_bool(&r, "nesterov", &o->nesterov) &&
         train_config_bool(&r, "augment", &o->augment);
    /* A momentum just below 1 as a double is 1 as a float, which no later resume accepts. */
    if (ok && !((float)momentum < 1.0f))
        ok = train_config_refuse(&r, "momentum",
                                 "not below 1 as a float (a momentum must stay below 1)");
    if (ok && strcmp(o->schedule, "cosine") && strcmp(o->schedule, "constant"))
        ok = train_config_refuse(&r, "schedule", "not cosine or constant");
    const cJSON *hidden = cJSON_GetObjectItemCaseSensitive(j, "hidden");
    if (ok && !(cJSON_IsArray(hidden) && cJSON_GetArraySize(hidden) < RP_MLP_MAX_LAYERS)) {
        char why[64];
        snprintf(why, sizeof why, "not an array of at most %d widths", RP_MLP_MAX_LAYERS - 1);
        ok = train_config_refuse(&r, "hidden", why);
    }
    if (ok) {
        o->epochs = (int)epochs;
        o->batch = (int)batch;
        o->lr = (float)lr;
        o->momentum = (float)momentum;
        o->weight_decay = (float)wd;
        o->warmup_epochs = (int)warmup;
        o->seed = (uint64_t)seed;
        o->pad = (int)pad;
        o->limit = (int64_t)limit;
        o->n_hidden = 0;
        const cJSON *h;
        cJSON_ArrayForEach(h, hidden)
        {
            if (ok && !(cJSON_IsNumber(h) && h->valuedouble >= 1 && h->valuedouble <= 65536))
                ok = train_config_refuse(&r, "hidden", "with a width outside [1, 65536]");
            if (ok) o->hidden[o->n_hidden++] = (int)h->valuedouble;
        }
        /* Runs saved before --image-size existed kept the stored size. */
        double image_size = 0;
        if (get_num(j, "image_size", &image_size) && image_size >= 0 && image_size <= 4096)
            o->image_size = (int)image_size;
        double threads = 0;
        if (get_num(j, "threads", &threads) && threads >= 0 && threads <= 1024)
            o->threads = (int)threads;
        double replicas = 0, tpr = 0;
        if (get_num(j, "replicas", &replicas) && replicas >= 1 && replicas <= 256)
            o->replicas = (int)replicas;
        if (get_num(j, "threads_per_replica", &tpr) && tpr >= 0 && tpr <= 1024)
            o->threads_per_replica = (int)tpr;
        /* Runs saved before the async regime existed are sync. */
        double ps = 1, staleness = -1;
        char regime[8] = "sync";
        if (get_str(j, "regime", regime, sizeof regime) && !strcmp(regime, "async"))
            snprintf(o->regime, sizeof o->regime, "async");
        /* Runs saved before --precision existed were f32. */
        char precision[8] = "f32";
        if (get_str(j, "precision", precision, sizeof precision) && !strcmp(precision, "bf16"))
            snprintf(o->precision, sizeof o->precision, "bf16");
        if (get_num(j, "ps", &ps) && ps >= 1 && ps <= 256) o->ps = (int)ps;
        /* Runs saved before --grad-dtype sent f32. */
        char grad[8] = "f32";
        if (get_str(j, "grad_dtype", grad, sizeof grad) && !strcmp(grad, "bf16"))
            o->grad_dtype = RP_BF16;
        /* Runs saved before sync groups existed had none. */
        double groups = 0;
        if (get_num(j, "sync_groups", &groups) && groups >= 0 && groups <= 4096)
            o->sync_groups = (int)groups;
        if (get_num(j, "staleness", &staleness) && staleness >= -1 && staleness <= 1e9)
            o->staleness = (int)staleness;
        /* Runs saved before model parallelism ran whole. */
        double stages = 1, micro = 1;
        char pipeline[8] = "gpipe";
        if (get_num(j, "model_parallel", &stages) && stages >= 1 && stages <= RP_RESNET_MAX_UNITS)
            o->model_parallel = (int)stages;
        double tp = 1;
        if (get_num(j, "tensor_parallel", &tp) && tp >= 1 && tp <= 64) o->tensor_parallel = (int)tp;
        if (get_str(j, "pipeline", pipeline, sizeof pipeline) && !strcmp(pipeline, "1f1b"))
            snprintf(o->pipeline, sizeof o->pipeline, "1f1b");
        if (get_num(j, "micro_batches", &micro) && micro >= 1 && micro <= 1024)
            o->micro_batches = (int)micro;
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
