/*
 * trainer_model.c - a new model on the shared trainer (replicator/trainer.h):
 * a softmax classifier of points into 3 classes, trained by rp_trainer on 2
 * replicas. The model is a table of callbacks - build, steps_per_epoch,
 * train_step, evaluate/evaluated, save, destroy - and the trainer does the
 * rest: the replicator, the loop over epochs, the learning-rate schedule,
 * metrics.jsonl, a checkpoint every epoch (and on Ctrl-C), and resuming.
 *
 *     ./trainer_model [--out DIR] [--resume] [--epochs N] [--lr X] [--help]
 *                     [runtime options: rp_config_from_args]
 *
 * Its own options are a table (replicator/options.h): the library's parser, help and
 * messages, beside the runtime's table that rp_config_from_args takes.
 *
 * --precision bf16 (a runtime option) trains in mixed precision: the linear
 * layer multiplies in bf16 (f32 master weights and optimizer state). The
 * evaluation shows the policy API: it runs in f32 whatever the training's
 * policy, by setting the tape's policy around it (rp_tape_set_precision).
 *
 * Writes DIR (default runs/trainer_model, or -2, -3 ... if it holds a run):
 * checkpoint.safetensors and metrics.jsonl. --resume continues the run in DIR
 * from its checkpoint. Prints the epochs' lines and the test accuracy; exits
 * 1 below 90%.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <replicator/replicator.h>

enum { DIM = 4, CLASSES = 3, TRAIN = 768, TEST = 384, BATCH = 64, EPOCHS = 3 };

/* The data set, shared by the replicas (read-only once made). */
struct data {
    float x[TRAIN + TEST][DIM];
    int32_t y[TRAIN + TEST];
};

/* Points uniform in [-1,1)^4; the class is the largest of three fixed linear scores. */
static void make_data(struct data *d)
{
    static const float score[CLASSES][DIM] = {
        {1.0f, -0.5f, 0.2f, 0.0f}, {-0.6f, 1.0f, 0.0f, 0.4f}, {0.0f, 0.2f, -1.0f, 0.8f}};
    rp_rng_fill_uniform(5, 0, &d->x[0][0], (size_t)(TRAIN + TEST) * DIM, -1.0f, 1.0f);
    for (int i = 0; i < TRAIN + TEST; i++) {
        float best = -1e9f;
        for (int c = 0; c < CLASSES; c++) {
            float s = 0;
            for (int k = 0; k < DIM; k++)
                s += score[c][k] * d->x[i][k];
            if (s > best) {
                best = s;
                d->y[i] = c;
            }
        }
    }
}

/* One replica's state: its copy of the model and its optimizer. */
struct state {
    rp_params *params;
    rp_linear_layer fc;
    rp_optimizer *opt;
};

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    (void)ctx;
    (void)at;
    struct state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "the model's state");
    *out = s; /* the trainer frees it through destroy, even when build fails */
    RP_CHECK(rp_params_create(&s->params));
    RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc", DIM, CLASSES, true, false));
    RP_CHECK(rp_params_finalize(s->params, 1));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0.9f;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->params, &oc));
    if (ck) { /* resuming: what save() wrote */
        RP_CHECK(rp_checkpoint_read_params(ck, s->params, "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt, s->params, "optim/"));
        RP_CHECK(rp_replica_optimizer_publish(rep, s->opt));
    }
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    return TRAIN / BATCH;
}

/*
 * This replica's share of batch at->step of epoch at->epoch (rotated each epoch), as the input
 * context gives it: its shard in sync training, the whole batch in async (--regime async: each
 * batch to the one replica that claims it).
 */
static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    const struct data *d = ctx;
    struct state *s = state;
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, BATCH, &in));
    int n = in.per_replica_batch;
    float x[BATCH * DIM];
    int32_t y[BATCH];
    for (int i = 0; i < n; i++) {
        int row = (int)((at->step * BATCH + in.replica * n + i + 97 * at->epoch) % TRAIN);
        memcpy(x + i * DIM, d->x[row], sizeof d->x[row]);
        y[i] = d->y[row];
    }
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *logits =
        rp_linear_layer_forward(t, &s->fc, rp_tensor_from(t, 2, (int[]){n, DIM}, x));
    rp_tensor *loss = logits ? rp_softmax_cross_entropy(t, logits, y) : NULL;
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    RP_CHECK(rp_optimizer_step(s->opt, at->lr)); /* averages the gradients over the replicas */
    scalars[0] = rp_item(loss);                  /* "loss": the trainer averages and records it */
    return RP_OK;
}

/* Every replica: its share of the test set; the counts are summed over the replicas. */
static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    const struct data *d = ctx;
    struct state *s = state;
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, TEST, &in));
    int n = in.per_replica_batch, first = TRAIN + in.replica * n;
    rp_tape *t = rp_replica_tape(rep);
    /* The policy API: this forward pass in f32 whatever --precision asked, then the run's again. */
    rp_precision_policy keep = rp_tape_precision(t);
    RP_CHECK(rp_tape_set_precision(t, rp_precision_policy_make(RP_F32)));
    rp_tensor *logits =
        rp_linear_layer_forward(t, &s->fc, rp_tensor_from(t, 2, (int[]){n, DIM}, &d->x[first][0]));
    RP_CHECK(rp_tape_set_precision(t, keep));
    if (!logits) return rp_last_status();
    /* Values live in the kernel table's storage: the scores are read to the host. */
    float v[TEST * CLASSES];
    RP_CHECK(rp_tensor_read(logits, v, (int64_t)n * CLASSES));
    int correct = 0;
    for (int i = 0; i < n; i++) {
        const float *l = v + i * CLASSES;
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (l[c] > l[best]) best = c;
        correct += best == d->y[first + i];
    }
    RP_CHECK(rp_replica_report(rep, "correct", correct, RP_SUM));
    return rp_replica_report(rep, "seen", n, RP_SUM);
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    (void)ctx;
    double correct = 0, seen = 0;
    RP_CHECK(rp_replicator_result(r, "correct", &correct));
    RP_CHECK(rp_replicator_result(r, "seen", &seen));
    double acc = seen > 0 ? correct / seen : 0;
    return rp_trainer_metrics_add(m, "test_accuracy", acc, "test acc %.2f%%", 100 * acc);
}

