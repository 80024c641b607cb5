/*
 * test_data.c - the dataset readers: IDX (plain and gzip), the MNIST layout,
 * CIFAR-10 binary batches, synthetic data and channel statistics.
 *
 * Each test writes its own small files into a temporary directory made by the
 * group setup, and every error case checks the status, the NULL output and
 * that the message names the file and the fault.
 */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define tmp_path tu_tmp_path

/* Writes bytes to path, gzip-compressed if gz. */
static void write_bytes(const char *path, const void *bytes, size_t len, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(gzwrite(f, bytes, (unsigned)len), (int)len);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        if (len) assert_int_equal(fwrite(bytes, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
    }
}

/*
 * Builds an IDX file image in buf: magic 00 00 type ndim, the dims
 * big-endian, then `data_len` payload bytes where byte i is (i * 7 + 3) & 255.
 * Returns the total length.
 */
static size_t make_idx(uint8_t *buf, int type, int ndim, const uint32_t *dims, size_t data_len)
{
    size_t k = 0;
    buf[k++] = 0;
    buf[k++] = 0;
    buf[k++] = (uint8_t)type;
    buf[k++] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[k++] = (uint8_t)(dims[i] >> 24);
        buf[k++] = (uint8_t)(dims[i] >> 16);
        buf[k++] = (uint8_t)(dims[i] >> 8);
        buf[k++] = (uint8_t)dims[i];
    }
    for (size_t i = 0; i < data_len; i++)
        buf[k++] = (uint8_t)(i * 7 + 3);
    return k;
}

/* Writes an IDX file with the given dims and payload length to tmp_dir/name. */
static const char *write_idx(char *path, size_t size, const char *name, int type, int ndim,
                             const uint32_t *dims, size_t data_len, int gz)
{
    uint8_t *buf = malloc(4 + 4 * 8 + data_len);
    assert_non_null(buf);
    size_t len = make_idx(buf, type, ndim, dims, data_len);
    tmp_path(path, size, name);
    write_bytes(path, buf, len, gz);
    free(buf);
    return path;
}

/* Expects rp_idx_read(path) to fail with `status`, NULL output and a message naming path. */
static void expect_idx_error(const char *path, rp_status expected, const char *needle)
{
    uint8_t *data = (uint8_t *)1;
    int ndim = -1, dims[4] = {-1, -1, -1, -1};
    rp_error_clear();
    rp_status s = rp_idx_read(path, &data, &ndim, dims);
    if (s != expected) print_error("status %d, message: %s\n", s, rp_last_error());
    assert_int_equal(s, expected);
    assert_null(data);
    assert_int_equal(ndim, 0);
    tu_assert_error_contains(path);
    if (needle) tu_assert_error_contains(needle);
}

/* ---- rp_idx_read: good files --------------------------------------------- */

static void check_good_idx(int gz)
{
    char path[256];
    uint32_t dims3[3] = {2, 3, 4};
    write_idx(path, sizeof path, gz ? "good3.idx.gz" : "good3.idx", 0x08, 3, dims3, 24, gz);
    uint8_t *data = NULL;
    int ndim = 0, dims[4] = {-1, -1, -1, -1};
    assert_int_equal(rp_idx_read(path, &data, &ndim, dims), RP_OK);
    assert_non_null(data);
    assert_int_equal(ndim, 3);
    assert_int_equal(dims[0], 2);
    assert_int_equal(dims[1], 3);
    assert_int_equal(dims[2], 4);
    assert_int_equal(dims[3], 0);
    for (int i = 0; i < 24; i++)
        assert_int_equal(data[i], (uint8_t)(i * 7 + 3));
    rp_free(data);

    uint32_t dims1[1] = {300};
    write_idx(path, sizeof path, gz ? "good1.idx.gz" : "good1.idx", 0x08, 1, dims1, 300, gz);
    assert_int_equal(rp_idx_read(path, &data, &ndim, dims), RP_OK);
    assert_int_equal(ndim, 1);
    assert_int_equal(dims[0], 300);
    assert_int_equal(dims[1], 0);
    for (int i = 0; i < 300; i++)
        assert_int_equal(data[i], (uint8_t)(i * 7 + 3));
    rp_free(data);

    uint32_t dims4[4] = {2, 2, 2, 3};
    write_idx(path, sizeof path, gz ? "good4.idx.gz" : "good4.idx", 0x08, 4, dims4, 24, gz);
    assert_int_equal(rp_idx_read(path, &data, &ndim, dims), RP_OK);
    assert_int_equal(ndim, 4);
    assert_int_equal(dims[3], 3);
    rp_free(data);
}

/* ---- rp_idx_write ----------------------------------------------------------- */

/*
 * Writes an IDX file, checks its bytes against make_idx's independent
 * encoding of the same header and payload, and reads it back.
 */
