/* Sharded checkpoints of the run (run_ckpt_shard.c): every rank writes
 * what it owns to its own file of a new save directory, job rank 0 commits
 * the manifest once all have (train/ckpt_shard.h has the layout). */
#ifndef WEFT_RUN_RUN_CKPT_SHARD_H
#define WEFT_RUN_RUN_CKPT_SHARD_H

#include "run/run_int.h"

/* 1 if a save to path is sharded: a name ending in '/', or a directory
 * that holds sharded saves (its latest). */
int ckpt_sharded(const char *path);

/* Collective over the job: the run's state at step into a new save under
 * dir; rec (job rank 0's; NULL elsewhere) holds the run's records
 * (arguments, step, rng, data position), to which the manifest's are
 * added. On
 * failure every rank fails, naming the path. */
int ckpt_shard_save(weft_run *t, const char *dir, long step, weft_ckpt *rec);

#endif
