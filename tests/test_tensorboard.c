/*
 * test_tensorboard.c - TensorBoard event files (replicator/tensorboard.h) and
 * the trainer's use of them:
 *
 *  - CRC-32C against published vectors (RFC 3720's, and "123456789"), and
 *    TensorFlow's mask;
 *  - a writer's file read back record by record (both CRCs of each checked
 *    by the framing reader) and unpacked with protobuf-c: the version record
 *    first, then every scalar's tag, step and value (0, negatives, NaN and
 *    infinities included); one record compared byte for byte with the
 *    encoding TensorFlow's field numbers and types give, built by hand here;
 *  - a flipped bit in a length or in a record's data, and a cut file, are
 *    reported naming the record;
 *  - bad arguments, a failed write (a file-size limit) that makes the writer
 *    refuse everything after it, two writers in one directory;
 *  - a trainer with tensorboard_dir writes every number of every
 *    metrics.jsonl line under its tag at its step, and a write that fails
 *    mid-run warns once while the run goes on.
 */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/tfrecord_internal.h"
#include "tensorboard_event.pb-c.h"

/* ---- reading an events file back ------------------------------------------------------------ */

#define MAX_SCALARS 256

typedef struct scalar {
    char tag[RP_TENSORBOARD_TAG_MAX + 1];
    int64_t step;
    float value;
    double wall_time;
} scalar;

typedef struct events {
    char version[32]; /* the first record's file_version */
    double version_time;
    scalar s[MAX_SCALARS];
    int n;
} events;

/*
 * Reads every record of `path` (the reader checks both CRCs of each), unpacks each with protobuf-c
 * and keeps the scalars. The first record must be the version, every other one a summary of one
 * simple value.
 */