static void check_idx_roundtrip(const char *name, int ndim, const int *dims)
{
    char path[256];
    size_t n = 1;
    uint32_t udims[4];
    for (int i = 0; i < ndim; i++) {
        n *= (size_t)dims[i];
        udims[i] = (uint32_t)dims[i];
    }
    uint8_t *want = malloc(4 + 4 * 4 + n);
    assert_non_null(want);
    size_t want_len = make_idx(want, 0x08, ndim, udims, n);
    const uint8_t *payload = want + 4 + 4 * ndim;

    tmp_path(path, sizeof path, name);
    assert_int_equal(rp_idx_write(path, payload, ndim, dims), RP_OK);
    size_t len = 0;
    uint8_t *file = tu_read_file(path, &len);
    assert_int_equal(len, want_len);
    assert_memory_equal(file, want, len);
    free(file);

    uint8_t *data = NULL;
    int got_ndim = 0, got_dims[4] = {-1, -1, -1, -1};
    assert_int_equal(rp_idx_read(path, &data, &got_ndim, got_dims), RP_OK);
    assert_int_equal(got_ndim, ndim);
    for (int i = 0; i < 4; i++)
        assert_int_equal(got_dims[i], i < ndim ? dims[i] : 0);
    assert_memory_equal(data, payload, n);
    rp_free(data);
    free(want);
}

static void test_idx_write_roundtrip(void **state)
{
    (void)state;
    const int labels[1] = {1000};
    check_idx_roundtrip("w_labels.idx", 1, labels);
    const int images[3] = {5, 7, 3};
    check_idx_roundtrip("w_images.idx", 3, images);
    const int images4[4] = {2, 3, 4, 3};
    check_idx_roundtrip("w_images4.idx", 4, images4);
    const int big[3] = {2, 300, 257}; /* dimensions over one byte */
    check_idx_roundtrip("w_big.idx", 3, big);
    /* A second write replaces the first whole. */
    const int fewer[1] = {3};
    check_idx_roundtrip("w_labels.idx", 1, fewer);

    /* A written image/label pair loads as a dataset. */
    char ipath[256], lpath[256];
    uint8_t px[4 * 2 * 2], lab[4] = {3, 1, 4, 1};
    for (int i = 0; i < 16; i++)
        px[i] = (uint8_t)(i * 9);
    const int idims[3] = {4, 2, 2}, ldims[1] = {4};
    assert_int_equal(rp_idx_write(tmp_path(ipath, sizeof ipath, "w_ds_images.idx"), px, 3, idims),
                     RP_OK);
    assert_int_equal(rp_idx_write(tmp_path(lpath, sizeof lpath, "w_ds_labels.idx"), lab, 1, ldims),
                     RP_OK);
    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_load_idx(&ds, ipath, lpath, 5, "w"), RP_OK);
    assert_int_equal(ds->n, 4);
    assert_int_equal(ds->h, 2);
    assert_int_equal(ds->w, 2);
    assert_int_equal(ds->c, 1);
    assert_memory_equal(ds->pixels, px, sizeof px);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ds->labels[i], lab[i]);
    rp_dataset_destroy(ds);
}

