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

/* The whole of a file into a malloc'ed buffer, NUL-terminated after its contents (the caller
 * frees), its size in *n. Fails the test if it cannot be read. */
unsigned char *tu_read_file(const char *path, size_t *n);

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
