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
 * dir; rec (job rank 0's; NULL elsewhere; taken over) holds the run's
 * records (arguments, step, rng, data position), to which the manifest's
 * are added. async: the share is copied and written from a thread, the
 * save committed by the next one or ckpt_shard_wait (synchronous on every
 * rank under --mem-limit or where any rank lacks memory for the copy). A
 * sync mode's per-rank state (run_ckpt_sync.h) is written at once. A save
 * still in flight is committed first. On failure every rank fails, naming the path. */
int ckpt_shard_save(weft_run *t, const char *dir, long step, weft_ckpt *rec, int async);
/* Collective: commits a save in flight (none: 0). */
int ckpt_shard_wait(weft_run *t);
/* The writer joined and the state freed, nothing committed (the run is
 * being closed). */
/* Collective over the job at the run's set-up, where --save-every saves
 * in the background: the writers' communicator and the snapshot buffer,
 * made and touched before the first step rather than in its save. */
int ckpt_shard_prepare(weft_run *t);
void ckpt_shard_close(weft_run *t);
/* The saves committed, [0] in the loop's time and [1] in the background:
 * how many, their seconds from start to commit, their bytes (rank 0's
 * count, 0 elsewhere); the loop's seconds in the background ones. */
typedef struct {
    int saves[2];
    double save_s[2], stall_s;
    uint64_t bytes[2];
} ckpt_figures_t;
void ckpt_shard_figures(const weft_run *t, ckpt_figures_t *f);

#endif
