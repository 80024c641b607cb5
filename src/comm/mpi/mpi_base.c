/*
 * mpi_base.c - the MPI backend's lock and the small helpers its files share
 * (see mpi_internal.h).
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "comm/mpi/mpi_internal.h"

/*
 * MPI is initialised for one calling thread at a time (MPI_THREAD_SERIALIZED);
 * the groups of a hierarchical communicator have one caller each, so every
 * MPI call goes through this lock. It is held for a call (or a few posted
 * together), never across a wait: a group waiting for its peers never holds
 * up another group.
 */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;

/* Every MPI call of the process goes through it (exported for any other part that calls MPI
 * itself). */
void comm_mpi_lock(void)
{
    pthread_mutex_lock(&mpi_mu);
}
void comm_mpi_unlock(void)
{
    pthread_mutex_unlock(&mpi_mu);
}

void comm_mpi_mark_broken(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    if (m->broken) return;
    m->broken = true;
    m->broken_status = status;
    snprintf(m->reason, sizeof m->reason, "%.*s", (int)sizeof m->reason - 1, reason);
}

void comm_mpi_pause_briefly(unsigned polls)
{
    if (polls < 2000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/*
 * A gap between two polls of one wait much longer than a poll (a quarter of
 * the timeout) says this process itself was not running - stopped
 * (SIGSTOP), or descheduled - so a timeout is its own doing, not a peer's.
 * *stalled keeps the longest such gap (monotonic clock).
 */
void comm_mpi_note_gap(double *last, double timeout, double *stalled)
{
    double now = rp_now_s(), gap = now - *last;
    if (gap > timeout / 4 && gap > *stalled) *stalled = gap;
    *last = now;
}
