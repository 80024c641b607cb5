/*
 * sngan_eval.c - placeholder evaluation: nothing is measured, no metric is
 * added (a run without a judge configured evaluates nothing).
 */
#include "models/sngan/sngan_eval.h"

rp_status rp_sngan_eval_replica(rp_replica *rep, rp_sngan *g, void *state)
{
    return RP_OK;
}

rp_status rp_sngan_eval_done(rp_sngan *g, const rp_replicator *r, rp_trainer_metrics *m)
{
    return RP_OK;
}
