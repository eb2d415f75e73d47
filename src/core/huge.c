#include "core/huge.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

void huge_advise(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1),
              hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (hi > lo) /* advice only: where the kernel says no, 4 KiB pages do */
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

void *huge_alloc(size_t bytes)
{
    if (bytes < 2 * HUGE_PAGE) /* rounding up to a whole page would cost more than it saves */
        return aligned_alloc(64, ((bytes ? bytes : 1) + 63) & ~(size_t)63);
    size_t whole = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, whole);
    if (p)
        huge_advise(p, whole);
    return p;
}

void huge_release(void *p, size_t bytes)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, e = a + bytes,
              lo = (a + pg - 1) & ~(pg - 1), hi = e & ~(pg - 1);
    if (!bytes)
        return;
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
        memset(p, 0, bytes);
        return;
    }
    memset(p, 0, lo - a);
    memset((void *)hi, 0, e - hi);
}
