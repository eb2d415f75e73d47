/* Llama (transformers' LlamaForCausalLM, fp32): a token embedding, n_layer
 * blocks of RMSNorm, grouped-query causal attention with rotary positions
 * and no biases, RMSNorm and a SwiGLU MLP, each with its residual; a final
 * RMSNorm and logits through lm_head (or the token embedding, tied).
 * Tensor parallelism as Megatron's: q, gate and up column-parallel by
 * heads and rows, o and down row-parallel; k and v split by kv heads when
 * tp divides them, else whole on every rank, each rank using the kv head
 * its query heads read and the group summing their gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/attention_cp.h"
#include "train/attention_prec.h"
#include "train/layers_llama.h"
#include "train/model.h"
#include "train/moe_block.h"

/* A block's tensors. With experts, gate/up/down are the shared experts'
 * (absent without them) and the router's and experts' follow. */
enum { T_ANORM, T_Q, T_K, T_V, T_O, T_MNORM, T_GATE, T_UP, T_DOWN, T_PER_LAYER,
       T_ROUTER = T_PER_LAYER, T_EGU, T_EDOWN, T_EBIAS };

/* Under sequence parallelism the residual stream and the norms hold this
 * rank's rows (rows/tp): n1/n2/nf are the gathered rows the column-parallel
 * layers read, n1l/n2l/nfl this rank's norm output (else the same buffer).
 * In bf16 mode n1, atty, n2, hh and nf — read only as matmul inputs —
 * share one fp32 buffer and are kept as bf16 in the lin_save records
 * (k and v share q's copy of n1). */
typedef struct {
    float *n1, *n1l, *r1s, *q, *k, *v, *att, *atty, *h1;
    float *n2, *n2l, *r2s, *gu, *hh, *r2;
    float *kq, *kk, *kv, *ko, *kgu, *kd;    /* split backward: each linear's dout */
    lin_save q_s, k_s, v_s, o_s, gu_s, d_s;
    moe_acts mo;
} ll_layer;

/* The experts' book first (moe_block.h). */
typedef struct {
    moe_book moe;
    float *x0, *nf, *nfl, *nfs, *full, *cos_t, *sin_t;
    float *dres, *dbr, *dq, *dk, *dv, *datt, *datt_y, *dh, *dgu, *dsum;
    float *dmo;   /* experts under --sp: the gathered dout kept aside [BT, D] */
    lin_save logit_s;
    moe_scratch ms;
    ll_layer l[];
} ll_acts;

/* This rank's widths: query heads H and kv heads G of hd, the MLP's F,
 * the first row of the kv weights it uses (kv whole on every rank). */
typedef struct {
    int tp, D, hd, H, G, F, kvrow, V;
} dims;

/* An expert's width. */
static int expert_ffn(const weft_model_config *c)
{
    return train_moe_expert_ffn(c);
}

/* The dense MLP's width: the shared experts' together under experts. */
static int dense_ffn(const weft_model_config *c)
{
    return c->experts > 0 ? c->shared * expert_ffn(c) : c->ffn;
}

static dims dims_of(const weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    dims d;
    d.tp = m->tp_size;
    d.D = c->d_model;
    d.hd = c->d_model / c->n_head;
    d.H = c->n_head / d.tp;
    d.F = dense_ffn(c) / d.tp;
    int split = c->n_kv_head % d.tp == 0;
    d.G = split ? c->n_kv_head / d.tp : 1;
    d.kvrow = split ? 0 : m->tp_rank * c->n_kv_head / d.tp * d.hd;
    d.V = d.tp > 1 ? train_tp_vocab_rows(m) : c->vocab;
    return d;
}

/* Tensors per block. */
static int per_layer(const weft_model_config *c)
{
    if (c->experts <= 0)
        return T_PER_LAYER;
    return T_MNORM + 1 + (c->shared > 0 ? 3 : 0) + 3 + (c->moe_bias ? 1 : 0);
}

/* Block l's tensor j (T_*) in the whole model's table. */
static int tix(const weft_model_config *c, int l, int j)
{
    int at = j;
    if (j >= T_ROUTER)
        at = j - T_ROUTER + T_MNORM + 1 + (c->shared > 0 ? 3 : 0);
    return 1 + l * per_layer(c) + at;
}

static int norm_ix(const weft_model_config *c)
{
    return 1 + c->n_layer * per_layer(c);
}

/* The output projection: the token embedding (tied) or lm_head. */
static int head_ix(const weft_model_config *c)
{
    return c->tied ? 0 : norm_ix(c) + 1;
}

int train_llama_check(const weft_model_config *c)
{
    if (c->vocab < 2 || c->vocab > (1 << 24) || c->ctx < 1 || c->ctx > (1 << 16) ||
        c->n_layer < 1 || c->n_layer > 1024 || c->n_head < 1 || c->d_model < 1 ||
        c->d_model > (1 << 16) || c->d_model % c->n_head != 0 || c->n_kv_head < 1 ||
        c->n_head % c->n_kv_head != 0 || c->ffn < 1 || c->ffn > (1 << 20) ||
        (c->tied != 0 && c->tied != 1))
        return WEFT_EINVAL;
    /* rotary embedding turns pairs of a head's columns */
    if ((c->d_model / c->n_head) % 2)
        return WEFT_EINVAL;
    if (!(c->rope_theta > 1.0f) || !isfinite(c->rope_theta) || !(c->rms_eps > 0.0f) ||
        !(c->rms_eps < 1.0f))
        return WEFT_EINVAL;
    return train_moe_check(c);
}

