/* The run's data: the datasets --data names, standardised, and the loader
 * that gives each rank its part of every global batch. */
#include "run/run_data.h"

#include "run/run_config.h"
#include "run/run_cp.h"
#include "run/run_paths.h"
#include "train/llmc_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The vocabulary of the model --model names (a spec, or a checkpoint's,
 * whose options the run took); 0 for "gpt", whose vocabulary the data
 * gives. */
static int model_vocab(const run_opts *r)
{
    weft_model_config cfg;
    if (!strchr(r->model, ':') || weft_model_config_parse(r->model, &cfg) != 0)
        return 0;
    return cfg.type == WEFT_MODEL_MLP ? 0 : cfg.vocab;
}

/* llm.c's validation shards beside training ones: a directory's own, or
 * the name with _val for _train and any shard number ("fineweb_train_*.bin"
 * and "fineweb_train_000001.bin": "fineweb_val_*.bin", as llm.c numbers
 * them from 0 and its training shards from 1). 0: none to be found. */
static int val_pattern(const char *train, char *out, size_t cap)
{
    const char *base = strrchr(train, '/');
    base = base ? base + 1 : train;
    const char *m = strstr(base, "_train");
    if (m) {
        const char *rest = m + 6, *num = rest[0] == '_' ? rest + 1 : rest;
        size_t digits = strspn(num, "0123456789");
        if (num != rest && digits)
            return snprintf(out, cap, "%.*s_val_*%s", (int)(m - train), train,
                            num + digits) < (int)cap;
        return snprintf(out, cap, "%.*s_val%s", (int)(m - train), train, rest) < (int)cap;
    }
    struct stat st;
    if (stat(train, &st) == 0 && S_ISREG(st.st_mode))
        return 0; /* one file that says no split: its validation is not ours to guess */
    return snprintf(out, cap, "%s", train) < (int)cap;
}

/* --data llmc:PATTERN or llmc:TRAIN,VAL (or a shard recognised by its
 * magic): training windows from the _train shards, validation from the
 * _val ones; the model's vocabulary bounds the tokens. */
static int open_llmc(weft_run *t, const run_opts *r, const char *spec, data_sets *d)
{
    char train[2048], val[2048], err[2600];
    const char *comma = strchr(spec, ',');
    snprintf(train, sizeof train, "%.*s", comma ? (int)(comma - spec) : (int)strlen(spec), spec);
    if (comma)
        snprintf(val, sizeof val, "%s", comma + 1);
    else if (!val_pattern(train, val, sizeof val))
        return run_fail(t, WEFT_ECONFIG,
                        "--data llmc:%s: its name says neither _train nor _val, so no validation "
                        "shards go with it: give them as --data llmc:%s,VAL_SHARDS", train, train);
    int vocab = model_vocab(r);
    int rc = weft_dataset_open_llmc(&d->train, train, r->seq, "train", vocab, err, sizeof err);
    if (rc != 0)
        return run_fail(t, rc, "--data llmc:%s (training shards): %s", spec,
                        err[0] ? err : weft_strerror(rc));
    rc = weft_dataset_open_llmc(&d->eval, val, r->seq, "val", vocab, err, sizeof err);
    if (rc != 0)
        return run_fail(t, rc, "--data llmc:%s (validation shards %s): %s", spec, val,
                        err[0] ? err : weft_strerror(rc));
    return 0;
}

int data_open(weft_run *t, const run_opts *r, data_sets *d)
{
    int rc, gpt = run_opts_is_gpt(r);
    const char *what = r->data;
    if ((rc = path_check(t, "--data", what, 1, 0)) != 0)
        return rc;
    if (strncmp(what, "llmc:", 5) == 0 || (gpt && llmc_is_shard(what))) {
        rc = open_llmc(t, r, strncmp(what, "llmc:", 5) == 0 ? what + 5 : what, d);
        if (rc != 0)
            return rc;
    } else if (strcmp(what, "builtin") == 0) {
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
            return run_fail(t, WEFT_ECONFIG,
                            "--data mnist: give the directory that holds the MNIST idx files "
                            "instead");
        rc = weft_dataset_open_mnist_dir(&d->train, dir, "train");
        if (rc == 0)
            rc = weft_dataset_open_mnist_dir(&d->eval, dir, "test");
        if (rc != 0)
            return run_fail(t, rc, "cannot read %s idx files from %s: %s%s", what,
                dir ? dir : (getenv("WEFT_FASHION_MNIST") ? getenv("WEFT_FASHION_MNIST")
                                                          : WEFT_FASHION_MNIST_DIR),
                weft_strerror(rc),
                dir ? "" : " (Debian: apt-get install dataset-fashion-mnist)");
    } else if (gpt) {
        rc = weft_dataset_open_tokens(&d->train, what, r->seq, 0, 0.9);
        if (rc == 0)
            rc = weft_dataset_open_tokens(&d->eval, what, r->seq, 0.9, 1);
        if (rc != 0)
            return run_fail(t, rc,
                            "cannot use token shard %s with --seq %d: %s (make one with "
                            "weft-tokenize; the last 10%% must hold more than one window)",
                            what, r->seq, weft_strerror(rc));
    } else {
        return run_fail(t, WEFT_ECONFIG,
                        "--data %s: not builtin, fashion-mnist or a directory of idx files", what);
    }
    if (rc != 0)
        return run_fail(t, rc, "cannot build the %s data: %s", what, weft_strerror(rc));
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
        return run_fail(t, WEFT_ECONFIG, "--model %s does not fit the data %s", r->model,
                        d->ti.name);
    return run_cp_data(t, d); /* --cp: this rank's rows of each sample */
}

void data_free(data_sets *d)
{
    weft_dataset_free(d->train);
    weft_dataset_free(d->eval);
}

/* Each rank needs a sample of every batch, and of every micro-step of it. */
int data_loader(weft_run *t, const run_opts *r, const data_sets *d, int rank, int world,
                int accum, const char *who, weft_loader **out)
{
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    run_cp_loader_ranks(t, &rank, &world); /* --cp: a group shares its samples */
    lc.global_batch = r->batch;
    lc.seed = r->seed;
    lc.rank = rank;
    lc.world_size = world;
    *out = NULL;
    if (world > r->batch)
        return run_fail(t, WEFT_ECONFIG, "%d %s cannot share a batch of %d", world, who,
                        r->batch);
    if (accum * world > r->batch)
        return run_fail(t, WEFT_ECONFIG,
                        "--accum %d on %d ranks: micro-batches of a batch of %d would be empty",
                        accum, world, r->batch);
    int rc = weft_loader_create(out, d->train, &lc);
    if (rc != 0)
        return run_fail(t, rc, "cannot create the data loader: %s", weft_strerror(rc));
    return 0;
}
