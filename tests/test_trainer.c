/*
 * test_trainer.c - the shared trainer (replicator/trainer.h) through its
 * public API, with a tiny model: a linear classifier on synthetic data.
 *
 *  - a run writes the run directory: metrics.jsonl lines and checkpoints at
 *    the configured cadences (each checkpoint read back from disk while the
 *    run goes on);
 *  - a checkpoint write that fails (a file-size limit) fails the run and
 *    leaves the previous checkpoint byte for byte;
 *  - a stop request (the call the signal thread makes; and a real SIGINT
 *    through rp_trainer_catch_signals) stops at a step boundary with a
 *    checkpoint that resumes to the same final checkpoint and the same
 *    metrics.jsonl lines (but for the rate), bit for bit, as an
 *    uninterrupted run;
 *  - evaluation runs at the configured cadence, on every replica;
 *  - sync with 2 replicas (each its shard of every batch) and async with 2
 *    replicas (each batch to one of them) both cover every batch of every
 *    epoch exactly once;
 *  - a run directory holding a checkpoint is refused unless forced, or
 *    made unique.
 */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define DIM        6
#define CLASSES    3
#define ROWS       96
#define MAXR       4
#define MAX_EPOCHS 4
#define MAX_STEPS  16
#define MAX_RECORD 64

/* The model's context: the data, the test's knobs and what the callbacks saw. */
typedef struct job {
    float x[ROWS][DIM];
    int32_t y[ROWS];
    int batch;     /* rows per global batch */
    int64_t steps; /* batches per epoch */
    rp_regime regime;
    const char *dir; /* the run directory, to read its checkpoint back during the run */
    /* knobs */
    int64_t stop_at;   /* request a stop while training this global step (-1: never) */
    int64_t signal_at; /* send this process SIGINT while training this global step (-1: never) */
    int64_t limit_at;  /* from this global step on, files may not grow past 64 bytes (-1: never) */
    /* records */
    int seen[MAXR][MAX_EPOCHS][MAX_STEPS]; /* times replica r trained (epoch, step) */
    int rows_seen[MAX_EPOCHS][ROWS];       /* times a row was trained in an epoch, any replica */
    int64_t on_disk[MAX_RECORD]; /* the checkpoint's global step when step g began (-1: none) */
    int64_t evals[MAX_RECORD];   /* steps trained when each evaluation finished */
    int n_evals;
    int eval_replicas[MAX_RECORD]; /* replicas that ran each evaluation */
    int64_t trained;               /* global steps trained (replica 0's count in sync) */
    unsigned char *kept;           /* the checkpoint's bytes when the limit was set */
    long kept_size;
} job;

typedef struct state {
    rp_params *p;
    rp_linear_layer fc;
    rp_optimizer *opt;
    int id;
    int evaluated;
} state;

static void job_init(job *j, int batch, rp_regime regime)
{
    memset(j, 0, sizeof *j);
    tu_fill(&j->x[0][0], ROWS * DIM, 5, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++) {
        /* A linearly separable-ish rule, so the loss falls. */
        float s = j->x[i][0] - j->x[i][1] + 0.5f * j->x[i][2];
        j->y[i] = s > 0.4f ? 2 : s > -0.4f ? 1 : 0;
    }
    j->batch = batch;
    j->steps = ROWS / batch;
    j->regime = regime;
    j->stop_at = j->signal_at = j->limit_at = -1;
    for (int i = 0; i < MAX_RECORD; i++)
        j->on_disk[i] = -2;
}

static void job_free(job *j)
{
    free(j->kept);
    j->kept = NULL;
}

/* The bytes of a file (NULL if it cannot be read). */
static unsigned char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)*size + 1);
    if (buf && fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static int64_t checkpoint_step_on_disk(const char *dir)
{
    rp_checkpoint *ck = NULL;
    if (rp_trainer_load_checkpoint(&ck, dir) != RP_OK) return -1;
    int64_t n, g = -1;
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    if (pos && n == 3) g = pos[2];
    rp_checkpoint_destroy(ck);
    return g;
}

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "state");
    *out = s;
    s->id = rp_replica_id(rep);
    RP_CHECK(rp_params_create(&s->p));
    RP_CHECK(rp_linear_layer_init(&s->fc, s->p, "fc", DIM, CLASSES, true, false));
    RP_CHECK(rp_params_finalize(s->p, 3));
    rp_optim_config oc = rp_optim_config_default();
    oc.momentum = 0.9f;
    RP_CHECK(rp_replica_optimizer_create(rep, &s->opt, s->p, &oc));
    if (ck) {
        if (!at) return RP_ERROR(RP_ERR_INVALID, "resuming without a position");
        RP_CHECK(rp_checkpoint_read_params(ck, s->p, "param/"));
        RP_CHECK(rp_checkpoint_read_optimizer(ck, s->opt, s->p, "optim/"));
        RP_CHECK(rp_replica_optimizer_publish(rep, s->opt));
    }
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *st)
{
    return ((job *)ctx)->steps;
}

/*
 * Batch s of epoch e: rows from a rotation that depends on both, so every batch differs. The
 * replica's share of it, as the input context says (sync: its shard; async: all of it).
 */
