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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "replicator/ps.h"
#include "replicator/replicator_internal.h"

rp_config rp_config_default(void)
{
    rp_config c;
    memset(&c, 0, sizeof c);
    c.replicas = 1;
    c.bucket_bytes = 1 << 20;
    c.checksum_every = 100;
    c.ps = 1;
    c.staleness = -1;
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
    bool mpi = strcmp(rp_comm_backend(r->reps[0].comm), "threads") != 0;
    int ranks_here = mpi && !rp_cpu_bound() ? rp_env_get()->mpi_local_ranks : 1;
    int t = rp_cpu_count() / (r->n * ranks_here);
    return t > 0 ? t : 1;
}

static rp_status parse_int(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi)
        return RP_ERROR(RP_ERR_INVALID, "%s %s: expected an integer in [%ld, %ld]", opt,
                        v ? v : "(missing)", lo, hi);
    *out = x;
    return RP_OK;
}

rp_status rp_config_from_args(rp_config *cfg, int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        long x = 0;
        if (!strcmp(a, "--backend")) {
            if (v && !strcmp(v, "threads")) cfg->backend = RP_BACKEND_THREADS;
            else if (v && !strcmp(v, "mpi")) cfg->backend = RP_BACKEND_MPI;
            else if (v && !strcmp(v, "auto")) cfg->backend = RP_BACKEND_AUTO;
            else return RP_ERROR(RP_ERR_INVALID, "--backend %s: expected threads, mpi or auto", v ? v : "(missing)");
        } else if (!strcmp(a, "--regime")) {
            if (v && !strcmp(v, "sync")) cfg->regime = RP_REGIME_SYNC;
            else if (v && !strcmp(v, "async")) cfg->regime = RP_REGIME_ASYNC;
            else return RP_ERROR(RP_ERR_INVALID, "--regime %s: expected sync or async", v ? v : "(missing)");
        } else if (!strcmp(a, "--ps")) {
            RP_CHECK(parse_int(a, v, 1, 256, &x));
            cfg->ps = (int)x;
        } else if (!strcmp(a, "--staleness")) {
            RP_CHECK(parse_int(a, v, -1, 1L << 30, &x));
            cfg->staleness = (int)x;
        } else if (!strcmp(a, "--replicas")) {
            RP_CHECK(parse_int(a, v, 1, 4096, &x));
            cfg->replicas = (int)x;
        } else if (!strcmp(a, "--threads-per-replica")) {
            RP_CHECK(parse_int(a, v, 1, 1024, &x));
            cfg->threads_per_replica = (int)x;
        } else if (!strcmp(a, "--seed")) {
            RP_CHECK(parse_int(a, v, 0, 0x7fffffffL, &x));
            cfg->seed = (uint64_t)x;
        } else if (!strcmp(a, "--comm-timeout")) {
            char *end;
            double s = v ? strtod(v, &end) : 0;
            if (!v || *end || !(s > 0))
                return RP_ERROR(RP_ERR_INVALID, "--comm-timeout %s: expected seconds > 0", v ? v : "(missing)");
            cfg->timeout_s = s;
        } else if (!strcmp(a, "--bucket-kb")) {
            RP_CHECK(parse_int(a, v, 1, 1L << 30, &x));
            cfg->bucket_bytes = (size_t)x << 10;
        } else if (!strcmp(a, "--checksum-every")) {
            RP_CHECK(parse_int(a, v, 0, 1L << 30, &x));
            cfg->checksum_every = (int)x;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        i++;
    }
    *argc = out;
    argv[out] = NULL;
    return RP_OK;
}

/* ---- running a function on every replica ------------------------------------------ */

