/* Context parallelism: causal attention over a sequence split on the
 * ranks of a context-parallel group (attention_cp.c), and the block
 * kernels it runs on each rank (attention_cp_block.c).
 *
 * The zig-zag balance (Megatron's): a sequence of T tokens is cut into 2C
 * chunks of cs = T / 2C; rank r of C holds chunks r and 2C-1-r, in that
 * order, as its Tl = T / C local rows. Under the causal mask the early
 * chunk sees little and the late one much, so every rank does the same
 * work. A rank's queries meet every rank's keys and values as those
 * travel around the ring: C steps, each the next block posted before the
 * current one is computed on. Partial results merge with an online
 * softmax (running max and sum per query row, fp32), so the products are
 * those of one process in another order: equal to about 1e-6, not bit for
 * bit. With grouped-query attention only the NKV kv heads travel; in bf16
 * they travel rounded to bf16 (the products' operands there), the dK/dV
 * sums in fp32. */
#ifndef TRAIN_ATTENTION_CP_H
#define TRAIN_ATTENTION_CP_H

#include <stddef.h>
#include <stdint.h>

#include "train/matmul.h"
#include "weft.h"

typedef struct attn_cp attn_cp;

/* group: the context-parallel group (taken over: destroyed with the
 * context); its size C and this rank's place r in it. */
int train_attn_cp_open(attn_cp **out, weft_comm *group);
void train_attn_cp_free(attn_cp *cp); /* cp may be NULL */
int train_attn_cp_size(const attn_cp *cp);
int train_attn_cp_rank(const attn_cp *cp);

/* The global position of local row t (0 <= t < Tl) of rank r of C. */
int train_cp_pos(int r, int C, int Tl, int t);

/* A GPT's token + position embedding at the global positions of rank r
 * of cp's rows, and its backward (which ADDS into dwte and dwpe), as
 * layers.h's. */
void train_cp_embedding_forward(int r, int cp, float *out, const int32_t *tok, const float *wte,
                                const float *wpe, int B, int Tl, int C);
void train_cp_embedding_backward(int r, int cp, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tok, int B, int Tl, int C);
/* Rotary tables (layers_llama.h's) for those rows' global positions. */
void train_cp_rope_tables(int r, int cp, float *cos_t, float *sin_t, int Tl, int hs,
                          float theta);

/* Attention over the group, as layers.h's train_attention_gqa_forward on
 * the whole sequence: q, k, v are this rank's Tl rows (strides qs, ks,
 * vs), out [B*Tl, NH*hs]; att (2 B NH Tl floats) keeps each row's
 * log-sum-exp and scratch. Every rank of the group calls it with the same
 * shapes. Returns 0 or the ring's error. fp32, or bf16 products with
 * train_attn_cp_set_bf16. */
int train_attn_cp_forward(attn_cp *cp, mm_ctx *mm, float *out, float *att, const float *q,
                          const float *k, const float *v, int qs, int ks, int vs, int B, int Tl,
                          int NH, int NKV, int hs);
/* Its backward: dq, dk and dv overwritten (this rank's rows; dk and dv
 * summed over every rank's queries), from dout, the forward's inputs, its
 * output out and its att; datt: scratch of 2 B NH Tl floats. In bf16 out
 * is not read (a bf16 model keeps the output only rounded, for its next
 * product): each row's delta comes from one more ring of K/V first. */
int train_attn_cp_backward(attn_cp *cp, mm_ctx *mm, float *dq, float *dk, float *dv,
                           float *datt, const float *dout, const float *q, const float *k,
                           const float *v, const float *out, const float *att, int qs, int ks,
                           int vs, int B, int Tl, int NH, int NKV, int hs);

/* bf16 products in the ring's blocks (cp_dims.bf16), as the rest of a
 * bf16 run's: set once the model's precision is known. */
void train_attn_cp_set_bf16(attn_cp *cp, int on);

/* An int summed over the group (the loss's counted targets). */
int train_attn_cp_sum(attn_cp *cp, int *v);

