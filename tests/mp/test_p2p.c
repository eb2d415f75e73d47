/* Point-to-point messages: the progress rule (receives posted before
 * sends, both directions at once), matching per (peer, tag), groups,
 * mismatches, a dead peer, an abort, and communicators that progress side
 * by side. Every case runs twice: ranks of one host through shared memory
 * (rings, single copy from 256 KiB: WEFT_SHM_CMA=2), then as NAME_tcp
 * with WEFT_P2P_SHM=0 over loopback TCP; default_ring checks that by
 * default large messages take the ring, registered that those sent from
 * weft_mem_alloc'd memory are copied straight out of it. */
#include "mp.h"
#include "coll/comm.h"
#include "coll/exec/p2p_int.h"
#include "coll/exec/p2p_reg.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define SMALL (4096 / 4)             /* 4 KiB of f32 */
#define LARGE ((16u << 20) / 4)      /* 16 MiB of f32 */

/* Element i of the message src sends to dst with tag t. */
static float val(int src, int dst, int t, size_t i)
{
    return (float)((src * 131 + dst * 17 + t * 7 + (int)(i % 1021)) % 4093);
}

static void fill(float *b, size_t n, int src, int dst, int t)
{
    for (size_t i = 0; i < n; i++)
        b[i] = val(src, dst, t, i);
}

static int same(const float *b, size_t n, int src, int dst, int t)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != val(src, dst, t, i))
            return 0;
    return 1;
}

/* Every rank: irecv(left), irecv(right), isend(left), isend(right), wait
 * all. Tag 1 goes left, tag 2 right, so at 2 ranks (left == right) each
 * receive still knows which message it takes. */
static void ring_both_ways(weft_comm *c, void *arg)
{
    size_t n = *(size_t *)arg;
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    int left = (r + p - 1) % p, right = (r + 1) % p;
    float *in_l = malloc(n * 4), *in_r = malloc(n * 4), *out_l = malloc(n * 4),
          *out_r = malloc(n * 4);
    weft_request *q[4];
    fill(out_l, n, r, left, 1);
    fill(out_r, n, r, right, 2);
    CHECK(weft_irecv_tag(c, in_l, n, WEFT_F32, left, 2, &q[0]) == 0);
    CHECK(weft_irecv_tag(c, in_r, n, WEFT_F32, right, 1, &q[1]) == 0);
    CHECK(weft_isend_tag(c, out_l, n, WEFT_F32, left, 1, &q[2]) == 0);
    CHECK(weft_isend_tag(c, out_r, n, WEFT_F32, right, 2, &q[3]) == 0);
    int rc = weft_wait_all(q, 4);
    CHECKF(rc == 0, "rank %d: %s: %s", r, weft_strerror(rc), weft_comm_error(c));
    CHECKF(same(in_l, n, left, r, 2), "rank %d: message from the left", r);
    CHECKF(same(in_r, n, right, r, 1), "rank %d: message from the right", r);
    if (p > 2) { /* the same with tag 0 everywhere: left and right differ */
        CHECK(weft_irecv(c, in_l, n, WEFT_F32, left, &q[0]) == 0);
        CHECK(weft_irecv(c, in_r, n, WEFT_F32, right, &q[1]) == 0);
        fill(out_l, n, r, left, 0);
        fill(out_r, n, r, right, 0);
        CHECK(weft_isend(c, out_l, n, WEFT_F32, left, &q[2]) == 0);
        CHECK(weft_isend(c, out_r, n, WEFT_F32, right, &q[3]) == 0);
        CHECK(weft_wait_all(q, 4) == 0);
        CHECK(same(in_l, n, left, r, 0) && same(in_r, n, right, r, 0));
    }
    free(in_l);
    free(in_r);
    free(out_l);
    free(out_r);
}

/* Pairs (0,1), (2,3): irecv(peer) then isend(peer); then the blocking
 * calls in a group, receive first. */
static void pairs_recv_first(weft_comm *c, void *arg)
{
    size_t n = *(size_t *)arg;
    int r = weft_comm_rank(c), peer = r ^ 1;
    if (peer >= weft_comm_size(c))
        return;
    float *in = malloc(n * 4), *out = malloc(n * 4);
    weft_request *q[2];
    fill(out, n, r, peer, 0);
    CHECK(weft_irecv(c, in, n, WEFT_F32, peer, &q[0]) == 0);
    CHECK(weft_isend(c, out, n, WEFT_F32, peer, &q[1]) == 0);
    CHECK(weft_wait(q[0]) == 0);
    CHECK(weft_wait(q[1]) == 0);
    CHECKF(same(in, n, peer, r, 0), "rank %d: the pair's message", r);
    memset(in, 0, n * 4);
    CHECK(weft_group_start(c) == 0);
    CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, 5) == 0);
    CHECK(weft_send_tag(c, out, n, WEFT_F32, peer, 5) == 0);
    int rc = weft_group_end(c);
    CHECKF(rc == 0, "rank %d: group: %s: %s", r, weft_strerror(rc), weft_comm_error(c));
    CHECK(same(in, n, peer, r, 0));
    CHECK(weft_group_end(c) == WEFT_EINVAL); /* none open */
    free(in);
    free(out);
}

/* Rank 0 sends tags 1, 2, 3 then ten tag-0 messages; rank 1 receives
 * tag 3, 2, 1 blocking (each must wait in memory for its receive), then
 * the ten in order. */
