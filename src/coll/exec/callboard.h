/* The call board: every collective's fingerprint where the other ranks of
 * its host can see it, so that a mismatch shows even when no message ever
 * crosses between the two sides. On one host that is common: the flat
 * board and pipe and direct's reads move no header a receiver could
 * compare, two roots of one broadcast both wait to send into full rings,
 * and a rank in a flat all-reduce never reads the ring a rank in a ring
 * broadcast writes to.
 *
 * One small shared segment per communicator and host. Each rank posts the
 * fingerprint of every collective it starts (a few stores into its own
 * cache line: nothing waits), into one of CALLBOARD_HIST entries by the
 * operation's number. A rank about to wait on a peer looks at the others'
 * entries of its own operation's number: one that holds another call is a
 * mismatch (WEFT_EMISMATCH, naming both), seen by the first rank of the two
 * that waits after both have posted, and by the other when it next looks
 * (a waiting rank looks at least every 0.2 s). Without shared memory (WEFT_SHM=0, ranks alone on their host,
 * a segment that cannot be made) it does nothing, and the checks that
 * messages carry remain. */
#ifndef WEFT_COLL_EXEC_CALLBOARD_H
#define WEFT_COLL_EXEC_CALLBOARD_H

#include "coll/comm_core.h"

/* Post fp (seq, kind, count, ...) as this rank's current collective,
 * making the board on first use; then check the operation before it,
 * which may have completed on both sides of a mismatch without a message
 * between them. 0, or WEFT_EMISMATCH recorded on c. */
int callboard_post(weft_comm *c, const frame_hdr *fp);
/* Every rank of the communicator posted operation seq as the same call,
 * and this rank compared the posts itself (the flat board's): the next
 * post leaves that operation alone. */
void callboard_verified(weft_comm *c, uint64_t seq);
/* Is every same-host peer that posted this rank's current operation in
 * the same call? 0, or WEFT_EMISMATCH recorded on c. */
int callboard_check(weft_comm *c);
/* This rank's own call of operation seq, if among its last few. */
const frame_hdr *callboard_past(const weft_comm *c, uint64_t seq);
/* exec_mismatch (coll/exec/mismatch.h) with this rank's own call of
 * theirs' operation when that is an earlier one it still knows. Returns
 * WEFT_EMISMATCH. */
int callboard_mismatch(weft_comm *c, int peer, const frame_hdr *theirs, const frame_hdr *mine);
/* Unmap it, unlinking the name if this rank still holds it. */
void callboard_free(weft_comm *c);
/* Map board `name` for nranks ranks as rank `rank` (made if missing),
 * recording this process's pid in it; 0 or an errno. */
int callboard_map(const char *name, int nranks, int rank, void **map, size_t *len);
/* Unlink every calls board in /dev/shm at least min_age_s old of which
 * every process that mapped it is gone: a host's rank killed before all
 * of its host's ranks mapped the board leaves the name otherwise.
 * Called as a board is made, with CALLBOARD_ORPHAN_AGE. */
#define CALLBOARD_ORPHAN_AGE 60
void callboard_reap(int min_age_s);

#endif
