/* Tensor parallelism: a GPT (heads split, the 4C hidden split, vocabulary
 * split with padding when tp does not divide it) and an MLP (column/row
 * pairs, a last odd layer whole) at tp = 2, 3, 4 give the whole model's
 * loss and gradients to fp32 tolerance, from the whole model's weights;
 * replicated tensors stay bit for bit the same on every rank; the layers
 * call exactly the collectives Megatron's do (per transformer block 2
 * forward and 2 backward, the cross-entropy's 2, the vocabulary-parallel
 * embedding's and head's 1 each); split backward gives the same; and
 * pipelines of tensor-parallel stages (pp = 2 x tp = 2) do too. With
 * sequence parallelism the same, each all-reduce of a block replaced by an
 * all-gather and a reduce-scatter (and the LayerNorms' gradients summed
 * once at the announcing backward). */
#include "mp.h"

#include <math.h>
#include <stdlib.h>

TEST_TIMEOUT(300);

typedef struct {
    const char *model;
    int pp;          /* > 1: pipelines of tp = size / pp stages */
    int split;       /* split backward (input, then weight) */
    int batch;
    int seq;         /* sequence parallelism */
} tp_case;

static void batch_of(const weft_model_config *c, int B, float **x, int32_t **tok, int32_t **y)
{
    weft_rng r;
    weft_rng_seed(&r, 3);
    int gpt = c->type == WEFT_MODEL_GPT, T = gpt ? c->ctx : 1;
    *x = NULL;
    *tok = NULL;
    *y = malloc(sizeof(int32_t) * (size_t)B * T);
    if (gpt) {
        *tok = malloc(sizeof(int32_t) * (size_t)B * T);
        for (int i = 0; i < B * T; i++) {
            (*tok)[i] = (int32_t)weft_rng_below(&r, (uint64_t)c->vocab);
            (*y)[i] = i % 7 == 3 ? -1 : (int32_t)weft_rng_below(&r, (uint64_t)c->vocab);
        }
    } else {
        *x = malloc(sizeof(float) * (size_t)B * c->widths[0]);
        for (int i = 0; i < B * c->widths[0]; i++)
            (*x)[i] = 2.0f * weft_rng_uniform(&r) - 1.0f;
        for (int i = 0; i < B; i++)
            (*y)[i] = (int32_t)weft_rng_below(&r, (uint64_t)c->widths[c->n_widths - 1]);
    }
}

/* Largest relative difference of our tensors' parts from the whole's. */
static double worst_diff(weft_model *part, weft_model *whole, int grads, char *which, size_t len)
{
    double worst = 0;
    const float *P = grads ? weft_model_grads(part, NULL) : weft_model_params(part, NULL);
    const float *W = grads ? weft_model_grads(whole, NULL) : weft_model_params(whole, NULL);
    for (int i = 0; i < weft_model_tensor_count(part); i++) {
        weft_tensor_info a, b;
        weft_model_tensor_info(part, i, &a);
        int j = weft_model_tensor_find(whole, a.name);
        if (j < 0 || weft_model_tensor_info(whole, j, &b) || a.whole_numel != b.numel)
            return INFINITY;
        double num = 0, den = 0;
        for (size_t e = 0; e < a.numel; e++) {
            size_t at;
            int pad = weft_model_tensor_whole_elem(part, i, e, &at);
            double w = pad ? 0 : W[b.offset + at], v = P[a.offset + e];
            num += (v - w) * (v - w);
            den += w * w;
        }
        double d = sqrt(num / (den > 0 ? den : 1));
        if (d > worst) {
            worst = d;
            snprintf(which, len, "%s", a.name);
        }
    }
    return worst;
}

