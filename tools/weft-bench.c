/* weft-bench: collective benchmarks that print what nccl-tests prints.
 *
 *   weftrun -n 4 build/weft-bench allreduce -b 8 -e 128M -f 2 -d f32 -o sum -a ring
 *
 * Sizes are bytes of the whole buffer as in nccl-tests (for gather, scatter,
 * allgather, reduce_scatter and alltoall: the buffer of all ranks' blocks).
 * Inputs are small integers, so results are exact in any reduction order
 * and #wrong counts every element that differs from the reference. With
 * the algorithm auto, a last column names the algorithm the cost model
 * picks at each size (the library's own choice, from the same inputs).
 *
 * Across clusters (WEFT_CLUSTER; docs/WAN.md): -z CODEC runs the
 * compressed ring all-reduce (weft_allreduce_codec), -H the all-reduce over
 * clusters (weft_cluster_allreduce, in CODEC with -z), and a last column
 * gives the bytes each rank sent over wan links per call (while WEFT_WAN
 * emulates them). A lossy codec's results are not checked (#wrong N/A).
 *
 * For alltoall: -V runs it as weft_alltoallv with equal counts (the path
 * an expert dispatch takes), -S starts every timed call after a barrier of
 * its own and times the call alone (so no rank's time holds its wait for
 * the others: that wait is printed apart), and -M adds the time of one
 * memcpy of the bytes a rank receives (the whole receive buffer; the
 * fastest of the iterations) and the call's time over it, measured in the
 * same run. -M also prints a second reference, "xcopy": one memcpy of as
 * many bytes whose source another rank has just written (a POSIX shared
 * memory object the ranks of one host map): the lines come from that
 * rank's core, as a peer's block does in the call, where "copy"'s come
 * from the copying core's own caches. "copy" stays as it was. -R takes
 * the send buffer from weft_mem_alloc, which peers on
 * this host map and copy out of once; -F (with -S) has each rank write
 * its whole send buffer before every timed call's barrier, untimed, as an
 * expert dispatch fills its buffer every step (without it the blocks are
 * written once, and after the first call a peer reads clean lines, which
 * is kinder than the dispatch). With -S each rank also notes the
 * CPU it starts every call on (sched_getcpu), and the line says how many
 * calls found two ranks on one CPU and their mean time apart from the
 * others': two ranks that share a core take turns at their copies, so
 * such calls take about twice the copying, and a run the kernel keeps so
 * is slower whatever the collective does. -S also prints the median call
 * (of the slowest rank's time at each call): the mean ("time") moves with
 * the few calls a loaded host delays by a slice or more. */
#include "cli_args.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    weft_coll_kind kind;
    weft_dtype t;
    weft_op op;
    weft_algo algo;
    int root, warmup, iters, check, places;
    uint64_t minb, maxb, step;
    uint64_t *list; /* -l: explicit sizes, nlist of them */
    int nlist;
    double factor;
    const char *json;
    int codec;                  /* -z: weft_codec, -1: none */
    int hier;                   /* -H */
    int vform, sync, copy, reg; /* -V, -S, -M, -R (alltoall) */
    int fresh;                  /* -F (alltoall with -S) */
    size_t *v;                  /* -V: every block's count, then its displacement */
    int nranks;
    weft_cluster_comm *clusters; /* made for -H */
} opts;

static const char *nccl_type(weft_dtype t)
{
    static const char *n[] = { "float", "double", "half", "bfloat16",
                               "int8",  "uint8",  "int32", "int64" };
    return t < WEFT_DTYPE_COUNT ? n[t] : "?";
}

static int per_rank_blocks(weft_coll_kind k)
{
    return k == WEFT_COLL_GATHER || k == WEFT_COLL_SCATTER || k == WEFT_COLL_ALLGATHER ||
           k == WEFT_COLL_REDUCE_SCATTER || k == WEFT_COLL_ALLTOALL;
}

static int rooted(weft_coll_kind k)
{
    return k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE || k == WEFT_COLL_GATHER ||
           k == WEFT_COLL_SCATTER;
}

static double bus_factor(weft_coll_kind k, int n)
{
    if (k == WEFT_COLL_ALLREDUCE)
        return 2.0 * (n - 1) / n;
    if (k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE)
        return 1.0;
    return (double)(n - 1) / n;
}

static double value(int r, uint64_t i, weft_op op)
{
    if (op == WEFT_PROD)
        return ((uint64_t)r + i) % 7 == 0 ? 2 : 1;
    if (op == WEFT_MIN || op == WEFT_MAX)
        return (double)(((uint64_t)r * 5 + i * 3) % 11);
    return (double)(((uint64_t)r * 3 + i * 7) % 5);
}

/* IEEE half and bfloat16, rounded to nearest even as the library stores
 * them, so that an expected result compares bit for bit. */
static uint16_t to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN stays NaN, quiet, with the payload's top */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax < (113u << 23)) /* below 2^-14: subnormal, in units of 2^-24 */
        return (uint16_t)(sign | (uint16_t)nearbyintf(fabsf(f) * 16777216.0f));
    /* rebias the exponent (127 -> 15), then round the 13 dropped bits: a
     * carry out of the mantissa moves to the exponent, up to infinity */
    uint32_t h = (ax - (112u << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | (h >= 0x7c00u ? 0x7c00u : h));
}

