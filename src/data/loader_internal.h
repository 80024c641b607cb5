/*
 * loader_internal.h - the loader's structure, shared by loader.c (lifetime,
 * caller's side, prefetch thread) and loader_batch.c (making a batch).
 * Not part of the public API.
 */
#ifndef RP_DATA_LOADER_INTERNAL_H
#define RP_DATA_LOADER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "replicator/loader.h"

/* A private status, never returned to the user: production was interrupted. */
#define RP_LOADER_CANCELLED 1

#define RP_LOADER_ERROR_MAX 256

enum { RP_LOADER_SLOT_FREE, RP_LOADER_SLOT_FILLING, RP_LOADER_SLOT_READY, RP_LOADER_SLOT_HELD };

/* One batch buffer and what is known about its contents. */
typedef struct loader_slot {
    float *x;   /* [local_batch, h, w, c] */
    int32_t *y; /* [local_batch] */
    int n;
    int64_t epoch, step, first_global;
    bool end_of_epoch;
    rp_status status;                /* of the production that filled the slot */
    char error[RP_LOADER_ERROR_MAX]; /* its message when status is an error */
    int state;                       /* RP_LOADER_SLOT_*, under the mutex when threaded */
} loader_slot;

struct rp_loader {
    const rp_dataset *ds; /* borrowed */
    rp_loader_config cfg;
    int64_t samples;     /* length of an epoch's order */
    int64_t steps;       /* global batches per epoch */
    int local_batch;     /* global_batch / replicas */
    int row_floats;      /* w * c */
    size_t image_floats; /* h * w * c */
    float scale[RP_LOADER_MAX_CHANNELS], shift[RP_LOADER_MAX_CHANNELS];
    float *row_scale;      /* [w * c]: scale of each float of an image row */
    float *row_shift;      /* [w * c]: shift likewise; also a whole row of padding */
    uint64_t shuffle_seed; /* seed of the per-epoch Fisher-Yates streams */
    uint32_t augment_key[2];

    uint32_t *perm;     /* [samples] epoch order when shuffling, else NULL */
    int64_t perm_epoch; /* epoch perm holds, -1 for none */

    loader_slot slot[2];
    int nslots; /* 2 with prefetch, 1 without */

    /* The caller's side. */
    int64_t pos_epoch, pos_step; /* of the next batch rp_loader_next() returns */
    int take;                    /* slot the next batch comes from */
    int held;                    /* slot the caller holds, -1 for none */
    rp_status sticky;            /* the error every rp_loader_next() returns until seek */
    char sticky_msg[RP_LOADER_ERROR_MAX + 32];

    /* The prefetch thread's side. */
    bool threaded;  /* the thread is running */
    bool sync_made; /* mutex and condition variables initialised */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond_prod; /* signalled when a slot frees or a flag changes */
    pthread_cond_t cond_cons; /* signalled when a slot is ready or stops filling */
    int fill;                 /* slot the thread fills next */
    int64_t prod_epoch, prod_step;
    bool stop, seeking, failed;
    int cancel; /* atomic: interrupt the batch in progress */
};

/*
 * Fills slot `s` with this replica's shard of global batch (epoch, step),
 * computing the epoch's order first if it is not the one held. Returns
 * RP_OK; RP_LOADER_CANCELLED when `cancellable` and ld->cancel was set during
 * the batch (the slot is then garbage); or RP_ERR_FORMAT for a label out of
 * range, with the message in s->error and the thread's last error untouched,
 * because it may run on the prefetch thread: the caller raises it on its own
 * thread. Only the producer (the prefetch thread, or the caller without
 * one) may call it: it writes the epoch order.
 */
rp_status loader_produce(rp_loader *ld, loader_slot *s, int64_t epoch, int64_t step,
                         bool cancellable);

#endif
