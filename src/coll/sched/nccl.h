/* NCCL's all-reduce structures as schedules, for the simulator: the
 * library does not run them (they have no weft_algo value; the
 * simulator-only part of the table of algorithms, COLL_SIM_ALGOS in
 * coll/algo_table.h, lists them), but they are built, checked and timed
 * like every other generator's output (sched.h's contract; vexec checks
 * them in tests/unit/test_sched_more.c).
 *
 * Both split the data over `channels` channels (NCCL runs one channel per
 * SM group, each over its own ring or tree, so that several NICs and
 * NVLinks are busy at once) and place ranks in blocks of ranks_per_node
 * (rank r on node r / ranks_per_node), with the node's ranks spread over
 * its NICs in order: channel c leaves a node through local rank
 * c * ranks_per_node / channels, the one nearest to the NIC the channel
 * uses. */
#ifndef WEFT_COLL_SCHED_NCCL_H
#define WEFT_COLL_SCHED_NCCL_H

#include "coll/sched/plan.h"

typedef struct {
    int channels;        /* >= 1 */
    int ranks_per_node;  /* >= 1; a last node with fewer ranks is fine */
} sched_nccl;

/* Rings: channel c is a ring that visits the nodes in order and, inside
 * each node, enters at local rank h_c + 1 and leaves at h_c (the rank at
 * the channel's NIC), so each ring crosses every node boundary once and
 * the channels leave through different NICs. Each ring runs reduce-scatter
 * then all-gather over its share of the data; every step is posted even
 * when its block is empty, as NCCL's ring does, so latency is 2(p-1) hops
 * whatever the size. */
int sched_nccl_ring(weft_sched *s, const sched_params *p, const sched_nccl *o);
/* Trees: channel c uses tree c % 2 of a double binary tree over the nodes
 * (sched_dbtree_pos) whose vertices are the channel's head ranks h_c, and
 * a chain through the node's other ranks below each head (h_c, h_c+1, ...
 * wrapping); the data of the channel is pipelined in chunks up the
 * reduction and down the broadcast at once. */
int sched_nccl_tree(weft_sched *s, const sched_params *p, const sched_nccl *o);

/* The local rank through which channel c of nch leaves a node of k ranks. */
static inline int sched_nccl_head(int c, int nch, int k)
{
    return (int)(((long)c * k / nch) % k);
}

#endif
