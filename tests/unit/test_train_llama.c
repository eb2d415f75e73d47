/* The Llama's pieces: finite-difference gradients of RMSNorm, the rotary
 * embedding, SwiGLU and grouped-query attention (L = sum(out * R) for a
 * fixed random R, central differences h = 1e-3 against backward given
 * dout = R), grouped-query attention equal to multi-head attention over
 * repeated kv heads, sampled gradients of whole models (tied and not), the
 * config's parse/format round trip and its refusals, the tensor-parallel
 * splits (which kv layouts are refused, and every rank's part of every
 * tensor is the whole model's), the FLOPs count, recomputation (the same
 * bits), bf16 (near fp32), a split backward (the same gradients), greedy
 * generation, and checkpoints (a Llama's fields, and the old 17-field
 * config of a GPT still read). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/layers.h"
#include "train/layers_llama.h"
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

/* One layer under test: fwd writes out[nout] from the operands. */
typedef struct lcase lcase;
struct lcase {
    void (*fwd)(lcase *c, float *out);
    float *out, *R;
    size_t nout;
    float *x, *w, *k, *v, *aux, *cs, *sn;
    int rows, n, B, T, NH, NKV, hs;
};

static double loss_of(lcase *c)
{
    c->fwd(c, c->out);
    double s = 0.0;
    for (size_t i = 0; i < c->nout; i++)
        s += (double)c->out[i] * c->R[i];
    return s;
}

static int check(lcase *c, const char *what, float *x, size_t n, const float *ana)
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

static void setup(lcase *c, size_t nout)
{
    c->nout = nout;
    c->out = calloc(nout, sizeof(float));
    c->R = randv(nout, 1.0f);
}

static void teardown(lcase *c)
{
    free(c->out); free(c->R); free(c->x); free(c->w); free(c->k); free(c->v);
    free(c->aux); free(c->cs); free(c->sn);
    memset(c, 0, sizeof *c);
}

static void fwd_rms(lcase *c, float *out)
{
    train_rmsnorm_forward(out, c->aux, c->x, c->w, c->rows, c->n, 1e-5f);
}

TEST(rmsnorm)
{
    weft_rng_seed(&rng, 31);
    lcase c = { .fwd = fwd_rms, .rows = 3, .n = 7 };
    c.x = randv(21, 2.0f);
    c.w = randv(7, 1.5f);
    c.aux = calloc(3, 4);
    setup(&c, 21);
    float *dx = calloc(21, 4), *dw = calloc(7, 4);
    c.fwd(&c, c.out);
    train_rmsnorm_backward(dx, dw, c.R, c.x, c.w, c.aux, 3, 7);
    CHECKF(check(&c, "rmsnorm.x", c.x, 21, dx), "RMSNorm input gradient");
    CHECKF(check(&c, "rmsnorm.w", c.w, 7, dw), "RMSNorm weight gradient");
    /* it adds into din (the residual stream) */
    float *again = malloc(21 * 4);
    memcpy(again, dx, 21 * 4);
    train_rmsnorm_backward(again, dw, c.R, c.x, c.w, c.aux, 3, 7);
    int twice = 1;
    for (int i = 0; i < 21; i++)
        twice &= fabsf(again[i] - 2 * dx[i]) <= 1e-6f * (1 + fabsf(dx[i]));
    CHECKF(twice, "RMSNorm backward adds into din");
    /* unit weights: each row's mean square is 1 (up to eps) */
    for (int i = 0; i < 7; i++)
        c.w[i] = 1.0f;
    c.fwd(&c, c.out);
    double ms = 0;
    for (int i = 0; i < 7; i++)
        ms += (double)c.out[i] * c.out[i] / 7;
    CHECKF(fabs(ms - 1.0) < 1e-4, "RMSNorm output's mean square %.6f", ms);
    free(dx); free(dw); free(again);
    teardown(&c);
}

static void fwd_rope(lcase *c, float *out)
{
    memcpy(out, c->x, c->nout * sizeof(float));
    train_rope_forward(out, c->cs, c->sn, c->rows, c->T, c->n, c->NH, c->hs);
}

