/* The direct algorithm (single-copy reads between ranks on one host):
 * all-reduce at 1..8 ranks for every dtype and op, counts 0, 1, below the
 * rank count, odd, and several MiB (many pieces), in place and not;
 * reduce-scatter, all-gather, broadcast, reduce, gather, scatter,
 * all-to-all and barrier, in place where the API allows; repeated calls on moving
 * buffers; the ring taken by every rank when some may not read other
 * processes (a seccomp filter); a rank killed mid-operation, one that
 * never comes (abort, timeout); the
 * layouts it does not do (ranks on two hosts, shared memory off) refused
 * with WEFT_ENOTSUP, leaving the
 * communicator usable; the cost model; nothing left in /dev/shm. */
#include "mp.h"

#include "coll/comm.h"
#include "coll/local/direct.h"
#include "coll/reduce.h"
#include "core/half.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Small integers (products of ones and twos): exact in every dtype and
 * whatever the order of the reduction, so results compare bytewise. */
static double val(int r, uint64_t i, weft_op op)
{
    if (op == WEFT_PROD)
        return (double)(1 + ((uint64_t)r + i) % 2);
    return (double)(((uint64_t)r * 7 + i * 3) % 5) - 1;
}

static void put(void *b, weft_dtype t, uint64_t i, double v)
{
    switch (t) {
    case WEFT_F32: ((float *)b)[i] = (float)v; break;
    case WEFT_F64: ((double *)b)[i] = v; break;
    case WEFT_F16: ((uint16_t *)b)[i] = f32_to_f16((float)v); break;
    case WEFT_BF16: ((uint16_t *)b)[i] = f32_to_bf16((float)v); break;
    case WEFT_I8: ((int8_t *)b)[i] = (int8_t)v; break;
    case WEFT_U8: ((uint8_t *)b)[i] = (uint8_t)(int)v; break;
    case WEFT_I32: ((int32_t *)b)[i] = (int32_t)v; break;
    default: ((int64_t *)b)[i] = (int64_t)v; break;
    }
}

static void fill(void *b, weft_dtype t, int r, uint64_t from, uint64_t n, weft_op op)
{
    for (uint64_t i = 0; i < n; i++)
        put(b, t, i, val(r, from + i, op));
}

/* Elements [from, from + n) of the reduction over n ranks, as the kernels
 * compute it in rank order. */
static void *reference(int nr, weft_dtype t, weft_op op, uint64_t from, uint64_t n)
{
    size_t es = weft_dtype_size(t);
    char *ref = malloc(n * es + 1), *x = malloc(n * es + 1);
    fill(ref, t, 0, from, n, op);
    for (int r = 1; r < nr; r++) {
        fill(x, t, r, from, n, op);
        reduce_apply(ref, ref, x, n, t, op);
    }
    if (op == WEFT_AVG)
        reduce_avg_finish(ref, n, t, nr);
    free(x);
    return ref;
}

static int coll(weft_comm *c, weft_coll_kind k, const void *s, void *rv, uint64_t cnt,
                weft_dtype t, weft_op op, int root, weft_algo a)
{
    weft_coll_args ar = { .kind = k, .send = s, .recv = rv, .count = cnt, .dtype = t,
                          .op = op, .root = root, .algo = a };
    return weft_collective(c, &ar);
}

/* One all-reduce; returns 0 when right, else 1 (the call failed or the
 * result is wrong). */
static int allreduce(weft_comm *c, weft_dtype t, weft_op op, uint64_t cnt, int inplace)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *in = malloc(cnt * es + 8), *out = malloc(cnt * es + 8);
    fill(in, t, r, 0, cnt, op);
    memset(out, 0x5a, cnt * es + 8);
    if (inplace)
        memcpy(out, in, cnt * es);
    int rc = coll(c, WEFT_COLL_ALLREDUCE, inplace ? out : in, out, cnt, t, op, 0,
                  WEFT_ALGO_DIRECT);
    char *ref = reference(n, t, op, 0, cnt);
    int bad = rc != 0 || memcmp(out, ref, cnt * es) != 0 || (uint8_t)out[cnt * es] != 0x5a;
    if (bad)
        fprintf(stderr, "rank %d/%d: allreduce %s %s count=%llu inplace=%d: rc %d %s\n", r, n,
                weft_dtype_name(t), weft_op_name(op), (unsigned long long)cnt, inplace, rc,
                rc ? weft_comm_error(c) : "wrong result");
    free(in);
    free(out);
    free(ref);
    return bad;
}

