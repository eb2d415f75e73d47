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

/* A call after the failure is refused, and its message still gives the
 * failure's own cause. */
static void still_says(weft_comm *child, const char *label)
{
    char first[160];
    snprintf(first, sizeof first, "%s", weft_comm_error(child));
    int rc = weft_barrier(child);
    const char *later = weft_comm_error(child);
    CHECKF(rc != 0 && strstr(later, "unusable after an earlier error") && strstr(later, first),
           "%s: a later call says \"%s\" (the error was \"%s\")", label, later, first);
    rc = weft_barrier(child);
    const char *once = strstr(weft_comm_error(child), "unusable after an earlier error");
    CHECKF(rc != 0 && once && !strstr(once + 1, "unusable after an earlier error"),
           "%s: the refusal is said once, not once per call: %s", label,
           weft_comm_error(child));
}

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
    still_says(child, label);
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

/* ---- mismatches where no message need cross -----------------------------
 * Rank 0 calls one thing, every other rank another, on a child whose
 * algorithms and shared segments were set up by matched calls of both
 * first (so no setup traffic gives the mismatch away): on one host the
 * flat board and pipe, direct reads and shared-memory rings move no
 * header a receiver could compare, yet every rank must fail with
 * WEFT_EMISMATCH, long before the timeout (20 s here, so that a
 * regression fails rather than hangs), and some rank must name both
 * sides. With WEFT_SHM=0 the same holds over TCP. */
typedef struct {
    const char *label;
    weft_coll_args a0, a1;   /* rank 0's call, the others' */
    const char *want0, *want1; /* each side's distinguishing words */
} pair_case;

static int pair_cold; /* no matched calls first: the mismatch is the child's first */

#define PT_TIMEOUT 20.0

static size_t elems(const weft_coll_args *a, int n)
{
    size_t k = a->count;
    if (a->kind == WEFT_COLL_ALLTOALL || a->kind == WEFT_COLL_ALLGATHER ||
        a->kind == WEFT_COLL_GATHER || a->kind == WEFT_COLL_SCATTER ||
        a->kind == WEFT_COLL_REDUCE_SCATTER)
        k *= (size_t)n;
    return k;
}

static int call(weft_comm *c, const weft_coll_args *a, char *send, char *recv)
{
    weft_coll_args x = *a;
    x.send = x.kind == WEFT_COLL_BROADCAST ? recv : send;
    x.recv = recv;
    return weft_collective(c, &x);
}

static void pair_one(weft_comm *c, const pair_case *pc)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    const weft_coll_args *mine = r == 0 ? &pc->a0 : &pc->a1;
    size_t most = elems(&pc->a0, n) > elems(&pc->a1, n) ? elems(&pc->a0, n) : elems(&pc->a1, n);
    char *send = calloc(most, 8), *recv = calloc(most, 8);
    weft_comm *child = NULL;
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "rank %d: case %s\n", r, pc->label);
    /* mp_run's alarm covers one job, and the sweeps run a hundred cases
     * in one: on a slow machine (libfabric's tcp took 28 s for the 4-rank
     * sweep on an idle Zen 4) it went off mid-sweep, and every case after
     * failed at its split. A hang is still caught, case by case. */
    alarm((unsigned)(PT_TIMEOUT * 4 + 60));
    int rc = weft_comm_split(c, 0, r, &child);
    CHECKF(rc == 0 && child && send && recv, "%s: split: %s", pc->label, weft_strerror(rc));
    if (!child || !send || !recv) {
        free(send);
        free(recv);
        return;
    }
    /* both calls, matched, twice: boards, pipes, rings and verdicts exist.
     * A rank may fail in one of these: a rank done with them (a root
     * that only sends) may have met the mismatch, and the others then
     * learn of it wherever they are. */
    for (int k = 0; k < 4 && rc == 0 && !pair_cold; k++)
        rc = call(child, k & 1 ? &pc->a1 : &pc->a0, send, recv);
    if (rc == 0)
        rc = call(child, mine, send, recv);
    /* Where every rank's half completed (roots that only send, leaves of
     * a reduce) a rank sees it at its next call, and over TCP a rank
     * whose barrier the others finished before they saw it, at the one
     * after. */
    for (int k = 0; k < 2 && rc == 0; k++)
        rc = weft_barrier(child);
    const char *msg = weft_comm_error(child);
    CHECKF(rc == WEFT_EMISMATCH, "%s: rank %d of %d got %s: %s", pc->label, r, n,
           weft_strerror(rc), msg);
    int32_t both = strstr(msg, pc->want0) && strstr(msg, pc->want1) ? 1 : 0;
    int32_t any = 0;
    rc = weft_allreduce(c, &both, &any, 1, WEFT_I32, WEFT_MAX);
    CHECKF(rc == 0, "%s: the parent's all-reduce after the child's mismatch: %s: %s", pc->label,
           weft_strerror(rc), weft_comm_error(c));
    CHECKF(any, "%s: no rank named both \"%s\" and \"%s\" (rank %d: %s)", pc->label,
           pc->want0, pc->want1, r, msg);
    weft_comm_destroy(child);
    free(send);
    free(recv);
}

