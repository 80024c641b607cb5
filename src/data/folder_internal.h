/*
 * folder_internal.h - datasets of image files (ImageFolder trees, list files,
 * WebDataset tar shards): the index, the decoders, the augmentation and the
 * decoding threads. Shared by folder.c (the index and its lifetime),
 * folder_tar.c (reading shards), image_decode.c (JPEG and PNG),
 * augment.c (crop boxes, Pillow's resampling, flip and normalisation),
 * folder_pool.c (the threads) and the loader (loader_batch.c calls
 * folder_fill). Not part of the public API.
 */
#ifndef RP_DATA_FOLDER_INTERNAL_H
#define RP_DATA_FOLDER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replicator/data.h"

/* ---- decoding (image_decode.c) ------------------------------------------- */

enum { IMG_UNKNOWN, IMG_JPEG, IMG_PNG };

/* What an image's header says, before any pixel is decoded. */
typedef struct img_info {
    int format; /* IMG_JPEG or IMG_PNG */
    int w, h;   /* full size in pixels */
    bool cmyk;  /* a CMYK or YCCK JPEG */
} img_info;

/* A DCT scaling factor num/denom (TurboJPEG's tjscalingfactor); 1/1 for none. */
typedef struct img_scale {
    int num, denom;
} img_scale;

/*
 * A decoder's reusable state: one per thread (a TurboJPEG handle must not be
 * shared; img_probe makes a fresh one for each JPEG, so that nothing of one
 * file reaches the next) and its buffers, which grow to the largest image seen
 * and are then reused, so that the steady state allocates none of them.
 */
typedef struct img_decoder {
    void *tj;     /* tjhandle, made on first use */
    uint8_t *rgb; /* decoded image, [h, w, 3] */
    size_t rgb_cap;
    uint8_t *aux; /* CMYK pixels, PNG row pointers */
    size_t aux_cap;
} img_decoder;

/* Frees the decoder's handle and buffers; the struct may be reused after. */
void img_decoder_free(img_decoder *d);

/*
 * Reads the header of the image in data[0, size): JPEG or PNG by content
 * (not by the file's name: a PNG named .jpg decodes as PNG, as PIL opens it).
 * Errors (RP_ERR_FORMAT, the message starting with `name`): not a JPEG or
 * PNG (an empty file, another format, text), a corrupt header, a side of 0
 * or over 65535.
 */
rp_status img_probe(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                    img_info *info);

/*
 * The smallest DCT scaling factor s of 1/8, 1/4, 1/2 and 1 (the ones libjpeg-turbo reconstructs
 * with SIMD code; image_decode.c) with which a box
 * of box_w x box_h pixels of the full image still covers at least out x out
 * pixels (box_w * s >= out and box_h * s >= out): the decode never has to be
 * upsampled afterwards. 1/1 when no factor below 1 does.
 */
img_scale img_pick_scale(int box_w, int box_h, int out);

/*
 * Decodes the whole image at DCT scale `s` (JPEG; PNG only at 1/1) into
 * d->rgb as RGB, *w x *h pixels (TurboJPEG's TJSCALED sizes). Grayscale
 * becomes RGB; CMYK as PIL's convert("RGB") (image_decode.c says how).
 * Errors (RP_ERR_FORMAT naming `name`): corrupt or truncated data, more than
 * RP_IMAGE_MAX_PIXELS pixels (RP_ERR_NOMEM if the buffer cannot grow).
 */
rp_status img_decode(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                     const img_info *info, img_scale s, int *w, int *h);

/* The size of the whole image decoded at scale s (TurboJPEG's TJSCALED: rounded up). */
void img_scaled_size(const img_info *info, img_scale s, int *w, int *h);

/* Whether a libjpeg warning is one the decoders accept (PIL decodes such a file too). */
bool img_jpeg_warning_accepted(const char *msg);

/* Pixels of a region: pix is its top-left pixel, rows `stride` bytes apart (RGB). */
typedef struct img_region {
    const uint8_t *pix;
    size_t stride;
} img_region;

/*
 * Decodes the region [x0, x1) x [y0, y1) of the image at scale s (coordinates at that scale)
 * into d->rgb, only as much of a JPEG as the region needs (image_region.c); the pixels are
 * those of img_decode's whole image, and it fails exactly when img_decode does (the rest of the
 * file is read, not reconstructed). PNG and CMYK are decoded whole. Errors: img_decode's, and
 * RP_ERR_INVALID for a region outside the image.
 */
rp_status img_decode_region(img_decoder *d, const uint8_t *data, size_t size, const char *name,
                            const img_info *info, img_scale s, int x0, int y0, int x1, int y1,
                            img_region *out);

