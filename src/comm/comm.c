/*
 * comm.c - the public communicator calls: argument checks, then the
 * backend's table. Names of calls for messages (types and ops: dtype.c).
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/fault_internal.h"
#include "replicator/trace.h"

static const char *kind_name(int kind)
{
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                  "broadcast",  "barrier",        "left"};
    return (unsigned)kind < 6 ? names[kind] : "?";
}

const char *comm_coll_desc_str(const comm_coll_desc *d, char *buf, size_t size)
{
    if (d->layered) {
        comm_coll_desc outer = {.kind = d->outer_kind,
                                .dtype = d->dtype,
                                .op = d->outer_op,
                                .root = d->outer_root,
                                .count = d->outer_count,
                                .seq = d->outer_seq,
                                .user_seq = d->user_seq,
                                .internal = d->internal,
                                .phased = d->phased};
        memcpy(outer.what, d->what, sizeof outer.what);
        return comm_coll_desc_str(&outer, buf, size);
    }
    /* A user call by its number among the user's calls; the runtime's own by its name. */
    char name[96];
    if (d->internal)
        snprintf(name, sizeof name, "%s (%s", d->what[0] ? d->what : "an internal call",
                 kind_name(d->kind));
    else
        snprintf(name, sizeof name, "%s #%llu", kind_name(d->kind),
                 (unsigned long long)d->user_seq);
    const char *open = d->internal ? ", " : " (", *close = d->internal ? ")" : "";
    switch (d->kind) {
    case RP_COLL_ALL_REDUCE:
    case RP_COLL_REDUCE_SCATTER:
        snprintf(buf, size, "%s%scount %lld, %s, %s)", name, open, (long long)d->count,
                 rp_dtype_name(d->dtype), rp_reduce_op_name(d->op));
        break;
    case RP_COLL_ALL_GATHER:
        snprintf(buf, size, "%s%scount %lld, %s)", name, open, (long long)d->count,
                 rp_dtype_name(d->dtype));
        break;
    case RP_COLL_BROADCAST:
        snprintf(buf, size, "%s%scount %lld, %s, root %d)", name, open, (long long)d->count,
                 rp_dtype_name(d->dtype), d->root);
        break;
    default:
        snprintf(buf, size, "%s%s", name, close);
    }
    return buf;
}

bool comm_coll_desc_equal(const comm_coll_desc *a, const comm_coll_desc *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->count == b->count && a->seq == b->seq && a->layered == b->layered &&
           a->internal == b->internal &&
           (!a->internal || strncmp(a->what, b->what, sizeof a->what) == 0) &&
           (!a->layered || (a->outer_kind == b->outer_kind && a->outer_op == b->outer_op &&
                            a->outer_root == b->outer_root && a->outer_count == b->outer_count &&
                            a->outer_seq == b->outer_seq));
}

void comm_coll_mismatch_str(const comm_coll_desc *a, const char *who_a, const comm_coll_desc *b,
                            const char *who_b, char *msg, size_t size)
{
    char sa[160], sb[160];
    if (a->internal != b->internal) {
        /* One member went on to the runtime's own call: it skipped the user's call the other is in.
         */
        const comm_coll_desc *user = a->internal ? b : a, *own = a->internal ? a : b;
        comm_coll_desc named = *user;
        if (named.layered) named.user_seq = user->user_seq;
        snprintf(msg, size,
                 "%s ended its step without calling %s (it went on to %s), which %s is in",
                 a->internal ? who_a : who_b, comm_coll_desc_str(&named, sa, sizeof sa),
                 comm_coll_desc_str(own, sb, sizeof sb), a->internal ? who_b : who_a);
        return;
    }
    snprintf(
        msg, size,
        "collective mismatch: %s called %s but %s called %s; "
        "every replica must make the same collective calls in the same order%s",
        who_a, comm_coll_desc_str(a, sa, sizeof sa), who_b, comm_coll_desc_str(b, sb, sizeof sb),
        a->phased && b->phased && !a->internal ? " (user calls are numbered from #0 in each step)"
                                               : "");
}

