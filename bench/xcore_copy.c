/* The floor of moving bytes between the two cores of this host, without
 * weft: what a copy costs when its source was last written by the other
 * core (as a message's payload was, by its sender), against a source the
 * copying core wrote itself (weft-bench -M's "copy", p2p_bw's "copy").
 * Two experiments, every figure the median of the repetitions (so a
 * loaded machine's preemptions fall out), the processes pinned to CPUs
 * 0 and 1:
 *
 *   cc -O3 -march=native -o /tmp/xcore_copy bench/xcore_copy.c -pthread
 *   /tmp/xcore_copy p2p 1048576 4194304 16777216    (sizes in bytes)
 *   /tmp/xcore_copy a2a 262752                        (one peer block)
 *
 * p2p: a thread on CPU 1 writes the source with ordinary stores, then the
 * thread on CPU 0 copies it (memcpy, then a copy with non-temporal
 * stores, as weft's registered point-to-point streams from half the
 * last-level cache on) and reads the result (a vectorised sum: what a
 * receiver does next with a message). Then the same with the source
 * written on CPU 0 itself. Prints each copy's GB/s and the read's us: a
 * streamed copy that is faster but leaves the result outside the caches
 * moves the cost to the read.
 *
 * a2a: two processes, each with a send buffer of two blocks (its own,
 * its peer's) and a receive buffer of two, copy their own block and then
 * the peer's out of the peer's send buffer (in shared memory), both at
 * once after a spinning start line (so that both start together; the
 * figure is the slower of the two): the copies of an all-to-all of two
 * ranks with nothing else, as weft's single copy makes them. Four ways:
 * both own block first, staggered (rank 0 own first, rank 1 the peer's
 * first), both the peer's block first, and both copying two blocks of
 * their own (no other core's lines); each with the send buffers written
 * once ("kept", as weft-bench writes them) and rewritten before each
 * repetition ("rewritten", as an expert dispatch fills them each step,
 * weft-bench -F). */
#define _GNU_SOURCE
#include <pthread.h>
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
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define REPS 61

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof s, &s);
}

/* n (a multiple of 64) bytes with non-temporal stores; elsewhere memcpy */
static void copy_streamed(char *d, const char *s, size_t n)
{
#if defined(__x86_64__)
    for (size_t k = 0; k < n; k += 64) {
        const __m128i *in = (const __m128i *)(const void *)(s + k);
        __m128i *out = (__m128i *)(void *)(d + k);
        __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1);
        __m128i c = _mm_loadu_si128(in + 2), e = _mm_loadu_si128(in + 3);
        _mm_stream_si128(out, a);
        _mm_stream_si128(out + 1, b);
        _mm_stream_si128(out + 2, c);
        _mm_stream_si128(out + 3, e);
    }
    _mm_sfence();
#else
    memcpy(d, s, n);
#endif
}

/* ordinary stores of values that change with round */
static void fill(char *s, size_t n, uint64_t round)
{
    uint64_t *w = (uint64_t *)(void *)s;
    for (size_t k = 0; k < n / 8; k++)
        w[k] = (round << 40) + k;
}

static uint64_t sum(const char *s, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)s;
    uint64_t acc = 0;
    for (size_t k = 0; k < n / 8; k++)
        acc += w[k];
    return acc;
}

/* ---- p2p: a writer thread on CPU 1 ---- */

typedef struct {
    pthread_barrier_t go, done;
    char *src;
    size_t n;
    int stop;
    uint64_t round;
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    pin(1);
    for (;;) {
        pthread_barrier_wait(&w->go);
        if (w->stop)
            return NULL;
        fill(w->src, w->n, ++w->round);
        pthread_barrier_wait(&w->done);
    }
}

static int p2p(size_t n)
{
    char *src = aligned_alloc(4096, n), *dst = aligned_alloc(4096, n);
    if (!src || !dst || pin(0))
        return 1;
    memset(src, 1, n);
    memset(dst, 2, n);
    writer w = { .src = src, .n = n };
    pthread_t th;
    pthread_barrier_init(&w.go, NULL, 2);
    pthread_barrier_init(&w.done, NULL, 2);
    if (pthread_create(&th, NULL, write_loop, &w))
        return 1;
    uint64_t sink = 0;
    for (int other = 1; other >= 0; other--) {
        for (int streamed = 0; streamed < 2; streamed++) {
            double tc[REPS], tr[REPS];
            for (int i = -1; i < REPS; i++) {
                if (other) {
                    pthread_barrier_wait(&w.go);
                    pthread_barrier_wait(&w.done);
                } else {
                    fill(src, n, (uint64_t)i + 7);
                }
                double t0 = now();
                if (streamed)
                    copy_streamed(dst, src, n);
                else
                    memcpy(dst, src, n);
                double t1 = now();
                sink += sum(dst, n);
                if (i >= 0) {
                    tc[i] = t1 - t0;
                    tr[i] = now() - t1;
                }
            }
            double c = median_of(tc, REPS), r = median_of(tr, REPS);
            printf("p2p %9zu B, source written on %s, %s: copy %6.2f GB/s (%8.1f us), "
                   "then the read %8.1f us, both %8.1f us\n",
                   n, other ? "the other core" : "this core  ", streamed ? "streamed" : "memcpy  ",
                   (double)n / c / 1e9, c * 1e6, r * 1e6, (c + r) * 1e6);
        }
    }
    if (sink == 1) /* the reads are used: no compiler drops them */
        printf("(sum 1)\n");
    w.stop = 1;
    pthread_barrier_wait(&w.go);
    pthread_join(th, NULL);
    free(src);
    free(dst);
    return 0;
}

