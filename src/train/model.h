/* Internals shared by the model files: the handle, the tensor table and
 * the activation arena. */
#ifndef TRAIN_MODEL_H
#define TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "train/layers.h"
#include "train/matmul.h"
#include "weft.h"

#define MODEL_NAME_MAX 48

typedef struct {
    weft_tensor_info info;
    char name[MODEL_NAME_MAX];
} model_tensor;

struct weft_model {
    weft_model_config cfg;
    model_tensor *tensors;
    int ntensors;
    float *params, *grads;
    size_t nparams;

    mm_ctx *mm;
    int threads, backend;
    weft_precision prec;

    /* activations, laid out anew by each forward; grows, never shrinks */
    float *arena;
    size_t arena_n;
    int32_t *tokens;     /* GPT inputs of the last forward */
    int32_t *targets;    /* targets of the last forward */
    size_t tok_cap;

    /* last forward */
    int B, T, rows, cols;
    int count;           /* counted targets */
    int ready;           /* 1: a forward with targets awaits backward */
    float *logits, *probs;
    uint16_t *lin_scratch; /* bf16: a linear layer's incoming gradient, rounded */
    uint16_t *w16;         /* bf16: weights rounded at forward, parallel to params */
    void *arch;          /* activation pointers of the MLP or GPT code */
    weft_grad_ready_fn hook;
    void *hook_arg;
};

/* Arena carving: with base NULL only the size is counted. */
typedef struct {
    float *base;
    size_t used;
} carver;
float *train_carve(carver *c, size_t n);
uint16_t *train_carve16(carver *c, size_t n);

float *train_model_tensor_ptr(weft_model *m, float *buf, int i);

int train_mlp_build(weft_model *m);
void train_mlp_init(weft_model *m, weft_rng *r);
/* Lays out the activations for batch rows; returns the floats needed. */
size_t train_mlp_layout(weft_model *m, float *base, int B);
int train_mlp_forward(weft_model *m, const float *x, int B);
int train_mlp_backward(weft_model *m);

int train_gpt_build(weft_model *m);
void train_gpt_init(weft_model *m, weft_rng *r);
size_t train_gpt_layout(weft_model *m, float *base, int B, int T);
int train_gpt_forward(weft_model *m, const int32_t *tok, int B, int T);
int train_gpt_backward(weft_model *m);

/* Appends a tensor to the table (grows it). */
int train_model_add_tensor(weft_model *m, const char *name, int ndim, int d0, int d1);

lin_ctx train_model_lin(weft_model *m);
/* Tells the hook, if any, that tensors [first, first + count) are done. */
void train_model_grads_ready(weft_model *m, int first, int count);

#endif
