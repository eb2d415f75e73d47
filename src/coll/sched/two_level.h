/* Schedule generators for Rabenseifner's algorithm and the two-level
 * (hierarchical) algorithm. Same contract as the generators declared in
 * coll/sched/sched.h: read input only from SB_SEND, write SB_RECV and SB_TMP,
 * never read an SB_SEND range after writing the same SB_RECV range, and
 * reduce every element in one place so all ranks end bit-identical. */
#ifndef WEFT_COLL_SCHED_MORE_H
#define WEFT_COLL_SCHED_MORE_H

#include "coll/sched/plan.h"

/* Rabenseifner: all-reduce as a recursive-halving reduce-scatter followed by
 * a recursive-doubling all-gather (2 log2 p rounds, 2(p-1)/p of the data
 * sent per rank); also reduce-scatter (recursive halving) and all-gather
 * (recursive doubling), reduce (halving, then a binomial gather) and
 * broadcast (binomial scatter, then doubling). Ranks beyond the largest
 * power of two are folded into a partner first and served at the end. */
int sched_rabenseifner(weft_sched *s, const sched_params *p);

/* Two-level all-reduce over the hosts in p->host: reduce-scatter inside
 * each host, an all-reduce of every slice among the ranks that own it on
 * each host (one ring per slice, all running at once), and an all-gather
 * inside each host. Broadcast and reduce run as one pipelined tree (a
 * binary tree over the hosts, a chain inside each) that crosses each host
 * boundary once. Other kinds: WEFT_ENOTSUP. One host (or p->host NULL):
 * the ring. */
int sched_hier(weft_sched *s, const sched_params *p);

#endif
