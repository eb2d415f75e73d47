/* Committing a sharded save (run_ckpt_commit.c): job rank 0, once every
 * rank's file is written and synced, writes the manifest (renamed into
 * place, the directory synced), points latest at the save and drops
 * saves beyond --keep. */
#ifndef WEFT_RUN_RUN_CKPT_COMMIT_H
#define WEFT_RUN_RUN_CKPT_COMMIT_H

#include "run/run_int.h"

#include <stdint.h>

/* Fields of a rank's row ahead of its slices: slice count, bytes, CRC. */
enum { CKPT_META = 3 };

/* dir/name is the save; man (the run's records) gets the layout and the
 * slice tables of all (jw rows of CKPT_META + nmax slices); why (cap)
 * says what failed. */
int ckpt_commit(weft_run *t, const char *dir, const char *name, weft_ckpt *man,
                const int64_t *all, int jw, int64_t nmax, char *why, size_t cap);

#endif