static void test_idx_write_errors(void **state)
{
    (void)state;
    char path[256], dir[256];
    uint8_t data[8] = {0};
    const int dims[2] = {2, 4};

    /* A missing directory: RP_ERR_IO naming the path, and nothing created. */
    tmp_path(path, sizeof path, "w_missing_dir/x.idx");
    assert_int_equal(rp_idx_write(path, data, 2, dims), RP_ERR_IO);
    tu_assert_error_contains(path);
    tu_assert_error_contains("No such file or directory");
    struct stat st;
    assert_int_not_equal(stat(tmp_path(dir, sizeof dir, "w_missing_dir"), &st), 0);

    tmp_path(path, sizeof path, "w_bad.idx");
    assert_int_equal(rp_idx_write(NULL, data, 2, dims), RP_ERR_INVALID);
    tu_assert_error_contains("path NULL");
    assert_int_equal(rp_idx_write(path, NULL, 2, dims), RP_ERR_INVALID);
    tu_assert_error_contains("data NULL");
    assert_int_equal(rp_idx_write(path, data, 2, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("dims NULL");
    assert_int_equal(rp_idx_write(path, data, 0, dims), RP_ERR_INVALID);
    tu_assert_error_contains("ndim is 0");
    assert_int_equal(rp_idx_write(path, data, 5, dims), RP_ERR_INVALID);
    tu_assert_error_contains("ndim is 5");
    const int zero[2] = {2, 0};
    assert_int_equal(rp_idx_write(path, data, 2, zero), RP_ERR_INVALID);
    tu_assert_error_contains("dims[1] is 0");
    const int huge[3] = {65536, 65536, 1};
    assert_int_equal(rp_idx_write(path, data, 3, huge), RP_ERR_INVALID);
    tu_assert_error_contains("2^31");
    assert_int_not_equal(stat(path, &st), 0); /* none of them wrote anything */
}

static void test_idx_plain_ok(void **state)
{
    check_good_idx(0);
}

static void test_idx_gzip_ok(void **state)
{
    check_good_idx(1);
}

/* A file large enough to need several internal read chunks, gzipped. */
static void test_idx_gzip_large(void **state)
{
    char path[256];
    uint32_t dims[3] = {100, 200, 300};
    write_idx(path, sizeof path, "large.idx.gz", 0x08, 3, dims, 6000000, 1);
    uint8_t *data = NULL;
    int ndim = 0, d[4];
    assert_int_equal(rp_idx_read(path, &data, &ndim, d), RP_OK);
    for (size_t i = 0; i < 6000000; i += 9973)
        assert_int_equal(data[i], (uint8_t)(i * 7 + 3));
    assert_int_equal(data[5999999], (uint8_t)(5999999u * 7 + 3));
    rp_free(data);
}

/* ---- rp_idx_read: bad headers -------------------------------------------- */

static void test_idx_bad_magic(void **state)
{
    char path[256];
    const char html[] = "<!DOCTYPE html><html>not found</html>";
    write_bytes(tmp_path(path, sizeof path, "html.idx"), html, sizeof html - 1, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "magic");

    uint8_t buf[64];
    uint32_t dims[1] = {4};
    size_t len = make_idx(buf, 0x08, 1, dims, 4);
    buf[1] = 0x01;
    write_bytes(tmp_path(path, sizeof path, "magic1.idx"), buf, len, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "magic");
}

static void test_idx_wrong_dtype(void **state)
{
    char path[256];
    uint32_t dims[1] = {4};
    write_idx(path, sizeof path, "float.idx", 0x0D, 1, dims, 16, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "0x0d");
    tu_assert_error_contains("float32");
    write_idx(path, sizeof path, "int.idx.gz", 0x0C, 1, dims, 16, 1);
    expect_idx_error(path, RP_ERR_FORMAT, "0x0c");
}

static void test_idx_bad_ndim(void **state)
{
    char path[256];
    uint32_t dims[5] = {1, 1, 1, 1, 1};
    write_idx(path, sizeof path, "ndim0.idx", 0x08, 0, dims, 1, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "0 dimensions");
    write_idx(path, sizeof path, "ndim5.idx", 0x08, 5, dims, 1, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "5 dimensions");
}

static void test_idx_zero_dim(void **state)
{
    char path[256];
    uint32_t dims[3] = {5, 0, 4};
    write_idx(path, sizeof path, "zero.idx", 0x08, 3, dims, 0, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "dimension 1 is 0");
}

static void test_idx_too_large(void **state)
{
    char path[256];
    uint32_t dims[3] = {65536, 65536, 2};
    uint64_t before = rp_alloc_count();
    write_idx(path, sizeof path, "huge.idx", 0x08, 3, dims, 10, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "2^31");
    tu_assert_error_contains("65536x65536x2");
    /* Rejected from the header alone: no buffer was allocated. */
    assert_int_equal(rp_alloc_count(), before);
}

static void test_idx_truncated_header(void **state)
{
    char path[256];
    uint8_t buf[64];
    uint32_t dims[3] = {2, 3, 4};
    make_idx(buf, 0x08, 3, dims, 0);
    write_bytes(tmp_path(path, sizeof path, "shorthead.idx"), buf, 10, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "expected 16 bytes");
    tu_assert_error_contains("found 10");

    write_bytes(tmp_path(path, sizeof path, "empty.idx"), buf, 0, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "0 bytes");
}

/* ---- rp_idx_read: data length -------------------------------------------- */

static void test_idx_truncated_data(void **state)
{
    char path[256];
    uint32_t dims[3] = {2, 3, 4};
    write_idx(path, sizeof path, "trunc.idx", 0x08, 3, dims, 20, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "expected 24 data bytes");
    tu_assert_error_contains("found 20");
    tu_assert_error_contains("2x3x4");

    /* The same through gzip: counts are of decompressed bytes. */
    write_idx(path, sizeof path, "trunc.idx.gz", 0x08, 3, dims, 23, 1);
    expect_idx_error(path, RP_ERR_FORMAT, "expected 24 data bytes");
    tu_assert_error_contains("found 23");
}

/* A gzip file cut short at the compressed level (an interrupted download). */
static void test_idx_truncated_gzip_stream(void **state)
{
    char path[256];
    uint32_t dims[1] = {100000};
    write_idx(path, sizeof path, "cut-src.idx.gz", 0x08, 1, dims, 100000, 1);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(200000);
    assert_non_null(buf);
    size_t len = fread(buf, 1, 200000, f);
    fclose(f);
    assert_true(len > 100);

    /* Cut in the middle of the deflate data. */
    write_bytes(tmp_path(path, sizeof path, "cut-mid.idx.gz"), buf, len / 2, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "expected 100000 data bytes");
    tu_assert_error_contains("gzip stream ends early");

    /* Cut inside the 8-byte trailer: all data decodes, but the stream is incomplete. */
    write_bytes(tmp_path(path, sizeof path, "cut-tail.idx.gz"), buf, len - 3, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "gzip");

    /* A flipped bit in the CRC is caught by zlib. */
    buf[len - 6] ^= 0x10;
    write_bytes(tmp_path(path, sizeof path, "crc.idx.gz"), buf, len, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "corrupt gzip");
    free(buf);
}

/* The virtual memory this process has mapped now, in bytes (/proc/self/statm's first field). */
static uint64_t mapped_bytes(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%llu", &pages), 1);
    fclose(f);
    return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * Found by fuzz_idx: 28 bytes of gzip announcing 2^31 - 1 data bytes made the reader allocate
 * 2 GiB before finding the stream empty (libFuzzer's out-of-memory report). With the address
 * space capped 1 GiB above what the process maps now, the file must still be refused as
 * truncated, not as out of memory: the buffer grows with the data that arrives.
 */
static void test_idx_gzip_header_announces_2gib(void **state)
{
    char path[256];
    uint32_t dims[1] = {0x7fffffff};
    write_idx(path, sizeof path, "announces-2gib.idx.gz", 0x08, 1, dims, 0, 1);
    struct rlimit old, tight;
    assert_int_equal(getrlimit(RLIMIT_AS, &old), 0);
    tight = old;
    tight.rlim_cur = (rlim_t)(mapped_bytes() + ((uint64_t)1 << 30));
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < tight.rlim_cur)
        tight.rlim_cur = old.rlim_cur;
    assert_int_equal(setrlimit(RLIMIT_AS, &tight), 0);
    uint8_t *data = NULL;
    int ndim = 0, d[4];
    rp_status status = rp_idx_read(path, &data, &ndim, d);
    assert_int_equal(setrlimit(RLIMIT_AS, &old), 0);
    assert_int_equal(status, RP_ERR_FORMAT);
    assert_null(data);
    tu_assert_error_contains("expected 2147483647 data bytes");
    tu_assert_error_contains("found 0");
}

static void test_idx_trailing_bytes(void **state)
{
    char path[256];
    uint32_t dims[3] = {2, 3, 4};
    write_idx(path, sizeof path, "trail.idx", 0x08, 3, dims, 29, 0);
    expect_idx_error(path, RP_ERR_FORMAT, "5 unexpected trailing bytes");
    tu_assert_error_contains("24 data bytes");
    write_idx(path, sizeof path, "trail.idx.gz", 0x08, 3, dims, 25, 1);
    expect_idx_error(path, RP_ERR_FORMAT, "1 unexpected trailing byte");
}

static void test_idx_missing_file(void **state)
{
    char path[256];
    tmp_path(path, sizeof path, "no-such-file.idx");
    expect_idx_error(path, RP_ERR_IO, "No such file");

    /* A directory opens but cannot be read. */
    expect_idx_error(tu_tmpdir(), RP_ERR_IO, "cannot read");

    uint8_t *data = NULL;
    int ndim, dims[4];
    assert_int_equal(rp_idx_read(NULL, &data, &ndim, dims), RP_ERR_INVALID);
    assert_int_equal(rp_idx_read(path, NULL, &ndim, dims), RP_ERR_INVALID);
}

/*
 * Runs load() on a FIFO with an alarm armed: opening a FIFO waits for a writer, so a reader
 * that opens before checking the type blocks forever; the alarm interrupts such an open after
 * 2 s, so that a regression fails here instead of hanging. The refusal must take under a second.
 */
static rp_status load_with_alarm(rp_status (*load)(const char *path, void *arg), const char *path,
                                 void *arg)
{
    tu_alarm_arm(2);
    double t0 = rp_now_s();
    rp_status s = load(path, arg);
    double took = rp_now_s() - t0;
    tu_alarm_disarm();
    assert_true(took < 1.0);
    return s;
}

static rp_status idx_load(const char *path, void *arg)
{
    (void)arg;
    uint8_t *data = (uint8_t *)1;
    int ndim = -1, dims[4];
    rp_status s = rp_idx_read(path, &data, &ndim, dims);
    assert_null(data);
    return s;
}

static rp_status cifar_load(const char *dir, void *arg)
{
    (void)arg;
    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_cifar10(&ds, dir, "test");
    assert_null(ds);
    return s;
}

static rp_status mnist_load(const char *dir, void *arg)
{
    (void)arg;
    rp_dataset *ds = (rp_dataset *)1;
    rp_status s = rp_dataset_load_mnist(&ds, dir, "test");
    assert_null(ds);
    return s;
}

/* A FIFO as an IDX file (plain or .gz), a CIFAR batch or in a dataset directory: refused. */
static void test_fifo_data_files(void **state)
{
    char path[512], dir[256];
    const char *names[] = {"fifo.idx", "fifo.idx.gz"};
    for (int i = 0; i < 2; i++) {
        tmp_path(path, sizeof path, names[i]);
        assert_int_equal(mkfifo(path, 0600), 0);
        assert_int_equal(load_with_alarm(idx_load, path, NULL), RP_ERR_IO);
        tu_assert_error_contains(path);
        tu_assert_error_contains("it is a FIFO, not a regular file");
    }

    snprintf(dir, sizeof dir, "%s/fifo-mnist", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(load_with_alarm(mnist_load, dir, NULL), RP_ERR_IO);
    tu_assert_error_contains("t10k-");
    tu_assert_error_contains("it is a FIFO, not a regular file");

    snprintf(dir, sizeof dir, "%s/fifo-cifar", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(load_with_alarm(cifar_load, dir, NULL), RP_ERR_IO);
    tu_assert_error_contains(path);
    tu_assert_error_contains("not a regular file");
}

/* ---- rp_dataset_load_idx ------------------------------------------------- */

/* Writes a [n] label file whose label i is labels[i]. */
static void write_labels(const char *path, const uint8_t *labels, uint32_t n, int gz)
{
    uint8_t buf[256];
    size_t len = make_idx(buf, 0x08, 1, &n, 0);
    memcpy(buf + len, labels, n);
    write_bytes(path, buf, len + n, gz);
}

static void test_load_idx_ok(void **state)
{
    char images[256], labels[256];
    uint32_t dims[3] = {3, 2, 5};
    write_idx(images, sizeof images, "ok-images.gz", 0x08, 3, dims, 30, 1);
    const uint8_t lab[3] = {9, 0, 4};
    write_labels(tmp_path(labels, sizeof labels, "ok-labels"), lab, 3, 0);

    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, "tiny/train"), RP_OK);
    assert_non_null(ds);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->h, 2);
    assert_int_equal(ds->w, 5);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->num_classes, 10);
    assert_string_equal(ds->name, "tiny/train");
    for (int i = 0; i < 3; i++)
        assert_int_equal(ds->labels[i], lab[i]);
    for (int i = 0; i < 30; i++)
        assert_int_equal(ds->pixels[i], (uint8_t)(i * 7 + 3));
    rp_dataset_destroy(ds);

    /* A 4-D image file gives c > 1. */
    uint32_t dims4[4] = {3, 2, 2, 3};
    write_idx(images, sizeof images, "ok-images4", 0x08, 4, dims4, 36, 0);
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, NULL), RP_OK);
    assert_int_equal(ds->c, 3);
    assert_string_equal(ds->name, "idx");
    rp_dataset_destroy(ds);
}

