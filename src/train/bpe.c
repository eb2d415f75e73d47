/* GPT-2's tokenizer (weft_bpe_* in weft.h): the handle, where its tables
 * are found, encoding a text piece by piece and decoding. */
#include "train/bpe.h"
#include "core/param.h"
#include "train/data_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the tables are without WEFT_BPE_DIR: make writes these two paths
 * (its PREFIX and its build folder) into the build folder. */
#ifdef WEFT_BPE_HAVE_PATHS
#include "bpe_paths.h"
#endif
#ifndef WEFT_BPE_INSTALLED_DIR
#define WEFT_BPE_INSTALLED_DIR "/usr/local/share/weft/gpt2"
#endif

#define CACHE_ENTRIES 65536
#define CACHE_MAX_BYTES 128

static int has_tables(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s/encoder.json", dir) >= (int)sizeof p || !train_data_file_exists(p))
        return 0;
    return snprintf(p, sizeof p, "%s/vocab.bpe", dir) < (int)sizeof p && train_data_file_exists(p);
}

/* The folder to read: dir, else $WEFT_BPE_DIR, else the installed one,
 * else the build folder's. NULL, with why filled in, when none has both
 * files. */
static const char *find_dir(const char *dir, char *why, size_t cap)
{
    const char *env = NULL;
    (void)param_read_str(PARAM_bpe_dir, &env, NULL, 0); /* a string has no bad value */
    const char *given = dir ? dir : env && *env ? env : NULL;
    if (given) {
        if (has_tables(given))
            return given;
        if (why && cap)
            snprintf(why, cap, "GPT-2 tokenizer: no encoder.json and vocab.bpe in %s%s (make "
                     "tokenizer-data fetches them)", given, dir ? "" : " ($WEFT_BPE_DIR)");
        return NULL;
    }
    const char *tries[] = { WEFT_BPE_INSTALLED_DIR,
#ifdef WEFT_BPE_BUILD_DIR
                            WEFT_BPE_BUILD_DIR,
#endif
    };
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++)
        if (has_tables(tries[i]))
            return tries[i];
    if (why && cap)
        snprintf(why, cap, "GPT-2 tokenizer: no encoder.json and vocab.bpe in %s%s%s (run `make "
                 "tokenizer-data`, or set WEFT_BPE_DIR to the folder that has them)",
                 tries[0], sizeof tries / sizeof *tries > 1 ? " nor in " : "",
                 sizeof tries / sizeof *tries > 1 ? tries[sizeof tries / sizeof *tries - 1] : "");
    return NULL;
}

int weft_bpe_open(weft_bpe **out, const char *dir, char *why, size_t why_cap)
{
    if (why && why_cap)
        why[0] = 0;
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    const char *d = find_dir(dir, why, why_cap);
    if (!d)
        return WEFT_ECONFIG;
    weft_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return WEFT_ENOMEM;
    int rc = bpe_classes_init(b);
    if (rc == 0)
        rc = bpe_cache_init(&b->cache, CACHE_ENTRIES);
    if (rc == 0)
        rc = bpe_load(b, d, why, why_cap);
    if (rc != 0) {
        if (rc == WEFT_ENOMEM && why && why_cap)
            snprintf(why, why_cap, "GPT-2 tokenizer: out of memory");
        weft_bpe_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void weft_bpe_free(weft_bpe *b)
{
    if (!b)
        return;
    free(b->bytes);
    free(b->off);
    free(b->ids);
    free(b->pair_keys);
    free(b->pair_vals);
    free(b->bmp_class);
    bpe_cache_free(&b->cache);
    free(b->work);
    free(b);
}

int weft_bpe_vocab(const weft_bpe *b)
{
    return b ? b->vocab : 0;
}

int weft_bpe_eot(const weft_bpe *b)
{
    return b ? b->eot : -1;
}

int weft_bpe_unicode(void)
{
    return bpe_classes_full();
}

/* One piece s[0..n) (n >= 1) into out, which has room for n. */
static int encode_piece(weft_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *count)
{
    if (n == 1) {
        out[0] = b->byte_token[s[0]];
        *count = 1;
        return 0;
    }
    uint64_t h = bpe_hash_bytes(s, n);
    const int32_t *hit = n <= CACHE_MAX_BYTES ? bpe_cache_get(&b->cache, s, n, h, count) : NULL;
    if (hit) {
        memcpy(out, hit, *count * sizeof *out);
        return 0;
    }
    int32_t whole = bpe_token_id(b, s, n);
    if (whole >= 0) {
        out[0] = whole;
        *count = 1;
    } else {
        int rc = bpe_merge(b, s, n, out, count);
        if (rc)
            return rc;
    }
    return n <= CACHE_MAX_BYTES ? bpe_cache_put(&b->cache, s, n, h, out, *count) : 0;
}

static int encode_ordinary(weft_bpe *b, const unsigned char *s, size_t n, int32_t *out,
                           size_t *m)
{
    for (size_t i = 0; i < n;) {
        size_t e = bpe_split_next(b, s, n, i), k;
        int rc = encode_piece(b, s + i, e - i, out + *m, &k);
        if (rc)
            return rc;
        *m += k;
        i = e;
    }
    return 0;
}

int weft_bpe_encode(weft_bpe *b, const void *text, size_t n, unsigned flags, int32_t *tokens,
                    size_t cap, size_t *count)
{
    if (!b || (!text && n) || (!tokens && n) || !count || cap < n || (flags & ~WEFT_BPE_SPECIAL))
        return WEFT_EINVAL;
    const unsigned char *s = text;
    size_t m = 0, eot_len = sizeof BPE_EOT_TEXT - 1;
    *count = 0;
    if (flags & WEFT_BPE_SPECIAL) {
        /* As tiktoken: the text between special tokens is encoded alone. */
        const unsigned char *p;
        while ((p = memmem(s, n, BPE_EOT_TEXT, eot_len)) != NULL) {
            int rc = encode_ordinary(b, s, (size_t)(p - s), tokens, &m);
            if (rc)
                return rc;
            tokens[m++] = b->eot;
            n -= (size_t)(p - s) + eot_len;
            s = p + eot_len;
        }
    }
    int rc = encode_ordinary(b, s, n, tokens, &m);
    *count = m;
    return rc;
}

int weft_bpe_decode(const weft_bpe *b, const int32_t *tokens, size_t n, char *text, size_t cap,
                    size_t *len)
{
    if (!b || (!tokens && n) || (!text && cap) || !len)
        return WEFT_EINVAL;
    size_t at = 0, eot_len = sizeof BPE_EOT_TEXT - 1;
    for (size_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= b->vocab)
            return WEFT_EINVAL;
        const char *p = t == b->eot ? BPE_EOT_TEXT : (const char *)b->bytes + b->off[t];
        size_t k = t == b->eot ? eot_len : b->off[t + 1] - b->off[t];
        if (at < cap)
            memcpy(text + at, p, cap - at < k ? cap - at : k);
        at += k;
    }
    *len = at;
    return 0;
}
