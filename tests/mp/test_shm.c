/* The shared-memory transport: every collective and algorithm over rings
 * at 1..8 ranks, messages many times the ring (so it wraps, at odd byte
 * offsets, with 1-, 4- and 8-byte elements in turn), hosts mixed so that
 * some pairs share memory and some use TCP, the TCP fallback when a
 * segment cannot be made, and a peer's death, a timeout and an abort
 * noticed while a rank waits on a ring. Large messages go by single copy
 * (process_vm_readv) at 2..4 ranks, also where the receiver reduces
 * (WEFT_SHM_CMA=2), with WEFT_SHM_CMA=0, and falling back
 * to the ring where the receiver may not read (a seccomp filter). */
#include "mp.h"

#include "coll/comm.h"
#include "coll/sched/sched.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* about 60 s alone on 2 busy cores */
TEST_TIMEOUT(600);

static const weft_coll_kind kinds[] = {
    WEFT_COLL_ALLREDUCE, WEFT_COLL_BROADCAST, WEFT_COLL_REDUCE,         WEFT_COLL_GATHER,
    WEFT_COLL_SCATTER,   WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLTOALL,
};
#define NKINDS (int)(sizeof kinds / sizeof kinds[0])

static const weft_dtype dtypes[] = { WEFT_I8, WEFT_I32, WEFT_F64 };

static double val(int r, uint64_t i) { return (double)(((uint64_t)r * 7 + i * 3) % 13); }

static void put(void *b, weft_dtype t, uint64_t i, double v)
{
    if (t == WEFT_I8)
        ((int8_t *)b)[i] = (int8_t)v;
    else if (t == WEFT_I32)
        ((int32_t *)b)[i] = (int32_t)v;
    else
        ((double *)b)[i] = v;
}

static double get(const void *b, weft_dtype t, uint64_t i)
{
    if (t == WEFT_I8)
        return ((const int8_t *)b)[i];
    if (t == WEFT_I32)
        return ((const int32_t *)b)[i];
    return ((const double *)b)[i];
}

static double sum(int n, uint64_t i)
{
    double s = 0;
    for (int r = 0; r < n; r++)
        s += val(r, i);
    return s;
}

static int has_sched(weft_coll_kind k, weft_algo a, int n)
{
    weft_sched s;
    sched_params p = { .kind = k, .rank = 0, .nranks = n, .count = 7, .esize = 4 };
    sched_init(&s);
    int rc = sched_build(&s, a, &p);
    sched_free(&s);
    return rc != WEFT_ENOTSUP;
}

/* Runs one collective and returns the number of wrong elements (or -1
 * when the call failed). */
static long one(weft_comm *c, weft_coll_kind k, weft_algo a, weft_dtype t, uint64_t cnt)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c), root = n > 1 ? 1 : 0;
    size_t es = weft_dtype_size(t);
    uint64_t tot = cnt * (uint64_t)n, nout = 0;
    char *in = malloc(tot * es + 8), *out = malloc(tot * es + 8);
    long bad = 0;
    for (uint64_t i = 0; i < tot; i++)
        put(in, t, i, val(r, i));
    memset(out, 0x5a, tot * es + 8);
    weft_coll_args ar = { .kind = k, .send = in, .recv = out, .count = cnt, .dtype = t,
                          .op = WEFT_SUM, .root = root, .algo = a };
    if (k == WEFT_COLL_BROADCAST) {
        memcpy(out, in, cnt * es);
        ar.send = out;
    }
    if (weft_collective(c, &ar)) {
        free(in);
        free(out);
        return -1;
    }
    for (uint64_t i = 0; i < tot; i++) {
        double want;
        switch (k) {
        case WEFT_COLL_ALLREDUCE: if (i >= cnt) continue; want = sum(n, i); break;
        case WEFT_COLL_REDUCE: if (i >= cnt || r != root) continue; want = sum(n, i); break;
        case WEFT_COLL_BROADCAST: if (i >= cnt) continue; want = val(root, i); break;
        case WEFT_COLL_GATHER: if (r != root) continue; want = val((int)(i / cnt), i % cnt); break;
        case WEFT_COLL_SCATTER: if (i >= cnt) continue; want = val(root, (uint64_t)r * cnt + i); break;
        case WEFT_COLL_ALLGATHER: want = val((int)(i / cnt), i % cnt); break;
        case WEFT_COLL_REDUCE_SCATTER: if (i >= cnt) continue; want = sum(n, (uint64_t)r * cnt + i); break;
        default: /* alltoall */ want = val((int)(i / cnt), (uint64_t)r * cnt + i % cnt); break;
        }
        nout++;
        bad += get(out, t, i) != want;
    }
    (void)nout;
    free(in);
    free(out);
    return bad;
}

/* How this rank's links ended up: ring (1), TCP (0) or unused (-1). */
static int link_mode(weft_comm *c, int peer, int out)
{
    shm_link *l = out ? c->shm_out : c->shm_in;
    if (!l || l[peer].state == SHM_LINK_NEW)
        return -1;
    return l[peer].state == SHM_LINK_RING;
}

