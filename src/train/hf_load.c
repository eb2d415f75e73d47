/* Hugging Face weights into a model that exists: the whole model, a
 * pipeline stage or a tensor-parallel part. Each tensor of the part reads
 * only the elements it holds (weft_model_tensor_whole_elem says which),
 * converted to float from whatever float dtype the file stores. */
#include "train/hf_config.h"
#include "core/errmsg.h"
#include "train/hf_names.h"
#include "train/part_runs.h"
#include "train/safetensors.h"
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements read at once where a part's elements are scattered. */
#define HF_WINDOW ((size_t)1 << 20)

int weft_hf_config_read(const char *dir, weft_model_config *cfg, char *err, size_t cap)
{
    return hf_config_read(dir, cfg, err, cap);
}

/* Where one of the part's elements lies in the file's tensor. */
typedef struct {
    size_t hf, e;
} place;

/* The whole tensor's element at, in the file's layout. */
static size_t hf_index(size_t at, int transpose, size_t out, size_t in)
{
    return transpose ? (at % in) * out + at / in : at;
}

/* The part's places bucketed by the file window (HF_WINDOW elements)
 * they fall in: a counting sort, linear in the part's size. *start[w] is
 * window w's first place in *by; NULL on no memory. */
static place *by_window(const place *pl, size_t n, size_t nwin, size_t **start)
{
    place *by = malloc((n ? n : 1) * sizeof *by);
    size_t *at = calloc(nwin + 1, sizeof *at);
    if (!by || !at) {
        free(by);
        free(at);
        return NULL;
    }
    for (size_t j = 0; j < n; j++)
        at[pl[j].hf / HF_WINDOW + 1]++;
    for (size_t w = 0; w < nwin; w++)
        at[w + 1] += at[w];
    for (size_t j = 0; j < n; j++)
        by[at[pl[j].hf / HF_WINDOW]++] = pl[j];
    /* each window's count was added back while placing: shift to starts */
    for (size_t w = nwin; w > 0; w--)
        at[w] = at[w - 1];
    at[0] = 0;
    *start = at;
    return by;
}

/* A part whose elements lie apart in the file (a Conv1D weight, stored
 * transposed): read a window at a time, only windows that hold one of
 * them, and only the span between the first and the last. */
static int read_scattered(const weft_model *m, int i, const st_file *f, int k, int transpose,
                          float *dst, char *err, size_t cap)
{
    weft_tensor_info ti;
    weft_model_tensor_info(m, i, &ti);
    const st_tensor *t = &f->t[k];
    size_t out = (size_t)t->shape[t->ndim > 1 ? 1 : 0], in = (size_t)t->shape[0], n = 0;
    size_t nwin = t->numel / HF_WINDOW + 1, *start = NULL;
    place *pl = malloc((ti.numel ? ti.numel : 1) * sizeof *pl), *by = NULL;
    float *buf = malloc(HF_WINDOW * sizeof *buf);
    for (size_t e = 0; pl && e < ti.numel; e++) {
        size_t at;
        if (weft_model_tensor_whole_elem(m, i, e, &at) != 0)
            dst[e] = 0.0f; /* vocabulary padding */
        else
            pl[n++] = (place){ hf_index(at, transpose, out, in), e };
    }
    int rc = pl && buf && (by = by_window(pl, n, nwin, &start)) ? 0 : WEFT_ENOMEM;
    for (size_t w = 0; rc == 0 && w < nwin; w++) {
        size_t a = start[w], b = start[w + 1], lo = SIZE_MAX, hi = 0;
        for (size_t j = a; j < b; j++) {
            lo = by[j].hf < lo ? by[j].hf : lo;
            hi = by[j].hf > hi ? by[j].hf : hi;
        }
        if (a == b)
            continue;
        rc = st_read(f, k, lo, hi - lo + 1, buf, err, cap);
        for (size_t j = a; rc == 0 && j < b; j++)
            dst[by[j].e] = buf[by[j].hf - lo];
    }
    free(pl);
    free(by);
    free(start);
    free(buf);
    return rc;
}

/* A whole Conv1D weight: the file's rows (weft's columns) a window at a
 * time, transposed into place. */
