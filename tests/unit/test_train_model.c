/* Models as a user drives them: configs, the tensor table, seeding,
 * learning (MLP on separable clusters, GPT on a repeating sequence, then
 * greedy generation), resuming from copied state bit for bit, thread-count
 * independence, micro-batch accumulation, bf16 mode, the gradient hook and
 * argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "weft.h"

TEST(configs)
{
    weft_model_config c;
    char buf[256];
    CHECK(weft_model_config_parse("mlp:784-512-512-10", &c) == 0);
    CHECK(c.type == WEFT_MODEL_MLP && c.n_widths == 4 && c.widths[0] == 784 && c.widths[3] == 10 &&
          c.activation == WEFT_ACT_RELU);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0 && strcmp(buf, "mlp:784-512-512-10") == 0);
    CHECK(weft_model_config_parse("mlp:4-3:gelu", &c) == 0 && c.activation == WEFT_ACT_GELU);
    CHECK(weft_model_config_format(&c, buf, sizeof buf) > 0 && strcmp(buf, "mlp:4-3:gelu") == 0);
    CHECK(weft_model_config_parse("gpt:dim=64,heads=4,vocab=256,ctx=32,layers=3", &c) == 0);
    CHECK(c.type == WEFT_MODEL_GPT && c.vocab == 256 && c.ctx == 32 && c.n_layer == 3 &&
          c.n_head == 4 && c.d_model == 64);
    weft_model_config_format(&c, buf, sizeof buf);
    weft_model_config d;
    CHECK(weft_model_config_parse(buf, &d) == 0 && memcmp(&c, &d, sizeof c) == 0);
    static const char *const bad[] = { "mlp:", "mlp:5", "mlp:4-0-3", "mlp:1-2-3-4-5-6-7-8-9-10",
                                       "mlp:4-3:tanh", "gpt:vocab=10,ctx=4,layers=1,heads=3,dim=8",
                                       "gpt:vocab=10", "gpt:vocab=10,ctx=4,layers=1,heads=2,dim=8,x=1",
                                       "cnn:1", "" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(weft_model_config_parse(bad[i], &c) == WEFT_EINVAL, "accepted '%s'", bad[i]);
}

static weft_model *make(const char *spec, uint64_t seed)
{
    weft_model_config c;
    weft_model *m = NULL;
    if (weft_model_config_parse(spec, &c) == 0 && weft_model_create(&m, &c, seed) == 0)
        return m;
    return NULL;
}

TEST(tensors)
{
    weft_model *m = make("gpt:vocab=50,ctx=16,layers=3,heads=2,dim=12", 1);
    CHECK(m != NULL);
    if (!m)
        return;
    size_t n, want = 50 * 12 + 16 * 12 + 3 * (12 * 12 * 12 + 13 * 12) + 2 * 12, next = 0;
    weft_model_params(m, &n);
    CHECKF(n == want, "gpt params %zu, expected %zu", n, want);
    CHECK(weft_model_tensor_count(m) == 2 + 3 * 12 + 2);
    int contiguous = 1;
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info t;
        CHECK(weft_model_tensor_info(m, i, &t) == 0);
        contiguous &= t.offset == next;
        next += t.numel;
        CHECK(weft_model_tensor_find(m, t.name) == i);
    }
    CHECK(contiguous && next == n);
    weft_tensor_info t;
    int i = weft_model_tensor_find(m, "blocks.2.attn.qkv.weight");
    CHECK(i >= 0 && weft_model_tensor_info(m, i, &t) == 0 && t.ndim == 2 && t.shape[0] == 36 &&
          t.shape[1] == 12);
    CHECK(weft_model_tensor_find(m, "nope") == WEFT_EINVAL);
    CHECK(weft_model_tensor_info(m, 999, &t) == WEFT_EINVAL);

    /* same seed: same weights; other seed: other weights */
    weft_model *a = make("gpt:vocab=50,ctx=16,layers=3,heads=2,dim=12", 1);
    weft_model *b = make("gpt:vocab=50,ctx=16,layers=3,heads=2,dim=12", 2);
    CHECK(memcmp(weft_model_params(m, NULL), weft_model_params(a, NULL), n * 4) == 0);
    CHECK(memcmp(weft_model_params(m, NULL), weft_model_params(b, NULL), n * 4) != 0);
    weft_model_destroy(a);
    weft_model_destroy(b);

    /* bad inputs */
    int32_t tok[17] = { 0 }, tgt[17] = { 0 };
    float loss;
    CHECK(weft_model_backward(m) == WEFT_EINVAL);               /* nothing to go back through */
    CHECK(weft_model_forward(m, tok, tgt, 1, 17, &loss) == WEFT_EINVAL);   /* seq > ctx */
    tok[3] = 50;
    CHECK(weft_model_forward(m, tok, tgt, 1, 8, &loss) == WEFT_EINVAL);    /* token >= vocab */
    tok[3] = 0;
    tgt[2] = -2;
    CHECK(weft_model_forward(m, tok, tgt, 1, 8, &loss) == WEFT_EINVAL);
    tgt[2] = 0;
    CHECK(weft_model_forward(m, tok, NULL, 1, 8, NULL) == 0);
    CHECK(weft_model_backward(m) == WEFT_EINVAL);               /* no targets */
    CHECK(weft_model_forward(m, tok, tgt, 1, 8, &loss) == 0 && loss > 0.0f);
    CHECK(weft_model_backward(m) == 0);
    CHECK(weft_model_backward(m) == WEFT_EINVAL);               /* only once per forward */
    CHECK(weft_model_set_precision(m, 9) == WEFT_EINVAL);
    CHECK(weft_model_set_matmul(m, "cuda") == WEFT_EINVAL);
    weft_model_destroy(m);
}