int train_llama_tp_fits(const weft_model_config *c, int tp)
{
    /* kv heads split over the ranks, or each rank's query heads all read
     * one kv head (tp a multiple of the kv heads); each expert's width
     * split as the dense MLP's */
    return c->n_head % tp == 0 && dense_ffn(c) % tp == 0 &&
           (c->experts == 0 || expert_ffn(c) % tp == 0) &&
           (c->n_kv_head % tp == 0 || tp % c->n_kv_head == 0);
}

static int parse_value(const char **s, int flt, int32_t *i, float *f)
{
    char *end;
    if (flt) {
        double v = strtod(*s, &end);
        if (end == *s || !isfinite(v) || v < 0 || v > 1e30)
            return WEFT_EINVAL;
        *f = (float)v;
    } else {
        long v = strtol(*s, &end, 10);
        if (end == *s || v < 0 || v > (1L << 30))
            return WEFT_EINVAL;
        *i = (int32_t)v;
    }
    *s = end;
    return 0;
}

int train_llama_parse(const char *s, weft_model_config *c)
{
    static const char *const keys[] = { "vocab=", "ctx=", "layers=", "heads=", "kv_heads=",
                                        "dim=", "ffn=", "tied=", "theta=", "eps=" };
    enum { NKEYS = 10, FLOATS = 8 };
    int32_t *ints[] = { &c->vocab, &c->ctx, &c->n_layer, &c->n_head, &c->n_kv_head,
                        &c->d_model, &c->ffn, &c->tied };
    float *floats[] = { &c->rope_theta, &c->rms_eps };
    c->type = WEFT_MODEL_LLAMA;
    c->rope_theta = 10000.0f;
    c->rms_eps = 1e-5f;
    c->n_kv_head = -1;
    while (*s) {
        int k;
        for (k = 0; k < NKEYS; k++)
            if (strncmp(s, keys[k], strlen(keys[k])) == 0)
                break;
        if (k == NKEYS) {
            if (train_moe_parse_key(&s, c))
                return WEFT_EINVAL;
        } else {
            s += strlen(keys[k]);
            if (parse_value(&s, k >= FLOATS, k < FLOATS ? ints[k] : NULL,
                            k >= FLOATS ? floats[k - FLOATS] : NULL))
                return WEFT_EINVAL;
        }
        if (*s == ',')
            s++;
        else if (*s)
            return WEFT_EINVAL;
    }
    if (c->n_kv_head < 0) /* no kv_heads: plain multi-head attention */
        c->n_kv_head = c->n_head;
    return 0;
}

/* The fewest digits that read back as the same float: "1e-05", not
 * "9.99999975e-06". */
static void short_float(char *buf, size_t len, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v)
            return;
    }
}

int train_llama_format(const weft_model_config *c, char *buf, size_t len)
{
    char theta[32], eps[32];
    short_float(theta, sizeof theta, c->rope_theta);
    short_float(eps, sizeof eps, c->rms_eps);
    char moe[256];
    train_moe_format(c, moe, sizeof moe);
    return snprintf(buf, len, "llama:vocab=%d,ctx=%d,layers=%d,heads=%d,kv_heads=%d,dim=%d,"
                    "ffn=%d,theta=%s,eps=%s,tied=%d%s", c->vocab, c->ctx, c->n_layer, c->n_head,
                    c->n_kv_head, c->d_model, c->ffn, theta, eps, c->tied, moe);
}

int train_llama_tensors(const weft_model_config *c, spec_list *l)
{
    /* as the GPT's: N(0, 0.02), the residual projections (o, down) scaled
     * by 1/sqrt(2 n_layer), unit norm gains */
    int D = c->d_model, L = c->n_layer, hd = D / c->n_head;
    float proj_sd = 0.02f / sqrtf(2.0f * (float)L);
    int rc = train_spec_add(l, "tok_emb.weight", 0, 2, c->vocab, D, INIT_NORMAL, 0.02f);
    train_spec_split(l, SPLIT_VOCAB);
    int q = c->n_head * hd, kv = c->n_kv_head * hd, F = dense_ffn(c);
    const struct { const char *name; int ndim, d0, d1; init_kind init; int proj, split; }
    per[T_PER_LAYER] = {
        { "attn_norm.weight", 1, D, 0, INIT_ONE, 0, 0 },
        { "attn.q.weight", 2, q, D, INIT_NORMAL, 0, SPLIT_ROWS },
        { "attn.k.weight", 2, kv, D, INIT_NORMAL, 0, SPLIT_KV },
        { "attn.v.weight", 2, kv, D, INIT_NORMAL, 0, SPLIT_KV },
        { "attn.o.weight", 2, D, q, INIT_NORMAL, 1, SPLIT_COLS },
        { "mlp_norm.weight", 1, D, 0, INIT_ONE, 0, 0 },
        { "mlp.gate.weight", 2, F, D, INIT_NORMAL, 0, SPLIT_ROWS },
        { "mlp.up.weight", 2, F, D, INIT_NORMAL, 0, SPLIT_ROWS },
        { "mlp.down.weight", 2, D, F, INIT_NORMAL, 1, SPLIT_COLS },
    };
    for (int k = 0; k < L && !rc; k++) {
        for (int j = 0; j < T_PER_LAYER && !rc; j++) {
            char name[MODEL_NAME_MAX];
            if (j >= T_GATE && F == 0)
                break;
            snprintf(name, sizeof name, "blocks.%d.%s%s", k,
                     j >= T_GATE && c->experts > 0 ? "shared_" : "", per[j].name);
            rc = train_spec_add(l, name, 1 + k, per[j].ndim, per[j].d0, per[j].d1, per[j].init,
                                per[j].proj ? proj_sd : 0.02f);
            train_spec_split(l, per[j].split);
        }
        if (c->experts > 0 && !rc)
            rc = train_moe_tensors(c, l, k, proj_sd);
    }
    if (!rc)
        rc = train_spec_add(l, "norm.weight", L + 1, 1, D, 0, INIT_ONE, 0);
    if (!rc && !c->tied) {
        rc = train_spec_add(l, "lm_head.weight", L + 1, 2, c->vocab, D, INIT_NORMAL, 0.02f);
        train_spec_split(l, SPLIT_VOCAB);
    }
    return rc;
}

