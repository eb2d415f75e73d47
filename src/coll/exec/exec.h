/* Runs one rank's schedule over the communicator's connections. */
#ifndef WEFT_COLL_EXEC_H
#define WEFT_COLL_EXEC_H

#include "coll/comm.h"

/* fp is the fingerprint every message of this operation carries (its len
 * field is ignored); bufs are the SB_SEND, SB_RECV and SB_TMP base
 * addresses. Errors are recorded on c. */
int exec_run(weft_comm *c, const weft_sched *s, char *bufs[SB_COUNT], const frame_hdr *fp);

/* "allreduce(count=100, f32, sum) as op #17" */
void exec_describe(const frame_hdr *h, char *buf, size_t len);
/* Do two fingerprints name the same call (every field but len)? */
int exec_same_call(const frame_hdr *a, const frame_hdr *b);
/* Record that peer is in call theirs while this rank is in mine: the one
 * wording of a mismatch, naming both sides (and their algorithms when
 * those differ). Returns WEFT_EMISMATCH. */
int exec_mismatch(weft_comm *c, int peer, const frame_hdr *theirs, const frame_hdr *mine);

/* Before the connections close: unlink the shared segments that nobody
 * will map (see transport/shm.h): this rank's own whose receiver's
 * connection has ended and, when this communicator failed, every one
 * addressed to this rank. */
void exec_shm_reap(weft_comm *c, int failed);

#endif
