/* membw: the memory-copy bandwidth of this host, the bound an all-reduce
 * within one host is measured against. Starts P processes (default: one
 * per core) that each memcpy a BYTES buffer to another (default 64 MiB,
 * beyond the caches) repeatedly; prints the best aggregate over the runs
 * as bytes copied per second and as memory traffic (read + write = twice
 * that) per second.
 *
 *   cc -O2 -o membw membw.c && ./membw [BYTES] [P] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 64u << 20;
    long p = argc > 2 ? strtol(argv[2], NULL, 0) : sysconf(_SC_NPROCESSORS_ONLN);
    int fds[2];
    if (p < 1 || n < 4096 || pipe(fds))
        return 2;
    for (long k = 0; k < p; k++) {
        if (fork() == 0) {
            char *a = malloc(n), *b = malloc(n);
            double best = 0;
            if (!a || !b)
                _exit(1);
            memset(a, 1, n);
            memset(b, 2, n);
            for (int rep = 0; rep < 7; rep++) {
                double t = now();
                for (int i = 0; i < 4; i++)
                    memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
                double r = 4.0 * (double)n / (now() - t);
                if (r > best)
                    best = r;
            }
            if (write(fds[1], &best, sizeof best) != sizeof best)
                _exit(1);
            _exit(0);
        }
    }
    close(fds[1]);
    double sum = 0, r;
    while (read(fds[0], &r, sizeof r) == sizeof r)
        sum += r;
    while (wait(NULL) > 0)
        ;
    printf("membw: %ld process(es) x %zu B: copy %.3f GB/s, traffic %.3f GB/s\n", p, n, sum / 1e9,
           2 * sum / 1e9);
    return 0;
}
