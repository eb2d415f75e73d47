/* Rabenseifner and hierarchical schedules, all ranks run in the virtual
 * executor: right results on every rank for p = 1..16, many counts, in
 * place and not, eager and rendezvous sends, no racing ops; bit-identical
 * float results on every rank; and the bytes each rank (and each host)
 * sends, against the algorithms' formulas. */
#include "test.h"
#include "coll/sched/two_level.h"
#include "coll/algo.h"
#include "coll/sched/vexec.h"
#include "coll/sched/nccl.h"

#include <stdint.h>
#include <string.h>

#define MAXP 16

/* Small integers: every sum is exact in any order, so any slip shows. */
static float ival(int r, uint64_t i) { return (float)((r * 7 + (int)(i % 101) * 3) % 11) - 5.0f; }

/* Values whose float sum depends on the order of additions. */
static float fval(int r, uint64_t i)
{
    uint32_t x = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (float)(x % 100000u) * 1e-3f + (float)(x % 7u) * 1e3f;
}

typedef struct {
    weft_coll_kind kind;
    int algo; /* WEFT_ALGO_RABENSEIFNER or WEFT_ALGO_HIER */
    int p, root, inplace, mode;
    uint64_t count, chunk;
    const int32_t *host;
    int exact;  /* 1: integer-valued inputs, compared with the serial sum */
    const sched_nccl *nccl; /* set: algo is NCCL_RING or NCCL_TREE below */
} scase;

enum { NCCL_RING = -1, NCCL_TREE = -2 }; /* the simulator-only generators */

typedef struct {
    weft_sched s[MAXP];
    vexec_mem m[MAXP];
    unsigned char *alloc[MAXP][SB_COUNT];
    vexec_stats st;
    char why[400];
} srun;

static float in_val(const scase *c, int r, uint64_t i) { return c->exact ? ival(r, i) : fval(r, i); }

static int build(const scase *c, int r, weft_sched *s)
{
    sched_params sp = { .kind = c->kind, .rank = r, .nranks = c->p, .root = c->root,
                        .count = c->count, .esize = 4, .inplace = c->inplace,
                        .chunk_bytes = c->chunk, .host = c->host };
    sched_init(s);
    if (c->nccl) {
        int rc = c->algo == NCCL_RING ? sched_nccl_ring(s, &sp, c->nccl)
                                      : sched_nccl_tree(s, &sp, c->nccl);
        sched_end_round(s);
        return rc ? rc : s->err;
    }
    if (c->algo != WEFT_ALGO_HIER && c->algo != WEFT_ALGO_RABENSEIFNER)
        return sched_build(s, (weft_algo)c->algo, &sp); /* through the table */
    int rc = c->algo == WEFT_ALGO_HIER ? sched_hier(s, &sp) : sched_rabenseifner(s, &sp);
    sched_end_round(s);
    return rc ? rc : s->err;
}

static void put_f(unsigned char *b, uint64_t i, float v) { memcpy(b + i * 4, &v, 4); }
static float get_f(const unsigned char *b, uint64_t i)
{
    float v;
    memcpy(&v, b + i * 4, 4);
    return v;
}

static void release(srun *x, int p)
{
    for (int r = 0; r < p; r++) {
        sched_free(&x->s[r]);
        for (int b = 0; b < SB_COUNT; b++)
            free(x->alloc[r][b]);
    }
}

/* Sets up buffers the way coll.c hands them over, including the aliasing
 * of in-place reduce-scatter (recv = send + r*count) and all-gather
 * (send = recv + r*count). */
