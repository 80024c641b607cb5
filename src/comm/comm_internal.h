/*
 * comm_internal.h - what every communicator backend implements: a table of
 * collectives behind the public calls of replicator/comm.h. comm.c checks
 * the arguments once, so a backend sees only valid calls.
 */
#ifndef RP_COMM_INTERNAL_H
#define RP_COMM_INTERNAL_H

#include "replicator/comm.h"

/* The kinds of collective, as compared between members and named in errors. */
typedef enum {
    RP_COLL_ALL_REDUCE,
    RP_COLL_REDUCE_SCATTER,
    RP_COLL_ALL_GATHER,
    RP_COLL_BROADCAST,
    RP_COLL_BARRIER,
    RP_COLL_LEFT, /* not a call: a member announcing that its step failed (op holds the status) */
} comm_coll_kind;

/* One collective call: what members compare before moving any data. */
typedef struct comm_coll_desc {
    int kind;      /* comm_coll_kind */
    int dtype;     /* rp_dtype (unused by barrier) */
    int op;        /* rp_reduce_op (reductions only) */
    int root;      /* broadcast only */
    int64_t count; /* elements per member as passed (reduce_scatter_v: the blocks' sum) */
    uint64_t seq;  /* position in the member's sequence of collectives */
    /* A reduce-scatter with blocks of their own sizes (rp_comm_reduce_scatter_v): counts[rank]
       for each rank, the caller's array; NULL for equal blocks of `count`. */
    const int64_t *counts;
    /*
     * A step of a layered backend's collective (hierarchical: in-process,
     * then across processes): the call the user made, compared with the
     * peers' and named in messages instead of the step.
     */
    int layered;
    int outer_kind, outer_op, outer_root;
    int64_t outer_count;
    uint64_t outer_seq;
    /*
     * How messages name the call (the user's call for a layered step): a
     * user call by its user sequence number in the current phase (since
     * the member's last rp_comm_rejoin: the step's, under the runtime), an
     * internal one (the runtime's, rp_comm_begin_internal) by `what`.
     * Members match calls by `seq`; these only name them. `phased`: the
     * member has rejoined, so the numbers count from the step's start.
     */
    uint64_t user_seq;
    int internal;
    int phased;
    char what[48];
} comm_coll_desc;

/*
 * A reduce-scatter's block of rank r: its offset in the send buffer and its length, in elements
 * (d->count each, or d->counts). Inline: the backends, comm.c and fault.c all ask.
 */
static inline void comm_scatter_block(const comm_coll_desc *d, int r, int64_t *offset,
                                      int64_t *count)
{
    if (!d->counts) {
        *offset = (int64_t)r * d->count;
        *count = d->count;
        return;
    }
    int64_t at = 0;
    for (int q = 0; q < r; q++)
        at += d->counts[q];
    *offset = at;
    *count = d->counts[r];
}

/* Writes e.g. "all_reduce #12 (count 4096, f32, sum)" into buf; returns buf. */
const char *comm_coll_desc_str(const comm_coll_desc *d, char *buf, size_t size);
bool comm_coll_desc_equal(const comm_coll_desc *a, const comm_coll_desc *b);
/*
 * The message for two members' differing calls a (replica ida's) and b
 * (idb's), into msg: "collective mismatch: ..." or, where exactly one of
 * them is internal, "replica <user's> ended its step without calling
 * <user call> (it went on to <what>)". `who_a`/`who_b` name the members
 * ("replica 3", "rank 1 (host)").
 */
void comm_coll_mismatch_str(const comm_coll_desc *a, const char *who_a, const comm_coll_desc *b,
                            const char *who_b, char *msg, size_t size);

/* ---- point-to-point ---------------------------------------------------------------------- */

/* One point-to-point call, as compared between sender and receiver and named in messages. */
typedef struct comm_p2p_desc {
    int send; /* 1: a send, 0: a receive */
    int peer; /* the other side (RP_ANY_SOURCE for such a receive) */
    int tag;  /* RP_ANY_TAG allowed for a receive */
    int dtype;
    int64_t count;
    uint64_t num; /* position along the channel, from 0 (a receive's once matched) */
} comm_p2p_desc;

