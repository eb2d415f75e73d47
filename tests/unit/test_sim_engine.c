/* The simulator against numbers worked out by hand: one message's alpha-
 * beta-gamma cost, max-min sharing, folding that changes nothing when it
 * is exact, extrapolation in the size, the shape of ring and tree latency,
 * WAN links, and the topology text format. */
#include "test.h"
#include "sim/sim.h"
#include "sim/net.h"
#include "sim/prog.h"

#include <math.h>
#include <string.h>

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b) + 1e-9; }

static sim_topo tiny(int rpn, double lat, double bw, double ovh)
{
    sim_topo t;
    char err[128];
    sim_topo_parse(&t, "name tiny\n", err, sizeof err);
    t.ranks_per_node = rpn;
    t.nodes_per_pod = 1000;
    t.lc[LC_INTRA] = (sim_lclass_t){ lat, bw, ovh };
    t.lc[LC_NIC] = (sim_lclass_t){ 10 * lat, bw / 2, 2 * ovh };
    t.reduce_GBps = 1;
    t.copy_GBps = 1e6;
    t.local_us = 0;
    return t;
}

static double run(const sim_topo *t, int algo, int p, uint64_t count, int no_fold,
                  uint64_t budget, sim_result *r)
{
    sim_job j = { .topo = t, .algo = algo, .kind = WEFT_COLL_ALLREDUCE, .nranks = p,
                  .count = count, .esize = 4, .no_fold = no_fold, .op_budget = budget };
    char err[256] = "";
    sim_result tmp;
    if (!r)
        r = &tmp;
    int rc = sim_run(&j, r, err, sizeof err);
    CHECKF(rc == 0, "sim_run %s p=%d: %s", sim_algo_name(algo), p, err);
    return rc ? -1 : r->time_us;
}

/* Ring all-reduce over 2 ranks: a reduce-scatter round and an all-gather
 * round, each one message of half the data. */
TEST(alpha_beta_gamma)
{
    sim_topo t = tiny(2, 1.0, 1.0, 2.0); /* 1 us, 1 GB/s = 1000 B/us, o = 2 us */
    sim_result r;
    double T = run(&t, WEFT_ALGO_RING, 2, 2000, 1, 0, &r);
    /* 2 (o + L + 4000 B / bw) + 4000 B / reduce speed = 2 (2+1+4) + 4 */
    CHECKF(near(T, 18.0, 1e-9), "ring p=2: %g us, want 18", T);
    CHECKF(near(r.algbw_GBps, 8000.0 / 18e3, 1e-9), "algbw %g", r.algbw_GBps);
    CHECKF(near(r.busbw_GBps, r.algbw_GBps, 1e-9), "busbw factor of 2 ranks is 1");
    /* both intra links of each rank carried 4000 B twice */
    CHECKF(near(r.bytes[LC_INTRA], 2 * 2 * 2 * 4000.0, 1e-9), "intra bytes %g", r.bytes[LC_INTRA]);
    CHECK(r.util[LC_NIC] == 0 && r.util[LC_POD] < 0); /* idle; absent (no capacity) */
}

/* Flows A (link X), B (X and Y), C (Y); X = 1, Y = 2 bytes/us. Max-min:
 * A = B = 0.5 on X, C takes the rest of Y, 1.5; when A and C end at t = 2,
 * B has 1 byte left and runs at 1. */