static int reduce_scatter(weft_comm *c, weft_dtype t, weft_op op, uint64_t cnt)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *in = malloc(cnt * n * es + 8), *out = malloc(cnt * es + 8);
    fill(in, t, r, 0, cnt * n, op);
    memset(out, 0x5a, cnt * es + 8);
    int rc = coll(c, WEFT_COLL_REDUCE_SCATTER, in, out, cnt, t, op, 0, WEFT_ALGO_DIRECT);
    char *ref = reference(n, t, op, (uint64_t)r * cnt, cnt);
    int bad = rc != 0 || memcmp(out, ref, cnt * es) != 0 || (uint8_t)out[cnt * es] != 0x5a;
    /* in place: the result lands at the start of the send buffer */
    fill(in, t, r, 0, cnt * n, op);
    rc = coll(c, WEFT_COLL_REDUCE_SCATTER, in, in, cnt, t, op, 0, WEFT_ALGO_DIRECT);
    bad |= rc != 0 || memcmp(in, ref, cnt * es) != 0;
    if (bad)
        fprintf(stderr, "rank %d/%d: reduce_scatter %s %s count=%llu: %s\n", r, n,
                weft_dtype_name(t), weft_op_name(op), (unsigned long long)cnt,
                rc ? weft_comm_error(c) : "wrong result");
    free(in);
    free(out);
    free(ref);
    return bad;
}

static int allgather(weft_comm *c, weft_dtype t, uint64_t cnt, int inplace)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *in = malloc(cnt * es + 8), *out = malloc(cnt * n * es + 8);
    char *want = malloc(cnt * n * es + 8);
    for (int q = 0; q < n; q++)
        fill(want + (size_t)q * cnt * es, t, q, 0, cnt, WEFT_SUM);
    fill(in, t, r, 0, cnt, WEFT_SUM);
    memset(out, 0x5a, cnt * n * es + 8);
    const void *s = in;
    if (inplace == 1) { /* this rank's block of the output */
        memcpy(out + (size_t)r * cnt * es, in, cnt * es);
        s = out + (size_t)r * cnt * es;
    } else if (inplace == 2 && n > 1) { /* elsewhere in the output */
        int q = (r + 1) % n;
        memcpy(out + (size_t)q * cnt * es, in, cnt * es);
        s = out + (size_t)q * cnt * es;
    }
    int rc = coll(c, WEFT_COLL_ALLGATHER, s, out, cnt, t, 0, 0, WEFT_ALGO_DIRECT);
    int bad = rc != 0 || memcmp(out, want, cnt * n * es) != 0 ||
              (uint8_t)out[cnt * n * es] != 0x5a;
    if (bad)
        fprintf(stderr, "rank %d/%d: allgather %s count=%llu inplace=%d: %s\n", r, n,
                weft_dtype_name(t), (unsigned long long)cnt, inplace,
                rc ? weft_comm_error(c) : "wrong result");
    free(in);
    free(out);
    free(want);
    return bad;
}

static int broadcast(weft_comm *c, weft_dtype t, uint64_t cnt, int root)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t);
    char *buf = malloc(cnt * es + 8), *want = malloc(cnt * es + 8);
    fill(want, t, root, 0, cnt, WEFT_SUM);
    memset(buf, 0x5a, cnt * es + 8);
    if (r == root)
        memcpy(buf, want, cnt * es);
    int rc = coll(c, WEFT_COLL_BROADCAST, buf, buf, cnt, t, 0, root, WEFT_ALGO_DIRECT);
    int bad = rc != 0 || memcmp(buf, want, cnt * es) != 0 || (uint8_t)buf[cnt * es] != 0x5a;
    if (bad)
        fprintf(stderr, "rank %d/%d: broadcast %s count=%llu root=%d: %s\n", r, n,
                weft_dtype_name(t), (unsigned long long)cnt, root,
                rc ? weft_comm_error(c) : "wrong result");
    free(buf);
    free(want);
    return bad;
}

