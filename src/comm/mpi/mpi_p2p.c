/*
 * mpi_p2p.c - the MPI communicator's point-to-point messages, and the
 * notices (a mismatch told to its sender, a peer that left or gave up)
 * that p2p and the collectives both read.
 */
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/mpi_internal.h"

/* ---- point-to-point ------------------------------------------------------------------------- */

/*
 * Each message is one MPI message, straight from the sender's buffer into
 * the receiver's (zero-copy both ways): the call's tag and dtype ride in the
 * MPI tag ((tag * lanes + source lane) * 8 + dtype), its count in the
 * message's size, and its number along the channel is counted on both
 * sides (MPI keeps the messages of one sender in order). A receive finds
 * its message with a matched probe (MPI_Improbe), so it knows the sender's
 * call before taking the data: a mismatch is found without moving a byte
 * into the receiver's buffer, and the receiver tells the sender (a notice
 * on the collectives' communicator, TAG_NOTICE).
 *
 * Lanes are the members of one process in the hierarchical backend: lane l
 * receives on its own duplicate pc[l], so one member's receives never take
 * another's messages. The flat backend has one lane.
 *
 * A receive matched while none is posted for it (another lane's member, or
 * draining - see below) is received into a buffer of its own and waits in
 * the lane's queue of unexpected messages, ahead of anything still in MPI.
 * A send that waits more than BUFFER_AFTER_S for its receiver drains its
 * lane's incoming messages into that queue: a peer sending to us at the
 * same time then completes, and so do we. All of this state is under the
 * MPI lock.
 *
 * A point-to-point error (a mismatch, a skipped send) is found by one
 * member; it tells the member that caused it, which fails with the same
 * message, and every other member (a notice each, TAG_NOTICE), whose
 * communicator is then broken with it: a member waiting in a collective for
 * one of the two fails at once, with the message that names the cause,
 * instead of timing out on a member that only waited.
 */
#define BUFFER_AFTER_S 0.002

enum { MREQ_POSTED, MREQ_ACTIVE, MREQ_DONE };

typedef struct umsg {
    struct umsg *next;
    int proc, slane; /* the channel */
    comm_p2p_desc d; /* the send, numbered */
    char *data;
} umsg;

typedef struct mreq {
    rp_comm_request base;
    comm_p2p_desc d; /* d.peer: a rank of the communicator (or RP_ANY_SOURCE) */
    int proc, lane;  /* the peer's MPI rank (or MPI_ANY_SOURCE) and lane (-1: any); */
    int mylane;
    void *buf;
    MPI_Request mr;
    int state;
    bool mismatch; /* receiving a mismatched message into tmp, to fail */
    char *tmp;
    comm_p2p_desc got; /* a receive's matched send */
    int got_proc, got_lane;
    rp_status status;
    char error[1400];
    struct mreq *next; /* the lane's posted receives */
    double posted_s;
    bool drained;
    double peer_on_s; /* a receive: when its peer was first seen in a later collective (0: not) */
} mreq;

typedef struct lane_state {
    mreq *posted, *ptail;
    umsg *uhead, *utail;
    bool owed; /* the lane's member gets the breaking error itself (its message mismatched) */
} lane_state;

static rp_status p2p_status_broken(rp_comm *c, int lane, const char *what);

/* The member of (MPI rank, lane) in this communicator, and its replica id, for messages. */
static int member_of(const rp_comm *c, int proc, int lane)
{
    mpi_impl *m = M(c);
    return m->lane_rank ? m->lane_rank[proc * m->lanes + lane] : proc;
}

static void member_name(const rp_comm *c, int proc, int lane, char *buf, size_t size)
{
    const mpi_impl *m = M(c);
    int r = member_of(c, proc, lane);
    int id = r < 0 ? -1 : m->lane_ids ? m->lane_ids[r] : c->ids[r];
    snprintf(buf, size, "%s %d (rank %d, %s)", comm_noun(c), id, proc, m->hosts[proc]);
}

/* Notices of mismatches, of peers that left and of peers that closed: read under the lock, at
 * every p2p poll. */
