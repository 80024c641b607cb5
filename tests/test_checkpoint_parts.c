/*
 * test_checkpoint_parts.c - a checkpoint written by every replica, each its own part
 * (rp_replica_checkpoint_part, rp_checkpoint_add_params_pieces/_optimizer_pieces), and read back
 * lazily (rp_checkpoint_open_sharded). On a network of three linear layers and a batch norm
 * (buffers), Adam, two steps:
 *  - under sync (3 replicas: even parts), ZeRO-1, ZeRO-2 and ZeRO-3 (4 replicas: their shards)
 *    and HSDP (4 replicas in groups of 2, ZeRO-1 and ZeRO-3: the first group's shards), the
 *    replicas' shards publish (their pieces tile every tensor exactly once: publish checks it),
 *    and each tensor reads back bitwise what the gathered state (rp_replica_optimizer_fetch,
 *    rp_checkpoint_add_params/_optimizer) holds, the same names, nothing more;
 *  - resuming from the view on the same layout, each ZeRO replica reads only its own pieces of
 *    the optimizer state: with the last shard's state damaged, every other replica reads its
 *    state, and the last one's read fails naming that shard file; a view read by the four
 *    replicas' threads at once gives each the same values;
 *  - replicas that step independently (async) are refused by name.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IN           5
#define HID          9
#define OUT          3
#define GB           8
#define MAX_REPLICAS 4

typedef struct net {
    rp_params *params;
    rp_linear_layer l1, l2, l3;
    rp_batchnorm_layer bn;
    rp_optimizer *opt;
} net;

typedef struct job {
    const char *base;
    rp_checkpoint *view;             /* to resume from (NULL: a fresh start) */
    rp_status read[MAX_REPLICAS];    /* each replica's optimizer read from the view */
    char message[MAX_REPLICAS][512]; /* and its error */
    float values[MAX_REPLICAS][512]; /* each replica's values after reading the view */
    int64_t numel;
} job;

static int step_no;

static rp_status build(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = calloc(1, sizeof *m);
    if (!m) return RP_ERR_NOMEM;
    rp_replica_set_user(rep, m);
    RP_CHECK(rp_params_create(&m->params));
    RP_CHECK(rp_linear_layer_init(&m->l1, m->params, "l1", IN, HID, true, true));
    RP_CHECK(rp_batchnorm_layer_init(&m->bn, m->params, "bn", HID));
    RP_CHECK(rp_linear_layer_init(&m->l2, m->params, "l2", HID, HID, true, true));
    RP_CHECK(rp_linear_layer_init(&m->l3, m->params, "l3", HID, OUT, true, false));
    RP_CHECK(rp_params_finalize(m->params, 11));
    rp_optim_config oc = rp_optim_config_default();
    oc.kind = RP_OPTIM_ADAM;
    RP_CHECK(rp_replica_optimizer_create(rep, &m->opt, m->params, &oc));
    if (!j->view) return RP_OK;
    /* Resuming: the values whole, the optimizer state of this replica's range only. */
    int id = rp_replica_id(rep);
    RP_CHECK(rp_checkpoint_read_params(j->view, m->params, "param/"));
    j->read[id] = rp_checkpoint_read_optimizer(j->view, m->opt, m->params, "optim/");
    snprintf(j->message[id], sizeof j->message[id], "%s",
             j->read[id] == RP_OK ? "" : rp_last_error());
    if (id == 0) j->numel = rp_params_numel(m->params);
    return rp_params_read_values(m->params, j->values[id]);
}

static rp_status step(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    rp_tape *t = rp_replica_tape(rep);
    rp_tape_reset(t);
    int n = rp_replica_count(rep), rows = GB / n, r0 = rp_replica_id(rep) * rows;
    float x[GB * IN];
    tu_fill(x, GB * IN, 40 + (uint64_t)step_no, -1.0f, 1.0f);
    rp_tensor *h = rp_tensor_new(t, 2, (int[]){rows, IN});
    int32_t *y = rp_arena_alloc(rp_tape_arena(t), (size_t)rows * sizeof *y);
    if (!h || !y) return rp_last_status();
    RP_CHECK(rp_tensor_write(h, x + r0 * IN, (int64_t)rows * IN));
    for (int k = 0; k < rows; k++)
        y[k] = (r0 + k + step_no) % OUT;
    h = rp_relu(t, rp_linear_layer_forward(t, &m->l1, h));
    h = rp_linear_layer_forward(t, &m->l2, h); /* no ReLU: every l2 row gets gradients */
    rp_tensor *loss = rp_softmax_cross_entropy(t, rp_linear_layer_forward(t, &m->l3, h), y);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(t, loss));
    return rp_optimizer_step(m->opt, 0.01f);
}