/* All replicas' reports, checked and reduced in replica order into rep->r->results. */
static rp_status reduce_reports(rp_replica *rep)
{
    rp_replicator *r = rep->r;
    int n = rep->count, k = rep->nreports;
    bool keeper = rep->local == 0; /* the results are kept by this process's first replica */
    if (n == 1) {
        memcpy(r->results, rep->reports, sizeof(rp_report) * (size_t)k);
        r->nresults = k;
        return RP_OK;
    }
    /* After a collective error nothing can be reduced; a run that reports nothing (a clean-up) still succeeds. */
    if (k == 0 && rp_comm_broken(rep->comm)) return RP_OK;
    int64_t mine = k, *all = rep->gather;
    RP_CHECK(rp_all_gather(rep, &mine, all, 1, RP_I64));
    for (int q = 1; q < n; q++)
        if (all[q] != all[0])
            return RP_ERROR(RP_ERR_MISMATCH, "report mismatch: replica 0 reported %lld values in "
                            "this run and replica %d %lld; every replica must call "
                            "rp_replica_report() with the same names in the same order",
                            (long long)all[0], q, (long long)all[q]);
    if (k == 0) {
        if (keeper) r->nresults = 0;
        return RP_OK;
    }
    int64_t packed[2 * RP_REPORTS_MAX];
    for (int i = 0; i < k; i++) {
        packed[2 * i] = (int64_t)(rp_hash_str((uint64_t)rep->reports[i].op, rep->reports[i].name) >> 1);
        memcpy(&packed[2 * i + 1], &rep->reports[i].value, sizeof(double));
    }
    RP_CHECK(rp_all_gather(rep, packed, all, 2 * k, RP_I64));
    for (int i = 0; i < k; i++) {
        double acc = 0;
        for (int q = 0; q < n; q++) {
            const int64_t *e = all + (size_t)q * 2 * k + 2 * i;
            if (e[0] != all[2 * i])
                return RP_ERROR(RP_ERR_MISMATCH, "report mismatch: report %d of replica %d is not "
                                "the same name and op as replica 0's (this replica reported '%s', %s)",
                                i, q, rep->reports[i].name, rp_reduce_op_name(rep->reports[i].op));
            double v;
            memcpy(&v, &e[1], sizeof v);
            switch (rep->reports[i].op) {
            case RP_SUM:
            case RP_MEAN: acc = q ? acc + v : v; break;
            case RP_MAX: acc = q && acc >= v ? acc : v; break;
            case RP_MIN: acc = q && acc <= v ? acc : v; break;
            default: acc = q ? acc : v;
            }
        }
        if (rep->reports[i].op == RP_MEAN) acc /= n;
        if (keeper) {
            r->results[i] = rep->reports[i];
            r->results[i].value = acc;
        }
    }
    if (keeper) r->nresults = k;
    return RP_OK;
}

/* One replica's part of a run. */
static void run_one(rp_replica *rep, rp_replica_fn fn, void *arg, uint64_t generation)
{
    rp_tape_reset(rep->tape);
    rep->nreports = 0;
    rp_async_join(rep, generation);
    rp_error_clear();
    rp_status status = fn(rep, arg);
    rp_async_leave(rep);
    if (status == RP_OK) status = reduce_reports(rep);
    rep->status = status;
    if (status != RP_OK) {
        const char *msg = rp_last_error();
        snprintf(rep->error, sizeof rep->error, "%s", *msg ? msg : "the function returned an error without a message");
    }
    rp_comm_leave(rep->comm, status, status == RP_OK ? "it returned" : rep->error);
}

