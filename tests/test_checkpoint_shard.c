/*
 * test_checkpoint_shard.c - sharded checkpoints (replicator/io.h, "sharded
 * checkpoints"):
 *  - a state written as 1, 2, 3 or 7 shards reads back whole, and
 *    consolidated (read whole, saved) is byte for byte the whole-file save of
 *    the same state;
 *  - shards written by workers of one layout (each its own range) are read
 *    at another (ranges that cut across pieces), bitwise; a read touches only
 *    the pieces that overlap it (a damaged piece elsewhere does not matter,
 *    one inside the range is named);
 *  - resharding offline gives the same state under a new generation and
 *    removes the old one;
 *  - a damaged or truncated index or shard, a missing shard, pieces that
 *    overlap or leave a gap: clear errors naming the file and the tensor;
 *  - a generation written but not published (a writer killed before the
 *    index) leaves the previous one loadable;
 *  - rp_checkpoint_reset lets a staging checkpoint be refilled without
 *    allocating.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define tmp_path tu_tmp_path

/* A training state's shapes: odd sizes, one smaller than the shard counts, an empty one. */
static rp_checkpoint *make_state(void)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    static float a[5 * 7 * 3], b[2], c[1000];
    tu_fill(a, 105, 1, -1, 1);
    tu_fill(b, 2, 2, -1, 1);
    tu_fill(c, 1000, 3, -1, 1);
    rp_bf16 h[9];
    for (int i = 0; i < 9; i++)
        h[i] = rp_bf16_from_f32((float)i - 4.5f);
    assert_int_equal(rp_checkpoint_set_meta(ck, "replicator.config", "{\"lr\":0.1}"), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "param/conv.weight", 3, (int64_t[]){5, 7, 3}, a),
                     RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "param/bias", 1, (int64_t[]){2}, b), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "param/empty", 2, (int64_t[]){0, 4}, NULL), RP_OK);
    assert_int_equal(rp_checkpoint_add_bf16(ck, "export/h", 2, (int64_t[]){3, 3}, h), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "optim/slot0/fc", 2, (int64_t[]){10, 100}, c),
                     RP_OK);
    assert_int_equal(rp_checkpoint_add_i64(ck, "train/position", 3, (int64_t[]){1, 2, 12}), RP_OK);
    assert_int_equal(rp_checkpoint_add_u64(ck, "train/epoch_sums", 2, (uint64_t[]){7, 1ull << 63}),
                     RP_OK);
    assert_int_equal(rp_checkpoint_set_meta(ck, "replicator.version", "test"), RP_OK);
    return ck;
}

/* Writes ck as n even shards of generation g and publishes them. */
static void save_sharded(const rp_checkpoint *ck, const char *base, int64_t g, int n)
{
    for (int k = 0; k < n; k++)
        assert_int_equal(rp_checkpoint_save_shard(ck, base, g, k, n, n), RP_OK);
    char layout[32];
    snprintf(layout, sizeof layout, "shards=%d", n);
    assert_int_equal(rp_checkpoint_publish(base, g, n, layout), RP_OK);
}

/* The bytes rp_checkpoint_save writes for ck. */
static unsigned char *whole_bytes(const rp_checkpoint *ck, const char *name, size_t *n)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    assert_int_equal(rp_checkpoint_save(ck, path), RP_OK);
    return tu_read_file(path, n);
}

/* Opens base, reads it whole, and compares its whole-file bytes with `want`. */
static void assert_consolidates_to(const char *base, const unsigned char *want, size_t n_want)
{
    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    rp_checkpoint *back = NULL;
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_OK);
    size_t n;
    unsigned char *got = whole_bytes(back, "consolidated.safetensors", &n);
    assert_int_equal(n, n_want);
    assert_memory_equal(got, want, n);
    free(got);
    rp_checkpoint_destroy(back);
    rp_checkpoint_index_close(ix);
}