static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static void put(void *b, weft_dtype t, uint64_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)b)[i] = (float)v; break;
    case WEFT_F64: ((double *)b)[i] = v; break;
    case WEFT_F16: ((uint16_t *)b)[i] = to_f16((float)v); break;
    case WEFT_BF16: ((uint16_t *)b)[i] = to_bf16((float)v); break;
    case WEFT_I8: ((int8_t *)b)[i] = (int8_t)(uint8_t)((int64_t)v & 0xff); break;
    case WEFT_U8: ((uint8_t *)b)[i] = (uint8_t)((int64_t)v & 0xff); break;
    case WEFT_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    case WEFT_I64: ((int64_t *)b)[i] = (int64_t)v; break;
    default: break;
    }
}

/* Reduced element i over n ranks, stored like the library stores it. */
static void put_reduced(void *b, weft_dtype t, uint64_t j, weft_op op, int n, uint64_t i)
{
    double acc = value(0, i, op);
    for (int r = 1; r < n; r++) {
        double x = value(r, i, op);
        acc = op == WEFT_PROD ? acc * x
            : op == WEFT_MIN  ? (x < acc ? x : acc)
            : op == WEFT_MAX  ? (x > acc ? x : acc)
                              : acc + x;
    }
    if (op == WEFT_AVG) {
        if (t == WEFT_F32 || t == WEFT_F16 || t == WEFT_BF16)
            acc = (double)((float)acc / (float)n);
        else if (t == WEFT_F64)
            acc = acc / n;
        else
            acc = (double)((int64_t)acc / n);
    }
    put(b, t, j, acc);
}

typedef struct {
    char *in, *out, *want;
    uint64_t count;   /* per call, as the API takes it */
    uint64_t nwant;   /* elements of the result to check on this rank */
    const void *send;
    void *recv;
} bufs;

/* Fill inputs and the expected result for one call. */
static void prepare(const opts *o, int r, int n, bufs *b, int inplace)
{
    size_t es = weft_dtype_size(o->t);
    uint64_t c = b->count, all = per_rank_blocks(o->kind) ? c * (uint64_t)n : c;
    memset(b->out, 0xa5, all * es);
    b->send = b->in;
    b->recv = b->out;
    b->nwant = 0;
    switch (o->kind) {
    case WEFT_COLL_ALLREDUCE: case WEFT_COLL_REDUCE:
        for (uint64_t i = 0; i < c; i++)
            put(b->in, o->t, i, value(r, i, o->op));
        if (o->kind == WEFT_COLL_ALLREDUCE || r == o->root) {
            for (uint64_t i = 0; i < c; i++)
                put_reduced(b->want, o->t, i, o->op, n, i);
            b->nwant = c;
        }
        if (inplace) {
            memcpy(b->out, b->in, c * es);
            b->send = b->out;
        }
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        for (uint64_t i = 0; i < all; i++)
            put(b->in, o->t, i, value(r, i, o->op));
        for (uint64_t i = 0; i < c; i++)
            put_reduced(b->want, o->t, i, o->op, n, (uint64_t)r * c + i);
        b->nwant = c;
        if (inplace) {
            memcpy(b->out, b->in, all * es);
            b->send = b->out;
            b->recv = b->out + (uint64_t)r * c * es;
        }
        break;
    case WEFT_COLL_BROADCAST:
        for (uint64_t i = 0; i < c; i++)
            put(b->want, o->t, i, value(o->root, i, WEFT_SUM));
        if (r == o->root)
            memcpy(b->out, b->want, c * es);
        b->send = b->recv = b->out;
        b->nwant = c;
        break;
    case WEFT_COLL_GATHER: case WEFT_COLL_ALLGATHER:
        for (uint64_t i = 0; i < c; i++)
            put(b->in, o->t, i, value(r, i, WEFT_SUM));
        if (o->kind == WEFT_COLL_ALLGATHER || r == o->root) {
            for (int j = 0; j < n; j++)
                for (uint64_t i = 0; i < c; i++)
                    put(b->want, o->t, (uint64_t)j * c + i, value(j, i, WEFT_SUM));
            b->nwant = all;
            if (inplace) {
                memcpy(b->out + (uint64_t)r * c * es, b->in, c * es);
                b->send = b->out + (uint64_t)r * c * es;
            }
        }
        break;
    case WEFT_COLL_SCATTER:
        if (r == o->root)
            for (uint64_t i = 0; i < all; i++)
                put(b->in, o->t, i, value(r, i, WEFT_SUM));
        for (uint64_t i = 0; i < c; i++)
            put(b->want, o->t, i, value(o->root, (uint64_t)r * c + i, WEFT_SUM));
        b->nwant = c;
        if (inplace && r == o->root) {
            memcpy(b->out, b->in, all * es);
            b->send = b->out;
            b->recv = b->out + (uint64_t)r * c * es;
        }
        break;
    case WEFT_COLL_ALLTOALL:
        for (uint64_t i = 0; i < all; i++)
            put(b->in, o->t, i, value(r, i, WEFT_SUM));
        for (int j = 0; j < n; j++)
            for (uint64_t i = 0; i < c; i++)
                put(b->want, o->t, (uint64_t)j * c + i, value(j, (uint64_t)r * c + i, WEFT_SUM));
        b->nwant = all;
        if (inplace) {
            memcpy(b->out, b->in, all * es);
            b->send = b->out;
        }
        break;
    default:
        break;
    }
}

/* What auto runs this size with now: the selector made at the
 * communicator's first auto call. */
static weft_algo chosen(const weft_comm *c, const opts *o, uint64_t bytes, uint32_t esize)
{
    weft_algo a = WEFT_ALGO_AUTO;
    weft_comm_auto_algo(c, o->kind, bytes, esize, &a);
    return a;
}

