/*
 * train_common.c - what every model's training command shares: the
 * replicator's layout from the options, loading a saved run, and reporting an
 * error (under mpirun, with the rank).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

rp_backend train_backend(const char *name)
{
    return !strcmp(name, "threads") ? RP_BACKEND_THREADS
           : !strcmp(name, "mpi")   ? RP_BACKEND_MPI
                                    : RP_BACKEND_AUTO;
}

rp_status train_runtime_config(train_opts *o, rp_config *cfg)
{
    *cfg = rp_config_default();
    cfg->backend = train_backend(o->backend);
    cfg->replicas = o->replicas;
    cfg->threads_per_replica = o->threads_per_replica;
    cfg->timeout_s = o->comm_timeout;
    cfg->regime = !strcmp(o->regime, "async") ? RP_REGIME_ASYNC : RP_REGIME_SYNC;
    cfg->ps = o->ps;
    cfg->staleness = o->staleness;
    cfg->zero = o->zero;
    cfg->precision = !strcmp(o->precision, "bf16") ? RP_BF16 : RP_F32;
    cfg->grad_dtype = o->grad_dtype;
    cfg->sync_groups = o->sync_groups;
    cfg->seed = o->seed;
    cfg->stuck_exit = train_stuck_exit();
    /* The layout rules are the library's (rp_config_resolve). */
    rp_job_shape layout = rp_job_shape_default();
    layout.threads = o->threads;
    layout.batch = o->batch;
    layout.stages = o->model_parallel;
    layout.tensor_parallel = o->tensor_parallel;
    layout.replicas_from_run = !o->replicas_given;
    RP_CHECK(rp_config_resolve(cfg, &layout));
    o->replicas = layout.replicas;
    return RP_OK;
}

bool train_stuck_exit(void)
{
    const rp_env *env = rp_env_get();
    return env->stuck_exit_set ? env->stuck_exit : true;
}