/* Ring steps taken and bytes sent by this rank so far; the bytes its
 * ring buffers hold (activation memory outside the model's arena). */
void train_attn_cp_counters(const attn_cp *cp, uint64_t *steps, uint64_t *bytes,
                            uint64_t *buffers);

/* ---- the block kernels (attention_cp_block.c) ---------------------------------------
 * One ring step's work on one rank, without the ring: its queries (rank
 * qr's chunks) against a K/V block of rank kr's rows. kv is the block as
 * it travels: K [B*Tl, NKV*hs] then V the same. Chunk pairs are whole
 * (an earlier key chunk), diagonal (the same chunk: causal inside it) or
 * skipped (a later one). */
typedef struct {
    int B, Tl, NH, NKV, hs, C;
    int bf16; /* the products' operands rounded to bf16 (fp32 sums) */
} cp_dims;

/* Forward state: out holds the unnormalised sums, mx and sum (B NH Tl
 * each) each row's running max and sum; begin sets them empty, finish
 * divides and writes the log-sum-exp into mx. A step's products need
 * scratch: WEFT_ENOMEM without it. */
typedef struct {
    float *out, *mx, *sum;
} cp_fwd_state;

void train_cp_fwd_begin(const cp_dims *d, cp_fwd_state *st);
int train_cp_fwd_step(mm_ctx *mm, const cp_dims *d, cp_fwd_state *st, const float *q, int qs,
                      const float *kv, int qr, int kr);
void train_cp_fwd_finish(const cp_dims *d, cp_fwd_state *st);

/* Backward: delta (B NH Tl) = rowsum(dO * O), once; then per step dq
 * (zeroed by the caller, stride qs) gains the block's part, dkv (the
 * block's layout, zeroed by the caller) its keys' and values' parts. */
void train_cp_bwd_delta(const cp_dims *d, float *delta, const float *dout, const float *out);
/* delta without the output (a bf16 run keeps no fp32 copy of it): a
 * block's part, the sum over its keys of P dP (attention.c's own sum of a
 * row), added into delta (zeroed by the caller), one step of its own ring
 * before the gradients' ring. */
int train_cp_bwd_delta_step(mm_ctx *mm, const cp_dims *d, float *delta, const float *q, int qs,
                            const float *dout, const float *lse, const float *kv, int qr, int kr);
int train_cp_bwd_step(mm_ctx *mm, const cp_dims *d, float *dq, int qs, float *dkv,
                      const float *q, const float *dout, const float *lse, const float *delta,
                      const float *kv, int qr, int kr);

/* The block of rank-local k and v (strides ks, vs) as kv's layout. */
void train_cp_pack(const cp_dims *d, float *kv, const float *k, const float *v, int ks, int vs);

/* In bf16 the block travels rounded (half the bytes): packed so by its
 * owner with mm's rounding, the same bits each step would have rounded
 * it to, and the steps take it as such (kv NULL), for the same
 * products. The _16 steps with kv16 NULL are the fp32 block's above. */
void train_cp_pack16(mm_ctx *mm, const cp_dims *d, uint16_t *kv16, const float *k,
                     const float *v, int ks, int vs);
int train_cp_fwd_step16(mm_ctx *mm, const cp_dims *d, cp_fwd_state *st, const float *q,
                        int qs, const uint16_t *kv16, int qr, int kr);
int train_cp_bwd_delta_step16(mm_ctx *mm, const cp_dims *d, float *delta, const float *q,
                              int qs, const float *dout, const float *lse, const float *kv,
                              const uint16_t *kv16, int qr, int kr);
int train_cp_bwd_step16(mm_ctx *mm, const cp_dims *d, float *dq, int qs, float *dkv,
                        const float *q, const float *dout, const float *lse, const float *delta,
                        const float *kv, const uint16_t *kv16, int qr, int kr);
/* dkv's two halves back into dk and dv (strides ks, vs). */
void train_cp_unpack(const cp_dims *d, float *dk, float *dv, int ks, int vs, const float *dkv);

#endif
