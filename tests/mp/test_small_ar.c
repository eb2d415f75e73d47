/* The small all-reduce (coll/exec/small.c): every dtype and op at the
 * sizes around its limit (SMALL_MAX, 256 B a rank) and around the post's
 * inline payload (32 B), out-of-place and in place, 1 to 8 ranks, gives
 * the bits flat gives when named (the path runs flat's calls, in rank
 * order) and the same bits on every rank; calls racing ahead of a slow
 * rank; a mismatch on either side of the limit, and across it, fails on
 * both ranks instead of hanging; a rank that dies in the middle of a
 * stream of calls is named by the others. */
#include "mp.h"

#include <signal.h>
#include <stdlib.h>

TEST_TIMEOUT(300);

#define SMALL_LIMIT 256 /* SMALL_MAX in coll/exec/small.h */
#define MAXB 512

/* A byte pattern for element i of rank r in call `it`: finite values of
 * every dtype, varied enough that the order of a float sum shows. */
static void fill(void *buf, size_t count, weft_dtype t, int r, int it)
{
    for (size_t i = 0; i < count; i++) {
        unsigned h = (unsigned)(r * 37 + (int)i * 11 + it * 5);
        float f = (float)(h % 23) * 0.37f - 3.1f;
        switch (t) {
        case WEFT_F32: ((float *)buf)[i] = f; break;
        case WEFT_F64: ((double *)buf)[i] = (double)f / 3.0; break;
        case WEFT_F16: /* exponent 12..18 of 31, any mantissa, either sign */
            ((uint16_t *)buf)[i] = (uint16_t)((h & 1) << 15 | (12 + h % 7) << 10 |
                                              ((h * 131) & 0x3ff));
            break;
        case WEFT_BF16: {
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
            break;
        }
        case WEFT_I8: case WEFT_U8: ((uint8_t *)buf)[i] = (uint8_t)(h * 29); break;
        case WEFT_I32: ((int32_t *)buf)[i] = (int32_t)(h * 2654435761u); break;
        case WEFT_I64: ((int64_t *)buf)[i] = (int64_t)h * 1000003 - 7; break;
        default: break;
        }
    }
}

/* All-reduce of count elements with algorithm algo, in place or not,
 * into out. */
static int reduce_with(weft_comm *c, weft_algo algo, int inplace, size_t count, weft_dtype t,
                       weft_op op, int it, void *out)
{
    char in[MAXB];
    fill(in, count, t, weft_comm_rank(c), it);
    if (inplace)
        memcpy(out, in, count * weft_dtype_size(t));
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .send = inplace ? out : in, .recv = out,
                         .count = count, .dtype = t, .op = op, .algo = algo };
    return weft_collective(c, &a);
}

/* Bytes per rank around the limits: 1 element, the inline payload and
 * one element past it, the limit, one element past it. */
static int sizes(size_t es, size_t *counts)
{
    size_t b[] = { es, 32, 32 + es, SMALL_LIMIT - es, SMALL_LIMIT, SMALL_LIMIT + es };
    int n = 0;
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (!mp_thin() || i != 3)
            counts[n++] = b[i] / es;
    return n;
}

static void sweep(weft_comm *c, void *arg)
{
    (void)arg;
    int p = weft_comm_size(c), me = weft_comm_rank(c), it = 0;
    for (int t = 0; t < WEFT_DTYPE_COUNT; t++) {
        size_t es = weft_dtype_size((weft_dtype)t), counts[8];
        int ns = sizes(es, counts);
        for (int op = 0; op < WEFT_OP_COUNT; op++)
            for (int s = 0; s < ns; s++, it++) {
                size_t bytes = counts[s] * es;
                char got[MAXB], want[MAXB], all[8 * MAXB];
                int inplace = it & 1;
                int rc = reduce_with(c, WEFT_ALGO_AUTO, inplace, counts[s], (weft_dtype)t,
                                     (weft_op)op, it, got);
                int rc2 = reduce_with(c, WEFT_ALGO_FLAT, !inplace, counts[s], (weft_dtype)t,
                                      (weft_op)op, it, want);
                CHECKF(rc == 0 && rc2 == 0, "dtype %d op %d %zu B: %s / %s", t, op, bytes,
                       weft_strerror(rc), weft_strerror(rc2));
                if (rc || rc2)
                    return;
                CHECKF(!memcmp(got, want, bytes),
                       "%d ranks, dtype %d, op %d, %zu B, %s: not flat's bits", p, t, op,
                       bytes, inplace ? "in place" : "out of place");
                rc = weft_allgather(c, got, all, bytes, WEFT_U8);
                CHECK(rc == 0);
                for (int r = 0; rc == 0 && r < p; r++)
                    CHECKF(!memcmp(all + (size_t)r * bytes, got, bytes),
                           "rank %d's bits differ from rank %d's (dtype %d, op %d, %zu B)", r,
                           me, t, op, bytes);
            }
    }
    /* exact where the order cannot matter: small integers summed */
    int64_t x[4] = { me, 2 * me, -me, 1 };
    CHECK(weft_allreduce(c, x, x, 4, WEFT_I64, WEFT_SUM) == 0);
    int64_t s = (int64_t)p * (p - 1) / 2;
    CHECKF(x[0] == s && x[1] == 2 * s && x[2] == -s && x[3] == p, "sum %lld of %d ranks",
           (long long)x[0], p);
}

