/* Every collective x dtype x op x in-place/out-of-place x algorithm, for
 * 1..8 ranks and counts 0, 1, a prime, one not divisible by the rank count
 * and >= 4 MiB, against a serial reference computed here. Inputs are small
 * integers, so every result is exact in any summation order and compared
 * bit for bit. */
#include "mp.h"

#include "coll/sched/sched.h"
#include "core/half.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* 55 cases of 1 to 8 ranks: about 100 s alone on 2 busy cores */
TEST_TIMEOUT(900);

static const weft_dtype dtypes[] = { WEFT_F32, WEFT_F64, WEFT_F16, WEFT_BF16,
                                     WEFT_I8,  WEFT_U8,  WEFT_I32, WEFT_I64 };
#define NDT (int)(sizeof dtypes / sizeof dtypes[0])

/* Input of rank r at element i, chosen per op so results stay exact. */
static double input(int r, uint64_t i, weft_op op, weft_dtype t)
{
    double v;
    if (op == WEFT_PROD)
        v = ((uint64_t)r + i) % 3 == 0 ? 2 : 1;
    else if (op == WEFT_MIN || op == WEFT_MAX)
        v = (double)(((uint64_t)r * 5 + i * 3) % 11) - 5;
    else
        v = (double)(((uint64_t)r * 3 + i * 7) % 5);
    if (t == WEFT_U8 && v < 0)
        v = -v;
    return v;
}

static void put(void *buf, weft_dtype t, uint64_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)buf)[i] = (float)v; break;
    case WEFT_F64: ((double *)buf)[i] = v; break;
    case WEFT_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case WEFT_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case WEFT_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)((int64_t)v & 0xff); break;
    case WEFT_U8: ((uint8_t *)buf)[i] = (uint8_t)((int64_t)v & 0xff); break;
    case WEFT_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)((int64_t)v & 0xffffffff); break;
    case WEFT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

static double get(const void *buf, weft_dtype t, uint64_t i)
{
    switch (t) {
    case WEFT_F32: return ((const float *)buf)[i];
    case WEFT_F64: return ((const double *)buf)[i];
    case WEFT_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case WEFT_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case WEFT_I8: return ((const int8_t *)buf)[i];
    case WEFT_U8: return ((const uint8_t *)buf)[i];
    case WEFT_I32: return ((const int32_t *)buf)[i];
    case WEFT_I64: return (double)((const int64_t *)buf)[i];
    default: return 0;
    }
}

/* The reduced value of element i over n ranks, stored as dtype t into
 * out[j]: integers wrap, avg divides as the library documents. */
