/*
 * test_checkpoint.c - checkpoints: bit-exact round trips, parameter lists and
 * optimizer state by name, the refusal of every corrupt or truncated file,
 * atomic saves that never lose the previous good file, and the safetensors
 * layout as another reader sees it.
 *
 * The corruption test changes every byte of a small checkpoint to every
 * other value, one at a time, and requires each of those files to be
 * refused. The structural checks are tested separately on hand-written
 * files without a CRC, read with rp_checkpoint_load_safetensors, so that a
 * CRC cannot hide a missing check.
 */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "io/checkpoint_internal.h"
#include "kernels/kernels.h"
#include "replicator/io.h"

#define tmp_path tu_tmp_path

/* Number of entries in tu_tmpdir() whose name starts with `prefix`. */
static int count_files(const char *prefix)
{
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- round trips ------------------------------------------------------------------ */

/* Float bit patterns a careless writer would lose: NaN payloads, signalling NaN, -0, denormals. */
static const uint32_t SPECIAL_BITS[] = {
    0x7fc00001u, /* quiet NaN with a payload */
    0xffa12345u, /* negative signalling NaN with a payload */
    0x7f800001u, /* signalling NaN */
    0x7f800000u, /* +inf */
    0xff800000u, /* -inf */
    0x00000001u, /* smallest denormal */
    0x807fffffu, /* largest negative denormal */
    0x80000000u, /* -0 */
    0x7f7fffffu, /* FLT_MAX */
    0x3f800000u, /* 1 */
    0xbf000000u, /* -0.5 */
    0x00800000u, /* FLT_MIN */
};
#define N_SPECIAL (sizeof SPECIAL_BITS / sizeof SPECIAL_BITS[0])

/* A checkpoint with every kind of tensor and awkward metadata. */
static rp_checkpoint *make_mixed(void)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    /* bf16 first, and 3 of them: the writer puts them after every wider tensor regardless. */
    assert_int_equal(
        rp_checkpoint_add_bf16(ck, "half", 1, (int64_t[]){3}, (rp_bf16[]){0x3f80, 0xffc1, 0x0001}),
        RP_OK);
    float special[N_SPECIAL];
    for (size_t i = 0; i < N_SPECIAL; i++)
        special[i] = bits_to_float(SPECIAL_BITS[i]);
    assert_int_equal(rp_checkpoint_add_f32(ck, "special", 2, (int64_t[]){3, 4}, special), RP_OK);
    float scalar = bits_to_float(0x7fc0beefu);
    assert_int_equal(rp_checkpoint_add_f32(ck, "scalar", 0, NULL, &scalar), RP_OK);
    float four[2 * 1 * 3 * 2];
    for (int i = 0; i < 12; i++)
        four[i] = (float)i - 5.5f;
    assert_int_equal(rp_checkpoint_add_f32(ck, "four.d", 4, (int64_t[]){2, 1, 3, 2}, four), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "empty", 1, (int64_t[]){0}, NULL), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "empty2", 2, (int64_t[]){3, 0}, NULL), RP_OK);
    /* 27 floats in all before the int64 tensors: the writer must still align those. */
    assert_int_equal(rp_checkpoint_add_f32(ck, "odd", 1, (int64_t[]){2}, special), RP_OK);
    int64_t i64[] = {INT64_MIN, -1, 0, 1, INT64_MAX};
    assert_int_equal(rp_checkpoint_add_i64(ck, "counters", 5, i64), RP_OK);
    uint64_t u64[] = {UINT64_MAX, 0x0123456789abcdefull};
    assert_int_equal(rp_checkpoint_add_u64(ck, "rng/state", 2, u64), RP_OK);
    assert_int_equal(rp_checkpoint_set_meta(ck, "config", "{\"lr\": 0.1, \"name\": \"a\\\"b\"}"),
                     RP_OK);
    assert_int_equal(
        rp_checkpoint_set_meta(ck, "note", "tab\there, newline\nthere, caf\xc3\xa9 \xe2\x9c\x93"),
        RP_OK);
    assert_int_equal(rp_checkpoint_set_meta(ck, "empty", ""), RP_OK);
    return ck;
}

/* Every tensor and metadata entry of a equals b's, bit for bit. */
static void assert_same_checkpoint(const rp_checkpoint *a, const rp_checkpoint *b)
{
    assert_int_equal(rp_checkpoint_count(a), rp_checkpoint_count(b));
    for (int i = 0; i < rp_checkpoint_count(a); i++) {
        const char *name = rp_checkpoint_name_at(a, i);
        rp_checkpoint_dtype da, db;
        int na, nb;
        int64_t sa[RP_MAX_DIMS], sb[RP_MAX_DIMS];
        const void *pa = rp_checkpoint_get(a, name, &da, &na, sa);
        const void *pb = rp_checkpoint_get(b, name, &db, &nb, sb);
        assert_non_null(pa);
        assert_non_null(pb);
        assert_int_equal(da, db);
        assert_int_equal(na, nb);
        int64_t numel = 1;
        for (int d = 0; d < na; d++) {
            assert_int_equal(sa[d], sb[d]);
            numel *= sa[d];
        }
        assert_int_equal((uintptr_t)pb % RP_ALIGN, 0);
        if (numel > 0) assert_memory_equal(pa, pb, (size_t)numel * io_ckpt_dtype_size(da));
    }
    assert_int_equal(rp_checkpoint_meta_count(a), rp_checkpoint_meta_count(b));
    for (int i = 0; i < rp_checkpoint_meta_count(a); i++) {
        const char *key = rp_checkpoint_meta_key_at(a, i);
        assert_string_equal(key, rp_checkpoint_meta_key_at(b, i));
        assert_string_equal(rp_checkpoint_get_meta(a, key), rp_checkpoint_get_meta(b, key));
    }
}

static void test_round_trip_bit_exact(void **state)
{
    char path[256], path2[256];
    tmp_path(path, sizeof path, "mixed.safetensors");
    tmp_path(path2, sizeof path2, "mixed2.safetensors");
    rp_checkpoint *ck = make_mixed(), *back = NULL, *again = NULL;
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);
    assert_same_checkpoint(ck, back);

    /* Spot checks through the typed lookups. */
    int ndim;
    int64_t shape[RP_MAX_DIMS];
    const float *special = rp_checkpoint_get_f32(back, "special", &ndim, shape);
    assert_non_null(special);
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 4);
    for (size_t i = 0; i < N_SPECIAL; i++) {
        uint32_t u;
        memcpy(&u, &special[i], sizeof u);
        assert_int_equal(u, SPECIAL_BITS[i]);
    }
    assert_non_null(rp_checkpoint_get_f32(back, "scalar", &ndim, shape));
    assert_int_equal(ndim, 0);
    int64_t n;
    const int64_t *counters = rp_checkpoint_get_i64(back, "counters", &n);
    assert_non_null(counters);
    assert_int_equal(n, 5);
    assert_true(counters[0] == INT64_MIN && counters[4] == INT64_MAX && counters[1] == -1);
    const uint64_t *rng = rp_checkpoint_get_u64(back, "rng/state", &n);
    assert_non_null(rng);
    assert_int_equal(n, 2);
    assert_true(rng[0] == UINT64_MAX && rng[1] == 0x0123456789abcdefull);
    assert_non_null(rp_checkpoint_get_f32(back, "empty", &ndim, shape));
    assert_int_equal(shape[0], 0);
    assert_string_equal(rp_checkpoint_get_meta(back, "config"),
                        "{\"lr\": 0.1, \"name\": \"a\\\"b\"}");
    /* File order puts the 8-byte types first, each group in insertion order. */
    assert_string_equal(rp_checkpoint_name_at(back, 0), "counters");
    assert_string_equal(rp_checkpoint_name_at(back, 1), "rng/state");
    assert_string_equal(rp_checkpoint_name_at(back, 2), "special");
    assert_string_equal(rp_checkpoint_name_at(back, rp_checkpoint_count(back) - 1), "half");
    const rp_bf16 *half = rp_checkpoint_get_bf16(back, "half", &ndim, shape);
    assert_non_null(half);
    assert_int_equal(ndim, 1);
    assert_int_equal(shape[0], 3);
    assert_true(half[0] == 0x3f80 && half[1] == 0xffc1 && half[2] == 0x0001);
    /* The CRC entry is the file's business, not the user's. */
    assert_null(rp_checkpoint_get_meta(back, "replicator.crc32"));

    /* Saving what was loaded gives the same bytes: the format is deterministic. */
    assert_int_equal(rp_checkpoint_save(back, path2), RP_OK);
    size_t n1, n2;
    unsigned char *b1 = tu_read_file(path, &n1), *b2 = tu_read_file(path2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    /* The safetensors layout: 8-byte length, header padded to 8, data 8-aligned. */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b1[i];
    assert_int_equal(hlen % 8, 0);
    assert_memory_equal(b1 + 8, "{\"__metadata__\":{\"replicator.crc32\":\"", 37);
    assert_true(b1[8 + hlen - 1] == '}' || b1[8 + hlen - 1] == ' ');
    assert_int_equal(rp_checkpoint_load(&again, path2), RP_OK);
    assert_same_checkpoint(ck, again);

    free(b1);
    free(b2);
    rp_checkpoint_destroy(again);
    rp_checkpoint_destroy(back);
    rp_checkpoint_destroy(ck);
}

