/*
 * replicator.c - the runtime: replicas as threads, run(fn) on all of them,
 * the replica context, reports and the cross-replica primitives.
 *
 * Replica 0 runs on the caller's thread; replicas 1..N-1 on threads started
 * at create that sleep between runs. A run bumps a generation counter under
 * the mutex and wakes them; each runs fn, reduces its reports with its peers
 * and then "leaves" the communicator, so a peer still waiting for it in a
 * collective fails at once instead of at the timeout. Before the next run
 * (no replica is running then) every member rejoins.
 *
 * How replicas combine their work is a strategy table (strategy.h) chosen
 * once here at create; this file only dispatches through it, and never
 * asks which one it holds.
 *
 * The watchdog. A replica stuck in user code (a loop, a deadlock of its own)
 * is in no collective, so comm's timeout cannot end it: its peers time out
 * waiting for it and return, and run() would wait for it forever. So run()
 * waits in slices: once a peer has failed, a replica that has been in its
 * step function longer than the timeout and has not returned one more
 * timeout (at least 2 s) after its peers left (a replica in a collective
 * fails at once when its peers leave) is declared stuck and the run returns an error naming
 * it. A thread cannot be killed: it is abandoned (see runtime.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "replicator/io.h"
#include "replicator/strategy.h"

rp_config rp_config_default(void)
{
    rp_config c;
    memset(&c, 0, sizeof c);
    c.replicas = 1;
    c.bucket_bytes = 1 << 20;
    c.checksum_every = 100;
    c.ps = 1;
    c.staleness = -1;
    c.stuck_exit = rp_env_get()->stuck_exit;
    return c;
}

/*
 * Kernel threads of each replica, unless set: the cores this process may use,
 * shared by its replicas. Under MPI a process not bound to a share of the
 * machine's cores shares them with the other ranks on this host.
 */
static int threads_per_replica(const rp_replicator *r)
{
    const rp_config *cfg = &r->cfg;
    if (cfg->threads_per_replica > 0) return cfg->threads_per_replica;
    bool mpi = r->layout != RP_LAYOUT_THREADS;
    int ranks_here = mpi && !rp_cpu_bound() ? rp_env_get()->mpi_local_ranks : 1;
    return replicator_default_threads(rp_cpu_count(), r->n, ranks_here);
}

/* ---- running a function on every replica ------------------------------------------ */

/*
 * Divergence left by a plain optimizer (rp_optimizer_create) inside the replicas: the
 * optimizers stepped on this replica's thread in this run that its strategy does not own.
 * Their parameter values are hashed and compared in the report exchange below, so a
 * plain optimizer that moved replicas apart is caught at the end of the first run in
 * which it stepped, at no extra collective; one that kept them identical (a user who
 * all-reduced the gradients by hand) passes.
 */
#define PLAIN_MAX 8
static void plain_steps(rp_replica *rep, int64_t *steps, int64_t *hash)
{
    rp_optimizer *opts[PLAIN_MAX];
    int64_t counts[PLAIN_MAX];
    int n = rp_optimizer_stepped_here(opts, counts, PLAIN_MAX);
    if (n > PLAIN_MAX) n = PLAIN_MAX;
    uint64_t h = 0x6a09e667f3bcc909ull;
    const kernels_table *k = kernels_active();
    *steps = 0;
    for (int i = 0; i < n; i++) {
        if (strategy_owns(rep, opts[i])) continue;
        rp_params *p = rp_optimizer_params(opts[i]);
        h = (h ^ k->checksum(rp_params_data(p), rp_params_trainable_numel(p))) * 0x100000001b3ull;
        *steps += counts[i];
    }
    *hash = (int64_t)(h >> 1);
}

/*
 * Which local worker's reduced reports rp_replicator_result() gives: one that reported beats one
 * that did not, then the first role, then the last pipeline stage and the last model worker (in a
 * mesh the loss is known at the end of the model), then the first worker. Higher is better.
 */
static int64_t keeper_rank(const rp_replica *rep)
{
    const int *c = rep->coord;
    return (int64_t)(rep->nreports > 0) << 60 | (int64_t)(RP_ROLES_MAX - rep->role) << 52 |
           (int64_t)c[RP_AXIS_PIPE] << 40 | (int64_t)c[RP_AXIS_MODEL] << 20 |
           (int64_t)((1 << 20) - 1 - rep->local);
}

/*
 * Offers rep's reduced reports (res[0..k), and each replica's values: all[q * stride + 2 * i +
 * 1] as doubles, or rep's own with all NULL) as the run's results; kept if rep ranks above the
 * worker whose results are held (keeper_rank). Takes r->mu.
 */
static void keep_results(rp_replica *rep, const runtime_report *res, int k, const int64_t *all,
                         int stride, int n)
{
    rp_replicator *r = rep->r;
    int64_t rank = keeper_rank(rep);
    pthread_mutex_lock(&r->mu);
    if (r->keeper < 0 || rank > r->keeper_rank) {
        r->keeper = rep->local;
        r->keeper_rank = rank;
        memcpy(r->results, res, sizeof(runtime_report) * (size_t)k);
        r->nresults = k;
        r->each_count = n <= r->each_cap ? n : 0;
        for (int i = 0; i < k && r->each_count; i++)
            for (int q = 0; q < n; q++) {
                double v = rep->reports[i].value;
                if (all) memcpy(&v, &all[(size_t)q * (size_t)stride + 2 * (size_t)i + 1], sizeof v);
                r->each[(size_t)i * (size_t)r->each_cap + (size_t)q] = v;
            }
    }
    pthread_mutex_unlock(&r->mu);
}

/* All replicas' reports, checked and reduced in replica order (keep_results). */
static rp_status reduce_reports(rp_replica *rep)
{
    rp_replicator *r = rep->r;
    int n = rep->count, k = rep->nreports;
    if (n == 1) {
        keep_results(rep, rep->reports, k, NULL, 0, 1);
        return RP_OK;
    }
    /* After a collective error nothing can be reduced; a run that reports nothing (a clean-up)
     * still succeeds. */
    if (k == 0 && rp_comm_broken(rep->comm)) return RP_OK;
    int64_t mine[3] = {k, 0, 0}, *all = rep->gather;
    if (r->strategy->identical) plain_steps(rep, &mine[1], &mine[2]);
    rt_housekeeping_begin(rep->comm, "the runtime's report all-gather");
    rp_status status = rp_all_gather(rep, mine, all, 3, RP_I64);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    for (int q = 1; q < n; q++)
        if (all[3 * q] != all[0])
            return RP_ERROR(RP_ERR_MISMATCH,
                            "report mismatch: replica 0 reported %lld values in "
                            "this run and replica %d %lld; every replica must call "
                            "rp_replica_report() with the same names in the same order",
                            (long long)all[0], q, (long long)all[3 * q]);
    for (int q = 1; q < n; q++)
        if ((all[1] > 0 || all[3 * q + 1] > 0) && all[3 * q + 2] != all[2])
            return RP_ERROR(
                RP_ERR_MISMATCH,
                "the replicas diverged: after this run the parameters of "
                "the plain optimizer(s) stepped on replica %d (%lld steps) differ from replica "
                "0's (%lld steps); an optimizer made by rp_optimizer_create() does not "
                "all-reduce the gradients: make it with rp_replica_optimizer_create()",
                q, (long long)all[3 * q + 1], (long long)all[1]);
    if (k == 0) {
        keep_results(rep, rep->reports, 0, NULL, 0, n);
        return RP_OK;
    }
    runtime_report res[RP_REPORTS_MAX];
    int64_t packed[2 * RP_REPORTS_MAX];
    for (int i = 0; i < k; i++) {
        packed[2 * i] =
            (int64_t)(rp_hash_str((uint64_t)rep->reports[i].op, rep->reports[i].name) >> 1);
        memcpy(&packed[2 * i + 1], &rep->reports[i].value, sizeof(double));
    }
    rt_housekeeping_begin(rep->comm, "the runtime's report all-gather");
    status = rp_all_gather(rep, packed, all, 2 * k, RP_I64);
    rt_internal_end(rep->comm);
    RP_CHECK(status);
    for (int i = 0; i < k; i++) {
        double acc = 0;
        for (int q = 0; q < n; q++) {
            const int64_t *e = all + (size_t)q * 2 * k + 2 * i;
            if (e[0] != all[2 * i])
                return RP_ERROR(
                    RP_ERR_MISMATCH,
                    "report mismatch: report %d of replica %d is not "
                    "the same name and op as replica 0's (this replica reported '%s', %s)",
                    i, q, rep->reports[i].name, rp_reduce_op_name(rep->reports[i].op));
            double v;
            memcpy(&v, &e[1], sizeof v);
            switch (rep->reports[i].op) {
            case RP_SUM:
            case RP_MEAN:
                acc = q ? acc + v : v;
                break;
            case RP_MAX:
                acc = q && acc >= v ? acc : v;
                break;
            case RP_MIN:
                acc = q && acc <= v ? acc : v;
                break;
            default:
                acc = q ? acc : v;
            }
        }
        if (rep->reports[i].op == RP_MEAN) acc /= n;
        res[i] = rep->reports[i];
        res[i].value = acc;
    }
    keep_results(rep, res, k, all, 2 * k, n);
    return RP_OK;
}