/* Each replica writes its own part as shard `id` of the replica count. */
static rp_status write_part(rp_replica *rep, void *arg)
{
    job *j = arg;
    net *m = rp_replica_user(rep);
    rp_checkpoint *ck = NULL;
    RP_CHECK(rp_checkpoint_create(&ck));
    rp_status status = rp_replica_checkpoint_part(rep, ck, m->opt, "param/", "optim/");
    if (status == RP_OK)
        status =
            rp_checkpoint_save_shard(ck, j->base, 1, rp_replica_id(rep), rp_replica_count(rep), 1);
    rp_checkpoint_destroy(ck);
    return status;
}

static rp_status fetch(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    return rp_replica_optimizer_fetch(rep, m->opt);
}

static rp_status destroy(rp_replica *rep, void *arg)
{
    (void)arg;
    net *m = rp_replica_user(rep);
    rp_optimizer_destroy(m->opt);
    rp_params_destroy(m->params);
    free(m);
    return RP_OK;
}

static rp_replicator *make(rp_strategy_kind kind, int n, int hsdp)
{
    rp_config cfg = rp_config_default();
    cfg.backend = RP_BACKEND_THREADS;
    cfg.replicas = n;
    cfg.threads_per_replica = 1;
    cfg.timeout_s = 30;
    cfg.strategy = kind;
    cfg.hsdp = hsdp;
    rp_replicator *r = NULL;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    return r;
}

