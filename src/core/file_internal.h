/*
 * file_internal.h - writing a whole file atomically, for the library's small
 * writers above core (IDX files in data/, PNG images in io/), cleaning up
 * after writers that were killed, and opening a file that must be regular
 * without blocking on a FIFO.
 */
#ifndef RP_CORE_FILE_INTERNAL_H
#define RP_CORE_FILE_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "replicator/core.h"

/* One piece of a file's contents: `len` bytes at `data` (data may be NULL when len is 0). */
typedef struct core_file_piece {
    const void *data;
    size_t len;
} core_file_piece;

/*
 * Writes the pieces, in order, as the new contents of `path`: through
 * "<path>.tmp.<pid>.<n>" in the same directory, fsynced, renamed over
 * `path`, then the directory fsynced. `path` must be absent or a regular
 * file (a FIFO, a device or a directory there is refused, never replaced:
 * rp_file_check_writable's rule, checked again before the rename). `what`
 * ("PNG image", "IDX file") starts each error message.
 *
 * Errors: RP_ERR_IO naming the path (and the temporary file) and the system's
 * reason; RP_ERR_NOMEM. On any error the temporary file is removed and
 * `path` is unchanged, except when only the final directory fsync fails: the
 * new file is then in place and the message says so. Thread-safe: concurrent
 * writers of one path each use their own temporary file; the last rename wins.
 */
rp_status core_file_write_atomic(const char *path, const char *what, const core_file_piece *pieces,
                                 int n_pieces);

/*
 * The rule of every writer that renames a new file over `path`: RP_OK if
 * `path` is absent or a regular file (symbolic links followed); otherwise
 * RP_ERR_IO "cannot write <what> <path>: it is a FIFO, not a regular file
 * (refusing to replace it)" (a device, a directory, a socket), or the
 * system's reason it cannot be looked at. Thread-safe.
 */
rp_status core_file_check_replaceable(const char *path, const char *what);

/*
 * A file written as a stream, with core_file_write_atomic's steps and rule:
 * open makes "<path>.tmp.<pid>.<n>" beside `path` (refusing a path that
 * exists and is not a regular file, as rp_file_check_writable does) and
 * gives a buffered FILE for it; commit flushes, fsyncs and closes it,
 * checks the path again and renames the temporary file over it; abort
 * removes it. Every error names `what`, the path, the temporary file and the
 * system's reason (a full file system says so, not "Input/output error").
 * Not thread-safe: one writer per core_file_out.
 */
typedef struct core_file_out {
    FILE *f;          /* the contents go here */
    char *path, *tmp; /* owned copies */
    const char *what; /* "trace file" (a literal: not copied) */
    int err;          /* errno of the first write that failed; 0: none yet */
} core_file_out;

/* Errors: RP_ERR_INVALID (NULL or empty path), RP_ERR_IO, RP_ERR_NOMEM; on error nothing is left.
 */
rp_status core_file_out_open(core_file_out *o, const char *path, const char *what);
/*
 * RP_ERR_IO once a write to o->f failed ("cannot write trace file t.json:
 * writing t.json.tmp.7.0 failed: No space left on device (the file system is
 * full)"); call it after each record, so that errno is still the failed
 * write's and a full disk stops the writer early. Otherwise RP_OK.
 */
rp_status core_file_out_check(core_file_out *o);
/* Puts the file in place; on any error removes the temporary file. Frees o's resources either
 * way. Errors: RP_ERR_IO as core_file_write_atomic's. */
rp_status core_file_out_commit(core_file_out *o);
/* Removes the temporary file and frees o's resources (nothing if open failed or after commit). */
void core_file_out_abort(core_file_out *o);

/*
 * Opens `path` for reading (O_RDONLY | O_CLOEXEC) if it is a regular file,
 * into *fd. A FIFO, a device or a directory is refused by name before
 * anything can block: the open is non-blocking (open() on a FIFO with no
 * writer waits forever otherwise), fstat() checks the type, and only then
 * is the descriptor made blocking. Symbolic links are followed. `what`
 * ("checkpoint", "IDX file") names the file in messages.
 *
 * Errors: RP_ERR_IO: "cannot open <what> <path>: <reason>", or "cannot read
 * <what> <path>: it is a FIFO, not a regular file" (a directory, a device,
 * ...). On error *fd is -1 and nothing is left open. Thread-safe.
 */
rp_status core_file_open_regular(const char *path, const char *what, int *fd);

/*
 * Removes the temporary files that writers killed mid-write left beside
 * `path`: "<path>.tmp.<pid>.<n>" (the names core_file_write_atomic and the
 * checkpoint writer use) whose pid is not this process's and names no live
 * process. Files of this process and of live ones (a concurrent writer) are
 * kept, and so is anything not named exactly so. A pid that was reused by
 * a new process keeps its file until that process ends. Best effort: a
 * directory that cannot be read or a file that cannot be removed is left as
 * it is; returns the number of files removed. Thread-safe.
 */
int core_file_remove_stale_temps(const char *path);

#endif
