/*
 * remote.h - what the two sides of the remote parameter servers share (the
 * workers' side in remote.c, the servers' loop in server.c): the messages,
 * the group, and the polling back-off. Private to src/ps/.
 *
 * Everything goes over one communicator's point-to-point messages
 * (replicator/comm.h): the MPI backend in a job, the threads backend in
 * tests. Messages between two members are matched in the order they were
 * posted, so a request is a header followed by its data blocks on the same
 * channel, and a reply likewise; tags only label the messages (comm checks
 * them).
 */
#ifndef RP_PS_REMOTE_H
#define RP_PS_REMOTE_H

#include "ps/ps_internal.h"
#include "replicator/comm.h"

#define TAG_REQ        1 /* a request header (ps_req, u8) */
#define TAG_DATA       2 /* a request's data block (f32; FAIL's text: u8) */
#define TAG_REPLY      3 /* a reply header (ps_rep, u8) */
#define TAG_REPLY_DATA 4 /* a reply's data block (f32; stats: u8; an error's text: u8) */
#define HOST_MAX       64
#define TEXT_MAX       480
#define MAX_SETS       8 /* sets alive at once on a server (and per worker) */
#define MAX_BLOCKS     3 /* data blocks of one message: values, two slots */

enum {
    MSG_CREATE = 1, /* numel, staleness, timeout, optimizer; reply: ack */
    MSG_INIT,       /* step; blocks: values [+ slots]; reply: ack */
    MSG_PUSH,       /* lr; block: the gradient; reply: ack, or the values with F_PULL */
    MSG_PULL,       /* reply: the values (once the staleness bound allows) */
    MSG_SNAPSHOT,   /* reply: step; values [+ slots with F_SLOTS] */
    MSG_STATS,      /* reply: rp_ps_server_stats (one u8 block) */
    MSG_JOIN,       /* phase; reply: ack */
    MSG_LEAVE,      /* reply: ack */
    MSG_CLAIM,      /* server 0 only; reply: the ticket */
    MSG_DROP,       /* the worker destroyed its handle on the set; no reply */
    MSG_BYE,        /* the worker destroyed its group; no reply */
    MSG_FAIL,       /* the worker's job failed: status; its reason as one u8 block; no reply */
};
#define F_PULL  1 /* PUSH: reply with the values */
#define F_SLOTS 2 /* INIT carries, SNAPSHOT wants, the slots */

/*
 * A request header. `blocks` data messages of `count` elements follow it
 * (blocks of 0 elements are not sent), so a server can always take a
 * request's data off the channel, even one it rejects.
 */
typedef struct ps_req {
    int32_t kind, worker, set, flags;
    int64_t arg;           /* CREATE: numel; INIT: step; JOIN: phase; FAIL: status */
    float lr;              /* PUSH */
    int32_t staleness;     /* CREATE */
    double timeout_s;      /* CREATE */
    int32_t blocks, pad;   /* data blocks that follow */
    int64_t count;         /* elements per block */
    rp_optim_config optim; /* CREATE */
} ps_req;

/*
 * A reply header: an error's reply has one block, its text (TEXT_MAX u8);
 * a successful one the blocks its request asked for (`blocks` of `count`).
 */
typedef struct ps_rep {
    int32_t status, kind;
    int32_t blocks, pad;
    int64_t count;
    int64_t arg; /* SNAPSHOT: step; CLAIM: the ticket */
} ps_rep;

struct rp_ps_group {
    rp_comm *comm;
    bool owns_comm; /* made by rp_ps_mpi_group_create: destroyed with the group */
    int rank, size, workers, servers;
    double timeout_s;
    char (*hosts)[HOST_MAX]; /* [size] each rank's host, for messages */
    int sets_made;           /* worker: sets created so far (the next set's id) */
    int sets_alive;          /* worker: handles not yet destroyed */
    /* A server that did not answer breaks the communicator, so every set of this worker. */
    bool broken;
    rp_status broken_status;
    char reason[1024];
};

/* Server s is rank workers + s of the group's communicator. */
#define SERVER_RANK(g, s) ((g)->workers + (s))

/* "push", "pull", ... for messages. */
const char *ps_remote_kind_name(int kind);

/*
 * Yields a few hundred times, then sleeps 20 us growing to 160 us, then
 * 1 ms: a waiting rank leaves the cores to the others (ranks share the
 * machine's cores). `polls` counts the polls that found nothing since the
 * last progress.
 */
void ps_remote_back_off(unsigned polls);

/*
 * Polls reqs[0..n) (NULL entries are done) with rp_comm_test until all are
 * done or `deadline` (rp_now_s) passes; those still pending then are
 * waited for with what is left of it (at least 1 ms), so each is completed
 * and freed either way. ok[i] (if given) says whether request i succeeded;
 * the first error's status is returned, its message in rp_last_error().
 * `on_done(ctx, i)`, if given, runs as request i completes successfully
 * and may post more requests at reqs[j] for j >= *n (growing *n).
 */
rp_status ps_remote_wait(rp_comm *c, rp_comm_request **reqs, int *n, bool *ok, double deadline,
                         rp_status (*on_done)(void *ctx, int i), void *ctx);

#endif
