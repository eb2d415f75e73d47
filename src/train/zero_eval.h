/* ZeRO-3 layer by layer around a forward-only pass between steps (an
 * evaluation, zero_eval.c): the pass gathers and releases blocks through
 * the model's hook as a step's forward does, but its needs must not become
 * the order the next step prefetches by. */
#ifndef WEFT_TRAIN_ZERO_EVAL_H
#define WEFT_TRAIN_ZERO_EVAL_H

#include "weft.h"

typedef struct {
    int olen, opos;
} train_zero_mark;

/* Before the pass: where the step's record of needs stands. */
void train_zero_eval_begin(const weft_zero *z, train_zero_mark *m);
/* After it: the record as it was, the pass's needs forgotten. */
void train_zero_eval_end(weft_zero *z, const train_zero_mark *m);

#endif