/* Four Gaussian clusters in 16 dimensions. */
static void clusters(weft_rng *r, float *x, int32_t *y, int n)
{
    for (int i = 0; i < n; i++) {
        int c = (int)weft_rng_below(r, 4);
        y[i] = c;
        for (int j = 0; j < 16; j++)
            x[i * 16 + j] = 0.7f * weft_rng_normal(r) + (j % 4 == c ? 1.5f : 0.0f);
    }
}

TEST(mlp_learns)
{
    weft_model *m = make("mlp:16-32-4", 3);
    CHECK(m != NULL);
    if (!m)
        return;
    weft_rng r;
    weft_rng_seed(&r, 5);
    float x[64 * 16];
    int32_t y[64];
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_SGD);
    weft_optim *o;
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL), loss = 0;
    CHECK(weft_optim_create(&o, &oc, 0, n) == 0);
    for (int s = 0; s < 150; s++) {
        clusters(&r, x, y, 64);
        weft_model_zero_grad(m);
        weft_model_forward(m, x, y, 64, 1, &loss);
        weft_model_backward(m);
        weft_optim_step(o, p, g, 0.05f);
    }
    clusters(&r, x, y, 64);
    CHECK(weft_model_forward(m, x, y, 64, 1, &loss) == 0);
    int ok = weft_model_count_correct(m, y);
    CHECKF(ok >= 58, "MLP accuracy %d/64 (loss %.3f)", ok, loss);
    weft_optim_destroy(o);
    weft_model_destroy(m);
}

