/*
 * command.c - what a model's training command shares with every other's (trainer.h, "a model's
 * training command"): refusing a job whose ranks were started with different options, reporting
 * an error with the rank, and ending the run with the process's exit status.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

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

rp_status rp_trainer_agree_config(const char *json, const char *const *local, const char *out_dir,
                                  int64_t max_steps, double timeout_s)
{
    if (!json) return RP_ERROR(RP_ERR_NOMEM, "cannot serialise the configuration");
    if (!rp_comm_mpi_launched() || rp_env_get()->mpi_world_size < 2) return RP_OK;
    rp_status status = RP_OK;
    rp_comm *c = NULL;
    char *text = NULL, *theirs_text = NULL, *records = NULL;
    int64_t *hashes = NULL;
    cJSON *theirs = NULL, *mine = cJSON_Parse(json);
    if (!mine)
        return RP_ERROR(RP_ERR_INVALID, "rp_trainer_agree_config: the configuration is not JSON");
    for (const char *const *k = local; k && *k; k++)
        cJSON_DeleteItemFromObjectCaseSensitive(mine, *k);
    cJSON_AddStringToObject(mine, "out", out_dir);
    cJSON_AddNumberToObject(mine, "max_steps", (double)max_steps);
    text = cJSON_PrintUnformatted(mine);
    if (!text) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_trainer_agree_config: the configuration's text");
        goto cleanup;
    }
    RP_TRY(rp_comm_mpi_create(&c, timeout_s > 0 ? timeout_s : rp_env_get()->comm_timeout));
    int n = rp_comm_size(c), me = rp_comm_rank(c);
    hashes = calloc((size_t)n, sizeof *hashes);
    records = calloc((size_t)n, AGREE_RECORD);
    if (!hashes || !records) {
        status = RP_ERROR(RP_ERR_NOMEM, "rp_trainer_agree_config: %d ranks' records", n);
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
        status = RP_ERROR(RP_ERR_NOMEM, "rp_trainer_agree_config: rank 0's configuration");
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
void rp_trainer_report_error(const char *cmd, bool tty)
{
    char who[128] = "";
    if (rp_comm_mpi_launched() && rp_log_prefix(who, sizeof who - 1) > 0) strcat(who, " ");
    fprintf(stderr, "%s%s%s: error: %s\n", tty ? "\n" : "", who, cmd ? cmd : "replicator",
            rp_last_error());
}

int rp_trainer_finish(rp_trainer *t, rp_status status, const char *cmd, bool tty)
{
    rp_trainer_progress p = rp_trainer_get_progress(t);
    if (status != RP_OK) {
        rp_trainer_report_error(cmd, tty);
        rp_comm_mpi_abort(1);
    }
    rp_status teardown = rp_trainer_destroy(t);
    if (teardown != RP_OK && status == RP_OK) {
        status = teardown;
        rp_trainer_report_error(cmd, false);
    }
    if (status != RP_OK) return 1;
    return p.stopped && p.stop_signal ? 128 + p.stop_signal : 0;
}

void rp_trainer_print_precision(const char *precision, const char *activations)
{
    if (!precision || strcmp(precision, "bf16") != 0) return;
    bool slow = !rp_kernels_bf16_fast();
    bool f32_act = activations && !strcmp(activations, "f32");
    fprintf(stderr,
            "  precision: bf16 compute for convolutions, linear layers and matmuls on %s%s%s; "
            "%s; f32 master weights, gradients, norms' statistics, losses and optimizer state\n",
            rp_kernels_bf16_path(), slow ? " - " : "", slow ? rp_kernels_bf16_about() : "",
            f32_act ? "activations stored in f32"
                    : "convolution and batch-norm outputs stored in bf16");
}

bool rp_trainer_stuck_exit(void)
{
    const rp_env *env = rp_env_get();
    return env->stuck_exit_set ? env->stuck_exit : true;
}
