/* A sharded save described from its manifest (weft_ckpt_shard_list in
 * include/weft.h): where each tensor's slices lie, for the tools. The
 * whole model is made only for its tensors' names and shapes. */
#include "train/ckpt_shard.h"

#include <stdio.h>
#include <string.h>

int weft_ckpt_load_manifest(weft_ckpt **out, const char *dir)
{
    if (!out || !dir)
        return WEFT_EINVAL;
    return ckpt_shard_open_records(dir, out);
}

/* Line k of text, or "?". */
static const char *line(const char *text, size_t len, int k, char *buf, size_t cap)
{
    const char *end = text + len;
    for (; k > 0 && text < end; k--) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        text = nl ? nl + 1 : end;
    }
    size_t n = 0;
    while (text + n < end && text[n] != '\n')
        n++;
    if (text >= end || n >= cap)
        return "?";
    memcpy(buf, text, n);
    buf[n] = 0;
    return buf;
}

static void slice_line(FILE *f, const int64_t *q, const weft_ckpt_entry *files)
{
    char name[256];
    const char *fn = line(files->data, files->nbytes, (int)q[0], name, sizeof name);
    if (q[5] > 1)
        fprintf(f, "      %s @%lld: %lld runs of %lld from element %lld every %lld\n", fn,
                (long long)q[6], (long long)q[5], (long long)q[3], (long long)q[2],
                (long long)q[4]);
    else
        fprintf(f, "      %s @%lld: elements [%lld, %lld)\n", fn, (long long)q[6],
                (long long)q[2], (long long)(q[2] + q[3]));
}

/* Each tensor's shape and the parameter slices that meet it. */
static void list_tensors(FILE *f, const weft_model *m, const weft_ckpt_entry *sl, int fields,
                         const weft_ckpt_entry *files)
{
    const int64_t *s = sl->data;
    for (int i = 0; i < weft_model_tensor_count(m); i++) {
        weft_tensor_info ti;
        if (weft_model_tensor_info(m, i, &ti) != 0)
            continue;
        fprintf(f, "  slices of param/%s [", ti.name);
        for (int d = 0; d < ti.ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)ti.shape[d]);
        fprintf(f, "] elements [%zu, %zu)\n", ti.whole_offset, ti.whole_offset + ti.whole_numel);
        for (int64_t k = 0; k < sl->shape[0]; k++) {
            const int64_t *q = s + k * fields;
            uint64_t stride = q[5] > 1 ? (uint64_t)q[4] : (uint64_t)q[3];
            uint64_t lo = (uint64_t)q[2], hi = lo + ((uint64_t)q[5] - 1) * stride + (uint64_t)q[3];
            if (q[1] == 0 && q[5] > 0 && lo < ti.whole_offset + ti.whole_numel &&
                hi > ti.whole_offset)
                slice_line(f, q, files);
        }
    }
}

int weft_ckpt_shard_list(const char *dir, FILE *f)
{
    weft_ckpt *c = NULL;
    weft_model *m = NULL;
    weft_model_config cfg;
    weft_ckpt_entry sl, files, info, vectors;
    char layout[256] = "?", at[4200] = "?", name[256];
    uint64_t step = 0;
    int rc = weft_ckpt_load_manifest(&c, dir);
    if (rc == 0 && (weft_ckpt_find(c, "shard/slices", &sl) || weft_ckpt_find(c, "shard/files", &files) ||
                    weft_ckpt_find(c, "shard/file_info", &info) ||
                    weft_ckpt_find(c, "shard/vectors", &vectors) || sl.ndim != 2 ||
                    info.ndim != 2 || weft_ckpt_model_config(c, &cfg)))
        rc = WEFT_EIO;
    if (rc == 0)
        rc = weft_model_create(&m, &cfg, 0);
    if (rc != 0) {
        weft_ckpt_free(c);
        return rc;
    }
    weft_ckpt_get_str(c, "shard/layout", layout, sizeof layout);
    weft_ckpt_get_str(c, "shard/dir", at, sizeof at);
    weft_ckpt_get_u64(c, "train/step", &step);
    int fields = (int)sl.shape[1];
    fprintf(f, "%s: step %llu, layout %s, %lld files, %lld slices%s\n", at,
            (unsigned long long)step, layout, (long long)info.shape[0], (long long)sl.shape[0],
            fields == CKPT_SLICE_FIELDS ? ", each with its CRC" : "");
    const int64_t *fi = info.data;
    for (int64_t k = 0; k < info.shape[0]; k++)
        fprintf(f, "  file %s: %lld bytes, crc %08llx\n",
                line(files.data, files.nbytes, (int)k, name, sizeof name),
                (long long)fi[2 * k], (unsigned long long)(uint32_t)fi[2 * k + 1]);
    for (int v = 0; v < 16 && strcmp(line(vectors.data, vectors.nbytes, v, name, sizeof name),
                                      "?") != 0; v++) {
        int64_t n = 0;
        for (int64_t k = 0; k < sl.shape[0]; k++)
            n += ((const int64_t *)sl.data)[k * fields + 1] == v;
        fprintf(f, "  vector %d %s: %lld slices\n", v, name, (long long)n);
    }
    list_tensors(f, m, &sl, fields, &files);
    weft_model_destroy(m);
    weft_ckpt_free(c);
    return 0;
}
