/* Training state in a checkpoint, under fixed record names:
 *   model/spec      the config as weft_model_config_format writes it
 *   model/config    the config's int32 fields, in declaration order
 *   param/NAME      each model tensor, f32, with its shape
 *   optim/config    "kind=sgd momentum=0.9 ..." (floats with 9 digits: exact)
 *   optim/steps     u64
 *   optim/base      u64, first parameter the state covers
 *   optim/NAME      each state buffer (f32 [n]): "momentum", "exp_avg", ...
 * Every record is the whole tensor, so the file is the same whatever the
 * rank count or sharding of the run that wrote it. */
#include "train/ckpt.h"
#include "train/ckpt_shard.h"
#include "train/ckpt_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields a checkpoint stores: those of the configs before Llama's
 * (which it still reads, the rest zero), then Llama's (its two floats by
 * their bits), then the mixture of experts' (zero when a file predates them). */
enum { OLD_CONFIG_FIELDS = 8 + WEFT_MLP_MAX_WIDTHS, LLAMA_CONFIG_FIELDS = OLD_CONFIG_FIELDS + 5,
       CONFIG_FIELDS = LLAMA_CONFIG_FIELDS + 9 };

static void config_to_fields(const weft_model_config *c, int32_t *f)
{
    int k = 0;
    f[k++] = c->type;
    f[k++] = c->n_widths;
    for (int i = 0; i < WEFT_MLP_MAX_WIDTHS; i++)
        f[k++] = c->widths[i];
    f[k++] = c->activation;
    f[k++] = c->vocab;
    f[k++] = c->ctx;
    f[k++] = c->n_layer;
    f[k++] = c->n_head;
    f[k++] = c->d_model;
    f[k++] = c->n_kv_head;
    f[k++] = c->ffn;
    f[k++] = c->tied;
    memcpy(&f[k++], &c->rope_theta, 4);
    memcpy(&f[k++], &c->rms_eps, 4);
    f[k++] = c->experts;    /* mixture of experts: zero in older files */
    f[k++] = c->topk;
    f[k++] = c->moe_ffn;
    f[k++] = c->shared;
    f[k++] = c->router;
    f[k++] = c->moe_bias;
    memcpy(&f[k++], &c->capacity, 4);
    memcpy(&f[k++], &c->aux_loss, 4);
    memcpy(&f[k++], &c->z_loss, 4);
}

static void fields_to_config(const int32_t *f, int n, weft_model_config *c)
{
    int k = 0;
    memset(c, 0, sizeof *c);
    c->type = f[k++];
    c->n_widths = f[k++];
    for (int i = 0; i < WEFT_MLP_MAX_WIDTHS; i++)
        c->widths[i] = f[k++];
    c->activation = f[k++];
    c->vocab = f[k++];
    c->ctx = f[k++];
    c->n_layer = f[k++];
    c->n_head = f[k++];
    c->d_model = f[k++];
    if (n < LLAMA_CONFIG_FIELDS)
        return;
    c->n_kv_head = f[k++];
    c->ffn = f[k++];
    c->tied = f[k++];
    memcpy(&c->rope_theta, &f[k++], 4);
    memcpy(&c->rms_eps, &f[k++], 4);
    if (n < CONFIG_FIELDS)
        return;
    c->experts = f[k++];
    c->topk = f[k++];
    c->moe_ffn = f[k++];
    c->shared = f[k++];
    c->router = f[k++];
    c->moe_bias = f[k++];
    memcpy(&c->capacity, &f[k++], 4);
    memcpy(&c->aux_loss, &f[k++], 4);
    memcpy(&c->z_loss, &f[k++], 4);
}

int train_ckpt_put_config(weft_ckpt *c, const weft_model_config *cfg)
{
    char spec[512];
    int32_t fields[CONFIG_FIELDS];
    config_to_fields(cfg, fields);
    int64_t nf = CONFIG_FIELDS;
    if (weft_model_config_format(cfg, spec, sizeof spec) >= (int)sizeof spec)
        return WEFT_EINVAL;
    int rc = weft_ckpt_put_str(c, "model/spec", spec);
    if (rc == 0)
        rc = weft_ckpt_put_tensor(c, "model/config", WEFT_I32, fields, 1, &nf);
    return rc;
}

