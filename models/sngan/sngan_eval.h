/*
 * sngan_eval.h - the SN-GAN's evaluation during training: the trainer's
 * evaluate/evaluated callbacks call these two. (This file and sngan_eval.c
 * are placeholders that evaluate nothing; the evaluation with a domain
 * classifier replaces them.)
 */
#ifndef RP_MODELS_SNGAN_EVAL_H
#define RP_MODELS_SNGAN_EVAL_H

#include "models/sngan/sngan.h"

/*
 * Every replica, in the trainer's evaluate callback: evaluates this
 * replica's share and reports sums with rp_replica_report(). `state` is the
 * replica's training state (rp_sngan_state_generator() gives its
 * generator). Returns RP_OK or the evaluation's error.
 */
rp_status rp_sngan_eval_replica(rp_replica *rep, rp_sngan *g, void *state);

/*
 * Main thread, in the trainer's evaluated callback: reads the reduced
 * reports (rp_replicator_result()) and appends the metrics to *m.
 */
rp_status rp_sngan_eval_done(rp_sngan *g, const rp_replicator *r, rp_trainer_metrics *m);

#endif