/* "send #3 (tag 7, count 10, f32)"; a receive not yet matched has no number. */
const char *comm_p2p_desc_str(const comm_p2p_desc *d, bool numbered, char *buf, size_t size);
/* Whether a receive `r` accepts the send `s` (tag unless RP_ANY_TAG, count, dtype). */
bool comm_p2p_accepts(const comm_p2p_desc *r, const comm_p2p_desc *s);
/*
 * "p2p mismatch: replica 1 sent 'send #3 (...)' to replica 0, which expected
 * 'recv #3 (...)'" (who_s, who_r name the two members).
 */
void comm_p2p_mismatch_str(const comm_p2p_desc *s, const char *who_s, const comm_p2p_desc *r,
                           const char *who_r, char *msg, size_t size);

/*
 * A non-blocking call. Every backend's request starts with this header
 * (the rest is the backend's), so the public wait/test dispatch on it.
 */
struct rp_comm_request {
    rp_comm *comm;    /* the handle it was posted on (its timeout) */
    rp_comm *backend; /* the backend handle that made it: wait/test go to its table */
    uint64_t flight;  /* comm.c's: its flight-recorder call number + 1 (0: none) */
};

typedef struct comm_ops {
    const char *name;
    rp_status (*collective)(rp_comm *comm, const comm_coll_desc *d, const void *send, void *recv);
    rp_status (*split)(rp_comm *comm, int color, int key, rp_comm **out);
    void (*leave)(rp_comm *comm, rp_status status, const char *reason);
    void (*rejoin)(rp_comm *comm);
    /* Breaks the communicator for every member with this reason (an invalid call). */
    void (*fail)(rp_comm *comm, rp_status status, const char *reason);
    bool (*broken)(const rp_comm *comm);
    void (*destroy)(rp_comm *comm);
    /*
     * Point-to-point (optional: NULL slots make the public calls
     * RP_ERR_UNSUPPORTED). comm.c has checked the arguments. isend/irecv
     * post and set *req; wait completes by `deadline` (rp_now_s() clock)
     * and frees; test never times out and frees once done.
     */
    rp_status (*isend)(rp_comm *comm, const comm_p2p_desc *d, const void *buf,
                       rp_comm_request **req);
    rp_status (*irecv)(rp_comm *comm, const comm_p2p_desc *d, void *buf, rp_comm_request **req);
    rp_status (*wait)(rp_comm_request *req, double deadline);
    rp_status (*test)(rp_comm_request *req, bool *done);
    rp_status (*probe)(rp_comm *comm, int peer, int tag, bool *ready, comm_p2p_desc *found);
    /* Optional: comm->noun was set (the hierarchical backend passes it to the handles it is
       made of, whose messages it returns). */
    void (*noun_set)(rp_comm *comm);
} comm_ops;

struct rp_comm {
    const comm_ops *ops;
    int rank, size;
    int *ids;              /* [size] replica id of each rank, owned */
    char noun[16];         /* what messages call a member (rp_comm_noun: "replica" when empty) */
    char name[24];         /* what messages call the communicator (rp_comm_set_name; "" none) */
    uint64_t user_entered; /* user collectives entered since the last rejoin, completed or not */
    double timeout;        /* seconds */
    uint64_t seq;          /* collectives completed by this member */
    uint64_t user_seq;     /* of which the user's (outside begin/end_internal) */
    uint64_t user_base;    /* user_seq at the last rp_comm_rejoin: messages count from it */
    bool phased;           /* rp_comm_rejoin has been called */
    int internal;          /* begin_internal depth (0, 1 or 2) */
    char what[48];         /* the outer internal call's name */
    bool housekeeping;     /* the outer internal call began with rp_comm_begin_housekeeping */
    rp_comm_stats stats;   /* the traffic counters (comm.c) */
    void *impl;            /* the backend's state */
    /*
     * The flight recorder (flight.c), kept by comm.c for every public call:
     * a ring of flight_cap entries (NULL until the first call, or after an
     * allocation failed), flight_calls recorded so far (entry k is in slot
     * k % cap), flight_msgs point-to-point calls among them. flight_sized:
     * false until the first call or rp_comm_flight_set_size (the handles are
     * calloc'ed; the first call sizes it from $RP_FLIGHT_ENTRIES).
     */
    rp_flight_entry *flight;
    int flight_cap;
    bool flight_sized;
    uint64_t flight_calls, flight_msgs;
    /*
     * Fault injection (fault.c), counted while a schedule is set: calls made
     * (collectives and message posts), runs (rp_comm_rejoin) and fault_calls
     * at the last rejoin. fault_exempt: an inner handle of a layered backend
     * (hier.c), never faulted itself; inherited by its splits.
     */
    uint64_t fault_calls, fault_runs, fault_run_start;
    bool fault_exempt;
};

