/*
 * hier.c - the hierarchical communicator: T members (threads) in each of R
 * MPI processes, T x R in all; member t of process r is rank r*T + t.
 *
 * A collective runs in three steps: among the members in this process (the
 * threads backend), across the processes (the MPI backend, called by the
 * process's first member - its leader - alone), and back to the members
 * (a broadcast in the process). So the network carries one copy of the data
 * per process, not one per replica.
 *
 * Results are deterministic: a sum adds the members of each process in
 * order, then the processes in order - (x0 + x1) + (x2 + x3) for 2 x 2 -
 * the same bits on every member (not the same bits as a flat communicator
 * of 4, which adds ((x0 + x1) + x2) + x3). A bf16 sum or mean is the
 * exception: it is rounded once from an f32 sum in rank order, so every
 * member gathers every member's bf16 values (the network carries bf16: each
 * process's payloads once to every other process) and adds them itself in
 * rank order, the same bits as the flat backends.
 *
 * Every call is checked: in the process by the threads backend, across
 * processes by the leaders' exchange. Each step carries the user's call
 * (comm_coll_desc.layered), so a mismatch anywhere is found and named as the
 * user wrote it, and every process makes exactly one MPI call per user call.
 *
 * A group made by split may hold any members: some processes hold one
 * member, others several, or all are in one process (then no MPI at all).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

/* What the members of one group in one process share. */
typedef struct group {
    atomic_int refs; /* this process's members holding it */
    rp_comm *mpi;    /* across the group's processes (used by the leader); NULL in one process */
    int nproc;       /* the group's processes, ordered by their first member */
    int lmax;        /* the most members one process holds */
    int *pstart;     /* [nproc + 1]: process p holds members pmembers[pstart[p] .. pstart[p + 1]) */
    int *pmembers;   /* [size] ranks in the group, by process, ascending in each */
    int *pindex;     /* [size] the process (in that order) of each member */
    int *lrank;      /* [size] each member's rank among its process's members */
    int *world;      /* [size] MPI_COMM_WORLD rank of each member's process */
    struct group **made; /* split: the new groups of this process, for its members to take */
} group;

typedef struct hier {
    rp_comm *local; /* this process's members of the group, in group order */
    group *g;
    char *scratch;
    size_t scratch_bytes;
    char *stack; /* bf16 sums: every member's payload, stacked in rank order (see reduce_bf16) */
    size_t stack_bytes;
    bool broken;
    char reason[1024];
    int probed; /* the source of the message the last probe from any source found, or -1 */
} hier;

static const comm_ops hier_ops;

static hier *HI(const rp_comm *c)
{
    return c->impl;
}
static bool leader(const rp_comm *c)
{
    return HI(c)->local->rank == 0;
}

static void group_free(group *g)
{
    if (!g) return;
    rp_comm_destroy(g->mpi);
    free(g->pstart);
    free(g->pmembers);
    free(g->pindex);
    free(g->lrank);
    free(g->world);
    free(g->made);
    free(g);
}

/*
 * The group of members with world[] the processes of its members, in group
 * order, as seen from process `here` (which must hold at least one).
 */
static group *group_create(const int *world, int size, int here)
{
    group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->pstart = calloc((size_t)size + 1, sizeof(int));
    g->pmembers = malloc((size_t)size * sizeof(int));
    g->pindex = malloc((size_t)size * sizeof(int));
    g->lrank = malloc((size_t)size * sizeof(int));
    g->world = malloc((size_t)size * sizeof(int));
    if (!g->pstart || !g->pmembers || !g->pindex || !g->lrank || !g->world) {
        group_free(g);
        return NULL;
    }
    memcpy(g->world, world, (size_t)size * sizeof(int));
    /* Processes in order of their first member. */
    for (int i = 0; i < size; i++) {
        int p = 0;
        while (p < g->nproc && world[g->pmembers[g->pstart[p]]] != world[i])
            p++;
        if (p == g->nproc) {
            g->pstart[p] = i; /* provisional: the first member, fixed below */
            g->pmembers[i] = i;
            g->nproc++;
        }
        g->pindex[i] = p;
    }
    /* Counting sort of the members by process. */
    int *count = calloc((size_t)g->nproc + 1, sizeof(int));
    if (!count) {
        group_free(g);
        return NULL;
    }
    for (int i = 0; i < size; i++)
        count[g->pindex[i] + 1]++;
    for (int p = 0; p < g->nproc; p++) {
        count[p + 1] += count[p];
        int held = count[p + 1] - count[p];
        if (held > g->lmax) g->lmax = held;
    }
    memcpy(g->pstart, count, ((size_t)g->nproc + 1) * sizeof(int));
    for (int i = 0; i < size; i++) {
        int p = g->pindex[i];
        g->lrank[i] = count[p] - g->pstart[p];
        g->pmembers[count[p]++] = i;
    }
    free(count);
    int mine = 0;
    for (int i = 0; i < size; i++)
        mine += world[i] == here;
    atomic_init(&g->refs, mine);
    return g;
}

