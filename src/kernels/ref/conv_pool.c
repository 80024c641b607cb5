/*
 * conv_pool.c - descriptor set-up and the reference convolution and pooling
 * kernels. These loops are the numerical specification: direct, in double,
 * one output element at a time, each output computed by gathering its inputs
 * (never scattering), so no scratch memory and no accumulation-order surprises.
 */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "kernels/ref/conv_pool_ref.h"

/* A multiplied input as the compute type sees it: itself, or rounded to bf16. */
static inline double in_val(float v, bool bf16)
{
    return bf16 ? (double)core_bf16_widen(core_bf16_round(v)) : (double)v;
}

/* Element i of an activation stored as `type` (f32 or bf16), as a float. */
static inline float act_at(const void *x, int64_t i, rp_dtype type)
{
    return type == RP_BF16 ? core_bf16_widen(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* (in + 2*pad - k) / stride + 1 in 64-bit, or 0 when the window does not fit. */
static int64_t out_size(int in, int k, int stride, int pad)
{
    int64_t span = (int64_t)in + 2 * (int64_t)pad - k;
    if (span < 0 || stride < 1) return 0;
    return span / stride + 1;
}

rp_status kernels_conv_desc_init(kernels_conv_desc *d, int n, int h, int w, int c, int o, int kh,
                                 int kw, int stride, int pad)
{
    if (!d) return RP_ERROR(RP_ERR_INVALID, "kernels_conv_desc_init: descriptor is NULL");
    memset(d, 0, sizeof(*d));
    int64_t oh = out_size(h, kh, stride, pad);
    int64_t ow = out_size(w, kw, stride, pad);
    if (n < 1 || h < 1 || w < 1 || c < 1 || o < 1 || kh < 1 || kw < 1 || stride < 1 || pad < 0 ||
        oh < 1 || ow < 1 || oh > INT32_MAX || ow > INT32_MAX) {
        return RP_ERROR(RP_ERR_SHAPE,
                        "conv2d: input [n=%d,h=%d,w=%d,c=%d], %d filters of %dx%d, stride %d, "
                        "pad %d give output %lldx%lld; need all sizes >= 1, stride >= 1, "
                        "pad >= 0 and an output of at least 1x1",
                        n, h, w, c, o, kh, kw, stride, pad, (long long)oh, (long long)ow);
    }
    *d = (kernels_conv_desc){.n = n,
                             .h = h,
                             .w = w,
                             .c = c,
                             .o = o,
                             .kh = kh,
                             .kw = kw,
                             .oh = (int)oh,
                             .ow = (int)ow,
                             .stride = stride,
                             .pad = pad};
    return RP_OK;
}

rp_status kernels_pool_desc_init(kernels_pool_desc *d, int n, int h, int w, int c, int k,
                                 int stride, int pad)
{
    if (!d) return RP_ERROR(RP_ERR_INVALID, "kernels_pool_desc_init: descriptor is NULL");
    memset(d, 0, sizeof(*d));
    int64_t oh = out_size(h, k, stride, pad);
    int64_t ow = out_size(w, k, stride, pad);
    int64_t elems = (int64_t)n * h * w * c;
    /*
     * pad < k keeps every window at least partly inside the input, so a max
     * always has an element to point at and an average a nonzero divisor.
     * The argmax is an int32 flat offset, hence the element limit.
     */
    if (n < 1 || h < 1 || w < 1 || c < 1 || k < 1 || stride < 1 || pad < 0 || pad >= k || oh < 1 ||
        ow < 1 || elems > INT32_MAX) {
        return RP_ERROR(RP_ERR_SHAPE,
                        "pool2d: input [n=%d,h=%d,w=%d,c=%d], window %dx%d, stride %d, pad %d "
                        "give output %lldx%lld; need all sizes >= 1, stride >= 1, "
                        "0 <= pad < window, an output of at least 1x1 and at most 2^31-1 "
                        "input elements",
                        n, h, w, c, k, k, stride, pad, (long long)oh, (long long)ow);
    }
    *d = (kernels_pool_desc){.n = n,
                             .h = h,
                             .w = w,
                             .c = c,
                             .oh = (int)oh,
                             .ow = (int)ow,
                             .k = k,
                             .stride = stride,
                             .pad = pad};
    return RP_OK;
}

rp_status kernels_conv_desc_validate(const kernels_conv_desc *d)
{
    if (!d) return RP_ERROR(RP_ERR_INVALID, "conv2d: descriptor is NULL");
    kernels_conv_desc e;
    rp_status st =
        kernels_conv_desc_init(&e, d->n, d->h, d->w, d->c, d->o, d->kh, d->kw, d->stride, d->pad);
    if (st != RP_OK) return st;
    if (e.oh != d->oh || e.ow != d->ow) {
        return RP_ERROR(RP_ERR_SHAPE,
                        "conv2d: descriptor output %dx%d does not match input %dx%d, kernel "
                        "%dx%d, stride %d, pad %d (expected %dx%d); use kernels_conv_desc_init",
                        d->oh, d->ow, d->h, d->w, d->kh, d->kw, d->stride, d->pad, e.oh, e.ow);
    }
    if (d->compute != RP_F32 && d->compute != RP_BF16)
        return RP_ERROR(RP_ERR_INVALID, "conv2d: compute type %s (%d) is neither f32 nor bf16",
                        rp_dtype_name(d->compute), (int)d->compute);
    static const char *const names[] = {"x", "y", "dy"};
    const rp_dtype types[] = {d->x_type, d->y_type, d->dy_type};
    for (int k = 0; k < 3; k++) {
        rp_dtype s = types[k];
        if (s != RP_F32 && !(s == RP_BF16 && d->compute == RP_BF16))
            return RP_ERROR(RP_ERR_INVALID,
                            "conv2d: %s stored as %s with %s compute (bf16 storage needs bf16 "
                            "compute; other types none)",
                            names[k], rp_dtype_name(s), rp_dtype_name(d->compute));
    }
    return RP_OK;
}

rp_status kernels_pool_desc_validate(const kernels_pool_desc *d)
{
    if (!d) return RP_ERROR(RP_ERR_INVALID, "pool2d: descriptor is NULL");
    kernels_pool_desc e;
    rp_status st = kernels_pool_desc_init(&e, d->n, d->h, d->w, d->c, d->k, d->stride, d->pad);
    if (st != RP_OK) return st;
    if (e.oh != d->oh || e.ow != d->ow) {
        return RP_ERROR(RP_ERR_SHAPE,
                        "pool2d: descriptor output %dx%d does not match input %dx%d, window "
                        "%d, stride %d, pad %d (expected %dx%d); use kernels_pool_desc_init",
                        d->oh, d->ow, d->h, d->w, d->k, d->stride, d->pad, e.oh, e.ow);
    }
    if (d->type != RP_F32 && d->type != RP_BF16)
        return RP_ERROR(RP_ERR_INVALID, "pool2d: values stored as %s (%d); f32 or bf16",
                        rp_dtype_name(d->type), (int)d->type);
    return RP_OK;
}

/*
 * Forward convolution: each output element is the dot product of the
 * filter with the input window, padding contributing zero, plus the bias.
 */
rp_status kref_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                          const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!y || !x || !w) return RP_ERROR(RP_ERR_INVALID, "kref_conv2d_fwd: NULL y, x or w");
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad;
    const bool bf = d->compute == RP_BF16;
    for (int n = 0; n < d->n; n++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++)
                for (int o = 0; o < d->o; o++) {
                    double acc = bias ? (double)bias[o] : 0.0;
                    for (int ky = 0; ky < d->kh; ky++) {
                        int iy = oy * S - P + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < d->kw; kx++) {
                            int ix = ox * S - P + kx;
                            if (ix < 0 || ix >= W) continue;
                            int64_t xp = (((int64_t)n * H + iy) * W + ix) * C;
                            const float *wp = w + (((int64_t)o * d->kh + ky) * d->kw + kx) * C;
                            for (int c = 0; c < C; c++)
                                acc += in_val(act_at(x, xp + c, d->x_type), bf) * in_val(wp[c], bf);
                        }
                    }
                    int64_t yi = (((int64_t)n * d->oh + oy) * d->ow + ox) * d->o + o;
                    if (d->y_type == RP_BF16)
                        ((uint16_t *)y)[yi] = core_bf16_round((float)acc);
                    else
                        ((float *)y)[yi] = (float)acc;
                }
    return RP_OK;
}