static int setup(const scase *c, srun *x)
{
    int p = c->p;
    uint64_t n = c->count * 4, all = (uint64_t)p * n;
    memset(x, 0, sizeof *x);
    for (int r = 0; r < p; r++) {
        int rc = build(c, r, &x->s[r]);
        if (rc) {
            snprintf(x->why, sizeof x->why, "rank %d: generator returned %d", r, rc);
            return -1;
        }
        vexec_mem *m = &x->m[r];
        uint64_t ssz = n, rsz = n;
        if (c->kind == WEFT_COLL_REDUCE_SCATTER)
            ssz = all;
        if (c->kind == WEFT_COLL_ALLGATHER)
            rsz = all;
        m->size[SB_TMP] = x->s[r].tmp_bytes;
        x->alloc[r][SB_TMP] = m->buf[SB_TMP] = malloc(m->size[SB_TMP] + 1);
        if (c->kind == WEFT_COLL_BROADCAST) {
            x->alloc[r][SB_RECV] = m->buf[SB_RECV] = malloc(n + 1);
            m->buf[SB_SEND] = m->buf[SB_RECV];
            m->size[SB_SEND] = m->size[SB_RECV] = n;
            for (uint64_t i = 0; i < c->count; i++)
                put_f(m->buf[SB_RECV], i, r == c->root ? in_val(c, r, i) : -1e9f);
            continue;
        }
        int recv_absent = c->kind == WEFT_COLL_REDUCE && r != c->root && !c->inplace;
        if (c->inplace) {
            uint64_t big = ssz > rsz ? ssz : rsz;
            unsigned char *b = x->alloc[r][SB_RECV] = malloc(big + 1);
            m->buf[SB_SEND] = b;
            m->buf[SB_RECV] = b;
            if (c->kind == WEFT_COLL_REDUCE_SCATTER)
                m->buf[SB_RECV] = b + (uint64_t)r * n;
            if (c->kind == WEFT_COLL_ALLGATHER)
                m->buf[SB_SEND] = b + (uint64_t)r * n;
        } else {
            x->alloc[r][SB_SEND] = m->buf[SB_SEND] = malloc(ssz + 1);
            if (!recv_absent) {
                x->alloc[r][SB_RECV] = m->buf[SB_RECV] = malloc(rsz + 1);
                for (uint64_t i = 0; i < rsz / 4; i++)
                    put_f(m->buf[SB_RECV], i, -1e9f);
            }
        }
        m->size[SB_SEND] = ssz;
        m->size[SB_RECV] = recv_absent ? 0 : rsz;
        for (uint64_t i = 0; i < ssz / 4; i++)
            put_f(m->buf[SB_SEND], i, in_val(c, r, i));
    }
    return 0;
}

/* The expected element i of rank r's result (exact inputs). */
static float want_at(const scase *c, int r, uint64_t i)
{
    float w = 0;
    switch (c->kind) {
    case WEFT_COLL_BROADCAST: return ival(c->root, i);
    case WEFT_COLL_ALLGATHER: return ival((int)(i / c->count), i % c->count);
    case WEFT_COLL_REDUCE_SCATTER:
        for (int q = 0; q < c->p; q++)
            w += ival(q, (uint64_t)r * c->count + i);
        return w;
    default:
        for (int q = 0; q < c->p; q++)
            w += ival(q, i);
        return w;
    }
}

static int run_case(const scase *c, srun *x)
{
    int p = c->p, rc = setup(c, x);
    if (rc)
        return rc;
    vexec_opts o = { .mode = c->mode, .check_hazards = 1 };
    if ((rc = vexec_run(p, x->s, x->m, &o, &x->st))) {
        snprintf(x->why, sizeof x->why, "vexec: %s", x->st.err);
        return rc;
    }
    uint64_t nout = c->kind == WEFT_COLL_ALLGATHER ? (uint64_t)p * c->count : c->count;
    for (int r = 0; r < p; r++) {
        if (c->kind == WEFT_COLL_REDUCE && r != c->root)
            continue;
        const unsigned char *res = x->m[r].buf[SB_RECV];
        for (uint64_t i = 0; i < nout; i++) {
            float got = get_f(res, i);
            if (c->exact) {
                float want = want_at(c, r, i);
                if (got != want) {
                    snprintf(x->why, sizeof x->why, "rank %d element %llu: got %g want %g", r,
                             (unsigned long long)i, got, want);
                    return -1;
                }
            } else if (memcmp(res + i * 4, x->m[0].buf[SB_RECV] + i * 4, 4)) {
                snprintf(x->why, sizeof x->why,
                         "rank %d element %llu: %.9g differs from rank 0's %.9g", r,
                         (unsigned long long)i, got, get_f(x->m[0].buf[SB_RECV], i));
                return -1;
            }
        }
    }
    return 0;
}

