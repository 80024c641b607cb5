/*
 * topology_check.h - checks of the runtime's topology that run inside the
 * workers, shared by test_topology.c (threads) and test_topology_mpi.c (MPI
 * ranks, ranks x threads). Each returns an rp_status whose message says what
 * differed; the test asserts on the run's status.
 *
 * mesh_fn: a role "replica" of D members x M model workers; every worker
 * checks its coordinates, its replica id, and the members and order of its
 * data, model, pipe, role and world communicators (an all-gather of worker
 * indices on each), and its input context.
 *
 * mesh_train_fn: the sync strategy on that mesh: values initialised from the
 * worker's own seed are broadcast over the data axis only, and a step with
 * different data per replica leaves the workers of one model coordinate
 * identical and the model coordinates apart (each is its own shard).
 *
 * roles_fn: learners, actors and a server started as long-lived functions
 * exchange ROUNDS of messages over the world (an all-gather naming each
 * worker's role, index and round), the learners all-reduce among themselves
 * on their role communicator, and (p2p) each actor sends the server a
 * point-to-point message.
 */
#ifndef RP_TOPOLOGY_CHECK_H
#define RP_TOPOLOGY_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

#define TC_MAX_WORKERS 16
#define TC_ROUNDS      5

/* The workers of `c` in rank order must be want[0..n). */
static rp_status tc_members(rp_comm *c, const char *what, int worker, const int *want, int n)
{
    if (!c) return RP_ERROR(RP_ERR_INVALID, "worker %d: no %s communicator", worker, what);
    if (rp_comm_size(c) != n)
        return RP_ERROR(RP_ERR_INVALID,
                        "worker %d: its %s communicator has %d members, expected %d", worker, what,
                        rp_comm_size(c), n);
    int64_t mine = worker, all[TC_MAX_WORKERS];
    RP_CHECK(rp_comm_all_gather(c, &mine, all, 1, RP_I64));
    for (int k = 0; k < n; k++)
        if (all[k] != want[k])
            return RP_ERROR(RP_ERR_INVALID,
                            "worker %d: rank %d of its %s communicator is worker %lld, "
                            "expected %d",
                            worker, k, what, (long long)all[k], want[k]);
    for (int k = 0; k < n; k++)
        if (want[k] == worker && rp_comm_rank(c) != k)
            return RP_ERROR(RP_ERR_INVALID,
                            "worker %d: rank %d in its %s communicator, expected %d", worker,
                            rp_comm_rank(c), what, k);
    return RP_OK;
}

typedef struct tc_mesh {
    int data, model;             /* the mesh */
    int checked[TC_MAX_WORKERS]; /* by worker: 1 once its checks passed (this process's workers) */
} tc_mesh;

static rp_status mesh_fn(rp_replica *rep, void *arg)
{
    tc_mesh *m = arg;
    int w = rp_replica_worker(rep), D = m->data, M = m->model, d = w / M, k = w % M;
    if (rp_replica_workers(rep) != D * M)
        return RP_ERROR(RP_ERR_INVALID, "worker %d: %d workers in the job, expected %d", w,
                        rp_replica_workers(rep), D * M);
    if (strcmp(rp_replica_role(rep), "replica") != 0)
        return RP_ERROR(RP_ERR_INVALID, "worker %d: role '%s'", w, rp_replica_role(rep));
    if (rp_replica_coord(rep, RP_AXIS_DATA) != d || rp_replica_coord(rep, RP_AXIS_MODEL) != k ||
        rp_replica_coord(rep, RP_AXIS_PIPE) != 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "worker %d: coordinates (data %d, model %d, pipe %d), expected (%d, %d, 0)",
                        w, rp_replica_coord(rep, RP_AXIS_DATA),
                        rp_replica_coord(rep, RP_AXIS_MODEL), rp_replica_coord(rep, RP_AXIS_PIPE),
                        d, k);
    if (rp_replica_axis_size(rep, RP_AXIS_DATA) != D ||
        rp_replica_axis_size(rep, RP_AXIS_MODEL) != M ||
        rp_replica_axis_size(rep, RP_AXIS_PIPE) != 1)
        return RP_ERROR(RP_ERR_INVALID, "worker %d: axis sizes %d x %d x %d", w,
                        rp_replica_axis_size(rep, RP_AXIS_DATA),
                        rp_replica_axis_size(rep, RP_AXIS_MODEL),
                        rp_replica_axis_size(rep, RP_AXIS_PIPE));
    if (rp_replica_id(rep) != d || rp_replica_count(rep) != D || rp_replica_in_sync(rep) != D)
        return RP_ERROR(RP_ERR_INVALID,
                        "worker %d: replica %d of %d (%d in sync), expected %d of %d", w,
                        rp_replica_id(rep), rp_replica_count(rep), rp_replica_in_sync(rep), d, D);
    if (rp_replica_comm(rep) != rp_replica_axis_comm(rep, RP_AXIS_DATA))
        return RP_ERROR(RP_ERR_INVALID, "worker %d: the replica communicator is not the data axis",
                        w);
    int want[TC_MAX_WORKERS];
    for (int q = 0; q < D; q++)
        want[q] = q * M + k;
    RP_CHECK(tc_members(rp_replica_axis_comm(rep, RP_AXIS_DATA), "data-axis", w, want, D));
    for (int q = 0; q < M; q++)
        want[q] = d * M + q;
    RP_CHECK(tc_members(rp_replica_axis_comm(rep, RP_AXIS_MODEL), "model-axis", w, want, M));
    want[0] = w;
    RP_CHECK(tc_members(rp_replica_axis_comm(rep, RP_AXIS_PIPE), "pipe-axis", w, want, 1));
    for (int q = 0; q < D * M; q++)
        want[q] = q;
    RP_CHECK(tc_members(rp_replica_role_comm(rep), "role", w, want, D * M));
    RP_CHECK(tc_members(rp_replica_world_comm(rep), "world", w, want, D * M));
    /* Every worker of one model group reads the same batch: its pipeline is its replica. */
    rp_input_context in;
    RP_CHECK(rp_replica_input_context(rep, 4 * D, &in));
    if (in.replica != d || in.pipeline != d || in.pipelines != D || in.per_replica_batch != 4)
        return RP_ERROR(RP_ERR_INVALID,
                        "worker %d: input context replica %d pipeline %d of %d, batch %d", w,
                        in.replica, in.pipeline, in.pipelines, in.per_replica_batch);
    m->checked[w] = 1;
    return RP_OK;
}

