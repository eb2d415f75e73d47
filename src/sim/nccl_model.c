/* NCCL's own cost model of an all-reduce, in the form of its tuner
 * (src/graph/tuning.cc): a fixed cost per call, a cost per hop by the
 * level the hop crosses, and the bytes at the protocol's share of the
 * slowest link. The simulator chooses a protocol with it, as NCCL does.
 * It shares the preset's constants with the simulation, so it is never a
 * reference for `weft-sim validate`: agreeing with it would check nothing. */
#include "sim/sim.h"

static int ceil_log2(int n)
{
    int l = 0;
    while ((1L << l) < n)
        l++;
    return l;
}

int sim_nccl_model(const sim_topo *t, int algo, int proto, int p, double bytes, double *us)
{
    if (algo < 0 || algo >= SIM_ALGO_COUNT || proto <= 0 || proto >= SIM_PROTO_COUNT ||
        !t->hop[algo][proto].defined || p < 1)
        return WEFT_ENOTSUP;
    const sim_hop *h = &t->hop[algo][proto];
    int k = p < t->ranks_per_node ? p : t->ranks_per_node, nodes = (p + k - 1) / k;
    double bw = t->lc[LC_INTRA].bw_GBps;
    if (nodes > 1 && (t->lc[LC_NIC].bw_GBps < bw || bw <= 0))
        bw = t->lc[LC_NIC].bw_GBps;
    bw *= t->protocol[proto].bw_eff * 1e3; /* bytes per us */
    double lat, moved;
    if (p == 1) {
        *us = 0;
        return 0;
    }
    if (algo == SIM_ALGO_NCCL_TREE) {
        /* up the chain and the nodes' tree, and down again */
        lat = 2 * ((k - 1) * h->intra_us + ceil_log2(nodes) * h->nic_us);
        moved = 2 * bytes;
    } else {
        /* 2(p-1) steps in a row; the ring leaves a node once in k steps */
        double steps = 2.0 * (p - 1), inter = nodes > 1 ? steps * nodes / p : 0;
        lat = (steps - inter) * h->intra_us + inter * h->nic_us;
        moved = 2.0 * (p - 1) / p * bytes;
    }
    *us = h->base_us + lat + (bw > 0 ? moved / bw : 0);
    return 0;
}
