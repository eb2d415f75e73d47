/* Point-to-point between rank pairs (0-1, 2-3, ...): half the round trip
 * of a ping-pong, and the bandwidth of an exchange where both ranks of a
 * pair send and receive at once (irecv, isend, wait both; as nccl-tests'
 * sendrecv). Uses only calls every weft version has, so one source
 * measures two builds in the same run (bench/vs_commit.sh), or one build
 * both ways between ranks of a host (bench/p2p.sh: WEFT_P2P_SHM=1, 0).
 * copy(GB/s) is what one copy of the same size moves on rank 0 in the
 * same run: the bound of a single-copy path (bw is size / lat, one way).
 * It is the faster of memcpy and, on x86-64, a copy with non-temporal
 * stores: weft streams a registered payload from half the last-level
 * cache on (coll/exec/p2p_reg.h), where the C library here never does
 * (its threshold follows the 320 MiB L3 the EPYC guest reports), so
 * memcpy alone would be a reference that weft's own copy beats.
 * -l: the ping-pong alone (no exchange: its isends wake the engine's thread,
 * whose system calls would blur a count of the blocking path's).
 * -r: the same again, in the same run, sending from and receiving into
 * weft_mem_alloc'd buffers (columns reg_*): a same-host pair copies them
 * once, out of the sender's pages, the receiver and (from WEFT_P2P_SHARE,
 * while it waits) the sender each copying chunks of it (include/weft.h). Built against a weft
 * without weft_mem_alloc (bench/vs_commit.sh), -r says so and stops.
 * -R: the registered buffers alone (their columns; the others read 0).
 * With -r or -R a last column, copy2(GB/s): the same copy taking turns
 * between two pairs of buffers, as a ping-pong's round trip copies two
 * payloads into two destinations. At 16 MiB on the EPYC guest the two
 * payloads no longer both stay in its 32 MiB L3, where copy's one source
 * does, and copy2 is the ping-pong's like-for-like bound; copy stays the
 * target's (docs/BENCHMARKS.md, "Same-host point-to-point at 1 and 16
 * MiB"). At 4 MiB copy2 reads below what the two cores' ping-pong moves.
 * And then xcopy(GB/s): one copy (the faster of the same two kinds) whose
 * source a thread pinned to another CPU has just written, the copying
 * thread pinned to its own, the median of as many copies: a payload
 * comes from the sender's core, where copy's and copy2's sources are the
 * copying core's own writes (0 where rank 0 may run on one CPU only).
 * Usage: weftrun -n 2 p2p_bw [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-l] [-r|-R]   (bytes) */
#include <weft.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* weak: the same source also builds against a weft before it had one */
#pragma weak weft_mem_alloc
#pragma weak weft_mem_free

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* memcpy, or with stream set a copy whose stores bypass the caches
 * (x86-64; elsewhere memcpy). */
static void copy(char *in, const char *out, size_t n, int stream)
{
#if defined(__x86_64__)
    size_t head = (size_t)(-(uintptr_t)in & 63);
    if (stream && n >= head + 64) {
        memcpy(in, out, head);
        size_t k = head;
        for (; k + 16 <= n; k += 16)
            _mm_stream_si128((__m128i *)(void *)(in + k),
                             _mm_loadu_si128((const __m128i *)(const void *)(out + k)));
        _mm_sfence();
        memcpy(in + k, out + k, n - k);
        return;
    }
#endif
    (void)stream;
    memcpy(in, out, n);
}

static double copy_turns(char *in, const char *out, char *in2, const char *out2, size_t n,
                         int it);

/* GB/s of the faster of memcpy(in, out, n) and a streamed copy, each the
 * second of two passes of it copies (the first warms up, as the
 * messages' first pass does). */
static double copy_bw(char *in, const char *out, size_t n, int it)
{
    return copy_turns(in, out, in, out, n, it);
}

/* The same, the copies taking turns between (in, out) and (in2, out2). */
static double copy_turns(char *in, const char *out, char *in2, const char *out2, size_t n,
                         int it)
{
    double best = 0;
    for (int stream = 0; stream < 2; stream++) {
        double t = 0;
        for (int pass = 0; pass < 2; pass++) {
            double t0 = now();
            for (int i = 0; i < it; i++) {
                char *d = i & 1 ? in2 : in;
                copy(d, i & 1 ? out2 : out, n, stream);
                __asm__ __volatile__("" : : "r"(d) : "memory"); /* every copy happens */
            }
            t = now() - t0;
        }
        double bw = (double)n * it / t / 1e9;
        best = bw > best ? bw : best;
    }
    return best;
}

static int cmp(const void *a, const void *b);

/* xcopy's writer: a thread on CPU cpu that fills src before each copy,
 * between the two barriers, until stop. */