#define MI (1u << 20)
#define AR(cnt, ...) { .kind = WEFT_COLL_ALLREDUCE, .count = (cnt), .dtype = WEFT_F32, \
                       .op = WEFT_SUM, __VA_ARGS__ }
#define BC(cnt, rt, ...) { .kind = WEFT_COLL_BROADCAST, .count = (cnt), .dtype = WEFT_F32, \
                           .root = (rt), __VA_ARGS__ }
#define RD(cnt, rt, ...) { .kind = WEFT_COLL_REDUCE, .count = (cnt), .dtype = WEFT_F32, \
                           .op = WEFT_SUM, .root = (rt), __VA_ARGS__ }

/* The cases the timeout alone used to catch. */
static const pair_case found[] = {
    { "allreduce vs broadcast, 1 Mi f32", AR(MI), BC(MI, 0), "allreduce", "broadcast" },
    { "broadcast root 0 vs root 1, 1 Mi f32", BC(MI, 0), BC(MI, 1), "root=0", "root=1" },
    { "alltoall count 1000 vs 2000",
      { .kind = WEFT_COLL_ALLTOALL, .count = 1000, .dtype = WEFT_F32 },
      { .kind = WEFT_COLL_ALLTOALL, .count = 2000, .dtype = WEFT_F32 }, "count=1000",
      "count=2000" },
    { "allreduce ring vs auto, 1 Mi f32", AR(MI, .algo = WEFT_ALGO_RING), AR(MI), "ring", "" },
    { "allreduce ring vs auto, 1000 f32", AR(1000, .algo = WEFT_ALGO_RING), AR(1000), "ring",
      "" },
    /* auto never takes hier on one host: a mismatch at any rank count */
    { "allreduce hier vs auto, 1 Mi f32", AR(MI, .algo = WEFT_ALGO_HIER), AR(MI), "hier", "" },
    { "allreduce hier vs auto, 1000 f32", AR(1000, .algo = WEFT_ALGO_HIER), AR(1000), "hier",
      "" },
};
#define NFOUND (int)(sizeof found / sizeof found[0])

static void run_found(weft_comm *c, void *arg)
{
    const pair_case *pc = arg;
    pair_one(c, pc);
}

static int with_shm(int n, const pair_case *pc, int shm)
{
    if (!shm)
        setenv("WEFT_SHM", "0", 1);
    int bad = mp_run(n, PT_TIMEOUT, run_found, (void *)pc);
    unsetenv("WEFT_SHM");
    return bad;
}