static rp_status train_step(rp_replica *rep, void *ctx, void *st, const rp_trainer_at *at,
                            double *loss)
{
    job *j = ctx;
    state *s = st;
    int r = rp_replica_id(rep);
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, j->batch, &in));
    int rows = in.per_replica_batch, first = (int)at->step * j->batch + in.replica * rows;
    if (at->epoch < MAX_EPOCHS && at->step < MAX_STEPS) j->seen[r][at->epoch][at->step]++;
    if (r == 0 && at->global_step < MAX_RECORD)
        j->on_disk[at->global_step] = checkpoint_step_on_disk(j->dir);
    if (r == 0 && at->global_step == j->stop_at) rp_trainer_request_stop(SIGINT);
    if (r == 0 && at->global_step == j->signal_at) kill(getpid(), SIGINT);
    if (r == 0 && at->global_step == j->limit_at) {
        char path[512];
        rp_trainer_checkpoint_path(path, sizeof path, j->dir);
        j->kept = read_file(path, &j->kept_size);
        struct rlimit lim;
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = 64;
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    float xb[ROWS * DIM];
    int32_t yb[ROWS];
    for (int i = 0; i < rows; i++) {
        int row = (first + i + 7 * (int)at->epoch) % ROWS;
        if (at->epoch < MAX_EPOCHS)
            __atomic_add_fetch(&j->rows_seen[at->epoch][row], 1, __ATOMIC_RELAXED);
        memcpy(xb + i * DIM, j->x[row], sizeof j->x[row]);
        yb[i] = j->y[row];
    }
    rp_tape *t = rp_replica_tape(rep);
    rp_tensor *x = rp_tensor_from(t, 2, (int[]){rows, DIM}, xb);
    rp_tensor *l = rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &s->fc, x), yb);
    if (!l) return rp_last_status();
    RP_CHECK(rp_backward(t, l));
    RP_CHECK(rp_optimizer_step(s->opt, at->lr));
    *loss = rp_item(l);
    if (r == 0) __atomic_add_fetch(&j->trained, 1, __ATOMIC_RELAXED);
    return RP_OK;
}

static rp_status settle(rp_replica *rep, void *ctx, void *st)
{
    return rp_replica_optimizer_fetch(rep, ((state *)st)->opt);
}

static rp_status evaluate(rp_replica *rep, void *ctx, void *st)
{
    state *s = st;
    s->evaluated++;
    /* The squared norm of the weights: the same on every replica once they agree. */
    float *v = malloc((size_t)rp_params_numel(s->p) * sizeof(float));
    if (!v) return RP_ERROR(RP_ERR_NOMEM, "evaluate: no room for a copy of the weights");
    rp_status read = rp_params_read_values(s->p, v);
    double sq = 0;
    for (int64_t i = 0; read == RP_OK && i < rp_params_numel(s->p); i++)
        sq += (double)v[i] * v[i];
    free(v);
    RP_CHECK(read);
    RP_CHECK(rp_replica_report(rep, "replicas", 1, RP_SUM));
    return rp_replica_report(rep, "wnorm2", sq, RP_MEAN);
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    job *j = ctx;
    double replicas = 0, w = 0;
    RP_CHECK(rp_replicator_result(r, "replicas", &replicas));
    RP_CHECK(rp_replicator_result(r, "wnorm2", &w));
    if (j->n_evals < MAX_RECORD) {
        j->eval_replicas[j->n_evals] = (int)replicas;
        j->evals[j->n_evals++] = j->trained;
    }
    return rp_trainer_metrics_add(m, "wnorm2", w, "|w|^2 %.3f", w);
}

static rp_status save(void *ctx, void *st, rp_checkpoint *ck)
{
    state *s = st;
    RP_CHECK(rp_checkpoint_add_params(ck, s->p, "param/"));
    return rp_checkpoint_add_optimizer(ck, s->opt, s->p, "optim/");
}

static rp_status destroy(rp_replica *rep, void *ctx, void *st)
{
    state *s = st;
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->p);
    free(s);
    return RP_OK;
}

static const rp_trainer_model model = {
    .build = build,
    .steps_per_epoch = steps_per_epoch,
    .train_step = train_step,
    .settle = settle,
    .evaluate = evaluate,
    .evaluated = evaluated,
    .save = save,
    .destroy = destroy,
};

static rp_trainer_config config(job *j, const char *dir, int replicas, int epochs)
{
    rp_trainer_config c = rp_trainer_config_default();
    c.runtime.backend = RP_BACKEND_THREADS;
    c.runtime.replicas = replicas;
    c.runtime.threads_per_replica = 1;
    c.runtime.regime = j->regime;
    c.runtime.seed = 1;
    c.run_dir = dir;
    c.run_dir_exact = true;
    c.force = true;
    c.epochs = epochs;
    c.lr = 0.2f;
    c.schedule = RP_SCHED_COSINE;
    c.warmup_epochs = 1;
    c.batch = j->batch;
    c.quiet = true;
    c.config_json = "{\"test\":true}";
    j->dir = dir;
    return c;
}

static const char *path_in(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
    return buf;
}

/* Creates, runs and destroys a trainer of model `m`; returns run's status and its progress in *p.
 */
static rp_status train_model(job *j, const rp_trainer_config *c, const rp_trainer_model *m,
                             rp_trainer_progress *p)
{
    rp_trainer *t = NULL;
    rp_status status = rp_trainer_create(&t, c, m, j);
    if (status != RP_OK) {
        print_message("create: %s\n", rp_last_error());
        return status;
    }
    status = rp_trainer_run(t);
    if (status != RP_OK) print_message("run: %s\n", rp_last_error());
    if (p) *p = rp_trainer_get_progress(t);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    return status;
}

static rp_status train_once(job *j, const rp_trainer_config *c, rp_trainer_progress *p)
{
    return train_model(j, c, &model, p);
}

/*
 * A step with three scalars: the loss, the replica's id and the global step. Their means say how
 * the trainer averaged: over the replicas of a sync step, then over the steps of a line.
 */
