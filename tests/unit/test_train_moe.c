/* The Llama's mixture of experts: finite-difference gradients of the
 * whole loss (cross-entropy + the weighted aux and z losses) on a tiny
 * config, with dropping and a shared expert; an expert no token picks
 * (its weights' gradients exactly zero, everything finite); the capacity
 * rounding; the config's keys (round trip, refusals, a width tensor
 * parallelism does not divide refused); each tensor-parallel rank's
 * expert parts mapping to the whole model's elements; recomputation and a split backward giving the same bits; and
 * the balancing bias's two steps by hand, the run's step of it (each
 * layer's bias, the counters reporting the loads it stepped from), and
 * each rule alone taking a skewed
 * router's max/mean load toward 1; the experts run in two ranges as in one (what each expert-parallel
 * rank runs), and the test-only skew of the expert-parallel context on one
 * rank sending every token to experts 0 and 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "train/flops.h"
#include "train/model.h"
#include "train/moe.h"
#include "train/moe_block.h"
#include "train/moe_ep.h"
#include "train/moe_split.h"
#include "train/moe_experts.h"
#include "weft.h"

#define B 2
#define T 8

static void data(int32_t *tok, int32_t *nxt, int vocab, uint64_t seed)
{
    weft_rng rng;
    weft_rng_seed(&rng, seed);
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, (uint64_t)vocab);
        nxt[i] = (int32_t)weft_rng_below(&rng, (uint64_t)vocab);
    }
}

/* Cross-entropy plus the weighted balancing losses of one forward. */
static double total_loss(weft_model *m, const int32_t *tok, const int32_t *nxt)
{
    const weft_model_config *c = weft_model_config_of(m);
    float ce = 0;
    weft_moe_stats st;
    if (weft_model_forward(m, tok, nxt, B, T, &ce) || weft_model_moe_stats(m, &st))
        return NAN;
    return ce + (double)c->aux_loss * st.aux + (double)c->z_loss * st.z;
}

static weft_model *make(const char *spec, uint64_t seed)
{
    weft_model_config c;
    weft_model *m = NULL;
    if (weft_model_config_parse(spec, &c) || weft_model_create(&m, &c, seed))
        return NULL;
    return m;
}

static void finite_difference(const char *spec)
{
    /* h large enough for fp32 sums, small enough that no pick changes */
    const float h = 2e-3f;
    weft_model *m = make(spec, 5);
    CHECKF(m != NULL, "%s", spec);
    if (!m)
        return;
    int32_t tok[B * T], nxt[B * T];
    data(tok, nxt, 11, 36);
    weft_rng rng;
    weft_rng_seed(&rng, 9);
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    for (size_t i = 0; i < n; i++) /* livelier weights */
        p[i] += 0.2f * (2.0f * weft_rng_uniform(&rng) - 1.0f);
    weft_model_zero_grad(m);
    double l0 = total_loss(m, tok, nxt);
    CHECK(weft_model_backward(m) == 0);
    float *ana = malloc(n * sizeof(float));
    memcpy(ana, g, n * sizeof(float));
    int bad = 0, tried = 0;
    for (int ti = 0; ti < weft_model_tensor_count(m); ti++) {
        weft_tensor_info info;
        weft_model_tensor_info(m, ti, &info);
        for (int s = 0; s < 3; s++) {
            size_t i = info.offset + weft_rng_below(&rng, info.numel);
            float save = p[i];
            p[i] = save + h;
            double lp = total_loss(m, tok, nxt);
            p[i] = save - h;
            double lm = total_loss(m, tok, nxt);
            p[i] = save;
            double num = (lp - lm) / (2.0 * h);
            tried++;
            if (!(fabs(num - ana[i]) <= 2e-3 + 3e-2 * fabs(ana[i]))) {
                fprintf(stderr, "  %s[%zu]: numeric %.6g analytic %.6g\n", info.name,
                        i - info.offset, num, ana[i]);
                bad++;
            }
        }
    }
    weft_moe_stats st;
    CHECK(weft_model_moe_stats(m, &st) == 0);
    CHECKF(isfinite(l0) && st.routed == 2 * B * T * 2 && st.dropped > 0,
           "loss %g, routed %lld, dropped %lld", l0, (long long)st.routed, (long long)st.dropped);
    CHECKF(bad == 0, "%d of %d sampled gradients off", bad, tried);
    free(ana);
    weft_model_destroy(m);
}

