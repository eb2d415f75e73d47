/* GPT: token + position embedding, n_layer pre-LayerNorm blocks (causal
 * self-attention, GELU MLP of width 4C, residuals), a final LayerNorm and
 * logits through the token embedding (tied). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model.h"

enum { T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_PROJW, T_PROJB, T_LN2W, T_LN2B,
       T_FCW, T_FCB, T_FCPW, T_FCPB, T_PER_LAYER };

/* In bf16 mode ln1, atty, ln2, fcg and lnf — read only as matmul inputs —
 * share one fp32 buffer and are kept as bf16 in the lin_save records. */
typedef struct {
    float *ln1, *ln1m, *ln1r, *qkv, *att, *atty, *r1;
    float *ln2, *ln2m, *ln2r, *fch, *fcg, *r2;
    lin_save qkv_s, proj_s, fc_s, fcp_s;
} gpt_layer;

typedef struct {
    float *x0, *lnf, *lnfm, *lnfr;
    float *dres, *dbr, *dqkv, *datt, *dfc;
    lin_save logit_s;
    gpt_layer l[];
} gpt_acts;

/* tensor index of per-layer parameter j in layer l */
static int tix(int l, int j)
{
    return 2 + l * T_PER_LAYER + j;
}

int train_gpt_build(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    int C = c->d_model;
    m->arch = calloc(1, sizeof(gpt_acts) + sizeof(gpt_layer) * (size_t)c->n_layer);
    if (!m->arch)
        return WEFT_ENOMEM;
    int rc = train_model_add_tensor(m, "tok_emb.weight", 2, c->vocab, C);
    if (!rc)
        rc = train_model_add_tensor(m, "pos_emb.weight", 2, c->ctx, C);
    static const struct { const char *name; int ndim, d0, d1; } per[T_PER_LAYER] = {
        { "ln1.weight", 1, 1, 0 }, { "ln1.bias", 1, 1, 0 },
        { "attn.qkv.weight", 2, 3, 1 }, { "attn.qkv.bias", 1, 3, 0 },
        { "attn.proj.weight", 2, 1, 1 }, { "attn.proj.bias", 1, 1, 0 },
        { "ln2.weight", 1, 1, 0 }, { "ln2.bias", 1, 1, 0 },
        { "mlp.fc.weight", 2, 4, 1 }, { "mlp.fc.bias", 1, 4, 0 },
        { "mlp.proj.weight", 2, 1, 4 }, { "mlp.proj.bias", 1, 1, 0 },
    };
    for (int l = 0; l < c->n_layer && !rc; l++)
        for (int j = 0; j < T_PER_LAYER && !rc; j++) {
            char name[MODEL_NAME_MAX];
            snprintf(name, sizeof name, "blocks.%d.%s", l, per[j].name);
            rc = train_model_add_tensor(m, name, per[j].ndim, per[j].d0 * C, per[j].d1 * C);
        }
    if (!rc)
        rc = train_model_add_tensor(m, "ln_f.weight", 1, C, 0);
    if (!rc)
        rc = train_model_add_tensor(m, "ln_f.bias", 1, C, 0);
    return rc;
}

void train_gpt_init(weft_model *m, weft_rng *r)
{
    /* GPT-2: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer),
     * zero biases, unit LayerNorm gains */
    float proj_sd = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
    for (int i = 0; i < m->ntensors; i++) {
        const char *name = m->tensors[i].name;
        float *p = train_model_tensor_ptr(m, m->params, i);
        size_t n = m->tensors[i].info.numel;
        size_t len = strlen(name);
        int is_ln = strstr(name, "ln") != NULL;
        int is_bias = len > 5 && strcmp(name + len - 5, ".bias") == 0;
        if (is_bias) {
            memset(p, 0, n * sizeof(float));
        } else if (is_ln) {
            for (size_t k = 0; k < n; k++)
                p[k] = 1.0f;
        } else {
            float sd = strstr(name, "proj.weight") ? proj_sd : 0.02f;
            for (size_t k = 0; k < n; k++)
                p[k] = sd * weft_rng_normal(r);
        }
    }
}