static void *worker_main(void *p)
{
    rp_replica *rep = p;
    rp_replicator *r = rep->r;
    rp_log_set_replica(rep->id);
    rp_kernels_set_threads(threads_per_replica(r));
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->generation == seen && !r->quit) pthread_cond_wait(&r->start, &r->mu);
        if (r->quit) break;
        seen = r->generation;
        rp_replica_fn fn = r->fn;
        void *arg = r->arg;
        pthread_mutex_unlock(&r->mu);
        run_one(rep, fn, arg, seen);
        pthread_mutex_lock(&r->mu);
        if (++r->finished == r->n - 1) pthread_cond_signal(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

rp_status rp_replicator_run(rp_replicator *r, rp_replica_fn fn, void *arg)
{
    if (!r || !fn) return RP_ERROR(RP_ERR_INVALID, "replicator or function is NULL");
    if (r->server)
        return RP_ERROR(RP_ERR_INVALID, "this process is a parameter server (one of the last %d ranks), "
                        "not a replica: call rp_replicator_serve()", r->cfg.ps);
    for (int i = 0; i < r->n; i++) rp_comm_rejoin(r->reps[i].comm);
    r->claims = 0;
    pthread_mutex_lock(&r->mu);
    r->fn = fn;
    r->arg = arg;
    r->finished = 0;
    r->generation++;
    pthread_cond_broadcast(&r->start);
    pthread_mutex_unlock(&r->mu);

    /* Local replica 0 on this thread, with the replica's log prefix and team size; a run that
       succeeds leaves the caller's last error as it was. */
    rp_status saved_status = rp_last_status();
    char saved_error[1024];
    snprintf(saved_error, sizeof saved_error, "%s", rp_last_error());
    int saved_threads = rp_kernels_get_threads();
    rp_log_set_replica(r->reps[0].id);
    rp_kernels_set_threads(threads_per_replica(r));
    run_one(&r->reps[0], fn, arg, r->generation);
    rp_kernels_set_threads(saved_threads);
    rp_log_set_replica(-1);

    pthread_mutex_lock(&r->mu);
    while (r->finished < r->n - 1) pthread_cond_wait(&r->done, &r->mu);
    pthread_mutex_unlock(&r->mu);

    /* The error that started it: a replica's own failure before a peer's "replica k failed". */
    const rp_replica *cause = NULL;
    for (int i = 0; i < r->n; i++) {
        const rp_replica *rep = &r->reps[i];
        if (rep->status == RP_OK) continue;
        if (!cause || (cause->status == RP_ERR_COMM && rep->status != RP_ERR_COMM)) cause = rep;
    }
    if (!cause) {
        if (saved_status != RP_OK) rp_error_set(saved_status, NULL, 0, "%s", saved_error);
        else rp_error_clear();
        return RP_OK;
    }
    if (cause->count == 1) return rp_error_set(cause->status, NULL, 0, "%s", cause->error);
    return rp_error_set(cause->status, NULL, 0, "replica %d: %s", cause->id, cause->error);
}

/* ---- create / destroy ----------------------------------------------------------------- */

void rp_replicator_destroy(rp_replicator *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_broadcast(&r->start);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        if (rep->thread_started) pthread_join(rep->thread, NULL);
    }
    for (int k = 0; k < RP_ASYNC_SETS_MAX; k++) {
        for (int i = 0; r->ps_sets[k] && i < r->n; i++) rp_ps_destroy(r->ps_sets[k][i]);
        free(r->ps_sets[k]);
    }
    /* The servers stop once every replica's process has said goodbye. */
    rp_ps_group_destroy(r->ps_group);
    for (int i = 0; i < r->n; i++) {
        rp_replica *rep = &r->reps[i];
        rp_tape_destroy(rep->tape);
        rp_comm_destroy(rep->comm);
        free(rep->gather);
        free(rep->bn_scratch);
    }
    pthread_cond_destroy(&r->done);
    pthread_cond_destroy(&r->start);
    pthread_mutex_destroy(&r->mu);
    free(r->reps);
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
        return RP_ERROR(RP_ERR_INVALID, "timeout_s = %g: must be >= 0 (0: the default)", c->timeout_s);
    if (c->bucket_bytes < 4)
        return RP_ERROR(RP_ERR_INVALID, "bucket_bytes = %zu: must be at least one float", c->bucket_bytes);
    if (c->checksum_every < 0)
        return RP_ERROR(RP_ERR_INVALID, "checksum_every = %d: must be >= 0", c->checksum_every);
    if ((unsigned)c->regime > RP_REGIME_ASYNC)
        return RP_ERROR(RP_ERR_INVALID, "regime = %d: not an rp_regime", (int)c->regime);
    if (c->regime == RP_REGIME_ASYNC && (c->ps < 1 || c->ps > 256))
        return RP_ERROR(RP_ERR_INVALID, "ps = %d parameter servers: must be in [1, 256]", c->ps);
    if (c->staleness < -1)
        return RP_ERROR(RP_ERR_INVALID, "staleness = %d: must be >= 0, or -1 for unbounded", c->staleness);
    return RP_OK;
}

