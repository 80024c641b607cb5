/*
 * bench_faults.c - what the fault-injection hook costs a call (docs/faults.md):
 * a one-element all-reduce on a one-member threads communicator (the
 * dispatch and the backend, no waiting), without a schedule and with one
 * armed that never fires, in alternating rounds.
 *
 * Usage: bench_faults [calls per round, default 2000000]
 * Prints the best round of 7 of each, in ns per call.
 */
#include <stdio.h>
#include <stdlib.h>

#include "replicator/replicator.h"

static double round_ns(rp_comm *c, long n)
{
    float x = 1;
    double t0 = rp_now_s();
    for (long i = 0; i < n; i++)
        rp_comm_all_reduce(c, &x, &x, 1, RP_F32, RP_MAX);
    return (rp_now_s() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    if (n < 1) {
        fprintf(stderr, "usage: bench_faults [calls per round >= 1]\n");
        return 2;
    }
    rp_log_set_level(RP_LOG_ERROR);
    rp_comm *c = NULL;
    if (rp_comm_threads_create(&c, 1, NULL, 60) != RP_OK ||
        rp_comm_flight_set_size(c, 0) != RP_OK) {
        fprintf(stderr, "bench_faults: %s\n", rp_last_error());
        return 1;
    }
    double off = 1e30, armed = 1e30;
    for (int r = 0; r < 7; r++) {
        rp_comm_faults_set(NULL, NULL);
        double t = round_ns(c, n);
        if (t < off) off = t;
        /* Worker 99 is not in this communicator: the clause is tested on every call, never fires.
         */
        rp_comm_faults_set("delay:worker=99,call=0,ms=0", "bench_faults");
        t = round_ns(c, n);
        if (t < armed) armed = t;
    }
    rp_comm_faults_set(NULL, NULL);
    printf("no schedule   %6.1f ns per call\narmed, idle   %6.1f ns per call\n", off, armed);
    rp_comm_destroy(c);
    return 0;
}
