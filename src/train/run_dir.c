/*
 * run_dir.c - the run directory: where its checkpoint lives, the rule that a
 * new run never overwrites saved work, and reading the run's checkpoint (whole or
 * sharded; saver.c writes it), a run's saved configuration, and the guard that holds a model
 * built from it to the checkpoint's tensors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

#define CHECKPOINT_NAME  "checkpoint.safetensors"
#define CHECKPOINT_BASE  "checkpoint" /* a sharded checkpoint's base (io.h) */
#define CHECKPOINT_INDEX ".index.json"

void rp_trainer_checkpoint_path(char *buf, size_t size, const char *dir)
{
    /* A directory too long for buf gives a truncated path, which then fails to open by name. */
    if (snprintf(buf, size, "%s/" CHECKPOINT_NAME, dir) >= (int)size && size > 0)
        buf[size - 1] = '\0';
}

/* "<dir>/<name>" in a block of its own (free() it), whatever the length; NULL when out of memory.
 */
static char *join_path(const char *dir, const char *name)
{
    size_t size = strlen(dir) + strlen(name) + 2;
    char *path = malloc(size);
    if (path)
        snprintf(path, size, "%s/%s", dir, name);
    else
        RP_ERROR(RP_ERR_NOMEM, "out of memory for a path in %s", dir);
    return path;
}

/* The modification time of `path` in nanoseconds, or -1 if it does not exist. */
static long long mtime_ns(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0) return -1;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

rp_status rp_trainer_load_checkpoint(rp_checkpoint **ck, const char *dir)
{
    if (!ck || !dir) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_load_checkpoint: NULL argument");
    *ck = NULL;
    char *path = join_path(dir, CHECKPOINT_NAME);
    char *base = join_path(dir, CHECKPOINT_BASE);
    char *index = join_path(dir, CHECKPOINT_BASE CHECKPOINT_INDEX);
    rp_status status = RP_OK;
    if (!path || !base || !index) {
        status = rp_last_status();
    } else if (mtime_ns(index) >= 0 && mtime_ns(index) >= mtime_ns(path)) {
        /* Sharded (and newer than any whole file beside it): each tensor read when asked for,
           so each replica reads its pieces. */
        status = rp_checkpoint_open_sharded(ck, base);
    } else {
        status = rp_checkpoint_load(ck, path);
    }
    free(index);
    free(base);
    free(path);
    return status;
}

rp_status rp_trainer_load_run(const char *dir, rp_checkpoint **ck, const char **config)
{
    if (!dir || !ck || !config)
        return RP_ERROR(RP_ERR_INVALID, "rp_trainer_load_run: NULL argument");
    *config = NULL;
    RP_CHECK(rp_trainer_load_checkpoint(ck, dir));
    *config = rp_checkpoint_get_meta(*ck, "replicator.config");
    if (*config) return RP_OK;
    char path[600];
    rp_trainer_checkpoint_path(path, sizeof path, dir);
    rp_checkpoint_destroy(*ck);
    *ck = NULL;
    return RP_ERROR(RP_ERR_FORMAT, "%s has no replicator.config metadata", path);
}

/* "[2, 3]" */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

