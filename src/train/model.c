/* The model handle: config, flat parameter/gradient buffers and their
 * tensor table, matmul backend, activation arena; forward and backward
 * are passed on to the MLP or GPT code. */
#include "train/model.h"

#include "core/huge.h"
#include "core/param.h"
#include "train/attention_cp.h"
#include "train/moe.h"
#include "train/moe_ep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float *train_carve(carver *c, size_t n)
{
    /* 16-float alignment keeps every buffer on a cache line */
    size_t at = c->used;
    c->used += (n + 15) & ~(size_t)15;
    return c->base ? c->base + at : NULL;
}

uint16_t *train_carve16(carver *c, size_t n)
{
    return (uint16_t *)train_carve(c, (n + 1) / 2);
}

lin_ctx train_model_lin(weft_model *m)
{
    lin_ctx c = { m->mm, m->prec == WEFT_PREC_BF16, m->s->lin_scratch };
    return c;
}

int weft_model_config_check(const weft_model_config *c)
{
    if (!c)
        return WEFT_EINVAL;
    if (c->type == WEFT_MODEL_MLP) {
        if (c->n_widths < 2 || c->n_widths > WEFT_MLP_MAX_WIDTHS)
            return WEFT_EINVAL;
        for (int i = 0; i < c->n_widths; i++)
            if (c->widths[i] < 1 || c->widths[i] > (1 << 24))
                return WEFT_EINVAL;
        if (c->activation != WEFT_ACT_RELU && c->activation != WEFT_ACT_GELU)
            return WEFT_EINVAL;
        return 0;
    }
    if (c->type == WEFT_MODEL_LLAMA)
        return train_llama_check(c);
    if (c->type == WEFT_MODEL_GPT) {
        if (c->vocab < 2 || c->vocab > (1 << 24) || c->ctx < 1 || c->ctx > (1 << 16) ||
            c->n_layer < 1 || c->n_layer > 1024 || c->n_head < 1 || c->d_model < 1 ||
            c->d_model > (1 << 16) || c->d_model % c->n_head != 0)
            return WEFT_EINVAL;
        return train_moe_check_gpt(c);
    }
    return WEFT_EINVAL;
}

static int parse_int(const char **s, int32_t *out)
{
    char *end;
    long v = strtol(*s, &end, 10);
    if (end == *s || v < 0 || v > (1L << 30))
        return WEFT_EINVAL;
    *out = (int32_t)v;
    *s = end;
    return 0;
}

int weft_model_config_parse(const char *s, weft_model_config *cfg)
{
    if (!s || !cfg)
        return WEFT_EINVAL;
    weft_model_config c;
    memset(&c, 0, sizeof c);
    if (strncmp(s, "mlp:", 4) == 0) {
        c.type = WEFT_MODEL_MLP;
        s += 4;
        for (;;) {
            if (c.n_widths == WEFT_MLP_MAX_WIDTHS || parse_int(&s, &c.widths[c.n_widths]))
                return WEFT_EINVAL;
            c.n_widths++;
            if (*s != '-')
                break;
            s++;
        }
        if (*s == ':') {
            s++;
            if (strcmp(s, "relu") == 0)
                c.activation = WEFT_ACT_RELU;
            else if (strcmp(s, "gelu") == 0)
                c.activation = WEFT_ACT_GELU;
            else
                return WEFT_EINVAL;
        } else if (*s) {
            return WEFT_EINVAL;
        }
    } else if (strncmp(s, "llama:", 6) == 0) {
        int rc = train_llama_parse(s + 6, &c);
        if (rc)
            return rc;
    } else if (strncmp(s, "gpt:", 4) == 0) {
        c.type = WEFT_MODEL_GPT;
        s += 4;
        while (*s) {
            static const char *const keys[] = { "vocab=", "ctx=", "layers=", "heads=", "dim=" };
            int32_t *dst[] = { &c.vocab, &c.ctx, &c.n_layer, &c.n_head, &c.d_model };
            int k;
            for (k = 0; k < 5; k++)
                if (strncmp(s, keys[k], strlen(keys[k])) == 0)
                    break;
            if (k == 5 && train_moe_parse_key(&s, &c)) /* experts=E,topk=K,... */
                return WEFT_EINVAL;
            if (k < 5) {
                s += strlen(keys[k]);
                if (parse_int(&s, dst[k]))
                    return WEFT_EINVAL;
            }
            if (*s == ',')
                s++;
            else if (*s)
                return WEFT_EINVAL;
        }
    } else {
        return WEFT_EINVAL;
    }
    int rc = weft_model_config_check(&c);
    if (rc)
        return rc;
    *cfg = c;
    return 0;
}

