/* GPT: token + position embedding, n_layer pre-LayerNorm blocks (causal
 * self-attention, GELU MLP of width 4C, residuals), a final LayerNorm and
 * logits through the token embedding (tied). With experts the MLP is a
 * mixture of GELU experts without biases (moe.c): a router, each expert's
 * fc [F, D] and proj (stored hidden-major, [F, D], so that tensor
 * parallelism cuts both by the same rows). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/attention_cp.h"
#include "train/attention_prec.h"
#include "train/model.h"
#include "train/moe_block.h"

/* With experts the four MLP tensors give way to the router's and the
 * experts' (T_ROUTER.., in the table from T_FCW's place). */
enum { T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_PROJW, T_PROJB, T_LN2W, T_LN2B,
       T_FCW, T_FCB, T_FCPW, T_FCPB, T_PER_LAYER,
       T_ROUTER = T_PER_LAYER, T_EFC, T_EPROJ, T_EBIAS };

/* In bf16 mode ln1, atty, ln2, fcg and lnf — read only as matmul inputs —
 * share one fp32 buffer and are kept as bf16 in the lin_save records. */
/* Under sequence parallelism the residual stream and the LayerNorms hold
 * this rank's rows only (rows/tp); ln1/ln2/lnf are then the gathered
 * whole rows the column-parallel layers read, ln1l/ln2l/lnfl this rank's
 * LayerNorm output (otherwise the same buffer). */
typedef struct {
    float *ln1, *ln1l, *ln1m, *ln1r, *qkv, *att, *atty, *r1;
    float *ln2, *ln2l, *ln2m, *ln2r, *fch, *fcg, *r2;
    float *dfcp, *dfc, *dproj, *dqkv;   /* split backward: each linear's dout */
    lin_save qkv_s, proj_s, fc_s, fcp_s;
    moe_acts mo;
} gpt_layer;

/* x0: the embedding's output (block 0) or a later chunk's input (copied).
 * The experts' book first (moe_block.h). */
typedef struct {
    moe_book moe;
    float *x0, *lnf, *lnfl, *lnfm, *lnfr;
    float *full;        /* sequence parallel: whole rows before a reduce-scatter or after a gather */
    float *dres, *dbr, *dqkv, *datt, *dfc;
    float *datt_y;      /* the attention output's gradient (width C/tp) */
    float *dmo;         /* experts under --sp: [2, BT, C] (experts_backward) */
    lin_save logit_s;
    moe_scratch ms;
    gpt_layer l[];
} gpt_acts;

/* Tensors per block. */
static int per_layer(const weft_model_config *c)
{
    return c->experts > 0 ? T_FCW + 3 + (c->moe_bias ? 1 : 0) : T_PER_LAYER;
}

/* tensor index of per-layer parameter j in layer l */
static int tix(const weft_model_config *c, int l, int j)
{
    return 2 + l * per_layer(c) + (j >= T_ROUTER ? T_FCW + j - T_ROUTER : j);
}

