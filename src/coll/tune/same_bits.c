/* The reduction order of each algorithm, as far as bits are concerned. */
#include "coll/tune/same_bits.h"
#include "coll/local/flat_board.h"

static int reduces(weft_coll_kind kind)
{
    return kind == WEFT_COLL_ALLREDUCE || kind == WEFT_COLL_REDUCE ||
           kind == WEFT_COLL_REDUCE_SCATTER;
}

/* Folds every element left to right in rank order, x0 op x1 op ... op
 * x(p-1): naive's schedules (coll/sched/naive.c) and flat's board and pipe
 * (coll/local/flat.c, flat_pipe.c). A reduce or reduce-scatter (p blocks)
 * that overflows a board slot flat hands to another algorithm, whose
 * order is that one's. tests/mp/test_same_bits checks the claim. */
static int rank_order(weft_algo a, weft_coll_kind kind, int nranks, uint64_t most)
{
    if (a == WEFT_ALGO_FLAT && kind != WEFT_COLL_ALLREDUCE)
        return most <= FLAT_SLOT / (kind == WEFT_COLL_REDUCE_SCATTER ? (uint64_t)nranks : 1);
    return a == WEFT_ALGO_NAIVE || a == WEFT_ALGO_FLAT;
}

int tune_same_bits(weft_algo a, weft_algo b, weft_coll_kind kind, int nranks, uint64_t most)
{
    if (a == b || !reduces(kind))
        return 1;
    /* two terms: every algorithm computes x0 op x1 or x1 op x0, and every
     * op weft has is commutative in IEEE arithmetic, bit for bit */
    if (nranks <= 2)
        return 1;
    return rank_order(a, kind, nranks, most) && rank_order(b, kind, nranks, most);
}