TEST(maxmin)
{
    net n;
    CHECK(sim_net_init(&n, 2) == 0);
    n.links[0].cap = 1;
    n.links[1].cap = 2;
    int32_t x[] = { 0 }, xy[] = { 0, 1 }, y[] = { 1 };
    int64_t a = sim_net_add(&n, 0, x, 1, 1.0, 1);
    int64_t b = sim_net_add(&n, 0, xy, 2, 2.0, 2);
    int64_t c = sim_net_add(&n, 0, y, 1, 3.0, 3);
    CHECK(a >= 0 && b >= 0 && c >= 0);
    CHECKF(near(n.flows[c].rate, 1.5, 1e-12) && near(n.flows[b].rate, 0.5, 1e-12),
           "rates %g %g %g", n.flows[a].rate, n.flows[b].rate, n.flows[c].rate);
    double t[3];
    int64_t order[3];
    for (int i = 0; i < 3; i++) {
        order[i] = sim_net_next(&n, &t[i]);
        CHECK(order[i] >= 0 && sim_net_finish(&n, t[i], (uint32_t)order[i]) == 0);
    }
    CHECKF(near(t[0], 2, 1e-12) && near(t[1], 2, 1e-12) && near(t[2], 3, 1e-12),
           "finish times %g %g %g", t[0], t[1], t[2]);
    CHECK(order[2] == b);
    CHECK(near(n.links[0].bytes, 3, 1e-12) && near(n.links[1].bytes, 5, 1e-12));
    double dummy;
    CHECK(sim_net_next(&n, &dummy) < 0);
    sim_net_free(&n);
}

/* Naive all-gather-like traffic: in the naive all-reduce each rank sends
 * a chunk to the 3 others at once, so its link gives each a third. */
TEST(sharing)
{
    sim_topo t = tiny(4, 1.0, 1.0, 0.0);
    t.reduce_GBps = 1e6;
    double T = run(&t, WEFT_ALGO_NAIVE, 4, 250, 1, 0, NULL);
    /* 1000 B to 3 peers over a 1000 B/us link: 3 us, + 1 us latency */
    CHECKF(near(T, 4.0, 1e-5), "naive p=4: %g us, want 4", T);
}

TEST(folding)
{
    sim_topo t;
    CHECK(sim_topo_preset(&t, "summit") == 0);
    sim_result a, b;
    double T1 = run(&t, WEFT_ALGO_RING, 48, 48 * 1000, 0, 0, &a);
    double T2 = run(&t, WEFT_ALGO_RING, 48, 48 * 1000, 1, 0, &b);
    CHECKF(a.fold == 6 && a.fold_exact, "fold %d exact %d", a.fold, a.fold_exact);
    CHECK(b.fold == 0);
    CHECKF(near(T1, T2, 1e-9), "folded %g, every rank %g", T1, T2);
    for (int c = 0; c < LC_COUNT; c++)
        CHECKF(near(a.bytes[c], b.bytes[c], 1e-9), "class %d bytes %g vs %g", c,
               a.bytes[c], b.bytes[c]);
    CHECKF(near(a.util[LC_NIC], b.util[LC_NIC], 1e-9), "nic util %g vs %g",
           a.util[LC_NIC], b.util[LC_NIC]);
    /* one element more than a multiple of p: symmetric up to 4 bytes */
    T1 = run(&t, WEFT_ALGO_RING, 48, 48 * 1000 + 1, 0, 0, &a);
    T2 = run(&t, WEFT_ALGO_RING, 48, 48 * 1000 + 1, 1, 0, &b);
    CHECKF(a.fold == 6 && !a.fold_exact && a.fold_err_us > 0, "fold %d exact %d",
           a.fold, a.fold_exact);
    CHECKF(fabs(T1 - T2) <= a.fold_err_us, "folded %g, every rank %g, bound %g", T1, T2,
           a.fold_err_us);
    /* trees are not shift-symmetric */
    run(&t, WEFT_ALGO_TREE, 48, 48 * 1000, 0, 0, &a);
    CHECK(a.fold == 0);
}

TEST(extrapolation)
{
    sim_topo t;
    CHECK(sim_topo_preset(&t, "summit") == 0);
    sim_result a, b;
    double T1 = run(&t, WEFT_ALGO_TREE, 24, 4u << 20, 1, 100000000, &a);
    double T2 = run(&t, WEFT_ALGO_TREE, 24, 4u << 20, 1, 2000, &b);
    CHECK(!a.extrapolated && b.extrapolated);
    CHECKF(near(T2, T1, 0.03), "extrapolated %g, simulated %g", T2, T1);
}

