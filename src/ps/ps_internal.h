/*
 * ps_internal.h - what the parameter-server backends share: the table of
 * operations behind the public calls of replicator/ps.h (ps.c checks the
 * arguments once), a server's shard of one set of variables, and the
 * staleness clocks. The threads backend (threads.c) and the MPI servers
 * (mpi/ps_mpi.c) keep their state in these same structs, so the update and
 * the staleness rule are written once.
 */
#ifndef RP_PS_INTERNAL_H
#define RP_PS_INTERNAL_H

#include "replicator/ps.h"

typedef struct ps_ops {
    const char *name;
    /* grad NULL: pull only; values NULL: push only. lr and grad were checked. */
    rp_status (*push_pull)(rp_ps *ps, const float *grad, float lr, float *values);
    rp_status (*init)(rp_ps *ps, const float *values, const float *slots, int64_t step);
    rp_status (*snapshot)(rp_ps *ps, float *values, float *slots, int64_t *step);
    rp_status (*stats)(rp_ps *ps, int server, rp_ps_server_stats *st);
    rp_status (*join)(rp_ps *ps, uint64_t phase);
    rp_status (*leave)(rp_ps *ps);
    rp_status (*claim)(rp_ps *ps, int64_t *ticket);
    void (*destroy)(rp_ps *ps);
} ps_ops;

struct rp_ps {
    const ps_ops *ops;
    int worker, workers;
    int64_t numel;
    rp_ps_config cfg; /* timeout filled in */
    int64_t clock;    /* pushes in the current phase */
    void *impl;
};

/*
 * rp_ps_push_pull() without its checks of lr and of every gradient element, for a caller that
 * has made them: the async optimizer's step (rp_optimizer_step scans the gradient already; a
 * second scan of every push would be a pass over the whole block for nothing).
 */
rp_status ps_exchange(rp_ps *ps, const float *grad, float lr, float *values);

/* ---- a server's shard of one set ----------------------------------------------- */

typedef struct ps_shard {
    int64_t lo, n;   /* the range [lo, lo + n) of the set */
    int slots;       /* rp_optim_slots() of the rule */
    float *values;   /* [n] */
    float *state;    /* [slots * n] */
    int64_t step;    /* updates applied since the start of training (Adam's t) */
    int64_t applied; /* updates applied since the last init */
    int64_t from_worker[RP_PS_MAX_WORKERS]; /* pushes received since the last init */
} ps_shard;

/* Allocates the shard [lo, hi) of a set under `cfg` (zeros). */
rp_status ps_shard_create(ps_shard *sh, int64_t lo, int64_t hi, const rp_optim_config *cfg);
void ps_shard_destroy(ps_shard *sh);

/*
 * One push on this shard: grad holds the shard's n floats. Counts it for
 * `worker`, advances the step and applies the rule.
 */
void ps_shard_apply(ps_shard *sh, const rp_optim_config *cfg, const float *grad, float lr,
                    int worker);

/* values (n floats) and slots (slots x n; NULL: zeros) into the shard; counts reset. */
void ps_shard_load(ps_shard *sh, const float *values, const float *slots, int64_t slots_stride,
                   int64_t step);

/*
 * The shard's values and slots out: slots written at slots + k*slots_stride
 * for slot k (the set's layout: slot k of the whole set starts at k*numel).
 */
void ps_shard_save(const ps_shard *sh, float *values, float *slots, int64_t slots_stride);

/* ---- the staleness clocks --------------------------------------------------------- */

/*
 * One set's view of the workers: the phase each has joined, whether it left
 * it, its clock in it. A worker that has not yet joined the newest phase
 * counts as clock 0 in it (it is about to start); one that left counts as
 * never holding anyone back.
 */
typedef struct ps_clocks {
    int workers;
    int staleness;                      /* < 0: unbounded */
    uint64_t phase;                     /* the newest phase any worker joined */
    uint64_t joined[RP_PS_MAX_WORKERS]; /* the phase each worker joined last */
    bool left[RP_PS_MAX_WORKERS];
    int64_t clock[RP_PS_MAX_WORKERS];
    int64_t claims; /* tickets handed out in the newest phase */
} ps_clocks;

void ps_clocks_init(ps_clocks *c, int workers, int staleness);
void ps_clocks_join(ps_clocks *c, int worker, uint64_t phase);
void ps_clocks_leave(ps_clocks *c, int worker);
void ps_clocks_tick(ps_clocks *c, int worker);

/* The clock the bound counts for worker q: 0 if it has not joined the newest phase, INT64_MAX if it
 * left. */
int64_t ps_clocks_of(const ps_clocks *c, int q);

/*
 * Whether `worker` may go on (its clock minus the slowest active worker's
 * clock is at most the bound). If not, *slowest gets that worker.
 */
bool ps_clocks_may_go(const ps_clocks *c, int worker, int *slowest);

/* The next ticket of the newest phase. */
int64_t ps_clocks_claim(ps_clocks *c);

#endif
