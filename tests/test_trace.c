/*
 * test_trace.c - traces (replicator/trace.h) and the per-replica results the
 * straggler report reads:
 *
 *  - spans nest: a parent's event covers its children's, and each phase gets
 *    only its self time (a collective inside a compute span counts as comm);
 *  - "forward" runs from the last mark to the start of backward, at the mark's
 *    depth only; an unmatched end is ignored; spans past the depth limit are
 *    not recorded but keep begin/end paired;
 *  - a full buffer drops further events and counts them; recording allocates
 *    nothing after attach (glibc's heap in use does not move);
 *  - the writer's file parses with cJSON: M events naming the process and
 *    the thread, X events with name/ph/ts/pid/tid/dur, a collective's args,
 *    the clock offset applied to ts and stated in otherData; an unwritable
 *    path is RP_ERR_IO naming it;
 *  - the merge concatenates two ranks' files and lists both in otherData; a
 *    file that is not a trace is RP_ERR_FORMAT naming it;
 *  - a FIFO at the output stays a FIFO (refused, never renamed over); the
 *    merge refuses a FIFO or device input at once and an input over
 *    RP_TRACE_MERGE_MAX_BYTES; a write that fails midway names the file and
 *    the system's reason (EFBIG here), and keeps the old file;
 *  - rp_replicator_result_each gives every replica's own value of a report,
 *    and the runtime's workers record their tracks ("replica 1").
 */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Each test starts with tracing off, whatever the one before left (a failed assertion). */
static int trace_off(void **state)
{
    (void)state;
    rp_trace_stop();
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* The events of this process, collected from rp_trace_each_thread into a flat copy. */
#define EVENTS_MAX 64
typedef struct collected {
    int n, tid;
    char name[48];
    rp_trace_event ev[EVENTS_MAX];
} collected;

static rp_status collect(int tid, const char *name, const rp_trace_event *ev, int64_t n, void *arg)
{
    collected *c = arg;
    c->tid = tid;
    snprintf(c->name, sizeof c->name, "%s", name);
    for (int64_t i = 0; i < n && c->n < EVENTS_MAX; i++)
        c->ev[c->n++] = ev[i];
    return RP_OK;
}

static const rp_trace_event *find(const collected *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->ev[i].name, name)) return &c->ev[i];
    return NULL;
}

static bool inside(const rp_trace_event *child, const rp_trace_event *parent)
{
    return child->start_ns >= parent->start_ns &&
           child->start_ns + child->dur_ns <= parent->start_ns + parent->dur_ns;
}

