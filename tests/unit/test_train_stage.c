/* A model cut into stages gives the whole model's weights and gradients:
 * stages built from block ranges (and interleaved chunk sets) start from
 * the same weights by name; running micro-batches through them in one
 * process, activations and gradients handed on by hand, sums the same
 * gradients as the whole model (bit for bit against the same
 * micro-batches but for the tied embedding, whose halves add in another
 * order; to fp32 rounding against one batch), split backward
 * (input, then weight) equals the whole backward, the hook hears each
 * tensor once and never the tied copy, and bad arguments are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "weft.h"

#define MAXSTAGE 6
#define MAXMB 5

static const char *const MLP = "mlp:12-16-16-16-5:gelu";      /* 4 blocks */
static const char *const GPT = "gpt:vocab=11,ctx=8,layers=3,heads=2,dim=8"; /* 5 blocks */

typedef struct {
    int is_gpt, B, T, x_dim, rows;
    float *x;
    int32_t *tok, *y;
} batch;

static void make_batch(batch *b, const weft_model_config *c, int B, uint64_t seed)
{
    weft_rng r;
    weft_rng_seed(&r, seed);
    memset(b, 0, sizeof *b);
    b->is_gpt = c->type == WEFT_MODEL_GPT;
    b->B = B;
    b->T = b->is_gpt ? c->ctx : 1;
    b->rows = B * b->T;
    b->x_dim = b->is_gpt ? b->T : c->widths[0];
    b->y = malloc(sizeof(int32_t) * (size_t)b->rows);
    if (b->is_gpt) {
        b->tok = malloc(sizeof(int32_t) * (size_t)b->rows);
        for (int i = 0; i < b->rows; i++) {
            b->tok[i] = (int32_t)weft_rng_below(&r, (uint64_t)c->vocab);
            b->y[i] = (int32_t)weft_rng_below(&r, (uint64_t)c->vocab);
        }
    } else {
        b->x = malloc(sizeof(float) * (size_t)B * b->x_dim);
        for (int i = 0; i < B * b->x_dim; i++)
            b->x[i] = 2.0f * weft_rng_uniform(&r) - 1.0f;
        for (int i = 0; i < B; i++)
            b->y[i] = (int32_t)weft_rng_below(&r, (uint64_t)c->widths[c->n_widths - 1]);
    }
}

static void free_batch(batch *b)
{
    free(b->x);
    free(b->tok);
    free(b->y);
}

static const void *mb_in(const batch *b, int lo)
{
    return b->is_gpt ? (const void *)(b->tok + (size_t)lo * b->T)
                     : (const void *)(b->x + (size_t)lo * b->x_dim);
}

static const int32_t *mb_y(const batch *b, int lo)
{
    return b->y + (size_t)lo * b->T;
}

/* Micro-batch k of m over B rows. */
static void mb_range(int B, int m, int k, int *lo, int *n)
{
    *lo = k * B / m;
    *n = (k + 1) * B / m - *lo;
}

/* Runs the micro-batches through stages[0..ns) (stage s holds chunk k of
 * the global chunk order at stages[s % ns] chunk s / ns), all forwards
 * then all backwards; split: input parts of every micro-batch, then weight
 * parts. Returns the summed weighted loss. */
static float run_pipeline(weft_model **st, int ns, int nchunks, const batch *b, int m, int split)
{
    float loss = 0;
    const float *act[MAXSTAGE * 2][MAXMB];
    for (int k = 0; k < m; k++) {
        int lo, n;
        mb_range(b->B, m, k, &lo, &n);
        const void *in = mb_in(b, lo);
        for (int c = 0; c < nchunks; c++) {
            float l = 0;
            int rc = weft_model_chunk_forward(st[c % ns], c / ns, k, in, mb_y(b, lo), n, b->T, &l);
            CHECKF(rc == 0, "forward chunk %d mb %d: %d", c, k, rc);
            act[c][k] = weft_model_chunk_output(st[c % ns], c / ns, k);
            in = act[c][k];
            if (c == nchunks - 1)
                loss += l * (float)n / (float)b->B;
        }
    }
    for (int pass = 0; pass < (split ? 2 : 1); pass++)
        for (int k = 0; k < m; k++) {
            int lo, n;
            mb_range(b->B, m, k, &lo, &n);
            const float *g = NULL;
            for (int c = nchunks - 1; c >= 0; c--) {
                int part = !split ? WEFT_BACKWARD_ALL : pass == 0 ? WEFT_BACKWARD_INPUT
                                                                  : WEFT_BACKWARD_WEIGHT;
                int rc = weft_model_chunk_backward(st[c % ns], c / ns, k, g, (float)n / (float)b->B,
                                                   part, k == m - 1);
                CHECKF(rc == 0, "backward chunk %d mb %d part %d: %d", c, k, part, rc);
                g = weft_model_chunk_input_grad(st[c % ns], c / ns, k);
            }
        }
    return loss;
}