static int read_transposed(const st_file *f, int k, float *dst, char *err, size_t cap)
{
    const st_tensor *t = &f->t[k];
    size_t in = (size_t)t->shape[0], out = (size_t)t->shape[1];
    size_t rows = out && HF_WINDOW / out ? HF_WINDOW / out : 1;
    float *buf = malloc(rows * (out ? out : 1) * sizeof *buf);
    int rc = buf ? 0 : WEFT_ENOMEM;
    for (size_t c0 = 0; rc == 0 && c0 < in; c0 += rows) {
        size_t nc = in - c0 < rows ? in - c0 : rows;
        rc = st_read(f, k, c0 * out, nc * out, buf, err, cap);
        for (size_t r = 0; rc == 0 && r < out; r++)
            for (size_t c = 0; c < nc; c++)
                dst[r * in + c0 + c] = buf[c * out + r];
    }
    free(buf);
    return rc;
}

/* The same, when the part's elements come in runs of consecutive ones
 * (a row split, a column split, a vocabulary part): one read a run. A
 * stack of experts (hf_names.h) is pieces of pn elements, each its own
 * tensor, maybe in its own file: a run is cut where a piece ends. */
typedef struct {
    const st_file **f;
    const int *k;
    size_t pn;
    float *dst;
    char *err;
    size_t cap;
} run_read;

static int read_one_run(void *arg, size_t e, size_t at, size_t len)
{
    run_read *r = arg;
    int rc = 0;
    while (rc == 0 && len) {
        size_t p = at / r->pn, off = at % r->pn, n = r->pn - off < len ? r->pn - off : len;
        rc = st_read(r->f[p], r->k[p], off, n, r->dst + e, r->err, r->cap);
        e += n;
        at += n;
        len -= n;
    }
    return rc;
}

static int read_runs(const weft_model *m, int i, run_read *r)
{
    weft_tensor_info ti;
    weft_model_tensor_info(m, i, &ti);
    memset(r->dst, 0, ti.numel * sizeof *r->dst); /* vocabulary padding stays zero */
    return train_part_runs(m, i, 0, ti.numel, read_one_run, r);
}

static int read_pieces(const weft_model *m, int i, const st_set *s, int np, float *dst,
                       char *err, size_t cap)
{
    weft_tensor_info ti;
    weft_model_tensor_info(m, i, &ti);
    const weft_model_config *cfg = weft_model_config_of(m);
    const st_file **f = calloc((size_t)np, sizeof *f);
    int *k = calloc((size_t)np, sizeof *k);
    run_read r = { f, k, ti.whole_numel / (size_t)np, dst, err, cap };
    int rc = f && k ? 0 : WEFT_ENOMEM;
    int64_t rows = 0, cols = 0;
    if (hf_piece_shape(cfg, ti.name, &rows, &cols) != 0 || (size_t)(rows * cols) != r.pn)
        rc = errmsg(err, cap, WEFT_EINVAL, "weft's %s: no expert's shape", ti.name);
    for (int p = 0; rc == 0 && p < np; p++) {
        char hf[256];
        hf_piece_name(cfg, ti.name, p, hf, sizeof hf, NULL, NULL);
        k[p] = st_set_find(s, hf, &f[p]);
        const st_tensor *t = k[p] >= 0 ? &f[p]->t[k[p]] : NULL;
        if (!t)
            rc = errmsg(err, cap, WEFT_EIO, "no tensor %s (weft's %s) in the weights", hf,
                        ti.name);
        else if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
            rc = errmsg(err, cap, WEFT_EIO, "%s: %s is [%lld, %lld], weft's %s holds [%lld, "
                        "%lld] of each expert", f[p]->path, hf, (long long)t->shape[0],
                        (long long)(t->ndim > 1 ? t->shape[1] : 0), ti.name, (long long)rows,
                        (long long)cols);
    }
    if (rc == 0)
        rc = read_runs(m, i, &r);
    free(f);
    free(k);
    return rc;
}