void comm_mpi_poll_notices(rp_comm *c)
{
    mpi_impl *m = M(c);
    for (;;) {
        int flag = 0, n = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_CLOSE, m->comm, &flag, &st);
        if (!flag) break;
        /* What it sent here on each channel (see mpi_close.c): a receive past that fails. */
        size_t LL = (size_t)m->lanes * (size_t)m->lanes;
        MPI_Get_count(&st, MPI_BYTE, &n);
        bool counts = m->peer_sent && (size_t)n == LL * sizeof(uint64_t);
        void *into = counts ? (void *)&m->peer_sent[(size_t)st.MPI_SOURCE * LL]
                            : malloc(n > 0 ? (size_t)n : 1);
        MPI_Recv(into, into ? n : 0, MPI_BYTE, st.MPI_SOURCE, TAG_CLOSE, m->comm,
                 MPI_STATUS_IGNORE);
        if (!counts) free(into);
        m->left[st.MPI_SOURCE].closed = counts;
    }
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_NOTICE, m->comm, &flag, &st);
        if (!flag) break;
        char text[NOTICE_MAX + 8];
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        if (n > (int)sizeof text - 1) n = (int)sizeof text - 1;
        MPI_Recv(text, n, MPI_BYTE, st.MPI_SOURCE, TAG_NOTICE, m->comm, MPI_STATUS_IGNORE);
        int lane = 0;
        memcpy(&lane, text, sizeof lane);
        text[n > (int)sizeof lane ? n : (int)sizeof lane] = '\0';
        if (!m->broken && lane >= 0 && lane < m->lanes) m->lane[lane].owed = true;
        comm_mpi_mark_broken(c, RP_ERR_MISMATCH, text + sizeof lane);
    }
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_LEFT, m->comm, &flag, &st);
        if (!flag) break;
        /* [status][k][k ranks it gave up on][reason] (see give_up; k = 0 for a leave). */
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        char *text = calloc((size_t)n + 1, 1);
        MPI_Recv(text, text ? n : 0, MPI_BYTE, st.MPI_SOURCE, TAG_LEFT, m->comm, MPI_STATUS_IGNORE);
        if (!text || n < (int)(2 * sizeof(int))) {
            free(text);
            continue;
        }
        left_note *ln = &m->left[st.MPI_SOURCE];
        int head[2];
        memcpy(head, text, sizeof head);
        ln->left = true;
        ln->status = (rp_status)head[0];
        ln->blames_me = false;
        size_t off = sizeof head;
        for (int i = 0; i < head[1] && off + sizeof(int) <= (size_t)n; i++, off += sizeof(int)) {
            int r;
            memcpy(&r, text + off, sizeof r);
            if (r == c->rank) ln->blames_me = true;
        }
        if (off > (size_t)n) off = (size_t)n;
        snprintf(ln->reason, sizeof ln->reason, "%.*s", (int)sizeof ln->reason - 1, text + off);
        free(text);
    }
}

/*
 * Notices are rare, and under oversubscription each MPI_Iprobe that finds
 * nothing gives the core away (mpi_yield_when_idle): looking twice per p2p
 * call cut a parameter server's rate several-fold. So p2p looks at most once
 * per NOTICE_EVERY_S - a clock read on the fast path - which still sees a
 * mismatch or a peer's leave within about a millisecond of its arrival.
 * Under the lock.
 */
#define NOTICE_EVERY_S 0.001

static void poll_notices_due(rp_comm *c)
{
    mpi_impl *m = M(c);
    double now = rp_now_s();
    if (now < m->notices_due) return;
    m->notices_due = now + NOTICE_EVERY_S;
    comm_mpi_poll_notices(c);
}

static int mpi_tag(const mpi_impl *m, const comm_p2p_desc *d, int slane)
{
    return (int)((((int64_t)d->tag * m->lanes + slane) << 3) | d->dtype);
}

static void req_done(mreq *r, rp_status status, const char *error)
{
    r->status = status;
    if (status != RP_OK) snprintf(r->error, sizeof r->error, "%s", error);
    r->state = MREQ_DONE;
}

/* A notice's text: the lane it blames (-1: none here), then the message. */
static int notice_text(char *buf, size_t size, int lane, const char *msg)
{
    memcpy(buf, &lane, sizeof(int));
    size_t len = strlen(msg) + 1;
    if (len > size - sizeof(int)) len = size - sizeof(int);
    memcpy(buf + sizeof(int), msg, len);
    buf[size - 1] = '\0';
    return (int)(sizeof(int) + len);
}

/*
 * Tells the member at (proc, lane) the error it caused, so that it fails with the same message,
 * and every other process, whose communicator it breaks (see the top of this section). Once per
 * communicator (the error breaks it); the buffers live until destroy. Under the lock, before the
 * communicator is marked broken.
 */
static void tell_peers(rp_comm *c, int proc, int lane, const char *msg)
{
    mpi_impl *m = M(c);
    if (m->broken) return;
    int len = notice_text(m->notice, sizeof m->notice, lane, msg);
    int len_all = notice_text(m->notice_all, sizeof m->notice_all, -1, msg);
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank && q != proc) continue;
        MPI_Isend(q == proc ? m->notice : m->notice_all, q == proc ? len : len_all, MPI_BYTE, q,
                  TAG_NOTICE, m->comm, &m->notice_reqs[q]);
    }
}

