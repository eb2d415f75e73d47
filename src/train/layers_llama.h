/* The layers a Llama adds to layers.h's: RMSNorm, rotary position
 * embedding, the SwiGLU gate and a token embedding without positions.
 * Conventions as in layers.h: row-major, backward ADDS into parameter
 * gradients; what each does to its input gradient is said with it. */
#ifndef TRAIN_LAYERS_LLAMA_H
#define TRAIN_LAYERS_LLAMA_H

#include <stddef.h>
#include <stdint.h>

/* out = in * rsqrt(mean(in^2) + eps) * w over the last dim c, in fp32
 * (transformers' LlamaRMSNorm); rstd[rows] saved for backward, which ADDS
 * into din (the residual stream). */
void train_rmsnorm_forward(float *out, float *rstd, const float *in, const float *w, int rows,
                           int c, float eps);
void train_rmsnorm_backward(float *din, float *dw, const float *dout, const float *in,
                            const float *w, const float *rstd, int rows, int c);

/* The rotary tables for positions 0..T-1 and head size hs (even): cos and
 * sin[T * hs/2] of t * theta^(-2i/hs), computed in fp32 as transformers
 * does (its two halves repeat the same values). */
void train_rope_tables(float *cos_t, float *sin_t, int T, int hs, float theta);
/* In place on x[rows, stride], rows b*T + t at position t: heads heads of
 * hs columns from column 0, each rotated as rotate_half does (first half
 * against second). Backward rotates the gradient back, in place. */
void train_rope_forward(float *x, const float *cos_t, const float *sin_t, int rows, int T,
                        int stride, int heads, int hs);
void train_rope_backward(float *dx, const float *cos_t, const float *sin_t, int rows, int T,
                         int stride, int heads, int hs);

/* gu[rows, 2f] holds gate | up per row; h[rows, f] = silu(gate) * up.
 * Backward OVERWRITES dgu[rows, 2f] from dh[rows, f] (dgu may not alias). */
void train_swiglu_forward(float *h, const float *gu, int rows, int f);
void train_swiglu_backward(float *dgu, const float *dh, const float *gu, int rows, int f);

/* out[r] = wte[tok[r] - lo] when the word is one of the n rows from lo
 * (tensor parallelism: this rank's part of the vocabulary), else zeros. */
void train_token_embedding_forward(float *out, const int32_t *tok, const float *wte, int lo, int n,
                                   int rows, int c);
void train_token_embedding_backward(float *dwte, const float *dout, const int32_t *tok, int lo,
                                    int n, int rows, int c);

#endif
