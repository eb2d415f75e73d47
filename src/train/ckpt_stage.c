/* A stage's optimiser state out of a checkpoint of the whole model: the
 * saved vectors follow the whole model's buffers, so each of the stage's
 * tensors is copied from its own place in them. */
#include "train/ckpt_stage.h"

#include "train/ckpt_shard.h"

#include <stdio.h>
#include <string.h>

/* Copies the saved vector (starting at saved_base, saved_n long) into
 * dst = the stage's [base, base + n), tensor by tensor. */
static int copy_mapped(const weft_model *m, const float *saved, size_t saved_base, size_t saved_n,
                       float *dst, size_t base, size_t n)
{
    if (!m) { /* the whole model's layout: one range inside the saved one */
        if (base < saved_base || base - saved_base + n > saved_n)
            return WEFT_EIO;
        memcpy(dst, saved + (base - saved_base), n * sizeof(float));
        return 0;
    }
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info t;
        weft_model_tensor_info(m, i, &t);
        size_t lo = t.offset > base ? t.offset : base;
        size_t hi = t.offset + t.numel < base + n ? t.offset + t.numel : base + n;
        if (hi <= lo)
            continue;
        if (t.numel != t.whole_numel) {
            /* a tensor-parallel part: element by element */
            for (size_t x = lo; x < hi; x++) {
                size_t at;
                float v = 0.0f;
                if (weft_model_tensor_whole_elem(m, i, x - t.offset, &at) == 0) {
                    size_t from = t.whole_offset + at;
                    if (from < saved_base || from - saved_base >= saved_n)
                        return WEFT_EIO;
                    v = saved[from - saved_base];
                }
                dst[x - base] = v;
            }
            continue;
        }
        size_t from = t.whole_offset + (lo - t.offset);
        if (from < saved_base || from - saved_base + (hi - lo) > saved_n)
            return WEFT_EIO;
        memcpy(dst + (lo - base), saved + (from - saved_base), (hi - lo) * sizeof(float));
    }
    return 0;
}

int train_ckpt_get_optim_stage(const weft_ckpt *c, const weft_model *m, size_t base, size_t n,
                               weft_optim **out)
{
    if (!c || !out)
        return WEFT_EINVAL;
    *out = NULL;
    if (ckpt_shard_lazy(c)) /* a sharded save's manifest: read from its files */
        return ckpt_shard_get_optim_stage(c, m, base, n, out);
    weft_optim_config oc;
    uint64_t steps, saved_base;
    int rc = weft_ckpt_optim_config(c, &oc);
    if (rc == 0)
        rc = weft_ckpt_get_u64(c, "optim/steps", &steps);
    if (rc == 0)
        rc = weft_ckpt_get_u64(c, "optim/base", &saved_base);
    weft_optim *o = NULL;
    if (rc == 0)
        rc = weft_optim_create(&o, &oc, base, n);
    int count = rc == 0 ? weft_optim_state_count(o) : 0;
    for (int i = 0; rc == 0 && i < count; i++) {
        const char *sname;
        float *s = weft_optim_state(o, i, &sname);
        char name[256];
        weft_ckpt_entry e;
        snprintf(name, sizeof name, "optim/%s", sname);
        rc = weft_ckpt_find(c, name, &e);
        if (rc == 0 && (e.kind != WEFT_CKPT_TENSOR || e.dtype != WEFT_F32))
            rc = WEFT_EIO;
        if (rc == 0)
            rc = copy_mapped(m, e.data, (size_t)saved_base, e.nbytes / sizeof(float), s, base, n);
    }
    if (rc == 0)
        rc = weft_optim_set_steps(o, (int64_t)steps);
    if (rc != 0) {
        weft_optim_destroy(o);
        return rc;
    }
    *out = o;
    return 0;
}