/*
 * Whether the member at (MPI rank `proc`, `lane`) has gone on to a collective this member has not
 * reached: its process's message of one waits here (this process has received every message of
 * the collectives it completed), or its call was kept for the next one. Under the lock.
 *
 * In the hierarchical backend a process's collective messages are its first member's (lane 0),
 * and the others are in the call only if their process's part of it came first: it does for
 * every call with data to reduce or gather (hashed) and for a barrier, not for a broadcast,
 * which the first member may join alone. So for another member of a process of several, a
 * call seen only by its descriptor's tag (a broadcast, a barrier or a call of count 0, told
 * apart only once received) is not taken as a sign: that receive waits for the timeout.
 */
static bool peer_went_on(rp_comm *c, int proc, int lane)
{
    mpi_impl *m = M(c);
    bool whole = m->lanes == 1 || lane == 0 || member_of(c, proc, 1) < 0;
    if (m->early_ok && m->early_ok[proc] && m->early[proc].kind != RP_COLL_LEFT)
        return whole || m->early[proc].kind != RP_COLL_BROADCAST;
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(proc, MPI_ANY_TAG, m->comm, &flag, &st);
    if (!flag || st.MPI_TAG == TAG_NOTICE || st.MPI_TAG == TAG_LEFT || st.MPI_TAG == TAG_CLOSE)
        return false;
    return whole || (st.MPI_TAG & HASH_BIT);
}

/* A matched receive's send differs: fail the receive, tell the sender, break. Under the lock. */
static void p2p_mismatch(rp_comm *c, mreq *r)
{
    char who_s[160], who_r[160], msg[NOTICE_MAX];
    comm_p2p_desc s = r->got, rd = r->d;
    member_name(c, r->got_proc, r->got_lane, who_s, sizeof who_s);
    member_name(c, c->rank, r->mylane, who_r, sizeof who_r);
    comm_p2p_mismatch_str(&s, who_s, &rd, who_r, msg, sizeof msg);
    tell_peers(c, r->got_proc, r->got_lane, msg);
    comm_mpi_mark_broken(c, RP_ERR_MISMATCH, msg);
    req_done(r, RP_ERR_MISMATCH, msg);
}

/* Takes r's message from the unexpected queue, if one is there. Under the lock. */
static bool take_unexpected(rp_comm *c, lane_state *ls, mreq *r)
{
    umsg **p = &ls->uhead, *prev = NULL;
    while (*p && !((r->proc == MPI_ANY_SOURCE || (*p)->proc == r->proc) &&
                   (r->lane < 0 || (*p)->slane == r->lane))) {
        prev = *p;
        p = &(*p)->next;
    }
    umsg *u = *p;
    if (!u) return false;
    *p = u->next;
    if (ls->utail == u) ls->utail = prev;
    r->got = u->d;
    r->got_proc = u->proc;
    r->got_lane = u->slane;
    r->d.num = u->d.num;
    if (r->d.peer == RP_ANY_SOURCE) r->d.peer = member_of(c, u->proc, u->slane);
    if (comm_p2p_accepts(&r->d, &u->d)) {
        size_t bytes = (size_t)u->d.count * rp_dtype_size(u->d.dtype);
        if (bytes) memcpy(r->buf, u->data, bytes);
        req_done(r, RP_OK, NULL);
    } else {
        p2p_mismatch(c, r);
    }
    free(u->data);
    free(u);
    return true;
}

/* The send behind a probed message. */
static void decode(const mpi_impl *m, const MPI_Status *st, comm_p2p_desc *d, int *slane)
{
    int bytes = 0;
    MPI_Get_count(st, MPI_BYTE, &bytes);
    int t = st->MPI_TAG;
    d->send = 1;
    d->dtype = t & 7;
    *slane = (t >> 3) % m->lanes;
    d->tag = (t >> 3) / m->lanes;
    size_t es = rp_dtype_size(d->dtype);
    d->count = es ? bytes / (int64_t)es : 0;
}

/*
 * Matches the lane's posted receives with messages, in posting order
 * (see the top of this section). Under the lock.
 */