static void tags_and_order(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    int32_t v[10];
    if (r == 0) {
        for (int t = 1; t <= 3; t++) {
            int32_t x = 100 + t;
            CHECK(weft_send_tag(c, &x, 1, WEFT_I32, 1, t) == 0);
        }
        weft_request *q[10];
        for (int i = 0; i < 10; i++) {
            v[i] = i;
            CHECK(weft_isend(c, &v[i], 1, WEFT_I32, 1, &q[i]) == 0);
        }
        CHECK(weft_wait_all(q, 10) == 0);
    } else if (r == 1) {
        for (int t = 3; t >= 1; t--) {
            int32_t x = 0;
            CHECK(weft_recv_tag(c, &x, 1, WEFT_I32, 0, t) == 0);
            CHECKF(x == 100 + t, "tag %d carried %d", t, (int)x);
        }
        weft_request *q[10];
        for (int i = 0; i < 10; i++) {
            v[i] = -1;
            CHECK(weft_irecv(c, &v[i], 1, WEFT_I32, 0, &q[i]) == 0);
        }
        CHECK(weft_wait_all(q, 10) == 0);
        for (int i = 0; i < 10; i++)
            CHECKF(v[i] == i, "message %d arrived as %d", i, (int)v[i]);
    }
    CHECK(weft_barrier(c) == 0);
}

/* A receive that expects another count fails alone; the next messages
 * and collectives still work. Bad arguments fail at once. */
static void mismatch(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    float a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[8] = { 0 };
    weft_request *q;
    CHECK(weft_isend_tag(c, a, 8, WEFT_F32, r ^ 1, -1, &q) == WEFT_EINVAL && !q);
    CHECK(weft_isend(c, a, 8, WEFT_F32, r, &q) == WEFT_EINVAL);
    CHECK(weft_isend(c, a, 8, WEFT_F32, 7, &q) == WEFT_EINVAL);
    if (r == 0) {
        CHECK(weft_send(c, a, 8, WEFT_F32, 1) == 0);
        CHECK(weft_send(c, a, 8, WEFT_F32, 1) == 0);
    } else {
        int rc = weft_recv(c, b, 4, WEFT_F32, 0);
        CHECKF(rc == WEFT_EMISMATCH, "got %s", weft_strerror(rc));
        CHECKF(strstr(weft_comm_error(c), "rank 0 sent count=8 f32") != NULL, "%s",
               weft_comm_error(c));
        CHECK(weft_recv(c, b, 8, WEFT_F32, 0) == 0 && b[7] == 8);
    }
    float s = 1;
    CHECK(weft_allreduce(c, &s, &s, 1, WEFT_F32, WEFT_SUM) == 0 && s == 2);
}

/* Rank 0 posts a receive, then runs an all-reduce the sender joins only
 * after its send: message and collective stream do not wait for each
 * other. */
static void beside_collectives(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    float x = 0, one = 1, s;
    weft_request *q = NULL;
    if (r == 0)
        CHECK(weft_irecv(c, &x, 1, WEFT_F32, p - 1, &q) == 0);
    weft_request *ar;
    s = one;
    CHECK(weft_iallreduce(c, &s, &s, 1, WEFT_F32, WEFT_SUM, &ar) == 0);
    if (r == p - 1) {
        float y = 42;
        CHECK(weft_send(c, &y, 1, WEFT_F32, 0) == 0);
    }
    CHECK(weft_wait(ar) == 0 && s == (float)p);
    if (r == 0) {
        CHECK(weft_wait(q) == 0);
        CHECK(x == 42);
    }
}

/* Rank 0's blocking sends complete while rank 1 posts no receive: rank
 * 1 first takes a message from rank 2 (its engine then parks behind
 * that wait), then sits in an all-reduce that rank 0 joins only after
 * its sends. The first message to a peer waits for that peer to answer
 * the connection's handshake, whatever the peer is doing. */
static void send_first(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    double v[64], s = 1;
    for (int k = 0; k < 64; k++)
        v[k] = k;
    if (r == 2)
        CHECK(weft_send(c, v, 1, WEFT_F64, 1) == 0);
    if (r == 1)
        CHECK(weft_recv(c, v, 1, WEFT_F64, 2) == 0);
    if (r == 0) {
        nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
        for (int k = 0; k < 64; k++)
            CHECKF(weft_send(c, &v[k], 1, WEFT_F64, 1) == 0, "send %d: %s", k,
                   weft_comm_error(c));
    }
    CHECK(weft_allreduce(c, &s, &s, 1, WEFT_F64, WEFT_SUM) == 0 && s == 3);
    if (r == 1)
        for (int k = 0; k < 64; k++) {
            double x = -1;
            CHECK(weft_recv(c, &x, 1, WEFT_F64, 0) == 0 && x == k);
        }
}

typedef struct {
    weft_comm *c;
    int rounds, bad;
} side_arg;

/* A thread of its own runs all-reduces and a ring of messages on one
 * communicator. */
static void *side(void *arg)
{
    side_arg *s = arg;
    int r = weft_comm_rank(s->c), p = weft_comm_size(s->c);
    for (int i = 0; i < s->rounds; i++) {
        float v[256], in[256];
        for (int k = 0; k < 256; k++)
            v[k] = (float)(r + k + i);
        if (weft_allreduce(s->c, v, v, 256, WEFT_F32, WEFT_SUM))
            s->bad++;
        for (int k = 0; k < 256; k++)
            if (v[k] != (float)(p * (k + i) + p * (p - 1) / 2))
                s->bad++;
        weft_request *q[2];
        if (weft_irecv(s->c, in, 256, WEFT_F32, (r + p - 1) % p, &q[0]) ||
            weft_isend(s->c, v, 256, WEFT_F32, (r + 1) % p, &q[1]) || weft_wait_all(q, 2))
            s->bad++;
        if (memcmp(in, v, sizeof v))
            s->bad++;
    }
    return NULL;
}

