/*
 * elementwise.cu - the CUDA table's element-wise, broadcasting, reduction and data-movement
 * kernels. Each computes what the reference (src/kernels/ref/) computes, with the same float
 * operations in the same order per element; sums over many elements use the fixed-order
 * reductions of common.cuh (deterministic; a different order from the reference's serial loop).
 */
#include <math.h>

#include "kernels/cuda/common.cuh"

__device__ static float act(float x, kernels_act a, float slope)
{
    switch (a) {
    case RP_ACT_RELU:
        return x > 0 ? x : 0;
    case RP_ACT_LEAKY_RELU:
        return x > 0 ? x : slope * x;
    case RP_ACT_TANH:
        return tanhf(x);
    case RP_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case RP_ACT_ELU:
        return x > 0 ? x : slope * expm1f(x);
    case RP_ACT_SQRT:
        return sqrtf(x);
    case RP_ACT_RECIPROCAL:
        return 1.0f / x;
    }
    return x;
}

void kcuda_act_fwd(float *y, const float *x, int64_t n, kernels_act a, float slope)
{
    kcuda_each(n, "act_fwd", [=] __device__(int64_t i) { y[i] = act(x[i], a, slope); });
}

void kcuda_act_bwd(float *dx, const float *dy, const float *y, const float *x, int64_t n,
                   kernels_act a, float slope)
{
    kcuda_each(n, "act_bwd", [=] __device__(int64_t i) {
        float d = 0;
        switch (a) {
        case RP_ACT_RELU:
            d = x[i] > 0 ? 1.0f : 0.0f;
            break;
        case RP_ACT_LEAKY_RELU:
            d = x[i] > 0 ? 1.0f : slope;
            break;
        case RP_ACT_TANH:
            d = 1.0f - y[i] * y[i];
            break;
        case RP_ACT_SIGMOID:
            d = y[i] * (1.0f - y[i]);
            break;
        case RP_ACT_ELU:
            d = x[i] > 0 ? 1.0f : y[i] + slope;
            break;
        case RP_ACT_SQRT:
            d = 0.5f / y[i];
            break;
        case RP_ACT_RECIPROCAL:
            d = -y[i] * y[i];
            break;
        }
        dx[i] = dy[i] * d;
    });
}

__device__ static float binop(float a, float b, kernels_binop op)
{
    switch (op) {
    case RP_BIN_ADD:
        return a + b;
    case RP_BIN_SUB:
        return a - b;
    case RP_BIN_MUL:
        return a * b;
    case RP_BIN_DIV:
        return a / b;
    }
    return a;
}

void kcuda_binary(float *y, const float *a, const float *b, int64_t n, int64_t nb, kernels_binop op)
{
    kcuda_each(n, "binary", [=] __device__(int64_t i) { y[i] = binop(a[i], b[i % nb], op); });
}

/* The 4-D shape and strides travel by value (the host arrays stay on the host). */
struct dims4 {
    int64_t v[4];
};
static dims4 dims_of(const int64_t *p)
{
    dims4 d;
    for (int k = 0; k < 4; k++)
        d.v[k] = p[k];
    return d;
}

void kcuda_binary_bcast(float *y, const float *a, const float *b, const int64_t *shape,
                        const int64_t *bstride, kernels_binop op)
{
    dims4 sh = dims_of(shape), bs = dims_of(bstride);
    int64_t n = sh.v[0] * sh.v[1] * sh.v[2] * sh.v[3];
    kcuda_each(n, "binary_bcast", [=] __device__(int64_t i) {
        int64_t r = i, j = 0;
        for (int d = 3; d >= 0; d--) {
            j += (r % sh.v[d]) * bs.v[d];
            r /= sh.v[d];
        }
        y[i] = binop(a[i], b[j], op);
    });
}

/* Offset of the r-th reduced element of output o (the reference's offset_of). */
__device__ static int64_t offset_of(dims4 sh, unsigned mask, int64_t o, int64_t r)
{
    int64_t off = 0, stride = 1;
    for (int d = 3; d >= 0; d--) {
        int64_t idx;
        if (mask & (1u << d)) {
            idx = r % sh.v[d];
            r /= sh.v[d];
        } else {
            idx = o % sh.v[d];
            o /= sh.v[d];
        }
        off += idx * stride;
        stride *= sh.v[d];
    }
    return off;
}

static int64_t kept_count(dims4 sh, unsigned mask)
{
    int64_t n = 1;
    for (int d = 0; d < 4; d++)
        if (!(mask & (1u << d))) n *= sh.v[d];
    return n;
}

