/*
 * arena.c - bump allocation for everything a step creates.
 *
 * A step's needs are the same every step, so the arena learns them: while a
 * step asks for more than it holds it adds chunks, and at the next reset it
 * swaps all its chunks for one block of the high-water size. From then on a
 * reset is a pointer move and nothing is allocated.
 */
#include <string.h>

#include "replicator/core.h"

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
} arena_chunk;

struct rp_arena {
    arena_chunk *head; /* the chunk being filled; older ones follow */
    size_t used;       /* bytes handed out since the last reset, all chunks */
    size_t capacity;
    size_t high_water;
    uint64_t system_allocs;
};

#define CHUNK_HEADER  ((sizeof(arena_chunk) + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN)
#define DEFAULT_BYTES ((size_t)1 << 20)

static arena_chunk *chunk_new(rp_arena *a, size_t size)
{
    arena_chunk *c = rp_alloc(CHUNK_HEADER + size);
    if (!c) return NULL;
    c->next = NULL;
    c->size = size;
    c->used = 0;
    a->capacity += size;
    a->system_allocs++;
    return c;
}

rp_status rp_arena_create(rp_arena **arena, size_t initial_bytes)
{
    if (!arena) return RP_ERROR(RP_ERR_INVALID, "rp_arena_create: arena is NULL");
    rp_arena *a = rp_calloc(sizeof *a);
    if (!a) return rp_last_status();
    a->head = chunk_new(a, initial_bytes ? initial_bytes : DEFAULT_BYTES);
    if (!a->head) {
        rp_free(a);
        return rp_last_status();
    }
    *arena = a;
    return RP_OK;
}

void rp_arena_destroy(rp_arena *a)
{
    if (!a) return;
    for (arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        rp_free(c);
    }
    rp_free(a);
}

void *rp_arena_alloc(rp_arena *a, size_t bytes)
{
    if (bytes > ((size_t)1 << 60)) {
        RP_ERROR(RP_ERR_NOMEM, "arena: %zu bytes is beyond any machine's memory", bytes);
        return NULL;
    }
    size_t need = (bytes + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN;
    if (need == 0) need = RP_ALIGN;
    arena_chunk *c = a->head;
    if (c->size - c->used < need) {
        /* Grow geometrically so a large first step costs few chunks. */
        size_t size = a->capacity > need ? a->capacity : need;
        arena_chunk *fresh = chunk_new(a, size);
        if (!fresh) return NULL;
        fresh->next = c;
        a->head = c = fresh;
    }
    void *p = (char *)c + CHUNK_HEADER + c->used;
    c->used += need;
    a->used += need;
    if (a->used > a->high_water) a->high_water = a->used;
    return p;
}

void *rp_arena_calloc(rp_arena *a, size_t bytes)
{
    void *p = rp_arena_alloc(a, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void rp_arena_reset(rp_arena *a)
{
    if (a->head->next) {
        /* Several chunks: consolidate into one of the high-water size. */
        arena_chunk *single = chunk_new(a, a->high_water);
        if (single) {
            for (arena_chunk *c = a->head, *next; c; c = next) {
                next = c->next;
                a->capacity -= c->size;
                rp_free(c);
            }
            a->head = single;
        } else {
            /* Out of memory: keep the chunks we have, they still work. */
            for (arena_chunk *c = a->head; c; c = c->next)
                c->used = 0;
        }
    }
    a->head->used = 0;
    a->used = 0;
}

rp_arena_stats rp_arena_get_stats(const rp_arena *a)
{
    rp_arena_stats s = {a->used, a->capacity, a->high_water, a->system_allocs};
    return s;
}
