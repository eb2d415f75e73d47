/* Clusters and the emulated WAN: WEFT_CLUSTER places ranks in clusters
 * that every rank learns (and a split keeps), links are classed shm, lan
 * and wan, ranks of different clusters never share memory; with WEFT_WAN
 * a message between clusters takes at least the one-way delay each way
 * and at least its size over the rate, within a cluster nothing is
 * delayed or counted, and the wan bytes of a compressed all-reduce are the
 * codec's. Times are asserted only from below. */
#include "mp.h"
#include "coll/compress.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

TEST_TIMEOUT(120);

/* 4 ranks, 2 per cluster, on one machine (one host id each cluster) */
static void placement_rank(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c), p = weft_comm_size(c);
    int per_host = arg ? *(int *)arg : 0;
    CHECK(weft_comm_cluster_count(c) == 2);
    for (int q = 0; q < p; q++) {
        CHECK(weft_comm_cluster_of(c, q) == q / 2);
        int want = q / 2 != r / 2 ? WEFT_LINK_WAN
                   : q == r || !per_host ? WEFT_LINK_SHM
                                         : WEFT_LINK_LAN;
        CHECKF(weft_comm_link_class(c, q) == want, "rank %d to %d: class %d, want %d", r, q,
               weft_comm_link_class(c, q), want);
    }
    CHECK(weft_comm_cluster_of(c, p) == WEFT_EINVAL);
    CHECK(weft_comm_link_class(c, -1) == WEFT_EINVAL);
    /* different clusters are different hosts, whatever the host ids say */
    CHECK(weft_comm_host_count(c) == (per_host ? 4 : 2));
    CHECK(weft_comm_host_of(c, 0) != weft_comm_host_of(c, 2));
    /* a split across clusters keeps them: {0, 2} and {1, 3} */
    weft_comm *s = NULL;
    CHECK(!weft_comm_split(c, r % 2, r, &s));
    if (s) {
        CHECK(weft_comm_cluster_count(s) == 2);
        CHECK(weft_comm_cluster_of(s, 0) == 0 && weft_comm_cluster_of(s, 1) == 1);
        CHECK(weft_comm_link_class(s, 1 - weft_comm_rank(s)) == WEFT_LINK_WAN);
        float x = (float)r, y;
        CHECK(!weft_allreduce(s, &x, &y, 1, WEFT_F32, WEFT_SUM));
        CHECK(y == (float)(r % 2 == 0 ? 2 : 4));
    }
    weft_comm_destroy(s);
    /* and a collective across them works */
    int v = r, sum;
    CHECK(!weft_allreduce(c, &v, &sum, 1, WEFT_I32, WEFT_SUM) && sum == 6);
}

TEST(placement_and_classes)
{
    mp_ranks_per_cluster = 2;
    CHECK(mp_run(4, 30, placement_rank, NULL) == 0);
    mp_ranks_per_host = 1;
    int per_host = 1;
    CHECK(mp_run(4, 30, placement_rank, &per_host) == 0);
    mp_ranks_per_host = 0;
    mp_ranks_per_cluster = 0;
}

static void no_clusters_rank(weft_comm *c, void *arg)
{
    CHECK(weft_comm_cluster_count(c) == 1);
    CHECK(weft_comm_cluster_of(c, 1) == 0);
    CHECK(weft_comm_link_class(c, 1 - weft_comm_rank(c)) == WEFT_LINK_SHM);
    uint64_t b = 1;
    CHECK(!weft_comm_wan_bytes(c, &b) && b == 0);
}

TEST(no_clusters)
{
    CHECK(mp_run(2, 30, no_clusters_rank, NULL) == 0);
}

#define DELAY 0.05
#define RATE (100e6 / 8)

