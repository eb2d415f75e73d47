/* What a message through a shared-memory ring costs when the reader runs on
 * another core than the writer, against the same copies on one core: the
 * source of the host preset's cross-core constants (docs/SIMULATION.md,
 * "This host").
 *
 * A 2 MiB ring (WEFT_SHM_RING's default) is written n bytes at a time at an
 * advancing offset, as the transport's ring is. "one core": one thread
 * writes a message and copies it out again. "two cores": a thread pinned to
 * core 0 writes a message and raises a flag; a thread on core 1 copies it
 * out and writes its own message back, which core 0 copies out (ping-pong),
 * so one way is half a round trip. The per-message time of both at 8 B and
 * the slope between two sizes give the fixed cost of a handoff and the rate
 * at which bytes another core wrote are copied. Last, the cost of handing
 * a token from one process to another that waits for it as the executor
 * waits (sched_yield between looks), on one core and on two.
 *
 * build: cc -O2 -pthread -o /tmp/sim_xcore bench/sim_xcore.c
 * usage: /tmp/sim_xcore [REPS]   (prints one line per size) */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING (2u << 20)

struct pair {
    char *ring[2]; /* one per direction, as the transport has one per ordered pair */
    char *dst[2];
    size_t n;
    long msgs;
    _Atomic long turn; /* even: core 0's message is in; odd: core 1's */
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *side(void *v)
{
    struct pair *p = v;
    int me = 1;
    size_t off = 0;
    pin(1);
    for (long i = 0; i < p->msgs; i++) {
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != 2 * i + 1)
            ;
        memcpy(p->dst[me], p->ring[0] + off, p->n);
        memcpy(p->ring[1] + off, p->dst[me], p->n);
        atomic_store_explicit(&p->turn, 2 * i + 2, memory_order_release);
        off = (off + p->n + 63) / 64 * 64;
        if (off + p->n > RING)
            off = 0;
    }
    return NULL;
}

/* Seconds per one-way message over two cores. */
static double two_cores(struct pair *p)
{
    pthread_t t;
    size_t off = 0;
    atomic_store(&p->turn, 0);
    pin(0);
    pthread_create(&t, NULL, side, p);
    double t0 = now();
    for (long i = 0; i < p->msgs; i++) {
        memcpy(p->ring[0] + off, p->dst[0], p->n);
        atomic_store_explicit(&p->turn, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != 2 * i + 2)
            ;
        memcpy(p->dst[0], p->ring[1] + off, p->n);
        off = (off + p->n + 63) / 64 * 64;
        if (off + p->n > RING)
            off = 0;
    }
    double dt = now() - t0;
    pthread_join(t, NULL);
    return dt / (2.0 * (double)p->msgs);
}

/* Seconds per message written and copied out on one core. */
static double one_core(struct pair *p)
{
    size_t off = 0;
    pin(0);
    double t0 = now();
    for (long i = 0; i < p->msgs; i++) {
        memcpy(p->ring[0] + off, p->dst[0], p->n);
        memcpy(p->dst[1], p->ring[0] + off, p->n);
        off = (off + p->n + 63) / 64 * 64;
        if (off + p->n > RING)
            off = 0;
    }
    return (now() - t0) / (double)p->msgs;
}

/* Seconds per handoff of a token between two processes that wait as the
 * executor does (look at the flag, sched_yield, look again): pinned to
 * cores a and b. On one core every handoff is a switch from the process
 * that just passed the token to the one waiting for it. */
static double handoff(int a, int b, long n)
{
    _Atomic long *tok = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    if (tok == MAP_FAILED)
        return -1;
    atomic_store(tok, 0);
    pid_t pid = fork();
    if (pid == 0) {
        pin(b);
        for (long i = 1; i < 2 * n; i += 2) {
            while (atomic_load_explicit(tok, memory_order_acquire) != i)
                sched_yield();
            atomic_store_explicit(tok, i + 1, memory_order_release);
        }
        _exit(0);
    }
    pin(a);
    double t0 = now();
    for (long i = 0; i < 2 * n; i += 2) {
        atomic_store_explicit(tok, i + 1, memory_order_release);
        while (atomic_load_explicit(tok, memory_order_acquire) != i + 2)
            sched_yield();
    }
    double dt = now() - t0;
    waitpid(pid, NULL, 0);
    munmap((void *)tok, 4096);
    return dt / (2.0 * (double)n);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    static const size_t sizes[] = { 8, 512, 1024, 4096, 16384, 32768, 65536 };
    struct pair p = { 0 };
    for (int k = 0; k < 2; k++) {
        p.ring[k] = aligned_alloc(4096, RING);
        p.dst[k] = aligned_alloc(4096, RING);
        if (!p.ring[k] || !p.dst[k])
            return 1;
        memset(p.ring[k], 1, RING);
        memset(p.dst[k], 2, RING);
    }
    printf("# bytes one_core_us two_cores_us (best of %d; one way, write + copy out)\n", reps);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        double best1 = 1e9, best2 = 1e9;
        p.n = sizes[i];
        p.msgs = (long)(64e6 / (double)(p.n + 4096));
        for (int r = 0; r < reps; r++) {
            double a = one_core(&p), b = two_cores(&p);
            best1 = a < best1 ? a : best1;
            best2 = b < best2 ? b : best2;
        }
        printf("%zu %.3f %.3f\n", p.n, best1 * 1e6, best2 * 1e6);
    }
    double same = 1e9, two = 1e9;
    for (int r = 0; r < reps; r++) {
        double a = handoff(0, 0, 100000), b = handoff(0, 1, 100000);
        same = a < same ? a : same;
        two = b < two ? b : two;
    }
    printf("# handoff between processes waiting with sched_yield: one core %.3f us, two cores "
           "%.3f us\n", same * 1e6, two * 1e6);
    return 0;
}
