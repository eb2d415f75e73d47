/* What a model's mixture-of-experts blocks share, the GPT's and the
 * Llama's (moe_block.c): the experts' sizes from the config, one block's
 * forward with its counting, the step's end (the counts over the chunk's
 * slots, the balancing bias's step, here or by the run over its
 * replicas) and the counters weft_model_moe_stats
 * reads. A block's tensors lie in the table as router, experts' first
 * projection, their second, then the bias (with bias=1). */
#ifndef TRAIN_MOE_BLOCK_H
#define TRAIN_MOE_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "train/model.h"
#include "train/moe.h"

/* Experts' counters per layer [n_layer * experts] or [n_layer]: since the
 * step began (this slot's forwards), and the last step's (the chunk's).
 * It is the first member of a model's activation record (the slot's
 * arch), so that the step's end finds every slot's from the chunk. */
typedef struct {
    int64_t *load, *routed, *dropped;
    int64_t *last_load, *last_routed, *last_dropped;
    int64_t *pending;       /* shared bias: the loads the run has not taken */
    double *aux, *z;        /* each layer's last forward */
    int stepped;            /* a step has ended: last_* hold it */
    int replay;             /* recomputation: forward again, counted once */
} moe_book;

/* An expert's width: moe_ffn, else the dense MLP's (a Llama's ffn, a
 * GPT's 4 * dim). */
int train_moe_expert_ffn(const weft_model_config *c);

/* Block k's router, experts and bias (with bias=1) in the table: a
 * Llama's experts.gate_up [E*2F, D] (expert e's gate rows then up rows
 * from row 2F*e) and experts.down [E*D, F]; a GPT's experts.fc [E*F, D]
 * and experts.proj [E*F, D] (hidden-major, so that --tp cuts fc and proj
 * by the same rows: each expert's F rows in two halves, each halved over
 * the ranks, as gate|up is); --ep cuts them by experts. The router and
 * experts start normal(0.02), the second projection proj_sd, the bias
 * zero. */
int train_moe_tensors(const weft_model_config *c, spec_list *l, int k, float proj_sd);

/* The counters' bytes (0 without experts), and the book laid out at p. */
size_t train_moe_book_bytes(const weft_model_config *c);
void train_moe_book_at(moe_book *b, const weft_model_config *c, void *p);

/* The layer's sizes for N rows: each expert's share of its width under
 * --tp, GELU experts in a GPT. */
moe_dims train_moe_dims_of(const weft_model *m, int N);

/* Block l's experts on x (every token's row): their outputs added to out,
 * counted in the slot's book unless rerun. rix: the router's tensor. */
int train_moe_block_forward(weft_model *m, int l, int rix, moe_acts *mo, float *out,
                            const float *x);

/* At the step's last backward (announce) of block l: its counts over the
 * chunk's slots become the last step's and the bias (rix + 3, with
 * bias=1) moves toward the mean load, or, once train_moe_share was
 * called, the counts wait for the run. */
int train_moe_block_step_end(weft_model *m, int l, int rix);

/* The balancing bias stepped by the run rather than by backward, so that
 * replicas step it alike: from then on the step's end keeps each layer's
 * loads (summed over the step's backwards) for train_moe_share_take
 * instead of stepping the bias. The run sums the taken loads over the
 * ranks the router is replicated over and hands the sums to
 * train_moe_share_step. Returns the loads' length (n_layer * experts), 0
 * when the model has no balancing bias (nothing changed). */
size_t train_moe_share(weft_model *m);
/* The same length once train_moe_share was called, else 0 (changes nothing). */
size_t train_moe_shared(const weft_model *m);

/* The kept loads into load[n_layer * experts] (layer-major; layers this
 * model does not hold: zero), and kept no more. */
void train_moe_share_take(weft_model *m, int64_t *load);

/* Each bias this model holds moved by load (as train_moe_share_take's),
 * and load kept as the last step's (weft_model_moe_stats reports what the
 * bias stepped from: the loads summed over the replicas and the step's
 * micro-batches). */
int train_moe_share_step(weft_model *m, const int64_t *load);

#endif
