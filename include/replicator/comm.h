/*
 * replicator/comm.h - communicators: collectives between the replicas of a
 * job (all-reduce, reduce-scatter, all-gather, broadcast, barrier) and
 * sub-groups for model-parallel work.
 *
 * The calls mirror NCCL's: all_reduce(comm, send, recv, count, dtype, op),
 * in place when send == recv. Every member of a communicator must make the
 * same collective calls in the same order with the same count, dtype, op and
 * root. That rule is checked on every call, always: a member that makes a
 * different call (another kind, count, dtype, op or root) gets
 * RP_ERR_MISMATCH on every member, with a message naming both calls and the
 * replicas that made them; a member that does not arrive within the
 * communicator's timeout gets RP_ERR_TIMEOUT on the members that waited,
 * naming the replicas that did not arrive and the last collective each one
 * completed. A member whose step ended (returned, or failed) while its peers
 * wait for it is reported at once, without waiting for the timeout.
 *
 * An invalid call (a negative count, a NULL buffer, a root out of range)
 * fails on the member that made it with RP_ERR_INVALID, and its peers get
 * the same error at once rather than waiting for a call that will not come.
 *
 * After any such error the communicator is broken: every later call on it,
 * by any member, fails at once with RP_ERR_COMM and the original reason. A
 * job does not continue past a collective error; it reports it.
 *
 * Results are deterministic: the reduction of element i always adds the
 * members' values in rank order (((x0 + x1) + x2) + ...), so the same inputs
 * give bitwise the same outputs on every member and in every run.
 *
 * bf16 payloads (RP_BF16): a sum or mean widens the members' values to f32,
 * adds them in the same order in f32 and rounds the result to bf16 once
 * (round to nearest even; a mean is the f32 sum divided by the member count,
 * then rounded): recv[i] = bf16(((x0 + x1) + x2) + ...) computed in f32,
 * exactly, on every member (the hierarchical backend adds in its own order,
 * see rp_comm_hier_create, still in f32, rounding once). Max, min and first are exact (the
 * chosen member's bits). The wire carries bf16 both ways: half the bytes of
 * f32. A member that passes RP_F32 where its peers pass RP_BF16 (or any other
 * dtype) gets RP_ERR_MISMATCH naming both dtypes.
 *
 * Backends: "threads" (the replicas are threads of one process; shared
 * memory; each member reduces 1/N of the buffer and writes the result
 * straight into every member's output, so each byte is read and written
 * once). The MPI backend implements the same table.
 *
 * Thread-safety: a communicator handle belongs to one member (one replica
 * thread); the members call concurrently, each on its own handle.
 */
#ifndef REPLICATOR_COMM_H
#define REPLICATOR_COMM_H

#include <stdbool.h>
#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (rp_dtype, rp_dtype_size, rp_dtype_name): replicator/core.h. */

/*
 * Reductions. Integer sums wrap around (two's complement); an integer MEAN
 * is the sum divided by the member count, rounded toward zero. FIRST takes
 * the value of rank 0 (TF-Replicator's "only the first replica").
 */
typedef enum { RP_SUM = 0, RP_MEAN = 1, RP_MAX = 2, RP_MIN = 3, RP_FIRST = 4 } rp_reduce_op;

/* "sum", "mean", "max", "min", "first". */
RP_API const char *rp_reduce_op_name(rp_reduce_op op);

typedef struct rp_comm rp_comm;

/*
 * Creates the `n` member handles of one threads-backend communicator:
 * comms[r] is rank r's, to be used by one thread each. `ids`, if not NULL,
 * gives the replica id of each rank for messages (default: the rank).
 * `timeout_s` is how long a member waits for its peers (> 0). Each handle is
 * destroyed by its own rp_comm_destroy(); the shared state goes with the
 * last one. Errors: RP_ERR_INVALID (n < 1, timeout <= 0), RP_ERR_NOMEM.
 */
RP_API rp_status rp_comm_threads_create(rp_comm **comms, int n, const int *ids, double timeout_s);

