/* The CATS metric levels above the raw values (docs/CPN.md, "Scores"):
 * each L1 score is in (0, 1], higher is better, and saturates around a
 * reference value so that one huge figure cannot swamp the rest; L2 is
 * the weighted mean of the L1 scores a cluster has. */
#include "cpn/cpn_cluster.h"

/* the references: where a category scores one half */
#define REF_GFLOPS 1000.0 /* a cluster's fp32 GFLOP/s (cores x peak x speed) */
#define REF_GBPS 10.0     /* intra-cluster all-reduce bus bandwidth, Gbit/s */
#define REF_PRICE 0.05    /* per core-hour */
#define REF_CARBON 400.0  /* gCO2 per kWh */

static const double weights[CPN_L1_N] = { 0.4, 0.2, 0.2, 0.2 };

/* up: more is better (x / (x + ref)); else less is (ref / (x + ref)) */
static double saturate(double x, double ref, int up)
{
    if (x < 0)
        x = 0;
    return up ? x / (x + ref) : ref / (x + ref);
}

void cpn_cluster_score(cpn_cluster *c)
{
    double peak = cpn_metric_value(c, "peak_fp32_gflops_per_core", -1);
    double speed = cpn_metric_value(c, "speed", 1);
    double gbps = cpn_metric_value(c, "allreduce_beta_gbps", -1);
    double price = cpn_metric_value(c, "price_per_core_hour", -1);
    double carbon = cpn_metric_value(c, "gco2_per_kwh", -1);
    c->l1[CPN_L1_COMPUTE] = peak > 0 ? saturate(peak * speed * cpn_cluster_cores(c),
                                                REF_GFLOPS, 1) : -1;
    c->l1[CPN_L1_NETWORK] = gbps > 0 ? saturate(gbps, REF_GBPS, 1) : -1;
    c->l1[CPN_L1_PRICE] = price >= 0 ? saturate(price, REF_PRICE, 0) : -1;
    c->l1[CPN_L1_CARBON] = carbon >= 0 ? saturate(carbon, REF_CARBON, 0) : -1;
    double sum = 0, wsum = 0;
    for (int i = 0; i < CPN_L1_N; i++)
        if (c->l1[i] >= 0) {
            sum += weights[i] * c->l1[i];
            wsum += weights[i];
        }
    c->l2 = wsum > 0 ? sum / wsum : 0;
}
