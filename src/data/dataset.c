/*
 * dataset.c - synthetic datasets, statistics and the dataset's lifetime.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/folder_internal.h"
#include "replicator/data.h"

void rp_dataset_destroy(rp_dataset *ds)
{
    if (!ds) return;
    folder_source_destroy(ds->source);
    rp_free(ds->labels);
    rp_free(ds->pixels);
    rp_free(ds);
}

rp_status rp_dataset_pad(rp_dataset **out, const rp_dataset *in, int h, int w)
{
    if (!out) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_pad: out is NULL");
    *out = NULL;
    if (!in) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_pad: in is NULL");
    if (h < in->h || w < in->w)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_pad: %dx%d is smaller than %s's %dx%d images",
                        h, w, in->name, in->h, in->w);
    size_t row_in = (size_t)in->w * (size_t)in->c, row_out = (size_t)w * (size_t)in->c;
    size_t per = (size_t)h * row_out;
    rp_dataset *d = rp_calloc(sizeof *d);
    if (d) {
        d->pixels = rp_calloc((size_t)in->n * per);
        d->labels = rp_alloc((size_t)in->n * sizeof *d->labels);
    }
    if (!d || !d->pixels || !d->labels) {
        rp_dataset_destroy(d);
        return RP_ERROR(RP_ERR_NOMEM, "rp_dataset_pad: cannot allocate %lld images of %dx%dx%d",
                        (long long)in->n, h, w, in->c);
    }
    d->n = in->n;
    d->h = h;
    d->w = w;
    d->c = in->c;
    d->num_classes = in->num_classes;
    memcpy(d->labels, in->labels, (size_t)in->n * sizeof *d->labels);
    int top = (h - in->h) / 2, left = (w - in->w) / 2;
    for (int64_t i = 0; i < in->n; i++) {
        const uint8_t *src = in->pixels + (size_t)i * (size_t)in->h * row_in;
        uint8_t *dst =
            d->pixels + (size_t)i * per + (size_t)top * row_out + (size_t)left * (size_t)in->c;
        for (int y = 0; y < in->h; y++)
            memcpy(dst + (size_t)y * row_out, src + (size_t)y * row_in, row_in);
    }
    snprintf(d->name, sizeof d->name, "%.40s@%dx%d", in->name, h, w);
    *out = d;
    return RP_OK;
}

/*
 * Pixel byte j is byte (j % 16) of Philox block j / 16 (words little-end
 * first, extracted by shifts so the result does not depend on the host's byte
 * order); label i comes from block i of a second stream. Both streams are
 * keyed by the seed, so any part of the data can be regenerated on its own.
 */
rp_status rp_dataset_synthetic(rp_dataset **ds, int64_t n, int h, int w, int c, int num_classes,
                               uint64_t seed)
{
    rp_status status = RP_OK;
    uint8_t *pixels = NULL;
    int32_t *labels = NULL;
    rp_dataset *out = NULL;

    if (!ds) return RP_ERROR(RP_ERR_INVALID, "rp_dataset_synthetic: ds is NULL");
    *ds = NULL;
    if (n <= 0 || h <= 0 || w <= 0 || c <= 0 || num_classes <= 0)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_synthetic: n %lld, h %d, w %d, c %d and num_classes %d must "
                        "all be positive",
                        (long long)n, h, w, c, num_classes);
    /* h * w < 2^62 cannot overflow; the two products after it are checked. */
    uint64_t hw = (uint64_t)h * (uint64_t)w;
    uint64_t per_image = hw * (uint64_t)c;
    if (hw > (uint64_t)INT64_MAX / (uint64_t)c || per_image > (uint64_t)INT64_MAX / (uint64_t)n ||
        (uint64_t)n > SIZE_MAX / sizeof(int32_t))
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_synthetic: %lld images of %dx%dx%d bytes overflow the address "
                        "space",
                        (long long)n, h, w, c);
    uint64_t total = per_image * (uint64_t)n;

    pixels = rp_alloc((size_t)total);
    labels = rp_alloc((size_t)n * sizeof *labels);
    out = rp_calloc(sizeof *out);
    if (!pixels || !labels || !out) {
        status = RP_ERROR(RP_ERR_NOMEM,
                          "rp_dataset_synthetic: cannot allocate %lld images of %dx%dx%d "
                          "(%llu bytes)",
                          (long long)n, h, w, c, (unsigned long long)total);
        goto cleanup;
    }

    uint64_t pixel_key = rp_hash_str(seed, "synthetic/pixels");
    uint64_t label_key = rp_hash_str(seed, "synthetic/labels");
    uint32_t block[4];
    for (uint64_t b = 0; b * 16 < total; b++) {
        rp_philox(pixel_key, b, block);
        uint64_t left = total - b * 16;
        int bytes = left < 16 ? (int)left : 16;
        uint8_t *dst = pixels + b * 16;
        for (int k = 0; k < bytes; k++)
            dst[k] = (uint8_t)(block[k >> 2] >> (8 * (k & 3)));
    }
    for (int64_t i = 0; i < n; i++) {
        rp_philox(label_key, (uint64_t)i, block);
        /* Multiply-shift maps a 32-bit word onto [0, num_classes) almost uniformly. */
        labels[i] = (int32_t)(((uint64_t)block[0] * (uint64_t)num_classes) >> 32);
    }

    out->n = n;
    out->h = h;
    out->w = w;
    out->c = c;
    out->num_classes = num_classes;
    out->pixels = pixels;
    out->labels = labels;
    snprintf(out->name, sizeof out->name, "synthetic/%dx%dx%d", h, w, c);
    pixels = NULL;
    labels = NULL;
    *ds = out;
    out = NULL;