/*
 * The MPI backend: one member per MPI process, over a duplicate of
 * MPI_COMM_WORLD (MPI is initialised if it is not yet, with thread support
 * for one calling thread at a time). Every call is checked like the threads
 * backend's, and every wait is a non-blocking operation polled against the
 * timeout, so a rank that died or stopped is reported by rank and host
 * instead of hanging. The check costs no extra message on a call that moves
 * data between every pair of ranks (all-reduce, reduce-scatter, all-gather
 * with count > 0): a hash of the call rides in the MPI tag of its data
 * messages, and the members exchange their full calls only when a peer is
 * seen sending for another call - so the messages are as precise as an
 * exchange before every call. Broadcast, barrier and empty calls exchange
 * their calls first. A rank that was itself not running (stopped, or
 * descheduled for more than a quarter of the timeout while it waited), or
 * whose peer had already given up on it, says so in its timeout message
 * rather than blaming the peer; a failing rank's reason (rp_comm_leave)
 * reaches its peers' messages. Reductions add in
 * rank order (an all-to-all of blocks, a local reduction, an all-gather), so
 * results are deterministic and equal the threads backend's.
 * Errors: RP_ERR_UNSUPPORTED in a build without MPI; RP_ERR_BACKEND.
 */
RP_API rp_status rp_comm_mpi_create(rp_comm **comm, double timeout_s);

/*
 * The hierarchical backend: n members (threads) in this process on each of
 * the MPI job's ranks, n x ranks in all; member t of rank r is rank r*n + t,
 * and comms[t] is its handle (each used by one thread). A collective reduces
 * among this process's members first, then across ranks (the MPI backend,
 * driven by member 0), then hands the result back: the network carries one
 * copy per process. Sums add each process's members in order, then the
 * processes in order: deterministic, the same bits on every member. A bf16
 * sum or mean moves f32 partial sums between the steps and rounds to bf16
 * once, at the end (so it is bf16 of the f32 sum in that order). Checked
 * like the other backends; every rank must pass the same n (collective over
 * MPI_COMM_WORLD). Backend name "mpi+threads".
 */
RP_API rp_status rp_comm_hier_create(rp_comm **comms, int n, double timeout_s);

/* True if this process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set). */
RP_API bool rp_comm_mpi_launched(void);

/*
 * Ends the whole MPI job with exit status `code` (MPI_Abort on
 * MPI_COMM_WORLD): the way out after a collective failed, when a peer may be
 * stopped or dead and MPI_Finalize could wait for it forever. Returns only
 * where MPI is not running (not initialised, finalised, or not built).
 */
RP_API void rp_comm_mpi_abort(int code);

/*
 * Frees this member's handle (not collective; it never waits for the peers).
 * NULL is ignored. MPI (and the MPI part of mpi+threads): the handle's MPI
 * communicators are freed only once every peer has destroyed its handle too
 * (each sends the others a last "close" message), since a message that
 * reached a freed MPI communicator would be taken by the next one given its
 * context id; until then they stay allocated (at most until MPI is
 * finalized, where one whose peer never destroyed its handle is left). A
 * peer's send to this member after its close fails at once with
 * RP_ERR_COMM, as does a receive of a message it did not send first.
 */
RP_API void rp_comm_destroy(rp_comm *comm);

RP_API int rp_comm_rank(const rp_comm *comm);
RP_API int rp_comm_size(const rp_comm *comm);
/* The replica id of `rank` (for messages; the rank itself unless given). */
RP_API int rp_comm_replica_id(const rp_comm *comm, int rank);
/*
 * What this handle's messages call a member, before its id: "replica" (the default), or e.g.
 * "worker" where a replica spans several workers or the job has roles (the runtime sets it on
 * such a job's communicators, so an error names the worker it means). Splits inherit it. At most
 * 15 characters (longer is cut); NULL or "" is the default. Not collective: this handle only -
 * on the hierarchical backend, the first member in each process's call also sets it for the
 * messages of its process's MPI part, so set it on every member before they communicate (as the
 * runtime does).
 */
