/*
 * test_model_parallel.c - logical devices: the classifier trainer with a
 * replica cut into pipeline stages across workers (the runtime's pipe axis),
 * against the same training run whole. Each run trains a few steps of
 * ResNet-20 on a small synthetic dataset and checkpoints; the checkpoints
 * (which hold the whole model under the unsplit network's names, gathered
 * from the stages) are compared:
 *  - 2 stages x 1 replica against 1 x 1, and 3 stages;
 *  - 2 stages x 2 replicas against 1 stage x 2 replicas, bitwise (with one
 *    micro-batch, and 1F1B over 4 against accumulation over 4);
 *  - GPipe and 1F1B over 4 micro-batches: bitwise the same, and the same as
 *    accumulating the gradients of 4 micro-batches on one worker;
 *  - a 2-stage checkpoint resumed whole continues as the whole run does;
 *  - tensor parallelism: checkpoints through the dense tensors lose nothing
 *    (resumed = uninterrupted, bitwise; dense -> split -> saved = dense); with
 *    ZeRO-1 on the data axis it trains bitwise what it trains without;
 *  - what cannot be split is a clear error: an MLP (stages or tensor
 *    parallelism), more stages than units, a batch that does not split into
 *    the micro-batches.
 * Every worker runs its kernels on one thread, so the runs differ only in
 * the layout.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/classifier/classifier.h"

#define STEPS 3

/* The datasets every run shares: 16 x 16 RGB images of 10 classes. */
static rp_classifier *g_clf;

static int setup(void **state)
{
    (void)state;
    if (tu_tmpdir_create("model_parallel") != 0) return -1;
    g_clf = calloc(1, sizeof *g_clf);
    if (!g_clf) return -1;
    rp_classifier_config *cc = &g_clf->cfg;
    snprintf(cc->model, sizeof cc->model, "resnet20");
    snprintf(cc->dataset, sizeof cc->dataset, "synthetic");
    cc->batch = 16;
    cc->momentum = 0.9f;
    cc->weight_decay = 5e-4f;
    cc->seed = 5;
    if (rp_dataset_synthetic(&g_clf->train, 64, 16, 16, 3, 10, 11) != RP_OK) return -1;
    if (rp_dataset_synthetic(&g_clf->test, 32, 16, 16, 3, 10, 12) != RP_OK) return -1;
    return rp_dataset_channel_stats(g_clf->train, g_clf->mean, g_clf->std) == RP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rp_classifier_destroy(g_clf);
    tu_tmpdir_remove();
    return 0;
}

typedef struct layout {
    int replicas, stages, micro;
    rp_pipe_schedule schedule;
    const char *model; /* NULL: resnet20 */
    int batch;         /* 0: 16 */
    int tp;            /* tensor-parallel workers per stage (0: 1) */
    bool zero;         /* ZeRO-1 on the data axis */
} layout;

static layout L(int replicas, int stages, int micro, rp_pipe_schedule schedule)
{
    return (layout){.replicas = replicas, .stages = stages, .micro = micro, .schedule = schedule};
}

/* Trains `steps` steps (resuming `resume`'s checkpoint when not NULL) into run directory `name`. */
static rp_status train(const char *name, layout l, int64_t steps, const char *resume)
{
    rp_classifier *c = g_clf;
    c->cfg.micro_batches = l.micro;
    c->cfg.schedule = l.schedule;
    snprintf(c->cfg.model, sizeof c->cfg.model, "%s", l.model ? l.model : "resnet20");
    c->cfg.batch = l.batch ? l.batch : 16;
    char dir[512];
    tu_tmp_path(dir, sizeof dir, name);
    rp_trainer_config tc = rp_trainer_config_default();
    tc.runtime.backend = RP_BACKEND_THREADS;
    tc.runtime.threads_per_replica = 1;
    tc.runtime.timeout_s = 30;
    tc.runtime.seed = 5;
    tc.runtime.zero = l.zero;
    if (l.stages > 1 || l.tp > 1) {
        tc.runtime.nroles = 1;
        tc.runtime.roles[0] = rp_role_make("replica", l.replicas, l.tp > 1 ? l.tp : 1);
        tc.runtime.roles[0].pipe = l.stages;
    } else {
        tc.runtime.replicas = l.replicas;
    }
    tc.run_dir = dir;
    tc.run_dir_exact = true;
    tc.force = true;
    tc.epochs = 1;
    tc.max_steps = steps;
    tc.lr = 0.05f;
    tc.quiet = true;
    tc.eval_every_epochs = 0;
    tc.batch = c->cfg.batch;
    rp_checkpoint *ck = NULL;
    if (resume) {
        char from[512];
        tu_tmp_path(from, sizeof from, resume);
        if (rp_trainer_load_checkpoint(&ck, from) != RP_OK) return rp_last_status();
        tc.resume = ck;
    }
    rp_trainer *t = NULL;
    rp_status status = rp_trainer_create(&t, &tc, rp_classifier_trainer_model(), c);
    if (status == RP_OK) status = rp_trainer_run(t);
    rp_status teardown = rp_trainer_destroy(t);
    rp_checkpoint_destroy(ck);
    return status != RP_OK ? status : teardown;
}