static void test_load_idx_count_mismatch(void **state)
{
    char images[256], labels[256];
    uint32_t dims[3] = {4, 2, 2};
    write_idx(images, sizeof images, "mm-images", 0x08, 3, dims, 16, 0);
    const uint8_t lab[3] = {1, 2, 3};
    write_labels(tmp_path(labels, sizeof labels, "mm-labels"), lab, 3, 0);
    rp_dataset *ds = (rp_dataset *)1;
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, "mm"), RP_ERR_FORMAT);
    assert_null(ds);
    tu_assert_error_contains("4 images");
    tu_assert_error_contains("3 labels");
    tu_assert_error_contains(images);
    tu_assert_error_contains(labels);
}

static void test_load_idx_label_range(void **state)
{
    char images[256], labels[256];
    uint32_t dims[3] = {4, 2, 2};
    write_idx(images, sizeof images, "lr-images", 0x08, 3, dims, 16, 0);
    const uint8_t lab[4] = {1, 9, 10, 3};
    write_labels(tmp_path(labels, sizeof labels, "lr-labels.gz"), lab, 4, 1);
    rp_dataset *ds = (rp_dataset *)1;
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, "lr"), RP_ERR_FORMAT);
    assert_null(ds);
    tu_assert_error_contains("sample 2 is 10");
    tu_assert_error_contains(labels);
    /* With 11 classes the same files are fine. */
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 11, "lr"), RP_OK);
    rp_dataset_destroy(ds);
}

