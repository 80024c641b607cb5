/*
 * file.c - atomic whole-file writes (see file_internal.h).
 *
 * The temporary file lives in the destination's directory because rename is
 * only atomic within one file system; it is fsynced before the rename so that
 * the name never points at a half-written file, and the directory is fsynced
 * after it so that the rename itself survives a crash. (The checkpoint writer
 * in io/ follows the same steps with messages of its own.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_internal.h"

/* Writes all n bytes, retrying short writes and interrupted calls. */
static rp_status write_all(int fd, const void *data, size_t n, const char *what, const char *path,
                           const char *tmp)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            return RP_ERROR(RP_ERR_IO, "cannot write %s %s: writing %s failed: %s", what, path, tmp,
                            w < 0 ? strerror(errno) : "no progress");
        }
        p += w;
        n -= (size_t)w;
    }
    return RP_OK;
}

/* fsyncs the directory holding `path`, so that a rename into it is durable. */
static rp_status sync_directory(const char *path, const char *what)
{
    rp_status status = RP_OK;
    size_t len = strlen(path);
    const char *slash = strrchr(path, '/');
    char *dir = rp_alloc(len + 2);
    if (!dir) return rp_last_status();
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        status = RP_ERROR(RP_ERR_IO,
                          "%s %s was written, but its directory %s cannot be opened to sync it: %s",
                          what, path, dir, strerror(errno));
        goto cleanup;
    }
    /* Some file systems cannot sync a directory (EINVAL); there is nothing more to do there. */
    if (fsync(fd) != 0 && errno != EINVAL) {
        status = RP_ERROR(RP_ERR_IO, "%s %s was written, but syncing its directory %s failed: %s",
                          what, path, dir, strerror(errno));
    }
    close(fd);
cleanup:
    rp_free(dir);
    return status;
}

rp_status core_file_write_atomic(const char *path, const char *what, const core_file_piece *pieces,
                                 int n_pieces)
{
    static unsigned long tmp_counter;
    rp_status status = RP_OK;
    char *tmp = NULL;
    int fd = -1;
    bool created = false;

    if (!what) what = "file";
    if (!path || !*path || (n_pieces > 0 && !pieces) || n_pieces < 0) {
        return RP_ERROR(RP_ERR_INVALID, "cannot write %s: path %s, %d pieces at %p", what,
                        path ? (*path ? path : "\"\"") : "NULL", n_pieces, (const void *)pieces);
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        return RP_ERROR(RP_ERR_IO, "cannot write %s %s: it exists and is not a regular file", what,
                        path);
    }

    size_t tmp_size = strlen(path) + 64;
    tmp = rp_alloc(tmp_size);
    if (!tmp) return rp_last_status();
    snprintf(tmp, tmp_size, "%s.tmp.%ld.%lu", path, (long)getpid(),
             __atomic_fetch_add(&tmp_counter, 1, __ATOMIC_RELAXED));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot write %s %s: cannot create temporary file %s: %s",
                          what, path, tmp, strerror(errno));
        goto cleanup;
    }
    created = true;
    for (int i = 0; i < n_pieces; i++) {
        RP_TRY(write_all(fd, pieces[i].data, pieces[i].len, what, path, tmp));
    }
    if (fsync(fd) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot write %s %s: fsync of %s failed: %s", what, path, tmp,
                          strerror(errno));
        goto cleanup;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot write %s %s: closing %s failed: %s", what, path, tmp,
                          strerror(errno));
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot write %s %s: renaming %s over it failed: %s", what,
                          path, tmp, strerror(errno));
        goto cleanup;
    }
    created = false;
    RP_TRY(sync_directory(path, what));
cleanup:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    rp_free(tmp);
    return status;
}