static rp_checkpoint *load(const char *name)
{
    char dir[512];
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, tu_tmp_path(dir, sizeof dir, name)), RP_OK);
    return ck;
}

/*
 * The largest difference between the two runs' f32 tensors (the same names in both, every one
 * of the whole model's), element by element as |a - b| / (1 + |a|): absolute for values below
 * 1, relative above (numpy's allclose with atol = rtol).
 */
static double compare(const char *a_name, const char *b_name)
{
    rp_checkpoint *a = load(a_name), *b = load(b_name);
    assert_int_equal(rp_checkpoint_count(a), rp_checkpoint_count(b));
    double worst = 0;
    int params = 0;
    for (int i = 0; i < rp_checkpoint_count(a); i++) {
        const char *name = rp_checkpoint_name_at(a, i);
        int na, nb;
        int64_t sa[RP_MAX_DIMS], sb[RP_MAX_DIMS];
        rp_checkpoint_dtype da, db;
        const void *pa = rp_checkpoint_get(a, name, &da, &na, sa),
                   *pb = rp_checkpoint_get(b, name, &db, &nb, sb);
        if (!pb) fail_msg("%s is in %s's checkpoint, not in %s's", name, a_name, b_name);
        assert_int_equal(da, db);
        assert_int_equal(na, nb);
        int64_t n = 1;
        for (int d = 0; d < na; d++) {
            assert_int_equal(sa[d], sb[d]);
            n *= sa[d];
        }
        if (!strcmp(name, "train/epoch_sums")) {
            /* The epoch's running metric sums (doubles stored as their bits): the schedules sum
               the same losses in another order, so they agree as the parameters do. */
            const double *x = pa, *y = pb;
            for (int64_t k = 0; k < n; k++) {
                double d = fabs(x[k] - y[k]) / (1 + fabs(x[k]));
                if (d > worst) worst = d;
            }
            continue;
        }
        if (da != RP_CHECKPOINT_F32) {
            assert_memory_equal(pa, pb, (size_t)n * 8);
            continue;
        }
        params += !strncmp(name, "param/", 6);
        const float *x = pa, *y = pb;
        for (int64_t k = 0; k < n; k++) {
            double d = fabs((double)x[k] - y[k]) / (1 + fabs(x[k]));
            if (d > worst) worst = d;
        }
    }
    /* Every parameter and buffer of the whole network is there. */
    rp_resnet_config rc = rp_resnet_config_default(RP_RESNET20);
    rp_resnet *net;
    assert_int_equal(rp_resnet_create(&net, &rc, 1), RP_OK);
    assert_int_equal(params, rp_params_count(rp_resnet_params(net)));
    rp_resnet_destroy(net);
    rp_checkpoint_destroy(a);
    rp_checkpoint_destroy(b);
    return worst;
}

/* The parameters moved: the runs compared trained. */
static void assert_trained(const char *name)
{
    rp_checkpoint *ck = load(name);
    rp_resnet_config rc = rp_resnet_config_default(RP_RESNET20);
    rp_resnet *net;
    assert_int_equal(rp_resnet_create(&net, &rc, 5), RP_OK);
    const float *w = rp_checkpoint_get_f32(ck, "param/stage2.block1.conv1.weight", NULL, NULL);
    rp_tensor *w0 = rp_params_find(rp_resnet_params(net), "stage2.block1.conv1.weight");
    assert_non_null(w);
    assert_non_null(w0);
    float *init = malloc((size_t)w0->numel * sizeof(float)); /* through the table: strict too */
    assert_non_null(init);
    assert_int_equal(rp_tensor_read(w0, init, w0->numel), RP_OK);
    assert_memory_not_equal(w, init, (size_t)w0->numel * sizeof(float));
    free(init);
    rp_resnet_destroy(net);
    rp_checkpoint_destroy(ck);
}