static rp_status handle_create(rp_comm **out, group *g, rp_comm *local, int rank, int size,
                               const int *ids, double timeout)
{
    rp_comm *c = calloc(1, sizeof *c);
    hier *h = calloc(1, sizeof *h);
    int *idcopy = malloc((size_t)size * sizeof(int));
    if (!c || !h || !idcopy) {
        free(c);
        free(h);
        free(idcopy);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a communicator handle for %d members", size);
    }
    memcpy(idcopy, ids, (size_t)size * sizeof(int));
    h->local = local;
    h->g = g;
    h->probed = -1;
    c->ops = &hier_ops;
    c->rank = rank;
    c->size = size;
    c->ids = idcopy;
    c->timeout = timeout;
    c->impl = h;
    *out = c;
    return RP_OK;
}

/* ---- the collectives --------------------------------------------------------------- */

static rp_status grow_scratch(hier *h, size_t bytes)
{
    if (bytes <= h->scratch_bytes) return RP_OK;
    char *grown = realloc(h->scratch, bytes);
    if (!grown)
        return RP_ERROR(RP_ERR_NOMEM, "hierarchical communicator: %zu bytes of scratch", bytes);
    h->scratch = grown;
    h->scratch_bytes = bytes;
    return RP_OK;
}

/* One step of the user's call `u` on a sub-communicator. */
static rp_status step(rp_comm *sub, const comm_coll_desc *u, int kind, const void *send, void *recv,
                      int64_t count, int op, int root)
{
    comm_coll_desc d = {.kind = kind,
                        .dtype = u->dtype,
                        .op = op,
                        .root = root,
                        .count = count,
                        .seq = sub->seq,
                        .layered = 1,
                        .outer_kind = u->kind,
                        .outer_op = u->op,
                        .outer_root = u->root,
                        .outer_count = u->count,
                        .outer_seq = u->seq,
                        .user_seq = u->user_seq,
                        .internal = u->internal,
                        .phased = u->phased};
    memcpy(d.what, u->what, sizeof d.what);
    return sub->ops->collective(sub, &d, send, recv);
}

/*
 * The leader's step across processes. If it fails, the members of this
 * process - waiting for the leader in the next step - fail at once with
 * the same message instead of at the timeout.
 */
static rp_status across(rp_comm *c, const comm_coll_desc *u, int kind, const void *send, void *recv,
                        int64_t count, int op, int root)
{
    hier *h = HI(c);
    rp_status status = step(h->g->mpi, u, kind, send, recv, count, op, root);
    if (status != RP_OK) h->local->ops->fail(h->local, status, rp_last_error());
    return status;
}

static void divide(void *buf, int64_t n, rp_dtype dtype, int by)
{
    for (int64_t i = 0; i < n; i++)
        switch (dtype) {
        case RP_F32:
            ((float *)buf)[i] = ((float *)buf)[i] / (float)by;
            break;
        case RP_F64:
            ((double *)buf)[i] = ((double *)buf)[i] / (double)by;
            break;
        case RP_I32:
            ((int32_t *)buf)[i] = ((int32_t *)buf)[i] / by;
            break;
        case RP_I64:
            ((int64_t *)buf)[i] = ((int64_t *)buf)[i] / by;
            break;
        case RP_U8:
        case RP_BF16:
            break; /* never reduced (u8) or never divided here (bf16 means: reduce_bf16) */
        }
}

/* recv = op over every member of send, count elements (the all-reduce, also behind reduce-scatter).
 */
