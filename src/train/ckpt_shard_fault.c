/* The pages a load will write, faulted in ahead of it (train/ckpt_shard.h).
 * A resume writes tens of MB of memory no one has touched yet: the kernel
 * must hand out and zero each page on its first write, and a virtual
 * machine's host may have to back it first (a guest that reports its free
 * memory to the host gets it back one fault at a time). Done by the reads'
 * copies and the all-gather's, that cost lies on the load's critical path,
 * after each read. A helper thread asks for the pages (MADV_POPULATE_WRITE,
 * which leaves their contents alone) in the order the load writes them,
 * while the reader waits on the disk. Where the kernel lacks it, nothing is
 * done ahead and the writes fault the pages in as before. */
#include "train/ckpt_shard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* STEP: the bytes asked for at once (one huge page), so that a stop is
 * heard soon */
enum { STEP = 2 << 20 };

typedef struct {
    uintptr_t lo, hi; /* whole pages */
} span;

struct ckpt_fault {
    span *s;
    int n, started;
    atomic_int stop;
    pthread_t th;
};

static void *populate(void *arg)
{
    ckpt_fault *f = arg;
#ifdef MADV_POPULATE_WRITE
    for (int i = 0; i < f->n; i++)
        for (uintptr_t a = f->s[i].lo; a < f->s[i].hi; a += STEP) {
            size_t len = f->s[i].hi - a < STEP ? f->s[i].hi - a : STEP;
            /* a kernel without it, or memory it will not give: the load's
             * own writes fault the rest in */
            if (atomic_load_explicit(&f->stop, memory_order_relaxed) ||
                madvise((void *)a, len, MADV_POPULATE_WRITE) != 0)
                return NULL;
        }
#endif
    return NULL;
}

int ckpt_fault_start(ckpt_fault **out, const ckpt_span *at, int n)
{
    *out = NULL;
#ifndef MADV_POPULATE_WRITE
    (void)at;
    (void)n;
    return 0;
#else
    ckpt_fault *f = calloc(1, sizeof *f);
    if (!f || !(f->s = calloc((size_t)n + 1, sizeof *f->s))) {
        free(f);
        return WEFT_ENOMEM;
    }
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* whole pages: the bytes beside a span in its first and last page are
     * left as they are, as every page's are */
    for (int i = 0; i < n; i++)
        if (at[i].bytes)
            f->s[f->n++] = (span){ (uintptr_t)at[i].p & ~(pg - 1),
                                   ((uintptr_t)at[i].p + at[i].bytes + pg - 1) & ~(pg - 1) };
    atomic_init(&f->stop, 0);
    /* no thread: the writes fault the pages in themselves */
    f->started = f->n > 0 && pthread_create(&f->th, NULL, populate, f) == 0;
    *out = f;
    return 0;
#endif
}

void ckpt_fault_stop(ckpt_fault *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, 1);
    if (f->started)
        pthread_join(f->th, NULL);
    free(f->s);
    free(f);
}