/* reduce, gather, scatter, all-to-all at root / in place as given;
 * returns 0 when right. */
static int rooted(weft_comm *c, weft_coll_kind k, weft_dtype t, weft_op op, uint64_t cnt,
                  int root, int inplace)
{
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    size_t es = weft_dtype_size(t), blk = cnt * es, all = blk * (size_t)n;
    char *in = malloc(all + 8), *out = malloc(all + 8), *want = malloc(all + 8);
    const void *s = in;
    size_t check = 0; /* bytes of out to compare */
    memset(out, 0x5a, all + 8);
    switch (k) {
    case WEFT_COLL_REDUCE: {
        fill(in, t, r, 0, cnt, op);
        char *ref = reference(n, t, op, 0, cnt);
        memcpy(want, ref, blk);
        free(ref);
        if (inplace && r == root) {
            memcpy(out, in, blk);
            s = out;
        }
        check = r == root ? blk : 0;
        break;
    }
    case WEFT_COLL_GATHER:
        fill(in, t, r, 0, cnt, op);
        for (int q = 0; q < n; q++)
            fill(want + (size_t)q * blk, t, q, 0, cnt, op);
        if (inplace && r == root) {
            memcpy(out + (size_t)r * blk, in, blk);
            s = out + (size_t)r * blk;
        }
        check = r == root ? all : 0;
        break;
    case WEFT_COLL_SCATTER:
        fill(in, t, root, 0, cnt * (uint64_t)n, op);
        fill(want, t, root, (uint64_t)r * cnt, cnt, op);
        if (inplace && r == root) { /* recv is the root's own block of send */
            free(out);
            out = NULL;
        }
        check = blk;
        break;
    default: /* all-to-all: block q of rank r's input is val(r, q * cnt + i) */
        fill(in, t, r, 0, cnt * (uint64_t)n, op);
        for (int q = 0; q < n; q++)
            fill(want + (size_t)q * blk, t, q, (uint64_t)r * cnt, cnt, op);
        if (inplace) {
            memcpy(out, in, all);
            s = out;
        }
        check = all;
        break;
    }
    void *rv = out ? (void *)out : (void *)(in + (size_t)r * blk);
    int rc = coll(c, k, s, rv, cnt, t, op, root, WEFT_ALGO_DIRECT);
    int bad = rc != 0 || memcmp(rv, want, check) != 0 ||
              (out && check == all && (uint8_t)out[all] != 0x5a);
    if (bad)
        fprintf(stderr, "rank %d/%d: %s %s count=%llu root=%d inplace=%d: %s\n", r, n,
                weft_coll_name(k), weft_dtype_name(t), (unsigned long long)cnt, root, inplace,
                rc ? weft_comm_error(c) : "wrong result");
    free(in);
    free(out);
    free(want);
    return bad;
}

struct cfg {
    int full;         /* every dtype and op; else a few */
    uint64_t big;     /* elements of the large all-reduce (0: none) */
    int expect;       /* direct_verdict at the end */
};

static const weft_dtype all_dtypes[] = { WEFT_F32, WEFT_F64, WEFT_F16, WEFT_BF16,
                                         WEFT_I8,  WEFT_U8,  WEFT_I32, WEFT_I64 };

