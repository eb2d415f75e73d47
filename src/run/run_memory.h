/* --mem-limit (run_memory.c): a layout whose training state does not fit is
 * refused, naming one that would; after the first step, the peak resident
 * memory is checked. */
#ifndef WEFT_RUN_RUN_MEMORY_H
#define WEFT_RUN_RUN_MEMORY_H

#include "run/run_int.h"

int memory_check_start(weft_run *t);
int memory_check_step(weft_run *t, long step);

#endif
