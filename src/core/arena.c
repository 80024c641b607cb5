/*
 * arena.c - bump allocation for everything a step creates, with release.
 *
 * A step's needs are the same every step, so the arena learns them: while a
 * step asks for more than it holds it adds chunks, and at the next reset it
 * swaps all its chunks for one block of the high-water size. From then on a
 * reset is a pointer move and nothing is allocated.
 *
 * Release. The backward pass knows when a value is dead (an activation's
 * gradient once its producer has consumed it, a rule's scratch once added
 * in), and hands it back with rp_arena_release(). A released block that ends
 * at the top of the chunk being filled lowers the top; any other joins a
 * free list, merged with its neighbours, and later allocations take the
 * smallest free block that fits (best fit) before bumping. Because a step
 * makes the same requests in the same order every time, this lays every step
 * out identically: the free list is the liveness plan, learnt online. The
 * free list is an array beside the blocks (it grows to its high-water mark
 * and stays), so released memory is never written by the arena itself: in
 * poison mode it is filled with NaN, and under AddressSanitizer it is
 * poisoned, so a read of released memory shows.
 */
#include <stdint.h>
#include <string.h>

#include "replicator/core.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n)   ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct arena_chunk {
    struct arena_chunk *next;
    char *base;  /* the chunk's memory: right after this header (host), or from `mem` */
    size_t size; /* usable bytes at base */
    size_t used; /* the top: bytes below it are handed out or on the free list */
} arena_chunk;

typedef struct arena_block {
    char *p;
    size_t size;
} arena_block;

struct rp_arena {
    arena_chunk *head; /* the chunk being filled; older ones follow */
    size_t used;       /* sum of the chunks' tops: the memory the step spans */
    size_t capacity;
    size_t high_water; /* largest `used` seen */
    size_t live;       /* handed out and not released */
    size_t live_peak;
    uint64_t system_allocs;
    arena_block *free; /* released blocks below the tops, sorted by address, merged */
    int n_free, cap_free;
    bool poison;
    const rp_arena_memory *mem; /* NULL: host memory, the header and the chunk in one block */
};

#define CHUNK_HEADER  ((sizeof(arena_chunk) + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN)
#define DEFAULT_BYTES ((size_t)1 << 20)

static char *chunk_base(arena_chunk *c)
{
    return c->base;
}

/* AddressSanitizer watches host chunks only: another memory's bytes are not the host's. */
static void arena_poison(const rp_arena *a, void *p, size_t n)
{
    if (!a->mem) ARENA_POISON(p, n);
}

static void arena_unpoison(const rp_arena *a, void *p, size_t n)
{
    if (!a->mem) ARENA_UNPOISON(p, n);
}

static arena_chunk *chunk_new(rp_arena *a, size_t size)
{
    arena_chunk *c;
    if (a->mem) {
        c = rp_alloc(sizeof *c);
        if (!c) return NULL;
        c->base = a->mem->alloc(size);
        if (!c->base) {
            rp_free(c);
            RP_ERROR(RP_ERR_NOMEM,
                     "arena: the kernel table could not allocate %zu bytes of "
                     "storage",
                     size);
            return NULL;
        }
    } else {
        c = rp_alloc(CHUNK_HEADER + size);
        if (!c) return NULL;
        c->base = (char *)c + CHUNK_HEADER;
    }
    c->next = NULL;
    c->size = size;
    c->used = 0;
    a->capacity += size;
    a->system_allocs++;
    arena_poison(a, chunk_base(c), size);
    return c;
}

static void chunk_free(rp_arena *a, arena_chunk *c)
{
    arena_unpoison(a, chunk_base(c), c->size);
    a->capacity -= c->size;
    if (a->mem) a->mem->free(c->base, c->size);
    rp_free(c);
}

rp_status rp_arena_create(rp_arena **arena, size_t initial_bytes)
{
    return rp_arena_create_on(arena, initial_bytes, NULL);
}

rp_status rp_arena_create_on(rp_arena **arena, size_t initial_bytes, const rp_arena_memory *mem)
{
    if (!arena) return RP_ERROR(RP_ERR_INVALID, "rp_arena_create: arena is NULL");
    rp_arena *a = rp_calloc(sizeof *a);
    if (!a) return rp_last_status();
    a->mem = mem;
    a->head = chunk_new(a, initial_bytes ? initial_bytes : DEFAULT_BYTES);
    if (!a->head) {
        rp_free(a);
        return rp_last_status();
    }
    a->poison = rp_env_get()->arena_poison;
    *arena = a;
    return RP_OK;
}

void rp_arena_destroy(rp_arena *a)
{
    if (!a) return;
    for (arena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        chunk_free(a, c);
    }
    rp_free(a->free);
    rp_free(a);
}

void rp_arena_set_poison(rp_arena *a, bool on)
{
    if (a) a->poison = on;
}

