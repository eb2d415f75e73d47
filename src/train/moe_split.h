/* The experts' weights divided over an expert group (moe_split.c): a
 * model's stacked expert tensors cut to this rank's experts, and what the
 * data-parallel engines ask of them: which tensors they are, the group
 * their gradients are reduced over, and their share of the norm. */
#ifndef TRAIN_MOE_SPLIT_H
#define TRAIN_MOE_SPLIT_H

#include "weft.h"

/* Cuts m's expert tensors (SPLIT_EXPERT) to the experts of rank of size
 * (the expert group's), keeping the values m holds (initialised or
 * loaded): new flat buffers of the smaller size, the old ones freed, the
 * gradients zero. Before any engine (weft_dp, weft_zero) takes m. m->ep
 * must be open over that group; replicas: the ranks that hold the same
 * experts (one of each group), taken over with m->ep. */
int train_moe_split(weft_model *m, int size, int rank, weft_comm *replicas);

/* Tensor i (ours) holds a part of the experts: its gradient is reduced
 * over *group (the replicas) times *scale (1/size: the data-parallel
 * average over dp ranks of each group's sum), else 0. */
int train_moe_grad_group(weft_model *m, int i, weft_comm **group, float *scale);

/* Adds to *ss the squares of the other ranks' experts of the group (the
 * expert tensors' squares summed over the expert group, less ours, which
 * *ss already counts). Collective over the expert group; 0 and nothing
 * done without a split. */
int train_moe_sumsq_experts(weft_model *m, const float *g, double *ss);

/* With a split: m's parameters broadcast from rank 0 of c (the
 * data-parallel group), the experts' from rank 0 of their replicas; 1
 * when done so, 0 without a split (the caller broadcasts), or an error. */
int train_moe_broadcast(weft_model *m, weft_comm *c);

/* A shell (a model whose values are never run, for placing another
 * rank's part) laid out as a rank of an expert group of size divides it:
 * the table only, its buffers left as they are. Then the rank whose
 * experts its expert tensors map (0 at first; the shapes are alike). */
int train_moe_split_table(weft_model *m, int size);
void train_moe_split_rank(weft_model *m, int rank);
/* The expert group's size m's experts are divided over (1: not
 * divided), and whether our tensor i is one of the divided experts'. */
int train_moe_split_size(const weft_model *m);
int train_moe_split_is_expert(const weft_model *m, int i);

#endif