/* The Llama's SwiGLU experts with a shared one, and the GPT's GELU
 * experts (sigmoid router, every balancing loss), with dropping. */
TEST(gradients_finite_difference)
{
    finite_difference("llama:vocab=11,ctx=8,layers=2,heads=2,dim=8,ffn=12,experts=4,topk=2,"
                      "capacity=1.5,shared=1,moe_ffn=6,aux=0.05,zloss=0.01");
    finite_difference("gpt:vocab=11,ctx=8,layers=2,heads=2,dim=8,experts=4,topk=2,"
                      "capacity=1.5,moe_ffn=6,aux=0.05,zloss=0.01,router=sigmoid");
}

/* A GPT's expert keys: written back as read; shared experts (the Llama's
 * alone) refused; each expert's width in halves over tp ranks. */
TEST(gpt_config)
{
    weft_model_config c, c2;
    char buf[512];
    CHECK(weft_model_config_parse("gpt:vocab=11,ctx=8,layers=1,heads=2,dim=8,experts=4,"
                                  "topk=2,moe_ffn=6,bias=1,capacity=1.25", &c) == 0);
    CHECK(c.type == WEFT_MODEL_GPT && c.experts == 4 && c.topk == 2 && c.moe_bias == 1);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0 &&
          weft_model_config_parse(buf, &c2) == 0 && memcmp(&c, &c2, sizeof c) == 0);
    CHECK(weft_model_config_parse("gpt:vocab=11,ctx=8,layers=1,heads=2,dim=8,experts=4,"
                                  "topk=2,shared=1", &c2) == WEFT_EINVAL);
    CHECK(weft_model_config_parse("gpt:vocab=11,ctx=8,layers=1,heads=2,dim=8,topk=2", &c2) ==
          WEFT_EINVAL);
    CHECK(train_moe_tp_fits(&c, 1) && !train_moe_tp_fits(&c, 2));
    c.moe_ffn = 0; /* 4 * dim = 32: halves of 16 over 2 ranks */
    CHECK(train_moe_tp_fits(&c, 2) && train_moe_tp_fits(&c, 4));
}

/* Experts 0..3 of 6 and then 4..5 on their own rows: the bits of all six
 * at once (each expert's product reads only its rows), SwiGLU and GELU
 * experts. */
static void experts_in_ranges(int gelu)
{
    enum { E = 6, D = 8, F = 6, R = 20 };
    moe_dims d = { R, D, E, 2, F, R, 0, 0, 0, NULL, gelu };
    int W = gelu ? F : 2 * F; /* floats of gu a row */
    int32_t start[E + 1] = { 0, 3, 3, 10, 12, 19, 20 }; /* expert 1 has no rows */
    float *buf = calloc((size_t)R * (4 * D + 6 * F) + (size_t)E * (4 * F * D), sizeof(float));
    CHECK(buf != NULL);
    if (!buf)
        return;
    float *xe = buf, *y1 = xe + R * D, *y2 = y1 + R * D, *gu = y2 + R * D, *h = gu + R * 2 * F;
    float *gu2 = h + R * F, *h2 = gu2 + R * 2 * F, *wgu = h2 + R * F, *wd = wgu + E * 2 * F * D;
    weft_rng rng;
    weft_rng_seed(&rng, 9);
    for (int i = 0; i < R * D; i++)
        xe[i] = (float)weft_rng_below(&rng, 1000) / 500.0f - 1.0f;
    for (int i = 0; i < E * 2 * F * D + E * D * F; i++)
        wgu[i] = (float)weft_rng_below(&rng, 1000) / 5000.0f - 0.1f;
    train_moe_experts_forward(NULL, &d, 0, E, start, xe, gu, h, y1, wgu, wd);
    int32_t lo[5] = { 0, 3, 3, 10, 12 }, hi[3] = { 0, 7, 8 };
    train_moe_experts_forward(NULL, &d, 0, 4, lo, xe, gu2, h2, y2, wgu, wd);
    train_moe_experts_forward(NULL, &d, 4, 2, hi, xe + 12 * D, gu2 + 12 * W, h2 + 12 * F,
                              y2 + 12 * D, wgu, wd);
    CHECK(memcmp(y1, y2, sizeof(float) * R * D) == 0);
    free(buf);
}

