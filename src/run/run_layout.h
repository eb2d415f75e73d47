/* --layout auto (run_layout.c). */
#ifndef WEFT_RUN_RUN_LAYOUT_H
#define WEFT_RUN_RUN_LAYOUT_H

#include "run/run_int.h"

/* Sets o's tp, pp, schedule, micro-batches, ZeRO stage and sp from the
 * planner's fastest layout of this many ranks that fits --mem-limit. */
int layout_auto(weft_run *t, opts *o, const weft_model_config *cfg, int ranks);

#endif
