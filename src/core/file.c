/*
 * file.c - atomic whole-file writes, the cleanup of temporary files that a
 * killed writer left, and opening a regular file without blocking on a FIFO
 * (see file_internal.h).
 *
 * The temporary file lives in the destination's directory because rename is
 * only atomic within one file system; it is fsynced before the rename so that
 * the name never points at a half-written file, and the directory is fsynced
 * after it so that the rename itself survives a crash. (The checkpoint writer
 * in io/ follows the same steps with messages of its own.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

/* The directory part of path ("." for none) and where its last component starts. */
static char *split_path(const char *path, const char **base)
{
    size_t len = strlen(path);
    const char *slash = strrchr(path, '/');
    char *dir = rp_alloc(len + 2);
    if (!dir) return NULL;
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    *base = slash ? slash + 1 : path;
    return dir;
}

/* fsyncs the directory holding `path`, so that a rename into it is durable. */
static rp_status sync_directory(const char *path, const char *what)
{
    rp_status status = RP_OK;
    const char *base;
    char *dir = split_path(path, &base);
    if (!dir) return rp_last_status();
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

/* The pid in "<base>.tmp.<pid>.<n>", or 0 if `name` is not exactly that. */
static long temp_pid(const char *name, const char *base, size_t base_len)
{
    if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp.", 5) != 0) return 0;
    const char *p = name + base_len + 5;
    long pid = 0;
    const char *digits = p;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (pid > 100000000L) return 0; /* no pid is that large */
        pid = pid * 10 + (*p - '0');
    }
    if (p == digits || *p != '.' || p[1] == '\0') return 0;
    for (p++; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return pid;
}

int core_file_remove_stale_temps(const char *path)
{
    if (!path || !*path) return 0;
    const char *base;
    char *dir = split_path(path, &base);
    if (!dir) return 0;
    size_t base_len = strlen(base);
    int removed = 0;
    DIR *d = base_len > 0 ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        long pid = temp_pid(e->d_name, base, base_len);
        if (pid <= 0 || pid == (long)getpid()) continue;
        /* Alive, or alive under another user (EPERM): a writer may still be at work. */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            rp_debug("removed %s/%s, left by process %ld that ended mid-write", dir, e->d_name,
                     pid);
            removed++;
        }
    }
    if (d) closedir(d);
    rp_free(dir);
    return removed;
}

/* "FIFO", "directory", ...: what a non-regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "FIFO";
    if (S_ISDIR(mode)) return "directory";
    if (S_ISCHR(mode)) return "character device";
    if (S_ISBLK(mode)) return "block device";
    if (S_ISSOCK(mode)) return "socket";
    return "special file";
}

rp_status core_file_open_regular(const char *path, const char *what, int *fd)
{
    if (!fd) return RP_ERROR(RP_ERR_INVALID, "core_file_open_regular: fd is NULL");
    *fd = -1;
    if (!what) what = "file";
    if (!path || !*path)
        return RP_ERROR(RP_ERR_INVALID, "cannot open %s: the path is %s", what,
                        path ? "empty" : "NULL");
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0) return RP_ERROR(RP_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int err = errno;
        close(f);
        return RP_ERROR(RP_ERR_IO, "cannot read %s %s: %s", what, path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return RP_ERROR(RP_ERR_IO, "cannot read %s %s: it is a %s, not a regular file", what, path,
                        file_kind(st.st_mode));
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(f);
        return RP_ERROR(RP_ERR_IO, "cannot read %s %s: %s", what, path, strerror(err));
    }
    *fd = f;
    return RP_OK;
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

    core_file_remove_stale_temps(path);
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
