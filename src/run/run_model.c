/* The run's model and optimiser as the run options describe them; the
 * shape is checked against the data before anything is allocated. */
#include "run/run_model.h"

#include "run/run_cp.h"
#include "run/run_hf.h"

#include <stdint.h>
#include <string.h>

/* A model fits data whose samples it can read: an MLP's input width is the
 * pixels per image and its outputs cover the classes; a GPT's vocabulary
 * covers the tokens and its context the window. Checked for new runs and
 * resumed ones alike, since a model from a checkpoint knows nothing of the
 * data it is now given. */
int model_check_fit(weft_run *t, const weft_model_config *cfg, const data_sets *d,
                    const char *source)
{
    const weft_dataset_info *ti = &d->ti;
    int mlp = cfg->type == WEFT_MODEL_MLP;
    if (mlp != (ti->kind == WEFT_DATA_IMAGE))
        return run_fail(t, WEFT_ECONFIG, "the model (%s) is %s, but the data %s is %s", source,
                        mlp ? "an MLP" : "a sequence model", ti->name,
                        ti->kind == WEFT_DATA_IMAGE ? "images" : "token windows");
    char geometry[64] = "";
    if (ti->height > 0 && ti->width > 0)
        snprintf(geometry, sizeof geometry, " (%dx%d images)", ti->height, ti->width);
    if (mlp && (cfg->widths[0] != ti->x_dim || cfg->widths[cfg->n_widths - 1] < ti->n_classes))
        return run_fail(t, WEFT_ECONFIG,
                        "the model (%s) takes %d inputs and has %d classes, but the data %s has "
                        "%d inputs%s and %d classes", source, cfg->widths[0],
                        cfg->widths[cfg->n_widths - 1], ti->name, ti->x_dim, geometry,
                        ti->n_classes);
    if (!mlp && ti->kind == WEFT_DATA_SEQ &&
        (cfg->vocab < ti->n_classes || cfg->ctx < ti->x_dim))
        return run_fail(t, WEFT_ECONFIG,
                        "the model (%s) has vocab %d and ctx %d, but the data %s has vocab %d "
                        "and windows of %d tokens (it needs vocab >= %d and ctx >= %d)", source,
                        cfg->vocab, cfg->ctx, ti->name, ti->n_classes, ti->x_dim, ti->n_classes,
                        ti->x_dim);
    return 0;
}

int model_config(weft_run *t, const run_opts *r, const data_sets *d, weft_model_config *cfg)
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
        return run_fail(t, WEFT_ECONFIG, "--model %s: %s", spec, weft_strerror(rc));
    if ((rc = hf_run_check(t, cfg, spec)) != 0)
        return rc;
    return model_check_fit(t, cfg, d, spec);
}

int model_new(weft_run *t, const run_opts *r, const data_sets *d, weft_model **out)
{
    weft_model_config cfg;
    *out = NULL;
    int rc = model_config(t, r, d, &cfg);
    if (rc != 0)
        return rc;
    rc = weft_model_create(out, &cfg, r->seed);
    if (rc != 0)
        return run_fail(t, rc, "cannot create the model: %s", weft_strerror(rc));
    return 0;
}

/* Precision and threads are the machine's, not the checkpoint's: set on a
 * new or a resumed model alike. */
int model_tune(weft_run *t, weft_model *m, const opts *o)
{
    weft_model_set_precision(m, strcmp(o->r.precision, "bf16") == 0 ? WEFT_PREC_BF16
                                                                    : WEFT_PREC_FP32);
    if (o->threads > 0)
        weft_model_set_threads(m, o->threads);
    if (o->recompute && weft_model_set_recompute(m, 1) != 0)
        return run_fail(t, WEFT_ECONFIG,
                        "--recompute: not with --schedule zb (its weight half needs the "
                        "activations recomputation reuses)");
    /* --cp: the run's model its context-parallel group (not a pipeline's
     * block measured alone) */
    return m == t->m ? run_cp_open(t) : 0;
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