TEST(gpt_learns)
{
    weft_model *m = make("gpt:vocab=8,ctx=16,layers=2,heads=2,dim=16", 4);
    CHECK(m != NULL);
    if (!m)
        return;
    /* period-5 sequence: each token determined by the previous one */
    static const int32_t pat[5] = { 3, 1, 4, 1, 5 };
    int32_t tok[5 * 16], nxt[5 * 16];
    for (int b = 0; b < 5; b++)
        for (int t = 0; t < 16; t++) {
            tok[b * 16 + t] = pat[(b + t) % 5];
            nxt[b * 16 + t] = pat[(b + t + 1) % 5];
        }
    weft_optim_config oc;
    weft_optim_config_default(&oc, WEFT_OPTIM_ADAMW);
    weft_optim *o;
    size_t n;
    float *p = weft_model_params(m, &n), *g = weft_model_grads(m, NULL), loss = 0, first = 0;
    CHECK(weft_optim_create(&o, &oc, 0, n) == 0);
    weft_lr_schedule ls = { WEFT_LR_COSINE, 1e-2f, 1e-3f, 10, 150 };
    for (int s = 0; s < 150; s++) {
        weft_model_zero_grad(m);
        weft_model_forward(m, tok, nxt, 5, 16, &loss);
        if (s == 0)
            first = loss;
        weft_model_backward(m);
        weft_clip_grad_norm(g, n, 1.0f, NULL);
        weft_optim_step(o, p, g, weft_lr_at(&ls, s));
    }
    CHECKF(first > 1.5f && loss < 0.05f, "GPT loss %.3f -> %.3f", first, loss);
    int32_t gen[40] = { 1, 4, 1 };
    CHECK(weft_model_generate(m, gen, 3, 40, 0.0f, 0, NULL) == 0);   /* past ctx too */
    int right = 1;
    for (int i = 3; i < 40; i++)
        right &= gen[i] == pat[(i + 1) % 5];
    CHECKF(right, "greedy generation does not continue the pattern");
    weft_rng r;
    weft_rng_seed(&r, 1);
    CHECK(weft_model_generate(m, gen, 3, 20, 0.7f, 2, &r) == 0);
    int in_vocab = 1;
    for (int i = 0; i < 20; i++)
        in_vocab &= gen[i] >= 0 && gen[i] < 8;
    CHECK(in_vocab);
    /* top-k 1 at any temperature is greedy */
    int32_t g1[12] = { 3, 1 }, g2[12] = { 3, 1 };
    CHECK(weft_model_generate(m, g1, 2, 12, 0.0f, 0, NULL) == 0);
    CHECK(weft_model_generate(m, g2, 2, 12, 5.0f, 1, &r) == 0);
    CHECK(memcmp(g1, g2, sizeof g1) == 0);
    CHECK(weft_model_generate(m, g2, 2, 12, 1.0f, 0, NULL) == WEFT_EINVAL);   /* needs an rng */
    weft_optim_destroy(o);
    weft_model_destroy(m);
}

/* What a checkpoint carries: config, parameters, optimiser state and step,
 * RNG. Training on from a copy must give the same bits as going on. */
typedef struct {
    weft_model *m;
    weft_optim *o;
    weft_rng r;
} trainer;

static void train_steps(trainer *t, int steps, weft_lr_schedule *ls)
{
    size_t n;
    float *p = weft_model_params(t->m, &n), *g = weft_model_grads(t->m, NULL);
    int32_t tok[3 * 12], nxt[3 * 12];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 36; i++) {
            tok[i] = (int32_t)weft_rng_below(&t->r, 20);
            nxt[i] = (int32_t)weft_rng_below(&t->r, 20);
        }
        float loss;
        weft_model_zero_grad(t->m);
        weft_model_forward(t->m, tok, nxt, 3, 12, &loss);
        weft_model_backward(t->m);
        weft_clip_grad_norm(g, n, 0.5f, NULL);
        weft_optim_step(t->o, p, g, weft_lr_at(ls, weft_optim_steps(t->o)));
    }
}