static rp_status reduce_all(rp_comm *c, const comm_coll_desc *u, const void *send, void *recv,
                            int64_t count)
{
    hier *h = HI(c);
    int op = u->op == RP_MEAN ? RP_SUM : u->op, here = h->local->size;
    size_t bytes = (size_t)count * rp_dtype_size(u->dtype);
    const void *in = send;
    if (here > 1) {
        RP_CHECK(step(h->local, u, RP_COLL_ALL_REDUCE, send, recv, count, op, 0));
        in = recv;
    }
    if (h->g->nproc > 1) {
        if (leader(c)) RP_CHECK(across(c, u, RP_COLL_ALL_REDUCE, in, recv, count, op, 0));
        if (here > 1) RP_CHECK(step(h->local, u, RP_COLL_BROADCAST, recv, recv, count, 0, 0));
    } else if (in != recv) {
        memmove(recv, in, bytes);
    }
    if (u->op == RP_MEAN && c->size > 1) divide(recv, count, u->dtype, c->size);
    return RP_OK;
}

/* recv = every member's `count` elements of send, stacked in rank order (all-gather's data path,
   also behind reduce_bf16, where count is not the user's). */
static rp_status gather_all(rp_comm *c, const comm_coll_desc *u, const void *send, void *recv,
                            int64_t count)
{
    hier *h = HI(c);
    group *g = h->g;
    int here = h->local->size;
    size_t blk = (size_t)count * rp_dtype_size(u->dtype);
    /* This process's blocks (padded to the largest process's), then every process's. */
    size_t mine = (size_t)g->lmax * blk,
           all = g->nproc > 1 && leader(c) ? (size_t)g->nproc * mine : 0;
    RP_CHECK(grow_scratch(h, mine + all + 1));
    char *ours = h->scratch, *theirs = h->scratch + mine;
    if (here > 1)
        RP_CHECK(step(h->local, u, RP_COLL_ALL_GATHER, send, ours, count, 0, 0));
    else
        memcpy(ours, send, blk);
    if (g->nproc == 1) {
        for (int j = 0; j < here; j++)
            memcpy((char *)recv + (size_t)g->pmembers[j] * blk, ours + (size_t)j * blk, blk);
        return RP_OK;
    }
    if (leader(c)) {
        RP_CHECK(across(c, u, RP_COLL_ALL_GATHER, ours, theirs, count * g->lmax, 0, 0));
        for (int p = 0; p < g->nproc; p++)
            for (int j = g->pstart[p]; j < g->pstart[p + 1]; j++)
                memcpy((char *)recv + (size_t)g->pmembers[j] * blk,
                       theirs + ((size_t)p * (size_t)g->lmax + (size_t)(j - g->pstart[p])) * blk,
                       blk);
    }
    if (here > 1) RP_CHECK(step(h->local, u, RP_COLL_BROADCAST, recv, recv, count * c->size, 0, 0));
    return RP_OK;
}

/*
 * A bf16 sum or mean: recv[0 .. len) = the reduction of elements [off, off + len) of every
 * member's `count` elements of send, in rank order with f32 accumulation and one rounding
 * (comm_reduce_block), from every member's payload gathered here. Adding partial sums per
 * process would need them in f32 (twice the bytes) and would not be rank order.
 */
static rp_status reduce_bf16(rp_comm *c, const comm_coll_desc *u, const void *send, void *recv,
                             int64_t count, int64_t off, int64_t len)
{
    hier *h = HI(c);
    size_t blk = (size_t)count * sizeof(rp_bf16), ptrs = (size_t)c->size * sizeof(void *);
    size_t bytes = ptrs + (size_t)c->size * blk;
    if (bytes > h->stack_bytes) {
        char *grown = realloc(h->stack, bytes);
        if (!grown)
            return RP_ERROR(RP_ERR_NOMEM, "hierarchical communicator: %zu bytes for a bf16 sum",
                            bytes);
        h->stack = grown;
        h->stack_bytes = bytes;
    }
    const void **srcs = (const void **)h->stack;
    char *all = h->stack + ptrs;
    RP_CHECK(gather_all(c, u, send, all, count));
    for (int q = 0; q < c->size; q++)
        srcs[q] = all + (size_t)q * blk;
    comm_reduce_block(recv, srcs, c->size, off, len, RP_BF16, (rp_reduce_op)u->op);
    return RP_OK;
}