/* A hash of every tensor that is the same on every rank of the group. */
static uint64_t replicated_hash(weft_model *m)
{
    uint64_t h = 1469598103934665603ull;
    const float *P = weft_model_params(m, NULL), *G = weft_model_grads(m, NULL);
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info t;
        weft_model_tensor_info(m, i, &t);
        if (t.numel != t.whole_numel)
            continue;
        const unsigned char *p = (const unsigned char *)(P + t.offset);
        const unsigned char *g = (const unsigned char *)(G + t.offset);
        for (size_t k = 0; k < t.numel * 4; k++)
            h = (h ^ p[k] ^ ((uint64_t)g[k] << 8)) * 1099511628211ull;
    }
    return h;
}

static void one_tp(weft_comm *c, void *arg)
{
    const tp_case *tc = arg;
    int r = weft_comm_rank(c), n = weft_comm_size(c);
    weft_model_config cfg;
    CHECK(weft_model_config_parse(tc->model, &cfg) == 0);
    int gpt = cfg.type == WEFT_MODEL_GPT, nb = weft_model_block_count(&cfg);
    weft_model *whole = NULL, *m = NULL;
    CHECK(weft_model_create(&whole, &cfg, 11) == 0);
    weft_block_range all = { 0, nb };
    unsigned flags = (tc->split ? WEFT_STAGE_SPLIT_BACKWARD : 0) |
                     (tc->seq ? WEFT_STAGE_SEQUENCE_PARALLEL : 0);
    int rc = weft_model_create_tp(&m, &cfg, 11, &all, 1, flags, c, 0, 0);
    CHECKF(rc == 0, "rank %d: create_tp %s at tp=%d: %s", r, tc->model, n, weft_strerror(rc));
    if (!m || !whole)
        return;
    char which[64] = "";
    double d = worst_diff(m, whole, 0, which, sizeof which);
    CHECKF(d == 0.0, "rank %d tp=%d: the part's weights differ from the whole's (%s, %.3g)", r, n,
           which, d);
    float *x;
    int32_t *tok, *y;
    int B = tc->batch, T = gpt ? cfg.ctx : 1;
    batch_of(&cfg, B, &x, &tok, &y);
    const void *in = gpt ? (const void *)tok : (const void *)x;
    float lw = 0, lp = 0;
    CHECK(weft_model_forward(whole, in, y, B, T, &lw) == 0 && weft_model_backward(whole) == 0);
    uint64_t calls0, calls1;
    weft_model_tp_stats(m, &calls0, NULL);
    CHECK(weft_model_chunk_forward(m, 0, 0, in, y, B, T, &lp) == 0);
    if (tc->split) {
        CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1, WEFT_BACKWARD_INPUT, 1) == 0);
        CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1, WEFT_BACKWARD_WEIGHT, 1) == 0);
    } else {
        CHECK(weft_model_chunk_backward(m, 0, 0, NULL, 1, WEFT_BACKWARD_ALL, 1) == 0);
    }
    weft_model_tp_stats(m, &calls1, NULL);
    CHECKF(fabsf(lp - lw) <= 1e-5f * fabsf(lw), "rank %d tp=%d: loss %.9g, whole %.9g", r, n,
           (double)lp, (double)lw);
    d = worst_diff(m, whole, 1, which, sizeof which);
    CHECKF(d < 2e-5, "rank %d tp=%d %s: gradients differ by %.3g (%s)", r, n, tc->model, d, which);
    /* the collectives of one forward and backward */
    uint64_t want;
    if (gpt && tc->seq) {
        /* forward: embedding, 4 a block, the head's gather, the loss's 2;
         * backward: the head, 4 a block, the embedding's gather, the
         * LayerNorms' sums (2 a block, the head's 1) */
        uint64_t L = (uint64_t)cfg.n_layer;
        want = (1 + 4 * L + 1 + 2) + (1 + 4 * L + 1 + 2 * L + 1);
    } else if (gpt) {
        want = 1 + 4 * (uint64_t)cfg.n_layer + 2 + 1; /* embedding, blocks, loss, head */
    } else {
        int L = cfg.n_widths - 1;
        want = 0;
        for (int l = 0; l < L; l++)
            want += l % 2 == 1 ? 1 : l + 1 < L && l > 0 ? 1 : 0; /* row forward, column backward */
    }
    CHECKF(calls1 - calls0 == want, "rank %d %s: %llu collectives, expected %llu", r, tc->model,
           (unsigned long long)(calls1 - calls0), (unsigned long long)want);
    /* replicated tensors: one value on every rank */
    uint64_t h = replicated_hash(m), all_h[8] = { 0 };
    CHECK(weft_allgather(c, &h, all_h, 1, WEFT_I64) == 0);
    int same = 1;
    for (int k = 0; k < n; k++)
        same &= all_h[k] == h;
    CHECKF(same, "rank %d: replicated tensors differ between ranks", r);
    int ok = weft_model_count_correct(m, y), okw = weft_model_count_correct(whole, y);
    CHECKF(ok == okw, "rank %d: %d correct, whole model %d", r, ok, okw);
    free(x);
    free(tok);
    free(y);
    weft_model_destroy(m);
    weft_model_destroy(whole);
}