static void test_round_trip_and_consolidate(void **state)
{
    rp_checkpoint *ck = make_state();
    size_t n_whole;
    unsigned char *whole = whole_bytes(ck, "whole.safetensors", &n_whole);
    const int counts[] = {1, 2, 3, 7};
    for (int c = 0; c < 4; c++) {
        char base[600], name[32];
        char dir[512];
        snprintf(name, sizeof name, "rt%d", counts[c]);
        tmp_path(dir, sizeof dir, name);
        assert_int_equal(mkdir(dir, 0755), 0);
        snprintf(base, sizeof base, "%s/checkpoint", dir);
        save_sharded(ck, base, 1, counts[c]);
        assert_consolidates_to(base, whole, n_whole);

        rp_checkpoint_index *ix = NULL;
        assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
        assert_int_equal(rp_checkpoint_index_shards(ix), counts[c]);
        assert_int_equal(rp_checkpoint_index_generation(ix), 1);
        assert_int_equal(rp_checkpoint_index_count(ix), rp_checkpoint_count(ck));
        char want_layout[32];
        snprintf(want_layout, sizeof want_layout, "shards=%d", counts[c]);
        assert_string_equal(rp_checkpoint_index_layout(ix), want_layout);
        /* Any range of any tensor, read from the pieces, is the state's. */
        int64_t shape[RP_MAX_DIMS], numel;
        int ndim;
        rp_checkpoint_dtype dtype;
        assert_int_equal(
            rp_checkpoint_index_info(ix, "param/conv.weight", &dtype, &ndim, shape, &numel), RP_OK);
        assert_int_equal(dtype, RP_CHECKPOINT_F32);
        assert_int_equal(ndim, 3);
        assert_int_equal(shape[1], 7);
        assert_int_equal(numel, 105);
        const float *a = rp_checkpoint_get_f32(ck, "param/conv.weight", NULL, NULL);
        float got[105];
        for (int64_t lo = 0; lo < 105; lo += 13) {
            for (int64_t len = 0; lo + len <= 105; len += 17) {
                memset(got, 0xff, sizeof got);
                assert_int_equal(rp_checkpoint_index_read(ix, "param/conv.weight", lo, len, got),
                                 RP_OK);
                assert_memory_equal(got, a + lo, (size_t)len * sizeof(float));
            }
        }
        assert_int_equal(rp_checkpoint_index_read(ix, "param/conv.weight", 100, 6, got),
                         RP_ERR_INVALID);
        tu_assert_error_contains("[100, 106)");
        assert_int_equal(rp_checkpoint_index_read(ix, "param/nope", 0, 1, got), RP_ERR_INVALID);
        tu_assert_error_contains("param/nope");
        rp_checkpoint_index_close(ix);
    }
    free(whole);
    rp_checkpoint_destroy(ck);
}

/*
 * Workers of one layout (4 ZeRO-like ranges of every float tensor, the counters with worker 0)
 * each write their own shard; workers of another (3 ranges) read theirs.
 */
