/* Where a tensor part's elements lie in the whole tensor, a run at a time:
 * what reads and writes of a part against a whole-model file (Hugging Face
 * weights, sharded checkpoints) share, so each does one copy or one I/O a
 * run instead of one an element. */
#ifndef WEFT_TRAIN_PART_RUNS_H
#define WEFT_TRAIN_PART_RUNS_H
#include "weft.h"

#include <stddef.h>

/* One run: part elements [e, e + len) of the tensor are whole elements
 * [at, at + len). A nonzero return stops the walk and is returned. */
typedef int (*train_run_fn)(void *arg, size_t e, size_t at, size_t len);

/* Tensor i of part m, its elements [lo, hi) counted from the tensor's
 * first: fn for each maximal run consecutive on both sides, in order.
 * Elements with no place in the whole (the padding of a vocabulary split)
 * are passed over. A whole tensor is one run. */
int train_part_runs(const weft_model *m, int i, size_t lo, size_t hi, train_run_fn fn,
                    void *arg);

#endif