static void test_nesting_and_phases(void **state)
{
    (void)state;
    assert_int_equal(rp_trace_start(16), RP_OK);
    assert_int_equal(rp_trace_start(16), RP_ERR_INVALID); /* once */
    assert_int_equal(rp_trace_thread_attach(7, "replica 7"), RP_OK);
    double ph[RP_PHASE_COUNT];
    rp_trace_phase_take(ph); /* from zero */

    rp_trace_begin(RP_PHASE_COMPUTE); /* step */
    rp_trace_mark();
    rp_trace_begin(RP_PHASE_DATA);
    sleep_ms(10);
    rp_trace_end("data");
    rp_trace_mark(); /* as the loader does */
    sleep_ms(10);    /* forward */
    rp_trace_forward();
    rp_trace_begin(RP_PHASE_COMPUTE);
    sleep_ms(10);
    rp_trace_begin(RP_PHASE_COMM);
    sleep_ms(30);
    rp_trace_end_args("all_reduce", 4096, 12, "mean");
    rp_trace_end("backward");
    rp_trace_end("step");
    rp_trace_end("unmatched"); /* ignored */

    rp_trace_phase_take(ph);
    double taken[RP_PHASE_COUNT];
    rp_trace_phase_take(taken); /* taken means cleared */
    assert_true(taken[RP_PHASE_COMM] == 0 && taken[RP_PHASE_COMPUTE] == 0);

    collected c = {0};
    assert_int_equal(rp_trace_each_thread(collect, &c), RP_OK);
    assert_int_equal(c.tid, 7);
    assert_string_equal(c.name, "replica 7");
    assert_int_equal(c.n, 5); /* data, forward, all_reduce, backward, step; not "unmatched" */
    const rp_trace_event *step = find(&c, "step"), *data = find(&c, "data"),
                         *fwd = find(&c, "forward"), *bwd = find(&c, "backward"),
                         *ar = find(&c, "all_reduce");
    assert_non_null(step);
    assert_non_null(data);
    assert_non_null(fwd);
    assert_non_null(bwd);
    assert_non_null(ar);
    assert_null(find(&c, "unmatched"));
    assert_true(inside(data, step) && inside(fwd, step) && inside(bwd, step) && inside(ar, bwd));
    /* Siblings do not overlap: forward starts after data ends and ends before backward starts. */
    assert_true(fwd->start_ns >= data->start_ns + data->dur_ns);
    assert_true(fwd->start_ns + fwd->dur_ns <= bwd->start_ns);
    assert_true(fwd->dur_ns >= 9000000);
    assert_int_equal(ar->bytes, 4096);
    assert_int_equal(ar->seq, 12);
    assert_string_equal(ar->op, "mean");
    assert_int_equal(step->bytes, -1);
    assert_null(step->op);
    assert_int_equal(rp_trace_recorded(), 5);
    assert_int_equal(rp_trace_dropped(), 0);
    /* Self times, exactly: each phase gets its spans' time less their children's, so data and
     * comm are their events' durations, compute is the step's and backward's own time (forward
     * included: it is the step's), and together they are the step's whole duration. Lower bounds
     * from the sleeps; no upper bounds (a loaded machine sleeps longer). */
    assert_true(fabs(ph[RP_PHASE_DATA] - (double)data->dur_ns * 1e-9) < 1e-9);
    assert_true(fabs(ph[RP_PHASE_COMM] - (double)ar->dur_ns * 1e-9) < 1e-9);
    assert_true(fabs(ph[RP_PHASE_COMPUTE] -
                     (double)(step->dur_ns - data->dur_ns - ar->dur_ns) * 1e-9) < 1e-9);
    assert_true(ph[RP_PHASE_OPTIMIZER] == 0 && ph[RP_PHASE_OTHER] == 0);
    assert_true(ph[RP_PHASE_DATA] >= 0.0099 && ph[RP_PHASE_COMM] >= 0.0299);
    assert_true(ph[RP_PHASE_COMPUTE] >= 0.0199); /* forward 10 ms + backward's own 10 ms */
    rp_trace_stop();
    assert_false(rp_trace_enabled());
}

static void test_forward_needs_a_mark_at_its_depth(void **state)
{
    (void)state;
    assert_int_equal(rp_trace_start(16), RP_OK);
    assert_int_equal(rp_trace_thread_attach(0, "t"), RP_OK);
    rp_trace_forward(); /* no mark: nothing */
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_trace_mark(); /* at depth 1 */
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_trace_forward(); /* at depth 2: would straddle its parent's start, so nothing */
    rp_trace_end("inner");
    rp_trace_forward(); /* the mark was cleared */
    rp_trace_end("outer");
    collected c = {0};
    assert_int_equal(rp_trace_each_thread(collect, &c), RP_OK);
    assert_int_equal(c.n, 2);
    assert_null(find(&c, "forward"));
    rp_trace_stop();
}

static void test_full_buffer_drops_and_counts(void **state)
{
    (void)state;
    assert_int_equal(rp_trace_start(8), RP_OK);
    assert_int_equal(rp_trace_thread_attach(0, "t"), RP_OK);
    /* Past the depth limit nothing is recorded, and the ends still pair with their begins. */
    for (int i = 0; i < 40; i++)
        rp_trace_begin(RP_PHASE_COMPUTE);
    for (int i = 0; i < 40; i++)
        rp_trace_end("deep");
    assert_int_equal(rp_trace_recorded(), 8); /* 32 recorded, 8 kept */
    assert_int_equal(rp_trace_dropped(), 24);
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_trace_end("after"); /* the stack is balanced again: recorded (and dropped: full) */
    assert_int_equal(rp_trace_dropped(), 25);
    rp_trace_stop();
    assert_int_equal(rp_trace_recorded(), 0); /* the buffers are gone */
}

