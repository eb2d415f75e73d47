/* The non-blocking collectives' FIFO and its worker thread (async.c),
 * and the blocking point-to-point calls that skip it. */
#ifndef WEFT_COLL_EXEC_ASYNC_H
#define WEFT_COLL_EXEC_ASYNC_H

#include "coll/comm_core.h"

/* A message with tag 0 given as a collective's arguments. */
int coll_p2p(weft_comm *c, const weft_coll_args *a);
/* Wait for queued non-blocking work, then stop the worker. */
void async_drain(weft_comm *c);
void async_stop(weft_comm *c);
/* Frees the retired requests (comm teardown, after async_stop). */
void async_free_retired(weft_comm *c);

#endif
