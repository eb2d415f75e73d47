/* Finite-difference gradient checks. For every layer, L = sum(out * R) for
 * a fixed random R; the backward pass given dout = R must match central
 * differences (h = 1e-3) of L for every input and parameter element:
 * |numeric - analytic| <= 2e-3 + 2e-2 |analytic| (float forward passes
 * limit the numeric side to about 1e-4). Then the same for sampled
 * parameters of whole MLP and GPT models through weft_model_forward's mean
 * cross-entropy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/layers.h"
#include "train/mm_auto.h"
#include "weft.h"

#define H 1e-3f

static weft_rng rng;

static float *randv(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * (2.0f * weft_rng_uniform(&rng) - 1.0f);
    return v;
}

typedef struct layer_case layer_case;
struct layer_case {
    void (*fwd)(layer_case *c, float *out);
    float *out, *R;
    size_t nout;
    /* layer operands */
    lin_ctx lc;
    float *x, *w, *b, *aux1, *aux2;
    int32_t *tok;
    int rows, k, n, B, T, C, NH;
};

static double loss_of(layer_case *c)
{
    c->fwd(c, c->out);
    double s = 0.0;
    for (size_t i = 0; i < c->nout; i++)
        s += (double)c->out[i] * c->R[i];
    return s;
}

static int check(layer_case *c, const char *what, float *x, size_t n, const float *ana)
{
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + H;
        double lp = loss_of(c);
        x[i] = save - H;
        double lm = loss_of(c);
        x[i] = save;
        double num = (lp - lm) / (2.0 * H);
        if (!(fabs(num - ana[i]) <= 2e-3 + 2e-2 * fabs(ana[i]))) {
            fprintf(stderr, "  %s[%zu]: numeric %.6g analytic %.6g\n", what, i, num, ana[i]);
            ok = 0;
        }
    }
    loss_of(c);
    return ok;
}

static void fwd_linear(layer_case *c, float *out)
{
    train_linear_forward(&c->lc, NULL, out, c->x, c->w, c->b, c->rows, c->k, c->n);
}
static void fwd_relu(layer_case *c, float *out) { train_relu_forward(out, c->x, c->nout); }
static void fwd_gelu(layer_case *c, float *out) { train_gelu_forward(NULL, out, c->x, c->nout); }
static void fwd_ln(layer_case *c, float *out)
{
    train_layernorm_forward(NULL, out, c->aux1, c->aux2, c->x, c->w, c->b, c->rows, c->k);
}
static void fwd_emb(layer_case *c, float *out)
{
    train_embedding_forward(out, c->tok, c->w, c->b, c->B, c->T, c->C);
}
static void fwd_res(layer_case *c, float *out) { train_residual_forward(out, c->x, c->w, c->nout); }
static void fwd_att(layer_case *c, float *out)
{
    train_attention_forward(NULL, out, c->aux1, c->x, c->B, c->T, c->C, c->NH);
}

static void setup(layer_case *c, size_t nout)
{
    c->nout = nout;
    c->out = calloc(nout, sizeof(float));
    c->R = randv(nout, 1.0f);
}

static void teardown(layer_case *c)
{
    free(c->out); free(c->R); free(c->x); free(c->w); free(c->b);
    free(c->aux1); free(c->aux2); free(c->tok);
    memset(c, 0, sizeof *c);
}

