/*
 * test_core.c - errors and their trail, allocation counting, the arena, the RNG, clocks, log
 * prefixes, CPU counts, and the file helpers (stale temporary files, regular files only).
 */
#define _GNU_SOURCE /* pthread_setaffinity_np */
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/file_internal.h"
#include "testutil.h"

/* An error message starts with file:line and carries the formatted text and the status. */
static void test_error_message(void **state)
{
    (void)state;
    rp_error_clear();
    assert_int_equal(rp_last_status(), RP_OK);
    rp_status s = RP_ERROR(RP_ERR_SHAPE, "shape %d is wrong", 42);
    assert_int_equal(s, RP_ERR_SHAPE);
    assert_int_equal(rp_last_status(), RP_ERR_SHAPE);
    assert_non_null(strstr(rp_last_error(), "test_core.c:"));
    assert_non_null(strstr(rp_last_error(), "shape 42 is wrong"));
    assert_string_equal(rp_status_name(RP_ERR_SHAPE), "SHAPE");
    assert_string_equal(rp_status_name(RP_ERR_TIMEOUT), "TIMEOUT");
}

static void *set_error_on_thread(void *arg)
{
    (void)arg;
    RP_ERROR(RP_ERR_IO, "thread error");
    return NULL;
}

/* Errors are per thread: another thread's error does not overwrite ours. */
static void test_error_thread_local(void **state)
{
    (void)state;
    RP_ERROR(RP_ERR_INVALID, "main error");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_error_on_thread, NULL), 0);
    pthread_join(th, NULL);
    assert_non_null(strstr(rp_last_error(), "main error"));
    assert_int_equal(rp_last_status(), RP_ERR_INVALID);
}

static void test_alloc_aligned_and_counted(void **state)
{
    (void)state;
    uint64_t before = rp_alloc_count();
    float *a = rp_alloc(100);
    float *b = rp_calloc(1000);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % RP_ALIGN, 0);
    assert_int_equal((uintptr_t)b % RP_ALIGN, 0);
    for (int i = 0; i < 250; i++)
        assert_true(b[i] == 0.0f);
    assert_int_equal(rp_alloc_count() - before, 2);
    rp_free(a);
    rp_free(b);
}

/* Allocation failure returns NULL with a NOMEM error naming the size, never aborts. */
static void test_alloc_failure(void **state)
{
    (void)state;
    void *p = rp_alloc((size_t)1 << 62);
    assert_null(p);
    assert_int_equal(rp_last_status(), RP_ERR_NOMEM);
    assert_non_null(strstr(rp_last_error(), "4611686018427387904"));
}

/*
 * The arena grows while a step needs more, then consolidates; an identical
 * second and third step make no system allocation.
 */
static void test_arena_steady_state(void **state)
{
    (void)state;
    rp_arena *a;
    assert_int_equal(rp_arena_create(&a, 1024), RP_OK);
    uint64_t allocs[4];
    for (int step = 0; step < 4; step++) {
        for (int i = 0; i < 50; i++) {
            char *p = rp_arena_alloc(a, 1000 + (size_t)i * 37);
            assert_non_null(p);
            assert_int_equal((uintptr_t)p % RP_ALIGN, 0);
            memset(p, i, 1000 + (size_t)i * 37); /* ASan checks the bounds */
        }
        allocs[step] = rp_arena_get_stats(a).system_allocs;
        rp_arena_reset(a);
        assert_int_equal(rp_arena_get_stats(a).used, 0);
    }
    assert_true(allocs[0] > 1); /* it had to grow */
    uint64_t after_reset = rp_arena_get_stats(a).system_allocs;
    assert_int_equal(allocs[2], allocs[1]); /* no allocation in steady state */
    assert_int_equal(allocs[3], allocs[1]);
    assert_int_equal(after_reset, allocs[1]);
    rp_arena_stats s = rp_arena_get_stats(a);
    assert_true(s.capacity >= s.high_water);
    rp_arena_destroy(a);
}

/* Distinct allocations never overlap. */
static void test_arena_no_overlap(void **state)
{
    (void)state;
    rp_arena *a;
    assert_int_equal(rp_arena_create(&a, 256), RP_OK);
    int *p[40];
    for (int i = 0; i < 40; i++) {
        p[i] = rp_arena_alloc(a, 100 * sizeof(int));
        for (int j = 0; j < 100; j++)
            p[i][j] = i;
    }
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 100; j++)
            assert_int_equal(p[i][j], i);
    rp_arena_destroy(a);
}

