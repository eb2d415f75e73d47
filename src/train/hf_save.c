/* A whole model as a Hugging Face directory: config.json and one f32
 * model.safetensors in transformers' names, shapes and layouts, written
 * tensor by tensor (a Conv1D weight a column at a time). */
#include "train/hf_config.h"
#include "core/errmsg.h"
#include "train/hf_names.h"
#include "train/safetensors.h"
#include "weft.h"

#include <errno.h>
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

/* Each tensor's name and shape in the file. */
static int specs_of(const weft_model *m, st_spec *sp, char (*names)[256], int *tr, char *err,
                    size_t cap)
{
    const weft_model_config *cfg = weft_model_config_of(m);
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        weft_model_tensor_info(m, i, &ti);
        if (hf_name_of(cfg, ti.name, names[i], sizeof names[i], &tr[i]) != 0)
            return errmsg(err, cap, WEFT_ENOTSUP, "weft's tensor %s has no Hugging Face name",
                          ti.name);
        sp[i].name = names[i];
        sp[i].ndim = ti.ndim;
        for (int d = 0; d < ti.ndim; d++)
            sp[i].shape[d] = ti.shape[tr[i] ? ti.ndim - 1 - d : d];
    }
    return 0;
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
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return errmsg(err, cap, WEFT_EIO, "%s: cannot create: %s", dir, strerror(errno));
    int n = weft_model_tensor_count(m);
    st_spec *sp = calloc((size_t)n + 1, sizeof *sp);
    char(*names)[256] = calloc((size_t)n + 1, sizeof *names);
    int *tr = calloc((size_t)n + 1, sizeof *tr);
    int rc = sp && names && tr ? 0 : WEFT_ENOMEM;
    if (rc == 0)
        rc = write_config(weft_model_config_of(m), dir, err, cap);
    if (rc == 0)
        rc = specs_of(m, sp, names, tr, err, cap);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_writer *w = NULL;
    if (rc == 0)
        rc = st_writer_open(&w, path, sp, n, ST_F32, err, cap);
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
