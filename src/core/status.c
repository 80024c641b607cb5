/*
 * status.c - status names, the per-thread last-error message and the error
 * path's trail.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/core.h"

#define RP_ERROR_MAX 1024

static _Thread_local char last_message[RP_ERROR_MAX];
static _Thread_local rp_status last_status;

const char *rp_status_name(rp_status status)
{
    switch (status) {
    case RP_OK:
        return "OK";
    case RP_ERR_INVALID:
        return "INVALID";
    case RP_ERR_SHAPE:
        return "SHAPE";
    case RP_ERR_NOMEM:
        return "NOMEM";
    case RP_ERR_IO:
        return "IO";
    case RP_ERR_FORMAT:
        return "FORMAT";
    case RP_ERR_NUMERIC:
        return "NUMERIC";
    case RP_ERR_COMM:
        return "COMM";
    case RP_ERR_TIMEOUT:
        return "TIMEOUT";
    case RP_ERR_MISMATCH:
        return "MISMATCH";
    case RP_ERR_UNSUPPORTED:
        return "UNSUPPORTED";
    case RP_ERR_BACKEND:
        return "BACKEND";
    case RP_ERR_INTERRUPTED:
        return "INTERRUPTED";
    default:
        return "UNKNOWN";
    }
}

const char *rp_last_error(void)
{
    return last_message;
}

rp_status rp_last_status(void)
{
    return last_status;
}

void rp_error_clear(void)
{
    last_message[0] = '\0';
    last_status = RP_OK;
}

/*
 * Formats "file:line: message" into the thread's buffer. Only the base name
 * of the file is kept: full build paths add noise, not information.
 */
rp_status rp_error_set(rp_status status, const char *file, int line, const char *fmt, ...)
{
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    /* No file: the message already carries its origin (an error passed on from another thread). */
    int len = file ? snprintf(last_message, sizeof last_message, "%s:%d: ", base, line) : 0;
    if (len < 0 || len >= RP_ERROR_MAX) len = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message + len, sizeof last_message - (size_t)len, fmt, ap);
    va_end(ap);
    last_status = status;
    return status;
}

/*
 * The trail line for one level of the error path. Out of line, so the macros'
 * success path stays a single compare and branch. Not marked cold: GCC then
 * moves the call to a .cold section and gives every caller a stack frame for
 * it, where a plain call becomes a tail jump on the unlikely branch. The level
 * test comes first so that below debug nothing is formatted.
 */
rp_status rp_error_trail(rp_status status, const char *file, int line)
{
    if (rp_log_get_level() > RP_LOG_DEBUG) return status;
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file ? file : "?";
    rp_log(RP_LOG_DEBUG, "trail: %s:%d -> %d (%s)", base, line, status, rp_status_name(status));
    return status;
}