/* Known-answer vector from the Philox paper's reference implementation (Random123). */
static void test_philox_known_answer(void **state)
{
    (void)state;
    uint32_t out[4];
    const uint32_t zero_ctr[4] = {0, 0, 0, 0}, zero_key[2] = {0, 0};
    rp_philox4x32(zero_ctr, zero_key, out);
    assert_int_equal(out[0], 0x6627e8d5u);
    assert_int_equal(out[1], 0xe169c58du);
    assert_int_equal(out[2], 0xbc57ac4cu);
    assert_int_equal(out[3], 0x9b00dbd8u);
    const uint32_t ctr[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    const uint32_t key[2] = {0xa4093822u, 0x299f31d0u};
    rp_philox4x32(ctr, key, out);
    assert_int_equal(out[0], 0xd16cfe09u);
    assert_int_equal(out[1], 0x94fdccebu);
    assert_int_equal(out[2], 0x5001e420u);
    assert_int_equal(out[3], 0x24126ea1u);
}

typedef struct {
    uint64_t key;
    size_t first, n;
    float *out;
} fill_job;

static void *fill_part(void *arg)
{
    fill_job *j = arg;
    rp_rng_fill_normal(j->key, j->first, j->out + j->first, j->n, 0.0f, 1.0f);
    return NULL;
}

/* The same stream whatever the thread count: 1 thread vs 4 threads over uneven pieces. */
static void test_rng_thread_count_independent(void **state)
{
    (void)state;
    enum { N = 10007 };
    float *one = rp_alloc(N * sizeof(float)), *four = rp_alloc(N * sizeof(float));
    uint64_t key = rp_hash_str(7, "weights");
    rp_rng_fill_normal(key, 0, one, N, 0.0f, 1.0f);
    size_t cuts[5] = {0, 1, 4000, 4001, N};
    pthread_t th[4];
    fill_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (fill_job){key, cuts[i], cuts[i + 1] - cuts[i], four};
        pthread_create(&th[i], NULL, fill_part, &jobs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_memory_equal(one, four, N * sizeof(float));
    /* And it looks normal: mean ~0, variance ~1. */
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++) {
        s += one[i];
        s2 += (double)one[i] * one[i];
    }
    assert_true(fabs(s / N) < 0.05);
    assert_true(fabs(s2 / N - 1.0) < 0.05);
    rp_free(one);
    rp_free(four);
}

static void test_rng_streams(void **state)
{
    (void)state;
    rp_rng a = rp_rng_make(1, 0), b = rp_rng_make(1, 0), c = rp_rng_make(1, 1);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = rp_rng_u32(&a), y = rp_rng_u32(&b), z = rp_rng_u32(&c);
        same_ab += x == y;
        same_ac += x == z;
    }
    assert_int_equal(same_ab, 100);
    assert_true(same_ac < 3);
    /* below() is in range and hits every value. */
    int seen[7] = {0};
    for (int i = 0; i < 700; i++) {
        uint32_t v = rp_rng_below(&a, 7);
        assert_true(v < 7);
        seen[v]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(seen[i] > 50);
    float u = rp_rng_uniform(&a);
    assert_true(u >= 0.0f && u < 1.0f);
    assert_true(rp_hash_str(1, "a") != rp_hash_str(1, "b"));
    assert_true(rp_hash_str(1, "a") != rp_hash_str(2, "a"));
}

static void test_clock_monotonic(void **state)
{
    (void)state;
    uint64_t a = rp_now_ns(), b = rp_now_ns();
    assert_true(b >= a);
    assert_true(rp_now_s() > 0);
}

/* A log line names host and pid, then the MPI rank once set, then the thread's replica. */
/*
 * The trail: a failure three levels below trail_top() passes back through an RP_CHECK, another
 * RP_CHECK and an RP_TRY; each level's line number is recorded on the line of its macro.
 */
static int trail_at[3];

static rp_status trail_leaf(void)
{
    return RP_ERROR(RP_ERR_SHAPE, "the leaf failed");
}

static rp_status trail_mid(void)
{
    trail_at[0] = __LINE__ + 1; /* the line of the check below */
    RP_CHECK(trail_leaf());
    return RP_OK;
}

static rp_status trail_upper(void)
{
    trail_at[1] = __LINE__ + 1; /* the line of the check below */
    RP_CHECK(trail_mid());
    return RP_OK;
}

static rp_status trail_top(void)
{
    rp_status status = RP_OK;
    trail_at[2] = __LINE__ + 1; /* the line of the check below */
    RP_TRY(trail_upper());
cleanup:
    return status;
}

static int trail_leaf_value;

static int *trail_ptr_leaf(void)
{
    RP_ERROR(RP_ERR_NOMEM, "the pointer leaf failed");
    return NULL;
}

static int *trail_ptr_top(bool fail)
{
    int *p = fail ? trail_ptr_leaf() : &trail_leaf_value;
    trail_at[0] = __LINE__ + 1; /* the line of the check below */
    RP_PROPAGATE_NULL(p);
    return p;
}

/* Runs fn() with stderr caught in buf (NUL-terminated); returns fn's status. */
static rp_status trail_capture(rp_status (*fn)(void), char *buf, size_t size)
{
    fflush(stderr);
    FILE *f = tmpfile();
    assert_non_null(f);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    dup2(fileno(f), STDERR_FILENO);
    rp_status st = fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(f);
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return st;
}

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static rp_status trail_ptr_fail(void)
{
    return trail_ptr_top(true) ? RP_OK : rp_last_status();
}

static rp_status trail_ptr_ok(void)
{
    return trail_ptr_top(false) == &trail_leaf_value ? RP_OK : RP_ERR_INVALID;
}

/*
 * At debug level each RP_CHECK / RP_TRY that an error passes through logs "file:line -> status",
 * innermost first; at the default level (info) none does; the error itself is unchanged.
 */
static void test_error_trail(void **state)
{
    (void)state;
    rp_log_level was = rp_log_get_level();
    char out[4096], want[3][96];

    rp_log_set_level(RP_LOG_DEBUG);
    rp_error_clear();
    assert_int_equal(trail_capture(trail_top, out, sizeof out), RP_ERR_SHAPE);
    assert_int_equal(count_lines(out, "trail: "), 3);
    const char *at = out;
    for (int i = 0; i < 3; i++) {
        snprintf(want[i], sizeof want[i], "DEBUG trail: test_core.c:%d -> %d (SHAPE)\n",
                 trail_at[i], RP_ERR_SHAPE);
        const char *hit = strstr(at, want[i]);
        if (!hit) fail_msg("trail line %d \"%s\" missing or out of order in:\n%s", i, want[i], out);
        at = hit + 1;
    }
    tu_assert_error_contains("the leaf failed");

    /* The success path leaves nothing. */
    assert_int_equal(trail_capture(trail_ptr_ok, out, sizeof out), RP_OK);
    assert_int_equal(count_lines(out, "trail: "), 0);

    /* A NULL passed on leaves its line too, with the status of the error that made it. */
    assert_int_equal(trail_capture(trail_ptr_fail, out, sizeof out), RP_ERR_NOMEM);
    assert_int_equal(count_lines(out, "trail: "), 1);
    snprintf(want[0], sizeof want[0], "trail: test_core.c:%d -> %d (NOMEM)\n", trail_at[0],
             RP_ERR_NOMEM);
    if (!strstr(out, want[0])) fail_msg("\"%s\" missing in:\n%s", want[0], out);

    /* At the default level the same failure logs no trail at all. */
    rp_log_set_level(RP_LOG_INFO);
    assert_int_equal(trail_capture(trail_top, out, sizeof out), RP_ERR_SHAPE);
    assert_int_equal(count_lines(out, "trail: "), 0);
    assert_string_equal(out, "");
    tu_assert_error_contains("the leaf failed");
    assert_int_equal(trail_capture(trail_ptr_fail, out, sizeof out), RP_ERR_NOMEM);
    assert_string_equal(out, "");
    rp_log_set_level(was);
}

static void test_log_prefix(void **state)
{
    (void)state;
    char host[64], want[160], got[160];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    rp_log_set_replica(-1);
    snprintf(want, sizeof want, "[%s %d]", host, (int)getpid());
    assert_int_equal(rp_log_prefix(got, sizeof got), (int)strlen(want));
    assert_string_equal(got, want);
    rp_log_set_replica(3);
    snprintf(want, sizeof want, "[%s %d r3]", host, (int)getpid());
    rp_log_prefix(got, sizeof got);
    assert_string_equal(got, want);
    rp_log_set_rank(1);
    snprintf(want, sizeof want, "[%s %d rank 1 r3]", host, (int)getpid());
    rp_log_prefix(got, sizeof got);
    assert_string_equal(got, want);
    rp_log_set_replica(-1);
    snprintf(want, sizeof want, "[%s %d rank 1]", host, (int)getpid());
    rp_log_prefix(got, sizeof got);
    assert_string_equal(got, want);
    /* Truncated to the buffer, and the length says so. */
    assert_int_equal(rp_log_prefix(got, 5), 4);
    assert_int_equal(strlen(got), 4);
    rp_log_set_rank(-1);
}

static void *count_on_one_cpu(void *arg)
{
    int *out = arg;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) return NULL;
    out[0] = rp_cpu_count();
    out[1] = rp_cpu_bound();
    return NULL;
}

