/*
 * tensorboard.c - TensorBoard event files (see replicator/tensorboard.h):
 * Event protocol buffers packed by protobuf-c (proto/tensorboard_event.proto,
 * compiled by protoc-c at build time) in TFRecord framing (tfrecord.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/tfrecord_internal.h"
#include "replicator/tensorboard.h"
#include "tensorboard_event.pb-c.h"

/* What TensorBoard expects in the first record; every version starts "brain.Event:". */
#define FILE_VERSION "brain.Event:2"

struct rp_tensorboard {
    FILE *f;
    char *path;
    uint8_t *buf; /* the packed Event being written */
    size_t cap;
    bool failed; /* a write failed: the file may end in a partial record, nothing more goes in */
};

/* Numbers the files of this process, so that two made in the same second get different names. */
static atomic_uint file_counter;

/* Seconds since the epoch, as the Events' wall_time. */
static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Creates dir and its parents; an existing directory is fine. */
static rp_status make_dirs(const char *dir)
{
    size_t n = strlen(dir);
    char *buf = malloc(n + 1);
    if (!buf) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate the path %s", dir);
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755); /* an error shows at the last level */
        *p = '/';
    }
    int err = mkdir(buf, 0755) == 0 ? 0 : errno;
    free(buf);
    struct stat st;
    if (err == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        err = 0;
    else if (err == EEXIST)
        err = ENOTDIR;
    if (err)
        return RP_ERROR(RP_ERR_IO, "cannot create the TensorBoard directory %s: %s", dir,
                        strerror(err));
    return RP_OK;
}

/* Opens a new events file in dir, exclusively: an existing name moves <n> on. */
static rp_status open_file(rp_tensorboard *tb, const char *dir)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    long long seconds = (long long)time(NULL), pid = (long long)getpid();
    for (int tries = 0; tries < 1000; tries++) {
        unsigned n = atomic_fetch_add(&file_counter, 1);
        int len =
            snprintf(NULL, 0, "%s/events.out.tfevents.%lld.%s.%lld.%u", dir, seconds, host, pid, n);
        free(tb->path);
        tb->path = malloc((size_t)len + 1);
        if (!tb->path) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a path in %s", dir);
        snprintf(tb->path, (size_t)len + 1, "%s/events.out.tfevents.%lld.%s.%lld.%u", dir, seconds,
                 host, pid, n);
        tb->f = fopen(tb->path, "wbx");
        if (tb->f) return RP_OK;
        if (errno != EEXIST)
            return RP_ERROR(RP_ERR_IO, "cannot create the events file %s: %s", tb->path,
                            strerror(errno));
    }
    return RP_ERROR(RP_ERR_IO, "no free events file name in %s (tried 1000)", dir);
}

/* After a failed write the file may end in part of a record: nothing more goes in. */
static rp_status refuse(const rp_tensorboard *tb)
{
    return RP_ERROR(RP_ERR_IO, "events file %s: an earlier write failed; nothing more is written",
                    tb->path);
}

/* Packs `ev` into tb->buf and writes it as one record. */
static rp_status write_event(rp_tensorboard *tb, const IoTb__Event *ev)
{
    if (tb->failed) return refuse(tb);
    size_t n = io_tb__event__get_packed_size(ev);
    if (n > tb->cap) {
        size_t cap = n > 2 * tb->cap ? n : 2 * tb->cap;
        uint8_t *grown = realloc(tb->buf, cap);
        if (!grown)
            return RP_ERROR(RP_ERR_NOMEM, "events file %s: cannot allocate %zu bytes", tb->path, n);
        tb->buf = grown;
        tb->cap = cap;
    }
    size_t packed = io_tb__event__pack(ev, tb->buf);
    if (packed != n)
        return RP_ERROR(RP_ERR_BACKEND, "events file %s: protobuf-c packed %zu bytes, expected %zu",
                        tb->path, packed, n);
    rp_status status = io_tfrecord_write(tb->f, tb->path, tb->buf, n);
    if (status != RP_OK) tb->failed = true;
    return status;
}