static int check(const scase *c, const char *layout)
{
    srun *x = malloc(sizeof *x);
    int rc = run_case(c, x);
    CHECKF(rc == 0, "%s %s p=%d count=%llu root=%d inplace=%d mode=%d chunk=%llu hosts=%s: %s",
           weft_algo_name((weft_algo)c->algo), weft_coll_name(c->kind), c->p,
           (unsigned long long)c->count, c->root, c->inplace, c->mode,
           (unsigned long long)c->chunk, layout, x->why);
    release(x, c->p);
    free(x);
    return rc;
}

static const uint64_t counts[] = { 0, 1, 2, 7, 13, 31, 101, 1000, 4099 };
#define NCOUNTS (sizeof counts / sizeof counts[0])

TEST(rabenseifner)
{
    static const weft_coll_kind kinds[] = { WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE_SCATTER,
                                            WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE,
                                            WEFT_COLL_BROADCAST };
    int fails = 0;
    for (unsigned k = 0; k < 5; k++)
        for (int p = 1; p <= MAXP; p++)
            for (unsigned ci = 0; ci < NCOUNTS; ci++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    uint64_t cnt = counts[ci];
                    int per_rank = kinds[k] == WEFT_COLL_REDUCE_SCATTER ||
                                   kinds[k] == WEFT_COLL_ALLGATHER;
                    if (per_rank && cnt > 101)
                        cnt = cnt / (uint64_t)p + 1;
                    scase c = { .kind = kinds[k], .algo = WEFT_ALGO_RABENSEIFNER, .p = p,
                                .root = (int)(ci * 3 + (unsigned)inplace) % p,
                                .inplace = inplace, .mode = (int)((ci + (unsigned)p) % 2),
                                .count = cnt, .exact = 1 };
                    if (fails < 5 && check(&c, "-"))
                        fails++;
                }
    /* generators that cannot do a kind say so */
    weft_sched s;
    sched_params sp = { .kind = WEFT_COLL_ALLTOALL, .nranks = 4, .count = 3, .esize = 4 };
    sched_init(&s);
    CHECK(sched_rabenseifner(&s, &sp) == WEFT_ENOTSUP);
    sp.kind = WEFT_COLL_GATHER;
    CHECK(sched_rabenseifner(&s, &sp) == WEFT_ENOTSUP);
    CHECK(sched_hier(&s, &sp) == WEFT_ENOTSUP);
    sched_free(&s);
}

/* Host layouts for p ranks; returns how many were filled. */
static int layouts(int p, int32_t hosts[][MAXP], const char *names[])
{
    int k = 0;
    for (int r = 0; r < p; r++) hosts[k][r] = 0;             /* one host */
    names[k++] = "one";
    for (int r = 0; r < p; r++) hosts[k][r] = r < (p + 2) / 3 ? 0 : 1; /* 2 uneven */
    names[k++] = "two-uneven";
    for (int r = 0; r < p; r++) hosts[k][r] = r;             /* one rank per host */
    names[k++] = "each";
    for (int r = 0; r < p; r++) hosts[k][r] = r / 3;         /* 3 per host, last short */
    names[k++] = "threes";
    for (int r = 0; r < p; r++) hosts[k][r] = r % 3 == 0 ? 0 : r % 3 == 1 ? 1 : 2; /* interleaved */
    names[k++] = "interleaved";
    /* first host has one rank, the rest share a second; then ranks spread
     * over 4 hosts of sizes 1, 2, 3, rest */
    for (int r = 0; r < p; r++) hosts[k][r] = r == 0 ? 0 : 1;
    names[k++] = "one-and-rest";
    for (int r = 0; r < p; r++) hosts[k][r] = r < 1 ? 0 : r < 3 ? 1 : r < 6 ? 2 : 3;
    names[k++] = "1-2-3-rest";
    /* host indices must be by first appearance; keep them so */
    for (int j = 0; j < k; j++) {
        int map[MAXP], next = 0;
        for (int i = 0; i < MAXP; i++) map[i] = -1;
        for (int r = 0; r < p; r++) {
            if (map[hosts[j][r]] < 0)
                map[hosts[j][r]] = next++;
            hosts[j][r] = map[hosts[j][r]];
        }
    }
    return k;
}