void *train_llama_arch(const weft_model *m)
{
    size_t L = (size_t)m->cfg.n_layer, extra = train_moe_book_bytes(&m->cfg);
    size_t head = (sizeof(ll_acts) + sizeof(ll_layer) * L + 7) & ~(size_t)7;
    ll_acts *a = calloc(1, head + extra);
    if (a && extra)
        train_moe_book_at(&a->moe, &m->cfg, (char *)a + head);
    return a;
}

static moe_dims moe_dims_of(const weft_model *m, int N)
{
    return train_moe_dims_of(m, N);
}

/* The chunk's layers are lo..hi (hi < lo: none); head: it ends the model. */
static void chunk_layers(const weft_model *m, int *lo, int *hi, int *head)
{
    int L = m->cfg.n_layer;
    *lo = m->ck->first > 1 ? m->ck->first - 1 : 0;
    *hi = m->ck->last < L ? m->ck->last - 1 : L - 1;
    *head = m->ck->last == L + 1;
}

/* What layer l (or the head, l = n_layer) reads. */
static const float *block_input(const weft_model *m, int l)
{
    const ll_acts *a = m->s->arch;
    return l + 1 == m->ck->first || l == 0 ? a->x0 : a->l[l - 1].r2;
}

/* bf16: the rounded copy of weight tensor i, from its row r */
static uint16_t *w16_of(const weft_model *m, int i, int r)
{
    if (!m->w16)
        return NULL;
    const model_tensor *t = &m->tensors[m->gmap[i]];
    return m->w16 + t->info.offset + (size_t)r * (size_t)t->info.shape[1];
}

static void set_weights16(const weft_model *m, ll_layer *g, int l, const dims *d)
{
    g->q_s.w = w16_of(m, tix(&m->cfg, l, T_Q), 0);
    g->k_s.w = w16_of(m, tix(&m->cfg, l, T_K), d->kvrow);
    g->v_s.w = w16_of(m, tix(&m->cfg, l, T_V), d->kvrow);
    g->o_s.w = w16_of(m, tix(&m->cfg, l, T_O), 0);
    g->gu_s.w = d->F ? w16_of(m, tix(&m->cfg, l, T_GATE), 0) : NULL;
    g->d_s.w = d->F ? w16_of(m, tix(&m->cfg, l, T_DOWN), 0) : NULL;
}

/* One layer's activations; tmp: bf16's shared fp32 matmul input. */
static void layout_layer(weft_model *m, carver *cv, ll_layer *g, int l, size_t BT, float *tmp)
{
    dims d = dims_of(m);
    int bf = m->prec == WEFT_PREC_BF16, sq = m->seqpar, sp = m->split, base = cv->base != NULL;
    size_t D = (size_t)d.D, R = sq ? BT / d.tp : BT, A = (size_t)d.H * d.hd;
    size_t KV = (size_t)d.G * d.hd, F = (size_t)d.F;
    size_t att = 2 * (size_t)m->s->B * d.H * m->s->T;
#define MMIN(f32, sv, n) do { \
        f32 = bf ? tmp : train_carve(cv, n); \
        (sv).x = bf ? train_carve16(cv, n) : NULL; \
    } while (0)
    MMIN(g->n1, g->q_s, BT * D);
    g->k_s.x = g->v_s.x = g->q_s.x;
    g->n1l = sq ? train_carve(cv, R * D) : g->n1;
    g->r1s = train_carve(cv, R);
    g->q = train_carve(cv, BT * A);
    g->k = train_carve(cv, BT * KV);
    g->v = train_carve(cv, BT * KV);
    g->att = train_carve(cv, att);
    MMIN(g->atty, g->o_s, BT * A);
    g->h1 = train_carve(cv, R * D);
    MMIN(g->n2, g->gu_s, BT * D);
    g->n2l = sq ? train_carve(cv, R * D) : g->n2;
    g->r2s = train_carve(cv, R);
    g->gu = train_carve(cv, BT * 2 * F);
    MMIN(g->hh, g->d_s, BT * F);
    g->r2 = train_carve(cv, R * D);
#undef MMIN
    g->kq = sp ? train_carve(cv, BT * A) : NULL;
    g->kk = sp ? train_carve(cv, BT * KV) : NULL;
    g->kv = sp ? train_carve(cv, BT * KV) : NULL;
    g->ko = sp ? train_carve(cv, BT * D) : NULL;
    g->kgu = sp ? train_carve(cv, BT * 2 * F) : NULL;
    g->kd = sp ? train_carve(cv, BT * D) : NULL;
    if (m->cfg.experts > 0) {
        /* the router's weight gradient reads the input in fp32 */
        moe_dims md = moe_dims_of(m, (int)BT);
        float *p = train_carve(cv, train_moe_acts_floats(&md));
        if (base)
            train_moe_acts_at(&g->mo, &md, p);
        if (bf) {
            g->n2 = train_carve(cv, BT * D);
            g->n2l = sq ? train_carve(cv, R * D) : g->n2;
        }
    }
    if (bf && base)
        set_weights16(m, g, l, &d);
}