static void matrix(weft_comm *c, void *arg)
{
    const struct cfg *g = arg;
    int n = weft_comm_size(c), r = weft_comm_rank(c), bad = 0, calls = 0;
    uint64_t counts[] = { 0, 1, (uint64_t)(n > 1 ? n - 1 : 1), 1003 };
    for (int d = 0; d < 8; d++)
        for (int op = 0; op < WEFT_OP_COUNT; op++) {
            if (!g->full && (d % 3 || (op != WEFT_SUM && op != WEFT_AVG)))
                continue;
            for (int k = 0; k < 4; k++)
                for (int ip = 0; ip < 2; ip++, calls++)
                    bad += allreduce(c, all_dtypes[d], (weft_op)op, counts[k], ip);
            for (int k = 0; k < 4; k += 1 + !g->full, calls++)
                bad += reduce_scatter(c, all_dtypes[d], (weft_op)op, counts[k]);
        }
    for (int d = 0; d < 8; d += 1 + !g->full)
        for (int k = 0; k < 4; k++)
            for (int ip = 0; ip < 3; ip++, calls++)
                bad += allgather(c, all_dtypes[d], counts[k], ip);
    static const weft_coll_kind more[] = { WEFT_COLL_REDUCE, WEFT_COLL_GATHER,
                                           WEFT_COLL_SCATTER, WEFT_COLL_ALLTOALL };
    for (int root = 0; root < n; root++)
        for (int k = 0; k < 4; k++, calls++) {
            weft_dtype t = all_dtypes[(root + k) % 8];
            bad += broadcast(c, t, counts[k], root);
            for (int m = 0; m < 4; m++)
                for (int ip = 0; ip < 2; ip++, calls++)
                    bad += rooted(c, more[m], t, (weft_op)((k + m) % WEFT_OP_COUNT),
                                  counts[k], root, ip);
        }
    for (int k = 0; k < 3; k++, calls++)
        bad += weft_barrier(c) != 0;
    if (g->big) {
        /* many pieces per slice, an odd count of 1- and 4-byte elements */
        bad += allreduce(c, WEFT_F32, WEFT_SUM, g->big, 0);
        bad += allreduce(c, WEFT_F32, WEFT_SUM, g->big, 1);
        bad += allreduce(c, WEFT_I8, WEFT_MAX, 3 * g->big + 5, 0);
        bad += reduce_scatter(c, WEFT_F32, WEFT_AVG, g->big / (uint64_t)n + 1);
        bad += allgather(c, WEFT_I32, g->big / (uint64_t)n + 3, 0);
        bad += broadcast(c, WEFT_U8, 3 * g->big + 1, n - 1);
        bad += rooted(c, WEFT_COLL_REDUCE, WEFT_F64, WEFT_MIN, g->big / 2 + 1, n / 2, 1);
        bad += rooted(c, WEFT_COLL_ALLTOALL, WEFT_I32, WEFT_SUM, g->big / (uint64_t)n, 0, 1);
        calls += 8;
    }
    CHECKF(bad == 0, "rank %d of %d: %d of %d calls wrong", r, n, bad, calls);
    CHECKF(direct_verdict(c) == (n > 1 ? g->expect : 0), "rank %d of %d: verdict %d", r, n,
           direct_verdict(c));
    CHECKF(mp_shm_names_to(c->id, r) == 0, "rank %d: %d segment name(s) left in /dev/shm", r,
           mp_shm_names_to(c->id, r));
}

/* The same buffers and new ones, call after call: each call exchanges
 * its addresses afresh. */
static void repeated(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), bad = 0;
    uint64_t cnt = 100003;
    float *in[2], *out[2];
    for (int b = 0; b < 2; b++) {
        in[b] = malloc(cnt * sizeof(float));
        out[b] = malloc(cnt * sizeof(float));
    }
    for (int it = 0; it < 30; it++) {
        int b = it % 3 == 0;
        for (uint64_t i = 0; i < cnt; i++)
            in[b][i] = (float)((uint64_t)(r + it) * 3 + i % 7);
        if (coll(c, WEFT_COLL_ALLREDUCE, in[b], out[b], cnt, WEFT_F32, WEFT_SUM, 0,
                 WEFT_ALGO_DIRECT)) {
            bad++;
            break;
        }
        for (uint64_t i = 0; i < cnt; i++) {
            float want = 0;
            for (int q = 0; q < n; q++)
                want += (float)((uint64_t)(q + it) * 3 + i % 7);
            bad += out[b][i] != want;
        }
    }
    CHECKF(bad == 0, "rank %d: %d wrong over repeated calls (%s)", r, bad, weft_comm_error(c));
    /* non-blocking: the same on the communicator's worker thread */
    weft_request *req[2];
    for (uint64_t i = 0; i < cnt; i++)
        in[0][i] = (float)(r + 1);
    weft_coll_args ar = { .kind = WEFT_COLL_ALLREDUCE, .send = in[0], .recv = out[0],
                          .count = cnt, .dtype = WEFT_F32, .op = WEFT_MAX,
                          .algo = WEFT_ALGO_DIRECT };
    CHECK(weft_icollective(c, &ar, &req[0]) == 0);
    ar.send = ar.recv = in[1];
    ar.op = WEFT_SUM;
    for (uint64_t i = 0; i < cnt; i++)
        in[1][i] = 1;
    CHECK(weft_icollective(c, &ar, &req[1]) == 0);
    CHECK(weft_wait_all(req, 2) == 0);
    CHECK(out[0][0] == (float)n && out[0][cnt - 1] == (float)n);
    CHECK(in[1][0] == (float)n && in[1][cnt - 1] == (float)n);
    for (int b = 0; b < 2; b++) {
        free(in[b]);
        free(out[b]);
    }
}

