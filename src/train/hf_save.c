/* A whole model as a Hugging Face directory: config.json and one f32
 * model.safetensors in transformers' names, shapes and layouts, written
 * tensor by tensor (a Conv1D weight a column at a time); or the same file
 * written from the parts, every rank its own slices (hf_save.h). */
#include "train/hf_save.h"

#include "core/errmsg.h"
#include "train/data_file.h"
#include "train/hf_config.h"
#include "train/hf_names.h"
#include "train/model.h"
#include "train/part_runs.h"
#include "train/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A stage or a tensor-parallel part has no file of its own. */
static int is_whole(const weft_model *m)
{
    weft_block_range r;
    if (weft_model_chunk_count(m) != 1 || weft_model_chunk_range(m, 0, &r) != 0 || r.first != 0 ||
        r.count != weft_model_block_count(weft_model_config_of(m)))
        return 0;
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        if (weft_model_tensor_info(m, i, &ti) != 0 || ti.numel != ti.whole_numel)
            return 0;
    }
    return 1;
}

static int write_config(const weft_model_config *cfg, const char *dir, char *err, size_t cap)
{
    char text[4096], path[4096], tmp[4200];
    int n = hf_config_text(cfg, text, sizeof text);
    if (n < 0 || (size_t)n >= sizeof text)
        return errmsg(err, cap, WEFT_EINVAL, "no Hugging Face config for this model");
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fwrite(text, 1, (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return errmsg(err, cap, WEFT_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

/* Tensor `name` of weft's shape [d0, d1] (ndim 1 or 2) as the file holds
 * it, appended at sp[*n], names[*n]: one tensor, transposed or not (*tr),
 * or a stack's pieces, each d0 / pieces rows, in the order of weft's rows
 * (so weft's buffer written in order fills them). NULL sp: *n counted. */
static int add_specs(const weft_model_config *cfg, const char *name, int ndim, int64_t d0,
                     int64_t d1, st_spec *sp, char (*names)[256], int *n, int *tr, char *err,
                     size_t cap)
{
    int pieces = 1, t = 0;
    char first[256];
    if (hf_piece_name(cfg, name, 0, first, sizeof first, &t, &pieces) != 0)
        return errmsg(err, cap, WEFT_ENOTSUP, "weft's tensor %s has no Hugging Face name", name);
    if (tr)
        *tr = t;
    for (int p = 0; sp && p < pieces; p++) {
        st_spec *x = &sp[*n + p];
        hf_piece_name(cfg, name, p, names[*n + p], sizeof names[*n + p], NULL, NULL);
        x->name = names[*n + p];
        x->ndim = ndim;
        x->shape[0] = ndim == 2 && t ? d1 : d0 / pieces;
        if (ndim == 2)
            x->shape[1] = t ? d0 : d1;
    }
    *n += pieces;
    return 0;
}

/* The file's tensors for the n weft tensors (name, ndim, d0, d1 of each
 * from get): *sp and *names allocated, *ns of them, tr[i] each weft
 * tensor's transpose (tr may be NULL). */
typedef void (*shape_fn)(const void *arg, int i, const char **name, int *ndim, int64_t *d0,
                         int64_t *d1);
static int file_specs(const weft_model_config *cfg, int n, shape_fn get, const void *arg,
                      st_spec **sp, char (**names)[256], int *ns, int *tr, char *err,
                      size_t cap)
{
    *sp = NULL;
    *names = NULL;
    *ns = 0;
    int rc = hf_config_supported(cfg, err, cap), total = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const char *name;
        int ndim;
        int64_t d0, d1;
        get(arg, i, &name, &ndim, &d0, &d1);
        rc = add_specs(cfg, name, ndim, d0, d1, NULL, NULL, &total, NULL, err, cap);
    }
    if (rc)
        return rc;
    *sp = calloc((size_t)total + 1, sizeof **sp);
    *names = calloc((size_t)total + 1, sizeof **names);
    if (!*sp || !*names)
        return WEFT_ENOMEM;
    for (int i = 0; rc == 0 && i < n; i++) {
        const char *name;
        int ndim;
        int64_t d0, d1;
        get(arg, i, &name, &ndim, &d0, &d1);
        rc = add_specs(cfg, name, ndim, d0, d1, *sp, *names, ns, tr ? &tr[i] : NULL, err, cap);
    }
    return rc;
}

/* a whole model's tensor */
static void model_shape(const void *arg, int i, const char **name, int *ndim, int64_t *d0,
                        int64_t *d1)
{
    weft_tensor_info ti;
    weft_model_tensor_info(arg, i, &ti);
    *name = ti.name;
    *ndim = ti.ndim;
    *d0 = ti.shape[0];
    *d1 = ti.ndim == 2 ? ti.shape[1] : 0;
}

/* the whole model's table's */
static void table_shape(const void *arg, int i, const char **name, int *ndim, int64_t *d0,
                        int64_t *d1)
{
    const model_spec *t = &((const spec_list *)arg)->t[i];
    *name = t->name;
    *ndim = t->ndim;
    *d0 = t->d0;
    *d1 = t->ndim == 2 ? t->d1 : 0;
}

static int write_tensors(weft_model *m, st_writer *w, const int *tr)
{
    const float *p = weft_model_params(m, NULL);
    float *col = NULL;
    int rc = 0;
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(m, i, &ti);
        const float *x = p + ti.offset;
        if (!tr[i] || ti.ndim != 2) {
            rc = st_writer_put(w, x, ti.numel);
            continue;
        }
        size_t out = (size_t)ti.shape[0], in = (size_t)ti.shape[1];
        float *nc = realloc(col, out * sizeof *col);
        if (!nc) {
            rc = WEFT_ENOMEM;
            break;
        }
        col = nc;
        for (size_t c = 0; rc == 0 && c < in; c++) {
            for (size_t r = 0; r < out; r++)
                col[r] = x[r * in + c];
            rc = st_writer_put(w, col, out);
        }
    }
    free(col);
    return rc;
}

int weft_model_save_hf(weft_model *m, const char *dir, char *err, size_t cap)
{
    if (err && cap)
        err[0] = 0;
    if (!m || !dir || !dir[0])
        return WEFT_EINVAL;
    if (!is_whole(m))
        return errmsg(err, cap, WEFT_EINVAL,
                      "%s: a stage or tensor-parallel part is no whole model", dir);
    int sup = hf_config_supported(weft_model_config_of(m), err, cap);
    if (sup != 0)
        return sup;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot create: %s", dir, strerror(errno));
    int n = weft_model_tensor_count(m), ns = 0;
    st_spec *sp = NULL;
    char(*names)[256] = NULL;
    int *tr = calloc((size_t)n + 1, sizeof *tr);
    int rc = tr ? 0 : WEFT_ENOMEM;
    if (rc == 0)
        rc = file_specs(weft_model_config_of(m), n, model_shape, m, &sp, &names, &ns, tr, err,
                        cap);
    if (rc == 0)
        rc = write_config(weft_model_config_of(m), dir, err, cap);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_writer *w = NULL;
    if (rc == 0)
        rc = st_writer_open(&w, path, sp, ns, ST_F32, err, cap);
    if (rc == 0) {
        int wrc = write_tensors(m, w, tr);
        rc = st_writer_close(w, err, cap);
        if (wrc && !rc)
            rc = wrc;
        if (rc && err && cap && !err[0])
            errmsg(err, cap, rc, "%s: cannot write: %s", path, weft_strerror(rc));
    }
    free(sp);
    free(names);
    free(tr);
    return rc;
}

/* ---- from the parts ------------------------------------------------------ */

static void part_path(char *buf, size_t cap, const char *dir)
{
    snprintf(buf, cap, "%s/model.safetensors.part", dir);
}

/* The whole model's tensors as the file names and shapes them. */
static int whole_specs(const weft_model_config *cfg, spec_list *l, st_spec **sp,
                       char (**names)[256], int *ns, char *err, size_t cap)
{
    memset(l, 0, sizeof *l);
    int rc = cfg->type == WEFT_MODEL_MLP     ? train_mlp_tensors(cfg, l)
           : cfg->type == WEFT_MODEL_LLAMA ? train_llama_tensors(cfg, l)
                                             : train_gpt_tensors(cfg, l);
    return rc ? rc : file_specs(cfg, l->n, table_shape, l, sp, names, ns, NULL, err, cap);
}

int hf_export_prepare(const weft_model_config *cfg, const char *dir, char *err, size_t cap)
{
    if (err && cap)
        err[0] = 0;
    if (!cfg || !dir || !dir[0])
        return WEFT_EINVAL;
    int sup = hf_config_supported(cfg, err, cap);
    if (sup != 0)
        return sup;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot create: %s", dir, strerror(errno));
    spec_list l;
    st_spec *sp = NULL;
    char(*names)[256] = NULL;
    int ns = 0;
    int rc = whole_specs(cfg, &l, &sp, &names, &ns, err, cap);
    if (rc == 0)
        rc = write_config(cfg, dir, err, cap);
    char path[4096];
    part_path(path, sizeof path, dir);
    st_writer *w = NULL;
    if (rc == 0)
        rc = st_writer_open(&w, path, sp, ns, ST_F32, err, cap);
    if (rc == 0) {
        /* zeros where the parts go: the ranks write into a file of its
         * final size */
        static const float zero[4096];
        size_t total = 0;
        for (int i = 0; i < l.n; i++)
            total += (size_t)l.t[i].d0 * (size_t)(l.t[i].ndim == 2 ? l.t[i].d1 : 1);
        int wrc = 0;
        for (size_t at = 0; wrc == 0 && at < total; at += 4096)
            wrc = st_writer_put(w, zero, total - at < 4096 ? total - at : 4096);
        rc = st_writer_close(w, err, cap);
        if (wrc && !rc)
            rc = wrc;
        if (rc && err && cap && !err[0])
            errmsg(err, cap, rc, "%s: cannot write: %s", path, weft_strerror(rc));
    }
    free(l.t);
    free(sp);
    free(names);
    return rc;
}

/* A part's tensor into the file: runs in weft's layout, or a Conv1D's
 * elements, transposed, gathered and sorted into runs of the file. */
typedef struct {
    int fd, tr;
    const float *x;   /* the tensor's first element in the part */
    uint64_t *base;   /* each piece's first byte in the file (one but for a stack) */
    size_t pn;        /* a piece's elements */
    int np;
    size_t in, out;   /* the whole weight's weft shape [out, in] */
    struct te {
        uint64_t at;
        float v;
    } *t;
    size_t nt, cap;
} part_ctx;

static int put_run(void *arg, size_t e, size_t at, size_t len)
{
    part_ctx *c = arg;
    while (!c->tr && len) { /* a run may cross from one piece to the next */
        size_t p = at / c->pn, off = at % c->pn, k = c->pn - off < len ? c->pn - off : len;
        if (train_pwrite_all(c->fd, c->x + e, k * sizeof(float), c->base[p] + off * 4))
            return WEFT_EIO;
        e += k;
        at += k;
        len -= k;
    }
    if (!c->tr)
        return 0;
    if (c->nt + len > c->cap) {
        size_t cap = (c->nt + len) * 2;
        struct te *t = realloc(c->t, cap * sizeof *t);
        if (!t)
            return WEFT_ENOMEM;
        c->t = t;
        c->cap = cap;
    }
    for (size_t k = 0; k < len; k++) {
        size_t w = at + k, r = w / c->in, col = w % c->in;
        c->t[c->nt].at = (uint64_t)col * c->out + r;
        c->t[c->nt++].v = c->x[e + k];
    }
    return 0;
}

static int by_at(const void *a, const void *b)
{
    uint64_t x = ((const struct te *)a)->at, y = ((const struct te *)b)->at;
    return x < y ? -1 : x > y;
}

/* The gathered Conv1D elements, sorted, a run of the file at a time. */
static int flush_transposed(part_ctx *c)
{
    float buf[1024];
    qsort(c->t, c->nt, sizeof *c->t, by_at);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < c->nt;) {
        size_t n = 0;
        while (i + n < c->nt && n < 1024 && c->t[i + n].at == c->t[i].at + n) {
            buf[n] = c->t[i + n].v;
            n++;
        }
        if (train_pwrite_all(c->fd, buf, n * sizeof(float), c->base[0] + c->t[i].at * 4))
            rc = WEFT_EIO;
        i += n;
    }
    c->nt = 0;
    return rc;
}

static int part_tensor(weft_model *m, int i, const st_file *f, part_ctx *c, const hf_range *r,
                       int nr, char *err, size_t cap)
{
    weft_tensor_info ti;
    weft_model_tensor_info(m, i, &ti);
    const weft_model_config *cfg = weft_model_config_of(m);
    char name[256];
    int np = 1;
    if (hf_piece_name(cfg, ti.name, 0, name, sizeof name, &c->tr, &np) != 0)
        return errmsg(err, cap, WEFT_ENOTSUP, "weft's tensor %s has no Hugging Face name",
                      ti.name);
    if (np > c->np) {
        uint64_t *b = realloc(c->base, (size_t)np * sizeof *b);
        if (!b)
            return WEFT_ENOMEM;
        c->base = b;
        c->np = np;
    }
    c->pn = ti.whole_numel / (size_t)np;
    int k = -1;
    for (int p = 0; p < np; p++) {
        hf_piece_name(cfg, ti.name, p, name, sizeof name, NULL, NULL);
        k = st_find(f, name);
        if (k < 0 || f->t[k].numel != c->pn)
            return errmsg(err, cap, WEFT_EIO, "%s: no tensor %s of %zu elements", f->path, name,
                          c->pn);
        c->base[p] = f->data_start + f->t[k].begin;
    }
    c->tr = c->tr && ti.ndim == 2;
    c->x = weft_model_params(m, NULL) + ti.offset;
    c->in = c->tr ? (size_t)f->t[k].shape[0] : 0;
    c->out = c->tr ? (size_t)f->t[k].shape[1] : 0;
    int rc = 0;
    for (int j = 0; rc == 0 && j < nr; j++) {
        size_t lo = r[j].lo > ti.offset ? r[j].lo - ti.offset : 0;
        size_t hi = r[j].lo + r[j].n < ti.offset + ti.numel ? r[j].lo + r[j].n - ti.offset
                                                            : ti.numel;
        if (r[j].lo + r[j].n > ti.offset && r[j].lo < ti.offset + ti.numel && lo < hi)
            rc = train_part_runs(m, i, lo, hi, put_run, c);
    }
    if (rc == 0 && c->tr)
        rc = flush_transposed(c);
    if (rc == WEFT_EIO)
        return errmsg(err, cap, rc, "%s: cannot write: %s", f->path, strerror(errno));
    return rc;
}

int hf_export_part(weft_model *m, const char *dir, const unsigned char *skip, const hf_range *r,
                   int nr, char *err, size_t cap)
{
    if (err && cap)
        err[0] = 0;
    if (!m || !dir || (nr && !r))
        return WEFT_EINVAL;
    if (nr == 0)
        return 0;
    char path[4096];
    part_path(path, sizeof path, dir);
    st_file *f = NULL;
    int rc = st_open(&f, path, err, cap);
    if (rc != 0)
        return rc;
    part_ctx c;
    memset(&c, 0, sizeof c);
    c.fd = train_open_regular(path, O_WRONLY, 0);
    if (c.fd < 0)
        rc = errmsg(err, cap, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (int i = 0; rc == 0 && i < weft_model_tensor_count(m); i++)
        if (!skip || !skip[i])
            rc = part_tensor(m, i, f, &c, r, nr, err, cap);
    if (rc == 0 && fsync(c.fd) != 0)
        rc = errmsg(err, cap, WEFT_EIO, "%s: cannot sync: %s", path, strerror(errno));
    if (c.fd >= 0)
        close(c.fd);
    free(c.t);
    free(c.base);
    st_close(f);
    return rc;
}

int hf_export_commit(const char *dir, int failed, char *err, size_t cap)
{
    char from[4096], to[4096];
    part_path(from, sizeof from, dir);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    if (failed) {
        remove(from);
        return 0;
    }
    if (rename(from, to) != 0)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot rename to %s: %s", from, to,
                      strerror(errno));
    return 0;
}
