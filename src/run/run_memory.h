/* --mem-limit (run_memory.c): a layout whose training state does not fit is
 * refused, naming one that would; after the first step, the peak resident
 * memory is checked, and after a resume's load, a save and an evaluation
 * the process's peak. */
#ifndef WEFT_RUN_RUN_MEMORY_H
#define WEFT_RUN_RUN_MEMORY_H

#include "run/run_int.h"

int memory_check_start(weft_run *t);
int memory_check_step(weft_run *t, long step);
/* Each rank's peak resident set (VmHWM) so far against --mem-limit, after
 * during ("the save of step 4"): over it, this rank fails naming itself.
 * Not collective. Left out under sanitizers (their shadow memory). */
int memory_check_peak(weft_run *t, const char *during);

#endif
