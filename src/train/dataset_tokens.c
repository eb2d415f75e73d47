/* Sequence dataset over a token shard: non-overlapping windows, each with
 * one extra token for the last target. */
#include "train/dataset_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *all;          /* the whole shard */
    const int32_t *tokens; /* the [begin, end) part */
} tokens_data;

static int tokens_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const tokens_data *d = ds->impl;
    size_t T = (size_t)ds->info.x_dim;
    const int32_t *p = d->tokens + i * T;
    memcpy(tokens, p, T * sizeof *p);
    memcpy(y, p + 1, T * sizeof *p);
    return 0;
}

static void tokens_destroy(weft_dataset *ds)
{
    tokens_data *d = ds->impl;
    if (d) {
        free(d->all);
        free(d);
    }
}

int weft_dataset_open_tokens(weft_dataset **out, const char *path, int seq_len,
                             double begin, double end)
{
    if (!out || !path || seq_len < 1 || !(begin >= 0 && begin < end && end <= 1))
        return WEFT_EINVAL;
    *out = NULL;
    tokens_data *d = calloc(1, sizeof *d);
    if (!d)
        return WEFT_ENOMEM;
    size_t n;
    uint32_t vocab;
    int rc = weft_tokshard_read(path, &d->all, &n, &vocab);
    if (rc != 0) {
        free(d);
        return rc;
    }
    size_t lo = (size_t)(begin * (double)n), hi = (size_t)(end * (double)n);
    if (hi > n)
        hi = n;
    uint64_t windows = hi - lo > (size_t)seq_len ? (hi - lo - 1) / (size_t)seq_len : 0;
    const char *base = strrchr(path, '/');
    weft_dataset *ds = windows ? train_dataset_alloc(WEFT_DATA_SEQ, windows, seq_len, (int)vocab,
                                                     base ? base + 1 : path)
                               : NULL;
    if (!ds) {
        free(d->all);
        free(d);
        return windows ? WEFT_ENOMEM : WEFT_EINVAL;
    }
    d->tokens = d->all + lo;
    ds->get = tokens_get;
    ds->destroy = tokens_destroy;
    ds->impl = d;
    *out = ds;
    return 0;
}