static void resume(int kind)
{
    const char *spec = "gpt:vocab=20,ctx=12,layers=2,heads=2,dim=8";
    weft_lr_schedule ls = { WEFT_LR_COSINE, 3e-3f, 1e-4f, 2, 10 };
    weft_optim_config oc;
    weft_optim_config_default(&oc, kind);
    trainer a = { make(spec, 9), NULL, { { 0 } } }, b = { NULL, NULL, { { 0 } } };
    size_t n;
    weft_model_params(a.m, &n);
    CHECK(weft_optim_create(&a.o, &oc, 0, n) == 0);
    weft_rng_seed(&a.r, 77);
    train_steps(&a, 4, &ls);

    /* "save" and "load" through the public accessors only */
    weft_model_config cfg = *weft_model_config_of(a.m);
    CHECK(weft_model_create(&b.m, &cfg, 12345) == 0);
    memcpy(weft_model_params(b.m, NULL), weft_model_params(a.m, NULL), n * 4);
    CHECK(weft_optim_create(&b.o, weft_optim_config_of(a.o), 0, n) == 0);
    for (int i = 0; i < weft_optim_state_count(a.o); i++)
        memcpy(weft_optim_state(b.o, i, NULL), weft_optim_state(a.o, i, NULL), n * 4);
    weft_optim_set_steps(b.o, weft_optim_steps(a.o));
    b.r = a.r;

    train_steps(&a, 5, &ls);
    train_steps(&b, 5, &ls);
    CHECKF(memcmp(weft_model_params(a.m, NULL), weft_model_params(b.m, NULL), n * 4) == 0,
           "kind %d: resumed run differs", kind);
    CHECK(memcmp(weft_optim_state(a.o, 0, NULL), weft_optim_state(b.o, 0, NULL), n * 4) == 0);
    weft_optim_destroy(a.o);
    weft_optim_destroy(b.o);
    weft_model_destroy(a.m);
    weft_model_destroy(b.m);
}

/* The portable matmul, attention, GELU and LayerNorm split work over rows,
 * columns or (batch, head) pairs, never over a sum: any thread count gives
 * the same bits. The shapes are big enough for every split to happen. */
TEST(threads)
{
    enum { B = 12, T = 24 };
    const char *spec = "gpt:vocab=30,ctx=24,layers=2,heads=4,dim=32";
    int32_t tok[B * T], nxt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7) % 30;
        nxt[i] = (i * 11 + 3) % 30;
    }
    float *ref = NULL, l1 = 0;
    size_t n = 0;
    for (int th = 1; th <= 3; th++) {
        weft_model *m = make(spec, 2);
        CHECK(weft_model_set_matmul(m, "portable") == 0);
        CHECK(weft_model_set_threads(m, th) == 0 && weft_model_threads(m) == th);
        float loss;
        weft_model_forward(m, tok, nxt, B, T, &loss);
        weft_model_backward(m);
        float *g = weft_model_grads(m, &n);
        if (th == 1) {
            ref = malloc(n * 4);
            memcpy(ref, g, n * 4);
            l1 = loss;
        } else {
            CHECKF(loss == l1 && memcmp(ref, g, n * 4) == 0, "%d threads differ from 1", th);
        }
        weft_model_destroy(m);
    }
    free(ref);
}

/* Two half batches with gradients scaled by 1/2 give the full batch's
 * gradient (to rounding). */
TEST(accumulation)
{
    weft_model *m = make("mlp:5-7-3:gelu", 8);
    float x[8 * 5];
    int32_t y[8];
    for (int i = 0; i < 40; i++)
        x[i] = sinf((float)i);
    for (int i = 0; i < 8; i++)
        y[i] = i % 3;
    size_t n;
    float *g = weft_model_grads(m, &n), *full = malloc(n * 4);
    weft_model_zero_grad(m);
    weft_model_forward(m, x, y, 8, 1, NULL);
    weft_model_backward(m);
    memcpy(full, g, n * 4);
    weft_model_zero_grad(m);
    weft_model_forward(m, x, y, 4, 1, NULL);
    weft_model_backward(m);
    weft_model_forward(m, x + 20, y + 4, 4, 1, NULL);
    weft_model_backward(m);
    weft_scale(g, n, 0.5f);
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= fabsf(g[i] - full[i]) <= 1e-6f + 1e-5f * fabsf(full[i]);
    CHECK(ok);
    free(full);
    weft_model_destroy(m);
}

