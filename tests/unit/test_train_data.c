/* Data layer: token shards, byte tokenizer, idx reader, built-in datasets,
 * and the loader's shuffle/shard guarantees. */
#include "test.h"
#include "weft.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[] = "/tmp/weft-test-data-XXXXXX";

static void path_in(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

static long file_size(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void flip_byte(const char *p, long off)
{
    FILE *f = fopen(p, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

TEST(tokshard)
{
    char p[512];
    path_in(p, sizeof p, "tok.bin");
    uint32_t vocabs[] = { 256, 1000, 70000 };
    long sizes[3];
    for (int v = 0; v < 3; v++) {
        size_t n = 10007;
        int32_t *t = malloc(n * sizeof *t);
        for (size_t i = 0; i < n; i++)
            t[i] = (int32_t)((i * 2654435761u) % vocabs[v]);
        CHECK(weft_tokshard_write(p, t, n, vocabs[v]) == 0);
        sizes[v] = file_size(p);
        int32_t *r = NULL;
        size_t rn = 0;
        uint32_t rv = 0;
        CHECK(weft_tokshard_read(p, &r, &rn, &rv) == 0);
        CHECK(rn == n && rv == vocabs[v]);
        CHECK(r && memcmp(r, t, n * sizeof *t) == 0);
        free(r);
        free(t);
    }
    CHECKF(sizes[0] == 64 + 10007 && sizes[1] == 64 + 2 * 10007 && sizes[2] == 64 + 4 * 10007,
           "sizes %ld %ld %ld", sizes[0], sizes[1], sizes[2]);
    int32_t bad[2] = { 5, 256 };
    CHECK(weft_tokshard_write(p, bad, 2, 256) == WEFT_EINVAL);
    /* p now holds the 70000-vocabulary shard: corrupt a token, then the header. */
    int32_t *r = NULL;
    size_t rn;
    flip_byte(p, 64 + 4 * 500);
    CHECK(weft_tokshard_read(p, &r, &rn, NULL) == WEFT_EIO && r == NULL);
    int32_t ok[3] = { 1, 2, 3 };
    CHECK(weft_tokshard_write(p, ok, 3, 256) == 0);
    flip_byte(p, 16);
    CHECK(weft_tokshard_read(p, &r, &rn, NULL) == WEFT_EIO);
    CHECK(weft_tokshard_write(p, ok, 3, 256) == 0);
    CHECK(truncate(p, 66) == 0);
    CHECK(weft_tokshard_read(p, &r, &rn, NULL) == WEFT_EIO);
    CHECK(weft_tokshard_write(p, ok, 0, 256) == 0);
    CHECK(weft_tokshard_read(p, &r, &rn, NULL) == 0 && rn == 0);
    free(r);
    remove(p);
}

TEST(bytes)
{
    const char text[] = "h\xc3\xa9llo\n\x01\xff";
    int32_t t[16];
    char back[16];
    size_t n = weft_bytes_encode(text, sizeof text - 1, t);
    CHECK(n == sizeof text - 1);
    CHECK(t[1] == 0xc3 && t[8] == 0xff && t[0] == 'h');
    CHECK(weft_bytes_decode(t, n, back) == n && memcmp(back, text, n) == 0);
    t[0] = 300;
    weft_bytes_decode(t, 1, back);
    CHECK(back[0] == '?');
}

static void write_idx(const char *p, int ndim, const uint32_t *dims, const unsigned char *data,
                      size_t n)
{
    FILE *f = fopen(p, "wb");
    unsigned char h[4] = { 0, 0, 8, (unsigned char)ndim };
    fwrite(h, 1, 4, f);
    for (int i = 0; i < ndim; i++) {
        unsigned char b[4] = { (unsigned char)(dims[i] >> 24), (unsigned char)(dims[i] >> 16),
                               (unsigned char)(dims[i] >> 8), (unsigned char)dims[i] };
        fwrite(b, 1, 4, f);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

TEST(idx)
{
    char img[512], lab[512], cmd[1200];
    enum { N = 5, H = 3, W = 4 };
    unsigned char pixels[N * H * W], labels[N];
    for (int i = 0; i < N * H * W; i++)
        pixels[i] = (unsigned char)(i * 7);
    for (int i = 0; i < N; i++)
        labels[i] = (unsigned char)(9 - i);
    uint32_t idims[3] = { N, H, W }, ldims[1] = { N };
    path_in(img, sizeof img, "train-images-idx3-ubyte");
    path_in(lab, sizeof lab, "train-labels-idx1-ubyte");
    write_idx(img, 3, idims, pixels, sizeof pixels);
    write_idx(lab, 1, ldims, labels, sizeof labels);

    weft_dataset *ds = NULL;
    CHECK(weft_dataset_open_idx(&ds, img, lab) == 0);
    weft_dataset_info info;
    weft_dataset_info_get(ds, &info);
    CHECK(info.kind == WEFT_DATA_IMAGE && info.n == N && info.x_dim == H * W);
    CHECK(info.width == W && info.height == H && info.n_classes == 10);
    float x[H * W];
    int32_t y;
    CHECK(weft_dataset_get(ds, 3, x, NULL, &y) == 0);
    CHECK(y == 6 && fabsf(x[1] - (float)((3 * H * W + 1) * 7 % 256) / 255.0f) < 1e-6f);
    CHECK(weft_dataset_get(ds, N, x, NULL, &y) == WEFT_EINVAL);
    weft_dataset_free(ds);

    /* gzip through the external tool, found via the directory lookup */
    snprintf(cmd, sizeof cmd, "gzip -f '%s' '%s'", img, lab);
    if (system(cmd) == 0) {
        ds = NULL;
        CHECK(weft_dataset_open_mnist_dir(&ds, dir, "train") == 0);
        CHECK(ds && weft_dataset_get(ds, 3, x, NULL, &y) == 0 && y == 6);
        char want[128];
        snprintf(want, sizeof want, "%s/train", strrchr(dir, '/') + 1);
        weft_dataset_info_get(ds, &info);
        CHECKF(strcmp(info.name, want) == 0, "name %s", info.name);
        weft_dataset_free(ds);
        char gz[600];
        snprintf(gz, sizeof gz, "%s.gz", lab);
        CHECK(truncate(gz, 20) == 0); /* a broken gzip stream must fail, not hang */
        CHECK(weft_dataset_open_mnist_dir(&ds, dir, "train") == WEFT_EIO);
        remove(gz);
        snprintf(gz, sizeof gz, "%s.gz", img);
        remove(gz);
    }
    CHECK(weft_dataset_open_mnist_dir(&ds, dir, "test") == WEFT_EIO);
    CHECK(weft_dataset_open_mnist_dir(&ds, dir, "bogus") == WEFT_EINVAL);

    /* label count that disagrees with the image count */
    write_idx(img, 3, idims, pixels, sizeof pixels);
    ldims[0] = N - 1;
    write_idx(lab, 1, ldims, labels, N - 1);
    CHECK(weft_dataset_open_idx(&ds, img, lab) == WEFT_EIO);
    /* truncated image data */
    write_idx(img, 3, idims, pixels, sizeof pixels - 1);
    CHECK(weft_dataset_open_idx(&ds, img, lab) == WEFT_EIO);
    remove(img);
    remove(lab);
}

TEST(synth)
{
    weft_dataset *tr, *te, *other;
    CHECK(weft_dataset_synth_images(&tr, 7, 0, 1000) == 0);
    CHECK(weft_dataset_synth_images(&te, 7, 1, 1000) == 0);
    CHECK(weft_dataset_synth_images(&other, 8, 0, 1000) == 0);
    static float a[784], b[784];
    int32_t ya, yb;
    int counts[10] = { 0 }, in_range = 1, differ_split = 0, differ_seed = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        weft_dataset_get(tr, i, a, NULL, &ya);
        weft_dataset_get(tr, i, b, NULL, &yb);
        if (ya != yb || memcmp(a, b, sizeof a) != 0)
            in_range = 0;
        if (ya < 0 || ya > 9)
            in_range = 0;
        else
            counts[ya]++;
        for (int k = 0; k < 784; k++)
            if (!(a[k] >= 0 && a[k] <= 1))
                in_range = 0;
        weft_dataset_get(te, i, b, NULL, &yb);
        differ_split += memcmp(a, b, sizeof a) != 0;
        weft_dataset_get(other, i, b, NULL, &yb);
        differ_seed += memcmp(a, b, sizeof a) != 0;
    }
    CHECK(in_range);
    CHECK(differ_split == 1000 && differ_seed == 1000);
    for (int c = 0; c < 10; c++)
        CHECKF(counts[c] > 60 && counts[c] < 140, "class %d: %d of 1000", c, counts[c]);
    /* Same-class samples must resemble each other more than other classes do
     * (the task is learnable): compare class means on train and test. */
    static double mean_tr[10][784], mean_te[10][784];
    int ntr[10] = { 0 }, nte[10] = { 0 };
    for (uint64_t i = 0; i < 1000; i++) {
        weft_dataset_get(tr, i, a, NULL, &ya);
        weft_dataset_get(te, i, b, NULL, &yb);
        ntr[ya]++;
        nte[yb]++;
        for (int k = 0; k < 784; k++) {
            mean_tr[ya][k] += a[k];
            mean_te[yb][k] += b[k];
        }
    }
    int nearest_ok = 0;
    for (int c = 0; c < 10; c++) {
        int best = -1;
        double bd = 1e300;
        for (int d = 0; d < 10; d++) {
            double s = 0;
            for (int k = 0; k < 784; k++) {
                double e = mean_te[c][k] / nte[c] - mean_tr[d][k] / ntr[d];
                s += e * e;
            }
            if (s < bd) {
                bd = s;
                best = d;
            }
        }
        nearest_ok += best == c;
    }
    CHECKF(nearest_ok == 10, "%d of 10 test class means nearest their train mean", nearest_ok);
    weft_dataset_free(tr);
    weft_dataset_free(te);
    weft_dataset_free(other);
}

/* Parses "a+b=c\n" lines out of t[0..n); returns how many complete lines
 * are wrong; records each problem through seen(). */
static int check_lines(const int32_t *t, int n, int start_at_line, unsigned char *train_seen)
{
    char buf[256];
    int bad = 0, i = 0;
    if (!start_at_line)
        while (i < n && t[i] != '\n')
            i++;
    int begin = i;
    for (; i < n; i++) {
        if (t[i] != '\n')
            continue;
        int len = i - begin;
        for (int k = 0; k < len && k < 255; k++)
            buf[k] = (char)t[begin + k];
        buf[len < 255 ? len : 255] = 0;
        unsigned a, b, c;
        char tail;
        if (sscanf(buf, "%u+%u=%u%c", &a, &b, &c, &tail) != 3 || a + b != c || a > 99 || b > 99)
            bad++;
        else if (train_seen)
            train_seen[a * 100 + b] = 1;
        begin = i + 1;
    }
    return bad;
}

TEST(addition)
{
    weft_dataset *tr, *va;
    enum { T = 40 };
    CHECK(weft_dataset_addition(&tr, 3, 0, 2, 0, T, 5000) == 0);
    CHECK(weft_dataset_addition(&va, 3, 1, 2, 0, T, 500) == 0);
    weft_dataset_info info;
    weft_dataset_info_get(tr, &info);
    CHECK(info.kind == WEFT_DATA_SEQ && info.x_dim == T && info.n_classes == 256);
    int32_t x[T], y[T], x2[T], y2[T];
    static unsigned char seen[10000];
    int bad = 0, shifted = 1, same = 1;
    for (uint64_t i = 0; i < 5000; i++) {
        weft_dataset_get(tr, i, NULL, x, y);
        weft_dataset_get(tr, i, NULL, x2, y2);
        same &= memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0;
        for (int k = 0; k + 1 < T; k++)
            shifted &= y[k] == x[k + 1];
        bad += check_lines(x, T, 1, seen);
    }
    CHECK(same && shifted);
    CHECKF(bad == 0, "%d malformed lines", bad);
    char prompt[32], answer[32];
    int leaked = 0, wrong = 0, distinct = 0;
    static unsigned char val_seen[10000];
    for (uint64_t i = 0; i < 2000; i++) {
        CHECK(weft_dataset_prompt(va, i, prompt, sizeof prompt, answer, sizeof answer) == 0);
        unsigned a, b, c;
        if (sscanf(prompt, "%u+%u=", &a, &b) != 2 || sscanf(answer, "%u", &c) != 1 || a + b != c ||
            answer[strlen(answer) - 1] != '\n') {
            wrong++;
            continue;
        }
        leaked += seen[a * 100 + b];
        distinct += !val_seen[a * 100 + b];
        val_seen[a * 100 + b] = 1;
    }
    CHECK(wrong == 0);
    CHECKF(leaked == 0, "%d validation problems occur in training samples", leaked);
    CHECKF(distinct > 300, "only %d distinct validation problems", distinct);
    CHECK(weft_dataset_prompt(tr, 0, prompt, 4, answer, sizeof answer) == WEFT_EINVAL);
    weft_dataset_free(tr);
    weft_dataset_free(va);

    /* padded and reversed: "007+350=7530" means 7 + 350 = 0357 */
    CHECK(weft_dataset_addition(&va, 3, 1, 3, WEFT_ADDITION_PADDED | WEFT_ADDITION_REVERSED, T,
                                10) == 0);
    int fmt_ok = 1;
    for (uint64_t i = 0; i < 200; i++) {
        weft_dataset_prompt(va, i, prompt, sizeof prompt, answer, sizeof answer);
        unsigned a, b;
        char rev[8];
        fmt_ok &= strlen(prompt) == 8 && strlen(answer) == 5 && answer[4] == '\n' &&
                  sscanf(prompt, "%3u+%3u=", &a, &b) == 2;
        for (int k = 0; k < 4; k++)
            rev[k] = answer[3 - k];
        rev[4] = 0;
        fmt_ok &= (unsigned)atoi(rev) == a + b;
    }
    CHECK(fmt_ok);
    weft_dataset_free(va);
    CHECK(weft_dataset_addition(&va, 3, 1, 3, 8, T, 10) == WEFT_EINVAL);

    /* answer-only targets: "12+34=046\n" keeps 4 of its 10 targets */
    CHECK(weft_dataset_addition(&va, 3, 0, 2, WEFT_ADDITION_PADDED | WEFT_ADDITION_ANSWER_LOSS,
                                T, 10) == 0);
    int masked_ok = 1, kept = 0;
    CHECK(weft_dataset_get(va, 0, NULL, x, y) == 0);
    for (int k = 0; k + 1 < T; k++) {
        int in_answer = (k + 1) % 10 >= 6; /* positions 6..9 of a line */
        masked_ok &= in_answer ? y[k] == x[k + 1] : y[k] == -1;
        kept += y[k] != -1;
    }
    CHECKF(masked_ok && kept == 16, "kept %d", kept);
    weft_dataset_free(va);

    weft_dataset *im;
    weft_dataset_synth_images(&im, 1, 0, 10);
    CHECK(weft_dataset_prompt(im, 0, prompt, sizeof prompt, answer, sizeof answer) ==
          WEFT_ENOTSUP);
    weft_dataset_free(im);
    CHECK(weft_dataset_addition(&tr, 3, 0, 0, 0, T, 10) == WEFT_EINVAL);
}

TEST(tokens_dataset)
{
    char p[512];
    path_in(p, sizeof p, "text.tok");
    const char *text = "the quick brown fox jumps over the lazy dog, again and again.";
    size_t n = strlen(text);
    int32_t t[128];
    weft_bytes_encode(text, n, t);
    CHECK(weft_tokshard_write(p, t, n, WEFT_BYTE_VOCAB) == 0);
    weft_dataset *tr, *va;
    CHECK(weft_dataset_open_tokens(&tr, p, 8, 0, 0.75) == 0);
    CHECK(weft_dataset_open_tokens(&va, p, 8, 0.75, 1) == 0);
    weft_dataset_info it, iv;
    weft_dataset_info_get(tr, &it);
    weft_dataset_info_get(va, &iv);
    size_t cut = (size_t)(0.75 * (double)n);
    CHECKF(it.n == (cut - 1) / 8 && iv.n == (n - cut - 1) / 8, "%llu %llu",
           (unsigned long long)it.n, (unsigned long long)iv.n);
    int32_t x[8], y[8];
    CHECK(weft_dataset_get(tr, 2, NULL, x, y) == 0);
    CHECK(memcmp(x, t + 16, sizeof x) == 0 && memcmp(y, t + 17, sizeof y) == 0);
    CHECK(weft_dataset_get(va, 0, NULL, x, y) == 0 && memcmp(x, t + cut, sizeof x) == 0);
    weft_dataset_free(tr);
    weft_dataset_free(va);
    CHECK(weft_dataset_open_tokens(&tr, p, 1000, 0, 1) == WEFT_EINVAL);
    remove(p);
}

/* The global batch stream, gathered by running all w ranks' loaders. */
static void gather(const weft_dataset *ds, int B, int w, uint64_t seed, int steps, uint64_t *out)
{
    for (int r = 0; r < w; r++) {
        weft_loader_config cfg;
        weft_loader_config_default(&cfg);
        cfg.global_batch = B;
        cfg.rank = r;
        cfg.world_size = w;
        cfg.seed = seed;
        weft_loader *l;
        if (weft_loader_create(&l, ds, &cfg) != 0)
            return;
        for (int s = 0; s < steps; s++) {
            weft_batch b;
            weft_loader_next(l, &b);
            for (int k = 0; k < b.n; k++)
                out[(size_t)s * B + (size_t)b.offset + (size_t)k] = b.index[k];
        }
        weft_loader_free(l);
    }
}

TEST(loader)
{
    enum { N = 50, B = 12, STEPS = 13 }; /* 156 samples: three epochs and a bit */
    weft_dataset *ds;
    CHECK(weft_dataset_synth_images(&ds, 1, 0, N) == 0);
    static uint64_t ref[STEPS * B], got[STEPS * B];
    gather(ds, B, 1, 42, STEPS, ref);
    for (int e = 0; e < 3; e++) { /* each epoch is a permutation */
        int hit[N] = { 0 }, ok = 1;
        for (int i = 0; i < N; i++)
            hit[ref[e * N + i]]++;
        for (int i = 0; i < N; i++)
            ok &= hit[i] == 1;
        CHECKF(ok, "epoch %d is not a permutation", e);
    }
    int same01 = memcmp(ref, ref + N, N * sizeof *ref) == 0;
    CHECK(!same01); /* epochs are shuffled differently */
    for (int w = 2; w <= B; w++) {
        memset(got, 0xff, sizeof got);
        gather(ds, B, w, 42, STEPS, got);
        CHECKF(memcmp(got, ref, sizeof ref) == 0, "world size %d changes the global batches", w);
    }
    gather(ds, B, 1, 43, STEPS, got);
    CHECK(memcmp(got, ref, sizeof ref) != 0);

    weft_loader_config cfg;
    weft_loader_config_default(&cfg);
    cfg.global_batch = B;
    cfg.world_size = 5; /* 12 over 5: parts 2,2,3,2,3 */
    cfg.rank = 2;
    cfg.seed = 42;
    weft_loader *l;
    CHECK(weft_loader_create(&l, ds, &cfg) == 0);
    weft_batch b;
    CHECK(weft_loader_next(l, &b) == 0);
    CHECK(b.n == 3 && b.offset == 4 && b.global_n == B && b.step == 0 && b.x_dim == 784);
    CHECK(b.x && !b.tokens && b.y);
    static float x[784];
    int32_t y;
    weft_dataset_get(ds, b.index[1], x, NULL, &y);
    CHECK(y == b.y[1] && memcmp(x, b.x + 784, sizeof x) == 0);
    /* seek: continuing at a saved position equals not stopping */
    for (int s = 1; s < 7; s++)
        weft_loader_next(l, &b);
    uint64_t pos = weft_loader_position(l);
    CHECK(pos == 7 * B);
    weft_loader_next(l, &b);
    uint64_t first = b.index[0];
    weft_loader *l2;
    CHECK(weft_loader_create(&l2, ds, &cfg) == 0);
    CHECK(weft_loader_seek(l2, pos) == 0);
    CHECK(weft_loader_next(l2, &b) == 0 && b.index[0] == first && b.step == 7);
    weft_loader_free(l);
    weft_loader_free(l2);

    cfg.shuffle = 0;
    cfg.world_size = 1;
    cfg.rank = 0;
    CHECK(weft_loader_create(&l, ds, &cfg) == 0);
    int inorder = 1;
    for (int s = 0; s < 5; s++) {
        weft_loader_next(l, &b);
        for (int k = 0; k < b.n; k++)
            inorder &= b.index[k] == (uint64_t)(s * B + k) % N;
    }
    CHECK(inorder);
    weft_loader_free(l);

    cfg.world_size = B + 1;
    CHECK(weft_loader_create(&l, ds, &cfg) == WEFT_EINVAL);
    cfg.world_size = 2;
    cfg.rank = 2;
    CHECK(weft_loader_create(&l, ds, &cfg) == WEFT_EINVAL);
    weft_dataset_free(ds);

    uint64_t lo, hi, prev = 0;
    int contiguous = 1;
    for (int r = 0; r < 7; r++) {
        weft_shard_range(100, r, 7, &lo, &hi);
        contiguous &= lo == prev && hi - lo >= 14 && hi - lo <= 15;
        prev = hi;
    }
    CHECK(contiguous && prev == 100);
}

TEST(seq_loader)
{
    weft_dataset *ds;
    CHECK(weft_dataset_addition(&ds, 1, 0, 3, 0, 16, 1000) == 0);
    weft_loader_config cfg;
    weft_loader_config_default(&cfg);
    cfg.global_batch = 8;
    cfg.world_size = 2;
    cfg.rank = 1;
    weft_loader *l;
    CHECK(weft_loader_create(&l, ds, &cfg) == 0);
    weft_batch b;
    CHECK(weft_loader_next(l, &b) == 0);
    CHECK(b.n == 4 && b.offset == 4 && b.tokens && !b.x && b.x_dim == 16);
    int32_t x[16], y[16];
    weft_dataset_get(ds, b.index[3], NULL, x, y);
    CHECK(memcmp(x, b.tokens + 48, sizeof x) == 0 && memcmp(y, b.y + 48, sizeof y) == 0);
    weft_loader_free(l);
    weft_dataset_free(ds);
}

static void remove_dir(void)
{
    rmdir(dir);
}

TEST_INIT
{
    CHECKF(mkdtemp(dir) != NULL, "mkdtemp %s", dir);
    atexit(remove_dir);
}
