/* Model FLOPs of one training step, the numerator of model-FLOPs
 * utilisation (MFU), shared by weft-train and weft-enginebench. */
#ifndef TRAIN_FLOPS_H
#define TRAIN_FLOPS_H

#include <stdint.h>

#include "weft.h"

/* Parameters of a model of this config, counted from the config alone
 * (weights, biases, embeddings, LayerNorm gains). */
double train_model_param_count(const weft_model_config *cfg);

/* FLOPs of forward + backward for batch samples (GPT: of seq tokens each):
 * 6 N per token (2 N forward, 4 N backward, N all parameters) plus, for a
 * GPT or Llama, attention's two matmuls per layer, 12 L T d per token (as llm.c and
 * PaLM count it: the whole T x T score matrix, not its causal half). An
 * MLP sample is one token; a mixture of experts counts the parameters a
 * token runs (topk experts of them, capacity ignored). The optimiser is
 * not counted. */
double train_model_flops(const weft_model_config *cfg, int batch, int seq);

#endif
