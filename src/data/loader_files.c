/*
 * loader_files.c - the loader's batch of a dataset of image files: the request
 * its producer hands to the dataset's decoding threads (folder_pool.c), with
 * the loader's epoch order, augmentation key, normalisation and cancel flag.
 * Kept apart from loader_batch.c, which makes in-memory batches.
 */
#include "data/folder_internal.h"
#include "data/loader_internal.h"

rp_status loader_produce_files(rp_loader *ld, loader_slot *s, int64_t epoch, int64_t lo, int n,
                               bool cancellable)
{
    const rp_loader_config *cfg = &ld->cfg;
    /* augment: RandomResizedCrop (and the flip if asked), else Resize + CenterCrop. */
    folder_request req = {.ds = ld->ds,
                          .perm = ld->perm,
                          .lo = lo,
                          .n = n,
                          .epoch = epoch,
                          .key = {ld->augment_key[0], ld->augment_key[1]},
                          .train = cfg->augment,
                          .flip = cfg->augment && cfg->flip,
                          .scale = ld->scale,
                          .shift = ld->shift,
                          .x = s->x,
                          .y = s->y,
                          .cancel = cancellable ? &ld->cancel : NULL};
    return folder_fill(&req, s->error, sizeof s->error);
}