rp_status rp_replicator_create(rp_replicator **out, const rp_config *cfg)
{
    if (!out || !cfg) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    *out = NULL;
    RP_CHECK(check_config(cfg));
    rp_status status = RP_OK;
    bool mpi = cfg->backend == RP_BACKEND_MPI || (cfg->backend == RP_BACKEND_AUTO && rp_comm_mpi_launched());
    int n = cfg->replicas; /* in this process: under MPI, on each rank */
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
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->start, NULL);
    pthread_cond_init(&r->done, NULL);
    r->reps = calloc((size_t)n, sizeof *r->reps);
    if (!r->reps) {
        status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate %d replicas", n);
        goto cleanup;
    }
    if (mpi && cfg->regime == RP_REGIME_ASYNC && n > 1) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED, "asynchronous training under MPI runs one replica per rank "
                          "(asked for %d in each): start more ranks instead", n);
        goto cleanup;
    } else if (mpi && cfg->regime == RP_REGIME_ASYNC) {
        /* The last cfg.ps ranks serve; the others are the replicas, with a communicator of their own. */
        RP_TRY(rp_ps_mpi_group_create(&r->ps_group, cfg->ps, r->cfg.timeout_s));
        r->server = rp_ps_group_is_server(r->ps_group);
        rp_comm *world = NULL;
        RP_TRY(rp_comm_mpi_create(&world, r->cfg.timeout_s));
        status = rp_comm_split(world, r->server ? 1 : 0, rp_comm_rank(world), &comms[0]);
        rp_comm_destroy(world);
        if (status != RP_OK) goto cleanup;
    } else if (mpi && n == 1) {
        RP_TRY(rp_comm_mpi_create(&comms[0], r->cfg.timeout_s));
    } else if (mpi) {
        RP_TRY(rp_comm_hier_create(comms, n, r->cfg.timeout_s));
    } else {
        RP_TRY(rp_comm_threads_create(comms, n, NULL, r->cfg.timeout_s));
    }
    for (int i = 0; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        rep->r = r;
        rep->local = i;
        rep->id = rp_comm_rank(comms[i]);
        rep->count = rp_comm_size(comms[i]);
        rep->comm = comms[i];
        comms[i] = NULL;
        rep->gather = malloc((size_t)rep->count * 2 * RP_REPORTS_MAX * sizeof(int64_t));
        if (!rep->gather) {
            status = RP_ERROR(RP_ERR_NOMEM, "cannot allocate replica %d", i);
            goto cleanup;
        }
        RP_TRY(rp_tape_create(&rep->tape, cfg->arena_bytes));
        if (rep->count > 1) rp_tape_on_grad_ready(rep->tape, rp_sync_on_grad_ready, rep);
    }
    for (int i = 1; i < n; i++) {
        rp_replica *rep = &r->reps[i];
        int rc = pthread_create(&rep->thread, NULL, worker_main, rep);
        if (rc != 0) {
            status = RP_ERROR(RP_ERR_BACKEND, "cannot start the thread of replica %d: %s", i, strerror(rc));
            goto cleanup;
        }
        rep->thread_started = true;
    }
    rp_debug("replicator: %d replicas (%d here) x %d threads, %s backend, timeout %gs", r->reps[0].count,
             n, threads_per_replica(r), rp_comm_backend(r->reps[0].comm), r->cfg.timeout_s);
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

int rp_replicator_replicas(const rp_replicator *r) { return r->reps[0].count; }
bool rp_replicator_is_server(const rp_replicator *r) { return r->server; }