TEST(rope)
{
    weft_rng_seed(&rng, 32);
    /* 2 sequences of 5, rows of 3 heads of 4 (stride 12) */
    lcase c = { .fwd = fwd_rope, .rows = 10, .T = 5, .n = 12, .NH = 3, .hs = 4 };
    c.x = randv(120, 1.0f);
    c.cs = malloc(5 * 2 * 4);
    c.sn = malloc(5 * 2 * 4);
    train_rope_tables(c.cs, c.sn, 5, 4, 10000.0f);
    /* position 0 turns nothing; position t's first pair by t radians */
    CHECK(c.cs[0] == 1.0f && c.sn[0] == 0.0f && c.cs[1] == 1.0f);
    CHECK(fabsf(c.cs[3 * 2] - cosf(3.0f)) < 1e-6f && fabsf(c.sn[3 * 2 + 1] - sinf(0.03f)) < 1e-6f);
    setup(&c, 120);
    float *d = malloc(120 * 4);
    memcpy(d, c.R, 120 * 4);
    train_rope_backward(d, c.cs, c.sn, 10, 5, 12, 3, 4);
    CHECKF(check(&c, "rope.x", c.x, 120, d), "rotary embedding gradient");
    /* a rotation keeps each pair's length */
    c.fwd(&c, c.out);
    int kept = 1;
    for (int r = 0; r < 10; r++)
        for (int h = 0; h < 3; h++)
            for (int i = 0; i < 2; i++) {
                const float *a = c.x + r * 12 + h * 4, *b = c.out + r * 12 + h * 4;
                float n0 = a[i] * a[i] + a[i + 2] * a[i + 2], n1 = b[i] * b[i] + b[i + 2] * b[i + 2];
                kept &= fabsf(n0 - n1) <= 1e-5f;
            }
    CHECKF(kept, "rotary embedding keeps pair lengths");
    free(d);
    teardown(&c);
}

static void fwd_swiglu(lcase *c, float *out)
{
    train_swiglu_forward(out, c->x, c->rows, c->n);
}

TEST(swiglu)
{
    weft_rng_seed(&rng, 33);
    lcase c = { .fwd = fwd_swiglu, .rows = 3, .n = 5 };
    c.x = randv(30, 3.0f);
    setup(&c, 15);
    float *d = calloc(30, 4);
    train_swiglu_backward(d, c.R, c.x, 3, 5);
    CHECKF(check(&c, "swiglu.gu", c.x, 30, d), "SwiGLU gradient");
    c.fwd(&c, c.out);
    float g = c.x[0], u = c.x[5];
    CHECK(fabsf(c.out[0] - g / (1.0f + expf(-g)) * u) <= 1e-6f);
    free(d);
    teardown(&c);
}

static void fwd_gqa(lcase *c, float *out)
{
    int A = c->NH * c->hs, KV = c->NKV * c->hs;
    train_attention_gqa_forward(NULL, out, c->aux, c->x, c->k, c->v, A, KV, KV, c->B, c->T,
                                c->NH, c->NKV, c->hs);
}

TEST(gqa_gradient)
{
    weft_rng_seed(&rng, 34);
    /* 4 query heads over 2 kv heads of 3 */
    lcase c = { .fwd = fwd_gqa, .B = 2, .T = 5, .NH = 4, .NKV = 2, .hs = 3 };
    size_t nq = 2 * 5 * 12, nkv = 2 * 5 * 6;
    c.x = randv(nq, 1.5f);
    c.k = randv(nkv, 1.5f);
    c.v = randv(nkv, 1.5f);
    c.aux = calloc(2 * 2 * 4 * 5, 4);
    setup(&c, nq);
    float *dq = calloc(nq, 4), *dk = calloc(nkv, 4), *dv = calloc(nkv, 4);
    float *datt = calloc(2 * 2 * 4 * 5, 4);
    c.fwd(&c, c.out);
    train_attention_gqa_backward(NULL, dq, dk, dv, datt, c.R, c.x, c.k, c.v, c.aux, 12, 6, 6, 2,
                                 5, 4, 2, 3);
    CHECKF(check(&c, "gqa.q", c.x, nq, dq), "GQA query gradient");
    CHECKF(check(&c, "gqa.k", c.k, nkv, dk), "GQA key gradient");
    CHECKF(check(&c, "gqa.v", c.v, nkv, dv), "GQA value gradient");
    free(dq); free(dk); free(dv); free(datt);
    teardown(&c);
}