/* Local replica 0's state into the checkpoint (the replicas agree: sync keeps them identical). */
static rp_status save(void *ctx, void *state, rp_checkpoint *ck)
{
    (void)ctx;
    struct state *s = state;
    RP_CHECK(rp_checkpoint_add_params(ck, s->params, "param/"));
    return rp_checkpoint_add_optimizer(ck, s->opt, s->params, "optim/");
}

static rp_status destroy(rp_replica *rep, void *ctx, void *state)
{
    (void)rep;
    (void)ctx;
    struct state *s = state;
    if (!s) return RP_OK;
    rp_optimizer_destroy(s->opt); /* before the parameters it updates */
    rp_params_destroy(s->params);
    free(s);
    return RP_OK;
}

static const rp_trainer_model model = {
    .build = build,
    .steps_per_epoch = steps_per_epoch,
    .train_step = train_step,
    .evaluate = evaluate,
    .evaluated = evaluated,
    .save = save,
    .destroy = destroy,
};

/* The program's own options: one row each (replicator/options.h). */
typedef struct options {
    const char *out;
    bool resume;
    int epochs;
    float lr;
} options;

static const rp_option option_table[] = {
    RP_OPT_SECTION("trainer_model:"),
    RP_OPT_PATH_REF(options, out, "--out", "DIR", 0,
                    "run directory (default runs/trainer_model, or -2, -3...)"),
    RP_OPT_FLAG(options, resume, "--resume", 0, "continue the run in --out from its checkpoint"),
    RP_OPT_INT(options, epochs, "--epochs", "N", 1, 1000, 0, "passes over the data (default 3)"),
    RP_OPT_FLOAT(options, lr, "--lr", "X", 0, 10, 0, "peak learning rate (default 0.5)"),
    RP_OPT_DOC("--help", NULL, "this text"),
    RP_OPTION_END,
};

int main(int argc, char **argv)
{
    rp_status status = RP_OK;
    rp_trainer *t = NULL;
    rp_checkpoint *ck = NULL;
    struct data *d = malloc(sizeof *d);
    if (!d) return 1;
    make_data(d);
    /* First: a Ctrl-C then stops at a step boundary, checkpointed, instead of killing the run. */
    RP_TRY(rp_trainer_catch_signals());
    rp_trainer_config cfg = rp_trainer_config_default();
    cfg.runtime.replicas = 2;
    cfg.runtime.threads_per_replica = 1;
    RP_TRY(rp_config_from_args(&cfg.runtime, &argc, argv)); /* --precision bf16, --regime ... */
    options opt = {.out = "runs/trainer_model", .epochs = EPOCHS, .lr = 0.5f};
    rp_option_fault fault;
    RP_TRY(rp_options_parse(option_table, &opt, &argc, argv, RP_OPTIONS_HELP, NULL, &fault));
    if (fault.kind == RP_OPTION_HELP) {
        printf("usage: trainer_model [options]\n");
        rp_options_print_help(stdout, option_table);
        rp_options_print_help(stdout, rp_config_options());
        goto cleanup;
    }
    cfg.run_dir = opt.out;
    if (opt.resume) {
        RP_TRY(rp_trainer_load_checkpoint(&ck, cfg.run_dir));
        cfg.resume = ck;
    }
    cfg.epochs = opt.epochs;
    cfg.lr = opt.lr;
    cfg.schedule = RP_SCHED_COSINE;
    cfg.batch = BATCH;
    cfg.rate_unit = "points/s";
    RP_TRY(rp_trainer_create(&t, &cfg, &model, d));
    RP_TRY(rp_trainer_run(t));
    rp_trainer_metrics m = {0};
    RP_TRY(rp_trainer_evaluate(t, &m));
    double acc = m.m[0].value;
    rp_trainer_progress p = rp_trainer_get_progress(t);
    rp_replicator *r = rp_trainer_replicator(t);
    /* The policy the replicas trained with (the evaluation put it back). */
    rp_dtype trained = rp_tape_precision(rp_replica_tape(rp_replicator_replica(r, 0))).compute;
    if (acc >= 0.9)
        printf("trainer: %lld steps on %d replicas, test accuracy %.2f%%; run directory %s; "
               "trained in %s, evaluated in f32\n",
               (long long)p.global_step, rp_replicator_replicas(r), 100 * acc,
               rp_trainer_run_dir(t), rp_dtype_name(trained));
    else
        status = RP_ERROR(RP_ERR_NUMERIC, "test accuracy %.2f%% after %lld steps", 100 * acc,
                          (long long)p.global_step);
cleanup:
    if (t) {
        rp_status down = rp_trainer_destroy(t);
        if (status == RP_OK) status = down;
    }
    rp_checkpoint_destroy(ck);
    free(d);
    if (status != RP_OK) fprintf(stderr, "trainer_model: %s\n", rp_last_error());
    return status == RP_OK ? 0 : 1;
}