TEST(experts_in_ranges)
{
    experts_in_ranges(0);
    experts_in_ranges(1);
}

/* The expert-parallel context on one rank (no group): its test skew sends
 * every token to experts 0 and 1, whose load is then max/mean 4 of 8, and
 * the other experts' weights get exactly zero gradients. */
TEST(ep_skew_one_rank)
{
    moe_ep *p = NULL;
    CHECK(train_moe_ep_open(&p, NULL, 0, 0, 0.0f, 0) == WEFT_EINVAL);
    CHECK(train_moe_ep_size(NULL) == 1);
    weft_model *m = make("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=8,topk=2", 5);
    CHECK(m != NULL && train_moe_ep_open(&p, NULL, 8, 0, 8.0f, 0) == 0);
    if (!m || !p) {
        weft_model_destroy(m);
        return;
    }
    m->ep = p; /* the model frees it */
    CHECK(train_moe_ep_size(p) == 1);
    int32_t tok[B * T], nxt[B * T];
    data(tok, nxt, 11, 6);
    float loss;
    weft_model_zero_grad(m);
    CHECK(weft_model_forward(m, tok, nxt, B, T, &loss) == 0 && weft_model_backward(m) == 0);
    weft_moe_stats st;
    CHECK(weft_model_moe_stats(m, &st) == 0);
    CHECKF(st.load_max == B * T && st.load_mean == B * T * 2 / 8.0,
           "load max %g mean %g", st.load_max, st.load_mean);
    weft_tensor_info gu;
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.experts.gate_up.weight"),
                                 &gu) == 0);
    float *g = weft_model_grads(m, NULL);
    int zero = 1, used = 0;
    for (size_t i = 0; i < gu.numel; i++) {
        if (i < gu.numel / 4)
            used |= g[gu.offset + i] != 0.0f;
        else
            zero &= g[gu.offset + i] == 0.0f;
    }
    CHECKF(zero && used && isfinite(loss), "experts 2-7 zero %d, 0-1 used %d", zero, used);
    weft_model_destroy(m);
}

/* A bias of -10 keeps expert 3 out of every token's pick: its weights get
 * zero gradients, all else stays finite. */
TEST(zero_token_expert)
{
    weft_model *m = make("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=2,"
                         "bias=1,aux=0.1,zloss=0.1", 3);
    CHECK(m != NULL);
    if (!m)
        return;
    int32_t tok[B * T], nxt[B * T];
    data(tok, nxt, 11, 4);
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL);
    weft_tensor_info gu, dn, bias;
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.experts.gate_up.weight"),
                                 &gu) == 0);
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.experts.down.weight"),
                                 &dn) == 0);
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.router.bias"),
                                 &bias) == 0);
    p[bias.offset + 3] = -10.0f;
    float loss;
    weft_model_zero_grad(m);
    CHECK(weft_model_forward(m, tok, nxt, B, T, &loss) == 0);
    CHECK(weft_model_backward(m) == 0);
    int finite = 1, zero = 1, used = 0;
    for (size_t i = 0; i < n; i++)
        finite &= isfinite(g[i]) && isfinite(p[i]);
    size_t per_gu = gu.numel / 4, per_dn = dn.numel / 4;
    for (size_t i = 0; i < per_gu; i++) {
        zero &= g[gu.offset + 3 * per_gu + i] == 0.0f;
        used |= g[gu.offset + i] != 0.0f;
    }
    for (size_t i = 0; i < per_dn; i++)
        zero &= g[dn.offset + 3 * per_dn + i] == 0.0f;
    CHECKF(finite && zero && used && isfinite(loss),
           "finite %d, unused expert's gradients zero %d, expert 0 used %d", finite, zero, used);
    /* the bias step: the idle expert's bias rises by the rate */
    CHECKF(p[bias.offset + 3] == -10.0f + 1e-3f, "bias after the step %.9g",
           (double)p[bias.offset + 3]);
    weft_model_destroy(m);
}

