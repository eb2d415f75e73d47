/* The reduction order of each algorithm, as far as bits are concerned. */
#include "coll/tune/same_bits.h"

static int reduces(weft_coll_kind kind)
{
    return kind == WEFT_COLL_ALLREDUCE || kind == WEFT_COLL_REDUCE ||
           kind == WEFT_COLL_REDUCE_SCATTER;
}

/* Folds every element left to right in rank order, x0 op x1 op ... op
 * x(p-1): naive's schedules (coll/sched/naive.c) and flat's board and pipe
 * (coll/local/flat.c, flat_pipe.c). tests/mp/test_repro checks the claim. */
static int rank_order(weft_algo a)
{
    return a == WEFT_ALGO_NAIVE || a == WEFT_ALGO_FLAT;
}

int tune_same_bits(weft_algo a, weft_algo b, weft_coll_kind kind, int nranks)
{
    if (a == b || !reduces(kind))
        return 1;
    /* two terms: every algorithm computes x0 op x1 or x1 op x0, and every
     * op weft has is commutative in IEEE arithmetic, bit for bit */
    if (nranks <= 2)
        return 1;
    return rank_order(a) && rank_order(b);
}
