/* WEFT_WAN_STREAMS=4: every wan-class connection runs as 4 TCP streams
 * (transport/stripe.h). Collectives and point-to-point across clusters
 * give the right results, each wan peer this rank sent to has 4 streams
 * out and 4 in, links inside a cluster stay one connection, and a rank of
 * the other cluster that dies is seen as gone, not waited for until the
 * timeout. With and without the emulated WAN. */
#include "mp.h"
#include "coll/comm.h"
#include "transport/stripe.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TEST_TIMEOUT(120);

#define STREAMS 4

static void right_rank(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    size_t n = (size_t)1 << 20;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(i % 9) - 4 + r);
    weft_algo algos[] = { WEFT_ALGO_RING, WEFT_ALGO_HIER, WEFT_ALGO_AUTO };
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
        weft_coll_args ar = { .kind = WEFT_COLL_ALLREDUCE, .send = x, .recv = y, .count = n,
                              .dtype = WEFT_F32, .op = WEFT_SUM, .algo = algos[a] };
        CHECK(!weft_collective(c, &ar));
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += y[i] != (float)(p * ((int)(i % 9) - 4) + p * (p - 1) / 2);
        CHECKF(wrong == 0, "%s: %zu wrong", weft_algo_name(algos[a]), wrong);
    }
    /* point-to-point across: rank r and r + 2 swap 3 MiB + 5 bytes */
    size_t big = (3u << 20) + 5;
    unsigned char *s = malloc(big), *g = malloc(big);
    for (size_t i = 0; i < big; i++)
        s[i] = (unsigned char)(i * 7 + (size_t)r);
    int peer = (r + 2) % p;
    if (r < 2) {
        CHECK(!weft_send(c, s, big, WEFT_U8, peer));
        CHECK(!weft_recv(c, g, big, WEFT_U8, peer));
    } else {
        CHECK(!weft_recv(c, g, big, WEFT_U8, peer));
        CHECK(!weft_send(c, s, big, WEFT_U8, peer));
    }
    size_t bad = 0;
    for (size_t i = 0; i < big; i++)
        bad += g[i] != (unsigned char)(i * 7 + (size_t)peer);
    CHECKF(bad == 0, "%zu bytes wrong from rank %d", bad, peer);
    CHECK(!weft_barrier(c));
    /* the ring sends from rank 1 to 2 and from 3 to 0 across: 4 streams
     * each way; inside a cluster nothing is striped */
    int across = r == 1 ? 2 : r == 3 ? 0 : -1, from = r == 2 ? 1 : r == 0 ? 3 : -1;
    if (across >= 0)
        CHECKF(stripe_count(c->net.stripes, across, 1) == STREAMS, "rank %d: %d streams to %d",
               r, stripe_count(c->net.stripes, across, 1), across);
    if (from >= 0)
        CHECKF(stripe_count(c->net.stripes, from, 0) == STREAMS, "rank %d: %d streams from %d",
               r, stripe_count(c->net.stripes, from, 0), from);
    CHECK(stripe_count(c->net.stripes, r ^ 1, 1) == 0);
    free(x);
    free(y);
    free(s);
    free(g);
}

static int job(const char *wan, mp_fn fn, double timeout)
{
    setenv("WEFT_WAN_STREAMS", "4", 1);
    if (wan)
        setenv("WEFT_WAN", wan, 1);
    mp_ranks_per_cluster = 2;
    int bad = mp_run(4, timeout, fn, NULL);
    mp_ranks_per_cluster = 0;
    unsetenv("WEFT_WAN");
    unsetenv("WEFT_WAN_STREAMS");
    return bad;
}

TEST(streams_right_results)
{
    CHECK(job(NULL, right_rank, 60) == 0);
}

TEST(streams_through_the_emulated_wan)
{
    CHECK(job("delay=2ms,rate=1gbit", right_rank, 60) == 0);
}

/* Rank 3 dies after the first all-reduce; the others' next one fails
 * with the peer gone, well before the 30 s timeout would end it. */
static void dead_rank(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    float v[4096] = { 0 }, w[4096];
    weft_coll_args ar = { .kind = WEFT_COLL_ALLREDUCE, .send = v, .recv = w, .count = 4096,
                          .dtype = WEFT_F32, .op = WEFT_SUM, .algo = WEFT_ALGO_RING };
    CHECK(!weft_collective(c, &ar));
    CHECK(!weft_barrier(c));
    if (r == 3) {
        /* what it wrote last may still be in its streams' thread: let it
         * leave before dying (a process that dies loses what a user-space
         * pump holds, as with WEFT_WAN and TLS) */
        struct timespec nap = { 0, 200 * 1000 * 1000 };
        nanosleep(&nap, NULL);
        fflush(NULL);
        raise(SIGKILL);
    }
    int rc = weft_collective(c, &ar);
    CHECKF(rc != 0 && rc != WEFT_ETIMEDOUT, "rank %d: %s", r, weft_strerror(rc));
}

TEST(streams_dead_peer_seen)
{
    CHECK(job(NULL, dead_rank, 30) == 1); /* the killed rank only */
}