static void test_other_layout_reads_its_ranges(void **state)
{
    rp_checkpoint *ck = make_state();
    char dir[512], base[600];
    tmp_path(dir, sizeof dir, "layout");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(base, sizeof base, "%s/checkpoint", dir);
    for (int w = 0; w < 4; w++) {
        rp_checkpoint *mine;
        assert_int_equal(rp_checkpoint_create(&mine), RP_OK);
        if (w == 0) assert_int_equal(rp_checkpoint_set_meta(mine, "who", "worker 0"), RP_OK);
        for (int i = 0; i < rp_checkpoint_count(ck); i++) {
            const char *name = rp_checkpoint_name_at(ck, i);
            rp_checkpoint_dtype dtype;
            int ndim;
            int64_t shape[RP_MAX_DIMS];
            const char *data = rp_checkpoint_get(ck, name, &dtype, &ndim, shape);
            int64_t numel = 1;
            for (int d = 0; d < ndim; d++)
                numel *= shape[d];
            size_t es = dtype == RP_CHECKPOINT_BF16 ? 2 : dtype == RP_CHECKPOINT_F32 ? 4 : 8;
            int64_t off = 0, count = numel;
            if (es == 8 && w != 0) continue;
            if (es != 8) rp_checkpoint_split_range(numel, w, 4, &off, &count);
            assert_int_equal(rp_checkpoint_add_piece(mine, name, dtype, ndim, shape, off, count,
                                                     data + off * (int64_t)es),
                             RP_OK);
        }
        assert_int_equal(rp_checkpoint_save_shard(mine, base, 5, w, 4, 1), RP_OK);
        rp_checkpoint_destroy(mine);
    }
    assert_int_equal(rp_checkpoint_publish(base, 5, 4, "replicas=4 zero=1"), RP_OK);

    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    assert_string_equal(rp_checkpoint_index_layout(ix), "replicas=4 zero=1");
    const float *c = rp_checkpoint_get_f32(ck, "optim/slot0/fc", NULL, NULL);
    for (int r = 0; r < 3; r++) {
        int64_t off, count;
        rp_checkpoint_split_range(1000, r, 3, &off, &count);
        float got[400];
        assert_int_equal(rp_checkpoint_index_read(ix, "optim/slot0/fc", off, count, got), RP_OK);
        assert_memory_equal(got, c + off, (size_t)count * sizeof(float));
    }
    rp_checkpoint *back = NULL;
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_OK);
    assert_string_equal(rp_checkpoint_get_meta(back, "who"), "worker 0");
    int64_t n;
    const uint64_t *sums = rp_checkpoint_get_u64(back, "train/epoch_sums", &n);
    assert_int_equal(n, 2);
    assert_true(sums[1] == 1ull << 63);
    rp_checkpoint_destroy(back);

    /*
     * Damage one float of worker 3's piece of optim/slot0/fc (elements 750..999): the file keeps
     * its size and CRC digits, so the index opens; reads that do not touch that piece succeed,
     * one that does names the shard file and the tensor.
     */
    char shard3[700];
    snprintf(shard3, sizeof shard3, "%s.shards/g5/shard-3-of-4.safetensors", base);
    tu_damage_float(shard3, c[999]);
    rp_checkpoint_index_close(ix);
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    float got[750];
    assert_int_equal(rp_checkpoint_index_read(ix, "optim/slot0/fc", 0, 750, got), RP_OK);
    assert_memory_equal(got, c, 750 * sizeof(float));
    assert_int_equal(rp_checkpoint_index_read(ix, "optim/slot0/fc", 700, 60, got), RP_ERR_FORMAT);
    tu_assert_error_contains("shard-3-of-4.safetensors is damaged");
    tu_assert_error_contains("optim/slot0/fc");
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_ERR_FORMAT);
    assert_null(back);
    rp_checkpoint_index_close(ix);
    rp_checkpoint_destroy(ck);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_reshard(void **state)
{
    rp_checkpoint *ck = make_state();
    size_t n_whole;
    unsigned char *whole = whole_bytes(ck, "whole2.safetensors", &n_whole);
    char dir[512], base[600], old_gen[700], new_gen[700];
    tmp_path(dir, sizeof dir, "reshard");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(base, sizeof base, "%s/checkpoint", dir);
    save_sharded(ck, base, 1, 4);
    snprintf(old_gen, sizeof old_gen, "%s.shards/g1", base);
    snprintf(new_gen, sizeof new_gen, "%s.shards/g2/shard-2-of-3.safetensors", base);
    assert_true(exists(old_gen));
    assert_int_equal(rp_checkpoint_reshard(base, 3), RP_OK);
    assert_false(exists(old_gen));
    assert_true(exists(new_gen));
    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    assert_int_equal(rp_checkpoint_index_shards(ix), 3);
    assert_int_equal(rp_checkpoint_index_generation(ix), 2);
    assert_string_equal(rp_checkpoint_index_layout(ix), "shards=3");
    rp_checkpoint_index_close(ix);
    assert_int_equal(rp_checkpoint_published_generation(base), 2);
    assert_consolidates_to(base, whole, n_whole);
    /* To one shard and back to many: still the same state. */
    assert_int_equal(rp_checkpoint_reshard(base, 1), RP_OK);
    assert_consolidates_to(base, whole, n_whole);
    assert_int_equal(rp_checkpoint_reshard(base, 5), RP_OK);
    assert_consolidates_to(base, whole, n_whole);
    assert_int_equal(rp_checkpoint_reshard(base, 0), RP_ERR_INVALID);
    free(whole);
    rp_checkpoint_destroy(ck);
}

static void write_bytes(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void expect_open_error(const char *base, rp_status want, const char *needle,
                              const char *needle2)
{
    rp_checkpoint_index *ix = (rp_checkpoint_index *)1;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), want);
    assert_null(ix);
    tu_assert_error_contains(needle);
    if (needle2) tu_assert_error_contains(needle2);
}