static void test_stages_equal_whole(void **state)
{
    (void)state;
    assert_int_equal(train("whole", L(1, 1, 1, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_int_equal(train("two", L(1, 2, 1, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_int_equal(train("three", L(1, 3, 1, RP_PIPE_1F1B), STEPS, NULL), RP_OK);
    assert_trained("whole");
    double two = compare("whole", "two"), three = compare("whole", "three");
    if (two > 1e-5 || three > 1e-5)
        fail_msg("split runs differ from the whole run: 2 stages %g, 3 stages %g", two, three);
}

/*
 * 2 stages x 2 replicas: bitwise what 1 stage x 2 replicas trains (the same cross-replica sums in
 * the same order; the stages add only messages). Against 1 x 4 replicas - the same global batch
 * statistics, added in another order - no fixed tolerance holds: the release build measured
 * 1.5e-6 and the sanitizer build 0.11, a ReLU input within rounding of zero landing on the other
 * side (docs/model-parallel.md); so that pair is not compared.
 */
static void test_stages_times_replicas(void **state)
{
    (void)state;
    assert_int_equal(train("one_by_two", L(2, 1, 1, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_int_equal(train("two_by_two", L(2, 2, 1, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_trained("two_by_two");
    assert_true(compare("one_by_two", "two_by_two") == 0);
    assert_int_equal(train("two_by_two_1f1b", L(2, 2, 4, RP_PIPE_1F1B), STEPS, NULL), RP_OK);
    assert_int_equal(train("one_by_two_acc", L(2, 1, 4, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_true(compare("one_by_two_acc", "two_by_two_1f1b") == 0);
}

static void test_schedules_agree(void **state)
{
    (void)state;
    assert_int_equal(train("gpipe4", L(1, 2, 4, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_int_equal(train("1f1b4", L(1, 2, 4, RP_PIPE_1F1B), STEPS, NULL), RP_OK);
    assert_true(compare("gpipe4", "1f1b4") == 0);
    /* On one worker, 4 micro-batches accumulate gradients: the same computation again. */
    assert_int_equal(train("accumulate4", L(1, 1, 4, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_true(compare("gpipe4", "accumulate4") == 0);
    /* Per-micro-batch batch norm is another computation than the whole batch's. */
    assert_int_equal(train("whole4", L(1, 1, 1, RP_PIPE_GPIPE), STEPS, NULL), RP_OK);
    assert_true(compare("whole4", "gpipe4") > 1e-6);
}

/* A checkpoint of 2 stages resumes whole, and on 3 stages, and continues as the whole run. */
static void test_resume_across_layouts(void **state)
{
    (void)state;
    assert_int_equal(train("base", L(1, 1, 1, RP_PIPE_GPIPE), 2, NULL), RP_OK);
    assert_int_equal(train("base", L(1, 1, 1, RP_PIPE_GPIPE), 4, "base"), RP_OK);
    assert_int_equal(train("split", L(1, 2, 1, RP_PIPE_GPIPE), 2, NULL), RP_OK);
    assert_int_equal(train("split", L(1, 1, 1, RP_PIPE_GPIPE), 4, "split"), RP_OK);
    assert_int_equal(train("resplit", L(1, 1, 1, RP_PIPE_GPIPE), 2, NULL), RP_OK);
    assert_int_equal(train("resplit", L(1, 3, 1, RP_PIPE_GPIPE), 4, "resplit"), RP_OK);
    double a = compare("base", "split"), b = compare("base", "resplit");
    if (a > 1e-5 || b > 1e-5)
        fail_msg("resumed across layouts: %g and %g from the whole run", a, b);
}

static layout TP(int replicas, int stages, int micro, int tp)
{
    layout l = L(replicas, stages, micro, RP_PIPE_1F1B);
    l.tp = tp;
    return l;
}

/*
 * Tensor parallelism through the trainer. Its arithmetic against the dense network is
 * test_tp_resnet's (gradients within 1e-5 of dense); here, what the trainer adds: every checkpoint
 * goes through the dense tensors (shards and momentum gathered into a dense twin, and scattered
 * back on resume), which must lose nothing. So:
 *  - a tensor-parallel run interrupted and resumed equals the uninterrupted one bitwise, alone and
 *    with 2 stages of 2 workers each;
 *  - a dense checkpoint resumed on 2 tensor-parallel workers and saved again at once is the same
 *    tensors, bitwise (scatter then gather is the identity).
 * (After several steps a tensor-parallel run is not within 1e-5 of the dense one: the
 * all-reduces add partial sums in another order, a ReLU input within rounding of zero lands on the
 * other side, and the gradients below it move by ~1% - as they do in the dense network itself when
 * one input element moves by one ulp; docs/model-parallel.md.)
 */
static void test_tensor_parallel(void **state)
{
    (void)state;
    assert_int_equal(train("tp_straight", TP(1, 1, 1, 2), 4, NULL), RP_OK);
    assert_int_equal(train("tp_resumed", TP(1, 1, 1, 2), 2, NULL), RP_OK);
    assert_int_equal(train("tp_resumed", TP(1, 1, 1, 2), 4, "tp_resumed"), RP_OK);
    assert_trained("tp_straight");
    assert_true(compare("tp_straight", "tp_resumed") == 0);
    assert_int_equal(train("tpp_straight", TP(1, 2, 2, 2), 4, NULL), RP_OK);
    assert_int_equal(train("tpp_resumed", TP(1, 2, 2, 2), 2, NULL), RP_OK);
    assert_int_equal(train("tpp_resumed", TP(1, 2, 2, 2), 4, "tpp_resumed"), RP_OK);
    assert_true(compare("tpp_straight", "tpp_resumed") == 0);
    /* Dense -> 2 workers -> saved at once: the same tensors. */
    assert_int_equal(train("dense_a", L(1, 1, 1, RP_PIPE_GPIPE), 2, NULL), RP_OK);
    assert_int_equal(train("dense_b", L(1, 1, 1, RP_PIPE_GPIPE), 2, NULL), RP_OK);
    char path[512];
    struct stat before, after;
    assert_int_equal(
        stat(tu_tmp_path(path, sizeof path, "dense_b/checkpoint.safetensors"), &before), 0);
    assert_int_equal(train("dense_b", TP(1, 1, 1, 2), 2, "dense_b"), RP_OK);
    /* Written again (an atomic write: a new file), from the 2 workers' shards. */
    assert_int_equal(stat(path, &after), 0);
    assert_true(after.st_ino != before.st_ino);
    assert_true(compare("dense_a", "dense_b") == 0);
}

/*
 * Tensor parallelism with ZeRO-1 on the data axis: each of 2 replicas' 2 workers keeps the state of
 * half its shard. The reduce-scatter adds in the all-reduce's order, so the checkpoint is bitwise
 * the one without ZeRO-1, straight and resumed (each worker cuts its range out of the dense state).
 */
static void test_tensor_parallel_zero(void **state)
{
    (void)state;
    layout tp = TP(2, 1, 1, 2), tpz = tp;
    tpz.zero = true;
    assert_int_equal(train("tpz_plain", tp, 4, NULL), RP_OK);
    assert_int_equal(train("tpz_straight", tpz, 4, NULL), RP_OK);
    assert_int_equal(train("tpz_resumed", tpz, 2, NULL), RP_OK);
    assert_int_equal(train("tpz_resumed", tpz, 4, "tpz_resumed"), RP_OK);
    assert_trained("tpz_straight");
    assert_true(compare("tpz_plain", "tpz_straight") == 0);
    assert_true(compare("tpz_plain", "tpz_resumed") == 0);
}

static void test_refusals(void **state)
{
    (void)state;
    assert_int_equal(
        train("mlp", (layout){.replicas = 1, .stages = 2, .micro = 1, .model = "mlp"}, 1, NULL),
        RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("only the ResNets");
    layout mlp_tp = {.replicas = 1, .stages = 1, .micro = 1, .model = "mlp", .tp = 2};
    assert_int_equal(train("mlp_tp", mlp_tp, 1, NULL), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("tensor parallelism");
    assert_int_equal(train("many", L(1, 12, 1, RP_PIPE_GPIPE), 1, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("12 stages");
    assert_int_equal(train("micro", L(1, 2, 3, RP_PIPE_GPIPE), 1, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("3 micro-batches");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_equal_whole), cmocka_unit_test(test_stages_times_replicas),
        cmocka_unit_test(test_schedules_agree),    cmocka_unit_test(test_resume_across_layouts),
        cmocka_unit_test(test_tensor_parallel),    cmocka_unit_test(test_tensor_parallel_zero),
        cmocka_unit_test(test_refusals),
    };
    return tu_run_group_tests(argc, argv, tests, setup, teardown);
}
