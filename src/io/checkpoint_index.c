/*
 * checkpoint_index.c - the hash indexes from names to positions that make
 * adding, loading and finding n tensors or metadata entries O(n) in all
 * (see ckpt_index in checkpoint_internal.h).
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "io/checkpoint_internal.h"

/*
 * A keyed hash of a name: each byte is mixed in with a multiply and a shift,
 * so every output bit depends on every byte and on the seed.
 */
static uint64_t name_hash(uint64_t seed, const char *s)
{
    uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h = (h ^ *p) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

uint64_t io_ckpt_index_seed(const void *owner)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return name_hash((uint64_t)(uintptr_t)owner ^ ((uint64_t)ts.tv_sec << 32) ^
                         (uint64_t)ts.tv_nsec,
                     "replicator");
}

int io_ckpt_index_find(const rp_checkpoint *ck, const ckpt_index *ix, io_ckpt_key_fn key,
                       const char *name)
{
    if (ix->cap == 0) return -1;
    size_t mask = ix->cap - 1;
    for (size_t h = name_hash(ck->seed, name) & mask;; h = (h + 1) & mask) {
        int slot = ix->slots[h];
        if (slot == 0) return -1;
        if (strcmp(key(ck, slot - 1), name) == 0) return slot - 1;
    }
}

/* Puts position i into slots (the name is known to be absent, and a slot free). */
static void index_place(const rp_checkpoint *ck, int *slots, size_t cap, io_ckpt_key_fn key, int i)
{
    size_t mask = cap - 1;
    size_t h = name_hash(ck->seed, key(ck, i)) & mask;
    while (slots[h] != 0)
        h = (h + 1) & mask;
    slots[h] = i + 1;
}

void io_ckpt_index_rebuild(const rp_checkpoint *ck, ckpt_index *ix, io_ckpt_key_fn key, int n)
{
    if (ix->cap == 0) return;
    memset(ix->slots, 0, ix->cap * sizeof *ix->slots);
    for (int i = 0; i < n; i++)
        index_place(ck, ix->slots, ix->cap, key, i);
}

rp_status io_ckpt_index_add(const rp_checkpoint *ck, ckpt_index *ix, io_ckpt_key_fn key, int n)
{
    if ((size_t)n * 2 > ix->cap) {
        size_t cap = ix->cap ? ix->cap : 32;
        while ((size_t)n * 2 > cap)
            cap *= 2;
        int *slots = rp_calloc(cap * sizeof *slots);
        if (!slots) return rp_last_status();
        for (int i = 0; i < n - 1; i++)
            index_place(ck, slots, cap, key, i);
        rp_free(ix->slots);
        ix->slots = slots;
        ix->cap = cap;
    }
    index_place(ck, ix->slots, ix->cap, key, n - 1);
    return RP_OK;
}
