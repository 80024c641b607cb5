/*
 * pool.c - the strict table's storage: one reserved mapping, PROT_NONE except while a kernel
 * call runs, handed out in whole pages, first fit.
 *
 * Why one mapping: opening and closing the storage around every kernel call is then one
 * mprotect each way over the range ever handed out, whatever the number of blocks, and "is this
 * pointer storage?" is a comparison with two bounds. Why whole pages: protection is per page, so
 * a block never shares a page with host memory, and a host read anywhere in any block faults.
 *
 * The block list lives in host memory (the pool itself is unreadable): one array sorted by
 * offset that tiles [0, top), each block live or free. Allocation takes the first free block
 * that fits and splits it, else grows top; freeing merges a block with its free neighbours.
 * Top never shrinks: the pages stay reserved, and the free list reuses them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/strict/strict.h"

typedef struct pool_block {
    size_t off, len; /* bytes from the base; whole pages */
    bool live;
} pool_block;

static struct {
    char *base;
    size_t reserved, page;
    pthread_mutex_t lock;
    size_t top;  /* [base, base + top) is tiled by blocks and opened around kernel calls */
    size_t live; /* bytes in live blocks */
    size_t nlive;
    int open_count; /* kernel calls in progress, over all threads */
    pool_block *blocks;
    size_t nblocks, cap;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* A broken invariant of the pool or its caller: say which, and stop. */
static void pool_die(const char *what, const void *p, size_t a, size_t b)
{
    fprintf(stderr, "strict kernels: %s (%p, %zu, %zu)\n", what, p, a, b);
    abort();
}

static void pool_protect(size_t off, size_t len, int prot)
{
    if (len == 0) return;
    if (mprotect(pool.base + off, len, prot) != 0)
        pool_die(prot == PROT_NONE ? "mprotect closing the pool failed"
                                   : "mprotect opening the pool failed",
                 pool.base + off, len, (size_t)errno);
}

static void reserve(void)
{
    long page = sysconf(_SC_PAGESIZE);
    pool.page = page > 0 ? (size_t)page : 4096;
    /* Address space only (MAP_NORESERVE, PROT_NONE): nothing is committed until pages are
     * opened and touched. Where 64 GiB is refused (a ulimit -v, a 32-bit address space), less. */
    for (size_t bytes = (size_t)64 << 30; bytes >= ((size_t)64 << 20); bytes /= 2) {
        void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            pool.base = p;
            pool.reserved = bytes;
            break;
        }
    }
    if (pool.base) kstrict_fault_install(pool.base, pool.reserved, &pool.top);
}

void kstrict_init(void)
{
    pthread_once(&init_once, reserve);
}

bool kstrict_pool_contains(const void *p)
{
    /* base and reserved are set once, before any storage exists. */
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)pool.base;
    return pool.base && a >= b && a - b < pool.reserved;
}

/* Makes room for one more block at index i (the list is sorted by offset). */
static bool blocks_insert(size_t i, pool_block blk)
{
    if (pool.nblocks == pool.cap) {
        size_t cap = pool.cap ? 2 * pool.cap : 256;
        pool_block *b = realloc(pool.blocks, cap * sizeof *b);
        if (!b) return false;
        pool.blocks = b;
        pool.cap = cap;
    }
    memmove(pool.blocks + i + 1, pool.blocks + i, (pool.nblocks - i) * sizeof *pool.blocks);
    pool.blocks[i] = blk;
    pool.nblocks++;
    return true;
}

static void blocks_remove(size_t i)
{
    memmove(pool.blocks + i, pool.blocks + i + 1, (pool.nblocks - i - 1) * sizeof *pool.blocks);
    pool.nblocks--;
}

