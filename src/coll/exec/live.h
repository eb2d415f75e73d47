/* What a waiting rank tells the others, and how a rank that has waited
 * too long finds out whom to blame. Nothing here runs while messages
 * flow: only a rank that has waited (a hint after STRAY_AFTER_S, a
 * liveness record after half the timeout) pays for it.
 *
 * Calls: every collective's fingerprint is kept for the last LIVE_HIST
 * operations, so that a hint (coll/exec/exec_hint.c) naming an earlier
 * operation can still be compared with what this rank ran.
 *
 * Liveness: a rank that has waited half of WEFT_TIMEOUT without progress
 * writes a record to the store, weft/<id>/live/<rank> (the operation,
 * the ranks it waits on, the time), over a connection of its own, and
 * writes it again every LIVE_BEAT_S while it waits. A rank that times
 * out follows the ranks it waits on through their records: the first one
 * with no fresh record is the one that stopped (a frozen or stuck
 * process writes nothing), and the error names it rather than the
 * neighbour this rank happened to wait on. The store is served by a
 * thread of its rank's process, which answers while that rank's own
 * thread waits; when the store does not answer, that process itself is
 * stopped, and that is whom the error names. */
#ifndef WEFT_COLL_EXEC_LIVE_H
#define WEFT_COLL_EXEC_LIVE_H

#include "coll/comm_core.h"

#define LIVE_HIST 16
#define LIVE_BEAT_S 1.0       /* a waiting rank rewrites its record this often */
#define LIVE_STALE_S 2.5      /* older than this, a record says its rank is no longer waiting */
#define LIVE_WAIT_MAX 8       /* ranks a record names */

/* fp is this rank's collective number fp->seq (kept for hints). */
void live_call(weft_comm *c, const frame_hdr *fp);
/* This rank's call of operation seq, if among its last LIVE_HIST. */
const frame_hdr *live_past(const weft_comm *c, uint64_t seq);
/* Has this rank told peer of its wait in operation seq? mark: it has now. */
int live_hinted(weft_comm *c, int peer, uint64_t seq, int mark);

/* This rank waits, without progress since `since` (clock_now), on the
 * ranks in wait (flight recorder convention: peer, or -peer-1 for a send
 * to it). Writes the record when due; costs a clock read otherwise. */
void live_waiting(weft_comm *c, uint64_t seq, const int32_t *wait, int nw, double since);
/* Timed out waiting on wait[]: the rank that stopped making progress,
 * or -1 when every rank on the way is still waiting (then a cycle: the
 * ranks wait on each other). why gets a phrase for the message. */
int live_blame(weft_comm *c, const int32_t *wait, int nw, char *why, size_t len);
/* The store has been seen not to answer (its process is stopped). */
int live_store_silent(const weft_comm *c);
/* Ask now, waiting at most a quarter of the timeout (1 s at most): 1 when
 * the store does not answer. */
int live_store_check(weft_comm *c);
/* "rank 0 stopped responding (the store, served by rank 0 at H:P, did not
 * answer for N s)" */
void live_store_why(const weft_comm *c, char *why, size_t len);
void live_free(weft_comm *c);

#endif