/* Tells the peers on every communicator of rep that its step ended (see rp_comm_leave). */
static void leave_all(rp_replica *rep, rp_status status)
{
    const char *why = status == RP_OK ? "it returned" : rep->error;
    for (int i = 0; i < rep->nlive; i++)
        rp_comm_leave(rep->live[i], status, why);
}

static void rejoin_all(rp_replica *rep)
{
    for (int i = 0; i < rep->nlive; i++)
        rp_comm_rejoin(rep->live[i]);
}

/* Names this thread's trace track after its worker: "replica 1", "actor 0" (tid = the worker). */
static void trace_attach(const rp_replica *rep)
{
    if (!rp_trace_enabled()) return;
    char name[48];
    snprintf(name, sizeof name, "%s %d", rp_replica_role(rep), rep->id);
    if (rp_trace_thread_attach(rep->worker, name) != RP_OK)
        rp_warn("tracing: %s (its track stays empty)", rp_last_error());
}

/* How likely a failed replica's error is the run's cause, lower first: its own error, then a
   peer's that reached it through a communicator (RP_ERR_COMM), then a stop because another
   replica had failed. */
static int cause_rank(const rp_replica *rep)
{
    return rep->stopped_for_peer ? 2 : rep->status == RP_ERR_COMM ? 1 : 0;
}

/*
 * Replicas that take their batches at their own pace (async, sync groups: those whose strategy
 * claims) stop at their next batch once another replica of this process has failed in this run,
 * instead of training on until the batches run out; lockstep replicas learn it from their next
 * collective. Under MPI the other processes learn it from the servers (rp_ps_group_fail).
 */
static rp_status stop_if_failed(rp_replica *rep)
{
    int first = __atomic_load_n(&rep->r->failed_first, __ATOMIC_ACQUIRE);
    if (first == 0 || first == rep->id + 1) return RP_OK;
    rep->stopped_for_peer = true;
    return RP_ERROR(RP_ERR_COMM, "stopped before its next batch: replica %d failed in this run",
                    first - 1);
}