int weft_model_config_format(const weft_model_config *c, char *buf, size_t len)
{
    if (!c || (!buf && len))
        return WEFT_EINVAL;
    if (c->type == WEFT_MODEL_LLAMA)
        return train_llama_format(c, buf, len);
    if (c->type == WEFT_MODEL_GPT) {
        char moe[256];
        train_moe_format(c, moe, sizeof moe);
        return snprintf(buf, len, "gpt:vocab=%d,ctx=%d,layers=%d,heads=%d,dim=%d%s",
                        c->vocab, c->ctx, c->n_layer, c->n_head, c->d_model, moe);
    }
    if (c->type != WEFT_MODEL_MLP || c->n_widths < 1 || c->n_widths > WEFT_MLP_MAX_WIDTHS)
        return WEFT_EINVAL;
    char tmp[256];
    int n = snprintf(tmp, sizeof tmp, "mlp:");
    for (int i = 0; i < c->n_widths; i++)
        n += snprintf(tmp + n, sizeof tmp - (size_t)n, i ? "-%d" : "%d", c->widths[i]);
    if (c->activation == WEFT_ACT_GELU)
        n += snprintf(tmp + n, sizeof tmp - (size_t)n, ":gelu");
    return snprintf(buf, len, "%s", tmp);
}

/* WEFT_MATMUL: the table's words are in MM_AUTO, MM_PORTABLE, MM_OPENBLAS
 * order. */
static int backend_from_env(int *out)
{
    return param_read_int(PARAM_matmul, out, NULL, 0);
}

int weft_model_block_count(const weft_model_config *cfg)
{
    return weft_model_config_check(cfg) ? WEFT_EINVAL : train_model_blocks(cfg);
}

float *train_model_vector(size_t n)
{
    return huge_alloc(n * sizeof(float));
}

int weft_model_create(weft_model **out, const weft_model_config *cfg, uint64_t seed)
{
    if (!out)
        return WEFT_EINVAL;
    int rc = weft_model_config_check(cfg);
    if (rc)
        return rc;
    weft_block_range all = { 0, train_model_blocks(cfg) };
    return weft_model_create_stage(out, cfg, seed, &all, 1, 0);
}

/* Chunks in increasing block order, disjoint, inside the model. */
static int chunks_valid(const weft_model_config *cfg, const weft_block_range *ch, int n)
{
    int nb = train_model_blocks(cfg), end = 0;
    if (!ch || n < 1 || n > WEFT_STAGE_MAX_CHUNKS)
        return 0;
    for (int k = 0; k < n; k++) {
        if (ch[k].count < 1 || ch[k].first < end || ch[k].first > nb - ch[k].count)
            return 0;
        end = ch[k].first + ch[k].count;
    }
    return 1;
}

int weft_model_create_stage(weft_model **out, const weft_model_config *cfg, uint64_t seed,
                            const weft_block_range *chunks, int nchunks, unsigned flags)
{
    return weft_model_create_tp(out, cfg, seed, chunks, nchunks, flags, NULL, 1, 0);
}