static void test_empty_checkpoint(void **state)
{
    char path[256];
    tmp_path(path, sizeof path, "empty.safetensors");
    rp_checkpoint *ck, *back;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);
    assert_int_equal(rp_checkpoint_count(back), 0);
    assert_int_equal(rp_checkpoint_meta_count(back), 0);
    rp_checkpoint_destroy(back);
    rp_checkpoint_destroy(ck);
}

static void test_add_and_lookup_errors(void **state)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    float x[2] = {1, 2};
    assert_int_equal(rp_checkpoint_add_f32(ck, "x", 1, (int64_t[]){2}, x), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "x", 1, (int64_t[]){2}, x), RP_ERR_INVALID);
    tu_assert_error_contains("\"x\" is already present");
    assert_int_equal(rp_checkpoint_add_f32(ck, "", 1, (int64_t[]){2}, x), RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "__metadata__", 1, (int64_t[]){2}, x),
                     RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "bad\xff", 1, (int64_t[]){2}, x), RP_ERR_INVALID);
    tu_assert_error_contains("UTF-8");
    char long_name[300];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(rp_checkpoint_add_f32(ck, long_name, 1, (int64_t[]){2}, x), RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "neg", 1, (int64_t[]){-1}, x), RP_ERR_INVALID);
    tu_assert_error_contains("[-1]");
    assert_int_equal(rp_checkpoint_add_f32(ck, "five", 5, (int64_t[]){1, 1, 1, 1, 2}, x),
                     RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "null", 1, (int64_t[]){2}, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_count(ck), 1);                /* nothing half-added */
    assert_non_null(rp_checkpoint_get_f32(ck, "x", NULL, NULL)); /* and the name index intact */
    assert_null(rp_checkpoint_get_f32(ck, "null", NULL, NULL));
    assert_int_equal(rp_checkpoint_set_meta(ck, "replicator.crc32", "0"), RP_ERR_INVALID);
    tu_assert_error_contains("reserved");
    assert_int_equal(rp_checkpoint_set_meta(ck, "k", "\xc0\xaf"),
                     RP_ERR_INVALID); /* overlong '/' */
    assert_int_equal(rp_checkpoint_set_meta(ck, "k", "v1"), RP_OK);
    assert_int_equal(rp_checkpoint_set_meta(ck, "k", "v2"), RP_OK);
    assert_string_equal(rp_checkpoint_get_meta(ck, "k"), "v2");
    assert_int_equal(rp_checkpoint_meta_count(ck), 1);

    assert_null(rp_checkpoint_get_f32(ck, "nope", NULL, NULL));
    tu_assert_error_contains("no tensor named \"nope\"");
    assert_null(rp_checkpoint_get_i64(ck, "x", NULL));
    tu_assert_error_contains("\"x\" is F32, not I64");
    assert_null(rp_checkpoint_get_meta(ck, "absent"));
    assert_null(rp_checkpoint_name_at(ck, 1));
    assert_null(rp_checkpoint_meta_key_at(ck, -1));

    /* Dimensions over 2^53 are refused whatever their order, even beside a zero. */
    const int64_t big = (int64_t)1 << 53;
    assert_int_equal(rp_checkpoint_add_f32(ck, "z1", 3, (int64_t[]){0, big, big}, NULL),
                     RP_ERR_INVALID);
    tu_assert_error_contains("bad shape [0, 9007199254740992, 9007199254740992]");
    assert_int_equal(rp_checkpoint_add_f32(ck, "z2", 3, (int64_t[]){big, big, 0}, NULL),
                     RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "z3", 2, (int64_t[]){0, big + 1}, NULL),
                     RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_add_f32(ck, "z4", 3, (int64_t[]){0, 1 << 20, 1 << 20}, NULL),
                     RP_OK);
    assert_int_equal(rp_checkpoint_count(ck), 2);

    rp_checkpoint *out = (rp_checkpoint *)1;
    char path[256];
    assert_int_equal(rp_checkpoint_load(&out, tmp_path(path, sizeof path, "missing.safetensors")),
                     RP_ERR_IO);
    assert_null(out);
    tu_assert_error_contains("missing.safetensors");
    rp_checkpoint_destroy(ck);
}

/* ---- models and optimizers --------------------------------------------------------- */

typedef struct model {
    rp_params *params;
    rp_linear_layer fc1, fc2;
    rp_batchnorm_layer bn;
} model;

/* Asserts that two models of one shape hold bitwise equal values. */
static void assert_same_values(const rp_params *a, const rp_params *b)
{
    assert_int_equal(rp_params_numel(a), rp_params_numel(b));
    float *va = tu_read_values(a), *vb = tu_read_values(b);
    assert_memory_equal(va, vb, (size_t)rp_params_numel(a) * sizeof(float));
    free(vb);
    free(va);
}

/* tu_fill into n floats of storage (a gradient block), through a host buffer. */
static void fill_storage(float *storage, int64_t n, uint64_t seed, float lo, float hi)
{
    float *h = malloc((size_t)n * sizeof(float));
    assert_non_null(h);
    tu_fill(h, n, seed, lo, hi);
    kernels_active()->mem_upload(storage, h, (size_t)n * sizeof(float));
    free(h);
}

/* A host copy of an optimizer's state block (malloc'd), its float count in *n. */
static float *state_of(const rp_optimizer *opt, int64_t *n)
{
    const float *state = rp_optimizer_state(opt, n);
    float *h = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(float));
    assert_non_null(h);
    if (*n > 0) kernels_active()->mem_download(h, state, (size_t)*n * sizeof(float));
    return h;
}

/* fc1 (4 -> hidden), bn (hidden, optional), fc2 (hidden -> 2). */
static void model_init(model *m, int hidden, bool with_bn, uint64_t seed)
{
    assert_int_equal(rp_params_create(&m->params), RP_OK);
    assert_int_equal(rp_linear_layer_init(&m->fc1, m->params, "fc1", 4, hidden, true, false),
                     RP_OK);
    if (with_bn) assert_int_equal(rp_batchnorm_layer_init(&m->bn, m->params, "bn", hidden), RP_OK);
    assert_int_equal(rp_linear_layer_init(&m->fc2, m->params, "fc2", hidden, 2, true, false),
                     RP_OK);
    assert_int_equal(rp_params_finalize(m->params, seed), RP_OK);
    /* Every value distinct and non-trivial, buffers included. */
    int64_t n = rp_params_numel(m->params);
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    tu_fill(v, n, seed, -1.0f, 1.0f);
    assert_int_equal(rp_params_write_values(m->params, v), RP_OK);
    free(v);
}

