/*
 * test_kernels_strict.c - the strict kernel table (RP_KERNELS=strict): its kernels read and write
 * its storage and give the cpu table's results bit for bit; outside a kernel call the storage is
 * unreadable, and a host access dies with a message naming it; host memory passed to a kernel is
 * reported by slot and argument; the memory slots fill, copy, free and reuse; and threads calling
 * kernels at once never see the pool closed under them.
 *
 * The deaths run in children (this program again, in a role: see run_child), whose stderr the
 * parent reads through a pipe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "kernels/kernels.h"
#include "kernels/strict/strict.h"

static const kernels_table *strict(void)
{
    return kernels_strict();
}

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Storage holding host[0, n). */
static float *upload(const float *host, int64_t n)
{
    float *s = strict()->mem_alloc((size_t)n * sizeof *s);
    assert_non_null(s);
    strict()->mem_upload(s, host, (size_t)n * sizeof *s);
    return s;
}

static void release(void *s, size_t bytes)
{
    strict()->mem_free(s, bytes);
}

/*
 * Whether the host can read 16 bytes at p right now, asked of the kernel rather than by touching
 * them: write() from an unreadable buffer fails with EFAULT instead of faulting.
 */
static bool host_readable(const void *p)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    ssize_t w = write(fds[1], p, 16);
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    if (w == 16) return true;
    assert_int_equal(w, -1);
    assert_int_equal(err, EFAULT);
    return false;
}

/* Every test leaves the pool empty and closed: the next one starts from a known layout. */
static void assert_pool_idle(void)
{
    kstrict_pool_stats s = kstrict_pool_get_stats();
    assert_int_equal(s.blocks, 0);
    assert_int_equal(s.live, 0);
    assert_int_equal(s.open_count, 0);
}

/* ---- the table ---- */

/*
 * No slot is NULL and none is the cpu table's own function: every one is a wrapper. The struct
 * is `name`, `host_storage` and then function pointers only, so the slots can be walked as an
 * array of them.
 */
static void test_every_slot_wrapped(void **state)
{
    (void)state;
    typedef void (*slot_fn)(void);
    /* Its storage is not host memory: the layers above stage through the memory slots. */
    assert_false(strict()->host_storage);
    assert_true(kernels_cpu()->host_storage);
    /* `name`, the host_storage flag, then the slots: gemm starts the first pointer-aligned
       word after the flag. */
    assert_int_equal(offsetof(kernels_table, host_storage), sizeof(const char *));
    assert_int_equal(offsetof(kernels_table, gemm), 2 * sizeof(slot_fn));
    size_t span = sizeof(kernels_table) - offsetof(kernels_table, gemm);
    assert_int_equal(span % sizeof(slot_fn), 0);
    size_t nslots = span / sizeof(slot_fn);
    assert_true(nslots > 60); /* kernels.h has ~70 slots: the walk sees them all */
    const char *s = (const char *)strict() + offsetof(kernels_table, gemm);
    const char *c = (const char *)kernels_cpu() + offsetof(kernels_table, gemm);
    for (size_t i = 0; i < nslots; i++) {
        slot_fn fs, fc;
        memcpy(&fs, s + i * sizeof fs, sizeof fs);
        memcpy(&fc, c + i * sizeof fc, sizeof fc);
        if (!fs) fail_msg("strict table: slot %zu (after name) is NULL", i);
        if (fs == fc) fail_msg("strict table: slot %zu is the cpu table's, not a wrapper", i);
    }
    assert_string_equal(strict()->name, "strict");
    assert_string_equal(strict()->bf16_path(), kernels_cpu()->bf16_path());
    (void)strict()->cache_bytes();
    strict()->mem_sync();
    kstrict_pool_stats st = kstrict_pool_get_stats();
    assert_non_null(st.base);
    assert_true(st.reserved >= ((size_t)64 << 20));
    assert_pool_idle();
}

/* ---- (a) kernels read and write storage, with the cpu table's results ---- */

