#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void tu_fill(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    rp_rng_fill_uniform(rp_hash_str(seed, "test"), 0, x, (size_t)n, lo, hi);
}

double tu_max_rel_diff(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= worst)) worst = d; /* NaN-safe: NaN becomes the worst */
    }
    return worst;
}

void tu_assert_error_contains(const char *needle)
{
    const char *msg = rp_last_error();
    if (!strstr(msg, needle)) {
        print_error("expected error containing \"%s\", got \"%s\"\n", needle, msg);
        fail();
    }
}