#define FOUND_TESTS(name, i)                                                          \
    TEST(name##_2) { CHECK(with_shm(2, &found[i], 1) == 0); }                         \
    TEST(name##_4) { CHECK(with_shm(4, &found[i], 1) == 0); }                         \
    TEST(name##_2_tcp) { CHECK(with_shm(2, &found[i], 0) == 0); }                     \
    TEST(name##_4_tcp) { CHECK(with_shm(4, &found[i], 0) == 0); }

FOUND_TESTS(allreduce_vs_broadcast, 0)
FOUND_TESTS(broadcast_roots, 1)
FOUND_TESTS(alltoall_counts, 2)
/* at 2 ranks auto may well take the ring itself */
TEST(ring_vs_auto_large_4) { CHECK(with_shm(4, &found[3], 1) == 0); }
TEST(ring_vs_auto_large_4_tcp) { CHECK(with_shm(4, &found[3], 0) == 0); }
TEST(ring_vs_auto_small_4) { CHECK(with_shm(4, &found[4], 1) == 0); }
TEST(ring_vs_auto_small_4_tcp) { CHECK(with_shm(4, &found[4], 0) == 0); }
FOUND_TESTS(hier_vs_auto_large, 5)
FOUND_TESTS(hier_vs_auto_small, 6)

/* The first call on a child, no warm-up: two roots of a reduce that only
 * wait to receive put no message on the wire; over TCP only a waiting
 * rank's hint shows the other side its call. */
static const pair_case cold[] = {
    { "reduce root 0 vs root 1, cold", RD(1000, 0), RD(1000, 1), "root=0", "root=1" },
    { "reduce root 1 vs root 0, cold", RD(1000, 1), RD(1000, 0), "root=0", "root=1" },
    { "reduce root 0 vs root 1, 1 Mi f32, cold", RD(MI, 0), RD(MI, 1), "root=0", "root=1" },
};

static int cold_with(int n, int shm)
{
    int bad = 0;
    pair_cold = 1;
    for (int i = 0; i < (int)(sizeof cold / sizeof cold[0]); i++)
        bad += with_shm(n, &cold[i], shm);
    pair_cold = 0;
    return bad;
}

TEST(reduce_roots_cold_2) { CHECK(cold_with(2, 1) == 0); }
TEST(reduce_roots_cold_4) { CHECK(cold_with(4, 1) == 0); }
TEST(reduce_roots_cold_2_tcp) { CHECK(cold_with(2, 0) == 0); }
TEST(reduce_roots_cold_4_tcp) { CHECK(cold_with(4, 0) == 0); }

/* Every field, under every algorithm (each on every rank), small and
 * large: the flat board and pipe, direct, the rings and the schedules. */
static const weft_algo every[] = {
    WEFT_ALGO_AUTO, WEFT_ALGO_NAIVE, WEFT_ALGO_RING, WEFT_ALGO_TREE, WEFT_ALGO_RD,
    WEFT_ALGO_RABENSEIFNER, WEFT_ALGO_HIER, WEFT_ALGO_DIRECT, WEFT_ALGO_FLAT,
};
#define NEVERY (int)(sizeof every / sizeof every[0])

static void run_every(weft_comm *c, void *arg)
{
    const char *shm = getenv("WEFT_SHM");
    int tcp = shm && !strcmp(shm, "0");
    (void)arg;
    for (int i = 0; i < NEVERY; i++) {
        weft_algo g = every[i];
        if (tcp && (g == WEFT_ALGO_DIRECT || g == WEFT_ALGO_FLAT))
            continue; /* they need shared memory, and refuse the call without */
        const char *an = g == WEFT_ALGO_AUTO ? "auto" : weft_algo_name(g);
        int allreduce_only = g == WEFT_ALGO_RD;
        for (int big = 0; big < 2; big++) {
            size_t n = big ? MI : 1000;
            char l[6][96];
            pair_case pc[6] = {
                { l[0], AR(n, .algo = g), AR(n + 8, .algo = g), "count=", "count=" },
                { l[1], AR(n, .algo = g),
                  { .kind = WEFT_COLL_ALLREDUCE, .count = n, .dtype = WEFT_I32, .op = WEFT_SUM,
                    .algo = g }, "f32", "i32" },
                { l[2], AR(n, .algo = g),
                  { .kind = WEFT_COLL_ALLREDUCE, .count = n, .dtype = WEFT_F32, .op = WEFT_MAX,
                    .algo = g }, "sum", "max" },
                { l[3], BC(n, 0, .algo = g), BC(n, 1, .algo = g), "root=0", "root=1" },
                { l[4], AR(n, .algo = g),
                  { .kind = WEFT_COLL_REDUCE, .count = n, .dtype = WEFT_F32, .op = WEFT_SUM,
                    .algo = g }, "allreduce", "reduce" },
                { l[5], BC(n, 0, .algo = g),
                  { .kind = WEFT_COLL_REDUCE, .count = n, .dtype = WEFT_F32, .op = WEFT_SUM,
                    .algo = g }, "broadcast", "reduce" },
            };
            snprintf(l[0], sizeof l[0], "%s %zu: count %zu vs %zu", an, n, n, n + 8);
            snprintf(l[1], sizeof l[1], "%s %zu: f32 vs i32", an, n);
            snprintf(l[2], sizeof l[2], "%s %zu: sum vs max", an, n);
            snprintf(l[3], sizeof l[3], "%s %zu: broadcast root 0 vs 1", an, n);
            snprintf(l[4], sizeof l[4], "%s %zu: allreduce vs reduce", an, n);
            snprintf(l[5], sizeof l[5], "%s %zu: broadcast vs reduce", an, n);
            /* flat broadcasts and reduces only what fits a board slot */
            for (int k = 0; k < 6; k++)
                if ((!allreduce_only && !(big && g == WEFT_ALGO_FLAT)) || k < 3)
                    pair_one(c, &pc[k]);
        }
    }
}

static int every_with(int n, int shm)
{
    if (!shm)
        setenv("WEFT_SHM", "0", 1);
    int bad = mp_run(n, PT_TIMEOUT, run_every, NULL);
    unsetenv("WEFT_SHM");
    return bad;
}

TEST(every_field_every_algo_2) { CHECK(every_with(2, 1) == 0); }
TEST(every_field_every_algo_4) { CHECK(every_with(4, 1) == 0); }
TEST(every_field_every_algo_2_tcp) { CHECK(every_with(2, 0) == 0); }
TEST(every_field_every_algo_4_tcp) { CHECK(every_with(4, 0) == 0); }
