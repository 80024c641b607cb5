/*
 * flight.c - where the runtime leaves the communicators' flight recorders
 * (replicator/comm.h) when a run fails: one text file and one JSON-lines
 * file per worker in the flight directory, and one log line per worker
 * with its last calls. comm keeps the rings and knows nothing of files;
 * this is the layer that knows where a run's files go.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "replicator/strategy.h"

/* Calls of the data communicator named in each worker's log line. */
#define FLIGHT_LOG_CALLS 3

rp_status rp_replicator_set_flight_dir(rp_replicator *r, const char *dir)
{
    if (!r) return RP_ERROR(RP_ERR_INVALID, "rp_replicator_set_flight_dir: replicator is NULL");
    if (dir && strlen(dir) >= 4000)
        return RP_ERROR(RP_ERR_INVALID, "flight directory of %zu bytes: must be under 4000",
                        strlen(dir));
    snprintf(r->flight_dir, sizeof r->flight_dir, "%s", dir ? dir : "");
    return RP_OK;
}

/* What a handle is to the worker: "world", "data axis", "link" ... ("+" joined where it is
 * several). */
static void comm_role(const rp_replica *rep, const rp_comm *c, char *buf, size_t size)
{
    static const char *axes[RP_AXES] = {"data axis", "model axis", "pipe axis"};
    buf[0] = 0;
    size_t len = 0;
    const char *names[RP_AXES + 3];
    int n = 0;
    if (c == rep->world) names[n++] = "world";
    if (c == rep->role_comm) names[n++] = "role";
    for (int a = 0; a < RP_AXES; a++)
        if (c == rep->axis[a]) names[n++] = axes[a];
    if (c == rep->link) names[n++] = "link";
    if (n == 0) names[n++] = "communicator";
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? " = " : "", names[i]);
}

/* One worker's file of `json` kind (every handle it owns, one section each); false if it cannot be
 * written. */
static bool write_file(const rp_replica *rep, const char *path, bool json)
{
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = true;
    /* Its own error first: the reason it stopped, as this worker saw it. */
    const char *outcome = rep->status == RP_OK ? "OK" : rp_status_name(rep->status);
    const char *error = rep->status == RP_OK ? "its function returned" : rep->error;
    if (json) {
        fprintf(f,
                "{\"flight\": \"worker\", \"worker\": %d, \"replica\": %d, \"outcome\": \"%s\", "
                "\"error\": \"",
                rep->worker, rep->id, outcome);
        for (const char *s = error; *s; s++) {
            if (*s == '"' || *s == '\\') fputc('\\', f);
            if ((unsigned char)*s >= 0x20) fputc(*s, f);
        }
        fprintf(f, "\"}\n");
    } else {
        fprintf(f, "worker %d (replica %d) ended its run with %s: %s\n\n", rep->worker, rep->id,
                outcome, error);
    }
    for (int i = 0; i < rep->nowned; i++) {
        const rp_comm *c = rep->owned[i];
        if (rp_comm_flight_count(c) == 0 && rp_comm_size(c) == 1) continue; /* no peers, no calls */
        char role[96];
        comm_role(rep, c, role, sizeof role);
        if (json)
            fprintf(f, "{\"flight\": \"communicator\", \"worker\": %d, \"communicator\": \"%s\"}\n",
                    rep->worker, role);
        else
            fprintf(f, "== worker %d, %s ==\n", rep->worker, role);
        ok &= rp_comm_flight_dump(c, f, json) == RP_OK;
        if (!json) fputc('\n', f);
    }
    ok &= fclose(f) == 0;
    return ok;
}

/* "all_reduce seq 7 ok, broadcast seq 8 MISMATCH, ..." - the last calls of c, oldest first. */
static void last_calls(const rp_comm *c, char *buf, size_t size)
{
    int held = rp_comm_flight_count(c),
        first = held > FLIGHT_LOG_CALLS ? held - FLIGHT_LOG_CALLS : 0;
    size_t len = 0;
    buf[0] = 0;
    if (held == 0) snprintf(buf, size, "none recorded");
    for (int i = first; i < held && len < size; i++) {
        rp_flight_entry e;
        if (rp_comm_flight_get(c, i, &e) != RP_OK) break;
        char peer[32] = "";
        if (e.kind >= RP_FLIGHT_SEND)
            snprintf(peer, sizeof peer, " %s rank %d", e.kind == RP_FLIGHT_SEND ? "to" : "from",
                     e.peer);
        else if (e.kind == RP_FLIGHT_BROADCAST)
            snprintf(peer, sizeof peer, " root %d", e.peer);
        len += (size_t)snprintf(buf + len, size - len, "%s%s seq %llu%s (count %lld) %s",
                                i > first ? ", " : "", rp_flight_kind_name(e.kind),
                                (unsigned long long)e.seq, peer, (long long)e.count,
                                !e.done             ? "pending"
                                : e.status == RP_OK ? "ok"
                                                    : rp_status_name(e.status));
    }
}

void rt_flight_dump_workers(rp_replicator *r)
{
    rp_status saved = rp_last_status();
    char saved_error[1024];
    snprintf(saved_error, sizeof saved_error, "%s", rp_last_error());
    bool dir = r->flight_dir[0] != 0;
    if (dir && mkdir(r->flight_dir, 0777) != 0 && errno != EEXIST)
        rp_warn("flight recorder: cannot create %s (%s)", r->flight_dir, strerror(errno));
    for (int i = 0; i < r->n; i++) {
        const rp_replica *rep = &r->reps[i];
        /* A started role runs on its own thread, and an abandoned replica may still be in a call:
         * their rings move. */
        if (rep->busy || rep->abandoned) continue;
        char path[4200] = "", json[4200];
        if (dir) {
            snprintf(path, sizeof path, "%s/flight-%d.txt", r->flight_dir, rep->worker);
            snprintf(json, sizeof json, "%s/flight-%d.jsonl", r->flight_dir, rep->worker);
            if (!write_file(rep, path, false) || !write_file(rep, json, true)) {
                rp_warn("flight recorder: cannot write %s (%s)", path, strerror(errno));
                path[0] = 0;
            }
        }
        char calls[512];
        last_calls(rep->comm, calls, sizeof calls);
        rp_log(RP_LOG_ERROR, "flight recorder: worker %d (replica %d, %s) last calls: %s%s%s",
               rep->worker, rep->id,
               rep->status == RP_OK ? "returned" : rp_status_name(rep->status), calls,
               path[0] ? "; all in " : "", path);
    }
    if (saved != RP_OK)
        rp_error_set(saved, NULL, 0, "%s", saved_error);
    else
        rp_error_clear();
}
