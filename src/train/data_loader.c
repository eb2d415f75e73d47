/* The loader turns a dataset into the global batch stream described in
 * weft.h: epoch e's order is a Fisher-Yates shuffle driven by (seed, e)
 * alone (or, for datasets that ask, a bijection keyed by them), so every
 * rank and every world size sees the same stream and a resume only needs
 * the stream position. */
#include "train/data_rng.h"
#include "train/dataset_impl.h"

#include <stdlib.h>
#include <string.h>

enum { STREAM_SHUFFLE = 1000 };

struct weft_loader {
    const weft_dataset *ds;
    weft_loader_config cfg;
    uint64_t position;      /* next sample of the global stream */
    uint64_t perm_epoch;    /* epoch whose order perm holds; UINT64_MAX: none */
    uint32_t *perm;         /* NULL when not shuffling */
    int begin, end;         /* this rank's part of a global batch */
    float *x;
    int32_t *tokens, *y;
    uint64_t *index;
};

void weft_shard_range(uint64_t n, int rank, int world_size, uint64_t *begin, uint64_t *end)
{
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        *begin = *end = 0;
        return;
    }
    /* floor(r*n/w) without overflow for any n below 2^63 and w below 2^31 */
    uint64_t q = n / (uint64_t)world_size, r = n % (uint64_t)world_size;
    *begin = q * (uint64_t)rank + r * (uint64_t)rank / (uint64_t)world_size;
    *end = q * (uint64_t)(rank + 1) + r * (uint64_t)(rank + 1) / (uint64_t)world_size;
}

void weft_loader_config_default(weft_loader_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->global_batch = 64;
    cfg->rank = 0;
    cfg->world_size = 1;
    cfg->seed = 1;
    cfg->shuffle = 1;
}

static void shuffle_epoch(weft_loader *l, uint64_t epoch)
{
    uint64_t n = l->ds->info.n;
    data_rng r;
    data_rng_init(&r, l->cfg.seed, STREAM_SHUFFLE, epoch);
    for (uint64_t i = 0; i < n; i++)
        l->perm[i] = (uint32_t)i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = train_data_rng_below(&r, i + 1);
        uint32_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
    l->perm_epoch = epoch;
}

/* Position i of epoch e's order over n samples without a table: a
 * balanced Feistel network on the smallest even number of bits that covers
 * n, keyed by (seed, e), walked along its cycle until it lands below n
 * (cycle-walking keeps it a bijection of [0, n)). The domain is under 4n, so
 * a walk takes fewer than four rounds of the network on average. */
static uint64_t keyed_position(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t i)
{
    int half = 1;
    while (half < 32 && (n - 1) >> (2 * half) != 0)
        half++;
    uint64_t mask = (1ull << half) - 1;
    data_rng r;
    data_rng_init(&r, seed, STREAM_SHUFFLE, epoch);
    uint64_t key = data_rng_u64(&r), x = i;
    do {
        uint64_t left = x >> half, right = x & mask;
        for (uint64_t round = 0; round < 6; round++) {
            uint64_t f = data_mix64(key ^ (round << 56) ^ right) & mask;
            uint64_t t = left ^ f;
            left = right;
            right = t;
        }
        x = left << half | right;
    } while (x >= n);
    return x;
}

int weft_loader_create(weft_loader **out, const weft_dataset *ds, const weft_loader_config *cfg)
{
    if (!out || !ds || !cfg || cfg->global_batch < 1 || cfg->world_size < 1 ||
        cfg->world_size > cfg->global_batch || cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return WEFT_EINVAL;
    *out = NULL;
    int table = cfg->shuffle && !ds->keyed_order;
    if (table && ds->info.n > UINT32_MAX)
        return WEFT_ENOTSUP;
    weft_loader *l = calloc(1, sizeof *l);
    if (!l)
        return WEFT_ENOMEM;
    l->ds = ds;
    l->cfg = *cfg;
    l->perm_epoch = UINT64_MAX;
    uint64_t b, e;
    weft_shard_range((uint64_t)cfg->global_batch, cfg->rank, cfg->world_size, &b, &e);
    if (cfg->part_end > 0) {
        if (cfg->part_begin < 0 || cfg->part_begin >= cfg->part_end ||
            cfg->part_end > cfg->global_batch) {
            weft_loader_free(l);
            return WEFT_EINVAL;
        }
        b = (uint64_t)cfg->part_begin;
        e = (uint64_t)cfg->part_end;
    }
    l->begin = (int)b;
    l->end = (int)e;
    size_t local = (size_t)(l->end - l->begin), dim = (size_t)ds->info.x_dim;
    int ok = 1;
    if (table)
        ok &= (l->perm = malloc(ds->info.n * sizeof *l->perm)) != NULL;
    if (ds->info.kind == WEFT_DATA_IMAGE) {
        ok &= (l->x = malloc(local * dim * sizeof *l->x)) != NULL;
        ok &= (l->y = malloc(local * sizeof *l->y)) != NULL;
    } else {
        ok &= (l->tokens = malloc(local * dim * sizeof *l->tokens)) != NULL;
        ok &= (l->y = malloc(local * dim * sizeof *l->y)) != NULL;
    }
    ok &= (l->index = malloc(local * sizeof *l->index)) != NULL;
    if (!ok) {
        weft_loader_free(l);
        return WEFT_ENOMEM;
    }
    *out = l;
    return 0;
}

int weft_loader_next(weft_loader *l, weft_batch *bt)
{
    if (!l || !bt)
        return WEFT_EINVAL;
    const weft_dataset *ds = l->ds;
    uint64_t n = ds->info.n, B = (uint64_t)l->cfg.global_batch;
    size_t dim = (size_t)ds->info.x_dim;
    int image = ds->info.kind == WEFT_DATA_IMAGE;
    for (int k = l->begin; k < l->end; k++) {
        uint64_t s = l->position + (uint64_t)k, epoch = s / n, i = s % n;
        if (l->perm) {
            if (l->perm_epoch != epoch)
                shuffle_epoch(l, epoch);
            i = l->perm[i];
        } else if (l->cfg.shuffle) {
            i = keyed_position(l->cfg.seed, epoch, n, i);
        }
        size_t j = (size_t)(k - l->begin);
        l->index[j] = i;
        int rc = image ? weft_dataset_get(ds, i, l->x + j * dim, NULL, l->y + j)
                       : weft_dataset_get(ds, i, NULL, l->tokens + j * dim, l->y + j * dim);
        if (rc != 0)
            return rc;
    }
    memset(bt, 0, sizeof *bt);
    bt->n = l->end - l->begin;
    bt->offset = l->begin;
    bt->global_n = (int)B;
    bt->x_dim = (int)dim;
    bt->x = l->x;
    bt->tokens = l->tokens;
    bt->y = l->y;
    bt->index = l->index;
    bt->step = l->position / B;
    l->position += B;
    return 0;
}

uint64_t weft_loader_position(const weft_loader *l)
{
    return l ? l->position : 0;
}

int weft_loader_seek(weft_loader *l, uint64_t position)
{
    if (!l)
        return WEFT_EINVAL;
    l->position = position;
    return 0;
}

void weft_loader_free(weft_loader *l)
{
    if (!l)
        return;
    free(l->perm);
    free(l->x);
    free(l->tokens);
    free(l->y);
    free(l->index);
    free(l);
}
