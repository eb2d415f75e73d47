/* The table of algorithms, expanded for dispatch, the tuner and teardown. */
#include "coll/algo.h"
#include "coll/exec/callboard.h"
#include "coll/local/direct.h"
#include "coll/local/flat.h"

static const coll_algo algos[WEFT_ALGO_COUNT] = {
#define ENTRY(id, name, alias, build, run, price, free, flags, kinds) \
    [WEFT_ALGO_##id] = { kinds, flags, run, price, free },
    COLL_ALGOS(ENTRY)
#undef ENTRY
};

const coll_algo *coll_algo_of(weft_algo a)
{
    return &algos[(unsigned)a < WEFT_ALGO_COUNT ? a : WEFT_ALGO_AUTO];
}

int coll_algo_does(weft_algo a, weft_coll_kind kind)
{
    return (unsigned)kind < WEFT_COLL_KIND_COUNT && (coll_algo_of(a)->kinds >> kind & 1);
}

void coll_algo_free_all(weft_comm *c)
{
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
        if (algos[a].free)
            algos[a].free(c);
    callboard_free(c); /* what every algorithm posts its calls on */
}