/* The file's tensor for our tensor i, its shape checked against ours. */
static int find_tensor(const weft_model *m, int i, const st_set *s, const st_file **f, int *k,
                       int *transpose, char *err, size_t cap)
{
    const weft_model_config *cfg = weft_model_config_of(m);
    weft_tensor_info ti;
    char hf[256];
    weft_model_tensor_info(m, i, &ti);
    if (hf_name_of(cfg, ti.name, hf, sizeof hf, transpose) != 0)
        return errmsg(err, cap, WEFT_ENOTSUP, "weft's tensor %s has no Hugging Face name", ti.name);
    *k = st_set_find(s, hf, f);
    /* GPT2Model saved on its own: the same names without "transformer." */
    if (*k < 0 && strncmp(hf, "transformer.", 12) == 0)
        *k = st_set_find(s, hf + 12, f);
    if (*k < 0)
        return errmsg(err, cap, WEFT_EIO, "no tensor %s (weft's %s) in the weights", hf, ti.name);
    const st_tensor *t = &(*f)->t[*k];
    int tp = ti.numel != ti.whole_numel, ok = t->numel == ti.whole_numel && t->ndim == ti.ndim;
    if (ok && ti.ndim == 2) {
        int64_t rows = t->shape[*transpose ? 1 : 0], cols = t->shape[*transpose ? 0 : 1];
        ok = tp ? rows == ti.shape[0] || cols == ti.shape[1]
                : rows == ti.shape[0] && cols == ti.shape[1];
    }
    if (!ok) {
        char shape[64] = "";
        for (int d = 0; d < t->ndim && d < 4; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        return errmsg(err, cap, WEFT_EIO, "%s: %s is [%s]%s, weft's %s holds %zu elements",
                      (*f)->path, hf, shape, *transpose ? " (Conv1D: [in, out])" : "", ti.name,
                      ti.whole_numel);
    }
    return 0;
}

/* Every file tensor is one weft reads, or one it rebuilds. */
static int check_unused(const weft_model_config *cfg, const st_set *s, char *err, size_t cap)
{
    for (int j = 0; j < s->n; j++)
        for (int k = 0; k < s->files[j]->n; k++) {
            const char *name = s->files[j]->t[k].name;
            char w[256], full[300];
            snprintf(full, sizeof full, "transformer.%s", name);
            if (hf_weft_name(cfg, name, w, sizeof w) < 0 &&
                (cfg->type != WEFT_MODEL_GPT || hf_weft_name(cfg, full, w, sizeof w) < 0))
                return errmsg(err, cap, WEFT_ENOTSUP, "%s: tensor %s is not part of weft's model",
                              s->files[j]->path, name);
        }
    return 0;
}

int weft_model_load_hf(weft_model *m, const char *dir, char *err, size_t cap)
{
    if (err && cap)
        err[0] = 0;
    if (!m || !dir)
        return WEFT_EINVAL;
    const weft_model_config *cfg = weft_model_config_of(m);
    weft_model_config hc;
    char a[512], b[512];
    int rc = hf_config_read(dir, &hc, err, cap);
    if (rc)
        return rc;
    if (!hf_config_same(cfg, &hc, a, b, sizeof a))
        return errmsg(err, cap, WEFT_ECONFIG, "%s/config.json describes %s, the model is %s",
                      dir, b, a);
    st_set *s;
    if ((rc = st_set_open(&s, dir, err, cap)) != 0)
        return rc;
    rc = check_unused(cfg, s, err, cap);
    float *p = weft_model_params(m, NULL);
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        const st_file *f;
        int k = -1, transpose = 0, np = 1;
        weft_model_tensor_info(m, i, &ti);
        char hf[256];
        if (hf_piece_name(cfg, ti.name, 0, hf, sizeof hf, NULL, &np) == 0 && np > 1) {
            rc = read_pieces(m, i, s, np, p + ti.offset, err, cap);
            continue;
        }
        if ((rc = find_tensor(m, i, s, &f, &k, &transpose, err, cap)) != 0)
            break;
        run_read r = { &f, &k, ti.whole_numel, p + ti.offset, err, cap };
        if (!transpose)
            rc = read_runs(m, i, &r);
        else if (ti.numel == ti.whole_numel && ti.ndim == 2)
            rc = read_transposed(f, k, p + ti.offset, err, cap);
        else
            rc = read_scattered(m, i, f, k, 1, p + ti.offset, err, cap);
    }
    st_set_close(s);
    return rc;
}