/* 2 clusters x 2 ranks, WEFT_WAN=delay=50ms,rate=100mbit. */
static void wan_rank(weft_comm *c, void *arg)
{
    int r = weft_comm_rank(c);
    uint64_t b0, b1;
    char x[64] = { 0 };
    /* connections first, so handshakes are not timed */
    CHECK(!weft_barrier(c));
    if (r == 0 || r == 2) {
        int peer = 2 - r;
        CHECK(!weft_send(c, x, sizeof x, WEFT_U8, peer));
        CHECK(!weft_recv(c, x, sizeof x, WEFT_U8, peer));
        /* round trips over the WAN: two one-way delays each */
        double t = mp_now_s();
        for (int i = 0; i < 3; i++) {
            if (r == 0) {
                CHECK(!weft_send(c, x, sizeof x, WEFT_U8, peer));
                CHECK(!weft_recv(c, x, sizeof x, WEFT_U8, peer));
            } else {
                CHECK(!weft_recv(c, x, sizeof x, WEFT_U8, peer));
                CHECK(!weft_send(c, x, sizeof x, WEFT_U8, peer));
            }
        }
        /* rank 0 starts each round trip; rank 2's clock starts late */
        double rtt = (mp_now_s() - t) / 3;
        if (r == 0) {
            CHECKF(rtt >= 2 * DELAY, "round trip %.4f s < %.3f s", rtt, 2 * DELAY);
            printf("wan round trip %.1f ms (one-way delay %.0f ms)\n", rtt * 1e3, DELAY * 1e3);
        }
    } else {
        /* within the cluster: nothing delayed, nothing counted as wan */
        int other = r - 1; /* rank 0 or 2: same cluster */
        CHECK(!weft_comm_wan_bytes(c, &b0));
        CHECK(weft_comm_link_class(c, other) != WEFT_LINK_WAN);
    }
    CHECK(!weft_barrier(c));
    /* the rate: 2 MB from rank 1 to rank 3 take at least their size over
     * the rate, less one burst */
    size_t big = 2u << 20;
    char *buf = malloc(big);
    memset(buf, r, big);
    CHECK(!weft_comm_wan_bytes(c, &b0));
    /* rank 3's clock starts before rank 1 sends: rank 1 waits for its
     * word (a loaded machine can let rank 3 out of the barrier late) */
    double t = mp_now_s();
    char go = 1;
    if (r == 1) {
        CHECK(!weft_recv(c, &go, 1, WEFT_U8, 3));
        CHECK(!weft_send(c, buf, big, WEFT_U8, 3));
    }
    if (r == 3) {
        CHECK(!weft_send(c, &go, 1, WEFT_U8, 1));
        CHECK(!weft_recv(c, buf, big, WEFT_U8, 1));
        /* the rate is per connection, so per stream under WEFT_WAN_STREAMS */
        const char *k = getenv("WEFT_WAN_STREAMS");
        int streams = k && atoi(k) > 1 ? atoi(k) : 1;
        double dt = mp_now_s() - t, least = ((double)big - 64e3 * streams) / (RATE * streams);
        CHECKF(dt >= least, "2 MiB in %.3f s, faster than the rate allows (%.3f s)", dt, least);
        CHECK(buf[0] == 1 && buf[big - 1] == 1);
        printf("2 MiB over the wan in %.3f s (%.1f MB/s; rate %.1f MB/s)\n", dt,
               (double)big / dt / 1e6, RATE / 1e6);
    }
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &b1));
    if (r == 1)
        CHECKF(b1 - b0 >= big, "wan bytes %llu", (unsigned long long)(b1 - b0));
    /* rank 0 sends 1 MB to rank 1 within cluster 0: no wan bytes */
    CHECK(!weft_comm_wan_bytes(c, &b0));
    if (r == 0)
        CHECK(!weft_send(c, buf, big / 2, WEFT_U8, 1));
    if (r == 1)
        CHECK(!weft_recv(c, buf, big / 2, WEFT_U8, 0));
    CHECK(!weft_comm_wan_bytes(c, &b1));
    if (r == 0)
        CHECKF(b1 - b0 < 4096, "within the cluster: %llu wan bytes", (unsigned long long)(b1 - b0));
    free(buf);
    /* two all-reduces in a row: the second's input from the other cluster
     * leaves after that cluster had this rank's first input, so they take
     * two one-way delays at least */
    t = mp_now_s();
    float v = 1, w;
    CHECK(!weft_allreduce(c, &v, &w, 1, WEFT_F32, WEFT_SUM) && w == 4);
    CHECK(!weft_allreduce(c, &w, &v, 1, WEFT_F32, WEFT_SUM) && v == 16);
    CHECKF(mp_now_s() - t >= 2 * DELAY, "two all-reduces in %.4f s", mp_now_s() - t);
}

