/*
 * dtype.c - names of reduction ops: a leaf function that comm.c, the flight
 * recorder (flight.c) and the backends share, in a file of their own so that
 * none of them calls another in a loop. (Element types are core's: dtype.c
 * there.)
 */
#include "comm/comm_internal.h"

const char *rp_reduce_op_name(rp_reduce_op op)
{
    static const char *names[] = {"sum", "mean", "max", "min", "first"};
    return (unsigned)op < 5 ? names[op] : "?";
}
