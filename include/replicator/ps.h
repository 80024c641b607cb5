/*
 * replicator/ps.h - parameter servers for asynchronous training.
 *
 * A set of variables (one flat block of `numel` floats: a parameter list's
 * trainable values) is sharded across S servers: server s keeps the
 * contiguous range rp_ps_shard_range(numel, S, s), so the shards are balanced
 * by bytes to within 16 floats (boundaries fall on 64-byte lines). A variable
 * may straddle two servers: every update rule is element-wise, so a split
 * variable is updated exactly as a whole one would be.
 *
 * Each server keeps its shard's values and optimizer slots (rp_optim_apply's
 * layout: 0, 1 or 2 slots) and a step count. A push carries a worker's
 * gradient for the whole block and a learning rate; each server applies the
 * configured rule to its shard as the push arrives, under the shard's lock,
 * so a push is applied whole, once, and never interleaved with another push
 * or a pull on that shard. A pull copies the current values. Pushes from
 * different workers are applied in arrival order, which is not
 * deterministic: asynchronous training is not bitwise reproducible.
 *
 * The staleness bound (stale-synchronous parallel). Each worker has a clock:
 * the pushes it made in the current phase. With bound k >= 0, a pull by a
 * worker whose clock is c returns only once every other worker has a clock of
 * at least c - k (a worker that left the phase does not hold anyone back), so
 * no worker starts a step more than k steps ahead of the slowest. k < 0 is
 * unbounded (plain asynchronous SGD). A phase is one rp_replicator_run(): the
 * runtime calls rp_ps_join() as a replica starts and rp_ps_leave() as it
 * returns, and clocks restart at 0 in each phase.
 *
 * Timeouts. Every call waits at most the configured timeout. A push that
 * times out may have been applied by some servers and not others (the
 * error names the ones that did not answer): the job does not go on past
 * it, and its last checkpoint is the state to resume from. Under MPI a
 * send that timed out may still read the caller's gradient if the server
 * wakes up: do not reuse the handle or its buffers after a timeout. A server that
 * does not answer (stopped, dead, or its shard's lock held too long) is named
 * in the error (RP_ERR_TIMEOUT), with its rank and host under MPI; a pull that
 * the staleness bound holds back past the timeout names the slowest worker,
 * its clock and this worker's.
 *
 * Backends: "threads" (in-process shards; the workers apply the updates
 * themselves under a per-shard mutex) and remote servers: dedicated server
 * ranks of a communicator, a worker's handle sends them messages over the
 * communicator's point-to-point ("mpi" under MPI; "remote" on another
 * backend, e.g. server threads in tests). The runtime builds them from rp_config
 * (regime, ps, staleness); user code normally meets them only through the
 * optimizer made by rp_replica_optimizer_create(), whose rp_optimizer_step()
 * pushes the gradients and pulls fresh values.
 *
 * Thread-safety: a handle belongs to one worker thread. The handles of one
 * set may be used concurrently, each by its own thread.
 */
#ifndef REPLICATOR_PS_H
#define REPLICATOR_PS_H

#include "comm.h"
#include "core.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The range [*lo, *hi) of a numel-float block that server s of `servers` keeps. */
RP_API void rp_ps_shard_range(int64_t numel, int servers, int s, int64_t *lo, int64_t *hi);

/*
 * The most workers one set of servers takes (the threads backend's handles, a communicator's
 * worker ranks): the servers keep a clock and counts per worker in fixed tables, and the create
 * functions refuse more with RP_ERR_INVALID naming the count.
 */
#define RP_PS_MAX_WORKERS 64

typedef struct rp_ps_config {
    int servers;           /* S in [1, 256] */
    int staleness;         /* k >= 0, or -1 (the default): unbounded */
    double timeout_s;      /* > 0; 0: $RP_COMM_TIMEOUT */
    rp_optim_config optim; /* the rule the servers apply */
} rp_ps_config;

/* One server, unbounded staleness, the default timeout, rp_optim_config_default(). */
RP_API rp_ps_config rp_ps_config_default(void);

/* A worker's handle on one set of variables kept by the servers. */
typedef struct rp_ps rp_ps;

/*
 * The threads backend: `workers` handles on one set of numel floats kept by
 * cfg->servers in-process shards; handles[w] is worker w's, used by one
 * thread each. The values start at zero, the slots at zero, the step at 0
 * (rp_ps_init() sets them). Each handle is destroyed by its own
 * rp_ps_destroy(); the shards go with the last one.
 * Errors: RP_ERR_INVALID (workers outside [1, RP_PS_MAX_WORKERS], numel < 0, servers
 * outside [1, 256], a bad optimizer configuration), RP_ERR_NOMEM.
 */