/* Tensor parallelism cuts heads (GPT) or hidden widths (MLP) evenly. */
static int tp_fits(const weft_model_config *c, int T)
{
    if (T == 1)
        return 1;
    if (c->type == WEFT_MODEL_GPT)
        return c->n_head % T == 0 && train_moe_tp_fits(c, T);
    if (c->type == WEFT_MODEL_LLAMA)
        return train_llama_tp_fits(c, T);
    int L = c->n_widths - 1;
    for (int l = 0; l + 1 < L; l += 2) /* a column-parallel layer and its row-parallel pair */
        if (c->widths[l + 1] % T)
            return 0;
    return 1;
}

int weft_model_create_tp(weft_model **out, const weft_model_config *cfg, uint64_t seed,
                         const weft_block_range *chunks, int nchunks, unsigned flags,
                         weft_comm *tp, int tp_size, int tp_rank)
{
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    int rc = weft_model_config_check(cfg);
    if (rc)
        return rc;
    if (tp) {
        tp_size = weft_comm_size(tp);
        tp_rank = weft_comm_rank(tp);
    }
    unsigned known = WEFT_STAGE_SPLIT_BACKWARD | WEFT_STAGE_SEQUENCE_PARALLEL | WEFT_STAGE_NO_INIT |
                     TRAIN_STAGE_UNTOUCHED;
    if (!chunks_valid(cfg, chunks, nchunks) || (flags & ~known) ||
        tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size || !tp_fits(cfg, tp_size))
        return WEFT_EINVAL;
    weft_model *m = calloc(1, sizeof *m);
    if (!m)
        return WEFT_ENOMEM;
    m->cfg = *cfg;
    m->tp = tp;
    m->tp_size = tp_size;
    m->tp_rank = tp_rank;
    /* sequence parallelism splits a GPT's rows, over tp ranks only */
    m->seqpar = (flags & WEFT_STAGE_SEQUENCE_PARALLEL) && tp_size > 1 && cfg->type != WEFT_MODEL_MLP;
    m->nblocks = train_model_blocks(cfg);
    m->split = (flags & WEFT_STAGE_SPLIT_BACKWARD) != 0;
    m->announce = 1;
    m->chunk = calloc((size_t)nchunks, sizeof *m->chunk);
    if (!m->chunk) {
        free(m);
        return WEFT_ENOMEM;
    }
    m->nchunk = nchunks;
    for (int k = 0; k < nchunks; k++) {
        m->chunk[k].first = chunks[k].first;
        m->chunk[k].last = chunks[k].first + chunks[k].count - 1;
    }
    m->ck = &m->chunk[0];
    m->threads = train_mm_default_threads();
    rc = m->threads < 0 ? m->threads : backend_from_env(&m->backend);
    if (rc == 0)
        rc = train_model_table(m);
    if (rc == 0) {
        m->params = train_model_vector(m->nparams);
        m->grads = train_model_vector(m->nparams);
        if (!m->params || !m->grads)
            rc = WEFT_ENOMEM;
    }
    if (rc == 0)
        rc = train_mm_create(&m->mm, m->threads, m->backend);
    if (rc == WEFT_ENOTSUP && m->backend == MM_OPENBLAS) {
        m->backend = MM_PORTABLE;
        rc = train_mm_create(&m->mm, m->threads, m->backend);
    }
    if (rc) {
        weft_model_destroy(m);
        return rc;
    }
    if (!(flags & TRAIN_STAGE_UNTOUCHED)) { /* else the load and the first step write them */
        memset(m->grads, 0, m->nparams * sizeof(float));
        if (flags & WEFT_STAGE_NO_INIT)
            memset(m->params, 0, m->nparams * sizeof(float));
        else
            train_model_init(m, seed);
    }
    *out = m;
    return 0;
}

static void slot_free(model_slot *s)
{
    free(s->arena);
    free(s->tokens);
    free(s->targets);
    free(s->arch);
}

