/* Choosing an algorithm from closed forms alone (cost_closed), for code
 * that has no selector (coll/tune/tuner.h) to remember choices in. */
#ifndef WEFT_COLL_TUNE_SELECT_H
#define WEFT_COLL_TUNE_SELECT_H

#include "coll/tune/cost.h"
#include "weft.h"

/* Without a selector: constants c, all ranks on one host, and with nowhere
 * to remember choices, the closed forms (cost_closed) instead of schedule
 * walks: they agree with a selector on the regime, not at every boundary.
 * Prefer a coll_tuner. */
weft_algo coll_select_with(const cost_params *c, weft_coll_kind kind, uint64_t bytes,
                           int nranks);
/* The same with constants read from the environment now. */
weft_algo coll_select(weft_coll_kind kind, uint64_t bytes, int nranks);

#endif