static void expect_reduced(void *out, uint64_t j, weft_dtype t, weft_op op, int n, uint64_t i)
{
    double acc = input(0, i, op, t);
    for (int r = 1; r < n; r++) {
        double x = input(r, i, op, t);
        switch (op) {
        case WEFT_PROD: acc *= x; break;
        case WEFT_MIN: acc = x < acc ? x : acc; break;
        case WEFT_MAX: acc = x > acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    put(out, t, j, acc);
    if (op != WEFT_AVG)
        return;
    switch (t) { /* divide the stored (wrapped) sum */
    case WEFT_F32: ((float *)out)[j] = ((float *)out)[j] / (float)n; break;
    case WEFT_F64: ((double *)out)[j] = ((double *)out)[j] / n; break;
    case WEFT_F16: ((uint16_t *)out)[j] = f32_to_f16(f16_to_f32(((uint16_t *)out)[j]) / (float)n); break;
    case WEFT_BF16: ((uint16_t *)out)[j] = f32_to_bf16(bf16_to_f32(((uint16_t *)out)[j]) / (float)n); break;
    case WEFT_I8: ((int8_t *)out)[j] = (int8_t)(((int8_t *)out)[j] / n); break;
    case WEFT_U8: ((uint8_t *)out)[j] = (uint8_t)(((uint8_t *)out)[j] / n); break;
    case WEFT_I32: ((int32_t *)out)[j] = ((int32_t *)out)[j] / n; break;
    case WEFT_I64: ((int64_t *)out)[j] = ((int64_t *)out)[j] / n; break;
    default: break;
    }
}

typedef struct {
    weft_coll_kind kind;
    weft_dtype t;
    weft_op op;
    weft_algo algo;
    int inplace;
    uint64_t count;
    int root;
} tcase;

static void describe(const tcase *k, int n, char *b, size_t len)
{
    snprintf(b, len, "%s %s %s algo=%s inplace=%d count=%llu root=%d n=%d",
             weft_coll_name(k->kind), weft_dtype_name(k->t), weft_op_name(k->op),
             weft_algo_name(k->algo), k->inplace, (unsigned long long)k->count, k->root, n);
}

/* Whether algorithm a has a schedule for kind k (the test skips it if not). */
static int supported(weft_coll_kind k, weft_algo a, int n)
{
    weft_sched s;
    sched_params p = { .kind = k, .rank = 0, .nranks = n, .count = 7, .esize = 4 };
    sched_init(&s);
    int rc = sched_build(&s, a, &p);
    sched_free(&s);
    return rc != WEFT_ENOTSUP;
}

/* Runs one case on this rank and checks its output. */
static void run_case(weft_comm *c, const tcase *k)
{
    if (k->algo != WEFT_ALGO_AUTO && !supported(k->kind, k->algo, weft_comm_size(c)))
        return;
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(k->t);
    uint64_t cnt = k->count, big = cnt * (uint64_t)n;
    char *in = calloc(big + 1, es), *out = malloc((big + 1) * es);
    char *want = calloc(big + 1, es);
    char what[200];
    uint64_t nout = 0; /* elements of `want` to compare against the result */
    const void *sendp = in;
    void *recvp = out;
    int rc = 0;
    memset(out, 0xa5, (big + 1) * es);
    weft_coll_args a = { .kind = k->kind, .count = cnt, .dtype = k->t, .op = k->op,
                         .root = k->root, .algo = k->algo };
    switch (k->kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
        for (uint64_t i = 0; i < cnt; i++)
            put(in, k->t, i, input(r, i, k->op, k->t));
        if (k->kind == WEFT_COLL_ALLREDUCE || r == k->root) {
            for (uint64_t i = 0; i < cnt; i++)
                expect_reduced(want, i, k->t, k->op, n, i);
            nout = cnt;
        }
        if (k->inplace) {
            memcpy(out, in, cnt * es);
            sendp = out;
        }
        break;
    case WEFT_COLL_REDUCE_SCATTER:
        for (uint64_t i = 0; i < big; i++)
            put(in, k->t, i, input(r, i, k->op, k->t));
        for (uint64_t i = 0; i < cnt; i++)
            expect_reduced(want, i, k->t, k->op, n, (uint64_t)r * cnt + i);
        nout = cnt;
        if (k->inplace) { /* NCCL's in-place: recv = send + rank*count */
            memcpy(out, in, big * es);
            sendp = out;
            recvp = out + (uint64_t)r * cnt * es;
        }
        break;
    case WEFT_COLL_BROADCAST:
        for (uint64_t i = 0; i < cnt; i++)
            put(want, k->t, i, input(k->root, i, WEFT_SUM, k->t));
        if (r == k->root)
            memcpy(out, want, cnt * es);
        sendp = recvp = out;
        nout = cnt;
        break;
    case WEFT_COLL_GATHER:
    case WEFT_COLL_ALLGATHER:
        for (uint64_t i = 0; i < cnt; i++)
            put(in, k->t, i, input(r, i, WEFT_SUM, k->t));
        if (k->kind == WEFT_COLL_ALLGATHER || r == k->root) {
            for (int j = 0; j < n; j++)
                for (uint64_t i = 0; i < cnt; i++)
                    put(want, k->t, (uint64_t)j * cnt + i, input(j, i, WEFT_SUM, k->t));
            nout = big;
            if (k->inplace) {
                memcpy(out + (uint64_t)r * cnt * es, in, cnt * es);
                sendp = out + (uint64_t)r * cnt * es;
            }
        }
        break;
    case WEFT_COLL_SCATTER:
        if (r == k->root)
            for (uint64_t i = 0; i < big; i++)
                put(in, k->t, i, input(r, i, WEFT_SUM, k->t));
        for (uint64_t i = 0; i < cnt; i++)
            put(want, k->t, i, input(k->root, (uint64_t)r * cnt + i, WEFT_SUM, k->t));
        nout = cnt;
        if (k->inplace && r == k->root) {
            memcpy(out, in, big * es);
            sendp = out;
            recvp = out + (uint64_t)r * cnt * es;
        }
        break;
    case WEFT_COLL_ALLTOALL:
        for (uint64_t i = 0; i < big; i++)
            put(in, k->t, i, input(r, i, WEFT_SUM, k->t));
        for (int j = 0; j < n; j++)
            for (uint64_t i = 0; i < cnt; i++)
                put(want, k->t, (uint64_t)j * cnt + i,
                    input(j, (uint64_t)r * cnt + i, WEFT_SUM, k->t));
        nout = big;
        if (k->inplace) {
            memcpy(out, in, big * es);
            sendp = out;
        }
        break;
    default:
        break;
    }
    a.send = sendp;
    a.recv = recvp;
    rc = weft_collective(c, &a);
    describe(k, n, what, sizeof what);
    CHECKF(rc == 0, "%s: %s: %s", what, weft_strerror(rc), weft_comm_error(c));
    if (rc == 0 && nout) {
        const char *res = recvp;
        uint64_t bad = nout;
        for (uint64_t i = 0; i < nout && bad == nout; i++)
            if (memcmp(res + i * es, want + i * es, es))
                bad = i;
        CHECKF(bad == nout, "%s: rank %d element %llu is %g, want %g", what, r,
               (unsigned long long)bad, get(res, k->t, bad), get(want, k->t, bad));
    }
    free(in);
    free(out);
    free(want);
}

static const weft_coll_kind kinds[] = {
    WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_BROADCAST,
    WEFT_COLL_GATHER, WEFT_COLL_SCATTER, WEFT_COLL_ALLGATHER, WEFT_COLL_ALLTOALL };
static const weft_algo algos[] = { WEFT_ALGO_NAIVE, WEFT_ALGO_RING, WEFT_ALGO_TREE,
                                   WEFT_ALGO_RD, WEFT_ALGO_RABENSEIFNER, WEFT_ALGO_HIER };
#define NKIND (unsigned)(sizeof kinds / sizeof kinds[0])
#define NALGO (unsigned)(sizeof algos / sizeof algos[0])

/* One collective under one algorithm: every dtype, op, placement and count,
 * then >= 4 MiB. The roots go round as if every collective and algorithm
 * ran in one sequence, so a case checks the same calls alone or with the
 * rest. */
typedef struct {
    weft_coll_kind kind;
    weft_algo algo;
} matrix_arg;

static void matrix(weft_comm *c, void *arg)
{
    const matrix_arg *m = arg;
    int n = weft_comm_size(c), seq = 0;
    uint64_t counts[] = { 0, 1, 13, (uint64_t)n * 3 + 1 };
    for (unsigned ki = 0; ki < NKIND; ki++)
        for (unsigned ai = 0; ai < NALGO; ai++)
            for (int di = 0; di < NDT; di++)
                for (int op = 0; op < (mp_is_reduction(kinds[ki]) ? WEFT_OP_COUNT : 1); op++)
                    for (int inplace = 0; inplace < 2; inplace++)
                        for (unsigned ci = 0; ci < 4; ci++) {
                            tcase k = { kinds[ki], dtypes[di], (weft_op)op, algos[ai],
                                        inplace, counts[ci], seq++ % n };
                            if (k.kind == m->kind && k.algo == m->algo)
                                run_case(c, &k);
                        }
    /* >= 4 MiB of data per call, small chunks so the pipelines fill (under
     * sanitizers at up to 4 ranks) */
    for (unsigned ki = 0; ki < NKIND && (n <= 4 || !mp_thin()); ki++)
        for (unsigned ai = 0; ai < NALGO; ai++)
            for (int inplace = 0; inplace < 2; inplace++) {
                int per_rank = kinds[ki] != WEFT_COLL_ALLREDUCE && kinds[ki] != WEFT_COLL_REDUCE &&
                               kinds[ki] != WEFT_COLL_BROADCAST;
                uint64_t cnt = per_rank ? (1u << 20) / (uint64_t)n + 3 : (1u << 20) + 3;
                tcase k = { kinds[ki], ai % 2 ? WEFT_F32 : WEFT_BF16, WEFT_SUM, algos[ai],
                            inplace, cnt, seq++ % n };
                if (k.kind == m->kind && k.algo == m->algo)
                    run_case(c, &k);
            }
}

/* the default algorithm choice */
static void automatic(weft_comm *c, void *arg)
{
    tcase k = { WEFT_COLL_ALLREDUCE, WEFT_F32, WEFT_SUM, WEFT_ALGO_AUTO, 0, 1000, 0 };
    (void)arg;
    run_case(c, &k);
}

static void barrier(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c);
    (void)arg;
    for (unsigned ai = 0; ai < NALGO; ai++) {
        if (!supported(WEFT_COLL_BARRIER, algos[ai], n))
            continue;
        weft_coll_args b = { .kind = WEFT_COLL_BARRIER, .dtype = WEFT_U8, .algo = algos[ai] };
        CHECK(weft_collective(c, &b) == 0);
    }
}

/* Point-to-point: a ring shift, even ranks sending first. */
static void p2p(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    size_t cnt = 300000;
    int32_t *s = malloc(cnt * 4), *d = malloc(cnt * 4);
    (void)arg;
    for (size_t i = 0; i < cnt; i++)
        s[i] = (int32_t)(r * 1000003 + (int)i);
    for (int iter = 0; iter < 3; iter++) {
        int rc1, rc2;
        memset(d, 0, cnt * 4);
        if (r % 2 == 0) {
            rc1 = weft_send(c, s, cnt, WEFT_I32, next);
            rc2 = weft_recv(c, d, cnt, WEFT_I32, prev);
        } else {
            rc2 = weft_recv(c, d, cnt, WEFT_I32, prev);
            rc1 = weft_send(c, s, cnt, WEFT_I32, next);
        }
        CHECK(rc1 == 0 && rc2 == 0);
        int ok = 1;
        for (size_t i = 0; i < cnt; i++)
            ok &= d[i] == (int32_t)(prev * 1000003 + (int)i);
        CHECK(ok);
    }
    free(s);
    free(d);
}

/* Split by parity, ordered by descending old rank. */
static void split(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    weft_comm *sub = NULL;
    (void)arg;
    CHECK(weft_comm_split(c, r % 2, -r, &sub) == 0 && sub);
    if (!sub)
        return;
    int members = (n - r % 2 + 1) / 2, sr = weft_comm_rank(sub);
    CHECK(weft_comm_size(sub) == members);
    /* descending old rank: the highest old rank of this parity is rank 0 */
    int highest = (n - 1) % 2 == r % 2 ? n - 1 : n - 2;
    CHECK(sr == (highest - r) / 2);
    int32_t v = r, sum = -1;
    CHECK(weft_allreduce(sub, &v, &sum, 1, WEFT_I32, WEFT_SUM) == 0);
    int32_t want = 0;
    for (int i = r % 2; i < n; i += 2)
        want += i;
    CHECK(sum == want);
    weft_comm *none = (weft_comm *)1;
    CHECK(weft_comm_split(c, r == 0 ? -1 : 0, 0, &none) == 0);
    CHECK(r == 0 ? none == NULL : none != NULL);
    if (none && r != 0)
        CHECK(weft_comm_size(none) == n - 1);
    CHECK(weft_comm_destroy(none) == 0);
    CHECK(weft_comm_destroy(sub) == 0);
}

/* Bad arguments give an error and leave the communicator usable. */
static void bad_args(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c);
    float x = 1, y = 0;
    (void)arg;
    CHECK(weft_allreduce(c, NULL, &y, 1, WEFT_F32, WEFT_SUM) == WEFT_EINVAL);
    CHECK(weft_allreduce(c, &x, &y, 1, (weft_dtype)99, WEFT_SUM) == WEFT_EINVAL);
    CHECK(weft_allreduce(c, &x, &y, 1, WEFT_F32, (weft_op)99) == WEFT_EINVAL);
    CHECK(weft_broadcast(c, &x, 1, WEFT_F32, n) == WEFT_EINVAL);
    CHECK(weft_broadcast(c, &x, 1, WEFT_F32, -1) == WEFT_EINVAL);
    CHECK(weft_allgather(c, &x, &y, SIZE_MAX / 2, WEFT_F32) == WEFT_EINVAL);
    CHECK(strstr(weft_comm_error(c), "overflow") != NULL);
    CHECK(weft_allreduce(c, &x, &y, 1, WEFT_F32, WEFT_SUM) == 0 && y == (float)n);
}