/* Pipelines of tp-rank stages: job rank = stage * tp + tensor rank. */
static void pipe_of_tp(weft_comm *c, void *arg)
{
    const tp_case *tc = arg;
    int r = weft_comm_rank(c), n = weft_comm_size(c), pp = tc->pp, tp = n / pp;
    int stage = r / tp;
    weft_comm *tpc = NULL, *ppc = NULL;
    CHECK(weft_comm_split(c, stage, r % tp, &tpc) == 0);
    CHECK(weft_comm_split(c, r % tp, stage, &ppc) == 0);
    weft_model_config cfg;
    weft_model_config_parse(tc->model, &cfg);
    int gpt = cfg.type == WEFT_MODEL_GPT, nb = weft_model_block_count(&cfg);
    weft_block_range ch = { stage * nb / pp, (stage + 1) * nb / pp - stage * nb / pp };
    weft_model *m = NULL, *whole = NULL;
    CHECK(weft_model_create(&whole, &cfg, 11) == 0);
    CHECK(weft_model_create_tp(&m, &cfg, 11, &ch, 1, tc->seq ? WEFT_STAGE_SEQUENCE_PARALLEL : 0,
                               tpc, 0, 0) == 0);
    weft_pipe *p = NULL;
    CHECK(weft_pipe_create(&p, ppc, m, "1f1b", 3) == 0);
    if (!m || !p || !whole)
        return;
    float *x;
    int32_t *tok, *y;
    int B = tc->batch, T = gpt ? cfg.ctx : 1;
    batch_of(&cfg, B, &x, &tok, &y);
    const void *in = gpt ? (const void *)tok : (const void *)x;
    weft_pipe_stats st;
    int rc = weft_pipe_step(p, in, y, B, T, &st);
    CHECKF(rc == 0, "rank %d: step: %s: %s", r, weft_strerror(rc), weft_pipe_error(p));
    /* the whole model over the same 3 micro-batches */
    double lw = 0;
    for (int k = 0; k < 3; k++) {
        int lo = k * B / 3, nn = (k + 1) * B / 3 - lo;
        float l;
        size_t w = gpt ? (size_t)T : (size_t)cfg.widths[0];
        const void *mi = gpt ? (const void *)(tok + (size_t)lo * w) : (const void *)(x + (size_t)lo * w);
        weft_model_chunk_forward(whole, 0, 0, mi, y + (size_t)lo * T, nn, T, &l);
        weft_model_chunk_backward(whole, 0, 0, NULL, (float)nn / (float)B, WEFT_BACKWARD_ALL, 1);
        lw += (double)l * nn / B;
    }
    if (stage == pp - 1)
        CHECKF(fabs(st.loss - lw) <= 1e-5 * fabs(lw), "rank %d: loss %.9g, whole %.9g", r,
               (double)st.loss, lw);
    char which[64] = "";
    double d = worst_diff(m, whole, 1, which, sizeof which);
    CHECKF(d < 2e-5, "rank %d (stage %d, tp rank %d): gradients differ by %.3g (%s)", r, stage,
           r % tp, d, which);
    free(x);
    free(tok);
    free(y);
    weft_pipe_destroy(p);
    weft_model_destroy(m);
    weft_model_destroy(whole);
    weft_comm_destroy(tpc);
    weft_comm_destroy(ppc);
}

