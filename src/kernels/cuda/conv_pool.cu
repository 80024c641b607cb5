/*
 * conv_pool.cu - the CUDA table's convolutions (explicit im2col + cuBLAS) and pooling.
 *
 * A convolution over NHWC activations and OHWI weights is a GEMM over patches: with
 * P = oh*ow output pixels and K = kh*kw*c taps, the patches of a batch form col [n*P, K] and
 *   forward          y  [n*P, o] = col · W^T            (W is [o, K] row-major)
 *   backward data    dcol[n*P, K] = dy · W, then each dx element gathers its taps (col2im)
 *   backward weights dW [o, K] = dy^T · col, accumulated over chunks of images
 * The patch matrix holds kh*kw copies of the input, so images go through in chunks whose patch
 * matrix fits COL_BUDGET bytes. bf16 compute stores the patches and rounds the other operand
 * (W, or dy) to bf16 and runs cublasGemmEx on the tensor cores with f32 accumulation; the
 * results, and everything else, stay f32. Stream-ordered scratch holds the patches, so a
 * steady-state step reuses the pool's memory.
 *
 * cuDNN's convolutions (faster, implicit GEMM) are not used yet: docs/gpu.md.
 *
 * Pooling: one thread per output (forward) or per input (backward: a gather over the windows
 * that hold it, in the reference's order, so no atomics and the same sums).
 */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define COL_BUDGET ((size_t)256 << 20)

