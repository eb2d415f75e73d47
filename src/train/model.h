/* Internals shared by the model files: the handle, the tensor table and
 * the activation arena. */
#ifndef TRAIN_MODEL_H
#define TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "train/layers.h"
#include "train/mm_auto.h"
#include "weft.h"

#define MODEL_NAME_MAX 48

/* How a tensor is cut over the tensor-parallel ranks (Megatron's):
 * column-parallel layers split their output rows, row-parallel ones their
 * input columns; the fused qkv splits each of its three parts by heads; the
 * token embedding splits its vocabulary, padded to a multiple of tp. A
 * Llama's k and v projections (SPLIT_KV) split their rows by kv heads when
 * tp divides them, and are whole on every rank when tp is a multiple. */
typedef enum { SPLIT_NONE = 0, SPLIT_ROWS, SPLIT_QKV, SPLIT_COLS, SPLIT_VOCAB, SPLIT_KV,
               SPLIT_EXPERT, SPLIT_EXPERT_GU, SPLIT_EXPERT_DOWN, SPLIT_EXPERT_GU_TP,
               SPLIT_EXPERT_COLS_TP } split_kind;
/* SPLIT_EXPERT: the experts' stacked weights, cut by rows over the expert
 * group (ep_size, ep_rank) rather than the tensor-parallel ranks: each
 * rank holds its own experts only (train_moe_split).
 * SPLIT_EXPERT_GU / SPLIT_EXPERT_DOWN (a spec's kind): the stacked gate|up
 * and down weights, which are SPLIT_EXPERT under an expert group, and
 * under tensor parallelism cut within each expert (Megatron's expert
 * tensor parallelism): gate|up's 2 * experts parts of F rows each by rows
 * as qkv's three parts (SPLIT_EXPERT_GU), down by columns (SPLIT_COLS).
 * Under both, a rank holds its own experts' tensor-parallel slices:
 * gate|up (and a GPT's fc and proj) cut as SPLIT_EXPERT_GU, of its
 * experts' 2 * experts / ep_size parts only (SPLIT_EXPERT_GU_TP); down
 * its experts' rows, cut by columns (SPLIT_EXPERT_COLS_TP). In the
 * tensor-parallel cut of every expert a rank's experts lie in one run,
 * so either is ep_rank's block of ep_size equal blocks of that cut. */
#define SPLIT_IS_EXPERT(k) ((k) == SPLIT_EXPERT || (k) == SPLIT_EXPERT_GU_TP || \
                            (k) == SPLIT_EXPERT_COLS_TP)

typedef struct {
    weft_tensor_info info;
    char name[MODEL_NAME_MAX];
    int global;             /* index in the whole model's table */
    int split;              /* split_kind */
    int wd0, wd1;           /* the whole tensor's shape (wd1 1 for vectors) */
} model_tensor;

/* One micro-batch's activations for one chunk: laid out anew by each
 * forward; the arena grows, never shrinks. */
typedef struct {
    float *arena;
    size_t arena_n;
    int32_t *tokens;     /* GPT inputs (first chunk) */
    int32_t *targets;    /* targets (last chunk) */
    size_t tok_cap;
    int B, T, rows, cols;
    int count;           /* counted targets */
    int ready;           /* forward done, backward not yet */
    int input_done;      /* split backward: B done, W not yet */
    float *logits, *probs;
    float *in;           /* a later chunk's input, copied (backward reads it) */
    float *out;          /* output of a chunk that is not the last */
    float *din;          /* input gradient of a chunk that is not the first */
    uint16_t *lin_scratch; /* bf16: a linear layer's incoming gradient, rounded */
    void *arch;          /* activation pointers of the MLP or GPT code */
} model_slot;

/* A contiguous range of blocks [first, last] and its slots. */
typedef struct {
    int first, last;
    model_slot *slot;
    int nslot;
} model_chunk;

struct weft_model {
    weft_model_config cfg;
    model_tensor *tensors;  /* this model's tensors, in flat-buffer order */
    int ntensors;
    int *gmap;              /* whole model's tensor index -> ours, or -1 */
    int nglobal;
    int tied;               /* our copy of the token embedding whose gradient
                               the caller sums with the original's; -1: none */
    float *params, *grads;
    size_t nparams;

    /* tensor parallelism: this rank's part of every split tensor */
    weft_comm *tp;          /* NULL: one rank (or a shell that never computes) */
    int tp_size, tp_rank;
    int seqpar;             /* sequence parallelism: residual rows split over tp */
    uint64_t tp_calls, tp_bytes; /* its collectives so far */

    int nblocks;
    model_chunk *chunk;
    int nchunk;
    int split;              /* slots keep what backward-for-weights needs */

    mm_ctx *mm;
    int threads, backend;
    weft_precision prec;
    uint16_t *w16;          /* bf16: weights rounded at forward, parallel to params */

    /* the chunk and slot being run (and the last forward's, for logits) */
    model_chunk *ck;
    model_slot *s;
    int announce;           /* backward tells the hook */
    float bw_weight;        /* the backward's share of the step's loss (a
                               pipeline's micro-batch): losses a block adds
                               itself, as the experts' balancing ones, scale by it */
    weft_grad_ready_fn hook;
    void *hook_arg;
    weft_param_need_fn phook;
    void *phook_arg;
    int recompute;          /* GPT: blocks' activations rebuilt in backward */
    struct moe_ep *ep;      /* experts over an expert group (moe_ep.h), owned; NULL: none */
    struct attn_cp *cp;     /* context parallelism (attention_cp.h), owned; NULL: none */
    int ep_size, ep_rank;   /* SPLIT_EXPERT tensors hold this rank's experts (1, 0: all) */
    int moe_shared;         /* the run steps the balancing bias (train_moe_share) */
};