/* The tied copy's gradient is the caller's to add: do it as a pipeline
 * would, between the first and the last stage. */
static void sum_tied(weft_model **st, int ns)
{
    for (int s = 0; s < ns; s++) {
        int t = weft_model_tied_tensor(st[s]);
        if (t < 0)
            continue;
        for (int o = s + 1; o < ns; o++) {
            int u = weft_model_tied_tensor(st[o]);
            if (u < 0)
                continue;
            weft_tensor_info a, c;
            weft_model_tensor_info(st[s], t, &a);
            weft_model_tensor_info(st[o], u, &c);
            float *ga = weft_model_grads(st[s], NULL) + a.offset;
            float *gc = weft_model_grads(st[o], NULL) + c.offset;
            for (size_t i = 0; i < a.numel; i++)
                ga[i] = gc[i] = ga[i] + gc[i];
        }
    }
}

/* Every stage tensor against the whole model's of that name: returns the
 * largest relative difference (of the buffer: params or grads). */
static double compare(weft_model *whole, weft_model **st, int ns, int grads, int *missing)
{
    double worst = 0;
    int seen = 0;
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < weft_model_tensor_count(st[s]); i++) {
            weft_tensor_info t, w;
            weft_model_tensor_info(st[s], i, &t);
            int j = weft_model_tensor_find(whole, t.name);
            if (j < 0 || weft_model_tensor_info(whole, j, &w) || w.numel != t.numel) {
                (*missing)++;
                continue;
            }
            seen += i != weft_model_tied_tensor(st[s]);
            const float *a = (grads ? weft_model_grads(st[s], NULL) : weft_model_params(st[s], NULL)) + t.offset;
            const float *c = (grads ? weft_model_grads(whole, NULL) : weft_model_params(whole, NULL)) + w.offset;
            double num = 0, den = 0;
            for (size_t k = 0; k < t.numel; k++) {
                num += (a[k] - c[k]) * (double)(a[k] - c[k]);
                den += c[k] * (double)c[k];
            }
            double d = den > 0 ? sqrt(num / den) : sqrt(num);
            worst = d > worst ? d : worst;
        }
    /* every tensor of the whole model held once, besides tied copies */
    if (seen != weft_model_tensor_count(whole) - (ns > 1 && weft_model_tied_tensor(st[0]) >= 0))
        (*missing)++;
    return worst;
}

typedef struct {
    int counts[256];
    int calls;
} heard;

static void on_ready(void *arg, int first, int count)
{
    heard *h = arg;
    h->calls++;
    for (int i = first; i < first + count && i < 256; i++)
        h->counts[i]++;
}

/* One layout: cuts (ns stages, nchunks chunk sizes in block order; chunk
 * c goes to stage c % ns), m micro-batches, split or not. */