TEST(hier)
{
    static const weft_coll_kind kinds[] = { WEFT_COLL_ALLREDUCE, WEFT_COLL_BROADCAST,
                                            WEFT_COLL_REDUCE };
    int32_t hosts[8][MAXP];
    const char *names[8];
    int fails = 0;
    for (int p = 1; p <= MAXP; p++) {
        int nl = layouts(p, hosts, names);
        for (int l = 0; l < nl; l++)
            for (unsigned k = 0; k < 3; k++)
                for (unsigned ci = 0; ci < NCOUNTS; ci++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        if (k > 0 && ci % 2 && p > 4)
                            continue; /* rooted kinds: fewer counts */
                        scase c = { .kind = kinds[k], .algo = WEFT_ALGO_HIER, .p = p,
                                    .root = (int)(ci * 5 + (unsigned)l) % p,
                                    .inplace = inplace,
                                    .mode = (int)((ci + (unsigned)l + (unsigned)inplace) % 2),
                                    .count = counts[ci], .chunk = ci % 2 ? 16 : 0,
                                    .host = hosts[l], .exact = 1 };
                        if (fails < 5 && check(&c, names[l]))
                            fails++;
                    }
    }
    /* no host information at all: the ring */
    scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_HIER, .p = 5, .count = 33,
                .exact = 1 };
    check(&c, "NULL");
}

/* Orders of floating-point additions differ between elements but not
 * between ranks: every rank's result must be the same bits. */
TEST(bit_identical)
{
    int32_t hosts[8][MAXP];
    const char *names[8];
    for (int p = 2; p <= MAXP; p++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_RABENSEIFNER, .p = p,
                        .inplace = inplace, .count = 997, .mode = p % 2 };
            check(&c, "-");
        }
        int nl = layouts(p, hosts, names);
        for (int l = 0; l < nl; l++) {
            scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_HIER, .p = p,
                        .inplace = l % 2, .count = 997, .mode = l % 2, .host = hosts[l] };
            check(&c, names[l]);
        }
    }
}

/* Bytes rank r's schedule sends, in all and to ranks on other hosts. */
static void sent(const weft_sched *s, int r, const int32_t *host, uint64_t *all, uint64_t *out)
{
    *all = *out = 0;
    for (uint32_t i = 0; i < s->nops; i++)
        if (s->ops[i].kind == SOP_SEND) {
            *all += s->ops[i].len;
            if (host && host[s->ops[i].peer] != host[r])
                *out += s->ops[i].len;
        }
}