/* ---- sync training over the data axis ---------------------------------------------------- */

typedef struct tc_worker {
    rp_params *params;
    rp_linear_layer fc;
    rp_optimizer *opt;
} tc_worker;

typedef struct tc_train {
    tc_worker w[TC_MAX_WORKERS]; /* by local index */
    int step;
} tc_train;

static rp_status mesh_build_fn(rp_replica *rep, void *arg)
{
    tc_train *t = arg;
    tc_worker *s = &t->w[rp_replica_local_index(rep)];
    RP_CHECK(rp_params_create(&s->params));
    RP_CHECK(rp_linear_layer_init(&s->fc, s->params, "fc", 3, 2, true, false));
    /* Each worker its own values: the replica optimizer makes them its data-axis replica 0's. */
    RP_CHECK(rp_params_finalize(s->params, 100 + (uint64_t)rp_replica_worker(rep)));
    rp_optim_config oc = rp_optim_config_default();
    return rp_replica_optimizer_create(rep, &s->opt, s->params, &oc);
}

/* The hash of this worker's values, gathered on an axis: all equal (same = 1) or all different. */

static uint64_t tc_hash(const float *x, int64_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)x;
    for (int64_t i = 0; i < n * 4; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static rp_status tc_check_axis(rp_replica *rep, const tc_worker *s, rp_axis axis, int same)
{
    rp_comm *c = rp_replica_axis_comm(rep, axis);
    int n = rp_comm_size(c);
    /* The values are the kernel table's storage: hashed from a host copy (fc: 3 x 2 and 2). */
    float values[8];
    if (rp_params_numel(s->params) > 8) return RP_ERROR(RP_ERR_INVALID, "more values than 8");
    RP_CHECK(rp_params_read_values(s->params, values));
    int64_t mine = (int64_t)(tc_hash(values, rp_params_numel(s->params)) >> 1), all[TC_MAX_WORKERS];
    RP_CHECK(rp_comm_all_gather(c, &mine, all, 1, RP_I64));
    for (int q = 1; q < n; q++)
        if ((all[q] == all[0]) != same)
            return RP_ERROR(RP_ERR_INVALID, "worker %d: values on %s-axis rank %d %s rank 0's",
                            rp_replica_worker(rep), axis == RP_AXIS_DATA ? "data" : "model", q,
                            same ? "differ from" : "equal");
    return RP_OK;
}

static rp_status mesh_step_fn(rp_replica *rep, void *arg)
{
    tc_train *t = arg;
    tc_worker *s = &t->w[rp_replica_local_index(rep)];
    RP_CHECK(tc_check_axis(rep, s, RP_AXIS_DATA, 1));
    RP_CHECK(tc_check_axis(rep, s, RP_AXIS_MODEL, 0));
    rp_tape *tp = rp_replica_tape(rep);
    rp_tensor *x = rp_tensor_new(tp, 2, (int[]){2, 3});
    if (!x) return rp_last_status();
    /* Different data per replica; the same for the workers of one replica. */
    float xs[6];
    for (int i = 0; i < 6; i++)
        xs[i] = (float)((i + 1) * (rp_replica_id(rep) + 1)) * 0.1f;
    RP_CHECK(rp_tensor_write(x, xs, 6));
    int32_t y[2] = {0, 1};
    rp_tensor *loss = rp_softmax_cross_entropy(tp, rp_linear_layer_forward(tp, &s->fc, x), y);
    if (!loss) return rp_last_status();
    RP_CHECK(rp_backward(tp, loss));
    RP_CHECK(rp_optimizer_step(s->opt, 0.1f));
    RP_CHECK(tc_check_axis(rep, s, RP_AXIS_DATA, 1));
    return tc_check_axis(rep, s, RP_AXIS_MODEL, 0);
}

static rp_status mesh_teardown_fn(rp_replica *rep, void *arg)
{
    tc_train *t = arg;
    tc_worker *s = &t->w[rp_replica_local_index(rep)];
    rp_optimizer_destroy(s->opt);
    rp_params_destroy(s->params);
    memset(s, 0, sizeof *s);
    return RP_OK;
}

/* ---- roles: learners, actors, a server ---------------------------------------------------- */

typedef struct tc_roles {
    int learners, actors;       /* then one server */
    int p2p;                    /* actors also send the server a point-to-point message */
    int rounds[TC_MAX_WORKERS]; /* by worker: rounds completed (this process's workers) */
    int p2p_seen;               /* the server: actors heard from (bit per actor) */
} tc_roles;

static int tc_code(const char *role)
{
    return !strcmp(role, "learner")  ? 1
           : !strcmp(role, "actor")  ? 2
           : !strcmp(role, "server") ? 3
                                     : 0;
}

static int tc_role_of(const tc_roles *j, int worker)
{
    return worker < j->learners ? 1 : worker < j->learners + j->actors ? 2 : 3;
}

static rp_status roles_fn(rp_replica *rep, void *arg)
{
    tc_roles *j = arg;
    int w = rp_replica_worker(rep), W = rp_replica_workers(rep),
        code = tc_code(rp_replica_role(rep));
    if (code != tc_role_of(j, w))
        return RP_ERROR(RP_ERR_INVALID, "worker %d: role '%s', expected code %d", w,
                        rp_replica_role(rep), tc_role_of(j, w));
    rp_comm *world = rp_replica_world_comm(rep);
    for (int r = 0; r < TC_ROUNDS; r++) {
        int64_t mine = (int64_t)code * 1000000 + w * 1000 + r, all[TC_MAX_WORKERS];
        RP_CHECK(rp_comm_all_gather(world, &mine, all, 1, RP_I64));
        for (int q = 0; q < W; q++)
            if (all[q] != (int64_t)tc_role_of(j, q) * 1000000 + q * 1000 + r)
                return RP_ERROR(RP_ERR_INVALID, "worker %d, round %d: worker %d sent %lld", w, r, q,
                                (long long)all[q]);
        if (code == 1) {
            /* The learners among themselves, on their role communicator. */
            double v = r + 1;
            RP_CHECK(rp_comm_all_reduce(rp_replica_role_comm(rep), &v, &v, 1, RP_F64, RP_SUM));
            if (v != (double)(r + 1) * j->learners)
                return RP_ERROR(RP_ERR_INVALID, "worker %d: learners' sum %g in round %d", w, v, r);
        }
        j->rounds[w] = r + 1;
    }
    if (j->p2p && code == 2) {
        int32_t me = w;
        RP_CHECK(rp_comm_send(world, &me, 1, RP_I32, W - 1, 7));
    } else if (j->p2p && code == 3) {
        for (int a = 0; a < j->actors; a++) {
            int32_t from = -1;
            RP_CHECK(rp_comm_recv(world, &from, 1, RP_I32, RP_ANY_SOURCE, 7));
            if (from < j->learners || from >= j->learners + j->actors)
                return RP_ERROR(RP_ERR_INVALID, "the server heard from worker %d, not an actor",
                                from);
            j->p2p_seen |= 1 << (from - j->learners);
        }
    }
    return RP_OK;
}

/* Sets cfg's roles: learners, actors, one server. */
static void tc_roles_config(rp_config *cfg, int learners, int actors)
{
    cfg->nroles = 3;
    cfg->roles[0] = rp_role_make("learner", learners, 1);
    cfg->roles[1] = rp_role_make("actor", actors, 1);
    cfg->roles[2] = rp_role_make("server", 1, 1);
}

/* Starts the three roles, waits for each; RP_OK if every worker here did every round. */
static rp_status tc_run_roles(rp_replicator *r, tc_roles *j)
{
    RP_CHECK(rp_replicator_start(r, "server", roles_fn, j));
    RP_CHECK(rp_replicator_start(r, "actor", roles_fn, j));
    RP_CHECK(rp_replicator_start(r, "learner", roles_fn, j));
    rp_status st = rp_replicator_wait(r, "learner");
    rp_status st2 = rp_replicator_wait(r, "actor");
    rp_status st3 = rp_replicator_wait(r, "server");
    RP_CHECK(st);
    RP_CHECK(st2);
    RP_CHECK(st3);
    for (int i = 0; i < rp_replicator_local_replicas(r); i++) {
        int w = rp_replica_worker(rp_replicator_replica(r, i));
        if (j->rounds[w] != TC_ROUNDS)
            return RP_ERROR(RP_ERR_INVALID, "worker %d did %d rounds", w, j->rounds[w]);
    }
    return RP_OK;
}

#endif