/* One replica's part of a run. */
static void run_one(rp_replica *rep, rp_replica_fn fn, void *arg, uint64_t generation)
{
    const strategy_table *st = rep->r->strategy;
    trace_attach(rep);
    rp_tape_reset(rep->tape);
    rep->nreports = 0;
    rep->batches = 0;
    rep->blame = -1;
    rep->stopped_for_peer = false;
    (void)rp_optimizer_stepped_here(NULL, NULL,
                                    0); /* what stepped between runs is not this run's */
    if (st->phase_begin) st->phase_begin(rep, generation);
    rp_error_clear();
    __atomic_store_n(&rep->started_ns, rp_now_ns(), __ATOMIC_RELAXED);
    rp_trace_mark(); /* a step function's forward pass runs from here to its backward */
    __atomic_store_n(&rep->running, true, __ATOMIC_RELEASE);
    rp_status status = fn(rep, arg);
    __atomic_store_n(&rep->running, false, __ATOMIC_RELEASE);
    if (status != RP_OK && !rep->stopped_for_peer) {
        /* The first to fail in this run: self-paced peers stop at their next batch. */
        int none = 0;
        __atomic_compare_exchange_n(&rep->r->failed_first, &none, rep->id + 1, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    if (st->phase_end) st->phase_end(rep);
    if (status == RP_OK) status = reduce_reports(rep);
    rep->status = status;
    if (status != RP_OK) {
        const char *msg = rp_last_error();
        snprintf(rep->error, sizeof rep->error, "%s",
                 *msg ? msg : "the function returned an error without a message");
    }
    leave_all(rep, status);
    /* A failed worker is gone for good: its peers across roles learn it at once. */
    if (status != RP_OK && rep->link != rep->world) rp_comm_leave(rep->link, status, rep->error);
}

static void *worker_main(void *p)
{
    rp_replica *rep = p;
    rp_replicator *r = rep->r;
    rp_log_set_replica(rep->worker);
    rp_kernels_set_threads(threads_per_replica(r));
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->generation == seen && !r->quit)
            pthread_cond_wait(&r->start, &r->mu);
        if (r->quit) break;
        seen = r->generation;
        rp_replica_fn fn = r->fn;
        void *arg = r->arg;
        bool skip = rep->busy; /* its role was started: it runs on its own thread */
        pthread_mutex_unlock(&r->mu);
        if (!skip) run_one(rep, fn, arg, seen);
        pthread_mutex_lock(&r->mu);
        /* Declared stuck by the watchdog: the run was counted without it, and the replicator
           will not run again; this thread just ends (its memory is never freed under it). */
        if (rep->abandoned) {
            rep->exited = true;
            break;
        }
        rep->done = true;
        if (++r->finished == r->n - 1) pthread_cond_signal(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/*
 * The watchdog's test (under r->mu): a local replica still in its step function,
 * for longer than the timeout, one more timeout (at least 2 s) after a failure of a
 * peer was seen here. A replica in a collective fails at once when its peers leave,
 * so one still running then is in user code; the grace lets a slow one (a long
 * sleep, a big evaluation) come back on its own. Returns it, or NULL.
 */
static rp_replica *find_stuck(rp_replicator *r, double failed_at, double now)
{
    if (failed_at <= 0) return NULL;
    double timeout = r->cfg.timeout_s, grace = fmax(2.0, timeout);
    if (now - failed_at < grace) return NULL;
    for (int i = 0; i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (rep->abandoned || rep->busy || !__atomic_load_n(&rep->running, __ATOMIC_ACQUIRE))
            continue;
        double since = (double)__atomic_load_n(&rep->started_ns, __ATOMIC_RELAXED) * 1e-9;
        if (now - since >= timeout) return rep;
    }
    return NULL;
}

/* The time a failure of a local replica was first seen in this run (0: none yet); under r->mu. */
static void note_failures(rp_replicator *r, double *failed_at, double now)
{
    if (*failed_at > 0) return;
    for (int i = 0; i < r->n; i++) {
        const rp_replica *rep = &r->reps[i];
        if (rep->done && rep->status != RP_OK) {
            *failed_at = now;
            return;
        }
    }
}

static void stuck_message(char *out, size_t size, const rp_replica *rep, double now,
                          const char *then)
{
    double since = (double)__atomic_load_n(&rep->started_ns, __ATOMIC_RELAXED) * 1e-9;
    snprintf(out, size,
             "replica %d has been in its step function for %.0f s and did not reach a "
             "collective; its peers timed out waiting%s",
             rep->id, now - since, then);
}

/* cfg.stuck_exit: the process ends, for a replica that can never return. */
static void stuck_exit(rp_replica *rep, double now)
{
    char msg[512];
    stuck_message(msg, sizeof msg, rep, now, "");
    rp_log(RP_LOG_ERROR, "%s; ending the process (stuck_exit / RP_STUCK_EXIT)", msg);
    rp_comm_mpi_abort(RP_STUCK_EXIT_CODE);
    _exit(RP_STUCK_EXIT_CODE);
}

/* The absolute time 200 ms from now, for pthread_cond_timedwait (the watchdogs' tick). */
static struct timespec in_200ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/*
 * The watchdog thread, only with cfg.stuck_exit: it also watches local replica 0,
 * which runs on the caller's thread, so that run() itself cannot notice it stuck.
 */
static void *watchdog_main(void *p)
{
    rp_replicator *r = p;
    double failed_at = 0;
    uint64_t gen = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        struct timespec ts = in_200ms();
        pthread_cond_timedwait(&r->wake, &r->mu, &ts);
        if (r->quit) break;
        if (r->generation != gen) {
            gen = r->generation;
            failed_at = 0;
        }
        if (!r->in_run) continue;
        double now = rp_now_s();
        note_failures(r, &failed_at, now);
        rp_replica *stuck = find_stuck(r, failed_at, now);
        if (stuck) stuck_exit(stuck, now);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/*
 * After a failed run of a mesh: the one worker whose user collectives in the step, counted per
 * axis (entered, completed or not), differ from those of every other worker of its role, when
 * all of them ran here and at least two others agree - a call made on the wrong axis, or
 * skipped, by that worker. The comm layer cannot tell: on a two-member axis one worker in a
 * call and one that ended its step look alike whichever erred. Its description into why.
 */
static void axis_calls(const rp_replica *rep, uint64_t *calls)
{
    for (int a = 0; a < RP_AXES; a++)
        calls[a] = rep->shape[a] > 1 ? rp_comm_step_user_calls(rep->axis[a]) : 0;
}

static const rp_replica *wrong_axis(const rp_replicator *r, char *why, size_t size)
{
    if (strcmp(rp_comm_noun(r->reps[0].world), "worker") != 0) return NULL;
    for (int k = 0; k < r->nroles; k++) {
        const rp_role *ro = &r->roles[k];
        /* At most two distinct count vectors, one of them held by exactly one worker. */
        int members = 0, na = 0, nb = 0, last_a = -1, last_b = -1;
        uint64_t calls[RP_AXES], va[RP_AXES], vb[RP_AXES];
        bool several = false;
        for (int i = 0; i < r->n && !several; i++) {
            const rp_replica *rep = &r->reps[i];
            if (rep->role != k || rep->busy || rep->abandoned) continue;
            members++;
            axis_calls(rep, calls);
            if (na == 0 || memcmp(calls, va, sizeof va) == 0) {
                memcpy(va, calls, sizeof va);
                na++;
                last_a = i;
            } else if (nb == 0 || memcmp(calls, vb, sizeof vb) == 0) {
                memcpy(vb, calls, sizeof vb);
                nb++;
                last_b = i;
            } else {
                several = true;
            }
        }
        if (several || members != ro->members * ro->model * ro->pipe || members < 3 || nb == 0)
            continue;
        int odd, good;
        if (na == 1 && nb >= 2)
            odd = last_a, good = last_b;
        else if (nb == 1 && na >= 2)
            odd = last_b, good = last_a;
        else
            continue;
        const rp_replica *o = &r->reps[odd], *g = &r->reps[good];
        static const char *const names[RP_AXES] = {"data", "model", "pipe"};
        char mine[96] = "", theirs[96] = "";
        for (int a = 0; a < RP_AXES; a++) {
            if (o->shape[a] <= 1) continue;
            size_t lm = strlen(mine), lt = strlen(theirs);
            snprintf(mine + lm, sizeof mine - lm, "%s%s %llu", lm ? ", " : "", names[a],
                     (unsigned long long)rp_comm_step_user_calls(o->axis[a]));
            snprintf(theirs + lt, sizeof theirs - lt, "%s%s %llu", lt ? ", " : "", names[a],
                     (unsigned long long)rp_comm_step_user_calls(g->axis[a]));
        }
        snprintf(why, size,
                 "worker %d made other collective calls than every other worker of role '%s' "
                 "(user collectives on each axis in this step - worker %d: %s; each other "
                 "worker: %s): a call on the wrong axis, or one skipped",
                 o->worker, ro->name, o->worker, mine, theirs);
        return o;
    }
    return NULL;
}

/* The name of the first axis on which rep's user calls differ from a peer's, for messages. */
static const char *axis_reported(const rp_replica *rep)
{
    const rp_replicator *r = rep->r;
    static const char *const names[RP_AXES] = {"data axis", "model axis", "pipe axis"};
    for (int i = 0; i < r->n; i++) {
        const rp_replica *o = &r->reps[i];
        if (o == rep || o->role != rep->role || o->busy) continue;
        for (int a = 0; a < RP_AXES; a++)
            if (rep->shape[a] > 1 &&
                rp_comm_step_user_calls(rep->axis[a]) > rp_comm_step_user_calls(o->axis[a]))
                return names[a];
        break;
    }
    return "communicator";
}

rp_status rp_replicator_run(rp_replicator *r, rp_replica_fn fn, void *arg)
{
    if (!r || !fn) return RP_ERROR(RP_ERR_INVALID, "replicator or function is NULL");
    if (r->server)
        return RP_ERROR(RP_ERR_INVALID,
                        "this process is a parameter server (one of the last %d ranks), "
                        "not a replica: call rp_replicator_serve()",
                        r->cfg.ps);
    if (r->abandoned)
        return RP_ERROR(RP_ERR_INVALID,
                        "the replicator cannot run again: a replica was left stuck in its "
                        "step function in an earlier run (%s)",
                        r->abandoned_error);
    for (int i = 0; i < r->n; i++)
        if (!r->reps[i].busy) rejoin_all(&r->reps[i]);
    r->claims = 0;
    r->failed_first = 0;
    pthread_mutex_lock(&r->mu);
    r->fn = fn;
    r->arg = arg;
    r->finished = 0;
    r->keeper = -1; /* chosen as the workers finish (keep_results) */
    r->nresults = 0;
    r->each_count = 0;
    r->ran_here = false;
    for (int i = 0; i < r->n; i++) {
        r->reps[i].done = false;
        r->ran_here |= !r->reps[i].busy;
    }
    r->in_run = true;
    r->generation++;
    pthread_cond_broadcast(&r->start);
    pthread_mutex_unlock(&r->mu);

    /* Local replica 0 on this thread, with the replica's log prefix and team size; a run that
       succeeds leaves the caller's last error as it was. */
    rp_status saved_status = rp_last_status();
    char saved_error[1024];
    snprintf(saved_error, sizeof saved_error, "%s", rp_last_error());
    int saved_threads = rp_kernels_get_threads();
    rp_log_set_replica(r->reps[0].worker);
    rp_kernels_set_threads(threads_per_replica(r));
    if (!r->reps[0].busy) run_one(&r->reps[0], fn, arg, r->generation);
    rp_kernels_set_threads(saved_threads);
    rp_log_set_replica(-1);

    /* The others, in slices of 200 ms once one has failed, for the watchdog. */
    pthread_mutex_lock(&r->mu);
    r->reps[0].done = true;
    double failed_at = 0;
    char stuck_error[512] = "";
    while (r->finished < r->n - 1) {
        double now = rp_now_s();
        note_failures(r, &failed_at, now);
        rp_replica *stuck = find_stuck(r, failed_at, now);
        if (stuck) {
            if (r->cfg.stuck_exit) stuck_exit(stuck, now);
            /* Its own status and message are its thread's, should it come back: not touched here.
             */
            if (!*stuck_error)
                stuck_message(stuck_error, sizeof stuck_error, stuck, now,
                              " (its thread is abandoned: the replicator cannot run again)");
            stuck->abandoned = true;
            snprintf(r->abandoned_error, sizeof r->abandoned_error, "replica %d", stuck->id);
            r->abandoned = true;
            r->finished++;
            continue;
        }
        struct timespec ts = in_200ms();
        pthread_cond_timedwait(&r->done, &r->mu, &ts);
    }
    r->in_run = false;
    pthread_mutex_unlock(&r->mu);

    /* The error that started it: a stuck replica, then a replica's own failure before a peer's
       "replica k failed"; a failure the replicas agreed on names the replica they blamed. */
    const rp_replica *cause = NULL;
    for (int i = 0; i < r->n; i++) {
        const rp_replica *rep = &r->reps[i];
        if (rep->busy || rep->status == RP_OK) continue;
        if (!cause || cause_rank(rep) < cause_rank(cause)) cause = rep;
    }
    /* Every worker's last calls, while they are fresh (the next run would add to the rings). */
    if (*stuck_error || cause) rt_flight_dump_workers(r);
    if (*stuck_error) return rp_error_set(RP_ERR_TIMEOUT, NULL, 0, "%s", stuck_error);
    if (!cause) {
        if (saved_status != RP_OK)
            rp_error_set(saved_status, NULL, 0, "%s", saved_error);
        else
            rp_error_clear();
        return RP_OK;
    }
    char why[1024];
    const rp_replica *culprit = wrong_axis(r, why, sizeof why);
    if (culprit)
        return rp_error_set(cause->status, NULL, 0, "worker %d: %s (the %s reported: %s)",
                            culprit->worker, why, axis_reported(culprit), cause->error);
    if (strcmp(rp_comm_noun(cause->world), "worker") == 0)
        return rp_error_set(cause->status, NULL, 0, "worker %d: %s", cause->worker, cause->error);
    if (cause->count == 1) return rp_error_set(cause->status, NULL, 0, "%s", cause->error);
    int who = cause->blame >= 0 ? cause->blame : cause->id;
    return rp_error_set(cause->status, NULL, 0, "replica %d: %s", who, cause->error);
}

/* ---- create / destroy ----------------------------------------------------------------- */

/*
 * destroy's end of the roles started and not waited for. The workers that are not in one leave
 * their communicators for good first - the link too, unlike at a run's end - so a started
 * function sending to them or waiting for them, here or on another rank, fails at once instead
 * of buffering forever. Then each started thread here gets the timeout (at least 2 s) to return;
 * one that does not is named in the log and rp_last_error(), detached, and true is returned: its
 * replica, tape and communicators may still be in use, so the caller frees nothing.
 */
static bool stop_started(rp_replicator *r)
{
    bool any = false;
    for (int i = 0; r->reps && i < r->n; i++)
        any |= r->reps[i].busy;
    /*
     * On threads every worker is here, so the leave (a flag) is needed only if one is started.
     * Under MPI a role started on another rank is not seen from here: the leave is a notice to
     * every peer, always. A peer that destroys its replicator first takes it as it closes: comm
     * frees an MPI communicator only once every peer has closed its end (mpi_close.c), where
     * OpenMPI would have given the late notice to the next communicator with its context id.
     */
    bool leave = r->layout != RP_LAYOUT_THREADS || any;
    for (int i = 0; leave && r->reps && i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (rep->busy || !rep->world) continue;
        char why[96];
        snprintf(why, sizeof why, "worker %d's replicator was destroyed", rep->worker);
        for (int k = 0; k < rep->nlive; k++)
            rp_comm_leave(rep->live[k], RP_ERR_COMM, why);
        if (rep->link != rep->world) rp_comm_leave(rep->link, RP_ERR_COMM, why);
    }
    if (!any) return false;
    double bound = fmax(2.0, r->cfg.timeout_s), t0 = rp_now_s();
    bool stuck = false;
    char names[256] = "";
    for (int i = 0; r->reps && i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (!rep->busy) continue;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double left = fmax(0.0, bound - (rp_now_s() - t0));
        until.tv_sec += (time_t)left;
        until.tv_nsec += (long)((left - floor(left)) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (pthread_timedjoin_np(rep->started, NULL, &until) == 0) {
            rep->busy = false;
            continue;
        }
        pthread_detach(rep->started);
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%srole '%s', worker %d", stuck ? "; " : "",
                 r->roles[rep->role].name, rep->worker);
        if (!stuck)
            snprintf(r->abandoned_error, sizeof r->abandoned_error, "role '%s', worker %d",
                     r->roles[rep->role].name, rep->worker);
        stuck = true;
    }
    if (stuck) {
        rp_error_set(RP_ERR_TIMEOUT, NULL, 0,
                     "rp_replicator_destroy: %s did not return from its started function within "
                     "%.0f s (its peers here had left; stop it, e.g. by a message, and "
                     "rp_replicator_wait() for it before destroy): its thread is detached and "
                     "the replicator's memory is not freed",
                     names, bound);
        rp_log(RP_LOG_ERROR, "replicator: %s", rp_last_error());
    }
    return stuck;
}

void rp_replicator_destroy(rp_replicator *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_broadcast(&r->start);
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->mu);
    if (r->watchdog_started) pthread_join(r->watchdog, NULL);
    bool started_stuck = stop_started(r);
    /* A stuck thread that comes back within the grace (2 s) ends: then everything is freed
       as usual. Only a thread still stuck after that is left with the memory it uses. */
    bool stuck = false;
    for (double t0 = rp_now_s();;) {
        stuck = false;
        pthread_mutex_lock(&r->mu);
        for (int i = 0; r->reps && i < r->n; i++)
            stuck |= r->reps[i].abandoned && !r->reps[i].exited;
        pthread_mutex_unlock(&r->mu);
        if (!stuck || rp_now_s() - t0 > 2.0) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; r->reps && i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (!rep->thread_started) continue;
        if (rep->abandoned && stuck)
            pthread_detach(rep->thread);
        else
            pthread_join(rep->thread, NULL);
    }
    if (stuck || started_stuck) {
        /* A stuck thread may still return into its replica, tape and communicator: they stay.
           (stop_started has said so for a started one.) */
        if (stuck)
            rp_log(RP_LOG_WARN,
                   "replicator: %s was left stuck in its step function; its replicator's "
                   "memory is not freed",
                   r->abandoned_error);
        return;
    }
    for (int i = 0; r->reps && i < r->n; i++)
        if (r->strategy->replica_destroy) r->strategy->replica_destroy(&r->reps[i]);
    if (r->strategy && r->strategy->destroy) r->strategy->destroy(r);
    for (int i = 0; r->reps && i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        rp_tape_destroy(rep->tape);
        runtime_topology_destroy(rep);
        free(rep->gather);
        free(rep->bn_scratch);
    }
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->done);
    pthread_cond_destroy(&r->start);
    pthread_mutex_destroy(&r->mu);
    free(r->reps);
    free(r->each);
    free(r);
}

static rp_status check_config(const rp_config *c)
{
    if ((unsigned)c->backend > RP_BACKEND_MPI)
        return RP_ERROR(RP_ERR_INVALID, "backend = %d: not an rp_backend", (int)c->backend);
    if (c->replicas < 1 || c->replicas > 4096)
        return RP_ERROR(RP_ERR_INVALID, "replicas = %d: must be in [1, 4096]", c->replicas);
    if (c->threads_per_replica < 0 || c->threads_per_replica > 1024)
        return RP_ERROR(RP_ERR_INVALID, "threads_per_replica = %d: must be in [0, 1024]",
                        c->threads_per_replica);
    if (c->timeout_s < 0 || c->timeout_s != c->timeout_s)
        return RP_ERROR(RP_ERR_INVALID, "timeout_s = %g: must be >= 0 (0: the default)",
                        c->timeout_s);
    if (c->bucket_bytes < 4)
        return RP_ERROR(RP_ERR_INVALID, "bucket_bytes = %zu: must be at least one float",
                        c->bucket_bytes);
    if (c->checksum_every < 0)
        return RP_ERROR(RP_ERR_INVALID, "checksum_every = %d: must be >= 0", c->checksum_every);
    if (c->precision != RP_F32 && c->precision != RP_BF16)
        return RP_ERROR(RP_ERR_INVALID, "precision = %s (%d): must be f32 or bf16",
                        rp_dtype_name(c->precision), (int)c->precision);
    if (c->grad_dtype != RP_F32 && c->grad_dtype != RP_BF16)
        return RP_ERROR(RP_ERR_INVALID, "grad_dtype = %d (%s): gradients travel as f32 or bf16",
                        (int)c->grad_dtype, rp_dtype_name(c->grad_dtype));
    if ((unsigned)c->strategy >= RP_STRATEGIES)
        return RP_ERROR(RP_ERR_INVALID, "strategy = %d: not an rp_strategy_kind", (int)c->strategy);
    if ((unsigned)c->regime > RP_REGIME_ASYNC)
        return RP_ERROR(RP_ERR_INVALID, "regime = %d: not an rp_regime", (int)c->regime);
    rp_strategy_kind kind = rp_config_strategy(c);
    if (c->grad_dtype == RP_BF16 && kind == RP_STRATEGY_ASYNC)
        return RP_ERROR(RP_ERR_INVALID,
                        "grad_dtype = bf16 with the async regime: parameter servers take f32 "
                        "gradients; bf16 on the wire is for synchronous replicas");
    if (c->sync_groups < 0 || c->sync_groups > 4096)
        return RP_ERROR(RP_ERR_INVALID, "sync_groups = %d: must be in [0, 4096] (0 or 1: off)",
                        c->sync_groups);
    if (c->sync_groups > 1 && c->regime != RP_REGIME_SYNC)
        return RP_ERROR(RP_ERR_INVALID,
                        "sync_groups = %d with the async regime: the groups are asynchronous "
                        "with each other already; leave the regime sync",
                        c->sync_groups);
    if (c->sync_groups > 1 && c->zero)
        return RP_ERROR(RP_ERR_INVALID,
                        "sync_groups = %d with zero = true (ZeRO-1): sync groups keep the "
                        "optimizer state on the parameter servers; drop one of them",
                        c->sync_groups);
    /* cfg.strategy and an older spelling that names another strategy. */
    const char *name = rp_strategy_name(c->strategy);
    if (c->strategy != RP_STRATEGY_SYNC && c->regime == RP_REGIME_ASYNC &&
        c->strategy != RP_STRATEGY_ASYNC)
        return RP_ERROR(RP_ERR_INVALID,
                        "strategy = %s with regime = async: the regime is the older spelling "
                        "of the strategy; give one of them",
                        name);
    if (c->strategy != RP_STRATEGY_SYNC && c->zero && c->strategy != RP_STRATEGY_ZERO1)
        return RP_ERROR(RP_ERR_INVALID,
                        "strategy = %s with zero = true: zero is the older spelling of strategy "
                        "zero1; give one of them",
                        name);
    if (c->strategy != RP_STRATEGY_SYNC && c->sync_groups > 1 &&
        c->strategy != RP_STRATEGY_SYNC_GROUPS)
        return RP_ERROR(RP_ERR_INVALID,
                        "strategy = %s with sync_groups = %d: sync groups are a strategy of "
                        "their own (sync-groups); drop one of them",
                        name, c->sync_groups);
    if (c->hsdp < 0 || (c->hsdp > 1 && kind != RP_STRATEGY_ZERO1 && kind != RP_STRATEGY_ZERO2 &&
                        kind != RP_STRATEGY_ZERO3))
        return RP_ERROR(RP_ERR_INVALID,
                        "hsdp = %d with strategy %s: HSDP shards ZeRO's state in groups of "
                        "replicas; give strategy zero1, zero2 or zero3 (--zero), or hsdp 0",
                        c->hsdp, rp_strategy_name(kind));
    if (c->prefetch && kind != RP_STRATEGY_ZERO3)
        return RP_ERROR(RP_ERR_INVALID,
                        "prefetch (--prefetch) with strategy %s: it starts ZeRO-3's next gather "
                        "early; give strategy zero3 (--zero 3)",
                        rp_strategy_name(kind));
    if (c->keep_gathered && kind != RP_STRATEGY_ZERO3)
        return RP_ERROR(RP_ERR_INVALID,
                        "keep_gathered (--keep-gathered) with strategy %s: it keeps ZeRO-3's "
                        "gathered values through backward; give strategy zero3 (--zero 3)",
                        rp_strategy_name(kind));
    if (c->strategy == RP_STRATEGY_SYNC_GROUPS && c->sync_groups < 2)
        return RP_ERROR(RP_ERR_INVALID,
                        "strategy = sync-groups with sync_groups = %d: give the number of "
                        "groups, at least 2",
                        c->sync_groups);
    if (strategy_of(kind)->servers && (c->ps < 1 || c->ps > 256))
        return RP_ERROR(RP_ERR_INVALID, "ps = %d parameter servers: must be in [1, 256]", c->ps);
    if (c->zero && c->regime != RP_REGIME_SYNC)
        return RP_ERROR(RP_ERR_INVALID,
                        "zero = true (ZeRO-1) with the async regime: optimizer-state sharding "
                        "needs synchronous replicas; drop --zero or use --regime sync");
    if (c->staleness < -1)
        return RP_ERROR(RP_ERR_INVALID, "staleness = %d: must be >= 0, or -1 for unbounded",
                        c->staleness);
    return RP_OK;
}

/* The runtime's own run at create: every worker makes its role and axis communicators. */
static rp_status split_fn(rp_replica *rep, void *arg)
{
    return runtime_topology_split(rep);
}

rp_status rp_replicator_create(rp_replicator **out, const rp_config *cfg)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    *out = NULL;
    RP_CHECK(check_config(cfg));
    RP_CHECK(kernels_check()); /* RP_KERNELS=cuda without a usable GPU, say */
    rp_role roles[RP_ROLES_MAX];
    int nroles = 0, total = 0;
    RP_CHECK(runtime_topology_resolve(cfg, roles, &nroles, &total));
    rp_strategy_kind kind = rp_config_strategy(cfg);
    if (nroles > 0 && kind == RP_STRATEGY_SYNC_GROUPS)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "roles (nroles = %d) with sync_groups = %d: sync groups split a job "
                        "of plain replicas; give no roles, or no sync groups",
                        nroles, cfg->sync_groups);
    if (nroles > 0 && kind == RP_STRATEGY_ASYNC)
        return RP_ERROR(
            RP_ERR_UNSUPPORTED,
            "roles (nroles = %d) with the async regime: the parameter "
            "servers make their own layout; give no roles, or train a role synchronously",
            nroles);
    rp_status status = RP_OK;
    bool mpi = cfg->backend == RP_BACKEND_MPI ||
               (cfg->backend == RP_BACKEND_AUTO && rp_comm_mpi_launched());
    /* Under MPI the groups divide the job's replicas, which the strategy counts
     * (strategy_groups.c).
     */
    if (!mpi && kind == RP_STRATEGY_SYNC_GROUPS && cfg->replicas % cfg->sync_groups != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "sync_groups = %d does not divide the %d replicas: every group needs "
                        "the same number of replicas (use a divisor of %d)",
                        cfg->sync_groups, cfg->replicas, cfg->replicas);
    /* Workers in this process: under MPI `replicas` on each rank; on threads, with roles, all of
     * them. */
    int n = nroles > 0 && !mpi ? total : cfg->replicas;
    rp_replicator *r = calloc(1, sizeof *r);
    rp_comm **comms = calloc((size_t)n, sizeof *comms);
    if (!r || !comms) {
        free(r);
        free(comms);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate a replicator of %d replicas", n);
    }
    r->cfg = *cfg;
    if (r->cfg.timeout_s == 0) r->cfg.timeout_s = rp_env_get()->comm_timeout;
    r->n = n;
    /* The choice's table, or the one its resolve slot names for this layout. */
    r->strategy = strategy_of(kind);
    if (r->strategy->resolve) r->strategy = r->strategy->resolve(r, mpi);
    r->nroles = nroles;
    memcpy(r->roles, roles, sizeof roles);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->start, NULL);
    pthread_cond_init(&r->done, NULL);
    pthread_cond_init(&r->wake, NULL);
    r->reps = calloc((size_t)n, sizeof *r->reps);
    if (!r->reps) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d replicas", n);
        goto cleanup;
    }
    /* The strategy may take ranks for a role of its own and hand back the replicas' world. */
    rp_comm *world = NULL;
    if (r->strategy->create) RP_TRY(r->strategy->create(r, mpi, &world));
    if (world) {
        comms[0] = world;
        r->layout = RP_LAYOUT_MPI;
    } else if (mpi && n == 1) {
        RP_TRY(rp_comm_mpi_create(&comms[0], r->cfg.timeout_s));
        r->layout = RP_LAYOUT_MPI;
    } else if (mpi) {
        RP_TRY(rp_comm_hier_create(comms, n, r->cfg.timeout_s));
        r->layout = RP_LAYOUT_HIER;
    } else {
        RP_TRY(rp_comm_threads_create(comms, n, NULL, r->cfg.timeout_s));
        r->layout = RP_LAYOUT_THREADS;
    }
    for (int i = 0; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        rep->r = r;
        rep->local = i;
        rep->blame = -1;
        rep->world = comms[i];
        comms[i] = NULL;
        rep->worker = rp_comm_rank(rep->world);
        rep->workers = rp_comm_size(rep->world);
        /* Until the split: the world is the data axis (for good, in a one-role flat job). */
        rep->comm = rep->world;
        rep->id = rep->worker;
        rep->count = rep->workers;
    }
    if (r->nroles == 0) {
        /* Today's layouts as roles: every worker a replica; on an async server rank, a server. */
        r->nroles = 1;
        r->roles[0] = rp_role_make(r->server ? "server" : "replica", r->reps[0].workers, 1);
        r->roles[0].first = 0;
    } else if (r->reps[0].workers != total) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "the roles hold %d workers but the job has %d (%s): under MPI "
                          "ranks x replicas must equal the roles' workers",
                          total, r->reps[0].workers,
                          r->layout == RP_LAYOUT_THREADS ? "threads" : "ranks x replicas");
        goto cleanup;
    }
    /* In a mesh (a replica spans workers) or a job of roles, a communicator's member is a worker:
       its messages say "worker 3", the id of the header, the flight recorder and --faults. */
    const rp_role *first = &r->roles[0];
    bool meshed = r->nroles > 1 || first->model > 1 || first->pipe > 1;
    for (int i = 0; meshed && i < n; i++)
        rp_comm_set_noun(r->reps[i].world, "worker");
    /* Faults aimed at workers the job does not have would never fire: refused here, at start.
       Under MPI the ids run over every rank's threads, a parameter server's included. */
    int ids = r->reps[0].workers;
    if (mpi && rp_env_get()->mpi_world_size * (cfg->replicas > 0 ? cfg->replicas : 1) > ids)
        ids = rp_env_get()->mpi_world_size * (cfg->replicas > 0 ? cfg->replicas : 1);
    RP_TRY(rp_comm_faults_check(ids, meshed ? "worker" : "replica"));
    for (int i = 0; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        runtime_topology_assign(rep);
        rep->gather = malloc((size_t)rep->workers * 2 * RP_REPORTS_MAX * sizeof(int64_t) +
                             3 * sizeof(int64_t));
        if (!rep->gather) {
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate replica %d", i);
            goto cleanup;
        }
        RP_TRY(rp_tape_create(&rep->tape, cfg->arena_bytes));
        RP_TRY(rp_tape_set_precision(rep->tape, rp_precision_policy_make(cfg->precision)));
        RP_TRY(rp_tape_set_grad_wire(rep->tape, cfg->grad_dtype));
        if (r->strategy->replica_init) RP_TRY(r->strategy->replica_init(rep));
    }
    for (int i = 1; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        int rc = pthread_create(&rep->thread, NULL, worker_main, rep);
        if (rc != 0) {
            status = RP_ERROR(RP_ERR_BACKEND, "cannot start the thread of replica %d: %s", i,
                              strerror(rc));
            goto cleanup;
        }
        rep->thread_started = true;
    }
    /* Roles and axes: without collectives for a flat one-role job, else a run of the runtime's own.
     */
    const rp_role *r0 = &r->roles[0];
    if (r->nroles == 1 && r0->model == 1 && r0->pipe == 1) {
        for (int i = 0; i < n; i++)
            RP_TRY(runtime_topology_split(&r->reps[i]));
    } else {
        RP_TRY(rp_replicator_run(r, split_fn, NULL));
    }
    /* In a mesh or a job of roles an error names the communicator it happened on. */
    for (int i = 0; meshed && i < n; i++) {
        rp_replica *rep = &r->reps[i];
        static const char *const axis_names[RP_AXES] = {"data axis", "model axis", "pipe axis"};
        rp_comm_set_name(rep->world, "world");
        if (rep->link != rep->world) rp_comm_set_name(rep->link, "link");
        if (rep->role_comm != rep->world) rp_comm_set_name(rep->role_comm, "role");
        for (int a = 0; a < RP_AXES; a++)
            rp_comm_set_name(rep->axis[a], axis_names[a]);
    }
    for (int i = 0; i < n; i++)
        if (r->reps[i].count > r->each_cap) r->each_cap = r->reps[i].count;
    r->each = calloc((size_t)r->each_cap * RP_REPORTS_MAX, sizeof(double));
    if (!r->each) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate the results of %d replicas", r->each_cap);
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        /* A listener among others: a tracer or a user's callback stack with the strategy's. */
        if (rep->count > 1 && r->strategy->grad_ready)
            RP_TRY(rp_tape_add_grad_ready(rep->tape, r->strategy->grad_ready, rep));
    }
    if (r->cfg.stuck_exit && !r->server) {
        int rc = pthread_create(&r->watchdog, NULL, watchdog_main, r);
        if (rc != 0) {
            status = RP_ERROR(RP_ERR_BACKEND, "cannot start the watchdog thread: %s", strerror(rc));
            goto cleanup;
        }
        r->watchdog_started = true;
    }
    rp_debug("replicator: %d workers (%d here) in %d role(s) x %d threads, %s backend, %s "
             "strategy, timeout %gs",
             r->reps[0].workers, n, r->nroles, threads_per_replica(r),
             rp_comm_backend(r->reps[0].world), r->strategy->name, r->cfg.timeout_s);
    *out = r;
    r = NULL;
