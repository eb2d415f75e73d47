/* The flat algorithm (WEFT_ALGO_FLAT): for small messages between ranks
 * that all share one host. Every rank posts its data to a board in one
 * shared segment and reduces all of it: one step, whatever the rank
 * count, instead of log2(p) rounds of messages. All-reduce of any size
 * beyond a board slot runs as a pipeline through a second segment
 * (coll/local/flat_pipe.c). */
#ifndef WEFT_COLL_FLAT_H
#define WEFT_COLL_FLAT_H

#include "coll/comm_core.h"
#include "coll/tune/cost.h"

/* Run collective a with it; the role of exec_run for schedules: errors
 * are recorded on c (comm_fail), fp is the operation's fingerprint.
 * WEFT_ENOTSUP (also recorded) when it does not apply, decided alike on
 * every rank before anything moves: the communicator stays usable. */
int flat_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp);
/* Predicted seconds, or WEFT_ENOTSUP where it does not apply (ranks on
 * several hosts, a collective it does not do, a message too large for a
 * slot other than an all-reduce's). */
int flat_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
              uint64_t bytes, uint32_t esize, double *seconds);
/* 1: calls run on the board; 0: it could not be made on some rank, so
 * they run with ordinary algorithms; -1: no call has needed it yet. */
int flat_mode(const weft_comm *c);
/* Unmap (and, if still named, unlink) the communicator's board and pipe. */
void flat_free(weft_comm *c);

#endif