int train_gpt_tensors(const weft_model_config *c, spec_list *l)
{
    /* GPT-2: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer),
     * zero biases, unit LayerNorm gains */
    int C = c->d_model, L = c->n_layer;
    float proj_sd = 0.02f / sqrtf(2.0f * (float)L);
    int rc = train_spec_add(l, "tok_emb.weight", 0, 2, c->vocab, C, INIT_NORMAL, 0.02f);
    train_spec_split(l, SPLIT_VOCAB);
    if (!rc)
        rc = train_spec_add(l, "pos_emb.weight", 0, 2, c->ctx, C, INIT_NORMAL, 0.02f);
    /* qkv and fc are column-parallel, the two projections row-parallel */
    static const struct { const char *name; int ndim, d0, d1; init_kind init; int proj, split; }
    per[T_PER_LAYER] = {
        { "ln1.weight", 1, 1, 0, INIT_ONE, 0, 0 }, { "ln1.bias", 1, 1, 0, INIT_ZERO, 0, 0 },
        { "attn.qkv.weight", 2, 3, 1, INIT_NORMAL, 0, SPLIT_QKV },
        { "attn.qkv.bias", 1, 3, 0, INIT_ZERO, 0, SPLIT_QKV },
        { "attn.proj.weight", 2, 1, 1, INIT_NORMAL, 1, SPLIT_COLS },
        { "attn.proj.bias", 1, 1, 0, INIT_ZERO, 0, 0 },
        { "ln2.weight", 1, 1, 0, INIT_ONE, 0, 0 }, { "ln2.bias", 1, 1, 0, INIT_ZERO, 0, 0 },
        { "mlp.fc.weight", 2, 4, 1, INIT_NORMAL, 0, SPLIT_ROWS },
        { "mlp.fc.bias", 1, 4, 0, INIT_ZERO, 0, SPLIT_ROWS },
        { "mlp.proj.weight", 2, 1, 4, INIT_NORMAL, 1, SPLIT_COLS },
        { "mlp.proj.bias", 1, 1, 0, INIT_ZERO, 0, 0 },
    };
    for (int k = 0; k < L && !rc; k++) {
        for (int j = 0; j < (c->experts > 0 ? T_FCW : T_PER_LAYER) && !rc; j++) {
            char name[MODEL_NAME_MAX];
            snprintf(name, sizeof name, "blocks.%d.%s", k, per[j].name);
            rc = train_spec_add(l, name, 1 + k, per[j].ndim, per[j].d0 * C, per[j].d1 * C,
                                per[j].init, per[j].proj ? proj_sd : 0.02f);
            train_spec_split(l, per[j].split);
        }
        if (c->experts > 0 && !rc)
            rc = train_moe_tensors(c, l, k, proj_sd);
    }
    if (!rc)
        rc = train_spec_add(l, "ln_f.weight", L + 1, 1, C, 0, INIT_ONE, 0);
    if (!rc)
        rc = train_spec_add(l, "ln_f.bias", L + 1, 1, C, 0, INIT_ZERO, 0);
    return rc;
}

void *train_gpt_arch(const weft_model *m)
{
    size_t L = (size_t)m->cfg.n_layer, extra = train_moe_book_bytes(&m->cfg);
    size_t head = (sizeof(gpt_acts) + sizeof(gpt_layer) * L + 7) & ~(size_t)7;
    gpt_acts *a = calloc(1, head + extra);
    if (a && extra)
        train_moe_book_at(&a->moe, &m->cfg, (char *)a + head);
    return a;
}

/* The chunk's layers are lo..hi (hi < lo: none); head: it ends the model. */
static void chunk_layers(const weft_model *m, int *lo, int *hi, int *head)
{
    int L = m->cfg.n_layer;
    *lo = m->ck->first > 1 ? m->ck->first - 1 : 0;
    *hi = m->ck->last < L ? m->ck->last - 1 : L - 1;
    *head = m->ck->last == L + 1;
}

/* What layer l (or the head, l = n_layer) reads: the block before it, or
 * the chunk's input. */
static const float *block_input(const weft_model *m, int l)
{
    const gpt_acts *a = m->s->arch;
    return l + 1 == m->ck->first || l == 0 ? a->x0 : a->l[l - 1].r2;
}

size_t train_gpt_layout(weft_model *m, float *base, int B, int T)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    gpt_acts *a = s->arch;
    carver cv = { base, 0 };
    int bf = m->prec == WEFT_PREC_BF16, sp = m->split, lo, hi, head;
    chunk_layers(m, &lo, &hi, &head);
    /* this rank's widths: attention's C/tp, the MLP's 4C/tp, its vocabulary */
    int tp = m->tp_size;
    size_t BT = (size_t)B * T, C = (size_t)c->d_model, R = m->seqpar ? BT / tp : BT;
    size_t V = tp > 1 ? (size_t)train_tp_vocab_rows(m) : (size_t)c->vocab;
    /* with experts no dense MLP: the experts' records are their own */
    int moe = c->experts > 0;
    size_t A = C / tp, F = moe ? 0 : 4 * C / tp;
    moe_dims md = train_moe_dims_of(m, (int)BT);
    /* attention keeps each row's log-sum-exp and a row of scratch, not T x T */
    size_t att = 2 * (size_t)B * (c->n_head / tp) * T;
    float *tmp = bf ? train_carve(&cv, BT * (F > C ? F : C)) : NULL;
    /* a matmul input: fp32 in its own buffer, or bf16 beside the shared one */