static void progress(rp_comm *c, int lane, bool drain)
{
    mpi_impl *m = M(c);
    lane_state *ls = &m->lane[lane];
    MPI_Comm pc = m->pc[lane];
    mreq *prev = NULL;
    /*
     * A receive that found nothing blocks its channel for the rest of the
     * pass: a message arriving meanwhile is the earlier receive's, not a
     * later one's. A receive from any source stops at any blocked channel.
     */
    int blocked[64][2], nblocked = 0;
    for (mreq *r = ls->posted; r;) {
        bool skip = false;
        for (int b = 0; b < nblocked && !skip; b++)
            skip = r->proc == MPI_ANY_SOURCE ||
                   (blocked[b][0] == r->proc &&
                    (blocked[b][1] == r->lane || r->lane < 0 || blocked[b][1] < 0));
        if (skip && r->proc == MPI_ANY_SOURCE) break;
        bool matched = !skip && take_unexpected(c, ls, r);
        while (!matched && !skip) {
            int flag = 0;
            MPI_Message msg;
            MPI_Status st;
            MPI_Improbe(r->proc, MPI_ANY_TAG, pc, &flag, &msg, &st);
            if (!flag) break;
            comm_p2p_desc d = {0};
            int slane;
            decode(m, &st, &d, &slane);
            int bytes = 0;
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            uint64_t *num = &m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + slane) * (size_t)m->lanes +
                                     (size_t)lane];
            d.num = (*num)++;
            d.peer = member_of(c, c->rank, lane);
            if (r->lane >= 0 && slane != r->lane) {
                /* Another lane's message from that process: it waits in the queue. */
                umsg *u = calloc(1, sizeof *u);
                char *data = malloc(bytes ? (size_t)bytes : 1);
                if (!u || !data) {
                    free(u);
                    free(data);
                    MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
                    comm_mpi_mark_broken(c, RP_ERR_NOMEM, "out of memory queueing a message");
                    return;
                }
                MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
                *u = (umsg){.proc = st.MPI_SOURCE, .slane = slane, .d = d, .data = data};
                if (ls->utail)
                    ls->utail->next = u;
                else
                    ls->uhead = u;
                ls->utail = u;
                continue;
            }
            r->got = d;
            r->got_proc = st.MPI_SOURCE;
            r->got_lane = slane;
            r->d.num = d.num;
            if (r->d.peer == RP_ANY_SOURCE) r->d.peer = member_of(c, st.MPI_SOURCE, slane);
            r->mismatch = !comm_p2p_accepts(&r->d, &d);
            void *into = r->buf;
            if (r->mismatch) into = r->tmp = malloc(bytes ? (size_t)bytes : 1);
            MPI_Imrecv(into, bytes, MPI_BYTE, &msg, &r->mr);
            r->state = MREQ_ACTIVE;
            matched = true;
        }
        mreq *next = r->next;
        if (matched) {
            /* Off the posted list. */
            if (prev)
                prev->next = next;
            else
                ls->posted = next;
            if (ls->ptail == r) ls->ptail = prev;
            r->next = NULL;
        } else {
            if (r->proc == MPI_ANY_SOURCE) break; /* nothing has come from anyone */
            if (!skip) {
                if (nblocked == 64) break;
                blocked[nblocked][0] = r->proc;
                blocked[nblocked][1] = r->lane;
                nblocked++;
            }
            prev = r;
        }
        r = next;
    }
    while (drain) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, pc, &flag, &msg, &st);
        if (!flag) break;
        comm_p2p_desc d = {0};
        int slane, bytes = 0;
        decode(m, &st, &d, &slane);
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        d.num =
            m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + slane) * (size_t)m->lanes + (size_t)lane]++;
        d.peer = member_of(c, c->rank, lane);
        umsg *u = calloc(1, sizeof *u);
        char *data = malloc(bytes ? (size_t)bytes : 1);
        if (!u || !data) {
            free(u);
            free(data);
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            comm_mpi_mark_broken(c, RP_ERR_NOMEM, "out of memory queueing a message");
            return;
        }
        MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        *u = (umsg){.proc = st.MPI_SOURCE, .slane = slane, .d = d, .data = data};
        if (ls->utail)
            ls->utail->next = u;
        else
            ls->uhead = u;
        ls->utail = u;
    }
}

static rp_status p2p_status_broken(rp_comm *c, int lane, const char *what)
{
    mpi_impl *m = M(c);
    if (lane >= 0 && lane < m->lanes && m->lane[lane].owed) {
        m->lane[lane].owed = false;
        return rp_error_set(m->broken_status, __FILE__, __LINE__, "%s", m->reason);
    }
    return RP_ERROR(RP_ERR_COMM,
                    "%s on rank %d (%s): the communicator is broken by an earlier error: %s", what,
                    c->rank, m->hosts[c->rank], m->reason);
}