RP_API void rp_comm_set_noun(rp_comm *comm, const char *noun);
RP_API const char *rp_comm_noun(const rp_comm *comm);
/*
 * What this handle's error messages call the communicator, e.g. "data axis": a failed call's
 * message then reads "data axis: worker 1 ended its step ..." (after the file:line origin), so
 * a job with several communicators says which one failed. The runtime names its workers'
 * communicators in a mesh or a job of roles ("data axis", "model axis", "pipe axis", "role",
 * "world", "link").
 * Not inherited by splits. At most 23 characters (longer is cut); NULL or "": none (the
 * default). Not collective: this handle only. rp_comm_name: "" when none or for NULL.
 */
RP_API void rp_comm_set_name(rp_comm *comm, const char *name);
RP_API const char *rp_comm_name(const rp_comm *comm);
/* Name of the backend ("threads", "mpi"). */
RP_API const char *rp_comm_backend(const rp_comm *comm);

/* How long this member waits for its peers, in seconds (> 0). */
RP_API rp_status rp_comm_set_timeout(rp_comm *comm, double seconds);
RP_API double rp_comm_timeout(const rp_comm *comm);

/*
 * recv[i] = op over members of send[i], for i < count, on every member.
 * send == recv: in place. Otherwise the buffers must not overlap.
 */
RP_API rp_status rp_comm_all_reduce(rp_comm *comm, const void *send, void *recv, int64_t count,
                                    rp_dtype dtype, rp_reduce_op op);

/*
 * Rank r receives block r of the reduction: recv[i] = op over members of
 * send[r*count + i], i < count. send holds size*count elements. In place
 * (as in NCCL): recv == send + rank*count.
 */
RP_API rp_status rp_comm_reduce_scatter(rp_comm *comm, const void *send, void *recv, int64_t count,
                                        rp_dtype dtype, rp_reduce_op op);

/*
 * rp_comm_reduce_scatter with blocks of their own sizes (MPI's
 * Reduce_scatter): send holds sum(counts) elements on every member, block r
 * is the counts[r] elements after the blocks of the ranks before r, and rank
 * r receives block r of the reduction in recv (counts[r] elements; a block
 * may be empty). In place: recv == send + the offset of this rank's block.
 * Every member passes the same counts; the peers check their sum as they
 * check a count. Its counters and flight entry count the call as a
 * reduce-scatter of counts[rank] elements (its result, as for the equal
 * blocks). For a range whose parts have different owners: ZeRO-2's gradient
 * buckets, cut at the shards' boundaries. Errors: those of
 * rp_comm_reduce_scatter; RP_ERR_INVALID for NULL or negative counts.
 */
RP_API rp_status rp_comm_reduce_scatter_v(rp_comm *comm, const void *send, void *recv,
                                          const int64_t *counts, rp_dtype dtype, rp_reduce_op op);

/*
 * recv[r*count + i] = send of rank r [i]: the members' buffers stacked
 * along a new leading axis. recv holds size*count elements. In place: send
 * == recv + rank*count.
 */
RP_API rp_status rp_comm_all_gather(rp_comm *comm, const void *send, void *recv, int64_t count,
                                    rp_dtype dtype);

/* buf on every member becomes root's buf (count elements). */
RP_API rp_status rp_comm_broadcast(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype,
                                   int root);

/* Returns when every member has called it. */
RP_API rp_status rp_comm_barrier(rp_comm *comm);

/*
 * Splits the communicator into groups (collective over `comm`): members
 * with the same `color` form one new communicator, ranked by (key, old
 * rank). A negative color joins no group (*out = NULL). The new handles
 * keep the replica ids and timeout of the parent and are destroyed with
 * rp_comm_destroy(); they are independent of the parent after the call.
 * It is made of two all-gathers on the parent (so the parent's sequence
 * number advances by 2, and an error names those all-gathers).
 */
RP_API rp_status rp_comm_split(rp_comm *comm, int color, int key, rp_comm **out);

/* Collectives this member has completed (the next call's sequence number). */
RP_API uint64_t rp_comm_sequence(const rp_comm *comm);

/*
 * Tells the peers that this member has left the current phase of work
 * (its step returned or failed) with `status`, so that a peer waiting for it
 * in a collective fails at once instead of at the timeout; `reason` is put
 * in the peers' message. rp_comm_rejoin() undoes it for the next phase,
 * and starts the phase's numbering of user calls in messages from #0 again
 * (rp_comm_step_user_sequence). The runtime calls these (rejoin before
 * every run); user code does not need to.
 */
