/* The outer step of DiLoCo across a communicator or across clusters, in
 * fragments, compressed or not, blocking or overlapped with the next inner
 * steps (sync_outer.c; the modes' rules are in weft.h). */
#ifndef WEFT_TRAIN_SYNC_OUTER_H
#define WEFT_TRAIN_SYNC_OUTER_H

#include "weft.h"

typedef struct outer_sync outer_sync;

/* Where the outer steps' time went on this rank (seconds, the final ones
 * included): taking the pseudo-gradients and handing them to the thread,
 * blocked on the reduction across (a blocking one, or joining a streaming
 * one not yet done), and the outer step itself (with hier the all-gather
 * inside the cluster). */
typedef struct {
    double post_s, wait_s, apply_s;
} outer_times;

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
void outer_time(const outer_sync *o, outer_times *t);
/* The outer steps of a weft_sync (sync.c); NULL where it has none. */
const outer_sync *sync_outer_of(const weft_sync *s);
/* What a weft_sync (sync.c) keeps from step to step besides the model,
 * for a rank's own checkpoint: its inner step count and, for diloco
 * without an outer_sync, the anchor and the outer momentum (the
 * parameters' length; NULL in the other modes). */
void sync_state(weft_sync *s, long **steps, float **anchor, float **velocity);
/* Elastic churn (a cluster dropped or rejoined, tools/weft-train/
 * sync_churn.c): the outer state as arrays of the parameters' length
 * (anchors, momenta) and the inner step count of the last outer step,
 * carried from one outer_sync to its successor over the new membership.
 * Blocking outer steps only (nothing in flight). */
void outer_export(const outer_sync *o, float *anchor, float *vel, long *synced);
void outer_import(outer_sync *o, const float *anchor, const float *vel, long synced);
/* The outer steps from here on weigh this rank's pseudo-gradient by w (1
 * from outer_create): for one step, 0 on a rank that took none of the
 * period's inner steps and ranks / contributors on the others make the
 * mean the contributors'. */
void outer_weigh(outer_sync *o, float w);
/* Flat, uncompressed blocking outer steps (else WEFT_ENOTSUP): the mean
 * pseudo-gradient of the last outer step, which every rank applied, into
 * d (the parameters' length); and that outer step applied to the anchor
 * and momentum as they stand (outer_import's), outside the reduction and
 * bit for bit as in it, the parameters made the anchor, synced the inner
 * step count it stands for. A rank that took outer steps without the
 * state (a late joiner at weight 0) keeps their d and replays them in
 * order once the state comes. */
int outer_delta(const outer_sync *o, float *d);
int outer_replay(outer_sync *o, const float *d, long synced);
/* Aborts the communicators it made, so that destroying them waits for no
 * peer (some are gone) and the peers still in them fail at once. */
void outer_abort(outer_sync *o);

#endif