/* Two communicators of one rank, each driven by its own thread; then
 * both from one thread, interleaved. */
static void two_comms(weft_comm *c, void *arg)
{
    (void)arg;
    weft_comm *a = NULL, *b = NULL;
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    CHECK(weft_comm_split(c, 0, r, &a) == 0 && weft_comm_split(c, 0, r, &b) == 0);
    if (!a || !b)
        return;
    side_arg sa = { a, 20, 0 }, sb = { b, 20, 0 };
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, side, &sa) == 0);
    CHECK(pthread_create(&tb, NULL, side, &sb) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECKF(sa.bad == 0 && sb.bad == 0, "rank %d: %d and %d bad", r, sa.bad, sb.bad);
    /* one thread: a's receive waits on a message that comes only after
     * b's all-reduce, which needs this rank to have posted it */
    float x = 0, y = (float)r, s = 1;
    weft_request *q[3];
    CHECK(weft_irecv(a, &x, 1, WEFT_F32, (r + p - 1) % p, &q[0]) == 0);
    CHECK(weft_iallreduce(b, &s, &s, 1, WEFT_F32, WEFT_SUM, &q[1]) == 0);
    CHECK(weft_wait(q[1]) == 0 && s == (float)p);
    CHECK(weft_isend(a, &y, 1, WEFT_F32, (r + 1) % p, &q[2]) == 0);
    CHECK(weft_wait(q[2]) == 0 && weft_wait(q[0]) == 0);
    CHECK(x == (float)((r + p - 1) % p));
    CHECK(weft_comm_destroy(b) == 0);
    CHECK(weft_comm_destroy(a) == 0);
}

/* Rank 1 leaves without a word; rank 0's receive from it fails naming
 * it, and so does what rank 0 posts for it afterwards. */
static void dead_peer(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    float x[4];
    if (r == 1) {
        fflush(NULL);
        _exit(0);
    }
    int rc = weft_recv(c, x, 4, WEFT_F32, 1);
    CHECKF(rc == WEFT_EPEER, "got %s", weft_strerror(rc));
    CHECKF(strstr(weft_comm_error(c), "rank 1") != NULL, "%s", weft_comm_error(c));
    weft_request *q;
    rc = weft_isend(c, x, 4, WEFT_F32, 1, &q);
    CHECK(rc != 0 || weft_wait(q) != 0);
    weft_comm_abort(c); /* destroy without the closing barrier */
}

/* Rank 1 leaves after the pair has talked (its ring is in use): rank
 * 0's next receive fails naming it, and so does a large send that would
 * wait for rank 1 to read it. */
static void dead_peer_later(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    float x[4] = { 1, 2, 3, 4 };
    if (r == 1) {
        CHECK(weft_send(c, x, 4, WEFT_F32, 0) == 0);
        CHECK(weft_recv(c, x, 4, WEFT_F32, 0) == 0);
        fflush(NULL);
        _exit(0);
    }
    CHECK(weft_recv(c, x, 4, WEFT_F32, 1) == 0 && x[3] == 4);
    CHECK(weft_send(c, x, 4, WEFT_F32, 1) == 0);
    int rc = weft_recv(c, x, 4, WEFT_F32, 1);
    CHECKF(rc == WEFT_EPEER, "got %s", weft_strerror(rc));
    CHECKF(strstr(weft_comm_error(c), "rank 1") != NULL, "%s", weft_comm_error(c));
    float *big = calloc(LARGE, 4);
    CHECK(weft_send(c, big, LARGE, WEFT_F32, 1) != 0);
    free(big);
    weft_comm_abort(c);
}

/* An abort from another thread ends a receive nobody will match. */
static void aborted(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    float x;
    if (r == 0) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, mp_abort_later, c) == 0);
        int rc = weft_recv(c, &x, 1, WEFT_F32, 1);
        CHECKF(rc == WEFT_EABORTED, "got %s", weft_strerror(rc));
        pthread_join(t, NULL);
    } else {
        /* alive until well after rank 0's abort (gone, it would be a dead
         * peer); rank 0 never arrives at the closing barrier */
        usleep(2000 * 1000);
        weft_comm_abort(c);
    }
}

/* Does this run offer shared memory (WEFT_P2P_SHM, WEFT_SHM)? */
static int shm_offered(void)
{
    const char *p2p = getenv("WEFT_P2P_SHM"), *shm = getenv("WEFT_SHM");
    return !(p2p && !strcmp(p2p, "0")) && !(shm && !strcmp(shm, "0"));
}

/* ... and are its point-to-point pairs on it (not libfabric's)? */
static int ring_offered(void)
{
    const char *net = getenv("WEFT_NET");
    return shm_offered() && !(net && !strcmp(net, "ofi"));
}

/* The way rank r's messages to peer went: a ring when this run offers
 * shared memory and the pair shares a host, else TCP; none of the two
 * where the pair talks libfabric or the peer is on another host. */
static void check_path(weft_comm *c, int peer)
{
    p2p_engine *e = c->p2p;
    int r = weft_comm_rank(c);
    pthread_mutex_lock(&e->drive);
    int st = e->peer[peer].out.state, ofi = e->peer[peer].ofi;
    pthread_mutex_unlock(&e->drive);
    int want = shm_offered() ? SHM_LINK_RING : SHM_LINK_TCP;
    if (ofi || weft_comm_host_of(c, peer) != weft_comm_host_of(c, r))
        want = SHM_LINK_NEW; /* no hello at all */
    CHECKF(st == want, "rank %d to %d: way %d, expected %d", r, peer, st, want);
}

/* Element count of the k-th message between a pair: small ones, one that
 * wraps a 64 KiB ring, and single-copy ones. */