static int call(weft_comm *c, const opts *o, const bufs *b)
{
    weft_codec k = o->codec < 0 ? WEFT_CODEC_FP32 : (weft_codec)o->codec;
    if (o->hier)
        return weft_cluster_allreduce(o->clusters, b->send, b->recv, b->count, o->op, k, NULL);
    if (o->codec >= 0)
        return weft_allreduce_codec(c, b->send, b->recv, b->count, o->op, k, NULL);
    if (o->vform)
        return weft_alltoallv(c, b->send, o->v, o->v + o->nranks, b->recv, o->v, o->v + o->nranks,
                              o->t);
    weft_coll_args a = { .kind = o->kind, .send = b->send, .recv = b->recv, .count = b->count,
                         .dtype = o->t, .op = o->op, .root = o->root, .algo = o->algo };
    return weft_collective(c, &a);
}

/* bytes of s written with ordinary stores, as a sender fills its buffer
 * (-F's send buffer, xcopy's source), with values that change with v, so
 * that no compiler turns it into a memset that may bypass the caches. */
static void fill_words(char *s, size_t bytes, uint64_t v)
{
    uint64_t *w = (uint64_t *)(void *)s;
    size_t k = bytes / sizeof *w;
    for (size_t j = 0; j < k; j++)
        w[j] = v + j;
    memset(s + k * sizeof *w, (int)(v & 0x7f), bytes - k * sizeof *w);
}

/* o->iters calls; *dt: a call's mean seconds. With -S each call starts
 * after a barrier and is timed alone; *waited: the mean seconds this rank
 * waited in those barriers for the others, *least: its fastest call (on a
 * loaded machine the call least delayed by others' work; 0 without -S).
 * With -S, cpu[i] and took[i] (o->iters each) get the CPU this rank
 * started call i on and the call's seconds. */
static int timed_calls(weft_comm *c, const opts *o, const bufs *b, double *dt, double *waited,
                       double *least, int32_t *cpu, double *took)
{
    double t0 = cli_now(), incall = 0, wait = 0;
    *least = 0;
    int rc;
    for (int i = 0; i < o->iters; i++) {
        if (o->sync) {
            if (o->fresh)
                fill_words((char *)(uintptr_t)b->send,
                           (size_t)b->count * weft_dtype_size(o->t) * (size_t)o->nranks,
                           (uint64_t)i << 32);
            double w0 = cli_now();
            if ((rc = weft_barrier(c)))
                return rc;
            cpu[i] = sched_getcpu();
            double w1 = cli_now();
            wait += w1 - w0;
            if ((rc = call(c, o, b)))
                return rc;
            double one = cli_now() - w1;
            took[i] = one;
            incall += one;
            *least = i == 0 || one < *least ? one : *least;
        } else if ((rc = call(c, o, b))) {
            return rc;
        }
    }
    *dt = (o->sync ? incall : cli_now() - t0) / o->iters;
    *waited = wait / o->iters;
    return 0;
}

/* -S: where the ranks ran. Of the timed calls, the share that some two
 * ranks started on the same CPU (*shared), and the slowest rank's mean
 * seconds a call over those calls (*t_shared) and over the others
 * (*t_apart; 0 where there were none). Two ranks on one core take turns
 * at the copies their call makes, so a run that keeps them together is
 * slower by about the copies' time, whatever the code does. */
static int placement(weft_comm *c, const opts *o, const int32_t *cpu, const double *took,
                     double *shared, double *t_shared, double *t_apart)
{
    int n = weft_comm_size(c), rc;
    size_t it = (size_t)o->iters;
    int32_t *all = malloc(it * (size_t)n * sizeof *all);
    double *slow = malloc(it * sizeof *slow);
    if (!all || !slow) {
        free(all);
        free(slow);
        return WEFT_ENOMEM;
    }
    if (!(rc = weft_allgather(c, cpu, all, it, WEFT_I32)) &&
        !(rc = weft_allreduce(c, took, slow, it, WEFT_F64, WEFT_MAX))) {
        double ts = 0, ta = 0;
        size_t ns = 0;
        for (size_t i = 0; i < it; i++) {
            int same = 0;
            for (int p = 0; p < n && !same; p++)
                for (int q = p + 1; q < n && !same; q++)
                    same = all[(size_t)p * it + i] >= 0 &&
                           all[(size_t)p * it + i] == all[(size_t)q * it + i];
            ns += (size_t)same;
            if (same)
                ts += slow[i];
            else
                ta += slow[i];
        }
        *shared = (double)ns / (double)it;
        *t_shared = ns ? ts / (double)ns : 0;
        *t_apart = ns < it ? ta / (double)(it - ns) : 0;
    }
    free(all);
    free(slow);
    return rc;
}

/* -M: the seconds of one memcpy of bytes, the fastest of o->iters (on a
 * loaded machine the copy least delayed by others' work), rank 0 copying
 * alone (*alone: the others in a barrier) and every rank copying at once
 * (*all: the slowest rank's, as the collective's ranks copy at once). */
