/*
 * file_internal.h - writing a whole file atomically, for the library's small
 * writers above core (IDX files in data/, PNG images in io/).
 */
#ifndef RP_CORE_FILE_INTERNAL_H
#define RP_CORE_FILE_INTERNAL_H

#include <stddef.h>

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
 * file (a directory or device there is refused, never replaced). `what`
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

#endif
