/*
 * fault.c - fault injection: a seeded schedule of delays, kills and
 * corruptions of a chosen worker's calls (docs/faults.md), applied by
 * comm.c's dispatch on every backend - threads, MPI and hierarchical alike,
 * since each public call passes through comm.c before its backend's table.
 *
 * The schedule is process-wide: $RP_FAULTS, read at the first call, or
 * rp_comm_faults_set(). Each handle counts its calls (collectives and
 * message posts, the flight recorder's numbering) and its runs
 * (rp_comm_rejoin, which the runtime calls before every run) while a
 * schedule is set, and a clause fires where its worker, run and call match
 * - or, in the random form, where a draw of the counter-based generator at
 * (seed, clause, worker, call) falls under p, so one seed always gives the
 * same faults whatever the threads' timing.
 *
 * A dead worker is modelled as each backend would see one: a process of
 * the MPI backends dies (SIGKILL); a thread of the threads backend stops -
 * its calls never arrive, so its peers time out and name it, and only then
 * (the communicator broken) does its own call return, with an error saying
 * it was killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/fault_internal.h"

int fault_armed = -1;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fault_schedule sched;   /* in force while fault_armed is 1 */
static char sched_error[1200]; /* set: $RP_FAULTS is invalid, and every call says so */
static uint64_t injected;      /* under mu */
static fault_event events[RP_FAULT_EVENTS];
static uint64_t nevents; /* under mu */
/* The workers killed on a threads backend (beyond this many, a kill stops one handle's calls). */
#define MAX_DEAD 4096
static int dead[MAX_DEAD]; /* under mu */
static int ndead;          /* written under mu, read atomically */

static const char *kind_word(fault_kind k)
{
    return k == RP_FAULT_DELAY ? "delay" : k == RP_FAULT_KILL ? "kill" : "corrupt";
}

/* ---- the spec ---------------------------------------------------------------------------- */

/* s[0..n) without the spaces around it, as a NUL-terminated copy in buf (cut to fit). */
static void trimmed(const char *s, size_t n, char *buf, size_t size)
{
    while (n > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        n--;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n >= size) n = size - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

/* A whole number in [0, max], digits only. */
static bool parse_uint(const char *v, uint64_t max, uint64_t *out)
{
    if (!*v) return false;
    uint64_t x = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned d = (unsigned)(*p - '0');
        if (x > (max - d) / 10) return false;
        x = x * 10 + d;
    }
    *out = x;
    return true;
}

