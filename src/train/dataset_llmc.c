/* Sequence dataset over llm.c token shards, streamed: each shard stays open
 * and a sample is read with pread when asked for, so memory holds only the
 * per-shard window counts, whatever the corpus. Sample i is a window of
 * seq_len + 1 tokens inside one shard, as llm.c's DataLoader takes them. */
#include "train/dataset_impl.h"
#include "core/errmsg.h"
#include "train/llmc_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int fd;
    uint64_t first;   /* dataset index of its first window */
    uint64_t windows; /* (count - 1) / seq_len */
    char *path;
} llmc_file;

typedef struct {
    llmc_file *f;
    size_t n;
    int width; /* bytes per token, the same in every shard */
} llmc_data;

/* The shard holding sample i: the last whose first window is <= i. */
static const llmc_file *file_of(const llmc_data *d, uint64_t i)
{
    size_t lo = 0, hi = d->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->f[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    return &d->f[lo];
}

static int llmc_get(const weft_dataset *ds, uint64_t i, float *x, int32_t *tokens, int32_t *y)
{
    const llmc_data *d = ds->impl;
    const llmc_file *f = file_of(d, i);
    size_t T = (size_t)ds->info.x_dim;
    uint64_t at = (i - f->first) * T;
    int32_t last;
    int rc = llmc_read_tokens(f->fd, d->width, at, T, tokens);
    if (rc == 0)
        rc = llmc_read_tokens(f->fd, d->width, at + T, 1, &last);
    if (rc != 0)
        return rc;
    uint32_t V = (uint32_t)ds->info.n_classes;
    int out = (uint32_t)last >= V;
    for (size_t k = 0; k < T; k++)
        out |= (uint32_t)tokens[k] >= V;
    if (out)
        return WEFT_EINVAL; /* a token the model has no row for */
    memmove(y, tokens + 1, (T - 1) * sizeof *y);
    y[T - 1] = last;
    return 0;
}

static void llmc_destroy(weft_dataset *ds)
{
    llmc_data *d = ds->impl;
    if (!d)
        return;
    for (size_t k = 0; k < d->n; k++) {
        if (d->f[k].fd >= 0)
            close(d->f[k].fd);
        free(d->f[k].path);
    }
    free(d->f);
    free(d);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* llm.c's split of a shard by its name: "train", "val" or NULL (neither). */
static const char *split_of(const char *path)
{
    const char *b = base_name(path);
    return strstr(b, "_train") ? "train" : strstr(b, "_val") ? "val" : NULL;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The shard paths the pattern names, sorted: a directory's *.bin, a glob's
 * matches, or the one file. */
static int list_files(const char *pattern, glob_t *g, char *err, size_t errlen)
{
    char *pat = NULL;
    if (is_dir(pattern)) {
        size_t len = strlen(pattern) + 8;
        if (!(pat = malloc(len)))
            return WEFT_ENOMEM;
        snprintf(pat, len, "%s/*.bin", pattern);
    }
    int rc = glob(pat ? pat : pattern, GLOB_ERR, NULL, g);
    free(pat);
    if (rc == GLOB_NOSPACE)
        return WEFT_ENOMEM;
    if (rc == GLOB_NOMATCH)
        return errmsg(err, errlen, WEFT_EIO, "%s: no such file%s", pattern,
                      is_dir(pattern) ? " (the directory holds no *.bin shard)" : "");
    if (rc != 0)
        return errmsg(err, errlen, WEFT_EIO, "%s: cannot list the shards", pattern);
    return 0;
}

/* Every token of f below vocab: one sequential pass, in blocks. */
static int scan_vocab(const llmc_file *f, int width, uint64_t count, uint32_t vocab, char *err,
                      size_t errlen)
{
    enum { BLOCK = 1 << 15 };
    int32_t *buf = malloc(BLOCK * sizeof *buf);
    if (!buf)
        return WEFT_ENOMEM;
    int rc = 0;
    for (uint64_t at = 0; rc == 0 && at < count; at += BLOCK) {
        size_t n = count - at < BLOCK ? (size_t)(count - at) : BLOCK;
        if ((rc = llmc_read_tokens(f->fd, width, at, n, buf)) != 0)
            rc = errmsg(err, errlen, rc, "%s: cannot read its tokens", f->path);
        for (size_t k = 0; rc == 0 && k < n; k++)
            if ((uint32_t)buf[k] >= vocab)
                rc = errmsg(err, errlen, WEFT_EINVAL,
                            "%s: token %lu at position %llu is outside the model's vocabulary "
                            "of %lu", f->path, (unsigned long)(uint32_t)buf[k],
                            (unsigned long long)(at + k), (unsigned long)vocab);
    }
    free(buf);
    return rc;
}

typedef struct {
    int seq_len;
    uint32_t vocab; /* 0: the tokenizer's */
    int scan;       /* check every token at open */
} open_args;

/* Opens and checks one shard into f; the first shard sets the width and
 * the vocabulary. */
static int add_file(llmc_data *d, const char *path, open_args *a, char *err, size_t errlen)
{
    llmc_file *f = &d->f[d->n];
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return errmsg(err, errlen, WEFT_EIO, "%s: %s%s", path, strerror(errno),
                      errno == EMFILE ? " (each shard holds a descriptor: raise ulimit -n)" : "");
    d->n++;
    if (!(f->path = strdup(path)))
        return WEFT_ENOMEM;
    weft_llmc_header h;
    char why[200];
    int rc = llmc_header_fd(f->fd, &h, why, sizeof why);
    if (rc != 0)
        return errmsg(err, errlen, rc, "%s: %s", path, why);
    if (d->width && h.token_bytes != d->width)
        return errmsg(err, errlen, WEFT_EIO, "%s: %d-byte tokens among shards of %d-byte ones",
                      path, h.token_bytes, d->width);
    if (!d->width) {
        d->width = h.token_bytes;
        uint32_t tok = h.token_bytes == 2 ? WEFT_LLMC_VOCAB_GPT2 : WEFT_LLMC_VOCAB_LLAMA3;
        a->scan = a->vocab && a->vocab < tok;
        if (!a->vocab)
            a->vocab = tok;
    }
    uint64_t T = (uint64_t)a->seq_len;
    f->windows = h.count > T ? (h.count - 1) / T : 0;
    f->first = d->n > 1 ? d->f[d->n - 2].first + d->f[d->n - 2].windows : 0;
    return a->scan ? scan_vocab(f, d->width, h.count, a->vocab, err, errlen) : 0;
}

/* The files of g that belong to split, opened into d. */
static int open_files(llmc_data *d, const glob_t *g, const char *pattern, const char *split,
                      open_args *a, char *err, size_t errlen)
{
    int single = g->gl_pathc == 1 && strcmp(g->gl_pathv[0], pattern) == 0;
    if (!(d->f = calloc(g->gl_pathc, sizeof *d->f)))
        return WEFT_ENOMEM;
    for (size_t k = 0; k < g->gl_pathc; k++) {
        const char *p = g->gl_pathv[k], *s = split_of(p);
        /* one named file is whatever split it is asked for, unless its
         * name says otherwise */
        int take = !split || (s ? strcmp(s, split) == 0 : single);
        if (single && split && s && !take)
            return errmsg(err, errlen, WEFT_EINVAL, "%s is a _%s shard, not %s", p, s, split);
        int rc = take ? add_file(d, p, a, err, errlen) : 0;
        if (rc != 0)
            return rc;
    }
    if (d->n == 0)
        return errmsg(err, errlen, WEFT_EINVAL,
                      "%s: no %s shard (llm.c names them *_%s_*.bin, *_%s.bin)", pattern, split,
                      split, split);
    return 0;
}

int weft_dataset_open_llmc(weft_dataset **out, const char *pattern, int seq_len,
                           const char *split, int vocab, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (!out || !pattern || seq_len < 1 || vocab < 0 ||
        (split && strcmp(split, "train") != 0 && strcmp(split, "val") != 0))
        return WEFT_EINVAL;
    *out = NULL;
    glob_t g;
    int rc = list_files(pattern, &g, err, errlen);
    if (rc != 0)
        return rc;
    llmc_data *d = calloc(1, sizeof *d);
    open_args a = { seq_len, (uint32_t)vocab, 0 };
    rc = d ? open_files(d, &g, pattern, split, &a, err, errlen) : WEFT_ENOMEM;
    globfree(&g);
    uint64_t n = rc == 0 ? d->f[d->n - 1].first + d->f[d->n - 1].windows : 0;
    if (rc == 0 && n == 0)
        rc = errmsg(err, errlen, WEFT_EINVAL, "%s: no shard holds a window of %d tokens", pattern,
                    seq_len + 1);
    /* "fineweb10B/train" for "data/fineweb10B/" */
    char name[64], trimmed[64];
    size_t len = strlen(pattern);
    while (len > 1 && pattern[len - 1] == '/')
        len--;
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)(len < 63 ? len : 63),
             len < 63 ? pattern : pattern + len - 63);
    snprintf(name, sizeof name, "%.50s/%s", base_name(trimmed), split ? split : "all");
    weft_dataset *ds = rc == 0 ? train_dataset_alloc(WEFT_DATA_SEQ, n, seq_len, (int)a.vocab, name)
                               : NULL;
    if (rc == 0 && !ds)
        rc = WEFT_ENOMEM;
    if (rc != 0) {
        weft_dataset tmp = { .impl = d };
        if (d)
            llmc_destroy(&tmp);
        return rc;
    }
    ds->get = llmc_get;
    ds->destroy = llmc_destroy;
    ds->impl = d;
    ds->keyed_order = 1; /* a table of 10^8 windows would be 400 MB a rank */
    *out = ds;
    return 0;
}
