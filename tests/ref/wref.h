/* Reader for the .wref reference files written by tools/ref/make_ref.py
 * (format described there): loads every entry into memory. */
#ifndef WEFT_TEST_WREF_H
#define WEFT_TEST_WREF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[128];
    uint32_t dtype, ndim, dims[4];
    size_t n;
    void *data;
} wref_entry;

typedef struct {
    wref_entry *e;
    uint32_t count;
} wref_file;

static int wref_u32(FILE *f, uint32_t *v)
{
    unsigned char b[4];
    if (fread(b, 1, 4, f) != 4)
        return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static void wref_free(wref_file *w)
{
    for (uint32_t i = 0; w->e && i < w->count; i++)
        free(w->e[i].data);
    free(w->e);
    w->e = NULL;
    w->count = 0;
}

/* 0 on success; the data is assumed little-endian like the host. */
static int wref_load(wref_file *w, const char *path)
{
    memset(w, 0, sizeof *w);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char magic[8];
    uint32_t count;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "WREF0001", 8) || wref_u32(f, &count) ||
        count > 100000)
        goto bad;
    w->e = calloc(count ? count : 1, sizeof *w->e);
    if (!w->e)
        goto bad;
    for (uint32_t i = 0; i < count; i++) {
        wref_entry *e = &w->e[i];
        uint32_t len;
        w->count = i + 1;
        if (wref_u32(f, &len) || len >= sizeof e->name || fread(e->name, 1, len, f) != len ||
            wref_u32(f, &e->dtype) || e->dtype > 1 || wref_u32(f, &e->ndim) || e->ndim > 4)
            goto bad;
        e->n = 1;
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (wref_u32(f, &e->dims[d]))
                goto bad;
            e->n *= e->dims[d];
        }
        e->data = malloc(e->n * 4 + 1);
        if (!e->data || fread(e->data, 4, e->n, f) != e->n)
            goto bad;
    }
    fclose(f);
    return 0;
bad:
    fclose(f);
    wref_free(w);
    return -1;
}

static const wref_entry *wref_get(const wref_file *w, const char *name)
{
    for (uint32_t i = 0; i < w->count; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return &w->e[i];
    return NULL;
}

static const float *wref_f32(const wref_file *w, const char *name, size_t *n)
{
    const wref_entry *e = wref_get(w, name);
    if (!e || e->dtype != 0)
        return NULL;
    if (n)
        *n = e->n;
    return e->data;
}

static const int32_t *wref_i32(const wref_file *w, const char *name, size_t *n)
{
    const wref_entry *e = wref_get(w, name);
    if (!e || e->dtype != 1)
        return NULL;
    if (n)
        *n = e->n;
    return e->data;
}

#endif