rp_status rp_replicator_serve(rp_replicator *r)
{
    if (!r || !r->server) return RP_ERROR(RP_ERR_INVALID, "rp_replicator_serve on a replica's process");
    return rp_ps_mpi_serve(r->ps_group);
}
int rp_replicator_local_replicas(const rp_replicator *r) { return r->n; }
int rp_replicator_threads_per_replica(const rp_replicator *r) { return threads_per_replica(r); }
const char *rp_replicator_backend(const rp_replicator *r) { return rp_comm_backend(r->reps[0].comm); }
int rp_replica_local_index(const rp_replica *rep) { return rep->local; }

rp_replica *rp_replicator_replica(rp_replicator *r, int i)
{
    return r && i >= 0 && i < r->n ? &r->reps[i] : NULL;
}

rp_status rp_replicator_result(const rp_replicator *r, const char *name, double *value)
{
    for (int i = 0; r && name && i < r->nresults; i++)
        if (!strcmp(r->results[i].name, name)) {
            *value = r->results[i].value;
            return RP_OK;
        }
    return RP_ERROR(RP_ERR_INVALID, "no value named '%s' was reported in the last run", name ? name : "(null)");
}

int rp_replica_id(const rp_replica *rep) { return rep->id; }
int rp_replica_count(const rp_replica *rep) { return rep->count; }
uint64_t rp_replica_seed(const rp_replica *rep) { return rep->r->cfg.seed; }
rp_tape *rp_replica_tape(rp_replica *rep) { return rep->tape; }
rp_comm *rp_replica_comm(rp_replica *rep) { return rep->comm; }
void *rp_replica_user(const rp_replica *rep) { return rep->user; }
void rp_replica_set_user(rp_replica *rep, void *user) { rep->user = user; }

rp_status rp_replica_input_context(const rp_replica *rep, int global_batch, rp_input_context *ctx)
{
    if (global_batch < 1 || global_batch % rep->count != 0)
        return RP_ERROR(RP_ERR_INVALID, "global batch %d does not split across %d replicas: it "
                        "must be a positive multiple of the replica count", global_batch, rep->count);
    ctx->replica = ctx->pipeline = rep->id;
    ctx->replicas = ctx->pipelines = rep->count;
    ctx->global_batch = global_batch;
    ctx->per_replica_batch = global_batch / rep->count;
    return RP_OK;
}

rp_status rp_replica_report(rp_replica *rep, const char *name, double value, rp_reduce_op op)
{
    if (!rep || !name) return RP_ERROR(RP_ERR_INVALID, "NULL argument");
    if (strlen(name) >= sizeof rep->reports[0].name)
        return RP_ERROR(RP_ERR_INVALID, "report name '%s' is longer than %zu characters", name,
                        sizeof rep->reports[0].name - 1);
    if ((unsigned)op > RP_FIRST) return RP_ERROR(RP_ERR_INVALID, "report '%s': unknown op %d", name, (int)op);
    if (rep->nreports == RP_REPORTS_MAX)
        return RP_ERROR(RP_ERR_INVALID, "report '%s': at most %d reports per run", name, RP_REPORTS_MAX);
    rp_report *e = &rep->reports[rep->nreports++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->op = (int)op;
    e->value = value;
    return RP_OK;
}

/* ---- the primitives ---------------------------------------------------------------------- */

rp_status rp_all_reduce(rp_replica *rep, const void *send, void *recv, int64_t count, rp_dtype dtype,
                        rp_reduce_op op)
{
    return rp_comm_all_reduce(rep ? rep->comm : NULL, send, recv, count, dtype, op);
}

rp_status rp_reduce_scatter(rp_replica *rep, const void *send, void *recv, int64_t count,
                            rp_dtype dtype, rp_reduce_op op)
{
    return rp_comm_reduce_scatter(rep ? rep->comm : NULL, send, recv, count, dtype, op);
}

rp_status rp_all_gather(rp_replica *rep, const void *send, void *recv, int64_t count, rp_dtype dtype)
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
