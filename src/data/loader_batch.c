/*
 * loader_batch.c - making one batch: the epoch's order (a per-epoch
 * Fisher-Yates shuffle), this replica's slice of the global batch, and for
 * each sample the gather, crop with padding, flip and normalisation. Plain
 * single-threaded C: it runs on the prefetch thread next to the training's
 * OpenMP threads, and allocates nothing.
 */
#include <stdio.h>
#include <string.h>

#include "data/folder_internal.h"
#include "data/loader_internal.h"

/*
 * The order of epoch e: Fisher-Yates over the identity, driven by the stream
 * (shuffle_seed, e). Starting from the identity every time makes the order a
 * pure function of (seed, e), whichever epoch was computed before.
 */
static void loader_shuffle(rp_loader *ld, int64_t epoch)
{
    uint32_t *perm = ld->perm;
    for (int64_t i = 0; i < ld->samples; i++)
        perm[i] = (uint32_t)i;
    rp_rng rng = rp_rng_make(ld->shuffle_seed, (uint64_t)epoch);
    for (int64_t i = ld->samples - 1; i > 0; i--) {
        uint32_t j = rp_rng_below(&rng, (uint32_t)(i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    ld->perm_epoch = epoch;
}

/*
 * Writes one image: source pixel (y + oy, x' + ox) goes to the crop's
 * (y, x'), and the crop's column x' goes to output column w-1-x' when
 * flipped. Source positions outside the image are padding, whose
 * normalised value is the shift. Rows are handled as three runs (padding,
 * pixels, padding) so that the inner loops have no branches.
 */
static void loader_image(const rp_loader *ld, const uint8_t *restrict src, float *restrict dst,
                         int oy, int ox, bool flip)
{
    const int h = ld->ds->h, w = ld->ds->w, c = ld->ds->c;
    const int row = ld->row_floats;
    const float *restrict rs = ld->row_scale;
    const float *restrict rt = ld->row_shift;
    /* Crop columns [x0, x1) have a source pixel. */
    int x0 = ox < 0 ? -ox : 0;
    int x1 = ox > 0 ? w - ox : w;
    if (x1 < x0) x1 = x0;

    for (int y = 0; y < h; y++) {
        float *restrict d = dst + (size_t)y * (size_t)row;
        int sy = y + oy;
        if (sy < 0 || sy >= h) {
            memcpy(d, rt, (size_t)row * sizeof *d);
            continue;
        }
        const uint8_t *restrict s = src + (size_t)sy * (size_t)row;
        /* Output columns [a, b) hold pixels; the rest is padding. */
        int a = flip ? w - x1 : x0;
        int b = flip ? w - x0 : x1;
        memcpy(d, rt, (size_t)a * (size_t)c * sizeof *d);
        memcpy(d + (size_t)b * (size_t)c, rt + (size_t)b * (size_t)c,
               (size_t)(w - b) * (size_t)c * sizeof *d);
        if (!flip && c == 1) {
            const float s0 = ld->scale[0], t0 = ld->shift[0];
            for (int x = a; x < b; x++)
                d[x] = (float)s[x + ox] * s0 + t0;
        } else if (!flip) {
            const int off = ox * c;
            for (int j = a * c; j < b * c; j++)
                d[j] = (float)s[j + off] * rs[j] + rt[j];
        } else if (c == 1) {
            const float s0 = ld->scale[0], t0 = ld->shift[0];
            const int end = w - 1 + ox;
            for (int x = a; x < b; x++)
                d[x] = (float)s[end - x] * s0 + t0;
        } else if (c == 3) {
            const float s0 = ld->scale[0], s1 = ld->scale[1], s2 = ld->scale[2];
            const float t0 = ld->shift[0], t1 = ld->shift[1], t2 = ld->shift[2];
            const int end = w - 1 + ox;
            for (int x = a; x < b; x++) {
                const uint8_t *restrict sp = s + (ptrdiff_t)(end - x) * 3;
                d[3 * x + 0] = (float)sp[0] * s0 + t0;
                d[3 * x + 1] = (float)sp[1] * s1 + t1;
                d[3 * x + 2] = (float)sp[2] * s2 + t2;
            }
        } else {
            for (int x = a; x < b; x++) {
                const uint8_t *restrict sp = s + (ptrdiff_t)(w - 1 - x + ox) * c;
                float *restrict dp = d + (size_t)x * (size_t)c;
                for (int k = 0; k < c; k++)
                    dp[k] = (float)sp[k] * ld->scale[k] + ld->shift[k];
            }
        }
    }
}

/* The slice arithmetic is documented in loader.h; see loader_internal.h for the contract. */
rp_status loader_produce(rp_loader *ld, loader_slot *s, int64_t epoch, int64_t step,
                         bool cancellable)
{
    const rp_dataset *ds = ld->ds;
    const rp_loader_config *cfg = &ld->cfg;
    if (cfg->shuffle && ld->perm_epoch != epoch) loader_shuffle(ld, epoch);

    const int64_t first = step * cfg->global_batch;
    const int64_t left = ld->samples - first;
    const int64_t m = left < cfg->global_batch ? left : cfg->global_batch;
    const int64_t q = m / cfg->replicas, e = m % cfg->replicas, r = cfg->replica;
    const int64_t lo = first + r * q + (r < e ? r : e);
    const int n = (int)(q + (r < e ? 1 : 0));
    const size_t image = ld->image_floats; /* bytes in, floats out */
    const uint32_t span = (uint32_t)(2 * cfg->pad + 1);
    const uint32_t ctr_hi[2] = {(uint32_t)epoch, (uint32_t)((uint64_t)epoch >> 32)};

    if (ds->source) {
        /* Image files: decoded and augmented on the dataset's threads (loader_files.c). */
        rp_status status = loader_produce_files(ld, s, epoch, lo, n, cancellable);
        if (status != RP_OK) return status;
        goto made;
    }
    for (int i = 0; i < n; i++) {
        if (cancellable && __atomic_load_n(&ld->cancel, __ATOMIC_RELAXED))
            return RP_LOADER_CANCELLED;
        const int64_t pos = lo + i;
        const uint32_t idx = ld->perm ? ld->perm[pos] : (uint32_t)pos;
        if (i + 1 < n) {
            /* Shuffled samples are scattered: fetch the next image while this one is made. */
            const uint32_t nidx = ld->perm ? ld->perm[pos + 1] : (uint32_t)pos + 1;
            const uint8_t *next = ds->pixels + (size_t)nidx * image;
            for (size_t off = 0; off < image; off += 64)
                __builtin_prefetch(next + off);
        }
        const int32_t label = ds->labels[idx];
        if (label < 0 || label >= ds->num_classes) {
            snprintf(s->error, sizeof s->error,
                     "rp_loader_next: sample %u of dataset \"%s\" has label %d, outside [0, %d) "
                     "(was the dataset changed after rp_loader_create?)",
                     idx, ds->name, (int)label, ds->num_classes);
            return RP_ERR_FORMAT;
        }
        s->y[i] = label;

        int oy = 0, ox = 0;
        bool flip = false;
        if (cfg->augment) {
            /* Draws keyed by (seed, epoch, dataset index): see loader.h. */
            const uint32_t ctr[4] = {idx, 0, ctr_hi[0], ctr_hi[1]};
            uint32_t draw[4];
            rp_philox4x32(ctr, ld->augment_key, draw);
            oy = (int)(((uint64_t)draw[0] * span) >> 32) - cfg->pad;
            ox = (int)(((uint64_t)draw[1] * span) >> 32) - cfg->pad;
            flip = cfg->flip && (draw[2] >> 31);
        }
        loader_image(ld, ds->pixels + (size_t)idx * image, s->x + (size_t)i * image, oy, ox, flip);
    }
made:
    s->n = n;
    s->epoch = epoch;
    s->step = step;
    s->first_global = lo;
    s->end_of_epoch = step == ld->steps - 1;
    return RP_OK;
}