/* heads 6: tp 2 and 3; vocabulary 13 pads at both */
static const char *const GPT6 = "gpt:vocab=13,ctx=8,layers=2,heads=6,dim=12";
static const char *const GPT4 = "gpt:vocab=257,ctx=8,layers=2,heads=4,dim=16";
static const char *const MLP5 = "mlp:12-24-24-24-24-5:gelu";

TEST(gpt)
{
    tp_case a = { GPT6, 1, 0, 5, 0 }, b = { GPT4, 1, 0, 3, 0 };
    CHECK(mp_run(2, 30, one_tp, &a) == 0);
    CHECK(mp_run(3, 30, one_tp, &a) == 0);
    CHECK(mp_run(2, 30, one_tp, &b) == 0); /* vocabulary 257 at tp 2 */
    CHECK(mp_run(4, 30, one_tp, &b) == 0);
}

TEST(mlp)
{
    tp_case a = { MLP5, 1, 0, 7, 0 };
    CHECK(mp_run(2, 30, one_tp, &a) == 0);
    CHECK(mp_run(3, 30, one_tp, &a) == 0);
    CHECK(mp_run(4, 30, one_tp, &a) == 0);
}

TEST(split_backward)
{
    tp_case a = { GPT6, 1, 1, 4, 0 }, b = { MLP5, 1, 1, 6, 0 };
    CHECK(mp_run(2, 30, one_tp, &a) == 0);
    CHECK(mp_run(3, 30, one_tp, &b) == 0);
}

TEST(pipelines_of_tp_stages)
{
    tp_case a = { GPT4, 2, 0, 6, 0 }, b = { MLP5, 2, 0, 6, 0 }, c = { GPT4, 2, 0, 6, 1 };
    CHECK(mp_run(4, 30, pipe_of_tp, &a) == 0);
    CHECK(mp_run(4, 30, pipe_of_tp, &b) == 0);
    CHECK(mp_run(4, 30, pipe_of_tp, &c) == 0); /* and sequence parallel */
}

TEST(sequence_parallel)
{
    /* rows 5 x 8 = 40: split in 2 and 4; GPT6's 3 x 8 in 2 and 3 */
    tp_case a = { GPT4, 1, 0, 5, 1 }, b = { GPT6, 1, 0, 3, 1 }, c = { GPT6, 1, 1, 3, 1 };
    CHECK(mp_run(2, 30, one_tp, &a) == 0);
    CHECK(mp_run(4, 30, one_tp, &a) == 0);
    CHECK(mp_run(3, 30, one_tp, &b) == 0);
    CHECK(mp_run(2, 30, one_tp, &c) == 0); /* with split backward */
}

TEST(refused)
{
    weft_model_config cfg;
    weft_model *m = NULL;
    weft_block_range all = { 0, 4 };
    weft_model_config_parse(GPT6, &cfg);
    CHECK(weft_model_create_tp(&m, &cfg, 1, &all, 1, 0, NULL, 4, 0) == WEFT_EINVAL); /* 6 heads */
    CHECK(weft_model_create_tp(&m, &cfg, 1, &all, 1, 0, NULL, 2, 2) == WEFT_EINVAL);
    CHECK(weft_model_create_tp(&m, &cfg, 1, &all, 1, 0, NULL, 3, 1) == 0);
    int32_t tok[8] = { 0 };
    CHECK(weft_model_generate(m, tok, 1, 4, 0, 0, NULL) == WEFT_EINVAL);
    weft_model_destroy(m);
    weft_model_config_parse("mlp:12-10-24-5", &cfg); /* 10 hidden: not split in 4 */
    weft_block_range three = { 0, 3 };
    CHECK(weft_model_create_tp(&m, &cfg, 1, &three, 1, 0, NULL, 4, 0) == WEFT_EINVAL);
}
