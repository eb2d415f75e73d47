/* weft-train's data: the datasets --data names, standardised, and the
 * loader that gives each rank its part of every global batch. */
#include "train_tool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

void data_open(const run_opts *r, data_sets *d)
{
    int rc, gpt = run_opts_is_gpt(r);
    const char *what = r->data;
    path_check("--data", what, 1, 0);
    if (strcmp(what, "builtin") == 0) {
        if (gpt) {
            int f = run_opts_format_code(r->format);
            rc = weft_dataset_addition(&d->train, r->data_seed, 0, r->digits, f, r->seq,
                                       (uint64_t)r->train_size);
            if (rc == 0)
                rc = weft_dataset_addition(&d->eval, r->data_seed, 1, r->digits, f, r->seq, 2000);
        } else {
            rc = weft_dataset_synth_images(&d->train, r->data_seed, 0, (uint64_t)r->train_size);
            if (rc == 0)
                rc = weft_dataset_synth_images(&d->eval, r->data_seed, 1, 10000);
        }
    } else if (!gpt && (strcmp(what, "fashion-mnist") == 0 || strcmp(what, "mnist") == 0 ||
                        is_dir(what))) {
        const char *dir = is_dir(what) ? what : NULL;
        if (strcmp(what, "mnist") == 0)
            die("--data mnist: give the directory that holds the MNIST idx files instead");
        rc = weft_dataset_open_mnist_dir(&d->train, dir, "train");
        if (rc == 0)
            rc = weft_dataset_open_mnist_dir(&d->eval, dir, "test");
        if (rc != 0)
            die("cannot read %s idx files from %s: %s%s", what,
                dir ? dir : (getenv("WEFT_FASHION_MNIST") ? getenv("WEFT_FASHION_MNIST")
                                                          : WEFT_FASHION_MNIST_DIR),
                weft_strerror(rc),
                dir ? "" : " (Debian: apt-get install dataset-fashion-mnist)");
    } else if (gpt) {
        rc = weft_dataset_open_tokens(&d->train, what, r->seq, 0, 0.9);
        if (rc == 0)
            rc = weft_dataset_open_tokens(&d->eval, what, r->seq, 0.9, 1);
        if (rc != 0)
            die("cannot use token shard %s with --seq %d: %s (make one with weft-tokenize; "
                "the last 10%% must hold more than one window)",
                what, r->seq, weft_strerror(rc));
    } else {
        die("--data %s: not builtin, fashion-mnist or a directory of idx files", what);
        return;
    }
    if (rc != 0)
        die("cannot build the %s data: %s", what, weft_strerror(rc));
    weft_dataset_info_get(d->train, &d->ti);
    weft_dataset_info_get(d->eval, &d->ei);
    if (d->ti.kind == WEFT_DATA_IMAGE) {
        /* standardise both splits with the training pixels' statistics */
        rc = weft_dataset_pixel_stats(d->train, 10000, &d->mean, &d->std);
        if (rc == 0 && d->std > 0) {
            weft_dataset_normalize(d->train, (float)d->mean, (float)d->std);
            weft_dataset_normalize(d->eval, (float)d->mean, (float)d->std);
        }
    }
    if (gpt != (d->ti.kind == WEFT_DATA_SEQ))
        die("--model %s does not fit the data %s", r->model, d->ti.name);
}

void data_free(data_sets *d)
{
    weft_dataset_free(d->train);
    weft_dataset_free(d->eval);
}

/* Each rank needs a sample of every batch, and of every micro-step of it. */
weft_loader *data_loader(const run_opts *r, const data_sets *d, int rank, int world, int accum,
                         const char *who)
{
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = r->batch;
    lc.seed = r->seed;
    lc.rank = rank;
    lc.world_size = world;
    if (world > r->batch)
        die("%d %s cannot share a batch of %d", world, who, r->batch);
    if (accum * world > r->batch)
        die("--accum %d on %d ranks: micro-batches of a batch of %d would be empty", accum,
            world, r->batch);
    weft_loader *l;
    int rc = weft_loader_create(&l, d->train, &lc);
    if (rc != 0)
        die("cannot create the data loader: %s", weft_strerror(rc));
    return l;
}
