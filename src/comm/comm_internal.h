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
} rp_coll_kind;

/* One collective call: what members compare before moving any data. */
typedef struct rp_coll_desc {
    int kind;      /* rp_coll_kind */
    int dtype;     /* rp_dtype (unused by barrier) */
    int op;        /* rp_reduce_op (reductions only) */
    int root;      /* broadcast only */
    int64_t count; /* elements per member as passed */
    uint64_t seq;  /* position in the member's sequence of collectives */
    /*
     * A step of a layered backend's collective (hierarchical: in-process,
     * then across processes): the call the user made, compared with the
     * peers' and named in messages instead of the step.
     */
    int layered;
    int outer_kind, outer_op, outer_root;
    int64_t outer_count;
    uint64_t outer_seq;
} rp_coll_desc;

/* Writes e.g. "all_reduce #12 (count 4096, f32, sum)" into buf; returns buf. */
const char *rp_coll_desc_str(const rp_coll_desc *d, char *buf, size_t size);
bool rp_coll_desc_equal(const rp_coll_desc *a, const rp_coll_desc *b);

typedef struct rp_comm_ops {
    const char *name;
    rp_status (*collective)(rp_comm *comm, const rp_coll_desc *d, const void *send, void *recv);
    rp_status (*split)(rp_comm *comm, int color, int key, rp_comm **out);
    void (*leave)(rp_comm *comm, rp_status status, const char *reason);
    void (*rejoin)(rp_comm *comm);
    /* Breaks the communicator for every member with this reason (an invalid call). */
    void (*fail)(rp_comm *comm, rp_status status, const char *reason);
    bool (*broken)(const rp_comm *comm);
    void (*destroy)(rp_comm *comm);
} rp_comm_ops;

struct rp_comm {
    const rp_comm_ops *ops;
    int rank, size;
    int *ids;       /* [size] replica id of each rank, owned */
    double timeout; /* seconds */
    uint64_t seq;   /* collectives completed by this member */
    void *impl;     /* the backend's state */
};

/*
 * Member r's slice [*lo, *hi) of count elements of `es` bytes when a buffer
 * is split across n members: slices start at multiples of 64 bytes, so no
 * two members write one cache line.
 */
void rp_comm_slice(int64_t count, size_t es, int r, int n, int64_t *lo, int64_t *hi);

/*
 * A split's group: all[2q] and all[2q+1] are member q's color and key (n
 * members); the members of `color` in (key, rank) order into order[].
 * Returns how many.
 */
int rp_comm_group_order(const int64_t *all, int n, int64_t color, int *order);

/*
 * dst[0..len) = op over members q < n of srcs[q][off .. off+len), adding in
 * rank order. dst must not overlap any source.
 */
void rp_reduce_block(void *dst, const void *const *srcs, int n, int64_t off, int64_t len,
                     rp_dtype dtype, rp_reduce_op op);

/*
 * MPI's shared state (src/comm/mpi/mpi.c; not in a build without MPI): MPI
 * initialised MPI_THREAD_SERIALIZED if it is not yet (finalized at exit),
 * and the process-wide lock every MPI call is made under - held for a call
 * or a few posted together, never across a wait.
 */
rp_status rp_mpi_ensure_init(void);
void rp_mpi_lock(void);
void rp_mpi_unlock(void);

#endif
