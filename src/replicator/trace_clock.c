/*
 * trace_clock.c - writing a job's trace (replicator/runtime.h,
 * rp_replicator_trace_write): the clock offset of each process to the
 * process of worker 0, then one file per process and their merge.
 *
 * MPI does not promise synchronised clocks across hosts, so the offset is
 * measured: the first worker of each process sends its clock to worker 0,
 * which answers with its own; over TRACE_ROUNDS round trips the one with the
 * shortest round trip gives offset = t_0 - (sent + received) / 2, good to
 * half that round trip (the bound written into the file).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replicator/strategy.h"

#define TRACE_ROUNDS 16
#define TRACE_TAG    7401

typedef struct clock_job {
    int per_process; /* local workers per process */
    int processes;
    int64_t offset_ns, bound_ns, rtt_ns; /* this process's, set by its first worker */
} clock_job;

static rp_status clock_fn(rp_replica *rep, void *arg)
{
    clock_job *j = arg;
    if (rp_replica_local_index(rep) != 0) return RP_OK;
    rp_comm *world = rp_replica_world_comm(rep);
    int64_t msg[2];
    if (rp_replica_worker(rep) == 0) {
        for (int p = 1; p < j->processes; p++)
            for (int k = 0; k < TRACE_ROUNDS; k++) {
                RP_CHECK(rp_comm_recv(world, msg, 2, RP_I64, p * j->per_process, TRACE_TAG));
                msg[1] = (int64_t)rp_now_ns();
                RP_CHECK(rp_comm_send(world, msg, 2, RP_I64, p * j->per_process, TRACE_TAG));
            }
        return RP_OK;
    }
    int64_t best = INT64_MAX;
    for (int k = 0; k < TRACE_ROUNDS; k++) {
        int64_t sent = (int64_t)rp_now_ns();
        msg[0] = sent;
        msg[1] = 0;
        RP_CHECK(rp_comm_send(world, msg, 2, RP_I64, 0, TRACE_TAG));
        RP_CHECK(rp_comm_recv(world, msg, 2, RP_I64, 0, TRACE_TAG));
        int64_t got = (int64_t)rp_now_ns(), rtt = got - sent;
        if (rtt < best) {
            best = rtt;
            j->rtt_ns = rtt;
            j->bound_ns = (rtt + 1) / 2;
            j->offset_ns = msg[1] - (sent + got) / 2;
        }
    }
    return RP_OK;
}

static rp_status barrier_fn(rp_replica *rep, void *arg)
{
    (void)arg;
    return rp_barrier(rep);
}

/* "rank 3 (host)": the name of this process's track group. */
static void process_name(char *name, size_t size, int pid)
{
    char host[64] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(name, size, "rank %d (%s)", pid, host);
}

static void warn_dropped(void)
{
    if (rp_trace_dropped() > 0)
        rp_warn("tracing: %lld events were dropped (a thread's buffer was full)",
                (long long)rp_trace_dropped());
}

/* This process's file alone, without the others': `path` for a job of one process, else
 * `path`.rank<N>.json with no clock offset (bound -1, except on rank 0, whose clock is the
 * reference), for `replicator trace merge`; `why` says in the warning why there is no merge. */
static rp_status write_own(rp_replicator *r, const char *path, const char *why)
{
    int processes = r->reps[0].workers / r->n, pid = r->reps[0].worker / r->n;
    char name[128];
    process_name(name, sizeof name, pid);
    rp_trace_process proc = {pid, name, 0, pid == 0 ? 0 : -1, 0};
    warn_dropped();
    if (processes == 1) return rp_trace_write(path, &proc);
    char own[4200];
    snprintf(own, sizeof own, "%s.rank%d.json", path, pid);
    rp_warn("tracing: %s: %s%s (merge the ranks' files with `replicator trace merge %s "
            "%s.rank*.json`)",
            why, own, pid == 0 ? "" : " has no clock offset", path, path);
    return rp_trace_write(own, &proc);
}

rp_status rp_replicator_trace_write_local(rp_replicator *r, const char *path)
{
    if (!r || !path)
        return RP_ERROR(RP_ERR_INVALID, "rp_replicator_trace_write_local: NULL argument");
    if (r->server) return RP_OK;
    RP_CHECK(write_own(r, path, "written without the other processes"));
    if (r->reps[0].workers / r->n == 1) rp_info("trace: %s (open it in ui.perfetto.dev)", path);
    return RP_OK;
}

rp_status rp_replicator_trace_write(rp_replicator *r, const char *path)
{
    if (!r || !path) return RP_ERROR(RP_ERR_INVALID, "rp_replicator_trace_write: NULL argument");
    if (r->server) return RP_OK; /* a parameter-server rank runs no replica: nothing traced */
    /* A process may hold started workers only: it cannot join runs, so no clock exchange. */
    if (r->reps[0].workers / r->n > 1 && r->nroles > 1)
        return write_own(r, path, "a job of several roles across processes");
    clock_job j = {.per_process = r->n, .processes = r->reps[0].workers / r->n};
    if (j.processes > 1) RP_CHECK(rp_replicator_run(r, clock_fn, &j));
    int pid = r->reps[0].worker / r->n;
    char name[128];
    process_name(name, sizeof name, pid);
    rp_trace_process proc = {pid, name, j.offset_ns, j.bound_ns, j.rtt_ns};
    warn_dropped();
    if (j.processes == 1) return rp_trace_write(path, &proc);

    /* One file per process, then the first merges them if it can read them all (a shared
     * directory); otherwise they stay for `replicator trace merge`. */
    size_t len = strlen(path) + 32;
    char *mine = malloc(len), **inputs = calloc((size_t)j.processes, sizeof *inputs);
    rp_status status = RP_OK;
    if (!mine || !inputs) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the trace's file names");
        goto cleanup;
    }
    snprintf(mine, len, "%s.rank%d.json", path, pid);
    rp_status wrote = rp_trace_write(mine, &proc);
    RP_TRY(rp_replicator_run(r, barrier_fn, NULL));
    RP_TRY(wrote);
    if (pid != 0) goto cleanup;
    for (int p = 0; p < j.processes; p++) {
        inputs[p] = malloc(len);
        if (!inputs[p]) {
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the trace's file names");
            goto cleanup;
        }
        snprintf(inputs[p], len, "%s.rank%d.json", path, p);
        if (access(inputs[p], R_OK) != 0) {
            rp_warn("tracing: '%s' is not readable here: merge the ranks' files with "
                    "`replicator trace merge %s %s.rank*.json`",
                    inputs[p], path, path);
            goto cleanup;
        }
    }
    status = rp_trace_merge(path, (const char *const *)inputs, j.processes);
    if (status == RP_OK)
        for (int p = 0; p < j.processes; p++)
            unlink(inputs[p]);
cleanup:
    for (int p = 0; inputs && p < j.processes; p++)
        free(inputs[p]);
    free(inputs);
    free(mine);
    return status;
}
