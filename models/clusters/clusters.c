/*
 * clusters.c - the README's MLP as a registered model, in one file against the public headers:
 * a two-layer perceptron that tells four Gaussian clusters apart (examples/mlp.c), trained by
 * the shared trainer. Everything `replicator train clusters` offers comes from here: the
 * trainer callbacks, an option table (the library's parser, help, JSON and resume rules), the
 * layout through rp_config_resolve, and the descriptor the command's registry lists in one
 * line (cli/registry.c). docs/models.md walks through it.
 *
 *     replicator train clusters [--epochs N] [--lr X] [--hidden N] [--out DIR] ...
 *     replicator train --resume DIR [--epochs N]
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

enum { IN = 2, CLASSES = 4, TRAIN = 4096, TEST = 1024 };

/* ---- the options ----------------------------------------------------------------------- */

typedef struct clusters_opts {
    int epochs;
    int batch;
    int hidden;
    float lr;
    uint64_t seed;
    char out[4096];
    const char *resume;
    bool force, quiet;
    rp_config runtime; /* the runtime's options (rp_config_options()) */
} clusters_opts;

#define T clusters_opts
static const rp_option clusters_table[] = {
    RP_OPT_SECTION("clusters (the README's MLP on four Gaussian clusters):"),
    RP_OPT_INT(T, epochs, "--epochs", "N", 1, 1000, RP_OPT_SAVED | RP_OPT_RESUME,
               "passes over the 4096 training points (default 4)"),
    RP_OPT_INT(T, batch, "--batch", "N", 1, 4096, RP_OPT_SAVED, "global batch (default 128)"),
    RP_OPT_INT(T, hidden, "--hidden", "N", 1, 4096, RP_OPT_SAVED, "hidden width (default 32)"),
    RP_OPT_FLOAT(T, lr, "--lr", "X", 0, 10, RP_OPT_SAVED, "peak learning rate (default 0.05)"),
    RP_OPT_UINT64(T, seed, "--init-seed", "N", 0, 0x7fffffff, RP_OPT_SAVED,
                  "initial weights (default 1)"),
    RP_OPT_PATH(T, out, "--out", "DIR", 0, "run directory (default runs/clusters, made unique)"),
    RP_OPT_PATH_REF(T, resume, "--resume", "DIR", RP_OPT_RESUME, "continue the run in DIR"),
    RP_OPT_FLAG(T, force, "--force", 0, "overwrite a checkpoint in --out"),
    RP_OPT_FLAG(T, quiet, "--quiet", RP_OPT_RESUME, "only the summary"),
    RP_OPTION_END,
};
#undef T

static void clusters_default(clusters_opts *o)
{
    memset(o, 0, sizeof *o);
    o->epochs = 4;
    o->batch = 128;
    o->hidden = 32;
    o->lr = 0.05f;
    o->seed = 1;
    snprintf(o->out, sizeof o->out, "runs/clusters");
    o->runtime = rp_config_default();
}

static bool clusters_owns_config(const char *json)
{
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    bool yes = cJSON_IsString(m) && !strcmp(m->valuestring, "clusters");
    cJSON_Delete(j);
    return yes;
}

/* ---- the model: trainer callbacks ------------------------------------------------------- */

/* Point g of a stream: class g % 4 around the corner (+-1.5, +-1.5), deviation 0.5. */
static void make_points(uint64_t stream, int64_t first, int n, float *x, int32_t *y)
{
    rp_rng_fill_normal(stream, (uint64_t)first * IN, x, (size_t)n * IN, 0.0f, 0.5f);
    for (int i = 0; i < n; i++) {
        int c = (int)((first + i) % CLASSES);
        y[i] = c;
        x[i * IN + 0] += c & 1 ? 1.5f : -1.5f;
        x[i * IN + 1] += c & 2 ? 1.5f : -1.5f;
    }
}

