/* The table of algorithms (coll/algo_table.h) as the communicator reads
 * it: how an algorithm runs, what the tuner prices it at, what a
 * communicator keeps for it. Schedules are built by sched_build, which
 * reads the same table. */
#ifndef WEFT_COLL_ALGO_H
#define WEFT_COLL_ALGO_H

#include "coll/algo_table.h"
#include "coll/tune/cost.h"
#include "core/frame.h"
#include "weft.h"

typedef struct {
    unsigned kinds; /* COLL_K bits of the collectives it runs */
    int flags;      /* COLL_ACROSS_HOSTS */
    /* Runs collective a without a schedule, in the role of exec_run:
     * errors are recorded on c (comm_fail), fp is the operation's
     * fingerprint; WEFT_ENOTSUP (also recorded) when it does not apply,
     * decided alike on every rank before anything moves, so that the
     * communicator stays usable. NULL: it builds schedules. */
    int (*run)(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp);
    /* Predicted seconds for bytes (count * esize), WEFT_ENOTSUP where the
     * tuner is not to offer it. NULL: cost_predict walks its schedule. */
    int (*price)(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
                 uint64_t bytes, uint32_t esize, double *seconds);
    /* Releases what c keeps for it; NULL: it keeps nothing. */
    void (*free)(weft_comm *c);
} coll_algo;

/* a's entry; for WEFT_ALGO_AUTO or a value out of range, an entry that
 * runs nothing (its kinds 0). */
const coll_algo *coll_algo_of(weft_algo a);
/* Whether a runs collective kind. */
int coll_algo_does(weft_algo a, weft_coll_kind kind);
/* Every algorithm's free, at the communicator's destruction. */
void coll_algo_free_all(weft_comm *c);

#endif
