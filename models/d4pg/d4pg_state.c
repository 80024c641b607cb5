/*
 * d4pg_state.c - the learner's checkpoint: four networks, two optimizers and
 * the step count. Loading is all or nothing: every part is read over the
 * live learner, and on the first refusal everything read so far is put back
 * from a copy taken before.
 */
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_internal.h"

#define STEPS_NAME "d4pg/steps"

typedef struct part {
    rp_params *params;
    const char *prefix;
} part;

static void parts_of(const rp_d4pg_learner *L, part p[4])
{
    p[0] = (part){L->policy->params, "d4pg/policy/"};
    p[1] = (part){L->critic.params, "d4pg/critic/"};
    p[2] = (part){L->target_policy->params, "d4pg/target_policy/"};
    p[3] = (part){L->target_critic.params, "d4pg/target_critic/"};
}

rp_status rp_d4pg_learner_save(const rp_d4pg_learner *L, rp_checkpoint *ck)
{
    if (!L || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_save: NULL argument");
    part p[4];
    parts_of(L, p);
    for (int i = 0; i < 4; i++)
        RP_CHECK(rp_checkpoint_add_params(ck, p[i].params, p[i].prefix));
    RP_CHECK(rp_checkpoint_add_optimizer(ck, L->opt_policy, L->policy->params, "d4pg/opt_policy/"));
    RP_CHECK(rp_checkpoint_add_optimizer(ck, L->opt_critic, L->critic.params, "d4pg/opt_critic/"));
    return rp_checkpoint_add_i64(ck, STEPS_NAME, 1, &L->steps);
}

/* A copy of what load overwrites: values of the four lists, both optimizers' states and counts. */
typedef struct backup {
    float *values[4];
    float *state[2];
    int64_t opt_steps[2];
} backup;

static void backup_free(backup *b)
{
    for (int i = 0; i < 4; i++)
        free(b->values[i]);
    for (int i = 0; i < 2; i++)
        free(b->state[i]);
}

static rp_status backup_take(backup *b, const part p[4], rp_optimizer *const opt[2])
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 4; i++) {
        size_t bytes = (size_t)rp_params_numel(p[i].params) * sizeof(float);
        b->values[i] = malloc(bytes);
        if (!b->values[i]) return RP_ERROR(RP_ERR_NOMEM, "d4pg load: no memory for a backup");
        memcpy(b->values[i], rp_params_data(p[i].params), bytes);
    }
    for (int i = 0; i < 2; i++) {
        int64_t n = 0;
        float *s = rp_optimizer_state(opt[i], &n);
        b->state[i] = malloc((size_t)n * sizeof(float) + 1);
        if (!b->state[i]) return RP_ERROR(RP_ERR_NOMEM, "d4pg load: no memory for a backup");
        if (n) memcpy(b->state[i], s, (size_t)n * sizeof(float));
        b->opt_steps[i] = rp_optimizer_steps(opt[i]);
    }
    return RP_OK;
}

static void backup_restore(const backup *b, const part p[4], rp_optimizer *const opt[2])
{
    for (int i = 0; i < 4; i++)
        memcpy(rp_params_data(p[i].params), b->values[i],
               (size_t)rp_params_numel(p[i].params) * sizeof(float));
    for (int i = 0; i < 2; i++) {
        int64_t n = 0;
        float *s = rp_optimizer_state(opt[i], &n);
        if (n) memcpy(s, b->state[i], (size_t)n * sizeof(float));
        rp_optimizer_set_steps(opt[i], b->opt_steps[i]);
    }
}

rp_status rp_d4pg_learner_load(rp_d4pg_learner *L, const rp_checkpoint *ck)
{
    if (!L || !ck) return RP_ERROR(RP_ERR_INVALID, "rp_d4pg_learner_load: NULL argument");
    int64_t n = 0;
    const int64_t *steps = rp_checkpoint_get_i64(ck, STEPS_NAME, &n);
    if (!steps || n != 1 || steps[0] < 0)
        return RP_ERROR(RP_ERR_SHAPE, "d4pg load: the checkpoint has no valid \"%s\"", STEPS_NAME);
    part p[4];
    parts_of(L, p);
    rp_optimizer *opt[2] = {L->opt_policy, L->opt_critic};
    backup b;
    rp_status status = backup_take(&b, p, opt);
    if (status != RP_OK) goto cleanup;
    for (int i = 0; i < 4 && status == RP_OK; i++)
        status = rp_checkpoint_read_params(ck, p[i].params, p[i].prefix);
    if (status == RP_OK)
        status =
            rp_checkpoint_read_optimizer(ck, L->opt_policy, L->policy->params, "d4pg/opt_policy/");
    if (status == RP_OK)
        status =
            rp_checkpoint_read_optimizer(ck, L->opt_critic, L->critic.params, "d4pg/opt_critic/");
    if (status != RP_OK) {
        backup_restore(&b, p, opt);
        goto cleanup;
    }
    L->steps = steps[0];
cleanup:
    backup_free(&b);
    return status;
}
