/* testutil.h - helpers shared by the cmocka tests. */
#ifndef RP_TESTUTIL_H
#define RP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "replicator/replicator.h"

/* Fills x[n] with uniform values in [lo, hi) from a fixed test stream. */
void tu_fill(float *x, int64_t n, uint64_t seed, float lo, float hi);

/* Largest |a-b| / max(1, |b|) over n elements. */
double tu_max_rel_diff(const float *a, const float *b, int64_t n);

/* Asserts that the last error message contains `needle` (prints it otherwise). */
void tu_assert_error_contains(const char *needle);

#endif
