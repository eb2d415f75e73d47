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
 * round trip in ns, median and minimum of the repeats.
 *
 *   ./cacheline_rtt -b BYTES [-r REPEATS] [-c CPU_A,CPU_B]
 *
 * -b: the other bound, a large message's: what one message of BYTES can
 * move between the two processes, three ways, as GB/s of BYTES over one
 * way's time (medians of the repeats): memcpy between two buffers of the
 * first process (what bench/p2p_bw.c's memcpy column copies), a
 * ping-pong through two rings of 2 MiB in shared memory with 64 KiB
 * published at a time (the sender's and the receiver's copies under way
 * at once: the shape of weft's point-to-point ring without the library
 * around it), process_vm_readv of the second process's buffer (one
 * copy, made by the kernel: the shape of single copy), and a ping-pong
 * where each side copies the other's message out of a shared mapping
 * into a private buffer of its own (one copy in user space: the shape of
 * weft_mem_alloc's registered path, four buffers of BYTES touched a round
 * trip where memcpy touches two). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
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

#define RING_BYTES (2u << 20)
#define RING_PIECE (64u << 10)

typedef struct {
    _Alignas(64) _Atomic uint64_t tail; /* bytes the sender published */
    _Alignas(64) _Atomic uint64_t head; /* bytes the receiver took */
} ring_ctl;

typedef struct {
    ring_ctl *c;
    char *data;
    uint64_t pos, seen;
} ring;

static void ring_send(ring *r, const char *src, size_t n)
{
    for (size_t done = 0; done < n;) {
        size_t k = n - done < RING_PIECE ? n - done : RING_PIECE;
        while (r->pos + k - r->seen > RING_BYTES) {
            r->seen = atomic_load_explicit(&r->c->head, memory_order_acquire);
            relax(0);
        }
        size_t at = (size_t)(r->pos % RING_BYTES), first = RING_BYTES - at;
        if (first >= k) {
            memcpy(r->data + at, src + done, k);
        } else {
            memcpy(r->data + at, src + done, first);
            memcpy(r->data, src + done + first, k - first);
        }
        r->pos += k;
        done += k;
        atomic_store_explicit(&r->c->tail, r->pos, memory_order_release);
    }
}

static void ring_recv(ring *r, char *dst, size_t n)
{
    for (size_t done = 0; done < n;) {
        uint64_t t;
        while ((t = atomic_load_explicit(&r->c->tail, memory_order_acquire)) == r->pos)
            relax(0);
        size_t k = (size_t)(t - r->pos), at = (size_t)(r->pos % RING_BYTES);
        if (k > n - done)
            k = n - done;
        if (k > RING_BYTES - at)
            k = RING_BYTES - at;
        memcpy(dst + done, r->data + at, k);
        r->pos += k;
        done += k;
        atomic_store_explicit(&r->c->head, r->pos, memory_order_release);
    }
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], cmp);
    return t[n / 2];
}

