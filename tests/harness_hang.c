/*
 * harness_hang.c - a cmocka program for the runner's own check (tests/harness_check.sh), never
 * run by the suite itself: its middle case never returns, and the cases before and after it
 * pass. Registered case by case, as every test_*.c is, the hang must be killed at its timeout
 * and named, and the other two must still pass.
 *
 * HARNESS_HANG_TABLE=duplicate swaps in a table with two cases of one name, which the runner
 * must refuse.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_passes_before(void **state)
{
    (void)state;
    assert_int_equal(1 + 1, 2);
}

/* Blocks until a signal ends the process: what a lost wake-up in a collective looks like. */
static void test_hangs(void **state)
{
    (void)state;
    for (;;)
        pause();
}

static void test_passes_after(void **state)
{
    (void)state;
    assert_true(tu_exists("/"));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes_before),
        cmocka_unit_test(test_hangs),
        cmocka_unit_test(test_passes_after),
    };
    const struct CMUnitTest duplicate[] = {
        cmocka_unit_test(test_passes_before),
        cmocka_unit_test(test_passes_before),
    };
    const char *table = getenv("HARNESS_HANG_TABLE");
    if (table && !strcmp(table, "duplicate"))
        return tu_run_group_tests(argc, argv, duplicate, NULL, NULL);
    return tu_run_group_tests(argc, argv, tests, NULL, NULL);
}
