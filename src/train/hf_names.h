/* Hugging Face transformers' tensor names for weft's models, both ways:
 * GPT (GPT2LMHeadModel), Llama (LlamaForCausalLM) and a Llama with experts
 * (MixtralForCausalLM). docs/TRAINING.md has the tables. */
#ifndef WEFT_TRAIN_HF_NAMES_H
#define WEFT_TRAIN_HF_NAMES_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

/* transformers' name for weft's tensor (of a model of cfg's type), and
 * whether its stored layout is the transpose of weft's [out, in] (GPT-2's
 * Conv1D keeps [in, out]). WEFT_EINVAL for a name the model has not, and
 * for a stack of experts (stored in pieces: hf_piece_name). */
int hf_name_of(const weft_model_config *cfg, const char *weft, char *hf, size_t cap,
               int *transpose);
/* The same for any tensor: it is stored as *pieces tensors (1, or a
 * Mixtral block's stacked experts: one a projection of an expert), piece
 * p being weft's rows [p R, (p + 1) R) for R = rows / *pieces, never
 * transposed; the name of piece `piece`. */
int hf_piece_name(const weft_model_config *cfg, const char *weft, int piece, char *hf,
                  size_t cap, int *transpose, int *pieces);
/* A stack's piece's shape as the file holds it (an expert's [ffn, dim]
 * projection, or [dim, ffn]); WEFT_EINVAL for any other tensor. */
int hf_piece_shape(const weft_model_config *cfg, const char *weft, int64_t *rows,
                   int64_t *cols);
/* The other way: 0 and weft's name; 1 for a tensor transformers stores
 * that weft rebuilds or shares (attention masks, rotary tables, a tied
 * output projection); WEFT_EINVAL for a name the model has not. */
int hf_weft_name(const weft_model_config *cfg, const char *hf, char *weft, size_t cap);

#endif
