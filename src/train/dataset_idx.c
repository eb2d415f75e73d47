/* MNIST-layout idx files: a big-endian header (magic 0x0000 08 ndim, then
 * ndim u32 sizes) followed by u8 data. */
#include "train/data_file.h"
#include "train/dataset_impl.h"

#include "core/param.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *image_file, *label_file; /* whole files; data after headers */
    const unsigned char *pixels, *labels;
} idx_data;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks an idx header of ndim dimensions over u8 data; fills dims. */
static int idx_header(const unsigned char *buf, size_t n, int ndim, uint32_t *dims)
{
    if (n < 4 + 4 * (size_t)ndim)
        return WEFT_EIO;
    if (buf[0] != 0 || buf[1] != 0 || buf[2] != 0x08 || buf[3] != ndim)
        return WEFT_EIO;
    uint64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(buf + 4 + 4 * i);
        total *= dims[i];
        if (dims[i] == 0 || total > ((uint64_t)1 << 40))
            return WEFT_EIO;
    }
    return n - 4 - 4 * (size_t)ndim == total ? 0 : WEFT_EIO;
}

static int idx_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const idx_data *d = ds->impl;
    const unsigned char *px = d->pixels + i * (uint64_t)ds->info.x_dim;
    for (int k = 0; k < ds->info.x_dim; k++)
        x[k] = (float)px[k] * (1.0f / 255.0f);
    y[0] = d->labels[i];
    return 0;
}

static void idx_destroy(weft_dataset *ds)
{
    idx_data *d = ds->impl;
    if (d) {
        free(d->image_file);
        free(d->label_file);
        free(d);
    }
}

int weft_dataset_open_idx(weft_dataset **out, const char *images, const char *labels)
{
    if (!out || !images || !labels)
        return WEFT_EINVAL;
    *out = NULL;
    idx_data *d = calloc(1, sizeof *d);
    if (!d)
        return WEFT_ENOMEM;
    size_t ni = 0, nl = 0;
    uint32_t idims[3], ldims[1];
    int rc = train_data_read_file(images, &d->image_file, &ni);
    if (rc == 0)
        rc = train_data_read_file(labels, &d->label_file, &nl);
    if (rc == 0)
        rc = idx_header(d->image_file, ni, 3, idims);
    if (rc == 0)
        rc = idx_header(d->label_file, nl, 1, ldims);
    if (rc == 0 && (ldims[0] != idims[0] || (uint64_t)idims[1] * idims[2] > (1u << 24)))
        rc = WEFT_EIO;
    int n_classes = 0;
    if (rc == 0) {
        d->pixels = d->image_file + 16;
        d->labels = d->label_file + 8;
        for (uint32_t i = 0; i < ldims[0]; i++)
            if (d->labels[i] >= n_classes)
                n_classes = d->labels[i] + 1;
    }
    weft_dataset *ds = NULL;
    if (rc == 0) {
        const char *base = strrchr(images, '/');
        ds = train_dataset_alloc(WEFT_DATA_IMAGE, idims[0], (int)(idims[1] * idims[2]),
                                 n_classes < 10 ? 10 : n_classes, base ? base + 1 : images);
        if (!ds)
            rc = WEFT_ENOMEM;
    }
    if (rc != 0) {
        weft_dataset tmp = { .impl = d };
        idx_destroy(&tmp);
        return rc;
    }
    ds->info.height = (int)idims[1];
    ds->info.width = (int)idims[2];
    ds->get = idx_get;
    ds->destroy = idx_destroy;
    ds->impl = d;
    *out = ds;
    return 0;
}

/* dir/stem, or dir/stem.gz when only that exists. */
static int find_file(char *buf, size_t cap, const char *dir, const char *stem)
{
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, stem) >= cap)
        return WEFT_EINVAL;
    if (train_data_file_exists(buf))
        return 0;
    if ((size_t)snprintf(buf, cap, "%s/%s.gz", dir, stem) >= cap)
        return WEFT_EINVAL;
    return train_data_file_exists(buf) ? 0 : WEFT_EIO;
}

int weft_dataset_open_mnist_dir(weft_dataset **out, const char *dir, const char *split)
{
    if (!out || !split)
        return WEFT_EINVAL;
    *out = NULL;
    const char *prefix;
    if (strcmp(split, "train") == 0)
        prefix = "train";
    else if (strcmp(split, "test") == 0 || strcmp(split, "t10k") == 0)
        prefix = "t10k";
    else
        return WEFT_EINVAL;
    if ((!dir || !*dir) && param_read_str(PARAM_fashion_mnist, &dir, NULL, 0))
        return WEFT_ECONFIG;
    char images[4096], labels[4096], stem[64];
    snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", prefix);
    int rc = find_file(images, sizeof images, dir, stem);
    if (rc != 0)
        return rc;
    snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", prefix);
    rc = find_file(labels, sizeof labels, dir, stem);
    if (rc != 0)
        return rc;
    rc = weft_dataset_open_idx(out, images, labels);
    if (rc == 0) { /* named after the directory: "fashion-mnist/train" */
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && dir[start - 1] != '/')
            start--;
        snprintf((*out)->info.name, sizeof (*out)->info.name, "%.*s/%s", (int)(len - start),
                 dir + start, split);
    }
    return rc;
}
