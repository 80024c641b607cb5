/*
 * optim.c - the optimizer's element loops: SGD (momentum, Nesterov, L2
 * weight decay), Adam/AdamW, and the scan for NaNs and infinities. The
 * arithmetic is the specification of every table (kernels.h): the float
 * operations are grouped as torch.optim groups them, and a change here
 * changes every checkpoint.
 */
#include <math.h>
#include <string.h>

#include "kernels/ref/optim.h"

/*
 * Plain SGD and SGD with momentum. Each case is its own loop so that the
 * body is a handful of independent float operations the compiler vectorises;
 * the `first` test is loop-invariant and unswitched.
 */
void kref_sgd_update(float *restrict w, float *restrict mom, const float *restrict g, int64_t n,
                     float lr, float momentum, float wd, bool nesterov, bool first)
{
    if (momentum == 0.0f) {
        /* wd = 0 has its own loop: it skips a multiply, and 0*w would turn an infinite w NaN. */
        if (wd != 0.0f) {
            for (int64_t i = 0; i < n; i++)
                w[i] -= lr * (g[i] + wd * w[i]);
        } else {
            for (int64_t i = 0; i < n; i++)
                w[i] -= lr * g[i];
        }
        return;
    }
    /* On the first step the buffer is set, not blended: mom may hold anything (a caller's
       uninitialised slice), and 0*NaN would still be NaN. */
    if (nesterov) {
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + wd * w[i];
            float b = first ? d : momentum * mom[i] + d;
            mom[i] = b;
            w[i] -= lr * (d + momentum * b);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + wd * w[i];
            float b = first ? d : momentum * mom[i] + d;
            mom[i] = b;
            w[i] -= lr * b;
        }
    }
}

void kref_adam_update(float *restrict w, float *restrict m, float *restrict v,
                      const float *restrict g, int64_t n, float b1, float b2, float eps, float l2,
                      float shrink, float step_size, float sqrt_bc2)
{
    const float c1 = 1.0f - b1;
    const float c2 = 1.0f - b2;
    for (int64_t i = 0; i < n; i++) {
        float wi = w[i] * shrink;
        float gi = g[i] + l2 * wi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step_size * (mi / (sqrtf(vi) / sqrt_bc2 + eps));
    }
}

/*
 * The common case is a clean array, so the first pass is an integer OR over
 * the exponent bits (all ones: an infinity or a NaN) that vectorises; only a
 * dirty array pays for the search.
 */
int64_t kref_first_nonfinite(float *value, const float *restrict x, int64_t n)
{
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (value) *value = x[i];
            return i;
        }
    return -1;
}
