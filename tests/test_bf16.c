/*
 * test_bf16.c - the bfloat16 conversions of replicator/core.h against an independent
 * specification: the nearest of the two bf16 neighbours of a float, picked by exact distance in
 * double, ties to the even one. Swept over every bf16 bit pattern, each with the low halves that
 * sit on and around the rounding boundaries.
 */
#include <math.h>
#include <string.h>

#include "testutil.h"

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/*
 * The specification. A finite float lies between the bf16 value t (its bits truncated) and
 * t + 1 ulp away from zero (the bit pattern t + 1, which is the next binade's first value or
 * infinity when the mantissa is full). Pick the nearer in exact arithmetic (doubles hold every
 * value here exactly), the even pattern on a tie.
 */
static uint16_t spec_round(float x)
{
    uint32_t u = bits_of(x);
    if (isnan(x)) return 0; /* checked separately */
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffffu) == 0) return lo;
    double dx = fabs((double)x), dlo = fabs((double)f32_of((uint32_t)lo << 16));
    /* The upper neighbour: for the largest finite binade's top value it is infinity, which
       bf16 reaches when x is at least halfway to 2^128 (one ulp past the largest finite). */
    double dhi =
        (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128) : fabs((double)f32_of((uint32_t)hi << 16));
    double a = dx - dlo, b = dhi - dx;
    if (a < b) return lo;
    if (b < a) return hi;
    return (lo & 1u) ? hi : lo;
}

/* Every bf16 pattern, with low halves on, beside and between the boundaries. */
static void test_round_matches_spec(void **state)
{
    (void)state;
    static const uint16_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000,
                                    0x8001, 0xbfff, 0xfffe, 0xffff, 0x1234, 0xc001};
    long checked = 0;
    for (uint32_t h = 0; h < 0x10000u; h++)
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
            uint32_t u = h << 16 | lows[k];
            float x = f32_of(u);
            uint16_t got = rp_bf16_from_f32(x);
            if (isnan(x)) {
                /* NaN stays NaN with its sign, quiet. */
                float back = rp_bf16_to_f32(got);
                if (!isnan(back) || (got & 0x8000u) != (h & 0x8000u) || !(got & 0x0040u))
                    fail_msg("0x%08x (NaN) -> 0x%04x", u, got);
                continue;
            }
            uint16_t want = spec_round(x);
            if (got != want)
                fail_msg("0x%08x (%.9g) -> 0x%04x, want 0x%04x", u, (double)x, got, want);
            checked++;
        }
    assert_true(checked > 700000);
}

/* Widening is exact, and narrowing a widened value gives it back, for every non-NaN pattern. */
static void test_widen_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float x = rp_bf16_to_f32((rp_bf16)h);
        assert_int_equal(bits_of(x), h << 16);
        if (!isnan(x)) assert_int_equal(rp_bf16_from_f32(x), h);
    }
}

/* The boundary cases by name, so that a failure reads as what broke. */
static void test_named_cases(void **state)
{
    (void)state;
    assert_int_equal(rp_bf16_from_f32(1.0f), 0x3f80);
    assert_int_equal(rp_bf16_from_f32(-0.0f), 0x8000);
    assert_int_equal(rp_bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(rp_bf16_from_f32(-INFINITY), 0xff80);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even 1.0. */
    assert_int_equal(rp_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up. */
    assert_int_equal(rp_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    /* Just above a tie rounds up. */
    assert_int_equal(rp_bf16_from_f32(f32_of(0x3f808001u)), 0x3f81);
    /* The largest float rounds to infinity; the largest bf16 stays. */
    assert_int_equal(rp_bf16_from_f32(f32_of(0x7f7fffffu)), 0x7f80);
    assert_int_equal(rp_bf16_from_f32(f32_of(0x7f7f0000u)), 0x7f7f);
    /* A subnormal is rounded, not flushed. */
    assert_int_equal(rp_bf16_from_f32(f32_of(0x00018000u)), 0x0002);
    /* A signalling NaN whose payload is only in the low half stays a NaN (not infinity). */
    assert_int_equal(rp_bf16_from_f32(f32_of(0x7f800001u)), 0x7fc0);
    assert_int_equal(rp_bf16_from_f32(f32_of(0xff800001u)), 0xffc0);
    assert_true(isnan(rp_bf16_to_f32(rp_bf16_from_f32(NAN))));
}

/* The array forms are the scalar ones, element by element. */
static void test_arrays(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N], back[N];
    rp_bf16 h[N];
    tu_fill(x, N, 7, -1e3f, 1e3f);
    x[3] = NAN;
    x[4] = INFINITY;
    rp_bf16_from_f32_array(h, x, N);
    rp_bf16_to_f32_array(back, h, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(h[i], rp_bf16_from_f32(x[i]));
        assert_int_equal(bits_of(back[i]), (uint32_t)h[i] << 16);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_matches_spec),
        cmocka_unit_test(test_widen_round_trip),
        cmocka_unit_test(test_named_cases),
        cmocka_unit_test(test_arrays),
    };
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