static void test_params_round_trip(void **state)
{
    char path[256];
    tmp_path(path, sizeof path, "model.safetensors");
    model a, b;
    model_init(&a, 3, true, 1);
    model_init(&b, 3, true, 2);
    assert_true(rp_params_count(a.params) > rp_params_trainable_count(a.params)); /* has buffers */
    float *va = tu_read_values(a.params), *vb = tu_read_values(b.params);
    assert_true(memcmp(va, vb, (size_t)rp_params_numel(a.params) * sizeof(float)) != 0);
    free(vb);
    free(va);

    /* An Adam optimizer with a real step behind it, so both moments and the count matter. */
    rp_optim_config cfg = rp_optim_config_default();
    cfg.kind = RP_OPTIM_ADAM;
    rp_optimizer *oa, *ob;
    assert_int_equal(rp_optimizer_create(&oa, a.params, &cfg), RP_OK);
    assert_int_equal(rp_optimizer_create(&ob, b.params, &cfg), RP_OK);
    for (int step = 0; step < 2; step++) {
        fill_storage(rp_params_grad(a.params), rp_params_trainable_numel(a.params), 10 + step, -1,
                     1);
        assert_int_equal(rp_optimizer_step(oa, 0.01f), RP_OK);
    }

    rp_checkpoint *ck, *back;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, a.params, "param/"), RP_OK);
    assert_int_equal(rp_checkpoint_add_optimizer(ck, oa, a.params, "optim/"), RP_OK);
    assert_non_null(rp_checkpoint_get_f32(ck, "param/bn.running_var", NULL, NULL));
    assert_non_null(rp_checkpoint_get_f32(ck, "optim/slot1/fc1.weight", NULL, NULL));
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);

    assert_int_equal(rp_checkpoint_read_params(back, b.params, "param/"), RP_OK);
    assert_same_values(a.params, b.params);
    assert_int_equal(rp_checkpoint_read_optimizer(back, ob, b.params, "optim/"), RP_OK);
    int64_t na, nb;
    float *sa = state_of(oa, &na), *sb = state_of(ob, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, (size_t)na * sizeof(float));
    free(sb);
    free(sa);
    assert_int_equal(rp_optimizer_steps(ob), 2);

    /* One more identical step on both gives identical parameters: the resume is exact. */
    fill_storage(rp_params_grad(a.params), rp_params_trainable_numel(a.params), 99, -1, 1);
    fill_storage(rp_params_grad(b.params), rp_params_trainable_numel(b.params), 99, -1, 1);
    assert_int_equal(rp_optimizer_step(oa, 0.01f), RP_OK);
    assert_int_equal(rp_optimizer_step(ob, 0.01f), RP_OK);
    assert_same_values(a.params, b.params);

    rp_checkpoint_destroy(back);
    rp_checkpoint_destroy(ck);
    rp_optimizer_destroy(ob);
    rp_optimizer_destroy(oa);
    rp_params_destroy(b.params);
    rp_params_destroy(a.params);
}

/* A read that fails must leave every value of the model as it was. */
static void assert_read_fails_unchanged(const rp_checkpoint *ck, model *m)
{
    size_t bytes = (size_t)rp_params_numel(m->params) * sizeof(float);
    float *before = tu_read_values(m->params);
    assert_int_equal(rp_checkpoint_read_params(ck, m->params, "param/"), RP_ERR_SHAPE);
    float *after = tu_read_values(m->params);
    assert_memory_equal(before, after, bytes);
    free(after);
    free(before);
}

static void test_params_shape_mismatch_names_both(void **state)
{
    model a, b;
    model_init(&a, 3, true, 1);
    model_init(&b, 5, true, 2);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, a.params, "param/"), RP_OK);
    assert_read_fails_unchanged(ck, &b);
    tu_assert_error_contains(
        "param/fc1.weight has shape [3, 4] in the checkpoint, [5, 4] in the model");
    tu_assert_error_contains(
        "param/fc2.weight has shape [2, 3] in the checkpoint, [2, 5] in the model");
    tu_assert_error_contains(
        "param/bn.running_mean has shape [3] in the checkpoint, [5] in the model");
    rp_checkpoint_destroy(ck);
    rp_params_destroy(b.params);
    rp_params_destroy(a.params);
}

static void test_params_missing_and_unexpected(void **state)
{
    model with_bn, without_bn;
    model_init(&with_bn, 3, true, 1);
    model_init(&without_bn, 3, false, 2);
    rp_checkpoint *small, *big;
    assert_int_equal(rp_checkpoint_create(&small), RP_OK);
    assert_int_equal(rp_checkpoint_create(&big), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(small, without_bn.params, "param/"), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(big, with_bn.params, "param/"), RP_OK);

    assert_read_fails_unchanged(small, &with_bn);
    tu_assert_error_contains("missing param/bn.weight [3]");
    tu_assert_error_contains("missing param/bn.running_var [3]");
    tu_assert_error_contains("4 problems");

    assert_read_fails_unchanged(big, &without_bn);
    tu_assert_error_contains("unexpected param/bn.bias [3]");

    /* A tensor of the wrong dtype under the right name. */
    rp_checkpoint *typed;
    assert_int_equal(rp_checkpoint_create(&typed), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(typed, without_bn.params, "param/"), RP_OK);
    assert_int_equal(rp_checkpoint_add_i64(typed, "param/bn.weight", 3, (int64_t[]){1, 2, 3}),
                     RP_OK);
    assert_int_equal(
        rp_checkpoint_add_f32(typed, "param/bn.bias", 1, (int64_t[]){3}, (float[]){0, 0, 0}),
        RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(typed, "param/bn.running_mean", 1, (int64_t[]){3},
                                           (float[]){0, 0, 0}),
                     RP_OK);
    assert_int_equal(
        rp_checkpoint_add_f32(typed, "param/bn.running_var", 1, (int64_t[]){3}, (float[]){1, 1, 1}),
        RP_OK);
    assert_read_fails_unchanged(typed, &with_bn);
    tu_assert_error_contains("param/bn.weight is I64 in the checkpoint, F32 in the model");
    tu_assert_error_contains("1 problem)");

    /* The same tensors under another prefix are simply not there. */
    assert_int_equal(rp_checkpoint_read_params(big, with_bn.params, "ema/"), RP_ERR_SHAPE);
    tu_assert_error_contains("missing ema/fc1.weight");

    rp_checkpoint_destroy(typed);
    rp_checkpoint_destroy(big);
    rp_checkpoint_destroy(small);
    rp_params_destroy(without_bn.params);
    rp_params_destroy(with_bn.params);
}

static void test_optimizer_kind_mismatch(void **state)
{
    model m;
    model_init(&m, 3, false, 1);
    rp_optim_config adam = rp_optim_config_default(), sgd = rp_optim_config_default();
    adam.kind = RP_OPTIM_ADAM;
    rp_optimizer *oa, *os;
    assert_int_equal(rp_optimizer_create(&oa, m.params, &adam), RP_OK);
    assert_int_equal(rp_optimizer_create(&os, m.params, &sgd), RP_OK); /* momentum: one slot */
    rp_optimizer_set_steps(os, 7);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_optimizer(ck, oa, m.params, "optim/"), RP_OK);
    assert_int_equal(rp_checkpoint_read_optimizer(ck, os, m.params, "optim/"), RP_ERR_SHAPE);
    tu_assert_error_contains("unexpected optim/slot1/fc1.weight [3, 4] (not in the optimizer)");
    assert_int_equal(rp_optimizer_steps(os), 7);
    rp_checkpoint_destroy(ck);
    rp_optimizer_destroy(os);
    rp_optimizer_destroy(oa);
    rp_params_destroy(m.params);
}

/* ---- corruption and truncation ----------------------------------------------------- */

/* A small checkpoint with metadata and four tensors of all dtypes; returns its bytes. */
static unsigned char *small_checkpoint(const char *path, size_t *n)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_set_meta(ck, "config", "{\"lr\":0.5}"), RP_OK);
    assert_int_equal(
        rp_checkpoint_add_f32(ck, "w", 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6}), RP_OK);
    assert_int_equal(rp_checkpoint_add_i64(ck, "step", 1, (int64_t[]){42}), RP_OK);
    assert_int_equal(rp_checkpoint_add_u64(ck, "rng", 2, (uint64_t[]){7, 9}), RP_OK);
    assert_int_equal(rp_checkpoint_add_bf16(ck, "h", 1, (int64_t[]){1}, (rp_bf16[]){0xc0a0}),
                     RP_OK);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    return tu_read_file(path, n);
}

/*
 * Every byte of the file, set to each of the 255 other values in turn: the
 * length field, the JSON header (names, dtypes, shapes, offsets, metadata,
 * the CRC digits, the padding) and the data. Each such file must be refused
 * with RP_ERR_FORMAT.
 */