int weft_ckpt_put_model(weft_ckpt *c, weft_model *m)
{
    if (!c || !m)
        return WEFT_EINVAL;
    int rc = train_ckpt_put_config(c, weft_model_config_of(m));
    size_t n;
    float *p = weft_model_params(m, &n);
    int count = weft_model_tensor_count(m);
    for (int i = 0; rc == 0 && i < count; i++) {
        weft_tensor_info ti;
        char name[256];
        int64_t shape[4];
        rc = weft_model_tensor_info(m, i, &ti);
        if (rc != 0)
            break;
        for (int d = 0; d < ti.ndim; d++)
            shape[d] = ti.shape[d];
        snprintf(name, sizeof name, "param/%s", ti.name);
        rc = weft_ckpt_put_tensor(c, name, WEFT_F32, p + ti.offset, ti.ndim, shape);
    }
    return rc;
}

int weft_ckpt_model_config(const weft_ckpt *c, weft_model_config *cfg)
{
    weft_ckpt_entry e;
    if (!c || !cfg)
        return WEFT_EINVAL;
    int rc = weft_ckpt_find(c, "model/config", &e);
    if (rc != 0)
        return rc;
    if (e.kind != WEFT_CKPT_TENSOR || e.dtype != WEFT_I32 ||
        (e.nbytes != CONFIG_FIELDS * 4 && e.nbytes != LLAMA_CONFIG_FIELDS * 4 &&
         e.nbytes != OLD_CONFIG_FIELDS * 4))
        return WEFT_EIO;
    int32_t fields[CONFIG_FIELDS];
    int n = (int)(e.nbytes / 4);
    memcpy(fields, e.data, (size_t)n * 4);
    fields_to_config(fields, n, cfg);
    return weft_model_config_check(cfg) == 0 ? 0 : WEFT_EIO;
}

int weft_ckpt_get_params(const weft_ckpt *c, weft_model *m)
{
    if (!c || !m)
        return WEFT_EINVAL;
    if (ckpt_shard_lazy(c)) /* a sharded save's manifest: read from its files */
        return ckpt_shard_get_params(c, m);
    size_t n;
    float *p = weft_model_params(m, &n);
    int count = weft_model_tensor_count(m);
    for (int i = 0; i < count; i++) {
        weft_tensor_info ti;
        weft_ckpt_entry e;
        char name[256];
        int rc = weft_model_tensor_info(m, i, &ti);
        if (rc != 0)
            return rc;
        snprintf(name, sizeof name, "param/%s", ti.name);
        rc = weft_ckpt_find(c, name, &e);
        if (rc != 0)
            return rc;
        int same = e.kind == WEFT_CKPT_TENSOR && e.dtype == WEFT_F32 && e.ndim == ti.ndim &&
                   e.nbytes == ti.whole_numel * sizeof(float);
        if (!same)
            return WEFT_EIO;
        if (ti.numel == ti.whole_numel) {
            memcpy(p + ti.offset, e.data, e.nbytes);
            continue;
        }
        /* a tensor-parallel part: each element from its place in the whole */
        const float *w = e.data;
        for (size_t k = 0; k < ti.numel; k++) {
            size_t at;
            p[ti.offset + k] = weft_model_tensor_whole_elem(m, i, k, &at) == 0 ? w[at] : 0.0f;
        }
    }
    return 0;
}