static void test_no_allocation_after_attach(void **state)
{
    (void)state;
    assert_int_equal(rp_trace_start(4096), RP_OK);
    assert_int_equal(rp_trace_thread_attach(3, "steady"), RP_OK);
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_trace_end("warm");
    struct mallinfo2 before = mallinfo2();
    uint64_t allocs = rp_alloc_count();
    for (int i = 0; i < 1000; i++) {
        rp_trace_begin(RP_PHASE_COMPUTE);
        rp_trace_mark();
        rp_trace_forward();
        rp_trace_begin(RP_PHASE_COMM);
        rp_trace_end_args("all_reduce", 8, i, "sum");
        rp_trace_end("step");
    }
    double ph[RP_PHASE_COUNT];
    rp_trace_phase_take(ph);
    struct mallinfo2 after = mallinfo2();
    assert_int_equal(after.uordblks, before.uordblks);
    assert_int_equal(rp_alloc_count(), allocs);
    assert_int_equal(rp_trace_recorded(), 3001);
    rp_trace_stop();
}

/* ---- the writer and the merge ---------------------------------------------------------------- */

static cJSON *read_json(const char *path)
{
    size_t n;
    unsigned char *text = tu_read_file(path, &n);
    cJSON *root = cJSON_ParseWithLength((const char *)text, n);
    free(text);
    assert_non_null(root);
    return root;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* Records one step and one collective on thread tid, then writes them as process `pid`. */
static void write_one(const char *path, int pid, int tid, int64_t offset_ns)
{
    assert_int_equal(rp_trace_start(0), RP_OK);
    assert_int_equal(rp_trace_thread_attach(tid, "replica \"q\""), RP_OK); /* escaped */
    rp_trace_begin(RP_PHASE_COMPUTE);
    rp_trace_begin(RP_PHASE_COMM);
    rp_trace_end_args("all_reduce", 1024, 5, "sum");
    rp_trace_end("step");
    char name[64];
    snprintf(name, sizeof name, "rank %d (host)", pid);
    rp_trace_process proc = {pid, name, offset_ns, 1500, 3000};
    assert_int_equal(rp_trace_write(path, &proc), RP_OK);
    rp_trace_stop();
}

static void test_writer_output_parses(void **state)
{
    (void)state;
    char path[512];
    tu_tmp_path(path, sizeof path, "one.json");
    uint64_t before = rp_now_ns();
    write_one(path, 3, 9, 2000000000); /* +2 s */
    cJSON *root = read_json(path);
    const cJSON *events = item(root, "traceEvents"), *e;
    assert_true(cJSON_IsArray(events));
    int x = 0, process_names = 0, thread_names = 0;
    cJSON_ArrayForEach(e, events)
    {
        const char *ph = cJSON_GetStringValue(item(e, "ph"));
        assert_non_null(ph);
        assert_non_null(cJSON_GetStringValue(item(e, "name")));
        assert_true(cJSON_IsNumber(item(e, "pid")) && item(e, "pid")->valueint == 3);
        assert_true(cJSON_IsNumber(item(e, "tid")));
        if (!strcmp(ph, "M")) {
            const char *what = cJSON_GetStringValue(item(e, "name"));
            const char *value = cJSON_GetStringValue(item(item(e, "args"), "name"));
            if (!strcmp(what, "process_name")) {
                assert_string_equal(value, "rank 3 (host)");
                process_names++;
            } else if (!strcmp(what, "thread_name")) {
                assert_string_equal(value, "replica \"q\"");
                assert_int_equal(item(e, "tid")->valueint, 9);
                thread_names++;
            }
            continue;
        }
        assert_string_equal(ph, "X");
        assert_true(cJSON_IsNumber(item(e, "ts")) && cJSON_IsNumber(item(e, "dur")));
        assert_int_equal(item(e, "tid")->valueint, 9);
        /* ts is the monotonic clock in microseconds, plus the offset's 2 s. */
        double ts = item(e, "ts")->valuedouble;
        assert_true(ts >= (double)before / 1e3 + 2e6 - 1 && ts < (double)rp_now_ns() / 1e3 + 2e6);
        if (!strcmp(cJSON_GetStringValue(item(e, "name")), "all_reduce")) {
            const cJSON *args = item(e, "args");
            assert_int_equal(item(args, "bytes")->valueint, 1024);
            assert_int_equal(item(args, "seq")->valueint, 5);
            assert_string_equal(cJSON_GetStringValue(item(args, "op")), "sum");
        }
        x++;
    }
    assert_int_equal(x, 2);
    assert_int_equal(process_names, 1);
    assert_int_equal(thread_names, 1);
    const cJSON *rank = cJSON_GetArrayItem(item(item(root, "otherData"), "ranks"), 0);
    assert_non_null(rank);
    assert_true(item(rank, "clock_offset_us")->valuedouble == 2e6);
    assert_true(item(rank, "clock_bound_us")->valuedouble == 1.5);
    assert_int_equal(item(rank, "dropped")->valueint, 0);
    cJSON_Delete(root);

    /* An unwritable path. */
    assert_int_equal(rp_trace_start(0), RP_OK);
    rp_trace_process proc = {0, "rank 0", 0, 0, 0};
    assert_int_equal(rp_trace_write("/nonexistent-dir/t.json", &proc), RP_ERR_IO);
    tu_assert_error_contains("/nonexistent-dir/t.json");
    assert_int_equal(rp_trace_write(NULL, &proc), RP_ERR_INVALID);
    rp_trace_stop();
}

static void test_merge(void **state)
{
    (void)state;
    char a[512], b[512], out[512], bad[512];
    tu_tmp_path(a, sizeof a, "m.rank0.json");
    tu_tmp_path(b, sizeof b, "m.rank1.json");
    tu_tmp_path(out, sizeof out, "m.json");
    write_one(a, 0, 0, 0);
    write_one(b, 1, 1, -5000);
    const char *inputs[] = {a, b};
    assert_int_equal(rp_trace_merge(out, inputs, 2), RP_OK);
    cJSON *root = read_json(out);
    const cJSON *e;
    int pids[2] = {0, 0};
    cJSON_ArrayForEach(e, item(root, "traceEvents"))
    {
        int pid = item(e, "pid")->valueint;
        assert_true(pid == 0 || pid == 1);
        pids[pid]++;
    }
    assert_int_equal(pids[0], 6); /* 4 M, 2 X each */
    assert_int_equal(pids[1], 6);
    const cJSON *ranks = item(item(root, "otherData"), "ranks");
    assert_int_equal(cJSON_GetArraySize(ranks), 2);
    assert_true(item(cJSON_GetArrayItem(ranks, 1), "clock_offset_us")->valuedouble == -5.0);
    cJSON_Delete(root);

    /* Not a trace; a missing file. */
    tu_tmp_path(bad, sizeof bad, "bad.json");
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fputs("{\"hello\": 1}", f);
    fclose(f);
    const char *with_bad[] = {a, bad};
    assert_int_equal(rp_trace_merge(out, with_bad, 2), RP_ERR_FORMAT);
    tu_assert_error_contains("bad.json");
    const char *missing[] = {"/nonexistent-dir/x.json"};
    assert_int_equal(rp_trace_merge(out, missing, 1), RP_ERR_IO);
    assert_int_equal(rp_trace_merge(out, missing, 0), RP_ERR_INVALID);
}

/* The number of entries in the scratch directory whose name starts with `prefix`. */
static int entries_starting(const char *prefix)
{
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/*
 * A FIFO at the output path of the writer and of the merge stays a FIFO: refused by name, never
 * renamed over (it became a regular file, and the call returned RP_OK), and no temporary file is
 * left beside it. rp_file_check_writable refuses it, and a directory that does not exist, before
 * any run; it accepts an absent path in a writable directory and leaves nothing there.
 */
static void test_output_must_be_regular(void **state)
{
    (void)state;
    char fifo[512], good[512], in[512];
    tu_tmp_path(fifo, sizeof fifo, "out.fifo");
    tu_tmp_path(good, sizeof good, "fresh.json");
    tu_tmp_path(in, sizeof in, "in.json");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    write_one(in, 0, 0, 0);

    assert_int_equal(rp_trace_start(0), RP_OK);
    rp_trace_process proc = {0, "rank 0", 0, 0, 0};
    assert_int_equal(rp_trace_write(fifo, &proc), RP_ERR_IO);
    tu_assert_error_contains("out.fifo: it is a FIFO, not a regular file");
    rp_trace_stop();
    const char *inputs[] = {in};
    assert_int_equal(rp_trace_merge(fifo, inputs, 1), RP_ERR_IO);
    tu_assert_error_contains("out.fifo: it is a FIFO, not a regular file");
    struct stat st;
    assert_int_equal(stat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(entries_starting("out.fifo"), 1); /* no temporary file */

    assert_int_equal(rp_file_check_writable(fifo, "trace file"), RP_ERR_IO);
    tu_assert_error_contains("trace file");
    assert_int_equal(rp_file_check_writable(tu_tmpdir(), "trace file"), RP_ERR_IO);
    tu_assert_error_contains("it is a directory");
    assert_int_equal(rp_file_check_writable("/nonexistent-dir/t.json", "trace file"), RP_ERR_IO);
    tu_assert_error_contains("/nonexistent-dir/t.json");
    assert_int_equal(rp_file_check_writable(good, "trace file"), RP_OK);
    assert_int_equal(entries_starting("fresh.json"), 0);
}

/*
 * The merge's inputs: a FIFO with no writer is refused at once (it waited for ever), /dev/zero
 * is refused as a device (it grew memory without bound), and a regular file over
 * RP_TRACE_MERGE_MAX_BYTES (sparse: nothing is written) is refused with its size before anything
 * is read. The output is not created.
 */
static void test_merge_inputs_are_bounded(void **state)
{
    (void)state;
    char fifo[512], big[512], out[512];
    tu_tmp_path(fifo, sizeof fifo, "in.fifo");
    tu_tmp_path(big, sizeof big, "big.json");
    tu_tmp_path(out, sizeof out, "bounded.json");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    const char *from_fifo[] = {fifo};
    uint64_t t0 = rp_now_ns();
    assert_int_equal(rp_trace_merge(out, from_fifo, 1), RP_ERR_IO);
    tu_assert_error_contains("in.fifo: it is a FIFO, not a regular file");
    assert_true(rp_now_ns() - t0 < 2000000000ull);
    const char *from_zero[] = {"/dev/zero"};
    assert_int_equal(rp_trace_merge(out, from_zero, 1), RP_ERR_IO);
    tu_assert_error_contains("/dev/zero: it is a character device");
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)RP_TRACE_MERGE_MAX_BYTES + 1), 0);
    close(fd);
    const char *from_big[] = {big};
    assert_int_equal(rp_trace_merge(out, from_big, 1), RP_ERR_IO);
    tu_assert_error_contains("RP_TRACE_MERGE_MAX_BYTES");
    tu_assert_error_contains("big.json: it is 2147483649 bytes");
    assert_int_equal(entries_starting("bounded.json"), 0);
}

