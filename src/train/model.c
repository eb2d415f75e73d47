/* The model handle: config, flat parameter/gradient buffers and their
 * tensor table, matmul backend, activation arena; forward and backward
 * are passed on to the MLP or GPT code. */
#include "train/model.h"

#include "core/param.h"

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

int train_model_add_tensor(weft_model *m, const char *name, int ndim, int d0, int d1)
{
    model_tensor *t = realloc(m->tensors, sizeof *t * (size_t)(m->ntensors + 1));
    if (!t)
        return WEFT_ENOMEM;
    m->tensors = t;
    t += m->ntensors;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->info.offset = m->nparams;
    t->info.ndim = ndim;
    t->info.shape[0] = d0;
    t->info.shape[1] = ndim > 1 ? d1 : 0;
    t->info.numel = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    m->nparams += t->info.numel;
    m->ntensors++;
    return 0;
}

float *train_model_tensor_ptr(weft_model *m, float *buf, int i)
{
    return buf + m->tensors[i].info.offset;
}

lin_ctx train_model_lin(weft_model *m)
{
    lin_ctx c = { m->mm, m->prec == WEFT_PREC_BF16, m->lin_scratch };
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
    if (c->type == WEFT_MODEL_GPT) {
        if (c->vocab < 2 || c->vocab > (1 << 24) || c->ctx < 1 || c->ctx > (1 << 16) ||
            c->n_layer < 1 || c->n_layer > 1024 || c->n_head < 1 || c->d_model < 1 ||
            c->d_model > (1 << 16) || c->d_model % c->n_head != 0)
            return WEFT_EINVAL;
        return 0;
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
            if (k == 5)
                return WEFT_EINVAL;
            s += strlen(keys[k]);
            if (parse_int(&s, dst[k]))
                return WEFT_EINVAL;
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
    if (c->type == WEFT_MODEL_GPT)
        return snprintf(buf, len, "gpt:vocab=%d,ctx=%d,layers=%d,heads=%d,dim=%d",
                        c->vocab, c->ctx, c->n_layer, c->n_head, c->d_model);
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

int weft_model_create(weft_model **out, const weft_model_config *cfg, uint64_t seed)
{
    if (!out)
        return WEFT_EINVAL;
    int rc = weft_model_config_check(cfg);
    if (rc)
        return rc;
    weft_model *m = calloc(1, sizeof *m);
    if (!m)
        return WEFT_ENOMEM;
    m->cfg = *cfg;
    m->threads = train_mm_default_threads();
    rc = m->threads < 0 ? m->threads : backend_from_env(&m->backend);
    if (rc == 0)
        rc = cfg->type == WEFT_MODEL_MLP ? train_mlp_build(m) : train_gpt_build(m);
    if (rc == 0) {
        m->params = aligned_alloc(64, ((m->nparams * sizeof(float)) + 63) & ~(size_t)63);
        m->grads = aligned_alloc(64, ((m->nparams * sizeof(float)) + 63) & ~(size_t)63);
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
    memset(m->grads, 0, m->nparams * sizeof(float));
    weft_model_init_params(m, seed);
    *out = m;
    return 0;
}

void weft_model_destroy(weft_model *m)
{
    if (!m)
        return;
    train_mm_destroy(m->mm);
    free(m->tensors);
    free(m->params);
    free(m->grads);
    free(m->arena);
    free(m->tokens);
    free(m->targets);
    free(m->arch);
    free(m->w16);
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
    weft_rng r;
    weft_rng_seed(&r, seed);
    if (m->cfg.type == WEFT_MODEL_MLP)
        train_mlp_init(m, &r);
    else
        train_gpt_init(m, &r);
    return 0;
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
    if (!m || (p != WEFT_PREC_FP32 && p != WEFT_PREC_BF16))
        return WEFT_EINVAL;
    if (p != m->prec) {
        m->prec = p;
        m->ready = 0;   /* the next forward lays the arena out anew */
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

/* Makes the arena big enough for B x T and lays it out. */
static int ensure_arena(weft_model *m, int B, int T)
{
    if (m->prec == WEFT_PREC_BF16 && !m->w16) {
        m->w16 = malloc((m->nparams ? m->nparams : 1) * sizeof(uint16_t));
        if (!m->w16)
            return WEFT_ENOMEM;
    }
    size_t need = m->cfg.type == WEFT_MODEL_MLP ? train_mlp_layout(m, NULL, B) : train_gpt_layout(m, NULL, B, T);
    if (need > m->arena_n) {
        float *a = aligned_alloc(64, need * sizeof(float));
        if (!a)
            return WEFT_ENOMEM;
        free(m->arena);
        m->arena = a;
        m->arena_n = need;
    }
    size_t rows = (size_t)B * T;
    if (rows > m->tok_cap) {
        int32_t *t1 = malloc(rows * sizeof *t1), *t2 = malloc(rows * sizeof *t2);
        if (!t1 || !t2) {
            free(t1);
            free(t2);
            return WEFT_ENOMEM;
        }
        free(m->tokens);
        free(m->targets);
        m->tokens = t1;
        m->targets = t2;
        m->tok_cap = rows;
    }
    if (m->cfg.type == WEFT_MODEL_MLP)
        train_mlp_layout(m, m->arena, B);
    else
        train_gpt_layout(m, m->arena, B, T);
    return 0;
}

int weft_model_forward(weft_model *m, const void *inputs, const int32_t *targets,
                       int batch, int seq, float *loss)
{
    if (!m || !inputs || batch < 1)
        return WEFT_EINVAL;
    int gpt = m->cfg.type == WEFT_MODEL_GPT;
    int T = gpt ? seq : 1;
    if (gpt && (seq < 1 || seq > m->cfg.ctx))
        return WEFT_EINVAL;
    if ((size_t)batch * T > (size_t)1 << 30)
        return WEFT_EINVAL;
    int ncls = gpt ? m->cfg.vocab : m->cfg.widths[m->cfg.n_widths - 1];
    size_t rows = (size_t)batch * T;
    if (gpt)
        for (size_t i = 0; i < rows; i++)
            if (((const int32_t *)inputs)[i] < 0 || ((const int32_t *)inputs)[i] >= m->cfg.vocab)
                return WEFT_EINVAL;
    if (targets)
        for (size_t i = 0; i < rows; i++)
            if (targets[i] < -1 || targets[i] >= ncls)
                return WEFT_EINVAL;
    m->ready = 0;
    int rc = ensure_arena(m, batch, T);
    if (rc)
        return rc;
    m->B = batch;
    m->T = T;
    m->rows = (int)rows;
    m->cols = ncls;
    rc = gpt ? train_gpt_forward(m, inputs, batch, T) : train_mlp_forward(m, inputs, batch);
    if (rc)
        return rc;
    double sum = 0.0;
    if (targets) {
        memcpy(m->targets, targets, rows * sizeof *targets);
        sum = train_softmax_xent_forward(m->probs, m->logits, targets, (int)rows, ncls, &m->count);
        m->ready = 1;
    }
    if (loss)
        *loss = targets && m->count ? (float)(sum / m->count) : 0.0f;
    return 0;
}

int weft_model_backward(weft_model *m)
{
    if (!m || !m->ready)
        return WEFT_EINVAL;
    m->ready = 0;   /* the backward pass overwrites the probabilities */
    float scale = m->count ? 1.0f / (float)m->count : 0.0f;
    train_softmax_xent_backward(m->probs, m->probs, m->targets, m->rows, m->cols, scale);
    return m->cfg.type == WEFT_MODEL_GPT ? train_gpt_backward(m) : train_mlp_backward(m);
}

int weft_model_set_grad_hook(weft_model *m, weft_grad_ready_fn fn, void *arg)
{
    if (!m)
        return WEFT_EINVAL;
    m->hook = fn;
    m->hook_arg = arg;
    return 0;
}

void train_model_grads_ready(weft_model *m, int first, int count)
{
    if (m->hook && count > 0)
        m->hook(m->hook_arg, first, count);
}

int weft_model_zero_grad(weft_model *m)
{
    if (!m)
        return WEFT_EINVAL;
    memset(m->grads, 0, m->nparams * sizeof(float));
    return 0;
}

const float *weft_model_logits(const weft_model *m, int *rows, int *cols)
{
    if (!m || !m->logits || m->rows == 0)
        return NULL;
    if (rows)
        *rows = m->rows;
    if (cols)
        *cols = m->cols;
    return m->logits;
}

int weft_model_count_correct(const weft_model *m, const int32_t *targets)
{
    if (!m || !targets || !m->logits)
        return WEFT_EINVAL;
    int ok = 0;
    for (int r = 0; r < m->rows; r++) {
        const float *z = m->logits + (size_t)r * m->cols;
        int best = 0;
        for (int j = 1; j < m->cols; j++)
            if (z[j] > z[best])
                best = j;
        ok += targets[r] >= 0 && best == targets[r];
    }
    return ok;
}
