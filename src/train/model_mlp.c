/* MLP classifier: linear layers with ReLU or GELU between them. Block l
 * is linear layer l with the activation after it (none after the last).
 * Under tensor parallelism the layers pair up as Megatron's MLP: an even
 * layer is column-parallel (its output split, the activation on the
 * parts), the odd one after it row-parallel (partial products summed over
 * the group, then its bias); a last even layer stays whole. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model.h"

/* In bf16 mode the inputs of the linear layers are kept only as bf16
 * (save[l].x); their fp32 forms live briefly in `tmp`. */
typedef struct {
    float *x;                            /* fp32: copy of the chunk's input */
    float *z[WEFT_MLP_MAX_WIDTHS];       /* pre-activations (last: logits) */
    float *h[WEFT_MLP_MAX_WIDTHS];       /* post-activations */
    float *dz[WEFT_MLP_MAX_WIDTHS];      /* split backward: each layer's dout */
    float *d0, *d1;                      /* backward ping-pong */
    lin_save save[WEFT_MLP_MAX_WIDTHS];
} mlp_acts;

int train_mlp_tensors(const weft_model_config *c, spec_list *l)
{
    /* torch.nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)) for both */
    int rc = 0;
    for (int k = 0; k + 1 < c->n_widths && rc == 0; k++) {
        char name[MODEL_NAME_MAX];
        float bound = 1.0f / sqrtf((float)c->widths[k]);
        int col = k % 2 == 0 && k + 2 < c->n_widths, row = k % 2 == 1;
        snprintf(name, sizeof name, "layers.%d.weight", k);
        rc = train_spec_add(l, name, k, 2, c->widths[k + 1], c->widths[k], INIT_UNIFORM, bound);
        train_spec_split(l, col ? SPLIT_ROWS : row ? SPLIT_COLS : SPLIT_NONE);
        snprintf(name, sizeof name, "layers.%d.bias", k);
        if (rc == 0)
            rc = train_spec_add(l, name, k, 1, c->widths[k + 1], 0, INIT_UNIFORM, bound);
        train_spec_split(l, col ? SPLIT_ROWS : SPLIT_NONE);
    }
    return rc;
}

/* Layer l's input and output widths on this rank. */
static int in_w(const weft_model *m, int l)
{
    return m->cfg.widths[l] / (train_mlp_layer_kind(m, l) == 2 ? m->tp_size : 1);
}

static int out_w(const weft_model *m, int l)
{
    return m->cfg.widths[l + 1] / (train_mlp_layer_kind(m, l) == 1 ? m->tp_size : 1);
}

void *train_mlp_arch(const weft_model *m)
{
    return calloc(1, sizeof(mlp_acts));
}

size_t train_mlp_layout(weft_model *m, float *base, int B)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    mlp_acts *a = s->arch;
    carver cv = { base, 0 };
    int L = c->n_widths - 1, f = m->ck->first, e = m->ck->last, bf = m->prec == WEFT_PREC_BF16;
    int maxw = 0;
    size_t scratch = 0;
    for (int l = f; l <= e; l++) {
        maxw = in_w(m, l) > maxw ? in_w(m, l) : maxw;
        maxw = out_w(m, l) > maxw ? out_w(m, l) : maxw;
    }
    float *tmp = bf ? train_carve(&cv, (size_t)B * maxw) : NULL;
    a->x = bf ? NULL : train_carve(&cv, (size_t)B * in_w(m, f));
    for (int l = f; l <= e; l++) {
        size_t out = (size_t)B * out_w(m, l);
        a->z[l] = train_carve(&cv, out);
        /* the chunk's output is sent on: it needs its own fp32 buffer */
        a->h[l] = l + 1 == L ? NULL : bf && l < e ? tmp : train_carve(&cv, out);
        a->save[l].x = bf ? train_carve16(&cv, (size_t)B * in_w(m, l)) : NULL;
        a->save[l].w = bf && base ? m->w16 + m->tensors[m->gmap[2 * l]].info.offset : NULL;
        a->dz[l] = m->split ? train_carve(&cv, out) : NULL;
        scratch = out > scratch ? out : scratch;
    }
    a->d0 = train_carve(&cv, (size_t)B * maxw);
    a->d1 = train_carve(&cv, (size_t)B * maxw);
    s->probs = e + 1 == L ? train_carve(&cv, (size_t)B * c->widths[L]) : NULL;
    s->lin_scratch = bf ? train_carve16(&cv, scratch) : NULL;
    if (base) {
        s->logits = e + 1 == L ? a->z[L - 1] : NULL;
        s->out = e + 1 < L ? a->h[e] : NULL;
    }
    return cv.used;
}