/*
 * What a send and a receive do first: name the call, check the tag, allocate the request and
 * fill what both kinds hold (the peer's process and lane, this member's lane). On RP_OK the
 * lock is held and *out is the request; otherwise nothing is held or allocated.
 */
static rp_status req_begin(rp_comm *c, const comm_p2p_desc *d, int proc, int peer_lane, int my_lane,
                           rp_comm *owner, char *what, size_t size, mreq **out)
{
    mpi_impl *m = M(c);
    comm_p2p_desc_str(d, false, what, size);
    if ((int64_t)d->tag >= m->tag_limit)
        return RP_ERROR(RP_ERR_INVALID, "%s: tags must be below %lld on the MPI backend", what,
                        (long long)m->tag_limit);
    mreq *r = calloc(1, sizeof *r);
    if (!r) return RP_ERROR(RP_ERR_NOMEM, "%s: out of memory", what);
    lock();
    if (m->broken) {
        rp_status st = p2p_status_broken(c, my_lane, what);
        unlock();
        free(r);
        return st;
    }
    r->base.comm = owner;
    r->base.backend = c;
    r->d = *d;
    r->proc = proc;
    r->lane = peer_lane;
    r->mylane = my_lane;
    *out = r;
    return RP_OK;
}

rp_status comm_mpi_isend(rp_comm *c, const comm_p2p_desc *d, const void *buf, int proc, int slane,
                         int dlane, rp_comm_request **out, rp_comm *owner)
{
    mpi_impl *m = M(c);
    char what[96];
    size_t bytes = (size_t)d->count * rp_dtype_size(d->dtype);
    if (bytes > INT_MAX) {
        comm_p2p_desc_str(d, false, what, sizeof what);
        return RP_ERROR(RP_ERR_UNSUPPORTED, "%s: the MPI backend sends at most %d bytes", what,
                        INT_MAX);
    }
    mreq *r = NULL;
    RP_CHECK(req_begin(c, d, proc, dlane, slane, owner, what, sizeof what, &r));
    /* A destination that has left (its step failed, its replicator was destroyed) would never
     * receive it: fail now rather than buffer it. */
    poll_notices_due(c);
    if (m->left[proc].left || m->left[proc].closed) {
        char msg[1400], peer[160], me[160];
        member_name(c, proc, dlane, peer, sizeof peer);
        member_name(c, c->rank, slane, me, sizeof me);
        if (m->left[proc].left)
            snprintf(msg, sizeof msg,
                     "%s has left (%s: %.600s): %s from %s to it would never be received", peer,
                     rp_status_name(m->left[proc].status), m->left[proc].reason, what, me);
        else
            snprintf(msg, sizeof msg,
                     "%s has destroyed this communicator: %s from %s to it would never be "
                     "received",
                     peer, what, me);
        comm_mpi_mark_broken(c, RP_ERR_COMM, msg);
        unlock();
        free(r);
        return RP_ERROR(RP_ERR_COMM, "%s", msg);
    }
    r->d.num = m->sent[(size_t)(proc * m->lanes + dlane) * (size_t)m->lanes + (size_t)slane]++;
    r->posted_s = rp_now_s();
    int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, proc, mpi_tag(m, d, slane), m->pc[dlane], &r->mr);
    r->state = MREQ_ACTIVE;
    unlock();
    if (rc != MPI_SUCCESS) {
        free(r);
        return RP_ERROR(RP_ERR_BACKEND, "%s: MPI_Isend failed on rank %d", what, c->rank);
    }
    *out = &r->base;
    return RP_OK;
}

rp_status comm_mpi_irecv(rp_comm *c, const comm_p2p_desc *d, void *buf, int proc, int slane,
                         int dlane, rp_comm_request **out, rp_comm *owner)
{
    mpi_impl *m = M(c);
    char what[96];
    mreq *r = NULL;
    RP_CHECK(req_begin(c, d, proc, slane, dlane, owner, what, sizeof what, &r));
    r->buf = buf;
    r->posted_s = rp_now_s();
    r->state = MREQ_POSTED;
    lane_state *ls = &m->lane[dlane];
    if (ls->ptail)
        ls->ptail->next = r;
    else
        ls->posted = r;
    ls->ptail = r;
    progress(c, dlane, false);
    unlock();
    *out = &r->base;
    return RP_OK;
}

