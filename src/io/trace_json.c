/*
 * trace_json.c - the writing half of traces (replicator/trace.h): Chrome
 * trace-event JSON from the recorded buffers, and the merge of per-rank files.
 *
 * Events are printed directly (a traced run holds up to millions of them,
 * more than is worth building as a cJSON tree); the merge reads the inputs
 * with cJSON, which is fine for files this program wrote. Timestamps are the
 * monotonic clock plus the process's offset to rank 0, in microseconds with
 * three decimals, so per-rank files share one time line without re-basing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "replicator/trace.h"

/* Prints s as a JSON string body (the names are ours, but a thread name is the user's). */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

#define NAMED_MAX 1024

typedef struct write_ctx {
    FILE *f;
    const rp_trace_process *proc;
    bool first;
    int named[NAMED_MAX]; /* tids already named: a worker's thread may have two buffers (its
                             runs' thread and its started role's), the newer's name first */
    int nnamed;
} write_ctx;

/* Whether tid was named already; notes it if not. */
static bool named_before(write_ctx *w, int tid)
{
    for (int i = 0; i < w->nnamed; i++)
        if (w->named[i] == tid) return true;
    if (w->nnamed < NAMED_MAX) w->named[w->nnamed++] = tid;
    return false;
}

static void comma(write_ctx *w)
{
    fputs(w->first ? "\n" : ",\n", w->f);
    w->first = false;
}

static rp_status write_thread(int tid, const char *name, const rp_trace_event *ev, int64_t n,
                              void *arg)
{
    write_ctx *w = arg;
    FILE *f = w->f;
    int pid = w->proc->pid;
    if (!named_before(w, tid)) {
        comma(w);
        fprintf(f,
                "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"args\":{"
                "\"name\":\"",
                pid, tid);
        put_escaped(f, name);
        fputs("\"}}", f);
        comma(w);
        fprintf(f,
                "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"ts\":0,"
                "\"args\":{\"sort_index\":%d}}",
                pid, tid, tid);
    }
    for (int64_t i = 0; i < n; i++) {
        const rp_trace_event *e = &ev[i];
        int64_t ts = (int64_t)e->start_ns + w->proc->clock_offset_ns;
        comma(w);
        fprintf(f, "{\"ph\":\"X\",\"name\":\"");
        put_escaped(f, e->name ? e->name : "?");
        fprintf(f, "\",\"pid\":%d,\"tid\":%d,\"ts\":%lld.%03lld,\"dur\":%llu.%03llu", pid, tid,
                (long long)(ts / 1000), (long long)(ts % 1000),
                (unsigned long long)(e->dur_ns / 1000), (unsigned long long)(e->dur_ns % 1000));
        if (e->bytes >= 0 || e->seq >= 0 || e->op) {
            const char *sep = "";
            fputs(",\"args\":{", f);
            if (e->bytes >= 0) {
                fprintf(f, "\"bytes\":%lld", (long long)e->bytes);
                sep = ",";
            }
            if (e->seq >= 0) {
                fprintf(f, "%s\"seq\":%lld", sep, (long long)e->seq);
                sep = ",";
            }
            if (e->op) {
                fprintf(f, "%s\"op\":\"", sep);
                put_escaped(f, e->op);
                fputc('"', f);
            }
            fputc('}', f);
        }
        fputc('}', f);
    }
    return RP_OK;
}

/* Closes f and renames tmp over path; on any failure removes tmp. */
static rp_status finish_file(FILE *f, const char *tmp, const char *path)
{
    bool bad = ferror(f) != 0;
    int err = bad ? EIO : 0;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = true;
        err = errno;
    }
    if (bad) {
        unlink(tmp);
        return RP_ERROR(RP_ERR_IO, "cannot write the trace file '%s': %s", path, strerror(err));
    }
    return RP_OK;
}

