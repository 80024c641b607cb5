/*
 * fault_internal.h - fault injection (fault.c): the seeded schedule of
 * delays, kills and corruptions that comm.c's dispatch applies to a chosen
 * worker's calls (docs/faults.md; the public calls are in replicator/comm.h).
 *
 * comm.c calls a hook below at each dispatch point only while
 * fault_on() is true, so a process without a schedule pays one
 * predictable branch per call and nothing else.
 */
#ifndef RP_COMM_FAULT_INTERNAL_H
#define RP_COMM_FAULT_INTERNAL_H

#include "comm/comm_internal.h"

/* Nonzero while a schedule may apply: -1 before $RP_FAULTS was read, 1 with a schedule, 0 off. */
extern int fault_armed;

static inline bool fault_on(void)
{
    return __builtin_expect(__atomic_load_n(&fault_armed, __ATOMIC_RELAXED) != 0, 0);
}

/*
 * The decorators: each counts the call, applies the faults due at it (a
 * delay sleeps first; a kill ends the worker; a header corruption hands the
 * backend an altered copy of the call; a data corruption flips one bit of
 * this member's result after the backend's call) and otherwise calls the
 * backend's table exactly as comm.c would.
 */
rp_status fault_collective(rp_comm *comm, const comm_coll_desc *d, const void *send, void *recv);
rp_status fault_post(rp_comm *comm, const comm_p2p_desc *d, void *buf, rp_comm_request **req);
/* Counts a run (rp_comm_rejoin): the schedule's run= counts these. */
void fault_rejoin(rp_comm *comm);
/* Whether this handle's worker was killed by the schedule (a dead worker announces nothing). */
bool fault_dead(const rp_comm *comm);

/* ---- the schedule, for fault.c and its tests ----------------------------------------------- */

typedef enum { RP_FAULT_DELAY, RP_FAULT_KILL, RP_FAULT_CORRUPT } fault_kind;

#define RP_FAULT_MAX_CLAUSES 64
/* The longest clause, in bytes with its NUL: a longer one is refused by name, never cut. */
#define RP_FAULT_CLAUSE_MAX 512

/* One clause of a spec: what happens, to which worker, at which call. */
typedef struct fault_clause {
    fault_kind kind;
    int worker;    /* replica id (rp_comm_replica_id of the handle's rank); -1: any */
    int64_t call;  /* the handle's call number (or the run's, with run >= 0); -1: not given */
    int64_t run;   /* the handle's run (rp_comm_rejoin count); -1: not given */
    double p;      /* > 0: random form, each matching call with probability p */
    int64_t ms;    /* delay: milliseconds */
    bool data;     /* corrupt: the payload (one bit of the result), not the header */
    char text[96]; /* the clause as written (a longer one cut, ending "..."), for messages */
} fault_clause;

typedef struct fault_schedule {
    uint64_t seed;
    int n;
    fault_clause f[RP_FAULT_MAX_CLAUSES];
    char origin[32]; /* where the spec came from: "RP_FAULTS", "--faults", ... */
} fault_schedule;

/*
 * Parses `spec` (docs/faults.md) into *out, naming `origin` in errors.
 * Errors: RP_ERR_INVALID naming the clause and the token at fault.
 */
rp_status fault_parse(const char *spec, const char *origin, fault_schedule *out);

/*
 * Whether clause k of s fires at a call of `worker`: the handle's call
 * number `call`, in its run `run` as the run's call `in_run`. A function of
 * its arguments only (the random form draws from the counter-based
 * generator at (seed, k, worker, call)), so one seed gives one schedule.
 */
bool fault_fires(const fault_schedule *s, int k, int worker, uint64_t call, uint64_t run,
                 uint64_t in_run);

/* One injected fault, as kept for the tests (the last RP_FAULT_EVENTS of the process). */
typedef struct fault_event {
    fault_kind kind;
    int clause;
    int worker;
    uint64_t call, run, in_run;
} fault_event;

#define RP_FAULT_EVENTS 256

/* Copies up to max of the kept events, oldest first, into out; returns how many. */
int fault_events(fault_event *out, int max);

#endif