#define MMIN(f32, sv, n, wt) do { \
        f32 = bf ? tmp : train_carve(&cv, n); \
        (sv).x = bf ? train_carve16(&cv, n) : NULL; \
        (sv).w = bf && base ? m->w16 + m->tensors[m->gmap[wt]].info.offset : NULL; \
    } while (0)
    int sq = m->seqpar;
    a->x0 = train_carve(&cv, R * C);
    a->full = sq ? train_carve(&cv, BT * C) : NULL;
    for (int l = lo; l <= hi; l++) {
        gpt_layer *g = &a->l[l];
        if (m->recompute && l > lo) {
            /* one block's activations, rebuilt by backward; each block's
             * output is the next one's input, kept */
            *g = a->l[lo];
            g->r2 = train_carve(&cv, R * C);
            if (bf && base) {
                g->qkv_s.w = m->w16 + m->tensors[m->gmap[tix(&m->cfg, l, T_QKVW)]].info.offset;
                g->proj_s.w = m->w16 + m->tensors[m->gmap[tix(&m->cfg, l, T_PROJW)]].info.offset;
                if (!moe) {
                    g->fc_s.w = m->w16 + m->tensors[m->gmap[tix(c, l, T_FCW)]].info.offset;
                    g->fcp_s.w = m->w16 + m->tensors[m->gmap[tix(c, l, T_FCPW)]].info.offset;
                }
            }
            continue;
        }
        MMIN(g->ln1, g->qkv_s, BT * C, tix(&m->cfg, l, T_QKVW));
        g->ln1l = sq ? train_carve(&cv, R * C) : g->ln1;
        g->ln1m = train_carve(&cv, R);
        g->ln1r = train_carve(&cv, R);
        g->qkv = train_carve(&cv, BT * 3 * A);
        g->att = train_carve(&cv, att);
        MMIN(g->atty, g->proj_s, BT * A, tix(&m->cfg, l, T_PROJW));
        g->r1 = train_carve(&cv, R * C);
        if (moe) { /* the router and the experts read their input in fp32 */
            g->ln2 = train_carve(&cv, BT * C);
            float *p = train_carve(&cv, train_moe_acts_floats(&md));
            if (base)
                train_moe_acts_at(&g->mo, &md, p);
        } else {
            MMIN(g->ln2, g->fc_s, BT * C, tix(c, l, T_FCW));
            g->fch = train_carve(&cv, BT * F);
            MMIN(g->fcg, g->fcp_s, BT * F, tix(c, l, T_FCPW));
        }
        g->ln2l = sq ? train_carve(&cv, R * C) : g->ln2;
        g->ln2m = train_carve(&cv, R);
        g->ln2r = train_carve(&cv, R);
        g->r2 = train_carve(&cv, R * C);
        g->dfcp = sp && !moe ? train_carve(&cv, BT * C) : NULL;
        g->dfc = sp && !moe ? train_carve(&cv, BT * F) : NULL;
        g->dproj = sp ? train_carve(&cv, BT * C) : NULL;
        g->dqkv = sp ? train_carve(&cv, BT * 3 * A) : NULL;
    }
    s->logits = s->probs = NULL;
    if (head) {
        MMIN(a->lnf, a->logit_s, BT * C, 0);
        a->lnfl = sq ? train_carve(&cv, R * C) : a->lnf;
        a->lnfm = train_carve(&cv, R);
        a->lnfr = train_carve(&cv, R);
        s->logits = train_carve(&cv, BT * V);
        s->probs = train_carve(&cv, BT * V);
    }
#undef MMIN
    int layers = hi >= lo;
    a->dres = train_carve(&cv, R * C);
    /* with experts the gate gradients lie after the MLP's input gradient:
     * one all-reduce sums both over the group */
    size_t gates = moe && layers ? BT * (size_t)c->topk : 0;
    a->dbr = train_carve(&cv, (sq ? R : BT) * C + gates);
    a->dqkv = layers ? train_carve(&cv, BT * 3 * A) : NULL;
    a->datt = layers ? train_carve(&cv, att) : NULL;
    a->dfc = layers && F ? train_carve(&cv, BT * F) : NULL;
    /* --sp: the gathered dout kept aside, and the router's input gradient */
    a->dmo = moe && layers && sq ? train_carve(&cv, 2 * BT * C) : NULL;
    if (moe && layers) {
        float *p = train_carve(&cv, train_moe_scratch_floats(&md));
        if (base) {
            train_moe_scratch_at(&a->ms, &md, p);
            a->ms.dg = a->dbr + (sq ? R : BT) * C;
        }
    }
    a->datt_y = layers && tp > 1 ? train_carve(&cv, BT * A) : a->dbr;
    size_t widest = head && V > F ? V : F > C ? F : C;
    s->lin_scratch = bf ? train_carve16(&cv, BT * widest) : NULL;
    if (base) {
        s->out = head ? NULL : hi >= lo ? a->l[hi].r2 : a->x0;
        s->in = m->ck->first > 0 ? a->x0 : NULL;
    }
    return cv.used;
}

