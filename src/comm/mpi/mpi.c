/*
 * mpi.c - the MPI communicator: one member per process (OpenMPI). This
 * file initialises MPI, creates, splits and destroys communicators, and has
 * the backend's table; the checked collectives are in mpi_coll.c (the call
 * check is described there), point-to-point and the notices in mpi_p2p.c,
 * and what they share in mpi_internal.h.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_internal.h"

static const comm_ops mpi_ops;

static rp_status mpi_isend(rp_comm *c, const comm_p2p_desc *d, const void *buf,
                           rp_comm_request **req)
{
    return comm_mpi_isend(c, d, buf, d->peer, 0, 0, req, c);
}

static rp_status mpi_irecv(rp_comm *c, const comm_p2p_desc *d, void *buf, rp_comm_request **req)
{
    return comm_mpi_irecv(c, d, buf, d->peer == RP_ANY_SOURCE ? MPI_ANY_SOURCE : d->peer,
                          d->peer == RP_ANY_SOURCE ? -1 : 0, 0, req, c);
}

static rp_status mpi_wait(rp_comm_request *req, double deadline)
{
    return comm_mpi_wait(req->backend, req, deadline);
}
static rp_status mpi_test(rp_comm_request *req, bool *done)
{
    return comm_mpi_test(req->backend, req, done);
}

static rp_status mpi_probe(rp_comm *c, int peer, int tag, bool *ready, comm_p2p_desc *found)
{
    return comm_mpi_probe(c, peer == RP_ANY_SOURCE ? MPI_ANY_SOURCE : peer,
                          peer == RP_ANY_SOURCE ? -1 : 0, 0, tag, ready, found);
}

/*
 * A failed step: tell every peer, so that one waiting for this rank in a
 * collective fails at once (it receives this notice where it expects the
 * rank's next call) instead of at the timeout. A rank that simply returned
 * sends nothing: its peers' next call is its next call.
 */
static void mpi_leave(rp_comm *c, rp_status status, const char *reason)
{
    mpi_impl *m = M(c);
    if (status == RP_OK || m->broken) return;
    comm_coll_desc notice = {.kind = RP_COLL_LEFT, .op = (int)status, .seq = c->seq};
    /* The reason goes first (same source, same communicator: it arrives before the call notice). */
    char why[NOTICE_MAX + 2 * sizeof(int)];
    int head[2] = {(int)status, 0};
    memcpy(why, head, sizeof head);
    snprintf(why + sizeof head, NOTICE_MAX, "%s", reason);
    int whylen = (int)(sizeof head + strlen(why + sizeof head) + 1);
    int k = 0;
    lock();
    for (int q = 0; q < c->size; q++)
        if (q != c->rank) MPI_Isend(why, whylen, MPI_BYTE, q, TAG_LEFT, m->comm, &m->reqs[k++]);
    for (int q = 0; q < c->size; q++)
        if (q != c->rank)
            MPI_Isend(&notice, (int)sizeof notice, MPI_BYTE, q, TAG_CALL, m->comm, &m->reqs[k++]);
    unlock();
    /* The notices are small (sent eagerly); a dead peer must not hold this rank up for long. */
    if (comm_mpi_poll_all(c, k, m->reqs, rp_now_s() + 2.0, NULL, "leave notice") != RP_OK) {
        lock();
        for (int i = 0; i < k; i++)
            if (m->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&m->reqs[i]);
        unlock();
    }
    comm_mpi_mark_broken(c, status, "this rank's step failed");
}
static void mpi_rejoin(rp_comm *c)
{
    (void)c;
}
static bool mpi_broken(const rp_comm *c)
{
    return M(c)->broken;
}

static void mpi_fail(rp_comm *c, rp_status status, const char *reason)
{
    comm_mpi_mark_broken(c, status, reason);
}

static void mpi_destroy(rp_comm *c)
{
    mpi_impl *m = M(c);
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* The MPI communicators go to the closing list, freed once every peer has closed too. */
    if (!finalized) comm_mpi_close(c);
    comm_mpi_p2p_release(m);
    if (!finalized && m->notice_reqs) {
        lock();
        for (int q = 0; q < c->size; q++)
            if (m->notice_reqs[q] != MPI_REQUEST_NULL) MPI_Request_free(&m->notice_reqs[q]);
        unlock();
    }
    free(m->notice_reqs);
    free(m->left);
    free(m->early);
    free(m->early_ok);
    free(m->from);
    free(m->missing);
    if (!finalized && m->comm != MPI_COMM_NULL) {
        lock();
        MPI_Comm_free(&m->comm);
        unlock();
    }
    free(m->hosts);
    free(m->calls);
    free(m->reqs);
    free(m->blocks);
    free(m->scratch);
    free(m->xfer);
    free(m);
    free(c->ids);
    free(c);
}

