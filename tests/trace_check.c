/*
 * trace_check.c - checks a trace file written by `replicator ... --trace`
 * (tests/cli_trace.sh runs it):
 *
 *   trace_check FILE WORKERS MIN_STEPS [RANKS]
 *
 *  - the file parses (cJSON); every event has name, ph, ts, pid and tid, and
 *    every "X" event a dur >= 0;
 *  - every process has a process_name ("rank N (host)") and every track a
 *    thread_name; RANKS processes (default 1);
 *  - the X events of each track (pid, tid) nest exactly (no partial overlap);
 *  - WORKERS tracks hold "step" events, each at least MIN_STEPS and all the same
 *    count, and every step holds data, forward, backward, optimizer and a
 *    collective with bytes, seq and op args (MIN_STEPS 0: steps' phases and counts
 *    are not checked, only that WORKERS tracks hold events);
 *  - otherData.ranks states each rank's clock offset and bound; every offset is
 *    within its bound (the ranks share a clock here, so the true offset is 0),
 *    and the bound is under 50 ms;
 *  - across ranks, the gradient all-reduces (>= 4 KiB) of one sequence number
 *    overlap in time within the two ranks' bounds: neither ended before the
 *    other began.
 * Prints "ok: ..." and exits 0, or prints what failed and exits 1.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct event {
    const char *name;
    int pid, tid;
    int64_t ts, end; /* nanoseconds */
    int64_t bytes, seq;
    bool op;
} event;

static int fail(const char *what)
{
    printf("FAIL: %s\n", what);
    return 1;
}