static size_t mixed_count(int k)
{
    static const size_t n[] = { 1, 300, 50000, 0, 700000, 17, 65536 };
    return n[k % 7];
}

#define MIXED 14 /* messages each rank sends each other rank */

/* Every rank sends every other MIXED messages of mixed sizes on tags k %
 * 5 (so each tag carries several, which must arrive in order), and
 * receives them posted in reverse: every message waits for its receive
 * out of order, small ones behind large ones and the other way. */
static void mixed(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), p = weft_comm_size(c), m = (p - 1) * MIXED, i = 0;
    weft_request **q = calloc((size_t)m * 2, sizeof *q);
    float **in = calloc((size_t)m, sizeof *in), **out = calloc((size_t)m, sizeof *out);
    for (int d = 1; d < p; d++) {
        int to = (r + d) % p;
        for (int k = 0; k < MIXED; k++, i++) {
            size_t n = mixed_count(k);
            out[i] = malloc(n * 4 + 4);
            fill(out[i], n, r, to, k);
            CHECK(weft_isend_tag(c, out[i], n, WEFT_F32, to, k % 5, &q[i]) == 0);
        }
    }
    for (int j = 0; j < m; j++)
        in[j] = malloc(mixed_count(j % MIXED) * 4 + 4);
    /* post per tag oldest first (matching is per tag, in order), tags
     * and peers reversed */
    for (int d = 1; d < p; d++) {
        int from = (r + p - d) % p;
        for (int t = 4; t >= 0; t--)
            for (int k = t; k < MIXED; k += 5) {
                int slot = (d - 1) * MIXED + k;
                CHECK(weft_irecv_tag(c, in[slot], mixed_count(k), WEFT_F32, from, t,
                                     &q[m + slot]) == 0);
            }
    }
    for (int j = 2 * m - 1; j >= 0; j--) {
        int rc = q[j] ? weft_wait(q[j]) : WEFT_EINVAL;
        CHECKF(rc == 0, "rank %d: request %d: %s: %s", r, j, weft_strerror(rc),
               weft_comm_error(c));
    }
    for (int d = 1; d < p; d++) {
        int from = (r + p - d) % p;
        for (int k = 0; k < MIXED; k++) {
            int slot = (d - 1) * MIXED + k;
            CHECKF(same(in[slot], mixed_count(k), from, r, k), "rank %d: message %d from %d",
                   r, k, from);
        }
        check_path(c, (r + d) % p);
    }
    for (int j = 0; j < m; j++) {
        free(in[j]);
        free(out[j]);
    }
    free(in);
    free(out);
    free(q);
}

/* Odd ranks may not read another process's memory (a seccomp filter, as
 * in a container): large messages to them come through the ring, and
 * the exchange still completes; the others keep single copy. */
static void cma_denied(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    CHECKF(!(r & 1) || mp_deny_cma() == 0, "rank %d: seccomp filter not installed", r);
    pairs_recv_first(c, arg);
    pairs_recv_first(c, arg);
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    int off = e->peer[r ^ 1].in.cma_off, ofi = e->peer[r ^ 1].ofi;
    pthread_mutex_unlock(&e->drive);
    if (ofi || !shm_offered())
        return; /* no ring to refuse in */
    CHECKF(off == (r & 1), "rank %d: single copy %s", r, off ? "given up" : "still tried");
}

/* WEFT_SHM_CMA=1 (the default): large messages through the ring, asked
 * for by neither side */
static void default_ring(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    pairs_recv_first(c, arg);
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    int in = e->peer[r ^ 1].in.cma_off, out = e->peer[r ^ 1].out.cma_off;
    uint64_t sent = e->peer[r ^ 1].out.ring.cma_sent;
    int ofi = e->peer[r ^ 1].ofi;
    pthread_mutex_unlock(&e->drive);
    if (ofi || !shm_offered())
        return;
    CHECKF(in && out && !sent, "rank %d: single copy in %d out %d, %llu sent", r, !in, !out,
           (unsigned long long)sent);
}

/* Sends from weft_mem_alloc'd buffers counted at the sender: with
 * WEFT_SHM_CMA=1 only those ask for a copy out of the sender's memory. */
static uint64_t reg_sent(weft_comm *c, int peer, int *off)
{
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    uint64_t n = e->peer[peer].out.ring.cma_sent;
    *off = e->peer[peer].reg_off || e->peer[peer].ofi || !shm_offered();
    pthread_mutex_unlock(&e->drive);
    return n;
}

/* One message of n floats from rank 0's region at byte offset off (tag
 * t), received into plain memory by rank 1. */
static void reg_one(weft_comm *c, char *region, size_t off, size_t n, int t)
{
    int r = weft_comm_rank(c);
    if (r == 0) {
        fill((float *)(region + off), n, 0, 1, t);
        int rc = weft_send_tag(c, region + off, n, WEFT_F32, 1, t);
        CHECKF(rc == 0, "send %zu floats: %s: %s", n, weft_strerror(rc), weft_comm_error(c));
        return;
    }
    float *in = malloc(n * 4 + 4);
    int rc = weft_recv_tag(c, in, n, WEFT_F32, 0, t);
    CHECKF(rc == 0, "recv %zu floats: %s: %s", n, weft_strerror(rc), weft_comm_error(c));
    CHECKF(same(in, n, 0, 1, t), "%zu floats at offset %zu, tag %d", n, off, t);
    free(in);
}

/* Rank 0 sends from weft_mem_alloc'd regions: several sizes and
 * offsets, one that waits parked for its receive, then a region freed
 * and another allocated in its place (the receiver must map the new one,
 * not copy the old one's pages again). */
