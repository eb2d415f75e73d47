/* Schedule generators for the double binary tree and recursive doubling,
 * and the tree arithmetic they share with the simulator and the tests.
 * Same contract as the generators declared in coll/sched/sched.h. */
#ifndef WEFT_COLL_SCHED_EXTRA_H
#define WEFT_COLL_SCHED_EXTRA_H

#include "coll/sched/plan.h"

/* Double binary tree: all-reduce over two complementary in-order binary
 * trees, each carrying half of the data in pipelined chunks; broadcast and
 * reduce over one tree rooted at the root. */
int sched_tree(weft_sched *s, const sched_params *p);
/* Recursive doubling all-reduce; ranks beyond the largest power of two are
 * folded into their neighbours first and served at the end. */
int sched_rd(weft_sched *s, const sched_params *p);

/* In-order binary tree over positions 0..p-1 (vertex v = position+1, the
 * root is the largest power of two <= p). -1 where there is none. */
int sched_tree_root(int p);
int sched_tree_parent(int pos, int p);
void sched_tree_children(int pos, int p, int *left, int *right);
int sched_tree_depth(int pos, int p);
/* Position of rank r in tree t (0 or 1) of the double binary tree: tree 1
 * mirrors tree 0 (r -> p-1-r) when p is even and shifts it by one rank
 * when p is odd, so that no rank is interior in both. */
int sched_dbtree_pos(int r, int t, int p);
int sched_dbtree_rank(int pos, int t, int p);

#endif