/* A job of n ranks, per_cluster to a cluster, under WEFT_WAN=spec: the
 * number of ranks that failed. */
static int wan_job(const char *spec, int n, int per_cluster, mp_fn fn)
{
    setenv("WEFT_WAN", spec, 1);
    mp_ranks_per_cluster = per_cluster;
    int bad = mp_run(n, 60, fn, NULL);
    mp_ranks_per_cluster = 0;
    unsetenv("WEFT_WAN");
    return bad;
}

TEST(wan_delay_and_rate)
{
    CHECK(wan_job("delay=50ms,rate=100mbit", 4, 2, wan_rank) == 0);
}

/* The wan bytes of compressed all-reduces: int8 sends about a quarter of
 * fp32, int4 an eighth (plus frame headers and scales). */
static void codec_wan_rank(weft_comm *c, void *arg)
{
    size_t n = 1 << 16;
    float *x = malloc(n * sizeof *x);
    uint64_t wb[WEFT_CODEC_COUNT] = { 0 }, sent[WEFT_CODEC_COUNT] = { 0 };
    for (size_t i = 0; i < n; i++)
        x[i] = sinf((float)i);
    CHECK(!weft_barrier(c));
    for (int k = 0; k < WEFT_CODEC_COUNT; k++) {
        uint64_t a, b;
        CHECK(!weft_barrier(c));
        CHECK(!weft_comm_wan_bytes(c, &a));
        CHECK(!weft_allreduce_codec(c, x, x, n, WEFT_AVG, (weft_codec)k, &sent[k]));
        CHECK(!weft_barrier(c));
        CHECK(!weft_comm_wan_bytes(c, &b));
        wb[k] = b - a;
    }
    /* 2 ranks, one per cluster: everything the ring sends crosses */
    for (int k = 0; k < WEFT_CODEC_COUNT; k++) {
        CHECKF(wb[k] >= sent[k] && wb[k] < sent[k] + 4096, "%s: %llu wan bytes for %llu sent",
               weft_codec_name((weft_codec)k), (unsigned long long)wb[k],
               (unsigned long long)sent[k]);
        if (weft_comm_rank(c) == 0)
            printf("%s: %llu wan bytes (fp32 / this = %.2f)\n", weft_codec_name((weft_codec)k),
                   (unsigned long long)wb[k], (double)wb[0] / (double)wb[k]);
    }
    free(x);
}

TEST(codec_wan_bytes)
{
    CHECK(wan_job("delay=2ms", 2, 1, codec_wan_rank) == 0);
}

/* One rank per cluster and more than two clusters: the codec all-reduce
 * goes direct (two crossings, not 2(p - 1)). Its bytes tell it from the
 * ring where the chunks are uneven: each owner receives its own chunk from
 * every peer and sends it back to every peer, where the ring sends every
 * chunk but (r + 1) and every chunk but (r + 2). Each term is quantised
 * once and the sum once, and the owner's bytes are what everyone decodes. */
