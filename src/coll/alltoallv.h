/* All-to-all with per-peer counts. The blocking call runs at once; the
 * non-blocking one rides the collective FIFO as a request of an internal
 * kind whose arguments point at a copy of the counts (coll_run hands it
 * here), so it keeps its place in the stream like any other collective. */
#ifndef WEFT_COLL_ALLTOALLV_H
#define WEFT_COLL_ALLTOALLV_H

#include "weft.h"

#include <stdint.h>

/* Outside the public kinds, and with a count no real call can have, so a
 * caller's stray kind never reaches alltoallv_run. */
#define COLL_ALLTOALLV ((weft_coll_kind)WEFT_COLL_KIND_COUNT)
#define COLL_ALLTOALLV_MARK ((size_t)0x616c6c746f616c76ull)

static inline int coll_is_alltoallv(const weft_coll_args *a)
{
    return a->kind == COLL_ALLTOALLV && a->count == COLL_ALLTOALLV_MARK && a->send;
}

/* Runs a queued alltoallv and frees its copy of the counts. */
int coll_alltoallv_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id);

#endif