static void test_every_single_byte_change_is_detected(void **state)
{
    char path[256], bad[256];
    tmp_path(path, sizeof path, "small.safetensors");
    tmp_path(bad, sizeof bad, "flipped.safetensors");
    size_t n;
    unsigned char *bytes = small_checkpoint(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    assert_true(8 + hlen < n); /* there is data after the header */
    tu_write_file(bad, bytes, n);

    int fd = open(bad, O_WRONLY);
    assert_true(fd >= 0);
    long missed = 0, tried = 0, by_class[3] = {0, 0, 0};
    for (size_t pos = 0; pos < n; pos++) {
        for (int v = 0; v < 256; v++) {
            if (v == bytes[pos]) continue;
            unsigned char c = (unsigned char)v;
            assert_int_equal(pwrite(fd, &c, 1, (off_t)pos), 1);
            rp_checkpoint *ck = NULL;
            rp_status s = rp_checkpoint_load(&ck, bad);
            tried++;
            if (s != RP_ERR_FORMAT) {
                if (missed++ < 5) {
                    print_error("byte %zu set to 0x%02x: status %s, \"%s\"\n", pos, v,
                                rp_status_name(s), rp_last_error());
                }
                rp_checkpoint_destroy(ck);
            } else {
                assert_null(ck);
                by_class[pos < 8 ? 0 : pos < 8 + hlen ? 1 : 2]++;
            }
        }
        assert_int_equal(pwrite(fd, &bytes[pos], 1, (off_t)pos), 1);
    }
    close(fd);
    assert_int_equal(missed, 0);
    assert_int_equal(tried, (long)n * 255);
    assert_int_equal(by_class[0], 8 * 255);
    assert_int_equal(by_class[1], (long)hlen * 255);
    assert_int_equal(by_class[2], (long)(n - 8 - hlen) * 255);

    /* The restored file loads again: the loop changed nothing for good. */
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_OK);
    rp_checkpoint_destroy(ck);
    free(bytes);
}

/* Typical messages, one per part of the file. */
static void test_corruption_messages(void **state)
{
    char path[256], bad[256];
    tmp_path(path, sizeof path, "small2.safetensors");
    tmp_path(bad, sizeof bad, "bad2.safetensors");
    size_t n;
    unsigned char *bytes = small_checkpoint(path, &n);
    rp_checkpoint *ck;

    bytes[n - 1] ^= 0x10; /* data */
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("CRC-32 mismatch");
    tu_assert_error_contains("bad2.safetensors");
    /* Python-style reading without the requirement still checks a CRC that is there. */
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("CRC-32 mismatch");
    bytes[n - 1] ^= 0x10;

    bytes[5] = 0x40; /* length field: an absurd header length */
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("over the limit");
    bytes[5] = 0;

    bytes[8] = '['; /* header: not an object */
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("not valid JSON");
    bytes[8] = '{';

    bytes[9] = 0; /* a NUL in the header */
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("control character");
    free(bytes);
}

static void test_truncation_reports_sizes(void **state)
{
    char path[256], bad[256];
    tmp_path(path, sizeof path, "small3.safetensors");
    tmp_path(bad, sizeof bad, "cut.safetensors");
    size_t n;
    unsigned char *bytes = small_checkpoint(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    size_t data = n - 8 - (size_t)hlen;
    assert_true(data > 2);
    size_t cuts[] = {
        0, 4, 7, 8, 8 + (size_t)hlen / 2, 8 + (size_t)hlen, 8 + (size_t)hlen + data / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t cut = cuts[i];
        tu_write_file(bad, bytes, cut);
        rp_checkpoint *ck = (rp_checkpoint *)1;
        assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
        assert_null(ck);
        tu_assert_error_contains("truncated");
        tu_assert_error_contains("cut.safetensors");
        char expected[64], actual[64];
        size_t want = cut < 8 ? 8 : cut < 8 + hlen ? 8 + (size_t)hlen : n;
        snprintf(expected, sizeof expected, "%zu bytes", want);
        snprintf(actual, sizeof actual, "the file has %zu", cut);
        tu_assert_error_contains(expected);
        tu_assert_error_contains(actual);
    }
    /* A byte too many is refused as well. */
    unsigned char *longer = malloc(n + 1);
    assert_non_null(longer);
    memcpy(longer, bytes, n);
    longer[n] = 0;
    tu_write_file(bad, longer, n + 1);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("trailing bytes");
    free(longer);
    free(bytes);
}

/* ---- structure checks on files without a CRC -------------------------------------------- */

/* Writes the safetensors file: length field, header padded with spaces, then `data`. */
static void write_raw(const char *path, const char *header, const void *data, size_t data_len)
{
    size_t len = strlen(header), padded = (len + 7) / 8 * 8;
    unsigned char *buf = calloc(1, 8 + padded + data_len);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, len);
    memset(buf + 8 + len, ' ', padded - len);
    if (data_len) memcpy(buf + 8 + padded, data, data_len);
    tu_write_file(path, buf, 8 + padded + data_len);
    free(buf);
}

static void test_foreign_safetensors(void **state)
{
    char path[256];
    tmp_path(path, sizeof path, "foreign.safetensors");
    /* As Python writes it: no CRC, metadata last, keys in any order. */
    float vals[] = {1.5f, -2.0f, 3.25f};
    int64_t step = 12;
    unsigned char data[12 + 8];
    memcpy(data, &step, 8);
    memcpy(data + 8, vals, 12);
    write_raw(path,
              "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]},"
              "\"step\":{\"data_offsets\":[0,8],\"shape\":[],\"dtype\":\"I64\"},"
              "\"__metadata__\":{\"format\":\"pt\"}}",
              data, sizeof data);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, path), RP_ERR_FORMAT);
    tu_assert_error_contains("replicator.crc32");
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_OK);
    assert_string_equal(rp_checkpoint_name_at(ck, 0), "step"); /* file order */
    const float *w = rp_checkpoint_get_f32(ck, "w", NULL, NULL);
    assert_non_null(w);
    assert_memory_equal(w, vals, sizeof vals);
    int64_t count;
    assert_int_equal(rp_checkpoint_get_i64(ck, "step", &count)[0], 12);
    assert_int_equal(count, 1);
    assert_string_equal(rp_checkpoint_get_meta(ck, "format"), "pt");
    rp_checkpoint_destroy(ck);

    write_raw(path, "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", data, 4);
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_ERR_UNSUPPORTED);
    tu_assert_error_contains("F16");
}

/* Each malformed header is refused with RP_ERR_FORMAT and a message containing `needle`. */
static void test_structure_checks(void **state)
{
    static const struct {
        const char *header;
        size_t data_len;
        const char *needle;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
         16, "a gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "an overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         "starts at byte 4"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "dimension 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "dimension 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "5 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets"},
        {"{\"a\":{\"dtype\":\"X32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
         "unknown field"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "needs a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "truncated"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
        {"{\"__metadata__\":{\"k\":\"v\",\"replicator.crc32\":\"00000000\"}}", 0,
         "not in its place"},
        {"{\"a\":[]}", 0, "not an object"},
        {"[]", 0, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "after the JSON"},
        {"{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "UTF-8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "not valid JSON"},
        /* cJSON decodes \u0000 into a NUL that would cut every compared string short. */
        {"{\"a\":{\"dtype\":\"F32\\u0000x\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\\u0000"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\\u0000"},
        {"{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0, "\\u0000"},
        /* Dimensions over 2^53 are refused in any order, a zero among them or not. */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992,9007199254740992],"
         "\"data_offsets\":[0,0]}}",
         0, "impossibly large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992,0],"
         "\"data_offsets\":[0,0]}}",
         0, "impossibly large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740994],\"data_offsets\":[0,0]}}", 0,
         "dimension 1"},
        /* safetensors: the header starts with '{'. */
        {" {\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'{' first"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{\"j\":\"w\"}}",
         4, "\"__metadata__\" appears twice"},
        {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "metadata \"k\" appears twice"},
    };
    char path[256];
    tmp_path(path, sizeof path, "structure.safetensors");
    unsigned char zeros[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].header, zeros, cases[i].data_len);
        rp_checkpoint *ck = (rp_checkpoint *)1;
        rp_status s = rp_checkpoint_load_safetensors(&ck, path);
        if (s != RP_ERR_FORMAT || !strstr(rp_last_error(), cases[i].needle)) {
            print_error("case %zu (%s): status %s, \"%s\"\n", i, cases[i].header, rp_status_name(s),
                        rp_last_error());
            fail();
        }
        assert_null(ck);
    }
    /* And one that is fine, to show the cases above fail for their own reason. */
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros, 4);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    /*
     * Zero-size tensors with large dimensions, and an escaped backslash before "u0000" (the
     * text \u0000, no NUL) in metadata: all fine.
     */
    write_raw(path,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,1048576,1048576],\"data_offsets\":[0,0]},"
              "\"__metadata__\":{\"k\":\"\\\\u0000\"}}",
              zeros, 0);
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_OK);
    assert_string_equal(rp_checkpoint_get_meta(ck, "k"), "\\u0000");
    rp_checkpoint_destroy(ck);
}

