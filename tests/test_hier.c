/* The hierarchical algorithm over real sockets, with ranks claiming to sit
 * on several hosts (WEFT_HOST_ID): all-reduce, broadcast and reduce at 4..8
 * ranks, 2 or 3 ranks per host (so some hosts are short), in place and not,
 * against a serial reference; and float all-reduce results that are the
 * same bits on every rank. Rabenseifner runs the same all-reduce cases. */
#include "mp.h"

#include <stdint.h>
#include <stdlib.h>

/* Exact in any order: small integers. */
static double input(int r, uint64_t i, weft_op op)
{
    if (op == WEFT_MAX)
        return (double)((r * 5 + (int)(i % 13) * 3) % 11) - 5;
    return (double)((r * 3 + (int)(i % 17) * 7) % 5);
}

static void put(void *b, weft_dtype t, uint64_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)b)[i] = (float)v; break;
    case WEFT_F64: ((double *)b)[i] = v; break;
    case WEFT_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: break;
    }
}

static double get(const void *b, weft_dtype t, uint64_t i)
{
    switch (t) {
    case WEFT_F32: return ((const float *)b)[i];
    case WEFT_F64: return ((const double *)b)[i];
    case WEFT_I32: return ((const int32_t *)b)[i];
    default: return 0;
    }
}

static double reduced(int n, uint64_t i, weft_op op)
{
    double acc = input(0, i, op);
    for (int r = 1; r < n; r++) {
        double x = input(r, i, op);
        acc = op == WEFT_MAX ? (x > acc ? x : acc) : acc + x;
    }
    return acc;
}

static void one(weft_comm *c, weft_coll_kind kind, weft_algo algo, weft_dtype t, weft_op op,
                uint64_t cnt, int inplace, int root)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *in = calloc(cnt + 1, es), *out = calloc(cnt + 1, es);
    int is_root = kind != WEFT_COLL_REDUCE || r == root;
    for (uint64_t i = 0; i < cnt; i++) {
        put(in, t, i, kind == WEFT_COLL_BROADCAST ? input(root, i, op) : input(r, i, op));
        put(out, t, i, -77);
    }
    weft_coll_args a = { .kind = kind, .send = in, .recv = out, .count = cnt, .dtype = t,
                         .op = op, .root = root, .algo = algo };
    if (kind == WEFT_COLL_BROADCAST) {
        if (r == root)
            memcpy(out, in, cnt * es);
        a.send = out;
    } else if (inplace) {
        memcpy(out, in, cnt * es);
        a.send = out;
    }
    int rc = weft_collective(c, &a);
    CHECKF(rc == 0, "%s %s %s %s count=%llu inplace=%d root=%d n=%d: %s",
           weft_algo_name(algo), weft_coll_name(kind), weft_dtype_name(t), weft_op_name(op),
           (unsigned long long)cnt, inplace, root, n, weft_comm_error(c));
    if (rc == 0 && is_root) {
        uint64_t bad = cnt;
        double want = 0;
        for (uint64_t i = 0; i < cnt && bad == cnt; i++) {
            want = kind == WEFT_COLL_BROADCAST ? input(root, i, op) : reduced(n, i, op);
            if (op == WEFT_AVG)
                want = t == WEFT_I32 ? (double)((int64_t)want / n)
                                     : t == WEFT_F32 ? (double)((float)want / (float)n)
                                                     : want / n;
            if (get(out, t, i) != want)
                bad = i;
        }
        CHECKF(bad == cnt,
               "%s %s %s %s count=%llu inplace=%d n=%d: rank %d element %llu is %g, want %g",
               weft_algo_name(algo), weft_coll_name(kind), weft_dtype_name(t), weft_op_name(op),
               (unsigned long long)cnt, inplace, n, r, (unsigned long long)bad,
               get(out, t, bad), want);
    }
    free(in);
    free(out);
}

/* Float sums whose bits depend on the order of additions: every rank must
 * hold the same bits, compared through an all-gather of a hash. */
static void same_bits(weft_comm *c, weft_algo algo, uint64_t cnt)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    float *x = malloc(cnt * sizeof *x);
    uint32_t seed = 2166136261u;
    for (uint64_t i = 0; i < cnt; i++) {
        uint32_t h = (uint32_t)(r + 1) * 2654435761u ^ (uint32_t)i * 40503u;
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        x[i] = (float)(h % 1000003u) * 1e-4f + (float)(h % 5u) * 1e4f;
    }
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = x, .recv = x, .count = cnt,
                         .dtype = WEFT_F32, .op = WEFT_SUM, .algo = algo };
    int rc = weft_collective(c, &a);
    CHECKF(rc == 0, "%s same-bits all-reduce: %s", weft_algo_name(algo), weft_comm_error(c));
    for (uint64_t i = 0; i < cnt; i++) { /* FNV-1a over the result's bytes */
        const unsigned char *b = (const unsigned char *)&x[i];
        for (int k = 0; k < 4; k++)
            seed = (seed ^ b[k]) * 16777619u;
    }
    uint32_t *all = calloc((size_t)n, sizeof *all);
    CHECK(weft_allgather(c, &seed, all, 1, WEFT_I32) == 0);
    int differ = 0;
    for (int j = 0; j < n; j++)
        differ += all[j] != all[0];
    CHECKF(differ == 0, "%s: %d ranks hold other bits than rank 0", weft_algo_name(algo), differ);
    free(all);
    free(x);
}

static void cases(weft_comm *c, void *arg)
{
    static const weft_dtype dts[] = { WEFT_F32, WEFT_F64, WEFT_I32 };
    static const weft_op ops[] = { WEFT_SUM, WEFT_MAX, WEFT_AVG };
    int n = weft_comm_size(c), seq = 0;
    uint64_t counts[] = { 0, 1, 13, (uint64_t)n * 7 + 3, 100003 };
    (void)arg;
    CHECK(weft_comm_host_count(c) >= 2);
    for (unsigned ci = 0; ci < 5; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
            for (unsigned d = 0; d < 3; d++)
                for (unsigned o = 0; o < 3; o++) {
                    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, dts[d], ops[o], counts[ci],
                        inplace, 0);
                    if (ci == 2 || ci == 4)
                        one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RABENSEIFNER, dts[d], ops[o],
                            counts[ci], inplace, 0);
                }
            one(c, WEFT_COLL_BROADCAST, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, counts[ci], 0,
                seq++ % n);
            one(c, WEFT_COLL_REDUCE, WEFT_ALGO_HIER, WEFT_I32, WEFT_SUM, counts[ci], inplace,
                seq++ % n);
        }
    /* > 4 MiB: many chunks through the pipelines */
    one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 1, 0);
    one(c, WEFT_COLL_BROADCAST, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 0, n - 1);
    one(c, WEFT_COLL_REDUCE, WEFT_ALGO_HIER, WEFT_F32, WEFT_SUM, (1u << 20) + 5, 0, 1);
    same_bits(c, WEFT_ALGO_HIER, 50021);
    same_bits(c, WEFT_ALGO_RABENSEIFNER, 50021);
}

int main(int argc, char **argv)
{
    static const struct { int n, per_host; } runs[] = { { 4, 2 }, { 5, 2 }, { 7, 3 }, { 8, 3 } };
    int only = argc > 1 ? atoi(argv[1]) : 0;
    for (unsigned i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (only && runs[i].n != only)
            continue;
        mp_ranks_per_host = runs[i].per_host;
        CHECKF(mp_run(runs[i].n, 60, cases, NULL) == 0,
               "hierarchical collectives at %d ranks, %d per host", runs[i].n, runs[i].per_host);
    }
    TEST_DONE();
}