void weft_model_destroy(weft_model *m)
{
    if (!m)
        return;
    train_mm_destroy(m->mm);
    for (int k = 0; k < m->nchunk; k++) {
        for (int j = 0; j < m->chunk[k].nslot; j++)
            slot_free(&m->chunk[k].slot[j]);
        free(m->chunk[k].slot);
    }
    free(m->chunk);
    free(m->tensors);
    free(m->gmap);
    free(m->params);
    free(m->grads);
    free(m->w16);
    train_moe_ep_free(m->ep);
    train_attn_cp_free(m->cp);
    free(m);
}

const weft_model_config *weft_model_config_of(const weft_model *m)
{
    return m ? &m->cfg : NULL;
}

int weft_model_init_params(weft_model *m, uint64_t seed)
{
    if (!m)
        return WEFT_EINVAL;
    train_model_init(m, seed);
    return 0;
}

int weft_model_chunk_count(const weft_model *m)
{
    return m ? m->nchunk : 0;
}

int weft_model_chunk_range(const weft_model *m, int chunk, weft_block_range *r)
{
    if (!m || !r || chunk < 0 || chunk >= m->nchunk)
        return WEFT_EINVAL;
    r->first = m->chunk[chunk].first;
    r->count = m->chunk[chunk].last - m->chunk[chunk].first + 1;
    return 0;
}

int weft_model_tp_stats(const weft_model *m, uint64_t *calls, uint64_t *bytes)
{
    if (!m)
        return WEFT_EINVAL;
    if (calls)
        *calls = m->tp_calls;
    if (bytes)
        *bytes = m->tp_bytes;
    return 0;
}

int weft_model_tensor_whole_elem(const weft_model *m, int i, size_t e, size_t *whole)
{
    if (!m || !whole || i < 0 || i >= m->ntensors || e >= m->tensors[i].info.numel)
        return WEFT_EINVAL;
    long long w = train_tensor_whole_elem(m, i, e);
    if (w < 0)
        return 1;
    *whole = (size_t)w;
    return 0;
}

size_t weft_model_activation_bytes(const weft_model *m)
{
    return m && m->nchunk && m->chunk[0].nslot ? m->chunk[0].slot[0].arena_n * sizeof(float) : 0;
}

int weft_model_tied_tensor(const weft_model *m)
{
    return m ? m->tied : -1;
}

float *weft_model_params(weft_model *m, size_t *n)
{
    if (n)
        *n = m ? m->nparams : 0;
    return m ? m->params : NULL;
}

float *weft_model_grads(weft_model *m, size_t *n)
{
    if (n)
        *n = m ? m->nparams : 0;
    return m ? m->grads : NULL;
}

int weft_model_tensor_count(const weft_model *m)
{
    return m ? m->ntensors : 0;
}

int weft_model_tensor_info(const weft_model *m, int i, weft_tensor_info *out)
{
    if (!m || !out || i < 0 || i >= m->ntensors)
        return WEFT_EINVAL;
    *out = m->tensors[i].info;
    out->name = m->tensors[i].name;
    return 0;
}

int weft_model_tensor_find(const weft_model *m, const char *name)
{
    if (!m || !name)
        return WEFT_EINVAL;
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return WEFT_EINVAL;
}

int weft_model_set_precision(weft_model *m, weft_precision p)
{
    if (!m || (p != WEFT_PREC_FP32 && p != WEFT_PREC_BF16) || (m->seqpar && p == WEFT_PREC_BF16))
        return WEFT_EINVAL;
    if (p != m->prec) {
        m->prec = p;
        /* the next forward lays the arenas out anew */
        for (int k = 0; k < m->nchunk; k++)
            for (int j = 0; j < m->chunk[k].nslot; j++)
                m->chunk[k].slot[j].ready = 0;
    }
    return 0;
}

weft_precision weft_model_precision(const weft_model *m)
{
    return m ? m->prec : WEFT_PREC_FP32;
}

