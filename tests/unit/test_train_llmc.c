/* llm.c token shards: the writer's bytes, the header checks and their
 * messages, and the streamed dataset over one file, a directory or a glob
 * (split by name, windows inside one shard, several threads at once). */
#include "test.h"
#include "weft.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/weft-test-llmc-XXXXXX";

static void path_in(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

/* Token p of shard s: distinct across shards, so a window that straddled
 * two would show. */
static int32_t tok(int s, uint64_t p, uint32_t vocab)
{
    return (int32_t)(((uint64_t)s * 7919 + p * 2654435761u) % vocab);
}

static int write_shard(const char *name, int width, int s, size_t n, uint32_t vocab)
{
    char p[512];
    path_in(p, sizeof p, name);
    weft_llmc_writer *w;
    int rc = weft_llmc_writer_open(&w, p, width);
    if (rc != 0)
        return rc;
    int32_t buf[1000];
    for (size_t at = 0; at < n && rc == 0;) {
        size_t k = n - at < 1000 ? n - at : 1000;
        for (size_t i = 0; i < k; i++)
            buf[i] = tok(s, at + i, vocab);
        rc = weft_llmc_writer_put(w, buf, k);
        at += k;
    }
    int rc2 = weft_llmc_writer_close(w);
    return rc ? rc : rc2;
}

static unsigned char *slurp(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void spill(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(b, 1, (size_t)n, f);
        fclose(f);
    }
}

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static void put_le32(unsigned char *p, int32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

TEST(writer_layout)
{
    int widths[] = { 2, 4 }, magics[] = { 20240520, 20240801 }, versions[] = { 1, 7 };
    uint32_t vocabs[] = { 65536, 128256 };
    for (int k = 0; k < 2; k++) {
        size_t n = 70001; /* past the writer's buffer */
        CHECK(write_shard("lay.bin", widths[k], k, n, vocabs[k]) == 0);
        char p[512];
        path_in(p, sizeof p, "lay.bin");
        long size = 0;
        unsigned char *b = slurp(p, &size);
        CHECK(b && size == 1024 + (long)n * widths[k]);
        if (!b)
            continue;
        CHECK(le32(b) == magics[k] && le32(b + 4) == versions[k] && le32(b + 8) == (int32_t)n);
        int zero = 1;
        for (int i = 12; i < 1024; i++)
            zero &= b[i] == 0;
        CHECK(zero);
        int same = 1;
        for (size_t i = 0; i < n; i++) {
            const unsigned char *q = b + 1024 + i * (size_t)widths[k];
            uint32_t v = (uint32_t)q[0] | (uint32_t)q[1] << 8;
            if (widths[k] == 4)
                v |= (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
            same &= v == (uint32_t)tok(k, i, vocabs[k]);
        }
        CHECK(same);
        free(b);
        weft_llmc_header h;
        char err[256];
        CHECK(weft_llmc_header_read(p, &h, err, sizeof err) == 0);
        CHECK(h.magic == magics[k] && h.version == versions[k] && h.token_bytes == widths[k]);
        CHECK(h.count == n && err[0] == 0);
    }
}

TEST(writer_rejects)
{
    char p[512];
    path_in(p, sizeof p, "rej.bin");
    weft_llmc_writer *w = NULL;
    CHECK(weft_llmc_writer_open(&w, p, 3) == WEFT_EINVAL && w == NULL);
    CHECK(weft_llmc_writer_open(&w, p, 1) == WEFT_EINVAL);
    CHECK(weft_llmc_writer_open(&w, dir, 2) != 0); /* a directory */
    CHECK(weft_llmc_writer_open(&w, p, 2) == 0);
    int32_t good[3] = { 0, 65535, 7 }, big[2] = { 1, 65536 }, neg[1] = { -1 };
    CHECK(weft_llmc_writer_put(w, good, 3) == 0);
    CHECK(weft_llmc_writer_put(w, big, 2) == WEFT_EINVAL); /* nothing of it written */
    CHECK(weft_llmc_writer_put(w, neg, 1) == WEFT_EINVAL);
    CHECK(weft_llmc_writer_put(w, NULL, 0) == 0);
    /* before close the magic is 0: a reader refuses the file */
    weft_llmc_header h;
    char err[256];
    CHECK(weft_llmc_header_read(p, &h, err, sizeof err) == WEFT_EIO && strstr(err, "magic"));
    CHECK(weft_llmc_writer_close(w) == 0);
    CHECK(weft_llmc_header_read(p, &h, err, sizeof err) == 0 && h.count == 3);
    CHECK(weft_llmc_writer_open(&w, p, 4) == 0);
    int32_t wide[2] = { 65536, INT32_MAX };
    CHECK(weft_llmc_writer_put(w, wide, 2) == 0);
    CHECK(weft_llmc_writer_close(w) == 0);
    CHECK(weft_llmc_header_read(p, &h, err, sizeof err) == 0 && h.count == 2 &&
          h.token_bytes == 4);
    CHECK(weft_llmc_writer_close(NULL) == WEFT_EINVAL);
}

/* Rewrites the shard at p, passes it through edit, and returns the
 * header reader's code, its message in err. */
static int read_edited(const char *p, void (*edit)(unsigned char *, long *), char *err,
                       size_t errlen)
{
    long n = 0;
    unsigned char *b = slurp(p, &n);
    if (!b)
        return 1;
    unsigned char *c = malloc((size_t)n + 16);
    memcpy(c, b, (size_t)n);
    memset(c + n, 0, 16);
    edit(c, &n);
    char q[512];
    path_in(q, sizeof q, "edit.bin");
    spill(q, c, n);
    free(b);
    free(c);
    weft_llmc_header h;
    return weft_llmc_header_read(q, &h, err, errlen);
}

static void bad_magic(unsigned char *b, long *n) { put_le32(b, 12345); (void)n; }
static void bad_version(unsigned char *b, long *n) { put_le32(b + 4, 3); (void)n; }
static void truncated(unsigned char *b, long *n) { (void)b; *n -= 3; }
static void extra(unsigned char *b, long *n) { (void)b; *n += 2; }
static void count_more(unsigned char *b, long *n) { put_le32(b + 8, le32(b + 8) + 1); (void)n; }
static void negative(unsigned char *b, long *n) { put_le32(b + 8, -5); (void)n; }
static void short_header(unsigned char *b, long *n) { (void)b; *n = 500; }

TEST(header_errors)
{
    CHECK(write_shard("good.bin", 2, 0, 100, 50257) == 0);
    char p[512], err[256];
    path_in(p, sizeof p, "good.bin");
    struct { void (*edit)(unsigned char *, long *); const char *says; } cases[] = {
        { bad_magic, "magic 12345" }, { bad_version, "version 3" },
        { truncated, "truncated" },   { extra, "trailing" },
        { count_more, "101 tokens" }, { negative, "negative" },
        { short_header, "shorter than the 1024-byte header" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int rc = read_edited(p, cases[k].edit, err, sizeof err);
        CHECKF(rc == WEFT_EIO && strstr(err, cases[k].says), "case %zu: rc %d, \"%s\"", k, rc,
               err);
    }
    weft_llmc_header h;
    path_in(p, sizeof p, "absent.bin");
    CHECK(weft_llmc_header_read(p, &h, err, sizeof err) == WEFT_EIO && err[0]);
    CHECK(weft_llmc_header_read(dir, &h, err, sizeof err) == WEFT_EINVAL);
    /* the dataset names the shard and says the same */
    path_in(p, sizeof p, "good.bin");
    read_edited(p, bad_version, err, sizeof err);
    path_in(p, sizeof p, "edit.bin");
    weft_dataset *ds = NULL;
    CHECK(weft_dataset_open_llmc(&ds, p, 8, NULL, 0, err, sizeof err) == WEFT_EIO && !ds);
    CHECK(strstr(err, "edit.bin") && strstr(err, "version 3"));
}

/* Every sample of ds against the shards it should come from: shards s0..
 * with counts[], windows of T + 1 tokens at multiples of T. */
static int windows_match(const weft_dataset *ds, const int *shard, const size_t *counts,
                         int nshard, int T, uint32_t vocab)
{
    int32_t *x = malloc((size_t)T * sizeof *x), *y = malloc((size_t)T * sizeof *y);
    uint64_t i = 0;
    int ok = 1;
    for (int s = 0; s < nshard; s++) {
        for (uint64_t w = 0; (w + 1) * (uint64_t)T + 1 <= counts[s]; w++, i++) {
            ok &= weft_dataset_get(ds, i, NULL, x, y) == 0;
            for (int k = 0; k < T; k++)
                ok &= x[k] == tok(shard[s], w * (uint64_t)T + (uint64_t)k, vocab) &&
                      y[k] == tok(shard[s], w * (uint64_t)T + (uint64_t)k + 1, vocab);
        }
    }
    weft_dataset_info info;
    weft_dataset_info_get(ds, &info);
    ok &= info.n == i && info.x_dim == T && info.kind == WEFT_DATA_SEQ;
    free(x);
    free(y);
    return ok;
}

TEST(single_file)
{
    char p[512], err[256];
    size_t n = 1000;
    CHECK(write_shard("tiny.bin", 2, 3, n, 50257) == 0);
    path_in(p, sizeof p, "tiny.bin");
    int shard[] = { 3 };
    weft_dataset *ds = NULL;
    /* a name that says neither split serves as the one asked for */
    CHECK(weft_dataset_open_llmc(&ds, p, 16, "val", 0, err, sizeof err) == 0);
    CHECK(ds && windows_match(ds, shard, &n, 1, 16, 50257));
    weft_dataset_info info;
    weft_dataset_info_get(ds, &info);
    CHECK(info.n == (n - 1) / 16 && info.n_classes == WEFT_LLMC_VOCAB_GPT2);
    weft_dataset_free(ds);
    /* exactly T + 1 tokens: one window; T: none */
    CHECK(write_shard("t17.bin", 4, 1, 17, 128256) == 0);
    path_in(p, sizeof p, "t17.bin");
    CHECK(weft_dataset_open_llmc(&ds, p, 16, "train", 0, err, sizeof err) == 0);
    weft_dataset_info_get(ds, &info);
    CHECK(info.n == 1 && info.n_classes == WEFT_LLMC_VOCAB_LLAMA3);
    weft_dataset_free(ds);
    ds = NULL;
    CHECK(weft_dataset_open_llmc(&ds, p, 17, "train", 0, err, sizeof err) == WEFT_EINVAL);
    CHECK(!ds && strstr(err, "window of 18 tokens"));
    /* a shard named _val is not training data */
    CHECK(write_shard("x_val.bin", 2, 0, 100, 50257) == 0);
    path_in(p, sizeof p, "x_val.bin");
    CHECK(weft_dataset_open_llmc(&ds, p, 8, "train", 0, err, sizeof err) == WEFT_EINVAL);
    CHECK(strstr(err, "_val shard, not train"));
    CHECK(weft_dataset_open_llmc(&ds, p, 8, "test", 0, err, sizeof err) == WEFT_EINVAL);
    path_in(p, sizeof p, "absent.bin");
    CHECK(weft_dataset_open_llmc(&ds, p, 8, "train", 0, err, sizeof err) == WEFT_EIO);
    CHECK(strstr(err, "absent.bin"));
    path_in(p, sizeof p, "tiny.bin");
    unlink(p);
    path_in(p, sizeof p, "t17.bin");
    unlink(p);
    path_in(p, sizeof p, "x_val.bin");
    unlink(p);
}

static void remove_named(const char *sub, const char *const *names, int n)
{
    char p[512], q[600];
    for (int k = 0; k < n; k++) {
        path_in(p, sizeof p, sub);
        snprintf(q, sizeof q, "%s/%s", p, names[k]);
        unlink(q);
    }
    path_in(p, sizeof p, sub);
    rmdir(p);
}

static const char *const corpus_names[] = {
    "fw_train_000001.bin", "fw_train_000002.bin", "fw_train_000003.bin",
    "fw_val_000000.bin", "notes.txt",
};

/* A corpus in sub/: three training shards of uneven length (one too short
 * for a window), one validation shard, a stray file. */
static void make_corpus(const char *sub, int width, uint32_t vocab)
{
    char p[512];
    path_in(p, sizeof p, sub);
    mkdir(p, 0777);
    size_t counts[] = { 1000, 5, 777, 300 };
    for (int k = 0; k < 4; k++) {
        char name[300];
        snprintf(name, sizeof name, "%s/%s", sub, corpus_names[k]);
        CHECK(write_shard(name, width, k, counts[k], vocab) == 0);
    }
    char q[600];
    snprintf(q, sizeof q, "%s/notes.txt", p);
    spill(q, (const unsigned char *)"not a shard", 11);
}

TEST(directory_and_glob)
{
    char p[512], pat[600], err[256];
    int widths[] = { 2, 4 };
    uint32_t vocabs[] = { 50257, 128256 };
    for (int k = 0; k < 2; k++) {
        make_corpus("corpus", widths[k], vocabs[k]);
        path_in(p, sizeof p, "corpus");
        int train[] = { 0, 1, 2 }, val[] = { 3 };
        size_t tc[] = { 1000, 5, 777 }, vc[] = { 300 };
        weft_dataset *ds = NULL;
        CHECKF(weft_dataset_open_llmc(&ds, p, 10, "train", 0, err, sizeof err) == 0, "%s", err);
        CHECK(ds && windows_match(ds, train, tc, 3, 10, vocabs[k]));
        weft_dataset_free(ds);
        CHECK(weft_dataset_open_llmc(&ds, p, 10, "val", 0, err, sizeof err) == 0);
        CHECK(ds && windows_match(ds, val, vc, 1, 10, vocabs[k]));
        weft_dataset_free(ds);
        snprintf(pat, sizeof pat, "%s/fw_*_00000[23].bin", p);
        CHECK(weft_dataset_open_llmc(&ds, pat, 10, "train", 0, err, sizeof err) == 0);
        CHECK(ds && windows_match(ds, train + 1, tc + 1, 2, 10, vocabs[k]));
        weft_dataset_free(ds);
        /* a glob with no shard of the split says so */
        snprintf(pat, sizeof pat, "%s/fw_train_*.bin", p);
        ds = NULL;
        CHECK(weft_dataset_open_llmc(&ds, pat, 10, "val", 0, err, sizeof err) == WEFT_EINVAL);
        CHECK(!ds && strstr(err, "no val shard"));
        snprintf(pat, sizeof pat, "%s/nothing_*.bin", p);
        CHECK(weft_dataset_open_llmc(&ds, pat, 10, "val", 0, err, sizeof err) == WEFT_EIO);
        CHECK(strstr(err, "no such file"));
        remove_named("corpus", corpus_names, 5);
    }
    /* shards of both widths do not mix */
    make_corpus("mixed", 2, 50257);
    CHECK(write_shard("mixed/fw_train_000004.bin", 4, 9, 100, 1000) == 0);
    path_in(p, sizeof p, "mixed");
    weft_dataset *ds = NULL;
    CHECK(weft_dataset_open_llmc(&ds, p, 10, "train", 0, err, sizeof err) == WEFT_EIO);
    CHECK(strstr(err, "fw_train_000004.bin") && strstr(err, "4-byte tokens"));
    path_in(p, sizeof p, "mixed/fw_train_000004.bin");
    unlink(p);
    remove_named("mixed", corpus_names, 5);
}

TEST(vocabulary)
{
    char p[512], err[256];
    CHECK(write_shard("v.bin", 2, 0, 500, 300) == 0); /* tokens up to 299 */
    path_in(p, sizeof p, "v.bin");
    weft_dataset *ds = NULL;
    /* the model's vocabulary, smaller than the tokenizer's: every token is
     * checked at open and the first outside it named */
    CHECK(weft_dataset_open_llmc(&ds, p, 8, NULL, 256, err, sizeof err) == WEFT_EINVAL && !ds);
    CHECKF(strstr(err, "v.bin") && strstr(err, "outside the model's vocabulary of 256"), "%s",
           err);
    CHECK(weft_dataset_open_llmc(&ds, p, 8, NULL, 300, err, sizeof err) == 0);
    weft_dataset_info info;
    weft_dataset_info_get(ds, &info);
    CHECK(info.n_classes == 300);
    weft_dataset_free(ds);
    /* GPT-2 shards can hold tokens past GPT-2's vocabulary: the window
     * that holds one fails, the others read */
    weft_llmc_writer *w;
    CHECK(weft_llmc_writer_open(&w, p, 2) == 0);
    int32_t t[40];
    for (int i = 0; i < 40; i++)
        t[i] = i == 25 ? 60000 : i;
    CHECK(weft_llmc_writer_put(w, t, 40) == 0 && weft_llmc_writer_close(w) == 0);
    CHECK(weft_dataset_open_llmc(&ds, p, 8, NULL, 0, err, sizeof err) == 0);
    int32_t x[8], y[8];
    CHECK(weft_dataset_get(ds, 0, NULL, x, y) == 0 && x[7] == 7 && y[7] == 8);
    CHECK(weft_dataset_get(ds, 2, NULL, x, y) == 0); /* tokens 16..24 */
    CHECK(weft_dataset_get(ds, 3, NULL, x, y) == WEFT_EINVAL);
    weft_dataset_free(ds);
    unlink(p);
}

typedef struct {
    const weft_dataset *ds;
    int seed, ok;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    weft_dataset_info info;
    weft_dataset_info_get(a->ds, &info);
    int32_t x[10], y[10];
    a->ok = 1;
    for (uint64_t k = 0; k < 4 * info.n; k++) {
        uint64_t i = (k * 2654435761u + (uint64_t)a->seed * 40503u) % info.n;
        /* the sample's shard and window from the corpus layout */
        int s = i < 99 ? 0 : 2;
        uint64_t w = i < 99 ? i : i - 99;
        a->ok &= weft_dataset_get(a->ds, i, NULL, x, y) == 0;
        for (int j = 0; j < 10; j++)
            a->ok &= x[j] == tok(s, w * 10 + (uint64_t)j, 50257) &&
                     y[j] == tok(s, w * 10 + (uint64_t)j + 1, 50257);
    }
    return NULL;
}

TEST(threads)
{
    char p[512], err[256];
    make_corpus("thr", 2, 50257);
    path_in(p, sizeof p, "thr");
    weft_dataset *ds = NULL;
    CHECK(weft_dataset_open_llmc(&ds, p, 10, "train", 0, err, sizeof err) == 0);
    pthread_t th[4];
    reader_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (reader_arg){ ds, k, 0 };
        CHECK(pthread_create(&th[k], NULL, reader, &a[k]) == 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK(a[k].ok);
    }
    weft_dataset_free(ds);
    remove_named("thr", corpus_names, 5);
}

/* The loader over shards: a loader that seeks to a position mid-shard
 * gives the batches an uninterrupted one gives from there. */
TEST(loader_resume)
{
    char p[512], err[256];
    make_corpus("res", 2, 50257);
    path_in(p, sizeof p, "res");
    weft_dataset *ds = NULL;
    CHECK(weft_dataset_open_llmc(&ds, p, 10, "train", 0, err, sizeof err) == 0);
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = 7;
    lc.seed = 11;
    weft_loader *a, *b;
    CHECK(weft_loader_create(&a, ds, &lc) == 0 && weft_loader_create(&b, ds, &lc) == 0);
    weft_batch ba, bb;
    for (int k = 0; k < 5; k++)
        weft_loader_next(a, &ba);
    CHECK(weft_loader_seek(b, weft_loader_position(a)) == 0);
    int same = 1;
    for (int k = 0; k < 40; k++) { /* past the end of an epoch */
        CHECK(weft_loader_next(a, &ba) == 0 && weft_loader_next(b, &bb) == 0);
        same &= memcmp(ba.tokens, bb.tokens, 7 * 10 * sizeof *ba.tokens) == 0 &&
                memcmp(ba.index, bb.index, 7 * sizeof *ba.index) == 0;
    }
    CHECK(same);
    weft_loader_free(a);
    weft_loader_free(b);
    weft_dataset_free(ds);
    remove_named("res", corpus_names, 5);
}

/* Every epoch of the loader's keyed order is a permutation of the
 * windows, a different one each epoch, the same for every world size. */
TEST(keyed_order)
{
    char p[512], err[256];
    path_in(p, sizeof p, "perm.bin");
    int sizes[] = { 1, 2, 3, 5, 16, 17, 100, 257, 1000 };
    for (int k = 0; k < 9; k++) {
        uint64_t n = (uint64_t)sizes[k];
        CHECK(write_shard("perm.bin", 2, k, (size_t)n + 1, 50257) == 0); /* n windows of 2 */
        weft_dataset *ds = NULL;
        CHECK(weft_dataset_open_llmc(&ds, p, 1, NULL, 0, err, sizeof err) == 0);
        weft_loader_config lc;
        weft_loader_config_default(&lc);
        lc.global_batch = 1;
        lc.seed = 5;
        weft_loader *l;
        CHECK(weft_loader_create(&l, ds, &lc) == 0);
        unsigned char *seen = calloc(n, 1);
        uint64_t *first = calloc(n, sizeof *first);
        int perm = 1, differs = n < 3;
        for (int e = 0; e < 3; e++) {
            memset(seen, 0, n);
            for (uint64_t i = 0; i < n; i++) {
                weft_batch b;
                CHECK(weft_loader_next(l, &b) == 0);
                uint64_t x = b.index[0];
                perm &= x < n && !seen[x];
                if (x < n)
                    seen[x] = 1;
                if (e == 0)
                    first[i] = x;
                else
                    differs |= first[i] != x;
            }
        }
        CHECKF(perm && differs, "n %llu", (unsigned long long)n);
        /* two ranks' parts of each batch are the one rank's batch */
        lc.global_batch = 4;
        weft_loader *one, *r0, *r1;
        CHECK(weft_loader_create(&one, ds, &lc) == 0);
        lc.world_size = 2;
        CHECK(weft_loader_create(&r0, ds, &lc) == 0);
        lc.rank = 1;
        CHECK(weft_loader_create(&r1, ds, &lc) == 0);
        int same = 1;
        for (int s = 0; s < 10; s++) {
            weft_batch a, b0, b1;
            weft_loader_next(one, &a);
            weft_loader_next(r0, &b0);
            weft_loader_next(r1, &b1);
            same &= memcmp(a.index, b0.index, 2 * sizeof *a.index) == 0 &&
                    memcmp(a.index + 2, b1.index, 2 * sizeof *a.index) == 0;
        }
        CHECK(same);
        weft_loader_free(one);
        weft_loader_free(r0);
        weft_loader_free(r1);
        free(seen);
        free(first);
        weft_loader_free(l);
        weft_dataset_free(ds);
    }
    unlink(p);
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 10^8 windows (a sparse shard of 200 MB of zero tokens): the dataset and
 * a shuffling loader stay within a few megabytes, and any position reads. */
TEST(large_corpus)
{
    char p[512], err[256];
    path_in(p, sizeof p, "big_train_000001.bin");
    uint64_t n = 100000000;
    unsigned char hdr[1024] = { 0 };
    put_le32(hdr, 20240520);
    put_le32(hdr + 4, 1);
    put_le32(hdr + 8, (int32_t)(n + 1));
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr);
    if (f)
        fclose(f);
    CHECK(truncate(p, (off_t)(1024 + 2 * (n + 1))) == 0);
    long before = max_rss_kb();
    weft_dataset *ds = NULL;
    CHECKF(weft_dataset_open_llmc(&ds, p, 1, "train", 0, err, sizeof err) == 0, "%s", err);
    weft_dataset_info info;
    weft_dataset_info_get(ds, &info);
    CHECK(info.n == n);
    weft_loader_config lc;
    weft_loader_config_default(&lc);
    lc.global_batch = 64;
    weft_loader *l;
    CHECK(weft_loader_create(&l, ds, &lc) == 0);
    int ok = 1;
    for (int s = 0; s < 20; s++) {
        weft_batch b;
        ok &= weft_loader_next(l, &b) == 0;
        for (int k = 0; k < b.n; k++)
            ok &= b.index[k] < n && b.tokens[k] == 0 && b.y[k] == 0;
    }
    CHECK(ok);
    /* the last window, and a resume deep into the second epoch */
    int32_t x, y;
    CHECK(weft_dataset_get(ds, n - 1, NULL, &x, &y) == 0);
    CHECK(weft_loader_seek(l, 3 * n / 2) == 0);
    weft_batch b;
    CHECK(weft_loader_next(l, &b) == 0 && b.step == 3 * n / 2 / 64);
    long grew = max_rss_kb() - before;
    CHECKF(grew < 16 * 1024, "resident memory grew by %ld KiB", grew);
    weft_loader_free(l);
    weft_dataset_free(ds);
    unlink(p);
}

static void remove_dir(void)
{
    char p[512];
    const char *left[] = { "lay.bin", "rej.bin", "good.bin", "edit.bin" };
    for (int k = 0; k < 4; k++) {
        path_in(p, sizeof p, left[k]);
        unlink(p);
    }
    rmdir(dir);
}

TEST_INIT
{
    CHECKF(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    atexit(remove_dir);
}