static void registered(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), off = 0;
    static const size_t n[] = { 1024, (300u << 10) / 4, (1u << 20) / 4, (5u << 20) / 4 + 3 };
    char *reg = NULL;
    CHECK(weft_mem_alloc(c, 8u << 20, (void **)&reg) == 0 && reg);
    CHECK(((uintptr_t)reg & ((2u << 20) - 1)) == 0); /* huge-page aligned */
    int big = 0;
    for (int k = 0; k < 4; k++) {
        reg_one(c, reg, 0, n[k], k);
        reg_one(c, reg, 4096 + 8 * (size_t)k, n[k], 10 + k);
        big += 2 * (n[k] * 4 >= (256u << 10));
    }
    /* sent before its receive: read into a buffer of its own meanwhile */
    if (r == 0) {
        weft_request *q;
        fill((float *)reg, n[2], 0, 1, 20);
        CHECK(weft_isend_tag(c, reg, n[2], WEFT_F32, 1, 20, &q) == 0);
        CHECK(weft_barrier(c) == 0);
        CHECK(weft_wait(q) == 0);
    } else {
        CHECK(weft_barrier(c) == 0);
        float *in = malloc(n[2] * 4);
        CHECK(weft_recv_tag(c, in, n[2], WEFT_F32, 0, 20) == 0);
        CHECK(same(in, n[2], 0, 1, 20));
        free(in);
    }
    big++;
    for (int round = 0; round < 3; round++) { /* freed, allocated again */
        CHECK(weft_mem_free(c, reg) == 0);
        CHECK(weft_mem_alloc(c, (4u << 20) + 4096 * (size_t)round, (void **)&reg) == 0);
        reg_one(c, reg, 64, n[2], 30 + round);
        big++;
    }
    if (r == 0) {
        uint64_t sent = reg_sent(c, 1, &off);
        CHECKF(off || sent == (uint64_t)big, "%llu of %d sends copied from the region",
               (unsigned long long)sent, big);
    }
    CHECK(weft_mem_free(c, reg) == 0);
    CHECK(weft_mem_free(c, reg) == WEFT_EINVAL); /* freed already */
    CHECK(weft_mem_free(c, NULL) == 0);
    void *small = NULL;
    CHECK(weft_mem_alloc(c, 100, &small) == 0 && small);
    CHECK(weft_mem_free(c, small) == 0);
    CHECK(weft_mem_alloc(c, 0, &small) == WEFT_EINVAL);
}

/* Registered payloads this rank copied into a buffer of their own
 * before their receive was posted (copied again at the receive). */
static uint64_t reg_parked(weft_comm *c)
{
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    uint64_t n = e->reg_parked;
    pthread_mutex_unlock(&e->drive);
    return n;
}

/* Both ranks send from weft_mem_alloc'd regions. A ping-pong of blocking
 * calls: the answer's head usually comes in with the acknowledgement of
 * the send before it, while its receive is not posted yet (it waits a
 * pass for it). Then both send at once, blocking, before either
 * receives: the first send to end was read into a buffer of its own
 * after its pass (no receive was posted for it), and neither send waits
 * for the other forever. Last, a held head
 * behind which a later small message with another tag is received
 * first. */
static void registered_both_ways(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), peer = r ^ 1, off = 0;
    size_t n = (1u << 20) / 4;
    float *reg = NULL, *in = malloc(n * 4), small[4];
    CHECK(in && weft_mem_alloc(c, n * 4, (void **)&reg) == 0 && reg);
    for (int k = 0; k < 20; k++) {
        fill(reg, n, r, peer, k);
        if (r == 0) {
            CHECK(weft_send_tag(c, reg, n, WEFT_F32, peer, k) == 0);
            CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, k) == 0);
        } else {
            CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, k) == 0);
            CHECK(weft_send_tag(c, reg, n, WEFT_F32, peer, k) == 0);
        }
        CHECKF(same(in, n, peer, r, k), "round trip %d", k);
    }
    reg_sent(c, peer, &off);
    uint64_t before = reg_parked(c);
    fill(reg, n, r, peer, 50);
    CHECK(weft_send_tag(c, reg, n, WEFT_F32, peer, 50) == 0);
    CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, 50) == 0);
    CHECK(same(in, n, peer, r, 50));
    /* the first of the two sends to end was read into a buffer of its
     * own (nothing else could end it); the other maybe too */
    double got = (double)(reg_parked(c) - before), all = got;
    CHECK(weft_allreduce(c, &all, &all, 1, WEFT_F64, WEFT_SUM) == 0);
    CHECKF(off || (got <= 1 && all >= 1), "%.0f registered payloads parked here, %.0f in all",
           got, all);
    CHECK(weft_barrier(c) == 0);
    if (r == 1) {
        weft_request *q[2];
        fill(reg, n, 1, 0, 61);
        fill(small, 4, 1, 0, 60);
        CHECK(weft_isend_tag(c, reg, n, WEFT_F32, 0, 61, &q[0]) == 0);
        CHECK(weft_isend_tag(c, small, 4, WEFT_F32, 0, 60, &q[1]) == 0);
        CHECK(weft_wait_all(q, 2) == 0);
    } else {
        CHECK(weft_recv_tag(c, small, 4, WEFT_F32, 1, 60) == 0);
        CHECK(same(small, 4, 1, 0, 60));
        CHECK(weft_recv_tag(c, in, n, WEFT_F32, 1, 61) == 0);
        CHECK(same(in, n, 1, 0, 61));
    }
    CHECK(weft_mem_free(c, reg) == 0);
    free(in);
}

static uint64_t shared_bytes(weft_comm *c)
{
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    uint64_t n = e->shared;
    pthread_mutex_unlock(&e->drive);
    return n;
}

