/*
 * harness.c - the runner every cmocka test's main() hands its table to (testutil.h, tu_run).
 *
 * Isolation is per case, as in libuv's runner, but the process and the clock belong to CTest:
 * the build asks each test program for its cases (--list, tests/cmake/cases.cmake), and CTest runs
 * each one as its own test (--case NAME) with its own timeout. A case that hangs is killed and
 * reported by its name, and the file's other cases run and pass on their own. Run by hand with
 * no arguments, a program runs all its cases in one process, as before.
 */
#include "testutil.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *program_name = "test";

const char *tu_program(void)
{
    return program_name;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--list | --case NAME]\n"
            "  (no argument)  run every case in this process\n"
            "  --list         print the cases' names, one a line, and run nothing\n"
            "  --case NAME    run the group's setup, the case NAME and the group's teardown\n"
            "RP_TEST_SKIP=GLOB skips the cases whose names match GLOB (cmocka's * and ?).\n",
            argv0);
    return 2;
}

/* Two cases of one name could not be told apart by --case or by CTest: refused by name. */
static bool names_unique(const struct CMUnitTest *tests, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(tests[i].name, tests[j].name)) {
                fprintf(stderr,
                        "%s: two cases are named %s (cases %zu and %zu): give each its own name\n",
                        program_name, tests[i].name, j, i);
                return false;
            }
    return true;
}

int tu_run(int argc, char **argv, const char *group, const struct CMUnitTest *tests, size_t n,
           CMFixtureFunction setup, CMFixtureFunction teardown)
{
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        program_name = slash ? slash + 1 : argv[0];
    }
    if (!names_unique(tests, n)) return 2;
    /* The thread-sanitizer pass skips the 64 MiB cases this way (scripts/test.sh). */
    const char *skip = getenv("RP_TEST_SKIP");
    if (skip && *skip) cmocka_set_skip_filter(skip);
    if (argc == 1) return _cmocka_run_group_tests(group, tests, n, setup, teardown);
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", tests[i].name);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (argc == 3 && !strcmp(argv[1], "--case")) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(tests[i].name, argv[2])) continue;
            /* Said as cmocka says a skip(), so that CTest reports the case as skipped. */
            if (skip && *skip && fnmatch(skip, argv[2], 0) == 0) {
                printf("[  SKIPPED ] %s (RP_TEST_SKIP=%s)\n", argv[2], skip);
                return 0;
            }
            return _cmocka_run_group_tests(group, &tests[i], 1, setup, teardown);
        }
        fprintf(stderr, "%s: no case named %s (--list prints them)\n", program_name, argv[2]);
        return 2;
    }
    return usage(argv[0] ? argv[0] : program_name);
}
