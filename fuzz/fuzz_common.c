/*
 * fuzz_common.c - memory files and checks for the fuzz targets (see fuzz_common.h).
 */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "replicator/core.h"

#define FUZZ_MAX_DIRS 4

static char dirs[FUZZ_MAX_DIRS][PATH_MAX];
static int n_dirs;

static void harness_fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz harness: %s %s: %s\n", what, detail, strerror(errno));
    abort();
}

void fuzz_file_open(fuzz_file *f, const char *name)
{
    f->fd = memfd_create(name, MFD_CLOEXEC);
    if (f->fd < 0) harness_fail("memfd_create", name);
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

void fuzz_file_set(fuzz_file *f, const uint8_t *data, size_t size)
{
    if (ftruncate(f->fd, 0) != 0 || ftruncate(f->fd, (off_t)size) != 0)
        harness_fail("ftruncate", f->path);
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(f->fd, data + done, size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) harness_fail("pwrite", f->path);
        done += (size_t)n;
    }
}

/* Removes the scratch directories made by this process with everything in them (only ours). */
static void remove_all(void)
{
    for (int i = n_dirs - 1; i >= 0; i--) {
        DIR *d = opendir(dirs[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char path[PATH_MAX + 256];
            snprintf(path, sizeof path, "%s/%s", dirs[i], e->d_name);
            unlink(path);
        }
        if (d) closedir(d);
        rmdir(dirs[i]);
    }
}

const char *fuzz_dir_create(const char *tag)
{
    if (n_dirs == FUZZ_MAX_DIRS) harness_fail("too many scratch directories for", tag);
    /* Memory-backed /dev/shm when there is one: the checkpoint target writes files there. */
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    char *d = dirs[n_dirs];
    snprintf(d, PATH_MAX, "%s/rp_fuzz_%s_XXXXXX", base, tag);
    if (!mkdtemp(d)) harness_fail("mkdtemp", d);
    if (n_dirs++ == 0) atexit(remove_all);
    return d;
}

void fuzz_dir_link(const char *dir, const char *name, const fuzz_file *f)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (symlink(f->path, path) != 0) harness_fail("symlink", path);
}

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: broken promise (%s): ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  last error: %s\n", rp_last_error());
    abort();
}