/* C[m,n] = op(A) op(B) (+ C when beta is 1), row-major, f32 or bf16 operands, f32 C. */
static void gemm_ex(bool ta, bool tb, int m, int n, int k, const void *a, int lda, const void *b,
                    int ldb, float beta, float *c, int ldc, bool bf16)
{
    const float alpha = 1.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    BLAS(kcuda_cublas.cublasGemmEx(kcuda_blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, t, ldb, a, t,
                                   lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

/* Images per chunk so that the patch matrix stays within the budget (at least one). */
static int chunk_images(const kernels_conv_desc *d, size_t elem)
{
    size_t per = (size_t)d->oh * d->ow * d->kh * d->kw * d->c * elem;
    size_t nb = per ? COL_BUDGET / per : (size_t)d->n;
    if (nb < 1) nb = 1;
    if (nb > (size_t)d->n) nb = (size_t)d->n;
    return (int)nb;
}

/* The patch matrix of images [n0, n0+nb): col[r, (ky*kw + kx)*c + ci], zero outside. */
template <typename TX, typename TC>
static void im2col(TC *col, const TX *x, const kernels_conv_desc d, int n0, int nb)
{
    const int64_t K = (int64_t)d.kh * d.kw * d.c, P = (int64_t)d.oh * d.ow;
    kcuda_each((int64_t)nb * P * K, "im2col", [=] __device__(int64_t e) {
        int64_t r = e / K, kk = e % K;
        int ci = (int)(kk % d.c), tap = (int)(kk / d.c), kx = tap % d.kw, ky = tap / d.kw;
        int64_t img = n0 + r / P, p = r % P;
        int oy = (int)(p / d.ow), ox = (int)(p % d.ow);
        int iy = oy * d.stride - d.pad + ky, ix = ox * d.stride - d.pad + kx;
        float v = 0;
        if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
            v = kcuda_dev_load(x, ((img * d.h + iy) * d.w + ix) * d.c + ci);
        kcuda_dev_store(col, e, v);
    });
}

static void round_to(uint16_t *y, const float *x, int64_t n)
{
    kcuda_each(n, "round to bf16",
               [=] __device__(int64_t i) { y[i] = kcuda_dev_bf16_round(x[i]); });
}

template <typename TX>
static void patches(void *col, const TX *x, const kernels_conv_desc *d, int n0, int nb, bool bf)
{
    if (bf)
        im2col(static_cast<uint16_t *>(col), x, *d, n0, nb);
    else
        im2col(static_cast<float *>(col), x, *d, n0, nb);
}

static void patches_any(void *col, const void *x, const kernels_conv_desc *d, int n0, int nb,
                        bool bf)
{
    if (d->x_type == RP_BF16)
        patches(col, static_cast<const uint16_t *>(x), d, n0, nb, bf);
    else
        patches(col, static_cast<const float *>(x), d, n0, nb, bf);
}

/*
 * A 1x1 convolution of stride 1 without padding whose input is already stored in the compute
 * type: its patch matrix is the input itself ([n*h*w, c]), so the GEMM reads x in place.
 */
static bool patches_are_x(const kernels_conv_desc *d, bool bf)
{
    return d->kh == 1 && d->kw == 1 && d->stride == 1 && d->pad == 0 &&
           d->x_type == (bf ? RP_BF16 : RP_F32);
}

/* The patch matrix of images [n0, n0+nb): written into col, or x itself (patches_are_x). */
static const void *patches_of(void *col, const void *x, const kernels_conv_desc *d, int n0, int nb,
                              bool bf)
{
    if (patches_are_x(d, bf))
        return (const char *)x + (size_t)n0 * d->h * d->w * d->c * (bf ? 2 : 4);
    patches_any(col, x, d, n0, nb, bf);
    return col;
}

rp_status kcuda_conv2d_fwd(void *y, const void *x, const float *w, const float *bias,
                           const kernels_conv_desc *d)
{
    const bool bf = d->compute == RP_BF16, ybf = d->y_type == RP_BF16;
    const int64_t K = (int64_t)d->kh * d->kw * d->c, P = (int64_t)d->oh * d->ow, O = d->o;
    const size_t elem = bf ? 2 : 4;
    const int nb = chunk_images(d, elem);
    void *col = kcuda_scratch(patches_are_x(d, bf) ? 16 : (size_t)nb * P * K * elem);
    uint16_t *w16 = bf ? (uint16_t *)kcuda_scratch((size_t)O * K * 2) : NULL;
    float *out = ybf ? (float *)kcuda_scratch((size_t)nb * P * O * 4) : NULL;
    if (col && (!bf || w16) && (!ybf || out)) {
        if (bf) round_to(w16, w, O * K);
        for (int n0 = 0; n0 < d->n; n0 += nb) {
            int cnt = d->n - n0 < nb ? d->n - n0 : nb;
            int64_t rows = (int64_t)cnt * P;
            const void *a = patches_of(col, x, d, n0, cnt, bf);
            float *dst = ybf ? out : (float *)y + (int64_t)n0 * P * O;
            gemm_ex(false, true, (int)rows, (int)O, (int)K, a, (int)K,
                    bf ? (const void *)w16 : (const void *)w, (int)K, 0.0f, dst, (int)O, bf);
            if (ybf) {
                uint16_t *y16 = (uint16_t *)y + (int64_t)n0 * P * O;
                kcuda_each(rows * O, "conv bias (bf16 y)", [=] __device__(int64_t e) {
                    y16[e] = kcuda_dev_bf16_round(dst[e] + (bias ? bias[e % O] : 0.0f));
                });
            } else if (bias) {
                kcuda_each(rows * O, "conv bias",
                           [=] __device__(int64_t e) { dst[e] += bias[e % O]; });
            }
        }
    }
    kcuda_scratch_free(out);
    kcuda_scratch_free(w16);
    kcuda_scratch_free(col);
    return kcuda_take_error();
}

rp_status kcuda_conv2d_bwd_data(float *dx, const void *dy_any, const float *w,
                                const kernels_conv_desc *d)
{
    const float *dy = static_cast<const float *>(dy_any); /* f32: table.c refuses a bf16 dy */
    const bool bf = d->compute == RP_BF16;
    const int64_t K = (int64_t)d->kh * d->kw * d->c, P = (int64_t)d->oh * d->ow, O = d->o;
    const int nb = chunk_images(d, 4);
    float *dcol = (float *)kcuda_scratch((size_t)nb * P * K * 4);
    uint16_t *w16 = bf ? (uint16_t *)kcuda_scratch((size_t)O * K * 2) : NULL;
    uint16_t *dy16 = bf ? (uint16_t *)kcuda_scratch((size_t)nb * P * O * 2) : NULL;
    if (dcol && (!bf || (w16 && dy16))) {
        if (bf) round_to(w16, w, O * K);
        const kernels_conv_desc dd = *d;
        for (int n0 = 0; n0 < d->n; n0 += nb) {
            int cnt = d->n - n0 < nb ? d->n - n0 : nb;
            int64_t rows = (int64_t)cnt * P;
            const float *g = dy + (int64_t)n0 * P * O;
            if (bf) round_to(dy16, g, rows * O);
            gemm_ex(false, false, (int)rows, (int)K, (int)O,
                    bf ? (const void *)dy16 : (const void *)g, (int)O,
                    bf ? (const void *)w16 : (const void *)w, (int)K, 0.0f, dcol, (int)K, bf);
            /* col2im as a gather: dx(n, iy, ix, ci) sums the taps that read it. */
            float *dxc = dx + (int64_t)n0 * d->h * d->w * d->c;
            kcuda_each((int64_t)cnt * d->h * d->w * d->c, "col2im", [=] __device__(int64_t e) {
                int ci = (int)(e % dd.c);
                int64_t r = e / dd.c;
                int ix = (int)(r % dd.w), iy = (int)((r / dd.w) % dd.h);
                int64_t img = r / ((int64_t)dd.w * dd.h);
                float acc = 0;
                for (int ky = 0; ky < dd.kh; ky++) {
                    int ty = iy + dd.pad - ky;
                    if (ty < 0 || ty % dd.stride != 0 || ty / dd.stride >= dd.oh) continue;
                    int oy = ty / dd.stride;
                    for (int kx = 0; kx < dd.kw; kx++) {
                        int tx = ix + dd.pad - kx;
                        if (tx < 0 || tx % dd.stride != 0 || tx / dd.stride >= dd.ow) continue;
                        int ox = tx / dd.stride;
                        int64_t row = img * P + (int64_t)oy * dd.ow + ox;
                        acc += dcol[row * K + ((int64_t)ky * dd.kw + kx) * dd.c + ci];
                    }
                }
                dxc[e] = acc;
            });
        }
    }
    kcuda_scratch_free(dy16);
    kcuda_scratch_free(w16);
    kcuda_scratch_free(dcol);
    return kcuda_take_error();
}

rp_status kcuda_conv2d_bwd_weights(float *dw, float *db, const void *dy_any, const void *x,
                                   const kernels_conv_desc *d)
{
    const float *dy = static_cast<const float *>(dy_any); /* f32: table.c refuses a bf16 dy */
    const bool bf = d->compute == RP_BF16;
    const int64_t K = (int64_t)d->kh * d->kw * d->c, P = (int64_t)d->oh * d->ow, O = d->o;
    const size_t elem = bf ? 2 : 4;
    const int nb = chunk_images(d, elem);
    void *col = kcuda_scratch(patches_are_x(d, bf) ? 16 : (size_t)nb * P * K * elem);
    uint16_t *dy16 = bf ? (uint16_t *)kcuda_scratch((size_t)nb * P * O * 2) : NULL;
    if (col && (!bf || dy16)) {
        for (int n0 = 0; n0 < d->n; n0 += nb) {
            int cnt = d->n - n0 < nb ? d->n - n0 : nb;
            int64_t rows = (int64_t)cnt * P;
            const float *g = dy + (int64_t)n0 * P * O;
            if (bf) round_to(dy16, g, rows * O);
            const void *b = patches_of(col, x, d, n0, cnt, bf);
            gemm_ex(true, false, (int)O, (int)K, (int)rows,
                    bf ? (const void *)dy16 : (const void *)g, (int)O, b, (int)K,
                    n0 == 0 ? 0.0f : 1.0f, dw, (int)K, bf);
        }
        if (db) {
            const int64_t m = (int64_t)d->n * P;
            kcuda_col_sums<1>(
                m, (int)O,
                [=] __device__(int64_t i, int j, double *acc) {
                    float v = dy[i * O + j];
                    acc[0] += bf ? kcuda_dev_bf16_widen(kcuda_dev_bf16_round(v)) : v;
                },
                [=] __device__(int j, const double *s) { db[j] = (float)s[0]; });
        }
    }
    kcuda_scratch_free(dy16);
    kcuda_scratch_free(col);
    return kcuda_take_error();
}

/* ---- pooling ---- */

template <typename T>
static void maxpool_fwd_t(T *y, int32_t *argmax, const T *x, const kernels_pool_desc *d)
{
    const kernels_pool_desc p = *d;
    kcuda_each((int64_t)p.n * p.oh * p.ow * p.c, "maxpool_fwd", [=] __device__(int64_t e) {
        int c = (int)(e % p.c);
        int64_t r = e / p.c;
        int ox = (int)(r % p.ow), oy = (int)((r / p.ow) % p.oh);
        int64_t n = r / ((int64_t)p.ow * p.oh);
        float best = -INFINITY;
        int64_t at_best = -1;
        for (int ky = 0; ky < p.k; ky++) {
            int iy = oy * p.stride - p.pad + ky;
            if (iy < 0 || iy >= p.h) continue;
            for (int kx = 0; kx < p.k; kx++) {
                int ix = ox * p.stride - p.pad + kx;
                if (ix < 0 || ix >= p.w) continue;
                int64_t at = ((n * p.h + iy) * p.w + ix) * p.c + c;
                float v = kcuda_dev_load(x, at);
                if (at_best < 0 || v > best) {
                    best = v;
                    at_best = at;
                }
            }
        }
        y[e] = x[at_best]; /* the winner's own bits, f32 or bf16 */
        argmax[e] = (int32_t)at_best;
    });
}

rp_status kcuda_maxpool_fwd(void *y, int32_t *argmax, const void *x, const kernels_pool_desc *d)
{
    if (d->type == RP_BF16)
        maxpool_fwd_t(static_cast<uint16_t *>(y), argmax, static_cast<const uint16_t *>(x), d);
    else
        maxpool_fwd_t(static_cast<float *>(y), argmax, static_cast<const float *>(x), d);
    return kcuda_take_error();
}

/* The outputs along one axis whose windows hold input position i: [lo, hi]. */
__device__ static void windows_of(int i, int k, int stride, int pad, int out, int *lo, int *hi)
{
    int a = i + pad - k + 1; /* oy*stride >= a */
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    int b = (i + pad) / stride;
    *hi = b < out - 1 ? b : out - 1;
}

rp_status kcuda_maxpool_bwd(float *dx, const int32_t *argmax, const float *dy,
                            const kernels_pool_desc *d)
{
    const kernels_pool_desc p = *d;
    kcuda_each((int64_t)p.n * p.h * p.w * p.c, "maxpool_bwd", [=] __device__(int64_t e) {
        int c = (int)(e % p.c);
        int64_t r = e / p.c;
        int ix = (int)(r % p.w), iy = (int)((r / p.w) % p.h);
        int64_t n = r / ((int64_t)p.w * p.h);
        int y0, y1, x0, x1;
        windows_of(iy, p.k, p.stride, p.pad, p.oh, &y0, &y1);
        windows_of(ix, p.k, p.stride, p.pad, p.ow, &x0, &x1);
        float acc = 0.0f;
        /* Ascending output index: the reference's order of adding. */
        for (int oy = y0; oy <= y1; oy++)
            for (int ox = x0; ox <= x1; ox++) {
                int64_t o = ((n * p.oh + oy) * p.ow + ox) * p.c + c;
                if (argmax[o] == e) acc += dy[o];
            }
        dx[e] = acc;
    });
    return kcuda_take_error();
}

__device__ static int window_count(int o, int k, int stride, int pad, int in)
{
    int lo = o * stride - pad, hi = lo + k;
    if (lo < 0) lo = 0;
    if (hi > in) hi = in;
    return hi - lo;
}

rp_status kcuda_avgpool_fwd(float *y, const float *x, const kernels_pool_desc *d)
{
    const kernels_pool_desc p = *d;
    kcuda_each((int64_t)p.n * p.oh * p.ow * p.c, "avgpool_fwd", [=] __device__(int64_t e) {
        int c = (int)(e % p.c);
        int64_t r = e / p.c;
        int ox = (int)(r % p.ow), oy = (int)((r / p.ow) % p.oh);
        int64_t n = r / ((int64_t)p.ow * p.oh);
        int count = window_count(oy, p.k, p.stride, p.pad, p.h) *
                    window_count(ox, p.k, p.stride, p.pad, p.w);
        double acc = 0.0;
        for (int ky = 0; ky < p.k; ky++) {
            int iy = oy * p.stride - p.pad + ky;
            if (iy < 0 || iy >= p.h) continue;
            for (int kx = 0; kx < p.k; kx++) {
                int ix = ox * p.stride - p.pad + kx;
                if (ix < 0 || ix >= p.w) continue;
                acc += x[((n * p.h + iy) * p.w + ix) * p.c + c];
            }
        }
        y[e] = (float)(acc / count);
    });
    return kcuda_take_error();
}

rp_status kcuda_avgpool_bwd(float *dx, const float *dy, const kernels_pool_desc *d)
{
    const kernels_pool_desc p = *d;
    kcuda_each((int64_t)p.n * p.h * p.w * p.c, "avgpool_bwd", [=] __device__(int64_t e) {
        int c = (int)(e % p.c);
        int64_t r = e / p.c;
        int ix = (int)(r % p.w), iy = (int)((r / p.w) % p.h);
        int64_t n = r / ((int64_t)p.w * p.h);
        double acc = 0.0;
        for (int ky = 0; ky < p.k; ky++) {
            int ty = iy + p.pad - ky;
            if (ty < 0 || ty % p.stride != 0 || ty / p.stride >= p.oh) continue;
            int oy = ty / p.stride;
            for (int kx = 0; kx < p.k; kx++) {
                int tx = ix + p.pad - kx;
                if (tx < 0 || tx % p.stride != 0 || tx / p.stride >= p.ow) continue;
                int ox = tx / p.stride;
                int count = window_count(oy, p.k, p.stride, p.pad, p.h) *
                            window_count(ox, p.k, p.stride, p.pad, p.w);
                acc += (double)dy[((n * p.oh + oy) * p.ow + ox) * p.c + c] / count;
            }
        }
        dx[e] = (float)acc;
    });
    return kcuda_take_error();
}
