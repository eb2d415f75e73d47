/* MLP classifier: linear layers with ReLU or GELU between them. */
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>

#include "train/model.h"

/* In bf16 mode the inputs of the linear layers are kept only as bf16
 * (save[l].x); their fp32 forms live briefly in `tmp`. */
typedef struct {
    float *x;                            /* fp32: copy of the input */
    float *z[WEFT_MLP_MAX_WIDTHS];       /* pre-activations (last: logits) */
    float *h[WEFT_MLP_MAX_WIDTHS];       /* post-activations */
    float *d0, *d1;                      /* backward ping-pong */
    lin_save save[WEFT_MLP_MAX_WIDTHS];
} mlp_acts;

int train_mlp_build(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    m->arch = calloc(1, sizeof(mlp_acts));
    if (!m->arch)
        return WEFT_ENOMEM;
    for (int l = 0; l + 1 < c->n_widths; l++) {
        char name[MODEL_NAME_MAX];
        snprintf(name, sizeof name, "layers.%d.weight", l);
        int rc = train_model_add_tensor(m, name, 2, c->widths[l + 1], c->widths[l]);
        snprintf(name, sizeof name, "layers.%d.bias", l);
        if (rc || (rc = train_model_add_tensor(m, name, 1, c->widths[l + 1], 0)))
            return rc;
    }
    return 0;
}

void train_mlp_init(weft_model *m, weft_rng *r)
{
    /* torch.nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for both */
    for (int i = 0; i < m->ntensors; i++) {
        float bound = 1.0f / sqrtf((float)m->cfg.widths[i / 2]);
        float *p = train_model_tensor_ptr(m, m->params, i);
        for (size_t k = 0; k < m->tensors[i].info.numel; k++)
            p[k] = (2.0f * weft_rng_uniform(r) - 1.0f) * bound;
    }
}

size_t train_mlp_layout(weft_model *m, float *base, int B)
{
    const weft_model_config *c = &m->cfg;
    mlp_acts *a = m->arch;
    carver cv = { base, 0 };
    int L = c->n_widths - 1, maxw = 0, bf = m->prec == WEFT_PREC_BF16;
    size_t scratch = 0;
    for (int l = 0; l <= L; l++)
        maxw = c->widths[l] > maxw ? c->widths[l] : maxw;
    float *tmp = bf ? train_carve(&cv, (size_t)B * maxw) : NULL;
    a->x = bf ? NULL : train_carve(&cv, (size_t)B * c->widths[0]);
    for (int l = 0; l < L; l++) {
        a->z[l] = train_carve(&cv, (size_t)B * c->widths[l + 1]);
        a->h[l] = l + 1 == L ? NULL : bf ? tmp : train_carve(&cv, (size_t)B * c->widths[l + 1]);
        a->save[l].x = bf ? train_carve16(&cv, (size_t)B * c->widths[l]) : NULL;
        a->save[l].w = bf && base ? m->w16 + m->tensors[2 * l].info.offset : NULL;
        size_t s = (size_t)B * c->widths[l + 1];
        scratch = s > scratch ? s : scratch;
    }
    a->d0 = train_carve(&cv, (size_t)B * maxw);
    a->d1 = train_carve(&cv, (size_t)B * maxw);
    m->probs = train_carve(&cv, (size_t)B * c->widths[L]);
    m->lin_scratch = bf ? train_carve16(&cv, scratch) : NULL;
    if (base)
        m->logits = a->z[L - 1];
    return cv.used;
}

int train_mlp_forward(weft_model *m, const float *x, int B)
{
    const weft_model_config *c = &m->cfg;
    mlp_acts *a = m->arch;
    lin_ctx lc = train_model_lin(m);
    int L = c->n_widths - 1;
    const float *in = x;
    if (!lc.bf16) {
        memcpy(a->x, x, sizeof(float) * (size_t)B * c->widths[0]);
        in = a->x;
    }
    for (int l = 0; l < L; l++) {
        int k = c->widths[l], n = c->widths[l + 1];
        float *P = m->params;
        train_linear_forward(&lc, &a->save[l], a->z[l], in, train_model_tensor_ptr(m, P, 2 * l),
                             train_model_tensor_ptr(m, P, 2 * l + 1), B, k, n);
        if (l + 1 < L) {
            if (c->activation == WEFT_ACT_GELU)
                train_gelu_forward(train_mm_pool(m->mm), a->h[l], a->z[l], (size_t)B * n);
            else
                train_relu_forward(a->h[l], a->z[l], (size_t)B * n);
            in = a->h[l];
        }
    }
    return 0;
}

int train_mlp_backward(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    mlp_acts *a = m->arch;
    lin_ctx lc = train_model_lin(m);
    int L = c->n_widths - 1, B = m->B;
    const float *dout = m->probs;   /* now d(loss)/d(logits) */
    float *bufs[2] = { a->d0, a->d1 };
    for (int l = L - 1; l >= 0; l--) {
        int k = c->widths[l], n = c->widths[l + 1];
        float *din = l > 0 ? bufs[l & 1] : NULL;
        const float *in = l > 0 ? a->h[l - 1] : a->x;
        train_linear_backward(&lc, &a->save[l], din, train_model_tensor_ptr(m, m->grads, 2 * l),
                              train_model_tensor_ptr(m, m->grads, 2 * l + 1), dout, in,
                              train_model_tensor_ptr(m, m->params, 2 * l), B, k, n);
        train_model_grads_ready(m, 2 * l, 2);
        if (l > 0) {
            if (c->activation == WEFT_ACT_GELU)
                train_gelu_backward(train_mm_pool(m->mm), din, din, a->z[l - 1], (size_t)B * k);
            else
                train_relu_backward(din, din, a->z[l - 1], (size_t)B * k);
        }
        dout = din;
    }
    return 0;
}
