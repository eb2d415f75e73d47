/* A single-file save's ranks agreeing on its parts (run_ckpt_agree.c),
 * so that a failure on one rank fails them all rather than leaving one
 * waiting for data that will not come; and the test hook that makes a
 * rank's part fail. */
#ifndef WEFT_RUN_RUN_CKPT_AGREE_H
#define WEFT_RUN_RUN_CKPT_AGREE_H

#include "run/run_int.h"

/* Collective over c (NULL: this rank alone): whether every rank's part of
 * a save succeeded, rc being this rank's: 0 on all when all did, else
 * rc where it failed and WEFT_EIO on the others. */
int ckpt_agree(weft_comm *c, int rc);
/* A test's hook: 1 where WEFT_TEST_SAVE_FAIL is "RANK:WHERE" with this
 * job rank and where ("optim": the optimiser state's gather over the
 * job; "send": a gather on the way to rank 0; "take": rank 0 assembling
 * a pipeline's last part, after the others, as if out of memory): that
 * part of a single-file save then fails as a failed gather would. */
int ckpt_test_fail(const weft_run *t, const char *where);

#endif