/* A row-parallel layer's partial products: summed over the group (all of
 * out's rows) or reduce-scattered from full into out (this rank's rows);
 * then the bias, which is added once. */
static int row_parallel_sum(weft_model *m, float *full, float *out, const float *bias, size_t nR)
{
    int C = m->cfg.d_model, rc = 0;
    if (m->tp_size == 1)
        return 0;
    if (m->seqpar)
        rc = train_tp_reduce_scatter(m, full, out, nR);
    else
        rc = train_tp_allreduce(m, out, nR, WEFT_SUM);
    if (rc == 0 && bias)
        train_add_bias(out, bias, (int)(nR / (size_t)C), C);
    return rc;
}

/* A column-parallel layer's input gradient: its partial sums over the
 * group, into every row (din) or this rank's rows (from full into din). */
static int column_parallel_grad(weft_model *m, float *full, float *din, size_t nR)
{
    if (m->tp_size == 1)
        return 0;
    return m->seqpar ? train_tp_reduce_scatter(m, full, din, nR)
                     : train_tp_allreduce(m, din, nR, WEFT_SUM);
}

/* The experts' backward into cin (every row; the residual-sized dbr
 * without --sp): their input gradients (each rank's part under --tp)
 * summed over the group with the gate gradients that lie after dbr's rows
 * (a->ms.dg), then the router's, the same on every rank, added once. Under
 * --sp cin is the buffer the gathered dout lies in (kept aside first), the
 * gate gradients are summed alone, the router's input gradient joins cin
 * on tensor rank 0 only, and cin is reduce-scattered into dbr (each rank
 * its rows). */
static int experts_backward(weft_model *m, int l, const float *dout, float *cin, size_t nR)
{
    gpt_acts *a = m->s->arch;
    gpt_layer *g = &a->l[l];
    moe_dims md = train_moe_dims_of(m, m->s->B * m->s->T);
    const weft_model_config *c = &m->cfg;
    float *P = m->params, *G = m->grads;
    size_t nB = (size_t)md.N * md.D, gates = (size_t)md.N * md.K;
    int sq = m->seqpar, rc;
    if (sq) {
        memcpy(a->dmo, dout, sizeof(float) * nB);
        dout = a->dmo;
    }
#define W(j) train_model_tensor_ptr(m, P, tix(c, l, j))
#define D(j) train_model_tensor_ptr(m, G, tix(c, l, j))
    memset(cin, 0, sizeof(float) * nB);
    rc = train_moe_backward_experts(m->mm, &md, &g->mo, &a->ms, cin, D(T_EFC), D(T_EPROJ), dout,
                                    W(T_EFC), W(T_EPROJ));
    if (rc == 0 && m->tp_size > 1)
        rc = sq ? train_tp_allreduce(m, a->ms.dg, gates, WEFT_SUM)
                : train_tp_allreduce(m, cin, nR + gates, WEFT_SUM);
    float *rx = sq ? a->dmo + nB : cin; /* the router's input gradient */
    if (sq)
        memset(rx, 0, sizeof(float) * nB);
    if (rc == 0)
        train_moe_backward_router(m->mm, &md, &g->mo, &a->ms, rx, D(T_ROUTER), g->ln2,
                                  W(T_ROUTER), m->bw_weight);
#undef W
#undef D
    if (sq && rc == 0) {
        if (m->tp_rank == 0)
            for (size_t i = 0; i < nB; i++)
                cin[i] += rx[i];
        rc = train_tp_reduce_scatter(m, cin, a->dbr, nR);
    }
    return rc;
}

/* Under sequence parallelism the LayerNorms' gradients are each rank's
 * rows' share: at the step's last backward (announce) they are summed
 * over the group, once, before anyone is told. */
static int seqpar_sync(weft_model *m, int first_tensor, int count)
{
    if (!m->seqpar || !m->announce)
        return 0;
    float *g = train_model_tensor_ptr(m, m->grads, first_tensor);
    size_t n = 0;
    for (int i = 0; i < count; i++)
        n += m->tensors[m->gmap[first_tensor + i]].info.numel;
    return train_tp_allreduce(m, g, n, WEFT_SUM);
}

