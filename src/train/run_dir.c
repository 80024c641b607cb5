/*
 * run_dir.c - the run directory: where its checkpoint lives, the rule that a
 * new run never overwrites saved work, and writing the run's checkpoint.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

void rp_trainer_checkpoint_path(char *buf, size_t size, const char *dir)
{
    /* A directory too long for buf gives a truncated path, which then fails to open by name. */
    if (snprintf(buf, size, "%s/checkpoint.safetensors", dir) >= (int)size && size > 0) buf[size - 1] = '\0';
}

rp_status rp_trainer_load_checkpoint(rp_checkpoint **ck, const char *dir)
{
    if (!ck || !dir) return RP_ERROR(RP_ERR_INVALID, "rp_trainer_load_checkpoint: NULL argument");
    char path[TRAIN_PATH_MAX];
    rp_trainer_checkpoint_path(path, sizeof path, dir);
    return rp_checkpoint_load(ck, path);
}

/* true if dir holds a checkpoint. */
static bool has_checkpoint(const char *dir)
{
    char path[TRAIN_PATH_MAX];
    rp_trainer_checkpoint_path(path, sizeof path, dir);
    return access(path, F_OK) == 0;
}

/*
 * A directory named exactly that holds a checkpoint needs `force`; any other
 * becomes DIR-2, -3, ... until one holds none.
 */
rp_status train_choose_run_dir(char *dir, size_t size, bool exact, bool force)
{
    if (!has_checkpoint(dir) || force) return RP_OK;
    if (exact)
        return RP_ERROR(RP_ERR_INVALID,
                        "%s already holds a run's checkpoint; continue it with --resume %s, or "
                        "overwrite it with --force (rp_trainer_config.force)", dir, dir);
    char base[TRAIN_PATH_MAX];
    snprintf(base, sizeof base, "%s", dir);
    for (int k = 2; k < 10000; k++) {
        snprintf(dir, size, "%.500s-%d", base, k);
        if (!has_checkpoint(dir)) return RP_OK;
    }
    snprintf(dir, size, "%s", base);
    return RP_ERROR(RP_ERR_INVALID, "no free run directory next to %s; pass --out", base);
}

/* Creates dir and its parents. */
rp_status train_make_dirs(const char *dir)
{
    char buf[TRAIN_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return RP_ERROR(RP_ERR_IO, "cannot create the run directory %s: %s", dir, strerror(errno));
    return RP_OK;
}

/*
 * The model's tensors (local replica 0's state: the replicas agree), the
 * position of the next batch and the configuration, written atomically: the
 * previous checkpoint survives any failure.
 */
rp_status train_save_checkpoint(const rp_trainer *t)
{
    if (t->cfg.no_checkpoint || !t->root) return RP_OK;
    rp_status status = RP_OK;
    rp_checkpoint *ck = NULL;
    char path[TRAIN_PATH_MAX];
    int64_t position[3] = {t->epoch, t->step, t->global_step};
    RP_TRY(rp_checkpoint_create(&ck));
    RP_TRY(t->model->save(t->ctx, t->states[0], ck));
    RP_TRY(rp_checkpoint_add_i64(ck, "train/position", 3, position));
    if (t->config_json) RP_TRY(rp_checkpoint_set_meta(ck, "replicator.config", t->config_json));
    RP_TRY(rp_checkpoint_set_meta(ck, "replicator.version", RP_VERSION));
    rp_trainer_checkpoint_path(path, sizeof path, t->run_dir);
    RP_TRY(rp_checkpoint_save(ck, path));
cleanup:
    rp_checkpoint_destroy(ck);
    return status;
}
