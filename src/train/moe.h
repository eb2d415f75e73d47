/* A mixture-of-experts MLP on one rank (the Llama block's, moe.c): the
 * router, top-k selection with capacity, the experts' SwiGLU, the
 * combine, the balancing losses, and their backward. Exact and
 * deterministic: each expert takes its tokens in token order, a token's
 * outputs are added in top-k order. */
#ifndef TRAIN_MOE_H
#define TRAIN_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "train/matmul.h"
#include "train/moe_types.h"
#include "weft.h"

/* ceil(N * K * C / E) in double, at least 1, at most N; C <= 0: N. */
int train_moe_capacity(int N, int K, int E, float C);

/* Floats each record needs (int32 fields counted as floats). */
size_t train_moe_acts_floats(const moe_dims *d);
size_t train_moe_scratch_floats(const moe_dims *d);
/* Lays the record out from p (which has train_moe_acts_floats floats). */
void train_moe_acts_at(moe_acts *a, const moe_dims *d, float *p);
void train_moe_scratch_at(moe_scratch *s, const moe_dims *d, float *p);

/* out[N,D] += the experts' combined outputs for x[N,D]. wr[E,D] the
 * router, bias[E] (NULL: none) added to the scores for selection only,
 * wgu[E*2F,D] each expert's gate then up rows, wd[E*D,F] each expert's
 * down projection. load[E] (may be NULL) gets each expert's picks added.
 * Under expert parallelism (d->ep) the rows go to their experts' ranks and
 * back; its failures (a peer's, a disagreement) are returned. */
int train_moe_forward(mm_ctx *mm, const moe_dims *d, moe_acts *a, float *out, const float *x,
                       const float *wr, const float *bias, const float *wgu, const float *wd,
                       int64_t *load, moe_count *cnt);

/* From dout[N,D], the gradient of forward's out: ADDS into dx[N,D] and the
 * weight gradients; weight scales the balancing losses' gradients (the
 * loss's weight for this micro-batch). Under expert parallelism only this
 * rank's experts' weight gradients are written (the others' ranks write
 * theirs), from every token of the expert group that reached them. */
int train_moe_backward(mm_ctx *mm, const moe_dims *d, const moe_acts *a, moe_scratch *s,
                        float *dx, float *dwr, float *dwgu, float *dwd, const float *dout,
                        const float *x, const float *wr, const float *wgu, const float *wd,
                        float weight);

/* The same in two halves, for expert tensor parallelism (each rank holding
 * a share d->F of every expert's width): the experts' half ADDS their
 * input gradients (partial there) into dx and their weight gradients, and
 * leaves in s->dg each pick's <dout, y_e> (partial there too: the caller
 * sums s->dg over the group, in the sum of dx if it lies after it). The
 * router's half, from the whole s->dg, ADDS the router's weight gradient
 * and its input gradient into dx: the same on every rank, so it goes into
 * a dx already summed (or into one rank's part), never into each part. */
int train_moe_backward_experts(mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                               moe_scratch *s, float *dx, float *dwgu, float *dwd,
                               const float *dout, const float *wgu, const float *wd);
void train_moe_backward_router(mm_ctx *mm, const moe_dims *d, const moe_acts *a,
                               moe_scratch *s, float *dx, float *dwr, const float *x,
                               const float *wr, float weight);

/* The aux-loss-free balancing step from a step's loads (tokens that
 * picked each expert), the config's bias=1 or 2:
 *   MOE_BIAS_SIGN          bias[e] += rate * sign(mean - load[e])
 *   MOE_BIAS_PROPORTIONAL  bias[e] += rate * (mean - load[e]) / mean
 * Only the loads decide it, so ranks that count the same loads (the
 * tensor group, which routes the same rows) step alike. */
enum { MOE_BIAS_SIGN = 1, MOE_BIAS_PROPORTIONAL = 2 };
void train_moe_bias_update(float *bias, const int64_t *load, int E, int rule, float rate);

/* moe_config.c: one expert key at *s ("experts=8"; the caller moves past
 * the comma), advancing *s; the keys as ",experts=8,..." (nothing without
 * experts), as snprintf; and the fields' check. */
int train_moe_parse_key(const char **s, weft_model_config *c);
int train_moe_format(const weft_model_config *c, char *buf, size_t len);
int train_moe_check(const weft_model_config *c);
/* A GPT's: the same, without shared experts (the Llama's alone). */
int train_moe_check_gpt(const weft_model_config *c);
/* Each expert's width divides over tp ranks (a GELU expert's in two
 * halves of F/2 rows, each cut over the ranks); 1 without experts. */
int train_moe_tp_fits(const weft_model_config *c, int tp);

#endif
