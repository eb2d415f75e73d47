/* What one byte costs to move between two processes of this host by
 * process_vm_readv (the direct algorithm's single copy) against memcpy
 * within one process, once (what a single copy in shared memory would
 * cost) and twice (the shared-memory ring's two copies). A child reads
 * its parent's buffer; every figure is the fastest of the repetitions,
 * so a loaded machine's delays fall out.
 *
 *   cc -O2 -o /tmp/cma_copy bench/cma_copy.c && /tmp/cma_copy 131072 524288 2097152 33554432 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double least(double a, double b) { return a < b ? a : b; }

/* In the child: read n bytes at src in process from, and copy them. */
static int measure(pid_t from, const char *src, size_t n)
{
    char *dst = malloc(n), *mid = malloc(n);
    if (!dst || !mid)
        return 1;
    memset(dst, 0, n);
    memset(mid, 0, n);
    int reps = n > (4u << 20) ? 50 : 2000;
    double cma = 1e9, two = 1e9, one = 1e9;
    for (int i = 0; i < reps; i++) {
        struct iovec l = { dst, n }, r = { (void *)src, n };
        double t0 = now();
        if (process_vm_readv(from, &l, 1, &r, 1, 0) != (ssize_t)n) {
            perror("process_vm_readv");
            return 1;
        }
        double t1 = now();
        memcpy(mid, dst, n);
        memcpy(dst, mid, n);
        double t2 = now();
        memcpy(mid, dst, n);
        double t3 = now();
        cma = least(cma, t1 - t0);
        two = least(two, t2 - t1);
        one = least(one, t3 - t2);
    }
    printf("%10zu B: process_vm_readv %9.2f us, two memcpy %9.2f us, one memcpy %9.2f us\n", n,
           cma * 1e6, two * 1e6, one * 1e6);
    fflush(stdout);
    free(dst);
    free(mid);
    return 0;
}

int main(int argc, char **argv)
{
    int bad = 0;
    for (int a = 1; a < argc; a++) {
        size_t n = strtoull(argv[a], NULL, 0);
        char *src = n ? malloc(n) : NULL;
        if (!src) {
            fprintf(stderr, "cma_copy: %s: expected a size in bytes\n", argv[a]);
            return 2;
        }
        memset(src, 1, n);
        pid_t parent = getpid(), child = fork();
        if (child == 0)
            _exit(measure(parent, src, n));
        int st = 1;
        if (child < 0 || waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            bad = 1;
        free(src);
    }
    return bad;
}
