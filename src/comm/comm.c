/*
 * comm.c - the public communicator calls: argument checks, then the
 * backend's table. Names of types, ops and calls for messages.
 */
#include <stdio.h>

#include "comm/comm_internal.h"

size_t rp_dtype_size(rp_dtype dtype)
{
    switch (dtype) {
    case RP_F32: return 4;
    case RP_F64: return 8;
    case RP_I32: return 4;
    case RP_I64: return 8;
    }
    return 0;
}

const char *rp_dtype_name(rp_dtype dtype)
{
    static const char *names[] = {"f32", "f64", "i32", "i64"};
    return (unsigned)dtype < 4 ? names[dtype] : "?";
}

const char *rp_reduce_op_name(rp_reduce_op op)
{
    static const char *names[] = {"sum", "mean", "max", "min", "first"};
    return (unsigned)op < 5 ? names[op] : "?";
}

static const char *kind_name(int kind)
{
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "left"};
    return (unsigned)kind < 6 ? names[kind] : "?";
}

const char *rp_coll_desc_str(const rp_coll_desc *d, char *buf, size_t size)
{
    if (d->layered) {
        rp_coll_desc outer = {.kind = d->outer_kind, .dtype = d->dtype, .op = d->outer_op,
                             .root = d->outer_root, .count = d->outer_count, .seq = d->outer_seq};
        return rp_coll_desc_str(&outer, buf, size);
    }
    switch (d->kind) {
    case RP_COLL_ALL_REDUCE:
    case RP_COLL_REDUCE_SCATTER:
        snprintf(buf, size, "%s #%llu (count %lld, %s, %s)", kind_name(d->kind),
                 (unsigned long long)d->seq, (long long)d->count, rp_dtype_name(d->dtype),
                 rp_reduce_op_name(d->op));
        break;
    case RP_COLL_ALL_GATHER:
        snprintf(buf, size, "all_gather #%llu (count %lld, %s)", (unsigned long long)d->seq,
                 (long long)d->count, rp_dtype_name(d->dtype));
        break;
    case RP_COLL_BROADCAST:
        snprintf(buf, size, "broadcast #%llu (count %lld, %s, root %d)", (unsigned long long)d->seq,
                 (long long)d->count, rp_dtype_name(d->dtype), d->root);
        break;
    default:
        snprintf(buf, size, "%s #%llu", kind_name(d->kind), (unsigned long long)d->seq);
    }
    return buf;
}

bool rp_coll_desc_equal(const rp_coll_desc *a, const rp_coll_desc *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->count == b->count && a->seq == b->seq && a->layered == b->layered &&
           (!a->layered || (a->outer_kind == b->outer_kind && a->outer_op == b->outer_op &&
                            a->outer_root == b->outer_root && a->outer_count == b->outer_count &&
                            a->outer_seq == b->outer_seq));
}

void rp_comm_destroy(rp_comm *comm)
{
    if (comm) comm->ops->destroy(comm);
}

int rp_comm_rank(const rp_comm *comm) { return comm->rank; }
int rp_comm_size(const rp_comm *comm) { return comm->size; }
const char *rp_comm_backend(const rp_comm *comm) { return comm->ops->name; }
uint64_t rp_comm_sequence(const rp_comm *comm) { return comm->seq; }
double rp_comm_timeout(const rp_comm *comm) { return comm->timeout; }
bool rp_comm_broken(const rp_comm *comm) { return comm->ops->broken(comm); }

int rp_comm_replica_id(const rp_comm *comm, int rank)
{
    return rank >= 0 && rank < comm->size ? comm->ids[rank] : -1;
}

rp_status rp_comm_set_timeout(rp_comm *comm, double seconds)
{
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "communicator is NULL");
    if (!(seconds > 0)) return RP_ERROR(RP_ERR_INVALID, "timeout %g s: must be > 0", seconds);
    comm->timeout = seconds;
    return RP_OK;
}

void rp_comm_leave(rp_comm *comm, rp_status status, const char *reason)
{
    if (comm) comm->ops->leave(comm, status, reason ? reason : "");
}

void rp_comm_rejoin(rp_comm *comm)
{
    if (comm) comm->ops->rejoin(comm);
}