/* Takes a failed request out of the lane's state. Under the lock. */
static void req_drop(rp_comm *c, mreq *r)
{
    lane_state *ls = &M(c)->lane[r->mylane];
    if (r->state == MREQ_POSTED) {
        mreq **p = &ls->posted, *prev = NULL;
        while (*p && *p != r) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p) {
            *p = r->next;
            if (ls->ptail == r) ls->ptail = prev;
        }
    } else if (r->state == MREQ_ACTIVE && r->mr != MPI_REQUEST_NULL) {
        if (!r->d.send) MPI_Cancel(&r->mr);
        MPI_Request_free(&r->mr);
    }
}

/*
 * One poll of request r: progress, then whether it is done or cannot be
 * (broken communicator, its peer left, deadline passed). Under the lock.
 */
static void req_poll(rp_comm *c, mreq *r, double deadline, bool drain, double stalled_s)
{
    mpi_impl *m = M(c);
    char what[96], msg[1400], peer[160], me[160];
    /* Notices (a mismatch, a peer that left): rate-limited; always before a timeout is reported. */
    if (rp_now_s() > deadline)
        comm_mpi_poll_notices(c);
    else
        poll_notices_due(c);
    if (r->state != MREQ_DONE) progress(c, r->mylane, drain);
    if (r->state == MREQ_ACTIVE) {
        int flag = 0;
        MPI_Test(&r->mr, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            if (r->mismatch) {
                free(r->tmp);
                r->tmp = NULL;
                p2p_mismatch(c, r);
            } else {
                req_done(r, RP_OK, NULL);
            }
        }
    }
    if (r->state == MREQ_DONE) return;
    comm_p2p_desc_str(&r->d, r->d.send, what, sizeof what);
    member_name(c, c->rank, r->mylane, me, sizeof me);
    if (m->broken) {
        rp_status st =
            r->mylane < m->lanes && m->lane[r->mylane].owed ? m->broken_status : RP_ERR_COMM;
        if (st != RP_ERR_COMM) m->lane[r->mylane].owed = false;
        snprintf(msg, sizeof msg, "%s on %s: the communicator is broken: %.1000s", what, me,
                 m->reason);
        req_drop(c, r);
        req_done(r, st, st == RP_ERR_COMM ? msg : m->reason);
        return;
    }
    int proc = r->proc;
    if (proc != MPI_ANY_SOURCE) member_name(c, proc, r->lane < 0 ? 0 : r->lane, peer, sizeof peer);
    if (proc != MPI_ANY_SOURCE && m->left[proc].left) {
        snprintf(msg, sizeof msg,
                 "%s ended its step (%s: %.600s) without %s the message of %s, which %s is "
                 "waiting in",
                 peer, rp_status_name(m->left[proc].status), m->left[proc].reason,
                 r->d.send ? "receiving" : "sending", what, me);
        comm_mpi_mark_broken(c, RP_ERR_COMM, msg);
        req_drop(c, r);
        req_done(r, RP_ERR_COMM, msg);
        return;
    }
    if (!r->d.send && r->state == MREQ_POSTED && proc != MPI_ANY_SOURCE && r->lane >= 0 &&
        m->left[proc].closed) {
        /* Everything it sent on this channel before it closed has been taken. */
        size_t ch = ((size_t)proc * (size_t)m->lanes + (size_t)r->lane) * (size_t)m->lanes +
                    (size_t)r->mylane;
        if (m->rcvd[ch] >= m->peer_sent[ch]) {
            snprintf(msg, sizeof msg,
                     "%s destroyed this communicator without sending the message of %s, which "
                     "%s is waiting in",
                     peer, what, me);
            comm_mpi_mark_broken(c, RP_ERR_COMM, msg);
            req_drop(c, r);
            req_done(r, RP_ERR_COMM, msg);
            return;
        }
    }
    double now = rp_now_s();
    if (!r->d.send && r->state == MREQ_POSTED && proc != MPI_ANY_SOURCE && r->lane >= 0 &&
        peer_went_on(c, proc, r->lane)) {
        /*
         * Its peer is in a collective this rank has not reached, which cannot complete without
         * it, and no message of the peer's is matched (one matched is on its way): the two wait
         * for each other, the peer having skipped its send. Messages of two
         * communicators may arrive out of order, so the send gets a moment to show up first.
         */
        if (r->peer_on_s == 0) r->peer_on_s = now;
        if (now - r->peer_on_s >= fmin(0.05 * c->timeout, 0.25)) {
            snprintf(msg, sizeof msg,
                     "%s went on to its next collective on this communicator without sending "
                     "the message of %s, which %s is waiting in (each waits for the other: a "
                     "send must come before the sender's next collective)",
                     peer, what, me);
            tell_peers(c, proc, r->lane < 0 ? 0 : r->lane, msg);
            comm_mpi_mark_broken(c, RP_ERR_MISMATCH, msg);
            req_drop(c, r);
            req_done(r, RP_ERR_MISMATCH, msg);
            return;
        }
    }
    if (now <= deadline) return;
    if (stalled_s > 0) {
        snprintf(msg, sizeof msg,
                 "this rank (%d, %s) was not running for %.1f s (stopped or descheduled?) while "
                 "it waited in %s; its peers may have given up on it",
                 c->rank, m->hosts[c->rank], stalled_s, what);
    } else if (proc == MPI_ANY_SOURCE) {
        snprintf(msg, sizeof msg, "timed out after %gs in %s from any %s on %s: no message came",
                 c->timeout, what, comm_noun(c), me);
    } else {
        char last[128] = "it has sent this member nothing";
        uint64_t k = r->lane >= 0 ? m->rcvd[(size_t)(proc * m->lanes + r->lane) * (size_t)m->lanes +
                                            (size_t)r->mylane]
                                  : 0;
        if (r->d.send) {
            snprintf(last, sizeof last, "it is dead, stopped, or in another call");
        } else if (k > 0) {
            snprintf(last, sizeof last, "its last message to this member was send #%llu",
                     (unsigned long long)(k - 1));
        }
        snprintf(msg, sizeof msg, "timed out after %gs in %s %s %s on %s: it did not %s (%s)",
                 c->timeout, what, r->d.send ? "to" : "from", peer, me,
                 r->d.send ? "receive it" : "send", last);
    }
    comm_mpi_mark_broken(c, RP_ERR_TIMEOUT, msg);
    req_drop(c, r);
    req_done(r, RP_ERR_TIMEOUT, msg);
}

