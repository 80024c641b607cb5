/*
 * params_internal.h - what the runtime's strategies may ask of a parameter list beyond nn.h.
 */
#ifndef RP_NN_PARAMS_INTERNAL_H
#define RP_NN_PARAMS_INTERNAL_H

#include <stdbool.h>

#include "replicator/nn.h"

/*
 * With release on, rp_params_zero_grad gives the gradient block's memory back (the kernel
 * table's mem_discard) instead of writing zeros over it, but for the values [keep_lo, keep_hi)
 * of the block, which it fills: ZeRO-2 and 3 keep only their shard of the gradients, in place,
 * and backward never writes the rest (it writes into gradient buffers), so a page of the shard
 * given back would be faulted in again at the next step. Off (the default) is a plain fill.
 */
void params_set_grad_release(rp_params *p, bool release, int64_t keep_lo, int64_t keep_hi);

/*
 * A list whose trainable values are held in part: ZeRO-3's replica keeps only its shard
 * [lo, hi) of them between uses, gathering the rest from their owners when an op takes them. A
 * reader of whole values (rp_checkpoint_read_params, rp_params_write_values) then writes only
 * the shard and the buffers (the owners write theirs) and calls `replaced`, with which the holder
 * forgets whatever else it had gathered: the next use gathers the new values. NULL `replaced`:
 * held whole (the default).
 */
void params_set_value_shard(rp_params *p, int64_t lo, int64_t hi, rp_status (*replaced)(void *ctx),
                            void *ctx);

/* Whether p's values are held in part, and which: [*lo, *hi) of the trainable values. */
bool params_value_shard(const rp_params *p, int64_t *lo, int64_t *hi);

/* The values held were written anew: the holder's `replaced` (RP_OK when held whole). */
rp_status params_values_replaced(rp_params *p);

#endif