static int remake_mm(weft_model *m, int threads, int backend)
{
    mm_ctx *mm;
    int rc = train_mm_create(&mm, threads, backend);
    if (rc)
        return rc;
    train_mm_destroy(m->mm);
    m->mm = mm;
    m->threads = threads;
    m->backend = backend;
    return 0;
}

int weft_model_set_threads(weft_model *m, int n)
{
    if (!m)
        return WEFT_EINVAL;
    if (n <= 0 && (n = train_mm_default_threads()) < 0)
        return n;
    return remake_mm(m, n, m->backend);
}

int weft_model_threads(const weft_model *m)
{
    return m ? m->threads : 0;
}

int weft_model_set_matmul(weft_model *m, const char *name)
{
    if (!m || !name)
        return WEFT_EINVAL;
    int b;
    if (strcmp(name, "portable") == 0)
        b = MM_PORTABLE;
    else if (strcmp(name, "openblas") == 0)
        b = MM_OPENBLAS;
    else
        return WEFT_EINVAL;
    return remake_mm(m, m->threads, b);
}

const char *weft_model_matmul_name(const weft_model *m)
{
    return m ? train_mm_name(m->mm) : NULL;
}

/* Makes the current slot's arena big enough for B x T and lays it out. */
static int ensure_arena(weft_model *m, int B, int T)
{
    model_slot *s = m->s;
    if (m->prec == WEFT_PREC_BF16 && !m->w16) {
        m->w16 = malloc((m->nparams ? m->nparams : 1) * sizeof(uint16_t));
        if (!m->w16)
            return WEFT_ENOMEM;
    }
    int type = m->cfg.type;
    if (!s->arch && !(s->arch = type == WEFT_MODEL_MLP ? train_mlp_arch(m)
                              : type == WEFT_MODEL_LLAMA ? train_llama_arch(m) : train_gpt_arch(m)))
        return WEFT_ENOMEM;
    size_t need = type == WEFT_MODEL_MLP ? train_mlp_layout(m, NULL, B)
                : type == WEFT_MODEL_LLAMA ? train_llama_layout(m, NULL, B, T)
                : train_gpt_layout(m, NULL, B, T);
    if (need > s->arena_n) {
        float *a = aligned_alloc(64, need * sizeof(float));
        if (!a)
            return WEFT_ENOMEM;
        free(s->arena);
        s->arena = a;
        s->arena_n = need;
    }
    size_t rows = (size_t)B * T;
    if (rows > s->tok_cap) {
        int32_t *t1 = malloc(rows * sizeof *t1), *t2 = malloc(rows * sizeof *t2);
        if (!t1 || !t2) {
            free(t1);
            free(t2);
            return WEFT_ENOMEM;
        }
        free(s->tokens);
        free(s->targets);
        s->tokens = t1;
        s->targets = t2;
        s->tok_cap = rows;
    }
    if (type == WEFT_MODEL_MLP)
        train_mlp_layout(m, s->arena, B);
    else if (type == WEFT_MODEL_LLAMA)
        train_llama_layout(m, s->arena, B, T);
    else
        train_gpt_layout(m, s->arena, B, T);
    return 0;
}

/* Makes (chunk, slot) current, growing the chunk's slots to reach it. */
static int select_slot(weft_model *m, int chunk, int slot)
{
    if (chunk < 0 || chunk >= m->nchunk || slot < 0 || slot > 4096)
        return WEFT_EINVAL;
    model_chunk *ck = &m->chunk[chunk];
    if (slot >= ck->nslot) {
        model_slot *s = realloc(ck->slot, sizeof *s * (size_t)(slot + 1));
        if (!s)
            return WEFT_ENOMEM;
        memset(s + ck->nslot, 0, sizeof *s * (size_t)(slot + 1 - ck->nslot));
        ck->slot = s;
        ck->nslot = slot + 1;
    }
    m->ck = ck;
    m->s = &ck->slot[slot];
    return 0;
}