/* kv head j serves query heads j*NH/NKV ..: the same as multi-head
 * attention with each kv head repeated for its group (transformers'
 * repeat_kv), forward and the summed kv gradients. */
TEST(gqa_is_repeated_kv)
{
    weft_rng_seed(&rng, 35);
    int B = 2, T = 7, NH = 6, NKV = 2, hs = 4, A = NH * hs, KV = NKV * hs, BT = B * T;
    float *q = randv((size_t)BT * A, 1.0f), *k = randv((size_t)BT * KV, 1.0f);
    float *v = randv((size_t)BT * KV, 1.0f), *dout = randv((size_t)BT * A, 1.0f);
    float *qkv = malloc(sizeof(float) * BT * 3 * A);
    for (int r = 0; r < BT; r++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < hs; i++) {
                int g = h / (NH / NKV);
                qkv[r * 3 * A + h * hs + i] = q[r * A + h * hs + i];
                qkv[r * 3 * A + A + h * hs + i] = k[r * KV + g * hs + i];
                qkv[r * 3 * A + 2 * A + h * hs + i] = v[r * KV + g * hs + i];
            }
    size_t na = 2 * (size_t)B * NH * T;
    float *o1 = calloc((size_t)BT * A, 4), *o2 = calloc((size_t)BT * A, 4);
    float *a1 = calloc(na, 4), *a2 = calloc(na, 4), *s1 = calloc(na, 4), *s2 = calloc(na, 4);
    train_attention_gqa_forward(NULL, o1, a1, q, k, v, A, KV, KV, B, T, NH, NKV, hs);
    train_attention_forward(NULL, o2, a2, qkv, B, T, A, NH);
    CHECKF(memcmp(o1, o2, sizeof(float) * BT * A) == 0, "GQA output equals repeated-kv MHA's");
    float *dq = calloc((size_t)BT * A, 4), *dk = calloc((size_t)BT * KV, 4);
    float *dv = calloc((size_t)BT * KV, 4), *dqkv = calloc((size_t)BT * 3 * A, 4);
    train_attention_gqa_backward(NULL, dq, dk, dv, s1, dout, q, k, v, a1, A, KV, KV, B, T, NH,
                                 NKV, hs);
    train_attention_backward(NULL, dqkv, s2, dout, qkv, a2, B, T, A, NH);
    double err = 0;
    for (int r = 0; r < BT; r++)
        for (int g = 0; g < NKV; g++)
            for (int i = 0; i < hs; i++) {
                double sk = 0, sv = 0;
                for (int h = g * NH / NKV; h < (g + 1) * NH / NKV; h++) {
                    sk += dqkv[r * 3 * A + A + h * hs + i];
                    sv += dqkv[r * 3 * A + 2 * A + h * hs + i];
                }
                err = fmax(err, fabs(sk - dk[r * KV + g * hs + i]));
                err = fmax(err, fabs(sv - dv[r * KV + g * hs + i]));
            }
    for (int r = 0; r < BT; r++)
        for (int j = 0; j < A; j++)
            err = fmax(err, fabs(dq[r * A + j] - dqkv[r * 3 * A + j]));
    CHECKF(err < 1e-5, "GQA gradients equal repeated-kv MHA's summed per group (%.3g)", err);
    free(q); free(k); free(v); free(dout); free(qkv); free(o1); free(o2); free(a1); free(a2);
    free(s1); free(s2); free(dq); free(dk); free(dv); free(dqkv);
}

/* Sampled parameters of every tensor against central differences of the
 * mean loss. */