/* The CPU count is what the thread may run on (taskset, Slurm, mpirun's binding), not the
 * machine's. */
static void test_cpu_count_follows_affinity(void **state)
{
    (void)state;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
    assert_int_equal(rp_cpu_count(), CPU_COUNT(&mine));
    assert_int_equal(rp_cpu_bound(), CPU_COUNT(&mine) < online);
    if (online < 2 || !CPU_ISSET(0, &mine)) skip();
    int got[2] = {-1, -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, count_on_one_cpu, got), 0);
    pthread_join(t, NULL);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 1);
}

/* ---- file helpers (src/core/file.c) ------------------------------------------------------ */

static void put_file(const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fputs("partial", f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/*
 * An atomic write first removes "<path>.tmp.<pid>.<n>" files of processes that are gone (a
 * writer killed mid-write), and keeps those of live processes, of this process, and names that
 * only look similar.
 */
static void test_write_removes_stale_temps(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("core_file"), 0);
    char path[256], name[300];
    tu_tmp_path(path, sizeof path, "out.bin");
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    long pids[3] = {(long)dead, (long)getppid(), (long)getpid()};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s.tmp.%ld.%d", path, pids[i], i);
        put_file(name);
    }
    snprintf(name, sizeof name, "%s.tmp.%ld.9.x", path, pids[0]);
    put_file(name);
    snprintf(name, sizeof name, "%s/a_dir.tmp.%ld.0", tu_tmpdir(), pids[0]);
    assert_int_equal(mkdir(name, 0700), 0);

    core_file_piece piece = {"new", 3};
    assert_int_equal(core_file_write_atomic(path, "test file", &piece, 1), RP_OK);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s.tmp.%ld.%d", path, pids[i], i);
        assert_int_equal(tu_exists(name), i != 0); /* only the dead process's is gone */
    }
    snprintf(name, sizeof name, "%s.tmp.%ld.9.x", path, pids[0]);
    assert_true(tu_exists(name));
    /* A directory of that name is never removed, and a second pass finds nothing to do. */
    char dir_path[256];
    tu_tmp_path(dir_path, sizeof dir_path, "a_dir");
    assert_int_equal(core_file_remove_stale_temps(dir_path), 0);
    snprintf(name, sizeof name, "%s/a_dir.tmp.%ld.0", tu_tmpdir(), pids[0]);
    assert_true(tu_exists(name));
    assert_int_equal(core_file_remove_stale_temps(path), 0);
    snprintf(name, sizeof name, "%s.tmp.%ld.5", path, pids[0]);
    put_file(name);
    assert_int_equal(core_file_remove_stale_temps(path), 1);
    assert_false(tu_exists(name));
    assert_int_equal(core_file_remove_stale_temps("/no/such/dir/x"), 0);
    tu_tmpdir_remove();
}