struct state {
    rp_params *params;
    rp_linear_layer fc1, fc2;
    rp_optimizer *opt;
};

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    const clusters_opts *o = ctx;
    (void)at;
    struct state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "the clusters model's state");
    *out = s;
    RP_CHECK(rp_params_create(&s->params));
    RP_CHECK(rp_linear_layer_init(&s->fc1, s->params, "fc1", IN, o->hidden, true, true));
    RP_CHECK(rp_linear_layer_init(&s->fc2, s->params, "fc2", o->hidden, CLASSES, true, false));
    RP_CHECK(rp_params_finalize(s->params, o->seed));
    rp_optim_config oc = rp_optim_config_default();
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->params, &oc));
    if (ck) {
        RP_CHECK(rp_checkpoint_read_params(ck, s->params, "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt, s->params, "optim/"));
        RP_CHECK(rp_replica_optimizer_publish(rep, s->opt));
    }
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *state)
{
    (void)state;
    return TRAIN / ((const clusters_opts *)ctx)->batch;
}

static rp_tensor *forward(rp_tape *t, const struct state *s, rp_tensor *x)
{
    return rp_linear_layer_forward(t, &s->fc2, rp_relu(t, rp_linear_layer_forward(t, &s->fc1, x)));
}

static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    const clusters_opts *o = ctx;
    struct state *s = state;
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, o->batch, &in));
    int n = in.per_replica_batch;
    float *x = malloc((size_t)n * IN * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    rp_status status = RP_OK;
    if (!x || !y) RP_TRY(RP_ERROR(RP_ERR_NOMEM, "a batch of %d points", n));
    /* Epoch e's points are stream e + 10: a fresh draw each epoch, the same on any layout. */
    make_points(10 + (uint64_t)at->epoch, at->step * o->batch + (int64_t)in.replica * n, n, x, y);
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *loss =
        rp_softmax_cross_entropy(t, forward(t, s, rp_tensor_from(t, 2, (int[]){n, IN}, x)), y);
    if (!loss) RP_TRY(rp_last_status());
    RP_TRY(rp_backward(t, loss));
    RP_TRY(rp_optimizer_step(s->opt, at->lr));
    scalars[0] = rp_item(loss);
cleanup:
    free(x);
    free(y);
    return status;
}

static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    (void)ctx;
    struct state *s = state;
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, TEST, &in));
    int n = in.per_replica_batch;
    float x[TEST * IN], v[TEST * CLASSES];
    int32_t y[TEST];
    make_points(2, (int64_t)in.replica * n, n, x, y);
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *logits = forward(t, s, rp_tensor_from(t, 2, (int[]){n, IN}, x));
    if (!logits) return rp_last_status();
    RP_CHECK(rp_tensor_read(logits, v, (int64_t)n * CLASSES));
    int correct = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (v[i * CLASSES + c] > v[i * CLASSES + best]) best = c;
        correct += best == y[i];
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
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->params);
    free(s);
    return RP_OK;
}

static const rp_trainer_model clusters_model = {
    .build = build,
    .steps_per_epoch = steps_per_epoch,
    .train_step = train_step,
    .evaluate = evaluate,
    .evaluated = evaluated,
    .save = save,
    .destroy = destroy,
};

static const rp_trainer_model *clusters_trainer(void)
{
    return &clusters_model;
}

/* ---- `replicator train clusters` -------------------------------------------------------- */

static char *to_json(const clusters_opts *o)
{
    cJSON *j = cJSON_CreateObject();
    char *text = NULL;
    if (j && cJSON_AddStringToObject(j, "model", "clusters") &&
        rp_options_to_json(clusters_table, o, j) == RP_OK)
        text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static rp_status from_json(clusters_opts *o, const char *json)
{
    cJSON *j = cJSON_Parse(json);
    char bad[256] = "";
    rp_status status =
        j ? rp_options_from_json(clusters_table, o, j, bad, sizeof bad) : RP_ERR_FORMAT;
    cJSON_Delete(j);
    if (status != RP_OK)
        return RP_ERROR(RP_ERR_FORMAT,
                        "the clusters run's configuration is incomplete or "
                        "invalid: %s",
                        bad[0] ? bad : "it is not JSON");
    return RP_OK;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: replicator train clusters [options] [runtime options]\n"
               "       replicator train --resume DIR [--epochs N]\n\n");
    rp_options_print_help(f, clusters_table);
    rp_options_print_help(f, rp_config_options());
}