static void layers(mm_ctx *mm)
{
    layer_case c;
    memset(&c, 0, sizeof c);

    /* linear */
    c.rows = 5; c.k = 7; c.n = 6;
    c.lc.mm = mm;
    c.fwd = fwd_linear;
    c.x = randv(35, 1.0f); c.w = randv(42, 0.5f); c.b = randv(6, 0.5f);
    setup(&c, 30);
    {
        float *dx = calloc(35, 4), *dw = calloc(42, 4), *db = calloc(6, 4);
        train_linear_backward(&c.lc, NULL, dx, dw, db, c.R, c.x, c.w, 5, 7, 6);
        CHECKF(check(&c, "linear.x", c.x, 35, dx), "linear input gradient");
        CHECKF(check(&c, "linear.w", c.w, 42, dw), "linear weight gradient");
        CHECKF(check(&c, "linear.b", c.b, 6, db), "linear bias gradient");
        free(dx); free(dw); free(db);
    }
    teardown(&c);

    /* relu and gelu, inputs kept away from relu's kink */
    for (int g = 0; g < 2; g++) {
        c.fwd = g ? fwd_gelu : fwd_relu;
        c.x = randv(40, 3.0f);
        for (int i = 0; i < 40; i++)
            if (fabsf(c.x[i]) < 0.05f)
                c.x[i] = 0.1f;
        setup(&c, 40);
        float *dx = malloc(160);
        if (g)
            train_gelu_backward(NULL, dx, c.R, c.x, 40);
        else
            train_relu_backward(dx, c.R, c.x, 40);
        CHECKF(check(&c, g ? "gelu" : "relu", c.x, 40, dx), "%s gradient", g ? "gelu" : "relu");
        free(dx);
        teardown(&c);
    }

    /* layernorm */
    c.rows = 4; c.k = 9;
    c.fwd = fwd_ln;
    c.x = randv(36, 2.0f); c.w = randv(9, 1.0f); c.b = randv(9, 1.0f);
    c.aux1 = calloc(4, 4); c.aux2 = calloc(4, 4);
    setup(&c, 36);
    {
        float *dx = calloc(36, 4), *dw = calloc(9, 4), *db = calloc(9, 4);
        c.fwd(&c, c.out);
        train_layernorm_backward(NULL, dx, dw, db, c.R, c.x, c.w, c.aux1, c.aux2, 4, 9);
        CHECKF(check(&c, "layernorm.x", c.x, 36, dx), "layernorm input gradient");
        CHECKF(check(&c, "layernorm.w", c.w, 9, dw), "layernorm weight gradient");
        CHECKF(check(&c, "layernorm.b", c.b, 9, db), "layernorm bias gradient");
        free(dx); free(dw); free(db);
    }
    teardown(&c);

    /* embedding (token + position); token 1 repeats to test accumulation */
    c.B = 2; c.T = 3; c.C = 4;
    c.fwd = fwd_emb;
    c.w = randv(5 * 4, 1.0f); c.b = randv(3 * 4, 1.0f);
    c.tok = malloc(6 * sizeof(int32_t));
    {
        int32_t t[6] = { 1, 3, 1, 0, 4, 1 };
        memcpy(c.tok, t, sizeof t);
    }
    setup(&c, 24);
    {
        float *dwte = calloc(20, 4), *dwpe = calloc(12, 4);
        train_embedding_backward(dwte, dwpe, c.R, c.tok, 2, 3, 4);
        CHECKF(check(&c, "embedding.tok", c.w, 20, dwte), "token embedding gradient");
        CHECKF(check(&c, "embedding.pos", c.b, 12, dwpe), "position embedding gradient");
        free(dwte); free(dwpe);
    }
    teardown(&c);

    /* residual */
    c.fwd = fwd_res;
    c.x = randv(10, 1.0f); c.w = randv(10, 1.0f);
    setup(&c, 10);
    CHECKF(check(&c, "residual.a", c.x, 10, c.R), "residual gradient a");
    CHECKF(check(&c, "residual.b", c.w, 10, c.R), "residual gradient b");
    teardown(&c);

    /* causal self-attention */
    c.B = 2; c.T = 5; c.C = 6; c.NH = 2;
    c.fwd = fwd_att;
    c.x = randv(2 * 5 * 18, 1.5f);
    c.aux1 = calloc(2 * 2 * 5 * 5, 4);
    setup(&c, 2 * 5 * 6);
    {
        float *dqkv = calloc(180, 4), *datt = calloc(100, 4);
        c.fwd(&c, c.out);
        train_attention_backward(NULL, dqkv, datt, c.R, c.x, c.aux1, 2, 5, 6, 2);
        CHECKF(check(&c, "attention.qkv", c.x, 180, dqkv), "attention gradient");
        free(dqkv); free(datt);
    }
    teardown(&c);

    /* softmax cross-entropy: d(mean loss)/d(logits), one target ignored */
    {
        int rows = 4, v = 6;
        float *z = randv(24, 3.0f), *p = malloc(96), *d = malloc(96);
        int32_t t[4] = { 2, -1, 5, 0 };
        int cnt;
        train_softmax_xent_forward(p, z, t, rows, v, &cnt);
        CHECK(cnt == 3);
        train_softmax_xent_backward(d, p, t, rows, v, 1.0f / cnt);
        int ok = 1;
        for (int i = 0; i < 24; i++) {
            float s = z[i];
            z[i] = s + H;
            double lp = train_softmax_xent_forward(p, z, t, rows, v, &cnt) / cnt;
            z[i] = s - H;
            double lm = train_softmax_xent_forward(p, z, t, rows, v, &cnt) / cnt;
            z[i] = s;
            double num = (lp - lm) / (2.0 * H);
            ok &= fabs(num - d[i]) <= 2e-3 + 2e-2 * fabs(d[i]);
        }
        CHECKF(ok, "softmax cross-entropy gradient");
        free(z); free(p); free(d);
    }
}

