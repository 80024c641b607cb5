/*
 * fuzz_image.c - libFuzzer target for the image decoder of the image-file datasets (JPEG through
 * TurboJPEG, PNG through libpng: src/data/image_decode.c) and the path a loader's thread takes
 * with a file's bytes (src/data/folder_pool.c): the header probe, the choice of the DCT scale
 * from the training crop, the decode at that scale, the crop and resize, flip and normalisation.
 *
 * Input byte 0 picks the transform: bit 0 training (RandomResizedCrop) or evaluation (Resize +
 * CenterCrop), bit 1 the flip, bits 2-3 the output side (8, 24, 56, or 8 again with DCT
 * scaling off); bit 4 rewrites a PNG's chunk CRCs before the decoder sees it (libpng refuses a
 * critical chunk with a bad CRC, so mutations would rarely get past one otherwise); bytes 1-4
 * the epoch, which moves the crop. The rest is the file, read by the
 * real loader path through an ImageFolder tree (DIR/train/c/x.jpg, a link to a memory file)
 * loaded once per output side.
 *
 * An input whose decode would make over 2^20 pixels (but not over the decoder's limit, which
 * fails before decoding) stops after the probe and the scale check: from a small file that is
 * libjpeg filling in missing data for seconds under the sanitizers, and the tests cover it.
 *
 * Checked besides memory safety: the probe's errors name the file, its successes a size in
 * 1..65535 a side and the format the first bytes say; the crop box lies in the image; the DCT
 * scale is the smallest of TurboJPEG's factors 1/8, 1/4, 1/2 that keeps the box at least the
 * output side (or 1/1), as img_pick_scale promises; a decode at scale s is TJSCALED(w, s) x
 * TJSCALED(h, s) and under the pixel limit, or an error naming the file; the loader's sample
 * succeeds exactly when that decode does, from the same pixels (its thread's decoder is reused
 * across inputs, a fresh one decodes here, so state left by an earlier file must not change a later
 * one), and every value it makes is finite and within the normalised range of [0, 255].
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "data/folder_internal.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEADER    5
#define N_SIDES   4
#define SELF_NAME "fuzz-input"
/* Most pixels a decode may make here (see where it is used). */
#define FUZZ_MAX_DECODE (1 << 20)

/* Small sides keep an input fast under the sanitizers (224 costs ~16 ms); 56 is ImageNet's
   224 over 4, so a JPEG a few times its size still picks a reduced DCT scale. */
static const int sides[N_SIDES] = {8, 24, 56, 8};

typedef struct target {
    rp_dataset *ds;
    float scale[3], shift[3];
} target;

static target targets[N_SIDES];
static fuzz_file input;      /* the datasets' one sample, refilled by each input */
static folder_worker worker; /* reused across inputs, as a loader's thread reuses its own */
static float out[56 * 56 * 3];
static char sample_name[4096];

static void setup(void)
{
    const char *dir = fuzz_dir_create("image");
    char path[4096];
    snprintf(path, sizeof path, "%s/train", dir);
    FUZZ_EXPECT(mkdir(path, 0700) == 0, "mkdir %s", path);
    snprintf(path, sizeof path, "%s/train/c", dir);
    FUZZ_EXPECT(mkdir(path, 0700) == 0, "mkdir %s", path);
    fuzz_file_open(&input, "x.jpg");
    fuzz_dir_link(path, "x.jpg", &input);
    snprintf(sample_name, sizeof sample_name, "%s/x.jpg", path);
    /* A valid file while the index is read (the index does not decode it). */
    fuzz_file_set(&input, (const uint8_t *)"\xff\xd8\xff", 3);
    for (int t = 0; t < N_SIDES; t++) {
        rp_folder_config cfg = rp_folder_config_default();
        cfg.image_size = sides[t];
        cfg.threads = 1;
        cfg.dct_scaling = t != 3;
        rp_status s = rp_dataset_load_folder(&targets[t].ds, dir, "train", &cfg);
        FUZZ_EXPECT(s == RP_OK && targets[t].ds->n == 1, "the fuzz tree does not load");
        for (int k = 0; k < 3; k++) {
            targets[t].scale[k] = 1.0f / (255.0f * cfg.std[k]);
            targets[t].shift[k] = -cfg.mean[k] / cfg.std[k];
        }
    }
}