static rp_status broadcast(rp_comm *c, const comm_coll_desc *u, void *buf)
{
    hier *h = HI(c);
    group *g = h->g;
    int here = h->local->size, lroot = g->lrank[u->root];
    bool root_here = g->pindex[u->root] == g->pindex[c->rank];
    if (g->nproc == 1)
        return here > 1 ? step(h->local, u, RP_COLL_BROADCAST, buf, buf, u->count, 0, lroot)
                        : RP_OK;
    if (root_here && lroot != 0)
        RP_CHECK(step(h->local, u, RP_COLL_BROADCAST, buf, buf, u->count, 0, lroot));
    if (leader(c))
        RP_CHECK(across(c, u, RP_COLL_BROADCAST, buf, buf, u->count, 0, g->pindex[u->root]));
    if (here > 1) RP_CHECK(step(h->local, u, RP_COLL_BROADCAST, buf, buf, u->count, 0, 0));
    return RP_OK;
}

static rp_status barrier(rp_comm *c, const comm_coll_desc *u)
{
    hier *h = HI(c);
    int here = h->local->size;
    if (here > 1) RP_CHECK(step(h->local, u, RP_COLL_BARRIER, NULL, NULL, 0, 0, 0));
    if (h->g->nproc == 1) return RP_OK;
    if (leader(c)) RP_CHECK(across(c, u, RP_COLL_BARRIER, NULL, NULL, 0, 0, 0));
    if (here > 1) RP_CHECK(step(h->local, u, RP_COLL_BARRIER, NULL, NULL, 0, 0, 0));
    return RP_OK;
}

static rp_status hier_collective(rp_comm *c, const comm_coll_desc *d, const void *send, void *recv)
{
    hier *h = HI(c);
    char what[128];
    if (h->broken)
        return RP_ERROR(
            RP_ERR_COMM, "%s on %s %d: the communicator is broken by an earlier error: %s",
            comm_coll_desc_str(d, what, sizeof what), comm_noun(c), c->ids[c->rank], h->reason);
    /*
     * The members in this process wait longer than the leader waits for the
     * other processes: a process that does not arrive is reported by the
     * leader (naming it), not as "the leader did not arrive".
     */
    h->local->timeout = c->timeout * 1.25 + 1;
    if (h->g->mpi && leader(c)) h->g->mpi->timeout = c->timeout;
    rp_status status = RP_OK;
    size_t es = rp_dtype_size(d->dtype);
    bool bf16_sum = d->dtype == RP_BF16 && (d->op == RP_SUM || d->op == RP_MEAN);
    switch (d->kind) {
    case RP_COLL_ALL_REDUCE:
        status = bf16_sum ? reduce_bf16(c, d, send, recv, d->count, 0, d->count)
                          : reduce_all(c, d, send, recv, d->count);
        break;
    case RP_COLL_REDUCE_SCATTER: {
        /* Every block reduced everywhere, then this member's kept (blocks of their own sizes:
           the same, by the blocks' offsets). */
        int64_t total = d->counts ? d->count : d->count * c->size, at, mine;
        comm_scatter_block(d, c->rank, &at, &mine);
        if (bf16_sum) {
            status = reduce_bf16(c, d, send, recv, total, at, mine);
            break;
        }
        status = grow_scratch(h, (size_t)total * es + 1);
        if (status == RP_OK) status = reduce_all(c, d, send, h->scratch, total);
        if (status == RP_OK && mine > 0)
            memcpy(recv, h->scratch + (size_t)at * es, (size_t)mine * es);
        break;
    }
    case RP_COLL_ALL_GATHER:
        status = gather_all(c, d, send, recv, d->count);
        break;
    case RP_COLL_BROADCAST:
        status = broadcast(c, d, recv);
        break;
    default:
        status = barrier(c, d);
    }
    if (status != RP_OK) {
        h->broken = true;
        snprintf(h->reason, sizeof h->reason, "%s", rp_last_error());
        return status;
    }
    c->seq++;
    return RP_OK;
}

/* ---- leaving, failing, destroying ----------------------------------------------------- */

/* The members here learn at once; the other processes from the leader (its own failure, or its
   failure on finding that a member here left). */
static void hier_leave(rp_comm *c, rp_status status, const char *reason)
{
    hier *h = HI(c);
    h->local->ops->leave(h->local, status, reason);
    if (leader(c) && h->g->mpi) h->g->mpi->ops->leave(h->g->mpi, status, reason);
}