int weft_ckpt_get_model(const weft_ckpt *c, weft_model **out)
{
    if (!c || !out)
        return WEFT_EINVAL;
    *out = NULL;
    weft_model_config cfg;
    int rc = weft_ckpt_model_config(c, &cfg);
    weft_model *m = NULL;
    weft_block_range all = {0, rc == 0 ? weft_model_block_count(&cfg) : 0};
    if (rc == 0) /* the load writes every parameter: no random start */
        rc = weft_model_create_stage(&m, &cfg, 0, &all, 1, WEFT_STAGE_NO_INIT);
    if (rc == 0)
        rc = weft_ckpt_get_params(c, m);
    if (rc != 0) {
        weft_model_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

int train_ckpt_put_optim_config(weft_ckpt *c, const weft_optim_config *oc, int64_t steps)
{
    char text[256];
    snprintf(text, sizeof text,
             "kind=%s momentum=%.9g nesterov=%d weight_decay=%.9g beta1=%.9g beta2=%.9g "
             "eps=%.9g",
             oc->kind == WEFT_OPTIM_ADAMW ? "adamw" : "sgd", (double)oc->momentum,
             (int)oc->nesterov, (double)oc->weight_decay, (double)oc->beta1,
             (double)oc->beta2, (double)oc->eps);
    int rc = weft_ckpt_put_str(c, "optim/config", text);
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "optim/steps", (uint64_t)steps);
    return rc;
}

int weft_ckpt_put_optim(weft_ckpt *c, weft_optim *o)
{
    if (!c || !o)
        return WEFT_EINVAL;
    size_t base, n;
    weft_optim_range(o, &base, &n);
    int rc = train_ckpt_put_optim_config(c, weft_optim_config_of(o), weft_optim_steps(o));
    if (rc == 0)
        rc = weft_ckpt_put_u64(c, "optim/base", (uint64_t)base);
    int count = weft_optim_state_count(o);
    for (int i = 0; rc == 0 && i < count; i++) {
        const char *sname;
        const float *s = weft_optim_state(o, i, &sname);
        char name[256];
        int64_t shape = (int64_t)n;
        snprintf(name, sizeof name, "optim/%s", sname);
        rc = weft_ckpt_put_tensor(c, name, WEFT_F32, s, 1, &shape);
    }
    return rc;
}

int weft_ckpt_optim_config(const weft_ckpt *c, weft_optim_config *oc)
{
    if (!c || !oc)
        return WEFT_EINVAL;
    char text[256], kind[16];
    int rc = weft_ckpt_get_str(c, "optim/config", text, sizeof text);
    if (rc != 0)
        return rc == WEFT_EINVAL ? WEFT_EIO : rc;
    float mom, wd, b1, b2, eps;
    int nesterov;
    if (sscanf(text,
               "kind=%15s momentum=%g nesterov=%d weight_decay=%g beta1=%g beta2=%g eps=%g",
               kind, &mom, &nesterov, &wd, &b1, &b2, &eps) != 7)
        return WEFT_EIO;
    int adamw = strcmp(kind, "adamw") == 0;
    if (!adamw && strcmp(kind, "sgd") != 0)
        return WEFT_EIO;
    weft_optim_config_default(oc, adamw ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
    oc->momentum = mom;
    oc->nesterov = nesterov;
    oc->weight_decay = wd;
    oc->beta1 = b1;
    oc->beta2 = b2;
    oc->eps = eps;
    return 0;
}

int weft_ckpt_get_optim(const weft_ckpt *c, size_t base, size_t n, weft_optim **out)
{
    return train_ckpt_get_optim_stage(c, NULL, base, n, out);
}

int weft_ckpt_put_rng(weft_ckpt *c, const char *name, const weft_rng *r)
{
    if (!r)
        return WEFT_EINVAL;
    int64_t four = 4;
    return weft_ckpt_put_tensor(c, name, WEFT_I64, r->s, 1, &four);
}

int weft_ckpt_get_rng(const weft_ckpt *c, const char *name, weft_rng *r)
{
    weft_ckpt_entry e;
    int rc = weft_ckpt_find(c, name, &e);
    if (rc != 0)
        return rc;
    if (!r || e.kind != WEFT_CKPT_TENSOR || e.dtype != WEFT_I64 || e.nbytes != sizeof r->s)
        return WEFT_EIO;
    memcpy(r->s, e.data, sizeof r->s);
    return 0;
}