/* ---- augmentation (augment.c) ---------------------------------------------- */

/* A crop box in a full-size image: rows [top, top + h), columns [left, left + w). */
typedef struct aug_box {
    int top, left, h, w;
} aug_box;

/* Uniform doubles in [0, 1): the source of randomness the box choice takes. */
typedef double (*aug_uniform_fn)(void *ctx);

/*
 * torchvision's RandomResizedCrop.get_params on an H x W image (rows x
 * columns), drawing from `uniform` in this order on each of up to ten tries:
 * the area fraction, the log aspect ratio, and, on the try that fits, the
 * top row and the left column; then the central-crop fallback. Every draw
 * uses one value of `uniform` (a randint over [0, n) is floor(u * n)).
 */
aug_box aug_random_resized_crop(int H, int W, double scale_min, double scale_max, double ratio_min,
                                double ratio_max, aug_uniform_fn uniform, void *ctx);

/*
 * The evaluation transform as resampling parameters: Resize(resize) (short side
 * to `resize`, long side int(resize * long / short)) then CenterCrop(crop)
 * with torchvision's offsets int(round((R - crop) / 2)). On return *rw x *rh
 * is the size the whole image is resized to and (*top, *left) the crop's
 * corner in it; the crop lies inside when resize >= crop.
 */
void aug_eval_geometry(int H, int W, int resize, int crop, int *rh, int *rw, int *top, int *left);

/*
 * Per-sample random numbers: Philox4x32 keyed by the loader's augmentation key,
 * the counter (sample index, block, epoch): a pure function of (seed, epoch,
 * sample), whatever thread or replica makes the sample.
 */
typedef struct aug_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    int used; /* words of buf consumed */
} aug_rng;

void aug_rng_init(aug_rng *r, const uint32_t key[2], uint32_t sample, int64_t epoch);
uint32_t aug_rng_u32(aug_rng *r);
/* Uniform in [0, 1) with 53 random bits: an aug_uniform_fn over an aug_rng. */
double aug_rng_uniform(void *rng);

/* Scratch of the resampler: grown on demand and reused. */
typedef struct aug_scratch {
    int32_t *coef; /* fixed-point weights, both passes */
    size_t coef_cap;
    int *bounds;
    size_t bounds_cap;
    uint8_t *tmp; /* the horizontal pass's output */
    size_t tmp_cap;
    int32_t *acc; /* the vertical pass's sums for one output row */
    size_t acc_cap;
} aug_scratch;

void aug_scratch_free(aug_scratch *s);

/*
 * Pillow's Image.resize(size, BILINEAR, box) (ImagingResample in Resample.c:
 * a triangle filter whose support grows with the reduction, so a reduction is
 * antialiased; weights in 22-bit fixed point, the horizontal pass rounded to
 * bytes before the vertical one) applied to the in_w x in_h RGB image at
 * `src` (rows `stride` bytes apart; the image PIL's crop() would give), the
 * box [x0, x1) x [y0, y1) of it resized to out_w x out_h. Only output rows
 * [oy, oy + n_h) and columns [ox, ox + n_w) are made (CenterCrop of the
 * resized image without resizing the rest), into dst [n_h, n_w, 3].
 * Errors: RP_ERR_NOMEM only.
 */
rp_status aug_resample(aug_scratch *s, const uint8_t *src, size_t stride, int in_w, int in_h,
                       double x0, double y0, double x1, double y1, int out_w, int out_h, int ox,
                       int oy, int n_w, int n_h, uint8_t *dst);

/*
 * dst[y, x, k] = src[y, x', k] * scale[k] + shift[k] with x' = w-1-x when
 * flipped, else x: the flip and normalisation of an h x w RGB image.
 */
void aug_flip_normalise(const uint8_t *src, int h, int w, bool flip, const float *scale,
                        const float *shift, float *dst);

/* ---- the index (folder.c, folder_tar.c) ------------------------------------ */

enum { FOLDER_TREE, FOLDER_LIST, FOLDER_TAR };

/* One shard of a tar dataset: its path and descriptor (pread, shared by the threads). */
typedef struct folder_shard {
    char *path;
    int fd;
} folder_shard;

/* The decoding threads, shared by every loader of the dataset (folder_pool.c). */
typedef struct folder_job folder_job;
typedef struct folder_pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was posted, or stop */
    pthread_cond_t done; /* a job's last sample finished */
    bool made;           /* mu and the conds are initialised */
    bool stop;
    int started; /* threads running */
    pthread_t *threads;
    struct folder_worker *workers;
    struct rp_image_source *src;
    folder_job *jobs; /* posted jobs with samples left to claim, a list */
} folder_pool;