static void test_damage_is_named(void **state)
{
    rp_checkpoint *ck = make_state();
    char dir[512], base[600], index[700], shard[700];
    tmp_path(dir, sizeof dir, "damage");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(base, sizeof base, "%s/checkpoint", dir);
    snprintf(index, sizeof index, "%s.index.json", base);
    snprintf(shard, sizeof shard, "%s.shards/g1/shard-1-of-2.safetensors", base);
    expect_open_error(base, RP_ERR_IO, "checkpoint.index.json", NULL); /* none yet */
    save_sharded(ck, base, 1, 2);
    size_t n_index, n_shard;
    unsigned char *good_index = tu_read_file(index, &n_index);
    unsigned char *good_shard = tu_read_file(shard, &n_shard);

    /* Every single changed byte of the index is caught (its CRC), naming it. */
    for (size_t i = 0; i < n_index; i += 37) {
        unsigned char *bad = malloc(n_index);
        memcpy(bad, good_index, n_index);
        bad[i] ^= 0x01;
        write_bytes(index, bad, n_index);
        free(bad);
        expect_open_error(base, RP_ERR_FORMAT, "checkpoint.index.json", "damaged");
    }
    /* Truncated. */
    write_bytes(index, good_index, n_index / 2);
    expect_open_error(base, RP_ERR_FORMAT, "checkpoint.index.json", "damaged");
    write_bytes(index, good_index, n_index);

    /* A shard truncated, missing, or replaced by another save's. */
    write_bytes(shard, good_shard, n_shard - 8);
    expect_open_error(base, RP_ERR_FORMAT, "shard-1-of-2.safetensors", "the index says");
    unlink(shard);
    expect_open_error(base, RP_ERR_IO, "shard-1-of-2.safetensors", NULL);
    rp_checkpoint *other = make_state();
    assert_int_equal(rp_checkpoint_set_meta(other, "replicator.version", "other"), RP_OK);
    assert_int_equal(rp_checkpoint_save_shard(other, base, 1, 1, 2, 2), RP_OK);
    rp_checkpoint_destroy(other);
    rp_checkpoint_index *ix = NULL;
    /* (shard 1 of a split holds no metadata: the same bytes, so it is accepted as the same) */
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    rp_checkpoint_index_close(ix);
    float z[2] = {0, 0};
    assert_int_equal(rp_checkpoint_create(&other), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(other, "param/bias", 1, (int64_t[]){2}, z), RP_OK);
    assert_int_equal(rp_checkpoint_save_shard(other, base, 1, 1, 2, 2), RP_OK);
    rp_checkpoint_destroy(other);
    expect_open_error(base, RP_ERR_FORMAT, "shard-1-of-2.safetensors", "not the shard the index");
    write_bytes(shard, good_shard, n_shard);
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    rp_checkpoint_index_close(ix);

    /* Publishing pieces that overlap (two writers with the counters whole) or leave a gap. */
    char base2[600];
    snprintf(base2, sizeof base2, "%s/overlap", dir);
    for (int k = 0; k < 2; k++)
        assert_int_equal(rp_checkpoint_save_shard(ck, base2, 1, k, 2, 1), RP_OK);
    assert_int_equal(rp_checkpoint_publish(base2, 1, 2, NULL), RP_ERR_FORMAT);
    tu_assert_error_contains("are in two shards");
    snprintf(base2, sizeof base2, "%s/gap", dir);
    rp_checkpoint *part;
    assert_int_equal(rp_checkpoint_create(&part), RP_OK);
    static float c[1000];
    assert_int_equal(rp_checkpoint_add_piece(part, "optim/slot0/fc", RP_CHECKPOINT_F32, 2,
                                             (int64_t[]){10, 100}, 0, 600, c),
                     RP_OK);
    assert_int_equal(
        rp_checkpoint_add_piece(part, "x", RP_CHECKPOINT_F32, 1, (int64_t[]){4}, 4, 1, c),
        RP_ERR_INVALID);
    tu_assert_error_contains("[4, 5)");
    assert_int_equal(rp_checkpoint_save_shard(part, base2, 1, 0, 1, 1), RP_OK);
    rp_checkpoint_destroy(part);
    assert_int_equal(rp_checkpoint_publish(base2, 1, 1, NULL), RP_ERR_FORMAT);
    tu_assert_error_contains("optim/slot0/fc");
    tu_assert_error_contains("600..1000 are in no shard");
    assert_int_equal(rp_checkpoint_publish(base2, 1, 2, NULL), RP_ERR_IO);
    tu_assert_error_contains("shard-0-of-2.safetensors");

    free(good_index);
    free(good_shard);
    rp_checkpoint_destroy(ck);
}

/*
 * A save killed after writing some of generation 2's shards, or all of them, but before the
 * index: generation 1 is still the one published, whole; the next publish removes the debris.
 */