static void direct_rank(weft_comm *c, void *arg)
{
    int p = weft_comm_size(c), r = weft_comm_rank(c);
    size_t sizes[] = { 3, 1000, 20011 };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int k = 0; k < WEFT_CODEC_COUNT; k++) {
            size_t n = sizes[s];
            weft_op op = k % 2 ? WEFT_AVG : WEFT_SUM;
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
            double worst = 0;
            for (size_t i = 0; i < n; i++)
                x[i] = sinf((float)(i * (size_t)(r + 1))) * (float)(1 + i % 5);
            uint64_t sent = 0, want = 0;
            CHECK(!weft_allreduce_codec(c, x, y, n, op, (weft_codec)k, &sent));
            for (size_t i = 0; i < n; i++) {
                double e = 0;
                for (int q = 0; q < p; q++)
                    e += sinf((float)(i * (size_t)(q + 1))) * (float)(1 + i % 5);
                worst = fmax(worst, fabs(y[i] - e / (op == WEFT_AVG ? p : 1)));
            }
            /* |term| <= 5: p terms at half a step each, the sum at half a step */
            double m = 5.0 * p, bound = k == WEFT_CODEC_FP32 ? 1e-5 * m
                                      : k == WEFT_CODEC_FP16 ? m * 0x1p-11 * 2
                                      : k == WEFT_CODEC_BF16 ? m * 0x1p-8 * 2
                                      : k == WEFT_CODEC_INT8 ? m / 127.0 / 2 * 2
                                                             : m / 7.0 / 2 * 2;
            CHECKF(worst <= bound, "%s n=%zu: error %g > %g", weft_codec_name((weft_codec)k), n,
                   worst, bound);
            for (int j = 0; j < p; j++) {
                size_t len = compress_chunk_start(n, p, j + 1) - compress_chunk_start(n, p, j);
                want += j == r ? 0 : weft_codec_bytes((weft_codec)k, len);
            }
            size_t ml = compress_chunk_start(n, p, r + 1) - compress_chunk_start(n, p, r);
            want += (uint64_t)(p - 1) * weft_codec_bytes((weft_codec)k, ml);
            CHECKF(sent == want, "%s n=%zu: %llu bytes sent, direct sends %llu",
                   weft_codec_name((weft_codec)k), n, (unsigned long long)sent,
                   (unsigned long long)want);
            memcpy(x, y, n * sizeof *x);
            CHECK(!weft_broadcast(c, x, n, WEFT_F32, 0));
            int same = !memcmp(x, y, n * sizeof *x), all = 0;
            CHECK(!weft_allreduce(c, &same, &all, 1, WEFT_I32, WEFT_MIN));
            CHECKF(all, "%s n=%zu: not the same bits everywhere", weft_codec_name((weft_codec)k), n);
            free(x);
            free(y);
        }
}

TEST(codec_direct_across_clusters)
{
    CHECK(wan_job("delay=1ms", 3, 1, direct_rank) == 0);
    CHECK(wan_job("delay=1ms", 4, 1, direct_rank) == 0);
}

static void never_rank(weft_comm *c, void *arg)
{
    CHECK(0); /* init must have refused */
}

TEST(bad_wan_value)
{
    CHECK(wan_job("delay=fast", 2, 1, never_rank) == 2);
    CHECK(wan_job("rate=0mbit", 2, 1, never_rank) == 2);
}

/* The all-reduce over clusters: right, the same bits everywhere, and its
 * wan bytes per rank within 2% of the least an all-reduce over C clusters
 * can send, 2(C-1)/C of a rank's 1/L slice (frame headers are the rest). */
typedef struct {
    int clusters, per;
    weft_codec k;
} hier_case;

static void hier_rank(weft_comm *c, void *arg)
{
    const hier_case *hc = arg;
    int p = weft_comm_size(c), r = weft_comm_rank(c), C = hc->clusters, L = hc->per;
    size_t n = (size_t)C * L * 16384; /* large enough that frame headers stay under 1% */
    weft_cluster_comm *h;
    CHECK(!weft_cluster_comm_create(&h, c));
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int)(i % 11) - 5 + r);
    uint64_t a, b, sent = 0;
    /* barriers cross the WAN too: take one out as its own bytes */
    uint64_t c0, c1;
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &c0));
    CHECK(!weft_barrier(c));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &c1));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &a));
    CHECK(!weft_cluster_allreduce(h, x, y, n, WEFT_SUM, hc->k, &sent));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &b));
    size_t wrong = 0;
    for (size_t i = 0; i < n && hc->k == WEFT_CODEC_FP32; i++)
        wrong += y[i] != (float)(p * ((int)(i % 11) - 5) + p * (p - 1) / 2);
    CHECKF(wrong == 0, "%zu wrong", wrong);
    /* the same bits everywhere */
    float *z = malloc(n * sizeof *z);
    memcpy(z, y, n * sizeof *z);
    CHECK(!weft_broadcast(c, z, n, WEFT_F32, 0));
    CHECK(!memcmp(y, z, n * sizeof *z));
    double least = 2.0 * (C - 1) / C * (double)(n / (size_t)L) * (double)weft_codec_bytes(hc->k, 1 << 20) / (1 << 20);
    double wan = (double)(b - a) - (double)(c1 - c0) / 2;
    CHECKF(wan >= least * 0.99 && wan <= least * 1.02, "%d x %d %s: %.0f wan bytes, least %.0f",
           C, L, weft_codec_name(hc->k), wan, least);
    if (r == 0)
        printf("%d clusters x %d ranks, %zu floats, %s: %.0f wan bytes per rank (least %.0f, "
               "+%.2f%%); a flat fp32 ring sends %llu from each rank at a wan hop\n",
               C, L, n, weft_codec_name(hc->k), wan, least, 100 * (wan / least - 1),
               (unsigned long long)compress_ring_bytes(p, r, n, 4));
    weft_cluster_comm_destroy(h);
    free(x);
    free(y);
    free(z);
}