size_t train_llama_layout(weft_model *m, float *base, int B, int T)
{
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    carver cv = { base, 0 };
    dims d = dims_of(m);
    int bf = m->prec == WEFT_PREC_BF16, sq = m->seqpar, lo, hi, head;
    chunk_layers(m, &lo, &hi, &head);
    s->B = B;
    s->T = T;
    size_t BT = (size_t)B * T, D = (size_t)d.D, R = sq ? BT / d.tp : BT, V = (size_t)d.V;
    size_t A = (size_t)d.H * d.hd, KV = (size_t)d.G * d.hd, F = (size_t)d.F;
    size_t att = 2 * (size_t)B * d.H * T;
    float *tmp = bf ? train_carve(&cv, BT * (F > D ? F : D)) : NULL;
    a->x0 = train_carve(&cv, R * D);
    a->full = sq ? train_carve(&cv, BT * D) : NULL;
    a->cos_t = train_carve(&cv, (size_t)T * d.hd / 2);
    a->sin_t = train_carve(&cv, (size_t)T * d.hd / 2);
    if (base && m->cp) /* this rank's rows at their global positions */
        train_cp_rope_tables(train_attn_cp_rank(m->cp), train_attn_cp_size(m->cp), a->cos_t,
                             a->sin_t, T, d.hd, m->cfg.rope_theta);
    else if (base)
        train_rope_tables(a->cos_t, a->sin_t, T, d.hd, m->cfg.rope_theta);
    for (int l = lo; l <= hi; l++) {
        ll_layer *g = &a->l[l];
        if (m->recompute && l > lo) {
            /* one block's activations, rebuilt by backward; each block's
             * output is the next one's input, kept */
            *g = a->l[lo];
            g->r2 = train_carve(&cv, R * D);
            if (bf && base)
                set_weights16(m, g, l, &d);
            continue;
        }
        layout_layer(m, &cv, g, l, BT, tmp);
    }
    s->logits = s->probs = NULL;
    if (head) {
        a->nf = bf ? tmp : train_carve(&cv, BT * D);
        a->logit_s.x = bf ? train_carve16(&cv, BT * D) : NULL;
        a->logit_s.w = bf && base ? w16_of(m, head_ix(&m->cfg), 0) : NULL;
        a->nfl = sq ? train_carve(&cv, R * D) : a->nf;
        a->nfs = train_carve(&cv, R);
        s->logits = train_carve(&cv, BT * V);
        s->probs = train_carve(&cv, BT * V);
    }
    int layers = hi >= lo, moe = layers && m->cfg.experts > 0;
    a->dres = train_carve(&cv, R * D);
    /* with experts the gate gradients lie after the MLP's input gradient:
     * one all-reduce sums both over the group */
    size_t gates = moe ? BT * (size_t)m->cfg.topk : 0;
    a->dbr = train_carve(&cv, (sq ? R : BT) * D + gates);
    a->dq = layers ? train_carve(&cv, BT * A) : NULL;
    a->dk = layers ? train_carve(&cv, BT * KV) : NULL;
    a->dv = layers ? train_carve(&cv, BT * KV) : NULL;
    a->datt = layers ? train_carve(&cv, att) : NULL;
    a->datt_y = layers ? train_carve(&cv, BT * A) : NULL;
    a->dh = layers ? train_carve(&cv, BT * F) : NULL;
    a->dgu = layers ? train_carve(&cv, BT * 2 * F) : NULL;
    a->dsum = layers ? train_carve(&cv, BT * D) : NULL;
    a->dmo = moe && sq ? train_carve(&cv, BT * D) : NULL;
    if (moe) {
        moe_dims md = moe_dims_of(m, (int)BT);
        float *p = train_carve(&cv, train_moe_scratch_floats(&md));
        if (base) {
            train_moe_scratch_at(&a->ms, &md, p);
            a->ms.dg = a->dbr + (sq ? R : BT) * D;
        }
    }
    size_t widest = head && V > 2 * F ? V : 2 * F > D ? 2 * F : D;
    s->lin_scratch = bf ? train_carve16(&cv, BT * widest) : NULL;
    if (base) {
        s->out = head ? NULL : hi >= lo ? a->l[hi].r2 : a->x0;
        s->in = m->ck->first > 0 ? a->x0 : NULL;
    }
    return cv.used;
}

/* A row-parallel layer's partial products: summed over the group (all of
 * out's rows) or reduce-scattered from full into out (this rank's rows). */
static int row_parallel_sum(weft_model *m, float *full, float *out, size_t nR)
{
    if (m->tp_size == 1)
        return 0;
    return m->seqpar ? train_tp_reduce_scatter(m, full, out, nR)
                     : train_tp_allreduce(m, out, nR, WEFT_SUM);
}

/* A column-parallel layer's input gradient: its partial sums over the
 * group, into every row (din) or this rank's rows (from full into din);
 * tail: floats after din's rows summed with them (the experts' gates'). */
static int column_parallel_grad_tail(weft_model *m, float *full, float *din, size_t nR,
                                     size_t tail)
{
    if (m->tp_size == 1)
        return 0;
    return m->seqpar ? train_tp_reduce_scatter(m, full, din, nR)
                     : train_tp_allreduce(m, din, nR + tail, WEFT_SUM);
}