static void test_storage_in_kernels(void **state)
{
    (void)state;
    enum { N = 1000 };
    float a[N], b[N], got[N];
    tu_fill(a, N, 1, -2, 2);
    tu_fill(b, N, 2, -2, 2);
    float *sa = upload(a, N), *sb = upload(b, N);
    assert_false(host_readable(sa)); /* closed between calls */
    strict()->add_inplace(sa, sb, N);
    assert_false(host_readable(sa));
    strict()->mem_download(got, sa, sizeof got);
    for (int i = 0; i < N; i++)
        if (got[i] != a[i] + b[i])
            fail_msg("add_inplace on storage: element %d is %.9g, want %.9g", i, (double)got[i],
                     (double)(a[i] + b[i]));
    double sum = strict()->sum(sb, N);
    assert_true(sum == kernels_cpu()->sum(b, N));
    release(sa, sizeof a);
    release(sb, sizeof b);
    assert_pool_idle();
}

/* Page-aligned host copies, as storage is, so that alignment cannot change the cpu's path. */
static float *host_aligned(int64_t n)
{
    size_t bytes = ((size_t)n * sizeof(float) + page_size() - 1) / page_size() * page_size();
    float *p = aligned_alloc(page_size(), bytes);
    assert_non_null(p);
    return p;
}

static void test_gemm_matches_cpu(void **state)
{
    (void)state;
    static const struct {
        bool ta, tb;
        int m, n, k;
        float beta;
    } cases[] = {
        {false, false, 7, 5, 3, 0}, {true, false, 33, 17, 65, 1}, {false, true, 64, 96, 128, 0.5f}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
        bool ta = cases[ci].ta, tb = cases[ci].tb;
        int lda = ta ? m : k, ldb = tb ? k : n;
        float *a = host_aligned((int64_t)m * k), *b = host_aligned((int64_t)k * n),
              *c = host_aligned((int64_t)m * n), *got = host_aligned((int64_t)m * n);
        tu_fill(a, (int64_t)m * k, 10 + ci, -1, 1);
        tu_fill(b, (int64_t)k * n, 20 + ci, -1, 1);
        tu_fill(c, (int64_t)m * n, 30 + ci, -1, 1);
        float *sa = upload(a, (int64_t)m * k), *sb = upload(b, (int64_t)k * n),
              *sc = upload(c, (int64_t)m * n);
        strict()->gemm(ta, tb, m, n, k, 1.25f, sa, lda, sb, ldb, cases[ci].beta, sc, n);
        kernels_cpu()->gemm(ta, tb, m, n, k, 1.25f, a, lda, b, ldb, cases[ci].beta, c, n);
        strict()->mem_download(got, sc, (size_t)m * n * sizeof *got);
        if (memcmp(got, c, (size_t)m * n * sizeof *got) != 0)
            fail_msg("gemm case %zu: strict differs from cpu (largest gap %.3g)", ci,
                     tu_max_rel_diff(got, c, (int64_t)m * n));
        release(sa, (size_t)m * k * 4);
        release(sb, (size_t)k * n * 4);
        release(sc, (size_t)m * n * 4);
        free(a);
        free(b);
        free(c);
        free(got);
    }
    assert_pool_idle();
}

/* A convolution and a bf16 batch norm: the latter's wrapper must hand the cpu table to the cpu
 * kernel, whose f32 kernels then run on host scratch chunks without being checked. */
