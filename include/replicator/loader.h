/*
 * replicator/loader.h - the input pipeline: turns an in-memory rp_dataset
 * into this replica's shard of each global batch, as normalised float NHWC
 * images and int32 labels.
 *
 * The global order. An epoch's order is a permutation of the samples
 * [0, samples) (samples = limit, or the whole dataset) that is a pure
 * function of (seed, epoch) when shuffling and the identity otherwise. Global
 * batch s of an epoch is the positions [s*B, s*B + m) of that order, where B
 * is global_batch and m = B except for a final partial batch (m < B, kept
 * only when drop_last is false). Replica r of R takes a contiguous slice of
 * it: with q = m / R and e = m % R, replica r takes the m_r = q + (r < e)
 * positions starting at s*B + r*q + min(r, e). For a full batch that is
 * [s*B + r*B/R, s*B + (r+1)*B/R); in a final partial batch the first e
 * replicas take one sample more, and a replica's slice is empty (n = 0) when
 * m < R and r >= m. The slices of replicas 0..R-1, concatenated, are exactly
 * the one-replica batch, whatever R is.
 *
 * Augmentation. The random crop offset and the flip of a sample are drawn by
 * Philox from (seed, epoch, the sample's index in the dataset), so a sample
 * gets the same augmentation in a given epoch whatever the replica count,
 * batch position or prefetching. Crop with padding follows torchvision's
 * RandomCrop(size, padding=pad) then RandomHorizontalFlip() then Normalize:
 * the image is padded with `pad` zero pixels on every side, an h x w window is
 * taken at offset (dy, dx), each uniform in [0, 2*pad], and the window is
 * mirrored left-right with probability 1/2 when `flip` is set. Padding
 * pixels are zeros in pixel space, so after normalisation they hold
 * (0 - mean[k]) / std[k], like a black pixel of the source.
 *
 * A dataset of image files (rp_dataset_load_folder: pixels NULL, source set)
 * is decoded batch by batch on the dataset's threads instead: with `augment`,
 * torchvision's RandomResizedCrop to h x w (and with `flip` a flip with
 * probability 1/2), drawn by Philox from (seed, epoch, sample index) as
 * above; without, Resize and CenterCrop (docs/data.md). `pad` is then unused.
 *
 * Normalisation: x = (pixel / 255 - mean[k]) / std[k] for channel k,
 * computed as pixel * scale[k] + shift[k] with scale and shift precomputed in
 * float.
 *
 * Positions. A position is (epoch, step): the global batch `step` of epoch
 * `epoch`. It is global, the same for every replica and independent of the
 * replica count, so a checkpoint written with N replicas can resume with M:
 * store rp_loader_position() and give it to rp_loader_seek() after loading.
 * rp_loader_next() moves from the last step of an epoch to step 0 of the next
 * epoch by itself; rp_batch.end_of_epoch marks the last batch of each epoch.
 *
 * Determinism: the batches are a pure function of the dataset, the
 * configuration (less `prefetch`) and the position. Prefetching changes when
 * a batch is computed, never what it holds.
 *
 * Thread-safety: a loader is driven by one thread at a time (its replica's).
 * Any number of loaders may share one dataset, which they only read. With
 * prefetch, each loader owns one background thread that runs plain C (no
 * OpenMP) and allocates nothing.
 */
#ifndef REPLICATOR_LOADER_H
#define REPLICATOR_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"
#include "data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most image channels the loader normalises (the size of mean[] and std[]). */
#define RP_LOADER_MAX_CHANNELS 4

typedef struct rp_loader_config {
    int global_batch; /* samples per step across all replicas, >= 1 */
    int replica;      /* this replica's index, 0..replicas-1 */
    int replicas;     /* >= 1; must divide global_batch */
    uint64_t seed;    /* keys the shuffle and the augmentation */
    bool shuffle;     /* a new permutation each epoch (train) or the dataset order (eval) */
    bool drop_last;   /* drop the final partial global batch (train) or keep it (eval) */
    bool augment;     /* random crop with `pad` zero padding, and `flip` */
    int pad;          /* crop padding in pixels, 0..min(h, w); e.g. 4 for 32x32, 2 for 28x28 */
    bool flip;        /* with augment: mirror left-right with probability 1/2 */
    float mean[RP_LOADER_MAX_CHANNELS]; /* per channel, of pixel / 255 */
    float std[RP_LOADER_MAX_CHANNELS];  /* per channel, > 0 and finite */
    bool prefetch;                      /* a background thread prepares the next batch */
    int64_t limit; /* use only the first `limit` samples of the dataset; 0 = all */
} rp_loader_config;

