/* What memory a process has not touched before costs on this machine: a
 * load writes every byte of its parameters and optimiser state into such
 * memory, where dd's read reuses one buffer, so its first touch is a
 * floor of the load's CPU that the disk's speed does not show. On a
 * virtual machine the figure moves with what the host still backs: a
 * guest that reports its free memory to the host (virtio-balloon free
 * page reporting) hands whole free 2 MiB blocks back, and memory drawn
 * from them costs the host's fault as well as the kernel's zeroing.
 *
 *   cc -O2 -o /tmp/fresh_pages bench/fresh_pages.c
 *   /tmp/fresh_pages MB [IDLE_S]
 *
 * For 2 MiB pages (MADV_HUGEPAGE, the model's and the loaded state's
 * buffers) and 4 KiB pages (MADV_NOHUGEPAGE): MB written a byte a page
 * right after as much was written and unmapped ("just freed": memory the
 * host backs), and again after the memory lay free IDLE_S seconds (4).
 * One line each, GB/s of first touch and the seconds for MB. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* seconds to write a byte into each 4 KiB of a fresh mapping of n bytes */
static double touch(size_t n, int huge)
{
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    (void)madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    double t = now();
    for (size_t i = 0; i < n; i += 4096)
        p[i] = 1;
    t = now() - t;
    munmap(p, n);
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: fresh_pages MB [IDLE_S]\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 20;
    unsigned idle = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
    for (int huge = 1; huge >= 0; huge--) {
        const char *kind = huge ? "2 MiB pages" : "4 KiB pages";
        if (touch(n, huge) < 0) { /* the first brings the memory in: the next finds it just freed */
            perror("mmap");
            return 1;
        }
        double warm = touch(n, huge);
        sleep(idle);
        double cold = touch(n, huge);
        printf("fresh memory, %s, %zu MB: just freed %.2f GB/s (%.3f s), after %u s free "
               "%.2f GB/s (%.3f s)\n",
               kind, n >> 20, (double)n / warm / 1e9, warm, idle, (double)n / cold / 1e9, cold);
    }
    return 0;
}
