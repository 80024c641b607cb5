/*
 * test_checkpoint_slabs.c - pieces of slabs in sharded checkpoints (replicator/io.h,
 * rp_checkpoint_slab): what tensor-parallel members write when each writes its own slices.
 *  - a tensor written as two members' slabs along one axis, each in two ranges, publishes, and
 *    reads back bitwise: whole, as slabs of another degree, as slabs along another axis, as a
 *    range of a slab straddling both writers' slabs; consolidated, resharded and through a lazy
 *    view;
 *  - pieces that do not tile a tensor are refused by publish, naming what is wrong: slabs that
 *    overlap or leave a gap, slabs along two axes, a slab beside the whole tensor, a slab not
 *    covered; slabs outside a tensor are refused when added and when read;
 *  - a parameter list's slices (rp_params_add_shard, rp_params_mark_shard, whose initial values
 *    are the dense tensor's slice) are written by each member as slabs of the dense tensors, the
 *    replicated tensors by the first member only, and read back into a dense list, into members
 *    of the same degree and of another one, from a whole-file dense checkpoint too; a member reads
 *    only the pieces of its slices (with the other member's shard damaged it still reads, and the
 *    other's read names the shard), and a shape mismatch names the dense shape.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* w [6, 4, 3]: values 1..72, distinct and non-zero. */
#define W0 6
#define W1 4
#define W2 3
static float dense_w[W0 * W1 * W2];

static void fill_dense(void)
{
    for (int i = 0; i < W0 * W1 * W2; i++)
        dense_w[i] = (float)(i + 1);
}

/* The slab [start, start + size) along `axis` of dense_w, row-major, into out. */
static int64_t slice_w(int axis, int64_t start, int64_t size, float *out)
{
    int64_t n = 0;
    for (int i = 0; i < W0; i++)
        for (int j = 0; j < W1; j++)
            for (int k = 0; k < W2; k++) {
                int64_t at = axis == 0 ? i : axis == 1 ? j : k;
                if (at >= start && at < start + size) out[n++] = dense_w[(i * W1 + j) * W2 + k];
            }
    return n;
}

static const int64_t w_shape[3] = {W0, W1, W2};

/* Two members' slabs of w along axis 1, each written as two ranges: shard 2m + part. */
static void write_members(const char *base)
{
    for (int m = 0; m < 2; m++) {
        rp_checkpoint_slab slab = {1, 2 * m, 2};
        float mine[W0 * 2 * W2];
        int64_t n = slice_w(1, slab.start, slab.size, mine);
        assert_int_equal(n, 36);
        for (int part = 0; part < 2; part++) {
            rp_checkpoint *ck = NULL;
            assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
            int64_t off = part ? 20 : 0, count = part ? 16 : 20;
            assert_int_equal(rp_checkpoint_add_slab_piece(ck, "w", RP_CHECKPOINT_F32, 3, w_shape,
                                                          &slab, off, count, mine + off),
                             RP_OK);
            /* c [8, 2] split along axis 0, one slab a shard; b whole in shard 0. */
            int k = 2 * m + part;
            float c[4] = {(float)(10 * k + 1), (float)(10 * k + 2), (float)(10 * k + 3),
                          (float)(10 * k + 4)};
            rp_checkpoint_slab cs = {0, 2 * k, 2};
            assert_int_equal(rp_checkpoint_add_slab_piece(ck, "c", RP_CHECKPOINT_F32, 2,
                                                          (int64_t[]){8, 2}, &cs, 0, 4, c),
                             RP_OK);
            if (k == 0)
                assert_int_equal(
                    rp_checkpoint_add_f32(ck, "b", 1, (int64_t[]){3}, (float[]){-1, -2, -3}),
                    RP_OK);
            assert_int_equal(rp_checkpoint_save_shard(ck, base, 1, k, 4, 1), RP_OK);
            rp_checkpoint_destroy(ck);
        }
    }
    assert_int_equal(rp_checkpoint_publish(base, 1, 4, "tp=2"), RP_OK);
}

static void assert_w_equal(const float *got)
{
    assert_memory_equal(got, dense_w, sizeof dense_w);
}

