/*
 * protocol.h - what the MPI parameter servers' two sides share: the
 * messages (see ps_mpi.c for the protocol), the group, and the polling
 * back-off. Private to src/ps/mpi/.
 */
#ifndef RP_PS_MPI_PROTOCOL_H
#define RP_PS_MPI_PROTOCOL_H

#include <mpi.h>

#include "comm/comm_internal.h"
#include "ps/ps_internal.h"

#define TAG_REQ    7101
#define TAG_REPLY  7200 /* + set id modulo REPLY_TAGS */
#define REPLY_TAGS 16000
#define HOST_MAX   64
#define TEXT_MAX   480
#define MAX_SETS   8 /* sets alive at once on a server (and per worker) */
#define MAX_BLOCKS 4 /* header, values, two slots */

enum {
    MSG_CREATE = 1, /* numel, staleness, timeout, optimizer; reply: ack */
    MSG_INIT,       /* step; values [+ slots]; reply: ack */
    MSG_PUSH,       /* lr; gradient; reply: ack, or the values with F_PULL */
    MSG_PULL,       /* reply: the values (once the staleness bound allows) */
    MSG_SNAPSHOT,   /* reply: step; values [+ slots with F_SLOTS] */
    MSG_STATS,      /* reply: rp_ps_server_stats */
    MSG_JOIN,       /* phase; reply: ack */
    MSG_LEAVE,      /* reply: ack */
    MSG_CLAIM,      /* server 0 only; reply: the ticket */
    MSG_DROP,       /* the worker destroyed its handle on the set; no reply */
    MSG_BYE,        /* the worker destroyed its group; no reply */
    MSG_FAIL,       /* the worker's job failed: status; its reason as text; no reply */
};
#define F_PULL  1 /* PUSH: reply with the values */
#define F_SLOTS 2 /* INIT carries, SNAPSHOT wants, the slots */

typedef struct ps_req {
    int32_t kind, worker, set, flags;
    int64_t arg;           /* CREATE: numel; INIT: step; JOIN: phase; FAIL: status */
    float lr;              /* PUSH */
    int32_t staleness;     /* CREATE */
    double timeout_s;      /* CREATE */
    rp_optim_config optim; /* CREATE */
} ps_req;

typedef struct ps_rep {
    int32_t status, kind;
    int64_t arg;         /* SNAPSHOT: step; CLAIM: the ticket */
    char text[TEXT_MAX]; /* an error's message */
} ps_rep;

/* Payloads follow the headers; floats must stay aligned in the server's buffers. */
_Static_assert(sizeof(ps_req) % 8 == 0, "request header keeps the payload aligned");
_Static_assert(sizeof(ps_rep) % 8 == 0, "reply header keeps the payload aligned");

struct rp_ps_group {
    MPI_Comm comm;
    int rank, size, workers, servers;
    double timeout_s;
    char (*hosts)[HOST_MAX]; /* [size] each rank's host, for messages */
    int sets_made;           /* worker: sets created so far (the next set's id) */
    int sets_alive;          /* worker: handles not yet destroyed */
};

/* Worker `set`'s replies come on this tag; server s is world rank workers + s. */
#define REPLY_TAG(set)    (TAG_REPLY + (set) % REPLY_TAGS)
#define SERVER_RANK(g, s) ((g)->workers + (s))

/* "push", "pull", ... for messages. */
const char *rp_ps_mpi_kind_name(int kind);

/*
 * Yields a few hundred times, then sleeps 20 us growing to 160 us: a waiting
 * rank leaves the cores to the others (ranks share the machine's cores).
 * `polls` counts the polls that found nothing since the last progress.
 */
void rp_ps_mpi_back_off(unsigned polls);

#endif