static void test_conv_and_bn_bf16_match_cpu(void **state)
{
    (void)state;
    kernels_conv_desc d;
    assert_int_equal(kernels_conv_desc_init(&d, 2, 8, 8, 16, 16, 3, 3, 1, 1), RP_OK);
    int64_t nx = 2 * 8 * 8 * 16, nw = 16 * 3 * 3 * 16, ny = (int64_t)2 * d.oh * d.ow * 16;
    float *x = host_aligned(nx), *w = host_aligned(nw), *bias = host_aligned(16),
          *y = host_aligned(ny), *got = host_aligned(ny);
    tu_fill(x, nx, 41, -1, 1);
    tu_fill(w, nw, 42, -1, 1);
    tu_fill(bias, 16, 43, -1, 1);
    float *sx = upload(x, nx), *sw = upload(w, nw), *sb = upload(bias, 16);
    float *sy = strict()->mem_alloc((size_t)ny * 4);
    assert_int_equal(strict()->conv2d_fwd(sy, sx, sw, sb, &d), RP_OK);
    assert_int_equal(kernels_cpu()->conv2d_fwd(y, x, w, bias, &d), RP_OK);
    strict()->mem_download(got, sy, (size_t)ny * 4);
    assert_memory_equal(got, y, (size_t)ny * 4);

    enum { M = 300, C = 8 };
    rp_bf16 xb[M * C];
    float xf[M * C];
    tu_fill(xf, M * C, 44, -3, 3);
    rp_bf16_from_f32_array(xb, xf, M * C);
    rp_bf16 *sxb = strict()->mem_alloc(sizeof xb);
    strict()->mem_upload(sxb, xb, sizeof xb);
    double *ssums = strict()->mem_alloc(2 * C * sizeof(double));
    double sums[2 * C], want[2 * C];
    strict()->bn_stats_bf16(strict(), ssums, sxb, M, C);
    kernels_cpu()->bn_stats_bf16(kernels_cpu(), want, xb, M, C);
    strict()->mem_download(sums, ssums, sizeof sums);
    assert_memory_equal(sums, want, sizeof sums);

    release(sx, (size_t)nx * 4);
    release(sw, (size_t)nw * 4);
    release(sb, 16 * 4);
    release(sy, (size_t)ny * 4);
    release(sxb, sizeof xb);
    release(ssums, sizeof sums);
    free(x);
    free(w);
    free(bias);
    free(y);
    free(got);
    assert_pool_idle();
}

/* ---- children: this program run again, in a role ---- */

/*
 * The deaths run in a child: this program executed afresh with RP_STRICT_TEST_ROLE naming what to
 * do (main() runs the role instead of the tests). A fresh process starts with the table's own
 * fault handler, not cmocka's (which replaces SIGSEGV's handler around each test), and reads
 * RP_STRICT_ARGS as a program would. A role prints "addr <p>" for the address the parent should
 * find named, then does its deed; surviving it, the child exits 0.
 */
enum { HOST_N = 64 };
static float host_buf[HOST_N];
static rp_bf16 host_bf16[HOST_N];

static void say_addr(const void *p)
{
    fprintf(stderr, "addr %p\n", p);
}

static void role_read(void)
{
    float host[4] = {1, 2, 3, 4};
    float *s = upload(host, 4);
    say_addr(s + 1);
    float v = ((const volatile float *)s)[1];
    (void)v;
}

static void role_write(void)
{
    float host[4] = {1, 2, 3, 4};
    float *s = upload(host, 4);
    say_addr(s + 1);
    ((volatile float *)s)[1] = 0.0f;
}

static void role_past_top(void)
{
    float host[4] = {1, 2, 3, 4};
    (void)upload(host, 4);
    kstrict_pool_stats st = kstrict_pool_get_stats();
    const char *p = (const char *)st.base + st.top + 100;
    say_addr(p);
    char v = *(const volatile char *)p;
    (void)v;
}

static void role_low_address(void)
{
    (void)strict();             /* the handler is installed */
    volatile uintptr_t low = 8; /* the first page is never mapped */
    int v = *(volatile int *)low;
    (void)v;
}

static float *storage_zeros(void)
{
    float *s = strict()->mem_alloc(HOST_N * sizeof(float));
    assert_non_null(s);
    strict()->mem_fill(s, 0, HOST_N * sizeof(float));
    return s;
}

static void role_add_host_x(void)
{
    float *s = storage_zeros();
    say_addr(host_buf);
    strict()->add_inplace(s, host_buf, HOST_N);
}