/*
 * The defaults: global_batch 128, replica 0 of 1, seed 0, shuffle, drop_last,
 * no augmentation (pad 4 and flip on for when it is switched on), mean 0 and
 * std 1 (x = pixel / 255), prefetch on, all samples.
 */
RP_API rp_loader_config rp_loader_config_default(void);

typedef struct rp_loader rp_loader;

/* One replica's shard of one global batch. */
typedef struct rp_batch {
    const float *x;       /* [n, h, w, c] NHWC normalised; owned by the loader */
    const int32_t *y;     /* [n] labels; owned by the loader */
    int n;                /* this replica's samples in this batch, 0..global_batch/replicas */
    int h, w, c;          /* image shape */
    int64_t epoch, step;  /* the batch's position: global batch `step` of epoch `epoch` */
    int64_t first_global; /* position in the epoch's order of this replica's first sample */
    bool end_of_epoch;    /* this is the last batch of its epoch */
} rp_batch;

/*
 * Creates a loader over `ds`, positioned at (epoch 0, step 0). The loader
 * borrows `ds`: it must stay alive and unchanged until rp_loader_destroy().
 * All buffers (the epoch order, two batch buffers with prefetch, one without)
 * are allocated here, and the prefetch thread, if any, is started and begins
 * preparing the first batch at once.
 *
 * Errors (*ld is then NULL and nothing is left allocated): RP_ERR_INVALID for
 * a NULL argument, an empty dataset or one with more than
 * RP_LOADER_MAX_CHANNELS channels or 2^32 samples or more, a global_batch,
 * replica, replicas, pad, mean, std or limit out of range, a global_batch that
 * replicas does not divide, or drop_last with fewer samples than one global
 * batch (each message names the values); RP_ERR_FORMAT if a label of a used
 * sample lies outside [0, num_classes) (the message names the sample);
 * RP_ERR_NOMEM; RP_ERR_BACKEND if the thread cannot be started.
 */
RP_API rp_status rp_loader_create(rp_loader **ld, const rp_dataset *ds,
                                  const rp_loader_config *cfg);

/*
 * Stops and joins the prefetch thread (interrupting a batch in progress) and
 * frees the loader. The dataset is not touched. NULL is allowed and ignored.
 */
RP_API void rp_loader_destroy(rp_loader *ld);

/*
 * Fills *b with this replica's shard of the batch at the loader's position
 * and advances the position by one step, to step 0 of the next epoch after
 * the last step of an epoch. The buffers b->x and b->y belong to the loader
 * and stay valid until the next rp_loader_next(), rp_loader_seek() or
 * rp_loader_destroy() on this loader. With prefetch, the call takes the batch
 * the thread has prepared (waiting for it if needed) and lets the thread
 * start on the following one; without, it computes the batch itself. It
 * allocates nothing.
 *
 * Errors: RP_ERR_INVALID for a NULL argument; RP_ERR_FORMAT if a label read
 * for the batch lies outside [0, num_classes) (the dataset was changed after
 * create). An error from the prefetch thread is returned here with the
 * thread's message. After an error the position does not move and every call
 * returns the same error until rp_loader_seek(); *b is then zeroed.
 */
RP_API rp_status rp_loader_next(rp_loader *ld, rp_batch *b);

/*
 * Global batches per epoch: samples / global_batch, rounded down with
 * drop_last and up without. The same for every replica.
 */
RP_API int64_t rp_loader_steps_per_epoch(const rp_loader *ld);

/* Samples in an epoch's order (the dataset's size, or limit). */
RP_API int64_t rp_loader_samples(const rp_loader *ld);

/* Largest per-replica batch: global_batch / replicas. */
RP_API int rp_loader_max_batch(const rp_loader *ld);

/*
 * The position of the batch the next rp_loader_next() will return: what a
 * checkpoint stores. Prefetched batches do not count: the position moves only
 * when rp_loader_next() hands a batch out.
 */
RP_API void rp_loader_position(const rp_loader *ld, int64_t *epoch, int64_t *step);

/*
 * Moves to (epoch, step): the next rp_loader_next() returns that batch. Any
 * prefetched or half-made batch is discarded (the thread is interrupted, not
 * restarted), the batch last returned becomes invalid, and a sticky error
 * from rp_loader_next() is cleared. Since positions are global, a position
 * saved with one replica count may be restored with another, provided
 * global_batch, limit and drop_last are the same.
 * Errors: RP_ERR_INVALID for a NULL loader, epoch < 0, or a step outside
 * [0, steps_per_epoch); the position is then unchanged.
 */
RP_API rp_status rp_loader_seek(rp_loader *ld, int64_t epoch, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