/*
 * Backward data, as a gather: input position iy receives from output oy
 * through filter tap ky exactly when oy*stride - pad + ky == iy.
 */
rp_status kref_conv2d_bwd_data(float *dx, const void *dy, const float *w,
                               const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dx || !dy || !w) return RP_ERROR(RP_ERR_INVALID, "kref_conv2d_bwd_data: NULL dx, dy or w");
    const int C = d->c, S = d->stride, P = d->pad, O = d->o;
    const bool bf = d->compute == RP_BF16;
    for (int n = 0; n < d->n; n++)
        for (int iy = 0; iy < d->h; iy++)
            for (int ix = 0; ix < d->w; ix++)
                for (int c = 0; c < C; c++) {
                    double acc = 0.0;
                    for (int ky = 0; ky < d->kh; ky++) {
                        int ty = iy + P - ky;
                        if (ty < 0 || ty % S != 0 || ty / S >= d->oh) continue;
                        int oy = ty / S;
                        for (int kx = 0; kx < d->kw; kx++) {
                            int tx = ix + P - kx;
                            if (tx < 0 || tx % S != 0 || tx / S >= d->ow) continue;
                            int ox = tx / S;
                            int64_t dyp = (((int64_t)n * d->oh + oy) * d->ow + ox) * O;
                            for (int o = 0; o < O; o++) {
                                double wv =
                                    in_val(w[(((int64_t)o * d->kh + ky) * d->kw + kx) * C + c], bf);
                                acc += in_val(act_at(dy, dyp + o, d->dy_type), bf) * wv;
                            }
                        }
                    }
                    dx[(((int64_t)n * d->h + iy) * d->w + ix) * C + c] = (float)acc;
                }
    return RP_OK;
}

