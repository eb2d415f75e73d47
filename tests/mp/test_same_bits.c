/* What auto relies on to give the same bits run after run
 * (coll/tune/same_bits.h): every pair of algorithms that tune_same_bits
 * calls alike gives bit-identical results for the reductions, on random
 * data of widely spread magnitudes, in f32 and f16, at 2 to 5 ranks, on
 * the flat board and the flat pipe; and the data is such that algorithms
 * with another order do differ (else the test would prove nothing). */
#include "coll/algo.h"
#include "coll/tune/same_bits.h"
#include "core/half.h"
#include "mp.h"
#include "test.h"

#include <stdlib.h>

TEST_TIMEOUT(240);

typedef struct {
    weft_coll_kind kind;
    size_t count; /* per rank's result for reduce-scatter */
    weft_dtype dtype;
} shape;

static const shape shapes[] = {
    { WEFT_COLL_ALLREDUCE, 7, WEFT_F32 },
    { WEFT_COLL_ALLREDUCE, 1001, WEFT_F32 },
    { WEFT_COLL_ALLREDUCE, 1001, WEFT_F16 },
    { WEFT_COLL_ALLREDUCE, 150001, WEFT_F32 }, /* beyond a board slot: the flat pipe */
    { WEFT_COLL_REDUCE, 999, WEFT_F32 },
    { WEFT_COLL_REDUCE_SCATTER, 601, WEFT_F32 },
    { WEFT_COLL_REDUCE_SCATTER, 333, WEFT_F16 },
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
#define ROOT 1

/* Terms from 2^-10 to 2^10 of either sign: sums that depend on their order. */
static void fill(void *x, size_t n, weft_dtype t, int rank, int which)
{
    unsigned s = 2654435761u * (unsigned)(rank + 1) + 40503u * (unsigned)which;
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        float v = ((float)((s >> 8) & 0xffff) / 65536.0f - 0.5f) * (float)(1 << ((s >> 4) % 21)) /
                  1024.0f;
        if (t == WEFT_F16)
            ((uint16_t *)x)[i] = f32_to_f16(v);
        else
            ((float *)x)[i] = v;
    }
}

static int run_one(weft_comm *c, const shape *sh, const void *send, void *recv)
{
    switch (sh->kind) {
    case WEFT_COLL_ALLREDUCE:
        return weft_allreduce(c, send, recv, sh->count, sh->dtype, WEFT_SUM);
    case WEFT_COLL_REDUCE:
        return weft_reduce(c, send, recv, sh->count, sh->dtype, WEFT_SUM, ROOT);
    default:
        return weft_reduce_scatter(c, send, recv, sh->count, sh->dtype, WEFT_SUM);
    }
}