static int copy_times(weft_comm *c, const opts *o, char *dst, const char *src, size_t bytes,
                      double *alone, double *all)
{
    int rc, r = weft_comm_rank(c);
    double t = 0, t0;
    memcpy(dst, src, bytes); /* the pages touched */
    if ((rc = weft_barrier(c)))
        return rc;
    for (int i = 0; r == 0 && i < o->iters; i++) {
        t0 = cli_now();
        memcpy(dst, src, bytes);
        double one = cli_now() - t0;
        t = i == 0 || one < t ? one : t;
    }
    if ((rc = weft_broadcast(c, &t, 1, WEFT_F64, 0)) || (rc = weft_barrier(c)))
        return rc;
    *alone = t;
    for (int i = 0; i < o->iters; i++) {
        t0 = cli_now();
        memcpy(dst, src, bytes);
        double one = cli_now() - t0;
        t = i == 0 || one < t ? one : t;
    }
    return weft_allreduce(c, &t, all, 1, WEFT_F64, WEFT_MAX);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* -S: the median over the timed calls of the slowest rank's seconds at
 * each call (took: this rank's, o->iters of them). */
static int call_median(weft_comm *c, const opts *o, const double *took, double *med)
{
    size_t it = (size_t)o->iters;
    double *slow = malloc(it * sizeof *slow);
    if (!slow)
        return WEFT_ENOMEM;
    int rc = weft_allreduce(c, took, slow, it, WEFT_F64, WEFT_MAX);
    if (!rc) {
        qsort(slow, it, sizeof *slow, cmp_double);
        *med = it % 2 ? slow[it / 2] : (slow[it / 2 - 1] + slow[it / 2]) / 2;
    }
    free(slow);
    return rc;
}

/* -M's second reference needs memory that every rank can write and every
 * other rank read: a POSIX shared memory object of size stretches of
 * bytes (rank q writes the q-th), made by rank 0 under a name it
 * broadcasts, mapped by all, its name removed once all have it. *out is
 * NULL on every rank when some rank could not map it (another host). */
static int xcopy_map(weft_comm *c, size_t bytes, char **out)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), rc, fd = -1, ok, all_ok = 0;
    char name[64] = "";
    size_t len = bytes * (size_t)n;
    char *m = NULL;
    *out = NULL;
    if (r == 0) {
        snprintf(name, sizeof name, "/weft-bench-xcopy-%ld", (long)getpid());
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)len)) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
        if (fd < 0)
            name[0] = 0;
    }
    if ((rc = weft_broadcast(c, name, sizeof name, WEFT_U8, 0))) {
        if (fd >= 0) {
            close(fd);
            shm_unlink(name);
        }
        return rc;
    }
    if (r != 0 && name[0])
        fd = shm_open(name, O_RDWR, 0);
    if (fd >= 0) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        m = p == MAP_FAILED ? NULL : p;
    }
    ok = m != NULL;
    rc = weft_allreduce(c, &ok, &all_ok, 1, WEFT_I32, WEFT_MIN);
    if (r == 0 && name[0])
        shm_unlink(name); /* every rank has mapped it, or given up */
    if (rc || !all_ok) {
        if (m)
            munmap(m, len);
        return rc;
    }
    *out = m;
    return 0;
}

/* -M's second reference: the seconds of one memcpy of bytes whose source
 * another rank wrote just before (rank r copies rank r + 1's stretch of
 * shared, into its own dst), the fastest of o->iters after one more
 * (whose copy also maps the pages): rank 0 alone (*alone: rank 1 writes,
 * the others wait in a barrier) and every rank at once (*all: the
 * slowest rank's). */
static int xcopy_times(weft_comm *c, const opts *o, char *dst, char *shared, size_t bytes,
                       double *alone, double *all)
{
    int rc, r = weft_comm_rank(c), n = weft_comm_size(c);
    const char *src = shared + (size_t)((r + 1) % n) * bytes;
    for (int every = 0; every < 2; every++) {
        double t = 0;
        for (int i = 0; i <= o->iters; i++) {
            if ((rc = weft_barrier(c)))
                return rc;
            if (every || r == 1)
                fill_words(shared + (size_t)r * bytes, bytes, (uint64_t)i << 32 | (unsigned)r);
            if ((rc = weft_barrier(c)))
                return rc;
            if (!every && r != 0)
                continue;
            double t0 = cli_now();
            memcpy(dst, src, bytes);
            double one = cli_now() - t0;
            __asm__ __volatile__("" : : "r"(dst) : "memory"); /* the copy is not dropped */
            if (i > 0)
                t = i == 1 || one < t ? one : t;
        }
        rc = every ? weft_allreduce(c, &t, all, 1, WEFT_F64, WEFT_MAX)
                   : weft_broadcast(c, &t, 1, WEFT_F64, 0);
        if (rc)
            return rc;
        if (!every)
            *alone = t;
    }
    return 0;
}

/* Sizes beyond this are no benchmark of this machine: 1 TiB. */
#define MAX_BYTES ((uint64_t)1 << 40)

/* "8,1K,64M" -> sizes; 0 when the list is malformed or empty. */
static int parse_list(const char *s, opts *o)
{
    int n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    free(o->list);
    if (!(o->list = calloc((size_t)n, sizeof *o->list)))
        return 0;
    o->nlist = 0;
    char *copy = strdup(s), *save = NULL;
    int failed = !copy;
    for (char *w = copy ? strtok_r(copy, ",", &save) : NULL; w && !failed;
         w = strtok_r(NULL, ",", &save))
        failed = cli_size("weft-bench", "-l", w, MAX_BYTES, &o->list[o->nlist++]) != 0;
    free(copy);
    if (failed)
        o->nlist = 0;
    else if (!o->nlist)
        fprintf(stderr, "weft-bench: -l '%s': expected sizes, e.g. 8,1K,64M\n", s);
    return o->nlist;
}

/* The size after size: a size of 0 runs once and then one element per
 * block (a product of 0 stays 0: that looped forever). */
static uint64_t next_size(const opts *o, uint64_t size, uint64_t one)
{
    if (o->step)
        return size + o->step;
    if (size == 0)
        return one;
    uint64_t next = (uint64_t)((double)size * o->factor);
    return next > size ? next : size + 1;
}