/* Only a regular file opens; anything else is refused by name without blocking. */
static void test_open_regular(void **state)
{
    (void)state;
    assert_int_equal(tu_tmpdir_create("core_open"), 0);
    char path[256], fifo[256];
    tu_tmp_path(path, sizeof path, "plain");
    tu_tmp_path(fifo, sizeof fifo, "fifo");
    put_file(path);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int fd = -2;
    assert_int_equal(core_file_open_regular(path, "test file", &fd), RP_OK);
    assert_true(fd >= 0);
    char buf[8] = {0};
    assert_int_equal(read(fd, buf, sizeof buf), 7); /* blocking again, and reads */
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    assert_int_equal(core_file_open_regular(fifo, "test file", &fd), RP_ERR_IO);
    assert_int_equal(fd, -1);
    tu_assert_error_contains("cannot read test file");
    tu_assert_error_contains(fifo);
    tu_assert_error_contains("it is a FIFO, not a regular file");
    assert_int_equal(core_file_open_regular("/dev/null", "test file", &fd), RP_ERR_IO);
    tu_assert_error_contains("it is a character device");
    assert_int_equal(core_file_open_regular(tu_tmpdir(), "test file", &fd), RP_ERR_IO);
    tu_assert_error_contains("it is a directory");
    tu_tmp_path(path, sizeof path, "absent");
    assert_int_equal(core_file_open_regular(path, "test file", &fd), RP_ERR_IO);
    tu_assert_error_contains("cannot open test file");
    tu_assert_error_contains("No such file or directory");
    tu_tmpdir_remove();
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_count_follows_affinity),
        cmocka_unit_test(test_log_prefix),
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_error_thread_local),
        cmocka_unit_test(test_error_trail),
        cmocka_unit_test(test_alloc_aligned_and_counted),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_arena_steady_state),
        cmocka_unit_test(test_arena_no_overlap),
        cmocka_unit_test(test_philox_known_answer),
        cmocka_unit_test(test_rng_thread_count_independent),
        cmocka_unit_test(test_rng_streams),
        cmocka_unit_test(test_clock_monotonic),
        cmocka_unit_test(test_write_removes_stale_temps),
        cmocka_unit_test(test_open_regular),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
