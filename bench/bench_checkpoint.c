/*
 * bench_checkpoint.c - what checkpointing costs a classifier's training
 * steps: the same run with no checkpoint, with a checkpoint every K steps
 * written inline (the step waits), and written in the background
 * (rp_trainer_config.checkpoint_background), whole or sharded:
 *
 *   build/bench_checkpoint [model] [dataset] [data_dir] [steps] [every] [shards] [replicas]
 *                          [batch] [dir] [zero]
 *
 * model mlp|resnet20|resnet18|resnet50 (default mlp), dataset fashion-mnist|synthetic (default
 * fashion-mnist from /usr/share/datasets/fashion-mnist), steps per run (default 200), every K
 * steps a checkpoint (default 10), shards 0 (whole file), N (the gathered state split in N) or
 * -1 (every worker its own shard: checkpoint_per_worker), replicas (threads, default 1), the
 * global batch (default 128), the run directories' parent (default /tmp), the ZeRO stage (0:
 * sync, 1, 2 or 3). The modes take
 * turns, five runs each after one warm-up run; prints one JSON line per mode with the median wall
 * time per step over the runs (checkpoints included) and the cost relative to no checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/classifier/classifier.h"

#define RUNS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per step of one run (-1 on error). */
static double run_once(rp_classifier *clf, const char *dir, int64_t steps, int64_t every,
                       int shards, bool background, bool save, int replicas, int batch, int zero)
{
    static const rp_strategy_kind stages[4] = {RP_STRATEGY_SYNC, RP_STRATEGY_ZERO1,
                                               RP_STRATEGY_ZERO2, RP_STRATEGY_ZERO3};
    rp_trainer_config tc = rp_trainer_config_default();
    tc.runtime.replicas = replicas;
    tc.runtime.strategy = stages[zero];
    tc.run_dir = dir;
    tc.run_dir_exact = true;
    tc.force = true;
    tc.epochs = 1000;
    tc.max_steps = steps;
    tc.lr = 0.01f;
    tc.quiet = true;
    tc.batch = batch;
    tc.eval_every_epochs = 0;
    tc.checkpoint_every_epochs = 0;
    tc.checkpoint_every_steps = save ? every : 0;
    tc.no_checkpoint = !save;
    tc.checkpoint_shards = shards > 0 ? shards : 0;
    tc.checkpoint_per_worker = shards < 0;
    tc.checkpoint_background = background;
    tc.straggler_window = 0;
    rp_trainer *t = NULL;
    if (rp_trainer_create(&t, &tc, rp_classifier_trainer_model(), clf) != RP_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", rp_last_error());
        return -1;
    }
    double t0 = rp_now_s();
    rp_status status = rp_trainer_run(t);
    double seconds = rp_now_s() - t0;
    if (status != RP_OK) fprintf(stderr, "bench_checkpoint: %s\n", rp_last_error());
    rp_trainer_destroy(t);
    return status == RP_OK ? seconds / (double)steps : -1;
}

int main(int argc, char **argv)
{
    const char *model = argc > 1 ? argv[1] : "mlp";
    const char *dataset = argc > 2 ? argv[2] : "fashion-mnist";
    const char *data_dir = argc > 3 ? argv[3] : "/usr/share/datasets/fashion-mnist";
    int64_t steps = argc > 4 ? atoll(argv[4]) : 200, every = argc > 5 ? atoll(argv[5]) : 10;
    int shards = argc > 6 ? atoi(argv[6]) : 0, replicas = argc > 7 ? atoi(argv[7]) : 1;
    int batch = argc > 8 ? atoi(argv[8]) : 128;
    const char *parent = argc > 9 ? argv[9] : "/tmp";
    int zero = argc > 10 ? atoi(argv[10]) : 0;
    if (steps < 1 || every < 1 || shards < -1 || replicas < 1 || batch < 1 || zero < 0 ||
        zero > 3) {
        fprintf(stderr, "usage: bench_checkpoint [model] [dataset] [data_dir] [steps] [every] "
                        "[shards: 0, N, -1 per worker] [replicas] [batch] [dir] [zero 0-3]\n");
        return 2;
    }
    rp_classifier_config cc;
    memset(&cc, 0, sizeof cc);
    snprintf(cc.model, sizeof cc.model, "%s", model);
    snprintf(cc.dataset, sizeof cc.dataset, "%s", dataset);
    snprintf(cc.data_dir, sizeof cc.data_dir, "%s", data_dir);
    cc.batch = batch;
    cc.momentum = 0.9f;
    cc.seed = 1;
    cc.hidden[0] = 512;
    cc.hidden[1] = 256;
    cc.n_hidden = 2;
    cc.schedule = RP_PIPE_GPIPE;
    rp_classifier *clf = NULL;
    if (rp_classifier_create(&clf, &cc) != RP_OK) {
        fprintf(stderr, "bench_checkpoint: %s\n", rp_last_error());
        return 1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bench_checkpoint.%ld", parent, (long)getpid());
    static const char *const names[3] = {"none", "inline", "background"};
    double median[3], s[3][RUNS];
    run_once(clf, dir, steps, every, shards, false, false, replicas, batch, zero); /* warm-up */
    /* The modes take turns, so that a change in the machine's load falls on all of them. */
    for (int r = 0; r < RUNS; r++) {
        for (int m = 0; m < 3; m++) {
            s[m][r] =
                run_once(clf, dir, steps, every, shards, m == 2, m > 0, replicas, batch, zero);
            if (s[m][r] < 0) return 1;
        }
    }
    for (int m = 0; m < 3; m++) {
        qsort(s[m], RUNS, sizeof *s[m], cmp_double);
        median[m] = s[m][RUNS / 2];
        printf("{\"model\":\"%s\",\"mode\":\"%s\",\"every\":%lld,\"shards\":%d,\"replicas\":%d,"
               "\"zero\":%d,\"steps\":%lld,\"ms_per_step\":%.3f,\"cost\":%.4f}\n",
               model, names[m], (long long)every, shards, replicas, zero, (long long)steps,
               1e3 * median[m], median[m] / median[0] - 1);
        fflush(stdout);
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_checkpoint: could not remove %s\n", dir);
    rp_classifier_destroy(clf);
    return 0;
}