rp_status train_load_run(const char *dir, rp_checkpoint **ck, const char **config)
{
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

rp_status train_checkpoint_guard(const rp_params *params, void *arg)
{
    const train_checkpoint_guard_arg *g = arg;
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

/* FNV-1a, 64 bits: equal texts, equal hashes; a difference is found again by comparing texts. */
static uint64_t text_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* A value's JSON text for a message, cut at 60 bytes ("absent" for none). */
static void json_text(const cJSON *v, char *buf, size_t size)
{
    char *text = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, size, "%.60s%s", text ? text : "absent", text && strlen(text) > 60 ? "..." : "");
    free(text);
}

/* The first key of `mine` or `theirs` whose values differ, described into buf; false if none. */
static bool first_difference(const cJSON *mine, const cJSON *theirs, int me, char *buf, size_t size)
{
    const cJSON *sets[2] = {theirs, mine}, *item;
    for (int s = 0; s < 2; s++) {
        cJSON_ArrayForEach(item, sets[s])
        {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(mine, item->string);
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(theirs, item->string);
            if (a && b && cJSON_Compare(a, b, true)) continue;
            char va[72], vb[72];
            json_text(a, va, sizeof va);
            json_text(b, vb, sizeof vb);
            snprintf(buf, size, "rank %d's \"%.40s\" is %s, rank 0's %s", me, item->string, va, vb);
            return true;
        }
    }
    return false;
}

#define AGREE_RECORD 256 /* bytes of each rank's description of its difference */

rp_status train_agree_options(char *json, const char *const *local, const char *out_dir,
                              int64_t max_steps, double timeout_s)
{
    if (!json) return RP_ERROR(RP_ERR_NOMEM, "cannot serialise the configuration");
    rp_status status = train_agree_config(json, local, out_dir, max_steps, timeout_s);
    free(json);
    return status;
}

rp_status train_agree_config(const char *json, const char *const *local, const char *out_dir,
                             int64_t max_steps, double timeout_s)
{
    if (!rp_comm_mpi_launched() || rp_env_get()->mpi_world_size < 2) return RP_OK;
    rp_status status = RP_OK;
    rp_comm *c = NULL;
    char *text = NULL, *theirs_text = NULL, *records = NULL;
    int64_t *hashes = NULL;
    cJSON *theirs = NULL, *mine = cJSON_Parse(json);
    if (!mine) return RP_ERROR(RP_ERR_INVALID, "train_agree_config: the configuration is not JSON");
    for (const char *const *k = local; k && *k; k++)
        cJSON_DeleteItemFromObjectCaseSensitive(mine, *k);
    cJSON_AddStringToObject(mine, "out", out_dir);
    cJSON_AddNumberToObject(mine, "max_steps", (double)max_steps);
    text = cJSON_PrintUnformatted(mine);
    if (!text) {
        status = RP_ERROR(RP_ERR_NOMEM, "train_agree_config: the configuration's text");
        goto cleanup;
    }
    RP_TRY(rp_comm_mpi_create(&c, timeout_s > 0 ? timeout_s : rp_env_get()->comm_timeout));
    int n = rp_comm_size(c), me = rp_comm_rank(c);
    hashes = calloc((size_t)n, sizeof *hashes);
    records = calloc((size_t)n, AGREE_RECORD);
    if (!hashes || !records) {
        status = RP_ERROR(RP_ERR_NOMEM, "train_agree_config: %d ranks' records", n);
        goto cleanup;
    }
    int64_t h = (int64_t)text_hash(text);
    RP_TRY(rp_comm_all_gather(c, &h, hashes, 1, RP_I64));
    int differ = 0;
    for (int r = 1; r < n; r++)
        differ += hashes[r] != hashes[0];
    if (!differ) goto cleanup;
    /* Rank 0's configuration to every rank, which finds its own first difference from it. */
    int64_t len = me == 0 ? (int64_t)strlen(text) + 1 : 0;
    RP_TRY(rp_comm_broadcast(c, &len, 1, RP_I64, 0));
    theirs_text = me == 0 ? strdup(text) : calloc((size_t)len, 1);
    if (!theirs_text) {
        status = RP_ERROR(RP_ERR_NOMEM, "train_agree_config: rank 0's configuration");
        goto cleanup;
    }
    RP_TRY(rp_comm_broadcast(c, theirs_text, len, RP_U8, 0));
    theirs = cJSON_Parse(theirs_text);
    char mine_record[AGREE_RECORD] = "";
    if (theirs && hashes[me] != hashes[0])
        first_difference(mine, theirs, me, mine_record, sizeof mine_record);
    RP_TRY(rp_comm_all_gather(c, mine_record, records, AGREE_RECORD, RP_U8));
    /* Every rank reports the same: the first differing rank's key, and which ranks differ. */
    char ranks[256] = "";
    size_t used = 0;
    const char *first = NULL;
    for (int r = 1; r < n && used < sizeof ranks; r++) {
        if (hashes[r] == hashes[0]) continue;
        if (!first && records[(size_t)r * AGREE_RECORD]) first = records + (size_t)r * AGREE_RECORD;
        used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d", used ? ", " : "", r);
    }
    status = RP_ERROR(RP_ERR_MISMATCH,
                      "the ranks were started with different options: %s (rank%s %s differ%s from "
                      "rank 0); start every rank with the same options",
                      first ? first : "their configurations differ", differ > 1 ? "s" : "", ranks,
                      differ > 1 ? "" : "s");
cleanup:
    rp_comm_destroy(c);
    cJSON_Delete(theirs);
    cJSON_Delete(mine);
    free(theirs_text);
    free(records);
    free(hashes);
    free(text);
    return status;
}

/*
 * Every process prints its own error, replica 0's or not: it may be the one that explains the
 * others'. Under mpirun the lines of all ranks meet on one terminal, so each says whose it is.
 */
void train_report_error(bool tty)
{
    char who[128] = "";
    if (rp_comm_mpi_launched() && rp_log_prefix(who, sizeof who - 1) > 0) strcat(who, " ");
    fprintf(stderr, "%s%sreplicator train: error: %s\n", tty ? "\n" : "", who, rp_last_error());
}

int train_finish(rp_trainer *t, rp_status status, bool tty)
{
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (status != RP_OK) {
        train_report_error(tty);
        rp_comm_mpi_abort(1);
    }
    rp_status teardown = rp_trainer_destroy(t);
    if (teardown != RP_OK && status == RP_OK) {
        status = teardown;
        train_report_error(false);
    }
    if (status != RP_OK) return 1;
    return p.stopped && p.stop_signal ? 128 + p.stop_signal : 0;
}

void train_print_precision(const char *precision)
{
    if (strcmp(precision, "bf16") != 0) return;
    const char *path = rp_kernels_bf16_path();
    bool slow = strcmp(path, "amx") != 0 && strcmp(path, "avx512_bf16") != 0;
    fprintf(stderr,
            "  precision: bf16 compute for convolutions, linear layers and matmuls on %s%s; "
            "convolution and batch-norm outputs stored in bf16; f32 master weights, gradients, "
            "norms' statistics, losses and optimizer state\n",
            path,
            slow ? " - this CPU has no bf16 units, so bf16 runs correctly but slower than f32"
                 : "");
}