TEST(bytes)
{
    /* Rabenseifner all-reduce: 2(pw-1)/pw of the data per rank in the
     * exchange, plus the whole data for the ranks that fold in or out;
     * 2 log2 pw rounds (+2 when folded). */
    int bad = 0, bad_rounds = 0;
    for (int p = 2; p <= MAXP; p++) {
        int pw = 1, lg = 0;
        while (pw * 2 <= p) {
            pw *= 2;
            lg++;
        }
        int rem = p - pw;
        uint64_t count = 16 * 9 * 5 * 7 * 11 * 13, n = count * 4;
        for (int r = 0; r < p; r++) {
            scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_RABENSEIFNER, .p = p,
                        .count = count };
            weft_sched s;
            uint64_t all, out;
            build(&c, r, &s);
            sent(&s, r, NULL, &all, &out);
            uint64_t want = 2 * (uint64_t)(pw - 1) * (n / (uint64_t)pw);
            if (r < 2 * rem)
                want = r % 2 ? want + n : n;
            bad += all != want;
            uint32_t rounds = (uint32_t)(r < 2 * rem ? (r % 2 ? 2 * lg + 2 : 2) : 2 * lg);
            bad_rounds += s.nrounds != rounds;
            if (all != want || s.nrounds != rounds)
                fprintf(stderr, "p=%d rank %d: %llu bytes (want %llu), %u rounds (want %u)\n",
                        p, r, (unsigned long long)all, (unsigned long long)want, s.nrounds,
                        rounds);
            /* reduce-scatter and all-gather of blocks of count elements:
             * (pw-1) blocks' worth for a power of two */
            if (rem == 0) {
                c.count = 1000;
                c.kind = WEFT_COLL_REDUCE_SCATTER;
                sched_free(&s);
                build(&c, r, &s);
                sent(&s, r, NULL, &all, &out);
                bad += all != (uint64_t)(p - 1) * 4000;
                c.kind = WEFT_COLL_ALLGATHER;
                sched_free(&s);
                build(&c, r, &s);
                sent(&s, r, NULL, &all, &out);
                bad += all != (uint64_t)(p - 1) * 4000;
                /* the root of a broadcast scatters, then all-gathers:
                 * 2(p-1)/p; the root of a reduce only halves: (p-1)/p */
                c.count = count;
                c.kind = WEFT_COLL_BROADCAST;
                sched_free(&s);
                build(&c, r, &s);
                sent(&s, r, NULL, &all, &out);
                bad += r == 0 && all != 2 * (uint64_t)(p - 1) * (n / (uint64_t)p);
                c.kind = WEFT_COLL_REDUCE;
                sched_free(&s);
                build(&c, r, &s);
                sent(&s, r, NULL, &all, &out);
                bad += r == 0 && all != (uint64_t)(p - 1) * (n / (uint64_t)p);
            }
            sched_free(&s);
        }
    }
    CHECKF(bad == 0, "%d ranks sent other than the formula", bad);
    CHECKF(bad_rounds == 0, "%d ranks with other than 2 log2 p rounds", bad_rounds);

    /* Hierarchical all-reduce: every host sends exactly 2(H-1)/H of the
     * data to other hosts, and the per-rank shares on a host differ by at
     * most one slice; broadcast crosses each of the H-1 host boundaries once. */
    int32_t hosts[8][MAXP];
    const char *names[8];
    int bad_host = 0, bad_bcast = 0;
    for (int p = 2; p <= MAXP; p++) {
        int nl = layouts(p, hosts, names);
        for (int l = 0; l < nl; l++) {
            int H = 0;
            for (int r = 0; r < p; r++)
                H = hosts[l][r] + 1 > H ? hosts[l][r] + 1 : H;
            if (H < 2)
                continue;
            uint64_t count = 720720ull * 720720ull, n = count * 4; /* lcm(1..16)^2 */
            uint64_t host_out[MAXP] = { 0 }, bcast_out = 0;
            for (int r = 0; r < p; r++) {
                scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_HIER, .p = p,
                            .count = count, .host = hosts[l] };
                weft_sched s;
                uint64_t all, out;
                build(&c, r, &s);
                sent(&s, r, hosts[l], &all, &out);
                host_out[hosts[l][r]] += out;
                sched_free(&s);
                c.kind = WEFT_COLL_BROADCAST;
                c.root = p - 1;
                c.count = 10007;
                c.chunk = 4096;
                build(&c, r, &s);
                sent(&s, r, hosts[l], &all, &out);
                bcast_out += out;
                sched_free(&s);
            }
            for (int g = 0; g < H; g++)
                if (host_out[g] != 2 * (uint64_t)(H - 1) * (n / (uint64_t)H)) {
                    bad_host++;
                    fprintf(stderr, "p=%d hosts=%s host %d sends %llu off-host, want %llu\n",
                            p, names[l], g, (unsigned long long)host_out[g],
                            (unsigned long long)(2 * (uint64_t)(H - 1) * (n / (uint64_t)H)));
                }
            bad_bcast += bcast_out != (uint64_t)(H - 1) * 10007 * 4;
        }
    }
    CHECKF(bad_host == 0, "%d hosts sent other than 2(H-1)/H of the data off-host", bad_host);
    CHECKF(bad_bcast == 0, "%d broadcasts crossed host boundaries other than H-1 times",
           bad_bcast);
}

/* A big all-reduce through small chunks, with hosts, at the largest p. */
TEST(big)
{
    int32_t hosts[8][MAXP];
    const char *names[8];
    layouts(MAXP, hosts, names);
    scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = WEFT_ALGO_RABENSEIFNER, .p = 13,
                .count = 300007, .exact = 1, .mode = VEXEC_RENDEZVOUS };
    check(&c, "-");
    c.algo = WEFT_ALGO_HIER;
    c.p = MAXP;
    c.host = hosts[6];
    c.count = 200003;
    check(&c, names[6]);
    c.kind = WEFT_COLL_REDUCE;
    c.root = 5;
    c.chunk = 4096;
    check(&c, names[6]);
}


