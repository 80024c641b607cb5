/*
 * alloc.c - aligned allocation with a process-wide counter, so tests can
 * prove that the steady-state step allocates nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "replicator/core.h"

static uint64_t alloc_count;

void *rp_alloc(size_t bytes)
{
    void *p = NULL;
    size_t rounded = (bytes + RP_ALIGN - 1) / RP_ALIGN * RP_ALIGN;
    if (rounded == 0) rounded = RP_ALIGN;
    if (posix_memalign(&p, RP_ALIGN, rounded) != 0) {
        RP_ERROR(RP_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    __atomic_fetch_add(&alloc_count, 1, __ATOMIC_RELAXED);
    return p;
}

void *rp_calloc(size_t bytes)
{
    void *p = rp_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void rp_free(void *ptr)
{
    free(ptr);
}

uint64_t rp_alloc_count(void)
{
    return __atomic_load_n(&alloc_count, __ATOMIC_RELAXED);
}
