/* The collective engine (coll.c). */
#ifndef WEFT_COLL_COLL_H
#define WEFT_COLL_COLL_H

#include "coll/comm_core.h"

/* Runs one collective on the calling thread; flight_id: its
 * flight-recorder record when it was queued, else 0. */
int coll_run(weft_comm *c, const weft_coll_args *a, uint64_t flight_id);

#endif