/* Transformer block l's forward, from its input to its output r2 (also
 * what backward reruns under recomputation). */
static int layer_forward(weft_model *m, int l)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    gpt_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    pool *pl = train_mm_pool(m->mm);
    int tp = m->tp_size, C = c->d_model, NH = c->n_head / tp, A = C / tp, F = 4 * C / tp;
    int B = s->B, T = s->T, BT = B * T, sq = m->seqpar, R = sq ? BT / tp : BT, rc = 0;
    size_t nR = (size_t)R * C;
    float *P = m->params;
    gpt_layer *g = &a->l[l];
    const float *x = block_input(m, l);
#define W(j) train_model_tensor_ptr(m, P, tix(&m->cfg, l, j))
    train_layernorm_forward(pl, g->ln1l, g->ln1m, g->ln1r, x, W(T_LN1W), W(T_LN1B), R, C);
    if (sq)
        rc = train_tp_allgather(m, g->ln1l, g->ln1, nR);
    train_linear_forward(&lc, &g->qkv_s, g->qkv, g->ln1, W(T_QKVW), W(T_QKVB), BT, C, 3 * A);
    if (m->cp) /* the sequence over the group: K/V around its ring */
        rc = rc ? rc : train_attn_cp_forward(m->cp, m->mm, g->atty, g->att, g->qkv, g->qkv + A,
                                             g->qkv + 2 * A, 3 * A, 3 * A, 3 * A, B, T, NH, NH,
                                             A / NH);
    else
        train_attention_forward_prec(m->mm, lc.bf16, g->atty, g->att, g->qkv, B, T, A, NH);
    /* row-parallel: the partial products add up over the group (each rank
     * its rows under sequence parallelism), then the bias */
    train_linear_forward(&lc, &g->proj_s, sq ? a->full : g->r1, g->atty, W(T_PROJW),
                         tp > 1 ? NULL : W(T_PROJB), BT, A, C);
    rc = rc ? rc : row_parallel_sum(m, a->full, g->r1, W(T_PROJB), nR);
    train_residual_forward(g->r1, g->r1, x, nR);
    train_layernorm_forward(pl, g->ln2l, g->ln2m, g->ln2r, g->r1, W(T_LN2W), W(T_LN2B), R, C);
    if (sq)
        rc = rc ? rc : train_tp_allgather(m, g->ln2l, g->ln2, nR);
    if (c->experts > 0) {
        /* the experts' partial outputs (each rank its share of every
         * expert's width) summed over the group like the dense MLP's */
        float *mlp = sq ? a->full : g->r2;
        memset(mlp, 0, sizeof(float) * (size_t)BT * C);
        rc = rc ? rc : train_moe_block_forward(m, l, tix(c, l, T_ROUTER), &g->mo, mlp, g->ln2);
        rc = rc ? rc : row_parallel_sum(m, a->full, g->r2, NULL, nR);
    } else {
        train_linear_forward(&lc, &g->fc_s, g->fch, g->ln2, W(T_FCW), NULL, BT, C, F);
        train_bias_gelu_forward(pl, g->fcg, g->fch, W(T_FCB), BT, F); /* one pass, same bits */
        train_linear_forward(&lc, &g->fcp_s, sq ? a->full : g->r2, g->fcg, W(T_FCPW),
                             tp > 1 ? NULL : W(T_FCPB), BT, F, C);
        rc = rc ? rc : row_parallel_sum(m, a->full, g->r2, W(T_FCPB), nR);
    }
    train_residual_forward(g->r2, g->r2, g->r1, nR);
#undef W
    return rc;
}

