/*
 * mpi_internal.h - what the MPI backend's files share (src/comm/mpi/): the
 * communicator's state, the process-wide MPI lock and the helpers every
 * part uses. mpi.c creates, splits and destroys communicators (and has the
 * backend's table); mpi_coll.c runs the checked collectives; mpi_p2p.c the
 * point-to-point messages and the notices (mismatches, peers that left);
 * mpi_base.c the lock and the small helpers below. Calls go downwards only:
 * mpi.c -> mpi_coll.c -> mpi_p2p.c -> mpi_base.c.
 */
#ifndef RP_COMM_MPI_INTERNAL_H
#define RP_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"

#define TAG_CALL   7001
#define TAG_DATA   7002
#define TAG_NOTICE 7003 /* a point-to-point mismatch, told to the sender */
#define TAG_LEFT                                                                                   \
    7004 /* a peer's step ended (rp_comm_leave) or it gave up (timed out), with its reason */
#define HOST_MAX   64
#define NOTICE_MAX 1024

/* A peer's leave (or give-up) notice, as received. */
typedef struct left_note {
    bool left;
    bool blames_me; /* it gave up waiting for this rank */
    rp_status status;
    char reason[NOTICE_MAX];
} left_note;

typedef struct mpi_impl {
    MPI_Comm comm;
    char (*hosts)[HOST_MAX]; /* [size] host of each rank, for messages */
    rp_coll_desc *calls;     /* [size] the calls of the current collective */
    MPI_Request *reqs;       /* [2 * size] */
    const void **blocks;     /* [size] the received blocks of a reduction */
    char *scratch;           /* all-reduce / reduce-scatter blocks, grown as needed */
    char *xfer;              /* per-peer buffers and sizes of a data exchange */
    size_t scratch_bytes;
    bool broken;
    rp_status broken_status;
    char reason[1024];
    /* Point-to-point (see its section): lanes, their communicators and state. */
    int lanes;
    MPI_Comm *pc;            /* [lanes] */
    struct lane_state *lane; /* [lanes] */
    uint64_t *sent, *rcvd;   /* [size * lanes * lanes] messages per channel */
    int *lane_rank;          /* [size * lanes] or NULL */
    int *lane_ids;           /* [members] their replica ids, with lane_rank */
    int64_t tag_limit;
    struct left_note *left; /* [size] the peers' leave notices */
    MPI_Request notice_req;
    char notice[1100];
    double notices_due; /* when p2p next looks for notices (poll_notices_due) */
    /* The call check (see mpi_collective). */
    bool hashed;              /* the current call checks by its data messages' tag */
    int tag;                  /* that tag */
    const rp_coll_desc *desc; /* the current call */
    bool disagree;            /* a peer was seen in another call: diagnose */
    int left_q;               /* >= 0: that peer's leave notice came instead */
    double stalled;           /* the longest gap between this rank's polls in the current wait */
    rp_coll_desc *early;      /* [size] a call a peer sent ahead of this rank's */
    bool *early_ok;           /* [size] */
    int *from;                /* [2 * size] scratch: the peer of each request */
    bool *missing; /* [size] the peers a timeout gave up on (told to the peers: give_up) */
} mpi_impl;

static inline mpi_impl *M(const rp_comm *c)
{
    return c->impl;
}

/* The process-wide MPI lock (rp_mpi_lock, mpi_base.c), by its short names. */
static inline void lock(void)
{
    rp_mpi_lock();
}
static inline void unlock(void)
{
    rp_mpi_unlock();
}

/* ---- mpi_base.c ---- */

/* Marks the communicator broken with status and reason (the first one stays). */
void rp_mpi_mark_broken(rp_comm *c, rp_status status, const char *reason);
/* Between two polls of a wait: a yield, then (after many polls) a short sleep. */
void rp_mpi_pause_briefly(unsigned polls);
/* Notes the gap since *last in *stalled if it says this process was not running (see mpi_base.c).
 */
void rp_mpi_note_gap(double *last, double timeout, double *stalled);

/* ---- mpi_p2p.c ---- */

/* Reads the notices that have come (mismatches, peers that left). Under the lock. */
void rp_mpi_poll_notices(rp_comm *c);
/* Completes (and frees) a point-to-point request, or fails it at the deadline. */
rp_status rp_mpi_wait(rp_comm *c, rp_comm_request *req, double deadline);
/* Whether a point-to-point request is done (then freed, with its status). */
rp_status rp_mpi_test(rp_comm *c, rp_comm_request *req, bool *done);
/* Frees the point-to-point state (the MPI communicators too, unless MPI is finalized). */
void rp_mpi_p2p_release(mpi_impl *m);

/* ---- mpi_coll.c ---- */

/* The backend's checked collective (rp_comm_ops.collective). */
rp_status rp_mpi_collective(rp_comm *c, const rp_coll_desc *d, const void *send, void *recv);
/*
 * Polls reqs[0..n) until all complete or the deadline passes (RP_ERR_TIMEOUT;
 * *pending, if given, says which are still pending).
 */
rp_status rp_mpi_poll_all(rp_comm *c, int n, MPI_Request *reqs, double deadline, bool *pending,
                          const char *what);

#endif