static void share_lazy(weft_comm *c, int on)
{
    pthread_mutex_lock(&c->p2p->drive);
    c->p2p->share_lazy = on;
    pthread_mutex_unlock(&c->p2p->drive);
}

/* Both sides' buffers from weft_mem_alloc: from WEFT_P2P_SHARE on the
 * receiver offers its destination, and the sender, while it waits for
 * the acknowledgement, copies chunks into it too. Blocking ping-pongs at
 * sizes around the chunks (one not a multiple of them), then both ways
 * at once; then rank 1 copies nothing of its own (the test's switch), so
 * rank 0 copies a whole message into it and rings it awake. Through TCP
 * nothing is shared. */
static void registered_shared(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), peer = r ^ 1;
    int ring = ring_offered();
    size_t big = (8u << 20) / 4, sizes[] = { (1u << 20) / 4, (3u << 20) / 4 + 3, big };
    float *out = NULL, *in = NULL;
    CHECK(weft_mem_alloc(c, big * 4, (void **)&out) == 0 && weft_mem_alloc(c, big * 4,
                                                                         (void **)&in) == 0);
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        for (int k = 0; k < 6; k++) {
            int t = 10 * s + k;
            fill(out, n, r, peer, t);
            if (r == 0) {
                CHECK(weft_send_tag(c, out, n, WEFT_F32, peer, t) == 0);
                CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, t) == 0);
            } else {
                CHECK(weft_recv_tag(c, in, n, WEFT_F32, peer, t) == 0);
                CHECK(weft_send_tag(c, out, n, WEFT_F32, peer, t) == 0);
            }
            CHECKF(same(in, n, peer, r, t), "%zu floats, round trip %d", n, k);
        }
        weft_request *q[2];
        fill(out, n, r, peer, 100 + s);
        CHECK(weft_irecv_tag(c, in, n, WEFT_F32, peer, 100 + s, &q[0]) == 0);
        CHECK(weft_isend_tag(c, out, n, WEFT_F32, peer, 100 + s, &q[1]) == 0);
        CHECK(weft_wait_all(q, 2) == 0);
        CHECKF(same(in, n, peer, r, 100 + s), "%zu floats both ways", n);
    }
    uint64_t before = shared_bytes(c);
    if (r == 1)
        share_lazy(c, 1);
    CHECK(weft_barrier(c) == 0);
    if (r == 0) {
        fill(out, big, 0, 1, 200);
        CHECK(weft_send_tag(c, out, big, WEFT_F32, 1, 200) == 0);
        uint64_t got = shared_bytes(c) - before;
        CHECKF(ring ? got == big * 4 : got == 0, "rank 0 copied %llu of %zu bytes",
               (unsigned long long)got, big * 4);
    } else {
        CHECK(weft_recv_tag(c, in, big, WEFT_F32, 0, 200) == 0);
        CHECK(same(in, big, 0, 1, 200));
        share_lazy(c, 0);
    }
    CHECK(weft_mem_free(c, out) == 0 && weft_mem_free(c, in) == 0);
}

/* Rank 1 offers to share a message into its region and copies none of
 * it (the test's switch); rank 0 does not copy either (as if it could
 * not map the region), and dies: rank 1 must learn, naming rank 0, not wait for the
 * chunks forever. */
static void registered_shared_dead(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    size_t n = (4u << 20) / 4;
    int ring = ring_offered();
    float *buf = NULL;
    CHECK(weft_mem_alloc(c, n * 4, (void **)&buf) == 0);
    fill(buf, n, r, r ^ 1, 1);
    if (r == 0) {
        weft_request *q;
        pthread_mutex_lock(&c->p2p->drive);
        c->p2p->peer[1].share_off = 1; /* as if it could not map rank 1's region */
        pthread_mutex_unlock(&c->p2p->drive);
        CHECK(weft_barrier(c) == 0);
        CHECK(weft_isend(c, buf, n, WEFT_F32, 1, &q) == 0);
        usleep(300 * 1000);
        fflush(NULL);
        _exit(0);
    }
    share_lazy(c, 1);
    CHECK(weft_barrier(c) == 0);
    int rc = weft_recv(c, buf, n, WEFT_F32, 0);
    CHECKF(rc == WEFT_EPEER || (!ring && rc == 0), "got %s", weft_strerror(rc));
    if (rc)
        CHECKF(strstr(weft_comm_error(c), "rank 0") != NULL, "%s", weft_comm_error(c));
    share_lazy(c, 0);
    CHECK(weft_mem_free(c, buf) == 0);
    weft_comm_abort(c);
}

/* Rank 1 takes one message from rank 0's region (it keeps the region
 * mapped), then keeps its engine from reading (it holds the drive lock)
 * and dies a little after the barrier, while rank 0's next registered
 * send waits for the acknowledgement that will never come: rank 0 must
 * learn, naming rank 1, not wait forever. (Over TCP the send may be out
 * in the socket's buffer, and so done, before rank 1 dies.) */
static void registered_dead(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c);
    size_t n = (4u << 20) / 4;
    int ring = ring_offered();
    char *reg = NULL;
    CHECK(weft_mem_alloc(c, n * 4, (void **)&reg) == 0);
    reg_one(c, reg, 0, n, 1);
    if (r == 1) {
        pthread_mutex_lock(&c->p2p->drive);
        CHECK(weft_barrier(c) == 0);
        usleep(200 * 1000);
        fflush(NULL);
        _exit(0);
    }
    CHECK(weft_barrier(c) == 0);
    int rc = weft_send(c, reg, n, WEFT_F32, 1);
    CHECKF(rc == WEFT_EPEER || (!ring && rc == 0), "got %s", weft_strerror(rc));
    float x[4];
    rc = weft_recv(c, x, 4, WEFT_F32, 1);
    CHECKF(rc == WEFT_EPEER, "got %s", weft_strerror(rc));
    CHECKF(strstr(weft_comm_error(c), "rank 1") != NULL, "%s", weft_comm_error(c));
    CHECK(weft_mem_free(c, reg) == 0);
    weft_comm_abort(c);
}