static void model_check(const char *spec)
{
    weft_model_config cfg;
    weft_model *m;
    int B = 2, T = 6;
    int32_t tok[12], nxt[12];
    weft_rng_seed(&rng, 36);
    for (int i = 0; i < 12; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, 11);
        nxt[i] = (int32_t)weft_rng_below(&rng, 11);
    }
    CHECK(weft_model_config_parse(spec, &cfg) == 0);
    CHECK(weft_model_create(&m, &cfg, 5) == 0);
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    for (size_t i = 0; i < n; i++) /* larger weights: a livelier loss surface */
        p[i] += 0.1f * (2.0f * weft_rng_uniform(&rng) - 1.0f);
    float loss;
    weft_model_zero_grad(m);
    CHECK(weft_model_forward(m, tok, nxt, B, T, &loss) == 0);
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
            weft_model_forward(m, tok, nxt, B, T, &lp);
            p[i] = save - H;
            weft_model_forward(m, tok, nxt, B, T, &lm);
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

TEST(model_gradient)
{
    model_check("llama:vocab=11,ctx=8,layers=2,heads=4,kv_heads=2,dim=8,ffn=12");
    model_check("llama:vocab=11,ctx=8,layers=1,heads=2,kv_heads=1,dim=8,ffn=10,tied=1");
}

TEST(config)
{
    weft_model_config c, d;
    char buf[256];
    CHECK(weft_model_config_parse("llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,"
                                  "ffn=88", &c) == 0);
    CHECK(c.type == WEFT_MODEL_LLAMA && c.n_kv_head == 2 && c.ffn == 88 && c.tied == 0);
    CHECK(c.rope_theta == 10000.0f && c.rms_eps == 1e-5f);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0);
    CHECKF(strcmp(buf, "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,"
                       "theta=10000,eps=1e-05,tied=0") == 0, "format: %s", buf);
    CHECK(weft_model_config_parse(buf, &d) == 0 && memcmp(&c, &d, sizeof c) == 0);
    c.rms_eps = 0.1234567f; /* a float that needs its nine digits */
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0);
    CHECK(weft_model_config_parse(buf, &d) == 0 && memcmp(&c, &d, sizeof c) == 0);
    CHECK(weft_model_config_parse("llama:dim=24,ffn=40,tied=1,eps=1e-6,theta=500000,vocab=61,"
                                  "ctx=12,layers=1,heads=4,kv_heads=1", &c) == 0);
    CHECK(c.tied == 1 && c.rope_theta == 500000.0f && c.rms_eps == 1e-6f && c.n_kv_head == 1);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0);
    CHECK(weft_model_config_parse(buf, &d) == 0 && memcmp(&c, &d, sizeof c) == 0);
    /* no kv_heads: one per query head */
    CHECK(weft_model_config_parse("llama:vocab=9,ctx=4,layers=1,heads=2,dim=8,ffn=8", &c) == 0);
    CHECK(c.n_kv_head == 2);
    CHECK(weft_model_block_count(&c) == 3);
    static const char *const bad[] = {
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=3,dim=32,ffn=88", /* 3 does not divide 4 */
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=8,dim=32,ffn=88", /* more kv than q heads */
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=20,ffn=88", /* head size 5: odd */
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=30,ffn=88", /* heads do not divide */
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32",        /* no ffn */
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=0,dim=32,ffn=88",
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,tied=2",
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,eps=0",
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,theta=0",
        "llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88,bias=1",
        "llama:vocab=97,ctx=16,layers=0,heads=4,kv_heads=2,dim=32,ffn=88",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(weft_model_config_parse(bad[i], &c) == WEFT_EINVAL, "refused: %s", bad[i]);
    /* the GPT's syntax and fields are as they were */
    CHECK(weft_model_config_parse("gpt:vocab=11,ctx=8,layers=2,heads=2,dim=8", &c) == 0);
    CHECK(c.n_kv_head == 0 && c.ffn == 0 && c.rope_theta == 0.0f);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0 &&
          strcmp(buf, "gpt:vocab=11,ctx=8,layers=2,heads=2,dim=8") == 0);
}