/* SIGUSR1 (weftrun forwards it): write the flight recorder to stderr. The
 * dump takes no lock and allocates nothing, so a handler may call it. */
static weft_comm *dump_comm;

static void on_sigusr1(int sig)
{
    (void)sig;
    if (dump_comm)
        weft_comm_dump(dump_comm, 2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: weft-bench COLLECTIVE [options]   (run under weftrun, mpirun, srun or torchrun)\n"
            "  COLLECTIVE: allreduce reduce broadcast allgather reduce_scatter gather scatter alltoall\n"
            "  -b BYTES  smallest size (default 8)      -e BYTES  largest size (default 32M)\n"
            "  -f X      multiply size by X (default 2)  -i BYTES  add BYTES instead\n"
            "  -d TYPE   f32 f64 f16 bf16 i8 u8 i32 i64  -o OP     sum prod min max avg\n"
            "  -r ROOT   root rank (default 0)          -a ALGO   auto naive ring tree rd ...\n"
            "  -w N      warm-up iterations (5)         -n N      timed iterations (20)\n"
            "  -c 0|1    check results (1)              -J FILE   also write results as JSON\n"
            "  -I 0|1|2  0: out-of-place and in-place (default), 1: out-of-place only,\n"
            "            2: in-place only (the other columns print N/A)\n"
            "  -l LIST   only these sizes, e.g. 8,1K,64M (instead of -b/-e/-f/-i)\n"
            "  -z CODEC  allreduce f32 sum/avg as a compressed ring: fp32 fp16 bf16 int8 int4\n"
            "  -H        allreduce over clusters (WEFT_CLUSTER): inside, across, inside\n"
            "  alltoall: -V as weft_alltoallv (equal counts; out of place only; its path\n"
            "               follows WEFT_ALGO, not -a)\n"
            "            -S each call after a barrier, timed alone (\"wait\": the barrier's us;\n"
            "               \"least\": the slowest rank's fastest call, us; \"onecpu\": the share\n"
            "               of calls some two ranks started on one CPU, then the slowest\n"
            "               rank's mean us over those calls and over the others;\n"
            "               \"median\": the median over the calls of the slowest rank's, us)\n"
            "            -M one memcpy of a rank's receive buffer, the fastest, rank 0 alone\n"
            "               and all at once (\"copy\" us us, then the call's time over each);\n"
            "               \"xcopy\": the same with the source just written by another\n"
            "               rank (rank r copies rank r+1's; N/A on one rank or many hosts)\n"
            "            -R the send buffer from weft_mem_alloc (registered memory)\n"
            "            -F with -S: each rank writes its whole send buffer before each\n"
            "               call's barrier (not timed), as a dispatch fills it every step:\n"
            "               the peers then read lines just written on another core\n"
            "  BYTES: a byte count or a number with K, M, G or T, with or without iB\n"
            "  (powers of 1024): 4096, 64K, 2MiB, 1.5G\n");
}