TEST(capacity)
{
    CHECK(train_moe_capacity(10, 2, 4, 1.0f) == 5);
    CHECK(train_moe_capacity(10, 2, 4, 1.25f) == 7);     /* 6.25 rounds up */
    CHECK(train_moe_capacity(16, 2, 4, 1.0f) == 8);      /* exact: no extra slot */
    CHECK(train_moe_capacity(10, 2, 4, 0.0f) == 10);     /* no dropping */
    CHECK(train_moe_capacity(10, 1, 64, 0.01f) == 1);    /* at least one */
    CHECK(train_moe_capacity(10, 2, 4, 100.0f) == 10);   /* at most every token */
}

TEST(config_keys)
{
    weft_model_config c, back;
    char buf[512];
    CHECK(weft_model_config_parse("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=8,"
                                  "topk=2,router=sigmoid,bias=1,capacity=1.25,shared=2,"
                                  "moe_ffn=4,aux=0.01,zloss=0.001", &c) == 0);
    CHECK(c.experts == 8 && c.topk == 2 && c.router == 1 && c.moe_bias == 1 && c.shared == 2 &&
          c.moe_ffn == 4 && c.capacity == 1.25f && c.aux_loss == 0.01f && c.z_loss == 0.001f);
    CHECK(weft_model_config_check(&c) == 0);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) < (int)sizeof buf);
    CHECK(weft_model_config_parse(buf, &back) == 0);
    CHECKF(memcmp(&c, &back, sizeof c) == 0, "round trip of %s", buf);
    /* bias=2, the proportional step, is kept through the round trip */
    CHECK(weft_model_config_parse("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,"
                                  "topk=1,bias=2", &c) == 0 && weft_model_config_check(&c) == 0);
    CHECK(c.moe_bias == 2 && weft_model_config_format(&c, buf, sizeof buf) > 0 &&
          strstr(buf, ",bias=2,") != NULL);
    CHECK(weft_model_config_parse("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12", &c) == 0);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0 && !strstr(buf, "experts"));
    static const char *const bad[] = {
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=5",
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=0",
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=1,router=tanh",
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,topk=1",
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=1,bias=3",
        "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=1,capacity=-1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = weft_model_config_parse(bad[i], &c);
        CHECKF(rc != 0 || weft_model_config_check(&c) != 0, "refused: %s", bad[i]);
    }
    /* each expert's width splits over tp (Megatron's expert tensor
     * parallelism): a width tp does not divide is refused */
    weft_model *m = NULL;
    CHECK(weft_model_config_parse("llama:vocab=12,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,"
                                  "topk=1,moe_ffn=5", &c) == 0);
    weft_block_range all = { 0, weft_model_block_count(&c) };
    CHECK(weft_model_create_tp(&m, &c, 1, &all, 1, 0, NULL, 2, 0) != 0 && m == NULL);
}

/* Under tp 2 each rank holds every expert's half width: its gate and up
 * rows and its down columns; with the router, the bias and the shared
 * experts' tensors, every element of the whole model lies on the ranks
 * (once in a split tensor, on both in a whole one) with the value the
 * one-process model gives it. */