/* Every tp rank's part (shells without a group) maps onto the whole
 * model's tensors: each element the one-rank model's value. */
static int parts_match(const weft_model_config *c, int tp)
{
    weft_block_range all = { 0, weft_model_block_count(c) };
    weft_model *whole, *part;
    if (weft_model_create(&whole, c, 9))
        return 0;
    int ok = 1;
    for (int r = 0; r < tp && ok; r++) {
        if (weft_model_create_tp(&part, c, 9, &all, 1, 0, NULL, tp, r)) {
            ok = 0;
            break;
        }
        float *wp = weft_model_params(whole, NULL), *pp = weft_model_params(part, NULL);
        for (int i = 0; i < weft_model_tensor_count(part) && ok; i++) {
            weft_tensor_info t, w;
            weft_model_tensor_info(part, i, &t);
            weft_model_tensor_info(whole, weft_model_tensor_find(whole, t.name), &w);
            for (size_t e = 0; e < t.numel && ok; e++) {
                size_t at;
                int rc = weft_model_tensor_whole_elem(part, i, e, &at);
                if (rc == 1)
                    ok = pp[t.offset + e] == 0.0f; /* vocabulary padding */
                else
                    ok = rc == 0 && pp[t.offset + e] == wp[w.offset + at];
            }
        }
        weft_model_destroy(part);
    }
    weft_model_destroy(whole);
    return ok;
}

TEST(tensor_parallel_splits)
{
    weft_model_config c;
    weft_block_range all = { 0, 0 };
    weft_model *m;
    /* 8 heads over 2 kv heads: tp 2 splits the kv heads, tp 4 and 8 hold them whole */
    CHECK(weft_model_config_parse("llama:vocab=37,ctx=8,layers=2,heads=8,kv_heads=2,dim=16,"
                                  "ffn=24", &c) == 0);
    all.count = weft_model_block_count(&c);
    for (int tp = 1; tp <= 8; tp *= 2)
        CHECKF(parts_match(&c, tp), "tp %d: parts are the whole model's", tp);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 4, 1) == 0);
    weft_tensor_info t;
    weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.attn.k.weight"), &t);
    CHECKF(t.numel == t.whole_numel && t.shape[0] == 4, "tp 4 > kv heads: k whole on each rank");
    weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.attn.q.weight"), &t);
    CHECK(t.shape[0] == 4 && t.shape[1] == 16);
    weft_model_destroy(m);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 2, 1) == 0);
    weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.attn.v.weight"), &t);
    CHECKF(t.shape[0] == 2 && t.whole_numel == 64, "tp 2: v split by kv heads");
    weft_model_destroy(m);
    /* 6 heads over 3 kv heads: tp 2 neither divides nor is a multiple of 3 */
    CHECK(weft_model_config_parse("llama:vocab=37,ctx=8,layers=1,heads=6,kv_heads=3,dim=12,"
                                  "ffn=24", &c) == 0);
    all.count = weft_model_block_count(&c);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 2, 0) == WEFT_EINVAL);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 3, 0) == 0);
    weft_model_destroy(m);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 6, 0) == 0);
    weft_model_destroy(m);
    CHECKF(parts_match(&c, 6), "tp 6 of 3 kv heads: parts are the whole model's");
    /* the MLP's width too must split */
    CHECK(weft_model_config_parse("llama:vocab=37,ctx=8,layers=1,heads=4,kv_heads=4,dim=16,"
                                  "ffn=10", &c) == 0);
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 4, 0) == WEFT_EINVAL);
    /* a tied output projection has no tensor of its own */
    CHECK(weft_model_config_parse("llama:vocab=37,ctx=8,layers=1,heads=4,kv_heads=2,dim=16,"
                                  "ffn=8,tied=1", &c) == 0);
    CHECK(weft_model_create(&m, &c, 1) == 0);
    CHECK(weft_model_tensor_find(m, "lm_head.weight") == WEFT_EINVAL);
    CHECK(weft_model_tensor_count(m) == 1 + 9 + 1);
    weft_model_destroy(m);
}