int main(int argc, char **argv)
{
    opts o = { .t = WEFT_F32, .op = WEFT_SUM, .algo = WEFT_ALGO_AUTO, .warmup = 5,
               .iters = 20, .check = 1, .minb = 8, .maxb = 32u << 20, .factor = 2,
               .codec = -1 };
    weft_comm *c;
    int ch, rc;
    if (argc < 2 || argv[1][0] == '-') {
        usage();
        return 2;
    }
    for (int k = 1; k < WEFT_COLL_KIND_COUNT; k++)
        if (weft_coll_name((weft_coll_kind)k) && !strcmp(argv[1], weft_coll_name((weft_coll_kind)k)))
            o.kind = (weft_coll_kind)k;
    if (!o.kind || o.kind == WEFT_COLL_SEND || o.kind == WEFT_COLL_RECV || o.kind == WEFT_COLL_BARRIER) {
        fprintf(stderr, "weft-bench: unknown collective '%s'\n", argv[1]);
        usage();
        return 2;
    }
    optind = 2;
    const char *me = "weft-bench";
    while ((ch = getopt(argc, argv, "b:e:f:i:d:o:r:a:w:n:c:J:I:l:z:HVSMRFh")) != -1) {
        int bad = 0;
        switch (ch) {
        case 'b': bad = cli_size(me, "-b", optarg, MAX_BYTES, &o.minb); break;
        case 'e': bad = cli_size(me, "-e", optarg, MAX_BYTES, &o.maxb); break;
        case 'f': bad = cli_double(me, "-f", optarg, 1.0001, 1024, &o.factor); o.step = 0; break;
        case 'i': bad = cli_size(me, "-i", optarg, MAX_BYTES, &o.step); break;
        case 'd':
            if ((bad = weft_dtype_parse(optarg, &o.t) != 0))
                fprintf(stderr, "weft-bench: -d %s: expected f32 f64 f16 bf16 i8 u8 i32 i64\n",
                        optarg);
            break;
        case 'o':
            if ((bad = weft_op_parse(optarg, &o.op) != 0))
                fprintf(stderr, "weft-bench: -o %s: expected sum prod min max avg\n", optarg);
            break;
        case 'r': bad = cli_int(me, "-r", optarg, 0, INT32_MAX, &o.root); break;
        case 'a':
            if ((bad = weft_algo_parse(optarg, &o.algo) != 0))
                fprintf(stderr, "weft-bench: -a %s: not an algorithm (auto naive ring tree rd "
                                "...)\n", optarg);
            break;
        case 'w': bad = cli_int(me, "-w", optarg, 0, 1000000, &o.warmup); break;
        case 'n': bad = cli_int(me, "-n", optarg, 1, 1000000, &o.iters); break;
        case 'c': bad = cli_int(me, "-c", optarg, 0, 1, &o.check); break;
        case 'J': o.json = optarg; break;
        case 'I': bad = cli_int(me, "-I", optarg, 0, 2, &o.places); break;
        case 'l': bad = !parse_list(optarg, &o); break;
        case 'z': {
            weft_codec k;
            if ((bad = weft_codec_parse(optarg, &k) != 0))
                fprintf(stderr, "weft-bench: -z %s: expected fp32 fp16 bf16 int8 int4\n", optarg);
            o.codec = (int)k;
            break;
        }
        case 'H': o.hier = 1; break;
        case 'V': o.vform = 1; break;
        case 'S': o.sync = 1; break;
        case 'M': o.copy = 1; break;
        case 'R': o.reg = 1; break;
        case 'F': o.fresh = 1; break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
        if (bad) {
            free(o.list);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-bench: unexpected argument '%s'\n", argv[optind]);
        usage();
        return 2;
    }
    if (o.nlist) { /* buffers sized for the largest listed size */
        o.minb = o.maxb = o.list[0];
        for (int i = 1; i < o.nlist; i++)
            if (o.list[i] > o.maxb)
                o.maxb = o.list[i];
    }
    char why[4200];
    if (o.json && cli_path_problem(o.json, 0, 0, why, sizeof why)) {
        fprintf(stderr, "weft-bench: -J %s: %s\n", o.json, why); /* fopen would block on a FIFO */
        free(o.list);
        return 2;
    }
    if ((o.codec >= 0 || o.hier) &&
        (o.kind != WEFT_COLL_ALLREDUCE || o.t != WEFT_F32 || (o.op != WEFT_SUM && o.op != WEFT_AVG))) {
        fprintf(stderr, "weft-bench: -z and -H run allreduce of f32 with sum or avg\n");
        free(o.list);
        return 2;
    }
    if ((o.vform || o.sync || o.copy || o.reg || o.fresh) && o.kind != WEFT_COLL_ALLTOALL) {
        fprintf(stderr, "weft-bench: -V, -S, -M, -R and -F are for alltoall\n");
        free(o.list);
        return 2;
    }
    if (o.fresh && !o.sync) {
        fprintf(stderr, "weft-bench: -F goes with -S (it writes between the timed calls)\n");
        free(o.list);
        return 2;
    }
    if (o.vform && o.places == 2) {
        fprintf(stderr, "weft-bench: -V runs out of place only (alltoallv refuses in place)\n");
        free(o.list);
        return 2;
    }
    if (o.vform)
        o.places = 1;
    if (o.codec > WEFT_CODEC_FP32)
        o.check = 0; /* lossy: no exact reference */
    if (o.minb > o.maxb) {
        fprintf(stderr, "weft-bench: -b %llu is larger than -e %llu\n",
                (unsigned long long)o.minb, (unsigned long long)o.maxb);
        free(o.list);
        return 2;
    }
    signal(SIGUSR1, on_sigusr1);
    if ((rc = weft_comm_init_env(&c))) {
        fprintf(stderr, "weft-bench: cannot join the job: %s\n", weft_strerror(rc));
        return 1;
    }
    dump_comm = c;
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(o.t);
    o.nranks = n;
    if (o.vform && !(o.v = calloc(2 * (size_t)n, sizeof *o.v))) {
        fprintf(stderr, "weft-bench: out of memory\n");
        return 1;
    }
    int blocks = per_rank_blocks(o.kind) ? n : 1;
    FILE *json = NULL;
    if (o.root < 0 || o.root >= n) {
        fprintf(stderr, "weft-bench: root %d out of range\n", o.root);
        return 2;
    }
    /* auto may try several algorithms on a size's first calls before it
     * settles (WEFT_AUTO_TRIAL_CALLS): those calls are warm-up too, and the column
     * shows what it settled on, from the communicator's own selector */
    if (o.hier && (rc = weft_cluster_comm_create(&o.clusters, c))) {
        if (r == 0)
            fprintf(stderr, "weft-bench: -H: %s (every cluster needs as many ranks)\n",
                    weft_strerror(rc));
        weft_comm_destroy(c);
        return 1;
    }
    int autosel = (o.algo != WEFT_ALGO_AUTO ? o.algo : weft_comm_algo(c)) == WEFT_ALGO_AUTO;
    autosel = autosel && o.codec < 0 && !o.hier && !o.vform; /* alltoallv has no selector */
    int wan_col = weft_comm_cluster_count(c) > 1;
    int warm = o.warmup + (autosel ? WEFT_AUTO_TRIAL_CALLS : 0);
    const char *acol = autosel ? "algo" : "", *asep = autosel ? " " : "";
    if (r == 0) {
        printf("# weft-bench %s: %d ranks, algorithm %s, %s, warm-up %d%s, iterations %d\n",
               argv[1], n, o.hier ? "clusters" : o.codec >= 0 ? "ring" : weft_algo_name(o.algo),
               weft_version(), o.warmup, autosel ? " (+ auto's trials)" : "", o.iters);
        if (o.codec >= 0 || wan_col)
            printf("# codec %s, %d cluster(s)%s%s\n", o.codec >= 0 ? weft_codec_name((weft_codec)o.codec) : "none",
                   weft_comm_cluster_count(c), getenv("WEFT_WAN") ? ", WEFT_WAN=" : "",
                   getenv("WEFT_WAN") ? getenv("WEFT_WAN") : "");
        printf("#\n");
        if (wan_col) {
            acol = autosel ? "algo wanB/rank" : "wanB/rank";
            asep = " ";
        }
        printf("# %10s %12s %8s %6s %6s %32s %32s\n", "", "", "", "", "",
               "out-of-place", "in-place");
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s%s%s\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong", asep, acol);
        printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
               "(GB/s)", "");
        if (o.json && !(json = fopen(o.json, "w")))
            fprintf(stderr, "weft-bench: cannot write %s: %s\n", o.json, strerror(errno));
        if (json)
            fprintf(json, "{\"collective\":\"%s\",\"ranks\":%d,\"algo\":\"%s\",\"type\":\"%s\","
                          "\"op\":\"%s\",\"results\":[",
                    argv[1], n, weft_algo_name(o.algo), weft_dtype_name(o.t), weft_op_name(o.op));
    }
    /* every rank stops when rank 0 cannot write what it was asked to */
    int json_ok = !o.json || json;
    if ((rc = weft_broadcast(c, &json_ok, 1, WEFT_I32, 0)))
        goto fail;
    if (!json_ok) {
        weft_comm_destroy(c);
        free(o.list);
        return 1;
    }
    uint64_t maxel = o.maxb / es + (uint64_t)n;
    bufs b = { NULL, malloc(maxel * es + 64), malloc(maxel * es + 64), 0, 0, NULL, NULL };
    void *in = NULL;
    if (o.reg ? weft_mem_alloc(c, maxel * es + 64, &in) != 0 : !(in = malloc(maxel * es + 64)))
        in = NULL;
    b.in = in;
    if (!b.in || !b.out || !b.want) {
        fprintf(stderr, "weft-bench: out of memory\n");
        return 1;
    }
    if (o.reg)
        memset(b.want, 0, maxel * es + 64);
    int32_t *cpus = malloc((size_t)o.iters * sizeof *cpus);
    double *took = malloc((size_t)o.iters * sizeof *took);
    if (!cpus || !took) {
        fprintf(stderr, "weft-bench: out of memory\n");
        return 1;
    }
    double busbw_sum = 0;
    int nsizes = 0, first = 1;
    long long wrong_total = 0;
    for (uint64_t size = o.minb, li = 0; o.nlist ? li < (uint64_t)o.nlist : size <= o.maxb;
         size = o.nlist ? (++li < (uint64_t)o.nlist ? o.list[li] : 0)
                        : next_size(&o, size, es * (uint64_t)blocks)) {
        uint64_t count = size / es / (uint64_t)blocks;
        double t_us[2] = { 0, 0 }, algbw[2] = { 0, 0 }, busbw[2] = { 0, 0 }, wan_rank = 0;
        long long wrong[2] = { 0, 0 };
        double wait_max = 0, least_max = 0, med = 0, copy1 = 0, copyp = 0, xcopy1 = 0,
               xcopyp = 0;
        char *xshared = NULL;
        size_t rbytes = (size_t)(count * es * (uint64_t)n);
        double shared = 0, t_shared = 0, t_apart = 0;
        b.count = count;
        for (int j = 0; o.vform && j < n; j++) {
            o.v[j] = (size_t)count;
            o.v[n + j] = (size_t)count * (size_t)j;
        }
        /* with -R from plain memory all the same (b.want, written at
         * the start): the call is measured against memcpy of ordinary
         * buffers */
        if (o.copy && (rc = copy_times(c, &o, b.out, o.reg ? b.want : b.in,
                                       count * es * (uint64_t)n, &copy1, &copyp)))
            goto fail;
        if (o.copy && n > 1 && rbytes > 0) {
            if ((rc = xcopy_map(c, rbytes, &xshared)))
                goto fail;
            rc = xshared ? xcopy_times(c, &o, b.out, xshared, rbytes, &xcopy1, &xcopyp) : 0;
            if (xshared)
                munmap(xshared, rbytes * (size_t)n);
            if (rc)
                goto fail;
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            if ((o.places == 1 && inplace) || (o.places == 2 && !inplace))
                continue;
            prepare(&o, r, n, &b, inplace);
            for (int i = 0; i < warm; i++)
                if ((rc = call(c, &o, &b)))
                    goto fail;
            if ((rc = weft_barrier(c)))
                goto fail;
            uint64_t w0 = 0, w1 = 0;
            weft_comm_wan_bytes(c, &w0);
            double dt, slowest, waited, least;
            if ((rc = timed_calls(c, &o, &b, &dt, &waited, &least, cpus, took)) ||
                (rc = weft_allreduce(c, &waited, &wait_max, 1, WEFT_F64, WEFT_MAX)) ||
                (rc = weft_allreduce(c, &least, &least_max, 1, WEFT_F64, WEFT_MAX)) ||
                (o.sync && (!inplace || o.places == 2) &&
                 ((rc = placement(c, &o, cpus, took, &shared, &t_shared, &t_apart)) ||
                  (rc = call_median(c, &o, took, &med)))))
                goto fail;
            /* the pumps may still hold the last call's bytes: a barrier
             * waits for them to arrive (its own few bytes are noise) */
            if ((rc = weft_barrier(c)))
                goto fail;
            weft_comm_wan_bytes(c, &w1);
            double wmine = (double)(w1 - w0) / o.iters / n, wsum;
            if ((rc = weft_allreduce(c, &wmine, &wsum, 1, WEFT_F64, WEFT_SUM)))
                goto fail;
            if (!inplace || o.places == 2)
                wan_rank = wsum;
            if ((rc = weft_allreduce(c, &dt, &slowest, 1, WEFT_F64, WEFT_MAX)))
                goto fail;
            long long bad = 0, all_bad;
            if (o.check) {
                prepare(&o, r, n, &b, inplace);
                if ((rc = call(c, &o, &b)))
                    goto fail;
                for (uint64_t i = 0; i < b.nwant; i++)
                    bad += memcmp((char *)b.recv + i * es, b.want + i * es, es) != 0;
            }
            if ((rc = weft_allreduce(c, &bad, &all_bad, 1, WEFT_I64, WEFT_SUM)))
                goto fail;
            uint64_t bytes = count * es * (uint64_t)blocks;
            t_us[inplace] = slowest * 1e6;
            algbw[inplace] = slowest > 0 ? (double)bytes / slowest / 1e9 : 0;
            busbw[inplace] = algbw[inplace] * bus_factor(o.kind, n);
            wrong[inplace] = o.check ? all_bad : -1;
            wrong_total += all_bad;
        }
        if (r == 0) {
            uint64_t bytes = count * es * (uint64_t)blocks;
            char col[2][64];
            for (int k = 0; k < 2; k++) {
                if ((o.places == 1 && k) || (o.places == 2 && !k))
                    snprintf(col[k], sizeof col[k], "%9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
                else
                    snprintf(col[k], sizeof col[k], "%9.2f %7.3f %7.3f %6lld", t_us[k], algbw[k],
                             busbw[k], wrong[k]);
            }
            char wcol[320] = "";
            int at = 0;
            if (wan_col)
                at = snprintf(wcol, sizeof wcol, "%s%.0f", autosel ? " " : "", wan_rank);
            if (o.sync)
                at += snprintf(wcol + at, sizeof wcol - (size_t)at,
                               " wait %.2f least %.2f median %.2f onecpu %.2f %.2f %.2f",
                               wait_max * 1e6, least_max * 1e6, med * 1e6, shared,
                               t_shared * 1e6, t_apart * 1e6);
            double tc = t_us[o.places == 2]; /* the out-of-place call, or in place with -I 2 */
            if (o.copy)
                at += snprintf(wcol + at, sizeof wcol - (size_t)at, " copy %.2f %.2f x %.2f %.2f",
                               copy1 * 1e6, copyp * 1e6, copy1 > 0 ? tc / (copy1 * 1e6) : 0,
                               copyp > 0 ? tc / (copyp * 1e6) : 0);
            if (o.copy && xcopy1 > 0)
                snprintf(wcol + at, sizeof wcol - (size_t)at, " xcopy %.2f %.2f x %.2f %.2f",
                         xcopy1 * 1e6, xcopyp * 1e6, tc / (xcopy1 * 1e6),
                         xcopyp > 0 ? tc / (xcopyp * 1e6) : 0);
            else if (o.copy)
                snprintf(wcol + at, sizeof wcol - (size_t)at, " xcopy N/A N/A x N/A N/A");
            printf("  %10llu %12llu %8s %6s %6d %s %s%s%s%s\n", (unsigned long long)bytes,
                   (unsigned long long)(count * (uint64_t)blocks), nccl_type(o.t),
                   weft_op_name(o.op), rooted(o.kind) ? o.root : -1, col[0], col[1], asep,
                   autosel ? weft_algo_name(chosen(c, &o, count * es, (uint32_t)es)) : "", wcol);
            fflush(stdout);
            if (json) {
                fprintf(json, "%s{\"size\":%llu,\"count\":%llu,\"time_us\":[%.3f,%.3f],"
                              "\"algbw\":[%.4f,%.4f],\"busbw\":[%.4f,%.4f],\"wrong\":[%lld,%lld]",
                        first ? "" : ",", (unsigned long long)bytes,
                        (unsigned long long)(count * (uint64_t)blocks), t_us[0], t_us[1],
                        algbw[0], algbw[1], busbw[0], busbw[1], wrong[0], wrong[1]);
                if (autosel)
                    fprintf(json, ",\"algo\":\"%s\"",
                            weft_algo_name(chosen(c, &o, count * es, (uint32_t)es)));
                if (wan_col)
                    fprintf(json, ",\"wan_bytes_per_rank\":%.0f", wan_rank);
                fputc('}', json);
                first = 0;
            }
        }
        busbw_sum += busbw[o.places == 2];
        nsizes++;
    }
    if (r == 0) {
        printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n#\n", nsizes ? busbw_sum / nsizes : 0.0);
        if (json) {
            fprintf(json, "],\"avg_busbw\":%g,\"wrong\":%lld}\n", nsizes ? busbw_sum / nsizes : 0.0,
                    wrong_total);
            if (ferror(json) | fclose(json)) {
                fprintf(stderr, "weft-bench: cannot write %s: %s\n", o.json, strerror(errno));
                wrong_total = wrong_total ? wrong_total : -1;
            }
        }
    }
    if (o.reg)
        weft_mem_free(c, b.in);
    else
        free(b.in);
    free(b.out);
    free(b.want);
    free(cpus);
    free(took);
    free(o.list);
    free(o.v);
    weft_cluster_comm_destroy(o.clusters);
    if ((rc = weft_comm_destroy(c))) {
        fprintf(stderr, "weft-bench: rank %d: leaving the job: %s\n", r, weft_strerror(rc));
        return 1;
    }
    return wrong_total ? 1 : 0;
fail:
    fprintf(stderr, "weft-bench: rank %d: %s: %s\n", r, weft_strerror(rc), weft_comm_error(c));
    return 1;
}