/*
 * The length field's cap is safetensors' own, 100,000,000 bytes: one byte more is refused
 * before anything is allocated; at the cap the file is merely too short for it.
 */
static void test_header_length_cap(void **state)
{
    assert_int_equal(RP_CHECKPOINT_HEADER_MAX, 100000000);
    char path[256];
    tmp_path(path, sizeof path, "cap.safetensors");
    unsigned char bytes[16] = "\0\0\0\0\0\0\0\0{}      ";
    rp_checkpoint *ck;
    io_ckpt_put_le64(bytes, (uint64_t)RP_CHECKPOINT_HEADER_MAX + 1);
    tu_write_file(path, bytes, sizeof bytes);
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_ERR_FORMAT);
    tu_assert_error_contains("header length 100000001 is over the limit of 100000000 bytes");
    io_ckpt_put_le64(bytes, RP_CHECKPOINT_HEADER_MAX);
    tu_write_file(path, bytes, sizeof bytes);
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_ERR_FORMAT);
    tu_assert_error_contains("truncated: the header length 100000000 needs at least 100000008");
    io_ckpt_put_le64(bytes, 8);
    tu_write_file(path, bytes, sizeof bytes);
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
}

/* Types of safetensors that replicator does not read are unsupported, not unknown. */
static void test_foreign_dtypes(void **state)
{
    static const char *const foreign[] = {
        "BOOL",    "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3",
        "F6_E3M2", "I16", "U16", "F16",     "I32",     "U32",     "F64", "C64"};
    char path[256], header[160];
    tmp_path(path, sizeof path, "dtype.safetensors");
    unsigned char zeros[8] = {0};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        snprintf(header, sizeof header,
                 "{\"a\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,1]}}", foreign[i]);
        write_raw(path, header, zeros, 1);
        rp_checkpoint *ck;
        assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_ERR_UNSUPPORTED);
        tu_assert_error_contains(foreign[i]);
        /* A replicator checkpoint only ever holds F32, BF16, I64 and U64: anything else is damage.
         */
        assert_int_equal(rp_checkpoint_load(&ck, path), RP_ERR_FORMAT);
        tu_assert_error_contains("unknown dtype");
    }
}

/* ---- bf16 tensors ---------------------------------------------------------------------- */

/*
 * bf16 rounding written independently of core's: the nearer of the two bf16 values around x
 * (the larger one may be 2^128, which stands for infinity, as IEEE rounding with an unbounded
 * exponent has it), a tie going to the even one. NaN keeps its sign and the top of its payload
 * and becomes quiet.
 */
static rp_bf16 reference_bf16(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u) return (rp_bf16)((u >> 16) | 0x0040u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (rp_bf16)(u >> 16);
    uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
    double x = (double)bits_to_float(mag), dlo = (double)bits_to_float(lo);
    double dhi = hi == 0x7f800000u ? ldexp(1.0, 128) : (double)bits_to_float(hi);
    double below = x - dlo, above = dhi - x;
    uint32_t pick = below < above ? lo : above < below ? hi : ((lo >> 16) & 1u) ? hi : lo;
    return (rp_bf16)((sign | pick) >> 16);
}

/*
 * rp_checkpoint_add_f32_as(BF16) rounds to nearest, ties to even, and the rounded values are
 * what the file holds and what a load gives back: each boundary case (ties on both sides of
 * even, just above and below a tie, the carry into the next binade and into infinity,
 * denormals, -0, infinities, quiet and signalling NaNs), and a sweep of a million f32 patterns
 * against a reference written apart from core's.
 */
static void test_bf16_rounding_through_the_file(void **state)
{
    static const struct {
        uint32_t f32;
        rp_bf16 bf16;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1, exact */
        {0x3f808000u, 0x3f80}, /* tie, the even one below */
        {0x3f818000u, 0x3f82}, /* tie, the even one above */
        {0x3f808001u, 0x3f81}, /* just above a tie */
        {0x3f807fffu, 0x3f80}, /* just below a tie */
        {0xbf808000u, 0xbf80}, /* negative ties */
        {0xbf818000u, 0xbf82},
        {0x3f7fffffu, 0x3f80}, /* a carry into the next binade */
        {0x7f7effffu, 0x7f7f},
        {0x7f7f7fffu, 0x7f7f}, /* the largest bf16 */
        {0x7f7f8000u, 0x7f80}, /* a tie above it goes to infinity (0x7f7f is odd) */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX */
        {0xff7fffffu, 0xff80}, /* -FLT_MAX */
        {0x7f800000u, 0x7f80}, /* infinities */
        {0xff800000u, 0xff80},
        {0x7fc00000u, 0x7fc0}, /* quiet NaN */
        {0x7f800001u, 0x7fc0}, /* signalling NaN, payload in the low half only: NaN, not inf */
        {0xffa12345u, 0xffe1}, /* negative signalling NaN with a payload */
        {0x80000000u, 0x8000}, /* -0 */
        {0x00000001u, 0x0000}, /* the smallest denormal */
        {0x00008000u, 0x0000}, /* denormal ties */
        {0x00018000u, 0x0002},
        {0x807fffffu, 0x8080}, /* the largest negative denormal, up to -FLT_MIN */
        {0x00800000u, 0x0080}, /* FLT_MIN */
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    const int64_t sweep = ((int64_t)1 << 32) / 4093 + 1; /* a prime stride over every pattern */
    float *vals = malloc((size_t)(N_CASES > sweep ? N_CASES : sweep) * sizeof *vals);
    float *wide = malloc((size_t)sweep * sizeof *wide);
    assert_true(vals && wide);
    for (int i = 0; i < N_CASES; i++) {
        vals[i] = bits_to_float(cases[i].f32);
        assert_int_equal(reference_bf16(cases[i].f32), cases[i].bf16); /* the reference agrees */
    }
    rp_checkpoint *ck, *back;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(
        rp_checkpoint_add_f32_as(ck, "cases", RP_CHECKPOINT_BF16, 1, (int64_t[]){N_CASES}, vals),
        RP_OK);
    for (int64_t i = 0; i < sweep; i++)
        vals[i] = bits_to_float((uint32_t)(i * 4093));
    assert_int_equal(
        rp_checkpoint_add_f32_as(ck, "sweep", RP_CHECKPOINT_BF16, 2, (int64_t[]){1, sweep}, vals),
        RP_OK);
    char path[256];
    tmp_path(path, sizeof path, "rounding.safetensors");
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);

    int ndim;
    int64_t shape[RP_MAX_DIMS];
    const rp_bf16 *got = rp_checkpoint_get_bf16(back, "cases", &ndim, shape);
    assert_non_null(got);
    assert_true(ndim == 1 && shape[0] == N_CASES);
    for (int i = 0; i < N_CASES; i++) {
        if (got[i] != cases[i].bf16) {
            print_error("f32 0x%08x: bf16 0x%04x in the file, want 0x%04x\n", cases[i].f32, got[i],
                        cases[i].bf16);
            fail();
        }
    }
    got = rp_checkpoint_get_bf16(back, "sweep", &ndim, shape);
    assert_non_null(got);
    assert_true(ndim == 2 && shape[0] == 1 && shape[1] == sweep);
    assert_int_equal(rp_checkpoint_copy_f32(back, "sweep", wide, sweep), RP_OK);
    for (int64_t i = 0; i < sweep; i++) {
        uint32_t u = (uint32_t)(i * 4093), w;
        memcpy(&w, &wide[i], sizeof w);
        if (got[i] != reference_bf16(u) || w != (uint32_t)got[i] << 16) {
            print_error("f32 0x%08x: bf16 0x%04x in the file (want 0x%04x), widened 0x%08x\n", u,
                        got[i], reference_bf16(u), w);
            fail();
        }
    }
    rp_checkpoint_destroy(back);
    free(wide);
    free(vals);
}

