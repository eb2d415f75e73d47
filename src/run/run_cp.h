/* --cp C: context parallelism (run_cp.c). */
#ifndef WEFT_RUN_RUN_CP_H
#define WEFT_RUN_RUN_CP_H

#include "run/run_int.h"

/* What --cp cannot go with, before anything is set up: 0, or
 * WEFT_ECONFIG with the message in err. */
int run_cp_check(const opts *o, char *err, size_t cap);

/* With --cp C > 1: d's training samples replaced by this rank's rows of
 * each (chunks r and 2C-1-r of 2C, r its place in its group: the
 * layout's data-parallel coordinate mod C); d->ti still describes the
 * whole samples. 0 and nothing done without --cp. */
int run_cp_data(weft_run *t, data_sets *d);

/* The loader's rank and ranks: the group's ranks share their samples. */
void run_cp_loader_ranks(const weft_run *t, int *rank, int *world);

/* With --cp C > 1: checks it against the model, splits the data-parallel
 * group (the job without --tp/--pp) into groups of C consecutive ranks
 * and hands t's model its group. */
int run_cp_open(weft_run *t);

/* This rank's data-parallel coordinate in the layout (its group: that
 * over C, its place in it: that mod C); -1 when the layout does not fit
 * the job. */
int run_cp_replica(const weft_run *t);

/* Evaluation in the training layout under --cp (run_cp_eval.c): f, as
 * eval_layout_open made it, turned into its groups' (each batch's
 * windows cut into the ranks' zig-zag rows, the groups taking turns,
 * generating on the gathered model). 0 and nothing done without --cp. */
struct eval_fwd;
int run_cp_eval_open(weft_run *t, struct eval_fwd *f);
void run_cp_eval_close(struct eval_fwd *f);

/* The ring's counters for the progress line: 0 and nothing written
 * without context parallelism. */
int run_cp_line(const weft_run *t, long steps, char *buf, size_t len);

#endif