/* Only the last rank may not read the others: every rank must take the
 * ring, and the results stay right. */
static void denied(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    CHECKF(r != n - 1 || mp_deny_cma() == 0, "rank %d: seccomp filter not installed", r);
    matrix(c, arg);
}

/* Every rank reads every other at the first call; then the last rank
 * loses the right to read the others (as a peer that turns undumpable):
 * the next call (kind: 0 all-reduce, 1 all-gather, 2 reduce-scatter,
 * out of place) runs again by the ring and is right on every rank,
 * single copy is off everywhere, and calls go on. */
static void denied_later(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), kind = *(int *)arg;
    uint64_t cnt = 300001;
    CHECK(allreduce(c, WEFT_F32, WEFT_SUM, cnt, 0) == 0);
    CHECKF(direct_verdict(c) == 1, "rank %d: verdict %d", r, direct_verdict(c));
    CHECKF(r != n - 1 || mp_deny_cma() == 0, "rank %d: seccomp filter not installed", r);
    int bad = kind == 0   ? allreduce(c, WEFT_F32, WEFT_SUM, cnt, 0)
              : kind == 1 ? allgather(c, WEFT_I32, cnt / 4, 0)
                          : reduce_scatter(c, WEFT_F64, WEFT_SUM, cnt / 4);
    CHECKF(bad == 0, "rank %d: kind %d after the denial", r, kind);
    CHECKF(direct_verdict(c) == -1, "rank %d: verdict %d", r, direct_verdict(c));
    CHECK(allreduce(c, WEFT_I32, WEFT_MAX, cnt, 1) == 0);
    CHECK(allgather(c, WEFT_U8, 1001, 1) == 0);
}

/* The same with an all-reduce in place, whose input already holds part
 * of the result when the failure is known: every rank fails the call
 * with the same error, and none hangs. */
static void denied_inplace(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    uint64_t cnt = 300001;
    float *x = malloc(cnt * sizeof *x);
    CHECK(allreduce(c, WEFT_F32, WEFT_SUM, cnt, 1) == 0);
    CHECKF(r != n - 1 || mp_deny_cma() == 0, "rank %d: seccomp filter not installed", r);
    fill(x, WEFT_F32, r, 0, cnt, WEFT_SUM);
    int rc = coll(c, WEFT_COLL_ALLREDUCE, x, x, cnt, WEFT_F32, WEFT_SUM, 0, WEFT_ALGO_DIRECT);
    char want[64];
    snprintf(want, sizeof want, "rank %d could not read rank 0's memory", n - 1);
    CHECKF(rc == WEFT_ESYS, "rank %d: rc %d: %s", r, rc, weft_comm_error(c));
    CHECKF(strstr(weft_comm_error(c), want) != NULL, "rank %d: %s", r, weft_comm_error(c));
    (void)arg;
    free(x);
}

/* The last rank dies, at some point inside a run of large all-reduces:
 * the others must fail with WEFT_EPEER naming it, not hang. */