rp_status kernels_conv2d_bwd_pair(const kernels_table *k, float *dx, float *dw, float *db,
                                  const void *dy, const float *w, const void *x,
                                  const kernels_conv_desc *d)
{
    RP_CHECK(k->conv2d_bwd_data(dx, dy, w, d));
    return k->conv2d_bwd_weights(dw, db, dy, x, d);
}

/* Backward weights: each filter tap correlates dy with the shifted input. */
rp_status kref_conv2d_bwd_weights(float *dw, float *db, const void *dy, const void *x,
                                  const kernels_conv_desc *d)
{
    RP_CHECK(kernels_conv_desc_validate(d));
    if (!dw || !dy || !x)
        return RP_ERROR(RP_ERR_INVALID, "kref_conv2d_bwd_weights: NULL dw, dy or x");
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad, O = d->o;
    const bool bf = d->compute == RP_BF16;
    for (int o = 0; o < O; o++)
        for (int ky = 0; ky < d->kh; ky++)
            for (int kx = 0; kx < d->kw; kx++)
                for (int c = 0; c < C; c++) {
                    double acc = 0.0;
                    for (int n = 0; n < d->n; n++)
                        for (int oy = 0; oy < d->oh; oy++) {
                            int iy = oy * S - P + ky;
                            if (iy < 0 || iy >= H) continue;
                            for (int ox = 0; ox < d->ow; ox++) {
                                int ix = ox * S - P + kx;
                                if (ix < 0 || ix >= W) continue;
                                double g = in_val(
                                    act_at(dy, (((int64_t)n * d->oh + oy) * d->ow + ox) * O + o,
                                           d->dy_type),
                                    bf);
                                acc +=
                                    g * in_val(act_at(x, (((int64_t)n * H + iy) * W + ix) * C + c,
                                                      d->x_type),
                                               bf);
                            }
                        }
                    dw[(((int64_t)o * d->kh + ky) * d->kw + kx) * C + c] = (float)acc;
                }
    if (db) {
        int64_t rows = (int64_t)d->n * d->oh * d->ow;
        for (int o = 0; o < O; o++) {
            double acc = 0.0;
            for (int64_t r = 0; r < rows; r++)
                acc += in_val(act_at(dy, r * O + o, d->dy_type), bf);
            db[o] = (float)acc;
        }
    }
    return RP_OK;
}