/* Whole models: central differences of the mean loss for sampled
 * parameters of every tensor. */
static void model_check(const char *spec, const void *x, const int32_t *y, int B, int T)
{
    weft_model_config cfg;
    weft_model *m;
    CHECK(weft_model_config_parse(spec, &cfg) == 0);
    CHECK(weft_model_create(&m, &cfg, 5) == 0);
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    if (cfg.type == WEFT_MODEL_GPT)   /* larger weights: a livelier loss surface */
        for (size_t i = 0; i < n; i++)
            p[i] += 0.1f * (2.0f * weft_rng_uniform(&rng) - 1.0f);
    float loss;
    weft_model_zero_grad(m);
    CHECK(weft_model_forward(m, x, y, B, T, &loss) == 0);
    CHECK(weft_model_backward(m) == 0);
    float *ana = malloc(n * sizeof(float));
    memcpy(ana, g, n * sizeof(float));
    int bad = 0, tried = 0;
    for (int ti = 0; ti < weft_model_tensor_count(m); ti++) {
        weft_tensor_info info;
        weft_model_tensor_info(m, ti, &info);
        for (int s = 0; s < 4; s++) {
            size_t i = info.offset + weft_rng_below(&rng, info.numel);
            float save = p[i], lp, lm;
            p[i] = save + H;
            weft_model_forward(m, x, y, B, T, &lp);
            p[i] = save - H;
            weft_model_forward(m, x, y, B, T, &lm);
            p[i] = save;
            double num = ((double)lp - lm) / (2.0 * H);
            tried++;
            if (!(fabs(num - ana[i]) <= 2e-3 + 3e-2 * fabs(ana[i]))) {
                fprintf(stderr, "  %s %s[%zu]: numeric %.6g analytic %.6g\n", spec, info.name,
                        i - info.offset, num, ana[i]);
                bad++;
            }
        }
    }
    CHECKF(bad == 0, "%s: %d of %d sampled gradients off", spec, bad, tried);
    free(ana);
    weft_model_destroy(m);
}

TEST(layers)
{
    weft_rng_seed(&rng, 2024);
    mm_ctx *mm;
    CHECK(train_mm_create(&mm, 1, MM_PORTABLE) == 0);
    layers(mm);
    train_mm_destroy(mm);
}

/* a batch of 4 inputs of 6 features for the MLPs */
static void mlp_batch(float *x, int32_t *y)
{
    static const int32_t labels[4] = { 0, 2, 1, 2 };
    weft_rng_seed(&rng, 2025);
    for (int i = 0; i < 24; i++)
        x[i] = 2.0f * weft_rng_uniform(&rng) - 1.0f;
    memcpy(y, labels, sizeof labels);
}

TEST(mlp)
{
    float x[4 * 6];
    int32_t y[4];
    mlp_batch(x, y);
    model_check("mlp:6-9-7-3", x, y, 4, 1);
}

TEST(mlp_gelu)
{
    float x[4 * 6];
    int32_t y[4];
    mlp_batch(x, y);
    model_check("mlp:6-9-7-3:gelu", x, y, 4, 1);
}

TEST(gpt)
{
    int32_t tok[2 * 6], nxt[2 * 6];
    weft_rng_seed(&rng, 2026);
    for (int i = 0; i < 12; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, 11);
        nxt[i] = (int32_t)weft_rng_below(&rng, 11);
    }
    model_check("gpt:vocab=11,ctx=8,layers=2,heads=2,dim=8", tok, nxt, 2, 6);
}