/* What crosses into a block: an MLP's row-parallel layer takes its
 * column-parallel partner's split output. */
static int chunk_width(const weft_model *m, int block)
{
    if (m->cfg.type != WEFT_MODEL_MLP)
        return m->cfg.d_model;
    return m->cfg.widths[block] / (block < m->nblocks && train_mlp_layer_kind(m, block) == 2
                                   ? m->tp_size : 1);
}

int weft_model_chunk_io(const weft_model *m, int chunk, int batch, int seq, size_t *in_floats,
                        size_t *out_floats)
{
    if (!m || chunk < 0 || chunk >= m->nchunk || batch < 1)
        return WEFT_EINVAL;
    size_t rows = (size_t)batch * (m->cfg.type != WEFT_MODEL_MLP ? (size_t)seq : 1);
    if (m->seqpar)
        rows /= (size_t)m->tp_size; /* this rank's rows of the residual stream */
    const model_chunk *ck = &m->chunk[chunk];
    if (in_floats)
        *in_floats = ck->first > 0 ? rows * (size_t)chunk_width(m, ck->first) : 0;
    if (out_floats)
        *out_floats = ck->last + 1 < m->nblocks ? rows * (size_t)chunk_width(m, ck->last + 1) : 0;
    return 0;
}

static uint64_t fnv(uint64_t h, int64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        h = (h ^ (uint64_t)(v & 0xff)) * 1099511628211ull;
    return h;
}

/* Everything that decides the shapes of this model's matrix products for
 * a batch (train_mm_begin): the config, the batch, this rank's part of
 * the model and of its tensors. */
static uint64_t mm_key(const weft_model *m, int batch, int T)
{
    const weft_model_config *c = &m->cfg;
    uint64_t h = 14695981039346656037ull;
    int64_t f[] = { c->type, c->n_widths, c->vocab, c->ctx, c->n_layer, c->n_head, c->d_model,
                    c->n_kv_head, c->ffn, c->tied, batch, T, m->tp_size, m->seqpar, m->nchunk,
                    m->split, m->recompute };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        h = fnv(h, f[i]);
    for (int i = 0; i < c->n_widths && i < WEFT_MLP_MAX_WIDTHS; i++)
        h = fnv(h, c->widths[i]);
    for (int k = 0; k < m->nchunk; k++)
        h = fnv(fnv(h, m->chunk[k].first), m->chunk[k].last);
    return h;
}

