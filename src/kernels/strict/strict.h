/*
 * strict.h - the strict kernel table's machinery (RP_KERNELS=strict): a storage pool that host
 * code cannot read between kernel calls, the check that every buffer reaching a kernel is
 * storage, and the fault handler that names a host read of storage.
 *
 * The table (table.c) runs the cpu table's kernels. Its storage comes from one large reserved
 * mapping (pool.c) that is PROT_NONE except while a kernel call is running, so host code that
 * dereferences a tensor's storage outside a kernel faults, and fault.c turns that fault into a
 * message with a backtrace. It proves the seam a device backend needs: no code above
 * src/kernels/ reads or writes storage, and no host memory reaches a kernel.
 *
 * What it cannot see: the pool is open process-wide while any thread is inside a kernel, so a
 * host read racing another thread's kernel call (replica threads) goes unnoticed. Runs with
 * several replicas catch most such reads anyway, as most reads do not overlap a kernel call.
 */
#ifndef RP_KERNELS_STRICT_H
#define RP_KERNELS_STRICT_H

#include <stdbool.h>
#include <stddef.h>

/* ---- the pool (pool.c) ---- */

/*
 * Reserves the pool's address space (64 GiB, or less where that fails) and installs the fault
 * handler, once per process; kernels_strict() calls it. Thread-safe.
 */
void kstrict_init(void);

/*
 * `bytes` of storage rounded up to whole pages (so aligned to RP_ALIGN), first fit; NULL when the
 * reservation is full. Thread-safe. Pages the pool has not handed out before are zero; reused
 * ones hold what they held.
 */
void *kstrict_pool_alloc(size_t bytes);
/*
 * Returns a block. `p` must be a live block's start and `bytes` the size it was allocated with:
 * anything else (a double free, a wrong size, host memory) is a broken invariant of the caller
 * and aborts with a message. NULL is ignored. Thread-safe.
 */
void kstrict_pool_free(void *p, size_t bytes);
/* Whether p lies in the pool's reservation (storage, live or not). Lock-free. */
bool kstrict_pool_contains(const void *p);

/*
 * Opens the pool for reading and writing around a kernel call, and closes it. Calls nest and
 * overlap across threads: a process-wide count opens the pool on 0 -> 1 and closes it on 1 -> 0.
 */
void kstrict_pool_open(void);
void kstrict_pool_close(void);

/* What the pool holds, for the tests. */
typedef struct kstrict_pool_stats {
    void *base;      /* where the reservation starts (NULL: it failed) */
    size_t reserved; /* bytes of address space reserved */
    size_t top;      /* bytes from the start that have ever been handed out (the opened range) */
    size_t live;     /* bytes in live blocks, rounded to pages */
    size_t blocks;   /* live blocks */
    int open_count;  /* kernel calls in progress */
} kstrict_pool_stats;
kstrict_pool_stats kstrict_pool_get_stats(void);

/* ---- the fault handler (fault.c) ---- */

/*
 * Installs the SIGSEGV and SIGBUS handler: a fault inside the pool prints what happened and a
 * backtrace, then the process dies of the signal; any other fault goes to the handler that was
 * there before. Called once, by kstrict_init().
 */
void kstrict_fault_install(void *pool_base, size_t pool_bytes, const size_t *top);
/* Reinstalls the SIGSEGV handler when something replaced it since (called as the pool closes). */
void kstrict_fault_reclaim(void);

/* ---- argument checks (args.c) ---- */

/* RP_STRICT_ARGS: "0" off, "warn" warns once per slot and argument, anything else aborts. */
typedef enum {
    RP_STRICT_ARGS_OFF,
    RP_STRICT_ARGS_ABORT,
    RP_STRICT_ARGS_WARN,
} kstrict_args_mode;

/* The mode in force: RP_STRICT_ARGS's (rp_env_get()->strict_args), read once. */
kstrict_args_mode kstrict_args_get(void);

/*
 * Checks the buffer arguments of one kernel call: each of ptrs[0, n) must be NULL or storage.
 * `names` is the comma-separated list of their names, as written in the call (the CHECK macro of
 * table.c stringifies it). A violation goes to kstrict_report_host_arg().
 */
void kstrict_args_check(const char *slot, const char *names, const void *const *ptrs, int n);

/*
 * Reports that `arg` of `slot` is host memory: "strict kernels: <slot>: argument <arg> (<p>) is
 * host memory, not storage from mem_alloc" on stderr and a backtrace, then aborts. Under
 * RP_STRICT_ARGS=warn it prints the line once per slot and argument and returns; under
 * RP_STRICT_ARGS=0 it returns at once. A host buffer in a kernel is a call a device backend could
 * not run: the bug is in the caller.
 */
void kstrict_report_host_arg(const char *slot, const char *arg, const void *p);
/* The converse, the same way: mem_upload's source or mem_download's destination is storage. */
void kstrict_report_storage_arg(const char *slot, const char *arg, const void *p);

#endif