RP_API void rp_comm_leave(rp_comm *comm, rp_status status, const char *reason);
RP_API void rp_comm_rejoin(rp_comm *comm);

/* true once a collective error broke the communicator (see the top). */
RP_API bool rp_comm_broken(const rp_comm *comm);

/* ---- the runtime's own calls ------------------------------------------------------------ */

/*
 * The calls this member makes until rp_comm_end_internal() are the
 * runtime's own (e.g. its report all-gather at the end of a step): checked
 * like any other call, but not counted in the user's call numbers
 * (rp_comm_user_sequence), and named `what` in messages. So a replica that
 * skips a user call and goes on to an internal one is reported as "replica
 * 3 ended its step without calling all_reduce #2 (it went on to the
 * runtime's report all-gather)" on every member, not as a mismatch with a
 * call the user never wrote. `what` is copied (at most 47 characters are
 * kept); NULL reads "an internal call". Nestable once: an inner begin/end
 * pair inside an outer one keeps the outer `what`. Not thread-safe beyond
 * the handle's own thread; NULL comm is ignored.
 */
RP_API void rp_comm_begin_internal(rp_comm *comm, const char *what);
RP_API void rp_comm_end_internal(rp_comm *comm);

/*
 * User calls (collectives made outside begin/end_internal) this member has
 * completed since the communicator was created (numbered from 0 like
 * rp_comm_sequence()). Not thread-safe beyond the handle's own thread.
 */
RP_API uint64_t rp_comm_user_sequence(const rp_comm *comm);
/*
 * User calls completed in the current phase - since the last
 * rp_comm_rejoin(), which the runtime calls before every step; since
 * creation if none. This is the number messages give the next user call:
 * "all_reduce #2" is the step's third user collective, whatever the step.
 * (Members match calls by their whole sequence; this only names them.)
 */
RP_API uint64_t rp_comm_step_user_sequence(const rp_comm *comm);
/*
 * User collectives this member has entered in the current phase (since the last
 * rp_comm_rejoin), completed or not: the step's calls as this member made them, where
 * rp_comm_step_user_sequence counts those that completed. The runtime compares them across a
 * mesh's axes to name the worker that made a call on the wrong axis. 0 for NULL.
 */
RP_API uint64_t rp_comm_step_user_calls(const rp_comm *comm);

/* ---- point-to-point messages ------------------------------------------------------------ */