static const char *const three_scalars[] = {"loss", "replica_id", "gstep", NULL};

static rp_status train_step_scalars(rp_replica *rep, void *ctx, void *st, const rp_trainer_at *at,
                                    double *scalars)
{
    RP_CHECK(train_step(rep, ctx, st, at, scalars));
    scalars[1] = rp_replica_id(rep);
    scalars[2] = (double)at->global_step;
    return RP_OK;
}

/* metrics.jsonl as parsed lines (at most `max`); returns how many. */
static int read_metrics(const char *dir, cJSON **lines, int max)
{
    char path[600];
    long size;
    char *text = (char *)read_file(path_in(path, sizeof path, dir, "metrics.jsonl"), &size);
    assert_non_null(text);
    text[size] = '\0';
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(n < max);
        lines[n] = cJSON_Parse(line);
        assert_non_null(lines[n]);
        n++;
    }
    free(text);
    return n;
}

static double json_number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    if (!v || !cJSON_IsNumber(v)) fail_msg("metrics line has no number \"%s\"", key);
    return v->valuedouble;
}

/*
 * A copy of checkpoint `ck` without tensors `skip_a` and `skip_b` (may be NULL), with the tensor
 * `add` (u64, n values; NULL: none) in their place.
 */
static rp_checkpoint *checkpoint_edit(const rp_checkpoint *ck, const char *skip_a,
                                      const char *skip_b, const char *add, int64_t n,
                                      const uint64_t *values)
{
    rp_checkpoint *out = NULL;
    assert_int_equal(rp_checkpoint_create(&out), RP_OK);
    for (int i = 0; i < rp_checkpoint_count(ck); i++) {
        const char *name = rp_checkpoint_name_at(ck, i);
        if ((skip_a && !strcmp(name, skip_a)) || (skip_b && !strcmp(name, skip_b))) continue;
        rp_checkpoint_dtype dtype;
        int ndim;
        int64_t shape[RP_MAX_DIMS];
        const void *data = rp_checkpoint_get(ck, name, &dtype, &ndim, shape);
        assert_non_null(data);
        assert_int_equal(rp_checkpoint_add(out, name, dtype, ndim, shape, data), RP_OK);
    }
    for (int i = 0; i < rp_checkpoint_meta_count(ck); i++) {
        const char *key = rp_checkpoint_meta_key_at(ck, i);
        assert_int_equal(rp_checkpoint_set_meta(out, key, rp_checkpoint_get_meta(ck, key)), RP_OK);
    }
    if (add) assert_int_equal(rp_checkpoint_add_u64(out, add, n, values), RP_OK);
    return out;
}

/* Checkpoints at every 3 global steps and every epoch; metrics lines every 2 steps and each epoch.
 */
static void test_run_directory_and_cadence(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC); /* 4 steps per epoch */
    char dir[512], path[600];
    tu_tmp_path(dir, sizeof dir, "cadence/run");
    rp_trainer_config c = config(&j, dir, 1, 2);
    c.checkpoint_every_steps = 3;
    c.metrics_every_steps = 2;
    c.eval_every_steps = 0;
    rp_trainer_progress p;
    assert_int_equal(train_once(&j, &c, &p), RP_OK);
    assert_true(p.finished);
    assert_false(p.stopped);
    assert_int_equal(p.global_step, 8);
    assert_int_equal(p.steps_this_run, 8);
    assert_int_equal(p.epoch, 2);
    assert_int_equal(p.step, 0);
    /* What the checkpoint on disk said as each step began: saves after steps 3, 4 (epoch), 6. */
    int64_t want[8] = {-1, -1, -1, 3, 4, 4, 6, 6};
    for (int g = 0; g < 8; g++)
        assert_int_equal(j.on_disk[g], want[g]);
    assert_int_equal(checkpoint_step_on_disk(dir), 8);

    /* The checkpoint holds the configuration text and the position. */
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
    assert_string_equal(rp_checkpoint_get_meta(ck, "replicator.config"), "{\"test\":true}");
    int64_t n;
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    assert_int_equal(n, 3);
    assert_int_equal(pos[0], 2);
    assert_int_equal(pos[1], 0);
    rp_checkpoint_destroy(ck);

    /* metrics.jsonl: step lines at 2, 4, 6, 8; epoch lines at 4 and 8 with the evaluation's metric.
     */
    long size;
    char *text = (char *)read_file(path_in(path, sizeof path, dir, "metrics.jsonl"), &size);
    assert_non_null(text);
    text[size] = '\0';
    int steps_seen[8], nsteps = 0, epochs_seen[4], nepochs = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int step = (int)cJSON_GetObjectItem(o, "step")->valuedouble;
        assert_non_null(cJSON_GetObjectItem(o, "lr"));
        if (cJSON_GetObjectItem(o, "train_loss")) {
            assert_true(nepochs < 4);
            epochs_seen[nepochs++] = step;
            assert_non_null(cJSON_GetObjectItem(o, "wnorm2"));
            assert_non_null(cJSON_GetObjectItem(o, "samples_per_s"));
            assert_int_equal((int)cJSON_GetObjectItem(o, "epoch")->valuedouble, nepochs);
        } else {
            assert_non_null(cJSON_GetObjectItem(o, "loss"));
            assert_true(nsteps < 8);
            steps_seen[nsteps++] = step;
        }
        cJSON_Delete(o);
    }
    free(text);
    assert_int_equal(nsteps, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(steps_seen[i], 2 * (i + 1));
    assert_int_equal(nepochs, 2);
    assert_int_equal(epochs_seen[0], 4);
    assert_int_equal(epochs_seen[1], 8);
    job_free(&j);
}