void comm_coll_desc_name(comm_coll_desc *d, const rp_comm *comm)
{
    d->user_seq = comm->user_seq - comm->user_base;
    d->phased = comm->phased;
    d->internal = comm->internal > 0;
    if (d->internal) memcpy(d->what, comm->what, sizeof d->what);
}

void rp_comm_destroy(rp_comm *comm)
{
    if (!comm) return;
    comm_flight_free(comm);
    comm->ops->destroy(comm);
}

int rp_comm_rank(const rp_comm *comm)
{
    return comm->rank;
}
int rp_comm_size(const rp_comm *comm)
{
    return comm->size;
}
const char *rp_comm_backend(const rp_comm *comm)
{
    return comm->ops->name;
}
uint64_t rp_comm_sequence(const rp_comm *comm)
{
    return comm->seq;
}
uint64_t rp_comm_user_sequence(const rp_comm *comm)
{
    return comm->user_seq;
}
uint64_t rp_comm_step_user_sequence(const rp_comm *comm)
{
    return comm->user_seq - comm->user_base;
}

void rp_comm_begin_internal(rp_comm *comm, const char *what)
{
    if (!comm) return;
    /* Nested: the outer call's name stays (the runtime's gather inside its own step end, say). */
    if (comm->internal++ == 0)
        snprintf(comm->what, sizeof comm->what, "%s", what ? what : "an internal call");
}

void rp_comm_end_internal(rp_comm *comm)
{
    if (comm && comm->internal > 0 && --comm->internal == 0) comm->housekeeping = false;
}

void rp_comm_begin_housekeeping(rp_comm *comm, const char *what)
{
    if (!comm) return;
    if (comm->internal == 0) comm->housekeeping = true;
    rp_comm_begin_internal(comm, what);
}

/* ---- traffic counters -------------------------------------------------------------------- */

const char *rp_comm_class_name(rp_comm_class cls)
{
    static const char *names[] = {"user", "runtime", "housekeeping"};
    return (unsigned)cls < RP_COMM_CLASSES ? names[cls] : "?";
}

/* Counts one completed (posted) call of `kind` moving count elements of dtype. */
static void tally(rp_comm *comm, int kind, int64_t count, rp_dtype dtype)
{
    int cls = comm->internal == 0  ? RP_COMM_USER
              : comm->housekeeping ? RP_COMM_HOUSEKEEPING
                                   : RP_COMM_RUNTIME;
    rp_comm_tally *t = &comm->stats.by[cls][kind];
    t->calls++;
    if (kind != RP_FLIGHT_BARRIER) t->bytes += (uint64_t)count * rp_dtype_size(dtype);
}

rp_status rp_comm_stats_get(const rp_comm *comm, rp_comm_stats *out)
{
    if (!comm || !out)
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_stats_get: communicator or output is NULL");
    *out = comm->stats;
    return RP_OK;
}

void rp_comm_stats_reset(rp_comm *comm)
{
    if (comm) memset(&comm->stats, 0, sizeof comm->stats);
}

void rp_comm_stats_diff(const rp_comm_stats *a, const rp_comm_stats *b, rp_comm_stats *out)
{
    for (int c = 0; c < RP_COMM_CLASSES; c++)
        for (int k = 0; k < RP_COMM_KINDS; k++) {
            out->by[c][k].calls = a->by[c][k].calls - b->by[c][k].calls;
            out->by[c][k].bytes = a->by[c][k].bytes - b->by[c][k].bytes;
        }
}
double rp_comm_timeout(const rp_comm *comm)
{
    return comm->timeout;
}
bool rp_comm_broken(const rp_comm *comm)
{
    return comm->ops->broken(comm);
}

int rp_comm_replica_id(const rp_comm *comm, int rank)
{
    return rank >= 0 && rank < comm->size ? comm->ids[rank] : -1;
}

