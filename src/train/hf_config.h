/* Hugging Face's config.json for weft's models, both ways: GPT as
 * GPT2LMHeadModel, Llama as LlamaForCausalLM, a Llama with experts as
 * MixtralForCausalLM. What weft cannot represent (another LayerNorm
 * epsilon or activation, rope scaling, biases in a Llama, untied GPT-2
 * heads, a sliding window) is refused, naming the field; so is, the
 * other way, a model of weft's that no transformers architecture
 * computes (hf_config_supported). */
#ifndef WEFT_TRAIN_HF_CONFIG_H
#define WEFT_TRAIN_HF_CONFIG_H

#include "weft.h"

#include <stddef.h>

/* dir/config.json as weft's model: WEFT_ENOTSUP (why in err) for what weft
 * cannot represent, WEFT_EIO for a file that is no model config. */
int hf_config_read(const char *dir, weft_model_config *cfg, char *err, size_t cap);
/* config.json's text for cfg (a GPT or Llama): its length as snprintf
 * returns it, or WEFT_EINVAL. */
int hf_config_text(const weft_model_config *cfg, char *buf, size_t cap);
/* 0 when cfg can be written as a Hugging Face model, else WEFT_ENOTSUP and
 * why in err (err may be NULL): an MLP, a GPT's experts, and the expert
 * options Mixtral has not (sigmoid router, balancing bias, shared
 * experts). */
int hf_config_supported(const weft_model_config *cfg, char *err, size_t cap);
/* Mixtral has one width: a Llama's experts without shared ones get their
 * width as ffn (moe_ffn 0), the form config.json reads back as. */
void hf_config_canon(weft_model_config *cfg);
/* a and b are the same model up to hf_config_canon; fa and fb (cap bytes
 * each) get their specs. */
int hf_config_same(const weft_model_config *a, const weft_model_config *b, char *fa, char *fb,
                   size_t cap);

#endif