static void role_gemm_host_c(void)
{
    float *s = storage_zeros();
    say_addr(host_buf);
    strict()->gemm(false, false, 4, 4, 2, 1.0f, s, 2, s, 4, 0.0f, host_buf, 4);
}

static void role_upload_to_host(void)
{
    say_addr(host_buf);
    strict()->mem_upload(host_buf, host_buf + 1, 4);
}

static void role_bn_bf16_host_x(void)
{
    float *s = storage_zeros();
    say_addr(host_bf16);
    strict()->bn_stats_bf16(strict(), (double *)s, host_bf16, 4, 4);
}

static void role_download_into_storage(void)
{
    float *s = storage_zeros();
    say_addr(s);
    strict()->mem_download(s, s + 1, 4);
}

/* Host x added twice (under RP_STRICT_ARGS=warn or 0); exits 3 unless the kernels ran. */
static void role_add_host_twice(void)
{
    float *s = storage_zeros();
    for (int i = 0; i < HOST_N; i++)
        host_buf[i] = (float)i;
    say_addr(host_buf);
    strict()->add_inplace(s, host_buf, HOST_N);
    strict()->add_inplace(s, host_buf, HOST_N);
    float got[HOST_N];
    strict()->mem_download(got, s, sizeof got);
    for (int i = 0; i < HOST_N; i++)
        if (got[i] != 2.0f * (float)i) _exit(3);
}

static void role_free_twice(void)
{
    void *p = strict()->mem_alloc(100);
    say_addr(p);
    strict()->mem_free(p, 100);
    strict()->mem_free(p, 100);
}

static void role_free_wrong_size(void)
{
    void *p = strict()->mem_alloc(100);
    say_addr(p);
    strict()->mem_free(p, 10 * page_size());
}

static const struct {
    const char *name;
    void (*run)(void);
} roles[] = {
    {"read", role_read},
    {"write", role_write},
    {"past_top", role_past_top},
    {"low_address", role_low_address},
    {"add_host_x", role_add_host_x},
    {"gemm_host_c", role_gemm_host_c},
    {"upload_to_host", role_upload_to_host},
    {"bn_bf16_host_x", role_bn_bf16_host_x},
    {"download_into_storage", role_download_into_storage},
    {"add_host_twice", role_add_host_twice},
    {"free_twice", role_free_twice},
    {"free_wrong_size", role_free_wrong_size},
};

static int run_role(const char *name)
{
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (!strcmp(roles[i].name, name)) {
            roles[i].run();
            return 0;
        }
    fprintf(stderr, "test_kernels_strict: no role %s\n", name);
    return 2;
}

typedef struct child {
    int status;
    char err[16384]; /* its stderr, NUL-terminated (the rest dropped) */
    char addr[32];   /* what it printed after "addr " */
} child;

/*
 * Runs this program in `role`, with RP_STRICT_ARGS set to strict_args (NULL: unset), and waits
 * for it.
 */
static void run_child(child *c, const char *role, const char *strict_args)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof *envp), role_var[128], args_var[64];
    assert_non_null(envp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "RP_STRICT_", 10) != 0) envp[m++] = environ[i];
    snprintf(role_var, sizeof role_var, "RP_STRICT_TEST_ROLE=%s", role);
    envp[m++] = role_var;
    if (strict_args) {
        snprintf(args_var, sizeof args_var, "RP_STRICT_ARGS=%s", strict_args);
        envp[m++] = args_var;
    }
    envp[m] = NULL;
    char *argv[] = {"test_kernels_strict", NULL};

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    free(envp);
    close(fds[1]);
    size_t got = 0;
    for (;;) {
        char drop[4096];
        bool keep = got < sizeof c->err - 1;
        char *to = keep ? c->err + got : drop;
        size_t room = keep ? sizeof c->err - 1 - got : sizeof drop;
        ssize_t r = read(fds[0], to, room);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (keep) got += (size_t)r;
    }
    c->err[got] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &c->status, 0), pid);
    c->addr[0] = '\0';
    const char *a = strstr(c->err, "addr ");
    if (a) sscanf(a + 5, "%31s", c->addr);
}