/* A checkpoint write that fails fails the run, and the previous checkpoint stays as it was. */
static void test_failed_write_keeps_previous_checkpoint(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512], path[600];
    tu_tmp_path(dir, sizeof dir, "atomic");
    rp_trainer_config c = config(&j, dir, 1, 3);
    j.limit_at = 5; /* in epoch 2: its checkpoint (after step 8) cannot be written */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit before;
    getrlimit(RLIMIT_FSIZE, &before);
    rp_status status = train_once(&j, &c, NULL);
    setrlimit(RLIMIT_FSIZE, &before);
    assert_int_equal(status, RP_ERR_IO);
    tu_assert_error_contains("checkpoint.safetensors");
    assert_non_null(j.kept);
    long size;
    unsigned char *now =
        read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &size);
    assert_non_null(now);
    assert_int_equal(size, j.kept_size);
    assert_memory_equal(now, j.kept, (size_t)size);
    free(now);
    assert_int_equal(checkpoint_step_on_disk(dir), 4);
    /* The failed save removed its temporary file. */
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        assert_null(strstr(e->d_name, ".tmp"));
    closedir(d);
    job_free(&j);
}

/*
 * metrics.jsonl's text without the rate ("samples_per_s":..., a measurement, never the same twice);
 * every other byte is the run's numbers.
 */
static char *metrics_without_rate(const char *dir)
{
    char path[600];
    long size;
    char *text = (char *)read_file(path_in(path, sizeof path, dir, "metrics.jsonl"), &size);
    assert_non_null(text);
    text[size] = '\0';
    const char *key = ",\"samples_per_s\":";
    for (char *at; (at = strstr(text, key));) {
        char *end = at + strlen(key);
        end += strspn(end, "0123456789.-e");
        memmove(at, end, strlen(end) + 1);
    }
    return text;
}

/* Asserts that two metrics.jsonl files hold the same lines, bit for bit but for the rate. */
static void assert_same_metrics(const char *dir_a, const char *dir_b)
{
    char *a = metrics_without_rate(dir_a), *b = metrics_without_rate(dir_b);
    assert_true(strlen(a) > 0);
    assert_string_equal(b, a);
    free(a);
    free(b);
}

/* The final checkpoint of an uninterrupted run of `replicas` sync replicas, 3 epochs, in tmp dir
 * `name` (full path into dir); step lines every `metrics_every` steps. */
static unsigned char *uninterrupted(const char *name, int replicas, int64_t metrics_every,
                                    char *dir, size_t dir_size, long *size)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char path[600];
    tu_tmp_path(dir, dir_size, name);
    rp_trainer_config c = config(&j, dir, replicas, 3);
    c.metrics_every_steps = metrics_every;
    assert_int_equal(train_once(&j, &c, NULL), RP_OK);
    job_free(&j);
    return read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), size);
}

/*
 * A stop request while step 6 trains: the run stops after it, at a step boundary (global 7, epoch 2
 * step 3), checkpointed; resumed, it ends with the uninterrupted run's checkpoint, bit for bit, and
 * its metrics.jsonl holds the uninterrupted run's lines (the epoch's train_loss a mean over all of
 * epoch 2, not over the step after the resume), with 1, 2 and 4 replicas.
 */
static void test_stop_request_resumes_bit_exactly(void **unused)
{
    for (int replicas = 1; replicas <= 4; replicas *= 2) {
        long full_size;
        char full_dir[512], name[32];
        snprintf(name, sizeof name, "stop-full-%d", replicas);
        unsigned char *full =
            uninterrupted(name, replicas, 2, full_dir, sizeof full_dir, &full_size);
        assert_non_null(full);

        job j;
        job_init(&j, 24, RP_REGIME_SYNC);
        char dir[512], path[600];
        snprintf(name, sizeof name, "stop-%d", replicas);
        tu_tmp_path(dir, sizeof dir, name);
        rp_trainer_config c = config(&j, dir, replicas, 3);
        c.metrics_every_steps = 2;
        j.stop_at = 6;
        rp_trainer_progress p;
        assert_int_equal(train_once(&j, &c, &p), RP_OK);
        assert_true(p.stopped);
        assert_false(p.finished);
        assert_int_equal(p.stop_signal, SIGINT);
        assert_int_equal(p.global_step, 7);
        assert_int_equal(p.epoch, 1);
        assert_int_equal(p.step, 3);
        assert_int_equal(checkpoint_step_on_disk(dir), 7);
        /* No request is pending once the trainer stopped. */
        assert_false(rp_trainer_request_stop(SIGINT));

        rp_checkpoint *ck = NULL;
        assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
        job r;
        job_init(&r, 24, RP_REGIME_SYNC);
        rp_trainer_config rc = config(&r, dir, replicas, 3);
        rc.metrics_every_steps = 2;
        rc.resume = ck;
        rc.run_dir_exact = true;
        rc.force = false; /* resuming continues the run in its own directory: no refusal */
        assert_int_equal(train_once(&r, &rc, &p), RP_OK);
        rp_checkpoint_destroy(ck);
        assert_true(p.finished);
        assert_int_equal(p.steps_this_run, 12 - 7);
        /* The resumed run started where the stop left it: nothing trained twice or skipped. */
        for (int e = 0; e < 3; e++)
            for (int s = 0; s < 4; s++)
                for (int k = 0; k < replicas; k++)
                    assert_int_equal(j.seen[k][e][s] + r.seen[k][e][s], 1);
        long size;
        unsigned char *resumed =
            read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &size);
        assert_non_null(resumed);
        assert_int_equal(size, full_size);
        assert_memory_equal(resumed, full, (size_t)size);
        assert_same_metrics(full_dir, dir);
        free(resumed);
        free(full);
        job_free(&j);
        job_free(&r);
    }
}