static void test_load_idx_wrong_rank(void **state)
{
    char images[256], labels[256];
    uint32_t dims1[1] = {4};
    const uint8_t lab[4] = {1, 2, 3, 4};
    write_labels(tmp_path(labels, sizeof labels, "rank-labels"), lab, 4, 0);
    rp_dataset *ds = NULL;
    /* Labels given as images. */
    assert_int_equal(rp_dataset_load_idx(&ds, labels, labels, 10, "x"), RP_ERR_FORMAT);
    tu_assert_error_contains("3-D");
    uint32_t dims2[2] = {4, 4};
    write_idx(images, sizeof images, "rank-images", 0x08, 2, dims2, 16, 0);
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, "x"), RP_ERR_FORMAT);
    tu_assert_error_contains("2-D");
    (void)dims1;
    uint32_t dims3[3] = {4, 2, 2};
    write_idx(images, sizeof images, "rank-images3", 0x08, 3, dims3, 16, 0);
    assert_int_equal(rp_dataset_load_idx(&ds, images, images, 10, "x"), RP_ERR_FORMAT);
    tu_assert_error_contains("1-D");
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 0, "x"), RP_ERR_INVALID);
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 257, "x"), RP_ERR_INVALID);
    assert_null(ds);
}

/* A missing file in the pair is an IO error naming it. */
static void test_load_idx_missing(void **state)
{
    char images[256], labels[256];
    uint32_t dims[3] = {4, 2, 2};
    write_idx(images, sizeof images, "miss-images", 0x08, 3, dims, 16, 0);
    tmp_path(labels, sizeof labels, "miss-labels-absent");
    rp_dataset *ds = (rp_dataset *)1;
    assert_int_equal(rp_dataset_load_idx(&ds, images, labels, 10, "x"), RP_ERR_IO);
    assert_null(ds);
    tu_assert_error_contains(labels);
}

/* ---- rp_dataset_load_mnist ----------------------------------------------- */