int weft_model_chunk_forward(weft_model *m, int chunk, int slot, const void *inputs,
                             const int32_t *targets, int batch, int seq, float *loss)
{
    if (!m || !inputs || batch < 1)
        return WEFT_EINVAL;
    int rc = select_slot(m, chunk, slot);
    if (rc)
        return rc;
    int gpt = m->cfg.type != WEFT_MODEL_MLP, first = m->ck->first == 0;
    int last = m->ck->last + 1 == m->nblocks;
    int T = gpt ? seq : 1;
    if (gpt && (seq < 1 || seq > m->cfg.ctx))
        return WEFT_EINVAL;
    if ((size_t)batch * T > (size_t)1 << 30 || (m->seqpar && (batch * T) % m->tp_size))
        return WEFT_EINVAL;
    int ncls = gpt ? m->cfg.vocab : m->cfg.widths[m->cfg.n_widths - 1];
    int tpv = gpt && m->tp_size > 1; /* the logits are this rank's part of the vocabulary */
    size_t rows = (size_t)batch * T;
    if (gpt && first)
        for (size_t i = 0; i < rows; i++)
            if (((const int32_t *)inputs)[i] < 0 || ((const int32_t *)inputs)[i] >= m->cfg.vocab)
                return WEFT_EINVAL;
    if (targets && last)
        for (size_t i = 0; i < rows; i++)
            if (targets[i] < -1 || targets[i] >= ncls)
                return WEFT_EINVAL;
    model_slot *s = m->s;
    s->ready = 0;
    s->input_done = 0;
    if ((rc = ensure_arena(m, batch, T)))
        return rc;
    s->B = batch;
    s->T = T;
    s->rows = (int)rows;
    s->cols = !last ? 0 : tpv ? train_tp_vocab_rows(m) : ncls;
    train_mm_begin(m->mm, mm_key(m, batch, T));
    rc = m->cfg.type == WEFT_MODEL_LLAMA ? train_llama_forward(m, inputs, batch, T)
       : gpt ? train_gpt_forward(m, inputs, batch, T) : train_mlp_forward(m, inputs, batch);
    if (rc)
        return rc;
    double sum = 0.0;
    s->count = 0;
    if (last && targets) {
        memcpy(s->targets, targets, rows * sizeof *targets);
        sum = tpv ? train_tp_xent_forward(m, s->probs, s->logits, targets, (int)rows, &s->count)
                  : train_softmax_xent_forward(s->probs, s->logits, targets, (int)rows, ncls,
                                               &s->count);
        /* context parallelism: the mean is over the group's tokens */
        if ((rc = train_attn_cp_sum(m->cp, &s->count)) != 0)
            return rc;
    }
    s->ready = !last || targets;
    if (loss)
        *loss = last && targets && s->count ? (float)(sum / s->count) : 0.0f;
    return 0;
}

const float *weft_model_chunk_output(const weft_model *m, int chunk, int slot)
{
    if (!m || chunk < 0 || chunk >= m->nchunk || slot < 0 || slot >= m->chunk[chunk].nslot)
        return NULL;
    const model_slot *s = &m->chunk[chunk].slot[slot];
    return s->ready || s->input_done ? s->out : NULL;
}

int weft_model_chunk_backward(weft_model *m, int chunk, int slot, const float *dout,
                              float weight, int part, int announce)
{
    if (!m || chunk < 0 || chunk >= m->nchunk || slot < 0 || slot >= m->chunk[chunk].nslot ||
        part < WEFT_BACKWARD_ALL || part > WEFT_BACKWARD_WEIGHT || (part && !m->split))
        return WEFT_EINVAL;
    m->ck = &m->chunk[chunk];
    m->s = &m->ck->slot[slot];
    model_slot *s = m->s;
    int last = m->ck->last + 1 == m->nblocks;
    if (part == WEFT_BACKWARD_WEIGHT ? !s->input_done : !s->ready)
        return WEFT_EINVAL;
    if (!last && part != WEFT_BACKWARD_WEIGHT && !dout)
        return WEFT_EINVAL;
    if (last && part != WEFT_BACKWARD_WEIGHT) {
        float scale = s->count ? weight / (float)s->count : 0.0f;
        if (m->cfg.type != WEFT_MODEL_MLP && m->tp_size > 1)
            train_tp_xent_backward(m, s->probs, s->probs, s->targets, s->rows, scale);
        else
            train_softmax_xent_backward(s->probs, s->probs, s->targets, s->rows, s->cols, scale);
    }
    m->announce = announce;
    m->bw_weight = weight;
    int rc = m->cfg.type == WEFT_MODEL_LLAMA ? train_llama_backward(m, dout, part)
           : m->cfg.type == WEFT_MODEL_GPT ? train_gpt_backward(m, dout, part)
                                           : train_mlp_backward(m, dout, part);
    m->announce = 1;
    if (part != WEFT_BACKWARD_INPUT)   /* the step's products have all run */
        train_mm_settle(m->mm);
    /* the backward pass overwrites the probabilities */
    s->ready = 0;
    s->input_done = part == WEFT_BACKWARD_INPUT;
    return rc;
}