/*
 * Every bf16 bit pattern survives a file as it is, widens to f32 exactly (its bits shifted
 * up), and rounds back from that f32 to itself (NaNs to a quiet NaN of the same sign).
 */
static void test_bf16_every_pattern_round_trip(void **state)
{
    enum { N = 1 << 16 };
    rp_bf16 *all = malloc(N * sizeof *all);
    float *wide = malloc(N * sizeof *wide);
    assert_true(all && wide);
    for (int i = 0; i < N; i++)
        all[i] = (rp_bf16)i;
    rp_checkpoint *ck, *back;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_bf16(ck, "all", 2, (int64_t[]){256, 256}, all), RP_OK);
    char path[256];
    tmp_path(path, sizeof path, "patterns.safetensors");
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    assert_int_equal(rp_checkpoint_load(&back, path), RP_OK);
    const rp_bf16 *got = rp_checkpoint_get_bf16(back, "all", NULL, NULL);
    assert_non_null(got);
    assert_memory_equal(got, all, N * sizeof *all);
    assert_int_equal(rp_checkpoint_copy_f32(back, "all", wide, N), RP_OK);
    rp_checkpoint *again;
    assert_int_equal(rp_checkpoint_create(&again), RP_OK);
    assert_int_equal(
        rp_checkpoint_add_f32_as(again, "all", RP_CHECKPOINT_BF16, 1, (int64_t[]){N}, wide), RP_OK);
    const rp_bf16 *rounded = rp_checkpoint_get_bf16(again, "all", NULL, NULL);
    assert_non_null(rounded);
    for (int i = 0; i < N; i++) {
        uint32_t w;
        memcpy(&w, &wide[i], sizeof w);
        assert_int_equal(w, (uint32_t)i << 16);
        bool nan = (i & 0x7fff) > 0x7f80;
        assert_int_equal(rounded[i], nan ? (i | 0x0040) : i);
    }
    rp_checkpoint_destroy(again);
    rp_checkpoint_destroy(back);
    free(wide);
    free(all);
}

/* The typed lookups and conversions refuse the wrong dtype or size, naming the tensor. */
static void test_bf16_lookups_and_errors(void **state)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    const float f[3] = {1.0f, 2.5f, -3.0f};
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "f", RP_CHECKPOINT_F32, 1, (int64_t[]){3}, f),
                     RP_OK);
    assert_memory_equal(rp_checkpoint_get_f32(ck, "f", NULL, NULL), f, sizeof f); /* as it is */
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "h", RP_CHECKPOINT_BF16, 1, (int64_t[]){3}, f),
                     RP_OK);
    assert_int_equal(rp_checkpoint_add_i64(ck, "n", 2, (int64_t[]){1, 2}), RP_OK);

    assert_null(rp_checkpoint_get_f32(ck, "h", NULL, NULL));
    tu_assert_error_contains("tensor \"h\" is BF16, not F32");
    assert_null(rp_checkpoint_get_bf16(ck, "f", NULL, NULL));
    tu_assert_error_contains("tensor \"f\" is F32, not BF16");
    assert_null(rp_checkpoint_get_bf16(ck, "none", NULL, NULL));
    tu_assert_error_contains("no tensor named \"none\"");

    float dst[3] = {7, 7, 7};
    assert_int_equal(rp_checkpoint_copy_f32(ck, "h", dst, 2), RP_ERR_INVALID);
    tu_assert_error_contains("tensor \"h\" (BF16) has 3 elements, the destination 2");
    assert_int_equal(rp_checkpoint_copy_f32(ck, "n", dst, 2), RP_ERR_INVALID);
    tu_assert_error_contains("tensor \"n\" is I64, not a float tensor");
    assert_int_equal(rp_checkpoint_copy_f32(ck, "none", dst, 3), RP_ERR_INVALID);
    tu_assert_error_contains("no tensor named \"none\"");
    assert_true(dst[0] == 7 && dst[1] == 7 && dst[2] == 7); /* untouched by the refusals */
    assert_int_equal(rp_checkpoint_copy_f32(ck, "h", dst, 3), RP_OK);
    assert_true(dst[0] == 1.0f && dst[1] == 2.5f && dst[2] == -3.0f); /* exact in bf16 */
    assert_int_equal(rp_checkpoint_copy_f32(ck, "f", dst, 3), RP_OK);
    assert_memory_equal(dst, f, sizeof f);

    assert_int_equal(rp_checkpoint_add_f32_as(ck, "x", RP_CHECKPOINT_I64, 1, (int64_t[]){3}, f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("tensor \"x\": f32 values can be stored as F32 or BF16, not I64");
    assert_int_equal(
        rp_checkpoint_add_f32_as(ck, "x", (rp_checkpoint_dtype)9, 1, (int64_t[]){3}, f),
        RP_ERR_INVALID);
    tu_assert_error_contains("not dtype 9");
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "x", RP_CHECKPOINT_BF16, 1, (int64_t[]){3}, NULL),
                     RP_ERR_INVALID);
    tu_assert_error_contains("tensor \"x\" has 3 elements but data is NULL");
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "h", RP_CHECKPOINT_BF16, 1, (int64_t[]){3}, f),
                     RP_ERR_INVALID);
    tu_assert_error_contains("a tensor named \"h\" is already present");
    assert_int_equal(rp_checkpoint_count(ck), 3); /* nothing half-added */
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "e", RP_CHECKPOINT_BF16, 1, (int64_t[]){0}, NULL),
                     RP_OK);
    rp_checkpoint_destroy(ck);
}

/*
 * Checkpoints keep f32 masters: a model's parameters are saved as F32, and a parameter stored
 * as BF16 (an export) is refused by name when read into a model, which stays as it was.
 */
static void test_bf16_params_are_not_masters(void **state)
{
    model a, b;
    model_init(&a, 3, false, 1);
    model_init(&b, 3, false, 2);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(ck, a.params, "param/"), RP_OK);
    for (int i = 0; i < rp_checkpoint_count(ck); i++) {
        rp_checkpoint_dtype dtype;
        assert_non_null(rp_checkpoint_get(ck, rp_checkpoint_name_at(ck, i), &dtype, NULL, NULL));
        assert_int_equal(dtype, RP_CHECKPOINT_F32);
    }
    rp_checkpoint_destroy(ck);
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    float *values = tu_read_values(a.params);
    for (int i = 0; i < rp_params_count(a.params); i++) {
        const rp_tensor *t = rp_params_at(a.params, i);
        char name[300];
        int64_t shape[RP_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
        snprintf(name, sizeof name, "param/%s", t->name);
        assert_int_equal(
            rp_checkpoint_add_f32_as(ck, name, i == 0 ? RP_CHECKPOINT_BF16 : RP_CHECKPOINT_F32,
                                     t->ndim, shape, values + rp_params_offset(a.params, i)),
            RP_OK);
    }
    free(values);
    assert_read_fails_unchanged(ck, &b);
    char want[400];
    snprintf(want, sizeof want, "param/%s is BF16 in the checkpoint, F32 in the model",
             rp_params_at(a.params, 0)->name);
    tu_assert_error_contains(want);
    rp_checkpoint_destroy(ck);
    rp_params_destroy(b.params);
    rp_params_destroy(a.params);
}

/*
 * A BF16 tensor is held to every structural rule, with its 2-byte elements: sizes, gaps,
 * overlaps, truncation, trailing bytes, the 2^53-byte limit; each message names the tensor.
 * A valid file (BF16 first, F32 after it at an odd-looking offset, as another writer may lay it
 * out) loads with the values it holds.
 */