static void hier_rejoin(rp_comm *c)
{
    hier *h = HI(c);
    h->local->ops->rejoin(h->local);
    if (leader(c) && h->g->mpi) h->g->mpi->ops->rejoin(h->g->mpi);
}

static void hier_fail(rp_comm *c, rp_status status, const char *reason)
{
    hier *h = HI(c);
    h->local->ops->fail(h->local, status, reason);
    if (!h->broken) {
        h->broken = true;
        snprintf(h->reason, sizeof h->reason, "%s", reason);
    }
}

static bool hier_broken(const rp_comm *c)
{
    const hier *h = HI(c);
    return h->broken || h->local->ops->broken(h->local) ||
           (leader(c) && h->g->mpi && h->g->mpi->ops->broken(h->g->mpi));
}

/* The members here and (set by the leader, so by one thread) the processes' communicator name
   members as this handle does: their messages are returned as this handle's. */
static void hier_noun_set(rp_comm *c)
{
    hier *h = HI(c);
    memcpy(h->local->noun, c->noun, sizeof c->noun);
    if (leader(c) && h->g->mpi) memcpy(h->g->mpi->noun, c->noun, sizeof c->noun);
}

static void hier_destroy(rp_comm *c)
{
    hier *h = HI(c);
    rp_comm_destroy(h->local);
    if (atomic_fetch_sub(&h->g->refs, 1) == 1) group_free(h->g);
    free(h->scratch);
    free(h->stack);
    free(h);
    free(c->ids);
    free(c);
}

/* ---- point-to-point ------------------------------------------------------------------------ */

/*
 * A peer in this process is reached through the threads member (h->local,
 * its rank there g->lrank[peer]); a peer in another process through the
 * group's MPI communicator, whose lanes are the members of each process
 * (lane = the member's rank among its process's members). The requests are
 * the backends' own; only a receive from RP_ANY_SOURCE in a group that
 * spans processes is this file's: it waits for the first message ready on
 * either side (probing both), then receives that one.
 */
typedef struct hreq {
    rp_comm_request base;
    comm_p2p_desc d;
    void *buf;
    rp_comm_request *inner; /* the receive once a message was found */
} hreq;

static bool local_peer(const rp_comm *c, int peer)
{
    const group *g = HI(c)->g;
    return g->pindex[peer] == g->pindex[c->rank];
}

static rp_status hier_broken_error(rp_comm *c, const char *what)
{
    return RP_ERROR(RP_ERR_COMM, "%s on %s %d: the communicator is broken by an earlier error: %s",
                    what, comm_noun(c), c->ids[c->rank], HI(c)->reason);
}

static rp_status hier_isend(rp_comm *c, const comm_p2p_desc *d, const void *buf,
                            rp_comm_request **req)
{
    hier *h = HI(c);
    group *g = h->g;
    if (h->broken) return hier_broken_error(c, "send");
    comm_p2p_desc dl = *d;
    if (local_peer(c, d->peer)) {
        dl.peer = g->lrank[d->peer];
        RP_CHECK(h->local->ops->isend(h->local, &dl, buf, req));
        (*req)->comm = c;
        return RP_OK;
    }
    return comm_mpi_isend(g->mpi, d, buf, g->pindex[d->peer], g->lrank[c->rank], g->lrank[d->peer],
                          req, c);
}

static rp_status hier_irecv(rp_comm *c, const comm_p2p_desc *d, void *buf, rp_comm_request **req)
{
    hier *h = HI(c);
    group *g = h->g;
    if (h->broken) return hier_broken_error(c, "recv");
    comm_p2p_desc dl = *d;
    if (d->peer != RP_ANY_SOURCE) h->probed = -1;
    if (d->peer == RP_ANY_SOURCE && g->nproc > 1) {
        hreq *r = calloc(1, sizeof *r);
        if (!r) return RP_ERROR(RP_ERR_NOMEM, "recv: out of memory");
        r->base.comm = c;
        r->base.backend = c;
        r->d = *d;
        r->buf = buf;
        *req = &r->base;
        return RP_OK;
    }
    if (d->peer == RP_ANY_SOURCE || local_peer(c, d->peer)) {
        if (d->peer != RP_ANY_SOURCE) dl.peer = g->lrank[d->peer];
        RP_CHECK(h->local->ops->irecv(h->local, &dl, buf, req));
        (*req)->comm = c;
        return RP_OK;
    }
    return comm_mpi_irecv(g->mpi, d, buf, g->pindex[d->peer], g->lrank[d->peer], g->lrank[c->rank],
                          req, c);
}