static rp_status req_finish_mpi(rp_comm *c, mreq *r)
{
    rp_status status = r->status;
    if (status != RP_OK) rp_error_set(status, __FILE__, __LINE__, "%s", r->error);
    free(r->tmp);
    free(r);
    (void)c;
    return status;
}

rp_status comm_mpi_wait(rp_comm *c, rp_comm_request *req, double deadline)
{
    mreq *r = (mreq *)req;
    double last = rp_now_s(), stalled = 0;
    for (unsigned polls = 0;; polls++) {
        comm_mpi_note_gap(&last, req->comm->timeout, &stalled);
        lock();
        bool drain = r->d.send && rp_now_s() - r->posted_s > BUFFER_AFTER_S;
        req_poll(c, r, deadline, drain, stalled);
        int state = r->state;
        unlock();
        if (state == MREQ_DONE) break;
        /* A small message's answer comes in a microsecond or two: poll without yielding first. */
        if (polls >= 64) comm_mpi_pause_briefly(polls);
    }
    return req_finish_mpi(c, r);
}

rp_status comm_mpi_test(rp_comm *c, rp_comm_request *req, bool *done)
{
    mreq *r = (mreq *)req;
    lock();
    req_poll(c, r, INFINITY, false, 0);
    *done = r->state == MREQ_DONE;
    unlock();
    return *done ? req_finish_mpi(c, r) : RP_OK;
}