/* Rank 1 calls broadcast while rank 0 calls all-reduce: rank 0 names both.
 * The root may finish first (its bytes are gone before anyone looks) or
 * fail too (flat, on one host: every rank reads every rank's call). */
static void mismatch(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    float buf[100] = { 0 };
    (void)arg;
    if (r == 1) {
        int rc = weft_broadcast(c, buf, 10, WEFT_F32, 1);
        CHECK(rc == 0 || rc == WEFT_EMISMATCH);
        return;
    }
    int rc = weft_allreduce(c, buf, buf, 100, WEFT_F32, WEFT_SUM);
    CHECK(rc == WEFT_EMISMATCH);
    CHECKF(strstr(weft_comm_error(c), "broadcast(count=10, f32, root=1)") &&
           strstr(weft_comm_error(c), "allreduce(count=100, f32, sum)"),
           "message: %s", weft_comm_error(c));
    CHECK(weft_allreduce(c, buf, buf, 1, WEFT_F32, WEFT_SUM) == WEFT_EMISMATCH);
}

/* Host identity: two ranks per emulated host; a split keeps it. */
static void hosts(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    weft_comm *sub = NULL;
    (void)arg;
    CHECK(weft_comm_host_count(c) == (n + 1) / 2);
    for (int i = 0; i < n; i++)
        CHECK(weft_comm_host_of(c, i) == i / 2);
    CHECK(weft_comm_host_of(c, n) == WEFT_EINVAL);
    /* a default algorithm that does not span hosts: the library's own
     * exchanges (split, destroy) still run */
    CHECK(weft_comm_set_algo(c, n > 2 ? WEFT_ALGO_FLAT : WEFT_ALGO_DIRECT) == 0);
    /* odd ranks only: one per host, hosts renumbered from 0 */
    CHECK(weft_comm_split(c, r % 2 ? 0 : -1, r, &sub) == 0);
    if (sub) {
        CHECK(weft_comm_host_count(sub) == n / 2);
        CHECK(weft_comm_host_of(sub, weft_comm_rank(sub)) == weft_comm_rank(sub));
    }
    weft_comm_destroy(sub);
}

