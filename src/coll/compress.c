/* The gradient compressor handle: its spec ("int8", "topk:K",
 * "powersgd:R"), its state, and the dispatch to the method's collective. */
#include "coll/compress.h"

#include "core/vec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int weft_compress_parse(const char *s, weft_compress_spec *out)
{
    weft_compress_spec sp = { 0 };
    char *end;
    if (!s || !out)
        return WEFT_EINVAL;
    if (!weft_codec_parse(s, &sp.codec)) {
        sp.kind = WEFT_COMPRESS_CODEC;
    } else if (!strncasecmp(s, "topk:", 5)) {
        errno = 0;
        double v = strtod(s + 5, &end);
        if (errno || end == s + 5 || *end || !(v > 0) || v > 1e15)
            return WEFT_EINVAL;
        sp.kind = WEFT_COMPRESS_TOPK;
        if (v < 1)
            sp.ratio = v;
        else if (v == (double)(size_t)v)
            sp.k = (size_t)v;
        else
            return WEFT_EINVAL;
    } else if (!strncasecmp(s, "powersgd:", 9)) {
        errno = 0;
        long v = strtol(s + 9, &end, 10);
        if (errno || end == s + 9 || *end || v < 1 || v > 1 << 16)
            return WEFT_EINVAL;
        sp.kind = WEFT_COMPRESS_POWERSGD;
        sp.rank = (int)v;
    } else
        return WEFT_EINVAL;
    *out = sp;
    return 0;
}

int weft_compress_format(const weft_compress_spec *s, char *buf, size_t len)
{
    if (!s)
        return snprintf(buf, len, "?");
    switch (s->kind) {
    case WEFT_COMPRESS_TOPK:
        return s->k ? snprintf(buf, len, "topk:%zu", s->k) : snprintf(buf, len, "topk:%g", s->ratio);
    case WEFT_COMPRESS_POWERSGD: return snprintf(buf, len, "powersgd:%d", s->rank);
    default: return snprintf(buf, len, "%s", weft_codec_name(s->codec) ? weft_codec_name(s->codec) : "?");
    }
}

static int spec_ok(const weft_compress_spec *s)
{
    switch (s->kind) {
    case WEFT_COMPRESS_CODEC: return weft_codec_name(s->codec) != NULL;
    case WEFT_COMPRESS_TOPK: return s->k > 0 || (s->ratio > 0 && s->ratio <= 1);
    case WEFT_COMPRESS_POWERSGD: return s->rank >= 1;
    default: return 0;
    }
}

int weft_compressor_create(weft_compressor **out, weft_comm *c, const weft_compress_spec *s,
                           size_t count)
{
    if (!out || !c || !s || !spec_ok(s) || weft_comm_size(c) < 1 ||
        (s->kind == WEFT_COMPRESS_TOPK && count > UINT32_MAX))
        return WEFT_EINVAL;
    weft_compressor *z = calloc(1, sizeof *z);
    if (!z)
        return WEFT_ENOMEM;
    z->comm = c;
    z->spec = *s;
    z->count = count;
    if (s->kind != WEFT_COMPRESS_CODEC && !(z->err = calloc(count + 1, sizeof *z->err))) {
        free(z);
        return WEFT_ENOMEM;
    }
    *out = z;
    return 0;
}

int weft_compressor_add_matrix(weft_compressor *z, size_t offset, int rows, int cols)
{
    if (!z || rows < 1 || cols < 1 || z->q_ready)
        return WEFT_EINVAL;
    size_t n = (size_t)rows * (size_t)cols;
    size_t after = z->nmat ? z->mat[z->nmat - 1].offset +
                             (size_t)z->mat[z->nmat - 1].rows * (size_t)z->mat[z->nmat - 1].cols
                           : 0;
    if (offset < after || offset > z->count || n > z->count - offset)
        return WEFT_EINVAL;
    if (z->spec.kind != WEFT_COMPRESS_POWERSGD)
        return 0;
    int rc = VEC_RESERVE(z->mat, z->mat_cap, (size_t)z->nmat + 1);
    if (rc)
        return rc;
    compress_matrix *x = &z->mat[z->nmat];
    *x = (compress_matrix){ .offset = offset, .rows = rows, .cols = cols };
    /* worth it only when the factors are at most half the matrix */
    uint64_t r = (uint64_t)z->spec.rank;
    x->low_rank = 2 * ((uint64_t)rows + (uint64_t)cols) * r <= (uint64_t)n;
    if (x->low_rank) {
        float *q = realloc(z->q, (z->q_len + (size_t)cols * r) * sizeof *q);
        if (!q)
            return WEFT_ENOMEM;
        z->q = q;
        x->q_off = z->q_len;
        z->q_len += (size_t)cols * r;
    }
    z->nmat++;
    return 0;
}

int weft_compressor_allreduce(weft_compressor *z, float *buf, weft_op op)
{
    if (!z || (z->count && !buf) || (op != WEFT_SUM && op != WEFT_AVG))
        return WEFT_EINVAL;
    int p = weft_comm_size(z->comm), r = weft_comm_rank(z->comm), rc;
    if (z->spec.kind == WEFT_COMPRESS_TOPK)
        return z->count ? compress_topk_run(z, buf, op) : 0;
    if (z->spec.kind == WEFT_COMPRESS_POWERSGD) {
        uint64_t before = z->sent;
        rc = compress_powersgd_run(z, buf, op);
        if (!rc)
            z->raw += compress_ring_bytes(p, r, z->count, sizeof(float));
        else
            z->sent = before;
        return rc;
    }
    rc = weft_allreduce_codec(z->comm, buf, buf, z->count, op, z->spec.codec, &z->sent);
    if (!rc)
        z->raw += compress_ring_bytes(p, r, z->count, sizeof(float));
    return rc;
}

void weft_compressor_bytes(const weft_compressor *z, uint64_t *sent, uint64_t *raw)
{
    if (sent)
        *sent = z ? z->sent : 0;
    if (raw)
        *raw = z ? z->raw : 0;
}

void weft_compressor_destroy(weft_compressor *z)
{
    if (!z)
        return;
    free(z->err);
    free(z->mat);
    free(z->q);
    free(z);
}