typedef struct {
    pthread_barrier_t go, done;
    char *src;
    size_t n;
    int cpu, stop;
    unsigned round;
} writer;

static void *write_src(void *arg)
{
    writer *w = arg;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(w->cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    for (;;) {
        pthread_barrier_wait(&w->go);
        if (w->stop)
            return NULL;
        /* ordinary stores of values that change each round: the lines end
         * modified in this core's caches, as a sender's payload does */
        uint64_t *q = (uint64_t *)(void *)w->src, v = (uint64_t)++w->round << 40;
        for (size_t k = 0; k < w->n / 8; k++)
            q[k] = v + k;
        pthread_barrier_wait(&w->done);
    }
}

/* xcopy(GB/s): n bytes into in out of src, src written just before each
 * copy by a thread on another CPU of this process's, the calling thread
 * held on the CPU it is on meanwhile; of memcpy and the streamed copy
 * the faster, each the median of it copies after one more. 0: one CPU. */
static double xcopy_bw(char *in, char *src, size_t n, int it)
{
    cpu_set_t mask, one;
    int me = sched_getcpu(), other = -1;
    if (me < 0 || sched_getaffinity(0, sizeof mask, &mask))
        return 0;
    for (int k = 0; k < CPU_SETSIZE && other < 0; k++)
        if (k != me && CPU_ISSET(k, &mask))
            other = k;
    CPU_ZERO(&one);
    CPU_SET(me, &one);
    if (other < 0 || sched_setaffinity(0, sizeof one, &one))
        return 0;
    writer w = { .src = src, .n = n, .cpu = other };
    pthread_t th;
    double *t = malloc((size_t)it * sizeof *t), best = 0;
    pthread_barrier_init(&w.go, NULL, 2);
    pthread_barrier_init(&w.done, NULL, 2);
    if (t && !pthread_create(&th, NULL, write_src, &w)) {
        for (int stream = 0; stream < 2; stream++) {
            for (int i = -1; i < it; i++) {
                pthread_barrier_wait(&w.go);
                pthread_barrier_wait(&w.done);
                double t0 = now();
                copy(in, src, n, stream);
                __asm__ __volatile__("" : : "r"(in) : "memory");
                if (i >= 0)
                    t[i] = now() - t0;
            }
            qsort(t, (size_t)it, sizeof *t, cmp);
            double bw = (double)n / t[it / 2] / 1e9;
            best = bw > best ? bw : best;
        }
        w.stop = 1;
        pthread_barrier_wait(&w.go);
        pthread_join(th, NULL);
    }
    pthread_barrier_destroy(&w.go);
    pthread_barrier_destroy(&w.done);
    free(t);
    sched_setaffinity(0, sizeof mask, &mask);
    return best;
}

/* Timed passes after the warm-up one; each figure is their median, so
 * that one preemption (a ms or more while other jobs share the cores)
 * moves no figure: with a single pass of 200 8-byte messages, 0.4 ms,
 * one such stall read as microseconds on every message. */
#define PASSES 5

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, PASSES, sizeof *v, cmp);
    return v[PASSES / 2];
}

/* Half a ping-pong's round trip (*lat, s) and an exchange's bandwidth
 * both ways (*bw, GB/s; none with lat_only) of n bytes sent from out,
 * each the median of PASSES passes of it messages after one more. */
static int measure(weft_comm *c, const char *out, char *in, size_t n, int it, int lat_only,
                   double *lat, double *bw)
{
    int r = weft_comm_rank(c), peer = r ^ 1, rc = 0;
    double v[PASSES + 1];
    weft_barrier(c);
    for (int pass = 0; pass <= PASSES && !rc; pass++) { /* the first warms up */
        double t0 = now();
        for (int i = 0; i < it && !rc; i++) {
            if (r < peer) {
                rc = weft_send(c, out, n, WEFT_U8, peer);
                rc = rc ? rc : weft_recv(c, in, n, WEFT_U8, peer);
            } else {
                rc = weft_recv(c, in, n, WEFT_U8, peer);
                rc = rc ? rc : weft_send(c, out, n, WEFT_U8, peer);
            }
        }
        v[pass] = (now() - t0) / it / 2;
    }
    *lat = median(v + 1);
    weft_barrier(c);
    for (int pass = 0; pass <= PASSES && !rc && !lat_only; pass++) {
        double t0 = now();
        for (int i = 0; i < it && !rc; i++) {
            /* posted in an order that also completes where messages run
             * one after another (weft before its progress engine) */
            weft_request *q[2];
            if (r < peer) {
                rc = weft_isend(c, out, n, WEFT_U8, peer, &q[0]);
                rc = rc ? rc : weft_irecv(c, in, n, WEFT_U8, peer, &q[1]);
            } else {
                rc = weft_irecv(c, in, n, WEFT_U8, peer, &q[0]);
                rc = rc ? rc : weft_isend(c, out, n, WEFT_U8, peer, &q[1]);
            }
            rc = rc ? rc : weft_wait_all(q, 2);
        }
        v[pass] = 2.0 * (double)n * it / (now() - t0) / 1e9;
    }
    if (!lat_only)
        *bw = median(v + 1);
    return rc;
}