static rp_status open_tmp(const char *path, char **tmp, FILE **f)
{
    size_t len = strlen(path) + 32;
    *tmp = malloc(len);
    if (!*tmp) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a path for '%s'", path);
    snprintf(*tmp, len, "%s.tmp.%d", path, (int)getpid());
    *f = fopen(*tmp, "w");
    if (!*f) {
        rp_status st =
            RP_ERROR(RP_ERR_IO, "cannot create the trace file '%s': %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return st;
    }
    return RP_OK;
}

rp_status rp_trace_write(const char *path, const rp_trace_process *proc)
{
    if (!path || !proc) return RP_ERROR(RP_ERR_INVALID, "rp_trace_write: NULL path or process");
    char *tmp;
    FILE *f;
    RP_CHECK(open_tmp(path, &tmp, &f));
    write_ctx *w = calloc(1, sizeof *w);
    if (!w) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        return RP_ERROR(RP_ERR_NOMEM, "cannot write the trace file '%s'", path);
    }
    w->f = f;
    w->proc = proc;
    w->first = true;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    comma(w);
    fprintf(f,
            "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"ts\":0,\"args\":{"
            "\"name\":\"",
            proc->pid);
    put_escaped(f, proc->name ? proc->name : "");
    fputs("\"}}", f);
    comma(w);
    fprintf(f,
            "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"ts\":0,"
            "\"args\":{\"sort_index\":%d}}",
            proc->pid, proc->pid);
    rp_status status = rp_trace_each_thread(write_thread, w);
    fprintf(f,
            "\n],\n\"otherData\":{\"replicator\":\"trace\",\"ranks\":[{\"rank\":%d,"
            "\"clock_offset_us\":%.3f,\"clock_bound_us\":%.3f,\"clock_rtt_us\":%.3f,"
            "\"events\":%lld,\"dropped\":%lld}]}}\n",
            proc->pid, (double)proc->clock_offset_ns * 1e-3, (double)proc->clock_bound_ns * 1e-3,
            (double)proc->clock_rtt_ns * 1e-3, (long long)rp_trace_recorded(),
            (long long)rp_trace_dropped());
    rp_status st = finish_file(f, tmp, path);
    free(tmp);
    free(w);
    return status != RP_OK ? status : st;
}

/* Reads the whole file at path into a NUL-terminated buffer. */
static rp_status read_text(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return RP_ERROR(RP_ERR_IO, "cannot open the trace file '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *more = realloc(buf, cap * 2);
        if (!more) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        cap *= 2;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf) return RP_ERROR(RP_ERR_NOMEM, "cannot read the trace file '%s' into memory", path);
    if (bad) {
        free(buf);
        return RP_ERROR(RP_ERR_IO, "cannot read the trace file '%s'", path);
    }
    buf[n] = '\0';
    *out = buf;
    return RP_OK;
}

rp_status rp_trace_merge(const char *out, const char *const *inputs, int n)
{
    if (!out || !inputs || n < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_trace_merge: an output and at least one input");
    char *tmp = NULL;
    FILE *f = NULL;
    cJSON *ranks = cJSON_CreateArray();
    if (!ranks) return RP_ERROR(RP_ERR_NOMEM, "cannot merge traces into '%s'", out);
    rp_status status = open_tmp(out, &tmp, &f);
    if (status != RP_OK) {
        cJSON_Delete(ranks);
        return status;
    }
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    bool first = true;
    for (int i = 0; i < n && status == RP_OK; i++) {
        char *text = NULL;
        RP_TRY(read_text(inputs[i], &text));
        cJSON *root = cJSON_Parse(text);
        free(text);
        const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
        const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
        const cJSON *their = cJSON_GetObjectItemCaseSensitive(other, "ranks");
        if (!cJSON_IsArray(events) || !cJSON_IsArray(their)) {
            cJSON_Delete(root);
            status = RP_ERROR(RP_ERR_FORMAT,
                              "'%s' is not a trace file written by replicator (no traceEvents "
                              "array or no otherData.ranks)",
                              inputs[i]);
            goto cleanup;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, events)
        {
            char *s = cJSON_PrintUnformatted(e);
            if (!s) {
                cJSON_Delete(root);
                status = RP_ERROR(RP_ERR_NOMEM, "cannot merge traces into '%s'", out);
                goto cleanup;
            }
            fputs(first ? "\n" : ",\n", f);
            fputs(s, f);
            first = false;
            cJSON_free(s);
        }
        const cJSON *r;
        cJSON_ArrayForEach(r, their)
        {
            cJSON *copy = cJSON_Duplicate(r, 1);
            if (copy) cJSON_AddItemToArray(ranks, copy);
        }
        cJSON_Delete(root);
    }
    char *ranks_text = cJSON_PrintUnformatted(ranks);
    fprintf(f, "\n],\n\"otherData\":{\"replicator\":\"trace\",\"ranks\":%s}}\n",
            ranks_text ? ranks_text : "[]");
    cJSON_free(ranks_text);
cleanup:
    cJSON_Delete(ranks);
    if (status != RP_OK) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        return status;
    }
    status = finish_file(f, tmp, out);
    free(tmp);
    return status;
}