static void read_events(const char *path, events *ev)
{
    memset(ev, 0, sizeof *ev);
    io_tfrecord_reader *r = NULL;
    assert_int_equal(io_tfrecord_open(&r, path), RP_OK);
    for (int64_t k = 0;; k++) {
        const uint8_t *data;
        size_t len;
        if (io_tfrecord_next(r, &data, &len) != RP_OK) fail_msg("%s", rp_last_error());
        if (!data) break;
        IoTb__Event *e = io_tb__event__unpack(NULL, len, data);
        assert_non_null(e);
        if (k == 0) {
            assert_int_equal(e->what_case, IO_TB__EVENT__WHAT_FILE_VERSION);
            snprintf(ev->version, sizeof ev->version, "%s", e->file_version);
            ev->version_time = e->wall_time;
        } else {
            assert_int_equal(e->what_case, IO_TB__EVENT__WHAT_SUMMARY);
            assert_int_equal(e->summary->n_value, 1);
            const IoTb__Summary__Value *v = e->summary->value[0];
            assert_int_equal(v->value_case, IO_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
            assert_true(ev->n < MAX_SCALARS);
            scalar *s = &ev->s[ev->n++];
            snprintf(s->tag, sizeof s->tag, "%s", v->tag);
            s->step = e->step;
            s->value = v->simple_value;
            s->wall_time = e->wall_time;
        }
        io_tb__event__free_unpacked(e, NULL);
    }
    io_tfrecord_close(r);
}

#define PATH_LEN 1024

/* The events files in dir (paths into out[max]); returns how many. */
static int events_files(const char *dir, char out[][PATH_LEN], int max)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        assert_true(n < max);
        snprintf(out[n++], PATH_LEN, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

/* The scalar with this tag and step (fails if there is none, or more than one). */
static const scalar *find(const events *ev, const char *tag, int64_t step)
{
    const scalar *found = NULL;
    for (int i = 0; i < ev->n; i++) {
        if (strcmp(ev->s[i].tag, tag) || ev->s[i].step != step) continue;
        if (found) fail_msg("%s at step %lld is written twice", tag, (long long)step);
        found = &ev->s[i];
    }
    if (!found) fail_msg("no %s at step %lld", tag, (long long)step);
    return found;
}

static void spit(const char *path, const unsigned char *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* ---- CRC-32C ------------------------------------------------------------------------------- */

static void test_crc32c_vectors(void **unused)
{
    (void)unused;
    assert_int_equal(io_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(io_crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI), appendix B.4: 32 bytes of zeros, of ones, ascending, descending. */
    uint8_t b[32];
    memset(b, 0, sizeof b);
    assert_int_equal(io_crc32c(0, b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    assert_int_equal(io_crc32c(0, b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    assert_int_equal(io_crc32c(0, b, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    assert_int_equal(io_crc32c(0, b, 32), 0x113fdb5cu);
    /* Continuing a CRC over a second piece is the CRC of the whole. */
    assert_int_equal(io_crc32c(io_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
    /* The mask: rotate right by 15, add 0xa282ead8; unmask undoes it. */
    assert_int_equal(io_crc32c_mask(0), 0xa282ead8u);
    assert_int_equal(io_crc32c_mask(0x8000u), 0xa282ead9u);
    assert_int_equal(io_crc32c_mask(1), (uint32_t)(0x00020000u + 0xa282ead8u));
    uint32_t c = 1;
    for (int i = 0; i < 1000; i++, c = c * 2654435761u + 1)
        assert_int_equal(io_crc32c_unmask(io_crc32c_mask(c)), c);
}

/* ---- the writer ------------------------------------------------------------------------------ */

/* A fresh directory under the test's scratch directory. */
static const char *fresh_dir(char *buf, size_t size, const char *name)
{
    tu_tmp_path(buf, size, name);
    assert_int_equal(mkdir(buf, 0755), 0);
    return buf;
}

static void test_write_read_back(void **unused)
{
    (void)unused;
    char dir[512];
    tu_tmp_path(dir, sizeof dir, "a/b/c"); /* created with its parents */
    double t0 = (double)time(NULL);
    rp_tensorboard *tb = NULL;
    assert_int_equal(rp_tensorboard_create(&tb, dir), RP_OK);
    const char *path = rp_tensorboard_path(tb);
    /* events.out.tfevents.<seconds>.<host>.<pid>.<n> */
    char host[256], prefix[600];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    assert_memory_equal(path, prefix, strlen(prefix));
    long long secs = 0;
    unsigned n = 0;
    char rest[300];
    assert_int_equal(sscanf(path + strlen(prefix), "%lld.%299s", &secs, rest), 2);
    assert_true(secs >= (long long)t0 - 1 && secs <= (long long)t0 + 60);
    char tail[400];
    snprintf(tail, sizeof tail, "%s.%lld.", host, (long long)getpid());
    assert_memory_equal(rest, tail, strlen(tail));
    assert_int_equal(sscanf(rest + strlen(tail), "%u", &n), 1);

    static const struct {
        const char *tag;
        int64_t step;
        double value;
    } want[] = {
        {"train/loss", 1, 2.5},   {"train/loss", 2, 0.0},    {"eval/accuracy", 2, 0.875},
        {"train/loss", 3, -1.25}, {"perf/big", 4, 3.0e38},   {"x", (int64_t)1 << 40, 1e-30},
        {"train/lr", 0, 0.1},     {"ünïcode/täg", 5, 7},     {"nan", 6, NAN},
        {"inf", 7, INFINITY},     {"neg_inf", 8, -INFINITY}, {"neg_step", -3, 1},
    };
    int count = (int)(sizeof want / sizeof want[0]);
    for (int i = 0; i < count; i++) {
        rp_status st = rp_tensorboard_add_scalar(tb, want[i].tag, want[i].step, want[i].value);
        assert_int_equal(st, RP_OK);
    }
    assert_int_equal(rp_tensorboard_flush(tb), RP_OK);
    char kept[600];
    snprintf(kept, sizeof kept, "%s", path);
    assert_int_equal(rp_tensorboard_destroy(tb), RP_OK);

    events ev;
    read_events(kept, &ev);
    assert_string_equal(ev.version, "brain.Event:2");
    assert_true(ev.version_time >= t0 - 1 && ev.version_time <= t0 + 60);
    assert_int_equal(ev.n, count);
    for (int i = 0; i < count; i++) {
        assert_string_equal(ev.s[i].tag, want[i].tag);
        assert_int_equal(ev.s[i].step, want[i].step);
        float w = (float)want[i].value;
        if (isnan(w))
            assert_true(isnan(ev.s[i].value));
        else
            assert_memory_equal(&ev.s[i].value, &w, sizeof w); /* the float, bit for bit */
        assert_true(ev.s[i].wall_time >= ev.version_time && ev.s[i].wall_time <= t0 + 60);
    }
}

/* Appends the protobuf varint of v to p; returns the new end. */
static uint8_t *varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/*
 * The bytes of one scalar record, built by hand from TensorFlow's field numbers and wire types
 * (event.proto: wall_time 1 double, step 2 int64, summary 5 message; summary.proto: value 1
 * repeated message; Value: tag 1 string, simple_value 2 float), so that a wrong number or type in
 * proto/tensorboard_event.proto fails here even though the writer and the reader would agree.
 */
static void test_wire_format(void **unused)
{
    (void)unused;
    char dir[512];
    fresh_dir(dir, sizeof dir, "wire");
    rp_tensorboard *tb = NULL;
    assert_int_equal(rp_tensorboard_create(&tb, dir), RP_OK);
    assert_int_equal(rp_tensorboard_add_scalar(tb, "train/loss", 300, 0.5), RP_OK);
    char path[600];
    snprintf(path, sizeof path, "%s", rp_tensorboard_path(tb));
    assert_int_equal(rp_tensorboard_destroy(tb), RP_OK);

    size_t len;
    unsigned char *file = tu_read_file(path, &len);
    /* Record 0: the version. Its length, then its Event: wall_time (field 1, fixed64) and
     * file_version (field 3, length-delimited). */
    uint64_t n0 = 0;
    for (int i = 7; i >= 0; i--)
        n0 = n0 << 8 | file[i];
    assert_int_equal(n0, 9 + 2 + strlen("brain.Event:2"));
    const unsigned char *e0 = file + 12;
    assert_int_equal(e0[0], 0x09);
    assert_int_equal(e0[9], 0x1a);
    assert_int_equal(e0[10], strlen("brain.Event:2"));
    assert_memory_equal(e0 + 11, "brain.Event:2", strlen("brain.Event:2"));
    /* Record 1: the scalar, compared whole (its wall time copied from the file). */
    const unsigned char *r1 = file + 16 + n0;
    uint8_t want[64], *p = want;
    uint8_t value[64], *q = value;
    *q++ = 0x0a; /* Value.tag: field 1, length-delimited */
    *q++ = (uint8_t)strlen("train/loss");
    memcpy(q, "train/loss", strlen("train/loss"));
    q += strlen("train/loss");
    *q++ = 0x15; /* Value.simple_value: field 2, fixed32 */
    float half = 0.5f;
    memcpy(q, &half, 4); /* (the host is little-endian, as the format) */
    q += 4;
    size_t value_len = (size_t)(q - value);
    *p++ = 0x09; /* Event.wall_time: field 1, fixed64 */
    memcpy(p, r1 + 12 + 1, 8);
    p += 8;
    *p++ = 0x10; /* Event.step: field 2, varint */
    p = varint(p, 300);
    *p++ = 0x2a; /* Event.summary: field 5, length-delimited */
    *p++ = (uint8_t)(value_len + 2);
    *p++ = 0x0a; /* Summary.value: field 1, length-delimited */
    *p++ = (uint8_t)value_len;
    memcpy(p, value, value_len);
    p += value_len;
    size_t want_len = (size_t)(p - want);
    assert_int_equal(len, 16 + n0 + 16 + want_len); /* nothing else in the file */
    uint64_t n1 = 0;
    for (int i = 7; i >= 0; i--)
        n1 = n1 << 8 | r1[i];
    assert_int_equal(n1, want_len);
    assert_memory_equal(r1 + 12, want, want_len);
    /* The framing's CRCs, little-endian and masked. */
    uint32_t c_len = 0, c_data = 0;
    for (int i = 3; i >= 0; i--)
        c_len = c_len << 8 | r1[8 + i];
    for (int i = 3; i >= 0; i--)
        c_data = c_data << 8 | r1[12 + want_len + i];
    assert_int_equal(c_len, io_crc32c_mask(io_crc32c(0, r1, 8)));
    assert_int_equal(c_data, io_crc32c_mask(io_crc32c(0, want, want_len)));
    free(file);
}

/* Writes three scalars into a fresh directory; returns the file's path in path[600]. */
static void three_records(const char *name, char *path)
{
    char dir[512];
    fresh_dir(dir, sizeof dir, name);
    rp_tensorboard *tb = NULL;
    assert_int_equal(rp_tensorboard_create(&tb, dir), RP_OK);
    /* Steps from 1: a step of 0 is not written (proto3's default), so every record has one size. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(rp_tensorboard_add_scalar(tb, "loss", i + 1, i), RP_OK);
    snprintf(path, 600, "%s", rp_tensorboard_path(tb));
    assert_int_equal(rp_tensorboard_destroy(tb), RP_OK);
}

/* Reads records until an error, which must be RP_ERR_FORMAT naming each `needle`. */
static void expect_corrupt(const char *path, const char *needle1, const char *needle2)
{
    io_tfrecord_reader *r = NULL;
    assert_int_equal(io_tfrecord_open(&r, path), RP_OK);
    const uint8_t *data;
    size_t len;
    rp_status st;
    while ((st = io_tfrecord_next(r, &data, &len)) == RP_OK && data)
        continue;
    io_tfrecord_close(r);
    assert_int_equal(st, RP_ERR_FORMAT);
    tu_assert_error_contains(path);
    tu_assert_error_contains(needle1);
    tu_assert_error_contains(needle2);
}

static void test_corruption_detected(void **unused)
{
    (void)unused;
    char path[600];
    three_records("corrupt", path);
    size_t len;
    unsigned char *good = tu_read_file(path, &len);
    /* Records: the version (16 + v bytes), then three scalars of equal size. */
    uint64_t v = good[0], rec = (len - 16 - v) / 3;
    assert_int_equal(16 + v + 3 * rec, len);
    size_t second = 16 + v + rec; /* record 2's first byte */
    unsigned char *bad = malloc(len);
    assert_non_null(bad);

    /* A bit flipped in record 2's data. */
    memcpy(bad, good, len);
    bad[second + 12 + 3] ^= 0x10;
    spit(path, bad, len);
    expect_corrupt(path, "record 2 at byte", "CRC of its");
    /* In its length field. */
    memcpy(bad, good, len);
    bad[second + 1] ^= 0x01;
    spit(path, bad, len);
    expect_corrupt(path, "record 2 at byte", "CRC of its length");
    /* In its stored data CRC. */
    memcpy(bad, good, len);
    bad[second + rec - 1] ^= 0x80;
    spit(path, bad, len);
    expect_corrupt(path, "record 2", "does not match");
    /* The file cut inside the last record's data, and inside its header. */
    spit(path, good, len - 5);
    expect_corrupt(path, "record 3", "truncated");
    spit(path, good, len - rec + 5);
    expect_corrupt(path, "record 3", "truncated");
    /* Whole again: reads to the end. */
    spit(path, good, len);
    events ev;
    read_events(path, &ev);
    assert_int_equal(ev.n, 3);
    free(bad);
    free(good);
}

static void test_errors(void **unused)
{
    (void)unused;
    rp_tensorboard *tb = (rp_tensorboard *)&tb;
    assert_int_equal(rp_tensorboard_create(&tb, NULL), RP_ERR_INVALID);
    assert_null(tb);
    assert_int_equal(rp_tensorboard_create(&tb, ""), RP_ERR_INVALID);
    assert_int_equal(rp_tensorboard_create(NULL, "x"), RP_ERR_INVALID);
    /* A directory that is a file, and one under a file. */
    char file[512], under[600];
    tu_tmp_path(file, sizeof file, "plain_file");
    spit(file, (const unsigned char *)"x", 1);
    assert_int_equal(rp_tensorboard_create(&tb, file), RP_ERR_IO);
    tu_assert_error_contains(file);
    assert_null(tb);
    snprintf(under, sizeof under, "%s/sub", file);
    assert_int_equal(rp_tensorboard_create(&tb, under), RP_ERR_IO);
    tu_assert_error_contains(under);

    char dir[512];
    fresh_dir(dir, sizeof dir, "errors");
    assert_int_equal(rp_tensorboard_create(&tb, dir), RP_OK);
    assert_int_equal(rp_tensorboard_add_scalar(NULL, "a", 0, 1), RP_ERR_INVALID);
    assert_int_equal(rp_tensorboard_add_scalar(tb, NULL, 0, 1), RP_ERR_INVALID);
    assert_int_equal(rp_tensorboard_add_scalar(tb, "", 0, 1), RP_ERR_INVALID);
    tu_assert_error_contains("1 to 255 bytes of valid UTF-8");
    assert_int_equal(rp_tensorboard_add_scalar(tb, "bad\xff", 0, 1), RP_ERR_INVALID);
    char longest[RP_TENSORBOARD_TAG_MAX + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    assert_int_equal(rp_tensorboard_add_scalar(tb, longest, 0, 1), RP_ERR_INVALID);
    longest[RP_TENSORBOARD_TAG_MAX] = '\0';
    assert_int_equal(rp_tensorboard_add_scalar(tb, longest, 0, 1), RP_OK);
    assert_int_equal(rp_tensorboard_flush(NULL), RP_ERR_INVALID);
    assert_null(rp_tensorboard_path(NULL));
    char path[600];
    snprintf(path, sizeof path, "%s", rp_tensorboard_path(tb));
    assert_int_equal(rp_tensorboard_destroy(tb), RP_OK);
    assert_int_equal(rp_tensorboard_destroy(NULL), RP_OK);
    /* The refused tags left nothing in the file. */
    events ev;
    read_events(path, &ev);
    assert_int_equal(ev.n, 1);
    assert_int_equal(strlen(ev.s[0].tag), RP_TENSORBOARD_TAG_MAX);
    /* A reader on a missing file or a directory. */
    io_tfrecord_reader *r = NULL;
    assert_int_equal(io_tfrecord_open(&r, dir), RP_ERR_IO);
    tu_assert_error_contains("not a regular file");
    strcat(path, ".missing");
    assert_int_equal(io_tfrecord_open(&r, path), RP_ERR_IO);
    tu_assert_error_contains(path);
}

static void test_two_writers_one_directory(void **unused)
{
    (void)unused;
    char dir[512];
    fresh_dir(dir, sizeof dir, "two");
    rp_tensorboard *a = NULL, *b = NULL;
    assert_int_equal(rp_tensorboard_create(&a, dir), RP_OK);
    assert_int_equal(rp_tensorboard_create(&b, dir), RP_OK);
    assert_string_not_equal(rp_tensorboard_path(a), rp_tensorboard_path(b));
    assert_int_equal(rp_tensorboard_add_scalar(a, "loss", 1, 1), RP_OK);
    assert_int_equal(rp_tensorboard_add_scalar(b, "loss", 2, 2), RP_OK);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s", rp_tensorboard_path(a));
    snprintf(pb, sizeof pb, "%s", rp_tensorboard_path(b));
    assert_int_equal(rp_tensorboard_destroy(a), RP_OK);
    assert_int_equal(rp_tensorboard_destroy(b), RP_OK);
    char files[4][PATH_LEN];
    assert_int_equal(events_files(dir, files, 4), 2);
    events ea, eb;
    read_events(pa, &ea);
    read_events(pb, &eb);
    assert_int_equal(ea.n, 1);
    assert_int_equal(eb.n, 1);
    assert_int_equal(ea.s[0].step, 1);
    assert_int_equal(eb.s[0].step, 2);
}

/* Limits the size any file of this process may grow to (0: back to `old`). */
static void limit_files(struct rlimit *old, rlim_t bytes)
{
    if (bytes == 0) {
        assert_int_equal(setrlimit(RLIMIT_FSIZE, old), 0);
        return;
    }
    assert_int_equal(getrlimit(RLIMIT_FSIZE, old), 0);
    struct rlimit lim = {bytes, old->rlim_max};
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
}

static void test_failed_write_is_final(void **unused)
{
    (void)unused;
    char dir[512];
    fresh_dir(dir, sizeof dir, "full");
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    rp_tensorboard *tb = NULL;
    assert_int_equal(rp_tensorboard_create(&tb, dir), RP_OK);
    struct rlimit old;
    limit_files(&old, 100);
    rp_status st = RP_OK;
    for (int i = 0; i < 10 && st == RP_OK; i++) {
        st = rp_tensorboard_add_scalar(tb, "train/loss", i, i);
        if (st == RP_OK) st = rp_tensorboard_flush(tb);
    }
    limit_files(&old, 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(st, RP_ERR_IO);
    tu_assert_error_contains(rp_tensorboard_path(tb));
    /* With room again, the writer still refuses: its file may end in part of a record. */
    assert_int_equal(rp_tensorboard_add_scalar(tb, "train/loss", 99, 1), RP_ERR_IO);
    tu_assert_error_contains("an earlier write failed");
    assert_int_equal(rp_tensorboard_flush(tb), RP_ERR_IO);
    assert_int_equal(rp_tensorboard_destroy(tb), RP_OK);
}

/* ---- the trainer ----------------------------------------------------------------------------- */

#define STEPS 6 /* per epoch */

typedef struct job {
    int64_t trained;
    int64_t limit_at; /* from this global step on, files may not grow (-1: never) */
    struct rlimit old;
} job;

static const char *const scalar_names[] = {"loss", "zero", "none", NULL};

static rp_status build(rp_replica *rep, void *ctx, const rp_checkpoint *ck, const rp_trainer_at *at,
                       void **state)
{
    *state = ctx; /* nothing of its own */
    return RP_OK;
}

static int64_t steps_per_epoch(void *ctx, void *state)
{
    return STEPS;
}

/*
 * A falling loss, a scalar that is always 0 (a proto3 default that must still be written) and one
 * that is always NaN (null in metrics.jsonl, left out of the events).
 */
static rp_status train_step(rp_replica *rep, void *ctx, void *state, const rp_trainer_at *at,
                            double *scalars)
{
    job *j = ctx;
    scalars[0] = 1.0 / (1.0 + (double)at->global_step);
    scalars[1] = 0;
    scalars[2] = NAN;
    j->trained = at->global_step + 1;
    if (at->global_step == j->limit_at) limit_files(&j->old, 64);
    return RP_OK;
}

static rp_status evaluate(rp_replica *rep, void *ctx, void *state)
{
    return RP_OK;
}

static rp_status evaluated(void *ctx, const rp_replicator *r, rp_trainer_metrics *m)
{
    job *j = ctx;
    RP_CHECK(rp_trainer_metrics_add(m, "test_accuracy", 0.5 + 0.01 * (double)j->trained, NULL));
    return rp_trainer_metrics_add(m, "test_zero", 0, NULL);
}

static const rp_trainer_model model = {
    .build = build,
    .steps_per_epoch = steps_per_epoch,
    .train_step = train_step,
    .scalars = scalar_names,
    .evaluate = evaluate,
    .evaluated = evaluated,
};

static rp_trainer_config trainer_config(const char *run_dir, const char *tb_dir)
{
    rp_trainer_config c = rp_trainer_config_default();
    c.runtime.backend = RP_BACKEND_THREADS;
    c.runtime.replicas = 1;
    c.runtime.threads_per_replica = 1;
    c.run_dir = run_dir;
    c.run_dir_exact = true;
    c.no_checkpoint = true;
    c.epochs = 2;
    c.lr = 0.1f;
    c.schedule = RP_SCHED_COSINE;
    c.warmup_epochs = 1;
    c.metrics_every_steps = 2;
    c.eval_every_steps = 4;
    c.batch = 8;
    c.rate_key = "images_per_s";
    c.quiet = true;
    c.tensorboard_dir = tb_dir;
    c.tensorboard_writer = rp_tensorboard_scalar_writer();
    return c;
}

/* The tag a number of a metrics.jsonl line goes under (NULL: none: the line's position). */
static const char *tag_of(const char *key, bool epoch_line, char *buf, size_t size)
{
    if (!strcmp(key, "step") || !strcmp(key, "epoch")) return NULL;
    if (!strcmp(key, "lr"))
        snprintf(buf, size, "train/lr");
    else if (!strcmp(key, "images_per_s"))
        snprintf(buf, size, "perf/images_per_s");
    else if (!strncmp(key, "train_", 6))
        snprintf(buf, size, "epoch/%s", key);
    else if (!strncmp(key, "test_", 5))
        snprintf(buf, size, "eval/%s", key);
    else if (!epoch_line)
        snprintf(buf, size, "train/%s", key);
    else
        fail_msg("metrics key %s on an epoch line", key);
    return buf;
}

static void test_trainer_writes_every_metric(void **unused)
{
    (void)unused;
    char run_dir[512], tb_dir[512];
    tu_tmp_path(run_dir, sizeof run_dir, "run");
    tu_tmp_path(tb_dir, sizeof tb_dir, "run/tb");
    job j = {.limit_at = -1};
    rp_trainer_config c = trainer_config(run_dir, tb_dir);
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    assert_int_equal(rp_trainer_run(t), RP_OK);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);

    char files[4][PATH_LEN];
    assert_int_equal(events_files(tb_dir, files, 4), 1);
    events ev;
    read_events(files[0], &ev);
    assert_string_equal(ev.version, "brain.Event:2");

    /* Every number of every metrics.jsonl line, under its tag at its step. */
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    size_t len;
    char *text = (char *)tu_read_file(path, &len);
    text[len] = '\0';
    bool matched[MAX_SCALARS] = {false};
    int lines = 0, numbers = 0, nulls = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int64_t step = (int64_t)cJSON_GetObjectItem(o, "step")->valuedouble;
        bool epoch_line = cJSON_GetObjectItem(o, "images_per_s") != NULL;
        for (const cJSON *f = o->child; f; f = f->next) {
            char tag[64];
            if (!tag_of(f->string, epoch_line, tag, sizeof tag)) continue;
            if (cJSON_IsNull(f)) {
                for (int i = 0; i < ev.n; i++)
                    if (!strcmp(ev.s[i].tag, tag) && ev.s[i].step == step)
                        fail_msg("%s at step %lld is null in metrics.jsonl but written", tag,
                                 (long long)step);
                nulls++;
                continue;
            }
            assert_true(cJSON_IsNumber(f));
            const scalar *s = find(&ev, tag, step);
            /* metrics.jsonl's digits (%.1f for the rate, %.6g for lr, %.6f for the rest), and a
             * float's. */
            double want = f->valuedouble;
            bool rate = !strcmp(tag, "perf/images_per_s"), lr = !strcmp(tag, "train/lr");
            double abs_tol = rate ? 0.05 : lr ? 0 : 5e-7;
            double rel_tol = lr ? 5e-6 : 1e-7;
            if (fabs((double)s->value - want) > abs_tol + (rel_tol + 1e-7) * fabs(want))
                fail_msg("%s at step %lld: %g in the events file, %g in metrics.jsonl", tag,
                         (long long)step, (double)s->value, want);
            matched[s - ev.s] = true;
            numbers++;
        }
        cJSON_Delete(o);
    }
    free(text);
    /* Step lines at 2, 4, 6, 8, 10, 12; epoch lines at 6 and 12; an evaluation line at 4 and 8. */
    assert_int_equal(lines, 10);
    assert_true(numbers >= 6 * 3 + 2 * 6 + 2 * 2);
    assert_int_equal(nulls,
                     6 + 2); /* "none" on every step line, "train_none" on both epoch lines */
    /* Zero values are there, as scalars with a value. */
    assert_true(find(&ev, "train/zero", 2)->value == 0.0f);
    assert_true(find(&ev, "eval/test_zero", 4)->value == 0.0f);
    /* The rest are the step lines' rates, the one number TensorBoard gets besides the lines'. */
    for (int i = 0; i < ev.n; i++) {
        if (matched[i]) continue;
        assert_string_equal(ev.s[i].tag, "perf/images_per_s");
        assert_true(ev.s[i].step % 2 == 0 && ev.s[i].step % STEPS != 0);
        assert_true(ev.s[i].value > 0);
    }
    /* train/loss: one point per step line, in step order, falling. */
    int64_t last = 0;
    float prev = INFINITY;
    for (int i = 0; i < ev.n; i++) {
        if (strcmp(ev.s[i].tag, "train/loss")) continue;
        assert_true(ev.s[i].step > last);
        assert_true(ev.s[i].value < prev);
        last = ev.s[i].step;
        prev = ev.s[i].value;
    }
    assert_int_equal(last, 2 * STEPS);
}

/* fd 2 into a pipe until restore_stderr; returns the saved descriptor. */
static int capture_stderr(int pipe_fds[2])
{
    fflush(stderr);
    assert_int_equal(pipe(pipe_fds), 0);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_true(dup2(pipe_fds[1], 2) >= 0);
    close(pipe_fds[1]);
    return saved;
}

/* fd 2 back; what was written to it meanwhile into buf. */
static void restore_stderr(int saved, int pipe_fds[2], char *buf, size_t size)
{
    fflush(stderr);
    assert_true(dup2(saved, 2) >= 0);
    close(saved);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < size && (r = read(pipe_fds[0], buf + len, size - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(pipe_fds[0]);
}

static void test_trainer_write_failure_warns_once(void **unused)
{
    (void)unused;
    char run_dir[512], tb_dir[512];
    tu_tmp_path(run_dir, sizeof run_dir, "run_full");
    tu_tmp_path(tb_dir, sizeof tb_dir, "run_full_tb");
    job j = {.limit_at = 3};
    rp_trainer_config c = trainer_config(run_dir, tb_dir);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    rp_trainer *t = NULL;
    int fds[2];
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    int saved = capture_stderr(fds);
    rp_status st = rp_trainer_run(t);
    rp_status st_destroy = rp_trainer_destroy(t);
    limit_files(&j.old, 0);
    signal(SIGXFSZ, old_handler);
    char err[4096];
    restore_stderr(saved, fds, err, sizeof err);
    /* The run finished; the events file's failure was told once, naming the file. */
    assert_int_equal(st, RP_OK);
    assert_int_equal(st_destroy, RP_OK);
    assert_int_equal(j.trained, 2 * STEPS);
    int warnings = 0;
    for (const char *p = err; (p = strstr(p, "TensorBoard events")); p++)
        warnings++;
    if (warnings != 1) fail_msg("%d TensorBoard warnings in:\n%s", warnings, err);
    char files[4][PATH_LEN];
    assert_int_equal(events_files(tb_dir, files, 4), 1);
    if (!strstr(err, files[0])) fail_msg("the warning does not name %s:\n%s", files[0], err);
    assert_non_null(strstr(err, "no more are written"));
    /* What reached the file before the limit reads back: the step line at 2. */
    io_tfrecord_reader *r = NULL;
    assert_int_equal(io_tfrecord_open(&r, files[0]), RP_OK);
    const uint8_t *data;
    size_t len;
    int records = 0;
    while (io_tfrecord_next(r, &data, &len) == RP_OK && data)
        records++;
    io_tfrecord_close(r);
    assert_true(records >= 1 + 4); /* the version; train/loss, zero, lr and the rate at step 2 */
}

/* A writer of the program's own: counts what the trainer hands it. */
typedef struct counting {
    int created, added, flushed, destroyed;
    char dir[512];
} counting;
static counting counted;

static rp_status count_create(void **w, const char *dir)
{
    counted.created++;
    snprintf(counted.dir, sizeof counted.dir, "%s", dir);
    *w = &counted;
    return RP_OK;
}
static rp_status count_add(void *w, const char *tag, int64_t step, double value)
{
    assert_ptr_equal(w, &counted);
    assert_true(strlen(tag) <= RP_TRAINER_TAG_MAX && step >= 0 && isfinite(value));
    counted.added++;
    return RP_OK;
}
static rp_status count_flush(void *w)
{
    counted.flushed++;
    return RP_OK;
}
static rp_status count_destroy(void *w)
{
    counted.destroyed++;
    return RP_OK;
}

/*
 * The core library holds no TensorBoard code: tensorboard_dir needs a writer (refused by name
 * without one), and any table of the same shape is used as rp_tensorboard_scalar_writer() is.
 */
static void test_trainer_needs_a_writer(void **unused)
{
    (void)unused;
    char run_dir[512], tb_dir[512];
    tu_tmp_path(run_dir, sizeof run_dir, "run_writer");
    tu_tmp_path(tb_dir, sizeof tb_dir, "run_writer_tb");
    job j = {.limit_at = -1};
    rp_trainer_config c = trainer_config(run_dir, tb_dir);
    c.tensorboard_writer = NULL;
    rp_trainer *t = NULL;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(rp_last_error(), "tensorboard_writer is NULL"));
    assert_non_null(strstr(rp_last_error(), "rp_tensorboard_scalar_writer()"));

    static const rp_scalar_writer mine = {count_create, count_add, count_flush, count_destroy};
    c.tensorboard_writer = &mine;
    assert_int_equal(rp_trainer_create(&t, &c, &model, &j), RP_OK);
    assert_int_equal(rp_trainer_run(t), RP_OK);
    assert_int_equal(rp_trainer_destroy(t), RP_OK);
    assert_int_equal(counted.created, 1);
    assert_string_equal(counted.dir, tb_dir);
    assert_true(counted.added > 10 && counted.flushed > 2);
    assert_int_equal(counted.destroyed, 1);
    struct stat st; /* the table, not TensorBoard's writer, got the numbers: no directory */
    assert_int_equal(stat(tb_dir, &st), -1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_write_read_back),
        cmocka_unit_test(test_wire_format),
        cmocka_unit_test(test_corruption_detected),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_two_writers_one_directory),
        cmocka_unit_test(test_failed_write_is_final),
        cmocka_unit_test(test_trainer_writes_every_metric),
        cmocka_unit_test(test_trainer_write_failure_warns_once),
        cmocka_unit_test(test_trainer_needs_a_writer),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