static void test_load_mnist_layout(void **state)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/fakemnist", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    /* Images plain, labels gzipped: both names are tried. */
    uint32_t dims[3] = {5, 28, 28};
    uint8_t *buf = malloc(16 + 5 * 784);
    assert_non_null(buf);
    size_t len = make_idx(buf, 0x08, 3, dims, 5 * 784);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    write_bytes(path, buf, len, 0);
    free(buf);
    const uint8_t lab[5] = {0, 1, 2, 3, 9};
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_labels(path, lab, 5, 1);

    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_load_mnist(&ds, dir, "train"), RP_OK);
    assert_int_equal(ds->n, 5);
    assert_int_equal(ds->h, 28);
    assert_int_equal(ds->w, 28);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->num_classes, 10);
    assert_int_equal(ds->labels[4], 9);
    assert_string_equal(ds->name, "fakemnist/train");
    rp_dataset_destroy(ds);

    /* A trailing slash does not change the name. */
    char slash[300];
    snprintf(slash, sizeof slash, "%s/", dir);
    assert_int_equal(rp_dataset_load_mnist(&ds, slash, "train"), RP_OK);
    assert_string_equal(ds->name, "fakemnist/train");
    rp_dataset_destroy(ds);

    /* The test split is missing: the error names the directory and both names. */
    ds = (rp_dataset *)1;
    assert_int_equal(rp_dataset_load_mnist(&ds, dir, "test"), RP_ERR_IO);
    assert_null(ds);
    tu_assert_error_contains(dir);
    tu_assert_error_contains("t10k-images-idx3-ubyte or t10k-images-idx3-ubyte.gz");
    assert_null(strstr(rp_last_error(), "apt-get"));

    assert_int_equal(rp_dataset_load_mnist(&ds, dir, "validation"), RP_ERR_INVALID);
    tu_assert_error_contains("validation");
}

/* Only when the Debian package is absent can the install hint be seen. */
static void test_load_mnist_default_hint(void **state)
{
    struct stat st;
    if (stat(RP_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", &st) == 0 ||
        stat(RP_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte", &st) == 0)
        skip();
    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_load_mnist(&ds, RP_FASHION_MNIST_DIR, "test"), RP_ERR_IO);
    tu_assert_error_contains("apt-get install dataset-fashion-mnist");
}

/* ---- CIFAR-10 ------------------------------------------------------------ */

#define CIFAR_REC 3073

/* Pixel value of record r, channel ch, position p in the test files. */
static uint8_t cifar_value(int r, int ch, int p)
{
    return (uint8_t)(r * 31 + ch * 85 + p * 3 + (p >> 5));
}

/* Writes `records` CIFAR records whose labels start at first_label. */
static void write_cifar(const char *path, int records, int first_record, int first_label,
                        size_t cut)
{
    size_t len = (size_t)records * CIFAR_REC;
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    for (int r = 0; r < records; r++) {
        uint8_t *rec = buf + (size_t)r * CIFAR_REC;
        rec[0] = (uint8_t)((first_label + r) % 256);
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < 1024; p++)
                rec[1 + ch * 1024 + p] = cifar_value(first_record + r, ch, p);
    }
    write_bytes(path, buf, len - cut, 0);
    free(buf);
}

static void test_cifar_nhwc(void **state)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/cifar-ok", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    write_cifar(path, 2, 0, 7, 0);

    rp_dataset *ds = NULL;
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "test"), RP_OK);
    assert_int_equal(ds->n, 2);
    assert_int_equal(ds->h, 32);
    assert_int_equal(ds->w, 32);
    assert_int_equal(ds->c, 3);
    assert_int_equal(ds->num_classes, 10);
    assert_string_equal(ds->name, "cifar-10/test");
    assert_int_equal(ds->labels[0], 7);
    assert_int_equal(ds->labels[1], 8);
    for (int r = 0; r < 2; r++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                for (int ch = 0; ch < 3; ch++)
                    assert_int_equal(ds->pixels[((r * 32 + y) * 32 + x) * 3 + ch],
                                     cifar_value(r, ch, y * 32 + x));
    rp_dataset_destroy(ds);

    /* The train split concatenates data_batch_1..5 in order. */
    for (int i = 1; i <= 5; i++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, i);
        write_cifar(path, i, i * 10, i, 0);
    }
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "train"), RP_OK);
    assert_int_equal(ds->n, 15);
    assert_string_equal(ds->name, "cifar-10/train");
    /* Record 3 is the first of data_batch_3 (label 3, values of record 30). */
    assert_int_equal(ds->labels[3], 3);
    assert_int_equal(ds->pixels[3 * 3072 + 5 * 3 + 2], cifar_value(30, 2, 5));
    assert_int_equal(ds->labels[14], 9);
    rp_dataset_destroy(ds);
}

