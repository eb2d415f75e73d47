/* An alpha-beta model of the two algorithms that exist so far: naive pays
 * one latency but moves (p-1) messages through each rank's link; the ring
 * pays 2(p-1) latencies but moves only 2(p-1)/p of the message. The
 * constants are this kind of host's loopback (a poll wake-up ~30 us, a
 * memory-bound ~2 GB/s per stream). */
#include "coll/select.h"

#define ALPHA_S 30e-6
#define BETA_S_PER_B (1.0 / 2e9)

static double cost(weft_algo a, weft_coll_kind k, double n, int p)
{
    double steps, bytes;
    int ring = a == WEFT_ALGO_RING;
    switch (k) {
    case WEFT_COLL_ALLREDUCE:
        steps = ring ? 2.0 * (p - 1) : 1;
        bytes = ring ? 2.0 * (p - 1) / p * n : (p - 1) * n;
        break;
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_BROADCAST:
        steps = ring ? (p - 2) + n / 524288.0 : 1;
        bytes = ring ? n : (p - 1) * n;
        break;
    default: /* block collectives: both move (p-1) blocks through a link */
        steps = ring ? p - 1 : 1;
        bytes = (p - 1) * n;
        if (!ring)
            bytes *= 1.5; /* every block at once: incast */
        break;
    }
    return steps * ALPHA_S + bytes * BETA_S_PER_B;
}

weft_algo coll_select(weft_coll_kind kind, uint64_t bytes, int nranks)
{
    if (nranks <= 2 || kind == WEFT_COLL_BARRIER)
        return WEFT_ALGO_RING;
    double n = (double)bytes;
    return cost(WEFT_ALGO_NAIVE, kind, n, nranks) < cost(WEFT_ALGO_RING, kind, n, nranks)
               ? WEFT_ALGO_NAIVE
               : WEFT_ALGO_RING;
}
