/*
 * test_trainer_background.c - the trainer's checkpoints written sharded and
 * on a background thread (trainer.h, "Background saving"), with a model
 * whose whole state after global step g is the value g everywhere, so that
 * a checkpoint that mixed two saves, or one whose data does not belong to
 * its position, cannot pass:
 *  - background saves (whole and sharded) end with the same checkpoint as
 *    inline saves, byte for byte once consolidated, and resume;
 *  - a background write that fails (a file-size limit standing in for a
 *    full disk) fails the run at a later step boundary with a message that
 *    names the step, and the previous checkpoint stays as it was;
 *  - a process killed (SIGKILL) at many moments of a run that saves in the
 *    background at every step always leaves a checkpoint that loads and is
 *    consistent with its position, whole and sharded;
 *  - all of this again with the checkpoint written by every worker
 *    (checkpoint_per_worker: 3 replicas, each its third of the values, the
 *    model's save_part), whose index names that layout.
 * (That the staging copy is refilled without allocating is
 * test_checkpoint_shard.c's test_reset_reuses_memory.)
 */
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
    int64_t numel;    /* the state's values */
    int64_t limit_at; /* from this global step on, files may not grow past 64 bytes (-1: never) */
    const char *dir;
    int64_t steps_run;
} job;

typedef struct state {
    float *v;
} state;

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **out)
{
    job *j = ctx;
    state *s = calloc(1, sizeof *s);
    if (!s) return RP_ERROR(RP_ERR_NOMEM, "state");
    *out = s;
    s->v = calloc((size_t)j->numel, sizeof *s->v);
    if (!s->v) return RP_ERROR(RP_ERR_NOMEM, "values");
    if (ck) {
        int64_t shape[RP_MAX_DIMS];
        int ndim;
        const float *v = rp_checkpoint_get_f32(ck, "param/v", &ndim, shape);
        if (!v || ndim != 1 || shape[0] != j->numel)
            return RP_ERROR(RP_ERR_SHAPE, "the checkpoint has no param/v of %lld",
                            (long long)j->numel);
        memcpy(s->v, v, (size_t)j->numel * sizeof *v);
    }
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *st)
{
    return 1000;
}

/* Blocks until the run directory's checkpoint is at global step `g` (at most 10 s). */
static int64_t on_disk(const char *dir);