RP_API rp_status rp_ps_threads_create(rp_ps **handles, int workers, int64_t numel,
                                      const rp_ps_config *cfg);

/* Frees this worker's handle. NULL is ignored. */
RP_API void rp_ps_destroy(rp_ps *ps);

/* "threads", "mpi", or "remote" (remote servers over a communicator other than MPI). */
RP_API const char *rp_ps_backend(const rp_ps *ps);
RP_API int rp_ps_worker(const rp_ps *ps); /* this handle's worker index, 0 .. workers-1 */
RP_API int rp_ps_workers(const rp_ps *ps);
RP_API int rp_ps_servers(const rp_ps *ps);
RP_API int64_t rp_ps_numel(const rp_ps *ps);

/*
 * Sets every server's shard: values from values[0..numel), slots from
 * slots (rp_optim_slots(cfg) blocks of numel floats, back to back; NULL:
 * zeros) and the step count (Adam's bias correction continues from it).
 * Used once by one worker at the start, and to restore a checkpoint. Resets
 * the applied and received counts. Not to be mixed with pushes in flight:
 * call it while the other workers wait (e.g. before a barrier).
 */
RP_API rp_status rp_ps_init(rp_ps *ps, const float *values, const float *slots, int64_t step);

/*
 * Applies `grad` (numel floats) with learning rate lr on every server and
 * advances this worker's clock. RP_ERR_INVALID for a negative or non-finite
 * lr; RP_ERR_NUMERIC naming the first non-finite gradient element (nothing
 * is sent then).
 */
RP_API rp_status rp_ps_push(rp_ps *ps, const float *grad, float lr);

/*
 * Copies the current values into values[0..numel), once the staleness bound
 * lets this worker go on (see the top). Each shard is copied whole under its
 * lock; different shards may reflect different moments.
 */
RP_API rp_status rp_ps_pull(rp_ps *ps, float *values);

/* rp_ps_push() then rp_ps_pull(), in one round trip per server where the backend can. */
RP_API rp_status rp_ps_push_pull(rp_ps *ps, const float *grad, float lr, float *values);

/*
 * The servers' whole state: values (numel floats), slots (slots x numel,
 * may be NULL) and the step count of server 0 (all servers have applied the
 * same pushes once none are in flight). Call it when no push is in flight
 * (between phases) for a consistent checkpoint.
 */
RP_API rp_status rp_ps_snapshot(rp_ps *ps, float *values, float *slots, int64_t *step);

/*
 * What server s has done since rp_ps_init(): updates applied, pushes received from each worker.
 * from_worker has room for every worker a set can have: the create functions refuse more than
 * RP_PS_MAX_WORKERS (RP_ERR_INVALID), and entries from `workers` on are 0.
 */
typedef struct rp_ps_server_stats {
    int64_t applied;
    int64_t received;                       /* from all workers */
    int workers;                            /* the set's workers: from_worker[0 .. workers) */
    int64_t from_worker[RP_PS_MAX_WORKERS]; /* from each worker */
} rp_ps_server_stats;

RP_API rp_status rp_ps_stats(rp_ps *ps, int server, rp_ps_server_stats *st);

/*
 * Phases for the staleness bound: join starts phase `phase` (increasing;
 * clocks restart at 0, and so do the claims of rp_ps_claim()), leave ends
 * this worker's part of it (it no longer holds anyone back). Phases must not
 * overlap: no worker joins phase p+1 before every worker has left phase p.
 * The runtime calls them around each run, and a run ends with a reduction
 * across the replicas, after their leaves: the rule holds there.
 */
RP_API rp_status rp_ps_join(rp_ps *ps, uint64_t phase);
RP_API rp_status rp_ps_leave(rp_ps *ps);

/* Pushes this worker has made in the current phase (its clock). */
RP_API int64_t rp_ps_clock(const rp_ps *ps);

/*
 * A shared work queue: returns 0, 1, 2, ... across all workers' calls in
 * the current phase, each number to exactly one caller (in the order the
 * calls reach server 0). Asynchronous workers take batches this way, so a
 * fast worker takes more of them than a slow one.
 */
RP_API rp_status rp_ps_claim(rp_ps *ps, int64_t *ticket);

/* ---- remote servers: the MPI backend, or any communicator ---------------------------- */

/*
 * Servers that are members of a communicator: of its R ranks, ranks
 * 0 .. W-1 are the workers and the last S ranks the servers (W = R - S).
 * Everything moves in the communicator's point-to-point messages
 * (replicator/comm.h): under MPI that is the MPI backend, the project's one
 * MPI transport; the threads backend runs the same servers in one process
 * (server and worker threads, each with its own member handle), which is
 * how the tests exercise them.
 *
 * A call waits at most its set's timeout. A server that does not answer
 * (stopped, dead) is named with its rank and host; its messages then fail,
 * which breaks the communicator (comm.h), so every later call of that
 * worker, on any of its sets, fails at once with the same reason. A server
 * that waits for a request's data longer than the group's timeout (a worker
 * stopped in the middle of sending) stops serving, naming that worker.
 */