static const cJSON *item(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* Microseconds with nanosecond decimals to integer nanoseconds. */
static int64_t ns_of(double us)
{
    return (int64_t)(us * 1000.0 + (us >= 0 ? 0.5 : -0.5));
}

static int by_track_then_time(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end; /* the longer first: it is the parent */
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: trace_check FILE WORKERS MIN_STEPS [RANKS]\n");
        return 2;
    }
    int workers = atoi(argv[2]), min_steps = atoi(argv[3]), ranks = argc > 4 ? atoi(argv[4]) : 1;
    char *text = read_all(argv[1]);
    if (!text) return fail("cannot read the trace file");
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return fail("the trace is not JSON");
    const cJSON *events = item(root, "traceEvents"), *e;
    if (!cJSON_IsArray(events)) return fail("no traceEvents array");
    int n_all = cJSON_GetArraySize(events), n = 0;
    event *ev = calloc((size_t)n_all + 1, sizeof *ev);
    int process_names[64] = {0}, thread_names = 0;
    char msg[512];
    cJSON_ArrayForEach(e, events)
    {
        const char *name = cJSON_GetStringValue(item(e, "name"));
        const char *ph = cJSON_GetStringValue(item(e, "ph"));
        if (!name || !ph || !cJSON_IsNumber(item(e, "ts")) || !cJSON_IsNumber(item(e, "pid")) ||
            !cJSON_IsNumber(item(e, "tid")))
            return fail("an event lacks name, ph, ts, pid or tid");
        int pid = item(e, "pid")->valueint;
        if (pid < 0 || pid >= 64) return fail("a pid out of range");
        if (!strcmp(ph, "M")) {
            const char *value = cJSON_GetStringValue(item(item(e, "args"), "name"));
            if (!strcmp(name, "process_name")) {
                snprintf(msg, sizeof msg, "rank %d (", pid);
                if (!value || strncmp(value, msg, strlen(msg)) != 0)
                    return fail("a process_name is not \"rank N (host)\"");
                process_names[pid]++;
            } else if (!strcmp(name, "thread_name")) {
                if (!value || !value[0]) return fail("an empty thread_name");
                thread_names++;
            }
            continue;
        }
        if (strcmp(ph, "X") != 0) return fail("an event that is neither M nor X");
        const cJSON *dur = item(e, "dur");
        if (!cJSON_IsNumber(dur) || dur->valuedouble < 0) return fail("an X event without dur");
        event *x = &ev[n++];
        x->name = name;
        x->pid = pid;
        x->tid = item(e, "tid")->valueint;
        x->ts = ns_of(item(e, "ts")->valuedouble);
        x->end = x->ts + ns_of(dur->valuedouble);
        const cJSON *args = item(e, "args");
        x->bytes =
            cJSON_IsNumber(item(args, "bytes")) ? (int64_t)item(args, "bytes")->valuedouble : -1;
        x->seq = cJSON_IsNumber(item(args, "seq")) ? (int64_t)item(args, "seq")->valuedouble : -1;
        x->op = cJSON_IsString(item(args, "op"));
    }
    for (int p = 0; p < ranks; p++)
        if (process_names[p] != 1) {
            snprintf(msg, sizeof msg, "rank %d has %d process_name events", p, process_names[p]);
            return fail(msg);
        }
    qsort(ev, (size_t)n, sizeof *ev, by_track_then_time);

    /* Nesting per track, and the steps' phases. */
    int tracks = 0, stepped = 0, steps_first = -1;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && ev[j].pid == ev[i].pid && ev[j].tid == ev[i].tid)
            j++;
        tracks++;
        int stack[64], depth = 0, steps = 0;
        for (int k = i; k < j; k++) {
            while (depth > 0 && ev[stack[depth - 1]].end <= ev[k].ts)
                depth--;
            if (depth > 0 && ev[k].end > ev[stack[depth - 1]].end) {
                snprintf(msg, sizeof msg,
                         "track %d/%d: '%s' at %lld ns overlaps '%s' without nesting in it",
                         ev[k].pid, ev[k].tid, ev[k].name, (long long)ev[k].ts,
                         ev[stack[depth - 1]].name);
                return fail(msg);
            }
            if (depth == 64) return fail("events nest deeper than 64");
            stack[depth++] = k;
            if (strcmp(ev[k].name, "step") != 0) continue;
            steps++;
            bool data = false, fwd = false, bwd = false, opt = false, coll = false;
            for (int m = k + 1; m < j && ev[m].ts < ev[k].end; m++) {
                data |= !strcmp(ev[m].name, "data");
                fwd |= !strcmp(ev[m].name, "forward");
                bwd |= !strcmp(ev[m].name, "backward");
                opt |= !strcmp(ev[m].name, "optimizer");
                coll |= !strcmp(ev[m].name, "all_reduce") && ev[m].bytes > 0 && ev[m].seq >= 0 &&
                        ev[m].op;
            }
            if (min_steps > 0 && !(data && fwd && bwd && opt && coll)) {
                snprintf(msg, sizeof msg,
                         "track %d/%d: a step lacks a phase (data %d forward %d backward %d "
                         "optimizer %d all_reduce %d)",
                         ev[k].pid, ev[k].tid, data, fwd, bwd, opt, coll);
                return fail(msg);
            }
        }
        if (steps > 0) {
            stepped++;
            if (steps_first < 0) steps_first = steps;
            /* MIN_STEPS 0 (async runs: each replica takes the steps it gets) checks no counts. */
            if (min_steps > 0 && (steps != steps_first || steps < min_steps)) {
                snprintf(msg, sizeof msg, "track %d/%d has %d steps (first track %d, at least %d)",
                         ev[i].pid, ev[i].tid, steps, steps_first, min_steps);
                return fail(msg);
            }
        }
        i = j;
    }
    if (min_steps > 0 ? stepped != workers : tracks < workers) {
        snprintf(msg, sizeof msg, "%d tracks with steps, %d in all; expected %d workers", stepped,
                 tracks, workers);
        return fail(msg);
    }
    if (thread_names < tracks) return fail("a track without a thread_name");

    /* Clocks. */
    const cJSON *rank_list = item(item(root, "otherData"), "ranks"), *r;
    if (cJSON_GetArraySize(rank_list) != ranks) return fail("otherData.ranks: not one per rank");
    double bound_us[64] = {0}, worst = 0;
    cJSON_ArrayForEach(r, rank_list)
    {
        const cJSON *rank = item(r, "rank"), *off = item(r, "clock_offset_us"),
                    *bound = item(r, "clock_bound_us");
        if (!cJSON_IsNumber(rank) || !cJSON_IsNumber(off) || !cJSON_IsNumber(bound) ||
            rank->valueint < 0 || rank->valueint >= 64)
            return fail("otherData.ranks: an entry without rank, clock_offset_us, clock_bound_us");
        if (rank->valueint > 0 && !(bound->valuedouble > 0))
            return fail("a rank other than 0 states no clock bound");
        if (off->valuedouble > bound->valuedouble || -off->valuedouble > bound->valuedouble ||
            bound->valuedouble > 50000) {
            snprintf(msg, sizeof msg, "rank %d: clock offset %.3f us, bound %.3f us",
                     rank->valueint, off->valuedouble, bound->valuedouble);
            return fail(msg);
        }
        bound_us[rank->valueint] = bound->valuedouble;
        if (bound->valuedouble > worst) worst = bound->valuedouble;
    }
    int matched = 0;
    for (int a = 0; a < n; a++) {
        if (ev[a].pid != 0 || strcmp(ev[a].name, "all_reduce") || ev[a].bytes < 4096) continue;
        for (int b = 0; b < n; b++) {
            if (ev[b].pid == 0 || strcmp(ev[b].name, "all_reduce") || ev[b].seq != ev[a].seq ||
                ev[b].bytes != ev[a].bytes)
                continue;
            int64_t slack = (int64_t)((bound_us[0] + bound_us[ev[b].pid]) * 1000.0) + 1000;
            if (ev[a].end + slack < ev[b].ts || ev[b].end + slack < ev[a].ts) {
                snprintf(msg, sizeof msg,
                         "all_reduce seq %lld: rank 0 [%lld, %lld] and rank %d [%lld, %lld] ns "
                         "do not overlap",
                         (long long)ev[a].seq, (long long)ev[a].ts, (long long)ev[a].end, ev[b].pid,
                         (long long)ev[b].ts, (long long)ev[b].end);
                return fail(msg);
            }
            matched++;
        }
    }
    if (ranks > 1 && matched == 0) return fail("no all-reduce matched across ranks");
    printf("ok: %d events on %d tracks, %d with %d steps each, nested; %d ranks, clock bound "
           "%.1f us, %d cross-rank all-reduces aligned\n",
           n, tracks, stepped, steps_first, ranks, worst, matched);
    cJSON_Delete(root);
    free(ev);
    return 0;
}