struct cfg {
    uint64_t count;
    int all_algos;
    int expect_ring; /* 1: same-host pairs must be rings; 0: must be TCP */
};

static void matrix(weft_comm *c, void *arg)
{
    const struct cfg *g = arg;
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    char what[160];
    for (int k = 0; k < NKINDS; k++)
        for (int a = g->all_algos ? 1 : 0; a < (g->all_algos ? WEFT_ALGO_COUNT : 1); a++) {
            if (a && !has_sched(kinds[k], (weft_algo)a, n))
                continue;
            for (int d = 0; d < 3; d++) {
                /* the element size changes from call to call, so messages
                 * of odd length precede 8-byte elements in the same ring */
                uint64_t cnt = g->count + (uint64_t)d;
                long bad = one(c, kinds[k], (weft_algo)a, dtypes[d], cnt);
                snprintf(what, sizeof what, "%s algo=%s %s count=%llu n=%d rank=%d: %ld wrong",
                         weft_coll_name(kinds[k]), weft_algo_name((weft_algo)a),
                         weft_dtype_name(dtypes[d]), (unsigned long long)cnt, n, r, bad);
                CHECKF(bad == 0, "%s (%s)", what, weft_comm_error(c));
            }
        }
    /* every pair that carried data: a ring exactly when on one host */
    int used = 0, right = 1;
    for (int p = 0; p < n; p++)
        for (int o = 0; o < 2; o++) {
            int m = link_mode(c, p, o);
            if (m < 0)
                continue;
            used++;
            int same = weft_comm_host_of(c, p) == weft_comm_host_of(c, r);
            if (same && m != g->expect_ring)
                right = 0;
        }
    CHECKF(right, "rank %d: same-host links %s rings", r, g->expect_ring ? "are not" : "are");
    /* with more than one rank on a host, something went through shm/TCP */
    int local = 0;
    for (int p = 0; p < n; p++)
        local += p != r && weft_comm_host_of(c, p) == weft_comm_host_of(c, r);
    if (local)
        CHECKF(used > 0, "rank %d: no same-host link was set up", r);
    /* every message sent to this rank has been received: each segment
     * addressed to it was mapped, and its name is gone */
    CHECKF(mp_shm_names_to(c->id, r) == 0, "rank %d: %d segment name(s) left in /dev/shm", r,
           mp_shm_names_to(c->id, r));
}

/* A segment cannot be made (the file size limit forbids it): the pair
 * falls back to TCP and everything still works. */
static void fallback(weft_comm *c, void *arg)
{
    struct rlimit rl = { 64 << 10, 64 << 10 };
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &rl);
    struct cfg g = { 1000, 0, 0 };
    matrix(c, &g);
}

/* The last rank dies after the links are up; the others, waiting on its
 * ring, must fail with WEFT_EPEER naming it, not hang. */
static void death(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    CHECK(one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, WEFT_I32, 1 << 18) == 0);
    if (r == n - 1)
        raise(SIGKILL);
    long rc = one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, WEFT_I32, 1 << 18);
    char name[32];
    snprintf(name, sizeof name, "rank %d", n - 1);
    CHECKF(rc < 0, "rank %d: a collective with a dead rank succeeded", r);
    CHECKF(strstr(weft_comm_error(c), name) != NULL, "rank %d: error does not name %s: %s", r,
           name, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), "died") != NULL, "rank %d: not a death: %s", r,
           weft_comm_error(c));
}

/* Rank 1 never joins the second all-reduce: rank 0 (aborted from another
 * thread) and rank 2 (after its timeout) must both give up. */
static void stuck(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    pthread_t th;
    CHECK(one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, WEFT_I32, 1000) == 0);
    if (r == 1) {
        struct timespec ts = { 3, 0 };
        nanosleep(&ts, NULL);
        return;
    }
    if (r == 0)
        pthread_create(&th, NULL, mp_abort_later, c);
    long rc = one(c, WEFT_COLL_ALLREDUCE, WEFT_ALGO_RING, WEFT_I32, 1000);
    CHECKF(rc < 0, "rank %d: an all-reduce without rank 1 succeeded", r);
    if (r == 0) {
        pthread_join(th, NULL);
        CHECKF(strstr(weft_comm_error(c), "abort") != NULL, "rank 0: %s", weft_comm_error(c));
    }
}

/* Single copies this rank announced, and the links it no longer tries. */
static void cma_counts(weft_comm *c, uint64_t *sent, int *off)
{
    *sent = 0;
    *off = 0;
    for (int p = 0; c->shm_out && p < weft_comm_size(c); p++) {
        *sent += c->shm_out[p].ring.cma_sent;
        *off += c->shm_out[p].state == SHM_LINK_RING && c->shm_out[p].cma_off;
    }
}

/* Every collective and algorithm with messages around and above
 * SHM_CMA_MIN (1-byte elements in pieces below it, 4 and 8 above). */