size_t train_gpt_layout(weft_model *m, float *base, int B, int T)
{
    const weft_model_config *c = &m->cfg;
    gpt_acts *a = m->arch;
    carver cv = { base, 0 };
    int bf = m->prec == WEFT_PREC_BF16;
    size_t BT = (size_t)B * T, C = (size_t)c->d_model, V = (size_t)c->vocab;
    size_t att = (size_t)B * c->n_head * T * T;
    float *tmp = bf ? train_carve(&cv, BT * 4 * C) : NULL;
    /* a matmul input: fp32 in its own buffer, or bf16 beside the shared one */
#define MMIN(f32, sv, n, wt) do { \
        f32 = bf ? tmp : train_carve(&cv, n); \
        (sv).x = bf ? train_carve16(&cv, n) : NULL; \
        (sv).w = bf && base ? m->w16 + m->tensors[wt].info.offset : NULL; \
    } while (0)
    a->x0 = train_carve(&cv, BT * C);
    for (int l = 0; l < c->n_layer; l++) {
        gpt_layer *g = &a->l[l];
        MMIN(g->ln1, g->qkv_s, BT * C, tix(l, T_QKVW));
        g->ln1m = train_carve(&cv, BT);
        g->ln1r = train_carve(&cv, BT);
        g->qkv = train_carve(&cv, BT * 3 * C);
        g->att = train_carve(&cv, att);
        MMIN(g->atty, g->proj_s, BT * C, tix(l, T_PROJW));
        g->r1 = train_carve(&cv, BT * C);
        MMIN(g->ln2, g->fc_s, BT * C, tix(l, T_FCW));
        g->ln2m = train_carve(&cv, BT);
        g->ln2r = train_carve(&cv, BT);
        g->fch = train_carve(&cv, BT * 4 * C);
        MMIN(g->fcg, g->fcp_s, BT * 4 * C, tix(l, T_FCPW));
        g->r2 = train_carve(&cv, BT * C);
    }
    MMIN(a->lnf, a->logit_s, BT * C, 0);
#undef MMIN
    a->lnfm = train_carve(&cv, BT);
    a->lnfr = train_carve(&cv, BT);
    m->logits = train_carve(&cv, BT * V);
    m->probs = train_carve(&cv, BT * V);
    a->dres = train_carve(&cv, BT * C);
    a->dbr = train_carve(&cv, BT * C);
    a->dqkv = train_carve(&cv, BT * 3 * C);
    a->datt = train_carve(&cv, att);
    a->dfc = train_carve(&cv, BT * 4 * C);
    size_t widest = V > 4 * C ? V : 4 * C;
    m->lin_scratch = bf ? train_carve16(&cv, BT * widest) : NULL;
    return cv.used;
}

int train_gpt_forward(weft_model *m, const int32_t *tok, int B, int T)
{
    const weft_model_config *c = &m->cfg;
    gpt_acts *a = m->arch;
    lin_ctx lc = train_model_lin(m);
    pool *pl = train_mm_pool(m->mm);
    int C = c->d_model, NH = c->n_head, BT = B * T;
    float *P = m->params;
    memcpy(m->tokens, tok, sizeof(int32_t) * (size_t)BT);
    train_embedding_forward(a->x0, tok, train_model_tensor_ptr(m, P, 0),
                            train_model_tensor_ptr(m, P, 1), B, T, C);
    const float *x = a->x0;
    for (int l = 0; l < c->n_layer; l++) {
        gpt_layer *g = &a->l[l];
#define W(j) train_model_tensor_ptr(m, P, tix(l, j))
        train_layernorm_forward(pl, g->ln1, g->ln1m, g->ln1r, x, W(T_LN1W), W(T_LN1B), BT, C);
        train_linear_forward(&lc, &g->qkv_s, g->qkv, g->ln1, W(T_QKVW), W(T_QKVB), BT, C, 3 * C);
        train_attention_forward(pl, g->atty, g->att, g->qkv, B, T, C, NH);
        train_linear_forward(&lc, &g->proj_s, g->r1, g->atty, W(T_PROJW), W(T_PROJB), BT, C, C);
        train_residual_forward(g->r1, g->r1, x, (size_t)BT * C);
        train_layernorm_forward(pl, g->ln2, g->ln2m, g->ln2r, g->r1, W(T_LN2W), W(T_LN2B), BT, C);
        train_linear_forward(&lc, &g->fc_s, g->fch, g->ln2, W(T_FCW), W(T_FCB), BT, C, 4 * C);
        train_gelu_forward(pl, g->fcg, g->fch, (size_t)BT * 4 * C);
        train_linear_forward(&lc, &g->fcp_s, g->r2, g->fcg, W(T_FCPW), W(T_FCPB), BT, 4 * C, C);
        train_residual_forward(g->r2, g->r2, g->r1, (size_t)BT * C);
#undef W
        x = g->r2;
    }
    int nt = m->ntensors;
    train_layernorm_forward(pl, a->lnf, a->lnfm, a->lnfr, x, train_model_tensor_ptr(m, P, nt - 2),
                            train_model_tensor_ptr(m, P, nt - 1), BT, C);
    train_linear_forward(&lc, &a->logit_s, m->logits, a->lnf, train_model_tensor_ptr(m, P, 0), NULL,
                         BT, C, c->vocab);
    return 0;
}