TEST(every_dtype_op_size)
{
    for (int n = 1; n <= 8; n++)
        if (mp_size_kept(n))
            CHECKF(mp_run(n, 60, sweep, NULL) == 0, "%d ranks", n);
}

/* Calls back to back while one rank at a time lags: the others post
 * call k + 1 while it still reads call k. Every result is exact. */
static void race(weft_comm *c, void *arg)
{
    (void)arg;
    int p = weft_comm_size(c), me = weft_comm_rank(c);
    int iters = mp_thin() ? 300 : 3000;
    for (int it = 0; it < iters; it++) {
        int64_t v[3] = { (int64_t)it * p + me, me == it % p, it }, out[3];
        if (it % 61 == 0 && me == (it / 61) % p)
            mp_sleep_ms(2); /* this rank lags one call */
        int rc = weft_allreduce(c, v, it & 1 ? v : out, 3, WEFT_I64, WEFT_SUM);
        const int64_t *r = it & 1 ? v : out;
        int64_t want = (int64_t)it * p * p + (int64_t)p * (p - 1) / 2;
        if (rc || r[0] != want || r[1] != 1 || r[2] != (int64_t)it * p) {
            CHECKF(0, "call %d: %s, got %lld %lld %lld, want %lld 1 %lld", it,
                   weft_strerror(rc), (long long)r[0], (long long)r[1], (long long)r[2],
                   (long long)want, (long long)it * p);
            return;
        }
    }
    CHECK(1);
}

TEST(racing_ahead)
{
    for (int n = 2; n <= 8; n *= 2)
        CHECKF(mp_run(n, 60, race, NULL) == 0, "%d ranks", n);
}

/* Rank 0 all-reduces mine[0] floats, the others mine[1]; warm: after a
 * few matched calls (the board made, the fast path on), else the
 * communicator's first. Both sides must fail, with a mismatch. */
static void mismatch(weft_comm *c, void *arg)
{
    const size_t *mine = arg;
    int me = weft_comm_rank(c);
    for (int warm = 0; warm < 2; warm++) {
        weft_comm *child = NULL;
        CHECK(weft_comm_split(c, 0, me, &child) == 0 && child);
        if (!child)
            return;
        float in[2 * MAXB / 4] = { 0 }, out[2 * MAXB / 4];
        for (int i = 0; warm && i < 5; i++)
            CHECK(weft_allreduce(child, in, out, 2, WEFT_F32, WEFT_SUM) == 0);
        int rc = weft_allreduce(child, in, out, mine[me != 0], WEFT_F32, WEFT_SUM);
        CHECKF(rc == WEFT_EMISMATCH, "%zu vs %zu floats (%s): %s: %s", mine[0], mine[1],
               warm ? "warm" : "cold", weft_strerror(rc), weft_comm_error(child));
        weft_comm_destroy(child);
        /* the parent still agrees: both ranks got here */
        CHECK(weft_barrier(c) == 0);
    }
}

TEST(mismatch_inside)
{
    size_t n[2] = { 2, 4 }; /* 8 B against 16 B */
    CHECK(mp_run(2, 10, mismatch, n) == 0);
}

TEST(mismatch_across_limit)
{
    size_t n[2] = { SMALL_LIMIT / 4, SMALL_LIMIT / 4 + 1 };
    CHECK(mp_run(2, 10, mismatch, n) == 0);
    size_t m[2] = { 2, 2 * MAXB / 4 }; /* 8 B against 1 KiB */
    CHECK(mp_run(3, 10, mismatch, m) == 0);
}

/* Rank 1 dies after a few hundred calls; the others fail naming it. */
static void dies(weft_comm *c, void *arg)
{
    (void)arg;
    int me = weft_comm_rank(c), rc = 0, i;
    double x = 1, y;
    for (i = 0; i < 100000 && !rc; i++) {
        if (me == 1 && i == 300)
            raise(SIGKILL);
        rc = weft_allreduce(c, &x, &y, 1, WEFT_F64, WEFT_SUM);
    }
    CHECKF(rc == WEFT_EPEER && strstr(weft_comm_error(c), "rank 1"), "after %d calls: %s: %s",
           i, weft_strerror(rc), weft_comm_error(c));
}

TEST(dead_peer)
{
    CHECKF(mp_run(3, 20, dies, NULL) == 1, "only the killed rank fails");
}
