/* The sync modes behind one interface (run_sync.c): the table from --sync
 * to a mode (sync_table.h), the calls of its hooks, and what every mode
 * shares (a weft_zero takes every optimiser step, over the job or over
 * this rank alone). */
#ifndef WEFT_RUN_RUN_SYNC_H
#define WEFT_RUN_RUN_SYNC_H

#include "run/run_int.h"

/* The mode the launch options ask for: the first line of sync_table.h
 * that takes cfg's mode with o's --compress, --elastic and hier. */
const sync_ops *sync_mode_of(const opts *o, const weft_sync_config *cfg);
/* The refusals of o's mode (its check hook), failing t with the first
 * one's message; elastic_check asks them before anything is set up. */
int sync_check(weft_run *t, const opts *o, weft_comm *comm);
/* Checks the launch options against --sync and picks its mode (full sync
 * for one process, where no mode has anyone to meet); s->run = t. May set
 * o's defaults (the mode's). */
int sync_pick(train_sync *s, weft_run *t, opts *o, weft_comm *comm);
int sync_open(train_sync *s, weft_model *m, const weft_optim_config *oc, const weft_ckpt *ck);
/* c NULL: this rank's own optimiser, whole. */
int sync_zero_open(train_sync *s, weft_comm *c, weft_model *m, const weft_optim_config *oc,
                   const weft_ckpt *ck);
/* The banner's line (to the run's log). */
void sync_describe(const train_sync *s);
int sync_begin(train_sync *s, int *skip);
int sync_launch(train_sync *s, train_step *st);
int sync_step(train_sync *s, train_step *st, float lr);
/* The step on the gradient buffer as it stands; gnorm gets the norm
 * before clipping when --clip is on. */
int sync_optim_step(train_sync *s, float lr, float *gnorm);
int sync_drain(train_sync *s, const weft_lr_schedule *lr);
int sync_finish(train_sync *s);
/* The byte means of the end-of-run report (collective; after the timed run). */
int sync_count_bytes(train_sync *s);
void sync_summary(const train_sync *s);
uint64_t sync_bytes(const train_sync *s);
void sync_close(train_sync *s);

#endif
