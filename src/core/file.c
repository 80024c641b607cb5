/*
 * file.c - atomic whole-file writes (from pieces, or streamed), the rule
 * that a write never replaces anything but a regular file, the cleanup of
 * temporary files that a killed writer left, and opening a regular file
 * without blocking on a FIFO (see file_internal.h).
 *
 * The temporary file lives in the destination's directory because rename is
 * only atomic within one file system; it is fsynced before the rename so that
 * the name never points at a half-written file, and the directory is fsynced
 * after it so that the rename itself survives a crash. (The checkpoint writer
 * in io/ follows the same steps with messages of its own, and the same rule.)
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

/* The system's reason for a failed write, saying what the two "disk full" errors mean. */
static const char *write_reason(int err, char *buf, size_t size)
{
    const char *means = err == ENOSPC   ? " (the file system is full)"
                        : err == EDQUOT ? " (the disk quota is used up)"
                        : err == EFBIG  ? " (over the largest file this process may write)"
                                        : "";
    snprintf(buf, size, "%s%s", strerror(err), means);
    return buf;
}

rp_status core_file_check_replaceable(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return RP_OK;
        return RP_ERROR(RP_ERR_IO, "cannot write %s %s: %s", what, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return RP_ERROR(RP_ERR_IO,
                        "cannot write %s %s: it is a %s, not a regular file (refusing to replace "
                        "it)",
                        what, path, file_kind(st.st_mode));
    return RP_OK;
}

void core_file_out_abort(core_file_out *o)
{
    if (!o) return;
    if (o->f) {
        fclose(o->f);
        unlink(o->tmp);
    }
    o->f = NULL;
    rp_free(o->tmp);
    rp_free(o->path);
    o->tmp = o->path = NULL;
}

rp_status core_file_out_open(core_file_out *o, const char *path, const char *what)
{
    static unsigned long tmp_counter;
    if (!o) return RP_ERROR(RP_ERR_INVALID, "core_file_out_open: NULL writer");
    memset(o, 0, sizeof *o);
    o->what = what ? what : "file";
    if (!path || !*path)
        return RP_ERROR(RP_ERR_INVALID, "cannot write %s: the path is %s", o->what,
                        path ? "empty" : "NULL");
    RP_CHECK(core_file_check_replaceable(path, o->what));
    core_file_remove_stale_temps(path);
    size_t len = strlen(path);
    o->path = rp_alloc(len + 1);
    o->tmp = rp_alloc(len + 64);
    if (!o->path || !o->tmp) {
        core_file_out_abort(o);
        return RP_ERROR(RP_ERR_NOMEM, "cannot write %s %s: no memory for its name", o->what, path);
    }
    memcpy(o->path, path, len + 1);
    snprintf(o->tmp, len + 64, "%s.tmp.%ld.%lu", path, (long)getpid(),
             __atomic_fetch_add(&tmp_counter, 1, __ATOMIC_RELAXED));
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rp_status st =
            RP_ERROR(RP_ERR_IO, "cannot write %s %s: cannot create temporary file %s: %s", o->what,
                     path, o->tmp, strerror(errno));
        core_file_out_abort(o);
        return st;
    }
    o->f = fdopen(fd, "w");
    if (!o->f) {
        rp_status st =
            RP_ERROR(RP_ERR_IO, "cannot write %s %s: %s", o->what, path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        core_file_out_abort(o);
        return st;
    }
    return RP_OK;
}

/* The error of a failed write (errno err) to o's temporary file. */
static rp_status write_failed(core_file_out *o, const char *step, int err)
{
    char why[160];
    if (!o->err) o->err = err ? err : EIO;
    return RP_ERROR(RP_ERR_IO, "cannot write %s %s: %s %s failed: %s", o->what, o->path, step,
                    o->tmp, write_reason(o->err, why, sizeof why));
}

rp_status core_file_out_check(core_file_out *o)
{
    if (!o || !o->f) return RP_ERROR(RP_ERR_INVALID, "core_file_out_check: no open file");
    if (!o->err && !ferror(o->f)) return RP_OK;
    return write_failed(o, "writing", errno);
}

rp_status core_file_out_commit(core_file_out *o)
{
    if (!o || !o->f) return RP_ERROR(RP_ERR_INVALID, "core_file_out_commit: no open file");
    rp_status status = core_file_out_check(o);
    if (status == RP_OK && fflush(o->f) != 0) status = write_failed(o, "writing", errno);
    if (status == RP_OK && fsync(fileno(o->f)) != 0) status = write_failed(o, "syncing", errno);
    int rc = fclose(o->f);
    o->f = NULL;
    if (status == RP_OK && rc != 0) status = write_failed(o, "closing", errno);
    /* Checked again: something may have been made at the path while the file was written. */
    if (status == RP_OK) status = core_file_check_replaceable(o->path, o->what);
    if (status == RP_OK && rename(o->tmp, o->path) != 0)
        status = RP_ERROR(RP_ERR_IO, "cannot write %s %s: renaming %s over it failed: %s", o->what,
                          o->path, o->tmp, strerror(errno));
    if (status != RP_OK)
        unlink(o->tmp);
    else
        status = sync_directory(o->path, o->what);
    core_file_out_abort(o); /* (the file is closed: frees the names only) */
    return status;
}

rp_status core_file_write_atomic(const char *path, const char *what, const core_file_piece *pieces,
                                 int n_pieces)
{
    if (!what) what = "file";
    if (!path || !*path || (n_pieces > 0 && !pieces) || n_pieces < 0) {
        return RP_ERROR(RP_ERR_INVALID, "cannot write %s: path %s, %d pieces at %p", what,
                        path ? (*path ? path : "\"\"") : "NULL", n_pieces, (const void *)pieces);
    }
    core_file_out o;
    RP_CHECK(core_file_out_open(&o, path, what));
    for (int i = 0; i < n_pieces; i++) {
        if (pieces[i].len > 0 && fwrite(pieces[i].data, 1, pieces[i].len, o.f) != pieces[i].len) {
            rp_status st = write_failed(&o, "writing", errno);
            core_file_out_abort(&o);
            return st;
        }
    }
    return core_file_out_commit(&o);
}

rp_status rp_file_check_writable(const char *path, const char *what)
{
    core_file_out o;
    RP_CHECK(core_file_out_open(&o, path, what));
    core_file_out_abort(&o);
    return RP_OK;
}

rp_status rp_file_write_atomic(const char *path, const char *what, const void *data, size_t len)
{
    if (!data && len > 0)
        return RP_ERROR(RP_ERR_INVALID, "cannot write %s %s: data is NULL with %zu bytes",
                        what ? what : "file", path ? path : "(null)", len);
    core_file_piece piece = {data, len};
    return core_file_write_atomic(path, what, &piece, 1);
}