/* A real SIGINT, through the signal thread: a stop at some step boundary that resumes bit-exactly.
 */
static void test_signal_stops_and_resumes(void **unused)
{
    job j;
    job_init(&j, 8, RP_REGIME_SYNC); /* 12 steps per epoch: room for the signal to land */
    char dir[512], path[600];
    tu_tmp_path(dir, sizeof dir, "sig");
    rp_trainer_config c = config(&j, dir, 1, 3);
    j.signal_at = 2;
    rp_trainer_progress p;
    assert_int_equal(train_once(&j, &c, &p), RP_OK);
    assert_true(p.stopped);
    assert_int_equal(p.stop_signal, SIGINT);
    assert_true(p.global_step >= 3);
    assert_true(p.global_step < 36);
    assert_int_equal(checkpoint_step_on_disk(dir), p.global_step);
    assert_int_equal(p.epoch * 12 + p.step, p.global_step);

    /* Resume to the end and compare with an uninterrupted run of the same shape. */
    job u;
    job_init(&u, 8, RP_REGIME_SYNC);
    char udir[512];
    tu_tmp_path(udir, sizeof udir, "sig-full-8");
    rp_trainer_config uc = config(&u, udir, 1, 3);
    assert_int_equal(train_once(&u, &uc, NULL), RP_OK);
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
    job r;
    job_init(&r, 8, RP_REGIME_SYNC);
    rp_trainer_config rc = config(&r, dir, 1, 3);
    rc.resume = ck;
    assert_int_equal(train_once(&r, &rc, &p), RP_OK);
    rp_checkpoint_destroy(ck);
    assert_true(p.finished);
    long a_size, b_size;
    unsigned char *a =
        read_file(path_in(path, sizeof path, udir, "checkpoint.safetensors"), &a_size);
    unsigned char *b =
        read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &b_size);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a_size, b_size);
    assert_memory_equal(a, b, (size_t)a_size);
    free(a);
    free(b);
    job_free(&j);
    job_free(&u);
    job_free(&r);
}

/*
 * Evaluation every 3 steps and every second epoch (and after the last), on every replica: 4 steps
 * per epoch, 3 epochs -> after steps 3, 6, 8 (epoch 2), 9, 12 (step cadence and the last epoch,
 * once).
 */
static void test_eval_cadence(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "eval");
    rp_trainer_config c = config(&j, dir, 2, 3);
    c.eval_every_steps = 3;
    c.eval_every_epochs = 2;
    assert_int_equal(train_once(&j, &c, NULL), RP_OK);
    int64_t want[] = {3, 6, 8, 9, 12};
    assert_int_equal(j.n_evals, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(j.evals[i], want[i]);
        assert_int_equal(j.eval_replicas[i], 2);
    }
    job_free(&j);
}

/*
 * Every batch of every epoch exactly once: sync, each replica its shard; async, one replica each,
 * all of it (the input context's share): every example of every epoch trained exactly once.
 */
static void test_every_batch_once(void **unused)
{
    for (int regime = 0; regime < 2; regime++) {
        job j;
        job_init(&j, 12, regime ? RP_REGIME_ASYNC : RP_REGIME_SYNC); /* 8 steps per epoch */
        char dir[512];
        tu_tmp_path(dir, sizeof dir, regime ? "cover-async" : "cover-sync");
        rp_trainer_config c = config(&j, dir, 2, 3);
        c.lr = 0.05f;
        rp_trainer_progress p;
        assert_int_equal(train_once(&j, &c, &p), RP_OK);
        assert_true(p.finished);
        assert_int_equal(p.global_step, 24);
        int per_replica[MAXR] = {0};
        for (int e = 0; e < 3; e++)
            for (int s = 0; s < 8; s++) {
                if (regime == 0) {
                    assert_int_equal(j.seen[0][e][s], 1);
                    assert_int_equal(j.seen[1][e][s], 1);
                } else {
                    assert_int_equal(j.seen[0][e][s] + j.seen[1][e][s], 1);
                }
                per_replica[0] += j.seen[0][e][s];
                per_replica[1] += j.seen[1][e][s];
            }
        for (int e = 3; e < MAX_EPOCHS; e++)
            for (int s = 0; s < MAX_STEPS; s++)
                assert_int_equal(j.seen[0][e][s] + j.seen[1][e][s], 0);
        for (int e = 0; e < 3; e++)
            for (int row = 0; row < ROWS; row++)
                assert_int_equal(j.rows_seen[e][row], 1);
        assert_int_equal(per_replica[0] + per_replica[1], regime ? 24 : 48);
        job_free(&j);
    }
}

/* max_steps stops (checkpointed) in the middle of an async epoch; the position says where. */
static void test_async_max_steps(void **unused)
{
    job j;
    job_init(&j, 12, RP_REGIME_ASYNC);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "async-max");
    rp_trainer_config c = config(&j, dir, 2, 3);
    c.max_steps = 11;
    rp_trainer_progress p;
    assert_int_equal(train_once(&j, &c, &p), RP_OK);
    assert_true(p.stopped);
    assert_int_equal(p.stop_signal, 0);
    assert_int_equal(p.global_step, 11);
    assert_int_equal(p.epoch, 1);
    assert_int_equal(p.step, 3);
    assert_int_equal(checkpoint_step_on_disk(dir), 11);
    int total = 0;
    for (int e = 0; e < MAX_EPOCHS; e++)
        for (int s = 0; s < MAX_STEPS; s++)
            total += j.seen[0][e][s] + j.seen[1][e][s];
    assert_int_equal(total, 11);
    job_free(&j);
}

