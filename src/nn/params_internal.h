/*
 * params_internal.h - what the runtime's strategies may ask of a parameter list beyond nn.h.
 */
#ifndef RP_NN_PARAMS_INTERNAL_H
#define RP_NN_PARAMS_INTERNAL_H

#include <stdbool.h>

#include "replicator/nn.h"

/*
 * With release on, rp_params_zero_grad gives the gradient block's memory back (the kernel
 * table's mem_discard) instead of writing zeros over it: ZeRO-2 keeps only its shard of the
 * gradients between steps, and the pages of the rest are resident again only while backward
 * writes them. Off (the default) is a plain fill, cheaper when the block is reused at once.
 */
void params_set_grad_release(rp_params *p, bool release);

#endif
