/* Forward and backward passes of the layers models are built from. Shapes
 * are row-major; "rows" is batch (MLP) or batch*seq (GPT). Unless said
 * otherwise a backward pass ADDS into parameter gradients and OVERWRITES
 * the input gradient. */
#ifndef TRAIN_LAYERS_H
#define TRAIN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "train/matmul.h"

/* Linear: out[rows,n] = in[rows,k] W[n,k]^T + b[n] (b may be NULL).
 *
 * In bf16 mode the matmul operands are bf16 and products accumulate in
 * fp32: forward rounds the input into save->x and the weight into
 * save->w, which backward uses (with the incoming gradient rounded into
 * c->scratch, rows*n); the fp32 `in` is then not needed by backward and
 * may be NULL there. In fp32 mode save is ignored. */
typedef struct {
    mm_ctx *mm;
    int bf16;
    uint16_t *scratch;
} lin_ctx;

typedef struct {
    uint16_t *x;   /* rows*k */
    uint16_t *w;   /* n*k */
} lin_save;

void train_linear_forward(const lin_ctx *c, const lin_save *save, float *out, const float *in,
                          const float *w, const float *b, int rows, int k, int n);
/* din may be NULL (first layer). */
void train_linear_backward(const lin_ctx *c, const lin_save *save, float *din, float *dw,
                           float *db, const float *dout, const float *in, const float *w,
                           int rows, int k, int n);
/* The two halves of it, for a backward split into input and weight
 * passes (zero-bubble pipelines): the same products, so the same sums. */
void train_linear_backward_input(const lin_ctx *c, const lin_save *save, float *din,
                                 const float *dout, const float *w, int rows, int k, int n);
void train_linear_backward_weight(const lin_ctx *c, const lin_save *save, float *dw, float *db,
                                  const float *dout, const float *in, int rows, int k, int n);

void train_relu_forward(float *out, const float *in, size_t n);
/* din may equal dout. */
void train_relu_backward(float *din, const float *dout, const float *in, size_t n);
/* GELU, tanh approximation (torch's approximate="tanh"). The pool (may
 * be NULL) splits the work where it is big enough; results do not depend
 * on it. */
void train_gelu_forward(pool *pl, float *out, const float *in, size_t n);
void train_gelu_backward(pool *pl, float *din, const float *dout, const float *in, size_t n);

/* Fused: pre[rows,n] += b, out = GELU(pre), in one pass over memory
 * instead of the linear layer's bias pass and GELU's (the MLP's 4C-wide
 * hidden layer is the step's largest activation). pre is what backward
 * needs, as train_gelu_backward's `in`. Equal, bit for bit, to
 * train_linear_forward's bias followed by train_gelu_forward. */
void train_bias_gelu_forward(pool *pl, float *out, float *pre, const float *b, int rows, int n);

/* LayerNorm over the last dim c, eps 1e-5; mean/rstd[rows] saved for
 * backward, which ADDS into din as well (the residual stream). Pool as
 * for GELU. */
void train_layernorm_forward(pool *pl, float *out, float *mean, float *rstd, const float *in,
                             const float *w, const float *b, int rows, int c);
void train_layernorm_backward(pool *pl, float *din, float *dw, float *db, const float *dout,
                              const float *in, const float *w, const float *mean,
                              const float *rstd, int rows, int c);

/* Token + position embedding: out[b,t,:] = wte[tok[b,t]] + wpe[t]. */
void train_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                             int B, int T, int C);
void train_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                              int B, int T, int C);

void train_residual_forward(float *out, const float *a, const float *b, size_t n);

/* Causal multi-head self-attention on qkv[B,T,3C] (q | k | v, heads of
 * C/NH contiguous in each). The probabilities are not kept (attention.c):
 * forward saves each row's log-sum-exp in att[B*NH*T] and uses the next
 * B*NH*T floats of att as scratch, so att needs 2*B*NH*T floats (B*NH*T
 * when T is 1), not B*NH*T*T. Backward overwrites dqkv; datt is scratch
 * of 2*B*NH*T floats. Work is split over (batch, head) pairs on mm's
 * pool, which own disjoint slices; the products run on mm's portable
 * kernel (mm NULL: on the caller alone, plain loops). */
void train_attention_forward(mm_ctx *mm, float *out, float *att, const float *qkv,
                             int B, int T, int C, int NH);
void train_attention_backward(mm_ctx *mm, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH);
/* The same with NKV <= NH key/value heads (dividing NH) of size hs: q, k
 * and v rows of strides qs, ks and vs (NH*hs, NKV*hs and NKV*hs wide);
 * out is [B*T, NH*hs]. Backward overwrites dq, dk and dv (which may be
 * parts of one buffer, as the fused qkv's are). */
void train_attention_gqa_forward(mm_ctx *mm, float *out, float *att, const float *q,
                                 const float *k, const float *v, int qs, int ks, int vs,
                                 int B, int T, int NH, int NKV, int hs);
void train_attention_gqa_backward(mm_ctx *mm, float *dq, float *dk, float *dv, float *datt,
                                  const float *dout, const float *q, const float *k,
                                  const float *v, const float *att, int qs, int ks, int vs,
                                  int B, int T, int NH, int NKV, int hs);

/* Softmax cross-entropy over rows of logits[rows,v]: probs get the
 * softmax; returns the summed loss over rows whose target is >= 0 and sets
 * *count to their number. Targets must be < v (checked by the caller). */
double train_softmax_xent_forward(float *probs, const float *logits, const int32_t *targets,
                                  int rows, int v, int *count);
/* Fused backward: dlogits = (probs - onehot(target)) * scale, 0 for
 * ignored rows; dlogits may equal probs. */
void train_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *targets,
                                 int rows, int v, float scale);

#endif
