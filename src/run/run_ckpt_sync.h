/* The sync modes' per-rank state in a sharded save (run_ckpt_sync.c): in
 * the modes with a whole model and optimiser per rank, every rank's own
 * parameters, optimiser, rng and sync state (full sync's --compress: its
 * compressor's) go to sync-RRRRR.wckpt beside its shard file, and a resume
 * at the same layout takes them back. */
#ifndef WEFT_RUN_RUN_CKPT_SYNC_H
#define WEFT_RUN_RUN_CKPT_SYNC_H

#include "run/run_int.h"

/* 1: s keeps per-rank state that a save keeps (local, diloco, gossip;
 * full sync's --compress: its error feedback and PowerSGD's Q);
 * -1: it keeps state a save leaves out (stale's and streaming's
 * reductions in flight, compressed and hier diloco's outer state,
 * elastic churn, backup's tallies); 0: none beyond the shared model. */
int ckpt_sync_kind(const train_sync *s);
/* This rank's state into save/sync-RRRRR.wckpt (jr: its job rank); on
 * failure why (of cap) names the file. */
int ckpt_sync_save(weft_run *t, const char *save, int jr, long step, char *why, size_t cap);
/* Collective over s->comm, once the mode is open on a resume: if every
 * rank finds its file in the save --resume names, written at this world
 * size, --sync and --compress, the rank's state
 * are taken from it; otherwise (another layout, a one-file checkpoint) a
 * warning line says the sync state starts afresh from the loaded
 * parameters. */
int ckpt_sync_restore(train_sync *s, const weft_ckpt *ck);

#endif