/* One block per output: its threads stride over the reduced elements, then the tree. */
__global__ static void reduce_axes_k(float *y, const float *x, dims4 sh, unsigned mask,
                                     int64_t nred, float scale, bool accumulate)
{
    int64_t o = blockIdx.x;
    double s = 0;
    for (int64_t r = threadIdx.x; r < nred; r += blockDim.x)
        s += x[offset_of(sh, mask, o, r)];
    s = kcuda_dev_block_sum(s);
    if (threadIdx.x == 0) y[o] = (float)((accumulate ? (double)y[o] : 0.0) + (double)scale * s);
}

void kcuda_reduce_axes(float *y, const float *x, const int64_t *shape, unsigned mask, float scale,
                       bool accumulate)
{
    dims4 sh = dims_of(shape);
    int64_t total = sh.v[0] * sh.v[1] * sh.v[2] * sh.v[3], nout = kept_count(sh, mask);
    if (nout <= 0 || total <= 0) return;
    int64_t nred = total / nout;
    unsigned threads = nred >= 256 ? 256 : nred >= 64 ? 64 : 32;
    /* (A grid's x dimension holds 2^31-1 blocks: one launch covers any tensor here.) */
    reduce_axes_k<<<(unsigned)nout, threads, 0, kcuda_stream()>>>(y, x, sh, mask, nred, scale,
                                                                  accumulate);
    LAUNCHED("reduce_axes");
}

void kcuda_expand_axes(float *x, const float *y, const int64_t *shape, unsigned mask, float scale,
                       bool accumulate)
{
    dims4 sh = dims_of(shape);
    int64_t n = sh.v[0] * sh.v[1] * sh.v[2] * sh.v[3];
    kcuda_each(n, "expand_axes", [=] __device__(int64_t k) {
        /* k's index over the kept axes, row-major. */
        int64_t r = k, o = 0, ostride = 1;
        for (int d = 3; d >= 0; d--) {
            int64_t idx = r % sh.v[d];
            r /= sh.v[d];
            if (!(mask & (1u << d))) {
                o += idx * ostride;
                ostride *= sh.v[d];
            }
        }
        x[k] = (accumulate ? x[k] : 0.0f) + scale * y[o];
    });
}

void kcuda_clamp_fwd(float *y, const float *x, int64_t n, float lo, float hi)
{
    kcuda_each(n, "clamp_fwd", [=] __device__(int64_t i) {
        y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
    });
}

void kcuda_clamp_bwd(float *dx, const float *dy, const float *x, int64_t n, float lo, float hi)
{
    kcuda_each(n, "clamp_bwd",
               [=] __device__(int64_t i) { dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f; });
}

void kcuda_select_eq_acc(float *dx, const float *g, const float *x, const float *y, int64_t n)
{
    kcuda_each(n, "select_eq_acc", [=] __device__(int64_t i) {
        if (x[i] == y[i]) dx[i] += g[i];
    });
}

/* sum and sum_squares wait for every stream first: their input may be another thread's (the
   global norm over a parameter block), and they wait for the result anyway. */
double kcuda_sum_squares(const float *x, int64_t n)
{
    if (n <= 0) return 0;
    CU(cudaDeviceSynchronize());
    return kcuda_sum_of(n, [=] __device__(int64_t i) { return (double)x[i] * x[i]; });
}

double kcuda_sum(const float *x, int64_t n)
{
    if (n <= 0) return 0;
    CU(cudaDeviceSynchronize());
    return kcuda_sum_of(n, [=] __device__(int64_t i) { return (double)x[i]; });
}

void kcuda_scale_inplace(float *y, float s, int64_t n)
{
    kcuda_each(n, "scale_inplace", [=] __device__(int64_t i) { y[i] *= s; });
}

void kcuda_scale(float *y, const float *x, float s, int64_t n, bool accumulate)
{
    kcuda_each(n, "scale",
               [=] __device__(int64_t i) { y[i] = (accumulate ? y[i] : 0.0f) + s * x[i]; });
}

void kcuda_add_inplace(float *y, const float *x, int64_t n)
{
    kcuda_each(n, "add_inplace", [=] __device__(int64_t i) { y[i] += x[i]; });
}

void kcuda_mul(float *y, const float *a, const float *b, int64_t n, bool accumulate)
{
    kcuda_each(n, "mul",
               [=] __device__(int64_t i) { y[i] = (accumulate ? y[i] : 0.0f) + a[i] * b[i]; });
}

void kcuda_reduce_rows(float *y, const float *x, int64_t rows, int64_t nb, bool accumulate)
{
    kcuda_col_sums<1>(
        rows, (int)nb, [=] __device__(int64_t i, int j, double *acc) { acc[0] += x[i * nb + j]; },
        [=] __device__(int j, const double *s) {
            y[j] = (float)((accumulate ? y[j] : 0.0) + s[0]);
        });
}

void kcuda_add_scalar(float *y, float s, int64_t n)
{
    kcuda_each(n, "add_scalar", [=] __device__(int64_t i) { y[i] += s; });
}