/* ---- a2a: two processes ---- */

#define WAYS 4
typedef struct {
    _Atomic long line[2];
    double t[2][2][WAYS][REPS];
} board;

/* both at the start line gen: spin (two processes on two cores, short) */
static void meet(board *b, int me, long gen)
{
    atomic_store(&b->line[me], gen);
    while (atomic_load(&b->line[!me]) < gen) {
#if defined(__x86_64__)
        _mm_pause();
#endif
    }
}

static int a2a(size_t blk)
{
    char *sh = mmap(NULL, 4 * blk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || b == MAP_FAILED)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    int me = pid == 0;
    long gen = 0;
    char *send[2] = { sh, sh + 2 * blk }, *recv = aligned_alloc(64, 2 * blk);
    if (!recv || pin(me))
        _exit(1);
    memset(recv, 0, 2 * blk);
    fill(send[me], 2 * blk, 1);
    /* rank me's block for rank q lies at q * blk of its send buffer */
    const char *own = send[me] + (size_t)me * blk, *peer = send[!me] + (size_t)me * blk;
    char *own_to = recv + (size_t)me * blk, *peer_to = recv + (size_t)!me * blk;
    for (int rewrite = 0; rewrite < 2; rewrite++)
        for (int way = 0; way < WAYS; way++)
            for (int i = -5; i < REPS; i++) {
                meet(b, me, ++gen);
                if (rewrite)
                    fill(send[me], 2 * blk, (uint64_t)i + 11);
                meet(b, me, ++gen);
                double t0 = now();
                int peer_first = way == 1 ? me : way == 2;
                if (way == 3) {
                    memcpy(own_to, own, blk);
                    memcpy(peer_to, send[me] + (size_t)!me * blk, blk);
                } else if (peer_first) {
                    memcpy(peer_to, peer, blk);
                    memcpy(own_to, own, blk);
                } else {
                    memcpy(own_to, own, blk);
                    memcpy(peer_to, peer, blk);
                }
                double t = now() - t0;
                if (i >= 0)
                    b->t[me][rewrite][way][i] = t;
            }
    meet(b, me, ++gen);
    if (me)
        _exit(0);
    waitpid(pid, NULL, 0);
    static const char *name[WAYS] = { "both own block first", "staggered",
                                      "both peer's block first", "both two own blocks" };
    for (int rewrite = 0; rewrite < 2; rewrite++)
        for (int way = 0; way < WAYS; way++) {
            double m[REPS];
            for (int i = 0; i < REPS; i++)
                m[i] = b->t[0][rewrite][way][i] > b->t[1][rewrite][way][i]
                           ? b->t[0][rewrite][way][i]
                           : b->t[1][rewrite][way][i];
            printf("a2a %zu B blocks, send buffers %s, %-24s: %7.2f us (slower rank, median)\n",
                   blk, rewrite ? "rewritten" : "kept     ", name[way],
                   median_of(m, REPS) * 1e6);
        }
    free(recv);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "p2p") && strcmp(argv[1], "a2a"))) {
        fprintf(stderr, "usage: %s p2p BYTES... | a2a BLOCK_BYTES\n", argv[0]);
        return 2;
    }
    int rc = 0;
    for (int k = 2; k < argc && !rc; k++) {
        size_t n = (size_t)strtoull(argv[k], NULL, 0);
        if (argv[1][0] == 'p')
            n &= ~(size_t)63; /* the streamed copy moves whole lines */
        if (n < 64) {
            fprintf(stderr, "%s: %s: a size of at least 64 bytes\n", argv[0], argv[k]);
            return 2;
        }
        rc = argv[1][0] == 'p' ? p2p(n) : a2a(n);
        fflush(stdout);
    }
    return rc;
}