/* A run directory that holds a checkpoint: refused when named exactly, unless forced; else -2. */
static void test_refuses_existing_run(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512], path[600];
    tu_tmp_path(dir, sizeof dir, "taken");
    rp_trainer_config c = config(&j, dir, 1, 1);
    assert_int_equal(train_once(&j, &c, NULL), RP_OK);
    long size;
    unsigned char *before =
        read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &size);
    assert_non_null(before);

    c.force = false;
    c.lr = 0.5f; /* a different run: its checkpoint would differ */
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    assert_null(t);
    tu_assert_error_contains("already holds a run's checkpoint");
    tu_assert_error_contains(dir);
    long now_size;
    unsigned char *now = read_file(path, &now_size);
    assert_int_equal(now_size, size);
    assert_memory_equal(now, before, (size_t)size);
    free(now);

    /* Not named exactly: the run moves on to DIR-2. */
    c.run_dir_exact = false;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    char want[600];
    snprintf(want, sizeof want, "%s-2", dir);
    assert_string_equal(rp_trainer_run_dir(t), want);
    /* An evaluation on demand, outside the loop. */
    rp_trainer_metrics m = {0};
    int evals = j.n_evals;
    assert_int_equal(rp_trainer_evaluate(t, &m), RP_OK);
    assert_int_equal(j.n_evals, evals + 1);
    assert_int_equal(m.n, 1);
    assert_string_equal(m.m[0].key, "wnorm2");
    assert_true(m.m[0].value > 0);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);

    /* Forced: it overwrites. */
    c.run_dir_exact = true;
    c.force = true;
    assert_int_equal(train_once(&j, &c, NULL), RP_OK);
    now = read_file(path, &now_size);
    assert_non_null(now);
    assert_true(now_size != size || memcmp(now, before, (size_t)size) != 0);
    free(now);
    free(before);
    job_free(&j);
}

static void test_bad_config(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "bad");
    rp_trainer *t = (rp_trainer *)&j;
    rp_trainer_config c = config(&j, dir, 1, 1);
    c.epochs = 0;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    assert_null(t);
    tu_assert_error_contains("epochs 0");
    c = config(&j, dir, 1, 1);
    c.run_dir = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    tu_assert_error_contains("run_dir");
    rp_trainer_model broken = model;
    broken.save = NULL;
    c = config(&j, dir, 1, 1);
    assert_int_equal(rp_trainer_create(&t, &c, &broken, &j), RP_ERR_INVALID);
    tu_assert_error_contains("save");
    rp_trainer_metrics m = {0};
    assert_int_equal(rp_trainer_metrics_add(&m, "bad key", 1, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("bad key");
    for (int i = 0; i < RP_TRAINER_MAX_METRICS; i++)
        assert_int_equal(rp_trainer_metrics_add(&m, "k", i, "k %d", i), RP_OK);
    assert_string_equal(m.m[3].shown, "k 3");
    assert_int_equal(rp_trainer_metrics_add(&m, "k", 9, NULL), RP_ERR_INVALID);
    /* No trainer runs: a stop request is not taken. */
    assert_false(rp_trainer_request_stop(SIGINT));
    job_free(&j);
}

/*
 * The epoch's running scalars in a mid-epoch checkpoint ("train/epoch_steps", "train/epoch_sums"):
 * one sum per scalar, or the checkpoint is refused, naming the tensor; without both (a checkpoint
 * of an older version) it resumes, the epoch's means covering the steps since the resume.
 */
static void test_checkpoint_epoch_sums(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "epoch-sums");
    rp_trainer_config c = config(&j, dir, 1, 2);
    j.stop_at = 1; /* stops after 2 steps of the first epoch's 4 */
    assert_int_equal(train_once(&j, &c, NULL), RP_OK);
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
    int64_t n = 0;
    const int64_t *steps = rp_checkpoint_get_i64(ck, "train/epoch_steps", &n);
    assert_non_null(steps);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 2);
    const uint64_t *sums = rp_checkpoint_get_u64(ck, "train/epoch_sums", &n);
    assert_non_null(sums);
    assert_int_equal(n, 1);
    double loss_sum;
    memcpy(&loss_sum, sums, sizeof loss_sum);
    assert_true(loss_sum > 0.5 && loss_sum < 10); /* two steps' cross-entropy over 3 classes */

    rp_trainer *t = NULL;
    uint64_t two[2] = {sums[0], sums[0]};
    rp_checkpoint *bad = checkpoint_edit(ck, "train/epoch_sums", NULL, "train/epoch_sums", 2, two);
    rp_trainer_config rc = config(&j, dir, 1, 2);
    rc.resume = bad;
    assert_int_equal(rp_trainer_create(&t, &rc, &model, &j), RP_ERR_FORMAT);
    assert_null(t);
    tu_assert_error_contains("train/epoch_sums holds 2 scalars; the model has 1");
    rp_checkpoint_destroy(bad);
    bad = checkpoint_edit(ck, "train/epoch_sums", NULL, NULL, 0, NULL);
    rc.resume = bad;
    assert_int_equal(rp_trainer_create(&t, &rc, &model, &j), RP_ERR_FORMAT);
    tu_assert_error_contains("no train/epoch_sums");
    rp_checkpoint_destroy(bad);
    /* An older checkpoint, without either: resumed. */
    rp_checkpoint *old =
        checkpoint_edit(ck, "train/epoch_sums", "train/epoch_steps", NULL, 0, NULL);
    job r;
    job_init(&r, 24, RP_REGIME_SYNC);
    rc = config(&r, dir, 1, 2);
    rc.resume = old;
    rp_trainer_progress p;
    assert_int_equal(train_once(&r, &rc, &p), RP_OK);
    assert_true(p.finished);
    assert_int_equal(p.steps_this_run, 6);
    rp_checkpoint_destroy(old);
    rp_checkpoint_destroy(ck);
    job_free(&j);
    job_free(&r);
}