void rp_comm_set_noun(rp_comm *comm, const char *noun)
{
    if (!comm) return;
    snprintf(comm->noun, sizeof comm->noun, "%s", noun ? noun : "");
    if (comm->ops->noun_set) comm->ops->noun_set(comm);
}

const char *rp_comm_noun(const rp_comm *comm)
{
    return comm ? comm_noun(comm) : "replica";
}

void rp_comm_set_name(rp_comm *comm, const char *name)
{
    if (comm) snprintf(comm->name, sizeof comm->name, "%s", name ? name : "");
}

const char *rp_comm_name(const rp_comm *comm)
{
    return comm ? comm->name : "";
}

uint64_t rp_comm_step_user_calls(const rp_comm *comm)
{
    return comm ? comm->user_entered : 0;
}

/*
 * A failed call's message names the communicator, where it has a name: "threads.c:268: data
 * axis: worker 1 ended its step ...", after the origin, once. Returns status.
 */
static rp_status named(const rp_comm *comm, rp_status status)
{
    if (status == RP_OK || !comm || !comm->name[0]) return status;
    const char *msg = rp_last_error();
    char tag[32];
    snprintf(tag, sizeof tag, "%s: ", comm->name);
    if (strstr(msg, tag)) return status;
    /* The origin "file.c:123: ", if the message starts with one. */
    size_t origin = 0;
    const char *colon = strstr(msg, ".c:");
    if (colon && !memchr(msg, ' ', (size_t)(colon - msg))) {
        const char *p = colon + 3;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p > colon + 3 && p[0] == ':' && p[1] == ' ') origin = (size_t)(p + 2 - msg);
    }
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", msg);
    return rp_error_set(status, NULL, 0, "%.*s%s%s", (int)origin, copy, tag, copy + origin);
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
    if (comm && !(fault_on() && fault_dead(comm)))
        comm->ops->leave(comm, status, reason ? reason : "");
}

void rp_comm_rejoin(rp_comm *comm)
{
    if (!comm) return;
    /* A new phase (the runtime's next step): messages number the user's calls from #0 again. */
    comm->user_base = comm->user_seq;
    comm->user_entered = 0;
    comm->phased = true;
    if (fault_on()) fault_rejoin(comm);
    comm->ops->rejoin(comm);
}

/* The checks every call shares; `buffers` is whether send/recv must be non-NULL. */
static rp_status check_call(const rp_comm *comm, const comm_coll_desc *d, const void *send,
                            const void *recv)
{
    char what[128];
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "communicator is NULL");
    comm_coll_desc_str(d, what, sizeof what);
    if (d->count < 0)
        return RP_ERROR(RP_ERR_INVALID, "%s: count %lld is negative", what, (long long)d->count);
    if (d->kind == RP_COLL_BARRIER) return RP_OK;
    if (rp_dtype_size(d->dtype) == 0)
        return RP_ERROR(RP_ERR_INVALID, "%s: unknown dtype %d", what, d->dtype);
    if ((d->kind == RP_COLL_ALL_REDUCE || d->kind == RP_COLL_REDUCE_SCATTER) &&
        (unsigned)d->op > RP_FIRST)
        return RP_ERROR(RP_ERR_INVALID, "%s: unknown reduction %d", what, d->op);
    if ((d->kind == RP_COLL_ALL_REDUCE || d->kind == RP_COLL_REDUCE_SCATTER) && d->dtype == RP_U8)
        return RP_ERROR(RP_ERR_INVALID, "%s: u8 (raw bytes) cannot be reduced", what);
    if (d->kind == RP_COLL_BROADCAST && (d->root < 0 || d->root >= comm->size))
        return RP_ERROR(RP_ERR_INVALID, "%s: root %d is not a rank of this communicator of %d",
                        what, d->root, comm->size);
    int64_t mine = d->count;
    if (d->counts) comm_scatter_block(d, comm->rank, &(int64_t){0}, &mine);
    if ((d->count > 0 && !send) || (mine > 0 && !recv))
        return RP_ERROR(RP_ERR_INVALID, "%s: %s buffer is NULL", what, send ? "receive" : "send");
    return RP_OK;
}