static void test_bf16_structure_checks(void **state)
{
    static const struct {
        const char *header;
        size_t data_len;
        const char *needle;
    } cases[] = {
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
         "tensor \"bf\": its shape needs 6 bytes but data_offsets [0, 8] hold 8"},
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,12]}}", 12,
         "tensor \"bf\": its shape needs 6 bytes"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
         "\"bf\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[2,4]}}",
         4,
         "tensor \"bf\" starts at byte 2 of the data, but the previous tensor ends at 4 (an "
         "overlap)"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
         "\"bf\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[6,8]}}",
         8,
         "tensor \"bf\" starts at byte 6 of the data, but the previous tensor ends at 4 (a gap)"},
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 6, "truncated"},
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 4, "trailing bytes"},
        {"{\"bf\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
         "tensor \"bf\" has unknown dtype \"bf16\""},
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[4503599627370497],\"data_offsets\":[0,0]}}", 0,
         "tensor \"bf\" is impossibly large"},
        {"{\"bf\":{\"dtype\":\"BF16\",\"shape\":[4503599627370496],\"data_offsets\":[0,2]}}", 2,
         "tensor \"bf\": its shape needs 9007199254740992 bytes"},
    };
    char path[256];
    tmp_path(path, sizeof path, "bf16-structure.safetensors");
    unsigned char zeros[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].header, zeros, cases[i].data_len);
        rp_checkpoint *ck = (rp_checkpoint *)1;
        rp_status s = rp_checkpoint_load_safetensors(&ck, path);
        if (s != RP_ERR_FORMAT || !strstr(rp_last_error(), cases[i].needle)) {
            print_error("case %zu (%s): status %s, \"%s\"\n", i, cases[i].header, rp_status_name(s),
                        rp_last_error());
            fail();
        }
        assert_null(ck);
    }
    /* BF16 then F32 at byte 6 (not 4-aligned in the file): both read, values intact. */
    unsigned char data[10];
    const rp_bf16 h[3] = {0x3f80, 0xc040, 0x7f80};
    const float w = -2.25f;
    memcpy(data, h, sizeof h);
    memcpy(data + 6, &w, sizeof w);
    write_raw(path,
              "{\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
              "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[6,10]}}",
              data, sizeof data);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load_safetensors(&ck, path), RP_OK);
    const rp_bf16 *got = rp_checkpoint_get_bf16(ck, "h", NULL, NULL);
    assert_non_null(got);
    assert_memory_equal(got, h, sizeof h);
    const float *gw = rp_checkpoint_get_f32(ck, "w", NULL, NULL);
    assert_non_null(gw);
    assert_true(*gw == w && (uintptr_t)gw % RP_ALIGN == 0);
    float wide[3];
    assert_int_equal(rp_checkpoint_copy_f32(ck, "h", wide, 3), RP_OK);
    assert_true(wide[0] == 1.0f && wide[1] == -3.0f && isinf(wide[2]));
    rp_checkpoint_destroy(ck);
}

/* The first occurrence of text `s` in bytes[0..n), or NULL. */
static char *find_bytes(unsigned char *bytes, size_t n, const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i + len <= n; i++) {
        if (memcmp(bytes + i, s, len) == 0) return (char *)bytes + i;
    }
    return NULL;
}

/*
 * In replicator's own (CRC'd) file, a damaged BF16 entry is refused by the structural checks
 * with the tensor's name, before the CRC: a changed dtype, a changed shape.
 */
static void test_bf16_damaged_header_named(void **state)
{
    char path[256], bad[256];
    tmp_path(path, sizeof path, "bf16-good.safetensors");
    tmp_path(bad, sizeof bad, "bf16-bad.safetensors");
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32_as(ck, "weights", RP_CHECKPOINT_BF16, 1, (int64_t[]){3},
                                              (float[]){1, 2, 3}),
                     RP_OK);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    size_t n;
    unsigned char *bytes = tu_read_file(path, &n);
    char *dtype = find_bytes(bytes, n, "\"BF16\""), *shape = find_bytes(bytes, n, "[3]");
    assert_true(dtype && shape);

    dtype[4] = '7'; /* "BF17" */
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("tensor \"weights\" has unknown dtype \"BF17\"");
    tu_assert_error_contains("bf16-bad.safetensors");
    dtype[4] = '6';

    shape[1] = '4';
    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_ERR_FORMAT);
    tu_assert_error_contains("tensor \"weights\": its shape needs 8 bytes but data_offsets [0, 6]");
    shape[1] = '3';

    tu_write_file(bad, bytes, n);
    assert_int_equal(rp_checkpoint_load(&ck, bad), RP_OK);
    rp_checkpoint_destroy(ck);
    free(bytes);
}

/* ---- many tensors, and files that are not regular ---------------------------------------- */

/* CPU seconds this process has used (the machine may be busy: wall time would say less). */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fails at once if more than `limit` CPU seconds have passed since `t0` (not minutes later). */
static void within(double t0, double limit, const char *what, int done)
{
    double took = cpu_seconds() - t0;
    if (took > limit) {
        print_error("%s: %.1f CPU seconds after %d entries, over the %.0f s limit\n", what, took,
                    done, limit);
        fail();
    }
}

/*
 * 200,000 tensors and 100,000 metadata entries: adding them, loading the file and looking
 * every one up by name each take under 5 CPU seconds (about 0.3, 1.5 and 0.1 s in a release
 * build; the limit leaves room for sanitizer builds). A scan of the names per added or loaded
 * entry, as the code once did, made this quadratic: 100,000 tensors took 34 s to load.
 */
static void test_many_tensors_load_fast(void **state)
{
    enum { N = 200000, M = 100000 };
    const double limit = 5.0;
    char path[256], name[32], value[32];
    tmp_path(path, sizeof path, "many.safetensors");
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    double t0 = cpu_seconds();
    for (int i = 0; i < N; i++) {
        float v = (float)i;
        snprintf(name, sizeof name, "layer%d/w", i);
        assert_int_equal(rp_checkpoint_add_f32(ck, name, 1, (int64_t[]){1}, &v), RP_OK);
        if (i % 10000 == 0) within(t0, limit, "adding tensors", i);
    }
    for (int i = 0; i < M; i++) {
        snprintf(name, sizeof name, "key%d", i);
        snprintf(value, sizeof value, "%d", i);
        assert_int_equal(rp_checkpoint_set_meta(ck, name, value), RP_OK);
        if (i % 10000 == 0) within(t0, limit, "adding metadata", N + i);
    }
    within(t0, limit, "adding", N + M);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);

    t0 = cpu_seconds();
    assert_int_equal(rp_checkpoint_load(&ck, path), RP_OK);
    within(t0, limit, "loading", N + M);
    assert_int_equal(rp_checkpoint_count(ck), N);
    assert_int_equal(rp_checkpoint_meta_count(ck), M);

    t0 = cpu_seconds();
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "layer%d/w", i);
        const float *w = rp_checkpoint_get_f32(ck, name, NULL, NULL);
        assert_non_null(w);
        assert_true(w[0] == (float)i);
        if (i % 10000 == 0) within(t0, limit, "looking tensors up", N - i);
    }
    for (int i = 0; i < M; i++) {
        snprintf(name, sizeof name, "key%d", i);
        snprintf(value, sizeof value, "%d", i);
        assert_string_equal(rp_checkpoint_get_meta(ck, name), value);
    }
    within(t0, limit, "looking up", N + M);
    assert_null(rp_checkpoint_get_f32(ck, "layer200000/w", NULL, NULL));
    rp_checkpoint_destroy(ck);
}

/*
 * A FIFO at the path (or behind a link there) is refused at once, by name. open() on a FIFO
 * waits for a writer, so the reader once blocked forever; an alarm after 2 s interrupts such an
 * open, so that a regression fails here instead of hanging.
 */
static void test_fifo_is_refused_at_once(void **state)
{
    char fifo[256], link[256];
    tmp_path(fifo, sizeof fifo, "load_fifo.safetensors");
    tmp_path(link, sizeof link, "load_link.safetensors");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(fifo, link), 0);
    const char *paths[] = {fifo, link, fifo};
    for (int i = 0; i < 3; i++) {
        rp_checkpoint *ck = (rp_checkpoint *)1;
        tu_alarm_arm(2);
        double t0 = rp_now_s();
        rp_status s = i < 2 ? rp_checkpoint_load(&ck, paths[i])
                            : rp_checkpoint_load_safetensors(&ck, paths[i]);
        double took = rp_now_s() - t0;
        tu_alarm_disarm();
        assert_int_equal(s, RP_ERR_IO);
        assert_null(ck);
        tu_assert_error_contains(paths[i]);
        tu_assert_error_contains("it is a FIFO, not a regular file");
        assert_true(took < 1.0);
    }
    /* A directory is refused the same way. */
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, tu_tmpdir()), RP_ERR_IO);
    tu_assert_error_contains("it is a directory, not a regular file");
}

/* ---- atomic saves ---------------------------------------------------------------------- */