cleanup:
    if (r && r->reps)
        for (int i = 0; i < n; i++)
            if (comms[i]) rp_comm_destroy(comms[i]);
    free(comms);
    rp_replicator_destroy(r);
    return status;
}

/* ---- accessors ------------------------------------------------------------------------- */

int rp_replicator_replicas(const rp_replicator *r)
{
    return r->reps[0].count;
}
bool rp_replicator_is_server(const rp_replicator *r)
{
    return r->server;
}

rp_status rp_replicator_serve(rp_replicator *r)
{
    if (!r || !r->server || !r->strategy->serve)
        return RP_ERROR(RP_ERR_INVALID, "rp_replicator_serve on a replica's process");
    return r->strategy->serve(r);
}
int rp_replicator_local_replicas(const rp_replicator *r)
{
    return r->n;
}
int rp_replicator_threads_per_replica(const rp_replicator *r)
{
    return threads_per_replica(r);
}
const char *rp_replicator_backend(const rp_replicator *r)
{
    return rp_comm_backend(r->reps[0].world);
}
int rp_replica_local_index(const rp_replica *rep)
{
    return rep->local;
}

rp_replica *rp_replicator_replica(rp_replicator *r, int i)
{
    return r && i >= 0 && i < r->n ? &r->reps[i] : NULL;
}