static int column_parallel_grad(weft_model *m, float *full, float *din, size_t nR)
{
    return column_parallel_grad_tail(m, full, din, nR, 0);
}

/* Gradients that are each rank's share, summed over the group once, at the
 * step's last backward (announce) before anyone is told: the norms' under
 * sequence parallelism, and k and v where every rank holds them whole
 * (each rank added only its kv head's). */
static int group_sum(weft_model *m, int tensor)
{
    if (!m->announce || m->tp_size == 1)
        return 0;
    const model_tensor *t = &m->tensors[m->gmap[tensor]];
    return train_tp_allreduce(m, m->grads + t->info.offset, t->info.numel, WEFT_SUM);
}

static int layer_sums(weft_model *m, int l)
{
    int rc = 0;
    if (m->seqpar) {
        rc = group_sum(m, tix(&m->cfg, l, T_ANORM));
        rc = rc ? rc : group_sum(m, tix(&m->cfg, l, T_MNORM));
    }
    if (m->tp_size > 1 && m->cfg.n_kv_head % m->tp_size) {
        rc = rc ? rc : group_sum(m, tix(&m->cfg, l, T_K));
        rc = rc ? rc : group_sum(m, tix(&m->cfg, l, T_V));
    }
    return rc;
}

/* Block l's forward, from its input to its output r2 (also what backward
 * reruns under recomputation). */
static int layer_forward(weft_model *m, int l)
{
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    dims d = dims_of(m);
    int B = s->B, T = s->T, BT = B * T, sq = m->seqpar, R = sq ? BT / d.tp : BT, rc = 0;
    int A = d.H * d.hd, KV = d.G * d.hd, D = d.D;
    size_t nR = (size_t)R * D, kvo = (size_t)d.kvrow * D;
    float *P = m->params, eps = m->cfg.rms_eps;
    ll_layer *g = &a->l[l];
    const float *x = block_input(m, l);
#define W(j) train_model_tensor_ptr(m, P, tix(&m->cfg, l, j))
    train_rmsnorm_forward(g->n1l, g->r1s, x, W(T_ANORM), R, D, eps);
    if (sq)
        rc = train_tp_allgather(m, g->n1l, g->n1, nR);
    train_linear_forward(&lc, &g->q_s, g->q, g->n1, W(T_Q), NULL, BT, D, A);
    train_linear_forward(&lc, &g->k_s, g->k, g->n1, W(T_K) + kvo, NULL, BT, D, KV);
    train_linear_forward(&lc, &g->v_s, g->v, g->n1, W(T_V) + kvo, NULL, BT, D, KV);
    train_rope_forward(g->q, a->cos_t, a->sin_t, BT, T, A, d.H, d.hd);
    train_rope_forward(g->k, a->cos_t, a->sin_t, BT, T, KV, d.G, d.hd);
    if (m->cp) /* the sequence over the group: the kv heads around its ring */
        rc = rc ? rc : train_attn_cp_forward(m->cp, m->mm, g->atty, g->att, g->q, g->k, g->v, A,
                                             KV, KV, B, T, d.H, d.G, d.hd);
    else
        train_attention_gqa_forward_prec(m->mm, lc.bf16, g->atty, g->att, g->q, g->k, g->v, A,
                                         KV, KV, B, T, d.H, d.G, d.hd);
    train_linear_forward(&lc, &g->o_s, sq ? a->full : g->h1, g->atty, W(T_O), NULL, BT, A, D);
    rc = rc ? rc : row_parallel_sum(m, a->full, g->h1, nR);
    train_residual_forward(g->h1, g->h1, x, nR);
    train_rmsnorm_forward(g->n2l, g->r2s, g->h1, W(T_MNORM), R, D, eps);
    if (sq)
        rc = rc ? rc : train_tp_allgather(m, g->n2l, g->n2, nR);
    /* the shared experts' and the experts' partial outputs (each rank its
     * share of every expert's width) summed over the group at once */
    float *mlp = sq ? a->full : g->r2;
    if (d.F > 0) {
        /* gate and up lie one after the other: one product of 2F rows */
        train_linear_forward(&lc, &g->gu_s, g->gu, g->n2, W(T_GATE), NULL, BT, D, 2 * d.F);
        train_swiglu_forward(g->hh, g->gu, BT, d.F);
        train_linear_forward(&lc, &g->d_s, mlp, g->hh, W(T_DOWN), NULL, BT, d.F, D);
    } else {
        memset(mlp, 0, sizeof(float) * (size_t)BT * D);
    }
    if (m->cfg.experts > 0)
        rc = rc ? rc : train_moe_block_forward(m, l, tix(&m->cfg, l, T_ROUTER), &g->mo, mlp,
                                               g->n2);
    rc = rc ? rc : row_parallel_sum(m, a->full, g->r2, nR);
    train_residual_forward(g->r2, g->r2, g->h1, nR);
#undef W
    return rc;
}

static int embedding_forward(weft_model *m, const int32_t *tok, int B, int T)
{
    ll_acts *a = m->s->arch;
    dims d = dims_of(m);
    int BT = B * T, rc = 0;
    size_t nR = (size_t)(m->seqpar ? BT / d.tp : BT) * d.D;
    const float *wte = train_model_tensor_ptr(m, m->params, 0);
    if (d.tp == 1) {
        train_token_embedding_forward(a->x0, tok, wte, 0, m->cfg.vocab, BT, d.D);
        return 0;
    }
    /* each rank its words; the parts add up over the group (one term is
     * not zero), or each rank its rows */
    train_token_embedding_forward(m->seqpar ? a->full : a->x0, tok, wte, m->tp_rank * d.V, d.V,
                                  BT, d.D);
    rc = m->seqpar ? train_tp_reduce_scatter(m, a->full, a->x0, nR)
                   : train_tp_allreduce(m, a->x0, (size_t)BT * d.D, WEFT_SUM);
    return rc;
}