static void death(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c), r = weft_comm_rank(c), rc = 0;
    uint64_t cnt = 4u << 20;
    float *in = calloc(cnt, sizeof *in), *out = malloc(cnt * sizeof *out);
    pthread_t th;
    CHECK(coll(c, WEFT_COLL_ALLREDUCE, in, out, cnt, WEFT_F32, WEFT_SUM, 0,
               WEFT_ALGO_DIRECT) == 0);
    if (r == n - 1)
        pthread_create(&th, NULL, mp_kill_later, arg);
    for (int it = 0; it < 10000 && !rc; it++)
        rc = coll(c, WEFT_COLL_ALLREDUCE, in, out, cnt, WEFT_F32, WEFT_SUM, 0,
                  WEFT_ALGO_DIRECT);
    char name[32];
    snprintf(name, sizeof name, "rank %d", n - 1);
    CHECKF(rc == WEFT_EPEER, "rank %d: %s", r, rc ? weft_comm_error(c) : "no error");
    CHECKF(strstr(weft_comm_error(c), name) != NULL, "rank %d: error does not name %s: %s", r,
           name, weft_comm_error(c));
    free(in);
    free(out);
}

/* Rank 1 never joins the second all-reduce: rank 0 (aborted from another
 * thread) and rank 2 (after its timeout) must both give up. */
static void stuck(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    pthread_t th;
    CHECK(allreduce(c, WEFT_F32, WEFT_SUM, 100000, 0) == 0);
    if (r == 1) {
        struct timespec ts = { 3, 0 };
        nanosleep(&ts, NULL);
        return;
    }
    if (r == 0)
        pthread_create(&th, NULL, mp_abort_later, c);
    float x[64] = { 0 };
    int rc = coll(c, WEFT_COLL_ALLREDUCE, x, x, 64, WEFT_F32, WEFT_SUM, 0, WEFT_ALGO_DIRECT);
    /* rank 2 times out or learns of rank 0's abort first */
    CHECKF(r == 0 ? rc == WEFT_EABORTED : rc < 0, "rank %d: %s", r, weft_comm_error(c));
    if (r == 0)
        pthread_join(th, NULL);
}

/* What it does not do is refused before anything moves; the
 * communicator goes on working. */
static void refused(weft_comm *c, void *arg)
{
    int n = weft_comm_size(c);
    int expect = *(int *)arg; /* 1: direct works here; 0: not on these hosts / without shm */
    int x[64], y[64 * 8];
    for (int i = 0; i < 64; i++)
        x[i] = weft_comm_rank(c) + i;
    int rc = coll(c, WEFT_COLL_GATHER, x, y, 64, WEFT_I32, 0, 0, WEFT_ALGO_DIRECT);
    CHECK(rc == (expect ? 0 : WEFT_ENOTSUP));
    CHECK(expect || strstr(weft_comm_error(c), "direct") != NULL);
    CHECK(weft_barrier(c) == 0);
    rc = coll(c, WEFT_COLL_ALLREDUCE, x, y, 64, WEFT_I32, WEFT_SUM, 0, WEFT_ALGO_DIRECT);
    CHECKF(rc == (expect ? 0 : WEFT_ENOTSUP), "rank %d: direct all-reduce: %s",
           weft_comm_rank(c), weft_strerror(rc));
    if (expect)
        CHECK(allreduce(c, WEFT_I32, WEFT_SUM, 64, 0) == 0);
    /* the communicator still works, and the cost model never picks what
     * cannot run */
    for (int i = 0; i < 64; i++)
        x[i] = weft_comm_rank(c) + i;
    CHECK(coll(c, WEFT_COLL_ALLREDUCE, x, y, 64, WEFT_I32, WEFT_SUM, 0, WEFT_ALGO_RING) == 0);
    CHECK(y[5] == n * 5 + n * (n - 1) / 2);
    int *big_in = calloc(4 << 20, sizeof(int)), *big_out = malloc((4 << 20) * sizeof(int));
    CHECK(coll(c, WEFT_COLL_ALLREDUCE, big_in, big_out, 4 << 20, WEFT_I32, WEFT_SUM, 0,
               WEFT_ALGO_AUTO) == 0);
    CHECK(big_out[12345] == 0);
    free(big_in);
    free(big_out);
}