TEST(flops)
{
    weft_model_config c;
    double f;
    CHECK(weft_model_config_parse("llama:vocab=10,ctx=4,layers=1,heads=2,kv_heads=1,dim=4,"
                                  "ffn=6", &c) == 0);
    /* params: 2 x 10 x 4 (untied) + 2 x 4 + 2 x 16 + 2 x 4 x 2 + 3 x 4 x 6 + 4 = 212 */
    CHECK(weft_model_flops(&c, 1, 4, &f) == 0);
    CHECKF(fabs(f - 4 * (6.0 * 212 + 12.0 * 4 * 4)) < 1e-6, "flops %.1f", f);
}

/* Loss and gradients of one forward and backward of a fixed batch. */
static float step_of(weft_model *m, float *grads, size_t n)
{
    int32_t tok[2 * 8], nxt[2 * 8];
    weft_rng_seed(&rng, 37);
    for (int i = 0; i < 16; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, 23);
        nxt[i] = (int32_t)weft_rng_below(&rng, 23);
    }
    float loss = -1;
    weft_model_zero_grad(m);
    if (weft_model_forward(m, tok, nxt, 2, 8, &loss) || weft_model_backward(m))
        return -1;
    memcpy(grads, weft_model_grads(m, NULL), n * sizeof(float));
    return loss;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

/* Recomputation rebuilds the same activations: the same bits; bf16
 * matmuls stay near fp32. */
TEST(recompute_and_bf16)
{
    weft_model_config c;
    weft_model *m;
    CHECK(weft_model_config_parse("llama:vocab=23,ctx=8,layers=3,heads=4,kv_heads=2,dim=16,"
                                  "ffn=24", &c) == 0);
    CHECK(weft_model_create(&m, &c, 3) == 0);
    size_t n;
    weft_model_params(m, &n);
    float *g0 = malloc(n * 4), *g1 = malloc(n * 4);
    float l0 = step_of(m, g0, n);
    CHECK(l0 > 0);
    CHECK(weft_model_set_recompute(m, 1) == 0);
    float l1 = step_of(m, g1, n);
    CHECKF(l1 == l0 && memcmp(g0, g1, n * 4) == 0, "recomputation: the same loss and gradients");
    CHECK(weft_model_set_recompute(m, 0) == 0);
    CHECK(weft_model_set_precision(m, WEFT_PREC_BF16) == 0);
    l1 = step_of(m, g1, n);
    double d = rel_diff(g1, g0, n);
    CHECKF(fabsf(l1 - l0) < 1e-2f * l0 && d < 5e-2 && d > 0, "bf16: loss %g vs %g, grads %.3g",
           l1, l0, d);
    free(g0);
    free(g1);
    weft_model_destroy(m);
}

/* A backward split into its input and weight halves (zero-bubble
 * schedules) adds the same gradients as a whole one. */
TEST(split_backward)
{
    weft_model_config c;
    weft_model *whole, *m;
    CHECK(weft_model_config_parse("llama:vocab=23,ctx=8,layers=2,heads=4,kv_heads=1,dim=16,"
                                  "ffn=24", &c) == 0);
    weft_block_range all = { 0, weft_model_block_count(&c) };
    CHECK(weft_model_create(&whole, &c, 3) == 0);
    CHECK(weft_model_create_stage(&m, &c, 3, &all, 1, WEFT_STAGE_SPLIT_BACKWARD) == 0);
    size_t n;
    weft_model_params(m, &n);
    float *g0 = malloc(n * 4);
    float l0 = step_of(whole, g0, n);
    int32_t tok[16], nxt[16];
    weft_rng_seed(&rng, 37);
    for (int i = 0; i < 16; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, 23);
        nxt[i] = (int32_t)weft_rng_below(&rng, 23);
    }
    float l1;
    weft_model_zero_grad(m);
    CHECK(weft_model_chunk_forward(m, 0, 0, tok, nxt, 2, 8, &l1) == 0);
    CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_INPUT, 1) == 0);
    CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_WEIGHT, 1) == 0);
    CHECK(l1 == l0);
    CHECKF(memcmp(g0, weft_model_grads(m, NULL), n * 4) == 0,
           "split backward: the same gradients (%.3g)", rel_diff(weft_model_grads(m, NULL), g0, n));
    free(g0);
    weft_model_destroy(m);
    weft_model_destroy(whole);
}