rp_status rp_trainer_checkpoint_guard(const rp_params *params, void *arg)
{
    const rp_trainer_guard_arg *g = arg;
    for (int i = 0; i < rp_params_count(params); i++) {
        const rp_tensor *t = rp_params_at(params, i);
        char name[RP_NAME_MAX + 64], want[160], have[160];
        snprintf(name, sizeof name, "%s%s", g->prefix, t->name);
        int64_t declared[RP_MAX_DIMS], stored[RP_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            declared[d] = t->shape[d];
        shape_text(t->ndim, declared, want, sizeof want);
        rp_checkpoint_dtype dtype;
        int ndim = 0;
        if (!rp_checkpoint_get(g->ck, name, &dtype, &ndim, stored))
            return RP_ERROR(RP_ERR_SHAPE,
                            "the checkpoint's configuration declares %s %s, which the checkpoint "
                            "does not hold: the configuration is not its tensors' (edited, or "
                            "another run's)",
                            name, want);
        bool same = dtype == RP_CHECKPOINT_F32 && ndim == t->ndim;
        for (int d = 0; same && d < ndim; d++)
            same = stored[d] == declared[d];
        if (!same) {
            shape_text(ndim, stored, have, sizeof have);
            return RP_ERROR(RP_ERR_SHAPE,
                            "the checkpoint's configuration makes %s %s (%lld values), the "
                            "checkpoint holds it as %s%s: the configuration is not its tensors' "
                            "(edited, or another run's)",
                            name, want, (long long)t->numel, have,
                            dtype == RP_CHECKPOINT_F32 ? "" : " of another dtype");
        }
    }
    return RP_OK;
}

/* true if dir holds a checkpoint (whole or sharded). */
static bool has_checkpoint(const char *dir)
{
    char *path = join_path(dir, CHECKPOINT_NAME);
    char *index = join_path(dir, CHECKPOINT_BASE CHECKPOINT_INDEX);
    bool found = (path && access(path, F_OK) == 0) || (index && access(index, F_OK) == 0);
    free(index);
    free(path);
    return found;
}

/*
 * A directory named exactly that holds a checkpoint needs `force`; any other
 * becomes DIR-2, -3, ... until one holds none.
 */
rp_status trainer_choose_run_dir(char *dir, size_t size, bool exact, bool force)
{
    if (!has_checkpoint(dir) || force) return RP_OK;
    if (exact)
        return RP_ERROR(RP_ERR_INVALID,
                        "%s already holds a run's checkpoint; continue it with --resume %s, or "
                        "overwrite it with --force (rp_trainer_config.force)",
                        dir, dir);
    char base[TRAIN_PATH_MAX];
    snprintf(base, sizeof base, "%s", dir);
    for (int k = 2; k < 10000; k++) {
        if (snprintf(dir, size, "%s-%d", base, k) >= (int)size) {
            snprintf(dir, size, "%s", base);
            return RP_ERROR(RP_ERR_INVALID,
                            "no room for a numbered run directory next to %s; pass --out", base);
        }
        if (!has_checkpoint(dir)) return RP_OK;
    }
    snprintf(dir, size, "%s", base);
    return RP_ERROR(RP_ERR_INVALID, "no free run directory next to %s; pass --out", base);
}

/*
 * Proves that files can be made in dir by making (and removing) one: access(W_OK) would say yes
 * to root in a directory without write permission, and no about what a read-only mount refuses.
 */
static rp_status check_writable(const char *dir)
{
    char name[64];
    snprintf(name, sizeof name, ".replicator-write-check.%ld", (long)getpid());
    char *probe = join_path(dir, name);
    if (!probe) return rp_last_status();
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int err = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    } else if (err == EEXIST) {
        fd =
            0; /* a probe of a pid that ran here before: the directory took it, so it is writable */
    }
    free(probe);
    if (fd < 0)
        return RP_ERROR(RP_ERR_IO,
                        "the run directory %s is not writable (%s): its checkpoint and metrics "
                        "could not be saved",
                        dir, strerror(err));
    return RP_OK;
}

/*
 * Creates dir and its parents, and checks that it is writable, before any training: a
 * read-only run directory would otherwise fail only at the first checkpoint. A directory that
 * cannot be made is reported with mkdir's reason (EACCES, EROFS, ENOTDIR...), not with the
 * ENOENT of the stat that follows.
 */
rp_status trainer_make_dirs(const char *dir)
{
    size_t len = strlen(dir);
    char *buf = malloc(len + 1);
    if (!buf) return RP_ERROR(RP_ERR_NOMEM, "out of memory for the run directory %s", dir);
    memcpy(buf, dir, len + 1);
    int err = 0;          /* the first mkdir failure other than EEXIST */
    size_t failed_at = 0; /* buf[0..failed_at) named the directory it could not make */
    for (size_t i = 1; i <= len && !err; i++) {
        if ((buf[i] != '/' && buf[i] != '\0') || buf[i - 1] == '/') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            err = errno;
            failed_at = i;
        }
        buf[i] = c;
    }
    rp_status status = RP_OK;
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        status = check_writable(dir);
    } else if (err) {
        status = RP_ERROR(RP_ERR_IO, "cannot create the run directory %s: mkdir %.*s: %s", dir,
                          (int)failed_at, buf, strerror(err));
    } else {
        status =
            RP_ERROR(RP_ERR_IO, "cannot create the run directory %s: %s", dir,
                     stat(dir, &st) == 0 ? "it exists and is not a directory" : strerror(errno));
    }
    free(buf);
    return status;
}
