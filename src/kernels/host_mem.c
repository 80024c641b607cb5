/*
 * host_mem.c - the memory slots of the host tables (cpu and ref): tensor storage is host memory,
 * so upload, download and copy are one memcpy and nothing is ever queued.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"

void *kernels_host_mem_alloc(size_t bytes)
{
    return rp_alloc(bytes ? bytes : 1);
}

void kernels_host_mem_free(void *p, size_t bytes)
{
    (void)bytes;
    rp_free(p);
}

void kernels_host_mem_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) memmove(dst, src, bytes);
}

void kernels_host_mem_fill(void *dst, uint32_t pattern, size_t bytes)
{
    if (pattern == 0) {
        memset(dst, 0, bytes);
        return;
    }
    uint32_t *w = dst;
    for (size_t i = 0; i < bytes / sizeof *w; i++)
        w[i] = pattern;
}

/*
 * Zeros [dst, dst + bytes): the whole pages inside by MADV_DONTNEED (private anonymous memory,
 * which posix_memalign's is, reads back as zeros and is resident again only once written), the
 * partial pages at either end by memset, since their other bytes are someone else's. A range
 * under 16 pages is only cleared: releasing it would save little and cost page faults.
 */
void kernels_host_mem_discard(void *dst, size_t bytes)
{
    long got = sysconf(_SC_PAGESIZE);
    uintptr_t page = got > 0 ? (uintptr_t)got : 4096, a = (uintptr_t)dst, b = a + bytes;
    uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi <= lo || hi - lo < 16 * page || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
        memset(dst, 0, bytes);
        return;
    }
    memset(dst, 0, lo - a);
    memset((void *)hi, 0, b - hi);
}

void kernels_host_mem_sync(void) {}

size_t kernels_resident_bytes(const kernels_table *k, const void *p, size_t bytes)
{
    if (!p || !bytes) return 0;
    if (!k->host_storage) return bytes;
    long got = sysconf(_SC_PAGESIZE);
    uintptr_t page = got > 0 ? (uintptr_t)got : 4096;
    uintptr_t lo = (uintptr_t)p / page * page, hi = ((uintptr_t)p + bytes + page - 1) / page * page;
    size_t n = (hi - lo) / page, count = 0;
    unsigned char vec[256];
    for (size_t at = 0; at < n; at += sizeof vec) {
        size_t m = n - at < sizeof vec ? n - at : sizeof vec;
        if (mincore((void *)(lo + at * page), m * page, vec) != 0) return bytes;
        for (size_t i = 0; i < m; i++)
            count += vec[i] & 1;
    }
    return count * page;
}

void *kernels_staging_view(kernels_staging *s, const kernels_table *k, const void *storage,
                           size_t bytes, bool download)
{
    if (k->host_storage) return (void *)storage;
    if (bytes > s->cap) {
        void *grown = rp_alloc(bytes);
        if (!grown) return NULL;
        rp_free(s->host);
        s->host = grown;
        s->cap = bytes;
    }
    if (download && bytes) k->mem_download(s->host, storage, bytes);
    return s->host;
}

void kernels_staging_commit(const kernels_table *k, void *storage, const void *view, size_t bytes)
{
    if (view != storage && bytes) k->mem_upload(storage, view, bytes);
}

void kernels_staging_free(kernels_staging *s)
{
    rp_free(s->host);
    s->host = NULL;
    s->cap = 0;
}
