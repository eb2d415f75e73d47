/* All-to-all-v by single copy (coll/local/direct_av.c), where every rank
 * is on one host with shared memory on. */
#ifndef WEFT_COLL_DIRECT_AV_H
#define WEFT_COLL_DIRECT_AV_H

#include "coll/comm_core.h"

#include <stddef.h>

/* direct_alltoallv's answer when single copy is off (every rank alike,
 * nothing written yet): the caller runs its schedule instead. */
#define DIRECT_AGAIN 2

/* weft_alltoallv's arguments, checked: n[0..3] are the send counts and
 * displacements and the receive counts and displacements, in elements
 * of t, per rank. 0, an error (recorded on c) or DIRECT_AGAIN. */
int direct_alltoallv(weft_comm *c, const void *send, void *recv, weft_dtype t,
                     const size_t *const n[4], const frame_hdr *fp);
/* Under auto, is this call one to try single copy on? Yes while every
 * rank's blocks lay in weft_mem_alloc's memory at the last call that
 * looked (that call's descriptors told every rank alike), and once in
 * 64 calls after one found them not; direct_alltoallv then
 * answers DIRECT_AGAIN, before anything moved, unless every rank's do.
 * Counts the call: ask once a call, on every rank. */
int direct_av_auto(weft_comm *c);

#endif