static void check_layout(const char *spec, const int *sizes, int nchunks, int ns, int m, int split)
{
    weft_model_config cfg;
    CHECK(weft_model_config_parse(spec, &cfg) == 0);
    weft_model *whole = NULL, *st[MAXSTAGE] = { 0 };
    CHECK(weft_model_create(&whole, &cfg, 42) == 0);
    weft_block_range ch[MAXSTAGE][WEFT_STAGE_MAX_CHUNKS];
    int nch[MAXSTAGE] = { 0 }, first = 0;
    for (int c = 0; c < nchunks; c++) {
        ch[c % ns][nch[c % ns]++] = (weft_block_range){ first, sizes[c] };
        first += sizes[c];
    }
    CHECK(first == weft_model_block_count(&cfg));
    heard h[MAXSTAGE];
    memset(h, 0, sizeof h);
    for (int s = 0; s < ns; s++) {
        CHECK(weft_model_create_stage(&st[s], &cfg, 42, ch[s], nch[s],
                                      split ? WEFT_STAGE_SPLIT_BACKWARD : 0) == 0);
        if (!st[s])
            return;
        weft_model_set_grad_hook(st[s], on_ready, &h[s]);
    }
    int missing = 0;
    CHECKF(compare(whole, st, ns, 0, &missing) == 0.0 && missing == 0,
           "%s: stage weights differ from the whole model's (missing %d)", spec, missing);

    batch b;
    make_batch(&b, &cfg, 10, 7);
    /* the whole model over the same micro-batches: bit for bit */
    weft_model *one[1] = { whole };
    float lw = run_pipeline(one, 1, 1, &b, m, 0);
    float lp = run_pipeline(st, ns, nchunks, &b, m, split);
    sum_tied(st, ns);
    /* the tied embedding sums its two halves in another order */
    double d = compare(whole, st, ns, 1, &missing), tol = weft_model_tied_tensor(st[0]) >= 0 ? 1e-6 : 0;
    CHECKF(d <= tol && missing == 0 && lw == lp,
           "%s %d stages %d chunks m=%d split=%d: grads differ by %.3g, loss %.9g vs %.9g",
           spec, ns, nchunks, m, split, d, (double)lp, (double)lw);
    /* and one batch at once: to fp32 rounding */
    weft_model_zero_grad(whole);
    float l1 = 0;
    CHECK(weft_model_forward(whole, mb_in(&b, 0), b.y, b.B, b.T, &l1) == 0 &&
          weft_model_backward(whole) == 0);
    d = compare(whole, st, ns, 1, &missing);
    CHECKF(d < 1e-5 && fabsf(l1 - lp) <= 1e-5f * fabsf(l1), "%s: against one batch %.3g", spec, d);
    for (int s = 0; s < ns; s++) {
        int tied = weft_model_tied_tensor(st[s]), once = 1;
        for (int i = 0; i < weft_model_tensor_count(st[s]); i++)
            once &= h[s].counts[i] == (i == tied ? 0 : 1);
        CHECKF(once, "%s stage %d: the hook heard a tensor other than once", spec, s);
    }
    free_batch(&b);
    for (int s = 0; s < ns; s++)
        weft_model_destroy(st[s]);
    weft_model_destroy(whole);
}

TEST(mlp_stages)
{
    const int two[] = { 2, 2 }, three[] = { 1, 2, 1 }, four[] = { 1, 1, 1, 1 }, one[] = { 4 };
    check_layout(MLP, one, 1, 1, 3, 0);
    check_layout(MLP, two, 2, 2, 1, 0);
    check_layout(MLP, two, 2, 2, 4, 0);
    check_layout(MLP, three, 3, 3, 5, 0);
    check_layout(MLP, four, 4, 4, 3, 0);
    check_layout(MLP, four, 4, 2, 2, 0); /* interleaved: 2 chunks per stage */
}

TEST(gpt_stages)
{
    const int two[] = { 2, 3 }, three[] = { 1, 2, 2 }, five[] = { 1, 1, 1, 1, 1 }, emb[] = { 1, 4 },
              head[] = { 4, 1 };
    check_layout(GPT, two, 2, 2, 1, 0);
    check_layout(GPT, two, 2, 2, 3, 0);
    check_layout(GPT, three, 3, 3, 4, 0);
    check_layout(GPT, five, 5, 5, 2, 0);
    check_layout(GPT, emb, 2, 2, 2, 0);
    check_layout(GPT, head, 2, 2, 2, 0);
    const int inter[] = { 1, 1, 2, 1 };
    check_layout(GPT, inter, 4, 2, 3, 0); /* interleaved: 2 chunks per stage */
    check_layout(GPT, inter, 4, 2, 3, 1);
}

TEST(split_backward)
{
    const int m2[] = { 2, 2 }, g3[] = { 1, 2, 2 }, g5[] = { 1, 1, 1, 1, 1 }, one[] = { 5 };
    check_layout(MLP, m2, 2, 2, 3, 1);
    check_layout(GPT, g3, 3, 3, 3, 1);
    check_layout(GPT, g5, 5, 5, 2, 1);
    check_layout(GPT, one, 1, 1, 2, 1);
}