rp_status rp_tensorboard_create(rp_tensorboard **out, const char *dir)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_tensorboard_create: tb is NULL");
    *out = NULL;
    if (!dir || !*dir)
        return RP_ERROR(RP_ERR_INVALID, "rp_tensorboard_create: the directory is %s",
                        dir ? "empty" : "NULL");
    rp_status status = RP_OK;
    rp_tensorboard *tb = calloc(1, sizeof *tb);
    if (!tb) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a TensorBoard writer");
    RP_TRY(make_dirs(dir));
    RP_TRY(open_file(tb, dir));
    IoTb__Event ev = IO_TB__EVENT__INIT;
    ev.wall_time = wall_time();
    ev.what_case = IO_TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)FILE_VERSION;
    RP_TRY(write_event(tb, &ev));
    RP_TRY(rp_tensorboard_flush(tb));
cleanup:
    if (status != RP_OK) {
        if (tb->f) {
            fclose(tb->f);
            unlink(tb->path);
        }
        free(tb->path);
        free(tb->buf);
        free(tb);
        return status;
    }
    *out = tb;
    return RP_OK;
}

rp_status rp_tensorboard_add_scalar(rp_tensorboard *tb, const char *tag, int64_t step, double value)
{
    if (!tb) return RP_ERROR(RP_ERR_INVALID, "rp_tensorboard_add_scalar: NULL writer");
    if (!tag) return RP_ERROR(RP_ERR_INVALID, "rp_tensorboard_add_scalar %s: NULL tag", tb->path);
    size_t len = strlen(tag);
    if (len == 0 || len > RP_TENSORBOARD_TAG_MAX || !rp_utf8_valid(tag, len))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_tensorboard_add_scalar %s: tag \"%.64s\"%s: 1 to %d bytes of valid "
                        "UTF-8",
                        tb->path, tag, len > 64 ? "..." : "", RP_TENSORBOARD_TAG_MAX);
    IoTb__Summary__Value v = IO_TB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = IO_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    IoTb__Summary__Value *values[1] = {&v};
    IoTb__Summary summary = IO_TB__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = values;
    IoTb__Event ev = IO_TB__EVENT__INIT;
    ev.wall_time = wall_time();
    ev.step = step;
    ev.what_case = IO_TB__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return write_event(tb, &ev);
}

rp_status rp_tensorboard_flush(rp_tensorboard *tb)
{
    if (!tb) return RP_ERROR(RP_ERR_INVALID, "rp_tensorboard_flush: NULL writer");
    if (tb->failed) return refuse(tb);
    if (fflush(tb->f) != 0) {
        tb->failed = true;
        return RP_ERROR(RP_ERR_IO, "cannot write to %s: %s", tb->path, strerror(errno));
    }
    return RP_OK;
}

const char *rp_tensorboard_path(const rp_tensorboard *tb)
{
    return tb ? tb->path : NULL;
}

rp_status rp_tensorboard_destroy(rp_tensorboard *tb)
{
    if (!tb) return RP_OK;
    rp_status status = RP_OK;
    /* A writer that already failed said so; closing it adds nothing new. */
    if (!tb->failed && (fflush(tb->f) != 0 || ferror(tb->f)))
        status = RP_ERROR(RP_ERR_IO, "cannot write to %s: %s", tb->path, strerror(errno));
    if (fclose(tb->f) != 0 && status == RP_OK && !tb->failed)
        status = RP_ERROR(RP_ERR_IO, "cannot close %s: %s", tb->path, strerror(errno));
    free(tb->path);
    free(tb->buf);
    free(tb);
    return status;
}

/* ---- the trainer's scalar writer (rp_trainer_config.tensorboard_writer) --------------------- */

static rp_status writer_create(void **w, const char *dir)
{
    return rp_tensorboard_create((rp_tensorboard **)w, dir);
}

static rp_status writer_add(void *w, const char *tag, int64_t step, double value)
{
    return rp_tensorboard_add_scalar(w, tag, step, value);
}

static rp_status writer_flush(void *w)
{
    return rp_tensorboard_flush(w);
}

static rp_status writer_destroy(void *w)
{
    return rp_tensorboard_destroy(w);
}

const rp_scalar_writer *rp_tensorboard_scalar_writer(void)
{
    static const rp_scalar_writer writer = {writer_create, writer_add, writer_flush,
                                            writer_destroy};
    return &writer;
}
