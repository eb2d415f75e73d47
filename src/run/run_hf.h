/* The run's Hugging Face weights in (run_hf.c): --init-from DIR takes the
 * model from DIR/config.json and its parameters from DIR's safetensors,
 * each rank reading its own part; --export DIR writes the model there. */
#ifndef WEFT_RUN_RUN_HF_H
#define WEFT_RUN_RUN_HF_H

#include "run/run_int.h"

/* Before the defaults: without --model, --model becomes config.json's. */
int hf_run_options(weft_run *t, opts *o);
/* A --model given beside --init-from must be the model config.json
 * describes. */
int hf_run_check(weft_run *t, const weft_model_config *cfg, const char *spec);
/* This rank's model (whole, stage or tensor part) from --init-from's
 * weights: before the sync mode copies or shards the parameters. */
int hf_run_load(weft_run *t);
/* --export: collective; the model as a Hugging Face directory (no-op
 * without --export). */
int hf_run_export(weft_run *t);

#endif