static rp_status run_v(rp_comm *comm, int kind, const void *send, void *recv, int64_t count,
                       const int64_t *counts, rp_dtype dtype, rp_reduce_op op, int root)
{
    comm_coll_desc d = {.kind = kind,
                        .dtype = (int)dtype,
                        .op = (int)op,
                        .root = root,
                        .count = count,
                        .counts = counts,
                        .seq = comm ? comm->seq : 0};
    /* What this member's counters and flight entry see: its block of a reduce_scatter_v. */
    int64_t mine = count;
    if (comm && counts) comm_scatter_block(&d, comm->rank, &(int64_t){0}, &mine);
    if (comm) comm_coll_desc_name(&d, comm);
    /* The flight recorder's entry comes before the checks, so that an invalid call is recorded too.
     */
    rp_flight_entry *e = comm ? comm_flight_begin(comm, (rp_flight_kind)kind) : NULL;
    uint64_t call = 0;
    if (e) {
        call = e->call;
        e->seq = d.seq;
        e->user_seq = d.user_seq;
        e->internal = d.internal;
        if (d.internal)
            memcpy(e->what, d.what, sizeof e->what);
        else
            e->what[0] = 0;
        e->blocking = true;
        e->dtype = dtype;
        e->op = op;
        e->count = mine;
        e->peer = kind == RP_COLL_BROADCAST ? root : -1;
        e->tag = -1;
    }
    rp_status status = check_call(comm, &d, send, recv);
    if (status != RP_OK) {
        if (e) comm_flight_end(comm, call, status);
        /* The peers would wait for a call that never comes: tell them why, now. */
        if (comm) {
            char reason[1100];
            snprintf(reason, sizeof reason, "%s %d made an invalid call: %s", rp_comm_noun(comm),
                     comm->ids[comm->rank], rp_last_error());
            comm->ops->fail(comm, status, reason);
        }
        return named(comm, status);
    }
    if (!d.internal) comm->user_entered++;
    rp_trace_begin(RP_PHASE_COMM); /* the trace's span: next to the flight recorder's entry */
    status = fault_on() ? fault_collective(comm, &d, send, recv)
                        : comm->ops->collective(comm, &d, send, recv);
    rp_trace_end_args(kind_name(kind), mine * (int64_t)rp_dtype_size(dtype), (int64_t)d.seq,
                      kind == RP_COLL_ALL_REDUCE || kind == RP_COLL_REDUCE_SCATTER
                          ? rp_reduce_op_name(op)
                          : NULL);
    if (e) comm_flight_end(comm, call, status);
    if (status == RP_OK) tally(comm, kind, mine, dtype);
    if (status == RP_OK && !d.internal) comm->user_seq++;
    return named(comm, status);
}

static rp_status run(rp_comm *comm, int kind, const void *send, void *recv, int64_t count,
                     rp_dtype dtype, rp_reduce_op op, int root)
{
    return run_v(comm, kind, send, recv, count, NULL, dtype, op, root);
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

rp_status rp_comm_reduce_scatter_v(rp_comm *comm, const void *send, void *recv,
                                   const int64_t *counts, rp_dtype dtype, rp_reduce_op op)
{
    if (!comm || !counts)
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_reduce_scatter_v: %s is NULL",
                        comm ? "counts" : "communicator");
    int64_t total = 0;
    for (int q = 0; q < comm->size; q++) {
        if (counts[q] < 0)
            return RP_ERROR(RP_ERR_INVALID,
                            "rp_comm_reduce_scatter_v: rank %d's count %lld is negative", q,
                            (long long)counts[q]);
        total += counts[q];
    }
    return run_v(comm, RP_COLL_REDUCE_SCATTER, send, recv, total, counts, dtype, op, 0);
}