int train_gpt_forward(weft_model *m, const void *in, int B, int T)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    gpt_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    pool *pl = train_mm_pool(m->mm);
    int tp = m->tp_size, C = c->d_model;
    int BT = B * T, lo, hi, head, V = tp > 1 ? train_tp_vocab_rows(m) : c->vocab, rc = 0;
    int nt = m->nglobal;
    float *P = m->params;
    chunk_layers(m, &lo, &hi, &head);
    int sq = m->seqpar, R = sq ? BT / tp : BT;
    size_t nR = (size_t)R * C;
    if (m->ck->first == 0) {
        memcpy(s->tokens, in, sizeof(int32_t) * (size_t)BT);
        rc = train_model_params(m, rc, 0, 2, 1);
        if (rc == 0 && tp > 1) {
            /* the parts' embeddings add up: over the group, or each rank its rows */
            train_tp_embedding_forward(m, sq ? a->full : a->x0, in, train_model_tensor_ptr(m, P, 0),
                                       train_model_tensor_ptr(m, P, 1), B, T, C);
            rc = sq ? train_tp_reduce_scatter(m, a->full, a->x0, nR)
                    : train_tp_allreduce(m, a->x0, (size_t)BT * C, WEFT_SUM);
        } else if (rc == 0 && m->cp) { /* this rank's rows at their global positions */
            train_cp_embedding_forward(train_attn_cp_rank(m->cp), train_attn_cp_size(m->cp),
                                       a->x0, in, train_model_tensor_ptr(m, P, 0),
                                       train_model_tensor_ptr(m, P, 1), B, T, C);
        } else if (rc == 0) {
            train_embedding_forward(a->x0, in, train_model_tensor_ptr(m, P, 0),
                                    train_model_tensor_ptr(m, P, 1), B, T, C);
        }
        rc = train_model_params(m, rc, 0, 2, 0);
    } else {
        memcpy(a->x0, in, sizeof(float) * nR);
    }
    for (int l = lo; l <= hi && rc == 0; l++) {
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 1);
        rc = rc ? rc : layer_forward(m, l);
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 0);
    }
    if (head && rc == 0) {
        rc = train_model_params(m, rc, nt - 2, 2, 1);
        rc = train_model_params(m, rc, 0, 1, 1); /* the tied output projection */
        if (rc == 0) {
            train_layernorm_forward(pl, a->lnfl, a->lnfm, a->lnfr, block_input(m, c->n_layer),
                                    train_model_tensor_ptr(m, P, nt - 2),
                                    train_model_tensor_ptr(m, P, nt - 1), R, C);
            if (sq)
                rc = train_tp_allgather(m, a->lnfl, a->lnf, nR);
            train_linear_forward(&lc, &a->logit_s, s->logits, a->lnf,
                                 train_model_tensor_ptr(m, P, 0), NULL, BT, C, V);
        }
        rc = train_model_params(m, rc, 0, 1, 0);
        rc = train_model_params(m, rc, nt - 2, 2, 0);
    }
    return rc;
}

/* The embedding's gradient needs every row's: gathered first under
 * sequence parallelism. */
static int embedding_backward(weft_model *m, gpt_acts *a, const int32_t *tok, int B, int T)
{
    float *G = m->grads;
    int C = m->cfg.d_model;
    const float *d = a->dres;
    if (m->seqpar) {
        int rc = train_tp_allgather(m, a->dres, a->full, (size_t)B * T / m->tp_size * C);
        if (rc)
            return rc;
        d = a->full;
    }
    if (m->tp_size > 1)
        train_tp_embedding_backward(m, train_model_tensor_ptr(m, G, 0),
                                    train_model_tensor_ptr(m, G, 1), d, tok, B, T, C);
    else if (m->cp)
        train_cp_embedding_backward(train_attn_cp_rank(m->cp), train_attn_cp_size(m->cp),
                                    train_model_tensor_ptr(m, G, 0),
                                    train_model_tensor_ptr(m, G, 1), d, tok, B, T, C);
    else
        train_embedding_backward(train_model_tensor_ptr(m, G, 0), train_model_tensor_ptr(m, G, 1),
                                 d, tok, B, T, C);
    return 0;
}