/* A communicator alone: plain memory, freed the same way; misuse is
 * refused. */
static void registered_alone(weft_comm *c, void *arg)
{
    (void)arg;
    char *p = NULL;
    int x;
    CHECK(weft_mem_alloc(c, 3u << 20, (void **)&p) == 0 && p);
    memset(p, 7, 3u << 20);
    CHECK(weft_mem_free(c, p) == 0);
    CHECK(weft_mem_alloc(NULL, 64, (void **)&p) == WEFT_EINVAL && !p);
    CHECK(weft_mem_alloc(c, 64, NULL) == WEFT_EINVAL);
    CHECK(weft_mem_free(NULL, &x) == WEFT_EINVAL);
}

/* Forbids this process both ways into another's memory, as a container
 * without CAP_SYS_PTRACE does: process_vm_readv and pidfd_getfd fail
 * with EPERM, in every thread (TSYNC). Non-zero when it cannot. */
static int deny_peek(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 438 /* SYS_pidfd_getfd */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { (unsigned short)(sizeof f / sizeof f[0]), f };
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
           syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0;
}

/* Odd ranks may not reach into another process: registered messages to
 * them are refused once and come through the ring, correct; the even
 * ranks still copy straight out of the odd ones' regions, and copy them
 * alone (the odd senders cannot map the even ranks' buffers to share
 * the copy). */
static void registered_denied(weft_comm *c, void *arg)
{
    (void)arg;
    int r = weft_comm_rank(c), peer = r ^ 1, off = 0;
    size_t n = (1u << 20) / 4;
    CHECKF(!(r & 1) || deny_peek() == 0, "rank %d: seccomp filter not installed", r);
    float *reg = NULL, *in = NULL;
    CHECK(weft_mem_alloc(c, n * 4, (void **)&reg) == 0);
    CHECK(weft_mem_alloc(c, n * 4, (void **)&in) == 0);
    for (int k = 0; k < 3; k++) {
        weft_request *q[2];
        fill(reg, n, r, peer, k);
        CHECK(weft_irecv_tag(c, in, n, WEFT_F32, peer, k, &q[0]) == 0);
        CHECK(weft_isend_tag(c, reg, n, WEFT_F32, peer, k, &q[1]) == 0);
        int rc = weft_wait_all(q, 2);
        CHECKF(rc == 0, "rank %d: %s: %s", r, weft_strerror(rc), weft_comm_error(c));
        CHECKF(same(in, n, peer, r, k), "rank %d: message %d", r, k);
    }
    uint64_t sent = reg_sent(c, peer, &off);
    p2p_engine *e = c->p2p;
    pthread_mutex_lock(&e->drive);
    int refuse = e->peer[peer].reg_refuse;
    pthread_mutex_unlock(&e->drive);
    int ring = shm_offered() && !e->peer[peer].ofi;
    /* the even side asked once, was refused and asks no more; the odd
     * side, which refuses, was read every time */
    CHECKF(!ring || (r & 1 ? !off && sent == 3 && refuse : off && sent == 1 && !refuse),
           "rank %d: %llu asked, off %d, refusing %d", r, (unsigned long long)sent, off, refuse);
    CHECK(weft_mem_free(c, reg) == 0 && weft_mem_free(c, in) == 0);
}

static size_t small_count = SMALL, large_count = LARGE;

/* Each case twice: NAME through shared memory, NAME_tcp with
 * WEFT_P2P_SHM=0 (forked ranks inherit the environment). */
static int tcp_run; /* this is the NAME_tcp run */

static int ofi_run(void) { return getenv("WEFT_NET") && !strcmp(getenv("WEFT_NET"), "ofi"); }