static int head_forward(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    dims d = dims_of(m);
    int BT = s->B * s->T, R = m->seqpar ? BT / d.tp : BT, nx = norm_ix(c), hx = head_ix(c);
    int rc = train_model_params(m, 0, nx, c->tied ? 1 : 2, 1);
    rc = c->tied ? train_model_params(m, rc, 0, 1, 1) : rc;
    if (rc == 0) {
        train_rmsnorm_forward(a->nfl, a->nfs, block_input(m, c->n_layer),
                              train_model_tensor_ptr(m, m->params, nx), R, d.D, c->rms_eps);
        if (m->seqpar)
            rc = train_tp_allgather(m, a->nfl, a->nf, (size_t)R * d.D);
        train_linear_forward(&lc, &a->logit_s, s->logits, a->nf,
                             train_model_tensor_ptr(m, m->params, hx), NULL, BT, d.D, d.V);
    }
    rc = c->tied ? train_model_params(m, rc, 0, 1, 0) : rc;
    return train_model_params(m, rc, nx, c->tied ? 1 : 2, 0);
}

int train_llama_forward(weft_model *m, const void *in, int B, int T)
{
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    int lo, hi, head, rc = 0, BT = B * T;
    chunk_layers(m, &lo, &hi, &head);
    if (m->ck->first == 0) {
        memcpy(s->tokens, in, sizeof(int32_t) * (size_t)BT);
        rc = train_model_params(m, rc, 0, 1, 1);
        rc = rc ? rc : embedding_forward(m, in, B, T);
        rc = train_model_params(m, rc, 0, 1, 0);
    } else {
        size_t R = (size_t)(m->seqpar ? BT / m->tp_size : BT);
        memcpy(a->x0, in, sizeof(float) * R * (size_t)m->cfg.d_model);
    }
    for (int l = lo; l <= hi && rc == 0; l++) {
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 1);
        rc = rc ? rc : layer_forward(m, l);
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 0);
    }
    if (head && rc == 0)
        rc = head_forward(m);
    return rc;
}

/* The embedding's gradient needs every row's: gathered first under
 * sequence parallelism. */
static int embedding_backward(weft_model *m, ll_acts *a, const int32_t *tok, int B, int T)
{
    dims d = dims_of(m);
    const float *g = a->dres;
    if (m->seqpar) {
        int rc = train_tp_allgather(m, a->dres, a->full, (size_t)B * T / d.tp * d.D);
        if (rc)
            return rc;
        g = a->full;
    }
    train_token_embedding_backward(train_model_tensor_ptr(m, m->grads, 0), g, tok,
                                   d.tp > 1 ? m->tp_rank * d.V : 0, d.tp > 1 ? d.V : m->cfg.vocab,
                                   B * T, d.D);
    return 0;
}

/* The weight half: from the douts the input half kept. */
static int llama_backward_weight(weft_model *m)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    dims d = dims_of(m);
    int A = d.H * d.hd, KV = d.G * d.hd, D = d.D;
    int BT = s->B * s->T, lo, hi, head, rc = 0, nx = norm_ix(c);
    size_t kvo = (size_t)d.kvrow * D;
    float *G = m->grads;
    chunk_layers(m, &lo, &hi, &head);
    if (head) {
        train_linear_backward_weight(&lc, &a->logit_s, train_model_tensor_ptr(m, G, head_ix(c)),
                                     NULL, s->probs, a->nf, BT, D, d.V);
        rc = m->seqpar ? group_sum(m, nx) : 0;
        train_model_grads_ready(m, nx, c->tied ? 1 : 2);
    }
    for (int l = hi; l >= lo; l--) {
        ll_layer *g = &a->l[l];
#define DW(j) train_model_tensor_ptr(m, G, tix(&m->cfg, l, j))
        if (d.F > 0) {
            train_linear_backward_weight(&lc, &g->d_s, DW(T_DOWN), NULL, g->kd, g->hh, BT, d.F,
                                         D);
            train_linear_backward_weight(&lc, &g->gu_s, DW(T_GATE), NULL, g->kgu, g->n2, BT, D,
                                         2 * d.F);
        }
        train_linear_backward_weight(&lc, &g->o_s, DW(T_O), NULL, g->ko, g->atty, BT, A, D);
        train_linear_backward_weight(&lc, &g->q_s, DW(T_Q), NULL, g->kq, g->n1, BT, D, A);
        train_linear_backward_weight(&lc, &g->k_s, DW(T_K) + kvo, NULL, g->kk, g->n1, BT, D, KV);
        train_linear_backward_weight(&lc, &g->v_s, DW(T_V) + kvo, NULL, g->kv, g->n1, BT, D, KV);
#undef DW
        rc = rc ? rc : layer_sums(m, l);
        rc = rc ? rc : train_moe_block_step_end(m, l, tix(&m->cfg, l, T_ROUTER));
        train_model_grads_ready(m, tix(&m->cfg, l, 0), per_layer(&m->cfg));
    }
    if (m->ck->first == 0) {
        rc = rc ? rc : embedding_backward(m, a, s->tokens, s->B, s->T);
        train_model_grads_ready(m, 0, 1);
    }
    return rc;
}

