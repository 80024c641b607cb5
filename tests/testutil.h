/* testutil.h - helpers shared by the cmocka tests. */
#ifndef RP_TESTUTIL_H
#define RP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "replicator/replicator.h"

/* ---- the runner (tests/harness.c, docs/testing.md) ---------------------------------------- */

/*
 * What each test's main() returns: runs the cmocka table tests[n] (named `group` in cmocka's
 * output) as the arguments ask.
 *  - no argument: the group's setup, every case, the group's teardown, in this process;
 *  - --list: prints each case's name, one a line, and runs nothing (the build reads it to
 *    register each case as its own CTest test, tests/cmake/cases.cmake);
 *  - --case NAME: the group's setup, the case NAME alone, the group's teardown.
 * RP_TEST_SKIP (a glob, e.g. "*64mib") skips the cases it matches in every mode (--case says
 * "[  SKIPPED ]", which CTest reports as a skip).
 * Returns the number of failed cases, or 2 for bad arguments, an unknown case, or a table
 * with two cases of one name (which --case could not tell apart).
 */
int tu_run(int argc, char **argv, const char *group, const struct CMUnitTest *tests, size_t n,
           CMFixtureFunction setup, CMFixtureFunction teardown);
#define tu_run_group_tests(argc, argv, tests, setup, teardown)                                     \
    tu_run(argc, argv, #tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

/* The running program's name without its directory ("test_comm"); "test" before tu_run. */
const char *tu_program(void);

/* ---- helpers --------------------------------------------------------------------------------- */

/*
 * tu_replicator_make: a replicator made from cfg, failing the test (with rp_last_error()) if
 * rp_replicator_create does not return RP_OK or gives NULL. tu_run_ok: rp_replicator_run(r, fn,
 * arg), failing the test with the status and the message unless it returns RP_OK.
 */
rp_replicator *tu_replicator_make(const rp_config *cfg);
void tu_run_ok(rp_replicator *r, rp_replica_fn fn, void *arg);

/* True if something (a file, a directory, a dangling link) is at path (lstat). */
bool tu_exists(const char *path);

/* Sleeps s seconds (none if s <= 0), resuming after a signal. */
void tu_sleep_s(double s);

/*
 * A guard for a call that could block forever (an open() of a FIFO waits for a writer):
 * tu_alarm_arm installs a SIGALRM handler that does nothing but interrupt, so the blocked call
 * fails with EINTR and the test fails instead of hanging, and raises it after `seconds`;
 * tu_alarm_disarm cancels the alarm and restores the handler it replaced. One at a time (the
 * alarm is the process's). Each fails the test if the handler cannot be set.
 */
void tu_alarm_arm(unsigned seconds);
void tu_alarm_disarm(void);

/* Fills x[n] with uniform values in [lo, hi) from a fixed test stream. */
void tu_fill(float *x, int64_t n, uint64_t seed, float lo, float hi);

/* True if every one of x[n] is 0 (or -0). */
bool tu_all_zero(const float *x, int64_t n);

/* Largest |a-b| / max(1, |b|) over n elements. */
double tu_max_rel_diff(const float *a, const float *b, int64_t n);

/*
 * Fails the test, naming `what` and the difference, unless tu_max_rel_diff(a, b, n) < tol: the
 * fast-kernel tests' check of a cpu result against the reference's.
 */
void tu_check_close(const float *a, const float *b, int64_t n, double tol, const char *what);

/*
 * Batch norm in training mode computed in double, two-pass (the centred sum
 * of squares, which does not cancel), rounded to float only at the end: over
 * rows of x [m, c], y = gamma*xhat + beta, and for the upstream gradient dy,
 * dbeta = sum(dy), dgamma = sum(dy*xhat) and dx. The spec batch norm is held
 * to on badly centred inputs.
 */
void tu_batch_norm_double(float *y, float *dgamma, float *dbeta, float *dx, const float *x,
                          const float *dy, const float *gamma, const float *beta, double eps,
                          int64_t m, int c);

/* Runs body() with OpenMP teams of 1 and of 4 threads (the serial and parallel paths), then 1. */
void tu_for_each_team(void (*body)(void));

/* Asserts that the last error message contains `needle` (prints it otherwise). */
void tu_assert_error_contains(const char *needle);

/*
 * A per-process scratch directory: tu_tmpdir_create() makes
 * /tmp/rp_test_<tag>_XXXXXX (0 on success, -1 otherwise), tu_tmp_path()
 * joins a name to it, tu_tmpdir_remove() deletes it with everything in it.
 */
int tu_tmpdir_create(const char *tag);
const char *tu_tmpdir(void);
const char *tu_tmp_path(char *buf, size_t size, const char *name);
void tu_tmpdir_remove(void);

/* The group fixtures of a file whose cases share a scratch directory: tu_tmpdir_setup makes it,
 * tagged with the program's name (/tmp/rp_test_test_image_XXXXXX), tu_tmpdir_teardown removes
 * it. Under --case each case's process has a directory of its own. */
int tu_tmpdir_setup(void **state);
int tu_tmpdir_teardown(void **state);

/* The whole of a file into a malloc'ed buffer, NUL-terminated after its contents (the caller
 * frees), its size in *n. Fails the test if it cannot be read. */
unsigned char *tu_read_file(const char *path, size_t *n);

/* Writes data[n] to path (created or truncated); fails the test if it cannot. */
void tu_write_file(const char *path, const void *data, size_t n);

/*
 * Damages a file in place where it holds `value`: flips one bit of the first 4 bytes equal to
 * the float's, keeping the file's size. Fails the test if the value is 0 (zero bytes are
 * everywhere: the hit would say nothing) or not in the file.
 */
void tu_damage_float(const char *path, float value);

/*
 * Values out of the kernel table's storage, through the public API (tensor.h: tests read tensors
 * as any user does, so they pass on RP_KERNELS=strict too). Each returns a malloc'ed host copy
 * (the caller frees) and fails the test on an error:
 *  - tu_read: x's numel values (widened to f32);
 *  - tu_read_grad: the gradient of x (a leaf after backward: x->grad, numel floats);
 *  - tu_read_values: p's value block (rp_params_numel floats; tensor i's at rp_params_offset);
 *  - tu_param_grads: p's gradient block (rp_params_trainable_numel floats; parameter i's at
 *    rp_params_offset(p, i));
 *  - tu_optimizer_state: opt's state block (rp_optimizer_read_state; *n its length, may be
 *    NULL).
 */
float *tu_read(const rp_tensor *x);
float *tu_read_grad(const rp_tensor *x);
float *tu_read_values(const rp_params *p);
float *tu_param_grads(const rp_params *p);
float *tu_optimizer_state(const rp_optimizer *opt, int64_t *n);

#endif
