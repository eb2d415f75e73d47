/* Hugging Face's config.json for weft's models, both ways: GPT as
 * GPT2LMHeadModel, Llama as LlamaForCausalLM. What weft cannot represent
 * (another LayerNorm epsilon or activation, rope scaling, biases in a
 * Llama, untied GPT-2 heads) is refused, naming the field. */
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

#endif