/* One linear layer's backward: whole, or (split) its input half with its
 * dout kept for the weight half. */
static void lin_back(const lin_ctx *lc, const lin_save *sv, int split, float *keep, float *din,
                     float *dw, const float *dout, const float *in, const float *w, int rows,
                     int k, int n)
{
    if (!split) {
        train_linear_backward(lc, sv, din, dw, NULL, dout, in, w, rows, k, n);
        return;
    }
    if (keep)
        memcpy(keep, dout, sizeof(float) * (size_t)rows * n);
    train_linear_backward_input(lc, sv, din, dout, w, rows, k, n);
}

static void add_into(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Under --sp, once the experts' input gradients are in cin (every row,
 * each rank's part): the gate gradients summed over the group alone, the
 * router's backward on every rank from them, its input gradient (the same
 * everywhere) added to cin on tensor rank 0 only, then cin
 * reduce-scattered into dbr (each rank its rows), so it counts once. */
static int sp_router_backward(weft_model *m, int l, float *cin, size_t nR)
{
    ll_acts *a = m->s->arch;
    moe_dims md = moe_dims_of(m, m->s->B * m->s->T);
    size_t nB = (size_t)md.N * md.D;
    int rc = train_tp_allreduce(m, a->ms.dg, (size_t)md.N * md.K, WEFT_SUM);
    if (rc)
        return rc;
    memset(a->dsum, 0, sizeof(float) * nB);
    train_moe_backward_router(m->mm, &md, &a->l[l].mo, &a->ms, a->dsum,
                              train_model_tensor_ptr(m, m->grads, tix(&m->cfg, l, T_ROUTER)),
                              a->l[l].n2,
                              train_model_tensor_ptr(m, m->params, tix(&m->cfg, l, T_ROUTER)),
                              m->bw_weight);
    if (m->tp_rank == 0)
        add_into(cin, a->dsum, nB);
    return train_tp_reduce_scatter(m, cin, a->dbr, nR);
}

/* Block l's input half (and, unsplit, its weights): a->dres from its
 * output's gradient to its input's. cin: the whole rows of a
 * column-parallel layer's input gradient. */
static int layer_backward(weft_model *m, int l, int sp, float *cin)
{
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    dims d = dims_of(m);
    int B = s->B, T = s->T, BT = B * T, sq = m->seqpar, R = sq ? BT / d.tp : BT, rc = 0;
    int A = d.H * d.hd, KV = d.G * d.hd, D = d.D, F = d.F;
    size_t nR = (size_t)R * D, kvo = (size_t)d.kvrow * D;
    float *P = m->params, *G = m->grads;
    ll_layer *g = &a->l[l];
    const float *x = block_input(m, l), *rdout = a->dres;
#define W(j) train_model_tensor_ptr(m, P, tix(&m->cfg, l, j))
#define DW(j) train_model_tensor_ptr(m, G, tix(&m->cfg, l, j))
    if (sq) { /* Megatron's g backward: the rows of every rank */
        rc = train_tp_allgather(m, a->dres, a->full, nR);
        rdout = a->full;
    }
    /* the MLP's dout: under --sp full is cin too, and the experts read
     * dout after the shared experts wrote cin */
    const float *mdout = rdout;
    if (sq && m->cfg.experts > 0) {
        memcpy(a->dmo, a->full, sizeof(float) * (size_t)BT * D);
        mdout = a->dmo;
    }
    if (F > 0) {
        lin_back(&lc, &g->d_s, sp, g->kd, a->dh, DW(T_DOWN), mdout, g->hh, W(T_DOWN), BT, F, D);
        train_swiglu_backward(a->dgu, a->dh, g->gu, BT, F);
        lin_back(&lc, &g->gu_s, sp, g->kgu, cin, DW(T_GATE), a->dgu, g->n2, W(T_GATE), BT, D,
                 2 * F);
    } else {
        memset(cin, 0, sizeof(float) * (size_t)BT * D);
    }
    /* the experts' weights are done here even in a split backward; under
     * tp their input gradients and gate gradients are each rank's part,
     * summed with the shared experts' input gradient; the router's input
     * gradient, the same on every rank, joins the sum once */
    moe_dims md = moe_dims_of(m, BT);
    if (m->cfg.experts > 0) {
        int r = train_moe_backward_experts(m->mm, &md, &g->mo, &a->ms, cin, DW(T_EGU),
                                           DW(T_EDOWN), mdout, W(T_EGU), W(T_EDOWN));
        rc = rc ? rc : r;
    }
    if (sq && m->cfg.experts > 0)
        rc = rc ? rc : sp_router_backward(m, l, cin, nR);
    else
        rc = rc ? rc : column_parallel_grad_tail(m, cin, a->dbr, nR,
                                                 m->cfg.experts > 0 ? (size_t)BT * md.K : 0);
    if (!sq && m->cfg.experts > 0 && rc == 0)
        train_moe_backward_router(m->mm, &md, &g->mo, &a->ms, a->dbr, DW(T_ROUTER), g->n2,
                                  W(T_ROUTER), m->bw_weight);
    train_rmsnorm_backward(a->dres, DW(T_MNORM), a->dbr, g->h1, W(T_MNORM), g->r2s, R, D);
    if (sq)
        rc = rc ? rc : train_tp_allgather(m, a->dres, a->full, nR);
    lin_back(&lc, &g->o_s, sp, g->ko, a->datt_y, DW(T_O), rdout, g->atty, W(T_O), BT, A, D);
    if (m->cp)
        rc = rc ? rc : train_attn_cp_backward(m->cp, m->mm, a->dq, a->dk, a->dv, a->datt,
                                              a->datt_y, g->q, g->k, g->v, g->atty, g->att, A,
                                              KV, KV, B, T, d.H, d.G, d.hd);
    else
        train_attention_gqa_backward_prec(m->mm, lc.bf16, a->dq, a->dk, a->dv, a->datt,
                                          a->datt_y, g->q, g->k, g->v, g->att, A, KV, KV, B, T,
                                          d.H, d.G, d.hd);
    train_rope_backward(a->dq, a->cos_t, a->sin_t, BT, T, A, d.H, d.hd);
    train_rope_backward(a->dk, a->cos_t, a->sin_t, BT, T, KV, d.G, d.hd);
    /* q, k and v read the same input: their input gradients add up */
    size_t nB = (size_t)BT * D;
    lin_back(&lc, &g->q_s, sp, g->kq, cin, DW(T_Q), a->dq, g->n1, W(T_Q), BT, D, A);
    lin_back(&lc, &g->k_s, sp, g->kk, a->dsum, DW(T_K) + kvo, a->dk, g->n1, W(T_K) + kvo, BT, D, KV);
    add_into(cin, a->dsum, nB);
    lin_back(&lc, &g->v_s, sp, g->kv, a->dsum, DW(T_V) + kvo, a->dv, g->n1, W(T_V) + kvo, BT, D, KV);
    add_into(cin, a->dsum, nB);
    rc = rc ? rc : column_parallel_grad(m, cin, a->dbr, nR);
    train_rmsnorm_backward(a->dres, DW(T_ANORM), a->dbr, x, W(T_ANORM), g->r1s, R, D);
#undef W
#undef DW
    return rc;
}