/* The checks every call shares; `buffers` is whether send/recv must be non-NULL. */
static rp_status check_call(const rp_comm *comm, const rp_coll_desc *d, const void *send,
                            const void *recv)
{
    char what[128];
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "communicator is NULL");
    rp_coll_desc_str(d, what, sizeof what);
    if (d->count < 0) return RP_ERROR(RP_ERR_INVALID, "%s: count %lld is negative", what, (long long)d->count);
    if (d->kind == RP_COLL_BARRIER) return RP_OK;
    if (rp_dtype_size(d->dtype) == 0) return RP_ERROR(RP_ERR_INVALID, "%s: unknown dtype %d", what, d->dtype);
    if ((d->kind == RP_COLL_ALL_REDUCE || d->kind == RP_COLL_REDUCE_SCATTER) && (unsigned)d->op > RP_FIRST)
        return RP_ERROR(RP_ERR_INVALID, "%s: unknown reduction %d", what, d->op);
    if (d->kind == RP_COLL_BROADCAST && (d->root < 0 || d->root >= comm->size))
        return RP_ERROR(RP_ERR_INVALID, "%s: root %d is not a rank of this communicator of %d",
                        what, d->root, comm->size);
    if (d->count > 0 && (!send || !recv))
        return RP_ERROR(RP_ERR_INVALID, "%s: %s buffer is NULL", what, send ? "receive" : "send");
    return RP_OK;
}

static rp_status run(rp_comm *comm, int kind, const void *send, void *recv, int64_t count,
                     rp_dtype dtype, rp_reduce_op op, int root)
{
    rp_coll_desc d = {.kind = kind, .dtype = (int)dtype, .op = (int)op, .root = root, .count = count,
                      .seq = comm ? comm->seq : 0};
    rp_status status = check_call(comm, &d, send, recv);
    if (status != RP_OK) {
        /* The peers would wait for a call that never comes: tell them why, now. */
        if (comm) {
            char reason[1100];
            snprintf(reason, sizeof reason, "replica %d made an invalid call: %s",
                     comm->ids[comm->rank], rp_last_error());
            comm->ops->fail(comm, status, reason);
        }
        return status;
    }
    return comm->ops->collective(comm, &d, send, recv);
}

rp_status rp_comm_all_reduce(rp_comm *comm, const void *send, void *recv, int64_t count,
                             rp_dtype dtype, rp_reduce_op op)
{
    return run(comm, RP_COLL_ALL_REDUCE, send, recv, count, dtype, op, 0);
}

rp_status rp_comm_reduce_scatter(rp_comm *comm, const void *send, void *recv, int64_t count,
                                 rp_dtype dtype, rp_reduce_op op)
{
    return run(comm, RP_COLL_REDUCE_SCATTER, send, recv, count, dtype, op, 0);
}

rp_status rp_comm_all_gather(rp_comm *comm, const void *send, void *recv, int64_t count, rp_dtype dtype)
{
    return run(comm, RP_COLL_ALL_GATHER, send, recv, count, dtype, RP_SUM, 0);
}

rp_status rp_comm_broadcast(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype, int root)
{
    return run(comm, RP_COLL_BROADCAST, buf, buf, count, dtype, RP_SUM, root);
}

rp_status rp_comm_barrier(rp_comm *comm)
{
    return run(comm, RP_COLL_BARRIER, NULL, NULL, 0, RP_F32, RP_SUM, 0);
}

rp_status rp_comm_split(rp_comm *comm, int color, int key, rp_comm **out)
{
    if (!comm || !out) return RP_ERROR(RP_ERR_INVALID, "communicator or output is NULL");
    *out = NULL;
    return comm->ops->split(comm, color, key, out);
}

int rp_comm_group_order(const int64_t *all, int n, int64_t color, int *order)
{
    int g = 0;
    for (int q = 0; q < n; q++) {
        if (all[2 * q] != color) continue;
        int j = g++;
        while (j > 0 && all[2 * order[j - 1] + 1] > all[2 * q + 1]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = q;
    }
    return g;
}

void rp_comm_slice(int64_t count, size_t es, int r, int n, int64_t *lo, int64_t *hi)
{
    int64_t unit = 64 / (int64_t)es, units = (count + unit - 1) / unit;
    *lo = units * r / n * unit;
    *hi = units * (r + 1) / n * unit;
    if (*lo > count) *lo = count;
    if (*hi > count) *hi = count;
}