struct rp_image_source {
    rp_folder_config cfg;
    int kind;    /* FOLDER_* */
    char *names; /* NUL-terminated paths (tree, list) or member names (tar) */
    size_t names_len, names_cap;
    int64_t *name_off;      /* [n] offset of sample i's name in names */
    int32_t *shard;         /* tar: [n] shard of sample i */
    int64_t *offset, *size; /* tar: [n] the image member's data in its shard */
    folder_shard *shards;
    int nshards;
    char **classes; /* tree: [num_classes] class names, else NULL */
    int nclasses;
    uint8_t *bad;      /* [n] 1 once sample i failed to decode (atomic bytes) */
    int64_t bad_count; /* atomic */
    folder_pool pool;
};

/* Stops and joins the pool's threads (if started) and frees what it holds. */
void folder_pool_stop(folder_pool *p);

/* Frees the source: stops its threads, closes its shards. NULL is ignored. */
void folder_source_destroy(rp_image_source *src);

/* The name of sample i (a path, or a member's name) and its file, for messages. */
const char *folder_sample_name(const rp_image_source *src, int64_t i);
/* Sample i's file for messages: its path, or "SHARD:MEMBER" (folder_index.c). */
void folder_sample_describe(const rp_image_source *src, int64_t i, char *buf, size_t size);

/*
 * Indexes the shards DIR/<split>/ *.tar into src (kind FOLDER_TAR), appending
 * samples to the growing arrays through folder_add_sample, and sets their
 * labels. See rp_dataset_load_folder for the format and the errors.
 */
rp_status folder_tar_index(rp_image_source *src, const char *dir, int32_t **labels, int64_t *n,
                           int64_t *cap);

/* Appends one sample (name, label; tar: shard, offset, size) to the growing index. */
rp_status folder_add_sample(rp_image_source *src, const char *name, int32_t label, int shard,
                            int64_t offset, int64_t size, int32_t **labels, int64_t *n,
                            int64_t *cap);

/* ---- making a batch (folder_pool.c), called by the loader ------------------ */

/* What the loader asks of the dataset's threads: n samples of one batch. */
typedef struct folder_request {
    const rp_dataset *ds;
    const uint32_t *perm; /* the epoch's order, or NULL for the identity */
    int64_t lo;           /* samples perm[lo .. lo + n) */
    int n;
    int64_t epoch;
    uint32_t key[2];    /* the loader's augmentation key */
    bool train;         /* RandomResizedCrop (+ flip) or Resize + CenterCrop */
    bool flip;          /* with train: a horizontal flip with probability 1/2 */
    const float *scale; /* [3] normalisation: pixel * scale + shift */
    const float *shift;
    float *x;          /* [n, h, w, 3] out */
    int32_t *y;        /* [n] out */
    const int *cancel; /* read atomically before each sample; nonzero: stop */
} folder_request;

/*
 * Makes the request's samples on the dataset's threads and waits for them.
 * Returns RP_OK; 1 (the loader's RP_LOADER_CANCELLED) when *cancel was set;
 * or an error whose message (naming the file) is in err, because it may run
 * on the loader's prefetch thread, which must not raise it. Safe to call from
 * several loaders' threads at once.
 */
rp_status folder_fill(const folder_request *req, char *err, size_t err_size);

/* What one decoding thread owns: its decoder, resampler scratch and buffers. */
typedef struct folder_worker {
    img_decoder dec;
    aug_scratch scr;
    uint8_t *file; /* the file's bytes */
    size_t file_cap;
    uint8_t *img; /* the made image before normalisation, [S, S, 3] */
    size_t img_cap;
} folder_worker;

void folder_worker_free(folder_worker *w);

/*
 * Makes dataset sample `idx` for the request on the calling thread with `w`'s
 * buffers: the same floats folder_fill makes for it on any thread. Under
 * skip_bad a sample that fails to decode is replaced by the next one (idx+1,
 * ...) that decodes; *label gets the label of the sample made. Returns the
 * status; the message is rp_last_error() (thread-local).
 */
rp_status folder_make_sample(const folder_request *req, int64_t idx, folder_worker *w, float *out,
                             int32_t *label);

/*
 * The loader's side (loader_files.c): fills slot `s` with samples [lo, lo + n)
 * of epoch `epoch`'s order of an image-file dataset, as loader_produce
 * does for an in-memory one (same returns, the message in s->error).
 */
struct rp_loader;
struct loader_slot;
rp_status loader_produce_files(struct rp_loader *ld, struct loader_slot *s, int64_t epoch,
                               int64_t lo, int n, bool cancellable);

/* Initialises the pool's mutex and conditions (threads start on first use). */
rp_status folder_pool_init(folder_pool *p);

#endif
