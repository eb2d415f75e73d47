/* Expert parallelism for the mixture-of-experts layers (moe_ep.c): the
 * experts spread over an expert group of ranks, E/size each (expert e on
 * the group's rank e / (E/size)); tokens go to their experts' ranks with
 * all-to-all-v and come back the same way, in forward and backward. A
 * rank computes and writes the gradients of its own experts only, from
 * every token of the group that reached them. Either the model's expert
 * tensors hold this rank's experts only (train_moe_split: their gradients
 * are summed over the replicas and divided by the data-parallel size), or
 * they stay whole (under a pipeline) and the others' experts' gradients
 * stay zero, so the data-parallel average is again each expert's sum over
 * its holders' tokens divided by the data-parallel size, once. */
#ifndef TRAIN_MOE_EP_H
#define TRAIN_MOE_EP_H

#include <stdint.h>

#include "train/matmul.h"
#include "train/moe_types.h"
#include "weft.h"

/* group: the expert group (taken over: freed with the context); NULL
 * carries only the test skew on one rank. first: the data-parallel rank of
 * the group's rank 0, for messages. skew (tests): added to the router
 * logits of expert 0 and half of it to expert 1's, so that they take most
 * tokens. lie (tests): this rank announces a capacity one higher than the
 * one it computed. */
int train_moe_ep_open(moe_ep **out, weft_comm *group, int experts, int first, float skew,
                      int lie);
void train_moe_ep_free(moe_ep *p);

/* The weights passed from now on hold this rank's experts only (the
 * model's were cut, train_moe_split); replicas (taken over, may be NULL):
 * the ranks that hold the same experts. */
void train_moe_ep_set_split(moe_ep *p, weft_comm *replicas);
weft_comm *train_moe_ep_replicas(const moe_ep *p);
/* The expert group (NULL without one), and *v summed over it. */
weft_comm *train_moe_ep_group(const moe_ep *p);
int train_moe_ep_allreduce(moe_ep *p, double *v);

/* Evaluation (on): forwards only, every row kept (no capacity), and the
 * group's micro-batches may differ in length. */
void train_moe_ep_set_eval(moe_ep *p, int on);
int train_moe_ep_eval(const moe_ep *p);

/* Ranks of the expert group (1 without one). */
int train_moe_ep_size(const moe_ep *p);

/* The test skew added to logits[N,E]. */
void train_moe_ep_skew(const moe_ep *p, float *logits, int N, int E);

/* Where the layer places n rows of width w that leave for the experts'
 * ranks (the rows it routed, or their output gradients): memory of
 * weft_mem_alloc on the group, kept from call to call, from which the
 * all-to-all-v sends as it is. Valid until the next call; NULL and *rc
 * on failure. */
float *train_moe_ep_send_rows(moe_ep *p, size_t n, size_t w, int *rc);

/* Forward of one layer's experts for a's routed rows (xe: gathered into
 * train_moe_ep_send_rows's memory, grouped by expert in token order): the
 * per-expert counts gathered over the group and checked, the rows sent to
 * their experts' ranks, this rank's experts run on what came, the outputs
 * sent back into a->ye. The record of what came is kept (one per a) for
 * backward. */
int train_moe_ep_forward(moe_ep *p, mm_ctx *mm, const moe_dims *d, moe_acts *a,
                         const float *xe, const float *wgu, const float *wd);
/* Backward's mirror: dye (the gate-weighted output gradients, in
 * train_moe_ep_send_rows's memory) to the experts' ranks, their input
 * gradients back into s->dxe; this rank's experts' weight gradients
 * added. */
int train_moe_ep_backward(moe_ep *p, mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                          moe_scratch *s, const float *dye, float *dwgu, float *dwd,
                          const float *wgu, const float *wd);

/* Since the context opened: bytes this rank sent in the token
 * all-to-all-v (forward and backward), their seconds, the calls, the
 * rows its experts took (max over its experts of each call's, summed; and
 * their mean), and the bytes it copied in memory around those calls
 * (gathers, staging, regrouping), for the counters. */
typedef struct {
    uint64_t bytes, copied;
    double seconds;
    int64_t calls;
    int64_t rows_max, rows;   /* over the group's experts: busiest's, and all of them */
} moe_ep_count;
void train_moe_ep_counters(const moe_ep *p, moe_ep_count *out);
/* Bytes the layer copied for the dispatch, added to the counters. */
void train_moe_ep_copied(moe_ep *p, size_t bytes);

#endif
