/*
 * trace_json.c - the writing half of traces (replicator/trace.h): Chrome
 * trace-event JSON from the recorded buffers, and the merge of per-rank files.
 *
 * Events are printed directly (a traced run holds up to millions of them,
 * more than is worth building as a cJSON tree); the merge reads the inputs
 * with cJSON, which is fine for files this program wrote (regular files of
 * at most RP_TRACE_MERGE_MAX_BYTES each). Both write through core's atomic
 * file writer: a temporary file renamed over the path, which must be absent
 * or a regular file (a FIFO or /dev/null is refused, never replaced). Timestamps are the
 * monotonic clock plus the process's offset to rank 0, in microseconds with
 * three decimals, so per-rank files share one time line without re-basing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/file_internal.h"
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
    core_file_out *out;
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
        /* A failed write (a full disk) ends the file here, with the write's own errno. */
        RP_CHECK(core_file_out_check(w->out));
    }
    return core_file_out_check(w->out);
}

rp_status rp_trace_write(const char *path, const rp_trace_process *proc)
{
    if (!path || !proc) return RP_ERROR(RP_ERR_INVALID, "rp_trace_write: NULL path or process");
    core_file_out out;
    RP_CHECK(core_file_out_open(&out, path, "trace file"));
    FILE *f = out.f;
    write_ctx *w = calloc(1, sizeof *w);
    if (!w) {
        core_file_out_abort(&out);
        return RP_ERROR(RP_ERR_NOMEM, "cannot write the trace file '%s'", path);
    }
    w->out = &out;
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
    free(w);
    if (status != RP_OK) {
        core_file_out_abort(&out);
        return status;
    }
    fprintf(f,
            "\n],\n\"otherData\":{\"replicator\":\"trace\",\"ranks\":[{\"rank\":%d,"
            "\"clock_offset_us\":%.3f,\"clock_bound_us\":%.3f,\"clock_rtt_us\":%.3f,"
            "\"events\":%lld,\"dropped\":%lld}]}}\n",
            proc->pid, (double)proc->clock_offset_ns * 1e-3, (double)proc->clock_bound_ns * 1e-3,
            (double)proc->clock_rtt_ns * 1e-3, (long long)rp_trace_recorded(),
            (long long)rp_trace_dropped());
    return core_file_out_commit(&out);
}

/*
 * Reads the whole trace file at path into a NUL-terminated buffer: a regular file (a FIFO would
 * block for ever, /dev/zero never ends) of at most RP_TRACE_MERGE_MAX_BYTES, read up to the size
 * it had when opened.
 */
static rp_status read_text(const char *path, char **out)
{
    *out = NULL;
    int fd;
    RP_CHECK(core_file_open_regular(path, "trace file", &fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return RP_ERROR(RP_ERR_IO, "cannot read trace file %s: %s", path, strerror(err));
    }
    if ((uint64_t)st.st_size > (uint64_t)RP_TRACE_MERGE_MAX_BYTES) {
        close(fd);
        return RP_ERROR(RP_ERR_IO,
                        "cannot merge trace file %s: it is %lld bytes, over the %lld bytes "
                        "(RP_TRACE_MERGE_MAX_BYTES) that a merge reads from one file",
                        path, (long long)st.st_size, (long long)RP_TRACE_MERGE_MAX_BYTES);
    }
    size_t size = (size_t)st.st_size, n = 0;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return RP_ERROR(RP_ERR_NOMEM, "cannot read trace file %s (%zu bytes) into memory", path,
                        size);
    }
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            close(fd);
            free(buf);
            return RP_ERROR(RP_ERR_IO, "cannot read trace file %s: %s", path, strerror(err));
        }
        if (r == 0) break; /* it shrank: what is there */
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    return RP_OK;
}

rp_status rp_trace_merge(const char *out, const char *const *inputs, int n)
{
    if (!out || !inputs || n < 1)
        return RP_ERROR(RP_ERR_INVALID, "rp_trace_merge: an output and at least one input");
    core_file_out file;
    cJSON *ranks = cJSON_CreateArray();
    if (!ranks) return RP_ERROR(RP_ERR_NOMEM, "cannot merge traces into '%s'", out);
    rp_status status = core_file_out_open(&file, out, "trace file");
    if (status != RP_OK) {
        cJSON_Delete(ranks);
        return status;
    }
    FILE *f = file.f;
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
            status = core_file_out_check(&file);
            if (status != RP_OK) {
                cJSON_Delete(root);
                goto cleanup;
            }
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
        core_file_out_abort(&file);
        return status;
    }
    return core_file_out_commit(&file);
}