int train_gpt_backward(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    gpt_acts *a = m->arch;
    lin_ctx lc = train_model_lin(m);
    pool *pl = train_mm_pool(m->mm);
    int C = c->d_model, NH = c->n_head, B = m->B, T = m->T, BT = B * T, L = c->n_layer;
    float *P = m->params, *G = m->grads;
    int nt = m->ntensors;
    size_t n = (size_t)BT * C;
    const float *xlast = L > 0 ? a->l[L - 1].r2 : a->x0;
    /* dres carries d(loss)/d(residual stream), updated in place going down */
    train_linear_backward(&lc, &a->logit_s, a->dbr, train_model_tensor_ptr(m, G, 0), NULL, m->probs,
                          a->lnf, train_model_tensor_ptr(m, P, 0), BT, C, c->vocab);
    memset(a->dres, 0, n * sizeof(float));
    train_layernorm_backward(pl, a->dres, train_model_tensor_ptr(m, G, nt - 2),
                             train_model_tensor_ptr(m, G, nt - 1), a->dbr, xlast,
                             train_model_tensor_ptr(m, P, nt - 2), a->lnfm, a->lnfr, BT, C);
    train_model_grads_ready(m, nt - 2, 2);   /* ln_f */
    for (int l = L - 1; l >= 0; l--) {
        gpt_layer *g = &a->l[l];
        const float *x = l > 0 ? a->l[l - 1].r2 : a->x0;
#define W(j) train_model_tensor_ptr(m, P, tix(l, j))
#define D(j) train_model_tensor_ptr(m, G, tix(l, j))
        train_linear_backward(&lc, &g->fcp_s, a->dfc, D(T_FCPW), D(T_FCPB), a->dres, g->fcg, W(T_FCPW), BT, 4 * C, C);
        train_gelu_backward(pl, a->dfc, a->dfc, g->fch, (size_t)BT * 4 * C);
        train_linear_backward(&lc, &g->fc_s, a->dbr, D(T_FCW), D(T_FCB), a->dfc, g->ln2, W(T_FCW), BT, C, 4 * C);
        train_layernorm_backward(pl, a->dres, D(T_LN2W), D(T_LN2B), a->dbr, g->r1, W(T_LN2W), g->ln2m, g->ln2r, BT, C);
        train_linear_backward(&lc, &g->proj_s, a->dbr, D(T_PROJW), D(T_PROJB), a->dres, g->atty, W(T_PROJW), BT, C, C);
        train_attention_backward(pl, a->dqkv, a->datt, a->dbr, g->qkv, g->att, B, T, C, NH);
        train_linear_backward(&lc, &g->qkv_s, a->dbr, D(T_QKVW), D(T_QKVB), a->dqkv, g->ln1, W(T_QKVW), BT, C, 3 * C);
        train_layernorm_backward(pl, a->dres, D(T_LN1W), D(T_LN1B), a->dbr, x, W(T_LN1W), g->ln1m, g->ln1r, BT, C);
#undef W
#undef D
        train_model_grads_ready(m, tix(l, 0), T_PER_LAYER);
    }
    /* the token embedding also got the logits' gradient (tied), so it is
     * done only now */
    train_embedding_backward(train_model_tensor_ptr(m, G, 0), train_model_tensor_ptr(m, G, 1), a->dres,
                             m->tokens, B, T, C);
    train_model_grads_ready(m, 0, 2);
    return 0;
}
