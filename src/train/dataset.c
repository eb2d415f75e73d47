#include "train/dataset_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

weft_dataset *train_dataset_alloc(weft_data_kind kind, uint64_t n, int x_dim, int n_classes,
                                  const char *name)
{
    weft_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    ds->info.kind = kind;
    ds->info.n = n;
    ds->info.x_dim = x_dim;
    ds->info.n_classes = n_classes;
    snprintf(ds->info.name, sizeof ds->info.name, "%s", name);
    return ds;
}

void weft_dataset_info_get(const weft_dataset *ds, weft_dataset_info *out)
{
    if (ds && out)
        *out = ds->info;
    else if (out)
        memset(out, 0, sizeof *out);
}

void weft_dataset_free(weft_dataset *ds)
{
    if (!ds)
        return;
    if (ds->destroy)
        ds->destroy(ds);
    free(ds);
}

int weft_dataset_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    if (!ds || !y || i >= ds->info.n)
        return WEFT_EINVAL;
    if (ds->info.kind == WEFT_DATA_IMAGE ? !x : !tokens)
        return WEFT_EINVAL;
    int rc = ds->get(ds, i, x, tokens, y);
    if (rc == 0 && ds->normalized)
        for (int k = 0; k < ds->info.x_dim; k++)
            x[k] = (x[k] - ds->norm_mean) * ds->norm_inv_std;
    return rc;
}

int weft_dataset_normalize(weft_dataset *ds, float mean, float std)
{
    if (!ds || ds->info.kind != WEFT_DATA_IMAGE || !(std > 0))
        return WEFT_EINVAL;
    ds->norm_mean = mean;
    ds->norm_inv_std = 1.0f / std;
    ds->normalized = mean != 0 || std != 1;
    return 0;
}

int weft_dataset_pixel_stats(const weft_dataset *ds, uint64_t max_samples, double *mean,
                             double *std)
{
    if (!ds || !mean || !std || ds->info.kind != WEFT_DATA_IMAGE)
        return WEFT_EINVAL;
    uint64_t n = ds->info.n < max_samples ? ds->info.n : max_samples;
    float *x = malloc((size_t)ds->info.x_dim * sizeof *x);
    if (!x)
        return WEFT_ENOMEM;
    double s = 0, s2 = 0;
    int32_t y;
    for (uint64_t i = 0; i < n; i++) {
        int rc = ds->get(ds, i, x, NULL, &y); /* raw pixels, whatever the normalisation */
        if (rc != 0) {
            free(x);
            return rc;
        }
        for (int k = 0; k < ds->info.x_dim; k++) {
            s += x[k];
            s2 += (double)x[k] * x[k];
        }
    }
    free(x);
    double cnt = (double)n * ds->info.x_dim;
    *mean = cnt > 0 ? s / cnt : 0;
    double var = cnt > 0 ? s2 / cnt - *mean * *mean : 0;
    *std = var > 0 ? sqrt(var) : 0;
    return 0;
}

int weft_dataset_prompt(const weft_dataset *ds, uint64_t i, char *prompt, size_t prompt_cap,
                        char *answer, size_t answer_cap)
{
    if (!ds || !prompt || !answer || prompt_cap == 0 || answer_cap == 0)
        return WEFT_EINVAL;
    if (!ds->prompt)
        return WEFT_ENOTSUP;
    return ds->prompt(ds, i, prompt, prompt_cap, answer, answer_cap);
}
