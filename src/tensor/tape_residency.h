/*
 * tape_residency.h - parameters whose values are not always present (ZeRO-3), as the tape
 * serves them to a strategy. Not installed.
 *
 * A strategy that keeps only a shard of each parameter list's values between uses installs a use
 * hook on a replica's thread, for every tape used there (the replica's own, a pipeline's
 * micro-batch tapes). The tape calls it, before the op reads anything, for every parameter
 * an op takes as input (forward, recording or not) and for every parameter input of a node
 * whose backward rule is about to run (a rule reads the values: a convolution's weights for the
 * input gradient). The hook makes the parameter's values present (a gather) and may release
 * others it served earlier; what it must never release are the values of the last
 * TAPE_USE_HELD distinct parameters it was asked for, since one op may read that many: every
 * op of fixed arity takes at most two trainable parameters (a weight and a bias, a scale and a
 * shift; batch norm's running statistics are buffers, never released), and an op of many
 * inputs (rp_concat, rp_custom) refuses more trainable ones while a hook is installed.
 *
 * The values stay where they always are (the parameter's place in the list's value block), so
 * every op and kernel reads them as before; a release gives their pages back.
 */
#ifndef RP_TAPE_RESIDENCY_H
#define RP_TAPE_RESIDENCY_H

#include <stdbool.h>

#include "replicator/tensor.h"

/* The trainable parameters one op may read. */
#define TAPE_USE_HELD 2

/*
 * Makes param's values present on this tape's replica; an error fails the op that asked.
 * node: -1 for a forward op; in backward, the index of the node whose rule is about to run
 * (each of its parameter inputs asked for in turn; the `pending` counts of the parameters of
 * the nodes that ran are down to zero when no later node uses them).
 */
typedef rp_status (*tape_use_fn)(rp_tape *t, rp_tensor *param, int node, void *ctx);

/* Installs (fn non-NULL) or removes (NULL) the calling thread's use hook; one per thread. */
void tape_set_thread_use(tape_use_fn fn, void *ctx);

/*
 * Gradients kept elsewhere while backward fills them (ZeRO-2 and 3's gradient buffers): before a
 * node's rule runs, for each of its parameter inputs that takes a gradient, after the use hook.
 * The hook may point param->grad at other memory holding what the gradient holds (zeros when
 * the parameter is fresh); the rule then writes there. It cannot fail: with nowhere else to
 * put it, the gradient stays where it is.
 */
typedef void (*tape_grad_fn)(rp_tensor *param, void *ctx);

/* Installs (fn non-NULL) or removes (NULL) the calling thread's gradient hook; one per thread. */
void tape_set_thread_grad(tape_grad_fn fn, void *ctx);

#endif