static void test_unpublished_generation_is_ignored(void **state)
{
    rp_checkpoint *ck = make_state();
    size_t n_whole;
    unsigned char *whole = whole_bytes(ck, "whole3.safetensors", &n_whole);
    char dir[512], base[600], g2[700];
    tmp_path(dir, sizeof dir, "unpublished");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(base, sizeof base, "%s/checkpoint", dir);
    save_sharded(ck, base, 1, 2);
    rp_checkpoint *next = make_state();
    assert_int_equal(rp_checkpoint_set_meta(next, "replicator.version", "next"), RP_OK);
    assert_int_equal(rp_checkpoint_save_shard(next, base, 2, 0, 3, 3), RP_OK);
    assert_consolidates_to(base, whole, n_whole);
    assert_int_equal(rp_checkpoint_save_shard(next, base, 2, 1, 3, 3), RP_OK);
    assert_int_equal(rp_checkpoint_save_shard(next, base, 2, 2, 3, 3), RP_OK);
    assert_consolidates_to(base, whole, n_whole);
    assert_int_equal(rp_checkpoint_published_generation(base), 1);
    /* A leftover temporary file of a killed writer, and then generation 3 published. */
    snprintf(g2, sizeof g2, "%s.shards/g2/shard-0-of-3.safetensors.tmp.999999.0", base);
    write_bytes(g2, (const unsigned char *)"partial", 7);
    save_sharded(next, base, 3, 2);
    snprintf(g2, sizeof g2, "%s.shards/g2", base);
    assert_false(exists(g2));
    snprintf(g2, sizeof g2, "%s.shards/g1", base);
    assert_false(exists(g2));
    rp_checkpoint_index *ix = NULL;
    assert_int_equal(rp_checkpoint_index_open(&ix, base), RP_OK);
    rp_checkpoint *back = NULL;
    assert_int_equal(rp_checkpoint_index_load(ix, &back), RP_OK);
    assert_string_equal(rp_checkpoint_get_meta(back, "replicator.version"), "next");
    rp_checkpoint_destroy(back);
    rp_checkpoint_index_close(ix);
    rp_checkpoint_destroy(next);
    free(whole);
    rp_checkpoint_destroy(ck);
}

/* The index names the loader position and small counters by value. */
static void test_index_names_position(void **state)
{
    rp_checkpoint *ck = make_state();
    char dir[512], base[600], index[700];
    tmp_path(dir, sizeof dir, "position");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(base, sizeof base, "%s/checkpoint", dir);
    snprintf(index, sizeof index, "%s.index.json", base);
    save_sharded(ck, base, 1, 3);
    size_t n;
    char *text = (char *)tu_read_file(index, &n);
    assert_non_null(strstr(text, "\"position\":[\"1\",\"2\",\"12\"]"));
    assert_non_null(strstr(text, "\"values\":[\"7\",\"9223372036854775808\"]"));
    assert_non_null(strstr(text, "\"layout\":\"shards=3\""));
    free(text);
    rp_checkpoint_destroy(ck);
}

/* A staging checkpoint refilled the same way allocates nothing for its tensors. */
static void test_reset_reuses_memory(void **state)
{
    rp_checkpoint *ck;
    assert_int_equal(rp_checkpoint_create(&ck), RP_OK);
    static float a[4096], b[100];
    for (int round = 0; round < 3; round++) {
        tu_fill(a, 4096, (uint64_t)round + 10, -1, 1);
        tu_fill(b, 100, (uint64_t)round + 20, -1, 1);
        rp_checkpoint_reset(ck);
        uint64_t before = rp_alloc_count();
        assert_int_equal(rp_checkpoint_add_f32(ck, "a", 1, (int64_t[]){4096}, a), RP_OK);
        assert_int_equal(rp_checkpoint_add_f32(ck, "b", 2, (int64_t[]){10, 10}, b), RP_OK);
        uint64_t allocs = rp_alloc_count() - before;
        if (round > 0) assert_int_equal(allocs, 0);
        assert_int_equal(rp_checkpoint_count(ck), 2);
        assert_memory_equal(rp_checkpoint_get_f32(ck, "a", NULL, NULL), a, sizeof a);
        assert_memory_equal(rp_checkpoint_get_f32(ck, "b", NULL, NULL), b, sizeof b);
    }
    /* Another size at a position: new memory there, and the right values. */
    rp_checkpoint_reset(ck);
    assert_null(rp_checkpoint_get_f32(ck, "a", NULL, NULL));
    assert_int_equal(rp_checkpoint_add_f32(ck, "b", 1, (int64_t[]){100}, b), RP_OK);
    assert_int_equal(rp_checkpoint_add_f32(ck, "a", 1, (int64_t[]){4096}, a), RP_OK);
    assert_memory_equal(rp_checkpoint_get_f32(ck, "a", NULL, NULL), a, sizeof a);
    assert_memory_equal(rp_checkpoint_get_f32(ck, "b", NULL, NULL), b, sizeof b);
    assert_int_equal(rp_checkpoint_count(ck), 2);
    rp_checkpoint_destroy(ck);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_consolidate),
        cmocka_unit_test(test_other_layout_reads_its_ranges),
        cmocka_unit_test(test_reshard),
        cmocka_unit_test(test_damage_is_named),
        cmocka_unit_test(test_unpublished_generation_is_ignored),
        cmocka_unit_test(test_index_names_position),
        cmocka_unit_test(test_reset_reuses_memory),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