rp_status rp_replicator_result_each(const rp_replicator *r, const char *name, double *values, int n)
{
    if (!r || !name || !values) return RP_ERROR(RP_ERR_INVALID, "rp_replicator_result_each: NULL");
    for (int i = 0; i < r->nresults; i++)
        if (!strcmp(r->results[i].name, name)) {
            if (n != r->each_count)
                return RP_ERROR(RP_ERR_INVALID,
                                "rp_replicator_result_each('%s'): room for %d values, but the "
                                "last run had %d replicas",
                                name, n, r->each_count);
            memcpy(values, r->each + (size_t)i * (size_t)r->each_cap, sizeof(double) * (size_t)n);
            return RP_OK;
        }
    return RP_ERROR(RP_ERR_INVALID, "no value named '%s' was reported in the last run", name);
}

rp_status rp_replicator_result(const rp_replicator *r, const char *name, double *value)
{
    for (int i = 0; r && name && i < r->nresults; i++)
        if (!strcmp(r->results[i].name, name)) {
            *value = r->results[i].value;
            return RP_OK;
        }
    if (r && !r->ran_here)
        return RP_ERROR(RP_ERR_INVALID,
                        "no value named '%s': no worker of this process ran the last run (its "
                        "workers are all in started roles); the results are on the processes of "
                        "the workers that reported",
                        name ? name : "(null)");
    return RP_ERROR(RP_ERR_INVALID, "no value named '%s' was reported in the last run",
                    name ? name : "(null)");
}