static int head_backward(weft_model *m, int sp, float *cin)
{
    const weft_model_config *c = &m->cfg;
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    lin_ctx lc = train_model_lin(m);
    dims d = dims_of(m);
    int BT = s->B * s->T, R = m->seqpar ? BT / d.tp : BT, nx = norm_ix(c), hx = head_ix(c);
    size_t nR = (size_t)R * d.D;
    float *P = m->params, *G = m->grads;
    int rc = c->tied ? train_model_params(m, 0, 0, 1, 1) : 0;
    rc = train_model_params(m, rc, nx, c->tied ? 1 : 2, 1);
    if (rc)
        return rc;
    lin_back(&lc, &a->logit_s, sp, NULL, cin, train_model_tensor_ptr(m, G, hx), s->probs, a->nf,
             train_model_tensor_ptr(m, P, hx), BT, d.D, d.V);
    rc = column_parallel_grad(m, cin, a->dbr, nR);
    memset(a->dres, 0, nR * sizeof(float));
    train_rmsnorm_backward(a->dres, train_model_tensor_ptr(m, G, nx), a->dbr,
                           block_input(m, c->n_layer), train_model_tensor_ptr(m, P, nx), a->nfs,
                           R, d.D);
    rc = train_model_params(m, rc, nx, c->tied ? 1 : 2, 0);
    rc = c->tied ? train_model_params(m, rc, 0, 1, 0) : rc;
    if (!sp) {
        rc = rc ? rc : m->seqpar ? group_sum(m, nx) : 0;
        train_model_grads_ready(m, nx, c->tied ? 1 : 2);
    }
    return rc;
}

/* dout: the gradient of the chunk's output when it is not the last chunk
 * (the last starts from d(loss)/d(logits), in probs). */
int train_llama_backward(weft_model *m, const float *dout, int part)
{
    if (part == PART_WEIGHT)
        return llama_backward_weight(m);
    model_slot *s = m->s;
    ll_acts *a = s->arch;
    int sp = part == PART_INPUT, sq = m->seqpar, lo, hi, head, rc = 0;
    int BT = s->B * s->T, R = sq ? BT / m->tp_size : BT;
    size_t nR = (size_t)R * m->cfg.d_model;
    /* the whole rows a column-parallel layer's input gradient is summed
     * from: under sequence parallelism a buffer of their own */
    float *cin = sq ? a->full : a->dbr;
    chunk_layers(m, &lo, &hi, &head);
    if (head)
        rc = head_backward(m, sp, cin);
    else
        memcpy(a->dres, dout, nR * sizeof(float));
    for (int l = hi; l >= lo && rc == 0; l--) {
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 1);
        /* the block's activations as its forward made them (the last
         * block's are still there) */
        if (rc == 0 && m->recompute && l < hi) {
            a->moe.replay = 1;
            rc = layer_forward(m, l);
            a->moe.replay = 0;
        }
        rc = rc ? rc : layer_backward(m, l, sp, cin);
        rc = train_model_params(m, rc, tix(&m->cfg, l, 0), per_layer(&m->cfg), 0);
        if (!sp) {
            rc = rc ? rc : layer_sums(m, l);
            rc = rc ? rc : train_moe_block_step_end(m, l, tix(&m->cfg, l, T_ROUTER));
            train_model_grads_ready(m, tix(&m->cfg, l, 0), per_layer(&m->cfg));
        }
    }
    /* a tied embedding also got the logits' gradient, so it is done only now */
    if (m->ck->first == 0 && !sp) {
        rc = rc ? rc : embedding_backward(m, a, s->tokens, s->B, s->T);
        train_model_grads_ready(m, 0, 1);
    }
    s->din = m->ck->first > 0 ? a->dres : NULL;
    return rc;
}
