/*
 * log.c - one line per event on stderr, prefixed with host, pid, MPI rank
 * (under MPI) and replica.
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "replicator/core.h"

static int log_level = -1; /* -1: not yet read from the environment */
static _Thread_local int log_replica = -1;
static int log_rank = -1; /* this process's MPI rank, once MPI is running */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_host[64];
static pthread_once_t log_host_once = PTHREAD_ONCE_INIT;

static void read_host(void)
{
    if (gethostname(log_host, sizeof log_host) != 0) snprintf(log_host, sizeof log_host, "?");
    log_host[sizeof log_host - 1] = '\0';
}

void rp_log_set_level(rp_log_level level)
{
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

rp_log_level rp_log_get_level(void)
{
    int level = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = rp_env_get()->log_level;
        __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
    }
    return (rp_log_level)level;
}

void rp_log_set_replica(int replica)
{
    log_replica = replica;
}

void rp_log_set_rank(int rank)
{
    __atomic_store_n(&log_rank, rank, __ATOMIC_RELAXED);
}

int rp_log_prefix(char *buf, size_t size)
{
    pthread_once(&log_host_once, read_host);
    int rank = __atomic_load_n(&log_rank, __ATOMIC_RELAXED), n;
    if (rank >= 0 && log_replica >= 0)
        n = snprintf(buf, size, "[%s %d rank %d r%d]", log_host, (int)getpid(), rank, log_replica);
    else if (rank >= 0)
        n = snprintf(buf, size, "[%s %d rank %d]", log_host, (int)getpid(), rank);
    else if (log_replica >= 0)
        n = snprintf(buf, size, "[%s %d r%d]", log_host, (int)getpid(), log_replica);
    else
        n = snprintf(buf, size, "[%s %d]", log_host, (int)getpid());
    return n < 0 ? 0 : (size_t)n >= size ? (int)size - 1 : n;
}

void rp_log(rp_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (level < rp_log_get_level() || level >= RP_LOG_OFF) return;

    char line[2048];
    int len = rp_log_prefix(line, sizeof line);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s ", names[level]);
    if (len < 0 || (size_t)len >= sizeof line) len = 0;
    va_list ap;
    va_start(ap, fmt);
    int body = vsnprintf(line + len, sizeof line - (size_t)len - 1, fmt, ap);
    va_end(ap);
    if (body < 0) body = 0;
    size_t end = (size_t)len + (size_t)body;
    if (end > sizeof line - 2) end = sizeof line - 2;
    line[end] = '\n';
    line[end + 1] = '\0';

    /* One fputs under a lock: lines from replica threads never interleave. */
    pthread_mutex_lock(&log_lock);
    fputs(line, stderr);
    pthread_mutex_unlock(&log_lock);
}
