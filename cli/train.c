/*
 * train.c - `replicator train`: trains a classifier on an image dataset and
 * reports progress, per-epoch test accuracy and a summary.
 *
 * The loop reads top to bottom: load data, build the model and optimizer,
 * then per epoch shuffle, step through batches, evaluate. Each step resets
 * the tape, so the step's memory is reused and nothing is allocated once the
 * arena has seen one step.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "kernels/kernels.h"
#include "models/mlp/mlp.h"

typedef struct train_opts {
    const char *model;
    const char *data_dir;
    const char *out_dir;
    int epochs;
    int batch;
    float lr;
    float momentum;
    float weight_decay;
    bool nesterov;
    const char *schedule; /* cosine | constant */
    int warmup_epochs;
    uint64_t seed;
    int threads;
    int hidden[RP_MLP_MAX_LAYERS];
    int n_hidden;
    int64_t limit;        /* use the first `limit` training samples (0: all) */
    bool quiet;
} train_opts;

static void train_usage(FILE *f)
{
    fprintf(f,
            "usage: replicator train [mlp] [options]\n"
            "\n"
            "Trains a classifier on Fashion-MNIST (or MNIST in the same IDX layout), evaluating\n"
            "on the test split after every epoch.\n"
            "\n"
            "options:\n"
            "  --data DIR        dataset directory (default $RP_DATA_DIR or\n"
            "                    /usr/share/datasets/fashion-mnist)\n"
            "  --epochs N        passes over the training set (default 10)\n"
            "  --batch N         batch size (default 128)\n"
            "  --lr X            peak learning rate (default 0.05)\n"
            "  --momentum X      SGD momentum (default 0.9)\n"
            "  --nesterov        use Nesterov momentum\n"
            "  --wd X            weight decay (default 5e-4)\n"
            "  --schedule S      cosine or constant (default cosine)\n"
            "  --warmup N        warm-up epochs (default 1)\n"
            "  --hidden A,B,...  hidden layer widths of the mlp (default 512,256)\n"
            "  --seed N          random seed (default 1)\n"
            "  --threads N       kernel threads (default: all cores)\n"
            "  --limit N         train on the first N samples only (for quick checks)\n"
            "  --out DIR         write metrics.jsonl there (default runs/<model>)\n"
            "  --quiet           no progress output, only the summary\n"
            "  --help            this text\n");
}

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* Parses "512,256" into widths; false on a malformed list. */
static bool parse_widths(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || *n >= RP_MLP_MAX_LAYERS - 1) return false;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return true;
}

static bool parse_int(const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return !errno && end != s && !*end && *v >= lo && *v <= hi;
}

static bool parse_float(const char *s, float lo, float hi, float *v)
{
    char *end;
    *v = strtof(s, &end);
    return end != s && !*end && *v >= lo && *v <= hi;
}

/* Returns 0 and fills opts, 1 after --help, 2 on a bad flag (message printed). */
static int parse_args(int argc, char **argv, train_opts *o)
{
    *o = (train_opts){.model = "mlp", .data_dir = rp_env_get()->data_dir, .epochs = 10,
                      .batch = 128, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f,
                      .schedule = "cosine", .warmup_epochs = 1, .seed = 1, .threads = 0,
                      .hidden = {512, 256}, .n_hidden = 2};
    int i = 1;
    if (i < argc && argv[i][0] != '-') o->model = argv[i++];
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        bool ok = true, takes = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            train_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--nesterov")) {
            o->nesterov = true;
            takes = false;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
            takes = false;
        } else if (!v) {
            fprintf(stderr, "replicator train: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "--data")) {
            o->data_dir = v;
        } else if (!strcmp(a, "--out")) {
            o->out_dir = v;
        } else if (!strcmp(a, "--epochs")) {
            ok = parse_int(v, 1, 100000, &n);
            o->epochs = (int)n;
        } else if (!strcmp(a, "--batch")) {
            ok = parse_int(v, 1, 1 << 20, &n);
            o->batch = (int)n;
        } else if (!strcmp(a, "--warmup")) {
            ok = parse_int(v, 0, 100000, &n);
            o->warmup_epochs = (int)n;
        } else if (!strcmp(a, "--seed")) {
            ok = parse_int(v, 0, 0x7fffffffL, &n);
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--threads")) {
            ok = parse_int(v, 1, 1024, &n);
            o->threads = (int)n;
        } else if (!strcmp(a, "--limit")) {
            ok = parse_int(v, 1, 1L << 40, &n);
            o->limit = n;
        } else if (!strcmp(a, "--lr")) {
            ok = parse_float(v, 0.0f, 100.0f, &o->lr);
        } else if (!strcmp(a, "--momentum")) {
            ok = parse_float(v, 0.0f, 0.9999f, &o->momentum);
        } else if (!strcmp(a, "--wd")) {
            ok = parse_float(v, 0.0f, 1.0f, &o->weight_decay);
        } else if (!strcmp(a, "--schedule")) {
            o->schedule = v;
            ok = !strcmp(v, "cosine") || !strcmp(v, "constant");
        } else if (!strcmp(a, "--hidden")) {
            ok = parse_widths(v, o->hidden, &o->n_hidden);
        } else {
            fprintf(stderr, "replicator train: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "replicator train: bad value \"%s\" for %s (see --help)\n", v, a);
            return 2;
        }
        if (takes) i++;
    }
    if (strcmp(o->model, "mlp") != 0) {
        fprintf(stderr, "replicator train: unknown model \"%s\" (available: mlp)\n", o->model);
        return 2;
    }
    return 0;
}