TEST(tensor_parallel_parts)
{
    weft_model_config c;
    CHECK(weft_model_config_parse("llama:vocab=12,ctx=8,layers=2,heads=2,dim=8,ffn=12,experts=3,"
                                  "topk=2,shared=1,moe_ffn=6,bias=1", &c) == 0);
    weft_block_range all = { 0, weft_model_block_count(&c) };
    weft_model *whole = NULL, *part[2] = { NULL, NULL };
    CHECK(weft_model_create_tp(&whole, &c, 5, &all, 1, 0, NULL, 1, 0) == 0);
    for (int r = 0; r < 2; r++)
        CHECK(weft_model_create_tp(&part[r], &c, 5, &all, 1, 0, NULL, 2, r) == 0);
    if (!whole || !part[0] || !part[1])
        goto out;
    size_t n;
    const float *w = weft_model_params(whole, &n);
    int nt = weft_model_tensor_count(whole), wrong = 0, split = 0;
    CHECK(weft_model_tensor_count(part[0]) == nt && weft_model_tensor_count(part[1]) == nt);
    for (int i = 0; i < nt && weft_model_tensor_count(part[0]) == nt; i++) {
        weft_tensor_info wt, pt[2];
        weft_model_tensor_info(whole, i, &wt);
        unsigned char *seen = calloc(wt.numel, 1);
        if (!seen)
            break;
        for (int r = 0; r < 2; r++) {
            size_t np;
            const float *p = weft_model_params(part[r], &np);
            weft_model_tensor_info(part[r], i, &pt[r]);
            for (size_t e = 0; e < pt[r].numel; e++) {
                size_t at;
                if (weft_model_tensor_whole_elem(part[r], i, e, &at) != 0 || at >= wt.numel ||
                    p[pt[r].offset + e] != w[wt.offset + at])
                    wrong++;
                else
                    seen[at]++;
            }
        }
        int want = pt[0].numel == wt.numel ? 2 : 1, experts = strstr(wt.name, ".experts.") != NULL;
        split += experts && pt[0].numel * 2 == wt.numel;
        for (size_t e = 0; e < wt.numel; e++)
            wrong += seen[e] != want;
        free(seen);
    }
    CHECKF(wrong == 0, "%d elements misplaced", wrong);
    CHECKF(split == 4, "%d of the 4 expert tensors split in halves", split);
    /* expert 1's up row 2 (row 2F + F + 2 = 20 of block 0's gate|up, F 6)
     * is rank 0's: its local row is expert 1's half (6 rows) + the gate
     * half (3) + 2 */
    int gu = weft_model_tensor_find(part[0], "blocks.0.mlp.experts.gate_up.weight");
    size_t at = 0;
    CHECK(gu >= 0 && weft_model_tensor_whole_elem(part[0], gu, (size_t)(6 + 3 + 2) * 8, &at) == 0 &&
          at == (size_t)20 * 8);
out:
    weft_model_destroy(whole);
    weft_model_destroy(part[0]);
    weft_model_destroy(part[1]);
}

/* The parameter count is the model's; FLOPs count topk experts a token. */
TEST(flops)
{
    const char *spec = "llama:vocab=11,ctx=8,layers=2,heads=2,dim=8,ffn=12,experts=4,topk=1,"
                       "shared=1,moe_ffn=6,bias=1";
    weft_model *m = make(spec, 1);
    CHECK(m != NULL);
    if (!m)
        return;
    size_t n;
    weft_model_params(m, &n);
    weft_model_config c = *weft_model_config_of(m), k4 = c;
    CHECKF(train_model_param_count(&c) == (double)n, "count %g, model %zu",
           train_model_param_count(&c), n);
    k4.topk = 4;
    /* 3 experts of 3 * 8 * 6 weights idle in each of 2 layers, 6 FLOPs each per token */
    double d = train_model_flops(&k4, 2, 8) - train_model_flops(&c, 2, 8);
    CHECKF(d == 16.0 * 6 * 2 * 3 * 3 * 8 * 6, "FLOPs of the idle experts %g", d);
    weft_model_destroy(m);
}

/* A checkpoint keeps the expert fields and the tensors (the bias too). */
TEST(checkpoint)
{
    weft_model *m = make("llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,topk=2,"
                         "router=sigmoid,bias=1,capacity=1.5,aux=0.01,zloss=0.002", 6), *back = NULL;
    weft_ckpt *c = NULL, *in = NULL;
    CHECK(m != NULL && weft_ckpt_new(&c) == 0);
    if (!m || !c)
        return;
    size_t n;
    float *p = weft_model_params(m, &n);
    weft_tensor_info bias;
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.router.bias"),
                                 &bias) == 0);
    p[bias.offset + 1] = 0.25f;
    char path[] = "/tmp/weft_moe_ckpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(weft_ckpt_put_model(c, m) == 0 && weft_ckpt_save(c, path) == 0);
    CHECK(weft_ckpt_load(&in, path) == 0 && weft_ckpt_get_model(in, &back) == 0);
    if (back) {
        CHECK(memcmp(weft_model_config_of(back), weft_model_config_of(m),
                     sizeof(weft_model_config)) == 0);
        size_t nb;
        float *pb = weft_model_params(back, &nb);
        CHECK(nb == n && memcmp(pb, p, n * sizeof(float)) == 0);
        weft_model_destroy(back);
    }
    weft_ckpt_free(in);
    weft_ckpt_free(c);
    unlink(path);
    weft_model_destroy(m);
}