/* A fresh directory's checkpoint base path. */
static void base_path(char *buf, size_t size, const char *name)
{
    char dir[512];
    tu_tmp_path(dir, sizeof dir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(buf, size, "%s/checkpoint", dir);
}

/* Trains two steps, writes every replica's part and publishes; returns the gathered state. */
static rp_checkpoint *write_run(const char *base, rp_strategy_kind kind, int n, int hsdp)
{
    job j = {.base = base};
    rp_replicator *r = make(kind, n, hsdp);
    tu_run_ok(r, build, &j);
    for (step_no = 0; step_no < 2; step_no++)
        tu_run_ok(r, step, &j);
    tu_run_ok(r, write_part, &j);
    /* Publishing checks that the pieces tile every tensor once: no gap, no overlap. */
    assert_int_equal(rp_checkpoint_publish(base, 1, n, "test"), RP_OK);
    tu_run_ok(r, fetch, &j);
    net *m0 = rp_replica_user(rp_replicator_replica(r, 0));
    rp_checkpoint *whole = NULL;
    assert_int_equal(rp_checkpoint_create(&whole), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(whole, m0->params, "param/"), RP_OK);
    assert_int_equal(rp_checkpoint_add_optimizer(whole, m0->opt, m0->params, "optim/"), RP_OK);
    tu_run_ok(r, destroy, &j);
    rp_replicator_destroy(r);
    return whole;
}

/* Every tensor of `want` is in the view, bitwise, and the view holds nothing else. */
static void assert_view_is(const char *base, const rp_checkpoint *want)
{
    rp_checkpoint *view = NULL;
    assert_int_equal(rp_checkpoint_open_sharded(&view, base), RP_OK);
    assert_int_equal(rp_checkpoint_count(view), rp_checkpoint_count(want));
    for (int i = 0; i < rp_checkpoint_count(want); i++) {
        const char *name = rp_checkpoint_name_at(want, i);
        rp_checkpoint_dtype da, db;
        int na, nb;
        int64_t sa[RP_MAX_DIMS], sb[RP_MAX_DIMS];
        const void *a = rp_checkpoint_get(want, name, &da, &na, sa);
        const void *b = rp_checkpoint_get(view, name, &db, &nb, sb);
        if (!b) print_error("%s: %s\n", name, rp_last_error());
        assert_non_null(b);
        assert_int_equal(da, db);
        assert_int_equal(na, nb);
        int64_t numel = 1;
        for (int d = 0; d < na; d++) {
            assert_int_equal(sa[d], sb[d]);
            numel *= sa[d];
        }
        assert_memory_equal(a, b, (size_t)numel * (da == RP_CHECKPOINT_I64 ? 8 : 4));
    }
    rp_checkpoint_destroy(view);
}

static void test_parts_tile_and_read_back(void **state)
{
    const struct {
        rp_strategy_kind kind;
        int n, hsdp;
        const char *name;
    } layouts[] = {
        {RP_STRATEGY_SYNC, 3, 0, "sync3"},  {RP_STRATEGY_ZERO1, 4, 0, "zero1"},
        {RP_STRATEGY_ZERO2, 4, 0, "zero2"}, {RP_STRATEGY_ZERO3, 4, 0, "zero3"},
        {RP_STRATEGY_ZERO1, 4, 2, "hsdp1"}, {RP_STRATEGY_ZERO3, 4, 2, "hsdp3"},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        char base[600];
        base_path(base, sizeof base, layouts[k].name);
        rp_checkpoint *whole = write_run(base, layouts[k].kind, layouts[k].n, layouts[k].hsdp);
        assert_view_is(base, whole);
        rp_checkpoint_destroy(whole);
    }
}

static void test_each_replica_reads_its_pieces(void **state)
{
    char base[600];
    base_path(base, sizeof base, "resume");
    rp_checkpoint *whole = write_run(base, RP_STRATEGY_ZERO1, 4, 0);

    /* The same layout, resumed from the view: equal values on every replica (read concurrently). */
    job j = {.base = base};
    assert_int_equal(rp_checkpoint_open_sharded(&j.view, base), RP_OK);
    rp_replicator *r = make(RP_STRATEGY_ZERO1, 4, 0);
    tu_run_ok(r, build, &j);
    for (int q = 0; q < 4; q++) {
        assert_int_equal(j.read[q], RP_OK);
        assert_memory_equal(j.values[q], j.values[0], (size_t)j.numel * sizeof(float));
    }
    tu_run_ok(r, destroy, &j);
    rp_replicator_destroy(r);
    rp_checkpoint_destroy(j.view);

    /*
     * Damage the second moment of one of l2.weight's last elements. The 192 trainable values split
     * 48 per replica, and l2.weight (values 72..152) spans replicas 1, 2 and 3: its last element
     * lies in the last replica's piece, in shard 3. The index still opens (sizes and CRC digits
     * unchanged); replicas 1 and 2 read their pieces of that tensor but never shard 3's, and
     * replica 3's read names the shard.
     */
    const float *v = rp_checkpoint_get_f32(whole, "optim/slot1/l2.weight", NULL, NULL);
    assert_non_null(v);
    char shard3[700];
    snprintf(shard3, sizeof shard3, "%s.shards/g1/shard-3-of-4.safetensors", base);
    int last = HID * HID - 1; /* values 144..152 are shard 3's: a non-zero one (a dead unit's
                                 moments are 0, and zero bytes are everywhere) */
    while (last > HID * HID - 9 && v[last] == 0)
        last--;
    assert_true(v[last] != 0);
    tu_damage_float(shard3, v[last]);
    memset(&j, 0, sizeof j);
    j.base = base;
    assert_int_equal(rp_checkpoint_open_sharded(&j.view, base), RP_OK);
    r = make(RP_STRATEGY_ZERO1, 4, 0);
    tu_run_ok(r, build, &j); /* build records each replica's optimizer read */
    for (int q = 0; q < 3; q++) {
        if (j.read[q] != RP_OK) print_error("replica %d: %s\n", q, j.message[q]);
        assert_int_equal(j.read[q], RP_OK);
    }
    assert_int_equal(j.read[3], RP_ERR_FORMAT);
    assert_non_null(strstr(j.message[3], "shard-3-of-4.safetensors is damaged"));
    assert_non_null(strstr(j.message[3], "optim/slot1/l2.weight"));
    tu_run_ok(r, destroy, &j);
    rp_replicator_destroy(r);
    /* Read whole (one unsharded optimizer), the damage is found. */
    rp_checkpoint *back = NULL;
    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_ERR_FORMAT);
    rp_checkpoint_index_close(ix);
    rp_checkpoint_destroy(j.view);
    rp_checkpoint_destroy(whole);
}

static rp_status async_part(rp_replica *rep, void *arg)
{
    rp_status *out = arg;
    net *m = rp_replica_user(rep);
    rp_checkpoint *ck = NULL;
    RP_CHECK(rp_checkpoint_create(&ck));
    rp_status status = rp_replica_checkpoint_part(rep, ck, m->opt, "param/", "optim/");
    if (rp_replica_id(rep) == 0) {
        *out = status;
        if (status != RP_OK) tu_assert_error_contains("lockstep");
    }
    rp_checkpoint_destroy(ck);
    return RP_OK;
}

static void test_async_refused(void **state)
{
    job j = {0};
    rp_replicator *r = make(RP_STRATEGY_ASYNC, 2, 0);
    tu_run_ok(r, build, &j);
    rp_status status = RP_OK;
    tu_run_ok(r, async_part, &status);
    assert_int_equal(status, RP_ERR_UNSUPPORTED);
    tu_run_ok(r, destroy, &j);
    rp_replicator_destroy(r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts_tile_and_read_back),
        cmocka_unit_test(test_each_replica_reads_its_pieces),
        cmocka_unit_test(test_async_refused),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
