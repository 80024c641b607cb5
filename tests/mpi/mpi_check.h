/*
 * mpi_check.h - the check of the MPI test programs (run under mpirun, so not
 * cmocka): a failed condition is counted and printed with the rank, and the
 * program goes on, so every rank reaches the collective calls its peers
 * expect. The including file defines `failures` and `rank_`.
 */
#ifndef RP_TESTS_MPI_CHECK_H
#define RP_TESTS_MPI_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank_, __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#endif