/* Ring latency grows with p, tree latency with log p (the seeds' point). */
TEST(shape)
{
    sim_topo t;
    CHECK(sim_topo_preset(&t, "summit") == 0);
    double r1 = run(&t, WEFT_ALGO_RING, 96, 2, 0, 0, NULL);
    double r4 = run(&t, WEFT_ALGO_RING, 384, 2, 0, 0, NULL);
    double t1 = run(&t, WEFT_ALGO_TREE, 96, 2, 0, 0, NULL);
    double t4 = run(&t, WEFT_ALGO_TREE, 384, 2, 0, 0, NULL);
    CHECKF(r4 / r1 > 3.5 && r4 / r1 < 4.5, "ring 8 B: %g -> %g us", r1, r4);
    CHECKF(t4 / t1 < 1.6 && t4 > t1, "tree 8 B: %g -> %g us", t1, t4);
    CHECKF(t4 < r4, "tree %g, ring %g", t4, r4);
}

TEST(wan)
{
    sim_topo t;
    CHECK(sim_topo_preset(&t, "wan2") == 0);
    sim_result r;
    double T = run(&t, WEFT_ALGO_RING, 16, 1 << 20, 0, 0, &r);
    /* the ring's dependency chain walks round the ring once per p steps
     * and crosses the WAN twice per lap: 30 steps, about 4 crossings */
    CHECKF(T > 3 * 10000.0 && T < 6 * 10000.0, "ring over WAN: %g us", T);
    /* each step moves one block each way over the two WAN links, counted
     * on the sending and on the receiving cluster's link */
    CHECKF(near(r.bytes[LC_WAN], 2.0 * 2 * 30 * (4 << 20) / 16, 1e-9), "WAN bytes %g",
           r.bytes[LC_WAN]);
    CHECK(r.util[LC_WAN] > 0 && r.util[LC_WAN] < 1);
    double Tt = run(&t, WEFT_ALGO_TREE, 16, 1 << 20, 0, 0, &r);
    CHECKF(Tt > 2 * 10000.0, "tree over WAN %g us: must cross there and back", Tt);
}

TEST(topo_text)
{
    for (int i = 0; sim_topo_presets[i]; i++) {
        sim_topo a, b;
        char err[128], buf[4096];
        CHECK(sim_topo_preset(&a, sim_topo_presets[i]) == 0);
        FILE *f = fmemopen(buf, sizeof buf, "w");
        sim_topo_write(&a, f);
        fclose(f);
        CHECKF(sim_topo_parse(&b, buf, err, sizeof err) == 0, "%s: %s", sim_topo_presets[i], err);
        CHECKF(memcmp(&a, &b, sizeof a) == 0, "%s does not round-trip", sim_topo_presets[i]);
    }
    sim_topo t;
    char err[128];
    CHECK(sim_topo_parse(&t, "ranks_per_node 4\nlink foo lat_us 1\n", err, sizeof err) ==
              WEFT_EINVAL && strstr(err, "line 2"));
    CHECK(sim_topo_parse(&t, "ranks_per_node 0\n", err, sizeof err) == WEFT_EINVAL);
    CHECK(sim_topo_parse(&t, "link nic lat_us -1\n", err, sizeof err) == WEFT_EINVAL);
    CHECK(sim_topo_parse(&t, "proto ring bw_eff 2\n", err, sizeof err) == WEFT_EINVAL);
    CHECK(sim_topo_parse(&t, "# comment\n\nclusters 2 # two\nlink wan lat_us 5000 bw_GBps 1\n",
                         err, sizeof err) == 0 && t.clusters == 2 &&
          t.lc[LC_WAN].lat_us == 5000);
    sim_place a, b;
    CHECK(sim_topo_preset(&t, "wan2") == 0);
    sim_topo_place(&t, 32, 15, &a);
    sim_topo_place(&t, 32, 16, &b);
    CHECK(a.cluster == 0 && b.cluster == 1 && a.node == 1 && b.node == 2);
}