rp_status rp_comm_all_gather(rp_comm *comm, const void *send, void *recv, int64_t count,
                             rp_dtype dtype)
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
    rp_status status = comm->ops->split(comm, color, key, out);
    if (*out) {
        (*out)->fault_exempt = comm->fault_exempt;
        memcpy((*out)->noun, comm->noun, sizeof comm->noun);
    }
    return status;
}

int comm_group_order(const int64_t *all, int n, int64_t color, int *order)
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

void comm_slice(int64_t count, size_t es, int r, int n, int64_t *lo, int64_t *hi)
{
    int64_t unit = 64 / (int64_t)es, units = (count + unit - 1) / unit;
    *lo = units * r / n * unit;
    *hi = units * (r + 1) / n * unit;
    if (*lo > count) *lo = count;
    if (*hi > count) *hi = count;
}

/* ---- point-to-point ------------------------------------------------------------------------- */

const char *comm_p2p_desc_str(const comm_p2p_desc *d, bool numbered, char *buf, size_t size)
{
    char num[32] = "", tag[24];
    if (numbered) snprintf(num, sizeof num, " #%llu", (unsigned long long)d->num);
    if (d->tag == RP_ANY_TAG)
        snprintf(tag, sizeof tag, "any tag");
    else
        snprintf(tag, sizeof tag, "tag %d", d->tag);
    snprintf(buf, size, "%s%s (%s, count %lld, %s)", d->send ? "send" : "recv", num, tag,
             (long long)d->count, rp_dtype_name(d->dtype));
    return buf;
}

bool comm_p2p_accepts(const comm_p2p_desc *r, const comm_p2p_desc *s)
{
    return (r->tag == RP_ANY_TAG || r->tag == s->tag) && r->count == s->count &&
           r->dtype == s->dtype;
}

void comm_p2p_mismatch_str(const comm_p2p_desc *s, const char *who_s, const comm_p2p_desc *r,
                           const char *who_r, char *msg, size_t size)
{
    char a[96], b[96];
    snprintf(msg, size,
             "message mismatch: %s sent '%s' to %s, which expected '%s'; the k-th send from one "
             "member to another meets the k-th receive there, with the same tag, count and dtype",
             who_s, comm_p2p_desc_str(s, true, a, sizeof a), who_r,
             comm_p2p_desc_str(r, true, b, sizeof b));
}

/*
 * The checks every point-to-point call shares. An invalid send or receive
 * breaks the communicator (the peer would wait for it), as an invalid
 * collective does.
 */
static rp_status check_p2p(rp_comm *comm, const comm_p2p_desc *d, const void *buf, const void *req)
{
    char what[96];
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "communicator is NULL");
    if (!comm->ops->isend) {
        return RP_ERROR(RP_ERR_UNSUPPORTED, "the %s backend has no point-to-point messages",
                        comm->ops->name);
    }
    comm_p2p_desc_str(d, false, what, sizeof what);
    rp_status status = RP_OK;
    if (d->count < 0)
        status = RP_ERROR(RP_ERR_INVALID, "%s: count %lld is negative", what, (long long)d->count);
    else if (rp_dtype_size(d->dtype) == 0)
        status = RP_ERROR(RP_ERR_INVALID, "%s: unknown dtype %d", what, d->dtype);
    else if (d->count > 0 && !buf)
        status = RP_ERROR(RP_ERR_INVALID, "%s: buffer is NULL", what);
    else if (!req)
        status = RP_ERROR(RP_ERR_INVALID, "%s: request pointer is NULL", what);
    else if (d->peer < (d->send ? 0 : RP_ANY_SOURCE) || d->peer >= comm->size)
        status = RP_ERROR(RP_ERR_INVALID, "%s: peer %d is not a rank of this communicator of %d%s",
                          what, d->peer, comm->size, d->send ? "" : " (nor RP_ANY_SOURCE)");
    else if (d->tag < (d->send ? 0 : RP_ANY_TAG))
        status = RP_ERROR(RP_ERR_INVALID, "%s: tag %d is negative%s", what, d->tag,
                          d->send ? "" : " (and not RP_ANY_TAG)");
    if (status != RP_OK) {
        char reason[1100];
        snprintf(reason, sizeof reason, "%s %d made an invalid call: %s", rp_comm_noun(comm),
                 comm->ids[comm->rank], rp_last_error());
        comm->ops->fail(comm, status, reason);
    }
    return status;
}