rp_status kref_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !argmax || !x)
        return RP_ERROR(RP_ERR_INVALID, "kref_maxpool_fwd: NULL y, argmax or x");
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad, K = d->k;
    const bool half = d->type == RP_BF16;
    for (int n = 0; n < d->n; n++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++)
                for (int c = 0; c < C; c++) {
                    float best = -INFINITY;
                    int64_t best_at = -1;
                    for (int ky = 0; ky < K; ky++) {
                        int iy = oy * S - P + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < K; kx++) {
                            int ix = ox * S - P + kx;
                            if (ix < 0 || ix >= W) continue;
                            int64_t at = (((int64_t)n * H + iy) * W + ix) * C + c;
                            float v = act_at(x, at, d->type);
                            if (best_at < 0 || v > best) {
                                best = v;
                                best_at = at;
                            }
                        }
                    }
                    int64_t out = (((int64_t)n * d->oh + oy) * d->ow + ox) * C + c;
                    if (half) /* the chosen input's own bits */
                        ((rp_bf16 *)y)[out] = ((const rp_bf16 *)x)[best_at];
                    else
                        ((float *)y)[out] = best;
                    argmax[out] = (int32_t)best_at;
                }
    return RP_OK;
}

rp_status kref_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                           const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !argmax || !dy)
        return RP_ERROR(RP_ERR_INVALID, "kref_maxpool_bwd: NULL dx, argmax or dy");
    int64_t in_elems = (int64_t)d->n * d->h * d->w * d->c;
    int64_t out_elems = (int64_t)d->n * d->oh * d->ow * d->c;
    for (int64_t i = 0; i < in_elems; i++)
        dx[i] = 0.0f;
    for (int64_t i = 0; i < out_elems; i++) {
        if (argmax[i] < 0 || argmax[i] >= in_elems)
            return RP_ERROR(RP_ERR_INVALID,
                            "kref_maxpool_bwd: argmax[%lld] = %d is outside "
                            "the %lld input elements",
                            (long long)i, (int)argmax[i], (long long)in_elems);
        dx[argmax[i]] += dy[i];
    }
    return RP_OK;
}

/* Number of window elements inside the input along one axis. */
static int window_count(int o, int k, int stride, int pad, int in)
{
    int lo = o * stride - pad, hi = lo + k;
    if (lo < 0) lo = 0;
    if (hi > in) hi = in;
    return hi - lo;
}

rp_status kref_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!y || !x) return RP_ERROR(RP_ERR_INVALID, "kref_avgpool_fwd: NULL y or x");
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad, K = d->k;
    for (int n = 0; n < d->n; n++)
        for (int oy = 0; oy < d->oh; oy++)
            for (int ox = 0; ox < d->ow; ox++) {
                int count = window_count(oy, K, S, P, H) * window_count(ox, K, S, P, W);
                for (int c = 0; c < C; c++) {
                    double acc = 0.0;
                    for (int ky = 0; ky < K; ky++) {
                        int iy = oy * S - P + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < K; kx++) {
                            int ix = ox * S - P + kx;
                            if (ix < 0 || ix >= W) continue;
                            acc += x[(((int64_t)n * H + iy) * W + ix) * C + c];
                        }
                    }
                    y[(((int64_t)n * d->oh + oy) * d->ow + ox) * C + c] = (float)(acc / count);
                }
            }
    return RP_OK;
}

/* Backward average pooling, as a gather over the outputs whose windows hold (iy, ix). */
rp_status kref_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d)
{
    RP_CHECK(kernels_pool_desc_validate(d));
    if (!dx || !dy) return RP_ERROR(RP_ERR_INVALID, "kref_avgpool_bwd: NULL dx or dy");
    const int C = d->c, H = d->h, W = d->w, S = d->stride, P = d->pad, K = d->k;
    for (int n = 0; n < d->n; n++)
        for (int iy = 0; iy < H; iy++)
            for (int ix = 0; ix < W; ix++)
                for (int c = 0; c < C; c++) {
                    double acc = 0.0;
                    for (int ky = 0; ky < K; ky++) {
                        int ty = iy + P - ky;
                        if (ty < 0 || ty % S != 0 || ty / S >= d->oh) continue;
                        int oy = ty / S;
                        for (int kx = 0; kx < K; kx++) {
                            int tx = ix + P - kx;
                            if (tx < 0 || tx % S != 0 || tx / S >= d->ow) continue;
                            int ox = tx / S;
                            int count = window_count(oy, K, S, P, H) * window_count(ox, K, S, P, W);
                            acc += (double)dy[(((int64_t)n * d->oh + oy) * d->ow + ox) * C + c] /
                                   count;
                        }
                    }
                    dx[(((int64_t)n * H + iy) * W + ix) * C + c] = (float)acc;
                }
    return RP_OK;
}