int rp_replica_id(const rp_replica *rep)
{
    return rep->id;
}
int rp_replica_count(const rp_replica *rep)
{
    return rep->count;
}
uint64_t rp_replica_seed(const rp_replica *rep)
{
    return rep->r->cfg.seed;
}
rp_tape *rp_replica_tape(rp_replica *rep)
{
    return rep->tape;
}
rp_comm *rp_replica_comm(rp_replica *rep)
{
    return rep->comm;
}
void *rp_replica_user(const rp_replica *rep)
{
    return rep->user;
}
void rp_replica_set_user(rp_replica *rep, void *user)
{
    rep->user = user;
}

rp_status rp_replica_input_context(const rp_replica *rep, int global_batch, rp_input_context *ctx)
{
    /*
     * A batch is split among the replicas that train it together (rp_replica_in_sync): every
     * replica in sync training, a sync group's, and in async training one replica, which trains
     * the whole batch it claimed.
     */
    int split = rp_replica_in_sync(rep);
    if (global_batch < 1 || global_batch % split != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "global batch %d does not split across %d replicas%s: it must be a "
                        "positive multiple of %s",
                        global_batch, split, rep->group_comm ? " (a sync group)" : "",
                        rep->group_comm ? "the group's size" : "the replica count");
    ctx->pipeline = rep->id;
    ctx->pipelines = rep->count;
    ctx->replica = rep->group_comm ? rep->group_rank : rep->r->strategy->identical ? rep->id : 0;
    ctx->replicas = split;
    ctx->global_batch = global_batch;
    ctx->per_replica_batch = global_batch / split;
    return RP_OK;
}