/* Rewrites the CRC of each whole chunk after a PNG signature, front to back. */
static void repair_png_crcs(uint8_t *p, size_t n)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 8 || memcmp(p, sig, 8) != 0) return;
    size_t at = 8;
    while (at + 12 <= n) {
        uint32_t len = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 |
                       (uint32_t)p[at + 2] << 8 | p[at + 3];
        if (len > n - at - 12) return;
        uint32_t crc = (uint32_t)crc32(0L, p + at + 4, len + 4);
        uint8_t *c = p + at + 8 + len;
        c[0] = (uint8_t)(crc >> 24);
        c[1] = (uint8_t)(crc >> 16);
        c[2] = (uint8_t)(crc >> 8);
        c[3] = (uint8_t)crc;
        at += 12 + (size_t)len;
    }
}

/* TurboJPEG's TJSCALED. */
static int scaled(int side, img_scale s)
{
    return (int)(((int64_t)side * s.num + s.denom - 1) / s.denom);
}

/* img_pick_scale's promise, from TurboJPEG's list: the smallest num/denom <= 1 keeping the box. */
static void check_scale(img_scale got, int bw, int bh, int side)
{
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    FUZZ_EXPECT(got.num >= 1 && got.num <= got.denom, "scale %d/%d", got.num, got.denom);
    bool keeps = (int64_t)bw * got.num >= (int64_t)side * got.denom &&
                 (int64_t)bh * got.num >= (int64_t)side * got.denom;
    FUZZ_EXPECT(keeps || got.num == got.denom, "scale %d/%d makes a %dx%d box smaller than %d",
                got.num, got.denom, bw, bh, side);
    for (int i = 0; i < n; i++) {
        int a = sf[i].num, b = sf[i].denom;
        if (a > b || (a != 1 && a != b)) continue; /* img_pick_scale's 1/8, 1/4, 1/2, 1 */
        bool k = (int64_t)bw * a >= (int64_t)side * b && (int64_t)bh * a >= (int64_t)side * b;
        FUZZ_EXPECT(!k || (int64_t)a * got.denom >= (int64_t)got.num * b,
                    "scale %d/%d chosen for a %dx%d box to %d where %d/%d keeps it", got.num,
                    got.denom, bw, bh, side, a, b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool ready;
    if (!ready) {
        setup();
        ready = true;
    }
    if (size < HEADER) return 0;
    const bool train = data[0] & 1, flip = data[0] & 2, repair = data[0] & 16;
    const int t = (data[0] >> 2) & 3, side = sides[t];
    const uint32_t epoch = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
                           (uint32_t)data[4] << 24;
    const size_t n = size - HEADER;
    static uint8_t *copy;
    static size_t copy_cap;
    if (n > copy_cap) {
        free(copy);
        copy = malloc(n);
        FUZZ_EXPECT(copy != NULL, "harness: %zu bytes", n);
        copy_cap = n;
    }
    if (n) memcpy(copy, data + HEADER, n);
    if (repair) repair_png_crcs(copy, n);
    const uint8_t *img = copy;
    fuzz_file_set(&input, img, n);

    /* The probe and the decode on a fresh decoder, at the scale the loader will choose. */
    img_decoder dec = {0};
    img_info info;
    rp_status ps = img_probe(&dec, img, n, SELF_NAME, &info);
    const rp_folder_config *cfg = &targets[t].ds->source->cfg;
    const uint32_t key[2] = {0x12345678u, 0x9abcdef0u};
    rp_status ds_status = ps;
    int dw = 0, dh = 0;
    if (ps != RP_OK) {
        FUZZ_EXPECT(strstr(rp_last_error(), SELF_NAME) != NULL,
                    "a probe error does not name the file");
    } else {
        FUZZ_EXPECT(info.w >= 1 && info.h >= 1 && info.w <= 65535 && info.h <= 65535,
                    "a %dx%d image", info.w, info.h);
        bool jpeg = n >= 3 && img[0] == 0xFF && img[1] == 0xD8 && img[2] == 0xFF;
        FUZZ_EXPECT(info.format == (jpeg ? IMG_JPEG : IMG_PNG), "format %d", info.format);
        img_scale sc = {1, 1};
        if (train) {
            aug_rng rng;
            aug_rng_init(&rng, key, 0, epoch);
            aug_box b =
                aug_random_resized_crop(info.h, info.w, cfg->scale_min, cfg->scale_max,
                                        cfg->ratio_min, cfg->ratio_max, aug_rng_uniform, &rng);
            FUZZ_EXPECT(b.w >= 1 && b.h >= 1 && b.left >= 0 && b.top >= 0 &&
                            b.left + b.w <= info.w && b.top + b.h <= info.h,
                        "crop box (%d, %d) %dx%d in a %dx%d image", b.left, b.top, b.w, b.h, info.w,
                        info.h);
            if (info.format == IMG_JPEG && cfg->dct_scaling) {
                sc = img_pick_scale(b.w, b.h, side);
                check_scale(sc, b.w, b.h, side);
            }
        }
        /* A large decode of a small input is the decoder filling in missing data, seconds under
           the sanitizers, which would starve everything else; over the limit it fails at once. */
        int64_t pixels = (int64_t)scaled(info.w, sc) * scaled(info.h, sc);
        if (pixels > FUZZ_MAX_DECODE && pixels <= RP_IMAGE_MAX_PIXELS) {
            img_decoder_free(&dec);
            return 0;
        }
        ds_status = img_decode(&dec, img, n, SELF_NAME, &info, sc, &dw, &dh);
        if (ds_status == RP_OK) {
            FUZZ_EXPECT(dw == scaled(info.w, sc) && dh == scaled(info.h, sc),
                        "decoded %dx%d from %dx%d at %d/%d", dw, dh, info.w, info.h, sc.num,
                        sc.denom);
            FUZZ_EXPECT((int64_t)dw * dh <= RP_IMAGE_MAX_PIXELS, "decoded %dx%d", dw, dh);
        } else {
            FUZZ_EXPECT(ds_status == RP_ERR_FORMAT || ds_status == RP_ERR_NOMEM, "status %s",
                        rp_status_name(ds_status));
            FUZZ_EXPECT(strstr(rp_last_error(), SELF_NAME) != NULL,
                        "a decode error does not name the file");
        }
    }

    /* The loader's path on its own (reused) worker. */
    folder_request req = {.ds = targets[t].ds,
                          .lo = 0,
                          .n = 1,
                          .epoch = (int64_t)epoch,
                          .key = {key[0], key[1]},
                          .train = train,
                          .flip = flip,
                          .scale = targets[t].scale,
                          .shift = targets[t].shift};
    int32_t label = -1;
    rp_status ls = folder_make_sample(&req, 0, &worker, out, &label);
    FUZZ_EXPECT(ls == ds_status || (ds_status == RP_ERR_NOMEM || ls == RP_ERR_NOMEM),
                "the loader says %s where a fresh decoder says %s", rp_status_name(ls),
                rp_status_name(ds_status));
    if (ls != RP_OK) {
        FUZZ_EXPECT(strstr(rp_last_error(), sample_name) != NULL,
                    "the loader's error does not name the file");
    } else {
        FUZZ_EXPECT(label == 0, "label %d", label);
        /* Evaluation decodes whole; training only the crop's region (checked below). */
        FUZZ_EXPECT(train || memcmp(worker.dec.rgb, dec.rgb, (size_t)dw * dh * 3) == 0,
                    "the loader's decoder made other pixels than a fresh one");
        for (int i = 0; i < side * side * 3; i++) {
            int k = i % 3;
            float lo = targets[t].shift[k], hi = 255.0f * targets[t].scale[k] + lo;
            FUZZ_EXPECT(isfinite(out[i]) && out[i] >= lo - 1e-4f && out[i] <= hi + 1e-4f,
                        "value %g at %d outside [%g, %g]", (double)out[i], i, (double)lo,
                        (double)hi);
        }
    }
    /* At 1/1: a region decoded alone holds the whole decode's pixels, and fails when it does. */
    int fw = ps == RP_OK ? scaled(info.w, (img_scale){1, 1}) : 0;
    int fh = ps == RP_OK ? scaled(info.h, (img_scale){1, 1}) : 0;
    if (ps == RP_OK && info.format == IMG_JPEG && dw == fw && dh == fh && fw >= 2 && fh >= 2 &&
        (int64_t)fw * fh <= FUZZ_MAX_DECODE && ds_status != RP_ERR_NOMEM) {
        int x0 = fw / 4, y0 = fh / 3, x1 = fw - fw / 5, y1 = fh - fh / 6;
        img_decoder part = {0};
        img_region r;
        rp_status rs = img_decode_region(&part, img, n, SELF_NAME, &info, (img_scale){1, 1}, x0, y0,
                                         x1, y1, &r);
        FUZZ_EXPECT(rs == ds_status || rs == RP_ERR_NOMEM,
                    "a region decode says %s where the whole decode says %s", rp_status_name(rs),
                    rp_status_name(ds_status));
        for (int y = y0; rs == RP_OK && ds_status == RP_OK && y < y1; y++)
            FUZZ_EXPECT(memcmp(r.pix + (size_t)(y - y0) * r.stride,
                               dec.rgb + ((size_t)y * fw + x0) * 3, (size_t)(x1 - x0) * 3) == 0,
                        "row %d of region [%d,%d)x[%d,%d) differs from the whole decode", y, x0, x1,
                        y0, y1);
        img_decoder_free(&part);
    }
    img_decoder_free(&dec);
    return 0;
}
