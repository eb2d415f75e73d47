#ifndef WEFT_CORE_HUGE_H
#define WEFT_CORE_HUGE_H

#include <stddef.h>

/* Large buffers in 2 MiB pages where the kernel grants them (THP in its
 * "madvise" mode). On a virtual machine a first touch costs a fault a
 * page: 32 MB faulted in 150-220 ms in 4 KiB pages against 5-8 ms in
 * 2 MiB ones, which is most of a resume's or a first step's time. */

/* 64-byte aligned; from 4 MiB up, 2 MiB aligned and advised. free() it. */
void *huge_alloc(size_t bytes);

/* Advise the whole 2 MiB pages inside [p, p + bytes). */
void huge_advise(void *p, size_t bytes);

/* Zeroes [p, p + bytes) of private anonymous memory: its whole pages go
 * back to the kernel (they read as zeros and cost nothing until touched
 * again), the edges are cleared. */
void huge_release(void *p, size_t bytes);

#endif
