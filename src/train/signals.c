/*
 * signals.c - the agreed stop: a signal (or any thread) asks the running
 * trainer to stop at the next step boundary; the replicas agree on it after
 * each step (loop.c), so every process stops after the same one.
 */
#include <pthread.h>
#include <signal.h>

#include "train_internal.h"

/* Plain ints with atomic builtins: lock-free, so safe from a handler as well as from threads. */
static int stop_reason; /* the request's number, 0 if none */
static int stop_armed;  /* a trainer runs: a request is taken */

void trainer_stop_arm(bool on)
{
    if (on) __atomic_store_n(&stop_reason, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stop_armed, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

int trainer_stop_reason(void)
{
    return __atomic_load_n(&stop_reason, __ATOMIC_RELAXED);
}

bool rp_trainer_request_stop(int reason)
{
    if (reason <= 0 || !__atomic_load_n(&stop_armed, __ATOMIC_SEQ_CST)) return false;
    int none = 0;
    return __atomic_compare_exchange_n(&stop_reason, &none, reason, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

/*
 * SIGINT and SIGTERM are blocked in every thread (set before the first one
 * starts, so the replicas', loaders' and OpenMP's threads inherit it) and
 * taken by this one thread with sigwait: no thread of the computation is
 * ever interrupted by a handler (an interrupted call inside an engine
 * corrupted the heap now and then). A signal that no running trainer takes
 * ends the process with its default action.
 */
static void *signal_thread(void *arg)
{
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0) continue;
        if (rp_trainer_request_stop(sig)) continue;
        signal(sig, SIG_DFL);
        pthread_sigmask(SIG_UNBLOCK, set, NULL);
        raise(sig);
    }
    return NULL;
}

rp_status rp_trainer_catch_signals(void)
{
    static sigset_t set;
    static pthread_t thread;
    static int started;
    if (__atomic_exchange_n(&started, 1, __ATOMIC_SEQ_CST)) return RP_OK;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        return RP_ERROR(RP_ERR_BACKEND, "cannot block SIGINT and SIGTERM");
    if (pthread_create(&thread, NULL, signal_thread, &set) != 0) {
        pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* the default actions, as before */
        return RP_ERROR(RP_ERR_BACKEND, "cannot start the signal thread");
    }
    pthread_detach(thread);
    return RP_OK;
}