/* The weight half: from the douts the input half kept. */
static int gpt_backward_weight(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    gpt_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    int tp = m->tp_size, C = c->d_model, A = C / tp, F = 4 * C / tp;
    int BT = s->B * s->T, nt = m->nglobal, lo, hi, head, rc = 0;
    int V = tp > 1 ? train_tp_vocab_rows(m) : c->vocab;
    float *G = m->grads;
    chunk_layers(m, &lo, &hi, &head);
    if (head) {
        train_linear_backward_weight(&lc, &a->logit_s, train_model_tensor_ptr(m, G, 0), NULL,
                                     s->probs, a->lnf, BT, C, V);
        rc = seqpar_sync(m, nt - 2, 2);
        train_model_grads_ready(m, nt - 2, 2);   /* ln_f, done by the input half */
    }
    for (int l = hi; l >= lo; l--) {
        gpt_layer *g = &a->l[l];
#define D(j) train_model_tensor_ptr(m, G, tix(&m->cfg, l, j))
        if (c->experts <= 0) { /* the experts' were made by the input half */
            train_linear_backward_weight(&lc, &g->fcp_s, D(T_FCPW), D(T_FCPB), g->dfcp, g->fcg, BT, F, C);
            train_linear_backward_weight(&lc, &g->fc_s, D(T_FCW), D(T_FCB), g->dfc, g->ln2, BT, C, F);
        }
        train_linear_backward_weight(&lc, &g->proj_s, D(T_PROJW), D(T_PROJB), g->dproj, g->atty, BT, A, C);
        train_linear_backward_weight(&lc, &g->qkv_s, D(T_QKVW), D(T_QKVB), g->dqkv, g->ln1, BT, C, 3 * A);
#undef D
        rc = rc ? rc : seqpar_sync(m, tix(&m->cfg, l, T_LN1W), 2);
        rc = rc ? rc : seqpar_sync(m, tix(&m->cfg, l, T_LN2W), 2);
        rc = rc ? rc : train_moe_block_step_end(m, l, tix(c, l, T_ROUTER));
        train_model_grads_ready(m, tix(&m->cfg, l, 0), per_layer(&m->cfg));
    }
    if (m->ck->first == 0) {
        rc = rc ? rc : embedding_backward(m, a, s->tokens, s->B, s->T);
        train_model_grads_ready(m, 0, 2);
    }
    return rc;
}

/* One linear layer's backward: whole, or (split) its input half with its
 * dout kept for the weight half. */
static void lin_back(const lin_ctx *lc, const lin_save *sv, int split, float *keep, float *din,
                     float *dw, float *db, const float *dout, const float *in, const float *w,
                     int rows, int k, int n)
{
    if (!split) {
        train_linear_backward(lc, sv, din, dw, db, dout, in, w, rows, k, n);
        return;
    }
    if (keep)
        memcpy(keep, dout, sizeof(float) * (size_t)rows * n);
    train_linear_backward_input(lc, sv, din, dout, w, rows, k, n);
}

/* dout: the gradient of the chunk's output when it is not the last chunk
 * (the last starts from d(loss)/d(logits), in probs). */