/*
 * Messages between two members, blocking and non-blocking, on every
 * backend (threads, mpi, mpi+threads; `peer` is a rank of this
 * communicator, for the hierarchical one a job-wide rank).
 *
 * Matching is by order, as in NCCL: the messages from member a to member b
 * form a channel, and the k-th send from a to b meets the k-th receive on b
 * from a (or b's receive from RP_ANY_SOURCE that picks a: it takes the
 * earliest message not yet received, from any member). Then tag, count and
 * dtype are compared - a receive with tag RP_ANY_TAG takes any tag - and a
 * difference is RP_ERR_MISMATCH naming both calls, e.g. "replica 1 sent
 * 'send #3 (tag 7, count 10, f32)' to replica 0, which expected 'recv #3
 * (tag 8, count 10, f32)'" (calls numbered from 0 along their channel). The
 * receiver gets it from its receive; the sender from its request if it is
 * still pending, else from its next call on the communicator. Tags are
 * checked, not used for matching: messages are never reordered by tag.
 *
 * A send does not wait for its receiver beyond buffering: small messages
 * are copied at once; a large one is copied straight into the receiver's
 * buffer when the receive is posted (zero-copy), and if the receiver is
 * not there soon the sender buffers it itself, so two members that send to
 * each other (or around a ring) at once never deadlock. A message of 0
 * elements is a message like any other (buf may be NULL).
 *
 * Errors, as for the collectives: a receive (or a pending send) whose peer
 * does not come within the communicator's timeout is RP_ERR_TIMEOUT naming
 * the peer (by rank and host under MPI) and the last call it completed; a
 * peer whose step ended (rp_comm_leave) while this member waits for it is
 * reported at once, and so is a receive from a peer that went on to a
 * collective this member has not reached (the runtime's report all-gather
 * at the end of its step, say): the two would wait for each other, so the
 * receive fails with RP_ERR_MISMATCH on both, "replica 0 went on to ...
 * without sending the message of recv (tag 7, ...), which replica 1 is
 * waiting in" (under MPI after a moment, at most a quarter second, for the
 * message to arrive). Under MPI every other member is told too, so one
 * waiting in a collective for either of the two fails at once with that
 * message instead of timing out on the member that only waited; on
 * mpi+threads a member's neighbours in its process learn it from its
 * failed wait. (mpi+threads cannot tell in one case: a member that is not
 * its process's first, of a process of several, gone on to a broadcast -
 * that receive waits for the timeout, which names the peer.) A send to a
 * member that has left (threads: its step ended or failed; MPI: it failed
 * or was told to leave, as rp_replicator_destroy does, or destroyed the
 * communicator) fails at once with RP_ERR_COMM instead of buffering a
 * message that would never be received, and breaks the communicator. A
 * point-to-point error on mpi+threads breaks the whole handle, its threads
 * part too. A mismatch or timeout breaks the communicator like a
 * collective error, and every later call on a broken communicator -
 * point-to-point included - fails at once with RP_ERR_COMM and the original
 * reason. An invalid call (negative count, NULL buffer with count > 0,
 * unknown dtype, a peer or tag out of range) is RP_ERR_INVALID and breaks
 * the communicator too, so the peer does not wait for a message that will
 * not come. Point-to-point calls do not advance rp_comm_sequence().
 *
 * The timeout counts from the start of a blocking call (send, recv, wait,
 * wait_all); rp_comm_test() never times out, but reports a peer that left
 * and a broken communicator.
 *
 * Thread-safety: as for every call, a handle is used by its own thread;
 * requests belong to the handle's thread.
 */
#define RP_ANY_SOURCE (-1)
#define RP_ANY_TAG    (-1)

/* One non-blocking call; freed by the wait (or test) that completes it. */
typedef struct rp_comm_request rp_comm_request;

/*
 * Sends count elements of buf to `peer` with `tag` (>= 0). Returns when buf
 * may be reused (the message is delivered or buffered). Errors above.
 */
RP_API rp_status rp_comm_send(rp_comm *comm, const void *buf, int64_t count, rp_dtype dtype,
                              int peer, int tag);

/*
 * Receives the next message on the channel from `peer` (or RP_ANY_SOURCE)
 * into buf, which holds count elements: the sender's count, dtype and tag
 * (unless RP_ANY_TAG) must match. Errors above.
 */
RP_API rp_status rp_comm_recv(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype, int peer,
                              int tag);

/*
 * The non-blocking forms: *req gets a request (NULL on error) that
 * rp_comm_wait / rp_comm_test / rp_comm_wait_all completes and frees. buf
 * must stay valid and untouched until then. Requests complete in any order.
 * A request not completed before its handle is destroyed is leaked.
 */
RP_API rp_status rp_comm_isend(rp_comm *comm, const void *buf, int64_t count, rp_dtype dtype,
                               int peer, int tag, rp_comm_request **req);
RP_API rp_status rp_comm_irecv(rp_comm *comm, void *buf, int64_t count, rp_dtype dtype, int peer,
                               int tag, rp_comm_request **req);

/* Waits until req completes, frees it and returns its status. NULL: RP_OK. */
RP_API rp_status rp_comm_wait(rp_comm_request *req);

/*
 * *done = whether req has completed; if so it is freed and its status is
 * returned (the request must not be used again); if not, RP_OK.
 */
RP_API rp_status rp_comm_test(rp_comm_request *req, bool *done);

/*
 * Waits for all n requests (NULL entries are skipped) and frees each; the
 * first error is returned (the other requests are still completed or, on a
 * broken communicator, failed, and freed).
 */
RP_API rp_status rp_comm_wait_all(int n, rp_comm_request **reqs);