/*
 * Posts a send or receive: its flight-recorder entry (before the checks, so
 * that an invalid call is recorded too), the checks, the backend. The
 * request carries the entry's number, completed by complete().
 */
static rp_status post(rp_comm *comm, const comm_p2p_desc *d, void *buf, rp_comm_request **req,
                      bool blocking)
{
    if (req) *req = NULL;
    rp_flight_entry *e =
        comm ? comm_flight_begin(comm, d->send ? RP_FLIGHT_SEND : RP_FLIGHT_RECV) : NULL;
    uint64_t call = 0;
    if (e) {
        call = e->call;
        e->seq = comm->flight_msgs++;
        e->user_seq = 0;
        e->internal = comm->internal > 0;
        if (e->internal)
            memcpy(e->what, comm->what, sizeof e->what);
        else
            e->what[0] = 0;
        e->blocking = blocking;
        e->dtype = (rp_dtype)d->dtype;
        e->op = RP_SUM;
        e->count = d->count;
        e->peer = d->peer;
        e->tag = d->tag;
    }
    rp_status status = check_p2p(comm, d, buf, req);
    if (status == RP_OK)
        status = fault_on() ? fault_post(comm, d, buf, req)
                 : d->send  ? comm->ops->isend(comm, d, buf, req)
                            : comm->ops->irecv(comm, d, buf, req);
    if (status != RP_OK) {
        if (e) comm_flight_end(comm, call, status);
        return named(comm, status);
    }
    tally(comm, d->send ? RP_FLIGHT_SEND : RP_FLIGHT_RECV, d->count, (rp_dtype)d->dtype);
    (*req)->flight = e ? call + 1 : 0;
    return RP_OK;
}

/*
 * A request that a part of the handle made (the hierarchical backend's MPI part, or its threads
 * part) and that failed breaks the whole handle: its members in this process learn the error
 * at once, as the part's own members did (a peer waiting in a collective here for the member
 * that failed would otherwise wait for the timeout). Keeps the error.
 */
static void part_failed(rp_comm *comm, const rp_comm *backend, rp_status status)
{
    if (status == RP_OK || backend == comm || !comm->ops->fail) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rp_last_error());
    comm->ops->fail(comm, status, msg);
    rp_error_set(status, NULL, 0, "%s", msg);
}

/* Waits for req by `deadline` (the backend frees it) and completes its flight-recorder entry. */
static rp_status complete(rp_comm_request *req, double deadline)
{
    rp_comm *comm = req->comm, *backend = req->backend;
    uint64_t flight = req->flight;
    rp_status status = backend->ops->wait(req, deadline);
    part_failed(comm, backend, status);
    if (flight) comm_flight_end(comm, flight - 1, status);
    return named(comm, status);
}

rp_status rp_comm_isend(rp_comm *comm, const void *buf, int64_t count, rp_dtype dtype, int peer,
                        int tag, rp_comm_request **req)
{
    comm_p2p_desc d = {.send = 1, .peer = peer, .tag = tag, .dtype = (int)dtype, .count = count};
    return post(comm, &d, (void *)buf, req, false);
}

rp_status rp_comm_irecv(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype, int peer, int tag,
                        rp_comm_request **req)
{
    comm_p2p_desc d = {.send = 0, .peer = peer, .tag = tag, .dtype = (int)dtype, .count = count};
    return post(comm, &d, buf, req, false);
}