static size_t round_up(size_t bytes)
{
    size_t need = (bytes + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN;
    return need ? need : RP_ALIGN;
}

/* The smallest free block of at least `need` bytes, split; NULL if none. */
static char *take_free(rp_arena *a, size_t need)
{
    int best = -1;
    for (int i = 0; i < a->n_free; i++)
        if (a->free[i].size >= need && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
    if (best < 0) return NULL;
    arena_block *b = &a->free[best];
    char *p = b->p;
    if (b->size == need) {
        memmove(b, b + 1, (size_t)(a->n_free - best - 1) * sizeof *b);
        a->n_free--;
    } else {
        b->p += need;
        b->size -= need;
    }
    return p;
}

void *rp_arena_alloc(rp_arena *a, size_t bytes)
{
    if (bytes > ((size_t)1 << 60)) {
        RP_ERROR(RP_ERR_NOMEM, "arena: %zu bytes is beyond any machine's memory", bytes);
        return NULL;
    }
    size_t need = round_up(bytes);
    char *p = a->n_free ? take_free(a, need) : NULL;
    if (!p) {
        arena_chunk *c = a->head;
        if (c->size - c->used < need) {
            /* Grow geometrically so a large first step costs few chunks. */
            size_t size = a->capacity > need ? a->capacity : need;
            arena_chunk *fresh = chunk_new(a, size);
            if (!fresh) return NULL;
            fresh->next = c;
            a->head = c = fresh;
        }
        p = chunk_base(c) + c->used;
        c->used += need;
        a->used += need;
        if (a->used > a->high_water) a->high_water = a->used;
    }
    arena_unpoison(a, p, need);
    a->live += need;
    if (a->live > a->live_peak) a->live_peak = a->live;
    return p;
}

void *rp_arena_calloc(rp_arena *a, size_t bytes)
{
    void *p = rp_arena_alloc(a, bytes);
    if (!p) return NULL;
    if (!a->mem) {
        memset(p, 0, bytes);
    } else if (bytes % 4 == 0) {
        a->mem->fill(p, 0, bytes);
    } else { /* the rounded block is the caller's too: zero all of it */
        a->mem->fill(p, 0, round_up(bytes));
    }
    return p;
}

/* Inserts [p, p+size) into the sorted free list, merging with the blocks it touches. */
static bool add_free(rp_arena *a, char *p, size_t size)
{
    int lo = 0, hi = a->n_free;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a->free[mid].p < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool joins_prev = lo > 0 && a->free[lo - 1].p + a->free[lo - 1].size == p;
    bool joins_next = lo < a->n_free && p + size == a->free[lo].p;
    if (joins_prev && joins_next) {
        a->free[lo - 1].size += size + a->free[lo].size;
        memmove(&a->free[lo], &a->free[lo + 1], (size_t)(a->n_free - lo - 1) * sizeof *a->free);
        a->n_free--;
        return true;
    }
    if (joins_prev) {
        a->free[lo - 1].size += size;
        return true;
    }
    if (joins_next) {
        a->free[lo].p = p;
        a->free[lo].size += size;
        return true;
    }
    if (a->n_free == a->cap_free) {
        int cap = a->cap_free ? 2 * a->cap_free : 64;
        arena_block *grown = rp_alloc((size_t)cap * sizeof *grown);
        if (!grown) return false;
        if (a->n_free) memcpy(grown, a->free, (size_t)a->n_free * sizeof *grown);
        rp_free(a->free);
        a->free = grown;
        a->cap_free = cap;
    }
    memmove(&a->free[lo + 1], &a->free[lo], (size_t)(a->n_free - lo) * sizeof *a->free);
    a->free[lo] = (arena_block){p, size};
    a->n_free++;
    return true;
}

/* While the head chunk's highest free block reaches its top, lower the top instead. */
static void lower_top(rp_arena *a)
{
    arena_chunk *c = a->head;
    char *base = chunk_base(c);
    for (int i = a->n_free - 1; i >= 0; i--) {
        arena_block *b = &a->free[i];
        if (b->p < base || b->p >= base + c->size) continue; /* another chunk's */
        if (b->p + b->size != base + c->used) return;
        c->used -= b->size;
        a->used -= b->size;
        memmove(b, b + 1, (size_t)(a->n_free - i - 1) * sizeof *b);
        a->n_free--;
        return; /* blocks are merged: nothing else can touch the new top */
    }
}

void rp_arena_release(rp_arena *a, void *ptr, size_t bytes)
{
    if (!a || !ptr) return;
    size_t size = round_up(bytes);
    char *p = ptr;
    if (a->poison) {
        const uint32_t nan = 0x7fc00000u; /* a quiet NaN as f32; odd as anything else */
        if (a->mem) {
            a->mem->fill(p, nan, size); /* round_up keeps size a multiple of RP_ALIGN */
        } else {
            for (size_t i = 0; i + sizeof nan <= size; i += sizeof nan)
                memcpy(p + i, &nan, sizeof nan);
        }
    }
    arena_poison(a, p, size);
    a->live -= size;
    arena_chunk *c = a->head;
    if (p + size == chunk_base(c) + c->used) {
        c->used -= size;
        a->used -= size;
        lower_top(a);
        return;
    }
    /* Out of memory for the list: the block is simply not reused this step. */
    if (add_free(a, p, size)) lower_top(a);
}

void rp_arena_reset(rp_arena *a)
{
    a->n_free = 0;
    if (a->head->next) {
        /* Several chunks: consolidate into one of the high-water size. */
        arena_chunk *single = chunk_new(a, a->high_water);
        if (single) {
            for (arena_chunk *c = a->head, *next; c; c = next) {
                next = c->next;
                chunk_free(a, c);
            }
            a->head = single;
        } else {
            /* Out of memory: keep the chunks we have, they still work. */
            for (arena_chunk *c = a->head; c; c = c->next) {
                arena_poison(a, chunk_base(c), c->size);
                c->used = 0;
            }
        }
    } else {
        arena_poison(a, chunk_base(a->head), a->head->used);
    }
    a->head->used = 0;
    a->used = 0;
    a->live = 0;
}

rp_arena_stats rp_arena_get_stats(const rp_arena *a)
{
    rp_arena_stats s = {a->used,          a->capacity, a->high_water,
                        a->system_allocs, a->live,     a->live_peak};
    return s;
}