static rp_status probe_sides(rp_comm *c, int peer, int tag, bool *ready, comm_p2p_desc *found);

/* A receive from any source right after a probe found a message takes that message (see hreq_find).
 */
static rp_status hier_probe(rp_comm *c, int peer, int tag, bool *ready, comm_p2p_desc *found)
{
    hier *h = HI(c);
    RP_CHECK(probe_sides(c, peer, tag, ready, found));
    h->probed = *ready && peer == RP_ANY_SOURCE ? found->peer : -1;
    return RP_OK;
}

static rp_status probe_sides(rp_comm *c, int peer, int tag, bool *ready, comm_p2p_desc *found)
{
    hier *h = HI(c);
    group *g = h->g;
    if (h->broken) return hier_broken_error(c, "probe");
    *ready = false;
    if (peer == RP_ANY_SOURCE || local_peer(c, peer)) {
        RP_CHECK(h->local->ops->probe(
            h->local, peer == RP_ANY_SOURCE ? RP_ANY_SOURCE : g->lrank[peer], tag, ready, found));
        /* Back to this communicator's ranks. */
        if (*ready) found->peer = g->pmembers[g->pstart[g->pindex[c->rank]] + found->peer];
        if (*ready || peer != RP_ANY_SOURCE || g->nproc == 1) return RP_OK;
    }
    return comm_mpi_probe(g->mpi, peer == RP_ANY_SOURCE ? -1 : g->pindex[peer],
                          peer == RP_ANY_SOURCE ? -1 : g->lrank[peer], g->lrank[c->rank], tag,
                          ready, found);
}

/* An RP_ANY_SOURCE receive across processes: find a ready message, then receive that one. */
static rp_status hreq_find(rp_comm *c, hreq *r, bool *found_one)
{
    bool ready = false;
    comm_p2p_desc found = {0};
    *found_one = false;
    hier *h = HI(c);
    if (h->probed >= 0) {
        /* The message the user's probe announced, even if another has come since on the other side.
         */
        ready = true;
        found.peer = h->probed;
        h->probed = -1;
    } else {
        RP_CHECK(probe_sides(c, RP_ANY_SOURCE, RP_ANY_TAG, &ready, &found));
    }
    if (!ready) return RP_OK;
    comm_p2p_desc d = r->d;
    d.peer = found.peer;
    RP_CHECK(hier_irecv(c, &d, r->buf, &r->inner));
    *found_one = true;
    return RP_OK;
}

static rp_status hier_wait(rp_comm_request *req, double deadline)
{
    hreq *r = (hreq *)req;
    rp_comm *c = req->comm;
    rp_status status = RP_OK;
    for (unsigned polls = 0; !r->inner; polls++) {
        bool found = false;
        status = hreq_find(c, r, &found);
        if (status != RP_OK) break;
        if (found) break;
        if (rp_now_s() > deadline) {
            char what[96];
            status = RP_ERROR(RP_ERR_TIMEOUT,
                              "timed out after %gs in %s from any %s on %s %d: no message came",
                              c->timeout, comm_p2p_desc_str(&r->d, false, what, sizeof what),
                              comm_noun(c), comm_noun(c), c->ids[c->rank]);
            hier_fail(c, status, rp_last_error());
            break;
        }
        struct timespec ts = {0, polls < 100 ? 2000 : 50000};
        nanosleep(&ts, NULL);
    }
    if (status == RP_OK && r->inner) status = r->inner->backend->ops->wait(r->inner, deadline);
    free(r);
    return status;
}

static rp_status hier_test(rp_comm_request *req, bool *done)
{
    hreq *r = (hreq *)req;
    rp_comm *c = req->comm;
    *done = false;
    rp_status status = RP_OK;
    if (!r->inner) {
        bool found = false;
        status = hreq_find(c, r, &found);
        if (status != RP_OK) {
            *done = true;
            free(r);
            return status;
        }
    }
    if (!r->inner) return RP_OK;
    status = r->inner->backend->ops->test(r->inner, done);
    if (*done) free(r);
    return status;
}