int main(int argc, char **argv)
{
    size_t lo = 8, hi = 64u << 20;
    int factor = 4, iters = 0, lat_only = 0, reg = 0, opt;
    while ((opt = getopt(argc, argv, "b:e:f:n:lrR")) != -1) {
        switch (opt) {
        case 'b': lo = (size_t)strtoull(optarg, NULL, 0); break;
        case 'e': hi = (size_t)strtoull(optarg, NULL, 0); break;
        case 'f': factor = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'l': lat_only = 1; break;
        case 'r': reg = 1; break;
        case 'R': reg = 2; break;
        default:
            fprintf(stderr, "usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-l] [-r|-R]\n",
                    argv[0]);
            return 2;
        }
    }
    weft_comm *c;
    int rc = weft_comm_init_env(&c);
    if (rc) {
        fprintf(stderr, "init: %s\n", weft_strerror(rc));
        return 1;
    }
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    if (p < 2 || (p & 1)) {
        fprintf(stderr, "needs an even number of ranks\n");
        weft_comm_destroy(c);
        return 2;
    }
    if (reg && !weft_mem_alloc) {
        fprintf(stderr, "-r: this weft has no weft_mem_alloc\n");
        weft_comm_destroy(c);
        return 2;
    }
    char *out = malloc(hi), *in = malloc(hi), *rout = NULL, *rin = NULL, *out2 = NULL,
         *in2 = NULL;
    if (reg && ((rc = weft_mem_alloc(c, hi, (void **)&rout)) ||
                (rc = weft_mem_alloc(c, hi, (void **)&rin)))) {
        fprintf(stderr, "weft_mem_alloc: %s\n", weft_comm_error(c));
        weft_comm_destroy(c);
        return 1;
    }
    if (reg && r == 0 && (!(out2 = malloc(hi)) || !(in2 = malloc(hi)))) {
        fprintf(stderr, "out of memory for the second pair of copy buffers\n");
        weft_comm_destroy(c);
        return 1;
    }
    memset(out, 1, hi);
    memset(in, 0, hi);
    if (out2) {
        memset(out2, 1, hi);
        memset(in2, 0, hi);
    }
    if (rout) {
        memset(rout, 1, hi);
        memset(rin, 0, hi);
    }
    if (r == 0)
        printf("%12s %10s %12s %12s %12s %13s%s\n", "size(B)", "iters", "lat(us)", "bw(GB/s)",
               "bibw(GB/s)", "copy(GB/s)",
               reg ? "  reg_lat(us) reg_bw(GB/s) reg_bibw(GB/s) copy2(GB/s) xcopy(GB/s)" : "");
    for (size_t n = lo; n <= hi; n *= (size_t)factor) {
        /* 256 MiB a pass (2000 messages at most, 8 at least): a pass of
         * 40 1 MiB messages lasted 1 ms, short enough for one stall to
         * move it by a tenth */
        size_t want = ((size_t)256 << 20) / n;
        int it = iters > 0 ? iters : want > 2000 ? 2000 : want < 8 ? 8 : (int)want;
        double lat = 0, bw = 0, rlat = 0, rbw = 0;
        if (reg < 2)
            rc = measure(c, out, in, n, it, lat_only, &lat, &bw);
        if (!rc && reg)
            rc = measure(c, rout, rin, n, it, lat_only, &rlat, &rbw);
        if (rc) {
            fprintf(stderr, "rank %d: %s: %s\n", r, weft_strerror(rc), weft_comm_error(c));
            break;
        }
        weft_barrier(c);
        double cp = r == 0 ? copy_bw(in, out, n, it) : 0;
        if (r == 0 && reg) {
            double cp2 = copy_turns(in, out, in2, out2, n, it);
            printf("%12zu %10d %12.2f %12.3f %12.3f %13.3f %12.2f %12.3f %14.3f %11.3f %11.3f\n",
                   n, it, lat * 1e6, (double)n / lat / 1e9, bw, cp, rlat * 1e6,
                   (double)n / rlat / 1e9, rbw, cp2, xcopy_bw(in, out2, n, it));
        }
        else if (r == 0)
            printf("%12zu %10d %12.2f %12.3f %12.3f %13.3f\n", n, it, lat * 1e6,
                   (double)n / lat / 1e9, bw, cp);
    }
    free(out);
    free(in);
    free(out2);
    free(in2);
    if (rout) {
        weft_mem_free(c, rout);
        weft_mem_free(c, rin);
    }
    int drc = weft_comm_destroy(c);
    return rc || drc;
}