static rp_status clause_error(const char *origin, const char *clause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rp_status clause_error(const char *origin, const char *clause, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return RP_ERROR(RP_ERR_INVALID, "%s: fault '%s': %s (see docs/faults.md)", origin, clause, why);
}

/* One KIND:key=value,... clause (text `clause`, already trimmed) into *f. */
static rp_status parse_clause(const char *origin, const char *clause, fault_clause *f)
{
    memset(f, 0, sizeof *f);
    f->worker = -2; /* not given */
    f->call = f->run = f->ms = -1;
    /* The clause as messages quote it; a long one is shortened visibly, with "...". */
    if (strlen(clause) < sizeof f->text)
        snprintf(f->text, sizeof f->text, "%s", clause);
    else
        snprintf(f->text, sizeof f->text, "%.*s...", (int)sizeof f->text - 4, clause);
    const char *colon = strchr(clause, ':');
    char word[RP_FAULT_CLAUSE_MAX];
    trimmed(clause, colon ? (size_t)(colon - clause) : strlen(clause), word, sizeof word);
    if (!colon)
        return clause_error(origin, clause,
                            "'%s' is neither seed=N nor KIND:KEY=VALUE,... (KIND delay, kill or "
                            "corrupt)",
                            word);
    if (!strcmp(word, "delay"))
        f->kind = RP_FAULT_DELAY;
    else if (!strcmp(word, "kill"))
        f->kind = RP_FAULT_KILL;
    else if (!strcmp(word, "corrupt"))
        f->kind = RP_FAULT_CORRUPT;
    else
        return clause_error(origin, clause, "unknown fault '%s' (delay, kill or corrupt)", word);
    bool seen_what = false;
    for (const char *p = colon + 1; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* As long as the clause: no token is cut (a cut "ms=0000...05" would read 0). */
        char item[RP_FAULT_CLAUSE_MAX], key[RP_FAULT_CLAUSE_MAX], val[RP_FAULT_CLAUSE_MAX];
        trimmed(p, len, item, sizeof item);
        const char *eq = strchr(item, '=');
        if (!eq)
            return clause_error(origin, clause, "'%s' is not KEY=VALUE",
                                item[0] ? item : "(empty)");
        trimmed(item, (size_t)(eq - item), key, sizeof key);
        trimmed(eq + 1, strlen(eq + 1), val, sizeof val);
        if (!val[0]) return clause_error(origin, clause, "%s has no value", key);
        uint64_t u = 0;
        bool twice = false;
        if (!strcmp(key, "worker")) {
            twice = f->worker != -2;
            if (!strcmp(val, "any"))
                f->worker = -1;
            else if (parse_uint(val, 0x7fffffff, &u))
                f->worker = (int)u;
            else
                return clause_error(origin, clause,
                                    "worker '%s' is neither a replica id (0, 1, ...) nor any", val);
        } else if (!strcmp(key, "call") || !strcmp(key, "run")) {
            int64_t *dst = key[0] == 'c' ? &f->call : &f->run;
            twice = *dst >= 0;
            if (!parse_uint(val, (uint64_t)1 << 62, &u))
                return clause_error(origin, clause, "%s '%s' is not a whole number >= 0", key, val);
            *dst = (int64_t)u;
        } else if (!strcmp(key, "p")) {
            twice = f->p > 0;
            char *e;
            errno = 0;
            double p = strtod(val, &e);
            if (*e || errno || !(p > 0 && p <= 1))
                return clause_error(origin, clause, "p '%s' is not a probability in (0, 1]", val);
            f->p = p;
        } else if (!strcmp(key, "ms")) {
            if (f->kind != RP_FAULT_DELAY)
                return clause_error(origin, clause, "ms is for delay only, not %s",
                                    kind_word(f->kind));
            twice = f->ms >= 0;
            if (!parse_uint(val, 3600000, &u))
                return clause_error(origin, clause,
                                    "ms '%s' is not a whole number of milliseconds in [0, 3600000]",
                                    val);
            f->ms = (int64_t)u;
        } else if (!strcmp(key, "what")) {
            if (f->kind != RP_FAULT_CORRUPT)
                return clause_error(origin, clause, "what is for corrupt only, not %s",
                                    kind_word(f->kind));
            twice = seen_what;
            seen_what = true;
            if (!strcmp(val, "header"))
                f->data = false;
            else if (!strcmp(val, "data"))
                f->data = true;
            else
                return clause_error(origin, clause, "what '%s' is neither header nor data", val);
        } else {
            return clause_error(origin, clause, "unknown key '%s' (worker, call, run, p, %s)", key,
                                f->kind == RP_FAULT_DELAY     ? "ms"
                                : f->kind == RP_FAULT_CORRUPT ? "what"
                                                              : "and no other for kill");
        }
        if (twice) return clause_error(origin, clause, "%s is given twice", key);
        if (!end) break;
        p = end + 1;
    }
    if (f->worker == -2) return clause_error(origin, clause, "no worker= (a replica id, or any)");
    if (f->kind == RP_FAULT_DELAY && f->ms < 0)
        return clause_error(origin, clause, "a delay needs ms= (milliseconds)");
    if (f->p > 0 && f->call >= 0)
        return clause_error(origin, clause,
                            "call= and p= together: a fault is at one call or random, not both");
    if (f->p == 0 && f->call < 0 && f->run < 0)
        return clause_error(origin, clause, "no call=, run= or p=: say when it happens");
    return RP_OK;
}

rp_status fault_parse(const char *spec, const char *origin, fault_schedule *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->origin, sizeof out->origin, "%s", origin ? origin : "faults");
    origin = out->origin;
    if (!spec) return RP_OK;
    bool seeded = false;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char clause[RP_FAULT_CLAUSE_MAX];
        if (len >= sizeof clause)
            return RP_ERROR(RP_ERR_INVALID,
                            "%s: a fault of %zu characters (at most %zu): '%.60s...'", origin, len,
                            sizeof clause - 1, p);
        trimmed(p, len, clause, sizeof clause);
        if (clause[0] && !strncmp(clause, "seed", 4) && !strchr(clause, ':')) {
            char key[RP_FAULT_CLAUSE_MAX], val[RP_FAULT_CLAUSE_MAX];
            const char *eq = strchr(clause, '=');
            trimmed(clause, eq ? (size_t)(eq - clause) : strlen(clause), key, sizeof key);
            trimmed(eq ? eq + 1 : "", eq ? strlen(eq + 1) : 0, val, sizeof val);
            uint64_t seed;
            if (strcmp(key, "seed") != 0 || !eq)
                return clause_error(origin, clause, "'%s' is neither seed=N nor a fault", clause);
            if (seeded) return clause_error(origin, clause, "seed is given twice");
            if (!parse_uint(val, UINT64_MAX, &seed))
                return clause_error(origin, clause, "seed '%s' is not a whole number >= 0", val);
            out->seed = seed;
            seeded = true;
        } else if (clause[0]) {
            if (out->n == RP_FAULT_MAX_CLAUSES)
                return RP_ERROR(RP_ERR_INVALID, "%s: more than %d faults", origin,
                                RP_FAULT_MAX_CLAUSES);
            RP_CHECK(parse_clause(origin, clause, &out->f[out->n]));
            out->n++;
        }
        if (!end) break;
        p = end + 1;
    }
    return RP_OK;
}

