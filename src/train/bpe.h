/* GPT-2's byte-level BPE (weft_bpe_* in weft.h): what its files share.
 *
 * A token is a byte string; its id is also its merge rank (tiktoken's
 * rule: of all adjacent pairs whose concatenation is a token, the one of
 * lowest id merges first, the leftmost on a tie). The pair table maps two
 * ids to the id of their concatenation, for every way of cutting every
 * token in two, so a merge is one integer-keyed look-up. */
#ifndef WEFT_TRAIN_BPE_H
#define WEFT_TRAIN_BPE_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

#define BPE_GPT2_VOCAB 50257
#define BPE_GPT2_EOT 50256
#define BPE_EOT_TEXT "<|endoftext|>"

/* Character classes of the pre-tokenizer (bpe_unicode.c). */
enum { BPE_OTHER = 0, BPE_LETTER = 1, BPE_NUMBER = 2, BPE_SPACE = 3 };

/* Words already encoded: piece bytes -> their tokens. */
typedef struct {
    uint64_t *slots;      /* hash << 32 | entry index + 1; 0 empty */
    size_t mask;          /* slots - 1 */
    uint32_t *entries;    /* per entry: key offset, key length, tokens offset, count */
    size_t n, max;        /* entries held; cleared when n reaches max */
    unsigned char *keys;
    size_t keys_len, keys_cap;
    int32_t *toks;
    size_t toks_len, toks_cap;
} bpe_cache;

struct weft_bpe {
    int vocab;               /* ordinary tokens + <|endoftext|> */
    int eot;
    unsigned char *bytes;    /* every token's bytes, back to back */
    uint32_t *off;           /* token i is bytes[off[i] .. off[i+1]) */
    int32_t byte_token[256]; /* the token of each single byte */
    int32_t *ids;            /* bytes -> id, open addressing, -1 empty */
    size_t ids_mask;
    uint64_t *pair_keys;     /* (a << 32 | b) + 1; 0 empty */
    int32_t *pair_vals;      /* id of a's bytes followed by b's */
    size_t pair_mask;
    uint8_t *bmp_class;      /* class of each code point below 0x10000 */
    bpe_cache cache;
    void *work;              /* scratch of bpe_merge for long pieces */
    size_t work_cap;
};

/* bpe_load.c: encoder.json and vocab.bpe of dir into b's tables. */
int bpe_load(weft_bpe *b, const char *dir, char *why, size_t why_cap);

/* The id of the token whose bytes are s[0..n), or -1. */
int32_t bpe_token_id(const weft_bpe *b, const unsigned char *s, size_t n);
/* The id of the concatenation of tokens a and b, or -1. */
static inline int32_t bpe_pair(const weft_bpe *b, int32_t x, int32_t y)
{
    uint64_t key = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & b->pair_mask;
    for (;; i = (i + 1) & b->pair_mask) {
        if (b->pair_keys[i] == key)
            return b->pair_vals[i];
        if (b->pair_keys[i] == 0)
            return -1;
    }
}
uint64_t bpe_hash_bytes(const unsigned char *s, size_t n);

/* bpe_merge.c: the tokens of one piece of n bytes into out (room for n);
 * returns the count. bpe_merge_scan is the plain quadratic form that the
 * tests hold the heap form to. */
int bpe_merge(weft_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *count);
size_t bpe_merge_scan(const weft_bpe *b, const unsigned char *s, size_t n, int32_t *out);

/* bpe_unicode.c: the class table of b (bmp_class); the class of code point
 * cp; 1 if the table came from UnicodeData.txt, 0 if ASCII only. */
int bpe_classes_init(weft_bpe *b);
int bpe_class_of(const weft_bpe *b, uint32_t cp);
int bpe_classes_full(void);
/* GPT-2's printable stand-in for each byte, as encoder.json spells it. */
uint32_t bpe_byte_char(unsigned char byte);

/* bpe_split.c: the end of the piece that starts at s[i] (i < n). */
size_t bpe_split_next(const weft_bpe *b, const unsigned char *s, size_t n, size_t i);

/* bpe_cache.c */
int bpe_cache_init(bpe_cache *c, size_t max_entries);
void bpe_cache_free(bpe_cache *c);
/* The cached tokens of s[0..n) (and their count), or NULL. */
const int32_t *bpe_cache_get(const bpe_cache *c, const unsigned char *s, size_t n, uint64_t h,
                             size_t *count);
int bpe_cache_put(bpe_cache *c, const unsigned char *s, size_t n, uint64_t h, const int32_t *t,
                  size_t count);

#endif
