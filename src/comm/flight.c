/*
 * flight.c - the flight recorder: each handle's ring of its last calls
 * (replicator/comm.h), filled by comm.c, read back and dumped here.
 *
 * The ring is sized once and never grows: a call takes slot k % cap and
 * overwrites the oldest entry, so recording costs a few stores and no
 * allocation. A non-blocking message's entry is completed when its request
 * is (wait, test, wait_all); the call number in the slot tells whether the
 * ring has moved past it meanwhile, in which case the end is dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

#define FLIGHT_MAX (1 << 20)

/* The first five kinds are the collectives, in comm_coll_kind's order: comm.c passes one for the
 * other. */
_Static_assert((int)RP_FLIGHT_ALL_REDUCE == (int)RP_COLL_ALL_REDUCE &&
                   (int)RP_FLIGHT_BARRIER == (int)RP_COLL_BARRIER &&
                   (int)RP_FLIGHT_BROADCAST == (int)RP_COLL_BROADCAST,
               "rp_flight_kind's collectives follow comm_coll_kind");

const char *rp_flight_kind_name(rp_flight_kind kind)
{
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "barrier",    "send",           "recv"};
    return (unsigned)kind < 7 ? names[kind] : "?";
}

/* Allocates a ring of n entries (n may be 0: off); the old one goes. */
static rp_status make_ring(rp_comm *comm, int n)
{
    free(comm->flight);
    comm->flight = NULL;
    comm->flight_cap = 0;
    comm->flight_calls = 0;
    comm->flight_msgs = 0;
    comm->flight_sized = true;
    if (n == 0) return RP_OK;
    comm->flight = calloc((size_t)n, sizeof *comm->flight);
    if (!comm->flight)
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a flight recorder of %d entries for %s %d",
                        n, comm_noun(comm), comm->ids[comm->rank]);
    comm->flight_cap = n;
    return RP_OK;
}

rp_flight_entry *comm_flight_begin(rp_comm *comm, rp_flight_kind kind)
{
    if (!comm->flight_sized) {
        /* The first call: the ring of $RP_FLIGHT_ENTRIES, allocated once. A failure leaves it off
           and the caller's last error as it was: the recorder never fails a call. */
        rp_status saved = rp_last_status();
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        if (make_ring(comm, rp_env_get()->flight_entries) != RP_OK) {
            if (saved != RP_OK)
                rp_error_set(saved, NULL, 0, "%s", msg);
            else
                rp_error_clear();
        }
    }
    if (!comm->flight) return NULL;
    uint64_t k = comm->flight_calls++;
    rp_flight_entry *e = &comm->flight[k % (uint64_t)comm->flight_cap];
    e->call = k;
    e->kind = kind;
    e->done = false;
    e->end = 0;
    e->status = RP_OK;
    e->start = rp_now_s();
    return e;
}

void comm_flight_end(rp_comm *comm, uint64_t call, rp_status status)
{
    if (!comm || !comm->flight || call >= comm->flight_calls) return;
    rp_flight_entry *e = &comm->flight[call % (uint64_t)comm->flight_cap];
    if (e->call != call) return; /* overwritten by later calls */
    e->end = rp_now_s();
    e->status = status;
    e->done = true;
}

void comm_flight_free(rp_comm *comm)
{
    free(comm->flight);
    comm->flight = NULL;
    comm->flight_cap = 0;
}

rp_status rp_comm_flight_set_size(rp_comm *comm, int entries)
{
    if (!comm) return RP_ERROR(RP_ERR_INVALID, "rp_comm_flight_set_size: communicator is NULL");
    if (entries < 0 || entries > FLIGHT_MAX)
        return RP_ERROR(RP_ERR_INVALID, "flight recorder size %d: must be in [0, %d] (0: off)",
                        entries, FLIGHT_MAX);
    return make_ring(comm, entries);
}

int rp_comm_flight_count(const rp_comm *comm)
{
    if (!comm || !comm->flight) return 0;
    return comm->flight_calls < (uint64_t)comm->flight_cap ? (int)comm->flight_calls
                                                           : comm->flight_cap;
}

uint64_t rp_comm_flight_calls(const rp_comm *comm)
{
    return comm ? comm->flight_calls : 0;
}

rp_status rp_comm_flight_get(const rp_comm *comm, int i, rp_flight_entry *out)
{
    if (!comm || !out)
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_flight_get: communicator or output is NULL");
    int held = rp_comm_flight_count(comm);
    if (i < 0 || i >= held)
        return RP_ERROR(RP_ERR_INVALID,
                        "flight recorder entry %d: the ring holds %d (0 is the oldest)", i, held);
    uint64_t first = comm->flight_calls - (uint64_t)held;
    *out = comm->flight[(first + (uint64_t)i) % (uint64_t)comm->flight_cap];
    return RP_OK;
}