static void cma(weft_comm *c, void *arg)
{
    /* sanitizers: half the elements, still above single copy's 256 KiB
     * at one byte each */
    struct cfg g = { mp_thin() ? 300001 : 600001, 1, 1 };
    uint64_t sent;
    int off, r = weft_comm_rank(c);
    matrix(c, &g);
    cma_counts(c, &sent, &off);
    CHECKF(sent > 0, "rank %d: no single copy", r);
    CHECKF(off == 0, "rank %d: %d link(s) gave up single copy", r, off);
}

static void cma_disabled(weft_comm *c, void *arg)
{
    struct cfg g = { 300001, 0, 1 };
    uint64_t sent;
    int off;
    matrix(c, &g);
    cma_counts(c, &sent, &off);
    CHECKF(sent == 0, "rank %d: %llu single copies with WEFT_SHM_CMA=0", weft_comm_rank(c),
           (unsigned long long)sent);
}

/* Odd ranks may not read other processes: their senders fall back to the
 * ring after one refusal, the others keep single copy. */
static void cma_denied(weft_comm *c, void *arg)
{
    struct cfg g = { 300001, 1, 1 };
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    CHECKF(!(r & 1) || mp_deny_cma() == 0, "rank %d: seccomp filter not installed", r);
    matrix(c, &g);
    for (int p = 0; c->shm_out && p < n; p++) {
        const shm_link *l = &c->shm_out[p];
        if (l->state != SHM_LINK_RING || !l->ring.cma_sent)
            continue;
        CHECKF(l->cma_off == (p & 1), "rank %d to %d: single copy %s", r, p,
               l->cma_off ? "given up" : "still tried");
    }
}

TEST_INIT { unsetenv("WEFT_SHM"); }

static const struct cfg small = { 1, 1, 1 }, mid = { 3001, 1, 1 }, big = { 300001, 0, 1 };

/* every algorithm and collective, 1..8 ranks, one host */
TEST(matrix)
{
    for (int n = 1; n <= 8; n++)
        if (mp_size_kept(n))
            CHECKF(mp_run(n, 60, matrix, (void *)(n <= 5 ? &mid : &small)) == 0,
                   "matrix at %d ranks", n);
}

/* a 64 KiB ring: messages wrap it many times */
TEST(small_ring)
{
    setenv("WEFT_SHM_RING", "65536", 1);
    CHECKF(mp_run(3, 60, matrix, (void *)&big) == 0, "wrapping at 3 ranks");
    CHECKF(mp_run(5, 60, matrix, (void *)&mid) == 0, "small ring at 5 ranks");
    unsetenv("WEFT_SHM_RING");
}

TEST(big_messages) { CHECKF(mp_run(4, 60, matrix, (void *)&big) == 0, "big messages at 4 ranks"); }

/* hosts {0,1} {2,3} {4}: rings inside a host, TCP between */
TEST(mixed_hosts)
{
    mp_ranks_per_host = 2;
    CHECKF(mp_run(5, 60, matrix, (void *)&mid) == 0, "mixed hosts at 5 ranks");
    mp_ranks_per_host = 3;
    CHECKF(mp_run(7, 60, matrix, (void *)&small) == 0, "mixed hosts at 7 ranks");
    mp_ranks_per_host = 0;
}

/* WEFT_SHM=0: the same over TCP */
TEST(shm_off)
{
    setenv("WEFT_SHM", "0", 1);
    struct cfg tcp = { 3001, 0, 0 };
    CHECKF(mp_run(3, 60, matrix, &tcp) == 0, "WEFT_SHM=0");
    unsetenv("WEFT_SHM");
}

TEST(fallback) { CHECKF(mp_run(3, 60, fallback, NULL) == 0, "fallback to TCP"); }

/* single copy for large messages, off, and refused by the receiver */
TEST(cma) { CHECKF(mp_run(3, 60, cma, NULL) == 0, "single copy, not where reducing"); }

TEST(cma_reducing)
{
    setenv("WEFT_SHM_CMA", "2", 1); /* also RECV_REDUCE */
    for (int n = 2; n <= 4; n++)
        if (mp_size_kept(n))
            CHECKF(mp_run(n, 60, cma, NULL) == 0, "single copy at %d ranks", n);
    unsetenv("WEFT_SHM_CMA");
}

TEST(cma_denied)
{
    setenv("WEFT_SHM_CMA", "2", 1);
    CHECKF(mp_run(4, 60, cma_denied, NULL) == 0, "single copy refused");
    unsetenv("WEFT_SHM_CMA");
}

TEST(cma_disabled)
{
    setenv("WEFT_SHM_CMA", "0", 1);
    CHECKF(mp_run(3, 60, cma_disabled, NULL) == 0, "WEFT_SHM_CMA=0");
    unsetenv("WEFT_SHM_CMA");
}

/* failures while waiting on rings */
TEST(death) { CHECKF(mp_run(4, 60, death, NULL) <= 1, "peer death"); }
TEST(stuck) { CHECKF(mp_run(3, 1.0, stuck, NULL) == 0, "abort and timeout"); }