/* Creates dir and its parents; true if it exists afterwards. */
static bool make_dirs(const char *dir)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Fisher-Yates shuffle of 0..n-1 from the epoch's own stream: reproducible from the seed. */
static void shuffle(int32_t *order, int64_t n, uint64_t seed, int epoch)
{
    for (int64_t i = 0; i < n; i++) order[i] = (int32_t)i;
    rp_rng rng = rp_rng_make(seed, 0x5348554646ull + (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rp_rng_below(&rng, (uint32_t)(i + 1));
        int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

/* Copies samples order[first..first+n) into x [n,h,w,c] normalised, and their labels. */
static void gather_batch(const rp_dataset *ds, const int32_t *order, int64_t first, int n,
                         const float *mean, const float *inv_std, float *x, int32_t *labels)
{
    int64_t sample = (int64_t)ds->h * ds->w * ds->c;
    for (int i = 0; i < n; i++) {
        int64_t idx = order ? order[first + i] : first + i;
        const uint8_t *src = ds->pixels + idx * sample;
        float *dst = x + (int64_t)i * sample;
        for (int64_t j = 0; j < sample; j++) {
            int ch = (int)(j % ds->c);
            dst[j] = ((float)src[j] * (1.0f / 255.0f) - mean[ch]) * inv_std[ch];
        }
        labels[i] = ds->labels[idx];
    }
}

/* Index of the largest of n values. */
static int argmax(const float *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

typedef struct eval_result {
    double loss;
    double accuracy;
} eval_result;

static rp_status evaluate(rp_tape *t, const rp_mlp *m, const rp_dataset *ds, int batch,
                          const float *mean, const float *inv_std, eval_result *r)
{
    int64_t correct = 0;
    double loss_sum = 0;
    rp_tape_set_recording(t, false);
    for (int64_t first = 0; first < ds->n; first += batch) {
        int n = (int)(ds->n - first < batch ? ds->n - first : batch);
        rp_tape_reset(t);
        rp_tensor *x = rp_tensor_new(t, 4, (int[]){n, ds->h, ds->w, ds->c});
        int32_t *labels = rp_arena_alloc(rp_tape_arena(t), (size_t)n * sizeof(int32_t));
        if (!x || !labels) return rp_last_status();
        gather_batch(ds, NULL, first, n, mean, inv_std, x->data, labels);
        rp_tensor *logits = rp_mlp_forward(t, m, x);
        rp_tensor *loss = rp_softmax_cross_entropy(t, logits, labels);
        if (!loss) return rp_last_status();
        loss_sum += (double)rp_item(loss) * n;
        int classes = logits->shape[1];
        for (int i = 0; i < n; i++)
            correct += argmax(logits->data + (int64_t)i * classes, classes) == labels[i];
    }
    rp_tape_set_recording(t, true);
    rp_tape_reset(t);
    r->loss = loss_sum / (double)ds->n;
    r->accuracy = (double)correct / (double)ds->n;
    return RP_OK;
}

static void format_duration(double s, char *buf, size_t size)
{
    if (s < 0 || !isfinite(s)) s = 0;
    int total = (int)(s + 0.5);
    if (total >= 3600)
        snprintf(buf, size, "%dh%02dm", total / 3600, total / 60 % 60);
    else
        snprintf(buf, size, "%dm%02ds", total / 60, total % 60);
}

int rp_cli_train(int argc, char **argv)
{
    train_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;

    rp_status status = RP_OK;
    rp_dataset *train = NULL, *test = NULL;
    rp_mlp *model = NULL;
    rp_optimizer *opt = NULL;
    rp_tape *tape = NULL;
    int32_t *order = NULL;
    FILE *metrics = NULL;
    bool tty = isatty(STDERR_FILENO) && !o.quiet;

    rp_kernels_set_threads(o.threads);
    RP_TRY(rp_dataset_load_mnist(&train, o.data_dir, "train"));
    RP_TRY(rp_dataset_load_mnist(&test, o.data_dir, "test"));
    int64_t n_train = o.limit && o.limit < train->n ? o.limit : train->n;
    if (n_train < o.batch) {
        status = RP_ERROR(RP_ERR_INVALID, "batch %d is larger than the %lld training samples",
                          o.batch, (long long)n_train);
        goto cleanup;
    }
    float mean[4], std[4], inv_std[4];
    RP_TRY(rp_dataset_channel_stats(train, mean, std));
    for (int c = 0; c < train->c; c++) inv_std[c] = 1.0f / std[c];

    int in = train->h * train->w * train->c;
    RP_TRY(rp_mlp_create(&model, in, o.hidden, o.n_hidden, train->num_classes, o.seed));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = o.momentum;
    oc.nesterov = o.nesterov;
    oc.weight_decay = o.weight_decay;
    RP_TRY(rp_optimizer_create(&opt, model->params, &oc));
    RP_TRY(rp_tape_create(&tape, 0));
    order = rp_alloc((size_t)train->n * sizeof(int32_t));
    if (!order) {
        status = rp_last_status();
        goto cleanup;
    }

    int64_t steps_per_epoch = n_train / o.batch, total_steps = steps_per_epoch * o.epochs;
    rp_schedule sched = !strcmp(o.schedule, "cosine")
                            ? rp_schedule_cosine(o.lr, steps_per_epoch * o.warmup_epochs, total_steps)
                            : rp_schedule_constant(o.lr);
    if (strcmp(o.schedule, "cosine") != 0) sched.warmup_steps = steps_per_epoch * o.warmup_epochs;

    char out_dir[512];
    snprintf(out_dir, sizeof out_dir, "%s", o.out_dir ? o.out_dir : "runs/mlp");
    if (make_dirs(out_dir)) {
        char path[600];
        snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
        metrics = fopen(path, "w");
    }
    if (!metrics) rp_warn("cannot write metrics under %s; continuing without them", out_dir);

    if (!o.quiet) {
        fprintf(stderr,
                "replicator train %s: %s (%lld train, %lld test, %dx%dx%d, %d classes)\n"
                "  %lld parameters, batch %d, %d epochs (%lld steps), lr %g %s, momentum %g%s, "
                "wd %g, seed %llu, %d threads, kernels %s\n",
                o.model, train->name, (long long)n_train, (long long)test->n, train->h, train->w,
                train->c, train->num_classes, (long long)rp_params_trainable_numel(model->params),
                o.batch, o.epochs, (long long)total_steps, (double)o.lr, o.schedule,
                (double)o.momentum, o.nesterov ? " (nesterov)" : "", (double)o.weight_decay,
                (unsigned long long)o.seed, rp_kernels_get_threads(), rp_kernels_active()->name);
    }

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    double t_start = rp_now_s(), t_train = 0, best_acc = 0;
    eval_result ev = {0, 0};
    int64_t step = 0, images = 0;
    int epochs_done = 0;
    for (int epoch = 0; epoch < o.epochs && !stop_requested; epoch++) {
        shuffle(order, n_train, o.seed, epoch);
        double t_epoch = rp_now_s(), t_print = 0, loss_sum = 0;
        int64_t loss_n = 0;
        for (int64_t s = 0; s < steps_per_epoch && !stop_requested; s++, step++) {
            rp_tape_reset(tape);
            rp_tensor *x = rp_tensor_new(tape, 4, (int[]){o.batch, train->h, train->w, train->c});
            int32_t *labels = rp_arena_alloc(rp_tape_arena(tape), (size_t)o.batch * sizeof(int32_t));
            if (!x || !labels) {
                status = rp_last_status();
                goto cleanup;
            }
            gather_batch(train, order, s * o.batch, o.batch, mean, inv_std, x->data, labels);
            rp_tensor *loss = rp_softmax_cross_entropy(tape, rp_mlp_forward(tape, model, x), labels);
            if (!loss) {
                status = rp_last_status();
                goto cleanup;
            }
            float l = rp_item(loss);
            if (!isfinite(l)) {
                status = RP_ERROR(RP_ERR_NUMERIC,
                                  "the loss is %g at epoch %d step %lld (lr %g): training diverged; "
                                  "try a lower --lr", (double)l, epoch + 1, (long long)s,
                                  (double)rp_schedule_lr(&sched, step));
                goto cleanup;
            }
            RP_TRY(rp_backward(tape, loss));
            float lr = rp_schedule_lr(&sched, step);
            RP_TRY(rp_optimizer_step(opt, lr));
            loss_sum += l;
            loss_n++;
            images += o.batch;

            double now = rp_now_s();
            bool last = s + 1 == steps_per_epoch;
            if (tty && (now - t_print > 0.2 || last)) {
                double rate = (double)(s + 1) * o.batch / (now - t_epoch);
                double remaining = (double)(total_steps - step - 1) * o.batch / rate;
                char eta[32];
                format_duration(remaining, eta, sizeof eta);
                fprintf(stderr, "\r  epoch %d/%d  step %lld/%lld  loss %.4f  lr %.4f  %.0f img/s  ETA %s   ",
                        epoch + 1, o.epochs, (long long)(s + 1), (long long)steps_per_epoch,
                        loss_sum / (double)loss_n, (double)lr, rate, eta);
                t_print = now;
            }
            if (metrics && step % 50 == 0)
                fprintf(metrics, "{\"step\":%lld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g}\n",
                        (long long)step, epoch + 1, (double)l, (double)lr);
        }
        if (stop_requested) break;
        double epoch_s = rp_now_s() - t_epoch;
        t_train += epoch_s;
        RP_TRY(evaluate(tape, model, test, 1000, mean, inv_std, &ev));
        if (ev.accuracy > best_acc) best_acc = ev.accuracy;
        epochs_done = epoch + 1;
        double rate = (double)steps_per_epoch * o.batch / epoch_s;
        if (!o.quiet)
            fprintf(stderr, "%s  epoch %d/%d  train loss %.4f  test loss %.4f  test acc %.2f%%  %.0f img/s  %.1fs\n",
                    tty ? "\r" : "", epoch + 1, o.epochs, loss_sum / (double)(loss_n ? loss_n : 1),
                    ev.loss, 100 * ev.accuracy, rate, epoch_s);
        if (metrics) {
            fprintf(metrics,
                    "{\"step\":%lld,\"epoch\":%d,\"train_loss\":%.6f,\"test_loss\":%.6f,"
                    "\"test_accuracy\":%.6f,\"images_per_s\":%.1f}\n",
                    (long long)step, epoch + 1, loss_sum / (double)(loss_n ? loss_n : 1), ev.loss,
                    ev.accuracy, rate);
            fflush(metrics);
        }
    }
    if (stop_requested && !o.quiet) fprintf(stderr, "\n  interrupted after %d epochs\n", epochs_done);
    char total[32];
    format_duration(rp_now_s() - t_start, total, sizeof total);
    printf("%s on %s: test accuracy %.2f%% (best %.2f%%) after %d epochs, %lld steps, %s, "
           "%.0f train img/s\n",
           o.model, train->name, 100 * ev.accuracy, 100 * best_acc, epochs_done, (long long)step,
           total, t_train > 0 ? (double)images / t_train : 0.0);

cleanup:
    if (metrics) fclose(metrics);
    rp_free(order);
    rp_tape_destroy(tape);
    rp_optimizer_destroy(opt);
    rp_mlp_destroy(model);
    rp_dataset_destroy(test);
    rp_dataset_destroy(train);
    if (status != RP_OK) {
        fprintf(stderr, "%sreplicator train: error: %s\n", tty ? "\n" : "", rp_last_error());
        return 1;
    }
    return stop_requested ? 130 : 0;
}
