/* The run's checkpoints (run_ckpt.c): --resume and saving. A checkpoint
 * holds the whole run (model, optimiser, rng, data position), never the
 * launch (ranks, ZeRO stage, sync mode), so it resumes on any number of
 * ranks. */
#ifndef WEFT_RUN_RUN_CKPT_H
#define WEFT_RUN_RUN_CKPT_H

#include "run/run_int.h"

/* --resume: loads the checkpoint and takes its run options (*ck NULL:
 * none). */
int ckpt_resume(weft_run *t, opts *o, long *start_step, weft_ckpt **ck);
int ckpt_restore_model(weft_run *t, weft_ckpt *ck, const char *path, weft_model **m,
                       weft_optim_config *oc, weft_rng *rng);
/* After a failed set-up from ck: the account of a sharded checkpoint's
 * failed read (the file, the slice, the tensor) added to the run's error. */
void ckpt_explain(weft_run *t, const weft_ckpt *ck);
/* The loader continues where the saved run stopped. */
int ckpt_restore_data(weft_run *t, weft_ckpt *ck, const char *path, weft_loader *l,
                      const data_sets *d);
/* Collective when the optimiser spans the job: the run at step, at path. */
int ckpt_save(weft_run *t, const char *path, long step);
/* --save-every's saves: a sharded one is written in the background
 * (run_ckpt_shard.h), committed by the next save or the last. */
int ckpt_save_every(weft_run *t, const char *path, long step);
/* The run's background saves: how long they took and stalled the loop
 * (rank 0's line; none without such saves). */
void ckpt_figures(const weft_run *t);

#endif