static void assert_died_of(const child *c, int sig)
{
    if (!WIFSIGNALED(c->status) || WTERMSIG(c->status) != sig)
        fail_msg("the child should have died of signal %d; status %#x, stderr:\n%s", sig, c->status,
                 c->err);
}

/* stderr holds printf(fmt, the child's address). */
static void assert_said(const child *c, const char *fmt)
{
    char want[512];
    assert_true(c->addr[0] != '\0');
    snprintf(want, sizeof want, fmt, c->addr);
    if (!strstr(c->err, want)) fail_msg("stderr lacks \"%s\":\n%s", want, c->err);
}

/* ---- (b) a host access to storage outside a kernel call faults, named ---- */

static void test_host_access_faults(void **state)
{
    (void)state;
    child *c = malloc(sizeof *c);
    assert_non_null(c);
    run_child(c, "read", NULL);
    assert_died_of(c, SIGSEGV);
    assert_said(c, "strict kernels: host code touched tensor storage at %s outside a kernel call");
    assert_said(c, "%s outside a kernel call (a read or write a device backend could not serve); "
                   "backtrace:\n");
    /* The stack follows: the handler, the signal frame, the reader and its callers. */
    int frames = 0;
    for (const char *f = strstr(c->err, "backtrace:"); (f = strstr(f, ")[0x")); f++)
        frames++;
    assert_true(frames >= 3);

    run_child(c, "write", NULL);
    assert_died_of(c, SIGSEGV);
    assert_said(c, "strict kernels: host code touched tensor storage at %s outside a kernel call");

    /* Past the last block: not storage, and said so. */
    run_child(c, "past_top", NULL);
    assert_died_of(c, SIGSEGV);
    assert_said(c, "strict kernels: access at %s past the last block of storage (an overrun)");

    /* A fault elsewhere is not the pool's: no message, and the process still dies of it (or of
     * the handler that was there before: a sanitizer reports it and exits). */
    run_child(c, "low_address", NULL);
    assert_false(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0);
    if (strstr(c->err, "strict kernels"))
        fail_msg("a fault outside the pool was named:\n%s", c->err);
    free(c);
}

/* ---- (c) host memory passed to a kernel is reported ---- */

static void test_host_argument_reported(void **state)
{
    (void)state;
    static const struct {
        const char *role, *want;
    } cases[] = {
        {"add_host_x", "strict kernels: add_inplace: argument x (%s) is host memory, not storage "
                       "from mem_alloc"},
        {"gemm_host_c", "strict kernels: gemm: argument c (%s) is host memory"},
        {"upload_to_host", "strict kernels: mem_upload: argument dst (%s) is host memory"},
        {"bn_bf16_host_x", "strict kernels: bn_stats_bf16: argument x (%s) is host memory"},
        {"download_into_storage", "strict kernels: mem_download: argument host (%s) is storage"},
    };
    child *c = malloc(sizeof *c);
    assert_non_null(c);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_child(c, cases[i].role, NULL);
        assert_died_of(c, SIGABRT);
        assert_said(c, cases[i].want);
        assert_non_null(strstr(c->err, "the caller's stack"));
    }
    free(c);
}

/* RP_STRICT_ARGS=warn says it once per slot and argument and runs the kernel; 0 says nothing. */
static void test_warn_and_off(void **state)
{
    (void)state;
    const char *want = "strict kernels: add_inplace: argument x (%s) is host memory";
    child *c = malloc(sizeof *c);
    assert_non_null(c);
    run_child(c, "add_host_twice", "warn");
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0)
        fail_msg("under warn the child should finish; status %#x:\n%s", c->status, c->err);
    assert_said(c, want);
    const char *first = strstr(c->err, "strict kernels:");
    assert_null(strstr(first + 1, "strict kernels:")); /* once */

    run_child(c, "add_host_twice", "0");
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0)
        fail_msg("with checks off the child should finish; status %#x:\n%s", c->status, c->err);
    assert_null(strstr(c->err, "strict kernels"));

    /* The default aborts (the same role, RP_STRICT_ARGS unset and then "1"). */
    run_child(c, "add_host_twice", NULL);
    assert_died_of(c, SIGABRT);
    assert_said(c, want);
    run_child(c, "add_host_twice", "1");
    assert_died_of(c, SIGABRT);
    free(c);
}

