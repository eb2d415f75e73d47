/* weft-train's model and optimiser as the run options describe them; the
 * shape is checked against the data before anything is allocated. */
#include "train_tool.h"

#include <stdint.h>
#include <string.h>

static void model_config(const run_opts *r, const data_sets *d, weft_model_config *cfg)
{
    char spec[512];
    if (strcmp(r->model, "mlp") == 0)
        snprintf(spec, sizeof spec, "mlp:%d-512-512-%d", d->ti.x_dim, d->ti.n_classes);
    else if (strcmp(r->model, "gpt") == 0)
        snprintf(spec, sizeof spec, "gpt:vocab=%d,ctx=%d,layers=%d,heads=%d,dim=%d",
                 d->ti.n_classes, r->seq, r->layers, r->heads, r->dim);
    else
        snprintf(spec, sizeof spec, "%s", r->model);
    int rc = weft_model_config_parse(spec, cfg);
    if (rc == 0)
        rc = weft_model_config_check(cfg);
    if (rc != 0)
        die("--model %s: %s", spec, weft_strerror(rc));
    if (cfg->type == WEFT_MODEL_MLP &&
        (cfg->widths[0] != d->ti.x_dim || cfg->widths[cfg->n_widths - 1] < d->ti.n_classes))
        die("--model %s: the data has %d inputs and %d classes", spec, d->ti.x_dim,
            d->ti.n_classes);
    if (cfg->type == WEFT_MODEL_GPT && (cfg->vocab < d->ti.n_classes || cfg->ctx < r->seq))
        die("--model %s: the data needs vocab >= %d and ctx >= %d", spec, d->ti.n_classes,
            r->seq);
}

weft_model *model_new(const run_opts *r, const data_sets *d)
{
    weft_model_config cfg;
    weft_model *m;
    model_config(r, d, &cfg);
    int rc = weft_model_create(&m, &cfg, r->seed);
    if (rc != 0)
        die("cannot create the model: %s", weft_strerror(rc));
    return m;
}

/* Precision and threads are the machine's, not the checkpoint's: set on a
 * new or a resumed model alike. */
void model_tune(weft_model *m, const run_opts *r, int threads)
{
    weft_model_set_precision(m, strcmp(r->precision, "bf16") == 0 ? WEFT_PREC_BF16
                                                                  : WEFT_PREC_FP32);
    if (threads > 0)
        weft_model_set_threads(m, threads);
}

void model_optim_config(const run_opts *r, weft_optim_config *oc)
{
    weft_optim_config_default(oc, strcmp(r->optim, "adamw") == 0 ? WEFT_OPTIM_ADAMW
                                                                : WEFT_OPTIM_SGD);
    oc->momentum = (float)r->momentum;
    oc->weight_decay = (float)r->weight_decay;
}

weft_lr_schedule model_lr_schedule(const run_opts *r, long steps)
{
    return (weft_lr_schedule){ strcmp(r->schedule, "cosine") == 0 ? WEFT_LR_COSINE
                                                                 : WEFT_LR_CONSTANT,
                               (float)r->lr, (float)r->min_lr, (int32_t)r->warmup,
                               (int32_t)(steps < INT32_MAX ? steps : INT32_MAX) };
}