rp_status rp_comm_wait(rp_comm_request *req)
{
    if (!req) return RP_OK;
    return complete(req, rp_now_s() + req->comm->timeout);
}

rp_status rp_comm_test(rp_comm_request *req, bool *done)
{
    if (!done) return RP_ERROR(RP_ERR_INVALID, "rp_comm_test: done is NULL");
    if (!req) {
        *done = true;
        return RP_OK;
    }
    rp_comm *comm = req->comm, *backend = req->backend;
    uint64_t flight = req->flight;
    rp_status status = backend->ops->test(req, done);
    if (*done) part_failed(comm, backend, status);
    if (*done && flight) comm_flight_end(comm, flight - 1, status);
    return status;
}

rp_status rp_comm_wait_all(int n, rp_comm_request **reqs)
{
    if (n < 0 || (n > 0 && !reqs))
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_wait_all: %d requests at %p", n, (void *)reqs);
    rp_status first = RP_OK;
    char error[1024] = "";
    double deadline = -1;
    for (int i = 0; i < n; i++) {
        if (!reqs[i]) continue;
        if (deadline < 0) deadline = rp_now_s() + reqs[i]->comm->timeout;
        rp_status status = complete(reqs[i], deadline);
        reqs[i] = NULL;
        if (status != RP_OK && first == RP_OK) {
            first = status;
            snprintf(error, sizeof error, "%s", rp_last_error());
        }
    }
    if (first != RP_OK) rp_error_set(first, NULL, 0, "%s", error);
    return first;
}

rp_status rp_comm_send(rp_comm *comm, const void *buf, int64_t count, rp_dtype dtype, int peer,
                       int tag)
{
    rp_comm_request *req;
    comm_p2p_desc d = {.send = 1, .peer = peer, .tag = tag, .dtype = (int)dtype, .count = count};
    rp_trace_begin(RP_PHASE_COMM);
    rp_status status = post(comm, &d, (void *)buf, &req, true);
    if (status == RP_OK) status = complete(req, rp_now_s() + comm->timeout);
    rp_trace_end_args("send", count * (int64_t)rp_dtype_size(dtype), -1, NULL);
    return status;
}

rp_status rp_comm_recv(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype, int peer, int tag)
{
    rp_comm_request *req;
    comm_p2p_desc d = {.send = 0, .peer = peer, .tag = tag, .dtype = (int)dtype, .count = count};
    rp_trace_begin(RP_PHASE_COMM);
    rp_status status = post(comm, &d, buf, &req, true);
    if (status == RP_OK) status = complete(req, rp_now_s() + comm->timeout);
    rp_trace_end_args("recv", count * (int64_t)rp_dtype_size(dtype), -1, NULL);
    return status;
}

rp_status rp_comm_probe(rp_comm *comm, int peer, int tag, bool *ready, int *source, int *msg_tag,
                        int64_t *count, rp_dtype *dt)
{
    if (ready) *ready = false;
    if (!comm || !ready)
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_probe: communicator or ready is NULL");
    if (!comm->ops->probe)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "the %s backend has no point-to-point messages",
                        comm->ops->name);
    if (peer < RP_ANY_SOURCE || peer >= comm->size)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_comm_probe: peer %d is not a rank of this communicator of %d "
                        "(nor RP_ANY_SOURCE)",
                        peer, comm->size);
    if (tag < RP_ANY_TAG) return RP_ERROR(RP_ERR_INVALID, "rp_comm_probe: tag %d is negative", tag);
    comm_p2p_desc found = {0};
    RP_CHECK(comm->ops->probe(comm, peer, tag, ready, &found));
    if (*ready) {
        if (source) *source = found.peer;
        if (msg_tag) *msg_tag = found.tag;
        if (count) *count = found.count;
        if (dt) *dt = (rp_dtype)found.dtype;
    }
    return RP_OK;
}
