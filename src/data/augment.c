/*
 * augment.c - torchvision's ImageNet transforms in C: RandomResizedCrop's
 * box, Resize + CenterCrop's geometry, Pillow's bilinear resampling, and
 * the flip and normalisation.
 *
 * The definitions are those of torchvision 0.14 (transforms.py,
 * functional.py, _presets.py) over PIL images, whose resize is Pillow's
 * ImagingResample (Resample.c): docs/data.md cites each.
 */
#include <math.h>
#include <string.h>

#include "data/folder_internal.h"

/* Python's round(): half to even, which rint() gives in the default rounding mode. */
static int round_half_even(double x)
{
    return (int)rint(x);
}

aug_box aug_random_resized_crop(int H, int W, double scale_min, double scale_max, double ratio_min,
                                double ratio_max, aug_uniform_fn uniform, void *ctx)
{
    aug_box b;
    double area = (double)H * (double)W;
    double lr0 = log(ratio_min), lr1 = log(ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (scale_min + (scale_max - scale_min) * uniform(ctx));
        double aspect = exp(lr0 + (lr1 - lr0) * uniform(ctx)); /* log-uniform */
        int w = round_half_even(sqrt(target * aspect));
        int h = round_half_even(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            /* torch.randint(0, H - h + 1): top in [0, H - h]. */
            b.top = (int)floor(uniform(ctx) * (double)(H - h + 1));
            b.left = (int)floor(uniform(ctx) * (double)(W - w + 1));
            b.h = h;
            b.w = w;
            return b;
        }
    }
    /* Fallback: the central crop, its aspect ratio clamped to the range. */
    double in_ratio = (double)W / (double)H;
    double rmin = ratio_min < ratio_max ? ratio_min : ratio_max;
    double rmax = ratio_min < ratio_max ? ratio_max : ratio_min;
    if (in_ratio < rmin) {
        b.w = W;
        b.h = round_half_even(b.w / rmin);
    } else if (in_ratio > rmax) {
        b.h = H;
        b.w = round_half_even(b.h * rmax);
    } else {
        b.w = W;
        b.h = H;
    }
    b.top = (H - b.h) / 2;
    b.left = (W - b.w) / 2;
    return b;
}

void aug_eval_geometry(int H, int W, int resize, int crop, int *rh, int *rw, int *top, int *left)
{
    /* F.resize with an int: the short side becomes `resize`, the long one int(resize * long /
       short) (_compute_resized_output_size truncates). */
    if (W <= H) {
        *rw = resize;
        *rh = (int)((int64_t)resize * H / W);
    } else {
        *rh = resize;
        *rw = (int)((int64_t)resize * W / H);
    }
    /* F.center_crop: int(round((size - crop) / 2.0)), half to even. */
    *top = round_half_even((*rh - crop) / 2.0);
    *left = round_half_even((*rw - crop) / 2.0);
}

/* ---- per-sample random numbers ------------------------------------------- */

void aug_rng_init(aug_rng *r, const uint32_t key[2], uint32_t sample, int64_t epoch)
{
    r->key[0] = key[0];
    r->key[1] = key[1];
    /* Word 1 counts blocks; the loader's crop-and-flip draws use block 0 of the same key, but
       a dataset of files is never cropped by them, so the streams do not meet. */
    r->ctr[0] = sample;
    r->ctr[1] = 0;
    r->ctr[2] = (uint32_t)epoch;
    r->ctr[3] = (uint32_t)((uint64_t)epoch >> 32);
    r->used = 4;
}

uint32_t aug_rng_u32(aug_rng *r)
{
    if (r->used == 4) {
        rp_philox4x32(r->ctr, r->key, r->buf);
        r->ctr[1]++;
        r->used = 0;
    }
    return r->buf[r->used++];
}

double aug_rng_uniform(void *rng)
{
    aug_rng *r = rng;
    uint64_t hi = aug_rng_u32(r) >> 5, lo = aug_rng_u32(r) >> 6; /* 27 + 26 bits */
    return (double)(hi << 26 | lo) * (1.0 / 9007199254740992.0);
}

/* ---- Pillow's resampling ----------------------------------------------------- */

#define PRECISION_BITS (32 - 8 - 2)

void aug_scratch_free(aug_scratch *s)
{
    rp_free(s->coef);
    rp_free(s->bounds);
    rp_free(s->tmp);
    rp_free(s->acc);
    memset(s, 0, sizeof *s);
}