/*
 * A model's named scalars: every one in metrics.jsonl (a step line's over the last run's steps, an
 * epoch line's over the epoch, each first averaged over a sync step's replicas), the chosen ones on
 * the progress and epoch lines; in sync with 2 replicas and in async.
 */
static void test_named_scalars(void **unused)
{
    rp_trainer_model m = model;
    m.scalars = three_scalars;
    m.train_step = train_step_scalars;
    for (int regime = 0; regime < 2; regime++) {
        job j;
        job_init(&j, 24, regime ? RP_REGIME_ASYNC : RP_REGIME_SYNC); /* 4 steps per epoch */
        char dir[512], log[600];
        tu_tmp_path(dir, sizeof dir, regime ? "scalars-async" : "scalars-sync");
        rp_trainer_config c = config(&j, dir, 2, 2);
        c.metrics_every_steps = 2;
        c.quiet = false;
        c.shown_scalars = "gstep,replica_id";
        /* The lines shown go to stderr: catch them in a file. */
        snprintf(log, sizeof log, "%s.log", dir);
        fflush(stderr);
        int saved = dup(STDERR_FILENO);
        FILE *f = fopen(log, "w");
        assert_non_null(f);
        dup2(fileno(f), STDERR_FILENO);
        rp_status status = train_model(&j, &c, &m, NULL);
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
        close(saved);
        fclose(f);
        assert_int_equal(status, RP_OK);

        cJSON *lines[16];
        int n = read_metrics(dir, lines, 16), steps = 0, epochs = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *o = lines[i];
            double step = json_number(o, "step");
            if (cJSON_GetObjectItem(o, "train_loss")) {
                /* The epoch's steps are 0..3 and 4..7: their mean global step is 1.5 and 5.5. */
                assert_true(json_number(o, "train_gstep") == (epochs ? 5.5 : 1.5));
                if (regime == 0)
                    assert_true(json_number(o, "train_replica_id") == 0.5);
                else
                    assert_true(json_number(o, "train_replica_id") >= 0 &&
                                json_number(o, "train_replica_id") <= 1);
                assert_true(json_number(o, "train_loss") > 0);
                assert_null(cJSON_GetObjectItem(o, "gstep"));
                epochs++;
            } else {
                assert_true(json_number(o, "loss") > 0);
                if (regime == 0) {
                    /* Every 2 steps, the last step's values (a sync run is one step). */
                    assert_true(json_number(o, "gstep") == step - 1);
                    assert_true(json_number(o, "replica_id") == 0.5);
                } else {
                    /* After every async chunk, here a whole epoch. */
                    assert_true(json_number(o, "gstep") == step - 2.5);
                }
                assert_null(cJSON_GetObjectItem(o, "train_gstep"));
                steps++;
            }
            cJSON_Delete(lines[i]);
        }
        assert_int_equal(epochs, 2);
        assert_int_equal(steps, regime ? 2 : 4);

        long size;
        char *text = (char *)read_file(log, &size);
        assert_non_null(text);
        text[size] = '\0';
        /* The chosen scalars in the model's order, not the loss. */
        assert_non_null(strstr(text, "  epoch 1/2  train replica_id "));
        assert_non_null(strstr(text, "  train gstep 1.5000  |w|^2 "));
        assert_non_null(strstr(text, "  epoch 2/2  train replica_id "));
        assert_non_null(strstr(text, "  train gstep 5.5000  |w|^2 "));
        if (regime == 0)
            assert_non_null(
                strstr(text, "  epoch 1/2  step 1/4  replica_id 0.5000  gstep 0.0000  lr "));
        else {
            /* Async: this process's first replica shows the steps it takes, whichever they are
             * (the other may take the epoch's first); each line shown names the chosen scalars. */
            for (const char *p = strstr(text, "  step "); p; p = strstr(p + 1, "  step ")) {
                int at, of;
                char rest[32];
                assert_int_equal(sscanf(p, "  step %d/%d  %31s", &at, &of, rest), 3);
                assert_true(at >= 1 && at < 4 && of == 4);
                assert_string_equal(rest, "replica_id");
                assert_non_null(strstr(p, "  gstep "));
            }
        }
        assert_null(strstr(text, "loss"));
        free(text);
        job_free(&j);
    }
}

/*
 * Steps-only mode (cfg.steps): a model without epochs or steps_per_epoch takes 10 global steps;
 * a stop after step 6 resumes to the uninterrupted run's checkpoint and metrics.jsonl, bit for
 * bit; metrics.jsonl's
 * lines say no epoch, and the checkpoint cadence counts global steps.
 */
