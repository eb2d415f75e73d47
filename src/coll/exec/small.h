/* The small all-reduce: a message of at most SMALL_MAX bytes between
 * ranks of one host, on the flat board (coll/local/flat_board.h) without
 * the engine's per-call work that costs more than the data here: no
 * tuner lookup, no schedule, no flight-recorder timestamps, no clock
 * read while the answer is a cache line away. */
#ifndef WEFT_COLL_EXEC_SMALL_H
#define WEFT_COLL_EXEC_SMALL_H

#include "coll/comm_core.h"

/* Bytes per rank the path takes: a board post's inline payload holds up
 * to 32 bytes in the post's own cache line; larger ones are read from
 * the rank's board slot, a few more lines each. */
#define SMALL_MAX 256u

/* Does all-reduce a go the small way under auto? The same answer on
 * every rank that makes the same call: it looks only at the call and at
 * what every rank agreed on (one host, shared memory on). */
int small_fits(const weft_comm *c, const weft_coll_args *a);
/* Is the board made (flat_mode 1), so that small_run may run the call? */
int small_ready(const weft_comm *c);
/* Run all-reduce a (small_fits, small_ready, more than one rank) on the
 * board; fp its fingerprint (algorithm WEFT_ALGO_FLAT: the board's
 * calls are flat's, and a peer sees the same post either way). Errors
 * are recorded on c (comm_fail); WEFT_AVG is left as a sum. */
int small_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp);

#endif