static double bilinear_filter(double x)
{
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* Taps per output value for a reduction from in0..in1 to out (precompute_coeffs's ksize). */
static int coeff_size(double in0, double in1, int out)
{
    double scale = (double)((float)in1 - (float)in0) / out;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(1.0 * filterscale) * 2 + 1;
}

/*
 * precompute_coeffs then normalize_coeffs_8bpc for output values [o0, o0 + n)
 * of a resize of [in0, in1) (Pillow keeps its box as floats) to out values.
 */
static void coeffs(int in_size, double in0d, double in1d, int out, int o0, int n, int ksize,
                   int *bounds, int32_t *kk)
{
    float in0 = (float)in0d, in1 = (float)in1d;
    double scale = (double)(in1 - in0) / out;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    double ss = 1.0 / filterscale;
    for (int t = 0; t < n; t++) {
        int xx = o0 + t;
        double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        /* The weights' sum first, then each weight divided by it, as Pillow does. */
        double ww = 0.0;
        for (int x = 0; x < xmax; x++)
            ww += bilinear_filter((x + xmin - center + 0.5) * ss);
        int32_t *kt = kk + (size_t)t * (size_t)ksize;
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax ? bilinear_filter((x + xmin - center + 0.5) * ss) : 0.0;
            if (ww != 0.0) v /= ww;
            kt[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                          : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
        }
        bounds[2 * t] = xmin;
        bounds[2 * t + 1] = xmax;
    }
}

static uint8_t clip8(int32_t in)
{
    if (in >= (1 << PRECISION_BITS << 8)) return 255;
    if (in <= 0) return 0;
    return (uint8_t)(in >> PRECISION_BITS);
}

static rp_status scratch_grow(void **buf, size_t *cap, size_t need)
{
    if (*cap >= need) return RP_OK;
    rp_free(*buf);
    *cap = 0;
    *buf = rp_alloc(need);
    if (!*buf) return RP_ERROR(RP_ERR_NOMEM, "cannot allocate %zu bytes to resize an image", need);
    *cap = need;
    return RP_OK;
}

rp_status aug_resample(aug_scratch *s, const uint8_t *src, size_t stride, int in_w, int in_h,
                       double x0, double y0, double x1, double y1, int out_w, int out_h, int ox,
                       int oy, int n_w, int n_h, uint8_t *dst)
{
    int kh = coeff_size(x0, x1, out_w), kv = coeff_size(y0, y1, out_h);
    size_t ncoef = (size_t)n_w * (size_t)kh + (size_t)n_h * (size_t)kv;
    RP_CHECK(scratch_grow((void **)&s->coef, &s->coef_cap, ncoef * sizeof(int32_t)));
    RP_CHECK(
        scratch_grow((void **)&s->bounds, &s->bounds_cap, 2 * (size_t)(n_w + n_h) * sizeof(int)));
    int32_t *kx = s->coef, *ky = s->coef + (size_t)n_w * (size_t)kh;
    int *bx = s->bounds, *by = s->bounds + 2 * (size_t)n_w;
    coeffs(in_w, x0, x1, out_w, ox, n_w, kh, bx, kx);
    coeffs(in_h, y0, y1, out_h, oy, n_h, kv, by, ky);

    /* The rows the vertical pass reads: the horizontal pass makes only those. */
    int first = by[0], last = by[0] + by[1];
    for (int t = 1; t < n_h; t++) {
        if (by[2 * t] < first) first = by[2 * t];
        if (by[2 * t] + by[2 * t + 1] > last) last = by[2 * t] + by[2 * t + 1];
    }
    int rows = last > first ? last - first : 0;
    RP_CHECK(scratch_grow((void **)&s->tmp, &s->tmp_cap,
                          (size_t)(rows > 0 ? rows : 1) * (size_t)n_w * 3));

    for (int y = 0; y < rows; y++) {
        const uint8_t *in = src + (size_t)(first + y) * stride;
        uint8_t *out = s->tmp + (size_t)y * (size_t)n_w * 3;
        for (int x = 0; x < n_w; x++) {
            const int32_t *k = kx + (size_t)x * (size_t)kh;
            const uint8_t *p = in + (size_t)bx[2 * x] * 3;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int t = 0; t < bx[2 * x + 1]; t++) {
                s0 += p[3 * t + 0] * k[t];
                s1 += p[3 * t + 1] * k[t];
                s2 += p[3 * t + 2] * k[t];
            }
            out[3 * x + 0] = clip8(s0);
            out[3 * x + 1] = clip8(s1);
            out[3 * x + 2] = clip8(s2);
        }
    }
    /* Tap by tap over a whole row of sums, so that the loop over the row vectorises; integer
       sums of non-negative terms, so the order changes no bit of Pillow's result. */
    size_t row = (size_t)n_w * 3;
    RP_CHECK(scratch_grow((void **)&s->acc, &s->acc_cap, row * sizeof(int32_t)));
    int32_t *acc = s->acc;
    for (int y = 0; y < n_h; y++) {
        const int32_t *k = ky + (size_t)y * (size_t)kv;
        const uint8_t *in = s->tmp + (size_t)(by[2 * y] - first) * row;
        int taps = by[2 * y + 1];
        uint8_t *out = dst + (size_t)y * row;
        for (size_t j = 0; j < row; j++)
            acc[j] = 1 << (PRECISION_BITS - 1);
        for (int t = 0; t < taps; t++) {
            const uint8_t *r = in + (size_t)t * row;
            int32_t w = k[t];
            for (size_t j = 0; j < row; j++)
                acc[j] += r[j] * w;
        }
        for (size_t j = 0; j < row; j++)
            out[j] = clip8(acc[j]);
    }
    return RP_OK;
}

void aug_flip_normalise(const uint8_t *src, int h, int w, bool flip, const float *scale,
                        const float *shift, float *dst)
{
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    const float t0 = shift[0], t1 = shift[1], t2 = shift[2];
    for (int y = 0; y < h; y++) {
        const uint8_t *in = src + (size_t)y * (size_t)w * 3;
        float *out = dst + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++) {
            const uint8_t *p = in + (size_t)(flip ? w - 1 - x : x) * 3;
            out[3 * x + 0] = (float)p[0] * s0 + t0;
            out[3 * x + 1] = (float)p[1] * s1 + t1;
            out[3 * x + 2] = (float)p[2] * s2 + t2;
        }
    }
}