/* ---- (d) fill, copy, free and reuse ---- */

static void test_fill_copy(void **state)
{
    (void)state;
    enum { N = 3000 };
    uint32_t words[N];
    float *s = strict()->mem_alloc(N * 4), *t = strict()->mem_alloc(N * 4);
    strict()->mem_fill(s, 0x7fc00000u, N * 4);
    strict()->mem_download(words, s, sizeof words);
    for (int i = 0; i < N; i++)
        assert_int_equal(words[i], 0x7fc00000u);
    float one_half = 1.5f;
    uint32_t bits;
    memcpy(&bits, &one_half, 4);
    strict()->mem_fill(s, bits, 100 * 4); /* a prefix only */
    strict()->mem_fill(t, 0, N * 4);
    strict()->mem_copy(t + 10, s + 50, 200 * 4);
    strict()->mem_download(words, t, sizeof words);
    for (int i = 0; i < N; i++) {
        uint32_t want = i < 10 || i >= 210 ? 0 : i < 60 ? bits : 0x7fc00000u;
        if (words[i] != want) fail_msg("word %d is %#x, want %#x", i, words[i], want);
    }
    release(s, N * 4);
    release(t, N * 4);
    assert_pool_idle();
}

static void test_free_and_reuse(void **state)
{
    (void)state;
    assert_pool_idle();
    size_t pg = page_size();
    kstrict_pool_stats st = kstrict_pool_get_stats();
    char *base = st.base;
    /* The pool is one free run (or nothing): blocks are handed out from the start. */
    char *a = strict()->mem_alloc(3 * pg - 5), *b = strict()->mem_alloc(1),
         *c = strict()->mem_alloc(pg);
    assert_ptr_equal(a, base);
    assert_ptr_equal(b, base + 3 * pg);
    assert_ptr_equal(c, base + 4 * pg);
    st = kstrict_pool_get_stats();
    assert_int_equal(st.blocks, 3);
    assert_int_equal(st.live, 5 * pg);
    assert_true(st.top >= 5 * pg);

    strict()->mem_free(a, 3 * pg - 5);
    char *d = strict()->mem_alloc(2 * pg); /* first fit: a's hole, split */
    char *e = strict()->mem_alloc(pg + 1); /* does not fit the rest of the hole (1 page) */
    char *f = strict()->mem_alloc(pg);     /* fits it */
    assert_ptr_equal(d, base);
    assert_true(e >= base + 5 * pg);
    assert_ptr_equal(f, base + 2 * pg);
    /* Storage reused still works in kernels. */
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, got[8];
    strict()->mem_upload(d, ones, sizeof ones);
    strict()->add_inplace((float *)d, (float *)d, 8);
    strict()->mem_download(got, d, sizeof got);
    for (int i = 0; i < 8; i++)
        assert_true(got[i] == 2.0f);

    /* Freed neighbours merge: after b, d and f go back, a 4-page block fits at the start. */
    strict()->mem_free(b, 1);
    strict()->mem_free(f, pg);
    strict()->mem_free(d, 2 * pg);
    char *g = strict()->mem_alloc(4 * pg);
    assert_ptr_equal(g, base);
    strict()->mem_free(g, 4 * pg);
    strict()->mem_free(c, pg);
    strict()->mem_free(e, pg + 1);
    strict()->mem_free(NULL, 0);
    assert_pool_idle();
    /* Everything merged back: the whole top is one run again. */
    char *h = strict()->mem_alloc(kstrict_pool_get_stats().top);
    assert_ptr_equal(h, base);
    strict()->mem_free(h, kstrict_pool_get_stats().top);
    assert_pool_idle();
}

