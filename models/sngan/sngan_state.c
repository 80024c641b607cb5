/*
 * sngan_state.c - what a replica's training state holds, for code outside
 * the trainer's callbacks (evaluation, sampling during a run, tests).
 */
#include "models/sngan/sngan_internal.h"

rp_sngan_generator *rp_sngan_state_generator(void *state)
{
    return state ? ((sngan_replica_state *)state)->gen : NULL;
}

rp_params *rp_sngan_state_discriminator_params(void *state)
{
    return state ? ((sngan_replica_state *)state)->dis.params : NULL;
}

void rp_sngan_state_optimizers(void *state, rp_optimizer **opt_g, rp_optimizer **opt_d)
{
    sngan_replica_state *s = state;
    if (opt_g) *opt_g = s ? s->opt_g : NULL;
    if (opt_d) *opt_d = s ? s->opt_d : NULL;
}
