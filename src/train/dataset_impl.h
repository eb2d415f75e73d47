/* What every dataset kind provides; weft_dataset_* dispatch through it. */
#ifndef WEFT_TRAIN_DATASET_IMPL_H
#define WEFT_TRAIN_DATASET_IMPL_H

#include "weft.h"

struct weft_dataset {
    weft_dataset_info info;
    int (*get)(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y);
    int (*prompt)(const weft_dataset *ds, uint64_t i, char *prompt, size_t prompt_cap,
                  char *answer, size_t answer_cap); /* NULL: none */
    void (*destroy)(weft_dataset *ds);               /* frees what hangs off impl */
    void *impl;
    float norm_mean, norm_inv_std; /* images: x = (x - mean) * inv_std */
    int normalized;
    /* The loader shuffles through a keyed bijection, no table: O(1) memory
     * for corpora of any size. Set by kinds newer than the loader's table,
     * whose recorded runs keep the table's order. */
    int keyed_order;
};

/* calloc'ed dataset with the common fields set; NULL when out of memory. */
weft_dataset *train_dataset_alloc(weft_data_kind kind, uint64_t n, int x_dim, int n_classes,
                                  const char *name);

#endif