static float step_of(weft_model *m, float *g, size_t n, const int32_t *tok, const int32_t *nxt)
{
    float loss = 0;
    weft_model_zero_grad(m);
    if (weft_model_forward(m, tok, nxt, B, T, &loss) || weft_model_backward(m))
        return -1;
    memcpy(g, weft_model_grads(m, NULL), n * sizeof(float));
    return loss;
}

TEST(recompute_and_split)
{
    const char *spec = "llama:vocab=11,ctx=8,layers=3,heads=2,dim=8,ffn=12,experts=4,topk=2,"
                       "capacity=1,shared=1,aux=0.01,zloss=0.01";
    weft_model *m = make(spec, 3), *st = NULL;
    CHECK(m != NULL);
    if (!m)
        return;
    int32_t tok[B * T], nxt[B * T];
    data(tok, nxt, 11, 8);
    size_t n;
    weft_model_params(m, &n);
    float *g0 = malloc(n * 4), *g1 = malloc(n * 4);
    float l0 = step_of(m, g0, n, tok, nxt);
    CHECK(weft_model_set_recompute(m, 1) == 0);
    float l1 = step_of(m, g1, n, tok, nxt);
    CHECKF(l0 > 0 && l1 == l0 && memcmp(g0, g1, n * 4) == 0, "recomputation: the same bits");
    weft_model_config c;
    CHECK(weft_model_config_parse(spec, &c) == 0);
    weft_block_range all = { 0, weft_model_block_count(&c) };
    CHECK(weft_model_create_stage(&st, &c, 3, &all, 1, WEFT_STAGE_SPLIT_BACKWARD) == 0);
    if (st) {
        float loss;
        weft_model_zero_grad(st);
        CHECK(weft_model_chunk_forward(st, 0, 0, tok, nxt, B, T, &loss) == 0);
        CHECK(weft_model_chunk_backward(st, 0, 0, NULL, 1.0f, WEFT_BACKWARD_INPUT, 1) == 0);
        CHECK(weft_model_chunk_backward(st, 0, 0, NULL, 1.0f, WEFT_BACKWARD_WEIGHT, 1) == 0);
        CHECKF(loss == l0 && memcmp(weft_model_grads(st, NULL), g0, n * 4) == 0,
               "split backward: the same bits");
        weft_model_destroy(st);
    }
    free(g0);
    free(g1);
    weft_model_destroy(m);
}

/* The two steps by hand. Loads 5, 35, 10, 30, 20 (mean 20): the sign
 * step moves each bias by the rate toward the mean load (the expert at
 * the mean stays); the proportional one by rate * (20 - load) / 20, so
 * +0.75, -0.75, +0.5, -0.5 and 0 times the rate. No tokens at all: no
 * step. */
TEST(bias_rules)
{
    const int64_t load[5] = { 5, 35, 10, 30, 20 }, none[5] = { 0, 0, 0, 0, 0 };
    const float start[5] = { 0.5f, -0.25f, 0.0f, 1.0f, 2.0f };
    const double sign[5] = { 1, -1, 1, -1, 0 }, prop[5] = { 0.75, -0.75, 0.5, -0.5, 0 };
    float b[5], c[5], z[5];
    memcpy(b, start, sizeof b);
    memcpy(c, start, sizeof c);
    memcpy(z, start, sizeof z);
    train_moe_bias_update(b, load, 5, MOE_BIAS_SIGN, 1e-3f);
    train_moe_bias_update(c, load, 5, MOE_BIAS_PROPORTIONAL, 1e-2f);
    train_moe_bias_update(z, none, 5, MOE_BIAS_PROPORTIONAL, 1e-2f);
    for (int e = 0; e < 5; e++) {
        CHECKF(fabs(b[e] - (start[e] + 1e-3 * sign[e])) < 1e-7, "sign step, expert %d: %.9g",
               e, (double)b[e]);
        CHECKF(fabs(c[e] - (start[e] + 1e-2 * prop[e])) < 1e-7,
               "proportional step, expert %d: %.9g", e, (double)c[e]);
        CHECKF(z[e] == start[e], "no tokens, expert %d: %.9g", e, (double)z[e]);
    }
}

