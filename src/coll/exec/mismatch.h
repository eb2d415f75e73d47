/* Calls compared by their fingerprints (core/frame.h), and the one
 * wording of a mismatch, naming both sides (and their algorithms when
 * those differ). */
#ifndef WEFT_COLL_EXEC_MISMATCH_H
#define WEFT_COLL_EXEC_MISMATCH_H

#include "coll/comm_core.h"

/* "allreduce(count=100, f32, sum) as op #17" */
void exec_describe(const frame_hdr *h, char *buf, size_t len);
/* Do two fingerprints name the same call (every field but len)? */
int exec_same_call(const frame_hdr *a, const frame_hdr *b);
/* Record that peer is in call theirs while this rank is in mine; then:
 * this rank's own call of theirs' (earlier) operation number, when it
 * still knows it (callboard_past), else NULL. Returns WEFT_EMISMATCH. */
int exec_mismatch(weft_comm *c, int peer, const frame_hdr *theirs, const frame_hdr *mine,
                  const frame_hdr *then);

#endif