static rp_status train_step(rp_replica *rep, void *ctx, void *st, const rp_trainer_at *at,
                            double *loss)
{
    job *j = ctx;
    state *s = st;
    if (at->global_step == j->limit_at && rp_replica_id(rep) == 0) {
        /* The save of step limit_at - 5 is published before the limit applies. */
        for (int i = 0; i < 1000 && on_disk(j->dir) != j->limit_at - 5; i++)
            usleep(10000);
        struct rlimit lim;
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = 64;
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    float g = (float)(at->global_step + 1);
    for (int64_t i = 0; i < j->numel; i++)
        s->v[i] = g;
    if (rp_replica_id(rep) == 0) j->steps_run++;
    *loss = 0;
    return RP_OK;
}

static rp_status save(void *ctx, void *st, rp_checkpoint *ck)
{
    job *j = ctx;
    state *s = st;
    return rp_checkpoint_add_f32(ck, "param/v", 1, &j->numel, s->v);
}

/* Per worker: each replica its even part of the values (they are equal on every replica). */
static rp_status save_part(rp_replica *rep, void *ctx, void *st, rp_checkpoint *ck)
{
    job *j = ctx;
    state *s = st;
    int64_t off, count;
    rp_checkpoint_split_range(j->numel, rp_replica_id(rep), rp_replica_count(rep), &off, &count);
    return rp_checkpoint_add_piece(ck, "param/v", RP_CHECKPOINT_F32, 1, &j->numel, off, count,
                                   s->v + off);
}

static rp_status destroy(rp_replica *rep, void *ctx, void *st)
{
    state *s = st;
    free(s->v);
    free(s);
    return RP_OK;
}

static const rp_trainer_model model = {
    .build = build,
    .steps_per_epoch = steps_per_epoch,
    .train_step = train_step,
    .save = save,
    .save_part = save_part,
    .destroy = destroy,
};

/*
 * The checkpoint's global step, after checking that every value is that step (-1: none can be
 * loaded; the test fails on an inconsistent one).
 */
static int64_t on_disk(const char *dir)
{
    rp_checkpoint *ck = NULL;
    if (rp_trainer_load_checkpoint(&ck, dir) != RP_OK) return -1;
    int64_t n, g = -1, shape[RP_MAX_DIMS];
    const int64_t *pos = rp_checkpoint_get_i64(ck, "train/position", &n);
    int ndim;
    const float *v = rp_checkpoint_get_f32(ck, "param/v", &ndim, shape);
    if (pos && n == 3 && v) {
        g = pos[2];
        for (int64_t i = 0; i < shape[0]; i++) {
            if (v[i] != (float)g) {
                print_error("%s: the checkpoint of step %lld holds %g at %lld\n", dir, (long long)g,
                            (double)v[i], (long long)i);
                g = -2;
                break;
            }
        }
    }
    rp_checkpoint_destroy(ck);
    return g;
}

/* shards: 0 one whole file, N > 0 N shards of the gathered state, -1 per worker (3 replicas). */
static rp_trainer_config config(const char *dir, int64_t steps, int shards, bool background)
{
    rp_trainer_config c = rp_trainer_config_default();
    c.runtime.replicas = shards < 0 ? 3 : 1;
    c.runtime.threads_per_replica = 1;
    c.checkpoint_per_worker = shards < 0;
    if (shards < 0) shards = 0;
    c.run_dir = dir;
    c.run_dir_exact = true;
    c.force = true;
    c.max_steps = steps;
    c.checkpoint_every_steps = 1;
    c.checkpoint_every_epochs = 0;
    c.quiet = true;
    c.checkpoint_shards = shards;
    c.checkpoint_background = background;
    c.straggler_window = 0;
    return c;
}

static rp_status train(job *j, const rp_trainer_config *c, const rp_checkpoint *resume)
{
    rp_trainer_config cc = *c;
    cc.resume = resume;
    rp_trainer *t = NULL;
    RP_CHECK(rp_trainer_create(&t, &cc, &model, j));
    rp_status status = rp_trainer_run(t);
    rp_status st = rp_trainer_destroy(t);
    return status != RP_OK ? status : st;
}

static void dir_path(char *buf, size_t size, const char *name)
{
    tu_tmp_path(buf, size, name);
}

static unsigned char *consolidated(const char *dir, size_t *n)
{
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_trainer_load_checkpoint(&ck, dir), RP_OK);
    char path[600];
    snprintf(path, sizeof path, "%s.whole", dir);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    return tu_read_file(path, n);
}

static void test_background_equals_inline(void **st)
{
    const int shards[] = {0, 3, -1};
    for (int s = 0; s < 3; s++) {
        char a[512], b[512], name[32];
        snprintf(name, sizeof name, "inline%d", shards[s]);
        dir_path(a, sizeof a, name);
        snprintf(name, sizeof name, "bg%d", shards[s]);
        dir_path(b, sizeof b, name);
        job ja = {.numel = 1000, .limit_at = -1, .dir = a};
        job jb = {.numel = 1000, .limit_at = -1, .dir = b};
        rp_trainer_config ca = config(a, 12, shards[s], false);
        rp_trainer_config cb = config(b, 12, shards[s], true);
        assert_int_equal(train(&ja, &ca, NULL), RP_OK);
        assert_int_equal(train(&jb, &cb, NULL), RP_OK);
        assert_int_equal(on_disk(a), 12);
        assert_int_equal(on_disk(b), 12);
        char index[600];
        snprintf(index, sizeof index, "%s/checkpoint.index.json", b);
        struct stat sb;
        assert_int_equal(stat(index, &sb) == 0, shards[s] != 0);
        if (shards[s] != 0) {
            /* The index names the layout that wrote it. */
            char base[600];
            snprintf(base, sizeof base, "%s/checkpoint", b);
            rp_checkpoint_index *ix = NULL;
            assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
            assert_string_equal(rp_checkpoint_index_layout(ix),
                                shards[s] > 0
                                    ? "shards=3 (each tensor split evenly); written from the "
                                      "gathered state of replicas=1 zero=0 tp=1 stages=1"
                                    : "shards=3, each worker's own pieces; written by replicas=3 "
                                      "zero=0 tp=1 stages=1");
            assert_int_equal(rp_checkpoint_index_shards(ix), 3);
            rp_checkpoint_index_close(ix);
        }
        size_t na, nb;
        unsigned char *ba = consolidated(a, &na), *bb = consolidated(b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ba, bb, na);
        free(ba);
        free(bb);
        /* It resumes: three more steps from 12. */
        rp_checkpoint *ck = NULL;
        assert_int_equal(rp_trainer_load_checkpoint(&ck, b), RP_OK);
        cb.max_steps = 15;
        jb.steps_run = 0;
        assert_int_equal(train(&jb, &cb, ck), RP_OK);
        rp_checkpoint_destroy(ck);
        assert_int_equal(jb.steps_run, 3);
        assert_int_equal(on_disk(b), 15);
        /* A whole run resumed sharded and back: the older kind goes. */
        cb.checkpoint_shards = shards[s] ? 0 : 2;
        cb.checkpoint_per_worker = false;
        assert_int_equal(rp_trainer_load_checkpoint(&ck, b), RP_OK);
        cb.max_steps = 16;
        assert_int_equal(train(&jb, &cb, ck), RP_OK);
        rp_checkpoint_destroy(ck);
        assert_int_equal(on_disk(b), 16);
        char whole[600];
        snprintf(whole, sizeof whole, "%s/checkpoint.safetensors", b);
        assert_int_equal(stat(cb.checkpoint_shards ? whole : index, &sb), -1);
    }
}

