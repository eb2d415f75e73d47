/* cacheline_rtt: the floor of any shared-memory collective on this host,
 * a cache line's round trip between two processes. Two processes share
 * one 64-byte line through an anonymous shared mapping; the first writes
 * an odd number and waits for the second to answer with the next even
 * one, and so on: every turn moves the line to the other core and back.
 *
 *   cc -O2 -o cacheline_rtt bench/cacheline_rtt.c
 *   ./cacheline_rtt [-n ROUND_TRIPS] [-r REPEATS] [-c CPU_A,CPU_B] [-y]
 *
 * -c pins the two processes (the default leaves placement to the
 * scheduler); -y yields while waiting instead of spinning with pause, as
 * a rank does when its host has more ranks than cores: with both on one
 * core this measures two context switches, not a cache line. Prints the
 * round trip in ns, median and minimum of the repeats. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Alignas(64) _Atomic uint64_t turn;
    char pad[56];
} line_t;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void relax(int yield)
{
    if (yield) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void pin(int cpu)
{
    cpu_set_t s;
    if (cpu < 0)
        return;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s))
        perror("sched_setaffinity");
}

/* Plays side `me` (0 writes odd turns, 1 even ones) for n round trips. */
static void play(line_t *l, int me, uint64_t from, long n, int yield)
{
    for (long i = 0; i < n; i++) {
        uint64_t mine = from + 2 * (uint64_t)i + (uint64_t)me + 1;
        while (atomic_load_explicit(&l->turn, memory_order_acquire) != mine - 1)
            relax(yield);
        atomic_store_explicit(&l->turn, mine, memory_order_release);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long n = 200000;
    int reps = 5, cpu[2] = { -1, -1 }, yield = 0, o;
    while ((o = getopt(argc, argv, "n:r:c:y")) != -1) {
        switch (o) {
        case 'n': n = atol(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'c':
            if (sscanf(optarg, "%d,%d", &cpu[0], &cpu[1]) != 2) {
                fprintf(stderr, "-c wants CPU_A,CPU_B\n");
                return 2;
            }
            break;
        case 'y': yield = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n ROUND_TRIPS] [-r REPEATS] [-c A,B] [-y]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || reps < 1 || reps > 1000)
        return 2;
    line_t *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    atomic_store(&l->turn, 0);
    pid_t kid = fork();
    if (kid < 0) {
        perror("fork");
        return 1;
    }
    if (kid == 0) {
        pin(cpu[1]);
        for (int r = 0; r < reps + 1; r++) /* one warm-up repeat */
            play(l, 1, (uint64_t)r * 2 * (uint64_t)n, n, yield);
        _exit(0);
    }
    pin(cpu[0]);
    double t[1000];
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        play(l, 0, (uint64_t)r * 2 * (uint64_t)n, n, yield);
        /* the last answer: the child's final store */
        while (atomic_load(&l->turn) != (uint64_t)(r + 1) * 2 * (uint64_t)n)
            relax(yield);
        if (r > 0)
            t[r - 1] = (now() - t0) / (double)n * 1e9;
    }
    waitpid(kid, NULL, 0);
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    printf("cache line round trip: median %.1f ns, min %.1f ns (%ld round trips x %d, %s, cpus %d,%d)\n",
           t[reps / 2], t[0], n, reps, yield ? "yielding" : "spinning", cpu[0], cpu[1]);
    return 0;
}