/* What messages call a member (rp_comm_set_noun): "replica" unless set. Inline, so the files
 * that write messages (backends, faults, flight recorder) need nothing of comm.c for it. */
static inline const char *comm_noun(const rp_comm *c)
{
    return c->noun[0] ? c->noun : "replica";
}

/*
 * The recorder's calls (flight.c). comm_flight_begin takes the next slot and
 * returns it with call, start and kind filled (the caller fills the rest),
 * or NULL where the ring is off or could not be allocated; comm_flight_end
 * completes call number `call` with `status` unless the ring has moved past
 * it. comm_flight_free releases the ring (rp_comm_destroy).
 */
rp_flight_entry *comm_flight_begin(rp_comm *comm, rp_flight_kind kind);
void comm_flight_end(rp_comm *comm, uint64_t call, rp_status status);
void comm_flight_free(rp_comm *comm);

/* Fills the naming fields of a collective's descriptor (user_seq, internal, what) from comm. */
void comm_coll_desc_name(comm_coll_desc *d, const rp_comm *comm);

/*
 * Member r's slice [*lo, *hi) of count elements of `es` bytes when a buffer
 * is split across n members: slices start at multiples of 64 bytes, so no
 * two members write one cache line.
 */
void comm_slice(int64_t count, size_t es, int r, int n, int64_t *lo, int64_t *hi);

/*
 * A split's group: all[2q] and all[2q+1] are member q's color and key (n
 * members); the members of `color` in (key, rank) order into order[].
 * Returns how many.
 */
int comm_group_order(const int64_t *all, int n, int64_t color, int *order);

/*
 * dst[0..len) = op over members q < n of srcs[q][off .. off+len), adding in
 * rank order. dst must not overlap any source.
 */
void comm_reduce_block(void *dst, const void *const *srcs, int n, int64_t off, int64_t len,
                       rp_dtype dtype, rp_reduce_op op);

/*
 * MPI's shared state (src/comm/mpi/mpi.c; not in a build without MPI): MPI
 * initialised MPI_THREAD_SERIALIZED if it is not yet (finalized at exit),
 * and the process-wide lock every MPI call is made under - held for a call
 * or a few posted together, never across a wait.
 */
rp_status comm_mpi_ensure_init(void);
/*
 * The MPI backend's call check (see mpi.c): 0 (default) hashes each call's
 * descriptor into one small reduction and exchanges the full descriptors
 * only when the hashes differ; 1 exchanges them on every call (the old way,
 * kept to measure what the hash saves: bench/mpi/allreduce_mpi --full-check).
 */
void comm_mpi_set_full_check(int full);

/*
 * The MPI backend's point-to-point with lanes, for the hierarchical backend
 * (src/comm/hier.c): a message goes from (this rank, slane) to (proc, dlane);
 * a receive takes from (proc, slane) or MPI_ANY_SOURCE / -1. lane_rank[proc *
 * lanes + lane] names the communicator member of each lane for messages
 * (NULL: the MPI rank). `owner` is the handle the request is posted on.
 */
rp_status comm_mpi_p2p_setup(rp_comm *mpi, int lanes, const int *lane_rank, const int *ids);
rp_status comm_mpi_isend(rp_comm *mpi, const comm_p2p_desc *d, const void *buf, int proc, int slane,
                         int dlane, rp_comm_request **req, rp_comm *owner);
rp_status comm_mpi_irecv(rp_comm *mpi, const comm_p2p_desc *d, void *buf, int proc, int slane,
                         int dlane, rp_comm_request **req, rp_comm *owner);
rp_status comm_mpi_probe(rp_comm *mpi, int proc, int slane, int lane, int tag, bool *ready,
                         comm_p2p_desc *found);
void comm_mpi_lock(void);
void comm_mpi_unlock(void);

#endif