const float *weft_model_chunk_input_grad(const weft_model *m, int chunk, int slot)
{
    if (!m || chunk < 0 || chunk >= m->nchunk || slot < 0 || slot >= m->chunk[chunk].nslot)
        return NULL;
    return m->chunk[chunk].slot[slot].din;
}

int weft_model_forward(weft_model *m, const void *inputs, const int32_t *targets,
                       int batch, int seq, float *loss)
{
    if (!m || m->nchunk != 1 || m->chunk[0].first != 0 || m->chunk[0].last + 1 != m->nblocks)
        return WEFT_EINVAL;
    return weft_model_chunk_forward(m, 0, 0, inputs, targets, batch, seq, loss);
}

int weft_model_backward(weft_model *m)
{
    if (!m || m->nchunk != 1 || m->chunk[0].first != 0 || m->chunk[0].last + 1 != m->nblocks ||
        m->chunk[0].nslot < 1 || !m->chunk[0].slot[0].ready)
        return WEFT_EINVAL;
    return weft_model_chunk_backward(m, 0, 0, NULL, 1.0f, WEFT_BACKWARD_ALL, 1);
}

int weft_model_set_grad_hook(weft_model *m, weft_grad_ready_fn fn, void *arg)
{
    if (!m)
        return WEFT_EINVAL;
    m->hook = fn;
    m->hook_arg = arg;
    return 0;
}

int weft_model_set_param_hook(weft_model *m, weft_param_need_fn fn, void *arg)
{
    if (!m)
        return WEFT_EINVAL;
    m->phook = fn;
    m->phook_arg = arg;
    return 0;
}

int weft_model_set_recompute(weft_model *m, int on)
{
    /* the weight half of a split backward reads what the next block's
     * recomputation would overwrite */
    if (!m || (on && m->split))
        return WEFT_EINVAL;
    if (m->recompute != !!on) {
        m->recompute = !!on;
        /* the next forward lays the arenas out anew */
        for (int k = 0; k < m->nchunk; k++)
            for (int j = 0; j < m->chunk[k].nslot; j++)
                m->chunk[k].slot[j].ready = 0;
    }
    return 0;
}

int weft_model_grads_ready(weft_model *m, int first, int count)
{
    if (!m || first < 0 || count < 0 || first > m->ntensors - count)
        return WEFT_EINVAL;
    if (m->hook && count > 0)
        m->hook(m->hook_arg, first, count);
    return 0;
}

static void zero_range(void *arg, size_t lo, size_t hi)
{
    memset((float *)arg + lo, 0, (hi - lo) * sizeof(float));
}

int weft_model_zero_grad(weft_model *m)
{
    if (!m)
        return WEFT_EINVAL;
    /* a large model's gradients are tens of MB: one thread's memory
     * bandwidth would be a serial part of every step */
    train_pool_for(train_mm_pool(m->mm), m->nparams, 16, (size_t)1 << 18, zero_range, m->grads);
    return 0;
}

const float *weft_model_logits(const weft_model *m, int *rows, int *cols)
{
    if (!m || !m->s || !m->s->logits || m->s->rows == 0)
        return NULL;
    if (rows)
        *rows = m->s->rows;
    if (cols)
        *cols = m->s->cols;
    return m->s->logits;
}

int weft_model_count_correct(weft_model *m, const int32_t *targets)
{
    if (!m || !targets || !m->s || !m->s->logits)
        return WEFT_EINVAL;
    const model_slot *s = m->s;
    if (m->cfg.type != WEFT_MODEL_MLP && m->tp_size > 1)
        return train_tp_count_correct(m, s->logits, targets, s->rows);
    int ok = 0;
    for (int r = 0; r < s->rows; r++) {
        const float *z = s->logits + (size_t)r * s->cols;
        int best = 0;
        for (int j = 1; j < s->cols; j++)
            if (z[j] > z[best])
                best = j;
        ok += targets[r] >= 0 && best == targets[r];
    }
    return ok;
}