/*
 * Whether a message from `peer` (or RP_ANY_SOURCE) with `tag` (or
 * RP_ANY_TAG) is ready to be received, without receiving it: *ready, and if
 * so its *source, *msg_tag, *count and *dt (each pointer may be NULL).
 * It looks at the message the next receive from `peer` would take (for
 * RP_ANY_SOURCE, the earliest from any member whose tag fits); messages
 * already claimed by a posted irecv are not seen. The next receive from
 * the found source - or from RP_ANY_SOURCE, made next - takes that message.
 * (In the hierarchical backend, an RP_ANY_SOURCE receive across processes
 * takes a message when it is waited on, not when posted.) Non-blocking.
 * Errors: RP_ERR_INVALID (bad peer), RP_ERR_COMM (broken communicator).
 */
RP_API rp_status rp_comm_probe(rp_comm *comm, int peer, int tag, bool *ready, int *source,
                               int *msg_tag, int64_t *count, rp_dtype *dt);

/* ---- the flight recorder ---------------------------------------------------------------- */

/*
 * Every handle keeps its last N calls in a ring (PyTorch's NCCL flight
 * recorder is the model): each collective and each point-to-point call made
 * through the calls above, with its kind, dtype, count, sequence number,
 * peer, tag, start and end times and outcome. When a job fails, the ring of
 * every member says what each one was doing: which call it made last,
 * which it was waiting in, and which it never reached.
 *
 * N is $RP_FLIGHT_ENTRIES (default 64; 0 turns the recorder off), or
 * rp_comm_flight_set_size() per handle. The ring is allocated once, at the
 * handle's first call (or at set_size); recording a call is a few stores
 * and two clock reads, no allocation. If that one allocation fails the
 * handle records nothing (rp_comm_flight_count() is 0); calls are not
 * affected.
 *
 * The runtime (rp_replicator_run) writes every worker's rings to
 * <flight dir>/flight-<worker>.txt and .jsonl when a run fails (see
 * rp_replicator_set_flight_dir; the trainer sets it to its run directory).
 * A program that uses communicators directly dumps them itself, e.g. on
 * any error of a collective: rp_comm_flight_dump(comm, stderr, false).
 *
 * Thread-safety: as for every call, a handle's ring is written by its own
 * thread; read it (get, dump) on that thread, or once it is idle.
 */
typedef enum {
    RP_FLIGHT_ALL_REDUCE = 0,
    RP_FLIGHT_REDUCE_SCATTER = 1,
    RP_FLIGHT_ALL_GATHER = 2,
    RP_FLIGHT_BROADCAST = 3,
    RP_FLIGHT_BARRIER = 4,
    RP_FLIGHT_SEND = 5, /* rp_comm_send, or rp_comm_isend (blocking = false) */
    RP_FLIGHT_RECV = 6, /* rp_comm_recv, or rp_comm_irecv */
} rp_flight_kind;

/* "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "send", "recv". */
RP_API const char *rp_flight_kind_name(rp_flight_kind kind);

/* One recorded call. */
typedef struct rp_flight_entry {
    uint64_t call;     /* the handle's call number: every recorded call, from 0 */
    uint64_t seq;      /* a collective's sequence number (rp_comm_sequence() before it, as the
                          members match it); a message's number among this handle's messages */
    uint64_t user_seq; /* a user collective's number in its step (as messages name it: "#2") */
    rp_flight_kind kind;
    bool blocking;     /* messages: send/recv (true) or isend/irecv; collectives: true */
    bool internal;     /* the runtime's own call (rp_comm_begin_internal), named by `what` */
    bool done;         /* completed (status holds the outcome); false: still pending */
    rp_dtype dtype;    /* (barrier: unused) */
    rp_reduce_op op;   /* reductions only */
    int64_t count;     /* elements as passed */
    int peer;          /* broadcast: root; message: the other member (RP_ANY_SOURCE); else -1 */
    int tag;           /* messages; else -1 */
    rp_status status;  /* the call's outcome once done */
    double start, end; /* rp_now_s() clock; end is 0 while pending */
    char what[48];     /* internal calls: the runtime's name for it */
} rp_flight_entry;

