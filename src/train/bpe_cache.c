/* The word cache of the encoder: text repeats its words, so most pieces
 * were encoded before and cost one hash look-up. Bounded: when it holds
 * max entries it is emptied and fills again with what the text uses now
 * (simpler than an eviction order, and a text's words change slowly). */
#include "train/bpe.h"

#include <stdlib.h>
#include <string.h>

int bpe_cache_init(bpe_cache *c, size_t max_entries)
{
    memset(c, 0, sizeof *c);
    size_t slots = 1;
    while (slots < 2 * max_entries)
        slots *= 2;
    c->mask = slots - 1;
    c->max = max_entries;
    c->slots = calloc(slots, sizeof *c->slots);
    c->entries = malloc(max_entries * 4 * sizeof *c->entries);
    if (!c->slots || !c->entries) {
        bpe_cache_free(c);
        return WEFT_ENOMEM;
    }
    return 0;
}

void bpe_cache_free(bpe_cache *c)
{
    free(c->slots);
    free(c->entries);
    free(c->keys);
    free(c->toks);
    memset(c, 0, sizeof *c);
}

const int32_t *bpe_cache_get(const bpe_cache *c, const unsigned char *s, size_t n, uint64_t h,
                             size_t *count)
{
    uint64_t tag = h >> 32 << 32;
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t v = c->slots[i];
        if (v == 0)
            return NULL;
        if ((v & 0xffffffff00000000ull) != tag)
            continue;
        const uint32_t *e = c->entries + 4 * ((v & 0xffffffffu) - 1);
        if (e[1] == n && memcmp(c->keys + e[0], s, n) == 0) {
            *count = e[3];
            return c->toks + e[2];
        }
    }
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 4096;
    while (ncap < need)
        ncap *= 2;
    void *q = realloc(*p, ncap * elem);
    if (!q)
        return WEFT_ENOMEM;
    *p = q;
    *cap = ncap;
    return 0;
}

int bpe_cache_put(bpe_cache *c, const unsigned char *s, size_t n, uint64_t h, const int32_t *t,
                  size_t count)
{
    if (c->n == c->max || c->keys_len + n > UINT32_MAX || c->toks_len + count > UINT32_MAX) {
        memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
        c->n = c->keys_len = c->toks_len = 0;
    }
    void *keys = c->keys, *toks = c->toks;
    if (grow(&keys, &c->keys_cap, c->keys_len + n, 1) != 0)
        return WEFT_ENOMEM;
    c->keys = keys;
    if (grow(&toks, &c->toks_cap, c->toks_len + count, sizeof *t) != 0)
        return WEFT_ENOMEM;
    c->toks = toks;
    uint32_t *e = c->entries + 4 * c->n;
    e[0] = (uint32_t)c->keys_len;
    e[1] = (uint32_t)n;
    e[2] = (uint32_t)c->toks_len;
    e[3] = (uint32_t)count;
    memcpy(c->keys + c->keys_len, s, n);
    memcpy(c->toks + c->toks_len, t, count * sizeof *t);
    c->keys_len += n;
    c->toks_len += count;
    size_t i = (size_t)h & c->mask;
    while (c->slots[i])
        i = (i + 1) & c->mask;
    c->slots[i] = (h >> 32 << 32) | (uint64_t)(c->n + 1);
    c->n++;
    return 0;
}