static void test_failed_save_keeps_previous_file(void **state)
{
    char path[256];
    tmp_path(path, sizeof path, "keep.safetensors");
    size_t n_good;
    unsigned char *good = small_checkpoint(path, &n_good);

    /* A big checkpoint that cannot be written whole: the file-size limit stands in for a full disk.
     */
    rp_checkpoint *big;
    assert_int_equal(rp_checkpoint_create(&big), RP_OK);
    static float values[1 << 16];
    assert_int_equal(rp_checkpoint_add_f32(big, "big", 1, (int64_t[]){1 << 16}, values), RP_OK);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = {64 * 1024, old.rlim_max};
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    rp_status s = rp_checkpoint_save(big, path);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(s, RP_ERR_IO);
    tu_assert_error_contains("keep.safetensors.tmp.");
    tu_assert_error_contains("File too large");

    size_t n_now;
    unsigned char *now = tu_read_file(path, &n_now);
    assert_int_equal(n_now, n_good);
    assert_memory_equal(now, good, n_good);
    free(now);
    assert_int_equal(count_files("keep.safetensors.tmp"), 0);
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_load(&ck, path), RP_OK);
    rp_checkpoint_destroy(ck);

    /* The same save without the limit succeeds and replaces the file. */
    assert_int_equal(rp_checkpoint_save(big, path), RP_OK);
    assert_int_equal(rp_checkpoint_load(&ck, path), RP_OK);
    assert_int_equal(rp_checkpoint_count(ck), 1);
    rp_checkpoint_destroy(ck);
    assert_int_equal(count_files("keep.safetensors.tmp"), 0);

    /* A directory that does not exist. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/ck.safetensors", tu_tmpdir());
    assert_int_equal(rp_checkpoint_save(big, missing), RP_ERR_IO);
    tu_assert_error_contains("no/such/dir/ck.safetensors");
    tu_assert_error_contains("No such file or directory");

    /* Something at `path` that is not a regular file is never replaced. */
    char fifo[256], dir[256];
    tmp_path(fifo, sizeof fifo, "a_fifo");
    tmp_path(dir, sizeof dir, "a_dir");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(rp_checkpoint_save(big, fifo), RP_ERR_IO);
    tu_assert_error_contains("not a regular file");
    assert_int_equal(rp_checkpoint_save(big, dir), RP_ERR_IO);
    struct stat st;
    assert_int_equal(stat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(count_files("a_fifo.tmp"), 0);
    assert_int_equal(count_files("a_dir.tmp"), 0);

    rp_checkpoint_destroy(big);
    free(good);
}

/* A pid that names no process: a child that has exited and been reaped. */
static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

/*
 * A save removes the temporary files that saves killed mid-write left beside the checkpoint
 * ("<path>.tmp.<pid>.<n>" of a process that is gone), and keeps those of live processes (a
 * concurrent save), its own process's, and anything not named exactly so.
 */
static void test_stale_temp_files_removed(void **state)
{
    char path[256], other[256];
    tmp_path(path, sizeof path, "stale.safetensors");
    tmp_path(other, sizeof other, "other.safetensors");
    long dead = (long)dead_pid(), live = (long)getppid(), self = (long)getpid();
    char stale[2][300], keep[5][300];
    snprintf(stale[0], sizeof stale[0], "%s.tmp.%ld.0", path, dead);
    snprintf(stale[1], sizeof stale[1], "%s.tmp.%ld.17", path, dead);
    snprintf(keep[0], sizeof keep[0], "%s.tmp.%ld.0", path, live);
    snprintf(keep[1], sizeof keep[1], "%s.tmp.%ld.3", path, self);
    snprintf(keep[2], sizeof keep[2], "%s.tmp.%ldx.0", path, dead);
    snprintf(keep[3], sizeof keep[3], "%s.tmp.%ld.0", other, dead);
    snprintf(keep[4], sizeof keep[4], "%s.tmp.%ld.", path, dead);
    for (int i = 0; i < 2; i++)
        tu_write_file(stale[i], "partial", 7);
    for (int i = 0; i < 5; i++)
        tu_write_file(keep[i], "partial", 7);

    size_t n;
    free(small_checkpoint(path, &n));
    for (int i = 0; i < 2; i++) {
        if (tu_exists(stale[i])) {
            print_error("%s: left in place\n", stale[i]);
            fail();
        }
    }
    for (int i = 0; i < 5; i++) {
        if (!tu_exists(keep[i])) {
            print_error("%s: removed\n", keep[i]);
            fail();
        }
        unlink(keep[i]);
    }
}

/* ---- another reader's view --------------------------------------------------------------- */

/*
 * Python's json module reads the header, and the layout rules of safetensors
 * hold: metadata maps strings to strings, offsets tile the buffer in order,
 * and the F32 values decode to what was written. Skipped without python3.
 */
static void test_python_reads_header(void **state)
{
    if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) skip();
    char path[256], script[256], cmd[700];
    tmp_path(path, sizeof path, "py.safetensors");
    tmp_path(script, sizeof script, "check.py");
    rp_checkpoint *ck = make_mixed();
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    rp_checkpoint_destroy(ck);
    static const char py[] =
        "import json, struct, sys\n"
        "b = open(sys.argv[1], 'rb').read()\n"
        "n = struct.unpack('<Q', b[:8])[0]\n"
        "assert n % 8 == 0, n\n"
        "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
        "meta = h.pop('__metadata__')\n"
        "assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())\n"
        "assert json.loads(meta['config'])['lr'] == 0.1\n"
        "size = {'F32': 4, 'I64': 8, 'U64': 8, 'BF16': 2}\n"
        "at = 0\n"
        "for name, t in sorted(h.items(), key=lambda kv: kv[1]['data_offsets']):\n"
        "    s, e = t['data_offsets']\n"
        "    count = 1\n"
        "    for d in t['shape']: count *= d\n"
        "    assert s == at and e - s == count * size[t['dtype']], name\n"
        "    assert s % size[t['dtype']] == 0, ('unaligned', name)\n"
        "    at = e\n"
        "assert 8 + n + at == len(b)\n"
        "s, e = h['four.d']['data_offsets']\n"
        "vals = struct.unpack('<12f', b[8 + n + s:8 + n + e])\n"
        "assert vals == tuple(i - 5.5 for i in range(12)), vals\n"
        "s, e = h['counters']['data_offsets']\n"
        "assert struct.unpack('<5q', b[8 + n + s:8 + n + e])[4] == 2**63 - 1\n"
        "assert h['half']['dtype'] == 'BF16' and h['half']['shape'] == [3]\n"
        "s, e = h['half']['data_offsets']\n"
        "assert e == at and struct.unpack('<3H', b[8 + n + s:8 + n + e]) == (0x3f80, 0xffc1, 1)\n";
    tu_write_file(script, py, sizeof py - 1);
    snprintf(cmd, sizeof cmd, "python3 %s %s", script, path);
    assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_bit_exact),
        cmocka_unit_test(test_empty_checkpoint),
        cmocka_unit_test(test_add_and_lookup_errors),
        cmocka_unit_test(test_params_round_trip),
        cmocka_unit_test(test_params_shape_mismatch_names_both),
        cmocka_unit_test(test_params_missing_and_unexpected),
        cmocka_unit_test(test_optimizer_kind_mismatch),
        cmocka_unit_test(test_every_single_byte_change_is_detected),
        cmocka_unit_test(test_corruption_messages),
        cmocka_unit_test(test_truncation_reports_sizes),
        cmocka_unit_test(test_foreign_safetensors),
        cmocka_unit_test(test_structure_checks),
        cmocka_unit_test(test_header_length_cap),
        cmocka_unit_test(test_foreign_dtypes),
        cmocka_unit_test(test_bf16_rounding_through_the_file),
        cmocka_unit_test(test_bf16_every_pattern_round_trip),
        cmocka_unit_test(test_bf16_lookups_and_errors),
        cmocka_unit_test(test_bf16_params_are_not_masters),
        cmocka_unit_test(test_bf16_structure_checks),
        cmocka_unit_test(test_bf16_damaged_header_named),
        cmocka_unit_test(test_failed_save_keeps_previous_file),
        cmocka_unit_test(test_many_tensors_load_fast),
        cmocka_unit_test(test_fifo_is_refused_at_once),
        cmocka_unit_test(test_stale_temp_files_removed),
        cmocka_unit_test(test_python_reads_header),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