/* Greedy generation: each new token is the argmax of the logits of the
 * sequence so far. */
TEST(generate)
{
    weft_model_config c;
    weft_model *m;
    CHECK(weft_model_config_parse("llama:vocab=23,ctx=6,layers=1,heads=2,kv_heads=1,dim=8,"
                                  "ffn=8", &c) == 0);
    CHECK(weft_model_create(&m, &c, 4) == 0);
    int32_t tok[9] = { 3, 1, 4 };
    CHECK(weft_model_generate(m, tok, 3, 9, 0.0f, 0, NULL) == 0);
    int ok = 1;
    for (int pos = 3; pos < 9; pos++) {
        int start = pos > 6 ? pos - 6 : 0, T = pos - start, rows, cols, best = 0;
        CHECK(weft_model_forward(m, tok + start, NULL, 1, T, NULL) == 0);
        const float *z = weft_model_logits(m, &rows, &cols) + (size_t)(T - 1) * 23;
        for (int i = 1; i < cols; i++)
            best = z[i] > z[best] ? i : best;
        ok &= tok[pos] == best;
    }
    CHECKF(ok, "generated tokens are the greedy choices");
    weft_model_destroy(m);
}

/* A Llama's config and weights through a checkpoint; a checkpoint written
 * before the Llama (17 config fields) still loads. */
TEST(checkpoint)
{
    weft_model_config c;
    weft_model *m, *back;
    weft_ckpt *ck;
    CHECK(weft_model_config_parse("llama:vocab=23,ctx=6,layers=1,heads=2,kv_heads=1,dim=8,"
                                  "ffn=8,theta=500000,eps=1e-6", &c) == 0);
    CHECK(weft_model_create(&m, &c, 4) == 0);
    CHECK(weft_ckpt_new(&ck) == 0);
    CHECK(weft_ckpt_put_model(ck, m) == 0);
    CHECK(weft_ckpt_get_model(ck, &back) == 0);
    size_t n, n2;
    float *p = weft_model_params(m, &n), *p2 = weft_model_params(back, &n2);
    CHECK(memcmp(weft_model_config_of(back), &c, sizeof c) == 0);
    CHECK(n == n2 && memcmp(p, p2, n * 4) == 0);
    weft_model_destroy(back);
    weft_model_destroy(m);
    weft_ckpt_free(ck);

    CHECK(weft_model_config_parse("gpt:vocab=11,ctx=8,layers=1,heads=2,dim=8", &c) == 0);
    CHECK(weft_model_create(&m, &c, 4) == 0);
    CHECK(weft_ckpt_new(&ck) == 0);
    CHECK(weft_ckpt_put_model(ck, m) == 0);
    /* the fields as they were: type, n_widths, 9 widths, activation and
     * the GPT's five */
    int32_t old[17] = { c.type, c.n_widths };
    old[12] = c.vocab;
    old[13] = c.ctx;
    old[14] = c.n_layer;
    old[15] = c.n_head;
    old[16] = c.d_model;
    int64_t nf = 17;
    CHECK(weft_ckpt_put_tensor(ck, "model/config", WEFT_I32, old, 1, &nf) == 0);
    CHECK(weft_ckpt_get_model(ck, &back) == 0);
    CHECKF(memcmp(weft_model_config_of(back), &c, sizeof c) == 0, "an old GPT checkpoint loads");
    weft_model_destroy(back);
    nf = 16;
    CHECK(weft_ckpt_put_tensor(ck, "model/config", WEFT_I32, old, 1, &nf) == 0);
    CHECK(weft_ckpt_get_model(ck, &back) != 0);
    weft_model_destroy(m);
    weft_ckpt_free(ck);
}
