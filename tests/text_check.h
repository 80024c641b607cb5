/*
 * text_check.h - reading a text file and finding a line in it, for tests
 * that check what a run wrote (the flight recorder's dumps). Plain C with
 * no test framework, so the MPI tests (which run without cmocka) share it.
 */
#ifndef RP_TESTS_TEXT_CHECK_H
#define RP_TESTS_TEXT_CHECK_H

#include <stdbool.h>

/* The whole of a file (NUL-terminated, malloc'ed), or NULL where it cannot be read. */
char *tc_slurp(const char *path);

/* True if a line of `text` holds every one of the NULL-terminated needles; a needle "!x" asks
 * for a line without x. */
bool tc_line_with(const char *text, const char *const *needles);

#endif