/* The bias stepped by the run (train_moe_share): backward leaves it and
 * keeps the step's loads (every token's one pick, 16 a layer); the step
 * from loads the run hands in (layer 0: 8, 4, 4, 0; layer 1: 1, 2, 3, 10;
 * mean 4) moves each layer's own bias by the sign rule, and the counters
 * report those loads (the least balanced block 10 of mean 4), not the
 * ones this model counted. */
TEST(bias_shared_step)
{
    weft_model *m = make("llama:vocab=11,ctx=8,layers=2,heads=2,dim=8,ffn=12,experts=4,topk=1,"
                         "bias=1", 5);
    CHECK(m != NULL);
    if (!m)
        return;
    int32_t tok[B * T], nxt[B * T];
    data(tok, nxt, 11, 6);
    weft_tensor_info b0, b1;
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.router.bias"),
                                 &b0) == 0);
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.1.mlp.router.bias"),
                                 &b1) == 0);
    float *p = weft_model_params(m, NULL), loss;
    CHECK(train_moe_shared(m) == 0 && train_moe_share(m) == 8 && train_moe_shared(m) == 8);
    CHECK(weft_model_forward(m, tok, nxt, B, T, &loss) == 0 && weft_model_backward(m) == 0);
    int64_t kept[8], hand[8] = { 8, 4, 4, 0, 1, 2, 3, 10 };
    int still = 1;
    for (int e = 0; e < 4; e++)
        still &= p[b0.offset + e] == 0.0f && p[b1.offset + e] == 0.0f;
    train_moe_share_take(m, kept);
    CHECKF(still && kept[0] + kept[1] + kept[2] + kept[3] == B * T &&
           kept[4] + kept[5] + kept[6] + kept[7] == B * T, "bias untouched %d, loads %lld %lld",
           still, (long long)(kept[0] + kept[1] + kept[2] + kept[3]),
           (long long)(kept[4] + kept[5] + kept[6] + kept[7]));
    CHECK(train_moe_share_step(m, hand) == 0);
    const float want[8] = { -1e-3f, 0, 0, 1e-3f, 1e-3f, 1e-3f, 1e-3f, -1e-3f };
    for (int e = 0; e < 4; e++) {
        CHECKF(p[b0.offset + e] == want[e], "layer 0 bias %d: %.9g", e, (double)p[b0.offset + e]);
        CHECKF(p[b1.offset + e] == want[4 + e], "layer 1 bias %d: %.9g", e,
               (double)p[b1.offset + e]);
    }
    weft_moe_stats st;
    CHECK(weft_model_moe_stats(m, &st) == 0);
    CHECKF(st.load_max == 10.0 && st.load_mean == 4.0, "counters: max %g mean %g", st.load_max,
           st.load_mean);
    weft_model_destroy(m);
}

/* No optimiser: only the bias moves. A router of larger weights spreads
 * the tokens' scores; one expert starts favoured by 0.5 (max/mean load
 * above 2); the steps of either rule (bias=1, bias=2) bring max/mean load
 * within 1.25. */
