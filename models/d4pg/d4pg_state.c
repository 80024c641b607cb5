/*
 * d4pg_state.c - the learner's checkpoint: four networks, two optimizers and
 * the step count. Loading is all or nothing: every part is read over the
 * live learner, and on the first refusal everything read so far is put back
 * from a copy taken before.
 */
#include <stdio.h>

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

/*
 * A copy of what load overwrites (values of the four lists, both optimizers' states and counts),
 * taken as an in-memory checkpoint of the learner: the library moves the values out of and back
 * into the kernel table's storage.
 */
static rp_status backup_restore(const rp_checkpoint *b, const rp_d4pg_learner *L, const part p[4])
{
    for (int i = 0; i < 4; i++)
        RP_CHECK(rp_checkpoint_read_params(b, p[i].params, p[i].prefix));
    RP_CHECK(rp_checkpoint_read_optimizer(b, L->opt_policy, L->policy->params, "d4pg/opt_policy/"));
    return rp_checkpoint_read_optimizer(b, L->opt_critic, L->critic.params, "d4pg/opt_critic/");
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
    rp_checkpoint *b = NULL;
    rp_status status = rp_checkpoint_create(&b);
    if (status == RP_OK) status = rp_d4pg_learner_save(L, b);
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
        /* Puts back what the refused load changed; the refusal's message stays the error. */
        char why[1024];
        snprintf(why, sizeof why, "%s", rp_last_error());
        if (backup_restore(b, L, p) != RP_OK)
            status =
                RP_ERROR(status, "%s (and restoring the learner failed: %s)", why, rp_last_error());
        else
            rp_error_set(status, NULL, 0, "%s", why);
        goto cleanup;
    }
    L->steps = steps[0];
cleanup:
    rp_checkpoint_destroy(b);
    return status;
}
