/*
 * fault.c - turns a host access to strict storage into a message. The pool is PROT_NONE between
 * kernel calls, so such an access is a SIGSEGV whose address lies in the pool: the handler names
 * it, prints the stack of the code that made it, and lets the process die of the signal, as it
 * would have without the handler. Faults elsewhere go to whatever handler was installed before
 * (the default, or a sanitizer's), untouched.
 *
 * Only async-signal-safe calls run in the handler, plus backtrace() and backtrace_symbols_fd(),
 * which are safe in practice once libgcc's unwinder is loaded: kstrict_fault_install() calls
 * backtrace() once so that the handler never loads it.
 */
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/strict/strict.h"

static uintptr_t fault_base;
static size_t fault_bytes;
static const size_t *fault_top; /* the pool's top, read atomically (the pool owns it) */
static struct sigaction previous_segv, previous_bus;

static void put(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* "0x" and the address in hex, without printf (not async-signal-safe). */
static void put_address(uintptr_t a)
{
    char buf[2 + 2 * sizeof a + 1];
    char *p = buf + sizeof buf;
    *--p = '\0';
    do {
        *--p = "0123456789abcdef"[a & 15];
        a >>= 4;
    } while (a);
    *--p = 'x';
    *--p = '0';
    put(p);
}

static void on_fault(int sig, siginfo_t *si, void *context)
{
    (void)context;
    uintptr_t a = (uintptr_t)si->si_addr;
    bool in_pool = si->si_code > 0 && a >= fault_base && a - fault_base < fault_bytes;
    if (!in_pool) {
        /* Not ours: put the previous handler back. A real fault repeats when the instruction
         * runs again and reaches it; a signal sent by kill() has to be sent again. */
        sigaction(sig, sig == SIGSEGV ? &previous_segv : &previous_bus, NULL);
        if (si->si_code <= 0) raise(sig);
        return;
    }
    if (a - fault_base < __atomic_load_n(fault_top, __ATOMIC_RELAXED)) {
        put("strict kernels: host code touched tensor storage at ");
        put_address(a);
        put(" outside a kernel call (a read or write a device backend could not serve); "
            "backtrace:\n");
    } else {
        /* No block was ever there: an overrun past the last one, by a kernel or the host. */
        put("strict kernels: access at ");
        put_address(a);
        put(" past the last block of storage (an overrun); backtrace:\n");
    }
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    /* Die of the signal, with the default action (a core dump where enabled). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered when the handler returns, if the instruction does not fault first */
}

/* Makes on_fault the handler of sig, keeping the one it replaces in *previous. */
static void take_signal(int sig, struct sigaction *previous)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, previous);
}

void kstrict_fault_install(void *pool_base, size_t pool_bytes, const size_t *top)
{
    fault_top = top;
    fault_base = (uintptr_t)pool_base;
    fault_bytes = pool_bytes;
    void *warm[1];
    (void)backtrace(warm, 1);

    /* An alternate stack, on the thread that first uses the table, unless one is set already
     * (a sanitizer's): a stack overflow there still reaches the previous handler. Other threads
     * run the handler on their own stacks, which a read of storage leaves intact. */
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
        size_t size = 64 << 10;
        void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem != MAP_FAILED) {
            stack_t ss = {.ss_sp = mem, .ss_size = size, .ss_flags = 0};
            if (sigaltstack(&ss, NULL) != 0) munmap(mem, size);
        }
    }

    take_signal(SIGSEGV, &previous_segv);
    take_signal(SIGBUS, &previous_bus);
}

void kstrict_fault_reclaim(void)
{
    /* A handler installed after ours (cmocka's, around each test) would report a host touch as a
       bare "Segmentation fault": take the signal back, keeping the newcomer as the one a fault
       outside the pool goes to. */
    struct sigaction now;
    if (sigaction(SIGSEGV, NULL, &now) != 0 || !(now.sa_flags & SA_SIGINFO) ||
        now.sa_sigaction != on_fault)
        take_signal(SIGSEGV, &previous_segv);
}
