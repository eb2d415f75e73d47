/* Mismatched collectives become WEFT_EMISMATCH with both sides described:
 * every pair of different collectives, and the same collective with a
 * different count, dtype, root or algorithm. Each case runs on a fresh
 * sub-communicator of a 2-rank job (a mismatch leaves a communicator
 * unusable; the parent stays healthy and compares notes). A mismatch whose
 * first halves complete on both sides (two sends) shows at the next call,
 * a barrier here; either way both ranks must fail, and a receiving rank
 * must name both operations. When neither side sends to the other (rank 0
 * the root of a reduce or gather, rank 1 a non-root of a scatter) no byte
 * can reveal the mismatch: both ranks time out instead (WEFT_TIMEOUT, 3 s
 * here), naming their operation and the rank they wait on. */
#include "mp.h"

#include <stdlib.h>

static const weft_coll_kind kinds[] = {
    WEFT_COLL_BARRIER, WEFT_COLL_BROADCAST, WEFT_COLL_REDUCE, WEFT_COLL_ALLREDUCE,
    WEFT_COLL_GATHER, WEFT_COLL_SCATTER, WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE_SCATTER,
    WEFT_COLL_ALLTOALL,
};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

static char sendbuf[1 << 14], recvbuf[1 << 14];

/* Runs a on a fresh child of c (then a barrier), and checks the outcome
 * across both ranks; want: a phrase both sides' descriptions must show. */
static void one_case(weft_comm *c, const weft_coll_args *a, const char *label,
                     const char *want0, const char *want1, int silent)
{
    weft_comm *child = NULL;
    int r = weft_comm_rank(c);
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "rank %d: case %s\n", r, label);
    int rc = weft_comm_split(c, 0, r, &child);
    CHECKF(rc == 0 && child, "split: %s", weft_strerror(rc));
    if (!child)
        return;
    weft_coll_args x = *a;
    x.send = x.kind == WEFT_COLL_BROADCAST ? recvbuf : sendbuf;
    x.recv = recvbuf;
    rc = weft_collective(child, &x);
    if (rc == 0)
        rc = weft_barrier(child);
    const char *msg = weft_comm_error(child);
    /* both ranks must fail, with a mismatch code; where no byte flows a
     * timeout, unless the algorithm (flat, on one host) lets every rank
     * see every rank's call */
    CHECKF(rc == WEFT_EMISMATCH || (silent && rc == WEFT_ETIMEDOUT), "%s: rank %d got %s: %s",
           label, r, weft_strerror(rc), msg);
    /* somebody (a receiving rank) describes both sides */
    int32_t both = strstr(msg, "while this rank") && (strstr(msg, want0) || strstr(msg, want1));
    if (silent && rc == WEFT_ETIMEDOUT)
        both = strstr(msg, "waiting on ranks: from") && strstr(msg, r == 0 ? want0 : want1);
    int32_t all[2] = { 0, 0 };
    CHECK(weft_allgather(c, &both, all, 1, WEFT_I32) == 0);
    CHECKF(all[0] || all[1], "%s: no rank described both sides (rank %d: %s)", label, r, msg);
    weft_comm_destroy(child);
}

static void run(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    char label[128];
    (void)arg;
    for (int i = 0; i < NKINDS; i++)
        for (int j = i + 1; j < NKINDS; j++) {
            weft_coll_args a = { .kind = r == 0 ? kinds[i] : kinds[j], .count = 8,
                                 .dtype = WEFT_F32, .op = WEFT_SUM, .root = 0 };
            snprintf(label, sizeof label, "%s vs %s", weft_coll_name(kinds[i]),
                     weft_coll_name(kinds[j]));
            int silent = (kinds[i] == WEFT_COLL_REDUCE || kinds[i] == WEFT_COLL_GATHER) &&
                         kinds[j] == WEFT_COLL_SCATTER;
            one_case(c, &a, label, weft_coll_name(kinds[i]), weft_coll_name(kinds[j]), silent);
        }
    weft_coll_args a = { .kind = WEFT_COLL_ALLREDUCE, .count = r == 0 ? 10 : 100,
                         .dtype = WEFT_F32, .op = WEFT_SUM };
    one_case(c, &a, "count", "count=10", "count=100", 0);
    a.count = 10;
    a.dtype = r == 0 ? WEFT_F32 : WEFT_I32;
    one_case(c, &a, "dtype", "f32", "i32", 0);
    a.dtype = WEFT_F32;
    a.op = r == 0 ? WEFT_SUM : WEFT_MAX;
    one_case(c, &a, "op", "sum", "max", 0);
    weft_coll_args b = { .kind = WEFT_COLL_BROADCAST, .count = 10, .dtype = WEFT_F32,
                         .root = r == 0 ? 0 : 1 };
    one_case(c, &b, "root", "root=0", "root=1", 0);
    weft_coll_args g = { .kind = WEFT_COLL_ALLREDUCE, .count = 1000, .dtype = WEFT_F32,
                         .op = WEFT_SUM, .algo = r == 0 ? WEFT_ALGO_RING : WEFT_ALGO_NAIVE };
    one_case(c, &g, "algorithm", "ring", "naive", 0);
}

TEST(pairs_and_fields) { CHECKF(mp_run(2, 3, run, NULL) == 0, "a rank crashed or failed"); }