static void test_steps_only(void **unused)
{
    rp_trainer_model m = model;
    m.steps_per_epoch = NULL;
    unsigned char *full = NULL;
    long full_size = 0;
    for (int pass = 0; pass < 2; pass++) {
        job j;
        job_init(&j, 24, RP_REGIME_SYNC);
        char dir[512], path[600];
        tu_tmp_path(dir, sizeof dir, pass ? "steps-stop" : "steps-full");
        rp_trainer_config c = config(&j, dir, 2, 1);
        c.epochs = 99;           /* unused in steps-only mode */
        c.eval_every_epochs = 1; /* likewise: one evaluation, at the end */
        c.steps = 10;
        c.warmup_steps = 2;
        c.checkpoint_every_steps = 4;
        c.metrics_every_steps = 5;
        if (pass) j.stop_at = 5;
        rp_trainer_progress p;
        assert_int_equal(train_model(&j, &c, &m, &p), RP_OK);
        if (!pass) {
            assert_true(p.finished);
            assert_int_equal(p.global_step, 10);
            assert_int_equal(j.n_evals, 1);
            /* The cadence: checkpoints after steps 4 and 8 (and the end) were on disk as steps
             * began. */
            assert_int_equal(j.on_disk[4], 4);
            assert_int_equal(j.on_disk[8], 8);
            assert_int_equal(j.on_disk[9], 8);
            for (int g = 0; g < 10; g++)
                assert_int_equal(j.seen[0][0][g], 1);
            for (int s = 0; s < MAX_STEPS; s++)
                assert_int_equal(j.seen[0][1][s], 0);
            cJSON *lines[8];
            int n = read_metrics(dir, lines, 8);
            assert_int_equal(n, 3); /* steps 5 and 10, and the end's */
            for (int i = 0; i < n; i++) {
                assert_null(cJSON_GetObjectItem(lines[i], "epoch"));
                assert_true(json_number(lines[i], "step") == (i ? 10 : 5));
                cJSON_Delete(lines[i]);
            }
            full = read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &full_size);
            assert_non_null(full);
            job_free(&j);
            continue;
        }
        assert_true(p.stopped);
        assert_int_equal(p.global_step, 6);
        assert_int_equal(p.epoch, 0);
        assert_int_equal(p.step, 6);
        rp_checkpoint *ck = NULL;
        assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
        job r;
        job_init(&r, 24, RP_REGIME_SYNC);
        rp_trainer_config rc = c;
        r.dir = dir;
        rc.resume = ck;
        assert_int_equal(train_model(&r, &rc, &m, &p), RP_OK);
        rp_checkpoint_destroy(ck);
        assert_true(p.finished);
        assert_int_equal(p.steps_this_run, 4);
        for (int g = 0; g < 10; g++)
            assert_int_equal(j.seen[1][0][g] + r.seen[1][0][g], 1);
        long size;
        unsigned char *resumed =
            read_file(path_in(path, sizeof path, dir, "checkpoint.safetensors"), &size);
        assert_non_null(resumed);
        assert_int_equal(size, full_size);
        assert_memory_equal(resumed, full, (size_t)size);
        /* The end's line is the mean of all 10 steps, as the uninterrupted run's. */
        char full_dir[512];
        tu_tmp_path(full_dir, sizeof full_dir, "steps-full");
        assert_same_metrics(full_dir, dir);
        free(resumed);
        job_free(&j);
        job_free(&r);
    }
    free(full);
}

/* The scalars' names and the shown list are checked at create, naming what is wrong. */
static void test_bad_scalars(void **unused)
{
    job j;
    job_init(&j, 24, RP_REGIME_SYNC);
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "bad-scalars");
    rp_trainer *t = (rp_trainer *)&j;
    rp_trainer_config c = config(&j, dir, 1, 1);
    rp_trainer_model m = model;
    static const char *const twice[] = {"loss", "loss", NULL};
    static const char *const spaced[] = {"d loss", NULL};
    static const char *const nine[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", NULL};
    static const char *const none[] = {NULL};
    m.scalars = twice;
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    assert_null(t);
    tu_assert_error_contains("\"loss\" twice");
    m.scalars = spaced;
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("\"d loss\"");
    m.scalars = nine;
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("more than 8 scalars");
    m.scalars = none;
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("empty");
    m.scalars = three_scalars;
    c.shown_scalars = "gstep,d_loss";
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("no scalar \"d_loss\"");
    /* No steps_per_epoch: only in steps-only mode. */
    c = config(&j, dir, 1, 1);
    m = model;
    m.steps_per_epoch = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &m, &j), RP_ERR_INVALID);
    tu_assert_error_contains("steps_per_epoch");
    c.steps = -1;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    tu_assert_error_contains("steps -1");
    job_free(&j);
}

static int setup(void **unused)
{
    rp_log_set_level(RP_LOG_WARN);
    /* Before any thread starts, so that only the trainer's signal thread ever takes SIGINT. */
    if (rp_trainer_catch_signals() != RP_OK) return -1;
    return tu_tmpdir_create("trainer");
}

static int teardown(void **unused)
{
    tu_tmpdir_remove();
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_directory_and_cadence),
        cmocka_unit_test(test_failed_write_keeps_previous_checkpoint),
        cmocka_unit_test(test_stop_request_resumes_bit_exactly),
        cmocka_unit_test(test_signal_stops_and_resumes),
        cmocka_unit_test(test_eval_cadence),
        cmocka_unit_test(test_every_batch_once),
        cmocka_unit_test(test_async_max_steps),
        cmocka_unit_test(test_refuses_existing_run),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_checkpoint_epoch_sums),
        cmocka_unit_test(test_named_scalars),
        cmocka_unit_test(test_steps_only),
        cmocka_unit_test(test_bad_scalars),
    };
    return tu_run_group_tests(argc, argv, tests, setup, teardown);
}
