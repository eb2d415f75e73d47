/* auto across clusters: the selector prices links between clusters with
 * the WAN's own constants (here the emulated link's delay and rate), so a
 * large all-reduce goes to hier, whose upper level is then the cluster:
 * a reduce-scatter inside each cluster, every rank the gateway of its
 * slice across the WAN, an all-gather inside. The result is right, the
 * same bits on every rank, and each rank's wan bytes are within 2% of the
 * least, 2(C-1)/C of its 1/L slice. */
#include "mp.h"
#include "coll/comm.h"
#include "coll/tune/tuner.h"

#include <stdlib.h>
#include <string.h>

TEST_TIMEOUT(120);

typedef struct {
    int clusters, per, per_host; /* per_host: ranks a host inside a cluster (0: one host) */
    int uneven;                  /* the last cluster is short: no least to check */
    size_t n;                    /* floats */
} auto_case;

/* Wan bytes of one barrier, which crosses too, to take out of a count. */
static uint64_t barrier_wan(weft_comm *c)
{
    uint64_t a, b;
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &a));
    CHECK(!weft_barrier(c));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &b));
    return (b - a) / 2;
}

static void auto_rank(weft_comm *c, void *arg)
{
    const auto_case *ac = arg;
    int p = weft_comm_size(c), r = weft_comm_rank(c), C = ac->clusters, L = ac->per;
    size_t n = ac->n;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(i % 13) - 6 + r);
    uint64_t bar = barrier_wan(c), a, b;
    CHECK(!weft_comm_wan_bytes(c, &a));
    CHECK(!weft_allreduce(c, x, y, n, WEFT_F32, WEFT_SUM));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &b));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += y[i] != (float)(p * ((int)(i % 13) - 6) + p * (p - 1) / 2);
    CHECKF(wrong == 0, "%zu of %zu wrong", wrong, n);
    memcpy(z, y, n * sizeof *z);
    CHECK(!weft_broadcast(c, z, n, WEFT_F32, 0));
    CHECK(!memcmp(y, z, n * sizeof *z));
    /* the communicator's own selector made the choice */
    CHECK(c->tune != NULL);
    if (c->tune) {
        weft_algo big = coll_tuner_select(c->tune, WEFT_COLL_ALLREDUCE, n * 4, 4);
        CHECKF(big == WEFT_ALGO_HIER, "%zu floats over %d clusters: auto chose %s", n, C,
               weft_algo_name(big));
        if (r == 0) {
            double secs[WEFT_ALGO_COUNT];
            for (uint64_t s = 8; s <= (64u << 20); s *= 64) {
                weft_algo w = coll_tuner_predict(c->tune, WEFT_COLL_ALLREDUCE, s, 4, secs);
                printf("%d x %d: %10llu B predicted ring %.1f ms, rd %.1f ms, hier %.1f ms: %s\n",
                       C, L, (unsigned long long)s, secs[WEFT_ALGO_RING] * 1e3,
                       secs[WEFT_ALGO_RD] * 1e3, secs[WEFT_ALGO_HIER] * 1e3, weft_algo_name(w));
            }
        }
    }
    if (ac->uneven)
        goto out;
    double least = 2.0 * (C - 1) / C * (double)n / L * sizeof(float);
    double wan = (double)(b - a) - (double)bar;
    CHECKF(wan >= least * 0.99 && wan <= least * 1.02, "%d x %d: %.0f wan bytes, least %.0f", C,
           L, wan, least);
    if (r == 0)
        printf("%d clusters x %d ranks (%s), %zu floats: %.0f wan bytes per rank, least %.0f "
               "(+%.2f%%)\n", C, L, ac->per_host ? "a host each" : "one host a cluster", n, wan,
               least, 100 * (wan / least - 1));
out:
    free(x);
    free(y);
    free(z);
}

static int auto_job(const auto_case *ac)
{
    setenv("WEFT_WAN", "delay=5ms,rate=1gbit", 1);
    setenv("WEFT_AUTOTUNE", "0", 1); /* the model's choice, not a timed trial's */
    mp_ranks_per_cluster = ac->per;
    mp_ranks_per_host = ac->per_host;
    int bad = mp_run(ac->clusters * ac->per - ac->uneven, 60, auto_rank, (void *)ac);
    mp_ranks_per_cluster = mp_ranks_per_host = 0;
    unsetenv("WEFT_AUTOTUNE");
    unsetenv("WEFT_WAN");
    return bad;
}

/* one host a cluster: hosts and clusters are the same level */
TEST(auto_picks_hier_2x2)
{
    auto_case ac = { 2, 2, 0, 0, (size_t)1 << 20 };
    CHECK(auto_job(&ac) == 0);
}

/* 3 clusters of 2 hosts each: hier's upper level is the cluster, not the
 * host, or the WAN would carry more than the least */
TEST(auto_picks_hier_3x2_hosts)
{
    auto_case ac = { 3, 2, 1, 0, (size_t)3 << 18 };
    CHECK(auto_job(&ac) == 0);
}

/* clusters of 3 and 2 ranks: the slices are shared out unevenly, and the
 * result is still right everywhere */
TEST(auto_hier_uneven_clusters)
{
    auto_case ac = { 2, 3, 0, 1, (size_t)1 << 19 };
    CHECK(auto_job(&ac) == 0);
}