/* "count 4, f32, sum, 16 bytes"-style details of an entry (after its kind). */
static void entry_details(const rp_comm *comm, const rp_flight_entry *e, char *buf, size_t size)
{
    char who[160], peer[64] = "", shape[96] = "";
    if (e->internal)
        snprintf(who, sizeof who, "%s", e->what[0] ? e->what : "an internal call");
    else if (e->kind >= RP_FLIGHT_SEND)
        snprintf(who, sizeof who, "%s", e->blocking ? "blocking" : "non-blocking");
    else
        snprintf(who, sizeof who, "user #%llu", (unsigned long long)e->user_seq);
    long long bytes = (long long)e->count * (long long)rp_dtype_size(e->dtype);
    if (e->kind == RP_FLIGHT_ALL_REDUCE || e->kind == RP_FLIGHT_REDUCE_SCATTER)
        snprintf(shape, sizeof shape, ", count %lld, %s, %s, %lld bytes", (long long)e->count,
                 rp_dtype_name(e->dtype), rp_reduce_op_name(e->op), bytes);
    else if (e->kind != RP_FLIGHT_BARRIER)
        snprintf(shape, sizeof shape, ", count %lld, %s, %lld bytes", (long long)e->count,
                 rp_dtype_name(e->dtype), bytes);
    if (e->kind == RP_FLIGHT_BROADCAST) snprintf(peer, sizeof peer, ", root %d", e->peer);
    if (e->kind >= RP_FLIGHT_SEND) {
        char tag[24];
        if (e->tag == RP_ANY_TAG)
            snprintf(tag, sizeof tag, "any tag");
        else
            snprintf(tag, sizeof tag, "tag %d", e->tag);
        if (e->peer == RP_ANY_SOURCE)
            snprintf(peer, sizeof peer, ", %s any source, %s",
                     e->kind == RP_FLIGHT_SEND ? "to" : "from", tag);
        else
            snprintf(peer, sizeof peer, ", %s rank %d (%s %d), %s",
                     e->kind == RP_FLIGHT_SEND ? "to" : "from", e->peer, comm_noun(comm),
                     e->peer >= 0 && e->peer < comm->size ? comm->ids[e->peer] : -1, tag);
    }
    snprintf(buf, size, "%s%s%s", who, peer, shape);
}

/* s as a JSON string's contents (quotes, backslashes and control characters escaped). */
static void json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

rp_status rp_comm_flight_dump(const rp_comm *comm, FILE *f, bool json)
{
    if (!comm || !f)
        return RP_ERROR(RP_ERR_INVALID, "rp_comm_flight_dump: communicator or file is NULL");
    int held = rp_comm_flight_count(comm);
    double now = rp_now_s();
    bool broken = comm->ops->broken(comm);
    if (json) {
        fprintf(f,
                "{\"flight\": \"header\", \"replica\": %d, \"rank\": %d, \"size\": %d, "
                "\"backend\": \"%s\", "
                "\"calls\": %llu, \"held\": %d, \"capacity\": %d, \"broken\": %s, \"now\": %.6f}\n",
                comm->ids[comm->rank], comm->rank, comm->size, comm->ops->name,
                (unsigned long long)comm->flight_calls, held, comm->flight_cap,
                broken ? "true" : "false", now);
    } else {
        fprintf(f,
                "flight recorder of %s %d (rank %d of %d, %s): %llu calls recorded, the last %d "
                "below, oldest first%s\n",
                comm_noun(comm), comm->ids[comm->rank], comm->rank, comm->size, comm->ops->name,
                (unsigned long long)comm->flight_calls, held,
                broken ? "; the communicator is broken" : "");
        if (!comm->flight && !comm->flight_sized)
            fprintf(f, "  (no call has been made on this handle: its ring is made at the first)\n");
        else if (!comm->flight)
            fprintf(f,
                    "  (the recorder is off for this handle: RP_FLIGHT_ENTRIES=0 or no memory)\n");
        else
            fprintf(f, "  %8s  %-8s  %9s  %10s  %-14s  %6s  %s\n", "call", "outcome", "age_s",
                    "dur_ms", "kind", "seq", "details");
    }
    for (int i = 0; i < held; i++) {
        rp_flight_entry e;
        RP_CHECK(rp_comm_flight_get(comm, i, &e));
        char details[320];
        entry_details(comm, &e, details, sizeof details);
        const char *outcome = !e.done             ? "pending"
                              : e.status == RP_OK ? "ok"
                                                  : rp_status_name(e.status);
        if (json) {
            fprintf(f,
                    "{\"call\": %llu, \"kind\": \"%s\", \"seq\": %llu, \"user_seq\": %llu, "
                    "\"internal\": %s, "
                    "\"what\": \"",
                    (unsigned long long)e.call, rp_flight_kind_name(e.kind),
                    (unsigned long long)e.seq, (unsigned long long)e.user_seq,
                    e.internal ? "true" : "false");
            json_str(f, e.internal ? e.what : "");
            fprintf(
                f,
                "\", \"blocking\": %s, \"dtype\": \"%s\", \"op\": \"%s\", \"count\": %lld, "
                "\"bytes\": %lld, "
                "\"peer\": %d, \"tag\": %d, \"start\": %.6f, \"end\": %.6f, \"outcome\": \"%s\"}\n",
                e.blocking ? "true" : "false", rp_dtype_name(e.dtype), rp_reduce_op_name(e.op),
                (long long)e.count, (long long)e.count * (long long)rp_dtype_size(e.dtype), e.peer,
                e.tag, e.start, e.end, outcome);
        } else {
            char dur[24];
            if (e.done)
                snprintf(dur, sizeof dur, "%.3f", (e.end - e.start) * 1e3);
            else
                snprintf(dur, sizeof dur, "-");
            fprintf(f, "  %8llu  %-8s  %9.3f  %10s  %-14s  %6llu  %s\n", (unsigned long long)e.call,
                    outcome, now - e.start, dur, rp_flight_kind_name(e.kind),
                    (unsigned long long)e.seq, details);
        }
    }
    if (ferror(f))
        return RP_ERROR(RP_ERR_IO, "rp_comm_flight_dump: writing the flight recorder failed");
    return RP_OK;
}