/* bf16 matmul operands: the loss moves by well under 1%, and the model
 * still trains. */
TEST(bf16)
{
    weft_model *m = make("gpt:vocab=40,ctx=16,layers=2,heads=2,dim=32", 6);
    int32_t tok[2 * 16], nxt[2 * 16];
    for (int i = 0; i < 32; i++) {
        tok[i] = (i * 13) % 40;
        nxt[i] = (i * 5 + 1) % 40;
    }
    float l32, l16;
    weft_model_forward(m, tok, nxt, 2, 16, &l32);
    CHECK(weft_model_set_precision(m, WEFT_PREC_BF16) == 0);
    CHECK(weft_model_precision(m) == WEFT_PREC_BF16);
    weft_model_forward(m, tok, nxt, 2, 16, &l16);
    CHECKF(fabsf(l16 - l32) < 0.01f * l32 && l16 != l32, "bf16 loss %g vs fp32 %g", l16, l32);
    weft_model_destroy(m);
}

/* The gradient hook: every tensor reported once, from the end of the
 * table to its start, and a tensor's gradient as seen in the hook is its
 * final value. */
typedef struct {
    weft_model *m;
    float *snap;
    int calls, seen[64], next_end, order_ok;
} hook_log;

static void on_ready(void *arg, int first, int count)
{
    hook_log *h = arg;
    size_t n;
    float *g = weft_model_grads(h->m, &n);
    weft_tensor_info a, b;
    weft_model_tensor_info(h->m, first, &a);
    weft_model_tensor_info(h->m, first + count - 1, &b);
    memcpy(h->snap + a.offset, g + a.offset, (b.offset + b.numel - a.offset) * sizeof(float));
    h->order_ok &= first + count == h->next_end;
    h->next_end = first;
    for (int i = first; i < first + count && i < 64; i++)
        h->seen[i]++;
    h->calls++;
}

static void hook(const char *spec, const void *x, const int32_t *y, int B, int T)
{
    weft_model *m = make(spec, 3);
    size_t n;
    float *g = weft_model_grads(m, &n);
    hook_log h = { m, calloc(n, sizeof(float)), 0, { 0 }, weft_model_tensor_count(m), 1 };
    CHECK(weft_model_set_grad_hook(m, on_ready, &h) == 0);
    weft_model_forward(m, x, y, B, T, NULL);
    CHECK(weft_model_backward(m) == 0);
    int once = 1;
    for (int i = 0; i < weft_model_tensor_count(m); i++)
        once &= h.seen[i] == 1;
    CHECKF(once && h.order_ok && h.next_end == 0, "%s: hook coverage/order", spec);
    CHECKF(memcmp(h.snap, g, n * sizeof(float)) == 0, "%s: a gradient changed after its hook", spec);
    CHECK(weft_model_set_grad_hook(m, NULL, NULL) == 0);
    int before = h.calls;
    weft_model_forward(m, x, y, B, T, NULL);
    weft_model_backward(m);
    CHECK(h.calls == before);
    free(h.snap);
    weft_model_destroy(m);
}

TEST(resume_sgd) { resume(WEFT_OPTIM_SGD); }
TEST(resume_adamw) { resume(WEFT_OPTIM_ADAMW); }

TEST(hook_mlp)
{
    float x[3 * 5];
    int32_t y[3] = { 0, 1, 2 };
    for (int i = 0; i < 15; i++)
        x[i] = cosf((float)i);
    hook("mlp:5-8-8-3", x, y, 3, 1);
}

TEST(hook_gpt)
{
    int32_t tok[2 * 6], nxt[2 * 6];
    for (int i = 0; i < 12; i++) {
        tok[i] = i % 9;
        nxt[i] = (i * 4) % 9;
    }
    hook("gpt:vocab=9,ctx=8,layers=3,heads=2,dim=8", tok, nxt, 2, 6);
}