static void bias_balances(const char *rule)
{
    enum { NB = 8 };
    char spec[256];
    snprintf(spec, sizeof spec, "llama:vocab=11,ctx=8,layers=1,heads=2,dim=8,ffn=12,experts=4,"
             "topk=1,router=sigmoid,%s", rule);
    weft_model *m = make(spec, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    int32_t tok[NB * T], nxt[NB * T];
    weft_rng rng;
    weft_rng_seed(&rng, 12);
    for (int i = 0; i < NB * T; i++) {
        tok[i] = (int32_t)weft_rng_below(&rng, 11);
        nxt[i] = (int32_t)weft_rng_below(&rng, 11);
    }
    weft_tensor_info bias, router;
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.router.bias"),
                                 &bias) == 0);
    CHECK(weft_model_tensor_info(m, weft_model_tensor_find(m, "blocks.0.mlp.router.weight"),
                                 &router) == 0);
    float *p = weft_model_params(m, NULL);
    for (size_t i = 0; i < router.numel; i++)
        p[router.offset + i] = 2.0f * weft_rng_uniform(&rng) - 1.0f;
    p[bias.offset] = 0.5f;
    weft_moe_stats st;
    float loss;
    double first = 0, best = 1e9;
    const char *scale = getenv("TEST_SCALE");
    int steps = scale && atoi(scale) >= 10 ? 350 : 400;
    for (int s = 0; s < steps; s++) {
        weft_model_zero_grad(m);
        CHECK(weft_model_forward(m, tok, nxt, NB, T, &loss) == 0);
        CHECK(weft_model_backward(m) == 0);
        CHECK(weft_model_moe_stats(m, &st) == 0);
        double r = st.load_max / st.load_mean;
        if (getenv("MOE_TRACE"))
            fprintf(stderr, "%d %.3g\n", s, r);
        if (s == 0)
            first = r;
        if (s >= steps - 20 && r < best)
            best = r;
    }
    CHECKF(first >= 2.0 && best <= 1.25, "%s: max/mean load: first step %.3g, best of the last "
           "20 %.3g", rule, first, best);
    weft_model_destroy(m);
}

TEST(bias_balances)
{
    bias_balances("bias=1");
    bias_balances("bias=2");
}

/* Dividing the experts (one rank of an expert group of 2, no group
 * needed for the cut): the parameters shrink by half the experts', the
 * rank's expert rows are the whole model's second half, every other
 * tensor keeps its values, and the whole-tensor map points back there. */
TEST(split_experts)
{
    const char *spec = "llama:vocab=11,ctx=8,layers=2,heads=2,dim=8,ffn=12,experts=4,topk=2";
    weft_model *whole = make(spec, 5), *m = make(spec, 5);
    moe_ep *p = NULL;
    CHECK(whole && m && train_moe_ep_open(&p, NULL, 4, 0, 0.0f, 0) == 0);
    if (!whole || !m || !p) {
        weft_model_destroy(whole);
        weft_model_destroy(m);
        train_moe_ep_free(p);
        return;
    }
    CHECK(train_moe_split(m, 2, 1, NULL) == WEFT_EINVAL); /* no expert context yet */
    m->ep = p;
    size_t nw, nm;
    weft_model_params(whole, &nw);
    CHECK(train_moe_split(m, 3, 0, NULL) == WEFT_EINVAL); /* 3 does not divide 4 experts */
    CHECK(train_moe_split(m, 2, 1, NULL) == 0);
    CHECK(train_moe_split(m, 2, 1, NULL) == WEFT_EINVAL); /* once */
    const float *pm = weft_model_params(m, &nm), *pw = weft_model_params(whole, NULL);
    size_t experts = 2 * (4 * 2 * 12 * 8 + 4 * 8 * 12);
    CHECKF(nm == nw - experts / 2, "%zu of %zu", nm, nw);
    int same = 1, mapped = 1;
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info a, b;
        weft_model_tensor_info(m, i, &a);
        weft_model_tensor_info(whole, weft_model_tensor_find(whole, a.name), &b);
        int ex = strstr(a.name, ".experts.") != NULL;
        size_t from = ex ? a.numel : 0;
        same &= a.numel == (ex ? b.numel / 2 : b.numel) &&
                memcmp(pm + a.offset, pw + b.offset + from, a.numel * sizeof(float)) == 0;
        for (size_t e = 0; e < a.numel; e += 7) {
            size_t at;
            mapped &= weft_model_tensor_whole_elem(m, i, e, &at) == 0 && at == from + e;
        }
    }
    CHECKF(same && mapped, "values kept %d, whole map %d", same, mapped);
    weft_comm *g = NULL;
    float sc = 0;
    int gi = weft_model_tensor_find(m, "blocks.1.mlp.experts.down.weight");
    CHECK(train_moe_grad_group(m, gi, &g, &sc) == 1 && sc == 0.5f);
    CHECK(train_moe_grad_group(m, weft_model_tensor_find(m, "blocks.1.mlp.router.weight"), &g,
                               &sc) == 0);
    weft_model_destroy(whole);
    weft_model_destroy(m);
}
