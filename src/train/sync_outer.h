/* The outer step of DiLoCo across a communicator or across clusters, in
 * fragments, compressed or not, blocking or overlapped with the next inner
 * steps (sync_outer.c; the modes' rules are in weft.h). */
#ifndef WEFT_TRAIN_SYNC_OUTER_H
#define WEFT_TRAIN_SYNC_OUTER_H

#include "weft.h"

typedef struct outer_sync outer_sync;

/* Collective over c (hier: splits it). The parameters are the anchor. */
int outer_create(outer_sync **out, weft_comm *c, weft_model *m, const weft_sync_config *cfg);
void outer_destroy(outer_sync *o);
/* After inner step number steps (1, 2, ...). */
int outer_after_step(outer_sync *o, long steps);
/* Every rank ends with one model: the overlapped reductions merged, then a
 * blocking outer step of every fragment not synced at the last step. */
int outer_finish(outer_sync *o, long steps);
weft_comm *outer_inner_comm(const outer_sync *o);
void outer_bytes(const outer_sync *o, uint64_t *across, uint64_t *inside);

#endif