/* The MPI lanes of group g (collective over g's processes): lane l of process p is member
 * pmembers[pstart[p] + l]. */
static rp_status lanes_setup(group *g, const int *ids)
{
    if (!g->mpi) return RP_OK;
    int *map = malloc((size_t)g->nproc * (size_t)g->lmax * sizeof *map);
    if (!map) return RP_ERROR(RP_ERR_NOMEM, "hierarchical communicator: lane table");
    for (int p = 0; p < g->nproc; p++)
        for (int l = 0; l < g->lmax; l++) {
            int j = g->pstart[p] + l;
            map[p * g->lmax + l] = j < g->pstart[p + 1] ? g->pmembers[j] : -1;
        }
    rp_status status = comm_mpi_p2p_setup(g->mpi, g->lmax, map, ids);
    free(map);
    return status;
}

/* ---- split ------------------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/*
 * The leader's part of a split: for every color (ascending, the same on
 * every process), the group of this process if it holds members of it, and
 * the MPI communicator of the group's processes if there are several (every
 * process of the parent takes part in making it). Into g->made[k] for the
 * k-th color.
 */
static rp_status make_groups(rp_comm *c, const int64_t *all, const int64_t *colors, int ncolors,
                             int *order, int *world)
{
    group *g = HI(c)->g;
    int me = g->world[c->rank];
    for (int k = 0; k < ncolors; k++) {
        int n = comm_group_order(all, c->size, colors[k], order), first = -1;
        for (int j = 0; j < n; j++) {
            world[j] = g->world[order[j]];
            if (world[j] == me && first < 0) first = j;
        }
        bool several = false;
        for (int j = 1; j < n; j++)
            several |= world[j] != world[0];
        group *made = NULL;
        if (first >= 0) {
            made = g->made[k] = group_create(world, n, me);
            if (!made) return RP_ERROR(RP_ERR_NOMEM, "rp_comm_split: out of memory");
        }
        if (several)
            RP_CHECK(rp_comm_split(g->mpi, made ? 0 : -1, first,
                                   made ? &made->mpi : &(rp_comm *){NULL}));
        if (made && made->mpi) {
            for (int j = 0; j < n; j++)
                world[j] = c->ids[order[j]]; /* world[] is free now: the group's ids */
            RP_CHECK(lanes_setup(made, world));
        }
    }
    return RP_OK;
}

static rp_status hier_split(rp_comm *c, int color, int key, rp_comm **out)
{
    hier *h = HI(c);
    group *g = h->g;
    int n = c->size;
    rp_status status = RP_OK;
    int64_t mine[2] = {color < 0 ? -1 : color, key};
    int64_t *all = malloc((size_t)n * 2 * sizeof(int64_t)),
            *colors = malloc((size_t)n * sizeof(int64_t));
    int *order = malloc((size_t)n * sizeof(int)), *ids = malloc((size_t)n * sizeof(int));
    int *world = malloc((size_t)n * sizeof(int));
    rp_comm *local = NULL;
    if (!all || !colors || !order || !ids || !world) {
        hier_fail(c, RP_ERR_NOMEM, "a member ran out of memory in rp_comm_split");
        status = RP_ERROR(RP_ERR_NOMEM, "rp_comm_split: out of memory");
        goto cleanup;
    }
    RP_TRY(rp_comm_all_gather(c, mine, all, 2, RP_I64));
    int ncolors = 0;
    for (int q = 0; q < n; q++)
        if (all[2 * q] >= 0) colors[ncolors++] = all[2 * q];
    qsort(colors, (size_t)ncolors, sizeof *colors, cmp_i64);
    int distinct = 0;
    for (int k = 0; k < ncolors; k++)
        if (!distinct || colors[k] != colors[distinct - 1]) colors[distinct++] = colors[k];
    ncolors = distinct;
    /* My place in my group; this process's members of it, in that order. */
    int size = color >= 0 ? comm_group_order(all, n, color, order) : 0, pos = -1;
    for (int j = 0; j < size; j++) {
        if (order[j] == c->rank) pos = j;
        ids[j] = c->ids[order[j]];
    }
    RP_TRY(rp_comm_split(h->local, color, pos, &local));
    if (leader(c)) {
        free(g->made);
        g->made = calloc((size_t)ncolors + 1, sizeof *g->made);
        rp_status made = g->made ? make_groups(c, all, colors, ncolors, order, world)
                                 : RP_ERROR(RP_ERR_NOMEM, "rp_comm_split: out of memory");
        if (made != RP_OK) h->local->ops->fail(h->local, made, rp_last_error());
    }
    /* The leader's groups are ready when every member here has passed this barrier. */
    RP_TRY(rp_comm_barrier(h->local));
    if (color >= 0) {
        int k = 0;
        while (colors[k] != color)
            k++;
        RP_TRY(handle_create(out, g->made[k], local, pos, size, ids, c->timeout));
        local = NULL;
    }
cleanup:
    rp_comm_destroy(local);
    free(all);
    free(colors);
    free(order);
    free(ids);
    free(world);
    return status;
}