rp_status rp_replica_report(rp_replica *rep, const char *name, double value, rp_reduce_op op)
{
    if (!rep || !name) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (strlen(name) >= sizeof rep->reports[0].name)
        return RP_ERROR(RP_ERR_INVALID, "report name '%s' is longer than %zu characters", name,
                        sizeof rep->reports[0].name - 1);
    if ((unsigned)op > RP_FIRST)
        return RP_ERROR(RP_ERR_INVALID, "report '%s': unknown op %d", name, (int)op);
    if (rep->nreports == RP_REPORTS_MAX)
        return RP_ERROR(RP_ERR_INVALID, "report '%s': at most %d reports per run", name,
                        RP_REPORTS_MAX);
    runtime_report *e = &rep->reports[rep->nreports++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->op = (int)op;
    e->value = value;
    return RP_OK;
}

/* ---- the primitives ---------------------------------------------------------------------- */

rp_status rp_all_reduce(rp_replica *rep, const void *send, void *recv, int64_t count,
                        rp_dtype dtype, rp_reduce_op op)
{
    return rp_comm_all_reduce(rep ? rep->comm : NULL, send, recv, count, dtype, op);
}

rp_status rp_reduce_scatter(rp_replica *rep, const void *send, void *recv, int64_t count,
                            rp_dtype dtype, rp_reduce_op op)
{
    return rp_comm_reduce_scatter(rep ? rep->comm : NULL, send, recv, count, dtype, op);
}

rp_status rp_all_gather(rp_replica *rep, const void *send, void *recv, int64_t count,
                        rp_dtype dtype)
{
    return rp_comm_all_gather(rep ? rep->comm : NULL, send, recv, count, dtype);
}

rp_status rp_broadcast(rp_replica *rep, void *buf, int64_t count, rp_dtype dtype, int root)
{
    return rp_comm_broadcast(rep ? rep->comm : NULL, buf, count, dtype, root);
}

rp_status rp_barrier(rp_replica *rep)
{
    return rp_comm_barrier(rep ? rep->comm : NULL);
}

rp_status rp_cross_replica_bn(double *sums, int count, double *n, void *ctx)
{
    rp_replica *rep = ctx;
    if (!rep)
        return RP_ERROR(RP_ERR_INVALID, "cross-replica batch norm needs the rp_replica as its ctx");
    if (rep->count == 1) return RP_OK;
    if (count + 1 > rep->bn_cap) {
        /* Grows to the widest layer on the first step, then never again. */
        double *grown = realloc(rep->bn_scratch, (size_t)(count + 1) * sizeof(double));
        if (!grown) return RP_ERROR(RP_ERR_NOMEM, "cross-replica batch norm: %d sums", count);
        rep->bn_scratch = grown;
        rep->bn_cap = count + 1;
    }
    memcpy(rep->bn_scratch, sums, (size_t)count * sizeof(double));
    rep->bn_scratch[count] = *n;
    RP_CHECK(
        rp_comm_all_reduce(rep->comm, rep->bn_scratch, rep->bn_scratch, count + 1, RP_F64, RP_SUM));
    memcpy(sums, rep->bn_scratch, (size_t)count * sizeof(double));
    *n = rep->bn_scratch[count];
    return RP_OK;
}

/* ---- the strategy's calls --------------------------------------------------------------- */

rp_status rp_replica_broadcast_params(rp_replica *rep, rp_params *params)
{
    if (!rep || !params) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    return strategy_broadcast_params(rep, params);
}

rp_status rp_replica_optimizer_create(rp_replica *rep, rp_optimizer **opt, rp_params *params,
                                      const rp_optim_config *cfg)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    *opt = NULL;
    RP_CHECK(rp_optimizer_create(opt, params, cfg));
    rp_status status = rep->r->strategy->optimizer_create(rep, *opt, params, cfg);
    if (status != RP_OK) {
        rp_optimizer_destroy(*opt);
        *opt = NULL;
    }
    return status;
}

rp_status rp_replica_optimizer_fetch(rp_replica *rep, rp_optimizer *opt)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    return rep->r->strategy->fetch ? rep->r->strategy->fetch(rep, opt) : RP_OK;
}

size_t rp_replica_strategy_bytes(const rp_replica *rep, const rp_optimizer *opt, bool resident)
{
    if (!rep || !opt || !rep->r->strategy->bytes) return 0;
    return rep->r->strategy->bytes(rep, opt, resident);
}

rp_status rp_replica_checkpoint_range(const rp_replica *rep, const rp_optimizer *opt, int64_t *lo,
                                      int64_t *hi)
{
    if (!rep || !opt || !lo || !hi) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (!rep->r->strategy->lockstep)
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "a checkpoint written by every replica needs replicas that step in "
                        "lockstep (sync or ZeRO); with the %s strategy each replica holds values "
                        "of its own: write the gathered state instead (--checkpoint-shards N)",
                        rep->r->strategy->name);
    int64_t n = rp_params_trainable_numel(rp_optimizer_params(opt));
    rp_optimizer_range(opt, lo, hi);
    if (*lo != 0 || *hi != n) {
        /* ZeRO: the shard it updates; under HSDP the first group's (the others hold copies). */
        if (rep->repl_comm && rp_comm_rank(rep->repl_comm) != 0) *hi = *lo;
        return RP_OK;
    }
    /* Every replica holds everything: each writes an even part. */
    int64_t count = rep->count > 0 ? n / rep->count : n,
            extra = rep->count > 0 ? n % rep->count : 0;
    *lo = rep->id * count + (rep->id < extra ? rep->id : extra);
    *hi = *lo + count + (rep->id < extra);
    return RP_OK;
}