void *kstrict_pool_alloc(size_t bytes)
{
    kstrict_init();
    if (!pool.base || bytes > pool.reserved) return NULL;
    size_t need = (bytes + pool.page - 1) / pool.page * pool.page;
    if (need == 0) need = pool.page;
    void *p = NULL;
    pthread_mutex_lock(&pool.lock);
    for (size_t i = 0; i < pool.nblocks; i++) {
        pool_block *b = &pool.blocks[i];
        if (b->live || b->len < need) continue;
        if (b->len > need &&
            !blocks_insert(i + 1, (pool_block){b->off + need, b->len - need, false}))
            goto done;
        b = &pool.blocks[i]; /* the insert may have moved the list */
        b->len = need;
        b->live = true;
        p = pool.base + b->off;
        goto done;
    }
    /* Nothing free fits: grow the top, taking in the last block when it is free. */
    pool_block *last = pool.nblocks ? &pool.blocks[pool.nblocks - 1] : NULL;
    size_t start = last && !last->live ? last->off : pool.top;
    if (need > pool.reserved - start) goto done;
    if (last && !last->live) {
        last->len = need;
        last->live = true;
    } else if (!blocks_insert(pool.nblocks, (pool_block){start, need, true})) {
        goto done;
    }
    /* New pages are PROT_NONE from the reservation: open them if kernels are running now. */
    if (pool.open_count > 0)
        pool_protect(pool.top, start + need - pool.top, PROT_READ | PROT_WRITE);
    __atomic_store_n(&pool.top, start + need, __ATOMIC_RELAXED); /* the fault handler reads it */
    p = pool.base + start;
done:
    if (p) {
        pool.live += need;
        pool.nlive++;
    }
    pthread_mutex_unlock(&pool.lock);
    return p;
}

void kstrict_pool_free(void *p, size_t bytes)
{
    if (!p) return;
    if (!kstrict_pool_contains(p)) pool_die("mem_free of host memory", p, bytes, 0);
    size_t off = (size_t)((char *)p - pool.base);
    size_t len = (bytes + pool.page - 1) / pool.page * pool.page;
    if (len == 0) len = pool.page;
    pthread_mutex_lock(&pool.lock);
    size_t lo = 0, hi = pool.nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pool.blocks[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == pool.nblocks || pool.blocks[lo].off != off || !pool.blocks[lo].live) {
        pthread_mutex_unlock(&pool.lock);
        pool_die("mem_free of a pointer that is not a live block (freed twice, or inside a block)",
                 p, bytes, 0);
    }
    if (pool.blocks[lo].len != len) {
        size_t had = pool.blocks[lo].len;
        pthread_mutex_unlock(&pool.lock);
        pool_die("mem_free with another size than mem_alloc's (bytes given, block's pages)", p,
                 bytes, had);
    }
    pool.blocks[lo].live = false;
    pool.live -= len;
    pool.nlive--;
    if (lo + 1 < pool.nblocks && !pool.blocks[lo + 1].live) {
        pool.blocks[lo].len += pool.blocks[lo + 1].len;
        blocks_remove(lo + 1);
    }
    if (lo > 0 && !pool.blocks[lo - 1].live) {
        pool.blocks[lo - 1].len += pool.blocks[lo].len;
        blocks_remove(lo);
    }
    pthread_mutex_unlock(&pool.lock);
}

void kstrict_pool_open(void)
{
    pthread_mutex_lock(&pool.lock);
    if (pool.open_count++ == 0) pool_protect(0, pool.top, PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&pool.lock);
}

void kstrict_pool_close(void)
{
    pthread_mutex_lock(&pool.lock);
    if (pool.open_count <= 0) {
        pthread_mutex_unlock(&pool.lock);
        pool_die("pool closed more often than opened", pool.base, 0, 0);
    }
    if (--pool.open_count == 0) {
        pool_protect(0, pool.top, PROT_NONE);
        if (pool.base) kstrict_fault_reclaim();
    }
    pthread_mutex_unlock(&pool.lock);
}

kstrict_pool_stats kstrict_pool_get_stats(void)
{
    kstrict_init();
    pthread_mutex_lock(&pool.lock);
    kstrict_pool_stats s = {.base = pool.base,
                            .reserved = pool.reserved,
                            .top = pool.top,
                            .live = pool.live,
                            .blocks = pool.nlive,
                            .open_count = pool.open_count};
    pthread_mutex_unlock(&pool.lock);
    return s;
}