TEST(tied_copy)
{
    weft_model_config cfg;
    weft_model_config_parse(GPT, &cfg);
    weft_block_range a = { 0, 2 }, b = { 2, 3 }, mid = { 1, 3 };
    weft_model *s0, *s1, *s2;
    CHECK(weft_model_create_stage(&s0, &cfg, 1, &a, 1, 0) == 0);
    CHECK(weft_model_create_stage(&s1, &cfg, 1, &b, 1, 0) == 0);
    CHECK(weft_model_create_stage(&s2, &cfg, 1, &mid, 1, 0) == 0);
    weft_tensor_info t;
    /* the last stage's copy comes first in its buffers */
    CHECK(weft_model_tied_tensor(s1) == 0 && weft_model_tensor_info(s1, 0, &t) == 0 &&
          strcmp(t.name, "tok_emb.weight") == 0 && t.offset == 0);
    CHECK(weft_model_tied_tensor(s0) == weft_model_tensor_find(s0, "tok_emb.weight"));
    CHECK(weft_model_tied_tensor(s2) == -1 && weft_model_tensor_find(s2, "tok_emb.weight") < 0);
    weft_model *whole;
    CHECK(weft_model_create(&whole, &cfg, 1) == 0 && weft_model_tied_tensor(whole) == -1);
    size_t in, out;
    CHECK(weft_model_chunk_io(s1, 0, 3, 8, &in, &out) == 0 && in == 3 * 8 * 8 && out == 0);
    CHECK(weft_model_chunk_io(s0, 0, 3, 8, &in, &out) == 0 && in == 0 && out == 3 * 8 * 8);
    weft_model_destroy(s0);
    weft_model_destroy(s1);
    weft_model_destroy(s2);
    weft_model_destroy(whole);
}

TEST(bad_arguments)
{
    weft_model_config cfg;
    weft_model_config_parse(MLP, &cfg);
    weft_model *m = NULL;
    weft_block_range over = { 2, 3 }, none = { 0, 0 }, ok = { 1, 2 };
    weft_block_range unordered[2] = { { 2, 1 }, { 0, 1 } };
    CHECK(weft_model_block_count(&cfg) == 4);
    CHECK(weft_model_create_stage(&m, &cfg, 1, &over, 1, 0) == WEFT_EINVAL && !m);
    CHECK(weft_model_create_stage(&m, &cfg, 1, &none, 1, 0) == WEFT_EINVAL);
    CHECK(weft_model_create_stage(&m, &cfg, 1, unordered, 2, 0) == WEFT_EINVAL);
    CHECK(weft_model_create_stage(&m, &cfg, 1, &ok, 1, 0x80) == WEFT_EINVAL);
    CHECK(weft_model_create_stage(&m, &cfg, 1, NULL, 1, 0) == WEFT_EINVAL);
    CHECK(weft_model_create_stage(&m, &cfg, 1, &ok, 1, 0) == 0);
    float x[2 * 16] = { 0 }, g[2 * 16] = { 0 };
    /* a middle chunk: no whole-model forward, backward needs its forward and a dout */
    CHECK(weft_model_forward(m, x, NULL, 2, 1, NULL) == WEFT_EINVAL);
    CHECK(weft_model_chunk_backward(m, 0, 0, g, 1, WEFT_BACKWARD_ALL, 1) == WEFT_EINVAL);
    CHECK(weft_model_chunk_forward(m, 1, 0, x, NULL, 2, 1, NULL) == WEFT_EINVAL);
    CHECK(weft_model_chunk_forward(m, 0, 0, x, NULL, 2, 1, NULL) == 0);
    CHECK(weft_model_chunk_output(m, 0, 0) != NULL);
    CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1, WEFT_BACKWARD_ALL, 1) == WEFT_EINVAL);
    CHECK(weft_model_chunk_backward(m, 0, 0, g, 1, WEFT_BACKWARD_INPUT, 1) == WEFT_EINVAL); /* not split */
    CHECK(weft_model_chunk_backward(m, 0, 0, g, 1, WEFT_BACKWARD_ALL, 1) == 0);
    CHECK(weft_model_chunk_backward(m, 0, 0, g, 1, WEFT_BACKWARD_ALL, 1) == WEFT_EINVAL); /* twice */
    CHECK(weft_model_chunk_input_grad(m, 0, 0) != NULL);
    CHECK(weft_model_chunk_input_grad(m, 0, 9) == NULL);
    CHECK(weft_model_grads_ready(m, 0, 99) == WEFT_EINVAL);
    weft_model_destroy(m);
}