static const int sizes[] = { 1, 2, 3, 4, 5, 7, 8 };
#define NSIZE (unsigned)(sizeof sizes / sizeof sizes[0])

/* fn on each rank count of sizes[] (from 2 ranks if pairs) */
static void at_every_size(const char *what, mp_fn fn, void *arg, int pairs)
{
    for (unsigned i = 0; i < NSIZE; i++)
        if ((!pairs || sizes[i] > 1) && mp_size_kept(sizes[i]))
            CHECKF(mp_run(sizes[i], 60, fn, arg) == 0, "%s at %d ranks", what, sizes[i]);
}

static void collective(weft_coll_kind kind, weft_algo algo)
{
    matrix_arg m = { kind, algo };
    char what[64];
    snprintf(what, sizeof what, "%s %s", weft_coll_name(kind), weft_algo_name(algo));
    at_every_size(what, matrix, &m, 0);
}

/* a case per collective and algorithm: allreduce_ring, gather_tree, ... */
#define COLL_TESTS(name, kind) \
    TEST(name##_naive) { collective(kind, WEFT_ALGO_NAIVE); } \
    TEST(name##_ring) { collective(kind, WEFT_ALGO_RING); } \
    TEST(name##_tree) { collective(kind, WEFT_ALGO_TREE); } \
    TEST(name##_rd) { collective(kind, WEFT_ALGO_RD); } \
    TEST(name##_rabenseifner) { collective(kind, WEFT_ALGO_RABENSEIFNER); } \
    TEST(name##_hier) { collective(kind, WEFT_ALGO_HIER); }

COLL_TESTS(allreduce, WEFT_COLL_ALLREDUCE)
COLL_TESTS(reduce, WEFT_COLL_REDUCE)
COLL_TESTS(reduce_scatter, WEFT_COLL_REDUCE_SCATTER)
COLL_TESTS(broadcast, WEFT_COLL_BROADCAST)
COLL_TESTS(gather, WEFT_COLL_GATHER)
COLL_TESTS(scatter, WEFT_COLL_SCATTER)
COLL_TESTS(allgather, WEFT_COLL_ALLGATHER)
COLL_TESTS(alltoall, WEFT_COLL_ALLTOALL)

TEST(allreduce_auto) { at_every_size("auto all-reduce", automatic, NULL, 0); }
TEST(barrier) { at_every_size("barrier", barrier, NULL, 0); }
TEST(p2p) { at_every_size("point-to-point", p2p, NULL, 1); }
TEST(split) { at_every_size("split", split, NULL, 0); }
TEST(bad_args) { at_every_size("bad arguments", bad_args, NULL, 0); }

TEST(hosts)
{
    mp_ranks_per_host = 2;
    at_every_size("host identity", hosts, NULL, 0);
    mp_ranks_per_host = 0;
}

/* rank 1 exits early; rank 0's checks count */
TEST(mismatch) { mp_run(2, 10, mismatch, NULL); }
