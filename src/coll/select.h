/* Picks an algorithm when the caller asks for WEFT_ALGO_AUTO. */
#ifndef WEFT_COLL_SELECT_H
#define WEFT_COLL_SELECT_H

#include "weft.h"

/* Deterministic in its inputs, so every rank picks the same. bytes is the
 * per-rank message size (count * dtype size). */
weft_algo coll_select(weft_coll_kind kind, uint64_t bytes, int nranks);

#endif