int train_mlp_forward(weft_model *m, const float *x, int B)
{
    const weft_model_config *c = &m->cfg;
    mlp_acts *a = m->s->arch;
    lin_ctx lc = train_model_lin(m);
    int L = c->n_widths - 1, f = m->ck->first, e = m->ck->last;
    const float *in = x;
    int rc = 0;
    if (!lc.bf16) {
        memcpy(a->x, x, sizeof(float) * (size_t)B * in_w(m, f));
        in = a->x;
    }
    for (int l = f; l <= e && rc == 0; l++) {
        int k = in_w(m, l), n = out_w(m, l), row = train_mlp_layer_kind(m, l) == 2;
        float *P = m->params, *bias = train_model_tensor_ptr(m, P, 2 * l + 1);
        if ((rc = train_model_params(m, rc, 2 * l, 2, 1)))
            break;
        train_linear_forward(&lc, &a->save[l], a->z[l], in, train_model_tensor_ptr(m, P, 2 * l),
                             row ? NULL : bias, B, k, n);
        if (row && (rc = train_tp_allreduce(m, a->z[l], (size_t)B * n, WEFT_SUM)) == 0)
            train_add_bias(a->z[l], bias, B, n);
        rc = train_model_params(m, rc, 2 * l, 2, 0);
        if (l + 1 < L) {
            if (c->activation == WEFT_ACT_GELU)
                train_gelu_forward(train_mm_pool(m->mm), a->h[l], a->z[l], (size_t)B * n);
            else
                train_relu_forward(a->h[l], a->z[l], (size_t)B * n);
            in = a->h[l];
        }
    }
    return rc;
}

static void act_backward(weft_model *m, float *din, const float *dout, const float *z, size_t n)
{
    if (m->cfg.activation == WEFT_ACT_GELU)
        train_gelu_backward(train_mm_pool(m->mm), din, dout, z, n);
    else
        train_relu_backward(din, dout, z, n);
}

static const float *layer_input(weft_model *m, int l)
{
    mlp_acts *a = m->s->arch;
    return l > m->ck->first ? a->h[l - 1] : a->x;
}

/* The weight half: from each layer's dout, kept by the input half. */
static void mlp_backward_weight(weft_model *m)
{
    mlp_acts *a = m->s->arch;
    lin_ctx lc = train_model_lin(m);
    for (int l = m->ck->last; l >= m->ck->first; l--) {
        train_linear_backward_weight(&lc, &a->save[l], train_model_tensor_ptr(m, m->grads, 2 * l),
                                     train_model_tensor_ptr(m, m->grads, 2 * l + 1), a->dz[l],
                                     layer_input(m, l), m->s->B, in_w(m, l), out_w(m, l));
        train_model_grads_ready(m, 2 * l, 2);
    }
}

/* dout: the gradient of the chunk's output when it is not the last chunk
 * (the last starts from d(loss)/d(logits), in probs). */
int train_mlp_backward(weft_model *m, const float *dout, int part)
{
    if (part == PART_WEIGHT) {
        mlp_backward_weight(m);
        return 0;
    }
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    mlp_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    int L = c->n_widths - 1, B = s->B, f = m->ck->first, e = m->ck->last;
    float *bufs[2] = { a->d0, a->d1 };
    const float *g = s->probs;
    int rc = 0;
    if (e + 1 < L) {
        float *d = bufs[(e + 1) & 1];
        act_backward(m, d, dout, a->z[e], (size_t)B * out_w(m, e));
        g = d;
    }
    for (int l = e; l >= f && rc == 0; l--) {
        int k = in_w(m, l), n = out_w(m, l), col = train_mlp_layer_kind(m, l) == 1;
        float *din = l > 0 ? bufs[l & 1] : NULL;
        const float *w = train_model_tensor_ptr(m, m->params, 2 * l);
        /* the first layer's weights serve only its weight gradient */
        int reads = din != NULL;
        if (reads && (rc = train_model_params(m, rc, 2 * l, 2, 1)))
            break;
        if (part == PART_ALL) {
            train_linear_backward(&lc, &a->save[l], din, train_model_tensor_ptr(m, m->grads, 2 * l),
                                  train_model_tensor_ptr(m, m->grads, 2 * l + 1), g,
                                  layer_input(m, l), w, B, k, n);
            train_model_grads_ready(m, 2 * l, 2);
        } else {
            memcpy(a->dz[l], g, sizeof(float) * (size_t)B * n);
            if (din)
                train_linear_backward_input(&lc, &a->save[l], din, g, w, B, k, n);
        }
        /* a column-parallel layer's input gradient sums over the group */
        if (din && col)
            rc = rc ? rc : train_tp_allreduce(m, din, (size_t)B * k, WEFT_SUM);
        if (reads)
            rc = train_model_params(m, rc, 2 * l, 2, 0);
        if (din && l > f)
            act_backward(m, din, din, a->z[l - 1], (size_t)B * k);
        g = din;
    }
    s->din = f > 0 ? bufs[f & 1] : NULL;
    return rc;
}