TEST(cluster_allreduce_wan_bytes)
{
    hier_case cases[] = { { 2, 2, WEFT_CODEC_FP32 }, { 2, 3, WEFT_CODEC_FP32 },
                          { 3, 2, WEFT_CODEC_INT8 } };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("WEFT_WAN", "delay=1ms", 1);
        mp_ranks_per_cluster = cases[i].per;
        CHECK(mp_run(cases[i].clusters * cases[i].per, 60, hier_rank, &cases[i]) == 0);
        mp_ranks_per_cluster = 0;
        unsetenv("WEFT_WAN");
    }
}

static void uneven_rank(weft_comm *c, void *arg)
{
    weft_cluster_comm *h = NULL;
    CHECK(weft_cluster_comm_create(&h, c) == WEFT_ENOTSUP && h == NULL);
}

TEST(cluster_allreduce_uneven)
{
    mp_ranks_per_cluster = 2; /* 3 ranks: clusters of 2 and 1 */
    CHECK(mp_run(3, 30, uneven_rank, NULL) == 0);
    mp_ranks_per_cluster = 0;
}

/* PowerSGD's ratio measured on the wire: the wan bytes of one PowerSGD
 * all-reduce of a 1024 x 512 matrix at rank 4 against those of the f32
 * ring all-reduce of the same buffer, one rank per cluster: m n / ((m + n)
 * r) = 85.3, within what frame headers add. */
enum { WM = 1024, WN = 512, WR = 4 };

static void powersgd_wire_rank(weft_comm *c, void *arg)
{
    size_t n = (size_t)WM * WN;
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++)
        g[i] = sinf((float)i * 0.001f) + (float)weft_comm_rank(c);
    weft_compress_spec s;
    weft_compressor *z;
    CHECK(!weft_compress_parse("powersgd:4", &s));
    CHECK(!weft_compressor_create(&z, c, &s, n));
    CHECK(!weft_compressor_add_matrix(z, 0, WM, WN));
    uint64_t a, b, d;
    weft_coll_args ar = { .kind = WEFT_COLL_ALLREDUCE, .send = g, .recv = g, .count = n,
                          .dtype = WEFT_F32, .op = WEFT_SUM, .algo = WEFT_ALGO_RING };
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &a));
    CHECK(!weft_collective(c, &ar));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &b));
    CHECK(!weft_compressor_allreduce(z, g, WEFT_AVG));
    CHECK(!weft_barrier(c));
    CHECK(!weft_comm_wan_bytes(c, &d));
    double ratio = (double)(b - a) / (double)(d - b), want = (double)WM * WN / ((WM + WN) * WR);
    CHECKF(fabs(ratio / want - 1) < 0.03, "wire ratio %.2f, want %.2f", ratio, want);
    if (weft_comm_rank(c) == 0)
        printf("powersgd:%d %dx%d on the wire: f32 %llu B, powersgd %llu B: %.2fx "
               "(mn/((m+n)r) = %.2f)\n", WR, WM, WN, (unsigned long long)(b - a),
               (unsigned long long)(d - b), ratio, want);
    weft_compressor_destroy(z);
    free(g);
}

TEST(powersgd_wire_ratio)
{
    CHECK(wan_job("delay=0ms", 2, 1, powersgd_wire_rank) == 0);
}