/* Arena carving: with base NULL only the size is counted. */
typedef struct {
    float *base;
    size_t used;
} carver;
float *train_carve(carver *c, size_t n);
uint16_t *train_carve16(carver *c, size_t n);

/* Tensor i of the whole model's table in buf (params or grads). */
float *train_model_tensor_ptr(weft_model *m, float *buf, int i);

/* The whole model's table: what train_*_tensors append, each tensor with
 * its block and its initialisation. */
typedef enum { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_UNIFORM } init_kind;
typedef struct {
    char name[MODEL_NAME_MAX];
    int block, ndim, d0, d1;
    init_kind init;
    float scale;            /* normal: sd; uniform: bound */
    int split;              /* split_kind */
} model_spec;
typedef struct {
    model_spec *t;
    int n, cap;
} spec_list;
int train_spec_add(spec_list *l, const char *name, int block, int ndim, int d0, int d1,
                   init_kind init, float scale);
/* Marks the last tensor added as split that way. */
void train_spec_split(spec_list *l, int split);
int train_mlp_tensors(const weft_model_config *c, spec_list *l);
int train_gpt_tensors(const weft_model_config *c, spec_list *l);
int train_llama_tensors(const weft_model_config *c, spec_list *l);
int train_model_blocks(const weft_model_config *c);
/* Builds m's table from the chunks; fills m->tensors, gmap, tied, nparams. */
int train_model_table(weft_model *m);
/* A parameter or gradient vector of n floats, 64-byte aligned (the
 * kernels' loads), or NULL; free() releases it. */
float *train_model_vector(size_t n);
/* A create flag of train/ alone: the parameters and gradients are left as
 * allocated, untouched (neither zeroed nor initialised), for a ZeRO
 * checkpoint load that writes the parameters each rank keeps and whose
 * first step zeroes the gradients (train/ckpt_shard_zero.c): their pages
 * are then faulted by the load and the step, not first by a memset. */
#define TRAIN_STAGE_UNTOUCHED (1u << 16)
void train_model_init(weft_model *m, uint64_t seed);

/* Allocates the per-slot pointer records of the MLP or GPT code. */
void *train_mlp_arch(const weft_model *m);
void *train_gpt_arch(const weft_model *m);
/* Lays out the current chunk's activations in the current slot for batch
 * rows (GPT: B x T); returns the floats needed. base NULL counts only. */
size_t train_mlp_layout(weft_model *m, float *base, int B);
int train_mlp_forward(weft_model *m, const float *x, int B);
int train_mlp_backward(weft_model *m, const float *dout, int part);
size_t train_gpt_layout(weft_model *m, float *base, int B, int T);
int train_gpt_forward(weft_model *m, const void *in, int B, int T);
int train_gpt_backward(weft_model *m, const float *dout, int part);
void *train_llama_arch(const weft_model *m);
size_t train_llama_layout(weft_model *m, float *base, int B, int T);
int train_llama_forward(weft_model *m, const void *in, int B, int T);
int train_llama_backward(weft_model *m, const float *dout, int part);
/* The Llama config's keys after "llama:", its spec (as snprintf), its
 * check, and whether tp ranks can split it (model_llama.c). */
int train_llama_parse(const char *s, weft_model_config *c);
int train_llama_format(const weft_model_config *c, char *buf, size_t len);
int train_llama_check(const weft_model_config *c);
int train_llama_tp_fits(const weft_model_config *c, int tp);

/* Tensor parallelism (tp.c): the group's collectives, counted, and the
 * vocabulary-parallel pieces. All are no-ops or plain at tp_size 1. */
int train_tp_allreduce(weft_model *m, float *buf, size_t n, weft_op op);
/* n floats of this rank's rows into full (every rank's, in rank order), and back summed. */
int train_tp_allgather(weft_model *m, const float *mine, float *full, size_t n);
int train_tp_reduce_scatter(weft_model *m, const float *full, float *mine, size_t n);
/* The MLP layer l's kind: 0 replicated, 1 column-parallel, 2 row-parallel. */
int train_mlp_layer_kind(const weft_model *m, int l);
/* Padded vocabulary rows of this rank's shard. */
int train_tp_vocab_rows(const weft_model *m);
void train_tp_embedding_forward(weft_model *m, float *out, const int32_t *tok, const float *wte,
                                const float *wpe, int B, int T, int C);
void train_tp_embedding_backward(const weft_model *m, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tok, int B, int T, int C);
double train_tp_xent_forward(weft_model *m, float *probs, const float *logits,
                             const int32_t *targets, int rows, int *count);
void train_tp_xent_backward(const weft_model *m, float *dlogits, const float *probs,
                            const int32_t *targets, int rows, float scale);
int train_tp_count_correct(weft_model *m, const float *logits, const int32_t *targets, int rows);
void train_add_bias(float *out, const float *b, int rows, int n);
/* Maps element e of our tensor j to the whole tensor's; -1: padding. */
long long train_tensor_whole_elem(const weft_model *m, int j, size_t e);

/* Part of a backward pass (weft_backward_part). */
enum { PART_ALL = 0, PART_INPUT = 1, PART_WEIGHT = 2 };

lin_ctx train_model_lin(weft_model *m);
/* Tells the hook, when backward announces, that the whole model's tensors
 * [first, first + count) are done (ours of them; the tied copy is the
 * caller's to announce). */
void train_model_grads_ready(weft_model *m, int first, int count);
/* The parameter hook for the whole model's tensors [first, first + count)
 * that are ours (in contiguous runs); rc is passed through: a call after
 * a failure does nothing but return it. */
int train_model_params(weft_model *m, int rc, int first, int count, int need);
int train_chunk_has(const weft_model *m, int block);

#endif
