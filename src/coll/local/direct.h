/* The direct algorithm (WEFT_ALGO_DIRECT): for communicators whose ranks
 * all share one host. Each rank reduces its slice of the result straight
 * out of the other ranks' buffers (process_vm_readv: one copy, no ring),
 * then reads the slices the others reduced. Every collective has a
 * direct form (the others read what they need straight from where it
 * is); the cost model offers the ones measured to win. */
#ifndef WEFT_COLL_DIRECT_H
#define WEFT_COLL_DIRECT_H

#include "coll/comm_core.h"
#include "coll/tune/cost.h"

/* Up to this many ranks its exchanges are one round with every peer;
 * beyond, log2(P) rounds (Bruck's all-gather), so that a rank connects to
 * 2 log2(P) peers rather than to all: at 256 ranks 16 connections each
 * instead of 510, and rings to as few. */
#define DIRECT_MESH_MAX 16

/* Run collective a with it; the role of exec_run for schedules: errors
 * are recorded on c (comm_fail), fp is the operation's fingerprint.
 * WEFT_ENOTSUP (also recorded) when it does not apply, decided alike on
 * every rank before anything moves: the communicator stays usable. */
int direct_run(weft_comm *c, const weft_coll_args *a, const frame_hdr *fp);
/* Predicted seconds, or WEFT_ENOTSUP where it does not apply (ranks on
 * several hosts, a collective it does not do). */
int direct_cost(const cost_params *c, const cost_layout *l, weft_coll_kind kind,
                uint64_t bytes, uint32_t esize, double *seconds);
/* Whether single copy works between every pair of the communicator's
 * ranks, as they all agreed on first use (or later, when a rank lost the
 * right to read another): 1 yes, -1 no (the ring runs instead), 0 not
 * yet known. */
int direct_verdict(const weft_comm *c);
/* What the communicator keeps for it (NULL: nothing). */
void direct_free(weft_comm *c);

#endif
