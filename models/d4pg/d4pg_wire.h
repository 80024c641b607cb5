/*
 * models/d4pg/d4pg_wire.h - the messages between D4PG's roles (internal).
 *
 * Every message is an 8-int64 header {kind, sender's worker index, a..f},
 * then, for some kinds, a payload from the same sender (channels are
 * ordered, so the payload is the next message from that sender). The
 * sender's index is in the header, so the replay serves everyone with one
 * blocking receive from any source: no polling.
 */
#ifndef RP_MODELS_D4PG_WIRE_H
#define RP_MODELS_D4PG_WIRE_H

#include <string.h>

#include <replicator/replicator.h>

enum {
    W_INSERT = 1, /* actor -> replay: a transitions, b finished-episode returns, c env steps; f32
                     payload */
    W_ACK,        /* replay -> actor: a = 1 to stop, b = the policy's version */
    W_PARAMS_REQ, /* actor -> replay: a = the version it has */
    W_PARAMS, /* replay -> actor: a = version, b = floats that follow (0: none yet), c = 1 to stop
               */
    W_SAMPLE, /* learner -> replay: a = samples */
    W_BATCH,  /* replay -> learner: a = n, b = env steps, c = episodes, d = held, e = recent return
                 (double bits), f = prioritised; f32 payload, then i64 keys if prioritised */
    W_PRIORITIES, /* learner -> replay: a = n; i64 keys then f32 priorities */
    W_PUBLISH,    /* learner 0 -> replay: a = floats of the policy that follow */
    W_STOP,       /* learner 0 -> replay: the run is over */
};

#define W_HDR 8
#define W_TAG 11 /* every message: the tag is checked, not used for matching */

static inline rp_status w_send(rp_comm *c, int peer, int64_t kind, int self, int64_t a, int64_t b,
                               int64_t cc, int64_t d, int64_t e, int64_t f)
{
    int64_t h[W_HDR] = {kind, self, a, b, cc, d, e, f};
    return rp_comm_send(c, h, W_HDR, RP_I64, peer, W_TAG);
}

static inline int64_t w_bits(double v)
{
    int64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static inline double w_double(int64_t b)
{
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Floats in one transition row of the wire: obs, act, reward, discount, next_obs. */
static inline int64_t w_row(int obs, int act)
{
    return 2 * (int64_t)obs + act + 2;
}

#endif
