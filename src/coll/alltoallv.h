/* All-to-all with per-peer counts. The blocking call runs at once; the
 * non-blocking one rides the collective FIFO as a request of an internal
 * kind whose arguments point at a copy of the counts (coll_run hands it
 * here), so it keeps its place in the stream like any other collective. */
#ifndef WEFT_COLL_ALLTOALLV_H
#define WEFT_COLL_ALLTOALLV_H

#include "coll/comm_core.h"

#include <stdint.h>

/* Outside the public kinds, and with a count no real call can have, so a
 * caller's stray kind never reaches alltoallv_run. */
#define COLL_ALLTOALLV ((weft_coll_kind)WEFT_COLL_KIND_COUNT)
#define COLL_ALLTOALLV_MARK ((size_t)0x616c6c746f616c76ull)

static inline int coll_is_alltoallv(const weft_coll_args *a)
{
    return a->kind == COLL_ALLTOALLV && a->count == COLL_ALLTOALLV_MARK && a->send;
}

/* A call's arguments: counts and displacements, in elements, per rank. */
typedef struct {
    const void *send;
    void *recv;
    weft_dtype t;
    const size_t *sc, *sd, *rc, *rd;
} coll_av_args;

/* Runs v now (flight_id: its flight-recorder record when it was queued,
 * else 0). Errors recorded on c; a failure that moved bytes is reported
 * to the other ranks and breaks c. */
int coll_alltoallv(weft_comm *c, const coll_av_args *v, uint64_t flight_id);
/* v checked and copied (the caller's arrays need not outlive the call)
 * into a, a request of the internal kind for the collective FIFO; free
 * a->send when it is not queued after all. Errors recorded on c. */
int coll_alltoallv_queue(weft_comm *c, const coll_av_args *v, weft_coll_args *a);
/* Runs a queued alltoallv and frees its copy of the counts. */
int coll_alltoallv_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id);

#endif