static const comm_ops hier_ops = {
    .name = "mpi+threads",
    .collective = hier_collective,
    .split = hier_split,
    .leave = hier_leave,
    .rejoin = hier_rejoin,
    .fail = hier_fail,
    .broken = hier_broken,
    .destroy = hier_destroy,
    .isend = hier_isend,
    .irecv = hier_irecv,
    .wait = hier_wait,
    .test = hier_test,
    .probe = hier_probe,
    .noun_set = hier_noun_set,
};

/* ---- create ----------------------------------------------------------------------------- */

rp_status rp_comm_hier_create(rp_comm **comms, int n, double timeout_s)
{
    if (!comms) return RP_ERROR(RP_ERR_INVALID, "comms is NULL");
    if (n < 1 || n > 4096)
        return RP_ERROR(RP_ERR_INVALID, "%d members per process: must be in [1, 4096]", n);
    for (int t = 0; t < n; t++)
        comms[t] = NULL;
    rp_comm *mpi = NULL, **locals = calloc((size_t)n, sizeof *locals);
    int *ids = NULL, *world = NULL, *counts = NULL;
    group *g = NULL;
    rp_status status = RP_OK;
    if (!locals) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d members", n);
    RP_TRY(rp_comm_mpi_create(&mpi, timeout_s));
    mpi->fault_exempt = true; /* faults are the members' (comm.c's dispatch on these handles) */
    int R = rp_comm_size(mpi), r = rp_comm_rank(mpi), size = n * R;
    counts = malloc((size_t)R * sizeof(int));
    ids = malloc((size_t)size * sizeof(int));
    world = malloc((size_t)size * sizeof(int));
    if (!counts || !ids || !world) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate a communicator of %d members", size);
        goto cleanup;
    }
    int32_t here = n;
    RP_TRY(rp_comm_all_gather(mpi, &here, counts, 1, RP_I32));
    for (int q = 1; q < R; q++)
        if (counts[q] != counts[0]) {
            status = RP_ERROR(RP_ERR_INVALID,
                              "rank 0 has %d replicas and rank %d has %d: every rank "
                              "must run the same number",
                              counts[0], q, counts[q]);
            goto cleanup;
        }
    for (int i = 0; i < size; i++) {
        ids[i] = i;
        world[i] = i / n;
    }
    RP_TRY(rp_comm_threads_create(locals, n, ids + r * n, timeout_s * 1.25 + 1));
    for (int t = 0; t < n; t++)
        locals[t]->fault_exempt = true;
    g = group_create(world, size, r);
    if (!g) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate a communicator of %d members", size);
        goto cleanup;
    }
    if (R > 1) {
        g->mpi = mpi;
        mpi = NULL;
        RP_TRY(lanes_setup(g, ids));
    }
    for (int t = 0; t < n; t++) {
        RP_TRY(handle_create(&comms[t], g, locals[t], r * n + t, size, ids, timeout_s));
        locals[t] = NULL;
    }
    g = NULL;
cleanup:
    /* On failure the handles made so far go, and the group (still held in g) with them. */
    for (int t = 0; status != RP_OK && t < n; t++)
        if (comms[t]) {
            rp_comm_destroy(HI(comms[t])->local);
            free(comms[t]->impl);
            free(comms[t]->ids);
            free(comms[t]);
            comms[t] = NULL;
        }
    if (g) group_free(g);
    for (int t = 0; t < n; t++)
        rp_comm_destroy(locals[t]);
    rp_comm_destroy(mpi);
    free(locals);
    free(counts);
    free(ids);
    free(world);
    return status;
}