static void ranks(weft_comm *c, void *arg)
{
    (void)arg;
    int p = weft_comm_size(c), rank = weft_comm_rank(c);
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *sh = &shapes[k];
        size_t es = weft_dtype_size(sh->dtype);
        size_t nin = sh->kind == WEFT_COLL_REDUCE_SCATTER ? sh->count * (size_t)p : sh->count;
        size_t nout = sh->count;
        int keep = sh->kind != WEFT_COLL_REDUCE || rank == ROOT; /* whose result counts */
        char *send = malloc(nin * es), *out[WEFT_ALGO_COUNT] = { 0 };
        int ran[WEFT_ALGO_COUNT] = { 0 };
        if (!send) {
            CHECK(0);
            return;
        }
        fill(send, nin, sh->dtype, rank, (int)k);
        for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++) {
            /* hier on one host would be the ring by another name */
            if (!coll_algo_does((weft_algo)a, sh->kind) ||
                (coll_algo_of((weft_algo)a)->flags & COLL_ACROSS_HOSTS))
                continue;
            if (!(out[a] = calloc(nout ? nout : 1, es))) {
                CHECK(0);
                continue;
            }
            CHECK(weft_comm_set_algo(c, (weft_algo)a) == 0);
            int rc = run_one(c, sh, send, out[a]);
            CHECKF(rc == 0, "%d ranks, %s %zu: %s: %s", p, weft_coll_name(sh->kind), sh->count,
                   weft_algo_name((weft_algo)a), weft_comm_error(c));
            ran[a] = rc == 0;
        }
        int pairs = 0, differ = 0;
        for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT && keep; a++)
            for (int b = a + 1; b < WEFT_ALGO_COUNT; b++) {
                if (!ran[a] || !ran[b])
                    continue;
                int same = !memcmp(out[a], out[b], nout * es);
                if (tune_same_bits((weft_algo)a, (weft_algo)b, sh->kind, p, sh->count * es)) {
                    pairs++;
                    CHECKF(same, "%d ranks, %s %zu %s: %s and %s are said to give the same bits",
                           p, weft_coll_name(sh->kind), sh->count,
                           sh->dtype == WEFT_F16 ? "f16" : "f32", weft_algo_name((weft_algo)a),
                           weft_algo_name((weft_algo)b));
                } else {
                    differ += !same;
                }
            }
        if (keep && p == 2)
            CHECKF(pairs > 0, "%s: no pair compared", weft_coll_name(sh->kind));
        /* the ring against flat, say: the data tells orders apart */
        if (keep && p > 2 && sh->count > 100)
            CHECKF(differ > 0, "%d ranks, %s %zu: no two algorithms differ", p,
                   weft_coll_name(sh->kind), sh->count);
        for (int a = 0; a < WEFT_ALGO_COUNT; a++)
            free(out[a]);
        free(send);
    }
    CHECK(weft_comm_set_algo(c, WEFT_ALGO_AUTO) == 0);
}

TEST(claims_hold)
{
    unsetenv("WEFT_ALGO");
    for (int p = 2; p <= 5; p++)
        CHECKF(mp_run(p, 60, ranks, NULL) == 0, "%d ranks", p);
}

/* The claims themselves: only reductions can differ; two ranks never do;
 * naive and flat share an order, the ring and direct do not. */
TEST(table)
{
    CHECK(tune_same_bits(WEFT_ALGO_RING, WEFT_ALGO_FLAT, WEFT_COLL_ALLGATHER, 8, 1 << 20));
    CHECK(tune_same_bits(WEFT_ALGO_TREE, WEFT_ALGO_DIRECT, WEFT_COLL_BROADCAST, 8, 64));
    CHECK(tune_same_bits(WEFT_ALGO_RING, WEFT_ALGO_RD, WEFT_COLL_ALLREDUCE, 2, 64));
    CHECK(tune_same_bits(WEFT_ALGO_NAIVE, WEFT_ALGO_FLAT, WEFT_COLL_ALLREDUCE, 7, 1 << 30));
    CHECK(tune_same_bits(WEFT_ALGO_RING, WEFT_ALGO_RING, WEFT_COLL_REDUCE, 7, 64));
    CHECK(!tune_same_bits(WEFT_ALGO_RING, WEFT_ALGO_FLAT, WEFT_COLL_ALLREDUCE, 3, 64));
    CHECK(!tune_same_bits(WEFT_ALGO_DIRECT, WEFT_ALGO_FLAT, WEFT_COLL_REDUCE_SCATTER, 4, 64));
    CHECK(!tune_same_bits(WEFT_ALGO_RABENSEIFNER, WEFT_ALGO_RING, WEFT_COLL_ALLREDUCE, 4, 64));
    /* flat hands a reduction beyond its board slot to another algorithm */
    CHECK(tune_same_bits(WEFT_ALGO_NAIVE, WEFT_ALGO_FLAT, WEFT_COLL_REDUCE_SCATTER, 4, 4096));
    CHECK(!tune_same_bits(WEFT_ALGO_NAIVE, WEFT_ALGO_FLAT, WEFT_COLL_REDUCE_SCATTER, 4, 4097));
    CHECK(tune_same_bits(WEFT_ALGO_NAIVE, WEFT_ALGO_FLAT, WEFT_COLL_REDUCE, 3, 16384));
    CHECK(!tune_same_bits(WEFT_ALGO_NAIVE, WEFT_ALGO_FLAT, WEFT_COLL_REDUCE, 3, 16385));
}