/* Whether a message for `lane` from (proc, slane) (MPI_ANY_SOURCE / -1: any) is ready. */
rp_status comm_mpi_probe(rp_comm *c, int proc, int slane, int lane, int tag, bool *ready,
                         comm_p2p_desc *found)
{
    mpi_impl *m = M(c);
    lock();
    poll_notices_due(c);
    if (m->broken) {
        rp_status st = p2p_status_broken(c, lane, "probe");
        unlock();
        return st;
    }
    lane_state *ls = &m->lane[lane];
    *ready = false;
    /* Posted receives take first; what is left is in the queue, then in MPI. */
    progress(c, lane, false);
    for (umsg *u = ls->uhead; u && !*ready; u = u->next)
        if ((proc == MPI_ANY_SOURCE || u->proc == proc) && (slane < 0 || u->slane == slane) &&
            (tag == RP_ANY_TAG || u->d.tag == tag)) {
            *ready = true;
            *found = u->d;
            found->peer = member_of(c, u->proc, u->slane);
        }
    /* A message in MPI: received into the queue, so the next receive finds it in order. */
    while (!*ready) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        MPI_Improbe(proc, MPI_ANY_TAG, m->pc[lane], &flag, &msg, &st);
        if (!flag) break;
        comm_p2p_desc d = {0};
        int sl, bytes = 0;
        decode(m, &st, &d, &sl);
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        d.num =
            m->rcvd[(size_t)(st.MPI_SOURCE * m->lanes + sl) * (size_t)m->lanes + (size_t)lane]++;
        umsg *u = calloc(1, sizeof *u);
        char *data = malloc(bytes ? (size_t)bytes : 1);
        if (!u || !data) {
            free(u);
            free(data);
            MPI_Mrecv(NULL, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            unlock();
            return RP_ERROR(RP_ERR_NOMEM, "probe: out of memory");
        }
        MPI_Mrecv(data, bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        *u = (umsg){.proc = st.MPI_SOURCE, .slane = sl, .d = d, .data = data};
        if (ls->utail)
            ls->utail->next = u;
        else
            ls->uhead = u;
        ls->utail = u;
        if ((slane < 0 || sl == slane) && (tag == RP_ANY_TAG || d.tag == tag)) {
            *ready = true;
            *found = d;
            found->peer = member_of(c, u->proc, sl);
        } else if (proc != MPI_ANY_SOURCE && (slane < 0 || sl == slane)) {
            break; /* the next message on that channel has another tag */
        }
    }
    unlock();
    return RP_OK;
}

/* Frees the point-to-point state (queued messages included). MPI finalized: the communicators are
 * gone. */
void comm_mpi_p2p_release(mpi_impl *m)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (int l = 0; m->lane && l < m->lanes; l++)
        for (umsg *u = m->lane[l].uhead, *next; u; u = next) {
            next = u->next;
            free(u->data);
            free(u);
        }
    for (int l = 0; m->pc && l < m->lanes; l++)
        if (!finalized && m->pc[l] != MPI_COMM_NULL) {
            lock();
            MPI_Comm_free(&m->pc[l]);
            unlock();
        }
    free(m->pc);
    free(m->lane);
    free(m->sent);
    free(m->rcvd);
    free(m->peer_sent);
    free(m->lane_rank);
    free(m->lane_ids);
    m->lane_ids = NULL;
    m->pc = NULL;
    m->lane = NULL;
    m->sent = m->rcvd = m->peer_sent = NULL;
    m->lane_rank = NULL;
    m->lanes = 0;
}

/* Gives this communicator `lanes` lanes (collective; the hierarchical backend's members per
 * process). */
rp_status comm_mpi_p2p_setup(rp_comm *c, int lanes, const int *lane_rank, const int *ids)
{
    mpi_impl *m = M(c);
    int n = c->size, members = 0;
    for (int i = 0; lane_rank && i < n * lanes; i++)
        if (lane_rank[i] + 1 > members) members = lane_rank[i] + 1;
    lock();
    MPI_Comm *pc = calloc((size_t)lanes, sizeof *pc);
    lane_state *ls = calloc((size_t)lanes, sizeof *ls);
    uint64_t *sent = calloc((size_t)n * (size_t)lanes * (size_t)lanes, sizeof *sent);
    uint64_t *rcvd = calloc((size_t)n * (size_t)lanes * (size_t)lanes, sizeof *rcvd);
    uint64_t *peer_sent = calloc((size_t)n * (size_t)lanes * (size_t)lanes, sizeof *peer_sent);
    int *map = lane_rank ? malloc((size_t)n * (size_t)lanes * sizeof *map) : NULL;
    int *idcopy = lane_rank && ids ? malloc((size_t)members * sizeof *idcopy + 1) : NULL;
    int rc = MPI_SUCCESS;
    for (int l = 0; pc && l < lanes && rc == MPI_SUCCESS; l++)
        rc = MPI_Comm_dup(m->comm, &pc[l]);
    unlock();
    if (!pc || !ls || !sent || !rcvd || !peer_sent || (lane_rank && !map) ||
        (lane_rank && ids && !idcopy) || rc != MPI_SUCCESS) {
        free(idcopy);
        free(pc);
        free(ls);
        free(sent);
        free(rcvd);
        free(peer_sent);
        free(map);
        return RP_ERROR(RP_ERR_NOMEM, "MPI communicator: point-to-point state for %d lanes", lanes);
    }
    if (map) memcpy(map, lane_rank, (size_t)n * (size_t)lanes * sizeof *map);
    if (idcopy) memcpy(idcopy, ids, (size_t)members * sizeof *idcopy);
    comm_mpi_p2p_release(m);
    m->lane_ids = idcopy;
    m->lanes = lanes;
    m->pc = pc;
    m->lane = ls;
    m->sent = sent;
    m->rcvd = rcvd;
    m->peer_sent = peer_sent;
    m->lane_rank = map;
    int *ub = NULL, flag = 0;
    lock();
    MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &ub, &flag);
    unlock();
    m->tag_limit = ((int64_t)(flag ? *ub : 32767) >> 3) / lanes;
    return RP_OK;
}