static void test_free_misuse_dies(void **state)
{
    (void)state;
    child *c = malloc(sizeof *c);
    assert_non_null(c);
    run_child(c, "free_twice", NULL);
    assert_died_of(c, SIGABRT);
    assert_said(c, "strict kernels: mem_free of a pointer that is not a live block (freed twice, "
                   "or inside a block) (%s");
    run_child(c, "free_wrong_size", NULL);
    assert_died_of(c, SIGABRT);
    assert_said(c, "strict kernels: mem_free with another size than mem_alloc's (bytes given, "
                   "block's pages) (%s");
    free(c);
}

/* A block allocated while a kernel call holds the pool open is opened too, and closed after. */
static void test_alloc_while_open(void **state)
{
    (void)state;
    float *a = strict()->mem_alloc(64);
    kstrict_pool_open();                              /* as another thread's kernel call would */
    float *b = strict()->mem_alloc(64 * page_size()); /* new pages, past the old top */
    assert_true(host_readable(b + 10));
    strict()->mem_fill(b, 0, 64 * page_size());
    kstrict_pool_close();
    assert_false(host_readable(b + 10));
    assert_false(host_readable(a));
    release(a, 64);
    release(b, 64 * page_size());
    assert_pool_idle();
}

/* ---- (e) threads ---- */

typedef struct worker {
    int seed;
    int64_t bad; /* -1, or the first iteration whose result was wrong */
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    enum { N = 2048, ITERS = 400 };
    rp_kernels_set_threads(1);
    float x[N], got[N];
    tu_fill(x, N, (uint64_t)w->seed, -1, 1);
    w->bad = -1;
    for (int it = 0; it < ITERS && w->bad < 0; it++) {
        /* A fresh block each time (the pool grows and reuses under the other thread's calls). */
        float *s = strict()->mem_alloc(N * sizeof(float) * (size_t)(1 + it % 3));
        float *t = strict()->mem_alloc(N * sizeof(float));
        strict()->mem_upload(s, x, sizeof x);
        strict()->mem_copy(t, s, sizeof x);
        strict()->scale_inplace(s, 2.0f, N);
        strict()->add_inplace(s, t, N); /* 3x */
        double sum = strict()->sum(s, N);
        strict()->mem_download(got, s, sizeof got);
        for (int i = 0; i < N; i++)
            if (got[i] != 2.0f * x[i] + x[i]) w->bad = it;
        if (sum != kernels_cpu()->sum(got, N)) w->bad = it;
        strict()->mem_free(t, N * sizeof(float));
        strict()->mem_free(s, N * sizeof(float) * (size_t)(1 + it % 3));
    }
    return NULL;
}

static void test_threads_share_the_pool(void **state)
{
    (void)state;
    enum { T = 4 };
    pthread_t th[T];
    worker w[T];
    for (int i = 0; i < T; i++) {
        w[i].seed = 100 + i;
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        if (w[i].bad >= 0)
            fail_msg("thread %d: wrong result at iteration %lld", i, (long long)w[i].bad);
    }
    assert_pool_idle();
}

int main(int argc, char **argv)
{
    const char *role = getenv("RP_STRICT_TEST_ROLE");
    if (role) return run_role(role);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_slot_wrapped),
        cmocka_unit_test(test_storage_in_kernels),
        cmocka_unit_test(test_gemm_matches_cpu),
        cmocka_unit_test(test_conv_and_bn_bf16_match_cpu),
        cmocka_unit_test(test_host_access_faults),
        cmocka_unit_test(test_host_argument_reported),
        cmocka_unit_test(test_warn_and_off),
        cmocka_unit_test(test_fill_copy),
        cmocka_unit_test(test_free_and_reuse),
        cmocka_unit_test(test_free_misuse_dies),
        cmocka_unit_test(test_alloc_while_open),
        cmocka_unit_test(test_threads_share_the_pool),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