/* The table's kinds column says what each generator does: sched_build
 * refuses the rest with WEFT_ENOTSUP, and every kind it claims that the
 * checker above can set up builds and gives the right result on every
 * rank (the other claimed kinds at least build). */
TEST(table_kinds)
{
    static const int32_t two_hosts[MAXP] = { 0, 0, 0, 0, 1, 1, 1, 1 };
    const weft_coll_kind runnable[] = { WEFT_COLL_ALLREDUCE, WEFT_COLL_BROADCAST,
                                        WEFT_COLL_REDUCE, WEFT_COLL_ALLGATHER,
                                        WEFT_COLL_REDUCE_SCATTER };
    for (int a = 0; a < WEFT_ALGO_COUNT; a++) {
        if (a == WEFT_ALGO_AUTO || coll_algo_of((weft_algo)a)->run)
            continue; /* no schedule: direct, flat */
        for (int k = WEFT_COLL_BARRIER; k < WEFT_COLL_KIND_COUNT; k++) {
            for (int p = 2; p <= 8; p += 3) {
                sched_params sp = { .kind = (weft_coll_kind)k, .rank = p - 1, .nranks = p,
                                    .count = 7, .esize = 4,
                                    .host = a == WEFT_ALGO_HIER ? two_hosts : NULL };
                weft_sched s;
                sched_init(&s);
                int rc = sched_build(&s, (weft_algo)a, &sp);
                sched_free(&s);
                if (coll_algo_does((weft_algo)a, (weft_coll_kind)k))
                    CHECKF(rc == 0, "%s claims %s but building it at p=%d gave %s",
                           weft_algo_name((weft_algo)a), weft_coll_name((weft_coll_kind)k), p,
                           weft_strerror(rc));
                else
                    CHECKF(rc == WEFT_ENOTSUP, "%s %s at p=%d: %s, not refused",
                           weft_algo_name((weft_algo)a), weft_coll_name((weft_coll_kind)k), p,
                           weft_strerror(rc));
            }
        }
        for (size_t k = 0; k < sizeof runnable / sizeof runnable[0]; k++) {
            if (!coll_algo_does((weft_algo)a, runnable[k]))
                continue;
            for (int p = 2; p <= MAXP; p += 3) {
                scase c = { .kind = runnable[k], .algo = a, .p = p, .count = 13,
                            .root = p - 1, .exact = 1, .mode = VEXEC_RENDEZVOUS,
                            .host = a == WEFT_ALGO_HIER ? two_hosts : NULL };
                check(&c, a == WEFT_ALGO_HIER ? "two hosts" : "-");
            }
        }
    }
}

/* NCCL's rings and trees (simulator-only): right results on every rank
 * for p = 1..16, nodes of 1..6 ranks (a last node with fewer), 1..4
 * channels, every count, in place and not, tiny chunks (deep pipelines),
 * eager and rendezvous. */
TEST(nccl_structures)
{
    for (int algo = NCCL_TREE; algo <= NCCL_RING; algo++)
        for (int p = 1; p <= MAXP; p++)
            for (int k = 1; k <= 6; k++)
                for (int ch = 1; ch <= 4; ch++) {
                    sched_nccl o = { .channels = ch, .ranks_per_node = k };
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                        if (counts[ci] > 1000 && (ch > 2 || k % 2))
                            continue; /* keep the test short */
                        scase c = { .kind = WEFT_COLL_ALLREDUCE, .algo = algo, .p = p,
                                    .count = counts[ci], .exact = 1, .nccl = &o,
                                    .inplace = (int)(ci % 2), .chunk = ci % 3 ? 16 : 0,
                                    .mode = ci % 2 ? VEXEC_EAGER : VEXEC_RENDEZVOUS };
                        if (check(&c, algo == NCCL_RING ? "nccl-ring" : "nccl-tree"))
                            return;
                    }
                }
    /* they are not the library's: the table's dispatch has no entry for them */
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
        CHECK(strcmp(weft_algo_name((weft_algo)a), "nccl-ring") &&
              strcmp(weft_algo_name((weft_algo)a), "nccl-tree"));
    weft_algo x;
    CHECK(weft_algo_parse("nccl-tree", &x) != 0);
}