/* A handle on an existing MPI communicator (taken over); ids of the ranks for messages. */
static rp_status wrap(rp_comm **out, MPI_Comm comm, const int *ids, double timeout)
{
    int rank, size;
    lock();
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    unlock();
    rp_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (c) c->ids = malloc((size_t)size * sizeof(int));
    if (m) {
        m->hosts = calloc((size_t)size, HOST_MAX);
        m->calls = calloc((size_t)size, sizeof(comm_coll_desc));
        m->reqs = calloc(2 * (size_t)size, sizeof(MPI_Request));
        m->blocks = calloc((size_t)size, sizeof(void *));
        m->left = calloc((size_t)size, sizeof *m->left);
        m->early = calloc((size_t)size, sizeof *m->early);
        m->early_ok = calloc((size_t)size, sizeof *m->early_ok);
        m->from = calloc(2 * (size_t)size, sizeof *m->from);
        m->missing = calloc((size_t)size, sizeof *m->missing);
        m->notice_reqs = malloc((size_t)size * sizeof *m->notice_reqs);
        for (int q = 0; m->notice_reqs && q < size; q++)
            m->notice_reqs[q] = MPI_REQUEST_NULL;
    }
    if (!c || !m || !c->ids || !m->hosts || !m->calls || !m->reqs || !m->blocks || !m->left ||
        !m->early || !m->early_ok || !m->from || !m->missing || !m->notice_reqs) {
        if (m) {
            free(m->notice_reqs);
            free(m->missing);
            free(m->early);
            free(m->early_ok);
            free(m->from);
            free(m->left);
            free(m->blocks);
            free(m->hosts);
            free(m->calls);
            free(m->reqs);
        }
        if (c) free(c->ids);
        free(m);
        free(c);
        lock();
        MPI_Comm_free(&comm);
        unlock();
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate an MPI communicator of %d ranks", size);
    }
    m->comm = comm;
    char host[HOST_MAX] = "";
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    lock();
    MPI_Get_processor_name(name, &len);
    memcpy(host, name, (size_t)(len < HOST_MAX - 1 ? len : HOST_MAX - 1));
    MPI_Allgather(host, HOST_MAX, MPI_CHAR, m->hosts, HOST_MAX, MPI_CHAR, comm);
    unlock();
    for (int q = 0; q < size; q++)
        c->ids[q] = ids ? ids[q] : q;
    c->ops = &mpi_ops;
    c->rank = rank;
    c->size = size;
    c->timeout = timeout;
    c->impl = m;
    rp_status status = comm_mpi_p2p_setup(c, 1, NULL, NULL);
    if (status != RP_OK) {
        mpi_destroy(c);
        return status;
    }
    *out = c;
    return RP_OK;
}

static void finalize_at_exit(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    comm_mpi_reap(true);
    MPI_Finalize();
}

void rp_comm_mpi_abort(int code)
{
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
}

bool rp_comm_mpi_launched(void)
{
    return rp_env_get()->mpi_launched;
}

/*
 * MPI for one calling thread at a time (MPI_THREAD_SERIALIZED: every call goes
 * through the lock above), finalized at exit. Whoever needs MPI first (a
 * communicator, the parameter servers' group) initialises it here.
 */
rp_status comm_mpi_ensure_init(void)
{
    rp_status status = RP_OK;
    lock();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            status = RP_ERROR(RP_ERR_BACKEND, "MPI_Init_thread failed");
        else
            atexit(finalize_at_exit);
    }
    unlock();
    return status;
}

rp_status rp_comm_mpi_create(rp_comm **out, double timeout_s)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "comm is NULL");
    if (!(timeout_s > 0)) return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be > 0", timeout_s);
    RP_CHECK(comm_mpi_ensure_init());
    comm_mpi_reap(false); /* communicators whose peers have all closed since: their ids are free */
    MPI_Comm comm;
    int world_rank = 0;
    lock();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    unlock();
    if (rc != MPI_SUCCESS) return RP_ERROR(RP_ERR_BACKEND, "MPI_Comm_dup(MPI_COMM_WORLD) failed");
    rp_log_set_rank(world_rank);
    return wrap(out, comm, NULL, timeout_s);
}

/* Split: agree on the call first (a checked barrier), then MPI_Comm_split. */
static rp_status mpi_split(rp_comm *c, int color, int key, rp_comm **out)
{
    RP_CHECK(rp_comm_barrier(c));
    comm_mpi_reap(false);
    MPI_Comm sub;
    lock();
    int rc = MPI_Comm_split(M(c)->comm, color >= 0 ? color : MPI_UNDEFINED, key, &sub);
    unlock();
    if (rc != MPI_SUCCESS) return RP_ERROR(RP_ERR_BACKEND, "MPI_Comm_split failed");
    if (sub == MPI_COMM_NULL) return RP_OK;
    int size;
    lock();
    MPI_Comm_size(sub, &size);
    unlock();
    int *ids = malloc((size_t)size * sizeof(int));
    if (!ids) {
        lock();
        MPI_Comm_free(&sub);
        unlock();
        return RP_ERROR(RP_ERR_NOMEM, "split: ids");
    }
    int mine = c->ids[c->rank];
    lock();
    MPI_Allgather(&mine, 1, MPI_INT, ids, 1, MPI_INT, sub);
    unlock();
    rp_status status = wrap(out, sub, ids, c->timeout);
    free(ids);
    return status;
}

static const comm_ops mpi_ops = {
    .name = "mpi",
    .collective = comm_mpi_collective,
    .split = mpi_split,
    .leave = mpi_leave,
    .rejoin = mpi_rejoin,
    .fail = mpi_fail,
    .broken = mpi_broken,
    .destroy = mpi_destroy,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
    .probe = mpi_probe,
};