static rp_status run(clusters_opts *o, rp_options_given *given, bool *printed)
{
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    rp_trainer *t = NULL;
    char *config = NULL;
    rp_trainer_config tc = rp_trainer_config_default();
    if (o->resume) {
        RP_TRY(rp_trainer_load_checkpoint(&ck, o->resume));
        clusters_opts cli = *o;
        const char *saved = rp_checkpoint_get_meta(ck, "replicator.config");
        if (!saved) RP_TRY(RP_ERROR(RP_ERR_FORMAT, "%s holds no configuration", o->resume));
        RP_TRY(from_json(o, saved));
        rp_options_apply_resume(clusters_table, o, &cli, given);
        snprintf(o->out, sizeof o->out, "%s", cli.resume);
        tc.resume = ck;
    }
    tc.runtime = o->runtime;
    rp_job_shape shape = rp_job_shape_default();
    shape.batch = o->batch;
    RP_TRY(rp_config_resolve(&tc.runtime, &shape));
    tc.run_dir = o->out;
    tc.run_dir_exact = rp_options_was_given(clusters_table, given, "--out");
    tc.force = o->force;
    tc.epochs = o->epochs;
    tc.lr = o->lr;
    tc.batch = o->batch;
    tc.quiet = o->quiet;
    tc.rate_unit = "points/s";
    RP_TRY(rp_trainer_create(&t, &tc, &clusters_model, o));
    config = to_json(o);
    if (!config) RP_TRY(RP_ERROR(RP_ERR_NOMEM, "the configuration's text"));
    RP_TRY(rp_trainer_set_config_json(t, config));
    RP_TRY(rp_trainer_run(t));
    rp_trainer_metrics m = {0};
    RP_TRY(rp_trainer_evaluate(t, &m));
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (rp_trainer_is_root(t)) {
        printf("clusters: test accuracy %.2f%% after %lld steps on %d replicas; run directory %s\n",
               100 * m.m[0].value, (long long)p.global_step,
               rp_replicator_replicas(rp_trainer_replicator(t)), rp_trainer_run_dir(t));
        *printed = true;
    }
cleanup:
    if (t) {
        rp_status down = rp_trainer_destroy(t);
        if (status == RP_OK) status = down;
    }
    rp_checkpoint_destroy(ck);
    free(config);
    return status;
}

static int clusters_train(int argc, char **argv)
{
    clusters_opts o;
    clusters_default(&o);
    rp_options_given given;
    rp_option_fault fault;
    /* The runtime's options first (they stay out of the run's configuration), then ours. */
    if (rp_config_from_args(&o.runtime, &argc, argv) != RP_OK ||
        rp_options_parse(clusters_table, &o, &argc, argv, RP_OPTIONS_HELP, &given, &fault) !=
            RP_OK) {
        fprintf(stderr, "replicator train clusters: %s (see --help)\n", rp_last_error());
        return 2;
    }
    if (fault.kind == RP_OPTION_HELP) {
        usage(stdout);
        return 0;
    }
    if (o.resume && rp_options_check_resume(clusters_table, argc, argv, NULL, &fault) != RP_OK) {
        fprintf(stderr,
                "replicator train clusters: %s: the run's configuration comes from its "
                "checkpoint\n",
                rp_last_error());
        return 2;
    }
    rp_trainer_catch_signals();
    bool printed = false;
    rp_status status = run(&o, &given, &printed);
    if (status != RP_OK) {
        fprintf(stderr, "replicator train clusters: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}

/* The descriptor: `replicator train clusters` through the registry's one line. */
const rp_model_desc rp_clusters_model = {
    .name = "clusters",
    .summary = "the README's MLP on four Gaussian clusters (one file: models/clusters)",
    .options = clusters_table,
    .trainer = clusters_trainer,
    .owns_config = clusters_owns_config,
    .train = clusters_train,
};