static void test_cifar_errors(void **state)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/cifar-bad", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0700), 0);
    rp_dataset *ds = (rp_dataset *)1;

    /* Missing file. */
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "test"), RP_ERR_IO);
    assert_null(ds);
    tu_assert_error_contains("test_batch.bin");
    tu_assert_error_contains(dir);

    /* A truncated second record. */
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    write_cifar(path, 2, 0, 0, 100);
    ds = (rp_dataset *)1;
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "test"), RP_ERR_FORMAT);
    assert_null(ds);
    tu_assert_error_contains(path);
    tu_assert_error_contains("6046 bytes");
    tu_assert_error_contains("3073-byte records");
    tu_assert_error_contains("2973 bytes left over");

    /* A label of 10. */
    write_cifar(path, 2, 0, 9, 0);
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "test"), RP_ERR_FORMAT);
    tu_assert_error_contains("record 1 is 10");

    /* Empty file. */
    write_bytes(path, "", 0, 0);
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "test"), RP_ERR_FORMAT);
    tu_assert_error_contains("empty");

    /* Train needs all five batches. */
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    write_cifar(path, 1, 0, 0, 0);
    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "train"), RP_ERR_IO);
    tu_assert_error_contains("data_batch_2.bin");

    assert_int_equal(rp_dataset_load_cifar10(&ds, dir, "val"), RP_ERR_INVALID);
    assert_null(ds);
}

/* ---- synthetic ----------------------------------------------------------- */

/* Padding centres each image on zeros and keeps labels; a smaller size is refused. */
static void test_pad(void **state)
{
    (void)state;
    rp_dataset *in = NULL, *out = NULL;
    assert_int_equal(rp_dataset_synthetic(&in, 3, 5, 4, 2, 7, 11), RP_OK);
    assert_int_equal(rp_dataset_pad(&out, in, 8, 7), RP_OK);
    assert_int_equal(out->n, 3);
    assert_int_equal(out->h, 8);
    assert_int_equal(out->w, 7);
    assert_int_equal(out->c, 2);
    assert_int_equal(out->num_classes, 7);
    int top = 1, left = 1; /* margins 3 and 3: the odd pixel goes after */
    for (int64_t i = 0; i < 3; i++) {
        assert_int_equal(out->labels[i], in->labels[i]);
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 7; x++)
                for (int k = 0; k < 2; k++) {
                    uint8_t got = out->pixels[((i * 8 + y) * 7 + x) * 2 + k];
                    bool inside = y >= top && y < top + 5 && x >= left && x < left + 4;
                    uint8_t want =
                        inside ? in->pixels[((i * 5 + y - top) * 4 + x - left) * 2 + k] : 0;
                    assert_int_equal(got, want);
                }
    }
    assert_non_null(strstr(out->name, "@8x7"));
    rp_dataset_destroy(out);
    assert_int_equal(rp_dataset_pad(&out, in, 4, 7), RP_ERR_INVALID);
    assert_null(out);
    assert_non_null(strstr(rp_last_error(), "smaller"));
    rp_dataset_destroy(in);
}

static void test_synthetic(void **state)
{
    rp_dataset *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(rp_dataset_synthetic(&a, 37, 9, 7, 3, 10, 1234), RP_OK);
    assert_int_equal(rp_dataset_synthetic(&b, 37, 9, 7, 3, 10, 1234), RP_OK);
    assert_int_equal(rp_dataset_synthetic(&c, 37, 9, 7, 3, 10, 1235), RP_OK);
    size_t bytes = 37 * 9 * 7 * 3;
    assert_int_equal(a->n, 37);
    assert_int_equal(a->h, 9);
    assert_int_equal(a->w, 7);
    assert_int_equal(a->c, 3);
    assert_int_equal(a->num_classes, 10);
    assert_string_equal(a->name, "synthetic/9x7x3");
    assert_memory_equal(a->pixels, b->pixels, bytes);
    assert_memory_equal(a->labels, b->labels, 37 * sizeof(int32_t));
    assert_memory_not_equal(a->pixels, c->pixels, bytes);
    assert_memory_not_equal(a->labels, c->labels, 37 * sizeof(int32_t));

    int seen[10] = {0};
    for (int i = 0; i < 37; i++) {
        assert_in_range(a->labels[i], 0, 9);
        seen[a->labels[i]]++;
    }
    int distinct = 0;
    for (int k = 0; k < 10; k++)
        distinct += seen[k] > 0;
    assert_true(distinct >= 5);

    /* Bytes look uniform: the mean is near 127.5. */
    double sum = 0;
    for (size_t i = 0; i < bytes; i++)
        sum += a->pixels[i];
    assert_true(fabs(sum / (double)bytes - 127.5) < 8.0);
    rp_dataset_destroy(a);
    rp_dataset_destroy(b);
    rp_dataset_destroy(c);

    /* ImageNet-shaped. */
    assert_int_equal(rp_dataset_synthetic(&a, 4, 224, 224, 3, 1000, 7), RP_OK);
    for (int i = 0; i < 4; i++)
        assert_in_range(a->labels[i], 0, 999);
    rp_dataset_destroy(a);

    a = (rp_dataset *)1;
    assert_int_equal(rp_dataset_synthetic(&a, 0, 224, 224, 3, 1000, 7), RP_ERR_INVALID);
    assert_null(a);
    assert_int_equal(rp_dataset_synthetic(&a, 4, 224, 224, 3, 0, 7), RP_ERR_INVALID);
    assert_int_equal(rp_dataset_synthetic(&a, INT64_MAX, 65536, 65536, 3, 10, 7), RP_ERR_INVALID);
    rp_dataset_destroy(NULL);
}

/* ---- channel statistics -------------------------------------------------- */