#define BOTH(name)                                                                      \
    static void both_##name(void);                                                      \
    TEST(name) { both_##name(); }                                                       \
    TEST(name##_tcp)                                                                    \
    {                                                                                   \
        if (ofi_run())                                                                  \
            return; /* every pair talks libfabric both times */                         \
        setenv("WEFT_P2P_SHM", "0", 1);                                                 \
        tcp_run = 1;                                                                    \
        both_##name();                                                                  \
        tcp_run = 0;                                                                    \
        setenv("WEFT_P2P_SHM", "1", 1);                                                 \
    }                                                                                   \
    static void both_##name(void)

/* single copy too, which point-to-point makes only with WEFT_SHM_CMA=2 */
TEST_INIT
{
    setenv("WEFT_P2P_SHM", "1", 1);
    setenv("WEFT_SHM_CMA", "2", 1);
}

/* every rank posts irecv(left), irecv(right), isend(left), isend(right) */
static void ring(int n, size_t *count)
{
    CHECKF(mp_run(n, 60, ring_both_ways, count) == 0, "ring both ways: %d ranks, %zu bytes", n,
           *count * 4);
}

/* 8 ranks on this machine's cores (2 in CI): every waiter must give way */
static size_t mid_count = (1u << 20) / 4;

BOTH(ring_2_small) { ring(2, &small_count); }
BOTH(ring_2_large) { ring(2, &large_count); }
BOTH(ring_4_small) { ring(4, &small_count); }
/* large over TCP: at 2 ranks here, at 4 in pairs_large_tcp */
BOTH(ring_4_large) { if (!tcp_run) ring(4, &large_count); }
BOTH(ring_3_small) { ring(3, &small_count); }
BOTH(ring_3_large) { if (!tcp_run && !mp_thin()) ring(3, &large_count); }
BOTH(ring_8)
{
    ring(8, &small_count);
    if (!mp_thin())
        ring(8, &mid_count);
}

/* pairs that post irecv(peer) then isend(peer) */
static void pairs(size_t *count)
{
    CHECKF(mp_run(2, 60, pairs_recv_first, count) == 0, "pair, %zu bytes", *count * 4);
    CHECKF(mp_run(4, 60, pairs_recv_first, count) == 0, "two pairs, %zu bytes", *count * 4);
}

BOTH(pairs_small) { pairs(&small_count); }
/* (under sanitizers TCP's large messages only in ring_2_large_tcp) */
BOTH(pairs_large) { if (!tcp_run || !mp_thin()) pairs(&large_count); }

BOTH(tags_and_order) { CHECKF(mp_run(2, 60, tags_and_order, NULL) == 0, "tags and order"); }
BOTH(mismatch) { CHECKF(mp_run(2, 60, mismatch, NULL) == 0, "mismatched count"); }
BOTH(beside_collectives) { CHECKF(mp_run(3, 60, beside_collectives, NULL) == 0, "beside collectives"); }
BOTH(two_comms) { CHECKF(mp_run(3, 60, two_comms, NULL) == 0, "two communicators"); }
BOTH(send_first) { CHECKF(mp_run(3, 10, send_first, NULL) == 0, "sends before the receives"); }
BOTH(dead_peer) { CHECKF(mp_run(2, 20, dead_peer, NULL) == 0, "dead peer"); }
BOTH(dead_peer_later) { CHECKF(mp_run(2, 20, dead_peer_later, NULL) == 0, "peer died later"); }
BOTH(aborted) { CHECKF(mp_run(2, 20, aborted, NULL) == 0, "abort"); }

/* many tags and peers, sizes mixed, received out of order: one host (a
 * 64 KiB ring, so messages wrap and fill it), then two ranks a host (the
 * pairs across hosts keep TCP) */
BOTH(mixed)
{
    if (tcp_run && mp_thin())
        return;
    setenv("WEFT_SHM_RING", "65536", 1);
    CHECKF(mp_run(4, 60, mixed, NULL) == 0, "mixed, one host");
    unsetenv("WEFT_SHM_RING");
    if (tcp_run)
        return; /* that was all TCP already */
    mp_ranks_per_host = 2;
    CHECKF(mp_run(4, 60, mixed, NULL) == 0, "mixed, two hosts");
    mp_ranks_per_host = 0;
}

BOTH(default_ring)
{
    if (tcp_run)
        return; /* nothing to choose */
    setenv("WEFT_SHM_CMA", "1", 1);
    CHECKF(mp_run(2, 60, default_ring, &mid_count) == 0, "large messages by default");
    setenv("WEFT_SHM_CMA", "2", 1);
}

/* WEFT_SHM_CMA=1, so that only registered sends are copied out of the
 * sender's memory (and counted) */
BOTH(registered)
{
    setenv("WEFT_SHM_CMA", "1", 1);
    CHECKF(mp_run(2, 60, registered, NULL) == 0, "registered memory");
    CHECKF(mp_run(2, 60, registered_both_ways, NULL) == 0, "registered memory both ways");
    CHECKF(mp_run(2, 20, registered_dead, NULL) == 0, "registered memory, dead peer");
    CHECKF(mp_run(2, 60, registered_shared, NULL) == 0, "registered memory, shared copies");
    CHECKF(mp_run(2, 20, registered_shared_dead, NULL) == 0,
           "registered memory, shared copy, dead peer");
    /* (the filter that refuses the sender's fd breaks libfabric's shm
     * provider, which reads other processes too, as under cma_denied) */
    if (!ofi_run())
        CHECKF(mp_run(2, 60, registered_denied, NULL) == 0, "registered memory refused");
    CHECKF(mp_run(1, 20, registered_alone, NULL) == 0, "registered memory, one rank");
    setenv("WEFT_SHM_CMA", "2", 1);
}

/* The receiver's copy out of a region, streamed (from 4 KiB here, half
 * the last-level cache by default) and not: every byte, none beyond,
 * whatever the two ends' alignment and the length's tail. */
TEST(reg_copy)
{
    p2p_reg *g = p2p_reg_new(2);
    size_t cap = (256u << 10) + 256;
    unsigned char *src = malloc(cap), *dst = malloc(cap + 128);
    CHECK(g && src && dst);
    for (size_t i = 0; i < cap; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    static const size_t len[] = { 100, 4096, 4097, 65536 + 63, 256u << 10 };
    for (int stream = 0; stream < 2; stream++) {
        p2p_reg_stream_from(g, stream ? 4096 : 0);
        for (int k = 0; k < 5; k++)
            for (size_t so = 0; so < 64; so += 13)
                for (size_t d = 0; d < 64; d += 9) {
                    memset(dst, 0xee, cap + 128);
                    p2p_reg_copy(g, dst + d, src + so, len[k], len[k]);
                    int ok = !memcmp(dst + d, src + so, len[k]) && dst[d + len[k]] == 0xee &&
                             (d == 0 || dst[d - 1] == 0xee);
                    CHECKF(ok, "%s copy of %zu bytes, source +%zu, destination +%zu",
                           stream ? "streamed" : "plain", len[k], so, d);
                }
    }
    p2p_reg_free_all(g);
    free(src);
    free(dst);
}

/* (libfabric's shm provider reads other processes too: not there) */
BOTH(cma_denied)
{
    if (!ofi_run())
        CHECKF(mp_run(2, 60, cma_denied, &large_count) == 0, "single copy refused");
}