int train_gpt_backward(weft_model *m, const float *dout, int part)
{
    if (part == PART_WEIGHT)
        return gpt_backward_weight(m);
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    gpt_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    pool *pl = train_mm_pool(m->mm);
    int tp = m->tp_size, C = c->d_model, NH = c->n_head / tp, A = C / tp, F = 4 * C / tp;
    int B = s->B, T = s->T, BT = B * T, L = c->n_layer, rc = 0;
    int V = tp > 1 ? train_tp_vocab_rows(m) : c->vocab;
    int sp = part == PART_INPUT, sq = m->seqpar, R = sq ? BT / tp : BT, lo, hi, head;
    float *P = m->params, *G = m->grads;
    int nt = m->nglobal;
    size_t nR = (size_t)R * C;
    /* the whole rows a column-parallel layer's input gradient is summed
     * from, and a row-parallel layer's dout: under sequence parallelism a
     * buffer of their own, else the residual-sized ones */
    float *cin = sq ? a->full : a->dbr;
    chunk_layers(m, &lo, &hi, &head);
    /* dres carries d(loss)/d(residual stream), updated in place going down;
     * a column-parallel layer's input gradient is a partial sum over the
     * group (Megatron's f: identity forward, all-reduce backward) */
    if (head) {
        rc = train_model_params(m, rc, 0, 1, 1);
        rc = train_model_params(m, rc, nt - 2, 2, 1);
        if (rc)
            return rc;
        lin_back(&lc, &a->logit_s, sp, NULL, cin, train_model_tensor_ptr(m, G, 0), NULL, s->probs,
                 a->lnf, train_model_tensor_ptr(m, P, 0), BT, C, V);
        rc = column_parallel_grad(m, cin, a->dbr, nR);
        memset(a->dres, 0, nR * sizeof(float));
        train_layernorm_backward(pl, a->dres, train_model_tensor_ptr(m, G, nt - 2),
                                 train_model_tensor_ptr(m, G, nt - 1), a->dbr, block_input(m, L),
                                 train_model_tensor_ptr(m, P, nt - 2), a->lnfm, a->lnfr, R, C);
        rc = train_model_params(m, rc, nt - 2, 2, 0);
        rc = train_model_params(m, rc, 0, 1, 0);
        if (!sp) {
            rc = rc ? rc : seqpar_sync(m, nt - 2, 2);
            train_model_grads_ready(m, nt - 2, 2);   /* ln_f */
        }
    } else {
        memcpy(a->dres, dout, nR * sizeof(float));
    }
    for (int l = hi; l >= lo && rc == 0; l--) {
        gpt_layer *g = &a->l[l];
        const float *x = block_input(m, l);
        const float *rdout = a->dres;
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 1);
        /* the block's activations as its forward made them (the last
         * block's are still there) */
        if (rc == 0 && m->recompute && l < hi) {
            a->moe.replay = 1;
            rc = layer_forward(m, l);
            a->moe.replay = 0;
        }
        if (rc)
            break;
#define W(j) train_model_tensor_ptr(m, P, tix(&m->cfg, l, j))
#define D(j) train_model_tensor_ptr(m, G, tix(&m->cfg, l, j))
        if (sq) { /* Megatron's g backward: the rows of every rank */
            rc = rc ? rc : train_tp_allgather(m, a->dres, a->full, nR);
            rdout = a->full;
        }
        if (c->experts > 0) { /* the experts' weights are done here even split */
            rc = rc ? rc : experts_backward(m, l, rdout, cin, nR);
        } else {
            lin_back(&lc, &g->fcp_s, sp, g->dfcp, a->dfc, D(T_FCPW), D(T_FCPB), rdout, g->fcg, W(T_FCPW), BT, F, C);
            train_gelu_backward(pl, a->dfc, a->dfc, g->fch, (size_t)BT * F);
            lin_back(&lc, &g->fc_s, sp, g->dfc, cin, D(T_FCW), D(T_FCB), a->dfc, g->ln2, W(T_FCW), BT, C, F);
            rc = rc ? rc : column_parallel_grad(m, cin, a->dbr, nR);
        }
        train_layernorm_backward(pl, a->dres, D(T_LN2W), D(T_LN2B), a->dbr, g->r1, W(T_LN2W), g->ln2m, g->ln2r, R, C);
        if (sq)
            rc = rc ? rc : train_tp_allgather(m, a->dres, a->full, nR);
        lin_back(&lc, &g->proj_s, sp, g->dproj, a->datt_y, D(T_PROJW), D(T_PROJB), rdout, g->atty, W(T_PROJW), BT, A, C);
        if (m->cp)
            rc = rc ? rc : train_attn_cp_backward(m->cp, m->mm, a->dqkv, a->dqkv + A,
                                                  a->dqkv + 2 * A, a->datt, a->datt_y, g->qkv,
                                                  g->qkv + A, g->qkv + 2 * A, g->atty, g->att,
                                                  3 * A, 3 * A, 3 * A, B, T, NH, NH, A / NH);
        else
            train_attention_backward_prec(m->mm, lc.bf16, a->dqkv, a->datt, a->datt_y, g->qkv, g->att, B, T, A, NH);
        lin_back(&lc, &g->qkv_s, sp, g->dqkv, cin, D(T_QKVW), D(T_QKVB), a->dqkv, g->ln1, W(T_QKVW), BT, C, 3 * A);
        rc = rc ? rc : column_parallel_grad(m, cin, a->dbr, nR);
        train_layernorm_backward(pl, a->dres, D(T_LN1W), D(T_LN1B), a->dbr, x, W(T_LN1W), g->ln1m, g->ln1r, R, C);
#undef W
#undef D
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 0);
        if (!sp) {
            rc = rc ? rc : seqpar_sync(m, tix(&m->cfg, l, T_LN1W), 2);
            rc = rc ? rc : seqpar_sync(m, tix(&m->cfg, l, T_LN2W), 2);
            rc = rc ? rc : train_moe_block_step_end(m, l, tix(c, l, T_ROUTER));
            train_model_grads_ready(m, tix(&m->cfg, l, 0), per_layer(&m->cfg));
        }
    }
    /* the token embedding also got the logits' gradient (tied), so it is
     * done only now */
    if (m->ck->first == 0 && !sp) {
        rc = rc ? rc : embedding_backward(m, a, s->tokens, B, T);
        train_model_grads_ready(m, 0, 2);
    }
    s->din = m->ck->first > 0 ? a->dres : NULL;
    return rc;
}
