/*
 * test_collective_ops_mpi.c - the differentiable collectives (tensor.h:
 * rp_tensor_all_reduce with every reduction, all_gather, reduce_scatter,
 * broadcast, send/recv, rp_copy_to_group, rp_reduce_from_group) on the MPI
 * backend, run by CTest under mpirun with 2 ranks, and on the hierarchical
 * one: `test_collective_ops_mpi T` runs T member threads in each rank (CTest:
 * 2 ranks x 2 threads, so some peers meet through threads and the others
 * through MPI). tests/test_collective_ops.c checks the same ops on threads
 * with finite differences.
 *
 * Here every member knows every member's input and output gradient, since
 * both are functions of (member, element): member r's input x_r and the
 * gradient seeded into its output, dy_r (rp_backward_from). So each member
 * computes the forward and the input gradient the plain way, from the rules
 * in tensor.h, and compares what the op gave. The values are multiples of
 * 1/512 and 1/256 below 2 in magnitude, so the sums of up to 4 members and
 * their division by 2 or 4 are exact in float, whatever the reduction order:
 * the comparison is within 1e-6 relative, and in practice bitwise.
 *
 * Every case runs again with the tape's gradient wire in bf16 (rp_tape_set_grad_wire): the
 * adjoints that add the members' gradients (all-reduce's, all-gather's, broadcast's,
 * copy_to_group's) then give each dy rounded to bf16, summed in f32 and the sum rounded once -
 * the same bits as on threads - and the others are unchanged.
 */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicator/replicator.h"

static atomic_int failures;
static _Thread_local int rank_;  /* this member's rank */
static _Thread_local bool wire_; /* the pass with the tape's gradient wire in bf16 */
static int size_, per_ = 1;      /* members in all; members in each process */

#include "mpi_check.h"

#define MAX_N 8
#define K     6 /* elements of each member's input block */

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = (a + 1) * 0x9e3779b97f4a7c15ull ^ (b + 1) * 0xc2b2ae3d27d4eb4full ^
                 (c + 1) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    return h ^ h >> 29;
}

/* Member r's input element i of case `kase`: a multiple of 1/512 in (-2, 2). */
static float x_of(int kase, int r, int64_t i)
{
    return (float)((int)(mix((uint64_t)kase, (uint64_t)r, (uint64_t)i) % 2001) - 1000) / 512.0f;
}

/* The gradient seeded into member r's output element i: a multiple of 1/256, |dy| in [0.5, 1.5]. */
static float dy_of(int kase, int r, int64_t i)
{
    float v = (float)(mix((uint64_t)kase + 100, (uint64_t)r, (uint64_t)i) % 257) / 256.0f + 0.5f;
    return mix((uint64_t)kase + 200, (uint64_t)r, (uint64_t)i) & 1 ? v : -v;
}

typedef enum {
    OP_ALL_REDUCE,
    OP_ALL_GATHER,
    OP_REDUCE_SCATTER,
    OP_BROADCAST,
    OP_SEND_RECV,
    OP_COPY_TO_GROUP,
    OP_REDUCE_FROM_GROUP,
} op_kind;

typedef struct op_case {
    const char *name;
    op_kind kind;
    rp_reduce_op op; /* all_reduce, reduce_scatter */
    int root;        /* broadcast: -1 for the last member */
} op_case;