void kcuda_copy_cols(float *y, int64_t ldy, int64_t off, const float *x, int64_t rows, int64_t w)
{
    kcuda_each(rows * w, "copy_cols", [=] __device__(int64_t k) {
        int64_t i = k / w, j = k % w;
        y[i * ldy + off + j] = x[k];
    });
}

void kcuda_gather_cols(float *y, const float *x, int64_t ldx, int64_t off, int64_t rows, int64_t w,
                       bool accumulate)
{
    kcuda_each(rows * w, "gather_cols", [=] __device__(int64_t k) {
        int64_t i = k / w, j = k % w;
        y[k] = (accumulate ? y[k] : 0.0f) + x[i * ldx + off + j];
    });
}

template <typename T> static void upsample2x_fwd_t(T *y, const T *x, int n, int h, int w, int c)
{
    int64_t total = (int64_t)n * 2 * h * 2 * w * c;
    kcuda_each(total, "upsample2x_fwd", [=] __device__(int64_t k) {
        int64_t ch = k % c, r = k / c;
        int64_t j = r % (2 * w), i = (r / (2 * w)) % (2 * h), b = r / (4 * (int64_t)h * w);
        y[k] = x[((b * h + i / 2) * w + j / 2) * c + ch];
    });
}

void kcuda_upsample2x_fwd(void *y, const void *x, rp_dtype type, int n, int h, int w, int c)
{
    if (type == RP_BF16)
        upsample2x_fwd_t(static_cast<uint16_t *>(y), static_cast<const uint16_t *>(x), n, h, w, c);
    else
        upsample2x_fwd_t(static_cast<float *>(y), static_cast<const float *>(x), n, h, w, c);
}

void kcuda_relu_fwd_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    kcuda_each(n, "relu_fwd_bf16",
               [=] __device__(int64_t k) { y[k] = kcuda_dev_bf16_round(x[k] > 0 ? x[k] : 0.0f); });
}

void kcuda_upsample2x_bwd(float *dx, const float *dy, int n, int h, int w, int c)
{
    int64_t total = (int64_t)n * h * w * c;
    kcuda_each(total, "upsample2x_bwd", [=] __device__(int64_t k) {
        int64_t ch = k % c, r = k / c;
        int64_t j = r % w, i = (r / w) % h, b = r / ((int64_t)h * w);
        float s = 0;
        for (int di = 0; di < 2; di++)
            for (int dj = 0; dj < 2; dj++)
                s += dy[((b * 2 * h + 2 * i + di) * 2 * w + 2 * j + dj) * c + ch];
        dx[k] = s;
    });
}

void kcuda_gap_fwd(float *y, const float *x, int n, int hw, int c)
{
    /* One thread per (image, channel), summing its hw values in order, as the reference. */
    kcuda_each((int64_t)n * c, "gap_fwd", [=] __device__(int64_t k) {
        int64_t b = k / c, ch = k % c;
        double s = 0;
        for (int p = 0; p < hw; p++)
            s += x[(b * hw + p) * c + ch];
        y[k] = (float)(s / hw);
    });
}

void kcuda_gap_bwd(float *dx, const float *dy, int n, int hw, int c)
{
    kcuda_each((int64_t)n * hw * c, "gap_bwd", [=] __device__(int64_t k) {
        int64_t ch = k % c, b = k / ((int64_t)hw * c);
        dx[k] = dy[b * c + ch] / (float)hw;
    });
}

void kcuda_embedding_fwd(float *y, const float *table, const int32_t *idx, int n, int d)
{
    kcuda_each((int64_t)n * d, "embedding_fwd", [=] __device__(int64_t k) {
        int64_t i = k / d, j = k % d;
        y[k] = table[(int64_t)idx[i] * d + j];
    });
}

void kcuda_embedding_bwd(float *dtable, const float *dy, const int32_t *idx, int n, int d)
{
    /* One thread per column, over the rows in order: repeated indices add up in the reference's
       order, with no atomics. */
    kcuda_each(d, "embedding_bwd", [=] __device__(int64_t j) {
        for (int i = 0; i < n; i++)
            dtable[(int64_t)idx[i] * d + j] += dy[(int64_t)i * d + j];
    });
}

void kcuda_cast_f32_bf16(rp_bf16 *y, const float *x, int64_t n)
{
    kcuda_each(n, "cast_f32_bf16",
               [=] __device__(int64_t i) { y[i] = kcuda_dev_bf16_round(x[i]); });
}

void kcuda_cast_bf16_f32(float *y, const rp_bf16 *x, int64_t n)
{
    kcuda_each(n, "cast_bf16_f32",
               [=] __device__(int64_t i) { y[i] = kcuda_dev_bf16_widen(x[i]); });
}