static void test_channel_stats(void **state)
{
    /* Channel 0 alternates 0 and 255 (mean 0.5, std 0.5); channel 1 is 51 (0.2, 0). */
    uint8_t pixels[2 * 2 * 2 * 2];
    int32_t labels[2] = {0, 1};
    for (int i = 0; i < 8; i++) {
        pixels[2 * i] = (i & 1) ? 255 : 0;
        pixels[2 * i + 1] = 51;
    }
    rp_dataset ds = {
        .n = 2, .h = 2, .w = 2, .c = 2, .num_classes = 2, .pixels = pixels, .labels = labels};
    float mean[2], std[2];
    assert_int_equal(rp_dataset_channel_stats(&ds, mean, std), RP_OK);
    assert_float_equal(mean[0], 0.5f, 1e-7f);
    assert_float_equal(std[0], 0.5f, 1e-7f);
    assert_float_equal(mean[1], 0.2f, 1e-7f);
    assert_float_equal(std[1], 0.0f, 1e-7f);

    /* Uniform random bytes: mean 0.5, std close to sqrt((256^2-1)/12)/255. */
    rp_dataset *syn = NULL;
    assert_int_equal(rp_dataset_synthetic(&syn, 64, 32, 32, 3, 10, 99), RP_OK);
    float m3[3], s3[3];
    assert_int_equal(rp_dataset_channel_stats(syn, m3, s3), RP_OK);
    double expect_std = sqrt((256.0 * 256.0 - 1.0) / 12.0) / 255.0;
    for (int k = 0; k < 3; k++) {
        assert_true(fabs(m3[k] - 0.5) < 0.01);
        assert_true(fabs(s3[k] - expect_std) < 0.01);
    }
    rp_dataset_destroy(syn);

    assert_int_equal(rp_dataset_channel_stats(NULL, mean, std), RP_ERR_INVALID);
    ds.n = 0;
    assert_int_equal(rp_dataset_channel_stats(&ds, mean, std), RP_ERR_INVALID);
}

/* ---- the real Fashion-MNIST ---------------------------------------------- */

static void test_fashion_mnist_real(void **state)
{
    struct stat st;
    if (stat(RP_FASHION_MNIST_DIR, &st) != 0) skip();
    rp_dataset *ds = NULL;
    rp_status s = rp_dataset_load_mnist(&ds, RP_FASHION_MNIST_DIR, "test");
    if (s != RP_OK) print_error("%s\n", rp_last_error());
    assert_int_equal(s, RP_OK);
    assert_int_equal(ds->n, 10000);
    assert_int_equal(ds->h, 28);
    assert_int_equal(ds->w, 28);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->num_classes, 10);
    assert_string_equal(ds->name, "fashion-mnist/test");
    int counts[10] = {0};
    for (int64_t i = 0; i < ds->n; i++) {
        assert_in_range(ds->labels[i], 0, 9);
        counts[ds->labels[i]]++;
    }
    for (int k = 0; k < 10; k++)
        assert_int_equal(counts[k], 1000);
    /* The first test images are an ankle boot, a pullover and a trouser. */
    assert_int_equal(ds->labels[0], 9);
    assert_int_equal(ds->labels[1], 2);
    assert_int_equal(ds->labels[2], 1);
    /* Published statistics of the test split: mean ~0.2868, std ~0.3524. */
    float mean, std;
    assert_int_equal(rp_dataset_channel_stats(ds, &mean, &std), RP_OK);
    assert_true(fabs(mean - 0.2868) < 0.002);
    assert_true(fabs(std - 0.3524) < 0.002);
    rp_dataset_destroy(ds);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_plain_ok),
        cmocka_unit_test(test_idx_gzip_ok),
        cmocka_unit_test(test_idx_gzip_large),
        cmocka_unit_test(test_idx_bad_magic),
        cmocka_unit_test(test_idx_wrong_dtype),
        cmocka_unit_test(test_idx_bad_ndim),
        cmocka_unit_test(test_idx_zero_dim),
        cmocka_unit_test(test_idx_too_large),
        cmocka_unit_test(test_idx_truncated_header),
        cmocka_unit_test(test_idx_truncated_data),
        cmocka_unit_test(test_idx_truncated_gzip_stream),
        cmocka_unit_test(test_idx_gzip_header_announces_2gib),
        cmocka_unit_test(test_idx_trailing_bytes),
        cmocka_unit_test(test_idx_missing_file),
        cmocka_unit_test(test_fifo_data_files),
        cmocka_unit_test(test_idx_write_roundtrip),
        cmocka_unit_test(test_idx_write_errors),
        cmocka_unit_test(test_load_idx_ok),
        cmocka_unit_test(test_load_idx_count_mismatch),
        cmocka_unit_test(test_load_idx_label_range),
        cmocka_unit_test(test_load_idx_wrong_rank),
        cmocka_unit_test(test_load_idx_missing),
        cmocka_unit_test(test_load_mnist_layout),
        cmocka_unit_test(test_load_mnist_default_hint),
        cmocka_unit_test(test_cifar_nhwc),
        cmocka_unit_test(test_cifar_errors),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_channel_stats),
        cmocka_unit_test(test_fashion_mnist_real),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