static const op_case cases[] = {
    {"all_reduce sum", OP_ALL_REDUCE, RP_SUM, 0},
    {"all_reduce mean", OP_ALL_REDUCE, RP_MEAN, 0},
    {"all_reduce max", OP_ALL_REDUCE, RP_MAX, 0},
    {"all_reduce min", OP_ALL_REDUCE, RP_MIN, 0},
    {"all_reduce first", OP_ALL_REDUCE, RP_FIRST, 0},
    {"all_gather", OP_ALL_GATHER, RP_SUM, 0},
    {"reduce_scatter sum", OP_REDUCE_SCATTER, RP_SUM, 0},
    {"reduce_scatter mean", OP_REDUCE_SCATTER, RP_MEAN, 0},
    {"broadcast root 0", OP_BROADCAST, RP_SUM, 0},
    {"broadcast root last", OP_BROADCAST, RP_SUM, -1},
    {"send/recv ring", OP_SEND_RECV, RP_SUM, 0},
    {"copy_to_group", OP_COPY_TO_GROUP, RP_SUM, 0},
    {"reduce_from_group", OP_REDUCE_FROM_GROUP, RP_SUM, 0},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* Elements of each member's input and output for the case (n members). */
static void sizes(const op_case *c, int n, int64_t *in, int64_t *out)
{
    *in = c->kind == OP_REDUCE_SCATTER ? (int64_t)n * K : K;
    *out = c->kind == OP_ALL_GATHER ? (int64_t)n * K : K;
}

/* The plain forward: member r's output element i. */
static float want_y(const op_case *c, int kase, int n, int r, int64_t i)
{
    switch (c->kind) {
    case OP_ALL_REDUCE:
    case OP_REDUCE_FROM_GROUP: {
        rp_reduce_op op = c->kind == OP_ALL_REDUCE ? c->op : RP_SUM;
        float acc = x_of(kase, 0, i);
        for (int s = 1; s < n; s++) {
            float v = x_of(kase, s, i);
            if (op == RP_SUM || op == RP_MEAN)
                acc += v;
            else if (op == RP_MAX)
                acc = v > acc ? v : acc;
            else if (op == RP_MIN)
                acc = v < acc ? v : acc;
        }
        return op == RP_MEAN ? acc / (float)n : acc;
    }
    case OP_ALL_GATHER:
        return x_of(kase, (int)(i / K), i % K);
    case OP_REDUCE_SCATTER: {
        float acc = 0;
        for (int s = 0; s < n; s++)
            acc += x_of(kase, s, (int64_t)r * K + i);
        return c->op == RP_MEAN ? acc / (float)n : acc;
    }
    case OP_BROADCAST:
        return x_of(kase, c->root < 0 ? n - 1 : c->root, i);
    case OP_SEND_RECV:
        return x_of(kase, (r + n - 1) % n, i);
    case OP_COPY_TO_GROUP:
        return x_of(kase, r, i);
    }
    return NAN;
}

static float round_bf16(float v)
{
    return rp_bf16_to_f32(rp_bf16_from_f32(v));
}

/* sum_s dy_s[i]; with the gradient wire in bf16 (wire_), each dy rounded to bf16 and the sum
   (divided by n: mean) rounded once (exact in float before the rounding: multiples of 1/256). */
static float sum_dy_by(int kase, int n, int64_t i, int by)
{
    float acc = 0;
    for (int s = 0; s < n; s++)
        acc += wire_ ? round_bf16(dy_of(kase, s, i)) : dy_of(kase, s, i);
    acc /= (float)by;
    return wire_ ? round_bf16(acc) : acc;
}

static float sum_dy(int kase, int n, int64_t i)
{
    return sum_dy_by(kase, n, i, 1);
}

/* The plain backward: member p's input gradient element i. */
static float want_dx(const op_case *c, int kase, int n, int p, int64_t i)
{
    switch (c->kind) {
    case OP_ALL_REDUCE:
        switch (c->op) {
        case RP_SUM:
            return sum_dy(kase, n, i);
        case RP_MEAN:
            return sum_dy_by(kase, n, i, n);
        case RP_MAX:
        case RP_MIN:
            return x_of(kase, p, i) == want_y(c, kase, n, p, i) ? sum_dy(kase, n, i) : 0.0f;
        case RP_FIRST:
            return p == 0 ? sum_dy(kase, n, i) : 0.0f;
        }
        return NAN;
    case OP_ALL_GATHER:
        return sum_dy(kase, n, (int64_t)p * K + i);
    case OP_REDUCE_SCATTER: {
        float g = dy_of(kase, (int)(i / K), i % K); /* block b of x went to member b */
        return c->op == RP_MEAN ? g / (float)n : g;
    }
    case OP_BROADCAST:
        return p == (c->root < 0 ? n - 1 : c->root) ? sum_dy(kase, n, i) : 0.0f;
    case OP_SEND_RECV:
        return dy_of(kase, (p + 1) % n, i); /* x_p went to the next member */
    case OP_COPY_TO_GROUP:
        return sum_dy(kase, n, i);
    case OP_REDUCE_FROM_GROUP:
        return dy_of(kase, p, i);
    }
    return NAN;
}

static bool close_to(float got, float want)
{
    return fabsf(got - want) <= 1e-6f * (1.0f + fabsf(want));
}

/* The op on this member's tape. */
static rp_tensor *forward(rp_tape *t, rp_comm *comm, const op_case *c, rp_tensor *x, int n)
{
    int r = rp_comm_rank(comm);
    switch (c->kind) {
    case OP_ALL_REDUCE:
        return rp_tensor_all_reduce(t, comm, x, c->op);
    case OP_ALL_GATHER:
        return rp_tensor_all_gather(t, comm, x);
    case OP_REDUCE_SCATTER:
        return rp_tensor_reduce_scatter(t, comm, x, c->op);
    case OP_BROADCAST:
        return rp_tensor_broadcast(t, comm, x, c->root < 0 ? n - 1 : c->root);
    case OP_SEND_RECV: {
        rp_tensor *tok = rp_tensor_send(t, comm, x, (r + 1) % n, 5);
        rp_tensor *h = rp_tensor_recv(t, comm, x->ndim, x->shape, (r + n - 1) % n, 5);
        /* The token (a scalar 0) in the output, so one backward covers the send too. */
        return tok && h ? rp_add(t, h, tok) : NULL;
    }
    case OP_COPY_TO_GROUP:
        return rp_copy_to_group(t, comm, x);
    case OP_REDUCE_FROM_GROUP:
        return rp_reduce_from_group(t, comm, x);
    }
    return NULL;
}

static void run_case(rp_comm *comm, rp_tape *t, int kase)
{
    const op_case *c = &cases[kase];
    int n = rp_comm_size(comm), r = rp_comm_rank(comm);
    int64_t nin, nout;
    sizes(c, n, &nin, &nout);
    rp_tape_reset(t);
    int shape[2] = {(int)(nin / 3), 3};
    /* Host values (the tape's host arena) moved in and out through the public API. */
    float *xs = rp_arena_alloc(rp_tape_arena(t), (size_t)nin * sizeof(float));
    float *dy = rp_arena_alloc(rp_tape_arena(t), (size_t)nout * sizeof(float));
    float *got =
        rp_arena_alloc(rp_tape_arena(t), (size_t)(nin > nout ? nin : nout) * sizeof(float));
    if (!xs || !dy || !got) {
        CHECK(false, "%s: allocation: %s", c->name, rp_last_error());
        return;
    }
    for (int64_t i = 0; i < nin; i++)
        xs[i] = x_of(kase, r, i);
    for (int64_t i = 0; i < nout; i++)
        dy[i] = dy_of(kase, r, i);
    rp_tensor *x = rp_tensor_from(t, 2, shape, xs);
    if (!x) {
        CHECK(false, "%s: allocation: %s", c->name, rp_last_error());
        return;
    }
    rp_tensor_set_requires_grad(x, true);
    rp_tensor *y = forward(t, comm, c, x, n);
    CHECK(y != NULL, "%s: forward: %s", c->name, rp_last_error());
    if (!y) return;
    CHECK(y->numel == nout, "%s: output has %lld elements, want %lld", c->name, (long long)y->numel,
          (long long)nout);
    if (y->numel != nout) return;
    if (c->kind == OP_ALL_GATHER)
        CHECK(y->ndim == 3 && y->shape[0] == n, "%s: output not [%d, ...] (ndim %d)", c->name, n,
              y->ndim);
    CHECK(rp_tensor_read(y, got, nout) == RP_OK, "%s: read y: %s", c->name, rp_last_error());
    int bad = 0;
    for (int64_t i = 0; i < nout; i++) {
        float want = want_y(c, kase, n, r, i);
        if (!close_to(got[i], want) && bad++ < 3)
            CHECK(false, "%s: y[%lld] = %.9g, want %.9g", c->name, (long long)i, (double)got[i],
                  (double)want);
    }
    rp_status st = rp_backward_from(t, y, dy);
    CHECK(st == RP_OK, "%s: backward: %s", c->name, rp_last_error());
    if (st != RP_OK) return;
    CHECK(x->grad != NULL, "%s: no input gradient", c->name);
    if (!x->grad) return;
    CHECK(rp_tensor_read_grad(x, got, nin) == RP_OK, "%s: read dx: %s", c->name, rp_last_error());
    bad = 0;
    for (int64_t i = 0; i < nin; i++) {
        float want = want_dx(c, kase, n, r, i);
        if (!close_to(got[i], want) && bad++ < 3)
            CHECK(false, "%s: dx[%lld] = %.9g, want %.9g", c->name, (long long)i, (double)got[i],
                  (double)want);
    }
}

/* Every case on one member: one communicator, one tape. */
static void test_ops(rp_comm *comm)
{
    rp_tape *t = NULL;
    if (rp_tape_create(&t, 0) != RP_OK) {
        CHECK(false, "tape: %s", rp_last_error());
        return;
    }
    for (int k = 0; k < NCASES; k++)
        run_case(comm, t, k);
    /* Again with the gradient wire in bf16: the reducing adjoints round (want_dx). */
    CHECK(rp_tape_set_grad_wire(t, RP_BF16) == RP_OK, "grad wire: %s", rp_last_error());
    wire_ = true;
    for (int k = 0; k < NCASES; k++)
        run_case(comm, t, k);
    wire_ = false;
    CHECK(rp_tape_set_grad_wire(t, RP_F32) == RP_OK, "grad wire: %s", rp_last_error());
    /*
     * Last (it breaks the communicator): a shape that differs in process 0 fails on every member.
     * (Per process, so that on mpi+threads the processes' leaders meet and see it; a mismatch
     * between two threads of one process leaves the other processes to time out, not checked here.)
     */
    rp_tape_reset(t);
    int n0 = rp_comm_rank(comm) / per_ == 0 ? 3 : 2;
    rp_tensor *x = rp_tensor_fill(t, 2, (int[]){n0, 3}, 1.0f);
    rp_tensor *y = x ? rp_tensor_all_reduce(t, comm, x, RP_SUM) : NULL;
    CHECK(y == NULL && rp_last_status() == RP_ERR_MISMATCH, "a shape mismatch gave %s: %s",
          y ? "an output" : rp_status_name(rp_last_status()), rp_last_error());
    CHECK(strstr(rp_last_error(), "all_reduce") != NULL, "the mismatch does not name the call: %s",
          rp_last_error());
    rp_tape_destroy(t);
}

static rp_comm *comms_[64];

static void create_comms(double timeout)
{
    rp_status st = per_ == 1 ? rp_comm_mpi_create(&comms_[0], timeout)
                             : rp_comm_hier_create(comms_, per_, timeout);
    if (st != RP_OK) {
        fprintf(stderr, "create: %s\n", rp_last_error());
        exit(1);
    }
}

typedef struct member_arg {
    int t;
} member_arg;

static void *member_main(void *p)
{
    member_arg *a = p;
    rank_ = rp_comm_rank(comms_[a->t]);
    test_ops(comms_[a->t]);
    return NULL;
}

int main(int argc, char **argv)
{
    rp_log_set_level(RP_LOG_WARN);
    per_ = argc > 1 ? atoi(argv[1]) : 1;
    if (per_ < 1 || per_ > 64) {
        fprintf(stderr, "usage: test_collective_ops_mpi [members per process, 1..64]\n");
        return 2;
    }
    create_comms(60.0);
    size_ = rp_comm_size(comms_[0]);
    int process = rp_comm_rank(comms_[0]) / per_;
    rank_ = process * per_;
    if (size_ < 2 || size_ > MAX_N) {
        fprintf(stderr, "test_collective_ops_mpi: %d members, want 2..%d\n", size_, MAX_N);
        return 2;
    }
    pthread_t th[64];
    member_arg args[64];
    for (int t = 0; t < per_; t++) {
        args[t] = (member_arg){t};
        if (pthread_create(&th[t], NULL, member_main, &args[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < per_; t++)
        pthread_join(th[t], NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < per_; t++)
        rp_comm_destroy(comms_[t]);
    int mine = atomic_load(&failures), total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (process == 0)
        printf("%s: %d ranks x %d members, %d cases, %d failures\n", total ? "FAIL" : "ok",
               size_ / per_, per_, NCASES, total);
    return total ? 1 : 0;
}