static void test_slabs_read_across_degrees(void **state)
{
    (void)state;
    fill_dense();
    char base[512];
    tu_tmp_path(base, sizeof base, "degrees");
    write_members(base);
    size_t n_index;
    char index[600];
    snprintf(index, sizeof index, "%s.index.json", base);
    char *text = (char *)tu_read_file(index, &n_index);
    assert_non_null(strstr(text, "\"axis\":1,\"start\":2,\"size\":2"));
    free(text);

    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    float got[W0 * W1 * W2], want[W0 * W1 * W2];
    /* Whole. */
    memset(got, 0, sizeof got);
    assert_int_equal(rp_checkpoint_index_read(ix, "w", 0, W0 * W1 * W2, got), RP_OK);
    assert_w_equal(got);
    /* Four members along the same axis, two along axis 0 and three along axis 2. */
    for (int axis = 0; axis < 3; axis++) {
        int members = axis == 0 ? 2 : axis == 1 ? 4 : 3;
        int64_t size = w_shape[axis] / members;
        for (int r = 0; r < members; r++) {
            rp_checkpoint_slab slab = {axis, r * size, size};
            int64_t n = slice_w(axis, slab.start, size, want);
            memset(got, 0, sizeof got);
            assert_int_equal(rp_checkpoint_index_read_slab(ix, "w", &slab, 0, n, got), RP_OK);
            assert_memory_equal(got, want, (size_t)n * sizeof(float));
        }
    }
    /* A range of a slab that straddles both writers' slabs and both parts of each. */
    rp_checkpoint_slab mid = {1, 1, 2};
    slice_w(1, 1, 2, want);
    memset(got, 0, sizeof got);
    assert_int_equal(rp_checkpoint_index_read_slab(ix, "w", &mid, 5, 17, got), RP_OK);
    assert_memory_equal(got, want + 5, 17 * sizeof(float));
    /* c, eight rows from four slabs; a slab spanning its axis is the whole tensor. */
    float c[16];
    rp_checkpoint_slab all_rows = {0, 0, 8};
    assert_int_equal(rp_checkpoint_index_read_slab(ix, "c", &all_rows, 0, 16, c), RP_OK);
    for (int k = 0; k < 4; k++)
        for (int e = 0; e < 4; e++)
            assert_true(c[4 * k + e] == (float)(10 * k + e + 1));
    /* Slabs outside the tensor and ranges outside the slab are refused. */
    rp_checkpoint_slab bad[] = {{1, 3, 2}, {3, 0, 1}, {1, 0, 0}, {-2, 0, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(rp_checkpoint_index_read_slab(ix, "w", &bad[i], 0, 1, got),
                         RP_ERR_INVALID);
    assert_int_equal(rp_checkpoint_index_read_slab(ix, "w", &mid, 30, 7, got), RP_ERR_INVALID);
    tu_assert_error_contains("in the slab");

    /* Consolidated: every tensor whole, as written. */
    rp_checkpoint *back = NULL;
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_OK);
    int ndim = 0;
    int64_t shape[RP_MAX_DIMS];
    const float *w = rp_checkpoint_get_f32(back, "w", &ndim, shape);
    assert_non_null(w);
    assert_int_equal(ndim, 3);
    assert_int_equal(shape[1], W1);
    assert_w_equal(w);
    rp_checkpoint_destroy(back);
    rp_checkpoint_index_close(ix);

    /* Resharded into three even ranges, and read lazily. */
    assert_int_equal(rp_checkpoint_reshard(base, 3), RP_OK);
    rp_checkpoint *view = NULL;
    assert_int_equal(rp_checkpoint_open_sharded(&view, base), RP_OK);
    w = rp_checkpoint_get_f32(view, "w", NULL, NULL);
    assert_non_null(w);
    assert_w_equal(w);
    const float *b = rp_checkpoint_get_f32(view, "b", NULL, NULL);
    assert_non_null(b);
    assert_true(b[0] == -1 && b[2] == -3);
    rp_checkpoint_destroy(view);
}

/* Publishes the given slab pieces of w (whole slabs unless count says otherwise), one a shard. */
static rp_status publish_slabs(const char *base, const rp_checkpoint_slab *slabs,
                               const int64_t *counts, int n)
{
    for (int k = 0; k < n; k++) {
        rp_checkpoint *ck = NULL;
        assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
        assert_int_equal(rp_checkpoint_add_slab_piece(ck, "w", RP_CHECKPOINT_F32, 3, w_shape,
                                                      &slabs[k], 0, counts[k], dense_w),
                         RP_OK);
        assert_int_equal(rp_checkpoint_save_shard(ck, base, 1, k, n, 1), RP_OK);
        rp_checkpoint_destroy(ck);
    }
    return rp_checkpoint_publish(base, 1, n, NULL);
}

static void test_slabs_that_do_not_tile_are_refused(void **state)
{
    (void)state;
    fill_dense();
    struct {
        const char *name;
        rp_checkpoint_slab slabs[2];
        int64_t counts[2];
        const char *message;
    } cases[] = {
        {"overlap", {{1, 0, 3}, {1, 2, 2}}, {54, 36}, "indices from 3 along axis 1 are in two"},
        {"gap", {{1, 0, 1}, {1, 2, 2}}, {18, 36}, "indices from 1 along axis 1 are in no shard"},
        {"short", {{1, 0, 1}, {1, 1, 2}}, {18, 36}, "indices 3..4 along axis 1 are in no shard"},
        {"axes", {{0, 0, 3}, {1, 2, 2}}, {36, 36}, "along axis 0, shard 1's along 1"},
        {"whole", {{-1, 0, 0}, {1, 2, 2}}, {72, 36}, "of the whole tensor, shard 1's of a slab"},
        {"partial",
         {{1, 0, 2}, {1, 2, 2}},
         {10, 36},
         "elements 10..36 of the slab [0, 2) along axis 1 are in no shard"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char base[512], name[64];
        snprintf(name, sizeof name, "tile-%s", cases[i].name);
        tu_tmp_path(base, sizeof base, name);
        assert_int_equal(publish_slabs(base, cases[i].slabs, cases[i].counts, 2), RP_ERR_FORMAT);
        tu_assert_error_contains("tensor \"w\"");
        tu_assert_error_contains(cases[i].message);
    }
    /* A slab outside the tensor, or a range outside the slab, is refused when added. */
    rp_checkpoint *ck = NULL;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    rp_checkpoint_slab past = {1, 3, 2}, axis = {3, 0, 1}, ok = {1, 0, 2};
    assert_int_equal(
        rp_checkpoint_add_slab_piece(ck, "w", RP_CHECKPOINT_F32, 3, w_shape, &past, 0, 1, dense_w),
        RP_ERR_INVALID);
    tu_assert_error_contains("[3, 5) along axis 1 is not inside");
    assert_int_equal(
        rp_checkpoint_add_slab_piece(ck, "w", RP_CHECKPOINT_F32, 3, w_shape, &axis, 0, 1, dense_w),
        RP_ERR_INVALID);
    assert_int_equal(
        rp_checkpoint_add_slab_piece(ck, "w", RP_CHECKPOINT_F32, 3, w_shape, &ok, 30, 7, dense_w),
        RP_ERR_INVALID);
    tu_assert_error_contains("of the slab");
    assert_int_equal(rp_checkpoint_count(ck), 0);
    rp_checkpoint_destroy(ck);
}

/* ---- parameter lists: members' slices ---------------------------------------------------- */

#define R                                                                                          \
    6 /* w [R, C]: split along its columns; b [C], rm [C]: along axis 0; g [R]: replicated         \
       */
#define C 4

/*
 * A list of the test's tensors: dense (members 1), or member `rank` of `members`; rm (a buffer)
 * declared at the member's shape and marked as the slice, as batch norm after a column split is.
 */
static rp_params *make_list(int rank, int members, uint64_t seed)
{
    rp_params *p = NULL;
    assert_int_equal(rp_params_create(&p), RP_OK);
    rp_init normal = {.kind = RP_INIT_NORMAL, .value = 1.0f};
    int wshape[2] = {R, C}, cshape[1] = {C}, rshape[1] = {R};
    if (members > 1) {
        assert_non_null(rp_params_add_shard(p, "w", 2, wshape, normal, true, 1, rank, members));
        assert_non_null(rp_params_add_shard(p, "b", 1, cshape, normal, true, 0, rank, members));
    } else {
        assert_non_null(rp_params_add(p, "w", 2, wshape, normal, true));
        assert_non_null(rp_params_add(p, "b", 1, cshape, normal, true));
    }
    assert_non_null(rp_params_add(p, "g", 1, rshape, normal, true));
    int local = C / members;
    rp_tensor *rm = rp_params_add(p, "rm", 1, &local, normal, false);
    assert_non_null(rm);
    assert_int_equal(rp_params_mark_shard(p, rm, 0, rank, members), RP_OK);
    assert_int_equal(rp_params_finalize(p, seed), RP_OK);
    return p;
}

/* The values member `rank` of `members` holds of the dense values `d` (make_list's order). */
static void member_values(const rp_params *dense, const float *d, const rp_params *member, int rank,
                          int members, float *out)
{
    for (int i = 0; i < rp_params_count(member); i++) {
        const rp_tensor *t = rp_params_at(member, i);
        const rp_tensor *dt = rp_params_find(dense, t->name);
        const float *src = d + rp_params_offset(dense, dt->index);
        float *dst = out + rp_params_offset(member, i);
        if (!strcmp(t->name, "w")) {
            int k = C / members;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < k; c++)
                    dst[r * k + c] = src[r * C + rank * k + c];
        } else if (!strcmp(t->name, "g")) {
            memcpy(dst, src, R * sizeof(float));
        } else {
            int k = C / members;
            memcpy(dst, src + rank * k, (size_t)k * sizeof(float));
        }
    }
}

/* Reads ck into a fresh list of member `rank` of `members` and compares it with the dense values.
 */
static rp_status read_member(const rp_checkpoint *ck, const rp_params *dense, const float *d,
                             int rank, int members)
{
    rp_params *p = make_list(rank, members, 99);
    rp_status status = rp_checkpoint_read_params(ck, p, "param/");
    if (status == RP_OK) {
        float want[64], *got = tu_read_values(p);
        member_values(dense, d, p, rank, members, want);
        assert_memory_equal(got, want, (size_t)rp_params_numel(p) * sizeof(float));
        free(got);
    }
    rp_params_destroy(p);
    return status;
}

static void test_members_write_and_read_their_slices(void **state)
{
    (void)state;
    rp_params *dense = make_list(0, 1, 5);
    float *d = tu_read_values(dense);
    /* Declared slices start as the dense tensor's slices (rm marked, w and b declared so). */
    rp_params *m[2];
    for (int r = 0; r < 2; r++) {
        m[r] = make_list(r, 2, 5);
        float want[64], *got = tu_read_values(m[r]);
        member_values(dense, d, m[r], r, 2, want);
        assert_memory_equal(got, want, (size_t)rp_params_numel(m[r]) * sizeof(float));
        free(got);
        int axis = -1, rank = -1, size = -1;
        const rp_tensor *w = rp_params_find(m[r], "w");
        assert_true(rp_params_shard_of(m[r], w->index, &axis, &rank, &size));
        assert_int_equal(axis, 1);
        assert_int_equal(rank, r);
        assert_int_equal(size, 2);
        assert_false(rp_params_shard_of(m[r], rp_params_find(m[r], "g")->index, NULL, NULL, NULL));
        assert_true(rp_params_shard_of(m[r], rp_params_find(m[r], "rm")->index, NULL, NULL, NULL));
    }
    assert_false(rp_params_shard_of(dense, 0, NULL, NULL, NULL));
    assert_int_equal(rp_params_mark_shard(m[0], rp_params_find(m[0], "g"), 0, 0, 2),
                     RP_ERR_INVALID); /* finalized */
    tu_assert_error_contains("finalized");
    assert_int_equal(rp_params_mark_shard(dense, rp_params_find(m[0], "g"), 0, 0, 2),
                     RP_ERR_INVALID); /* another list's */

    /* Each member writes its slices, member 0 also g (replicated): shard r of 2. */
    char base[512];
    tu_tmp_path(base, sizeof base, "members");
    for (int r = 0; r < 2; r++) {
        rp_checkpoint *ck = NULL;
        assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
        assert_int_equal(
            rp_checkpoint_add_params_pieces(ck, m[r], "param/", 0, rp_params_numel(m[r]), r == 0),
            RP_OK);
        assert_int_equal(rp_checkpoint_count(ck), r == 0 ? 4 : 3);
        assert_int_equal(rp_checkpoint_save_shard(ck, base, 1, r, 2, 1), RP_OK);
        rp_checkpoint_destroy(ck);
    }
    assert_int_equal(rp_checkpoint_publish(base, 1, 2, "tp=2"), RP_OK);

    rp_checkpoint *view = NULL;
    assert_int_equal(rp_checkpoint_open_sharded(&view, base), RP_OK);
    /* Dense: every tensor whole, with the dense shapes. */
    rp_params *back = make_list(0, 1, 99);
    assert_int_equal(rp_checkpoint_read_params(view, back, "param/"), RP_OK);
    float *got = tu_read_values(back);
    assert_memory_equal(got, d, (size_t)rp_params_numel(dense) * sizeof(float));
    free(got);
    rp_params_destroy(back);
    /* Members of the writers' degree and of another. */
    for (int members = 2; members <= 4; members += 2)
        for (int r = 0; r < members; r++)
            assert_int_equal(read_member(view, dense, d, r, members), RP_OK);
    rp_checkpoint_destroy(view);
    /* From a whole-file checkpoint of the dense list, in memory. */
    rp_checkpoint *whole = NULL;
    assert_int_equal(rp_checkpoint_create(&whole), RP_OK);
    assert_int_equal(rp_checkpoint_add_params(whole, dense, "param/"), RP_OK);
    for (int r = 0; r < 4; r++)
        assert_int_equal(read_member(whole, dense, d, r, 4), RP_OK);
    /* A member list whose dense shape is not the checkpoint's: the dense shape is named. */
    rp_params *wide = NULL;
    assert_int_equal(rp_params_create(&wide), RP_OK);
    rp_init zeros = {.kind = RP_INIT_ZEROS};
    assert_non_null(rp_params_add_shard(wide, "w", 2, (int[]){R, 2 * C}, zeros, true, 1, 0, 2));
    assert_int_equal(rp_params_finalize(wide, 1), RP_OK);
    assert_int_equal(rp_checkpoint_read_params_part(whole, wide, "param/"), RP_ERR_SHAPE);
    tu_assert_error_contains("param/w has shape [6, 4] in the checkpoint, [6, 8] in the model");
    rp_params_destroy(wide);
    rp_checkpoint_destroy(whole);

    /* Member 1's shard damaged where it holds w[0][3]: member 0 reads only its own pieces. */
    char shard1[600];
    snprintf(shard1, sizeof shard1, "%s.shards/g1/shard-1-of-2.safetensors", base);
    tu_damage_float(shard1, d[rp_params_offset(dense, rp_params_find(dense, "w")->index) + 3]);
    assert_int_equal(rp_checkpoint_open_sharded(&view, base), RP_OK);
    assert_int_equal(read_member(view, dense, d, 0, 2), RP_OK);
    assert_int_equal(read_member(view, dense, d, 1, 2), RP_ERR_FORMAT);
    tu_assert_error_contains("shard-1-of-2.safetensors is damaged");
    tu_assert_error_contains("of the slab [2, 4) along axis 1");
    rp_checkpoint_destroy(view);

    for (int r = 0; r < 2; r++)
        rp_params_destroy(m[r]);
    free(d);
    rp_params_destroy(dense);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slabs_read_across_degrees),
        cmocka_unit_test(test_slabs_that_do_not_tile_are_refused),
        cmocka_unit_test(test_members_write_and_read_their_slices),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