cleanup:
    rp_free(out);
    rp_free(labels);
    rp_free(pixels);
    return status;
}

/*
 * A histogram of byte values per channel makes the statistics exact up to
 * the final double arithmetic and independent of the summation order, and
 * the two-pass variance over 256 bins avoids E[x^2] - E[x]^2 cancellation.
 */
rp_status rp_dataset_channel_stats(const rp_dataset *ds, float *mean, float *std)
{
    rp_status status = RP_OK;
    uint64_t *hist = NULL;

    if (!ds || !mean || !std)
        return RP_ERROR(RP_ERR_INVALID, "rp_dataset_channel_stats: %s is NULL",
                        !ds     ? "ds"
                        : !mean ? "mean"
                                : "std");
    if (ds->source && ds->c <= 3) {
        /* Image files: the configured normalisation (decoding every file would take hours). */
        memcpy(mean, ds->source->cfg.mean, (size_t)ds->c * sizeof *mean);
        memcpy(std, ds->source->cfg.std, (size_t)ds->c * sizeof *std);
        return RP_OK;
    }
    if (ds->n <= 0 || ds->h <= 0 || ds->w <= 0 || ds->c <= 0 || !ds->pixels)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_dataset_channel_stats: dataset \"%s\" is empty (n %lld, %dx%dx%d)",
                        ds->name, (long long)ds->n, ds->h, ds->w, ds->c);

    int c = ds->c;
    hist = rp_calloc((size_t)c * 256 * sizeof *hist);
    if (!hist) {
        status =
            RP_ERROR(RP_ERR_NOMEM, "rp_dataset_channel_stats: cannot allocate %d histograms", c);
        goto cleanup;
    }
    uint64_t positions = (uint64_t)ds->n * (uint64_t)ds->h * (uint64_t)ds->w;
    const uint8_t *p = ds->pixels;
    if (c == 1) {
        for (uint64_t i = 0; i < positions; i++)
            hist[p[i]]++;
    } else {
        for (uint64_t i = 0; i < positions; i++, p += c)
            for (int k = 0; k < c; k++)
                hist[(size_t)k * 256 + p[k]]++;
    }
    for (int k = 0; k < c; k++) {
        const uint64_t *hk = hist + (size_t)k * 256;
        double sum = 0;
        for (int v = 0; v < 256; v++)
            sum += (double)hk[v] * v;
        double m = sum / 255.0 / (double)positions;
        double sq = 0;
        for (int v = 0; v < 256; v++) {
            double d = v / 255.0 - m;
            sq += (double)hk[v] * d * d;
        }
        mean[k] = (float)m;
        std[k] = (float)sqrt(sq / (double)positions);
    }

cleanup:
    rp_free(hist);
    return status;
}
