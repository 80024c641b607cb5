/*
 * test_comm_stats.c - the communicators' traffic counters (rp_comm_stats,
 * replicator/comm.h): every kind of call counted with its payload bytes
 * (count x dtype size as passed), the user's calls apart from the runtime's
 * (begin_internal) and its housekeeping (begin_housekeeping), failed calls
 * not counted, reset and diff.
 *
 * Two members on the threads backend, each on its own thread; the main
 * thread asserts on what each recorded after joining.
 */
#include <pthread.h>
#include <string.h>

#include "testutil.h"
#include "replicator/comm.h"

typedef struct member {
    rp_comm *comm;
    rp_status status; /* the first unexpected failure */
    rp_comm_stats after, reset;
} member;

static void *member_main(void *arg)
{
    member *m = arg;
    rp_comm *c = m->comm;
    int rank = rp_comm_rank(c), peer = 1 - rank;
    float f[16] = {0}, g[16];
    double d[8] = {0}, e[8];
    int32_t i32[5] = {0}, all32[10];
    uint8_t bytes[7] = {0};
    rp_status s = RP_OK;
#define DO(call)                                                                                   \
    do {                                                                                           \
        if (s == RP_OK) s = (call);                                                                \
    } while (0)
    DO(rp_comm_all_reduce(c, f, g, 10, RP_F32, RP_SUM));    /* 40 bytes */
    DO(rp_comm_all_reduce(c, f, f, 3, RP_F32, RP_MEAN));    /* 12 bytes */
    DO(rp_comm_reduce_scatter(c, d, e, 3, RP_F64, RP_SUM)); /* 24: the block, not 48 sent */
    DO(rp_comm_all_gather(c, i32, all32, 5, RP_I32));       /* 20: the contribution */
    DO(rp_comm_broadcast(c, bytes, 7, RP_U8, 1));           /* 7 on root and not */
    DO(rp_comm_barrier(c));                                 /* 1 call, 0 bytes */
    DO(rp_comm_send(c, f, 4, RP_F32, peer, 3));             /* 16 */
    DO(rp_comm_recv(c, g, 4, RP_F32, peer, 3));             /* 16 */
    rp_comm_begin_internal(c, "a runtime call");
    DO(rp_comm_all_reduce(c, f, f, 16, RP_F32, RP_MEAN)); /* runtime: 64 */
    /* Nested housekeeping inside a runtime call keeps the outer class. */
    rp_comm_begin_housekeeping(c, "inner");
    DO(rp_comm_all_gather(c, i32, all32, 1, RP_I32)); /* runtime: 4 */
    rp_comm_end_internal(c);
    rp_comm_end_internal(c);
    rp_comm_begin_housekeeping(c, "a check");
    DO(rp_comm_all_gather(c, d, e, 2, RP_I64)); /* housekeeping: 16 */
    rp_comm_end_internal(c);
    DO(rp_comm_all_reduce(c, f, f, 2, RP_F32, RP_SUM)); /* user again: 8 */
    m->status = s;
    rp_comm_stats_get(c, &m->after);
    rp_comm_stats_reset(c);
    rp_comm_stats_get(c, &m->reset);
    return NULL;
}

static void test_counts(void **state)
{
    (void)state;
    rp_comm *comms[2];
    assert_int_equal(rp_comm_threads_create(comms, 2, NULL, 30.0), RP_OK);
    member m[2] = {{.comm = comms[0]}, {.comm = comms[1]}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&th[r], NULL, member_main, &m[r]), 0);
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_join(th[r], NULL), 0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(m[r].status, RP_OK);
        const rp_comm_tally *u = m[r].after.by[RP_COMM_USER];
        assert_int_equal(u[RP_FLIGHT_ALL_REDUCE].calls, 3);
        assert_int_equal(u[RP_FLIGHT_ALL_REDUCE].bytes, 40 + 12 + 8);
        assert_int_equal(u[RP_FLIGHT_REDUCE_SCATTER].calls, 1);
        assert_int_equal(u[RP_FLIGHT_REDUCE_SCATTER].bytes, 24);
        assert_int_equal(u[RP_FLIGHT_ALL_GATHER].calls, 1);
        assert_int_equal(u[RP_FLIGHT_ALL_GATHER].bytes, 20);
        assert_int_equal(u[RP_FLIGHT_BROADCAST].calls, 1);
        assert_int_equal(u[RP_FLIGHT_BROADCAST].bytes, 7);
        assert_int_equal(u[RP_FLIGHT_BARRIER].calls, 1);
        assert_int_equal(u[RP_FLIGHT_BARRIER].bytes, 0);
        assert_int_equal(u[RP_FLIGHT_SEND].calls, 1);
        assert_int_equal(u[RP_FLIGHT_SEND].bytes, 16);
        assert_int_equal(u[RP_FLIGHT_RECV].calls, 1);
        assert_int_equal(u[RP_FLIGHT_RECV].bytes, 16);
        const rp_comm_tally *rt = m[r].after.by[RP_COMM_RUNTIME];
        assert_int_equal(rt[RP_FLIGHT_ALL_REDUCE].calls, 1);
        assert_int_equal(rt[RP_FLIGHT_ALL_REDUCE].bytes, 64);
        assert_int_equal(rt[RP_FLIGHT_ALL_GATHER].calls, 1);
        assert_int_equal(rt[RP_FLIGHT_ALL_GATHER].bytes, 4);
        const rp_comm_tally *hk = m[r].after.by[RP_COMM_HOUSEKEEPING];
        assert_int_equal(hk[RP_FLIGHT_ALL_GATHER].calls, 1);
        assert_int_equal(hk[RP_FLIGHT_ALL_GATHER].bytes, 16);
        assert_int_equal(hk[RP_FLIGHT_ALL_REDUCE].calls, 0);
        /* Reset zeroes everything. */
        rp_comm_stats zero;
        memset(&zero, 0, sizeof zero);
        assert_memory_equal(&m[r].reset, &zero, sizeof zero);
        /* diff(after, after) is zero; diff(after, zero) is after. */
        rp_comm_stats d;
        rp_comm_stats_diff(&m[r].after, &m[r].after, &d);
        assert_memory_equal(&d, &zero, sizeof zero);
        rp_comm_stats_diff(&m[r].after, &zero, &d);
        assert_memory_equal(&d, &m[r].after, sizeof d);
    }
    assert_string_equal(rp_comm_class_name(RP_COMM_HOUSEKEEPING), "housekeeping");
    assert_int_equal(rp_comm_stats_get(NULL, &m[0].after), RP_ERR_INVALID);
    for (int r = 0; r < 2; r++)
        rp_comm_destroy(comms[r]);
}

/* A call that fails its checks moves nothing and is not counted. */
static void test_failed_not_counted(void **state)
{
    (void)state;
    rp_comm *c;
    assert_int_equal(rp_comm_threads_create(&c, 1, NULL, 5.0), RP_OK);
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(rp_comm_all_reduce(c, x, x, 4, RP_F32, RP_SUM), RP_OK);
    assert_int_equal(rp_comm_all_reduce(c, x, x, -1, RP_F32, RP_SUM), RP_ERR_INVALID);
    rp_comm_stats s;
    assert_int_equal(rp_comm_stats_get(c, &s), RP_OK);
    assert_int_equal(s.by[RP_COMM_USER][RP_FLIGHT_ALL_REDUCE].calls, 1);
    assert_int_equal(s.by[RP_COMM_USER][RP_FLIGHT_ALL_REDUCE].bytes, 16);
    rp_comm_destroy(c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_failed_not_counted),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
