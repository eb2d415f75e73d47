/* Selection from closed forms (select.h). */
#include "coll/tune/select.h"

/* Send and receive are messages, not collectives: nothing to choose. */
static int collective(weft_coll_kind kind)
{
    return kind > WEFT_COLL_RECV && kind < WEFT_COLL_KIND_COUNT;
}

weft_algo coll_select_with(const cost_params *c, weft_coll_kind kind, uint64_t bytes,
                           int nranks)
{
    weft_algo best = WEFT_ALGO_RING;
    double best_t = -1;
    if (!collective(kind) || nranks < 2)
        return best;
    /* an algorithm with no closed form is priced negative, never chosen */
    for (int a = WEFT_ALGO_NAIVE; a < WEFT_ALGO_COUNT; a++) {
        double t = cost_closed(c, (weft_algo)a, kind, bytes, nranks);
        if (t >= 0 && (best_t < 0 || t < best_t)) {
            best_t = t;
            best = (weft_algo)a;
        }
    }
    return best;
}

weft_algo coll_select(weft_coll_kind kind, uint64_t bytes, int nranks)
{
    cost_params c;
    /* A malformed WEFT_TUNE leaves the keys before the error set, the same
     * on every rank; a communicator's selector reports it instead. */
    (void)cost_from_env_for(&c, nranks, NULL, 0);
    return coll_select_with(&c, kind, bytes, nranks);
}
