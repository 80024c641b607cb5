/* clock.c - monotonic clocks. */
#include <time.h>

#include "replicator/core.h"

uint64_t rp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double rp_now_s(void)
{
    return (double)rp_now_ns() * 1e-9;
}
