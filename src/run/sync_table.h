/* The sync modes: one line each, and the only list of them. run_sync.c
 * expands it twice, into the declarations of the modes' sync_ops and into
 * the table sync_mode_of walks; nothing else names a mode. Adding a mode:
 * its value in include/weft.h and weft_sync_parse (src/train/sync.c) when
 * --sync gets a new word, its own file with its sync_ops (its refusals in
 * the check hook), and one line here.
 *
 * X(ops, modes, when):
 *   ops    the mode's sync_ops, defined in its own file
 *   modes  the weft_sync_mode values it runs, as SYNC_M bits
 *   when   what the launch must also ask for, as SYNC_W bits: HIER
 *          (--sync hier:full/...), COMPRESS (--compress), ELASTIC
 *          (--elastic); 0: nothing
 * The first line that takes the run's mode, and whose when the launch
 * asks for all of, is the mode. */
#ifndef WEFT_RUN_SYNC_TABLE_H
#define WEFT_RUN_SYNC_TABLE_H

#include "weft.h"

#define SYNC_M(mode) (1u << WEFT_SYNC_##mode)
#define SYNC_OUTER (SYNC_M(DILOCO) | SYNC_M(STREAMING))
#define SYNC_W_HIER 1u
#define SYNC_W_COMPRESS 2u
#define SYNC_W_ELASTIC 4u

/* clang-format off */
#define RUN_SYNC_MODES(X) \
  /* ops                 modes                          when */ \
  X(sync_churn,          SYNC_M(DILOCO),                SYNC_W_ELASTIC) \
  X(sync_hier,           SYNC_OUTER,                    SYNC_W_HIER) \
  X(sync_full_compress,  SYNC_M(FULL),                  SYNC_W_COMPRESS) \
  X(sync_full,           SYNC_M(FULL),                  0) \
  X(sync_average,        SYNC_M(LOCAL) | SYNC_M(GOSSIP), 0) \
  X(sync_diloco,         SYNC_OUTER,                    0) \
  X(sync_stale,          SYNC_M(STALE),                 0) \
  X(sync_backup,         SYNC_M(BACKUP),                0)
/* clang-format on */

#endif