/*
 * A write that fails midway says why with the system's own reason, not "Input/output error": in
 * a child limited to 64 KiB files (RLIMIT_FSIZE, SIGXFSZ ignored: each write past it fails with
 * EFBIG, as a full disk fails with ENOSPC) a trace of 4000 events cannot be written; the message
 * names the file and the reason, the old file at the path is kept and no temporary file is left.
 * (tests/cli_trace_paths.sh fills a small tmpfs for ENOSPC itself, where it may mount one.)
 */
static void test_write_failure_names_the_reason(void **state)
{
    (void)state;
    char path[512];
    tu_tmp_path(path, sizeof path, "limited.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {64 << 10, 64 << 10};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(10);
        if (rp_trace_start(0) != RP_OK || rp_trace_thread_attach(0, "replica 0") != RP_OK)
            _exit(11);
        for (int i = 0; i < 4000; i++) {
            rp_trace_begin(RP_PHASE_COMPUTE);
            rp_trace_end("step");
        }
        rp_trace_process proc = {0, "rank 0", 0, 0, 0};
        rp_status st = rp_trace_write(path, &proc);
        if (st != RP_ERR_IO) _exit(12);
        const char *msg = rp_last_error();
        fprintf(stderr, "(expected) %s\n", msg);
        if (!strstr(msg, "limited.json") || !strstr(msg, strerror(EFBIG))) _exit(13);
        if (strstr(msg, "Input/output error")) _exit(14);
        _exit(0);
    }
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
    size_t n;
    unsigned char *old = tu_read_file(path, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(old, "old", 3);
    free(old);
    assert_int_equal(entries_starting("limited.json"), 1);
}

/* ---- the runtime ----------------------------------------------------------------------------- */

static rp_status report_id(rp_replica *rep, void *arg)
{
    (void)arg;
    rp_trace_begin(RP_PHASE_COMPUTE);
    RP_CHECK(rp_barrier(rep));
    rp_trace_end("work");
    RP_CHECK(rp_replica_report(rep, "id", 10.0 * rp_replica_id(rep), RP_SUM));
    return rp_replica_report(rep, "one", 1, RP_MEAN);
}

typedef struct tracks {
    int n;
    int tids[8];
    bool named[8], worked[8];
} tracks;

static rp_status note_track(int tid, const char *name, const rp_trace_event *ev, int64_t n,
                            void *arg)
{
    tracks *t = arg;
    if (t->n == 8) return RP_OK;
    char want[48];
    snprintf(want, sizeof want, "replica %d", tid);
    t->tids[t->n] = tid;
    t->named[t->n] = !strcmp(name, want);
    for (int64_t i = 0; i < n; i++)
        t->worked[t->n] |= !strcmp(ev[i].name, "work");
    t->n++;
    return RP_OK;
}

static void test_replicator_results_and_tracks(void **state)
{
    (void)state;
    assert_int_equal(rp_trace_start(0), RP_OK);
    rp_config cfg = rp_config_default();
    cfg.replicas = 3;
    cfg.threads_per_replica = 1;
    rp_replicator *r;
    assert_int_equal(rp_replicator_create(&r, &cfg), RP_OK);
    assert_int_equal(rp_replicator_run(r, report_id, NULL), RP_OK);
    double each[3] = {-1, -1, -1}, sum;
    assert_int_equal(rp_replicator_result_each(r, "id", each, 3), RP_OK);
    assert_true(each[0] == 0 && each[1] == 10 && each[2] == 20);
    assert_int_equal(rp_replicator_result(r, "id", &sum), RP_OK);
    assert_true(sum == 30);
    assert_int_equal(rp_replicator_result_each(r, "id", each, 2), RP_ERR_INVALID);
    assert_int_equal(rp_replicator_result_each(r, "nope", each, 3), RP_ERR_INVALID);
    tracks t = {0};
    assert_int_equal(rp_trace_each_thread(note_track, &t), RP_OK);
    assert_int_equal(t.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_true(t.named[i]);
        assert_true(t.worked[i]);
    }
    char path[512];
    tu_tmp_path(path, sizeof path, "run.json");
    assert_int_equal(rp_replicator_trace_write(r, path), RP_OK);
    cJSON *root = read_json(path);
    int barriers = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, item(root, "traceEvents")) barriers +=
        !strcmp(cJSON_GetStringValue(item(e, "name")), "barrier");
    assert_int_equal(barriers, 3); /* one per replica, on its own track */
    cJSON_Delete(root);
    rp_replicator_destroy(r);
    rp_trace_stop();
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_nesting_and_phases, trace_off),
        cmocka_unit_test_setup(test_forward_needs_a_mark_at_its_depth, trace_off),
        cmocka_unit_test_setup(test_full_buffer_drops_and_counts, trace_off),
        cmocka_unit_test_setup(test_no_allocation_after_attach, trace_off),
        cmocka_unit_test_setup(test_writer_output_parses, trace_off),
        cmocka_unit_test_setup(test_merge, trace_off),
        cmocka_unit_test_setup(test_output_must_be_regular, trace_off),
        cmocka_unit_test_setup(test_merge_inputs_are_bounded, trace_off),
        cmocka_unit_test_setup(test_write_failure_names_the_reason, trace_off),
        cmocka_unit_test_setup(test_replicator_results_and_tracks, trace_off),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