/* The generator's four words at (seed, clause k, worker, call): [0] the draw, [1..2] a data bit. */
static void draw(const fault_schedule *s, int k, int worker, uint64_t call, uint32_t out[4])
{
    rp_rng g = rp_rng_make(s->seed, (uint64_t)(uint32_t)k << 32 | (uint32_t)worker);
    rp_philox(g.key, call, out);
}

bool fault_fires(const fault_schedule *s, int k, int worker, uint64_t call, uint64_t run,
                 uint64_t in_run)
{
    const fault_clause *f = &s->f[k];
    if (f->worker >= 0 && f->worker != worker) return false;
    if (f->run >= 0) {
        if (run != (uint64_t)f->run) return false;
        /* At the run's call (its first if none is named), or anywhere in it in the random form. */
        if (f->p == 0 && in_run != (uint64_t)(f->call >= 0 ? f->call : 0)) return false;
    } else if (f->call >= 0 && call != (uint64_t)f->call) {
        return false;
    }
    if (f->p == 0) return true;
    uint32_t w[4];
    draw(s, k, worker, call, w);
    return (double)w[0] < f->p * 4294967296.0;
}

/* ---- the process's schedule -------------------------------------------------------------- */

static void load_env(void)
{
    const char *spec = rp_env_get()->faults;
    if (!spec || !*spec) {
        __atomic_store_n(&fault_armed, 0, __ATOMIC_RELEASE);
        return;
    }
    /* An invalid $RP_FAULTS fails every call with its error rather than being ignored. */
    if (fault_parse(spec, "RP_FAULTS", &sched) != RP_OK)
        snprintf(sched_error, sizeof sched_error, "%s", rp_last_error());
    else if (sched.n > 0)
        rp_log(RP_LOG_WARN, "fault injection on: RP_FAULTS=\"%s\" (docs/faults.md)", spec);
    __atomic_store_n(&fault_armed, sched_error[0] || sched.n > 0 ? 1 : 0, __ATOMIC_RELEASE);
}

static void ensure_loaded(void)
{
    if (__atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE) < 0) pthread_once(&env_once, load_env);
}

