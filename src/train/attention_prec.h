/* Attention at a run's precision: layers.h's train_attention_* with a
 * bf16 flag. In bf16 the products Q K^T, P V and backward's dO V^T,
 * P^T dO and dS K take operands rounded to bf16 and sum in fp32, as a
 * bf16 run's linear layers do; dS^T Q (the key gradient), the softmax,
 * its gradient, the saved log-sum-exps and every result stay fp32
 * (attention.c says why for dS^T Q). bf16 0 is layers.h's functions, bit
 * for bit. */
#ifndef TRAIN_ATTENTION_PREC_H
#define TRAIN_ATTENTION_PREC_H

#include "train/layers.h"

void train_attention_gqa_forward_prec(mm_ctx *mm, int bf16, float *out, float *att,
                                      const float *q, const float *k, const float *v, int qs,
                                      int ks, int vs, int B, int T, int NH, int NKV, int hs);
void train_attention_gqa_backward_prec(mm_ctx *mm, int bf16, float *dq, float *dk, float *dv,
                                       float *datt, const float *dout, const float *q,
                                       const float *k, const float *v, const float *att,
                                       int qs, int ks, int vs, int B, int T, int NH, int NKV,
                                       int hs);
void train_attention_forward_prec(mm_ctx *mm, int bf16, float *out, float *att,
                                  const float *qkv, int B, int T, int C, int NH);
void train_attention_backward_prec(mm_ctx *mm, int bf16, float *dqkv, float *datt,
                                   const float *dout, const float *qkv, const float *att, int B,
                                   int T, int C, int NH);

#endif