/*
 * Gives this handle a ring of `entries` (0: off; at most 1 << 20) and
 * clears it. Errors: RP_ERR_INVALID (NULL comm, entries out of range),
 * RP_ERR_NOMEM (the handle then records nothing).
 */
RP_API rp_status rp_comm_flight_set_size(rp_comm *comm, int entries);

/* Entries held (at most the ring's size); 0 for NULL or a ring that is off. */
RP_API int rp_comm_flight_count(const rp_comm *comm);

/* Calls recorded since the ring was (re)made: the next call's number. */
RP_API uint64_t rp_comm_flight_calls(const rp_comm *comm);

/*
 * *out = entry i of those held, oldest first (0 <= i < rp_comm_flight_count).
 * Errors: RP_ERR_INVALID (NULL argument, i out of range, named).
 */
RP_API rp_status rp_comm_flight_get(const rp_comm *comm, int i, rp_flight_entry *out);

/*
 * Writes the ring to f, oldest first: a header naming the member (replica,
 * rank, size, backend, calls made, whether the communicator is broken) and
 * one line per call - a table (json false) with ages in seconds before the
 * dump and durations in ms, or JSON lines (json true: one object for the
 * header, one per call, times on the rp_now_s() clock). Errors:
 * RP_ERR_INVALID (NULL argument), RP_ERR_IO (a write failed).
 */
RP_API rp_status rp_comm_flight_dump(const rp_comm *comm, FILE *f, bool json);

/* ---- traffic counters ------------------------------------------------------------------- */

/*
 * Every handle counts the calls it completes and the payload bytes they
 * move, per kind of call (rp_flight_kind: all-reduce, reduce-scatter,
 * all-gather, broadcast, barrier, send, recv) and per class:
 *
 *  - RP_COMM_USER: calls made outside rp_comm_begin_internal (the user's,
 *    and the layers': cross-replica batch norm, tensor-parallel layers);
 *  - RP_COMM_RUNTIME: the runtime's own calls that move a step's data - the
 *    gradient all-reduce buckets, ZeRO-1's reduce-scatters and all-gathers
 *    and its finiteness exchange, parameter broadcasts at creation;
 *  - RP_COMM_HOUSEKEEPING: the runtime's checks and bookkeeping, made inside
 *    rp_comm_begin_housekeeping: the report all-gathers at the end of each
 *    run, the periodic parameter checksums, the topology splits, the
 *    non-finite-gradient exchange of a failing step.
 *
 * Payload bytes are counted at the API, the same on every backend: count x
 * rp_dtype_size(dtype) of the call as this member passed it - an all-reduce's
 * buffer, a reduce-scatter's block (its result, 1/size of what it sends), an
 * all-gather's contribution (1/size of what it receives), a broadcast's
 * buffer (root or not), a message's count x size on both its send and its
 * receive. A barrier counts a call and no bytes. What a backend puts on the
 * wire (ring steps, headers, the MPI backend's call checks) is not counted:
 * the numbers are exact and predictable from the calls alone (the planner,
 * `replicator plan`, predicts them). A call is counted once it completed
 * (collectives) or was posted (messages), successfully; a failed call is
 * not counted. Counting costs two additions; it is always on.
 *
 * Thread-safety: as for every call, read a handle's counters on its own
 * thread, or once it is idle.
 */
typedef enum { RP_COMM_USER = 0, RP_COMM_RUNTIME = 1, RP_COMM_HOUSEKEEPING = 2 } rp_comm_class;
#define RP_COMM_CLASSES 3
#define RP_COMM_KINDS   7 /* the rp_flight_kind values */

/* "user", "runtime", "housekeeping". */
RP_API const char *rp_comm_class_name(rp_comm_class cls);

typedef struct rp_comm_tally {
    uint64_t calls;
    uint64_t bytes;
} rp_comm_tally;

typedef struct rp_comm_stats {
    rp_comm_tally by[RP_COMM_CLASSES][RP_COMM_KINDS]; /* [class][rp_flight_kind] */
} rp_comm_stats;

/*
 * *out = this handle's counters since it was created or last reset.
 * Errors: RP_ERR_INVALID (NULL argument).
 */