typedef struct rp_ps_group rp_ps_group;

/*
 * The job's MPI processes as W workers (world ranks 0 .. W-1) and S
 * servers (the last S ranks), over a communicator of their own (a new MPI
 * backend communicator, destroyed with the group). Collective over
 * MPI_COMM_WORLD (MPI is initialised if it is not yet). A timeout of 0 is
 * $RP_COMM_TIMEOUT. Errors: RP_ERR_INVALID if S is not below the job's
 * size or leaves more than RP_PS_MAX_WORKERS workers; RP_ERR_UNSUPPORTED in a build
 * without MPI; the communicator's errors.
 */
RP_API rp_status rp_ps_mpi_group_create(rp_ps_group **g, int servers, double timeout_s);

/*
 * The same on any communicator with point-to-point (threads, mpi): this
 * member's part of the group. Collective over `comm` (one all-gather, of
 * the members' host names, named as the runtime's own call); on the
 * threads backend every member calls it from its own thread. The group
 * borrows `comm` (destroy it after the group) and uses it alone while it
 * lives: make no other calls on it then (a server's receive from any
 * member would take them). A timeout of 0 takes the communicator's. The
 * group's calls set the communicator's timeout for their own waits and put
 * it back. Errors: as rp_ps_mpi_group_create, and the all-gather's.
 * Thread-safety: the group belongs to the thread that owns `comm`.
 */
RP_API rp_status rp_ps_group_create(rp_ps_group **g, rp_comm *comm, int servers, double timeout_s);

RP_API bool rp_ps_group_is_server(const rp_ps_group *g);
RP_API int rp_ps_group_workers(const rp_ps_group *g);
/* This process's worker index (its rank), or its server index on a server rank. */
RP_API int rp_ps_group_index(const rp_ps_group *g);

/*
 * On a server rank: serves the workers until every worker has destroyed
 * its group. Once one says the job failed (rp_ps_group_fail), every later
 * request is answered with that failure (RP_ERR_COMM, naming the worker and
 * its reason), so the others stop at their next call instead of training
 * on; the server returns once each worker has said goodbye or reported a
 * failure too, or the group's timeout after the first report. Sets of variables are created by
 * the workers' rp_ps_mpi_create() calls. Works on a group of any
 * communicator (the name is historical). Errors: a worker's failure report
 * as RP_ERR_COMM naming the worker; the communicator's errors (a request
 * whose data did not come within the group's timeout: RP_ERR_TIMEOUT
 * naming the worker), prefixed with this server's index, rank and host.
 */
RP_API rp_status rp_ps_mpi_serve(rp_ps_group *g);

/*
 * On a worker rank: this worker's handle on a new set of numel floats, the
 * k-th set if this is the worker's k-th call (every worker creates the same
 * sets in the same order). The servers' shards start at zero until
 * rp_ps_init(). cfg->servers must be the group's S; a timeout of 0 takes
 * the group's (whose 0 is $RP_COMM_TIMEOUT). At most RP_PS_MAX_WORKERS workers and 8 live
 * sets. A staleness error from a server leaves the handle usable; a server
 * that does not answer breaks the group (later calls fail at once, naming
 * it). rp_ps_backend() is "mpi" on an MPI group, "remote" on any other.
 * Works on a group of any communicator (the name is historical). A push's
 * gradient goes to each server straight from `grad` (its slice), a pull's
 * values straight into `values`.
 */
RP_API rp_status rp_ps_mpi_create(rp_ps **ps, rp_ps_group *g, int64_t numel,
                                  const rp_ps_config *cfg);

/*
 * On a worker: tells every server that this worker failed (`reason`), so
 * the servers answer the other workers' requests with it and
 * rp_ps_mpi_serve() returns RP_ERR_COMM naming it instead of waiting for
 * its goodbye. Does not wait for an answer. The runtime calls it when a
 * replica's step fails under MPI (async, sync groups).
 */
RP_API void rp_ps_group_fail(rp_ps_group *g, rp_status status, const char *reason);

/*
 * Frees the group; on a worker, first tells every server this worker is
 * done (a server returns from rp_ps_mpi_serve() once all are). Destroy
 * the worker's sets first. NULL is ignored.
 */
RP_API void rp_ps_group_destroy(rp_ps_group *g);

#ifdef __cplusplus
}
#endif
#endif
