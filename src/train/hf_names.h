/* Hugging Face transformers' tensor names for weft's models, both ways: GPT (GPT2LMHeadModel) and Llama (LlamaForCausalLM).
 * docs/TRAINING.md has the tables. */
#ifndef WEFT_TRAIN_HF_NAMES_H
#define WEFT_TRAIN_HF_NAMES_H

#include "weft.h"

#include <stddef.h>

/* transformers' name for weft's tensor (of a model of cfg's type), and
 * whether its stored layout is the transpose of weft's [out, in] (GPT-2's
 * Conv1D keeps [in, out]). WEFT_EINVAL for a name the model has not. */
int hf_name_of(const weft_model_config *cfg, const char *weft, char *hf, size_t cap,
               int *transpose);
/* The other way: 0 and weft's name; 1 for a tensor transformers stores
 * that weft rebuilds or shares (attention masks, rotary tables, a tied
 * output projection); WEFT_EINVAL for a name the model has not. */
int hf_weft_name(const weft_model_config *cfg, const char *hf, char *weft, size_t cap);

#endif