rp_status rp_comm_faults_set(const char *spec, const char *origin)
{
    pthread_once(&env_once, load_env);
    fault_schedule s;
    RP_CHECK(fault_parse(spec, origin ? origin : "rp_comm_faults_set", &s));
    pthread_mutex_lock(&mu);
    __atomic_store_n(&fault_armed, 0, __ATOMIC_RELEASE);
    sched = s;
    sched_error[0] = '\0';
    injected = 0;
    nevents = 0;
    __atomic_store_n(&ndead, 0, __ATOMIC_RELEASE);
    if (s.n > 0) __atomic_store_n(&fault_armed, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
    if (s.n > 0)
        rp_log(RP_LOG_WARN, "fault injection on: %s \"%s\" (docs/faults.md)", s.origin, spec);
    return RP_OK;
}

rp_status rp_comm_faults_check(int workers, const char *noun)
{
    ensure_loaded();
    if (!noun) noun = "worker";
    pthread_mutex_lock(&mu);
    rp_status status = RP_OK;
    for (int k = 0; k < sched.n && !sched_error[0] && status == RP_OK; k++) {
        const fault_clause *f = &sched.f[k];
        if (f->worker < workers) continue; /* (any is -1) */
        char ids[32] = "0";
        if (workers > 1) snprintf(ids, sizeof ids, "0 to %d", workers - 1);
        status = RP_ERROR(RP_ERR_INVALID,
                          "%s: fault '%s' is aimed at %s %d, but the job has %d %s%s (%s), so it "
                          "would never fire (see docs/faults.md)",
                          sched.origin, f->text, noun, f->worker, workers, noun,
                          workers == 1 ? "" : "s", ids);
    }
    pthread_mutex_unlock(&mu);
    return status;
}

uint64_t rp_comm_faults_injected(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = injected;
    pthread_mutex_unlock(&mu);
    return n;
}

int fault_events(fault_event *out, int max)
{
    pthread_mutex_lock(&mu);
    uint64_t first = nevents > RP_FAULT_EVENTS ? nevents - RP_FAULT_EVENTS : 0;
    int n = 0;
    for (uint64_t i = first; i < nevents && n < max; i++)
        out[n++] = events[i % RP_FAULT_EVENTS];
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- applying it ------------------------------------------------------------------------- */

static int worker_of(const rp_comm *comm)
{
    return comm->ids[comm->rank];
}

/* A call as messages name it, written only when one needs it (a fault fired, or a dead worker). */
typedef struct call_text {
    const comm_coll_desc *coll; /* a collective, or */
    const comm_p2p_desc *msg;   /* a message post */
    char buf[160];
} call_text;

/*
 * "all_reduce #2 (count 8, f32, max)", "the runtime's report all-gather (all_gather, count 6,
 * i64)", "send (tag 7, count 5, f32) to 1": as comm.c's messages name calls, written here from the
 * fields (dtype.c's names, the flight recorder's kinds) so that comm.c and this file do not call
 * each other.
 */
static const char *describe(call_text *t)
{
    if (t->buf[0]) return t->buf;
    char args[96] = "";
    if (t->msg) {
        const comm_p2p_desc *d = t->msg;
        if (d->tag == RP_ANY_TAG)
            snprintf(args, sizeof args, "any tag");
        else
            snprintf(args, sizeof args, "tag %d", d->tag);
        snprintf(t->buf, sizeof t->buf, "%s (%s, count %lld, %s) %s %d", d->send ? "send" : "recv",
                 args, (long long)d->count, rp_dtype_name((rp_dtype)d->dtype),
                 d->send ? "to" : "from", d->peer);
        return t->buf;
    }
    const comm_coll_desc *d = t->coll;
    const char *kind = rp_flight_kind_name((rp_flight_kind)d->kind);
    if (d->kind != RP_COLL_BARRIER) {
        int n = snprintf(args, sizeof args, "count %lld, %s", (long long)d->count,
                         rp_dtype_name((rp_dtype)d->dtype));
        if (n > 0 && (size_t)n < sizeof args && d->kind == RP_COLL_BROADCAST)
            snprintf(args + n, sizeof args - (size_t)n, ", root %d", d->root);
        else if (n > 0 && (size_t)n < sizeof args && d->kind != RP_COLL_ALL_GATHER)
            snprintf(args + n, sizeof args - (size_t)n, ", %s",
                     rp_reduce_op_name((rp_reduce_op)d->op));
    }
    if (d->internal)
        snprintf(t->buf, sizeof t->buf, "%s (%s%s%s)", d->what[0] ? d->what : "an internal call",
                 kind, args[0] ? ", " : "", args);
    else
        snprintf(t->buf, sizeof t->buf, "%s #%llu%s%s%s", kind, (unsigned long long)d->user_seq,
                 args[0] ? " (" : "", args, args[0] ? ")" : "");
    return t->buf;
}

bool fault_dead(const rp_comm *comm)
{
    if (__atomic_load_n(&ndead, __ATOMIC_ACQUIRE) == 0 || comm->fault_exempt) return false;
    int id = worker_of(comm);
    pthread_mutex_lock(&mu);
    bool found = false;
    for (int i = 0; i < ndead && !found; i++)
        found = dead[i] == id;
    pthread_mutex_unlock(&mu);
    return found;
}

static void record(const fault_clause *f, int k, int worker, uint64_t call, uint64_t run,
                   uint64_t in_run)
{
    pthread_mutex_lock(&mu);
    injected++;
    events[nevents++ % RP_FAULT_EVENTS] = (fault_event){
        .kind = f->kind, .clause = k, .worker = worker, .call = call, .run = run, .in_run = in_run};
    pthread_mutex_unlock(&mu);
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A worker of a communicator that spans processes dies as a process would: at once, by SIGKILL. */
static void die(void)
{
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL);
    _exit(128 + SIGKILL);
}

/*
 * A call of a worker the schedule killed (threads backend): it never
 * arrives. The thread waits, as a dead one would, until its peers' timeout
 * (or another failure) breaks the communicator; should nobody be waiting
 * for it, it breaks the communicator itself after twice the timeout, so
 * that nothing hangs. Then the call fails, saying so.
 */
static rp_status dead_call(rp_comm *comm, call_text *call)
{
    /* The name of the backend, not a table slot: read only once a worker is dead. */
    if (strcmp(comm->ops->name, "threads") != 0) die();
    int id = worker_of(comm);
    double start = rp_now_s(), limit = 2 * comm->timeout + 1;
    while (!comm->ops->broken(comm)) {
        if (rp_now_s() - start > limit) {
            char reason[600];
            snprintf(reason, sizeof reason,
                     "%s %d was killed by an injected fault (%s) and no peer noticed within "
                     "%g s",
                     comm_noun(comm), id, sched.origin, limit);
            comm->ops->fail(comm, RP_ERR_COMM, reason);
            break;
        }
        sleep_ms(2);
    }
    return RP_ERROR(RP_ERR_COMM,
                    "%s on %s %d: the %s is dead, killed by an injected fault (%s); its "
                    "calls never reach its peers",
                    describe(call), comm_noun(comm), id, comm_noun(comm), sched.origin);
}

/* What the schedule does at one call, gathered before any of it is applied. */
typedef struct due {
    int64_t delay_ms;
    int kill, header, data; /* the clause (+ 1) of each, 0: none */
} due;

/* The failure of every call while $RP_FAULTS is invalid: this member's and, at once, its peers'. */
static rp_status invalid_schedule(rp_comm *comm)
{
    comm->ops->fail(comm, RP_ERR_INVALID, sched_error);
    return rp_error_set(RP_ERR_INVALID, NULL, 0, "%s", sched_error); /* (already has its place) */
}

/*
 * Counts the call and finds the faults due at it: each one that fires is
 * logged and recorded here, so that whatever follows - even the end of the
 * process - comes after its line.
 */
static due find_due(rp_comm *comm, call_text *call)
{
    bool message = call->msg != NULL;
    due du = {0};
    uint64_t n = comm->fault_calls++, run = comm->fault_runs, in_run = n - comm->fault_run_start;
    int worker = worker_of(comm);
    for (int k = 0; k < sched.n; k++) {
        const fault_clause *f = &sched.f[k];
        if (!fault_fires(&sched, k, worker, n, run, in_run)) continue;
        if (message && f->kind == RP_FAULT_CORRUPT && f->data) {
            rp_log(RP_LOG_WARN,
                   "fault not injected: worker %d's call %llu is a message, and only a "
                   "collective's result is corrupted (%s '%s')",
                   worker, (unsigned long long)n, sched.origin, f->text);
            continue;
        }
        char what[96];
        switch (f->kind) {
        case RP_FAULT_DELAY:
            snprintf(what, sizeof what, "delay %lld ms of", (long long)f->ms);
            du.delay_ms += f->ms;
            break;
        case RP_FAULT_KILL:
            snprintf(what, sizeof what, "kill");
            if (!du.kill) du.kill = k + 1;
            break;
        case RP_FAULT_CORRUPT:
            snprintf(what, sizeof what, "corrupt the %s of", f->data ? "data" : "header");
            if (f->data && !du.data) du.data = k + 1;
            if (!f->data && !du.header) du.header = k + 1;
            break;
        }
        rp_log(RP_LOG_WARN,
               "fault injected: %s worker %d at call %llu (run %llu, call %llu of the run): %s (%s "
               "'%s')",
               what, worker, (unsigned long long)n, (unsigned long long)run,
               (unsigned long long)in_run, describe(call), sched.origin, f->text);
        record(f, k, worker, n, run, in_run);
    }
    return du;
}

/* Applies a kill: this worker's calls stop (threads), or its process ends (MPI: dead_call). */
static rp_status kill_worker(rp_comm *comm, call_text *call)
{
    pthread_mutex_lock(&mu);
    if (ndead < MAX_DEAD) {
        dead[ndead] = worker_of(comm);
        __atomic_store_n(&ndead, ndead + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    return dead_call(comm, call);
}

/* Bytes of a collective's result on this member (recv), which a data fault flips a bit of. */
static size_t result_bytes(const rp_comm *comm, const comm_coll_desc *d)
{
    size_t bytes = (size_t)d->count * rp_dtype_size((rp_dtype)d->dtype);
    switch (d->kind) {
    case RP_COLL_BARRIER:
        return 0;
    case RP_COLL_ALL_GATHER:
        return bytes * (size_t)comm->size;
    case RP_COLL_REDUCE_SCATTER: {
        int64_t at, mine;
        comm_scatter_block(d, comm->rank, &at, &mine);
        return (size_t)mine * rp_dtype_size((rp_dtype)d->dtype);
    }
    default:
        return bytes;
    }
}

rp_status fault_collective(rp_comm *comm, const comm_coll_desc *d, const void *send, void *recv)
{
    ensure_loaded();
    if (!__atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE) || comm->fault_exempt)
        return comm->ops->collective(comm, d, send, recv);
    if (sched_error[0]) return invalid_schedule(comm);
    call_text call = {.coll = d};
    if (fault_dead(comm)) return dead_call(comm, &call);
    due du = find_due(comm, &call);
    if (du.delay_ms > 0) sleep_ms(du.delay_ms);
    if (du.kill) return kill_worker(comm, &call);
    comm_coll_desc bad = *d;
    if (du.header) {
        /* A header the peers can compare but the backend can still act on safely: one element
           fewer (never more memory than the caller's buffers), or another dtype for none. */
        if (bad.count > 0)
            bad.count--;
        else
            bad.dtype = bad.dtype == RP_F32 ? RP_F64 : RP_F32;
    }
    rp_status status = comm->ops->collective(comm, &bad, send, recv);
    size_t bytes = result_bytes(comm, d);
    if (du.data && status == RP_OK && bytes > 0) {
        uint32_t w[4];
        draw(&sched, du.data - 1, worker_of(comm), comm->fault_calls - 1, w);
        size_t byte = w[1] % bytes;
        int bit = (int)(w[2] % 8);
        ((unsigned char *)recv)[byte] ^= (unsigned char)(1u << bit);
        rp_log(RP_LOG_WARN, "fault injected: bit %d of byte %zu of worker %d's result flipped (%s)",
               bit, byte, worker_of(comm), describe(&call));
    }
    return status;
}

rp_status fault_post(rp_comm *comm, const comm_p2p_desc *d, void *buf, rp_comm_request **req)
{
    ensure_loaded();
    if (!__atomic_load_n(&fault_armed, __ATOMIC_ACQUIRE) || comm->fault_exempt)
        return d->send ? comm->ops->isend(comm, d, buf, req) : comm->ops->irecv(comm, d, buf, req);
    if (sched_error[0]) return invalid_schedule(comm);
    call_text call = {.msg = d};
    if (fault_dead(comm)) return dead_call(comm, &call);
    due du = find_due(comm, &call);
    if (du.delay_ms > 0) sleep_ms(du.delay_ms);
    if (du.kill) return kill_worker(comm, &call);
    comm_p2p_desc bad = *d;
    if (du.header) {
        if (bad.count > 0)
            bad.count--;
        else
            bad.dtype = bad.dtype == RP_F32 ? RP_F64 : RP_F32;
    }
    return bad.send ? comm->ops->isend(comm, &bad, buf, req)
                    : comm->ops->irecv(comm, &bad, buf, req);
}

void fault_rejoin(rp_comm *comm)
{
    ensure_loaded();
    comm->fault_runs++;
    comm->fault_run_start = comm->fault_calls;
}