rp_status rp_replica_checkpoint_part(rp_replica *rep, rp_checkpoint *ck, const rp_optimizer *opt,
                                     const char *param_prefix, const char *optim_prefix)
{
    if (!rep || !ck || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    const rp_params *p = rp_optimizer_params(opt);
    int64_t lo, hi, trainable = rp_params_trainable_numel(p);
    RP_CHECK(rp_replica_checkpoint_range(rep, opt, &lo, &hi));
    /* Tensor-parallel members write their slices; what every member holds whole, the first. */
    bool replicated = rep->coord[RP_AXIS_MODEL] == 0;
    RP_CHECK(rp_checkpoint_add_params_pieces(ck, p, param_prefix, lo, hi, replicated));
    /* The buffers (equal on lockstep replicas): replica 0's; the step count (every stage's):
       its first worker's. */
    if (rep->id == 0)
        RP_CHECK(rp_checkpoint_add_params_pieces(ck, p, param_prefix, trainable, rp_params_numel(p),
                                                 replicated));
    bool steps = rep->id == 0 && replicated && rep->coord[RP_AXIS_PIPE] == 0;
    return rp_checkpoint_add_optimizer_pieces(ck, opt, p, optim_prefix, lo, hi, replicated, steps);
}

rp_status rp_replica_optimizer_publish(rp_replica *rep, rp_optimizer *opt)
{
    if (!rep || !opt) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (!rep->r->strategy->publish) return strategy_broadcast_state(rep, opt);
    return rep->r->strategy->publish(rep, opt);
}

rp_status rp_replica_claim(rp_replica *rep, int64_t *ticket)
{
    if (!rep || !ticket) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (!rep->r->strategy->claim) return strategy_local_claim(rep, ticket);
    RP_CHECK(stop_if_failed(rep));
    return rep->r->strategy->claim(rep, ticket);
}

rp_status rp_replica_next_batch(rp_replica *rep, int64_t *index)
{
    if (!rep || !index) return RP_ERROR(RP_ERR_INVALID, "rp_replica_next_batch: NULL argument");
    rp_status (*next)(rp_replica *, int64_t *) = rep->r->strategy->next_batch;
    if (!next || next == strategy_lockstep_batch) return strategy_lockstep_batch(rep, index);
    RP_CHECK(stop_if_failed(rep));
    return next(rep, index);
}

rp_status rp_replica_clip_grad_norm(rp_replica *rep, rp_optimizer *opt, float max_norm, float *norm)
{
    if (!rep || !opt)
        return RP_ERROR(RP_ERR_INVALID, "rp_replica_clip_grad_norm: %s is NULL",
                        rep ? "opt" : "rep");
    if (!rep->r->strategy->clip) return strategy_clip_full(rep, opt, max_norm, norm);
    return rep->r->strategy->clip(rep, opt, max_norm, norm);
}

bool rp_replicator_sharded(const rp_replicator *r)
{
    /* The first role's replicas: ZeRO-1's optimizer shards, or a replica spanning workers. */
    return r && (r->strategy->sharded || r->roles[0].model * r->roles[0].pipe > 1);
}

bool rp_replica_lockstep(const rp_replica *rep)
{
    return rep && rep->r->strategy->lockstep;
}

bool rp_replicator_lockstep(const rp_replicator *r)
{
    return r && r->strategy->lockstep;
}

/* ---- topology ---------------------------------------------------------------------------- */

bool rp_replica_is_leader(const rp_replica *rep)
{
    if (!rep) return false;
    const int *c = rep->coord, *n = rep->shape;
    return rep->role == 0 && c[RP_AXIS_DATA] == 0 && c[RP_AXIS_MODEL] == n[RP_AXIS_MODEL] - 1 &&
           c[RP_AXIS_PIPE] == n[RP_AXIS_PIPE] - 1;
}

bool rp_replicator_is_leader(const rp_replicator *r)
{
    for (int i = 0; r && !r->server && i < r->n; i++)
        if (rp_replica_is_leader(&r->reps[i])) return true;
    return false;
}

int rp_replica_worker(const rp_replica *rep)
{
    return rep->worker;
}
int rp_replica_workers(const rp_replica *rep)
{
    return rep->workers;
}
const char *rp_replica_role(const rp_replica *rep)
{
    return rep->r->roles[rep->role].name;
}

int rp_replica_coord(const rp_replica *rep, rp_axis axis)
{
    return (unsigned)axis < RP_AXES ? rep->coord[axis] : -1;
}

int rp_replica_axis_size(const rp_replica *rep, rp_axis axis)
{
    return (unsigned)axis < RP_AXES ? rep->shape[axis] : 0;
}

rp_comm *rp_replica_axis_comm(rp_replica *rep, rp_axis axis)
{
    return (unsigned)axis < RP_AXES ? rep->axis[axis] : NULL;
}

rp_comm *rp_replica_role_comm(rp_replica *rep)
{
    return rep->role_comm;
}
rp_comm *rp_replica_world_comm(rp_replica *rep)
{
    return rep->world;
}
rp_comm *rp_replica_link_comm(rp_replica *rep)
{
    return rep ? rep->link : NULL;
}

int rp_replica_in_sync(const rp_replica *rep)
{
    if (rep->group_comm) return rep->group_size;
    return rep->r->strategy->identical ? rep->count : 1;
}

int rp_replicator_in_sync(const rp_replicator *r)
{
    return r ? rp_replica_in_sync(&r->reps[0]) : 0;
}

rp_comm *rp_replica_hsdp_comm(rp_replica *rep, bool across)
{
    return !rep ? NULL : across ? rep->repl_comm : rep->shard_comm;
}

rp_comm *rp_replica_sync_comm(rp_replica *rep)
{
    if (!rep) return NULL;
    if (rep->group_comm) return rep->group_comm;
    return rep->r->strategy->identical ? rep->comm : NULL;
}

int rp_replicator_roles(const rp_replicator *r)
{
    return r ? r->nroles : 0;
}

const rp_role *rp_replicator_role(const rp_replicator *r, int i)
{
    return r && i >= 0 && i < r->nroles ? &r->roles[i] : NULL;
}

static int role_index(const rp_replicator *r, const char *name)
{
    for (int i = 0; name && i < r->nroles; i++)
        if (!strcmp(r->roles[i].name, name)) return i;
    return -1;
}

static rp_status unknown_role(const rp_replicator *r, const char *name)
{
    char names[RP_ROLES_MAX * 34] = "";
    for (int i = 0; i < r->nroles; i++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s'%s'", i ? ", " : "", r->roles[i].name);
    }
    return RP_ERROR(RP_ERR_INVALID, "no role named '%s' in this job (its roles: %s)",
                    name ? name : "(null)", names);
}

/* A started worker: the role's function on a thread of its own, once. */
static void *started_main(void *p)
{
    rp_replica *rep = p;
    rp_log_set_replica(rep->worker);
    rp_kernels_set_threads(threads_per_replica(rep->r));
    trace_attach(rep);
    rp_tape_reset(rep->tape);
    rep->nreports = 0;
    rep->blame = -1;
    rp_error_clear();
    rp_trace_begin(RP_PHASE_COMPUTE); /* a started role's whole life: its track's outer span */
    rp_status status = rep->start_fn(rep, rep->start_arg);
    rp_trace_end(rp_replica_role(rep));
    rep->status = status;
    if (status != RP_OK) {
        const char *msg = rp_last_error();
        snprintf(rep->error, sizeof rep->error, "%s",
                 *msg ? msg : "the function returned an error without a message");
    }
    leave_all(rep, status);
    /* Its long-lived function is over: the other roles stop waiting for it on the link. */
    if (rep->link != rep->world)
        rp_comm_leave(rep->link, status,
                      status == RP_OK ? "its started function returned" : rep->error);
    return NULL;
}

rp_status rp_replicator_start(rp_replicator *r, const char *role, rp_replica_fn fn, void *arg)
{
    if (!r || !fn) return RP_ERROR(RP_ERR_INVALID, "replicator or function is NULL");
    int k = role_index(r, role);
    if (k < 0) return unknown_role(r, role);
    if (r->abandoned)
        return RP_ERROR(RP_ERR_INVALID,
                        "the replicator cannot start role '%s': a replica was left stuck in "
                        "its step function in an earlier run (%s)",
                        role, r->abandoned_error);
    for (int i = 0; i < r->n; i++)
        if (r->reps[i].role == k && r->reps[i].busy)
            return RP_ERROR(RP_ERR_INVALID,
                            "role '%s' is already started: rp_replicator_wait() for it first",
                            role);
    /* A new phase for every idle worker here: a role started next, or a run, must not find its
       peers "ended" from the last run and fail at once (the threads backend would). */
    for (int i = 0; i < r->n; i++)
        if (!r->reps[i].busy) rejoin_all(&r->reps[i]);
    for (int i = 0; i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (rep->role != k) continue;
        rep->start_fn = fn;
        rep->start_arg = arg;
        rep->status = RP_OK;
        if (rep->link != rep->world)
            rp_comm_rejoin(rep->link); /* (left when an earlier start returned) */
        pthread_mutex_lock(&r->mu);
        rep->busy = true;
        pthread_mutex_unlock(&r->mu);
        int rc = pthread_create(&rep->started, NULL, started_main, rep);
        if (rc != 0) {
            pthread_mutex_lock(&r->mu);
            rep->busy = false;
            pthread_mutex_unlock(&r->mu);
            return RP_ERROR(RP_ERR_BACKEND,
                            "cannot start a thread for worker %d of role '%s': %s (the "
                            "workers started so far run on: call rp_replicator_wait())",
                            rep->worker, role, strerror(rc));
        }
    }
    return RP_OK;
}

rp_status rp_replicator_wait(rp_replicator *r, const char *role)
{
    if (!r) return RP_ERROR(RP_ERR_INVALID, "replicator is NULL");
    int k = role_index(r, role);
    if (k < 0) return unknown_role(r, role);
    const rp_replica *cause = NULL;
    for (int i = 0; i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (rep->role != k || !rep->busy) continue;
        pthread_join(rep->started, NULL);
        pthread_mutex_lock(&r->mu);
        rep->busy = false;
        pthread_mutex_unlock(&r->mu);
        if (rep->status != RP_OK &&
            (!cause || (cause->status == RP_ERR_COMM && rep->status != RP_ERR_COMM)))
            cause = rep;
    }
    if (!cause) return RP_OK;
    return rp_error_set(cause->status, NULL, 0, "role '%s', worker %d: %s", role, cause->worker,
                        cause->error);
}