static void test_failed_background_write(void **st)
{
    char dir[512];
    dir_path(dir, sizeof dir, "full");
    job j = {.numel = 64, .limit_at = 10, .dir = dir};
    rp_trainer_config c = config(dir, 40, 2, true);
    c.checkpoint_every_steps = 5;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit before;
    getrlimit(RLIMIT_FSIZE, &before);
    rp_status status = train(&j, &c, NULL);
    setrlimit(RLIMIT_FSIZE, &before);
    assert_int_equal(status, RP_ERR_IO);
    tu_assert_error_contains("the background checkpoint save of step 10 failed");
    tu_assert_error_contains("File too large");
    tu_assert_error_contains("previously published checkpoint is intact");
    /* Reported at a step boundary before the next save (step 15) would have waited for it. */
    assert_true(j.steps_run <= 15);
    assert_int_equal(on_disk(dir), 5);
}

/* Runs a background-saving trainer in a child and kills it after `delay_ms`. */
static void kill_during_run(const char *dir, int shards, int delay_ms)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        job j = {.numel = 1 << 20, .limit_at = -1, .dir = dir};
        rp_trainer_config c = config(dir, 100000, shards, true);
        rp_status status = train(&j, &c, NULL);
        _exit(status == RP_OK ? 0 : 1);
    }
    struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int wst = 0;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFSIGNALED(wst));
}

static void test_kill_leaves_a_loadable_checkpoint(void **st)
{
    const int shards[] = {0, 4, -1};
    for (int s = 0; s < 3; s++) {
        char dir[512], name[32];
        snprintf(name, sizeof name, "killed%d", shards[s]);
        dir_path(dir, sizeof dir, name);
        /* A first run that saved at least once. */
        job j = {.numel = 1 << 20, .limit_at = -1, .dir = dir};
        rp_trainer_config c = config(dir, 2, shards[s], true);
        assert_int_equal(train(&j, &c, NULL), RP_OK);
        assert_int_equal(on_disk(dir), 2);
        unsigned seed = 12345u + (unsigned)s;
        for (int round = 0; round < 8; round++) {
            int delay = 20 + (int)(rand_r(&seed) % 400);
            kill_during_run(dir, shards[s], delay);
            int64_t g = on_disk(dir);
            if (g < 1) {
                print_error("%s: after a kill at %d ms the checkpoint does not load (%lld): %s\n",
                            dir, delay, (long long)g, rp_last_error());
                fail();
            }
        }
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_background_equals_inline),
        cmocka_unit_test(test_failed_background_write),
        cmocka_unit_test(test_kill_leaves_a_loadable_checkpoint),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