static void cost_model(void)
{
    cost_params cp;
    double t = -1;
    int32_t hosts[4] = { 0, 0, 1, 1 };
    cost_layout one = { 4, NULL, 1, NULL }, two = { 4, hosts, 2, NULL };
    cost_default(&cp);
    cp.cores = 2;
    CHECK(direct_cost(&cp, &one, WEFT_COLL_ALLREDUCE, 64u << 20, 4, &t) == 0 && t > 0);
    CHECK(direct_cost(&cp, &two, WEFT_COLL_ALLREDUCE, 64u << 20, 4, &t) == WEFT_ENOTSUP);
    CHECK(direct_cost(&cp, &one, WEFT_COLL_GATHER, 64u << 20, 4, &t) == WEFT_ENOTSUP);
    double small = 0, large = 0;
    direct_cost(&cp, &one, WEFT_COLL_ALLREDUCE, 1u << 20, 4, &small);
    direct_cost(&cp, &one, WEFT_COLL_ALLREDUCE, 64u << 20, 4, &large);
    CHECK(large > small * 32);
    /* the selector: direct (or flat's pipeline, the other one-host
     * algorithm) for large all-reduces on one host, not on two, nor where
     * shared memory is off */
    coll_tuner *tu;
    CHECK(coll_tuner_create_with(&tu, 4, NULL, &cp) == 0);
    weft_algo big = coll_tuner_select(tu, WEFT_COLL_ALLREDUCE, 64u << 20, 4);
    CHECK(big == WEFT_ALGO_DIRECT || big == WEFT_ALGO_FLAT);
    coll_tuner_destroy(tu);
    CHECK(coll_tuner_create_with(&tu, 4, hosts, &cp) == 0);
    CHECK(coll_tuner_select(tu, WEFT_COLL_ALLREDUCE, 64u << 20, 4) != WEFT_ALGO_DIRECT);
    coll_tuner_destroy(tu);
    cp.shm = 0; /* WEFT_SHM=0, as a communicator's parameters give it */
    CHECK(direct_cost(&cp, &one, WEFT_COLL_ALLREDUCE, 64u << 20, 4, &t) == WEFT_ENOTSUP);
}

TEST_INIT
{
    unsetenv("WEFT_SHM");
    unsetenv("WEFT_ALGO");
}

TEST(cost_model) { cost_model(); }

TEST(matrix)
{
    struct cfg full = { 1, 0, 1 }, few = { 0, 0, 1 };
    for (int n = 1; n <= 8; n++)
        if (mp_size_kept(n))
            CHECKF(mp_run(n, 60, matrix, n == 3 || n == 4 ? &full : &few) == 0,
                   "matrix at %d ranks", n);
}

TEST(large)
{
    struct cfg big = { 0, 1500001, 1 };
    for (int n = 2; n <= 7; n += 5)
        CHECKF(mp_run(n, 60, matrix, &big) == 0, "large at %d ranks", n);
}

TEST(repeated) { CHECKF(mp_run(3, 60, repeated, NULL) == 0, "repeated calls"); }

TEST(denied)
{
    struct cfg ring = { 0, 300001, -1 };
    CHECKF(mp_run(4, 60, denied, &ring) == 0, "single copy denied on one rank");
}

TEST(denied_later)
{
    for (int k = 0; k < 3; k++)
        CHECKF(mp_run(k == 1 ? 3 : 4, 60, denied_later, &k) == 0,
               "single copy denied later, kind %d", k);
}

TEST(denied_inplace)
{
    CHECKF(mp_run(4, 60, denied_inplace, NULL) == 0, "single copy denied later, in place");
}

TEST(refused)
{
    int yes = 1, no = 0;
    CHECKF(mp_run(3, 60, refused, &yes) == 0, "refused kinds");
    mp_ranks_per_host = 2;
    CHECKF(mp_run(4, 60, refused, &no) == 0, "refused on two hosts");
    mp_ranks_per_host = 0;
    setenv("WEFT_SHM", "0", 1);
    CHECKF(mp_run(3, 60, refused, &no) == 0, "refused without shared memory");
    unsetenv("WEFT_SHM");
}

TEST(stuck) { CHECKF(mp_run(3, 1.0, stuck, NULL) == 0, "abort and timeout"); }

TEST(death)
{
    for (long ms = 1; ms <= 40; ms *= 6)
        CHECKF(mp_run(4, 30, death, (void *)(intptr_t)ms) == 1, "death after %ld ms", ms);
}
