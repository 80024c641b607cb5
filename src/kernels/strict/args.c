/*
 * args.c - the strict table's check that every buffer reaching a kernel is storage from its
 * mem_alloc. A host buffer in a kernel call works on the cpu table and cannot on a device one:
 * the check finds such calls on the CPU, with the kernel and the argument named.
 */
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/strict/strict.h"
#include "replicator/core.h"

/* -1 until first asked: then RP_STRICT_ARGS's mode, for the life of the process. */
static int args_mode = -1;

kstrict_args_mode kstrict_args_get(void)
{
    int m = __atomic_load_n(&args_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *s = rp_env_get()->strict_args;
        m = !strcmp(s, "off")    ? RP_STRICT_ARGS_OFF
            : !strcmp(s, "warn") ? RP_STRICT_ARGS_WARN
                                 : RP_STRICT_ARGS_ABORT;
        __atomic_store_n(&args_mode, m, __ATOMIC_RELAXED); /* racing threads store the same */
    }
    return (kstrict_args_mode)m;
}

/* The slot and argument pairs already reported under "warn": each is said once. */
#define WARNED_MAX 256
static struct {
    pthread_mutex_t lock;
    int n;
    const char *slot[WARNED_MAX];
    char arg[WARNED_MAX][32];
} warned = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* True the first time this pair is seen (and, past WARNED_MAX pairs, every time). */
static bool first_warning(const char *slot, const char *arg)
{
    bool first = true;
    pthread_mutex_lock(&warned.lock);
    for (int i = 0; i < warned.n && first; i++)
        if (!strcmp(warned.slot[i], slot) && !strcmp(warned.arg[i], arg)) first = false;
    if (first && warned.n < WARNED_MAX) {
        warned.slot[warned.n] = slot; /* the table's string literals */
        snprintf(warned.arg[warned.n], sizeof warned.arg[0], "%s", arg);
        warned.n++;
    }
    pthread_mutex_unlock(&warned.lock);
    return first;
}

/* Says what is wrong with `arg` of `slot`; then carries on under "warn", else aborts. */
static void report(const char *slot, const char *arg, const void *p, const char *problem)
{
    kstrict_args_mode mode = kstrict_args_get();
    if (mode == RP_STRICT_ARGS_OFF) return;
    if (mode == RP_STRICT_ARGS_WARN && !first_warning(slot, arg)) return;
    fprintf(stderr, "strict kernels: %s: argument %s (%p) is %s\n", slot, arg, p, problem);
    if (mode == RP_STRICT_ARGS_WARN) return;
    fprintf(stderr, "strict kernels: the caller's stack (RP_STRICT_ARGS=warn carries on, "
                    "RP_STRICT_ARGS=0 stops checking):\n");
    fflush(stderr);
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    abort();
}

void kstrict_report_host_arg(const char *slot, const char *arg, const void *p)
{
    report(slot, arg, p, "host memory, not storage from mem_alloc");
}

void kstrict_report_storage_arg(const char *slot, const char *arg, const void *p)
{
    report(slot, arg, p, "storage, where host memory belongs (mem_copy moves storage to storage)");
}

void kstrict_args_check(const char *slot, const char *names, const void *const *ptrs, int n)
{
    for (int i = 0; i < n; i++) {
        if (!ptrs[i] || kstrict_pool_contains(ptrs[i])) continue;
        /* The i-th name of "a, b, c". */
        const char *s = names;
        for (int j = 0; j < i && s; j++) {
            s = strchr(s, ',');
            if (s) s++;
        }
        char name[32] = "?";
        if (s) {
            while (*s == ' ')
                s++;
            size_t len = strcspn(s, ", ");
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, s, len);
            name[len] = '\0';
        }
        kstrict_report_host_arg(slot, name, ptrs[i]);
    }
}
