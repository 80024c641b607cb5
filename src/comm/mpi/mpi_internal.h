/*
 * mpi_internal.h - what the MPI backend's files share (src/comm/mpi/): the
 * communicator's state, the process-wide MPI lock and the helpers every
 * part uses. mpi.c creates, splits and destroys communicators (and has the
 * backend's table); mpi_coll.c runs the checked collectives; mpi_p2p.c the
 * point-to-point messages and the notices (mismatches, peers that left);
 * mpi_close.c the end of a communicator (its MPI communicators are freed
 * only once every peer has closed its end); mpi_base.c the lock and the
 * small helpers below. Calls go downwards only: mpi.c -> mpi_coll.c ->
 * mpi_p2p.c -> mpi_base.c, and mpi.c -> mpi_close.c -> mpi_p2p.c.
 */
#ifndef RP_COMM_MPI_INTERNAL_H
#define RP_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"

#define TAG_CALL   7001
#define TAG_DATA   7002
#define TAG_NOTICE 7003 /* a point-to-point error, told to every peer (see mpi_p2p.c) */
#define TAG_LEFT                                                                                   \
    7004 /* a peer's step ended (rp_comm_leave) or it gave up (timed out), with its reason */
#define TAG_CLOSE                                                                                  \
    7005 /* a peer destroyed the communicator: its last message on it, with the number of          \
            point-to-point messages it sent this rank on each channel (see mpi_close.c) */
#define HOST_MAX   64
#define NOTICE_MAX 1024

/* A peer's leave (or give-up) notice, as received; and whether it has closed its end. */
typedef struct left_note {
    bool left;
    bool closed;    /* its TAG_CLOSE came: m->peer_sent holds what it sent here */
    bool blames_me; /* it gave up waiting for this rank */
    rp_status status;
    char reason[NOTICE_MAX];
} left_note;

typedef struct mpi_impl {
    MPI_Comm comm;
    char (*hosts)[HOST_MAX]; /* [size] host of each rank, for messages */
    comm_coll_desc *calls;   /* [size] the calls of the current collective */
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
    uint64_t *peer_sent;     /* [size * lanes * lanes] as rcvd: what a peer that closed sent */
    int *lane_rank;          /* [size * lanes] or NULL */
    int *lane_ids;           /* [members] their replica ids, with lane_rank */
    int64_t tag_limit;
    struct left_note *left;   /* [size] the peers' leave notices */
    MPI_Request *notice_reqs; /* [size] the notice of a point-to-point error, to every peer */
    char notice[1100];        /* its text for the member that caused it (its lane first) */
    char notice_all[1100];    /* and for the others (lane -1) */
    double notices_due;       /* when p2p next looks for notices (poll_notices_due) */
    /* The call check (see mpi_collective). */
    bool hashed;                /* the current call checks by its data messages' tag */
    int tag;                    /* that tag */
    const comm_coll_desc *desc; /* the current call */
    bool disagree;              /* a peer was seen in another call: diagnose */
    int left_q;                 /* >= 0: that peer's leave notice came instead */
    double stalled;             /* the longest gap between this rank's polls in the current wait */
    comm_coll_desc *early;      /* [size] a call a peer sent ahead of this rank's */
    bool *early_ok;             /* [size] */
    int *from;                  /* [2 * size] scratch: the peer of each request */
    bool *missing; /* [size] the peers a timeout gave up on (told to the peers: give_up) */
} mpi_impl;

static inline mpi_impl *M(const rp_comm *c)
{
    return c->impl;
}

/* The process-wide MPI lock (comm_mpi_lock, mpi_base.c), by its short names. */
static inline void lock(void)
{
    comm_mpi_lock();
}
static inline void unlock(void)
{
    comm_mpi_unlock();
}

/* ---- mpi_base.c ---- */

/* Marks the communicator broken with status and reason (the first one stays). */
void comm_mpi_mark_broken(rp_comm *c, rp_status status, const char *reason);
/* Between two polls of a wait: a yield, then (after many polls) a short sleep. */
void comm_mpi_pause_briefly(unsigned polls);
/* Notes the gap since *last in *stalled if it says this process was not running (see mpi_base.c).
 */
void comm_mpi_note_gap(double *last, double timeout, double *stalled);

/* ---- mpi_p2p.c ---- */

/* Reads the notices that have come (mismatches, peers that left). Under the lock. */
void comm_mpi_poll_notices(rp_comm *c);
/* Completes (and frees) a point-to-point request, or fails it at the deadline. */
rp_status comm_mpi_wait(rp_comm *c, rp_comm_request *req, double deadline);
/* Whether a point-to-point request is done (then freed, with its status). */
rp_status comm_mpi_test(rp_comm *c, rp_comm_request *req, bool *done);
/* Frees the point-to-point state (the MPI communicators too, unless MPI is finalized or
 * comm_mpi_close took them). */
void comm_mpi_p2p_release(mpi_impl *m);
/* A collective message's MPI tag carries this bit when it is hashed (see mpi_coll.c). */
#define HASH_BIT (1 << 30)

/* ---- mpi_close.c ---- */

/*
 * The end of this member's use of the communicator (its destroy, before the
 * state is freed): tells every peer what it sent it and takes the MPI
 * communicators (m->comm, m->pc) into the list of those closing, freed once
 * every peer has closed too. Under no lock; MPI not finalized.
 */
void comm_mpi_close(rp_comm *c);
/*
 * Frees the closing communicators whose peers have all closed, draining what
 * they sent meanwhile; `final` (MPI about to be finalized): gives up on the
 * rest, leaving them allocated. Under no lock.
 */
void comm_mpi_reap(bool final);

/* ---- mpi_coll.c ---- */

/* The backend's checked collective (comm_ops.collective). */
rp_status comm_mpi_collective(rp_comm *c, const comm_coll_desc *d, const void *send, void *recv);
/*
 * Polls reqs[0..n) until all complete or the deadline passes (RP_ERR_TIMEOUT;
 * *pending, if given, says which are still pending).
 */
rp_status comm_mpi_poll_all(rp_comm *c, int n, MPI_Request *reqs, double deadline, bool *pending,
                            const char *what);

#endif