/* -b: memcpy, the two-copy ring and process_vm_readv for one size. */
static int bandwidth(size_t n, int reps, const int cpu[2])
{
    int it = n <= (4u << 20) ? 40 : 8, go[2];
    size_t shared = 2 * (sizeof(ring_ctl) + RING_BYTES);
    char *m = mmap(NULL, shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *src = malloc(n), *dst = malloc(n);
    /* the registered shape's two sources (the parent's first), and the
     * line that passes the turn */
    char *reg = mmap(NULL, 2 * n + 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    line_t *turn = (line_t *)(void *)(reg + 2 * n);
    if (m == MAP_FAILED || reg == MAP_FAILED || !src || !dst || pipe(go)) {
        perror("-b");
        return 1;
    }
    memset(m, 0, shared); /* every page mapped before the clock runs */
    memset(reg, 0, 2 * n + 64);
    ring rg[2];
    for (int k = 0; k < 2; k++)
        rg[k] = (ring){ (ring_ctl *)(void *)(m + k * (sizeof(ring_ctl) + RING_BYTES)),
                        m + k * (sizeof(ring_ctl) + RING_BYTES) + sizeof(ring_ctl), 0, 0 };
    pid_t kid = fork();
    if (kid < 0) {
        perror("fork");
        return 1;
    }
    if (kid == 0) { /* answers every message; then idles while its buffer is read */
        char b;
        pin(cpu[1]);
        memset(src, 2, n); /* its own pages, not the parent's */
        memset(reg + n, 2, n);
        memset(dst, 0, n);
        for (int i = 0; i < (reps + 1) * it; i++) {
            ring_recv(&rg[0], dst, n);
            ring_send(&rg[1], src, n);
        }
        for (uint64_t k = 0; k < (uint64_t)(reps + 1) * it; k++) {
            while (atomic_load_explicit(&turn->turn, memory_order_acquire) != 2 * k + 1)
                relax(0);
            memcpy(dst, reg, n);
            __asm__ __volatile__("" : : "r"(dst) : "memory");
            atomic_store_explicit(&turn->turn, 2 * k + 2, memory_order_release);
        }
        if (read(go[0], &b, 1) < 0)
            _exit(1);
        _exit(0);
    }
    pin(cpu[0]);
    memset(src, 1, n);
    memset(reg, 1, n);
    memset(dst, 0, n);
    double cp[1000], rt[1000], cma[1000], rg1[1000];
    for (int r = 0; r < reps + 1; r++) { /* the first of each warms up */
        double t0 = now();
        for (int i = 0; i < it; i++) {
            ring_send(&rg[0], src, n);
            ring_recv(&rg[1], dst, n);
        }
        rt[r] = (double)n / ((now() - t0) / it / 2) / 1e9;
        t0 = now();
        for (int i = 0; i < it; i++) {
            memcpy(dst, src, n);
            __asm__ __volatile__("" : : "r"(dst) : "memory"); /* every copy happens */
        }
        cp[r] = (double)n * it / (now() - t0) / 1e9;
    }
    for (int r = 0; r < reps + 1; r++) { /* the kid copies its half in turn */
        double t0 = now();
        for (int i = 0; i < it; i++) {
            memcpy(dst, reg + n, n);
            __asm__ __volatile__("" : : "r"(dst) : "memory");
            atomic_store_explicit(&turn->turn, 2 * ((uint64_t)r * it + i) + 1,
                                  memory_order_release);
            while (atomic_load_explicit(&turn->turn, memory_order_acquire) !=
                   2 * ((uint64_t)r * it + i) + 2)
                relax(0);
        }
        rg1[r] = (double)n / ((now() - t0) / it / 2) / 1e9;
    }
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        for (int i = 0; i < it; i++) {
            for (size_t got = 0; got < n;) {
                struct iovec l = { dst + got, n - got }, rm = { src + got, n - got };
                ssize_t k = process_vm_readv(kid, &l, 1, &rm, 1, 0);
                if (k <= 0) {
                    perror("process_vm_readv");
                    return 1;
                }
                got += (size_t)k;
            }
        }
        cma[r] = (double)n * it / (now() - t0) / 1e9;
    }
    if (write(go[1], "x", 1) < 0)
        perror("write");
    waitpid(kid, NULL, 0);
    double c = median(cp + 1, reps), g = median(rt + 1, reps), v = median(cma + 1, reps);
    double o = median(rg1 + 1, reps);
    printf("%zu B: memcpy %.1f GB/s, two-copy ring %.1f GB/s (%.2f of memcpy), "
           "process_vm_readv %.1f GB/s (%.2f), one copy from a shared mapping %.1f GB/s "
           "(%.2f) (median of %d, cpus %d,%d)\n",
           n, c, g, g / c, v, v / c, o, o / c, reps, cpu[0], cpu[1]);
    return 0;
}

int main(int argc, char **argv)
{
    long n = 200000;
    int reps = 5, cpu[2] = { -1, -1 }, yield = 0, o;
    size_t bytes = 0;
    while ((o = getopt(argc, argv, "n:r:c:yb:")) != -1) {
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
        case 'b': bytes = (size_t)strtoull(optarg, NULL, 0); break;
        default:
            fprintf(stderr, "usage: %s [-n ROUND_TRIPS] [-r REPEATS] [-c A,B] [-y] [-b BYTES]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n < 1 || reps < 1 || reps > 999)
        return 2;
    if (bytes)
        return bandwidth(bytes, reps, cpu);
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