RP_API rp_status rp_comm_stats_get(const rp_comm *comm, rp_comm_stats *out);
/* Zeroes this handle's counters. NULL is ignored. */
RP_API void rp_comm_stats_reset(rp_comm *comm);
/* *out = a - b, element by element (the calls between two readings). */
RP_API void rp_comm_stats_diff(const rp_comm_stats *a, const rp_comm_stats *b, rp_comm_stats *out);

/*
 * Like rp_comm_begin_internal (ended by rp_comm_end_internal), and the calls
 * until then are counted as RP_COMM_HOUSEKEEPING. Inside an outer internal
 * call the outer class stays.
 */
RP_API void rp_comm_begin_housekeeping(rp_comm *comm, const char *what);

/* ---- fault injection --------------------------------------------------------------------- */

/*
 * A schedule of faults injected into chosen workers' calls, to test what a
 * job does when a worker is late, dies or sends a wrong call - without
 * sleeps or signals in the test (docs/faults.md has the whole language):
 *
 *     seed=7; delay:worker=1,call=40,ms=300; kill:worker=2,run=10;
 *     corrupt:worker=0,call=25,what=header; delay:worker=any,p=0.01,ms=50
 *
 * Clauses are separated by ';'. A fault is KIND:KEY=VALUE,... with KIND
 * delay (ms=N: the call starts N ms late), kill (the worker dies at the
 * call: under the MPI backends its process ends by SIGKILL, on the threads
 * backend its calls stop - they never reach the peers, who time out and
 * name it - and its blocked call then fails with RP_ERR_COMM) or corrupt
 * (what=header, the default: the call as the peers see it has one element
 * fewer, or another dtype when it has none, so the check reports a
 * mismatch; what=data: one bit of this worker's result of a collective is
 * flipped after the call - no header check can see that). worker= is a
 * replica id (rp_comm_replica_id of the handle's rank) or any. When:
 * call=N is the handle's N-th call from 0 (collectives and message posts
 * together, the flight recorder's numbering); run=R the handle's R-th run
 * (the runtime starts one at every rp_replicator_run, counted from 1; the
 * calls before the first are run 0), with call=N then counted from the
 * run's start (default 0, its first call); p=P makes the fault random:
 * each matching call fires with probability P, drawn from the
 * counter-based generator at (seed, fault, worker, call), so a seed always
 * gives the same faults. Every fault injected logs a line (WARN) starting
 * "fault injected:" naming the fault, the worker, the call and the origin.
 *
 * The schedule is process-wide: $RP_FAULTS (read at the first call), or
 * this call, which replaces it (spec NULL or empty: no faults). `origin`
 * names the spec in messages and log lines (NULL: "rp_comm_faults_set").
 * Calls and runs are counted while a schedule is set: set it before the
 * communicators are created (or made their first call) for the numbers
 * above. Without a schedule a call costs one predictable branch more.
 * Not thread-safe against calls in flight: set it between runs.
 * Errors: RP_ERR_INVALID naming the fault and the token at fault (the
 * schedule in force is then unchanged).
 */
RP_API rp_status rp_comm_faults_set(const char *spec, const char *origin);

/*
 * Checks the schedule in force ($RP_FAULTS or rp_comm_faults_set) against a
 * job whose workers have the ids 0 to workers - 1: a fault aimed at a worker
 * the job does not have would never fire, so it is refused. `noun`
 * ("worker", "replica"; NULL: "worker") names them in the message. The
 * runtime calls it when it creates a replicator; a program of its own
 * communicators can call it once it knows their size. Thread-safe against
 * nothing but itself: call it between runs.
 * Errors: RP_ERR_INVALID "--faults: fault 'kill:worker=5,run=2' is aimed at
 * worker 5, but the job has 2 workers (0 to 1)". An invalid $RP_FAULTS is
 * not reported here: it fails every call, as above.
 */
RP_API rp_status rp_comm_faults_check(int workers, const char *noun);

/* Faults injected in this process since the schedule was set. Thread-safe. */
RP_API uint64_t rp_comm_faults_injected(void);

#ifdef __cplusplus
}
#endif

#endif
